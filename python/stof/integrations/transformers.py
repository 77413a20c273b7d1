"""transformers.py — stof as a Hugging Face transformers attention implementation.

    import stof.integrations.transformers as stof_hf
    stof_hf.register()
    model = AutoModel.from_pretrained(path, attn_implementation="stof")

register() adds "stof" to transformers' AttentionInterface (the attention call) and
AttentionMaskInterface (the mask the model builds for it). The mask side reads the pattern
transformers asks for — bidirectional, causal, or either with a sliding window, decoded from
the mask function it is given — and answers with the [B, L] padding mask only (no dense
[B, 1, L, L] mask is built), tagged with the pattern as a stof mask spec. The attention
side turns the padding into lengths and runs torch.ops.stof.attention (integrations/
torch_op.py). Grouped-query attention passes K/V as they are where stof takes fewer K/V heads
than query heads, else repeats them. A stof mask spec of one's own (the forward's
`stof_mask=` keyword, or `model.config.stof_mask`) replaces the model's pattern, e.g.
"window:256,global:64" on a long document; padding still applies.

What stof cannot represent — a custom or packed-sequence mask, left padding, a KV cache
(query and key lengths differ), dropout while training, attention weights asked for,
softcap, position biases, attention sinks, a GPU dtype or head size stof does not run — runs
through transformers' SDPA with the mask SDPA would have had, with a warning once per reason:
slower, never wrong. With a stof mask spec of one's own there is no equivalent to fall back
to, so that case raises instead.
"""

import warnings

import torch
from transformers import AttentionInterface
from transformers import masking_utils as _masks
from transformers.integrations.sdpa_attention import sdpa_attention_forward

from . import torch_op as _torch_op  # registers torch.ops.stof.attention

_SPEC_ATTR = "_stof_spec"  # the pattern a padding mask was made for, as a stof mask spec
# its lengths: one tensor for every layer of a forward, so that stof's mask cache (keyed by
# the lengths tensor) compiles the mask once per forward, not once per layer; None: no padding
_LENGTHS_ATTR = "_stof_lengths"
# the arguments of transformers' sdpa_mask for the same call, and (once built) its result: a
# layer that falls back gets exactly the mask SDPA would have had, built once per forward
_SDPA_ARGS_ATTR = "_stof_sdpa_args"
_SDPA_MASK_ATTR = "_stof_sdpa_mask"
_warned = set()
_GPU_HEAD_DIMS = (32, 64, 80, 96, 128, 256)  # src/attn/select.c's attn_head_dim_supported
_gqa_native = None  # whether stof takes fewer K/V heads than query heads (probed once)


def _closure(fn):
    return {name: cell.cell_contents for name, cell in
            zip(fn.__code__.co_freevars, fn.__closure__ or ())}


_AND_CODE = _masks.and_masks(_masks.causal_mask_function).__code__
_CAUSAL_WINDOW_CODE = _masks.sliding_window_overlay(1).__code__
_WINDOW_CODE = _masks.sliding_window_bidirectional_overlay(1).__code__


def _pattern_spec(fn):
    """The stof spec of a transformers mask function ("" for every pair), or None when it is
    not one of the patterns stof represents (then the dense SDPA mask is used)."""
    if fn is _masks.bidirectional_mask_function:
        return ""
    if fn is _masks.causal_mask_function:
        return "causal"
    if getattr(fn, "__code__", None) is not _AND_CODE:
        return None
    causal, left, right = False, None, None
    for part in _closure(fn).get("mask_functions", ()):
        code = getattr(part, "__code__", None)
        if part is _masks.causal_mask_function:
            causal = True
        elif part is _masks.bidirectional_mask_function:
            pass
        elif code is _CAUSAL_WINDOW_CODE and left is None:
            left = int(_closure(part)["sliding_window"]) - 1  # keys j > i - w
        elif code is _WINDOW_CODE and left is None:
            left = right = int(_closure(part)["sliding_window"])  # |i - j| <= w
        else:
            return None
    if left is None:
        return "causal" if causal else ""
    if causal:
        right = 0
    if left < 0 or right < 0:
        return None
    return f"window:{left}:{right}"


def stof_mask(batch_size, q_length, kv_length, q_offset=0, kv_offset=0,
              mask_function=_masks.causal_mask_function, attention_mask=None, **kwargs):
    """transformers' mask hook for "stof": the [B, kv_length] padding mask tagged with the
    pattern's stof spec, or SDPA's mask where stof cannot represent the pattern."""
    spec = _pattern_spec(mask_function)
    simple = (isinstance(q_offset, int) and isinstance(kv_offset, int) and q_offset == 0 and
              kv_offset == 0 and q_length == kv_length)
    args = dict(batch_size=batch_size, q_length=q_length, kv_length=kv_length, q_offset=q_offset,
                kv_offset=kv_offset, mask_function=mask_function, attention_mask=attention_mask,
                **kwargs)
    pad = lengths = None
    if spec is not None and simple:
        device = kwargs.get("device", "cpu")
        if attention_mask is None:
            pad = torch.ones(batch_size, kv_length, dtype=torch.bool, device=device)
        elif attention_mask.ndim == 2 and attention_mask.shape[1] >= kv_length:
            pad = attention_mask[:, -kv_length:].to(device=device, dtype=torch.bool)
            lengths = pad.sum(1, dtype=torch.int32)
            prefix = torch.arange(kv_length, device=device)[None, :] < lengths[:, None]
            if not torch.equal(pad, prefix):
                pad = None  # left padding or holes: not lengths
    if pad is None:
        return _masks.sdpa_mask(**args)
    setattr(pad, _SPEC_ATTR, spec)
    setattr(pad, _LENGTHS_ATTR, lengths)
    setattr(pad, _SDPA_ARGS_ATTR, args)
    return pad


