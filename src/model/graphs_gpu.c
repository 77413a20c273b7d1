/*
 * graphs_gpu.c — CUDA graphs per shape bucket.
 *
 * A forward computes on Tb >= T packed rows, Tb the token
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
 * report (eng_launch_ahead): the GPU goes from the scan straight into the layers
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
#include "model/engine_gpu.h"

#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

static enc_graph *graph_find(enc_gpu *g, const enc_request *r, int64_t rows, const char *text,
                             const layer_plan *p)
{
    for (int i = 0; i < ENC_GRAPHS; i++) {
        enc_graph *e = &g->graphs[i];
        if (e->used && e->batch == r->batch && e->len == r->len && e->rows == rows &&
            e->has_types == (r->types != NULL) && strcmp(e->mask_text, text) == 0 &&
            eng_plan_equal(&e->plan, p))
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
    eng_graph_release(g, lru);
    return lru;
}

/* Captures the mask rebuild and every layer of this bucket into e->exec; on
 * failure e->failed and the error is cleared (the bucket runs kernel by kernel). */
static void graph_capture(stof_model *m, const enc_request *r, const dev_inputs *in, enc_graph *e)
{
    enc_gpu *g = m->gpu;
    stof_ctx *ctx = m->ctx;
    stof_status st = eng_compile_reusable_masks(m, r, in, e->mask);
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
    if (st == STOF_OK) st = eng_event_once(&g->fork_event);
    if (st == STOF_OK) st = eng_event_once(&g->mask_event);
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
        for (int k = 0; k < ENG_MASK_KINDS && st == STOF_OK; k++)
            if (e->mask[k]) st = stof_mask_rebuild(e->mask[k]);
        if (st == STOF_OK) st = STOF_CUDA(cudaEventRecord((cudaEvent_t)g->mask_event, ms));
        ctx->stream = s;
        if (st == STOF_OK) st = eng_run_layers(m, r, in, &e->plan, e->mask, g->mask_event);
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
        eng_masks_destroy(e->mask);
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
stof_status eng_graph_run(stof_model *m, const enc_request *r, const dev_inputs *in,
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

/* Launches the layers of a small batch ahead of the scan's read back when its
 * graph is captured (the inputs are packed on the device before it); *computed
 * says so. The graph only reads the workspace, whose packed ids and types the
 * packing keeps inside their tables and whose lengths it clamps to [0, L]:
 * a forward whose report then names a problem fails having computed nothing
 * it writes out. */
stof_status eng_launch_ahead(stof_model *m, const enc_request *r, bool *computed)
{
    enc_gpu *g = m->gpu;
    int64_t rows = eng_fixed_rows(m, r, true);
    cudaStream_t s = (cudaStream_t)m->ctx->stream;
    if (!rows || !can_launch_graph(s)) return STOF_OK;
    enc_ahead_memo *k = &g->ahead_memo;
    bool has_types = r->types != NULL;
    enc_graph *e = NULL;
    if (!r->mask && k->valid && k->gen == g->gen && k->batch == r->batch && k->len == r->len &&
        k->has_types == has_types) {
        e = k->graph;
    } else {
        char *text = eng_format_mask(g, r->mask);
        if (!text) return STOF_OK;
        layer_plan p = eng_plan_for(m, r, rows, text);
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
