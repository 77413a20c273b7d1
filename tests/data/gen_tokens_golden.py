#!/usr/bin/env python3
"""Writes tests/data/tokens_golden.jsonl: Hugging Face token ids of all-MiniLM-L6-v2 for a
few hundred diverse strings, the reference of tests/test_model_tokenizer.c.

Each line is {"text": str, "ids": [...]} plus, where needed, "max_len" (truncation length,
512 when absent) and "hex" (the input bytes in hex: for text holding NUL, which C strings
cannot carry, and for invalid UTF-8, which Hugging Face sees as Python decodes it with
errors="replace"). Ids are those of transformers' BertTokenizerFast called with
truncation=True, max_length=max_len, no padding — what sentence-transformers does — and
the plain tokenizers library must agree on every string.

It also copies the model's vocab.txt and tokenizer_config.json to
tests/data/tokens_golden_vocab/, so the C test runs without the model.

Run:  scripts/fetch_model.sh && pip install transformers tokenizers &&
      python3 tests/data/gen_tokens_golden.py [MODEL_DIR]
"""
import json
import os
import random
import shutil
import sys

from tokenizers import Tokenizer

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
MODEL = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "models", "all-MiniLM-L6-v2")
OUT = os.path.join(HERE, "tokens_golden.jsonl")
VOCAB_DIR = os.path.join(HERE, "tokens_golden_vocab")

LOREM = ("Sentence embeddings map text to vectors so that similar meanings land close "
         "together; transformers compute them by pooling the last hidden states. ")


