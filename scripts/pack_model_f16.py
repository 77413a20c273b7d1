#!/usr/bin/env python3
"""pack_model_f16.py — a float16 copy of a model folder: every F32 tensor of its
model.safetensors written as F16 (other dtypes as they are), beside copies of the folder's
other files (config, tokenizer, sentence-transformers modules and pooling). Half the bytes of
an fp32 checkpoint, for machines that cannot download the model and take a bounded tree:
all-MiniLM-L6-v2 goes from 91 MB to 45 MB. stof runs F16 weights as they are on the GPU and
widens them on the CPU, so embeddings move by float16 rounding only.

    python3 scripts/pack_model_f16.py models/all-MiniLM-L6-v2 OUT_DIR

A value outside float16's range is refused (it would become infinity), as is a folder without
model.safetensors or with other weight files (pytorch_model.bin, ONNX, ...), which would be
copied as fp32 or not at all.
"""

import json
import os
import shutil
import struct
import sys

import numpy as np

WEIGHTS = "model.safetensors"
OTHER_WEIGHTS = (".bin", ".pt", ".pth", ".onnx", ".h5", ".msgpack", ".ot", ".ckpt")
F16_MAX = float(np.finfo(np.float16).max)


def read_safetensors(path):
    """(header dict, data bytes) of a safetensors file."""
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
        return header, f.read()


def to_f16(header, data):
    """A new (header, data) with F32 tensors as F16, tensors laid out in their old order."""
    names = sorted((k for k in header if k != "__metadata__"),
                   key=lambda k: header[k]["data_offsets"][0])
    out_header = {"__metadata__": header["__metadata__"]} if "__metadata__" in header else {}
    chunks, offset = [], 0
    for name in names:
        t = header[name]
        begin, end = t["data_offsets"]
        raw = data[begin:end]
        dtype = t["dtype"]
        if dtype == "F32":
            x = np.frombuffer(raw, dtype="<f4")
            if x.size and np.abs(x).max() > F16_MAX:
                raise ValueError(f"{name}: a value of magnitude {np.abs(x).max():g} does not "
                                 f"fit in float16")
            raw = x.astype("<f2").tobytes()
            dtype = "F16"
        out_header[name] = {"dtype": dtype, "shape": t["shape"],
                            "data_offsets": [offset, offset + len(raw)]}
        chunks.append(raw)
        offset += len(raw)
    return out_header, b"".join(chunks)


def write_safetensors(path, header, data):
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)  # the data starts 8-byte aligned
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        f.write(data)


def pack(src, dst):
    """Writes the float16 copy of folder src into dst (created; must not hold a model)."""
    if not os.path.isfile(os.path.join(src, WEIGHTS)):
        raise ValueError(f"{src} has no {WEIGHTS}")
    for root, _, files in os.walk(src):
        for name in files:
            if name.endswith(OTHER_WEIGHTS):
                raise ValueError(f"{os.path.join(root, name)}: weights other than {WEIGHTS} "
                                 f"are not converted; remove them from a copy first")
    if os.path.exists(os.path.join(dst, WEIGHTS)):
        raise ValueError(f"{dst} already holds {WEIGHTS}")
    os.makedirs(dst, exist_ok=True)
    for root, dirs, files in os.walk(src):
        dirs[:] = [d for d in dirs if not d.startswith(".")]
        rel = os.path.relpath(root, src)
        os.makedirs(os.path.join(dst, rel), exist_ok=True)
        for name in files:
            if name != WEIGHTS and not name.startswith("."):
                shutil.copy(os.path.join(root, name), os.path.join(dst, rel, name))
    header, data = read_safetensors(os.path.join(src, WEIGHTS))
    write_safetensors(os.path.join(dst, WEIGHTS), *to_f16(header, data))


def main(argv):
    if len(argv) != 3:
        sys.exit(f"usage: {argv[0]} MODEL_DIR OUT_DIR")
    try:
        pack(argv[1], argv[2])
    except (OSError, ValueError) as e:
        sys.exit(f"pack_model_f16: {e}")
    size = os.path.getsize(os.path.join(argv[2], WEIGHTS))
    print(f"{argv[2]}: {WEIGHTS} {size / 1e6:.1f} MB")


if __name__ == "__main__":
    main(sys.argv)
