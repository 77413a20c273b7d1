/*
 * bpe.c — the BPE model: a word's characters become symbols (with the continuing-
 * subword prefix and end-of-word suffix where the model has them, byte fallback or
 * [UNK] for characters outside the vocabulary), then the pair of adjacent symbols with
 * the lowest merge rank is merged until no pair has a merge. The symbols form a linked
 * list and the candidate merges a binary heap keyed by (rank, position), so a word of
 * n characters costs O(n log n), and a stale candidate (one of its symbols already
 * merged away) is recognised and dropped when it surfaces. A per-thread cache keeps
 * the ids of recent words, since natural text repeats its words.
 */
#include "tok/tok.h"

#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------ cache */

#define CACHE_SLOTS 8192  /* per thread; a power of two */
#define CACHE_MAX_WORD 48 /* longer words are not cached */
#define CACHE_MAX_IDS 16

typedef struct cache_slot {
    uint8_t len, n_ids; /* len 0: empty */
    char word[CACHE_MAX_WORD];
    int32_t ids[CACHE_MAX_IDS];
} cache_slot;

struct tok_cache {
    cache_slot slot[CACHE_SLOTS];
};

static size_t cache_hash(const char *s, size_t n)
{
    uint64_t h = stof_fnv1a(STOF_FNV_BASIS, s, n);
    return (size_t)(h ^ (h >> 32)) & (CACHE_SLOTS - 1);
}

static cache_slot *cache_get(tok_work *w, const char *s, size_t n)
{
    if (n > CACHE_MAX_WORD) return NULL;
    if (!w->cache) {
        w->cache = calloc(1, sizeof *w->cache);
        if (!w->cache) return NULL; /* the cache is an optimisation: run without it */
    }
    return &w->cache->slot[cache_hash(s, n)];
}

/* ------------------------------------------------------------------ heap */

static bool cand_less(tok_bpe_cand a, tok_bpe_cand b)
{
    return a.rank < b.rank || (a.rank == b.rank && a.pos < b.pos);
}

static void heap_push(tok_bpe_cand *h, size_t *n, tok_bpe_cand c)
{
    size_t i = (*n)++;
    while (i > 0) {
        size_t up = (i - 1) / 2;
        if (!cand_less(c, h[up])) break;
        h[i] = h[up];
        i = up;
    }
    h[i] = c;
}

static tok_bpe_cand heap_pop(tok_bpe_cand *h, size_t *n)
{
    tok_bpe_cand top = h[0], last = h[--(*n)];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= *n) break;
        if (c + 1 < *n && cand_less(h[c + 1], h[c])) c++;
        if (!cand_less(h[c], last)) break;
        h[i] = h[c];
        i = c;
    }
    if (*n) h[i] = last;
    return top;
}

/* ------------------------------------------------------------------ symbols */

static stof_status ensure(tok_work *w, size_t n)
{
    if (n <= w->syms_cap) return STOF_OK;
    size_t c = w->syms_cap ? w->syms_cap : 64;
    while (c < n)
        c *= 2;
    tok_bpe_sym *s = realloc(w->syms, c * sizeof *s);
    if (s) w->syms = s;
    tok_bpe_cand *h = realloc(w->heap, c * sizeof *h);
    if (h) w->heap = h;
    STOF_REQUIRE(s && h, STOF_ERR_OOM, "out of memory for a %zu-character word", n);
    w->syms_cap = w->heap_cap = c;
    return STOF_OK;
}

static void sym_add(tok_work *w, size_t *n, int32_t id, uint32_t len)
{
    int32_t i = (int32_t)*n;
    w->syms[i] = (tok_bpe_sym){id, i - 1, -1, len};
    if (i > 0) w->syms[i - 1].next = i;
    (*n)++;
}

/* The vocabulary id of one character (with prefix / suffix), or -1. */
static int32_t char_id(const tok_pipe *p, tok_work *w, const char *c, size_t clen, bool first,
                       bool last)
{
    if ((first || !p->cont_prefix_len) && (!last || !p->eow_suffix_len))
        return tok_vocab_find(&p->vocab, c, clen);
    char key[TOK_MAX_TOKEN_BYTES + 8];
    size_t k = 0;
    if (!first && p->cont_prefix_len) {
        memcpy(key, p->cont_prefix, p->cont_prefix_len);
        k = p->cont_prefix_len;
    }
    memcpy(key + k, c, clen);
    k += clen;
    if (last && p->eow_suffix_len) {
        memcpy(key + k, p->eow_suffix, p->eow_suffix_len);
        k += p->eow_suffix_len;
    }
    (void)w;
    return tok_vocab_find(&p->vocab, key, k);
}

