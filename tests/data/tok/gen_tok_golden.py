#!/usr/bin/env python3
"""Writes the tokenizer golden data of tests/test_tok_golden.c.

BERT's WordPiece is checked with the real all-MiniLM-L6-v2 tokenizer.json (see bert()).
For each other family (GPT-2, LLaMA-3, Qwen2, ModernBERT, LLaMA-2, Mistral, T5) this trains a
small tokenizer with Hugging Face `tokenizers` on a fixed corpus, built with that
family's own normalizer / pre-tokenizer / model flags / post-processor / decoder and
special tokens (so every code path is the one the real folder takes; only the vocabulary
is smaller), saves the folder (tokenizer.json, tokenizer_config.json) and writes
golden.jsonl: one line per test string with

  hex      the input bytes (hex). Most are UTF-8; some are deliberately invalid. HF
           takes Python str only, so it receives bytes.decode("utf-8", errors="replace")
           while stof receives the raw bytes (its own decoding must give the same str).
  ids      Tokenizer.encode(str).ids (special tokens added by the post-processor)
  ids16    the same with enable_truncation(max_length=16) (first 300 strings only)
  dec      Tokenizer.decode(ids, skip_special_tokens=True)
  dec_all  Tokenizer.decode(ids, skip_special_tokens=False)

T5's tokenizer.json normalizes with a Precompiled SentencePiece character map: the one
used here is SentencePiece's own nmt_nfkc map, taken from a model the `sentencepiece`
package trains on the corpus (only its normalizer is kept; the Unigram vocabulary is
trained by `tokenizers`), followed by T5's Replace of runs of spaces.

Run: pip install sentencepiece; python3 tests/data/tok/gen_tok_golden.py
(tokenizers 0.23.x; deterministic)
"""
import json
import os
import random
import sys

os.environ["RAYON_NUM_THREADS"] = "1"  # the Unigram trainer's sums depend on thread count
import tokenizers  # noqa: E402
from tokenizers import Regex, Tokenizer  # noqa: E402, decoders, models, normalizers, pre_tokenizers, processors, trainers
from tokenizers import AddedToken  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
N_STRINGS = 2050

LLAMA3_RE = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
             r"|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2_RE = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
            r"|\s*[\r\n]+|\s+(?!\S)|\s+")

WORDS = ("the of and to in is was for on that with as by at from his her it an were are which this be "
         "or has had not but first one their its new after who they have two been other when there all "
         "during into school time may years more most only over city some world would where later up such "
         "used many can state about national out known university united then made don't won't I'm "
         "you're we'll they've she'd it's can't shouldn't O'Neil rock'n'roll e-mail naïve café résumé "
         "coöperate façade jalapeño Zürich São Paulo Ångström Øresund straße Ελληνικά русский язык "
         "Україна עברית العربية हिन्दी ภาษาไทย 中文 汉字 日本語 ひらがな カタカナ 한국어 Tiếng Việt "
         "Kraków Dvořák İstanbul ﬁnance ＡＢＣ① ½ ² ™ № ℃ µ Ⅻ").split()
EMOJI = ["👍", "👍🏽", "👨‍👩‍👧‍👦", "🏳️‍🌈", "🇺🇸", "🇯🇵", "❤️", "😀", "🤖", "🧑🏿‍💻", "✈︎", "☃", "🎉🎉"]
ODD = ["e\u0301", "a\u0308\u0304", "\u0915\u094d\u0937", "Z\u0351\u036b\u0343\u036a\u0302",
       "\u200b", "\u200d", "\ufeff", "\u00a0", "\u3000", "\u2028", "\t", "\n", "\r\n", "\x00",
       "\x01", "\x1b[0m", "\x7f", "\u0085", "\ud7ff", "\U0001d400\U0001d401", "\uffff", "\U0010fffd"]
PUNCT = list(".,;:!?'\"()[]{}<>/\\|@#$%^&*-_=+~`…—–«»¿¡“”‘’")


def corpus(rng):
    lines = []
    for _ in range(4000):
        n = rng.randint(3, 25)
        toks = []
        for _ in range(n):
            r = rng.random()
            if r < 0.75:
                toks.append(rng.choice(WORDS))
            elif r < 0.85:
                toks.append(str(rng.randint(0, 10 ** rng.randint(1, 7))))
            elif r < 0.95:
                toks.append(rng.choice(PUNCT))
            else:
                toks.append(rng.choice(EMOJI))
        lines.append(" ".join(toks))
    return lines


