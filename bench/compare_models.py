#!/usr/bin/env python3
"""compare_models.py — stof's engine against Hugging Face transformers for the
model families of BENCH.md suite D, side by side in one process on one GPU,
with stof's last hidden state checked against HF's in the same run.

Families (random weights, seeded, fp16, written by save_pretrained and loaded
by every side from that folder): GPT-2 124M, a LLaMA-3.2-1B-shaped model
(GQA 32:8, llama3 RoPE scaling), ModernBERT-base (local and global layers) and
BERT-base. Phases, in this order so that a time limit cuts the compiles (the
longest wall time) first: (1) every family at (1,128), (8,512), (16,2048)
where its positions allow, padded batches with lengths uniform in [L/2, L]
(compare_encoder.py's inputs); (2) the long sweep (4096, 8192, 16384 where positions allow) at
B = 1, full length, with the family's own masks (causal; ModernBERT's
local/global), then with --long-mask (default window:256,global:64): stof
gets the spec as text, HF the same visibility as a dense 4-D additive mask
[1, 1, L, L] (intersected with causality for decoders; transformers 5 passes
a 4-D mask through to eager and SDPA as given); (3) torch.compile of the
phase 1 cases; (4) the kernel profiles (below), after every timing.
  stof_ms        stof.Model.from_pretrained(dir)(input_ids, attention_mask[, mask=spec])
  hf_eager_ms    AutoModel, attn_implementation="eager"; skipped (reason in the
                 case's "skipped") where its [B, heads, L, L] scores and their
                 fp32 softmax would pass --eager-gib
  hf_sdpa_ms     AutoModel, attn_implementation="sdpa" (the correctness reference)
  hf_compile_ms  the SDPA model under torch.compile (dynamic=False); a compile per
                 shape costs tens of seconds, so the long sweep runs it only with
                 --long-compile (the reason is recorded otherwise)
  tokens         real tokens, the mean over the rotated input sets (the times are
                 medians over those sets, so the floors below are of that mean)
  floor_ms       2 * params * real tokens (+ the attention's FLOPs over the visible
                 pairs) at the best dense fp16 GEMM rate the run saw for this case: the
                 higher of two. (a) A side timed right after stof by the same timer,
                 each call as many 8192^3 GEMMs as the floor's FLOPs round up to
                 (floor_gemm_ms; its rate gemm_tflops, its floor floor_side_ms), so that
                 the rate is of the device under the load stof's calls put on it (one
                 H100 ran the same forward in 14.75 ms after 20 ms of device sleep and
                 in 15.9-16.4 ms back to back or after 1 ms:
                 results/models-modernbert-timing-2026-11-27-h100.txt). (b) The burst:
                 20 such GEMMs back to back at the start of the run (the file's
                 gemm_tflops; floor_burst_ms). A floor is the least time the FLOPs
                 could take on the device, so it takes the better rate; the side's
                 floor shows what the device's sustained state leaves of it (647.6-755.2
                 TF/s where the burst read 759.3, results/models-2026-11-27b-h100.json),
                 and the burst was the better rate in every case there. params
                 include the token embedding table (a gather, not a product: 38.6M of
                 ModernBERT-base's 149M, 263M of LLaMA-1B's 1.24B), which makes this
                 floor higher than any forward's products need
  gemm_floor_ms  the same forward's linears at their own shapes: cuBLAS through torch
                 (F.linear, fp16, no bias) timed alone per distinct shape in this run,
                 with QKV and a GLU's two halves each one GEMM (as stof runs them),
                 times their count, plus the attention FLOPs at the dense rate. Where a
                 batch has a few thousand tokens, those GEMMs run well below the 8192^3
                 rate, and this floor is what any implementation of the layer's
                 products can reach
max_rel_err = ||stof - HF SDPA|| / ||HF SDPA|| over the real tokens of set 0; a
case fails above --tol (2e-2: several layers of fp16 on random weights). A side
that fails leaves its field null and a line in the case's "problems" (a spec
stof refuses gives its error string there, and the run goes on). ModernBERT
with a stof spec is timed but not checked: HF applies one 4-D mask to every
layer, where stof intersects the spec with each layer's own window.

Budget: every case is bounded (--warmup, --iters, --budget seconds of timed
calls per side), and --time-limit (default 420 s) stops starting new cases;
those left are listed with the reason.

The JSON has issue 32's keys: device, date, commit, command, cases [{family, B,
L, mask, tokens, stof_ms, hf_eager_ms, hf_sdpa_ms, hf_compile_ms, floor_ms,
max_rel_err, problems, skipped}], summary {families, geomean_vs_compile,
min_vs_compile, largest_batch_vs_floor, min_long_masked_vs_hf, and beside them
largest_batch_vs_side_floor and largest_batch_vs_gemm_floor}, where
min_long_masked_vs_hf is the smallest best-of(HF SDPA, HF compile) / stof over
the long cases with a stof spec. Each case also records stof_top_kernels (the
five kernels taking the most time over three forwards under torch.profiler,
which sees the kernels of stof's CUDA graph replays too: name, ms per forward,
share) and stof_kernel_ms (all kernel time per forward; stof_ms minus it is
host and launch time); --no-profile leaves them out. Each case also has
gemm_tflops, floor_gemm_ms, floor_side_ms and floor_burst_ms (above).

    python3 bench/compare_models.py [--families gpt2,llama,modernbert,bert]
        [--lengths 4096,8192,16384] [--no-long] [--long-mask SPEC] [--long-compile]
        [--skip hf_eager,hf_compile] [--time-limit S] [--no-profile] [--out FILE.json]
    python3 bench/compare_models.py --dry-run    # tiny models on the CPU: the flow only
"""

