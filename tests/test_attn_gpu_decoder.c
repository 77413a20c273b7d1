/*
 * test_attn_gpu_decoder.c — the GPU attention kernels on decoder and T5
 * inputs against the CPU reference (cpu_attention_ex, double accumulation,
 * on the fp16/bf16-rounded inputs and masks built straight from the spec).
 *
 * The sweep (sampled from the cross product so that it runs in minutes):
 * head dims 32, 64, 80, 96, 128, 256 x fp16/bf16 x {dense, causal, window,
 * longformer, bigbird, varlen, packed} x {MHA, GQA 4:1, MQA} x {no bias, T5
 * buckets, ALiBi, bias tensor, soft cap} x {Lq = Lk, Lq < Lk (bottom-right
 * offset), top-left}, L in {1, 17, 128, 1000, 4097}. Every case runs under
 * AUTO (a bias or cap at head dim 64/128: the sm_90 kernel on Hopper) and
 * block-wise forced; where the call has no modifier and a common head dim,
 * the row-wise and the sm_90 kernel forced too (they read K/V by head group), and the
 * warp-specialised one forced wherever it serves (head dim 128; dense, causal and band
 * masks; no bias, ALiBi or a soft cap). A second sweep (ws_sweep) covers that kernel's
 * own ground, a third (ws_multi_sweep) its persistent CTAs walking many work items.
 * Inputs are fresh random
 * values with NaN in every padding row; the output is poisoned (NaN) before every run; rows with no
 * visible key must come back as exact zeros. Long rows are checked on a sample of query rows.
 * STOF_TEST_MAX_L=N skips cases longer than N (the sanitizer's subset);
 * STOF_TEST_WS_ONLY=1 runs ws_sweep and ws_multi_sweep alone, under AUTO and with the
 * warp-specialised kernel forced only (the sanitizers' case). A fourth sweep
 * (t5_sweep) covers every path of the T5 bias; STOF_TEST_T5_ONLY=1 runs it
 * alone.
 */
#include "attn/attn.h"
#include "cpu/cpu_ref.h"
#include "mask/mask.h"
#include "testlib.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

static test_rng rng;
static stof_ctx *ctx;
static int runs_done, runs_skipped;
static bool ws_only; /* STOF_TEST_WS_ONLY */
static bool ws_here; /* the warp-specialised kernel runs here (sm_90a built, a 9.0 device) */

typedef struct dcase {
    const char *mask; /* spec text */
    int B, H, Hkv, Lq, Lk, D;
    stof_dtype dt;
    bool lengths, packed;
    int32_t lens_q[4], lens_k[4];
    int bias_kind; /* STOF_BIAS_* */
    float softcap;
    int t5_buckets, t5_bidir, t5_maxd;
    float bias_amp;     /* T5 and tensor values drawn from [-amp, amp] (0: 3) */
    bool sm90_too;      /* a modifier case that also forces the sm_90 kernel */
    stof_dtype bias_dt; /* tensor bias */
    bool bias_bcast;    /* tensor [1, H, Lq, Lk] */
    bool want_ws;       /* the warp-specialised kernel must serve it forced (where ws_here) */
    int repeats;        /* the forced warp-specialised run again this many times, each output
                           the first's, byte for byte */
    char name[200];
} dcase;

static void *dev_put(const void *src, size_t bytes)
{
    void *p = NULL;
    if (cudaMalloc(&p, bytes ? bytes : 16) != cudaSuccess) {
        fprintf(stderr, "cudaMalloc of %zu bytes failed\n", bytes);
        exit(1);
    }
    if (src && bytes) cudaMemcpy(p, src, bytes, cudaMemcpyHostToDevice);
    return p;
}

static int seq_len(const dcase *c, int b, bool key)
{
    if (!c->lengths) return key ? c->Lk : c->Lq;
    return key ? c->lens_k[b] : c->lens_q[b];
}

/* Element (b, h, i, d) of an operand with `heads` heads: padded [B, heads, L, D]
 * or packed [T, heads, D] at the sequence's first token cu[b]. */
static int64_t at(const dcase *c, const int32_t *cu, int heads, int L, int b, int h, int i, int d)
{
    if (c->packed) return ((int64_t)(cu[b] + i) * heads + h) * c->D + d;
    return (((int64_t)b * heads + h) * L + i) * c->D + d;
}

/* Stored 16-bit values (NaN where no real token is) and the logical fp32
 * [B, heads, L, D] the reference reads (zeros past the lengths). */
