#!/usr/bin/env python3
"""gen_tiny_bert_golden.py — expected outputs of the BERT encoder forward on the
tiny model folders, for tests/test_model_forward_cpu.c.

The forward here is written from Hugging Face's BertModel (modeling_bert.py,
eager attention) and sentence-transformers' Pooling / Normalize modules, in
float64 numpy, reading model.safetensors with its own few-line parser: it
shares no code and no intermediate results with stof. Like BertModel it runs
on the padded batch with an additive attention mask ((1 - visible) * the
float32 minimum) and computes every position; the outputs at padding are then
set to zero, which is what stof promises there. A sparse mask spec is turned
into the same 4D mask from the rules of include/stof.h (the parts used here:
full, causal, window, dilated, global), intersected with the key lengths.
"dense:head_window" stands for a per-head dense mask tensor that the test
builds: head h sees key j from query i when |i - j| <= h or j == 0.

Writes tiny_bert_golden.json (the cases: model folder, ids, lengths, token
types, mask text, offsets) and tiny_bert_golden.bin (little-endian float32:
per case the last hidden state [B, L, hidden] then the pooled output
[B, hidden]).

    python3 tests/data/gen_tiny_bert_golden.py [OUT_DIR]   (default: this folder)

Output is deterministic.
"""
import json
import math
import os
import struct
import sys

import numpy as np

SEED = 7331

# name, folder, B, L, lengths (None: all L), token types ("random"|None), mask text
CASES = [
    ("padded", "tiny_bert", 3, 16, [16, 9, 3], "random", None),
    ("dense", "tiny_bert", 2, 12, None, None, None),
    ("sparse_window_global", "tiny_bert", 3, 24, [24, 13, 6], "random", "window:2,global:1"),
    ("sparse_causal", "tiny_bert", 2, 20, [20, 11], None, "causal"),
    ("st_mean_normalize", "tiny_bert_st", 3, 10, [10, 4, 1], None, None),
    ("st_root_cls_f16", "tiny_bert_st_root", 2, 8, [8, 5], "random", None),
    ("prefixed_bf16_dilated", "tiny_bert_prefixed", 2, 32, [32, 17], None, "dilated:3x2,global:[5]"),
    ("per_head_dense", "tiny_bert", 2, 14, [14, 8], None, "dense:head_window"),
]


# ---------------------------------------------------------------- loading

def read_safetensors(path):
    """name -> float64 array, for the F32 / F16 / BF16 tensors of the file."""
    with open(path, "rb") as f:
        blob = f.read()
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + n])
    data = blob[8 + n:]
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        begin, end = info["data_offsets"]
        raw = data[begin:end]
        dt = info["dtype"]
        if dt == "F32":
            a = np.frombuffer(raw, "<f4").astype(np.float64)
        elif dt == "F16":
            a = np.frombuffer(raw, "<f2").astype(np.float64)
        elif dt == "BF16":
            bits = np.frombuffer(raw, "<u2").astype(np.uint32) << 16
            a = bits.view(np.float32).astype(np.float64)
        else:
            continue
        out[name] = a.reshape(info["shape"])
    return out


def locate(folder):
    """(transformer folder, pooling, normalize) for a plain or sentence-transformers folder."""
    pooling, normalize, tdir = "mean", False, folder
    modules_path = os.path.join(folder, "modules.json")
    if os.path.exists(modules_path):
        with open(modules_path) as f:
            modules = json.load(f)
        for m in modules:
            kind = m["type"].rsplit(".", 1)[-1]
            if kind == "Transformer":
                tdir = os.path.join(folder, m["path"]) if m["path"] else folder
            elif kind == "Pooling":
                with open(os.path.join(folder, m["path"], "config.json")) as f:
                    pc = json.load(f)
                pooling = "cls" if pc.get("pooling_mode_cls_token") else "mean"
            elif kind == "Normalize":
                normalize = True
    return tdir, pooling, normalize


def load_model(folder):
    tdir, pooling, normalize = locate(folder)
    with open(os.path.join(tdir, "config.json")) as f:
        cfg = json.load(f)
    w = read_safetensors(os.path.join(tdir, "model.safetensors"))
    prefix = "bert." if "bert.embeddings.word_embeddings.weight" in w else ""
    w = {k[len(prefix):]: v for k, v in w.items() if k.startswith(prefix)}
    return cfg, w, pooling, normalize


# ---------------------------------------------------------------- BertModel

def layer_norm(x, g, b, eps):
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * g + b


_erf = np.vectorize(math.erf)


def activation(x, name):
    if name == "gelu":
        return 0.5 * x * (1.0 + _erf(x / math.sqrt(2.0)))
    if name in ("gelu_new", "gelu_pytorch_tanh", "gelu_fast"):
        return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))
    if name == "relu":
        return np.maximum(x, 0.0)
    raise ValueError(name)


def linear(x, w, name):
    return x @ w[name + ".weight"].T + w[name + ".bias"]


