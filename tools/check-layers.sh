#!/bin/sh
# Checks amp's layering against the one table of rules, src/README.md's "## Layers":
#   - a file under src/X/ includes (quoted, "../Y/x.h") only its own folder's files, the public headers
#     ("amp/..."), and folders Y that X's row names;
#   - with --objects, the same for calls: every undefined symbol of src/X/f.o that another object
#     under src/ defines (nm) must be defined in X or in a folder X's row names, so a call through a
#     public header counts too;
#   - x86 intrinsics headers (<*intrin.h>) only in kernels' ISA folders (src/kernels/x86/);
#   - the CLI (tools/amp/) and the examples include public headers or files beside them, nothing else;
#   - the table names every folder of src/, each once, and is a DAG.
# Prints each violation, then "N passed, N failed" (N: files checked, plus the table's own errors),
# and exits 1 when anything failed. POSIX sh, awk, find and (for --objects) nm: no python.
#
#   sh tools/check-layers.sh [--objects DIR] [--root DIR]
#       DIR (--objects): a build's object tree, build/obj (src/X/f.c is DIR/src/X/f.o); objects whose
#       source is gone are skipped; build first, a stale object reports stale calls.
#       DIR (--root): the tree to check (default: the checkout holding this script).
#   sh tools/check-layers.sh --self-test
#       checks the check: a copy of the tree with forbidden includes, a forbidden call and a cycle
#       injected must fail with the expected messages.
set -u
root=$(cd "$(dirname "$0")/.." && pwd)
objects=
nm_listing= # for the self-test: a file standing in for nm's output
self_test=0
usage() { sed -n '2,/^set -u/p' "$0" | sed -e '/^set -u/d' -e 's/^# \{0,1\}//'; }
while [ $# -gt 0 ]; do
    case $1 in
    --objects) objects=${2:?--objects needs a directory}; shift 2 ;;
    --root) root=${2:?--root needs a directory}; shift 2 ;;
    --nm-listing) nm_listing=${2:?--nm-listing needs a file}; shift 2 ;;
    --self-test) self_test=1; shift ;;
    -h | --help) usage; exit 0 ;;
    *) echo "check-layers: unknown argument '$1' (try --help)" >&2; exit 2 ;;
    esac
done

# self_test: runs this script on copies of the tree; prints "N passed, N failed" over its own checks.
self_test() {
    script=$root/tools/check-layers.sh
    tmp=$(mktemp -d) || exit 2
    trap 'rm -rf "$tmp"' EXIT
    mkdir "$tmp/tree" && cp -R "$root/src" "$tmp/tree/" || exit 2
    printf '#include "../train/train_internal.h"\n' >>"$tmp/tree/src/core/status.c"
    printf '#include "../../ops/op_util.h"\n' >>"$tmp/tree/src/kernels/ref/elem_ref.c"
    printf '#include <immintrin.h>\n' >>"$tmp/tree/src/tensor/arena.c"
    # nm -A -g's format: a use of a function that a folder below may not call
    printf '%s\n' 'obj/src/autocast/autocast.o:                 U amp_checked_fn' \
        'obj/src/ops/shape.o:0000000000000000 T amp_checked_fn' >"$tmp/nm.txt"
    sp=0 sf=0
    rc=0
    sh "$script" --root "$tmp/tree" --objects obj --nm-listing "$tmp/nm.txt" >"$tmp/out" 2>&1 || rc=$?
    if [ "$rc" = 1 ]; then sp=$((sp + 1)); else sf=$((sf + 1)); echo "FAIL: exit status $rc with forbidden includes, expected 1"; fi
    for want in \
        'src/core/status.c includes src/train/train_internal.h: core may not include train' \
        'src/kernels/ref/elem_ref.c includes src/ops/op_util.h: kernels may not include ops' \
        'src/tensor/arena.c includes <immintrin.h>: intrinsics belong in src/kernels/x86/' \
        'src/autocast/autocast.c calls amp_checked_fn (src/ops/shape.c): autocast may not use ops'; do
        if grep -qF -- "$want" "$tmp/out"; then sp=$((sp + 1)); else sf=$((sf + 1)); echo "FAIL: no '$want' in:"; cat "$tmp/out"; fi
    done
    # a cycle: core may use cpu, which uses core
    # shellcheck disable=SC2016 # the backquotes are the table's
    sed 's/^| `core` *| (nothing) /| `core` | cpu /' "$root/src/README.md" >"$tmp/tree/src/README.md"
    rc=0
    sh "$script" --root "$tmp/tree" >"$tmp/out" 2>&1 || rc=$?
    cycle=$(grep '^src/README.md: the table has a cycle among:' "$tmp/out")
    if [ "$rc" = 1 ] && [ "$cycle" = 'src/README.md: the table has a cycle among: core cpu' ]; then
        sp=$((sp + 1))
    else
        sf=$((sf + 1)); echo "FAIL: a cycle in the table went unreported (exit status $rc):"; cat "$tmp/out"
    fi
    echo "$sp passed, $sf failed"
    [ "$sf" = 0 ]
}
if [ "$self_test" = 1 ]; then
    self_test
    exit $?
