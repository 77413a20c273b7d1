#!/usr/bin/env bash
# Installs a built tree into a temporary prefix (cmake --install) and builds the
# examples against it as a user would: with find_package(stof) (shared and
# static library) and with pkg-config (shared and static), then runs each one
# and the Python examples on the CPU.
#   scripts/check_install.sh [BUILD_DIR]      (default build)
# The C example and examples/embed.py need models/all-MiniLM-L6-v2
# (scripts/fetch_model.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
build=${1:-build}
model=$root/models/all-MiniLM-L6-v2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export CUDA_VISIBLE_DEVICES=  # the examples run on the CPU backend

say() { printf 'check_install: %s\n' "$*"; }

prefix=$tmp/prefix
cmake --install "$build" --prefix "$prefix" >/dev/null
for f in bin/stof include/stof.h lib/libstof.a lib/pkgconfig/stof.pc \
         lib/cmake/stof/stofConfig.cmake lib/cmake/stof/stofConfigVersion.cmake; do
  [ -e "$prefix/$f" ] || { echo "check_install: $f was not installed" >&2; exit 1; }
done
ls "$prefix"/lib/libstof.so* >/dev/null
"$prefix/bin/stof" --version
say "installed into $prefix"

# find_package(stof): the shared and the static library.
gen=(); command -v ninja >/dev/null 2>&1 && gen=(-G Ninja)
for kind in shared static; do
  static=OFF; [ $kind = static ] && static=ON
  cmake -S examples -B "$tmp/cmake-$kind" "${gen[@]}" -DCMAKE_PREFIX_PATH="$prefix" \
    -DSTOF_STATIC=$static >/dev/null
  cmake --build "$tmp/cmake-$kind" >/dev/null
  "$tmp/cmake-$kind/embed" "$model" "stof from an installed tree" >/dev/null
  say "find_package(stof), $kind library: built and ran examples/embed.c"
done

# pkg-config: the shared library, then libstof.a with pkg-config --static's libraries.
mkdir "$tmp/pc"
cp examples/embed.c examples/Makefile "$tmp/pc/"
PKG_CONFIG_PATH="$prefix/lib/pkgconfig" make -s -C "$tmp/pc" embed embed_static
for exe in embed embed_static; do
  "$tmp/pc/$exe" "$model" "stof through pkg-config" >/dev/null
  say "pkg-config: built and ran $exe"
done
if ldd "$tmp/pc/embed_static" | grep -q libstof; then
  echo "check_install: embed_static is linked to libstof.so" >&2
  exit 1
fi

# The Python examples against the installed library.
STOF_LIBRARY=$(ls "$prefix"/lib/libstof.so) PYTHONPATH=$root/python \
  python3 examples/sparse_attention.py >/dev/null
STOF_LIBRARY=$(ls "$prefix"/lib/libstof.so) PYTHONPATH=$root/python \
  python3 examples/embed.py "$model" >/dev/null
say "ran examples/sparse_attention.py and examples/embed.py"
