/*
 * attn_cpu_fast.c — attention on the CPU over the compiled tile lists, so that
 * time and memory follow the visible pairs, not Lq x Lk. FlashAttention's
 * loop: for each query tile row, scores S = Q K^T one listed tile at a time
 * (full tiles with no mask code, partial tiles through their bitmap), an
 * online softmax in fp32 (scores in the log2 domain, exp2 by polynomial), and
 * O += P V; rows are normalised once at the end.
 *
 * Layout. K and V of each kv head are packed once per call into fp32 tiles
 * (K^T tiles [dp][tnp], V tiles [tnp][dp], zero padded to FAST_CHUNK), a
 * few heads at a time so the packed copy stays cache sized; the query tile
 * rows of those heads then run on the pool (src/cpu/pool.c), heaviest rows
 * first. A split mask (dilated, mask.h) runs each residue class as a sequence
 * of its own, rows d apart; GQA maps query head h to kv head h / (H / Hk).
 *
 * Instruction sets. attn_cpu_tile.h holds the inner loops once, over GCC
 * vector types; it is compiled here for AVX-512, for AVX2 + FMA and for the
 * baseline, and the best the machine runs is picked at run time, so the
 * build never needs -march=native.
 */
#include "attn/attn_cpu_fast.h"
#include "cpu/pool.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

enum {
    FAST_CHUNK = 32, /* columns of one micro-kernel call; pads tile_n and D */
    FAST_MAX_D = 512,
    FAST_RUN_COLS = 256,       /* consecutive full tiles run as one block up to this */
    FAST_ROUND_BYTES = 8 << 20 /* packed K and V per round of kv heads */
};

/* Query head h of batch entry b, residue class p, as one sequence. */
typedef struct fast_seq {
    int rows_exist;         /* rows of the sequence in the tensors */
    int rows_visible;       /* of those, rows below the mask's length (others are zeros) */
    int64_t q0, qstep;      /* element offset of row 0 in q, and from row to row */
    int64_t o0, ostep;      /* the same in out */
    int kv;                 /* its kv sequence, as an index into the round */
    const int32_t *row_ptr; /* tile rows of its mask instance */
} fast_seq;

/* Key/value head hk of batch entry b, class p, packed for the round. */
typedef struct fast_kv {
    int klim; /* keys of the sequence */
    int n_kt; /* key tiles packed */
    int64_t k0, kstep, v0, vstep;
    float *kt, *v; /* [n_kt][dp][tnp] and [n_kt][tnp][dp] */
} fast_kv;

typedef struct fast_scratch {
    float *q, *s, *o, *m, *l; /* [tm][dp], [tm][lds], [tm][dp], [tm], [tm] */
} fast_scratch;

typedef struct fast_job {
    const mask_tiles *t;
    int D, dp, tnp;
    int run_tiles; /* full tiles one block may take: max(1, FAST_RUN_COLS / tnp) */
    int lds;       /* row stride of the score block: run_tiles * tnp */
    float qscale;  /* softmax scale times log2(e) */
    const stof_tensor *q, *k, *v;
    stof_tensor *out;
    fast_seq *seqs;
    fast_kv *kvs;
    int64_t *items;        /* seq * n_trow + tile row, heaviest first */
    fast_scratch *scratch; /* one per worker */
} fast_job;

/* ---------------------------------------------------------------- rows in and out */

static void load_row(const stof_tensor *x, int64_t off, int D, float scale, float *dst)
{
    if (x->dtype == STOF_F32) {
        const float *src = (const float *)x->data + off;
        for (int d = 0; d < D; d++)
            dst[d] = src[d] * scale;
    } else if (x->dtype == STOF_BF16) {
        const uint16_t *src = (const uint16_t *)x->data + off;
        for (int d = 0; d < D; d++) {
            uint32_t bits = (uint32_t)src[d] << 16;
            float f;
            memcpy(&f, &bits, sizeof f);
            dst[d] = f * scale;
        }
    } else {
        for (int d = 0; d < D; d++)
            dst[d] = stof_load_f(x->data, x->dtype, off + d) * scale;
    }
}

