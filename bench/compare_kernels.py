#!/usr/bin/env python3
"""stof's attention kernels forced one by one against the selector's choice.

Runs every GPU kernel (row-wise, block-wise mma.sync, block-wise wgmma where the
device has it) on the cases that separate the row-wise kernel from the
block-wise ones: sequences of a handful of queries, and the sparsest long masks
(a single visible key per row, one 64 x 64 tile per row, a small window, a few
global tokens). Prints one line per case: the selector's pick and each kernel's
median device time (CUDA events, each call queued behind a device sleep long
enough to cover the host's enqueue, common.EventTimer.cover_cycles; a case's
kernels timed round-robin in one loop, so that clock drift between them falls
on all alike), so that a pick that
is not the fastest shows. Every kernel's output is checked in the same run
against an fp32 reference of the first batch entry (the mask decoded from the
compiled tiles) before any is timed; a kernel off by more than --tol fails the
run.

    STOF_LIBRARY=build-gpu/libstof.so PYTHONPATH=python python3 bench/compare_kernels.py
"""
import argparse
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import EventTimer  # noqa: E402

KERNELS = ("rowwise", "blockwise", "blockwise_sm90")


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--heads", type=int, default=12)
    ap.add_argument("--iters", type=int, default=25)
    ap.add_argument("--tol", type=float, default=1e-2)
    ap.add_argument("--quick", action="store_true", help="a few cases only")
    return ap.parse_args(argv)


def diag_blocks(n_tiles):
    rows = ("".join("1" if c == r else "0" for c in range(n_tiles)) for r in range(n_tiles))
    return "blocks:64:" + "/".join(rows)


def cases(quick):
    """(head dim, batch, length, mask name, spec, lengths?)"""
    out = []
    for d in (32, 64):
        for b in ((32,) if quick else (1, 32, 256)):
            for length in ((1, 8) if quick else (1, 8, 16, 32, 48, 64)):
                out.append((d, b, length, "full", "full", False))
                if not quick:
                    out.append((d, b, length, "full+len", "full", True))
    for d in ((64,) if quick else (32, 64, 128)):
        for length in ((4096,) if quick else (1024, 4096, 16384)):
            b = max(1, 16384 // length)
            for name, spec in (("window:0", "window:0"), ("window:8", "window:8"),
                               ("global:8", "global:8"), ("blk-diag", diag_blocks(length // 64))):
                out.append((d, b, length, name, spec, False))
    return out


def reference(torch, q, k, v, plane):
    """fp32 attention of batch entry 0 under a decoded [L, L] 0/1 plane; rows that
    see nothing give zeros, as stof's kernels do."""
    qf, kf, vf = (x[0].float() for x in (q, k, v))
    s = qf @ kf.transpose(-1, -2) / math.sqrt(q.shape[-1])
    vis = torch.as_tensor(plane, device=q.device).bool()
    s = s.masked_fill(~vis, float("-inf"))
    p = torch.softmax(s, dim=-1).nan_to_num(0.0)
    return p @ vf


def main(argv=None):
    args = parse_args(argv)
    import torch
    import stof

    if not torch.cuda.is_available():
        print("compare_kernels: skipped: no CUDA device")
        return 0
    dev = torch.device("cuda")
    timer = EventTimer(torch, dev)
    gen = torch.Generator(device=dev).manual_seed(7)
    print(f"# {torch.cuda.get_device_name(dev)}, fp16, H={args.heads}, median of {args.iters} "
          f"runs, us; * marks the fastest")
    worst = 0.0
    for d, b, length, name, spec, with_len in cases(args.quick):
        q, k, v = (torch.randn(b, args.heads, length, d, generator=gen, device=dev,
                               dtype=torch.float16) for _ in range(3))
        lens = [max(1, length - (i * 7) % max(1, length // 2)) for i in range(b)] if with_len \
            else None
        cm = stof.Mask.parse(spec).compile(b, args.heads, length, length, device="cuda",
                                           head_dim=d, lengths=lens)
        pick = stof.attention_select(q, mask=cm)
        ref = reference(torch, q, k, v, cm.decode(0, 0)) if length <= 4096 else None
        runs = {}
        for kern in KERNELS:
            try:
                out = stof.attention(q, k, v, mask=cm, kernel=kern)
            except stof.StofError:
                continue  # no such kernel for this head dim or device
            if ref is not None:
                err = ((out[0].float() - ref).abs().max() / ref.abs().max().clamp_min(1e-6)).item()
                worst = max(worst, err)
                if err > args.tol:
                    print(f"FAIL {name} L={length} D={d} {kern}: max_rel_err {err:.2e}")
                    return 1
            runs[kern] = lambda s, kern=kern: stof.attention(q, k, v, mask=cm, kernel=kern)
        problems = []
        times = {kern: ms * 1e3 for kern, ms in timer.round_robin_ms(
            runs, 1, problems, 3, args.iters).items()}
        best = min(times, key=times.get, default=None)
        cells = " ".join(f"{k}={t:.1f}{'*' if k == best else ''}" for k, t in times.items())
        print(f"D={d:3d} B={b:3d} L={length:5d} {name:9s} pick={pick.kernel:14s} {cells}",
              flush=True)
        for p in problems:
            print(f"    {p}", flush=True)
    print(f"largest max_rel_err against the fp32 reference: {worst:.2e}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
