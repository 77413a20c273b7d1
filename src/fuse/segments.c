/*
 * segments.c — one function per operator segment of an encoder layer, each
 * running either its stof template (one kernel) or the cuBLASLt path plus row
 * kernels, with the same result up to rounding. The path is the caller's
 * choice (rules now, the tuner later); a template config left NONE is picked
 * by fuse_config_default.
 *
 * Linear + act has two templates: GEMM_BIAS_ACT (any GPU) and GEMM_SM90
 * (Hopper), the latter run only when the choice names one of its configs.
 * Both also take the pre-norm layers' epilogues: a residual added after the
 * bias (act none), and a GLU over w's interleaved halves (fuse.h), which
 * cuBLASLt has no epilogue for: its callers run the plain GEMM and fuse_glu.
 * Linear + residual + LayerNorm runs GEMM_RES_LN, or GEMM_SM90 when named:
 * its K slices (fuse_choice.splits) write fp32 partial sums into the front of
 * the workspace, which the LayerNorm kernel adds up with bias and residual.
 *
 * The cuBLASLt paths: linear + act uses the bias / ReLU / tanh-GELU
 * epilogues, and for exact GELU a plain GEMM followed by fuse_bias_act;
 * linear + residual + LayerNorm adds bias and residual in the GEMM epilogue
 * (C = residual, beta = 1) and normalises in place afterwards, or, with K
 * split (fuse_choice.splits), writes fp32 partial sums into the front of
 * the workspace for the LayerNorm kernel to add up with bias and residual.
 */
#include "fuse/internal.h"

static stof_status check_linear(stof_ctx *ctx, const fuse_linear_args *a, bool ln, const char *what)
{
    STOF_TRY(fuse_check_ctx(ctx, what));
    STOF_REQUIRE(a, STOF_ERR_INVALID_ARG, "%s: args is NULL", what);
    STOF_TRY(fuse_check_dtype(a->dtype, what));
    STOF_TRY(fuse_check_rows(a->m, "m", what));
    STOF_TRY(fuse_check_width(a->n, ln ? FUSE_MAX_ROW_WIDTH : INT32_MAX, "n", what));
    STOF_TRY(fuse_check_width(a->k, INT32_MAX, "k", what));
    STOF_TRY(fuse_check_ptr(a->x, "x", what));
    STOF_TRY(fuse_check_ptr(a->w, "w", what));
    STOF_TRY(fuse_check_ptr(a->y, "y", what));
    STOF_TRY(fuse_check_opt_ptr(a->bias, "bias", what));
    STOF_REQUIRE(!a->glu || (!ln && a->n % (2 * FUSE_GLU_BLOCK) == 0 && !a->residual),
                 STOF_ERR_INVALID_ARG,
                 "%s: a GLU epilogue needs n (%d) a multiple of %d, no residual and no LayerNorm",
                 what, a->n, 2 * FUSE_GLU_BLOCK);
    size_t y_bytes = (size_t)a->m * (a->glu ? a->n / 2 : a->n) * 2;
    STOF_REQUIRE(!fuse_overlap(a->x, (size_t)a->m * a->k * 2, a->y, y_bytes), STOF_ERR_INVALID_ARG,
                 "%s: y overlaps x", what);
    STOF_REQUIRE(!fuse_overlap(a->w, (size_t)a->n * a->k * 2, a->y, y_bytes), STOF_ERR_INVALID_ARG,
                 "%s: y overlaps w", what);
    if (ln) {
        STOF_REQUIRE(!a->rope.positions, STOF_ERR_UNSUPPORTED,
                     "%s: a residual + LayerNorm segment has no RoPE epilogue", what);
        STOF_TRY(fuse_check_ptr(a->residual, "residual", what));
        STOF_TRY(fuse_check_ptr(a->gamma, "gamma", what));
        STOF_TRY(fuse_check_ptr(a->beta, "beta", what));
        STOF_TRY(fuse_check_eps(a->eps, what));
        STOF_REQUIRE(a->residual == a->y || !fuse_overlap(a->residual, y_bytes, a->y, y_bytes),
                     STOF_ERR_INVALID_ARG,
                     "%s: y partly overlaps residual (in-place must be the same pointer)", what);
    } else {
        STOF_TRY(fuse_check_act(a->act, what));
        STOF_TRY(fuse_check_opt_ptr(a->residual, "residual", what));
        STOF_REQUIRE(!a->residual || a->act == ACT_NONE, STOF_ERR_INVALID_ARG,
                     "%s: a residual goes with act none (not %s)", what, fuse_act_name(a->act));
        STOF_REQUIRE(!a->residual || a->residual == a->y ||
                         !fuse_overlap(a->residual, y_bytes, a->y, y_bytes),
                     STOF_ERR_INVALID_ARG,
                     "%s: y partly overlaps residual (in-place must be the same pointer)", what);
    }
    return STOF_OK;
}

