/*
 * test_fuse_gemm.c — every GEMM template configuration and the cuBLASLt path
 * of each segment against the CPU reference: linear + bias + activation (all
 * four activations), linear + bias + residual + LayerNorm, and the FFN chain
 * (with and without residual and LayerNorm), at hidden 384/768/1024 (FFN
 * width 4 x hidden), token counts 1, 7, 128, 1000, 16384, in f16 and bf16.
 * Plus odd shapes (m, n, k not multiples of any tile), in-place residuals,
 * the cuBLASLt plan cache and device-dependent refusals. The Hopper template
 * (gemm_sm90) joins every linear + act run where the device can run it, with
 * extra ragged shapes of its own; elsewhere it is reported as skipped and
 * checked to refuse cleanly.
 *
 * Inputs are fresh random values on the grid that f16 and bf16 share (bf16
 * values of magnitude >= 2^-8), so one fp32 reference serves both dtypes and
 * is computed once per shape. Outputs are poisoned with NaN before every run
 * and compared on the GPU (||out - ref|| / ||ref||, NaN -> inf, with the first
 * non-finite element named). The device helpers finish their own work before
 * returning: the ctx's stream is non-blocking, so a fill or copy on the
 * default stream would otherwise race with the operator under test.
 */
#include "cpu/cpu_ref.h"
#include "fuse/fuse.h"
#include "fuse_dev.h"
#include "testlib.h"

#include <cuda_runtime_api.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define EPS 1e-12f

static const int hiddens[] = {384, 768, 1024};
static const int64_t token_counts[] = {1, 7, 128, 1000, 16384};
static const stof_dtype dtypes[] = {STOF_F16, STOF_BF16};
static const stof_act acts[] = {ACT_NONE, ACT_GELU, ACT_GELU_TANH, ACT_RELU, ACT_SILU};

/* Worst error seen per (kernel family, dtype), printed at the end. */
enum {
    FAM_BIAS_ACT,
    FAM_RES_LN,
    FAM_CHAIN,
    FAM_LT_ACT,
    FAM_LT_LN,
    FAM_LT_FFN,
    FAM_LT_SPLIT,
    FAM_SM90,
    FAM_SM90_LN,
    FAM_COUNT
};
static const char *fam_names[FAM_COUNT] = {
    "gemm_bias_act", "gemm_res_ln",         "ffn_chain", "cublaslt+act",        "cublaslt+ln",
    "cublaslt ffn",  "cublaslt k-split+ln", "gemm_sm90", "gemm_sm90 k-split+ln"};
static double worst[FAM_COUNT][2];

/* Whether the gemm_sm90 configs run here (set once in main). */
static bool sm90_runs;

static float *host_alloc(int64_t n)
{
    float *p = malloc((size_t)n * sizeof(float));
    if (!p) {
        fprintf(stderr, "out of host memory (%lld floats)\n", (long long)n);
        exit(1);
    }
    return p;
}

/* Exactly representable in both f16 and bf16, never zero. */
static float grid_value(test_rng *r, float lo, float hi)
{
    float v = stof_bf16_to_f32(stof_f32_to_bf16(test_rng_float(r, lo, hi)));
    const float floor_mag = 1.0f / 256;
    if (fabsf(v) < floor_mag) v = v < 0 ? -floor_mag : floor_mag;
    return v;
}

static float *grid_array(test_rng *r, int64_t n, float lo, float hi)
{
    float *p = host_alloc(n);
    for (int64_t i = 0; i < n; i++)
        p[i] = grid_value(r, lo, hi);
    return p;
}

static float *dev_f32(const float *host, int64_t n)
{
    return fuse_test_upload(host, n, STOF_F32);
}

/* Checks one finished run: its status, then y [n / cols, cols] against ref_dev. */
static void expect_close(const char *label, int fam, stof_status st, const void *y, stof_dtype dt,
                         const float *ref_dev, int64_t n, int64_t cols)
{
    const double e = fuse_test_expect_close(label, st, y, dt, ref_dev, n, cols, 0.0);
    int di = dt == STOF_BF16;
    if (e >= 0.0 && !(e <= worst[fam][di])) worst[fam][di] = e;
}

typedef struct shape_data {
    int hidden, inter;
    int64_t t;
    /* host inputs */
    float *x, *w1, *b1, *w2, *b2, *z, *res, *gamma, *beta;
    /* host references */
    float *g1;        /* x w1^T + b1 */
    float *ref_ln;    /* LN(z w2^T + b2 + res) */
    float *ref_chain; /* LN(gelu(g1) w2^T + b2 + res) */
    float *ref_plain; /* gelu(g1) w2^T + b2 */
} shape_data;

typedef struct dev_data {
    void *x, *w1, *b1, *w2, *b2, *z, *res, *gamma, *beta;
} dev_data;

static void shape_make(shape_data *s, test_rng *r, int hidden, int64_t t)
{
    memset(s, 0, sizeof *s);
    int H = hidden, I = 4 * hidden;
    s->hidden = H;
    s->inter = I;
    s->t = t;
    s->x = grid_array(r, t * H, -1.f, 1.f);
    s->w1 = grid_array(r, (int64_t)I * H, -1.f / sqrtf((float)H), 1.f / sqrtf((float)H));
    s->b1 = grid_array(r, I, -0.5f, 0.5f);
    s->w2 = grid_array(r, (int64_t)H * I, -1.f / sqrtf((float)I), 1.f / sqrtf((float)I));
    s->b2 = grid_array(r, H, -0.5f, 0.5f);
    s->z = grid_array(r, t * I, -1.f, 1.f);
    s->res = grid_array(r, t * H, -1.f, 1.f);
    s->gamma = grid_array(r, H, 0.5f, 1.5f);
    s->beta = grid_array(r, H, -0.5f, 0.5f);

    s->g1 = host_alloc(t * I);
    cpu_linear(s->x, s->w1, s->b1, s->g1, t, I, H, ACT_NONE);
    float *tmp = host_alloc(t * H);
    s->ref_ln = host_alloc(t * H);
    cpu_linear(s->z, s->w2, s->b2, tmp, t, H, I, ACT_NONE);
    cpu_layernorm(tmp, s->res, s->gamma, s->beta, s->ref_ln, t, H, EPS);
    float *h = host_alloc(t * I);
    memcpy(h, s->g1, sizeof(float) * t * I);
    cpu_activation(h, t * I, ACT_GELU);
    s->ref_plain = host_alloc(t * H);
    s->ref_chain = host_alloc(t * H);
    cpu_linear(h, s->w2, s->b2, s->ref_plain, t, H, I, ACT_NONE);
    cpu_layernorm(s->ref_plain, s->res, s->gamma, s->beta, s->ref_chain, t, H, EPS);
    free(h);
    free(tmp);
}

