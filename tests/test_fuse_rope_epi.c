/*
 * test_fuse_rope_epi.c — RoPE in gemm_sm90's epilogue (fuse_rope_epi)
 * against the CPU reference: cpu_linear (+ bias), then cpu_rope over the q
 * and k heads of each row, the v heads left as they are. Every compiled
 * gemm_sm90 config whose tile holds whole heads, for head dims 32, 64 and
 * 128, full and partial rotation (rot_dim < head_dim), MHA, GQA and MQA,
 * positions of packed sequences (restarting at 0 at random lengths) and
 * positions at random (not monotonic, up to 8191, where fp32 angles carry
 * their rounding), m ragged against every tile, with and without a bias,
 * f16 and bf16, fresh random inputs, outputs poisoned with NaN before each
 * run, the (cos, sin) table (fuse_rope_table) ending at the largest
 * position in use. The separate pass (cuBLASLt, then fuse_rope) runs on the
 * same inputs as a check of the check. Positions outside the table turn
 * exactly the rows' q and k dims into NaN in both. Then the refusals: a
 * tile that splits heads, cuBLASLt, gemm_bias_act, a residual or LayerNorm
 * segment, bad rope_cols and a bad table, each by name.
 *
 * Tolerance: ||y - ref|| / ||ref|| within 5e-3 (f16) and 1e-2 (bf16), as for
 * the other epilogues: the epilogue rotates the fp32 accumulators and rounds
 * once, so it is not bit-equal to the separate pass, which rotates the
 * rounded GEMM output and rounds again (its angles and turns are the same
 * code, rope_epi.cuh).
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

/* One QKV projection: m rows of k inputs; heads q heads and kv k and v
 * heads of D dims, the first rot of each q and k head rotating. */
typedef struct rope_case {
    int64_t m;
    int k, heads, kv, D, rot;
    float theta;
    bool packed; /* positions of packed sequences; else at random below 8192 */
} rope_case;

static const rope_case cases[] = {
    {1, 64, 2, 1, 64, 64, 10000.f, true},
    {77, 128, 4, 4, 32, 32, 10000.f, true},      /* the golden models' heads */
    {333, 136, 8, 2, 64, 64, 500000.f, false},   /* GQA */
    {130, 72, 12, 12, 64, 32, 10000.f, true},    /* partial rotation */
    {1000, 264, 4, 1, 128, 128, 1e6f, false},    /* MQA */
    {4099, 520, 8, 2, 128, 64, 10000.f, true},   /* partial, m ragged */
    {2000, 768, 12, 12, 64, 64, 160000.f, true}, /* ModernBERT-base's heads */
};

static void fill_positions(test_rng *r, int32_t *pos, int64_t m, bool packed)
{
    int64_t i = 0;
    while (i < m) {
        int64_t len = packed ? test_rng_int(r, 1, 300) : 1;
        for (int64_t t = 0; t < len && i < m; t++, i++)
            pos[i] = packed ? (int32_t)t : (int32_t)test_rng_int(r, 0, 8191);
    }
}

static fuse_linear_args qkv_args(stof_dtype dt, const rope_case *c, int n, const void *x,
                                 const void *w, const void *b, void *y)
{
    fuse_linear_args a = fuse_test_linear_args(dt, c->m, n, c->k, x, w, b, y);
    a.w_ready = true;
    return a;
}

/* The table of inv whose last row is the largest of the m positions (the
 * rows near its end in use); cs the block to free. */
static fuse_rope_table table_to_last(stof_ctx *ctx, const float *inv, int rot, const int32_t *pos,
                                     int64_t m, float **cs)
{
    int32_t last = 0;
    for (int64_t i = 0; i < m; i++)
        last = pos[i] > last ? pos[i] : last;
    return fuse_test_rope_table(ctx, inv, rot, last + 1, cs);
}

