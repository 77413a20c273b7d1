/*
 * rope_epi.cuh — rotary position embeddings on values in registers, shared
 * by the in-place pass over the QKV rows (decoder_rows.cu's rope_kernel) and
 * gemm_sm90's epilogue, which turns the q and k heads of its fp32
 * accumulator tile before the store (fuse_rope_epi): one rounding instead of
 * a second pass over q and k at memory bandwidth.
 *
 * The angle is position * inv_freq in fp32, as HF forms it (an angle of a
 * few thousand radians keeps its fp32 rounding), and its sine and cosine a
 * full-precision sincosf; the turn is rotate-half on pairs (i, i + rot/2).
 */
#ifndef STOF_FUSE_ROPE_EPI_CUH
#define STOF_FUSE_ROPE_EPI_CUH

#include <stdint.h>

/* (cos, sin) of the angle of pair index i at position pos (inv_freq[i]). */
static __device__ __forceinline__ float2 rope_cos_sin(int32_t pos, float inv_freq)
{
    float s, c;
    sincosf((float)pos * inv_freq, &s, &c);
    return make_float2(c, s);
}

/* (a, b) <- (a cos - b sin, b cos + a sin): a pair turned by the angle of cs. */
static __device__ __forceinline__ void rope_turn(float &a, float &b, float2 cs)
{
    const float a0 = a;
    a = a0 * cs.x - b * cs.y;
    b = b * cs.x + a0 * cs.y;
}

/*
 * The heads of D columns whose first ROT dims rotate, turned in a wgmma
 * m64nBN accumulator fragment (gemm_sm90.cu's tile_fragments): acc[4j],
 * acc[4j + 1] are columns 8j + 2t, +1 of the thread's row g (position
 * pos_lo), acc[4j + 2], acc[4j + 3] the same columns of row g + 8 (pos_hi),
 * t = lane % 4. With the tile's first column col0 a multiple of D and ROT a
 * multiple of 16, column c of a head and its partner c + ROT / 2 are the
 * same element of steps j and j + ROT / 16: one thread turns the pair, and
 * the angles of its pair indices 8 jr + 2t (+1) serve every head of the
 * tile. Heads from column rope_cols on (v) stay as they are.
 */
template <int BN, int D, int ROT>
static __device__ __forceinline__ void rope_tile(float (&acc)[BN / 2], int32_t pos_lo,
                                                 int32_t pos_hi, const float *__restrict__ inv_freq,
                                                 int col0, int rope_cols)
{
    static_assert(BN % D == 0 && ROT % 16 == 0 && ROT <= D, "whole heads, 8-column halves");
    constexpr int D8 = D / 8, H8 = ROT / 16;
    const int t2 = 2 * (threadIdx.x & 3);
#pragma unroll
    for (int jr = 0; jr < H8; jr++)
#pragma unroll
        for (int e = 0; e < 2; e++) {
            const float f = inv_freq[8 * jr + t2 + e];
#pragma unroll
            for (int r = 0; r < 2; r++) { /* rows g and g + 8: one angle live at a time */
                const float2 cs = rope_cos_sin(r ? pos_hi : pos_lo, f);
#pragma unroll
                for (int h = 0; h < BN / D; h++) {
                    if (col0 + h * D >= rope_cols) break; /* v's heads from here */
                    const int j = h * D8 + jr, p = j + H8;
                    rope_turn(acc[4 * j + 2 * r + e], acc[4 * p + 2 * r + e], cs);
                }
            }
        }
}

#endif /* STOF_FUSE_ROPE_EPI_CUH */
