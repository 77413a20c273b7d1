/*
 * rows_fast.c — the CPU backend's row ops (cpu_fast.h): activations with
 * bias, LayerNorm with residual, embeddings and mean pooling, in fp32 with
 * loops the compiler vectorises, split over rows on the pool.
 *
 * The one non-obvious choice: erf and exp are polynomials written here
 * without branches or calls (Abramowitz & Stegun 7.1.26 for erf, Cephes'
 * exp2f kernel for exp), so that a whole row of GELU vectorises; the hot
 * loops are cloned for AVX-512, AVX2 + FMA and the baseline and picked at
 * load time, so the build needs no -march flag.
 */
#include "cpu/cpu_fast.h"
#include "cpu/cpu_ref.h"
#include "cpu/pool.h"
#include "cpu/rows_fast.h"

#include <cblas.h>
#include <limits.h>
#include <math.h>
#include <stdbool.h>
#include <string.h>

#pragma GCC optimize("fp-contract=fast")

/* ---------------------------------------------------------------- elementwise math */

/* e^x for x in [-87, 88] (clamped), relative error ~2e-7. */
static inline __attribute__((always_inline)) float exp_poly(float x)
{
    x = x < -87.0f ? -87.0f : (x > 88.0f ? 88.0f : x);
    float t = x * 1.44269504088896341f;
    float n = (t + 12582912.0f) - 12582912.0f; /* round to nearest */
    float f = t - n;
    float p = 1.535336188319500e-4f;
    p = p * f + 1.339887440266574e-3f;
    p = p * f + 9.618437357674640e-3f;
    p = p * f + 5.550332471162809e-2f;
    p = p * f + 2.402264791363012e-1f;
    p = p * f + 6.931472028550421e-1f;
    p = p * f + 1.0f;
    int32_t bits = ((int32_t)n + 127) << 23;
    float scale;
    memcpy(&scale, &bits, sizeof scale);
    return p * scale;
}

/* erf(x), absolute error below 1.5e-7 (A&S 7.1.26). */
static inline __attribute__((always_inline)) float erf_poly(float x)
{
    float ax = fabsf(x);
    float t = 1.0f / (1.0f + 0.3275911f * ax);
    float y = 1.061405429f;
    y = y * t - 1.453152027f;
    y = y * t + 1.421413741f;
    y = y * t - 0.284496736f;
    y = y * t + 0.254829592f;
    y = 1.0f - y * t * exp_poly(-ax * ax);
    return copysignf(y, x);
}

static inline __attribute__((always_inline)) float gelu_fast(float x)
{
    return 0.5f * x * (1.0f + erf_poly(x * 0.70710678118654752f));
}

/* tanh(u) = 1 - 2 / (e^(2u) + 1), exact at both ends after clamping. */
static inline __attribute__((always_inline)) float gelu_tanh_fast(float x)
{
    float u = 0.79788456080286535588f * (x + 0.044715f * x * x * x);
    float th = 1.0f - 2.0f / (exp_poly(2.0f * u) + 1.0f);
    return 0.5f * x * (1.0f + th);
}

static inline __attribute__((always_inline)) float silu_fast(float x)
{
    return x / (1.0f + exp_poly(-x));
}

ROWS_CLONES void cpu_bias_act_row(float *y, const float *bias, int64_t n, stof_act act)
{
    if (bias)
        for (int64_t i = 0; i < n; i++)
            y[i] += bias[i];
    switch (act) {
    case ACT_NONE: return;
    case ACT_GELU:
        for (int64_t i = 0; i < n; i++)
            y[i] = gelu_fast(y[i]);
        return;
    case ACT_GELU_TANH:
        for (int64_t i = 0; i < n; i++)
            y[i] = gelu_tanh_fast(y[i]);
        return;
    case ACT_RELU:
        for (int64_t i = 0; i < n; i++)
            y[i] = y[i] < 0.0f ? 0.0f : y[i];
        return;
    case ACT_SILU:
        for (int64_t i = 0; i < n; i++)
            y[i] = silu_fast(y[i]);
        return;
    }
}

/* ---------------------------------------------------------------- rows on the pool */

