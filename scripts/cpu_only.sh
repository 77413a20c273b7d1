#!/usr/bin/env bash
# The CPU-only build (STOF_CUDA=OFF) in build-cpu/: configures and builds it,
# checks that it neither links the CUDA libraries nor includes a CUDA header
# outside `#if STOF_HAVE_CUDA` (this machine may have the headers even where a
# user's has none), and runs every test (the GPU ones report "skipped").
#   scripts/cpu_only.sh [ctest arguments]
set -euo pipefail
cd "$(dirname "$0")/.."
gen=(); command -v ninja >/dev/null 2>&1 && gen=(-G Ninja)
[ -f build-cpu/CMakeCache.txt ] && gen=()
cmake -S . -B build-cpu "${gen[@]}" -DCMAKE_BUILD_TYPE=Release -DSTOF_CUDA=OFF >/dev/null
cmake --build build-cpu -j "$(nproc)"

if ldd build-cpu/libstof.so build-cpu/stof | grep -Ei 'libcuda|libcublas'; then
  echo "cpu_only: the CPU-only build links a CUDA library (above)" >&2
  exit 1
fi
# Every C file the build compiles: a CUDA include must sit inside #if STOF_HAVE_CUDA.
python3 - build-cpu/compile_commands.json <<'PY'
import json, re, sys
bad = []
for entry in json.load(open(sys.argv[1])):
    path = entry["file"]
    depth = []  # per open #if: does it say STOF_HAVE_CUDA
    for n, line in enumerate(open(path, errors="replace"), 1):
        s = line.strip()
        if re.match(r"#\s*if", s):
            depth.append(bool(re.match(r"#\s*if\s+STOF_HAVE_CUDA\b", s)))
        elif re.match(r"#\s*endif", s) and depth:
            depth.pop()
        elif re.match(r"#\s*include\s*[<\"](cuda|cublas|cuda_runtime|nvtx|cu[A-Z])", s):
            if not any(depth):
                bad.append(f"{path}:{n}: {s}")
if bad:
    print("cpu_only: CUDA headers included outside #if STOF_HAVE_CUDA:", *bad, sep="\n  ")
    sys.exit(1)
PY
ctest --test-dir build-cpu --output-on-failure -j "$(nproc)" "$@"
