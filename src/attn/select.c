/*
 * select.c — the analytical selector of select.h: row-wise vs block-wise by
 * a measured cost per row block, then the block-wise configuration by an
 * occupancy and bandwidth estimate, and the Hopper wgmma kernel where it can
 * run. The formulas and rules are written out in select.h.
 */
#include "attn/select.h"

#include "core/core.h"

#include <math.h>
#include <string.h>

const attn_bw_config attn_bw_configs[ATTN_BW_NCONFIGS] = {
    {4, 64, 64},
    {8, 128, 64},
    {4, 128, 64}, /* two m-blocks per warp: head dims 32 and 64 */
};

int attn_head_dim_common(int head_dim)
{
    return head_dim == 32 || head_dim == 64 || head_dim == 128;
}

int attn_head_dim_supported(int head_dim)
{
    return attn_head_dim_common(head_dim) || head_dim == 80 || head_dim == 96 || head_dim == 256;
}

/* The one configuration of the other head dims and of modifier calls. */
static int bw_config_general(const attn_bw_config *c)
{
    return c->warps == 4 && c->block_m == 64;
}

double attn_rowwise_advantage(const attn_problem *p)
{
    if (p->lq < 1 || p->lk < 1 || p->tile_m < 1 || p->tile_n < 1 || p->head_dim < 1)
        return INFINITY;
    const double tiles = p->tiles_per_row > 0 ? p->tiles_per_row : 0.0;
    const double rows = p->lq < p->tile_m ? p->lq : p->tile_m;
    const double reach = tiles * p->tile_n;
    const double keys = reach < p->lk ? reach : p->lk;
    const double t_row = ceil(rows / ATTN_ROWWISE_WARPS) * ATTN_C_RCTA + rows * keys * ATTN_C_PAIR;
    const double t_blk = ATTN_C_CTA + tiles * ATTN_C_TILE;
    return t_blk / t_row;
}

int attn_bw_config_fits(const attn_bw_config *c, int head_dim, int tile_m, int tile_n)
{
    int mw = c->block_m / (16 * c->warps);
    return attn_head_dim_supported(head_dim) && (mw == 1 || head_dim <= 64) &&
           (attn_head_dim_common(head_dim) || bw_config_general(c)) && c->block_n == tile_n &&
           tile_m >= c->block_m && tile_m % c->block_m == 0;
}

int64_t attn_bw_smem_bytes(int head_dim, int block_m, int block_n)
{
    int64_t pitch = (int64_t)(head_dim + 8) * 2;
    return ((int64_t)block_m + 4 * (int64_t)block_n) * pitch;
}

/* Registers per thread reported by ptxas -v for sm_90 (fp16 and bf16 agree;
 * no spills; sm_80 needs a few less). */
int attn_bw_regs(int head_dim, const attn_bw_config *c)
{
    if (c->block_m == 32 * c->warps) return head_dim <= 32 ? 193 : 254; /* two m-blocks */
    switch (head_dim) {
    case 32: return c->warps <= 4 ? 122 : 118;
    case 64: return c->warps <= 4 ? 167 : 159;
    case 128: return c->warps <= 4 ? 243 : 221;
    default: return 255; /* 80, 96, 256: 4 warps, at the cap (an estimate, not measured) */
    }
}

int attn_bw_ctas_per_sm(const attn_bw_config *c, int head_dim, const attn_device *dev)
{
    int threads = 32 * c->warps;
    int64_t smem = attn_bw_smem_bytes(head_dim, c->block_m, c->block_n) + 1024; /* + reserved */
    int64_t regs = (int64_t)attn_bw_regs(head_dim, c) * threads;
    if (smem > dev->smem_per_block || threads > dev->max_threads_per_sm) return 0;
    int64_t n = 32;
    if (dev->smem_per_sm / smem < n) n = dev->smem_per_sm / smem;
    if (dev->max_threads_per_sm / threads < n) n = dev->max_threads_per_sm / threads;
    if (dev->regs_per_sm / regs < n) n = dev->regs_per_sm / regs;
    return (int)n;
}