import argparse
import datetime
import json
import math
import os
import shlex
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
for p in (HERE, os.path.join(REPO, "python")):
    if p not in sys.path:
        sys.path.insert(0, p)

import compare_encoder as ce  # noqa: E402
from common import configure_compile, fmt, geomean, git_commit, gpu_slug  # noqa: E402

FAMILIES = {
    "gpt2": dict(cls="GPT2LMHeadModel", positions=1024, vocab=50257, causal=True,
                 config=dict(n_embd=768, n_layer=12, n_head=12, n_positions=1024,
                             vocab_size=50257, activation_function="gelu_new")),
    "llama": dict(cls="LlamaForCausalLM", positions=131072, vocab=128256, causal=True,
                  config=dict(hidden_size=2048, num_hidden_layers=16, num_attention_heads=32,
                              num_key_value_heads=8, intermediate_size=8192, vocab_size=128256,
                              max_position_embeddings=131072, rms_norm_eps=1e-5,
                              rope_theta=500000.0, tie_word_embeddings=True,
                              rope_scaling=dict(rope_type="llama3", factor=32.0,
                                                low_freq_factor=1.0, high_freq_factor=4.0,
                                                original_max_position_embeddings=8192))),
    "modernbert": dict(cls="ModernBertModel", positions=8192, vocab=50368, causal=False,
                       config=dict(hidden_size=768, num_hidden_layers=22, num_attention_heads=12,
                                   intermediate_size=1152, vocab_size=50368,
                                   max_position_embeddings=8192, global_attn_every_n_layers=3,
                                   local_attention=128, pad_token_id=50283)),
    "bert": dict(cls="BertModel", positions=512, vocab=30522, causal=False,
                 config=dict(hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
                             intermediate_size=3072, vocab_size=30522,
                             max_position_embeddings=512, hidden_act="gelu")),
}
CONFIG_CLS = {"gpt2": "GPT2Config", "llama": "LlamaConfig", "modernbert": "ModernBertConfig",
              "bert": "BertConfig"}
