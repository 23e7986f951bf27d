# --inject-nonfinite: a fault drill. With the scaler, every step that got an inf/NaN is skipped (and
# counted), the scale backs off, and training ends where a clean run ends; without a scaler the
# non-finite value reaches the weights, as it would in PyTorch without a GradScaler.
. tests/cli/lib.sh

mkdir -p "$TMP/idx"
idx_pair train 256 0
idx_pair t10k 64 1
COMMON="--data $TMP/idx --batch 32 --steps 40 --threads 1 --quiet --json --precision amp-fp16"

run "$AMP" train $COMMON
expect_rc 0 "clean run"
clean_acc=$(tail -n 1 "$TMP/out" | jq .test_accuracy)
expect_json_eq .injected_steps 0 "a clean run injects nothing"

run "$AMP" train $COMMON --inject-nonfinite 0.2
expect_rc 0 "run with faults injected at 20% of the steps"
inj=$(tail -n 1 "$TMP/out" | jq .injected_steps)
skip=$(tail -n 1 "$TMP/out" | jq .skipped_steps)
acc=$(tail -n 1 "$TMP/out" | jq .test_accuracy)
# 40 draws at p = 0.2: 8 expected; 0 has probability 0.8^40 ~ 1.3e-4 (and the draws are seeded).
if [ "${inj:-0}" -gt 0 ] && [ "$inj" = "$skip" ]; then pass; else fail "injected $inj, skipped $skip: every injected step must be skipped"; fi
expect_json_eq '.final_scale < 65536' true "the scale backed off"
if awk "BEGIN { d = $acc - $clean_acc; exit !(d <= 0.05 && d >= -0.05) }"; then pass; else
    fail "accuracy $acc after the faults, $clean_acc clean: more than 5 points apart"; fi

run "$AMP" train $COMMON --inject-nonfinite 0.2
inj2=$(tail -n 1 "$TMP/out" | jq .injected_steps)
if [ "$inj2" = "$inj" ]; then pass; else fail "the same seed injected $inj then $inj2 faults"; fi

# Half the steps: faults in weight gradients too, whose check backward made as it wrote them
# (amp_ctx_set_backward_grad_check): the drill's write must still be seen.
run "$AMP" train $COMMON --inject-nonfinite 0.5
inj3=$(tail -n 1 "$TMP/out" | jq .injected_steps)
skip3=$(tail -n 1 "$TMP/out" | jq .skipped_steps)
if [ "${inj3:-0}" -gt 0 ] && [ "$inj3" = "$skip3" ]; then pass; else fail "p 0.5: injected $inj3, skipped $skip3"; fi
expect_json_eq '.train_loss != null' true "p 0.5: the loss stayed finite"

# Without a scaler nothing checks: the first fault poisons the weights and the loss.
run "$AMP" train $COMMON --inject-nonfinite 0.2 --scaler off
expect_rc 0 "scaler off: the run completes"
expect_json_eq .skipped_steps 0 "scaler off: nothing skipped"
expect_json_eq .train_loss null "scaler off: the loss became non-finite"

run "$AMP" train --inject-nonfinite 1.5 --steps 1
expect_rc 2 "a probability above 1"
expect_err_has "--inject-nonfinite wants a probability" "names the flag"

finish
