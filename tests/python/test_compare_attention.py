"""test_compare_attention.py — the parts of bench/compare_attention.py that need
no GPU: the error metric against stof's CPU output, the mask identity check,
FlexAttention's retry ladder and output check (with a stand-in for the compiled
kernel: compiling the real one takes minutes here), the round-robin timer, the
summary arithmetic, the JSON schema, and the table and chart writers."""

import json
import time

import pytest

import common
import compare_attention as ca
import masks as bench_masks
import stof

torch = pytest.importorskip("torch")
pytest.importorskip("numpy")

SCHEMA = ["suite", "B", "H", "L", "D", "dtype", "kv_heads", "bias", "mask", "density", "kernel",
          "stof_ms", "stof_mask_ms", "flex_ms", "flex_mask_ms", "flex_options", "sdpa_flash_ms",
          "sdpa_cudnn_ms", "sdpa_mask_ms", "max_rel_err", "flex_max_rel_err", "sleep_cycles"]
SUMMARY = ["geomean_vs_flex", "min_vs_flex", "dense_vs_sdpa", "max_mask_share",
           "mask_share_per_layer_12", "mask_timing_floor_ms", "timing_floor_call_ms"]


@pytest.mark.parametrize("name", ["bigbird", "varlen", "longformer"])
def test_max_rel_err_of_stof_cpu_output(seed, name):
    gen = torch.Generator().manual_seed(seed)
    B, H, L, D = 2, 3, 256, 32
    bm = bench_masks.make_mask(name, B, L)
    q, k, v = (torch.randn(B, H, L, D, generator=gen) for _ in range(3))
    dense = bm.dense_torch("cpu")
    out = stof.attention(q, k, v, mask=bm.spec, lengths=bm.lengths)
    assert ca.max_rel_err(torch, q, k, v, out, dense, bm) < 1e-5
    # chunking over heads gives the same answer
    assert ca.max_rel_err(torch, q, k, v, out, dense, bm, budget_bytes=1) < 1e-5
    # a wrong row is seen, garbage in padded rows is not
    bad = out.clone()
    bad[B - 1, 1, 3] += 1.0
    assert ca.max_rel_err(torch, q, k, v, bad, dense, bm) > 1e-3
    if bm.lengths is not None:
        pad = out.clone()
        n = bm.valid_rows()[0]
        pad[0, :, n:] = float("nan")
        assert ca.max_rel_err(torch, q, k, v, pad, dense, bm) < 1e-5
    nan = out.clone()
    nan[0, 0, 0, 0] = float("nan")
    assert ca.max_rel_err(torch, q, k, v, nan, dense, bm) == float("inf")


def test_mask_identity_check():
    B, L = 3, 320
    bm = bench_masks.make_mask("bigbird", B, L)
    dense = bm.dense_torch("cpu")
    cm = stof.Mask.parse(bm.spec).compile(B, 2, L, L)
    assert ca.check_same_mask(cm, dense, bm) == ""
    other = stof.Mask.parse(bm.spec.replace("@", "@9")).compile(B, 2, L, L)  # another seed
    assert "differ" in ca.check_same_mask(other, dense, bm)
    vl = bench_masks.make_mask("varlen", B, L)
    cm = stof.Mask.parse(vl.spec).compile(B, 2, L, L, lengths=vl.lengths)
    assert ca.check_same_mask(cm, vl.dense_torch("cpu"), vl) == ""


def case(L, mask, stof_ms, flex_ms, flash=None, stof_mask=None, D=64):
    c = dict.fromkeys(ca.CASE_KEYS)
    c.update(B=1, H=1, L=L, D=D, mask=mask, stof_ms=stof_ms, flex_ms=flex_ms, sdpa_flash_ms=flash,
             stof_mask_ms=stof_mask)
    return c


def test_summary_arithmetic():
    cases = [case(1024, "dense", 1.0, 2.0, flash=0.9, stof_mask=0.001),
             case(1024, "window", 0.5, 4.0, stof_mask=0.01),
             case(4096, "causal", 2.0, 3.0, flash=1.0),
             case(512, "window", 1.0, 100.0),  # not a target length: out of the geomean
             case(1024, "bigbird", None, 1.0),  # stof failed: left out
             case(1024, "dense", 1.0, 1.0, flash=1.2, D=128)]
    s = ca.summarize(cases)
    assert s["geomean_vs_flex"] == pytest.approx((2.0 * 8.0 * 1.5) ** (1 / 3), abs=1e-4)
    assert s["min_vs_flex"] == pytest.approx(1.5)
    assert s["dense_vs_sdpa"] == pytest.approx(0.9)
    assert s["max_mask_share"] == pytest.approx(0.02)
    assert s["mask_share_per_layer_12"] == pytest.approx(0.02 / 12, abs=1e-4)
    assert list(s) == SUMMARY
    assert s["mask_timing_floor_ms"] is None and s["timing_floor_call_ms"] is None
    floors = ca.summarize(cases, (0.0031234, 0.0042345))
    assert floors["mask_timing_floor_ms"] == 0.00312 and floors["timing_floor_call_ms"] == 0.00423
    empty = ca.summarize([case(1024, "window", None, None)])
    assert empty == dict.fromkeys(SUMMARY)