static stof_status check_ffn(stof_ctx *ctx, const fuse_ffn_args *a, const char *what)
{
    STOF_TRY(fuse_check_ctx(ctx, what));
    STOF_REQUIRE(a, STOF_ERR_INVALID_ARG, "%s: args is NULL", what);
    STOF_TRY(fuse_check_dtype(a->dtype, what));
    STOF_TRY(fuse_check_rows(a->m, "m", what));
    STOF_TRY(fuse_check_width(a->hidden, FUSE_MAX_ROW_WIDTH, "hidden", what));
    STOF_TRY(fuse_check_width(a->inter, INT32_MAX, "inter", what));
    STOF_TRY(fuse_check_ptr(a->x, "x", what));
    STOF_TRY(fuse_check_ptr(a->w1, "w1", what));
    STOF_TRY(fuse_check_ptr(a->w2, "w2", what));
    STOF_TRY(fuse_check_ptr(a->y, "y", what));
    STOF_TRY(fuse_check_opt_ptr(a->b1, "b1", what));
    STOF_TRY(fuse_check_opt_ptr(a->b2, "b2", what));
    STOF_TRY(fuse_check_opt_ptr(a->residual, "residual", what));
    STOF_TRY(fuse_check_act(a->act, what));
    STOF_REQUIRE(!a->gamma == !a->beta, STOF_ERR_INVALID_ARG,
                 "%s: gamma and beta come together (gamma %p, beta %p)", what, a->gamma, a->beta);
    if (a->gamma) {
        STOF_TRY(fuse_check_ptr(a->gamma, "gamma", what));
        STOF_TRY(fuse_check_ptr(a->beta, "beta", what));
        STOF_TRY(fuse_check_eps(a->eps, what));
    }
    size_t row_bytes = (size_t)a->m * a->hidden * 2;
    size_t w_bytes = (size_t)a->hidden * a->inter * 2;
    STOF_REQUIRE(a->x == a->y || !fuse_overlap(a->x, row_bytes, a->y, row_bytes),
                 STOF_ERR_INVALID_ARG,
                 "%s: y partly overlaps x (in-place must be the same pointer)", what);
    STOF_REQUIRE(!a->residual || a->residual == a->y ||
                     !fuse_overlap(a->residual, row_bytes, a->y, row_bytes),
                 STOF_ERR_INVALID_ARG,
                 "%s: y partly overlaps residual (in-place must be the same pointer)", what);
    STOF_REQUIRE(!fuse_overlap(a->w1, w_bytes, a->y, row_bytes) &&
                     !fuse_overlap(a->w2, w_bytes, a->y, row_bytes),
                 STOF_ERR_INVALID_ARG, "%s: y overlaps a weight", what);
    return STOF_OK;
}

/* The template config to run: the caller's, or the rule-based default. */
static stof_status resolve_config(stof_ctx *ctx, const fuse_config *given, fuse_tpl tpl, int64_t m,
                                  int n, int k, const char *what, fuse_config *out)
{
    if (given && given->tpl != FUSE_TPL_NONE) {
        STOF_REQUIRE(given->tpl == tpl, STOF_ERR_INVALID_ARG,
                     "%s: config template %s does not run this segment (needs %s)", what,
                     fuse_tpl_name(given->tpl), fuse_tpl_name(tpl));
        STOF_TRY(fuse_config_check_shape(given, m, n, k, fuse_smem_limit(ctx)));
        *out = *given;
        return STOF_OK;
    }
    *out = fuse_config_default(tpl, m, n, k, ctx->sm_count, fuse_smem_limit(ctx));
    STOF_REQUIRE(out->tpl == tpl, STOF_ERR_UNSUPPORTED,
                 "%s: no %s config fits m=%lld n=%d k=%d on %s", what, fuse_tpl_name(tpl),
                 (long long)m, n, k, ctx->device_name);
    return STOF_OK;
}

