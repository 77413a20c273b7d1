/*
 * tune_gpu.c — stof_model_tune: the two-stage search (src/tune/search.c)
 * over the execution plans of the GPU engine, for every family it runs, and
 * its tuning cache entry (keyed by the family and the description's hash,
 * model_tune_key).
 *
 * What the search gets from here:
 *  - scheme variants: each GEMM segment toggled between cuBLASLt (+ row
 *    kernels) and its stof template. Post-norm BERT: QKV and FFN1 take GEMM +
 *    bias + activation, out-proj and FFN2 GEMM + bias + residual + LayerNorm,
 *    and the FFN pair may merge into the chain template (intermediate kept on
 *    chip) or split back. Pre-norm layers (GPT-2, LLaMA and its kin,
 *    ModernBERT): all four segments are linears (+ bias, + act; FFN1 of a GLU
 *    writes act(a) * b in the templates' epilogue, both halves for fuse_glu
 *    on cuBLASLt; the out-projection and FFN2 add the residual in theirs)
 *    whose norm runs as a row pass, so each takes GEMM + bias + activation or
 *    the Hopper GEMM; on a Hopper a GLU's FFN1 at cuBLASLt's first algorithm
 *    runs the Hopper GEMM (plan_glu in plan_gpu.c), and so does a RoPE
 *    layer's QKV from FUSE_SM90_ROPE_ROWS rows (plan_rope), whose Hopper
 *    GEMM turns q and k in its epilogue wherever its tile holds whole heads
 *    (fuse_rope runs after the other candidates): the search times both
 *    ways. A new template
 *    comes with two sampled configs: the rule-based default and one other
 *    that fits;
 *  - parameter settings per dimension: the cuBLASLt heuristic's algorithms
 *    (best first) or the template's instantiated configs that fit the shape
 *    (the default first), and for attention the selector's choice followed by
 *    every kernel configuration that serves the mask's tile shape;
 *  - measurements: whole forwards on the caller's ids and lengths, through the
 *    same path as stof_model_forward (a CUDA graph per plan once captured),
 *    timed with CUDA events, median of several; the last hidden state of each
 *    candidate is compared with the default plan's on the real tokens.
 */
#include "model/engine_gpu.h"

#include "attn/attn.h"
#include "attn/select.h"
#include "fuse/fuse.h"
#include "tune/search.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#if STOF_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

#define TUNE_TARGET_MS 40.0 /* timed forwards per candidate: about this long */
#define TUNE_MAX_REPS 15
#define TUNE_MIN_REPS 3

#if STOF_HAVE_CUDA
typedef struct tuner {
    stof_model *m;
    const stof_tune_params *params;
    const stof_tensor *ids, *lengths, *types;
    stof_forward_params fp;
    int B, L, H;
    int64_t T, rows;
    int tile_m, tile_n;
    int32_t *lens; /* host [B] real lengths */
    void *d_hid;   /* device [B, L, H] run dtype */
    stof_tensor hid;
    uint16_t *half;
    float *ref, *out; /* real tokens' values, f32 */
    int64_t n_valid;
    bool have_ref;
    int reps;
    double tol;
    int lt_algos[TUNE_NSEG]; /* -1: not asked yet */
    cudaEvent_t ev0, ev1;
} tuner;

#endif

#if STOF_HAVE_CUDA

/* ---------------------------------------------------------------- candidates */

/* The template a segment expands into: BERT's QKV and FFN1 take GEMM + bias
 * + activation and its out-projection and FFN2 GEMM + residual + LayerNorm;
 * every GEMM of a pre-norm layer is a linear (+ bias, + act) whose norm runs
 * beside it. */
static fuse_tpl seg_tpl(const tuner *t, int seg, bool chain)
{
    if (chain && seg == TUNE_SEG_FFN1) return FUSE_TPL_FFN_CHAIN;
    if (!t->m->gpu->bert) return FUSE_TPL_GEMM_BIAS_ACT;
    return seg == TUNE_SEG_QKV || seg == TUNE_SEG_FFN1 ? FUSE_TPL_GEMM_BIAS_ACT
                                                       : FUSE_TPL_GEMM_RES_LN;
}