def test_schema_and_writers(tmp_path, capsys):
    assert list(ca.CASE_KEYS) == SCHEMA
    cases = [case(1024, m, 0.1 * (i + 1), 0.3) for i, m in enumerate(bench_masks.BENCH_MASKS)]
    cases += [case(4096, m, 0.2, 0.5) for m in bench_masks.BENCH_MASKS]
    ca.print_table(cases)
    ca.print_summary(ca.summarize(cases, (0.003, 0.004)))
    cases[5]["flex_options"] = {"BLOCK_M": 64, "BLOCK_N": 64}
    ca.print_table(cases)
    text = capsys.readouterr().out
    assert "bigbird" in text and "target >= 2.0" in text and "12-layer encoder" in text
    assert "build that does nothing: 0.00300 ms" in text
    assert "0.300*" in text and "kernel_options {'BLOCK_M': 64, 'BLOCK_N': 64}" in text
    pytest.importorskip("matplotlib")
    png = ca.write_chart(cases, str(tmp_path / "chart.png"), "test")
    assert png and (tmp_path / "chart.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    json.dumps({"cases": cases, "summary": ca.summarize(cases)})


def test_suite_b_summary():
    """Suite B's keys from rows made up here: ratios computed as the docstring says."""
    import attention_suite_b as sb

    def row(case, L, kv, mask, bias, stof, flex, cudnn=None, bias_ms=None, nobias=None,
            sdpa_nobias=None):
        return {"suite": "B", "case": case, "L": L, "kv_heads": kv, "mask": mask, "bias": bias,
                "stof_ms": stof, "flex_ms": flex, "sdpa_flash_ms": None, "sdpa_cudnn_ms": cudnn,
                "sdpa_efficient_ms": None, "sdpa_bias_ms": bias_ms, "stof_nobias_ms": nobias,
                "sdpa_nobias_ms": sdpa_nobias}
    rows = [row("causal", 8192, 32, "causal", None, 2.0, 3.0, cudnn=1.0),
            row("gqa causal", 8192, 8, "causal", None, 1.0, 2.0, cudnn=1.5),
            row("t5 causal", 512, 12, "causal", "t5", 0.1, 0.2, bias_ms=0.05, nobias=0.08,
                sdpa_nobias=0.02),
            row("t5 bidirectional", 512, 12, "full", "t5", 0.1, 0.2, bias_ms=0.2, nobias=0.05,
                sdpa_nobias=0.1),
            row("sliding window", 16384, 8, "window:4096:0", None, 1.0, 4.0)]
    s = ca.summarize(rows)
    assert s["b_gqa_vs_mha"] == 2.0 and s["b_bias_overhead"] == 2.0  # 0.1 / 0.05
    # SDPA's own: 0.05 / 0.02 = 2.5 and 0.2 / 0.1 = 2.0; stof's over it: 1.25 / 2.5, 2.0 / 2.0
    assert s["b_sdpa_bias_overhead"] == 2.5 and s["b_bias_overhead_vs_sdpa"] == 1.0
    assert s["b_min_dense_causal_vs_best_sdpa"] == 0.5 and s["b_min_masked_vs_best_peer"] == 0.5
    assert s["b_geomean_vs_flex"] == round((1.5 * 2 * 2 * 2 * 4) ** 0.2, 4)


def test_arguments_and_names():
    args = ca.parse_args([])
    assert ca.shapes_of(args) == ca.DEFAULT_SHAPES
    assert len(ca.shapes_of(ca.parse_args(["--all"]))) == 10
    assert ca.shapes_of(ca.parse_args(["--shapes", "1,2,128,64;2,2,256,32"])) == [
        (1, 2, 128, 64), (2, 2, 256, 32)]
    assert ca.gpu_slug("NVIDIA H200") == "h200"
    assert ca.gpu_slug("NVIDIA H100 80GB HBM3") == "h100"
    assert args.masks.split(",") == list(bench_masks.BENCH_MASKS)


def test_cpu_smoke_run_writes_the_schema(tmp_path):
    """The whole script on the CPU (no FlexAttention: compiling it takes minutes
    here): every side runs and is timed, stof is checked, the JSON has exactly
    the schema."""
    out = tmp_path / "attention.json"
    rc = ca.main(["--device", "cpu", "--shapes", "2,2,128,32", "--masks", "window,bigbird,varlen",
                  "--skip", "flex", "--iters", "10", "--warmup", "1", "--mask-iters", "3",
                  "--out", str(out)])
    assert rc == 0
    result = json.loads(out.read_text())
    assert list(result) == ["device", "date", "commit", "command", "timing", "cases", "summary"]
    assert result["timing"] == {"method": "round-robin", "min_sleep_cycles": 0}  # no device sleep
    assert list(result["summary"]) == SUMMARY
    assert [c["mask"] for c in result["cases"]] == ["window", "bigbird", "varlen"]
    for c in result["cases"]:
        assert list(c) == SCHEMA
        assert c["stof_ms"] > 0 and c["stof_mask_ms"] > 0 and c["max_rel_err"] < 1e-5
        assert c["sdpa_flash_ms"] > 0 and c["sdpa_mask_ms"] > 0
        assert c["kernel"].startswith("cpu")
        assert c["flex_ms"] is None and c["flex_options"] is None  # skipped
    assert result["command"].startswith("python3 bench/compare_attention.py --device cpu")


def test_suite_b_cpu_smoke_run(tmp_path, monkeypatch):
    """Suite B and A through the script on the CPU, suite B's cases shrunk (the
    real ones take hours here): every side a CPU has is checked and timed."""
    import attention_suite_b as sb
    monkeypatch.setattr(sb, "CASES", [("causal", 2, 4, 4, 128, 32, "causal", None),
                                      ("gqa causal", 1, 4, 2, 128, 32, "causal", None),
                                      ("packed docs", 2, 2, 2, 64, 32, "causal", "packed"),
                                      ("t5 causal", 2, 2, 2, 64, 32, "causal", "t5")])
    out = tmp_path / "attention.json"
    rc = ca.main(["--device", "cpu", "--suite", "ab", "--shapes", "1,2,64,64", "--masks",
                  "causal", "--skip", "flex", "--iters", "10", "--warmup", "1", "--mask-iters",
                  "3", "--budget", "0.01", "--out", str(out)])
    assert rc == 0
    result = json.loads(out.read_text())
    assert result["timing"]["method"] == "round-robin"
    assert list(result["summary"]) == SUMMARY + list(sb.summarize_b([]))
    b = [c for c in result["cases"] if c["suite"] == "B"]
    assert [c["case"] for c in b] == ["causal", "gqa causal", "packed docs", "t5 causal"]
    for c in b:
        assert c["stof_ms"] > 0 and c["stof_tflops"] is not None and c["max_rel_err"] < 2e-2
    assert b[0]["sdpa_flash_ms"] > 0 and b[1]["sdpa_flash_ms"] > 0  # GQA through enable_gqa
    assert b[3]["stof_nobias_ms"] > 0  # checked against the reference without the bias
    assert [c["mask"] for c in result["cases"] if c["suite"] == "A"] == ["causal"]
    # --b-cases keeps the suite-B cases whose name holds one of its words
    rc = ca.main(["--device", "cpu", "--suite", "b", "--b-cases", "t5,packed", "--skip", "flex",
                  "--iters", "10", "--warmup", "1", "--budget", "0.01", "--out", str(out)])
    assert rc == 0
    kept = [c["case"] for c in json.loads(out.read_text())["cases"]]
    assert kept == ["packed docs", "t5 causal"]


# ---------------------------------------------------------------- the round-robin timer

def test_round_robin_times_every_side_in_one_loop():
    """Each iteration calls every side once, starting from a different side; the
    order reverses every pass over the sides; each call takes the next set."""
    calls = []
    sides = {k: (lambda s, k=k: calls.append((k, s))) for k in "abc"}
    timer = common.EventTimer(torch, torch.device("cpu"))
    problems = []
    ms = timer.round_robin_ms(sides, 2, problems, warmup=1, iters=4)
    assert list(ms) == ["a", "b", "c"] and all(t >= 0 for t in ms.values()) and problems == []
    loop = calls[-12:]
    assert [k for k, _ in loop] == list("abc" "bca" "cab" "cba")
    assert [s for _, s in loop] == [c % 2 for c in range(12)]
    assert len(calls) == 12 + 3 * (1 + 3)  # warm-up and estimate: 4 calls a side


def test_round_robin_budget_and_failing_side():
    """The slowest side sets the iteration count (at least 10); a side that raises
    in its warm-up is left out with a problem line, the others are still timed."""
    calls = {"fast": 0, "slow": 0}

    def fast(s):
        calls["fast"] += 1

    def slow(s):
        calls["slow"] += 1
        time.sleep(0.002)

    def broken(s):
        raise RuntimeError("no kernel for this shape")
    timer = common.EventTimer(torch, torch.device("cpu"))
    problems = []
    ms = timer.round_robin_ms({"fast": fast, "broken": broken, "slow": slow}, 1, problems,
                              warmup=1, iters=1000, budget=0.05)
    assert list(ms) == ["fast", "slow"] and ms["slow"] >= 2.0
    assert problems == ["broken timing: RuntimeError: no kernel for this shape"]
    assert calls["fast"] == calls["slow"]
    assert 10 + 4 <= calls["slow"] <= 25 + 4  # 0.05 s over >= 2 ms a call, at least 10
    assert timer.round_robin_ms({"broken": broken}, 1, problems, 1, 10) == {}


def test_round_robin_sleep_covers_the_slowest_host_call():
    """The device sleep queued before each timed call outlasts twice the slowest
    side's host time (at least the floor, at most SLEEP_MAX_CYCLES), taken with
    the device held by a long sleep; every timed call gets the same sleep."""
    slept = []
    timer = common.EventTimer(torch, torch.device("cpu"))
    timer.sleep = slept.append  # a device sleep that records its cycles

    def host_ms(ms):
        return lambda s: time.sleep(ms / 1e3)

    def fast(s):
        pass
    assert timer.cover_cycles([fast], 1) == common.SLEEP_CYCLES
    assert slept == [common.HOLD_CYCLES]
    cycles = timer.cover_cycles([fast, host_ms(1)], 1)
    assert 2 * 1e-3 * common.SLEEP_HZ <= cycles < 2 * 3e-3 * common.SLEEP_HZ
    assert timer.cover_cycles([host_ms(20)], 1) == common.SLEEP_MAX_CYCLES
    slept.clear()
    timer.round_robin_ms({"fast": fast, "slow": host_ms(1)}, 1, [], warmup=1, iters=3)
    assert slept[:2] == [common.HOLD_CYCLES] * 2 and len(slept) == 2 + 6
    assert set(slept[2:]) == {timer.sleep_cycles} and timer.sleep_cycles >= 4_000_000


# ---------------------------------------------------------------- FlexAttention's side

def out_of_shared_memory():
    return RuntimeError("No valid triton configs. OutOfMemoryError: out of resource: "
                        "triton_tem_fused_flex_attention_0 Required: 376832 Hardware limit:232448")


class FakeFlex:
    """Stands in for torch.compile(flex_attention): fails to compile until
    kernel_options holds every key of `needs`, then attends with `visible`."""

    def __init__(self, visible, needs=()):
        self.visible, self.needs, self.seen = visible, needs, []

    def __call__(self, q, k, v, block_mask=None, kernel_options=None):
        self.seen.append(kernel_options)
        if not all(key in (kernel_options or {}) for key in self.needs):
            raise out_of_shared_memory()
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=self.visible)


