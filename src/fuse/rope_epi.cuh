/*
 * rope_epi.cuh — rotary position embeddings on values in registers, shared
 * by the table's build (decoder_rows.cu's rope_table_kernel), the in-place
 * pass over the QKV rows (rope_kernel there) and gemm_sm90's epilogue, which
 * turns the q and k heads of its fp32 accumulator tile before the store
 * (fuse_rope_epi): one rounding instead of a second pass over q and k at
 * memory bandwidth.
 *
 * The angle is position * inv_freq in fp32, as HF forms it (an angle of a
 * few thousand radians keeps its fp32 rounding), and its sine and cosine a
 * full-precision sincosf, taken once per (position, pair index) when the
 * table is built (fuse_rope_table): sincosf is a long routine with a slow
 * path, and in the epilogue it ran longer than the other warpgroup's main
 * loop, which the ping-pong cannot hide. The hot paths read (cos, sin) from
 * the table instead, a position outside it reading the table's row of NaN;
 * the turn is rotate-half on pairs (i, i + rot/2).
 */
#ifndef STOF_FUSE_ROPE_EPI_CUH
#define STOF_FUSE_ROPE_EPI_CUH

#include <stdint.h>

/* (cos, sin) of the angle of pair index i at position pos (inv_freq[i]):
 * only the table's build computes it. */
static __device__ __forceinline__ float2 rope_cos_sin(int32_t pos, float inv_freq)
{
    float s, c;
    sincosf((float)pos * inv_freq, &s, &c);
    return make_float2(c, s);
}

/* The table's row of position pos: the NaN row past the last position for a
 * position outside [0, positions), so a bad device-side position turns its
 * heads into NaN rather than reading outside the table. Branch-free: one
 * unsigned min. */
static __device__ __forceinline__ unsigned rope_table_row(int32_t pos, int positions)
{
    return min((unsigned)pos, (unsigned)positions);
}

/* (a, b) <- (a cos - b sin, b cos + a sin): a pair turned by the angle of cs. */
static __device__ __forceinline__ void rope_turn(float &a, float &b, float2 cs)
{
    const float a0 = a;
    a = a0 * cs.x - b * cs.y;
    b = b * cs.x + a0 * cs.y;
}

/* Two table entries (pair indices i, i + 1, i even) in one 16-byte load,
 * through the read-only path: the table does not change during a kernel. */
static __device__ __forceinline__ float4 rope_load2(const float2 *p)
{
    return __ldg(reinterpret_cast<const float4 *>(p));
}

/*
 * The heads of D columns whose first ROT dims rotate, turned in a wgmma
 * m64nBN accumulator fragment (gemm_sm90.cu's tile_fragments): acc[4j],
 * acc[4j + 1] are columns 8j + 2t, +1 of the thread's row g (table row
 * row_lo, rope_table_row), acc[4j + 2], acc[4j + 3] the same columns of row
 * g + 8 (row_hi),
 * t = lane % 4. With the tile's first column col0 a multiple of D and ROT a
 * multiple of 16, column c of a head and its partner c + ROT / 2 are the
 * same element of steps j and j + ROT / 16: one thread turns the pair, and
 * the (cos, sin) of its pair indices 8 jr + 2t and + 1, one float4 per (jr,
 * row), serve every head of the tile. Every load of a group is issued
 * before its first turn, so their latencies overlap; a group is at most 8
 * float4, 32 registers held beside the accumulators (no spill in any
 * gemm_sm90 tile; ROT 128: one row at a time).
 * Heads from column rope_cols on (v) stay as they are.
 */
template <int BN, int D, int ROT>
static __device__ __forceinline__ void rope_tile(float (&acc)[BN / 2], const float2 *table,
                                                 unsigned row_lo, unsigned row_hi, int col0,
                                                 int rope_cols)
{
    static_assert(BN % D == 0 && ROT % 16 == 0 && ROT <= D, "whole heads, 8-column halves");
    constexpr int D8 = D / 8, H8 = ROT / 16;
    /* the (row, jr) loads, 2 H8 of them, in groups of at most 8 */
    constexpr int GROUP = 2 * H8 < 8 ? 2 * H8 : 8;
    static_assert((2 * H8) % GROUP == 0, "whole groups");
    const int t2 = 2 * (threadIdx.x & 3);
    const float2 *at[2] = {table + (size_t)row_lo * (ROT / 2) + t2,
                           table + (size_t)row_hi * (ROT / 2) + t2};
#pragma unroll
    for (int q0 = 0; q0 < 2 * H8; q0 += GROUP) {
        float4 cs[GROUP];
#pragma unroll
        for (int g = 0; g < GROUP; g++)
            cs[g] = rope_load2(at[(q0 + g) / H8] + 8 * ((q0 + g) % H8));
#pragma unroll
        for (int g = 0; g < GROUP; g++) {
            const int r = (q0 + g) / H8, jr = (q0 + g) % H8;
            const float2 c0 = make_float2(cs[g].x, cs[g].y), c1 = make_float2(cs[g].z, cs[g].w);
#pragma unroll
            for (int h = 0; h < BN / D; h++) {
                if (col0 + h * D >= rope_cols) break; /* v's heads from here */
                const int j = h * D8 + jr, p = j + H8;
                rope_turn(acc[4 * j + 2 * r], acc[4 * p + 2 * r], c0);
                rope_turn(acc[4 * j + 2 * r + 1], acc[4 * p + 2 * r + 1], c1);
            }
        }
    }
}

#endif /* STOF_FUSE_ROPE_EPI_CUH */
