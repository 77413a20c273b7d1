/*
 * test_attn_gpu.c — the GPU attention kernels against the CPU reference
 * (cpu_attention, double accumulation, on the fp16/bf16-rounded inputs and
 * masks built straight from the spec with stof_mask_spec_to_dense).
 *
 * Every case runs under AUTO and with each kernel forced, on fresh random
 * inputs, with the output poisoned (NaN) before every run. Padding rows of
 * the inputs hold NaN too, so a kernel that reads past a sequence shows it.
 * Checks: no NaN anywhere in the output, the gap columns of strided outputs
 * untouched, rows with no visible key (padding included) exactly zero, and
 * the relative error of every checked row and of all of them together.
 * Masks: the BENCH.md set, non-block-aligned windows and blocks, scattered
 * global tokens and random blocks (non-contiguous tile lists), random
 * unions, per-batch (lengths, random) and per-head (blocks, dense) masks;
 * L in {1, 17, 128, 1000, 4097}; head dims 32/64/128; fp16 and bf16; padded,
 * strided [B, L, H, D] and packed variable-length layouts. Long rows are
 * checked on a sample of query rows (tile edges, sequence ends, random).
 * On a compute capability 9.0 device with the sm_90a kernels built, every
 * case the Hopper kernel serves also runs it forced (both warpgroup counts
 * where the tiles allow), and a group of its own covers its masks, lengths,
 * head dims and tile shapes; elsewhere those runs are skipped, saying why.
 *
 * STOF_TEST_ATTN_CPU=1 runs the same cases (short ones) on a CPU context: a
 * check of this harness on machines without a GPU.
 */
#include "attn/attn.h"
#include "cpu/cpu_ref.h"
#include "mask/mask.h"
#include "testlib.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

enum { LAYOUT_BHLD = 0, LAYOUT_BLHD = 1, LAYOUT_PACKED = 2 };
enum { GAP = 8 }; /* extra elements per row of the strided layout */

static test_rng rng;
static stof_ctx *ctx;
static bool on_gpu;
static bool sm90_ok;      /* the Hopper kernel can run here */
static char sm90_why[96]; /* why not, when it cannot */
static int cases_run;

/* ---------------------------------------------------------------- memory */

static void *buf_alloc(size_t bytes)
{
    void *p = NULL;
    if (on_gpu) {
        if (cudaMalloc(&p, bytes ? bytes : 16) != cudaSuccess) p = NULL;
    } else {
        p = malloc(bytes ? bytes : 16);
    }
    if (!p) {
        fprintf(stderr, "out of %s memory (%zu bytes)\n", on_gpu ? "device" : "host", bytes);
        exit(1);
    }
    return p;
}

static void buf_free(void *p)
{
    if (on_gpu)
        cudaFree(p);
    else
        free(p);
}

static void buf_put(void *dst, const void *src, size_t bytes)
{
    if (on_gpu)
        CHECK(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice) == cudaSuccess, "upload");
    else
        memcpy(dst, src, bytes);
}

static void buf_get(void *dst, const void *src, size_t bytes)
{
    if (on_gpu)
        CHECK(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost) == cudaSuccess, "download");
    else
        memcpy(dst, src, bytes);
}

static stof_memory mem_kind(void)
{
    return on_gpu ? STOF_MEM_DEVICE : STOF_MEM_HOST;
}

/* ---------------------------------------------------------------- cases */

typedef struct acase {
    stof_mask_spec *spec;
    int B, H, Lq, Lk, D;
    stof_dtype dt;
    int tile_m, tile_n;
    int layout;
    bool has_lengths;
    int32_t lens_q[8], lens_k[8]; /* when has_lengths */
    float scale;                  /* 0: default */
    float amp;                    /* q and k drawn from [-amp, amp] */
    float spike;                  /* > 0: a few key rows scaled by it (spike_keys) */
    stof_mask_builder builder;
    bool sm90_only; /* run AUTO and the sm_90 kernel only */
    int want_split; /* > 0: the residue split the mask must be stored with */
    char name[160];
} acase;

/* Storage of one operand: host copy of the stored 16-bit values plus the
 * logical fp32 values [B, H, L, D] the reference sees. */
typedef struct operand {
    int L;
    const int32_t *cu; /* packed: [B+1] */
    int64_t elems;     /* stored elements */
    uint16_t *host;
    float *logical;
    void *dev;
    stof_tensor t;
} operand;

static int64_t stored_offset(const acase *c, const operand *o, int b, int h, int i, int d)
{
    switch (c->layout) {
    case LAYOUT_BHLD: return (((int64_t)b * c->H + h) * o->L + i) * c->D + d;
    case LAYOUT_BLHD: return (((int64_t)b * o->L + i) * c->H + h) * (c->D + GAP) + d;
    default: return ((int64_t)(o->cu[b] + i) * c->H + h) * c->D + d;
    }
}

static int seq_len(const acase *c, int b, bool key)
{
    if (!c->has_lengths) return key ? c->Lk : c->Lq;
    return key ? c->lens_k[b] : c->lens_q[b];
}

/* Rows of (b, h) that exist in storage. */
static int stored_rows(const acase *c, const operand *o, int b)
{
    return c->layout == LAYOUT_PACKED ? o->cu[b + 1] - o->cu[b] : o->L;
}

static void operand_make(const acase *c, operand *o, int L, const int32_t *cu, bool key, float amp,
                         bool fill)
{
    o->L = L;
    o->cu = cu;
    int64_t T = c->layout == LAYOUT_PACKED ? cu[c->B] : 0;
    int64_t row = c->layout == LAYOUT_BLHD ? c->D + GAP : c->D;
    o->elems = c->layout == LAYOUT_PACKED ? T * c->H * c->D : (int64_t)c->B * L * c->H * row;
    o->host = malloc((size_t)(o->elems > 0 ? o->elems : 1) * 2);
    o->logical = calloc((size_t)c->B * c->H * L * c->D, sizeof(float));
    /* Everything not written below (gap columns, padding rows) is NaN. */
    for (int64_t e = 0; e < o->elems; e++)
        o->host[e] = c->dt == STOF_F16 ? 0x7e00 : 0x7fc0;
    if (fill) {
        for (int b = 0; b < c->B; b++) {
            int real = seq_len(c, b, key), rows = stored_rows(c, o, b);
            for (int h = 0; h < c->H; h++) {
                for (int i = 0; i < rows && i < real; i++) {
                    for (int d = 0; d < c->D; d++) {
                        int64_t off = stored_offset(c, o, b, h, i, d);
                        stof_store_f(o->host, c->dt, off, test_rng_float(&rng, -amp, amp));
                        o->logical[(((int64_t)b * c->H + h) * L + i) * c->D + d] =
                            stof_load_f(o->host, c->dt, off);
                    }
                }
            }
        }
    }
    o->dev = buf_alloc((size_t)(o->elems > 0 ? o->elems : 1) * 2);
    buf_put(o->dev, o->host, (size_t)o->elems * 2);
    memset(&o->t, 0, sizeof o->t);
    o->t.data = o->dev;
    o->t.dtype = c->dt;
    o->t.memory = mem_kind();
    if (c->layout == LAYOUT_PACKED) {
        int64_t shape[3] = {T > 0 ? T : 1, c->H, c->D};
        o->t = stof_tensor_make(o->dev, c->dt, mem_kind(), 3, shape);
    } else {
        int64_t shape[4] = {c->B, c->H, L, c->D};
        o->t = stof_tensor_make(o->dev, c->dt, mem_kind(), 4, shape);
        if (c->layout == LAYOUT_BLHD) {
            o->t.stride[0] = (int64_t)L * c->H * row;
            o->t.stride[1] = row;
            o->t.stride[2] = (int64_t)c->H * row;
        }
    }
}

