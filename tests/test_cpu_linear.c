/*
 * test_cpu_linear.c — the activations against known values and identities,
 * cpu_linear (OpenBLAS) against cpu_linear_naive on many shapes and every
 * activation, and a rough throughput print for the CPU backend (not asserted:
 * timings are for benchmarks).
 */
#include "cpu/cpu_ref.h"
#include "testlib.h"

#include <math.h>
#include <stdlib.h>
#include <time.h>

static const char *act_name(stof_act act)
{
    switch (act) {
    case ACT_NONE: return "none";
    case ACT_GELU: return "gelu";
    case ACT_GELU_TANH: return "gelu_tanh";
    case ACT_RELU: return "relu";
    case ACT_SILU: return "silu";
    }
    return "?";
}

static void test_activation_values(void)
{
    /* Reference values of 0.5 x (1 + erf(x / sqrt 2)) and the tanh form, computed in double. */
    CHECK(fabs(cpu_gelu(1.0f) - 0.8413447460685429) < 1e-7, "gelu(1) = %.9g", cpu_gelu(1.0f));
    CHECK(fabs(cpu_gelu(-1.0f) + 0.15865525393145707) < 1e-7, "gelu(-1) = %.9g", cpu_gelu(-1.0f));
    float silu[3] = {1.0f, -2.0f, 0.0f};
    cpu_activation(silu, 3, ACT_SILU); /* x / (1 + e^-x), computed in double */
    CHECK(fabs(silu[0] - 0.7310585786300049) < 1e-7 && fabs(silu[1] + 0.2384058440442351) < 1e-7 &&
              silu[2] == 0.0f,
          "silu(1, -2, 0) = %.9g %.9g %.9g", silu[0], silu[1], silu[2]);
    CHECK(fabs(cpu_gelu(0.5f) - 0.34573123063700656) < 1e-7, "gelu(0.5) = %.9g", cpu_gelu(0.5f));
    CHECK(fabs(cpu_gelu_tanh(1.0f) - 0.8411919906082768) < 1e-7, "gelu_tanh(1) = %.9g",
          cpu_gelu_tanh(1.0f));
    CHECK(fabs(cpu_gelu_tanh(-0.5f) + 0.15428599017485606) < 1e-7, "gelu_tanh(-0.5) = %.9g",
          cpu_gelu_tanh(-0.5f));
    CHECK(cpu_gelu(0.0f) == 0.0f && cpu_gelu_tanh(0.0f) == 0.0f, "gelu(0) = 0");
    CHECK(cpu_gelu(20.0f) == 20.0f && cpu_gelu(-20.0f) == 0.0f, "gelu saturates");
    CHECK(cpu_gelu_tanh(20.0f) == 20.0f && cpu_gelu_tanh(-20.0f) == 0.0f, "gelu_tanh saturates");

    /* gelu(x) - gelu(-x) = x holds for both forms because erf and tanh are odd. */
    test_rng r;
    test_rng_init(&r, test_seed() ^ 0x11);
    int bad = 0;
    double worst_gap = 0;
    for (int i = 0; i < 10000; i++) {
        float x = test_rng_float(&r, -6.0f, 6.0f);
        double e1 = fabs((double)cpu_gelu(x) - cpu_gelu(-x) - x);
        double e2 = fabs((double)cpu_gelu_tanh(x) - cpu_gelu_tanh(-x) - x);
        if (e1 > 1e-6 || e2 > 1e-6) bad++;
        /* The two forms differ by at most about 5e-4 on this range. */
        double gap = fabs((double)cpu_gelu(x) - cpu_gelu_tanh(x));
        if (gap > worst_gap) worst_gap = gap;
    }
    CHECK(bad == 0, "%d values break gelu(x) - gelu(-x) = x", bad);
    CHECK(worst_gap > 1e-5 && worst_gap < 1e-3, "gelu vs gelu_tanh gap %g", worst_gap);

    float v[6] = {-2.0f, -0.0f, 0.0f, 3.5f, NAN, 1e-30f};
    cpu_activation(v, 6, ACT_RELU);
    CHECK(v[0] == 0.0f && v[1] == 0.0f && v[2] == 0.0f && v[3] == 3.5f && v[5] == 1e-30f,
          "relu values %g %g %g %g %g", v[0], v[1], v[2], v[3], v[5]);
    CHECK(isnan(v[4]), "relu keeps NaN");

    float a[4] = {-1.0f, 0.25f, 2.0f, -3.0f}, b[4];
    for (int i = 0; i < 4; i++)
        b[i] = a[i];
    cpu_activation(b, 4, ACT_NONE);
    int same = 1;
    for (int i = 0; i < 4; i++)
        same &= a[i] == b[i];
    CHECK(same, "ACT_NONE leaves x unchanged");
    cpu_activation(b, 4, ACT_GELU);
    same = 1;
    for (int i = 0; i < 4; i++)
        same &= b[i] == cpu_gelu(a[i]);
    CHECK(same, "cpu_activation(GELU) applies cpu_gelu");
    for (int i = 0; i < 4; i++)
        b[i] = a[i];
    cpu_activation(b, 4, ACT_GELU_TANH);
    same = 1;
    for (int i = 0; i < 4; i++)
        same &= b[i] == cpu_gelu_tanh(a[i]);
    CHECK(same, "cpu_activation(GELU_TANH) applies cpu_gelu_tanh");
}

