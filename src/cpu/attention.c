/*
 * attention.c — masked scaled-dot-product attention, one (batch, head, query)
 * row at a time: scores over the visible keys only, softmax with the row
 * maximum subtracted, probabilities times V, all accumulated in double. A row
 * with no visible key is written as exact zeros (the stof convention). A NULL
 * mask means every key is visible.
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

static double dot_scaled(const float *a, const float *b, int64_t D, double scale)
{
    double acc = 0.0;
    for (int64_t d = 0; d < D; d++)
        acc += (double)a[d] * (double)b[d];
    return acc * scale;
}

/* One query row: q [D], k and v [Lk, D], visible [Lk] bytes (NULL: all visible). */
static void attention_row(const float *q, const float *k, const float *v, const uint8_t *visible,
                          float *out, int64_t Lk, int64_t D, double scale)
{
    double row_max = -INFINITY;
    int64_t n_visible = 0;
    for (int64_t j = 0; j < Lk; j++) {
        if (visible && !visible[j]) continue;
        double s = dot_scaled(q, k + j * D, D, scale);
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
            double p = exp(dot_scaled(q, k + j * D, D, scale) - row_max);
            denom += p;
            const float *vj = v + j * D + d0;
            for (int64_t d = 0; d < width; d++)
                acc[d] += p * (double)vj[d];
        }
        for (int64_t d = 0; d < width; d++)
            out[d0 + d] = (float)(acc[d] / denom);
    }
}

void cpu_attention(const float *q, const float *k, const float *v, float *out, int64_t B, int64_t H,
                   int64_t Lq, int64_t Lk, int64_t D, const uint8_t *mask, int64_t mask_stride_b,
                   int64_t mask_stride_h, float scale)
{
    for (int64_t b = 0; b < B; b++) {
        for (int64_t h = 0; h < H; h++) {
            int64_t bh = b * H + h;
            const float *qh = q + bh * Lq * D;
            const float *kh = k + bh * Lk * D;
            const float *vh = v + bh * Lk * D;
            float *oh = out + bh * Lq * D;
            const uint8_t *plane = mask ? mask + b * mask_stride_b + h * mask_stride_h : NULL;
            for (int64_t i = 0; i < Lq; i++)
                attention_row(qh + i * D, kh, vh, plane ? plane + i * Lk : NULL, oh + i * D, Lk, D,
                              (double)scale);
        }
    }
}