fi

cd "$root" || exit 2
[ -f src/README.md ] || { echo "check-layers: no src/README.md under $root" >&2; exit 2; }
tmp=$(mktemp) || exit 2
trap 'rm -f "$tmp"' EXIT

files=$(find src tools/amp examples -type f \( -name '*.c' -o -name '*.h' \) 2>/dev/null | LC_ALL=C sort)
folders=$(cd src && find . -mindepth 1 -maxdepth 1 -type d | sed 's|^\./||' | LC_ALL=C sort | tr '\n' ' ')

# nm's view of the objects, "OBJECT: [ADDRESS] TYPE NAME" a line (external symbols only), after a
# first line "#" (awk counts its input files by their first lines).
echo '#' >"$tmp"
if [ -n "$nm_listing" ]; then
    cat "$nm_listing" >>"$tmp"
elif [ -n "$objects" ]; then
    if command -v nm >/dev/null 2>&1; then
        objs=
        for f in $files; do
            case $f in src/*.c) o=$objects/${f%.c}.o; [ -f "$o" ] && objs="$objs $o" ;; esac
        done
        # shellcheck disable=SC2086 # word splitting intended: paths under src/ have no spaces
        [ -n "$objs" ] && nm -A -g $objs >>"$tmp" 2>/dev/null
    else
        echo "check-layers: nm not found: calls are not checked" >&2
    fi
fi

# Arguments: the table, nm's listing twice (definitions, then uses), then every file checked.
# shellcheck disable=SC2086
set -- $files
LC_ALL=C awk -v folders="$folders" -v objects="$objects" -v n_files=$# '
function trim(s) { gsub(/^[ \t`]+|[ \t`]+$/, "", s); return s }
function fail(file, msg) {
    print file " " msg
    if (!(file in failed)) { failed[file] = 1; n_failed++ }
}
# path with "." and ".." resolved (a leading ".." is kept)
function norm(path,   n, i, k, parts, out, res) {
    n = split(path, parts, "/"); k = 0
    for (i = 1; i <= n; i++) {
        if (parts[i] == "" || parts[i] == ".") continue
        if (parts[i] == ".." && k > 0 && out[k] != "..") { k--; continue }
        out[++k] = parts[i]
    }
    res = ""
    for (i = 1; i <= k; i++) res = res (i > 1 ? "/" : "") out[i]
    return res
}
function folder_of(path,   parts) {
    if (path !~ /^src\/[^\/]+\//) return ""
    split(path, parts, "/"); return parts[2]
}
function source_of(obj) {
    if (objects != "" && index(obj, objects "/") == 1) obj = substr(obj, length(objects) + 2)
    sub(/\.o$/, ".c", obj); return obj
}
function may(x, y) { return x == y || ((x, y) in allowed) }

# ---- the table ----
FNR == 1 { arg++ }
arg == 1 && /^## / { in_layers = ($0 ~ /^## Layers/); next }
arg == 1 && in_layers && /^\|/ {
    n = split($0, cell, "|")
    name = trim(cell[2]); deps = trim(cell[n - 1])
    if (name == "folder" || name ~ /^-/ || name == "") next
    if (name in row) { table_error("src/README.md: two rows for " name); next }
    row[name] = 1; rows[++n_rows] = name
    gsub(/`|\(nothing\)/, "", deps)
    m = split(deps, d, /[ ,]+/)
    for (i = 1; i <= m; i++) if (d[i] != "") { allowed[name, d[i]] = 1; dep_list[name] = dep_list[name] " " d[i] }
    next
}
arg == 1 { next }

# ---- nm: definitions (pass 1), then uses (pass 2) ----
(arg == 2 || arg == 3) && /^#/ { next }
arg == 2 || arg == 3 {
    obj = $0; sub(/:.*/, "", obj); rest = substr($0, length(obj) + 2)
    k = split(rest, w, " ")
    src = source_of(obj)
    if (arg == 2) { if (k == 3 && w[2] ~ /^[A-TV-Z]$/) def[w[3]] = src; next }
    if (k != 2 || w[1] != "U" || !(w[2] in def)) next
    x = folder_of(src); y = folder_of(def[w[2]])
    if (x == "" || y == "" || may(x, y)) next
    key = src SUBSEP y
    if (!(key in call_syms)) { calls[++n_calls] = key; call_first[key] = w[2]; call_def[key] = def[w[2]] }
    call_syms[key] = call_syms[key] + 1
    next
}

