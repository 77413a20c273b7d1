#!/usr/bin/env python3
"""compare_encoder.py — stof's encoder forward against Hugging Face transformers,
side by side in one process on one GPU, with stof's last_hidden_state checked
against HF's in the same run.

Dense cases (BENCH.md shapes): BERT-base at (B, L) = (1,128) (16,128) (16,512)
(8,1024) and BERT-large at (1,128) (16,128) (16,512), padded batches with lengths
uniform in [L/2, L] (bench/masks.py's varlen_lengths). One random-weight
transformers.BertModel per model (seeded; biases and LayerNorm parameters drawn
at random too, query/key weights scaled so that attention is far from uniform:
a mistake in them, in the mask or at padding shows in the check), saved with save_pretrained
(safetensors, fp16) and loaded by every side from that folder:
  stof_ms        stof.Model.from_pretrained(dir)(input_ids, attention_mask)
  hf_eager_ms    BertModel, attn_implementation="eager"
  hf_sdpa_ms     BertModel, attn_implementation="sdpa" (the correctness reference)
  hf_compile_ms  the SDPA model under torch.compile(mode=--compile-mode, default
                 "default"; dynamic=False, one graph per shape): compile time
                 excluded (printed), warm-up included
Every side gets the same ids and 0/1 attention_mask; stof derives the lengths.

Sparse cases: a BERT-base body (4096 positions) at (1,4096) and (4,4096), full
length, with stof masks "longformer" (window:128,global:32) and "bigbird"
(bench/masks.py's spec: 64-blocks, band |bi-bj| <= 1, 2 global block rows and
columns, 3 seeded random blocks per row), against what a PyTorch user runs today:
  hf_sparse_ms   HF LongformerModel (attention_window 256, global attention on the
                 first 32 tokens) or BigBirdModel (block_sparse, block 64, 3 random
                 blocks), random BERT-base-size weights
These are other models with other masks: Longformer has the same visibility but
its own global projections; HF BigBird in eval mode points every random block
at block 0 and makes the first and last blocks global. They are timing baselines
only. stof's correctness there is checked against HF BertModel (SDPA) on the
same saved weights with the dense decode of stof's compiled mask (checked equal
to bench/masks.py's rule) as a 4-D additive mask (a 3-D 0/1 mask where
transformers takes no 4-D one), at B <= --sparse-check-batch (default 1, to
bound memory); hf_sdpa_ms on those rows is that masked run's time.

Timing (--timing latency, the default): CUDA events around one call started from
an idle device, median over a time-budgeted number of runs after warm-up, inputs
rotated among --sets input sets (different lengths). Host work inside a call —
kernel launches, HF's mask preparation, stof's packing and graph launch — counts,
as it does for a caller waiting on one forward. --timing device queues each call
behind a device sleep instead (as compare_attention.py does: twice the call's
host time, common.EventTimer.cover_cycles), which hides launch overhead unless
a side synchronises inside its call.

max_rel_err = ||stof - ref|| / ||ref|| over the valid (non-padding) tokens of
last_hidden_state on input set 0, ref = HF SDPA; a case fails when stof did not
run or max_rel_err > --tol (1e-2). HF eager and compiled outputs are checked the
same way and a mismatch is listed among the case's problems. A side that fails
(OOM, compile error, missing binding) leaves its field null with the reason in
the case's "problems" list; the other sides still run.

Output: a table, and JSON at --out (rewritten after every case, so a run cut
short keeps what it measured) with the issue's keys; each case also carries
"problems", a list of one-line reasons (empty when all went well).

Summary: geomean_vs_compile (hf_compile_ms / stof_ms, geometric mean over the
dense cases; target >= 2), bert_base_1x128_ms (target < 0.4), min_vs_hf_sparse
(smallest hf_sparse_ms / stof_ms; target >= 8); a row whose check failed is
left out (a comparison counts only with stof's output checked). The JSON's "command" always
spells out --compile-mode so the file says which mode ran.

    python3 bench/compare_encoder.py [--quick] [--cases bert-base,bigbird:1x4096]
                                     [--skip hf_compile] [--out FILE.json]
"""

import argparse
import datetime
import gc
import json
import math
import os
import shlex
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
for p in (HERE, os.path.join(REPO, "python")):
    if p not in sys.path:
        sys.path.insert(0, p)

import masks as bench_masks  # noqa: E402
from common import (EventTimer, brief_error, configure_compile,  # noqa: E402,F401
                    fmt, geomean, git_commit, gpu_slug)

ARCHS = {
    "bert-base": dict(hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
                      intermediate_size=3072),
    "bert-large": dict(hidden_size=1024, num_hidden_layers=24, num_attention_heads=16,
                       intermediate_size=4096),
}
VOCAB = 30522
FIRST_ID = 3  # below it: pad/special ids of BERT (0), Longformer (1) and BigBird (0..2)
SPARSE_MASKS = ("longformer", "bigbird")
LONGFORMER_WINDOW = 256  # HF's attention_window: 128 keys each side, as stof's window:128
LONGFORMER_GLOBAL = 32
BIGBIRD_RANDOM = 3
SIDES = ("stof", "hf_eager", "hf_sdpa", "hf_compile", "hf_sparse")
CASE_KEYS = ("model", "B", "L", "mask", "stof_ms", "hf_eager_ms", "hf_sdpa_ms", "hf_compile_ms",
             "hf_sparse_ms", "max_rel_err")
