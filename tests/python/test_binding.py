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


# ---------------------------------------------------------------- argument conversion

TINY = os.path.join(REPO, "tests", "data", "tiny_bert")


def _tiny_model(root):
    """The tiny BERT (hidden 64, 32 positions) with a vocabulary of its 100 ids."""
    import shutil
    folder = os.path.join(str(root), "tiny_vocab")
    os.makedirs(folder, exist_ok=True)
    for f in ("config.json", "model.safetensors"):
        shutil.copy(os.path.join(TINY, f), folder)
    words = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "hello", "world"]
    words += [f"w{i}" for i in range(len(words), 100)]
    with open(os.path.join(folder, "vocab.txt"), "w") as f:
        f.write("\n".join(words) + "\n")
    return folder


def test_strings_with_a_nul_are_refused(tmp_path):
    for make in (stof.Mask.parse, stof.Mask):
        with pytest.raises(ValueError, match="NUL character at byte 8"):
            make("window:4\x00,causal")
    folder = _tiny_model(tmp_path)
    with pytest.raises(ValueError, match="path contains a NUL"):
        stof.Model.from_pretrained(folder + "\x00x", device="cpu")
    with pytest.raises(ValueError, match="path contains a NUL"):
        stof.Tokenizer(folder.encode() + b"\x00x")
    # Without the NUL both load.
    stof.Model.from_pretrained(folder, device="cpu").close()


def test_fractional_numbers_are_refused_not_truncated(tmp_path):
    for call in (lambda: stof.Mask().window(1.5), lambda: stof.Mask().window(4, 2.5),
                 lambda: stof.Mask().dilated(4, 1.5), lambda: stof.Mask().global_([1, 2.5]),
                 lambda: stof.Mask().random(64, 3, seed=1.5),
                 lambda: stof.Mask.parse("causal").compile(1, 1, 64.5, 64)):
        with pytest.raises(ValueError, match="must be an integer, got"):
            call()
    with pytest.raises(TypeError, match="must be an integer"):
        stof.Mask().window("4")
    # Integral floats and numpy integers mean what they say.
    assert str(stof.Mask().window(2.0)) == str(stof.Mask().window(2)) == "window:2"
    np = pytest.importorskip("numpy")
    assert str(stof.Mask().window(np.int64(3))) == "window:3"
    with stof.Model.from_pretrained(_tiny_model(tmp_path), device="cpu") as model:
        with pytest.raises(ValueError, match="max_length must be an integer, got 2.7"):
            model.encode(["hello world"], max_length=2.7)
        with pytest.raises(ValueError, match="max_seq_length must be an integer, got 2.7"):
            model.max_seq_length = 2.7
        assert model.encode(["hello world"], max_length=4.0).shape == (1, 64)


# ---------------------------------------------------------------- close while in use

_RACE = r"""
import sys, threading
import stof
model = stof.Model.from_pretrained(sys.argv[1], device="cpu")
texts = ["hello world " * 8, "hello", "world hello world"] * 4
ok, closed, other = [0], [0], []
lock = threading.Lock()
started = threading.Barrier(9)

def worker():
    started.wait()
    for _ in range(50):
        try:
            emb = model.encode(texts, batch_size=4)
            assert emb.shape[0] == len(texts)
            with lock:
                ok[0] += 1
        except ValueError as e:
            assert "is closed" in str(e), e
            with lock:
                closed[0] += 1
        except Exception as e:
            other.append(repr(e))

threads = [threading.Thread(target=worker) for _ in range(8)]
for t in threads:
    t.start()
started.wait()
while ok[0] < 20:
    pass
model.close()
for t in threads:
    t.join()
assert not other, other
assert ok[0] + closed[0] == 400 and closed[0] > 0, (ok[0], closed[0])
print("ok", ok[0], closed[0])
"""


def test_close_while_other_threads_encode(tmp_path):
    """8 threads x 50 encode() calls, and close() from the main thread while they run:
    calls in flight finish, later ones raise ValueError, nothing crashes (a child
    process, so that a crash fails the test instead of ending pytest). Before the
    binding's reader-writer guard this crashed in most runs."""
    folder = _tiny_model(tmp_path)  # small calls: many closes land inside one
    env = dict(os.environ, PYTHONPATH=os.path.join(REPO, "python"))
    for _ in range(3):
        res = subprocess.run([sys.executable, "-c", _RACE, folder], env=env,
                             capture_output=True, text=True, timeout=600)
        assert res.returncode == 0, (res.returncode, res.stdout, res.stderr[-2000:])
        assert res.stdout.startswith("ok "), res.stdout


