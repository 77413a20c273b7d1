#!/usr/bin/env python3
"""compare_attention.py — stof against PyTorch on the BENCH.md attention masks
and shapes, side by side in one process on one GPU, with stof's output checked
against an fp32 reference in the same run.

Sides, per (B, H, L, D, mask), fp16 inputs [B, H, L, D]:
  sdpa_flash_ms  SDPA on the flash backend with the mask ignored (is_causal for causal)
  sdpa_mask_ms   SDPA with the boolean mask (efficient backend, else math)
  flex_ms        torch.compile(flex_attention) with a block mask; flex_mask_ms is
                 create_block_mask's time, flex_options the kernel_options it ran
                 with ({} for inductor's defaults: smaller tiles only when the
                 default compile fails), flex_max_rel_err its output's error
  stof_ms        stof.attention with a compiled mask; stof_mask_ms is the compile of
                 the spec (lengths already on the GPU)
Every side draws its mask from bench/masks.py; stof's compiled mask is decoded
and compared with the torch mask, and FlexAttention's output is checked against
the fp32 reference, before either is timed.

Timing: CUDA events, medians, inputs rotated among enough sets to exceed the L2
cache. Attention runs are device times: each timed call is queued behind a
device sleep that outlasts every side's host time (twice the slowest side's,
at least 0.1 ms: the case's sleep_cycles) so the host's launch overhead stays
out of every side's figure alike. Within a case every side that passed its
check is timed in one round-robin loop (common.EventTimer.round_robin_ms): each
iteration calls every side once, starting from a different side each time, each
call on the next input set. Timed in blocks one after another, one kernel read
up to 12% apart from block to block on an H100 as the GPU's clock and power
state drifted (bench/results/attention-timing-modes-2026-11-26-h100.txt); in
one loop that drift falls on all sides alike. The JSON's "timing" field says so. Mask builds
(stof_mask_ms, flex_mask_ms) are timed from an idle device, so their host work
counts, as it does for a caller.

sdpa_cudnn_ms is SDPA's cuDNN backend (FlashAttention-3 class on Hopper) on the
same terms as sdpa_flash_ms. --suite b runs suite B (decoders and T5, bf16:
attention_suite_b.py), --suite ab both, into one JSON whose cases carry suite,
D, dtype, kv_heads and bias, and whose summary has both suites' keys; --b-cases
t5 keeps the suite-B cases whose name holds "t5".

Summary: geomean_vs_flex and min_vs_flex over the cases at L = 1024 and 4096
with D = 64 (the BENCH.md target; all cases when none is there), dense_vs_sdpa
the smallest sdpa_flash_ms / stof_ms over the dense cases, max_mask_share the
largest stof_mask_ms / stof_ms (the target's definition), and beside it
mask_share_per_layer_12 the largest stof_mask_ms / (12 x stof_ms): a mask is
compiled once per batch and serves every layer of a 12-layer encoder.
mask_timing_floor_ms is what the mask-build timing reads for a build that does
nothing (timing_floor_call_ms: for one call into libstof, stof.version()): no
compile can measure below it, so the share target is out of reach of any
compile wherever 0.01 x stof_ms is below it.

    PYTHONPATH=python python3 bench/compare_attention.py [--all] [--out FILE.json]
"""

import argparse
import datetime
import json
import math
import os
import shlex
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
for p in (HERE, os.path.join(REPO, "python")):
    if p not in sys.path:
        sys.path.insert(0, p)

import attention_suite_b  # noqa: E402
import masks as bench_masks  # noqa: E402
from common import (SLEEP_CYCLES, EventTimer, brief_error, configure_compile,  # noqa: E402,F401
                    fmt, geomean, git_commit, gpu_slug)

DEFAULT_SHAPES = [(8, 12, 1024, 64), (4, 16, 4096, 64)]
ALL_SHAPES = [(1, 12, 128, 64), (8, 12, 512, 64), (8, 12, 1024, 64), (16, 12, 2048, 64),
              (4, 16, 4096, 64), (2, 16, 8192, 64), (8, 12, 1024, 32), (4, 16, 4096, 32),
              (8, 12, 1024, 128), (4, 16, 4096, 128)]
