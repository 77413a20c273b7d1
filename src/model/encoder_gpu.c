/*
 * encoder_gpu.c — the BERT encoder forward on the GPU, padding-free.
 *
 * Weights are uploaded once, in the run dtype, into one device block (the
 * query, key and value projections fused into one [3H, H] matrix). A forward
 * packs the real tokens on the host side of the upload (ids, types and
 * positions go up as [T] arrays with cu_seqlens in one copy), compiles the
 * mask for the lengths on the GPU, and runs every operator on the T packed
 * rows: embeddings + LayerNorm, then per layer the QKV GEMM + bias, sparse
 * attention on strided views of the QKV output ([T, 3, heads, D] read as
 * three [T, heads, D] tensors, no copies), out-projection + bias + residual +
 * LayerNorm, and the FFN; finally unpack (zeros at padding) and pooling.
 *
 * Fusion scheme by rule (plan_layers): every GEMM segment runs the cuBLASLt
 * path (bias, and GELU where cuBLASLt has the activation, in its epilogue;
 * exact GELU and residual + LayerNorm as row kernels). The stof templates
 * whose CTAs own whole rows (GEMM + residual + LayerNorm, the FFN chain) read
 * every weight once per 16-32 rows: on an H200, BERT-base at 6K tokens took
 * 18 ms per forward with them against 4.3 ms for torch.compile. Which segment
 * fuses is to be decided by measurement (the tuner), not by rule.
 *
 * The workspace is sized for B * L tokens at the first forward of a (B, L)
 * and kept, so later forwards of that shape or smaller allocate nothing of
 * their own; the mask compile still allocates its tiles per forward (stream
 * ordered), which is also why the forward is not captured as a CUDA graph:
 * the mask API has no compile into fixed storage.
 */
#include "model/encoder.h"

#include "fuse/fuse.h"

#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

typedef struct gpu_layer {
    const void *qkv_w, *qkv_b, *o_w, *o_b, *ln1_g, *ln1_b;
    const void *i_w, *i_b, *f_w, *f_b, *ln2_g, *ln2_b;
} gpu_layer;

struct enc_gpu {
    stof_ctx *ctx;
    stof_dtype dtype;
    void *weights; /* one device block behind every weight */
    gpu_layer *layers;
    fuse_embed_tables emb;
    stof_mask_spec *full; /* the mask of a forward that names none */
    /* workspace for cap_tokens packed tokens and cap_batch sequences */
    void *ws;
    int64_t cap_tokens;
    int cap_batch;
    int32_t *in; /* cu_seqlens | ids | types | positions, laid out per forward */
    void *x, *qkv, *attn, *inter;
    float *pooled;
    int32_t *report;
    fuse_ws lt;
    /* host staging of the packed inputs */
    int32_t *stage;
    int64_t stage_cap;
};

/* Device pointers of one forward's packed inputs. */
typedef struct dev_inputs {
    int32_t *cu, *ids, *types, *pos; /* types NULL: all type 0 */
} dev_inputs;

/* Fusion scheme of the layers for one token count. */
typedef struct layer_plan {
    fuse_choice qkv, out, ffn1, ffn2, chain;
    bool use_chain;
} layer_plan;

static size_t align256(size_t n)
{
    return (n + 255) & ~(size_t)255;
}
static int64_t align4(int64_t n)
{
    return (n + 3) & ~(int64_t)3;
}

stof_status enc_gpu_supports(const bert_config *c)
{
    STOF_REQUIRE(c->head_dim == 32 || c->head_dim == 64 || c->head_dim == 128, STOF_ERR_UNSUPPORTED,
                 "the GPU encoder runs head dims 32, 64 and 128; this model has %d (hidden %d, %d "
                 "heads): use a CPU context",
                 c->head_dim, c->hidden_size, c->num_attention_heads);
    STOF_REQUIRE(c->hidden_size % 8 == 0 && c->hidden_size <= FUSE_MAX_ROW_WIDTH,
                 STOF_ERR_UNSUPPORTED,
                 "the GPU encoder needs hidden_size a multiple of 8 up to %d; this model has %d",
                 FUSE_MAX_ROW_WIDTH, c->hidden_size);
    STOF_REQUIRE(c->intermediate_size % 8 == 0, STOF_ERR_UNSUPPORTED,
                 "the GPU encoder needs intermediate_size a multiple of 8; this model has %d",
                 c->intermediate_size);
    return STOF_OK;
}

