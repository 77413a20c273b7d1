/*
 * util.c — the tokenizer part's containers (growable buffers, the string -> id table,
 * the merge table) and its UTF-8 helpers.
 */
#include "tok/tok.h"

#include <stdlib.h>
#include <string.h>

static stof_status grow(void **p, size_t *cap, size_t need, size_t elem)
{
    if (need <= *cap) return STOF_OK;
    size_t c = *cap ? *cap : 64;
    while (c < need)
        c *= 2;
    void *q = realloc(*p, c * elem);
    STOF_REQUIRE(q, STOF_ERR_OOM, "out of memory (%zu bytes) in the tokenizer", c * elem);
    *p = q;
    *cap = c;
    return STOF_OK;
}

stof_status tok_buf_put(tok_buf *b, const void *s, size_t n)
{
    STOF_TRY(grow((void **)&b->p, &b->cap, b->n + n + 1, 1));
    if (n) memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = '\0';
    return STOF_OK;
}

stof_status tok_ids_put(tok_ids *v, int32_t id)
{
    if (v->n == v->cap) STOF_TRY(grow((void **)&v->p, &v->cap, v->n + 1, sizeof *v->p));
    v->p[v->n++] = id;
    return STOF_OK;
}

stof_status tok_spans_put(tok_spans *v, size_t start, size_t end)
{
    if (v->n == v->cap) STOF_TRY(grow((void **)&v->p, &v->cap, v->n + 1, sizeof *v->p));
    v->p[v->n++] = (tok_span){start, end};
    return STOF_OK;
}

/* ------------------------------------------------------------------ string -> id */

static uint64_t hash_bytes(const char *s, size_t n)
{
    uint64_t h = stof_fnv1a(STOF_FNV_BASIS, s, n);
    return h ^ (h >> 29);
}

static size_t table_size(size_t n)
{
    size_t s = 16;
    while (s < 2 * n)
        s *= 2;
    return s;
}

stof_status tok_vocab_build(tok_vocab *v, int32_t n, const char *const *strs, const size_t *lens,
                            const int32_t *ids, const char *file)
{
    memset(v, 0, sizeof *v);
    int32_t max_id = -1;
    size_t bytes = 0;
    for (int32_t i = 0; i < n; i++) {
        int32_t id = ids ? ids[i] : i;
        STOF_REQUIRE(id >= 0 && id < TOK_MAX_ENTRIES, STOF_ERR_FORMAT,
                     "%s: token id %d is out of range [0, %d)", file, id, TOK_MAX_ENTRIES);
        STOF_REQUIRE(lens[i] <= TOK_MAX_TOKEN_BYTES, STOF_ERR_FORMAT,
                     "%s: a token of %zu bytes (at most %d)", file, lens[i], TOK_MAX_TOKEN_BYTES);
        if (id > max_id) max_id = id;
        bytes += lens[i] + 1;
    }
    v->n = max_id + 1;
    size_t slots = table_size((size_t)n);
    v->mask = slots - 1;
    v->arena = malloc(bytes + 1);
    v->off = calloc((size_t)v->n + 1, sizeof *v->off);
    v->len = calloc((size_t)v->n + 1, sizeof *v->len);
    v->present = calloc((size_t)v->n + 1, sizeof *v->present);
    v->slots = malloc(slots * sizeof *v->slots);
    if (!v->arena || !v->off || !v->len || !v->present || !v->slots) {
        tok_vocab_free(v);
        return stof_error(STOF_ERR_OOM, "%s: out of memory for %d tokens", file, n);
    }
    memset(v->slots, 0xff, slots * sizeof *v->slots);
    size_t used = 0;
    for (int32_t i = 0; i < n; i++) {
        int32_t id = ids ? ids[i] : i;
        size_t at = used;
        memcpy(v->arena + used, strs[i], lens[i]);
        v->arena[used + lens[i]] = '\0';
        used += lens[i] + 1;
        if (!v->present[id]) {
            v->present[id] = true;
            v->off[id] = at;
            v->len[id] = (uint32_t)lens[i];
        } else if (v->len[id] != lens[i] || memcmp(v->arena + v->off[id], strs[i], lens[i])) {
            continue; /* an id given twice keeps its first string */
        }
        size_t h = hash_bytes(strs[i], lens[i]) & v->mask;
        for (;; h = (h + 1) & v->mask) {
            int32_t e = v->slots[h];
            if (e < 0) break;
            if (v->len[e] == lens[i] && memcmp(v->arena + v->off[e], strs[i], lens[i]) == 0) break;
        }
        v->slots[h] = id; /* a string given twice: the last id wins */
    }
    return STOF_OK;
}

int32_t tok_vocab_find(const tok_vocab *v, const char *s, size_t len)
{
    if (!v->slots) return -1;
    size_t h = hash_bytes(s, len) & v->mask;
    for (;; h = (h + 1) & v->mask) {
        int32_t e = v->slots[h];
        if (e == -1) return -1;
        if (v->len[e] == len && memcmp(v->arena + v->off[e], s, len) == 0) return e;
    }
}

void tok_vocab_free(tok_vocab *v)
{
    free(v->arena);
    free(v->off);
    free(v->len);
    free(v->present);
    free(v->slots);
    memset(v, 0, sizeof *v);
}

/* ------------------------------------------------------------------ merges */

static size_t pair_hash(uint64_t key)
{
    key ^= key >> 33;
    key *= 0xff51afd7ed558ccdull;
    key ^= key >> 33;
    return (size_t)key;
}

