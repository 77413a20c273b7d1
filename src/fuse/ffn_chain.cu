/*
 * ffn_chain.cu — template (c), the FFN chain in one kernel:
 *     y = [LN](act(x w1^T + b1) w2^T + b2 [+ residual])
 * A CTA owns block_m full rows. Its x block stays in shared memory; the
 * intermediate is produced block_n columns at a time (phase 1: x w1_chunk^T,
 * + b1, activation, rounded to the dtype into shared memory) and consumed at
 * once (phase 2: the FFN2 partial product h_chunk w2[:, chunk]^T accumulates
 * into the output row block, which lives in registers for the whole kernel).
 * The intermediate never touches global memory.
 *
 * One cp.async ring streams both weights: per chunk, hidden / block_k slices
 * of w1 [block_n x block_k] then block_n / K2 slices of w2 [hidden x K2]. A
 * single tile sequence lets the pipeline run ahead across phase and chunk
 * boundaries. The hidden size is a template parameter because the output
 * accumulators are a register array sized by it.
 */
#include "fuse/internal.h"
#include "fuse/tile.cuh"
#include "fuse/vec.cuh"

template <int H, int BM, int BI, int BK, int WARPS, int STAGES> struct chain_traits {
    static constexpr int THREADS = WARPS * 32;
    static constexpr int K2 = FUSE_CHAIN_K2;
    static constexpr int MT = BM / 16;
    static constexpr int COLS1 = BI / WARPS; /* intermediate columns per warp */
    static constexpr int COLS2 = H / WARPS;  /* output columns per warp */
    static constexpr int NT1 = COLS1 / 8;
    static constexpr int NT2 = COLS2 / 8;
    static constexpr int LDX = H + FUSE_SMEM_PAD;
    static constexpr int LDH = BI + FUSE_SMEM_PAD;
    static constexpr int LDW1 = BK + FUSE_SMEM_PAD;
    static constexpr int LDW2 = K2 + FUSE_SMEM_PAD;
    static constexpr int W1_TILE = BI * LDW1;
    static constexpr int W2_TILE = H * LDW2;
    static constexpr int STAGE = W1_TILE > W2_TILE ? W1_TILE : W2_TILE; /* elements */
    static constexpr int N1 = H / BK;                                   /* w1 slices per chunk */
    static constexpr int N2 = BI / K2;                                  /* w2 slices per chunk */
    static constexpr int PER_CHUNK = N1 + N2;
    static_assert(BM % 16 == 0 && COLS1 % 16 == 0 && COLS2 % 16 == 0, "warp tiles");
    static_assert(H % BK == 0 && BI % BK == 0 && BK % 16 == 0, "k slices");
};

/* Issue the copies of tile t of the sequence (w1 or w2 slice) into stage. */
template <typename T, int H, int BM, int BI, int BK, int WARPS, int STAGES>
static __device__ __forceinline__ void chain_load_tile(T *stage, const T *w1, const T *w2,
                                                       int inter, int t)
{
    typedef chain_traits<H, BM, BI, BK, WARPS, STAGES> C;
    int chunk = t / C::PER_CHUNK, r = t % C::PER_CHUNK;
    if (r < C::N1) /* w1 rows chunk*BI .. +BI, k columns r*BK .. +BK of hidden */
        tile_load_async<BI, BK, C::THREADS>(stage, w1, H, chunk * BI, inter, r * BK, H);
    else /* w2 all hidden rows, k columns of this chunk's intermediate */
        tile_load_async<H, C::K2, C::THREADS>(stage, w2, inter, 0, H,
                                              chunk * BI + (r - C::N1) * C::K2, inter);
}

