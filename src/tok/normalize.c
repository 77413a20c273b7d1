/*
 * normalize.c — normalizers: Unicode normalization forms (utf8proc), Lowercase (the
 * library's per-character full lower-casing, which is what unicode_bert's table holds),
 * StripAccents, Replace, Prepend, Strip and Precompiled (SentencePiece's character map),
 * applied in order.
 */
#include "tok/tok.h"
#include "tok/unicode_bert.h"

#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

static bool all_ascii(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)s[i] >= 0x80) return false;
    return true;
}

static stof_status unicode_form(tok_norm_kind kind, const char *s, size_t n, tok_buf *out)
{
    if (all_ascii(s, n)) return tok_buf_put(out, s, n); /* every form is the identity */
    int opts = UTF8PROC_STABLE;
    if (kind == TOK_NORM_NFC || kind == TOK_NORM_NFKC)
        opts |= UTF8PROC_COMPOSE;
    else
        opts |= UTF8PROC_DECOMPOSE;
    if (kind == TOK_NORM_NFKC || kind == TOK_NORM_NFKD) opts |= UTF8PROC_COMPAT;
    utf8proc_uint8_t *dst = NULL;
    utf8proc_ssize_t r = utf8proc_map((const utf8proc_uint8_t *)s, (utf8proc_ssize_t)n, &dst,
                                      (utf8proc_option_t)opts);
    STOF_REQUIRE(r >= 0, STOF_ERR_INTERNAL, "utf8proc: %s", utf8proc_errmsg(r));
    stof_status st = tok_buf_put(out, dst, (size_t)r);
    free(dst);
    return st;
}

static stof_status lowercase(const char *s, size_t n, tok_buf *out)
{
    size_t pos = 0;
    while (pos < n) {
        if ((unsigned char)s[pos] < 0x80) {
            char c = s[pos++];
            if (c >= 'A' && c <= 'Z') c = (char)(c + 32);
            STOF_TRY(tok_buf_put(out, &c, 1));
            continue;
        }
        uint32_t lower[2];
        int k = stof_uni_lower(tok_utf8_get(s, &pos), lower);
        for (int i = 0; i < k; i++) {
            char u[4];
            STOF_TRY(tok_buf_put(out, u, tok_utf8_put(u, lower[i])));
        }
    }
    return STOF_OK;
}

static stof_status strip_accents(const char *s, size_t n, tok_buf *out)
{
    size_t pos = 0;
    while (pos < n) {
        size_t at = pos;
        utf8proc_category_t c = utf8proc_category((utf8proc_int32_t)tok_utf8_get(s, &pos));
        if (c == UTF8PROC_CATEGORY_MN || c == UTF8PROC_CATEGORY_MC || c == UTF8PROC_CATEGORY_ME)
            continue;
        STOF_TRY(tok_buf_put(out, s + at, pos - at));
    }
    return STOF_OK;
}

static stof_status replace(const tok_norm *nm, tok_work *w, const char *s, size_t n, tok_buf *out)
{
    STOF_TRY(tok_regex_find_all(w, &nm->pat, s, n, &w->matches));
    size_t prev = 0;
    for (size_t i = 0; i < w->matches.n; i++) {
        STOF_TRY(tok_buf_put(out, s + prev, w->matches.p[i].start - prev));
        STOF_TRY(tok_buf_put(out, nm->text, nm->text_len));
        prev = w->matches.p[i].end;
    }
    return tok_buf_put(out, s + prev, n - prev);
}

static bool is_space_at(const char *s, size_t pos, size_t *len)
{
    size_t p = pos;
    bool ws = tok_is_whitespace(tok_utf8_get(s, &p));
    *len = p - pos;
    return ws;
}

static stof_status strip(const tok_norm *nm, const char *s, size_t n, tok_buf *out)
{
    size_t a = 0, b = n, len;
    if (nm->left)
        while (a < b && is_space_at(s, a, &len))
            a += len;
    if (nm->right)
        while (b > a) {
            size_t c = b - 1;
            while (c > a && ((unsigned char)s[c] & 0xC0) == 0x80)
                c--;
            if (!is_space_at(s, c, &len)) break;
            b = c;
        }
    return tok_buf_put(out, s + a, b - a);
}

