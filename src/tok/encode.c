/*
 * encode.c — text to ids through the tokenizer.json pipeline: added tokens are split
 * out of the raw text first (those marked normalized are looked for again after
 * normalization), each remaining stretch is normalized, pre-tokenized and run through
 * the model, and the result is truncated and framed by the post-processor's template.
 *
 * Added tokens match leftmost-longest, as the library's Aho-Corasick automaton does:
 * at each character the longest token starting there wins; single_word rejects a match
 * that touches a word character; lstrip / rstrip widen the match over the whitespace
 * beside it, which then belongs to the token.
 */
#include "tok/tok.h"

#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

stof_status tok_work_new(const tok_pipe *p, tok_work **out)
{
    (void)p;
    *out = calloc(1, sizeof **out);
    STOF_REQUIRE(*out, STOF_ERR_OOM, "out of memory for tokenizer work space");
    return STOF_OK;
}

void tok_work_free(tok_work *w)
{
    if (!w) return;
    tok_buf *bufs[] = {&w->text, &w->norm, &w->tmp, &w->words, &w->meta};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        free(bufs[i]->p);
    tok_spans *spans[] = {&w->segs, &w->pieces, &w->next, &w->matches};
    for (size_t i = 0; i < sizeof spans / sizeof spans[0]; i++)
        free(spans[i]->p);
    free(w->word_ids.p);
    free(w->content.p);
    free(w->splits);
    pcre2_match_data_free(w->md);
    pcre2_match_context_free(w->mctx);
    pcre2_jit_stack_free(w->jit);
    free(w->syms);
    free(w->heap);
    free(w->best);
    free(w->best_id);
    free(w->best_start);
    free(w->cache);
    free(w);
}

/* ------------------------------------------------------------------ added tokens */

static bool is_word_char(uint32_t cp)
{
    if (cp == '_') return true;
    utf8proc_category_t c = utf8proc_category((utf8proc_int32_t)cp);
    return (c >= UTF8PROC_CATEGORY_LU && c <= UTF8PROC_CATEGORY_LO) ||
           (c >= UTF8PROC_CATEGORY_ND && c <= UTF8PROC_CATEGORY_NO);
}

/* The code point ending before byte i of s. */
static uint32_t cp_before(const char *s, size_t i)
{
    size_t k = i - 1;
    while (k > 0 && ((unsigned char)s[k] & 0xC0) == 0x80)
        k--;
    return tok_utf8_get(s, &k);
}

static bool ws_before(const char *s, size_t i, size_t *start)
{
    size_t k = i - 1;
    while (k > 0 && ((unsigned char)s[k] & 0xC0) == 0x80)
        k--;
    size_t p = k;
    if (!tok_is_whitespace(tok_utf8_get(s, &p))) return false;
    *start = k;
    return true;
}

typedef struct added_match {
    size_t start, end; /* widened by lstrip / rstrip */
    int32_t id;
} added_match;

/* The first match at or after from among tokens whose normalized flag is norm. */
static bool next_added(const tok_pipe *p, const char *s, size_t n, size_t from, bool norm,
                       added_match *m)
{
    for (size_t i = from; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if ((c & 0xC0) == 0x80) continue;
        int32_t lo = p->added_first[c], hi = p->added_first[c + 1];
        for (int32_t k = lo; k < hi; k++) {
            const tok_added *a = &p->added[p->added_order[k]];
            if (a->normalized != norm || a->match_len > n - i ||
                memcmp(s + i, a->match, a->match_len) != 0)
                continue;
            size_t end = i + a->match_len;
            if (a->single_word) { /* the longest match is the only one tried, as in the library */
                size_t q = end;
                if ((i > 0 && is_word_char(cp_before(s, i))) ||
                    (end < n && is_word_char(tok_utf8_get(s, &q))))
                    break;
            }
            m->start = i;
            m->end = end;
            m->id = a->id;
            if (a->lstrip)
                while (m->start > from && ws_before(s, m->start, &m->start)) {
                }
            if (a->rstrip)
                while (m->end < n) {
                    size_t q = m->end;
                    if (!tok_is_whitespace(tok_utf8_get(s, &q))) break;
                    m->end = q;
                }
            return true;
        }
    }
    return false;
}

/* ------------------------------------------------------------------ pipeline */

static stof_status run_model(const tok_pipe *p, tok_work *w, const char *s, size_t n, bool first)
{
    STOF_TRY(tok_pretokenize(p, w, s, n, first));
    for (size_t i = 0; i < w->pieces.n; i++) {
        const char *word = w->words.p + w->pieces.p[i].start;
        size_t len = w->pieces.p[i].end - w->pieces.p[i].start;
        if (p->model == TOK_MODEL_BPE)
            STOF_TRY(tok_bpe_word(p, w, word, len, &w->content));
        else
            STOF_TRY(tok_unigram_word(p, w, word, len, &w->content));
    }
    return STOF_OK;
}

/* A stretch of raw text between added tokens: normalize, split out the normalized
 * added tokens, and run the model on the rest. */
static stof_status run_stretch(const tok_pipe *p, tok_work *w, const char *s, size_t n, bool first)
{
    if (n == 0) return STOF_OK;
    STOF_TRY(tok_normalize(p, w, s, n, &w->norm));
    const char *t = w->norm.p;
    size_t tn = w->norm.n, at = 0;
    added_match m;
    while (p->added_any_normalized && next_added(p, t, tn, at, true, &m)) {
        STOF_TRY(run_model(p, w, t + at, m.start - at, first && at == 0));
        STOF_TRY(tok_ids_put(&w->content, m.id));
        at = m.end;
    }
    return run_model(p, w, t + at, tn - at, first && at == 0);
}

stof_status tok_pipe_encode(const tok_pipe *p, tok_work *w, const char *text, size_t len,
                            bool add_special, int max_len, bool truncate_left, tok_ids *out)
{
    w->text.n = 0;
    w->content.n = 0;
    STOF_TRY(tok_utf8_sanitize(text, len, false, &w->text, NULL));
    const char *s = w->text.p ? w->text.p : "";
    size_t n = w->text.n, at = 0;
    added_match m;
    while (p->n_added && next_added(p, s, n, at, false, &m)) {
        STOF_TRY(run_stretch(p, w, s + at, m.start - at, at == 0));
        STOF_TRY(tok_ids_put(&w->content, m.id));
        at = m.end;
    }
    STOF_TRY(run_stretch(p, w, s + at, n - at, at == 0));

    size_t keep = w->content.n, skip = 0;
    bool frame = add_special && p->n_tpl > 0;
    if (max_len > 0) {
        size_t room = (size_t)max_len > (size_t)(frame ? p->n_special_added : 0)
                          ? (size_t)max_len - (size_t)(frame ? p->n_special_added : 0)
                          : 0;
        if (keep > room) {
            if (truncate_left) skip = keep - room;
            keep = room;
        }
    }
    if (!frame) {
        for (size_t i = 0; i < keep; i++)
            STOF_TRY(tok_ids_put(out, w->content.p[skip + i]));
        return STOF_OK;
    }
    for (int k = 0; k < p->n_tpl; k++) {
        const tok_tpl_item *it = &p->tpl[k];
        if (it->is_sequence)
            for (size_t i = 0; i < keep; i++)
                STOF_TRY(tok_ids_put(out, w->content.p[skip + i]));
        else
            for (int i = 0; i < it->n_ids; i++)
                STOF_TRY(tok_ids_put(out, it->ids[i]));
    }
    return STOF_OK;
}
