# Golden tests of `amp explain`: the facts it computes live from amp's conversions, checked against
# closed-form values (IEEE 754 binary16, bfloat16, OCP fp8 v1.0), in the text and in the --json line.
. "$(dirname "$0")/lib.sh"

# expect_out_match ERE LABEL: some stdout line matches the extended regular expression
expect_out_match() { if grep -qE -- "$1" "$TMP/out"; then pass; else fail "$2: no stdout line matches /$1/"; fi; }

# ---- text -----------------------------------------------------------------------------------------
run "$AMP" explain
expect_rc 0 "explain"
expect_err_lines 0 "explain writes nothing to stderr"
expect_out_match '^ +f16 +5 +10 +65504 ' "f16 row: 5/10 bits, max 65504"
expect_out_match '^ +f8e4m3 +4 +3 +448 .*nan \(no inf\)' "f8e4m3 row: max 448, overflow to nan"
expect_out_match '^ +f16 +1\.9990234 x 2\^15 +2\^-14 +2\^-24 +2\^-10 ' "f16 in powers of two"
expect_out_match '^ +f32 +1 \+ 0\.0001 = 1\.0001 +kept +2\^-24$' "fp32 keeps 1 + 0.0001"
expect_out_match '^ +f16 +1 \+ 0\.0001 = 1 +lost +2\^-11$' "fp16: 1 + 0.0001 = 1, threshold 2^-11"
expect_out_match '^ +bf16 +1 \+ 0\.0001 = 1 +lost +2\^-8$' "bf16 loses 1 + 0.0001 too"
expect_out_has "an fp16 update of 2^-11 of the weight or less is lost" "vanishing-update takeaway"
expect_out_match '^ +fp32 accumulator +65536 ' "fp32 accumulator sums to 65536"
expect_out_match '^ +fp16 accumulator .* 32768 +never overflowed' "fp16 accumulator stalls at 32768"
expect_out_match '^ +the fp32 sum stored in fp16 +inf +65536 > fp16 max 65504' "65536 is inf in fp16"
expect_out_has "stalled at step 2049" "step where the fp16 sum stalls"
expect_out_match '^ +1e-08 +\| 0 +zero +100% +\| [0-9.e-]+ +normal ' "1e-8 flushes unscaled, survives scaled"
expect_out_has "0 at or below 2^-25" "fp16 zero threshold"
expect_out_has "subnormal down to 2^-40" "scaled floor 2^-40"
expect_out_has "above 65504 / S = 0.9995117" "scaled overflow threshold"
expect_out_has "9 of the 9 gradients above survive in bf16" "bf16 keeps every sample gradient"
expect_out_match '^ +f8e5m2 +max \+-57344,' "e5m2 range"
if grep -q "$(printf '\033')" "$TMP/out"; then fail "text output has escape sequences"; else pass; fi
for n in 1 2 3 4 5 6; do
    expect_out_match "^$n\. " "section $n heading"
done
[ "$(grep -c '^   takeaway: ' "$TMP/out")" = 6 ] && pass || fail "expected one takeaway per section"

# ---- JSON -----------------------------------------------------------------------------------------
run "$AMP" explain --json
expect_rc 0 "explain --json"
expect_err_lines 0 "explain --json writes nothing to stderr"
[ "$(wc -l <"$TMP/out")" = 1 ] && pass || fail "--json prints exactly one line"
expect_json_eq 'type' '"object"' "the line is one JSON object"
expect_json_eq '.formats | keys_unsorted' '["f32","f16","bf16","f8e4m3","f8e5m2"]' "formats, in dtype order"
expect_json_eq '.formats.f32.max == 3.4028234663852886e+38' true "f32 max (2-2^-23)*2^127"
expect_json_eq '.formats.f32.min_subnormal == pow(2; -149)' true "f32 min subnormal 2^-149"
expect_json_eq '.formats.f32.epsilon == pow(2; -23)' true "f32 epsilon 2^-23"
expect_json_eq '.formats.f16.max' 65504 "f16 max"
expect_json_eq '.formats.f16.max_bits' '"0x7BFF"' "f16 max bits"
expect_json_eq '.formats.f16.min_normal == pow(2; -14)' true "f16 min normal 2^-14"
expect_json_eq '.formats.f16.min_subnormal == pow(2; -24)' true "f16 min subnormal 2^-24"
expect_json_eq '.formats.f16.epsilon' 0.0009765625 "f16 epsilon 2^-10"
expect_json_eq '.formats.f16 | [.min_normal_log2, .min_subnormal_log2, .epsilon_log2]' '[-14,-24,-10]' "f16 log2s"
expect_json_eq '.formats.f16.decimal_digits | . > 3.31 and . < 3.32' true "f16 digits 11*log10(2)"
expect_json_eq '.formats.bf16.max == 3.3895313892515355e+38' true "bf16 max (2-2^-7)*2^127"
expect_json_eq '.formats.bf16.min_normal == 1.1754943508222875e-38' true "bf16 min normal 2^-126"
expect_json_eq '.formats.bf16.min_subnormal == pow(2; -133)' true "bf16 min subnormal 2^-133"
expect_json_eq '.formats.bf16.epsilon' 0.0078125 "bf16 epsilon 2^-7"
expect_json_eq '.formats.f8e4m3 | [.max, .min_normal, .min_subnormal, .epsilon, .has_inf, .overflow]' \
    '[448,0.015625,0.001953125,0.125,false,"nan"]' "f8e4m3 facts"
