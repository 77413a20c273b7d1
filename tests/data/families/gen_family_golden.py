"""gen_family_golden.py — tiny random checkpoints of every decoder/encoder family stof runs
beside BERT, with Hugging Face's fp32 outputs for fixed inputs (test_model_family.c).

Run from the repository root with transformers installed (CPU is enough):
    python3 tests/data/families/gen_family_golden.py        # the CPU set
    python3 tests/data/families/gen_family_golden.py gpu    # the GPU set

Two sets of cases. The CPU set (test_model_family.c) is as small as a forward
can be. The GPU set (test_model_golden_gpu.c; cases named <family>_hd32) has the
head dim 32 the GPU kernels take, a batch longer than one 64-token tile
(B 3, L 72, lengths 72, 41, 9), windows that cross tiles, BERT beside the
others, and the mask spec "window:8,global:2".

For each case it writes tests/data/families/<case>/ (save_pretrained: config.json and
model.safetensors, or shards with model.safetensors.index.json) and <case>.golden.safetensors:
  ids [B, L] i32, lengths [B] i32 (a right-padded batch of mixed lengths),
  hidden [B, L, H] f32 (last hidden state; rows past a length are zero),
  logits [B, L, V] f32 (decoders; zero past a length),
  hidden_masked / logits_masked: the same with the stof mask spec MASK_SPEC intersected
      with the family's own masks (given to HF's eager attention as an extra additive mask),
  inv_freq [rot/2] f32 (llama: the llama3-scaled rotary frequencies HF uses),
and for decoders <case>.ids (the batch's sequences, one line of ids each, for `stof score`)
and <case>.score (each sequence's log-likelihood and perplexity from HF's logits).
Weights are redrawn at a larger scale than HF's init so that every layer matters. The
bf16 case rounds its weights to bf16 first and computes the golden outputs in fp32 from
the rounded weights, then stores the checkpoint in bf16.
"""

import math
import os
import sys

import torch
from safetensors.torch import save_file
from transformers import (BertConfig, BertModel, GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM,
                          MistralConfig, MistralForCausalLM, ModernBertConfig, ModernBertModel,
                          Qwen2Config, Qwen2ForCausalLM)

HERE = os.path.dirname(os.path.abspath(__file__))
B, L, VOCAB = 3, 12, 512
LENGTHS = [12, 7, 3]
WINDOW, GLOBAL = 2, 1
MASK_SPEC = "window:2,global:1"  # stof text form; spec_visible below is its meaning


def use_gpu_set():
    global L, VOCAB, LENGTHS, WINDOW, GLOBAL, MASK_SPEC
    L, VOCAB, LENGTHS = 72, 256, [72, 41, 9]
    WINDOW, GLOBAL = 8, 2
    MASK_SPEC = "window:8,global:2"


def spec_visible(i, j):
    """window:WINDOW (|i - j| <= WINDOW) united with global:GLOBAL (i or j < GLOBAL)."""
    return abs(i - j) <= WINDOW or i < GLOBAL or j < GLOBAL


def extra_mask(lengths):
    """[B, 1, L, L] additive: 0 where the spec lets a real query see a key, -inf elsewhere.
    Padding queries keep every key (their rows are ignored), so no row is left empty."""
    m = torch.zeros(B, 1, L, L)
    for b, n in enumerate(lengths):
        for i in range(n):
            for j in range(L):
                if not spec_visible(i, j):
                    m[b, 0, i, j] = float("-inf")
    return m


EXTRA = None  # set while computing the masked outputs


def patch_eager(module):
    """Adds EXTRA to the attention mask HF built (padding and the family's own masks)."""
    orig = module.eager_attention_forward

    def wrapped(mod, query, key, value, attention_mask, *args, **kwargs):
        if EXTRA is not None:
            assert attention_mask is not None and attention_mask.dtype != torch.bool
            attention_mask = attention_mask + EXTRA[:, :, :, : key.shape[-2]]
        return orig(mod, query, key, value, attention_mask, *args, **kwargs)

    module.eager_attention_forward = wrapped


def redraw(model, seed):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=g)
            if "norm" in name.lower() or "ln_" in name:
                p.copy_(1.0 + 0.1 * noise if name.endswith("weight") else 0.1 * noise)
            else:
                p.copy_(0.15 * noise)