/* Key rows Lk / 2 + 1 and len - 3 of every (b, h) scaled by c->spike (where
 * they are real tokens): the scores of those keys lie far past the row
 * maxima of the tiles listed before them, or overflow fp32 exponentials taken
 * against those maxima when the gain is large, so that a kernel carrying a
 * row maximum over from earlier tiles must take those tiles again. */
static void spike_keys(const acase *c, operand *k)
{
    for (int b = 0; b < c->B; b++) {
        int len = seq_len(c, b, true);
        const int keys[2] = {c->Lk / 2 + 1, len - 3};
        for (int h = 0; h < c->H; h++) {
            for (int e = 0; e < 2; e++) {
                int j = keys[e];
                if (j < 0 || j >= len || j >= stored_rows(c, k, b)) continue;
                for (int d = 0; d < c->D; d++) {
                    int64_t off = stored_offset(c, k, b, h, j, d);
                    stof_store_f(k->host, c->dt, off, stof_load_f(k->host, c->dt, off) * c->spike);
                    k->logical[(((int64_t)b * c->H + h) * k->L + j) * c->D + d] =
                        stof_load_f(k->host, c->dt, off);
                }
            }
        }
    }
    buf_put(k->dev, k->host, (size_t)k->elems * 2);
}

static void operand_free(operand *o)
{
    free(o->host);
    free(o->logical);
    buf_free(o->dev);
}

/* ---------------------------------------------------------------- reference */

/* Query rows checked against the reference: all of them for small planes,
 * else tile edges, sequence ends and random rows. */
static int pick_rows(const acase *c, int b, int *rows)
{
    int Lq = c->Lq, n = 0;
    if ((int64_t)c->B * c->H * Lq * c->Lk <= (int64_t)4 << 20) {
        for (int i = 0; i < Lq; i++)
            rows[n++] = i;
        return n;
    }
    static char seen[1 << 16];
    memset(seen, 0, (size_t)Lq);
    const int fixed[] = {0, 1, 15, 16, 17, 31, 32, 63, 64, 65, 127, 128, 129, 255, 256, 1023, 1024};
    int lq = seq_len(c, b, false);
    int extra[] = {lq - 2, lq - 1, lq, lq + 1, Lq - 2, Lq - 1};
    for (size_t k = 0; k < sizeof fixed / sizeof fixed[0]; k++)
        if (fixed[k] < Lq && !seen[fixed[k]]) seen[fixed[k]] = 1, rows[n++] = fixed[k];
    for (size_t k = 0; k < sizeof extra / sizeof extra[0]; k++)
        if (extra[k] >= 0 && extra[k] < Lq && !seen[extra[k]])
            seen[extra[k]] = 1, rows[n++] = extra[k];
    for (int k = 0; k < 160; k++) {
        int i = (int)test_rng_int(&rng, 0, Lq - 1);
        if (!seen[i]) seen[i] = 1, rows[n++] = i;
    }
    return n;
}

typedef struct reference {
    int *n_rows;     /* [B*H] */
    int **rows;      /* [B*H][n] checked rows */
    float **out;     /* [B*H][n * D] */
    uint8_t **empty; /* [B*H][Lq]: row has no visible key */
} reference;

static void reference_make(const acase *c, const operand *q, const operand *k, const operand *v,
                           float scale, reference *r)
{
    int BH = c->B * c->H, D = c->D, Lq = c->Lq, Lk = c->Lk;
    r->n_rows = calloc((size_t)BH, sizeof(int));
    r->rows = calloc((size_t)BH, sizeof(int *));
    r->out = calloc((size_t)BH, sizeof(float *));
    r->empty = calloc((size_t)BH, sizeof(uint8_t *));
    uint8_t *plane = malloc((size_t)Lq * Lk);
    int *rows = malloc((size_t)(Lq + 256) * sizeof(int));
    for (int b = 0; b < c->B; b++) {
        for (int h = 0; h < c->H; h++) {
            int bh = b * c->H + h;
            CHECK_OK(stof_mask_spec_to_dense(c->spec, c->B, c->H, Lq, Lk,
                                             c->has_lengths ? c->lens_q : NULL,
                                             c->has_lengths ? c->lens_k : NULL, b, h, plane));
            r->empty[bh] = malloc((size_t)Lq);
            for (int i = 0; i < Lq; i++) {
                bool any = false;
                for (int j = 0; j < Lk && !any; j++)
                    any = plane[(int64_t)i * Lk + j] != 0;
                r->empty[bh][i] = !any;
            }
            int n = pick_rows(c, b, rows);
            r->n_rows[bh] = n;
            r->rows[bh] = malloc((size_t)n * sizeof(int));
            memcpy(r->rows[bh], rows, (size_t)n * sizeof(int));
            float *qs = malloc((size_t)n * D * sizeof(float));
            uint8_t *ms = malloc((size_t)n * Lk);
            for (int s = 0; s < n; s++) {
                memcpy(qs + (int64_t)s * D, q->logical + (((int64_t)bh) * Lq + rows[s]) * D,
                       (size_t)D * sizeof(float));
                memcpy(ms + (int64_t)s * Lk, plane + (int64_t)rows[s] * Lk, (size_t)Lk);
            }
            r->out[bh] = malloc((size_t)n * D * sizeof(float));
            cpu_attention(qs, k->logical + (int64_t)bh * Lk * D, v->logical + (int64_t)bh * Lk * D,
                          r->out[bh], 1, 1, n, Lk, D, ms, 0, 0, scale);
            free(qs);
            free(ms);
        }
    }
    free(plane);
    free(rows);
}

static void reference_free(const acase *c, reference *r)
{
    for (int bh = 0; bh < c->B * c->H; bh++) {
        free(r->rows[bh]);
        free(r->out[bh]);
        free(r->empty[bh]);
    }
    free(r->n_rows);
    free(r->rows);
    free(r->out);
    free(r->empty);
}

/* ---------------------------------------------------------------- checking */

static double tolerance(stof_dtype dt)
{
    return dt == STOF_BF16 ? 2e-2 : 5e-3;
}

static const char *kernel_name(stof_attn_kernel k)
{
    switch (k) {
    case STOF_ATTN_AUTO: return "auto";
    case STOF_ATTN_BLOCKWISE: return "blockwise";
    case STOF_ATTN_ROWWISE: return "rowwise";
    case STOF_ATTN_BLOCKWISE_SM90: return "blockwise_sm90";
    case STOF_ATTN_BLOCKWISE_SM90_WS: return "blockwise_sm90_ws";
    default: return "cpu";
    }
}

