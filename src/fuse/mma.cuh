/*
 * mma.cuh — the device building blocks of the fusion templates: cp.async
 * copies, ldmatrix, the m16n8k16 tensor-core MMA (fp16/bf16 in, fp32
 * accumulate) as inline PTX, 16-bit pair/vector conversions and activations.
 *
 * Fragment layouts follow the PTX ISA for mma.m16n8k16 (g = lane / 4, t = lane % 4):
 *   A 16x16 row-major: a0 (g, 2t..2t+1), a1 (g+8, 2t..), a2 (g, 2t+8..), a3 (g+8, 2t+8..)
 *   B 16x8 "col":      b0 (k 2t..2t+1, n g), b1 (k 2t+8.., n g)
 *   C 16x8 fp32:       c0 c1 (g, 2t..2t+1), c2 c3 (g+8, 2t..2t+1)
 * A tile stored [m][k] and a weight tile stored [n][k] (k contiguous in both)
 * are read with non-transposed ldmatrix.x4: one call gives a full A fragment,
 * or the B fragments of two adjacent n8 tiles.
 */
#ifndef STOF_FUSE_MMA_CUH
#define STOF_FUSE_MMA_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

#include "fuse/fuse.h"
#include "fuse/instances.h"

/* ---------------------------------------------------------------- memory */

static __device__ __forceinline__ uint32_t smem_u32(const void *p)
{
    return (uint32_t)__cvta_generic_to_shared(p);
}

/* 16-byte global -> shared copy; when !valid nothing is read and the
 * destination is zero-filled (src must still be a mapped address). */
static __device__ __forceinline__ void cp_async16(void *dst, const void *src, bool valid)
{
    int bytes = valid ? 16 : 0;
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_u32(dst)), "l"(src),
                 "r"(bytes)
                 : "memory");
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

static __device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const void *p)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_u32(p)));
}

/* ---------------------------------------------------------------- MMA */

template <typename T>
static __device__ __forceinline__ void mma_16816(float (&c)[4], const uint32_t (&a)[4], uint32_t b0,
                                                 uint32_t b1);

template <>
__device__ __forceinline__ void mma_16816<__half>(float (&c)[4], const uint32_t (&a)[4],
                                                  uint32_t b0, uint32_t b1)
{
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
                 "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

template <>
__device__ __forceinline__ void mma_16816<__nv_bfloat16>(float (&c)[4], const uint32_t (&a)[4],
                                                         uint32_t b0, uint32_t b1)
{
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
                 "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

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
            ldmatrix_x4(af[mt], a_lane + mt * 16 * lda + ks * 16);
#pragma unroll
        for (int np = 0; np < NT / 2; np++) {
            uint32_t bf[4];
            ldmatrix_x4(bf, b_lane + np * 16 * ldb + ks * 16);
#pragma unroll
            for (int mt = 0; mt < MT; mt++) {
                mma_16816<T>(acc[mt][2 * np], af[mt], bf[0], bf[1]);
                mma_16816<T>(acc[mt][2 * np + 1], af[mt], bf[2], bf[3]);
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
            cp_async16(s + r * (COLS + FUSE_SMEM_PAD) + kc, src, ok);
        }
    }
}

/* ---------------------------------------------------------------- conversions */

template <typename T> static __device__ __forceinline__ uint32_t pack2(float lo, float hi);
template <> __device__ __forceinline__ uint32_t pack2<__half>(float lo, float hi)
{
    __half2 h = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<uint32_t *>(&h);
}
template <> __device__ __forceinline__ uint32_t pack2<__nv_bfloat16>(float lo, float hi)
{
    __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<uint32_t *>(&h);
}

template <typename T> static __device__ __forceinline__ float2 unpack2(uint32_t v);
template <> __device__ __forceinline__ float2 unpack2<__half>(uint32_t v)
{
    return __half22float2(*reinterpret_cast<__half2 *>(&v));
}
template <> __device__ __forceinline__ float2 unpack2<__nv_bfloat16>(uint32_t v)
{
    return __bfloat1622float2(*reinterpret_cast<__nv_bfloat162 *>(&v));
}

/* 8 consecutive 16-bit values <-> 8 floats through one 16-byte access. */
/* Eight 16-bit values, as loaded in one 16-byte word, to fp32. */
template <typename T> static __device__ __forceinline__ void unpack8(float (&f)[8], uint4 v)
{
    float2 a = unpack2<T>(v.x), b = unpack2<T>(v.y), c = unpack2<T>(v.z), d = unpack2<T>(v.w);
    f[0] = a.x, f[1] = a.y, f[2] = b.x, f[3] = b.y, f[4] = c.x, f[5] = c.y, f[6] = d.x, f[7] = d.y;
}

template <typename T> static __device__ __forceinline__ void load8(float (&f)[8], const T *p)
{
    unpack8<T>(f, *reinterpret_cast<const uint4 *>(p));
}

template <typename T> static __device__ __forceinline__ void store8(T *p, const float (&f)[8])
{
    uint4 v;
    v.x = pack2<T>(f[0], f[1]);
    v.y = pack2<T>(f[2], f[3]);
    v.z = pack2<T>(f[4], f[5]);
    v.w = pack2<T>(f[6], f[7]);
    *reinterpret_cast<uint4 *>(p) = v;
}

/* A pair of adjacent values (4-byte aligned). */
template <typename T> static __device__ __forceinline__ float2 load2(const T *p)
{
    return unpack2<T>(*reinterpret_cast<const uint32_t *>(p));
}

template <typename T> static __device__ __forceinline__ void store2(T *p, float lo, float hi)
{
    *reinterpret_cast<uint32_t *>(p) = pack2<T>(lo, hi);
}

/* ---------------------------------------------------------------- activations */

static __device__ __forceinline__ float act_apply(float x, int act)
{
    switch (act) {
    case ACT_GELU: return 0.5f * x * (1.f + erff(x * 0.70710678118654752f));
    case ACT_GELU_TANH: {
        float u = 0.79788456080286536f * (x + 0.044715f * x * x * x);
        return 0.5f * x * (1.f + tanhf(u));
    }
    case ACT_RELU: return x > 0.f ? x : 0.f;
    case ACT_SILU: return x / (1.f + __expf(-x));
    default: return x;
    }
}

/* ---------------------------------------------------------------- launch helpers */

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

#endif /* STOF_FUSE_MMA_CUH */
