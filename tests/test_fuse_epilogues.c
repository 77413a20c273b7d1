/*
 * test_fuse_epilogues.c — the GEMM epilogues of the pre-norm layers against
 * the CPU reference, on every config of both GEMM templates (gemm_bias_act,
 * and gemm_sm90 where the device runs it) and their rule-based defaults:
 *  - GLU: w [2 inter, k] and its bias in the checkpoint's order (a, then b)
 *    go up through fuse_glu_upload into the interleaved layout, and the
 *    GEMM writes y [m, inter] = act(a) * b; cpu_linear + cpu_glu on the
 *    original order is the reference, for SiLU, exact and tanh GELU and
 *    ReLU, with and without a bias. The cuBLASLt route of the same layer
 *    (plain GEMM into [m, 2 inter], then fuse_glu) is checked alike;
 *  - residual: y = x w^T + b + residual, y apart from the residual and y
 *    the residual itself (in place), cuBLASLt (C with beta = 1) too.
 * Ragged m, n and k, f16 and bf16, fresh random inputs on the grid both
 * dtypes share, outputs poisoned with NaN before each run.
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

/* (m, n or inter, k): ragged against every tile; inter a multiple of 8. The
 * last has enough 64-row tiles that each persistent CTA runs several, both
 * ping-pong warpgroups in turn. */
static const struct {
    int64_t m;
    int n, k;
} shapes[] = {{1, 8, 8},       {7, 24, 40},      {77, 136, 72},
              {333, 200, 264}, {130, 72, 1000},  {1000, 1152, 768},
              {4099, 40, 136}, {2000, 328, 520}, {4099, 520, 72}};

/* The choices of a linear + act segment: gemm_bias_act's default (config
 * NONE) and every config, gemm_sm90's where it runs, then cuBLASLt. */
static int segment_choices(bool sm90, fuse_choice *out, int cap)
{
    const fuse_tpl tpls[2] = {FUSE_TPL_GEMM_BIAS_ACT, FUSE_TPL_GEMM_SM90};
    int n = 0;
    memset(&out[n], 0, sizeof out[n]);
    out[n++].path = FUSE_PATH_STOF;
    for (int t = 0; t < (sm90 ? 2 : 1); t++) {
        int count = 0;
        const fuse_config *list = fuse_config_list(tpls[t], &count);
        for (int i = 0; i < count && n < cap - 1; i++) {
            memset(&out[n], 0, sizeof out[n]);
            out[n].path = FUSE_PATH_STOF;
            out[n++].config = list[i];
        }
    }
    memset(&out[n], 0, sizeof out[n]);
    out[n++].path = FUSE_PATH_CUBLASLT;
    return n;
}

static void describe(const fuse_choice *c, char *buf, size_t cap)
{
    if (c->path == FUSE_PATH_CUBLASLT)
        snprintf(buf, cap, "cublaslt");
    else if (c->config.tpl == FUSE_TPL_NONE)
        snprintf(buf, cap, "gemm_bias_act default");
    else
        fuse_config_format(&c->config, buf, cap);
}

/* host floats -> 16-bit values of dtype, for fuse_glu_upload */
static void *to_dtype(const float *x, int64_t n, stof_dtype dt)
{
    void *p = malloc((size_t)(n > 0 ? n : 1) * 2);
    if (!p) exit(1);
    for (int64_t i = 0; i < n; i++)
        stof_store_f(p, dt, i, x[i]);
    return p;
}

static void *glu_upload(stof_ctx *ctx, const float *host, int inter, int64_t cols, stof_dtype dt)
{
    void *bits = to_dtype(host, 2 * inter * cols, dt);
    void *dev = fuse_test_alloc((size_t)2 * inter * cols * 2);
    CHECK_OK(fuse_glu_upload(ctx, dev, bits, inter, (size_t)cols * 2));
    free(bits);
    return dev;
}

/* ---------------------------------------------------------------- GLU */