# --dry-run: the same families shrunk to run on the CPU in seconds (head dim 32).
TINY = {
    "gpt2": dict(n_embd=64, n_layer=2, n_head=2, n_positions=256, vocab_size=512),
    "llama": dict(hidden_size=128, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=1, intermediate_size=192, vocab_size=512,
                  max_position_embeddings=256, tie_word_embeddings=True),
    "modernbert": dict(hidden_size=64, num_hidden_layers=3, num_attention_heads=2,
                       intermediate_size=96, vocab_size=512, max_position_embeddings=256,
                       global_attn_every_n_layers=2, local_attention=16, pad_token_id=0),
    "bert": dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=2,
                 intermediate_size=128, vocab_size=512, max_position_embeddings=128),
}
SHAPES = [(1, 128), (8, 512), (16, 2048)]
LONG = [4096, 8192, 16384]
DRY_SHAPES, DRY_LONG, DRY_MASK = [(1, 32), (2, 64)], [128, 256], "window:16,global:4"
SIDES = ("stof", "hf_eager", "hf_sdpa", "hf_compile")


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="(1,128) and (8,512) only, no sweep")
    ap.add_argument("--families", default=",".join(FAMILIES))
    ap.add_argument("--lengths", default=",".join(map(str, LONG)), help="long sweep lengths")
    ap.add_argument("--no-long", action="store_true", help="no long sweep")
    ap.add_argument("--long-mask", default="window:256,global:64",
                    help="stof spec of the masked long cases ('' for none)")
    ap.add_argument("--long-compile", action="store_true",
                    help="also torch.compile the long cases (tens of seconds per shape)")
    ap.add_argument("--skip", default="", help=f"sides not to time: {', '.join(SIDES)}")
    ap.add_argument("--out")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--iters", type=int, default=30)
    ap.add_argument("--budget", type=float, default=0.3, help="seconds of timed calls per side")
    ap.add_argument("--sets", type=int, default=2)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--tol", type=float, default=2e-2)
    ap.add_argument("--eager-gib", type=float, default=24.0,
                    help="largest eager score memory tried (GiB)")
    ap.add_argument("--time-limit", type=float, default=420.0,
                    help="seconds after which no new case starts")
    ap.add_argument("--no-profile", dest="profile", action="store_false",
                    help="skip the per-case profile of stof's heaviest kernels")
    ap.add_argument("--dry-run", action="store_true",
                    help="tiny models on the CPU, every path once (no timing worth reading)")
    return ap.parse_args(argv)


def spec_visible(torch, spec, L, causal, device):
    """[L, L] bool visibility of a spec of window:W and global:G parts (what the
    long sweep gives stof), intersected with causality for decoders."""
    i = torch.arange(L, device=device)[:, None]
    j = torch.arange(L, device=device)[None, :]
    vis = torch.zeros(L, L, dtype=torch.bool, device=device)
    for part in spec.split(","):
        kind, _, arg = part.partition(":")
        if kind == "window":
            vis |= (i - j).abs() <= int(arg)
        elif kind == "global":
            vis |= (i < int(arg)) | (j < int(arg))
        else:
            raise ValueError(f"--long-mask part {part!r}: only window:W and global:G are "
                             f"given to HF as a dense mask here")
    return vis & (j <= i) if causal else vis


def cases_of(fam, args):
    """(B, L, kind) in run order: kind "padded", "family" or "spec"."""
    pos = FAMILIES[fam]["positions"]
    if args.dry_run:
        pos = min(pos, 256 if fam != "bert" else 128)
    shapes = DRY_SHAPES if args.dry_run else SHAPES
    std = [(B, L, "padded") for B, L in shapes if L <= pos and not (args.quick and L > 512)]
    if args.quick or args.no_long:
        return std, []
    lengths = DRY_LONG if args.dry_run else [int(x) for x in args.lengths.split(",") if x]
    long = [(1, L, "family") for L in lengths if L <= pos]
    if args.long_mask:
        long += [(1, L, "spec") for L in lengths if L <= pos]
    return std, long


def gemm_rate(torch, device, n=8192, reps=20):
    """Dense fp16 GEMM TF/s on this device, now (the floor's rate)."""
    if device.type != "cuda":
        n, reps = 256, 2
    dtype = torch.float16 if device.type == "cuda" else torch.float32
    a = torch.randn(n, n, device=device, dtype=dtype)
    b = torch.randn(n, n, device=device, dtype=dtype)
    for _ in range(3):
        a @ b
    t0 = time.perf_counter()
    if device.type == "cuda":
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda.synchronize()
        s.record()
    for _ in range(reps):
        a @ b
    if device.type == "cuda":
        e.record()
        torch.cuda.synchronize()
        secs = s.elapsed_time(e) * 1e-3
    else:
        secs = time.perf_counter() - t0
    return 2 * n ** 3 * reps / secs / 1e12


