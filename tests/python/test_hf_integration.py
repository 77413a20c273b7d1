"""test_hf_integration.py — attn_implementation="stof" (python/stof/integrations/
transformers.py): tiny random BERT, GPT-2, LLaMA (GQA), Mistral (sliding window), Qwen2 (GQA
4:1) and ModernBERT (local and global layers) models against the same weights under SDPA on
right-padded batches, checking that every attention call went through stof; a stof mask spec
of one's own against SDPA given the same mask densely; the fallback path (left padding, a
user's 4D mask, a KV cache, a float32 model on the GPU) equal to SDPA with a single warning
per reason; and a smoke run of bench/compare_hf_attention.py. Each case runs on the CPU
(float32) and, where torch sees a GPU, on CUDA (float16, head size 64, attention far from
uniform; its cases carry "cuda" in their ids, which is how ctest's test_python_gpu_hf picks
them). Skips without torch or transformers."""

import copy
import json
import warnings

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
stof_hf = pytest.importorskip("stof.integrations.transformers")
masks = pytest.importorskip("transformers.masking_utils")

stof_hf.register()

SMALL = dict(vocab_size=100, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
             intermediate_size=128)
# on the GPU: head size 64 (stof's GPU kernels take 32, 64, 80, 96, 128, 256), and weights of
# std 0.1 so that attention rows are far from uniform and a wrong mask shows
GPU_SMALL = dict(SMALL, hidden_size=256, intermediate_size=512, initializer_range=0.1)
# sliding windows and local attention that matter at the batch lengths below
WINDOWS = {"cpu": dict(sliding_window=7, local_attention=8),
           "cuda": dict(sliding_window=48, local_attention=64)}
LENGTH = {"cpu": 40, "cuda": 160}


def family_config(family, device):
    """(model class, config) of a tiny model of the family for device."""
    small, win = (GPU_SMALL if device == "cuda" else SMALL), WINDOWS[device]
    if family == "bert":
        return transformers.BertModel, transformers.BertConfig(**small)
    if family == "gpt2":
        return transformers.GPT2Model, transformers.GPT2Config(
            vocab_size=100, n_embd=small["hidden_size"], n_layer=2, n_head=4, bos_token_id=1,
            eos_token_id=2, initializer_range=small.get("initializer_range", 0.02))
    if family == "llama":
        return transformers.LlamaModel, transformers.LlamaConfig(**small, num_key_value_heads=2)
    if family == "mistral":
        return transformers.MistralModel, transformers.MistralConfig(
            **small, num_key_value_heads=2, sliding_window=win["sliding_window"])
    if family == "qwen2":
        return transformers.Qwen2Model, transformers.Qwen2Config(**small, num_key_value_heads=1)
    # two local layers (a bidirectional window of local_attention / 2 each side), a global one
    assert family == "modernbert"
    return transformers.ModernBertModel, transformers.ModernBertConfig(
        **{**small, "num_hidden_layers": 3}, global_attn_every_n_layers=3,
        local_attention=win["local_attention"], pad_token_id=0, bos_token_id=1, eos_token_id=2,
        cls_token_id=1, sep_token_id=2)


FAMILIES = ("bert", "gpt2", "llama", "mistral", "modernbert", "qwen2")
HAS_CUDA = torch.cuda.is_available()
DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(
    not HAS_CUDA, reason="torch sees no CUDA device"))]


@pytest.fixture
def calls(monkeypatch):
    """Counts the attention calls that reached stof."""
    n = [0]
    real = stof_hf._torch_op.attention_op

    def counted(*args, **kwargs):
        n[0] += 1
        return real(*args, **kwargs)

    monkeypatch.setattr(stof_hf._torch_op, "attention_op", counted)
    return n


def pair(family, seed, device="cpu", dtype=None):
    """The family's tiny model under SDPA and under stof, same weights, on device (float16 on
    CUDA unless dtype says otherwise)."""
    cls, config = family_config(family, device)
    dtype = dtype or (torch.float16 if device == "cuda" else torch.float32)
    torch.manual_seed(seed)
    sdpa = cls._from_config(copy.deepcopy(config), attn_implementation="sdpa").eval()
    ours = cls._from_config(copy.deepcopy(config), attn_implementation="stof").eval()
    ours.load_state_dict(sdpa.state_dict())
    return sdpa.to(device, dtype), ours.to(device, dtype)


def batch(seed, B=3, L=40, left=False, device="cpu"):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, 100, (B, L), generator=g)
    lengths = [L] + [int(x) for x in torch.randint(3, L, (B - 1,), generator=g)]
    am = torch.zeros(B, L, dtype=torch.long)
    for b, n in enumerate(lengths):
        if left:
            am[b, L - n:] = 1
        else:
            am[b, :n] = 1
    return ids.to(device), am.to(device)


def run(model, ids, am, **kw):
    with torch.no_grad():
        return model(input_ids=ids, attention_mask=am, **kw).last_hidden_state