def flex_case(flex, name="bigbird", B=2, H=2, L=128, D=32):
    from torch.nn.attention.flex_attention import create_block_mask
    args = ca.parse_args(["--device", "cpu", "--iters", "10", "--warmup", "1",
                          "--mask-iters", "3"])
    dev = torch.device("cpu")
    bm = bench_masks.make_mask(name, B, L)
    dense = bm.dense_torch(dev)
    sets = ca.input_sets(torch, (B, H, L, D), dev, 1 << 16, 7)
    row, problems, timed = dict.fromkeys(ca.CASE_KEYS), [], {}
    timer = ca.Timer(torch, args, dev)
    ca.run_flex(torch, flex, create_block_mask, timer, dev, bm, dense, sets, args.tol, row,
                problems, timed)
    assert set(timed) <= {"flex_ms"}
    row.update(timer.device_ms(timed, len(sets), problems))
    return row, problems, bm


@pytest.mark.parametrize("needs,ran_with", [
    ((), {}),
    (("BLOCK_M",), {"BLOCK_M": 64, "BLOCK_N": 64}),
    (("num_stages",), {"BLOCK_M": 64, "BLOCK_N": 64, "num_stages": 1})])
def test_flex_retries_with_smaller_kernels_and_records_them(needs, ran_with):
    bm = bench_masks.make_mask("bigbird", 2, 128)
    flex = FakeFlex(bm.dense_torch("cpu"), needs)
    row, problems, _ = flex_case(flex)
    assert row["flex_options"] == ran_with
    assert row["flex_ms"] > 0 and row["flex_mask_ms"] > 0 and row["flex_max_rel_err"] < 1e-5
    assert len(problems) == ca.FLEX_OPTIONS.index(ran_with)  # one line per failed compile
    assert all("out of resource" in p for p in problems)
    # defaults are passed as no options at all, and timing used the options that compiled
    assert flex.seen[0] is None and flex.seen[-1] == (ran_with or None)