def bert_forward(cfg, w, ids, types, visible):
    """ids, types [B, L]; visible [B, heads or 1, L, L] bool. Returns last_hidden_state [B, L, H]."""
    B, L = ids.shape
    H, heads = cfg["hidden_size"], cfg["num_attention_heads"]
    D = H // heads
    eps = cfg["layer_norm_eps"]
    x = w["embeddings.word_embeddings.weight"][ids] + w["embeddings.token_type_embeddings.weight"][types]
    x = x + w["embeddings.position_embeddings.weight"][np.arange(L)][None]
    x = layer_norm(x, w["embeddings.LayerNorm.weight"], w["embeddings.LayerNorm.bias"], eps)
    additive = (1.0 - visible.astype(np.float64)) * float(np.finfo(np.float32).min)
    for i in range(cfg["num_hidden_layers"]):
        p = f"encoder.layer.{i}."

        def heads_of(t):
            return t.reshape(B, L, heads, D).transpose(0, 2, 1, 3)

        q = heads_of(linear(x, w, p + "attention.self.query"))
        k = heads_of(linear(x, w, p + "attention.self.key"))
        v = heads_of(linear(x, w, p + "attention.self.value"))
        scores = q @ k.transpose(0, 1, 3, 2) / math.sqrt(D) + additive
        scores = scores - scores.max(-1, keepdims=True)
        probs = np.exp(scores)
        probs = probs / probs.sum(-1, keepdims=True)
        ctx = (probs @ v).transpose(0, 2, 1, 3).reshape(B, L, H)
        a = linear(ctx, w, p + "attention.output.dense")
        x = layer_norm(a + x, w[p + "attention.output.LayerNorm.weight"], w[p + "attention.output.LayerNorm.bias"], eps)
        h = activation(linear(x, w, p + "intermediate.dense"), cfg["hidden_act"])
        o = linear(h, w, p + "output.dense")
        x = layer_norm(o + x, w[p + "output.LayerNorm.weight"], w[p + "output.LayerNorm.bias"], eps)
    return x


# ---------------------------------------------------------------- masks

def spec_visible(text, L, heads):
    """[heads or 1, L, L] bool from a mask spec (the parts used by CASES), None text: every pair."""
    i = np.arange(L)[:, None]
    j = np.arange(L)[None, :]
    if text is None:
        return np.ones((1, L, L), bool)
    if text == "dense:head_window":
        return np.stack([(np.abs(i - j) <= h) | (j == 0) for h in range(heads)])
    vis = np.zeros((L, L), bool)
    for part in split_parts(text):
        kind, _, arg = part.partition(":")
        if kind == "full":
            vis |= True
        elif kind == "causal":
            vis |= j <= i
        elif kind == "window":
            nums = [int(a) for a in arg.split(":")]
            left, right = (nums[0], nums[0]) if len(nums) == 1 else nums
            vis |= (j >= i - left) & (j <= i + right)
        elif kind == "dilated":
            win, dil = (int(a) for a in arg.split("x"))
            vis |= (np.abs(i - j) <= win * dil) & ((i - j) % dil == 0)
        elif kind == "global":
            if arg.startswith("["):
                toks = [int(a) for a in arg.strip("[]").split(",")]
                g = np.isin(np.arange(L), toks)
            else:
                g = np.arange(L) < int(arg)
            vis |= g[:, None] | g[None, :]
        else:
            raise ValueError(part)
    return vis[None]


def split_parts(text):
    """Split on commas outside brackets."""
    parts, depth, cur = [], 0, ""
    for ch in text:
        depth += ch == "["
        depth -= ch == "]"
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    parts.append(cur)
    return parts


# ---------------------------------------------------------------- cases

def run_case(base, rng, name, folder, B, L, lengths, types_kind, mask):
    cfg, w, pooling, normalize = load_model(os.path.join(base, folder))
    lens = np.array(lengths if lengths is not None else [L] * B)
    ids = rng.integers(1, cfg["vocab_size"], size=(B, L))
    types = rng.integers(0, cfg["type_vocab_size"], size=(B, L)) if types_kind == "random" else np.zeros((B, L), np.int64)
    valid = np.arange(L)[None, :] < lens[:, None]  # [B, L]
    ids = np.where(valid, ids, 0)
    types = np.where(valid, types, 0)
    visible = spec_visible(mask, L, cfg["num_attention_heads"])[None] & valid[:, None, None, :]
    hidden = bert_forward(cfg, w, ids, types, visible)
    hidden = np.where(valid[..., None], hidden, 0.0)
    if pooling == "cls":
        pooled = hidden[:, 0]
    else:
        pooled = hidden.sum(1) / np.maximum(valid.sum(1), 1e-9)[:, None]
    if normalize:
        pooled = pooled / np.maximum(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12)
    case = {
        "name": name,
        "model": folder,
        "batch": B,
        "len": L,
        "hidden": cfg["hidden_size"],
        "ids": ids.tolist(),
        "lengths": lengths,
        "token_types": types.tolist() if types_kind else None,
        "mask": mask,
        "pooling": pooling,
        "normalize": normalize,
    }
    return case, hidden.astype("<f4"), pooled.astype("<f4")


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    out = sys.argv[1] if len(sys.argv) > 1 else here
    rng = np.random.default_rng(SEED)
    cases, blobs, offset = [], [], 0
    for spec in CASES:
        case, hidden, pooled = run_case(here, rng, *spec)
        case["hidden_offset"] = offset
        offset += hidden.size
        case["pooled_offset"] = offset
        offset += pooled.size
        blobs += [hidden.tobytes(), pooled.tobytes()]
        cases.append(case)
    with open(os.path.join(out, "tiny_bert_golden.bin"), "wb") as f:
        for b in blobs:
            f.write(b)
    with open(os.path.join(out, "tiny_bert_golden.json"), "w") as f:
        f.write('{"generator": "gen_tiny_bert_golden.py", "floats": %d, "cases": [\n' % offset)
        f.write(",\n".join(json.dumps(c) for c in cases))
        f.write("\n]}\n")


if __name__ == "__main__":
    main()
