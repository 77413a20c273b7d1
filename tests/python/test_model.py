"""test_model.py — stof.Model: encode() against sentence-transformers' embeddings
(tests/data/embed_golden.jsonl, skipped without models/all-MiniLM-L6-v2), model(...) on
torch tensors against encode(), and bad input becoming StofError / ValueError / TypeError
(on small folders built from tests/data/tiny_bert, which need no download).
"""

import json
import os
import shutil

import pytest

np = pytest.importorskip("numpy")
import stof  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DATA = os.path.join(REPO, "tests", "data")
MODEL = os.path.join(REPO, "models", "all-MiniLM-L6-v2")
GOLDEN = os.path.join(DATA, "embed_golden.jsonl")
TINY = os.path.join(DATA, "tiny_bert")

needs_model = pytest.mark.skipif(
    not os.path.exists(os.path.join(MODEL, "model.safetensors")),
    reason="models/all-MiniLM-L6-v2 is missing (run scripts/fetch_model.sh)")


def _golden():
    with open(GOLDEN, encoding="utf-8") as f:
        rows = [json.loads(line) for line in f if line.strip()]
    meta = rows[0]["meta"]
    rows = rows[1:]
    return meta, [r["text"] for r in rows], np.array([r["embedding"] for r in rows],
                                                     dtype=np.float32)


def _cosines(a, b):
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    c = (a * b).sum(-1) / (np.linalg.norm(a, axis=-1) * np.linalg.norm(b, axis=-1))
    return np.nan_to_num(c, nan=-2.0)


@pytest.fixture(scope="module")
def cpu_model():
    if not os.path.exists(os.path.join(MODEL, "model.safetensors")):
        pytest.skip("models/all-MiniLM-L6-v2 is missing (run scripts/fetch_model.sh)")
    return stof.Model.from_pretrained(MODEL, device="cpu")


def _tiny_folder(root, name, config_edit=None, vocab=True, weights=True, normalize=False):
    """A copy of the tiny BERT (hidden 64, 32 positions, vocabulary 100) with changes."""
    d = os.path.join(root, name)
    os.makedirs(d)
    with open(os.path.join(TINY, "config.json"), encoding="utf-8") as f:
        config = f.read()
    if config_edit:
        old, new = config_edit
        assert old in config
        config = config.replace(old, new)
    with open(os.path.join(d, "config.json"), "w", encoding="utf-8") as f:
        f.write(config)
    if weights:
        shutil.copy(os.path.join(TINY, "model.safetensors"), d)
    if vocab:
        words = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "cat", "sat", "on", "mat"]
        words += [f"w{i}" for i in range(len(words), 100)]
        with open(os.path.join(d, "vocab.txt"), "w", encoding="utf-8") as f:
            f.write("\n".join(words) + "\n")
    if normalize:
        modules = [{"idx": 0, "name": "0", "path": "",
                    "type": "sentence_transformers.models.Transformer"},
                   {"idx": 1, "name": "1", "path": "1_Pooling",
                    "type": "sentence_transformers.models.Pooling"},
                   {"idx": 2, "name": "2", "path": "2_Normalize",
                    "type": "sentence_transformers.models.Normalize"}]
        with open(os.path.join(d, "modules.json"), "w", encoding="utf-8") as f:
            json.dump(modules, f)
        os.makedirs(os.path.join(d, "1_Pooling"))
        with open(os.path.join(d, "1_Pooling", "config.json"), "w", encoding="utf-8") as f:
            json.dump({"word_embedding_dimension": 64, "pooling_mode_mean_tokens": True}, f)
    return d


# ---------------------------------------------------------------- golden, CPU

@needs_model
def test_encode_matches_sentence_transformers(cpu_model):
    meta, texts, want = _golden()
    got = cpu_model.encode(texts, batch_size=7)
    assert got.dtype == np.float32 and got.shape == want.shape
    cos = _cosines(got, want)
    worst = int(np.argmin(cos))
    assert cos.min() >= 0.9999, f"sentence {worst} ({texts[worst][:60]!r}): cosine {cos[worst]}"
    assert cpu_model.max_length == meta["max_seq_length"]
    assert np.allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-4)