def base_cases():
    c = []
    # plain English
    c += [
        "Hello, world!", "The quick brown fox jumps over the lazy dog.",
        "This is a test sentence for the tokenizer.", "A man is playing a guitar.",
        "I can't believe it's not butter!", "What's the weather like in New York today?",
        "Transformers are state-of-the-art models for natural language processing.",
        "unaffable", "Unbelievably, the undergraduates' re-examination went well.",
        "tokenization tokenizer tokenized tokens", "supercalifragilisticexpialidocious",
        "The cat sat on the mat.", "She sells sea shells by the sea shore.",
        "  leading and trailing spaces  ", "multiple     internal     spaces",
        "UPPER CASE TEXT SHOULD BE LOWERED", "MiXeD cAsE wOrDs", "a", "I", "x y z",
    ]
    # accents and Latin extensions
    c += [
        "Héllo Wörld", "café crème brûlée", "naïve façade déjà vu", "Ångström Øresund Æsir",
        "São Paulo, Bogotá, Reykjavík", "Zürich Straße Größe", "ẞ ß SS", "Tiếng Việt có dấu",
        "Łódź Kraków Gdańsk", "Český Krumlov, Žilina, Ľubľana", "İstanbul ıI iİ", "Ğğ Şş Çç",
        "résumé RÉSUMÉ Résumé", "piñata jalapeño señor", "ﬁnance ﬂow ﬀ", "Ǆ ǅ ǆ Ǉ ǈ ǉ",
        "e\u0301 vs \u00e9 vs E\u0301", "a\u0308\u0301 o\u0328\u0304", "Å (U+212B) K (U+212A)",
        "Ω Ω ω", "ŉ ſ ĳ Ĳ", "Ḁḁ Ṩṩ Ỹỹ", "ȁ ȃ ȅ Ȩ ȩ",
    ]
    # other scripts
    c += [
        "Καλημέρα κόσμε", "ΟΔΟΣ ΑΣ σς Σ", "ΐ ΰ ᾄ ᾼ ῷ", "Привет, мир!", "Ёлка ЁЖИК йод Й",
        "Українська мова: ї є ґ", "Բարեւ աշխարհ", "გამარჯობა", "שָׁלוֹם עוֹלָם",
        "مَرْحَبًا بِالْعَالَم", "नमस्ते दुनिया", "क़ ख़ ग़ ज़", "সুপ্রভাত", "வணக்கம்",
        "สวัสดีครับ", "ສະບາຍດີ", "မင်္ဂလာပါ", "ជំរាបសួរ", "ሰላም ልዑል", "ᏣᎳᎩ ꭰꭱ",
        "Ⲁⲛⲟⲕ", "ꦲꦏ꧀ꦱꦫ", "ᚠᚢᚦᚨᚱᚲ", "𐌰𐌱𐌲", "𝔘𝔫𝔦𝔠𝔬𝔡𝔢 𝐁𝐨𝐥𝐝",
    ]
    # CJK
    c += [
        "你好，世界！", "我爱自然语言处理。", "日本語のテキストです。", "ひらがな カタカナ ｶﾀｶﾅ",
        "東京タワーは333メートルです", "한국어 텍스트입니다", "안녕하세요 세계", "漢字かな交じり文",
        "中文English混合text", "豈 更 車 賈 (compatibility ideographs)", "𠀀𠀁 𪜀 𫝀 𫠠 𫡠 𬺰",
        "丽 𪘀", "㐀㐁 䶵", "全角ＡＢＣ１２３！", "〇一二三", "Ｈｅｌｌｏ　Ｗｏｒｌｄ", "龍龘",
        "ㄅㄆㄇ ㆠ", "각 각", "㈜ ㎞ ㍻",
    ]
    # emoji
    c += [
        "I love pizza 🍕!", "😀😃😄😁", "👍🏽 thumbs", "👨‍👩‍👧‍👦 family", "🇺🇸🇫🇷 flags",
        "1️⃣ keycap", "❤️ heart", "☃ ☺ ★ ✓ ✗", "🤖🧠💡", "🥰 🫠 🪿", "emoji🙂inside🙃words",
        "♠♣♥♦", "⌘⌥⇧", "© ® ™", "😀" * 30,
    ]
    # punctuation
    c += [
        "!!!???...", "--->", "(((([[[[{{{{", "Hello...world", "wait—what?!",
        "“Quoted” ‘text’ «guillemets» „low“", "a/b\\c|d", "@#$%^&*()_+=-`~", "1+1=2; 2*3=6",
        "¿Qué? ¡Sí!", "、。！？「」『』", "…‥‧", "§¶†‡•", "¡¢£¤¥¦", "⁅⁆⁇⁈⁉", "«»‹›",
        "x_y-z.w", ":-) ;-( :D", ".", ",,,,,,,,,,",
    ]
    # numbers, URLs, code
    c += [
        "3.14159", "1,000,000", "+1-555-0100", "2024-01-01T12:00:00Z", "1e-9 6.02e23",
        "½ ¾ ² ³ ¹", "Ⅻ ⅻ Ⅳ", "١٢٣ ४५६ ๗๘๙", "0x7fffffff 0b1010", "$19.99 €5 £3 ¥100",
        "https://example.com/path/to/page?q=1&x=y#frag", "user.name+tag@example.co.uk",
        "ftp://files.example.org/pub/file-v1.2.3.tar.gz", "www.hugging-face.co", "C:\\Users\\me",
        "int main(void) { return 0; }", "for (i = 0; i < n; i++) x[i] += y[i];",
        "<div class=\"a\">text</div>", "{\"json\": [1, 2, 3]}", "SELECT * FROM t WHERE a = 'b';",
        "#hashtag @mention", "v1.2.3-rc.1+build.5", "192.168.0.1:8080", "e=mc²",
    ]
    # special tokens written in the text
    c += [
        "[CLS] hello [SEP]", "[MASK] is a mask", "[mask] lower case is not special",
        "x[UNK]y", "[PAD][PAD]", "[SEP][SEP] [CLS]", "[CLS", "[ CLS ]", "before[MASK]after",
        "[unused0]",
    ]
    # long words
    c += [
        "a" * 99, "a" * 100, "a" * 101, "é" * 100, "é" * 101, "x" * 300,
        "Donaudampfschifffahrtsgesellschaftskapitän", "pneumonoultramicroscopicsilicovolcanoconiosis",
        "ab" * 50 + " end", "0123456789" * 11, "ﬁ" * 60, "😀" * 101,
        "Rindfleischetikettierungsüberwachungsaufgabenübertragungsgesetz",
    ]
    # empty, whitespace, control and format characters
    c += [
        "", " ", "   ", "\t", "\n", "\r\n", " \t\n\r ", "\u00a0", "\u3000", "\u2028\u2029",
        "\u2003\u2009\u200a", "a\tb\nc\rd", "\x01\x02\x03", "a\x7fb", "a\x85b", "a\u200bb",
        "a\u200db", "\ufeffBOM", "soft\u00adhyphen", "a\u200eb\u200fc", "\ufffd", "a\ufffdb",
        "\x1c\x1d\x1e\x1f", "a\u180eb", "\ue000 private", "tag\U000e0041\U000e007f",
        "\u0301 leading mark", "a\u034fb", "a\ufe0fb", "\u061c\u2066x\u2069",
    ]
    # canonical reordering and marks
    c += [
        "a\u0301\u0316", "a\u0316\u0301", "\U0001D16D\U0001D165", "\U0001D165\U0001D16D",
        "x\U0001D16D\u0301\U0001D165y", "Z̷̢̛̪͓̥̤͈̗̊̽̆͛a̸͕̠͛l̷g̷o̴ ̷t̷e̴x̵t̵", "ä̈̈̈̈̈̈̈̈̈̈̈̈",
        "\u1100\u1161\u11a8", "\u0915\u094d\u0937", "\u0e01\u0e34\u0e4a", "ᾀ ᾁ ᾂ ᾃ",
        "\u0344\u0345", "a\u1734b", "\u1715\u1714",
    ]
    # mixed scripts
    c += [
        "Hello 你好 Привет مرحبا", "Tokyo 東京 Токио", "naïve 中文 café",
        "Ελληνικά and English", "Русский123текст", "שלוםworld", "abcабвαβγ",
        "日本Japan日本", "emoji😀中文é", "x你y好z",
    ]
    # truncation at the default 512
    c += [
        LOREM * 30, ("word " * 600).strip(), "tokenization " * 300, "你好" * 600,
        "🙂 " * 700, "a,b;" * 400, "[SEP] " * 600,
    ]
    return c