/* ---------------------------------------------------------------- weights */

typedef struct weight_entry {
    const float *src;
    int64_t n;
    const void **dst;
    size_t off;
} weight_entry;

typedef struct weight_list {
    weight_entry *e;
    int count;
    size_t total;
} weight_list;

static void weight_add(weight_list *l, const float *src, int64_t n, const void **dst)
{
    weight_entry *e = &l->e[l->count++];
    e->src = src;
    e->n = n;
    e->dst = dst;
    e->off = l->total;
    l->total += align256((size_t)n * 2);
}

static void list_weights(const bert_weights *w, enc_gpu *g, weight_list *l)
{
    const bert_config *c = &w->config;
    int64_t H = c->hidden_size, I = c->intermediate_size;
    weight_add(l, w->word_emb, (int64_t)c->vocab_size * H, &g->emb.word);
    weight_add(l, w->pos_emb, (int64_t)c->max_position_embeddings * H, &g->emb.position);
    weight_add(l, w->type_emb, (int64_t)c->type_vocab_size * H, &g->emb.type);
    weight_add(l, w->emb_ln_g, H, &g->emb.gamma);
    weight_add(l, w->emb_ln_b, H, &g->emb.beta);
    for (int i = 0; i < c->num_hidden_layers; i++) {
        const bert_layer_weights *s = &w->layers[i];
        gpu_layer *d = &g->layers[i];
        weight_add(l, s->qkv_w, 3 * H * H, &d->qkv_w);
        weight_add(l, s->qkv_b, 3 * H, &d->qkv_b);
        weight_add(l, s->attn_out_w, H * H, &d->o_w);
        weight_add(l, s->attn_out_b, H, &d->o_b);
        weight_add(l, s->attn_ln_g, H, &d->ln1_g);
        weight_add(l, s->attn_ln_b, H, &d->ln1_b);
        weight_add(l, s->inter_w, I * H, &d->i_w);
        weight_add(l, s->inter_b, I, &d->i_b);
        weight_add(l, s->out_w, H * I, &d->f_w);
        weight_add(l, s->out_b, H, &d->f_b);
        weight_add(l, s->out_ln_g, H, &d->ln2_g);
        weight_add(l, s->out_ln_b, H, &d->ln2_b);
    }
}

/* Converted to the run dtype on the host, then one copy. */
static stof_status upload_weights(stof_model *m, enc_gpu *g)
{
    const bert_config *c = &m->w.config;
    weight_list l = {0};
    STOF_TRY(stof_host_calloc((size_t)(5 + 12 * c->num_hidden_layers), sizeof *l.e, (void **)&l.e));
    list_weights(&m->w, g, &l);
    uint16_t *host = NULL;
    stof_status st = stof_host_alloc(l.total, (void **)&host);
    if (st == STOF_OK) st = stof_dev_alloc(g->ctx, l.total, &g->weights);
    if (st == STOF_OK) {
        for (int i = 0; i < l.count; i++) {
            uint16_t *dst = (uint16_t *)((char *)host + l.e[i].off);
            for (int64_t j = 0; j < l.e[i].n; j++)
                dst[j] = g->dtype == STOF_BF16 ? stof_f32_to_bf16(l.e[i].src[j])
                                               : stof_f32_to_f16(l.e[i].src[j]);
            *l.e[i].dst = (char *)g->weights + l.e[i].off;
        }
        cudaStream_t s = (cudaStream_t)g->ctx->stream;
        st = STOF_CUDA(cudaMemcpyAsync(g->weights, host, l.total, cudaMemcpyHostToDevice, s));
        if (st == STOF_OK) st = STOF_CUDA(cudaStreamSynchronize(s));
    }
    free(host);
    free(l.e);
    g->emb.vocab = c->vocab_size;
    g->emb.max_pos = c->max_position_embeddings;
    g->emb.type_vocab = c->type_vocab_size;
    g->emb.hidden = c->hidden_size;
    g->emb.eps = c->layer_norm_eps;
    return st;
}

