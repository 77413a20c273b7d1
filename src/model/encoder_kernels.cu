/*
 * encoder_kernels.cu — the few small kernels the GPU encoder needs beside
 * src/fuse: widening the last hidden state to f32, CLS pooling, L2
 * normalisation of pooled rows, and the range check of token ids and types
 * that arrive in device memory.
 *
 * The one non-obvious choice: the token check reports the first offending
 * packed token through atomicMin, so the host reads back eight bytes and can
 * still name the exact (sequence, position) and value in its message.
 */
#include "model/encoder.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

static __device__ __forceinline__ float load_half(const void *p, int64_t i, int bf16)
{
    if (bf16) return __bfloat162float(((const __nv_bfloat16 *)p)[i]);
    return __half2float(((const __half *)p)[i]);
}

static int grid_for(int64_t n, int threads)
{
    int64_t blocks = (n + threads - 1) / threads;
    return (int)(blocks > 4096 ? 4096 : blocks < 1 ? 1 : blocks);
}

static stof_status launched(const char *what)
{
    return stof_cuda_status((int)cudaGetLastError(), what, __FILE__, __LINE__);
}

/* ---------------------------------------------------------------- widening */

static __global__ void half_to_f32_kernel(const void *src, int64_t n, int bf16, float *dst)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        dst[i] = load_half(src, i, bf16);
}

extern "C" stof_status enc_half_to_f32(stof_ctx *ctx, stof_dtype dtype, const void *src, int64_t n,
                                       float *dst)
{
    if (n <= 0) return STOF_OK;
    half_to_f32_kernel<<<grid_for(n, 256), 256, 0, (cudaStream_t)ctx->stream>>>(
        src, n, dtype == STOF_BF16, dst);
    return launched("half_to_f32_kernel");
}

/* ---------------------------------------------------------------- pooling */

/* out[b] = row cu[b] of x as f32, zeros for an empty sequence. */
static __global__ void cls_pool_kernel(const void *x, const int32_t *cu, int hidden, int64_t tokens,
                                       int bf16, float *out)
{
    const int b = blockIdx.x;
    const int64_t first = cu[b];
    const bool has = cu[b + 1] > first && first >= 0 && first < tokens;
    for (int c = threadIdx.x; c < hidden; c += blockDim.x)
        out[(int64_t)b * hidden + c] = has ? load_half(x, first * hidden + c, bf16) : 0.0f;
}

extern "C" stof_status enc_cls_pool(stof_ctx *ctx, stof_dtype dtype, const void *x,
                                    const int32_t *cu_seqlens, int batch, int hidden,
                                    int64_t tokens, float *out)
{
    cls_pool_kernel<<<batch, 256, 0, (cudaStream_t)ctx->stream>>>(x, cu_seqlens, hidden, tokens,
                                                                  dtype == STOF_BF16, out);
    return launched("cls_pool_kernel");
}

/* x[b] /= max(||x[b]||, 1e-12), one CTA of 256 threads per row. */
static __global__ void l2_normalize_kernel(float *x, int cols)
{
    __shared__ float partial[8];
    float *row = x + (int64_t)blockIdx.x * cols;
    float s = 0.f;
    for (int c = threadIdx.x; c < cols; c += blockDim.x)
        s += row[c] * row[c];
    for (int o = 16; o > 0; o >>= 1)
        s += __shfl_xor_sync(0xffffffffu, s, o);
    if ((threadIdx.x & 31) == 0) partial[threadIdx.x >> 5] = s;
    __syncthreads();
    float total = 0.f;
    for (int w = 0; w < 8; w++)
        total += partial[w];
    const float inv = 1.0f / fmaxf(sqrtf(total), 1e-12f);
    for (int c = threadIdx.x; c < cols; c += blockDim.x)
        row[c] *= inv;
}

extern "C" stof_status enc_l2_normalize(stof_ctx *ctx, float *x, int rows, int cols)
{
    l2_normalize_kernel<<<rows, 256, 0, (cudaStream_t)ctx->stream>>>(x, cols);
    return launched("l2_normalize_kernel");
}

/* ---------------------------------------------------------------- token check */

/* report[0]: first packed token whose id is outside [0, vocab); report[1]: the
 * same for types (ids or types may be NULL). Entries start at INT32_MAX. */
static __global__ void check_tokens_kernel(const int32_t *ids, const int32_t *types, int64_t tokens,
                                           int vocab, int type_vocab, int32_t *report)
{
    for (int64_t t = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; t < tokens;
         t += (int64_t)gridDim.x * blockDim.x) {
        if (ids) {
            const int32_t id = ids[t];
            if (id < 0 || id >= vocab) atomicMin(&report[0], (int32_t)t);
        }
        if (types) {
            const int32_t ty = types[t];
            if (ty < 0 || ty >= type_vocab) atomicMin(&report[1], (int32_t)t);
        }
    }
}

static __global__ void report_reset_kernel(int32_t *report)
{
    if (threadIdx.x < 2) report[threadIdx.x] = 0x7fffffff;
}

extern "C" stof_status enc_check_tokens(stof_ctx *ctx, const int32_t *ids, const int32_t *types,
                                        int64_t tokens, int vocab, int type_vocab, int32_t *report)
{
    cudaStream_t s = (cudaStream_t)ctx->stream;
    report_reset_kernel<<<1, 32, 0, s>>>(report);
    STOF_TRY(launched("report_reset_kernel"));
    check_tokens_kernel<<<grid_for(tokens, 256), 256, 0, s>>>(ids, types, tokens, vocab, type_vocab,
                                                              report);
    return launched("check_tokens_kernel");
}
