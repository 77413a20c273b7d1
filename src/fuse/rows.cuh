/*
 * rows.cuh — device helpers the row kernels share (rows.cu, norms.cu,
 * decoder_rows.cu): sums over the threads of a row, and a sequence's extent
 * from cu_seqlens that never trusts the device values.
 */
#ifndef STOF_FUSE_ROWS_CUH
#define STOF_FUSE_ROWS_CUH

#include "core/ptx.cuh"

#include <cstdint>

/* Sum over the TPR threads that share a row (TPR 32: one warp; else the CTA). */
template <int TPR> static __device__ __forceinline__ float row_sum(float v, float *red)
{
    v = warp_sum(v);
    if (TPR == 32) return v;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (lane == 0) red[warp] = v;
    __syncthreads();
    float s = 0.f;
#pragma unroll
    for (int i = 0; i < TPR / 32; i++)
        s += red[i];
    __syncthreads(); /* red is reused by the next reduction */
    return s;
}

/* Length of sequence b from cu_seqlens, cut to [0, len]; *start is clamped to >= 0. */
static __device__ __forceinline__ int seq_extent(const int32_t *cu, int b, int len, int64_t *start)
{
    int s = cu[b], e = cu[b + 1];
    int n = e - s;
    *start = s < 0 ? 0 : s;
    if (s < 0 || n < 0) return 0;
    return n > len ? len : n;
}

#endif /* STOF_FUSE_ROWS_CUH */