stof_status fuse_run_gemm_bias_act(stof_ctx *ctx, const fuse_config *c,
                                   const fuse_linear_args *args)
{
    const char *what = "fuse_run_gemm_bias_act";
    STOF_TRY(check_linear(ctx, args, false, what));
    STOF_REQUIRE(!args->rope.positions, STOF_ERR_UNSUPPORTED,
                 "%s: gemm_bias_act has no RoPE epilogue (gemm_sm90 has; else run fuse_rope "
                 "after the GEMM)",
                 what);
    fuse_config cfg;
    STOF_TRY(resolve_config(ctx, c, FUSE_TPL_GEMM_BIAS_ACT, args->m, args->n, args->k, what, &cfg));
    return fuse_launch_gemm_bias_act(ctx, &cfg, args);
}

stof_status fuse_run_gemm_res_ln(stof_ctx *ctx, const fuse_config *c, const fuse_linear_args *args)
{
    const char *what = "fuse_run_gemm_res_ln";
    STOF_TRY(check_linear(ctx, args, true, what));
    fuse_config cfg;
    STOF_TRY(resolve_config(ctx, c, FUSE_TPL_GEMM_RES_LN, args->m, args->n, args->k, what, &cfg));
    return fuse_launch_gemm_res_ln(ctx, &cfg, args);
}

#ifdef STOF_HAVE_FUSE_SM90
#define SM90_BUILT "its kernels are built"
#else
#define SM90_BUILT "this build has no sm_90a kernels (STOF_CUDA_ARCHS did not name 90)"
#endif

static stof_status check_sm90(const stof_ctx *ctx, const char *what)
{
    STOF_REQUIRE(fuse_sm90_available(ctx), STOF_ERR_UNSUPPORTED,
                 "%s: the gemm_sm90 template runs on compute capability 9.0 GPUs only; this is "
                 "%s (cc %d.%d) and " SM90_BUILT,
                 what, ctx->device_name, ctx->cc_major, ctx->cc_minor);
    return STOF_OK;
}

/* The front of ws for the fp32 partial sums of a's GEMM in splits K slices:
 * room for them, 16-byte aligned (the LayerNorm reads them four floats at a
 * time), and clear of every operand the GEMM and the LayerNorm read or write. */
static stof_status parts_in_ws(fuse_ws ws, int splits, const fuse_linear_args *a, const char *what,
                               float **parts)
{
    const size_t bytes = fuse_lt_parts_bytes(splits, a->m, a->n);
    STOF_REQUIRE(ws.ptr && ws.bytes >= bytes, STOF_ERR_INVALID_ARG,
                 "%s: %d K slices of %lld x %d need %zu bytes of workspace for their partial "
                 "sums; %zu were lent",
                 what, splits, (long long)a->m, a->n, bytes, ws.bytes);
    STOF_REQUIRE(((uintptr_t)ws.ptr & 15) == 0, STOF_ERR_INVALID_ARG,
                 "%s: the workspace for partial sums is not 16-byte aligned", what);
    const size_t row_bytes = (size_t)a->m * a->n * 2;
    STOF_REQUIRE(!fuse_overlap(a->x, (size_t)a->m * a->k * 2, ws.ptr, bytes) &&
                     !fuse_overlap(a->w, (size_t)a->n * a->k * 2, ws.ptr, bytes) &&
                     !fuse_overlap(a->residual, row_bytes, ws.ptr, bytes) &&
                     !fuse_overlap(a->y, row_bytes, ws.ptr, bytes),
                 STOF_ERR_INVALID_ARG, "%s: the partial sums overlap x, w, residual or y", what);
    *parts = ws.ptr;
    return STOF_OK;
}

