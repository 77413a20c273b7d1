"""mask.py — mask specs (stof.Mask), masks compiled for a shape (stof.CompiledMask),
and the cache that lets stof.attention reuse a compiled mask across calls.

The cache key is the spec's canonical text when that text says everything (two
Mask objects that print the same are the same mask). Dense parts and per-head
block layouts print as names, so such a spec is keyed by the Mask's identity,
its edit count and the torch version counters of its dense tensors: an
in-place change of a dense mask tensor is never served from a stale entry.
Lengths given as CUDA tensors (for a GPU) are not in the key at all: such an entry
is a reusable mask that reads its lengths from buffers of its own, and a call
copies the lengths it is given into them and rebuilds the mask, both enqueued on
the call's stream, so inside a CUDA graph every replay uses its own lengths. An
eager call skips the copy and rebuild when the buffers already hold the same
tensor (a weak reference, so a dead tensor's reused id never matches, and its
version counter). The cache keeps no tensor of the call: under CUDA graph
capture (torch's reduce-overhead mode) those live in the graph's private pool,
which must hold nothing but the graph's outputs. Masks used under capture are
built off the capture and never evicted, since a graph refers to them.
"""

import atexit
import collections
import ctypes
import itertools
import threading
import time
import weakref
from dataclasses import dataclass

from . import _arrays, _context, _lib

_serials = itertools.count(1)
_exiting = False


def _mark_exiting():
    global _exiting
    _exiting = True


atexit.register(_mark_exiting)


