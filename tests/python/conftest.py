"""conftest.py — makes python/ (the binding) and bench/ (the shared masks)
importable however pytest is started, and gives each test a fresh seed.

The seed comes from STOF_TEST_SEED or the clock and is printed on failure
(pytest shows captured output), so a failing run can be replayed.
"""

import os
import sys
import time

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
for sub in ("python", "bench"):
    path = os.path.join(REPO, sub)
    if path not in sys.path:
        sys.path.insert(0, path)


@pytest.fixture
def seed():
    s = int(os.environ.get("STOF_TEST_SEED", time.time_ns() % (2**32)))
    print(f"seed {s} (replay with STOF_TEST_SEED={s})")
    return s


@pytest.fixture
def rng(seed):
    np = pytest.importorskip("numpy")
    return np.random.default_rng(seed)