/* The RoPE epilogue's operands against the GEMM's and config cfg's tile. */
static stof_status check_rope_epi(const fuse_linear_args *a, const fuse_config *cfg,
                                  const char *what)
{
    const fuse_rope_epi *r = &a->rope;
    STOF_REQUIRE(a->act == ACT_NONE && !a->residual && !a->glu, STOF_ERR_INVALID_ARG,
                 "%s: the RoPE epilogue goes with act none, no residual and no GLU", what);
    STOF_TRY(fuse_check_index_ptr(r->positions, "rope.positions", what));
    STOF_TRY(fuse_check_rope_table(&r->table, r->head_dim, what));
    char name[64];
    fuse_config_format(cfg, name, sizeof name);
    STOF_REQUIRE(fuse_rope_epi_fits(cfg, r->head_dim, r->table.rot_dim), STOF_ERR_UNSUPPORTED,
                 "%s: %s cannot carry RoPE over %d of %d head dims (needs block_n a multiple "
                 "of the head dim and a (head_dim, rot_dim) of FUSE_ROPE_EPI_SHAPES); run "
                 "fuse_rope after the GEMM",
                 what, name, r->table.rot_dim, r->head_dim);
    STOF_REQUIRE(r->rope_cols >= r->head_dim && r->rope_cols % r->head_dim == 0 &&
                     r->rope_cols <= a->n,
                 STOF_ERR_SHAPE, "%s: rope_cols %d must be whole heads of %d within n = %d", what,
                 r->rope_cols, r->head_dim, a->n);
    return STOF_OK;
}

stof_status fuse_run_gemm_sm90(stof_ctx *ctx, const fuse_config *c, const fuse_linear_args *args)
{
    const char *what = "fuse_run_gemm_sm90";
    STOF_TRY(check_linear(ctx, args, false, what));
    STOF_TRY(check_sm90(ctx, what));
    fuse_config cfg;
    STOF_TRY(resolve_config(ctx, c, FUSE_TPL_GEMM_SM90, args->m, args->n, args->k, what, &cfg));
    if (args->rope.positions) STOF_TRY(check_rope_epi(args, &cfg, what));
#ifdef STOF_HAVE_FUSE_SM90
    return fuse_launch_gemm_sm90(ctx, &cfg, args);
#else
    return stof_error(STOF_ERR_INTERNAL, "%s: no sm_90a kernels to run", what);
#endif
}

/* gemm_sm90 cut into K slices whose fp32 partial sums take the front of ws;
 * the LayerNorm kernel adds them up with bias and residual. */
static stof_status sm90_linear_res_ln(stof_ctx *ctx, const fuse_choice *choice,
                                      const fuse_linear_args *args, fuse_ws ws, const char *what)
{
    STOF_TRY(check_linear(ctx, args, true, what));
    STOF_TRY(check_sm90(ctx, what));
    const int splits = choice->splits < 1 ? 1 : choice->splits;
    STOF_REQUIRE(splits == 1 || (args->k % splits == 0 && args->k / splits % 64 == 0),
                 STOF_ERR_SHAPE, "%s: k = %d does not cut into %d slices of a multiple of 64", what,
                 args->k, splits);
    fuse_config cfg;
    STOF_TRY(resolve_config(ctx, &choice->config, FUSE_TPL_GEMM_SM90, args->m, args->n,
                            args->k / splits, what, &cfg));
    float *parts = NULL;
    STOF_TRY(parts_in_ws(ws, splits, args, what, &parts));
#ifdef STOF_HAVE_FUSE_SM90
    STOF_TRY(fuse_launch_gemm_sm90_parts(ctx, &cfg, args, splits, parts));
    return fuse_launch_layernorm_parts(ctx, args->dtype, args->m, args->n, parts, splits,
                                       args->bias, args->residual, args->gamma, args->beta,
                                       args->eps, args->y, args->live_rows);
#else
    return stof_error(STOF_ERR_INTERNAL, "%s: no sm_90a kernels to run", what);
#endif
}

