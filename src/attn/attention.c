/*
 * attention.c — stof_attention and stof_attention_select: validation of every
 * input (with the offending value in the message), the layout description the
 * kernels read, and dispatch to the selected GPU kernel or, on a CPU context,
 * to the CPU reference (attn_cpu.c).
 *
 * The one non-obvious choice: choosing a kernel reads only host-side figures
 * (the mask's compile-time estimate and the ctx's device properties), so
 * stof_attention never synchronises the stream.
 */
#include "attn/attn.h"
#include "attn/select.h"
#include "cpu/cpu_ref.h"

#include <math.h>
#include <string.h>

/* The Hopper kernel (blockwise_sm90.cu), built into its own object library
 * for sm_90a when STOF_CUDA_ARCHS has 90; STOF_HAVE_ATTN_SM90 says so. */
#ifdef STOF_HAVE_ATTN_SM90
#define ATTN_SM90_BUILT 1
#else
#define ATTN_SM90_BUILT 0
#endif

stof_attn_params stof_attn_default_params(void)
{
    stof_attn_params p;
    memset(&p, 0, sizeof p);
    p.scale = 0.0f;
    p.kernel = STOF_ATTN_AUTO;
    return p;
}

static stof_status check_params(const stof_attn_params *p)
{
    STOF_REQUIRE(isfinite(p->scale), STOF_ERR_INVALID_ARG, "attention scale is %g (must be finite)",
                 (double)p->scale);
    STOF_REQUIRE(isfinite(p->softcap) && p->softcap >= 0.0f, STOF_ERR_INVALID_ARG,
                 "attention softcap is %g (must be 0, none, or a finite positive cap)",
                 (double)p->softcap);
    STOF_REQUIRE(
        p->bias_kind >= STOF_BIAS_NONE && p->bias_kind <= STOF_BIAS_TENSOR, STOF_ERR_INVALID_ARG,
        "attention bias_kind %d is not NONE, T5, ALIBI or TENSOR (0 to 3)", (int)p->bias_kind);
    STOF_REQUIRE(p->bias_kind != STOF_BIAS_NONE || p->bias == NULL, STOF_ERR_INVALID_ARG,
                 "attention bias is given but bias_kind is NONE");
    STOF_REQUIRE(p->bias_kind == STOF_BIAS_NONE || p->bias != NULL, STOF_ERR_INVALID_ARG,
                 "attention bias_kind %d needs its table, slopes or tensor in params->bias "
                 "(NULL)",
                 (int)p->bias_kind);
    STOF_REQUIRE(p->t5_max_distance >= 0, STOF_ERR_INVALID_ARG,
                 "attention t5_max_distance is %d (0: 128, else positive)", p->t5_max_distance);
    STOF_REQUIRE(p->kernel == STOF_ATTN_AUTO || p->kernel == STOF_ATTN_BLOCKWISE ||
                     p->kernel == STOF_ATTN_ROWWISE || p->kernel == STOF_ATTN_BLOCKWISE_SM90 ||
                     p->kernel == STOF_ATTN_BLOCKWISE_SM90_WS,
                 STOF_ERR_INVALID_ARG,
                 "attention kernel %d is not AUTO, BLOCKWISE, BLOCKWISE_SM90, BLOCKWISE_SM90_WS "
                 "or ROWWISE (STOF_ATTN_CPU is only reported)",
                 (int)p->kernel);
    return STOF_OK;
}

/* The mask must live where the ctx runs (same device kind, same GPU). */
static stof_status check_mask_ctx(const stof_ctx *ctx, stof_mask *mask)
{
    STOF_REQUIRE(mask, STOF_ERR_INVALID_ARG, "attention mask is NULL");
    stof_memory want = ctx->device == STOF_DEVICE_GPU ? STOF_MEM_DEVICE : STOF_MEM_HOST;
    STOF_REQUIRE(stof_mask_memory(mask) == want, STOF_ERR_INVALID_ARG,
                 "the mask was compiled for the %s but the context runs on the %s",
                 stof_mask_memory(mask) == STOF_MEM_DEVICE ? "GPU" : "CPU",
                 ctx->device == STOF_DEVICE_GPU ? "GPU" : "CPU");
    const stof_ctx *mctx = stof_mask_ctx(mask);
    if (mctx && ctx->device == STOF_DEVICE_GPU)
        STOF_REQUIRE(mctx->gpu_index == ctx->gpu_index, STOF_ERR_INVALID_ARG,
                     "the mask lives on GPU %d but the context runs on GPU %d", mctx->gpu_index,
                     ctx->gpu_index);
    STOF_REQUIRE(stof_mask_tiles_view(mask), STOF_ERR_INVALID_ARG, "the mask has no tiles");
    return STOF_OK;
}