FLOOR_N = 8192
_floor_operands = {}


def floor_gemm_side(torch, device, flops):
    """(fn(set_index), FLOPs a call): as many FLOOR_N^3 GEMMs a call as flops rounds up
    to (fp16 on a GPU; 256^3 fp32 on the CPU), operands made once a process."""
    n = FLOOR_N if device.type == "cuda" else 256
    if device.type not in _floor_operands:
        dtype = torch.float16 if device.type == "cuda" else torch.float32
        gen = torch.Generator(device=device).manual_seed(7)
        _floor_operands[device.type] = tuple(
            torch.randn(n, n, device=device, dtype=dtype, generator=gen) / n ** 0.25
            for _ in range(2))
    a, b = _floor_operands[device.type]
    count = max(1, math.ceil(flops / (2 * n ** 3)))

    def call(s):
        for _ in range(count):
            out = a @ b
        return out

    return call, count * 2 * n ** 3


def layer_gemms(fam, cfg):
    """(in, out) of one layer's linears as stof runs them: QKV fused, a GLU's halves fused."""
    hidden = cfg.get("hidden_size", cfg.get("n_embd"))
    heads = cfg.get("num_attention_heads", cfg.get("n_head"))
    head_dim = cfg.get("head_dim") or hidden // heads
    kv = cfg.get("num_key_value_heads") or heads
    inter = cfg.get("intermediate_size") or cfg.get("n_inner") or 4 * hidden
    glu = fam in ("llama", "modernbert")
    return [(hidden, (heads + 2 * kv) * head_dim), (heads * head_dim, hidden),
            (hidden, inter * (2 if glu else 1)), (inter, hidden)]


