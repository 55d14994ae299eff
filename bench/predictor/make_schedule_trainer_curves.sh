#!/bin/bash
# Writes real learning curves of adaprec-train under annealing learning-rate schedules for the
# schedule-aware predictor evaluation (bench/predictor/schedule_eval.sh, docs/predictor.md).
#
# Each run: mlp, 2 ranks, Fashion-MNIST (first 4000 training images, batch 32 per rank: 62 steps per
# epoch), 3 epochs = 186 steps, test accuracy on 1000 test images every 6 steps (31 points, n = 1000).
# The trainer's epoch-based schedule (--schedule, --milestones, --gamma, --power) maps to the step-based
# --lr-schedule SPEC written in the last column (it may contain commas: the rest of the line):
#   cosine                          -> cosine:186
#   step --milestones 1,2 --gamma 0.1 -> step:0.1:62,124
#   poly --power 2                  -> poly:186:2
#
#   bench/predictor/make_schedule_trainer_curves.sh BUILD_DIR OUT_CSV "SEEDS" "LRS" "FORMATS"
set -euo pipefail
build=$1
out=$2
seeds=($3)
lrs=($4)
formats=($5)
train=$(cd "$build" && pwd)/tools/train/adaprec-train
mpirun=(mpirun --allow-run-as-root --oversubscribe --mca btl self,vader -np 2)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
stepsPerEpoch=62
epochs=3
total=$((stepsPerEpoch * epochs))
schedules=(cosine step poly)
echo "curve,source,model,seed,lr,format,step,value,n,lr_at_step,lr_schedule" > "$out"
curve=0
for seed in "${seeds[@]}"; do
  for lr in "${lrs[@]}"; do
    for sched in "${schedules[@]}"; do
      case $sched in
        cosine) extra=(--schedule cosine); spec="cosine:$total" ;;
        step) extra=(--schedule step --milestones 1,2 --gamma 0.1); spec="step:0.1:$stepsPerEpoch,$((2 * stepsPerEpoch))" ;;
        poly) extra=(--schedule poly --power 2); spec="poly:$total:2" ;;
      esac
      for f in "${formats[@]}"; do
        echo "curve $curve: $sched seed $seed lr $lr $f" >&2
        rm -f "$work/log.jsonl"
        "${mpirun[@]}" "$train" --model mlp --format "$f" --epochs $epochs --train-limit 4000 --batch 32 \
          --lr "$lr" "${extra[@]}" --seed "$seed" --test-limit 1000 --eval-every 6 --no-progress \
          --checkpoint-every 1000000 --log "$work/log.jsonl" > /dev/null
        /usr/bin/python3 - "$work/log.jsonl" "$curve" "$seed" "$lr" "$f" "$spec" >> "$out" <<'PY'
import json, sys
log, curve, seed, lr, fmt, spec = sys.argv[1:]
for line in open(log):
    r = json.loads(line)
    if r.get("event") == "eval":
        print(f"{curve},trainer,mlp,{seed},{lr},{fmt},{r['step']},{r['test_accuracy']},{r['test_images']},{r['lr']:.6g},{spec}")
PY
        curve=$((curve + 1))
      done
    done
  done
done
echo "wrote $out" >&2