@needs_model
def test_encode_single_and_batch_sizes(cpu_model):
    _, texts, want = _golden()
    one = cpu_model.encode(texts[5])
    assert one.shape == (want.shape[1],)
    assert _cosines(one, want[5]) >= 0.9999
    a = cpu_model.encode(texts[:20], batch_size=1)
    b = cpu_model.encode(texts[:20], batch_size=64)
    assert np.allclose(a, b, atol=1e-5)
    assert cpu_model.encode([]).shape == (0, want.shape[1])


@needs_model
def test_encode_normalize_and_torch(cpu_model):
    torch = pytest.importorskip("torch")
    _, texts, want = _golden()
    raw = cpu_model.encode(texts[:8], normalize=False)
    norms = np.linalg.norm(raw, axis=1)
    assert np.all(np.abs(norms - 1.0) > 1e-3), norms
    assert _cosines(raw, want[:8]).min() >= 0.9999
    t = cpu_model.encode(texts[:8], as_torch=True)
    assert isinstance(t, torch.Tensor) and t.device.type == "cpu" and t.dtype == torch.float32
    assert _cosines(t.numpy(), want[:8]).min() >= 0.9999


@needs_model
def test_call_matches_encode(cpu_model):
    torch = pytest.importorskip("torch")
    _, texts, want = _golden()
    batch = cpu_model.tokenize(texts[:6], return_tensors="pt")
    hidden = cpu_model(**batch)
    assert hidden.shape == (6, batch["input_ids"].shape[1], 384) and hidden.dtype == torch.float32
    m = batch["attention_mask"].unsqueeze(-1).float()
    assert torch.all(hidden * (1 - m) == 0), "padding rows must be zero"
    pooled = (hidden * m).sum(1) / m.sum(1)
    assert _cosines(pooled.numpy(), want[:6]).min() >= 0.9999
    same = cpu_model(batch["input_ids"], batch["attention_mask"],
                     token_type_ids=torch.zeros_like(batch["input_ids"]))
    assert torch.allclose(same, hidden)
    # Lists, strided tensors and other integer types take the long way to the same result.
    lists = cpu_model(batch["input_ids"].tolist(), batch["attention_mask"].tolist())
    assert torch.allclose(lists, hidden)
    strided = cpu_model(batch["input_ids"].t().contiguous().t().short(),
                        batch["attention_mask"].t().contiguous().t().bool())
    assert torch.allclose(strided, hidden)


@needs_model
def test_call_with_mask(cpu_model):
    torch = pytest.importorskip("torch")
    _, texts, _ = _golden()
    longest = max(texts, key=len)
    batch = cpu_model.tokenize([longest], return_tensors="pt")
    dense = cpu_model(**batch)
    wide = cpu_model(**batch, mask="window:512")
    narrow = cpu_model(**batch, mask=stof.Mask().window(2))
    assert torch.allclose(dense, wide, atol=1e-5)
    assert not torch.allclose(dense, narrow, atol=1e-2)
    e = cpu_model.encode([longest], mask="window:2")
    assert _cosines(e[0], narrow[0].mean(0).numpy()) > 0.9999


@needs_model
def test_call_bad_inputs(cpu_model):
    torch = pytest.importorskip("torch")
    ids = torch.tensor([[101, 7592, 102, 0], [101, 7592, 2088, 102]])
    with pytest.raises(stof.StofError, match="row 0 has a 1 at 1 after a 0 at 0"):
        cpu_model(ids, torch.tensor([[0, 1, 1, 1], [1, 1, 1, 1]]))
    with pytest.raises(stof.StofError, match=r"attention_mask\[0, 2\] = 2; it must hold only 0"):
        cpu_model(ids, torch.tensor([[1, 1, 2, 0], [1, 1, 1, 1]]))
    with pytest.raises(TypeError, match="integers or bools"):
        cpu_model(ids, torch.ones(2, 4))
    with pytest.raises(ValueError, match="shape"):
        cpu_model(ids, torch.ones(2, 3, dtype=torch.long))
    with pytest.raises(ValueError, match=r"\[batch, length\]"):
        cpu_model(ids[0])
    with pytest.raises(TypeError, match="integers"):
        cpu_model(ids.float())
    with pytest.raises(stof.StofError, match="outside the vocabulary") as e:
        cpu_model(torch.tensor([[101, 40000, 102]]))
    assert e.value.status_name == "STOF_ERR_INVALID_ARG"
    long_ids = torch.full((1, 600), 1000)
    with pytest.raises(stof.StofError, match="512 positions"):
        cpu_model(long_ids)
    with pytest.raises(stof.StofError, match="window"):
        cpu_model(ids, mask="window:")