/* Returns how many configs carried the case. */
static int run_case(stof_ctx *ctx, fuse_ws ws, test_rng *r, const rope_case *c)
{
    const int n = (c->heads + 2 * c->kv) * c->D, rope_cols = (c->heads + c->kv) * c->D;
    const int64_t m = c->m;
    float *x = fuse_test_grid(r, m * c->k, -1.f, 1.f);
    float *w =
        fuse_test_grid(r, (int64_t)n * c->k, -2.f / sqrtf((float)c->k), 2.f / sqrtf((float)c->k));
    float *b = fuse_test_grid(r, n, -0.5f, 0.5f);
    float *ref = fuse_test_host(m * n);
    int32_t *pos = malloc((size_t)m * 4);
    float inv[128];
    if (!pos) exit(1);
    fill_positions(r, pos, m, c->packed);
    cpu_rope_freqs(c->theta, c->rot, 0, 1.f, 1.f, 4.f, 8192, inv);
    int32_t *d_pos = fuse_test_alloc((size_t)m * 4);
    fuse_test_put_bytes(d_pos, pos, (size_t)m * 4);
    float *cs = NULL;
    const fuse_rope_table tab = table_to_last(ctx, inv, c->rot, pos, m, &cs);
    float *ref_dev = fuse_test_alloc((size_t)m * n * 4);
    void *y = fuse_test_alloc((size_t)m * n * 2);
    const fuse_rope_epi rope = {d_pos, tab, c->D, rope_cols};
    int count = 0, carried = 0;
    const fuse_config *list = fuse_config_list(FUSE_TPL_GEMM_SM90, &count);
    for (int di = 0; di < 2; di++) {
        const stof_dtype dt = dtypes[di];
        const bool with_bias = di == 0 || m % 2 == 1;
        cpu_linear(x, w, with_bias ? b : NULL, ref, m, n, c->k, ACT_NONE);
        cpu_rope(ref, m, c->heads + c->kv, c->D, n, pos, inv, c->rot);
        fuse_test_put_bytes(ref_dev, ref, (size_t)m * n * 4);
        void *dx = fuse_test_upload(x, m * c->k, dt),
             *dw = fuse_test_upload(w, (int64_t)n * c->k, dt);
        void *db = with_bias ? fuse_test_upload(b, n, dt) : NULL;
        char label[256], name[64];
        for (int i = 0; i < count; i++) {
            if (!fuse_rope_epi_fits(&list[i], c->D, c->rot) ||
                fuse_config_check_shape(&list[i], m, n, c->k, (size_t)ctx->smem_per_block_optin) !=
                    STOF_OK) {
                stof_clear_error();
                continue;
            }
            fuse_choice ch;
            memset(&ch, 0, sizeof ch);
            ch.path = FUSE_PATH_STOF;
            ch.config = list[i];
            fuse_linear_args a = qkv_args(dt, c, n, dx, dw, db, y);
            a.rope = rope;
            fuse_test_poison(y, (size_t)m * n * 2);
            fuse_config_format(&list[i], name, sizeof name);
            snprintf(label, sizeof label,
                     "rope epilogue m=%lld k=%d heads=%d kv=%d D=%d rot=%d%s%s %s [%s]",
                     (long long)m, c->k, c->heads, c->kv, c->D, c->rot,
                     c->packed ? " packed" : " random-pos", with_bias ? " +bias" : "",
                     stof_dtype_name(dt), name);
            fuse_test_expect_close(label, fuse_linear_act(ctx, &ch, &a, ws), y, dt, ref_dev, m * n,
                                   n, 0.0);
            carried++;
        }
        /* the separate pass on the same inputs */
        fuse_choice lt;
        memset(&lt, 0, sizeof lt);
        lt.path = FUSE_PATH_CUBLASLT;
        fuse_linear_args a = qkv_args(dt, c, n, dx, dw, db, y);
        fuse_test_poison(y, (size_t)m * n * 2);
        stof_status st = fuse_linear_act(ctx, &lt, &a, ws);
        if (st == STOF_OK) st = fuse_rope(ctx, dt, y, m, c->heads + c->kv, c->D, n, d_pos, &tab);
        snprintf(label, sizeof label, "cuBLASLt + fuse_rope m=%lld D=%d rot=%d %s", (long long)m,
                 c->D, c->rot, stof_dtype_name(dt));
        fuse_test_expect_close(label, st, y, dt, ref_dev, m * n, n, 0.0);
        cudaFree(dx), cudaFree(dw), cudaFree(db);
    }
    cudaFree(d_pos), cudaFree(cs), cudaFree(ref_dev), cudaFree(y);
    free(x), free(w), free(b), free(ref), free(pos);
    return carried;
}

/* ---------------------------------------------------------------- outside the table */

/* Positions outside the table (past it, negative): the epilogue turns the
 * q and k dims of those rows into NaN, exactly those, as the separate pass
 * does (test_fuse_decoder checks the pass against the reference), and agrees
 * with the pass everywhere else. */
