/*
 * gemm_core.cuh — the CTA main loop shared by the GEMM templates: a
 * block_m x block_n tile of x w^T accumulated in registers, with a
 * multi-stage cp.async pipeline over block_k slices of x [m, k] and w [n, k].
 * Out-of-range rows and k columns are zero-filled on load, so any m and any
 * k that is a multiple of 8 work; callers mask their stores.
 */
#ifndef STOF_FUSE_GEMM_CORE_CUH
#define STOF_FUSE_GEMM_CORE_CUH

#include "fuse/tile.cuh"

/* Compile-time constants of one GEMM configuration. */
template <int BM, int BN, int BK, int WARPS_M, int WARPS_N, int STAGES> struct gemm_traits {
    static constexpr int THREADS = WARPS_M * WARPS_N * 32;
    static constexpr int WARP_M = BM / WARPS_M; /* rows of the warp tile */
    static constexpr int WARP_N = BN / WARPS_N; /* columns of the warp tile */
    static constexpr int MT = WARP_M / 16;      /* m16 tiles per warp */
    static constexpr int NT = WARP_N / 8;       /* n8 tiles per warp */
    static constexpr int LDS = BK + FUSE_SMEM_PAD;
    static constexpr int A_STAGE = BM * LDS; /* elements per stage */
    static constexpr int B_STAGE = BN * LDS;
    static constexpr size_t PIPE_BYTES = (size_t)STAGES * (A_STAGE + B_STAGE) * 2;
    static_assert(BM % (16 * WARPS_M) == 0, "warp rows must be whole m16 tiles");
    static_assert(BN % (16 * WARPS_N) == 0, "warp columns must be whole n8 pairs");
    static_assert(BK % 16 == 0, "block_k must be whole k16 steps");
    static_assert(STAGES >= 2, "a pipeline needs two stages");
};

/*
 * acc (the warp's MT x NT fragments) = x[m0 .. m0+BM) w[n0 .. n0+BN)^T over all k.
 * smem holds the pipeline (PIPE_BYTES). Ends with every copy landed and a
 * barrier, so the caller may reuse the pipeline memory at once.
 */
template <typename T, int BM, int BN, int BK, int WARPS_M, int WARPS_N, int STAGES>
static __device__ __forceinline__ void
gemm_mainloop(float (&acc)[gemm_traits<BM, BN, BK, WARPS_M, WARPS_N, STAGES>::MT]
                          [gemm_traits<BM, BN, BK, WARPS_M, WARPS_N, STAGES>::NT][4],
              T *smem, const T *x, const T *w, int64_t m, int n, int k, int64_t m0, int n0)
{
    typedef gemm_traits<BM, BN, BK, WARPS_M, WARPS_N, STAGES> G;
    T *As = smem;
    T *Bs = smem + STAGES * G::A_STAGE;
    const T *xb = x + m0 * k; /* rows of this CTA: row indices below are relative */
    const int64_t rows_left = m - m0;
    const int warp = threadIdx.x >> 5;
    const int warp_m = warp / WARPS_N, warp_n = warp % WARPS_N;
    const int ktiles = (k + BK - 1) / BK;

    acc_zero(acc);
#pragma unroll
    for (int s = 0; s < STAGES - 1; s++) {
        if (s < ktiles) {
            tile_load_async<BM, BK, G::THREADS>(As + s * G::A_STAGE, xb, k, 0, rows_left, s * BK,
                                                k);
            tile_load_async<BN, BK, G::THREADS>(Bs + s * G::B_STAGE, w, k, n0, n, s * BK, k);
        }
        cp_async_commit();
    }
    for (int kt = 0; kt < ktiles; kt++) {
        /* groups committed so far: STAGES - 1 + kt; slice kt is group kt */
        cp_async_wait<STAGES - 2>();
        __syncthreads(); /* slice kt visible to all; slice kt - 1's stage is free */
        int next = kt + STAGES - 1;
        if (next < ktiles) {
            int s = next % STAGES;
            tile_load_async<BM, BK, G::THREADS>(As + s * G::A_STAGE, xb, k, 0, rows_left, next * BK,
                                                k);
            tile_load_async<BN, BK, G::THREADS>(Bs + s * G::B_STAGE, w, k, n0, n, next * BK, k);
        }
        cp_async_commit(); /* empty groups keep the count uniform */
        int s = kt % STAGES;
        warp_mma<T, G::MT, G::NT, BK / 16>(
            acc, As + s * G::A_STAGE + warp_m * G::WARP_M * G::LDS, G::LDS,
            Bs + s * G::B_STAGE + warp_n * G::WARP_N * G::LDS, G::LDS);
    }
    cp_async_wait<0>();
    __syncthreads();
}

#endif /* STOF_FUSE_GEMM_CORE_CUH */
