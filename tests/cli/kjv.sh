# The README's King James Bible recipe: bible-kjv-text keeps the text in the `bible` reader's own
# compressed format, so it is exported as plain text with that reader, the verse references cut off,
# and a text model trains on the file. Checks the export (every verse, first and last as printed in
# the KJV) and a short lstm run on it. Skipped (a "skip:" line) where the reader is not installed
# (Debian: apt-get install bible-kjv; .ci/run installs it).
. "$(dirname "$0")/lib.sh"

if ! command -v bible >/dev/null 2>&1; then
    echo "skip: the bible reader is not installed (Debian: apt-get install bible-kjv)"
    finish
    exit 0
fi

bible -f Gen1:1-Rev22:21 2>/dev/null | cut -d' ' -f2- >"$TMP/kjv.txt"
lines=$(wc -l <"$TMP/kjv.txt")
if [ "$lines" = 31102 ]; then pass; else fail "export: $lines lines, expected the KJV's 31102 verses"; fi
if [ "$(head -n 1 "$TMP/kjv.txt")" = "In the beginning God created the heaven and the earth." ]; then pass; else
    fail "export: first line '$(head -n 1 "$TMP/kjv.txt")'"; fi
if [ "$(tail -n 1 "$TMP/kjv.txt")" = "The grace of our Lord Jesus Christ be with you all. Amen." ]; then pass; else
    fail "export: last line '$(tail -n 1 "$TMP/kjv.txt")'"; fi

run "$AMP" train --model lstm --data "$TMP/kjv.txt" --steps 10 --batch 4 --hidden 16 --embed 8 --context 16 \
    --eval-batches 2 --threads 2 --precision amp-bf16 --json
expect_rc 0 "lstm on the KJV"
expect_json_eq '[.model, .precision, .steps] + [.bits_per_char > 0 and .bits_per_char < 8]' \
    '["lstm","amp-bf16",10,true]' "lstm on the KJV: JSON"

finish
