"""test_attention_gpu.py — stof.attention on CUDA tensors against an fp32 torch
masked softmax built from bench/masks.py's torch mask: every BENCH.md mask,
fp16 and bf16, both layouts, packed variable-length batches, the caller's
stream, and outputs poisoned with NaN so unwritten elements are caught.
Skips without torch or a usable GPU."""

import pytest

import masks as bench_masks
import stof

torch = pytest.importorskip("torch")
if not torch.cuda.is_available() or stof.gpu_count() == 0:
    pytest.skip("no usable CUDA device", allow_module_level=True)

TOL = {torch.float16: 5e-3, torch.bfloat16: 2e-2}


def reference(q, k, v, visible, scale=None):
    """fp32 softmax over visible; q [B,H,Lq,D]; visible bool broadcastable to
    [B,H,Lq,Lk]; empty rows give zeros."""
    q, k, v = q.float(), k.float(), v.float()
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    s = (q @ k.transpose(-1, -2)) * scale
    s = s.masked_fill(~visible, float("-inf"))
    p = torch.softmax(s, dim=-1).nan_to_num(0.0)
    return p @ v


def rel_err(out, ref):
    out = out.float()
    if not torch.isfinite(out).all():
        return float("inf")
    return ((out - ref).norm() / ref.norm().clamp_min(1e-30)).item()


def inputs(gen, shape, dtype):
    return [torch.randn(shape, generator=gen, device="cuda").to(dtype) for _ in range(3)]


@pytest.fixture
def gen(seed):
    return torch.Generator(device="cuda").manual_seed(seed)


@pytest.mark.parametrize("name", bench_masks.ALL_MASKS)
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("layout", ["bhld", "blhd"])
@pytest.mark.parametrize("B,H,L,D", [(2, 3, 384, 64), (1, 2, 200, 32), (2, 1, 256, 128)])
def test_bench_masks(gen, name, dtype, layout, B, H, L, D):
    bm = bench_masks.make_mask(name, B, L, seed=L)
    q, k, v = inputs(gen, (B, H, L, D), dtype)
    vis = bm.dense_torch("cuda")
    ref = reference(q, k, v, vis)
    if layout == "blhd":
        q, k, v = (x.transpose(1, 2).contiguous() for x in (q, k, v))
    out = torch.full_like(q, float("nan"))
    got = stof.attention(q, k, v, mask=bm.spec, lengths=bm.lengths, layout=layout, out=out)
    torch.cuda.synchronize()
    assert got is out
    if layout == "blhd":
        out = out.transpose(1, 2)
    for b, n in enumerate(bm.valid_rows()):
        err = rel_err(out[b, :, :n], ref[b, :, :n])
        assert err < TOL[dtype], f"{name} b={b}: rel err {err:.2e}"
        assert (out[b, :, n:] == 0).all(), "padded rows must be zeros"


PACKED_SPECS = {
    "full": lambda i, j: (i >= 0) & (j >= 0),
    "causal": lambda i, j: j <= i,
    "window:64,global:16": lambda i, j: ((i - j).abs() <= 64) | (i < 16) | (j < 16),
}


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("spec", list(PACKED_SPECS))
def test_packed_varlen(gen, dtype, spec):
    H, L, D = 4, 320, 64
    lengths = [320, 161, 1, 257]
    cu = torch.tensor([0] + lengths, device="cuda").cumsum(0).to(torch.int32)
    T = int(cu[-1])
    q, k, v = inputs(gen, (T, H, D), dtype)
    out = torch.full_like(q, float("nan"))
    stof.attention(q, k, v, mask=spec, cu_seqlens_q=cu, max_seqlen_q=L, out=out)
    for b, n in enumerate(lengths):
        s = int(cu[b])
        one = lambda x: x[s:s + n].transpose(0, 1)[None]
        ar = torch.arange(n, device="cuda")
        vis = PACKED_SPECS[spec](ar[:, None], ar[None, :])
        err = rel_err(one(out), reference(one(q), one(k), one(v), vis))
        assert err < TOL[dtype], f"sequence {b}: rel err {err:.2e}"


def test_varlen_packed_equals_padded(gen):
    B, H, L, D = 3, 2, 256, 64
    bm = bench_masks.make_mask("varlen", B, L, seed=5)
    q, k, v = inputs(gen, (B, H, L, D), torch.float16)
    padded = stof.attention(q, k, v, mask="window:32", lengths=bm.lengths)
    cu = torch.tensor([0] + bm.lengths, device="cuda").cumsum(0).to(torch.int32)
    pack = lambda x: torch.cat([x[b, :, :n].transpose(0, 1) for b, n in enumerate(bm.lengths)])
    packed = stof.attention(pack(q), pack(k), pack(v), mask="window:32", cu_seqlens_q=cu,
                            max_seqlen_q=L)
    assert rel_err(packed, pack(padded).float()) < 1e-3


def test_runs_on_the_callers_stream(gen):
    B, H, L, D = 2, 4, 1024, 64
    q, k, v = inputs(gen, (B, H, L, D), torch.float16)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        torch.cuda._sleep(20_000_000)  # ~10 ms: a kernel on another stream would race ahead
        v2 = v * 2  # queued on the side stream: stof must run after it
        out = stof.attention(q, k, v2, mask="causal")
    side.synchronize()
    ref = reference(q, k, v * 2, torch.ones(L, L, dtype=torch.bool, device="cuda").tril())
    assert rel_err(out, ref) < TOL[torch.float16]


