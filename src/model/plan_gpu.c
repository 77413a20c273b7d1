/*
 * plan_gpu.c — which kernel runs each GEMM segment of the layers, and the
 * tuning cache behind it.
 *
 * Fusion scheme by rule (plan_rules): every GEMM segment runs the cuBLASLt
 * path (bias, and GELU where cuBLASLt has the activation, in its epilogue;
 * exact GELU and residual + LayerNorm as row kernels), except up to 128 rows
 * on a Hopper, where gemm_sm90's 64 x 64 tile takes the segments whose K (or
 * K slice) its 12 stages hold (plan_small, fuse_sm90_small_rule): launched
 * with PDL behind a kernel that lets it start early (the LayerNorm before QKV
 * and FFN1, attention before the out-projection, FFN1 before FFN2), each CTA
 * requests all of its weights while that kernel still runs and only then
 * waits for it; FFN1 takes exact GELU in its epilogue, the residual segments
 * write fp32 partial sums of K slices for the LayerNorm kernel. On an H200
 * that took stof run, BERT-base at 100 tokens, from 0.42 to 0.39 ms, and
 * BERT-large from 0.89 to 0.86 ms. Up to a few hundred
 * rows the residual + LayerNorm segments cut K into slices whose fp32 partial
 * sums the LayerNorm kernel adds up (fuse_lt_split_rule; plan_splits applies
 * it to tuned plans too). On an H200 at BERT-base with 100 tokens that took
 * FFN2 from 5.5 us plus a 2.6 us split-K reduction kernel of cuBLASLt's own
 * to 4.8 us, and the out-projection from 4.3 to 3.2 us; stof run went from
 * 0.439 to 0.414 ms, BERT-large from 0.930 to 0.884 ms (slices of 1, 2 and
 * 4 for each segment measured at 100 and about 400 tokens; the rule picks
 * the fastest or one within 1.1%). The stof templates
 * whose CTAs own whole rows (GEMM + residual + LayerNorm, the FFN chain) read
 * every weight once per 16-32 rows: on an H200, BERT-base at 6K tokens took
 * 18 ms per forward with them against 4.3 ms for torch.compile. Which segment
 * fuses is to be decided by measurement (the tuner), not by rule.
 */
#include "model/engine_gpu.h"

#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

static fuse_choice lt_choice(int algo)
{
    fuse_choice c;
    memset(&c, 0, sizeof c);
    c.path = FUSE_PATH_CUBLASLT;
    c.lt_algo = algo;
    return c;
}

/*
 * The rule-based plan: cuBLASLt everywhere, the selector for attention
 * (plan_small then puts gemm_sm90's small tile where its rule applies).
 * Measured on an H200 at BERT-base (1, 128) and left out (graph replays):
 *  - a split-K GEMM with its epilogue fused (grid of column tiles x K slices,
 *    fp32 partials, a grid-wide barrier, then bias + GELU or residual +
 *    LayerNorm) for every linear layer up to 128 rows: 0.700 ms per forward
 *    against 0.497 ms; its mma.sync main loop re-reads x once per 64-column
 *    tile and took 8-15 us per segment where cuBLASLt takes 3.8-9.3 us;
 *  - the next layer's weights prefetched into L2 on a side stream of the
 *    graph: 0.478 ms against 0.458 ms, and slower at every shape tried;
 *  - for the residual + LayerNorm segments, a TMA + wgmma GEMM with K split
 *    over a thread block cluster (partial sums reduced through distributed
 *    shared memory, bias + residual added there, the LayerNorm done by the
 *    last column tile of each row group to arrive on a counter): correct,
 *    but 12.9 us for the out-projection and 11.0 us for FFN2 at 128 rows
 *    against 6.0 and 8.5 us for cuBLASLt + LayerNorm, and 0.566 ms per
 *    forward against 0.435 ms. Its fixed cost (cluster launch, the fence and
 *    counter, the dependent tail) is what the cuBLASLt path does not pay.
 */
static layer_plan plan_rules(void)
{
    layer_plan p;
    memset(&p, 0, sizeof p);
    p.qkv = p.out = p.ffn1 = p.ffn2 = lt_choice(0);
    p.use_chain = false;
    for (int k = 0; k < ENG_MASK_KINDS; k++)
        p.attn[k].kernel = STOF_ATTN_AUTO;
    return p;
}

