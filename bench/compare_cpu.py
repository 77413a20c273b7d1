#!/usr/bin/env python3
"""compare_cpu.py — stof's CPU backend against PyTorch on the CPU, side by side in
one process with the same thread count (stof: STOF_CPU_THREADS, set before the
library loads; torch: torch.set_num_threads), each output checked against the
other in the same run.

Cases:
  short      1000 short sentences (6-16 words, seeded), all-MiniLM-L6-v2 from --model:
             stof.Model.encode(batch_size=32) against sentence-transformers'
             SentenceTransformer.encode(batch_size=32); both normalise (the folder has
             a Normalize module). Check: smallest cosine between the two embeddings.
  long       8 texts of about 445 tokens each, the same model with max_seq_length 512
             on both sides (the folder's 256 would cut them).
  attention  stof.attention alone at (B, H, L, D) = --attn-shape (default 1,16,4096,64),
             fp32, masks of bench/masks.py: dense, causal, window (|i-j| <= 128),
             longformer (window 128 + 32 global tokens), against
             torch.nn.functional.scaled_dot_product_attention: no mask for dense,
             is_causal=True for causal, the boolean [1, 1, L, L] mask for the others
             (what a PyTorch user has for them without compiling FlexAttention).
             stof's mask is compiled on the warm-up call and reused, as torch's mask
             tensor is built once outside the timing. Check: max |stof - torch|.

Timing: wall clock (time.perf_counter) of one whole call (a whole encode of every
text, or one attention call), one warm-up call, then --repeats calls alternating
between the two sides; the figure is the median, and the JSON keeps every run so
the spread shows. vs_torch = torch median / stof median (> 1: stof is faster);
vs_torch_cpu_time is the same ratio of the process's CPU-time medians, which
other processes on a shared machine disturb far less than wall time. A
case whose check fails, or where a side did not run, is left out of the summary.

The machine may be shared: the JSON records `uptime`'s load averages before and
after the run. Run it when the load is low, and more than once.

Output: a table and JSON at --out with {"device", "date", "commit", "command",
"threads", "cases": [...], "summary": {"min_vs_torch", "sparse_attention_min_vs_torch"}}.
"""

import argparse
import datetime
import json
import os
import platform
import random
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
import masks as bench_masks  # noqa: E402

SPARSE_MASKS = ("window", "longformer")
WORDS = ("the a man woman child dog cat plays reads writes runs walks quickly slowly red blue "
         "green house garden city river mountain music guitar piano book letter story today "
         "yesterday morning evening under over near beside with without because although "
         "small large bright dark happy quiet loud old new train station market school "
         "teacher student doctor river boat bridge road car bicycle window door table chair "
         "coffee bread apple orange summer winter rain snow wind sun moon star light").split()


def cpu_name():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "cpu"


def load_average():
    try:
        return [float(x) for x in os.getloadavg()]
    except OSError:
        return None


def sentences(n, lo, hi, seed):
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        words = [rng.choice(WORDS) for _ in range(rng.randint(lo, hi))]
        out.append(" ".join(words).capitalize() + ".")
    return out


def timed_pair(run_stof, run_torch, repeats):
    """Warm-up each, then `repeats` runs alternating; lists of wall seconds and of
    the process's CPU seconds (all its threads) per run."""
    run_stof()
    run_torch()
    ts, tt, cs, ct = [], [], [], []
    for _ in range(repeats):
        for run, wall, cpu in ((run_stof, ts, cs), (run_torch, tt, ct)):
            c0, t0 = time.process_time(), time.perf_counter()
            run()
            wall.append(time.perf_counter() - t0)
            cpu.append(time.process_time() - c0)
    return ts, tt, cs, ct


def finish_case(case, ts, tt, cs, ct):
    """Medians of wall time decide vs_torch. The CPU-time medians show how a
    run on a shared machine was disturbed: CPU time barely moves when other
    processes take the cores, wall time does."""
    case["stof_s"] = statistics.median(ts)
    case["torch_s"] = statistics.median(tt)
    case["stof_runs"] = [round(x, 5) for x in ts]
    case["torch_runs"] = [round(x, 5) for x in tt]
    case["vs_torch"] = case["torch_s"] / case["stof_s"]
    case["stof_cpu_s"] = statistics.median(cs)
    case["torch_cpu_s"] = statistics.median(ct)
    case["vs_torch_cpu_time"] = case["torch_cpu_s"] / case["stof_cpu_s"]
    return case