class Mask:
    """A mask spec: a union of parts, built with the methods below (each returns
    the mask, so calls chain) or parsed from the text form:

        stof.Mask().window(128).global_(32)
        stof.Mask.parse("window:128,global:32,random:64x3@7")
        stof.Mask().window(256).global_(64).within("causal")  # a decoder's BigBird

    str(mask) is the canonical text form (dense parts print as "dense").
    """

    def __init__(self, text=None):
        handle = ctypes.c_void_p()
        if text is None:
            _lib.call("stof_mask_spec_create", ctypes.byref(handle))
        else:
            if not isinstance(text, str):
                raise TypeError(f"a mask spec text must be a str, got {type(text).__name__}")
            _lib.call("stof_mask_spec_parse", _lib.c_str(text, "mask spec"), ctypes.byref(handle))
        self._handle = handle
        self._serial = next(_serials)
        self._edits = 0
        self._dense = []  # tensors referenced by dense parts: alive as long as the spec
        self._text = None  # (edits, canonical text)
        self._opaque = False  # the text form does not say everything (per-head blocks)

    @classmethod
    def parse(cls, text):
        """Parse the text form; a malformed text raises StofError (STOF_ERR_PARSE)
        whose message gives the position and the reason."""
        return cls(text)

    @classmethod
    def from_dense(cls, dense):
        """A spec of one dense part: a bool or uint8 0/1 mask [B|1, H|1, Lq, Lk]
        ([Lq, Lk] and [H|1, Lq, Lk] are taken as B = H = 1 / B = 1); a torch tensor
        (CPU or CUDA) or a numpy array. The data is referenced, not copied."""
        return cls().dense(dense)

    # -- building

    def _add(self, fname, *args):
        _lib.call(fname, self._handle, *args)
        self._edits += 1
        return self

    def full(self):
        return self._add("stof_mask_spec_add_full")

    def top_left(self, on=True):
        """Causal, window and dilated parts at query row i itself when Lq != Lk
        (the default is bottom-right: i + Lk - Lq, as FlashAttention aligns)."""
        return self._add("stof_mask_spec_set_align", 1 if on else 0)

    def causal(self):
        return self._add("stof_mask_spec_add_causal")

    def window(self, left, right=None):
        """i-left <= j <= i+right (right defaults to left)."""
        return self._add("stof_mask_spec_add_window", _lib.c_int(left, "left"),
                         _lib.c_int(left if right is None else right, "right"))

    def within(self, left, right=None):
        """Cut the whole union to the band i-left <= j <= i+right (right defaults to
        left), or to j <= i with left="causal": text "within:L:R" / "within:causal".
        Bands intersect: calling it again narrows the band."""
        if left == "causal" and right is None:
            return self._add("stof_mask_spec_within_causal")
        return self._add("stof_mask_spec_within_window", _lib.c_int(left, "left"),
                         _lib.c_int(left if right is None else right, "right"))

    def dilated(self, window, dilation):
        """|i-j| <= window*dilation and (i-j) % dilation == 0."""
        return self._add("stof_mask_spec_add_dilated", _lib.c_int(window, "window"),
                         _lib.c_int(dilation, "dilation"))

    def global_(self, tokens):
        """global(n) when tokens is an int (i < n or j < n), else the listed tokens."""
        if isinstance(tokens, int):
            return self._add("stof_mask_spec_add_global", _lib.c_int(tokens, "n"))
        toks = [_lib.c_int(t, "global token") for t in _arrays.as_int_list(tokens)]
        arr = (ctypes.c_int32 * max(1, len(toks)))(*toks)
        return self._add("stof_mask_spec_add_global_list", arr, len(toks))

    def random(self, block, per_row, seed=0):
        """BigBird random blocks: per_row block columns per block row, from seed."""
        seed = _lib.as_int(seed, "seed")
        if not 0 <= seed < (1 << 64):
            raise ValueError(f"seed = {seed} must be in [0, 2^64)")
        return self._add("stof_mask_spec_add_random", _lib.c_int(block, "block"),
                         _lib.c_int(per_row, "per_row"), ctypes.c_uint64(seed))

    def blocks(self, block_size, layout):
        """A block layout [rows, cols] or [heads, rows, cols] of 0/1 (nested lists,
        numpy array or torch tensor) over block_size x block_size blocks."""
        heads, rows, cols, flat = _layout_bytes(layout)
        buf = (ctypes.c_uint8 * len(flat)).from_buffer_copy(flat)
        self._add("stof_mask_spec_add_blocks", _lib.c_int(block_size, "block_size"), heads, rows,
                  cols, buf)
        if heads > 1:
            self._opaque = True  # per-head layouts print as a name, not their content
        return self

    def dense(self, dense):
        """Add a dense 0/1 part (see from_dense); the tensor is kept alive by the mask."""
        keep, desc = _dense_descriptor(dense)
        self._add("stof_mask_spec_add_dense", ctypes.byref(desc))
        self._dense.append(keep)
        return self

    # -- reading

    @property
    def has_dense(self):
        return bool(self._dense)

    def __str__(self):
        if self._text is not None and self._text[0] == self._edits:
            return self._text[1]
        needed = ctypes.c_size_t(0)
        buf = ctypes.create_string_buffer(256)
        _lib.call("stof_mask_spec_format", self._handle, buf, len(buf), ctypes.byref(needed))
        if needed.value > len(buf):
            buf = ctypes.create_string_buffer(needed.value)
            _lib.call("stof_mask_spec_format", self._handle, buf, len(buf), ctypes.byref(needed))
        text = buf.value.decode("utf-8")
        self._text = (self._edits, text)
        return text

    def __repr__(self):
        return f"stof.Mask({str(self)!r})"

    @property
    def cache_key(self):
        if not self._dense and not self._opaque:
            return ("text", str(self))
        versions = tuple(getattr(t, "_version", 0) for t in self._dense)
        return ("mask", self._serial, self._edits, versions)

    # -- compiling

    def compile(self, batch, heads, len_q, len_k=None, lengths=None, lengths_k=None,
                device="cpu", tile=None, builder="auto", head_dim=0):
        """Compile for one shape on a device ("cpu", "cuda", "cuda:N", torch.device).

        lengths: per-sequence real lengths (list, numpy array or torch tensor of B
        ints; a CUDA tensor is read on the device); lengths_k defaults to lengths
        when len_q == len_k. tile: 16/32/64/128 or (tile_m, tile_n); None lets the
        device choose, with head_dim (the attention's, 0 if unknown) as a hint.
        Always compiles (no cache): stof.attention caches for you."""
        ctx = _context.get(device)
        return CompiledMask(self, ctx, batch, heads, len_q, len_q if len_k is None else len_k,
                            lengths, lengths_k, tile, builder, head_dim)

    def __del__(self):
        handle = getattr(self, "_handle", None)
        if handle and handle.value and not _exiting:
            try:
                _lib.fn("stof_mask_spec_destroy")(handle)
            except Exception:
                pass
            self._handle = None