TARGETS = {"geomean_vs_compile": (">=", 2.0), "bert_base_1x128_ms": ("<", 0.4),
           "min_vs_hf_sparse": (">=", 8.0)}
COMPILE_MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")
MIN_ITERS = 10
SCORE_STD = 3.0  # spread of the attention scores of the random models (randomize_weights)
MASK_EFFECT_FLOOR = 5e-3  # a sparse mask moving HF's output less than this was likely ignored


@dataclass(frozen=True)
class Case:
    kind: str  # "dense" (padded batch) or "sparse" (full length, a stof sparse mask)
    model: str  # key of ARCHS
    B: int
    L: int
    mask: str  # "padded" for dense cases, else one of SPARSE_MASKS

    @property
    def name(self):
        return f"{self.model if self.kind == 'dense' else self.mask}:{self.B}x{self.L}"

    def matches(self, selector):
        return selector in (self.name, self.model if self.kind == "dense" else self.mask,
                            self.kind, "all")


DENSE_SHAPES = {"bert-base": [(1, 128), (16, 128), (16, 512), (8, 1024)],
                "bert-large": [(1, 128), (16, 128), (16, 512)]}
QUICK_SHAPES = {"bert-base": [(1, 128), (16, 512)]}
SPARSE_SHAPES = [(1, 4096), (4, 4096)]


def default_cases(quick=False):
    shapes = QUICK_SHAPES if quick else DENSE_SHAPES
    cases = [Case("dense", m, B, L, "padded") for m, sh in shapes.items() for B, L in sh]
    if not quick:
        cases += [Case("sparse", "bert-base", B, L, m) for m in SPARSE_MASKS
                  for B, L in SPARSE_SHAPES]
    return cases


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true",
                    help="smoke run: BERT-base at (1,128) and (16,512) only")
    ap.add_argument("--cases", default="",
                    help="comma list picking cases by name (bert-base:16x512, bigbird:1x4096), "
                         "by model or mask (bert-large, longformer) or kind (dense, sparse)")
    ap.add_argument("--skip", default="",
                    help=f"comma list of sides not to time: {', '.join(SIDES)}")
    ap.add_argument("--compile-mode", default="default", choices=COMPILE_MODES,
                    help="torch.compile mode of the hf_compile side")
    ap.add_argument("--timing", default="latency", choices=("latency", "device"),
                    help="latency: each call from an idle device (host work counts); "
                         "device: calls queued behind a device sleep")
    ap.add_argument("--out", help="JSON path (default bench/results/encoder-<date>-<gpu>.json)")
    ap.add_argument("--device", default="0", help="CUDA device index, or 'cpu' (smoke runs only)")
    ap.add_argument("--warmup", type=int, default=10, help="untimed calls before timing")
    ap.add_argument("--iters", type=int, default=200, help="most timed runs per measurement")
    ap.add_argument("--budget", type=float, default=0.75,
                    help="seconds of timed runs per measurement at most")
    ap.add_argument("--sets", type=int, default=4,
                    help="input sets rotated through (their lengths differ)")
    ap.add_argument("--seed", type=int, default=bench_masks.SEED)
    ap.add_argument("--tol", type=float, default=1e-2, help="largest max_rel_err that passes")
    ap.add_argument("--sparse-check-batch", type=int, default=1,
                    help="largest B at which sparse cases are checked against masked HF BertModel")
    return ap.parse_args(argv)


def select_cases(args):
    """The cases to run, in the default order; ValueError names a selector that
    matches nothing."""
    pool = default_cases(args.quick)
    selectors = [s.strip() for s in args.cases.split(",") if s.strip()]
    if not selectors:
        return pool
    everything = default_cases(False)
    for s in selectors:
        if not any(c.matches(s) for c in everything):
            names = ", ".join(c.name for c in everything)
            raise ValueError(f"--cases: {s!r} matches no case (cases: {names}; or a model, "
                             f"mask, 'dense', 'sparse')")
    base = everything if not args.quick else pool
    picked = [c for c in base if any(c.matches(s) for s in selectors)]
    if not picked:
        raise ValueError(f"--cases {args.cases!r} with --quick selects nothing")
    return picked


def parse_skip(text):
    skip = {s.strip() for s in text.split(",") if s.strip()}
    bad = sorted(skip - set(SIDES))
    if bad:
        raise ValueError(f"--skip: unknown side {bad[0]!r} (sides: {', '.join(SIDES)})")
    return skip


# ---------------------------------------------------------------- inputs

