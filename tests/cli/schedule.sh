# --lr-schedule / --warmup: the learning rate the last step used (saved in the checkpoint as the
# optimizer's lr) against the closed form of amp_lr_at.
. tests/cli/lib.sh

mkdir -p "$TMP/idx"
idx_pair train 256 0
idx_pair t10k 64 1

# last_lr FLAGS...: trains 10 steps at base lr 0.05 and prints the lr the 10th step used.
last_lr() {
    "$AMP" train --data "$TMP/idx" --batch 32 --steps 10 --lr 0.05 --threads 1 --quiet --no-eval \
        --checkpoint "$TMP/c.safetensors" "$@" >/dev/null 2>"$TMP/err" || { echo "failed: $(cat "$TMP/err")"; return; }
    "$AMP" inspect "$TMP/c.safetensors" | sed -n 's/.*amp\.optimizer\.lr = //p'
}
# close GOT WANT LABEL: |got - want| <= 1e-6 * want (fp32 rounding of a double formula)
close() { if awk "BEGIN { d = $1 - $2; if (d < 0) d = -d; exit !(d <= 1e-6 * $2 + 1e-12) }" 2>/dev/null; then pass; else fail "$3: lr $1, expected $2"; fi; }

# cosine over 10 steps, step index 9: 0.05 * (1 + cos(0.9 pi)) / 2
close "$(last_lr --lr-schedule cosine)" "$(awk 'BEGIN { printf "%.9g", 0.05 * (1 + cos(0.9 * 3.14159265358979)) / 2 }')" "cosine"
# warmup 4 then cosine over the remaining 6 steps: step 9 is s = 5 of 6
close "$(last_lr --lr-schedule cosine --warmup 4)" "$(awk 'BEGIN { printf "%.9g", 0.05 * (1 + cos(5 / 6 * 3.14159265358979)) / 2 }')" "warmup + cosine"
# warmup longer than the run: step 9 of a 20-step warmup is 0.05 * 10 / 20
close "$(last_lr --warmup 20)" 0.025 "warmup only"
close "$(last_lr --lr-schedule constant)" 0.05 "constant"
# the image models' default is the cosine decay
close "$(last_lr)" "$(awk 'BEGIN { printf "%.9g", 0.05 * (1 + cos(0.9 * 3.14159265358979)) / 2 }')" "default (cosine)"

run "$AMP" train --lr-schedule linear
expect_rc 2 "an unknown schedule"
expect_err_has "--lr-schedule wants constant or cosine" "names the choices"

finish