static void make_operand(const dcase *c, const int32_t *cu, int heads, int L, bool key, float amp,
                         uint16_t **stored, float **logical, int64_t *elems)
{
    *elems = c->packed ? (int64_t)cu[c->B] * heads * c->D : (int64_t)c->B * heads * L * c->D;
    *stored = malloc((size_t)(*elems > 0 ? *elems : 1) * 2);
    *logical = calloc((size_t)c->B * heads * L * c->D, sizeof(float));
    for (int64_t e = 0; e < *elems; e++)
        (*stored)[e] = c->dt == STOF_F16 ? 0x7e00 : 0x7fc0;
    for (int b = 0; b < c->B; b++)
        for (int h = 0; h < heads; h++)
            for (int i = 0; i < seq_len(c, b, key); i++)
                for (int d = 0; d < c->D; d++) {
                    int64_t off = at(c, cu, heads, L, b, h, i, d);
                    stof_store_f(*stored, c->dt, off, test_rng_float(&rng, -amp, amp));
                    (*logical)[(((int64_t)b * heads + h) * L + i) * c->D + d] =
                        stof_load_f(*stored, c->dt, off);
                }
}

static stof_tensor tensor_of(const dcase *c, void *dev, int64_t tokens, int heads, int L)
{
    if (c->packed) {
        int64_t shape[3] = {tokens > 0 ? tokens : 1, heads, c->D};
        return stof_tensor_make(dev, c->dt, STOF_MEM_DEVICE, 3, shape);
    }
    int64_t shape[4] = {c->B, heads, L, c->D};
    return stof_tensor_make(dev, c->dt, STOF_MEM_DEVICE, 4, shape);
}

/* Query rows checked: all of short planes, else edges, ends and random rows. */
static int pick_rows(const dcase *c, int b, int *rows)
{
    int n = 0, len = seq_len(c, b, false);
    if ((int64_t)c->H * c->Lq * c->Lk <= (int64_t)1 << 21) {
        for (int i = 0; i < len; i++)
            rows[n++] = i;
        return n;
    }
    const int fixed[] = {0, 1, 15, 16, 63, 64, 65, 127, 128, 1000, 2047, 2048, 4095, 4096};
    for (size_t k = 0; k < sizeof fixed / sizeof fixed[0]; k++)
        if (fixed[k] < len) rows[n++] = fixed[k];
    if (len - 1 > 0) rows[n++] = len - 1;
    for (int k = 0; k < 24; k++)
        rows[n++] = (int)test_rng_int(&rng, 0, len - 1);
    return n;
}

static void describe(dcase *c)
{
    static const char *bias[] = {"none", "t5", "alibi", "tensor"};
    char t5[64] = "";
    if (c->bias_kind == STOF_BIAS_T5)
        snprintf(t5, sizeof t5, "(%d buckets, %s, max_distance %d, amp %g)", c->t5_buckets,
                 c->t5_bidir ? "bidirectional" : "unidirectional", c->t5_maxd,
                 (double)(c->bias_amp > 0.0f ? c->bias_amp : 3.0f));
    snprintf(c->name, sizeof c->name, "{%s} B%d H%d/%d L%d/%d D%d %s %s%s bias %s%s%s cap %g",
             c->mask, c->B, c->H, c->Hkv, c->Lq, c->Lk, c->D, stof_dtype_name(c->dt),
             c->packed ? "packed" : "padded", c->lengths ? "+lengths" : "", bias[c->bias_kind],
             c->bias_kind == STOF_BIAS_TENSOR ? (c->bias_bcast ? "[1,H]" : "[B,H]") : "", t5,
             (double)c->softcap);
}

