"""test_compile.py — stof::attention (python/stof/integrations/torch_op.py) inside
torch.compile on the CPU: a small attention block compiled with fullgraph=True (AOTAutograd
with the eager backend, and Inductor) against the same block run eagerly and against a
float64 torch reference, with no graph break (torch._dynamo.explain and dynamo's counters),
the op's registration checked by torch.library.opcheck (schema, fake tensor, AOT dispatch),
and dynamic shapes. Skips without torch."""

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


def inputs(gen, B=3, L=96, hidden=64):
    x = torch.randn(B, L, hidden, generator=gen)
    lengths = torch.randint(L // 2, L + 1, (B,), generator=gen, dtype=torch.int32)
    lengths[0] = L
    return x, lengths


@pytest.fixture
def gen(seed):
    return torch.Generator().manual_seed(seed)


def make_blocks(gen, mask="window:8"):
    torch.manual_seed(int(torch.randint(0, 2**31, (1,), generator=gen)))
    op = Block(64, 4, mask, use_op=True).eval()
    eager = Block(64, 4, mask, use_op=False).eval()
    eager.load_state_dict(op.state_dict())
    return op, eager


def padded_rows_close(got, want, lengths, tol):
    for b, n in enumerate(lengths.tolist()):
        err = (got[b, :n].double() - want[b, :n].double()).abs().max().item()
        assert err <= tol, f"sequence {b}: off by {err}"


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_compiled_block_matches_eager(gen, backend):
    op, eager = make_blocks(gen)
    x, lengths = inputs(gen)
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    compiled = torch.compile(op, fullgraph=True, backend=backend)
    with torch.no_grad():
        got = compiled(x, lengths)
        want = eager(x, lengths)
        ref = reference(op, x, lengths)
    padded_rows_close(got, want, lengths, 1e-5)
    padded_rows_close(got, ref, lengths, 1e-4)
    assert dict(torch._dynamo.utils.counters["graph_break"]) == {}


def test_no_graph_break(gen):
    op, _ = make_blocks(gen)
    x, lengths = inputs(gen)
    torch._dynamo.reset()
    with torch.no_grad():
        explained = torch._dynamo.explain(op)(x, lengths)
    assert explained.graph_break_count == 0, explained.break_reasons
    assert explained.graph_count == 1
    ops = [n.target for g in explained.graphs for n in g.graph.nodes if n.op == "call_function"]
    assert torch.ops.stof.attention.default in ops or torch.ops.stof.attention in ops
    # the eager block's ctypes call is what the op keeps out of the graph
    _, eager = make_blocks(gen)
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
