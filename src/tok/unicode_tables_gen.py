#!/usr/bin/env python3
"""Generates src/tok/unicode_tables.h: the Unicode data the BERT tokenizer needs.

The tokenizer must give the same ids as Hugging Face's BertTokenizerFast (the Rust
`tokenizers` library: BertNormalizer + BertPreTokenizer). Each property starts from
Python's unicodedata and is then reconciled, code point by code point, with what the
installed `tokenizers` package actually does, because its Rust crates carry tables of
different Unicode versions (general categories from about Unicode 8, NFD from about
Unicode 12, lower-casing from the Rust standard library's current Unicode, and a
typo in the CJK ranges). Where the two disagree the library wins; the number of
corrected code points per property is written into the generated header.

Coverage: every code point U+0000..U+10FFFF (surrogates excluded).
  flags   clean-up drop / whitespace, CJK ideograph, non-spacing mark (stripped with
          accents), pre-tokenizer whitespace / punctuation        (ranges)
  ccc     canonical combining class, for NFD's canonical reordering (ranges)
  decomp  one-level canonical decomposition, applied recursively (Hangul syllables
          are decomposed algorithmically and are not in the table)
  lower   lower-case mapping as ranges of constant offset; one-to-many mappings
          (only U+0130) in a separate list

Run:  pip install tokenizers && python3 src/tok/unicode_tables_gen.py
It also checks the tables end to end: a Python model of the C algorithm must match
the library on every single code point and on random strings, for each combination
of lowercase / strip_accents.
"""
import os
import random
import sys
import unicodedata as ud

from tokenizers import normalizers, pre_tokenizers
import tokenizers

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "unicode_tables.h")
CPS = [cp for cp in range(0x110000) if not 0xD800 <= cp <= 0xDFFF]

F_DROP, F_SPACE, F_CJK, F_MN, F_WS, F_PUNCT = 1, 2, 4, 8, 16, 32
HANGUL_S, HANGUL_N = 0xAC00, 11172


def bert_norm(clean=False, cjk=False, strip=False, lower=False):
    return normalizers.BertNormalizer(clean_text=clean, handle_chinese_chars=cjk,
                                      strip_accents=strip, lowercase=lower)


# ---------------------------------------------------------------- properties

def py_flags(cp):
    """What unicodedata alone says (the starting point)."""
    c = chr(cp)
    cat = ud.category(c)
    f = 0
    if cp in (0, 0xFFFD) or (cat in ("Cc", "Cf", "Co", "Cs") and c not in "\t\n\r"):
        f |= F_DROP
    if c in "\t\n\r " or cat == "Zs":
        f |= F_SPACE
    if (0x4E00 <= cp <= 0x9FFF or 0x3400 <= cp <= 0x4DBF or 0x20000 <= cp <= 0x2A6DF
            or 0x2A700 <= cp <= 0x2B73F or 0x2B740 <= cp <= 0x2B81F or 0x2B820 <= cp <= 0x2CEAF
            or 0xF900 <= cp <= 0xFAFF or 0x2F800 <= cp <= 0x2FA1F):
        f |= F_CJK  # the ranges of Google's original BERT
    if cat == "Mn":
        f |= F_MN
    if c.isspace():
        f |= F_WS
    if (0x21 <= cp <= 0x2F or 0x3A <= cp <= 0x40 or 0x5B <= cp <= 0x60 or 0x7B <= cp <= 0x7E
            or cat.startswith("P")):
        f |= F_PUNCT
    return f


def hf_flags():
    clean, cjk, strip, nfd = bert_norm(clean=True), bert_norm(cjk=True), bert_norm(strip=True), \
        normalizers.NFD()
    pre = pre_tokenizers.BertPreTokenizer()
    flags = {}
    for cp in CPS:
        c = chr(cp)
        f = 0
        out = clean.normalize_str(c)
        if out == "":
            f |= F_DROP
        elif out == " ":
            f |= F_SPACE
        if cjk.normalize_str(c) == " " + c + " ":
            f |= F_CJK
        # Only undecomposable characters reach the mark filter as themselves.
        if nfd.normalize_str(c) == c and strip.normalize_str(c) == "":
            f |= F_MN
        pieces = [p for p, _ in pre.pre_tokenize_str("a" + c + "b")]
        if pieces == ["a", "b"]:
            f |= F_WS
        elif pieces == ["a", c, "b"]:
            f |= F_PUNCT
        flags[cp] = f
    return flags


