#!/bin/bash
# The precision experiment of docs/results.md: the CNN on Fashion-MNIST with 4 ranks at a fixed epoch
# budget, one run per format and seed, each writing its JSON-lines log to OUT/<format>-seed<S>.jsonl.
# bench/trainer/summarize_experiment.py OUT turns the logs into the results table.
#
#   bench/trainer/run_experiment.sh BUILD_DIR OUT_DIR [seeds] [formats]
#   e.g. bench/trainer/run_experiment.sh build /tmp/exp "1 2 3"
# Extra adaprec-train options can be passed in ADAPREC_EXPERIMENT_ARGS (e.g. "--train-limit 20000").
set -u
build=${1:?usage: run_experiment.sh BUILD_DIR OUT_DIR [seeds] [formats]}
out=${2:?usage: run_experiment.sh BUILD_DIR OUT_DIR [seeds] [formats]}
seeds=${3:-"1 2 3"}
formats=${4:-"fp32 fp8 fp8s table1 table1+ef fastest adaptive"}
ranks=${ADAPREC_EXPERIMENT_RANKS:-4}
launcher=${ADAPREC_EXPERIMENT_MPIRUN:-"mpirun --allow-run-as-root --oversubscribe --mca btl self,vader"}
common="--model cnn --batch 32 --lr 0.02 --warmup 0.25 --epochs 2 --train-limit 20000 --eval-every 50 --eval-samples 2000"
common="$common --spec-steps 20 --spec-evals 2 --phase-steps 100 --val-images 1000 --holdout 2000 --no-progress"
mkdir -p "$out"
echo "# $(date -u +%FT%TZ) ranks=$ranks common: $common ${ADAPREC_EXPERIMENT_ARGS:-}" >> "$out/commands.txt"
for seed in $seeds; do
  for format in $formats; do
    log="$out/${format}-seed${seed}.jsonl"
    cmd="$launcher -np $ranks $build/tools/train/adaprec-train $common ${ADAPREC_EXPERIMENT_ARGS:-} --seed $seed --format $format --log $log"
    echo "$cmd" >> "$out/commands.txt"
    start=$(date +%s)
    if $cmd > "$out/${format}-seed${seed}.stderr" 2>&1; then status=ok; else status=failed; fi
    echo "$format seed $seed: $status in $(( $(date +%s) - start )) s: $(grep -h 'final test accuracy' "$out/${format}-seed${seed}.stderr")"
  done
done
