/*
 * query.c — reading compiled masks back: host copies (for tests and the CPU
 * backend), exact statistics, decoding an instance to a dense 0/1 plane, and
 * the dense oracle straight from the spec. A device mask is copied once (the
 * copy is kept with the mask, which never changes after compile), on the
 * ctx's stream, which synchronises.
 */
#include "mask/mask_internal.h"

#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- host copies */

static stof_status download(stof_ctx *ctx, void *dst, const void *src, size_t bytes)
{
    return stof_dev_download(ctx, dst, src, bytes);
}

/* Counts of the mask (read from the device for a GPU build). */
static stof_status mask_counts(stof_mask *m, int64_t *entries, int64_t *partial)
{
    if (m->entries >= 0) {
        *entries = m->entries;
        *partial = m->partial;
        return STOF_OK;
    }
    int32_t meta[4];
    STOF_TRY(download(m->ctx, meta, (const char *)m->storage + m->lay.meta, sizeof meta));
    STOF_TRY(stof_ctx_synchronize(m->ctx));
    STOF_REQUIRE(meta[2] == 0 && meta[0] <= m->cap_entries && meta[1] <= m->cap_partial,
                 STOF_ERR_INTERNAL,
                 "compiled mask overflowed its bound (%d tiles, %d partial; room for %lld, %lld)",
                 meta[0], meta[1], (long long)m->cap_entries, (long long)m->cap_partial);
    m->entries = meta[0];
    m->partial = meta[1];
    *entries = m->entries;
    *partial = m->partial;
    return STOF_OK;
}

stof_status stof_mask_to_host(stof_mask *mask, mask_tiles_host *out)
{
    STOF_REQUIRE(out, STOF_ERR_INVALID_ARG, "stof_mask_to_host: out is NULL");
    memset(out, 0, sizeof *out);
    STOF_REQUIRE(mask, STOF_ERR_INVALID_ARG, "stof_mask_to_host: mask is NULL");
    int64_t entries = 0, partial = 0;
    STOF_TRY(mask_counts(mask, &entries, &partial));
    const mask_tiles *t = &mask->t;
    mask_layout l = mask_layout_make(t->bm, (int64_t)t->n_inst * t->n_trow, t->tile_m,
                                     t->words_per_row, entries, partial);
    char *host = NULL;
    STOF_TRY(stof_host_calloc(1, l.total, (void **)&host));
    const char *src = (const char *)mask->storage;
    size_t head = mask->lay.col; /* lengths, row_ptr and meta: the same offsets in both */
    size_t bitmap_bytes = (size_t)partial * t->tile_m * t->words_per_row * 8;
    stof_status st = STOF_OK;
    if (mask->memory == STOF_MEM_HOST) {
        memcpy(host, src, head);
        memcpy(host + l.col, src + mask->lay.col, (size_t)entries * 4);
        memcpy(host + l.bits, src + mask->lay.bits, (size_t)entries * 4);
        memcpy(host + l.bitmap, src + mask->lay.bitmap, bitmap_bytes);
    } else {
        st = download(mask->ctx, host, src, head);
        if (st == STOF_OK)
            st = download(mask->ctx, host + l.col, src + mask->lay.col, (size_t)entries * 4);
        if (st == STOF_OK)
            st = download(mask->ctx, host + l.bits, src + mask->lay.bits, (size_t)entries * 4);
        if (st == STOF_OK)
            st = download(mask->ctx, host + l.bitmap, src + mask->lay.bitmap, bitmap_bytes);
        if (st == STOF_OK) st = stof_ctx_synchronize(mask->ctx);
    }
    if (st != STOF_OK) {
        free(host);
        return st;
    }
    out->t = *t;
    out->t.len_q = (const int32_t *)(host + l.len_q);
    out->t.len_k = (const int32_t *)(host + l.len_k);
    out->t.row_ptr = (const int32_t *)(host + l.row_ptr);
    out->t.col = (const int32_t *)(host + l.col);
    out->t.bits = (const int32_t *)(host + l.bits);
    out->t.bitmap = (const uint64_t *)(host + l.bitmap);
    out->entries = entries;
    out->partial = partial;
    out->storage = host;
    return STOF_OK;
}

void mask_tiles_host_free(mask_tiles_host *h)
{
    if (!h) return;
    free(h->storage);
    memset(h, 0, sizeof *h);
}