def test_strings(rng, specials):
    out = [b"", b" ", b"  ", b"\n", b"hello", b"Hello world", b"don't stop", b"I'M HERE, we'll see",
           b"1234567890", b"3.14159 2,000,000", b" " * 40 + b"x", b"a" + b" " * 17 + b"b",
           b"\t\ttabs\tand\nnewlines\r\n", "naïve café".encode(), "e\u0301te\u0301".encode(),
           "中文字符测试".encode(), "👨‍👩‍👧‍👦 family".encode(), "🇺🇸🇯🇵".encode(),
           b"\xff", b"a\xffb", b"\xe2\x82", b"caf\xc3", b"\xc3\x28", b"\xed\xa0\x80x",
           b"\xf0\x9f\x98", b"\xf4\x90\x80\x80", b"\xc0\xaf", b"\x80\x80abc"]
    for s in specials:
        out.append(s.encode())
        out.append(("a" + s + "b").encode())
        out.append(("Hi " + s + " there " + s).encode())
        out.append((s + s).encode())
    pieces = WORDS + EMOJI + ODD + PUNCT
    while len(out) < N_STRINGS - 6:
        kind = rng.random()
        n = rng.randint(1, 10)
        parts = []
        for _ in range(n):
            r = rng.random()
            if r < 0.6:
                parts.append(rng.choice(pieces))
            elif r < 0.7:
                parts.append(str(rng.randint(0, 10 ** rng.randint(1, 12))))
            elif r < 0.75:
                parts.append(" " * rng.randint(2, 12))
            elif r < 0.8 and specials:
                parts.append(rng.choice(specials))
            elif r < 0.85:
                parts.append(chr(rng.randint(0x20, 0x7e)) * rng.randint(1, 5))
            elif r < 0.9:
                parts.append(chr(rng.choice([rng.randint(0xa0, 0x2fff), rng.randint(0x3000, 0x9fff),
                                             rng.randint(0xac00, 0xd7a3), rng.randint(0x1f300, 0x1faff)])))
            else:
                parts.append(rng.choice(WORDS).upper())
        sep = rng.choice([" ", " ", " ", "", "\n", "  "])
        s = sep.join(parts).encode("utf-8", "surrogatepass")
        if kind < 0.06:  # invalid UTF-8: bytes cut or inserted at random
            b = bytearray(s)
            for _ in range(rng.randint(1, 3)):
                pos = rng.randint(0, len(b))
                b[pos:pos] = bytes([rng.choice([0x80, 0xbf, 0xc0, 0xc3, 0xe2, 0xed, 0xf0, 0xf5, 0xff])])
            s = bytes(b)
        out.append(s)
    big = " ".join(rng.choice(WORDS) for _ in range(400))
    out += [big.encode(), ("x" * 1000).encode(), (" " * 600).encode(), ("1" * 300).encode(),
            ("👍" * 100).encode(), ("a\u0301" * 150).encode()]
    return out


def bytelevel_bpe(lines, specials, vocab_size):
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=specials,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(lines, trainer)
    return tok


def gpt2(lines):
    specials = ["<|endoftext|>"]
    tok = bytelevel_bpe(lines, specials, 1200)
    tok.normalizer = None
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=True)
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    tok.decoder = decoders.ByteLevel()
    return tok, specials, {"model_max_length": 1024, "bos_token": "<|endoftext|>",
                           "eos_token": "<|endoftext|>", "unk_token": "<|endoftext|>"}


def llama3(lines):
    specials = ["<|begin_of_text|>", "<|end_of_text|>", "<|reserved_special_token_0|>",
                "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"]
    tok = bytelevel_bpe(lines, specials, 1500)
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(LLAMA3_RE), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=False)])
    tok.post_processor = processors.Sequence([
        processors.ByteLevel(trim_offsets=False),
        processors.TemplateProcessing(single="<|begin_of_text|> $A", pair="<|begin_of_text|> $A <|begin_of_text|> $B",
                                      special_tokens=[("<|begin_of_text|>", tok.token_to_id("<|begin_of_text|>"))])])
    tok.decoder = decoders.ByteLevel()
    d = json.loads(tok.to_str())
    d["model"]["ignore_merges"] = True
    return Tokenizer.from_str(json.dumps(d)), specials, {
        "model_max_length": 131072, "bos_token": "<|begin_of_text|>", "eos_token": "<|end_of_text|>"}


def qwen2(lines):
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    tok = bytelevel_bpe(lines, specials, 1500)
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN2_RE), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)])
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    tok.decoder = decoders.ByteLevel()
    return tok, specials, {"model_max_length": 32768, "pad_token": "<|endoftext|>",
                           "eos_token": "<|im_end|>"}


