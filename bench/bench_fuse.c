/*
 * bench_fuse.c — each fusion template configuration against the cuBLASLt
 * path plus row kernels, per encoder-layer segment, at BERT-base and
 * BERT-large shapes and 64 .. 16384 tokens: QKV, FFN1 + exact GELU,
 * out-proj + bias + residual + LayerNorm, FFN2 + bias + residual + LayerNorm,
 * and the whole FFN block (the GEMM -> GEMM chain).
 *
 * Timing: CUDA events on the ctx's stream, 3 warm-up runs, then enough runs
 * to last about half a millisecond captured as one CUDA graph and replayed
 * 15 times; the median replay is reported as ms per run and TFLOP/s (2 m n k
 * per GEMM). The weights stay in L2 between runs where they fit. Each
 * template's output is compared with the cuBLASLt path's in the same run for
 * token counts up to 2048 ("MISMATCH" beyond a relative 2e-2). QKV and FFN1
 * also run the Hopper template (gemm_sm90) where the device has it.
 *
 * --glu instead times a GLU up projection y = act(a) * b, [m, 2 inter] of
 * GEMM with the halves interleaved as the engine uploads them
 * (fuse_glu_upload), no bias: ModernBERT-base (768 -> 2 x 1152, exact GELU)
 * and LLaMA-3.2-1B (2048 -> 2 x 8192, SiLU) at 4096, 16384 and 23923 tokens
 * (ModernBERT-base's (16, 2048) batch). First the plain cuBLASLt GEMM of the
 * [m, 2 inter] output, the speed of light the ratios are against; then the
 * unfused path (that GEMM, then fuse_glu); then every gemm_sm90 config with
 * the GLU in its epilogue and the config the GLU rule picks
 * (fuse_config_sm90_glu), each output compared with the unfused path's.
 *
 * --rope instead times a RoPE layer's QKV projection, no bias, positions of
 * packed sequences of 2048 (a fuse_rope_table of 2048): ModernBERT-base (768
 * -> 12 + 2 x 12 heads of 64) at 4096, 16384 and 23923 tokens, LLaMA-3.2-1B
 * (2048 -> 32 + 2 x 8 heads of 64) and the same widths in heads of 128 (16 +
 * 2 x 4) at 4096 and 16384. First the plain cuBLASLt GEMM (the speed of
 * light the ratios are against), then (a) the unfused path (that GEMM, then
 * fuse_rope over q and k), (b) gemm_sm90 without the rotation, then
 * fuse_rope, (c) every gemm_sm90 config that carries the rotation in its
 * epilogue (fuse_rope_epi) and the config the plan's rule picks
 * (fuse_config_sm90_rope), each output of (b) and (c) compared with (a)'s.
 *
 * usage: bench_fuse [--quick] [--bf16] [--max-tokens N] [--glu | --rope]
 * exits 77 without a GPU
 */
#include "cpu/cpu_ref.h"
#include "fuse/fuse.h"