stof_status fuse_run_ffn_chain(stof_ctx *ctx, const fuse_config *c, const fuse_ffn_args *args)
{
    const char *what = "fuse_run_ffn_chain";
    STOF_TRY(check_ffn(ctx, args, what));
    fuse_config cfg;
    STOF_TRY(
        resolve_config(ctx, c, FUSE_TPL_FFN_CHAIN, args->m, args->hidden, args->inter, what, &cfg));
    return fuse_launch_ffn_chain(ctx, &cfg, args);
}

static stof_status check_path(const fuse_choice *choice, const char *what)
{
    STOF_REQUIRE(choice, STOF_ERR_INVALID_ARG, "%s: choice is NULL", what);
    STOF_REQUIRE(choice->path == FUSE_PATH_CUBLASLT || choice->path == FUSE_PATH_STOF,
                 STOF_ERR_INVALID_ARG, "%s: unknown path %d", what, (int)choice->path);
    STOF_REQUIRE(choice->splits >= 0 && choice->splits <= FUSE_LT_MAX_SPLITS, STOF_ERR_INVALID_ARG,
                 "%s: splits %d is outside [0, %d]", what, choice->splits, FUSE_LT_MAX_SPLITS);
    return STOF_OK;
}

/* cuBLASLt GEMM + activation (or + residual, C = residual with beta = 1);
 * exact GELU and SiLU, which cuBLASLt has no epilogue for, go through the
 * row kernel with the bias. */
static stof_status lt_linear_act(stof_ctx *ctx, const fuse_linear_args *args, fuse_ws ws)
{
    if (fuse_lt_has_act(args->act)) return fuse_lt_gemm(ctx, args, args->act, args->residual, ws);
    fuse_linear_args plain = *args;
    plain.bias = NULL;
    STOF_TRY(fuse_lt_gemm(ctx, &plain, ACT_NONE, NULL, ws));
    return fuse_bias_act(ctx, args->dtype, args->m, args->n, args->y, args->bias, args->act,
                         args->y);
}

int fuse_lt_split_rule(int64_t m, int n, int k, size_t ws_bytes)
{
    int s = m <= 256 ? 4 : (m <= 512 && k >= 2 * n) ? 2 : 1;
    while (s > 1 && (k % (8 * s) != 0 || k / s < 192))
        s--;
    while (s > 1 && (double)s * (double)m * n * sizeof(float) > (double)ws_bytes / 2)
        s--;
    return s;
}

int fuse_sm90_small_rule(int64_t m, int n, int k, bool residual, int sm_count, size_t ws_bytes)
{
    if (m < 1 || m > 128 || n < 8 || k < 8) return 0;
    const int64_t tiles = stof_cdiv(m, 64) * stof_cdiv(n, 64);
    for (int s = residual ? 4 : 1; s >= 1; s--) {
        if (s > 1 && (k % s != 0 || k / s % 64 != 0)) continue;
        if (k / s > 768 || tiles * s > sm_count) continue;
        if (residual && (double)s * (double)m * n * sizeof(float) > (double)ws_bytes / 2) continue;
        return s;
    }
    return 0;
}

/* cuBLASLt GEMM with bias and residual in its epilogue, then LayerNorm in
 * place; with splits >= 2 and a LayerNorm, the K-split GEMM into partial sums
 * at the front of ws, which the LayerNorm adds up with bias and residual. */
static stof_status lt_linear_res_ln(stof_ctx *ctx, const fuse_linear_args *args, int splits,
                                    fuse_ws ws, const char *what)
{
    if (splits >= 2 && args->gamma) {
        float *parts = NULL;
        STOF_TRY(parts_in_ws(ws, splits, args, what, &parts));
        STOF_TRY(fuse_lt_gemm_parts(ctx, args, splits, parts,
                                    fuse_lt_parts_rest(ws, splits, args->m, args->n)));
        return fuse_launch_layernorm_parts(ctx, args->dtype, args->m, args->n, parts, splits,
                                           args->bias, args->residual, args->gamma, args->beta,
                                           args->eps, args->y, NULL);
    }
    STOF_TRY(fuse_lt_gemm(ctx, args, ACT_NONE, args->residual, ws));
    if (!args->gamma) return STOF_OK;
    return fuse_add_layernorm(ctx, args->dtype, args->m, args->n, args->y, NULL, args->gamma,
                              args->beta, args->eps, args->y);
}

