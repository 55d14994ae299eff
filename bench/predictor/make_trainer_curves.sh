#!/bin/bash
# Regenerates bench/predictor/trainer_curves.csv: real learning curves from adaprec-train for the
# predictor benchmark (adaprec-predictor-bench --source trainer).
#
# Each set is one checkpoint and five branches from it, as the precision controller sees them: a
# data-parallel run (2 ranks, Fashion-MNIST, batch 16 per rank) trains in fp32 up to step START and
# checkpoints; then one run per wire format (fp32 fp16 fp8s table4 table2) resumes from a copy of that
# checkpoint and trains 300 more steps, evaluating test accuracy every 10 steps on a fixed set of 500
# test images (--test-limit 500): 30 points per branch, n = 500. The checkpoint's own evaluation on the
# same 500 images is each branch's row at step 0 (the shared point the controller passes as well).
# Steps in the CSV count from the checkpoint.
#
#   bench/predictor/make_trainer_curves.sh [BUILD_DIR [OUT_CSV]]
#
# BUILD_DIR defaults to build (it needs tools/train/adaprec-train); OUT_CSV to the checked-in file.
# TRAINER_SETS="model seed lr start; ..." replaces the list of sets below (trainer_curves_heldout.csv
# was written that way, with sets the model had not been designed on).
# Takes 10-40 minutes on 2 cores, depending on their load; sets are appended as they finish.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=${1:-build}
out=${2:-$here/trainer_curves.csv}
train=$(cd "$build" && pwd)/tools/train/adaprec-train
mpirun=(mpirun --allow-run-as-root --oversubscribe --mca btl self,vader -np 2)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

formats=(fp32 fp16 fp8s table4 table2)
# model seed lr start-step (lr is per rank-batch; the peak is lr x 2 ranks with momentum 0.9: the mlp
# diverged at lr 0.05 and the cnn collapsed to chance at 0.02, so the cnn sets use 0.005 and 0.002)
sets=(
  "mlp 1 0.02 100"
  "mlp 3 0.01 60"
  "cnn 1 0.005 50"
  "mlp 4 0.03 200"
  "cnn 2 0.002 30"
)
if [ -n "${TRAINER_SETS:-}" ]; then
  IFS=';' read -r -a sets <<< "$TRAINER_SETS"
fi
branchSteps=300
evalEvery=10
testImages=500

# One CSV row per evaluation of a JSON-lines log, steps counted from the checkpoint.
rows() {
  /usr/bin/python3 - "$@" <<'EOF'
import json, sys
log, s, c, model, seed, lr, start, fmt, n, first = sys.argv[1:]  # n: unused, kept for the call
for line in open(log):
    r = json.loads(line)
    if r.get("event") == "eval" and r["step"] >= int(first):
        print(f"{s},{c},{model},{seed},{lr},{start},{fmt},{r['step'] - int(start)},{r['test_accuracy']},{r['test_images']}")
EOF
}

echo "set,curve,model,seed,lr,start,format,step,value,n" > "$out"
for s in "${!sets[@]}"; do
  read -r model seed lr start <<< "${sets[$s]}"
  common=(--model "$model" --seed "$seed" --lr "$lr" --batch 16 --test-limit "$testImages"
          --checkpoint-every 1000000 --no-progress)
  echo "set $s: $model seed $seed lr $lr, checkpoint at step $start" >&2
  "${mpirun[@]}" "$train" "${common[@]}" --format fp32 --max-steps "$start" --eval-every "$start" \
    --checkpoint "$work/ck$s" --log "$work/warmup.jsonl" > /dev/null
  for c in "${!formats[@]}"; do
    f=${formats[$c]}
    rm -rf "$work/branch" "$work/log.jsonl" && cp -r "$work/ck$s" "$work/branch"
    "${mpirun[@]}" "$train" "${common[@]}" --format "$f" --resume --checkpoint "$work/branch" \
      --max-steps $((start + branchSteps)) --eval-every "$evalEvery" --log "$work/log.jsonl" > /dev/null
    rows "$work/warmup.jsonl" "$s" "$c" "$model" "$seed" "$lr" "$start" "$f" "$testImages" "$start" | tail -n 1 >> "$out"
    rows "$work/log.jsonl" "$s" "$c" "$model" "$seed" "$lr" "$start" "$f" "$testImages" $((start + 1)) >> "$out"
  done
done
echo "wrote $out" >&2