def test_close_is_idempotent_and_calls_after_it_raise(tmp_path):
    model = stof.Model.from_pretrained(_tiny_model(tmp_path), device="cpu")
    model.close()
    model.close()
    for call in (lambda: model.encode(["hello"]), lambda: model.tokenize(["hello"]),
                 lambda: model.max_length):
        with pytest.raises(ValueError, match="is closed"):
            call()


# ---------------------------------------------------------------- sentence-transformers' surface

def test_encode_keywords_of_sentence_transformers(tmp_path, capsys):
    np = pytest.importorskip("numpy")
    texts = ["hello world", "world", "hello hello world world hello", "w7 w8 w9"] * 3
    with stof.Model.from_pretrained(_tiny_model(tmp_path), device="cpu") as model:
        plain = model.encode(texts)
        assert plain.dtype == np.float32 and plain.shape == (12, 64)
        normed = model.encode(texts, normalize_embeddings=True)
        assert np.allclose(np.linalg.norm(normed, axis=1), 1, atol=1e-5)
        assert np.allclose(normed, plain / np.linalg.norm(plain, axis=1, keepdims=True),
                           atol=1e-6)
        # The progress bar changes nothing but stderr.
        shown = model.encode(texts, batch_size=5, show_progress_bar=True)
        assert np.array_equal(shown, model.encode(texts, batch_size=5))
        assert "12/12 sentences" in capsys.readouterr().err
        # max_seq_length truncates like max_length does.
        assert model.max_seq_length == model.max_length
        model.max_seq_length = 4
        assert model.max_seq_length == 4
        assert np.array_equal(model.encode(texts), model.encode(texts, max_length=4))
        assert not np.allclose(model.encode(texts), plain)
        with pytest.raises(ValueError, match="outside"):
            model.max_seq_length = 1
        with pytest.raises(ValueError, match="precision must be one of"):
            model.encode(texts, precision="float16")
        torch = pytest.importorskip("torch")
        t = model.encode(texts[:2], convert_to_tensor=True)
        assert isinstance(t, torch.Tensor) and t.shape == (2, 64)
        rows = model.encode(texts[:2], convert_to_numpy=False)
        assert isinstance(rows, list) and len(rows) == 2 and rows[0].shape == (64,)


def test_precisions_and_similarity_match_sentence_transformers(tmp_path):
    np = pytest.importorskip("numpy")
    st_util = pytest.importorskip("sentence_transformers.util")
    torch = pytest.importorskip("torch")
    texts = ["hello world", "world", "hello hello world world hello", "w7 w8 w9", "w10 hello"]
    with stof.Model.from_pretrained(_tiny_model(tmp_path), device="cpu") as model:
        emb = model.encode(texts)
        for precision in ("int8", "uint8", "binary", "ubinary"):
            got = model.encode(texts, precision=precision)
            want = st_util.quantize_embeddings(emb, precision=precision)
            assert got.dtype == want.dtype and np.array_equal(got, want), precision
        sim = model.similarity(emb[:2], emb)
        want = st_util.cos_sim(torch.from_numpy(emb[:2]), torch.from_numpy(emb)).numpy()
        assert sim.shape == (2, 5) and np.allclose(sim, want, atol=1e-6)
        assert model.similarity(emb[0], emb[1]).shape == (1, 1)
        assert isinstance(model.similarity(torch.from_numpy(emb), emb), torch.Tensor)
        with pytest.raises(ValueError, match="dimensions"):
            model.similarity(emb, emb[:, :10])


# ---------------------------------------------------------------- weights

def _poison_weight(folder, tensor, value):
    """Writes value (a float32) over element 3 of tensor in folder/model.safetensors."""
    import json
    import struct
    path = os.path.join(folder, "model.safetensors")
    raw = bytearray(open(path, "rb").read())
    (n,) = struct.unpack("<Q", raw[:8])
    info = json.loads(raw[8:8 + n])[tensor]
    assert info["dtype"] == "F32", info["dtype"]  # the tiny BERT is stored in float32
    start = 8 + n + info["data_offsets"][0]
    raw[start + 12:start + 16] = struct.pack("<f", value)
    open(path, "wb").write(bytes(raw))


def test_non_finite_weights_are_refused_at_load(tmp_path):
    tensor = "encoder.layer.0.attention.self.query.weight"
    for value, word in ((float("nan"), "NaN"), (float("inf"), "an infinity")):
        folder = _tiny_model(tmp_path)
        with open(os.path.join(folder, "model.safetensors"), "rb") as f:
            header = f.read(4096)
        prefixed = (b'"bert.' + tensor.encode()) in header
        name = ("bert." if prefixed else "") + tensor
        _poison_weight(folder, name, value)
        with pytest.raises(stof.StofError) as info:
            stof.Model.from_pretrained(folder, device="cpu")
        assert info.value.status_name == "STOF_ERR_FORMAT"
        assert f"tensor '{name}' holds {word} at element 3" in str(info.value)
