#!/usr/bin/env python3
"""gen_tiny_bert.py — writes tiny random-weight BERT model folders for the tests.

Every folder holds the same seeded weights (hidden 64, 2 layers, 4 heads,
intermediate 128, vocab 100), stored in a different dtype or layout, written
with numpy alone: config.json and model.safetensors exactly as Hugging Face
lays them out, so no torch is needed. Each folder also gets checksums.json with
the values a loader must produce (after rounding to the stored dtype): per
tensor its shape, sum, position-weighted sum and a few sampled elements.

    python3 tests/data/gen_tiny_bert.py [OUT_DIR]   (default: this script's folder)

Output is byte-for-byte deterministic.
"""
import json
import os
import struct
import sys

import numpy as np

SEED = 20240611
HIDDEN, LAYERS, HEADS, INTER = 64, 2, 4, 128
VOCAB, POSITIONS, TYPES = 100, 32, 2


def bert_config(dtype_name, architectures):
    return {
        "architectures": architectures,
        "attention_probs_dropout_prob": 0.1,
        "classifier_dropout": None,
        "hidden_act": "gelu",
        "hidden_dropout_prob": 0.1,
        "hidden_size": HIDDEN,
        "initializer_range": 0.02,
        "intermediate_size": INTER,
        "layer_norm_eps": 1e-12,
        "max_position_embeddings": POSITIONS,
        "model_type": "bert",
        "num_attention_heads": HEADS,
        "num_hidden_layers": LAYERS,
        "pad_token_id": 0,
        "position_embedding_type": "absolute",
        "torch_dtype": dtype_name,
        "type_vocab_size": TYPES,
        "use_cache": True,
        "vocab_size": VOCAB,
    }


def random_weights():
    """HF names (no prefix) -> float32 arrays. Weights are small and varied;
    LayerNorm gains sit near 1 so a forward on them stays well conditioned."""
    rng = np.random.default_rng(SEED)

    def normal(shape, std, mean=0.0):
        return (mean + std * rng.standard_normal(shape)).astype(np.float32)

    w = {
        "embeddings.word_embeddings.weight": normal((VOCAB, HIDDEN), 0.5),
        "embeddings.position_embeddings.weight": normal((POSITIONS, HIDDEN), 0.2),
        "embeddings.token_type_embeddings.weight": normal((TYPES, HIDDEN), 0.2),
        "embeddings.LayerNorm.weight": normal((HIDDEN,), 0.1, 1.0),
        "embeddings.LayerNorm.bias": normal((HIDDEN,), 0.05),
    }
    for i in range(LAYERS):
        p = f"encoder.layer.{i}."
        for name, out_f, in_f in [
            ("attention.self.query", HIDDEN, HIDDEN),
            ("attention.self.key", HIDDEN, HIDDEN),
            ("attention.self.value", HIDDEN, HIDDEN),
            ("attention.output.dense", HIDDEN, HIDDEN),
            ("intermediate.dense", INTER, HIDDEN),
            ("output.dense", HIDDEN, INTER),
        ]:
            w[p + name + ".weight"] = normal((out_f, in_f), 1.0 / np.sqrt(in_f))
            w[p + name + ".bias"] = normal((out_f,), 0.05)
        for ln in ("attention.output.LayerNorm", "output.LayerNorm"):
            w[p + ln + ".weight"] = normal((HIDDEN,), 0.1, 1.0)
            w[p + ln + ".bias"] = normal((HIDDEN,), 0.05)
    return w


def to_bf16_bits(x):
    """float32 -> bfloat16 bit patterns, round to nearest even (no NaNs here)."""
    bits = x.astype(np.float32).view(np.uint32).astype(np.uint64)
    rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
    return rounded.astype(np.uint16)


def encode(x, dtype):
    """(safetensors dtype, little-endian bytes, the float32 values a reader gets back)."""
    if dtype == "F32":
        a = x.astype("<f4")
        return dtype, a.tobytes(), a.astype(np.float32)
    if dtype == "F16":
        a = x.astype("<f2")
        return dtype, a.tobytes(), a.astype(np.float32)
    if dtype == "BF16":
        b = to_bf16_bits(x).astype("<u2")
        back = (b.astype(np.uint32) << 16).view(np.float32)
        return dtype, b.tobytes(), back
    raise ValueError(dtype)


def write_safetensors(path, entries, metadata):
    """entries: name -> (dtype, shape, bytes). Tensors laid out by name, back to
    back; the header is padded with spaces to a multiple of 8 as the reference
    writer does."""
    header = {"__metadata__": metadata} if metadata else {}
    blobs, offset = [], 0
    for name in sorted(entries):
        dtype, shape, data = entries[name]
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for b in blobs:
            f.write(b)