/* Initial symbols of s into w->syms; returns their count. */
static stof_status initial_symbols(const tok_pipe *p, tok_work *w, const char *s, size_t n,
                                   size_t *count)
{
    STOF_TRY(ensure(w, n + 1));
    size_t k = 0, pos = 0;
    int32_t unk_len = -1; /* pending [UNK] symbol's byte length, -1: none */
    while (pos < n) {
        size_t clen = tok_utf8_len_in(s, pos, n);
        int32_t id = char_id(p, w, s + pos, clen, pos == 0, pos + clen == n);
        if (id >= 0) {
            if (unk_len >= 0) sym_add(w, &k, p->unk_id, (uint32_t)unk_len);
            unk_len = -1;
            sym_add(w, &k, id, (uint32_t)clen);
        } else {
            bool fell_back = false;
            if (p->byte_fallback) {
                fell_back = true;
                for (size_t b = 0; b < clen; b++)
                    if (p->byte_ids[(unsigned char)s[pos + b]] < 0) fell_back = false;
                if (fell_back) {
                    if (unk_len >= 0) sym_add(w, &k, p->unk_id, (uint32_t)unk_len);
                    unk_len = -1;
                    STOF_TRY(ensure(w, k + clen + (n - pos)));
                    for (size_t b = 0; b < clen; b++)
                        sym_add(w, &k, p->byte_ids[(unsigned char)s[pos + b]], 1);
                }
            }
            if (!fell_back && p->unk_id >= 0) {
                if (unk_len >= 0 && p->fuse_unk) {
                    unk_len += (int32_t)clen;
                } else {
                    if (unk_len >= 0) sym_add(w, &k, p->unk_id, (uint32_t)unk_len);
                    unk_len = (int32_t)clen;
                }
            }
        }
        pos += clen;
    }
    if (unk_len >= 0) sym_add(w, &k, p->unk_id, (uint32_t)unk_len);
    *count = k;
    return STOF_OK;
}

static void push_pair(const tok_pipe *p, tok_work *w, size_t *hn, int32_t pos)
{
    int32_t nx = w->syms[pos].next;
    if (nx < 0) return;
    const tok_merge *m = tok_merges_find(&p->merges, w->syms[pos].id, w->syms[nx].id);
    if (m) heap_push(w->heap, hn, (tok_bpe_cand){m->rank, pos, m->id});
}

static void merge_all(const tok_pipe *p, tok_work *w, size_t count)
{
    size_t hn = 0;
    for (size_t i = 0; i + 1 < count; i++)
        push_pair(p, w, &hn, (int32_t)i);
    while (hn) {
        tok_bpe_cand c = heap_pop(w->heap, &hn);
        tok_bpe_sym *a = &w->syms[c.pos];
        if (a->len == 0 || a->next < 0) continue;
        tok_bpe_sym *b = &w->syms[a->next];
        const tok_merge *m = tok_merges_find(&p->merges, a->id, b->id);
        if (!m || m->id != c.id || m->rank != c.rank) continue; /* stale */
        a->id = c.id;
        a->len += b->len;
        b->len = 0;
        a->next = b->next;
        if (b->next >= 0) w->syms[b->next].prev = c.pos;
        if (a->prev >= 0) push_pair(p, w, &hn, a->prev);
        push_pair(p, w, &hn, c.pos);
    }
}

stof_status tok_bpe_word(const tok_pipe *p, tok_work *w, const char *s, size_t n, tok_ids *out)
{
    if (n == 0) return STOF_OK;
    if (p->ignore_merges) {
        int32_t id = tok_vocab_find(&p->vocab, s, n);
        if (id >= 0) return tok_ids_put(out, id);
    }
    cache_slot *slot = cache_get(w, s, n);
    if (slot && slot->len == n && memcmp(slot->word, s, n) == 0) {
        for (int i = 0; i < slot->n_ids; i++)
            STOF_TRY(tok_ids_put(out, slot->ids[i]));
        return STOF_OK;
    }
    size_t count, first = out->n;
    STOF_TRY(initial_symbols(p, w, s, n, &count));
    if (count > 1) merge_all(p, w, count);
    for (int32_t i = count ? 0 : -1; i >= 0; i = w->syms[i].next)
        STOF_TRY(tok_ids_put(out, w->syms[i].id));
    size_t made = out->n - first;
    if (slot && made <= CACHE_MAX_IDS) {
        slot->len = (uint8_t)n;
        slot->n_ids = (uint8_t)made;
        memcpy(slot->word, s, n);
        memcpy(slot->ids, out->p + first, made * sizeof *out->p);
    }
    return STOF_OK;
}
