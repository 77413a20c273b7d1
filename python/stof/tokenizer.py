"""tokenizer.py — the tokenizer of a model folder: WordPiece (BERT), byte-level and
SentencePiece-style BPE (GPT-2, LLaMA, Mistral, Qwen2, ModernBERT) and Unigram (T5),
read from its tokenizer.json / vocab.txt by the C library, with the ids of Hugging
Face's tokenizers.

    tok = stof.Tokenizer("path/to/model")
    ids = tok.encode("Hello world")            # special tokens included
    text = tok.decode(ids)                     # special tokens skipped
    lists = tok.encode_batch(texts, threads=0) # all cores, input order kept
    ids, lengths = tok.batch(texts, 128)       # padded numpy arrays for a forward

str in, str out: text is sent as UTF-8 (lone surrogates as their bytes, which read as
invalid UTF-8 and become U+FFFD, as in Hugging Face).
"""

import ctypes
import os
from ctypes import POINTER, Structure, c_char_p, c_int, c_int32, c_int64, c_size_t, c_void_p

from . import _lib
from . import mask as _mask_module

_P = POINTER
MODEL_NAMES = {1: "wordpiece", 2: "bpe", 3: "unigram"}


class _EncodeParams(Structure):
    _fields_ = [("add_special_tokens", c_int), ("max_length", c_int)]


class _DecodeParams(Structure):
    _fields_ = [("skip_special_tokens", c_int), ("stream", c_int)]


class _TokenLists(Structure):
    _fields_ = [("batch", c_int), ("ids", _P(c_int32)), ("offsets", _P(c_int64))]


class _TokenizerInfo(Structure):
    _fields_ = [("model", c_int), ("vocab_size", c_int), ("max_length", c_int),
                ("pad_id", c_int32), ("bos_id", c_int32), ("eos_id", c_int32), ("unk_id", c_int32)]


_lib._SIGNATURES.update({
    "stof_tokenizer_open": (c_int, [c_char_p, _P(c_void_p)]),
    "stof_tokenizer_destroy": (None, [c_void_p]),
    "stof_tokenizer_max_length": (c_int, [c_void_p, c_int]),
    "stof_tokenize_batch": (c_int, [c_void_p, _P(c_char_p), _P(c_size_t), c_int, c_int,
                                    _P(c_int32), c_size_t, _P(c_int32), _P(c_int)]),
    "stof_tokenizer_get_info": (c_int, [c_void_p, _P(_TokenizerInfo)]),
    "stof_encode_default_params": (_EncodeParams, []),
    "stof_decode_default_params": (_DecodeParams, []),
    "stof_tokenizer_encode": (c_int, [c_void_p, c_char_p, c_size_t, _P(_EncodeParams), _P(c_int32),
                                      c_size_t, _P(c_size_t)]),
    "stof_tokenizer_encode_batch": (c_int, [c_void_p, _P(c_char_p), _P(c_size_t), c_int,
                                            _P(_EncodeParams), c_int, _P(_TokenLists)]),
    "stof_token_lists_free": (None, [_P(_TokenLists)]),
    "stof_tokenizer_decode": (c_int, [c_void_p, _P(c_int32), c_size_t, _P(_DecodeParams), c_void_p,
                                      c_size_t, _P(c_size_t), _P(c_size_t)]),
})


def _utf8(text, i=0):
    if not isinstance(text, str):
        raise TypeError(f"texts must be str, got {type(text).__name__} at index {i}")
    # Lone surrogates pass through as bytes the tokenizer reads as invalid UTF-8.
    return text.encode("utf-8", "surrogatepass")


def _encode_params(add_special_tokens, max_length):
    p = _lib.fn("stof_encode_default_params")()
    p.add_special_tokens = 1 if add_special_tokens else 0
    p.max_length = _lib.c_int(-1 if max_length is True else int(max_length or 0), "max_length")
    return p


