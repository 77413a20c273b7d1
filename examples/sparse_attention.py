"""sparse_attention.py — masked attention on numpy arrays (the CPU backend),
checked against a dense softmax computed here with numpy.

    python examples/sparse_attention.py

The mask is a union: a sliding window of 32 tokens each side plus 4 global
tokens (Longformer's pattern). On torch CUDA tensors the same call runs on the
GPU; nothing else changes.
"""

import numpy as np

import stof


def dense_reference(q, k, v, visible):
    """softmax(q k^T / sqrt(D) over the visible pairs) v, in float64."""
    scores = np.einsum("bhqd,bhkd->bhqk", q, k).astype(np.float64) / np.sqrt(q.shape[-1])
    scores = np.where(visible, scores, -np.inf)
    weights = np.exp(scores - scores.max(axis=-1, keepdims=True))
    weights /= weights.sum(axis=-1, keepdims=True)
    return np.einsum("bhqk,bhkd->bhqd", weights, v)


def main():
    B, H, L, D = 2, 4, 512, 64
    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal((B, H, L, D), dtype=np.float32) for _ in range(3))

    mask = stof.Mask().window(32).global_(4)  # or stof.Mask.parse("window:32,global:4")
    out = stof.attention(q, k, v, mask=mask)  # [B, H, L, D] float32

    compiled = mask.compile(B, H, L)
    stats = compiled.stats()
    print(f"mask {mask}: density {stats.density:.3f} ({stats.nnz} of {L * L} pairs)")
    visible = compiled.decode().astype(bool)  # [L, L], the same for every (b, h) here
    ref = dense_reference(q, k, v, visible[None, None])
    err = np.abs(out - ref).max()
    print(f"max |stof - numpy| = {err:.2e}")
    assert err < 1e-4, err


if __name__ == "__main__":
    main()
