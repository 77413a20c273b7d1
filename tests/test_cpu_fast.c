/*
 * test_cpu_fast.c — the CPU backend's fast row ops (cpu_fast.h) against their
 * exact twins in cpu_ref.h (double accumulation) on fresh random inputs:
 * activations over a wide range, bias +
 * activation epilogues and the fast linear, LayerNorm with and without
 * residual (in place too, and with a large offset), embeddings and mean
 * pooling, and the decoder families' RMSNorm, GLU, RoPE (partial rotation,
 * llama3 scaling) and residual add; row counts and widths that leave tails, thread counts 1 to 5,
 * outputs poisoned first.
 */
#include "cpu/cpu_fast.h"
#include "cpu/cpu_ref.h"
#include "testlib.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static test_rng rng;

static float *alloc_f(int64_t n)
{
    return malloc(sizeof(float) * (size_t)(n > 0 ? n : 1));
}

/* Elements where |got - want| > tol * max(1, |want|); the first one is printed. */
static int64_t misses(const float *got, const float *want, int64_t n, double tol, const char *what)
{
    int64_t bad = 0;
    for (int64_t i = 0; i < n; i++) {
        double w = want[i], err = fabs((double)got[i] - w);
        if (!(err <= tol * (fabs(w) > 1.0 ? fabs(w) : 1.0))) {
            if (bad++ == 0)
                fprintf(stderr, "  %s: element %lld: %.9g vs %.9g\n", what, (long long)i,
                        (double)got[i], w);
        }
    }
    return bad;
}

static void test_activations(int threads)
{
    const stof_act acts[] = {ACT_NONE, ACT_GELU, ACT_GELU_TANH, ACT_RELU, ACT_SILU};
    const int64_t sizes[] = {1, 15, 16, 1000, 40000};
    for (int a = 0; a < 5; a++) {
        for (int s = 0; s < 5; s++) {
            int64_t n = sizes[s];
            float *x = alloc_f(n), *ref = alloc_f(n);
            test_fill_uniform(&rng, x, n, -12.0f, 12.0f);
            if (n > 4) x[0] = 0.0f, x[1] = -100.0f, x[2] = 100.0f, x[3] = 1e-30f;
            memcpy(ref, x, (size_t)n * sizeof(float));
            cpu_activation(ref, n, acts[a]);
            cpu_activation_fast(threads, x, n, acts[a]);
            CHECK(misses(x, ref, n, 1e-6, "activation") == 0, "activation %d, n %lld, %d threads",
                  (int)acts[a], (long long)n, threads);
            free(x), free(ref);
        }
    }
}

static void test_linear(int threads)
{
    const stof_act acts[] = {ACT_NONE, ACT_GELU, ACT_GELU_TANH, ACT_RELU};
    /* short batches split by columns, long ones by rows (in slices of 4 per thread) */
    const int64_t fixed[][3] = {{3, 700, 64}, {1, 1000, 17}, {5000, 40, 33}, {70, 130, 384}};
    for (int it = 0; it < 16; it++) {
        int64_t m = test_rng_int(&rng, 1, 300), n = test_rng_int(&rng, 1, 200);
        int64_t k = test_rng_int(&rng, 1, 150);
        if (it >= 12) m = fixed[it - 12][0], n = fixed[it - 12][1], k = fixed[it - 12][2];
        stof_act act = acts[it % 4];
        int with_bias = it % 3 != 0;
        float *x = alloc_f(m * k), *w = alloc_f(n * k), *b = alloc_f(n);
        float *y = alloc_f(m * n), *ref = alloc_f(m * n);
        test_fill_uniform(&rng, x, m * k, -1.0f, 1.0f);
        test_fill_uniform(&rng, w, n * k, -1.0f, 1.0f);
        test_fill_uniform(&rng, b, n, -1.0f, 1.0f);
        test_poison_f32(y, m * n);
        cpu_linear_fast(threads, x, w, with_bias ? b : NULL, y, m, n, k, act);
        cpu_linear_naive(x, w, with_bias ? b : NULL, ref, m, n, k, act);
        CHECK(misses(y, ref, m * n, 2e-5 * sqrt((double)k), "linear") == 0,
              "linear %lldx%lldx%lld act %d bias %d, %d threads", (long long)m, (long long)n,
              (long long)k, (int)act, with_bias, threads);
        free(x), free(w), free(b), free(y), free(ref);
    }
}

