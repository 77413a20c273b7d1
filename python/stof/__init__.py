"""stof — transformer inference with sparse attention masks, on the CPU and
NVIDIA GPUs: the Python binding.

A thin ctypes layer over libstof.so (no compiled extension). `pip install .`
from the repository root builds the library and bundles it with this package.
From a source tree, put the python/ folder on the path (PYTHONPATH=python, run
from the repository root) and the library is found at build/libstof.so; or set
STOF_LIBRARY to the path of libstof.so.

    import numpy as np, stof
    q, k, v = (np.random.rand(2, 4, 1024, 64).astype(np.float32) for _ in range(3))
    out = stof.attention(q, k, v, mask="window:128,global:32")      # the CPU backend
    out = stof.attention(q, k, v, mask=stof.Mask().causal(), lengths=[1024, 700])

CUDA tensors run on the GPU on torch.cuda.current_stream(), zero-copy; CPU
tensors and numpy arrays run on the CPU backend. torch is never imported by
stof itself: `import stof`, mask parsing and numpy attention work without it.
"""

from ._lib import StofError, library_path
from ._lib import fn as _fn
from .attention import KernelChoice, attention, attention_select
from .mask import CompiledMask, Mask, MaskStats, cache_info, clear_cache
from .model import Model
from .tokenizer import Tokenizer
from . import _sentence

_sentence.install(Model)  # encode()'s sentence-transformers keywords, similarity(), max_seq_length

__all__ = ["StofError", "Mask", "CompiledMask", "MaskStats", "KernelChoice", "attention",
           "attention_select", "version", "gpu_count", "clear_cache", "cache_info",
           "library_path", "__version__"]
__all__ += ["Model", "Tokenizer"]
from .attention import T5Bias  # noqa: E402  (decoder and T5 attention)
__all__ += ["T5Bias"]


def version():
    """The library's version string, e.g. "0.1.0"."""
    return _fn("stof_version")().decode()


def gpu_count():
    """Number of CUDA devices stof can use (0 without a driver or device)."""
    return int(_fn("stof_gpu_count")())


def __getattr__(name):
    # stof.__version__ is the loaded library's version (CMakeLists.txt's project()
    # version, which the package metadata reads too), read on first use so that
    # `import stof` does not load the library. stof.attention_op is the
    # torch.library op stof::attention (integrations/torch_op.py), registered on
    # first use so that `import stof` never imports torch itself.
    if name == "__version__":
        return version()
    if name == "attention_op":
        from .integrations.torch_op import attention_op
        return attention_op
    raise AttributeError(f"module 'stof' has no attribute {name!r}")
