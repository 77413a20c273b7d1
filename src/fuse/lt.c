/*
 * lt.c — the cuBLASLt path: y = epilogue(x w^T + bias (+ residual)).
 * Row-major y [m, n] is column-major y^T [n, m], so cuBLASLt computes
 * D (n x m) = op(A) B with A = w seen as k x n column-major (transposed) and
 * B = x seen as k x m: the "TN" layout tensor cores like best. The bias runs
 * along D's rows, i.e. y's columns; the residual enters as C with beta = 1.
 *
 * ctx->cublaslt holds a small state: the handle plus a cache of plans
 * (matmul and layout descriptors and the heuristic's algorithm) keyed by
 * everything the heuristic looked at, so a repeated shape costs only the
 * cublasLtMatmul call — which is also what a CUDA graph captures.
 */
#include "fuse/internal.h"

#include <stdlib.h>
#include <string.h>

#include <cublasLt.h>

#define LT_PLANS 256

typedef struct lt_key {
    int64_t m;
    int n, k;
    int dtype;
    int epilogue;
    int has_c;
    uint32_t align; /* smallest alignment of the operands, capped at 256 */
    size_t ws_bytes;
    int algo_index; /* which of the heuristic's results */
    int splits;     /* 0: y in the run dtype; S > 0: S fp32 planes of K slices (lt_gemm_parts) */
} lt_key;

typedef struct lt_plan {
    lt_key key;
    bool used;
    cublasLtMatmulDesc_t op;
    cublasLtMatrixLayout_t a, b, cd;
    cublasLtMatmulAlgo_t algo;
    int offered; /* algorithms the heuristic returned */
} lt_plan;

typedef struct lt_state {
    cublasLtHandle_t handle;
    int next; /* round-robin eviction once the cache is full */
    lt_plan plans[LT_PLANS];
} lt_state;

static stof_status lt_status(cublasStatus_t st, const char *what)
{
    if (st == CUBLAS_STATUS_SUCCESS) return STOF_OK;
    stof_status code = st == CUBLAS_STATUS_NOT_SUPPORTED  ? STOF_ERR_UNSUPPORTED
                       : st == CUBLAS_STATUS_ALLOC_FAILED ? STOF_ERR_OOM
                                                          : STOF_ERR_CUDA;
    return stof_error(code, "%s failed: %s (%s)", what, cublasLtGetStatusName(st),
                      cublasLtGetStatusString(st));
}
#define LT_TRY(call) STOF_TRY(lt_status((call), #call))

static void plan_release(lt_plan *p)
{
    if (!p->used) return;
    if (p->op) cublasLtMatmulDescDestroy(p->op);
    if (p->a) cublasLtMatrixLayoutDestroy(p->a);
    if (p->b) cublasLtMatrixLayoutDestroy(p->b);
    if (p->cd) cublasLtMatrixLayoutDestroy(p->cd);
    memset(p, 0, sizeof *p);
}

static void lt_state_destroy(void *handle)
{
    lt_state *s = handle;
    if (!s) return;
    for (int i = 0; i < LT_PLANS; i++)
        plan_release(&s->plans[i]);
    if (s->handle) cublasLtDestroy(s->handle);
    free(s);
}

static stof_status lt_state_get(stof_ctx *ctx, lt_state **out)
{
    if (!ctx->cublaslt) {
        lt_state *s = calloc(1, sizeof *s);
        STOF_REQUIRE(s, STOF_ERR_OOM, "out of host memory creating the cuBLASLt state");
        cublasStatus_t st = cublasLtCreate(&s->handle);
        if (st != CUBLAS_STATUS_SUCCESS) {
            free(s);
            return lt_status(st, "cublasLtCreate");
        }
        ctx->cublaslt = s;
        ctx->cublaslt_destroy = lt_state_destroy;
    }
    *out = ctx->cublaslt;
    return STOF_OK;
}

int fuse_lt_cached_plans(const stof_ctx *ctx)
{
    if (!ctx || !ctx->cublaslt) return 0;
    const lt_state *s = ctx->cublaslt;
    int n = 0;
    for (int i = 0; i < LT_PLANS; i++)
        n += s->plans[i].used;
    return n;
}