def linear_ms(torch, x, w, reps=20, rounds=5):
    """F.linear(x, w)'s time on the GPU: reps back to back between two events (no launch
    gaps counted), the median of rounds."""
    for _ in range(3):
        torch.nn.functional.linear(x, w)
    times = []
    for _ in range(rounds):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        for _ in range(reps):
            torch.nn.functional.linear(x, w)
        e.record()
        e.synchronize()
        times.append(s.elapsed_time(e) / reps)
    times.sort()
    return times[len(times) // 2]


def gemm_floor_ms(torch, fam, cfg, tokens, device, cache):
    """Sum over the forward's linears of F.linear's time at [tokens, in] x [in, out]
    (each distinct shape timed once per run: cache)."""
    if device.type != "cuda" or tokens <= 0:
        return None
    layers = cfg.get("num_hidden_layers", cfg.get("n_layer"))
    total = 0.0
    for k, n in layer_gemms(fam, cfg):
        key = (tokens, k, n)
        if key not in cache:
            x = torch.randn(tokens, k, device=device, dtype=torch.float16)
            w = torch.randn(n, k, device=device, dtype=torch.float16)
            cache[key] = linear_ms(torch, x, w)
            del x, w
        total += cache[key] * layers
    return total


def model_config(fam, args):
    return TINY[fam] if args.dry_run else FAMILIES[fam]["config"]


def visible_pairs(fam, cfg, n, layer, vis_count):
    """Pairs a layer attends to in a sequence of n tokens."""
    if vis_count is not None:
        return vis_count
    if fam == "modernbert" and layer % cfg["global_attn_every_n_layers"]:
        w = cfg["local_attention"] // 2
        return sum(min(i, w) + min(n - 1 - i, w) + 1 for i in range(n))
    return n * (n + 1) // 2 if FAMILIES[fam]["causal"] else n * n


def attention_flops(fam, cfg, lengths, vis_count=None):
    """4 * visible pairs * heads * head_dim per layer (QK^T and PV)."""
    layers = cfg.get("num_hidden_layers", cfg.get("n_layer"))
    hidden = cfg.get("hidden_size", cfg.get("n_embd"))
    return sum(4 * visible_pairs(fam, cfg, n, layer, vis_count) * hidden
               for n in lengths for layer in range(layers))


def eager_gib(fam, cfg, B, L):
    """Eager attention's score memory: [B, heads, L, L] in fp16 and its fp32 softmax."""
    heads = cfg.get("num_attention_heads", cfg.get("n_head"))
    return B * heads * L * L * 6 / 2 ** 30


def save_model(tf, torch, fam, cfg, folder, seed, device):
    conf = getattr(tf, CONFIG_CLS[fam])(**cfg)
    torch.manual_seed(seed)
    with torch.device(device):  # initialise where it runs: a 1B model in seconds
        model = getattr(tf, FAMILIES[fam]["cls"])(conf).to(dtype=torch.float16)
    params = sum(p.numel() for n, p in model.named_parameters() if "lm_head" not in n)
    model.save_pretrained(folder)
    del model
    return params


def load_hf(tf, folder, impl, dtype, device):
    model = tf.AutoModel.from_pretrained(folder, dtype=dtype, attn_implementation=impl)
    return model.to(device).eval()


class Family:
    """A family's models, loaded once for all its cases."""

    def __init__(self, tf, torch, stof, fam, args, skip, device):
        self.fam, self.problems = fam, []
        self.gemm_times = {}  # (tokens, in, out) -> ms: gemm_floor_ms's timings
        self.cfg = model_config(fam, args)
        self.folder = tempfile.mkdtemp(prefix=f"stof_{fam}_")
        self.dtype = torch.float16 if device.type == "cuda" else torch.float32
        self.params = save_model(tf, torch, fam, self.cfg, self.folder, args.seed, device)
        self.stof = self.attempt("stof load",
                                 lambda: ce.load_stof(stof, self.folder, device.type, self.dtype))
        self.sdpa = self.attempt("hf_sdpa load",
                                 lambda: load_hf(tf, self.folder, "sdpa", self.dtype, device))
        self.eager = None
        if "hf_eager" not in skip:
            self.eager = self.attempt("hf_eager load",
                                      lambda: load_hf(tf, self.folder, "eager", self.dtype, device))
        self.compiled = None
        if self.sdpa is not None and "hf_compile" not in skip and not args.dry_run:
            self.compiled = self.attempt("hf_compile",
                                         lambda: torch.compile(self.sdpa, dynamic=False))

    def attempt(self, label, fn):
        try:
            return fn()
        except Exception as e:
            self.problems.append(ce.brief_error(label, e))
            return None

    def close(self, torch):
        if self.stof is not None and hasattr(self.stof, "close"):
            self.stof.close()
        self.stof = self.sdpa = self.eager = self.compiled = None
        if torch.cuda.is_available():
            torch.cuda.empty_cache()


def hf_side(model, sets, masks=None):
    """fn(set_index) -> last_hidden_state, with a 4-D mask per set when given."""
    def call(s):
        am = masks[s] if masks is not None else sets[s].attention_mask
        return model(input_ids=sets[s].ids, attention_mask=am).last_hidden_state
    return call


def top_kernels(torch, fn, n_sets, device, calls=3, top=5):
    """The heaviest kernels of `calls` forwards of fn under torch.profiler, which
    sees every kernel of the process (stof's own launches and the kernels of its
    CUDA graph replays alike): ({name, ms per forward, share of kernel time}, total
    kernel ms per forward). On the CPU (--dry-run) the host ops stand in."""
    from torch.profiler import ProfilerActivity, profile
    cuda = device.type == "cuda"
    fn(0)  # a captured graph is replayed, not captured, inside the profile
    if cuda:
        torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA if cuda else ProfilerActivity.CPU]) as prof:
        for c in range(calls):
            fn(c % n_sets)
        if cuda:
            torch.cuda.synchronize()
    times = {}
    for e in prof.key_averages():
        us = (getattr(e, "self_device_time_total", None) or getattr(e, "self_cuda_time_total", 0)
              if cuda else e.self_cpu_time_total)
        if us and us > 0:
            times[e.key] = times.get(e.key, 0.0) + us
    total = sum(times.values())
    ranked = sorted(times.items(), key=lambda kv: -kv[1])[:top]
    return ([{"name": k[:96], "ms": round(v / 1e3 / calls, 4), "share": round(v / total, 3)}
             for k, v in ranked], round(total / 1e3 / calls, 4) if total else None)


