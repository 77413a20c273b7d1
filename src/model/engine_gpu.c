/*
 * engine_gpu.c — the encoder forward on the GPU, padding-free: creation,
 * the forward's steps in order, and its outputs.
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
 * Its parts: weights_gpu.c (upload), workspace_gpu.c, inputs_gpu.c and
 * inputs.cu (the input scan and packing), masks_gpu.c, plan_gpu.c (the
 * fusion scheme and the tuning cache), exec_gpu.c (the layers) and
 * graphs_gpu.c (CUDA graphs per shape bucket).
 */
#include "model/engine_gpu.h"

#include "cpu/cpu_ref.h"

#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

stof_status enc_gpu_supports(const model_desc *d)
{
    STOF_REQUIRE(d->hidden % 8 == 0 && d->hidden <= FUSE_MAX_ROW_WIDTH, STOF_ERR_UNSUPPORTED,
                 "the GPU engine needs hidden a multiple of 8 up to %d; %s has %d",
                 FUSE_MAX_ROW_WIDTH, d->model_type, d->hidden);
    for (int i = 0; i < d->layers; i++) {
        const layer_desc *l = &d->layer[i];
        STOF_REQUIRE(l->head_dim % 8 == 0 && l->head_dim >= 32 && l->head_dim <= 256,
                     STOF_ERR_UNSUPPORTED,
                     "the GPU engine runs head dims 32 to 256 (multiples of 8); layer %d of %s "
                     "has %d: use a CPU context",
                     i, d->model_type, l->head_dim);
        STOF_REQUIRE(l->intermediate % 8 == 0, STOF_ERR_UNSUPPORTED,
                     "the GPU engine needs intermediate a multiple of 8; layer %d has %d", i,
                     l->intermediate);
        STOF_REQUIRE(l->pos != POS_REL_BUCKETS, STOF_ERR_UNSUPPORTED,
                     "the GPU engine has no relative-position buckets (layer %d of %s)", i,
                     d->model_type);
        STOF_REQUIRE(d->norm_place == NORM_PRE || (l->attn_norm == NORM_LAYER &&
                                                   l->mlp_norm == NORM_LAYER && d->norm_bias),
                     STOF_ERR_UNSUPPORTED,
                     "the GPU engine runs post-norm layers with biased LayerNorms only (layer %d "
                     "of %s)",
                     i, d->model_type);
    }
    return STOF_OK;
}

/* Post-norm BERT layers: the fused and tuned path of plan_gpu.c. */
static bool is_bert(const model_desc *d)
{
    if (d->norm_place != NORM_POST || d->embed != EMBED_TOKEN_POS_TYPE ||
        d->embed_norm != NORM_LAYER)
        return false;
    for (int i = 0; i < d->layers; i++) {
        const layer_desc *l = &d->layer[i];
        if (l->mlp != MLP_PLAIN || l->pos != POS_NONE || l->mask != MASK_KIND_FULL ||
            l->kv_heads != l->heads || l->heads * l->head_dim != d->hidden || !l->qkv_bias ||
            !l->out_bias || !l->mlp_bias || l->intermediate != d->layer[0].intermediate ||
            l->act != d->layer[0].act)
            return false;
    }
    return true;
}

/*
 * The RoPE tables (fuse_rope_table): one per distinct set of layer
 * frequencies (ModernBERT: its global and its local theta; the LLaMA kin:
 * one, llama3 scaling folded in), computed as the CPU reference does and
 * built on the device for positions 0 .. positions - 1, all in one block.
 * They belong to the model, not to a batch, so they live beside the weights
 * rather than in the workspace: built once, every forward and every
 * captured graph reads them with nothing on the forward's path. At load
 * they cover max_position_embeddings where all of them fit in
 * ENG_ROPE_LOAD_BYTES (ModernBERT's 8192 positions: 4 MiB; LLaMA-3.2's
 * 131072: 32 MiB); rotary positions do not end there, so a forward longer
 * than the tables grows them first, to its length rounded up to a power of
 * two, and drops the captured graphs, which hold the old block's address
 * (as a workspace growth does).
 */
#define ENG_ROPE_LOAD_BYTES ((size_t)64 << 20)
#define ENG_ROPE_MIN_POSITIONS 2048

