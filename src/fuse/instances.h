/*
 * instances.h — the fixed set of template instantiations, as X-macros so the
 * host-side descriptor table (config.c) and the kernel dispatch (*.cu) cannot
 * drift apart. X(block_m, block_n, block_k, warps_m, warps_n, stages).
 * Kept small on purpose: every entry is compiled for two dtypes and each
 * CUDA architecture.
 */
#ifndef STOF_FUSE_INSTANCES_H
#define STOF_FUSE_INSTANCES_H

/* Output tile block_m x block_n. */
#define FUSE_GEMM_BIAS_ACT_INSTANCES(X)                                                            \
    X(128, 256, 32, 2, 4, 3)                                                                       \
    X(128, 128, 32, 2, 4, 4)                                                                       \
    X(64, 128, 32, 2, 2, 4)                                                                        \
    X(64, 64, 64, 2, 2, 3)                                                                         \
    X(32, 64, 64, 1, 4, 3)

/* block_m full rows, block_n columns per chunk. */
#define FUSE_GEMM_RES_LN_INSTANCES(X)                                                              \
    X(16, 128, 64, 1, 4, 3)                                                                        \
    X(32, 128, 32, 1, 4, 3)                                                                        \
    X(64, 128, 32, 2, 4, 3)

/* block_m full rows, block_n intermediate columns per chunk; warps_m is 1. */
#define FUSE_FFN_CHAIN_INSTANCES(X)                                                                \
    X(32, 128, 32, 1, 8, 2)                                                                        \
    X(16, 64, 32, 1, 4, 3)

/* Hopper (sm_90a), cooperative: block_m = 64 x warps_m (consumer
 * warpgroups sharing a tile, 64 rows each), block_k 64 (one 128-byte swizzle
 * atom), warps_n 1. The 128x128 tile with 3 stages leaves room for two CTAs
 * per SM. The 64x64 tile is for a few hundred rows: many CTAs, each with 12
 * stages, so that a K of 768 is one pass of loads (its weights issued while
 * the previous kernel runs).
 * Ping-pong: warps_m 1, warps_n 2, two warpgroups taking whole tiles in
 * turns, one's epilogue under the other's main loop; 64x256 (5 stages of 40
 * KB) or 128x128 (7 of 32 KB), each filling the SM's shared memory. */
#define FUSE_GEMM_SM90_INSTANCES(X)                                                                \
    X(128, 256, 64, 2, 1, 4)                                                                       \
    X(128, 128, 64, 2, 1, 3)                                                                       \
    X(128, 128, 64, 1, 2, 7)                                                                       \
    X(64, 256, 64, 1, 2, 5)                                                                        \
    FUSE_GEMM_SM90_SMALL(X)
/* The 64x64 tile, which fuse_config_sm90_small names. */
#define FUSE_GEMM_SM90_SMALL(X) X(64, 64, 64, 1, 1, 12)

/* Its shared memory: the stages of x and w tiles (rows of 128 bytes), a full
 * and an empty mbarrier per stage, and slack to align the tiles to 1024 bytes. */
#define FUSE_SM90_SMEM_BYTES(bm, bn, stages)                                                       \
    ((size_t)(stages) * ((bm) + (bn)) * 128 + (size_t)(stages)*16 + 1024)

/* Hidden sizes the chain is compiled for (its output row lives in registers). */
#define FUSE_FFN_CHAIN_HIDDENS(X) X(384) X(768) X(1024)

/* The chain streams w2 in k slices of this depth (one mma k step), so that a
 * pipeline stage holding hidden x slice stays small. */
#define FUSE_CHAIN_K2 16

/* Padding (elements) after each shared-memory row: staggers ldmatrix rows over banks. */
#define FUSE_SMEM_PAD 8

#endif /* STOF_FUSE_INSTANCES_H */
