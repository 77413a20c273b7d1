#!/usr/bin/env python3
"""compare_models.py — stof's engine against Hugging Face transformers for the
model families of BENCH.md suite D, side by side in one process on one GPU,
with stof's last hidden state checked against HF's in the same run.

Families (random weights, seeded, fp16, written by save_pretrained and loaded
by every side from that folder): GPT-2 124M, a LLaMA-3.2-1B-shaped model
(GQA 32:8, llama3 RoPE scaling) and ModernBERT-base (local and global layers).
Cases: (1,128), (8,512), (16,2048) where the family's positions allow, padded
batches with lengths uniform in [L/2, L] (compare_encoder.py's inputs), and a
long sweep (4096, 8192, and 16384 where positions allow) at B = 1, full
length, with the family's own masks (causal; ModernBERT's local/global).
  stof_ms        stof.Model.from_pretrained(dir)(input_ids, attention_mask)
  hf_eager_ms    AutoModel, attn_implementation="eager" (skipped past 4096 tokens:
                 its [L, L] score matrices)
  hf_sdpa_ms     AutoModel, attn_implementation="sdpa" (the correctness reference)
  hf_compile_ms  the SDPA model under torch.compile (dynamic=False)
  floor_ms       2 * params * real tokens (+ the attention's FLOPs over the visible
                 pairs) at the dense fp16 GEMM rate measured in this run (8192^3)
max_rel_err = ||stof - HF SDPA|| / ||HF SDPA|| over the real tokens of set 0; a
case fails above --tol (2e-2: several layers of fp16 on random weights). A side
that fails leaves its field null and a line in the case's "problems".

Timing, input sets and the JSON's handling follow compare_encoder.py (its
helpers are imported). The JSON has issue 32's keys: device, date, commit,
command, cases [{family, B, L, mask, tokens, stof_ms, hf_eager_ms, hf_sdpa_ms,
hf_compile_ms, floor_ms, max_rel_err, problems}], summary {families,
geomean_vs_compile, min_vs_compile, largest_batch_vs_floor,
min_long_masked_vs_hf}.

    python3 bench/compare_models.py [--quick] [--families gpt2,llama,modernbert]
                                    [--skip hf_eager,hf_compile] [--out FILE.json]
"""

import argparse
import datetime
import json
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
    "gpt2": dict(cls="GPT2LMHeadModel", positions=1024, vocab=50257,
                 config=dict(n_embd=768, n_layer=12, n_head=12, n_positions=1024,
                             vocab_size=50257, activation_function="gelu_new")),
    "llama": dict(cls="LlamaForCausalLM", positions=131072, vocab=128256,
                  config=dict(hidden_size=2048, num_hidden_layers=16, num_attention_heads=32,
                              num_key_value_heads=8, intermediate_size=8192, vocab_size=128256,
                              max_position_embeddings=131072, rms_norm_eps=1e-5,
                              rope_theta=500000.0, tie_word_embeddings=True,
                              rope_scaling=dict(rope_type="llama3", factor=32.0,
                                                low_freq_factor=1.0, high_freq_factor=4.0,
                                                original_max_position_embeddings=8192))),
    "modernbert": dict(cls="ModernBertModel", positions=8192, vocab=50368,
                       config=dict(hidden_size=768, num_hidden_layers=22, num_attention_heads=12,
                                   intermediate_size=1152, vocab_size=50368,
                                   max_position_embeddings=8192, global_attn_every_n_layers=3,
                                   local_attention=128, pad_token_id=50283)),
}
CONFIG_CLS = {"gpt2": "GPT2Config", "llama": "LlamaConfig", "modernbert": "ModernBertConfig"}
SHAPES = [(1, 128), (8, 512), (16, 2048)]
LONG = [4096, 8192, 16384]
SIDES = ("stof", "hf_eager", "hf_sdpa", "hf_compile")


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="(1,128) and (8,512) only, no sweep")
    ap.add_argument("--families", default=",".join(FAMILIES))
    ap.add_argument("--skip", default="", help=f"sides not to time: {', '.join(SIDES)}")
    ap.add_argument("--out")
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--iters", type=int, default=50)
    ap.add_argument("--budget", type=float, default=0.4)
    ap.add_argument("--sets", type=int, default=2)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--tol", type=float, default=2e-2)
    ap.add_argument("--long-max", type=int, default=16384, help="longest sweep length")
    return ap.parse_args(argv)