row_split cpu_rows_split(int threads, int64_t rows, int64_t cols)
{
    row_split s = {rows, rows};
    int64_t grain = cols > 0 ? (ROWS_GRAIN + cols - 1) / cols : rows;
    int n = cpu_threads_resolve(threads);
    int64_t per = (rows + 4 * (int64_t)n - 1) / (4 * (int64_t)n); /* ~4 items a thread */
    s.per_item = per > grain ? per : grain;
    if (s.per_item < 1) s.per_item = 1;
    return s;
}

int64_t cpu_rows_split_items(const row_split *s)
{
    return (s->rows + s->per_item - 1) / s->per_item;
}

void cpu_rows_split_item(const row_split *s, int64_t item, int64_t *first, int64_t *count)
{
    *first = item * s->per_item;
    *count = s->rows - *first < s->per_item ? s->rows - *first : s->per_item;
}

typedef struct bias_act_job {
    row_split split;
    float *y;
    const float *bias;
    int64_t cols;
    stof_act act;
} bias_act_job;

static void bias_act_item(void *arg, int64_t item, int worker)
{
    const bias_act_job *j = arg;
    int64_t r0, n;
    cpu_rows_split_item(&j->split, item, &r0, &n);
    for (int64_t r = r0; r < r0 + n; r++)
        cpu_bias_act_row(j->y + r * j->cols, j->bias, j->cols, j->act);
}

void cpu_bias_act_fast(int threads, float *y, const float *bias, int64_t rows, int64_t cols,
                       stof_act act)
{
    if (rows <= 0 || cols <= 0 || (!bias && act == ACT_NONE)) return;
    bias_act_job j = {cpu_rows_split(threads, rows, cols), y, bias, cols, act};
    cpu_pool_for(threads, cpu_rows_split_items(&j.split), bias_act_item, &j);
}

void cpu_activation_fast(int threads, float *x, int64_t n, stof_act act)
{
    /* one "row" per ROWS_GRAIN elements, the tail as a shorter last call */
    int64_t full = n / ROWS_GRAIN;
    cpu_bias_act_fast(threads, x, NULL, full, ROWS_GRAIN, act);
    if (n > full * ROWS_GRAIN)
        cpu_bias_act_row(x + full * ROWS_GRAIN, NULL, n - full * ROWS_GRAIN, act);
}

/* One slice of a linear: rows [first, first + count) of y, or its columns
 * (rows of w) when the batch is too short to split; the epilogue runs on the
 * slice while it is still in cache. */
typedef struct linear_job {
    const float *x, *w, *bias;
    float *y;
    int64_t m, n, k, per_item;
    bool by_rows;
    stof_act act;
} linear_job;

static void linear_item(void *arg, int64_t item, int worker)
{
    const linear_job *j = arg;
    int64_t first = item * j->per_item, total = j->by_rows ? j->m : j->n;
    int64_t count = total - first < j->per_item ? total - first : j->per_item;
    if (j->by_rows) {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (blasint)count, (blasint)j->n,
                    (blasint)j->k, 1.0f, j->x + first * j->k, (blasint)j->k, j->w, (blasint)j->k,
                    0.0f, j->y + first * j->n, (blasint)j->n);
        for (int64_t r = first; r < first + count; r++)
            cpu_bias_act_row(j->y + r * j->n, j->bias, j->n, j->act);
    } else {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (blasint)j->m, (blasint)count,
                    (blasint)j->k, 1.0f, j->x, (blasint)j->k, j->w + first * j->k, (blasint)j->k,
                    0.0f, j->y + first, (blasint)j->n);
        for (int64_t r = 0; r < j->m; r++)
            cpu_bias_act_row(j->y + r * j->n + first, j->bias ? j->bias + first : NULL, count,
                             j->act);
    }
}

/* The sgemm runs in slices on the pool with OpenBLAS held to one thread, so
 * that no OpenBLAS worker spins (sched_yield) beside ours between calls. */
