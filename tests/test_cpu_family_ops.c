/*
 * test_cpu_family_ops.c — the CPU ops of the decoder families (rmsnorm.c,
 * rope.c, glu.c) against formulas written independently here in double, on
 * random inputs of many shapes with outputs poisoned first: residual and
 * aliasing forms of RMSNorm, partial rotary dims and arbitrary positions for
 * RoPE (the dims past rot_dim untouched), the default and linear frequency
 * rules (llama3 is checked against Hugging Face in test_model_family), and a
 * GLU of each activation, in place too.
 */
#include "cpu/cpu_ref.h"
#include "testlib.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static float *alloc_f(int64_t n)
{
    float *p = malloc((size_t)(n > 0 ? n : 1) * sizeof(float));
    if (!p) exit(1);
    return p;
}

static double max_rel(const float *out, const double *ref, int64_t n)
{
    double err = 0.0, mag = 0.0;
    for (int64_t i = 0; i < n; i++) {
        double d = fabs(out[i] - ref[i]);
        if (!(d <= err)) err = isnan(d) ? INFINITY : d;
        if (fabs(ref[i]) > mag) mag = fabs(ref[i]);
    }
    return mag > 0 ? err / mag : err;
}

static void check_rmsnorm(test_rng *r, int64_t rows, int64_t cols, bool residual, bool weight,
                          bool alias)
{
    int64_t n = rows * cols;
    float *x = alloc_f(n), *res = alloc_f(n), *w = alloc_f(cols), *y = alloc_f(n);
    double *ref = malloc((size_t)n * sizeof(double));
    test_fill_uniform(r, x, n, -3.0f, 3.0f);
    test_fill_uniform(r, res, n, -1.0f, 1.0f);
    test_fill_uniform(r, w, cols, 0.5f, 1.5f);
    float eps = 1e-6f;
    for (int64_t i = 0; i < rows; i++) {
        double ss = 0.0;
        for (int64_t c = 0; c < cols; c++) {
            double v = (double)(x[i * cols + c] + (residual ? res[i * cols + c] : 0.0f));
            ss += v * v;
        }
        double scale = 1.0 / sqrt(ss / (double)cols + eps);
        for (int64_t c = 0; c < cols; c++) {
            double v = (double)(x[i * cols + c] + (residual ? res[i * cols + c] : 0.0f));
            ref[i * cols + c] = v * scale * (weight ? w[c] : 1.0);
        }
    }
    float *out = alias ? x : y;
    if (!alias) test_poison_f32(y, n);
    cpu_rmsnorm(x, residual ? res : NULL, weight ? w : NULL, out, rows, cols, eps);
    double e = max_rel(out, ref, n);
    CHECK(e <= 1e-6, "rmsnorm [%lld, %lld] residual %d weight %d alias %d: rel err %.3g",
          (long long)rows, (long long)cols, residual, weight, alias, e);
    free(x), free(res), free(w), free(y), free(ref);
}

static void check_rope(test_rng *r, int64_t tokens, int heads, int head_dim, int rot_dim)
{
    int64_t stride = (int64_t)heads * head_dim + 8; /* rows wider than the heads */
    int64_t n = tokens * stride;
    float *x = alloc_f(n), *orig = alloc_f(n), inv[128];
    int32_t *pos = malloc((size_t)tokens * sizeof(int32_t));
    test_fill_uniform(r, x, n, -2.0f, 2.0f);
    memcpy(orig, x, (size_t)n * sizeof(float));
    for (int64_t t = 0; t < tokens; t++)
        pos[t] = (int32_t)test_rng_int(r, 0, 5000);
    float theta = test_rng_float(r, 100.0f, 1e6f);
    cpu_rope_freqs(theta, rot_dim, 0, 1.0f, 0, 0, 0, inv);
    bool freqs_ok = true;
    for (int i = 0; i < rot_dim / 2; i++)
        freqs_ok &= fabs(inv[i] - pow(theta, -2.0 * i / rot_dim)) <= 1e-6 * inv[i];
    CHECK(freqs_ok, "rope_freqs theta %g rot %d", (double)theta, rot_dim);
    cpu_rope(x, tokens, heads, head_dim, stride, pos, inv, rot_dim);
    double *ref = malloc((size_t)n * sizeof(double));
    for (int64_t i = 0; i < n; i++)
        ref[i] = orig[i];
    int half = rot_dim / 2;
    for (int64_t t = 0; t < tokens; t++)
        for (int h = 0; h < heads; h++) {
            int64_t base = t * stride + (int64_t)h * head_dim;
            for (int i = 0; i < half; i++) {
                /* (a + ib) e^{i angle}, the angle formed in float as the op does. */
                double ang = (double)((float)pos[t] * inv[i]);
                double a = orig[base + i], b = orig[base + i + half];
                ref[base + i] = a * cos(ang) - b * sin(ang);
                ref[base + i + half] = b * cos(ang) + a * sin(ang);
            }
        }
    double e = max_rel(x, ref, n);
    bool untouched = true;
    for (int64_t t = 0; t < tokens; t++) {
        for (int64_t c = (int64_t)heads * head_dim; c < stride; c++)
            untouched &= x[t * stride + c] == orig[t * stride + c];
        for (int h = 0; h < heads; h++)
            for (int d = rot_dim; d < head_dim; d++) {
                int64_t at = t * stride + (int64_t)h * head_dim + d;
                untouched &= x[at] == orig[at];
            }
    }
    CHECK(e <= 1e-6 && untouched, "rope %lld x %d heads dim %d rot %d: rel err %.3g, rest %s",
          (long long)tokens, heads, head_dim, rot_dim, e, untouched ? "kept" : "changed");
    free(x), free(orig), free(pos), free(ref);
}