def test_flex_that_never_compiles_leaves_the_case_empty():
    bm = bench_masks.make_mask("bigbird", 2, 128)
    row, problems, _ = flex_case(FakeFlex(bm.dense_torch("cpu"), needs=("no such option",)))
    assert row["flex_ms"] is None and row["flex_options"] is None
    assert row["flex_max_rel_err"] is None
    assert len(problems) == len(ca.FLEX_OPTIONS)


def test_flex_on_another_mask_is_not_timed():
    bm = bench_masks.make_mask("window", 2, 256)
    other = bench_masks.make_mask("longformer", 2, 256)
    row, problems, _ = flex_case(FakeFlex(other.dense_torch("cpu")), name="window", L=256)
    assert row["flex_ms"] is None and row["flex_mask_ms"] is None
    assert row["flex_max_rel_err"] > 1e-2 and row["flex_options"] == {}
    assert any("differs from the reference" in p for p in problems)
    assert bm.name == "window"


def test_dense_flex_has_no_block_mask():
    seen = []

    def flex(q, k, v, block_mask=None, kernel_options=None):
        seen.append(block_mask)
        return torch.nn.functional.scaled_dot_product_attention(q, k, v)
    row, problems, _ = flex_case(flex, name="dense")
    assert problems == [] and row["flex_ms"] > 0 and row["flex_mask_ms"] is None
    assert set(seen) == {None}


