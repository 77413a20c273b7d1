#!/usr/bin/env python3
"""Tuned against untuned encoder forwards: `stof tune` on the BENCH.md shapes.

For BERT-base and BERT-large at the dense shapes of BENCH.md (padded batches,
lengths uniform in [L/2, L]) and a BERT-base body with the BigBird- and
Longformer-style masks at (1, 4096) and (4, 4096) (full-length sequences), a
random-weight BertModel
is written with save_pretrained (as bench/compare_encoder.py does) and
`stof tune` runs on it. stof tune times the default plan and the winner
interleaved in one process on one GPU (CUDA events, medians) after checking the
winner's output against the default plan's, and reports its own wall time;
this script collects those figures into bench/results/tune-<date>-<gpu>.json:

    {"device", "date", "commit", "command",
     "cases": [{"model", "B", "L", "mask", "default_ms", "tuned_ms", "tune_s"}],
     "summary": {"min_gain", "geomean_gain", "max_tune_s"}}

Usage (needs torch + transformers for the model folders, and a built stof):
    python3 bench/tune_bench.py [--stof build-gpu/stof] [--budget 32] [--cases bert-base]
"""
import argparse
import datetime
import json
import math
import os
import re
import shlex
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, HERE)

import compare_encoder as ce  # noqa: E402
import masks as bench_masks  # noqa: E402

TARGETS = {"min_gain": (">=", 1.0), "max_tune_s": ("<=", 60.0)}


def cases(selected):
    out = [(m, B, L, "padded") for m, shapes in ce.DENSE_SHAPES.items() for B, L in shapes]
    out += [("bert-base", B, L, m) for m in ce.SPARSE_MASKS for B, L in ce.SPARSE_SHAPES]
    if not selected:
        return out
    keys = selected.split(",")
    return [c for c in out if any(k in (c[0], c[3], f"{c[0]}:{c[1]}x{c[2]}",
                                        f"{c[3]}:{c[1]}x{c[2]}") for k in keys)]


def mask_spec(mask, B, L):
    if mask == "padded":
        return None
    return bench_masks.make_mask(mask, B, L).spec


LINE = {
    "default_ms": re.compile(r"forward\s+default ([0-9.]+) ms, tuned ([0-9.]+) ms"),
    "tune_s": re.compile(r"search\s+(\d+) candidates measured, (\d+) rejected .*?, ([0-9.]+) s"),
}


def run_tune(stof, folder, B, L, spec, budget, cache, seed):
    cmd = [stof, "tune", "--model", folder, "--batch", str(B), "--seq", str(L),
           "--budget", str(budget), "--cache", cache, "--seed", str(seed)]
    if spec:  # sparse cases run full-length sequences, as compare_encoder.py does
        cmd += ["--mask", spec, "--lengths", ",".join([str(L)] * B)]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    if p.returncode != 0:
        raise RuntimeError(f"{shlex.join(cmd[:8])} ... exited {p.returncode}: "
                           f"{(p.stderr or p.stdout).strip()[-400:]}")
    m = LINE["default_ms"].search(p.stdout)
    s = LINE["tune_s"].search(p.stdout)
    if not m or not s:
        raise RuntimeError(f"unexpected stof tune output:\n{p.stdout}")
    return {"default_ms": float(m.group(1)), "tuned_ms": float(m.group(2)),
            "tune_s": float(s.group(3)), "measured": int(s.group(1)),
            "rejected": int(s.group(2)), "table": p.stdout}


def summarize(rows):
    gains = [r["default_ms"] / r["tuned_ms"] for r in rows if r.get("tuned_ms")]
    if not gains:
        return {"min_gain": None, "geomean_gain": None, "max_tune_s": None}
    return {"min_gain": round(min(gains), 4),
            "geomean_gain": round(math.exp(sum(math.log(g) for g in gains) / len(gains)), 4),
            "max_tune_s": round(max(r["tune_s"] for r in rows), 2)}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--stof", default=os.path.join(REPO, "build-gpu", "stof"))
    ap.add_argument("--budget", type=int, default=32)
    ap.add_argument("--cases", default="", help="comma list: bert-base, bert-large, bigbird, "
                    "longformer, padded, or a case name such as bert-base:16x512")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--out", help="JSON path (default bench/results/tune-<date>-<gpu>.json)")
    args = ap.parse_args(argv)
    import torch
    import transformers as tf
    device = torch.cuda.get_device_name(0)
    date = datetime.date.today().isoformat()
    rows = []
    todo = cases(args.cases)
    with tempfile.TemporaryDirectory(prefix="stof-tune-") as tmp:
        cache = os.path.join(tmp, "tune.json")
        folders = {}
        for model, B, L, mask in todo:
            positions = max(512, L)
            key = (model, positions)
            if key not in folders:
                folders[key] = os.path.join(tmp, f"{model}-{positions}")
                ce.save_random_bert(tf, torch, model, positions, args.seed, folders[key],
                                    torch.float16)
            spec = mask_spec(mask, B, L)
            row = {"model": model, "B": B, "L": L, "mask": mask}
            try:
                r = run_tune(args.stof, folders[key], B, L, spec, args.budget, cache, args.seed)
                row.update({k: r[k] for k in ("default_ms", "tuned_ms", "tune_s")})
                print(f"{model:10s} B={B:<2d} L={L:<5d} {mask:10s} default {r['default_ms']:.4f} "
                      f"tuned {r['tuned_ms']:.4f} ms ({r['default_ms'] / r['tuned_ms']:.3f}x), "
                      f"{r['measured']} measured, {r['rejected']} rejected, {r['tune_s']:.1f} s",
                      flush=True)
                print("    " + "\n    ".join(line for line in r["table"].splitlines()
                                              if line.strip() and not line.startswith("stof")),
                      flush=True)
            except (RuntimeError, subprocess.TimeoutExpired) as e:
                row.update({"default_ms": None, "tuned_ms": None, "tune_s": None,
                            "error": str(e)[-500:]})
                print(f"{model} B={B} L={L} {mask}: FAILED {e}", flush=True)
            rows.append(row)
    summary = summarize([r for r in rows if r.get("tuned_ms")])
    print("summary", json.dumps(summary))
    for k, (op, v) in TARGETS.items():
        got = summary.get(k)
        ok = got is not None and (got >= v if op == ">=" else got <= v)
        print(f"  {k}: {got} (target {op} {v}) {'met' if ok else 'MISSED'}")
    command = "python3 " + shlex.join(["bench/tune_bench.py", *(argv or sys.argv[1:])])
    out = args.out or os.path.join(REPO, "bench", "results",
                                   f"tune-{date}-{ce.gpu_slug(device)}.json")
    result = {"device": device, "date": date, "commit": ce.git_commit(), "command": command,
              "cases": rows, "summary": summary}
    with open(out, "w") as f:
        json.dump(result, f, indent=1)
        f.write("\n")
    print("wrote", out)
    return 0 if all(r.get("tuned_ms") for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