class Tokenizer:
    """The tokenizer of a model folder (plain or sentence-transformers layout)."""

    def __init__(self, path):
        handle = c_void_p()
        _lib.call("stof_tokenizer_open", _lib.c_str(path, "path"), ctypes.byref(handle))
        self._handle = handle

    @property
    def info(self):
        """dict: model ("wordpiece", "bpe", "unigram"), vocab_size, max_length (0: none),
        pad_id, bos_id, eos_id, unk_id (-1 when the folder names none)."""
        i = _TokenizerInfo()
        _lib.call("stof_tokenizer_get_info", self._handle, ctypes.byref(i))
        return {"model": MODEL_NAMES.get(i.model, str(i.model)), "vocab_size": i.vocab_size,
                "max_length": i.max_length, "pad_id": i.pad_id, "bos_id": i.bos_id,
                "eos_id": i.eos_id, "unk_id": i.unk_id}

    def max_length(self, max_positions=0):
        """The truncation length sentence-transformers uses (special tokens included),
        at most max_positions when that is > 0."""
        return int(_lib.fn("stof_tokenizer_max_length")(self._handle, int(max_positions)))

    def encode(self, text, add_special_tokens=True, max_length=0):
        """Ids of text (list of int). max_length > 0 truncates (special tokens included);
        True truncates at the folder's max length."""
        raw = _utf8(text)
        params = _encode_params(add_special_tokens, max_length)
        cap = len(raw) + 16
        for _ in range(2):
            ids = (c_int32 * cap)()
            n = c_size_t(0)
            st = _lib.fn("stof_tokenizer_encode")(self._handle, raw, len(raw), ctypes.byref(params),
                                                  ids, cap, ctypes.byref(n))
            if st == 0:
                return list(ids[:n.value])
            if n.value <= cap:
                break
            cap = n.value
        _lib.call("stof_tokenizer_encode", self._handle, raw, len(raw), ctypes.byref(params),
                  (c_int32 * 1)(), 0, ctypes.byref(n))
        return []

    def encode_batch(self, texts, add_special_tokens=True, max_length=0, threads=0,
                     as_numpy=False):
        """Ids of each text (list of lists), encoded on `threads` threads (0: all cores).
        as_numpy=True returns (ids int32 [total], offsets int64 [B + 1]) instead: text i's
        ids are ids[offsets[i]:offsets[i + 1]]."""
        raw = [_utf8(t, i) for i, t in enumerate(texts)]
        n = len(raw)
        if n == 0:
            return []
        ptrs = (c_char_p * n)(*raw)
        lens = (c_size_t * n)(*[len(b) for b in raw])
        params = _encode_params(add_special_tokens, max_length)
        out = _TokenLists()
        _lib.call("stof_tokenizer_encode_batch", self._handle, ptrs, lens, _lib.c_int(n, "batch"),
                  ctypes.byref(params), _lib.c_int(threads, "threads"), ctypes.byref(out))
        try:
            total = out.offsets[n]
            if as_numpy:
                import numpy as np
                flat = np.ctypeslib.as_array(out.ids, shape=(max(total, 1),))[:total].copy()
                return flat, np.ctypeslib.as_array(out.offsets, shape=(n + 1,)).copy()
            flat = out.ids[:total]
            offs = out.offsets[:n + 1]
        finally:
            _lib.fn("stof_token_lists_free")(ctypes.byref(out))
        return [flat[offs[i]:offs[i + 1]] for i in range(n)]

    def decode(self, ids, skip_special_tokens=True, stream=False):
        """Text of ids. stream=True leaves out a character whose last bytes have not come
        yet (for printing generated text as it grows) instead of writing U+FFFD."""
        ids = [int(i) for i in ids]
        arr = (c_int32 * max(len(ids), 1))(*ids)
        params = _lib.fn("stof_decode_default_params")()
        params.skip_special_tokens = 1 if skip_special_tokens else 0
        params.stream = 1 if stream else 0
        cap = 16 * len(ids) + 64
        n, held = c_size_t(0), c_size_t(0)
        for _ in range(2):
            buf = ctypes.create_string_buffer(cap)
            st = _lib.fn("stof_tokenizer_decode")(self._handle, arr, len(ids), ctypes.byref(params),
                                                  buf, cap, ctypes.byref(n), ctypes.byref(held))
            if st == 0:
                return ctypes.string_at(buf, n.value).decode("utf-8")
            if n.value + 1 <= cap:
                break
            cap = n.value + 1
        _lib.call("stof_tokenizer_decode", self._handle, arr, len(ids), ctypes.byref(params),
                  None, 0, ctypes.byref(n), ctypes.byref(held))
        return ""

    def batch(self, texts, max_length):
        """(ids int32 [B, L], lengths int32 [B]) numpy arrays: a padded batch, each text
        truncated to max_length ids (special tokens included), for a model forward."""
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

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