double attn_bw_score(const attn_bw_config *c, const attn_problem *p, const attn_device *dev)
{
    int per_sm = attn_bw_ctas_per_sm(c, p->head_dim, dev);
    if (per_sm < 1 || dev->sm_count < 1 || p->tile_m < 1) return 0.0;
    double n_trow = ceil((double)p->lq / p->tile_m);
    double ctas = (double)p->batch * p->heads * n_trow * (double)(p->tile_m / c->block_m);
    double slots = (double)per_sm * dev->sm_count;
    double resident = ceil(ctas / dev->sm_count);
    if (resident > per_sm) resident = per_sm;
    double waves = ceil(ctas / slots);
    double f_warp = 4.0 * ((double)c->block_m / c->warps) * c->block_n * p->head_dim;
    double bytes_tile = 4.0 * c->block_n * p->head_dim; /* K and V, 2 bytes per element */
    double t = f_warp / ATTN_R_WARP;
    double t_sm = resident * c->warps * f_warp / ATTN_R_SM;
    double t_smem = resident * c->warps * bytes_tile / ATTN_R_SMEM;
    double t_l2 = resident * bytes_tile / ATTN_R_L2;
    if (t_sm > t) t = t_sm;
    if (t_smem > t) t = t_smem;
    if (t_l2 > t) t = t_l2;
    double tiles = p->tiles_per_row > 0 ? p->tiles_per_row : 1.0;
    double time = waves * tiles * t;
    return ctas * c->warps * tiles * f_warp / time;
}

int attn_sm90_config_fits(int head_dim, int tile_m, int tile_n, int warps, int block_m)
{
    if ((head_dim != 64 && head_dim != 128) || tile_n != 64) return 0;
    if (warps == 4 && block_m == 64) return tile_m == 64 || tile_m == 128;
    return warps == 8 && block_m == 128 && tile_m == 128;
}

int64_t attn_sm90_smem_bytes(int head_dim, int block_m)
{
    return ((int64_t)block_m + 4 * 64) * head_dim * 2 + 1024 + 64;
}

int attn_sm90_usable(const attn_device *dev, int head_dim, int tile_m, int tile_n)
{
    return dev->cc == 90 && dev->sm90_kernels &&
           attn_sm90_config_fits(head_dim, tile_m, tile_n, 4, 64) &&
           attn_sm90_smem_bytes(head_dim, 64) <= dev->smem_per_block;
}

int attn_sm90_short_grid(const attn_problem *p, const attn_device *dev)
{
    return p->head_dim == 64 && p->tiles_per_row <= ATTN_SM90_SHORT_TILES &&
           (double)p->batch * p->heads * ceil((double)p->lq / 64) <= dev->sm_count;
}

/* Rule 3. of select.h; the kernel is usable (attn_sm90_usable). */
static stof_attn_choice sm90_choice(const attn_problem *p, const attn_device *dev, double score)
{
    stof_attn_choice ch;
    memset(&ch, 0, sizeof ch);
    ch.split = 1;
    double ctas128 = (double)p->batch * p->heads * ceil((double)p->lq / p->tile_m);
    bool two =
        p->tile_m == 128 &&
        (p->row_imbalance > ATTN_HEAVY_FIRST_IMBALANCE || (p->even_full && p->head_dim == 64)) &&
        p->tiles_per_row >= ATTN_SM90_TWO_WG_TILES && ctas128 >= dev->sm_count &&
        attn_sm90_smem_bytes(p->head_dim, 128) <= dev->smem_per_block;
    ch.kernel = STOF_ATTN_BLOCKWISE_SM90;
    ch.block_m = two ? 128 : 64;
    ch.block_n = 64;
    ch.warps = two ? 8 : 4;
    ch.score = score;
    return ch;
}

int attn_ws_serves(int head_dim, int analytic, int mods)
{
    return head_dim == 128 && analytic && mods <= ATTN_MODS_ALIBI_CAP;
}

int attn_ws_analytic(int all_visible, int causal, int band, int split, int bias_kind)
{
    return split == 1 && (all_visible || causal || (band && bias_kind != STOF_BIAS_ALIBI));
}

int attn_ws_usable(const attn_device *dev, const attn_problem *p)
{
    return dev->cc == 90 && dev->sm90_kernels &&
           attn_ws_serves(p->head_dim, p->analytic, p->mods) &&
           ATTN_WS_SMEM_BYTES <= dev->smem_per_block;
}

