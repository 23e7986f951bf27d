#!/bin/sh
# Lists the longest C functions of the library and the CLI (src/ and tools/amp/), one a line:
#     LINES FILE:LINE NAME
# LINES counts the definition from its first line (the return type) to its closing brace. With
# --max L it also exits 1, naming them on stderr, when a function is longer than L lines.
#
#   sh tools/longest-functions.sh [N] [--max L]      (N: how many to list, 25 by default)
#
# It relies on the code's style, not on a C parser: a definition starts in column 0 with a line
# holding the name and "(" (no "=" before it, so tables are not functions), its signature ends with
# "{", and its body ends at the first "}" in column 0. Prototypes (ending with ";") are skipped.
set -u
n=25
max=
while [ $# -gt 0 ]; do
    case $1 in
    --max) max=${2:?--max needs a number of lines}; shift 2 ;;
    -h | --help) sed -n '2,/^set -u/p' "$0" | sed -e '/^set -u/d' -e 's/^# \{0,1\}//'; exit 0 ;;
    *[!0-9]* | '') echo "longest-functions: unknown argument '$1' (try --help)" >&2; exit 2 ;;
    *) n=$1; shift ;;
    esac
done
cd "$(dirname "$0")/.." || exit 2

list=$(mktemp) || exit 2
trap 'rm -f "$list"' EXIT
# shellcheck disable=SC2046 # the file names have no spaces
LC_ALL=C awk '
FNR == 1 { state = 0; prefix = 0 }
# a signature goes on in indented lines (or a "{" alone): anything else in column 0 ends the
# candidate (a macro call such as PACK_F32_FN(...) that makes a function out of sight)
state == 1 && FNR != start && !/^[ \t]+[^ \t]/ && !/^\{/ { state = 0 }
state == 0 && /^[A-Za-z_]/ {
    line = $0
    gsub(/__attribute__\(\(([^()]|\([^()]*\))*\)\)/, "", line)
    head = line; sub(/\(.*/, "", head)
    if (index(line, "(") == 0) { # "static void" above the name: part of the definition to come
        if (line !~ /[;={]/) prefix = FNR
        next
    }
    if (index(head, "=") > 0) next # a table
    name = head; sub(/[ \t]+$/, "", name); sub(/.*[^A-Za-z0-9_]/, "", name)
    start = prefix == FNR - 1 ? prefix : FNR; state = 1
}
state == 1 {
    if ($0 ~ /;[ \t]*(\/\*.*\*\/)?[ \t]*$/ && $0 !~ /\{/) { state = 0; next } # a prototype
    if (FNR == start || FNR == start + 1) { if ($0 ~ /^[A-Za-z_].*\{.*\}[ \t]*$/) { # one line
        print FNR - start + 1, FILENAME ":" start, name; state = 0; next } }
    if ($0 ~ /\{[ \t]*$/) state = 2
    next
}
state == 2 && /^}/ { print FNR - start + 1, FILENAME ":" start, name; state = 0 }
' $(find src tools/amp -name '*.c' | LC_ALL=C sort) | LC_ALL=C sort -k1,1nr -k2,2 >"$list"

head -n "$n" "$list"
if [ -n "$max" ]; then
    over=$(awk -v max="$max" '$1 > max' "$list")
    if [ -n "$over" ]; then
        echo "longest-functions: $(printf '%s\n' "$over" | wc -l | tr -d ' ') functions are longer than $max lines:" >&2
        printf '%s\n' "$over" >&2
        exit 1
    fi
fi
