/*
 * select.h — the analytical kernel selector: a measured cost model between
 * the row-wise and block-wise kernels, then STOF's occupancy model (with
 * consistent units) among block-wise configurations. Pure functions over plain numbers: nothing
 * here touches a device or synchronises, so every decision is unit-testable on the CPU.
 *
 * 1. Row-wise or block-wise: whichever costs less device time per row block
 *    (tile_m query rows), by a cost model measured on an H200:
 *        rows   = min(Lq, tile_m)                     query rows a row block holds
 *        keys   = min(Lk, tiles_per_row * tile_n)     keys a row may see (at most)
 *        t_row  = ceil(rows / 4) * C_RCTA + rows * keys * C_PAIR
 *                 (row-wise: a CTA per 4 rows, every visible pair scored alone)
 *        t_blk  = C_CTA + tiles_per_row * C_TILE
 *                 (block-wise: a CTA per row block, tensor-core tiles)
 *        row-wise  when  t_row < t_blk,  else block-wise,
 *    with C_RCTA = 2.6, C_PAIR = 0.084, C_CTA = 7.5 and C_TILE = 2.5 ns of
 *    device time at head dim 64 (bench/results/attention-rowwise-2026-11-22-
 *    h200.txt; head dim 32 decides alike). In effect row-wise serves
 *    sequences of a handful of queries (Lq <= 7 when rows see every key): at
 *    L = 1 it takes 13 us where block-wise takes 28 (B = 256, H = 12); from
 *    L = 8 on block-wise wins, 1.3x at L = 8, 12x at L = 32, and on the
 *    sparsest long masks alike (one visible key per row at L = 4096: 0.032
 *    against 0.238 ms). Tile shapes or head dims no block-wise configuration
 *    serves go row-wise whatever the cost.
 *    STOF's rule (row-wise when the density in 16 x 16 tiles is below
 *    tau / (log2 n)^2, n = L / 16, tau = 1.1) sent exactly the sparsest long
 *    masks to row-wise, 7-38x slower on this hardware (one 64 x 64 tile per
 *    row at L = 4096: 1.17 against 0.031 ms), and sequences of 8 to 32
 *    queries, up to 12x slower; it is not used.
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
 * 3. Hopper. The wgmma kernel (blockwise_sm90.cu) is usable when the device's
 *    compute capability is exactly 9.0 (attn_device.cc == 90: wgmma exists on
 *    sm_90a only), its objects are built (attn_device.sm90_kernels), the head
 *    dim is 64 or 128 and the tiles are 64 x 64 or 128 x 64. When 1. and 2.
 *    decide block-wise and it is usable, it runs instead of the mma.sync
 *    kernel, except on a short grid (attn_sm90_short_grid): head dim 64, at
 *    most ATTN_SM90_SHORT_TILES listed tiles a row, and at most one CTA a SM
 *    (B * H * ceil(Lq / 64) <= sm_count). There each SM runs one CTA of a
 *    few tiles, whose latency is the kernel's time, and the wgmma kernel's
 *    set-up (barriers, TMA descriptors, the proxy fence) is the longer.
 *    Measured on an H200 (BERT-base forwards, 12 heads, GPU time of the whole
 *    forward with one kernel or the other, two rounds): (1, 128), 24 CTAs,
 *    0.359 against 0.367 ms; (1, 256), 48 CTAs, 0.435-0.443 against 0.450
 *    ms; the other way at (4, 256), 192 CTAs, 0.675-0.681 against
 *    0.665-0.667 ms. Alone (bench_attention), head dim 128 and rows of 8
 *    tiles favour the wgmma kernel on such grids ((1, 12, 512, 128): 16-18
 *    against 19-21 us), head dim 64 at 8 tiles is even, hence the limits.
 *    The wgmma kernel runs with
 *        two warpgroups (block_m 128, 8 warps) when tile_m = 128, the rows
 *            are long (tiles_per_row >= ATTN_SM90_TWO_WG_TILES), B * H *
 *            n_trow >= sm_count (every SM gets a CTA of 128 rows), and the
 *            rows are imbalanced (row_imbalance > ATTN_HEAVY_FIRST_IMBALANCE:
 *            causal and global-token masks) or, at head dim 64, the mask is
 *            even_full (all visible, one length for the batch),
 *        one warpgroup (block_m 64, 4 warps) otherwise (twice the CTAs).
 *    Measured on an H200 (bench_attention --sm90-warps, 128x64 tiles): one
 *    warpgroup, up to three CTAs a SM, is 2-7% faster on dense, dilated,
 *    window and varlen masks at L = 1024 and 4096, head dims 64 and 128;
 *    two are faster on causal rows at L = 4096 (4% at D = 64, 23% at
 *    D = 128), where the long heavy rows gain from sharing every K/V tile.
 *    The kernel for all-visible masks (blockwise_sm90.cu) moved the dense
 *    case: at head dim 64 two warpgroups run dense (4, 16, 4096) as fast as
 *    one from a cool device and 2-7% faster under sustained load, once the
 *    device holds its power limit (clock 1470-1950 MHz instead of 1980):
 *    sharing each K/V tile among 128 rows halves the tile traffic a product
 *    needs. Dense (8, 12, 1024) is even either way; padded batches (varlen)
 *    lose 2-7% with two warpgroups at L = 1024 and 4096, and head dim 128
 *    gains nothing (bench/results/attention-experiments-2026-11-22-h200.txt,
 *    section 15), hence even_full at head dim 64 only.
 *    The score stays the block-wise figure of 2. (the model is calibrated for
 *    mma.sync; here it only separates block-wise from row-wise).
 *
 * 4. Head dim 128 on sm_90 with an all-visible, causal or band mask
 *    (mask_tiles; window:L:R, within:L:R on a full part; no split), with no
 *    modifier, ALiBi (not on a band) or a soft cap (a T5 or tensor bias
 *    stays on the sm_90 kernel's modifier variants): where 3. would run the
 *    wgmma kernel (with a modifier: where the sm_90 kernel would, unless it
 *    is forced), the
 *    warp-specialised one (blockwise_ws_sm90.cu: a TMA producer warpgroup
 *    and two consumer warpgroups of 64 rows, 128-key tiles, ping-pong)
 *    runs instead, reported as block_m 128, block_n 128, 12 warps. Its
 *    reason is the gap to cuDNN at head dim 128 (blockwise_sm90.cu: 470-526
 *    TFLOP/s on an H200 against 590-660); forcing STOF_ATTN_BLOCKWISE_SM90
 *    keeps the older kernel, so both can be timed side by side
 *    (bench_attention --kernels sm90,sm90_ws).
 *
 * A row-wise choice reports score = t_blk / t_row (> 1: row-wise is the cheaper).
 */
