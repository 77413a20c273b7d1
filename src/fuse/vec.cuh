/*
 * vec.cuh — element access of the fusion kernels: 16-bit values (T: __half or
 * __nv_bfloat16) read and written as fp32 in 16-byte vectors of 8 or 4-byte
 * pairs, and the activation applied to them (fuse_act).
 */
#ifndef STOF_FUSE_VEC_CUH
#define STOF_FUSE_VEC_CUH

#include "core/ptx.cuh"
#include "fuse/fuse.h"

/* Eight 16-bit values, as loaded in one 16-byte word, to fp32. */
template <typename T> static __device__ __forceinline__ void unpack8(float (&f)[8], uint4 v)
{
    constexpr int BF16 = ptx_bf16<T>;
    float2 a = unpack2<BF16>(v.x), b = unpack2<BF16>(v.y), c = unpack2<BF16>(v.z),
           d = unpack2<BF16>(v.w);
    f[0] = a.x, f[1] = a.y, f[2] = b.x, f[3] = b.y, f[4] = c.x, f[5] = c.y, f[6] = d.x, f[7] = d.y;
}

template <typename T> static __device__ __forceinline__ void load8(float (&f)[8], const T *p)
{
    unpack8<T>(f, *reinterpret_cast<const uint4 *>(p));
}

template <typename T> static __device__ __forceinline__ void store8(T *p, const float (&f)[8])
{
    constexpr int BF16 = ptx_bf16<T>;
    uint4 v;
    v.x = pack2<BF16>(f[0], f[1]);
    v.y = pack2<BF16>(f[2], f[3]);
    v.z = pack2<BF16>(f[4], f[5]);
    v.w = pack2<BF16>(f[6], f[7]);
    *reinterpret_cast<uint4 *>(p) = v;
}

/* A pair of adjacent values (4-byte aligned). */
template <typename T> static __device__ __forceinline__ float2 load2(const T *p)
{
    return unpack2<ptx_bf16<T>>(*reinterpret_cast<const uint32_t *>(p));
}

template <typename T> static __device__ __forceinline__ void store2(T *p, float lo, float hi)
{
    *reinterpret_cast<uint32_t *>(p) = pack2<ptx_bf16<T>>(lo, hi);
}

/* The activations in the GEMM epilogues are branch-free MUFU forms, not erff,
 * tanhf or a division (each a routine with branches on its argument): in
 * gemm_sm90's GLU epilogue one warp a scheduler runs 64 of them back to back,
 * and with erff they took longer than the tile's MMAs, which the ping-pong
 * cannot hide (clock64 in the kernel at ModernBERT's FFN1, [23923 x 768] x
 * [768 x 2304]: 10k cycles an epilogue against 8k of main loop; with fuse_erf
 * the GEMM went from 0.77 to 0.85 of the rate of cuBLASLt's plain GEMM of the
 * same output: bench/results/fuse-glu-2026-11-26b-h100.txt). Exact GELU's erf
 * here is Abramowitz and Stegun's 7.1.26 (1 - t poly(t) e^(-x^2), t = 1 / (1 +
 * p |x|), the sign put back), within 5e-7 of erf in fp32: the GELU's error
 * from it is under 3e-7 |x|, and the tanh and the SiLU's reciprocal are a few
 * 1e-7 off, all far below a 16-bit output's rounding. */
static __device__ __forceinline__ float fuse_erf(float x)
{
    const float a = fabsf(x);
    const float t = rcp_approx(fmaf(0.3275911f, a, 1.0f));
    float poly = fmaf(1.061405429f, t, -1.453152027f);
    poly = fmaf(poly, t, 1.421413741f);
    poly = fmaf(poly, t, -0.284496736f);
    poly = fmaf(poly, t, 0.254829592f);
    const float r = 1.0f - poly * t * __expf(-a * a);
    return copysignf(r, x);
}

static __device__ __forceinline__ float act_apply(float x, int act)
{
    switch (act) {
    case ACT_GELU: return 0.5f * x * (1.f + fuse_erf(x * 0.70710678118654752f));
    case ACT_GELU_TANH: {
        float u = 0.79788456080286536f * (x + 0.044715f * x * x * x);
        return 0.5f * x * (1.f + tanh_approx(u));
    }
    case ACT_RELU: return x > 0.f ? x : 0.f;
    case ACT_SILU: return x * rcp_approx(1.f + __expf(-x));
    default: return x;
    }
}

/* One unit of a gated linear unit: act(a) * b (SwiGLU, GeGLU). */
static __device__ __forceinline__ float glu_apply(float a, float b, int act)
{
    return act_apply(a, act) * b;
}

#endif /* STOF_FUSE_VEC_CUH */