stof_status enc_gpu_create(stof_model *m)
{
    STOF_TRY(enc_gpu_supports(&m->w.config));
    enc_gpu *g;
    STOF_TRY(stof_host_calloc(1, sizeof *g, (void **)&g));
    m->gpu = g; /* from here on the model's destroy cleans up */
    g->ctx = m->ctx;
    g->dtype = m->info.dtype;
    STOF_TRY(stof_host_calloc((size_t)m->w.config.num_hidden_layers, sizeof *g->layers,
                              (void **)&g->layers));
    STOF_TRY(upload_weights(m, g));
    STOF_TRY(stof_mask_spec_create(&g->full));
    STOF_TRY(stof_mask_spec_add_full(g->full));
    /* The host copy is not needed any more; the config stays. */
    bert_config cfg = m->w.config;
    stof_bert_weights_free(&m->w);
    m->w.config = cfg;
    return STOF_OK;
}

void enc_gpu_destroy(enc_gpu *g)
{
    if (!g) return;
    if (g->weights) stof_dev_free(g->ctx, g->weights);
    if (g->ws) stof_dev_free(g->ctx, g->ws);
    stof_mask_spec_destroy(g->full);
    free(g->layers);
    free(g->stage);
    free(g);
}

/* ---------------------------------------------------------------- workspace */

/* Buffers for B sequences of up to L tokens; kept when they already fit. */
static stof_status ws_reserve(stof_model *m, int B, int L)
{
    enc_gpu *g = m->gpu;
    int64_t tokens = (int64_t)B * L;
    if (g->ws && tokens <= g->cap_tokens && B <= g->cap_batch) return STOF_OK;
    if (tokens < g->cap_tokens) tokens = g->cap_tokens;
    int batch = B > g->cap_batch ? B : g->cap_batch;
    const stof_model_info *info = &m->info;
    size_t es = 2, H = (size_t)info->hidden;
    size_t o_in = 0;
    size_t o_x = o_in + align256((size_t)(batch + 1 + 3 * tokens + 16) * 4);
    size_t o_qkv = o_x + align256((size_t)tokens * H * es);
    size_t o_attn = o_qkv + align256((size_t)tokens * 3 * H * es);
    size_t o_inter = o_attn + align256((size_t)tokens * H * es);
    size_t o_pool = o_inter + align256((size_t)tokens * (size_t)info->intermediate * es);
    size_t o_rep = o_pool + align256((size_t)batch * H * 4);
    size_t o_lt = o_rep + 256;
    size_t total = o_lt + FUSE_LT_WORKSPACE_BYTES;
    if (g->ws) stof_dev_free(g->ctx, g->ws);
    g->ws = NULL;
    g->cap_tokens = 0;
    g->cap_batch = 0;
    STOF_TRY(stof_dev_alloc(g->ctx, total, &g->ws));
    char *base = (char *)g->ws;
    g->in = (int32_t *)(base + o_in);
    g->x = base + o_x;
    g->qkv = base + o_qkv;
    g->attn = base + o_attn;
    g->inter = base + o_inter;
    g->pooled = (float *)(base + o_pool);
    g->report = (int32_t *)(base + o_rep);
    g->lt.ptr = base + o_lt;
    g->lt.bytes = FUSE_LT_WORKSPACE_BYTES;
    g->cap_tokens = tokens;
    g->cap_batch = batch;
    stof_log(STOF_LOG_DEBUG, "encoder: workspace for %lld tokens, %d sequences: %.1f MiB",
             (long long)tokens, batch, (double)total / (1 << 20));
    return STOF_OK;
}

/* ---------------------------------------------------------------- inputs */