def _layout_bytes(layout):
    """(heads, rows, cols, bytes) from a 2-D or 3-D 0/1 layout."""
    if hasattr(layout, "tolist"):
        if _arrays.is_torch(layout):
            layout = layout.detach().cpu()
        layout = layout.tolist()
    layout = [list(r) for r in layout]
    if layout and layout[0] and isinstance(layout[0][0], (list, tuple)):
        planes = [[list(r) for r in plane] for plane in layout]
    else:
        planes = [layout]
    heads, rows = len(planes), len(planes[0]) if planes else 0
    cols = len(planes[0][0]) if rows else 0
    if heads == 0 or rows == 0 or cols == 0:
        raise ValueError("a block layout needs at least one row and one column")
    flat = bytearray()
    for h, plane in enumerate(planes):
        if len(plane) != rows or any(len(r) != cols for r in plane):
            raise ValueError(f"block layout plane {h} is not {rows} x {cols}")
        for r in plane:
            flat.extend(1 if v else 0 for v in r)
    return heads, rows, cols, bytes(flat)


def _dense_descriptor(dense):
    """(object to keep alive, _lib.Tensor) for a dense 0/1 mask."""
    if _arrays.is_torch(dense):
        torch = _arrays.torch_module()
        if dense.dtype not in (torch.bool, torch.uint8):
            raise TypeError(f"a dense mask must be bool or uint8 (1 = visible), got {dense.dtype}")
        if not 2 <= dense.dim() <= 4:
            raise ValueError(f"a dense mask is [B|1, H|1, Lq, Lk], got shape {tuple(dense.shape)}")
        x = dense.contiguous()
        if x.dtype == torch.bool:
            x = x.view(torch.uint8)
        x = x.reshape((1,) * (4 - x.dim()) + tuple(x.shape))
    elif _arrays.is_numpy(dense):
        np = _arrays.numpy_module()
        if dense.dtype not in (np.bool_, np.uint8):
            raise TypeError(f"a dense mask must be bool or uint8 (1 = visible), got {dense.dtype}")
        if not 2 <= dense.ndim <= 4:
            raise ValueError(f"a dense mask is [B|1, H|1, Lq, Lk], got shape {dense.shape}")
        x = np.ascontiguousarray(dense).view(np.uint8)
        x = x.reshape((1,) * (4 - x.ndim) + x.shape)
    else:
        raise TypeError(f"a dense mask is a torch tensor or numpy array, got "
                        f"{type(dense).__name__}")
    return x, _arrays.describe(x)


@dataclass(frozen=True)
class MaskStats:
    """Exact statistics of a compiled mask (see stof_mask_stats in stof.h)."""
    instances: int
    tile_m: int
    tile_n: int
    tiles_total: int
    tiles_full: int
    tiles_partial: int
    nnz: int
    tile_density: float
    density: float


def _lengths_descriptor(lengths, ctx):
    """(object to keep alive, _lib.Tensor) for per-sequence lengths, or (None, None)."""
    if lengths is None:
        return None, None
    if _arrays.is_torch(lengths):
        torch = _arrays.torch_module()
        on_gpu = lengths.device.type == "cuda" and ctx.kind == "cuda"
        if (lengths.dtype == torch.int32 and lengths.is_contiguous() and
                (lengths.device.index == ctx.index if on_gpu else lengths.device.type == "cpu")):
            t = lengths  # already what the compiler reads: no conversion call
        elif on_gpu:
            t = lengths.to(device=f"cuda:{ctx.index}", dtype=torch.int32).contiguous()
        else:
            t = lengths.to(device="cpu", dtype=torch.int32).contiguous()
        return t, _arrays.describe(t)
    if _arrays.is_numpy(lengths):
        np = _arrays.numpy_module()
        arr = np.ascontiguousarray(lengths, dtype=np.int32)
        return arr, _arrays.describe(arr)
    host = _arrays.Int32Host(_arrays.as_int_list(lengths))
    return host, host.tensor