#include <cuda_runtime_api.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* SEG_LT_GLU: the linear (no glu) into lin.y, then fuse_glu of it into glu_y.
 * SEG_LT_ROPE: the linear (on the choice's path, without the rope epilogue)
 * into lin.y, then fuse_rope over it as lin.rope describes. */
typedef enum seg_kind { SEG_LINEAR_ACT, SEG_LINEAR_LN, SEG_FFN, SEG_LT_GLU, SEG_LT_ROPE } seg_kind;

typedef struct bench_case {
    stof_ctx *ctx;
    seg_kind kind;
    fuse_choice choice;
    fuse_linear_args lin;
    fuse_ffn_args ffn;
    fuse_ws ws;
    stof_act glu_act;
    void *glu_y;
} bench_case;

static stof_status run_case(const bench_case *c)
{
    switch (c->kind) {
    case SEG_LINEAR_ACT: return fuse_linear_act(c->ctx, &c->choice, &c->lin, c->ws);
    case SEG_LINEAR_LN: return fuse_linear_res_ln(c->ctx, &c->choice, &c->lin, c->ws);
    case SEG_FFN: return fuse_ffn(c->ctx, &c->choice, &c->ffn, c->ws);
    case SEG_LT_GLU: {
        stof_status st = fuse_linear_act(c->ctx, &c->choice, &c->lin, c->ws);
        if (st != STOF_OK) return st;
        return fuse_glu(c->ctx, c->lin.dtype, c->lin.m, c->lin.n / 2, c->lin.y, c->glu_act,
                        c->glu_y);
    }
    case SEG_LT_ROPE: {
        fuse_linear_args plain = c->lin;
        const fuse_rope_epi *r = &c->lin.rope;
        plain.rope.positions = NULL;
        stof_status st = fuse_linear_act(c->ctx, &c->choice, &plain, c->ws);
        if (st != STOF_OK) return st;
        return fuse_rope(c->ctx, plain.dtype, plain.y, plain.m, r->rope_cols / r->head_dim,
                         r->head_dim, plain.n, r->positions, &r->table);
    }
    }
    return STOF_ERR_INTERNAL;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* reps runs of the case captured as one CUDA graph (NULL on failure). */
static cudaGraphExec_t capture_runs(const bench_case *c, int reps)
{
    cudaStream_t s = (cudaStream_t)c->ctx->stream;
    cudaGraph_t g = NULL;
    cudaGraphExec_t e = NULL;
    if (cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal) != cudaSuccess) return NULL;
    stof_status st = STOF_OK;
    for (int i = 0; i < reps && st == STOF_OK; i++)
        st = run_case(c);
    cudaError_t end = cudaStreamEndCapture(s, &g);
    if (st == STOF_OK && end == cudaSuccess && cudaGraphInstantiate(&e, g, 0) != cudaSuccess)
        e = NULL;
    if (g) cudaGraphDestroy(g);
    if (!e) (void)cudaGetLastError();
    return e;
}

/*
 * Median ms per run, or a negative value when the case fails. The runs are
 * replayed from a CUDA graph, as the encoder runs its layers, so the figure is
 * the GPU's time per run with the launch overhead of graph nodes, not the
 * host's launch rate (which bounds back-to-back launches at small m).
 */
static double time_case(const bench_case *c)
{
    cudaStream_t s = (cudaStream_t)c->ctx->stream;
    for (int i = 0; i < 3; i++) {
        stof_status st = run_case(c);
        if (st != STOF_OK) {
            printf("    failed: %s: %s\n", stof_status_str(st), stof_last_error());
            return -1;
        }
    }
    if (cudaStreamSynchronize(s) != cudaSuccess) return -1;
    cudaEvent_t e0, e1;
    cudaEventCreate(&e0);
    cudaEventCreate(&e1);
    cudaEventRecord(e0, s);
    run_case(c);
    cudaEventRecord(e1, s);
    cudaEventSynchronize(e1);
    float est = 0;
    cudaEventElapsedTime(&est, e0, e1);
    int reps = est > 0 ? (int)ceil(0.5 / est) : 100;
    if (reps < 1) reps = 1;
    if (reps > 200) reps = 200;
    cudaGraphExec_t graph = capture_runs(c, reps);
    if (!graph) {
        printf("    failed: the runs could not be captured as a CUDA graph\n");
        cudaEventDestroy(e0);
        cudaEventDestroy(e1);
        return -1;
    }
    cudaGraphLaunch(graph, s); /* warm-up */
    double samples[15];
    for (int k = 0; k < 15; k++) {
        cudaEventRecord(e0, s);
        cudaGraphLaunch(graph, s);
        cudaEventRecord(e1, s);
        cudaEventSynchronize(e1);
        float ms = 0;
        cudaEventElapsedTime(&ms, e0, e1);
        samples[k] = ms / reps;
    }
    cudaGraphExecDestroy(graph);
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    if (cudaGetLastError() != cudaSuccess) return -1;
    qsort(samples, 15, sizeof samples[0], cmp_double);
    return samples[7];
}

static void *dev_alloc(size_t bytes)
{
    void *p = NULL;
    if (cudaMalloc(&p, bytes) != cudaSuccess) {
        fprintf(stderr, "cudaMalloc(%zu) failed\n", bytes);
        exit(1);
    }
    return p;
}

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static float rng_uniform(float lo, float hi)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return lo + (hi - lo) * (float)((rng_state >> 11) * (1.0 / 9007199254740992.0));
}

static void *dev_random(stof_dtype dt, int64_t n, float scale)
{
    uint16_t *h = malloc((size_t)n * 2);
    if (!h) exit(1);
    for (int64_t i = 0; i < n; i++) {
        float v = rng_uniform(-scale, scale);
        h[i] = dt == STOF_BF16 ? stof_f32_to_bf16(v) : stof_f32_to_f16(v);
    }
    void *d = dev_alloc((size_t)n * 2);
    cudaMemcpy(d, h, (size_t)n * 2, cudaMemcpyHostToDevice);
    /* a pageable upload may return before it lands; the ctx's non-blocking
     * stream would not wait for it */
    cudaDeviceSynchronize();
    free(h);
    return d;
}

