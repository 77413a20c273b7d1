/*
 * encoder_gpu.c — the BERT encoder forward on the GPU, padding-free.
 *
 * Weights are uploaded once, in the run dtype, into one device block (the
 * query, key and value projections fused into one [3H, H] matrix). A forward
 * packs the real tokens on the host side of the upload (ids, types and
 * positions go up as [T] arrays with cu_seqlens in one copy) or, when ids and
 * types are in device memory, on the device from the input scan's lengths,
 * queued before the host waits for the scan; it compiles the
 * mask for the lengths on the GPU, and runs every operator on the T packed
 * rows: embeddings + LayerNorm, then per layer the QKV GEMM + bias, sparse
 * attention on strided views of the QKV output ([T, 3, heads, D] read as
 * three [T, heads, D] tensors, no copies), out-projection + bias + residual +
 * LayerNorm, and the FFN; finally unpack (zeros at padding) and pooling.
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
 *
 * The workspace is sized for B * L tokens at the first forward of a (B, L)
 * and kept, so later forwards of that shape or smaller allocate nothing of
 * their own.
 *
 * CUDA graphs. A forward computes on Tb >= T packed rows, Tb the token
 * bucket of T (tune_token_bucket, at most B * L): rows past T hold token 0 at
 * position 0, are computed like any other and never read back (attention,
 * unpack and pooling follow cu_seqlens). What a graph captures therefore
 * depends only on (B, L, Tb, the mask's text, whether token types are given,
 * the layer plan): the first forward of such a bucket runs kernel by kernel,
 * the second captures the mask build (a reusable mask reading the lengths
 * from the device inputs; a branch of the graph beside the embeddings and
 * the first QKV GEMM, joining at the first attention: at BERT-base (1, 128)
 * the build took 7.8 us ahead of the embeddings when it was two kernels;
 * it is one cooperative launch now) and every layer, and
 * later ones replay it. Inputs go
 * up before the launch and outputs come out after it, so nothing the caller
 * owns is baked into a graph. Masks whose text does not describe them (dense
 * tensors, per-head layouts), a stream that is already capturing, and
 * forwards that ask for it run kernel by kernel.
 *
 * Small batches. A forward whose ids (and types) are in device memory waits
 * for the input scan's report before it can name the bucket of its token
 * count; at B * L <= ENC_FIXED_ROWS it computes B * L rows instead, so its
 * graph does not depend on the lengths, and once that graph is captured it is
 * launched right behind the packing kernels, before the host waits for the
 * report (launch_ahead): the GPU goes from the scan straight into the layers
 * while the host checks the report. The GEMM segments on gemm_sm90 read T on
 * the device and skip their row tiles past it, their LayerNorms those rows
 * (fuse_linear_args.live_rows), so that B * L rows cost what the bucket of T
 * costs; rows past T are left as they were, never read back. A batch of at
 * most 1024 elements is scanned and packed by one kernel of one CTA.
 *
 * Measured on an H200 and left out: the same at B * L <= 512 with cuBLASLt
 * GEMMs saved 7-14 us a call with one fixed input at BERT-base (1, 128), but
 * B * L rows instead of the bucket of T cost more than that on batches that
 * are not full (compare_encoder's (1, 128) row: 0.548 ms against 0.493 ms).
 * And choosing the bucket on the device, one graph holding every bucket's
 * layers as the bodies of a switch node that a kernel behind the scan sets:
 * the switch node alone added 8-9 us a launch (100 kernels of a body: 0.148
 * ms against 0.139 ms as a plain graph), most of what skipping the wait saves.
 */
#include "model/encoder.h"

#include "attn/attn.h"
#include "fuse/fuse.h"
#include "mask/mask.h"
#include "tune/tune.h"

#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

/* Fusion scheme of the layers for one token count. */
typedef struct layer_plan {
    fuse_choice qkv, out, ffn1, ffn2, chain;
    bool use_chain;
    stof_attn_choice attn; /* kernel AUTO: the selector */
} layer_plan;

#define ENC_GRAPHS 8 /* captured buckets kept per model (least recently used goes) */
#define ENC_PLANS 16 /* tuning-cache lookups remembered per model */

/* One captured forward bucket. */
typedef struct enc_graph {
    bool used, failed; /* failed: capture did not work; this bucket runs kernel by kernel */
    int batch, len, has_types, runs;
    int64_t rows;
    char *mask_text;
    layer_plan plan;
    stof_mask *mask; /* reusable, reading the lengths of the device inputs */
    cudaGraphExec_t exec;
    uint64_t last_use;
} enc_graph;

/* The graph the last forward launched ahead of the scan's read back found for
 * a batch of this shape with the model's full mask: the next one of that
 * shape skips the mask formatting, the plan lookup and the graph search while
 * the scan runs. Valid while gen equals enc_gpu.gen. */
typedef struct enc_ahead_memo {
    bool valid, has_types;
    int batch, len;
    uint64_t gen;
    enc_graph *graph;
} enc_ahead_memo;

/* A remembered tuning-cache lookup. */
typedef struct enc_plan_memo {
    bool used, found;
    tune_key key;
    tune_plan plan;
} enc_plan_memo;

typedef struct gpu_layer {
    const void *qkv_w, *qkv_b, *o_w, *o_b, *ln1_g, *ln1_b;
    const void *i_w, *i_b, *f_w, *f_b, *ln2_g, *ln2_b;
} gpu_layer;

struct engine_gpu {
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
    int32_t *report; /* the input scan: [cap_batch][ENC_SCAN_WORDS], then [cap_batch] lengths */
    fuse_ws lt;
    /* pinned host staging of the packed inputs; stage_event marks the end of
     * the last copy out of it */
    int32_t *stage;
    int64_t stage_cap;
    void *stage_event;
    bool stage_busy;
    void *report_event;   /* the input scan's report is on the host */
    int32_t *host_report; /* pinned [cap_batch][ENC_SCAN_WORDS] */
    int32_t *host_report_dev; /* host_report as the device writes it (mapped), or NULL: copied */
    enc_graph graphs[ENC_GRAPHS];
    uint64_t clock;
    int64_t ahead; /* forwards launched ahead of the scan's read back */
    enc_ahead_memo ahead_memo;
    uint64_t gen;         /* bumped whenever a graph slot or a remembered plan changes */
    void *capture_stream; /* cudaStream_t graphs are captured on (made on first use) */
    void *mask_stream;    /* and the one a graph's mask rebuild branches off to */
    void *fork_event, *mask_event; /* the branch's start and end in a capture */
    /* tuning cache: loaded at the first forward that looks for a plan */
    char cache_path[1024];
    bool cache_off, cache_loaded;
    tune_cache *cache;
    enc_plan_memo memo[ENC_PLANS];
    int memo_next;
};