/* ||y - ref|| over the norm of the same layer run on |x|, |W|, |b|: a single
 * output that cancels to near zero makes the plain relative error meaningless,
 * while float rounding stays a small fraction of these magnitudes. */
static double magnitude_rel_err(const float *y, const float *ref, const float *x, const float *w,
                                const float *bias, int64_t m, int64_t n, int64_t k)
{
    float *ax = malloc(sizeof(float) * (size_t)(m * k)),
          *aw = malloc(sizeof(float) * (size_t)(n * k));
    float *ab = malloc(sizeof(float) * (size_t)n), *mag = malloc(sizeof(float) * (size_t)(m * n));
    for (int64_t i = 0; i < m * k; i++)
        ax[i] = fabsf(x[i]);
    for (int64_t i = 0; i < n * k; i++)
        aw[i] = fabsf(w[i]);
    for (int64_t i = 0; i < n; i++)
        ab[i] = bias ? fabsf(bias[i]) : 0.0f;
    cpu_linear_naive(ax, aw, ab, mag, m, n, k, ACT_NONE);
    double num = 0, den = 0;
    for (int64_t i = 0; i < m * n; i++) {
        if (isnan(y[i]) || isnan(ref[i])) return INFINITY;
        num += ((double)y[i] - ref[i]) * ((double)y[i] - ref[i]);
        den += (double)mag[i] * mag[i];
    }
    free(ax);
    free(aw);
    free(ab);
    free(mag);
    return den > 0 ? sqrt(num / den) : (num == 0 ? 0 : INFINITY);
}

static void check_linear_shape(test_rng *r, int64_t m, int64_t n, int64_t k, stof_act act,
                               int with_bias)
{
    float *x = malloc(sizeof(float) * (size_t)(m * k));
    float *w = malloc(sizeof(float) * (size_t)(n * k));
    float *bias = malloc(sizeof(float) * (size_t)n);
    float *y = malloc(sizeof(float) * (size_t)(m * n));
    float *ref = malloc(sizeof(float) * (size_t)(m * n));
    test_fill_uniform(r, x, m * k, -1.0f, 1.0f);
    test_fill_uniform(r, w, n * k, -1.0f, 1.0f);
    test_fill_uniform(r, bias, n, -0.5f, 0.5f);
    test_poison_f32(y, m * n);
    test_poison_f32(ref, m * n);
    const float *b = with_bias ? bias : NULL;
    cpu_linear(x, w, b, y, m, n, k, act);
    cpu_linear_naive(x, w, b, ref, m, n, k, act);
    double err = test_rel_err(y, ref, m * n);
    double mag_err = magnitude_rel_err(y, ref, x, w, b, m, n, k);
    /* With few outputs the plain error is at the mercy of one cancelling sum. */
    CHECK((m * n < 64 || err < 1e-5) && mag_err < 1e-5,
          "linear m=%lld n=%lld k=%lld act=%s bias=%d: rel err %g, vs magnitudes %g", (long long)m,
          (long long)n, (long long)k, act_name(act), with_bias, err, mag_err);
    free(x);
    free(w);
    free(bias);
    free(y);
    free(ref);
}

