#!/usr/bin/env bash
# Builds the Python wheel as `pip install .` does (scikit-build-core over the
# CMake build; CPU-only here for speed), installs it into a fresh venv, and
# checks it there with no PYTHONPATH or STOF_LIBRARY: `import stof` finds the
# bundled library, the package version is the library's, the stof command is
# on the venv's PATH, and the Python examples run.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
unset PYTHONPATH STOF_LIBRARY
export CUDA_VISIBLE_DEVICES=

python3 -m venv "$tmp/venv"
py=$tmp/venv/bin/python
"$py" -m pip install -q --upgrade pip
"$py" -m pip wheel -q . -w "$tmp/wheels" -C cmake.define.STOF_CUDA=OFF
"$py" -m pip install -q "$tmp"/wheels/stof-*.whl

want=$(sed -n 's/^project(stof VERSION \([0-9.]*\).*/\1/p' CMakeLists.txt)
cd "$tmp"
"$py" - "$want" <<'PY'
import importlib.metadata, os, sys
import stof
want = sys.argv[1]
lib = stof.library_path()
assert lib.startswith(os.path.dirname(stof.__file__)), f"not the bundled library: {lib}"
assert stof.__version__ == want, (stof.__version__, want)
assert importlib.metadata.version("stof") == want, importlib.metadata.version("stof")
assert "Apache-2.0" in importlib.metadata.metadata("stof")["License"]
print(f"check_wheel: stof {stof.__version__} from {lib}")
PY
"$tmp/venv/bin/stof" --version
"$py" "$root/examples/sparse_attention.py" >/dev/null
"$py" "$root/examples/embed.py" "$root/models/all-MiniLM-L6-v2" >/dev/null
echo "check_wheel: the examples ran against the installed wheel"
