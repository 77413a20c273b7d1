/*
 * norm.c — LayerNorm with an optional residual added first (the post-LN of a
 * BERT layer), and a plain elementwise add. Each row's statistics are taken
 * in double with two passes (mean, then centred squares), so the variance
 * never loses digits to cancellation; the variance is the biased one, as in
 * torch.nn.LayerNorm. A NULL gamma means 1 and a NULL beta means 0.
 */
#include "cpu/cpu_ref.h"

#include <math.h>
#include <stddef.h>

static double input_at(const float *x, const float *residual, int64_t i)
{
    /* The sum is rounded to float first, as the fused kernels store x + residual. */
    return residual ? (double)(x[i] + residual[i]) : (double)x[i];
}

static void layernorm_row(const float *x, const float *residual, const float *gamma,
                          const float *beta, float *y, int64_t cols, float eps)
{
    double sum = 0.0;
    for (int64_t c = 0; c < cols; c++)
        sum += input_at(x, residual, c);
    double mean = sum / (double)cols;
    double sq = 0.0;
    for (int64_t c = 0; c < cols; c++) {
        double d = input_at(x, residual, c) - mean;
        sq += d * d;
    }
    double rstd = 1.0 / sqrt(sq / (double)cols + (double)eps);
    /* Element c is read before y[c] is written, so y may alias x or residual. */
    for (int64_t c = 0; c < cols; c++) {
        double v = (input_at(x, residual, c) - mean) * rstd;
        double g = gamma ? (double)gamma[c] : 1.0;
        double b = beta ? (double)beta[c] : 0.0;
        y[c] = (float)(v * g + b);
    }
}

void cpu_layernorm(const float *x, const float *residual, const float *gamma, const float *beta,
                   float *y, int64_t rows, int64_t cols, float eps)
{
    if (cols <= 0) return;
    for (int64_t r = 0; r < rows; r++)
        layernorm_row(x + r * cols, residual ? residual + r * cols : NULL, gamma, beta,
                      y + r * cols, cols, eps);
}

void cpu_add(const float *a, const float *b, float *y, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        y[i] = a[i] + b[i];
}