/* ||a - b|| / ||b|| over n 16-bit values on the device. */
static double rel_diff(const void *a, const void *b, int64_t n, stof_dtype dt)
{
    uint16_t *ha = malloc((size_t)n * 2), *hb = malloc((size_t)n * 2);
    if (!ha || !hb) exit(1);
    cudaDeviceSynchronize();
    cudaMemcpy(ha, a, (size_t)n * 2, cudaMemcpyDeviceToHost);
    cudaMemcpy(hb, b, (size_t)n * 2, cudaMemcpyDeviceToHost);
    double num = 0, den = 0;
    for (int64_t i = 0; i < n; i++) {
        double x = dt == STOF_BF16 ? stof_bf16_to_f32(ha[i]) : stof_f16_to_f32(ha[i]);
        double y = dt == STOF_BF16 ? stof_bf16_to_f32(hb[i]) : stof_f16_to_f32(hb[i]);
        num += (x - y) * (x - y);
        den += y * y;
    }
    free(ha);
    free(hb);
    if (isnan(num)) return INFINITY;
    return den > 0 ? sqrt(num / den) : (num > 0 ? INFINITY : 0);
}

typedef struct model_bufs {
    const char *name;
    int hidden, inter;
    void *x, *res, *w_qkv, *b_qkv, *w_o, *b_o, *w1, *b1, *w2, *b2, *gamma, *beta;
    void *y_big, *y, *inter_buf;
} model_bufs;

static void model_alloc(model_bufs *m, stof_dtype dt, int64_t t_max)
{
    int64_t H = m->hidden, I = m->inter;
    m->x = dev_random(dt, t_max * I, 1.f);
    m->res = dev_random(dt, t_max * H, 1.f);
    m->w_qkv = dev_random(dt, 3 * H * H, 1.f / sqrtf((float)H));
    m->b_qkv = dev_random(dt, 3 * H, 0.1f);
    m->w_o = dev_random(dt, H * H, 1.f / sqrtf((float)H));
    m->b_o = dev_random(dt, H, 0.1f);
    m->w1 = dev_random(dt, I * H, 1.f / sqrtf((float)H));
    m->b1 = dev_random(dt, I, 0.1f);
    m->w2 = dev_random(dt, H * I, 1.f / sqrtf((float)I));
    m->b2 = dev_random(dt, H, 0.1f);
    m->gamma = dev_random(dt, H, 1.f);
    m->beta = dev_random(dt, H, 0.1f);
    m->y_big = dev_alloc((size_t)t_max * I * 2);
    m->y = dev_alloc((size_t)t_max * I * 2);
    m->inter_buf = dev_alloc((size_t)t_max * I * 2);
}

static void model_free(model_bufs *m)
{
    void *all[] = {m->x,  m->res, m->w_qkv, m->b_qkv, m->w_o,   m->b_o, m->w1,       m->b1,
                   m->w2, m->b2,  m->gamma, m->beta,  m->y_big, m->y,   m->inter_buf};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        cudaFree(all[i]);
}

/* The template's output against the cuBLASLt path's, both run now. */
static const char *cross_check(const bench_case *tpl_case, const bench_case *lt_case, void *out,
                               int64_t out_elems, stof_dtype dt)
{
    if (run_case(tpl_case) != STOF_OK) return "  (rerun failed)";
    void *tmp = dev_alloc((size_t)out_elems * 2);
    cudaDeviceSynchronize();
    cudaMemcpy(tmp, out, (size_t)out_elems * 2, cudaMemcpyDeviceToDevice);
    cudaDeviceSynchronize(); /* the copy must finish before the next case overwrites out */
    if (run_case(lt_case) != STOF_OK) {
        cudaFree(tmp);
        return "  (cuBLASLt rerun failed)";
    }
    double d = rel_diff(tmp, out, out_elems, dt);
    cudaFree(tmp);
    return d <= 2e-2 ? "" : "  MISMATCH";
}

/* Prints one timed case against the baseline, with its cross-check's flag. */
static void report_case(const char *model, int64_t tokens, const char *seg, const char *name,
                        double ms, double base_ms, double flops, const char *flag)
{
    printf("%-10s T=%-6lld %-10s %-34s %9.4f ms %7.1f TF/s  %.2fx%s\n", model, (long long)tokens,
           seg, name, ms, flops / ms * 1e-9, base_ms > 0 ? base_ms / ms : 0.0, flag);
}

/* Whether config fits the shape [tokens, k] x [k, n]; where it does not, its
 * row says why. */