def model_case(name, texts, max_length, args, stof, st_model, problems_of):
    import numpy as np
    case = {"name": name, "kind": "model", "texts": len(texts), "batch_size": 32,
            "max_length": max_length, "problems": []}
    model = stof.Model.from_pretrained(args.model, device="cpu")
    tokens = [len(st_model.tokenizer(t, truncation=True, max_length=max_length)["input_ids"])
              for t in texts]
    case["mean_tokens"] = sum(tokens) / len(tokens)
    st_model.max_seq_length = max_length

    def run_stof():
        return model.encode(texts, batch_size=32, max_length=max_length)

    def run_torch():
        return st_model.encode(texts, batch_size=32, convert_to_numpy=True)

    a, b = np.asarray(run_stof(), dtype=np.float64), np.asarray(run_torch(), dtype=np.float64)
    cos = (a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))
    case["check"] = {"min_cosine": float(cos.min()), "max_abs_diff": float(np.abs(a - b).max())}
    case["check_ok"] = bool(cos.min() >= 1.0 - 1e-5)
    if not case["check_ok"]:
        case["problems"].append(f"embeddings differ: min cosine {cos.min():.7f}")
    return finish_case(case, *timed_pair(run_stof, run_torch, args.repeats))


def attention_case(mask_name, shape, args, stof, torch):
    B, H, L, D = shape
    bm = bench_masks.make_mask(mask_name, B, L)
    case = {"name": f"attention {mask_name}", "kind": "attention", "mask": mask_name,
            "spec": bm.spec, "shape": [B, H, L, D], "dtype": "float32", "problems": []}
    g = torch.Generator().manual_seed(7)
    q, k, v = (torch.randn(B, H, L, D, generator=g) for _ in range(3))
    out = torch.empty_like(q)
    F = torch.nn.functional
    if mask_name == "dense":
        def run_torch():
            return F.scaled_dot_product_attention(q, k, v)
    elif mask_name == "causal":
        def run_torch():
            return F.scaled_dot_product_attention(q, k, v, is_causal=True)
    else:
        dense = bm.dense_torch("cpu")

        def run_torch():
            return F.scaled_dot_product_attention(q, k, v, attn_mask=dense)

    def run_stof():
        return stof.attention(q, k, v, mask=bm.spec, out=out)

    got, want = run_stof(), run_torch()
    err = float((got - want).abs().max())
    case["check"] = {"max_abs_diff": err}
    case["check_ok"] = err <= 1e-4
    if not case["check_ok"]:
        case["problems"].append(f"outputs differ: max abs diff {err:.3g}")
    return finish_case(case, *timed_pair(run_stof, run_torch, args.repeats))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--model", default=os.path.join(common.REPO, "models", "all-MiniLM-L6-v2"))
    ap.add_argument("--attn-shape", default="1,16,4096,64")
    ap.add_argument("--cases", default="short,long,attention")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    os.environ["STOF_CPU_THREADS"] = str(args.threads)
    import torch
    torch.set_num_threads(args.threads)
    import stof
    wanted = set(args.cases.split(","))
    load_before = load_average()
    cases = []
    if wanted & {"short", "long"}:
        from sentence_transformers import SentenceTransformer
        st_model = SentenceTransformer(args.model, device="cpu")
        if "short" in wanted:
            cases.append(model_case("short texts", sentences(1000, 6, 16, 1), 256, args, stof,
                                    st_model, None))
        if "long" in wanted:
            cases.append(model_case("long texts", sentences(8, 330, 350, 2), 512, args, stof,
                                    st_model, None))
    if "attention" in wanted:
        shape = tuple(int(x) for x in args.attn_shape.split(","))
        for name in ("dense", "causal") + SPARSE_MASKS:
            cases.append(attention_case(name, shape, args, stof, torch))
    ok = [c for c in cases if c["check_ok"]]
    sparse = [c["vs_torch"] for c in ok if c.get("mask") in SPARSE_MASKS]
    summary = {"min_vs_torch": min((c["vs_torch"] for c in ok), default=None),
               "sparse_attention_min_vs_torch": min(sparse, default=None),
               "cases_failing_check": [c["name"] for c in cases if not c["check_ok"]]}
    result = {"device": f"{cpu_name()} ({os.cpu_count()} cores)",
              "date": datetime.date.today().isoformat(), "commit": common.git_commit(),
              "command": " ".join([os.path.basename(sys.argv[0])] + sys.argv[1:]),
              "threads": args.threads, "torch": torch.__version__,
              "load_average_before": load_before, "load_average_after": load_average(),
              "cases": cases, "summary": summary}
    print(f"{'case':24} {'stof s':>9} {'torch s':>9} {'vs torch':>9} {'(cpu time)':>10}  check")
    for c in cases:
        print(f"{c['name']:24} {c['stof_s']:9.4f} {c['torch_s']:9.4f} {c['vs_torch']:9.2f} "
              f"{c['vs_torch_cpu_time']:10.2f}  {'ok' if c['check_ok'] else 'FAIL'} {c['check']}")
    print("summary:", json.dumps(summary))
    if args.out:
        with open(args.out, "w") as f:
            json.dump(result, f, indent=1)
            f.write("\n")


if __name__ == "__main__":
    main()
