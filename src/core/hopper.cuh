/*
 * hopper.cuh — PTX wrappers shared by the sm_90a kernels (warpgroup MMA):
 * the wgmma fence / commit / wait, a register fence for its accumulators, the
 * shared-memory matrix descriptor of 128-byte-swizzled tiles, and the operand
 * list macro of accumulator fragments. Included only by *_sm90.cu files.
 */
#ifndef STOF_CORE_HOPPER_CUH
#define STOF_CORE_HOPPER_CUH

#include <stdint.h>

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

/* Eight accumulator registers d[i..i+7] as read-write asm operands. */
#define SM90_OUT8(d, i)                                                                            \
    "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3]), "+f"(d[i + 4]), "+f"(d[i + 5]),    \
        "+f"(d[i + 6]), "+f"(d[i + 7])

#endif /* STOF_CORE_HOPPER_CUH */