TARGET_L = (1024, 4096)
ENCODER_LAYERS = 12  # layers one compiled mask serves in mask_share_per_layer_12
# kernel_options tried in turn until FlexAttention compiles: inductor's defaults,
# then smaller tiles, then no software pipelining (each shrinks shared memory).
FLEX_OPTIONS = ({}, {"BLOCK_M": 64, "BLOCK_N": 64}, {"BLOCK_M": 64, "BLOCK_N": 64, "num_stages": 1})
CASE_KEYS = ("suite", "B", "H", "L", "D", "dtype", "kv_heads", "bias", "mask", "density",
             "kernel", "stof_ms", "stof_mask_ms", "flex_ms", "flex_mask_ms", "flex_options",
             "sdpa_flash_ms", "sdpa_cudnn_ms", "sdpa_mask_ms", "max_rel_err", "flex_max_rel_err",
             "sleep_cycles")


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--all", action="store_true", help="every BENCH.md shape (D = 32/128 too)")
    ap.add_argument("--shapes", help="B,H,L,D[;B,H,L,D...] instead of the default shapes")
    ap.add_argument("--masks", default=",".join(bench_masks.BENCH_MASKS),
                    help=f"comma list from {', '.join(bench_masks.ALL_MASKS)}")
    ap.add_argument("--out", help="JSON path (default bench/results/attention-<date>-<gpu>.json)")
    ap.add_argument("--device", default="0",
                    help="CUDA device index, or 'cpu' for a smoke pass of the script")
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--iters", type=int, default=100, help="most timed runs per measurement")
    ap.add_argument("--mask-iters", type=int, default=30, help="timed runs per mask build")
    ap.add_argument("--budget", type=float, default=1.0,
                    help="seconds of timed runs per measurement at most")
    ap.add_argument("--seed", type=int, default=bench_masks.SEED)
    ap.add_argument("--tol", type=float, default=1e-2, help="largest max_rel_err that passes")
    ap.add_argument("--skip", default="", help="comma list of sides to skip: flex,sdpa_mask")
    ap.add_argument("--b-cases", default="",
                    help="comma list of names: the suite-B cases whose name holds one (all)")
    ap.add_argument("--suite", default="a", choices=("a", "b", "ab"),
                    help="BENCH.md suite A (encoder masks), B (decoders and T5), or both")
    return ap.parse_args(argv)


def shapes_of(args):
    if args.shapes:
        return [tuple(int(x) for x in s.split(",")) for s in args.shapes.split(";") if s]
    return ALL_SHAPES if args.all else DEFAULT_SHAPES


# ---------------------------------------------------------------- timing

class Timer(EventTimer):
    """A case's sides timed together in one round-robin loop (device_ms) with
    the run's --warmup, --iters and --budget; mask builds from an idle device
    (build_ms)."""

    def __init__(self, torch, args, device):
        super().__init__(torch, device)
        self.args = args

    def device_ms(self, sides, n_sets, problems):
        """{key: median device time} of sides = {key: fn(set_index)}, and the
        loop's device sleep as "sleep_cycles"."""
        a = self.args
        ms = self.round_robin_ms(sides, n_sets, problems, a.warmup, a.iters, a.budget)
        return {**ms, "sleep_cycles": self.sleep_cycles} if ms else ms

    def build_ms(self, build, release=None):
        """Median time of build() from an idle device (host work included);
        release(result) runs outside the timed region."""
        for _ in range(3):
            r = build()
            if release:
                release(r)
        times = []
        for _ in range(max(3, self.args.mask_iters)):
            self.sync()
            start, end = self._pair()
            start.record()
            r = build()
            end.record()
            self.sync()
            times.append(start.elapsed_time(end))
            if release:
                release(r)
        return statistics.median(times)


