"""attention_suite_b.py — suite B of BENCH.md (decoders and T5), run by
compare_attention.py --suite b: stof against FlexAttention and every SDPA
backend (flash, cuDNN, efficient) in one process on one GPU, bf16 throughout.

Cases: dense and causal at (4,16,4096,128) and (1,32,8192,128); GQA 32/8
causal at (1,32,8192,128) and (8,32,2048,128); Mistral's sliding window 4096
(causal) at 16384 with GQA 32/8; packed documents, causal, 8 documents in
16384 tokens, H 16; a T5 bias at (8,12,512,64), bidirectional and causal;
ALiBi causal at (1,32,8192,128); softcap 50 at (4,16,4096,128).

Every side's output is checked against an fp32 reference on a sample of query
rows (all heads) before anything is timed; a side that fails is not timed. The
T5 cases also time stof and the SDPA backend without the bias, each checked
against the reference without it, for the bias's overhead on either side.

Timing: as suite A's, every side that passed its check is timed in one
round-robin loop (common.EventTimer.round_robin_ms), each call behind the same
device sleep, so that the GPU's clock and power drift, which set blocks
timed one after another up to 12% apart, falls on all sides alike. Timed calls
rotate over input sets that together exceed 3x the L2 (Case.sets), as suite A's
do, so that no side finds its q, k and v in L2; a T5 bias tensor given to SDPA
is one tensor, read every call, as a model's layers would. SDPA takes
what it can compute: dense and causal (is_causal), GQA (enable_gqa), and the
T5 bias materialised as an additive float mask; FlexAttention takes mask_mod
and score_mod (a T5 score_mod gathers from the [buckets, H] table).

Summary keys (compare_attention.py merges them with suite A's):
  b_geomean_vs_flex                 geomean of flex_ms / stof_ms over suite B
  b_min_masked_vs_best_peer         smallest best peer / stof over masked or biased cases
  b_min_dense_causal_vs_best_sdpa   smallest best SDPA backend / stof over dense and causal
  b_gqa_vs_mha                      stof's GQA TFLOP/s over its MHA TFLOP/s, causal (1,32,8192,128)
  b_bias_overhead                   stof's T5-bias time over the same mask without bias (largest)
  b_sdpa_bias_overhead              the same for the SDPA backend given the bias (sdpa_bias_ms
                                    over sdpa_nobias_ms: that backend on the mask alone, causal
                                    as is_causal), what the bias costs a user there (largest)
  b_bias_overhead_vs_sdpa           stof's overhead over that backend's, case by case (largest)
"""

import math

# (name, B, H, Hkv, L, D, mask, bias)
CASES = [
    ("dense", 4, 16, 16, 4096, 128, "full", None),
    ("causal", 4, 16, 16, 4096, 128, "causal", None),
    ("dense", 1, 32, 32, 8192, 128, "full", None),
    ("causal", 1, 32, 32, 8192, 128, "causal", None),
    ("gqa causal", 1, 32, 8, 8192, 128, "causal", None),
    ("gqa causal", 8, 32, 8, 2048, 128, "causal", None),
    ("sliding window", 1, 32, 8, 16384, 128, "window:4096:0", None),
    ("packed docs", 8, 16, 16, 2048, 128, "causal", "packed"),
    ("t5 bidirectional", 8, 12, 12, 512, 64, "full", "t5"),
    ("t5 causal", 8, 12, 12, 512, 64, "causal", "t5"),
    ("alibi", 1, 32, 32, 8192, 128, "causal", "alibi"),
    ("softcap", 4, 16, 16, 4096, 128, "full", "softcap"),
]
T5_BUCKETS, T5_MAX_DISTANCE = 32, 128
SOFTCAP = 50.0
REF_ROWS = 96  # query rows per (batch entry, head) checked against the fp32 reference


def t5_bucket(torch, rel, bidirectional, num_buckets=T5_BUCKETS, max_distance=T5_MAX_DISTANCE):
    """transformers' T5 relative-position bucket of rel = key - query."""
    buckets = torch.zeros_like(rel)
    if bidirectional:
        num_buckets //= 2
        buckets += (rel > 0).long() * num_buckets
        rel = rel.abs()
    else:
        rel = -torch.clamp(rel, max=0)
    exact = num_buckets // 2
    large = exact + (torch.log(rel.float().clamp_min(1) / exact) / math.log(max_distance / exact)
                     * (num_buckets - exact)).long()
    large = torch.clamp(large, max=num_buckets - 1)
    return buckets + torch.where(rel < exact, rel, large)


