"""model.py — stof.Model: a model folder of any family stof runs (BERT, GPT-2, LLaMA /
Mistral / Qwen2, ModernBERT; Hugging Face or sentence-transformers layout, sharded or not)
loaded into stof, with its WordPiece tokenizer where it has one.

    model = stof.Model.from_pretrained("models/all-MiniLM-L6-v2")
    emb = model.encode(["A man is playing a guitar.", "Someone plays music."])
    hidden = model(input_ids, attention_mask, mask="window:64")   # torch tensors
    logits = model.logits(input_ids, attention_mask)              # decoders: [B, vocab]

encode() follows sentence-transformers: texts sorted by length so that batches pad little,
tokenized by the C tokenizer (truncated at the folder's max_seq_length), the folder's
pooling, L2 normalisation when it has a Normalize module; it needs numpy only (torch is
imported only for as_torch=True, and for normalize=False on a model that normalises, which
pools the hidden states itself). model(...) takes torch tensors and returns the last
hidden state on the model's device, in its run dtype (float32 on the CPU).

The C calls are declared here and added to _lib's table, so they bind lazily like the rest.
"""

import ctypes
import os
import threading
from ctypes import POINTER, Structure, c_char_p, c_float, c_int, c_int32, c_size_t, c_void_p

from . import _arrays, _context, _lib
from . import mask as _mask_module
from .attention import _on_device
from .mask import as_mask


class _ModelParams(Structure):
    _fields_ = [("dtype", c_int), ("tune_cache", ctypes.c_char_p), ("tune_cache_off", c_int)]


class _ModelInfo(Structure):
    _fields_ = [("hidden", c_int), ("layers", c_int), ("heads", c_int), ("head_dim", c_int),
                ("intermediate", c_int), ("vocab", c_int), ("max_positions", c_int),
                ("type_vocab", c_int), ("layer_norm_eps", c_float), ("dtype", c_int),
                ("pooling", c_int), ("normalize", c_int), ("family", ctypes.c_char * 16),
                ("model_type", ctypes.c_char * 32), ("kv_heads", c_int), ("is_decoder", c_int)]


_P = POINTER


class _ForwardParams(Structure):
    _fields_ = [("mask", c_void_p), ("eager", c_int), ("attention_mask", _P(_lib.Tensor)),
                ("logits", _P(_lib.Tensor)), ("logits_all", c_int)]


class _EmbedParams(Structure):
    _fields_ = [("batch", c_int), ("max_length", c_int), ("mask", c_void_p)]


_T = _P(_lib.Tensor)
_lib._SIGNATURES.update({
    "stof_model_default_params": (_ModelParams, []),
    "stof_model_load": (c_int, [c_void_p, c_char_p, _P(_ModelParams), _P(c_void_p)]),
    "stof_model_destroy": (None, [c_void_p]),
    "stof_model_get_info": (c_int, [c_void_p, _P(_ModelInfo)]),
    "stof_forward_default_params": (_ForwardParams, []),
    "stof_model_forward": (c_int, [c_void_p, _P(_ForwardParams), _T, _T, _T, _T, _T]),
    "stof_embed_default_params": (_EmbedParams, []),
    "stof_model_embed": (c_int, [c_void_p, c_void_p, _P(c_char_p), _P(c_size_t), ctypes.c_int64,
                                 _P(_EmbedParams), _P(c_float)]),
    "stof_tokenizer_open": (c_int, [c_char_p, _P(c_void_p)]),
    "stof_tokenizer_destroy": (None, [c_void_p]),
    "stof_tokenizer_max_length": (c_int, [c_void_p, c_int]),
    "stof_tokenize_batch": (c_int, [c_void_p, _P(c_char_p), _P(c_size_t), c_int, c_int,
                                    _P(c_int32), c_size_t, _P(c_int32), _P(c_int)]),
})