/* GEMM shape of a segment (layer 0's, as the layers of every family share
 * their widths): rows x n out, k in (the chain: n hidden, k intermediate). */
static void seg_shape(const tuner *t, int seg, bool chain, int *n, int *k)
{
    if (chain && seg == TUNE_SEG_FFN1) {
        *n = t->m->info.hidden, *k = t->m->info.intermediate;
        return;
    }
    fuse_linear_args a = eng_segment_args(t->m, 0, seg, t->rows);
    *n = a.n, *k = a.k;
}

static tune_seg seg_from_config(const fuse_config *c)
{
    tune_seg s;
    memset(&s, 0, sizeof s);
    s.path = 1;
    s.tpl = (int)c->tpl;
    s.block_m = c->block_m;
    s.block_n = c->block_n;
    s.block_k = c->block_k;
    s.warps_m = c->warps_m;
    s.warps_n = c->warps_n;
    s.stages = c->stages;
    return s;
}

static tune_seg seg_lt(int algo)
{
    tune_seg s;
    memset(&s, 0, sizeof s);
    s.algo = algo;
    return s;
}

/* The configs of template tpl that fit the segment, the rule-based default first. */
static int fitting_tpl_configs(const tuner *t, int seg, bool chain, fuse_tpl tpl, fuse_config *out,
                               int cap)
{
    if (tpl == FUSE_TPL_FFN_CHAIN && !fuse_chain_hidden_ok(t->m->info.hidden)) return 0;
    int n, k;
    seg_shape(t, seg, chain, &n, &k);
    const stof_ctx *ctx = t->m->ctx;
    size_t smem = ctx->smem_per_block_optin;
    int count = 0;
    fuse_config def = fuse_config_default(tpl, t->rows, n, k, ctx->sm_count, smem);
    if (def.tpl != FUSE_TPL_NONE && count < cap) out[count++] = def;
    int listed = 0;
    const fuse_config *list = fuse_config_list(tpl, &listed);
    for (int i = 0; i < listed && count < cap; i++) {
        if (def.tpl != FUSE_TPL_NONE && fuse_config_equal(&list[i], &def)) continue;
        if (fuse_config_check_shape(&list[i], t->rows, n, k, smem) != STOF_OK) {
            stof_clear_error();
            continue;
        }
        out[count++] = list[i];
    }
    return count;
}

/* The segment's template configs that fit; for QKV and FFN1 on a device that
 * runs it, the Hopper GEMM's after the mma.sync template's. *alt: the index of
 * the Hopper GEMM's default among them, or -1. */
static int fitting_configs(const tuner *t, int seg, bool chain, fuse_config *out, int cap,
                           int *alt)
{
    fuse_tpl tpl = seg_tpl(t, seg, chain);
    int count = fitting_tpl_configs(t, seg, chain, tpl, out, cap);
    *alt = -1;
    if (tpl == FUSE_TPL_GEMM_BIAS_ACT && fuse_sm90_available(t->m->ctx)) {
        int more =
            fitting_tpl_configs(t, seg, chain, FUSE_TPL_GEMM_SM90, out + count, cap - count);
        if (more > 0) *alt = count;
        count += more;
    }
    return count;
}

static int lt_algos(tuner *t, int seg)
{
    if (t->lt_algos[seg] < 0) {
        int n = 0;
        if (enc_gpu_lt_algos(t->m, seg, t->rows, &n) != STOF_OK) {
            stof_log(STOF_LOG_DEBUG, "tune: %s", stof_last_error());
            stof_clear_error();
            n = 1;
        }
        t->lt_algos[seg] = n > 0 ? n : 1;
    }
    return t->lt_algos[seg];
}

