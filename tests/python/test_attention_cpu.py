"""test_attention_cpu.py — stof.attention on the CPU through numpy, against a
float64 masked softmax written here, on fresh random inputs: every BENCH.md
mask, both layouts, lengths, packed variable-length batches, and bad input."""

import pytest

import masks as bench_masks
import stof

np = pytest.importorskip("numpy")


def reference(q, k, v, visible, scale=None, bias=None, softcap=0.0):
    """softmax(cap(scale q k^T) + bias over visible) v in float64; q [B,H,Lq,D], k
    and v [B,Hkv,Lk,D] (repeated to q's heads), visible and bias broadcastable
    to [B,H,Lq,Lk]; rows with nothing visible give zeros."""
    group = q.shape[1] // k.shape[1]
    q, k, v = (x.astype(np.float64) for x in (q, k, v))
    k, v = np.repeat(k, group, axis=1), np.repeat(v, group, axis=1)
    scale = 1.0 / np.sqrt(q.shape[-1]) if scale is None else scale
    s = np.einsum("bhid,bhjd->bhij", q, k) * scale
    if softcap:
        s = softcap * np.tanh(s / softcap)
    if bias is not None:
        s = s + bias
    vis = np.broadcast_to(visible, s.shape)
    s = np.where(vis, s, -np.inf)
    m = s.max(axis=-1, keepdims=True)
    m = np.where(np.isfinite(m), m, 0.0)
    p = np.where(vis, np.exp(s - m), 0.0)
    den = p.sum(axis=-1, keepdims=True)
    p = p / np.where(den > 0, den, 1.0)
    return np.einsum("bhij,bhjd->bhid", p, v)


def rel_err(out, ref):
    out = np.asarray(out, dtype=np.float64)
    if not np.all(np.isfinite(out)):
        return np.inf
    return np.linalg.norm(out - ref) / max(np.linalg.norm(ref), 1e-30)


def randn(rng, *shape):
    return rng.standard_normal(shape).astype(np.float32)


def length_mask(lengths, L):
    """[B,1,L,L] i < len and j < len."""
    ar = np.arange(L)
    n = np.asarray(lengths)[:, None, None, None]
    return (ar[None, None, :, None] < n) & (ar[None, None, None, :] < n)


@pytest.mark.parametrize("name", bench_masks.ALL_MASKS)
@pytest.mark.parametrize("layout", ["bhld", "blhd"])
def test_bench_masks_on_cpu(rng, name, layout):
    B, H, L, D = 2, 2, 320, 32
    bm = bench_masks.make_mask(name, B, L, seed=int(rng.integers(1 << 30)))
    q, k, v = (randn(rng, B, H, L, D) for _ in range(3))
    vis = bm.dense_numpy()
    if bm.lengths is not None:
        vis = vis & length_mask(bm.lengths, L)
    ref = reference(q, k, v, vis)
    if layout == "blhd":
        q, k, v = (x.transpose(0, 2, 1, 3).copy() for x in (q, k, v))
    out = stof.attention(q, k, v, mask=bm.spec, lengths=bm.lengths, layout=layout)
    assert out.shape == q.shape and out.dtype == np.float32
    if layout == "blhd":
        out = out.transpose(0, 2, 1, 3)
    for b, n in enumerate(bm.valid_rows()):
        assert rel_err(out[b, :, :n], ref[b, :, :n]) < 1e-5, (name, b)
        assert np.all(out[b, :, n:] == 0), "padded rows must be zeros"


def test_scale_and_strided_views(rng):
    B, L, H, D = 2, 96, 3, 16
    qkv = randn(rng, B, L, 3, H, D)  # one buffer: q, k, v are strided views into it
    q, k, v = qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2]
    out = stof.attention(q, k, v, mask="causal", layout="blhd", scale=0.3)
    t = lambda x: x.transpose(0, 2, 1, 3)
    ref = reference(t(q), t(k), t(v), np.tri(L, dtype=bool), scale=0.3)
    assert rel_err(t(out), ref) < 1e-5


def test_lq_differs_from_lk(rng):
    B, H, Lq, Lk, D = 1, 2, 40, 72, 8
    q, k, v = randn(rng, B, H, Lq, D), randn(rng, B, H, Lk, D), randn(rng, B, H, Lk, D)
    out = stof.attention(q, k, v, mask="window:10")  # bottom-right: row i sits at i + Lk - Lq
    i, j = np.arange(Lq)[:, None], np.arange(Lk)[None, :]
    assert rel_err(out, reference(q, k, v, abs(i + Lk - Lq - j) <= 10)) < 1e-5
    out = stof.attention(q, k, v, mask="window:10,topleft")
    assert rel_err(out, reference(q, k, v, abs(i - j) <= 10)) < 1e-5


def test_rows_with_nothing_visible_are_zero(rng):
    L = 64
    dense = np.zeros((L, L), dtype=bool)
    dense[::2, :5] = True  # odd rows see nothing
    q, k, v = (randn(rng, 1, 1, L, 8) for _ in range(3))
    out = stof.attention(q, k, v, mask=stof.Mask.from_dense(dense))
    assert np.all(out[0, 0, 1::2] == 0)
    assert rel_err(out, reference(q, k, v, dense)) < 1e-5


