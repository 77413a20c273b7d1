/*
 * attn_cpu.c — attention on a CPU context: each (batch, head) is gathered to
 * contiguous fp32, run through cpu_attention with the dense mask plane decoded
 * from the compiled tiles, and scattered back in the caller's dtype and
 * strides. Packed batches run sequence by sequence on the top-left
 * len_q x len_k corner of the plane. Grouped-query heads gather their kv
 * head; biases and the soft cap go through cpu_attention_ex's extras, with
 * tables and bias tensors converted to contiguous fp32 once per call.
 *
 * The one non-obvious choice: the mask is decoded from the compiled tiles
 * (stof_mask_decode), not re-derived from the spec, so the CPU backend sees
 * exactly what the GPU kernels see, and a plane shared by several (b, h) is
 * decoded once.
 */
#include "attn/attn.h"
#include "attn/attn_cpu_fast.h"
#include "cpu/cpu_ref.h"

#include <stdlib.h>
#include <string.h>

typedef struct cpu_bufs {
    float *q, *k, *v, *o;
    uint8_t *plane, *sub;
    int decoded; /* instance whose plane is in `plane`, -1: none */
    cpu_attn_extra x;
    float *table;  /* T5 table or ALiBi slopes, contiguous */
    float *tensor; /* bias tensor, contiguous over its own shape */
    int64_t *off;  /* [B] row offsets */
} cpu_bufs;

/* Element offset of row `row` of (b, h): padded (b, h, row) or packed (token row, h). */
static int64_t row_offset(const stof_tensor *t, bool packed, int64_t b, int64_t h, int64_t row)
{
    if (packed) return row * t->stride[0] + h * t->stride[1];
    return b * t->stride[0] + h * t->stride[1] + row * t->stride[2];
}

static void gather_rows(const stof_tensor *t, bool packed, int64_t b, int64_t h, int64_t row0,
                        int64_t rows, int64_t D, float *dst)
{
    for (int64_t i = 0; i < rows; i++) {
        int64_t off = row_offset(t, packed, b, h, row0 + i);
        for (int64_t d = 0; d < D; d++)
            dst[i * D + d] = stof_load_f(t->data, t->dtype, off + d);
    }
}

static void scatter_rows(const float *src, bool packed, int64_t b, int64_t h, int64_t row0,
                         int64_t rows, int64_t D, stof_tensor *t)
{
    for (int64_t i = 0; i < rows; i++) {
        int64_t off = row_offset(t, packed, b, h, row0 + i);
        for (int64_t d = 0; d < D; d++)
            stof_store_f(t->data, t->dtype, off + d, src[i * D + d]);
    }
}

static stof_status decode_plane(const attn_shape *s, stof_mask *mask, int64_t b, int64_t h,
                                cpu_bufs *w)
{
    int inst = mask_instance(stof_mask_tiles_view(mask), (int)b, (int)h);
    if (inst == w->decoded) return STOF_OK;
    w->decoded = -1;
    STOF_TRY(stof_mask_decode(mask, (int)b, (int)h, w->plane, (size_t)(s->Lq * s->Lk)));
    w->decoded = inst;
    return STOF_OK;
}

static stof_status run_padded(const attn_shape *s, const stof_tensor *q, const stof_tensor *k,
                              const stof_tensor *v, stof_mask *mask, stof_tensor *out, cpu_bufs *w)
{
    for (int64_t b = 0; b < s->B; b++) {
        for (int64_t h = 0; h < s->H; h++) {
            const int64_t hk = h / (s->H / s->Hkv);
            STOF_TRY(decode_plane(s, mask, b, h, w));
            gather_rows(q, false, b, h, 0, s->Lq, s->D, w->q);
            gather_rows(k, false, b, hk, 0, s->Lk, s->D, w->k);
            gather_rows(v, false, b, hk, 0, s->Lk, s->D, w->v);
            w->x.b0 = b;
            w->x.h0 = h;
            cpu_attention_ex(w->q, w->k, w->v, w->o, 1, 1, 1, s->Lq, s->Lk, s->D, w->plane, 0, 0,
                             s->scale, &w->x);
            scatter_rows(w->o, false, b, h, 0, s->Lq, s->D, out);
        }
    }
    return STOF_OK;
}

