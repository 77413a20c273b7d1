/*
 * context_gpu.c — the GPU side of the stof_ctx: the device's properties (read
 * once, used by the kernel selector), its stream, its workspace and its memory.
 * Device memory is stream-ordered (cudaMallocAsync) so that creating a mask or
 * a workspace never synchronises the device. Built only with STOF_CUDA.
 */
#include "core.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

int stof_gpu_count(void)
{
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        (void)cudaGetLastError();
        return 0;
    }
    return n;
}

stof_status stof_ctx_init_gpu(stof_ctx *ctx, const stof_ctx_params *p)
{
    int n = stof_gpu_count();
    STOF_REQUIRE(n > 0, STOF_ERR_NO_DEVICE, "a GPU was asked for but no CUDA device is usable");
    STOF_REQUIRE(p->gpu_index >= 0 && p->gpu_index < n, STOF_ERR_INVALID_ARG,
                 "gpu_index %d is out of range (%d CUDA devices)", p->gpu_index, n);
    STOF_CUDA_TRY(cudaSetDevice(p->gpu_index));
    struct cudaDeviceProp prop;
    STOF_CUDA_TRY(cudaGetDeviceProperties(&prop, p->gpu_index));
    STOF_REQUIRE(prop.major >= 8, STOF_ERR_UNSUPPORTED,
                 "device %d (%s) has compute capability %d.%d; stof needs 8.0 or newer",
                 p->gpu_index, prop.name, prop.major, prop.minor);
    ctx->device = STOF_DEVICE_GPU;
    ctx->gpu_index = p->gpu_index;
    snprintf(ctx->device_name, sizeof ctx->device_name, "%s", prop.name);
    ctx->sm_count = prop.multiProcessorCount;
    ctx->cc_major = prop.major;
    ctx->cc_minor = prop.minor;
    ctx->smem_per_block_optin = prop.sharedMemPerBlockOptin;
    ctx->smem_per_sm = prop.sharedMemPerMultiprocessor;
    ctx->max_threads_per_sm = prop.maxThreadsPerMultiProcessor;
    ctx->regs_per_sm = prop.regsPerMultiprocessor;
    ctx->l2_bytes = prop.l2CacheSize > 0 ? (size_t)prop.l2CacheSize : 0;
    if (p->stream) {
        ctx->stream = p->stream;
    } else {
        /* A blocking stream: work the caller queued on the legacy default stream
         * (a plain cudaMemcpy or cudaMemset of an input) finishes before ours starts. */
        cudaStream_t s;
        STOF_CUDA_TRY(cudaStreamCreateWithFlags(&s, cudaStreamDefault));
        ctx->stream = s;
        ctx->own_stream = true;
    }
    /* Keep freed blocks in the pool: re-allocation on the hot path stays cheap. */
    cudaMemPool_t pool;
    if (cudaDeviceGetDefaultMemPool(&pool, p->gpu_index) == cudaSuccess) {
        uint64_t keep = UINT64_MAX;
        (void)cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep);
    }
    (void)cudaGetLastError();
    const size_t counters = 2 * STOF_WORK_SLOTS * sizeof(int);
    STOF_CUDA_TRY(cudaMalloc((void **)&ctx->work_counters, counters));
    STOF_CUDA_TRY(cudaMemset(ctx->work_counters, 0, counters));
    if (p->workspace_bytes) {
        void *ws;
        STOF_TRY(stof_ctx_workspace(ctx, p->workspace_bytes, &ws));
    }
    return STOF_OK;
}

void stof_ctx_release_gpu(stof_ctx *ctx)
{
    cudaStream_t s = (cudaStream_t)ctx->stream;
    if (s) (void)cudaStreamSynchronize(s);
    if (ctx->ws) (void)cudaFree(ctx->ws);
    if (ctx->work_counters) (void)cudaFree(ctx->work_counters);
    if (ctx->cublaslt && ctx->cublaslt_destroy) ctx->cublaslt_destroy(ctx->cublaslt);
    if (ctx->own_stream && s) (void)cudaStreamDestroy(s);
    (void)cudaGetLastError();
}

stof_status stof_ctx_sync_gpu(stof_ctx *ctx)
{
    STOF_CUDA_TRY(cudaStreamSynchronize((cudaStream_t)ctx->stream));
    return STOF_OK;
}