_DTYPE_NAMES = {_lib.F32: "float32", _lib.F16: "float16", _lib.BF16: "bfloat16"}
_ITEM_BYTES = {_lib.F32: 4, _lib.F16: 2, _lib.BF16: 2}
# Outputs of at most this many bytes (BERT-base up to 16 x 128 tokens in f16) are
# allocated one call ahead (Model._prepare_output).
_READY_BYTES = 4 << 20
# Shapes whose C arguments a model keeps ready (Model._prepared); past that it starts over.
_PREPARED_SHAPES = 16
_DTYPE_ALIASES = {"float32": _lib.F32, "fp32": _lib.F32, "f32": _lib.F32, "float": _lib.F32,
                  "float16": _lib.F16, "fp16": _lib.F16, "f16": _lib.F16, "half": _lib.F16,
                  "bfloat16": _lib.BF16, "bf16": _lib.BF16}
_POOLING_NAMES = {0: "mean", 1: "cls", 2: "lasttoken"}


def _dtype_code(dtype):
    """F16/BF16/F32 from None, a name ("float16", "bf16"), a torch or a numpy dtype."""
    if dtype is None:
        return None
    name = str(dtype).lower()
    name = name[len("torch."):] if name.startswith("torch.") else name
    if name not in _DTYPE_ALIASES:
        raise ValueError(f"dtype must be float16, bfloat16 or float32, got {dtype!r}")
    return _DTYPE_ALIASES[name]


def _default_device(device):
    if device is not None:
        return device
    return "cuda" if int(_lib.fn("stof_gpu_count")()) > 0 else "cpu"


def _utf8(text, i):
    if not isinstance(text, str):
        raise TypeError(f"texts must be str, got {type(text).__name__} at index {i}")
    # Lone surrogates pass through as bytes the tokenizer reads as invalid UTF-8 (and drops).
    return text.encode("utf-8", "surrogatepass")


class Tokenizer:
    """The WordPiece tokenizer of a model folder (the C tokenizer, ids identical to
    Hugging Face's BertTokenizerFast)."""

    def __init__(self, path):
        handle = c_void_p()
        _lib.call("stof_tokenizer_open", os.fsencode(path), ctypes.byref(handle))
        self._handle = handle

    def max_length(self, max_positions=0):
        """The truncation length sentence-transformers uses ([CLS] and [SEP] included),
        at most max_positions when that is > 0."""
        return int(_lib.fn("stof_tokenizer_max_length")(self._handle, int(max_positions)))

    def batch(self, texts, max_length):
        """(ids int32 [B, L], lengths int32 [B]) numpy arrays: a right-padded batch."""
        import numpy as np
        raw = [_utf8(t, i) for i, t in enumerate(texts)]
        n = len(raw)
        if n == 0:
            raise ValueError("no texts to tokenize")
        max_length = _lib.c_int(max_length, "max_length")
        ptrs = (c_char_p * n)(*raw)
        lens = (c_size_t * n)(*[len(b) for b in raw])
        ids = np.empty(n * max_length, dtype=np.int32)
        lengths = np.empty(n, dtype=np.int32)
        seq_len = c_int(0)
        _lib.call("stof_tokenize_batch", self._handle, ptrs, lens, _lib.c_int(n, "batch"),
                  max_length, ids.ctypes.data_as(_P(c_int32)), ids.size,
                  lengths.ctypes.data_as(_P(c_int32)), ctypes.byref(seq_len))
        L = seq_len.value
        return ids[:n * L].reshape(n, L), lengths

    def close(self):
        if self._handle is not None and self._handle.value and not _mask_module._exiting:
            _lib.fn("stof_tokenizer_destroy")(self._handle)
        self._handle = None

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass


def _torch():
    import torch
    return torch


