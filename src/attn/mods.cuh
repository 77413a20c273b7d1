/*
 * mods.cuh — the score modifiers of the block-wise kernel's modifier
 * variants (attn.h's attn_mods): the tanh soft cap and the position biases
 * (T5 buckets, ALiBi, an additive tensor), applied to a score fragment in
 * natural units before it goes to the log2 domain, exactly as the CPU
 * reference (src/cpu/attention.c) defines them.
 *
 * The one non-obvious choice: a T5 bias is looked up, not computed. The
 * bucket of a distance is found by comparing it with thresholds the host
 * derived from the reference's own bucket function (attn_t5_levels), so the
 * GPU and the CPU agree bucket for bucket (a logf on either side could tip a
 * boundary); each CTA then lays out its head's bias for every relative
 * position in [-max_distance, max_distance] in shared memory, and a score
 * pays one clamped shared-memory load. The sm_90 kernel's T5 path (a T5
 * bias alone, below attn_t5_bias) takes the same buckets from the same
 * thresholds into a wider table, and its scores pay no instruction of their
 * own: the bias enters the score product as its starting accumulators.
 */
#ifndef STOF_ATTN_MODS_CUH
#define STOF_ATTN_MODS_CUH

#include "attn/attn.h"
#include "attn/grid.cuh"
#include "core/ptx.cuh"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#define ATTN_LOG2E 1.4426950408889634f

/* One CTA's view of the modifiers: its head's slope or table, its (b, h)
 * plane of a bias tensor, and where its rows and columns sit. */
typedef struct attn_mod_ctx {
    int kind;
    float scale;        /* raw q.k to natural units (the softmax scale) */
    float out;          /* natural units to the kernel's (log2 or raw units) */
    float cap, inv_cap; /* cap 0: none; cap already times out */
    float slope;        /* ALiBi, times out */
    const float *tab;   /* T5: shared [2 max_distance + 1], bias of relative position r at
                           tab[r + max_distance], times out */
    int maxd;
    const char *tensor; /* TENSOR: the (b, h) plane, element (i, j) at i * ti + j * tj */
    int64_t ti, tj;
    int dtype, lq, lk;
    int split, p; /* row i of the kernel is token i * split + p (mask.h's residue split) */
    int off;      /* query position - query token (bottom-right offset) */
} attn_mod_ctx;

/* Bucket of relative position rel = key - query (cpu_t5_bucket's, by thresholds). */
static __device__ __forceinline__ int attn_t5_bucket(int rel, const attn_mods *m)
{
    int n = m->t5_num_buckets, bucket = 0, r;
    if (m->t5_bidirectional) {
        n /= 2;
        if (rel > 0) bucket = n;
        r = rel < 0 ? -rel : rel;
    } else {
        r = rel < 0 ? -rel : 0;
    }
    if (r < m->t5_exact) return bucket + r;
    int level = 0;
    while (level < m->t5_levels && r >= m->t5_thr[level])
        level++;
    return bucket + m->t5_exact + level;
}

/* Natural units to raw ones (q.k before the softmax scale): 1 / scale, 0 for
 * a zero scale. */
static __host__ __device__ __forceinline__ float attn_raw_unit(float scale)
{
    return scale != 0.0f ? 1.0f / scale : 0.0f;
}

/* Bytes of the general variants' T5 table (one bias a relative position in
 * -max_distance .. max_distance), rounded to 16. */
static inline size_t attn_t5_table_bytes(int max_distance)
{
    return ((size_t)(2 * max_distance + 1) * sizeof(float) + 15u) & ~(size_t)15u;
}

/* Bytes of shared memory the modifiers of a launch take after the K/V stages. */
static inline size_t attn_mods_smem_bytes(const attn_mods *m)
{
    return m->bias_kind == STOF_BIAS_T5 ? attn_t5_table_bytes(m->t5_max_distance) : 0;
}

/* The CTA's context; a T5 table is written into tab_smem by every thread
 * (the caller synchronises before the first score). hv: the kernels' head. */
