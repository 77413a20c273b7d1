/*
 * launch.cuh — kernel launches with programmatic dependent launch (PDL).
 *
 * A small kernel that follows a large one in a stream (a LayerNorm after a
 * GEMM, attention after the QKV projection) otherwise pays the launch latency
 * of its grid after the previous grid has finished. Launched with programmatic
 * stream serialization (devices of compute capability 9.0 and later), its
 * CTAs may be scheduled while the previous kernel drains; the kernel then
 * calls stof_grid_wait() before its first access to global memory, which
 * returns once the previous grid has completed and its writes are visible.
 * Stream capture keeps the relation as a programmatic edge of the graph.
 * Every kernel launched through stof_launch_pdl must call stof_grid_wait()
 * before touching memory another kernel writes or reads; on older devices
 * the attribute is left off and the wait compiles to nothing.
 */
#ifndef STOF_CORE_LAUNCH_CUH
#define STOF_CORE_LAUNCH_CUH

#include <cuda_runtime.h>

static __device__ __forceinline__ void stof_grid_wait(void)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}

/* Lets the next kernel of the stream, when launched with PDL, be scheduled
 * now: its CTAs may start (and do work that reads nothing this grid or its
 * predecessors write) while this grid runs; its stof_grid_wait() still waits
 * for all of this grid. Without the call a grid triggers as its CTAs exit. */
static __device__ __forceinline__ void stof_grid_launch_dependents(void)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}

/* cudaLaunchKernelExC with PDL when pdl is true: args as for cudaLaunchKernel. */
static inline cudaError_t stof_launch_pdl(bool pdl, const void *fn, dim3 grid, dim3 block,
                                          void **args, size_t smem, cudaStream_t stream)
{
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = grid;
    cfg.blockDim = block;
    cfg.dynamicSmemBytes = smem;
    cfg.stream = stream;
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[0].val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = attr;
    cfg.numAttrs = pdl ? 1 : 0;
    return cudaLaunchKernelExC(&cfg, fn, args);
}

#endif /* STOF_CORE_LAUNCH_CUH */
