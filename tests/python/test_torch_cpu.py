"""test_torch_cpu.py — the torch side without a GPU: stof.attention on CPU torch
tensors against an fp32 torch reference, and bench/masks.py's torch mask
functions (dense_torch, the FlexAttention mask_mod) against its numpy form.
Skips without torch."""

import pytest

import masks as bench_masks
import stof

torch = pytest.importorskip("torch")


def reference(q, k, v, visible, scale=None):
    q, k, v = q.double(), k.double(), v.double()
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    s = (q @ k.transpose(-1, -2)) * scale
    s = s.masked_fill(~visible, float("-inf"))
    return torch.softmax(s, dim=-1).nan_to_num(0.0) @ v


def rel_err(out, ref):
    out = out.double()
    if not torch.isfinite(out).all():
        return float("inf")
    return ((out - ref).norm() / ref.norm().clamp_min(1e-30)).item()


@pytest.fixture
def gen(seed):
    return torch.Generator().manual_seed(seed)


@pytest.mark.parametrize("name", bench_masks.BENCH_MASKS)
@pytest.mark.parametrize("dtype,tol", [(torch.float32, 1e-5), (torch.bfloat16, 1e-2)])
@pytest.mark.parametrize("layout", ["bhld", "blhd"])
def test_bench_masks_on_cpu_tensors(gen, name, dtype, tol, layout):
    B, H, L, D = 2, 2, 256, 32
    bm = bench_masks.make_mask(name, B, L, seed=3)
    q, k, v = (torch.randn(B, H, L, D, generator=gen).to(dtype) for _ in range(3))
    ref = reference(q, k, v, bm.dense_torch("cpu"))
    if layout == "blhd":
        q, k, v = (x.transpose(1, 2) for x in (q, k, v))  # strided views, not copies
    out = stof.attention(q, k, v, mask=bm.spec, lengths=bm.lengths, layout=layout)
    assert out.dtype == dtype and out.shape == q.shape and out.device.type == "cpu"
    if layout == "blhd":
        out = out.transpose(1, 2)
    for b, n in enumerate(bm.valid_rows()):
        assert rel_err(out[b, :, :n], ref[b, :, :n]) < tol, (name, b)


def test_packed_varlen_torch_cpu(gen):
    lengths = [100, 37, 64]
    cu = torch.tensor([0] + lengths).cumsum(0).to(torch.int32)
    T, H, D = int(cu[-1]), 3, 16
    q, k, v = (torch.randn(T, H, D, generator=gen) for _ in range(3))
    out = stof.attention(q, k, v, mask="causal", cu_seqlens_q=cu)
    for b, n in enumerate(lengths):
        s = int(cu[b])
        one = lambda x: x[s:s + n].transpose(0, 1)[None]
        vis = torch.ones(n, n, dtype=torch.bool).tril()
        assert rel_err(one(out), reference(one(q), one(k), one(v), vis)) < 1e-5


def test_packed_cache_keys_on_cu_seqlens(gen):
    stof.clear_cache()
    cu = torch.tensor([0, 10, 30], dtype=torch.int32)
    q = torch.randn(30, 1, 8, generator=gen)
    stof.attention(q, q, q, mask="window:3", cu_seqlens_q=cu, max_seqlen_q=20)
    stof.attention(q, q, q, mask="window:3", cu_seqlens_q=cu, max_seqlen_q=20)
    assert stof.cache_info()[:2] == (1, 1)
    cu2 = torch.tensor([0, 20, 30], dtype=torch.int32)  # other lengths: a new mask
    stof.attention(q, q, q, mask="window:3", cu_seqlens_q=cu2, max_seqlen_q=20)
    assert stof.cache_info()[1] == 2


def test_dense_torch_mask_edit_is_not_served_stale(gen):
    L = 32
    dense = torch.zeros(L, L, dtype=torch.bool)
    dense[:, 0] = True
    m = stof.Mask.from_dense(dense)
    q = torch.randn(1, 1, L, 8, generator=gen)
    v = torch.randn(1, 1, L, 8, generator=gen)
    first = stof.attention(q, q, v, mask=m)
    assert torch.allclose(first[0, 0], v[0, 0, 0].expand(L, 8))
    dense.fill_(False)
    dense[:, 1] = True  # in place: torch bumps the version counter
    second = stof.attention(q, q, v, mask=m)  # same Mask: the cache must notice the edit
    assert torch.allclose(second[0, 0], v[0, 0, 1].expand(L, 8))


def test_lengths_as_a_tensor(gen):
    q = torch.randn(2, 1, 40, 8, generator=gen)
    out = stof.attention(q, q, q, mask="full", lengths=torch.tensor([40, 25]))
    assert (out[1, :, 25:] == 0).all() and (out[1, :, :25] != 0).any()


@pytest.mark.parametrize("name", bench_masks.ALL_MASKS)
def test_torch_and_numpy_masks_agree(name):
    pytest.importorskip("numpy")
    bm = bench_masks.make_mask(name, 3, 200, seed=11)
    assert torch.equal(bm.dense_torch("cpu"), torch.from_numpy(bm.dense_numpy()))
    for b in range(3):
        plane = bm.dense_torch("cpu", batch_index=b)
        assert torch.equal(plane[0], bm.dense_torch("cpu")[b if bm.per_batch else 0])


@pytest.mark.parametrize("name", bench_masks.ALL_MASKS)
def test_flex_mask_mod_matches_dense(name):
    flex = pytest.importorskip("torch.nn.attention.flex_attention")
    bm = bench_masks.make_mask(name, 2, 192, seed=4)
    got = flex.create_mask(bm.mask_mod("cpu"), 2 if bm.per_batch else 1, 1, 192, 192, device="cpu")
    assert torch.equal(got, bm.dense_torch("cpu"))


def test_repeated_calls_with_out_follow_new_data_and_lengths(gen):
    """A call that repeats an earlier one's shapes, strides and mask (a model's layers) runs
    on what it is given now: other tensors, other lengths (as a tensor and as a list), an
    output in [B, L, H, D] seen as [B, H, L, D], both layouts; each against the reference."""
    B, H, L, D = 3, 2, 40, 16
    for layout in ("bhld", "blhd"):
        for step, lengths in enumerate(([40, 17, 1], [5, 40, 33], torch.tensor([40, 17, 1]),
                                        torch.tensor([2, 3, 40], dtype=torch.int32))):
            q, k, v = (torch.randn(B, H, L, D, generator=gen) for _ in range(3))
            buf = torch.full((B, L, H, D), float("nan"))
            out = buf.transpose(1, 2)
            args = (q, k, v) if layout == "bhld" else tuple(x.transpose(1, 2) for x in (q, k, v))
            given = out if layout == "bhld" else buf
            got = stof.attention(*args, mask="causal", lengths=lengths, layout=layout,
                                 out=given)
            assert got is given
            n = torch.as_tensor(lengths)[:, None, None, None]
            ar = torch.arange(L)
            vis = (ar[None, None, :, None] < n) & (ar[None, None, None, :] < n) & \
                torch.ones(L, L, dtype=torch.bool).tril()
            ref = reference(q, k, v, vis)
            assert rel_err(out, ref) < 1e-5, (layout, step)