static void run_case(dcase *c)
{
    describe(c);
    const int B = c->B, H = c->H, Hkv = c->Hkv, Lq = c->Lq, Lk = c->Lk, D = c->D;
    int32_t cu_q[5] = {0}, cu_k[5] = {0};
    for (int b = 0; b < B; b++) {
        cu_q[b + 1] = cu_q[b] + seq_len(c, b, false);
        cu_k[b + 1] = cu_k[b] + seq_len(c, b, true);
    }
    uint16_t *qs, *ks, *vs;
    float *ql, *kl, *vl;
    int64_t nq, nk, nv;
    make_operand(c, cu_q, H, Lq, false, 1.5f, &qs, &ql, &nq);
    make_operand(c, cu_k, Hkv, Lk, true, 1.5f, &ks, &kl, &nk);
    make_operand(c, cu_k, Hkv, Lk, true, 1.0f, &vs, &vl, &nv);
    uint16_t *poison = malloc((size_t)(nq > 0 ? nq : 1) * 2),
             *got = malloc((size_t)(nq > 0 ? nq : 1) * 2);
    for (int64_t e = 0; e < nq; e++)
        poison[e] = c->dt == STOF_F16 ? 0x7e00 : 0x7fc0;
    void *qd = dev_put(qs, (size_t)nq * 2), *kd = dev_put(ks, (size_t)nk * 2);
    void *vd = dev_put(vs, (size_t)nv * 2), *od = dev_put(NULL, (size_t)nq * 2);
    void *cuqd = dev_put(cu_q, sizeof cu_q), *cukd = dev_put(cu_k, sizeof cu_k);
    stof_tensor q = tensor_of(c, qd, cu_q[B], H, Lq), k = tensor_of(c, kd, cu_k[B], Hkv, Lk);
    stof_tensor v = tensor_of(c, vd, cu_k[B], Hkv, Lk), o = tensor_of(c, od, cu_q[B], H, Lq);
    int64_t cshape[1] = {B + 1};
    stof_tensor cuq = stof_tensor_make(cuqd, STOF_I32, STOF_MEM_DEVICE, 1, cshape);
    stof_tensor cuk = stof_tensor_make(cukd, STOF_I32, STOF_MEM_DEVICE, 1, cshape);

    /* The bias: a T5 table [buckets, H], slopes [H], or a tensor [B|1, H, Lq, Lk]. */
    const int tb = c->bias_bcast ? 1 : B;
    int64_t nbias = c->bias_kind == STOF_BIAS_T5       ? (int64_t)c->t5_buckets * H
                    : c->bias_kind == STOF_BIAS_ALIBI  ? H
                    : c->bias_kind == STOF_BIAS_TENSOR ? (int64_t)tb * H * Lq * Lk
                                                       : 0;
    stof_dtype bdt = c->bias_kind == STOF_BIAS_TENSOR ? c->bias_dt : STOF_F32;
    void *bias_host = malloc((size_t)(nbias > 0 ? nbias : 1) * 4);
    float *bias_f = malloc((size_t)(nbias > 0 ? nbias : 1) * 4);
    const float amp = c->bias_amp > 0.0f ? c->bias_amp : 3.0f;
    for (int64_t e = 0; e < nbias; e++) {
        float x = c->bias_kind == STOF_BIAS_ALIBI ? exp2f(-(float)(e + 1) * 8.0f / H)
                                                  : test_rng_float(&rng, -amp, amp);
        stof_store_f(bias_host, bdt, e, x);
        bias_f[e] = stof_load_f(bias_host, bdt, e);
    }
    void *bias_dev = dev_put(bias_host, (size_t)nbias * stof_dtype_size(bdt));
    stof_tensor bias_t;
    if (c->bias_kind == STOF_BIAS_T5) {
        int64_t s[2] = {c->t5_buckets, H};
        bias_t = stof_tensor_make(bias_dev, bdt, STOF_MEM_DEVICE, 2, s);
    } else if (c->bias_kind == STOF_BIAS_ALIBI) {
        int64_t s[1] = {H};
        bias_t = stof_tensor_make(bias_dev, bdt, STOF_MEM_DEVICE, 1, s);
    } else {
        int64_t s[4] = {tb, H, Lq, Lk};
        bias_t = stof_tensor_make(bias_dev, bdt, STOF_MEM_DEVICE, 4, s);
    }

    stof_mask_spec *spec = NULL;
    CHECK_OK(stof_mask_spec_parse(c->mask, &spec));
    int64_t bshape[1] = {B};
    stof_tensor lq_t = stof_tensor_make(c->lens_q, STOF_I32, STOF_MEM_HOST, 1, bshape);
    stof_tensor lk_t = stof_tensor_make(c->lens_k, STOF_I32, STOF_MEM_HOST, 1, bshape);
    stof_mask_params mp = stof_mask_default_params();
    mp.batch = B;
    mp.heads = H;
    mp.len_q = Lq;
    mp.len_k = Lk;
    mp.lengths_q = c->lengths ? &lq_t : NULL;
    mp.lengths_k = c->lengths ? &lk_t : NULL;
    mp.head_dim = D;
    stof_mask *mask = NULL;
    if (spec) CHECK_OK(stof_mask_compile(ctx, spec, &mp, &mask));

    /* The reference on the checked rows. */
    const bool top_left = strstr(c->mask, "topleft") != NULL;
    int64_t off[4];
    for (int b = 0; b < B; b++)
        off[b] = top_left ? 0 : seq_len(c, b, true) - seq_len(c, b, false);
    cpu_attn_extra x;
    memset(&x, 0, sizeof x);
    x.bias_kind = c->bias_kind;
    x.table = bias_f;
    x.heads = H;
    x.t5_num_buckets = c->t5_buckets;
    x.t5_bidirectional = c->t5_bidir;
    x.t5_max_distance = c->t5_maxd;
    x.tensor = bias_f;
    x.t_stride[0] = c->bias_bcast ? 0 : (int64_t)H * Lq * Lk;
    x.t_stride[1] = (int64_t)Lq * Lk;
    x.t_stride[2] = Lk;
    x.t_stride[3] = 1;
    x.softcap = c->softcap;
    x.off = off;
    uint8_t *plane = malloc((size_t)Lq * Lk);
    int *rows = malloc((size_t)(Lq + 64) * sizeof(int));
    int *nrows = calloc((size_t)B, sizeof(int)), **rowsets = calloc((size_t)B, sizeof(int *));
    float **ref = calloc((size_t)B * H, sizeof(float *));
    uint8_t **empty = calloc((size_t)B * H, sizeof(uint8_t *));
    const float scale = 1.0f / sqrtf((float)D);
    for (int b = 0; b < B && spec; b++) {
        int n = pick_rows(c, b, rows);
        nrows[b] = n;
        rowsets[b] = malloc((size_t)(n > 0 ? n : 1) * sizeof(int));
        memcpy(rowsets[b], rows, (size_t)n * sizeof(int));
        CHECK_OK(stof_mask_spec_to_dense(spec, B, H, Lq, Lk, c->lengths ? c->lens_q : NULL,
                                         c->lengths ? c->lens_k : NULL, b, 0, plane));
        for (int h = 0; h < H; h++) {
            const int bh = b * H + h, hk = h / (H / Hkv);
            empty[bh] = malloc((size_t)(n > 0 ? n : 1));
            ref[bh] = malloc((size_t)(n > 0 ? n : 1) * D * sizeof(float));
            x.b0 = b;
            x.h0 = h;
            for (int s = 0; s < n; s++) {
                const int i = rows[s];
                const uint8_t *prow = plane + (int64_t)i * Lk;
                empty[bh][s] = 1;
                for (int j = 0; j < Lk; j++)
                    if (prow[j]) empty[bh][s] = 0;
                x.i0 = i;
                cpu_attention_ex(ql + (((int64_t)b * H + h) * Lq + i) * D,
                                 kl + ((int64_t)b * Hkv + hk) * Lk * D,
                                 vl + ((int64_t)b * Hkv + hk) * Lk * D, ref[bh] + (int64_t)s * D, 1,
                                 1, 1, 1, Lk, D, prow, 0, 0, scale, &x);
            }
        }
    }

    /* Runs: AUTO, then each kernel forced where the call allows it. */
    const bool general =
        c->bias_kind != STOF_BIAS_NONE || c->softcap > 0.0f || D == 80 || D == 96 || D == 256;
    const stof_attn_kernel kernels[5] = {STOF_ATTN_AUTO, STOF_ATTN_BLOCKWISE, STOF_ATTN_ROWWISE,
                                         STOF_ATTN_BLOCKWISE_SM90, STOF_ATTN_BLOCKWISE_SM90_WS};
    for (int kk = 0; mask && kk < 5; kk++) {
        if (ws_only && kk != 0 && kernels[kk] != STOF_ATTN_BLOCKWISE_SM90_WS) continue;
        /* No modifier variants in the row-wise kernel; the sm_90 one's where the case asks. */
        if (general && (kk == 2 || (kk == 3 && !c->sm90_too))) continue;
        stof_attn_params p = stof_attn_default_params();
        p.kernel = kernels[kk];
        p.bias_kind = c->bias_kind;
        p.bias = c->bias_kind != STOF_BIAS_NONE ? &bias_t : NULL;
        p.t5_bidirectional = c->t5_bidir;
        p.t5_max_distance = c->t5_maxd;
        p.softcap = c->softcap;
        stof_attn_choice ch;
        if (kk > 0 && stof_attention_select(ctx, &p, &q, mask, &ch) != STOF_OK) {
            CHECK(!(c->want_ws && ws_here && kernels[kk] == STOF_ATTN_BLOCKWISE_SM90_WS),
                  "%s: the warp-specialised kernel refused it: %s", c->name, stof_last_error());
            runs_skipped++; /* a forced kernel that cannot serve these tiles or this head dim */
            continue;
        }
        cudaMemcpy(od, poison, (size_t)nq * 2, cudaMemcpyHostToDevice);
        stof_status st = stof_attention(ctx, &p, &q, &k, &v, mask, c->packed ? &cuq : NULL,
                                        c->packed ? &cuk : NULL, &o);
        CHECK(st == STOF_OK, "%s [kernel %d]: %s", c->name, (int)kernels[kk], stof_last_error());
        CHECK_OK(stof_ctx_synchronize(ctx));
        cudaMemcpy(got, od, (size_t)nq * 2, cudaMemcpyDeviceToHost);
        runs_done++;
        if (st != STOF_OK) continue;
        double num = 0, den = 0;
        bool bad = false;
        for (int b = 0; b < B && !bad; b++) {
            const int rows_stored = c->packed ? seq_len(c, b, false) : Lq;
            for (int h = 0; h < H && !bad; h++) {
                /* Padded rows: exact zeros; no NaN anywhere. */
                for (int i = seq_len(c, b, false); i < rows_stored && !bad; i++)
                    for (int d = 0; d < D; d++)
                        if (stof_load_f(got, c->dt, at(c, cu_q, H, Lq, b, h, i, d)) != 0.0f) {
                            CHECK(false, "%s [kernel %d]: padded row %d of (b %d, h %d) not zero",
                                  c->name, (int)kernels[kk], i, b, h);
                            bad = true;
                            break;
                        }
                for (int s = 0; s < nrows[b] && !bad; s++) {
                    const int i = rowsets[b][s];
                    const float *r = ref[b * H + h] + (int64_t)s * D;
                    double rn = 0, rd = 0;
                    for (int d = 0; d < D; d++) {
                        float y = stof_load_f(got, c->dt, at(c, cu_q, H, Lq, b, h, i, d));
                        if (isnan(y) || (empty[b * H + h][s] && y != 0.0f)) {
                            CHECK(false, "%s [kernel %d]: out(b %d, h %d, i %d, d %d) = %g",
                                  c->name, (int)kernels[kk], b, h, i, d, (double)y);
                            bad = true;
                            break;
                        }
                        rn += (y - r[d]) * (y - r[d]);
                        rd += (double)r[d] * r[d];
                    }
                    num += rn;
                    den += rd;
                }
            }
        }
        const double tol = c->dt == STOF_BF16 ? 2e-2 : 5e-3;
        const double err = den > 0 ? sqrt(num / den) : sqrt(num);
        if (!bad)
            CHECK(err <= tol, "%s [kernel %d, ran %d]: rel err %g", c->name, (int)kernels[kk],
                  kk ? (int)kernels[kk] : -1, err);
        if (kernels[kk] != STOF_ATTN_BLOCKWISE_SM90_WS || c->repeats == 0) continue;
        uint16_t *again = malloc((size_t)(nq > 0 ? nq : 1) * 2);
        for (int r = 0; r < c->repeats && !bad; r++) {
            cudaMemcpy(od, poison, (size_t)nq * 2, cudaMemcpyHostToDevice);
            CHECK_OK(stof_attention(ctx, &p, &q, &k, &v, mask, c->packed ? &cuq : NULL,
                                    c->packed ? &cuk : NULL, &o));
            CHECK_OK(stof_ctx_synchronize(ctx));
            cudaMemcpy(again, od, (size_t)nq * 2, cudaMemcpyDeviceToHost);
            bad = memcmp(again, got, (size_t)nq * 2) != 0;
            CHECK(!bad, "%s: run %d of the warp-specialised kernel differs from its first",
                  c->name, r + 2);
        }
        free(again);
    }

    for (int b = 0; b < B; b++) {
        free(rowsets[b]);
        for (int h = 0; h < H; h++) {
            free(ref[b * H + h]);
            free(empty[b * H + h]);
        }
    }
    free(rowsets);
    free(nrows);
    free(ref);
    free(empty);
    free(rows);
    free(plane);
    stof_mask_destroy(mask);
    stof_mask_spec_destroy(spec);
    cudaFree(qd);
    cudaFree(kd);
    cudaFree(vd);
    cudaFree(od);
    cudaFree(cuqd);
    cudaFree(cukd);
    cudaFree(bias_dev);
    free(bias_host);
    free(bias_f);
    free(qs);
    free(ks);
    free(vs);
    free(ql);
    free(kl);
    free(vl);
    free(poison);
    free(got);
}

