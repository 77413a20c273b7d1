"""_lib.py — ctypes view of include/stof.h: the structs, the function signatures
and the error check that turns a failing stof_status into StofError.

The shared library is opened on first use, not at import, and each symbol is
bound when first called: `import stof` works before libstof.so is built, and a
library that lacks a symbol (a part still under work) fails only the calls that
need it, with a message naming the symbol.
"""

import contextlib
import ctypes
import functools
import operator
import os
import threading
from ctypes import (POINTER, Structure, c_char_p, c_double, c_float, c_int, c_int32, c_int64,
                    c_size_t, c_uint8, c_uint64, c_void_p)

# stof_status values, in the order of the enum.
STATUS_NAMES = ("STOF_OK", "STOF_ERR_INVALID_ARG", "STOF_ERR_SHAPE", "STOF_ERR_PARSE",
                "STOF_ERR_UNSUPPORTED", "STOF_ERR_OOM", "STOF_ERR_CUDA", "STOF_ERR_IO",
                "STOF_ERR_FORMAT", "STOF_ERR_NO_DEVICE", "STOF_ERR_INTERNAL")

DEVICE_AUTO, DEVICE_CPU, DEVICE_GPU = 0, 1, 2
F32, F16, BF16, I32, U8, I64 = 0, 1, 2, 3, 4, 5
MEM_HOST, MEM_DEVICE = 0, 1
BUILDERS = {"auto": 0, "cpu": 1, "gpu": 2}
KERNELS = {"auto": 0, "blockwise": 1, "rowwise": 2, "cpu": 3, "blockwise_sm90": 4,
           "blockwise_sm90_ws": 5}
KERNEL_NAMES = {v: k for k, v in KERNELS.items()}
MAX_DIMS = 4


class StofError(Exception):
    """A stof call failed. str() is "<STATUS_NAME>: <library message>";
    .status is the numeric stof_status and .status_name its constant name."""

    def __init__(self, status, message, call=""):
        self.status = int(status)
        self.status_name = status_name(status)
        self.message = message
        self.call = call
        super().__init__(f"{self.status_name}: {message}" if message else self.status_name)


def status_name(status):
    status = int(status)
    if 0 <= status < len(STATUS_NAMES):
        return STATUS_NAMES[status]
    return f"STOF_ERR_UNKNOWN({status})"


class Tensor(Structure):
    _fields_ = [("data", c_void_p), ("dtype", c_int), ("memory", c_int), ("ndim", c_int),
                ("shape", c_int64 * MAX_DIMS), ("stride", c_int64 * MAX_DIMS)]


class CtxParams(Structure):
    _fields_ = [("device", c_int), ("gpu_index", c_int), ("stream", c_void_p),
                ("workspace_bytes", c_size_t), ("cpu_threads", c_int)]


class MaskParams(Structure):
    _fields_ = [("batch", c_int), ("heads", c_int), ("len_q", c_int), ("len_k", c_int),
                ("lengths_q", POINTER(Tensor)), ("lengths_k", POINTER(Tensor)),
                ("tile_m", c_int), ("tile_n", c_int), ("builder", c_int), ("head_dim", c_int),
                ("reusable", c_int)]


class MaskStatsC(Structure):
    _fields_ = [("instances", c_int), ("tile_m", c_int), ("tile_n", c_int),
                ("tiles_total", c_int64), ("tiles_full", c_int64), ("tiles_partial", c_int64),
                ("nnz", c_int64), ("tile_density", c_double), ("density", c_double)]


class AttnParams(Structure):
    _fields_ = [("scale", c_float), ("kernel", c_int), ("bias_kind", c_int),
                ("bias", POINTER(Tensor)), ("t5_bidirectional", c_int),
                ("t5_max_distance", c_int), ("softcap", c_float)]


BIAS_KINDS = {"none": 0, "t5": 1, "alibi": 2, "tensor": 3}


class AttnChoice(Structure):
    _fields_ = [("kernel", c_int), ("block_m", c_int), ("block_n", c_int), ("warps", c_int),
                ("score", c_double), ("split", c_int)]