expect_json_eq '.formats.f8e5m2 | [.max, .min_normal_log2, .min_subnormal_log2, .epsilon, .has_inf, .overflow]' \
    '[57344,-14,-16,0.25,true,"inf"]' "f8e5m2 facts"
expect_json_eq '.vanishing_update | [.fp16, .bf16, .threshold_log2, .threshold]' '[1,1,-11,0.00048828125]' \
    "fp16 and bf16 lose 1 + 0.0001; threshold 2^-11"
expect_json_eq '.vanishing_update.fp32 == 1 + 839 * pow(2; -23)' true "fp32 keeps 1.0001 (nearest float: 1 + 839*2^-23)"
expect_json_eq '.vanishing_update.next_fp32_sum_in_fp16' 1.0009765625 "just above the tie rounds up"
expect_json_eq '.vanishing_update.lost_update_log2' '{"f32":-24,"f16":-11,"bf16":-8,"f8e4m3":-4,"f8e5m2":-3}' \
    "lost-update threshold per format"
expect_json_eq '.vanishing_update | [.fp16_weight_after_steps, .fp32_master_after_steps > 1.0999]' '[1,true]' \
    "master weights accumulate what fp16 loses"
expect_json_eq '.fp16_sum_4096x16.fp32_accumulator' 65536 "fp32 accumulator 65536"
expect_json_eq '.fp16_sum_4096x16 | [.fp16_accumulator, .fp16_stall_step, .fp16_spacing_at_stall, .fp16_overflow_step]' \
    '[32768,2049,32,null]' "fp16 accumulator stalls at 32768 (ties to even), never overflows"
expect_json_eq '.fp16_sum_4096x16.fp32_sum_as_fp16' '"inf"' "65536 overflows fp16"
expect_json_eq '.fp16_sum_4096x16 | [.fp16_pairwise_accumulator, .fp16_pairwise_overflow_level]' '["inf",12]' \
    "a pairwise fp16 sum of 4096 x 16 overflows at the last of 12 levels"
expect_json_eq '.gradients | length' 9 "nine sample gradients"
expect_json_eq '[.gradients[] | .fp16_kind]' \
    '["normal","normal","normal","subnormal","subnormal","subnormal","zero","zero","zero"]' "fp16 kinds unscaled"
expect_json_eq '[.gradients[] | .fp16_scaled_kind]' \
    '["inf","inf","normal","normal","normal","normal","normal","normal","subnormal"]' "fp16 kinds scaled by 2^16"
expect_json_eq '[.gradients[] | select(.value < 0.5) | .fp16_scaled_rel_error < 0.001] | all' true \
    "every small gradient is recovered within 0.1% after scaling"
expect_json_eq '.gradients[5].fp16 == pow(2; -23)' true "1e-7 becomes the subnormal 2*2^-24"
expect_json_eq '[.gradients[] | .bf16 != 0 and .bf16_rel_error <= pow(2; -8)] | all' true \
    "bf16 keeps every gradient within 2^-8"
expect_json_eq '.loss_scaling | [.scale, .fp16_full_precision_log2, .fp16_floor_log2, .fp16_zero_at_or_below_log2]' \
    '[65536,-14,-24,-25]' "fp16 underflow thresholds"
expect_json_eq '.loss_scaling | [.scaled_full_precision_log2, .scaled_floor_log2, .scaled_zero_at_or_below_log2]' \
    '[-30,-40,-41]' "thresholds with S = 2^16"
expect_json_eq '.loss_scaling.scaled_overflow_above == 65504 / 65536' true "overflow above 65504/S"
expect_json_eq '.bf16 | [.same_min_normal_as_fp32, .min_subnormal_log2, .gradients_surviving, .one_plus_update]' \
    '[true,-133,9,1]' "bf16 section"
expect_json_eq '.fp8 | [.f8e4m3.max, .f8e5m2.max]' '[448,57344]' "fp8 ranges"
expect_json_eq '.fp8.per_tensor_scaling.values | [.[0].f8e4m3_unscaled, .[1].f8e4m3_unscaled, (.[1].f8e4m3_scaled > 0)]' \
    '[0.001953125,0,true]' "fp8 per-tensor scaling keeps the small value"

# ---- options --------------------------------------------------------------------------------------
run "$AMP" explain --help
expect_rc 0 "explain --help"
expect_out_has "usage: amp explain" "--help prints usage"
expect_out_has '"inf"' "--help documents non-finite numbers in JSON"

run "$AMP" explain --bogus
expect_rc 2 "explain --bogus"
expect_err_lines 1 "unknown option: one stderr line"
expect_err_has "unknown option '--bogus'" "unknown option named"
[ -s "$TMP/out" ] && fail "unknown option: stdout not empty" || pass

finish
