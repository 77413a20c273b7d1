"""test_binding.py — the binding's plumbing: library loading, version, device
count, StofError, and that `import stof` stays free of torch."""

import os
import re
import subprocess
import sys

import pytest

import stof
from conftest import REPO


def test_version_matches_header():
    header = open(os.path.join(REPO, "include", "stof.h")).read()
    parts = [re.search(rf"#define STOF_VERSION_{p} (\d+)", header).group(1)
             for p in ("MAJOR", "MINOR", "PATCH")]
    assert stof.version() == ".".join(parts)


def test_library_path_exists():
    assert os.path.exists(stof.library_path()) or "/" not in stof.library_path()


def test_gpu_count_is_a_count():
    n = stof.gpu_count()
    assert isinstance(n, int) and n >= 0


def test_stof_error_carries_status_and_message():
    with pytest.raises(stof.StofError) as info:
        stof.Mask.parse("window:")
    err = info.value
    assert err.status == 3 and err.status_name == "STOF_ERR_PARSE"
    assert str(err).startswith("STOF_ERR_PARSE: ")
    assert err.message and err.message in str(err)


def test_error_message_is_fresh_per_call():
    with pytest.raises(stof.StofError) as first:
        stof.Mask.parse("window:abc")
    with pytest.raises(stof.StofError) as second:
        stof.Mask.parse("dilated:4x0")
    assert first.value.message != second.value.message


def test_bad_device_names_raise_before_the_library():
    with pytest.raises(ValueError, match="unknown device"):
        stof.Mask.parse("causal").compile(1, 1, 8, 8, device="tpu")


def test_gpu_context_without_gpu_is_a_stof_error():
    if stof.gpu_count() > 0:
        pytest.skip("a GPU is present: no error to provoke")
    with pytest.raises(stof.StofError) as info:
        stof.Mask.parse("causal").compile(1, 1, 64, 64, device="cuda:0")
    assert info.value.status_name == "STOF_ERR_NO_DEVICE"


def test_missing_library_is_a_clear_error(tmp_path):
    code = ("import stof\n"
            "try:\n    stof.version()\nexcept OSError as e:\n    print('OSError', e)\n")
    env = dict(os.environ, STOF_LIBRARY=str(tmp_path / "nope.so"),
               PYTHONPATH=os.path.join(REPO, "python"))
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         check=True).stdout
    assert "OSError" in out and "nope.so" in out and "STOF_LIBRARY" in out


def test_import_and_parse_do_not_import_torch():
    code = ("import sys, stof\n"
            "m = stof.Mask.parse('window:128,global:32')\n"
            "assert str(m)\n"
            "assert 'torch' not in sys.modules, 'stof imported torch'\n"
            "print('ok')\n")
    env = dict(os.environ, PYTHONPATH=os.path.join(REPO, "python"))
    res = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == "ok"


def test_docstring_names_the_build_tree_step():
    assert "PYTHONPATH=python" in stof.__doc__
