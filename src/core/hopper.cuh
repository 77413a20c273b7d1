/*
 * hopper.cuh — PTX wrappers shared by the sm_90a kernels (warpgroup MMA):
 * the wgmma fence / commit / wait, a register fence for its accumulators, the
 * shared-memory matrix descriptor of 128-byte-swizzled tiles, the operand
 * list macro of accumulator fragments, mbarriers and bulk tensor copies (TMA),
 * and on the host the driver's tensor-map encoder. Included only by *_sm90.cu
 * files.
 */
#ifndef STOF_CORE_HOPPER_CUH
#define STOF_CORE_HOPPER_CUH

#include <stdint.h>
#include <stdio.h>

#include "core/core.h"

#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime.h>

static __device__ __forceinline__ void wgmma_fence(void)
{
    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}

static __device__ __forceinline__ void wgmma_commit(void)
{
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}

/* Wait until at most N committed wgmma groups of this warpgroup are pending. */
template <int N> static __device__ __forceinline__ void wgmma_wait(void)
{
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}

/* A new definition of each register, ordered after the preceding asm: keeps
 * the compiler from moving uses of wgmma results above the wait that makes
 * them valid, or definitions of its inputs below the issue. */
template <int N> static __device__ __forceinline__ void reg_fence(float (&r)[N])
{
#pragma unroll
    for (int i = 0; i < N; i++)
        asm volatile("" : "+f"(r[i])::"memory");
}

/* Shared-memory matrix descriptor (PTX ISA, "matrix descriptor"): bits 0-13
 * start address >> 4, 16-29 leading-dimension byte offset >> 4, 32-45
 * stride-dimension byte offset >> 4, 49-51 base offset (0: every tile is
 * 1024-byte aligned and offsets inside a row stay below 128 bytes), 62-63
 * layout 1 = 128-byte swizzle.
 *   K-major: SBO = 1024, the step between 8-row groups; LBO unused (the k16
 *   slice of one instruction stays inside a 128-byte row), set to 16 bytes.
 *   MN-major: LBO = the step between 64-element column blocks along N,
 *   SBO = 1024, the step between 8-row groups along K. */
static __device__ __forceinline__ uint64_t sw128_desc(uint32_t addr, uint32_t lbo, uint32_t sbo)
{
    return (uint64_t)((addr & 0x3ffffu) >> 4) | ((uint64_t)(lbo >> 4) << 16) |
           ((uint64_t)(sbo >> 4) << 32) | (1ull << 62);
}

/* ---------------------------------------------------------------- mbarriers and TMA */

static __device__ __forceinline__ void mbar_init(uint32_t bar, uint32_t count)
{
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}

/* Makes the barrier initialisations visible to the async proxy (TMA). */
static __device__ __forceinline__ void fence_mbar_init(void)
{
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}

/* Blocks until the phase of the given parity has completed. */
static __device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity)
{
    uint32_t done;
    do {
        asm volatile("{\n.reg .pred p;\n"
                     "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
                     "selp.u32 %0, 1, 0, p;\n}\n"
                     : "=r"(done)
                     : "r"(bar), "r"(parity)
                     : "memory");
    } while (!done);
}

/* Blocks until the phases of the given parities of two barriers have
 * completed: both are tested at once, so that where both are already done
 * (the common case) the wait costs one round trip, not two in a row. */
static __device__ __forceinline__ void mbar_wait_both(uint32_t a, uint32_t parity_a, uint32_t b,
                                                      uint32_t parity_b)
{
    uint32_t done_a, done_b;
    asm volatile("{\n.reg .pred p, q;\n"
                 "mbarrier.test_wait.parity.shared::cta.b64 p, [%2], %3;\n"
                 "mbarrier.test_wait.parity.shared::cta.b64 q, [%4], %5;\n"
                 "selp.u32 %0, 1, 0, p;\n"
                 "selp.u32 %1, 1, 0, q;\n}\n"
                 : "=r"(done_a), "=r"(done_b)
                 : "r"(a), "r"(parity_a), "r"(b), "r"(parity_b)
                 : "memory");
    if (!(done_a & done_b)) {
        mbar_wait(a, parity_a);
        mbar_wait(b, parity_b);
    }
}

static __device__ __forceinline__ void mbar_arrive(uint32_t bar)
{
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}

/* Arrives and raises the bytes the current phase waits for. */
static __device__ __forceinline__ void mbar_arrive_expect_tx(uint32_t bar, uint32_t bytes)
{
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes)
                 : "memory");
}

/* The box at (k0, row0) of a 2-D tensor map into shared memory at dst; its
 * bytes complete on bar (out-of-range elements arrive as zeros and count). */
static __device__ __forceinline__ void tma_load_2d(uint32_t dst, const CUtensorMap *map,
                                                   uint32_t bar, int k0, int row0)
{
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes "
                 "[%0], [%1, {%2, %3}], [%4];\n" ::"r"(dst),
                 "l"(reinterpret_cast<uint64_t>(map)), "r"(k0), "r"(row0), "r"(bar)
                 : "memory");
}

static __device__ __forceinline__ void tma_prefetch_map(const CUtensorMap *map)
{
    asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<uint64_t>(map)) : "memory");
}

/* The box at (c0, c1, c2, c3) of a 4-D tensor map into shared memory at dst;
 * its bytes complete on bar (out-of-range elements arrive as zeros and count). */