/* The linear layer of GEMM segment seg (tune_segment) of layer l on T rows:
 * what the layers run, and what the tuner asks cuBLASLt about. Post-norm
 * BERT: QKV + bias (+ act), out-projection and FFN2 with residual +
 * LayerNorm in their epilogue. Pre-norm layers: four plain linears (+ bias,
 * + act) whose norms run as row passes beside them; the QKV and FFN1 inputs
 * are the normed h (the executor points x elsewhere where the layer has no
 * norm), the out-projection and FFN2 add themselves to x (residual x, y x),
 * FFN2 reads the GLU's gated product. A GLU's FFN1 is given as cuBLASLt runs
 * it, both halves into inter (the executor turns on the GLU epilogue for
 * the stof templates, mlp_in in exec_gpu.c). */
fuse_linear_args eng_segment_args(const stof_model *m, int l, int seg, int64_t T)
{
    const enc_gpu *g = m->gpu;
    const model_desc *d = &m->desc;
    const layer_desc *ld = &d->layer[l];
    const layer_weights *w = &m->w.layer[l];
    int H = d->hidden, I = ld->intermediate, D = ld->head_dim;
    bool glu = ld->mlp == MLP_GLU;
    fuse_linear_args a;
    memset(&a, 0, sizeof a);
    a.dtype = g->dtype;
    a.m = T;
    a.act = ACT_NONE;
    a.w_ready = true; /* weights are written once, at load */
    switch (seg) {
    case TUNE_SEG_QKV:
        a.n = (ld->heads + 2 * ld->kv_heads) * D, a.k = H, a.w = w->qkv, a.bias = w->qkv_b;
        a.x = g->bert ? g->x : g->h, a.y = g->qkv;
        break;
    case TUNE_SEG_OUT:
        a.n = H, a.k = ld->heads * D, a.x = g->attn, a.w = w->o, a.bias = w->o_b;
        a.y = g->x, a.residual = g->x;
        if (g->bert) a.gamma = w->attn_norm, a.beta = w->attn_norm_b, a.eps = d->norm_eps;
        break;
    case TUNE_SEG_FFN1:
        a.n = glu ? 2 * I : I, a.k = H, a.w = w->mlp_in, a.bias = w->mlp_in_b, a.y = g->inter;
        a.x = g->bert ? g->x : g->h;
        a.act = glu ? ACT_NONE : ld->act; /* a GLU's: fuse_glu's, or the GLU epilogue's */
        break;
    default: /* TUNE_SEG_FFN2 */
        a.n = H, a.k = I, a.x = glu ? g->gated : g->inter, a.w = w->down, a.bias = w->down_b;
        a.y = g->x, a.residual = g->x;
        if (g->bert) a.gamma = w->mlp_norm, a.beta = w->mlp_norm_b, a.eps = d->norm_eps;
        break;
    }
    return a;
}

/* K slices of segment seg's GEMM on the cuBLASLt path (fuse_lt_split_rule):
 * the residual + LayerNorm segments only. */
int eng_segment_splits(const stof_model *m, int seg, int64_t rows)
{
    fuse_linear_args a = eng_segment_args(m, 0, seg, rows);
    return a.gamma ? fuse_lt_split_rule(rows, a.n, a.k, m->gpu->lt.bytes) : 1;
}

/* The split rule for the residual + LayerNorm segments that run on cuBLASLt,
 * rule-based and tuned plans alike (the tuner measures plans as they run). */
static void plan_splits(const stof_model *m, layer_plan *p, int64_t rows)
{
    if (p->out.path == FUSE_PATH_CUBLASLT) p->out.splits = eng_segment_splits(m, TUNE_SEG_OUT, rows);
    if (!p->use_chain && p->ffn2.path == FUSE_PATH_CUBLASLT)
        p->ffn2.splits = eng_segment_splits(m, TUNE_SEG_FFN2, rows);
}

/* Segments up to 128 rows that gemm_sm90's small tile runs on a Hopper
 * (fuse_sm90_small_rule): its weights load while the previous kernel runs,
 * and FFN1 takes exact GELU in its epilogue. It stands in for the default
 * choice, cuBLASLt's first algorithm, in rule-based, tuned and requested
 * plans alike, so that the tuner measures plans as they run (its baseline is
 * the rules); other choices stay as given. */