/*
 * cu_seqlens, and the packed ids, types and positions of host tensors, go up
 * in one copy; ids or types in device memory are packed there. Layout of
 * g->in for this forward: cu [B + 1] | ids [T] | types [T] | positions [T],
 * each part starting on 16 bytes.
 */
static stof_status upload_inputs(stof_model *m, const enc_request *r, dev_inputs *in)
{
    enc_gpu *g = m->gpu;
    int B = r->batch;
    int64_t T = r->tokens;
    int64_t o_ids = align4(B + 1), o_types = o_ids + align4(T), o_pos = o_types + align4(T);
    int64_t end = o_pos + T;
    if (end > g->stage_cap) {
        free(g->stage);
        g->stage = NULL;
        g->stage_cap = 0;
        STOF_TRY(stof_host_alloc((size_t)end * sizeof(int32_t), (void **)&g->stage));
        g->stage_cap = end;
    }
    int32_t *st = g->stage;
    memcpy(st, r->cu_seqlens, (size_t)(B + 1) * sizeof(int32_t));
    bool host_ids = r->ids->memory == STOF_MEM_HOST;
    bool host_types = r->types && r->types->memory == STOF_MEM_HOST;
    for (int b = 0; b < B; b++) {
        int64_t t0 = r->cu_seqlens[b];
        for (int i = 0; i < r->lengths[b]; i++) {
            if (host_ids) st[o_ids + t0 + i] = enc_i32_at(r->ids, b, i);
            if (host_types) st[o_types + t0 + i] = enc_i32_at(r->types, b, i);
            st[o_pos + t0 + i] = i;
        }
    }
    in->cu = g->in;
    in->ids = g->in + o_ids;
    in->types = r->types ? g->in + o_types : NULL;
    in->pos = g->in + o_pos;
    /* A pageable source is staged before cudaMemcpyAsync returns: the stage can be reused. */
    STOF_CUDA_TRY(cudaMemcpyAsync(g->in, st, (size_t)end * sizeof(int32_t), cudaMemcpyHostToDevice,
                                  (cudaStream_t)m->ctx->stream));
    if (!host_ids)
        STOF_TRY(fuse_pack(m->ctx, STOF_I32, r->ids->data, in->cu, B, r->len, 1, in->ids, T));
    if (r->types && !host_types)
        STOF_TRY(fuse_pack(m->ctx, STOF_I32, r->types->data, in->cu, B, r->len, 1, in->types, T));
    return STOF_OK;
}

/* Packed token t -> (sequence, position). */
static void token_position(const enc_request *r, int64_t t, int *b, int *i)
{
    int s = 0;
    while (s + 1 < r->batch && r->cu_seqlens[s + 1] <= t)
        s++;
    *b = s;
    *i = (int)(t - r->cu_seqlens[s]);
}

static stof_status read_token(stof_ctx *ctx, const int32_t *src, int32_t *out)
{
    STOF_CUDA_TRY(
        cudaMemcpyAsync(out, src, sizeof *out, cudaMemcpyDeviceToHost, (cudaStream_t)ctx->stream));
    STOF_CUDA_TRY(cudaStreamSynchronize((cudaStream_t)ctx->stream));
    return STOF_OK;
}