/* Layer l's frequencies into inv (host, FUSE_ROPE_MAX_HALF floats, zeros past rot_dim / 2). */
static void layer_freqs(const layer_desc *ld, float *inv)
{
    const rope_desc *r = &ld->rope;
    memset(inv, 0, FUSE_ROPE_MAX_HALF * sizeof *inv);
    cpu_rope_freqs(r->theta, r->rot_dim, (int)r->scaling, r->factor, r->low_freq_factor,
                   r->high_freq_factor, r->original_max_positions, inv);
}

/* The block of the tables of positions positions into g->rope_tab, the old
 * one freed behind the work queued on it; owner[l]: the first layer with
 * layer l's frequencies (inv), whose table layer l shares. */
static stof_status build_rope_tables(enc_gpu *g, int positions,
                                     const float (*inv)[FUSE_ROPE_MAX_HALF], const int *owner)
{
    const model_desc *d = g->desc;
    size_t total = 0;
    for (int l = 0; l < d->layers; l++)
        if (owner[l] == l)
            total += align256(fuse_rope_table_bytes(positions, d->layer[l].rope.rot_dim));
    void *block = NULL;
    STOF_TRY(stof_dev_alloc(g->ctx, total, &block));
    size_t at = 0;
    stof_status st = STOF_OK;
    for (int l = 0; l < d->layers && st == STOF_OK; l++) {
        if (owner[l] < 0) continue;
        if (owner[l] != l) {
            g->rope_tab[l] = g->rope_tab[owner[l]];
            continue;
        }
        const int rot = d->layer[l].rope.rot_dim;
        st = fuse_rope_table_build(g->ctx, inv[l], rot, positions, (float *)((char *)block + at),
                                   &g->rope_tab[l]);
        at += align256(fuse_rope_table_bytes(positions, rot));
    }
    if (st != STOF_OK) {
        stof_dev_free(g->ctx, block);
        memset(g->rope_tab, 0, (size_t)d->layers * sizeof *g->rope_tab);
        g->rope_positions = 0;
        return st;
    }
    stof_dev_free(g->ctx, g->rope_block);
    g->rope_block = block;
    g->rope_positions = positions;
    stof_log(STOF_LOG_DEBUG, "encoder: RoPE tables for %d positions: %.1f MiB", positions,
             (double)total / (1 << 20));
    return STOF_OK;
}

/* Tables covering positions 0 .. positions - 1 (at_load: the load's choice,
 * which may leave none until the first forward); kept when they do. */
static stof_status rope_reserve(enc_gpu *g, int positions, bool at_load)
{
    const model_desc *d = g->desc;
    if (!g->rope_tab || positions <= g->rope_positions) return STOF_OK;
    float(*inv)[FUSE_ROPE_MAX_HALF] = NULL;
    int *owner = NULL;
    stof_status st = stof_host_calloc((size_t)d->layers, sizeof *inv, (void **)&inv);
    if (st == STOF_OK) st = stof_host_calloc((size_t)d->layers, sizeof *owner, (void **)&owner);
    size_t bytes = 0;
    for (int l = 0; st == STOF_OK && l < d->layers; l++) {
        owner[l] = -1;
        if (d->layer[l].pos != POS_ROPE) continue;
        layer_freqs(&d->layer[l], inv[l]);
        owner[l] = l;
        for (int k = 0; k < l && owner[l] == l; k++)
            if (owner[k] == k && d->layer[k].rope.rot_dim == d->layer[l].rope.rot_dim &&
                memcmp(inv[k], inv[l], sizeof inv[l]) == 0)
                owner[l] = k;
        if (owner[l] == l) bytes += fuse_rope_table_bytes(positions, d->layer[l].rope.rot_dim);
    }
    if (st == STOF_OK && !(at_load && bytes > ENG_ROPE_LOAD_BYTES)) {
        if (!at_load && g->rope_block) eng_graphs_drop(g); /* they read the old block */
        st = build_rope_tables(g, positions, (const float(*)[FUSE_ROPE_MAX_HALF])inv, owner);
    }
    free(inv);
    free(owner);
    return st;
}

/* The tables a forward of sequences of up to len tokens reads. */
static stof_status rope_cover(enc_gpu *g, int len)
{
    if (!g->rope_tab || len <= g->rope_positions) return STOF_OK;
    int64_t p = ENG_ROPE_MIN_POSITIONS;
    while (p < len)
        p *= 2;
    return rope_reserve(g, p < INT32_MAX - 1 ? (int)p : len, false);
}