# ---- the sources ----
FNR == 1 { file = FILENAME; dir = file; sub(/\/[^\/]*$/, "", dir); x = folder_of(file) }
/^[ \t]*#[ \t]*include[ \t]*</ {
    hdr = $0; sub(/^[^<]*</, "", hdr); sub(/>.*/, "", hdr)
    if (x != "" && hdr ~ /(intrin|^arm_neon|^arm_sve)\.h$/ && (file !~ /^src\/kernels\/[^\/]+\// || file ~ /^src\/kernels\/ref\//))
        fail(file, "includes <" hdr ">: intrinsics belong in src/kernels/x86/")
    next
}
/^[ \t]*#[ \t]*include[ \t]*"/ {
    inc = $0; sub(/^[^"]*"/, "", inc); sub(/".*/, "", inc)
    if (inc ~ /^amp\// || inc == "amp.h") next
    if (x == "") { # the CLI, the examples
        if (inc ~ /\//) fail(file, "includes \"" inc "\": the CLI and the examples use the public API only (\"amp/...\")")
        next
    }
    target = norm(dir "/" inc); y = folder_of(target)
    if (y == "") { fail(file, "includes " target ": outside the folders of src/ (public headers are \"amp/...\")"); next }
    if (!may(x, y)) fail(file, "includes " target ": " x " may not include " y)
    next
}

function table_error(msg) { print msg; n_table_errors++ }
END {
    for (c = 1; c <= n_calls; c++) {
        split(calls[c], kv, SUBSEP); f = kv[1]; y = kv[2]
        more = call_syms[calls[c]] > 1 ? " and " (call_syms[calls[c]] - 1) " more" : ""
        fail(f, "calls " call_first[calls[c]] more " (" call_def[calls[c]] "): " folder_of(f) " may not use " y)
    }
    n = split(folders, fl, " ")
    for (i = 1; i <= n; i++) { is_folder[fl[i]] = 1; if (!(fl[i] in row)) table_error("src/README.md: src/" fl[i] "/ has no row in the table") }
    for (r = 1; r <= n_rows; r++) {
        if (!(rows[r] in is_folder)) table_error("src/README.md: the row " rows[r] " names no folder of src/")
        m = split(dep_list[rows[r]], d, " ")
        for (i = 1; i <= m; i++) if (!(d[i] in row)) table_error("src/README.md: " rows[r] " may include " d[i] ", which has no row")
    }
    # Kahn: drop rows whose uses are all dropped; what remains holds a cycle.
    left = n_rows
    do {
        progress = 0
        for (r = 1; r <= n_rows; r++) {
            if (rows[r] in done) continue
            m = split(dep_list[rows[r]], d, " "); ready = 1
            for (i = 1; i <= m; i++) if (d[i] != rows[r] && (d[i] in row) && !(d[i] in done)) ready = 0
            if (ready) { done[rows[r]] = 1; left--; progress = 1 }
        }
    } while (progress && left > 0)
    # Then drop what no row left uses: the rest lie on cycles.
    do {
        progress = 0
        for (r = 1; r <= n_rows; r++) {
            if (rows[r] in done) continue
            used = 0
            for (q = 1; q <= n_rows; q++) if (q != r && !(rows[q] in done) && ((rows[q], rows[r]) in allowed)) used = 1
            if (!used) { done[rows[r]] = 1; progress = 1 }
        }
    } while (progress)
    if (left > 0) {
        cyc = ""
        for (r = 1; r <= n_rows; r++) if (!(rows[r] in done)) cyc = cyc " " rows[r]
        table_error("src/README.md: the table has a cycle among:" cyc)
    }
    print (n_files - n_failed) " passed, " (n_failed + n_table_errors) " failed"
    exit (n_failed + n_table_errors > 0 ? 1 : 0)
}
' src/README.md "$tmp" "$tmp" "$@"