static void test_layernorm(int threads)
{
    const int64_t widths[] = {1, 7, 16, 33, 384, 768, 1000, 5000};
    for (int wi = 0; wi < 8; wi++) {
        for (int mode = 0; mode < 4; mode++) { /* residual: none, separate, y == x, y == res */
            int64_t rows = test_rng_int(&rng, 1, 70), cols = widths[wi], n = rows * cols;
            float offset = mode == 1 ? 1000.0f : 0.0f;
            float *x = alloc_f(n), *res = alloc_f(n), *g = alloc_f(cols), *b = alloc_f(cols);
            float *y = alloc_f(n), *ref = alloc_f(n);
            test_fill_uniform(&rng, x, n, offset - 2.0f, offset + 2.0f);
            test_fill_uniform(&rng, res, n, -1.0f, 1.0f);
            test_fill_uniform(&rng, g, cols, 0.5f, 1.5f);
            test_fill_uniform(&rng, b, cols, -0.5f, 0.5f);
            const float *residual = mode == 0 ? NULL : res;
            cpu_layernorm(x, residual, g, b, ref, rows, cols, 1e-12f);
            float *out = y;
            if (mode == 2)
                out = x;
            else if (mode == 3)
                out = res;
            else
                test_poison_f32(y, n);
            cpu_layernorm_fast(threads, x, residual, g, b, out, rows, cols, 1e-12f);
            CHECK(misses(out, ref, n, 2e-5, "layernorm") == 0,
                  "layernorm %lldx%lld mode %d, %d threads", (long long)rows, (long long)cols, mode,
                  threads);
            free(x), free(res), free(g), free(b), free(y), free(ref);
        }
    }
}

static void test_embeddings(int threads)
{
    const int64_t vocab = 50, npos = 40, ntypes = 2, H = 72;
    int64_t T = test_rng_int(&rng, 1, 200);
    float *word = alloc_f(vocab * H), *pos = alloc_f(npos * H), *type = alloc_f(ntypes * H);
    float *g = alloc_f(H), *b = alloc_f(H), *out = alloc_f(T * H), *ref = alloc_f(T * H);
    int32_t *ids = malloc((size_t)T * 4), *pids = malloc((size_t)T * 4),
            *tids = malloc((size_t)T * 4);
    test_fill_uniform(&rng, word, vocab * H, -1.0f, 1.0f);
    test_fill_uniform(&rng, pos, npos * H, -1.0f, 1.0f);
    test_fill_uniform(&rng, type, ntypes * H, -1.0f, 1.0f);
    test_fill_uniform(&rng, g, H, 0.5f, 1.5f);
    test_fill_uniform(&rng, b, H, -0.5f, 0.5f);
    for (int64_t t = 0; t < T; t++) {
        ids[t] = (int32_t)test_rng_int(&rng, 0, vocab - 1);
        pids[t] = (int32_t)test_rng_int(&rng, 0, npos - 1);
        tids[t] = (int32_t)test_rng_int(&rng, 0, ntypes - 1);
    }
    for (int with_types = 0; with_types < 2; with_types++) {
        const int32_t *types = with_types ? tids : NULL;
        test_poison_f32(out, T * H);
        cpu_embeddings_fast(threads, ids, pids, types, T, word, pos, type, g, b, H, 1e-12f, out);
        cpu_embeddings(ids, pids, types, T, word, pos, type, g, b, H, 1e-12f, ref);
        CHECK(misses(out, ref, T * H, 2e-5, "embeddings") == 0,
              "embeddings T %lld types %d, %d threads", (long long)T, with_types, threads);
    }
    free(word), free(pos), free(type), free(g), free(b), free(out), free(ref);
    free(ids), free(pids), free(tids);
}

static void test_mean_pool(int threads)
{
    int64_t B = test_rng_int(&rng, 1, 40), W = test_rng_int(&rng, 1, 800);
    int32_t *lens = malloc((size_t)B * 4), *cu = malloc((size_t)(B + 1) * 4);
    for (int64_t b = 0; b < B; b++)
        lens[b] = (int32_t)test_rng_int(&rng, 0, 60);
    int64_t T = cpu_cu_seqlens(lens, B, cu);
    float *x = alloc_f(T * W), *out = alloc_f(B * W), *ref = alloc_f(B * W);
    test_fill_uniform(&rng, x, T * W, -3.0f, 3.0f);
    test_poison_f32(out, B * W);
    cpu_mean_pool_fast(threads, x, cu, B, W, out);
    cpu_mean_pool(x, cu, B, W, ref);
    CHECK(misses(out, ref, B * W, 1e-5, "mean pool") == 0, "mean pool B %lld W %lld, %d threads",
          (long long)B, (long long)W, threads);
    free(lens), free(cu), free(x), free(out), free(ref);
}

/* RMSNorm with and without residual and weight, out of place and in place. */
static void test_rmsnorm(int threads)
{
    const int64_t widths[] = {1, 7, 16, 33, 1000, 2051};
    for (int wi = 0; wi < 6; wi++) {
        int64_t rows = test_rng_int(&rng, 1, 70), cols = widths[wi], n = rows * cols;
        float *x = alloc_f(n), *res = alloc_f(n), *w = alloc_f(cols), *out = alloc_f(n),
              *ref = alloc_f(n);
        test_fill_uniform(&rng, x, n, -4.0f, 4.0f);
        test_fill_uniform(&rng, res, n, -2.0f, 2.0f);
        test_fill_uniform(&rng, w, cols, -2.0f, 2.0f);
        for (int variant = 0; variant < 4; variant++) {
            const float *r = variant & 1 ? res : NULL, *g = variant & 2 ? w : NULL;
            cpu_rmsnorm(x, r, g, ref, rows, cols, 1e-6f);
            test_poison_f32(out, n);
            cpu_rmsnorm_fast(threads, x, r, g, out, rows, cols, 1e-6f);
            CHECK(misses(out, ref, n, 2e-6, "rmsnorm") == 0,
                  "rmsnorm %lldx%lld residual %d weight %d, %d threads", (long long)rows,
                  (long long)cols, variant & 1, variant >> 1, threads);
            memcpy(out, x, (size_t)n * sizeof(float)); /* in place: y is x */
            cpu_rmsnorm_fast(threads, out, r, g, out, rows, cols, 1e-6f);
            CHECK(misses(out, ref, n, 2e-6, "rmsnorm in place") == 0,
                  "rmsnorm in place %lldx%lld variant %d, %d threads", (long long)rows,
                  (long long)cols, variant, threads);
        }
        free(x), free(res), free(w), free(out), free(ref);
    }
}

