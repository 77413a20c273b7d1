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

#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

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
    STOF_TRY(eng_upload_weights(m, g));
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
    eng_graphs_drop(g);
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
    STOF_TRY(eng_ws_reserve(m, r->batch, r->len));
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
        stof_mask *mask = NULL;
        STOF_TRY(eng_compile_mask(m, r, &mask));
        st = eng_run_layers(m, r, &in, &p, mask, NULL);
        stof_mask_destroy(mask);
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