def test_compiled_mask_on_gpu_matches_cpu():
    for name in bench_masks.BENCH_MASKS:
        bm = bench_masks.make_mask(name, 2, 512)
        gpu = stof.Mask.parse(bm.spec).compile(2, 4, 512, 512, lengths=bm.lengths, device="cuda")
        cpu = stof.Mask.parse(bm.spec).compile(2, 4, 512, 512, lengths=bm.lengths, device="cpu")
        assert gpu.stats().nnz == cpu.stats().nnz, name
        for b in range(2):
            assert (gpu.decode(b, 0) == cpu.decode(b, 0)).all(), (name, b)


def test_lengths_on_the_device(gen):
    B, H, L, D = 2, 2, 256, 64
    lens = torch.tensor([256, 100], device="cuda", dtype=torch.int32)
    q, k, v = inputs(gen, (B, H, L, D), torch.float16)
    out = stof.attention(q, k, v, mask="causal", lengths=lens)
    ref = reference(q, k, v, bench_masks.make_mask("causal", B, L).dense_torch("cuda"))
    assert rel_err(out[0], ref[0]) < TOL[torch.float16]
    assert rel_err(out[1, :, :100], ref[1, :, :100]) < TOL[torch.float16]
    assert (out[1, :, 100:] == 0).all()


def causal_padded_reference(q, k, v, lengths):
    """Causal attention over the first lengths[b] keys; rows past a length are zeros."""
    L = q.shape[2]
    i = torch.arange(L, device="cuda")
    real = i[None, :] < lengths.to("cuda", torch.int64)[:, None]  # [B, L]
    visible = (i[None, :, None] >= i[None, None, :]) & real[:, None, :] & real[:, :, None]
    return reference(q, k, v, visible[:, None])


def test_device_lengths_change_between_calls(gen):
    """One shape and spec, lengths on the device: a new tensor, the same tensor changed in
    place, and an earlier tensor again each give their own result (the cache's mask reads
    the lengths of the call, never those of the call before)."""
    B, H, L, D = 3, 2, 192, 64
    q, k, v = inputs(gen, (B, H, L, D), torch.float16)
    a = torch.tensor([192, 100, 7], device="cuda", dtype=torch.int32)
    b = torch.tensor([33, 192, 150], device="cuda", dtype=torch.int64)
    for lengths, change in ((a, None), (a, [192, 37, 160]), (b, None), (a, None), (a, [0, 1, 2])):
        if change is not None:
            lengths.copy_(torch.tensor(change))
        out = torch.full_like(q, float("nan"))
        stof.attention(q, k, v, mask="causal", lengths=lengths, out=out)
        assert rel_err(out, causal_padded_reference(q, k, v, lengths)) < TOL[torch.float16]


def test_device_lengths_in_a_cuda_graph(gen):
    """stof.attention captured in a CUDA graph with a static lengths tensor: every replay
    uses the lengths in that tensor at replay time (the mask is rebuilt in the graph)."""
    B, H, L, D = 2, 2, 256, 64
    q, k, v = inputs(gen, (B, H, L, D), torch.float16)
    lengths = torch.tensor([256, 256], device="cuda", dtype=torch.int32)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        stof.attention(q, k, v, mask="causal", lengths=lengths)  # warm-up, as torch advises
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, capture_error_mode="thread_local"):
        out = stof.attention(q, k, v, mask="causal", lengths=lengths)
    for new in ([256, 256], [100, 200], [3, 256], [256, 0]):
        lengths.copy_(torch.tensor(new))
        out.fill_(float("nan"))
        graph.replay()
        want = causal_padded_reference(q, k, v, lengths)
        assert rel_err(out, want) < TOL[torch.float16], new


def test_select_reports_a_gpu_kernel(gen):
    q, k, v = inputs(gen, (2, 4, 1024, 64), torch.float16)
    choice = stof.attention_select(q, k, v, mask="window:128")
    assert choice.kernel in ("blockwise", "blockwise_sm90", "rowwise")
    assert choice.block_m > 0 and choice.block_n > 0
    assert choice.split == 1
    # A dilated mask runs its residue classes as sequences of their own.
    assert stof.attention_select(q, k, v, mask="dilated:128x2").split == 2
    assert stof.attention_select(q, k, v, mask="dilated:128x2,global:4").split == 1


def test_gpu_errors_are_stof_errors(gen):
    q, k, v = inputs(gen, (1, 2, 128, 64), torch.float16)
    with pytest.raises(stof.StofError):
        stof.attention(q, k, v.float())  # mixed dtypes
    with pytest.raises(stof.StofError):
        stof.attention(q[..., :48].contiguous(), k[..., :48].contiguous(),
                       v[..., :48].contiguous())  # head dim 48 on the GPU
    with pytest.raises(ValueError):
        stof.attention(q, k.cpu(), v)  # mixed devices
    cm = stof.Mask.parse("causal").compile(1, 2, 128, 128, device="cpu")
    with pytest.raises(ValueError):
        stof.attention(q, k, v, mask=cm)  # mask compiled for the CPU