template <typename T, int H, int BM, int BI, int BK, int WARPS, int STAGES>
__global__ void __launch_bounds__(WARPS * 32)
    ffn_chain_kernel(const T *x, const T *__restrict__ w1, const T *__restrict__ b1,
                     const T *__restrict__ w2, const T *__restrict__ b2, const T *residual,
                     const T *__restrict__ gamma, const T *__restrict__ beta, T *y, int64_t m,
                     int inter, int act, float eps)
{
    typedef chain_traits<H, BM, BI, BK, WARPS, STAGES> C;
    extern __shared__ __align__(16) unsigned char smem_raw[];
    T *xs = reinterpret_cast<T *>(smem_raw);
    T *hs = xs + BM * C::LDX;
    T *ring = hs + BM * C::LDH;
    float *red_sum = reinterpret_cast<float *>(ring + STAGES * C::STAGE);
    float *red_sq = red_sum + WARPS * BM;

    const int64_t m0 = (int64_t)blockIdx.x * BM;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int g = lane >> 2, t4 = lane & 3;
    const int total = (inter / BI) * C::PER_CHUNK;

    /* the x block rides in the first group, with tile 0 */
    tile_load_async<BM, H, C::THREADS>(xs, x + m0 * H, H, 0, m - m0, 0, H);
#pragma unroll
    for (int s = 0; s < STAGES - 1; s++) {
        if (s < total)
            chain_load_tile<T, H, BM, BI, BK, WARPS, STAGES>(ring + s * C::STAGE, w1, w2, inter, s);
        cp_async_commit();
    }

    float acc1[C::MT][C::NT1][4];
    float acc2[C::MT][C::NT2][4];
    acc_zero(acc1);
    acc_zero(acc2);
    for (int t = 0; t < total; t++) {
        cp_async_wait<STAGES - 2>();
        __syncthreads(); /* tile t (and hs of the last phase 1) visible; stage t-1 free */
        int next = t + STAGES - 1;
        if (next < total)
            chain_load_tile<T, H, BM, BI, BK, WARPS, STAGES>(ring + (next % STAGES) * C::STAGE, w1,
                                                             w2, inter, next);
        cp_async_commit();
        const T *stage = ring + (t % STAGES) * C::STAGE;
        int chunk = t / C::PER_CHUNK, r = t % C::PER_CHUNK;
        if (r < C::N1) {
            warp_mma<T, C::MT, C::NT1, BK / 16>(acc1, xs + r * BK, C::LDX,
                                                stage + warp * C::COLS1 * C::LDW1, C::LDW1);
            if (r == C::N1 - 1) {
                /* chunk done: h = act(acc1 + b1) to shared memory. Readers of the
                 * previous chunk finished before this iteration's barrier. */
#pragma unroll
                for (int nt = 0; nt < C::NT1; nt++) {
                    int col = warp * C::COLS1 + nt * 8 + 2 * t4;
                    float2 b = b1 ? load2(b1 + chunk * BI + col) : make_float2(0.f, 0.f);
#pragma unroll
                    for (int mt = 0; mt < C::MT; mt++)
#pragma unroll
                        for (int h = 0; h < 2; h++)
                            store2(hs + (mt * 16 + g + h * 8) * C::LDH + col,
                                   act_apply(acc1[mt][nt][2 * h] + b.x, act),
                                   act_apply(acc1[mt][nt][2 * h + 1] + b.y, act));
                }
                acc_zero(acc1);
            }
        } else {
            warp_mma<T, C::MT, C::NT2, 1>(acc2, hs + (r - C::N1) * C::K2, C::LDH,
                                          stage + warp * C::COLS2 * C::LDW2, C::LDW2);
        }
    }
    cp_async_wait<0>();

    /* epilogue: + b2 (+ residual), then the optional LayerNorm over full rows */
    const int col_base = warp * C::COLS2 + 2 * t4;
#pragma unroll
    for (int nt = 0; nt < C::NT2; nt++) {
        int col = col_base + nt * 8;
        float2 b = b2 ? load2(b2 + col) : make_float2(0.f, 0.f);
#pragma unroll
        for (int mt = 0; mt < C::MT; mt++)
#pragma unroll
            for (int h = 0; h < 2; h++) {
                int64_t row = m0 + mt * 16 + g + h * 8;
                float2 res =
                    residual && row < m ? load2(residual + row * H + col) : make_float2(0.f, 0.f);
                acc2[mt][nt][2 * h] += b.x + res.x;
                acc2[mt][nt][2 * h + 1] += b.y + res.y;
            }
    }
    if (gamma) {
        float mean[C::MT][2], rstd[C::MT][2];
        /* row sums: over this thread's columns, its quad, then the warps */
#pragma unroll
        for (int mt = 0; mt < C::MT; mt++)
#pragma unroll
            for (int h = 0; h < 2; h++) {
                float s = 0.f;
#pragma unroll
                for (int nt = 0; nt < C::NT2; nt++)
                    s += acc2[mt][nt][2 * h] + acc2[mt][nt][2 * h + 1];
                s = quad_sum(s);
                if (t4 == 0) red_sum[warp * BM + mt * 16 + g + h * 8] = s;
            }
        __syncthreads();
#pragma unroll
        for (int mt = 0; mt < C::MT; mt++)
#pragma unroll
            for (int h = 0; h < 2; h++) {
                float s = 0.f;
                for (int w = 0; w < WARPS; w++)
                    s += red_sum[w * BM + mt * 16 + g + h * 8];
                mean[mt][h] = s / (float)H;
                float q = 0.f;
#pragma unroll
                for (int nt = 0; nt < C::NT2; nt++) {
                    float d0 = acc2[mt][nt][2 * h] - mean[mt][h];
                    float d1 = acc2[mt][nt][2 * h + 1] - mean[mt][h];
                    q += d0 * d0 + d1 * d1;
                }
                q = quad_sum(q);
                if (t4 == 0) red_sq[warp * BM + mt * 16 + g + h * 8] = q;
            }
        __syncthreads();
#pragma unroll
        for (int mt = 0; mt < C::MT; mt++)
#pragma unroll
            for (int h = 0; h < 2; h++) {
                float q = 0.f;
                for (int w = 0; w < WARPS; w++)
                    q += red_sq[w * BM + mt * 16 + g + h * 8];
                rstd[mt][h] = rsqrtf(q / (float)H + eps);
            }
#pragma unroll
        for (int nt = 0; nt < C::NT2; nt++) {
            int col = col_base + nt * 8;
            float2 gm = load2(gamma + col), bt = load2(beta + col);
#pragma unroll
            for (int mt = 0; mt < C::MT; mt++)
#pragma unroll
                for (int h = 0; h < 2; h++) {
                    int64_t row = m0 + mt * 16 + g + h * 8;
                    if (row < m)
                        store2(y + row * H + col,
                               (acc2[mt][nt][2 * h] - mean[mt][h]) * rstd[mt][h] * gm.x + bt.x,
                               (acc2[mt][nt][2 * h + 1] - mean[mt][h]) * rstd[mt][h] * gm.y + bt.y);
                }
        }
    } else {
#pragma unroll
        for (int nt = 0; nt < C::NT2; nt++) {
            int col = col_base + nt * 8;
#pragma unroll
            for (int mt = 0; mt < C::MT; mt++)
#pragma unroll
                for (int h = 0; h < 2; h++) {
                    int64_t row = m0 + mt * 16 + g + h * 8;
                    if (row < m)
                        store2(y + row * H + col, acc2[mt][nt][2 * h], acc2[mt][nt][2 * h + 1]);
                }
        }
    }
}