#define TUNE_MAX_CONFIGS 64

/* Stage 1: fusion changes of base, each with two sampled configs. */
static int scheme_variants(void *user, const tune_plan *base, tune_plan *out, int cap)
{
    tuner *t = user;
    int n = 0;
    fuse_config cfg[TUNE_MAX_CONFIGS];
    for (int seg = 0; seg < TUNE_NSEG; seg++) {
        if (base->ffn_chain && (seg == TUNE_SEG_FFN1 || seg == TUNE_SEG_FFN2)) continue;
        if (base->seg[seg].path == 1) { /* shrink back to cuBLASLt */
            if (n < cap) {
                out[n] = *base;
                out[n++].seg[seg] = seg_lt(0);
            }
            continue;
        }
        int alt;
        int c = fitting_configs(t, seg, false, cfg, TUNE_MAX_CONFIGS, &alt);
        /* expand into the template: its default, and the Hopper GEMM's default
         * where there is one, else another sampled config */
        for (int i = 0; i < c && i < 2 && n < cap; i++) {
            int pick = i == 0   ? 0
                       : alt > 0 ? alt
                                 : 1 + (int)(((unsigned)seg * 7919u + 13u) % (unsigned)(c - 1));
            out[n] = *base;
            out[n++].seg[seg] = seg_from_config(&cfg[pick]);
        }
    }
    if (!t->m->gpu->bert) return n; /* pre-norm layers have no FFN chain */
    if (base->ffn_chain) { /* split the chain */
        if (n < cap) {
            out[n] = *base;
            out[n].ffn_chain = 0;
            out[n].seg[TUNE_SEG_FFN1] = seg_lt(0);
            out[n++].seg[TUNE_SEG_FFN2] = seg_lt(0);
        }
    } else {
        int alt;
        int c = fitting_configs(t, TUNE_SEG_FFN1, true, cfg, TUNE_MAX_CONFIGS, &alt);
        for (int i = 0; i < c && i < 2 && n < cap; i++) {
            int pick = i == 0 ? 0 : 1 + (int)(31u % (unsigned)(c - 1));
            out[n] = *base;
            out[n].ffn_chain = 1;
            out[n].seg[TUNE_SEG_FFN1] = seg_from_config(&cfg[pick]);
            out[n++].seg[TUNE_SEG_FFN2] = seg_lt(0);
        }
    }
    return n;
}

/* Sets the attention of layer mask kind `kind` (tune_plan's attn_* or attn2_*). */
static void set_attn(tune_plan *p, int kind, int kernel, int warps, int block_m)
{
    if (kind == 0)
        p->attn_kernel = kernel, p->attn_warps = warps, p->attn_block_m = block_m;
    else
        p->attn2_kernel = kernel, p->attn2_warps = warps, p->attn2_block_m = block_m;
}

/* Attention configurations of one mask kind's layers that serve the mask,
 * the selector first; the other kind's stays as in base. */
static int attn_kind_variants(const tuner *t, const tune_plan *base, int kind, tune_plan *out,
                              int cap)
{
    int n = 0;
    int D = t->m->info.head_dim;
    if (n < cap) {
        out[n] = *base;
        set_attn(&out[n++], kind, STOF_ATTN_AUTO, 0, 0);
    }
    for (int i = 0; i < ATTN_BW_NCONFIGS && n < cap; i++) {
        const attn_bw_config *c = &attn_bw_configs[i];
        if (!attn_blockwise_available(D, t->tile_m, t->tile_n, c->warps, c->block_m)) continue;
        out[n] = *base;
        set_attn(&out[n++], kind, STOF_ATTN_BLOCKWISE, c->warps, c->block_m);
    }
    static const int sm90[2][2] = {{4, 64}, {8, 128}};
    for (int i = 0; i < 2 && n < cap; i++) {
        if (!attn_sm90_available(t->m->ctx, D, t->tile_m, t->tile_n, sm90[i][0], sm90[i][1]))
            continue;
        out[n] = *base;
        set_attn(&out[n++], kind, STOF_ATTN_BLOCKWISE_SM90, sm90[i][0], sm90[i][1]);
    }
    /* Row-wise walks every visible key per row: a candidate for short rows only. */
    if (t->L <= 512 && attn_rowwise_available(D, t->tile_n) && n < cap) {
        out[n] = *base;
        set_attn(&out[n++], kind, STOF_ATTN_ROWWISE, ATTN_ROWWISE_WARPS, 0);
    }
    return n;
}

