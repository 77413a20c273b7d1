"""attention.py — stof.attention and stof.attention_select over torch tensors
(CPU or CUDA, zero-copy) and numpy arrays (CPU).

Both layouts are handed to the library as strided [B, H, L, D] views: "blhd"
input is never transposed or copied, and the output is allocated in q's own
layout. Packed variable-length batches ([T, H, D] with cu_seqlens) compile their
mask for the lengths the prefix sums imply, cached by the cu_seqlens object so a
repeated call neither recompiles nor reads the prefix sums back.
"""

import contextlib
import ctypes
from collections import namedtuple

from . import _arrays, _context, _lib
from .mask import CompiledMask, as_mask, cache

KernelChoice = namedtuple("KernelChoice", "kernel block_m block_n warps score split")


class T5Bias:
    """T5 relative-position bias for stof.attention(bias=...): table [num_buckets, H]
    (float32, or anything torch/numpy turns into it), evaluated in the kernel with
    Hugging Face's buckets (bidirectional: encoder; False: decoder)."""

    def __init__(self, table, bidirectional=True, max_distance=128):
        self.table = table
        self.bidirectional = bool(bidirectional)
        self.max_distance = int(max_distance)
KernelChoice.__doc__ = ("What stof.attention would run: kernel ('blockwise', 'blockwise_sm90', "
                        "'blockwise_sm90_ws', 'rowwise' or 'cpu'), tile block_m x block_n, warps "
                        "per CTA, selector score, and split: the residue classes a dilated mask "
                        "runs as sequences of their own (1: none).")

_LAYOUTS = {"bhld": None, "blhd": (0, 2, 1, 3)}


_STAY = contextlib.nullcontext()


def _on_device(ctx):
    """A context manager making the context's GPU torch's current device for the
    call (launches go there); one that does nothing when it already is."""
    torch = _arrays.torch_module()
    if ctx.kind != "cuda" or torch is None or torch.cuda.current_device() == ctx.index:
        return _STAY
    return torch.cuda.device(ctx.index)


def _same_device(ctx_key, x, name):
    if x is not None and _arrays.device_of(x) != ctx_key:
        raise ValueError(f"{name} is on {_arrays.device_of(x)} but q is on {ctx_key}")


def _int32_on(x, like):
    """An I32 1-D array in the memory of `like` (q), from a list, numpy array or tensor."""
    if _arrays.is_torch(like):
        torch = _arrays.torch_module()
        if _arrays.is_torch(x):
            return x.to(device=like.device, dtype=torch.int32).contiguous()
        return torch.tensor(_arrays.as_int_list(x), dtype=torch.int32, device=like.device)
    np = _arrays.numpy_module()
    if _arrays.is_torch(x):
        x = x.detach().cpu().tolist()
    return np.ascontiguousarray(np.asarray(x, dtype=np.int32))


def _float32_on(x, like):
    """A contiguous float32 array in the memory of `like` (q): tables and slopes."""
    if _arrays.is_torch(like):
        torch = _arrays.torch_module()
        if _arrays.is_torch(x):
            return x.detach().to(device=like.device, dtype=torch.float32).contiguous()
        return torch.tensor(x, dtype=torch.float32, device=like.device)
    np = _arrays.numpy_module()
    if _arrays.is_torch(x):
        x = x.detach().cpu().float().numpy()
    return np.ascontiguousarray(np.asarray(x, dtype=np.float32))


def _seq_lengths(cu):
    """Per-sequence lengths from prefix sums, on cu's own device (no host read)."""
    if _arrays.is_torch(cu) or _arrays.is_numpy(cu):
        return cu[1:] - cu[:-1]
    cu = _arrays.as_int_list(cu)
    return [b - a for a, b in zip(cu, cu[1:])]


def _max_length(cu, given):
    if given is not None:
        return _lib.as_int(given, "max_seqlen")
    lens = _arrays.as_int_list(_seq_lengths(cu))
    if not lens:
        raise ValueError("cu_seqlens needs at least two entries (B + 1 prefix sums)")
    return max(1, max(lens))