/* One failure message per (case, kernel): the first problem found. */
static bool check_output(const acase *c, const operand *o, const reference *r, const char *kn)
{
    const uint16_t poison = c->dt == STOF_F16 ? 0x7e00 : 0x7fc0;
    int D = c->D;
    /* Gap columns of the strided layout: never written. */
    if (c->layout == LAYOUT_BLHD) {
        for (int64_t e = 0; e < o->elems; e++) {
            if ((e % (D + GAP)) >= D && o->host[e] != poison) {
                CHECK(false, "%s [%s]: wrote gap element %lld (0x%04x)", c->name, kn, (long long)e,
                      o->host[e]);
                return false;
            }
        }
    }
    double num = 0, den = 0, worst = 0;
    for (int b = 0; b < c->B; b++) {
        int rows = stored_rows(c, o, b);
        for (int h = 0; h < c->H; h++) {
            int bh = b * c->H + h;
            for (int i = 0; i < rows; i++) {
                bool empty = r->empty[bh][i];
                for (int d = 0; d < D; d++) {
                    float x = stof_load_f(o->host, c->dt, stored_offset(c, o, b, h, i, d));
                    if (isnan(x) || (empty && x != 0.0f)) {
                        CHECK(false, "%s [%s]: out(b=%d, h=%d, i=%d, d=%d) = %g%s", c->name, kn, b,
                              h, i, d, (double)x,
                              empty ? " in a row with no visible key" : " (never written?)");
                        return false;
                    }
                }
            }
            double row_norm_sum = 0;
            for (int s = 0; s < r->n_rows[bh]; s++) {
                const float *ref = r->out[bh] + (int64_t)s * D;
                double n2 = 0;
                for (int d = 0; d < D; d++)
                    n2 += (double)ref[d] * ref[d];
                row_norm_sum += sqrt(n2);
            }
            double typical = r->n_rows[bh] ? row_norm_sum / r->n_rows[bh] : 0;
            for (int s = 0; s < r->n_rows[bh]; s++) {
                int i = r->rows[bh][s];
                if (i >= rows) continue;
                const float *ref = r->out[bh] + (int64_t)s * D;
                double rn = 0, rd = 0;
                for (int d = 0; d < D; d++) {
                    double x = stof_load_f(o->host, c->dt, stored_offset(c, o, b, h, i, d));
                    rn += (x - ref[d]) * (x - ref[d]);
                    rd += (double)ref[d] * ref[d];
                }
                num += rn;
                den += rd;
                if (sqrt(rd) > 0.05 * typical) {
                    double e = sqrt(rn / rd);
                    if (e > worst) worst = e;
                    if (e > 4 * tolerance(c->dt)) {
                        CHECK(false, "%s [%s]: row (b=%d, h=%d, i=%d) rel err %g", c->name, kn, b,
                              h, i, e);
                        return false;
                    }
                }
            }
        }
    }
    double err = den > 0 ? sqrt(num / den) : sqrt(num);
    CHECK(err <= tolerance(c->dt), "%s [%s]: rel err %g (worst row %g)", c->name, kn, err, worst);
    return err <= tolerance(c->dt);
}

/* ---------------------------------------------------------------- one case */

/* One way of running a case: a kernel through the params, or (warps > 0) a
 * block-wise configuration given directly (block_m rows per CTA). */
typedef struct run_kind {
    stof_attn_kernel kernel;
    int warps, block_m;
    const char *name;
} run_kind;

static stof_mask *compile_case(acase *c)
{
    int64_t bshape[1] = {c->B};
    stof_tensor tq = stof_tensor_make(c->lens_q, STOF_I32, STOF_MEM_HOST, 1, bshape);
    stof_tensor tk = stof_tensor_make(c->lens_k, STOF_I32, STOF_MEM_HOST, 1, bshape);
    stof_mask_params mp = stof_mask_default_params();
    mp.batch = c->B;
    mp.heads = c->H;
    mp.len_q = c->Lq;
    mp.len_k = c->Lk;
    mp.lengths_q = c->has_lengths ? &tq : NULL;
    mp.lengths_k = c->has_lengths ? &tk : NULL;
    mp.tile_m = c->tile_m;
    mp.tile_n = c->tile_n;
    mp.builder = on_gpu ? c->builder : STOF_BUILDER_AUTO;
    stof_mask *m = NULL;
    stof_status st = stof_mask_compile(ctx, c->spec, &mp, &m);
    CHECK(st == STOF_OK, "%s: mask compile: %s: %s", c->name, stof_status_str(st),
          stof_last_error());
    return m;
}

static void describe(acase *c, const char *tag)
{
    char spec[96];
    size_t need = 0;
    if (stof_mask_spec_format(c->spec, spec, sizeof spec, &need) != STOF_OK)
        snprintf(spec, sizeof spec, "?");
    const char *lay[3] = {"bhld", "blhd", "packed"};
    snprintf(c->name, sizeof c->name, "%s{%s%s} B%d H%d L%d/%d D%d %s %dx%d %s", tag, spec,
             need > sizeof spec ? "..." : "", c->B, c->H, c->Lq, c->Lk, c->D,
             stof_dtype_name(c->dt), c->tile_m, c->tile_n, lay[c->layout]);
}