/* The sampled sweep: every (head dim, bias, mask) triple once, the other
 * axes rotating with the case number. */
static void sweep(void)
{
    static const int dims[] = {32, 64, 80, 96, 128, 256};
    static const int lens[] = {1, 17, 128, 1000, 4097};
    const char *max_env = getenv("STOF_TEST_MAX_L");
    const int max_l = max_env ? atoi(max_env) : 1 << 30;
    static const char *const masks[] = {
        "full",    "causal",        "window:64",       "window:32,global:8",
        "bigbird", "causal,varlen", "window:48,packed"};
    int n = 0;
    for (int di = 0; di < 6; di++)
        for (int bias = 0; bias < 5; bias++)
            for (int mi = 0; mi < 7; mi++, n++) {
                dcase c;
                memset(&c, 0, sizeof c);
                c.D = dims[di];
                c.dt = n % 2 ? STOF_BF16 : STOF_F16;
                const int heads = (n / 2) % 3; /* MHA, GQA 4:1, MQA */
                c.H = heads == 0 ? 4 : 8;
                c.Hkv = heads == 0 ? 4 : heads == 1 ? 2 : 1;
                int L = lens[(n + di) % 5];
                if (L == 4097 && c.D > 128) L = 1000; /* the reference's time */
                if (L > max_l) continue;
                c.B = L >= 1000 ? 1 : 2;
                /* Lq < Lk (bottom-right offset) every other case; top-left now and then. */
                const int offset_kind = n % 3;
                c.Lk = L;
                c.Lq = offset_kind != 0 && L > 1 ? (L + 2) / 3 : L;
                const char *m = masks[mi];
                static char text[7][96];
                if (strcmp(m, "bigbird") == 0)
                    snprintf(text[mi], sizeof text[mi], "window:64,global:64,random:64x2@%d", n);
                else if (strncmp(m, "causal,varlen", 13) == 0)
                    snprintf(text[mi], sizeof text[mi], "causal%s",
                             offset_kind == 2 ? ",topleft" : "");
                else if (strcmp(m, "window:48,packed") == 0)
                    snprintf(text[mi], sizeof text[mi], "window:48");
                else
                    snprintf(text[mi], sizeof text[mi], "%s%s", m,
                             offset_kind == 2 ? ",topleft" : "");
                c.mask = text[mi];
                c.lengths = strstr(m, "varlen") || strstr(m, "packed");
                c.packed = strstr(m, "packed") != NULL;
                for (int b = 0; b < c.B; b++) {
                    c.lens_k[b] = b == 0 ? c.Lk : (int)test_rng_int(&rng, 1, c.Lk);
                    c.lens_q[b] = b == 0 ? c.Lq : (int)test_rng_int(&rng, 1, c.Lq);
                    if (!c.lengths) c.lens_q[b] = c.Lq, c.lens_k[b] = c.Lk;
                }
                if (bias == 4) {
                    c.softcap = 5.0f + (float)(n % 4) * 10.0f;
                } else {
                    c.bias_kind = bias;
                }
                c.t5_buckets = n % 2 ? 32 : 16;
                c.t5_bidir = strncmp(c.mask, "causal", 6) != 0;
                c.t5_maxd = n % 2 ? 128 : 40;
                c.bias_dt = (stof_dtype[]){STOF_F32, STOF_F16, STOF_BF16}[n % 3];
                c.bias_bcast = n % 4 == 0;
                if (c.packed && c.bias_kind == STOF_BIAS_TENSOR) c.bias_bcast = true;
                run_case(&c);
            }
}