/* The mask's arrays on the host: its own for a host mask, else a kept copy. */
static stof_status host_view(stof_mask *m, const mask_tiles **t)
{
    if (m->memory == STOF_MEM_HOST) {
        *t = &m->t;
        return STOF_OK;
    }
    if (!m->host_copy) {
        mask_tiles_host *h = NULL;
        STOF_TRY(stof_host_calloc(1, sizeof *h, (void **)&h));
        stof_status st = stof_mask_to_host(m, h);
        if (st != STOF_OK) {
            free(h);
            return st;
        }
        m->host_copy = h;
    }
    *t = &m->host_copy->t;
    return STOF_OK;
}

/* ---------------------------------------------------------------- stats, decode */

static int64_t popcount64(uint64_t x)
{
    int64_t n = 0;
    for (; x; x &= x - 1)
        n++;
    return n;
}

/* Visible pairs of instance s: rows past len_q are not counted. */
static int64_t instance_nnz(const mask_tiles *t, int s)
{
    int b = t->bm > 1 ? s / t->hm : 0;
    int64_t lenq = t->len_q[b], nnz = 0;
    int words = t->tile_m * t->words_per_row;
    for (int r = 0; r < t->n_trow; r++) {
        int64_t live = lenq - (int64_t)r * t->tile_m;
        if (live <= 0) break;
        if (live > t->tile_m) live = t->tile_m;
        int64_t row = (int64_t)s * t->n_trow + r;
        for (int32_t e = t->row_ptr[row]; e < t->row_ptr[row + 1]; e++) {
            if (t->bits[e] < 0) {
                nnz += live * t->tile_n;
                continue;
            }
            const uint64_t *bm = t->bitmap + (int64_t)t->bits[e] * words;
            for (int64_t k = 0; k < live * t->words_per_row; k++)
                nnz += popcount64(bm[k]);
        }
    }
    return nnz;
}

stof_status stof_mask_stats_get(stof_mask *mask, stof_mask_stats *out)
{
    STOF_REQUIRE(mask && out, STOF_ERR_INVALID_ARG, "stof_mask_stats_get: mask or out is NULL");
    const mask_tiles *t;
    STOF_TRY(host_view(mask, &t));
    int64_t entries = mask->entries, partial = mask->partial;
    memset(out, 0, sizeof *out);
    out->instances = t->n_inst;
    out->tile_m = t->tile_m;
    out->tile_n = t->tile_n;
    out->tiles_total = (int64_t)t->n_inst * t->n_trow * t->n_tcol;
    out->tiles_partial = partial;
    out->tiles_full = entries - partial;
    /* A split mask: the tiles are those of the stored plane, which every
     * residue class repeats. */
    for (int s = 0; s < t->n_inst; s++)
        out->nnz += instance_nnz(t, s) * t->split;
    out->tile_density = (double)entries / (double)out->tiles_total;
    out->density = (double)out->nnz / ((double)t->n_inst * t->lq * t->lk * t->split * t->split);
    return STOF_OK;
}

stof_status stof_mask_decode(stof_mask *mask, int b, int h, uint8_t *dense, size_t cap)
{
    STOF_REQUIRE(mask && dense, STOF_ERR_INVALID_ARG, "stof_mask_decode: mask or dense is NULL");
    const mask_tiles *v = &mask->t;
    STOF_REQUIRE(b >= 0 && b < v->batch, STOF_ERR_INVALID_ARG,
                 "stof_mask_decode: batch entry %d is outside [0, %d)", b, v->batch);
    STOF_REQUIRE(h >= 0 && h < v->heads, STOF_ERR_INVALID_ARG,
                 "stof_mask_decode: head %d is outside [0, %d)", h, v->heads);
    const int64_t d = v->split, lk_full = (int64_t)v->lk * d;
    size_t need = (size_t)((int64_t)v->lq * d) * (size_t)lk_full;
    STOF_REQUIRE(cap >= need, STOF_ERR_INVALID_ARG,
                 "stof_mask_decode: cap %zu is smaller than Lq * Lk = %zu", cap, need);
    const mask_tiles *t;
    STOF_TRY(host_view(mask, &t));
    int s = mask_instance(t, b, h);
    int bi = t->bm > 1 ? b : 0;
    int lenq = t->len_q[bi], lenk = t->len_k[bi], tm = t->tile_m, tn = t->tile_n;
    int words = tm * t->words_per_row;
    memset(dense, 0, need);
    /* Element (i, j) of the stored plane is (i d + p, j d + p) for each class p. */
    for (int r = 0; r < t->n_trow; r++) {
        int64_t row = (int64_t)s * t->n_trow + r;
        for (int32_t e = t->row_ptr[row]; e < t->row_ptr[row + 1]; e++) {
            int i0 = r * tm, j0 = t->col[e] * tn;
            const uint64_t *bm = t->bits[e] < 0 ? NULL : t->bitmap + (int64_t)t->bits[e] * words;
            for (int rr = 0; rr < tm && i0 + rr < lenq; rr++) {
                for (int cc = 0; cc < tn && j0 + cc < lenk; cc++) {
                    int bit = !bm || ((bm[rr * t->words_per_row + cc / 64] >> (cc % 64)) & 1);
                    for (int64_t p = 0; p < d; p++)
                        dense[((i0 + rr) * d + p) * lk_full + (j0 + cc) * d + p] = (uint8_t)bit;
                }
            }
        }
    }
    return STOF_OK;
}