static void run_case(acase *c, const char *tag)
{
    describe(c, tag);
    cases_run++;
    int32_t cu_q[9], cu_k[9];
    cu_q[0] = cu_k[0] = 0;
    for (int b = 0; b < c->B; b++) {
        cu_q[b + 1] = cu_q[b] + seq_len(c, b, false);
        cu_k[b + 1] = cu_k[b] + seq_len(c, b, true);
    }
    float amp = c->amp > 0 ? c->amp : 1.5f;
    operand q, k, v, o;
    operand_make(c, &q, c->Lq, cu_q, false, amp, true);
    operand_make(c, &k, c->Lk, cu_k, true, amp, true);
    if (c->spike > 0) spike_keys(c, &k);
    operand_make(c, &v, c->Lk, cu_k, true, 1.0f, true);
    operand_make(c, &o, c->Lq, cu_q, false, 0.0f, false);
    void *cuq_dev = buf_alloc(sizeof cu_q), *cuk_dev = buf_alloc(sizeof cu_k);
    buf_put(cuq_dev, cu_q, sizeof cu_q);
    buf_put(cuk_dev, cu_k, sizeof cu_k);
    int64_t cshape[1] = {c->B + 1};
    stof_tensor cuq = stof_tensor_make(cuq_dev, STOF_I32, mem_kind(), 1, cshape);
    stof_tensor cuk = stof_tensor_make(cuk_dev, STOF_I32, mem_kind(), 1, cshape);
    bool packed = c->layout == LAYOUT_PACKED;
    stof_mask *mask = compile_case(c);
    if (mask && c->want_split)
        CHECK(stof_mask_tiles_view(mask)->split == c->want_split, "%s: split %d, want %d", c->name,
              stof_mask_tiles_view(mask)->split, c->want_split);
    float scale = c->scale != 0.0f ? c->scale : 1.0f / sqrtf((float)c->D);
    reference ref;
    reference_make(c, &q, &k, &v, scale, &ref);

    /* Runs: AUTO, each kernel forced through the params, then each block-wise
     * configuration that serves the tiles (4 warps of 16 rows; on 128-row tiles
     * also 8 warps of 16 rows and 4 of 32, the latter up to head dim 64), then
     * the sm_90 kernel forced and in each configuration (one warpgroup of 64
     * rows; on 128-row tiles also two of 64 rows each), and the warp-specialised
     * sm_90 kernel forced where it serves (head dim 128, all-visible, causal or
     * a band). */
    const run_kind runs[10] = {{STOF_ATTN_AUTO, 0, 0, "auto"},
                              {STOF_ATTN_BLOCKWISE, 0, 0, "blockwise"},
                              {STOF_ATTN_ROWWISE, 0, 0, "rowwise"},
                              {STOF_ATTN_BLOCKWISE, 4, 64, "blockwise/4 warps"},
                              {STOF_ATTN_BLOCKWISE, 8, 128, "blockwise/8 warps"},
                              {STOF_ATTN_BLOCKWISE, 4, 128, "blockwise/4 warps x 32 rows"},
                              {STOF_ATTN_BLOCKWISE_SM90, 0, 0, "blockwise_sm90"},
                              {STOF_ATTN_BLOCKWISE_SM90, 4, 64, "blockwise_sm90/1 warpgroup"},
                              {STOF_ATTN_BLOCKWISE_SM90, 8, 128, "blockwise_sm90/2 warpgroups"},
                              {STOF_ATTN_BLOCKWISE_SM90_WS, 0, 0, "blockwise_sm90_ws"}};
    bool blockwise_ok = (c->tile_m == 64 || c->tile_m == 128) && c->tile_n == 64;
    /* A split too wide for the sm_90 kernel is not its case (test_misuse). */
    bool split_wide = mask && stof_mask_tiles_view(mask)->split > ATTN_SM90_MAX_SPLIT;
    bool sm90_case = sm90_ok && blockwise_ok && (c->D == 64 || c->D == 128) && !split_wide;
    const mask_tiles *tv = mask ? stof_mask_tiles_view(mask) : NULL;
    bool ws_case = sm90_ok && c->D == 128 && tv && (tv->all_visible || tv->causal || tv->band) &&
                   tv->split == 1;
    for (int kk = 0; mask && kk < (on_gpu ? 10 : 1); kk++) {
        const run_kind *rk = &runs[kk];
        if (rk->kernel == STOF_ATTN_BLOCKWISE_SM90_WS && !ws_case) continue;
        if (rk->kernel == STOF_ATTN_BLOCKWISE_SM90 ? !sm90_case : kk > 0 && c->sm90_only) continue;
        if (rk->kernel == STOF_ATTN_BLOCKWISE && !blockwise_ok) continue;
        if (rk->block_m == 128 && c->tile_m != 128) continue;
        if (rk->block_m == 32 * rk->warps && c->D > 64) continue;
        stof_attn_params p = stof_attn_default_params();
        p.scale = c->scale;
        p.kernel = rk->warps ? STOF_ATTN_AUTO : rk->kernel;
        stof_attn_choice ch;
        memset(&ch, 0, sizeof ch);
        stof_status st = STOF_OK;
        if (rk->warps) {
            ch.kernel = rk->kernel;
            ch.warps = rk->warps;
            ch.block_m = rk->block_m;
        } else {
            st = stof_attention_select(ctx, &p, &q.t, mask, &ch);
            CHECK(st == STOF_OK, "%s [%s]: select: %s", c->name, rk->name, stof_last_error());
            CHECK(st != STOF_OK || ch.split == stof_mask_tiles_view(mask)->split,
                  "%s [%s]: select reports split %d, the mask has %d", c->name, rk->name, ch.split,
                  stof_mask_tiles_view(mask)->split);
            if (on_gpu && kk > 0)
                CHECK(ch.kernel == rk->kernel, "%s: forced %s, selected %s", c->name, rk->name,
                      kernel_name(ch.kernel));
        }
        buf_put(o.dev, o.host, (size_t)o.elems * 2); /* o.host is all NaN here */
        if (on_gpu) cudaDeviceSynchronize();
        st = attn_attention_with(ctx, &p, rk->warps ? &ch : NULL, &q.t, &k.t, &v.t, mask,
                                 packed ? &cuq : NULL, packed ? &cuk : NULL, &o.t);
        CHECK(st == STOF_OK, "%s [%s]: %s: %s", c->name, rk->name, stof_status_str(st),
              stof_last_error());
        CHECK_OK(stof_ctx_synchronize(ctx));
        uint16_t *poisoned = o.host;
        o.host = malloc((size_t)(o.elems > 0 ? o.elems : 1) * 2);
        buf_get(o.host, o.dev, (size_t)o.elems * 2);
        if (st == STOF_OK) {
            bool ok = check_output(c, &o, &ref, rk->name);
            if (!ok)
                fprintf(stderr, "  (ran %s, block %dx%d, %d warps)\n", kernel_name(ch.kernel),
                        ch.block_m, ch.block_n, ch.warps);
        }
        free(o.host);
        o.host = poisoned;
    }
    reference_free(c, &ref);
    stof_mask_destroy(mask);
    operand_free(&q);
    operand_free(&k);
    operand_free(&v);
    operand_free(&o);
    buf_free(cuq_dev);
    buf_free(cuk_dev);
}

/* ---------------------------------------------------------------- specs */

static stof_mask_spec *parse(const char *text)
{
    stof_mask_spec *s = NULL;
    stof_status st = stof_mask_spec_parse(text, &s);
    CHECK(st == STOF_OK, "parse %s: %s", text, stof_last_error());
    return s;
}

/* BigBird as in BENCH.md: band of 64-blocks, the first two block rows and
 * columns (global 128), three random blocks per block row. */
static stof_mask_spec *bigbird(int L, uint64_t seed)
{
    stof_mask_spec *s = NULL;
    CHECK_OK(stof_mask_spec_create(&s));
    int nb = (L + 63) / 64;
    uint8_t *lay = malloc((size_t)nb * nb);
    for (int r = 0; r < nb; r++)
        for (int cc = 0; cc < nb; cc++)
            lay[r * nb + cc] = abs(r - cc) <= 1;
    CHECK_OK(stof_mask_spec_add_blocks(s, 64, 1, nb, nb, lay));
    CHECK_OK(stof_mask_spec_add_global(s, L < 128 ? L : 128));
    CHECK_OK(stof_mask_spec_add_random(s, 64, 3, seed));
    free(lay);
    return s;
}

/* A random block layout over bs-blocks, `heads` planes, ~density ones. */
static void add_random_blocks(stof_mask_spec *s, int bs, int heads, int Lq, int Lk, int pct)
{
    int rows = (Lq + bs - 1) / bs, cols = (Lk + bs - 1) / bs;
    uint8_t *lay = malloc((size_t)heads * rows * cols);
    for (int e = 0; e < heads * rows * cols; e++)
        lay[e] = test_rng_int(&rng, 0, 99) < pct;
    CHECK_OK(stof_mask_spec_add_blocks(s, bs, heads, rows, cols, lay));
    free(lay);
}

