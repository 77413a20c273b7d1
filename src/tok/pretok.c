/*
 * pretok.c — pre-tokenizers (ByteLevel, Split, Metaspace, Whitespace, WhitespaceSplit,
 * Digits, Punctuation, BertPreTokenizer) and the regex wrapper they share.
 *
 * Each pre-tokenizer turns the current pieces (w->words, w->pieces) into new ones
 * (w->tmp, w->next), which are then swapped in. A pattern's matches and the text
 * between them become a list of splits, and the split behaviour of tokenizer.json
 * (removed, isolated, merged with previous / next, contiguous) decides what is kept
 * and what is joined, rule for rule as the library's split_with does. Regexes are
 * PCRE2 with UTF and Unicode properties, JIT-compiled, with match limits so that a
 * hostile pattern fails with an error instead of running for ever.
 */
#include "tok/tok.h"
#include "tok/unicode_bert.h"

#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

/* ------------------------------------------------------------------ regex */

stof_status tok_regex_compile(const char *pattern, size_t len, bool literal, const char *file,
                              tok_pattern *out)
{
    int err;
    PCRE2_SIZE at;
    uint32_t opts = PCRE2_UTF | (literal ? PCRE2_LITERAL : PCRE2_UCP); /* LITERAL forbids UCP */
    out->re = pcre2_compile((PCRE2_SPTR)pattern, len, opts, &err, &at, NULL);
    if (!out->re) {
        PCRE2_UCHAR msg[160];
        pcre2_get_error_message(err, msg, sizeof msg);
        return stof_error(STOF_ERR_FORMAT,
                          "%s: regex \"%.100s\" does not compile at offset %zu: %s", file, pattern,
                          (size_t)at, (const char *)msg);
    }
    /* Without JIT (unsupported CPU, no executable memory) the interpreter runs it. */
    (void)pcre2_jit_compile(out->re, PCRE2_JIT_COMPLETE);
    return STOF_OK;
}

static stof_status regex_ready(tok_work *w)
{
    if (w->md) return STOF_OK;
    w->md = pcre2_match_data_create(1, NULL);
    w->mctx = pcre2_match_context_create(NULL);
    w->jit = pcre2_jit_stack_create(32 * 1024, 8 * 1024 * 1024, NULL);
    STOF_REQUIRE(w->md && w->mctx && w->jit, STOF_ERR_OOM, "out of memory for regex matching");
    pcre2_jit_stack_assign(w->mctx, NULL, w->jit);
    pcre2_set_match_limit(w->mctx, TOK_REGEX_MATCH_LIMIT);
    pcre2_set_depth_limit(w->mctx, 100000);
    return STOF_OK;
}

stof_status tok_regex_find_all(tok_work *w, const tok_pattern *pat, const char *s, size_t n,
                               tok_spans *out)
{
    STOF_TRY(regex_ready(w));
    out->n = 0;
    size_t off = 0;
    while (off <= n) {
        int rc = pcre2_match(pat->re, (PCRE2_SPTR)s, n, off, PCRE2_NO_UTF_CHECK, w->md, w->mctx);
        if (rc == PCRE2_ERROR_NOMATCH) break;
        if (rc < 0) {
            PCRE2_UCHAR msg[160];
            pcre2_get_error_message(rc, msg, sizeof msg);
            return stof_error(STOF_ERR_FORMAT, "tokenizer regex failed on a %zu-byte piece: %s", n,
                              (const char *)msg);
        }
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(w->md);
        size_t a = ov[0], b = ov[1];
        if (b > a) {
            STOF_TRY(tok_spans_put(out, a, b));
            off = b;
        } else { /* an empty match: step over one character */
            if (a >= n) break;
            off = a + tok_utf8_len_in(s, a, n);
        }
    }
    return STOF_OK;
}

/* ------------------------------------------------------------------ splits */