class _Call:
    """Everything stof_attention needs, checked and described."""

    def __init__(self, q, k, v, mask, lengths, lengths_k, layout, cu_seqlens_q, cu_seqlens_k,
                 max_seqlen_q, max_seqlen_k, scale, kernel, bias=None, alibi=None, softcap=None):
        if kernel not in ("auto", "blockwise", "blockwise_sm90", "blockwise_sm90_ws", "rowwise"):
            raise ValueError("kernel must be 'auto', 'blockwise', 'blockwise_sm90', "
                             f"'blockwise_sm90_ws' or 'rowwise', got {kernel!r}")
        self.params = _lib.fn("stof_attn_default_params")()
        self.params.scale = 0.0 if scale is None else float(scale)
        self.params.kernel = _lib.KERNELS[kernel]
        self.params.softcap = 0.0 if softcap is None else float(softcap)
        self._bias(q, bias, alibi)
        device = _arrays.device_of(q)
        k = q if k is None else k
        for name, x in (("k", k), ("v", v)):
            if x is not None and _arrays.is_torch(x) != _arrays.is_torch(q):
                raise TypeError(f"q and {name} must both be torch tensors or both numpy arrays")
            _same_device(device, x, name)
        self.ctx = _context.get(device)
        self.q, self.k, self.v = q, k, v
        self.packed = cu_seqlens_q is not None or cu_seqlens_k is not None
        if self.packed:
            self._packed(mask, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, layout)
        else:
            self._padded(mask, lengths, lengths_k, layout)

    def _padded(self, mask, lengths, lengths_k, layout):
        if layout not in _LAYOUTS:
            raise ValueError(f"layout must be 'bhld' or 'blhd', got {layout!r}")
        self.perm = _LAYOUTS[layout]
        for name, x in (("q", self.q), ("k", self.k)):
            if len(x.shape) != 4:
                raise ValueError(f"{name} must be 4-dimensional ({layout}) without cu_seqlens, "
                                 f"got shape {tuple(x.shape)}")
        qs = self._bhld(self.q.shape)
        ks = self._bhld(self.k.shape)
        self.cu_q = self.cu_k = None
        self.mask = self._compiled(mask, qs[0], qs[1], qs[2], ks[2], lengths, lengths_k)

    def _bhld(self, shape):
        return shape if self.perm is None else [shape[p] for p in self.perm]

    def _packed(self, mask, cu_q, cu_k, max_q, max_k, layout):
        if cu_q is None:
            raise ValueError("cu_seqlens_k was given without cu_seqlens_q")
        cu_k = cu_q if cu_k is None else cu_k
        self.perm = None
        for name, x in (("q", self.q), ("k", self.k)):
            if len(x.shape) != 3:
                raise ValueError(f"{name} must be [T, H, D] with cu_seqlens, got shape "
                                 f"{tuple(x.shape)}")
        batch = len(cu_q) - 1
        heads = self.q.shape[1]
        len_q = _max_length(cu_q, max_q)
        len_k = len_q if cu_k is cu_q and max_k is None else _max_length(cu_k, max_k)
        self.cu_q = _int32_on(cu_q, self.q)
        self.cu_k = self.cu_q if cu_k is cu_q else _int32_on(cu_k, self.q)
        if isinstance(mask, CompiledMask):
            self.mask = self._check_compiled(mask)
            return
        same = cu_k is cu_q

        def make_lengths():
            return _seq_lengths(cu_q), None if same else _seq_lengths(cu_k)

        sources = (cu_q,) if same else (cu_q, cu_k)
        self.mask = cache.get(as_mask(mask), batch, heads, len_q, len_k, None, None, self.ctx,
                              derived=(sources, make_lengths), head_dim=int(self.q.shape[-1]))

    def _compiled(self, mask, batch, heads, len_q, len_k, lengths, lengths_k):
        if isinstance(mask, CompiledMask):
            if lengths is not None or lengths_k is not None:
                raise ValueError("lengths belong to the mask's compile when mask is a CompiledMask")
            return self._check_compiled(mask)
        return cache.get(as_mask(mask), int(batch), int(heads), int(len_q), int(len_k),
                         lengths, lengths_k, self.ctx, head_dim=int(self.q.shape[-1]))

    def _check_compiled(self, mask):
        if (mask.ctx.kind, mask.ctx.index) != (self.ctx.kind, self.ctx.index):
            raise ValueError(f"the mask was compiled for {mask.device}, but q is on "
                             f"{'cpu' if self.ctx.kind == 'cpu' else f'cuda:{self.ctx.index}'}")
        return mask

    def _bias(self, q, bias, alibi):
        """params' bias: a T5Bias, ALiBi slopes or an additive tensor, as float32
        (T5 and ALiBi) in q's memory; the arrays stay referenced by the call."""
        if bias is not None and alibi is not None:
            raise ValueError("give bias or alibi, not both")
        self.bias_array = self.bias_desc = None
        if bias is None and alibi is None:
            return
        if alibi is not None:
            kind, array = "alibi", _float32_on(alibi, q)
        elif isinstance(bias, T5Bias):
            kind, array = "t5", _float32_on(bias.table, q)
            self.params.t5_bidirectional = int(bias.bidirectional)
            self.params.t5_max_distance = bias.max_distance
        else:
            if _arrays.is_torch(bias) != _arrays.is_torch(q):
                raise TypeError("q and bias must both be torch tensors or both numpy arrays")
            _same_device(_arrays.device_of(q), bias, "bias")
            kind, array = "tensor", bias
        self.bias_array = array
        self.bias_desc = _arrays.describe(array)
        self.params.bias_kind = _lib.BIAS_KINDS[kind]
        self.params.bias = ctypes.pointer(self.bias_desc)

    def describe(self, x):
        return _arrays.describe(x, self.perm)

    def seqlens(self):
        if not self.packed:
            return None, None
        return (ctypes.byref(_arrays.describe(self.cu_q)),
                ctypes.byref(_arrays.describe(self.cu_k)))


