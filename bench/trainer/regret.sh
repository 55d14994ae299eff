#!/bin/bash
# Issue 19's regret benchmark: the CNN with a cosine schedule, fixed formats and the adaptive
# controller (gain and risk rules), 3 seeds, in three regimes: 4 ranks on shared memory, and 4 emulated
# nodes x 1 rank at 1 Gbit/s and at 100 Mbit/s (tools/vcluster, root). Logs go to OUT/<regime>/ (one
# run_experiment.sh directory per regime); then per regime
#   bench/trainer/summarize_experiment.py OUT/<regime> --regret --plot OUT/<regime>.png
# prints the tables of docs/results.md ("Regret") and draws accuracy against wall time.
#
#   bench/trainer/regret.sh BUILD_DIR OUT_DIR [regimes] [seeds]
#   e.g. bench/trainer/regret.sh build /tmp/regret "shm 1gbit 100mbit" "1 2 3"
#
# Expect about 15 minutes per seed at 100 Mbit/s, less elsewhere, on an idle 2-core machine (an
# estimate from tools/demo's runs: fp32 188 s, adaptive 99 s for the same 281 steps).
set -u
usage="usage: regret.sh BUILD_DIR OUT_DIR [regimes] [seeds]"
build=${1:?$usage}
out=${2:?$usage}
regimes=${3:-"shm 1gbit 100mbit"}
seeds=${4:-"1 2 3"}
here=$(cd "$(dirname "$0")" && pwd)
# ADAPREC_REGRET_FORMATS: a subset (e.g. "fp32 table4 adaptive adaptive-risk": the target, the oracle
# and the controller; the fixed formats' accuracies are deterministic per seed).
formats=${ADAPREC_REGRET_FORMATS:-"fp32 fp16 fp8s table4 table2 table1+ef adaptive adaptive-risk"}
export ADAPREC_EXPERIMENT_ARGS="--schedule cosine ${ADAPREC_EXPERIMENT_ARGS:-}"
for regime in $regimes; do
  if [ "$regime" = shm ]; then
    "$here/run_experiment.sh" "$build" "$out/$regime" "$seeds" "$formats"
  else
    "$here/run_experiment.sh" --vcluster "$regime" "$build" "$out/$regime" "$seeds" "$formats"
  fi
  /usr/bin/python3 "$here/summarize_experiment.py" "$out/$regime" --regret --plot "$out/$regime.png" > "$out/$regime.md"
done
