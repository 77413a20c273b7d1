"""_sentence.py — what sentence-transformers users reach for, on stof.Model:
encode() with SentenceTransformer.encode's keywords (batch_size,
normalize_embeddings, convert_to_numpy, convert_to_tensor, show_progress_bar,
precision), similarity() and a settable max_seq_length.

install(Model) wraps the model's own encode (which takes normalize, as_torch,
max_length and mask) so that both spellings work, and adds the rest. The
quantised precisions follow sentence-transformers' quantize_embeddings: int8
and uint8 split each dimension's range over the batch into 256 buckets;
binary and ubinary pack the signs, 8 dimensions a byte.
"""

import functools
import sys

from . import _lib

PRECISIONS = ("float32", "int8", "uint8", "binary", "ubinary")


def _numpy():
    import numpy as np
    return np


def _torch():
    try:
        import torch
    except ImportError:
        raise ImportError("this result is a torch tensor, and torch is not installed "
                          "(pip install torch)") from None
    return torch


def quantize(emb, precision):
    """float32 [N, D] embeddings in the given precision (see the module comment)."""
    np = _numpy()
    if precision == "float32":
        return emb
    if precision in ("binary", "ubinary"):
        packed = np.packbits(emb > 0, axis=-1)
        return packed if precision == "ubinary" else (packed.astype(np.int16) - 128).astype(np.int8)
    if emb.ndim != 2 or emb.shape[0] < 2:
        raise ValueError(f"{precision} precision takes its ranges from the batch, which needs at "
                         f"least 2 sentences")
    low, high = emb.min(axis=0), emb.max(axis=0)
    step = (high - low) / 255
    step = np.where(step == 0, 1, step)
    buckets = np.clip(np.floor((emb - low) / step), 0, 255)
    if precision == "uint8":
        return buckets.astype(np.uint8)
    return (buckets - 128).astype(np.int8)


def _progress(done, total):
    width = 30
    fill = width * done // max(total, 1)
    sys.stderr.write(f"\r  [{'#' * fill}{'.' * (width - fill)}] {done}/{total} sentences")
    if done >= total:
        sys.stderr.write("\n")
    sys.stderr.flush()


def _wrap_encode(encode):
    """Model.encode with sentence-transformers' keywords added."""

    @functools.wraps(encode)
    def encode_st(self, sentences, batch_size=32, normalize=None, as_torch=False, max_length=None,
                  mask=None, *, normalize_embeddings=False, convert_to_numpy=True,
                  convert_to_tensor=False, show_progress_bar=None, precision="float32"):
        if precision not in PRECISIONS:
            raise ValueError(f"precision must be one of {', '.join(PRECISIONS)}, got "
                             f"{precision!r}")
        if normalize_embeddings:
            normalize = True  # False leaves it to the folder, as sentence-transformers does
        if max_length is None:
            max_length = self.max_seq_length
        single = isinstance(sentences, str)
        texts = [sentences] if single else list(sentences)
        kwargs = dict(normalize=normalize, max_length=max_length, mask=mask)
        if show_progress_bar and isinstance(batch_size, int) and 0 < batch_size < len(texts):
            np = _numpy()
            # Batches in the order encode() runs them (longest first), one at a time.
            order = sorted(range(len(texts)), key=lambda i: -len(texts[i]))
            emb = np.empty((len(texts), self.info["hidden"]), dtype=np.float32)
            for start in range(0, len(order), batch_size):
                idx = order[start:start + batch_size]
                emb[idx] = encode(self, [texts[i] for i in idx], batch_size, **kwargs)
                _progress(min(start + batch_size, len(texts)), len(texts))
        else:
            emb = encode(self, texts, batch_size, **kwargs)
        emb = quantize(emb, precision)
        if single:
            emb = emb[0]
        if as_torch or convert_to_tensor:
            return _torch().from_numpy(emb).to(self.device)
        if not convert_to_numpy:
            torch = _torch()  # sentence-transformers gives a list of tensors then
            return [torch.from_numpy(row.copy()) for row in (emb[None] if single else emb)]
        return emb

    return encode_st


def _as_rows(x, name):
    """x as a 2-D float64 numpy array and whether it was a torch tensor."""
    np = _numpy()
    is_torch = type(x).__module__.startswith("torch")
    a = x.detach().cpu().numpy() if is_torch else np.asarray(x)
    if a.ndim == 1:
        a = a[None, :]
    if a.ndim != 2 or not np.issubdtype(a.dtype, np.number):
        raise ValueError(f"{name} must be embeddings [N, D] or [D], got shape {a.shape} of "
                         f"{a.dtype}")
    return a.astype(np.float64), is_torch


def similarity(self, a, b):
    """Cosine similarity [N, M] of embeddings a [N, D] and b [M, D] (one embedding
    [D] counts as [1, D]): a torch tensor when either is one, else numpy float32."""
    np = _numpy()
    x, x_torch = _as_rows(a, "a")
    y, y_torch = _as_rows(b, "b")
    if x.shape[1] != y.shape[1]:
        raise ValueError(f"a has {x.shape[1]} dimensions and b has {y.shape[1]}")
    x = x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)
    y = y / np.maximum(np.linalg.norm(y, axis=1, keepdims=True), 1e-12)
    sim = (x @ y.T).astype(np.float32)
    return _torch().from_numpy(sim) if x_torch or y_torch else sim


def _get_max_seq_length(self):
    """Tokens per text encode() keeps ([CLS] and [SEP] included): the folder's
    max_seq_length unless set here; at most the model's positions."""
    given = getattr(self, "_max_seq_length", None)
    return given if given is not None else self.max_length


def _set_max_seq_length(self, value):
    value = _lib.as_int(value, "max_seq_length")
    limit = self.info["max_positions"]
    if not 2 <= value <= limit:
        raise ValueError(f"max_seq_length {value} is outside [2, {limit}] (the model's "
                         f"max_position_embeddings)")
    self._max_seq_length = value


def install(model_class):
    """Adds the sentence-transformers surface to stof.Model."""
    model_class.encode = _wrap_encode(model_class.encode)
    model_class.similarity = similarity
    model_class.max_seq_length = property(_get_max_seq_length, _set_max_seq_length)
