/*
 * core.h — internals shared by every part of stof: error reporting, the
 * context, tensor checks and host-side half-precision conversions.
 * Host code is C11; .cu files include this header too.
 */
#ifndef STOF_CORE_H
#define STOF_CORE_H

#include "stof.h"

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- errors: every failing path sets the thread's message and returns a status */

#if defined(__GNUC__)
#define STOF_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define STOF_PRINTF(a, b)
#endif

/* Records the message for stof_last_error() and returns status. */
stof_status stof_error(stof_status status, const char *fmt, ...) STOF_PRINTF(2, 3);
void stof_clear_error(void);

/* Return early with an error when cond does not hold. */
#define STOF_REQUIRE(cond, status, ...)                                                    \
    do {                                                                                   \
        if (!(cond)) return stof_error((status), __VA_ARGS__);                             \
    } while (0)

/* Propagate a failing status. */
#define STOF_TRY(expr)                                                                     \
    do {                                                                                   \
        stof_status stof_try_st_ = (expr);                                                 \
        if (stof_try_st_ != STOF_OK) return stof_try_st_;                                  \
    } while (0)

/* Wrap a CUDA runtime call: on failure, record "<call> failed: <cuda message>". */
stof_status stof_cuda_status(int cuda_err, const char *what, const char *file, int line);
#define STOF_CUDA(call) stof_cuda_status((int)(call), #call, __FILE__, __LINE__)
#define STOF_CUDA_TRY(call) STOF_TRY(STOF_CUDA(call))

/* ---- logging: STOF_LOG=debug|info|warn (default warn) on stderr */

enum { STOF_LOG_DEBUG = 0, STOF_LOG_INFO = 1, STOF_LOG_WARN = 2 };
void stof_log(int level, const char *fmt, ...) STOF_PRINTF(2, 3);
/* Whether stof_log prints at this level (to skip formatting what it would drop). */
bool stof_log_on(int level);

/* ---- context */

struct stof_ctx {
    stof_device device; /* CPU or GPU, never AUTO */
    int gpu_index;
    void *stream; /* cudaStream_t */
    bool own_stream;
    char device_name[256];
    int sm_count;
    int cc_major, cc_minor;
    size_t smem_per_block_optin; /* bytes a block may opt into */
    size_t smem_per_sm;
    int max_threads_per_sm;
    int regs_per_sm;
    size_t l2_bytes; /* the device's L2 cache (0: unknown) */
    int cpu_threads;
    /* device workspace (one block, grown outside a forward) */
    void *ws;
    size_t ws_bytes;
    /* Work counters of persistent kernels, which take their items from one
     * (grid.cuh): STOF_WORK_SLOTS of two ints, zero between launches (each
     * launch's last CTA zeroes its own), handed out in turn so that launches
     * in flight on different streams (up to that many) use different ones. */
    int *work_counters;
    unsigned work_turn;
    void *cublaslt; /* src/fuse state (cuBLASLt handle + plan cache), created on first use; opaque elsewhere */
    void (*cublaslt_destroy)(void *handle);
};

#define STOF_WORK_SLOTS 64
/* The next launch's work counter pair (a device pointer; NULL on a CPU ctx). */
int *stof_ctx_work_counter(stof_ctx *ctx);

/* The GPU side of a context (context_gpu.c; in a CPU-only build, errors
 * saying that the build has no CUDA). */
stof_status stof_ctx_init_gpu(stof_ctx *ctx, const stof_ctx_params *p);
void stof_ctx_release_gpu(stof_ctx *ctx);
stof_status stof_ctx_sync_gpu(stof_ctx *ctx);

/* Device workspace of at least bytes (contents undefined). Invalidates earlier
 * pointers when it grows, so take it once per call. */
stof_status stof_ctx_workspace(stof_ctx *ctx, size_t bytes, void **out);

