/*
 * decoder_fast.c — the CPU backend's row ops of the decoder and ModernBERT
 * families (cpu_fast.h): RMSNorm, the gated linear unit, rotary embeddings
 * and the residual add, in fp32 with loops the compiler vectorises, split
 * over rows on the pool. Their oracles are cpu_rmsnorm, cpu_glu, cpu_rope and
 * cpu_add (cpu_ref.h).
 *
 * RoPE takes cos and sin of each (token, frequency) once for every head of
 * the token, where the reference takes them per head; they are the
 * reference's own values (float angle, cos and sin in double, rounded once),
 * so only the rotation's roundings differ.
 */
#include "cpu/cpu_fast.h"
#include "cpu/cpu_ref.h"
#include "cpu/pool.h"
#include "cpu/rows_fast.h"

#include <math.h>
#include <string.h>

#pragma GCC optimize("fp-contract=fast")

/* ---------------------------------------------------------------- RMSNorm */

enum { RMS_LANES = 16 }; /* interleaved partial sums: vectorises without reassociation */

ROWS_CLONES static void rmsnorm_row(const float *x, const float *residual, const float *w, float *y,
                                    int64_t cols, float eps)
{
    float acc[RMS_LANES] = {0};
    int64_t c = 0;
    if (residual) {
        for (; c + RMS_LANES <= cols; c += RMS_LANES)
            for (int k = 0; k < RMS_LANES; k++) {
                float v = x[c + k] + residual[c + k];
                acc[k] += v * v;
            }
        for (; c < cols; c++) {
            float v = x[c] + residual[c];
            acc[0] += v * v;
        }
    } else {
        for (; c + RMS_LANES <= cols; c += RMS_LANES)
            for (int k = 0; k < RMS_LANES; k++)
                acc[k] += x[c + k] * x[c + k];
        for (; c < cols; c++)
            acc[0] += x[c] * x[c];
    }
    float sq = 0.0f;
    for (int k = 0; k < RMS_LANES; k++)
        sq += acc[k];
    float rstd = 1.0f / sqrtf(sq / (float)cols + eps);
    /* element c is read before y[c] is written: y may alias x or residual */
    for (c = 0; c < cols; c++) {
        float n = (residual ? x[c] + residual[c] : x[c]) * rstd;
        y[c] = w ? w[c] * n : n;
    }
}

typedef struct rmsnorm_job {
    row_split split;
    const float *x, *residual, *w;
    float *y;
    int64_t cols;
    float eps;
} rmsnorm_job;

static void rmsnorm_item(void *arg, int64_t item, int worker)
{
    const rmsnorm_job *j = arg;
    int64_t r0, n;
    cpu_rows_split_item(&j->split, item, &r0, &n);
    for (int64_t r = r0; r < r0 + n; r++)
        rmsnorm_row(j->x + r * j->cols, j->residual ? j->residual + r * j->cols : NULL, j->w,
                    j->y + r * j->cols, j->cols, j->eps);
}

void cpu_rmsnorm_fast(int threads, const float *x, const float *residual, const float *w, float *y,
                      int64_t rows, int64_t cols, float eps)
{
    if (rows <= 0 || cols <= 0) return;
    rmsnorm_job j = {cpu_rows_split(threads, rows, cols), x, residual, w, y, cols, eps};
    cpu_pool_for(threads, cpu_rows_split_items(&j.split), rmsnorm_item, &j);
}

/* ---------------------------------------------------------------- GLU */

ROWS_CLONES static void mul_row(float *y, const float *up, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        y[i] *= up[i];
}

typedef struct glu_job {
    row_split split;
    const float *x;
    float *y;
    int64_t inter;
    stof_act act;
} glu_job;