def test_packed_varlen_matches_padded(rng):
    H, L, D = 2, 130, 16
    lengths = [130, 1, 77, 64]
    B = len(lengths)
    cu = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
    T = int(cu[-1])
    q, k, v = (randn(rng, T, H, D) for _ in range(3))
    out = stof.attention(q, k, v, mask="window:20", cu_seqlens_q=cu, max_seqlen_q=L)
    assert out.shape == (T, H, D)
    for b in range(B):
        s, n = cu[b], lengths[b]
        one = lambda x: x[s:s + n].transpose(1, 0, 2)[None]
        i, j = np.arange(n)[:, None], np.arange(n)[None, :]
        ref = reference(one(q), one(k), one(v), abs(i - j) <= 20)
        assert rel_err(one(out), ref) < 1e-5, b


def test_packed_lengths_as_a_list(rng):
    lengths = [5, 9]
    cu = [0, 5, 14]
    q, k, v = (randn(rng, 14, 1, 4) for _ in range(3))
    out = stof.attention(q, k, v, mask="causal", cu_seqlens_q=cu)
    for b in range(2):
        s, n = cu[b], lengths[b]
        one = lambda x: x[s:s + n].transpose(1, 0, 2)[None]
        assert rel_err(one(out), reference(one(q), one(k), one(v), np.tri(n, dtype=bool))) < 1e-5


def test_precompiled_mask_and_select(rng):
    q, k, v = (randn(rng, 2, 2, 100, 8) for _ in range(3))
    cm = stof.Mask.parse("window:7").compile(2, 2, 100, 100, lengths=[100, 60])
    out = stof.attention(q, k, v, mask=cm)
    i, j = np.arange(100)[:, None], np.arange(100)[None, :]
    vis = (abs(i - j) <= 7) & length_mask([100, 60], 100)
    assert rel_err(out[0], reference(q, k, v, vis)[0]) < 1e-5
    assert rel_err(out[1, :, :60], reference(q, k, v, vis)[1, :, :60]) < 1e-5
    choice = stof.attention_select(q, k, mask=cm)
    assert choice.kernel == "cpu"


def test_float16_on_cpu(rng):
    q, k, v = (randn(rng, 1, 2, 64, 32).astype(np.float16) for _ in range(3))
    out = stof.attention(q, k, v, mask="causal")
    assert out.dtype == np.float16
    assert rel_err(out, reference(q, k, v, np.tri(64, dtype=bool))) < 3e-3


def test_out_argument_is_filled(rng):
    q, k, v = (randn(rng, 1, 1, 48, 8) for _ in range(3))
    out = np.full_like(q, np.nan)
    got = stof.attention(q, k, v, mask="full", out=out)
    assert got is out and np.all(np.isfinite(out))
    assert rel_err(out, reference(q, k, v, True)) < 1e-5


# ---- bad input: a Python exception naming the problem, never a crash

def test_shape_mismatch_is_a_stof_error(rng):
    q = randn(rng, 1, 2, 16, 8)
    with pytest.raises(stof.StofError):
        stof.attention(q, randn(rng, 1, 2, 16, 4), randn(rng, 1, 2, 16, 4))
    with pytest.raises(stof.StofError):
        stof.attention(q, randn(rng, 1, 3, 16, 8), randn(rng, 1, 3, 16, 8))
    with pytest.raises(stof.StofError):
        stof.attention(q, q, randn(rng, 1, 2, 15, 8))


def test_mixed_dtypes_are_a_stof_error(rng):
    q = randn(rng, 1, 1, 16, 8)
    with pytest.raises(stof.StofError):
        stof.attention(q, q.astype(np.float16), q)


def test_compiled_mask_of_another_shape_is_a_stof_error(rng):
    q = randn(rng, 1, 1, 32, 8)
    cm = stof.Mask.parse("causal").compile(1, 1, 64, 64)
    with pytest.raises(stof.StofError):
        stof.attention(q, q, q, mask=cm)


def test_python_level_misuse():
    q = np.zeros((1, 1, 8, 4), dtype=np.float32) + 1
    with pytest.raises(TypeError):
        stof.attention(q, q, q.astype(np.float64))
    with pytest.raises(ValueError):
        stof.attention(q, q, q, layout="lbhd")
    with pytest.raises(ValueError):
        stof.attention(q[0], q[0], q[0])
    with pytest.raises(ValueError):
        stof.attention(q, q, q, kernel="fastest")
    with pytest.raises(TypeError):
        stof.attention(q, q, q, mask=3)
    with pytest.raises(TypeError):
        stof.attention([1.0], q, q)
    with pytest.raises(stof.StofError):
        stof.attention(q, q, q, mask="window:")


def test_bad_cu_seqlens_are_stof_errors(rng):
    q = randn(rng, 10, 1, 4)
    with pytest.raises(stof.StofError):
        stof.attention(q, q, q, cu_seqlens_q=[0, 4, 12], max_seqlen_q=8)  # past T
    with pytest.raises(stof.StofError):
        stof.attention(q, q, q, cu_seqlens_q=[0, 6, 4, 10], max_seqlen_q=6)  # decreasing
