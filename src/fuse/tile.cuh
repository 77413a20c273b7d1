/*
 * tile.cuh — the warp-level GEMM pieces of the fusion templates: async loads
 * of zero-filled shared-memory tiles, a warp's MMA over ldmatrix fragments,
 * zeroed accumulators, and the shared-memory opt-in of their launchers. The
 * PTX underneath is core/ptx.cuh.
 *
 * A tile stored [m][k] and a weight tile stored [n][k] (k contiguous in both)
 * are read with non-transposed ldmatrix.x4: one call gives a full A fragment,
 * or the B fragments of two adjacent n8 tiles.
 */
#ifndef STOF_FUSE_TILE_CUH
#define STOF_FUSE_TILE_CUH

#include <stdint.h>

#include "core/ptx.cuh"
#include "fuse/instances.h"

/*
 * acc[MT][NT] += A[MT*16 x 16*KSTEPS] * B[NT*8 x 16*KSTEPS]^T for one warp.
 * a points at the warp's first A row (row stride lda elements), b at its first
 * weight row (stride ldb); both at the first k. B fragments are loaded per
 * pair of n8 tiles right before use, so only the accumulators stay live.
 */
template <typename T, int MT, int NT, int KSTEPS>
static __device__ __forceinline__ void warp_mma(float (&acc)[MT][NT][4], const T *a, int lda,
                                                const T *b, int ldb)
{
    static_assert(NT % 2 == 0, "n8 tiles are loaded in pairs");
    const int lane = threadIdx.x & 31;
    /* ldmatrix row addresses: A rows lane % 16, k half lane / 16;
     * B rows lane % 8 (+8 for lanes 16..31), k half (lane / 8) % 2 */
    const T *a_lane = a + (lane & 15) * lda + (lane >> 4) * 8;
    const T *b_lane = b + ((lane & 7) + ((lane >> 4) << 3)) * ldb + ((lane >> 3) & 1) * 8;
#pragma unroll
    for (int ks = 0; ks < KSTEPS; ks++) {
        uint32_t af[MT][4];
#pragma unroll
        for (int mt = 0; mt < MT; mt++)
            ldsm_x4(af[mt], smem_addr(a_lane + mt * 16 * lda + ks * 16));
#pragma unroll
        for (int np = 0; np < NT / 2; np++) {
            uint32_t bf[4];
            ldsm_x4(bf, smem_addr(b_lane + np * 16 * ldb + ks * 16));
#pragma unroll
            for (int mt = 0; mt < MT; mt++) {
                mma_16816<ptx_bf16<T>>(acc[mt][2 * np], af[mt], bf[0], bf[1]);
                mma_16816<ptx_bf16<T>>(acc[mt][2 * np + 1], af[mt], bf[2], bf[3]);
            }
        }
    }
}

template <int MT, int NT> static __device__ __forceinline__ void acc_zero(float (&acc)[MT][NT][4])
{
#pragma unroll
    for (int i = 0; i < MT; i++)
#pragma unroll
        for (int j = 0; j < NT; j++)
#pragma unroll
            for (int e = 0; e < 4; e++)
                acc[i][j][e] = 0.f;
}

/* Copy a rows x cols tile (cols a multiple of 8) of a row-major global matrix
 * into shared memory with row stride cols + FUSE_SMEM_PAD; rows past
 * rows_total and columns past k_total are zero-filled. */
template <int ROWS, int COLS, int THREADS, typename T>
static __device__ __forceinline__ void tile_load_async(T *s, const T *g, int64_t ld, int row0,
                                                       int64_t rows_total, int k0, int k_total)
{
    constexpr int CPR = COLS / 8; /* 16-byte chunks per row */
    constexpr int CHUNKS = ROWS * CPR;
#pragma unroll
    for (int c0 = 0; c0 < CHUNKS; c0 += THREADS) {
        int c = c0 + (int)threadIdx.x;
        if (CHUNKS % THREADS == 0 || c < CHUNKS) {
            int r = c / CPR;
            int kc = (c % CPR) * 8;
            int64_t gr = (int64_t)row0 + r;
            int gk = k0 + kc;
            bool ok = gr < rows_total && gk < k_total;
            const T *src = ok ? g + gr * ld + gk : g;
            cp_async16(smem_addr(s + r * (COLS + FUSE_SMEM_PAD) + kc), src, ok ? 16 : 0);
        }
    }
}

/* Opt a kernel into more than 48 KB of dynamic shared memory, once per device
 * and size (the attribute is per device). */
template <typename K>
static inline cudaError_t smem_opt_in(K kernel, size_t bytes, int device, int *done_bytes)
{
    if (bytes <= 48 * 1024) return cudaSuccess;
    if (device >= 0 && device < 64 && done_bytes[device] >= (int)bytes) return cudaSuccess;
    cudaError_t e =
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes);
    if (e == cudaSuccess && device >= 0 && device < 64) done_bytes[device] = (int)bytes;
    return e;
}

#endif /* STOF_FUSE_TILE_CUH */