void cpu_linear_fast(int threads, const float *x, const float *w, const float *bias, float *y,
                     int64_t m, int64_t n, int64_t k, stof_act act)
{
    if (m <= 0 || n <= 0) return;
    if (k <= 0 || m > INT_MAX || n > INT_MAX || k > INT_MAX) {
        cpu_linear(x, w, NULL, y, m, n, k, ACT_NONE);
        cpu_bias_act_fast(threads, y, bias, m, n, act);
        return;
    }
    int t = cpu_threads_resolve(threads);
    linear_job j = {x, w, bias, y, m, n, k, 0, m >= 32 * (int64_t)t || n < 64 * (int64_t)t, act};
    int64_t total = j.by_rows ? m : n, items = total >= 1024 * (int64_t)t ? 4 * (int64_t)t : t;
    j.per_item = (total + items - 1) / items;
    if (!j.by_rows) j.per_item = (j.per_item + 15) / 16 * 16; /* whole vectors of columns */
    int previous = cpu_blas_threads_enter(1);
    cpu_pool_for(t, (total + j.per_item - 1) / j.per_item, linear_item, &j);
    cpu_blas_threads_restore(previous);
}

/* ---------------------------------------------------------------- LayerNorm */

/* Sum of x[0 .. n) and of (x - mean)^2, in 16 interleaved fp32 partial sums
 * so that the loops vectorise without reassociation flags. */
enum { LN_LANES = 16 };

static inline __attribute__((always_inline)) float lanes_total(const float *acc)
{
    float s = 0.0f;
    for (int k = 0; k < LN_LANES; k++)
        s += acc[k];
    return s;
}

static inline __attribute__((always_inline)) float row_sum(const float *x, int64_t n)
{
    float acc[LN_LANES] = {0};
    int64_t c = 0;
    for (; c + LN_LANES <= n; c += LN_LANES)
        for (int k = 0; k < LN_LANES; k++)
            acc[k] += x[c + k];
    for (; c < n; c++)
        acc[0] += x[c];
    return lanes_total(acc);
}

/* Sums of d = x - mean and of d^2: the first corrects a mean rounded in fp32
 * (the corrected two-pass algorithm), so an offset far above the spread
 * costs no digits. */
static inline __attribute__((always_inline)) void
row_centred_sums(const float *x, float mean, int64_t n, float *sum_d, float *sum_dd)
{
    float acc[LN_LANES] = {0}, acc2[LN_LANES] = {0};
    int64_t c = 0;
    for (; c + LN_LANES <= n; c += LN_LANES)
        for (int k = 0; k < LN_LANES; k++) {
            float d = x[c + k] - mean;
            acc[k] += d;
            acc2[k] += d * d;
        }
    for (; c < n; c++) {
        float d = x[c] - mean;
        acc[0] += d;
        acc2[0] += d * d;
    }
    *sum_d = lanes_total(acc);
    *sum_dd = lanes_total(acc2);
}

/* One row: statistics over x (+ residual) in fp32, two passes; y may alias. */
ROWS_CLONES static void layernorm_row(const float *x, const float *residual, const float *gamma,
                                      const float *beta, float *y, int64_t cols, float eps,
                                      float *tmp)
{
    const float *in = x;
    if (residual) {
        for (int64_t c = 0; c < cols; c++)
            tmp[c] = x[c] + residual[c];
        in = tmp;
    }
    float mean = row_sum(in, cols) / (float)cols, sd, sdd;
    row_centred_sums(in, mean, cols, &sd, &sdd);
    float var = (sdd - sd * sd / (float)cols) / (float)cols;
    float shift = sd / (float)cols; /* the mean is mean + shift; x - mean is exact nearby */
    float rstd = 1.0f / sqrtf((var > 0.0f ? var : 0.0f) + eps);
    for (int64_t c = 0; c < cols; c++) {
        float v = ((in[c] - mean) - shift) * rstd;
        y[c] = v * (gamma ? gamma[c] : 1.0f) + (beta ? beta[c] : 0.0f);
    }
}

enum { LN_MAX_STACK = 4096 }; /* widest row normalised through a stack buffer */

typedef struct layernorm_job {
    row_split split;
    const float *x, *residual, *gamma, *beta;
    float *y;
    int64_t cols;
    float eps;
} layernorm_job;