template <typename T, int H, int BM, int BI, int BK, int WARPS, int STAGES>
static stof_status launch_ffn_chain(stof_ctx *ctx, const fuse_config *c, const fuse_ffn_args *a)
{
    typedef chain_traits<H, BM, BI, BK, WARPS, STAGES> C;
    static int opted[64];
    void (*kernel)(const T *, const T *, const T *, const T *, const T *, const T *, const T *,
                   const T *, T *, int64_t, int, int, float) =
        ffn_chain_kernel<T, H, BM, BI, BK, WARPS, STAGES>;
    size_t smem = fuse_config_smem_bytes(c, H);
    STOF_CUDA_TRY(smem_opt_in(kernel, smem, ctx->gpu_index, opted));
    kernel<<<(unsigned)stof_cdiv(a->m, BM), C::THREADS, smem, (cudaStream_t)ctx->stream>>>(
        (const T *)a->x, (const T *)a->w1, (const T *)a->b1, (const T *)a->w2, (const T *)a->b2,
        (const T *)a->residual, (const T *)a->gamma, (const T *)a->beta, (T *)a->y, a->m, a->inter,
        (int)a->act, a->eps);
    return STOF_CUDA(cudaGetLastError());
}

template <typename T, int H>
static stof_status dispatch_ffn_chain_h(stof_ctx *ctx, const fuse_config *c, const fuse_ffn_args *a)
{
#define TRY_CONFIG(bm, bn, bk, wm, wn, st)                                                         \
    if (c->block_m == bm && c->block_n == bn && c->block_k == bk && c->warps_m == wm &&            \
        c->warps_n == wn && c->stages == st)                                                       \
        return launch_ffn_chain<T, H, bm, bn, bk, wn, st>(ctx, c, a);
    FUSE_FFN_CHAIN_INSTANCES(TRY_CONFIG)
#undef TRY_CONFIG
    return stof_error(STOF_ERR_INTERNAL, "ffn_chain: config %dx%dx%d is not compiled", c->block_m,
                      c->block_n, c->block_k);
}

template <typename T>
static stof_status dispatch_ffn_chain(stof_ctx *ctx, const fuse_config *c, const fuse_ffn_args *a)
{
#define TRY_HIDDEN(h)                                                                              \
    if (a->hidden == h) return dispatch_ffn_chain_h<T, h>(ctx, c, a);
    FUSE_FFN_CHAIN_HIDDENS(TRY_HIDDEN)
#undef TRY_HIDDEN
    return stof_error(STOF_ERR_INTERNAL, "ffn_chain: hidden %d is not compiled", a->hidden);
}

extern "C" stof_status fuse_launch_ffn_chain(stof_ctx *ctx, const fuse_config *c,
                                             const fuse_ffn_args *a)
{
    if (a->dtype == STOF_BF16) return dispatch_ffn_chain<__nv_bfloat16>(ctx, c, a);
    return dispatch_ffn_chain<__half>(ctx, c, a);
}
