/*
 * test_fuse_decoder.c — the ops the decoder families add (norms.cu,
 * decoder_rows.cu) against the CPU reference: RMSNorm and LayerNorm with
 * and without bias, residual-in and two-out (cpu_rmsnorm, cpu_layernorm);
 * RoPE's (cos, sin) table (fuse_rope_table) against cos and sin in double,
 * and RoPE on the q and k heads of packed QKV rows read from it, GQA and
 * partial rotation, with the scaled frequencies of cpu_rope_freqs
 * (cpu_rope), positions up to the table's last row, and positions outside
 * it (their turned dims NaN, nothing read outside the table); GLU with SiLU and
 * both GELUs over the interleaved halves of fuse.h (cpu_glu on the halves in
 * the checkpoint's order); embeddings without a norm; the last-token gather.
 * Fresh random inputs on the grid f16 and bf16 share, many shapes, both
 * dtypes, outputs poisoned first; bad arguments give named errors.
 */
#include "cpu/cpu_ref.h"
#include "fuse/fuse.h"
#include "fuse_dev.h"
#include "testlib.h"

#include <cuda_runtime_api.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static const stof_dtype dtypes[] = {STOF_F16, STOF_BF16};

static int32_t *dev_i32(const int32_t *host, int64_t n)
{
    int32_t *d = fuse_test_alloc((size_t)(n > 0 ? n : 1) * 4);
    fuse_test_put_bytes(d, host, (size_t)n * 4);
    return d;
}

/* ---------------------------------------------------------------- norms */

static void norm_case(stof_ctx *ctx, test_rng *r, stof_dtype dt, fuse_norm_kind kind, int64_t rows,
                      int cols, bool with_res, bool with_gamma, bool with_beta, bool two_out,
                      bool in_place)
{
    const float eps = kind == FUSE_NORM_RMS ? 1e-6f : 1e-5f;
    int64_t n = rows * cols;
    float *x = fuse_test_grid(r, n, -2.f, 2.f), *res = fuse_test_grid(r, n, -2.f, 2.f);
    float *g = fuse_test_grid(r, cols, 0.5f, 1.5f), *b = fuse_test_grid(r, cols, -0.5f, 0.5f);
    float *ref = fuse_test_host(n), *sum = fuse_test_host(n);
    const float *rp = with_res ? res : NULL;
    if (kind == FUSE_NORM_RMS)
        cpu_rmsnorm(x, rp, with_gamma ? g : NULL, ref, rows, cols, eps);
    else
        cpu_layernorm(x, rp, with_gamma ? g : NULL, with_beta ? b : NULL, ref, rows, cols, eps);
    for (int64_t i = 0; i < n; i++)
        sum[i] = x[i] + (with_res ? res[i] : 0.f);
    void *dx = fuse_test_upload(x, n, dt), *dr = fuse_test_upload(res, n, dt);
    void *dg = fuse_test_upload(g, cols, dt), *db = fuse_test_upload(b, cols, dt);
    void *dy = fuse_test_alloc((size_t)n * 2), *ds = fuse_test_alloc((size_t)n * 2);
    fuse_test_poison(dy, (size_t)n * 2);
    fuse_test_poison(ds, (size_t)n * 2);
    /* in place: the sum replaces the residual stream, the norm goes to y */
    void *sum_out = two_out ? (in_place && with_res ? dr : ds) : NULL;
    char label[200];
    snprintf(label, sizeof label, "%s rows=%lld cols=%d %s%s%s%s%s%s",
             kind == FUSE_NORM_RMS ? "rmsnorm" : "layernorm", (long long)rows, cols,
             stof_dtype_name(dt), with_res ? " residual" : "", with_gamma ? " gamma" : "",
             with_beta ? " beta" : "", two_out ? " two-out" : "", in_place ? " in-place" : "");
    stof_status st = fuse_norm(ctx, dt, kind, rows, cols, dx, with_res ? dr : NULL,
                               with_gamma ? dg : NULL, with_beta ? db : NULL, eps, dy, sum_out);
    fuse_test_expect_close_host(label, st, dy, dt, ref, n, cols, fuse_test_tolerance(dt));
    if (two_out && st == STOF_OK) {
        char l2[220];
        snprintf(l2, sizeof l2, "%s (sum)", label);
        /* the sum of two grid values rounds once */
        fuse_test_expect_close_host(l2, STOF_OK, sum_out, dt, sum, n, cols,
                                    fuse_test_tolerance(dt));
    }
    cudaFree(dx), cudaFree(dr), cudaFree(dg), cudaFree(db), cudaFree(dy), cudaFree(ds);
    free(x), free(res), free(g), free(b), free(ref), free(sum);
}