static void test_glu(int threads)
{
    const stof_act acts[] = {ACT_SILU, ACT_GELU, ACT_GELU_TANH, ACT_RELU};
    for (int a = 0; a < 4; a++) {
        int64_t rows = test_rng_int(&rng, 1, 60), inter = test_rng_int(&rng, 1, 700);
        float *x = alloc_f(rows * 2 * inter), *out = alloc_f(rows * inter),
              *ref = alloc_f(rows * inter);
        test_fill_uniform(&rng, x, rows * 2 * inter, -8.0f, 8.0f);
        test_poison_f32(out, rows * inter);
        cpu_glu_fast(threads, x, out, rows, inter, acts[a]);
        cpu_glu(x, ref, rows, inter, acts[a]);
        CHECK(misses(out, ref, rows * inter, 1e-5, "glu") == 0, "glu act %d %lldx%lld, %d threads",
              (int)acts[a], (long long)rows, (long long)inter, threads);
        free(x), free(out), free(ref);
    }
}

/* RoPE over q and k heads side by side in rows wider than them (a fused QKV
 * row), partial rotation included; the untouched columns must stay as they were. */
static void test_rope(int threads)
{
    for (int rep = 0; rep < 4; rep++) {
        int64_t T = test_rng_int(&rng, 1, 90);
        int heads = (int)test_rng_int(&rng, 1, 9), D = 2 * (int)test_rng_int(&rng, 1, 70);
        int rot = rep == 0 ? D : 2 * (int)test_rng_int(&rng, 1, D / 2);
        int64_t stride = (int64_t)heads * D + test_rng_int(&rng, 0, 40), n = T * stride;
        float *x = alloc_f(n), *ref = alloc_f(n), inv[512];
        int32_t *pos = malloc((size_t)T * sizeof(int32_t));
        for (int64_t t = 0; t < T; t++)
            pos[t] = (int32_t)test_rng_int(&rng, 0, 8191);
        cpu_rope_freqs(rep == 3 ? 500000.0f : 10000.0f, rot, rep == 3 ? 2 : 0, 8.0f, 1.0f, 4.0f,
                       8192, inv);
        test_fill_uniform(&rng, x, n, -3.0f, 3.0f);
        memcpy(ref, x, (size_t)n * sizeof(float));
        cpu_rope(ref, T, heads, D, stride, pos, inv, rot);
        cpu_rope_fast(threads, x, T, heads, D, stride, pos, inv, rot);
        CHECK(misses(x, ref, n, 2e-6, "rope") == 0, "rope T %lld heads %d D %d rot %d, %d threads",
              (long long)T, heads, D, rot, threads);
        free(x), free(ref), free(pos);
    }
}

static void test_add(int threads)
{
    const int64_t sizes[] = {1, 17, 16384, 50001};
    for (int i = 0; i < 4; i++) {
        int64_t n = sizes[i];
        float *a = alloc_f(n), *b = alloc_f(n), *out = alloc_f(n);
        test_fill_uniform(&rng, a, n, -3.0f, 3.0f);
        test_fill_uniform(&rng, b, n, -3.0f, 3.0f);
        test_poison_f32(out, n);
        cpu_add_fast(threads, a, b, out, n);
        int64_t bad = 0;
        for (int64_t k = 0; k < n; k++)
            bad += out[k] != a[k] + b[k];
        CHECK(bad == 0, "add n %lld: %lld elements differ, %d threads", (long long)n,
              (long long)bad, threads);
        cpu_add_fast(threads, a, b, a, n); /* in place */
        for (int64_t k = 0; k < n; k++)
            bad += a[k] != out[k];
        CHECK(bad == 0, "add in place n %lld, %d threads", (long long)n, threads);
        free(a), free(b), free(out);
    }
}

int main(void)
{
    test_rng_init(&rng, test_seed());
    for (int threads = 1; threads <= 5; threads++) {
        test_activations(threads);
        test_linear(threads);
        test_layernorm(threads);
        test_embeddings(threads);
        test_mean_pool(threads);
        test_rmsnorm(threads);
        test_glu(threads);
        test_rope(threads);
        test_add(threads);
    }
    return test_finish("test_cpu_fast");
}
