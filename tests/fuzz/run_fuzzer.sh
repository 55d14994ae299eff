#!/bin/bash
# run_fuzzer.sh EXE NAME SECONDS SEED_DIR WORK_DIR [DICT]: runs one libFuzzer harness for SECONDS from
# its seed corpus (read only) and its working corpus WORK_DIR/NAME (new inputs go there), then prints
# one line: executions, coverage (cov: edges, ft: features) and corpus size. On a finding it prints
# the end of the fuzzer's log and the crash input's path (WORK_DIR/crashes/NAME-...) and exits 1.
# Used by the `fuzz` meson tests (tools/test --ci) and by tools/fuzz.
set -u
exe=$1 name=$2 seconds=$3 seeds=$4 work=$5 dict=${6:-}
mkdir -p "$work/$name" "$work/crashes"
log=$work/$name.log
args=(-max_total_time="$seconds" -print_final_stats=1 -timeout=10 -rss_limit_mb=2048 -max_len=16384
      -artifact_prefix="$work/crashes/$name-")
[ -n "$dict" ] && args+=(-dict="$dict")
# A UBSan report must stop the run (and be saved as a crash), not scroll by.
export UBSAN_OPTIONS="${UBSAN_OPTIONS:+$UBSAN_OPTIONS:}halt_on_error=1:print_stacktrace=1"
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=1"
"$exe" "${args[@]}" "$work/$name" "$seeds" >"$log" 2>&1
rc=$?
execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
last=$(grep -E '^#[0-9]+' "$log" | tail -1)
cov=$(sed -n 's/.* cov: \([0-9]*\).*/\1/p' <<<"$last")
ft=$(sed -n 's/.* ft: \([0-9]*\).*/\1/p' <<<"$last")
corpus=$(find "$work/$name" -type f | wc -l)
if [ $rc -eq 0 ]; then
  echo "fuzz $name: ${execs:-?} executions in $seconds s, cov ${cov:-?}, ft ${ft:-?}, working corpus $corpus inputs (log $log)"
else
  tail -n 60 "$log"
  crash=$(sed -n 's/.*Test unit written to \(.*\)$/\1/p' "$log" | tail -1)
  echo "fuzz $name: FINDING after ${execs:-?} executions (libFuzzer exit $rc); input: ${crash:-none saved}"
  echo "  reproduce: $exe $crash"
  exit 1
fi