/* Stream-ordered device allocation on the ctx's stream (cudaMallocAsync). */
stof_status stof_dev_alloc(stof_ctx *ctx, size_t bytes, void **out);
void stof_dev_free(stof_ctx *ctx, void *ptr);
/* Copies between host and device memory, queued on the ctx's stream (the host
 * side must stay valid until the stream reaches it; pageable host memory is
 * staged before the call returns); with ctx NULL or a CPU ctx, synchronous. */
stof_status stof_dev_download(stof_ctx *ctx, void *host_dst, const void *dev_src, size_t bytes);
stof_status stof_dev_upload(stof_ctx *ctx, void *dev_dst, const void *host_src, size_t bytes);
/* Host allocation that records an OOM error on failure. */
stof_status stof_host_alloc(size_t bytes, void **out);
stof_status stof_host_calloc(size_t count, size_t size, void **out);

/* ---- tensors */

/* Validates descriptor fields (non-NULL data, dtype, 1 <= ndim <= 4, shape >= 1,
 * strides >= 0); name is used in messages ("q", "lengths_q"). */
stof_status stof_tensor_check(const stof_tensor *t, const char *name);
/* The tensor's memory must match where the ctx runs. */
stof_status stof_tensor_check_memory(const stof_ctx *ctx, const stof_tensor *t, const char *name);
bool stof_tensor_is_contiguous(const stof_tensor *t);
int64_t stof_tensor_numel(const stof_tensor *t);

/* STOF_ERR_FORMAT naming the file, the tensor and the element when one of x[0..n)
 * is NaN or infinite (a model's weights, checked as they are loaded). */
/* The error for a non-finite value v at element i of a weight tensor (STOF_ERR_FORMAT). */
stof_status stof_nonfinite_error(float v, int64_t i, const char *file, const char *tensor);
stof_status stof_check_finite(const float *x, int64_t n, const char *file, const char *tensor);

/* ---- host half precision (round to nearest even; NaN/Inf preserved) */

uint16_t stof_f32_to_f16(float f);
float stof_f16_to_f32(uint16_t h);
uint16_t stof_f32_to_bf16(float f);
float stof_bf16_to_f32(uint16_t h);
/* Element i of a contiguous F32/F16/BF16 host buffer, as float. */
float stof_load_f(const void *data, stof_dtype dtype, int64_t i);
void stof_store_f(void *data, stof_dtype dtype, int64_t i, float v);

/* ---- files (file.c): errors name the problem (no such file, is a folder, a FIFO
 * where a regular file belongs, permission denied) */

/* Whether anything (a file, a folder, ...) is at path. */
bool stof_file_exists(const char *path);
/* STOF_OK when path is a regular file, else STOF_ERR_IO saying what is there. */
stof_status stof_file_check_regular(const char *path);
/* Opens path for reading: a regular file, or with allow_stream also a FIFO or a
 * character device (a pipe given as input); never blocks on a FIFO to check it. */
stof_status stof_file_open(const char *path, bool allow_stream, FILE **out);
/* The whole regular file, NUL-terminated (*len does not count the NUL);
 * STOF_ERR_FORMAT when it is larger than max_bytes. */
stof_status stof_read_file(const char *path, size_t max_bytes, char **out, size_t *len);

/* ---- hashing */

/* FNV-1a, 64 bits, chainable: h = stof_fnv1a(STOF_FNV_BASIS, p, n), then again with h
 * for more bytes. For hash tables and cache keys; not a cryptographic hash. */
#define STOF_FNV_BASIS 14695981039346656037ull
static inline uint64_t stof_fnv1a(uint64_t h, const void *p, size_t n)
{
    const unsigned char *b = (const unsigned char *)p;
    for (size_t i = 0; i < n; i++)
        h = (h ^ b[i]) * 1099511628211ull;
    return h;
}

/* ---- small helpers */

static inline int64_t stof_cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

#ifdef __cplusplus
}
#endif

#endif /* STOF_CORE_H */