def _tile_pair(tile):
    if tile is None:
        return 0, 0
    if isinstance(tile, int):
        tile = (tile, tile)
    m, n = tile
    return _lib.c_int(m, "tile_m"), _lib.c_int(n, "tile_n")


class CompiledMask:
    """A mask compiled to stof's two-level tile format for one (B, H, Lq, Lk,
    lengths) on one device. compile_time is the host time of the compile call in
    seconds (a GPU compile is enqueued, so this is not the device time)."""

    def __init__(self, mask, ctx, batch, heads, len_q, len_k, lengths=None, lengths_k=None,
                 tile=None, builder="auto", head_dim=0, reusable=False):
        if builder not in _lib.BUILDERS:
            raise ValueError(f"builder must be one of {sorted(_lib.BUILDERS)}, got {builder!r}")
        self.mask, self.ctx = mask, ctx
        self.batch, self.heads = _lib.c_int(batch, "batch"), _lib.c_int(heads, "heads")
        self.len_q, self.len_k = _lib.c_int(len_q, "len_q"), _lib.c_int(len_k, "len_k")
        self._handle = None
        keep_q, desc_q = _lengths_descriptor(lengths, ctx)
        keep_k, desc_k = _lengths_descriptor(lengths_k, ctx)
        self._keep = (keep_q, keep_k, desc_q, desc_k)
        params = _lib.fn("stof_mask_default_params")()
        params.batch, params.heads = self.batch, self.heads
        params.len_q, params.len_k = self.len_q, self.len_k
        params.lengths_q = ctypes.pointer(desc_q) if desc_q is not None else None
        params.lengths_k = ctypes.pointer(desc_k) if desc_k is not None else None
        params.tile_m, params.tile_n = _tile_pair(tile)
        params.builder = _lib.BUILDERS[builder]
        params.head_dim = _lib.c_int(head_dim, "head_dim")
        params.reusable = 1 if reusable else 0
        handle = ctypes.c_void_p()
        ctx.follow_torch_stream()
        start = time.perf_counter()
        _lib.call("stof_mask_compile", ctx.handle, mask._handle, ctypes.byref(params),
                  ctypes.byref(handle))
        self.compile_time = time.perf_counter() - start
        self._handle = handle
        self.last_stream = ctx.stream  # where it was last used: freed there, in order
        self._stats = None

    @property
    def device(self):
        return "cpu" if self.ctx.kind == "cpu" else f"cuda:{self.ctx.index}"

    @property
    def handle(self):
        if self._handle is None:
            raise ValueError("this compiled mask was closed")
        return self._handle

    def stats(self):
        """MaskStats (synchronises the device the first time, then cached)."""
        if self._stats is None:
            out = _lib.MaskStatsC()
            self.ctx.use_stream(self.last_stream)
            _lib.call("stof_mask_stats_get", self.handle, ctypes.byref(out))
            self._stats = MaskStats(*(getattr(out, f) for f, _ in _lib.MaskStatsC._fields_))
        return self._stats

    def decode(self, b=0, h=0):
        """Instance (b, h) as a dense 0/1 plane: a uint8 numpy array [Lq, Lk]
        when numpy is importable, else a bytes object of Lq*Lk bytes."""
        n = self.len_q * self.len_k
        buf = (ctypes.c_uint8 * n)()
        self.ctx.use_stream(self.last_stream)
        _lib.call("stof_mask_decode", self.handle, _lib.c_int(b, "b"), _lib.c_int(h, "h"), buf, n)
        try:
            import numpy as np
        except ImportError:
            return bytes(buf)
        return np.frombuffer(buf, dtype=np.uint8).reshape(self.len_q, self.len_k).copy()

    def close(self):
        """Free the compiled mask, ordered after the work that last used it: on
        a GPU the memory is released on the stream of its last use."""
        if self._handle is not None and self._handle.value and not _exiting:
            self.ctx.use_stream(self.last_stream)
            _lib.fn("stof_mask_destroy")(self._handle)
        self._handle = None

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass

    def __repr__(self):
        return (f"stof.CompiledMask({str(self.mask)!r}, B={self.batch}, H={self.heads}, "
                f"Lq={self.len_q}, Lk={self.len_k}, device={self.device!r})")