class Case:
    """One suite-B case: inputs, the visibility rule, the score modifier, and
    the fp32 reference on sampled rows."""

    def __init__(self, torch, dev, spec, seed, l2_bytes=0):
        self.name, self.B, self.H, self.Hkv, self.L, self.D, self.mask, self.bias = spec
        self.torch, self.dev = torch, dev
        g = torch.Generator(device=dev).manual_seed(seed)
        B, H, Hkv, L, D = self.B, self.H, self.Hkv, self.L, self.D
        bf = torch.bfloat16
        # Enough (q, k, v) sets that a pass over them exceeds 3x the L2 (l2_bytes 0: one),
        # rotated by the timed calls so that every side reads its inputs from memory;
        # q, k, v are the first set, which the checks use.
        per_set = (H + 2 * Hkv) * B * L * D * 2
        n = max(1, min(64, math.ceil(3 * l2_bytes / per_set), (2 << 30) // per_set))
        self.sets = [tuple(torch.randn(B, h, L, D, generator=g, device=dev).to(bf)
                           for h in (H, Hkv, Hkv)) for _ in range(n)]
        self.q, self.k, self.v = self.sets[0]
        self.causal = self.mask == "causal" or self.mask.startswith("window")
        self.window = int(self.mask.split(":")[1]) if self.mask.startswith("window") else None
        self.table = self.slopes = None
        if self.bias == "t5":
            self.table = torch.randn(T5_BUCKETS, H, generator=g, device=dev) * 2
        if self.bias == "alibi":
            self.slopes = torch.tensor([2.0 ** (-8.0 * (h + 1) / H) for h in range(H)],
                                       device=dev)
        # Packed documents: B documents of L tokens each, as one [T, H, D] batch.
        self.packed = self.bias == "packed"

    def stof_kwargs(self, stof):
        """stof.attention's keyword arguments for the case's bias or cap."""
        if self.bias == "t5":
            return {"bias": stof.T5Bias(self.table, self.mask == "full", T5_MAX_DISTANCE)}
        if self.bias == "alibi":
            return {"alibi": self.slopes}
        if self.bias == "softcap":
            return {"softcap": SOFTCAP}
        return {}

    # ---- semantics shared by the reference and Flex
    def visible(self, i, j):
        """Key j visible from query i (both tensors; same lengths, so no offset)."""
        if self.mask == "full":
            return torch_ones_like(i, j)
        ok = j <= i
        if self.window is not None:
            ok = ok & (j >= i - self.window)
        return ok

    def score_bias(self, h, i, j):
        """The additive bias (fp32) at head h (tensor) for positions i, j."""
        torch = self.torch
        if self.bias == "t5":
            return self.table[t5_bucket(torch, j - i, self.mask == "full"), h]
        if self.bias == "alibi":
            return -self.slopes[h] * (j - i).abs().float()
        return None

    def flops(self):
        """Matmul FLOPs of the visible pairs (4 D per pair: QK and PV)."""
        L = self.L
        pairs = L * L
        if self.causal:
            pairs = L * (L + 1) / 2
            if self.window is not None:
                w = self.window
                pairs = sum(min(i + 1, w + 1) for i in range(0, L, 64)) * 64
        return 4.0 * self.D * pairs * self.B * self.H

    def reference_rows(self, out, modified=True):
        """Largest relative error of out [B, H, L, D] (padded view) against the
        fp32 reference on REF_ROWS sampled rows of every (b, h); modified False:
        the reference without the case's bias or cap (the mask alone)."""
        torch = self.torch
        L, D = self.L, self.D
        rows = torch.unique(torch.cat([torch.tensor([0, 1, 63, 64, L // 2, L - 2, L - 1]),
                                       torch.randint(0, L, (REF_ROWS,))]).clamp(0, L - 1))
        rows = rows.to(self.dev)
        group = self.H // self.Hkv
        worst = 0.0
        j = torch.arange(L, device=self.dev)
        for b in range(self.B):
            q = self.q[b, :, rows].float()                                   # [H, R, D]
            k = self.k[b].float().repeat_interleave(group, 0)               # [H, L, D]
            v = self.v[b].float().repeat_interleave(group, 0)
            s = q @ k.transpose(-1, -2) / math.sqrt(D)                      # [H, R, L]
            if modified and self.bias == "softcap":
                s = SOFTCAP * torch.tanh(s / SOFTCAP)
            i = rows[:, None]
            if modified and self.bias in ("t5", "alibi"):
                hh = torch.arange(self.H, device=self.dev)[:, None, None]
                s = s + self.score_bias(hh, i[None], j[None, None])
            vis = self.visible(i, j[None, :]) if self.mask != "full" else None
            if vis is not None:
                s = s.masked_fill(~vis[None], float("-inf"))
            ref = torch.softmax(s, -1) @ v
            got = out[b, :, rows].float()
            if not torch.isfinite(got).all():
                return float("inf")
            worst = max(worst, ((got - ref).norm() / ref.norm()).item())
        return worst


def torch_ones_like(i, j):
    return (i >= 0) & (j >= 0)


def run_b_case(torch, stof, flex, create_block_mask, timer, dev, spec, args, problems,
               flex_options=({},), l2_bytes=0):
    """One suite-B row (None fields: not measured). Each side is run(s) on input set s;
    the sides that pass their checks are timed together at the end."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    F = torch.nn.functional
    c = Case(torch, dev, spec, args.seed, l2_bytes)
    n_sets = len(c.sets)
    B, H, Hkv, L, D = c.B, c.H, c.Hkv, c.L, c.D
    row = {"suite": "B", "case": c.name, "B": B, "H": H, "L": L, "D": D, "dtype": "bf16",
           "kv_heads": Hkv, "mask": c.mask if not c.packed else "causal, packed documents",
           "bias": c.bias if c.bias in ("t5", "alibi", "softcap") else None,
           "stof_ms": None, "stof_nobias_ms": None, "flex_ms": None, "sdpa_flash_ms": None,
           "sdpa_cudnn_ms": None, "sdpa_efficient_ms": None, "sdpa_bias_ms": None,
           "sdpa_nobias_ms": None,
           "max_rel_err": None, "flex_max_rel_err": None, "kernel": None, "stof_tflops": None}
    tol = 2e-2
    timed = {}  # row key -> run(s) of every side that passed its check

    def side(label, fn):
        try:
            return fn()
        except Exception as e:  # one side failing must not lose the others
            problems.append(f"{label}: {type(e).__name__}: {str(e).splitlines()[0][:200]}")
            timer.sync()
            return None

    def checked_time(label, run, key, err_key=None, modified=True):
        """run joins the timing as timed[key] if its output matches the reference
        (modified False: the reference without the bias)."""
        out = side(label, lambda: run(0))
        if out is None:
            return False
        timer.sync()
        err = side(label + " reference", lambda: c.reference_rows(out, modified))
        if err_key:
            row[err_key] = None if err is None else float(f"{err:.3e}")
        if err is None or not err <= tol:
            problems.append(f"{label}: max_rel_err {err} above {tol}: not timed")
            return False
        timed[key] = run
        return True

    # stof
    kwargs = c.stof_kwargs(stof)
    if c.packed:
        # Documents of L tokens each, one after another: [T, H, D] views of the padded inputs.
        cu = torch.arange(0, (B + 1) * L, L, dtype=torch.int32, device=dev)
        packed = [tuple(x.transpose(1, 2).reshape(B * L, -1, D) for x in qkv) for qkv in c.sets]

        def stof_run(s):
            o = stof.attention(*packed[s], mask=c.mask, cu_seqlens_q=cu, max_seqlen_q=L)
            return o.reshape(B, L, H, D).transpose(1, 2)
    else:
        def stof_run(s):
            return stof.attention(*c.sets[s], mask=c.mask, **kwargs)
    checked_time("stof", stof_run, "stof_ms", "max_rel_err")
    ch = side("select", lambda: stof.attention_select(c.q, c.k, c.v, mask=c.mask, **kwargs))
    if ch is not None:
        row["kernel"] = f"{ch.kernel} {ch.block_m}x{ch.block_n} w{ch.warps}"
    if c.bias == "t5":
        checked_time("stof without the bias", lambda s: stof.attention(*c.sets[s], mask=c.mask),
                     "stof_nobias_ms", modified=False)

    # FlexAttention: mask_mod for the mask, score_mod for the bias or cap
    def flex_side():
        block_mask = None
        if c.mask != "full":
            def mask_mod(b, h, qi, ki):
                ok = ki <= qi
                if c.window is not None:
                    ok = ok & (ki >= qi - c.window)
                if c.packed:
                    ok = ok & (qi // L == ki // L)
                return ok
            n = B * L if c.packed else L
            block_mask = create_block_mask(mask_mod, None, None, n, n, device=dev)
        score_mod = None
        if c.bias == "t5":
            table, bidir = c.table, c.mask == "full"

            def score_mod(s, b, h, qi, ki):
                return s + table[t5_bucket(torch, ki - qi, bidir), h]
        elif c.bias == "alibi":
            slopes = c.slopes

            def score_mod(s, b, h, qi, ki):
                return s - slopes[h] * (ki - qi).abs()
        elif c.bias == "softcap":
            def score_mod(s, b, h, qi, ki):
                return SOFTCAP * torch.tanh(s / SOFTCAP)
        gqa = Hkv != H
        if c.packed:
            flat = [tuple(x.transpose(1, 2).reshape(1, B * L, -1, D).transpose(1, 2)
                          for x in qkv) for qkv in c.sets]
        # Inductor's defaults first, then smaller tiles (shared memory), as suite A does.
        for opts in flex_options:
            kw = {"kernel_options": dict(opts)} if opts else {}
            if c.packed:
                def run(s, kw=kw):
                    o = flex(*flat[s], block_mask=block_mask, enable_gqa=gqa, **kw)
                    return o.transpose(1, 2).reshape(B, L, H, D).transpose(1, 2)
            else:
                def run(s, kw=kw):
                    return flex(*c.sets[s], score_mod=score_mod, block_mask=block_mask,
                                enable_gqa=gqa, **kw)
            if side(f"flex {opts or 'default options'}", lambda: run(0)) is None:
                continue
            row["flex_options"] = dict(opts)
            checked_time("flex", run, "flex_ms", "flex_max_rel_err")
            return
    if "flex" not in args.skip:
        side("flex", flex_side)

    # SDPA backends: dense and causal (is_causal), GQA through enable_gqa
    if c.mask in ("full", "causal") and not c.packed and c.bias is None:
        for key, backend in (("sdpa_flash_ms", SDPBackend.FLASH_ATTENTION),
                             ("sdpa_cudnn_ms", SDPBackend.CUDNN_ATTENTION),
                             ("sdpa_efficient_ms", SDPBackend.EFFICIENT_ATTENTION)):
            def run(s, backend=backend):
                with sdpa_kernel(backend):
                    return F.scaled_dot_product_attention(*c.sets[s], is_causal=c.causal,
                                                          enable_gqa=Hkv != H)
            checked_time(f"sdpa {backend.name.lower()}", run, key)
    # The T5 bias materialised as an additive float mask: cuDNN, else efficient.
    bias_backend = None
    if c.bias == "t5":
        i = torch.arange(L, device=dev)
        bias = c.table[t5_bucket(torch, i[None] - i[:, None], c.mask == "full")]  # [L, L, H]
        bias = bias.permute(2, 0, 1)[None].to(torch.bfloat16).contiguous()
        if c.mask == "causal":
            bias = bias.masked_fill(i[None] > i[:, None], float("-inf"))
        for backend in (SDPBackend.CUDNN_ATTENTION, SDPBackend.EFFICIENT_ATTENTION):
            def run(s, backend=backend):
                with sdpa_kernel(backend):
                    return F.scaled_dot_product_attention(*c.sets[s], attn_mask=bias)
            if checked_time(f"sdpa {backend.name.lower()} + bias", run, "sdpa_bias_ms"):
                bias_backend = backend
                break
    if bias_backend is not None:  # that backend on the mask alone: what the bias costs there
        def run(s):
            with sdpa_kernel(bias_backend):
                return F.scaled_dot_product_attention(*c.sets[s], is_causal=c.causal)
        checked_time(f"sdpa {bias_backend.name.lower()} without the bias", run, "sdpa_nobias_ms",
                     modified=False)

    row.update(side("timing", lambda: timer.device_ms(timed, n_sets, problems)) or {})
    timed = None
    if row["stof_ms"]:
        row["stof_tflops"] = round(c.flops() / (row["stof_ms"] * 1e-3) / 1e12, 1)
    if row["sdpa_bias_ms"] is not None:
        row["sdpa_bias_backend"] = bias_backend.name.lower()
    for k, x in list(row.items()):
        if k.endswith("_ms") and x is not None:
            row[k] = round(x, 5)
    if timer.cuda:
        torch.cuda.empty_cache()
    failed = row["stof_ms"] is None
    return row, failed


def summarize_b(rows):
    """The suite-B summary keys (module docstring)."""
    def ratio(a, b):
        return a / b if a and b else None

    def geomean(xs):
        xs = [x for x in xs if x]
        return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else None

    r = lambda x: None if x is None else round(x, 4)
    vs_flex = [ratio(c["flex_ms"], c["stof_ms"]) for c in rows]
    masked, dense_causal = [], []
    for c in rows:
        sdpa = [c[k] for k in ("sdpa_flash_ms", "sdpa_cudnn_ms", "sdpa_efficient_ms") if c[k]]
        plain = c["bias"] is None and c["mask"] in ("full", "causal")
        if plain:
            if sdpa and c["stof_ms"]:
                dense_causal.append(min(sdpa) / c["stof_ms"])
        else:
            peers = [x for x in (c["flex_ms"], c["sdpa_bias_ms"]) if x]
            if peers and c["stof_ms"]:
                masked.append(min(peers) / c["stof_ms"])
    gqa = next((c for c in rows if c["case"] == "gqa causal" and c["L"] == 8192), None)
    mha = next((c for c in rows if c["case"] == "causal" and c["L"] == 8192), None)
    t5 = [c for c in rows if c["bias"] == "t5"]
    overhead = [x for x in (ratio(c["stof_ms"], c["stof_nobias_ms"]) for c in t5) if x]
    sdpa_overhead = [ratio(c["sdpa_bias_ms"], c["sdpa_nobias_ms"]) for c in t5]
    vs_sdpa = [ratio(ratio(c["stof_ms"], c["stof_nobias_ms"]), x)
               for c, x in zip(t5, sdpa_overhead)]
    return {"b_geomean_vs_flex": r(geomean(vs_flex)),
            "b_min_masked_vs_best_peer": r(min(masked, default=None)),
            "b_min_dense_causal_vs_best_sdpa": r(min(dense_causal, default=None)),
            "b_gqa_vs_mha": r(ratio(mha and mha["stof_ms"], gqa and gqa["stof_ms"])),
            "b_bias_overhead": r(max(overhead, default=None)),
            "b_sdpa_bias_overhead": r(max((x for x in sdpa_overhead if x), default=None)),
            "b_bias_overhead_vs_sdpa": r(max((x for x in vs_sdpa if x), default=None))}


def print_b(rows, summary, file=None):
    import sys
    file = file or sys.stdout
    head = (f"{'case':<17} {'B':>2} {'H':>3} {'kv':>3} {'L':>5} {'D':>4} {'stof':>7} {'TF/s':>6} "
            f"{'flex':>7} {'flash':>7} {'cudnn':>7} {'effic':>7} {'sdpa+b':>7} {'err':>8} kernel")
    print(head, file=file)
    print("-" * len(head), file=file)
    f = lambda x, s=".3f": "-" if x is None else format(x, s)
    for c in rows:
        print(f"{c['case']:<17} {c['B']:>2} {c['H']:>3} {c['kv_heads']:>3} {c['L']:>5} "
              f"{c['D']:>4} {f(c['stof_ms']):>7} {f(c['stof_tflops'], '.0f'):>6} "
              f"{f(c['flex_ms']):>7} {f(c['sdpa_flash_ms']):>7} {f(c['sdpa_cudnn_ms']):>7} "
              f"{f(c['sdpa_efficient_ms']):>7} {f(c['sdpa_bias_ms']):>7} "
              f"{f(c['max_rel_err'], '.1e'):>8} {c['kernel'] or '-'}", file=file)
    for k, v in summary.items():
        print(f"{k}: {v}", file=file)