/* One random part valid for these lengths. */
static void add_random_part(stof_mask_spec *s, int Lq, int Lk, int H, bool allow_heads)
{
    int L = Lq < Lk ? Lq : Lk;
    switch (test_rng_int(&rng, 0, 8)) {
    case 0: CHECK_OK(stof_mask_spec_add_causal(s)); break;
    case 1: {
        int w = (int)test_rng_int(&rng, 0, L > 300 ? 300 : L);
        CHECK_OK(stof_mask_spec_add_window(s, w, w));
        break;
    }
    case 2:
        CHECK_OK(stof_mask_spec_add_window(s, (int)test_rng_int(&rng, 0, L / 2 + 1),
                                           (int)test_rng_int(&rng, 0, L / 3 + 1)));
        break;
    case 3:
        CHECK_OK(stof_mask_spec_add_dilated(s, (int)test_rng_int(&rng, 1, 60),
                                            (int)test_rng_int(&rng, 2, 5)));
        break;
    case 4:
        CHECK_OK(stof_mask_spec_add_global(s, (int)test_rng_int(&rng, 1, L < 40 ? L : 40)));
        break;
    case 5: {
        int32_t tok[4];
        int n = (int)test_rng_int(&rng, 1, 4);
        for (int i = 0; i < n; i++)
            tok[i] = (int32_t)test_rng_int(&rng, 0, L - 1);
        for (int i = 1; i < n; i++) /* sorted, unique */
            for (int j = i; j > 0 && tok[j] < tok[j - 1]; j--) {
                int32_t x = tok[j];
                tok[j] = tok[j - 1];
                tok[j - 1] = x;
            }
        int m = 0;
        for (int i = 0; i < n; i++)
            if (m == 0 || tok[i] != tok[m - 1]) tok[m++] = tok[i];
        CHECK_OK(stof_mask_spec_add_global_list(s, tok, m));
        break;
    }
    case 6: {
        const int blocks[5] = {16, 32, 48, 64, 100};
        CHECK_OK(stof_mask_spec_add_random(s, blocks[test_rng_int(&rng, 0, 4)],
                                           (int)test_rng_int(&rng, 1, 3), test_rng_next(&rng)));
        break;
    }
    case 7: {
        const int bs[3] = {16, 32, 64};
        add_random_blocks(s, bs[test_rng_int(&rng, 0, 2)], allow_heads ? H : 1, Lq, Lk, 25);
        break;
    }
    default: CHECK_OK(stof_mask_spec_add_window(s, 0, 0)); break;
    }
}

static acase base_case(int B, int H, int L, int D, stof_dtype dt, int layout)
{
    acase c;
    memset(&c, 0, sizeof c);
    c.B = B;
    c.H = H;
    c.Lq = c.Lk = L;
    c.D = D;
    c.dt = dt;
    c.tile_m = c.tile_n = 64;
    c.layout = layout;
    c.builder = STOF_BUILDER_AUTO;
    return c;
}

static void set_lengths(acase *c, bool random)
{
    c->has_lengths = true;
    for (int b = 0; b < c->B; b++) {
        int lo = c->Lq / 2 > 0 ? c->Lq / 2 : 1;
        c->lens_q[b] = random ? (int32_t)test_rng_int(&rng, lo, c->Lq) : c->Lq;
        c->lens_k[b] = c->Lq == c->Lk ? c->lens_q[b] : (int32_t)test_rng_int(&rng, 1, c->Lk);
    }
}

static void run_and_free(acase *c, const char *tag)
{
    if (!c->spec) return;
    run_case(c, tag);
    stof_mask_spec_destroy(c->spec);
    c->spec = NULL;
}

/* ---------------------------------------------------------------- groups */

static const char *const bench_specs[] = {"full", "causal", "window:128", "dilated:128x2",
                                          "window:128,global:32"};

static void group_bench_masks(int max_len)
{
    const int Ls[2] = {1000, 4097};
    for (int li = 0; li < 2; li++) {
        int L = Ls[li];
        if (L > max_len) continue;
        int B = L > 2000 ? 1 : 2, H = L > 2000 ? 1 : 2;
        for (int m = 0; m < 7; m++) {
            for (int di = 0; di < 2; di++) {
                stof_dtype dt = di ? STOF_BF16 : STOF_F16;
                int D = L > 2000 ? (di ? 128 : 64) : 64;
                acase c = base_case(B, H, L, D, dt, (m + di) % 3);
                if (m < 5)
                    c.spec = parse(bench_specs[m]);
                else if (m == 5)
                    c.spec = bigbird(L, 1234 + (uint64_t)di);
                else {
                    c.spec = parse("full");
                    set_lengths(&c, true);
                }
                c.tile_m = (m + di) % 2 ? 128 : 64;
                run_and_free(&c, m == 6 ? "varlen " : "bench ");
            }
        }
    }
}

static void group_lengths_dims(int max_len)
{
    const int Ls[5] = {1, 17, 128, 1000, 4097};
    const int Ds[3] = {32, 64, 128};
    for (int li = 0; li < 5; li++) {
        if (Ls[li] > max_len) continue;
        for (int di = 0; di < 3; di++) {
            int L = Ls[li];
            stof_dtype dt = (li + di) % 2 ? STOF_BF16 : STOF_F16;
            acase c = base_case(L > 2000 ? 1 : 2, L > 2000 ? 1 : 3, L, Ds[di], dt, (li + di) % 3);
            c.spec =
                parse(L > 2000 ? "window:200,global:[3,700,2500]" : "causal,window:8:40,global:2");
            if (L > 100) set_lengths(&c, true);
            run_and_free(&c, "len/dim ");
        }
    }
}

static void group_random_unions(int n, int max_len)
{
    const int Ls[6] = {1, 17, 77, 128, 200, 1000};
    const int tiles[5][2] = {{64, 64}, {128, 64}, {32, 32}, {16, 16}, {128, 128}};
    const int Ds[3] = {32, 64, 128};
    for (int it = 0; it < n; it++) {
        int L = Ls[test_rng_int(&rng, 0, 5)];
        if (L > max_len) L = 128;
        int D = Ds[test_rng_int(&rng, 0, 2)];
        acase c = base_case((int)test_rng_int(&rng, 1, 2), (int)test_rng_int(&rng, 1, 2), L, D,
                            test_rng_int(&rng, 0, 1) ? STOF_BF16 : STOF_F16,
                            (int)test_rng_int(&rng, 0, 2));
        int t = (int)test_rng_int(&rng, 0, 4);
        c.tile_m = tiles[t][0];
        c.tile_n = tiles[t][1];
        c.builder = test_rng_int(&rng, 0, 1) ? STOF_BUILDER_CPU : STOF_BUILDER_AUTO;
        CHECK_OK(stof_mask_spec_create(&c.spec));
        int parts = (int)test_rng_int(&rng, 1, 3);
        for (int p = 0; p < parts; p++)
            add_random_part(c.spec, c.Lq, c.Lk, c.H, true);
        if (test_rng_int(&rng, 0, 2) == 0) set_lengths(&c, true);
        run_and_free(&c, "union ");
    }
}