class _Prepared:
    """A checked plain torch call (no bias, no packing, a mask by text or None, an output
    given), kept for calls that repeat it with other tensors of the same shapes, strides,
    dtypes and devices, as a model's layers do: only the data pointers and the mask's
    lengths change, so the call skips _Call's checks and describes its tensors by copying
    the first call's descriptors."""

    __slots__ = ("params", "ctx", "mask", "dims", "tensors")

    def __init__(self, call, mask, tensors):
        self.params, self.ctx = call.params, call.ctx
        self.mask = as_mask(mask)
        qs, ks = call._bhld(call.q.shape), call._bhld(call.k.shape)
        self.dims = (int(qs[0]), int(qs[1]), int(qs[2]), int(ks[2]), int(call.q.shape[-1]))
        self.tensors = tensors

    def run(self, q, k, v, out, lengths):
        b, h, lq, lk, d = self.dims
        compiled = cache.get(self.mask, b, h, lq, lk, lengths, None, self.ctx, head_dim=d)
        tq, tk, tv, to = (_lib.Tensor.from_buffer_copy(t) for t in self.tensors)
        tq.data, tk.data, tv.data, to.data = (q.data_ptr() or None, k.data_ptr() or None,
                                              v.data_ptr() or None, out.data_ptr() or None)
        _launch(self.ctx, self.params, tq, tk, tv, compiled, None, None, to)
        return out


def _launch(ctx, params, tq, tk, tv, compiled, cu_q, cu_k, to):
    """stof_attention on the context's device and torch's current stream there."""
    with _on_device(ctx):
        ctx.follow_torch_stream()
        _lib.call("stof_attention", ctx.handle, ctypes.byref(params), ctypes.byref(tq),
                  ctypes.byref(tk), ctypes.byref(tv), compiled.handle, cu_q, cu_k,
                  ctypes.byref(to))
        compiled.last_stream = ctx.stream


_prepared = {}
_PREPARED_MAX = 256


def _prepared_key(q, k, v, out, mask, scale, kernel, layout, lengths):
    """What a _Prepared call is kept under: everything _Call checks, except data."""
    return (mask, scale, kernel, layout, lengths is None, q.dtype, q.device, q.shape, q.stride(),
            k.dtype, k.device, k.shape, k.stride(), v.dtype, v.device, v.shape, v.stride(),
            out.dtype, out.device, out.shape, out.stride())


def _new_output(q):
    if _arrays.is_torch(q):
        return _arrays.torch_module().empty_like(q)
    return _arrays.numpy_module().empty_like(q)


