"""test_compile.py — stof::attention (python/stof/integrations/torch_op.py) inside
torch.compile: a small attention block compiled with fullgraph=True (AOTAutograd with the
eager backend, and Inductor) against the same block run eagerly and against a float64 torch
reference, with no graph break (torch._dynamo.explain and dynamo's counters), the op's
registration checked by torch.library.opcheck (schema, fake tensor, AOT dispatch), and
dynamic shapes, on the CPU; on CUDA where torch sees a GPU (float16, head size 64; "cuda" in
the test ids, which is how ctest's test_python_gpu_hf picks them) the same compiled block, and
CUDA graphs (mode="reduce-overhead") replayed on new inputs. Skips without torch."""

import copy

import pytest

import stof

torch = pytest.importorskip("torch")


class Block(torch.nn.Module):
    """qkv projection, masked attention over padded sequences, output projection."""

    def __init__(self, hidden, heads, mask, use_op):
        super().__init__()
        self.heads, self.mask, self.use_op = heads, mask, use_op
        self.qkv = torch.nn.Linear(hidden, 3 * hidden)
        self.out = torch.nn.Linear(hidden, hidden)

    def forward(self, x, lengths):
        B, L, H = x.shape
        q, k, v = self.qkv(x).view(B, L, 3, self.heads, H // self.heads).unbind(2)
        if self.use_op:
            a = stof.attention_op(q, k, v, mask=self.mask, lengths=lengths, layout="blhd")
        else:
            a = stof.attention(q, k, v, mask=self.mask, lengths=lengths, layout="blhd")
        return self.out(a.reshape(B, L, H))


def reference(block, x, lengths):
    """The block in float64 with the mask as a dense boolean (window:W plus padding)."""
    B, L, H = x.shape
    w = int(block.mask.split(":")[1])
    x = x.double()
    qkv = torch.nn.functional.linear(x, block.qkv.weight.double(), block.qkv.bias.double())
    q, k, v = qkv.view(B, L, 3, block.heads, H // block.heads).unbind(2)
    i = torch.arange(L)
    visible = (i[:, None] - i[None, :]).abs() <= w
    real = i[None, :] < lengths[:, None]
    visible = visible[None] & real[:, None, :] & real[:, :, None]
    s = torch.einsum("bqhd,bkhd->bhqk", q, k) * (H // block.heads) ** -0.5
    s = s.masked_fill(~visible[:, None], float("-inf"))
    a = torch.einsum("bhqk,bkhd->bqhd", torch.softmax(s, -1).nan_to_num(0.0), v)
    return torch.nn.functional.linear(a.reshape(B, L, H), block.out.weight.double(),
                                      block.out.bias.double())


def inputs(gen, B=3, L=96, hidden=64, device="cpu", dtype=torch.float32):
    x = torch.randn(B, L, hidden, generator=gen)
    lengths = torch.randint(L // 2, L + 1, (B,), generator=gen, dtype=torch.int32)
    lengths[0] = L
    return x.to(device, dtype), lengths.to(device)


@pytest.fixture
def gen(seed):
    return torch.Generator().manual_seed(seed)


def make_blocks(gen, mask="window:8", hidden=64, device="cpu", dtype=torch.float32):
    torch.manual_seed(int(torch.randint(0, 2**31, (1,), generator=gen)))
    op = Block(hidden, 4, mask, use_op=True).eval()
    eager = Block(hidden, 4, mask, use_op=False).eval()
    eager.load_state_dict(op.state_dict())
    return op.to(device, dtype), eager.to(device, dtype)


def padded_rows_close(got, want, lengths, tol):
    for b, n in enumerate(lengths.cpu().tolist()):
        err = (got[b, :n].double() - want[b, :n].double()).abs().max().item()
        assert err <= tol, f"sequence {b}: off by {err}"


needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="torch sees no CUDA device")
# (hidden size, dtype, tolerance against eager, against float64) per device: on CUDA 4 heads
# of 64 (a head size stof's GPU kernels take) in float16
SETUPS = {"cpu": (64, torch.float32, 1e-5, 1e-4), "cuda": (256, torch.float16, 5e-3, 2e-2)}
DEVICES = ["cpu", pytest.param("cuda", marks=needs_cuda)]


def device_blocks(gen, device, mask="window:8"):
    hidden, dtype, _, _ = SETUPS[device]
    op, eager = make_blocks(gen, mask, hidden=hidden, device=device, dtype=dtype)
    x, lengths = inputs(gen, hidden=hidden, device=device, dtype=dtype)
    return op, eager, x, lengths


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_compiled_block_matches_eager(gen, backend, device):
    op, eager, x, lengths = device_blocks(gen, device)
    _, dtype, tol_eager, tol_ref = SETUPS[device]
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    compiled = torch.compile(op, fullgraph=True, backend=backend)
    with torch.no_grad():
        got = compiled(x, lengths)
        want = eager(x, lengths)
        ref = reference(copy.deepcopy(op).cpu(), x.cpu(), lengths.cpu())
    assert got.device == x.device and got.dtype == dtype
    padded_rows_close(got, want, lengths, tol_eager)
    padded_rows_close(got.cpu(), ref, lengths, tol_ref)
    assert dict(torch._dynamo.utils.counters["graph_break"]) == {}


@pytest.mark.parametrize("device", DEVICES)
def test_no_graph_break(gen, device):
    op, eager, x, lengths = device_blocks(gen, device)
    torch._dynamo.reset()
    with torch.no_grad():
        explained = torch._dynamo.explain(op)(x, lengths)
    assert explained.graph_break_count == 0, explained.break_reasons
    assert explained.graph_count == 1
    ops = [n.target for g in explained.graphs for n in g.graph.nodes if n.op == "call_function"]
    assert torch.ops.stof.attention.default in ops or torch.ops.stof.attention in ops
    # the eager block's ctypes call is what the op keeps out of the graph
    torch._dynamo.reset()
    with torch.no_grad():
        assert torch._dynamo.explain(eager)(x, lengths).graph_break_count > 0


def test_opcheck(gen):
    B, H, L, D = 2, 3, 64, 32
    q, k, v = (torch.randn(B, H, L, D, generator=gen) for _ in range(3))
    lengths = torch.tensor([L, L // 2], dtype=torch.int32)
    for args in [(q, k, v, "window:8", None, lengths, None, "bhld", "auto"),
                 (q, k, v, "causal", 0.3, None, None, "bhld", "auto"),
                 (q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), None, None, None,
                  None, "blhd", "auto")]:
        torch.library.opcheck(torch.ops.stof.attention.default, args,
                              test_utils=("test_schema", "test_faketensor",
                                          "test_aot_dispatch_static",
                                          "test_aot_dispatch_dynamic"))


def test_dynamic_shapes(gen):
    op, eager = make_blocks(gen, mask="window:5")
    torch._dynamo.reset()
    compiled = torch.compile(op, fullgraph=True, dynamic=True, backend="aot_eager")
    with torch.no_grad():
        for L in (40, 72, 130):
            x, lengths = inputs(gen, B=2, L=L)
            padded_rows_close(compiled(x, lengths), eager(x, lengths), lengths, 1e-5)


def test_mask_objects_and_lists(gen):
    B, H, L, D = 2, 2, 48, 16
    q, k, v = (torch.randn(B, H, L, D, generator=gen) for _ in range(3))
    mask = stof.Mask().window(4).global_(2)
    want = stof.attention(q, k, v, mask=str(mask), lengths=[L, 30])
    got = stof.attention_op(q, k, v, mask=mask, lengths=[L, 30])
    padded_rows_close(got.transpose(1, 2), want.transpose(1, 2), torch.tensor([L, 30]), 0)


def test_dense_mask_refused(gen):
    q = torch.randn(1, 1, 8, 16, generator=gen)
    with pytest.raises(ValueError, match="as text"):
        stof.attention_op(q, q, q, mask=stof.Mask().dense(torch.ones(8, 8, dtype=torch.bool)))


@needs_cuda
@pytest.mark.parametrize("lengths_given", [False, True], ids=["static_mask", "new_lengths"])
def test_cuda_graphs(gen, lengths_given):
    """mode="reduce-overhead" (Inductor with CUDA graphs): the op is captured once and
    replayed; each replay on new inputs matches the eager block. With lengths that change
    between replays, every replay must use the lengths it is given, not those of the call
    that was captured."""
    op, eager, _, _ = device_blocks(gen, "cuda", mask="window:16,global:4")
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    compiled = torch.compile(op, fullgraph=True, mode="reduce-overhead")
    with torch.no_grad():
        for step in range(5):
            x, lengths = inputs(gen, hidden=SETUPS["cuda"][0], device="cuda",
                                dtype=torch.float16)
            if not lengths_given:
                lengths = None
            got = compiled(x, lengths).clone()
            full = torch.full((x.shape[0],), x.shape[1], dtype=torch.int32)
            padded_rows_close(got, eager(x, lengths), full if lengths is None else lengths, 5e-3)
    skips = torch._dynamo.utils.counters["inductor"].get("cudagraph_skips", 0)
    assert skips == 0, "Inductor skipped CUDA graphs for the compiled block"
