"""_arrays.py — describing torch tensors and numpy arrays to stof without copying.

torch is never imported here: a torch tensor can only exist once the caller has
imported torch, so recognising one through sys.modules costs nothing and keeps
`import stof` free of torch. Strides are passed as they are (in elements), so a
[B, L, H, D] buffer is described as [B, H, L, D] by permuting shape and stride.
"""

import ctypes
import sys

from . import _lib


def torch_module():
    """torch if the caller has imported it, else None."""
    return sys.modules.get("torch")


def numpy_module():
    return sys.modules.get("numpy")


_tensor_type = None  # torch.Tensor once the caller has imported torch


def is_torch(x):
    global _tensor_type
    if _tensor_type is None:  # this runs many times a call: look torch up until it is seen
        t = torch_module()
        if t is None:
            return False
        _tensor_type = t.Tensor
    return isinstance(x, _tensor_type)


def is_numpy(x):
    np = numpy_module()
    return np is not None and isinstance(x, np.ndarray)


_TORCH_CODES = None


def _torch_dtype_code(dtype):
    global _TORCH_CODES
    if _TORCH_CODES is None:
        torch = torch_module()
        _TORCH_CODES = {torch.float32: _lib.F32, torch.float16: _lib.F16,
                        torch.bfloat16: _lib.BF16, torch.int32: _lib.I32, torch.int64: _lib.I64,
                        torch.uint8: _lib.U8, torch.bool: _lib.U8}
    code = _TORCH_CODES.get(dtype)
    if code is None:
        raise TypeError(f"stof does not take torch tensors of dtype {dtype} "
                        "(float32, float16, bfloat16, int32, int64, uint8 or bool)")
    return code


def _numpy_dtype_code(dtype):
    np = numpy_module()
    table = {np.dtype(np.float32): _lib.F32, np.dtype(np.float16): _lib.F16,
             np.dtype(np.int32): _lib.I32, np.dtype(np.int64): _lib.I64,
             np.dtype(np.uint8): _lib.U8, np.dtype(np.bool_): _lib.U8}
    if np.dtype(dtype) not in table:
        raise TypeError(f"stof does not take numpy arrays of dtype {dtype} "
                        "(float32, float16, int32, int64, uint8 or bool)")
    return table[np.dtype(dtype)]


def device_of(x):
    """("cpu", 0) or ("cuda", index) for a torch tensor or numpy array."""
    if is_torch(x):
        if x.device.type == "cuda":
            idx = x.device.index
            return ("cuda", idx if idx is not None else torch_module().cuda.current_device())
        if x.device.type != "cpu":
            raise TypeError(f"stof runs on CPU or CUDA tensors, not on {x.device}")
        return ("cpu", 0)
    if is_numpy(x):
        return ("cpu", 0)
    raise TypeError(f"expected a torch tensor or a numpy array, got {type(x).__name__}")


def describe(x, perm=None):
    """A _lib.Tensor describing x in place. perm reorders dimensions (a view
    through strides, never a copy)."""
    if is_torch(x):
        shape, stride = x.shape, x.stride()
        dtype = _torch_dtype_code(x.dtype)
        memory = _lib.MEM_DEVICE if x.is_cuda else _lib.MEM_HOST
        data = x.data_ptr()
    elif is_numpy(x):
        item = x.dtype.itemsize
        if any(s % item or s < 0 for s in x.strides):
            raise ValueError(f"numpy array strides {x.strides} are not non-negative multiples of "
                             f"the item size {item}")
        shape, stride = x.shape, [s // item for s in x.strides]
        dtype = _numpy_dtype_code(x.dtype)
        memory = _lib.MEM_HOST
        data = x.ctypes.data
    else:
        raise TypeError(f"expected a torch tensor or a numpy array, got {type(x).__name__}")
    if perm is not None:
        shape = [shape[p] for p in perm]
        stride = [stride[p] for p in perm]
    n = len(shape)
    if not 1 <= n <= _lib.MAX_DIMS:
        raise ValueError(f"stof tensors have 1 to {_lib.MAX_DIMS} dimensions, got shape "
                         f"{tuple(shape)}")
    # Few steps (this runs for every tensor of every call): the fields in the
    # constructor, the dimensions as two slice assignments.
    t = _lib.Tensor(data or None, dtype, memory, n)
    t.shape[:n] = shape
    t.stride[:n] = stride
    return t


class Int32Host:
    """A host I32 [n] tensor built from Python ints, owning its storage."""

    def __init__(self, values):
        values = [_lib.as_int(v, "a length") for v in values]
        self.values = tuple(values)
        self.storage = (ctypes.c_int32 * max(1, len(values)))(*values)
        t = _lib.Tensor()
        t.data = ctypes.addressof(self.storage)
        t.dtype = _lib.I32
        t.memory = _lib.MEM_HOST
        t.ndim = 1
        t.shape[0] = len(values)
        t.stride[0] = 1
        self.tensor = t


def as_int_list(x):
    """Python ints from a list, tuple, numpy array or torch tensor (one dimension)."""
    if is_torch(x) or is_numpy(x):
        if len(x.shape) != 1:
            raise ValueError(f"expected a one-dimensional array of lengths, got shape "
                             f"{tuple(x.shape)}")
        return [_lib.as_int(v, "an element") for v in x.tolist()]
    return [_lib.as_int(v, "an element") for v in x]