static __device__ __forceinline__ void tma_load_4d(uint32_t dst, const CUtensorMap *map,
                                                   uint32_t bar, int c0, int c1, int c2, int c3)
{
    asm volatile("cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes "
                 "[%0], [%1, {%2, %3, %4, %5}], [%6];\n" ::"r"(dst),
                 "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(bar)
                 : "memory");
}

/* ---------------------------------------------------------------- warp specialisation */

/* The warpgroup's registers per thread lowered (producer) or raised
 * (consumers) to N, a multiple of 8 in [24, 256]: the CTA's register file
 * moves from the warpgroups that issue copies to those that hold
 * accumulators. Every warp of the warpgroup executes it. */
template <int N> static __device__ __forceinline__ void setmaxnreg_dec(void)
{
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(N));
}

template <int N> static __device__ __forceinline__ void setmaxnreg_inc(void)
{
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(N));
}

/* Named barrier ID over N threads: wait for it (bar.sync), or count this
 * warp's threads towards it and go on (bar.arrive). Immediate ids, so that
 * the CTA reserves only the barriers it names. */
template <int ID, int N> static __device__ __forceinline__ void named_bar_sync(void)
{
    asm volatile("bar.sync %0, %1;\n" ::"n"(ID), "n"(N) : "memory");
}

template <int ID, int N> static __device__ __forceinline__ void named_bar_arrive(void)
{
    asm volatile("bar.arrive %0, %1;\n" ::"n"(ID), "n"(N) : "memory");
}

/* The ping-pong of two consumer warpgroups (N threads together) taking the
 * tensor cores in turns: warpgroup c waits for its turn (named barrier 1 + c,
 * which the other's arrivals complete) and, once its products are issued,
 * hands the turn over (gemm_sm90.cu, blockwise_ws_sm90.cu). */
template <int N> static __device__ __forceinline__ void pingpong_wait(int c)
{
    if (c == 0)
        named_bar_sync<1, N>();
    else
        named_bar_sync<2, N>();
}

template <int N> static __device__ __forceinline__ void pingpong_pass(int c)
{
    if (c == 0)
        named_bar_arrive<2, N>();
    else
        named_bar_arrive<1, N>();
}

/* ---------------------------------------------------------------- host: tensor maps */

typedef PFN_cuTensorMapEncodeTiled_v12000 stof_tma_encode_fn;

static inline stof_tma_encode_fn stof_tma_lookup_encoder(void)
{
    void *fn = NULL;
    cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
#if CUDART_VERSION >= 12050
    cudaError_t e = cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000,
                                                     cudaEnableDefault, &found);
#else
    cudaError_t e =
        cudaGetDriverEntryPoint("cuTensorMapEncodeTiled", &fn, cudaEnableDefault, &found);
#endif
    if (e != cudaSuccess || found != cudaDriverEntryPointSuccess) {
        (void)cudaGetLastError(); /* not the caller's error to find later */
        return NULL;
    }
    return (stof_tma_encode_fn)fn;
}

/* The driver's encoder, looked up once (a function-local static is initialised
 * once even when threads race to it). */
static inline stof_tma_encode_fn stof_tma_encoder(void)
{
    static const stof_tma_encode_fn fn = stof_tma_lookup_encoder();
    return fn;
}

/* A tiled tensor map of fp16 or bf16 elements, 128-byte swizzled, zeros
 * outside the tensor: rank dimensions (innermost first), rank - 1 byte
 * strides, the box in elements, and the traversal step of each dimension
 * (NULL: 1 everywhere; a box of n * step elements loads n of them, step
 * apart). who and name go into the error messages. */
static inline stof_status stof_tma_encode_sw128(CUtensorMap *map, const char *who, const char *name,
                                                int bf16, int rank, const void *ptr,
                                                const cuuint64_t *dims, const cuuint64_t *strides,
                                                const cuuint32_t *box, const cuuint32_t *step)
{
    stof_tma_encode_fn encode = stof_tma_encoder();
    STOF_REQUIRE(encode, STOF_ERR_UNSUPPORTED,
                 "%s: the CUDA driver offers no cuTensorMapEncodeTiled (driver too old?)", who);
    const cuuint32_t ones[5] = {1, 1, 1, 1, 1};
    const cuuint32_t *steps = step ? step : ones;
    const CUresult r =
        encode(map, bf16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT16,
               (cuuint32_t)rank, const_cast<void *>(ptr), dims, strides, box, steps,
               CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
               CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    if (r != CUDA_SUCCESS) {
        char shape[96] = "";
        for (int d = 0, at = 0; d < rank && at < (int)sizeof shape; d++)
            at += snprintf(shape + at, sizeof shape - (size_t)at, d ? " x %llu" : "%llu",
                           (unsigned long long)dims[d]);
        return stof_error(STOF_ERR_CUDA,
                          "%s: cuTensorMapEncodeTiled failed (CUresult %d) for %s = %p, %s", who,
                          (int)r, name, ptr, shape);
    }
    return STOF_OK;
}

/* Eight accumulator registers d[i..i+7] as read-write asm operands. */
#define SM90_OUT8(d, i)                                                                            \
    "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3]), "+f"(d[i + 4]), "+f"(d[i + 5]),    \
        "+f"(d[i + 6]), "+f"(d[i + 7])

#endif /* STOF_CORE_HOPPER_CUH */
