/*
 * context.c — the stof_ctx: which device runs the work (CPU, or a GPU through
 * context_gpu.c), its properties and its host memory. A CPU-only build
 * (STOF_HAVE_CUDA 0) has no context_gpu.c: the GPU entry points below say so.
 */
#include "core.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

stof_ctx_params stof_ctx_default_params(void)
{
    stof_ctx_params p;
    memset(&p, 0, sizeof p);
    p.device = STOF_DEVICE_AUTO;
    return p;
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
        st = stof_ctx_init_gpu(ctx, &p);
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
    if (ctx->device == STOF_DEVICE_GPU) stof_ctx_release_gpu(ctx);
    free(ctx);
}

stof_device stof_ctx_device(const stof_ctx *ctx) { return ctx ? ctx->device : STOF_DEVICE_CPU; }

const char *stof_ctx_device_name(const stof_ctx *ctx) { return ctx ? ctx->device_name : ""; }

void *stof_ctx_stream(const stof_ctx *ctx) { return ctx ? ctx->stream : NULL; }

stof_status stof_ctx_synchronize(stof_ctx *ctx)
{
    STOF_REQUIRE(ctx, STOF_ERR_INVALID_ARG, "stof_ctx_synchronize: ctx is NULL");
    if (ctx->device == STOF_DEVICE_GPU) return stof_ctx_sync_gpu(ctx);
    return STOF_OK;
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

int *stof_ctx_work_counter(stof_ctx *ctx)
{
    if (!ctx->work_counters) return NULL;
    const unsigned turn = __atomic_fetch_add(&ctx->work_turn, 1u, __ATOMIC_RELAXED);
    return ctx->work_counters + 2 * (turn % STOF_WORK_SLOTS);
}

#if !STOF_HAVE_CUDA
/* ---- a CPU-only build: no GPU context can exist, so these are reached only
 * by asking for one (or by internal misuse, which they report). */

#define NO_CUDA "this stof was built without CUDA (STOF_CUDA=OFF): only the CPU backend exists"

int stof_gpu_count(void) { return 0; }

stof_status stof_ctx_init_gpu(stof_ctx *ctx, const stof_ctx_params *p)
{
    return stof_error(STOF_ERR_NO_DEVICE, "a GPU was asked for, but " NO_CUDA);
}

void stof_ctx_release_gpu(stof_ctx *ctx) {}

stof_status stof_ctx_sync_gpu(stof_ctx *ctx) { return stof_error(STOF_ERR_INTERNAL, NO_CUDA); }

stof_status stof_ctx_set_stream(stof_ctx *ctx, void *stream)
{
    STOF_REQUIRE(ctx, STOF_ERR_INVALID_ARG, "stof_ctx_set_stream: ctx is NULL");
    return stof_error(STOF_ERR_INVALID_ARG, "stof_ctx_set_stream: the context runs on the CPU");
}

stof_status stof_ctx_workspace(stof_ctx *ctx, size_t bytes, void **out)
{
    *out = NULL;
    return stof_error(STOF_ERR_INTERNAL, "device workspace requested: " NO_CUDA);
}

stof_status stof_dev_alloc(stof_ctx *ctx, size_t bytes, void **out)
{
    *out = NULL;
    return stof_error(STOF_ERR_INTERNAL, "device allocation requested: " NO_CUDA);
}

void stof_dev_free(stof_ctx *ctx, void *ptr) {}

stof_status stof_dev_download(stof_ctx *ctx, void *host_dst, const void *dev_src, size_t bytes)
{
    if (!bytes) return STOF_OK;
    return stof_error(STOF_ERR_INTERNAL, "device memory read: " NO_CUDA);
}

stof_status stof_dev_upload(stof_ctx *ctx, void *dev_dst, const void *host_src, size_t bytes)
{
    if (!bytes) return STOF_OK;
    return stof_error(STOF_ERR_INTERNAL, "device memory write: " NO_CUDA);
}

stof_status stof_cuda_status(int cuda_err, const char *what, const char *file, int line)
{
    if (cuda_err == 0) return STOF_OK;
    return stof_error(STOF_ERR_INTERNAL, "%s reached in a build " NO_CUDA, what);
}
#endif
