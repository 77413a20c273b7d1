/*
 * weights_gpu.c — the weights on the device. The loader (weights.c) builds
 * one canonical tensor at a time in the run dtype in a host staging buffer;
 * this sink copies each into a device allocation of its own as it comes, so
 * no whole-model copy exists on the host, and m->w holds device pointers.
 * Each copy is complete when put returns: the loader reuses the staging
 * buffer then. A GLU's up projection (and its bias) lands with its halves
 * interleaved (fuse_glu_upload), the layout the GEMM's GLU epilogue and
 * fuse_glu read; every path of the GPU engine sees only that layout.
 */
#include "model/engine_gpu.h"

#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

static stof_status gpu_put(weight_sink *sink, const char *what, void **slot, const void *src,
                           size_t bytes, int glu_half)
{
    enc_gpu *g = sink->user;
    if (g->n_allocs == g->cap_allocs) {
        int cap = g->cap_allocs ? 2 * g->cap_allocs : 64;
        void **grown = realloc(g->allocs, (size_t)cap * sizeof *grown);
        STOF_REQUIRE(grown, STOF_ERR_OOM, "out of host memory listing the weights at %s", what);
        g->allocs = grown;
        g->cap_allocs = cap;
    }
    void *dev = NULL;
    stof_status st = stof_dev_alloc(g->ctx, bytes ? bytes : 1, &dev);
    if (st != STOF_OK)
        return stof_error(st, "uploading %s (%zu bytes): %s", what, bytes, stof_last_error());
    g->allocs[g->n_allocs++] = dev;
    *slot = dev;
    if (glu_half > 0) {
        st = fuse_glu_upload(g->ctx, dev, src, glu_half, bytes / (2 * (size_t)glu_half));
        if (st != STOF_OK)
            return stof_error(st, "uploading %s (%zu bytes): %s", what, bytes, stof_last_error());
        return STOF_OK;
    }
    /* on the ctx's stream, which the allocation is ordered on (cudaMallocAsync) */
    cudaStream_t s = (cudaStream_t)g->ctx->stream;
    STOF_CUDA_TRY(cudaMemcpyAsync(dev, src, bytes, cudaMemcpyHostToDevice, s));
    return STOF_CUDA(cudaStreamSynchronize(s));
}

weight_sink eng_weight_sink(enc_gpu *g)
{
    weight_sink s = {gpu_put, g};
    return s;
}

void eng_weights_free(enc_gpu *g)
{
    for (int i = 0; i < g->n_allocs; i++)
        stof_dev_free(g->ctx, g->allocs[i]);
    free(g->allocs);
    g->allocs = NULL;
    g->n_allocs = g->cap_allocs = 0;
}
