/*
 * unigram.c — the Unigram model (T5 and other SentencePiece unigram vocabularies):
 * Viterbi over the pieces of the vocabulary, each scored by its log probability. At
 * every character boundary the best path so far is extended by every vocabulary piece
 * starting there (looked up by hash, up to the longest piece); a character no piece of
 * its own length covers gets [UNK] at the lowest score minus 10, as the library does.
 * Ties keep the first (shortest) candidate, consecutive [UNK]s are fused, and with
 * byte_fallback an unknown piece becomes its bytes' "<0xXX>" tokens.
 */
#include "tok/tok.h"

#include <stdlib.h>
#include <string.h>

static stof_status ensure(tok_work *w, size_t n)
{
    if (n <= w->best_cap) return STOF_OK;
    size_t c = w->best_cap ? w->best_cap : 256;
    while (c < n)
        c *= 2;
    double *b = realloc(w->best, c * sizeof *b);
    if (b) w->best = b;
    int32_t *id = realloc(w->best_id, c * sizeof *id);
    if (id) w->best_id = id;
    int32_t *st = realloc(w->best_start, c * sizeof *st);
    if (st) w->best_start = st;
    STOF_REQUIRE(b && id && st, STOF_ERR_OOM, "out of memory for a %zu-byte piece", n);
    w->best_cap = c;
    return STOF_OK;
}

static stof_status emit_piece(const tok_pipe *p, const char *s, size_t n, int32_t id, tok_ids *out)
{
    if (id == p->unk_id && p->byte_fallback) {
        bool all = true;
        for (size_t i = 0; i < n; i++)
            if (p->byte_ids[(unsigned char)s[i]] < 0) all = false;
        if (all) {
            for (size_t i = 0; i < n; i++)
                STOF_TRY(tok_ids_put(out, p->byte_ids[(unsigned char)s[i]]));
            return STOF_OK;
        }
    }
    return tok_ids_put(out, id);
}

stof_status tok_unigram_word(const tok_pipe *p, tok_work *w, const char *s, size_t n, tok_ids *out)
{
    if (n == 0) return STOF_OK;
    STOF_TRY(ensure(w, n + 1));
    double *best = w->best;
    int32_t *bid = w->best_id, *bstart = w->best_start;
    for (size_t i = 0; i <= n; i++)
        bstart[i] = -1;
    best[0] = 0;
    bstart[0] = 0;
    for (size_t at = 0; at < n;) {
        size_t clen = tok_utf8_len_in(s, at, n);
        if (bstart[at] < 0) { /* unreachable: cannot happen, every char is covered */
            at += clen;
            continue;
        }
        double base = best[at];
        bool single = false;
        size_t limit = n - at < (size_t)p->max_piece_bytes ? n - at : (size_t)p->max_piece_bytes;
        for (size_t len = clen; len <= limit;) {
            int32_t id = tok_vocab_find(&p->vocab, s + at, len);
            if (id >= 0) {
                size_t end = at + len;
                double cand = base + p->scores[id];
                if (bstart[end] < 0 || cand > best[end]) {
                    best[end] = cand;
                    bid[end] = id;
                    bstart[end] = (int32_t)at;
                }
                if (len == clen) single = true;
            }
            if (at + len >= n) break;
            len += tok_utf8_len_in(s, at + len, n);
        }
        if (!single) {
            size_t end = at + clen;
            STOF_REQUIRE(p->unk_id >= 0, STOF_ERR_FORMAT,
                         "the Unigram model has no unk_id and the text has a piece outside its "
                         "vocabulary");
            double cand = base + p->unk_score;
            if (bstart[end] < 0 || cand > best[end]) {
                best[end] = cand;
                bid[end] = p->unk_id;
                bstart[end] = (int32_t)at;
            }
        }
        at += clen;
    }
    /* Walk back, collecting pieces in reverse into word_ids as (start, end, id) triples. */
    tok_ids *path = &w->word_ids;
    path->n = 0;
    for (size_t end = n; end > 0;) {
        STOF_REQUIRE(bstart[end] >= 0, STOF_ERR_INTERNAL, "Unigram: no path to byte %zu", end);
        size_t start = (size_t)bstart[end];
        int32_t id = bid[end];
        if (id == p->unk_id && id >= 0 && path->n >= 3 && path->p[path->n - 1] == p->unk_id) {
            path->p[path->n - 3] = (int32_t)start; /* fuse with the [UNK] after it */
        } else {
            STOF_TRY(tok_ids_put(path, (int32_t)start));
            STOF_TRY(tok_ids_put(path, (int32_t)end));
            STOF_TRY(tok_ids_put(path, id));
        }
        end = start;
    }
    for (size_t k = path->n; k >= 3; k -= 3) {
        size_t a = (size_t)path->p[k - 3], b = (size_t)path->p[k - 2];
        STOF_TRY(emit_piece(p, s + a, b - a, path->p[k - 1], out));
    }
    return STOF_OK;
}