static __device__ __forceinline__ attn_mod_ctx attn_mod_setup(const attn_launch *a,
                                                              const attn_seq *s, int b, int hv,
                                                              float *tab_smem, int threads,
                                                              float out)
{
    const attn_mods *m = &a->mods;
    attn_mod_ctx c;
    c.kind = m->bias_kind;
    c.scale = a->scale;
    c.out = out;
    c.cap = m->softcap * out;
    c.inv_cap = m->softcap > 0.0f ? 1.0f / m->softcap : 0.0f;
    c.split = a->split;
    c.p = hv - s->head * a->split;
    c.off = (int)mask_tiles_offset(&a->tiles, s->len_q, s->len_k);
    c.slope = 0.0f;
    c.tab = tab_smem;
    c.maxd = m->t5_max_distance;
    c.tensor = NULL;
    c.ti = c.tj = 0;
    c.dtype = m->bias_dtype;
    c.lq = m->bias_lq;
    c.lk = m->bias_lk;
    const float *f = (const float *)m->bias;
    if (c.kind == STOF_BIAS_ALIBI) c.slope = f[(int64_t)s->head * m->bias_st[0]] * out;
    if (c.kind == STOF_BIAS_T5) {
        for (int r = threadIdx.x; r <= 2 * c.maxd; r += threads)
            tab_smem[r] =
                out *
                f[(int64_t)attn_t5_bucket(r - c.maxd, m) * m->bias_st[0] + s->head * m->bias_st[1]];
    }
    if (c.kind == STOF_BIAS_TENSOR) {
        const int64_t es = m->bias_dtype == STOF_F32 ? 4 : 2;
        c.tensor = (const char *)m->bias + (b * m->bias_st[0] + s->head * m->bias_st[1]) * es;
        c.ti = m->bias_st[2] * es;
        c.tj = m->bias_st[3] * es;
    }
    return c;
}

/* The bias of kernel row i, key column j (tokens of the sequence). */
static __device__ __forceinline__ float attn_mod_bias(const attn_mod_ctx &c, int i, int j)
{
    const int ti = i * c.split + c.p, tj = j * c.split + c.p;
    const int rel = tj - (ti + c.off);
    switch (c.kind) {
    case STOF_BIAS_T5: return c.tab[min(max(rel, -c.maxd), c.maxd) + c.maxd];
    case STOF_BIAS_ALIBI: return -c.slope * (float)(rel < 0 ? -rel : rel);
    case STOF_BIAS_TENSOR: {
        if (ti >= c.lq || tj >= c.lk) return 0.0f; /* padding: never visible */
        const char *e = c.tensor + ti * c.ti + tj * c.tj;
        if (c.dtype == STOF_F32) return *(const float *)e;
        if (c.dtype == STOF_F16) return __half2float(*(const __half *)e);
        return __bfloat162float(*(const __nv_bfloat16 *)e);
    }
    default: return 0.0f;
    }
}

/* Key minus query of element e of n-block j, less the thread's base (split 1). */
#define ATTN_MOD_DELTA(j, e) (8 * (j) + ((e)&1) - 8 * ((e) >> 1))

/* A warp's T5 scores (split 1): s = s * k + bias. rel of element e of
 * n-block j is base + ATTN_MOD_DELTA(j, e); over the warp's 16 rows and
 * 8 NB keys it spans [wbase - 15, wbase + 8 NB - 1], wbase being the same
 * in every lane. A block that lies wholly past -max_distance or
 * max_distance sees one bias (the table's end): one FFMA a score, as
 * without a bias; one wholly inside needs no clamp, and its loads take
 * compile-time offsets from one address: a load and an FFMA. Only the
 * blocks straddling +-max_distance pay the clamp. At (8, 12, 512, 64) with
 * max_distance 128, about a third of the blocks take each path. */
template <int NB>
static __device__ __forceinline__ void attn_t5_bias(float (&s)[NB][4], const attn_mod_ctx &c,
                                                    int base, float k)
{
    const float *tab = c.tab + c.maxd;
    const int lane = threadIdx.x & 31;
    const int wbase = base - 2 * (lane & 3) + (lane >> 2);
    const int lo = wbase - 15, hi = wbase + 8 * NB - 1;
    if (hi <= -c.maxd || lo >= c.maxd) {
        const float b = tab[hi <= -c.maxd ? -c.maxd : c.maxd];
#pragma unroll
        for (int j = 0; j < NB; j++)
#pragma unroll
            for (int e = 0; e < 4; e++)
                s[j][e] = fmaf(s[j][e], k, b);
    } else if (lo >= -c.maxd && hi <= c.maxd) {
        const float *row = tab + base;
#pragma unroll
        for (int j = 0; j < NB; j++)
#pragma unroll
            for (int e = 0; e < 4; e++)
                s[j][e] = fmaf(s[j][e], k, row[ATTN_MOD_DELTA(j, e)]);
    } else {
#pragma unroll
        for (int j = 0; j < NB; j++)
#pragma unroll
            for (int e = 0; e < 4; e++)
                s[j][e] = fmaf(s[j][e], k, tab[min(max(base + ATTN_MOD_DELTA(j, e), -c.maxd), c.maxd)]);
    }
}