static void shape_free(shape_data *s)
{
    float *all[] = {s->x,     s->w1,   s->b1, s->w2,     s->b2,        s->z,        s->res,
                    s->gamma, s->beta, s->g1, s->ref_ln, s->ref_chain, s->ref_plain};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        free(all[i]);
}

static void dev_make(dev_data *d, const shape_data *s, stof_dtype dt)
{
    int64_t t = s->t, H = s->hidden, I = s->inter;
    d->x = fuse_test_upload(s->x, t * H, dt);
    d->w1 = fuse_test_upload(s->w1, I * H, dt);
    d->b1 = fuse_test_upload(s->b1, I, dt);
    d->w2 = fuse_test_upload(s->w2, H * I, dt);
    d->b2 = fuse_test_upload(s->b2, H, dt);
    d->z = fuse_test_upload(s->z, t * I, dt);
    d->res = fuse_test_upload(s->res, t * H, dt);
    d->gamma = fuse_test_upload(s->gamma, H, dt);
    d->beta = fuse_test_upload(s->beta, H, dt);
}

static void dev_free(dev_data *d)
{
    void *all[] = {d->x, d->w1, d->b1, d->w2, d->b2, d->z, d->res, d->gamma, d->beta};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        cudaFree(all[i]);
}

static void label_of(char *buf, size_t cap, const char *op, const shape_data *s, stof_dtype dt,
                     const char *what)
{
    snprintf(buf, cap, "%s H=%d T=%lld %s [%s]", op, s->hidden, (long long)s->t,
             stof_dtype_name(dt), what);
}

/* A choice per template config, then the rule-based default, then cuBLASLt. */
static int choices_for(fuse_tpl tpl, fuse_choice *out, int cap)
{
    int n = 0, count = 0;
    const fuse_config *list = fuse_config_list(tpl, &count);
    for (int i = 0; i < count && n < cap - 2; i++) {
        memset(&out[n], 0, sizeof out[n]);
        out[n].path = FUSE_PATH_STOF;
        out[n].config = list[i];
        n++;
    }
    memset(&out[n], 0, sizeof out[n]);
    out[n++].path = FUSE_PATH_STOF; /* config NONE: the default rule */
    memset(&out[n], 0, sizeof out[n]);
    out[n++].path = FUSE_PATH_CUBLASLT;
    return n;
}

/* choices_for(tpl) (GEMM_RES_LN or FFN_CHAIN) plus cuBLASLt with K cut into
 * 2, 3, 4 and 8 slices where k allows (fuse_choice.splits). */
static int residual_choices(fuse_tpl tpl, int k, fuse_choice *out, int cap)
{
    int n = choices_for(tpl, out, cap);
    static const int splits[] = {2, 3, 4, 8};
    for (size_t i = 0; i < sizeof splits / sizeof splits[0] && n < cap; i++) {
        if (k % (8 * splits[i])) continue;
        memset(&out[n], 0, sizeof out[n]);
        out[n].path = FUSE_PATH_CUBLASLT;
        out[n].splits = splits[i];
        n++;
    }
    /* gemm_sm90's small tile into 1 to 4 K slices of partial sums (the
     * residual + LayerNorm segment only; slices k cannot give are refused) */
    for (int s = 1; s <= 4 && sm90_runs && tpl == FUSE_TPL_GEMM_RES_LN && n < cap; s++) {
        memset(&out[n], 0, sizeof out[n]);
        out[n].path = FUSE_PATH_STOF;
        out[n].config = fuse_config_sm90_small();
        out[n].splits = s;
        n++;
    }
    return n;
}

static bool sm90_residual(const fuse_choice *c)
{
    return c->path == FUSE_PATH_STOF && c->config.tpl == FUSE_TPL_GEMM_SM90;
}

static int residual_family(const fuse_choice *c, int stof_family, int lt_family)
{
    if (sm90_residual(c)) return FAM_SM90_LN;
    if (c->path == FUSE_PATH_STOF) return stof_family;
    return c->splits >= 2 ? FAM_LT_SPLIT : lt_family;
}

/* False when gemm_sm90 cannot cut k into c's slices (each a multiple of 64
 * deep, or one slice): then the call must have refused with a shape error. */
static bool sm90_cut_ok(const char *label, const fuse_choice *c, int k, stof_status st)
{
    if (!sm90_residual(c) || c->splits <= 1 || (k % c->splits == 0 && k / c->splits % 64 == 0))
        return true;
    CHECK(st == STOF_ERR_SHAPE && strstr(stof_last_error(), "multiple of 64"),
          "%s: k = %d in %d slices gave %s (%s)", label, k, c->splits, stof_status_str(st),
          stof_last_error());
    return false;
}

/* False when choice c splits K into partial sums of m x n that the workspace
 * cannot hold: then the call must have refused, naming the workspace. */
static bool parts_fit(const char *label, const fuse_choice *c, int64_t m, int n, fuse_ws ws,
                      stof_status st)
{
    int planes = sm90_residual(c) ? (c->splits > 1 ? c->splits : 1) : c->splits;
    if (!sm90_residual(c) && (c->path != FUSE_PATH_CUBLASLT || c->splits < 2)) return true;
    if ((double)planes * (double)m * n * sizeof(float) <= (double)ws.bytes) return true;
    CHECK(st == STOF_ERR_INVALID_ARG && strstr(stof_last_error(), "workspace"),
          "%s: partial sums past the workspace gave %s (%s)", label, stof_status_str(st),
          stof_last_error());
    return false;
}

/* choices_for(GEMM_BIAS_ACT) plus, where they can run, the gemm_sm90 configs. */
static int linear_act_choices(fuse_choice *out, int cap)
{
    int n = choices_for(FUSE_TPL_GEMM_BIAS_ACT, out, cap);
    if (!sm90_runs) return n;
    int count = 0;
    const fuse_config *list = fuse_config_list(FUSE_TPL_GEMM_SM90, &count);
    for (int i = 0; i < count && n < cap; i++) {
        memset(&out[n], 0, sizeof out[n]);
        out[n].path = FUSE_PATH_STOF;
        out[n].config = list[i];
        n++;
    }
    return n;
}