def assert_real_close(got, want, am, tol=1e-4):
    """Largest difference at real tokens <= tol on the CPU; on CUDA (float16 on both sides)
    the relative error ||got - want|| / ||want|| over real tokens <= 1e-2 instead, where a
    wrong mask or a padding leak moves it by far more."""
    real = am.bool()
    got, want = got[real].double(), want[real].double()
    if got.is_cuda and tol:
        err = ((got - want).norm() / want.norm()).item()
        assert err <= 1e-2, f"relative error {err} at real tokens"
        return
    err = (got - want).abs().max().item()
    assert err <= tol, f"off by {err} at real tokens"


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("family", FAMILIES)
def test_family_matches_sdpa(family, device, seed, calls):
    sdpa, ours = pair(family, seed, device)
    ids, am = batch(seed, L=LENGTH[device], device=device)
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message="stof attention falls back")
        got = run(ours, ids, am)
    layers = ours.config.num_hidden_layers
    assert calls[0] == layers, "every layer's attention should run on stof"
    assert_real_close(got, run(sdpa, ids, am), am)
    calls[0] = 0
    assert_real_close(run(ours, ids, None), run(sdpa, ids, None), torch.ones_like(am))
    assert calls[0] == layers
    if device == "cuda" and family in ("llama", "mistral", "qwen2"):
        # grouped-query attention reaches stof with its fewer K/V heads, not repeated
        assert stof_hf._gqa_native is True


def test_attention_under_torch_compile(seed):
    """While torch.compile traces, the hook goes through torch.ops.stof.attention (no graph
    break) and gives what its eager path gives, [B, L, H, D] contiguous either way."""
    g = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(2, 4, 24, 16, generator=g) for _ in range(3))
    lengths = torch.tensor([24, 11], dtype=torch.int32)
    want = stof_hf._run(q, k, v, "causal", None, lengths)
    torch._dynamo.reset()
    compiled = torch.compile(lambda *a: stof_hf._run(*a, "causal", None, lengths),
                             fullgraph=True, backend="aot_eager")
    got = compiled(q, k, v)
    assert got.shape == want.shape == (2, 24, 4, 16) and got.is_contiguous()
    assert want.is_contiguous()
    assert torch.equal(got[0], want[0]) and torch.equal(got[1, :11], want[1, :11])


def test_pattern_specs():
    spec = stof_hf._pattern_spec
    assert spec(masks.bidirectional_mask_function) == ""
    assert spec(masks.causal_mask_function) == "causal"
    assert spec(masks.sliding_window_causal_mask_function(5)) == "window:4:0"
    assert spec(masks.sliding_window_bidirectional_mask_function(3)) == "window:3:3"
    assert spec(masks.or_masks(masks.causal_mask_function,
                               masks.bidirectional_mask_function)) is None
    pad = masks.padding_mask_function(torch.ones(1, 4, dtype=torch.bool))
    assert spec(masks.and_masks(masks.causal_mask_function, pad)) is None
    assert spec(lambda b, h, q, k: q >= k) is None


def test_own_mask_spec(seed, calls):
    """BERT with stof_mask="window:3" against SDPA given the same window as a 4D mask."""
    sdpa, ours = pair("bert", seed)
    ids, am = batch(seed)
    L = ids.shape[1]
    i = torch.arange(L)
    dense = ((i[:, None] - i[None, :]).abs() <= 3)[None, None] & am.bool()[:, None, None, :]
    got = run(ours, ids, am, stof_mask="window:3")
    assert calls[0] == 2
    assert_real_close(got, run(sdpa, ids, dense), am)
    ours.config.stof_mask = "window:3"
    assert_real_close(run(ours, ids, am), got, am, tol=0)
    # left padding is not lengths: no equivalent to fall back to with one's own mask
    ids, left = batch(seed, left=True)
    with pytest.raises(ValueError, match="cannot run here"):
        run(ours, ids, left)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("family", ["bert", "llama", "modernbert"])
def test_window_global_spec(family, device, seed, calls):
    """stof_mask="window:W,global:G" passed through every layer (replacing the family's own
    causal or local pattern) against SDPA given the same mask as a dense boolean [B, 1, L, L]:
    keys within W of the query, or among the first G tokens, or any key for the first G
    queries; padding keys hidden."""
    sdpa, ours = pair(family, seed, device)
    L = LENGTH[device]
    w, g = (5, 2) if device == "cpu" else (16, 4)
    ids, am = batch(seed, L=L, device=device)
    i = torch.arange(L, device=device)
    near = (i[:, None] - i[None, :]).abs() <= w
    glob = (i[:, None] < g) | (i[None, :] < g)
    dense = (near | glob)[None, None] & am.bool()[:, None, None, :]
    got = run(ours, ids, am, stof_mask=f"window:{w},global:{g}")
    assert calls[0] == ours.config.num_hidden_layers
    assert_real_close(got, run(sdpa, ids, dense), am)
    # the mask matters at this length: without it the output is another one
    full = run(ours, ids, am)
    real = am.bool()
    assert (full[real] - got[real]).abs().max().item() > 1e-2