static stof_status check_dtype(const stof_ctx *ctx, const stof_tensor *t, const char *name)
{
    if (ctx->device == STOF_DEVICE_GPU) {
        STOF_REQUIRE(t->dtype != STOF_F32, STOF_ERR_UNSUPPORTED,
                     "tensor %s is f32; attention on the GPU takes f16 or bf16", name);
        STOF_REQUIRE(t->dtype == STOF_F16 || t->dtype == STOF_BF16, STOF_ERR_INVALID_ARG,
                     "tensor %s has dtype %s; attention takes f16 or bf16 on the GPU", name,
                     stof_dtype_name(t->dtype));
    } else {
        STOF_REQUIRE(t->dtype == STOF_F32 || t->dtype == STOF_F16 || t->dtype == STOF_BF16,
                     STOF_ERR_INVALID_ARG,
                     "tensor %s has dtype %s; attention takes f32, f16 or bf16 on the CPU", name,
                     stof_dtype_name(t->dtype));
    }
    return STOF_OK;
}

/* Reads q's layout and checks it against the mask: padded [B, H, Lq, D] or
 * packed [Tq, H, D] with cu_seqlens. Shared by attention and selection. */
static stof_status check_q_layout(const stof_ctx *ctx, const stof_tensor *q, const mask_tiles *t,
                                  bool packed, attn_shape *s)
{
    STOF_TRY(stof_tensor_check(q, "q"));
    STOF_TRY(stof_tensor_check_memory(ctx, q, "q"));
    STOF_TRY(check_dtype(ctx, q, "q"));
    memset(s, 0, sizeof *s);
    s->packed = packed;
    s->dtype = q->dtype;
    if (!packed) {
        STOF_REQUIRE(q->ndim == 4, STOF_ERR_SHAPE,
                     "q has %d dimensions; the padded layout is [B, H, Lq, D] (a packed [T, H, D] "
                     "batch needs cu_seqlens_q and cu_seqlens_k)",
                     q->ndim);
        s->B = q->shape[0];
        s->H = q->shape[1];
        s->Lq = q->shape[2];
        s->D = q->shape[3];
        STOF_REQUIRE(s->B == t->batch && s->H == t->heads && s->Lq == (int64_t)t->lq * t->split,
                     STOF_ERR_SHAPE,
                     "q is [B=%lld, H=%lld, Lq=%lld, D] but the mask was compiled for B=%d, H=%d, "
                     "Lq=%lld",
                     (long long)s->B, (long long)s->H, (long long)s->Lq, t->batch, t->heads,
                     (long long)t->lq * t->split);
        s->Lk = (int64_t)t->lk * t->split;
    } else {
        STOF_REQUIRE(q->ndim == 3, STOF_ERR_SHAPE,
                     "q has %d dimensions; with cu_seqlens the packed layout is [T, H, D]",
                     q->ndim);
        s->Tq = q->shape[0];
        s->H = q->shape[1];
        s->D = q->shape[2];
        s->B = t->batch;
        s->Lq = (int64_t)t->lq * t->split;
        s->Lk = (int64_t)t->lk * t->split;
        STOF_REQUIRE(s->H == t->heads, STOF_ERR_SHAPE,
                     "q has H=%lld heads but the mask was compiled for H=%d", (long long)s->H,
                     t->heads);
    }
    STOF_REQUIRE(q->stride[q->ndim - 1] == 1 || q->shape[q->ndim - 1] == 1, STOF_ERR_SHAPE,
                 "q has stride %lld on its last dimension (must be 1)",
                 (long long)q->stride[q->ndim - 1]);
    if (ctx->device == STOF_DEVICE_GPU)
        STOF_REQUIRE(attn_head_dim_supported((int)s->D), STOF_ERR_UNSUPPORTED,
                     "head dim %lld is not supported on the GPU (32, 64, 80, 96, 128 or 256)",
                     (long long)s->D);
    return STOF_OK;
}

/* kv heads from k (checked against v by check_operand): they must divide H. */
static stof_status check_kv_heads(const stof_tensor *k, attn_shape *s)
{
    STOF_TRY(stof_tensor_check(k, "k"));
    STOF_REQUIRE(k->ndim == (s->packed ? 3 : 4), STOF_ERR_SHAPE,
                 "tensor k has %d dimensions; q has %d", k->ndim, s->packed ? 3 : 4);
    s->Hkv = k->shape[1];
    STOF_REQUIRE(s->Hkv >= 1 && s->H % s->Hkv == 0, STOF_ERR_SHAPE,
                 "k has %lld kv heads, which do not divide q's %lld heads (grouped-query "
                 "attention needs H %% Hkv == 0)",
                 (long long)s->Hkv, (long long)s->H);
    return STOF_OK;
}