static int linear_act_family(const fuse_choice *c)
{
    if (c->path == FUSE_PATH_CUBLASLT) return FAM_LT_ACT;
    return c->config.tpl == FUSE_TPL_GEMM_SM90 ? FAM_SM90 : FAM_BIAS_ACT;
}

static void choice_name(const fuse_choice *c, char *buf, size_t cap)
{
    if (c->path == FUSE_PATH_CUBLASLT && c->splits >= 2)
        snprintf(buf, cap, "cublaslt k/%d", c->splits);
    else if (c->path == FUSE_PATH_CUBLASLT)
        snprintf(buf, cap, "cublaslt");
    else if (c->config.tpl == FUSE_TPL_NONE)
        snprintf(buf, cap, "stof default");
    else
        fuse_config_format(&c->config, buf, cap);
}

/* A config the device cannot run must be refused cleanly; returns true when it can run. */
static bool runnable(stof_ctx *ctx, const fuse_choice *c, int64_t m, int n, int k)
{
    if (c->path != FUSE_PATH_STOF || c->config.tpl == FUSE_TPL_NONE) return true;
    return fuse_config_check_shape(&c->config, m, n, k, ctx->smem_per_block_optin) == STOF_OK;
}

static void run_linear_act(stof_ctx *ctx, fuse_ws ws, const shape_data *s, const dev_data *d,
                           stof_dtype dt, stof_act act, const float *ref_dev, void *y)
{
    fuse_choice ch[16];
    int nch = linear_act_choices(ch, 16);
    fuse_linear_args a = {0};
    a.dtype = dt;
    a.m = s->t;
    a.n = s->inter;
    a.k = s->hidden;
    a.x = d->x;
    a.w = d->w1;
    a.bias = d->b1;
    a.act = act;
    a.y = y;
    for (int i = 0; i < nch; i++) {
        char name[96], label[200];
        choice_name(&ch[i], name, sizeof name);
        label_of(label, sizeof label, fuse_act_name(act), s, dt, name);
        fuse_test_poison(y, (size_t)a.m * a.n * 2);
        stof_status st = fuse_linear_act(ctx, &ch[i], &a, ws);
        expect_close(label, linear_act_family(&ch[i]), st, y, dt, ref_dev, a.m * a.n, a.n);
    }
    if (sm90_runs) { /* its default rule */
        char label[200];
        label_of(label, sizeof label, fuse_act_name(act), s, dt, "gemm_sm90 default");
        fuse_test_poison(y, (size_t)a.m * a.n * 2);
        expect_close(label, FAM_SM90, fuse_run_gemm_sm90(ctx, NULL, &a), y, dt, ref_dev, a.m * a.n,
                     a.n);
    }
    /* Every algorithm cuBLASLt's heuristic offers (what the tuner chooses among). */
    fuse_linear_args plain = a;
    stof_act lt_act = fuse_lt_has_act(act) ? act : ACT_NONE;
    if (!fuse_lt_has_act(act)) plain.bias = NULL;
    int algos = 0;
    CHECK_OK(fuse_lt_algo_count(ctx, &plain, lt_act, NULL, 0, ws, &algos));
    CHECK(algos >= 1 && algos <= FUSE_LT_MAX_ALGOS, "cuBLASLt offers %d algorithms", algos);
    for (int k = 1; k < algos; k++) {
        fuse_choice lt;
        memset(&lt, 0, sizeof lt);
        lt.path = FUSE_PATH_CUBLASLT;
        lt.lt_algo = k;
        char name[64], label[200];
        snprintf(name, sizeof name, "cublaslt#%d", k);
        label_of(label, sizeof label, fuse_act_name(act), s, dt, name);
        fuse_test_poison(y, (size_t)a.m * a.n * 2);
        stof_status st = fuse_linear_act(ctx, &lt, &a, ws);
        expect_close(label, FAM_LT_ACT, st, y, dt, ref_dev, a.m * a.n, a.n);
    }
    fuse_choice beyond;
    memset(&beyond, 0, sizeof beyond);
    beyond.path = FUSE_PATH_CUBLASLT;
    beyond.lt_algo = algos;
    if (algos < FUSE_LT_MAX_ALGOS)
        CHECK_STATUS(fuse_linear_act(ctx, &beyond, &a, ws), STOF_ERR_UNSUPPORTED);
}

static void run_res_ln(stof_ctx *ctx, fuse_ws ws, const shape_data *s, const dev_data *d,
                       stof_dtype dt, const float *ref_dev, void *y)
{
    fuse_choice ch[20];
    int nch = residual_choices(FUSE_TPL_GEMM_RES_LN, s->inter, ch, 20);
    fuse_linear_args a = {0};
    a.dtype = dt;
    a.m = s->t;
    a.n = s->hidden;
    a.k = s->inter;
    a.x = d->z;
    a.w = d->w2;
    a.bias = d->b2;
    a.residual = d->res;
    a.gamma = d->gamma;
    a.beta = d->beta;
    a.eps = EPS;
    a.y = y;
    for (int i = 0; i < nch; i++) {
        char name[96], label[200];
        choice_name(&ch[i], name, sizeof name);
        label_of(label, sizeof label, "res_ln", s, dt, name);
        fuse_test_poison(y, (size_t)a.m * a.n * 2);
        stof_status st = fuse_linear_res_ln(ctx, &ch[i], &a, ws);
        if (!sm90_cut_ok(label, &ch[i], a.k, st)) continue;
        if (!runnable(ctx, &ch[i], a.m, a.n, a.k)) {
            CHECK(st == STOF_ERR_UNSUPPORTED, "%s: a config too big for the device gave %s", label,
                  stof_status_str(st));
            continue;
        }
        if (!parts_fit(label, &ch[i], a.m, a.n, ws, st)) continue;
        expect_close(label, residual_family(&ch[i], FAM_RES_LN, FAM_LT_LN), st, y, dt, ref_dev,
                     a.m * a.n, a.n);
    }
}