/* A table slot per layer where any layer has RoPE, and the load's tables. */
static stof_status rope_tables_init(enc_gpu *g, const model_desc *d)
{
    bool any = false;
    for (int l = 0; l < d->layers; l++) {
        const rope_desc *r = &d->layer[l].rope;
        if (d->layer[l].pos != POS_ROPE) continue;
        STOF_REQUIRE(r->rot_dim >= 2 && r->rot_dim % 2 == 0 && r->rot_dim <= 2 * FUSE_ROPE_MAX_HALF,
                     STOF_ERR_UNSUPPORTED, "layer %d: RoPE over %d dims", l, r->rot_dim);
        any = true;
    }
    if (!any) return STOF_OK;
    STOF_TRY(stof_host_calloc((size_t)d->layers, sizeof *g->rope_tab, (void **)&g->rope_tab));
    return rope_reserve(g, d->max_positions, true);
}

/* The LM head as the GEMM takes it: vocab rows padded with zeros to a
 * multiple of 8 (GPT-2's 50257) in a copy of its own; else the loaded one. */
static stof_status pad_lm_head(enc_gpu *g, const model_desc *d)
{
    g->vocab_pad = (d->vocab + 7) / 8 * 8;
    g->lm_head = g->w->lm_head;
    if (g->vocab_pad == d->vocab) return STOF_OK;
    size_t row = (size_t)d->hidden * 2, bytes = (size_t)g->vocab_pad * row;
    void *dev = NULL;
    STOF_TRY(stof_dev_alloc(g->ctx, bytes, &dev));
    g->lm_head_pad = dev;
    cudaStream_t s = (cudaStream_t)g->ctx->stream;
    STOF_CUDA_TRY(cudaMemsetAsync(dev, 0, bytes, s));
    STOF_CUDA_TRY(cudaMemcpyAsync(dev, g->w->lm_head, (size_t)d->vocab * row,
                                  cudaMemcpyDeviceToDevice, s));
    g->lm_head = dev;
    return STOF_OK;
}

static void set_widths(enc_gpu *g, const model_desc *d)
{
    eng_widths w = {0, 0, 0};
    for (int i = 0; i < d->layers; i++) {
        const layer_desc *l = &d->layer[i];
        int qkv = (l->heads + 2 * l->kv_heads) * l->head_dim, attn = l->heads * l->head_dim;
        int inter = l->mlp == MLP_GLU ? 2 * l->intermediate : l->intermediate;
        if (qkv > w.qkv) w.qkv = qkv;
        if (attn > w.attn) w.attn = attn;
        if (inter > w.inter) w.inter = inter;
    }
    g->widths = w;
}

/* FUSE_SM90_ROPE_ROWS, or STOF_ROPE_EPI_ROWS when it holds a row count (0:
 * at every size) or "off" (never); tests and measurements set it. */
static int64_t rope_epi_rows(void)
{
    const char *env = getenv("STOF_ROPE_EPI_ROWS");
    if (!env || !*env) return FUSE_SM90_ROPE_ROWS;
    if (strcmp(env, "off") == 0) return INT64_MAX;
    char *end = NULL;
    long long v = strtoll(env, &end, 10);
    if (*end != '\0' || v < 0) {
        stof_log(STOF_LOG_WARN, "STOF_ROPE_EPI_ROWS=\"%s\" is not a row count or off; using %d",
                 env, FUSE_SM90_ROPE_ROWS);
        return FUSE_SM90_ROPE_ROWS;
    }
    return (int64_t)v;
}

/* The weights stream from the files to the device in the run dtype; a host
 * copy the model may hold (model.c loads one on every context) goes first. */
stof_status enc_gpu_create(stof_model *m)
{
    const model_desc *d = &m->desc;
    STOF_TRY(enc_gpu_supports(d));
    enc_gpu *g;
    STOF_TRY(stof_host_calloc(1, sizeof *g, (void **)&g));
    m->gpu = g; /* from here on the model's destroy cleans up */
    g->ctx = m->ctx;
    g->dtype = m->info.dtype;
    g->desc = d;
    g->w = &m->w;
    g->bert = is_bert(d);
    g->rope_epi_rows = rope_epi_rows();
    model_weights_free_host(&m->w);
    weight_sink sink = eng_weight_sink(g);
    STOF_TRY(model_load_weights(&m->files, m->family, d, g->dtype, &sink, &m->w));
    const model_weights *w = &m->w;
    g->emb.word = w->tok_emb;
    g->emb.position = w->pos_emb;
    g->emb.type = w->type_emb;
    g->emb.gamma = w->emb_norm;
    g->emb.beta = w->emb_norm_b;
    g->emb.vocab = d->vocab;
    g->emb.max_pos = d->max_positions;
    g->emb.type_vocab = d->type_vocab;
    g->emb.hidden = d->hidden;
    g->emb.eps = d->norm_eps;
    STOF_TRY(rope_tables_init(g, d));
    if (d->head == HEAD_LM) STOF_TRY(pad_lm_head(g, d));
    STOF_TRY(eng_mask_kinds(g, d));
    set_widths(g, d);
    STOF_TRY(stof_mask_spec_create(&g->full));
    STOF_TRY(stof_mask_spec_add_full(g->full));
    return STOF_OK;
}

