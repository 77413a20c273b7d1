#!/usr/bin/env bash
# The CPU backend's threads under ThreadSanitizer: builds the CPU-only library
# parts and the threaded tests in build-tsan/ with -fsanitize=thread and runs
#   test_cpu_close_race  models loaded, run and closed from 8 threads x 50
#                        rounds on one context (the close-while-encoding finding)
#   test_cpu_pool        the pool: nested calls, two user threads at once
#   test_cpu_fast        the row ops on 1-5 pool threads
#   test_attn_cpu_fast   the tile-walking attention on 1-5 pool threads
# Any report fails the step (exit code 66), even when the outputs came out right.
#
# Why ThreadSanitizer and not ASan plus a stress loop: a race that corrupts
# nothing this run is still reported. It works here because the CPU backend
# holds OpenBLAS to one thread per call (its own pool does the splitting), and
# OPENBLAS_NUM_THREADS=1 keeps OpenBLAS's uninstrumented server threads from
# starting at all; what it cannot see inside OpenBLAS it then has no reason to
# see. -Wno-maybe-uninitialized: instrumented code changes GCC's inlining and
# brings false warnings (the normal build keeps them as errors).
#   scripts/sanitize_cpu.sh
set -euo pipefail
cd "$(dirname "$0")/.."
gen=(); command -v ninja >/dev/null 2>&1 && gen=(-G Ninja)
[ -f build-tsan/CMakeCache.txt ] && gen=()
tests=(test_cpu_close_race test_cpu_pool test_cpu_fast test_attn_cpu_fast)
cmake -S . -B build-tsan "${gen[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSTOF_CUDA=OFF \
  -DCMAKE_C_FLAGS="-fsanitize=thread -Wno-maybe-uninitialized" \
  -DCMAKE_EXE_LINKER_FLAGS=-fsanitize=thread -DCMAKE_SHARED_LINKER_FLAGS=-fsanitize=thread \
  >/dev/null
cmake --build build-tsan -j "$(nproc)" --target "${tests[@]}"
status=0
for t in "${tests[@]}"; do
  log=build-tsan/$t.tsan.log
  start=$SECONDS
  if OPENBLAS_NUM_THREADS=1 TSAN_OPTIONS="halt_on_error=1 exitcode=66 second_deadlock_stack=1" \
      "build-tsan/tests/$t" >"$log" 2>&1; then
    echo "sanitize_cpu: $t clean ($((SECONDS - start)) s)"
  else
    echo "sanitize_cpu: $t FAILED (exit $?):"; tail -n 60 "$log"; status=1
  fi
done
exit $status