/* The attention dimension: each mask kind's configurations in turn (a
 * ModernBERT's global layers, then its local ones). */
static int attn_variants(const tuner *t, const tune_plan *base, tune_plan *out, int cap)
{
    int n = 0;
    for (int kind = 0; kind < t->m->gpu->n_kinds && kind < 2; kind++)
        n += attn_kind_variants(t, base, kind, out + n, cap - n);
    return n;
}

/* Stage 2: every setting of one dimension for base's scheme. */
static int param_variants(void *user, const tune_plan *base, int dim, tune_plan *out, int cap)
{
    tuner *t = user;
    if (dim == TUNE_DIM_ATTN) return attn_variants(t, base, out, cap);
    bool chain = base->ffn_chain != 0;
    if (chain && dim == TUNE_SEG_FFN2) return 0;
    int n = 0;
    if (base->seg[dim].path == 0) {
        int algos = lt_algos(t, dim);
        for (int a = 0; a < algos && n < cap; a++) {
            out[n] = *base;
            out[n++].seg[dim] = seg_lt(a);
        }
        return n;
    }
    fuse_config cfg[TUNE_MAX_CONFIGS];
    int alt;
    int c = fitting_configs(t, dim, chain, cfg, TUNE_MAX_CONFIGS, &alt);
    for (int i = 0; i < c && n < cap; i++) {
        out[n] = *base;
        out[n++].seg[dim] = seg_from_config(&cfg[i]);
    }
    return n;
}

/* ---------------------------------------------------------------- measurement */

static stof_status forward(tuner *t, const tune_plan *plan)
{
    return enc_forward_plan(t->m, &t->fp, t->ids, t->lengths, t->types, &t->hid, NULL, plan);
}

/* The real tokens of the last hidden state, as f32. */
static stof_status read_hidden(tuner *t, float *dst)
{
    STOF_TRY(stof_ctx_synchronize(t->m->ctx));
    size_t n = (size_t)t->B * t->L * t->H;
    STOF_CUDA_TRY(cudaMemcpy(t->half, t->d_hid, n * 2, cudaMemcpyDeviceToHost));
    int64_t k = 0;
    for (int b = 0; b < t->B; b++)
        for (int i = 0; i < t->lens[b]; i++)
            for (int c = 0; c < t->H; c++) {
                uint16_t h = t->half[((size_t)b * t->L + i) * t->H + c];
                dst[k++] = t->m->info.dtype == STOF_BF16 ? stof_bf16_to_f32(h) : stof_f16_to_f32(h);
            }
    return STOF_OK;
}