/* Rule 4. of select.h; the kernel is usable (attn_ws_usable). */
static stof_attn_choice ws_choice(double score)
{
    stof_attn_choice ch;
    memset(&ch, 0, sizeof ch);
    ch.split = 1;
    ch.kernel = STOF_ATTN_BLOCKWISE_SM90_WS;
    ch.block_m = 128;
    ch.block_n = 128;
    ch.warps = 12;
    ch.score = score;
    return ch;
}

static stof_attn_choice rowwise_choice(const attn_problem *p, double advantage)
{
    stof_attn_choice ch;
    memset(&ch, 0, sizeof ch);
    ch.split = 1;
    ch.kernel = STOF_ATTN_ROWWISE;
    ch.block_m = ATTN_ROWWISE_WARPS; /* one query row per warp */
    ch.block_n = p->tile_n;
    ch.warps = ATTN_ROWWISE_WARPS;
    ch.score = advantage;
    return ch;
}

stof_status attn_select(const attn_problem *p, const attn_device *dev, stof_attn_kernel forced,
                        stof_attn_choice *out)
{
    const double advantage = attn_rowwise_advantage(p);
    const int general = p->mods || !attn_head_dim_common(p->head_dim);
    if (forced == STOF_ATTN_BLOCKWISE_SM90_WS) {
        STOF_REQUIRE(dev->cc == 90 && dev->sm90_kernels, STOF_ERR_UNSUPPORTED,
                     "the warp-specialised sm_90 kernel needs a compute capability 9.0 device and "
                     "a build with 90 in STOF_CUDA_ARCHS (device: %d.%d, sm_90a kernels %s)",
                     dev->cc / 10, dev->cc % 10, dev->sm90_kernels ? "built" : "not built");
        STOF_REQUIRE(
            attn_ws_usable(dev, p), STOF_ERR_UNSUPPORTED,
            "the warp-specialised sm_90 kernel serves head dim 128 with an all-visible, "
            "causal or band mask (not split), with no bias, ALiBi or a soft cap (asked: head "
            "dim %d, %s mask, %s)",
            p->head_dim, p->analytic ? "all-visible, causal or band" : "another",
            p->mods == ATTN_MODS_TABLE ? "a T5 or tensor bias"
            : p->mods                  ? "ALiBi or a soft cap"
                                       : "no bias or cap");
        *out = ws_choice(0.0);
        return STOF_OK;
    }
    /* A bias or cap at head dim 64 or 128: the sm_90 kernel's modifier
     * variants (one warpgroup) where it runs, unless block-wise is forced;
     * ALiBi and soft caps at head dim 128 on the warp-specialised kernel
     * (rule 4) unless the sm_90 one is forced. */
    if (p->mods && forced != STOF_ATTN_BLOCKWISE && forced != STOF_ATTN_ROWWISE &&
        attn_sm90_usable(dev, p->head_dim, p->tile_m, p->tile_n)) {
        if (forced == STOF_ATTN_AUTO && attn_ws_usable(dev, p)) {
            *out = ws_choice(0.0);
            return STOF_OK;
        }
        *out = sm90_choice(p, dev, 0.0);
        out->block_m = 64;
        out->warps = 4;
        return STOF_OK;
    }
    if (general) {
        STOF_REQUIRE(forced == STOF_ATTN_AUTO || forced == STOF_ATTN_BLOCKWISE,
                     STOF_ERR_UNSUPPORTED, "%s runs on the block-wise kernel only (forced: %s)",
                     p->mods ? "attention with a bias or soft cap (and the sm_90 kernel, at head "
                               "dims 64 and 128 on a compute capability 9.0 device)"
                             : "this head dim",
                     forced == STOF_ATTN_ROWWISE ? "ROWWISE" : "BLOCKWISE_SM90");
        const attn_bw_config *c = &attn_bw_configs[0];
        STOF_REQUIRE(attn_bw_config_fits(c, p->head_dim, p->tile_m, p->tile_n),
                     STOF_ERR_UNSUPPORTED,
                     "%s needs mask tiles 64x64 or 128x64 (the block-wise kernel's 4 warps of "
                     "64-row blocks); the mask has %dx%d at head dim %d",
                     p->mods ? "attention with a bias or soft cap" : "this head dim", p->tile_m,
                     p->tile_n, p->head_dim);
        memset(out, 0, sizeof *out);
        out->kernel = STOF_ATTN_BLOCKWISE;
        out->block_m = c->block_m;
        out->block_n = c->block_n;
        out->warps = c->warps;
        out->score = attn_bw_score(c, p, dev);
        out->split = 1;
        return STOF_OK;
    }
    if (forced == STOF_ATTN_ROWWISE) {
        *out = rowwise_choice(p, advantage);
        return STOF_OK;
    }
    int best = -1, fitting = 0;
    double best_score = -1.0;
    for (int i = 0; i < ATTN_BW_NCONFIGS; i++) {
        const attn_bw_config *c = &attn_bw_configs[i];
        if (!attn_bw_config_fits(c, p->head_dim, p->tile_m, p->tile_n)) continue;
        fitting++;
        double s = attn_bw_score(c, p, dev);
        if (s <= 0.0) continue; /* the CTA does not fit on this device */
        /* Within 1%, more rows per warp wins (less shared-memory traffic per
         * flop: on an H200, dense (4, 16, 4096) took 0.99 ms with 4 warps of 32
         * rows against 1.28 ms with 8 warps of 16, which the model scores
         * alike), then fewer warps. */
        bool better = best < 0 || s > best_score * 1.01;
        if (!better && s >= best_score * 0.99) {
            const attn_bw_config *b = &attn_bw_configs[best];
            int rows_c = c->block_m / c->warps, rows_b = b->block_m / b->warps;
            better = rows_c > rows_b || (rows_c == rows_b && c->warps < b->warps);
        }
        if (better) {
            best = i;
            best_score = s;
        }
    }
    if (forced == STOF_ATTN_BLOCKWISE_SM90) {
        STOF_REQUIRE(dev->cc == 90 && dev->sm90_kernels, STOF_ERR_UNSUPPORTED,
                     "the sm_90 block-wise kernel needs a compute capability 9.0 device and a "
                     "build with 90 in STOF_CUDA_ARCHS (device: %d.%d, sm_90a kernels %s)",
                     dev->cc / 10, dev->cc % 10, dev->sm90_kernels ? "built" : "not built");
        STOF_REQUIRE(attn_sm90_usable(dev, p->head_dim, p->tile_m, p->tile_n), STOF_ERR_UNSUPPORTED,
                     "the sm_90 block-wise kernel has no configuration for head dim %d and mask "
                     "tiles %dx%d (it serves tiles 64x64 and 128x64 at head dims 64 and 128)",
                     p->head_dim, p->tile_m, p->tile_n);
        *out = sm90_choice(p, dev, best >= 0 ? best_score : 0.0);
        return STOF_OK;
    }
    if (forced == STOF_ATTN_BLOCKWISE) {
        STOF_REQUIRE(best >= 0 || fitting == 0, STOF_ERR_UNSUPPORTED,
                     "no block-wise configuration for head dim %d fits this device (%d SMs, "
                     "%lld bytes of shared memory per SM)",
                     p->head_dim, dev->sm_count, (long long)dev->smem_per_sm);
        STOF_REQUIRE(best >= 0, STOF_ERR_UNSUPPORTED,
                     "the block-wise kernel has no configuration for head dim %d and mask tiles "
                     "%dx%d (it serves tiles 64x64 and 128x64 at head dims 32, 64 and 128; "
                     "compile the mask with tile_m 64 or 128 and tile_n 64)",
                     p->head_dim, p->tile_m, p->tile_n);
    } else if (best < 0 || advantage > 1.0) {
        *out = rowwise_choice(p, advantage);
        return STOF_OK;
    }
    if (forced == STOF_ATTN_AUTO && attn_sm90_usable(dev, p->head_dim, p->tile_m, p->tile_n) &&
        !attn_sm90_short_grid(p, dev)) {
        *out = attn_ws_usable(dev, p) ? ws_choice(best_score) : sm90_choice(p, dev, best_score);
        return STOF_OK;
    }
    const attn_bw_config *c = &attn_bw_configs[best];
    out->kernel = STOF_ATTN_BLOCKWISE;
    out->block_m = c->block_m;
    out->block_n = c->block_n;
    out->warps = c->warps;
    out->score = best_score;
    out->split = 1;
    return STOF_OK;
}