def attention(q, k, v, mask=None, scale=None, lengths=None, kernel="auto", layout="bhld",
              cu_seqlens_q=None, cu_seqlens_k=None, max_seqlen_q=None, max_seqlen_k=None,
              lengths_k=None, out=None, bias=None, alibi=None, softcap=None):
    """Masked multi-head attention: softmax(cap(scale * q k^T) + bias over the mask) v.

    q, k, v: torch tensors (CUDA: float16/bfloat16, head dim 32/64/80/96/128/256,
    run on torch.cuda.current_stream(); CPU: float32/float16/bfloat16) or numpy
    arrays (CPU), all on one device. k and v may have fewer heads than q
    (grouped-query; 1: multi-query): their head count must divide q's.
    Masks with Lq != Lk align bottom-right by default (the last query sees the
    last key; "causal,topleft" for the other), and the biases follow.
    bias: an additive tensor [B|1, H|1, Lq, Lk] (float32/16, bfloat16) or a
    stof.T5Bias(table [num_buckets, H], bidirectional, max_distance); alibi: H
    slopes (score -= slope * |key - query|); softcap: tanh cap of the scaled
    scores (Gemma 2), applied before the bias.
    layout: "bhld" ([B, H, L, D]) or "blhd" ([B, L, H, D]); any strides with unit
    stride on D, nothing is copied.
    mask: a stof.Mask, a spec text ("window:128,global:32"), a CompiledMask, or
    None (every pair visible). Masks are compiled on first use and cached.
    lengths: per-sequence real lengths (list, array or tensor of B ints); rows past
    a sequence's length come back as zeros. lengths_k: key lengths when Lq != Lk.
    cu_seqlens_q / cu_seqlens_k: packed variable-length batch, q [Tq, H, D], k and v
    [Tk, H, D], prefix sums [B+1]; max_seqlen_q/_k: the padded length the mask is
    compiled for (default: the longest sequence, which reads cu_seqlens on the host).
    scale: softmax scale, default 1/sqrt(D). kernel: "auto", "blockwise", "blockwise_sm90"
    (Hopper, compute capability 9.0), "blockwise_sm90_ws" (Hopper, head dim 128: dense,
    causal and window masks; ALiBi, except with a window, and soft caps), "rowwise".
    Returns a new tensor/array in q's layout, dtype and device (or fills `out`).
    """
    if v is None:
        raise TypeError("attention needs v")
    key = None
    if (out is not None and k is not None and bias is None and alibi is None and
            softcap is None and cu_seqlens_q is None and cu_seqlens_k is None and
            lengths_k is None and (mask is None or type(mask) is str) and
            _arrays.is_torch(q) and _arrays.is_torch(k) and _arrays.is_torch(v) and
            _arrays.is_torch(out)):
        key = _prepared_key(q, k, v, out, mask, scale, kernel, layout, lengths)
        prepared = _prepared.get(key)
        if prepared is not None:
            return prepared.run(q, k, v, out, lengths)
    call = _Call(q, k, v, mask, lengths, lengths_k, layout, cu_seqlens_q, cu_seqlens_k,
                 max_seqlen_q, max_seqlen_k, scale, kernel, bias, alibi, softcap)
    if out is None:
        out = _new_output(q)
    else:
        _same_device(_arrays.device_of(q), out, "out")
    tq, tk, tv, to = (call.describe(x) for x in (q, call.k, v, out))
    cu_q, cu_k = call.seqlens()
    _launch(call.ctx, call.params, tq, tk, tv, call.mask, cu_q, cu_k, to)
    if key is not None:  # it ran: its checks hold for any call of the same key
        if len(_prepared) >= _PREPARED_MAX:
            _prepared.clear()
        _prepared[key] = _Prepared(call, mask, (tq, tk, tv, to))
    return out


def attention_select(q, k=None, v=None, mask=None, scale=None, lengths=None, kernel="auto",
                     layout="bhld", cu_seqlens_q=None, cu_seqlens_k=None, max_seqlen_q=None,
                     max_seqlen_k=None, lengths_k=None, bias=None, alibi=None, softcap=None):
    """The KernelChoice stof.attention would make for the same arguments (k
    defaults to q's shape; nothing runs, though the mask is compiled and cached)."""
    call = _Call(q, k, v, mask, lengths, lengths_k, layout, cu_seqlens_q, cu_seqlens_k,
                 max_seqlen_q, max_seqlen_k, scale, kernel, bias, alibi, softcap)
    tq = call.describe(q)
    choice = _lib.AttnChoice()
    with _on_device(call.ctx):
        call.ctx.follow_torch_stream()
        _lib.call("stof_attention_select", call.ctx.handle, ctypes.byref(call.params),
                  ctypes.byref(tq), call.mask.handle, ctypes.byref(choice))
    return KernelChoice(_lib.KERNEL_NAMES.get(choice.kernel, str(choice.kernel)), choice.block_m,
                        choice.block_n, choice.warps, choice.score, choice.split)