_P = POINTER
_vp = c_void_p
# name -> (restype, argtypes); restype c_int means "returns a stof_status".
_SIGNATURES = {
    "stof_status_str": (c_char_p, [c_int]),
    "stof_last_error": (c_char_p, []),
    "stof_version": (c_char_p, []),
    "stof_gpu_count": (c_int, []),
    "stof_ctx_default_params": (CtxParams, []),
    "stof_ctx_create": (c_int, [_P(CtxParams), _P(_vp)]),
    "stof_ctx_destroy": (None, [_vp]),
    "stof_ctx_device": (c_int, [_vp]),
    "stof_ctx_device_name": (c_char_p, [_vp]),
    "stof_ctx_set_stream": (c_int, [_vp, _vp]),
    "stof_ctx_stream": (_vp, [_vp]),
    "stof_ctx_synchronize": (c_int, [_vp]),
    "stof_mask_spec_create": (c_int, [_P(_vp)]),
    "stof_mask_spec_destroy": (None, [_vp]),
    "stof_mask_spec_parse": (c_int, [c_char_p, _P(_vp)]),
    "stof_mask_spec_format": (c_int, [_vp, _vp, c_size_t, _P(c_size_t)]),
    "stof_mask_spec_add_full": (c_int, [_vp]),
    "stof_mask_spec_set_align": (c_int, [_vp, c_int]),
    "stof_mask_spec_add_causal": (c_int, [_vp]),
    "stof_mask_spec_add_window": (c_int, [_vp, c_int, c_int]),
    "stof_mask_spec_add_dilated": (c_int, [_vp, c_int, c_int]),
    "stof_mask_spec_add_global": (c_int, [_vp, c_int]),
    "stof_mask_spec_add_global_list": (c_int, [_vp, _P(c_int32), c_int]),
    "stof_mask_spec_add_random": (c_int, [_vp, c_int, c_int, c_uint64]),
    "stof_mask_spec_add_blocks": (c_int, [_vp, c_int, c_int, c_int, c_int, _P(c_uint8)]),
    "stof_mask_spec_add_dense": (c_int, [_vp, _P(Tensor)]),
    "stof_mask_spec_within_causal": (c_int, [_vp]),
    "stof_mask_spec_within_window": (c_int, [_vp, c_int, c_int]),
    "stof_mask_default_params": (MaskParams, []),
    "stof_mask_compile": (c_int, [_vp, _vp, _P(MaskParams), _P(_vp)]),
    "stof_mask_destroy": (None, [_vp]),
    "stof_mask_rebuild": (c_int, [_vp]),
    "stof_mask_stats_get": (c_int, [_vp, _P(MaskStatsC)]),
    "stof_mask_decode": (c_int, [_vp, c_int, c_int, _vp, c_size_t]),
    "stof_attn_default_params": (AttnParams, []),
    "stof_attention": (c_int, [_vp, _P(AttnParams), _P(Tensor), _P(Tensor), _P(Tensor), _vp,
                               _P(Tensor), _P(Tensor), _P(Tensor)]),
    "stof_attention_select": (c_int, [_vp, _P(AttnParams), _P(Tensor), _vp, _P(AttnChoice)]),
}

_lock = threading.Lock()
_handle = None
_path = None
_bound = {}


def _bundled():
    """libstof.so installed inside the package by `pip install .` (see pyproject.toml)."""
    here = os.path.dirname(os.path.abspath(__file__))
    for sub in ("lib", "lib64"):
        path = os.path.join(here, sub, "libstof.so")
        if os.path.exists(path):
            return [path]
    return []


def _candidates():
    """Where libstof is looked for, in order: the copy bundled in the installed
    package, STOF_LIBRARY, the build/ folder of the source tree this package
    sits in, the system loader."""
    env = os.environ.get("STOF_LIBRARY")
    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    return (_bundled() + ([env] if env else []) +
            [os.path.join(repo, "build", "libstof.so"), "libstof.so", "libstof.so.0"])


def library_path():
    """Path of the loaded libstof (loads it when not yet loaded)."""
    _load()
    return _path


def _load():
    global _handle, _path
    if _handle is not None:
        return _handle
    with _lock:
        if _handle is not None:
            return _handle
        tried = []
        explicit = os.environ.get("STOF_LIBRARY")
        for cand in _candidates():
            is_file = os.sep in cand
            if is_file and not os.path.exists(cand):
                tried.append(f"{cand} (not found)")
                if cand == explicit:
                    break  # a library named by STOF_LIBRARY is the one wanted
                continue
            try:
                _handle = ctypes.CDLL(cand)
                _path = cand
                return _handle
            except OSError as e:
                tried.append(f"{cand} ({e})")
                if cand == explicit:
                    break
        raise OSError("cannot load libstof: tried " + "; ".join(tried) +
                      ". Install the package with `pip install .` from the repository root, "
                      "build the library (cmake --build build) or set STOF_LIBRARY to the "
                      "path of libstof.so")


