/*
 * select.h — the analytical kernel selector (STOF's model, with consistent
 * units). Pure functions over plain numbers: nothing here touches a device or
 * synchronises, so every decision is unit-testable on the CPU.
 *
 * 1. Row-wise or block-wise. With n_q = ceil(Lq / 16), n_k = ceil(Lk / 16) and
 *    load16 the number of 16 x 16 tiles the block-wise kernel would load for one
 *    mask instance,
 *        load16 = tiles_per_row * n_trow * (tile_m * tile_n / 256)
 *        rho    = min(1, load16 / (n_q * n_k))         (density in 16 x 16 units;
 *                 a tile reaching past the matrix loads zero-fill there, not memory)
 *        n      = sqrt(n_q * n_k)                      (n = ceil(L / 16) when Lq == Lk)
 *        row-wise  when  rho < tau / (log2 n)^2,  tau = 1.1,  else block-wise.
 *    n <= 2 (L <= 32) always goes row-wise (log2 n <= 1 makes the bound >= 1.1).
 *    tiles_per_row comes from mask_estimate (an upper bound known at compile
 *    time), never from exact device statistics. STOF's public artifact counted
 *    64 x 64 tiles and divided by a 16 x 16 tile count; here both sides are in
 *    16 x 16 units.
 *
 * 2. Among the instantiated block-wise configurations that can serve the mask's
 *    tile shape (block_n == tile_n and block_m = 16 or 32 rows per warp, dividing tile_m),
 *    the one with the highest score, an estimate of tensor-core flops per clock
 *    over the whole device:
 *        ctas_per_sm = min(smem_per_sm / smem, max_threads_per_sm / threads,
 *                          regs_per_sm / (regs * threads), 32)
 *        ctas        = B * H * ceil(Lq / block_m)
 *        resident    = min(ctas_per_sm, ceil(ctas / sm_count))   CTAs sharing an SM
 *        waves       = ceil(ctas / (ctas_per_sm * sm_count))
 *        per listed tile, the SM needs
 *          t = max(F_warp / R_WARP,                   one warp's latency-bound pace
 *                  resident * warps * F_warp / R_SM,   the SM's tensor throughput
 *                  resident * warps * bytes_tile / R_SMEM,  every warp reads the
 *                                                      whole K and V tile from
 *                                                      shared memory
 *                  resident * bytes_tile / R_L2)       K and V tiles from L2
 *          F_warp = 4 * (block_m / warps) * block_n * D (QK^T and PV for a warp's rows),
 *          bytes_tile = 4 * block_n * D (K and V tiles, 2 bytes per element)
 *        time  = waves * tiles_per_row * t
 *        score = B * H * ceil(Lq / block_m) * warps * tiles_per_row * F_warp / time
 *    with R_WARP = 256 flop/clk, R_SM = 2048 flop/clk (mma.sync fp16/bf16 on
 *    sm_80/sm_90), R_SMEM = 128 bytes/clk (shared memory per SM) and R_L2 = 24
 *    bytes/clk per SM. With 16 rows per warp the shared-memory term equals the
 *    tensor term; 32 rows per warp halve it. Scores within 1% count as a tie,
 *    which goes to more rows per warp (measured faster: the model does not see
 *    all of the shared-memory cost), then to fewer warps. smem and regs are the
 *    kernel's real figures (attn_bw_smem_bytes, ptxas register counts).
 *
 * A row-wise choice reports score = (tau / (log2 n)^2) / rho (> 1: below the
 * bound; +inf for an empty mask).
 */
#ifndef STOF_ATTN_SELECT_H
#define STOF_ATTN_SELECT_H

#include <math.h>
#include <stdint.h>

#include "stof.h"

#ifdef __cplusplus
extern "C" {
#endif

#define ATTN_TAU 1.1
#define ATTN_R_WARP 256.0
#define ATTN_R_SM 2048.0
#define ATTN_R_L2 24.0
#define ATTN_R_SMEM 128.0
#define ATTN_ROWWISE_WARPS 4 /* query rows (one per warp) per row-wise CTA */

typedef struct attn_device {
    int sm_count;
    int64_t smem_per_sm;    /* bytes */
    int64_t smem_per_block; /* bytes one CTA may opt into */
    int max_threads_per_sm;
    int regs_per_sm;
} attn_device;

typedef struct attn_problem {
    int batch, heads, lq, lk, head_dim;
    int tile_m, tile_n;   /* the compiled mask's tile shape */
    double tiles_per_row; /* listed tiles per (instance, tile row), mask_estimate */
} attn_problem;

typedef struct attn_bw_config {
    int warps, block_m, block_n;
} attn_bw_config;

/* The block-wise configurations src/attn/blockwise.cu instantiates, for both
 * fp16 and bf16: 4 and 8 warps of 16 rows for head dims 32, 64 and 128, and 4
 * warps of 32 rows (two m-blocks each: half the shared-memory traffic per
 * flop) for head dims 32 and 64. */
#define ATTN_BW_NCONFIGS 3
extern const attn_bw_config attn_bw_configs[ATTN_BW_NCONFIGS];

/* Head dims the GPU kernels are instantiated for. */
int attn_head_dim_supported(int head_dim);

double attn_density16(const attn_problem *p);
/* tau / (log2 n)^2 with n = sqrt(n_q n_k); +inf when n <= 1. */
double attn_rowwise_bound(int lq, int lk);

/* Can configuration c serve masks of tile_m x tile_n tiles at this head dim? */
int attn_bw_config_fits(const attn_bw_config *c, int head_dim, int tile_m, int tile_n);
/* Dynamic shared memory of one block-wise CTA: Q block plus double-buffered K
 * and V tiles, rows padded by 16 bytes against bank conflicts. */
int64_t attn_bw_smem_bytes(int head_dim, int block_m, int block_n);
/* Registers per thread of the instantiation (ptxas, sm_90). */
int attn_bw_regs(int head_dim, const attn_bw_config *c);
int attn_bw_ctas_per_sm(const attn_bw_config *c, int head_dim, const attn_device *dev);
double attn_bw_score(const attn_bw_config *c, const attn_problem *p, const attn_device *dev);

/* The decision. forced: STOF_ATTN_AUTO, _BLOCKWISE or _ROWWISE. Fails (with
 * the message set) only when a forced block-wise run has no configuration for
 * the mask's tile shape or head dim. */
stof_status attn_select(const attn_problem *p, const attn_device *dev, stof_attn_kernel forced,
                        stof_attn_choice *out);

#ifdef __cplusplus
}
#endif

#endif /* STOF_ATTN_SELECT_H */