static void test_norms(stof_ctx *ctx, test_rng *r)
{
    const int widths[] = {8, 64, 264, 1024, 2048, 4096, 8192};
    const int64_t rows[] = {1, 37, 300};
    for (int di = 0; di < 2; di++)
        for (size_t wi = 0; wi < sizeof widths / sizeof widths[0]; wi++)
            for (size_t ri = 0; ri < sizeof rows / sizeof rows[0]; ri++) {
                int v = (int)(wi + ri + (size_t)di);
                bool res = v % 2 == 0, two = v % 3 != 1, inpl = v % 4 == 0;
                norm_case(ctx, r, dtypes[di], FUSE_NORM_RMS, rows[ri], widths[wi], res, v % 5 != 0,
                          false, two, inpl);
                norm_case(ctx, r, dtypes[di], FUSE_NORM_LAYER, rows[ri], widths[wi], !res, true,
                          v % 2 == 1, !two, inpl);
            }
    /* every combination once at one shape */
    for (int m = 0; m < 16; m++)
        norm_case(ctx, r, STOF_F16, (m & 1) ? FUSE_NORM_LAYER : FUSE_NORM_RMS, 129, 768,
                  (m & 2) != 0, true, (m & 1) && (m & 4), (m & 8) != 0, (m & 2) && (m & 4));
}

/* ---------------------------------------------------------------- RoPE */

/* The table itself: each entry against cos and sin in double of the same
 * fp32 angle (float)p * inv[i] (a full-precision sincosf is within 2 ulp),
 * and the NaN row past the last position. */
static void rope_table_case(stof_ctx *ctx, int rot_dim, int scaling, float theta, int positions)
{
    const int half = rot_dim / 2;
    float inv[256];
    cpu_rope_freqs(theta, rot_dim, scaling, 8.f, 1.f, 4.f, 8192, inv);
    float *cs = NULL;
    fuse_rope_table t = fuse_test_rope_table(ctx, inv, rot_dim, positions, &cs);
    CHECK(t.cs == cs && t.positions == positions && t.rot_dim == rot_dim,
          "rope table: described as %p %d %d", (const void *)t.cs, t.positions, t.rot_dim);
    const int64_t n = (int64_t)(positions + 1) * half * 2;
    float *h = fuse_test_host(n);
    CHECK(cudaMemcpy(h, cs, (size_t)n * 4, cudaMemcpyDeviceToHost) == cudaSuccess,
          "rope table: copy back");
    double worst = 0;
    int64_t bad = -1;
    for (int p = 0; p < positions; p++)
        for (int i = 0; i < half; i++) {
            const float angle = (float)p * inv[i];
            const float *e = h + 2 * ((int64_t)p * half + i);
            const double d = fmax(fabs(e[0] - cos((double)angle)), fabs(e[1] - sin((double)angle)));
            if (!(d <= worst)) worst = d, bad = (int64_t)p * half + i;
        }
    CHECK(worst <= 3e-7,
          "rope table rot=%d theta=%g scaling=%d P=%d: |err| %.3g at position %lld "
          "pair %lld",
          rot_dim, (double)theta, scaling, positions, worst, (long long)(bad / half),
          (long long)(bad % half));
    bool nan_row = true;
    for (int i = 0; i < 2 * half; i++)
        nan_row = nan_row && isnan(h[(int64_t)positions * half * 2 + i]);
    CHECK(nan_row, "rope table rot=%d P=%d: the row past the last position is not NaN", rot_dim,
          positions);
    cudaFree(cs);
    free(h);
}

