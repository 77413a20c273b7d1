"""test_compare_encoder.py — the parts of bench/compare_encoder.py that need no
GPU and no transformers: argument parsing and case selection, input and length
generation, the valid-token error metric, stof's mask decoded for the HF
reference, the per-case runner's fault isolation, the summary arithmetic and the
JSON schema; then the whole script on the CPU against a small stand-in for
transformers (a plain torch BERT with the same loading interface) and a stand-in
stof.Model built on it, so every code path of main() runs here."""

import json
import math
import os
import sys
import types

import pytest

import compare_encoder as ce
import masks as bench_masks
import stof

torch = pytest.importorskip("torch")
np = pytest.importorskip("numpy")

SCHEMA = ["model", "B", "L", "mask", "stof_ms", "hf_eager_ms", "hf_sdpa_ms", "hf_compile_ms",
          "hf_sparse_ms", "max_rel_err"]
SUMMARY = ["geomean_vs_compile", "bert_base_1x128_ms", "min_vs_hf_sparse"]


# ---------------------------------------------------------------- arguments and cases

def test_default_cases_are_the_bench_shapes():
    cases = ce.select_cases(ce.parse_args([]))
    assert [c.name for c in cases] == [
        "bert-base:1x128", "bert-base:16x128", "bert-base:16x512", "bert-base:8x1024",
        "bert-large:1x128", "bert-large:16x128", "bert-large:16x512",
        "longformer:1x4096", "longformer:4x4096", "bigbird:1x4096", "bigbird:4x4096"]
    assert all(c.mask == "padded" for c in cases if c.kind == "dense")
    assert all(c.model == "bert-base" for c in cases if c.kind == "sparse")
    quick = ce.select_cases(ce.parse_args(["--quick"]))
    assert [c.name for c in quick] == ["bert-base:1x128", "bert-base:16x512"]


@pytest.mark.parametrize("selector,names", [
    ("bert-large", ["bert-large:1x128", "bert-large:16x128", "bert-large:16x512"]),
    ("bigbird:1x4096,bert-base:8x1024", ["bert-base:8x1024", "bigbird:1x4096"]),
    ("sparse", ["longformer:1x4096", "longformer:4x4096", "bigbird:1x4096", "bigbird:4x4096"]),
    ("longformer", ["longformer:1x4096", "longformer:4x4096"]),
])
def test_case_selectors(selector, names):
    assert [c.name for c in ce.select_cases(ce.parse_args(["--cases", selector]))] == names


def test_bad_selectors_and_sides_are_named():
    with pytest.raises(ValueError, match="'bert-huge' matches no case"):
        ce.select_cases(ce.parse_args(["--cases", "bert-base,bert-huge"]))
    assert ce.parse_skip("hf_compile, hf_eager") == {"hf_compile", "hf_eager"}
    assert ce.parse_skip("") == set()
    with pytest.raises(ValueError, match="unknown side 'flex'"):
        ce.parse_skip("hf_sdpa,flex")
    assert ce.main(["--skip", "compile"]) == 2  # before torch or transformers is needed
    assert ce.main(["--cases", "nothing"]) == 2


def test_defaults_and_groups():
    args = ce.parse_args([])
    assert args.compile_mode == "default" and args.timing == "latency" and args.tol == 1e-2
    assert args.sparse_check_batch == 1
    plan = ce.plan_groups(ce.select_cases(args))
    # BERT-base needs 1024 positions for (8,1024); the sparse body its own 4096-position model
    assert [(a, p, len(cs)) for a, p, cs in plan] == [
        ("bert-base", 1024, 4), ("bert-large", 512, 3), ("bert-base", 4096, 4)]
    assert ce.plan_groups(ce.select_cases(ce.parse_args(["--quick"])))[0][1] == 512


def test_command_spells_out_the_compile_mode():
    assert ce.command_line(["--quick"], "default") == (
        "python3 bench/compare_encoder.py --quick --compile-mode default")
    assert ce.command_line(["--compile-mode", "max-autotune-no-cudagraphs"], "x") == (
        "python3 bench/compare_encoder.py --compile-mode max-autotune-no-cudagraphs")
    assert ce.command_line(["--compile-mode=default", "--cases", "a b"], "y").endswith("'a b'")
    assert ce.gpu_slug("NVIDIA H200") == "h200" and ce.gpu_slug("NVIDIA H100 80GB HBM3") == "h100"


# ---------------------------------------------------------------- inputs

