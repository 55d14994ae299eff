#!/bin/bash
# cluster_templates_check.sh TEMPLATE_DIR BUILD_ROOT ADAPREC_TRAIN ADAPREC_BENCH BIND_GPU MPIRUN
#
# Checks tools/cluster/: the PBS and Slurm templates are valid shell; their DRY_RUN line under faked
# scheduler variables (2 nodes x 2 ranks) launches bind-gpu.sh with the built binaries; and the argument
# lists they would run really parse: the printed command is run as printed, on this machine (a hostfile
# of localhost, 2 ranks, tiny sizes through the templates' size variables only), and must succeed and
# write what its flags ask for. A template with a wrong flag makes the same run fail (checked too).
# bind-gpu.sh picks the GPU from the node-local rank.
set -euo pipefail

# meson passes built files relative to the directory it starts the test in.
absolute() { if [[ $1 == /* ]]; then echo "$1"; else echo "$PWD/$1"; fi; }
templates=$(absolute "$1") build=$(absolute "$2") train=$(absolute "$3") bench=$(absolute "$4")
bind=$(absolute "$5") mpirun=$(absolute "$6")
pbs=$templates/adaprec-pbs.sh slurm=$templates/adaprec-slurm.sh
local_mpi="--allow-run-as-root --oversubscribe --mca btl self,vader"
# Tiny runs; the rest of each command line is the template's own.
tiny_bench="-b 1K -e 4K -n 2 -w 0"
tiny_train_data="--synthetic 120"
tiny_train="--epochs 1 --max-steps 2 --batch 4 --candidates fp32,fp8s --spec-steps 2 --phase-steps 1 --spec-evals 2 --val-images 8 --holdout 16"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
fail() { echo "FAIL: $*" >&2; exit 1; }
# Every template and command runs in a clean environment: only what a job would have.
clean=(env -i "HOME=$work" "PATH=$(dirname "$mpirun"):/usr/bin:/bin")

echo "== syntax"
for script in "$pbs" "$slurm" "$templates/bind-gpu.sh"; do
  bash -n "$script" || fail "bash -n $script"
  if command -v shellcheck >/dev/null; then shellcheck "$script" || fail "shellcheck $script"; fi
done

echo "== bind-gpu.sh"
# shellcheck disable=SC2016  # the single-quoted scripts expand in the program bind-gpu.sh runs
visible() {  # visible VAR=VALUE...: CUDA_VISIBLE_DEVICES that bind-gpu.sh gives the program
  "${clean[@]}" "$@" "$bind" /bin/sh -c 'echo "${CUDA_VISIBLE_DEVICES-unset}"'
}
[[ $(visible OMPI_COMM_WORLD_LOCAL_RANK=1 ADAPREC_GPUS_PER_NODE=2) == 1 ]] || fail "Open MPI local rank 1 of 2 GPUs"
[[ $(visible OMPI_COMM_WORLD_LOCAL_RANK=0 ADAPREC_GPUS_PER_NODE=2) == 0 ]] || fail "Open MPI local rank 0 of 2 GPUs"
[[ $(visible SLURM_LOCALID=1 CUDA_VISIBLE_DEVICES=4,6) == 6 ]] || fail "srun local rank 1 of allocation 4,6"
[[ $(visible SLURM_LOCALID=1 CUDA_VISIBLE_DEVICES=3) == 3 ]] || fail "one GPU bound by the scheduler is kept"
[[ $(visible OMPI_COMM_WORLD_LOCAL_RANK=1 ADAPREC_GPUS_PER_NODE=0) == unset ]] || fail "no GPU: nothing set"
if visible OMPI_COMM_WORLD_LOCAL_RANK=2 ADAPREC_GPUS_PER_NODE=2 2>/dev/null; then fail "rank 2 of 2 GPUs accepted"; fi
# Without ADAPREC_GPUS_PER_NODE the GPUs are counted by nvidia-smi -L (a stand-in listing 2 here).
mkdir fake-bin
printf '#!/bin/sh\necho "GPU 0: Tesla P100 (UUID: GPU-a)"\necho "GPU 1: Tesla P100 (UUID: GPU-b)"\n' >fake-bin/nvidia-smi
chmod +x fake-bin/nvidia-smi
[[ $(visible PATH="$work/fake-bin:/usr/bin:/bin" MPI_LOCALRANKID=1) == 1 ]] || fail "rank 1 of 2 GPUs counted by nvidia-smi"
# shellcheck disable=SC2016
words=$("${clean[@]}" "$bind" /bin/sh -c 'echo "$#:$1"' sh "two words") || fail "bind-gpu.sh argument passing"
[[ $words == "1:two words" ]] || fail "bind-gpu.sh changed the arguments: $words"

# dry TEMPLATE VAR=VALUE...: the template's DRY_RUN line (exactly one line on stdout).
dry() {
  local template=$1 out
  shift
  out=$("${clean[@]}" DRY_RUN=1 ADAPREC_PREFIX="$build" "$@" bash "$template") || fail "dry run of $template $*"
  [[ $(wc -l <<<"$out") == 1 ]] || fail "dry run printed more than one line: $out"
  echo "$out"
}
# expect LINE PATTERN...: every glob pattern must match the line (padded with spaces).
expect() {
  local line=" $1 " pattern
  shift
  for pattern in "$@"; do [[ $line == *\ $pattern\ * ]] || fail "'$pattern' missing in:$line"; done
}
# run_line LINE: run a printed command line as printed, in a clean environment.
run_line() {
  local -a command
  eval "command=($1)"
  "${clean[@]}" "${command[@]}"
}

printf 'node01\nnode01\nnode02\nnode02\n' >two-nodes
printf 'localhost\nlocalhost\n' >this-node
pbs_env=(PBS_O_WORKDIR="$work" PBS_JOBID=4242.pbs ADAPREC_CPU_ISA=generic)

echo "== PBS: dry run on 2 fake nodes"
for job in train bench; do
  line=$(dry "$pbs" "${pbs_env[@]}" PBS_NODEFILE="$work/two-nodes" JOB=$job)
  echo "$line"
  program=$train
  [[ $job == bench ]] && program=$bench
  expect "$line" "mpirun -np 4 --hostfile $work/two-nodes --map-by ppr:2:node *" \
    "-x ADAPREC_CPU_ISA=generic" "$bind $program"
done
if "${clean[@]}" DRY_RUN=1 JOB=predict "${pbs_env[@]}" PBS_NODEFILE="$work/two-nodes" bash "$pbs" 2>/dev/null; then
  fail "JOB=predict accepted"
fi

echo "== PBS: the printed commands run here (2 ranks, tiny sizes)"
local_pbs=("${pbs_env[@]}" PBS_NODEFILE="$work/this-node" MPIRUN="$mpirun" MPIRUN_ARGS="$local_mpi")
line=$(dry "$pbs" "${local_pbs[@]}" JOB=bench BENCH_SIZES="$tiny_bench")
run_line "$line" >bench.out || fail "PBS bench command failed: $line"
grep -q ' table2 ' bench.out || fail "PBS bench: no table2 rows"
[[ -s bench-4242.pbs.json ]] || fail "PBS bench: --json bench-4242.pbs.json not written"
line=$(dry "$pbs" "${local_pbs[@]}" JOB=train TRAIN_DATA="$tiny_train_data" TRAIN_LENGTH="$tiny_train")
run_line "$line" >train.out 2>&1 || { cat train.out; fail "PBS train command failed: $line"; }
grep -q '"event":"eval"' train.jsonl || fail "PBS train: no eval record in train.jsonl"
[[ -s checkpoints/LATEST ]] || fail "PBS train: no checkpoints/LATEST"
# Resubmitting the same job continues from its checkpoint (the template passes --resume).
run_line "$line" >train.out 2>&1 || { cat train.out; fail "PBS train resubmission failed: $line"; }
grep -q 'resumed from checkpoints at step 2' train.out || { cat train.out; fail "PBS train: no resume"; }

echo "== the ranks get the ADAPREC_* variables (a bad one shows in the run's output)"
line=$(dry "$pbs" "${local_pbs[@]}" ADAPREC_CPU_ISA=bogus JOB=bench BENCH_SIZES="$tiny_bench")
run_line "$line" >bench.out 2>&1 || true
grep -q "ADAPREC_CPU_ISA='bogus' is invalid" bench.out || { cat bench.out; fail "ADAPREC_CPU_ISA not passed on"; }

echo "== the same run fails when a template passes a wrong flag"
line=$(dry "$pbs" "${local_pbs[@]}" JOB=bench BENCH_SIZES="$tiny_bench" BENCH_ARGS="--formats fp32 --no-such-flag")
if run_line "$line" >/dev/null 2>&1; then fail "a wrong adaprec-bench flag went unnoticed"; fi

slurm_env=(SLURM_SUBMIT_DIR="$work" SLURM_JOB_ID=777 SLURM_NNODES=2 SLURM_NTASKS=4 SLURM_NTASKS_PER_NODE=2
           ADAPREC_CPU_ISA=generic)
echo "== Slurm: dry run on 2 fake nodes"
for launcher in srun mpirun; do
  for job in train bench; do
    line=$(dry "$slurm" "${slurm_env[@]}" LAUNCHER=$launcher JOB=$job)
    echo "$line"
    program=$train
    [[ $job == bench ]] && program=$bench
    if [[ $launcher == srun ]]; then
      expect "$line" "srun --ntasks=4 --ntasks-per-node=2 --export=ALL,ADAPREC_CPU_ISA=generic $bind $program"
    else
      expect "$line" "mpirun -np 4 --map-by ppr:2:node -x ADAPREC_CPU_ISA=generic *" "$bind $program"
    fi
  done
done

echo "== Slurm: the printed commands run here (2 ranks, tiny sizes)"
local_slurm=("${slurm_env[@]}" SLURM_NTASKS=2)
rm -rf checkpoints train.jsonl
# srun is not here: its per-rank part (from bind-gpu.sh on) runs under mpirun with the --export variables.
line=$(dry "$slurm" "${local_slurm[@]}" JOB=train TRAIN_DATA="$tiny_train_data" TRAIN_LENGTH="$tiny_train")
eval "words=($line)"
[[ ${words[0]} == srun && ${words[3]} == --export=ALL,* ]] || fail "unexpected srun line: $line"
exports=()
IFS=, read -r -a assignments <<<"${words[3]#--export=ALL,}"
for assignment in "${assignments[@]}"; do exports+=(-x "$assignment"); done
# shellcheck disable=SC2086  # local_mpi is a list of flags
"${clean[@]}" "$mpirun" -np 2 $local_mpi "${exports[@]}" "${words[@]:4}" >train.out 2>&1 ||
  { cat train.out; fail "Slurm (srun) train command failed: $line"; }
grep -q '"event":"eval"' train.jsonl || fail "Slurm train: no eval record in train.jsonl"
line=$(dry "$slurm" "${local_slurm[@]}" LAUNCHER=mpirun LAUNCHER_ARGS="$local_mpi" JOB=bench BENCH_SIZES="$tiny_bench")
rm -f bench-777.json
run_line "$line" >bench.out || fail "Slurm (mpirun) bench command failed: $line"
[[ -s bench-777.json ]] || fail "Slurm bench: --json bench-777.json not written"

echo "== 2 emulated nodes x 2 ranks (tools/vcluster): the per-rank part of the PBS train line"
# bind-gpu.sh must count local ranks per node (0 and 1 on each node), not across the job. Needs root and
# network namespaces; elsewhere this part is skipped (the rest of the test still counts).
vcluster=$templates/../vcluster
# The same probe as the vcluster smoke test: every step `vcluster run` takes, the failing one named.
if probe=$("$vcluster" probe --prefix adaprec-clt); then
  rm -rf checkpoints train.jsonl
  line=$(dry "$pbs" "${pbs_env[@]}" PBS_NODEFILE="$work/two-nodes" JOB=train TRAIN_DATA="$tiny_train_data" \
    TRAIN_LENGTH="$tiny_train")
  eval "words=($line)"
  for i in "${!words[@]}"; do [[ ${words[i]} == "$bind" ]] && first=$i; done
  ADAPREC_VCLUSTER_PREFIX=adaprec-clt-$$ "$vcluster" run --nodes 2 --ranks-per-node 2 --rate none --timeout 60 \
    --mpirun-args "-x ADAPREC_BIND_VERBOSE=1 -x ADAPREC_GPUS_PER_NODE=2 -x ADAPREC_CPU_ISA=generic" \
    -- "${words[@]:first}" >nodes.out 2>&1 || { cat nodes.out; fail "train on 2 emulated nodes failed"; }
  bound=$(grep -o 'n[01] local rank [01] -> CUDA_VISIBLE_DEVICES=[01]' nodes.out | sort | tr '\n' ';')
  expected="n0 local rank 0 -> CUDA_VISIBLE_DEVICES=0;n0 local rank 1 -> CUDA_VISIBLE_DEVICES=1;"
  expected+="n1 local rank 0 -> CUDA_VISIBLE_DEVICES=0;n1 local rank 1 -> CUDA_VISIBLE_DEVICES=1;"
  [[ $bound == "$expected" ]] || { cat nodes.out; fail "GPU binding on 2 nodes: $bound"; }
  grep -q '"event":"eval"' train.jsonl || fail "train on 2 emulated nodes: no eval record"
else
  echo "skipped: tools/vcluster cannot run here: $probe"
fi

echo "cluster templates: all checks passed"