/* Device pointers of one forward's packed inputs. */
typedef struct dev_inputs {
    int32_t *cu, *lens, *ids, *types, *pos; /* types NULL: all type 0 */
    int64_t rows;                            /* Tb: rows computed (>= the T real tokens) */
    const int32_t *live; /* fixed rows (B * L): cu + B, T on the device, for the GEMM
                            segments to skip row tiles past it; NULL otherwise */
} dev_inputs;

static size_t align256(size_t n)
{
    return (n + 255) & ~(size_t)255;
}
static int64_t align4(int64_t n)
{
    return (n + 3) & ~(int64_t)3;
}

/* BERT's sizes as the layers below read them, from the model description. */
typedef struct bert_view {
    int hidden_size, intermediate_size, num_hidden_layers, num_attention_heads, head_dim;
    int vocab_size, max_position_embeddings, type_vocab_size;
    float layer_norm_eps;
    stof_act hidden_act;
} bert_view;

static bert_view view_of(const stof_model *m)
{
    const model_desc *d = &m->desc;
    const layer_desc *l = &d->layer[0];
    bert_view v = {d->hidden,        l->intermediate, d->layers,     l->heads,
                   l->head_dim,      d->vocab,        d->max_positions, d->type_vocab,
                   d->norm_eps,      l->act};
    return v;
}