/* ---------------------------------------------------------------- oracle */

/* lengths follow the compile rule: lengths_k NULL means lengths_q when lq == lk,
 * full length otherwise; host values must lie in [0, L]. */

/* rows rows of the plane; clip: rows at or past the query length cleared
 * (else they follow the spec, as the tiles store them). */
static stof_status oracle_plane(const stof_mask_spec *spec, int batch, int heads, int lq, int lk,
                                const int32_t *lengths_q, const int32_t *lengths_k, int b, int h,
                                int rows, bool clip, uint8_t *dense)
{
    STOF_REQUIRE(dense, STOF_ERR_INVALID_ARG, "stof_mask_spec_to_dense: dense is NULL");
    STOF_REQUIRE(b >= 0 && b < batch && h >= 0 && h < heads, STOF_ERR_INVALID_ARG,
                 "stof_mask_spec_to_dense: (b, h) = (%d, %d) is outside [0, %d) x [0, %d)", b, h,
                 batch, heads);
    int64_t n = batch;
    stof_tensor tq = stof_tensor_make((void *)lengths_q, STOF_I32, STOF_MEM_HOST, 1, &n);
    stof_tensor tk = stof_tensor_make((void *)lengths_k, STOF_I32, STOF_MEM_HOST, 1, &n);
    stof_mask_params p = stof_mask_default_params();
    p.batch = batch;
    p.heads = heads;
    p.len_q = lq;
    p.len_k = lk;
    p.lengths_q = lengths_q ? &tq : NULL;
    p.lengths_k = lengths_k ? &tk : NULL;
    mask_plan plan;
    mask_host_eval he;
    memset(&he, 0, sizeof he);
    stof_status st = mask_plan_make(NULL, spec, &p, true, &plan);
    if (st == STOF_OK) st = mask_host_eval_make(spec, &plan, &he);
    if (st == STOF_OK) {
        /* The caller's own indices and lengths, not the instance mapping: the oracle
         * must not share the compiler's idea of which masks are alike. */
        const int32_t *lk_src = lengths_k ? lengths_k : (lq == lk ? lengths_q : NULL);
        int lenq = lengths_q ? lengths_q[b] : lq, lenk = lk_src ? lk_src[b] : lk;
        for (int i = 0; i < rows; i++)
            for (int j = 0; j < lk; j++)
                dense[(size_t)i * lk + j] = (uint8_t)((!clip || i < lenq) && j < lenk &&
                                                      mask_visible(&he.e, b, h, lenq, lenk, i, j));
    }
    mask_host_eval_free(&he);
    mask_plan_free(&plan);
    return st;
}

stof_status stof_mask_spec_to_dense(const stof_mask_spec *spec, int batch, int heads, int lq,
                                    int lk, const int32_t *lengths_q, const int32_t *lengths_k,
                                    int b, int h, uint8_t *dense)
{
    return oracle_plane(spec, batch, heads, lq, lk, lengths_q, lengths_k, b, h, lq, true, dense);
}

stof_status stof_mask_spec_tile_plane(const stof_mask_spec *spec, int batch, int heads, int lq,
                                      int lk, const int32_t *lengths_q, const int32_t *lengths_k,
                                      int b, int h, int rows, uint8_t *dense)
{
    return oracle_plane(spec, batch, heads, lq, lk, lengths_q, lengths_k, b, h, rows, false, dense);
}