static bool config_fits(stof_ctx *ctx, const fuse_config *config, const char *model, int64_t tokens,
                        const char *seg, const char *name, int64_t n, int64_t k)
{
    if (fuse_config_check_shape(config, tokens, (int)n, (int)k, ctx->smem_per_block_optin) ==
        STOF_OK)
        return true;
    printf("%-10s T=%-6lld %-10s %-34s (does not fit: %s)\n", model, (long long)tokens, seg, name,
           stof_last_error());
    return false;
}

/* Times c and prints its row, its output compared with ref's where check. */
static void time_and_report(const bench_case *c, const bench_case *ref, bool check, void *out,
                            int64_t out_elems, stof_dtype dt, const char *model, int64_t tokens,
                            const char *seg, const char *name, double base_ms, double flops)
{
    double ms = time_case(c);
    if (ms < 0) return;
    const char *flag = check ? cross_check(c, ref, out, out_elems, dt) : "";
    report_case(model, tokens, seg, name, ms, base_ms, flops, flag);
}

/* Every config of tpl (those that do not fit say why), then its default
 * rule: for the segment's own template a config left NONE, for an extra one
 * (gemm_sm90, which runs only when named) the config the rule picks. */
static void bench_configs(stof_ctx *ctx, bench_case c, const bench_case *lt, double base_ms,
                          const char *model, const char *seg, fuse_tpl tpl, bool extra,
                          double flops, int64_t out_elems, int64_t tokens)
{
    stof_dtype dt = c.kind == SEG_FFN ? c.ffn.dtype : c.lin.dtype;
    void *out = c.kind == SEG_FFN ? c.ffn.y : c.lin.y;
    int64_t n = c.kind == SEG_FFN ? c.ffn.hidden : c.lin.n;
    int64_t k = c.kind == SEG_FFN ? c.ffn.inter : c.lin.k;
    int count = 0;
    const fuse_config *list = fuse_config_list(tpl, &count);
    for (int i = 0; i <= count; i++) {
        char name[96];
        c.choice.path = FUSE_PATH_STOF;
        if (i < count) {
            c.choice.config = list[i];
            fuse_config_format(&list[i], name, sizeof name);
            if (!config_fits(ctx, &list[i], model, tokens, seg, name, n, k)) continue;
        } else if (extra) {
            c.choice.config = fuse_config_default(tpl, tokens, (int)n, (int)k, ctx->sm_count,
                                                  ctx->smem_per_block_optin);
            if (c.choice.config.tpl == FUSE_TPL_NONE) continue;
            snprintf(name, sizeof name, "%s default %dx%d", fuse_tpl_name(tpl),
                     c.choice.config.block_m, c.choice.config.block_n);
        } else {
            memset(&c.choice.config, 0, sizeof c.choice.config);
            snprintf(name, sizeof name, "stof default rule");
        }
        time_and_report(&c, lt, tokens <= 2048 && base_ms > 0, out, out_elems, dt, model, tokens,
                        seg, name, base_ms, flops);
    }
}

/* One segment: the cuBLASLt path first (the baseline), then every config of
 * the segment's template and its default rule, then those of extra (NONE for
 * none) where this device runs it. */
static void bench_segment(stof_ctx *ctx, fuse_ws ws, const char *model, const char *seg,
                          fuse_tpl tpl, fuse_tpl extra, bench_case c, double flops,
                          int64_t out_elems, int64_t tokens)
{
    c.ctx = ctx;
    c.ws = ws;
    memset(&c.choice, 0, sizeof c.choice);
    c.choice.path = FUSE_PATH_CUBLASLT;
    const bench_case lt = c;
    double base_ms = time_case(&lt);
    printf("%-10s T=%-6lld %-10s %-34s %9.4f ms %7.1f TF/s  1.00x\n", model, (long long)tokens, seg,
           "cublaslt + row kernels", base_ms, base_ms > 0 ? flops / base_ms * 1e-9 : 0.0);
    bench_configs(ctx, c, &lt, base_ms, model, seg, tpl, false, flops, out_elems, tokens);
    if (extra == FUSE_TPL_GEMM_SM90 && !fuse_sm90_available(ctx)) return;
    if (extra != FUSE_TPL_NONE)
        bench_configs(ctx, c, &lt, base_ms, model, seg, extra, true, flops, out_elems, tokens);
}

/* ---------------------------------------------------------------- --glu */