# ---------------------------------------------------------------- the cache

class _Fed:
    """A reusable GPU mask whose lengths are buffers of its own (int32, from torch's ordinary
    allocator): feed() copies a call's lengths into them and rebuilds the mask on the
    call's stream, which a CUDA graph captures like any other work."""

    def __init__(self, compiled, buffers):
        self.compiled, self.buffers = compiled, buffers
        self.held = None  # ((weak reference, version), ...) of the lengths the buffers hold

    def holds(self, sources):
        """Whether the buffers hold these very tensors, unchanged since."""
        return self.held is not None and len(self.held) == len(sources) and all(
            ref() is src and src._version == version
            for (ref, version), src in zip(self.held, sources))

    def feed(self, values, ctx, sources, remember):
        torch = _arrays.torch_module()
        self.held = None  # until the copies and the rebuild are enqueued
        for buf, x in zip(self.buffers, values):
            if buf is None:
                continue
            x = x if _arrays.is_torch(x) else torch.as_tensor(_arrays.as_int_list(x))
            if tuple(x.shape) != tuple(buf.shape):
                raise ValueError(f"lengths must have shape [{buf.shape[0]}] (one per sequence), "
                                 f"got {tuple(x.shape)}")
            buf.copy_(x, non_blocking=True)
            if remember:  # freed on eviction: not reused before this stream is past it
                buf.record_stream(torch.cuda.current_stream(buf.device))
        ctx.follow_torch_stream()
        _lib.call("stof_mask_rebuild", self.compiled.handle)
        self.compiled.last_stream = ctx.stream
        self.held = _identity(sources) if remember else None


def _identity(tensors):
    """Weak references and version counters: what holds() compares, keeping nothing alive."""
    return tuple((weakref.ref(t), t._version) for t in tensors)


def _capturing(ctx):
    """Whether torch is capturing a CUDA graph on its current stream of ctx's GPU."""
    torch = _arrays.torch_module()
    return ctx.kind == "cuda" and torch is not None and torch.cuda.is_current_stream_capturing()


def _off_capture(ctx, build):
    """build() on a thread of its own, on a stream of its own, waited for: neither torch
    (which gives the capturing thread's allocations to the graph's private pool) nor the
    capture (which forbids that thread allocation calls and would record the build into
    the graph) sees it. Eager calls use it too, so that a buffer never comes from a pool."""
    torch = _arrays.torch_module()
    result = {}

    def run():
        try:
            torch.cuda.set_device(ctx.index)
            side = torch.cuda.Stream()
            with torch.cuda.stream(side):
                result["value"] = build()
            side.synchronize()
        except BaseException as e:  # re-raised by the caller's thread
            result["error"] = e

    worker = threading.Thread(target=run, name="stof-mask-build")
    worker.start()
    worker.join()
    error = result.get("error")
    if error is not None and _capturing(ctx):
        raise RuntimeError(f"stof could not build a mask beside the CUDA graph capture: {error} "
                           "(a capture in 'global' mode forbids other threads' allocations; "
                           "capture with capture_error_mode='thread_local', as torch.compile "
                           "does)") from error
    if error is not None:
        raise error
    return result["value"]


def _fed_source(x, ctx):
    return _arrays.is_torch(x) and x.device.type == "cuda" and ctx.kind == "cuda"


