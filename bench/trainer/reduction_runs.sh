# Sourced by overlap_bench.sh and scaling_bench.sh: the adaprec-train settings both time the reduction
# with, declared once, and how each run is logged.

# Per-layer calls (the overlap unit); twoshot between nodes (auto's choice there); one evaluation of a
# few images at the end, so that the run is almost all training steps. $1: timed steps.
reduction_bench_options() {
  echo "--batch 32 --lr 0.01 --epochs 1 --train-limit 12800 --max-steps $1 --eval-samples 200" \
       "--bucketing layer --algo twoshot --reducer adaprec --no-progress"
}

# run_logged OUT LOG LABEL COMMAND...: appends COMMAND to OUT/commands.txt, runs it with its output in
# LOG's .stderr file and prints "LABEL: ok" or "LABEL: failed".
run_logged() {
  local out=$1 log=$2 label=$3
  shift 3
  rm -f "$log"
  echo "$*" >> "$out/commands.txt"
  if "$@" > "${log%.jsonl}.stderr" 2>&1; then echo "$label: ok"; else echo "$label: failed"; fi
}