static void run_chain(stof_ctx *ctx, fuse_ws ws, const shape_data *s, const dev_data *d,
                      stof_dtype dt, bool with_ln, const float *ref_dev, void *y, void *inter_buf)
{
    fuse_choice ch[20];
    int nch = residual_choices(FUSE_TPL_FFN_CHAIN, s->inter, ch, 20);
    fuse_ffn_args a = {0};
    a.dtype = dt;
    a.m = s->t;
    a.hidden = s->hidden;
    a.inter = s->inter;
    a.x = d->x;
    a.w1 = d->w1;
    a.b1 = d->b1;
    a.act = ACT_GELU;
    a.w2 = d->w2;
    a.b2 = d->b2;
    if (with_ln) {
        a.residual = d->res;
        a.gamma = d->gamma;
        a.beta = d->beta;
        a.eps = EPS;
    }
    a.y = y;
    a.inter_buf = inter_buf;
    for (int i = 0; i < nch; i++) {
        char name[96], label[200];
        choice_name(&ch[i], name, sizeof name);
        label_of(label, sizeof label, with_ln ? "ffn+ln" : "ffn", s, dt, name);
        fuse_test_poison(y, (size_t)a.m * a.hidden * 2);
        stof_status st = fuse_ffn(ctx, &ch[i], &a, ws);
        if (!runnable(ctx, &ch[i], a.m, a.hidden, a.inter)) {
            CHECK(st == STOF_ERR_UNSUPPORTED, "%s: a config too big for the device gave %s", label,
                  stof_status_str(st));
            continue;
        }
        /* without a LayerNorm the down projection runs as one GEMM whatever the split */
        if (with_ln && !parts_fit(label, &ch[i], a.m, a.hidden, ws, st)) continue;
        expect_close(label,
                     with_ln ? residual_family(&ch[i], FAM_CHAIN, FAM_LT_FFN)
                             : (ch[i].path == FUSE_PATH_CUBLASLT ? FAM_LT_FFN : FAM_CHAIN),
                     st, y, dt, ref_dev, a.m * a.hidden, a.hidden);
    }
}

static void test_shape(stof_ctx *ctx, fuse_ws ws, test_rng *r, int hidden, int64_t t)
{
    shape_data s;
    shape_make(&s, r, hidden, t);
    int64_t TI = t * s.inter, TH = t * s.hidden;
    dev_data d[2];
    for (int i = 0; i < 2; i++)
        dev_make(&d[i], &s, dtypes[i]);
    void *y_big = fuse_test_alloc((size_t)TI * 2);
    void *y = fuse_test_alloc((size_t)TH * 2);
    void *inter_buf = fuse_test_alloc((size_t)TI * 2);

    /* linear + act: one reference upload per activation, shared by both dtypes */
    float *act_ref = host_alloc(TI);
    float *act_dev = fuse_test_alloc((size_t)TI * 4);
    for (size_t ai = 0; ai < sizeof acts / sizeof acts[0]; ai++) {
        memcpy(act_ref, s.g1, sizeof(float) * TI);
        cpu_activation(act_ref, TI, acts[ai]);
        fuse_test_put(act_dev, act_ref, TI, STOF_F32);
        for (int di = 0; di < 2; di++)
            run_linear_act(ctx, ws, &s, &d[di], dtypes[di], acts[ai], act_dev, y_big);
    }
    free(act_ref);
    cudaFree(act_dev);

    float *ln_dev = dev_f32(s.ref_ln, TH);
    float *chain_dev = dev_f32(s.ref_chain, TH);
    float *plain_dev = dev_f32(s.ref_plain, TH);
    for (int di = 0; di < 2; di++) {
        run_res_ln(ctx, ws, &s, &d[di], dtypes[di], ln_dev, y);
        run_chain(ctx, ws, &s, &d[di], dtypes[di], true, chain_dev, y, inter_buf);
        run_chain(ctx, ws, &s, &d[di], dtypes[di], false, plain_dev, y, inter_buf);
    }
    cudaFree(ln_dev);
    cudaFree(chain_dev);
    cudaFree(plain_dev);
    cudaFree(y_big);
    cudaFree(y);
    cudaFree(inter_buf);
    for (int i = 0; i < 2; i++)
        dev_free(&d[i]);
    shape_free(&s);
}

/* m, n, k that are no multiple of any tile: the zero-filled edges and masked stores. */
static void test_odd_shapes(stof_ctx *ctx, fuse_ws ws, test_rng *r)
{
    const int64_t m = 77;
    const int n = 200, k = 72;
    float *x = grid_array(r, m * k, -1.f, 1.f);
    float *w = grid_array(r, (int64_t)n * k, -0.3f, 0.3f);
    float *b = grid_array(r, n, -0.5f, 0.5f);
    float *res = grid_array(r, m * n, -1.f, 1.f);
    float *gamma = grid_array(r, n, 0.5f, 1.5f);
    float *beta = grid_array(r, n, -0.5f, 0.5f);
    float *ref_act = host_alloc(m * n), *pre = host_alloc(m * n), *ref_ln = host_alloc(m * n);
    cpu_linear(x, w, b, ref_act, m, n, k, ACT_GELU_TANH);
    cpu_linear(x, w, b, pre, m, n, k, ACT_NONE);
    cpu_layernorm(pre, res, gamma, beta, ref_ln, m, n, EPS);
    float *act_dev = dev_f32(ref_act, m * n), *ln_dev = dev_f32(ref_ln, m * n);
    for (int di = 0; di < 2; di++) {
        stof_dtype dt = dtypes[di];
        void *dx = fuse_test_upload(x, m * k, dt), *dw = fuse_test_upload(w, (int64_t)n * k, dt);
        void *db = fuse_test_upload(b, n, dt), *dres = fuse_test_upload(res, m * n, dt);
        void *dg = fuse_test_upload(gamma, n, dt), *dbeta = fuse_test_upload(beta, n, dt);
        void *y = fuse_test_alloc((size_t)m * n * 2);
        fuse_linear_args a = {0};
        a.dtype = dt;
        a.m = m;
        a.n = n;
        a.k = k;
        a.x = dx;
        a.w = dw;
        a.bias = db;
        a.act = ACT_GELU_TANH;
        a.residual = dres;
        a.gamma = dg;
        a.beta = dbeta;
        a.eps = EPS;
        a.y = y;
        fuse_choice ch[16];
        int nch = linear_act_choices(ch, 16);
        fuse_linear_args lin = a;
        lin.residual = NULL; /* linear + act would add it (test_fuse_epilogues) */
        for (int i = 0; i < nch; i++) {
            char name[96], label[200];
            choice_name(&ch[i], name, sizeof name);
            snprintf(label, sizeof label, "odd 77x200x72 gelu_tanh %s [%s]", stof_dtype_name(dt),
                     name);
            fuse_test_poison(y, (size_t)m * n * 2);
            expect_close(label, linear_act_family(&ch[i]), fuse_linear_act(ctx, &ch[i], &lin, ws),
                         y, dt, act_dev, m * n, n);
        }
        nch = residual_choices(FUSE_TPL_GEMM_RES_LN, k, ch, 16);
        for (int i = 0; i < nch; i++) {
            char name[96], label[200];
            choice_name(&ch[i], name, sizeof name);
            snprintf(label, sizeof label, "odd 77x200x72 res_ln %s [%s]", stof_dtype_name(dt),
                     name);
            fuse_test_poison(y, (size_t)m * n * 2);
            stof_status st = fuse_linear_res_ln(ctx, &ch[i], &a, ws);
            if (!sm90_cut_ok(label, &ch[i], k, st)) continue;
            expect_close(label, residual_family(&ch[i], FAM_RES_LN, FAM_LT_LN), st, y, dt, ln_dev,
                         m * n, n);
        }
        /* no bias at all */
        cpu_linear(x, w, NULL, pre, m, n, k, ACT_RELU);
        float *nb_dev = dev_f32(pre, m * n);
        a.bias = NULL;
        a.act = ACT_RELU;
        a.residual = NULL;
        nch = linear_act_choices(ch, 16);
        for (int i = 0; i < nch; i++) {
            char name[96], label[200];
            choice_name(&ch[i], name, sizeof name);
            snprintf(label, sizeof label, "odd no-bias relu %s [%s]", stof_dtype_name(dt), name);
            fuse_test_poison(y, (size_t)m * n * 2);
            expect_close(label, linear_act_family(&ch[i]), fuse_linear_act(ctx, &ch[i], &a, ws), y,
                         dt, nb_dev, m * n, n);
        }
        cudaFree(nb_dev);
        void *ptrs[] = {dx, dw, db, dres, dg, dbeta, y};
        for (size_t i = 0; i < sizeof ptrs / sizeof ptrs[0]; i++)
            cudaFree(ptrs[i]);
    }
    cudaFree(act_dev);
    cudaFree(ln_dev);
    float *all[] = {x, w, b, res, gamma, beta, ref_act, pre, ref_ln};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        free(all[i]);
}