static void check_linear_freqs(void)
{
    float plain[8], linear[8];
    cpu_rope_freqs(10000.0f, 16, 0, 1.0f, 0, 0, 0, plain);
    cpu_rope_freqs(10000.0f, 16, 1, 4.0f, 0, 0, 0, linear);
    bool ok = true;
    for (int i = 0; i < 8; i++)
        ok &= linear[i] == plain[i] / 4.0f;
    CHECK(ok, "linear rope scaling divides every frequency by its factor");
}

static double act_ref(double v, stof_act act)
{
    switch (act) {
    case ACT_NONE: return v;
    case ACT_GELU: return 0.5 * v * (1.0 + erf(v / sqrt(2.0)));
    case ACT_GELU_TANH: return 0.5 * v * (1.0 + tanh(0.7978845608028654 * (v + 0.044715 * v * v * v)));
    case ACT_RELU: return v > 0 ? v : 0;
    case ACT_SILU: return v / (1.0 + exp(-v));
    }
    return NAN;
}

static void check_glu(test_rng *r, int64_t rows, int64_t inter, stof_act act, bool alias)
{
    int64_t n = rows * 2 * inter;
    float *x = alloc_f(n), *y = alloc_f(rows * inter);
    double *ref = malloc((size_t)(rows * inter) * sizeof(double));
    test_fill_uniform(r, x, n, -4.0f, 4.0f);
    for (int64_t i = 0; i < rows; i++)
        for (int64_t j = 0; j < inter; j++)
            ref[i * inter + j] = (double)(float)act_ref(x[i * 2 * inter + j], act) *
                                 x[i * 2 * inter + inter + j];
    float *out = alias ? x : y;
    if (!alias) test_poison_f32(y, rows * inter);
    cpu_glu(x, out, rows, inter, act);
    double e = max_rel(out, ref, rows * inter);
    CHECK(e <= 1e-6, "glu [%lld, 2 x %lld] act %d alias %d: rel err %.3g", (long long)rows,
          (long long)inter, (int)act, alias, e);
    free(x), free(y), free(ref);
}

int main(void)
{
    test_rng r;
    test_rng_init(&r, 0x5eed);
    for (int s = 0; s < 24; s++) {
        int64_t rows = test_rng_int(&r, 1, 40), cols = test_rng_int(&r, 1, 300);
        check_rmsnorm(&r, rows, cols, s % 2, s % 3 != 0, s % 4 == 1);
        int head_dim = 2 * (int)test_rng_int(&r, 1, 64);
        int rot_dim = s % 3 == 0 ? 2 * (int)test_rng_int(&r, 1, head_dim / 2) : head_dim;
        check_rope(&r, test_rng_int(&r, 1, 20), (int)test_rng_int(&r, 1, 6), head_dim, rot_dim);
        check_glu(&r, test_rng_int(&r, 1, 30), test_rng_int(&r, 1, 200), (stof_act)(s % 5),
                  s % 3 == 2);
    }
    check_linear_freqs();
    return test_finish("test_cpu_family_ops");
}
