#!/bin/bash
# Issue 21's scaling report, in the shape of the Reedbush hands-on's (images/s on 1 -> 2 -> 4 GPUs):
# adaprec-train on 1, 2 and 4 of tools/vcluster's emulated nodes x 1 rank at RATE, per format, without
# and with overlap. Each run writes OUT/<nodes>-<format>-<mode>.jsonl; bench/trainer/summarize_scaling.py
# OUT prints images/s and scaling efficiency (1 node's images/s x nodes as the reference).
#
#   bench/trainer/scaling_bench.sh BUILD_DIR OUT_DIR [rate] [model] [formats] [modes]
#   e.g. bench/trainer/scaling_bench.sh build /tmp/scaling 1gbit cnn "fp32 table4" "sequential overlap"
#
# All runs of one node count run back to back. Needs root (network namespaces). ADAPREC_SCALING_STEPS:
# timed steps (default 20); ADAPREC_SCALING_PREFIX names the namespaces (default adaprec-scl).
set -u
usage="usage: scaling_bench.sh BUILD_DIR OUT_DIR [rate] [model] [formats] [modes]"
build=${1:?$usage}
out=${2:?$usage}
rate=${3:-1gbit}
model=${4:-cnn}
formats=${5:-"fp32 table4"}
modes=${6:-"sequential overlap"}
steps=${ADAPREC_SCALING_STEPS:-20}
here=$(cd "$(dirname "$0")/../.." && pwd)
build=$(cd "$build" && pwd)
mkdir -p "$out"
out=$(cd "$out" && pwd)
. "$here/bench/trainer/reduction_runs.sh"
common="--model $model $(reduction_bench_options "$steps")"
echo "# $(date -u +%FT%TZ) rate=$rate common: $common" >> "$out/commands.txt"
for nodes in 1 2 4; do
  launcher="$here/tools/vcluster run --prefix ${ADAPREC_SCALING_PREFIX:-adaprec-scl} --nodes $nodes"
  launcher="$launcher --ranks-per-node 1 --rate $rate --timeout 900 --"
  for format in $formats; do
    for mode in $modes; do
      log="$out/$nodes-$format-$mode.jsonl"
      run_logged "$out" "$log" "$nodes nodes $format $mode" $launcher "$build/tools/train/adaprec-train" $common \
        --format "$format" --reduction "$mode" --log "$log"
    done
  done
done