def modernbert(lines):
    specials = ["|||IP_ADDRESS|||", "<|padding|>", "[UNK]", "[CLS]", "[SEP]", "[PAD]"]
    tok = bytelevel_bpe(lines, specials, 1400)
    tok.add_special_tokens([AddedToken("[MASK]", lstrip=True, rstrip=False, normalized=False, special=True)])
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=True)
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B [SEP]",
        special_tokens=[("[CLS]", tok.token_to_id("[CLS]")), ("[SEP]", tok.token_to_id("[SEP]"))])
    tok.decoder = decoders.ByteLevel()
    return tok, specials + ["[MASK]"], {"model_max_length": 8192, "pad_token": "[PAD]",
                                        "cls_token": "[CLS]", "sep_token": "[SEP]", "unk_token": "[UNK]",
                                        "mask_token": "[MASK]"}


def sp_bpe(lines, specials, vocab_size, normalizer, pre):
    """A SentencePiece-style BPE: trained on the normalized text, then the 256 byte
    tokens put in the vocabulary after the specials (as LLaMA's is laid out)."""
    tok = Tokenizer(models.BPE(unk_token="<unk>", fuse_unk=True, byte_fallback=True))
    tok.normalizer = normalizers.Sequence([normalizers.Prepend("\u2581"), normalizers.Replace(" ", "\u2581")])
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=specials, show_progress=False)
    tok.train_from_iterator(lines, trainer)
    d = json.loads(tok.to_str())
    vocab = d["model"]["vocab"]
    order = sorted(vocab.items(), key=lambda kv: kv[1])
    new = {}
    for t, _ in order[:len(specials)]:
        new[t] = len(new)
    for b in range(256):
        new["<0x%02X>" % b] = len(new)
    for t, _ in order[len(specials):]:
        if t not in new:
            new[t] = len(new)
    d["model"]["vocab"] = new
    for a in d["added_tokens"]:
        a["id"] = new[a["content"]]
    d["normalizer"] = normalizer
    d["pre_tokenizer"] = pre
    tok = Tokenizer.from_str(json.dumps(d))
    bos = tok.token_to_id("<s>")
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", pair="<s> $A <s> $B",
                                                       special_tokens=[("<s>", bos)])
    tok.decoder = decoders.Sequence([decoders.Replace("\u2581", " "), decoders.ByteFallback(), decoders.Fuse(),
                                     decoders.Strip(" ", 1, 0)])
    return tok


def llama2(lines):
    specials = ["<unk>", "<s>", "</s>"]
    norm = {"type": "Sequence", "normalizers": [
        {"type": "Prepend", "prepend": "\u2581"},
        {"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"}]}
    tok = sp_bpe(lines, specials, 1200, norm, None)
    return tok, specials, {"model_max_length": 4096, "bos_token": "<s>", "eos_token": "</s>",
                           "unk_token": "<unk>", "pad_token": None, "padding_side": "left"}


def mistral(lines):
    specials = ["<unk>", "<s>", "</s>", "[INST]", "[/INST]"]
    pre = {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "first", "split": False}
    tok = sp_bpe(lines, specials, 1200, None, pre)
    return tok, specials, {"model_max_length": 32768, "bos_token": "<s>", "eos_token": "</s>",
                           "unk_token": "<unk>"}


def proto_fields(buf):
    """(field number, bytes or None) of a protobuf message, enough to reach one field."""
    i = 0
    while i < len(buf):
        key, i = varint(buf, i)
        num, wire = key >> 3, key & 7
        val = None
        if wire == 0:
            _, i = varint(buf, i)
        elif wire == 2:
            n, i = varint(buf, i)
            val, i = buf[i:i + n], i + n
        elif wire in (1, 5):
            i += 8 if wire == 1 else 4
        else:
            raise ValueError(f"protobuf wire type {wire}")
        yield num, val


def varint(buf, i):
    v, shift = 0, 0
    while True:
        b = buf[i]
        i += 1
        v |= (b & 0x7F) << shift
        shift += 7
        if b < 0x80:
            return v, i


