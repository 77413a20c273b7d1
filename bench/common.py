"""common.py — what the side-by-side benchmarks (bench/compare_attention.py,
bench/compare_encoder.py, and through the latter bench/tune_bench.py) share:
the provenance of a results file (commit, GPU name for its file name), the
formatting of figures, the set-up of torch.compile for many shapes in one
process, and the event pairs their timers are built on.
"""

import math
import os
import subprocess
import time
import traceback

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def git_commit():
    """The commit the results belong to: $STOF_COMMIT (a copy of the tree
    without .git), else the checkout's HEAD."""
    if os.environ.get("STOF_COMMIT"):
        return os.environ["STOF_COMMIT"]
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO,
                              capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def gpu_slug(name):
    """'NVIDIA H100 80GB HBM3' -> 'h100', for results file names."""
    words = [w for w in name.lower().replace("nvidia", "").split() if w]
    return words[0] if words else "gpu"


def fmt(x, spec=".3f"):
    return "-" if x is None else format(x, spec)


def geomean(xs):
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else None


def brief_error(label, e):
    """One line for a case's problem list (the traceback with STOF_BENCH_TRACE)."""
    if os.environ.get("STOF_BENCH_TRACE"):
        traceback.print_exc()
    text = str(e).strip().splitlines()[0][:240] if str(e).strip() else ""
    return f"{label}: {type(e).__name__}: {text}"


def configure_compile(torch):
    """Room for one compiled graph (a model, or a flex_attention) per shape and
    mask in one process: past dynamo's recompile limits it would silently run
    eagerly."""
    cfg = torch._dynamo.config
    for name in ("cache_size_limit", "recompile_limit"):
        if hasattr(cfg, name):
            setattr(cfg, name, 4096)
    for name in ("accumulated_cache_size_limit", "accumulated_recompile_limit"):
        if hasattr(cfg, name):
            setattr(cfg, name, 1 << 16)


# A device sleep queued before a timed call: about 0.1 ms at Hopper clocks, in
# which the host queues the call, so that launch overhead stays out of the time.
SLEEP_CYCLES = 200_000


class _HostEvent:
    def record(self):
        self.t = time.perf_counter()

    def elapsed_time(self, end):
        return (end.t - self.t) * 1e3


class EventTimer:
    """CUDA events on a GPU; on the CPU (a smoke run) the host clock, so that
    every code path can be exercised without a device. Subclasses time calls
    with sync() and pairs of events from _pair()."""

    def __init__(self, torch, device):
        self.torch = torch
        self.cuda = device.type == "cuda"
        self.sleep = getattr(torch.cuda, "_sleep", None) if self.cuda else None

    def sync(self):
        if self.cuda:
            self.torch.cuda.synchronize()

    def _pair(self):
        if self.cuda:
            ev = self.torch.cuda.Event
            return ev(enable_timing=True), ev(enable_timing=True)
        return _HostEvent(), _HostEvent()