void enc_gpu_destroy(enc_gpu *g)
{
    if (!g) return;
    eng_graphs_drop(g);
    if (g->capture_stream) cudaStreamDestroy((cudaStream_t)g->capture_stream);
    if (g->mask_stream) cudaStreamDestroy((cudaStream_t)g->mask_stream);
    if (g->fork_event) cudaEventDestroy((cudaEvent_t)g->fork_event);
    if (g->mask_event) cudaEventDestroy((cudaEvent_t)g->mask_event);
    tune_cache_free(g->cache);
    eng_weights_free(g);
    /* the model's weight table pointed at them: empty it for the model's destroy */
    free(g->w->layer);
    memset(g->w, 0, sizeof *g->w);
    stof_dev_free(g->ctx, g->rope_block);
    free(g->rope_tab);
    free(g->layer_kind);
    if (g->ws) stof_dev_free(g->ctx, g->ws);
    if (g->logits_buf) stof_dev_free(g->ctx, g->logits_buf);
    if (g->lm_head_pad) stof_dev_free(g->ctx, g->lm_head_pad);
    stof_mask_spec_destroy(g->full);
    if (g->stage_event) cudaEventDestroy((cudaEvent_t)g->stage_event);
    if (g->report_event) cudaEventDestroy((cudaEvent_t)g->report_event);
    if (g->stage) cudaFreeHost(g->stage);
    if (g->host_report) cudaFreeHost(g->host_report);
    free(g);
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

/* The LM head over n rows of x: logits in the dtype into out [n, vocab]. */
static stof_status lm_head(stof_model *m, const void *x, int64_t n, void *out)
{
    enc_gpu *g = m->gpu;
    fuse_linear_args a;
    memset(&a, 0, sizeof a);
    a.dtype = g->dtype;
    a.m = n;
    a.n = g->vocab_pad;
    a.k = m->desc.hidden;
    a.x = x;
    a.w = g->lm_head;
    a.y = out;
    a.act = ACT_NONE;
    a.w_ready = true;
    fuse_choice c;
    memset(&c, 0, sizeof c);
    c.path = FUSE_PATH_CUBLASLT;
    return fuse_linear_act(m->ctx, &c, &a, g->lt);
}

/* g->logits_buf holding at least bytes. */
static stof_status logits_reserve(enc_gpu *g, size_t bytes)
{
    if (bytes <= g->logits_cap) return STOF_OK;
    if (g->logits_buf) stof_dev_free(g->ctx, g->logits_buf);
    g->logits_buf = NULL;
    g->logits_cap = 0;
    STOF_TRY(stof_dev_alloc(g->ctx, bytes, &g->logits_buf));
    g->logits_cap = bytes;
    return STOF_OK;
}

/* F32 logits of each sequence's last token [B, vocab], or of every token
 * [B, L, vocab] (zeros at padding): the dtype's GEMM output widened, as HF's
 * logits are the head's output in the model dtype. */
static stof_status write_logits(stof_model *m, const enc_request *r, const dev_inputs *in)
{
    enc_gpu *g = m->gpu;
    stof_ctx *ctx = m->ctx;
    int B = r->batch, L = r->len, H = m->desc.hidden, V = m->desc.vocab, Vp = g->vocab_pad;
    float *out = (float *)r->logits->data;
    if (!r->logits_all) {
        STOF_TRY(fuse_gather_last(ctx, g->dtype, g->x, in->cu, B, H, r->tokens, g->dtype, g->last));
        STOF_TRY(logits_reserve(g, (size_t)B * Vp * 2));
        STOF_TRY(lm_head(m, g->last, B, g->logits_buf));
        return enc_half_to_f32_rows(ctx, g->dtype, g->logits_buf, B, V, Vp, out);
    }
    /* [T, Vp] then unpacked to [B * L, Vp] behind it, then widened */
    size_t packed = ((size_t)r->tokens * Vp * 2 + 255) & ~(size_t)255;
    STOF_TRY(logits_reserve(g, packed + (size_t)B * L * Vp * 2));
    void *padded = (char *)g->logits_buf + packed;
    STOF_TRY(lm_head(m, g->x, r->tokens, g->logits_buf));
    STOF_TRY(fuse_unpack(ctx, g->dtype, g->logits_buf, in->cu, B, L, Vp, padded, r->tokens));
    return enc_half_to_f32_rows(ctx, g->dtype, padded, (int64_t)B * L, V, Vp, out);
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
    if (r->logits) STOF_TRY(write_logits(m, r, in));
    if (r->pooled) {
        if (m->info.pooling == STOF_POOL_CLS)
            STOF_TRY(enc_cls_pool(ctx, g->dtype, g->x, in->cu, B, H, r->tokens, g->pooled));
        else if (m->info.pooling == STOF_POOL_LAST)
            STOF_TRY(fuse_gather_last(ctx, g->dtype, g->x, in->cu, B, H, r->tokens, STOF_F32,
                                      g->pooled));
        else
            STOF_TRY(
                fuse_mean_pool(ctx, g->dtype, g->x, in->cu, B, H, r->tokens, STOF_F32, g->pooled));
        if (m->info.normalize) STOF_TRY(enc_l2_normalize(ctx, g->pooled, B, H));
        STOF_TRY(copy_pooled(m, r));
    }
    if (r->logits && r->logits->memory == STOF_MEM_HOST)
        STOF_CUDA_TRY(cudaStreamSynchronize((cudaStream_t)ctx->stream));
    return STOF_OK;
}

/* Every sequence empty: zeros out, nothing to compute. */
static stof_status write_empty(stof_model *m, const enc_request *r)
{
    cudaStream_t s = (cudaStream_t)m->ctx->stream;
    if (r->hidden)
        STOF_CUDA_TRY(cudaMemsetAsync(
            r->hidden->data, 0,
            (size_t)stof_tensor_numel(r->hidden) * stof_dtype_size(r->hidden->dtype), s));
    stof_tensor *f32[2] = {r->pooled, r->logits};
    for (int i = 0; i < 2; i++) {
        if (!f32[i]) continue;
        size_t bytes = (size_t)stof_tensor_numel(f32[i]) * sizeof(float);
        if (f32[i]->memory == STOF_MEM_DEVICE)
            STOF_CUDA_TRY(cudaMemsetAsync(f32[i]->data, 0, bytes, s));
        else
            memset(f32[i]->data, 0, bytes);
    }
    return STOF_OK;
}

/* ---------------------------------------------------------------- forward */

stof_status enc_gpu_forward(stof_model *m, const enc_request *r)
{
    STOF_REQUIRE(r->batch <= 65535, STOF_ERR_UNSUPPORTED,
                 "batch %d: the GPU encoder takes at most 65535 sequences", r->batch);
    if (r->tokens == 0) return write_empty(m, r);
    STOF_TRY(eng_ws_reserve(m, r->batch, r->len));
    STOF_TRY(rope_cover(m->gpu, r->len));
    int64_t rows = eng_fixed_rows(m, r, r->packed);
    bool fixed = rows > 0;
    if (!fixed) {
        rows = tune_token_bucket(r->tokens);
        if (rows > (int64_t)r->batch * r->len) rows = (int64_t)r->batch * r->len;
    }
    dev_inputs in;
    STOF_TRY(eng_upload_inputs(m, r, rows, &in));
    if (fixed) in.live = in.cu + r->batch;
    if (r->computed) return write_outputs(m, r, &in);
    char *text = eng_format_mask(m->gpu, r->mask);
    layer_plan p = eng_plan_for(m, r, rows, text);
    bool done = false;
    stof_status st = eng_graph_run(m, r, &in, &p, text, &done);
    free(text);
    STOF_TRY(st);
    if (!done) {
        stof_mask *masks[ENG_MASK_KINDS] = {NULL};
        st = eng_compile_masks(m, r, masks);
        if (st == STOF_OK) st = eng_run_layers(m, r, &in, &p, masks, NULL);
        eng_masks_destroy(masks);
        STOF_TRY(st);
    }
    return write_outputs(m, r, &in);
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

int enc_gpu_rope_epi_layers(const enc_gpu *g)
{
    return g ? g->rope_epi_layers : 0;
}

int enc_gpu_rope_positions(const enc_gpu *g)
{
    return g ? g->rope_positions : 0;
}