/* Ids and types that came in device memory, checked there (one small read back). */
static stof_status check_device_tokens(stof_model *m, const enc_request *r, const dev_inputs *in)
{
    const int32_t *ids = r->ids->memory == STOF_MEM_DEVICE ? in->ids : NULL;
    const int32_t *types = r->types && r->types->memory == STOF_MEM_DEVICE ? in->types : NULL;
    if (!ids && !types) return STOF_OK;
    stof_ctx *ctx = m->ctx;
    const stof_model_info *info = &m->info;
    STOF_TRY(enc_check_tokens(ctx, ids, types, r->tokens, info->vocab, info->type_vocab,
                              m->gpu->report));
    int32_t rep[2];
    STOF_CUDA_TRY(cudaMemcpyAsync(rep, m->gpu->report, sizeof rep, cudaMemcpyDeviceToHost,
                                  (cudaStream_t)ctx->stream));
    STOF_CUDA_TRY(cudaStreamSynchronize((cudaStream_t)ctx->stream));
    int b, i;
    int32_t v;
    if (rep[0] < r->tokens) {
        token_position(r, rep[0], &b, &i);
        STOF_TRY(read_token(ctx, in->ids + rep[0], &v));
        return stof_error(STOF_ERR_INVALID_ARG,
                          "ids[%d, %d] = %d is outside the vocabulary [0, %d)", b, i, (int)v,
                          info->vocab);
    }
    if (rep[1] < r->tokens) {
        token_position(r, rep[1], &b, &i);
        STOF_TRY(read_token(ctx, in->types + rep[1], &v));
        return stof_error(STOF_ERR_INVALID_ARG,
                          "token_types[%d, %d] = %d is outside [0, type_vocab_size = %d)", b, i,
                          (int)v, info->type_vocab);
    }
    return STOF_OK;
}

/* The forward's mask (every pair when it names none) for these lengths. */
static stof_status compile_mask(stof_model *m, const enc_request *r, stof_mask **out)
{
    int64_t n = r->batch;
    stof_tensor lengths = stof_tensor_make((void *)r->lengths, STOF_I32, STOF_MEM_HOST, 1, &n);
    stof_mask_params p = stof_mask_default_params();
    p.batch = r->batch;
    p.heads = m->info.heads;
    p.len_q = r->len;
    p.len_k = r->len;
    p.lengths_q = &lengths;
    return stof_mask_compile(m->ctx, r->mask ? r->mask : m->gpu->full, &p, out);
}

/* ---------------------------------------------------------------- fusion rules */

static fuse_choice lt_choice(void)
{
    fuse_choice c;
    memset(&c, 0, sizeof c);
    c.path = FUSE_PATH_CUBLASLT;
    return c;
}

static layer_plan plan_layers(void)
{
    layer_plan p;
    memset(&p, 0, sizeof p);
    p.qkv = p.out = p.ffn1 = p.ffn2 = lt_choice();
    p.use_chain = false;
    return p;
}

static void describe_plan(const layer_plan *p, int64_t T)
{
    char a[96], b[96], c[96], d[96];
    const fuse_choice *ch[4] = {&p->qkv, &p->out, p->use_chain ? &p->chain : &p->ffn1, &p->ffn2};
    char *out[4] = {a, b, c, d};
    for (int i = 0; i < 4; i++) {
        if (ch[i]->path == FUSE_PATH_STOF)
            fuse_config_format(&ch[i]->config, out[i], 96);
        else
            snprintf(out[i], 96, "cublaslt");
    }
    stof_log(STOF_LOG_DEBUG, "encoder: T=%lld qkv %s | out-proj %s | ffn %s%s%s", (long long)T, a,
             b, c, p->use_chain ? "" : " + ", p->use_chain ? "" : d);
}

/* ---------------------------------------------------------------- layers */

static stof_status attention(stof_model *m, const enc_request *r, const dev_inputs *in,
                             stof_mask *mask)
{
    enc_gpu *g = m->gpu;
    int64_t T = r->tokens, H = m->info.hidden, heads = m->info.heads, D = m->info.head_dim;
    int64_t shape[3] = {T, heads, D};
    stof_tensor q = stof_tensor_make(g->qkv, g->dtype, STOF_MEM_DEVICE, 3, shape);
    q.stride[0] = 3 * H; /* rows of the fused QKV output: q | k | v */
    stof_tensor k = q, v = q;
    k.data = (char *)g->qkv + H * 2;
    v.data = (char *)g->qkv + 2 * H * 2;
    stof_tensor out = stof_tensor_make(g->attn, g->dtype, STOF_MEM_DEVICE, 3, shape);
    int64_t ncu = r->batch + 1;
    stof_tensor cu = stof_tensor_make(in->cu, STOF_I32, STOF_MEM_DEVICE, 1, &ncu);
    stof_attn_params ap = stof_attn_default_params();
    return stof_attention(m->ctx, &ap, &q, &k, &v, mask, &cu, &cu, &out);
}