static void layernorm_rows(const layernorm_job *j, int64_t r0, int64_t n)
{
    float tmp[LN_MAX_STACK];
    for (int64_t r = r0; r < r0 + n; r++) {
        if (j->cols > LN_MAX_STACK) { /* rare: the exact reference needs no buffer */
            cpu_layernorm(j->x + r * j->cols, j->residual ? j->residual + r * j->cols : NULL,
                          j->gamma, j->beta, j->y + r * j->cols, 1, j->cols, j->eps);
            continue;
        }
        layernorm_row(j->x + r * j->cols, j->residual ? j->residual + r * j->cols : NULL, j->gamma,
                      j->beta, j->y + r * j->cols, j->cols, j->eps, tmp);
    }
}

static void layernorm_item(void *arg, int64_t item, int worker)
{
    const layernorm_job *j = arg;
    int64_t r0, n;
    cpu_rows_split_item(&j->split, item, &r0, &n);
    layernorm_rows(j, r0, n);
}

void cpu_layernorm_fast(int threads, const float *x, const float *residual, const float *gamma,
                        const float *beta, float *y, int64_t rows, int64_t cols, float eps)
{
    if (rows <= 0 || cols <= 0) return;
    layernorm_job j = {cpu_rows_split(threads, rows, cols), x, residual, gamma, beta, y, cols, eps};
    cpu_pool_for(threads, cpu_rows_split_items(&j.split), layernorm_item, &j);
}

/* ---------------------------------------------------------------- embeddings */

typedef struct embed_job {
    row_split split;
    const int32_t *ids, *positions, *types;
    const float *word, *pos, *type;
    layernorm_job ln;
} embed_job;

ROWS_CLONES static void embed_sum(const float *w, const float *ty, const float *p, float *row,
                                  int64_t n)
{
    for (int64_t c = 0; c < n; c++)
        row[c] = (w[c] + ty[c]) + p[c];
}

static void embed_item(void *arg, int64_t item, int worker)
{
    const embed_job *j = arg;
    int64_t H = j->ln.cols, t0, n;
    cpu_rows_split_item(&j->split, item, &t0, &n);
    for (int64_t t = t0; t < t0 + n; t++)
        embed_sum(j->word + (int64_t)j->ids[t] * H,
                  j->type + (int64_t)(j->types ? j->types[t] : 0) * H,
                  j->pos + (int64_t)j->positions[t] * H, j->ln.y + t * H, H);
    layernorm_rows(&j->ln, t0, n);
}

void cpu_embeddings_fast(int threads, const int32_t *ids, const int32_t *positions,
                         const int32_t *types, int64_t T, const float *word, const float *pos,
                         const float *type, const float *gamma, const float *beta, int64_t hidden,
                         float eps, float *out)
{
    if (T <= 0 || hidden <= 0) return;
    embed_job j = {cpu_rows_split(threads, T, hidden),
                   ids,
                   positions,
                   types,
                   word,
                   pos,
                   type,
                   {{T, T}, out, NULL, gamma, beta, out, hidden, eps}};
    cpu_pool_for(threads, cpu_rows_split_items(&j.split), embed_item, &j);
}

/* ---------------------------------------------------------------- mean pooling */

typedef struct pool_job {
    const float *packed;
    const int32_t *cu;
    int64_t W;
    float *out;
} pool_job;

ROWS_CLONES static void add_row(float *acc, const float *row, int64_t n)
{
    for (int64_t c = 0; c < n; c++)
        acc[c] += row[c];
}

static void mean_pool_item(void *arg, int64_t b, int worker)
{
    const pool_job *j = arg;
    float *dst = j->out + b * j->W;
    int64_t first = j->cu[b], count = j->cu[b + 1] - j->cu[b];
    memset(dst, 0, (size_t)j->W * sizeof(float));
    for (int64_t t = first; t < first + count; t++)
        add_row(dst, j->packed + t * j->W, j->W);
    if (count > 0)
        for (int64_t c = 0; c < j->W; c++)
            dst[c] /= (float)count;
}

void cpu_mean_pool_fast(int threads, const float *packed, const int32_t *cu_seqlens, int64_t B,
                        int64_t W, float *out)
{
    pool_job j = {packed, cu_seqlens, W, out};
    cpu_pool_for(threads, B, mean_pool_item, &j);
}