/* The axes of t5_sweep's cases, given c's batch and whether it
 * has per-entry lengths: heads (0: MHA, 1: GQA 4:1, 2: MQA), L, the offset
 * (0: Lq = Lk, 1: Lq < Lk bottom-right, 2: top-left) and the mask, whose
 * text goes in text (32 bytes); then the lengths (per entry: the first at
 * full length, the others drawn). */
static void shape_dense_case(dcase *c, int heads, int L, int offset_kind, bool causal, char *text)
{
    c->H = heads == 0 ? 4 : 8;
    c->Hkv = heads == 0 ? 4 : heads == 1 ? 2 : 1;
    c->Lk = L;
    c->Lq = offset_kind != 0 && L > 1 ? (L + 2) / 3 : L;
    snprintf(text, 32, "%s%s", causal ? "causal" : "full", offset_kind == 2 ? ",topleft" : "");
    c->mask = text;
    for (int b = 0; b < c->B; b++) {
        c->lens_k[b] = b == 0 || !c->lengths ? c->Lk : (int)test_rng_int(&rng, 1, c->Lk);
        c->lens_q[b] = b == 0 || !c->lengths ? c->Lq : (int)test_rng_int(&rng, 1, c->Lq);
    }
}

/* T5 biases on every path of mods.cuh, under AUTO, block-wise forced and
 * sm_90 forced. The sm_90 kernel's T5 path: warpgroup blocks wholly past
 * -max_distance or +max_distance (folded), blocks whose warps lie on both
 * sides of such an end (the table's padding) and blocks inside; a quarter
 * of the cases carry a soft cap too, which sends them to the general
 * modifier variant and its attn_t5_bias: warp blocks wholly past an end
 * (one constant a block), blocks inside (unclamped loads), blocks across an
 * end or, where max_distance is small (8, 16), across both (clamped);
 * max_distance 8, 16, 128, 200; full
 * and causal masks, bidirectional and unidirectional buckets on each; L in
 * {1, 17, 128, 1000}; Lq = Lk, Lq < Lk bottom-right and top-left; one length
 * and per-entry lengths (padded); head dims 64 and 128; MHA, GQA 4:1, MQA;
 * tables of +-3 and of +-12, whose scores jump past a settled maximum by
 * more than the settled softmax allows, sending warps back to the full
 * softmax. */