/* Random [2 inter, k] weights in the interleaved GLU layout on the device. */
static void *glu_weights(stof_ctx *ctx, stof_dtype dt, int inter, int k)
{
    int64_t n = 2 * (int64_t)inter * k;
    uint16_t *h = malloc((size_t)n * 2);
    if (!h) exit(1);
    const float scale = 1.f / sqrtf((float)k);
    for (int64_t i = 0; i < n; i++) {
        float v = rng_uniform(-scale, scale);
        h[i] = dt == STOF_BF16 ? stof_f32_to_bf16(v) : stof_f32_to_f16(v);
    }
    void *d = dev_alloc((size_t)n * 2);
    if (fuse_glu_upload(ctx, d, h, inter, (size_t)k * 2) != STOF_OK) {
        fprintf(stderr, "bench_fuse: %s\n", stof_last_error());
        exit(1);
    }
    free(h);
    return d;
}

/* The plain cuBLASLt GEMM y [T, n] = x w^T (k inputs, no bias): the speed of
 * light of an epilogue's ratios. */
static bench_case lt_linear_case(stof_ctx *ctx, fuse_ws ws, stof_dtype dt, int64_t T, int n, int k,
                                 const void *x, const void *w, void *y)
{
    bench_case c;
    memset(&c, 0, sizeof c);
    c.ctx = ctx;
    c.ws = ws;
    c.kind = SEG_LINEAR_ACT;
    c.choice.path = FUSE_PATH_CUBLASLT;
    c.lin.dtype = dt;
    c.lin.m = T;
    c.lin.n = n;
    c.lin.k = k;
    c.lin.x = x;
    c.lin.w = w;
    c.lin.act = ACT_NONE;
    c.lin.y = y;
    c.lin.w_ready = true;
    return c;
}

/* Every gemm_sm90 config that carries c's epilogue (a RoPE epilogue only
 * where the tile holds whole heads), then the rule's config (named rule_label;
 * tpl NONE: none), each timed against sol_ms and its out_elems outputs
 * compared with the unfused path's. */
static void bench_sm90_epilogue(stof_ctx *ctx, bench_case c, const bench_case *unfused,
                                const char *model, const char *seg, fuse_config rule,
                                const char *rule_label, double sol_ms, double flops,
                                int64_t out_elems)
{
    const int64_t T = c.lin.m;
    const fuse_rope_epi *rope = &c.lin.rope;
    c.choice.path = FUSE_PATH_STOF;
    int count = 0;
    const fuse_config *list = fuse_config_list(FUSE_TPL_GEMM_SM90, &count);
    for (int i = 0; i <= count; i++) {
        char name[96];
        if (i < count) {
            if (rope->positions &&
                !fuse_rope_epi_fits(&list[i], rope->head_dim, rope->table.rot_dim))
                continue;
            c.choice.config = list[i];
            fuse_config_format(&list[i], name, sizeof name);
        } else {
            if (rule.tpl == FUSE_TPL_NONE) continue;
            c.choice.config = rule;
            char tile[80];
            fuse_config_format(&rule, tile, sizeof tile);
            snprintf(name, sizeof name, "%s: %s", rule_label, tile);
        }
        if (!config_fits(ctx, &c.choice.config, model, T, seg, name, c.lin.n, c.lin.k)) continue;
        time_and_report(&c, unfused, true, c.lin.y, out_elems, c.lin.dtype, model, T, seg, name,
                        sol_ms, flops);
    }
}

/* One GLU shape: the plain GEMM (speed of light), the unfused path, then
 * every gemm_sm90 config with the GLU epilogue and the GLU rule's config. */
static void bench_glu_shape(stof_ctx *ctx, fuse_ws ws, const char *model, int64_t T, int hidden,
                            int inter, stof_act act, const void *x, const void *w, void *both,
                            void *y, stof_dtype dt)
{
    const double flops = 2.0 * T * 2 * inter * hidden;
    const char *seg = act == ACT_SILU ? "ffn1+swiglu" : "ffn1+geglu";
    bench_case c = lt_linear_case(ctx, ws, dt, T, 2 * inter, hidden, x, w, both);
    double sol_ms = time_case(&c);
    report_case(model, T, seg, "cublaslt gemm [m, 2 inter] (sol)", sol_ms, sol_ms, flops, "");

    bench_case unfused = c;
    unfused.kind = SEG_LT_GLU;
    unfused.glu_act = act;
    unfused.glu_y = y;
    double unfused_ms = time_case(&unfused);
    if (unfused_ms >= 0)
        report_case(model, T, seg, "cublaslt + fuse_glu", unfused_ms, sol_ms, flops, "");

    if (!fuse_sm90_available(ctx)) return;
    c.lin.glu = true;
    c.lin.act = act;
    c.lin.y = y;
    bench_sm90_epilogue(
        ctx, c, &unfused, model, seg,
        fuse_config_sm90_glu(T, 2 * inter, hidden, ctx->sm_count, ctx->smem_per_block_optin),
        "glu rule", sol_ms, flops, T * inter);
}

