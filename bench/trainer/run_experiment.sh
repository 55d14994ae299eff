#!/bin/bash
# The precision experiment of docs/results.md: the CNN on Fashion-MNIST with 4 ranks at a fixed epoch
# budget, one run per format and seed, each writing its JSON-lines log to OUT/<format>-seed<S>.jsonl.
# bench/trainer/summarize_experiment.py OUT turns the logs into the results table.
#
#   bench/trainer/run_experiment.sh [--vcluster RATE] BUILD_DIR OUT_DIR [seeds] [formats]
#   e.g. bench/trainer/run_experiment.sh build /tmp/exp "1 2 3"
#        bench/trainer/run_experiment.sh --vcluster 100mbit build /tmp/exp-slow "1 2" \
#            "fp32 fp8s table4 table1+ef adaptive adaptive-risk"
#
# Formats are adaprec-train --format values plus `adaptive-risk` (= --format adaptive --rule risk) and
# `adaptive-fixed` (= --format adaptive --max-overhead 1: fixed --phase-steps continuations, the
# controller before phases were sized by their overhead).
# For each seed all formats run back to back, so formats compared with each other share the machine's
# load at that moment (wall times on a shared machine drift over minutes).
# --vcluster RATE: run every job on tools/vcluster's emulated cluster, 4 nodes x 1 rank joined by
# links shaped to RATE (e.g. 100mbit), with --algo twoshot over TCP, instead of 4 ranks on shared memory.
# Needs root (network namespaces). ADAPREC_EXPERIMENT_PREFIX names the namespaces (default adaprec-exp).
# Extra adaprec-train options can be passed in ADAPREC_EXPERIMENT_ARGS (e.g. "--train-limit 20000"),
# the base learning rate in ADAPREC_EXPERIMENT_LR (default 0.02) and the run length in
# ADAPREC_EXPERIMENT_EPOCHS (default 2: 312 steps of 4 ranks x 32 images over the 20,000 images).
set -u
rate=""
if [ "${1:-}" = "--vcluster" ]; then
  rate=${2:?--vcluster needs a rate, e.g. 100mbit}
  shift 2
fi
usage="usage: run_experiment.sh [--vcluster RATE] BUILD_DIR OUT_DIR [seeds] [formats]"
build=${1:?$usage}
out=${2:?$usage}
seeds=${3:-"1 2 3"}
formats=${4:-"fp32 fp8 fp8s table1 table1+ef fastest adaptive"}
ranks=${ADAPREC_EXPERIMENT_RANKS:-4}
here=$(cd "$(dirname "$0")/../.." && pwd)
build=$(cd "$build" && pwd)
mkdir -p "$out"
out=$(cd "$out" && pwd)
if [ -n "$rate" ]; then
  # One rank per emulated node; the vcluster timeout bounds a hung job (the slowest run, fp32 at
  # 100mbit, takes about 5 minutes).
  launcher="$here/tools/vcluster run --prefix ${ADAPREC_EXPERIMENT_PREFIX:-adaprec-exp} --nodes $ranks"
  launcher="$launcher --ranks-per-node 1 --rate $rate --timeout ${ADAPREC_EXPERIMENT_TIMEOUT:-1500} --"
else
  launcher=${ADAPREC_EXPERIMENT_MPIRUN:-"mpirun --allow-run-as-root --oversubscribe --mca btl self,vader"}
  launcher="$launcher -np $ranks"
fi
common="--model cnn --batch 32 --lr ${ADAPREC_EXPERIMENT_LR:-0.02} --warmup 0.25 --epochs ${ADAPREC_EXPERIMENT_EPOCHS:-2} --train-limit 20000 --eval-every 50 --eval-samples 2000"
common="$common --spec-steps 20 --spec-evals 2 --phase-steps 100 --val-images 1000 --no-progress"
echo "# $(date -u +%FT%TZ) ranks=$ranks vcluster=${rate:-no} common: $common ${ADAPREC_EXPERIMENT_ARGS:-}" >> "$out/commands.txt"
for seed in $seeds; do
  for format in $formats; do
    # The controller validates on the 1,000 training images right after --train-limit, so it trains on
    # the same 20,000 images as every fixed format (until 2026-11-28 it held out the last 1,000 of
    # them and trained on 19,000: a different run even where it chose fp32 throughout).
    case "$format" in
      adaptive) formatArgs="--format adaptive --holdout-after-limit" ;;
      adaptive-risk) formatArgs="--format adaptive --holdout-after-limit --rule risk" ;;
      adaptive-fixed) formatArgs="--format adaptive --holdout-after-limit --max-overhead 1" ;;
      *) formatArgs="--format $format" ;;
    esac
    log="$out/${format}-seed${seed}.jsonl"
    rm -f "$log"
    cmd="$launcher $build/tools/train/adaprec-train $common ${ADAPREC_EXPERIMENT_ARGS:-} --seed $seed $formatArgs --log $log"
    echo "$cmd" >> "$out/commands.txt"
    start=$(date +%s)
    if $cmd > "$out/${format}-seed${seed}.stderr" 2>&1; then status=ok; else status=failed; fi
    final=$(grep -h '"event":"eval"' "$log" 2>/dev/null | tail -1 | grep -o '"test_accuracy":[0-9.]*')
    echo "$format seed $seed: $status in $(( $(date +%s) - start )) s: ${final:-no evaluation logged}"
  done
done