stof_status tok_merges_init(tok_merges *m, size_t n)
{
    size_t slots = table_size(n);
    m->slots = malloc(slots * sizeof *m->slots);
    STOF_REQUIRE(m->slots, STOF_ERR_OOM, "out of memory for %zu merges", n);
    memset(m->slots, 0xff, slots * sizeof *m->slots);
    m->mask = slots - 1;
    m->n = 0;
    return STOF_OK;
}

/* The first rank of a pair wins, as the library keeps the first merge it reads. */
void tok_merges_add(tok_merges *m, int32_t a, int32_t b, int32_t rank, int32_t id)
{
    uint64_t key = (uint64_t)(uint32_t)a << 32 | (uint32_t)b;
    for (size_t h = pair_hash(key) & m->mask;; h = (h + 1) & m->mask) {
        if (m->slots[h].key == key) return;
        if (m->slots[h].key == UINT64_MAX) {
            m->slots[h] = (tok_merge){key, rank, id};
            m->n++;
            return;
        }
    }
}

const tok_merge *tok_merges_find(const tok_merges *m, int32_t a, int32_t b)
{
    if (!m->slots) return NULL;
    uint64_t key = (uint64_t)(uint32_t)a << 32 | (uint32_t)b;
    for (size_t h = pair_hash(key) & m->mask;; h = (h + 1) & m->mask) {
        if (m->slots[h].key == key) return &m->slots[h];
        if (m->slots[h].key == UINT64_MAX) return NULL;
    }
}

/* ------------------------------------------------------------------ UTF-8 */

bool tok_is_whitespace(uint32_t cp)
{
    return (cp >= 0x09 && cp <= 0x0D) || cp == 0x20 || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
           (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F ||
           cp == 0x205F || cp == 0x3000;
}

size_t tok_utf8_put(char *dst, uint32_t cp)
{
    unsigned char *d = (unsigned char *)dst;
    if (cp < 0x80) {
        d[0] = (unsigned char)cp;
        return 1;
    }
    if (cp < 0x800) {
        d[0] = (unsigned char)(0xC0 | cp >> 6);
        d[1] = (unsigned char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        d[0] = (unsigned char)(0xE0 | cp >> 12);
        d[1] = (unsigned char)(0x80 | (cp >> 6 & 0x3F));
        d[2] = (unsigned char)(0x80 | (cp & 0x3F));
        return 3;
    }
    d[0] = (unsigned char)(0xF0 | cp >> 18);
    d[1] = (unsigned char)(0x80 | (cp >> 12 & 0x3F));
    d[2] = (unsigned char)(0x80 | (cp >> 6 & 0x3F));
    d[3] = (unsigned char)(0x80 | (cp & 0x3F));
    return 4;
}

uint32_t tok_utf8_get(const char *str, size_t *pos)
{
    const unsigned char *s = (const unsigned char *)str + *pos;
    int n = tok_utf8_len(s[0]);
    *pos += (size_t)n;
    switch (n) {
    case 1: return s[0];
    case 2: return (uint32_t)(s[0] & 0x1F) << 6 | (s[1] & 0x3F);
    case 3: return (uint32_t)(s[0] & 0x0F) << 12 | (uint32_t)(s[1] & 0x3F) << 6 | (s[2] & 0x3F);
    default:
        return (uint32_t)(s[0] & 0x07) << 18 | (uint32_t)(s[1] & 0x3F) << 12 |
               (uint32_t)(s[2] & 0x3F) << 6 | (s[3] & 0x3F);
    }
}

/* Length of the valid sequence at s[0..n), 0 when invalid; *partial set when the bytes
 * are a valid but cut-off prefix (the maximal subpart the replacement swallows). */
static size_t valid_seq(const unsigned char *s, size_t n, size_t *prefix)
{
    unsigned char c = s[0];
    *prefix = 0;
    if (c < 0x80) return 1;
    int need;
    unsigned char lo = 0x80, hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF)
        need = 1;
    else if (c >= 0xE0 && c <= 0xEF) {
        need = 2;
        if (c == 0xE0) lo = 0xA0;
        if (c == 0xED) hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
        need = 3;
        if (c == 0xF0) lo = 0x90;
        if (c == 0xF4) hi = 0x8F;
    } else {
        return 0;
    }
    size_t i = 1;
    for (; i <= (size_t)need; i++) {
        if (i >= n) break;
        unsigned char lo_i = i == 1 ? lo : 0x80, hi_i = i == 1 ? hi : 0xBF;
        if (s[i] < lo_i || s[i] > hi_i) break;
    }
    if (i == (size_t)need + 1) return i;
    *prefix = i; /* lead byte plus i-1 good continuation bytes */
    return 0;
}

stof_status tok_utf8_sanitize(const char *str, size_t n, bool keep_tail, tok_buf *out, size_t *tail)
{
    const unsigned char *s = (const unsigned char *)str;
    size_t i = 0, run = 0;
    if (tail) *tail = 0;
    STOF_TRY(grow((void **)&out->p, &out->cap, out->n + n + 1, 1));
    while (i < n) {
        size_t prefix, k = valid_seq(s + i, n - i, &prefix);
        if (k) {
            i += k;
            continue;
        }
        if (i > run) STOF_TRY(tok_buf_put(out, s + run, i - run));
        size_t skip = prefix ? prefix : 1;
        if (keep_tail && i + skip == n && prefix && tail) {
            *tail = skip;
            return STOF_OK;
        }
        STOF_TRY(tok_buf_put(out, "\xEF\xBF\xBD", 3));
        i += skip;
        run = i;
    }
    if (n > run) STOF_TRY(tok_buf_put(out, s + run, n - run));
    return STOF_OK;
}
