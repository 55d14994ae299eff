#!/bin/bash
# The schedule-aware predictor's evaluation table (docs/predictor.md, "Learning-rate schedules") from the
# committed curve CSVs: tuning curves (read while the model was designed) and held-out curves (read once,
# after the model was fixed), each at cut-offs 20% and 40%, with the MCMC reference; then the timing of
# fit + predict of 5 curves x 30 points with a schedule.
#
#   bench/predictor/schedule_eval.sh [BUILD_DIR]
#
# Regenerate the CSVs (tens of minutes on a loaded machine):
#   bench/predictor/make_schedule_trainer_curves.sh build bench/predictor/schedule_curves_trainer_tune.csv "1" "0.01 0.03" "fp32 table2 table1+ef"
#   bench/predictor/make_schedule_trainer_curves.sh build bench/predictor/schedule_curves_trainer_heldout.csv "2" "0.02" "table2 table1+ef"
#   bench/predictor/make_schedule_torch_curves.py bench/predictor/schedule_curves_torch_tune.csv --seeds 1 2 --lrs 0.02 0.05 0.1
#     (the committed file stopped after its first 13 runs, seed 1 and seed 2 at lr 0.02: time)
#   bench/predictor/make_schedule_torch_curves.py bench/predictor/schedule_curves_torch_heldout.csv --seeds 3 --lrs 0.03 0.08 --first-curve 1000
# The fresh curves (2026-11-26; curve ids of the three trainer runs offset by 0, 100, 200 in one file,
# the two torch runs concatenated):
#   make_schedule_trainer_curves.sh build A.csv "4" "0.015" "fp32 table2 table1+ef"; ... B.csv "5" "0.025"
#     "fp32 table2 table1+ef"; ... C.csv "6" "0.01" "fp16 fp8s"
#   make_schedule_torch_curves.py A.csv --seeds 4 --lrs 0.04 --first-curve 2000; ... B.csv --seeds 5
#     --lrs 0.06 --first-curve 3000
# The CNN curves (2026-11-28, ~10 minutes on one core):
#   make_schedule_torch_curves.py schedule_curves_torch_cnn.csv --arch cnn --seeds 7 8 --lrs 0.02 0.05 0.1 --first-curve 4000
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
bench=${1:-build}/bench/predictor/adaprec-schedule-bench
echo "== tuning curves"
"$bench" "$here/schedule_curves_trainer_tune.csv" "$here/schedule_curves_torch_tune.csv" --mcmc
echo "== held-out curves"
"$bench" "$here/schedule_curves_trainer_heldout.csv" "$here/schedule_curves_torch_heldout.csv" --mcmc
echo "== quantile recalibration learned from annealed curves: tuning curves, leave one out"
"$bench" "$here/schedule_curves_trainer_tune.csv" "$here/schedule_curves_torch_tune.csv" --mcmc --recalibrate
echo "== fresh curves (read once, 2026-11-26), maps from the tuning and held-out curves"
"$bench" "$here/schedule_curves_trainer_fresh.csv" "$here/schedule_curves_torch_fresh.csv" --mcmc \
  --recalibration-corpus "$here/schedule_curves_trainer_tune.csv" "$here/schedule_curves_torch_tune.csv" \
  "$here/schedule_curves_trainer_heldout.csv" "$here/schedule_curves_torch_heldout.csv"
echo "== CNN curves (read once, 2026-11-28), maps from the 77 MLP curves"
"$bench" "$here/schedule_curves_torch_cnn.csv" --mcmc \
  --recalibration-corpus "$here"/schedule_curves_{trainer,torch}_{tune,heldout,fresh}.csv
echo "== fast against the MCMC reference on every annealed curve, paired, three seeds of the reference's sampler"
for seed in 1 2 3; do
  "$bench" "$here"/schedule_curves_{trainer,torch}_{tune,heldout,fresh}.csv --mcmc --mcmc-seed "$seed" | grep -E ',(fast|mcmc),|paired'
done
echo "== timing (one core)"
taskset -c 0 "$bench" "$here/schedule_curves_trainer_tune.csv" --cutoffs 0.2 --timing | tail -n 3