/* --glu: ModernBERT-base's and LLaMA-3.2-1B's GLU up projections. */
static void bench_glu(stof_ctx *ctx, fuse_ws ws, stof_dtype dt)
{
    static const struct {
        const char *name;
        int hidden, inter;
        stof_act act;
    } models[] = {{"modernbert", 768, 1152, ACT_GELU}, {"llama-1b", 2048, 8192, ACT_SILU}};
    static const int64_t tokens[] = {4096, 16384, 23923};
    const int64_t t_max = tokens[2];
    printf("--glu: ratios against the plain cuBLASLt GEMM of the same [m, 2 inter] output\n");
    for (size_t mi = 0; mi < sizeof models / sizeof models[0]; mi++) {
        const int H = models[mi].hidden, I = models[mi].inter;
        void *x = dev_random(dt, t_max * H, 1.f);
        void *w = glu_weights(ctx, dt, I, H);
        void *both = dev_alloc((size_t)t_max * 2 * I * 2), *y = dev_alloc((size_t)t_max * I * 2);
        for (size_t ti = 0; ti < sizeof tokens / sizeof tokens[0]; ti++)
            bench_glu_shape(ctx, ws, models[mi].name, tokens[ti], H, I, models[mi].act, x, w, both,
                            y, dt);
        cudaFree(x), cudaFree(w), cudaFree(both), cudaFree(y);
    }
}

/* ---------------------------------------------------------------- --rope */

/* One QKV shape: the plain GEMM (speed of light); (a) cuBLASLt + fuse_rope,
 * the unfused path the others are checked against; (b) gemm_sm90 without
 * the rotation + fuse_rope, at the default rule's tile and at the RoPE
 * rule's; (c) every gemm_sm90 config with the rotation in its epilogue and
 * the RoPE rule's. */
static void bench_rope_shape(stof_ctx *ctx, fuse_ws ws, const char *model, int64_t T, int hidden,
                             int heads, int kv_heads, const void *x, const void *w,
                             const fuse_rope_epi *rope, void *y, stof_dtype dt)
{
    const int n = (heads + 2 * kv_heads) * rope->head_dim;
    const double flops = 2.0 * T * n * hidden;
    const char *seg = "qkv+rope";
    bench_case c = lt_linear_case(ctx, ws, dt, T, n, hidden, x, w, y);
    double sol_ms = time_case(&c);
    report_case(model, T, seg, "cublaslt gemm (sol)", sol_ms, sol_ms, flops, "");

    bench_case unfused = c;
    unfused.kind = SEG_LT_ROPE;
    unfused.lin.rope = *rope;
    double unfused_ms = time_case(&unfused);
    if (unfused_ms >= 0)
        report_case(model, T, seg, "(a) cublaslt + fuse_rope", unfused_ms, sol_ms, flops, "");

    if (!fuse_sm90_available(ctx)) return;
    const fuse_config rule =
        fuse_config_sm90_rope(T, n, hidden, rope->head_dim, rope->table.rot_dim, ctx->sm_count,
                              ctx->smem_per_block_optin);
    const fuse_config plain[2] = {fuse_config_default(FUSE_TPL_GEMM_SM90, T, n, hidden,
                                                      ctx->sm_count, ctx->smem_per_block_optin),
                                  rule};
    for (int i = 0; i < 2; i++) {
        if (plain[i].tpl == FUSE_TPL_NONE || (i == 1 && fuse_config_equal(&plain[0], &plain[1])))
            continue;
        bench_case b = unfused;
        b.choice.path = FUSE_PATH_STOF;
        b.choice.config = plain[i];
        char tile[80], name[96];
        fuse_config_format(&plain[i], tile, sizeof tile);
        snprintf(name, sizeof name, "(b) %s + fuse_rope", tile);
        if (!config_fits(ctx, &plain[i], model, T, seg, name, n, hidden)) continue;
        time_and_report(&b, &unfused, true, y, T * n, dt, model, T, seg, name, sol_ms, flops);
    }
    c.lin.rope = *rope;
    bench_sm90_epilogue(ctx, c, &unfused, model, seg, rule, "(c) rope rule", sol_ms, flops, T * n);
}

/* --rope: the QKV projections of ModernBERT-base (12 + 2 x 12 heads of 64),
 * LLaMA-3.2-1B (32 + 2 x 8 heads of 64) and the same widths as heads of 128
 * (16 + 2 x 4: the epilogue's other head size), every q and k dim rotating,
 * positions of packed sequences of 2048 read from a table of 2048. */
