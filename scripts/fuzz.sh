#!/usr/bin/env bash
# Builds the libFuzzer harnesses (clang, ASan, UBSan) in build-fuzz/ and runs
# each for the given number of seconds (default 60) from its seed corpus.
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-60}
if ! command -v nvcc >/dev/null 2>&1 && [ -x /usr/local/cuda/bin/nvcc ]; then
  export PATH=/usr/local/cuda/bin:$PATH
fi
cmake -S fuzz -B build-fuzz -DCMAKE_C_COMPILER=clang -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build-fuzz -j "$(nproc)"
status=0
for f in build-fuzz/fuzz_*; do
  [ -x "$f" ] || continue
  name=$(basename "$f")
  corpus=build-fuzz/corpus/$name
  mkdir -p "$corpus"
  seeds=()
  [ -d "fuzz/seeds/$name" ] && seeds=("fuzz/seeds/$name")
  echo "fuzz: $name for ${secs}s"
  if ! "$f" -max_total_time="$secs" -print_final_stats=0 "$corpus" "${seeds[@]}" \
      >"build-fuzz/$name.log" 2>&1; then
    echo "fuzz: $name FAILED:"; tail -n 40 "build-fuzz/$name.log"; status=1
  else
    grep -E '^(#[0-9]+|Done)' "build-fuzz/$name.log" | tail -n 1
  fi
done
exit $status
