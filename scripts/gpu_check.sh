#!/usr/bin/env bash
# On a GPU machine: build for its architecture, run every test (the gpu label
# included), then the benchmarks. Logs and results go to $OUT (default
# build-gpu/out). Steps: all (default) or a comma list of build,test,bench,compare.
set -uo pipefail
cd "$(dirname "$0")/.."
steps=${1:-all}
out=${OUT:-build-gpu/out}
mkdir -p "$out"
has() { [ "$steps" = all ] || [[ ",$steps," == *",$1,"* ]]; }
export STOF_COMMIT=${STOF_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm --format=csv,noheader | tee "$out/gpu.txt"
rc=0
# Debian packages carried in .deps/ (the GPU machine installs nothing) are unpacked beside the tree.
extra=()
if [ -d .deps ]; then
  for d in .deps/*.deb; do dpkg -x "$d" .deps/root; done
  # Their pkg-config files name /usr: point them at the unpacked tree.
  pc=$PWD/.deps/root/usr/lib/x86_64-linux-gnu/pkgconfig
  sed -i -E "s#^(prefix|libdir|includedir)=/usr#\1=$PWD/.deps/root/usr#" "$pc"/*.pc
  export PKG_CONFIG_PATH=$pc${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}
  extra=(-DCMAKE_PREFIX_PATH="$PWD/.deps/root/usr")
  export LD_LIBRARY_PATH=$PWD/.deps/root/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
fi
if has build; then
  cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release "${extra[@]}" \
    -DSTOF_CUDA_ARCHS="${STOF_CUDA_ARCHS:-90}" >"$out/build.log" 2>&1 &&
  cmake --build build-gpu -j "$(nproc)" >>"$out/build.log" 2>&1 || { echo "build FAILED"; tail -n 60 "$out/build.log"; exit 1; }
  echo "build ok"
fi
if has test; then
  ctest --test-dir build-gpu --output-on-failure -j 4 ${CTEST_ARGS:-} >"$out/ctest.log" 2>&1 || rc=1
  grep -E 'tests passed|tests failed|\*\*\*Failed|Failed|Skipped|Not Run' "$out/ctest.log" | head -40
fi
if has bench; then
  for b in build-gpu/bench/bench_*; do
    [ -x "$b" ] || continue
    n=$(basename "$b")
    echo "== $n"
    timeout 300 "$b" --json "$out/$n.json" >"$out/$n.log" 2>&1 || echo "$n exited $?"
    tail -n 30 "$out/$n.log"
  done
fi
if has compare; then
  export STOF_LIBRARY=$PWD/build-gpu/libstof.so PYTHONPATH=$PWD/python PYTHONUNBUFFERED=1
  timeout 540 python3 bench/compare_attention.py --out "$out/attention.json" ${COMPARE_ARGS:-} \
    >"$out/compare.log" 2>&1 || { echo "compare exited $?"; rc=1; }
  tail -n 40 "$out/compare.log"
fi
exit $rc