/* The shortest key of the double-array trie that prefixes s[0..n), as SentencePiece's
 * common-prefix search returns it first: its replacement, or NULL. Every index is checked,
 * since the trie comes from the file. */
static const char *charsmap_find(const tok_norm *nm, const char *s, size_t n, size_t *out_len)
{
    const uint32_t *a = nm->trie;
    size_t pos = 0;
    if (!a || nm->trie_n == 0) return NULL;
    uint32_t unit = a[0];
    pos ^= (size_t)((unit >> 10) << ((unit & (1u << 9)) >> 6));
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == 0) break;
        pos ^= c;
        if (pos >= nm->trie_n) return NULL;
        unit = a[pos];
        if ((unit & ((1u << 31) | 0xFF)) != c) return NULL;
        pos ^= (size_t)((unit >> 10) << ((unit & (1u << 9)) >> 6));
        if (pos >= nm->trie_n) return NULL;
        if ((unit >> 8) & 1) {
            size_t at = a[pos] & ((1u << 31) - 1);
            if (at >= nm->text_len) return NULL;
            *out_len = strnlen(nm->text + at, nm->text_len - at);
            return nm->text + at;
        }
    }
    return NULL;
}

/* Grapheme by grapheme: a cluster under 6 bytes that the map knows is replaced whole;
 * otherwise each character is replaced or kept (the library's Precompiled). */
static stof_status precompiled(const tok_norm *nm, const char *s, size_t n, tok_buf *out)
{
    size_t pos = 0;
    while (pos < n) {
        size_t start = pos, len;
        utf8proc_int32_t state = 0;
        uint32_t prev = tok_utf8_get(s, &pos);
        while (pos < n) {
            size_t q = pos;
            uint32_t cp = tok_utf8_get(s, &q);
            if (utf8proc_grapheme_break_stateful((utf8proc_int32_t)prev, (utf8proc_int32_t)cp,
                                                 &state))
                break;
            prev = cp;
            pos = q;
        }
        const char *rep;
        if (pos - start < 6 && (rep = charsmap_find(nm, s + start, pos - start, &len))) {
            STOF_TRY(tok_buf_put(out, rep, len));
            continue;
        }
        for (size_t c = start; c < pos;) {
            size_t k = (size_t)tok_utf8_len((unsigned char)s[c]);
            rep = charsmap_find(nm, s + c, k, &len);
            STOF_TRY(rep ? tok_buf_put(out, rep, len) : tok_buf_put(out, s + c, k));
            c += k;
        }
    }
    return STOF_OK;
}

static stof_status norm_one(const tok_norm *nm, tok_work *w, const char *s, size_t n, tok_buf *out)
{
    switch (nm->kind) {
    case TOK_NORM_NFC:
    case TOK_NORM_NFD:
    case TOK_NORM_NFKC:
    case TOK_NORM_NFKD: return unicode_form(nm->kind, s, n, out);
    case TOK_NORM_LOWERCASE: return lowercase(s, n, out);
    case TOK_NORM_STRIP_ACCENTS: return strip_accents(s, n, out);
    case TOK_NORM_REPLACE: return replace(nm, w, s, n, out);
    case TOK_NORM_PREPEND:
        if (n) STOF_TRY(tok_buf_put(out, nm->text, nm->text_len));
        return tok_buf_put(out, s, n);
    case TOK_NORM_STRIP: return strip(nm, s, n, out);
    case TOK_NORM_PRECOMPILED: return precompiled(nm, s, n, out);
    }
    return stof_error(STOF_ERR_INTERNAL, "unknown normalizer %d", (int)nm->kind);
}

stof_status tok_normalize(const tok_pipe *p, tok_work *w, const char *s, size_t n, tok_buf *out)
{
    out->n = 0;
    STOF_TRY(tok_buf_put(out, s, n));
    for (int k = 0; k < p->n_norms; k++) {
        w->meta.n = 0;
        STOF_TRY(norm_one(&p->norms[k], w, out->p, out->n, &w->meta));
        tok_buf t = *out;
        *out = w->meta;
        w->meta = t;
    }
    return STOF_OK;
}