class _Cache:
    """LRU of compiled masks, and the masks CUDA graphs use (kept for good)."""

    def __init__(self, capacity=64):
        self.capacity = capacity
        self.lock = threading.Lock()
        self.entries = collections.OrderedDict()
        self.pinned = {}  # used under CUDA graph capture: a graph may replay them any time
        self.parsed = collections.OrderedDict()  # spec text -> Mask
        self.hits = self.misses = 0

    def parse(self, text):
        with self.lock:
            m = self.parsed.get(text)
            if m is not None:
                self.parsed.move_to_end(text)
                return m
        m = Mask.parse(text)
        with self.lock:
            self.parsed[text] = m
            while len(self.parsed) > self.capacity:
                self.parsed.popitem(last=False)
        return m

    def get(self, mask, batch, heads, len_q, len_k, lengths, lengths_k, ctx, derived=None,
            head_dim=0):
        """The compiled mask for this shape, compiling on a miss. derived =
        (sources, make): the lengths are computed by make() from a tuple of
        sources (e.g. cu_seqlens), only when they are needed."""
        if derived is not None:
            sources, make = derived
        else:
            sources = tuple(x for x in (lengths, lengths_k) if x is not None)

            def make():
                return lengths, lengths_k
        capturing = _capturing(ctx)
        fed = bool(sources) and all(_fed_source(x, ctx) for x in sources)
        if fed:  # one entry per stream (and for capture), filled from the call's lengths
            has = (derived is not None or lengths is not None,
                   derived is not None and len(sources) > 1 or lengths_k is not None)
            lkey = ("fed", has, capturing, ctx.torch_stream())
        elif derived is not None:
            lkey = ("derived",) + tuple(_lengths_key(src) for src in sources)
        else:
            lkey = (_lengths_key(lengths), _lengths_key(lengths_k))
        key = (mask.cache_key, batch, heads, len_q, len_k, lkey, (ctx.kind, ctx.index), head_dim)
        entry = self._lookup(key, capturing)
        if entry is None:
            entry = self._build(mask, batch, heads, len_q, len_k, ctx, head_dim, fed and has,
                                make, capturing)
            self._store(key, entry, capturing)
        if not fed:
            return entry[0]
        if not entry[0].holds(sources):
            entry[0].feed(make(), ctx, sources, remember=not capturing)
        return entry[0].compiled

    def _lookup(self, key, capturing):
        with self.lock:
            hit = self.pinned.get(key)
            if hit is None:
                hit = self.entries.get(key)
                if hit is not None:
                    self.entries.move_to_end(key)
                    if capturing:  # a graph refers to it from now on
                        self.pinned[key] = self.entries.pop(key)
            if hit is None:
                self.misses += 1
            else:
                self.hits += 1
            return hit

    def _store(self, key, entry, capturing):
        with self.lock:
            if capturing:
                self.pinned[key] = entry
                return
            self.entries[key] = entry
            while len(self.entries) > self.capacity:
                self.entries.popitem(last=False)

    def _build(self, mask, batch, heads, len_q, len_k, ctx, head_dim, fed, make, capturing):
        """(compiled or _Fed, what it refers to)."""
        if fed:
            def build():
                torch = _arrays.torch_module()
                buffers = tuple(None if not given else
                                torch.zeros(batch, dtype=torch.int32, device=f"cuda:{ctx.index}")
                                for given in fed)
                compiled = CompiledMask(mask, ctx, batch, heads, len_q, len_k, buffers[0],
                                        buffers[1], head_dim=head_dim, reusable=True)
                return _Fed(compiled, buffers)
            return _off_capture(ctx, build), mask
        lengths, lengths_k = make()

        def build():
            return CompiledMask(mask, ctx, batch, heads, len_q, len_k, lengths, lengths_k,
                                head_dim=head_dim)
        return (_off_capture(ctx, build) if capturing else build()), (mask, lengths, lengths_k)

    def clear(self):
        """Drops the LRU's entries and parsed specs (not the masks graphs may replay)."""
        with self.lock:
            self.entries.clear()
            self.parsed.clear()
            self.hits = self.misses = 0


def _lengths_key(lengths):
    if lengths is None:
        return None
    return ("values", tuple(_arrays.as_int_list(lengths)))


cache = _Cache()


def as_mask(mask):
    """A Mask from a Mask, a spec text or None (every pair visible)."""
    if mask is None:
        return cache.parse("full")
    if isinstance(mask, Mask):
        return mask
    if isinstance(mask, str):
        return cache.parse(mask)
    raise TypeError(f"mask must be a stof.Mask, a CompiledMask, a spec string or None, "
                    f"got {type(mask).__name__}")


def clear_cache():
    """Drop every cached compiled mask and parsed spec."""
    cache.clear()


def cache_info():
    """(hits, misses, entries) of the compiled-mask cache."""
    with cache.lock:
        return cache.hits, cache.misses, len(cache.entries)