/* x's q and k heads turned by the table of max_pos positions; positions at
 * random below max_pos, the last token at the table's last row. */
static void rope_case(stof_ctx *ctx, test_rng *r, stof_dtype dt, int64_t T, int heads, int kv,
                      int D, int rot_dim, int scaling, float theta, int max_pos)
{
    int64_t stride = (int64_t)(heads + 2 * kv) * D, n = T * stride;
    float *x = fuse_test_grid(r, n, -2.f, 2.f), *ref = fuse_test_host(n);
    int32_t *pos = malloc((size_t)(T > 0 ? T : 1) * 4);
    for (int64_t t = 0; t < T; t++)
        pos[t] = t == T - 1 ? max_pos - 1 : (int32_t)test_rng_int(r, 0, max_pos - 1);
    float inv[256];
    cpu_rope_freqs(theta, rot_dim, scaling, 8.f, 1.f, 4.f, 8192, inv);
    memcpy(ref, x, (size_t)n * sizeof(float));
    cpu_rope(ref, T, heads + kv, D, stride, pos, inv, rot_dim);
    void *dx = fuse_test_upload(x, n, dt);
    int32_t *dp = dev_i32(pos, T);
    float *cs = NULL;
    const fuse_rope_table tab = fuse_test_rope_table(ctx, inv, rot_dim, max_pos, &cs);
    char label[200];
    snprintf(label, sizeof label, "rope T=%lld heads=%d kv=%d D=%d rot=%d scaling=%d %s",
             (long long)T, heads, kv, D, rot_dim, scaling, stof_dtype_name(dt));
    stof_status st = fuse_rope(ctx, dt, dx, T, heads + kv, D, stride, dp, &tab);
    /* the v heads and the unrotated dims must come back as they went in */
    fuse_test_expect_close_host(label, st, dx, dt, ref, n, stride, fuse_test_tolerance(dt));
    cudaFree(dx), cudaFree(dp), cudaFree(cs);
    free(x), free(ref), free(pos);
}

/* Positions outside the table (past it, negative): their tokens' rotated
 * dims come out NaN, every other value as the reference has it. */
static void rope_outside_case(stof_ctx *ctx, test_rng *r, stof_dtype dt, int D, int rot_dim)
{
    const int T = 40, heads = 3, kv = 1, P = 100;
    const int64_t stride = (int64_t)(heads + 2 * kv) * D, n = T * stride;
    float *x = fuse_test_grid(r, n, -2.f, 2.f), *ref = fuse_test_host(n), *y = fuse_test_host(n);
    int32_t pos[40];
    for (int t = 0; t < T; t++)
        pos[t] = t % 4 == 1   ? P + t * 1000
                 : t % 4 == 3 ? -1 - t
                              : (int32_t)test_rng_int(r, 0, P - 1);
    pos[2] = INT32_MAX;
    pos[6] = INT32_MIN;
    pos[0] = P; /* one past the last row */
    float inv[256];
    cpu_rope_freqs(10000.f, rot_dim, 0, 1.f, 1.f, 4.f, 8192, inv);
    memcpy(ref, x, (size_t)n * sizeof(float));
    for (int t = 0; t < T; t++)
        if (pos[t] >= 0 && pos[t] < P)
            cpu_rope(ref + t * stride, 1, heads + kv, D, stride, &pos[t], inv, rot_dim);
    void *dx = fuse_test_upload(x, n, dt);
    int32_t *dp = dev_i32(pos, T);
    float *cs = NULL;
    const fuse_rope_table tab = fuse_test_rope_table(ctx, inv, rot_dim, P, &cs);
    CHECK_OK(fuse_rope(ctx, dt, dx, T, heads + kv, D, stride, dp, &tab));
    fuse_test_get(y, dx, n, dt);
    int wrong = 0;
    for (int t = 0; t < T; t++) {
        const bool outside = pos[t] < 0 || pos[t] >= P;
        for (int64_t c = 0; c < stride; c++) {
            const bool turned = c < (int64_t)(heads + kv) * D && c % D < rot_dim;
            const float v = y[t * stride + c], want = ref[t * stride + c];
            const bool ok =
                outside && turned ? isnan(v) : fabsf(v - want) <= 2e-2f * (1.f + fabsf(want));
            wrong += !ok;
        }
    }
    CHECK(wrong == 0,
          "rope outside the table D=%d rot=%d %s: %d values wrong (NaN expected on "
          "the turned dims of tokens outside, the reference elsewhere)",
          D, rot_dim, stof_dtype_name(dt), wrong);
    cudaFree(dx), cudaFree(dp), cudaFree(cs);
    free(x), free(ref), free(y);
}