static void bench_rope(stof_ctx *ctx, fuse_ws ws, stof_dtype dt)
{
    static const struct {
        const char *name;
        int hidden, heads, kv_heads, head_dim, n_tokens; /* the first n_tokens of tokens */
        float theta;
    } models[] = {{"modernbert", 768, 12, 12, 64, 3, 160000.f},
                  {"llama-1b", 2048, 32, 8, 64, 2, 500000.f},
                  {"llama-d128", 2048, 16, 4, 128, 2, 500000.f}};
    static const int64_t tokens[] = {4096, 16384, 23923};
    const int64_t t_max = tokens[2];
    const int P = 2048;
    int32_t *pos = malloc((size_t)t_max * 4);
    if (!pos) exit(1);
    for (int64_t t = 0; t < t_max; t++)
        pos[t] = (int32_t)(t % P);
    int32_t *d_pos = dev_alloc((size_t)t_max * 4);
    cudaMemcpy(d_pos, pos, (size_t)t_max * 4, cudaMemcpyHostToDevice);
    printf("--rope: ratios against the plain cuBLASLt GEMM of the same [m, n] output\n");
    for (size_t mi = 0; mi < sizeof models / sizeof models[0]; mi++) {
        const int H = models[mi].hidden, D = models[mi].head_dim;
        const int n = (models[mi].heads + 2 * models[mi].kv_heads) * D;
        float inv[FUSE_ROPE_MAX_HALF];
        cpu_rope_freqs(models[mi].theta, D, 0, 1.f, 1.f, 4.f, 8192, inv);
        float *cs = dev_alloc(fuse_rope_table_bytes(P, D));
        fuse_rope_table tab;
        if (fuse_rope_table_build(ctx, inv, D, P, cs, &tab) != STOF_OK) {
            fprintf(stderr, "bench_fuse: %s\n", stof_last_error());
            exit(1);
        }
        const fuse_rope_epi rope = {d_pos, tab, D, (models[mi].heads + models[mi].kv_heads) * D};
        void *x = dev_random(dt, t_max * H, 1.f);
        void *w = dev_random(dt, (int64_t)n * H, 1.f / sqrtf((float)H));
        void *y = dev_alloc((size_t)t_max * n * 2);
        for (int ti = 0; ti < models[mi].n_tokens; ti++)
            bench_rope_shape(ctx, ws, models[mi].name, tokens[ti], H, models[mi].heads,
                             models[mi].kv_heads, x, w, &rope, y, dt);
        cudaFree(x), cudaFree(w), cudaFree(y), cudaFree(cs);
    }
    cudaFree(d_pos);
    free(pos);
}