/*
 * gemm_sm90 on shapes that are no multiple of its tiles: m and n ragged
 * against 128 and 256, k a multiple of 8 but not of its 64-deep slices (the
 * TMA boxes reach past the tensor and are zero-filled), down to 1 x 8 x 8;
 * enough tiles that a persistent CTA runs several, with k slices that do not
 * divide into its stages. Every activation, both dtypes, with and without bias.
 */
static void test_sm90_ragged(stof_ctx *ctx, test_rng *r)
{
    static const struct {
        int64_t m;
        int n, k;
    } shapes[] = {{1, 8, 8},        {7, 72, 200},      {77, 200, 72},    {333, 328, 136},
                  {300, 2304, 768}, {4099, 1160, 200}, {2000, 264, 520}, {130, 200, 1000}};
    if (!sm90_runs) return;
    int count = 0;
    const fuse_config *list = fuse_config_list(FUSE_TPL_GEMM_SM90, &count);
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
        const int64_t m = shapes[si].m;
        const int n = shapes[si].n, k = shapes[si].k;
        float *x = grid_array(r, m * k, -1.f, 1.f);
        float *w = grid_array(r, (int64_t)n * k, -1.f / sqrtf((float)k), 1.f / sqrtf((float)k));
        float *b = grid_array(r, n, -0.5f, 0.5f);
        /* ReLU of the 8 values of 1 x 8 x 8 is all zero about once in 256
         * draws, and the comparison refuses an all-zero reference: column 0's
         * bias passes any |x w| (at most sqrt(k) = 2.83 there) */
        b[0] = 3.f;
        float *ref = host_alloc(m * n);
        float *ref_dev = fuse_test_alloc((size_t)m * n * 4);
        void *y = fuse_test_alloc((size_t)m * n * 2);
        void *dx[2], *dw[2], *db[2];
        for (int di = 0; di < 2; di++) {
            dx[di] = fuse_test_upload(x, m * k, dtypes[di]);
            dw[di] = fuse_test_upload(w, (int64_t)n * k, dtypes[di]);
            db[di] = fuse_test_upload(b, n, dtypes[di]);
        }
        for (size_t ai = 0; ai <= sizeof acts / sizeof acts[0]; ai++) {
            /* the last round: exact GELU without bias */
            const bool no_bias = ai == sizeof acts / sizeof acts[0];
            const stof_act act = no_bias ? ACT_GELU : acts[ai];
            cpu_linear(x, w, no_bias ? NULL : b, ref, m, n, k, act);
            fuse_test_put(ref_dev, ref, m * n, STOF_F32);
            for (int di = 0; di < 2; di++) {
                fuse_linear_args a = {0};
                a.dtype = dtypes[di];
                a.m = m;
                a.n = n;
                a.k = k;
                a.x = dx[di];
                a.w = dw[di];
                a.bias = no_bias ? NULL : db[di];
                a.act = act;
                a.y = y;
                /* weights loaded ahead of the grid dependency, or not: each
                 * shape both ways across the two dtypes */
                a.w_ready = (si + (size_t)di) % 2 == 1;
                for (int i = 0; i <= count; i++) {
                    char name[96], label[240];
                    if (i < count)
                        fuse_config_format(&list[i], name, sizeof name);
                    else
                        snprintf(name, sizeof name, "gemm_sm90 default");
                    snprintf(label, sizeof label, "ragged %lldx%dx%d %s%s %s [%s]", (long long)m, n,
                             k, fuse_act_name(act), no_bias ? " no-bias" : "",
                             stof_dtype_name(dtypes[di]), name);
                    fuse_test_poison(y, (size_t)m * n * 2);
                    fuse_choice c = {FUSE_PATH_STOF, list[i < count ? i : 0], 0, 0};
                    stof_status st = i < count ? fuse_linear_act(ctx, &c, &a, (fuse_ws){NULL, 0})
                                               : fuse_run_gemm_sm90(ctx, NULL, &a);
                    expect_close(label, FAM_SM90, st, y, dtypes[di], ref_dev, m * n, n);
                }
            }
        }
        for (int di = 0; di < 2; di++) {
            cudaFree(dx[di]);
            cudaFree(dw[di]);
            cudaFree(db[di]);
        }
        cudaFree(y);
        cudaFree(ref_dev);
        free(x);
        free(w);
        free(b);
        free(ref);
    }
}

