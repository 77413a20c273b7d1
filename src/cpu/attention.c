/*
 * attention.c — masked scaled-dot-product attention, one (batch, head, query)
 * row at a time: scores over the visible keys only, softmax with the row
 * maximum subtracted, probabilities times V, all accumulated in double. A row
 * with no visible key is written as exact zeros (the stof convention). A NULL
 * mask means every key is visible. The extended form adds what decoders and
 * T5 need: grouped-query heads, a tanh soft cap, and position biases (T5
 * relative buckets, ALiBi, an additive tensor) at bottom-right or top-left
 * positions, exactly as stof.h defines them.
 *
 * The one non-obvious choice: nothing is allocated. Scores are recomputed in
 * the second pass instead of being stored, and the output row is accumulated
 * in slices of ACC_SLICE doubles on the stack, so the function cannot fail and
 * costs two dot products per visible key for head dims up to ACC_SLICE.
 */
#include "cpu/cpu_ref.h"

#include <math.h>
#include <stddef.h>

enum { ACC_SLICE = 128 };

/* What one row's scores need besides q and k: the row's (b, h, i) for the
 * biases, and the extras (NULL: plain). */
typedef struct row_ctx {
    const cpu_attn_extra *x;
    int64_t b, h, i, off;
    double scale;
} row_ctx;

int cpu_t5_bucket(int64_t rel, int bidirectional, int num_buckets, int max_distance)
{
    /* Hugging Face's T5Attention._relative_position_bucket, in float32 as torch runs it. */
    int bucket = 0, nb = num_buckets;
    if (bidirectional) {
        nb /= 2;
        if (rel > 0) bucket += nb;
        rel = rel < 0 ? -rel : rel;
    } else {
        rel = rel < 0 ? -rel : 0;
    }
    const int exact = nb / 2;
    if (rel < exact) return bucket + (int)rel;
    float f = logf((float)rel / (float)exact) / (float)log((double)max_distance / exact) *
              (float)(nb - exact);
    int64_t large = exact + (int64_t)f;
    if (large > nb - 1) large = nb - 1;
    return bucket + (int)large;
}

double cpu_attn_score(const cpu_attn_extra *x, int64_t b, int64_t h, int64_t i, int64_t j,
                      int64_t off, double s)
{
    if (!x) return s;
    if (x->softcap > 0.0f) s = x->softcap * tanh(s / x->softcap);
    const int64_t rel = j - (i + off);
    switch (x->bias_kind) {
    case CPU_BIAS_T5: {
        int bk = cpu_t5_bucket(rel, x->t5_bidirectional, x->t5_num_buckets, x->t5_max_distance);
        s += x->table[(int64_t)bk * x->heads + h];
        break;
    }
    case CPU_BIAS_ALIBI: s -= (double)x->table[h] * (double)(rel < 0 ? -rel : rel); break;
    case CPU_BIAS_TENSOR:
        s += x->tensor[b * x->t_stride[0] + h * x->t_stride[1] + i * x->t_stride[2] +
                       j * x->t_stride[3]];
        break;
    default: break;
    }
    return s;
}

static double score(const row_ctx *c, const float *q, const float *k, int64_t j, int64_t D)
{
    double acc = 0.0;
    for (int64_t d = 0; d < D; d++)
        acc += (double)q[d] * (double)k[d];
    return cpu_attn_score(c->x, c->b, c->h, c->i, j, c->off, acc * c->scale);
}

/* One query row: q [D], k and v [Lk, D], visible [Lk] bytes (NULL: all visible). */
static void attention_row(const row_ctx *c, const float *q, const float *k, const float *v,
                          const uint8_t *visible, float *out, int64_t Lk, int64_t D)
{
    double row_max = -INFINITY;
    int64_t n_visible = 0;
    for (int64_t j = 0; j < Lk; j++) {
        if (visible && !visible[j]) continue;
        double s = score(c, q, k + j * D, j, D);
        if (s > row_max) row_max = s;
        n_visible++;
    }
    if (n_visible == 0) {
        for (int64_t d = 0; d < D; d++)
            out[d] = 0.0f;
        return;
    }
    for (int64_t d0 = 0; d0 < D; d0 += ACC_SLICE) {
        int64_t width = D - d0 < ACC_SLICE ? D - d0 : ACC_SLICE;
        double acc[ACC_SLICE] = {0};
        double denom = 0.0;
        for (int64_t j = 0; j < Lk; j++) {
            if (visible && !visible[j]) continue;
            double p = exp(score(c, q, k + j * D, j, D) - row_max);
            denom += p;
            const float *vj = v + j * D + d0;
            for (int64_t d = 0; d < width; d++)
                acc[d] += p * (double)vj[d];
        }
        for (int64_t d = 0; d < width; d++)
            out[d0 + d] = (float)(acc[d] / denom);
    }
}

void cpu_attention_ex(const float *q, const float *k, const float *v, float *out, int64_t B,
                      int64_t H, int64_t Hkv, int64_t Lq, int64_t Lk, int64_t D,
                      const uint8_t *mask, int64_t mask_stride_b, int64_t mask_stride_h,
                      float scale, const cpu_attn_extra *x)
{
    const int64_t group = H / Hkv;
    for (int64_t b = 0; b < B; b++) {
        for (int64_t h = 0; h < H; h++) {
            const float *qh = q + (b * H + h) * Lq * D;
            const float *kh = k + (b * Hkv + h / group) * Lk * D;
            const float *vh = v + (b * Hkv + h / group) * Lk * D;
            float *oh = out + (b * H + h) * Lq * D;
            const uint8_t *plane = mask ? mask + b * mask_stride_b + h * mask_stride_h : NULL;
            row_ctx c = {x, b, h, 0, 0, (double)scale};
            if (x) {
                c.b += x->b0;
                c.h += x->h0;
                c.off = x->off ? x->off[c.b] : 0;
            }
            for (int64_t i = 0; i < Lq; i++) {
                c.i = i + (x ? x->i0 : 0);
                attention_row(&c, qh + i * D, kh, vh, plane ? plane + i * Lk : NULL, oh + i * D, Lk,
                              D);
            }
        }
    }
}

void cpu_attention(const float *q, const float *k, const float *v, float *out, int64_t B, int64_t H,
                   int64_t Lq, int64_t Lk, int64_t D, const uint8_t *mask, int64_t mask_stride_b,
                   int64_t mask_stride_h, float scale)
{
    cpu_attention_ex(q, k, v, out, B, H, H, Lq, Lk, D, mask, mask_stride_b, mask_stride_h, scale,
                     NULL);
}
