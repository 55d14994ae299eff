#!/bin/bash
# `meson install` delivers what a user's program needs: headers, libadaprec and adaprec.pc, so that
#   c++ prog.cpp $(pkg-config --cflags --libs adaprec)
# builds and runs. Installs into a temporary DESTDIR (nothing on the system changes).
set -u
builddir=$1
dest=$(mktemp -d)
trap 'rm -rf "$dest"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

meson install -C "$builddir" --no-rebuild --destdir "$dest" > "$dest/install.log" 2>&1 || { cat "$dest/install.log"; fail "meson install"; }
pc=$(find "$dest" -name adaprec.pc | head -1)
[ -n "$pc" ] || fail "adaprec.pc not installed"
for tool in adaprec-codec adaprec-codec-bench; do
  find "$dest" -name "$tool" -type f | grep -q . || fail "$tool not installed"
done
find "$dest" -path "*include/adaprec/codec.hpp" | grep -q . || fail "public headers not installed"

cat > "$dest/prog.cpp" <<'CPP'
#include <adaprec/codec.hpp>
#include <cstdio>
#include <vector>
int main() {
  std::vector<float> x = {1.0f, -2.5f, 3.0f};
  std::vector<unsigned char> chunk(adaprec::encodedBytes(adaprec::Format::kFp16, x.size()));
  adaprec::encode(adaprec::Format::kFp16, x.data(), x.size(), chunk.data(), chunk.size());
  std::vector<float> y(x.size());
  adaprec::decode(adaprec::Format::kFp16, chunk.data(), chunk.size(), y.data(), y.size());
  std::printf("%g %g %g\n", y[0], y[1], y[2]);
  return y == x ? 0 : 1;
}
CPP
export PKG_CONFIG_PATH=$(dirname "$pc") PKG_CONFIG_SYSROOT_DIR=$dest
flags=$(pkg-config --cflags --libs adaprec) || fail "pkg-config adaprec"
libdir=$(dirname "$(find "$dest" -name 'libadaprec.so' | head -1)")
# -rpath-link / LD_LIBRARY_PATH only because the install sits under a DESTDIR, not in the real prefix.
# shellcheck disable=SC2086
c++ -std=c++20 "$dest/prog.cpp" $flags -Wl,-rpath-link,"$libdir" -o "$dest/prog" ||
  fail "compiling a user program with: $flags"
LD_LIBRARY_PATH="$libdir" "$dest/prog" || fail "user program"

# The Python package: installed beside the interpreter's modules, pointing at the installed library.
init=$(find "$dest" -path "*/adaprec/__init__.py" | head -1)
[ -n "$init" ] || fail "python package adaprec not installed"
paths=$(dirname "$init")/_install_paths.py
[ -f "$paths" ] || fail "adaprec/_install_paths.py not installed"
# Run the file rather than parse it: LIBRARY is an expression (absolute here, relative after pip install).
library=$(/usr/bin/python3 -c 'import runpy, sys; print(runpy.run_path(sys.argv[1])["LIBRARY"])' "$paths")
[ -f "$dest$library" ] || fail "_install_paths.py names $library, which was not installed"
if /usr/bin/python3 -c 'import mpi4py, numpy' 2>/dev/null; then
  PYTHONPATH=$(dirname "$(dirname "$init")") ADAPREC_LIBRARY="$dest$library" LD_LIBRARY_PATH="$libdir" \
    /usr/bin/python3 -c 'import numpy, adaprec; x = numpy.ones(3, numpy.float32); s = adaprec.allreduce(x, format="fp16"); assert list(x) == [1, 1, 1] and s.count == 3, s' ||
    fail "installed python package"
fi
# Installed programs run without LD_LIBRARY_PATH: their rpath is relative to where they are
# ($ORIGIN/../<libdir>), so it holds under any --prefix and under this DESTDIR alike.
for tool in adaprec-codec adaprec-codec-bench adaprec-predict adaprec-train adaprec-bench; do
  path=$(find "$dest" -name "$tool" -type f | head -1)
  [ -n "$path" ] || continue
  env -u LD_LIBRARY_PATH "$path" --help > "$dest/$tool.out" 2>&1 ||
    { cat "$dest/$tool.out"; fail "installed $tool does not start without LD_LIBRARY_PATH"; }
done
echo "install: headers, library, tools, adaprec.pc and the python package work for a user program"