def run_case(torch, timer, F, B, L, kind, args, skip, rate, device):
    fam, cfg = F.fam, F.cfg
    spec = args.long_mask if kind == "spec" else None
    mask_name = {"padded": "padded", "spec": spec}.get(
        kind, "causal" if FAMILIES[fam]["causal"] else
        ("local/global" if fam == "modernbert" else "full"))
    vocab = min(cfg.get("vocab_size", FAMILIES[fam]["vocab"]), 30000)
    sets = [ce.make_inputs(torch, B, L, args.seed + 7919 * B + L + 104729 * s, device,
                           padded=kind == "padded", vocab=vocab)
            for s in range(args.sets)]
    # The timings are medians over the rotated sets, so the floors are of their mean.
    tokens = round(sum(sum(s.lengths) for s in sets) / len(sets))
    row = {"family": fam, "B": B, "L": L, "mask": mask_name, "tokens": tokens,
           "stof_ms": None, "hf_eager_ms": None, "hf_sdpa_ms": None, "hf_compile_ms": None,
           "floor_ms": None, "max_rel_err": None, "problems": list(F.problems), "skipped": {}}
    masks, vis_count = None, None
    if spec:
        try:
            vis = spec_visible(torch, spec, L, FAMILIES[fam]["causal"], device)
            vis_count = int(vis.sum().item())
            masks = [ce.additive_4d(torch, vis[None], F.dtype)] * len(sets)
            del vis
        except Exception as e:
            row["problems"].append(ce.brief_error("HF dense mask", e))
    attn = sum(attention_flops(fam, cfg, s.lengths, vis_count) for s in sets) / len(sets)
    floor_flops = 2 * F.params * tokens + attn
    row["floor_burst_ms"] = round(floor_flops / (rate * 1e12) * 1e3, 4)
    gemms = gemm_floor_ms(torch, fam, cfg, tokens, device, F.gemm_times)
    if gemms is not None:
        row["gemm_floor_ms"] = round(gemms + attn / (rate * 1e12) * 1e3, 4)
    sides = {}
    if F.stof is not None:
        if spec:
            sides["stof"] = lambda s: F.stof(sets[s].ids, sets[s].attention_mask, mask=spec)
        else:
            sides["stof"] = lambda s: F.stof(sets[s].ids, sets[s].attention_mask)
    floor_fn, floor_gemm_flops = floor_gemm_side(torch, device, floor_flops)
    sides["floor_gemm"] = floor_fn
    hf_ok = not spec or masks is not None
    deferred = None  # the compiled side, timed in the last phase (later())
    for name, model in (("hf_sdpa", F.sdpa), ("hf_eager", F.eager), ("hf_compile", F.compiled)):
        if name in skip:
            row["skipped"][name] = "--skip"
        elif model is None:
            row["skipped"][name] = "not loaded" if name != "hf_compile" or not args.dry_run \
                else "--dry-run"
        elif not hf_ok:
            row["skipped"][name] = "no dense mask"
        elif name == "hf_eager" and eager_gib(fam, cfg, B, L) > args.eager_gib:
            row["skipped"][name] = (f"its scores and softmax take {eager_gib(fam, cfg, B, L):.0f} "
                                    f"GiB > --eager-gib {args.eager_gib:g}")
        elif name == "hf_compile" and kind != "padded" and not args.long_compile:
            row["skipped"][name] = "long case without --long-compile (a compile per shape)"
        elif name == "hf_compile":
            deferred = hf_side(model, sets, masks)
        else:
            sides[name] = hf_side(model, sets, masks)
    # ModernBERT under a spec: HF's one 4-D mask on every layer is not stof's computation.
    checked = not (spec and fam == "modernbert")
    if not checked:
        row["problems"].append("not checked: HF applies the 4-D mask to every layer; stof "
                               "intersects the spec with each layer's own window")
    reference = sides.get("hf_sdpa") if checked else None
    ce.run_case(torch, timer, row, sides, reference, sets, args.tol,
                check=("stof", "hf_eager", "hf_compile"), skip=skip, must_check=checked)
    row["checked"] = checked
    row["floor_ms"] = row["floor_burst_ms"]
    if row.get("floor_gemm_ms"):
        here = floor_gemm_flops / (row["floor_gemm_ms"] * 1e-3) / 1e12
        row["gemm_tflops"] = round(here, 1)
        row["floor_side_ms"] = round(floor_flops / (here * 1e12) * 1e3, 4)
        row["floor_ms"] = min(row["floor_burst_ms"], row["floor_side_ms"])
    else:
        row["problems"].append("floor_gemm not timed: floor_ms is floor_burst_ms")
    later = None
    if deferred is not None:
        def later():
            ce.run_case(torch, timer, row, {"hf_compile": deferred}, sides.get("hf_sdpa"), sets,
                        args.tol, check=("hf_compile",), skip=skip, must_check=False)
    profile = None
    if args.profile and row.get("stof_ms") and "stof" in sides:
        def profile():
            row["stof_top_kernels"], row["stof_kernel_ms"] = top_kernels(
                torch, sides["stof"], len(sets), device)
    if not row["skipped"]:
        del row["skipped"]
    return row, later, profile