static void store_row(stof_tensor *x, int64_t off, int D, const float *src, float mul)
{
    if (x->dtype == STOF_F32) {
        float *dst = (float *)x->data + off;
        for (int d = 0; d < D; d++)
            dst[d] = src ? src[d] * mul : 0.0f;
        return;
    }
    for (int d = 0; d < D; d++)
        stof_store_f(x->data, x->dtype, off + d, src ? src[d] * mul : 0.0f);
}

static void fast_gather_q(const fast_job *j, const fast_seq *q, int row0, int vis, int rr,
                          float *dst)
{
    for (int i = 0; i < rr; i++) {
        float *row = dst + (int64_t)i * j->dp;
        memset(row, 0, (size_t)j->dp * sizeof(float));
        if (i < vis) load_row(j->q, q->q0 + (int64_t)(row0 + i) * q->qstep, j->D, j->qscale, row);
    }
}

static void fast_store_o(const fast_job *j, const fast_seq *q, int row0, int rows, int vis,
                         const fast_scratch *w)
{
    for (int i = 0; i < rows; i++) {
        int64_t off = q->o0 + (int64_t)(row0 + i) * q->ostep;
        float l = i < vis ? w->l[i] : 0.0f;
        store_row(j->out, off, j->D, l > 0.0f ? w->o + (int64_t)i * j->dp : NULL, 1.0f / l);
    }
}

/* K^T and V tiles of one kv sequence (zeros past its keys and past D). */
static void pack_kv(const fast_job *j, fast_kv *kv)
{
    int tn = j->t->tile_n, tnp = j->tnp, dp = j->dp, D = j->D;
    float row[FAST_MAX_D];
    size_t tile = (size_t)tnp * dp;
    /* Zero what the keys leave unwritten: the last tile's tail, and every
     * tile's padding columns (K^T rows, V columns) when D < dp. */
    int zero_from = D == dp && tn == tnp ? kv->n_kt - 1 : 0;
    if (kv->n_kt > 0) {
        memset(kv->kt + zero_from * tile, 0, (size_t)(kv->n_kt - zero_from) * tile * sizeof(float));
        memset(kv->v + zero_from * tile, 0, (size_t)(kv->n_kt - zero_from) * tile * sizeof(float));
    }
    for (int key = 0; key < kv->klim; key++) {
        int c = key / tn, jj = key % tn;
        float *kt = kv->kt + c * tile, *v = kv->v + c * tile + (size_t)jj * dp;
        load_row(j->k, kv->k0 + (int64_t)key * kv->kstep, D, 1.0f, row);
        for (int d = 0; d < D; d++)
            kt[(size_t)d * tnp + jj] = row[d];
        load_row(j->v, kv->v0 + (int64_t)key * kv->vstep, D, 1.0f, v);
    }
}

/* ---------------------------------------------------------------- the inner loops, per ISA */

#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__)
#define FAST_X86 1
#else
#define FAST_X86 0
#endif

#pragma GCC push_options
#pragma GCC optimize("fp-contract=fast")

typedef float v4f __attribute__((vector_size(16)));
typedef int32_t v4i __attribute__((vector_size(16)));
#define TV v4f
#define TVI v4i
#define TW 4
#define TR 2
#define TSFX base
#include "attn/attn_cpu_tile.h"

#if FAST_X86
#pragma GCC push_options
#pragma GCC target("avx2,fma")
typedef float v8f __attribute__((vector_size(32)));
typedef int32_t v8i __attribute__((vector_size(32)));
#define TV v8f
#define TVI v8i
#define TW 8
#define TR 2
#define TSFX avx2
#include "attn/attn_cpu_tile.h"
#pragma GCC pop_options

