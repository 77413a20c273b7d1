/*
 * test_cpu_fast.c — the CPU backend's fast row ops (cpu_fast.h) against their
 * exact twins in cpu_ref.h (double accumulation) on fresh random inputs:
 * activations over a wide range, bias +
 * activation epilogues and the fast linear, LayerNorm with and without
 * residual (in place too, and with a large offset), embeddings and mean
 * pooling; row counts and widths that leave tails, thread counts 1 to 5,
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

int main(void)
{
    test_rng_init(&rng, test_seed());
    for (int threads = 1; threads <= 5; threads++) {
        test_activations(threads);
        test_linear(threads);
        test_layernorm(threads);
        test_embeddings(threads);
        test_mean_pool(threads);
    }
    return test_finish("test_cpu_fast");
}
