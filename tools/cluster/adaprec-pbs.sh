#!/bin/bash
# AdaPrec on PBS Pro (Reedbush-H style: 2 GPUs per node, one MPI rank per GPU, Open MPI's mpirun).
#   qsub adaprec-pbs.sh                   # JOB=train: adaprec-train
#   qsub -v JOB=bench adaprec-pbs.sh      # adaprec-bench
#   DRY_RUN=1 PBS_O_WORKDIR=$PWD PBS_NODEFILE=hosts.txt bash adaprec-pbs.sh   # print the command only
# Copy it, edit the #PBS lines and the block below; docs/cluster.md explains every setting.
#
# Queue, nodes x (ranks = GPUs per node) x (threads per rank), project group, time limit:
#PBS -q h-regular
#PBS -l select=2:mpiprocs=2:ompthreads=18
#PBS -W group_list=gc64
#PBS -l walltime=01:00:00
#PBS -N adaprec
#PBS -j oe
set -euo pipefail
cd "${PBS_O_WORKDIR:?not in a PBS job: for a DRY_RUN set PBS_O_WORKDIR and PBS_NODEFILE}"

# Site modules (names and versions: module avail), for example:
# module load cuda openmpi

# ---- What to run (adaprec-train --help, adaprec-bench --help) -----------------------------------
JOB=${JOB:-train}                 # train | bench
DRY_RUN=${DRY_RUN:-0}             # 1: print the exact command line instead of running it
RANKS_PER_NODE=${RANKS_PER_NODE:-2}  # = GPUs per node = mpiprocs above
# Where AdaPrec is: an install prefix (bin/adaprec-train) or a build directory
# (tools/train/adaprec-train); empty: the tools are taken from PATH.
ADAPREC_PREFIX=${ADAPREC_PREFIX:-}
MPIRUN=${MPIRUN:-mpirun}
MPIRUN_ARGS=${MPIRUN_ARGS:-}      # site flags, e.g. "--bind-to socket --mca btl_openib_allow_ib 1"
TRAIN_DATA=${TRAIN_DATA:---data $HOME/data/fashion-mnist}  # MNIST-format files, or --synthetic N
TRAIN_LENGTH=${TRAIN_LENGTH:---epochs 2}                    # --max-steps N for a short try
# Across nodes --algo auto sends fp32 inside a node and the chosen format between nodes. A resubmitted
# job continues from checkpoints/ (--resume) and appends to train.jsonl.
TRAIN_ARGS=${TRAIN_ARGS:---model cnn --format adaptive --algo auto --log train.jsonl --checkpoint checkpoints --resume --no-progress}
BENCH_SIZES=${BENCH_SIZES:--b 4K -e 256M -f 4 -n 20 -w 5}
BENCH_ARGS=${BENCH_ARGS:---formats fp32,bf16,fp16,fp8s,table4,table2 --algos auto,hierarchical,twoshot --json bench-${PBS_JOBID:-local}.json}

# ---- AdaPrec's environment: every exported ADAPREC_* variable is passed to every rank -------------
# Every ADAPREC_* variable, its valid values and default: `adaprec-codec env` (the library's own table;
# docs/cluster.md prints the same). The ones a job most often sets:
#   ADAPREC_FORMAT=f, ADAPREC_ALGO=a  wire format and algorithm of the C API and the LD_PRELOAD library
#                             (adaprec-train and adaprec-bench take --format/--algo instead)
#   ADAPREC_RANKS_PER_NODE=k  treat k consecutive ranks as one node; leave unset on a real cluster
#   ADAPREC_CALIBRATION=file  keep auto's link measurements for the next job on the same nodes
#   ADAPREC_TIMELINE=prefix   one Chrome trace per rank (docs/timeline.md)
# Read by bind-gpu.sh: ADAPREC_GPUS_PER_NODE (default: counted by nvidia-smi), ADAPREC_BIND_VERBOSE=1.
# An invalid value is an error that names the variable and its valid values.
# export ADAPREC_CPU_ISA=avx2
#
# An unmodified MPI program (C, C++, mpi4py) through the LD_PRELOAD library instead of JOB=...:
# mpirun -np 4 --hostfile "$PBS_NODEFILE" --map-by ppr:2:node -x PATH -x LD_LIBRARY_PATH \
#   -x LD_PRELOAD="$ADAPREC_PREFIX/lib/x86_64-linux-gnu/libadaprec-preload.so" \
#   -x ADAPREC_FORMAT=fp8s -x ADAPREC_ALGO=auto -x ADAPREC_STATS=1 \
#   "$ADAPREC_PREFIX/bin/adaprec-bind-gpu" python3 train.py
# (in a build directory: lib/preload/libadaprec-preload.so and tools/cluster/bind-gpu.sh)

