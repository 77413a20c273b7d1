"""test_tokenizer.py — stof.Tokenizer (python/stof/tokenizer.py) against Hugging Face
tokenizers on the committed family tokenizers: encode, encode_batch on threads,
truncation, decode with and without special tokens, streaming decode, info, errors.
The full 2,000-string goldens run in C (tests/test_tok_golden.c); this checks the
binding on fresh random strings."""

import os
import random

import pytest

import stof

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DATA = os.path.join(REPO, "tests", "data", "tok")
FAMILIES = ["gpt2", "llama3", "qwen2", "modernbert", "llama2", "mistral", "t5"]
PIECES = ["Hello", "world", "don't", "naïve", "café", "中文", "👍🏽", "👨‍👩‍👧", "1234", "  ", "\n",
          "e\u0301", "<s>", "</s>", "<|endoftext|>", "[CLS]", "!", "?", "\ud800"]


def random_texts(seed, n=200):
    rng = random.Random(seed)
    return [rng.choice(["", " ", "\n"]).join(rng.choice(PIECES) for _ in range(rng.randint(0, 12)))
            for _ in range(n)]


@pytest.mark.parametrize("family", FAMILIES)
def test_matches_hf(family, seed):
    tokenizers = pytest.importorskip("tokenizers")
    folder = os.path.join(DATA, family)
    hf = tokenizers.Tokenizer.from_file(os.path.join(folder, "tokenizer.json"))
    tok = stof.Tokenizer(folder)
    texts = random_texts(seed)
    # HF takes str only: lone surrogates reach it as U+FFFD, as stof reads their bytes.
    as_hf = [t.encode("utf-8", "surrogatepass").decode("utf-8", "replace") for t in texts]
    want = [e.ids for e in hf.encode_batch(as_hf)]
    assert [tok.encode(t) for t in texts] == want
    assert tok.encode_batch(texts, threads=2) == want
    flat, offsets = tok.encode_batch(texts, threads=1, as_numpy=True)
    assert [flat[offsets[i]:offsets[i + 1]].tolist() for i in range(len(texts))] == want
    for ids in want:
        assert tok.decode(ids) == hf.decode(ids, skip_special_tokens=True)
        assert tok.decode(ids, skip_special_tokens=False) == hf.decode(ids, skip_special_tokens=False)
    hf.enable_truncation(max_length=8)
    assert [tok.encode(t, max_length=8) for t in texts] == [hf.encode(t).ids for t in as_hf]
    info = tok.info
    assert info["model"] in ("bpe", "unigram") and info["vocab_size"] == hf.get_vocab_size()


def test_stream_holds_back_partial_characters():
    tok = stof.Tokenizer(os.path.join(DATA, "gpt2"))
    ids = tok.encode("naïve 👍🏽 中文")
    shown = ""
    for k in range(1, len(ids) + 1):
        part = tok.decode(ids[:k], stream=True)
        assert part.startswith(shown) and "\ufffd" not in part
        shown = part
    assert shown == "naïve 👍🏽 中文"


def test_padded_batch_and_errors():
    tok = stof.Tokenizer(os.path.join(DATA, "modernbert"))
    ids, lengths = tok.batch(["Hello world", "a"], 16)
    assert ids.shape[0] == 2 and list(lengths) == [len(tok.encode("Hello world")), len(tok.encode("a"))]
    assert ids[1, lengths[1]:].tolist() == [tok.info["pad_id"]] * (ids.shape[1] - lengths[1])
    with pytest.raises(stof.StofError) as e:
        stof.Tokenizer("/nonexistent/folder")
    assert e.value.status_name == "STOF_ERR_IO"
    with pytest.raises(TypeError):
        tok.encode(b"bytes")


def test_added_token_flags(tmp_path):
    """normalized (matched after the normalizer, in its output's form), single_word,
    lstrip / rstrip, and a special token whose name the normalizer changes (the library
    then no longer skips it when decoding)."""
    tokenizers = pytest.importorskip("tokenizers")
    from tokenizers import AddedToken, decoders, models, normalizers, pre_tokenizers, trainers
    hf = tokenizers.Tokenizer(models.BPE())
    hf.normalizer = normalizers.Sequence([normalizers.NFKC(), normalizers.Lowercase()])
    hf.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=True)
    hf.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=300, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    hf.train_from_iterator(["Hello world the quick brown fox", "ＡＢＣ abc ABC"] * 50, trainer)
    hf.add_tokens([AddedToken("HeLLo", normalized=True), AddedToken("Fox", normalized=False, single_word=True),
                   AddedToken("<mark>", normalized=True, lstrip=True, rstrip=True)])
    hf.add_special_tokens([AddedToken("[SPEC]", normalized=True, special=True),
                           AddedToken("<eos>", normalized=False, special=True)])
    hf.save(str(tmp_path / "tokenizer.json"))
    hf = tokenizers.Tokenizer.from_file(str(tmp_path / "tokenizer.json"))
    tok = stof.Tokenizer(str(tmp_path))
    for text in ["hello HELLO HeLLo", "Fox fox Foxes aFox Fox_", "x <mark> y  <MARK>  z", "[spec] [SPEC] ＨＥＬＬＯ",
                 "ＡＢＣ hello<eos>", " <mark>", "Fox", "a<eos> <eos>b", ""]:
        ids = hf.encode(text).ids
        assert tok.encode(text) == ids, text
        assert tok.decode(ids) == hf.decode(ids), text
        assert tok.decode(ids, skip_special_tokens=False) == hf.decode(ids, skip_special_tokens=False)