def summary(rows, tol):
    def passed(r):
        return r.get("stof_ms") and (
            (r.get("max_rel_err") is not None and r["max_rel_err"] <= tol) or
            r.get("checked") is False)

    ok = [r for r in rows if passed(r)]
    fams = sorted({r["family"] for r in rows})
    out = {"families": fams, "geomean_vs_compile": {}, "min_vs_compile": {},
           "largest_batch_vs_floor": {}, "min_long_masked_vs_hf": None}
    for f in fams:
        rs = [r for r in ok if r["family"] == f and r.get("hf_compile_ms")]
        ratios = [r["hf_compile_ms"] / r["stof_ms"] for r in rs]
        out["geomean_vs_compile"][f] = round(geomean(ratios), 3) if ratios else None
        out["min_vs_compile"][f] = round(min(ratios), 3) if ratios else None
        padded = [r for r in ok if r["family"] == f and r["mask"] == "padded"]
        if padded:
            big = max(padded, key=lambda r: r["tokens"])
            out["largest_batch_vs_floor"][f] = round(big["stof_ms"] / big["floor_ms"], 3)
            if big.get("floor_side_ms"):
                out.setdefault("largest_batch_vs_side_floor", {})[f] = round(
                    big["stof_ms"] / big["floor_side_ms"], 3)
            if big.get("gemm_floor_ms"):
                out.setdefault("largest_batch_vs_gemm_floor", {})[f] = round(
                    big["stof_ms"] / big["gemm_floor_ms"], 3)
    long_masked = []
    for r in ok:
        hf = [r[k] for k in ("hf_sdpa_ms", "hf_compile_ms") if r.get(k)]
        if r["mask"] not in ("padded", "causal", "local/global", "full") and hf:
            long_masked.append(min(hf) / r["stof_ms"])
    out["min_long_masked_vs_hf"] = round(min(long_masked), 3) if long_masked else None
    return out


def write(args, rows, rate, device_name, left):
    result = {"device": device_name,
              "date": datetime.date.today().isoformat(), "commit": git_commit(),
              "command": "python3 bench/compare_models.py " + " ".join(
                  shlex.quote(a) for a in sys.argv[1:]),
              "gemm_tflops": round(rate, 1), "cases": rows,
              "not_run": left, "summary": summary(rows, args.tol)}
    with open(args.out, "w") as f:
        json.dump(result, f, indent=1)


