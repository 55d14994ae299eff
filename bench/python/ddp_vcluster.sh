#!/usr/bin/env bash
# DDP steps per second on the emulated cluster (tools/vcluster): AdaPrec hook (fp16, fp8s, table4)
# against DDP's default gloo allreduce and PyTorch's fp16_compress_hook, same model, same run.
#   bench/python/ddp_vcluster.sh [BUILD_DIR] [NODES] [RATE] [STEPS] [ROUNDS]
# defaults: build 4 1gbit 40 2. Prints one JSON line per run (examples/ddp_train.py) and a summary.
# Needs root (network namespaces); one rank per node, each with one torch thread.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
build="$(cd "${1:-$root/build}" && pwd)"
nodes="${2:-4}"
rate="${3:-1gbit}"
steps="${4:-40}"
rounds="${5:-2}"
export PYTHONPATH="$root/python" ADAPREC_LIBRARY="$build/lib/libadaprec.so" OMP_NUM_THREADS=1
export ADAPREC_VCLUSTER_PREFIX="adaprec-ddp-$$"
variants=("--hook none" "--hook torch-fp16" "--hook adaprec --format fp16" "--hook adaprec --format fp8s"
          "--hook adaprec --format table4")
out="$(mktemp)"
trap 'rm -f "$out"' EXIT
for ((round = 0; round < rounds; ++round)); do  # rounds interleave the variants: noise hits all alike
  for variant in "${variants[@]}"; do
    # shellcheck disable=SC2086
    "$root/tools/vcluster" run --nodes "$nodes" --rate "$rate" --timeout 600 \
      --mpirun-args "-x PYTHONPATH -x ADAPREC_LIBRARY -x OMP_NUM_THREADS -x GLOO_SOCKET_IFNAME=eth0" -- \
      /usr/bin/python3 "$root/examples/ddp_train.py" $variant --steps "$steps" 2>/dev/null |
      grep '^{' | tee -a "$out"
  done
done
/usr/bin/python3 - "$out" "$nodes" "$rate" <<'PY'
import json, statistics, sys
rows = [json.loads(line) for line in open(sys.argv[1])]
by = {}
for r in rows:
    by.setdefault((r["hook"], r["format"]), []).append(r["steps_per_second"])
base = statistics.median(by.get(("none", None), [float("nan")]))
print(f"# DDP on {sys.argv[2]} emulated nodes at {sys.argv[3]}: {rows[0]['parameters']} parameters, "
      f"steps/s median of {len(next(iter(by.values())))} runs")
print(f"{'hook':12} {'format':8} {'steps/s':>8} {'vs gloo':>8}")
for (hook, fmt), values in by.items():
    median = statistics.median(values)
    print(f"{hook:12} {fmt or '-':8} {median:8.3f} {median / base:7.2f}x")
PY