/* The bias tensor of params against the shape (stof.h's bias_kind). */
static stof_status check_bias(const stof_ctx *ctx, const stof_attn_params *p, const attn_shape *s)
{
    if (p->bias_kind == STOF_BIAS_NONE) return STOF_OK;
    const stof_tensor *t = p->bias;
    STOF_TRY(stof_tensor_check(t, "bias"));
    STOF_TRY(stof_tensor_check_memory(ctx, t, "bias"));
    if (p->bias_kind == STOF_BIAS_T5) {
        STOF_REQUIRE(t->dtype == STOF_F32 && t->ndim == 2 && t->shape[1] == s->H, STOF_ERR_SHAPE,
                     "T5 bias table is %s with %d dimensions [%lld, %lld]; want f32 "
                     "[num_buckets, H=%lld]",
                     stof_dtype_name(t->dtype), t->ndim, (long long)t->shape[0],
                     (long long)(t->ndim > 1 ? t->shape[1] : 0), (long long)s->H);
        const int64_t nb = t->shape[0];
        const int64_t n = p->t5_bidirectional ? nb / 2 : nb;
        const int maxd = p->t5_max_distance ? p->t5_max_distance : 128;
        STOF_REQUIRE(n >= 2 && (!p->t5_bidirectional || nb % 2 == 0), STOF_ERR_SHAPE,
                     "T5 bias table has %lld buckets; want at least %d%s", (long long)nb,
                     p->t5_bidirectional ? 4 : 2, p->t5_bidirectional ? ", an even number" : "");
        STOF_REQUIRE(maxd > n / 2, STOF_ERR_INVALID_ARG,
                     "T5 max_distance %d must exceed the %lld exact buckets", maxd,
                     (long long)(n / 2));
        if (ctx->device == STOF_DEVICE_GPU) {
            STOF_REQUIRE(n - n / 2 - 1 <= ATTN_T5_MAX_LEVELS && maxd <= ATTN_T5_MAX_DISTANCE,
                         STOF_ERR_UNSUPPORTED,
                         "T5 bias with %lld buckets%s and max_distance %d: the GPU serves at "
                         "most %d logarithmic buckets per direction and max_distance %d",
                         (long long)nb, p->t5_bidirectional ? " (bidirectional)" : "", maxd,
                         ATTN_T5_MAX_LEVELS, ATTN_T5_MAX_DISTANCE);
        }
    } else if (p->bias_kind == STOF_BIAS_ALIBI) {
        STOF_REQUIRE(t->dtype == STOF_F32 && t->ndim == 1 && t->shape[0] == s->H, STOF_ERR_SHAPE,
                     "ALiBi slopes are %s with %d dimensions [%lld]; want f32 [H=%lld]",
                     stof_dtype_name(t->dtype), t->ndim, (long long)t->shape[0], (long long)s->H);
    } else {
        STOF_REQUIRE(t->dtype == STOF_F32 || t->dtype == STOF_F16 || t->dtype == STOF_BF16,
                     STOF_ERR_SHAPE, "bias tensor is %s; want f32, f16 or bf16",
                     stof_dtype_name(t->dtype));
        STOF_REQUIRE(t->ndim == 4 && (t->shape[0] == 1 || t->shape[0] == s->B) &&
                         (t->shape[1] == 1 || t->shape[1] == s->H) && t->shape[2] == s->Lq &&
                         t->shape[3] == s->Lk,
                     STOF_ERR_SHAPE,
                     "bias tensor has %d dimensions [%lld, %lld, %lld, %lld]; want [B|1, H|1, "
                     "Lq, Lk] = [%lld|1, %lld|1, %lld, %lld]",
                     t->ndim, (long long)t->shape[0], (long long)(t->ndim > 1 ? t->shape[1] : 0),
                     (long long)(t->ndim > 2 ? t->shape[2] : 0),
                     (long long)(t->ndim > 3 ? t->shape[3] : 0), (long long)s->B, (long long)s->H,
                     (long long)s->Lq, (long long)s->Lk);
    }
    return STOF_OK;
}

void attn_t5_levels(const stof_attn_params *p, attn_mods *m)
{
    const int nb = (int)p->bias->shape[0];
    const int n = p->t5_bidirectional ? nb / 2 : nb;
    m->t5_bidirectional = p->t5_bidirectional != 0;
    m->t5_num_buckets = nb;
    m->t5_max_distance = p->t5_max_distance ? p->t5_max_distance : 128;
    m->t5_exact = n / 2;
    m->t5_levels = n - n / 2 - 1;
    /* A negative relative position adds no direction offset: its bucket is
     * the distance's bucket in one direction. Distances from max_distance on
     * all take the last bucket. */
    int level = 0;
    for (int r = m->t5_exact; r <= m->t5_max_distance && level < m->t5_levels; r++) {
        int bk = cpu_t5_bucket(-(int64_t)r, m->t5_bidirectional, nb, m->t5_max_distance);
        while (level < m->t5_levels && bk >= m->t5_exact + 1 + level)
            m->t5_thr[level++] = r;
    }
    while (level < m->t5_levels)
        m->t5_thr[level++] = m->t5_max_distance;
}

