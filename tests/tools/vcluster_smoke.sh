#!/usr/bin/env bash
# Smoke test of tools/vcluster: 2 emulated nodes on a 16 Mbit/s link run vcluster_check, which checks
# that MPI sees 2 distinct hosts, that an MPI_Allreduce is exact, and that a 2 MiB send between the
# nodes does not outrun the shaper; then 2 nodes x 2 ranks, where MPI_COMM_TYPE_SHARED must group the
# ranks of each node and only those. Skipped (exit 77) where network namespaces cannot be made.
# Usage: vcluster_smoke.sh VCLUSTER CHECK_PROGRAM
set -uo pipefail
vcluster="$1"
check="$2"
skip() { echo "SKIP vcluster smoke test: $*"; exit 77; }

# The same probe as cluster_templates_check.sh: every step `run` needs, with the failing one named.
reason="$("$vcluster" probe)" || skip "$reason"

# Own prefix per run: never collides with a user's cluster or a concurrent test.
export ADAPREC_VCLUSTER_PREFIX="adaprec-vct-$$"
rateBits=16000000
runCheck() {  # runCheck RANKS_PER_NODE [vcluster_check options...]
  local k="$1"
  shift
  local output rc left
  output="$("$vcluster" run --nodes 2 --ranks-per-node "$k" --rate 16mbit --timeout 60 -- \
    "$check" --nodes 2 --ranks-per-node "$k" --count 1000 "$@" 2>&1)"
  rc=$?
  echo "$output"
  left="$(ip netns list | grep -c "^${ADAPREC_VCLUSTER_PREFIX}-" || true)"
  if ((left != 0)); then
    echo "FAIL: $left namespace(s) with prefix ${ADAPREC_VCLUSTER_PREFIX} left after the run"
    exit 1
  fi
  ((rc == 0)) || { echo "FAIL: vcluster run (2 nodes x $k) exited with $rc"; exit 1; }
  grep -q 'vcluster_check: PASS' <<<"$output" || { echo "FAIL: no PASS verdict from vcluster_check"; exit 1; }
}
runCheck 1 --bandwidth-bytes 2097152 --rate-bits "$rateBits"
runCheck 2
echo "PASS"