@needs_model
def test_encode_bad_inputs(cpu_model):
    with pytest.raises(TypeError, match="index 1"):
        cpu_model.encode(["fine", 3])
    with pytest.raises(ValueError, match="batch_size"):
        cpu_model.encode(["x"], batch_size=0)
    with pytest.raises(ValueError, match="max_position_embeddings"):
        cpu_model.encode(["x"], max_length=600)
    # invalid text becomes the replacement character, which the tokenizer drops
    a = cpu_model.encode(["caf\u00e9 \ud800 ok"])
    b = cpu_model.encode(["caf\u00e9  ok"])
    assert _cosines(a, b).min() > 0.999999


@needs_model
def test_info(cpu_model):
    info = cpu_model.info
    assert info["hidden"] == 384 and info["layers"] == 6 and info["heads"] == 12
    assert info["head_dim"] == 32 and info["max_positions"] == 512
    assert info["pooling"] == "mean" and info["normalize"] is True
    assert info["dtype"] == "float32" and info["device"] == "cpu"


# ---------------------------------------------------------------- folders, no download

def test_tiny_folder_pooling(tmp_path):
    plain = stof.Model.from_pretrained(_tiny_folder(str(tmp_path), "plain"), device="cpu")
    normed = stof.Model.from_pretrained(_tiny_folder(str(tmp_path), "normed", normalize=True),
                                        device="cpu")
    texts = ["the cat sat on the mat " * 20, "the cat", "", "w42 unknownword"]
    a = plain.encode(texts)
    b = normed.encode(texts)
    assert plain.info["normalize"] is False and normed.info["normalize"] is True
    assert plain.max_length == 32  # no sentence_bert_config: 512, within 32 positions
    assert np.all(np.abs(np.linalg.norm(a, axis=1) - 1.0) > 1e-2)
    assert np.allclose(np.linalg.norm(b, axis=1), 1.0, atol=1e-5)
    assert _cosines(a, b).min() > 0.999999
    forced = plain.encode(texts, normalize=True)
    assert np.allclose(forced, b, atol=1e-5)
    raw = normed.encode(texts, normalize=False)
    assert np.allclose(raw, a, atol=1e-5)
    plain.close()
    with pytest.raises(ValueError, match="closed"):
        plain.encode(["the cat"])


def test_load_errors(tmp_path):
    root = str(tmp_path)
    with pytest.raises(stof.StofError) as e:
        stof.Model.from_pretrained(os.path.join(root, "no_such_model"), device="cpu")
    assert e.value.status_name == "STOF_ERR_IO" and "no_such_model" in str(e.value)
    with pytest.raises(stof.StofError, match="model.safetensors") as e:
        stof.Model.from_pretrained(_tiny_folder(root, "no_weights", weights=False), device="cpu")
    assert e.value.status_name == "STOF_ERR_IO"
    wide = _tiny_folder(root, "wide", config_edit=('"hidden_size": 64', '"hidden_size": 96'))
    with pytest.raises(stof.StofError, match="has shape") as e:
        stof.Model.from_pretrained(wide, device="cpu")
    assert e.value.status_name == "STOF_ERR_FORMAT"
    act = _tiny_folder(root, "act", config_edit=('"hidden_act": "gelu"', '"hidden_act": "swishy"'))
    with pytest.raises(stof.StofError, match="swishy") as e:
        stof.Model.from_pretrained(act, device="cpu")
    assert e.value.status_name == "STOF_ERR_UNSUPPORTED"
    no_vocab = stof.Model.from_pretrained(_tiny_folder(root, "no_vocab", vocab=False),
                                          device="cpu")
    with pytest.raises(stof.StofError, match="vocab.txt"):
        no_vocab.encode(["hello"])
    with pytest.raises(ValueError, match="unknown device"):
        stof.Model.from_pretrained(TINY, device="tpu")
    with pytest.raises(ValueError, match="dtype"):
        stof.Model.from_pretrained(TINY, device="cpu", dtype="int8")
    with pytest.raises(TypeError):
        stof.Model.from_pretrained(42)


# ---------------------------------------------------------------- GPU

def _gpu_count():
    try:
        return stof.gpu_count()
    except OSError:  # libstof not built: the other tests report that
        return 0


