/*
 * gemm_res_ln.cu — template (b): y = LN(x w^T + b + residual) * gamma + beta
 * in one kernel. A CTA owns block_m full rows: it walks the output width in
 * block_n column chunks (a full k loop each), parks the pre-LayerNorm values
 * as fp32 in shared memory, and normalises the rows from there, so the
 * statistics cost no second pass over global memory and no 16-bit rounding
 * before the LayerNorm. The price is parallelism: only ceil(m / block_m)
 * CTAs, which is why this is a template the tuner weighs, not a default.
 */
#include "fuse/gemm_core.cuh"
#include "fuse/internal.h"
#include "fuse/vec.cuh"

/* Normalise one fp32 row of width n held in shared memory and store it. */
template <typename T>
static __device__ __forceinline__ void
layernorm_row_from_smem(const float *v, int n, const T *gamma, const T *beta, float eps, T *out)
{
    const int lane = threadIdx.x & 31;
    float s = 0.f;
    for (int c = lane * 8; c < n; c += 256) {
        float4 a = *reinterpret_cast<const float4 *>(v + c);
        float4 b = *reinterpret_cast<const float4 *>(v + c + 4);
        s += (a.x + a.y) + (a.z + a.w) + (b.x + b.y) + (b.z + b.w);
    }
    const float mean = warp_sum(s) / (float)n;
    float q = 0.f;
    for (int c = lane * 8; c < n; c += 256) {
#pragma unroll
        for (int j = 0; j < 8; j++) {
            float d = v[c + j] - mean;
            q += d * d;
        }
    }
    const float rstd = rsqrtf(warp_sum(q) / (float)n + eps);
    for (int c = lane * 8; c < n; c += 256) {
        float g[8], b[8], o[8];
        load8(g, gamma + c);
        load8(b, beta + c);
#pragma unroll
        for (int j = 0; j < 8; j++)
            o[j] = (v[c + j] - mean) * rstd * g[j] + b[j];
        store8(out + c, o);
    }
}

template <typename T, int BM, int BN, int BK, int WARPS_M, int WARPS_N, int STAGES>
__global__ void __launch_bounds__(WARPS_M *WARPS_N * 32, 1)
    gemm_res_ln_kernel(const T *__restrict__ x, const T *__restrict__ w, const T *__restrict__ bias,
                       const T *residual, const T *__restrict__ gamma, const T *__restrict__ beta,
                       T *y, int64_t m, int n, int k, float eps)
{
    typedef gemm_traits<BM, BN, BK, WARPS_M, WARPS_N, STAGES> G;
    extern __shared__ __align__(16) unsigned char smem_raw[];
    float *rows = reinterpret_cast<float *>(smem_raw + G::PIPE_BYTES);
    const int ldr = n + FUSE_SMEM_PAD; /* staggers the rows over banks for the pair stores */
    const int64_t m0 = (int64_t)blockIdx.x * BM;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int g = lane >> 2, t = lane & 3;
    const int r_base = (warp / WARPS_N) * G::WARP_M + g; /* row inside the CTA's block */
    const int c_off = (warp % WARPS_N) * G::WARP_N + 2 * t;

#pragma unroll 1
    for (int n0 = 0; n0 < n; n0 += BN) {
        float acc[G::MT][G::NT][4];
        gemm_mainloop<T, BM, BN, BK, WARPS_M, WARPS_N, STAGES>(acc, reinterpret_cast<T *>(smem_raw),
                                                               x, w, m, n, k, m0, n0);
#pragma unroll
        for (int nt = 0; nt < G::NT; nt++) {
            int col = n0 + c_off + nt * 8;
            if (col >= n) continue;
            float2 b = bias ? load2(bias + col) : make_float2(0.f, 0.f);
#pragma unroll
            for (int mt = 0; mt < G::MT; mt++) {
#pragma unroll
                for (int h = 0; h < 2; h++) {
                    int r = r_base + mt * 16 + h * 8;
                    int64_t row = m0 + r;
                    float2 res = row < m ? load2(residual + row * n + col) : make_float2(0.f, 0.f);
                    *reinterpret_cast<float2 *>(rows + r * ldr + col) = make_float2(
                        acc[mt][nt][2 * h] + b.x + res.x, acc[mt][nt][2 * h + 1] + b.y + res.y);
                }
            }
        }
    }
    __syncthreads();
    for (int r = warp; r < BM && m0 + r < m; r += WARPS_M * WARPS_N)
        layernorm_row_from_smem(rows + r * ldr, n, gamma, beta, eps, y + (m0 + r) * n);
}

template <typename T, int BM, int BN, int BK, int WARPS_M, int WARPS_N, int STAGES>
static stof_status launch_gemm_res_ln(stof_ctx *ctx, const fuse_config *c,
                                      const fuse_linear_args *a)
{
    typedef gemm_traits<BM, BN, BK, WARPS_M, WARPS_N, STAGES> G;
    static int opted[64];
    void (*kernel)(const T *, const T *, const T *, const T *, const T *, const T *, T *, int64_t,
                   int, int, float) = gemm_res_ln_kernel<T, BM, BN, BK, WARPS_M, WARPS_N, STAGES>;
    size_t smem = fuse_config_smem_bytes(c, a->n);
    STOF_CUDA_TRY(smem_opt_in(kernel, smem, ctx->gpu_index, opted));
    kernel<<<(unsigned)stof_cdiv(a->m, BM), G::THREADS, smem, (cudaStream_t)ctx->stream>>>(
        (const T *)a->x, (const T *)a->w, (const T *)a->bias, (const T *)a->residual,
        (const T *)a->gamma, (const T *)a->beta, (T *)a->y, a->m, a->n, a->k, a->eps);
    return STOF_CUDA(cudaGetLastError());
}

template <typename T>
static stof_status dispatch_gemm_res_ln(stof_ctx *ctx, const fuse_config *c,
                                        const fuse_linear_args *a)
{
#define TRY_CONFIG(bm, bn, bk, wm, wn, st)                                                         \
    if (c->block_m == bm && c->block_n == bn && c->block_k == bk && c->warps_m == wm &&            \
        c->warps_n == wn && c->stages == st)                                                       \
        return launch_gemm_res_ln<T, bm, bn, bk, wm, wn, st>(ctx, c, a);
    FUSE_GEMM_RES_LN_INSTANCES(TRY_CONFIG)
#undef TRY_CONFIG
    return stof_error(STOF_ERR_INTERNAL, "gemm_res_ln: config %dx%dx%d is not compiled", c->block_m,
                      c->block_n, c->block_k);
}

extern "C" stof_status fuse_launch_gemm_res_ln(stof_ctx *ctx, const fuse_config *c,
                                               const fuse_linear_args *a)
{
    if (a->dtype == STOF_BF16) return dispatch_gemm_res_ln<__nv_bfloat16>(ctx, c, a);
    return dispatch_gemm_res_ln<__half>(ctx, c, a);
}