static void outside_case(stof_ctx *ctx, fuse_ws ws, test_rng *r, stof_dtype dt)
{
    const rope_case c = {200, 64, 4, 2, 64, 64, 10000.f, true};
    const int n = (c.heads + 2 * c.kv) * c.D, P = 50;
    const int64_t m = c.m;
    float *x = fuse_test_grid(r, m * c.k, -1.f, 1.f), inv[32];
    float *w = fuse_test_grid(r, (int64_t)n * c.k, -0.25f, 0.25f);
    float *y_epi = fuse_test_host(m * n), *y_pass = fuse_test_host(m * n);
    int32_t pos[200];
    for (int64_t i = 0; i < m; i++)
        pos[i] = i % 5 == 1 ? P + (int32_t)i : i % 5 == 3 ? -1 - (int32_t)i : (int32_t)(i % P);
    pos[10] = INT32_MAX;
    pos[12] = P;     /* one past the last row */
    pos[14] = P - 1; /* the last row */
    int outside = 0;
    for (int64_t i = 0; i < m; i++)
        outside += pos[i] < 0 || pos[i] >= P;
    cpu_rope_freqs(c.theta, c.rot, 0, 1.f, 1.f, 4.f, 8192, inv);
    int32_t *d_pos = fuse_test_alloc(sizeof pos);
    fuse_test_put_bytes(d_pos, pos, sizeof pos);
    float *cs = NULL;
    const fuse_rope_table tab = fuse_test_rope_table(ctx, inv, c.rot, P, &cs);
    void *dx = fuse_test_upload(x, m * c.k, dt), *dw = fuse_test_upload(w, (int64_t)n * c.k, dt);
    void *y = fuse_test_alloc((size_t)m * n * 2);
    fuse_choice ch;
    memset(&ch, 0, sizeof ch);
    ch.path = FUSE_PATH_STOF;
    ch.config = fuse_config_sm90_rope(m, n, c.k, c.D, c.rot, ctx->sm_count,
                                      (size_t)ctx->smem_per_block_optin);
    fuse_linear_args a = qkv_args(dt, &c, n, dx, dw, NULL, y);
    a.rope = (fuse_rope_epi){d_pos, tab, c.D, (c.heads + c.kv) * c.D};
    fuse_test_poison(y, (size_t)m * n * 2);
    CHECK_OK(fuse_linear_act(ctx, &ch, &a, ws));
    fuse_test_get(y_epi, y, m * n, dt);
    ch.path = FUSE_PATH_CUBLASLT;
    a.rope.positions = NULL;
    fuse_test_poison(y, (size_t)m * n * 2);
    CHECK_OK(fuse_linear_act(ctx, &ch, &a, ws));
    CHECK_OK(fuse_rope(ctx, dt, y, m, c.heads + c.kv, c.D, n, d_pos, &tab));
    fuse_test_get(y_pass, y, m * n, dt);
    int64_t nan_epi = 0, differ = 0;
    for (int64_t i = 0; i < m * n; i++) {
        nan_epi += isnan(y_epi[i]);
        const bool same = isnan(y_epi[i])
                              ? isnan(y_pass[i])
                              : fabsf(y_epi[i] - y_pass[i]) <= 2e-2f * (1.f + fabsf(y_pass[i]));
        differ += !same;
    }
    const int64_t want = (int64_t)outside * (c.heads + c.kv) * c.rot;
    CHECK(nan_epi == want && differ == 0,
          "rope epilogue outside the table %s: %lld NaN (want %lld: the turned dims of %d rows), "
          "%lld values unlike the separate pass's",
          stof_dtype_name(dt), (long long)nan_epi, (long long)want, outside, (long long)differ);
    cudaFree(d_pos), cudaFree(cs), cudaFree(dx), cudaFree(dw), cudaFree(y);
    free(x), free(w), free(y_epi), free(y_pass);
}

/* ---------------------------------------------------------------- refusals */

static void expect_refused(stof_status st, stof_status want, const char *needle, const char *what)
{
    CHECK(st == want && strstr(stof_last_error(), needle) != NULL,
          "%s -> %s (want %s), message \"%s\" should contain \"%s\"", what, stof_status_str(st),
          stof_status_str(want), stof_last_error(), needle);
}