static stof_status ffn(stof_model *m, const gpu_layer *w, const layer_plan *p, int64_t T)
{
    enc_gpu *g = m->gpu;
    const bert_config *c = &m->w.config;
    if (p->use_chain) {
        fuse_ffn_args f;
        memset(&f, 0, sizeof f);
        f.dtype = g->dtype;
        f.m = T;
        f.hidden = c->hidden_size;
        f.inter = c->intermediate_size;
        f.x = g->x;
        f.w1 = w->i_w;
        f.b1 = w->i_b;
        f.act = (fuse_act)c->hidden_act;
        f.w2 = w->f_w;
        f.b2 = w->f_b;
        f.residual = g->x;
        f.gamma = w->ln2_g;
        f.beta = w->ln2_b;
        f.eps = c->layer_norm_eps;
        f.y = g->x;
        f.inter_buf = g->inter;
        return fuse_ffn(m->ctx, &p->chain, &f, g->lt);
    }
    fuse_linear_args up;
    memset(&up, 0, sizeof up);
    up.dtype = g->dtype;
    up.m = T;
    up.n = c->intermediate_size;
    up.k = c->hidden_size;
    up.x = g->x;
    up.w = w->i_w;
    up.bias = w->i_b;
    up.act = (fuse_act)c->hidden_act;
    up.y = g->inter;
    STOF_TRY(fuse_linear_act(m->ctx, &p->ffn1, &up, g->lt));
    fuse_linear_args down;
    memset(&down, 0, sizeof down);
    down.dtype = g->dtype;
    down.m = T;
    down.n = c->hidden_size;
    down.k = c->intermediate_size;
    down.x = g->inter;
    down.w = w->f_w;
    down.bias = w->f_b;
    down.residual = g->x;
    down.gamma = w->ln2_g;
    down.beta = w->ln2_b;
    down.eps = c->layer_norm_eps;
    down.y = g->x;
    return fuse_linear_res_ln(m->ctx, &p->ffn2, &down, g->lt);
}

static stof_status layer(stof_model *m, const gpu_layer *w, const layer_plan *p,
                         const enc_request *r, const dev_inputs *in, stof_mask *mask)
{
    enc_gpu *g = m->gpu;
    const bert_config *c = &m->w.config;
    int64_t T = r->tokens;
    int H = c->hidden_size;
    fuse_linear_args a;
    memset(&a, 0, sizeof a);
    a.dtype = g->dtype;
    a.m = T;
    a.n = 3 * H;
    a.k = H;
    a.x = g->x;
    a.w = w->qkv_w;
    a.bias = w->qkv_b;
    a.act = FUSE_ACT_NONE;
    a.y = g->qkv;
    STOF_TRY(fuse_linear_act(m->ctx, &p->qkv, &a, g->lt));
    STOF_TRY(attention(m, r, in, mask));
    memset(&a, 0, sizeof a);
    a.dtype = g->dtype;
    a.m = T;
    a.n = H;
    a.k = H;
    a.x = g->attn;
    a.w = w->o_w;
    a.bias = w->o_b;
    a.residual = g->x;
    a.gamma = w->ln1_g;
    a.beta = w->ln1_b;
    a.eps = c->layer_norm_eps;
    a.y = g->x;
    STOF_TRY(fuse_linear_res_ln(m->ctx, &p->out, &a, g->lt));
    return ffn(m, w, p, T);
}

static stof_status run_layers(stof_model *m, const enc_request *r, const dev_inputs *in,
                              stof_mask *mask)
{
    enc_gpu *g = m->gpu;
    const bert_config *c = &m->w.config;
    STOF_TRY(
        fuse_embeddings(m->ctx, g->dtype, &g->emb, in->ids, in->pos, in->types, r->tokens, g->x));
    layer_plan p = plan_layers();
    describe_plan(&p, r->tokens);
    for (int l = 0; l < c->num_hidden_layers; l++)
        STOF_TRY(layer(m, &g->layers[l], &p, r, in, mask));
    return STOF_OK;
}

