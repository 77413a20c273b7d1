/*
 * test_cpu_norm.c — cpu_layernorm against a one-pass long-double (Welford)
 * computation written independently of the two-pass reference; the mean 0 /
 * variance 1 invariants; in-place use (y == x, y == residual); a large offset
 * that would cancel in a naive E[x^2] - E[x]^2; and cpu_add.
 */
#include "cpu/cpu_ref.h"
#include "testlib.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Welford's running mean and variance in long double, then the affine part. */
static void layernorm_welford(const float *x, const float *residual, const float *gamma,
                              const float *beta, float *y, int64_t rows, int64_t cols, float eps)
{
    for (int64_t r = 0; r < rows; r++) {
        long double mean = 0, m2 = 0;
        for (int64_t c = 0; c < cols; c++) {
            float v = x[r * cols + c];
            if (residual) v += residual[r * cols + c];
            long double delta = v - mean;
            mean += delta / (long double)(c + 1);
            m2 += delta * ((long double)v - mean);
        }
        long double inv = 1.0L / sqrtl(m2 / (long double)cols + (long double)eps);
        for (int64_t c = 0; c < cols; c++) {
            float v = x[r * cols + c];
            if (residual) v += residual[r * cols + c];
            long double g = gamma ? gamma[c] : 1.0L, b = beta ? beta[c] : 0.0L;
            y[r * cols + c] = (float)(((long double)v - mean) * inv * g + b);
        }
    }
}

static float *alloc_f(int64_t n)
{
    return malloc(sizeof(float) * (size_t)(n > 0 ? n : 1));
}

static void check_against_welford(test_rng *r, int64_t rows, int64_t cols, int with_residual,
                                  float offset)
{
    float *x = alloc_f(rows * cols), *res = alloc_f(rows * cols);
    float *gamma = alloc_f(cols), *beta = alloc_f(cols);
    float *y = alloc_f(rows * cols), *ref = alloc_f(rows * cols);
    test_fill_uniform(r, x, rows * cols, offset - 2.0f, offset + 2.0f);
    test_fill_uniform(r, res, rows * cols, -1.0f, 1.0f);
    test_fill_uniform(r, gamma, cols, 0.5f, 1.5f);
    test_fill_uniform(r, beta, cols, -0.5f, 0.5f);
    test_poison_f32(y, rows * cols);
    const float *rp = with_residual ? res : NULL;
    float eps = 1e-5f;
    cpu_layernorm(x, rp, gamma, beta, y, rows, cols, eps);
    layernorm_welford(x, rp, gamma, beta, ref, rows, cols, eps);
    double err = test_rel_err(y, ref, rows * cols);
    CHECK(err < 1e-6, "layernorm rows=%lld cols=%lld residual=%d offset=%g: rel err %g",
          (long long)rows, (long long)cols, with_residual, offset, err);
    free(x);
    free(res);
    free(gamma);
    free(beta);
    free(y);
    free(ref);
}

/* With gamma = 1 and beta = 0 every row must have mean 0 and variance ~1. */
static void check_invariants(test_rng *r, int64_t rows, int64_t cols, int null_affine)
{
    float *x = alloc_f(rows * cols), *y = alloc_f(rows * cols);
    float *ones = alloc_f(cols), *zeros = alloc_f(cols);
    for (int64_t c = 0; c < cols; c++)
        ones[c] = 1.0f, zeros[c] = 0.0f;
    test_fill_uniform(r, x, rows * cols, -3.0f, 5.0f);
    test_poison_f32(y, rows * cols);
    cpu_layernorm(x, NULL, null_affine ? NULL : ones, null_affine ? NULL : zeros, y, rows, cols,
                  1e-12f);
    double worst_mean = 0, worst_var = 0;
    for (int64_t i = 0; i < rows; i++) {
        double s = 0, sq = 0;
        for (int64_t c = 0; c < cols; c++)
            s += y[i * cols + c];
        double mean = s / (double)cols;
        for (int64_t c = 0; c < cols; c++)
            sq += (y[i * cols + c] - mean) * (y[i * cols + c] - mean);
        double var = sq / (double)cols;
        if (!(fabs(mean) <= worst_mean)) worst_mean = fabs(mean);
        if (!(fabs(var - 1.0) <= worst_var)) worst_var = fabs(var - 1.0);
    }
    CHECK(worst_mean < 1e-6, "cols=%lld affine=%s: |mean| up to %g", (long long)cols,
          null_affine ? "NULL" : "1/0", worst_mean);
    CHECK(worst_var < 1e-5, "cols=%lld affine=%s: |var - 1| up to %g", (long long)cols,
          null_affine ? "NULL" : "1/0", worst_var);
    free(x);
    free(y);
    free(ones);
    free(zeros);
}

