"""masks.py — the BENCH.md masks, each as a stof spec and as a visibility
function, shared by bench/compare_attention.py and tests/python so every side of
a comparison (stof, SDPA, FlexAttention, the fp32 reference) sees one mask.

visible(b, i, j) takes broadcastable integer arrays — numpy arrays, torch
tensors, or the 0-d tensors FlexAttention's mask_mod receives — and uses only
operators the three share (abs, //, %, comparisons, &, |, indexing a table).
BigBird's random blocks are drawn with stof's own rule (random_block_columns,
a transcription of src/mask/mask_eval.h), so the torch side and the library
agree block for block; tests/python checks that by decoding compiled masks.
No numpy or torch is needed to build a spec.

The random blocks are a small int32 table of picked block columns, [B, block
rows, picks], indexed by the query's block row only and compared with the key's
block column; never a [B, nb, nb] table indexed by both. Inside FlexAttention's
kernel q_idx is a [BLOCK_M, 1] tile and kv_idx a [1, BLOCK_N] tile, so a table
indexed by both becomes a [BLOCK_M, BLOCK_N] gather in the pipelined key loop,
which Triton stages through shared memory per stage (8 bytes an element for
int64): past the H200's 227 KiB, so bigbird failed to compile. Indexed by the
block row, each load is a [BLOCK_M, 1] column of a few bytes.
"""

import random

SEED = 1234
BLOCK = 64  # BigBird block size

BENCH_MASKS = ("dense", "causal", "window", "dilated", "longformer", "bigbird", "varlen")
PAPER_MASKS = ("paper-band", "paper-longformer", "paper-bigbird")
ALL_MASKS = BENCH_MASKS + PAPER_MASKS


# ---------------------------------------------------------------- stof's random rule

_M64 = (1 << 64) - 1


def _mix64(x):
    """splitmix64's finaliser, as mask_mix64 in src/mask/mask_eval.h."""
    x = (x + 0x9E3779B97F4A7C15) & _M64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _M64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _M64
    return x ^ (x >> 31)


def random_block_columns(seed, b, row, n_cols, per_row):
    """The block columns stof's random(block, per_row, seed) part makes visible
    in block row `row` of batch entry b, where n_cols = ceil(key length of
    entry b / block). Picks may repeat. mask_eval.h defines the rule:
        key = mix64(mix64(mix64(seed) ^ b) ^ row)
        pick k = (mix64(key + k) >> 32) % n_cols"""
    if n_cols <= 0:
        return []
    key = _mix64(_mix64(_mix64(seed & _M64) ^ b) ^ row)
    return [(_mix64((key + k) & _M64) >> 32) % n_cols for k in range(per_row)]


def random_column_table(seed, batch, n_rows, n_cols, per_row):
    """[batch][n_rows][per_row] nested lists: the block columns stof's random
    blocks pick in each block row (repeats kept: a repeat shows one block)."""
    return [[random_block_columns(seed, b, r, n_cols, per_row) for r in range(n_rows)]
            for b in range(batch)]