#ifndef STOF_ATTN_SELECT_H
#define STOF_ATTN_SELECT_H

#include <math.h>
#include <stdint.h>

#include "stof.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Rule 1's costs, ns of device time (H200, head dim 64). */
#define ATTN_C_RCTA 2.6
#define ATTN_C_PAIR 0.084
#define ATTN_C_CTA 7.5
#define ATTN_C_TILE 2.5
#define ATTN_R_WARP 256.0
#define ATTN_R_SM 2048.0
#define ATTN_R_L2 24.0
#define ATTN_R_SMEM 128.0
#define ATTN_ROWWISE_WARPS 4 /* query rows (one per warp) per row-wise CTA */
/* Block-wise launch order (grid.cuh, attn_block_order): heaviest row blocks
 * first across the (head, batch) pairs of an L2 section (attention.c's
 * l2_section) when one row may list this many times the mean tiles of the
 * rows (causal about 2, global tokens far more); otherwise row
 * blocks fastest, so that neighbouring CTAs share one head's K/V tiles in L2. */
#define ATTN_HEAVY_FIRST_IMBALANCE 1.5
/* Listed tiles per row from which imbalanced rows take two warpgroups on the
 * sm_90 kernel (rule 3). */
#define ATTN_SM90_TWO_WG_TILES 16.0
/* Listed tiles per row up to which a grid of at most one CTA a SM is short
 * (rule 3: it stays on mma.sync at head dim 64). */
#define ATTN_SM90_SHORT_TILES 4.0

typedef struct attn_device {
    int sm_count;
    int64_t smem_per_sm;    /* bytes */
    int64_t smem_per_block; /* bytes one CTA may opt into */
    int max_threads_per_sm;
    int regs_per_sm;
    int cc;           /* compute capability, 10 * major + minor (0: unknown) */
    int sm90_kernels; /* 1: the sm_90a kernels are built into this library */
} attn_device;