def test_inputs_padded_with_lengths_from_the_seed(seed):
    B, L = 16, 128
    x = ce.make_inputs(torch, B, L, seed, "cpu")
    assert x.lengths == bench_masks.varlen_lengths(B, L, seed)
    assert all(L // 2 <= n <= L for n in x.lengths)
    assert x.ids.dtype == torch.long and x.attention_mask.dtype == torch.long
    for b, n in enumerate(x.lengths):
        assert x.attention_mask[b].tolist() == [1] * n + [0] * (L - n)
        assert (x.ids[b, :n] >= ce.FIRST_ID).all() and (x.ids[b, :n] < ce.VOCAB).all()
        assert (x.ids[b, n:] == 0).all()
    again = ce.make_inputs(torch, B, L, seed, "cpu")
    assert torch.equal(again.ids, x.ids) and again.lengths == x.lengths
    full = ce.make_inputs(torch, 2, 64, seed, "cpu", padded=False)
    assert full.lengths == [64, 64] and bool(full.attention_mask.all())


def test_input_sets_differ_and_sparse_cases_are_full_length():
    dense = ce.Case("dense", "bert-base", 8, 256, "padded")
    sets = ce.input_sets(torch, dense, 5, "cpu", 4)
    assert len(sets) == 4
    assert len({tuple(s.lengths) for s in sets}) > 1  # the rotation sees other lengths
    assert not torch.equal(sets[0].ids, sets[1].ids)
    sparse = ce.Case("sparse", "bert-base", 2, 256, "bigbird")
    assert all(s.lengths == [256, 256] for s in ce.input_sets(torch, sparse, 5, "cpu", 2))


# ---------------------------------------------------------------- correctness

def test_valid_rel_err_reads_valid_tokens_only(seed):
    gen = torch.Generator().manual_seed(seed)
    x = ce.make_inputs(torch, 4, 64, seed, "cpu")
    ref = torch.randn(4, 64, 32, generator=gen)
    out = ref + 1e-4 * torch.randn(4, 64, 32, generator=gen)
    err = ce.valid_rel_err(torch, out, ref, x.attention_mask)
    assert 1e-5 < err < 1e-3
    junk = out.clone()
    junk[~x.attention_mask.bool()] = float("nan")  # padding is not compared
    assert ce.valid_rel_err(torch, junk, ref, x.attention_mask) == pytest.approx(err)
    wrong = out.clone()
    b = 3
    wrong[b, x.lengths[b] - 1] += 1.0  # the last valid token of the last sequence
    assert ce.valid_rel_err(torch, wrong, ref, x.attention_mask) > 1e-2
    bad = out.clone()
    bad[0, 0, 0] = float("inf")
    assert ce.valid_rel_err(torch, bad, ref, x.attention_mask) == float("inf")
    with pytest.raises(ValueError, match="differs from the reference"):
        ce.valid_rel_err(torch, out[:, :, :16], ref, x.attention_mask)
    with pytest.raises(ValueError, match="non-finite"):
        ce.valid_rel_err(torch, out, junk.clone().fill_(float("nan")), x.attention_mask)
    # fp16 against fp32 is compared in fp32
    assert ce.valid_rel_err(torch, ref.half(), ref, x.attention_mask) < 1e-3


def test_padding_check():
    x = ce.make_inputs(torch, 3, 32, 1, "cpu")
    out = torch.randn(3, 32, 8) * x.attention_mask[..., None]
    assert ce.padding_max_abs(torch, out, x.attention_mask) == 0.0
    n = x.lengths[1]
    if n < 32:
        out[1, n, 2] = -3.0
        assert ce.padding_max_abs(torch, out, x.attention_mask) == 3.0
    full = ce.make_inputs(torch, 1, 8, 1, "cpu", padded=False)
    assert ce.padding_max_abs(torch, torch.ones(1, 8, 2), full.attention_mask) == 0.0


@pytest.mark.parametrize("name", ["longformer", "bigbird"])
def test_stof_mask_planes_match_the_shared_rule(name):
    B, L = 2, 1024
    bm = bench_masks.make_mask(name, B, L)
    planes = ce.stof_mask_planes(stof, bm, B)
    assert planes.shape == (B, L, L) and planes.dtype == bool
    want = bm.dense_numpy()[:, 0]
    for b in range(B):
        assert np.array_equal(planes[b], want[b if want.shape[0] > 1 else 0])
    assert 0.05 < planes.mean() < 0.95  # neither empty nor dense
    if name == "bigbird":
        assert not np.array_equal(planes[0], planes[1])  # random blocks differ per entry


def test_stof_mask_planes_refuse_another_mask():
    bm = bench_masks.make_mask("bigbird", 1, 512)
    bm.spec = bm.spec.replace("@", "@9")  # another seed for stof only
    with pytest.raises(ValueError, match="differs from bench/masks.py's at b=0"):
        ce.stof_mask_planes(stof, bm, 1)


def test_hf_mask_forms():
    planes = np.array([[[True, False], [True, True]]])
    forms = ce.hf_mask_forms(torch, planes, "cpu", torch.float16)
    assert [label for label, _ in forms] == ["4-D additive", "3-D 0/1"]
    add, zero_one = forms[0][1], forms[1][1]
    assert add.shape == (1, 1, 2, 2) and add.dtype == torch.float16
    assert add[0, 0].tolist() == [[0.0, torch.finfo(torch.float16).min], [0.0, 0.0]]
    assert zero_one.tolist() == [[[1, 0], [1, 1]]]


# ---------------------------------------------------------------- the per-case runner

def make_timer(**kw):
    return ce.Timer(torch, torch.device("cpu"), warmup=kw.get("warmup", 1), iters=10,
                    budget=0.001)


def sides_for(sets, good, **extra):
    sides = {"stof": lambda s: good[s] * sets[s].attention_mask[..., None],
             "hf_sdpa": lambda s: good[s]}
    sides.update(extra)
    return sides


def runner_case(B=3, L=32, hidden=8, seed=11):
    case = ce.Case("dense", "bert-base", B, L, "padded")
    sets = ce.input_sets(torch, case, seed, "cpu", 2)
    gen = torch.Generator().manual_seed(seed)
    good = [torch.randn(B, L, hidden, generator=gen) for _ in sets]
    return case, sets, good


def test_run_case_times_and_checks_every_side():
    case, sets, good = runner_case()
    calls = []

    def eager(s):
        calls.append(s)
        return good[s] + 1e-5
    row = ce.new_row(case)
    sides = sides_for(sets, good, hf_eager=eager, hf_compile=lambda s: good[s])
    info, failed = ce.run_case(torch, make_timer(), row, sides, sides["hf_sdpa"], sets, 1e-2,
                               check=("stof", "hf_eager", "hf_compile"))
    assert not failed and row["problems"] == []
    assert row["max_rel_err"] == 0.0
    for k in ("stof_ms", "hf_sdpa_ms", "hf_eager_ms", "hf_compile_ms"):
        assert row[k] > 0
    assert row["hf_sparse_ms"] is None
    assert set(calls) == {0, 1}  # the input sets rotate
    assert calls.count(0) >= ce.MIN_ITERS // 2
    assert set(info) == {"stof_first_s", "hf_sdpa_first_s", "hf_eager_first_s",
                         "hf_compile_first_s", "stof_err", "hf_eager_err", "hf_compile_err"}
    assert info["stof_err"] == 0.0 and 0 < info["hf_eager_err"] < 1e-4


def test_a_failing_side_loses_nothing_else():
    case, sets, good = runner_case()

    def compile_fails(s):
        raise RuntimeError("inductor: out of shared memory\nsecond line")

    def eager_oom_when_timed(s):
        if s == 1:
            raise MemoryError("CUDA out of memory")
        return good[s]
    row = ce.new_row(case)
    sides = sides_for(sets, good, hf_eager=eager_oom_when_timed, hf_compile=compile_fails)
    _, failed = ce.run_case(torch, make_timer(), row, sides, sides["hf_sdpa"], sets, 1e-2,
                            check=("stof", "hf_eager", "hf_compile"))
    assert not failed
    assert row["stof_ms"] > 0 and row["hf_sdpa_ms"] > 0 and row["max_rel_err"] == 0.0
    assert row["hf_compile_ms"] is None and row["hf_eager_ms"] is None
    assert row["problems"] == [
        "hf_eager timing: MemoryError: CUDA out of memory",
        "hf_compile: RuntimeError: inductor: out of shared memory"]


def test_wrong_or_unchecked_stof_fails_the_case():
    case, sets, good = runner_case()
    sides = sides_for(sets, good)
    sides["stof"] = lambda s: 1.1 * good[s] * sets[s].attention_mask[..., None]
    row = ce.new_row(case)
    _, failed = ce.run_case(torch, make_timer(), row, sides, sides["hf_sdpa"], sets, 1e-2)
    assert failed and row["max_rel_err"] == pytest.approx(0.1, rel=1e-3) and row["stof_ms"] > 0

    # no reference: stof runs and is timed, but the case fails and says why
    def no_ref(s):
        raise RuntimeError("sdpa failed")
    row = ce.new_row(case)
    _, failed = ce.run_case(torch, make_timer(), row, sides_for(sets, good), no_ref, sets, 1e-2)
    assert failed and row["stof_ms"] > 0 and row["max_rel_err"] is None
    assert row["problems"][0] == "reference: RuntimeError: sdpa failed"
    assert "stof: not checked" in row["problems"][-1]

    # stof missing: the HF sides still run
    row = ce.new_row(case)
    sides = sides_for(sets, good)
    del sides["stof"]
    _, failed = ce.run_case(torch, make_timer(), row, sides, sides["hf_sdpa"], sets, 1e-2)
    assert failed and row["hf_sdpa_ms"] > 0 and row["stof_ms"] is None

    # a NaN from stof is never a pass
    row = ce.new_row(case)
    sides = sides_for(sets, good)
    sides["stof"] = lambda s: torch.full_like(good[s], float("nan"))
    _, failed = ce.run_case(torch, make_timer(), row, sides, sides["hf_sdpa"], sets, 1e-2)
    assert failed and row["max_rel_err"] is None  # JSON has no inf
    assert row["problems"][0] == "stof: non-finite values on valid tokens"


def test_runner_notes_hf_mismatch_padding_and_nan():
    case, sets, good = runner_case()
    sides = sides_for(sets, good, hf_compile=lambda s: 2 * good[s],
                      hf_sparse=lambda s: torch.full_like(good[s], float("nan")))
    sides["stof"] = lambda s: good[s] + 0.0  # garbage (not zeros) at padding
    row = ce.new_row(case)
    _, failed = ce.run_case(torch, make_timer(), row, sides, sides["hf_sdpa"], sets, 1e-2,
                            check=("stof", "hf_compile"), skip={"hf_sdpa"})
    assert not failed  # stof matches on the valid tokens
    text = "\n".join(row["problems"])
    assert "stof: padding tokens are not zero" in text
    assert "hf_compile: differs from HF SDPA (rel err 1.000e+00)" in text
    assert "hf_sparse: non-finite values" in text
    assert row["hf_sdpa_ms"] is None and row["hf_compile_ms"] > 0  # skipped: not timed


def test_sparse_case_without_a_check_does_not_fail():
    case, sets, good = runner_case()
    row = ce.new_row(case)
    sides = {"stof": lambda s: good[s], "hf_sparse": lambda s: good[s]}
    _, failed = ce.run_case(torch, make_timer(), row, sides, None, sets, 1e-2, must_check=False)
    assert not failed and row["max_rel_err"] is None and row["problems"] == []
    assert row["stof_ms"] > 0 and row["hf_sparse_ms"] > 0


def test_timer_budget_bounds_the_runs():
    timer = ce.Timer(torch, torch.device("cpu"), warmup=3, iters=50, budget=0.05)
    assert timer.iterations(1.0) == ce.MIN_ITERS
    assert timer.iterations(1e-3) == 50
    assert timer.iterations(0.002) == 25
    seen = []
    ms = timer.ms(lambda s: seen.append(s), 4)
    assert ms >= 0 and len(seen) == 8 + 2 + 50  # warm-up covers every set twice


# ---------------------------------------------------------------- summary and schema

def row(model, B, L, mask, stof_ms, compile_ms=None, sparse_ms=None, err=1e-3):
    r = dict.fromkeys(ce.CASE_KEYS)
    r.update(model=model, B=B, L=L, mask=mask, stof_ms=stof_ms, hf_compile_ms=compile_ms,
             hf_sparse_ms=sparse_ms, max_rel_err=err)
    r["problems"] = []
    return r


def test_summary_arithmetic():
    cases = [row("bert-base", 1, 128, "padded", 0.5, compile_ms=3.0),
             row("bert-base", 16, 512, "padded", 2.0, compile_ms=4.0),
             row("bert-large", 16, 512, "padded", 4.0, compile_ms=12.0),
             row("bert-large", 1, 128, "padded", None, compile_ms=6.0),  # stof failed: left out
             row("bert-base", 1, 4096, "longformer", 2.0, sparse_ms=30.0),
             row("bert-base", 4, 4096, "bigbird", 10.0, sparse_ms=60.0),
             row("bert-base", 1, 4096, "bigbird", 1.0, sparse_ms=None),
             # failed or unchecked: out of the summary
             row("bert-base", 8, 1024, "padded", 0.1, compile_ms=100.0, err=0.5),
             row("bert-base", 16, 128, "padded", 0.1, compile_ms=100.0, err=None),
             row("bert-base", 1, 4096, "longformer", 0.1, sparse_ms=100.0, err=0.02)]
    s = ce.summarize(cases)
    assert list(s) == SUMMARY
    assert s["geomean_vs_compile"] == pytest.approx((6.0 * 2.0 * 3.0) ** (1 / 3), abs=1e-4)
    assert s["bert_base_1x128_ms"] == 0.5
    assert s["min_vs_hf_sparse"] == pytest.approx(6.0)
    assert ce.meets("geomean_vs_compile", 2.0) and not ce.meets("geomean_vs_compile", 1.99)
    assert ce.meets("bert_base_1x128_ms", 0.39) and not ce.meets("bert_base_1x128_ms", 0.4)
    assert ce.meets("min_vs_hf_sparse", 8.0) and not ce.meets("min_vs_hf_sparse", 7.9)
    assert ce.summarize([]) == dict.fromkeys(SUMMARY)
    # an unchecked sparse row (large B) counts, an unchecked dense row does not
    assert [ce.counts(c, 1e-2) for c in cases] == [True] * 7 + [False] * 3
    assert [ce.counts(c, 0.6) for c in cases] == [True] * 8 + [False, True]
    assert ce.summarize(cases, tol=0.6)["geomean_vs_compile"] == pytest.approx(
        (6.0 * 2.0 * 3.0 * 1000.0) ** 0.25, abs=1e-3)
    assert ce.geomean([2.0, 8.0]) == pytest.approx(4.0) and ce.geomean([]) is None


def test_result_json_schema_and_writer(tmp_path, capsys):
    cases = [row("bert-base", 1, 128, "padded", 0.3, compile_ms=2.9),
             row("bert-base", 4, 4096, "bigbird", 5.0, sparse_ms=60.0, err=None)]
    cases[1]["problems"] = ["HF bigbird build: RuntimeError: x"]
    cases[0]["extra"] = "not in the file"
    result = ce.result_json("NVIDIA H200", "2026-11-21", "abc123", "python3 x", cases)
    path = tmp_path / "sub" / "encoder.json"
    ce.write_result(str(path), result)
    back = json.loads(path.read_text())
    assert list(back) == ["device", "date", "commit", "command", "cases", "summary"]
    for c in back["cases"]:
        assert list(c) == SCHEMA + ["problems"]
    assert back["cases"][1]["problems"] == ["HF bigbird build: RuntimeError: x"]
    assert back["summary"] == {"geomean_vs_compile": round(2.9 / 0.3, 4),
                               "bert_base_1x128_ms": 0.3, "min_vs_hf_sparse": 12.0}
    ce.print_table(back["cases"])
    ce.print_summary(back["summary"])
    ce.print_notes(ce.parse_args([]))
    text = capsys.readouterr().out
    assert "bigbird" in text and "9.67" in text and "12.00" in text
    assert "target >= 2.0: meets target" in text and "target < 0.4: meets target" in text
    assert "target >= 8.0: meets target" in text
    assert "mode='default'" in text and "not" not in text.split("notes:")[0]


# ---------------------------------------------------------------- the whole script on the CPU

class FakeConfig(types.SimpleNamespace):
    """Any config class: keeps what it is given."""

    def __init__(self, **kw):
        base = dict(model_type="bert", vocab_size=ce.VOCAB, max_position_embeddings=512,
                    type_vocab_size=2, hidden_size=64, num_hidden_layers=1,
                    num_attention_heads=4, intermediate_size=128, hidden_act="gelu",
                    layer_norm_eps=1e-12)
        base.update(kw)
        super().__init__(**base)


def _module(**children):
    m = torch.nn.Module()
    for name, child in children.items():
        setattr(m, name, child)
    return m


class FakeBert(torch.nn.Module):
    """BERT in plain torch with transformers' tensor names (so stof loads its
    folder), BertModel's loading interface and its mask forms (2-D 0/1, 3-D 0/1,
    4-D additive)."""

    calls = []

    def __init__(self, config, add_pooling_layer=True):
        super().__init__()
        self.config = config
        nn, H, inter = torch.nn, config.hidden_size, config.intermediate_size
        eps = config.layer_norm_eps
        self.embeddings = _module(
            word_embeddings=nn.Embedding(config.vocab_size, H),
            position_embeddings=nn.Embedding(config.max_position_embeddings, H),
            token_type_embeddings=nn.Embedding(config.type_vocab_size, H),
            LayerNorm=nn.LayerNorm(H, eps=eps))
        self.encoder = _module(layer=nn.ModuleList(_module(
            attention=_module(self=_module(query=nn.Linear(H, H), key=nn.Linear(H, H),
                                           value=nn.Linear(H, H)),
                              output=_module(dense=nn.Linear(H, H),
                                             LayerNorm=nn.LayerNorm(H, eps=eps))),
            intermediate=_module(dense=nn.Linear(H, inter)),
            output=_module(dense=nn.Linear(inter, H), LayerNorm=nn.LayerNorm(H, eps=eps)))
            for _ in range(config.num_hidden_layers)))
        if add_pooling_layer:
            self.pooler = _module(dense=nn.Linear(H, H))

    def forward(self, input_ids, attention_mask, global_attention_mask=None):
        type(self).calls.append((type(self).__name__, attention_mask.dim(),
                                 global_attention_mask is not None))
        B, L = input_ids.shape
        H, heads = self.config.hidden_size, self.config.num_attention_heads
        e = self.embeddings
        h = e.LayerNorm(e.word_embeddings(input_ids) + e.position_embeddings(torch.arange(L))
                        + e.token_type_embeddings(torch.zeros_like(input_ids)))
        low = torch.finfo(h.dtype).min
        if attention_mask.dim() == 4:
            add = attention_mask.to(h.dtype)
        elif attention_mask.dim() == 3:
            add = (1.0 - attention_mask[:, None].to(h.dtype)) * low
        else:
            add = (1.0 - attention_mask[:, None, None, :].to(h.dtype)) * low

        def split(x):
            return x.view(B, L, heads, H // heads).transpose(1, 2)
        for layer in self.encoder.layer:
            att = layer.attention
            q, k, v = (split(f(h)) for f in (att.self.query, att.self.key, att.self.value))
            p = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(H // heads) + add, dim=-1)
            a = (p @ v).transpose(1, 2).reshape(B, L, H)
            h = att.output.LayerNorm(h + att.output.dense(a))
            up = torch.nn.functional.gelu(layer.intermediate.dense(h))
            h = layer.output.LayerNorm(h + layer.output.dense(up))
        return types.SimpleNamespace(last_hidden_state=h)

    def save_pretrained(self, folder):
        from safetensors.torch import save_file
        os.makedirs(folder, exist_ok=True)
        with open(os.path.join(folder, "config.json"), "w") as f:
            json.dump({k: v for k, v in vars(self.config).items() if not k.startswith("_")}, f)
        save_file({k: v.contiguous() for k, v in self.state_dict().items()},
                  os.path.join(folder, "model.safetensors"))

    @classmethod
    def from_pretrained(cls, folder, attn_implementation="sdpa", dtype=None,
                        add_pooling_layer=True):
        from safetensors.torch import load_file
        with open(os.path.join(folder, "config.json")) as f:
            config = FakeConfig(**json.load(f))
        config._attn_implementation = attn_implementation
        model = cls(config, add_pooling_layer=add_pooling_layer)
        model.load_state_dict(load_file(os.path.join(folder, "model.safetensors")))
        return model.to(dtype=dtype) if dtype is not None else model


class FakeLongformer(FakeBert):
    pass


class FakeBigBird(FakeBert):
    pass


@pytest.fixture
def small_world(monkeypatch):
    """Small models and shapes, a stand-in transformers module, torch.compile as
    the identity (inductor on the CPU takes minutes), and a record of the
    stof.Model loads (the real binding, on stof's CPU backend)."""
    pytest.importorskip("safetensors")
    fake = types.ModuleType("transformers")
    fake.__version__ = "0.fake"
    fake.BertConfig = fake.LongformerConfig = fake.BigBirdConfig = FakeConfig
    fake.BertModel, fake.LongformerModel, fake.BigBirdModel = FakeBert, FakeLongformer, FakeBigBird
    monkeypatch.setitem(sys.modules, "transformers", fake)
    monkeypatch.setattr(ce, "ARCHS", {
        "bert-base": dict(hidden_size=64, num_hidden_layers=1, num_attention_heads=4,
                          intermediate_size=128),
        "bert-large": dict(hidden_size=96, num_hidden_layers=2, num_attention_heads=6,
                           intermediate_size=192)})
    monkeypatch.setattr(ce, "VOCAB", 1000)
    monkeypatch.setattr(ce, "MIN_ITERS", 3)
    monkeypatch.setattr(ce, "DENSE_SHAPES", {"bert-base": [(1, 16), (3, 64)],
                                             "bert-large": [(2, 32)]})
    monkeypatch.setattr(ce, "SPARSE_SHAPES", [(1, 512), (2, 512)])  # 256: bigbird is dense
    world = types.SimpleNamespace(compiled=[], loaded=[])

    def identity_compile(model, **kw):
        world.compiled.append(kw)
        return model
    monkeypatch.setattr(torch, "compile", identity_compile)
    real = stof.Model.from_pretrained.__func__

    def recording(cls, path, device=None, dtype=None):
        world.loaded.append((os.path.basename(path).split("-")[1:2], device, dtype))
        return real(cls, path, device=device, dtype=dtype)
    monkeypatch.setattr(stof.Model, "from_pretrained", classmethod(recording))
    FakeBert.calls.clear()
    return world


FAST = ["--device", "cpu", "--budget", "0.001", "--iters", "10", "--warmup", "1", "--sets", "2"]


def test_cpu_run_of_the_whole_script(small_world, tmp_path, capsys):
    out = tmp_path / "encoder.json"
    assert ce.main(FAST + ["--out", str(out)]) == 0
    result = json.loads(out.read_text())
    assert list(result) == ["device", "date", "commit", "command", "cases", "summary"]
    assert result["device"] == "cpu" and list(result["summary"]) == SUMMARY
    assert result["command"].startswith("python3 bench/compare_encoder.py --device cpu")
    assert result["command"].endswith("--compile-mode default")
    names = [f"{c['model']}/{c['mask']}:{c['B']}x{c['L']}" for c in result["cases"]]
    assert names == ["bert-base/padded:1x16", "bert-base/padded:3x64", "bert-large/padded:2x32",
                     "bert-base/longformer:1x512", "bert-base/longformer:2x512",
                     "bert-base/bigbird:1x512", "bert-base/bigbird:2x512"]
    for c in result["cases"]:
        assert list(c) == SCHEMA + ["problems"]
        assert c["stof_ms"] > 0
        assert c["problems"] == []
        if c["mask"] == "padded":
            assert c["max_rel_err"] < 1e-4  # stof's CPU backend against torch, both fp32
            assert c["hf_eager_ms"] > 0 and c["hf_sdpa_ms"] > 0 and c["hf_compile_ms"] > 0
            assert c["hf_sparse_ms"] is None
        else:
            assert c["hf_sparse_ms"] > 0
            assert c["hf_eager_ms"] is None and c["hf_compile_ms"] is None
            checked = c["B"] == 1  # --sparse-check-batch 1
            assert (c["max_rel_err"] is not None) == checked
            assert (c["hf_sdpa_ms"] is not None) == checked
            if checked:
                assert c["max_rel_err"] < 1e-4
    s = result["summary"]
    assert s["geomean_vs_compile"] > 0 and s["min_vs_hf_sparse"] > 0
    assert s["bert_base_1x128_ms"] is None  # no (1,128) case in the small world
    # stof loaded every saved folder at the run dtype, the sparse body too
    assert small_world.loaded == [(["bert"], "cpu", torch.float32)] * 3
    assert small_world.compiled == [dict(mode=None, dynamic=False)] * 2  # one per dense model
    kinds = {(name, dim, g) for name, dim, g in FakeBert.calls}
    assert ("FakeLongformer", 2, True) in kinds and ("FakeBigBird", 2, False) in kinds
    assert ("FakeBert", 4, False) in kinds  # the masked reference took the 4-D form
    text = capsys.readouterr().out
    assert "speedup over HF SDPA + torch.compile" in text and f"wrote {out}" in text


def test_cpu_run_without_stof_model_keeps_the_hf_sides(small_world, tmp_path, monkeypatch, capsys):
    monkeypatch.delattr(stof, "Model")
    out = tmp_path / "encoder.json"
    rc = ce.main(FAST + ["--cases", "bert-base:3x64,longformer", "--skip", "hf_eager",
                         "--compile-mode", "max-autotune-no-cudagraphs", "--out", str(out)])
    assert rc == 1
    result = json.loads(out.read_text())
    assert [c["mask"] for c in result["cases"]] == ["padded", "longformer", "longformer"]
    dense = result["cases"][0]
    assert dense["stof_ms"] is None and dense["max_rel_err"] is None
    assert dense["hf_sdpa_ms"] > 0 and dense["hf_compile_ms"] > 0 and dense["hf_eager_ms"] is None
    assert any("no stof.Model" in p for p in dense["problems"])
    assert all(c["hf_sparse_ms"] > 0 for c in result["cases"][1:])
    assert small_world.compiled == [dict(mode="max-autotune-no-cudagraphs", dynamic=False)]
    assert result["command"].count("--compile-mode") == 1
    assert "case(s) failed" in capsys.readouterr().err


def test_cpu_run_with_a_broken_compile_and_a_mask_transformers_rejects(small_world, tmp_path,
                                                                       monkeypatch):
    def broken_compile(model, **kw):
        def run(**inputs):
            raise RuntimeError("inductor: out of resource")
        return run
    monkeypatch.setattr(torch, "compile", broken_compile)
    forward = FakeBert.forward

    def no_4d(self, input_ids, attention_mask, **kw):
        if attention_mask.dim() == 4:
            raise ValueError("Wrong shape for attention_mask")
        return forward(self, input_ids, attention_mask, **kw)
    monkeypatch.setattr(FakeBert, "forward", no_4d)
    out = tmp_path / "encoder.json"
    rc = ce.main(FAST + ["--cases", "bert-base:1x16,bigbird:1x512", "--out", str(out)])
    assert rc == 0
    dense, sparse = json.loads(out.read_text())["cases"]
    assert dense["hf_compile_ms"] is None and dense["stof_ms"] > 0 and dense["hf_eager_ms"] > 0
    assert dense["problems"] == ["hf_compile: RuntimeError: inductor: out of resource"]
    # the 3-D 0/1 form served as the reference
    assert sparse["max_rel_err"] < 1e-4 and sparse["hf_sdpa_ms"] > 0
    assert sparse["problems"] == [
        "HF BertModel with a 4-D additive mask: ValueError: Wrong shape for attention_mask"]


def test_random_weights_are_drawn_where_init_leaves_constants(small_world, tmp_path):
    tf = sys.modules["transformers"]
    ce.save_random_bert(tf, torch, "bert-base", 64, 5, str(tmp_path), torch.float32)
    model = tf.BertModel.from_pretrained(str(tmp_path), add_pooling_layer=False)
    torch.manual_seed(5)
    plain = ce.new_model(tf.BertModel, ce.bert_config(tf, "bert-base", 64))
    assert not hasattr(plain, "pooler")  # saved without one
    got, init = dict(model.named_parameters()), dict(plain.named_parameters())
    assert set(got) == set(init)
    for name, p in got.items():
        if name.endswith("bias"):
            assert p.std() > 0.05, name
        elif "LayerNorm.weight" in name:
            assert (p - 1).abs().max() > 0.1, name
        elif name.endswith(("query.weight", "key.weight")):
            gain = p / init[name]
            assert torch.allclose(gain, gain.flatten()[0]), name  # scaled, not redrawn
            assert p.std().item() * math.sqrt(p.shape[1]) == pytest.approx(math.sqrt(ce.SCORE_STD))
        else:
            assert torch.equal(p, init[name]), name  # the rest is the seeded initialisation


@pytest.mark.parametrize("fault", ["other mask", "padding leak"])
def test_check_sees_a_wrong_mask_or_a_padding_leak(small_world, tmp_path, fault):
    """The check's sensitivity on stof's CPU backend: the right run passes; a
    BigBird mask with other random blocks, or a run that attends to padding, fails."""
    tf = sys.modules["transformers"]
    folder = str(tmp_path)
    ce.save_random_bert(tf, torch, "bert-base", 512, 9, folder, torch.float32)
    hf = ce.load_hf_bert(tf, folder, "sdpa", "cpu", torch.float32)
    model = ce.load_stof(stof, folder, "cpu", torch.float32)
    if fault == "other mask":
        x = ce.make_inputs(torch, 1, 512, 3, "cpu", padded=False)
        bm = bench_masks.make_mask("bigbird", 1, 512)
        forms = ce.hf_mask_forms(torch, ce.stof_mask_planes(stof, bm, 1), "cpu", torch.float32)
        ref = ce.hf_call(hf)(x, attention_mask=forms[0][1])
        right = model(x.ids, x.attention_mask, mask=bm.spec)
        wrong = model(x.ids, x.attention_mask, mask=bm.spec.replace("@", "@9"))
    else:
        x = ce.make_inputs(torch, 4, 64, 3, "cpu")
        ref = ce.hf_call(hf)(x)
        right = model(x.ids, x.attention_mask)
        wrong = model(x.ids, torch.ones_like(x.attention_mask))
    assert ce.valid_rel_err(torch, right, ref, x.attention_mask) < 1e-4
    assert ce.valid_rel_err(torch, wrong, ref, x.attention_mask) > 1e-2


def test_a_fault_outside_the_sides_loses_one_case(small_world, tmp_path, monkeypatch):
    real = ce.input_sets

    def broken(torch_, case, *a):
        if case.B == 3:
            raise RuntimeError("no inputs")
        return real(torch_, case, *a)
    monkeypatch.setattr(ce, "input_sets", broken)
    out = tmp_path / "encoder.json"
    assert ce.main(FAST + ["--cases", "bert-base", "--out", str(out)]) == 1
    first, second = json.loads(out.read_text())["cases"]
    assert first["stof_ms"] > 0 and first["problems"] == []
    assert second["B"] == 3 and second["stof_ms"] is None
    assert second["problems"] == ["case: RuntimeError: no inputs"]


def test_cpu_run_with_real_transformers(tmp_path, monkeypatch):
    """Where transformers is installed: the script's calls into it (BertModel
    eager and SDPA from the saved folder, a 4-D mask, LongformerModel, BigBirdModel)
    on tiny models on the CPU, stof's CPU backend checked against them."""
    pytest.importorskip("transformers")
    pytest.importorskip("safetensors")
    monkeypatch.setattr(ce, "ARCHS", {
        "bert-base": dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                          intermediate_size=128),
        "bert-large": dict(hidden_size=96, num_hidden_layers=2, num_attention_heads=6,
                           intermediate_size=192)})
    monkeypatch.setattr(ce, "MIN_ITERS", 3)
    monkeypatch.setattr(ce, "DENSE_SHAPES", {"bert-base": [(2, 64)], "bert-large": [(2, 32)]})
    monkeypatch.setattr(ce, "SPARSE_SHAPES", [(1, 1024)])  # BigBird is block-sparse past 704
    out = tmp_path / "encoder.json"
    rc = ce.main(FAST + ["--skip", "hf_compile", "--out", str(out)])
    result = json.loads(out.read_text())
    assert rc == 0, [c["problems"] for c in result["cases"]]
    assert [c["mask"] for c in result["cases"]] == ["padded", "padded", "longformer", "bigbird"]
    for c in result["cases"]:
        assert c["problems"] == []
        assert c["stof_ms"] > 0 and c["hf_sdpa_ms"] > 0 and c["max_rel_err"] < 1e-4
        if c["mask"] == "padded":
            assert c["hf_eager_ms"] > 0 and c["hf_sparse_ms"] is None
        else:
            assert c["hf_sparse_ms"] > 0 and c["hf_eager_ms"] is None