def varlen_lengths(batch, length, seed=SEED):
    """Per-sequence lengths uniform in [L/2, L], reproducible from seed."""
    rng = random.Random(seed)
    return [rng.randint(length // 2, length) for _ in range(batch)]


def band_layout(n_blocks, width=1):
    """0/1 block layout with |bi - bj| <= width."""
    return [[1 if abs(r - c) <= width else 0 for c in range(n_blocks)] for r in range(n_blocks)]


def layout_text(layout):
    return "/".join("".join("1" if v else "0" for v in row) for row in layout)


# ---------------------------------------------------------------- the masks

class BenchMask:
    """One benchmark mask for a batch of `batch` sequences of padded length `length`.

    spec:     stof text form
    lengths:  per-sequence lengths (None: all full)
    tables:   named integer tables visible() indexes ("cols": [B, nb, picks] random
              block columns, "len": [B] lengths), as nested lists; converted per
              backend to int32
    per_batch: visible() depends on b (the dense mask is [B, 1, L, L], else [1, 1, L, L])
    is_causal: SDPA flash may run it with is_causal=True
    """

    def __init__(self, name, batch, length, spec, rule, lengths=None, tables=None,
                 per_batch=False, is_causal=False):
        self.name, self.batch, self.length = name, batch, length
        self.spec, self.lengths = spec, lengths
        self.rule = rule
        self.tables = tables or {}
        self.per_batch = per_batch
        self.is_causal = is_causal
        self._converted = {}

    def __repr__(self):
        return f"BenchMask({self.name!r}, B={self.batch}, L={self.length})"

    # -- visibility

    def _tables_like(self, x):
        """The tables as arrays of x's kind (and device)."""
        key = _backend_key(x)
        t = self._converted.get(key)
        if t is None:
            t = {name: _array_like(x, value) for name, value in self.tables.items()}
            self._converted[key] = t
        return t

    def visible(self, b, i, j):
        """Boolean visibility of (b, i, j), broadcast over the three arrays."""
        return self.rule(b, i, j, self._tables_like(i))

    def mask_mod(self, device):
        """A FlexAttention mask_mod(b, h, q_idx, kv_idx) for torch on device; the
        tables it reads are captured int32 tensors on device, shaped so that
        none is indexed by q_idx and kv_idx together (see the top of the file)."""
        import torch
        tables = self._tables_like(torch.zeros(1, device=device))
        rule = self.rule

        def mask_mod(b, h, q_idx, kv_idx):
            return rule(b, q_idx, kv_idx, tables)

        return mask_mod

    # -- materialised masks

    def dense_numpy(self):
        """numpy bool [B|1, 1, L, L] (B when per_batch)."""
        import numpy as np
        bm, L = (self.batch if self.per_batch else 1), self.length
        b = np.arange(bm).reshape(bm, 1, 1, 1)
        i = np.arange(L).reshape(1, 1, L, 1)
        j = np.arange(L).reshape(1, 1, 1, L)
        return np.broadcast_to(self.visible(b, i, j), (bm, 1, L, L)).copy()

    def dense_torch(self, device, batch_index=None):
        """torch bool [B|1, 1, L, L] on device; with batch_index, that entry's
        [1, 1, L, L] plane only (bounds memory for long sequences)."""
        import torch
        L = self.length
        if batch_index is None:
            bm = self.batch if self.per_batch else 1
            b = torch.arange(bm, device=device).view(bm, 1, 1, 1)
        else:
            bm = 1
            b = torch.full((1, 1, 1, 1), batch_index if self.per_batch else 0, device=device)
        i = torch.arange(L, device=device).view(1, 1, L, 1)
        j = torch.arange(L, device=device).view(1, 1, 1, L)
        return self.visible(b, i, j).expand(bm, 1, L, L).contiguous()

    def valid_rows(self):
        """Per batch entry, how many leading query rows are real (L without lengths)."""
        return list(self.lengths) if self.lengths is not None else [self.length] * self.batch


def _backend_key(x):
    mod = type(x).__module__
    if mod.startswith("torch"):
        return ("torch", str(x.device))
    return ("numpy",)


def _array_like(x, value):
    """int32: FlexAttention's indices are int32, so a table of that width adds
    no wider arithmetic to its kernel."""
    if type(x).__module__.startswith("torch"):
        import torch
        return torch.tensor(value, dtype=torch.int32, device=x.device)
    import numpy as np
    return np.asarray(value, dtype=np.int32)


# The rules. i, j: query and key index; t: the tables of the mask.

def _rule_dense(b, i, j, t):
    return (i >= 0) & (j >= 0)


def _rule_causal(b, i, j, t):
    return j <= i


def _window_rule(w):
    def rule(b, i, j, t):
        return abs(i - j) <= w
    return rule


def _dilated_rule(w, d):
    def rule(b, i, j, t):
        return (abs(i - j) <= w * d) & ((i - j) % d == 0)
    return rule


def _longformer_rule(w, g):
    def rule(b, i, j, t):
        return (abs(i - j) <= w) | (i < g) | (j < g)
    return rule


def _random_block_hit(cols, b, bi, bj):
    """Whether block column bj is among the picks of block row bi: one load per
    pick indexed by (b, bi) alone, compared with bj (see the top of the file)."""
    hit = cols[b, bi, 0] == bj
    for k in range(1, cols.shape[-1]):
        hit = hit | (cols[b, bi, k] == bj)
    return hit


def _rule_bigbird(b, i, j, t):
    bi, bj = i // BLOCK, j // BLOCK
    return (abs(bi - bj) <= 1) | (bi < 2) | (bj < 2) | _random_block_hit(t["cols"], b, bi, bj)


def _paper_bigbird_rule(w, g):
    def rule(b, i, j, t):
        return ((abs(i - j) <= w) | (i < g) | (j < g) |
                _random_block_hit(t["cols"], b, i // BLOCK, j // BLOCK))
    return rule


def _rule_varlen(b, i, j, t):
    n = t["len"][b]
    return (i < n) & (j < n)


def make_mask(name, batch, length, seed=SEED):
    """The BenchMask `name` (one of ALL_MASKS) for B = batch, L = length."""
    L, nb = length, -(-length // BLOCK)
    if name == "dense":
        return BenchMask(name, batch, L, "full", _rule_dense)
    if name == "causal":
        return BenchMask(name, batch, L, "causal", _rule_causal, is_causal=True)
    if name == "window":
        return BenchMask(name, batch, L, "window:128", _window_rule(128))
    if name == "dilated":
        return BenchMask(name, batch, L, "dilated:128x2", _dilated_rule(128, 2))
    if name == "longformer":
        return BenchMask(name, batch, L, "window:128,global:32", _longformer_rule(128, 32))
    if name == "bigbird":
        # band of 64-blocks as a block layout, bi < 2 or bj < 2 as global:128,
        # 3 random blocks per block row.
        spec = (f"blocks:{BLOCK}:{layout_text(band_layout(nb))},global:{2 * BLOCK},"
                f"random:{BLOCK}x3@{seed}")
        cols = random_column_table(seed, batch, nb, nb, 3)
        return BenchMask(name, batch, L, spec, _rule_bigbird, tables={"cols": cols},
                         per_batch=True)
    if name == "varlen":
        lens = varlen_lengths(batch, L, seed)
        return BenchMask(name, batch, L, "full", _rule_varlen, lengths=lens,
                         tables={"len": lens}, per_batch=True)
    if name == "paper-band":
        return BenchMask(name, batch, L, "window:32", _window_rule(32))
    if name == "paper-longformer":
        return BenchMask(name, batch, L, "window:32,global:32", _longformer_rule(32, 32))
    if name == "paper-bigbird":
        per_row = max(1, round(0.1 * nb))  # 10% of the block columns
        spec = f"window:32,global:32,random:{BLOCK}x{per_row}@{seed}"
        cols = random_column_table(seed, batch, nb, nb, per_row)
        return BenchMask(name, batch, L, spec, _paper_bigbird_rule(32, 32),
                         tables={"cols": cols}, per_batch=True)
    raise ValueError(f"unknown mask {name!r} (one of {', '.join(ALL_MASKS)})")