static void test_rope(stof_ctx *ctx, test_rng *r)
{
    rope_table_case(ctx, 64, 0, 160000.f, 8192); /* ModernBERT global */
    rope_table_case(ctx, 64, 0, 10000.f, 300);
    rope_table_case(ctx, 128, 2, 500000.f, 4097); /* llama3 scaling */
    rope_table_case(ctx, 12, 1, 10000.f, 1);
    for (int di = 0; di < 2; di++) {
        stof_dtype dt = dtypes[di];
        rope_case(ctx, r, dt, 1, 1, 1, 32, 32, 0, 10000.f, 16);
        rope_case(ctx, r, dt, 200, 4, 4, 64, 64, 0, 10000.f, 2048);     /* MHA */
        rope_case(ctx, r, dt, 333, 8, 2, 64, 64, 2, 500000.f, 8192);    /* GQA, llama3 */
        rope_case(ctx, r, dt, 77, 12, 12, 64, 32, 0, 10000.f, 512);     /* partial rotation */
        rope_case(ctx, r, dt, 129, 4, 1, 128, 128, 1, 1000000.f, 4096); /* MQA, linear */
        rope_case(ctx, r, dt, 50, 2, 2, 256, 256, 0, 160000.f, 8192);   /* ModernBERT global */
        rope_case(ctx, r, dt, 4097, 3, 1, 96, 96, 0, 10000.f, 16384);
        rope_case(ctx, r, dt, 65, 3, 1, 20, 12, 0, 10000.f, 512); /* unaligned: scalar path */
        rope_case(ctx, r, dt, 9, 70, 10, 64, 64, 0, 10000.f, 64); /* heads past one CTA's threads */
        rope_case(ctx, r, dt, 30, 2, 1, 64, 64, 0, 10000.f, 1);   /* a table of one position */
        rope_outside_case(ctx, r, dt, 64, 64);                    /* vector path */
        rope_outside_case(ctx, r, dt, 20, 12);                    /* scalar path */
    }
}

/* ---------------------------------------------------------------- GLU */

/* Rows [a | b] of 2 inter (cpu_glu's order) as fuse_glu reads them: a's
 * units 8q..8q+7 at columns 16q..16q+7, b's at 16q+8..16q+15. */
static float *interleave_halves(const float *x, int64_t rows, int inter)
{
    float *y = fuse_test_host(rows * 2 * inter);
    for (int64_t r = 0; r < rows; r++)
        for (int i = 0; i < inter; i++) {
            const float *row = x + r * 2 * inter;
            float *out = y + r * 2 * inter + 16 * (i / 8) + i % 8;
            out[0] = row[i];
            out[8] = row[inter + i];
        }
    return y;
}