#pragma GCC push_options
#pragma GCC target("avx512f,avx2,fma")
typedef float v16f __attribute__((vector_size(64)));
typedef int32_t v16i __attribute__((vector_size(64)));
#include <immintrin.h>
/* 2^x as the generic one, in fewer instructions: x = n + f with n rounded to
 * nearest, 2^f by the same polynomial, 2^n applied by scalef. Inputs below
 * -126 (masked scores: -inf) give exactly 0, not a slow denormal; NaN
 * stays NaN (the unordered compare keeps it). */
static inline __attribute__((always_inline)) v16f exp2_avx512(v16f x)
{
    __m512 xv = (__m512)x;
    __m512 n = _mm512_roundscale_ps(xv, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 f = _mm512_sub_ps(xv, n);
    __m512 p = _mm512_fmadd_ps(f, _mm512_set1_ps(1.535336188319500e-4f),
                               _mm512_set1_ps(1.339887440266574e-3f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(9.618437357674640e-3f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(5.550332471162809e-2f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(2.402264791363012e-1f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(6.931472028550421e-1f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.0f));
    __mmask16 live = _mm512_cmp_ps_mask(xv, _mm512_set1_ps(-126.0f), _CMP_NLT_UQ);
    return (v16f)_mm512_maskz_scalef_ps(live, p, n);
}
#define TV v16f
#define TVI v16i
#define TW 16
#define TR 8
#define TSFX avx512
#define TEXP2 exp2_avx512
#define TVMAX(a, b) ((v16f)_mm512_max_ps((__m512)(a), (__m512)(b)))
#define THMAX(x) _mm512_reduce_max_ps((__m512)(x))
#define THSUM(x) _mm512_reduce_add_ps((__m512)(x))
#include "attn/attn_cpu_tile.h"
#pragma GCC pop_options
#endif

#pragma GCC pop_options

typedef void (*tile_row_fn)(const fast_job *j, const fast_seq *q, int r, fast_scratch *w);

static tile_row_fn best_tile_row(void)
{
#if FAST_X86
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f")) return tile_row_avx512;
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return tile_row_avx2;
#endif
    return tile_row_base;
}

/* ---------------------------------------------------------------- the call */

bool attn_cpu_fast_supports(const attn_shape *s, const stof_tensor *q, const stof_tensor *k,
                            const stof_tensor *v, const stof_tensor *out)
{
    if (cpu_use_reference() || s->mods) return false; /* biases, soft cap: the reference */
    const stof_tensor *all[4] = {q, k, v, out};
    for (int i = 0; i < 4; i++) {
        const stof_tensor *x = all[i];
        if (x->stride[x->ndim - 1] != 1 && x->shape[x->ndim - 1] != 1) return false;
    }
    int64_t hk = k->shape[1]; /* [B, Hk, Lk, D] or [Tk, Hk, D] */
    return s->D >= 1 && s->D <= FAST_MAX_D && hk >= 1 && s->H % hk == 0 && v->shape[1] == hk;
}

/* A query tile row to run, and how many tiles it lists. */
typedef struct fast_item {
    int32_t cost, seq, row;
} fast_item;

typedef struct fast_run {
    fast_job job;
    tile_row_fn tile_row;
    fast_item *items;
    int64_t k0; /* first kv sequence of the round being packed */
} fast_run;

/* Element offset of row 0 of (b, head, class p) and the step between rows. */
static void row_geometry(const stof_tensor *x, const int32_t *cu, int b, int head, int p, int d,
                         int64_t *first, int64_t *step)
{
    if (cu) {
        *first = ((int64_t)cu[b] + p) * x->stride[0] + (int64_t)head * x->stride[1];
        *step = (int64_t)d * x->stride[0];
    } else {
        *first =
            (int64_t)b * x->stride[0] + (int64_t)head * x->stride[1] + (int64_t)p * x->stride[2];
        *step = (int64_t)d * x->stride[2];
    }
}

/* Rows of class p of a sequence of len tokens (rows p, p + d, ...), at most cap. */
static int class_rows(int64_t len, int p, int d, int cap)
{
    int64_t n = len > p ? (len - p + d - 1) / d : 0;
    return n < cap ? (int)n : cap;
}

static void pack_item(void *arg, int64_t i, int worker)
{
    fast_run *run = arg;
    pack_kv(&run->job, &run->job.kvs[run->k0 + i]);
}

static void row_item(void *arg, int64_t i, int worker)
{
    fast_run *run = arg;
    const fast_item *it = &run->items[i];
    run->tile_row(&run->job, &run->job.seqs[it->seq], it->row, &run->job.scratch[worker]);
}

static int heavier_first(const void *a, const void *b)
{
    const fast_item *x = a, *y = b;
    if (x->cost != y->cost) return x->cost > y->cost ? -1 : 1;
    if (x->seq != y->seq) return x->seq < y->seq ? -1 : 1;
    return x->row < y->row ? -1 : (x->row > y->row);
}

static int round_up(int x, int to)
{
    return (x + to - 1) / to * to;
}

static float *alloc_aligned(size_t floats)
{
    size_t bytes = (floats * sizeof(float) + 63) / 64 * 64;
    return aligned_alloc(64, bytes ? bytes : 64);
}

/* Sequences and kv sequences of the call, with their geometry. */
static void describe(const attn_shape *s, const stof_tensor *cu_q, const stof_tensor *cu_k, int Hk,
                     fast_job *j)
{
    const mask_tiles *t = j->t;
    int d = t->split, G = (int)s->H / Hk;
    const int32_t *cq = s->packed ? (const int32_t *)cu_q->data : NULL;
    const int32_t *ck = s->packed ? (const int32_t *)cu_k->data : NULL;
    for (int b = 0; b < (int)s->B; b++) {
        for (int p = 0; p < d; p++) {
            for (int hk = 0; hk < Hk; hk++) {
                fast_kv *kv = &j->kvs[((int64_t)b * Hk + hk) * d + p];
                kv->klim = ck ? class_rows(ck[b + 1] - ck[b], p, d, t->lk) : t->lk;
                kv->n_kt = (kv->klim + t->tile_n - 1) / t->tile_n;
                row_geometry(j->k, ck, b, hk, p, d, &kv->k0, &kv->kstep);
                row_geometry(j->v, ck, b, hk, p, d, &kv->v0, &kv->vstep);
            }
            int len_q = t->len_q[t->bm > 1 ? b : 0];
            for (int h = 0; h < (int)s->H; h++) {
                fast_seq *q = &j->seqs[((int64_t)b * s->H + h) * d + p];
                q->rows_exist = cq ? class_rows(cq[b + 1] - cq[b], p, d, t->lq) : t->lq;
                q->rows_visible = q->rows_exist < len_q ? q->rows_exist : len_q;
                row_geometry(j->q, cq, b, h, p, d, &q->q0, &q->qstep);
                row_geometry(j->out, cq, b, h, p, d, &q->o0, &q->ostep);
                q->kv = (int)(((int64_t)b * Hk + h / G) * d + p);
                q->row_ptr = t->row_ptr + (int64_t)mask_instance(t, b, h) * t->n_trow;
            }
        }
    }
}

/* Runs kv sequences [k0, k1): packs them into buf, then their query tile rows. */
static void run_round(fast_run *run, int threads, int64_t k0, int64_t k1, float *buf, int H, int Hk)
{
    fast_job *j = &run->job;
    const mask_tiles *t = j->t;
    int d = t->split, G = H / Hk;
    size_t tile = (size_t)j->tnp * j->dp;
    for (int64_t i = k0; i < k1; i++) {
        j->kvs[i].kt = buf;
        j->kvs[i].v = buf + (size_t)j->kvs[i].n_kt * tile;
        buf += 2 * (size_t)j->kvs[i].n_kt * tile;
    }
    run->k0 = k0;
    cpu_pool_for(threads, k1 - k0, pack_item, run);
    int64_t n = 0;
    for (int64_t i = k0; i < k1; i++) {
        int p = (int)(i % d), hk = (int)(i / d % Hk), b = (int)(i / d / Hk);
        for (int g = 0; g < G; g++) {
            int32_t seq = (int32_t)(((int64_t)b * H + hk * G + g) * d + p);
            const fast_seq *q = &j->seqs[seq];
            int n_rows = (q->rows_exist + t->tile_m - 1) / t->tile_m;
            for (int r = 0; r < n_rows; r++)
                run->items[n++] = (fast_item){q->row_ptr[r + 1] - q->row_ptr[r], seq, (int32_t)r};
        }
    }
    qsort(run->items, (size_t)n, sizeof *run->items, heavier_first);
    cpu_pool_for(threads, n, row_item, run);
}

static tile_row_fn forced_tile_row;

bool attn_cpu_fast_force_isa(const char *name)
{
    forced_tile_row = NULL;
    if (!name) return true;
    tile_row_fn best = best_tile_row();
    if (strcmp(name, "base") == 0) forced_tile_row = tile_row_base;
#if FAST_X86
    if (strcmp(name, "avx2") == 0 && best != tile_row_base) forced_tile_row = tile_row_avx2;
    if (strcmp(name, "avx512") == 0 && best == tile_row_avx512) forced_tile_row = tile_row_avx512;
#endif
    return forced_tile_row != NULL;
}

stof_status attn_cpu_fast_run(const attn_shape *s, const stof_tensor *q, const stof_tensor *k,
                              const stof_tensor *v, stof_mask *mask, const stof_tensor *cu_q,
                              const stof_tensor *cu_k, stof_tensor *out)
{
    const mask_tiles *t = stof_mask_tiles_view(mask);
    const stof_ctx *mctx = stof_mask_ctx(mask);
    int threads = cpu_threads_resolve(mctx ? mctx->cpu_threads : 0);
    int Hk = (int)k->shape[1], d = t->split;
    fast_run run;
    memset(&run, 0, sizeof run);
    run.tile_row = forced_tile_row ? forced_tile_row : best_tile_row();
    fast_job *j = &run.job;
    j->t = t;
    j->D = (int)s->D;
    j->dp = round_up(j->D, FAST_CHUNK);
    j->tnp = round_up(t->tile_n, FAST_CHUNK);
    j->run_tiles = j->tnp == t->tile_n && FAST_RUN_COLS / j->tnp > 1 ? FAST_RUN_COLS / j->tnp : 1;
    j->lds = j->run_tiles * j->tnp;
    j->qscale = (float)((double)s->scale * 1.4426950408889634);
    j->q = q;
    j->k = k;
    j->v = v;
    j->out = out;
    int64_t n_kv = s->B * Hk * d, n_seq = s->B * s->H * d;
    int G = (int)s->H / Hk;
    size_t tile = (size_t)j->tnp * j->dp, per_kv = 2 * (size_t)t->n_tcol * tile;
    /* kv sequences per round: as many as fit the budget, at least one */
    int64_t per_round = (int64_t)(FAST_ROUND_BYTES / (per_kv * sizeof(float)));
    if (per_round < 1) per_round = 1;
    if (per_round > n_kv) per_round = n_kv;
    /* per worker: q, o [tm][dp], s [tm][lds], m, l [tm]; 64-byte aligned blocks */
    size_t scratch_floats = ((size_t)t->tile_m * (2 * j->dp + j->lds + 2) + 15) / 16 * 16;
    stof_status st = STOF_OK;
    float *pack = NULL, *scratch = NULL;
    st = stof_host_calloc((size_t)n_kv, sizeof *j->kvs, (void **)&j->kvs);
    if (st == STOF_OK) st = stof_host_calloc((size_t)n_seq, sizeof *j->seqs, (void **)&j->seqs);
    if (st == STOF_OK)
        st = stof_host_calloc((size_t)threads, sizeof *j->scratch, (void **)&j->scratch);
    if (st == STOF_OK)
        st = stof_host_calloc((size_t)(per_round * G * t->n_trow), sizeof *run.items,
                              (void **)&run.items);
    if (st == STOF_OK) {
        pack = alloc_aligned((size_t)per_round * per_kv);
        scratch = alloc_aligned((size_t)threads * scratch_floats);
        if (!pack || !scratch)
            st = stof_error(STOF_ERR_OOM,
                            "attention on the CPU: out of host memory for %lld "
                            "packed key/value floats",
                            (long long)(per_round * per_kv));
    }
    if (st == STOF_OK) {
        for (int w = 0; w < threads; w++) {
            float *base = scratch + (size_t)w * scratch_floats;
            fast_scratch *ws = &j->scratch[w];
            ws->q = base;
            ws->o = ws->q + (size_t)t->tile_m * j->dp;
            ws->s = ws->o + (size_t)t->tile_m * j->dp;
            ws->m = ws->s + (size_t)t->tile_m * j->lds;
            ws->l = ws->m + t->tile_m;
        }
        describe(s, cu_q, cu_k, Hk, j);
        for (int64_t k0 = 0; k0 < n_kv; k0 += per_round) {
            int64_t k1 = k0 + per_round < n_kv ? k0 + per_round : n_kv;
            run_round(&run, threads, k0, k1, pack, (int)s->H, Hk);
        }
    }
    free(pack);
    free(scratch);
    free(j->kvs);
    free(j->seqs);
    free(j->scratch);
    free(run.items);
    return st;
}

stof_status attn_cpu_fast_rows(const float *qkv, float *out, int64_t T, int B, int L, int heads,
                               int kv_heads, int D, const int32_t *cu_seqlens, stof_mask *mask,
                               float scale)
{
    int64_t width = (int64_t)(heads + 2 * kv_heads) * D;
    int64_t qshape[3] = {T, heads, D}, kshape[3] = {T, kv_heads, D}, cshape[1] = {B + 1};
    float *base = (float *)qkv;
    stof_tensor q = stof_tensor_make(base, STOF_F32, STOF_MEM_HOST, 3, qshape);
    stof_tensor k = stof_tensor_make(base + (int64_t)heads * D, STOF_F32, STOF_MEM_HOST, 3, kshape);
    stof_tensor v = stof_tensor_make(base + (int64_t)(heads + kv_heads) * D, STOF_F32,
                                     STOF_MEM_HOST, 3, kshape);
    stof_tensor o = stof_tensor_make(out, STOF_F32, STOF_MEM_HOST, 3, qshape);
    q.stride[0] = k.stride[0] = v.stride[0] = width;
    stof_tensor cu = stof_tensor_make((void *)cu_seqlens, STOF_I32, STOF_MEM_HOST, 1, cshape);
    const mask_tiles *t = stof_mask_tiles_view(mask);
    attn_shape s;
    memset(&s, 0, sizeof s);
    s.packed = true;
    s.dtype = STOF_F32;
    s.B = B;
    s.H = heads;
    s.Hkv = kv_heads;
    s.Lq = s.Lk = L;
    s.D = D;
    s.Tq = s.Tk = T;
    s.scale = scale;
    STOF_REQUIRE(t && t->batch == B && t->heads == heads && (int64_t)t->lq * t->split == L &&
                     (int64_t)t->lk * t->split == L,
                 STOF_ERR_SHAPE, "attention rows: the mask was not compiled for B=%d, H=%d, L=%d",
                 B, heads, L);
    if (!attn_cpu_fast_supports(&s, &q, &k, &v, &o))
        return stof_error(STOF_ERR_UNSUPPORTED, "attention rows: not served by the fast path");
    return attn_cpu_fast_run(&s, &q, &k, &v, mask, &cu, &cu, &o);
}