def hf_decompositions():
    """One-level canonical decompositions of the characters the library decomposes."""
    nfd = normalizers.NFD()
    table = {}
    for cp in CPS:
        c = chr(cp)
        if HANGUL_S <= cp < HANGUL_S + HANGUL_N or nfd.normalize_str(c) == c:
            continue
        d = ud.decomposition(c)
        assert d and not d.startswith("<"), hex(cp)
        parts = [int(x, 16) for x in d.split()]
        assert 1 <= len(parts) <= 2, hex(cp)
        table[cp] = parts
    return table


def hf_ccc():
    """Combining classes as the library's NFD applies them: unicodedata's value when the
    library reorders the character, 0 when its tables do not know it. Only characters
    without a decomposition matter: the others are replaced before reordering."""
    nfd = normalizers.NFD()
    ccc = {}
    for cp in CPS:
        c = chr(cp)
        v = ud.combining(c)
        if v == 0 or nfd.normalize_str(c) != c:
            continue
        # Canonical order sorts marks by class: a mark of class v > 1 written before
        # U+0334 (class 1) moves after it; one of class 1 written after U+0301 (class
        # 230) moves in front of it.
        if v > 1:
            known = nfd.normalize_str(c + "\u0334") == "\u0334" + c
        else:
            known = nfd.normalize_str("\u0301" + c) == c + "\u0301"
        if known:
            ccc[cp] = v
    return ccc


def hf_lower():
    lower = bert_norm(lower=True)
    table = {}
    for cp in CPS:
        c = chr(cp)
        out = lower.normalize_str(c)
        if out != c:
            table[cp] = [ord(x) for x in out]
    return table


# ---------------------------------------------------------------- the C algorithm, in Python