/* The naive loop is itself checked on a case small enough to write out. */
static void test_naive_by_hand(void)
{
    const float x[2 * 3] = {1, 2, 3, -1, 0, 2};
    const float w[2 * 3] = {0.5f, -1, 2, 1, 1, 1};
    const float bias[2] = {0.25f, -10};
    float y[4];
    cpu_linear_naive(x, w, bias, y, 2, 2, 3, ACT_NONE);
    /* row 0: 0.5 - 2 + 6 + 0.25 = 4.75, 6 - 10 = -4; row 1: -0.5 + 4 + 0.25 = 3.75, 1 - 10 = -9 */
    CHECK(y[0] == 4.75f && y[1] == -4.0f && y[2] == 3.75f && y[3] == -9.0f,
          "naive linear by hand: %g %g %g %g", y[0], y[1], y[2], y[3]);
    cpu_linear_naive(x, w, bias, y, 2, 2, 3, ACT_RELU);
    CHECK(y[0] == 4.75f && y[1] == 0.0f && y[2] == 3.75f && y[3] == 0.0f, "naive linear relu");
    cpu_linear(x, w, bias, y, 2, 2, 3, ACT_NONE);
    CHECK(y[0] == 4.75f && y[1] == -4.0f && y[2] == 3.75f && y[3] == -9.0f,
          "blas linear by hand: %g %g %g %g", y[0], y[1], y[2], y[3]);
}

static void test_linear_shapes(void)
{
    test_rng r;
    test_rng_init(&r, test_seed() ^ 0x22);
    static const int64_t fixed[][3] = {{1, 1, 1},     {1, 768, 768},  {7, 13, 1},
                                       {1, 1, 513},   {3, 1, 5},      {33, 65, 17},
                                       {128, 96, 64}, {5, 3072, 768}, {64, 768, 3072}};
    const int nfixed = (int)(sizeof fixed / sizeof fixed[0]);
    for (int s = 0; s < nfixed + 20; s++) {
        int64_t m, n, k;
        if (s < nfixed) {
            m = fixed[s][0], n = fixed[s][1], k = fixed[s][2];
        } else {
            m = test_rng_int(&r, 1, 70);
            n = test_rng_int(&r, 1, 200);
            k = test_rng_int(&r, 1, 300);
        }
        for (int a = ACT_NONE; a <= ACT_SILU; a++)
            check_linear_shape(&r, m, n, k, (stof_act)a, (s + a) % 3 != 0);
    }
}

static double now_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void print_linear_throughput(void)
{
    const int64_t m = 128, n = 768, k = 768;
    test_rng r;
    test_rng_init(&r, 7);
    float *x = malloc(sizeof(float) * (size_t)(m * k));
    float *w = malloc(sizeof(float) * (size_t)(n * k));
    float *bias = malloc(sizeof(float) * (size_t)n);
    float *y = malloc(sizeof(float) * (size_t)(m * n));
    test_fill_uniform(&r, x, m * k, -1.0f, 1.0f);
    test_fill_uniform(&r, w, n * k, -1.0f, 1.0f);
    test_fill_uniform(&r, bias, n, -1.0f, 1.0f);
    cpu_linear(x, w, bias, y, m, n, k, ACT_GELU); /* warm-up */
    const int reps = 20;
    double t0 = now_seconds();
    for (int i = 0; i < reps; i++)
        cpu_linear(x, w, bias, y, m, n, k, ACT_NONE);
    double t_blas = (now_seconds() - t0) / reps;
    t0 = now_seconds();
    cpu_linear_naive(x, w, bias, y, m, n, k, ACT_NONE);
    double t_naive = now_seconds() - t0;
    double flop = 2.0 * (double)(m * n * k);
    printf("cpu_linear m=%lld n=%lld k=%lld: %.3f ms, %.1f GFLOP/s (naive %.1f GFLOP/s)\n",
           (long long)m, (long long)n, (long long)k, 1e3 * t_blas, flop / t_blas * 1e-9,
           flop / t_naive * 1e-9);
    free(x);
    free(w);
    free(bias);
    free(y);
}

int main(void)
{
    test_activation_values();
    test_naive_by_hand();
    test_linear_shapes();
    print_linear_throughput();
    return test_finish("test_cpu_linear");
}