static void glu_item(void *arg, int64_t item, int worker)
{
    const glu_job *j = arg;
    int64_t r0, n;
    cpu_rows_split_item(&j->split, item, &r0, &n);
    for (int64_t r = r0; r < r0 + n; r++) {
        const float *xr = j->x + r * 2 * j->inter;
        float *yr = j->y + r * j->inter;
        memcpy(yr, xr, (size_t)j->inter * sizeof(float));
        cpu_bias_act_row(yr, NULL, j->inter, j->act);
        mul_row(yr, xr + j->inter, j->inter);
    }
}

void cpu_glu_fast(int threads, const float *x, float *y, int64_t rows, int64_t inter, stof_act act)
{
    if (rows <= 0 || inter <= 0) return;
    glu_job j = {cpu_rows_split(threads, rows, 3 * inter), x, y, inter, act};
    cpu_pool_for(threads, cpu_rows_split_items(&j.split), glu_item, &j);
}

/* ---------------------------------------------------------------- RoPE */

enum { ROPE_MAX_HALF = 512 }; /* widest rotation served from a stack table */

ROWS_CLONES static void rope_rotate(float *x, const float *c, const float *s, int half)
{
    for (int i = 0; i < half; i++) {
        float a = x[i], b = x[i + half];
        x[i] = a * c[i] - b * s[i];
        x[i + half] = b * c[i] + a * s[i];
    }
}

typedef struct rope_job {
    row_split split;
    float *x;
    int heads, head_dim, rot_dim;
    int64_t row_stride;
    const int32_t *positions;
    const float *inv_freq;
} rope_job;

static void rope_item(void *arg, int64_t item, int worker)
{
    const rope_job *j = arg;
    int half = j->rot_dim / 2;
    float c[ROPE_MAX_HALF], s[ROPE_MAX_HALF];
    int64_t t0, n;
    cpu_rows_split_item(&j->split, item, &t0, &n);
    for (int64_t t = t0; t < t0 + n; t++) {
        for (int i = 0; i < half; i++) {
            float angle = (float)j->positions[t] * j->inv_freq[i];
            c[i] = (float)cos((double)angle);
            s[i] = (float)sin((double)angle);
        }
        float *row = j->x + t * j->row_stride;
        for (int h = 0; h < j->heads; h++)
            rope_rotate(row + (int64_t)h * j->head_dim, c, s, half);
    }
}

void cpu_rope_fast(int threads, float *x, int64_t tokens, int heads, int head_dim,
                   int64_t row_stride, const int32_t *positions, const float *inv_freq, int rot_dim)
{
    if (tokens <= 0 || heads <= 0 || rot_dim < 2) return;
    if (rot_dim / 2 > ROPE_MAX_HALF) {
        cpu_rope(x, tokens, heads, head_dim, row_stride, positions, inv_freq, rot_dim);
        return;
    }
    rope_job j = {cpu_rows_split(threads, tokens, (int64_t)heads * rot_dim),
                  x,
                  heads,
                  head_dim,
                  rot_dim,
                  row_stride,
                  positions,
                  inv_freq};
    cpu_pool_for(threads, cpu_rows_split_items(&j.split), rope_item, &j);
}

/* ---------------------------------------------------------------- residual add */

ROWS_CLONES static void add_span(const float *a, const float *b, float *y, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        y[i] = a[i] + b[i];
}

typedef struct add_job {
    const float *a, *b;
    float *y;
    int64_t n;
} add_job;

static void add_item(void *arg, int64_t item, int worker)
{
    const add_job *j = arg;
    int64_t first = item * ROWS_GRAIN;
    add_span(j->a + first, j->b + first, j->y + first,
             j->n - first < ROWS_GRAIN ? j->n - first : ROWS_GRAIN);
}

void cpu_add_fast(int threads, const float *a, const float *b, float *y, int64_t n)
{
    if (n <= 0) return;
    add_job j = {a, b, y, n};
    cpu_pool_for(threads, (n + ROWS_GRAIN - 1) / ROWS_GRAIN, add_item, &j);
}