stof_status enc_gpu_supports(const model_desc *d)
{
    STOF_REQUIRE(strcmp(d->family, "bert") == 0, STOF_ERR_UNSUPPORTED,
                 "the GPU engine runs the bert family for now; %s (family %s) runs on a CPU "
                 "context",
                 d->model_type, d->family);
    const layer_desc *l = &d->layer[0];
    STOF_REQUIRE(l->head_dim == 32 || l->head_dim == 64 || l->head_dim == 128, STOF_ERR_UNSUPPORTED,
                 "the GPU encoder runs head dims 32, 64 and 128; this model has %d (hidden %d, %d "
                 "heads): use a CPU context",
                 l->head_dim, d->hidden, l->heads);
    STOF_REQUIRE(d->hidden % 8 == 0 && d->hidden <= FUSE_MAX_ROW_WIDTH,
                 STOF_ERR_UNSUPPORTED,
                 "the GPU encoder needs hidden_size a multiple of 8 up to %d; this model has %d",
                 FUSE_MAX_ROW_WIDTH, d->hidden);
    STOF_REQUIRE(l->intermediate % 8 == 0, STOF_ERR_UNSUPPORTED,
                 "the GPU encoder needs intermediate_size a multiple of 8; this model has %d",
                 l->intermediate);
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

static void list_weights(const stof_model *m, enc_gpu *g, weight_list *l)
{
    const model_weights *w = &m->w;
    const bert_view cv = view_of(m), *c = &cv;
    int64_t H = c->hidden_size, I = c->intermediate_size;
    weight_add(l, w->tok_emb, (int64_t)c->vocab_size * H, &g->emb.word);
    weight_add(l, w->pos_emb, (int64_t)c->max_position_embeddings * H, &g->emb.position);
    weight_add(l, w->type_emb, (int64_t)c->type_vocab_size * H, &g->emb.type);
    weight_add(l, w->emb_norm, H, &g->emb.gamma);
    weight_add(l, w->emb_norm_b, H, &g->emb.beta);
    for (int i = 0; i < c->num_hidden_layers; i++) {
        const layer_weights *s = &w->layer[i];
        gpu_layer *d = &g->layers[i];
        weight_add(l, s->qkv, 3 * H * H, &d->qkv_w);
        weight_add(l, s->qkv_b, 3 * H, &d->qkv_b);
        weight_add(l, s->o, H * H, &d->o_w);
        weight_add(l, s->o_b, H, &d->o_b);
        weight_add(l, s->attn_norm, H, &d->ln1_g);
        weight_add(l, s->attn_norm_b, H, &d->ln1_b);
        weight_add(l, s->mlp_in, I * H, &d->i_w);
        weight_add(l, s->mlp_in_b, I, &d->i_b);
        weight_add(l, s->down, H * I, &d->f_w);
        weight_add(l, s->down_b, H, &d->f_b);
        weight_add(l, s->mlp_norm, H, &d->ln2_g);
        weight_add(l, s->mlp_norm_b, H, &d->ln2_b);
    }
}

/* Converted to the run dtype on the host, then one copy. */
static stof_status upload_weights(stof_model *m, enc_gpu *g)
{
    const bert_view cv = view_of(m), *c = &cv;
    weight_list l = {0};
    STOF_TRY(stof_host_calloc((size_t)(5 + 12 * c->num_hidden_layers), sizeof *l.e, (void **)&l.e));
    list_weights(m, g, &l);
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
    STOF_TRY(enc_gpu_supports(&m->desc));
    enc_gpu *g;
    STOF_TRY(stof_host_calloc(1, sizeof *g, (void **)&g));
    m->gpu = g; /* from here on the model's destroy cleans up */
    g->ctx = m->ctx;
    g->dtype = m->info.dtype;
    STOF_TRY(stof_host_calloc((size_t)m->desc.layers, sizeof *g->layers,
                              (void **)&g->layers));
    STOF_TRY(upload_weights(m, g));
    STOF_TRY(stof_mask_spec_create(&g->full));
    STOF_TRY(stof_mask_spec_add_full(g->full));
    /* The host copy is not needed any more; the description stays. */
    model_weights_free_host(&m->w);
    return STOF_OK;
}

static void graph_release(enc_gpu *g, enc_graph *e)
{
    g->gen++;
    if (e->exec) cudaGraphExecDestroy(e->exec);
    stof_mask_destroy(e->mask);
    free(e->mask_text);
    memset(e, 0, sizeof *e);
}

/* Every captured bucket goes (their pointers into the workspace are stale). */
static void graphs_drop(enc_gpu *g)
{
    for (int i = 0; i < ENC_GRAPHS; i++)
        if (g->graphs[i].used) graph_release(g, &g->graphs[i]);
}

void enc_gpu_destroy(enc_gpu *g)
{
    if (!g) return;
    graphs_drop(g);
    if (g->capture_stream) cudaStreamDestroy((cudaStream_t)g->capture_stream);
    if (g->mask_stream) cudaStreamDestroy((cudaStream_t)g->mask_stream);
    if (g->fork_event) cudaEventDestroy((cudaEvent_t)g->fork_event);
    if (g->mask_event) cudaEventDestroy((cudaEvent_t)g->mask_event);
    tune_cache_free(g->cache);
    if (g->weights) stof_dev_free(g->ctx, g->weights);
    if (g->ws) stof_dev_free(g->ctx, g->ws);
    stof_mask_spec_destroy(g->full);
    free(g->layers);
    if (g->stage_event) cudaEventDestroy((cudaEvent_t)g->stage_event);
    if (g->report_event) cudaEventDestroy((cudaEvent_t)g->report_event);
    if (g->stage) cudaFreeHost(g->stage);
    if (g->host_report) cudaFreeHost(g->host_report);
    free(g);
}

/* ---------------------------------------------------------------- workspace */

/* Buffers for B sequences of up to L tokens; kept when they already fit. */
static stof_status ws_reserve(stof_model *m, int B, int L)
{
    enc_gpu *g = m->gpu;
    int64_t tokens = (int64_t)B * L;
    if (g->ws && tokens <= g->cap_tokens && B <= g->cap_batch) return STOF_OK;
    graphs_drop(g);
    if (tokens < g->cap_tokens) tokens = g->cap_tokens;
    int batch = B > g->cap_batch ? B : g->cap_batch;
    const stof_model_info *info = &m->info;
    size_t es = 2, H = (size_t)info->hidden;
    size_t o_in = 0;
    size_t o_x = o_in + align256((size_t)(2 * batch + 1 + 3 * tokens + 16) * 4);
    size_t o_qkv = o_x + align256((size_t)tokens * H * es);
    size_t o_attn = o_qkv + align256((size_t)tokens * 3 * H * es);
    size_t o_inter = o_attn + align256((size_t)tokens * H * es);
    size_t o_pool = o_inter + align256((size_t)tokens * (size_t)info->intermediate * es);
    size_t o_rep = o_pool + align256((size_t)batch * H * 4);
    size_t o_lt = o_rep + align256((size_t)batch * (ENC_SCAN_WORDS + 1) * 4);
    size_t total = o_lt + FUSE_LT_WORKSPACE_BYTES;
    if (g->ws) stof_dev_free(g->ctx, g->ws);
    g->ws = NULL;
    g->cap_tokens = 0;
    g->cap_batch = 0;
    if (g->host_report) cudaFreeHost(g->host_report);
    g->host_report = NULL;
    g->host_report_dev = NULL;
    /* Mapped, so that the scan writes its report straight to the host (no copy
     * to queue and wait for); plain pinned memory and a copy where it cannot be. */
    size_t rep_bytes = (size_t)batch * ENC_SCAN_WORDS * sizeof(int32_t);
    bool mapped =
        cudaHostAlloc((void **)&g->host_report, rep_bytes, cudaHostAllocMapped) == cudaSuccess &&
        cudaHostGetDevicePointer((void **)&g->host_report_dev, g->host_report, 0) == cudaSuccess;
    if (!mapped) {
        (void)cudaGetLastError();
        if (g->host_report) cudaFreeHost(g->host_report);
        g->host_report = NULL;
        g->host_report_dev = NULL;
        STOF_CUDA_TRY(cudaMallocHost((void **)&g->host_report, rep_bytes));
    }
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
    /* Rows past a forward's tokens are computed but never read: start them finite. */
    STOF_CUDA_TRY(cudaMemsetAsync(g->ws, 0, o_lt, (cudaStream_t)m->ctx->stream));
    stof_log(STOF_LOG_DEBUG, "encoder: workspace for %lld tokens, %d sequences: %.1f MiB",
             (long long)tokens, batch, (double)total / (1 << 20));
    return STOF_OK;
}

/* ---------------------------------------------------------------- inputs */

/* The pinned stage, at least n words, free of pending copies. */
static stof_status stage_reserve(enc_gpu *g, int64_t n)
{
    if (g->stage_busy) {
        STOF_CUDA_TRY(cudaEventSynchronize((cudaEvent_t)g->stage_event));
        g->stage_busy = false;
    }
    if (n <= g->stage_cap) return STOF_OK;
    if (g->stage) cudaFreeHost(g->stage);
    g->stage = NULL;
    g->stage_cap = 0;
    if (n < 4096) n = 4096;
    STOF_CUDA_TRY(cudaMallocHost((void **)&g->stage, (size_t)n * sizeof(int32_t)));
    g->stage_cap = n;
    return STOF_OK;
}

/* *event, created (without timing) on first use. */
static stof_status event_once(void **event)
{
    if (*event) return STOF_OK;
    cudaEvent_t e = NULL;
    STOF_CUDA_TRY(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    *event = e;
    return STOF_OK;
}

/* dst <- the stage's first n words, asynchronously; the stage is busy until then. */
static stof_status stage_upload(stof_model *m, void *dst, int64_t n)
{
    enc_gpu *g = m->gpu;
    cudaStream_t s = (cudaStream_t)m->ctx->stream;
    STOF_TRY(event_once(&g->stage_event));
    STOF_CUDA_TRY(
        cudaMemcpyAsync(dst, g->stage, (size_t)n * sizeof(int32_t), cudaMemcpyHostToDevice, s));
    STOF_CUDA_TRY(cudaEventRecord((cudaEvent_t)g->stage_event, s));
    g->stage_busy = true;
    return STOF_OK;
}

/* The parts of g->in for a batch of B sequences of L tokens: cu [B + 1] |
 * lens [B] | ids | types | positions, the last three B * L rows apart (a
 * forward uses the first Tb of each), every part on 16 bytes; rows is 0. */
static dev_inputs input_views(const enc_gpu *g, int B, int L)
{
    int64_t n = align4((int64_t)B * L);
    dev_inputs v;
    memset(&v, 0, sizeof v);
    v.cu = g->in;
    v.lens = v.cu + align4(B + 1);
    v.ids = v.lens + align4(B);
    v.types = v.ids + n;
    v.pos = v.types + n;
    return v;
}

/*
 * cu_seqlens, the lengths, and the packed ids, types and positions of host
 * tensors go up in one asynchronous copy from pinned memory; ids or types in
 * device memory are packed there (I64 narrowed to I32; their values were
 * checked by the input scan), or were packed with everything else by the scan
 * (r->packed). Rows past T hold token 0, type 0 at position 0.
 */
static stof_status upload_inputs(stof_model *m, const enc_request *r, int64_t rows, dev_inputs *in)
{
    enc_gpu *g = m->gpu;
    int B = r->batch;
    int64_t T = r->tokens;
    *in = input_views(g, B, r->len);
    in->rows = rows;
    /* word offsets in the stage, which mirrors g->in (types staged as zeros without types) */
    int64_t o_lens = in->lens - g->in, o_ids = in->ids - g->in, o_types = in->types - g->in,
            o_pos = in->pos - g->in;
    if (!r->types) in->types = NULL;
    if (r->packed) return STOF_OK;
    int64_t end = o_pos + rows;
    STOF_TRY(stage_reserve(g, end));
    int32_t *st = g->stage;
    memcpy(st, r->cu_seqlens, (size_t)(B + 1) * sizeof(int32_t));
    memcpy(st + o_lens, r->lengths, (size_t)B * sizeof(int32_t));
    bool host_ids = r->ids->memory == STOF_MEM_HOST;
    bool host_types = r->types && r->types->memory == STOF_MEM_HOST;
    for (int b = 0; b < B; b++) {
        int64_t t0 = r->cu_seqlens[b];
        for (int i = 0; i < r->lengths[b]; i++) {
            if (host_ids) st[o_ids + t0 + i] = (int32_t)enc_token_at(r->ids, b, i);
            if (host_types) st[o_types + t0 + i] = (int32_t)enc_token_at(r->types, b, i);
            st[o_pos + t0 + i] = i;
        }
    }
    for (int64_t t = T; t < rows; t++)
        st[o_ids + t] = st[o_types + t] = st[o_pos + t] = 0;
    STOF_TRY(stage_upload(m, g->in, end));
    if (!host_ids)
        STOF_TRY(enc_pack_tokens(m->ctx, r->ids->data, r->ids->dtype, in->cu, B, r->len, in->ids,
                                 T));
    if (r->types && !host_types)
        STOF_TRY(enc_pack_tokens(m->ctx, r->types->data, r->types->dtype, in->cu, B, r->len,
                                 in->types, T));
    return STOF_OK;
}

static stof_status launch_ahead(stof_model *m, const enc_request *r, bool *computed);

static long long get64(const int32_t *w)
{
    return (long long)(((uint64_t)(uint32_t)w[1] << 32) | (uint32_t)w[0]);
}

/* The first problem the scan of sequence b reports, as an error; OK when none. */
static stof_status scan_problem(const stof_model *m, const enc_request *r, int b, const int32_t *w)
{
    const stof_model_info *info = &m->info;
    STOF_REQUIRE(w[ENC_SCAN_MASK_VALUE] == INT32_MAX, STOF_ERR_INVALID_ARG,
                 "attention_mask[%d, %d] = %lld; it must hold only 0 and 1", b,
                 (int)w[ENC_SCAN_MASK_VALUE], get64(w + ENC_SCAN_MASK_VALUE_AT));
    STOF_REQUIRE(w[ENC_SCAN_MASK_ONE_AFTER_ZERO] == INT32_MAX, STOF_ERR_INVALID_ARG,
                 "attention_mask row %d has a 1 at %d after a 0 at %d: stof runs right-padded "
                 "batches (re-pad left-padded input on the right)",
                 b, (int)w[ENC_SCAN_MASK_ONE_AFTER_ZERO], (int)w[ENC_SCAN_LENGTH]);
    int32_t len = w[ENC_SCAN_LENGTH];
    STOF_REQUIRE(len >= 0 && len <= r->len, STOF_ERR_INVALID_ARG,
                 "lengths[%d] = %d is outside [0, L = %d]", b, (int)len, r->len);
    STOF_REQUIRE(w[ENC_SCAN_ID] == INT32_MAX, STOF_ERR_INVALID_ARG,
                 "ids[%d, %d] = %lld is outside the vocabulary [0, %d)", b, (int)w[ENC_SCAN_ID],
                 get64(w + ENC_SCAN_ID_VALUE), info->vocab);
    STOF_REQUIRE(w[ENC_SCAN_TYPE] == INT32_MAX, STOF_ERR_INVALID_ARG,
                 "token_types[%d, %d] = %lld is outside [0, type_vocab_size = %d)", b,
                 (int)w[ENC_SCAN_TYPE], get64(w + ENC_SCAN_TYPE_VALUE), info->type_vocab);
    return STOF_OK;
}

stof_status enc_gpu_scan(stof_model *m, const enc_request *r, const stof_tensor *mask,
                         const stof_tensor *lengths, int32_t *lens, bool *packed, bool *computed)
{
    enc_gpu *g = m->gpu;
    int B = r->batch;
    *packed = false;
    *computed = false;
    STOF_REQUIRE(B <= 65535, STOF_ERR_UNSUPPORTED,
                 "batch %d: the GPU encoder takes at most 65535 sequences", B);
    if (B == 0) return STOF_OK;
    STOF_TRY(ws_reserve(m, B, r->len));
    cudaStream_t s = (cudaStream_t)m->ctx->stream;
    enc_scan_args a;
    memset(&a, 0, sizeof a);
    a.batch = B;
    a.len = r->len;
    a.report = g->report;
    if (mask) {
        a.mask = mask->data;
        a.mask_dtype = mask->dtype;
    } else if (lengths) {
        a.lengths = (const int32_t *)lengths->data;
    } else { /* host lengths: up through the stage */
        int32_t *dev = g->report + (int64_t)g->cap_batch * ENC_SCAN_WORDS;
        STOF_TRY(stage_reserve(g, B));
        memcpy(g->stage, lens, (size_t)B * sizeof(int32_t));
        STOF_TRY(stage_upload(m, dev, B));
        a.lengths = dev;
    }
    if (r->ids->memory == STOF_MEM_DEVICE) {
        a.ids = r->ids->data;
        a.ids_dtype = r->ids->dtype;
    }
    if (r->types && r->types->memory == STOF_MEM_DEVICE) {
        a.types = r->types->data;
        a.types_dtype = r->types->dtype;
    }
    a.vocab = m->info.vocab;
    a.type_vocab = m->info.type_vocab;
    a.report_host = g->host_report_dev;
    /* With every token input on the device, the inputs are packed there from
     * the scan's lengths, queued ahead of the read back: the host waits for
     * the report alone. */
    bool pack =
        r->ids->memory == STOF_MEM_DEVICE && (!r->types || r->types->memory == STOF_MEM_DEVICE);
    enc_pack_args p;
    memset(&p, 0, sizeof p);
    if (pack) {
        dev_inputs v = input_views(g, B, r->len);
        p.batch = B;
        p.len = r->len;
        p.report = g->report;
        p.ids = a.ids;
        p.ids_dtype = a.ids_dtype;
        p.types = a.types;
        p.types_dtype = a.types_dtype;
        p.vocab = a.vocab;
        p.type_vocab = a.type_vocab;
        p.cu = v.cu;
        p.lens = v.lens;
        p.out_ids = v.ids;
        p.out_types = v.types;
        p.out_pos = v.pos;
    }
    bool one = pack && enc_scan_pack_fits(B, r->len);
    STOF_TRY(one ? enc_scan_pack(m->ctx, &a, &p) : enc_scan_inputs(m->ctx, &a));
    if (!a.report_host) {
        size_t bytes = (size_t)B * ENC_SCAN_WORDS * sizeof(int32_t);
        STOF_CUDA_TRY(cudaMemcpyAsync(g->host_report, g->report, bytes, cudaMemcpyDeviceToHost, s));
    }
    STOF_TRY(event_once(&g->report_event));
    STOF_CUDA_TRY(cudaEventRecord((cudaEvent_t)g->report_event, s));
    if (pack && !one) STOF_TRY(enc_pack_inputs(m->ctx, &p));
    if (pack) STOF_TRY(launch_ahead(m, r, computed));
    STOF_CUDA_TRY(cudaEventSynchronize((cudaEvent_t)g->report_event));
    for (int b = 0; b < B; b++) {
        const int32_t *w = g->host_report + (int64_t)b * ENC_SCAN_WORDS;
        STOF_TRY(scan_problem(m, r, b, w));
        lens[b] = w[ENC_SCAN_LENGTH];
    }
    *packed = pack;
    return STOF_OK;
}

/* Compile parameters of a forward's mask with host lengths (lengths must
 * outlive the params). */
static stof_mask_params mask_params(const stof_model *m, int batch, int len,
                                    stof_tensor *lengths)
{
    stof_mask_params p = stof_mask_default_params();
    p.batch = batch;
    p.heads = m->info.heads;
    p.len_q = len;
    p.len_k = len;
    p.lengths_q = lengths;
    p.head_dim = m->info.head_dim;
    return p;
}

/* The forward's mask (every pair when it names none) for these lengths. */
static stof_status compile_mask(stof_model *m, const enc_request *r, stof_mask **out)
{
    int64_t n = r->batch;
    stof_tensor lengths = stof_tensor_make((void *)r->lengths, STOF_I32, STOF_MEM_HOST, 1, &n);
    stof_mask_params p = mask_params(m, r->batch, r->len, &lengths);
    return stof_mask_compile(m->ctx, r->mask ? r->mask : m->gpu->full, &p, out);
}

stof_status enc_gpu_mask_tiles(stof_model *m, int batch, int len, const int32_t *host_lengths,
                               const stof_mask_spec *mask, int *tile_m, int *tile_n)
{
    int64_t n = batch;
    stof_tensor lengths = stof_tensor_make((void *)host_lengths, STOF_I32, STOF_MEM_HOST, 1, &n);
    stof_mask_params p = mask_params(m, batch, len, &lengths);
    return stof_mask_choose_tiles(m->ctx, mask ? mask : m->gpu->full, &p, tile_m, tile_n);
}

/* The same mask, reusable, reading the lengths from the device inputs (a graph
 * rebuilds it for every forward). Its tile shape is the one the host lengths
 * give, so that a plan's attention configuration fits both. */
static stof_status compile_reusable_mask(stof_model *m, const enc_request *r, const dev_inputs *in,
                                         stof_mask **out)
{
    int tm = 0, tn = 0;
    STOF_TRY(enc_gpu_mask_tiles(m, r->batch, r->len, r->lengths, r->mask, &tm, &tn));
    int64_t n = r->batch;
    stof_tensor lengths = stof_tensor_make(in->lens, STOF_I32, STOF_MEM_DEVICE, 1, &n);
    stof_mask_params p = mask_params(m, r->batch, r->len, &lengths);
    p.tile_m = tm;
    p.tile_n = tn;
    p.builder = STOF_BUILDER_GPU;
    p.reusable = 1;
    return stof_mask_compile(m->ctx, r->mask ? r->mask : m->gpu->full, &p, out);
}

/* ---------------------------------------------------------------- plans */

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
    p.attn.kernel = STOF_ATTN_AUTO;
    return p;
}

/* The linear layer of GEMM segment seg (tune_segment) of layer w on T rows:
 * what the layers run, and what the tuner asks cuBLASLt about. */
static fuse_linear_args segment_args(const stof_model *m, const gpu_layer *w, int seg, int64_t T)
{
    const enc_gpu *g = m->gpu;
    const bert_view cv = view_of(m), *c = &cv;
    int H = c->hidden_size, I = c->intermediate_size;
    fuse_linear_args a;
    memset(&a, 0, sizeof a);
    a.dtype = g->dtype;
    a.m = T;
    a.act = FUSE_ACT_NONE;
    a.w_ready = true; /* weights are written once, at load */
    switch (seg) {
    case TUNE_SEG_QKV:
        a.n = 3 * H, a.k = H, a.x = g->x, a.w = w->qkv_w, a.bias = w->qkv_b, a.y = g->qkv;
        break;
    case TUNE_SEG_OUT:
        a.n = H, a.k = H, a.x = g->attn, a.w = w->o_w, a.bias = w->o_b, a.y = g->x;
        a.residual = g->x, a.gamma = w->ln1_g, a.beta = w->ln1_b, a.eps = c->layer_norm_eps;
        break;
    case TUNE_SEG_FFN1:
        a.n = I, a.k = H, a.x = g->x, a.w = w->i_w, a.bias = w->i_b, a.y = g->inter;
        a.act = (fuse_act)c->hidden_act;
        break;
    default: /* TUNE_SEG_FFN2 */
        a.n = H, a.k = I, a.x = g->inter, a.w = w->f_w, a.bias = w->f_b, a.y = g->x;
        a.residual = g->x, a.gamma = w->ln2_g, a.beta = w->ln2_b, a.eps = c->layer_norm_eps;
        break;
    }
    return a;
}

/* K slices of segment seg's GEMM on the cuBLASLt path (fuse_lt_split_rule):
 * the residual + LayerNorm segments only. */
static int segment_splits(const stof_model *m, int seg, int64_t rows)
{
    fuse_linear_args a = segment_args(m, &m->gpu->layers[0], seg, rows);
    return a.gamma ? fuse_lt_split_rule(rows, a.n, a.k, m->gpu->lt.bytes) : 1;
}

/* The split rule for the residual + LayerNorm segments that run on cuBLASLt,
 * rule-based and tuned plans alike (the tuner measures plans as they run). */
static void plan_splits(const stof_model *m, layer_plan *p, int64_t rows)
{
    if (p->out.path == FUSE_PATH_CUBLASLT) p->out.splits = segment_splits(m, TUNE_SEG_OUT, rows);
    if (!p->use_chain && p->ffn2.path == FUSE_PATH_CUBLASLT)
        p->ffn2.splits = segment_splits(m, TUNE_SEG_FFN2, rows);
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
        fuse_linear_args a = segment_args(m, &m->gpu->layers[0], i, rows);
        c.splits = fuse_sm90_small_rule(rows, a.n, a.k, a.gamma != NULL, m->ctx->sm_count,
                                        m->gpu->lt.bytes);
        if (c.splits > 0) *seg[i] = c;
    }
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

/* A tuned plan as the layers run it. */
static layer_plan plan_from_tune(const tune_plan *t)
{
    layer_plan p = plan_rules();
    p.qkv = choice_from_seg(&t->seg[TUNE_SEG_QKV], FUSE_TPL_GEMM_BIAS_ACT);
    p.out = choice_from_seg(&t->seg[TUNE_SEG_OUT], FUSE_TPL_GEMM_RES_LN);
    p.use_chain = t->ffn_chain != 0;
    if (p.use_chain) {
        p.chain = choice_from_seg(&t->seg[TUNE_SEG_FFN1], FUSE_TPL_FFN_CHAIN);
    } else {
        p.ffn1 = choice_from_seg(&t->seg[TUNE_SEG_FFN1], FUSE_TPL_GEMM_BIAS_ACT);
        p.ffn2 = choice_from_seg(&t->seg[TUNE_SEG_FFN2], FUSE_TPL_GEMM_RES_LN);
    }
    p.attn.kernel = (stof_attn_kernel)t->attn_kernel;
    p.attn.warps = t->attn_warps;
    p.attn.block_m = t->attn_block_m;
    return p;
}

static bool plan_equal(const layer_plan *a, const layer_plan *b)
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

/* Canonical text of a forward's mask (the model's "full" when it names none),
 * on the heap; NULL (error cleared) when it cannot be formatted. One per
 * forward: the tuning key and the graph bucket both read it. */
static char *format_mask(const enc_gpu *g, const stof_mask_spec *mask)
{
    const stof_mask_spec *spec = mask ? mask : g->full;
    size_t need = 0;
    char *text = NULL;
    if (stof_mask_spec_format(spec, NULL, 0, &need) == STOF_OK && need > 0) text = malloc(need);
    if (text && stof_mask_spec_format(spec, text, need, NULL) != STOF_OK) {
        free(text);
        text = NULL;
    }
    if (!text) stof_clear_error();
    return text;
}

static void fill_key(const stof_model *m, int batch, int len, int64_t tokens, const char *text,
                     tune_key *key)
{
    const stof_ctx *ctx = m->ctx;
    const stof_model_info *info = &m->info;
    memset(key, 0, sizeof *key);
    size_t name_len = strnlen(ctx->device_name, sizeof key->gpu - 1);
    memcpy(key->gpu, ctx->device_name, name_len); /* key is zeroed: stays terminated */
    key->sm_count = ctx->sm_count;
    key->cc = ctx->cc_major * 10 + ctx->cc_minor;
    snprintf(key->version, sizeof key->version, "%s", stof_version());
    key->hidden = info->hidden;
    key->layers = info->layers;
    key->heads = info->heads;
    key->intermediate = info->intermediate;
    key->dtype = (int)info->dtype;
    key->batch = batch;
    key->len = len;
    key->token_bucket = tune_token_bucket(tokens);
    tune_mask_signature(text, key->mask, sizeof key->mask);
}

stof_status enc_gpu_tune_key(stof_model *m, int batch, int len, int64_t tokens,
                             const stof_mask_spec *mask, tune_key *key)
{
    char *text = format_mask(m->gpu, mask);
    STOF_REQUIRE(text, STOF_ERR_OOM, "out of host memory formatting a mask spec");
    fill_key(m, batch, len, tokens, text, key);
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
    fill_key(m, r->batch, r->len, rows, text, &key);
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
static layer_plan plan_for(stof_model *m, const enc_request *r, int64_t rows, const char *text)
{
    tune_plan t;
    const char *source = "rule-based";
    layer_plan p;
    if (r->plan) {
        p = plan_from_tune(r->plan);
        source = "requested";
    } else if (plan_lookup(m, r, rows, text, &t)) {
        p = plan_from_tune(&t);
        source = "tuned";
    } else {
        p = plan_rules();
    }
    plan_small(m, &p, rows);
    plan_splits(m, &p, rows);
    describe_plan(&p, rows, source);
    return p;
}

/* ---------------------------------------------------------------- layers */

static stof_status attention(stof_model *m, const enc_request *r, const dev_inputs *in,
                             const layer_plan *p, stof_mask *mask)
{
    enc_gpu *g = m->gpu;
    int64_t T = in->rows, H = m->info.hidden, heads = m->info.heads, D = m->info.head_dim;
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
    const stof_attn_choice *choice = p->attn.kernel == STOF_ATTN_AUTO ? NULL : &p->attn;
    return attn_attention_with(m->ctx, &ap, choice, &q, &k, &v, mask, &cu, &cu, &out);
}

/* Segment seg of layer w as a forward runs it on its inputs: in->rows rows,
 * of which the GEMM segments may skip those past in->live. */
static fuse_linear_args layer_args(const stof_model *m, const gpu_layer *w, int seg,
                                   const dev_inputs *in)
{
    fuse_linear_args a = segment_args(m, w, seg, in->rows);
    a.live_rows = in->live;
    return a;
}

static stof_status ffn(stof_model *m, const gpu_layer *w, const layer_plan *p, const dev_inputs *in)
{
    enc_gpu *g = m->gpu;
    const bert_view cv = view_of(m), *c = &cv;
    if (p->use_chain) {
        fuse_ffn_args f;
        memset(&f, 0, sizeof f);
        f.dtype = g->dtype;
        f.m = in->rows;
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
    fuse_linear_args up = layer_args(m, w, TUNE_SEG_FFN1, in);
    STOF_TRY(fuse_linear_act(m->ctx, &p->ffn1, &up, g->lt));
    fuse_linear_args down = layer_args(m, w, TUNE_SEG_FFN2, in);
    return fuse_linear_res_ln(m->ctx, &p->ffn2, &down, g->lt);
}

/* One layer; mask_ready (a cudaEvent_t, or NULL) is recorded where the mask is
 * complete, and attention waits for it. */
static stof_status layer(stof_model *m, const gpu_layer *w, const layer_plan *p,
                         const enc_request *r, const dev_inputs *in, stof_mask *mask,
                         void *mask_ready)
{
    enc_gpu *g = m->gpu;
    fuse_linear_args a = layer_args(m, w, TUNE_SEG_QKV, in);
    STOF_TRY(fuse_linear_act(m->ctx, &p->qkv, &a, g->lt));
    if (mask_ready)
        STOF_CUDA_TRY(
            cudaStreamWaitEvent((cudaStream_t)m->ctx->stream, (cudaEvent_t)mask_ready, 0));
    STOF_TRY(attention(m, r, in, p, mask));
    a = layer_args(m, w, TUNE_SEG_OUT, in);
    STOF_TRY(fuse_linear_res_ln(m->ctx, &p->out, &a, g->lt));
    return ffn(m, w, p, in);
}

/* Embeddings and every layer; mask_ready as for layer (the first attention waits). */
static stof_status run_layers(stof_model *m, const enc_request *r, const dev_inputs *in,
                              const layer_plan *p, stof_mask *mask, void *mask_ready)
{
    enc_gpu *g = m->gpu;
    const bert_view cv = view_of(m), *c = &cv;
    STOF_TRY(
        fuse_embeddings(m->ctx, g->dtype, &g->emb, in->ids, in->pos, in->types, in->rows, g->x));
    for (int l = 0; l < c->num_hidden_layers; l++)
        STOF_TRY(layer(m, &g->layers[l], p, r, in, mask, l == 0 ? mask_ready : NULL));
    if (mask_ready && c->num_hidden_layers == 0)
        STOF_CUDA_TRY(
            cudaStreamWaitEvent((cudaStream_t)m->ctx->stream, (cudaEvent_t)mask_ready, 0));
    return STOF_OK;
}

/* ---------------------------------------------------------------- graphs */

static enc_graph *graph_find(enc_gpu *g, const enc_request *r, int64_t rows, const char *text,
                             const layer_plan *p)
{
    for (int i = 0; i < ENC_GRAPHS; i++) {
        enc_graph *e = &g->graphs[i];
        if (e->used && e->batch == r->batch && e->len == r->len && e->rows == rows &&
            e->has_types == (r->types != NULL) && strcmp(e->mask_text, text) == 0 &&
            plan_equal(&e->plan, p))
            return e;
    }
    return NULL;
}

/* A free slot, or the least recently used one emptied. */
static enc_graph *graph_slot(enc_gpu *g)
{
    enc_graph *lru = &g->graphs[0];
    for (int i = 0; i < ENC_GRAPHS; i++) {
        if (!g->graphs[i].used) return &g->graphs[i];
        if (g->graphs[i].last_use < lru->last_use) lru = &g->graphs[i];
    }
    graph_release(g, lru);
    return lru;
}

/* Captures the mask rebuild and every layer of this bucket into e->exec; on
 * failure e->failed and the error is cleared (the bucket runs kernel by kernel). */
static void graph_capture(stof_model *m, const enc_request *r, const dev_inputs *in, enc_graph *e)
{
    enc_gpu *g = m->gpu;
    stof_ctx *ctx = m->ctx;
    stof_status st = compile_reusable_mask(m, r, in, &e->mask);
    if (st == STOF_OK) st = attn_blockwise_prepare();
    /* Captured on a stream of the model's own, whatever the ctx's stream is (the
     * legacy default stream, as torch's usually is, cannot be captured); the
     * graph is launched on the ctx's stream. Capture runs nothing. */
    void **streams[2] = {&g->capture_stream, &g->mask_stream};
    for (int i = 0; i < 2 && st == STOF_OK && !*streams[i]; i++) {
        cudaStream_t cs = NULL;
        st = STOF_CUDA(cudaStreamCreateWithFlags(&cs, cudaStreamNonBlocking));
        *streams[i] = cs;
    }
    if (st == STOF_OK) st = event_once(&g->fork_event);
    if (st == STOF_OK) st = event_once(&g->mask_event);
    cudaGraph_t graph = NULL;
    void *user_stream = ctx->stream;
    cudaStream_t s = (cudaStream_t)g->capture_stream, ms = (cudaStream_t)g->mask_stream;
    if (st == STOF_OK) st = STOF_CUDA(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    if (st == STOF_OK) {
        /* The mask rebuild is a branch of the graph that joins at the first
         * attention: it runs beside the embeddings and the first QKV GEMM. */
        st = STOF_CUDA(cudaEventRecord((cudaEvent_t)g->fork_event, s));
        if (st == STOF_OK) st = STOF_CUDA(cudaStreamWaitEvent(ms, (cudaEvent_t)g->fork_event, 0));
        ctx->stream = ms;
        if (st == STOF_OK) st = stof_mask_rebuild(e->mask);
        if (st == STOF_OK) st = STOF_CUDA(cudaEventRecord((cudaEvent_t)g->mask_event, ms));
        ctx->stream = s;
        if (st == STOF_OK) st = run_layers(m, r, in, &e->plan, e->mask, g->mask_event);
        ctx->stream = user_stream;
        stof_status end = STOF_CUDA(cudaStreamEndCapture(s, &graph));
        if (st == STOF_OK) st = end;
    }
    if (st == STOF_OK) st = STOF_CUDA(cudaGraphInstantiate(&e->exec, graph, 0));
    if (graph) cudaGraphDestroy(graph);
    if (st != STOF_OK) {
        stof_log(STOF_LOG_DEBUG, "encoder: bucket (%d, %d, %lld rows) runs without a graph: %s",
                 r->batch, r->len, (long long)e->rows, stof_last_error());
        stof_clear_error();
        (void)cudaGetLastError();
        if (e->exec) cudaGraphExecDestroy(e->exec);
        e->exec = NULL;
        stof_mask_destroy(e->mask);
        e->mask = NULL;
        e->failed = true;
    }
}

/* Launches a captured forward on s and notes its use. */
static stof_status graph_launch(enc_gpu *g, enc_graph *e, cudaStream_t s)
{
    STOF_CUDA_TRY(cudaGraphLaunch(e->exec, s));
    e->last_use = ++g->clock;
    e->runs++;
    return STOF_OK;
}

/* Whether a graph may be launched on s: not while s is capturing (the caller's
 * own capture), nor when that cannot be told (the error is cleared). */
static bool can_launch_graph(cudaStream_t s)
{
    enum cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
    if (cudaStreamIsCapturing(s, &cs) == cudaSuccess) return cs == cudaStreamCaptureStatusNone;
    (void)cudaGetLastError();
    return false;
}

/* Runs the layers from this bucket's graph when it has (or now gets) one;
 * *done false: run them kernel by kernel. */
static stof_status graph_run(stof_model *m, const enc_request *r, const dev_inputs *in,
                             const layer_plan *p, const char *text, bool *done)
{
    enc_gpu *g = m->gpu;
    *done = false;
    cudaStream_t s = (cudaStream_t)m->ctx->stream;
    if (r->eager || !can_launch_graph(s)) return STOF_OK;
    /* Only a mask its text describes (no dense parts, no per-head layouts) can
     * be told apart by it. */
    if (!text || !stof_mask_spec_textual(r->mask ? r->mask : g->full)) return STOF_OK;
    enc_graph *e = graph_find(g, r, in->rows, text, p);
    if (!e) { /* first sight of the bucket: remember it, run kernel by kernel */
        char *copy = strdup(text);
        if (!copy) return STOF_OK;
        e = graph_slot(g);
        e->used = true;
        e->batch = r->batch;
        e->len = r->len;
        e->rows = in->rows;
        e->has_types = r->types != NULL;
        e->mask_text = copy;
        e->plan = *p;
        e->last_use = ++g->clock;
        return STOF_OK;
    }
    e->last_use = ++g->clock;
    if (e->failed) return STOF_OK;
    if (!e->exec) graph_capture(m, r, in, e);
    if (!e->exec) return STOF_OK;
    STOF_TRY(graph_launch(g, e, s));
    *done = true;
    return STOF_OK;
}

/* The rows a forward of a small batch computes whatever its token count: B *
 * L, for a batch whose inputs are packed on the device (packed) and whose
 * graph can be told apart by shape and mask text; 0 for every other forward
 * (it computes the bucket of its token count). */
static int64_t fixed_rows(const stof_model *m, const enc_request *r, bool packed)
{
    int64_t n = (int64_t)r->batch * r->len;
    if (!packed || n > ENC_FIXED_ROWS || r->eager || r->plan || r->len > m->info.max_positions)
        return 0;
    return stof_mask_spec_textual(r->mask ? r->mask : m->gpu->full) ? n : 0;
}

/* Launches the layers of a small batch ahead of the scan's read back when its
 * graph is captured (the inputs are packed on the device before it); *computed
 * says so. The graph only reads the workspace, whose packed ids and types the
 * packing keeps inside their tables and whose lengths it clamps to [0, L]:
 * a forward whose report then names a problem fails having computed nothing
 * it writes out. */
static stof_status launch_ahead(stof_model *m, const enc_request *r, bool *computed)
{
    enc_gpu *g = m->gpu;
    int64_t rows = fixed_rows(m, r, true);
    cudaStream_t s = (cudaStream_t)m->ctx->stream;
    if (!rows || !can_launch_graph(s)) return STOF_OK;
    enc_ahead_memo *k = &g->ahead_memo;
    bool has_types = r->types != NULL;
    enc_graph *e = NULL;
    if (!r->mask && k->valid && k->gen == g->gen && k->batch == r->batch && k->len == r->len &&
        k->has_types == has_types) {
        e = k->graph;
    } else {
        char *text = format_mask(g, r->mask);
        if (!text) return STOF_OK;
        layer_plan p = plan_for(m, r, rows, text);
        e = graph_find(g, r, rows, text, &p);
        free(text);
        if (!e || !e->exec) return STOF_OK;
        if (!r->mask) *k = (enc_ahead_memo){true, has_types, r->batch, r->len, g->gen, e};
    }
    STOF_TRY(graph_launch(g, e, s));
    g->ahead++;
    *computed = true;
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
    int64_t rows = fixed_rows(m, r, r->packed);
    bool fixed = rows > 0;
    if (!fixed) {
        rows = tune_token_bucket(r->tokens);
        if (rows > (int64_t)r->batch * r->len) rows = (int64_t)r->batch * r->len;
    }
    dev_inputs in;
    STOF_TRY(upload_inputs(m, r, rows, &in));
    if (fixed) in.live = in.cu + r->batch;
    if (r->computed) return write_outputs(m, r, &in);
    char *text = format_mask(m->gpu, r->mask);
    layer_plan p = plan_for(m, r, rows, text);
    bool done = false;
    stof_status st = graph_run(m, r, &in, &p, text, &done);
    free(text);
    STOF_TRY(st);
    if (!done) {
        stof_mask *mask = NULL;
        STOF_TRY(compile_mask(m, r, &mask));
        st = run_layers(m, r, &in, &p, mask, NULL);
        stof_mask_destroy(mask);
        STOF_TRY(st);
    }
    return write_outputs(m, r, &in);
}

stof_status enc_gpu_lt_algos(stof_model *m, int seg, int64_t rows, int *count)
{
    enc_gpu *g = m->gpu;
    STOF_REQUIRE(g->ws && rows <= g->cap_tokens, STOF_ERR_INVALID_ARG,
                 "enc_gpu_lt_algos: no workspace for %lld rows yet", (long long)rows);
    STOF_REQUIRE(seg >= 0 && seg < TUNE_NSEG, STOF_ERR_INVALID_ARG,
                 "enc_gpu_lt_algos: segment %d", seg);
    /* The GEMM the cuBLASLt path of the segment runs (segments.c): exact GELU
     * goes to a row kernel with the bias; LayerNorm segments take the residual. */
    fuse_linear_args a = segment_args(m, &g->layers[0], seg, rows);
    fuse_act act = a.act;
    if (act == FUSE_ACT_GELU) {
        act = FUSE_ACT_NONE;
        a.bias = NULL;
    }
    return fuse_lt_algo_count(m->ctx, &a, act, a.residual, segment_splits(m, seg, rows), g->lt,
                              count);
}

int enc_gpu_graphs_captured(const enc_gpu *g)
{
    int n = 0;
    for (int i = 0; g && i < ENC_GRAPHS; i++)
        n += g->graphs[i].exec != NULL;
    return n;
}

int64_t enc_gpu_launched_ahead(const enc_gpu *g)
{
    return g ? g->ahead : 0;
}