/*
 * The T5 path of the sm_90 kernel's T5 variant (a T5 bias alone: no cap, no
 * split). Its table is laid out once a CTA from the head's column of biases
 * (attn_t5_fetch, copied beside Q) and reaches ATTN_T5_PAD positions past
 * -max_distance and max_distance, the ends repeated, so that no block of a
 * warpgroup's 64 rows and 64 keys that is not wholly past one of them needs
 * a clamp. It comes in two copies, the second one position ahead of the
 * first: the two scores of a thread at keys 2t and 2t + 1 then take one
 * aligned 8-byte load, from the copy that the parity of the thread's
 * relative position picks. The bias goes into the
 * accumulators of the score product before it is issued, off the path from
 * the scores to the exponentials; a block wholly past -max_distance or
 * max_distance has one bias, which the caller folds into the exponentials'
 * reference instead. That choice is the warpgroup's, not the warp's: the
 * product's flag that makes it add onto its accumulators is one for the
 * warpgroup.
 */
#define ATTN_T5_PAD 128 /* > the span of a warpgroup block's relative positions: 63 + 63 */

/* Floats of one copy of the table: positions -half .. half, half =
 * max_distance + ATTN_T5_PAD, and one more, so that the second copy starts
 * 8-byte aligned. */
static __host__ __device__ __forceinline__ int attn_t5_copy_floats(int max_distance)
{
    return 2 * (max_distance + ATTN_T5_PAD) + 2;
}

/* Bytes of shared memory the T5 path takes after the K/V stages: both
 * copies, then the column of num_buckets biases. */
static inline size_t attn_t5_smem_bytes(int max_distance, int num_buckets)
{
    return ((2 * (size_t)attn_t5_copy_floats(max_distance) + (size_t)num_buckets) * sizeof(float) +
            15u) &
           ~(size_t)15u;
}

/* The head's biases by bucket into col (shared memory), as cp.async copies
 * of the calling thread: its caller commits and waits for them. */
static __device__ __forceinline__ void attn_t5_fetch(const attn_mods *m, int head, float *col,
                                                     int threads)
{
    const float *f = (const float *)m->bias + (int64_t)head * m->bias_st[1];
    for (int k = threadIdx.x; k < m->t5_num_buckets; k += threads)
        cp_async4(smem_addr(col + k), f + (int64_t)k * m->bias_st[0]);
}

/* The table in two steps, so that the bucket search, which needs only the
 * launch's thresholds, runs while the column and Q are still on their way:
 * attn_t5_buckets writes each position's bucket into the first copy's slot
 * (as int bits), attn_t5_build, once the column has landed and been
 * published, replaces it with the bias and writes the second copy, in the
 * kernel's raw units (out: 1 / the softmax scale); the caller synchronises
 * after. Each thread takes the same positions in both (threads apart), so
 * it reads back only the slots it wrote. Against the search after the
 * barrier, on an H100, (8, 12, 512, 64): bidirectional 0.031 -> 0.030 ms
 * (cuDNN with the bias over it 1.25 -> 1.31, the same run), causal
 * unchanged at 0.028 (bench/results/attention-t5-buckets-2026-11-27-
 * h100.txt). */
static __device__ __forceinline__ void attn_t5_buckets(const attn_mods *m, float *tab, int threads)
{
    const int maxd = m->t5_max_distance, half = maxd + ATTN_T5_PAD;
    const int n = attn_t5_copy_floats(maxd);
    const int below = attn_t5_bucket(-maxd, m), above = attn_t5_bucket(maxd, m);
    for (int i = threadIdx.x; i < n; i += threads) {
        const int r = i - half;
        tab[i] = __int_as_float(r <= -maxd ? below : r >= maxd ? above : attn_t5_bucket(r, m));
    }
}

static __device__ __forceinline__ void attn_t5_build(const attn_mods *m, float *tab,
                                                     const float *col, float out, int threads)
{
    const int n = attn_t5_copy_floats(m->t5_max_distance);
    for (int i = threadIdx.x; i < n; i += threads) {
        const float v = out * col[__float_as_int(tab[i])];
        tab[i] = v;
        if (i > 0) tab[n + i - 1] = v;
    }
}

/* A thread's view of the table. rel(key0, j, e) of its score e of n-block j
 * in the tile at key0 is key0 + ti - half + ATTN_MOD_DELTA(j, e); the
 * warpgroup's relative positions span key0 + wi - 63 .. key0 + wi + 63. */
typedef struct attn_t5_view {
    const float *copy; /* the copy whose 8-byte words start at the thread's pairs */
    const float *tab;  /* the first copy: the bias of rel r at tab[r + half] */
    int half, ti, wi;
} attn_t5_view;

/* row_g: the kernel row of the thread's accumulator row g; row_wg: the
 * warpgroup's first row; off: query position - query token
 * (mask_tiles_offset). */