class _Prepared:
    """The C arguments of a forward on device ids and attention mask of one shape and
    dtype pair, built once: a call fills in the three data pointers. Used under the
    model's lock (the structures are shared by the calls of that shape)."""

    __slots__ = ("ids", "am", "hidden", "params", "args")

    def __init__(self, model, B, L, ids_code, am_code):
        H = model._info.hidden
        self.ids = _device_tensor(ids_code, (B, L), (L, 1))
        self.am = _device_tensor(am_code, (B, L), (L, 1))
        self.hidden = _device_tensor(model._info.dtype, (B, L, H), (L * H, H, 1))
        self.params = _ForwardParams.from_buffer_copy(model._params)
        self.params.attention_mask = ctypes.pointer(self.am)
        ref = ctypes.byref
        self.args = (model._handle, ref(self.params), ref(self.ids), None, None,
                     ref(self.hidden), None)


def _device_tensor(code, shape, stride):
    t = _lib.Tensor(None, code, _lib.MEM_DEVICE, len(shape))
    t.shape[:len(shape)] = shape
    t.stride[:len(shape)] = stride
    return t


class Model:
    """A model loaded by stof (any supported family). Make one with
    Model.from_pretrained(dir)."""

    def __init__(self, path, ctx, handle):
        self.path = path
        self._ctx = ctx
        self._handle = handle
        self._lock = threading.Lock()  # a model's forward scratch is not shared between calls
        self._tokenizer = None
        info = _ModelInfo()
        _lib.call("stof_model_get_info", handle, ctypes.byref(info))
        self._info = info
        self.device = "cpu" if ctx.kind == "cpu" else f"cuda:{ctx.index}"
        # What every call needs, worked out once: the GPU index tensors may live on
        # (-1: none, torch's get_device() of a CPU tensor), the default forward
        # parameters, and torch's device and output dtype (at the first call).
        self._gpu_index = -1 if ctx.kind == "cpu" else ctx.index
        self._params = _lib.fn("stof_forward_default_params")()
        self._out = None
        # The fast path of a call on device tensors (Model._call_device): C arguments
        # per (shape, ids dtype, mask dtype), and [(tensor, stream)] or []: the next
        # call's output, a list so that taking and replacing it are each one atomic
        # step when threads share the model.
        self._prepared = {}
        self._ready = []

    @classmethod
    def from_pretrained(cls, path, device=None, dtype=None):
        """Load a model folder: config.json + model.safetensors (the sentence-transformers
        layout too: modules.json, 1_Pooling, Normalize). device: "cpu", "cuda", "cuda:N" or a
        torch.device (default: the GPU when stof sees one, else the CPU). dtype: the GPU run
        dtype, float16 (default) or bfloat16; the CPU always computes in float32.
        A missing or malformed folder raises StofError naming the file and the problem."""
        if not isinstance(path, (str, bytes, os.PathLike)):
            raise TypeError(f"path must be a folder path, got {type(path).__name__}")
        path = os.fsdecode(path)
        code = _dtype_code(dtype)
        ctx = _context.get(_default_device(device))
        params = _lib.fn("stof_model_default_params")()
        if code is not None:
            params.dtype = code
        handle = c_void_p()
        with _on_device(ctx):
            ctx.follow_torch_stream()
            _lib.call("stof_model_load", ctx.handle, os.fsencode(path), ctypes.byref(params),
                      ctypes.byref(handle))
        return cls(path, ctx, handle)

    # -- description

    @property
    def info(self):
        """The model's dimensions and settings as a dict."""
        i = self._info
        return {"hidden": i.hidden, "layers": i.layers, "heads": i.heads, "head_dim": i.head_dim,
                "intermediate": i.intermediate, "vocab": i.vocab,
                "max_positions": i.max_positions, "type_vocab": i.type_vocab,
                "layer_norm_eps": float(i.layer_norm_eps),
                "dtype": _DTYPE_NAMES.get(i.dtype, str(i.dtype)),
                "pooling": _POOLING_NAMES.get(i.pooling, str(i.pooling)),
                "normalize": bool(i.normalize), "device": self.device,
                "family": i.family.decode(), "model_type": i.model_type.decode(),
                "kv_heads": i.kv_heads, "is_decoder": bool(i.is_decoder)}

    @property
    def tokenizer(self):
        """The folder's Tokenizer, loaded on first use (StofError when the folder has none)."""
        self._check_open()
        if self._tokenizer is None:
            self._tokenizer = Tokenizer(self.path)
        return self._tokenizer

    @property
    def max_length(self):
        """Tokens per text encode() keeps: the folder's max_seq_length, within the positions."""
        return self.tokenizer.max_length(self._info.max_positions)

    def _max_length(self, max_length):
        if max_length is None:
            return self.max_length
        max_length = int(max_length)
        if not 2 <= max_length <= self._info.max_positions:
            raise ValueError(f"max_length {max_length} is outside [2, {self._info.max_positions}] "
                             f"(the model's max_position_embeddings)")
        return max_length

    def tokenize(self, texts, max_length=None, return_tensors="np"):
        """{"input_ids", "attention_mask"} of a right-padded batch, as numpy int32 arrays
        (return_tensors="np") or torch int64 tensors ("pt"), ready for model(**batch)."""
        if isinstance(texts, str):
            texts = [texts]
        ids, lengths = self.tokenizer.batch(list(texts), self._max_length(max_length))
        import numpy as np
        attn = (np.arange(ids.shape[1])[None, :] < lengths[:, None]).astype(np.int32)
        if return_tensors == "np":
            return {"input_ids": ids, "attention_mask": attn}
        if return_tensors == "pt":
            torch = _torch()
            return {"input_ids": torch.from_numpy(ids).long(),
                    "attention_mask": torch.from_numpy(attn).long()}
        raise ValueError(f"return_tensors must be 'np' or 'pt', got {return_tensors!r}")

    # -- running

    def _forward(self, ids, lengths, types, hidden, pooled, mask, attention_mask=None,
                 logits=None, logits_all=False):
        """One stof_model_forward; arguments are stof tensor descriptions (or None)."""
        params = _ForwardParams.from_buffer_copy(self._params)
        spec = None if mask is None else as_mask(mask)
        params.mask = spec._handle if spec is not None else None
        if attention_mask is not None:
            params.attention_mask = ctypes.pointer(attention_mask)
        if logits is not None:
            params.logits = ctypes.pointer(logits)
            params.logits_all = 1 if logits_all else 0

        def ref(t):
            return ctypes.byref(t) if t is not None else None

        with self._lock, _on_device(self._ctx):
            self._ctx.follow_torch_stream()
            _lib.call("stof_model_forward", self._handle, ctypes.byref(params), ref(ids),
                      ref(lengths), ref(types), ref(hidden), ref(pooled))

    def _pool_from_hidden(self, ids, lengths, mask):
        """Pooled, unnormalised embeddings from the last hidden state (numpy)."""
        import numpy as np
        B, L = ids.shape
        H = self._info.hidden
        if self._ctx.kind == "cpu":
            hidden = np.empty((B, L, H), dtype=np.float32)
        else:
            torch = _torch()
            hidden = torch.empty((B, L, H), dtype=torch.float32, device=self.device)
        self._forward(_arrays.describe(ids), _arrays.describe(lengths), None,
                      _arrays.describe(hidden), None, mask)
        if not isinstance(hidden, np.ndarray):
            hidden = hidden.cpu().numpy()
        if self._info.pooling == 1:
            return hidden[:, 0, :].copy()
        if self._info.pooling == 2:
            last = np.maximum(lengths, 1) - 1
            return (hidden[np.arange(B), last, :] * (lengths > 0)[:, None]).astype(np.float32)
        valid = np.arange(L)[None, :] < lengths[:, None]
        sums = (hidden * valid[:, :, None]).sum(axis=1)
        return (sums / np.maximum(lengths, 1)[:, None]).astype(np.float32)

    def _embed(self, texts, batch_size, max_len, mask, out):
        """stof_model_embed: the library's embedding pipeline (shared with `stof embed`)."""
        raw = [_utf8(t, i) for i, t in enumerate(texts)]
        n = len(raw)
        ptrs = (c_char_p * n)(*raw)
        lens = (c_size_t * n)(*[len(b) for b in raw])
        params = _lib.fn("stof_embed_default_params")()
        params.batch = _lib.c_int(batch_size, "batch_size")
        params.max_length = max_len
        spec = None if mask is None else as_mask(mask)
        params.mask = spec._handle if spec is not None else None
        with self._lock, _on_device(self._ctx):
            self._ctx.follow_torch_stream()
            _lib.call("stof_model_embed", self._handle, self.tokenizer._handle, ptrs, lens, n,
                      ctypes.byref(params), out.ctypes.data_as(_P(c_float)))

    def encode(self, sentences, batch_size=32, normalize=None, as_torch=False, max_length=None,
               mask=None):
        """Sentence embeddings as sentence-transformers computes them: a float32 numpy
        array [N, hidden] ([hidden] for a single str), or a torch tensor on the model's
        device with as_torch=True. normalize: None follows the folder (L2 when it has a
        Normalize module); True / False force it. max_length: truncation (default: the
        folder's max_seq_length). mask: an attention mask spec (default dense)."""
        import numpy as np
        self._check_open()
        single = isinstance(sentences, str)
        texts = [sentences] if single else list(sentences)
        for i, t in enumerate(texts):
            if not isinstance(t, str):
                raise TypeError(f"sentences must be str, got {type(t).__name__} at index {i}")
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"batch_size must be a positive int, got {batch_size!r}")
        max_len = self._max_length(max_length)
        H = self._info.hidden
        out = np.empty((len(texts), H), dtype=np.float32)
        model_normalizes = bool(self._info.normalize)
        if texts and (normalize is None or bool(normalize) == model_normalizes):
            self._embed(texts, batch_size, max_len, mask, out)
        else:
            # The folder's normalisation overridden: pool the hidden states here.
            order = sorted(range(len(texts)), key=lambda i: -len(texts[i]))
            for start in range(0, len(texts), batch_size):
                idx = order[start:start + batch_size]
                ids, lengths = self.tokenizer.batch([texts[i] for i in idx], max_len)
                pooled = self._pool_from_hidden(ids, lengths, mask)
                if normalize:
                    norms = np.linalg.norm(pooled, axis=1, keepdims=True)
                    pooled = pooled / np.maximum(norms, 1e-12)
                out[idx] = pooled
        if single:
            out = out[0]
        if as_torch:
            return _torch().from_numpy(out).to(self.device)
        return out

    def __call__(self, input_ids, attention_mask=None, mask=None, token_type_ids=None):
        """The last hidden state [B, L, hidden] for token ids [B, L] (torch tensors, on the
        CPU or the model's device), as a torch tensor on the model's device in the run dtype
        (float32 on the CPU), zeros at padding. attention_mask [B, L] must be 1 then 0 along
        each row (right padding; stof computes only the real tokens). mask: an attention mask
        spec (str or stof.Mask) applied within each sequence. On a GPU, an output of up to
        4 MiB is allocated one call ahead (the model holds one such tensor between calls),
        so that the allocation is not on the way to the first kernel."""
        self._check_open()
        torch = _torch()
        if mask is None and token_type_ids is None:
            hidden = self._call_device(torch, input_ids, attention_mask)
            if hidden is not None:
                return hidden
        ids = self._token_tensor(torch, input_ids, "input_ids")
        B, L = ids.shape
        am = self._attention_mask(torch, attention_mask, B, L)
        types = None
        if token_type_ids is not None:
            types = self._token_tensor(torch, token_type_ids, "token_type_ids")
            if tuple(types.shape) != (B, L):
                raise ValueError(f"token_type_ids has shape {tuple(types.shape)}, input_ids "
                                 f"{(B, L)}")
        device, dtype = self._output_kind(torch)
        hidden = torch.empty((B, L, self._info.hidden), dtype=dtype, device=device)
        self._forward(_arrays.describe(ids), None,
                      _arrays.describe(types) if types is not None else None,
                      _arrays.describe(hidden), None, mask,
                      _arrays.describe(am) if am is not None else None)
        return hidden

    def logits(self, input_ids, attention_mask=None, mask=None, all_tokens=False):
        """Decoders: float32 logits of the last real token of each sequence [B, vocab], or
        of every token [B, L, vocab] with all_tokens=True (zeros at padding), as a torch
        tensor on the model's device. Arguments as for model(...); an encoder raises
        StofError."""
        self._check_open()
        torch = _torch()
        ids = self._token_tensor(torch, input_ids, "input_ids")
        B, L = ids.shape
        am = self._attention_mask(torch, attention_mask, B, L)
        shape = (B, L, self._info.vocab) if all_tokens else (B, self._info.vocab)
        out = torch.empty(shape, dtype=torch.float32, device=torch.device(self.device))
        self._forward(_arrays.describe(ids), None, None, None, None, mask,
                      _arrays.describe(am) if am is not None else None,
                      logits=_arrays.describe(out), logits_all=all_tokens)
        return out

    def _call_device(self, torch, ids, am):
        """The usual GPU call in few steps: int32/int64 ids and an int32/int64/uint8
        attention mask, both [B, L], contiguous, on the model's GPU, which is torch's
        current device. Every host step here comes before the first kernel of a small
        forward, so the C arguments are kept per shape and the output is allocated a
        call ahead. None for any other call (the general path takes it)."""
        index = self._gpu_index
        if index < 0 or type(ids) is not torch.Tensor or type(am) is not torch.Tensor:
            return None
        shape = ids.shape
        if len(shape) != 2 or am.shape != shape:
            return None
        key = (shape, ids.dtype, am.dtype)
        prep = self._prepared.get(key)
        if prep is None:
            ids_code = {torch.int64: _lib.I64, torch.int32: _lib.I32}.get(ids.dtype)
            am_code = {torch.int64: _lib.I64, torch.int32: _lib.I32,
                       torch.uint8: _lib.U8}.get(am.dtype)
            if ids_code is None or am_code is None:
                return None
            if len(self._prepared) >= _PREPARED_SHAPES:
                self._prepared = {}
            prep = _Prepared(self, shape[0], shape[1], ids_code, am_code)
            self._prepared[key] = prep
        if ids.get_device() != index or am.get_device() != index or \
                not ids.is_contiguous() or not am.is_contiguous() or \
                torch.cuda.current_device() != index:
            return None
        stream = self._ctx.torch_stream()
        out = (shape[0], shape[1], self._info.hidden)
        hidden = self._output(torch, out, stream)
        with self._lock:
            self._ctx.use_stream(stream)
            prep.ids.data = ids.data_ptr()
            prep.am.data = am.data_ptr()
            prep.hidden.data = hidden.data_ptr()
            status = _lib.fn("stof_model_forward")(*prep.args)
            if status != 0:
                raise _lib.StofError(status, _lib.last_error(), "stof_model_forward")
        self._prepare_output(torch, out, stream)
        return hidden

    def _output(self, torch, shape, stream):
        """The output of a call: the tensor the call before made ready when it has this
        shape and stream, else a new one."""
        try:
            ready = self._ready.pop()
        except IndexError:
            ready = None
        if ready is not None and ready[0].shape == shape and ready[1] == stream:
            return ready[0]
        device, dtype = self._output_kind(torch)
        return torch.empty(shape, dtype=dtype, device=device)

    def _prepare_output(self, torch, shape, stream):
        """Allocates the next call's output of a small forward now, while the device
        runs this one: at most one tensor of _READY_BYTES a model."""
        if shape[0] * shape[1] * shape[2] * _ITEM_BYTES[self._info.dtype] > _READY_BYTES:
            return
        device, dtype = self._output_kind(torch)
        self._ready[:] = [(torch.empty(shape, dtype=dtype, device=device), stream)]

    def _output_kind(self, torch):
        """torch's device and dtype of this model's outputs."""
        if self._out is None:
            self._out = (torch.device(self.device), {_lib.F32: torch.float32,
                         _lib.F16: torch.float16, _lib.BF16: torch.bfloat16}[self._info.dtype])
        return self._out

    def _token_tensor(self, torch, x, name):
        # The usual case first, in few steps (every forward pays for them): an
        # int32 or int64 [B, L] tensor on the CPU or on the model's GPU.
        if type(x) is torch.Tensor and x.dim() == 2 and \
                (x.dtype is torch.int64 or x.dtype is torch.int32):
            where = x.get_device()
            if where < 0 or where == self._gpu_index:
                return x if x.is_contiguous() else x.contiguous()
        if not isinstance(x, torch.Tensor):
            x = torch.as_tensor(x)
        if x.dim() != 2:
            raise ValueError(f"{name} must be [batch, length], got shape {tuple(x.shape)}")
        if x.dtype.is_floating_point or x.dtype == torch.bool or x.dtype.is_complex:
            raise TypeError(f"{name} must hold integers, got {x.dtype}")
        if x.device.type not in ("cpu", "cuda"):
            raise ValueError(f"{name} is on {x.device}; stof takes CPU or CUDA tensors")
        if x.device.type == "cuda":
            index = x.device.index if x.device.index is not None else torch.cuda.current_device()
            if f"cuda:{index}" != self.device:
                raise ValueError(f"{name} is on cuda:{index} but the model is on {self.device}")
        if x.dtype not in (torch.int32, torch.int64):
            x = x.to(dtype=torch.int32)
        return x.contiguous()

    def _attention_mask(self, torch, attention_mask, B, L):
        """The 0/1 attention mask as stof reads it (int32, int64 or uint8, on the CPU
        or the model's device), or None. stof derives the lengths from it and checks
        that each row is ones followed by zeros."""
        if attention_mask is None:
            return None
        m = attention_mask
        if type(m) is torch.Tensor and m.shape == (B, L) and \
                (m.dtype is torch.int64 or m.dtype is torch.int32 or m.dtype is torch.uint8):
            where = m.get_device()  # integer tensors never carry autograd state to detach
            if where < 0 or where == self._gpu_index:
                return m if m.is_contiguous() else m.contiguous()
        if not isinstance(m, torch.Tensor):
            m = torch.as_tensor(m)
        if tuple(m.shape) != (B, L):
            raise ValueError(f"attention_mask has shape {tuple(m.shape)}, input_ids {(B, L)}")
        if m.dtype == torch.bool:
            m = m.view(torch.uint8)
        elif m.dtype not in (torch.int32, torch.int64, torch.uint8):
            if m.dtype.is_floating_point or m.dtype.is_complex:
                raise TypeError(f"attention_mask must hold integers or bools, got {m.dtype}")
            m = m.to(torch.int32)
        if m.device.type == "cuda":
            index = m.device.index if m.device.index is not None else torch.cuda.current_device()
            if f"cuda:{index}" != self.device:
                m = m.to(self.device if self._ctx.kind != "cpu" else "cpu")
        elif m.device.type != "cpu":
            raise ValueError(f"attention_mask is on {m.device}; stof takes CPU or CUDA tensors")
        return m.detach().contiguous()

    # -- lifetime

    def _check_open(self):
        if self._handle is None:
            raise ValueError(f"the model {self.path!r} is closed")

    def close(self):
        """Free the model (and its device memory) now."""
        self._ready[:] = []
        self._prepared = {}
        if self._tokenizer is not None:
            self._tokenizer.close()
            self._tokenizer = None
        if self._handle is not None and self._handle.value and not _mask_module._exiting:
            with _on_device(self._ctx):
                _lib.fn("stof_model_destroy")(self._handle)
        self._handle = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass

    def __repr__(self):
        i = self._info
        return (f"stof.Model({self.path!r}, device={self.device!r}, layers={i.layers}, "
                f"hidden={i.hidden}, heads={i.heads}, dtype={_DTYPE_NAMES.get(i.dtype)})")