/* k, v or out against the shape q fixed. */
static stof_status check_operand(const stof_ctx *ctx, const stof_tensor *x, const char *name,
                                 const attn_shape *s, bool is_key)
{
    STOF_TRY(stof_tensor_check(x, name));
    STOF_TRY(stof_tensor_check_memory(ctx, x, name));
    STOF_REQUIRE(x->dtype == s->dtype, STOF_ERR_SHAPE, "tensor %s is %s but q is %s", name,
                 stof_dtype_name(x->dtype), stof_dtype_name(s->dtype));
    int nd = s->packed ? 3 : 4;
    STOF_REQUIRE(x->ndim == nd, STOF_ERR_SHAPE, "tensor %s has %d dimensions; q has %d", name,
                 x->ndim, nd);
    const int64_t H = is_key ? s->Hkv : s->H;
    if (s->packed) {
        STOF_REQUIRE(x->shape[1] == H && x->shape[2] == s->D, STOF_ERR_SHAPE,
                     "tensor %s is [%lld, %lld, %lld]; want [T, %s=%lld, D=%lld]", name,
                     (long long)x->shape[0], (long long)x->shape[1], (long long)x->shape[2],
                     is_key ? "Hkv" : "H", (long long)H, (long long)s->D);
    } else {
        int64_t L = is_key ? s->Lk : s->Lq;
        STOF_REQUIRE(x->shape[0] == s->B && x->shape[1] == H && x->shape[2] == L &&
                         x->shape[3] == s->D,
                     STOF_ERR_SHAPE,
                     "tensor %s is [%lld, %lld, %lld, %lld]; want [B=%lld, %s=%lld, %s=%lld, "
                     "D=%lld] (the mask was compiled for Lq=%lld, Lk=%lld)",
                     name, (long long)x->shape[0], (long long)x->shape[1], (long long)x->shape[2],
                     (long long)x->shape[3], (long long)s->B, is_key ? "Hkv" : "H", (long long)H,
                     is_key ? "Lk" : "Lq", (long long)L, (long long)s->D, (long long)s->Lq,
                     (long long)s->Lk);
    }
    STOF_REQUIRE(x->stride[nd - 1] == 1 || x->shape[nd - 1] == 1, STOF_ERR_SHAPE,
                 "tensor %s has stride %lld on its last dimension (must be 1)", name,
                 (long long)x->stride[nd - 1]);
    return STOF_OK;
}

static stof_status check_cu_seqlens(const stof_ctx *ctx, const stof_tensor *cu, const char *name,
                                    const attn_shape *s)
{
    STOF_TRY(stof_tensor_check(cu, name));
    STOF_TRY(stof_tensor_check_memory(ctx, cu, name));
    STOF_REQUIRE(cu->dtype == STOF_I32, STOF_ERR_SHAPE, "%s is %s; it must be i32", name,
                 stof_dtype_name(cu->dtype));
    STOF_REQUIRE(cu->ndim == 1 && cu->shape[0] == s->B + 1, STOF_ERR_SHAPE,
                 "%s has %d dimensions and %lld entries; want [B + 1] = [%lld] for the mask's "
                 "B=%lld",
                 name, cu->ndim, (long long)cu->shape[0], (long long)(s->B + 1), (long long)s->B);
    STOF_REQUIRE(cu->stride[0] == 1, STOF_ERR_SHAPE, "%s has stride %lld (must be 1)", name,
                 (long long)cu->stride[0]);
    return STOF_OK;
}

/* The GPU kernels move 16 bytes at a time: base and B/H/L strides aligned. */
static stof_status check_aligned16(const stof_tensor *x, const char *name)
{
    STOF_REQUIRE(((uintptr_t)x->data & 15u) == 0, STOF_ERR_INVALID_ARG,
                 "tensor %s at %p is not 16-byte aligned (the GPU kernels load 16 bytes at a "
                 "time)",
                 name, x->data);
    for (int d = 0; d < x->ndim - 1; d++)
        STOF_REQUIRE(x->stride[d] % 8 == 0 || x->shape[d] == 1, STOF_ERR_INVALID_ARG,
                     "tensor %s has stride[%d] = %lld elements, not a multiple of 8 (16 bytes)",
                     name, d, (long long)x->stride[d]);
    return STOF_OK;
}

