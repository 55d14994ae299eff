#!/usr/bin/env bash
# The examples run as documented (short): examples/ddp_train.py with the AdaPrec hook,
# examples/ddp_adaptive.py (adaptive precision: two phases in 30 steps) and
# examples/mpi4py_trainer.py unchanged under LD_PRELOAD, where the stats line must show its gradient
# sums compressed. Skipped (77) without python3-mpi4py / python3-torch.
# Usage: examples_check.sh MPIRUN PRELOAD_LIB [MPIRUN ARGS...]
set -uo pipefail
mpirun="$1"
preload="$2"
shift 2
root="$(cd "$(dirname "$0")/../.." && pwd)"
/usr/bin/python3 -c 'import mpi4py, numpy, torch' 2>/dev/null || { echo "SKIP: python3-mpi4py/numpy/torch missing"; exit 77; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
fail() { echo "FAIL: $*"; exit 1; }

out="$("$mpirun" "$@" -np 2 /usr/bin/python3 "$root/examples/ddp_train.py" --hook adaprec --format fp8s \
  --algo twoshot --steps 3 --warmup 1 --hidden 64 2>&1)" || fail "ddp_train.py: $out"
echo "$out" | grep '^{'
grep -q '"compression": 3\.' <<<"$out" || fail "ddp_train.py did not send fp8s: $out"

out="$(ADAPREC_FORMAT=fp8s ADAPREC_ALGO=twoshot ADAPREC_STATS=1 "$mpirun" "$@" -np 2 \
  -x ADAPREC_FORMAT -x ADAPREC_ALGO -x ADAPREC_STATS -x LD_PRELOAD="$preload" \
  /usr/bin/python3 "$root/examples/mpi4py_trainer.py" --max-steps 20 --hidden 64 2>&1)" ||
  fail "mpi4py_trainer.py under LD_PRELOAD: $out"
echo "$out" | grep -E '^(mpi4py trainer|adaprec: stats)'
grep -Eq 'intercepted=40 passed_through=0 .*compression=(3\.9|4\.0)' <<<"$out" ||
  fail "mpi4py_trainer.py: its 20 steps x 2 ranks of gradient sums were not all compressed: $out"
out="$("$mpirun" "$@" -np 2 /usr/bin/python3 "$root/examples/ddp_adaptive.py" --steps 30 --hidden 64 \
  --spec-steps 4 --phase-steps 10 --max-overhead 1 --candidates fp32,fp8s,table2+ef 2>&1)" ||
  fail "ddp_adaptive.py: $out"
echo "$out" | grep '"phases"'
# Whether a phase decides or is skipped depends on the measured step times (pruning), and so does how
# many phases fit in 30 steps (2 or 3 seen: a skipped phase's successor comes sooner than a decided
# one's, whose continuation must also pay for its branches). The check: at least two phases, and one
# printed record per phase.
phases=$(grep -o '"phases": [0-9]*' <<<"$out" | grep -o '[0-9]*$')
[ -n "$phases" ] && [ "$phases" -ge 2 ] || fail "ddp_adaptive.py did not run two phases in 30 steps: $out"
[ "$(grep -c '"continuation_steps"' <<<"$out")" = "$phases" ] || fail "ddp_adaptive.py did not print its $phases phases: $out"

echo "examples: ok"