class TableProbe:
    """Wraps a mask table and records the shape of every lookup."""

    def __init__(self, table, shapes):
        self.table, self.shapes, self.shape = table, shapes, table.shape

    def __getitem__(self, index):
        got = self.table[index]
        self.shapes.append(tuple(got.shape))
        return got


@pytest.mark.parametrize("name", bench_masks.ALL_MASKS)
def test_mask_tables_are_never_indexed_by_query_and_key_together(name):
    """FlexAttention's kernel evaluates mask_mod on a [BLOCK_M, 1] x [1, BLOCK_N]
    tile; a table lookup of the full tile is staged through shared memory at
    every pipeline stage, which is what kept bigbird from compiling on an H200."""
    M, N = 128, 64
    bm = bench_masks.make_mask(name, 2, 512)
    shapes = []
    tables = {key: TableProbe(t, shapes) for key, t in bm._tables_like(torch.zeros(1)).items()}
    b = torch.tensor(1)
    q = torch.arange(M).view(M, 1) + 128
    kv = torch.arange(N).view(1, N) + 256
    got = bm.rule(b, q, kv, tables)
    assert torch.equal(got, bm.dense_torch("cpu")[1 if bm.per_batch else 0, 0, 128:256, 256:320])
    assert all(len(s) < 2 or s[-1] == 1 for s in shapes), shapes  # never spans the keys
    if name in ("bigbird", "paper-bigbird", "varlen"):
        assert shapes  # the probe saw the lookups


def test_suite_b_inputs_rotate_past_the_l2():
    """Suite B's timed calls rotate over input sets that together exceed 3x the
    L2 (one set when the L2 is not given); the checks use the first."""
    import attention_suite_b as sb
    spec = ("gqa causal", 2, 4, 2, 64, 32, "causal", None)
    per_set = (4 + 2 * 2) * 2 * 64 * 32 * 2
    c = sb.Case(torch, torch.device("cpu"), spec, 3, l2_bytes=1 << 20)
    assert len(c.sets) == -(-3 * (1 << 20) // per_set)
    assert c.q is c.sets[0][0] and c.k is c.sets[0][1] and c.v is c.sets[0][2]
    assert [tuple(x.shape) for x in c.sets[-1]] == [(2, 4, 64, 32), (2, 2, 64, 32), (2, 2, 64, 32)]
    assert not torch.equal(c.sets[0][0], c.sets[1][0])  # fresh inputs, not copies
    assert len(sb.Case(torch, torch.device("cpu"), spec, 3).sets) == 1