def sentencepiece_charsmap(lines):
    """SentencePiece's nmt_nfkc precompiled_charsmap (ModelProto.normalizer_spec field 2)."""
    import sentencepiece as spm
    import tempfile
    with tempfile.TemporaryDirectory() as d:
        corpus = os.path.join(d, "corpus.txt")
        with open(corpus, "w") as f:
            f.write("\n".join(lines))
        spm.SentencePieceTrainer.train(input=corpus, model_prefix=os.path.join(d, "m"), vocab_size=200,
                                       model_type="unigram", normalization_rule_name="nmt_nfkc",
                                       minloglevel=2)
        with open(os.path.join(d, "m.model"), "rb") as f:
            proto = f.read()
    for num, val in proto_fields(proto):
        if num == 3:
            for n2, v2 in proto_fields(val):
                if n2 == 2:
                    return bytes(v2)
    raise RuntimeError("no precompiled_charsmap in the SentencePiece model")


def t5(lines):
    specials = ["<pad>", "</s>", "<unk>"]
    tok = Tokenizer(models.Unigram())
    tok.normalizer = normalizers.Sequence([normalizers.Precompiled(sentencepiece_charsmap(lines)),
                                           normalizers.Replace(Regex(" {2,}"), " ")])
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="always", split=True)
    trainer = trainers.UnigramTrainer(vocab_size=900, special_tokens=specials, unk_token="<unk>",
                                      show_progress=False)
    tok.train_from_iterator(lines, trainer)
    tok.add_special_tokens(["<extra_id_0>", "<extra_id_1>"])
    tok.post_processor = processors.TemplateProcessing(single="$A </s>", pair="$A </s> $B </s>",
                                                       special_tokens=[("</s>", tok.token_to_id("</s>"))])
    tok.decoder = decoders.Metaspace(replacement="\u2581", prepend_scheme="always", split=True)
    return tok, specials + ["<extra_id_0>", "<extra_id_1>"], {
        "model_max_length": 512, "pad_token": "<pad>", "eos_token": "</s>", "unk_token": "<unk>"}


FAMILIES = {"gpt2": gpt2, "llama3": llama3, "qwen2": qwen2, "modernbert": modernbert,
            "llama2": llama2, "mistral": mistral, "t5": t5}


def write_golden(tok, folder, strings):
    trunc = Tokenizer.from_str(tok.to_str())
    trunc.enable_truncation(max_length=16)
    with open(os.path.join(folder, "golden.jsonl"), "w") as f:
        for i, raw in enumerate(strings):
            text = raw.decode("utf-8", errors="replace")
            ids = tok.encode(text).ids
            rec = {"hex": raw.hex(), "ids": ids,
                   "dec": tok.decode(ids, skip_special_tokens=True),
                   "dec_all": tok.decode(ids, skip_special_tokens=False)}
            if i < 300:
                rec["ids16"] = trunc.encode(text).ids
            f.write(json.dumps(rec, ensure_ascii=False) + "\n")


def bert():
    """WordPiece: the real all-MiniLM-L6-v2 tokenizer.json (models/, fetched by
    scripts/setup.sh), whose vocabulary is the committed tests/data/tokens_golden_vocab;
    only golden.jsonl is written (the C test opens that vocabulary folder)."""
    path = os.path.join(HERE, "..", "..", "..", "models", "all-MiniLM-L6-v2", "tokenizer.json")
    if not os.path.exists(path):
        print("bert: models/all-MiniLM-L6-v2 is absent, its golden is left as it is", file=sys.stderr)
        return
    tok = Tokenizer.from_file(path)
    tok.no_truncation()
    tok.no_padding()
    folder = os.path.join(HERE, "bert")
    os.makedirs(folder, exist_ok=True)
    write_golden(tok, folder, test_strings(random.Random(4), ["[CLS]", "[SEP]", "[MASK]", "[PAD]", "[UNK]"]))
    print("bert", "WordPiece golden written", file=sys.stderr)


def main():
    print("tokenizers", tokenizers.__version__, file=sys.stderr)
    rng = random.Random(1234)
    lines = corpus(rng)
    bert()
    for name, build in FAMILIES.items():
        tok, specials, config = build(lines)
        folder = os.path.join(HERE, name)
        os.makedirs(folder, exist_ok=True)
        tok.save(os.path.join(folder, "tokenizer.json"))
        tok = Tokenizer.from_file(os.path.join(folder, "tokenizer.json"))
        config = {k: v for k, v in config.items() if v is not None}
        with open(os.path.join(folder, "tokenizer_config.json"), "w") as f:
            json.dump(config, f, indent=1)
        strings = test_strings(random.Random(sum(map(ord, name))), specials)
        write_golden(tok, folder, strings)
        print(name, len(strings), "strings,", tok.get_vocab_size(), "tokens", file=sys.stderr)


if __name__ == "__main__":
    main()