@dataclass
class Inputs:
    ids: object  # torch long [B, L], pad id 0 at padding
    attention_mask: object  # torch long [B, L], 1 on the first lengths[b] tokens
    lengths: list


def make_inputs(torch, B, L, seed, device, padded=True, vocab=None):
    """One input set: random token ids in [FIRST_ID, vocab) on the first
    lengths[b] tokens (lengths uniform in [L/2, L] from seed when padded, else all
    L), 0 after them, and the matching 0/1 attention_mask."""
    vocab = vocab or VOCAB
    lengths = bench_masks.varlen_lengths(B, L, seed) if padded else [L] * B
    gen = torch.Generator().manual_seed(seed)
    ids = torch.randint(FIRST_ID, vocab, (B, L), generator=gen)
    am = (torch.arange(L).unsqueeze(0) < torch.tensor(lengths).unsqueeze(1)).long()
    return Inputs((ids * am).to(device), am.to(device), lengths)


def input_sets(torch, case, seed, device, n_sets):
    base = seed + 7919 * case.B + case.L
    return [make_inputs(torch, case.B, case.L, base + 104729 * s, device,
                        padded=case.kind == "dense") for s in range(max(1, n_sets))]


# ---------------------------------------------------------------- timing

class Timer(EventTimer):
    """CUDA-event timing on a GPU (host clock on the CPU, for smoke runs). ms()
    warms up, estimates one call, then times as many calls as --budget allows
    (between MIN_ITERS and --iters) and returns the median."""

    def __init__(self, torch, device, warmup=10, iters=200, budget=0.75, mode="latency"):
        super().__init__(torch, device)
        self.warmup, self.iters, self.budget, self.mode = warmup, iters, budget, mode

    def iterations(self, est_s):
        return max(MIN_ITERS, min(self.iters, int(self.budget / max(est_s, 1e-6))))

    def ms(self, fn, n_sets):
        """Median time of fn(set_index) with the set rotated; every set is seen
        at least twice in warm-up (stof may capture a graph per shape bucket)."""
        iters = self.iterations(self.warm_estimate(fn, n_sets, max(self.warmup, 2 * n_sets), 2))
        cycles = 0 if self.mode == "latency" else self.cover_cycles([fn], n_sets)
        pairs = []
        for it in range(iters):
            start, end = self._pair()
            if self.mode == "latency":
                self.sync()
            elif self.sleep is not None:
                self.sleep(cycles)
            start.record()
            fn(it % n_sets)
            end.record()
            pairs.append((start, end))
        self.sync()
        return statistics.median(s.elapsed_time(e) for s, e in pairs)


# ---------------------------------------------------------------- correctness

def valid_rel_err(torch, out, ref, attention_mask):
    """||out - ref|| / ||ref|| over the tokens where attention_mask is 1, in fp32;
    inf when out has a non-finite value there."""
    if tuple(out.shape) != tuple(ref.shape):
        raise ValueError(f"output shape {tuple(out.shape)} differs from the reference's "
                         f"{tuple(ref.shape)}")
    keep = attention_mask.to(device=out.device).bool()
    got, want = out[keep].float(), ref.to(out.device)[keep].float()
    if not torch.isfinite(want).all():
        raise ValueError("the reference has non-finite values on valid tokens")
    if not torch.isfinite(got).all():
        return float("inf")
    return ((got - want).norm() / want.norm().clamp_min(1e-30)).item()


def padding_max_abs(torch, out, attention_mask):
    """Largest |out| on padding tokens (stof promises zeros there); 0 without padding."""
    pad = ~attention_mask.to(device=out.device).bool()
    if not pad.any():
        return 0.0
    return out[pad].float().abs().max().item()


def stof_mask_planes(stof, bm, batch):
    """The mask stof compiles from bm.spec for `batch` full-length sequences,
    decoded to numpy bool [batch, L, L]; checked against bench/masks.py's rule
    (ValueError naming the first difference) so every side uses one mask."""
    import numpy as np
    L = bm.length
    cm = stof.Mask.parse(bm.spec).compile(batch, 1, L, L)
    try:
        planes = np.stack([cm.decode(b, 0).astype(bool) for b in range(batch)])
    finally:
        cm.close()
    rule = bm.dense_numpy()[:, 0]
    for b in range(batch):
        want = rule[b if rule.shape[0] > 1 else 0]
        if not np.array_equal(planes[b], want):
            bad = np.argwhere(planes[b] != want)
            raise ValueError(f"stof's compiled {bm.name} mask differs from bench/masks.py's at "
                             f"b={b}: {len(bad)} elements, first (i, j) = {tuple(bad[0])}")
    return planes


def hf_mask_forms(torch, planes, device, dtype):
    """The dense mask as transformers' BertModel may take it, in the order tried:
    4-D additive [B, 1, L, L] (0 visible, dtype's min hidden; transformers 5 passes
    a 4-D mask through unchanged to eager and SDPA alike), then 3-D 0/1 [B, L, L]
    (transformers 4's get_extended_attention_mask)."""
    vis = torch.from_numpy(planes).to(device)
    return [("4-D additive", additive_4d(torch, vis, dtype)), ("3-D 0/1", vis.long())]