def input_sets(torch, shape, device, l2_bytes, seed):
    """Enough fresh random (q, k, v) sets that one pass over them exceeds 3x the
    L2; fp16 on a GPU, fp32 on the CPU."""
    B, H, L, D = shape
    dtype = torch.float16 if device.type == "cuda" else torch.float32
    per_set = 3 * B * H * L * D * dtype.itemsize
    n = max(1, min(256, math.ceil(3 * l2_bytes / per_set), (4 << 30) // per_set))
    gen = torch.Generator(device=device).manual_seed(seed)
    return [tuple(torch.randn(B, H, L, D, generator=gen, device=device).to(dtype)
                  for _ in range(3)) for _ in range(n)]


# ---------------------------------------------------------------- correctness

def max_rel_err(torch, q, k, v, out, dense, bm, budget_bytes=3 << 30):
    """Largest ||out - ref|| / ||ref|| over (batch entry, head chunk), on the
    valid rows, against an fp32 masked softmax; heads are chunked to bound memory."""
    B, H, L, D = q.shape
    scale = D ** -0.5
    chunk = max(1, budget_bytes // (12 * L * L))
    worst = 0.0
    for b, n in enumerate(bm.valid_rows()):
        plane = dense[b if dense.shape[0] > 1 else 0, 0]
        for h0 in range(0, H, chunk):
            h1 = min(H, h0 + chunk)
            s = (q[b, h0:h1].float() @ k[b, h0:h1].float().transpose(-1, -2)) * scale
            s.masked_fill_(~plane, float("-inf"))
            p = torch.softmax(s, dim=-1).nan_to_num_(0.0)
            ref = (p @ v[b, h0:h1].float())[:, :n]
            del s, p
            got = out[b, h0:h1, :n].float()
            if not torch.isfinite(got).all():
                return float("inf")
            err = ((got - ref).norm() / ref.norm().clamp_min(1e-30)).item()
            worst = max(worst, err)
    return worst


def check_same_mask(cm, dense, bm):
    """stof's compiled mask, decoded, against the torch mask (first and last batch
    entry): every side must see the same mask. Returns "" or the difference."""
    import numpy as np
    entries = sorted({0, bm.batch - 1})  # first and last: per-entry masks differ
    for b in entries:
        want = dense[b if dense.shape[0] > 1 else 0, 0].cpu().numpy().copy()
        n = bm.valid_rows()[b]
        want[n:, :] = False
        want[:, n:] = False
        got = cm.decode(b, 0).astype(bool)
        if not np.array_equal(got, want):
            bad = np.argwhere(got != want)
            return f"b={b}: {len(bad)} elements differ, first (i, j) = {tuple(bad[0])}"
    return ""


# ---------------------------------------------------------------- one case

def run_flex(torch, flex, create_block_mask, timer, dev, bm, dense, sets, tol, row, problems,
             timed):
    """FlexAttention's side of a case: its checks and mask build time into row,
    its call into timed["flex_ms"] once its output on the first input set
    matched the fp32 reference, so it is never timed on another mask than
    stof's. A failed compile (Triton out of shared memory, say) is retried with
    the next FLEX_OPTIONS entry."""
    L = bm.length
    block_mask, make = None, None
    if bm.name != "dense":
        mod = bm.mask_mod(dev)
        nb = bm.batch if bm.per_batch else None
        make = lambda: create_block_mask(mod, nb, None, L, L, device=dev)
        block_mask = make()
    for opts in FLEX_OPTIONS:
        def call(s, opts=opts):
            return flex(*sets[s], block_mask=block_mask, kernel_options=dict(opts) or None)
        try:
            out = call(0)  # compiles
            timer.sync()
        except Exception as e:
            problems.append(brief_error(f"flex {opts or 'default options'}", e))
            timer.sync()
            continue
        row["flex_options"] = dict(opts)
        err = max_rel_err(torch, *sets[0], out, dense, bm)
        out = None
        row["flex_max_rel_err"] = float(f"{err:.3e}")
        if not err <= tol:
            problems.append(f"flex: output differs from the reference (max_rel_err {err:.3e}): "
                            f"not timed")
            return
        timed["flex_ms"] = call
        if make is not None:
            row["flex_mask_ms"] = timer.build_ms(make)
        return


def run_case(torch, stof, flex, timer, dev, shape, name, args, l2_bytes, skip):
    """One row of the table; fields that could not be measured are None."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.nn.attention.flex_attention import create_block_mask
    F = torch.nn.functional
    B, H, L, D = shape
    row = dict.fromkeys(CASE_KEYS)
    row.update(suite="A", B=B, H=H, L=L, D=D, dtype="fp16", kv_heads=H, mask=name)
    bm = bench_masks.make_mask(name, B, L, seed=args.seed)
    dense = bm.dense_torch(dev)
    row["density"] = round(dense.sum().item() / (dense.shape[0] * L * L), 5)
    sets = input_sets(torch, shape, dev, l2_bytes, args.seed + L + D)
    n_sets = len(sets)
    problems = []
    timed = {}  # row key -> fn(set index) of every side that passed its check

    def side(label, fn):
        try:
            return fn()
        except Exception as e:  # one side failing must not lose the others
            problems.append(brief_error(label, e))
            timer.sync()
            return None

    # stof
    lens = (torch.tensor(bm.lengths, dtype=torch.int32, device=dev)
            if bm.lengths is not None else None)
    spec = stof.Mask.parse(bm.spec)
    cm = side("stof compile", lambda: spec.compile(B, H, L, L, lengths=lens, device=dev, head_dim=D))
    stof_ok = cm is not None
    if stof_ok:
        same = side("mask identity", lambda: check_same_mask(cm, dense, bm))
        if same != "":
            if same is not None:
                problems.append(f"stof and torch masks differ: {same}")
            stof_ok = False
    if stof_ok:
        out = side("stof", lambda: stof.attention(*sets[0], mask=cm))
        if out is not None:
            timer.sync()
            row["max_rel_err"] = side("reference", lambda: max_rel_err(torch, *sets[0], out,
                                                                       dense, bm))
            out = None
            ch = side("select", lambda: stof.attention_select(*sets[0], mask=cm))
            if ch is not None:
                row["kernel"] = f"{ch.kernel} {ch.block_m}x{ch.block_n}" + (
                    f" w{ch.warps}" if ch.warps else "") + (f" /{ch.split}" if ch.split > 1 else "")
            timed["stof_ms"] = lambda s: stof.attention(*sets[s], mask=cm)
            row["stof_mask_ms"] = side("stof mask timing", lambda: timer.build_ms(
                lambda: spec.compile(B, H, L, L, lengths=lens, device=dev, head_dim=D), lambda c: c.close()))

    # FlexAttention
    if "flex" not in skip:
        side("flex", lambda: run_flex(torch, flex, create_block_mask, timer, dev, bm, dense, sets,
                                      args.tol, row, problems, timed))

    def sdpa(backend, **kw):
        """An SDPA side on one backend, run once before it joins the timing."""
        def run(s):
            with sdpa_kernel(backend):
                return F.scaled_dot_product_attention(*sets[s], **kw)
        run(0)
        timer.sync()
        return run

    # SDPA, mask ignored: flash, and cuDNN (the FlashAttention-3 class anchor)
    for key, label, backend in (("sdpa_flash_ms", "sdpa flash", SDPBackend.FLASH_ATTENTION),
                                ("sdpa_cudnn_ms", "sdpa cudnn", SDPBackend.CUDNN_ATTENTION)):
        run = side(label, lambda: sdpa(backend, is_causal=bm.is_causal))
        if run is not None:
            timed[key] = run

    # SDPA with the boolean mask
    if name != "dense" and "sdpa_mask" not in skip:
        def with_mask():
            for backend in (SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH):
                try:
                    return sdpa(backend, attn_mask=dense)
                except RuntimeError:
                    timer.sync()
                    if timer.cuda:
                        torch.cuda.empty_cache()
            raise RuntimeError("no SDPA backend takes this boolean mask")
        run = side("sdpa mask", with_mask)
        if run is not None:
            timed["sdpa_mask_ms"] = run

    row.update(side("timing", lambda: timer.device_ms(timed, n_sets, problems)) or {})
    if cm is not None:
        cm.close()

    for k in ("stof_ms", "stof_mask_ms", "flex_ms", "flex_mask_ms", "sdpa_flash_ms",
              "sdpa_cudnn_ms", "sdpa_mask_ms"):
        if row[k] is not None:
            row[k] = round(row[k], 5)
    if row["max_rel_err"] is not None:
        row["max_rel_err"] = float(f"{row['max_rel_err']:.3e}")
    failed = (not stof_ok or row["stof_ms"] is None or row["max_rel_err"] is None or
              not row["max_rel_err"] <= args.tol)
    timed = sets = dense = None  # free this case's memory before the next
    if timer.cuda:
        torch.cuda.empty_cache()
    return row, problems, failed


# ---------------------------------------------------------------- reporting

def summarize(cases, floors=(None, None)):
    b_rows = [c for c in cases if c.get("suite") == "B"]
    cases = [c for c in cases if c.get("suite") != "B"]
    extra = attention_suite_b.summarize_b(b_rows) if b_rows else {}
    if not cases:
        return extra
    target = [c for c in cases if c["L"] in TARGET_L and c["D"] == 64] or cases
    vs_flex = [c["flex_ms"] / c["stof_ms"] for c in target if c["flex_ms"] and c["stof_ms"]]
    dense = [c["sdpa_flash_ms"] / c["stof_ms"] for c in cases
             if c["mask"] == "dense" and c["sdpa_flash_ms"] and c["stof_ms"]]
    share = [c["stof_mask_ms"] / c["stof_ms"] for c in cases
             if c["stof_mask_ms"] is not None and c["stof_ms"]]
    per_layer = [x / ENCODER_LAYERS for x in share]
    r = lambda x, digits=4: None if x is None else round(x, digits)
    return {"geomean_vs_flex": r(geomean(vs_flex)),
            "min_vs_flex": r(min(vs_flex, default=None)),
            "dense_vs_sdpa": r(min(dense, default=None)),
            "max_mask_share": r(max(share, default=None)),
            "mask_share_per_layer_12": r(max(per_layer, default=None)),
            "mask_timing_floor_ms": r(floors[0], 5), "timing_floor_call_ms": r(floors[1], 5),
            **extra}


def print_table(cases, file=None):
    """One line per case; a flex time marked * ran with kernel_options of its
    own (flex_options in the JSON), not inductor's defaults."""
    file = file or sys.stdout
    head = (f"{'B':>3} {'H':>3} {'L':>5} {'D':>4} {'mask':<16} {'dens':>5} {'kernel':<26} "
            f"{'stof':>7} {'s.mask':>7} {'flex':>7} {'f.mask':>7} {'flash':>7} {'sdpa+m':>7} "
            f"{'xflex':>6} {'err':>8}")
    print(head, file=file)
    print("-" * len(head), file=file)
    marked = []
    for c in cases:
        speed = c["flex_ms"] / c["stof_ms"] if c["flex_ms"] and c["stof_ms"] else None
        flex_ms = fmt(c["flex_ms"])
        if c["flex_ms"] is not None and c.get("flex_options"):
            flex_ms += "*"
            marked.append(c)
        print(f"{c['B']:>3} {c['H']:>3} {c['L']:>5} {c['D']:>4} {c['mask']:<16} "
              f"{fmt(c['density'], '.3f'):>5} {(c['kernel'] or '-'):<26} {fmt(c['stof_ms']):>7} "
              f"{fmt(c['stof_mask_ms']):>7} {flex_ms:>7} {fmt(c['flex_mask_ms']):>7} "
              f"{fmt(c['sdpa_flash_ms']):>7} {fmt(c['sdpa_mask_ms']):>7} {fmt(speed, '.2f'):>6} "
              f"{fmt(c['max_rel_err'], '.1e'):>8}", file=file)
    for c in marked:
        print(f"* ({c['B']}, {c['H']}, {c['L']}, {c['D']}) {c['mask']}: FlexAttention compiled "
              f"only with kernel_options {c['flex_options']}", file=file)


def print_summary(s, file=None):
    file = file or sys.stdout
    def verdict(value, ok):
        return "-" if value is None else ("meets target" if ok(value) else "below target")
    print(f"geomean speedup over FlexAttention: {fmt(s['geomean_vs_flex'], '.2f')}x "
          f"(target >= 2.0: {verdict(s['geomean_vs_flex'], lambda x: x >= 2.0)})", file=file)
    print(f"smallest speedup over FlexAttention: {fmt(s['min_vs_flex'], '.2f')}x "
          f"(target >= 1.2: {verdict(s['min_vs_flex'], lambda x: x >= 1.2)})", file=file)
    print(f"dense, SDPA flash / stof: {fmt(s['dense_vs_sdpa'], '.2f')}x "
          f"(target >= 0.95: {verdict(s['dense_vs_sdpa'], lambda x: x >= 0.95)})", file=file)
    print(f"largest mask compile / attention: {fmt(s['max_mask_share'], '.3f')} "
          f"(target < 0.01: {verdict(s['max_mask_share'], lambda x: x < 0.01)})", file=file)
    print(f"largest mask compile / ({ENCODER_LAYERS} x attention), one compile serving every "
          f"layer of a {ENCODER_LAYERS}-layer encoder: {fmt(s['mask_share_per_layer_12'], '.4f')} "
          f"(context only; the target reads the line above)", file=file)
    if s.get("mask_timing_floor_ms") is not None:
        print(f"mask-build timing of a build that does nothing: "
              f"{fmt(s['mask_timing_floor_ms'], '.5f')} ms, of one call into libstof: "
              f"{fmt(s['timing_floor_call_ms'], '.5f')} ms (no compile measures less)", file=file)


def write_chart(cases, path, title):
    """Bars of flex_ms / stof_ms per mask, one bar per shape."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed: no chart", file=sys.stderr)
        return None
    masks = list(dict.fromkeys(c["mask"] for c in cases))
    shapes = list(dict.fromkeys((c["B"], c["H"], c["L"], c["D"]) for c in cases))
    width = 0.8 / max(1, len(shapes))
    fig, ax = plt.subplots(figsize=(max(7, 1.3 * len(masks) + 2), 4.5))
    for si, shape in enumerate(shapes):
        xs, ys = [], []
        for mi, m in enumerate(masks):
            c = next((c for c in cases
                      if c["mask"] == m and (c["B"], c["H"], c["L"], c["D"]) == shape), None)
            if c and c["flex_ms"] and c["stof_ms"]:
                xs.append(mi + (si - (len(shapes) - 1) / 2) * width)
                ys.append(c["flex_ms"] / c["stof_ms"])
        bars = ax.bar(xs, ys, width, label=f"B={shape[0]} H={shape[1]} L={shape[2]} D={shape[3]}")
        ax.bar_label(bars, fmt="%.2f", fontsize=7)
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.axhline(2.0, color="gray", linewidth=0.8, linestyle="--", label="target 2x")
    ax.set_ylim(bottom=0)
    ax.set_xticks(range(len(masks)))
    ax.set_xticklabels(masks)
    ax.set_ylabel("speedup over FlexAttention (flex_ms / stof_ms)")
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def main(argv=None):
    args = parse_args(argv)
    import torch
    from torch.nn.attention.flex_attention import flex_attention
    import stof

    dev = torch.device(args.device if ":" in args.device or args.device == "cpu"
                       else f"cuda:{args.device}")
    if dev.type == "cuda" and not torch.cuda.is_available():
        print("compare_attention: no CUDA device (--device cpu runs a smoke pass)",
              file=sys.stderr)
        return 2
    names = [m for m in args.masks.split(",") if m]
    for m in names:
        if m not in bench_masks.ALL_MASKS:
            print(f"unknown mask {m!r}", file=sys.stderr)
            return 2
    skip = {s for s in args.skip.split(",") if s}
    configure_compile(torch)
    flex = torch.compile(flex_attention, dynamic=False)
    if dev.type == "cuda":
        torch.cuda.set_device(dev)
        props = torch.cuda.get_device_properties(dev)
        l2_bytes = getattr(props, "L2_cache_size", 50 << 20) or (50 << 20)
        device_name = torch.cuda.get_device_name(dev)
    else:
        l2_bytes, device_name = 32 << 20, "cpu"
    date = datetime.date.today().isoformat()
    out_path = args.out or os.path.join(HERE, "results",
                                        f"attention-{date}-{gpu_slug(device_name)}.json")
    print(f"{device_name}, torch {torch.__version__}, stof {stof.version()} "
          f"({stof.library_path()}), L2 {l2_bytes >> 20} MiB", flush=True)

    timer = Timer(torch, args, dev)
    cases, failures = [], 0
    if "b" in args.suite:  # suite B first: its long cases are the ones a time limit would cut
        from torch.nn.attention.flex_attention import create_block_mask
        wanted = [w for w in args.b_cases.split(",") if w]
        for spec in attention_suite_b.CASES:
            if wanted and not any(w in spec[0] for w in wanted):
                continue
            t0 = time.perf_counter()
            problems = []
            row, failed = attention_suite_b.run_b_case(torch, stof, flex, create_block_mask,
                                                       timer, dev, spec, args, problems,
                                                       FLEX_OPTIONS, l2_bytes)
            cases.append(row)
            failures += failed
            print(f"[{time.perf_counter() - t0:5.1f}s] B {spec[0]} {spec[1:6]}: stof "
                  f"{fmt(row['stof_ms'])} flex {fmt(row['flex_ms'])} cudnn "
                  f"{fmt(row['sdpa_cudnn_ms'])} ms, err {fmt(row['max_rel_err'], '.1e')}" +
                  (" FAILED" if failed else ""), flush=True)
            for p in problems:
                print(f"    {p}", flush=True)

    for shape in (shapes_of(args) if "a" in args.suite else []):
        for name in names:
            t0 = time.perf_counter()
            row, problems, failed = run_case(torch, stof, flex, timer, dev, shape, name, args,
                                             l2_bytes, skip)
            cases.append(row)
            failures += failed
            opts = f" {row['flex_options']}" if row["flex_options"] else ""
            print(f"[{time.perf_counter() - t0:5.1f}s] {shape} {name}: stof {fmt(row['stof_ms'])} "
                  f"flex{opts} {fmt(row['flex_ms'])} flash {fmt(row['sdpa_flash_ms'])} ms, "
                  f"err {fmt(row['max_rel_err'], '.1e')}" + (" FAILED" if failed else ""),
                  flush=True)
            for p in problems:
                print(f"    {p}", flush=True)

    floors = (None, None)
    if timer.cuda and "a" in args.suite:  # what a build of no work reads, and one library call
        floors = (timer.build_ms(lambda: None), timer.build_ms(stof.version))
    summary = summarize(cases, floors)
    result = {"device": device_name, "date": date, "commit": git_commit(),
              "command": "python3 " + shlex.join(sys.argv if argv is None else
                                                 ["bench/compare_attention.py", *argv]),
              "timing": {"method": "round-robin",  # the kernel times' (module docstring)
                         "min_sleep_cycles": SLEEP_CYCLES if timer.sleep is not None else 0},
              "cases": cases, "summary": summary}
    os.makedirs(os.path.dirname(os.path.abspath(out_path)), exist_ok=True)
    with open(out_path, "w") as f:
        json.dump(result, f, indent=1)
        f.write("\n")
    chart = write_chart([c for c in cases if c.get("suite") != "B"],
                        os.path.splitext(out_path)[0] + ".png",
                        f"stof vs FlexAttention, {device_name}, {date} ({result['commit']})")
    print()
    a_rows = [c for c in cases if c.get("suite") != "B"]
    if a_rows:
        print_table(a_rows)
        print()
        print_summary(summary)
    b_rows = [c for c in cases if c.get("suite") == "B"]
    if b_rows:
        print()
        attention_suite_b.print_b(b_rows, attention_suite_b.summarize_b(b_rows))
    print(f"wrote {out_path}" + (f" and {chart}" if chart else ""))
    if failures:
        print(f"{failures} case(s) failed: stof did not run, its mask differed from torch's, "
              f"or max_rel_err exceeded {args.tol}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