/* ---------------------------------------------------------------- outputs */

static stof_status copy_pooled(stof_model *m, const enc_request *r)
{
    size_t bytes = (size_t)r->batch * (size_t)m->info.hidden * sizeof(float);
    cudaStream_t s = (cudaStream_t)m->ctx->stream;
    if (r->pooled->memory == STOF_MEM_DEVICE)
        return STOF_CUDA(
            cudaMemcpyAsync(r->pooled->data, m->gpu->pooled, bytes, cudaMemcpyDeviceToDevice, s));
    /* Host outputs are complete when the call returns. */
    STOF_CUDA_TRY(
        cudaMemcpyAsync(r->pooled->data, m->gpu->pooled, bytes, cudaMemcpyDeviceToHost, s));
    return STOF_CUDA(cudaStreamSynchronize(s));
}

static stof_status write_outputs(stof_model *m, const enc_request *r, const dev_inputs *in)
{
    enc_gpu *g = m->gpu;
    stof_ctx *ctx = m->ctx;
    int B = r->batch, L = r->len, H = m->info.hidden;
    if (r->hidden) {
        if (r->hidden->dtype == g->dtype) {
            STOF_TRY(fuse_unpack(ctx, g->dtype, g->x, in->cu, B, L, H, r->hidden->data, r->tokens));
        } else { /* f32: unpack into the free QKV buffer (B * L * 3H elements), then widen */
            STOF_TRY(fuse_unpack(ctx, g->dtype, g->x, in->cu, B, L, H, g->qkv, r->tokens));
            STOF_TRY(enc_half_to_f32(ctx, g->dtype, g->qkv, (int64_t)B * L * H,
                                     (float *)r->hidden->data));
        }
    }
    if (!r->pooled) return STOF_OK;
    if (m->info.pooling == STOF_POOL_CLS)
        STOF_TRY(enc_cls_pool(ctx, g->dtype, g->x, in->cu, B, H, r->tokens, g->pooled));
    else
        STOF_TRY(fuse_mean_pool(ctx, g->dtype, g->x, in->cu, B, H, r->tokens, STOF_F32, g->pooled));
    if (m->info.normalize) STOF_TRY(enc_l2_normalize(ctx, g->pooled, B, H));
    return copy_pooled(m, r);
}

/* Every sequence empty: zeros out, nothing to compute. */
static stof_status write_empty(stof_model *m, const enc_request *r)
{
    cudaStream_t s = (cudaStream_t)m->ctx->stream;
    if (r->hidden)
        STOF_CUDA_TRY(cudaMemsetAsync(
            r->hidden->data, 0,
            (size_t)stof_tensor_numel(r->hidden) * stof_dtype_size(r->hidden->dtype), s));
    if (!r->pooled) return STOF_OK;
    size_t bytes = (size_t)r->batch * (size_t)m->info.hidden * sizeof(float);
    if (r->pooled->memory == STOF_MEM_DEVICE)
        return STOF_CUDA(cudaMemsetAsync(r->pooled->data, 0, bytes, s));
    memset(r->pooled->data, 0, bytes);
    return STOF_OK;
}

/* ---------------------------------------------------------------- forward */

stof_status enc_gpu_forward(stof_model *m, const enc_request *r)
{
    STOF_REQUIRE(r->batch <= 65535, STOF_ERR_UNSUPPORTED,
                 "batch %d: the GPU encoder takes at most 65535 sequences", r->batch);
    if (r->tokens == 0) return write_empty(m, r);
    STOF_TRY(ws_reserve(m, r->batch, r->len));
    dev_inputs in;
    STOF_TRY(upload_inputs(m, r, &in));
    STOF_TRY(check_device_tokens(m, r, &in));
    stof_mask *mask = NULL;
    STOF_TRY(compile_mask(m, r, &mask));
    stof_status st = run_layers(m, r, &in, mask);
    if (st == STOF_OK) st = write_outputs(m, r, &in);
    stof_mask_destroy(mask);
    return st;
}