static void test_refusals(stof_ctx *ctx, fuse_ws ws, bool sm90)
{
    const rope_case c = {128, 64, 2, 1, 128, 128, 10000.f, true};
    const int n = 4 * 128;
    void *x = fuse_test_alloc(128 * 64 * 2), *w = fuse_test_alloc((size_t)n * 64 * 2);
    void *y = fuse_test_alloc((size_t)128 * n * 2), *res = fuse_test_alloc((size_t)128 * n * 2);
    int32_t *pos = fuse_test_alloc(128 * 4);
    float *inv = fuse_test_alloc(64 * 4);
    fuse_linear_args a = qkv_args(STOF_F16, &c, n, x, w, NULL, y);
    a.rope = (fuse_rope_epi){pos, {inv, 4, 128}, 128, 3 * 128};
    fuse_choice lt, tpl, small;
    memset(&lt, 0, sizeof lt);
    lt.path = FUSE_PATH_CUBLASLT;
    memset(&tpl, 0, sizeof tpl);
    tpl.path = FUSE_PATH_STOF; /* gemm_bias_act's default */
    small = tpl;
    small.config = fuse_config_sm90_small(); /* 64 columns: half a head of 128 */
    expect_refused(fuse_linear_act(ctx, &lt, &a, ws), STOF_ERR_UNSUPPORTED,
                   "cuBLASLt has no RoPE epilogue", "cuBLASLt");
    expect_refused(fuse_linear_act(ctx, &tpl, &a, ws), STOF_ERR_UNSUPPORTED,
                   "gemm_bias_act has no RoPE epilogue", "gemm_bias_act");
    fuse_linear_args ln = a;
    ln.residual = res;
    ln.gamma = ln.beta = inv;
    ln.eps = 1e-5f;
    expect_refused(fuse_linear_res_ln(ctx, &lt, &ln, ws), STOF_ERR_UNSUPPORTED,
                   "has no RoPE epilogue", "residual + LayerNorm");
    if (sm90) {
        expect_refused(fuse_linear_act(ctx, &small, &a, ws), STOF_ERR_UNSUPPORTED,
                       "cannot carry RoPE over 128 of 128", "64x64 tile, head dim 128");
        fuse_choice big = small;
        big.config = fuse_config_sm90_rope(128, n, 64, 128, 128, ctx->sm_count,
                                           (size_t)ctx->smem_per_block_optin);
        CHECK(big.config.tpl == FUSE_TPL_GEMM_SM90, "fuse_config_sm90_rope found no config");
        fuse_linear_args bad = a;
        bad.rope.rope_cols = 3 * 128 + 64;
        expect_refused(fuse_linear_act(ctx, &big, &bad, ws), STOF_ERR_SHAPE, "rope_cols",
                       "rope_cols not whole heads");
        bad = a;
        bad.rope.table.rot_dim = 96; /* not a compiled (head_dim, rot_dim) pair */
        expect_refused(fuse_linear_act(ctx, &big, &bad, ws), STOF_ERR_UNSUPPORTED,
                       "cannot carry RoPE over 96 of 128", "rot_dim 96");
        bad = a;
        bad.residual = res;
        expect_refused(fuse_linear_act(ctx, &big, &bad, ws), STOF_ERR_INVALID_ARG,
                       "act none, no residual", "RoPE with a residual");
        bad = a;
        bad.rope.table.cs = NULL;
        expect_refused(fuse_linear_act(ctx, &big, &bad, ws), STOF_ERR_INVALID_ARG,
                       "RoPE table's cs", "table NULL");
        bad = a;
        bad.rope.table.positions = 0;
        expect_refused(fuse_linear_act(ctx, &big, &bad, ws), STOF_ERR_SHAPE,
                       "a RoPE table of 0 positions", "empty table");
    }
    cudaFree(x), cudaFree(w), cudaFree(y), cudaFree(res), cudaFree(pos), cudaFree(inv);
}

int main(void)
{
    fuse_ws ws;
    stof_ctx *ctx = fuse_test_open("test_fuse_rope_epi", &ws);
    if (!ctx) return test_finish("test_fuse_rope_epi");
    const bool sm90 = fuse_sm90_available(ctx);
    test_rng r;
    test_rng_init(&r, test_seed());
    test_refusals(ctx, ws, sm90);
    if (!sm90) {
        printf("test_fuse_rope_epi: the epilogue skipped: %s is compute capability %d.%d\n",
               ctx->device_name, ctx->cc_major, ctx->cc_minor);
    } else {
        for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
            int carried = run_case(ctx, ws, &r, &cases[i]);
            printf("rope epilogue m=%lld D=%d rot=%d: %d config runs\n", (long long)cases[i].m,
                   cases[i].D, cases[i].rot, carried);
            CHECK(carried > 0, "no gemm_sm90 config carried D=%d rot=%d", cases[i].D, cases[i].rot);
        }
        for (int di = 0; di < 2; di++)
            outside_case(ctx, ws, &r, dtypes[di]);
    }
    CHECK(cudaDeviceSynchronize() == cudaSuccess, "device error at the end: %s",
          cudaGetErrorString(cudaGetLastError()));
    stof_ctx_destroy(ctx);
    return test_finish("test_fuse_rope_epi");
}