static stof_status check_all(stof_ctx *ctx, const stof_attn_params *p, const stof_tensor *q,
                             const stof_tensor *k, const stof_tensor *v, stof_mask *mask,
                             const stof_tensor *cu_q, const stof_tensor *cu_k,
                             const stof_tensor *out, attn_shape *s)
{
    STOF_REQUIRE(ctx, STOF_ERR_INVALID_ARG, "stof_attention: ctx is NULL");
    STOF_TRY(check_params(p));
    STOF_TRY(check_mask_ctx(ctx, mask));
    const mask_tiles *t = stof_mask_tiles_view(mask);
    STOF_REQUIRE((cu_q == NULL) == (cu_k == NULL), STOF_ERR_INVALID_ARG,
                 "cu_seqlens_%s is given but cu_seqlens_%s is NULL: the packed layout needs both",
                 cu_q ? "q" : "k", cu_q ? "k" : "q");
    bool packed = cu_q != NULL;
    STOF_TRY(check_q_layout(ctx, q, t, packed, s));
    STOF_TRY(check_kv_heads(k, s));
    STOF_TRY(check_operand(ctx, k, "k", s, true));
    STOF_TRY(check_operand(ctx, v, "v", s, true));
    STOF_TRY(check_operand(ctx, out, "out", s, false));
    if (packed) {
        STOF_REQUIRE(k->shape[0] == v->shape[0], STOF_ERR_SHAPE, "k has %lld tokens but v has %lld",
                     (long long)k->shape[0], (long long)v->shape[0]);
        STOF_REQUIRE(out->shape[0] == q->shape[0], STOF_ERR_SHAPE,
                     "out has %lld tokens but q has %lld", (long long)out->shape[0],
                     (long long)q->shape[0]);
        s->Tk = k->shape[0];
        STOF_TRY(check_cu_seqlens(ctx, cu_q, "cu_seqlens_q", s));
        STOF_TRY(check_cu_seqlens(ctx, cu_k, "cu_seqlens_k", s));
    }
    if (ctx->device == STOF_DEVICE_GPU) {
        STOF_TRY(check_aligned16(q, "q"));
        STOF_TRY(check_aligned16(k, "k"));
        STOF_TRY(check_aligned16(v, "v"));
        STOF_TRY(check_aligned16(out, "out"));
        STOF_REQUIRE(s->B <= 65535 && s->H <= 65535, STOF_ERR_UNSUPPORTED,
                     "B=%lld and H=%lld: the GPU kernels take at most 65535 of each",
                     (long long)s->B, (long long)s->H);
        const int split = stof_mask_tiles_view(mask)->split;
        STOF_REQUIRE(s->H * split <= 65535, STOF_ERR_UNSUPPORTED,
                     "H=%lld heads of %d residue classes each (a dilated mask runs each class "
                     "as a sequence): the GPU kernels take at most 65535 in all",
                     (long long)s->H, split);
    }
    STOF_TRY(check_bias(ctx, p, s));
    s->mods = p->bias_kind != STOF_BIAS_NONE || p->softcap > 0.0f;
    s->params = p;
    s->scale = p->scale != 0.0f ? p->scale : (float)(1.0 / sqrt((double)s->D));
    return STOF_OK;
}

/* The sm_90 kernel runs a split mask of at most ATTN_SM90_MAX_SPLIT classes. */
static stof_status sm90_takes_split(int split)
{
    STOF_REQUIRE(split <= ATTN_SM90_MAX_SPLIT, STOF_ERR_UNSUPPORTED,
                 "the sm_90 block-wise kernel runs a dilated mask of dilation %d or less (this "
                 "one's is %d; the other kernels run it)",
                 ATTN_SM90_MAX_SPLIT, split);
    return STOF_OK;
}

static attn_problem problem_of(const attn_shape *s, const stof_attn_params *params, stof_mask *mask)
{
    const mask_tiles *t = stof_mask_tiles_view(mask);
    const mask_estimate *e = stof_mask_estimate_view(mask);
    attn_problem p;
    /* A split mask (mask.h): each residue class is a sequence of Lq / d. */
    p.batch = (int)s->B;
    p.heads = (int)s->H * t->split;
    p.lq = t->lq;
    p.lk = t->lk;
    p.head_dim = (int)s->D;
    p.tile_m = t->tile_m;
    p.tile_n = t->tile_n;
    /* Without an estimate assume every tile is listed (dense): the safe side. */
    p.tiles_per_row = e ? e->tiles_per_row : (double)t->n_tcol;
    p.row_imbalance = e ? e->row_imbalance : 1.0;
    p.even_full = t->all_visible && t->bm == 1 && t->split == 1;
    p.analytic = attn_ws_analytic(t->all_visible, t->causal, t->band, t->split, params->bias_kind);
    p.mods = s->mods ? attn_mods_class(params->bias_kind, params->softcap) : ATTN_MODS_NONE;
    return p;
}

static attn_device device_of(const stof_ctx *ctx)
{
    attn_device d;
    d.sm_count = ctx->sm_count;
    d.smem_per_sm = (int64_t)ctx->smem_per_sm;
    d.smem_per_block = (int64_t)ctx->smem_per_block_optin;
    d.max_threads_per_sm = ctx->max_threads_per_sm;
    d.regs_per_sm = ctx->regs_per_sm;
    d.cc = 10 * ctx->cc_major + ctx->cc_minor;
    d.sm90_kernels = ATTN_SM90_BUILT;
    return d;
}

static stof_status choose(stof_ctx *ctx, const stof_attn_params *p, const attn_shape *s,
                          stof_mask *mask, stof_attn_choice *out)
{
    const mask_tiles *t = stof_mask_tiles_view(mask);
    if (ctx->device != STOF_DEVICE_GPU) {
        out->kernel = STOF_ATTN_CPU;
        out->block_m = t->tile_m;
        out->block_n = t->tile_n;
        out->warps = 0;
        out->score = 0.0;
        out->split = t->split;
        return STOF_OK;
    }
#if STOF_HAVE_CUDA
    if (p->kernel == STOF_ATTN_ROWWISE)
        STOF_REQUIRE(attn_rowwise_available((int)s->D, t->tile_n), STOF_ERR_UNSUPPORTED,
                     "the row-wise kernel takes tile_n <= 128 at head dims 32, 64, 128; the mask "
                     "has tiles %dx%d and the head dim is %lld",
                     t->tile_m, t->tile_n, (long long)s->D);
#endif
    attn_problem prob = problem_of(s, p, mask);
    attn_device dev = device_of(ctx);
    if (t->split > ATTN_SM90_MAX_SPLIT) {
        if (p->kernel == STOF_ATTN_BLOCKWISE_SM90) return sm90_takes_split(t->split);
        dev.sm90_kernels = 0;
    }
    STOF_TRY(attn_select(&prob, &dev, p->kernel, out));
    out->split = t->split;
    return STOF_OK;
}

