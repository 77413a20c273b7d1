"""test_pack_model_f16.py — scripts/pack_model_f16.py, the float16 copy of a model folder
that the GPU serving run carries: every F32 tensor becomes the F16 rounding of its values
(other dtypes, metadata and the other files unchanged), values out of float16's range and
foreign weight files are refused, and stof loads the copy of all-MiniLM-L6-v2 and embeds as
the fp32 folder does within float16 rounding (skipped, as the project's other golden tests
are, when models/all-MiniLM-L6-v2 is absent)."""

import json
import os
import struct
import subprocess
import sys

import numpy as np
import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(REPO, "scripts"))
import pack_model_f16 as pack  # noqa: E402

STOF = os.environ.get("STOF_CLI", os.path.join(REPO, "build", "stof"))
MINILM = os.path.join(REPO, "models", "all-MiniLM-L6-v2")


def write_folder(path, tensors, metadata=None):
    """A model folder: tensors {name: numpy array} as model.safetensors (written by the
    script's own writer from a header built here), a config and a pooling module."""
    header, chunks, offset = {}, [], 0
    if metadata:
        header["__metadata__"] = metadata
    names = {np.dtype("<f4"): "F32", np.dtype("<f2"): "F16", np.dtype("<i8"): "I64"}
    for name, x in tensors.items():
        raw = np.ascontiguousarray(x).tobytes()
        header[name] = {"dtype": names[x.dtype], "shape": list(x.shape),
                        "data_offsets": [offset, offset + len(raw)]}
        chunks.append(raw)
        offset += len(raw)
    os.makedirs(os.path.join(path, "1_Pooling"))
    pack.write_safetensors(os.path.join(path, "model.safetensors"), header, b"".join(chunks))
    with open(os.path.join(path, "config.json"), "w") as f:
        json.dump({"model_type": "bert"}, f)
    with open(os.path.join(path, "1_Pooling", "config.json"), "w") as f:
        json.dump({"pooling_mode_mean_tokens": True}, f)


def read_tensors(path):
    header, data = pack.read_safetensors(os.path.join(path, "model.safetensors"))
    dtypes = {"F32": "<f4", "F16": "<f2", "I64": "<i8"}
    out = {}
    for name, t in header.items():
        if name != "__metadata__":
            begin, end = t["data_offsets"]
            out[name] = np.frombuffer(data[begin:end], dtypes[t["dtype"]]).reshape(t["shape"])
    return header, out


def test_f32_becomes_f16_rounding(tmp_path):
    rng = np.random.default_rng(7)
    tensors = {"encoder.weight": rng.standard_normal((5, 3)).astype("<f4") * 100,
               "position_ids": np.arange(6, dtype="<i8").reshape(1, 6),
               "half.bias": rng.standard_normal(3).astype("<f2"),
               "a.scalar": np.array(65504.0, dtype="<f4")}
    src, dst = str(tmp_path / "src"), str(tmp_path / "dst")
    write_folder(src, tensors, {"format": "pt"})
    pack.pack(src, dst)
    header, got = read_tensors(dst)
    assert header["__metadata__"] == {"format": "pt"}
    assert {k: v["dtype"] for k, v in header.items() if k != "__metadata__"} == {
        "encoder.weight": "F16", "position_ids": "I64", "half.bias": "F16", "a.scalar": "F16"}
    for name, x in tensors.items():
        assert got[name].shape == x.shape
        want = x.astype("<f2") if x.dtype == np.dtype("<f4") else x
        assert np.array_equal(got[name], want), name
    with open(os.path.join(dst, "model.safetensors"), "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
    assert n % 8 == 0
    for rel in ("config.json", os.path.join("1_Pooling", "config.json")):
        with open(os.path.join(src, rel)) as a, open(os.path.join(dst, rel)) as b:
            assert a.read() == b.read()


@pytest.mark.parametrize("problem", ["overflow", "foreign weights", "no weights", "dst full"])
def test_refused(tmp_path, problem):
    src, dst = str(tmp_path / "src"), str(tmp_path / "dst")
    big = 1e5 if problem == "overflow" else 1.0
    write_folder(src, {"w": np.full(4, big, dtype="<f4")})
    if problem == "foreign weights":
        open(os.path.join(src, "pytorch_model.bin"), "wb").close()
    elif problem == "no weights":
        os.remove(os.path.join(src, "model.safetensors"))
    elif problem == "dst full":
        pack.pack(src, dst)
    match = {"overflow": "does not fit in float16", "foreign weights": "not converted",
             "no weights": "has no model.safetensors", "dst full": "already holds"}[problem]
    with pytest.raises(ValueError, match=match):
        pack.pack(src, dst)
    out = subprocess.run([sys.executable, os.path.join(REPO, "scripts", "pack_model_f16.py"),
                          src, str(tmp_path / "cli")], capture_output=True, text=True)
    if problem != "dst full":
        assert out.returncode != 0 and match in out.stderr


def embed(model, texts):
    out = subprocess.run([STOF, "embed", "--model", model, "--device", "cpu", "--", *texts],
                         capture_output=True, text=True, check=True, timeout=600)
    return np.array([json.loads(line)["embedding"] for line in out.stdout.splitlines()])


@pytest.mark.skipif(not os.path.isdir(MINILM), reason="models/all-MiniLM-L6-v2 is missing "
                                                      "(run scripts/fetch_model.sh)")
@pytest.mark.skipif(not os.path.exists(STOF), reason="the stof tool is not built")
def test_minilm_f16_embeds_like_f32(tmp_path):
    dst = str(tmp_path / "minilm16")
    pack.pack(MINILM, dst)
    size32 = os.path.getsize(os.path.join(MINILM, "model.safetensors"))
    assert os.path.getsize(os.path.join(dst, "model.safetensors")) < 0.51 * size32
    texts = ["A man is playing a guitar.", "The new movie is awesome",
             "Serving embeddings over HTTP with dynamic batching.", "x"]
    want, got = embed(MINILM, texts), embed(dst, texts)
    assert got.shape == want.shape == (len(texts), 384)
    # unit vectors: float16 weights move each component by about 1e-4
    assert np.abs(got - want).max() <= 2e-3
    assert (got * want).sum(1).min() >= 0.9999
    # and the rounding is there at all: the copy is not the fp32 folder
    assert np.abs(got - want).max() > 0