@pytest.mark.parametrize("device", DEVICES)
def test_fallback_left_padding_warns_once(device, seed, calls):
    sdpa, ours = pair("llama", seed, device)
    ids, am = batch(seed, L=LENGTH[device], left=True, device=device)
    stof_hf._warned.clear()
    with pytest.warns(UserWarning, match="falls back to SDPA"):
        got = run(ours, ids, am)
    assert calls[0] == 0
    assert_real_close(got, run(sdpa, ids, am), am, tol=0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        run(ours, ids, am)  # the same reason again: no second warning


@pytest.mark.parametrize("device", DEVICES)
def test_fallback_user_4d_mask(device, seed, calls):
    sdpa, ours = pair("bert", seed, device)
    ids, am = batch(seed, L=LENGTH[device], device=device)
    L = ids.shape[1]
    g = torch.Generator().manual_seed(seed)
    dense = torch.rand(ids.shape[0], 1, L, L, generator=g) < 0.7
    dense = (dense | torch.eye(L, dtype=torch.bool)).to(device)
    stof_hf._warned.clear()
    with pytest.warns(UserWarning, match="falls back to SDPA"):
        got = run(ours, ids, dense)
    assert calls[0] == 0
    assert torch.equal(got, run(sdpa, ids, dense))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("family", ["bert", "llama", "modernbert"])
def test_fallback_after_stof_mask(family, device, seed, calls, monkeypatch):
    """A layer that falls back after the mask hook answered with its tagged [B, L] padding
    mask (as a float32 model on the GPU does) gets the mask SDPA would have built: the
    output equals SDPA's exactly, and sdpa_mask runs once per mask of the forward, not once
    per layer. The reason is forced here so that the path runs on the CPU too."""
    sdpa, ours = pair(family, seed, device)
    ids, am = batch(seed, L=LENGTH[device], device=device)
    monkeypatch.setattr(stof_hf, "_unsupported", lambda *args: "forced for the test")
    built = [0]
    real = masks.sdpa_mask

    def counted(*args, **kwargs):
        built[0] += 1
        return real(*args, **kwargs)

    monkeypatch.setattr(masks, "sdpa_mask", counted)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = run(ours, ids, am)
    assert calls[0] == 0
    assert built[0] == (2 if family == "modernbert" else 1)  # its global and local masks
    assert torch.equal(got, run(sdpa, ids, am))


@pytest.mark.skipif(not HAS_CUDA, reason="torch sees no CUDA device")
def test_fallback_float32_on_cuda(seed, calls):
    """stof's GPU kernels run float16/bfloat16: a float32 model on the GPU falls back, once."""
    sdpa, ours = pair("bert", seed, "cuda", dtype=torch.float32)
    ids, am = batch(seed, L=LENGTH["cuda"], device="cuda")
    stof_hf._warned.clear()
    with pytest.warns(UserWarning, match="float16/bfloat16"):
        got = run(ours, ids, am)
    assert calls[0] == 0
    assert torch.equal(got, run(sdpa, ids, am))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("family", ["gpt2", "llama"])
def test_kv_cache_decode(family, device, seed, calls):
    """The prompt runs on stof; decoding steps (one query, a longer cache) fall back."""
    sdpa, ours = pair(family, seed, device)
    ids, _ = batch(seed, B=2, L=24, device=device)
    out = {}
    for name, m in (("sdpa", sdpa), ("stof", ours)):
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            first = m(input_ids=ids[:, :20], use_cache=True)
            cache, states = first.past_key_values, [first.last_hidden_state]
            for t in range(20, 24):
                step = m(input_ids=ids[:, t:t + 1], past_key_values=cache, use_cache=True)
                cache = step.past_key_values
                states.append(step.last_hidden_state)
        out[name] = torch.cat(states, 1)
    assert calls[0] == 2
    assert_real_close(out["stof"], out["sdpa"], torch.ones(out["stof"].shape[:2], device=device))


def test_compare_hf_attention_cpu(tmp_path, seed):
    """bench/compare_hf_attention.py's every step on the CPU (--tiny): each case ran all its
    attention calls on stof and matched SDPA, and the JSON carries the issue's keys."""
    bench = pytest.importorskip("compare_hf_attention")
    out = tmp_path / "hf.json"
    argv = ["--device", "cpu", "--tiny", "--families", "llama,modernbert", "--warmup", "1",
            "--pairs", "2", "--rounds", "2", "--seed", str(seed % 10000),
            "--out", str(out)]
    assert bench.main(argv) == 0
    result = json.loads(out.read_text())
    assert set(result) >= {"device", "date", "commit", "command", "cases", "summary"}
    assert set(result["summary"]) >= {"min_long_masked_speedup", "min_speedup"}
    cases = result["cases"]
    assert [(c["family"], c["mask"]) for c in cases] == [
        (f, m) for f in ("llama", "modernbert") for m in ("padded", "family",
                                                           "window:16,global:4")]
    for c in cases:
        assert not c["failed"] and c["problems"] == [], c
        assert c["stof_calls"] == c["layers"] and c["max_rel_err"] <= 1e-5
        assert c["speedup"] > 0 and len(c["round_speedups"]) == 2
    assert result["summary"]["min_speedup"] == min(c["speedup"] for c in cases)
