/*
 * ptx.cuh — the PTX building blocks every mma.sync kernel shares (attention
 * and the fusion templates): cp.async copies into shared memory (zero-filling
 * what lies out of range), ldmatrix fragment loads, mma.sync m16n8k16 with
 * fp32 accumulation, fp32 <-> 16-bit conversions, exp2 and warp reductions.
 * The sm_90a pieces (wgmma, mbarriers, TMA) are in hopper.cuh.
 *
 * 16-bit element types are a template flag, BF16 (1: bf16, 0: fp16); code
 * typed on __half / __nv_bfloat16 passes ptx_bf16<T>.
 *
 * Fragment layouts (PTX ISA, mma.m16n8k16 with .f16/.bf16): lane = 4 * g + t.
 *   A (16 x 16, row-major):  a0 = (row g, cols 2t, 2t+1), a1 = row g+8,
 *                            a2 = (row g, cols 2t+8, 2t+9), a3 = row g+8 of those
 *   B (16 x 8, k x n):       b0 = (k 2t, 2t+1; n g),  b1 = (k 2t+8, 2t+9; n g)
 *   C (16 x 8, fp32):        c0, c1 = (row g, cols 2t, 2t+1), c2, c3 = row g+8
 * The lower 16 bits of a packed register hold the lower column (or k) index.
 */
#ifndef STOF_CORE_PTX_CUH
#define STOF_CORE_PTX_CUH

#include <stdint.h>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#define PTX_FULL_WARP 0xffffffffu

template <typename T> constexpr int ptx_bf16 = 0;
template <> constexpr int ptx_bf16<__nv_bfloat16> = 1;

/* ---------------------------------------------------------------- memory */

static __device__ __forceinline__ uint32_t smem_addr(const void *p)
{
    return (uint32_t)__cvta_generic_to_shared(p);
}

/* 16 bytes global -> shared, bypassing L1; src_bytes 0 writes zeros and reads
 * nothing (src must still be a valid address). */
static __device__ __forceinline__ void cp_async16(uint32_t dst, const void *src, int src_bytes)
{
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src),
                 "r"(src_bytes)
                 : "memory");
}

/* 4 bytes global -> shared, through L1 (.cg copies 16 bytes only). */
static __device__ __forceinline__ void cp_async4(uint32_t dst, const void *src)
{
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(dst), "l"(src) : "memory");
}

static __device__ __forceinline__ void cp_async_commit(void)
{
    asm volatile("cp.async.commit_group;\n" ::: "memory");
}

/* Wait until at most N committed groups of this thread are still in flight. */
template <int N> static __device__ __forceinline__ void cp_async_wait(void)
{
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

static __device__ __forceinline__ void ldsm_x4(uint32_t r[4], uint32_t addr)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
}

static __device__ __forceinline__ void ldsm_x4_trans(uint32_t r[4], uint32_t addr)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
}

/* ---------------------------------------------------------------- MMA */

/* c += a * b for one m16n8k16 tile. */
template <int BF16>
static __device__ __forceinline__ void mma_16816(float c[4], const uint32_t a[4], uint32_t b0,
                                                 uint32_t b1)
{
    if (BF16) {
        asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, "
            "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
            : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
    } else {
        asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, "
            "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
            : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
    }
}

/* ---------------------------------------------------------------- conversions */

/* Two floats -> one register of two 16-bit values, lo in the lower half
 * (cvt packs its first source into the upper half). fp16 goes through the
 * intrinsic, whose cvt.rn.f16x2 the fp16 GEMM kernels were tuned with: the
 * same instruction as plain asm lays out gemm_sm90 differently. */
template <int BF16> static __device__ __forceinline__ uint32_t pack2(float lo, float hi)
{
    uint32_t r;
    if (BF16) {
        asm("cvt.rn.bf16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
    } else {
        __half2 h = __floats2half2_rn(lo, hi);
        r = *reinterpret_cast<uint32_t *>(&h);
    }
    return r;
}

/* One register of two 16-bit values -> (lower, upper) as floats. */
template <int BF16> static __device__ __forceinline__ float2 unpack2(uint32_t v)
{
    if (BF16) return __bfloat1622float2(*reinterpret_cast<__nv_bfloat162 *>(&v));
    return __half22float2(*reinterpret_cast<__half2 *>(&v));
}

template <int BF16> static __device__ __forceinline__ float half_to_float(uint16_t x)
{
    if (BF16) return __uint_as_float((uint32_t)x << 16);
    return __half2float(__ushort_as_half(x));
}

template <int BF16> static __device__ __forceinline__ uint16_t float_to_half(float f)
{
    return (uint16_t)(pack2<BF16>(f, 0.0f) & 0xffffu);
}

/* 2^x, approximate (2 ulp); 2^-inf = +0. */
static __device__ __forceinline__ float exp2_approx(float x)
{
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
    return y;
}

/* 1/x, approximate (1 ulp): one MUFU op, where x / y compiles to IEEE
 * division's checked subroutine; 1/inf = +0. */
static __device__ __forceinline__ float rcp_approx(float x)
{
    float y;
    asm("rcp.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
    return y;
}

/* tanh from one exp2 and one reciprocal, both MUFU ops: absolute error a few
 * 1e-7, where tanhf takes a long polynomial and a plain division the checked
 * IEEE subroutine (the soft-cap attention variant ran 2.7 times the time of
 * the uncapped one with it at head dim 128). Saturates to +-1: 1 / inf is 0. */
static __device__ __forceinline__ float tanh_approx(float x)
{
    return fmaf(-2.0f, rcp_approx(1.0f + exp2_approx(x * 2.8853900817779268f)), 1.0f);
}

/* ---------------------------------------------------------------- warp reductions */

/* Over the 4 lanes of a quad (the lanes sharing an accumulator row). */
static __device__ __forceinline__ float quad_max(float x)
{
    x = fmaxf(x, __shfl_xor_sync(PTX_FULL_WARP, x, 1));
    return fmaxf(x, __shfl_xor_sync(PTX_FULL_WARP, x, 2));
}

static __device__ __forceinline__ float quad_sum(float x)
{
    x += __shfl_xor_sync(PTX_FULL_WARP, x, 1);
    return x + __shfl_xor_sync(PTX_FULL_WARP, x, 2);
}

static __device__ __forceinline__ float warp_max(float x)
{
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
        x = fmaxf(x, __shfl_xor_sync(PTX_FULL_WARP, x, o));
    return x;
}

static __device__ __forceinline__ float warp_sum(float x)
{
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
        x += __shfl_xor_sync(PTX_FULL_WARP, x, o);
    return x;
}

#endif /* STOF_CORE_PTX_CUH */
