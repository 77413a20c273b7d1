"""test_hf_integration.py — attn_implementation="stof" (python/stof/integrations/
transformers.py) on the CPU: tiny random BERT, GPT-2, LLaMA (GQA), Mistral (sliding window),
Qwen2 and ModernBERT (local and global layers) models against the same weights under SDPA on right-padded batches, checking that
every attention call went through stof; a stof mask spec of one's own against SDPA given the
same mask densely; and the fallback path (left padding, a user's 4D mask, a KV cache) equal
to SDPA with a single warning per reason. Skips without torch or transformers."""

import copy
import warnings

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
stof_hf = pytest.importorskip("stof.integrations.transformers")
masks = pytest.importorskip("transformers.masking_utils")

stof_hf.register()

SMALL = dict(vocab_size=100, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
             intermediate_size=128)
FAMILIES = {
    "bert": lambda: (transformers.BertModel, transformers.BertConfig(**SMALL)),
    "gpt2": lambda: (transformers.GPT2Model,
                     transformers.GPT2Config(vocab_size=100, n_embd=64, n_layer=2, n_head=4,
                                             bos_token_id=1, eos_token_id=2)),
    "llama": lambda: (transformers.LlamaModel,
                      transformers.LlamaConfig(**SMALL, num_key_value_heads=2)),
    "mistral": lambda: (transformers.MistralModel,
                        transformers.MistralConfig(**SMALL, num_key_value_heads=2,
                                                   sliding_window=7)),
    "qwen2": lambda: (transformers.Qwen2Model,
                      transformers.Qwen2Config(**SMALL, num_key_value_heads=1)),
    # two local layers (a bidirectional window of 4 each side), then a global one
    "modernbert": lambda: (transformers.ModernBertModel,
                           transformers.ModernBertConfig(**{**SMALL, "num_hidden_layers": 3},
                                                         global_attn_every_n_layers=3,
                                                         local_attention=8, pad_token_id=0,
                                                         bos_token_id=1, eos_token_id=2,
                                                         cls_token_id=1, sep_token_id=2)),
}


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


def pair(family, seed, **extra):
    cls, config = FAMILIES[family]()
    for k, v in extra.items():
        setattr(config, k, v)
    torch.manual_seed(seed)
    sdpa = cls._from_config(copy.deepcopy(config), attn_implementation="sdpa").eval()
    ours = cls._from_config(copy.deepcopy(config), attn_implementation="stof").eval()
    ours.load_state_dict(sdpa.state_dict())
    return sdpa, ours


def batch(seed, B=3, L=40, left=False):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, 100, (B, L), generator=g)
    lengths = [L] + [int(x) for x in torch.randint(3, L, (B - 1,), generator=g)]
    am = torch.zeros(B, L, dtype=torch.long)
    for b, n in enumerate(lengths):
        if left:
            am[b, L - n:] = 1
        else:
            am[b, :n] = 1
    return ids, am


def run(model, ids, am, **kw):
    with torch.no_grad():
        return model(input_ids=ids, attention_mask=am, **kw).last_hidden_state


def assert_real_close(got, want, am, tol=1e-4):
    real = am.bool()
    err = (got[real] - want[real]).abs().max().item()
    assert err <= tol, f"off by {err} at real tokens"


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_family_matches_sdpa(family, seed, calls):
    sdpa, ours = pair(family, seed)
    ids, am = batch(seed)
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message="stof attention falls back")
        got = run(ours, ids, am)
    layers = ours.config.num_hidden_layers
    assert calls[0] == layers, "every layer's attention should run on stof"
    assert_real_close(got, run(sdpa, ids, am), am)
    calls[0] = 0
    assert_real_close(run(ours, ids, None), run(sdpa, ids, None), torch.ones_like(am))
    assert calls[0] == layers


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


def test_fallback_left_padding_warns_once(seed, calls):
    sdpa, ours = pair("llama", seed)
    ids, am = batch(seed, left=True)
    stof_hf._warned.clear()
    with pytest.warns(UserWarning, match="falls back to SDPA"):
        got = run(ours, ids, am)
    assert calls[0] == 0
    assert_real_close(got, run(sdpa, ids, am), am, tol=0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        run(ours, ids, am)  # the same reason again: no second warning


def test_fallback_user_4d_mask(seed, calls):
    sdpa, ours = pair("bert", seed)
    ids, am = batch(seed)
    g = torch.Generator().manual_seed(seed)
    dense = torch.rand(ids.shape[0], 1, ids.shape[1], ids.shape[1], generator=g) < 0.7
    dense |= torch.eye(ids.shape[1], dtype=torch.bool)
    stof_hf._warned.clear()
    with pytest.warns(UserWarning, match="falls back to SDPA"):
        got = run(ours, ids, dense)
    assert calls[0] == 0
    assert torch.equal(got, run(sdpa, ids, dense))


@pytest.mark.parametrize("family", ["gpt2", "llama"])
def test_kv_cache_decode(family, seed, calls):
    """The prompt runs on stof; decoding steps (one query, a longer cache) fall back."""
    sdpa, ours = pair(family, seed)
    ids, _ = batch(seed, B=2, L=24)
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
    assert (out["stof"] - out["sdpa"]).abs().max().item() <= 1e-4
