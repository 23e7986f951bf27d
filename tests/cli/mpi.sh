# Data-parallel training under mpirun (Open MPI): the 2-rank loss curve against the 1-rank one with
# the same global batch, a fault on one rank only, resume across rank counts, bad splits, a killed
# rank. Skipped (0 passed) when amp was built without MPI or mpirun is missing, and under the
# sanitizers (Open MPI's own allocations would fill LeakSanitizer's report).
. tests/cli/lib.sh

if ! "$AMP" info | grep -q '^mpi: yes' || ! command -v mpirun >/dev/null 2>&1; then
    echo "mpi.sh: amp built without MPI or no mpirun: skipped"
    finish
    exit 0
fi
case "${EXAMPLE_CFLAGS:-}" in *sanitize*) echo "mpi.sh: skipped under the sanitizers"; finish; exit 0 ;; esac

# As root (CI), Open MPI wants to be told; --oversubscribe: more ranks than cores is fine here.
MPIRUN="mpirun --allow-run-as-root --oversubscribe --mca btl self,vader"
mkdir -p "$TMP/idx"
idx_pair train 256 0
idx_pair t10k 64 1
# A constant learning rate: section 4 resumes 6-step checkpoints into 12-step runs, which the image
# models' default cosine decay (spanning each run's total) would make different runs.
COMMON="--data $TMP/idx --batch 32 --threads 1 --quiet --lr-schedule constant"

# step_losses DIR: the per-step losses of a report, one per line.
step_losses() { jq -r 'select(.type == "step") | .loss' "$1/metrics.jsonl"; }
# max_rel_diff A B N: the largest |a - b| / |a| over the first N lines of two files of numbers.
max_rel_diff() {
    paste "$1" "$2" | head -n "$3" | awk 'BEGIN { m = 0 } { d = $1 - $2; if (d < 0) d = -d; a = $1 < 0 ? -$1 : $1;
        r = a > 0 ? d / a : d; if (r > m) m = r } END { printf "%.3g\n", m }'
}

# 1. Two ranks of 16 samples against one process with the global batch of 32. The only difference
#    is the order of the additions: each rank's GEMMs sum 16 samples and the all-reduce adds the two
#    halves, where one process sums 32 in one GEMM. In fp32 that moves a gradient by at most about
#    32 units in the last place (32 * 2^-24 ~ 2e-6 relative), and 20 steps of SGD on this tiny
#    problem amplify it little: the losses must agree to 1e-5 (measured: 1.6e-7).
run "$AMP" train $COMMON --steps 20 --precision fp32 --no-eval --report "$TMP/one"
expect_rc 0 "1-rank fp32 run"
run $MPIRUN -np 2 "$AMP" train $COMMON --steps 20 --precision fp32 --no-eval --report "$TMP/two" --check-replicas 1 --json
expect_rc 0 "2-rank fp32 run with the replica check every step"
expect_json_eq .ranks 2 "the JSON line reports 2 ranks"
step_losses "$TMP/one" >"$TMP/l1"
step_losses "$TMP/two" >"$TMP/l2"
if [ "$(wc -l <"$TMP/l2")" = 20 ]; then pass; else fail "2-rank report has $(wc -l <"$TMP/l2") steps, not 20 (rank 0 alone writes it)"; fi
d=$(max_rel_diff "$TMP/l1" "$TMP/l2" 20)
if awk "BEGIN { exit !($d <= 1e-5) }"; then pass; else fail "2-rank losses differ from 1-rank by $d (relative), more than 1e-5"; fi

# 2. Gradients sent as bf16 (rounded once on the way out, summed in fp32, rounded once back): each
#    gradient moves by up to 2^-9 relative, so the curve follows fp32's within a few percent early
#    on (measured 0.9% over 20 steps); the ranks stay identical.
run $MPIRUN -np 2 "$AMP" train $COMMON --steps 10 --precision fp32 --no-eval --report "$TMP/twobf" --allreduce-dtype bf16 --check-replicas 1
expect_rc 0 "2-rank run with bf16 gradients on the wire"
step_losses "$TMP/twobf" >"$TMP/l3"
d=$(max_rel_diff "$TMP/l1" "$TMP/l3" 10)
if awk "BEGIN { exit !($d <= 0.02) }"; then pass; else fail "bf16-wire losses differ from fp32 by $d (relative), more than 2%"; fi
run $MPIRUN -np 2 "$AMP" train $COMMON --steps 5 --precision fp16-master --no-eval --check-replicas 1 --allreduce-dtype fp16
expect_rc 0 "2-rank fp16-master run (fp16 gradients summed in fp32)"