/* Prefix sums from the caller: start at 0, never decrease, end at the token
 * count, and no sequence longer than the mask's padded length. */
static stof_status check_host_cu(const int32_t *cu, int64_t B, int64_t T, int64_t L,
                                 const char *name)
{
    STOF_REQUIRE(cu[0] == 0, STOF_ERR_INVALID_ARG, "%s[0] = %d (must be 0)", name, cu[0]);
    for (int64_t b = 0; b < B; b++) {
        int64_t len = (int64_t)cu[b + 1] - cu[b];
        STOF_REQUIRE(len >= 0, STOF_ERR_INVALID_ARG, "%s decreases at entry %lld (%d -> %d)", name,
                     (long long)b, cu[b], cu[b + 1]);
        STOF_REQUIRE(len <= L, STOF_ERR_SHAPE,
                     "%s gives sequence %lld length %lld, longer than the mask's %lld", name,
                     (long long)b, (long long)len, (long long)L);
    }
    STOF_REQUIRE(cu[B] == T, STOF_ERR_SHAPE, "%s[%lld] = %d but the tensor has %lld tokens", name,
                 (long long)B, cu[B], (long long)T);
    return STOF_OK;
}

static stof_status run_packed(const attn_shape *s, const stof_tensor *q, const stof_tensor *k,
                              const stof_tensor *v, stof_mask *mask, const int32_t *cu_q,
                              const int32_t *cu_k, stof_tensor *out, cpu_bufs *w)
{
    for (int64_t b = 0; b < s->B; b++) {
        int64_t lq = cu_q[b + 1] - cu_q[b], lk = cu_k[b + 1] - cu_k[b];
        if (lq == 0) continue;
        w->off[b] = stof_mask_tiles_view(mask)->align_end ? lk - lq : 0;
        for (int64_t h = 0; h < s->H; h++) {
            const int64_t hk = h / (s->H / s->Hkv);
            STOF_TRY(decode_plane(s, mask, b, h, w));
            for (int64_t i = 0; i < lq; i++)
                memcpy(w->sub + i * lk, w->plane + i * s->Lk, lk);
            gather_rows(q, true, b, h, cu_q[b], lq, s->D, w->q);
            gather_rows(k, true, b, hk, cu_k[b], lk, s->D, w->k);
            gather_rows(v, true, b, hk, cu_k[b], lk, s->D, w->v);
            w->x.b0 = b;
            w->x.h0 = h;
            cpu_attention_ex(w->q, w->k, w->v, w->o, 1, 1, 1, lq, lk, s->D, w->sub, 0, 0, s->scale,
                             &w->x);
            scatter_rows(w->o, true, b, h, cu_q[b], lq, s->D, out);
        }
    }
    return STOF_OK;
}

/* Row offsets of the padded layout (from the mask's lengths; the packed
 * layout fills them from cu_seqlens as it goes). */
static void fill_offsets(const attn_shape *s, stof_mask *mask, int64_t *off)
{
    const mask_tiles *t = stof_mask_tiles_view(mask);
    for (int64_t b = 0; b < s->B; b++) {
        const int bi = t->bm > 1 ? (int)b : 0;
        off[b] = s->packed ? 0 : mask_tiles_offset(t, t->len_q[bi], t->len_k[bi]);
    }
}

/* params' bias as contiguous fp32 in w (a table or slopes, or the tensor over
 * its own broadcast shape). */
