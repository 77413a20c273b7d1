/*
 * context.c — the stof_ctx: which device runs the work, its stream, its
 * properties (read once, used by the kernel selector), and its memory.
 * Device memory is stream-ordered (cudaMallocAsync) so that creating a mask
 * or a workspace never synchronises the device.
 */
#include "core.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

stof_ctx_params stof_ctx_default_params(void)
{
    stof_ctx_params p;
    memset(&p, 0, sizeof p);
    p.device = STOF_DEVICE_AUTO;
    return p;
}

int stof_gpu_count(void)
{
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        (void)cudaGetLastError();
        return 0;
    }
    return n;
}

static stof_status ctx_init_gpu(stof_ctx *ctx, const stof_ctx_params *p)
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
    if (p->workspace_bytes) {
        void *ws;
        STOF_TRY(stof_ctx_workspace(ctx, p->workspace_bytes, &ws));
    }
    return STOF_OK;
}

stof_status stof_ctx_create(const stof_ctx_params *params, stof_ctx **out)
{
    STOF_REQUIRE(out, STOF_ERR_INVALID_ARG, "stof_ctx_create: out is NULL");
    *out = NULL;
    stof_ctx_params p = params ? *params : stof_ctx_default_params();
    STOF_REQUIRE(p.device == STOF_DEVICE_AUTO || p.device == STOF_DEVICE_CPU ||
                     p.device == STOF_DEVICE_GPU,
                 STOF_ERR_INVALID_ARG, "unknown device kind %d", (int)p.device);
    STOF_REQUIRE(p.cpu_threads >= 0, STOF_ERR_INVALID_ARG, "cpu_threads is %d (must be >= 0)",
                 p.cpu_threads);
    STOF_REQUIRE(p.gpu_index >= 0, STOF_ERR_INVALID_ARG, "gpu_index is %d (must be >= 0)",
                 p.gpu_index);
    STOF_REQUIRE(!(p.device == STOF_DEVICE_CPU && p.stream), STOF_ERR_INVALID_ARG,
                 "a stream was given for a CPU context");
    stof_ctx *ctx = calloc(1, sizeof *ctx);
    STOF_REQUIRE(ctx, STOF_ERR_OOM, "out of host memory creating a context");
    ctx->cpu_threads = p.cpu_threads;
    stof_status st = STOF_OK;
    bool want_gpu = p.device == STOF_DEVICE_GPU ||
                    (p.device == STOF_DEVICE_AUTO && stof_gpu_count() > 0);
    if (want_gpu) {
        st = ctx_init_gpu(ctx, &p);
    } else {
        ctx->device = STOF_DEVICE_CPU;
        snprintf(ctx->device_name, sizeof ctx->device_name, "cpu");
    }
    if (st != STOF_OK) {
        stof_ctx_destroy(ctx);
        return st;
    }
    *out = ctx;
    return STOF_OK;
}

void stof_ctx_destroy(stof_ctx *ctx)
{
    if (!ctx) return;
    if (ctx->device == STOF_DEVICE_GPU) {
        cudaStream_t s = (cudaStream_t)ctx->stream;
        if (s) (void)cudaStreamSynchronize(s);
        if (ctx->ws) (void)cudaFree(ctx->ws);
        if (ctx->cublaslt && ctx->cublaslt_destroy) ctx->cublaslt_destroy(ctx->cublaslt);
        if (ctx->own_stream && s) (void)cudaStreamDestroy(s);
        (void)cudaGetLastError();
    }
    free(ctx);
}

stof_device stof_ctx_device(const stof_ctx *ctx) { return ctx ? ctx->device : STOF_DEVICE_CPU; }

const char *stof_ctx_device_name(const stof_ctx *ctx) { return ctx ? ctx->device_name : ""; }

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

void *stof_ctx_stream(const stof_ctx *ctx) { return ctx ? ctx->stream : NULL; }

stof_status stof_ctx_synchronize(stof_ctx *ctx)
{
    STOF_REQUIRE(ctx, STOF_ERR_INVALID_ARG, "stof_ctx_synchronize: ctx is NULL");
    if (ctx->device == STOF_DEVICE_GPU)
        STOF_CUDA_TRY(cudaStreamSynchronize((cudaStream_t)ctx->stream));
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

stof_status stof_host_alloc(size_t bytes, void **out)
{
    *out = malloc(bytes ? bytes : 1);
    STOF_REQUIRE(*out, STOF_ERR_OOM, "out of host memory allocating %zu bytes", bytes);
    return STOF_OK;
}

stof_status stof_host_calloc(size_t count, size_t size, void **out)
{
    *out = calloc(count ? count : 1, size ? size : 1);
    STOF_REQUIRE(*out, STOF_ERR_OOM, "out of host memory allocating %zu x %zu bytes", count, size);
    return STOF_OK;
}