stof_status fuse_linear_act(stof_ctx *ctx, const fuse_choice *choice, const fuse_linear_args *args,
                            fuse_ws ws)
{
    const char *what = "fuse_linear_act";
    STOF_TRY(check_path(choice, what));
    STOF_REQUIRE(choice->splits <= 1, STOF_ERR_INVALID_ARG,
                 "%s: a linear + act segment runs uncut (splits %d)", what, choice->splits);
    STOF_REQUIRE(!args || !args->glu || choice->path == FUSE_PATH_STOF, STOF_ERR_INVALID_ARG,
                 "%s: cuBLASLt has no GLU epilogue: run the GEMM without glu, then fuse_glu", what);
    if (choice->path == FUSE_PATH_STOF) {
        if (choice->config.tpl == FUSE_TPL_GEMM_SM90)
            return fuse_run_gemm_sm90(ctx, &choice->config, args);
        return fuse_run_gemm_bias_act(ctx, &choice->config, args);
    }
    STOF_TRY(check_linear(ctx, args, false, what));
    fuse_linear_args a = *args;
    a.lt_algo = choice->lt_algo;
    return lt_linear_act(ctx, &a, ws);
}

stof_status fuse_linear_res_ln(stof_ctx *ctx, const fuse_choice *choice,
                               const fuse_linear_args *args, fuse_ws ws)
{
    const char *what = "fuse_linear_res_ln";
    STOF_TRY(check_path(choice, what));
    if (choice->path == FUSE_PATH_STOF && choice->config.tpl == FUSE_TPL_GEMM_SM90)
        return sm90_linear_res_ln(ctx, choice, args, ws, what);
    if (choice->path == FUSE_PATH_STOF) return fuse_run_gemm_res_ln(ctx, &choice->config, args);
    STOF_TRY(check_linear(ctx, args, true, what));
    fuse_linear_args a = *args;
    a.lt_algo = choice->lt_algo;
    return lt_linear_res_ln(ctx, &a, choice->splits, ws, what);
}

stof_status fuse_ffn(stof_ctx *ctx, const fuse_choice *choice, const fuse_ffn_args *args,
                     fuse_ws ws)
{
    const char *what = "fuse_ffn";
    STOF_TRY(check_path(choice, what));
    if (choice->path == FUSE_PATH_STOF) return fuse_run_ffn_chain(ctx, &choice->config, args);
    STOF_TRY(check_ffn(ctx, args, what));
    STOF_TRY(fuse_check_ptr(args->inter_buf, "inter_buf", what));
    size_t inter_bytes = (size_t)args->m * args->inter * 2;
    size_t row_bytes = (size_t)args->m * args->hidden * 2;
    STOF_REQUIRE(!fuse_overlap(args->inter_buf, inter_bytes, args->x, row_bytes) &&
                     !fuse_overlap(args->inter_buf, inter_bytes, args->y, row_bytes) &&
                     !fuse_overlap(args->inter_buf, inter_bytes, args->residual, row_bytes),
                 STOF_ERR_INVALID_ARG, "%s: inter_buf overlaps x, y or residual", what);

    fuse_linear_args up = {0};
    up.dtype = args->dtype;
    up.m = args->m;
    up.n = args->inter;
    up.k = args->hidden;
    up.x = args->x;
    up.w = args->w1;
    up.bias = args->b1;
    up.act = args->act;
    up.y = args->inter_buf;
    STOF_TRY(lt_linear_act(ctx, &up, ws));

    fuse_linear_args down = {0};
    down.dtype = args->dtype;
    down.m = args->m;
    down.n = args->hidden;
    down.k = args->inter;
    down.x = args->inter_buf;
    down.w = args->w2;
    down.bias = args->b2;
    down.gamma = args->gamma;
    down.beta = args->beta;
    down.eps = args->eps;
    down.residual = args->residual;
    down.y = args->y;
    return lt_linear_res_ln(ctx, &down, choice->splits, ws, what);
}