/* Per-batch (lengths + random blocks) and per-head (blocks, dense) masks. */
static void group_per_batch_head(void)
{
    for (int it = 0; it < 4; it++) {
        acase c = base_case(3, 2, 300, 64, it % 2 ? STOF_BF16 : STOF_F16, it % 3);
        c.spec = parse(it % 2 ? "random:64x2@99,window:20" : "random:32x3@7");
        set_lengths(&c, true);
        c.tile_m = it >= 2 ? 128 : 64;
        run_and_free(&c, "per-batch ");
    }
    for (int it = 0; it < 4; it++) {
        acase c = base_case(2, 3, 200, it < 2 ? 64 : 32, it % 2 ? STOF_BF16 : STOF_F16, it % 3);
        CHECK_OK(stof_mask_spec_create(&c.spec));
        add_random_blocks(c.spec, it % 2 ? 48 : 32, c.H, c.Lq, c.Lk, 35);
        run_and_free(&c, "per-head blocks ");
    }
    for (int it = 0; it < 3; it++) {
        acase c = base_case(2, 3, 150, 64, it % 2 ? STOF_BF16 : STOF_F16, it % 3);
        CHECK_OK(stof_mask_spec_create(&c.spec));
        int bd = it == 2 ? c.B : 1, hd = it == 2 ? 1 : c.H;
        int64_t n = (int64_t)bd * hd * c.Lq * c.Lk;
        uint8_t *dense = malloc((size_t)n);
        for (int64_t e = 0; e < n; e++)
            dense[e] = test_rng_int(&rng, 0, 99) < (it ? 5 : 30);
        int64_t shape[4] = {bd, hd, c.Lq, c.Lk};
        stof_tensor t = stof_tensor_make(dense, STOF_U8, STOF_MEM_HOST, 4, shape);
        CHECK_OK(stof_mask_spec_add_dense(c.spec, &t));
        if (it == 1) CHECK_OK(stof_mask_spec_add_window(c.spec, 3, 3));
        c.tile_m = it == 1 ? 128 : 64;
        run_case(&c, "dense part ");
        stof_mask_spec_destroy(c.spec);
        free(dense);
    }
}

/* Packed variable-length batches: zero, one and full-length sequences. */
static void group_packed(void)
{
    const char *specs[4] = {"full", "causal", "window:33,global:5", "dilated:9x3,random:64x2@3"};
    for (int it = 0; it < 8; it++) {
        acase c = base_case(4, 2, it < 4 ? 130 : 700, 32 << (it % 3), it % 2 ? STOF_BF16 : STOF_F16,
                            LAYOUT_PACKED);
        c.spec = parse(specs[it % 4]);
        set_lengths(&c, true);
        c.lens_q[0] = c.lens_k[0] = 1;
        c.lens_q[1] = c.lens_k[1] = c.Lq;
        if (it % 2) c.lens_q[2] = c.lens_k[2] = 0;
        c.tile_m = it % 4 == 3 ? 128 : 64;
        run_and_free(&c, "packed ");
    }
}

/* Cross attention (Lq != Lk), explicit scales, sharp softmax. */
static void group_cross_and_scale(void)
{
    const char *specs[3] = {"full", "causal", "window:40:90,global:[0,99]"};
    for (int it = 0; it < 6; it++) {
        acase c = base_case(2, 2, 100, 64, it % 2 ? STOF_BF16 : STOF_F16, it % 3);
        c.Lk = it < 3 ? 333 : 65;
        c.spec = parse(specs[it % 3]);
        if (it == 4) set_lengths(&c, true);
        run_and_free(&c, "cross ");
    }
    for (int it = 0; it < 4; it++) {
        acase c = base_case(1, 2, 500, it < 2 ? 64 : 128, it % 2 ? STOF_BF16 : STOF_F16, it % 3);
        c.spec = parse(it % 2 ? "causal" : "window:100,random:64x2@5");
        c.amp = 4.0f;
        c.scale = it < 2 ? 0.0f : it == 2 ? 0.5f : -0.5f; /* a negative scale flips the order */
        run_and_free(&c, "sharp ");
    }
}

/* Scores that jump far past the row maxima of the tiles before them (gain
 * 24: exponentials against the old maxima of 2^20 and more; gain 400: most
 * of them overflow fp32), every kernel, fp16 and bf16, head dims 64 and 128,
 * padded and packed, 64- and 128-row tiles. */
static void group_spikes(void)
{
    const char *const specs[3] = {"full", "causal", "window:128,global:32"};
    for (int it = 0; it < 12; it++) {
        int D = it % 4 < 2 ? 64 : 128;
        acase c =
            base_case(2, 2, it % 3 == 2 ? 1000 : 500, D, it % 2 ? STOF_BF16 : STOF_F16, it % 3);
        c.spec = parse(specs[it % 3]);
        c.spike = it < 6 ? 24.0f : 400.0f;
        c.tile_m = (it / 2) % 2 ? 128 : 64;
        if (c.layout == LAYOUT_PACKED) set_lengths(&c, true);
        run_and_free(&c, "spike ");
    }
}

/* The Hopper kernel over what it serves: dense, causal, window, Longformer-like
 * (window + global), BigBird-like (random blocks), per-batch lengths in the
 * padded and the packed layout; L in {1, 17, 64, 128, 1000, 4097}; head dims
 * 64 and 128; fp16 and bf16; 64- and 128-row tiles, so one and two
 * warpgroups. Each case runs AUTO and the sm_90 kernel only. */
static void group_sm90(int max_len)
{
    const int Ls[6] = {1, 17, 64, 128, 1000, 4097};
    const char *const specs[4] = {"full", "causal", "window:128", "window:128,global:32"};
    for (int li = 0; li < 6; li++) {
        int L = Ls[li];
        if (L > max_len) continue;
        for (int m = 0; m < 7; m++) {
            for (int di = 0; di < 2; di++) {
                bool varlen = m >= 5, big = L > 2000;
                int layout = m == 6 ? LAYOUT_PACKED : (m + li) % 2 ? LAYOUT_BLHD : LAYOUT_BHLD;
                acase c = base_case(big && !varlen ? 1 : 2, big && varlen ? 1 : 2, L, di ? 128 : 64,
                                    (m + di + li) % 2 ? STOF_BF16 : STOF_F16, layout);
                if (m < 4) {
                    c.spec = parse(specs[m]);
                } else if (m == 4 && L >= 128) {
                    c.spec = bigbird(L, 77 + (uint64_t)li);
                } else if (m == 4) {
                    CHECK_OK(stof_mask_spec_create(&c.spec));
                    add_random_blocks(c.spec, 16, 1, L, L, 40);
                } else {
                    c.spec = parse(m == 5 ? "causal" : "window:100,global:8");
                    set_lengths(&c, true);
                }
                c.tile_m = (m + di) % 2 ? 128 : 64;
                c.sm90_only = true;
                run_and_free(&c, "sm90 ");
            }
        }
    }
}

/* Dilated masks stored split by residue class: each class runs as a sequence
 * of its own (rows d apart) in every kernel; dilations 2 to 7, class lengths
 * from 1 up, padded and packed layouts, 64- and 128-row tiles, head dims 32 to
 * 128, fp16 and bf16. The reference is the spec's dense plane. */