static void glu_shape(stof_ctx *ctx, fuse_ws ws, test_rng *r, int64_t m, int inter, int k,
                      bool sm90)
{
    static const stof_act acts[] = {ACT_SILU, ACT_GELU, ACT_GELU_TANH, ACT_RELU};
    const int n = 2 * inter;
    float *x = fuse_test_grid(r, m * k, -1.f, 1.f);
    float *w = fuse_test_grid(r, (int64_t)n * k, -2.f / sqrtf((float)k), 2.f / sqrtf((float)k));
    float *b = fuse_test_grid(r, n, -0.5f, 0.5f);
    float *g = fuse_test_host(m * n), *ref = fuse_test_host(m * inter);
    float *ref_dev = fuse_test_alloc((size_t)m * inter * 4);
    void *y = fuse_test_alloc((size_t)m * inter * 2), *both = fuse_test_alloc((size_t)m * n * 2);
    float *g_plain = fuse_test_host(m * n);
    cpu_linear(x, w, b, g, m, n, k, ACT_NONE);
    cpu_linear(x, w, NULL, g_plain, m, n, k, ACT_NONE);
    fuse_choice ch[16];
    int nch = segment_choices(sm90, ch, 16); /* cuBLASLt: the GEMM, then fuse_glu */
    for (int di = 0; di < 2; di++) {
        const stof_dtype dt = dtypes[di];
        void *dx = fuse_test_upload(x, m * k, dt);
        void *dw = glu_upload(ctx, w, inter, k, dt), *db = glu_upload(ctx, b, inter, 1, dt);
        for (size_t ai = 0; ai < sizeof acts / sizeof acts[0]; ai++) {
            const bool with_bias = (ai + (size_t)di) % 2 == 0; /* each act both ways */
            cpu_glu(with_bias ? g : g_plain, ref, m, inter, acts[ai]);
            fuse_test_put(ref_dev, ref, m * inter, STOF_F32);
            for (int i = 0; i < nch; i++) {
                fuse_linear_args a =
                    fuse_test_linear_args(dt, m, n, k, dx, dw, with_bias ? db : NULL, y);
                a.w_ready = i % 2 == 1;
                fuse_test_poison(y, (size_t)m * inter * 2);
                stof_status st;
                if (ch[i].path == FUSE_PATH_CUBLASLT) {
                    fuse_test_poison(both, (size_t)m * n * 2);
                    a.y = both;
                    st = fuse_linear_act(ctx, &ch[i], &a, ws);
                    if (st == STOF_OK) st = fuse_glu(ctx, dt, m, inter, both, acts[ai], y);
                } else {
                    a.glu = true;
                    a.act = acts[ai];
                    st = fuse_linear_act(ctx, &ch[i], &a, ws);
                }
                char what[96], label[256];
                describe(&ch[i], what, sizeof what);
                snprintf(label, sizeof label, "glu %s%s m=%lld inter=%d k=%d %s [%s]",
                         fuse_act_name(acts[ai]), with_bias ? " +bias" : "", (long long)m, inter, k,
                         stof_dtype_name(dt), what);
                fuse_test_expect_close(label, st, y, dt, ref_dev, m * inter, inter, 0.0);
            }
        }
        cudaFree(dx), cudaFree(dw), cudaFree(db);
    }
    cudaFree(ref_dev), cudaFree(y), cudaFree(both);
    free(x), free(w), free(b), free(g), free(g_plain), free(ref);
}

/* ---------------------------------------------------------------- residual */

