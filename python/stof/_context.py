"""_context.py — one stof_ctx per device, made on first use and kept for the
life of the process.

A GPU context runs on whatever stream torch calls current: before each call the
binding points the context at torch.cuda.current_stream(), so stof's kernels
order with the caller's torch work exactly as a torch op would. Contexts are
never destroyed: their streams belong to torch, and tearing CUDA objects down
during interpreter exit races the runtime's own shutdown.
"""

import ctypes
import threading

from . import _arrays, _lib

_lock = threading.Lock()
_contexts = {}
_OWN_STREAM = object()  # the stream the context made itself, before torch's was set


def parse_device(device):
    """("cpu", 0) or ("cuda", index) from "cpu", "cuda", "cuda:1", "gpu", a torch.device
    or None (the CPU)."""
    if device is None:
        return ("cpu", 0)
    if isinstance(device, tuple) and len(device) == 2:
        return (str(device[0]), int(device[1]))
    torch = _arrays.torch_module()
    if torch is not None and isinstance(device, torch.device):
        if device.type == "cuda" and device.index is not None:
            return ("cuda", device.index)
        device = str(device)
    if isinstance(device, int):
        return ("cuda", device)
    if not isinstance(device, str):
        raise TypeError(f"device must be 'cpu', 'cuda', 'cuda:N' or a torch.device, got {device!r}")
    kind, _, index = device.partition(":")
    kind = {"gpu": "cuda"}.get(kind, kind)
    if kind == "cpu":
        return ("cpu", 0)
    if kind != "cuda":
        raise ValueError(f"unknown device {device!r} (expected 'cpu', 'cuda' or 'cuda:N')")
    if index:
        return ("cuda", int(index))
    if torch is not None and torch.cuda.is_available():
        return ("cuda", torch.cuda.current_device())
    return ("cuda", 0)


class Context:
    """A stof_ctx on one device."""

    def __init__(self, kind, index):
        self.kind, self.index = kind, index
        params = _lib.fn("stof_ctx_default_params")()
        if kind == "cpu":
            params.device = _lib.DEVICE_CPU
        else:
            params.device = _lib.DEVICE_GPU
            params.gpu_index = index
        handle = ctypes.c_void_p()
        with _torch_device_kept():
            _lib.call("stof_ctx_create", ctypes.byref(params), ctypes.byref(handle))
        self.handle = handle
        self._stream = _OWN_STREAM
        self._current_stream = None  # torch's reader of its current stream, once torch is seen

    @property
    def name(self):
        raw = _lib.fn("stof_ctx_device_name")(self.handle)
        return raw.decode() if raw else ""

    def torch_stream(self):
        """The raw handle of torch's current stream on this context's GPU (0: the
        legacy default stream), or None on the CPU or without torch's CUDA."""
        if self.kind != "cuda":
            return None
        read = self._current_stream
        if read is None:
            torch = _arrays.torch_module()
            if torch is None or not torch.cuda.is_available():
                return None
            # The raw handle without building a torch.cuda.Stream (a few microseconds a
            # call, on the critical path of a small forward); the public call where torch
            # lacks it. Found once: torch and its CUDA support do not change in a process.
            read = getattr(torch._C, "_cuda_getCurrentRawStream", None) or \
                (lambda i: torch.cuda.current_stream(i).cuda_stream)
            self._current_stream = read
        return read(self.index)

    def follow_torch_stream(self):
        """Point a GPU context at torch's current stream on its device. The
        handle may be 0 (the legacy default stream), which is set like any other."""
        stream = self.torch_stream()
        if stream is not None:
            self.use_stream(stream)

    @property
    def stream(self):
        """The stream handle work is enqueued on (None: the context's own)."""
        return None if self._stream is _OWN_STREAM else self._stream

    def use_stream(self, stream):
        if self.kind == "cuda" and stream is not None and stream != self._stream:
            _lib.call("stof_ctx_set_stream", self.handle, ctypes.c_void_p(stream or None))
            self._stream = stream

    def synchronize(self):
        _lib.call("stof_ctx_synchronize", self.handle)


class _torch_device_kept:
    """stof selects its GPU with cudaSetDevice; put torch's current device back after."""

    def __enter__(self):
        torch = _arrays.torch_module()
        self.torch = torch if torch is not None and torch.cuda.is_available() else None
        self.prev = self.torch.cuda.current_device() if self.torch else None
        return self

    def __exit__(self, *exc):
        if self.torch is not None:
            self.torch.cuda.set_device(self.prev)
        return False


def get(device):
    """The context for a device spec (see parse_device), made on first use."""
    key = parse_device(device)
    ctx = _contexts.get(key)
    if ctx is None:
        with _lock:
            ctx = _contexts.get(key)
            if ctx is None:
                ctx = Context(*key)
                _contexts[key] = ctx
    return ctx