typedef struct attn_problem {
    int batch, heads, lq, lk, head_dim;
    int tile_m, tile_n;   /* the compiled mask's tile shape */
    double tiles_per_row; /* listed tiles per (instance, tile row), mask_estimate */
    double row_imbalance; /* most listed tiles of one row / the mean (mask_estimate) */
    int even_full;        /* the mask holds everywhere and the batch has one length
                             (mask_tiles.all_visible, bm == 1): every row block lists
                             the same tiles */
    int mods;             /* a bias or a soft cap (attn_mods; 0 none, else its
                             attn_mods_class): modifier variants serve it, the
                             warp-specialised kernel's for ALiBi and soft caps (rule 4),
                             else the sm_90 kernel's (one warpgroup) at head dims 64 and
                             128 where it runs, else the block-wise kernel's (4 warps of
                             64-row blocks) */
    int analytic;         /* the mask is all-visible, causal or a band (mask_tiles; a
                             band without ALiBi) and not split (attn_ws_analytic):
                             the warp-specialised kernel (rule 4) needs no tile list */
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
/* Head dims every kernel serves (32, 64, 128); the others (80, 96, 256) and
 * calls with a bias or soft cap run on the block-wise kernel with 4 warps of
 * 64-row blocks only. */
int attn_head_dim_common(int head_dim);

/* Rule 1: t_blk / t_row for one row block (> 1: row-wise is the cheaper);
 * +inf when the problem has no rows or tiles to cost (row-wise serves those). */
double attn_rowwise_advantage(const attn_problem *p);

/* Can configuration c serve masks of tile_m x tile_n tiles at this head dim? */
int attn_bw_config_fits(const attn_bw_config *c, int head_dim, int tile_m, int tile_n);
/* Dynamic shared memory of one block-wise CTA: Q block plus double-buffered K
 * and V tiles, rows padded by 16 bytes against bank conflicts. */
int64_t attn_bw_smem_bytes(int head_dim, int block_m, int block_n);
/* Registers per thread of the instantiation (ptxas, sm_90). */
int attn_bw_regs(int head_dim, const attn_bw_config *c);
int attn_bw_ctas_per_sm(const attn_bw_config *c, int head_dim, const attn_device *dev);
double attn_bw_score(const attn_bw_config *c, const attn_problem *p, const attn_device *dev);

/* The sm_90 block-wise kernel (3.): 4 warps with 64-row blocks on 64 x 64 or
 * 128 x 64 tiles, 8 warps with 128-row blocks on 128 x 64 tiles, head dims 64
 * and 128. attn_sm90_usable adds the device and build conditions. */
int attn_sm90_config_fits(int head_dim, int tile_m, int tile_n, int warps, int block_m);
int attn_sm90_usable(const attn_device *dev, int head_dim, int tile_m, int tile_n);
/* A short grid (3.), which stays on mma.sync: head dim 64, at most
 * ATTN_SM90_SHORT_TILES tiles a row, B * H * ceil(Lq / 64) <= sm_count. */
int attn_sm90_short_grid(const attn_problem *p, const attn_device *dev);
/* Dynamic shared memory of one sm_90 CTA: Q block, two K and two V tiles of
 * 64 rows, unpadded (128-byte swizzle), plus 1024 bytes to align the base and
 * 64 for the mbarriers of the K and V buffers. */
int64_t attn_sm90_smem_bytes(int head_dim, int block_m);

/* Rule 4: the warp-specialised sm_90 kernel (blockwise_ws_sm90.cu) serves
 * head dim 128 on all-visible, causal and band masks (analytic), with no
 * modifier, ALiBi, a soft cap or both (mods <= ATTN_MODS_ALIBI_CAP); its
 * persistent CTA holds two Q buffers of two 64-row tiles (which also stage
 * the output), two 128-key stages of K and V, 1024 bytes to align them, its
 * mbarriers (128 bytes), its consumers' modifiers and its item ring (128). */
#define ATTN_WS_SMEM_BYTES (4 * 64 * 128 * 2 + 4 * 128 * 128 * 2 + 1024 + 256)
int attn_ws_serves(int head_dim, int analytic, int mods);
/* attn_problem.analytic: whether the warp-specialised kernel walks this mask
 * (mask_tiles' flags) without its tile list under this bias kind: an
 * all-visible or causal mask, or a band without ALiBi (its band variant has
 * no registers left for it), not split. */
int attn_ws_analytic(int all_visible, int causal, int band, int split, int bias_kind);

/* attn_problem.mods: which modifiers a call has. The warp-specialised kernel
 * computes ALiBi and a soft cap from a few numbers; a T5 table or a bias
 * tensor stays on the other kernels. */
enum { ATTN_MODS_NONE = 0, ATTN_MODS_ALIBI_CAP = 1, ATTN_MODS_TABLE = 2 };
static inline int attn_mods_class(int bias_kind, float softcap)
{
    if (bias_kind == STOF_BIAS_T5 || bias_kind == STOF_BIAS_TENSOR) return ATTN_MODS_TABLE;
    return bias_kind == STOF_BIAS_ALIBI || softcap > 0.0f ? ATTN_MODS_ALIBI_CAP : ATTN_MODS_NONE;
}
int attn_ws_usable(const attn_device *dev, const attn_problem *p);

/* The decision. forced: STOF_ATTN_AUTO, _BLOCKWISE, _BLOCKWISE_SM90,
 * _BLOCKWISE_SM90_WS or _ROWWISE. Fails (with the message set) only when a
 * forced block-wise run has no configuration for the mask's tile shape or
 * head dim, or a forced sm_90 run cannot run on this device or build. */
stof_status attn_select(const attn_problem *p, const attn_device *dev, stof_attn_kernel forced,
                        stof_attn_choice *out);

#ifdef __cplusplus
}
#endif

#endif /* STOF_ATTN_SELECT_H */
