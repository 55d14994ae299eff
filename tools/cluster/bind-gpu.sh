#!/bin/bash
# bind-gpu.sh PROGRAM [ARGS...]: run PROGRAM with CUDA_VISIBLE_DEVICES set to this rank's GPU, one rank
# per GPU. The launcher starts one copy per rank (mpirun/srun ... bind-gpu.sh adaprec-train ...).
#
# Node-local rank r, the first one set: OMPI_COMM_WORLD_LOCAL_RANK (Open MPI mpirun), SLURM_LOCALID
# (srun), MPI_LOCALRANKID (MPICH/Intel MPI hydra), MV2_COMM_WORLD_LOCAL_RANK (MVAPICH2); none: 0.
# GPU of local rank r:
#   - CUDA_VISIBLE_DEVICES is a list (Slurm's --gpus-per-node sets it to the node's GPUs): its r-th entry;
#   - CUDA_VISIBLE_DEVICES is one GPU (the scheduler already bound one per task): left as it is;
#   - unset: GPU r of ADAPREC_GPUS_PER_NODE GPUs (unset: counted with `nvidia-smi -L`).
# No GPU (count 0 or no nvidia-smi): nothing is set and PROGRAM runs on the host. More local ranks than
# GPUs is an error: sharing a GPU is almost always a wrong job size.
# ADAPREC_BIND_VERBOSE=1 prints the choice on stderr.
set -euo pipefail

if (($# == 0)); then
  echo "usage: bind-gpu.sh PROGRAM [ARGS...]" >&2
  exit 2
fi

local_rank=${OMPI_COMM_WORLD_LOCAL_RANK:-${SLURM_LOCALID:-${MPI_LOCALRANKID:-${MV2_COMM_WORLD_LOCAL_RANK:-0}}}}
if [[ ! $local_rank =~ ^[0-9]+$ ]]; then
  echo "bind-gpu.sh: node-local rank '$local_rank' is not a number" >&2
  exit 2
fi
local_rank=$((10#$local_rank))  # "08" is not octal

gpus=()
if [[ ${CUDA_VISIBLE_DEVICES:-} == *,* ]]; then
  IFS=, read -r -a gpus <<<"$CUDA_VISIBLE_DEVICES"
elif [[ -z ${CUDA_VISIBLE_DEVICES:-} ]]; then
  count=${ADAPREC_GPUS_PER_NODE:-}
  if [[ -z $count ]]; then
    count=0
    if command -v nvidia-smi >/dev/null 2>&1; then
      count=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ' || true)
    fi
  fi
  if [[ ! $count =~ ^[0-9]+$ ]]; then
    echo "bind-gpu.sh: ADAPREC_GPUS_PER_NODE='$count' is not a number" >&2
    exit 2
  fi
  for ((i = 0; i < count; ++i)); do gpus+=("$i"); done
fi

if ((${#gpus[@]} > 0)); then
  if ((local_rank >= ${#gpus[@]})); then
    echo "bind-gpu.sh: node-local rank $local_rank but only ${#gpus[@]} GPU(s) (${gpus[*]}) on $(hostname):" \
      "start one rank per GPU (PBS mpiprocs / Slurm --ntasks-per-node = GPUs per node)" >&2
    exit 2
  fi
  export CUDA_VISIBLE_DEVICES=${gpus[local_rank]}
fi

if [[ ${ADAPREC_BIND_VERBOSE:-0} == 1 ]]; then
  echo "bind-gpu.sh: $(hostname) local rank $local_rank -> CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES:-(unset, no GPU)}" >&2
fi
exec "$@"