#if STOF_HAVE_CUDA
/* The score modifiers (attn_mods) of a validated call. */
static void fill_mods(const attn_shape *s, attn_launch *a)
{
    const stof_attn_params *p = s->params;
    attn_mods *m = &a->mods;
    m->bias_kind = p->bias_kind;
    m->softcap = p->softcap;
    if (p->bias_kind == STOF_BIAS_NONE) return;
    const stof_tensor *t = p->bias;
    m->bias = t->data;
    m->bias_dtype = t->dtype;
    for (int d = 0; d < t->ndim; d++)
        m->bias_st[d] = t->shape[d] == 1 ? 0 : t->stride[d];
    if (p->bias_kind == STOF_BIAS_T5) attn_t5_levels(p, m);
    if (p->bias_kind == STOF_BIAS_TENSOR) {
        m->bias_lq = (int)t->shape[2];
        m->bias_lk = (int)t->shape[3];
    }
}

/* The launch description (attn.h). A split mask runs as d classes per head:
 * rows d apart (the row stride times d), the class's first row one token on. */
static void fill_launch(const attn_shape *s, const stof_tensor *q, const stof_tensor *k,
                        const stof_tensor *v, const stof_tensor *out, stof_mask *mask,
                        const stof_tensor *cu_q, const stof_tensor *cu_k, attn_launch *a)
{
    memset(a, 0, sizeof *a);
    const int d = stof_mask_tiles_view(mask)->split;
    a->q = q->data;
    a->k = k->data;
    a->v = v->data;
    a->out = out->data;
    const stof_tensor *x[4] = {q, k, v, out};
    int64_t *sb[4] = {&a->q_sb, &a->k_sb, &a->v_sb, &a->o_sb};
    int64_t *sh[4] = {&a->q_sh, &a->k_sh, &a->v_sh, &a->o_sh};
    int64_t *sl[4] = {&a->q_sl, &a->k_sl, &a->v_sl, &a->o_sl};
    int64_t *sp[4] = {&a->q_sp, &a->k_sp, &a->v_sp, &a->o_sp};
    for (int i = 0; i < 4; i++) {
        if (s->packed) {
            *sb[i] = 0;
            *sp[i] = x[i]->stride[0];
            *sh[i] = x[i]->stride[1];
        } else {
            *sb[i] = x[i]->stride[0];
            *sh[i] = x[i]->stride[1];
            *sp[i] = x[i]->stride[2];
        }
        *sl[i] = *sp[i] * d;
    }
    a->cu_q = s->packed ? (const int32_t *)cu_q->data : NULL;
    a->cu_k = s->packed ? (const int32_t *)cu_k->data : NULL;
    a->tq = s->Tq;
    a->tk = s->Tk;
    a->tiles = *stof_mask_tiles_view(mask);
    a->batch = (int)s->B;
    a->heads = (int)s->H * d;
    a->split = d;
    a->lq = (int)(s->Lq / d);
    a->lk = (int)(s->Lk / d);
    a->head_dim = (int)s->D;
    a->bf16 = s->dtype == STOF_BF16;
    a->scale_log2 = (float)((double)s->scale * 1.4426950408889634);
    a->scale = s->scale;
    a->kv_group = (int)(s->H / s->Hkv);
    fill_mods(s, a);
}

/* (head, batch entry) pairs per section of the heavy-first order (grid.cuh).
 * Sections only where the K/V of all pairs exceed `over` times the L2: 1.2
 * where the mask lists at least 0.4 of its tiles (causal), 1.5 where it is
 * sparser (a window with global tokens, whose band rows read a fraction of
 * the keys: longformer (4, 16, 4096, 64), 64 MB of K/V, ran 0.108 ms in one
 * section and 0.140 in sections on an H100, file below). Causal
 * (4, 16, 4096, 64) (64 MB of K/V) ran 0.358 ms in one section and 0.371 in
 * sections of half the L2 on an H200 (60 MB of L2: 1.07 times), while on an
 * H100 (50 MB: 1.28 times) sections took it from 0.355 to 0.339 ms, and GQA
 * causal (8, 32, 2048, 128) (64 MB) from 0.510-0.512 to 0.505-0.506
 * (bench/results/attention-l2-sections-2026-11-27-h100.txt); at head dim
 * 128 (128 MB and up) sections took causal (1, 32, 8192) from 1.655 to
 * 1.130 ms and (4, 16, 4096) from 0.918 to 0.614 on the H200. Then as few
 * sections as have their K/V in `share` of the L2 each (the L2 also holds
 * Q, the outputs and the mask, and on Hopper is two partitions that may both
 * hold a line), balanced, in whole kv-head groups: half for the CTAs the
 * hardware starts in order, three quarters for the warp-specialised
 * kernel's drawn items (at the call). */
