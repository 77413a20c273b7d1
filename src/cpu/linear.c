/*
 * linear.c — y = act(x W^T + b) in PyTorch's layout (W is [out, in]).
 * cpu_linear is the CPU backend's path (OpenBLAS sgemm, then bias and
 * activation in one sweep over y); cpu_linear_naive is its oracle, a triple
 * loop in double. BLAS takes 32-bit sizes, so m is fed in slices and a layer
 * wider than INT_MAX falls back to the naive loop rather than overflow.
 */
#include "cpu/cpu_ref.h"

#include <cblas.h>
#include <limits.h>
#include <string.h>

static void add_bias_and_activate(float *y, const float *bias, int64_t m, int64_t n, stof_act act)
{
    for (int64_t r = 0; r < m; r++) {
        float *row = y + r * n;
        if (bias)
            for (int64_t c = 0; c < n; c++)
                row[c] += bias[c];
        cpu_activation(row, n, act);
    }
}

void cpu_linear(const float *x, const float *w, const float *bias, float *y, int64_t m, int64_t n,
                int64_t k, stof_act act)
{
    if (m <= 0 || n <= 0) return;
    if (k <= 0) {
        memset(y, 0, (size_t)(m * n) * sizeof(float));
    } else if (n > INT_MAX || k > INT_MAX) {
        cpu_linear_naive(x, w, bias, y, m, n, k, act);
        return;
    } else {
        for (int64_t r0 = 0; r0 < m; r0 += INT_MAX) {
            int64_t rows = m - r0 < INT_MAX ? m - r0 : INT_MAX;
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (blasint)rows, (blasint)n,
                        (blasint)k, 1.0f, x + r0 * k, (blasint)k, w, (blasint)k, 0.0f, y + r0 * n,
                        (blasint)n);
        }
    }
    add_bias_and_activate(y, bias, m, n, act);
}

void cpu_linear_naive(const float *x, const float *w, const float *bias, float *y, int64_t m,
                      int64_t n, int64_t k, stof_act act)
{
    for (int64_t r = 0; r < m; r++) {
        for (int64_t c = 0; c < n; c++) {
            double acc = bias ? (double)bias[c] : 0.0;
            for (int64_t i = 0; i < k; i++)
                acc += (double)x[r * k + i] * (double)w[c * k + i];
            y[r * n + c] = (float)acc;
        }
        cpu_activation(y + r * n, n, act);
    }
}