static stof_status split_put(tok_work *w, size_t a, size_t b, bool match)
{
    if (w->splits_n == w->splits_cap) {
        size_t c = w->splits_cap ? 2 * w->splits_cap : 64;
        tok_split *p = realloc(w->splits, c * sizeof *p);
        STOF_REQUIRE(p, STOF_ERR_OOM, "out of memory for pre-token splits");
        w->splits = p;
        w->splits_cap = c;
    }
    w->splits[w->splits_n++] = (tok_split){a, b, match};
    return STOF_OK;
}

/* Splits from a list of matches over [0, n): the text between matches is unmatched. */
static stof_status splits_from_matches(tok_work *w, const tok_spans *m, size_t n)
{
    w->splits_n = 0;
    size_t prev = 0;
    for (size_t i = 0; i < m->n; i++) {
        if (m->p[i].start > prev) STOF_TRY(split_put(w, prev, m->p[i].start, false));
        STOF_TRY(split_put(w, m->p[i].start, m->p[i].end, true));
        prev = m->p[i].end;
    }
    if (prev < n) STOF_TRY(split_put(w, prev, n, false));
    return STOF_OK;
}

/* Every character for which pred holds is a match of its own. */
static stof_status splits_from_chars(tok_work *w, const char *s, size_t n, bool (*pred)(uint32_t))
{
    w->splits_n = 0;
    size_t pos = 0, prev = 0;
    while (pos < n) {
        size_t at = pos;
        uint32_t cp = tok_utf8_get(s, &pos);
        if (!pred(cp)) continue;
        if (at > prev) STOF_TRY(split_put(w, prev, at, false));
        STOF_TRY(split_put(w, at, pos, true));
        prev = pos;
    }
    if (prev < n) STOF_TRY(split_put(w, prev, n, false));
    return STOF_OK;
}

/* Applies behaviour to w->splits in place (the library's split_with rules). */
static void apply_behavior(tok_work *w, tok_split_behavior how, bool invert)
{
    tok_split *sp = w->splits;
    size_t n = w->splits_n, k = 0;
    if (invert)
        for (size_t i = 0; i < n; i++)
            sp[i].match = !sp[i].match;
    bool prev_match = false;
    switch (how) {
    case TOK_SPLIT_ISOLATED: return;
    case TOK_SPLIT_REMOVED:
        for (size_t i = 0; i < n; i++)
            if (!sp[i].match) sp[k++] = sp[i];
        break;
    case TOK_SPLIT_MERGED_PREV:
        for (size_t i = 0; i < n; i++) {
            bool m = sp[i].match;
            if (m && !prev_match && k > 0) {
                sp[k - 1].end = sp[i].end;
            } else {
                sp[k++] = sp[i];
            }
            prev_match = m;
        }
        break;
    case TOK_SPLIT_MERGED_NEXT: /* the mirror image: walk backwards */
        k = n;
        for (size_t i = n; i-- > 0;) {
            bool m = sp[i].match;
            if (m && !prev_match && k < n) {
                sp[k].start = sp[i].start;
            } else {
                sp[--k] = sp[i];
            }
            prev_match = m;
        }
        memmove(sp, sp + k, (n - k) * sizeof *sp);
        k = n - k;
        break;
    case TOK_SPLIT_CONTIGUOUS:
        for (size_t i = 0; i < n; i++) {
            bool m = sp[i].match;
            if (m == prev_match && k > 0)
                sp[k - 1].end = sp[i].end;
            else
                sp[k++] = sp[i];
            prev_match = m;
        }
        break;
    }
    w->splits_n = k;
}

static stof_status emit(tok_work *w, const char *s, size_t n)
{
    if (n == 0) return STOF_OK;
    size_t at = w->tmp.n;
    STOF_TRY(tok_buf_put(&w->tmp, s, n));
    return tok_spans_put(&w->next, at, w->tmp.n);
}

static stof_status emit_splits(tok_work *w, const char *s)
{
    for (size_t i = 0; i < w->splits_n; i++)
        STOF_TRY(emit(w, s + w->splits[i].start, w->splits[i].end - w->splits[i].start));
    return STOF_OK;
}

/* ------------------------------------------------------------------ character classes */

static bool is_ws(uint32_t cp)
{
    return tok_is_whitespace(cp);
}