static int l2_section(const stof_ctx *ctx, const attn_launch *a, double tile_density,
                      double share)
{
    const double over = tile_density >= 0.4 ? 1.2 : 1.5;
    const int pairs = a->heads * a->batch;
    const double per_pair = (double)a->lk * a->head_dim * 2 /* bytes */ * 2 /* K, V */ /
                            a->kv_group;
    const double l2 = (double)ctx->l2_bytes;
    if (pairs <= 1 || l2 <= 0.0 || per_pair * pairs <= over * l2) return pairs > 0 ? pairs : 1;
    const int fit = per_pair > l2 * share ? 1 : (int)(l2 * share / per_pair);
    const int sections = (pairs + fit - 1) / fit;
    int s = (pairs + sections - 1) / sections;
    const int group = a->kv_group * a->split; /* kernel heads on one kv head */
    if (s > group) s = (s + group - 1) / group * group;
    return s < pairs ? s : pairs;
}
#endif

stof_status attn_attention_with(stof_ctx *ctx, const stof_attn_params *params,
                                const stof_attn_choice *choice, const stof_tensor *q,
                                const stof_tensor *k, const stof_tensor *v, stof_mask *mask,
                                const stof_tensor *cu_seqlens_q, const stof_tensor *cu_seqlens_k,
                                stof_tensor *out)
{
    stof_attn_params p = params ? *params : stof_attn_default_params();
    attn_shape s;
    STOF_TRY(check_all(ctx, &p, q, k, v, mask, cu_seqlens_q, cu_seqlens_k, out, &s));
    if (ctx->device != STOF_DEVICE_GPU)
        return attn_cpu_run(&s, q, k, v, mask, cu_seqlens_q, cu_seqlens_k, out);
#if STOF_HAVE_CUDA
    stof_attn_choice ch;
    if (choice) {
        const mask_tiles *t = stof_mask_tiles_view(mask);
        ch = *choice;
        STOF_REQUIRE(ch.kernel == STOF_ATTN_BLOCKWISE || ch.kernel == STOF_ATTN_ROWWISE ||
                         ch.kernel == STOF_ATTN_BLOCKWISE_SM90 ||
                         ch.kernel == STOF_ATTN_BLOCKWISE_SM90_WS,
                     STOF_ERR_INVALID_ARG,
                     "attention choice: kernel %d is not BLOCKWISE, BLOCKWISE_SM90, "
                     "BLOCKWISE_SM90_WS or ROWWISE",
                     (int)ch.kernel);
        if (ch.kernel == STOF_ATTN_BLOCKWISE_SM90_WS) {
            /* The selector's checks (device, build, head dim, mask, modifiers). */
            attn_problem prob = problem_of(&s, &p, mask);
            attn_device dev = device_of(ctx);
            STOF_TRY(attn_select(&prob, &dev, STOF_ATTN_BLOCKWISE_SM90_WS, &ch));
        } else if (ch.kernel == STOF_ATTN_BLOCKWISE_SM90) {
            attn_device dev = device_of(ctx);
            if (ch.block_m == 0) ch.block_m = 16 * ch.warps; /* 64 rows per warpgroup */
            STOF_REQUIRE(dev.cc == 90 && dev.sm90_kernels, STOF_ERR_UNSUPPORTED,
                         "the sm_90 block-wise kernel needs a compute capability 9.0 device and "
                         "a build with 90 in STOF_CUDA_ARCHS (device: %d.%d, sm_90a kernels %s)",
                         ctx->cc_major, ctx->cc_minor, dev.sm90_kernels ? "built" : "not built");
            STOF_TRY(sm90_takes_split(t->split));
            STOF_REQUIRE(attn_sm90_config_fits((int)s.D, t->tile_m, t->tile_n, ch.warps,
                                               ch.block_m) &&
                             attn_sm90_smem_bytes((int)s.D, ch.block_m) <= dev.smem_per_block,
                         STOF_ERR_UNSUPPORTED,
                         "no sm_90 block-wise configuration with %d warps and %d-row blocks for "
                         "head dim %lld and mask tiles %dx%d (it serves head dims 64 and 128: 4 "
                         "warps of 64-row blocks on 64x64 or 128x64 tiles, 8 warps of 128-row "
                         "blocks on 128x64 tiles)",
                         ch.warps, ch.block_m, (long long)s.D, t->tile_m, t->tile_n);
        } else if (ch.kernel == STOF_ATTN_BLOCKWISE) {
            if (ch.block_m == 0) ch.block_m = 16 * ch.warps; /* one m-block per warp */
            STOF_REQUIRE(!s.mods || (ch.warps == 4 && ch.block_m == 64), STOF_ERR_UNSUPPORTED,
                         "a bias or soft cap runs on the block-wise kernel with 4 warps of "
                         "64-row blocks (asked: %d warps, %d-row blocks)",
                         ch.warps, ch.block_m);
            STOF_REQUIRE(attn_blockwise_available((int)s.D, t->tile_m, t->tile_n, ch.warps,
                                                  ch.block_m),
                         STOF_ERR_UNSUPPORTED,
                         "no block-wise configuration with %d warps and %d-row blocks for head "
                         "dim %lld and mask tiles %dx%d (tile shapes served: %s)",
                         ch.warps, ch.block_m, (long long)s.D, t->tile_m, t->tile_n,
                         attn_blockwise_shapes());
        } else
            STOF_REQUIRE(attn_rowwise_available((int)s.D, t->tile_n), STOF_ERR_UNSUPPORTED,
                         "no row-wise kernel for head dim %lld and tile_n %d", (long long)s.D,
                         t->tile_n);
    } else {
        STOF_TRY(choose(ctx, &p, &s, mask, &ch));
    }
    attn_launch a;
    fill_launch(&s, q, k, v, out, mask, cu_seqlens_q, cu_seqlens_k, &a);
    a.pdl = ctx->cc_major >= 9;
    const mask_estimate *est = stof_mask_estimate_view(mask);
    a.heavy_first = est->row_imbalance > ATTN_HEAVY_FIRST_IMBALANCE;
    /* The warp-specialised kernel's items are drawn heaviest first
     * (grid.cuh): on an H200 (60 MB of L2), cuDNN's time over the kernel's at
     * causal (1, 32, 8192) read 1.10-1.12 in sections of three quarters of
     * the L2, 1.055 of half and 1.03 of a quarter; at (4, 16, 4096)
     * 1.07-1.08, 1.065 and 0.99
     * (bench/results/attention-ws-draw-2026-11-26-h200.txt). */
    a.section = l2_section(ctx, &a, est->tile_density,
                           ch.kernel == STOF_ATTN_BLOCKWISE_SM90_WS ? 0.75 : 0.5);
    a.sms = ctx->sm_count;
    if (ch.kernel == STOF_ATTN_BLOCKWISE)
        return attn_blockwise_run(&a, ch.warps, ch.block_m, ctx->stream);
    if (ch.kernel == STOF_ATTN_BLOCKWISE_SM90_WS) {
#ifdef STOF_HAVE_ATTN_SM90
        a.work = stof_ctx_work_counter(ctx);
        return attn_ws_sm90_run(&a, ctx->stream);
#else
        return stof_error(STOF_ERR_UNSUPPORTED,
                          "the warp-specialised sm_90 kernel is not built into this library");
#endif
    }
    if (ch.kernel == STOF_ATTN_BLOCKWISE_SM90) {
#ifdef STOF_HAVE_ATTN_SM90
        return attn_blockwise_sm90_run(&a, ch.warps, ch.block_m, ctx->stream);
#else
        return stof_error(STOF_ERR_UNSUPPORTED,
                          "the sm_90 block-wise kernel is not built into this library");
#endif
    }
    return attn_rowwise_run(&a, ctx->stream);
#else
    (void)choice;
    return stof_error(STOF_ERR_INTERNAL, "a GPU context in a build without CUDA");
#endif
}