def cases_of(fam, quick, long_max):
    pos = FAMILIES[fam]["positions"]
    out = [(B, L, "padded") for B, L in SHAPES if L <= pos and not (quick and L > 512)]
    if not quick:
        out += [(1, L, "family") for L in LONG if L <= pos and L <= long_max]
    return out


def gemm_rate(torch, n=8192, reps=20):
    """Dense fp16 GEMM TF/s on this device, now (the floor's rate)."""
    a = torch.randn(n, n, device="cuda", dtype=torch.float16)
    b = torch.randn(n, n, device="cuda", dtype=torch.float16)
    for _ in range(3):
        a @ b
    torch.cuda.synchronize()
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    s.record()
    for _ in range(reps):
        a @ b
    e.record()
    torch.cuda.synchronize()
    return 2 * n ** 3 * reps / (s.elapsed_time(e) * 1e-3) / 1e12


def attention_flops(cfg, fam, lengths):
    """4 * visible pairs * heads * head_dim per layer (QK^T and PV)."""
    c = FAMILIES[fam]["config"]
    layers = c.get("num_hidden_layers", c.get("n_layer"))
    hidden = c.get("hidden_size", c.get("n_embd"))
    total = 0
    for n in lengths:
        for layer in range(layers):
            if fam == "modernbert" and layer % c["global_attn_every_n_layers"]:
                w = c["local_attention"] // 2
                pairs = sum(min(i, w) + min(n - 1 - i, w) + 1 for i in range(n))
            elif fam == "modernbert":
                pairs = n * n
            else:
                pairs = n * (n + 1) // 2
            total += 4 * pairs * hidden
    return total


def save_model(tf, torch, fam, folder, seed):
    spec = FAMILIES[fam]
    cfg = getattr(tf, CONFIG_CLS[fam])(**spec["config"])
    torch.manual_seed(seed)
    model = getattr(tf, spec["cls"])(cfg).to(dtype=torch.float16)
    params = sum(p.numel() for n, p in model.named_parameters() if "lm_head" not in n)
    model.save_pretrained(folder)
    del model
    return params


def load_hf(tf, folder, impl, dtype):
    model = tf.AutoModel.from_pretrained(folder, dtype=dtype, attn_implementation=impl)
    return model.to("cuda").eval()