/* Whether bytes [from, to) of dev still hold fuse_test_poison's 0xff. */
static bool still_poisoned(const void *dev, size_t from, size_t to)
{
    if (to <= from) return true;
    unsigned char *h = malloc(to - from);
    if (!h) exit(1);
    bool ok =
        cudaMemcpy(h, (const char *)dev + from, to - from, cudaMemcpyDeviceToHost) == cudaSuccess;
    for (size_t i = 0; ok && i < to - from; i++)
        ok = h[i] == 0xff;
    free(h);
    return ok;
}

/*
 * fuse_linear_args.live_rows on gemm_sm90: with *live = v, rows below v match
 * the reference, the row tiles from the first that starts at or past v are
 * never written (gemm_sm90's skip), and the LayerNorm of the residual segment
 * leaves every row from v on as it was. v = 0 writes nothing.
 */
static void test_sm90_live_rows(stof_ctx *ctx, fuse_ws ws, test_rng *r)
{
    if (!sm90_runs) return;
    shape_data s;
    shape_make(&s, r, 384, 128);
    const int64_t t = s.t;
    const int H = s.hidden, I = s.inter;
    int32_t *live = fuse_test_alloc(sizeof(int32_t));
    float *ref_g1 = fuse_test_alloc((size_t)t * I * 4),
          *ref_ln = fuse_test_alloc((size_t)t * H * 4);
    fuse_test_put(ref_g1, s.g1, t * I, STOF_F32);
    fuse_test_put(ref_ln, s.ref_ln, t * H, STOF_F32);
    void *y = fuse_test_alloc((size_t)t * I * 2);
    int count = 0;
    const fuse_config *list = fuse_config_list(FUSE_TPL_GEMM_SM90, &count);
    /* the small tile, the first (cooperative) and the ping-pong ones */
    fuse_config cfgs[4] = {fuse_config_sm90_small(), list[0]};
    int ncfg = 2;
    for (int i = 0; i < count && ncfg < 4; i++)
        if (list[i].warps_n == 2) cfgs[ncfg++] = list[i];
    CHECK(ncfg == 4, "gemm_sm90 has %d ping-pong configs, not 2", ncfg - 2);
    static const int32_t values[] = {0, 1, 20, 64, 65, 100, 128};
    for (int di = 0; di < 2; di++) {
        stof_dtype dt = dtypes[di];
        dev_data d;
        dev_make(&d, &s, dt);
        for (size_t vi = 0; vi < sizeof values / sizeof values[0]; vi++) {
            const int32_t v = values[vi];
            fuse_test_put_bytes(live, &v, sizeof v);
            fuse_linear_args a = {0};
            a.dtype = dt;
            a.m = t;
            a.live_rows = live;
            a.w_ready = vi % 2 == 1;
            char name[96], label[240];
            for (int ci = 0; ci < ncfg; ci++) { /* x w1^T + b1 */
                a.n = I, a.k = H, a.x = d.x, a.w = d.w1, a.bias = d.b1, a.act = ACT_NONE;
                a.y = y;
                fuse_config_format(&cfgs[ci], name, sizeof name);
                snprintf(label, sizeof label, "live rows %d of %lld, %dx%d %s [%s]", (int)v,
                         (long long)t, I, H, stof_dtype_name(dt), name);
                fuse_test_poison(y, (size_t)t * I * 2);
                fuse_choice c = {FUSE_PATH_STOF, cfgs[ci], 0, 0};
                stof_status st = fuse_linear_act(ctx, &c, &a, ws);
                if (v > 0) expect_close(label, FAM_SM90, st, y, dt, ref_g1, (int64_t)v * I, I);
                int64_t bm = cfgs[ci].block_m, skip_from = (v + bm - 1) / bm * bm;
                CHECK(st == STOF_OK &&
                          still_poisoned(y, (size_t)skip_from * I * 2, (size_t)t * I * 2),
                      "%s: rows from %lld on were written", label, (long long)skip_from);
            }
            for (int splits = 1; splits <= 4; splits++) { /* LN(z w2^T + b2 + res) */
                a.n = H, a.k = I, a.x = d.z, a.w = d.w2, a.bias = d.b2, a.act = ACT_NONE;
                a.residual = d.res, a.gamma = d.gamma, a.beta = d.beta, a.eps = EPS, a.y = y;
                snprintf(label, sizeof label, "live rows %d of %lld, res_ln %dx%d %s k/%d", (int)v,
                         (long long)t, H, I, stof_dtype_name(dt), splits);
                fuse_test_poison(y, (size_t)t * H * 2);
                fuse_choice c = {FUSE_PATH_STOF, cfgs[0], 0, splits};
                stof_status st = fuse_linear_res_ln(ctx, &c, &a, ws);
                if (v > 0) expect_close(label, FAM_SM90_LN, st, y, dt, ref_ln, (int64_t)v * H, H);
                CHECK(st == STOF_OK && still_poisoned(y, (size_t)v * H * 2, (size_t)t * H * 2),
                      "%s: rows from %d on were written", label, (int)v);
            }
        }
        dev_free(&d);
    }
    cudaFree(live);
    cudaFree(ref_g1);
    cudaFree(ref_ln);
    cudaFree(y);
    shape_free(&s);
}