static double rel_err(const float *a, const float *ref, int64_t n)
{
    double num = 0, den = 0;
    for (int64_t i = 0; i < n; i++) {
        double d = (double)a[i] - ref[i];
        num += isfinite(a[i]) ? d * d : INFINITY;
        den += (double)ref[i] * ref[i];
    }
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

static void describe_attn(int kernel, int warps, int block_m, char *out, size_t cap)
{
    switch (kernel) {
    case STOF_ATTN_AUTO: snprintf(out, cap, "selector"); break;
    case STOF_ATTN_BLOCKWISE: snprintf(out, cap, "blockwise w%d m%d", warps, block_m); break;
    case STOF_ATTN_ROWWISE: snprintf(out, cap, "rowwise"); break;
    case STOF_ATTN_BLOCKWISE_SM90:
        snprintf(out, cap, "blockwise_sm90 w%d m%d", warps, block_m);
        break;
    default: snprintf(out, cap, "kernel %d w%d m%d", kernel, warps, block_m);
    }
}

/* What plan p runs in dimension dim; the attention of a model with two layer
 * mask kinds names both ("selector; 2nd kind: blockwise w4 m64"). */
static void describe_seg(const tune_plan *p, int dim, int kinds, char *out, size_t cap)
{
    if (dim == TUNE_DIM_ATTN) {
        describe_attn(p->attn_kernel, p->attn_warps, p->attn_block_m, out, cap);
        size_t used = strlen(out);
        if (kinds > 1 && used + 16 < cap) {
            used += (size_t)snprintf(out + used, cap - used, "; 2nd kind: ");
            describe_attn(p->attn2_kernel, p->attn2_warps, p->attn2_block_m, out + used,
                          cap - used);
        }
        return;
    }
    if (p->ffn_chain && dim == TUNE_SEG_FFN2) {
        snprintf(out, cap, "(in the ffn chain)");
        return;
    }
    const tune_seg *s = &p->seg[dim];
    if (s->path == 0) {
        snprintf(out, cap, "cublaslt #%d", s->algo);
        return;
    }
    fuse_config c = {(fuse_tpl)s->tpl, s->block_m, s->block_n, s->block_k,
                     s->warps_m,       s->warps_n, s->stages};
    fuse_config_format(&c, out, cap);
}

static void describe_plan(const tune_plan *p, int kinds, char *out, size_t cap)
{
    size_t used = 0;
    for (int d = 0; d < TUNE_DIMS && used < cap; d++) {
        char one[96];
        describe_seg(p, d, kinds, one, sizeof one);
        int w = snprintf(out + used, cap - used, "%s%s", d ? " | " : "", one);
        if (w < 0) break;
        used += (size_t)w;
    }
}

static stof_status measure(void *user, const tune_plan *plan, double *ms, bool *valid)
{
    tuner *t = user;
    *ms = INFINITY;
    *valid = false;
    char desc[512];
    describe_plan(plan, t->m->gpu->n_kinds, desc, sizeof desc);
    size_t bytes = (size_t)t->B * t->L * t->H * 2;
    STOF_CUDA_TRY(cudaMemset(t->d_hid, 0xff, bytes)); /* NaN: unwritten output shows */
    /* The first forward of a plan's bucket runs kernel by kernel, the second
     * captures its graph: both are warm-up. */
    stof_status st = forward(t, plan);
    if (st == STOF_OK) st = forward(t, plan);
    double times[TUNE_MAX_REPS];
    for (int i = 0; i < t->reps && st == STOF_OK; i++) {
        cudaStream_t s = (cudaStream_t)t->m->ctx->stream;
        st = STOF_CUDA(cudaEventRecord(t->ev0, s));
        if (st == STOF_OK) st = forward(t, plan);
        if (st == STOF_OK) st = STOF_CUDA(cudaEventRecord(t->ev1, s));
        if (st == STOF_OK) st = STOF_CUDA(cudaEventSynchronize(t->ev1));
        float e = 0;
        if (st == STOF_OK) st = STOF_CUDA(cudaEventElapsedTime(&e, t->ev0, t->ev1));
        times[i] = e;
    }
    if (st == STOF_OK) st = read_hidden(t, t->have_ref ? t->out : t->ref);
    if (st != STOF_OK) {
        if (st == STOF_ERR_CUDA && cudaPeekAtLastError() != cudaSuccess) return st; /* sticky */
        stof_log(STOF_LOG_INFO, "tune: candidate [%s] cannot run: %s", desc, stof_last_error());
        stof_clear_error();
        return STOF_OK;
    }
    *ms = tune_median(times, t->reps);
    if (!t->have_ref) {
        t->have_ref = true;
        *valid = true;
        /* enough timed forwards to fill about TUNE_TARGET_MS */
        int reps = *ms > 0 ? (int)(TUNE_TARGET_MS / *ms) : TUNE_MAX_REPS;
        t->reps = reps < TUNE_MIN_REPS ? TUNE_MIN_REPS : reps > TUNE_MAX_REPS ? TUNE_MAX_REPS : reps;
    } else {
        double e = rel_err(t->out, t->ref, t->n_valid);
        *valid = e <= t->tol;
        if (!*valid)
            stof_log(STOF_LOG_WARN,
                     "tune: candidate [%s] rejected: its output differs from the default plan's "
                     "(relative error %.3g, tolerance %.0e)",
                     desc, e, t->tol);
    }
    stof_log(STOF_LOG_DEBUG, "tune: %.4f ms%s  [%s]", *ms, *valid ? "" : " (rejected)", desc);
    return STOF_OK;
}

static void progress(void *user, int done, int total, const char *stage)
{
    tuner *t = user;
    if (t->params->progress) t->params->progress(t->params->progress_user, done, total, stage);
}

/* ---------------------------------------------------------------- entry point */

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static stof_status tuner_setup(tuner *t)
{
    stof_model *m = t->m;
    t->B = (int)t->ids->shape[0];
    t->L = (int)t->ids->shape[1];
    t->H = m->info.hidden;
    STOF_TRY(stof_host_calloc((size_t)t->B, sizeof *t->lens, (void **)&t->lens));
    if (t->lengths) {
        STOF_REQUIRE(t->lengths->memory == STOF_MEM_HOST && t->lengths->dtype == STOF_I32 &&
                         t->lengths->ndim == 1 && t->lengths->shape[0] == t->B,
                     STOF_ERR_SHAPE, "stof_model_tune: lengths must be host I32 [B = %d]", t->B);
        for (int b = 0; b < t->B; b++) {
            int32_t v = ((const int32_t *)t->lengths->data)[b * t->lengths->stride[0]];
            STOF_REQUIRE(v >= 0 && v <= t->L, STOF_ERR_SHAPE,
                         "stof_model_tune: lengths[%d] = %d is outside [0, %d]", b, (int)v, t->L);
            t->lens[b] = v;
        }
    } else {
        for (int b = 0; b < t->B; b++)
            t->lens[b] = t->L;
    }
    t->T = 0;
    for (int b = 0; b < t->B; b++)
        t->T += t->lens[b];
    STOF_REQUIRE(t->T > 0, STOF_ERR_SHAPE, "stof_model_tune: every sequence is empty");
    t->rows = tune_token_bucket(t->T);
    if (t->rows > (int64_t)t->B * t->L) t->rows = (int64_t)t->B * t->L;
    t->n_valid = t->T * t->H;
    STOF_TRY(enc_gpu_mask_tiles(m, t->B, t->L, t->lens, t->params->mask, &t->tile_m, &t->tile_n));
    size_t n = (size_t)t->B * t->L * t->H;
    STOF_TRY(stof_dev_alloc(m->ctx, n * 2, &t->d_hid));
    int64_t shape[3] = {t->B, t->L, t->H};
    t->hid = stof_tensor_make(t->d_hid, m->info.dtype, STOF_MEM_DEVICE, 3, shape);
    STOF_TRY(stof_host_alloc(n * 2, (void **)&t->half));
    STOF_TRY(stof_host_alloc((size_t)t->n_valid * sizeof(float), (void **)&t->ref));
    STOF_TRY(stof_host_alloc((size_t)t->n_valid * sizeof(float), (void **)&t->out));
    STOF_CUDA_TRY(cudaEventCreate(&t->ev0));
    STOF_CUDA_TRY(cudaEventCreate(&t->ev1));
    t->fp = stof_forward_default_params();
    t->fp.mask = t->params->mask;
    t->reps = TUNE_MIN_REPS;
    t->tol = m->info.dtype == STOF_BF16 ? 3e-2 : 1e-2;
    for (int s = 0; s < TUNE_NSEG; s++)
        t->lt_algos[s] = -1;
    return STOF_OK;
}

static void tuner_free(tuner *t)
{
    if (t->d_hid) stof_dev_free(t->m->ctx, t->d_hid);
    if (t->ev0) cudaEventDestroy(t->ev0);
    if (t->ev1) cudaEventDestroy(t->ev1);
    free(t->lens);
    free(t->half);
    free(t->ref);
    free(t->out);
}

static void fill_result(const tune_plan *best, int kinds, double tune_s, const tune_stats *stats,
                        stof_tune_result *out)
{
    static const char *names[STOF_TUNE_SEGMENTS] = {"qkv", "out-proj", "ffn1", "ffn2",
                                                    "attention"};
    tune_plan def;
    tune_plan_default(&def);
    out->default_ms = stats->default_ms;
    out->tuned_ms = stats->tuned_ms;
    out->tune_s = tune_s;
    out->measured = stats->measured;
    out->rejected = stats->rejected;
    for (int d = 0; d < STOF_TUNE_SEGMENTS; d++) {
        snprintf(out->segment[d], sizeof out->segment[d], "%s", names[d]);
        describe_seg(best, d, kinds, out->chosen[d], sizeof out->chosen[d]);
        describe_seg(&def, d, kinds, out->fallback[d], sizeof out->fallback[d]);
    }
}

stof_status stof_model_tune(stof_model *model, const stof_tune_params *params,
                            const stof_tensor *ids, const stof_tensor *lengths,
                            const stof_tensor *token_types, stof_tune_result *out)
{
    STOF_REQUIRE(model, STOF_ERR_INVALID_ARG, "stof_model_tune: model is NULL");
    STOF_REQUIRE(out, STOF_ERR_INVALID_ARG, "stof_model_tune: out is NULL");
    STOF_REQUIRE(ids, STOF_ERR_INVALID_ARG, "stof_model_tune: ids is NULL");
    STOF_REQUIRE(model->gpu, STOF_ERR_UNSUPPORTED,
                 "stof_model_tune: the model runs on the CPU; tuning measures GPU plans");
    memset(out, 0, sizeof *out);
    stof_tune_params p = params ? *params : stof_tune_default_params();
    if (p.budget == 0) p.budget = TUNE_DEFAULT_BUDGET;
    STOF_REQUIRE(p.budget > 0 && p.budget <= 4096, STOF_ERR_INVALID_ARG,
                 "stof_model_tune: budget %d is outside [1, 4096]", p.budget);
    STOF_REQUIRE(ids->ndim == 2, STOF_ERR_SHAPE, "stof_model_tune: ids must be [B, L]");
    tuner t;
    memset(&t, 0, sizeof t);
    t.m = model;
    t.params = &p;
    t.ids = ids;
    t.lengths = lengths;
    t.types = token_types;
    double t0 = now_s();
    stof_status st = tuner_setup(&t);
    tune_plan best;
    tune_stats stats;
    if (st == STOF_OK) {
        tune_ops ops = {&t, scheme_variants, param_variants, measure, progress};
        st = tune_search(&ops, p.budget, &best, &stats);
    }
    tune_key key;
    if (st == STOF_OK) st = enc_gpu_tune_key(model, t.B, t.L, t.T, p.mask, &key);
    if (st == STOF_OK) {
        best.tune_s = now_s() - t0;
        enc_gpu_remember_plan(model->gpu, &key, &best);
        fill_result(&best, model->gpu->n_kinds, best.tune_s, &stats, out);
        if (p.store) {
            char path[sizeof out->cache_path];
            st = enc_gpu_tune_cache_path(model->gpu, path, sizeof path);
            if (st == STOF_OK) st = tune_cache_store(path, &key, &best);
            if (st == STOF_OK) memcpy(out->cache_path, path, sizeof path);
        }
    }
    tuner_free(&t);
    return st;
}
#endif