stof_status stof_ctx_set_stream(stof_ctx *ctx, void *stream)
{
    STOF_REQUIRE(ctx, STOF_ERR_INVALID_ARG, "stof_ctx_set_stream: ctx is NULL");
    STOF_REQUIRE(ctx->device == STOF_DEVICE_GPU, STOF_ERR_INVALID_ARG,
                 "stof_ctx_set_stream: the context runs on the CPU");
    if (ctx->own_stream) {
        /* Work already queued on our stream finishes before the caller's stream takes over. */
        STOF_CUDA_TRY(cudaStreamSynchronize((cudaStream_t)ctx->stream));
        STOF_CUDA_TRY(cudaStreamDestroy((cudaStream_t)ctx->stream));
        ctx->own_stream = false;
    }
    ctx->stream = stream; /* NULL: the legacy default stream */
    return STOF_OK;
}

stof_status stof_ctx_workspace(stof_ctx *ctx, size_t bytes, void **out)
{
    *out = NULL;
    STOF_REQUIRE(ctx->device == STOF_DEVICE_GPU, STOF_ERR_INTERNAL,
                 "device workspace requested on a CPU context");
    if (bytes > ctx->ws_bytes) {
        /* Earlier users of the old block may still be queued: wait before freeing. */
        if (ctx->ws) {
            STOF_CUDA_TRY(cudaStreamSynchronize((cudaStream_t)ctx->stream));
            STOF_CUDA_TRY(cudaFree(ctx->ws));
            ctx->ws = NULL;
            ctx->ws_bytes = 0;
        }
        size_t grown = bytes + bytes / 4;
        void *p = NULL;
        STOF_CUDA_TRY(cudaMalloc(&p, grown));
        ctx->ws = p;
        ctx->ws_bytes = grown;
    }
    *out = ctx->ws;
    return STOF_OK;
}

stof_status stof_dev_alloc(stof_ctx *ctx, size_t bytes, void **out)
{
    *out = NULL;
    if (bytes == 0) bytes = 16;
    stof_status st = STOF_CUDA(cudaMallocAsync(out, bytes, (cudaStream_t)ctx->stream));
    if (st == STOF_ERR_OOM)
        return stof_error(STOF_ERR_OOM, "out of device memory allocating %zu bytes on %s", bytes,
                          ctx->device_name);
    return st;
}

void stof_dev_free(stof_ctx *ctx, void *ptr)
{
    if (ptr) (void)cudaFreeAsync(ptr, (cudaStream_t)ctx->stream);
}

static stof_status dev_copy(stof_ctx *ctx, void *dst, const void *src, size_t bytes,
                            enum cudaMemcpyKind kind)
{
    if (!bytes) return STOF_OK;
    if (!ctx || ctx->device != STOF_DEVICE_GPU) return STOF_CUDA(cudaMemcpy(dst, src, bytes, kind));
    return STOF_CUDA(cudaMemcpyAsync(dst, src, bytes, kind, (cudaStream_t)ctx->stream));
}

stof_status stof_dev_download(stof_ctx *ctx, void *host_dst, const void *dev_src, size_t bytes)
{
    return dev_copy(ctx, host_dst, dev_src, bytes, cudaMemcpyDeviceToHost);
}

stof_status stof_dev_upload(stof_ctx *ctx, void *dev_dst, const void *host_src, size_t bytes)
{
    return dev_copy(ctx, dev_dst, host_src, bytes, cudaMemcpyHostToDevice);
}

stof_status stof_cuda_status(int cuda_err, const char *what, const char *file, int line)
{
    if (cuda_err == (int)cudaSuccess) return STOF_OK;
    cudaError_t e = (cudaError_t)cuda_err;
    /* Clear the sticky-free error state so later calls are not blamed for it. */
    (void)cudaGetLastError();
    stof_status st = e == cudaErrorMemoryAllocation ? STOF_ERR_OOM : STOF_ERR_CUDA;
    const char *base = strrchr(file, '/');
    return stof_error(st, "%s failed: %s (%s) at %s:%d", what, cudaGetErrorString(e),
                      cudaGetErrorName(e), base ? base + 1 : file, line);
}