stof_status stof_attention(stof_ctx *ctx, const stof_attn_params *params, const stof_tensor *q,
                           const stof_tensor *k, const stof_tensor *v, stof_mask *mask,
                           const stof_tensor *cu_seqlens_q, const stof_tensor *cu_seqlens_k,
                           stof_tensor *out)
{
    return attn_attention_with(ctx, params, NULL, q, k, v, mask, cu_seqlens_q, cu_seqlens_k, out);
}

stof_status stof_attention_select(stof_ctx *ctx, const stof_attn_params *params,
                                  const stof_tensor *q, stof_mask *mask, stof_attn_choice *out)
{
    STOF_REQUIRE(ctx, STOF_ERR_INVALID_ARG, "stof_attention_select: ctx is NULL");
    STOF_REQUIRE(out, STOF_ERR_INVALID_ARG, "stof_attention_select: out is NULL");
    stof_attn_params p = params ? *params : stof_attn_default_params();
    STOF_TRY(check_params(&p));
    STOF_TRY(check_mask_ctx(ctx, mask));
    STOF_REQUIRE(q, STOF_ERR_INVALID_ARG, "tensor q is NULL");
    attn_shape s;
    STOF_TRY(check_q_layout(ctx, q, stof_mask_tiles_view(mask), q->ndim == 3, &s));
    s.mods = p.bias_kind != STOF_BIAS_NONE || p.softcap > 0.0f;
    return choose(ctx, &p, &s, mask, out);
}

int attn_sm90_available(const stof_ctx *ctx, int head_dim, int tile_m, int tile_n, int warps,
                        int block_m)
{
    if (!ctx || ctx->device != STOF_DEVICE_GPU) return 0;
    attn_device d = device_of(ctx);
    return attn_sm90_usable(&d, head_dim, tile_m, tile_n) &&
           attn_sm90_config_fits(head_dim, tile_m, tile_n, warps, block_m);
}