/* y == residual (linear + LN) and y == x == residual (FFN): the in-place forms. */
static void test_in_place(stof_ctx *ctx, fuse_ws ws, test_rng *r)
{
    shape_data s;
    shape_make(&s, r, 768, 128);
    const int64_t t = s.t;
    const int H = s.hidden, I = s.inter;
    /* the FFN reference with the residual being x itself */
    float *h = host_alloc(t * I), *c = host_alloc(t * H), *ref_ffn = host_alloc(t * H);
    memcpy(h, s.g1, sizeof(float) * t * I);
    cpu_activation(h, t * I, ACT_GELU);
    cpu_linear(h, s.w2, s.b2, c, t, H, I, ACT_NONE);
    cpu_layernorm(c, s.x, s.gamma, s.beta, ref_ffn, t, H, EPS);
    float *ln_dev = dev_f32(s.ref_ln, t * H), *ffn_dev = dev_f32(ref_ffn, t * H);
    for (int di = 0; di < 2; di++) {
        stof_dtype dt = dtypes[di];
        dev_data d;
        dev_make(&d, &s, dt);
        void *y = fuse_test_alloc((size_t)t * H * 2);
        void *inter_buf = fuse_test_alloc((size_t)t * I * 2);
        fuse_choice ch[4] = {{FUSE_PATH_STOF, {FUSE_TPL_NONE, 0, 0, 0, 0, 0, 0}, 0, 0},
                             {FUSE_PATH_CUBLASLT, {FUSE_TPL_NONE, 0, 0, 0, 0, 0, 0}, 0, 0},
                             {FUSE_PATH_CUBLASLT, {FUSE_TPL_NONE, 0, 0, 0, 0, 0, 0}, 0, 4},
                             {FUSE_PATH_STOF, fuse_config_sm90_small(), 0, 4}};
        static const char *paths[4] = {"stof", "cublaslt", "cublaslt k/4", "gemm_sm90 k/4"};
        for (int i = 0; i < (sm90_runs ? 4 : 3); i++) {
            const char *path = paths[i];
            fuse_test_copy(y, d.res, (size_t)t * H * 2);
            fuse_linear_args a = {0};
            a.dtype = dt;
            a.m = t;
            a.n = H;
            a.k = I;
            a.x = d.z;
            a.w = d.w2;
            a.bias = d.b2;
            a.residual = y;
            a.gamma = d.gamma;
            a.beta = d.beta;
            a.eps = EPS;
            a.y = y;
            char label[160];
            snprintf(label, sizeof label, "in-place res_ln %s %s", stof_dtype_name(dt), path);
            expect_close(label, residual_family(&ch[i], FAM_RES_LN, FAM_LT_LN),
                         fuse_linear_res_ln(ctx, &ch[i], &a, ws), y, dt, ln_dev, t * H, H);
            if (sm90_residual(&ch[i])) continue; /* the FFN pair has no gemm_sm90 form */

            fuse_test_copy(y, d.x, (size_t)t * H * 2);
            fuse_ffn_args f = {0};
            f.dtype = dt;
            f.m = t;
            f.hidden = H;
            f.inter = I;
            f.x = y;
            f.w1 = d.w1;
            f.b1 = d.b1;
            f.act = ACT_GELU;
            f.w2 = d.w2;
            f.b2 = d.b2;
            f.residual = y;
            f.gamma = d.gamma;
            f.beta = d.beta;
            f.eps = EPS;
            f.y = y;
            f.inter_buf = inter_buf;
            snprintf(label, sizeof label, "in-place ffn %s %s", stof_dtype_name(dt), path);
            expect_close(label, residual_family(&ch[i], FAM_CHAIN, FAM_LT_FFN),
                         fuse_ffn(ctx, &ch[i], &f, ws), y, dt, ffn_dev, t * H, H);
        }
        cudaFree(y);
        cudaFree(inter_buf);
        dev_free(&d);
    }
    cudaFree(ln_dev);
    cudaFree(ffn_dev);
    free(h);
    free(c);
    free(ref_ffn);
    shape_free(&s);
}

/* The comparison itself: one poisoned element must give inf and be named. */
static void test_compare_reports(test_rng *r)
{
    const int64_t rows = 64, cols = 256, bad_row = 37, bad_col = 200;
    float *ref = grid_array(r, rows * cols, -1.f, 1.f);
    float *ref_dev = dev_f32(ref, rows * cols);
    for (int di = 0; di < 2; di++) {
        void *y = fuse_test_upload(ref, rows * cols, dtypes[di]);
        double e = fuse_test_rel_err(y, dtypes[di], ref_dev, rows * cols, cols);
        CHECK(e < 1e-6, "compare %s: an exact copy gives rel err %.3g%s",
              stof_dtype_name(dtypes[di]), e, fuse_test_rel_err_detail());
        fuse_test_poison((char *)y + (size_t)(bad_row * cols + bad_col) * 2, 2);
        e = fuse_test_rel_err(y, dtypes[di], ref_dev, rows * cols, cols);
        const char *detail = fuse_test_rel_err_detail();
        CHECK(isinf(e) && strstr(detail, "1 of 16384 outputs") &&
                  strstr(detail, "row 37, col 200") && strstr(detail, "0xffff"),
              "compare %s: one poisoned element gave rel err %.3g, detail \"%s\"",
              stof_dtype_name(dtypes[di]), e, detail);
        cudaFree(y);
    }
    cudaFree(ref_dev);
    free(ref);
}

