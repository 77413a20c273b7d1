/*
 * rmsnorm.c — RMSNorm as Hugging Face's LlamaRMSNorm computes it: the mean of
 * squares taken over the (optionally residual-added) row, x / sqrt(ms + eps)
 * scaled by w. HF does this in fp32; here the statistics are taken in double
 * and each output rounded once, which agrees with fp32 to an ulp or two.
 */
#include "cpu/cpu_ref.h"

#include <math.h>
#include <stddef.h>

static void rmsnorm_row(const float *x, const float *residual, const float *w, float *y,
                        int64_t cols, float eps)
{
    double sq = 0.0;
    for (int64_t c = 0; c < cols; c++) {
        /* x + residual rounded to float first, as a fused kernel stores the sum. */
        double v = residual ? (double)(x[c] + residual[c]) : (double)x[c];
        sq += v * v;
    }
    double rstd = 1.0 / sqrt(sq / (double)cols + (double)eps);
    /* Element c is read before y[c] is written, so y may alias x or residual. */
    for (int64_t c = 0; c < cols; c++) {
        double v = residual ? (double)(x[c] + residual[c]) : (double)x[c];
        /* HF rounds the normalised value to the input dtype before the weight. */
        float n = (float)(v * rstd);
        y[c] = w ? w[c] * n : n;
    }
}

void cpu_rmsnorm(const float *x, const float *residual, const float *w, float *y, int64_t rows,
                 int64_t cols, float eps)
{
    if (cols <= 0) return;
    for (int64_t r = 0; r < rows; r++)
        rmsnorm_row(x + r * cols, residual ? residual + r * cols : NULL, w, y + r * cols, cols,
                    eps);
}