def truncation_cases():
    """(text, max_len) pairs with small limits."""
    t = LOREM * 2
    return [(t, 2), (t, 3), (t, 4), (t, 16), (t, 64), ("unaffable " * 8, 5),
            ("supercalifragilisticexpialidocious", 4), ("你好世界", 4), ("", 2), ("a", 3),
            ("[CLS] [SEP] [MASK]", 4), (LOREM * 10, 128), (LOREM * 10, 256)]


def sweep_cases():
    """Code points across Unicode, one per word, so each meets the whole pipeline alone."""
    out = []
    for start, stop, step in [(0x20, 0x250, 1), (0x250, 0x530, 1), (0x530, 0x1000, 7),
                              (0x1000, 0x2000, 11), (0x1E00, 0x2000, 1), (0x2000, 0x2C00, 5),
                              (0x2C00, 0x3400, 9), (0x3400, 0xA000, 97), (0xA000, 0xAC00, 13),
                              (0xAC00, 0xD7A4, 71), (0xD7B0, 0xD800, 1), (0xF900, 0xFB00, 3),
                              (0xFB00, 0x10000, 7), (0x10000, 0x12000, 29),
                              (0x12000, 0x20000, 211), (0x1D100, 0x1D200, 1),
                              (0x1F000, 0x1FB00, 13), (0x20000, 0x30000, 613),
                              (0x2B800, 0x2BA00, 3), (0x2F800, 0x2FA20, 2),
                              (0xE0000, 0x110000, 4099)]:
        cps = [cp for cp in range(start, stop, step) if not 0xD800 <= cp <= 0xDFFF]
        for i in range(0, len(cps), 300):
            out.append(" ".join(chr(cp) for cp in cps[i:i + 300]))
    return out