/* Repeating a shape reuses its cuBLASLt plan; refusals that need a real device. */
static void test_cache_and_refusals(stof_ctx *ctx, fuse_ws ws)
{
    const int64_t m = 64;
    const int n = 256, k = 128;
    void *x = fuse_test_alloc((size_t)m * k * 2), *w = fuse_test_alloc((size_t)n * k * 2);
    void *y = fuse_test_alloc((size_t)m * n * 2), *b = fuse_test_alloc((size_t)n * 2);
    fuse_test_fill(x, 0x3c, (size_t)m * k * 2); /* 0x3c3c: about 1.06 in f16 */
    fuse_test_fill(w, 0x3c, (size_t)n * k * 2);
    fuse_test_fill(b, 0, (size_t)n * 2);
    fuse_linear_args a = {0};
    a.dtype = STOF_F16;
    a.m = m;
    a.n = n;
    a.k = k;
    a.x = x;
    a.w = w;
    a.bias = b;
    a.y = y;
    CHECK_OK(fuse_lt_gemm(ctx, &a, ACT_GELU_TANH, NULL, ws));
    int plans = fuse_lt_cached_plans(ctx);
    CHECK_OK(fuse_lt_gemm(ctx, &a, ACT_GELU_TANH, NULL, ws));
    CHECK(fuse_lt_cached_plans(ctx) == plans, "a repeated shape built a new plan (%d -> %d)", plans,
          fuse_lt_cached_plans(ctx));
    a.m = m + 8;
    CHECK_OK(fuse_lt_gemm(ctx, &a, ACT_GELU_TANH, NULL, ws));
    CHECK(fuse_lt_cached_plans(ctx) == plans + 1, "a new shape did not add a plan (%d -> %d)",
          plans, fuse_lt_cached_plans(ctx));
    a.m = m;
    CHECK_STATUS(fuse_lt_gemm(ctx, &a, ACT_GELU, NULL, ws), STOF_ERR_UNSUPPORTED);

    /* gemm_sm90 where it cannot run, or given to a segment it does not run:
     * an error before any launch */
    fuse_choice hopper = {FUSE_PATH_STOF, fuse_config_list(FUSE_TPL_GEMM_SM90, NULL)[0], 0, 0};
    if (!sm90_runs) {
        CHECK_STATUS(fuse_linear_act(ctx, &hopper, &a, ws), STOF_ERR_UNSUPPORTED);
        CHECK_STATUS(fuse_run_gemm_sm90(ctx, NULL, &a), STOF_ERR_UNSUPPORTED);
    }
    fuse_linear_args ln_args = a;
    ln_args.residual = y;
    ln_args.gamma = b;
    ln_args.beta = b;
    ln_args.eps = EPS;
    if (!sm90_runs) { /* where it runs, residual_choices compares it with the CPU */
        CHECK_STATUS(fuse_linear_res_ln(ctx, &hopper, &ln_args, ws), STOF_ERR_UNSUPPORTED);
    }
    /* partial sums over the output or the residual: refused before any launch, on the
     * cuBLASLt path as on gemm_sm90's */
    fuse_ws over = {y, (size_t)m * n * 2 * 8};
    fuse_choice lt_split = {FUSE_PATH_CUBLASLT, {FUSE_TPL_NONE, 0, 0, 0, 0, 0, 0}, 0, 2};
    CHECK_STATUS(fuse_linear_res_ln(ctx, &lt_split, &ln_args, over), STOF_ERR_INVALID_ARG);
    CHECK(strstr(stof_last_error(), "overlap") != NULL, "cuBLASLt partial sums over y: %s",
          stof_last_error());
    fuse_linear_args other_y = ln_args;
    other_y.y = fuse_test_alloc((size_t)m * n * 2);
    CHECK_STATUS(fuse_linear_res_ln(ctx, &lt_split, &other_y, over), STOF_ERR_INVALID_ARG);
    CHECK(strstr(stof_last_error(), "overlap") != NULL, "cuBLASLt partial sums over residual: %s",
          stof_last_error());
    cudaFree(other_y.y);
    if (sm90_runs) {
        fuse_choice small = {FUSE_PATH_STOF, fuse_config_sm90_small(), 0, 2};
        CHECK_STATUS(fuse_linear_res_ln(ctx, &small, &ln_args, over), STOF_ERR_INVALID_ARG);
        CHECK(strstr(stof_last_error(), "overlap") != NULL, "gemm_sm90 partial sums over y: %s",
              stof_last_error());
    }
    ln_args.gamma = NULL; /* a residual segment always ends in its LayerNorm */
    CHECK_STATUS(fuse_linear_res_ln(ctx, &hopper, &ln_args, ws), STOF_ERR_INVALID_ARG);
    CHECK(strstr(stof_last_error(), "gamma") != NULL,
          "gemm_sm90 given a residual segment without gamma: %s", stof_last_error());
    /* and the bias_act template by that name is refused by fuse_run_gemm_sm90 */
    if (sm90_runs) {
        const fuse_config *ba = fuse_config_list(FUSE_TPL_GEMM_BIAS_ACT, NULL);
        CHECK_STATUS(fuse_run_gemm_sm90(ctx, &ba[0], &a), STOF_ERR_INVALID_ARG);
    }

    /* the chain is compiled for three hidden sizes only */
    fuse_ffn_args f = {0};
    f.dtype = STOF_F16;
    f.m = m;
    f.hidden = 128;
    f.inter = 256;
    f.x = x;
    f.w1 = w;
    f.w2 = w;
    f.act = ACT_GELU;
    f.y = y;
    fuse_choice stof_default = {FUSE_PATH_STOF, {FUSE_TPL_NONE, 0, 0, 0, 0, 0, 0}, 0, 0};
    CHECK_STATUS(fuse_ffn(ctx, &stof_default, &f, ws), STOF_ERR_UNSUPPORTED);
    CHECK_STATUS(fuse_ffn(ctx, &hopper, &f, ws), STOF_ERR_INVALID_ARG);
    int count = 0;
    const fuse_config *chain = fuse_config_list(FUSE_TPL_FFN_CHAIN, &count);
    CHECK_STATUS(fuse_run_ffn_chain(ctx, &chain[0], &f), STOF_ERR_UNSUPPORTED);
    /* smem beyond the device: GEMM_RES_LN with 8192-wide rows of 64 fp32 rows (2 MiB) */
    const fuse_config *ln = fuse_config_list(FUSE_TPL_GEMM_RES_LN, &count);
    a.n = 8192;
    a.residual = y;
    a.gamma = b;
    a.beta = b;
    a.eps = EPS;
    void *y2 = fuse_test_alloc((size_t)m * 8192 * 2), *w2 = fuse_test_alloc((size_t)8192 * k * 2);
    a.y = y2;
    a.w = w2;
    a.residual = y2;
    CHECK_STATUS(fuse_run_gemm_res_ln(ctx, &ln[count - 1], &a), STOF_ERR_UNSUPPORTED);
    cudaFree(y2);
    cudaFree(w2);
    void *ptrs[] = {x, w, y, b};
    for (size_t i = 0; i < sizeof ptrs / sizeof ptrs[0]; i++)
        cudaFree(ptrs[i]);
}

int main(void)
{
    fuse_ws ws;
    stof_ctx *ctx = fuse_test_open("test_fuse_gemm", &ws);
    if (!ctx) return test_finish("test_fuse_gemm");
    test_rng r;
    test_rng_init(&r, test_seed());
    sm90_runs = fuse_sm90_available(ctx);
#ifdef STOF_HAVE_FUSE_SM90
    const char *sm90_why = "the template runs on 9.0 only";
#else
    const char *sm90_why = "this build has no sm_90a kernels";
#endif
    if (!sm90_runs)
        printf("test_fuse_gemm: gemm_sm90 configs skipped: %s is compute capability %d.%d and %s\n",
               ctx->device_name, ctx->cc_major, ctx->cc_minor, sm90_why);

    test_compare_reports(&r);
    test_cache_and_refusals(ctx, ws);
    test_odd_shapes(ctx, ws, &r);
    test_sm90_ragged(ctx, &r);
    test_sm90_live_rows(ctx, ws, &r);
    test_in_place(ctx, ws, &r);
    for (size_t hi = 0; hi < sizeof hiddens / sizeof hiddens[0]; hi++)
        for (size_t ti = 0; ti < sizeof token_counts / sizeof token_counts[0]; ti++)
            test_shape(ctx, ws, &r, hiddens[hi], token_counts[ti]);

    for (int f = 0; f < FAM_COUNT; f++)
        printf("worst rel err %-14s f16 %.3g  bf16 %.3g\n", fam_names[f], worst[f][0], worst[f][1]);
    CHECK(cudaDeviceSynchronize() == cudaSuccess, "device error at the end: %s",
          cudaGetErrorString(cudaGetLastError()));
    stof_ctx_destroy(ctx);
    return test_finish("test_fuse_gemm");
}