def checksum(values):
    """Sum, position-weighted sum (weights 1..17 by flat index) and samples:
    a transposed, shifted or misconverted tensor changes at least one."""
    flat = values.reshape(-1).astype(np.float64)
    idx = np.arange(flat.size)
    picks = sorted({0, flat.size // 3, flat.size // 2, (2 * flat.size) // 3, flat.size - 1})
    return {
        "shape": list(values.shape),
        "sum": float(flat.sum()),
        "wsum": float((flat * (idx % 17 + 1)).sum()),
        "samples": [[int(i), float(flat[i])] for i in picks],
    }


def write_json(path, obj):
    with open(path, "w") as f:
        json.dump(obj, f, indent=2, sort_keys=True)
        f.write("\n")


def write_model(folder, weights, dtype, prefix="", extra=None, architectures=("BertModel",)):
    """config.json + model.safetensors; returns the checksums of what was stored."""
    os.makedirs(folder, exist_ok=True)
    torch_dtype = {"F32": "float32", "F16": "float16", "BF16": "bfloat16"}[dtype]
    write_json(os.path.join(folder, "config.json"), bert_config(torch_dtype, list(architectures)))
    entries, sums = {}, {}
    for name, x in weights.items():
        dt, data, back = encode(x, dtype)
        entries[prefix + name] = (dt, x.shape, data)
        sums[name] = checksum(back)
    for name, (dt, shape, data) in (extra or {}).items():
        entries[name] = (dt, shape, data)
    write_safetensors(os.path.join(folder, "model.safetensors"), entries, {"format": "pt"})
    return sums


def write_checksums(folder, dtype, prefix, layout, sums, pooling="mean", normalize=False):
    write_json(
        os.path.join(folder, "checksums.json"),
        {
            "config": {
                "hidden_size": HIDDEN,
                "num_hidden_layers": LAYERS,
                "num_attention_heads": HEADS,
                "intermediate_size": INTER,
                "vocab_size": VOCAB,
                "max_position_embeddings": POSITIONS,
                "type_vocab_size": TYPES,
                "layer_norm_eps": 1e-12,
                "hidden_act": "gelu",
            },
            "dtype": dtype,
            "prefix": prefix,
            "layout": layout,
            "pooling": pooling,
            "normalize": normalize,
            "tensors": sums,
        },
    )


def task_head_extras(rng_seed):
    """Pooler, classifier and the int64 position_ids buffer that a
    BertForSequenceClassification checkpoint carries beside the encoder."""
    rng = np.random.default_rng(rng_seed)
    pooler_w = (0.1 * rng.standard_normal((HIDDEN, HIDDEN))).astype("<f4")
    return {
        "bert.pooler.dense.weight": ("F32", pooler_w.shape, pooler_w.tobytes()),
        "bert.pooler.dense.bias": ("F32", (HIDDEN,), np.zeros(HIDDEN, "<f4").tobytes()),
        "classifier.weight": ("F32", (2, HIDDEN), np.ones((2, HIDDEN), "<f4").tobytes()),
        "classifier.bias": ("F32", (2,), np.zeros(2, "<f4").tobytes()),
        "bert.embeddings.position_ids": ("I64", (1, POSITIONS), np.arange(POSITIONS, dtype="<i8").reshape(1, -1).tobytes()),
    }


def write_sentence_transformers(root, weights, dtype, transformer_dir, pooling, normalize):
    os.makedirs(root, exist_ok=True)
    modules = [{"idx": 0, "name": "0", "path": transformer_dir, "type": "sentence_transformers.models.Transformer"},
               {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"}]
    if normalize:
        modules.append({"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"})
        os.makedirs(os.path.join(root, "2_Normalize"), exist_ok=True)
        write_json(os.path.join(root, "2_Normalize", "config.json"), {})
    write_json(os.path.join(root, "modules.json"), modules)
    os.makedirs(os.path.join(root, "1_Pooling"), exist_ok=True)
    write_json(os.path.join(root, "1_Pooling", "config.json"), {
        "word_embedding_dimension": HIDDEN,
        "pooling_mode_cls_token": pooling == "cls",
        "pooling_mode_mean_tokens": pooling == "mean",
        "pooling_mode_max_tokens": False,
        "pooling_mode_mean_sqrt_len_tokens": False,
        "pooling_mode_weightedmean_tokens": False,
        "pooling_mode_lasttoken": False,
        "include_prompt": True,
    })
    tdir = os.path.join(root, transformer_dir) if transformer_dir else root
    sums = write_model(tdir, weights, dtype)
    write_json(os.path.join(tdir, "sentence_bert_config.json"),
               {"max_seq_length": POSITIONS, "do_lower_case": True})
    layout = "st_subfolder" if transformer_dir else "st_root"
    write_checksums(root, dtype, "", layout, sums, pooling, normalize)


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__))
    w = random_weights()

    d = os.path.join(out, "tiny_bert")
    write_checksums(d, "F32", "", "plain", write_model(d, w, "F32"))

    d = os.path.join(out, "tiny_bert_f16")
    write_checksums(d, "F16", "", "plain", write_model(d, w, "F16"))

    d = os.path.join(out, "tiny_bert_prefixed")
    sums = write_model(d, w, "BF16", prefix="bert.", extra=task_head_extras(SEED + 1),
                       architectures=("BertForSequenceClassification",))
    write_checksums(d, "BF16", "bert.", "plain", sums)

    write_sentence_transformers(os.path.join(out, "tiny_bert_st"), w, "F32", "0_Transformer", "mean", True)
    write_sentence_transformers(os.path.join(out, "tiny_bert_st_root"), w, "F16", "", "cls", False)


if __name__ == "__main__":
    main()