static void residual_shape(stof_ctx *ctx, fuse_ws ws, test_rng *r, int64_t m, int n, int k,
                           bool sm90)
{
    float *x = fuse_test_grid(r, m * k, -1.f, 1.f);
    float *w = fuse_test_grid(r, (int64_t)n * k, -1.f / sqrtf((float)k), 1.f / sqrtf((float)k));
    float *b = fuse_test_grid(r, n, -0.5f, 0.5f);
    float *res = fuse_test_grid(r, m * n, -2.f, 2.f);
    float *ref = fuse_test_host(m * n);
    cpu_linear(x, w, b, ref, m, n, k, ACT_NONE);
    for (int64_t i = 0; i < m * n; i++)
        ref[i] += res[i];
    float *ref_dev = fuse_test_upload(ref, m * n, STOF_F32);
    void *y = fuse_test_alloc((size_t)m * n * 2);
    fuse_choice ch[16];
    int nch = segment_choices(sm90, ch, 16);
    for (int di = 0; di < 2; di++) {
        const stof_dtype dt = dtypes[di];
        void *dx = fuse_test_upload(x, m * k, dt), *dw = fuse_test_upload(w, (int64_t)n * k, dt);
        void *db = fuse_test_upload(b, n, dt), *dres = fuse_test_upload(res, m * n, dt);
        for (int i = 0; i < nch; i++)
            for (int in_place = 0; in_place < 2; in_place++) {
                fuse_linear_args a = fuse_test_linear_args(dt, m, n, k, dx, dw, db, y);
                a.w_ready = true;
                if (in_place) { /* y holds the residual and receives the sum */
                    fuse_test_copy(y, dres, (size_t)m * n * 2);
                    a.residual = y;
                } else {
                    fuse_test_poison(y, (size_t)m * n * 2);
                    a.residual = dres;
                }
                char what[96], label[256];
                describe(&ch[i], what, sizeof what);
                snprintf(label, sizeof label, "residual%s m=%lld n=%d k=%d %s [%s]",
                         in_place ? " in place" : "", (long long)m, n, k, stof_dtype_name(dt),
                         what);
                fuse_test_expect_close(label, fuse_linear_act(ctx, &ch[i], &a, ws), y, dt, ref_dev,
                                       m * n, n, 0.0);
            }
        cudaFree(dx), cudaFree(dw), cudaFree(db), cudaFree(dres);
    }
    cudaFree(ref_dev), cudaFree(y);
    free(x), free(w), free(b), free(res), free(ref);
}

/* ---------------------------------------------------------------- refusals */

static void test_refusals(stof_ctx *ctx, fuse_ws ws)
{
    void *x = fuse_test_alloc(64 * 64 * 2), *w = fuse_test_alloc(64 * 64 * 2);
    void *y = fuse_test_alloc(64 * 64 * 2);
    fuse_linear_args a = fuse_test_linear_args(STOF_F16, 64, 64, 64, x, w, NULL, y);
    a.glu = true;
    fuse_choice lt = {FUSE_PATH_CUBLASLT, {FUSE_TPL_NONE, 0, 0, 0, 0, 0, 0}, 0, 0};
    fuse_choice st = {FUSE_PATH_STOF, {FUSE_TPL_NONE, 0, 0, 0, 0, 0, 0}, 0, 0};
    CHECK_STATUS(fuse_linear_act(ctx, &lt, &a, ws), STOF_ERR_INVALID_ARG);
    a.n = 40; /* not whole pairs of GLU blocks */
    CHECK_STATUS(fuse_linear_act(ctx, &st, &a, ws), STOF_ERR_INVALID_ARG);
    char host[64 * 2] = {0};
    CHECK_STATUS(fuse_glu_upload(ctx, y, host, 12, 2), STOF_ERR_SHAPE);
    CHECK_STATUS(fuse_glu_upload(ctx, NULL, host, 8, 2), STOF_ERR_INVALID_ARG);
    cudaFree(x), cudaFree(w), cudaFree(y);
}

int main(void)
{
    fuse_ws ws;
    stof_ctx *ctx = fuse_test_open("test_fuse_epilogues", &ws);
    if (!ctx) return test_finish("test_fuse_epilogues");
    const bool sm90 = fuse_sm90_available(ctx);
    if (!sm90)
        printf("test_fuse_epilogues: gemm_sm90 skipped: %s is compute capability %d.%d\n",
               ctx->device_name, ctx->cc_major, ctx->cc_minor);
    test_rng r;
    test_rng_init(&r, test_seed());
    test_refusals(ctx, ws);
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
        glu_shape(ctx, ws, &r, shapes[si].m, shapes[si].n, shapes[si].k, sm90);
        residual_shape(ctx, ws, &r, shapes[si].m, shapes[si].n, shapes[si].k, sm90);
    }
    CHECK(cudaDeviceSynchronize() == cudaSuccess, "device error at the end: %s",
          cudaGetErrorString(cudaGetLastError()));
    stof_ctx_destroy(ctx);
    return test_finish("test_fuse_epilogues");
}
