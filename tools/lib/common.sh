# Shared by tools/demo and tools/test: install what is missing, configure and build.
# Source it; it defines functions only (and ADAPREC_ROOT).

ADAPREC_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)

# Debian packages the build and the demo need. CUDA and NCCL are optional and not installed from here
# (they come with the CUDA toolkit in /usr/local/cuda).
ADAPREC_PACKAGES=(meson ninja-build g++ pkgconf zlib1g-dev libopenmpi-dev openmpi-bin libeigen3-dev catch2
  libcli11-dev nlohmann-json3-dev dataset-fashion-mnist python3 python3-numpy python3-scipy python3-matplotlib python3-mpi4py
  iproute2)
# Only the test suites need these (PyTorch alone is over half of all packages a fresh machine installs):
# tools/test passes them to adaprec_install_missing, tools/demo does not. python3-venv: the pip-install
# test's fresh venv (ensurepip; the venv's pip comes with it).
ADAPREC_TEST_PACKAGES=(python3-torch python3-venv)

# What the fuzz build needs on top (tools/fuzz, tools/test --ci): clang 14 and its runtime (libFuzzer,
# ASan, UBSan). Passed to adaprec_install_missing by the scripts that build build-fuzz/.
ADAPREC_FUZZ_PACKAGES=(clang-14 libclang-rt-14-dev)
# The address+undefined sanitizer build (tools/test --sanitize, --ci) is clang 14's too.
ADAPREC_SANITIZE_PACKAGES=(clang-14 libclang-rt-14-dev)
# What the ThreadSanitizer build of the kernel launcher test needs (tools/test --tsan, --ci): clang 14
# with its TSan runtime (GCC's libtsan is not always installed).
ADAPREC_TSAN_PACKAGES=(clang-14 libclang-rt-14-dev)

adaprec_install_missing() {
  local missing=() p
  for p in "${ADAPREC_PACKAGES[@]}" "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  echo "== installing missing Debian packages: ${missing[*]}"
  local sudo=""
  [ "$(id -u)" -ne 0 ] && sudo="sudo"
  $sudo apt-get update -q || return 1
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q --no-install-recommends "${missing[@]}" || return 1
}

# Open MPI refuses root unless told; the project's tests and demo run as root on CI machines.
adaprec_mpi_env() {
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
  export OMPI_MCA_rmaps_base_oversubscribe=1
  # nvcc lives here when the CUDA toolkit is installed; meson then builds kernels/ (-Dcuda=auto).
  [ -d /usr/local/cuda/bin ] && export PATH="$PATH:/usr/local/cuda/bin"
  return 0
}

# adaprec_build BUILDDIR [meson setup options...]: configure once (reusing an existing dir), build.
adaprec_build() {
  local dir=$1
  shift
  if [ ! -f "$dir/build.ninja" ]; then
    meson setup "$dir" "$@" || return 1
  fi
  ninja -C "$dir" || return 1
}

# adaprec_sanitize_setup: configure build-sanitize/ once: clang 14 with address+undefined sanitizers,
# host only (NCCL's host fake included). clang, not GCC: the same sanitizers, and it compiled this tree
# 2.6x faster (GCC's instrumented -O2 build took 629 s of CI's 42 minutes; clang's tests ran 8 % longer).
# A tree configured with another compiler (GCC, before 2026-11-27) is set up again.
adaprec_sanitize_setup() {
  if [ -f build-sanitize/build.ninja ]; then
    grep -q 'clang++-14' build-sanitize/build.ninja && return 0
    rm -rf build-sanitize
  fi
  CC=clang-14 CXX=clang++-14 meson setup build-sanitize -Db_sanitize=address,undefined -Db_lundef=false \
    -Dbuildtype=debugoptimized -Dcuda=disabled -Dbench=false
}

# adaprec_fuzz_setup: configure build-fuzz/ once: clang 14, libFuzzer instrumentation (-Dfuzz=true),
# address+undefined sanitizers, host only. Its tests are the harnesses of tests/fuzz (suite fuzz).
adaprec_fuzz_setup() {
  [ -f build-fuzz/build.ninja ] && return 0
  CC=clang-14 CXX=clang++-14 meson setup build-fuzz -Dfuzz=true -Db_sanitize=address,undefined -Db_lundef=false \
    -Dbuildtype=debugoptimized -Dcuda=disabled -Dnccl=disabled -Dbench=false
}

# adaprec_tsan_setup: configure build-tsan/ once: clang 14 with ThreadSanitizer, host only. tools/test
# builds and runs only its suite tsan there (kernels_threaded: the threaded CPU kernel launcher, which
# needs no library), so the step stays small.
adaprec_tsan_setup() {
  [ -f build-tsan/build.ninja ] && return 0
  CC=clang-14 CXX=clang++-14 meson setup build-tsan -Db_sanitize=thread -Db_lundef=false \
    -Dbuildtype=debugoptimized -Dcuda=disabled -Dnccl=disabled -Dbench=false
}