# 3. An inf/NaN injected on rank 1 only (after the gradient sum, so rank 0 never sees it): the
#    all-reduced flag makes both skip and back off together; --check-replicas 1 fails the run if
#    their weights ever differ. Rank 0 prints: skipped == injected (summed over the ranks) > 0.
run $MPIRUN -np 2 "$AMP" train $COMMON --steps 12 --precision amp-fp16 --inject-nonfinite 0.3 --inject-rank 1 --check-replicas 1 --json
expect_rc 0 "fault injected on rank 1 only"
inj=$(tail -n 1 "$TMP/out" | jq .injected_steps)
skip=$(tail -n 1 "$TMP/out" | jq .skipped_steps)
if [ "${inj:-0}" -gt 0 ] && [ "$inj" = "$skip" ]; then pass; else fail "injected $inj, skipped $skip on rank 0: expected equal and > 0"; fi
expect_json_eq '.final_scale < 65536' true "the scale backed off on rank 0 too"

# 4. Resume across rank counts: the batch and the data positions are global, so a checkpoint of a
#    2-rank run continues in 1 process (and back) along the same curve (to the reduction-order
#    tolerance above).
run $MPIRUN -np 2 "$AMP" train $COMMON --steps 6 --precision amp-bf16 --no-eval --checkpoint "$TMP/half.safetensors"
expect_rc 0 "2-rank run writes a checkpoint (rank 0)"
run "$AMP" train $COMMON --steps 12 --precision amp-bf16 --no-eval --resume "$TMP/half.safetensors" --json
expect_rc 0 "1 process resumes a 2-rank checkpoint"
resumed=$(tail -n 1 "$TMP/out" | jq .train_loss)
run $MPIRUN -np 2 "$AMP" train $COMMON --steps 12 --precision amp-bf16 --no-eval --json
expect_rc 0 "2-rank 12-step run"
straight=$(tail -n 1 "$TMP/out" | jq .train_loss)
if awk "BEGIN { d = $resumed - $straight; if (d < 0) d = -d; exit !(d <= 1e-3 * $straight) }"; then pass; else
    fail "resumed on 1 rank: train loss $resumed, straight on 2 ranks: $straight"; fi
run "$AMP" train $COMMON --steps 6 --precision amp-bf16 --no-eval --checkpoint "$TMP/one.safetensors"
run $MPIRUN -np 2 "$AMP" train $COMMON --steps 12 --precision amp-bf16 --no-eval --resume "$TMP/one.safetensors" --check-replicas 1
expect_rc 0 "2 ranks resume a 1-process checkpoint, replicas identical"

# 5. A global batch that does not split over the ranks: exit 2 with the reason.
run $MPIRUN -np 2 "$AMP" train --data "$TMP/idx" --batch 33 --steps 2 --threads 1 --quiet
expect_rc 2 "batch 33 over 2 ranks"
expect_err_has "does not split evenly over 2 ranks" "the message says why"

# amp compare is one process's job: under mpirun it says so (exit 2) instead of training twice.
run $MPIRUN -np 2 "$AMP" compare --data "$TMP/idx" --steps 1 --quiet
expect_rc 2 "compare under mpirun"
expect_err_has "under mpirun use \`amp train\`" "compare points at amp train"

# 6. A rank killed mid-run: mpirun stops the other and exits non-zero, well before the timeout.
start=$(date +%s)
( timeout 120 $MPIRUN -np 2 "$AMP" train $COMMON --steps 1000000 --no-eval >"$TMP/kill.out" 2>&1; echo $? >"$TMP/kill.rc" ) &
victim=""
for _ in $(seq 1 100); do
    victim=$(pgrep -f -- "--steps 1000000 --no-eval" | while read -r p; do
        [ "$(ps -o comm= -p "$p")" = amp ] && echo "$p"; done | tail -n 1)
    [ -n "$victim" ] && break
    sleep 0.1
done
sleep 1
if [ -n "$victim" ]; then kill -9 "$victim"; pass; else fail "no rank process to kill"; fi
wait
rc=$(cat "$TMP/kill.rc")
elapsed=$(( $(date +%s) - start ))
if [ "$rc" != 0 ] && [ "$rc" != 124 ] && [ "$elapsed" -lt 100 ]; then pass; else
    fail "after killing a rank: exit status $rc after ${elapsed}s (want non-zero, no timeout)"; fi

finish