static void t5_sweep(void)
{
    static const int lens[] = {1, 17, 128, 1000};
    static const int maxds[] = {8, 16, 128, 200};
    const char *max_env = getenv("STOF_TEST_MAX_L");
    const int max_l = max_env ? atoi(max_env) : 1 << 30;
    int n = 0;
    for (int li = 0; li < 4; li++)
        for (int mi = 0; mi < 4; mi++)
            for (int causal = 0; causal < 2; causal++, n++) {
                const int L = lens[li];
                if (L > max_l) continue;
                dcase c;
                memset(&c, 0, sizeof c);
                c.D = n % 3 == 2 ? 128 : 64;
                c.dt = n % 2 ? STOF_BF16 : STOF_F16;
                c.B = 2;
                c.lengths = n % 4 == 3;
                static char text[32];
                shape_dense_case(&c, (n / 2) % 3, L, (n / 2 + li) % 3, causal, text);
                c.bias_kind = STOF_BIAS_T5;
                c.t5_maxd = maxds[mi];
                c.t5_buckets = c.t5_maxd <= 16 ? c.t5_maxd : 32;
                c.t5_bidir = n % 4 == 2 ? causal : !causal;
                c.bias_amp = n % 4 == 1 ? 12.0f : 3.0f;
                c.softcap = n % 8 == 3 || n % 8 == 6 ? 20.0f : 0.0f;
                c.sm90_too = true;
                run_case(&c);
            }
}