def run_family(tf, torch, stof, timer, fam, args, skip, rate, rows):
    folder = tempfile.mkdtemp(prefix=f"stof_{fam}_")
    params = save_model(tf, torch, fam, folder, args.seed)
    dtype = torch.float16
    problems = []

    def attempt(label, fn):
        try:
            return fn()
        except Exception as e:
            problems.append(ce.brief_error(label, e))
            return None

    st = attempt("stof load", lambda: ce.load_stof(stof, folder, "cuda", dtype))
    sdpa = attempt("hf_sdpa load", lambda: load_hf(tf, folder, "sdpa", dtype))
    eager = None if "hf_eager" in skip else attempt("hf_eager load",
                                                   lambda: load_hf(tf, folder, "eager", dtype))
    compiled = None
    if sdpa is not None and "hf_compile" not in skip:
        compiled = attempt("hf_compile", lambda: torch.compile(sdpa, dynamic=False))
    vocab = FAMILIES[fam]["vocab"]
    for B, L, kind in cases_of(fam, args.quick, args.long_max):
        sets = [ce.make_inputs(torch, B, L, args.seed + 7919 * B + L + 104729 * s, "cuda",
                               padded=kind == "padded", vocab=min(vocab, 30000))
                for s in range(args.sets)]
        row = {"family": fam, "B": B, "L": L, "mask": "padded" if kind == "padded" else
               ("causal" if fam != "modernbert" else "local/global"),
               "tokens": sum(sets[0].lengths), "stof_ms": None, "hf_eager_ms": None,
               "hf_sdpa_ms": None, "hf_compile_ms": None, "floor_ms": None,
               "max_rel_err": None, "problems": list(problems)}
        flops = 2 * params * row["tokens"] + attention_flops(None, fam, sets[0].lengths)
        row["floor_ms"] = round(flops / (rate * 1e12) * 1e3, 4)
        sides = {}
        if st is not None:
            sides["stof"] = lambda s: st(sets[s].ids, sets[s].attention_mask)
        for name, model in (("hf_sdpa", sdpa), ("hf_eager", eager), ("hf_compile", compiled)):
            if model is None or (name == "hf_eager" and B * L > 4096):
                continue
            sides[name] = (lambda s, m=model: m(input_ids=sets[s].ids,
                                                attention_mask=sets[s].attention_mask)
                           .last_hidden_state)
        reference = sides.get("hf_sdpa")
        ce.run_case(torch, timer, row, sides, reference, sets, args.tol,
                    check=("stof", "hf_eager", "hf_compile"), skip=skip)
        rows.append(row)
        print(f"{fam:10s} ({B},{L}) {row['mask']:12s} stof {fmt(row['stof_ms'])} "
              f"sdpa {fmt(row['hf_sdpa_ms'])} compile {fmt(row['hf_compile_ms'])} "
              f"floor {fmt(row['floor_ms'])} err {row['max_rel_err']} "
              f"{'; '.join(row['problems'][len(problems):])}", flush=True)
        write(args, rows, rate)
    for m in (st, sdpa, eager):
        if m is not None and hasattr(m, "close"):
            m.close()
    del st, sdpa, eager, compiled
    torch.cuda.empty_cache()


def summary(rows, tol):
    ok = [r for r in rows if r.get("stof_ms") and r.get("max_rel_err") is not None and
          r["max_rel_err"] <= tol]
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
    return out


def write(args, rows, rate):
    import torch
    result = {"device": torch.cuda.get_device_name(0),
              "date": datetime.date.today().isoformat(), "commit": git_commit(),
              "command": "python3 bench/compare_models.py " + " ".join(
                  shlex.quote(a) for a in sys.argv[1:]),
              "gemm_tflops": round(rate, 1), "cases": rows, "summary": summary(rows, args.tol)}
    with open(args.out, "w") as f:
        json.dump(result, f, indent=1)


def main(argv=None):
    args = parse_args(argv)
    import torch
    import transformers as tf
    import stof
    configure_compile(torch)
    skip = {s for s in args.skip.split(",") if s}
    if not args.out:
        args.out = os.path.join(HERE, "results", f"models-{datetime.date.today().isoformat()}-"
                                f"{gpu_slug(torch.cuda.get_device_name(0))}.json")
    timer = ce.Timer(torch, torch.device("cuda"), args.warmup, args.iters, args.budget)
    rate = gemm_rate(torch)
    print(f"dense fp16 GEMM: {rate:.0f} TF/s", flush=True)
    rows = []
    for fam in [f for f in args.families.split(",") if f]:
        t0 = time.time()
        try:
            run_family(tf, torch, stof, timer, fam, args, skip, rate, rows)
        except Exception as e:  # one family failing must not lose the others
            rows.append({"family": fam, "problems": [ce.brief_error(fam, e)]})
        print(f"{fam}: {time.time() - t0:.0f} s", flush=True)
    write(args, rows, rate)
    print(json.dumps(summary(rows, args.tol), indent=1))


if __name__ == "__main__":
    main()
