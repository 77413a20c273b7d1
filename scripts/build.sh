#!/usr/bin/env bash
# Configures and builds stof (library, CLI, tests, benchmarks) in build/.
# STOF_CUDA_ARCHS overrides the GPU targets (default "80;90").
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v nvcc >/dev/null 2>&1 && [ -x /usr/local/cuda/bin/nvcc ]; then
  export PATH=/usr/local/cuda/bin:$PATH
fi
gen=(); command -v ninja >/dev/null 2>&1 && gen=(-G Ninja)
[ -f build/CMakeCache.txt ] && gen=()
cmake -S . -B build "${gen[@]}" -DCMAKE_BUILD_TYPE=Release \
  -DSTOF_CUDA_ARCHS="${STOF_CUDA_ARCHS:-80;90}" >/dev/null
cmake --build build -j "$(nproc)"