static __device__ __forceinline__ attn_t5_view attn_t5_view_of(const attn_mods *m, const float *tab,
                                                               int row_g, int row_wg, int off)
{
    const int lane = threadIdx.x & 31;
    attn_t5_view v;
    v.tab = tab;
    v.half = m->t5_max_distance + ATTN_T5_PAD;
    v.ti = 2 * (lane & 3) - row_g - off + v.half;
    v.wi = -row_wg - off;
    /* key0 is even: the parity of ti is the parity of every pair's index */
    v.copy = (v.ti & 1) ? tab + attn_t5_copy_floats(m->t5_max_distance) - 1 : tab;
    return v;
}

/* The bias of a warp's 16 x 64 tile at key0 into its scores s (ADD: onto
 * them), or, where the warpgroup's 64 x 64 block lies wholly past
 * -max_distance or max_distance (maxd), true with that one bias in fold and
 * s untouched (warpgroup-uniform). */
template <bool ADD>
static __device__ __forceinline__ bool attn_t5_tile(float (&s)[32], const attn_t5_view &v,
                                                    int maxd, int key0, float &fold)
{
    const int lo = key0 + v.wi - 63, hi = key0 + v.wi + 63;
    if (hi <= -maxd || lo >= maxd) {
        fold = v.tab[v.half + (hi <= -maxd ? -maxd : maxd)];
        return true;
    }
    const float2 *w = reinterpret_cast<const float2 *>(v.copy + key0 + v.ti);
#pragma unroll
    for (int j = 0; j < 8; j++) {
        const float2 a = w[4 * j], b = w[4 * j - 4]; /* rows g and g + 8 */
        s[4 * j] = ADD ? s[4 * j] + a.x : a.x;
        s[4 * j + 1] = ADD ? s[4 * j + 1] + a.y : a.y;
        s[4 * j + 2] = ADD ? s[4 * j + 2] + b.x : b.x;
        s[4 * j + 3] = ADD ? s[4 * j + 3] + b.y : b.y;
    }
    return false;
}

/* One warp's 16-row block of scores, n-blocks of 8 keys in the mma.sync /
 * wgmma accumulator layout (element e of n-block j: row g + 8 (e >> 1), key
 * 8 j + 2 t + (e & 1)): each raw q.k becomes (cap(raw * scale) + bias) * out
 * (out, the context's, folded into the cap, slope and table at setup).
 * row_g: the kernel row of accumulator row g; col_t: the key of column 2t of
 * n-block 0. The kind and the split are uniform: one branch a tile, and the
 * common unsplit case takes compile-time offsets (ALiBi: one FADD and one
 * FFMA a score; T5: attn_t5_bias). */
template <int NB>
static __device__ __forceinline__ void attn_apply_mods(float (&s)[NB][4], const attn_mod_ctx &c,
                                                       int row_g, int col_t)
{
    const bool capped = c.cap > 0.0f;
    if (capped) {
        const float in = c.scale * c.inv_cap;
#pragma unroll
        for (int j = 0; j < NB; j++)
#pragma unroll
            for (int e = 0; e < 4; e++)
                s[j][e] = c.cap * tanh_approx(s[j][e] * in);
    }
    /* what turns a score into the kernel's units: done by the cap, else here */
    const float k = capped ? 1.0f : c.scale * c.out;
    /* rel = key - position of the query, tokens of the sequence */
    const int base = col_t * c.split + c.p - (row_g * c.split + c.p + c.off);
    if (c.kind == STOF_BIAS_T5 && c.split == 1) {
        attn_t5_bias<NB>(s, c, base, k);
        return;
    }
    if (!capped) {
#pragma unroll
        for (int j = 0; j < NB; j++)
#pragma unroll
            for (int e = 0; e < 4; e++)
                s[j][e] *= k;
    }
    if (c.kind == STOF_BIAS_ALIBI && c.split == 1) {
        const float fb = (float)base;
#pragma unroll
        for (int j = 0; j < NB; j++)
#pragma unroll
            for (int e = 0; e < 4; e++)
                s[j][e] = fmaf(-c.slope, fabsf(fb + (float)ATTN_MOD_DELTA(j, e)), s[j][e]);
    } else if (c.kind == STOF_BIAS_ALIBI || c.kind == STOF_BIAS_T5) {
#pragma unroll
        for (int j = 0; j < NB; j++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int rel = base + ATTN_MOD_DELTA(j, e) * c.split;
                s[j][e] += c.kind == STOF_BIAS_T5 ? c.tab[min(max(rel, -c.maxd), c.maxd) + c.maxd]
                                                  : -c.slope * (float)abs(rel);
            }
    } else if (c.kind == STOF_BIAS_TENSOR) {
#pragma unroll
        for (int j = 0; j < NB; j++)
#pragma unroll
            for (int e = 0; e < 4; e++)
                s[j][e] = fmaf(attn_mod_bias(c, row_g + 8 * (e >> 1), col_t + 8 * j + (e & 1)),
                               c.out, s[j][e]);
    }
}

#endif /* STOF_ATTN_MODS_CUH */