# ---- Nothing to edit below ------------------------------------------------------------------------
tool() {  # tool NAME BUILD_PATH: $ADAPREC_PREFIX/bin/NAME, $ADAPREC_PREFIX/BUILD_PATH, or NAME on PATH
  if [[ -n $ADAPREC_PREFIX ]]; then
    for path in "$ADAPREC_PREFIX/bin/$1" "$ADAPREC_PREFIX/$2"; do
      if [[ -x $path ]]; then echo "$path"; return; fi
    done
  fi
  command -v "$1" || { echo "$0: $1 is neither under ADAPREC_PREFIX='$ADAPREC_PREFIX' nor on PATH" >&2; exit 1; }
}
case $JOB in
  train) program=$(tool adaprec-train tools/train/adaprec-train)
         read -r -a args <<<"$TRAIN_DATA $TRAIN_LENGTH $TRAIN_ARGS" ;;
  bench) program=$(tool adaprec-bench bench/allreduce/adaprec-bench)
         read -r -a args <<<"$BENCH_SIZES $BENCH_ARGS" ;;
  *) echo "$0: JOB='$JOB': valid values: train, bench" >&2; exit 2 ;;
esac
bind=$(tool adaprec-bind-gpu tools/cluster/bind-gpu.sh)
for dir in "$ADAPREC_PREFIX"/lib "$ADAPREC_PREFIX"/lib64 "$ADAPREC_PREFIX"/lib/*-linux-gnu; do
  if [[ -n $ADAPREC_PREFIX && -e $dir/libadaprec.so ]]; then
    export LD_LIBRARY_PATH=$dir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  fi
done

# mpiprocs=2 lists every node twice in $PBS_NODEFILE: one line per rank.
ranks=$(wc -l <"$PBS_NODEFILE")
read -r -a site <<<"$MPIRUN_ARGS"
forward=()  # Open MPI passes only -x variables to remote ranks
for name in $(compgen -e); do
  if [[ $name == ADAPREC_* && $name != ADAPREC_PREFIX ]]; then forward+=(-x "$name=${!name}"); fi
done
forward+=(-x PATH)
for name in LD_LIBRARY_PATH OMP_NUM_THREADS; do
  if [[ -n ${!name:-} ]]; then forward+=(-x "$name=${!name}"); fi
done
command=("$MPIRUN" -np "$ranks" --hostfile "$PBS_NODEFILE" --map-by "ppr:$RANKS_PER_NODE:node"
         "${site[@]}" "${forward[@]}" "$bind" "$program" "${args[@]}")

line=""  # the command as one shell line; words are quoted only where the shell needs it
for word in "${command[@]}"; do
  if [[ ! $word =~ ^[A-Za-z0-9_./:=,+@%-]+$ ]]; then word=$(printf '%q' "$word"); fi
  line+="${line:+ }$word"
done
if [[ $DRY_RUN == 1 ]]; then
  echo "$line"
  exit 0
fi
echo "+ $line"
exec "${command[@]}"