static void test_aliasing(test_rng *r)
{
    const int64_t rows = 9, cols = 257;
    float *x = alloc_f(rows * cols), *res = alloc_f(rows * cols), *y = alloc_f(rows * cols);
    float *gamma = alloc_f(cols), *beta = alloc_f(cols), *work = alloc_f(rows * cols);
    test_fill_uniform(r, x, rows * cols, -2.0f, 2.0f);
    test_fill_uniform(r, res, rows * cols, -2.0f, 2.0f);
    test_fill_uniform(r, gamma, cols, 0.5f, 1.5f);
    test_fill_uniform(r, beta, cols, -0.5f, 0.5f);
    cpu_layernorm(x, res, gamma, beta, y, rows, cols, 1e-5f);

    memcpy(work, x, sizeof(float) * (size_t)(rows * cols));
    cpu_layernorm(work, res, gamma, beta, work, rows, cols, 1e-5f);
    CHECK(memcmp(work, y, sizeof(float) * (size_t)(rows * cols)) == 0,
          "y == x gives the same bits");

    memcpy(work, res, sizeof(float) * (size_t)(rows * cols));
    cpu_layernorm(x, work, gamma, beta, work, rows, cols, 1e-5f);
    CHECK(memcmp(work, y, sizeof(float) * (size_t)(rows * cols)) == 0,
          "y == residual gives the same bits");

    /* The residual is added before normalising: LN(x, res) == LN(x + res). */
    cpu_add(x, res, work, rows * cols);
    cpu_layernorm(work, NULL, gamma, beta, work, rows, cols, 1e-5f);
    CHECK(memcmp(work, y, sizeof(float) * (size_t)(rows * cols)) == 0, "LN(x, res) == LN(x + res)");
    free(x);
    free(res);
    free(y);
    free(gamma);
    free(beta);
    free(work);
}

static void test_edge_rows(void)
{
    /* A constant row has variance 0: the output is beta (no NaN from 0/0). */
    float x[4] = {3, 3, 3, 3}, gamma[4] = {2, 2, 2, 2}, beta[4] = {0.5f, -1, 0, 7}, y[4];
    cpu_layernorm(x, NULL, gamma, beta, y, 1, 4, 1e-5f);
    CHECK(y[0] == 0.5f && y[1] == -1.0f && y[2] == 0.0f && y[3] == 7.0f,
          "constant row gives beta: %g %g %g %g", y[0], y[1], y[2], y[3]);
    /* cols = 1 likewise. */
    float one = 42.0f, b1 = 0.25f, out = NAN;
    cpu_layernorm(&one, NULL, NULL, &b1, &out, 1, 1, 1e-5f);
    CHECK(out == 0.25f, "single column gives beta: %g", out);
    /* Two values a < b normalise to -1, +1 (eps negligible). */
    float two[2] = {1.0f, 5.0f}, y2[2];
    cpu_layernorm(two, NULL, NULL, NULL, y2, 1, 2, 0.0f);
    CHECK(y2[0] == -1.0f && y2[1] == 1.0f, "two values give -1, 1: %g %g", y2[0], y2[1]);
}

static void test_add(test_rng *r)
{
    float a[37], b[37], y[37];
    test_fill_uniform(r, a, 37, -5.0f, 5.0f);
    test_fill_uniform(r, b, 37, -5.0f, 5.0f);
    test_poison_f32(y, 37);
    cpu_add(a, b, y, 37);
    int bad = 0;
    for (int i = 0; i < 37; i++)
        bad += y[i] != a[i] + b[i];
    CHECK(bad == 0, "cpu_add: %d wrong", bad);
    cpu_add(a, b, a, 37);
    bad = 0;
    for (int i = 0; i < 37; i++)
        bad += a[i] != y[i];
    CHECK(bad == 0, "cpu_add in place: %d wrong", bad);
}

int main(void)
{
    test_rng r;
    test_rng_init(&r, test_seed() ^ 0x33);
    static const int64_t shapes[][2] = {{1, 1}, {1, 2}, {3, 7}, {16, 768}, {5, 1024}, {2, 4099}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (int res = 0; res < 2; res++)
            check_against_welford(&r, shapes[s][0], shapes[s][1], res, 0.0f);
    for (int i = 0; i < 10; i++)
        check_against_welford(&r, test_rng_int(&r, 1, 20), test_rng_int(&r, 1, 600), i & 1, 0.0f);
    /* Mean 1000 with spread 2: a naive E[x^2] - E[x]^2 in float loses every digit here. */
    check_against_welford(&r, 8, 768, 0, 1000.0f);
    check_against_welford(&r, 8, 768, 1, 1000.0f);
    check_invariants(&r, 12, 768, 0);
    check_invariants(&r, 12, 33, 1);
    check_invariants(&r, 4, 4096, 1);
    test_aliasing(&r);
    test_edge_rows();
    test_add(&r);
    return test_finish("test_cpu_norm");
}
