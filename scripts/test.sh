#!/usr/bin/env bash
# Sets up, builds and runs every test. GPU tests (label gpu) report "skipped"
# on a machine without a CUDA device.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh
ctest --test-dir build --output-on-failure -j "$(nproc)" "$@"