static void group_split(int max_len)
{
    static const struct {
        const char *spec;
        int B, H, L, D, layout, tile_m, bf16, split;
    } cases[] = {
        {"dilated:128x2", 2, 2, 1024, 64, LAYOUT_BHLD, 64, 0, 2},
        {"dilated:128x2", 1, 2, 4096, 128, LAYOUT_BLHD, 128, 1, 2},
        {"dilated:128x2", 1, 1, 4096, 64, LAYOUT_BHLD, 128, 0, 2},
        {"dilated:9x3", 2, 3, 51, 32, LAYOUT_BHLD, 64, 1, 3},
        {"dilated:5x4", 2, 2, 128, 64, LAYOUT_PACKED, 64, 1, 4},
        {"dilated:40x2,dilated:7x2", 2, 2, 1000, 128, LAYOUT_BLHD, 128, 0, 2},
        {"dilated:0x2", 3, 2, 2, 64, LAYOUT_BHLD, 64, 1, 2},
        {"dilated:300x2", 2, 1, 1000, 64, LAYOUT_PACKED, 128, 0, 2},
        {"dilated:33x7", 1, 3, 700, 128, LAYOUT_BHLD, 64, 1, 7},
        {"dilated:20x2", 2, 2, 130, 64, LAYOUT_BLHD, 64, 0, 2},
        {"dilated:50x3", 2, 2, 999, 64, LAYOUT_PACKED, 64, 1, 3},
        {"dilated:16x4", 2, 2, 1024, 128, LAYOUT_PACKED, 128, 0, 4},
        {"dilated:64x4", 1, 2, 4096, 64, LAYOUT_BLHD, 64, 1, 4},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        if (cases[k].L > max_len) continue;
        acase c = base_case(cases[k].B, cases[k].H, cases[k].L, cases[k].D,
                            cases[k].bf16 ? STOF_BF16 : STOF_F16, cases[k].layout);
        c.spec = parse(cases[k].spec);
        c.tile_m = cases[k].tile_m;
        c.want_split = cases[k].split;
        run_and_free(&c, "split ");
    }
}

/* ---------------------------------------------------------------- misuse */

/* q, k, v and out of one shape, fp16, one after another from dev (n elements
 * apart). */
static void operands_at(char *dev, int64_t n, const int64_t shape[4], stof_tensor *q,
                        stof_tensor *k, stof_tensor *v, stof_tensor *o)
{
    *q = stof_tensor_make(dev, STOF_F16, STOF_MEM_DEVICE, 4, shape);
    *k = stof_tensor_make(dev + n * 2, STOF_F16, STOF_MEM_DEVICE, 4, shape);
    *v = stof_tensor_make(dev + n * 4, STOF_F16, STOF_MEM_DEVICE, 4, shape);
    *o = stof_tensor_make(dev + n * 6, STOF_F16, STOF_MEM_DEVICE, 4, shape);
}