def inputs(seed, vocab):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(1, vocab, (B, L), generator=g, dtype=torch.int64)
    att = torch.zeros(B, L, dtype=torch.int64)
    for b, n in enumerate(LENGTHS):
        att[b, :n] = 1
        ids[b, n:] = 0
    return ids, att


def run(model, ids, att, decoder):
    global EXTRA
    out = {}
    for suffix, extra in (("", None), ("_masked", extra_mask(LENGTHS))):
        EXTRA = extra
        with torch.no_grad():
            if decoder:
                res = model(input_ids=ids, attention_mask=att, output_hidden_states=True)
                hidden, logits = res.hidden_states[-1], res.logits
            else:
                hidden, logits = model(input_ids=ids, attention_mask=att).last_hidden_state, None
        EXTRA = None
        keep = att[:, :, None].float()
        out["hidden" + suffix] = (hidden.float() * keep).contiguous()
        if logits is not None:
            out["logits" + suffix] = (logits.float() * keep).contiguous()
    return out


def write_score(case, ids, logits):
    with open(os.path.join(HERE, case + ".ids"), "w") as f_ids, \
            open(os.path.join(HERE, case + ".score"), "w") as f_score:
        for b, n in enumerate(LENGTHS):
            f_ids.write(" ".join(str(int(t)) for t in ids[b, :n]) + "\n")
            logp = torch.log_softmax(logits[b, :n], dim=-1)
            ll = sum(logp[i, ids[b, i + 1]].item() for i in range(n - 1))
            f_score.write("%.6f %.6g\n" % (ll, math.exp(-ll / (n - 1))))


def save(case, model, decoder, seed, bf16=False, shard=None, extra=None):
    redraw(model, seed)
    if bf16:  # parameters only: buffers such as rotary inv_freq stay fp32, as when loaded
        with torch.no_grad():
            for p in model.parameters():
                p.copy_(p.to(torch.bfloat16).to(torch.float32))
    model.eval()
    ids, att = inputs(seed + 1, model.config.vocab_size)
    out = run(model, ids, att, decoder)
    out["ids"] = ids.to(torch.int32)
    out["lengths"] = torch.tensor(LENGTHS, dtype=torch.int32)
    out.update(extra or {})
    folder = os.path.join(HERE, case)
    if bf16:
        model.to(torch.bfloat16)
    kwargs = {"max_shard_size": shard} if shard else {}
    model.save_pretrained(folder, **kwargs)
    save_file(out, os.path.join(HERE, case + ".golden.safetensors"), metadata={"mask": MASK_SPEC})
    if decoder:
        write_score(case, ids, out["logits"].double())
    print(case, "->", sorted(os.listdir(folder)))


def patch_all():
    import transformers.models.gpt2.modeling_gpt2 as m_gpt2
    import transformers.models.llama.modeling_llama as m_llama
    import transformers.models.mistral.modeling_mistral as m_mistral
    import transformers.models.modernbert.modeling_modernbert as m_mb
    import transformers.models.qwen2.modeling_qwen2 as m_qwen2
    import transformers.models.bert.modeling_bert as m_bert
    for m in (m_gpt2, m_llama, m_mistral, m_mb, m_qwen2, m_bert):
        patch_eager(m)