/* The warp-specialised sm_90 kernel's ground (blockwise_ws_sm90.cu), every
 * case under AUTO (which picks it on Hopper) and with each kernel forced:
 * head dim 128, fp16 and bf16, dense, causal and bands (mask.h: a sliding
 * window window:W:0, a two-sided window whose right side passes a key
 * tile, within:L:R on a full part, a narrow window:3:1), L in {1, 17, 128,
 * 129, 1000, 4097} (129: a second row block of one row, and a key tile of
 * one key), Lq = Lk, Lq < Lk bottom-right and top-left, one length,
 * per-entry lengths (padded) and packed, MHA, GQA 4:1 and MQA; each case
 * plain, then with ALiBi, a soft cap or both. The axes after the length and
 * mask rotate with the case number so that every pair of values meets. The
 * forced warp-specialised run must be served (ALiBi on a band excepted). */
static void ws_sweep(void)
{
    static const int lens[] = {1, 17, 128, 129, 1000, 4097};
    const char *max_env = getenv("STOF_TEST_MAX_L");
    const int max_l = max_env ? atoi(max_env) : 1 << 30;
    int n = 0;
    for (int li = 0; li < 6; li++)
        for (int mi = 0; mi < 6; mi++)
            for (int layout = 0; layout < 3; layout++, n++) { /* one length, padded, packed */
                const int L = lens[li];
                if (L > max_l) continue;
                dcase c;
                memset(&c, 0, sizeof c);
                c.D = 128;
                c.dt = (n + li) % 2 ? STOF_BF16 : STOF_F16;
                const int heads = (n + mi) % 3; /* MHA, GQA 4:1, MQA */
                c.H = heads == 0 ? 4 : 8;
                c.Hkv = heads == 0 ? 4 : heads == 1 ? 2 : 1;
                c.B = L >= 1000 ? 2 : 3;
                const int offset_kind = (n / 3 + layout) % 3; /* Lq = Lk, bottom-right, top-left */
                c.Lk = L;
                c.Lq = offset_kind != 0 && L > 1 ? (L + 2) / 3 : L;
                static char text[64], part[48];
                const int w = L / 3 + 5, r = L / 5 + 130;
                switch (mi) {
                case 0: snprintf(part, sizeof part, "full"); break;
                case 1: snprintf(part, sizeof part, "causal"); break;
                case 2: snprintf(part, sizeof part, "window:%d:0", w); break;
                case 3: snprintf(part, sizeof part, "window:%d:%d", w, r); break;
                case 4: snprintf(part, sizeof part, "full,within:%d:%d", L / 7 + 200, L / 9); break;
                default: snprintf(part, sizeof part, "window:3:1"); break;
                }
                snprintf(text, sizeof text, "%s%s", part, offset_kind == 2 ? ",topleft" : "");
                c.mask = text;
                c.want_ws = true;
                c.lengths = layout > 0;
                c.packed = layout == 2;
                for (int b = 0; b < c.B; b++) {
                    c.lens_k[b] = b == 0 || !c.lengths ? c.Lk : (int)test_rng_int(&rng, 1, c.Lk);
                    c.lens_q[b] = b == 0 || !c.lengths ? c.Lq : (int)test_rng_int(&rng, 1, c.Lq);
                }
                run_case(&c);
                /* Again with ALiBi, a soft cap or both (ALiBi on a band stays
                 * on the other kernels: not the warp-specialised one's). */
                const int mod = 1 + n % 3;
                c.bias_kind = mod != 2 ? STOF_BIAS_ALIBI : STOF_BIAS_NONE;
                c.softcap = mod != 1 ? 8.0f + (float)(n % 5) * 6.0f : 0.0f;
                c.want_ws = mi < 2 || c.bias_kind == STOF_BIAS_NONE;
                run_case(&c);
            }
}

/* Persistent CTAs of the warp-specialised kernel: more work items (128-row
 * blocks x heads x batch) than any Hopper part has SMs (132-144), so that
 * every CTA walks several and a barrier phase carried wrongly from one item
 * into the next shows; items with no rows or no visible key (a padded entry
 * whose bottom-right offset is negative, an entry of one row) in between
 * live ones; dense and causal, padded and packed, MHA and GQA, Lq < Lk.
 * Every case runs the kernel twice in a row (AUTO, then forced); the first
 * causal one (its items drawn from a work counter, grid.cuh) then runs
 * again until every counter pair of the context has served it twice, so
 * that a pair left non-zero by a launch shows in the next one given it. */