static bool is_numeric(uint32_t cp)
{
    utf8proc_category_t c = utf8proc_category((utf8proc_int32_t)cp);
    return c == UTF8PROC_CATEGORY_ND || c == UTF8PROC_CATEGORY_NL || c == UTF8PROC_CATEGORY_NO;
}

static bool is_punct(uint32_t cp)
{
    return (stof_uni_flags(cp) & STOF_UNI_PUNCT) != 0;
}

/* ------------------------------------------------------------------ byte level */

/* GPT-2's byte -> character map, as UTF-8: printable Latin-1 maps to itself, the other
 * 68 bytes to U+0100 onwards, in byte order. */
static char byte_chars[256][3];
static unsigned char byte_char_len[256];

static void byte_map_build(void)
{
    uint32_t next = 256;
    for (int b = 0; b < 256; b++) {
        bool keep = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
        uint32_t cp = keep ? (uint32_t)b : next++;
        byte_char_len[b] = (unsigned char)tok_utf8_put(byte_chars[b], cp);
    }
}

static void byte_map_init(void)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, byte_map_build);
}

int tok_byte_of_char(uint32_t cp)
{
    if (cp >= 324) return -1;
    byte_map_init();
    if ((cp >= 33 && cp <= 126) || (cp >= 161 && cp <= 172) || (cp >= 174 && cp <= 255))
        return (int)cp;
    if (cp < 256) return -1;
    size_t pos = 0;
    for (int b = 0; b < 256; b++) {
        pos = 0;
        if (tok_utf8_get(byte_chars[b], &pos) == cp) return b;
    }
    return -1;
}

static stof_status emit_byte_level(tok_work *w, const char *s, size_t n)
{
    if (n == 0) return STOF_OK;
    byte_map_init();
    size_t at = w->tmp.n;
    for (size_t i = 0; i < n; i++) {
        unsigned char b = (unsigned char)s[i];
        STOF_TRY(tok_buf_put(&w->tmp, byte_chars[b], byte_char_len[b]));
    }
    return tok_spans_put(&w->next, at, w->tmp.n);
}

static stof_status byte_level(const tok_pre *pre, tok_work *w, const char *s, size_t n)
{
    char *pref = NULL;
    if (pre->add_prefix_space && (n == 0 || s[0] != ' ')) {
        pref = malloc(n + 1);
        STOF_REQUIRE(pref, STOF_ERR_OOM, "out of memory in the ByteLevel pre-tokenizer");
        pref[0] = ' ';
        memcpy(pref + 1, s, n);
        s = pref;
        n++;
    }
    stof_status st = STOF_OK;
    if (!pre->use_regex) {
        st = emit_byte_level(w, s, n);
    } else {
        st = tok_regex_find_all(w, &pre->pat, s, n, &w->matches);
        if (st == STOF_OK) st = splits_from_matches(w, &w->matches, n);
        for (size_t i = 0; st == STOF_OK && i < w->splits_n; i++)
            st = emit_byte_level(w, s + w->splits[i].start, w->splits[i].end - w->splits[i].start);
    }
    free(pref);
    return st;
}

/* ------------------------------------------------------------------ metaspace */

static stof_status metaspace(const tok_pre *pre, tok_work *w, const char *s, size_t n, bool first)
{
    /* Replace spaces, prepend when asked. */
    tok_buf *b = &w->meta;
    b->n = 0;
    const char *rep = pre->replacement;
    size_t rl = pre->replacement_len;
    bool starts = n >= rl && memcmp(s, rep, rl) == 0;
    bool prepend =
        pre->prepend == TOK_PREPEND_ALWAYS || (pre->prepend == TOK_PREPEND_FIRST && first);
    if (prepend && !(starts || (n > 0 && s[0] == ' '))) STOF_TRY(tok_buf_put(b, rep, rl));
    size_t run = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] != ' ') continue;
        STOF_TRY(tok_buf_put(b, s + run, i - run));
        STOF_TRY(tok_buf_put(b, rep, rl));
        run = i + 1;
    }
    STOF_TRY(tok_buf_put(b, s + run, n - run));
    if (!pre->split) return emit(w, b->p, b->n);
    /* Split on the replacement, merged with what follows it. */
    w->splits_n = 0;
    size_t prev = 0;
    for (size_t i = 0; i + rl <= b->n;) {
        if (memcmp(b->p + i, rep, rl) == 0) {
            if (i > prev) STOF_TRY(split_put(w, prev, i, false));
            STOF_TRY(split_put(w, i, i + rl, true));
            i += rl;
            prev = i;
        } else {
            i++;
        }
    }
    if (prev < b->n) STOF_TRY(split_put(w, prev, b->n, false));
    apply_behavior(w, TOK_SPLIT_MERGED_NEXT, false);
    return emit_splits(w, b->p);
}