def _sdpa_mask_of(attention_mask):
    """The mask SDPA takes for this call: the model's own, or, for a padding mask stof_mask
    tagged, the one transformers' sdpa_mask builds from the same arguments (built on the
    first layer that falls back and kept on the tagged tensor for the others)."""
    args = getattr(attention_mask, _SDPA_ARGS_ATTR, None)
    if args is None:
        return attention_mask
    if not hasattr(attention_mask, _SDPA_MASK_ATTR):
        setattr(attention_mask, _SDPA_MASK_ATTR, _masks.sdpa_mask(**args))
    return getattr(attention_mask, _SDPA_MASK_ATTR)


def _warn_once(reason):
    if reason not in _warned:
        _warned.add(reason)
        warnings.warn(f"stof attention falls back to SDPA: {reason}", stacklevel=3)


def _unsupported(module, query, key, attention_mask, dropout, kwargs):
    """Why this call cannot run on stof, or None."""
    if not (isinstance(attention_mask, torch.Tensor) and hasattr(attention_mask, _SPEC_ATTR)):
        return ("the model's mask is not a pattern stof represents (a custom or packed-sequence "
                "mask, left padding, or a KV cache)")
    if query.shape[2] != key.shape[2]:
        return "query and key lengths differ (a KV cache or cross-attention)"
    if dropout and module.training:
        return "attention dropout while training"
    if kwargs.get("output_attentions"):
        return "attention weights were asked for"
    for name in ("softcap", "position_bias", "s_aux"):
        if kwargs.get(name) is not None:
            return f"{name} is not supported here"
    if query.shape[1] % key.shape[1]:
        return "query heads are not a multiple of key/value heads"
    if query.is_cuda and (query.dtype not in (torch.float16, torch.bfloat16) or
                          query.shape[-1] not in _GPU_HEAD_DIMS):
        return f"stof on the GPU runs float16/bfloat16 with head size 32, 64, 80, 96, 128 or " \
               f"256, not {query.dtype} with {query.shape[-1]}"
    return None


def _kv_heads_native(query):
    """Whether stof.attention takes K/V with fewer heads than Q (tried once on tiny tensors)."""
    global _gqa_native
    if _gqa_native is None:
        q = torch.zeros(1, 2, 4, 32, dtype=query.dtype, device=query.device)
        k = torch.zeros(1, 1, 4, 32, dtype=query.dtype, device=query.device)
        try:
            torch.ops.stof.attention(q, k, k, None, None, None, None, "bhld", "auto")
            _gqa_native = True
        except Exception:  # the binding's shape error: this stof wants equal heads
            _gqa_native = False
    return _gqa_native


def stof_attention_forward(module, query, key, value, attention_mask, dropout=0.0, scaling=None,
                           is_causal=None, **kwargs):
    """transformers' attention hook for "stof": query [B, H, L, D], key and value
    [B, H_kv, L, D]; returns ([B, L, H, D], None) as every implementation does."""
    config = getattr(module, "config", None)
    own = kwargs.pop("stof_mask", None) or getattr(config, "stof_mask", None)
    reason = _unsupported(module, query, key, attention_mask, dropout, kwargs)
    if reason is None and kwargs.get("sliding_window") and \
            "window" not in getattr(attention_mask, _SPEC_ATTR):
        reason = "the layer has a sliding window its mask does not show"
    if reason is not None:
        if own:
            raise ValueError(f"stof mask {own!r} cannot run here: {reason}")
        _warn_once(reason)
        return sdpa_attention_forward(module, query, key, value, _sdpa_mask_of(attention_mask),
                                      dropout=dropout, scaling=scaling, is_causal=is_causal,
                                      **kwargs)
    spec = own or getattr(attention_mask, _SPEC_ATTR) or None
    lengths = getattr(attention_mask, _LENGTHS_ATTR, None)
    groups = query.shape[1] // key.shape[1]
    if groups > 1 and not _kv_heads_native(query):
        key = key.repeat_interleave(groups, dim=1)
        value = value.repeat_interleave(groups, dim=1)
    return _run(query, key, value, spec, scaling, lengths), None


def _run(query, key, value, spec, scaling, lengths):
    """The attention as [B, L, H, D], contiguous: written there directly when eager (no
    transposed copy after); while torch.compile traces, the custom op's result, copied."""
    if torch.compiler.is_compiling():
        out = _torch_op.attention_op(query, key, value, mask=spec, scale=scaling,
                                     lengths=lengths)
        return out.transpose(1, 2).contiguous()
    batch, heads, length, dim = query.shape
    out = query.new_empty(batch, length, heads, dim)
    _torch_op.attention_op(query, key, value, mask=spec, scale=scaling, lengths=lengths,
                           out=out.transpose(1, 2))
    return out


def register():
    """Adds "stof" to transformers' attention and mask interfaces (idempotent)."""
    AttentionInterface.register("stof", stof_attention_forward)
    _masks.AttentionMaskInterface.register("stof", stof_mask)