class Model:
    """The algorithm of wordpiece.c over the generated tables, to check them."""

    def __init__(self, flags, decomp, ccc, lower):
        self.flags, self.decomp, self.ccc, self.lower = flags, decomp, ccc, lower

    def decompose(self, cp, out):
        if HANGUL_S <= cp < HANGUL_S + HANGUL_N:
            s = cp - HANGUL_S
            out.append(0x1100 + s // 588)
            out.append(0x1161 + (s % 588) // 28)
            if s % 28:
                out.append(0x11A7 + s % 28)
        elif cp in self.decomp:
            for p in self.decomp[cp]:
                self.decompose(p, out)
        else:
            out.append(cp)

    def normalize(self, text, clean=True, cjk=True, strip=True, lower=True):
        stage = []
        for ch in text:
            cp = ord(ch)
            f = self.flags.get(cp, 0)
            if clean and f & F_DROP:
                continue
            if clean and f & F_SPACE:
                cp = 0x20
            if cjk and f & F_CJK:
                stage += [0x20, cp, 0x20]
            else:
                stage.append(cp)
        if strip:
            dec = []
            for cp in stage:
                self.decompose(cp, dec)
            out, run = [], []
            for cp in dec + [None]:
                c = 0 if cp is None else self.ccc.get(cp, 0)
                if c == 0:
                    out += [x for x in sorted(run, key=lambda x: self.ccc[x])
                            if not self.flags.get(x, 0) & F_MN]
                    run = []
                    if cp is not None and not self.flags.get(cp, 0) & F_MN:
                        out.append(cp)
                else:
                    run.append(cp)
            stage = out
        if lower:
            low = []
            for cp in stage:
                low += self.lower.get(cp, [cp])
            stage = low
        return "".join(chr(x) for x in stage)

    def pretokenize(self, text):
        words, cur = [], ""
        for ch in text:
            f = self.flags.get(ord(ch), 0)
            if f & F_WS:
                if cur:
                    words.append(cur)
                cur = ""
            elif f & F_PUNCT:
                if cur:
                    words.append(cur)
                words.append(ch)
                cur = ""
            else:
                cur += ch
        if cur:
            words.append(cur)
        return words


def check(model, flags):
    pre = pre_tokenizers.BertPreTokenizer()
    combos = [(True, None), (True, False), (False, True), (False, False)]
    rng = random.Random(1234)
    marks = [cp for cp in CPS if ud.combining(chr(cp))]
    letters = [cp for cp in CPS if ud.category(chr(cp))[0] in "LNPSZ"]
    for lower, strip in combos:
        eff_strip = lower if strip is None else strip
        hf = normalizers.BertNormalizer(clean_text=True, handle_chinese_chars=True,
                                        strip_accents=strip, lowercase=lower)
        for cp in CPS:
            c = chr(cp)
            want = hf.normalize_str(c)
            got = model.normalize(c, strip=eff_strip, lower=lower)
            assert want == got, (lower, strip, hex(cp), want, got)
        for _ in range(20000):
            s = "".join(chr(rng.choice(marks if rng.random() < 0.5 else letters))
                        for _ in range(rng.randint(1, 12)))
            want = hf.normalize_str(s)
            got = model.normalize(s, strip=eff_strip, lower=lower)
            assert want == got, (lower, strip, [hex(ord(x)) for x in s], want, got)
            want_w = [p for p, _ in pre.pre_tokenize_str(want)]
            assert want_w == model.pretokenize(got), (s, want_w)
    # Every pair of reorderable marks, both orders.
    nfd = normalizers.NFD()
    nz = sorted(model.ccc)
    for a in nz[::3]:
        for b in nz:
            s = chr(a) + chr(b)
            want = nfd.normalize_str(s)
            dec = []
            for cp in (a, b):
                model.decompose(cp, dec)
            got = "".join(chr(x) for x in sorted(dec, key=lambda x: model.ccc.get(x, 0))) \
                if all(model.ccc.get(x, 0) for x in dec) else None
            if got is not None:
                assert want == got, (hex(a), hex(b))


# ---------------------------------------------------------------- emit

def ranges(values, default=0):
    """[(start, value)] where value changes, over all code points."""
    out, prev = [], None
    for cp in range(0x110000):
        v = values.get(cp, default)
        if v != prev:
            out.append((cp, v))
            prev = v
    return out


def lower_ranges(lower):
    """Runs of single mappings with a constant offset and a step of 1 or 2."""
    single = sorted((cp, m[0]) for cp, m in lower.items() if len(m) == 1)
    runs = []
    for cp, to in single:
        delta = to - cp
        if runs:
            s, e, step, d = runs[-1]
            if d == delta and (cp - e == step or (s == e and cp - e in (1, 2))):
                runs[-1] = (s, cp, cp - e if s == e else step, d)
                continue
        runs.append((cp, cp, 1, delta))
    return runs


def fmt_rows(items, width=96):
    """Comma-separated items, lines filled up to width characters."""
    lines, cur = [], "    "
    for it in items:
        if len(cur) + len(it) + 1 > width:
            lines.append(cur)
            cur = "    "
        cur += it + ","
    lines.append(cur)
    return "\n".join(lines)


def emit(flags, decomp, ccc, lower, notes):
    fr = ranges(flags)
    cr = ranges(ccc)
    dk = sorted(decomp)
    lr = lower_ranges(lower)
    multi = sorted((cp, m) for cp, m in lower.items() if len(m) != 1)
    for (_, e, _, _), (s, _, _, _) in zip(lr, lr[1:]):
        assert e < s, "lower-case runs must not overlap"
    assert all(len(m) == 2 for _, m in multi)
    assert max(ccc.values()) < 256 and max(dk) < (1 << 21)
    text = f"""/*
 * unicode_tables.h — generated by unicode_tables_gen.py (tokenizers {tokenizers.__version__},
 * Python unicodedata {ud.unidata_version}); do not edit. Included by unicode_bert.c only.
 *
 * Per-code-point data for BERT's text normalisation, covering U+0000..U+10FFFF, matched to
 * what Hugging Face's BertNormalizer / BertPreTokenizer do. Corrections applied to
 * unicodedata to match the library:
{notes}
 */
#ifndef STOF_UNICODE_TABLES_H
#define STOF_UNICODE_TABLES_H

#include <stdint.h>

/* Property flags (STOF_UNI_* in unicode_bert.h) by range: code points from start up to the
 * next entry's start share flags. */
static const uint32_t uni_flag_start[{len(fr)}] = {{
{fmt_rows([f"0x{s:x}" for s, _ in fr])}
}};
static const uint8_t uni_flag_value[{len(fr)}] = {{
{fmt_rows([str(v) for _, v in fr])}
}};

/* Canonical combining class by range, same layout. */
static const uint32_t uni_ccc_start[{len(cr)}] = {{
{fmt_rows([f"0x{s:x}" for s, _ in cr])}
}};
static const uint8_t uni_ccc_value[{len(cr)}] = {{
{fmt_rows([str(v) for _, v in cr])}
}};

/* One-level canonical decompositions {{cp, a, b}}, sorted by cp; b = 0 for a singleton.
 * Hangul syllables are computed, not listed. */
static const uint32_t uni_decomp[{len(dk)}][3] = {{
{fmt_rows([f"{{0x{cp:x},0x{decomp[cp][0]:x},0x{decomp[cp][1] if len(decomp[cp]) > 1 else 0:x}}}" for cp in dk])}
}};

/* Lower-case: cp in [first, last], (cp - first) % step == 0 maps to cp + delta. */
typedef struct uni_lower_run {{
    uint32_t first, last;
    int32_t step, delta;
}} uni_lower_run;
static const uni_lower_run uni_lower_runs[{len(lr)}] = {{
{fmt_rows([f"{{0x{s:x},0x{e:x},{st},{d}}}" for s, e, st, d in lr])}
}};
/* Lower-case mappings to two code points. */
static const uint32_t uni_lower_multi[{len(multi)}][3] = {{
{fmt_rows([f"{{0x{cp:x},0x{m[0]:x},0x{m[1]:x}}}" for cp, m in multi])}
}};

#endif /* STOF_UNICODE_TABLES_H */
"""
    with open(OUT, "w") as f:
        f.write(text)
    print(f"wrote {OUT}: {len(fr)} flag ranges, {len(cr)} ccc ranges, {len(dk)} decompositions, "
          f"{len(lr)} lower-case runs, {len(multi)} multi", file=sys.stderr)


def main():
    flags = hf_flags()
    decomp = hf_decompositions()
    ccc = hf_ccc()
    lower = hf_lower()

    names = {F_DROP: "clean-up drop (controls, format, private use)", F_SPACE: "clean-up whitespace",
             F_CJK: "CJK ideograph (the library starts a range at 0x2B920, not 0x2B820)", F_MN: "non-spacing mark", F_WS: "pre-tokenizer whitespace",
             F_PUNCT: "pre-tokenizer punctuation"}
    notes = []

    def points(n):
        return f"{n} code point" + ("" if n == 1 else "s")

    for bit, name in names.items():
        n = sum(1 for cp in CPS if (flags[cp] & bit) != (py_flags(cp) & bit))
        notes.append(f" *   {name}: {points(n)}")
    n = sum(1 for cp in CPS if ud.combining(chr(cp)) != ccc.get(cp, 0)
            and ud.normalize("NFD", chr(cp)) == chr(cp))
    notes.append(f" *   combining class: {points(n)} (marks newer than the library's table)")
    n = sum(1 for cp in CPS if (cp in decomp) != (ud.decomposition(chr(cp)) != ""
                                                 and not ud.decomposition(chr(cp)).startswith("<")))
    notes.append(f" *   canonical decomposition: {points(n)}")
    n = sum(1 for cp in CPS if [ord(x) for x in chr(cp).lower()] != lower.get(cp, [cp]))
    notes.append(f" *   lower-case: {points(n)} (newer than Python's tables)")

    model = Model(flags, decomp, ccc, lower)
    for cp in decomp:
        out = []
        model.decompose(cp, out)
        assert len(out) <= 4, hex(cp)  # STOF_UNI_MAX_DECOMP
    check(model, flags)
    emit(flags, decomp, ccc, lower, "\n".join(notes))


if __name__ == "__main__":
    main()
