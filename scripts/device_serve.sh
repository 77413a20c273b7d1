#!/usr/bin/env bash
# On a GPU machine, after `scripts/gpu_check.sh build`: the serving load test of BENCH.md
# suite E (bench/serve_load.py) against `build-gpu/stof serve --device gpu`, for
# all-MiniLM-L6-v2 (its float16 copy from scripts/pack_model_f16.py, carried in: the machine
# cannot download) and a BERT-base-shaped model made here (random weights, MiniLM's uncased
# tokenizer files). The offline ceiling is measured in the same run on the same device.
#
#   scripts/device_serve.sh MINILM_F16_DIR [SECONDS [SERVE_LOAD_ARGS...]]
#
# SECONDS of load per model (default 180; the issue's 3 minutes); the whole run takes about
# 2 * (SECONDS + 40) s. Further arguments go to bench/serve_load.py (--max-batch-tokens N,
# --max-wait-ms M: passed on to stof serve). Writes $OUT/serve-DATE-GPU.json (default OUT: build-gpu/out) and
# $OUT/serve.log; exits non-zero when a request failed or a step did. STOF_BUILD=build
# SERVE_DEVICE=cpu runs the same steps on the CPU (a check of the script, not suite E).
set -euo pipefail
cd "$(dirname "$0")/.."
minilm=${1:?usage: scripts/device_serve.sh MINILM_F16_DIR [SECONDS]}
seconds=${2:-180}
shift $(( $# < 2 ? $# : 2 ))
out=${OUT:-build-gpu/out}
mkdir -p "$out"
build=${STOF_BUILD:-build-gpu}
device=${SERVE_DEVICE:-gpu}
stof=$build/stof
[ -x "$stof" ] || { echo "device_serve: $stof is missing (run scripts/gpu_check.sh build)"; exit 1; }
[ -f "$minilm/model.safetensors" ] || { echo "device_serve: no model.safetensors in $minilm"; exit 1; }
# the Debian packages gpu_check.sh unpacked beside the tree (libmicrohttpd among them)
if [ -d .deps/root/usr/lib/x86_64-linux-gnu ]; then
  export LD_LIBRARY_PATH=$PWD/.deps/root/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
fi
if "$stof" serve --help 2>&1 | grep -q "without libmicrohttpd"; then
  echo "device_serve: $stof was built without libmicrohttpd (carry its .deb in .deps/)"; exit 1
fi
export STOF_LIBRARY=$PWD/$build/libstof.so PYTHONPATH=$PWD/python PYTHONUNBUFFERED=1
export STOF_COMMIT=${STOF_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}
gpu=cpu
if [ "$device" = gpu ]; then gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -n 1); fi
slug=$(python3 -c 'import sys; sys.path.insert(0, "bench"); from common import gpu_slug; print(gpu_slug(sys.argv[1]))' "$gpu")
result=$out/serve-$(date -u +%F)-$slug.json
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
echo "device_serve: $gpu, $seconds s per model, results in $result"
python3 bench/serve_load.py --stof "$stof" --device "$device" --model "$minilm" \
  --bert-base "$work/bert-base" --duration-s "$seconds" --warmup-s 10 --out "$result" "$@" \
  >"$out/serve.log" 2>&1 || { rc=$?; tail -n 40 "$out/serve.log"; exit $rc; }
python3 -c 'import json, sys; print(json.dumps(json.load(open(sys.argv[1]))["summary"]))' "$result"
