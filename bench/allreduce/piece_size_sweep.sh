#!/bin/bash
# Piece-size sweep (ADAPREC_MESSAGE_BYTES) on 4 emulated nodes x 1 rank at 1 Gbit/s: ring and twoshot,
# fp32 and fp8s, 16 MiB, each size twice (docs/benchmarks.md, section 0c). Usage:
#   bench/allreduce/piece_size_sweep.sh [OUTDIR]      (default /tmp; needs build/ and tools/vcluster)
set -u
cd "$(dirname "$0")/../.." || exit 1
out=${1:-/tmp}
for round in 1 2; do
for mb in 49152 0 16384 65536 262144; do
  tools/vcluster run --nodes 4 --ranks-per-node 1 --rate 1gbit --timeout 300 --mpirun-args "-x ADAPREC_MESSAGE_BYTES=$mb" -- \
    build/bench/allreduce/adaprec-bench -b 16M -e 16M -n 5 -w 1 --formats fp32,fp8s --algos ring,twoshot -J "$out/pieces-$mb-$round.json" > "$out/pieces-$mb-$round.txt" 2>&1
  echo "mb=$mb round=$round rc=$?"
done
done
# One line per run: the rows' times in ms.
for round in 1 2; do
  for mb in 49152 0 16384 65536 262144; do
    printf '%-7s run %s ' "$mb" "$round"
    grep -E '^ +16777216' "$out/pieces-$mb-$round.txt" | awk '{printf "%s/%s %.1f  ", $3, $4, $5 / 1000}'
    echo
  done
done
