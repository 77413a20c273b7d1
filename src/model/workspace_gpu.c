/*
 * workspace_gpu.c — the device workspace of the forward and what depends on
 * its addresses (the captured graphs), and the rows a forward computes.
 *
 * The workspace is sized for B * L tokens at the first forward of a (B, L)
 * and kept, so later forwards of that shape or smaller allocate nothing of
 * their own.
 */
#include "model/engine_gpu.h"

#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

void eng_graph_release(enc_gpu *g, enc_graph *e)
{
    g->gen++;
    if (e->exec) cudaGraphExecDestroy(e->exec);
    eng_masks_destroy(e->mask);
    free(e->mask_text);
    memset(e, 0, sizeof *e);
}

/* Every captured bucket goes (their pointers into the workspace are stale). */
void eng_graphs_drop(enc_gpu *g)
{
    for (int i = 0; i < ENC_GRAPHS; i++)
        if (g->graphs[i].used) eng_graph_release(g, &g->graphs[i]);
}

/* Buffers for B sequences of up to L tokens; kept when they already fit. */
stof_status eng_ws_reserve(stof_model *m, int B, int L)
{
    enc_gpu *g = m->gpu;
    int64_t tokens = (int64_t)B * L;
    if (g->ws && tokens <= g->cap_tokens && B <= g->cap_batch) return STOF_OK;
    eng_graphs_drop(g);
    if (tokens < g->cap_tokens) tokens = g->cap_tokens;
    int batch = B > g->cap_batch ? B : g->cap_batch;
    const eng_widths *wd = &g->widths;
    size_t es = 2, H = (size_t)m->desc.hidden, T = (size_t)tokens;
    /* the f32 hidden output is unpacked into the QKV buffer: B * L * H at least */
    size_t qkv_w = (size_t)wd->qkv > H ? (size_t)wd->qkv : H;
    bool pre = !g->bert; /* pre-norm layers keep h apart from x */
    size_t o_in = 0;
    size_t o_x = o_in + align256((size_t)(2 * batch + 1 + 3 * tokens + 16) * 4);
    size_t o_h = o_x + align256(T * H * es);
    size_t o_qkv = o_h + (pre ? align256(T * H * es) : 0);
    size_t o_attn = o_qkv + align256(T * qkv_w * es);
    size_t o_inter = o_attn + align256(T * (size_t)wd->attn * es);
    size_t o_gated = o_inter + align256(T * (size_t)wd->inter * es);
    size_t o_last = o_gated + (pre ? align256(T * (size_t)wd->inter / 2 * es) : 0);
    size_t o_pool = o_last + align256((size_t)batch * H * es);
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
    g->h = pre ? base + o_h : NULL;
    g->qkv = base + o_qkv;
    g->attn = base + o_attn;
    g->inter = base + o_inter;
    g->gated = pre ? base + o_gated : NULL;
    g->last = base + o_last;
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

/* *event, created (without timing) on first use. */
stof_status eng_event_once(void **event)
{
    if (*event) return STOF_OK;
    cudaEvent_t e = NULL;
    STOF_CUDA_TRY(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    *event = e;
    return STOF_OK;
}

/* The rows a forward of a small batch computes whatever its token count: B *
 * L, for a batch whose inputs are packed on the device (packed) and whose
 * graph can be told apart by shape and mask text; 0 for every other forward
 * (it computes the bucket of its token count). */
int64_t eng_fixed_rows(const stof_model *m, const enc_request *r, bool packed)
{
    int64_t n = (int64_t)r->batch * r->len;
    if (!packed || n > ENC_FIXED_ROWS || r->eager || r->plan || r->len > m->info.max_positions)
        return 0;
    return stof_mask_spec_textual(r->mask ? r->mask : m->gpu->full) ? n : 0;
}
