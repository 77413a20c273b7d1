"""torch_op.py — stof.attention as the torch.library custom op ``stof::attention``, so a
model that calls it compiles with torch.compile(fullgraph=True) (and CUDA graphs) without a
graph break: dynamo and AOTAutograd see one opaque op whose fake (meta) implementation says
what it returns, instead of tracing into the ctypes binding.

    import torch, stof
    @torch.compile(fullgraph=True)
    def f(q, k, v):
        return stof.attention_op(q, k, v, mask="window:128,global:32")

The op takes what a graph can carry: tensors, the mask's text form, numbers and strings.
The real implementation is the public stof.attention; its output has q's shape, layout,
dtype and device, and so has the fake one. Inference only: no autograd formula.
"""

from typing import Optional

import torch

from ..attention import attention as _stof_attention
from ..mask import Mask


@torch.library.custom_op("stof::attention", mutates_args=())
def _attention_op(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: Optional[str] = None,
                  scale: Optional[float] = None, lengths: Optional[torch.Tensor] = None,
                  lengths_k: Optional[torch.Tensor] = None, layout: str = "bhld",
                  kernel_name: str = "auto") -> torch.Tensor:
    # "kernel_name": Inductor's fallback kernels take an argument named "kernel" themselves
    return _stof_attention(q, k, v, mask=mask, scale=scale, lengths=lengths, lengths_k=lengths_k,
                           layout=layout, kernel=kernel_name)


@_attention_op.register_fake
def _attention_fake(q, k, v, mask=None, scale=None, lengths=None, lengths_k=None, layout="bhld",
                    kernel_name="auto"):
    return torch.empty_like(q)


def attention_op(q, k, v, mask=None, scale=None, lengths=None, lengths_k=None, layout="bhld",
                 kernel="auto", out=None):
    """torch.ops.stof.attention with stof.attention's arguments: mask is a spec text or a
    stof.Mask without dense parts (passed as its text); lengths a tensor or a list of ints.
    Build Masks and length tensors outside the compiled region where you can. Outside
    torch.compile it calls stof.attention itself (the dispatcher would add ~10 us a call
    and nothing else); out: fill this tensor instead (under torch.compile, a copy)."""
    if isinstance(mask, Mask):
        if mask.has_dense:
            raise ValueError("stof::attention takes masks as text; a dense mask part has none "
                             "(call stof.attention outside torch.compile instead)")
        mask = str(mask)
    if not torch.compiler.is_compiling():
        return _stof_attention(q, k, v, mask=mask, scale=scale, lengths=lengths,
                               lengths_k=lengths_k, layout=layout, kernel=kernel, out=out)
    if lengths is not None and not isinstance(lengths, torch.Tensor):
        lengths = torch.tensor(list(lengths), dtype=torch.int32)
    if lengths_k is not None and not isinstance(lengths_k, torch.Tensor):
        lengths_k = torch.tensor(list(lengths_k), dtype=torch.int32)
    result = torch.ops.stof.attention(q, k, v, mask, scale, lengths, lengths_k, layout, kernel)
    if out is None:
        return result
    return out.copy_(result)