static void plan_small(const stof_model *m, layer_plan *p, int64_t rows)
{
    if (!fuse_sm90_available(m->ctx)) return;
    fuse_choice c;
    memset(&c, 0, sizeof c);
    c.path = FUSE_PATH_STOF;
    c.config = fuse_config_sm90_small();
    fuse_choice *seg[TUNE_NSEG] = {&p->qkv, &p->out, &p->ffn1, &p->ffn2};
    for (int i = 0; i < TUNE_NSEG; i++) {
        bool ffn = i == TUNE_SEG_FFN1 || i == TUNE_SEG_FFN2;
        if ((ffn && p->use_chain) || seg[i]->path != FUSE_PATH_CUBLASLT || seg[i]->lt_algo != 0)
            continue;
        fuse_linear_args a = eng_segment_args(m, 0, i, rows);
        c.splits = fuse_sm90_small_rule(rows, a.n, a.k, a.gamma != NULL, m->ctx->sm_count,
                                        m->gpu->lt.bytes);
        if (c.splits > 0) *seg[i] = c;
    }
}

/* A GLU's FFN1 on a Hopper: gemm_sm90's rule-based config, whose epilogue
 * writes act(a) * b (no [T, 2 inter] round trip through memory, no GLU row
 * pass), stands in for the default choice, cuBLASLt's first algorithm, in
 * rule-based, tuned and requested plans alike, as plan_small does for
 * BERT's small batches: the tuner's baseline is this, and cuBLASLt's other
 * algorithms (GEMM, then fuse_glu) stay candidates. */
static void plan_glu(const stof_model *m, layer_plan *p, int64_t rows)
{
    if (m->desc.layer[0].mlp != MLP_GLU || !fuse_sm90_available(m->ctx)) return;
    if (p->ffn1.path != FUSE_PATH_CUBLASLT || p->ffn1.lt_algo != 0) return;
    fuse_linear_args a = eng_segment_args(m, 0, TUNE_SEG_FFN1, rows);
    fuse_config c =
        fuse_config_sm90_glu(rows, a.n, a.k, m->ctx->sm_count, m->ctx->smem_per_block_optin);
    if (c.tpl != FUSE_TPL_GEMM_SM90) return;
    memset(&p->ffn1, 0, sizeof p->ffn1);
    p->ffn1.path = FUSE_PATH_STOF;
    p->ffn1.config = c;
}

/* A RoPE layer's QKV on a Hopper from g->rope_epi_rows rows: gemm_sm90 with
 * the rotation of q and k in its epilogue (fuse_config_sm90_rope; the
 * executor then skips fuse_rope, a pass over q and k at memory bandwidth:
 * 52 us a layer at ModernBERT-base (16, 2048) on an H100) stands in for the
 * default choice, cuBLASLt's first algorithm, in rule-based, tuned and
 * requested plans alike, as plan_glu does; the tuner's gemm_sm90 candidates
 * carry it too wherever their tile holds whole heads, so it times both ways. */
static void plan_rope(const stof_model *m, layer_plan *p, int64_t rows)
{
    const layer_desc *ld = &m->desc.layer[0];
    if (ld->pos != POS_ROPE || rows < m->gpu->rope_epi_rows || !fuse_sm90_available(m->ctx)) return;
    if (p->qkv.path != FUSE_PATH_CUBLASLT || p->qkv.lt_algo != 0) return;
    fuse_linear_args a = eng_segment_args(m, 0, TUNE_SEG_QKV, rows);
    fuse_config c = fuse_config_sm90_rope(rows, a.n, a.k, ld->head_dim, ld->rope.rot_dim,
                                          m->ctx->sm_count, m->ctx->smem_per_block_optin);
    if (c.tpl != FUSE_TPL_GEMM_SM90) return;
    memset(&p->qkv, 0, sizeof p->qkv);
    p->qkv.path = FUSE_PATH_STOF;
    p->qkv.config = c;
}

/* A tuned segment; tpl is the segment's template (the linear + act segments
 * may name the Hopper GEMM instead, which runs the same operation). */
static fuse_choice choice_from_seg(const tune_seg *t, fuse_tpl tpl)
{
    if (t->path == 0) return lt_choice(t->algo);
    fuse_choice c;
    memset(&c, 0, sizeof c);
    c.path = FUSE_PATH_STOF;
    c.config.tpl =
        tpl == FUSE_TPL_GEMM_BIAS_ACT && t->tpl == FUSE_TPL_GEMM_SM90 ? FUSE_TPL_GEMM_SM90 : tpl;
    c.config.block_m = t->block_m;
    c.config.block_n = t->block_n;
    c.config.block_k = t->block_k;
    c.config.warps_m = t->warps_m;
    c.config.warps_n = t->warps_n;
    c.config.stages = t->stages;
    return c;
}

