/*
 * weights_gpu.c — the weights on the device. The loader (weights.c) builds
 * one canonical tensor at a time in the run dtype in a host staging buffer;
 * this sink copies each into a device allocation of its own as it comes, so
 * no whole-model copy exists on the host, and m->w holds device pointers.
 * Each copy is complete when put returns: the loader reuses the staging
 * buffer then.
 */
#include "model/engine_gpu.h"

#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

static stof_status gpu_put(weight_sink *sink, const char *what, void **slot, const void *src,
                           size_t bytes)
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
    /* on the ctx's stream, which the allocation is ordered on (cudaMallocAsync) */
    cudaStream_t s = (cudaStream_t)g->ctx->stream;
    STOF_CUDA_TRY(cudaMemcpyAsync(dev, src, bytes, cudaMemcpyHostToDevice, s));
    STOF_CUDA_TRY(cudaStreamSynchronize(s));
    *slot = dev;
    return STOF_OK;
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