def main(argv=None):
    args = parse_args(argv)
    t_start = time.time()
    import torch
    import transformers as tf
    import stof
    configure_compile(torch)
    skip = {s for s in args.skip.split(",") if s}
    cuda = torch.cuda.is_available() and not args.dry_run
    if not cuda and not args.dry_run:
        sys.exit("compare_models.py needs a CUDA device (or --dry-run)")
    device = torch.device("cuda" if cuda else "cpu")
    device_name = torch.cuda.get_device_name(0) if cuda else "cpu (dry run)"
    if not args.out:
        args.out = os.path.join(HERE, "results", f"models-{datetime.date.today().isoformat()}-"
                                f"{gpu_slug(device_name)}.json")
    if args.dry_run:
        args.warmup, args.iters, args.budget, args.sets = 1, 2, 0.01, 1
        if args.long_mask == parse_args([]).long_mask:
            args.long_mask = DRY_MASK
    timer = ce.Timer(torch, device, args.warmup, args.iters, args.budget)
    rate = gemm_rate(torch, device)
    print(f"dense GEMM: {rate:.1f} TF/s", flush=True)
    fams = [f for f in args.families.split(",") if f]
    for f in fams:
        if f not in FAMILIES:
            sys.exit(f"--families: unknown family {f!r} (known: {', '.join(FAMILIES)})")
    plan = {f: cases_of(f, args) for f in fams}
    # Phase 1: every family's standard shapes (stof, eager, SDPA); phase 2: the
    # long sweeps; phase 3: torch.compile of the standard shapes, whose compiles
    # cost the most wall time, so that --time-limit cuts those first; phase 4:
    # the profiles of stof's kernels.
    work = [(f, c) for f in fams for c in plan[f][0]] + [(f, c) for f in fams for c in plan[f][1]]
    rows, left, loaded, deferred, profiles = [], [], {}, [], []

    def out_of_time():
        return time.time() - t_start > args.time_limit

    def report(row):
        print(f"{row['family']:10s} ({row['B']},{row['L']}) {row['mask']:20s} "
              f"stof {fmt(row.get('stof_ms'))} eager {fmt(row.get('hf_eager_ms'))} "
              f"sdpa {fmt(row.get('hf_sdpa_ms'))} compile {fmt(row.get('hf_compile_ms'))} "
              f"floor {fmt(row.get('floor_ms'))} err {row.get('max_rel_err')} "
              f"{'; '.join(row.get('problems', []))} [{time.time() - t_start:.0f} s]", flush=True)
        write(args, rows, rate, device_name, left)

    for fam, (B, L, kind) in work:
        if out_of_time():
            left.append({"family": fam, "B": B, "L": L, "mask": kind,
                         "reason": f"--time-limit {args.time_limit:g} s reached"})
            continue
        if fam not in loaded:
            try:  # every family stays loaded until phase 3 is done
                loaded[fam] = Family(tf, torch, stof, fam, args, skip, device)
            except Exception as e:  # one family failing must not lose the others
                loaded[fam] = None
                rows.append({"family": fam, "B": B, "L": L, "mask": kind,
                             "problems": [ce.brief_error(f"{fam} set-up", e)]})
        if loaded[fam] is None:
            continue
        try:
            row, later, profile = run_case(torch, timer, loaded[fam], B, L, kind, args, skip,
                                           rate, device)
        except Exception as e:
            row, later, profile = {"family": fam, "B": B, "L": L, "mask": kind,
                                   "problems": [ce.brief_error("case", e)]}, None, None
        rows.append(row)
        if later is not None:
            deferred.append((row, later))
        if profile is not None:
            profiles.append((row, profile))
        report(row)
    for row, later in deferred:
        if out_of_time():
            row.setdefault("skipped", {})["hf_compile"] = (
                f"--time-limit {args.time_limit:g} s reached before its compile")
            continue
        try:
            later()
        except Exception as e:
            row["problems"].append(ce.brief_error("hf_compile", e))
        report(row)
    # Phase 4, after every timing: the profiler may leave launches slower behind it.
    for row, profile in profiles:
        if out_of_time():
            row["problems"].append("stof profile: --time-limit reached")
            continue
        try:
            profile()
        except Exception as e:
            row["problems"].append(ce.brief_error("stof profile", e))
    write(args, rows, rate, device_name, left)
    for F in loaded.values():
        if F is not None:
            F.close(torch)
    write(args, rows, rate, device_name, left)
    print(json.dumps(summary(rows, args.tol), indent=1))
    if left:
        print(f"{len(left)} cases not run: --time-limit reached", flush=True)


if __name__ == "__main__":
    main()
