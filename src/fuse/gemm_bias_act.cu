/*
 * gemm_bias_act.cu — template (a): y = act(x w^T + b) in one kernel.
 * The accumulators leave the tensor cores straight into the epilogue (bias,
 * then exact GELU, tanh GELU or ReLU in fp32) and are written once as
 * 16-bit pairs; the activation is a runtime switch, uniform across the CTA,
 * so each tile configuration is compiled once per dtype. Two more epilogues
 * share the kernel: a residual added after the bias (act none; it may be y,
 * each element read by the thread that writes it), and a GLU, w's rows
 * interleaving its halves (FUSE_GLU_BLOCK in fuse.h): n8 tiles 2q and 2q + 1
 * of a warp are a's and b's of the same 8 units (warp tiles are 16k columns
 * wide), and y [m, n / 2] = act(a) * b.
 */
#include "fuse/gemm_core.cuh"
#include "fuse/internal.h"
#include "fuse/vec.cuh"

template <typename T, int BM, int BN, int BK, int WARPS_M, int WARPS_N, int STAGES>
__global__ void __launch_bounds__(WARPS_M *WARPS_N * 32)
    gemm_bias_act_kernel(const T *__restrict__ x, const T *__restrict__ w,
                         const T *__restrict__ bias, const T *residual, T *y, int64_t m, int n,
                         int k, int act, int glu)
{
    static_assert(FUSE_GLU_BLOCK == 8 && (BN / WARPS_N) % 16 == 0,
                  "a GLU block is one n8 tile, and warp tiles hold whole pairs of them");
    typedef gemm_traits<BM, BN, BK, WARPS_M, WARPS_N, STAGES> G;
    extern __shared__ __align__(16) unsigned char smem_raw[];
    const int64_t m0 = (int64_t)blockIdx.y * BM;
    const int n0 = blockIdx.x * BN;

    float acc[G::MT][G::NT][4];
    gemm_mainloop<T, BM, BN, BK, WARPS_M, WARPS_N, STAGES>(acc, reinterpret_cast<T *>(smem_raw), x,
                                                           w, m, n, k, m0, n0);

    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int g = lane >> 2, t = lane & 3;
    const int64_t row_base = m0 + (warp / WARPS_N) * G::WARP_M + g;
    const int col_base = n0 + (warp % WARPS_N) * G::WARP_N + 2 * t;
    if (glu) {
        const int half = n / 2;
#pragma unroll
        for (int nt = 0; nt < G::NT; nt += 2) {
            const int col = col_base + nt * 8; /* a's column; b's is 8 on */
            if (col >= n) continue;            /* n is a multiple of 16: b's is inside too */
            const float2 ba = bias ? load2(bias + col) : make_float2(0.f, 0.f);
            const float2 bb = bias ? load2(bias + col + 8) : make_float2(0.f, 0.f);
            const int out = (col - 2 * t) / 2 + 2 * t;
#pragma unroll
            for (int mt = 0; mt < G::MT; mt++) {
#pragma unroll
                for (int h = 0; h < 2; h++) {
                    const int64_t row = row_base + mt * 16 + h * 8;
                    const float *a = acc[mt][nt] + 2 * h, *b = acc[mt][nt + 1] + 2 * h;
                    if (row < m)
                        store2(y + row * half + out, glu_apply(a[0] + ba.x, b[0] + bb.x, act),
                               glu_apply(a[1] + ba.y, b[1] + bb.y, act));
                }
            }
        }
        return;
    }
#pragma unroll
    for (int nt = 0; nt < G::NT; nt++) {
        int col = col_base + nt * 8;
        if (col >= n) continue; /* n is even, so col + 1 < n too */
        float2 b = bias ? load2(bias + col) : make_float2(0.f, 0.f);
#pragma unroll
        for (int mt = 0; mt < G::MT; mt++) {
#pragma unroll
            for (int h = 0; h < 2; h++) {
                int64_t row = row_base + mt * 16 + h * 8;
                if (row >= m) continue;
                const float2 r = residual ? load2(residual + row * n + col) : make_float2(0.f, 0.f);
                store2(y + row * n + col, act_apply(acc[mt][nt][2 * h] + b.x, act) + r.x,
                       act_apply(acc[mt][nt][2 * h + 1] + b.y, act) + r.y);
            }
        }
    }
}

template <typename T, int BM, int BN, int BK, int WARPS_M, int WARPS_N, int STAGES>
static stof_status launch_gemm_bias_act(stof_ctx *ctx, const fuse_linear_args *a)
{
    typedef gemm_traits<BM, BN, BK, WARPS_M, WARPS_N, STAGES> G;
    static int opted[64];
    void (*kernel)(const T *, const T *, const T *, const T *, T *, int64_t, int, int, int, int) =
        gemm_bias_act_kernel<T, BM, BN, BK, WARPS_M, WARPS_N, STAGES>;
    STOF_CUDA_TRY(smem_opt_in(kernel, G::PIPE_BYTES, ctx->gpu_index, opted));
    dim3 grid((unsigned)stof_cdiv(a->n, BN), (unsigned)stof_cdiv(a->m, BM));
    kernel<<<grid, G::THREADS, G::PIPE_BYTES, (cudaStream_t)ctx->stream>>>(
        (const T *)a->x, (const T *)a->w, (const T *)a->bias, (const T *)a->residual, (T *)a->y,
        a->m, a->n, a->k, (int)a->act, (int)a->glu);
    return STOF_CUDA(cudaGetLastError());
}

template <typename T>
static stof_status dispatch_gemm_bias_act(stof_ctx *ctx, const fuse_config *c,
                                          const fuse_linear_args *a)
{
#define TRY_CONFIG(bm, bn, bk, wm, wn, st)                                                         \
    if (c->block_m == bm && c->block_n == bn && c->block_k == bk && c->warps_m == wm &&            \
        c->warps_n == wn && c->stages == st)                                                       \
        return launch_gemm_bias_act<T, bm, bn, bk, wm, wn, st>(ctx, a);
    FUSE_GEMM_BIAS_ACT_INSTANCES(TRY_CONFIG)
#undef TRY_CONFIG
    return stof_error(STOF_ERR_INTERNAL, "gemm_bias_act: config %dx%dx%d is not compiled",
                      c->block_m, c->block_n, c->block_k);
}

extern "C" stof_status fuse_launch_gemm_bias_act(stof_ctx *ctx, const fuse_config *c,
                                                 const fuse_linear_args *a)
{
    if (a->dtype == STOF_BF16) return dispatch_gemm_bias_act<__nv_bfloat16>(ctx, c, a);
    return dispatch_gemm_bias_act<__half>(ctx, c, a);
}