static stof_status fill_bias(const attn_shape *s, cpu_bufs *w)
{
    const stof_attn_params *p = s->params;
    cpu_attn_extra *x = &w->x;
    x->bias_kind = p->bias_kind;
    x->softcap = p->softcap;
    x->heads = (int)s->H;
    if (p->bias_kind == STOF_BIAS_NONE) return STOF_OK;
    const stof_tensor *t = p->bias;
    int64_t n = 1;
    for (int d = 0; d < t->ndim; d++)
        n *= t->shape[d];
    float *dst = NULL;
    STOF_TRY(stof_host_alloc((size_t)n * sizeof(float), (void **)&dst));
    int64_t idx[4] = {0, 0, 0, 0};
    for (int64_t e = 0; e < n; e++) {
        int64_t src = 0, rest = e;
        for (int d = t->ndim - 1; d >= 0; d--) {
            idx[d] = rest % t->shape[d];
            rest /= t->shape[d];
            src += idx[d] * t->stride[d];
        }
        dst[e] = stof_load_f(t->data, t->dtype, src);
    }
    if (p->bias_kind == STOF_BIAS_TENSOR) {
        w->tensor = dst;
        x->tensor = dst;
        x->t_stride[3] = 1;
        x->t_stride[2] = t->shape[3];
        x->t_stride[1] = t->shape[1] == 1 ? 0 : t->shape[2] * t->shape[3];
        x->t_stride[0] = t->shape[0] == 1 ? 0 : t->shape[1] * t->shape[2] * t->shape[3];
    } else {
        w->table = dst;
        x->table = dst;
        x->t5_num_buckets = (int)t->shape[0];
        x->t5_bidirectional = p->t5_bidirectional != 0;
        x->t5_max_distance = p->t5_max_distance ? p->t5_max_distance : 128;
    }
    return STOF_OK;
}

stof_status attn_cpu_run(const attn_shape *s, const stof_tensor *q, const stof_tensor *k,
                         const stof_tensor *v, stof_mask *mask, const stof_tensor *cu_q,
                         const stof_tensor *cu_k, stof_tensor *out)
{
    if (s->packed) {
        STOF_TRY(check_host_cu((const int32_t *)cu_q->data, s->B, s->Tq, s->Lq, "cu_seqlens_q"));
        STOF_TRY(check_host_cu((const int32_t *)cu_k->data, s->B, s->Tk, s->Lk, "cu_seqlens_k"));
    }
    if (attn_cpu_fast_supports(s, q, k, v, out))
        return attn_cpu_fast_run(s, q, k, v, mask, cu_q, cu_k, out);
    cpu_bufs w;
    memset(&w, 0, sizeof w);
    w.decoded = -1;
    size_t plane = (size_t)s->Lq * (size_t)s->Lk;
    stof_status st = stof_host_alloc((size_t)s->B * sizeof(int64_t), (void **)&w.off);
    if (st == STOF_OK) {
        fill_offsets(s, mask, w.off);
        w.x.off = w.off;
        st = fill_bias(s, &w);
    }
    if (st == STOF_OK) st = stof_host_alloc((size_t)(s->Lq * s->D) * sizeof(float), (void **)&w.q);
    if (st == STOF_OK) st = stof_host_alloc((size_t)(s->Lk * s->D) * sizeof(float), (void **)&w.k);
    if (st == STOF_OK) st = stof_host_alloc((size_t)(s->Lk * s->D) * sizeof(float), (void **)&w.v);
    if (st == STOF_OK) st = stof_host_alloc((size_t)(s->Lq * s->D) * sizeof(float), (void **)&w.o);
    if (st == STOF_OK) st = stof_host_alloc(plane, (void **)&w.plane);
    if (st == STOF_OK && s->packed) st = stof_host_alloc(plane, (void **)&w.sub);
    if (st == STOF_OK) {
        if (s->packed)
            st = run_packed(s, q, k, v, mask, (const int32_t *)cu_q->data,
                            (const int32_t *)cu_k->data, out, &w);
        else
            st = run_padded(s, q, k, v, mask, out, &w);
    }
    free(w.q);
    free(w.k);
    free(w.v);
    free(w.o);
    free(w.plane);
    free(w.sub);
    free(w.off);
    free(w.table);
    free(w.tensor);
    return st;
}
