/*
 * norms.cu — the norms of the pre-norm families: RMSNorm (LLaMA) and
 * LayerNorm with or without a bias (GPT-2, ModernBERT), each optionally
 * adding the residual first and writing that sum as a second output. A
 * pre-norm layer keeps its residual stream x apart from the normalised h it
 * feeds the next GEMM: x = x + delta; h = norm(x) is one pass over the row
 * here instead of an add and a norm.
 *
 * The row stays in registers between the statistics and the output, as in
 * rows.cu's LayerNorm: up to 1024 wide a warp per row, to 8192 a 256-thread
 * CTA, four 16-byte vectors per thread at most. Statistics are fp32 (HF's
 * LlamaRMSNorm computes them in fp32 too); LayerNorm's are two-pass.
 */
#include "fuse/internal.h"
#include "fuse/vec.cuh"
#include "fuse/rows.cuh"

template <typename T, int TPR, int VPL, bool RMS>
__global__ void norm_kernel(const T *x, const T *residual, const T *__restrict__ gamma,
                            const T *__restrict__ beta, T *y, T *sum_out, int64_t rows, int cols,
                            float eps)
{
    __shared__ float red[TPR / 32];
    const int64_t row = (int64_t)blockIdx.x * (blockDim.x / TPR) + threadIdx.x / TPR;
    const int lane = threadIdx.x % TPR;
    if (row >= rows) return; /* a whole row group leaves together */
    const int nvec = cols / 8;
    const int64_t off = row * cols;
    float v[VPL][8];
    float s = 0.f;
#pragma unroll
    for (int i = 0; i < VPL; i++) {
        int c = (lane + i * TPR) * 8;
#pragma unroll
        for (int j = 0; j < 8; j++)
            v[i][j] = 0.f;
        if (c >= cols) continue;
        load8(v[i], x + off + c);
        if (residual) {
            float r[8];
            load8(r, residual + off + c);
#pragma unroll
            for (int j = 0; j < 8; j++)
                v[i][j] += r[j];
        }
        /* the stream carries the sum in the dtype, as HF's does: normalise that */
        if (sum_out) {
            store8(sum_out + off + c, v[i]);
            load8(v[i], sum_out + off + c);
        }
#pragma unroll
        for (int j = 0; j < 8; j++)
            s += RMS ? v[i][j] * v[i][j] : v[i][j];
    }
    const float stat = row_sum<TPR>(s, red) / (float)cols;
    float mean = 0.f, rstd;
    if (RMS) {
        rstd = rsqrtf(stat + eps);
    } else {
        mean = stat;
        float q = 0.f;
#pragma unroll
        for (int i = 0; i < VPL; i++)
            if (lane + i * TPR < nvec)
#pragma unroll
                for (int j = 0; j < 8; j++) {
                    float d = v[i][j] - mean;
                    q += d * d;
                }
        rstd = rsqrtf(row_sum<TPR>(q, red) / (float)cols + eps);
    }
#pragma unroll
    for (int i = 0; i < VPL; i++) {
        int c = (lane + i * TPR) * 8;
        if (c >= cols) continue;
        float g[8], b[8], o[8];
        for (int j = 0; j < 8; j++)
            g[j] = 1.f, b[j] = 0.f;
        if (gamma) load8(g, gamma + c);
        if (beta) load8(b, beta + c);
#pragma unroll
        for (int j = 0; j < 8; j++)
            o[j] = (v[i][j] - mean) * rstd * g[j] + b[j];
        store8(y + off + c, o);
    }
}

template <typename T, bool RMS>
static stof_status launch_norm_t(stof_ctx *ctx, int64_t rows, int cols, const void *x,
                                 const void *residual, const void *gamma, const void *beta,
                                 float eps, void *y, void *sum_out)
{
    const T *xt = (const T *)x, *rt = (const T *)residual, *gt = (const T *)gamma,
            *bt = (const T *)beta;
    T *yt = (T *)y, *st = (T *)sum_out;
    cudaStream_t s = (cudaStream_t)ctx->stream;
    int nvec = cols / 8;
#define NORM_CASE(tpr, vpl)                                                                        \
    if (nvec <= (tpr) * (vpl)) {                                                                   \
        const int threads = (tpr) == 32 ? 128 : (tpr);                                             \
        norm_kernel<T, tpr, vpl, RMS><<<(unsigned)stof_cdiv(rows, threads / (tpr)), threads, 0,   \
                                        s>>>(xt, rt, gt, bt, yt, st, rows, cols, eps);             \
        return STOF_CUDA(cudaGetLastError());                                                      \
    }
    NORM_CASE(32, 1)
    NORM_CASE(32, 2)
    NORM_CASE(32, 4)
    NORM_CASE(256, 2)
    NORM_CASE(256, 4)
#undef NORM_CASE
    return stof_error(STOF_ERR_INTERNAL, "fuse_norm: width %d is too wide", cols);
}

extern "C" stof_status fuse_launch_norm(stof_ctx *ctx, stof_dtype dtype, fuse_norm_kind kind,
                                        int64_t rows, int cols, const void *x,
                                        const void *residual, const void *gamma, const void *beta,
                                        float eps, void *y, void *sum_out)
{
    bool rms = kind == FUSE_NORM_RMS;
    if (dtype == STOF_BF16)
        return rms ? launch_norm_t<__nv_bfloat16, true>(ctx, rows, cols, x, residual, gamma, beta,
                                                        eps, y, sum_out)
                   : launch_norm_t<__nv_bfloat16, false>(ctx, rows, cols, x, residual, gamma,
                                                         beta, eps, y, sum_out);
    return rms ? launch_norm_t<__half, true>(ctx, rows, cols, x, residual, gamma, beta, eps, y,
                                             sum_out)
               : launch_norm_t<__half, false>(ctx, rows, cols, x, residual, gamma, beta, eps, y,
                                              sum_out);
}