static void test_glu(stof_ctx *ctx, test_rng *r)
{
    const stof_act acts[] = {ACT_SILU, ACT_GELU, ACT_GELU_TANH};
    const int inters[] = {8, 64, 1152, 5632};
    const int64_t rows[] = {1, 33, 513};
    for (int di = 0; di < 2; di++)
        for (size_t ai = 0; ai < 3; ai++)
            for (size_t ii = 0; ii < 4; ii++)
                for (size_t ri = 0; ri < 3; ri++) {
                    int I = inters[ii];
                    int64_t R = rows[ri];
                    float *x = fuse_test_grid(r, R * 2 * I, -3.f, 3.f),
                          *ref = fuse_test_host(R * I);
                    cpu_glu(x, ref, R, I, acts[ai]);
                    float *xi = interleave_halves(x, R, I);
                    void *dx = fuse_test_upload(xi, R * 2 * I, dtypes[di]);
                    free(xi);
                    void *dy = fuse_test_alloc((size_t)R * I * 2);
                    fuse_test_poison(dy, (size_t)R * I * 2);
                    char label[160];
                    snprintf(label, sizeof label, "glu %s rows=%lld inter=%d %s",
                             fuse_act_name(acts[ai]), (long long)R, I, stof_dtype_name(dtypes[di]));
                    fuse_test_expect_close_host(
                        label, fuse_glu(ctx, dtypes[di], R, I, dx, acts[ai], dy), dy, dtypes[di],
                        ref, R * I, I, fuse_test_tolerance(dtypes[di]));
                    cudaFree(dx), cudaFree(dy);
                    free(x), free(ref);
                }
}

/* ---------------------------------------------------------------- embeddings */

static void test_embed_sum(stof_ctx *ctx, test_rng *r)
{
    const int hiddens[] = {8, 72, 768, 2048};
    for (int di = 0; di < 2; di++)
        for (size_t hi = 0; hi < 4; hi++)
            for (int with_pos = 0; with_pos < 2; with_pos++) {
                int H = hiddens[hi], V = 1000, P = 300;
                int64_t T = (int64_t)test_rng_int(r, 1, 700);
                float *word = fuse_test_grid(r, (int64_t)V * H, -1.f, 1.f);
                float *pt = fuse_test_grid(r, (int64_t)P * H, -1.f, 1.f);
                int32_t *ids = malloc((size_t)T * 4), *ps = malloc((size_t)T * 4);
                float *ref = fuse_test_host(T * H); /* one rounding of the sum apart */
                for (int64_t t = 0; t < T; t++) {
                    ids[t] = (int32_t)test_rng_int(r, 0, V - 1);
                    ps[t] = (int32_t)test_rng_int(r, 0, P - 1);
                    for (int c = 0; c < H; c++)
                        ref[t * H + c] = word[(int64_t)ids[t] * H + c] +
                                         (with_pos ? pt[(int64_t)ps[t] * H + c] : 0.f);
                }
                stof_dtype dt = dtypes[di];
                void *dw = fuse_test_upload(word, (int64_t)V * H, dt);
                void *dpt = fuse_test_upload(pt, (int64_t)P * H, dt);
                int32_t *dids = dev_i32(ids, T), *dps = dev_i32(ps, T);
                void *out = fuse_test_alloc((size_t)T * H * 2);
                fuse_test_poison(out, (size_t)T * H * 2);
                char label[160];
                snprintf(label, sizeof label, "embed_sum T=%lld H=%d %s%s", (long long)T, H,
                         stof_dtype_name(dt), with_pos ? " +pos" : "");
                fuse_test_expect_close_host(label,
                                            fuse_embed_sum(ctx, dt, dw, V, with_pos ? dpt : NULL, P,
                                                           H, dids, with_pos ? dps : NULL, T, out),
                                            out, dt, ref, T * H, H, dt == STOF_BF16 ? 4e-3 : 1e-3);
                /* an id outside the table: a row of NaN, never a read outside it */
                ids[0] = V;
                fuse_test_put_bytes(dids, ids, 4);
                CHECK_OK(fuse_embed_sum(ctx, dt, dw, V, with_pos ? dpt : NULL, P, H, dids,
                                        with_pos ? dps : NULL, T, out));
                float *row = fuse_test_host(H);
                fuse_test_get(row, out, H, dt);
                CHECK(isnan(row[0]) && isnan(row[H - 1]), "%s: bad id gives %g, not NaN", label,
                      (double)row[0]);
                cudaFree(dw), cudaFree(dpt), cudaFree(dids), cudaFree(dps), cudaFree(out);
                free(word), free(pt), free(ids), free(ps), free(ref), free(row);
            }
}

