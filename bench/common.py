"""common.py — what the side-by-side benchmarks (bench/compare_attention.py,
bench/compare_encoder.py, and through the latter bench/tune_bench.py) share:
the provenance of a results file (commit, GPU name for its file name), the
formatting of figures, the set-up of torch.compile for many shapes in one
process, the event pairs their timers are built on, and the round-robin timer
that times every side of a case in one loop (EventTimer.round_robin_ms).
"""

import math
import os
import statistics
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


# A device sleep queued before a timed call, in which the host queues the call,
# so that launch overhead stays out of the time: at least SLEEP_CYCLES (about
# 0.1 ms at Hopper clocks), and twice the slowest side's host time per call
# where that is longer (EventTimer.cover_cycles). Host times a call of 51-104 us
# (stof.attention with a T5 bias), 49-135 us (SDPA's cuDNN backend given a bias
# tensor) and 79-248 us (FlexAttention) reach past 0.1 ms: behind it, a 0.031 ms
# kernel read 0.072-0.088 ms
# (bench/results/attention-timing-sleep-2026-11-27-h100.txt). SLEEP_HZ is above
# any Hopper SM clock, so a slower clock only sleeps longer; a side whose call
# waits for the device is held to SLEEP_MAX_CYCLES.
SLEEP_CYCLES = 200_000
SLEEP_MAX_CYCLES = 20_000_000
SLEEP_HZ = 2.0e9
HOLD_CYCLES = 100_000_000  # the device held busy while host times are taken


class _HostEvent:
    def record(self):
        self.t = time.perf_counter()

    def elapsed_time(self, end):
        return (end.t - self.t) * 1e3


class EventTimer:
    """CUDA events on a GPU; on the CPU (a smoke run) the host clock, so that
    every code path can be exercised without a device. round_robin_ms times the
    sides of a comparison; subclasses time other calls with sync() and pairs of
    events from _pair()."""

    def __init__(self, torch, device):
        self.torch = torch
        self.cuda = device.type == "cuda"
        self.sleep = getattr(torch.cuda, "_sleep", None) if self.cuda else None
        self.sleep_cycles = 0  # the last round_robin_ms loop's device sleep

    def sync(self):
        if self.cuda:
            self.torch.cuda.synchronize()

    def _pair(self):
        if self.cuda:
            ev = self.torch.cuda.Event
            return ev(enable_timing=True), ev(enable_timing=True)
        return _HostEvent(), _HostEvent()

    def warm_estimate(self, fn, n_sets, warmup, calls):
        """Seconds a call of fn(set_index) takes on the host clock, over `calls`
        calls after `warmup` of them, the set rotated (i % n_sets): what sets a
        timer's iteration count."""
        for w in range(warmup):
            fn(w % n_sets)
        self.sync()
        t0 = time.perf_counter()
        for w in range(calls):
            fn(w % n_sets)
        self.sync()
        return (time.perf_counter() - t0) / calls

    def host_seconds(self, fn, n_sets, calls=10):
        """Host time of a call of fn(set_index), taken while a long device sleep
        holds the device, so that no wait on a full launch queue counts."""
        self.sleep(HOLD_CYCLES)
        t0 = time.perf_counter()
        for i in range(calls):
            fn(i % n_sets)
        seconds = (time.perf_counter() - t0) / calls
        self.sync()
        return seconds

    def cover_cycles(self, fns, n_sets, floor=SLEEP_CYCLES):
        """The device sleep to queue before each timed call of any of fns: floor,
        or twice the slowest one's host time, whichever is longer (at most
        SLEEP_MAX_CYCLES); 0 with no device sleep (the CPU)."""
        if self.sleep is None:
            return 0
        worst = max((self.host_seconds(fn, n_sets) for fn in fns), default=0.0)
        return max(floor, min(SLEEP_MAX_CYCLES, math.ceil(2 * worst * SLEEP_HZ)))

    def round_robin_ms(self, sides, n_sets, problems, warmup, iters, budget=None,
                       sleep_cycles=SLEEP_CYCLES):
        """{key: median device time of fn(set_index)} for sides = {key: fn}, every
        side timed in one loop: iteration i calls each side once, each behind
        the same device sleep (cover_cycles of sleep_cycles: self.sleep_cycles
        after the call) and between its own event pair, each call on the
        next input set (call c of the loop on set c % n_sets), so that no call
        reads the inputs the call before it left in L2, as in a block of one
        side's calls. Timed in blocks one after another, one kernel read up to
        12% apart from block to block on an H100 as the clock and power state
        drifted; in one loop the drift falls on every side alike. The starting
        side rotates every iteration and the order reverses every pass over the
        sides, so that no side always follows the same one. The iteration count
        gives the slowest side at most budget seconds of timed calls (at least
        10, at most iters; exactly iters with no budget), so the loop takes at
        most about len(sides) x budget. A side that raises in its warm-up is
        left out, with a line in problems; an error in the loop itself reaches
        the caller. Outputs are dropped as they return."""
        est = {}
        for key, fn in sides.items():
            try:
                est[key] = self.warm_estimate(fn, n_sets, max(1, warmup), 3)
            except Exception as e:  # one side failing must not lose the others
                problems.append(brief_error(f"{key} timing", e))
                self.sync()
        keys = list(est)
        if not keys:
            return {}
        if budget is not None:
            iters = max(10, min(iters, int(budget / max(max(est.values()), 1e-6))))
        self.sleep_cycles = self.cover_cycles([sides[key] for key in keys], n_sets, sleep_cycles)
        n = len(keys)
        pairs = {key: [] for key in keys}
        for it in range(iters):
            order = keys if (it // n) % 2 == 0 else keys[::-1]
            for j in range(n):
                key = order[(it + j) % n]
                start, end = self._pair()
                if self.sleep is not None:
                    self.sleep(self.sleep_cycles)
                start.record()
                sides[key]((it * n + j) % n_sets)
                end.record()
                pairs[key].append((start, end))
        self.sync()
        return {key: statistics.median(s.elapsed_time(e) for s, e in pairs[key]) for key in keys}