def fn(name):
    """The bound C function `name` (signature from _SIGNATURES)."""
    f = _bound.get(name)
    if f is not None:
        return f
    lib = _load()
    try:
        f = getattr(lib, name)
    except AttributeError:
        raise StofError(4, f"{_path} has no symbol {name} (that part of stof is not built yet)",
                        name) from None
    f.restype, f.argtypes = _SIGNATURES[name]
    _bound[name] = f
    return f


def as_int(value, name):
    """value as a Python int: an int, a numpy or torch integer, or a float with no
    fractional part (2.0). A fractional float (1.5), NaN, a str or another type
    raises instead of being truncated the way int() would."""
    if isinstance(value, (str, bytes)):
        raise TypeError(f"{name} must be an integer, got the {type(value).__name__} {value!r}")
    try:
        return operator.index(value)
    except TypeError:
        pass
    try:
        f = float(value)
    except (TypeError, ValueError):
        raise TypeError(f"{name} must be an integer, got {type(value).__name__}") from None
    if not f.is_integer():
        raise ValueError(f"{name} must be an integer, got {value!r}")
    return int(f)


def c_int(value, name):
    """value as a C int (as_int's rules); ctypes would silently wrap one that does not fit."""
    v = as_int(value, name)
    if not -(1 << 31) <= v < (1 << 31):
        raise ValueError(f"{name} = {v} does not fit in a C int")
    return v


def c_str(value, name):
    """value as the bytes of a C string: a str (UTF-8), bytes, or an os.PathLike
    (os.fsencode). C strings end at the first NUL, so one inside the value would
    silently cut it short: that raises ValueError naming the position."""
    if isinstance(value, str):
        raw = value.encode("utf-8", "surrogateescape")
    elif isinstance(value, bytes):
        raw = value
    elif isinstance(value, os.PathLike):
        raw = os.fsencode(value)
    else:
        raise TypeError(f"{name} must be a str, got {type(value).__name__}")
    at = raw.find(b"\0")
    if at >= 0:
        raise ValueError(f"{name} contains a NUL character at byte {at}: C strings end there, "
                         f"so the rest would be ignored")
    return raw


def last_error():
    msg = fn("stof_last_error")()
    return msg.decode("utf-8", "replace") if msg else ""


def call(name, *args):
    """Call a status-returning function; raise StofError unless it returns STOF_OK."""
    status = fn(name)(*args)
    if status != 0:
        raise StofError(status, last_error(), name)
    return status


class Lifetime:
    """The life of an object that owns a C handle, shared between threads: calls
    run inside use() (any number at once, nested in one thread too); close()
    marks the object closed so that new calls raise ValueError, waits for the
    calls in flight, and then lets the caller free the handle. Without it a
    close() in one thread frees what a call in another is still using."""

    def __init__(self, what):
        self._what = what
        self._cond = threading.Condition()
        self._active = 0
        self._closed = False
        self._depth = threading.local()

    @contextlib.contextmanager
    def use(self):
        depth = getattr(self._depth, "n", 0)
        if depth == 0:
            with self._cond:
                if self._closed:
                    raise ValueError(f"{self._what} is closed")
                self._active += 1
        self._depth.n = depth + 1
        try:
            yield
        finally:
            self._depth.n = depth
            if depth == 0:
                with self._cond:
                    self._active -= 1
                    if self._active == 0:
                        self._cond.notify_all()

    def begin_close(self):
        """True once, for the close() that frees: after the calls in flight have
        returned. False when the object was already closed."""
        if getattr(self._depth, "n", 0):
            raise RuntimeError(f"{self._what} cannot be closed from inside one of its calls")
        with self._cond:
            if self._closed:
                return False
            self._closed = True
            while self._active:
                self._cond.wait()
        return True


def in_use(method):
    """Runs a method of an object with a `_life` Lifetime inside its use()."""
    @functools.wraps(method)
    def guarded(self, *args, **kwargs):
        with self._life.use():
            return method(self, *args, **kwargs)
    return guarded