static void test_misuse(void)
{
    stof_mask_spec *spec = parse("causal");
    if (!spec) return;
    const int B = 1, H = 2, L = 64, D = 64;
    acase c = base_case(B, H, L, D, STOF_F16, LAYOUT_BHLD);
    c.spec = spec;
    stof_mask *mask = compile_case(&c);
    int64_t shape[4] = {B, H, L, D}, n = (int64_t)B * H * L * D;
    char *dev = buf_alloc((size_t)n * 2 * 4 + 64);
    stof_tensor q, k, v, o;
    operands_at(dev, n, shape, &q, &k, &v, &o);
    CHECK_OK(stof_attention(ctx, NULL, &q, &k, &v, mask, NULL, NULL, &o));
    CHECK_OK(stof_ctx_synchronize(ctx));
    /* f32 on the GPU */
    stof_tensor q32 = q, k32 = k, v32 = v, o32 = o;
    q32.dtype = k32.dtype = v32.dtype = o32.dtype = STOF_F32;
    CHECK_STATUS(stof_attention(ctx, NULL, &q32, &k32, &v32, mask, NULL, NULL, &o32),
                 STOF_ERR_UNSUPPORTED);
    /* head dim 48 */
    int64_t shape48[4] = {B, H, L, 48};
    stof_tensor q48 = stof_tensor_make(dev, STOF_F16, STOF_MEM_DEVICE, 4, shape48);
    CHECK_STATUS(stof_attention(ctx, NULL, &q48, &q48, &q48, mask, NULL, NULL, &q48),
                 STOF_ERR_UNSUPPORTED);
    CHECK(strstr(stof_last_error(), "48") != NULL, "message: %s", stof_last_error());
    /* unaligned base, unaligned stride */
    stof_tensor qu = q;
    qu.data = dev + 2;
    CHECK_STATUS(stof_attention(ctx, NULL, &qu, &k, &v, mask, NULL, NULL, &o),
                 STOF_ERR_INVALID_ARG);
    stof_tensor qst = q;
    qst.stride[2] = D - 4;
    qst.stride[1] = (D - 4) * L;
    CHECK_STATUS(stof_attention(ctx, NULL, &qst, &k, &v, mask, NULL, NULL, &o),
                 STOF_ERR_INVALID_ARG);
    CHECK(strstr(stof_last_error(), "multiple of 8") != NULL, "message: %s", stof_last_error());
    /* host memory on a GPU ctx */
    stof_tensor qh = q;
    qh.memory = STOF_MEM_HOST;
    CHECK_STATUS(stof_attention(ctx, NULL, &qh, &k, &v, mask, NULL, NULL, &o),
                 STOF_ERR_INVALID_ARG);
    /* forced block-wise on a tile shape it does not serve */
    c.tile_m = c.tile_n = 32;
    stof_mask *m32 = compile_case(&c);
    stof_attn_params p = stof_attn_default_params();
    p.kernel = STOF_ATTN_BLOCKWISE;
    CHECK_STATUS(stof_attention(ctx, &p, &q, &k, &v, m32, NULL, NULL, &o), STOF_ERR_UNSUPPORTED);
    CHECK(strstr(stof_last_error(), "64x64") && strstr(stof_last_error(), "32x32"), "message: %s",
          stof_last_error());
    /* an explicit configuration the tiles cannot take: 8 warps (128 rows) on 64-row tiles */
    stof_attn_choice eight;
    memset(&eight, 0, sizeof eight);
    eight.kernel = STOF_ATTN_BLOCKWISE;
    eight.warps = 8;
    CHECK_STATUS(attn_attention_with(ctx, NULL, &eight, &q, &k, &v, mask, NULL, NULL, &o),
                 STOF_ERR_UNSUPPORTED);
    /* The sm_90 kernel: refused off Hopper (or without its objects), and on
     * tiles, head dims and configurations it does not serve. */
    stof_attn_params p90 = stof_attn_default_params();
    p90.kernel = STOF_ATTN_BLOCKWISE_SM90;
    if (sm90_ok) {
        CHECK_OK(stof_attention(ctx, &p90, &q, &k, &v, mask, NULL, NULL, &o));
        CHECK_OK(stof_ctx_synchronize(ctx));
    } else {
        CHECK_STATUS(stof_attention(ctx, &p90, &q, &k, &v, mask, NULL, NULL, &o),
                     STOF_ERR_UNSUPPORTED);
        CHECK(strstr(stof_last_error(), "9.0") != NULL, "message: %s", stof_last_error());
    }
    CHECK_STATUS(stof_attention(ctx, &p90, &q, &k, &v, m32, NULL, NULL, &o), STOF_ERR_UNSUPPORTED);
    eight.kernel = STOF_ATTN_BLOCKWISE_SM90;
    CHECK_STATUS(attn_attention_with(ctx, NULL, &eight, &q, &k, &v, mask, NULL, NULL, &o),
                 STOF_ERR_UNSUPPORTED);
    int64_t shape32[4] = {B, H, L, 32};
    stof_tensor q32d, k32d, v32d, o32d;
    operands_at(dev, n, shape32, &q32d, &k32d, &v32d, &o32d);
    CHECK_STATUS(stof_attention(ctx, &p90, &q32d, &k32d, &v32d, mask, NULL, NULL, &o32d),
                 STOF_ERR_UNSUPPORTED);
    /* The warp-specialised sm_90 kernel: head dim 128 only (this causal call
     * is 64), forced through the params or given as a choice; off Hopper,
     * refused with the device named. */
    stof_attn_params pws = stof_attn_default_params();
    pws.kernel = STOF_ATTN_BLOCKWISE_SM90_WS;
    CHECK_STATUS(stof_attention(ctx, &pws, &q, &k, &v, mask, NULL, NULL, &o), STOF_ERR_UNSUPPORTED);
    CHECK(strstr(stof_last_error(), sm90_ok ? "head dim 64" : "9.0") != NULL, "message: %s",
          stof_last_error());
    stof_attn_choice ws;
    memset(&ws, 0, sizeof ws);
    ws.kernel = STOF_ATTN_BLOCKWISE_SM90_WS;
    CHECK_STATUS(attn_attention_with(ctx, NULL, &ws, &q, &k, &v, mask, NULL, NULL, &o),
                 STOF_ERR_UNSUPPORTED);
    /* A mask split into more residue classes than the sm_90 kernel's copy
     * engine steps over: refused by it, forced or given, with the reason;
     * AUTO runs another kernel. */
    stof_mask_spec *dil = parse("dilated:4x7");
    const int L7 = 56;
    acase cd = base_case(B, H, L7, D, STOF_F16, LAYOUT_BHLD);
    cd.spec = dil;
    stof_mask *m7 = dil ? compile_case(&cd) : NULL;
    if (m7) {
        CHECK(stof_mask_tiles_view(m7)->split == 7, "dilated:4x7 at %d: split %d", L7,
              stof_mask_tiles_view(m7)->split);
        int64_t shape7[4] = {B, H, L7, D};
        stof_tensor q7, k7, v7, o7;
        operands_at(dev, n, shape7, &q7, &k7, &v7, &o7);
        stof_attn_choice pick;
        CHECK_OK(stof_attention_select(ctx, NULL, &q7, m7, &pick));
        CHECK(pick.kernel != STOF_ATTN_BLOCKWISE_SM90 && pick.split == 7,
              "split 7: selected kernel %d, split %d", (int)pick.kernel, pick.split);
        CHECK_OK(stof_attention(ctx, NULL, &q7, &k7, &v7, m7, NULL, NULL, &o7));
        CHECK_OK(stof_ctx_synchronize(ctx));
        CHECK_STATUS(stof_attention(ctx, &p90, &q7, &k7, &v7, m7, NULL, NULL, &o7),
                     STOF_ERR_UNSUPPORTED);
        if (sm90_ok) {
            CHECK(strstr(stof_last_error(), "dilation") != NULL, "message: %s", stof_last_error());
            stof_attn_choice given;
            memset(&given, 0, sizeof given);
            given.kernel = STOF_ATTN_BLOCKWISE_SM90;
            given.warps = 4;
            CHECK_STATUS(attn_attention_with(ctx, NULL, &given, &q7, &k7, &v7, m7, NULL, NULL, &o7),
                         STOF_ERR_UNSUPPORTED);
            CHECK(strstr(stof_last_error(), "dilation") != NULL, "message: %s", stof_last_error());
        }
    }
    stof_mask_destroy(m7);
    stof_mask_spec_destroy(dil);
    /* a mask compiled on a CPU context */
    stof_ctx_params cp = stof_ctx_default_params();
    cp.device = STOF_DEVICE_CPU;
    stof_ctx *cpu = NULL;
    CHECK_OK(stof_ctx_create(&cp, &cpu));
    stof_mask_params mp = stof_mask_default_params();
    mp.batch = B;
    mp.heads = H;
    mp.len_q = mp.len_k = L;
    stof_mask *mcpu = NULL;
    CHECK_OK(stof_mask_compile(cpu, spec, &mp, &mcpu));
    CHECK_STATUS(stof_attention(ctx, NULL, &q, &k, &v, mcpu, NULL, NULL, &o), STOF_ERR_INVALID_ARG);
    stof_mask_destroy(mcpu);
    stof_ctx_destroy(cpu);
    stof_mask_destroy(m32);
    stof_mask_destroy(mask);
    buf_free(dev);
    stof_mask_spec_destroy(spec);
}

int main(void)
{
    bool cpu_mode = getenv("STOF_TEST_ATTN_CPU") && atoi(getenv("STOF_TEST_ATTN_CPU")) != 0;
    if (!cpu_mode) test_require_gpu("test_attn_gpu");
    test_rng_init(&rng, test_seed());
    stof_ctx_params cp = stof_ctx_default_params();
    cp.device = cpu_mode ? STOF_DEVICE_CPU : STOF_DEVICE_GPU;
    CHECK_OK(stof_ctx_create(&cp, &ctx));
    if (!ctx) return test_finish("test_attn_gpu");
    on_gpu = !cpu_mode;
    int max_len = cpu_mode ? 1000 : 4097;
#ifdef STOF_HAVE_ATTN_SM90
    bool sm90_built = true;
#else
    bool sm90_built = false;
#endif
    sm90_ok = on_gpu && sm90_built && ctx->cc_major == 9 && ctx->cc_minor == 0;
    if (!on_gpu)
        snprintf(sm90_why, sizeof sm90_why, "CPU context");
    else if (!sm90_built)
        snprintf(sm90_why, sizeof sm90_why, "sm_90a kernels not built (no 90 in STOF_CUDA_ARCHS)");
    else
        snprintf(sm90_why, sizeof sm90_why, "device has compute capability %d.%d, not 9.0",
                 ctx->cc_major, ctx->cc_minor);
    if (!sm90_ok) printf("test_attn_gpu: sm_90 kernel cases skipped: %s\n", sm90_why);
    if (on_gpu) test_misuse();
    group_bench_masks(max_len);
    group_lengths_dims(max_len);
    group_random_unions(cpu_mode ? 12 : 40, max_len);
    group_per_batch_head();
    group_packed();
    group_cross_and_scale();
    group_spikes();
    group_split(max_len);
    if (sm90_ok) group_sm90(max_len);
    printf("%d cases on the %s\n", cases_run, on_gpu ? "GPU" : "CPU");
    stof_ctx_destroy(ctx);
    return test_finish("test_attn_gpu");
}