/* A tuned plan as the layers run it. Pre-norm layers run every GEMM segment
 * as a linear (+ bias, + act) and have no FFN chain. */
static layer_plan plan_from_tune(const tune_plan *t, bool bert)
{
    layer_plan p = plan_rules();
    fuse_tpl res = bert ? FUSE_TPL_GEMM_RES_LN : FUSE_TPL_GEMM_BIAS_ACT;
    p.qkv = choice_from_seg(&t->seg[TUNE_SEG_QKV], FUSE_TPL_GEMM_BIAS_ACT);
    p.out = choice_from_seg(&t->seg[TUNE_SEG_OUT], res);
    p.use_chain = bert && t->ffn_chain != 0;
    if (p.use_chain) {
        p.chain = choice_from_seg(&t->seg[TUNE_SEG_FFN1], FUSE_TPL_FFN_CHAIN);
    } else {
        p.ffn1 = choice_from_seg(&t->seg[TUNE_SEG_FFN1], FUSE_TPL_GEMM_BIAS_ACT);
        p.ffn2 = choice_from_seg(&t->seg[TUNE_SEG_FFN2], res);
    }
    p.attn[0].kernel = (stof_attn_kernel)t->attn_kernel;
    p.attn[0].warps = t->attn_warps;
    p.attn[0].block_m = t->attn_block_m;
    p.attn[1].kernel = (stof_attn_kernel)t->attn2_kernel;
    p.attn[1].warps = t->attn2_warps;
    p.attn[1].block_m = t->attn2_block_m;
    return p;
}

bool eng_plan_equal(const layer_plan *a, const layer_plan *b)
{
    return memcmp(a, b, sizeof *a) == 0; /* both built from zeroed memory */
}

static void describe_choice(const fuse_choice *c, char *out, size_t cap)
{
    if (c->path == FUSE_PATH_STOF) {
        int n = fuse_config_format(&c->config, out, cap);
        if (c->splits >= 2 && n > 0 && (size_t)n < cap)
            snprintf(out + n, cap - (size_t)n, " k/%d", c->splits);
    } else if (c->splits >= 2)
        snprintf(out, cap, "cublaslt#%d k/%d", c->lt_algo, c->splits);
    else
        snprintf(out, cap, "cublaslt#%d", c->lt_algo);
}

static void describe_plan(const layer_plan *p, int64_t T, const char *source)
{
    if (!stof_log_on(STOF_LOG_DEBUG)) return;
    char a[96], b[96], c[96], d[96];
    describe_choice(&p->qkv, a, sizeof a);
    describe_choice(&p->out, b, sizeof b);
    describe_choice(p->use_chain ? &p->chain : &p->ffn1, c, sizeof c);
    describe_choice(&p->ffn2, d, sizeof d);
    stof_log(STOF_LOG_DEBUG, "encoder: %lld rows, %s plan: qkv %s | out-proj %s | ffn %s%s%s",
             (long long)T, source, a, b, c, p->use_chain ? "" : " + ", p->use_chain ? "" : d);
}

stof_status enc_gpu_tune_key(stof_model *m, int batch, int len, int64_t tokens,
                             const stof_mask_spec *mask, tune_key *key)
{
    char *text = eng_format_mask(m->gpu, mask);
    STOF_REQUIRE(text, STOF_ERR_OOM, "out of host memory formatting a mask spec");
    model_tune_key(m, batch, len, tokens, text, key);
    free(text);
    return STOF_OK;
}

/* The tuned plan of this forward's bucket when the cache has one. A cache that
 * cannot be read is a warning (once), never an error of the forward. */