/* ---------------------------------------------------------------- last token */

static void test_gather_last(stof_ctx *ctx, test_rng *r)
{
    const int widths[] = {8, 64, 1000, 4096};
    for (int di = 0; di < 2; di++)
        for (size_t wi = 0; wi < 4; wi++)
            for (int f32 = 0; f32 < 2; f32++) {
                int W = widths[wi], B = (int)test_rng_int(r, 1, 40);
                int32_t *lengths = malloc((size_t)B * 4), *cu = malloc((size_t)(B + 1) * 4);
                for (int b = 0; b < B; b++)
                    lengths[b] = b % 5 == 3 ? 0 : (int32_t)test_rng_int(r, 1, 200);
                int64_t T = cpu_cu_seqlens(lengths, B, cu);
                float *packed = fuse_test_grid(r, T * W, -1.f, 1.f),
                      *ref = fuse_test_host((int64_t)B * W);
                for (int b = 0; b < B; b++)
                    for (int c = 0; c < W; c++)
                        ref[(int64_t)b * W + c] =
                            lengths[b] ? packed[(int64_t)(cu[b + 1] - 1) * W + c] : 0.f;
                stof_dtype dt = dtypes[di], odt = f32 ? STOF_F32 : dt;
                void *dpk = fuse_test_upload(packed, T * W, dt);
                int32_t *dcu = dev_i32(cu, B + 1);
                void *out = fuse_test_alloc((size_t)B * W * 4);
                fuse_test_poison(out, (size_t)B * W * 4);
                char label[160];
                snprintf(label, sizeof label, "gather_last B=%d W=%d %s -> %s", B, W,
                         stof_dtype_name(dt), stof_dtype_name(odt));
                fuse_test_expect_close_host(label,
                                            fuse_gather_last(ctx, dt, dpk, dcu, B, W, T, odt, out),
                                            out, odt, ref, (int64_t)B * W, W, 1e-6);
                cudaFree(dpk), cudaFree(dcu), cudaFree(out);
                free(lengths), free(cu), free(packed), free(ref);
            }
}

/* ---------------------------------------------------------------- bad arguments */

