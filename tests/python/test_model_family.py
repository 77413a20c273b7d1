"""test_model_family.py — stof.Model on every family's tiny checkpoint
(tests/data/families, gen_family_golden.py) on the CPU: model(input_ids, attention_mask)
and model.logits(...) against Hugging Face's fp32 outputs, with and without a stof mask,
and the info the binding reports."""

import os

import pytest

torch = pytest.importorskip("torch")
safetensors_torch = pytest.importorskip("safetensors.torch")
import stof  # noqa: E402

FAMILIES = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "data",
                        "families")
CASES = {"gpt2": ("gpt2", True), "llama": ("llama", True), "mistral": ("llama", True),
         "qwen2": ("llama", True), "modernbert": ("modernbert", False)}


def rel_err(out, ref, lengths):
    """max |out - ref| / max |ref| over the real tokens of [B, L, W] tensors."""
    err = mag = 0.0
    for b, n in enumerate(lengths.tolist()):
        err = max(err, (out[b, :n] - ref[b, :n]).abs().max().item())
        mag = max(mag, ref[b, :n].abs().max().item())
    return err / mag


@pytest.mark.parametrize("case", sorted(CASES))
def test_family_against_hf(case):
    family, decoder = CASES[case]
    g = safetensors_torch.load_file(os.path.join(FAMILIES, case + ".golden.safetensors"))
    ids, lengths = g["ids"].long(), g["lengths"]
    B, L = ids.shape
    attention_mask = (torch.arange(L)[None, :] < lengths[:, None]).long()
    with stof.Model.from_pretrained(os.path.join(FAMILIES, case), device="cpu") as model:
        info = model.info
        assert info["family"] == family and info["model_type"] == case
        assert info["is_decoder"] == decoder
        assert info["pooling"] == ("lasttoken" if decoder else "mean")
        for suffix, mask in (("", None), ("_masked", "window:2,global:1")):
            hidden = model(ids, attention_mask, mask=mask)
            assert hidden.dtype == torch.float32 and hidden.shape == (B, L, info["hidden"])
            assert rel_err(hidden, g["hidden" + suffix], lengths) <= 1e-4
            if not decoder:
                with pytest.raises(stof.StofError, match="without an LM head"):
                    model.logits(ids, attention_mask)
                continue
            every = model.logits(ids, attention_mask, mask=mask, all_tokens=True)
            assert every.shape == (B, L, info["vocab"])
            assert rel_err(every, g["logits" + suffix], lengths) <= 1e-4
            last = model.logits(ids, attention_mask, mask=mask)
            ref_last = g["logits" + suffix][torch.arange(B), lengths.long() - 1]
            assert last.shape == (B, info["vocab"])
            assert (last - ref_last).abs().max() <= 1e-4 * ref_last.abs().max()