static bool plan_lookup(stof_model *m, const enc_request *r, int64_t rows, const char *text,
                        tune_plan *out)
{
    enc_gpu *g = m->gpu;
    if (!text) return false;
    tune_key key;
    model_tune_key(m, r->batch, r->len, rows, text, &key);
    for (int i = 0; i < ENC_PLANS; i++) {
        enc_plan_memo *e = &g->memo[i];
        if (e->used && tune_key_equal(&e->key, &key)) {
            if (e->found) *out = e->plan;
            return e->found;
        }
    }
    if (g->cache_off) return false;
    if (!g->cache_loaded) {
        g->cache_loaded = true;
        char path[sizeof g->cache_path];
        if (enc_gpu_tune_cache_path(g, path, sizeof path) != STOF_OK ||
            tune_cache_load(path, stof_version(), &g->cache) != STOF_OK) {
            stof_log(STOF_LOG_WARN, "tuning cache not used: %s", stof_last_error());
            stof_clear_error();
            g->cache_off = true;
            return false;
        }
    }
    enc_plan_memo *e = &g->memo[g->memo_next];
    g->memo_next = (g->memo_next + 1) % ENC_PLANS;
    e->used = true;
    e->key = key;
    e->found = g->cache && tune_cache_find(g->cache, &key, &e->plan);
    if (e->found) *out = e->plan;
    return e->found;
}

stof_status enc_gpu_tune_cache_path(const enc_gpu *g, char *buf, size_t cap)
{
    return tune_cache_path(g->cache_path[0] ? g->cache_path : NULL, buf, cap);
}

void enc_gpu_remember_plan(enc_gpu *g, const tune_key *key, const tune_plan *plan)
{
    g->gen++;
    enc_plan_memo *e = NULL;
    for (int i = 0; i < ENC_PLANS && !e; i++)
        if (g->memo[i].used && tune_key_equal(&g->memo[i].key, key)) e = &g->memo[i];
    if (!e) {
        e = &g->memo[g->memo_next];
        g->memo_next = (g->memo_next + 1) % ENC_PLANS;
    }
    e->used = true;
    e->found = true;
    e->key = *key;
    e->plan = *plan;
}

void enc_gpu_set_tune_cache(enc_gpu *g, const char *path, bool off)
{
    tune_cache_free(g->cache);
    g->cache = NULL;
    g->cache_loaded = false;
    g->cache_off = off;
    g->cache_path[0] = '\0';
    if (path && strlen(path) >= sizeof g->cache_path) {
        stof_log(STOF_LOG_WARN, "tuning cache not used: its path is %zu bytes long (at most %zu)",
                 strlen(path), sizeof g->cache_path - 1);
        g->cache_off = true;
    } else if (path) {
        size_t n = strnlen(path, sizeof g->cache_path - 1);
        memcpy(g->cache_path, path, n);
        g->cache_path[n] = '\0';
    }
    memset(g->memo, 0, sizeof g->memo);
    g->memo_next = 0;
    g->gen++;
}

/* The plan of one forward: the request's own, the tuning cache's, or the rules. */
layer_plan eng_plan_for(stof_model *m, const enc_request *r, int64_t rows, const char *text)
{
    tune_plan t;
    const char *source = "rule-based";
    layer_plan p;
    if (r->plan) {
        p = plan_from_tune(r->plan, m->gpu->bert);
        source = "requested";
    } else if (plan_lookup(m, r, rows, text, &t)) {
        p = plan_from_tune(&t, m->gpu->bert);
        source = "tuned";
    } else {
        p = plan_rules();
    }
    if (m->gpu->bert) { /* the rules of BERT's fused segments */
        plan_small(m, &p, rows);
        plan_splits(m, &p, rows);
    } else {
        plan_glu(m, &p, rows);
        plan_rope(m, &p, rows);
    }
    describe_plan(&p, rows, source);
    return p;
}

stof_status enc_gpu_lt_algos(stof_model *m, int seg, int64_t rows, int *count)
{
    enc_gpu *g = m->gpu;
    STOF_REQUIRE(g->ws && rows <= g->cap_tokens, STOF_ERR_INVALID_ARG,
                 "enc_gpu_lt_algos: no workspace for %lld rows yet", (long long)rows);
    STOF_REQUIRE(seg >= 0 && seg < TUNE_NSEG, STOF_ERR_INVALID_ARG,
                 "enc_gpu_lt_algos: segment %d", seg);
    /* The GEMM the cuBLASLt path of the segment runs (segments.c): exact GELU
     * and SiLU go to a row kernel with the bias; BERT's LayerNorm segments
     * take the residual. */
    fuse_linear_args a = eng_segment_args(m, 0, seg, rows);
    stof_act act = a.act;
    if (!fuse_lt_has_act(act)) {
        act = ACT_NONE;
        a.bias = NULL;
    }
    return fuse_lt_algo_count(m->ctx, &a, act, a.residual, eng_segment_splits(m, seg, rows), g->lt,
                              count);
}