static void test_errors(stof_ctx *ctx)
{
    void *a = fuse_test_alloc(1 << 16), *b = fuse_test_alloc(1 << 16);
    int32_t *pos = fuse_test_alloc(256);
    float *inv = fuse_test_alloc(256);
    CHECK_STATUS(
        fuse_norm(ctx, STOF_F16, FUSE_NORM_RMS, 4, 12, a, NULL, NULL, NULL, 1e-6f, b, NULL),
        STOF_ERR_SHAPE);
    CHECK_STATUS(fuse_norm(ctx, STOF_F16, FUSE_NORM_RMS, 4, 64, a, NULL, NULL, b, 1e-6f, b, NULL),
                 STOF_ERR_INVALID_ARG); /* RMSNorm with a beta */
    CHECK_STATUS(fuse_norm(ctx, STOF_F16, FUSE_NORM_LAYER, 4, 64, a, NULL, NULL, NULL, 1e-5f, b, b),
                 STOF_ERR_INVALID_ARG); /* y is sum_out */
    CHECK_STATUS(
        fuse_norm(ctx, STOF_F16, (fuse_norm_kind)5, 4, 64, a, NULL, NULL, NULL, 1e-5f, b, NULL),
        STOF_ERR_INVALID_ARG);
    const fuse_rope_table tab = {inv, 4, 64}, odd = {inv, 4, 65}, none = {NULL, 4, 64},
                          empty = {inv, 0, 64}, wide = {inv, 4, 128};
    CHECK_STATUS(fuse_rope(ctx, STOF_F16, a, 4, 2, 64, 128, pos, &odd), STOF_ERR_SHAPE);
    CHECK_STATUS(fuse_rope(ctx, STOF_F16, a, 4, 2, 64, 128, pos, &wide), STOF_ERR_SHAPE);
    CHECK_STATUS(fuse_rope(ctx, STOF_F16, a, 4, 2, 64, 128, pos, &empty), STOF_ERR_SHAPE);
    CHECK_STATUS(fuse_rope(ctx, STOF_F16, a, 4, 2, 64, 128, pos, &none), STOF_ERR_INVALID_ARG);
    CHECK_STATUS(fuse_rope(ctx, STOF_F16, a, 4, 2, 64, 128, pos, NULL), STOF_ERR_INVALID_ARG);
    CHECK_STATUS(fuse_rope(ctx, STOF_F16, a, 4, 2, 64, 100, pos, &tab), STOF_ERR_SHAPE);
    CHECK_STATUS(fuse_rope(ctx, STOF_F16, a, 4, 2, 64, 128, NULL, &tab), STOF_ERR_INVALID_ARG);
    fuse_rope_table built;
    const float freqs[32] = {1.f};
    CHECK_STATUS(fuse_rope_table_build(ctx, freqs, 64, 0, inv, &built), STOF_ERR_SHAPE);
    CHECK_STATUS(fuse_rope_table_build(ctx, freqs, 63, 8, inv, &built), STOF_ERR_SHAPE);
    CHECK_STATUS(fuse_rope_table_build(ctx, freqs, 64, INT32_MAX, inv, &built), STOF_ERR_SHAPE);
    CHECK_STATUS(fuse_rope_table_build(ctx, NULL, 64, 8, inv, &built), STOF_ERR_INVALID_ARG);
    CHECK_STATUS(fuse_rope_table_build(ctx, freqs, 64, 8, NULL, &built), STOF_ERR_INVALID_ARG);
    CHECK(fuse_rope_table_bytes(8, 64) == 9 * 32 * 8 && fuse_rope_table_bytes(0, 64) == 0 &&
              fuse_rope_table_bytes(8, 7) == 0,
          "fuse_rope_table_bytes");
    CHECK_STATUS(fuse_glu(ctx, STOF_F16, 4, 12, a, ACT_SILU, b), STOF_ERR_SHAPE);
    CHECK_STATUS(fuse_glu(ctx, STOF_F16, 4, 64, a, (stof_act)9, b), STOF_ERR_INVALID_ARG);
    CHECK_STATUS(fuse_glu(ctx, STOF_F16, 4, 64, a, ACT_SILU, (char *)a + 256),
                 STOF_ERR_INVALID_ARG);
    CHECK_STATUS(fuse_embed_sum(ctx, STOF_F16, a, 0, NULL, 0, 64, pos, NULL, 4, b), STOF_ERR_SHAPE);
    CHECK_STATUS(fuse_gather_last(ctx, STOF_F16, a, pos, 2, 64, 8, STOF_BF16, b),
                 STOF_ERR_INVALID_ARG);
    cudaFree(a), cudaFree(b), cudaFree(pos), cudaFree(inv);
}

int main(void)
{
    test_require_gpu("test_fuse_decoder");
    stof_ctx_params p = stof_ctx_default_params();
    p.device = STOF_DEVICE_GPU;
    stof_ctx *ctx = NULL;
    CHECK_OK(stof_ctx_create(&p, &ctx));
    if (!ctx) return test_finish("test_fuse_decoder");
    test_rng r;
    test_rng_init(&r, test_seed());
    test_norms(ctx, &r);
    test_rope(ctx, &r);
    test_glu(ctx, &r);
    test_embed_sum(ctx, &r);
    test_gather_last(ctx, &r);
    test_errors(ctx);
    CHECK(cudaDeviceSynchronize() == cudaSuccess, "device error at the end: %s",
          cudaGetErrorString(cudaGetLastError()));
    stof_ctx_destroy(ctx);
    return test_finish("test_fuse_decoder");
}