def additive_4d(torch, vis, dtype):
    """The additive mask [B, 1, L, L] of a bool visibility [B, L, L] (on its device): 0
    where visible, the dtype's min elsewhere."""
    add = torch.zeros(vis.shape, dtype=dtype, device=vis.device)
    add.masked_fill_(~vis, torch.finfo(dtype).min)
    return add.unsqueeze(1)


# ---------------------------------------------------------------- models

def bert_config(tf, arch, positions):
    return tf.BertConfig(vocab_size=VOCAB, max_position_embeddings=positions, type_vocab_size=2,
                         hidden_act="gelu", layer_norm_eps=1e-12, **ARCHS[arch])


def new_model(cls, config):
    """cls(config) without a pooler where the class allows (none of the sides
    needs one; stof computes none)."""
    try:
        return cls(config, add_pooling_layer=False)
    except TypeError:
        return cls(config)


def randomize_weights(torch, model, seed):
    """Random biases and LayerNorm scales (HF initialises them to 0 and 1, where a
    mistake in their handling would not show), and query and key weights scaled
    so that attention scores spread with a standard deviation of about
    SCORE_STD: at HF's initial std of 0.02 every attention row is near uniform,
    and a wrong mask or a padding leak would move the output by little."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("bias"):
                p.copy_(0.1 * torch.randn(p.shape, generator=gen))
            elif "layernorm" in name.lower().replace("_", "") and name.endswith("weight"):
                p.copy_(1.0 + 0.1 * torch.randn(p.shape, generator=gen))
            elif name.endswith(("self.query.weight", "self.key.weight")):
                # q and k entries of std sqrt(SCORE_STD) for unit inputs: their dot
                # product over a head, scaled by 1/sqrt(head dim), has std SCORE_STD
                p.mul_(math.sqrt(SCORE_STD) / (p.float().std().item() * math.sqrt(p.shape[1])))


def save_random_bert(tf, torch, arch, positions, seed, folder, dtype):
    """A random-weight BertModel (seeded) written with save_pretrained; returns
    the path of its model.safetensors."""
    torch.manual_seed(seed)
    model = new_model(tf.BertModel, bert_config(tf, arch, positions))
    randomize_weights(torch, model, seed + 1)
    model = model.to(dtype=dtype)
    model.save_pretrained(folder)  # safetensors by default since transformers 4.35
    path = os.path.join(folder, "model.safetensors")
    if not os.path.exists(path):
        model.save_pretrained(folder, safe_serialization=True)
    if not os.path.exists(path):
        raise RuntimeError(f"save_pretrained wrote no model.safetensors in {folder}: "
                           f"{sorted(os.listdir(folder))}")
    return path


def load_hf_bert(tf, folder, impl, device, dtype):
    kw = dict(attn_implementation=impl, add_pooling_layer=False)
    try:
        model = tf.BertModel.from_pretrained(folder, dtype=dtype, **kw)
    except TypeError:  # transformers before "dtype" replaced "torch_dtype"
        model = tf.BertModel.from_pretrained(folder, torch_dtype=dtype, **kw)
    model = model.to(device=device, dtype=dtype).eval()
    got = getattr(model.config, "_attn_implementation", impl)
    if got != impl:
        raise RuntimeError(f"asked for attn_implementation={impl!r}, transformers chose {got!r}")
    return model


def load_stof(stof, folder, device, dtype):
    model_cls = getattr(stof, "Model", None)
    if model_cls is None:
        raise RuntimeError("this stof binding has no stof.Model (python/stof/model.py)")
    return model_cls.from_pretrained(folder, device=str(device), dtype=dtype)


def build_longformer(tf, torch, L, seed, device, dtype):
    cfg = tf.LongformerConfig(vocab_size=VOCAB, max_position_embeddings=L + 2,
                              attention_window=LONGFORMER_WINDOW, **ARCHS["bert-base"])
    torch.manual_seed(seed)
    return new_model(tf.LongformerModel, cfg).to(device=device, dtype=dtype).eval()


def build_bigbird(tf, torch, L, seed, device, dtype):
    cfg = tf.BigBirdConfig(vocab_size=VOCAB, max_position_embeddings=L,
                           attention_type="block_sparse", block_size=bench_masks.BLOCK,
                           num_random_blocks=BIGBIRD_RANDOM, **ARCHS["bert-base"])
    torch.manual_seed(seed)
    return new_model(tf.BigBirdModel, cfg).to(device=device, dtype=dtype).eval()


class Group:
    """Everything loaded for the cases that share one saved model: the folder,
    the stof model, the HF sides, and the problems met while loading them
    (copied into each of the group's cases)."""

    def __init__(self, arch, positions, cases):
        self.arch, self.positions, self.cases = arch, positions, cases
        self.problems = []
        self.folder = None
        self.stof = self.hf_eager = self.hf_sdpa = self.hf_compile = None
        self.sparse = {}  # mask name -> HF sparse model

    def attempt(self, label, fn):
        try:
            return fn()
        except Exception as e:  # a side failing to load must not lose the others
            self.problems.append(brief_error(label, e))
            return None

    def close(self, torch):
        close = getattr(self.stof, "close", None)
        if close is not None:
            self.attempt("stof close", close)
        self.stof = self.hf_eager = self.hf_sdpa = self.hf_compile = None
        self.sparse = {}
        if hasattr(torch, "_dynamo"):
            torch._dynamo.reset()  # drops the compiled graphs and the weights they hold
        gc.collect()
        if torch.cuda.is_available():
            torch.cuda.empty_cache()


def plan_groups(cases):
    """Cases grouped by the saved model they need, in first-appearance order:
    dense cases per architecture (positions = max(512, largest L)), sparse cases
    on one BERT-base body with positions = their largest L."""
    groups = {}
    for c in cases:
        key = (c.model, c.kind)
        groups.setdefault(key, []).append(c)
    plan = []
    for (arch, kind), cs in groups.items():
        longest = max(c.L for c in cs)
        plan.append((arch, max(512, longest) if kind == "dense" else longest, cs))
    return plan


def load_group(tf, torch, stof, arch, positions, cases, folder, device, dtype, args, skip):
    g = Group(arch, positions, cases)
    g.folder = folder
    t0 = time.perf_counter()
    saved = g.attempt("build and save the HF model", lambda: save_random_bert(
        tf, torch, arch, positions, args.seed, folder, dtype))
    if saved is None:
        return g
    dense = any(c.kind == "dense" for c in cases)
    g.stof = g.attempt("stof load", lambda: load_stof(stof, folder, device, dtype))
    g.hf_sdpa = g.attempt("HF sdpa load", lambda: load_hf_bert(tf, folder, "sdpa", device, dtype))
    if dense and "hf_eager" not in skip:
        g.hf_eager = g.attempt("HF eager load",
                               lambda: load_hf_bert(tf, folder, "eager", device, dtype))
    if dense and "hf_compile" not in skip and g.hf_sdpa is not None:
        mode = None if args.compile_mode == "default" else args.compile_mode
        g.hf_compile = g.attempt("torch.compile", lambda: torch.compile(g.hf_sdpa, mode=mode,
                                                                        dynamic=False))
    if "hf_sparse" not in skip:
        L = max(c.L for c in cases)
        builders = {"longformer": build_longformer, "bigbird": build_bigbird}
        for m in dict.fromkeys(c.mask for c in cases if c.kind == "sparse"):
            g.sparse[m] = g.attempt(f"HF {m} build", lambda m=m: builders[m](
                tf, torch, L, args.seed + 17, device, dtype))
    print(f"[{time.perf_counter() - t0:5.1f}s] loaded {arch} ({positions} positions)"
          + "".join(f"\n    {p}" for p in g.problems), flush=True)
    return g


# ---------------------------------------------------------------- one case

def new_row(case):
    row = dict.fromkeys(CASE_KEYS)
    row.update(model=case.model, B=case.B, L=case.L, mask=case.mask)
    row["problems"] = []
    return row


def run_case(torch, timer, row, sides, reference, sets, tol, check=("stof",), skip=(),
             must_check=True):
    """Fills row. sides: {side: fn(set_index) -> last_hidden_state}, run in order;
    reference: fn(set_index) -> the HF output that the sides in `check` are
    compared with on set 0 (None: no check). The first call of each side is
    untimed (it compiles or captures); its seconds go to the returned info.
    Returns (info, failed): failed when stof did not run, or, with must_check,
    when it was not checked or its error exceeds tol."""
    problems, info = row["problems"], {}

    def attempt(label, fn):
        try:
            return fn()
        except Exception as e:  # one side failing must not lose the others
            problems.append(brief_error(label, e))
            try:
                timer.sync()
                if timer.cuda:
                    torch.cuda.empty_cache()
            except Exception:  # a device fault: the next side reports its own error
                pass
            return None

    def first_call(fn):
        out = fn(0)
        timer.sync()
        return out

    def release():
        """Hands the blocks torch's allocator caches back to the device, so that each
        side starts with the memory the previous one used: HF SDPA's activations
        at LLaMA-1B (16, 2048) filled an 80 GB GPU, and stof's next call then ran
        out of memory in one run and 42% over its kernel time in another."""
        timer.sync()
        if timer.cuda:
            gc.collect()
            torch.cuda.empty_cache()

    ref = attempt("reference", lambda: first_call(reference)) if reference is not None else None
    release()
    am = sets[0].attention_mask
    stof_ran = False
    for name, fn in sides.items():
        t0 = time.perf_counter()
        out = attempt(name, lambda fn=fn: first_call(fn))
        info[f"{name}_first_s"] = time.perf_counter() - t0
        if out is None:
            continue
        stof_ran |= name == "stof"
        if name in check and ref is not None:
            err = attempt(f"{name} check", lambda out=out: valid_rel_err(torch, out, ref, am))
            info[f"{name}_err"] = err
            if name == "stof":
                if err is not None and not math.isfinite(err):
                    problems.append("stof: non-finite values on valid tokens")
                    err = None  # JSON has no inf; a missing error fails the case
                row["max_rel_err"] = None if err is None else float(f"{err:.3e}")
                pad = attempt("stof padding", lambda out=out: padding_max_abs(torch, out, am))
                if pad:
                    problems.append(f"stof: padding tokens are not zero (largest |x| {pad:.3g})")
            elif err is not None and not err <= tol:
                problems.append(f"{name}: differs from HF SDPA (rel err {err:.3e}): its time is "
                                f"not of the same computation")
        elif not bool(torch.isfinite(out).all()):
            problems.append(f"{name}: non-finite values in its output")
        out = None
        if name in skip:
            continue
        ms = attempt(f"{name} timing", lambda fn=fn: timer.ms(fn, len(sets)))
        row[f"{name}_ms"] = None if ms is None else round(ms, 4)
        release()
    if stof_ran and must_check and row["max_rel_err"] is None:
        problems.append("stof: not checked (no reference output, or the check failed)")
    failed = not stof_ran or (must_check and (row["max_rel_err"] is None or
                                              not row["max_rel_err"] <= tol))
    return info, failed


def hf_call(model):
    """fn(inputs, **overrides) -> last_hidden_state of an HF model."""
    def call(x, **kw):
        args = dict(input_ids=x.ids, attention_mask=x.attention_mask)
        args.update(kw)
        return model(**args).last_hidden_state
    return call


def longformer_globals(torch, x):
    """Global attention on the first LONGFORMER_GLOBAL tokens, as stof's global:32."""
    g = torch.zeros_like(x.attention_mask)
    g[:, :LONGFORMER_GLOBAL] = 1
    return g


def dense_case(torch, timer, group, case, sets, args, skip):
    row = new_row(case)
    row["problems"].extend(group.problems)
    sides = {}
    if group.stof is not None:
        sides["stof"] = lambda s: group.stof(sets[s].ids, sets[s].attention_mask)
    for name in ("hf_sdpa", "hf_eager", "hf_compile"):
        model = getattr(group, name)
        if model is not None:
            call = hf_call(model)
            sides[name] = lambda s, call=call: call(sets[s])
    reference = sides.get("hf_sdpa")
    info, failed = run_case(torch, timer, row, sides, reference, sets, args.tol,
                            check=("stof", "hf_eager", "hf_compile"), skip=skip)
    return row, info, failed


def sparse_case(torch, stof, timer, group, case, sets, args, skip):
    """A sparse-mask case: stof with the mask's spec; HF's sparse model timed;
    at B <= --sparse-check-batch, HF BertModel (SDPA) with stof's decoded mask as
    the reference, and timed as hf_sdpa."""
    row = new_row(case)
    problems = row["problems"]
    problems.extend(group.problems)
    bm = bench_masks.make_mask(case.mask, case.B, case.L, seed=args.seed)
    sides = {}
    if group.stof is not None:
        sides["stof"] = lambda s: group.stof(sets[s].ids, sets[s].attention_mask, mask=bm.spec)
    must_check = case.B <= args.sparse_check_batch
    reference = None
    if must_check and group.hf_sdpa is not None:
        reference = masked_reference(torch, stof, group.hf_sdpa, bm, sets, problems)
        if reference is not None:
            sides["hf_sdpa"] = reference
    hf = group.sparse.get(case.mask)
    if hf is not None:
        call = hf_call(hf)
        if case.mask == "longformer":
            globs = [longformer_globals(torch, x) for x in sets]
            sides["hf_sparse"] = lambda s: call(sets[s], global_attention_mask=globs[s])
        else:
            sides["hf_sparse"] = lambda s: call(sets[s])
    info, failed = run_case(torch, timer, row, sides, reference, sets, args.tol, skip=skip,
                            must_check=must_check)
    return row, info, failed


def masked_reference(torch, stof, hf_sdpa, bm, sets, problems):
    """fn(set_index) running HF BertModel with stof's mask in the first form
    transformers accepts, or None (the reason in problems). A mask that leaves
    HF's output where the unmasked run puts it is noted: it was likely ignored."""
    x = sets[0]
    dtype = next(hf_sdpa.parameters()).dtype
    call = hf_call(hf_sdpa)
    try:
        planes = stof_mask_planes(stof, bm, bm.batch)
        forms = hf_mask_forms(torch, planes, x.ids.device, dtype)
        plain = call(x)
    except Exception as e:
        problems.append(brief_error("masked reference", e))
        return None
    for label, mask in forms:
        try:
            moved = valid_rel_err(torch, call(x, attention_mask=mask), plain, x.attention_mask)
        except Exception as e:
            problems.append(brief_error(f"HF BertModel with a {label} mask", e))
            continue
        if not moved > MASK_EFFECT_FLOOR:
            problems.append(f"HF BertModel with a {label} mask: output within {moved:.1e} of the "
                            f"unmasked run: the mask may have been ignored")
        return lambda s, mask=mask: call(sets[s], attention_mask=mask)
    return None


# ---------------------------------------------------------------- reporting

def counts(case, tol):
    """Whether a row enters the summary: a comparison counts only with stof's
    output checked in the same run. Dense rows need a passing max_rel_err; sparse
    rows are checked at small B only (the same model and mask), so theirs need
    only not to have failed."""
    err = case["max_rel_err"]
    if case["mask"] == "padded":
        return err is not None and err <= tol
    return err is None or err <= tol


def summarize(cases, tol=1e-2):
    cases = [c for c in cases if counts(c, tol)]
    dense = [c for c in cases if c["mask"] == "padded"]
    vs_compile = [c["hf_compile_ms"] / c["stof_ms"] for c in dense
                  if c["hf_compile_ms"] and c["stof_ms"]]
    base = [c["stof_ms"] for c in dense
            if c["model"] == "bert-base" and (c["B"], c["L"]) == (1, 128) and c["stof_ms"]]
    vs_sparse = [c["hf_sparse_ms"] / c["stof_ms"] for c in cases
                 if c["mask"] in SPARSE_MASKS and c["hf_sparse_ms"] and c["stof_ms"]]
    r = lambda x: None if x is None else round(x, 4)
    return {"geomean_vs_compile": r(geomean(vs_compile)),
            "bert_base_1x128_ms": r(base[0] if base else None),
            "min_vs_hf_sparse": r(min(vs_sparse, default=None))}


def meets(key, value):
    op, bound = TARGETS[key]
    return value >= bound if op == ">=" else value < bound


def ratio(a, b):
    return a / b if a and b else None


def print_table(cases, file=None):
    file = file or sys.stdout
    head = (f"{'model':<10} {'B':>3} {'L':>5} {'mask':<10} {'stof':>8} {'eager':>8} {'sdpa':>8} "
            f"{'compile':>8} {'hf.sparse':>9} {'xcompile':>8} {'xsparse':>7} {'err':>8}")
    print(head, file=file)
    print("-" * len(head), file=file)
    for c in cases:
        print(f"{c['model']:<10} {c['B']:>3} {c['L']:>5} {c['mask']:<10} {fmt(c['stof_ms']):>8} "
              f"{fmt(c['hf_eager_ms']):>8} {fmt(c['hf_sdpa_ms']):>8} {fmt(c['hf_compile_ms']):>8} "
              f"{fmt(c['hf_sparse_ms']):>9} "
              f"{fmt(ratio(c['hf_compile_ms'], c['stof_ms']), '.2f'):>8} "
              f"{fmt(ratio(c['hf_sparse_ms'], c['stof_ms']), '.2f'):>7} "
              f"{fmt(c['max_rel_err'], '.1e'):>8}", file=file)


def print_summary(s, file=None):
    file = file or sys.stdout
    labels = {"geomean_vs_compile": ("speedup over HF SDPA + torch.compile, geomean", "x"),
              "bert_base_1x128_ms": ("BERT-base (1,128) stof time", " ms"),
              "min_vs_hf_sparse": ("smallest speedup over HF BigBird/Longformer", "x")}
    for key, (text, unit) in labels.items():
        v = s[key]
        op, bound = TARGETS[key]
        verdict = "-" if v is None else ("meets target" if meets(key, v) else "misses target")
        print(f"{text}: {fmt(v, '.3f')}{unit if v is not None else ''} "
              f"(target {op} {bound}: {verdict})", file=file)


def print_notes(args, file=None):
    file = file or sys.stdout
    print(f"notes: hf_compile is torch.compile(mode={args.compile_mode!r}, dynamic=False), compile "
          f"time excluded; times are {args.timing} medians of CUDA events; dense batches padded "
          f"with lengths uniform in [L/2, L].", file=file)
    print("       hf_sparse runs other models with other masks: HF Longformer (window 256, first "
          "32 tokens global; own global projections) and HF BigBird (eval mode: random blocks "
          "all at block 0, first and last blocks global); stof's sparse rows are checked "
          "against HF BertModel with stof's own mask, whose time is hf_sdpa on those rows.",
          file=file)


def command_line(argv, compile_mode):
    """The command that reproduces the run, with --compile-mode always spelled out."""
    argv = list(argv)
    if not any(a == "--compile-mode" or a.startswith("--compile-mode=") for a in argv):
        argv += ["--compile-mode", compile_mode]
    return "python3 " + shlex.join(["bench/compare_encoder.py", *argv])


def result_json(device, date, commit, command, cases, tol=1e-2):
    """The file's content: exactly these keys, each case the schema's keys then
    its problems."""
    rows = []
    for c in cases:
        row = {k: c[k] for k in CASE_KEYS}
        row["problems"] = list(c.get("problems", []))
        rows.append(row)
    return {"device": device, "date": date, "commit": commit, "command": command,
            "cases": rows, "summary": summarize(rows, tol)}


def write_result(path, result):
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w") as f:
        json.dump(result, f, indent=1)
        f.write("\n")


# ---------------------------------------------------------------- main

def run_one(torch, stof, timer, group, case, args, device, skip):
    """One case, printed as it finishes."""
    t0 = time.perf_counter()
    sets = input_sets(torch, case, args.seed, device, args.sets)
    if case.kind == "dense":
        row, info, failed = dense_case(torch, timer, group, case, sets, args, skip)
    else:
        row, info, failed = sparse_case(torch, stof, timer, group, case, sets, args, skip)
    compile_s = info.get("hf_compile_first_s") if row["hf_compile_ms"] is not None else None
    compiled = f" (compiled in {compile_s:.1f} s)" if compile_s else ""
    print(f"[{time.perf_counter() - t0:5.1f}s] {case.name}: stof {fmt(row['stof_ms'])} eager "
          f"{fmt(row['hf_eager_ms'])} sdpa {fmt(row['hf_sdpa_ms'])} compile "
          f"{fmt(row['hf_compile_ms'])}{compiled}"
          + f" sparse {fmt(row['hf_sparse_ms'])} ms, err {fmt(row['max_rel_err'], '.1e')}"
          + (" FAILED" if failed else ""), flush=True)
    floors = [f"{n[3:]} {info[n + '_err']:.1e}" for n in ("hf_eager", "hf_compile")
              if info.get(n + "_err") is not None]
    if floors:  # how far HF's own variants are apart: the noise floor of the check
        print(f"    HF vs HF SDPA, rel err: {', '.join(floors)}", flush=True)
    for p in row["problems"]:
        print(f"    {p}", flush=True)
    return row, info, failed


def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    args = parse_args(argv)
    try:
        cases = select_cases(args)
        skip = parse_skip(args.skip)
    except ValueError as e:
        print(f"compare_encoder: {e}", file=sys.stderr)
        return 2
    import torch
    try:
        import transformers as tf
    except ImportError:
        print("compare_encoder: needs transformers (pip install transformers)", file=sys.stderr)
        return 2
    import stof
    quiet = getattr(getattr(getattr(tf, "utils", None), "logging", None), "disable_progress_bar",
                    None)
    if quiet is not None:
        quiet()  # loading and saving bars would bury the table

    dev = torch.device(args.device if ":" in args.device or args.device == "cpu"
                       else f"cuda:{args.device}")
    if dev.type == "cuda" and not torch.cuda.is_available():
        print("compare_encoder: no CUDA device", file=sys.stderr)
        return 2
    dtype = torch.float16 if dev.type == "cuda" else torch.float32
    if dev.type == "cuda":
        torch.cuda.set_device(dev)
        device_name = torch.cuda.get_device_name(dev)
    else:
        device_name = "cpu"
    configure_compile(torch)
    date = datetime.date.today().isoformat()
    out_path = args.out or os.path.join(HERE, "results",
                                        f"encoder-{date}-{gpu_slug(device_name)}.json")
    try:
        stof_text = f"stof {stof.version()} ({stof.library_path()})"
    except Exception as e:
        stof_text = brief_error("stof", e)
    print(f"{device_name}, torch {torch.__version__}, transformers {tf.__version__}, {stof_text}; "
          f"compile mode {args.compile_mode}, {args.timing} timing", flush=True)

    commit, command = git_commit(), command_line(argv, args.compile_mode)
    timer = Timer(torch, dev, args.warmup, args.iters, args.budget, args.timing)
    rows, failures = [], 0
    for arch, positions, group_cases in plan_groups(cases):
        with tempfile.TemporaryDirectory(prefix=f"stof-{arch}-") as folder:
            # loaded outside inference mode: parameters stay ordinary tensors for torch.compile
            group = load_group(tf, torch, stof, arch, positions, group_cases, folder, dev, dtype,
                               args, skip)
            for case in group_cases:
                try:
                    with torch.inference_mode():
                        row, _, failed = run_one(torch, stof, timer, group, case, args, dev, skip)
                except Exception as e:  # a fault outside every side: the case is lost, not the run
                    row, failed = new_row(case), True
                    row["problems"].append(brief_error("case", e))
                    print(f"{case.name}: {row['problems'][-1]}", flush=True)
                rows.append(row)
                failures += failed
                # rewritten after every case: a run cut short keeps what it measured
                write_result(out_path, result_json(device_name, date, commit, command, rows,
                                                   args.tol))
            group.close(torch)

    result = result_json(device_name, date, commit, command, rows, args.tol)
    write_result(out_path, result)
    print()
    print_table(result["cases"])
    print()
    print_summary(result["summary"])
    print_notes(args)
    print(f"wrote {out_path}")
    if failures:
        print(f"{failures} case(s) failed: stof did not run, was not checked, or max_rel_err "
              f"exceeded {args.tol}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
