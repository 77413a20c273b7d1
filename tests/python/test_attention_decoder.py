"""test_attention_decoder.py — stof.attention's decoder and T5 features on the
CPU through numpy, against float64 formulas written here: grouped-query and
multi-query heads from k's shape, bottom-right (default) and top-left causal
masks with Lq < Lk, T5 buckets (Hugging Face's formula, re-typed in numpy),
ALiBi slopes, an additive bias tensor, the tanh soft cap, and the errors."""

import math

import pytest

import stof
from test_attention_cpu import reference, rel_err

np = pytest.importorskip("numpy")


def t5_bucket(rel, bidirectional, num_buckets, max_distance):
    """transformers' T5Attention._relative_position_bucket, in numpy float32."""
    rel = np.asarray(rel, dtype=np.int64)
    buckets = np.zeros_like(rel)
    if bidirectional:
        num_buckets //= 2
        buckets += (rel > 0).astype(np.int64) * num_buckets
        rel = np.abs(rel)
    else:
        rel = -np.minimum(rel, 0)
    exact = num_buckets // 2
    with np.errstate(divide="ignore", invalid="ignore"):
        large = exact + (np.log(rel.astype(np.float32) / np.float32(exact))
                         / np.float32(math.log(max_distance / exact))
                         * np.float32(num_buckets - exact)).astype(np.int64)
    large = np.minimum(large, num_buckets - 1)
    return buckets + np.where(rel < exact, rel, large)


def rand(rng, *shape):
    return rng.standard_normal(shape).astype(np.float32)


@pytest.mark.parametrize("kv_heads", [8, 2, 1])
@pytest.mark.parametrize("align", ["", ",topleft"])
def test_gqa_causal_offset(kv_heads, align):
    rng = np.random.default_rng(kv_heads)
    B, H, Lq, Lk, D = 2, 8, 7, 19, 32
    q, k, v = rand(rng, B, H, Lq, D), rand(rng, B, kv_heads, Lk, D), rand(rng, B, kv_heads, Lk, D)
    out = stof.attention(q, k, v, mask="causal" + align)
    i, j = np.arange(Lq)[:, None], np.arange(Lk)[None, :]
    off = 0 if align else Lk - Lq
    assert rel_err(out, reference(q, k, v, j <= i + off)) < 1e-5


@pytest.mark.parametrize("bidirectional", [True, False])
def test_t5_bias(bidirectional):
    rng = np.random.default_rng(3)
    B, H, L, D, nb, maxd = 2, 4, 40, 16, 32, 20
    q, k, v = rand(rng, B, H, L, D), rand(rng, B, H, L, D), rand(rng, B, H, L, D)
    table = rand(rng, nb, H)
    mask = "full" if bidirectional else "causal"
    out = stof.attention(q, k, v, mask=mask, bias=stof.T5Bias(table, bidirectional, maxd))
    rel = np.arange(L)[None, :] - np.arange(L)[:, None]
    bias = table[t5_bucket(rel, bidirectional, nb, maxd)].transpose(2, 0, 1)[None]
    i, j = np.arange(L)[:, None], np.arange(L)[None, :]
    visible = np.ones((L, L), bool) if bidirectional else j <= i
    assert rel_err(out, reference(q, k, v, visible, bias=bias)) < 1e-5


def test_alibi_and_softcap_with_offset():
    rng = np.random.default_rng(4)
    B, H, Lq, Lk, D = 1, 4, 5, 21, 24
    q, k, v = rand(rng, B, H, Lq, D), rand(rng, B, 2, Lk, D), rand(rng, B, 2, Lk, D)
    slopes = [2.0 ** -(h + 1) for h in range(H)]
    out = stof.attention(q, k, v, mask="causal", alibi=slopes, softcap=3.0)
    i, j = np.arange(Lq)[:, None] + (Lk - Lq), np.arange(Lk)[None, :]
    bias = -np.asarray(slopes)[:, None, None] * np.abs(j - i)[None]
    ref = reference(q, k, v, j <= i, bias=bias[None], softcap=3.0)
    assert rel_err(out, ref) < 1e-5


def test_bias_tensor_broadcast():
    rng = np.random.default_rng(5)
    B, H, L, D = 2, 3, 17, 8
    q, k, v = rand(rng, B, H, L, D), rand(rng, B, H, L, D), rand(rng, B, H, L, D)
    bias = rand(rng, B, 1, L, L)
    out = stof.attention(q, k, v, mask="window:4", bias=bias)
    i, j = np.arange(L)[:, None], np.arange(L)[None, :]
    assert rel_err(out, reference(q, k, v, np.abs(i - j) <= 4, bias=bias)) < 1e-5


def test_bad_combinations():
    rng = np.random.default_rng(6)
    q, k = rand(rng, 1, 6, 8, 16), rand(rng, 1, 4, 8, 16)
    with pytest.raises(stof.StofError, match="divide"):
        stof.attention(q, k, k)
    with pytest.raises(stof.StofError, match="num_buckets"):
        stof.attention(q, q, q, bias=stof.T5Bias(rand(rng, 32, 5)))
    with pytest.raises(stof.StofError, match="ALiBi"):
        stof.attention(q, q, q, alibi=[1.0] * 5)
    with pytest.raises(stof.StofError, match="softcap"):
        stof.attention(q, q, q, softcap=-1.0)
    with pytest.raises(ValueError, match="not both"):
        stof.attention(q, q, q, bias=rand(rng, 1, 6, 8, 8), alibi=[1.0] * 6)