@needs_model
@pytest.mark.skipif(_gpu_count() == 0, reason="no GPU")
def test_gpu_f16_matches_sentence_transformers():
    torch = pytest.importorskip("torch")
    _, texts, want = _golden()
    model = stof.Model.from_pretrained(MODEL, device="cuda")
    assert model.info["dtype"] == "float16" and model.device.startswith("cuda")
    got = model.encode(texts)
    cos = _cosines(got, want)
    assert cos.min() >= 0.999, f"worst cosine {cos.min()} at {int(np.argmin(cos))}"
    batch = model.tokenize(texts[:4], return_tensors="pt")
    hidden = model(batch["input_ids"].cuda(), batch["attention_mask"].cuda())
    assert hidden.is_cuda and hidden.dtype == torch.float16
    m = batch["attention_mask"].cuda().unsqueeze(-1).float()
    pooled = (hidden.float() * m).sum(1) / m.sum(1)
    assert _cosines(pooled.cpu().numpy(), want[:4]).min() >= 0.999
    t = model.encode(texts[:3], as_torch=True)
    assert t.is_cuda
    # Device inputs (int64 ids, int64 / int32 / bool masks) give what host inputs give;
    # bad device inputs are named as on the host.
    ids, am = batch["input_ids"], batch["attention_mask"]
    host = model(ids, am)
    for mask in (am.cuda(), am.int().cuda(), am.to(torch.uint8).cuda(), am.bool().cuda(),
                 am.bool()):
        assert torch.equal(model(ids.cuda(), mask), host)
    assert torch.equal(model(ids.int().cuda(), am.cuda()), host)
    assert torch.equal(model(ids.cuda().t().contiguous().t(), am.tolist()), host)
    bad = ids.clone()
    bad[1, 2] = 10 ** 6
    with pytest.raises(stof.StofError, match=r"ids\[1, 2\] = 1000000 is outside the vocabulary"):
        model(bad.cuda(), am.cuda())
    bad_am = am.clone()
    bad_am[2, 0] = 0
    with pytest.raises(stof.StofError, match="row 2 has a 1 at 1 after a 0 at 0"):
        model(ids.cuda(), bad_am.cuda())
    bad_am = am.clone()
    bad_am[3, 1] = 7
    with pytest.raises(stof.StofError, match=r"attention_mask\[3, 1\] = 7; it must hold only"):
        model(ids.cuda(), bad_am.cuda())
    assert torch.equal(model(ids.cuda(), am.cuda()), host)  # still usable after the errors


@needs_model
@pytest.mark.skipif(_gpu_count() == 0, reason="no GPU")
def test_gpu_outputs_are_fresh():
    """Calls on device tensors keep their C arguments per shape and get an output
    allocated one call ahead: every call still returns a tensor of its own, which later
    calls (of any shape, on any stream) leave alone."""
    torch = pytest.importorskip("torch")
    model = stof.Model.from_pretrained(MODEL, device="cuda")
    gen = torch.Generator().manual_seed(5)

    def inputs(B, L):
        ids = torch.randint(1000, 20000, (B, L), generator=gen)
        lengths = torch.randint(max(1, L // 2), L + 1, (B,), generator=gen)
        am = (torch.arange(L)[None, :] < lengths[:, None]).long()
        return (ids * am).cuda(), am.cuda()

    shapes = [(1, 32), (1, 32), (2, 17), (1, 32), (3, 64), (1, 32)]
    runs = [inputs(*s) for s in shapes]
    want = [model(ids.cpu(), am.cpu()).clone() for ids, am in runs]  # the general path
    outs = [model(ids, am) for ids, am in runs]
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        outs.append(model(*runs[0]))
    side.synchronize()
    outs.append(model(*runs[0]))
    torch.cuda.synchronize()
    ptrs = [o.data_ptr() for o in outs]
    assert len(set(ptrs)) == len(ptrs), "two calls returned the same storage"
    for i, (o, w) in enumerate(zip(outs, want + [want[0], want[0]])):
        err = float((o.float() - w.float()).norm() / w.float().norm())
        assert err < 1e-2, f"call {i} ({tuple(o.shape)}): rel err {err:.2e} against the " \
            "general path (a later call wrote over it?)"
    model.close()
    with pytest.raises(ValueError, match="closed"):
        model(*runs[0])