static void ws_multi_sweep(void)
{
    typedef struct wcase {
        const char *mask;
        int H, Hkv, Lq, Lk;
        bool lengths, packed, bf16;
        int32_t lens_q[4], lens_k[4];
    } wcase;
    static const wcase cases[] = {
        /* Dense: 256 items, every row checked (H * Lq * Lk = 2^21). */
        {"full", 32, 8, 256, 256, false, false, true, {0}, {0}},
        {"full", 32, 8, 256, 256, true, false, false, {256, 100, 129, 1}, {256, 7, 200, 129}},
        {"full", 32, 4, 256, 256, true, true, false, {129, 256, 1, 77}, {200, 256, 33, 1}},
        {"full", 40, 40, 129, 300, false, false, true, {0}, {0}},
        /* Causal (heavy-first where select.h's imbalance bound says so):
         * 384 items or more. Entry 1 of the
         * second: off = 20 - 200, its first row block sees no key (zeros, no
         * barrier), its second one tile ending past its keys; entry 3: one
         * row. */
        {"causal", 48, 48, 256, 256, false, false, false, {0}, {0}},
        {"causal", 48, 12, 256, 256, true, false, true, {256, 200, 130, 1}, {256, 20, 256, 1}},
        {"causal", 48, 12, 256, 256, true, true, true, {256, 100, 129, 37}, {256, 100, 129, 37}},
        /* Longer rows, surely heavy-first (select.h's imbalance bound, at
         * either tile height): five row blocks and eight. */
        {"causal", 24, 8, 640, 640, true, false, false, {640, 600, 3, 129}, {640, 630, 3, 640}},
        {"causal", 16, 4, 1000, 1000, true, true, true, {1000, 999, 500, 2}, {1000, 999, 500, 2}},
        /* Lq < Lk, bottom-right and top-left. */
        {"causal", 48, 12, 200, 600, false, false, true, {0}, {0}},
        {"causal,topleft", 48, 48, 200, 600, false, false, false, {0}, {0}},
        /* Dense over longer rows: packed entries of 480, 161, 320 and 1
         * keys, each ending inside a tile; Lq < Lk. */
        {"full", 32, 8, 256, 480, true, true, false, {256, 13, 200, 1}, {480, 161, 320, 1}},
        {"full", 32, 32, 200, 1000, false, false, true, {0}, {0}},
    };
    const char *max_env = getenv("STOF_TEST_MAX_L");
    const int max_l = max_env ? atoi(max_env) : 1 << 30;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const wcase *w = &cases[i];
        if (w->Lk > max_l) continue;
        dcase c;
        memset(&c, 0, sizeof c);
        c.mask = w->mask;
        c.B = 4;
        c.H = w->H;
        c.Hkv = w->Hkv;
        c.Lq = w->Lq;
        c.Lk = w->Lk;
        c.D = 128;
        c.dt = w->bf16 ? STOF_BF16 : STOF_F16;
        c.lengths = w->lengths;
        c.packed = w->packed;
        for (int b = 0; b < c.B; b++) {
            c.lens_q[b] = w->lengths ? w->lens_q[b] : c.Lq;
            c.lens_k[b] = w->lengths ? w->lens_k[b] : c.Lk;
        }
        c.repeats = i == 4 ? 2 * STOF_WORK_SLOTS + 1 : 0;
        run_case(&c);
    }
}

int main(void)
{
    test_rng_init(&rng, test_seed() ^ 0xdec0de);
    if (stof_gpu_count() < 1) {
        printf("no GPU: test_attn_gpu_decoder skipped\n");
        return 77;
    }
    stof_ctx_params cp = stof_ctx_default_params();
    cp.device = STOF_DEVICE_GPU;
    CHECK_OK(stof_ctx_create(&cp, &ctx));
    if (!ctx) return test_finish("test_attn_gpu_decoder");
    ws_only = getenv("STOF_TEST_WS_ONLY") != NULL;
    const bool t5_only = getenv("STOF_TEST_T5_ONLY") != NULL;
#ifdef STOF_HAVE_ATTN_SM90
    ws_here = ctx->cc_major == 9 && ctx->cc_minor == 0;
#endif
    if (!ws_only && !t5_only) sweep();
    if (!ws_only) t5_sweep();
    if (!t5_only) {
        ws_sweep();
        ws_multi_sweep();
    }
    printf("test_attn_gpu_decoder: %d runs, %d forced runs skipped (kernel cannot serve)\n",
           runs_done, runs_skipped);
    stof_ctx_destroy(ctx);
    return test_finish("test_attn_gpu_decoder");
}