def cpu_set():
    eager = {"attn_implementation": "eager"}

    cfg = GPT2Config(vocab_size=VOCAB, n_positions=32, n_embd=64, n_layer=2, n_head=4,
                     bos_token_id=1, eos_token_id=1, **eager)
    save("gpt2", GPT2LMHeadModel(cfg), True, 10)

    rope = {"rope_type": "llama3", "rope_theta": 10000.0, "factor": 8.0, "low_freq_factor": 1.0,
            "high_freq_factor": 4.0, "original_max_position_embeddings": 16}
    cfg = LlamaConfig(vocab_size=VOCAB, hidden_size=64, intermediate_size=128,
                      num_hidden_layers=2, num_attention_heads=8, num_key_value_heads=2,
                      max_position_embeddings=64, rope_parameters=rope,
                      tie_word_embeddings=False, **eager)
    model = LlamaForCausalLM(cfg)
    inv_freq = model.model.rotary_emb.inv_freq.detach().float().clone()
    save("llama", model, True, 20, extra={"inv_freq": inv_freq})

    cfg = MistralConfig(vocab_size=VOCAB, hidden_size=64, intermediate_size=128,
                        num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                        max_position_embeddings=64, sliding_window=5,
                        tie_word_embeddings=False, **eager)
    save("mistral", MistralForCausalLM(cfg), True, 30, shard="200KB")

    cfg = Qwen2Config(vocab_size=VOCAB, hidden_size=64, intermediate_size=96,
                      num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=1,
                      max_position_embeddings=64, use_sliding_window=True, sliding_window=4,
                      max_window_layers=1, tie_word_embeddings=True, **eager)
    save("qwen2", Qwen2ForCausalLM(cfg), True, 40, bf16=True)

    cfg = ModernBertConfig(vocab_size=VOCAB, hidden_size=64, intermediate_size=96,
                           num_hidden_layers=3, num_attention_heads=4,
                           max_position_embeddings=64, global_attn_every_n_layers=2,
                           local_attention=4, pad_token_id=0, bos_token_id=1, eos_token_id=2,
                           cls_token_id=1, sep_token_id=2, **eager)
    save("modernbert", ModernBertModel(cfg), False, 50)


def gpu_set():
    """Head dim 32 everywhere; GQA 4:1 (LLaMA), windows of 24 (Mistral), 16
    (Qwen2's first layer) and 8 each side (ModernBERT) across 64-token tiles."""
    use_gpu_set()
    eager = {"attn_implementation": "eager"}
    cfg = GPT2Config(vocab_size=250, n_positions=128, n_embd=64, n_layer=2, n_head=2,
                     bos_token_id=1, eos_token_id=1, **eager)
    save("gpt2_hd32", GPT2LMHeadModel(cfg), True, 110)

    rope = {"rope_type": "llama3", "rope_theta": 10000.0, "factor": 8.0, "low_freq_factor": 1.0,
            "high_freq_factor": 4.0, "original_max_position_embeddings": 32}
    cfg = LlamaConfig(vocab_size=VOCAB, hidden_size=128, intermediate_size=192,
                      num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=1,
                      max_position_embeddings=256, rope_parameters=rope,
                      tie_word_embeddings=False, **eager)
    save("llama_hd32", LlamaForCausalLM(cfg), True, 120)

    cfg = MistralConfig(vocab_size=VOCAB, hidden_size=64, intermediate_size=128,
                        num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1,
                        max_position_embeddings=256, sliding_window=24,
                        tie_word_embeddings=False, **eager)
    save("mistral_hd32", MistralForCausalLM(cfg), True, 130)

    cfg = Qwen2Config(vocab_size=VOCAB, hidden_size=64, intermediate_size=96,
                      num_hidden_layers=3, num_attention_heads=2, num_key_value_heads=1,
                      max_position_embeddings=256, use_sliding_window=True, sliding_window=16,
                      max_window_layers=1, tie_word_embeddings=True, **eager)
    save("qwen2_hd32", Qwen2ForCausalLM(cfg), True, 140, bf16=True)

    cfg = ModernBertConfig(vocab_size=VOCAB, hidden_size=64, intermediate_size=96,
                           num_hidden_layers=3, num_attention_heads=2,
                           max_position_embeddings=256, global_attn_every_n_layers=2,
                           local_attention=16, pad_token_id=0, bos_token_id=1, eos_token_id=2,
                           cls_token_id=1, sep_token_id=2, **eager)
    save("modernbert_hd32", ModernBertModel(cfg), False, 150)

    cfg = BertConfig(vocab_size=VOCAB, hidden_size=64, num_hidden_layers=2, num_attention_heads=2,
                     intermediate_size=128, max_position_embeddings=128, type_vocab_size=2,
                     hidden_act="gelu", pad_token_id=0, **eager)
    save("bert_hd32", BertModel(cfg, add_pooling_layer=False), False, 160)


def main(argv):
    torch.manual_seed(0)
    patch_all()
    if argv[1:] == ["gpu"]:
        gpu_set()
    elif not argv[1:]:
        cpu_set()
    else:
        sys.exit("usage: gen_family_golden.py [gpu]")


if __name__ == "__main__":
    sys.exit(main(sys.argv))
