#!/bin/bash
# Issue 21's measurement: adaprec-train's step time split into compute and exposed communication, per
# reduction mode (sequential, overlap, double-buffering), on tools/vcluster's 4 (or N) emulated nodes x 1 rank.
# One short run (--max-steps) per rate, model, format and mode, each writing its JSON-lines log to
# OUT/<rate>-<model>-<format>-<mode>.jsonl; bench/trainer/summarize_overlap.py OUT prints the table.
#
#   bench/trainer/overlap_bench.sh BUILD_DIR OUT_DIR [rates] [models] [formats] [modes]
#   e.g. bench/trainer/overlap_bench.sh build /tmp/overlap "1gbit 100mbit" "cnn mlp" "fp32 fp16 fp8s table4"
#
# All modes of one (rate, model, format) run back to back, so the modes compared share the machine's
# load of that moment. Needs root (network namespaces). ADAPREC_OVERLAP_STEPS: timed steps (default 30);
# ADAPREC_OVERLAP_PREFIX names the namespaces (default adaprec-ovl); ADAPREC_OVERLAP_NODES the emulated
# nodes (default 4; 2 gives each rank one of this machine's two cores, to separate the design's limits
# from the CPU's).
set -u
usage="usage: overlap_bench.sh BUILD_DIR OUT_DIR [rates] [models] [formats] [modes]"
build=${1:?$usage}
out=${2:?$usage}
rates=${3:-"1gbit 100mbit"}
models=${4:-"cnn mlp"}
formats=${5:-"fp32 fp16 fp8s table4"}
modes=${6:-"sequential overlap double-buffering"}
steps=${ADAPREC_OVERLAP_STEPS:-30}
here=$(cd "$(dirname "$0")/../.." && pwd)
build=$(cd "$build" && pwd)
mkdir -p "$out"
out=$(cd "$out" && pwd)
. "$here/bench/trainer/reduction_runs.sh"
common=$(reduction_bench_options "$steps")
echo "# $(date -u +%FT%TZ) common: $common" >> "$out/commands.txt"
for rate in $rates; do
  launcher="$here/tools/vcluster run --prefix ${ADAPREC_OVERLAP_PREFIX:-adaprec-ovl} --nodes ${ADAPREC_OVERLAP_NODES:-4} --ranks-per-node 1"
  launcher="$launcher --rate $rate --timeout 900 --"
  for model in $models; do
    for format in $formats; do
      for mode in $modes; do
        log="$out/$rate-$model-$format-$mode.jsonl"
        run_logged "$out" "$log" "$rate $model $format $mode" $launcher "$build/tools/train/adaprec-train" $common \
          --model "$model" --format "$format" --reduction "$mode" --log "$log"
      done
    done
  done
done