def random_cases(n=40):
    rng = random.Random(20240601)
    pool = ("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 .,;:!?'\"()-_/"
            "éèêëàâäôöûüçñÉÈÀÇÑßøåæœ ĳ αβγδΣςΩ абвгдЖЩЯ 你好世界中文 日本語かなカナ 한국어 "
            "\u0301\u0308\u0327\u0316 😀🍕👍🏽 \t\n\u00a0\u3000\u200b\ufeff …—“”«»¿¡ [CLS][SEP]")
    out = []
    for _ in range(n):
        out.append("".join(rng.choice(pool) for _ in range(rng.randint(1, 200))))
    return out


def invalid_utf8_cases():
    """Byte strings that are not valid UTF-8 (or are, around invalid parts)."""
    return [b"a\xffb", b"\xff\xfe\xfd", b"abc\xe2\x82", b"\xe2\x82abc", b"\xc0\xaf overlong",
            b"\xe0\x80\xaf overlong3", b"\xed\xa0\x80 surrogate", b"\xf4\x90\x80\x80 too big",
            b"\xf8\x88\x80\x80\x80 five", b"caf\xc3 latin1 \xe9t\xe9", b"\x80\x80\x80 cont",
            b"ok \xf0\x9f\x98\x80 \xf0\x9f\x98 cut", b"\xc3\xa9\xc3", b"[CLS\xff] [SEP]\xfe",
            b"\xe4\xbd\xa0\xe5\xa5 \xe5\xa5\xbd", b"a\x00b\x00\x00c", b"\x00",
            b"x\xf0\x90\x80y\xf0\x90z", b"\xef\xbb\xbfBOM \xef\xbf\xbd", b"\xc2\x85 nel"]


class Reference:
    """transformers' BertTokenizerFast, cross-checked with the tokenizers library."""

    def __init__(self, model_dir):
        self.raw = Tokenizer.from_file(os.path.join(model_dir, "tokenizer.json"))
        self.raw.no_padding()
        self.raw.no_truncation()
        try:
            from transformers import AutoTokenizer
            self.hf = AutoTokenizer.from_pretrained(model_dir)
        except ImportError:
            self.hf = None
            print("transformers not installed: using the tokenizers library alone",
                  file=sys.stderr)

    def ids(self, text, max_len):
        self.raw.enable_truncation(max_len)
        raw = self.raw.encode(text).ids
        if self.hf is not None:
            hf = self.hf(text, truncation=True, max_length=max_len)["input_ids"]
            assert hf == raw, (text[:80], hf[:20], raw[:20])
        return raw


def main():
    ref = Reference(MODEL)
    records = []

    def add(text, max_len=512, raw=None):
        rec = {"text": text, "ids": ref.ids(text, max_len)}
        if max_len != 512:
            rec["max_len"] = max_len
        if raw is not None or "\x00" in text:
            rec["hex"] = (raw if raw is not None else text.encode("utf-8")).hex()
        records.append(rec)

    for t in base_cases():
        add(t)
    for t, m in truncation_cases():
        add(t, m)
    for t in sweep_cases():
        add(t, 8192)
    for t in random_cases():
        add(t)
    for b in invalid_utf8_cases():
        add(b.decode("utf-8", errors="replace"), raw=b)

    with open(OUT, "w", encoding="utf-8") as f:
        for r in records:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")
    os.makedirs(VOCAB_DIR, exist_ok=True)
    for name in ("vocab.txt", "tokenizer_config.json"):
        shutil.copyfile(os.path.join(MODEL, name), os.path.join(VOCAB_DIR, name))
    print(f"wrote {len(records)} records to {OUT}", file=sys.stderr)


if __name__ == "__main__":
    main()
