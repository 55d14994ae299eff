#!/bin/bash
# AdaPrec on Slurm: one MPI rank per GPU, started by srun (or Open MPI's mpirun: LAUNCHER=mpirun).
#   sbatch adaprec-slurm.sh                        # JOB=train: adaprec-train
#   sbatch --export=ALL,JOB=bench adaprec-slurm.sh # adaprec-bench
#   DRY_RUN=1 SLURM_NTASKS=4 SLURM_NTASKS_PER_NODE=2 bash adaprec-slurm.sh   # print the command only
# Copy it, edit the #SBATCH lines and the block below; docs/cluster.md explains every setting.
#
# Nodes x (ranks = GPUs per node), CPU cores per rank, time limit; partition and account if the site
# needs them (remove one '#' to enable a line):
#SBATCH --job-name=adaprec
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=2
#SBATCH --gpus-per-node=2
#SBATCH --cpus-per-task=8
#SBATCH --time=01:00:00
##SBATCH --partition=gpu
##SBATCH --account=myproject
set -euo pipefail
cd "${SLURM_SUBMIT_DIR:-.}"

# Site modules (names and versions: module avail), for example:
# module load cuda openmpi

# ---- What to run (adaprec-train --help, adaprec-bench --help) -----------------------------------
JOB=${JOB:-train}                 # train | bench
DRY_RUN=${DRY_RUN:-0}             # 1: print the exact command line instead of running it
LAUNCHER=${LAUNCHER:-srun}        # srun | mpirun (Open MPI takes the nodes from Slurm)
LAUNCHER_ARGS=${LAUNCHER_ARGS:-}  # site flags, e.g. "--mpi=pmix" for srun
# Where AdaPrec is: an install prefix (bin/adaprec-train) or a build directory
# (tools/train/adaprec-train); empty: the tools are taken from PATH.
ADAPREC_PREFIX=${ADAPREC_PREFIX:-}
TRAIN_DATA=${TRAIN_DATA:---data $HOME/data/fashion-mnist}  # MNIST-format files, or --synthetic N
TRAIN_LENGTH=${TRAIN_LENGTH:---epochs 2}                    # --max-steps N for a short try
# Across nodes --algo auto sends fp32 inside a node and the chosen format between nodes. A resubmitted
# job continues from checkpoints/ (--resume) and appends to train.jsonl.
TRAIN_ARGS=${TRAIN_ARGS:---model cnn --format adaptive --algo auto --log train.jsonl --checkpoint checkpoints --resume --no-progress}
BENCH_SIZES=${BENCH_SIZES:--b 4K -e 256M -f 4 -n 20 -w 5}
BENCH_ARGS=${BENCH_ARGS:---formats fp32,bf16,fp16,fp8s,table4,table2 --algos auto,hierarchical,twoshot --json bench-${SLURM_JOB_ID:-local}.json}

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
# preload=$ADAPREC_PREFIX/lib/x86_64-linux-gnu/libadaprec-preload.so
# srun --export=ALL,LD_PRELOAD=$preload,ADAPREC_FORMAT=fp8s,ADAPREC_ALGO=auto,ADAPREC_STATS=1 \
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

ranks=${SLURM_NTASKS:?not in a Slurm job: for a DRY_RUN set SLURM_NTASKS and SLURM_NTASKS_PER_NODE}
per_node=${SLURM_NTASKS_PER_NODE:?set #SBATCH --ntasks-per-node (= GPUs per node)}
read -r -a site <<<"$LAUNCHER_ARGS"
adaprec_env=()
for name in $(compgen -e); do
  if [[ $name == ADAPREC_* && $name != ADAPREC_PREFIX ]]; then adaprec_env+=("$name=${!name}"); fi
done
case $LAUNCHER in
  srun)  # srun passes the whole environment; the AdaPrec variables are listed to show them.
    export_list=ALL
    for assignment in "${adaprec_env[@]}"; do export_list+=",$assignment"; done
    launch=(srun --ntasks="$ranks" --ntasks-per-node="$per_node" --export="$export_list") ;;
  mpirun)  # Open MPI passes only -x variables to remote ranks
    launch=(mpirun -np "$ranks" --map-by "ppr:$per_node:node")
    for assignment in "${adaprec_env[@]}"; do launch+=(-x "$assignment"); done
    launch+=(-x PATH)
    for name in LD_LIBRARY_PATH OMP_NUM_THREADS; do
      if [[ -n ${!name:-} ]]; then launch+=(-x "$name=${!name}"); fi
    done ;;
  *) echo "$0: LAUNCHER='$LAUNCHER': valid values: srun, mpirun" >&2; exit 2 ;;
esac
command=("${launch[@]}" "${site[@]}" "$bind" "$program" "${args[@]}")

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
