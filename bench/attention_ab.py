#!/usr/bin/env python3
"""attention_ab.py — stof attention of several builds side by side on one GPU: each libstof
runs in its own process over the same cases and seeds, with cuDNN's SDPA timed in each
process as the reference, so that two versions of a kernel compare on the same warm device.

    python3 bench/attention_ab.py [--dense-sweep] OLD/libstof.so NEW/libstof.so

Cases: suite B's (attention_suite_b.py: its shapes, inputs, biases and cap) but packed
documents, each T5 case also without its bias, and two shorter rows (head dim 128 at 2048
keys, causal MHA and dense); with --dense-sweep, dense head dim 128 over 512 to 8192 keys
instead (the rows where a kernel's key-tile size shows). Each timed call is queued behind
a device sleep, so that the host's launch time stays out, with L2 flushed before it; the
median of 40 calls. Dense and causal outputs are checked against cuDNN's (err: the largest
absolute difference over the largest absolute value). The library listed first runs on a
colder GPU: alternate the order between runs (2-5% between positions on an H100).
"""

import json
import os
import statistics
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import attention_suite_b as suite_b  # noqa: E402

SEED = 1
# suite B's (name, B, H, kv heads, L, D, mask, bias), packed documents left out, and more rows
CASES = [c for c in suite_b.CASES if c[7] != "packed"] + [
    ("causal mha", 8, 32, 32, 2048, 128, "causal", None),
    ("dense", 8, 16, 16, 2048, 128, "full", None),
]


def label(spec):
    name, B, H, Hkv, L, D = spec[:6]
    return f"{name} ({B},{H},{L},{D}) kv {Hkv}"


DENSE_SWEEP = [("dense", B, H, H, L, 128, "full", None) for B, H, L in
               [(8, 16, 512), (8, 16, 640), (8, 16, 1024), (8, 16, 2048), (4, 16, 4096),
                (1, 32, 8192)]]


def runs(dense_sweep):
    """The rows: (row name, case, with its bias or cap); a T5 case also runs without its bias."""
    cases = DENSE_SWEEP if dense_sweep else CASES
    return [(label(spec), spec, True) for spec in cases] + \
        [(label(spec) + " no bias", spec, False) for spec in cases if spec[7] == "t5"]


def measure(dense_sweep):
    """Every row with the libstof of $STOF_LIBRARY: {name: {stof, cudnn, err, kernel}}."""
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

    def one(c, kw):
        r = {"stof": median_ms(lambda: stof.attention(c.q, c.k, c.v, mask=c.mask, **kw))}
        if not kw and c.mask in ("full", "causal"):
            k, v = (t.repeat_interleave(c.H // c.Hkv, 1) for t in (c.k, c.v))
            causal = c.mask == "causal"
            o = stof.attention(c.q, c.k, c.v, mask=c.mask)
            with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
                ref = F.scaled_dot_product_attention(c.q, k, v, is_causal=causal)
                r["cudnn"] = median_ms(
                    lambda: F.scaled_dot_product_attention(c.q, k, v, is_causal=causal))
            r["err"] = ((o.float() - ref.float()).abs().max() / ref.float().abs().max()).item()
        r["kernel"] = stof.attention_select(c.q, c.k, c.v, mask=c.mask, **kw).kernel
        return r

    out = {}
    for name, spec, with_bias in runs(dense_sweep):
        c = suite_b.Case(torch, dev, spec, SEED)
        try:
            out[name] = one(c, c.stof_kwargs(stof) if with_bias else {})
        except Exception as e:  # a build that lacks a feature: its row says why
            out[name] = {"error": str(e)[:200]}
    return out


def main():
    args = sys.argv[1:]
    dense_sweep = "--dense-sweep" in args
    args = [a for a in args if a != "--dense-sweep"]
    if args == ["--child"]:
        print("RESULT " + json.dumps(measure(dense_sweep)))
        return
    libs, res = args, {}
    for lib in libs:
        flags = ["--child"] + (["--dense-sweep"] if dense_sweep else [])
        p = subprocess.run([sys.executable, os.path.abspath(__file__)] + flags,
                           env=dict(os.environ, STOF_LIBRARY=lib), capture_output=True,
                           text=True, timeout=300)
        line = [x for x in p.stdout.splitlines() if x.startswith("RESULT ")]
        res[lib] = json.loads(line[0][7:]) if line else {}
        if not line:
            print(lib, "failed:", p.stderr[-2000:])
    for name, _, _ in runs(dense_sweep):
        row = [f"{name:38s}"]
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