static uint32_t ptr_align(const void *p)
{
    uintptr_t v = (uintptr_t)p;
    uint32_t a = 256;
    while (a > 16 && v % a)
        a /= 2;
    return a;
}

static bool key_equal(const lt_key *a, const lt_key *b)
{
    return a->m == b->m && a->n == b->n && a->k == b->k && a->dtype == b->dtype &&
           a->epilogue == b->epilogue && a->has_c == b->has_c && a->align == b->align &&
           a->ws_bytes == b->ws_bytes && a->algo_index == b->algo_index && a->splits == b->splits;
}

static stof_status plan_build(lt_state *s, lt_plan *p, const lt_key *key, const void *bias)
{
    memset(p, 0, sizeof *p);
    p->used = true; /* plan_release copes with a half-built plan */
    p->key = *key;
    cudaDataType_t t = key->dtype == STOF_BF16 ? CUDA_R_16BF : CUDA_R_16F;
    LT_TRY(cublasLtMatmulDescCreate(&p->op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
    LT_TRY(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
    LT_TRY(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
    cublasLtEpilogue_t epi = (cublasLtEpilogue_t)key->epilogue;
    LT_TRY(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi));
    if (bias)
        LT_TRY(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias,
                                              sizeof bias));
    if (key->splits > 0) {
        /* batch s: the K slice [s k/S, (s+1) k/S) of w and x (same leading
         * dimension k, k/S elements further on), fp32 plane s of m x n */
        int32_t count = key->splits;
        int64_t ks = key->k / key->splits, plane = key->m * key->n;
        LT_TRY(cublasLtMatrixLayoutCreate(&p->a, t, (uint64_t)ks, (uint64_t)key->n, key->k));
        LT_TRY(cublasLtMatrixLayoutCreate(&p->b, t, (uint64_t)ks, (uint64_t)key->m, key->k));
        LT_TRY(cublasLtMatrixLayoutCreate(&p->cd, CUDA_R_32F, (uint64_t)key->n, (uint64_t)key->m,
                                          key->n));
        cublasLtMatrixLayout_t lay[3] = {p->a, p->b, p->cd};
        int64_t stride[3] = {ks, ks, plane};
        for (int i = 0; i < 3; i++) {
            LT_TRY(cublasLtMatrixLayoutSetAttribute(lay[i], CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT,
                                                    &count, sizeof count));
            LT_TRY(cublasLtMatrixLayoutSetAttribute(
                lay[i], CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride[i], sizeof stride[i]));
        }
    } else {
        LT_TRY(cublasLtMatrixLayoutCreate(&p->a, t, (uint64_t)key->k, (uint64_t)key->n, key->k));
        LT_TRY(cublasLtMatrixLayoutCreate(&p->b, t, (uint64_t)key->k, (uint64_t)key->m, key->k));
        LT_TRY(cublasLtMatrixLayoutCreate(&p->cd, t, (uint64_t)key->n, (uint64_t)key->m, key->n));
    }

    cublasLtMatmulPreference_t pref = NULL;
    LT_TRY(cublasLtMatmulPreferenceCreate(&pref));
    uint64_t ws = key->ws_bytes;
    uint32_t al = key->align;
    cublasStatus_t st = cublasLtMatmulPreferenceSetAttribute(
        pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws);
    cublasLtMatmulPreferenceAttributes_t align_attrs[4] = {
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
    for (int i = 0; i < 4 && st == CUBLAS_STATUS_SUCCESS; i++)
        st = cublasLtMatmulPreferenceSetAttribute(pref, align_attrs[i], &al, sizeof al);
    cublasLtMatmulHeuristicResult_t result[FUSE_LT_MAX_ALGOS];
    int found = 0;
    if (st == CUBLAS_STATUS_SUCCESS)
        st = cublasLtMatmulAlgoGetHeuristic(s->handle, p->op, p->a, p->b, p->cd, p->cd, pref,
                                            key->algo_index + 1, result, &found);
    cublasLtMatmulPreferenceDestroy(pref);
    STOF_TRY(lt_status(st, "cublasLtMatmulAlgoGetHeuristic"));
    STOF_REQUIRE(found > 0, STOF_ERR_UNSUPPORTED,
                 "cuBLASLt has no algorithm for m=%lld n=%d k=%d (%d K slices) %s epilogue %d "
                 "with %zu bytes of workspace",
                 (long long)key->m, key->n, key->k, key->splits,
                 stof_dtype_name((stof_dtype)key->dtype), key->epilogue, key->ws_bytes);
    p->offered = found;
    STOF_REQUIRE(key->algo_index < found, STOF_ERR_UNSUPPORTED,
                 "cuBLASLt offers %d algorithms for m=%lld n=%d k=%d; algorithm %d was asked for",
                 found, (long long)key->m, key->n, key->k, key->algo_index);
    p->algo = result[key->algo_index].algo;
    return STOF_OK;
}

static stof_status plan_get(lt_state *s, const lt_key *key, const void *bias, lt_plan **out)
{
    for (int i = 0; i < LT_PLANS; i++) {
        if (s->plans[i].used && key_equal(&s->plans[i].key, key)) {
            *out = &s->plans[i];
            return STOF_OK;
        }
    }
    lt_plan *p = NULL;
    for (int i = 0; i < LT_PLANS && !p; i++)
        if (!s->plans[i].used) p = &s->plans[i];
    if (!p) {
        p = &s->plans[s->next];
        s->next = (s->next + 1) % LT_PLANS;
        plan_release(p);
    }
    stof_status st = plan_build(s, p, key, bias);
    if (st != STOF_OK) {
        plan_release(p);
        return st;
    }
    *out = p;
    return STOF_OK;
}

bool fuse_lt_has_act(stof_act act)
{
    return act == ACT_NONE || act == ACT_GELU_TANH || act == ACT_RELU;
}

static int lt_epilogue(stof_act act, bool bias)
{
    switch (act) {
    case ACT_RELU: return bias ? CUBLASLT_EPILOGUE_RELU_BIAS : CUBLASLT_EPILOGUE_RELU;
    case ACT_GELU_TANH: return bias ? CUBLASLT_EPILOGUE_GELU_BIAS : CUBLASLT_EPILOGUE_GELU;
    default: return bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
    }
}

/* Everything the heuristic looks at, for one call. */
static lt_key make_key(const fuse_linear_args *a, stof_act act, const void *residual, fuse_ws ws,
                       int splits)
{
    lt_key key;
    memset(&key, 0, sizeof key);
    key.algo_index = a->lt_algo;
    key.m = a->m;
    key.n = a->n;
    key.k = a->k;
    key.dtype = (int)a->dtype;
    key.epilogue = lt_epilogue(act, a->bias != NULL);
    key.has_c = residual != NULL;
    uint32_t al = ptr_align(a->x);
    const void *ptrs[4] = {a->w, a->y, a->bias, residual};
    for (int i = 0; i < 4; i++) {
        if (!ptrs[i]) continue;
        uint32_t pa = ptr_align(ptrs[i]);
        if (pa < al) al = pa;
    }
    if (splits > 0) {
        /* every slice starts k/S elements after the last: its alignment too */
        uint32_t sa = ptr_align((const void *)(uintptr_t)((size_t)(a->k / splits) * 2));
        if (sa < al) al = sa;
        key.splits = splits;
    }
    key.align = al;
    key.ws_bytes =
        ws.ptr ? (ws.bytes < FUSE_LT_WORKSPACE_BYTES ? ws.bytes : FUSE_LT_WORKSPACE_BYTES) : 0;
    return key;
}

/* What both GEMM entries check: ctx, dtype, shape, x, w, the algorithm
 * index and the workspace's alignment. */
static stof_status check_operands(stof_ctx *ctx, const fuse_linear_args *a, fuse_ws ws,
                                  const char *what)
{
    STOF_TRY(fuse_check_ctx(ctx, what));
    STOF_REQUIRE(a, STOF_ERR_INVALID_ARG, "%s: args is NULL", what);
    STOF_TRY(fuse_check_dtype(a->dtype, what));
    STOF_TRY(fuse_check_rows(a->m, "m", what));
    STOF_TRY(fuse_check_width(a->n, INT32_MAX, "n", what));
    STOF_TRY(fuse_check_width(a->k, INT32_MAX, "k", what));
    STOF_TRY(fuse_check_ptr(a->x, "x", what));
    STOF_TRY(fuse_check_ptr(a->w, "w", what));
    STOF_REQUIRE(a->lt_algo >= 0 && a->lt_algo < FUSE_LT_MAX_ALGOS, STOF_ERR_INVALID_ARG,
                 "%s: lt_algo %d is outside [0, %d)", what, a->lt_algo, FUSE_LT_MAX_ALGOS);
    STOF_REQUIRE(!a->rope.positions, STOF_ERR_UNSUPPORTED,
                 "%s: cuBLASLt has no RoPE epilogue; run fuse_rope after the GEMM", what);
    STOF_REQUIRE((uintptr_t)ws.ptr % 256 == 0, STOF_ERR_INVALID_ARG,
                 "%s: workspace %p is not 256-byte aligned", what, ws.ptr);
    return STOF_OK;
}

stof_status fuse_lt_gemm(stof_ctx *ctx, const fuse_linear_args *a, stof_act act,
                         const void *residual, fuse_ws ws)
{
    const char *what = "fuse_lt_gemm";
    STOF_TRY(check_operands(ctx, a, ws, what));
    STOF_TRY(fuse_check_ptr(a->y, "y", what));
    STOF_TRY(fuse_check_opt_ptr(a->bias, "bias", what));
    STOF_TRY(fuse_check_opt_ptr(residual, "residual", what));
    STOF_TRY(fuse_check_act(act, what));
    STOF_REQUIRE(fuse_lt_has_act(act), STOF_ERR_UNSUPPORTED,
                 "%s: cuBLASLt has no %s epilogue (its GELU is the tanh approximation); it runs "
                 "as epilogue none + fuse_bias_act",
                 what, fuse_act_name(act));
    STOF_REQUIRE(!a->glu, STOF_ERR_INVALID_ARG,
                 "%s: cuBLASLt has no GLU epilogue; it writes both halves for fuse_glu", what);
    STOF_REQUIRE(!residual || act == ACT_NONE, STOF_ERR_INVALID_ARG,
                 "%s: a residual goes with act none (cuBLASLt would apply %s after adding it)",
                 what, fuse_act_name(act));
    size_t es = 2;
    STOF_REQUIRE(!fuse_overlap(a->x, (size_t)a->m * a->k * es, a->y, (size_t)a->m * a->n * es) &&
                     !fuse_overlap(a->w, (size_t)a->n * a->k * es, a->y, (size_t)a->m * a->n * es),
                 STOF_ERR_INVALID_ARG, "%s: y overlaps x or w", what);

    lt_state *s = NULL;
    STOF_TRY(lt_state_get(ctx, &s));
    lt_key key = make_key(a, act, residual, ws, 0);
    lt_plan *p = NULL;
    STOF_TRY(plan_get(s, &key, a->bias, &p));
    if (a->bias)
        LT_TRY(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &a->bias,
                                              sizeof a->bias));
    const float alpha = 1.f, beta = residual ? 1.f : 0.f;
    const void *c = residual ? residual : a->y;
    LT_TRY(cublasLtMatmul(s->handle, p->op, &alpha, a->w, p->a, a->x, p->b, &beta, c, p->cd, a->y,
                          p->cd, &p->algo, ws.ptr, key.ws_bytes, (cudaStream_t)ctx->stream));
    return STOF_OK;
}

stof_status fuse_lt_algo_count(stof_ctx *ctx, const fuse_linear_args *args, stof_act act,
                               const void *residual, int splits, fuse_ws ws, int *count)
{
    STOF_REQUIRE(args && count, STOF_ERR_INVALID_ARG, "fuse_lt_algo_count: args or count is NULL");
    STOF_TRY(fuse_check_ctx(ctx, "fuse_lt_algo_count"));
    *count = 0;
    lt_state *s = NULL;
    STOF_TRY(lt_state_get(ctx, &s));
    /* Asking for the last index makes the heuristic return all it has. */
    fuse_linear_args last = *args;
    last.lt_algo = FUSE_LT_MAX_ALGOS - 1;
    if (splits >= 2) { /* the batched GEMM of fuse_lt_gemm_parts; its planes go in ws */
        STOF_REQUIRE(splits <= FUSE_LT_MAX_SPLITS && args->k % (8 * splits) == 0,
                     STOF_ERR_INVALID_ARG, "fuse_lt_algo_count: k = %d in %d slices", args->k,
                     splits);
        last.bias = NULL;
        act = ACT_NONE;
        residual = NULL;
        ws = fuse_lt_parts_rest(ws, splits, args->m, args->n);
    }
    lt_key key = make_key(&last, act, residual, ws, splits >= 2 ? splits : 0);
    lt_plan probe;
    stof_status st = plan_build(s, &probe, &key, last.bias);
    *count = probe.offered;
    plan_release(&probe);
    if (st == STOF_ERR_UNSUPPORTED) stof_clear_error(); /* fewer than asked for: not an error */
    else STOF_TRY(st);
    return STOF_OK;
}

size_t fuse_lt_parts_bytes(int splits, int64_t m, int n)
{
    return ((size_t)splits * (size_t)m * (size_t)n * sizeof(float) + 255) / 256 * 256;
}

fuse_ws fuse_lt_parts_rest(fuse_ws ws, int splits, int64_t m, int n)
{
    size_t bytes = fuse_lt_parts_bytes(splits, m, n);
    fuse_ws rest = {NULL, 0};
    if (ws.ptr && ws.bytes > bytes) rest = (fuse_ws){(char *)ws.ptr + bytes, ws.bytes - bytes};
    return rest;
}

stof_status fuse_lt_gemm_parts(stof_ctx *ctx, const fuse_linear_args *a, int splits, float *parts,
                               fuse_ws ws)
{
    const char *what = "fuse_lt_gemm_parts";
    STOF_TRY(check_operands(ctx, a, ws, what));
    STOF_TRY(fuse_check_ptr(parts, "parts", what));
    STOF_REQUIRE(splits >= 1 && splits <= FUSE_LT_MAX_SPLITS && a->k % (8 * splits) == 0,
                 STOF_ERR_INVALID_ARG,
                 "%s: %d K slices: k = %d must split into 1 to %d slices of a multiple of 8", what,
                 splits, a->k, FUSE_LT_MAX_SPLITS);
    size_t bytes = (size_t)splits * (size_t)a->m * (size_t)a->n * sizeof(float);
    STOF_REQUIRE(!fuse_overlap(a->x, (size_t)a->m * a->k * 2, parts, bytes) &&
                     !fuse_overlap(a->w, (size_t)a->n * a->k * 2, parts, bytes) &&
                     !fuse_overlap(ws.ptr, ws.bytes, parts, bytes),
                 STOF_ERR_INVALID_ARG, "%s: parts overlaps x, w or the workspace", what);
    lt_state *s = NULL;
    STOF_TRY(lt_state_get(ctx, &s));
    fuse_linear_args plain = *a;
    plain.bias = NULL;
    plain.y = parts; /* for the alignment the key records */
    lt_key key = make_key(&plain, ACT_NONE, NULL, ws, splits);
    lt_plan *p = NULL;
    STOF_TRY(plan_get(s, &key, NULL, &p));
    const float alpha = 1.f, beta = 0.f;
    LT_TRY(cublasLtMatmul(s->handle, p->op, &alpha, a->w, p->a, a->x, p->b, &beta, parts, p->cd,
                          parts, p->cd, &p->algo, ws.ptr, key.ws_bytes, (cudaStream_t)ctx->stream));
    return STOF_OK;
}
