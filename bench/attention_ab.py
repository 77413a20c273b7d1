#!/usr/bin/env python3
"""attention_ab.py — stof attention of several builds side by side on one GPU: each libstof
runs in its own process over the same cases and seeds, with cuDNN's SDPA timed in each
process as the reference, so that two versions of a kernel compare on the same warm device.

    python3 bench/attention_ab.py OLD/libstof.so NEW/libstof.so

Cases: suite B's shapes (bf16; head dim 128 dense, causal, GQA, window:4096:0, ALiBi, soft cap
50; T5 at (8, 12, 512, 64) with and without the bias). Each timed call is queued behind a
device sleep, so that the host's launch time stays out, with L2 flushed before it; the median
of 40 calls. Dense and causal outputs are checked against cuDNN's (err: the largest absolute
difference over the largest absolute value). The library listed first runs on a colder GPU:
alternate the order between runs (2-5% between positions on an H100).
"""

import json
import os
import statistics
import subprocess
import sys

# name, B, H, kv heads, L, D, mask ("full": none), bias
CASES = [
    ("t5-full", 8, 12, 12, 512, 64, "full", "t5"),
    ("t5-full-nob", 8, 12, 12, 512, 64, "full", None),
    ("t5-causal", 8, 12, 12, 512, 64, "causal", "t5"),
    ("t5-causal-nob", 8, 12, 12, 512, 64, "causal", None),
    ("dense4k", 4, 16, 16, 4096, 128, "full", None),
    ("causal4k", 4, 16, 16, 4096, 128, "causal", None),
    ("dense8k", 1, 32, 32, 8192, 128, "full", None),
    ("causal8k", 1, 32, 32, 8192, 128, "causal", None),
    ("gqa-causal8k", 1, 32, 8, 8192, 128, "causal", None),
    ("gqa-causal2k", 8, 32, 8, 2048, 128, "causal", None),
    ("causal2k-mha", 8, 32, 32, 2048, 128, "causal", None),
    ("dense2k", 8, 16, 16, 2048, 128, "full", None),
    ("window16k", 1, 32, 8, 16384, 128, "window:4096:0", None),
    ("alibi-causal8k", 1, 32, 32, 8192, 128, "causal", "alibi"),
    ("softcap4k", 4, 16, 16, 4096, 128, "full", "softcap"),
]


def measure():
    """Every case with the libstof of $STOF_LIBRARY: {name: {stof, cudnn, err, kernel}}."""
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    import stof
    dev = "cuda"
    flush = torch.empty(256 << 20, dtype=torch.uint8, device=dev)

    def median_ms(fn, n=40, warmup=5):
        for _ in range(warmup):
            fn()
        times = []
        for _ in range(n):
            flush.zero_()
            torch.cuda._sleep(200000)
            a = torch.cuda.Event(enable_timing=True)
            b = torch.cuda.Event(enable_timing=True)
            torch.cuda._sleep(100000)
            a.record()
            fn()
            b.record()
            torch.cuda.synchronize()
            times.append(a.elapsed_time(b))
        return statistics.median(times)

    out = {}
    for name, B, H, Hkv, L, D, mask, bias in CASES:
        g = torch.Generator(device=dev).manual_seed(1)
        q = torch.randn(B, H, L, D, device=dev, dtype=torch.bfloat16, generator=g)
        k, v = (torch.randn(B, Hkv, L, D, device=dev, dtype=torch.bfloat16, generator=g)
                for _ in range(2))
        kw = {}
        if bias == "t5":
            table = torch.randn(32, H, device=dev, generator=g)
            kw["bias"] = stof.T5Bias(table, mask == "full", 128)
        if bias == "alibi":
            kw["alibi"] = torch.tensor([2 ** (-8 * (i + 1) / H) for i in range(H)], device=dev)
        if bias == "softcap":
            kw["softcap"] = 50.0
        m = None if mask == "full" else mask
        try:
            o = stof.attention(q, k, v, mask=m, **kw)
            r = {"stof": median_ms(lambda: stof.attention(q, k, v, mask=m, **kw))}
            if bias is None and mask in ("full", "causal"):
                kk, vv = (t.repeat_interleave(H // Hkv, 1) for t in (k, v))
                causal = mask == "causal"
                with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
                    ref = F.scaled_dot_product_attention(q, kk, vv, is_causal=causal)
                    r["cudnn"] = median_ms(
                        lambda: F.scaled_dot_product_attention(q, kk, vv, is_causal=causal))
                r["err"] = ((o.float() - ref.float()).abs().max()
                            / ref.float().abs().max()).item()
            r["kernel"] = stof.attention_select(q, k, v, mask=m, **kw).kernel
        except Exception as e:  # a build that lacks a feature: its row says why
            r = {"error": str(e)[:200]}
        out[name] = r
    return out


def main():
    if sys.argv[1:] == ["--child"]:
        print("RESULT " + json.dumps(measure()))
        return
    libs, res = sys.argv[1:], {}
    for lib in libs:
        p = subprocess.run([sys.executable, os.path.abspath(__file__), "--child"],
                           env=dict(os.environ, STOF_LIBRARY=lib), capture_output=True,
                           text=True, timeout=300)
        line = [x for x in p.stdout.splitlines() if x.startswith("RESULT ")]
        res[lib] = json.loads(line[0][7:]) if line else {}
        if not line:
            print(lib, "failed:", p.stderr[-2000:])
    for name, *_ in CASES:
        row = [f"{name:16s}"]
        for lib in libs:
            r = res[lib].get(name, {})
            if "stof" not in r:
                row.append(str(r)[:120])
                continue
            cell = f"{r['stof']:.4f}"
            if "cudnn" in r:
                cell += (f" (cudnn {r['cudnn']:.4f} x{r['cudnn'] / r['stof']:.3f}"
                         f" err {r['err']:.1e})")
            row.append(cell + f" [{r.get('kernel')}]")
        print(" | ".join(row))


if __name__ == "__main__":
    main()