/* ------------------------------------------------------------------ driver */

static stof_status pre_one(const tok_pre *pre, tok_work *w, const char *s, size_t n, bool first)
{
    switch (pre->kind) {
    case TOK_PRE_BYTE_LEVEL: return byte_level(pre, w, s, n);
    case TOK_PRE_METASPACE: return metaspace(pre, w, s, n, first);
    case TOK_PRE_SPLIT:
    case TOK_PRE_WHITESPACE:
        STOF_TRY(tok_regex_find_all(w, &pre->pat, s, n, &w->matches));
        STOF_TRY(splits_from_matches(w, &w->matches, n));
        if (pre->kind == TOK_PRE_SPLIT)
            apply_behavior(w, pre->behavior, pre->invert);
        else
            apply_behavior(w, TOK_SPLIT_REMOVED, true);
        return emit_splits(w, s);
    case TOK_PRE_WHITESPACE_SPLIT:
        STOF_TRY(splits_from_chars(w, s, n, is_ws));
        apply_behavior(w, TOK_SPLIT_REMOVED, false);
        return emit_splits(w, s);
    case TOK_PRE_DIGITS:
        STOF_TRY(splits_from_chars(w, s, n, is_numeric));
        apply_behavior(w, pre->behavior, false);
        return emit_splits(w, s);
    case TOK_PRE_PUNCTUATION:
        STOF_TRY(splits_from_chars(w, s, n, is_punct));
        apply_behavior(w, pre->behavior, false);
        return emit_splits(w, s);
    case TOK_PRE_BERT: {
        STOF_TRY(splits_from_chars(w, s, n, is_ws));
        apply_behavior(w, TOK_SPLIT_REMOVED, false);
        size_t count = w->splits_n;
        tok_split *words = malloc((count ? count : 1) * sizeof *words);
        STOF_REQUIRE(words, STOF_ERR_OOM, "out of memory in BertPreTokenizer");
        memcpy(words, w->splits, count * sizeof *words);
        stof_status st = STOF_OK;
        for (size_t i = 0; st == STOF_OK && i < count; i++) {
            const char *ws = s + words[i].start;
            st = splits_from_chars(w, ws, words[i].end - words[i].start, is_punct);
            if (st == STOF_OK) st = emit_splits(w, ws);
        }
        free(words);
        return st;
    }
    }
    return stof_error(STOF_ERR_INTERNAL, "unknown pre-tokenizer %d", (int)pre->kind);
}

stof_status tok_pretokenize(const tok_pipe *p, tok_work *w, const char *s, size_t n, bool first)
{
    w->words.n = 0;
    w->pieces.n = 0;
    STOF_TRY(tok_buf_put(&w->words, s, n));
    if (n) STOF_TRY(tok_spans_put(&w->pieces, 0, n));
    for (int k = 0; k < p->n_pres; k++) {
        w->tmp.n = 0;
        w->next.n = 0;
        for (size_t i = 0; i < w->pieces.n; i++) {
            tok_span sp = w->pieces.p[i];
            bool is_first = first && i == 0 && sp.start == 0;
            STOF_TRY(pre_one(&p->pres[k], w, w->words.p + sp.start, sp.end - sp.start, is_first));
        }
        tok_buf tb = w->words;
        w->words = w->tmp;
        w->tmp = tb;
        tok_spans ts = w->pieces;
        w->pieces = w->next;
        w->next = ts;
    }
    return STOF_OK;
}