int main(int argc, char **argv)
{
    bool quick = false, glu = false, rope = false;
    stof_dtype dt = STOF_F16;
    long long max_tokens = 0;
    for (int i = 1; i < argc; i++) {
        char *end = NULL;
        if (!strcmp(argv[i], "--quick"))
            quick = true;
        else if (!strcmp(argv[i], "--bf16"))
            dt = STOF_BF16;
        else if (!strcmp(argv[i], "--glu"))
            glu = true;
        else if (!strcmp(argv[i], "--rope"))
            rope = true;
        else if (!strcmp(argv[i], "--max-tokens") && i + 1 < argc &&
                 (max_tokens = strtoll(argv[i + 1], &end, 10)) > 0 && *end == '\0')
            i++;
        else {
            fprintf(stderr,
                    "usage: bench_fuse [--quick] [--bf16] [--max-tokens N] [--glu | --rope]\n");
            return 2;
        }
    }
    if (stof_gpu_count() == 0) {
        printf("bench_fuse: skipped: no CUDA device\n");
        return 77;
    }
    stof_ctx_params p = stof_ctx_default_params();
    p.device = STOF_DEVICE_GPU;
    stof_ctx *ctx = NULL;
    if (stof_ctx_create(&p, &ctx) != STOF_OK) {
        fprintf(stderr, "bench_fuse: %s\n", stof_last_error());
        return 1;
    }
    void *ws_ptr = NULL;
    if (stof_ctx_workspace(ctx, FUSE_LT_WORKSPACE_BYTES, &ws_ptr) != STOF_OK) {
        fprintf(stderr, "bench_fuse: %s\n", stof_last_error());
        return 1;
    }
    fuse_ws ws = {ws_ptr, FUSE_LT_WORKSPACE_BYTES};
    printf("bench_fuse on %s (%d SMs), %s, median of 15 CUDA-graph replays\n", ctx->device_name,
           ctx->sm_count, stof_dtype_name(dt));
    if (!fuse_sm90_available(ctx))
        printf("gemm_sm90 skipped: it runs on compute capability 9.0 in builds with sm_90a "
               "kernels (this device is %d.%d)\n",
               ctx->cc_major, ctx->cc_minor);
    if (glu || rope) {
        if (glu)
            bench_glu(ctx, ws, dt);
        else
            bench_rope(ctx, ws, dt);
        stof_ctx_destroy(ctx);
        return 0;
    }

    const int64_t all_tokens[] = {64, 128, 256, 512, 2048, 8192, 16384};
    const int64_t quick_tokens[] = {128, 2048};
    const int64_t *tokens = quick ? quick_tokens : all_tokens;
    int n_tokens = quick ? 2 : 7;
    while (max_tokens > 0 && n_tokens > 1 && tokens[n_tokens - 1] > max_tokens)
        n_tokens--;
    const int64_t t_max = tokens[n_tokens - 1];
    model_bufs models[2] = {{.name = "bert-base", .hidden = 768, .inter = 3072},
                            {.name = "bert-large", .hidden = 1024, .inter = 4096}};
    for (int mi = 0; mi < 2; mi++) {
        model_bufs *m = &models[mi];
        model_alloc(m, dt, t_max);
        int64_t H = m->hidden, I = m->inter;
        for (int ti = 0; ti < n_tokens; ti++) {
            int64_t T = tokens[ti];
            bench_case c;
            memset(&c, 0, sizeof c);
            c.lin.dtype = dt;
            c.lin.m = T;
            c.lin.eps = 1e-12f;

            c.kind = SEG_LINEAR_ACT;
            c.lin.n = (int)(3 * H);
            c.lin.k = (int)H;
            c.lin.x = m->x;
            c.lin.w = m->w_qkv;
            c.lin.bias = m->b_qkv;
            c.lin.act = ACT_NONE;
            c.lin.y = m->y_big;
            bench_segment(ctx, ws, m->name, "qkv", FUSE_TPL_GEMM_BIAS_ACT, FUSE_TPL_GEMM_SM90, c,
                          2.0 * T * 3 * H * H, T * 3 * H, T);

            c.lin.n = (int)I;
            c.lin.w = m->w1;
            c.lin.bias = m->b1;
            c.lin.act = ACT_GELU;
            bench_segment(ctx, ws, m->name, "ffn1+gelu", FUSE_TPL_GEMM_BIAS_ACT, FUSE_TPL_GEMM_SM90,
                          c, 2.0 * T * I * H, T * I, T);

            c.kind = SEG_LINEAR_LN;
            c.lin.n = (int)H;
            c.lin.k = (int)H;
            c.lin.w = m->w_o;
            c.lin.bias = m->b_o;
            c.lin.act = ACT_NONE;
            c.lin.residual = m->res;
            c.lin.gamma = m->gamma;
            c.lin.beta = m->beta;
            c.lin.y = m->y;
            bench_segment(ctx, ws, m->name, "oproj+ln", FUSE_TPL_GEMM_RES_LN, FUSE_TPL_NONE, c,
                          2.0 * T * H * H, T * H, T);

            c.lin.k = (int)I;
            c.lin.w = m->w2;
            c.lin.bias = m->b2;
            bench_segment(ctx, ws, m->name, "ffn2+ln", FUSE_TPL_GEMM_RES_LN, FUSE_TPL_NONE, c,
                          2.0 * T * H * I, T * H, T);

            memset(&c, 0, sizeof c);
            c.kind = SEG_FFN;
            c.ffn.dtype = dt;
            c.ffn.m = T;
            c.ffn.hidden = (int)H;
            c.ffn.inter = (int)I;
            c.ffn.x = m->x;
            c.ffn.w1 = m->w1;
            c.ffn.b1 = m->b1;
            c.ffn.act = ACT_GELU;
            c.ffn.w2 = m->w2;
            c.ffn.b2 = m->b2;
            c.ffn.residual = m->res;
            c.ffn.gamma = m->gamma;
            c.ffn.beta = m->beta;
            c.ffn.eps = 1e-12f;
            c.ffn.y = m->y;
            c.ffn.inter_buf = m->inter_buf;
            bench_segment(ctx, ws, m->name, "ffn block", FUSE_TPL_FFN_CHAIN, FUSE_TPL_NONE, c,
                          4.0 * T * H * I, T * H, T);
        }
        model_free(m);
    }
    stof_ctx_destroy(ctx);
    return 0;
}
