/*
 * test_attn_select.c — the attention selector's decisions on cases computed
 * by hand from the formulas in src/attn/select.h (H100 and A100 figures),
 * forced kernels, extreme shapes, the tile-shape default for mask compiles,
 * the Hopper kernel's rule (rule 3: which devices, shapes and warpgroup
 * counts), and the bit tricks the row-wise kernel uses to hand visible keys
 * to lanes.
 */
#include "attn/bits.h"
#include "attn/select.h"
#include "testlib.h"

#include <math.h>
#include <string.h>

static attn_device h100(void)
{
    attn_device d = {132, 233472, 232448, 2048, 65536, 0, 0}; /* cc unknown: no sm_90 kernel */
    return d;
}

static attn_device a100(void)
{
    attn_device d = {108, 167936, 166912, 2048, 65536, 0, 0};
    return d;
}

static attn_problem problem(int B, int H, int L, int D, int tm, int tn, double tiles_per_row)
{
    attn_problem p = {B, H, L, L, D, tm, tn, tiles_per_row, 1.0, 0, 0, 0};
    return p;
}

/* The same with rows as imbalanced as a causal mask's (most / mean = 2). */
static attn_problem causal(int B, int H, int L, int D, int tm, int tn, double tiles_per_row)
{
    attn_problem p = problem(B, H, L, D, tm, tn, tiles_per_row);
    p.row_imbalance = 2.0;
    return p;
}

static bool close_to(double a, double b)
{
    return fabs(a - b) <= 1e-9 * fmax(1.0, fabs(b));
}

static void test_rowwise_costs(void)
{
    /* L = 1, dense: 1 row, 1 key: t_row = 2.6 + 0.084, t_blk = 7.5 + 2.5. */
    attn_problem p = problem(256, 12, 1, 64, 64, 64, 1.0);
    CHECK(close_to(attn_rowwise_advantage(&p), 10.0 / 2.684), "L=1: %g",
          attn_rowwise_advantage(&p));
    /* L = 8, dense: 2 row-wise CTAs, 64 pairs: 5.2 + 5.376 against 10. */
    p = problem(256, 12, 8, 64, 64, 64, 1.0);
    CHECK(close_to(attn_rowwise_advantage(&p), 10.0 / 10.576), "L=8: %g",
          attn_rowwise_advantage(&p));
    /* One 64 x 64 tile per row at L = 4096: a row may see 64 keys of the 4096. */
    p = problem(4, 12, 4096, 64, 64, 64, 1.0);
    CHECK(close_to(attn_rowwise_advantage(&p), 10.0 / (16 * 2.6 + 64 * 64 * 0.084)), "L=4096: %g",
          attn_rowwise_advantage(&p));
    /* 128-row tiles hold 128 rows; an empty mask costs the CTAs alone. */
    p = problem(1, 1, 4096, 64, 128, 64, 0.0);
    CHECK(close_to(attn_rowwise_advantage(&p), 7.5 / (32 * 2.6)), "empty: %g",
          attn_rowwise_advantage(&p));
    /* Nothing to cost. */
    p = problem(1, 1, 0, 64, 64, 64, 1.0);
    CHECK(isinf(attn_rowwise_advantage(&p)), "L=0: %g", attn_rowwise_advantage(&p));
    p = problem(1, 1, 64, 64, 0, 0, 1.0);
    CHECK(isinf(attn_rowwise_advantage(&p)), "no tiles: %g", attn_rowwise_advantage(&p));
}

static void test_occupancy(void)
{
    attn_device d = h100();
    /* Hand-computed CTAs per SM (smem = (block_m + 4 * 64) * (D + 8) * 2 + 1024 reserved). */
    const int want[3][ATTN_BW_NCONFIGS] = {{4, 2, 2}, {3, 1, 2}, {2, 1, 2}};
    const int dims[3] = {32, 64, 128};
    for (int i = 0; i < 3; i++) {
        for (int c = 0; c < ATTN_BW_NCONFIGS; c++) {
            int got = attn_bw_ctas_per_sm(&attn_bw_configs[c], dims[i], &d);
            CHECK(got == want[i][c], "D=%d warps=%d: %d CTAs/SM, want %d", dims[i],
                  attn_bw_configs[c].warps, got, want[i][c]);
        }
    }
    CHECK(attn_bw_smem_bytes(64, 64, 64) == 46080, "smem 64/64x64 %lld",
          (long long)attn_bw_smem_bytes(64, 64, 64));
    CHECK(attn_bw_smem_bytes(128, 128, 64) == 104448, "smem 128/128x64 %lld",
          (long long)attn_bw_smem_bytes(128, 128, 64));
    attn_device a = a100();
    CHECK(attn_bw_ctas_per_sm(&attn_bw_configs[1], 128, &a) == 1, "A100 D=128 8 warps");
    attn_device tiny = d;
    tiny.smem_per_block = 48 * 1024;
    CHECK(attn_bw_ctas_per_sm(&attn_bw_configs[1], 128, &tiny) == 0, "CTA over the opt-in limit");
}

static void test_blockwise_choices(void)
{
    attn_device d = h100();
    stof_attn_choice ch;
    /* Dense (4, 16, 4096) D=64 on 128x64 tiles: 4 warps (3 CTAs/SM, 11 waves, L2-bound)
     * score 4096 * 4 * 262144 / (11 * 2048), 8 warps (1 CTA/SM, 16 waves) 262144. */
    attn_problem p = problem(4, 16, 4096, 64, 128, 64, 64.0);
    CHECK(close_to(attn_bw_score(&attn_bw_configs[0], &p, &d), 4096.0 * 4 * 262144 / (11 * 2048)),
          "score W4 %g", attn_bw_score(&attn_bw_configs[0], &p, &d));
    CHECK(close_to(attn_bw_score(&attn_bw_configs[1], &p, &d), 262144.0), "score W8 %g",
          attn_bw_score(&attn_bw_configs[1], &p, &d));
    /* 4 warps of 32 rows (2 CTAs/SM, 8 waves, tensor-bound): 2048 * 4 * 524288 /
     * (8 * 2048) = 262144 as well; the tie goes to 32-row warps. */
    CHECK(close_to(attn_bw_score(&attn_bw_configs[2], &p, &d), 262144.0), "score W4x32 %g",
          attn_bw_score(&attn_bw_configs[2], &p, &d));
    CHECK_OK(attn_select(&p, &d, STOF_ATTN_AUTO, &ch));
    CHECK(ch.kernel == STOF_ATTN_BLOCKWISE && ch.warps == 4 && ch.block_m == 128 &&
              ch.block_n == 64 && close_to(ch.score, 262144.0),
          "dense 4096 128x64: kernel %d warps %d block %d score %g", ch.kernel, ch.warps,
          ch.block_m, ch.score);
    /* Same on 64x64 tiles: only the 4-warp configuration fits. */
    p = problem(4, 16, 4096, 64, 64, 64, 64.0);
    CHECK_OK(attn_select(&p, &d, STOF_ATTN_AUTO, &ch));
    CHECK(ch.kernel == STOF_ATTN_BLOCKWISE && ch.warps == 4 && ch.block_m == 64,
          "dense 4096 64x64: kernel %d warps %d", ch.kernel, ch.warps);
    /* (1, 12, 128) on 128x64 tiles: one wave, both 24576: the tie keeps 4 warps. */
    p = problem(1, 12, 128, 64, 128, 64, 2.0);
    CHECK(close_to(attn_bw_score(&attn_bw_configs[0], &p, &d), 24576.0), "small W4 %g",
          attn_bw_score(&attn_bw_configs[0], &p, &d));
    CHECK_OK(attn_select(&p, &d, STOF_ATTN_AUTO, &ch));
    CHECK(ch.kernel == STOF_ATTN_BLOCKWISE && ch.warps == 4, "small: kernel %d warps %d", ch.kernel,
          ch.warps);
    /* Head dim 128, (8, 12, 1024), 16 tiles per row. */
    p = problem(8, 12, 1024, 128, 128, 64, 16.0);
    CHECK(close_to(attn_bw_score(&attn_bw_configs[1], &p, &d), 262144.0), "D128 W8 %g",
          attn_bw_score(&attn_bw_configs[1], &p, &d));
    CHECK_OK(attn_select(&p, &d, STOF_ATTN_AUTO, &ch));
    CHECK(ch.kernel == STOF_ATTN_BLOCKWISE && ch.warps == 8, "D128: warps %d", ch.warps);
}

static void check_choice(const char *what, attn_problem p, attn_device d, stof_attn_kernel kernel,
                         int warps, int block_m)
{
    stof_attn_choice ch;
    memset(&ch, 0, sizeof ch);
    CHECK_OK(attn_select(&p, &d, STOF_ATTN_AUTO, &ch));
    CHECK(ch.kernel == kernel &&
              (warps == 0 || (ch.warps == warps && ch.block_m == block_m && ch.block_n == 64)),
          "%s: kernel %d warps %d block %dx%d (want kernel %d, %d warps, block_m %d)", what,
          ch.kernel, ch.warps, ch.block_m, ch.block_n, kernel, warps, block_m);
}

static void test_rowwise_choices(void)
{
    attn_device d = h100();
    stof_attn_choice ch;
    /* Sequences of up to 7 queries seeing every key go row-wise, from 8 block-wise. */
    attn_problem p = problem(256, 12, 7, 64, 64, 64, 1.0);
    CHECK_OK(attn_select(&p, &d, STOF_ATTN_AUTO, &ch));
    CHECK(ch.kernel == STOF_ATTN_ROWWISE && ch.score > 1.0, "L=7: kernel %d score %g", ch.kernel,
          ch.score);
    check_choice("L=8", problem(256, 12, 8, 64, 64, 64, 1.0), d, STOF_ATTN_BLOCKWISE, 0, 0);
    check_choice("L=1 D=32", problem(1, 1, 1, 32, 64, 64, 1.0), d, STOF_ATTN_ROWWISE, 0, 0);
    /* The sparsest long rows stay block-wise: one tile per row at L = 4096 and 16384
     * (STOF's density bound sent these row-wise). */
    check_choice("one tile a row", problem(4, 12, 4096, 64, 64, 64, 1.0), d, STOF_ATTN_BLOCKWISE, 0,
                 0);
    check_choice("L=16384", problem(1, 12, 16384, 64, 64, 64, 1.0), d, STOF_ATTN_BLOCKWISE, 0, 0);
    /* Short sequences of 32 queries, dense: block-wise (12x faster measured at B = 256). */
    check_choice("L=32", problem(256, 12, 32, 64, 64, 64, 1.0), d, STOF_ATTN_BLOCKWISE, 0, 0);
    /* Tile shapes without a block-wise configuration go row-wise under AUTO, however
     * dense. */
    p = problem(2, 12, 4096, 64, 16, 16, 3.0);
    CHECK_OK(attn_select(&p, &d, STOF_ATTN_AUTO, &ch));
    CHECK(ch.kernel == STOF_ATTN_ROWWISE && ch.block_n == 16, "sparse 16x16: kernel %d", ch.kernel);
    check_choice("32x32 dense", problem(4, 16, 4096, 64, 32, 32, 128.0), d, STOF_ATTN_ROWWISE, 0,
                 0);
}

static void test_forced_and_extremes(void)
{
    attn_device d = h100();
    stof_attn_choice ch;
    attn_problem p = problem(4, 16, 4096, 64, 64, 64, 64.0);
    CHECK_OK(attn_select(&p, &d, STOF_ATTN_ROWWISE, &ch));
    CHECK(ch.kernel == STOF_ATTN_ROWWISE && ch.warps == ATTN_ROWWISE_WARPS, "forced row-wise");
    p.tiles_per_row = 0.5;
    CHECK_OK(attn_select(&p, &d, STOF_ATTN_BLOCKWISE, &ch));
    CHECK(ch.kernel == STOF_ATTN_BLOCKWISE, "forced block-wise on a sparse mask");
    p = problem(4, 16, 4096, 64, 32, 32, 64.0);
    CHECK_STATUS(attn_select(&p, &d, STOF_ATTN_BLOCKWISE, &ch), STOF_ERR_UNSUPPORTED);
    CHECK(strstr(stof_last_error(), "64x64") && strstr(stof_last_error(), "32x32"),
          "message names the shapes: %s", stof_last_error());
    p = problem(4, 16, 4096, 48, 64, 64, 64.0);
    CHECK_STATUS(attn_select(&p, &d, STOF_ATTN_BLOCKWISE, &ch), STOF_ERR_UNSUPPORTED);
    CHECK(strstr(stof_last_error(), "head dim 48") != NULL, "message: %s", stof_last_error());
    /* Head dims 80, 96, 256 and calls with a bias or soft cap: the block-wise
     * kernel's 4 warps of 64-row blocks, whatever else would score higher. */
    static const int general_dims[] = {80, 96, 256};
    for (int k = 0; k < 3; k++) {
        p = problem(4, 16, 4096, general_dims[k], 128, 64, 64.0);
        CHECK_OK(attn_select(&p, &d, STOF_ATTN_AUTO, &ch));
        CHECK(ch.kernel == STOF_ATTN_BLOCKWISE && ch.warps == 4 && ch.block_m == 64,
              "head dim %d: kernel %d, %d warps", general_dims[k], (int)ch.kernel, ch.warps);
        CHECK_STATUS(attn_select(&p, &d, STOF_ATTN_ROWWISE, &ch), STOF_ERR_UNSUPPORTED);
    }
    /* A bias or cap: the sm_90 kernel's one-warpgroup variant where it runs,
     * else block-wise; head dim 80 with one never reaches the sm_90 kernel. */
    p = problem(1, 32, 8192, 128, 128, 64, 64.0);
    p.mods = 1;
    CHECK_OK(attn_select(&p, &d, STOF_ATTN_AUTO, &ch));
    stof_attn_kernel want =
        attn_sm90_usable(&d, 128, 128, 64) ? STOF_ATTN_BLOCKWISE_SM90 : STOF_ATTN_BLOCKWISE;
    CHECK(ch.kernel == want && ch.warps == 4 && ch.block_m == 64, "a bias: kernel %d, %d warps",
          (int)ch.kernel, ch.warps);
    CHECK_OK(attn_select(&p, &d, STOF_ATTN_BLOCKWISE, &ch));
    CHECK(ch.kernel == STOF_ATTN_BLOCKWISE && ch.warps == 4, "a bias, block-wise forced");
    CHECK_STATUS(attn_select(&p, &d, STOF_ATTN_ROWWISE, &ch), STOF_ERR_UNSUPPORTED);
    p = problem(1, 32, 8192, 80, 128, 64, 64.0);
    p.mods = 1;
    CHECK_STATUS(attn_select(&p, &d, STOF_ATTN_BLOCKWISE_SM90, &ch), STOF_ERR_UNSUPPORTED);
    CHECK(strstr(stof_last_error(), "bias") != NULL, "message: %s", stof_last_error());
    p = problem(1, 32, 8192, 128, 32, 32, 64.0);
    p.mods = 1;
    CHECK_STATUS(attn_select(&p, &d, STOF_ATTN_AUTO, &ch), STOF_ERR_UNSUPPORTED);
    attn_device none = d;
    none.sm_count = 0;
    p = problem(4, 16, 4096, 64, 64, 64, 64.0);
    CHECK_OK(attn_select(&p, &none, STOF_ATTN_AUTO, &ch));
    CHECK(ch.kernel == STOF_ATTN_ROWWISE, "no SMs: row-wise");
    CHECK_STATUS(attn_select(&p, &none, STOF_ATTN_BLOCKWISE, &ch), STOF_ERR_UNSUPPORTED);

    /* L = 1; an empty mask; the largest lengths: decisions, no crash, no NaN. */
    p = problem(1, 1, 1, 64, 64, 64, 1.0);
    CHECK_OK(attn_select(&p, &d, STOF_ATTN_AUTO, &ch));
    CHECK(ch.kernel == STOF_ATTN_ROWWISE && !isnan(ch.score), "L=1: kernel %d", ch.kernel);
    p = problem(1, 1, 1000, 64, 64, 64, 0.0);
    CHECK_OK(attn_select(&p, &d, STOF_ATTN_AUTO, &ch));
    CHECK(ch.kernel == STOF_ATTN_BLOCKWISE && isfinite(ch.score), "empty mask: kernel %d",
          ch.kernel);
    p = problem(65535, 65535, 2147483000, 128, 128, 64, 1e7);
    CHECK_OK(attn_select(&p, &d, STOF_ATTN_AUTO, &ch));
    CHECK(ch.kernel == STOF_ATTN_BLOCKWISE && isfinite(ch.score) && ch.score > 0,
          "huge: kernel %d score %g", ch.kernel, ch.score);
    p.tiles_per_row = 1.0;
    CHECK_OK(attn_select(&p, &d, STOF_ATTN_AUTO, &ch));
    CHECK(ch.kernel == STOF_ATTN_BLOCKWISE, "huge and sparse: kernel %d", ch.kernel);
    p = problem(0, 0, 0, 64, 0, 0, 0.0);
    CHECK_OK(attn_select(&p, &d, STOF_ATTN_AUTO, &ch));
    CHECK(ch.kernel == STOF_ATTN_ROWWISE, "all zeros: kernel %d", ch.kernel);
}

/* An H100 that reports compute capability 9.0, in a build with the sm_90a kernels. */
static attn_device h100_sm90(void)
{
    attn_device d = h100();
    d.cc = 90;
    d.sm90_kernels = 1;
    return d;
}

/* AUTO picks kernel, and (warps > 0) that configuration. */
static void test_sm90_rule(void)
{
    /* Configurations: 4 warps / 64 rows on 64x64 and 128x64 tiles, 8 warps / 128 rows on
     * 128x64 tiles, head dims 64 and 128 only. */
    CHECK(attn_sm90_config_fits(64, 64, 64, 4, 64) && attn_sm90_config_fits(128, 128, 64, 4, 64) &&
              attn_sm90_config_fits(64, 128, 64, 8, 128) &&
              attn_sm90_config_fits(128, 128, 64, 8, 128),
          "served configurations");
    CHECK(!attn_sm90_config_fits(32, 64, 64, 4, 64) && !attn_sm90_config_fits(64, 64, 64, 8, 128) &&
              !attn_sm90_config_fits(64, 128, 128, 4, 64) &&
              !attn_sm90_config_fits(64, 32, 32, 4, 64) &&
              !attn_sm90_config_fits(128, 128, 64, 4, 128) &&
              !attn_sm90_config_fits(80, 64, 64, 4, 64),
          "configurations it does not serve");
    CHECK(attn_sm90_smem_bytes(128, 128) == (128 + 256) * 256 + 1024 + 64 &&
              attn_sm90_smem_bytes(64, 64) == (64 + 256) * 128 + 1024 + 64,
          "sm90 smem %lld / %lld", (long long)attn_sm90_smem_bytes(128, 128),
          (long long)attn_sm90_smem_bytes(64, 64));

    attn_device d = h100_sm90();
    /* Dense (4, 16, 4096) D=64, 128x64 tiles: balanced rows, one warpgroup; the score
     * stays the mma.sync model's 262144. Causal: imbalanced long rows, 2048 CTAs of
     * 128 rows >= 132 SMs: two warpgroups. */
    attn_problem p = problem(4, 16, 4096, 64, 128, 64, 64.0);
    stof_attn_choice ch;
    CHECK_OK(attn_select(&p, &d, STOF_ATTN_AUTO, &ch));
    CHECK(ch.kernel == STOF_ATTN_BLOCKWISE_SM90 && ch.warps == 4 && ch.block_m == 64 &&
              ch.block_n == 64 && close_to(ch.score, 262144.0),
          "dense 4096 128x64 on sm_90: kernel %d warps %d block %d score %g", ch.kernel, ch.warps,
          ch.block_m, ch.score);
    check_choice("causal 4096 128x64 on sm_90", causal(4, 16, 4096, 64, 128, 64, 32.0), d,
                 STOF_ATTN_BLOCKWISE_SM90, 8, 128);
    /* Causal at L = 1024 (8 tiles a row on average): short rows, one warpgroup. */
    check_choice("causal 1024 128x64 on sm_90", causal(8, 12, 1024, 64, 128, 64, 8.0), d,
                 STOF_ATTN_BLOCKWISE_SM90, 4, 64);
    check_choice("dense 4096 64x64 on sm_90", problem(4, 16, 4096, 64, 64, 64, 64.0), d,
                 STOF_ATTN_BLOCKWISE_SM90, 4, 64);
    /* A short grid (head dim 64, at most 4 tiles a row, B * H * ceil(L / 64) <= 132)
     * stays on mma.sync: (1, 12, 128), 24 CTAs, on either tile shape; 66 heads of 128
     * rows are 132 CTAs, 67 heads 134, which the wgmma kernel runs, as (16, 12, 128),
     * 384; (1, 12, 256) with its 4 tiles a row, not (1, 12, 320) with 5, nor (1, 12,
     * 128) at head dim 128. */
    static const struct {
        const char *what;
        int batch, heads, len, head_dim, tile_m;
        double tiles;
        stof_attn_kernel kernel;
        int warps;
    } grids[] = {{"(1, 12, 128) on 128x64 tiles", 1, 12, 128, 64, 128, 2.0, STOF_ATTN_BLOCKWISE, 0},
                 {"(1, 12, 128) on 64x64 tiles", 1, 12, 128, 64, 64, 2.0, STOF_ATTN_BLOCKWISE, 4},
                 {"132 CTAs of 64 rows", 1, 66, 128, 64, 64, 2.0, STOF_ATTN_BLOCKWISE, 0},
                 {"134 CTAs of 64 rows", 1, 67, 128, 64, 64, 2.0, STOF_ATTN_BLOCKWISE_SM90, 4},
                 {"(16, 12, 128)", 16, 12, 128, 64, 64, 2.0, STOF_ATTN_BLOCKWISE_SM90, 4},
                 {"(1, 12, 256)", 1, 12, 256, 64, 64, 4.0, STOF_ATTN_BLOCKWISE, 0},
                 {"(1, 12, 320)", 1, 12, 320, 64, 64, 5.0, STOF_ATTN_BLOCKWISE_SM90, 4},
                 {"head dim 128", 1, 12, 128, 128, 64, 2.0, STOF_ATTN_BLOCKWISE_SM90, 4}};
    for (size_t i = 0; i < sizeof grids / sizeof grids[0]; i++)
        check_choice(grids[i].what,
                     problem(grids[i].batch, grids[i].heads, grids[i].len, grids[i].head_dim,
                             grids[i].tile_m, 64, grids[i].tiles),
                     d, grids[i].kernel, grids[i].warps, 16 * grids[i].warps);
    /* Imbalanced long rows, 132 CTAs of 128 rows, one per SM: two warpgroups; 131: one. */
    check_choice("132 CTAs on sm_90", causal(1, 132, 128, 128, 128, 64, 16.0), d,
                 STOF_ATTN_BLOCKWISE_SM90, 8, 128);
    check_choice("131 CTAs on sm_90", causal(1, 131, 128, 128, 128, 64, 16.0), d,
                 STOF_ATTN_BLOCKWISE_SM90, 4, 64);
    /* D = 128 (8, 12, 1024), 16 tiles a row: dense one warpgroup, causal two. */
    check_choice("D128 dense on sm_90", problem(8, 12, 1024, 128, 128, 64, 16.0), d,
                 STOF_ATTN_BLOCKWISE_SM90, 4, 64);
    check_choice("D128 causal on sm_90", causal(8, 12, 1024, 128, 128, 64, 16.0), d,
                 STOF_ATTN_BLOCKWISE_SM90, 8, 128);
    /* All-visible masks of one length (even_full) share K/V tiles between two
     * warpgroups at head dim 64 when rows are long: dense (4, 16, 4096) and (8, 12,
     * 1024) with 16 tiles a row; not with 15 tiles, at head dim 128, on 64x64 tiles,
     * nor for a padded batch (even_full 0, as "dense" above). */
    static const struct {
        const char *what;
        int batch, heads, len, head_dim, tile_m;
        double tiles;
        int warps;
    } even[] = {{"even full 4096", 4, 16, 4096, 64, 128, 64.0, 8},
                {"even full 1024", 8, 12, 1024, 64, 128, 16.0, 8},
                {"even full, 15 tiles", 8, 12, 1024, 64, 128, 15.0, 4},
                {"even full D128", 8, 12, 1024, 128, 128, 16.0, 4},
                {"even full 64x64", 4, 16, 4096, 64, 64, 64.0, 4}};
    for (size_t i = 0; i < sizeof even / sizeof even[0]; i++) {
        p = problem(even[i].batch, even[i].heads, even[i].len, even[i].head_dim, even[i].tile_m, 64,
                    even[i].tiles);
        p.even_full = 1;
        check_choice(even[i].what, p, d, STOF_ATTN_BLOCKWISE_SM90, even[i].warps,
                     16 * even[i].warps);
    }
    /* Head dim 32 stays on mma.sync; the sparsest rows take the wgmma kernel; 32x32
     * tiles go row-wise. */
    p = problem(4, 16, 4096, 32, 128, 64, 64.0);
    check_choice("D32 on sm_90", p, d, STOF_ATTN_BLOCKWISE, 0, 0);
    p = problem(4, 12, 4096, 64, 64, 64, 1.0);
    check_choice("sparse on sm_90", p, d, STOF_ATTN_BLOCKWISE_SM90, 4, 64);
    p = problem(4, 16, 4096, 64, 32, 32, 128.0);
    check_choice("32x32 on sm_90", p, d, STOF_ATTN_ROWWISE, 0, 0);
    /* Other devices and builds keep the mma.sync kernel: A100 (8.0), a Blackwell part
     * (10.0: no wgmma), an H100 in a build without the sm_90a objects, an unknown cc. */
    p = problem(4, 16, 4096, 64, 128, 64, 64.0);
    attn_device a = a100();
    a.cc = 80;
    a.sm90_kernels = 1;
    check_choice("A100", p, a, STOF_ATTN_BLOCKWISE, 0, 0);
    attn_device bw = h100_sm90();
    bw.cc = 100;
    check_choice("cc 10.0", p, bw, STOF_ATTN_BLOCKWISE, 4, 128);
    attn_device nb = h100_sm90();
    nb.sm90_kernels = 0;
    check_choice("not built", p, nb, STOF_ATTN_BLOCKWISE, 4, 128);
    check_choice("cc unknown", p, h100(), STOF_ATTN_BLOCKWISE, 4, 128);
    /* 48 KiB per block: one warpgroup at D=64 fits (42048 bytes), two do not (50240). */
    attn_device tiny = d;
    tiny.smem_per_block = 48 * 1024;
    CHECK(attn_sm90_usable(&tiny, 64, 128, 64) && !attn_sm90_usable(&tiny, 128, 128, 64),
          "usable under a 48 KiB opt-in limit");
    check_choice("48 KiB per block", p, tiny, STOF_ATTN_BLOCKWISE_SM90, 4, 64);

    /* Forced: the sm_90 kernel even on a sparse mask; refused where it cannot run. */
    p = problem(4, 16, 4096, 64, 128, 64, 0.5);
    CHECK_OK(attn_select(&p, &d, STOF_ATTN_BLOCKWISE_SM90, &ch));
    CHECK(ch.kernel == STOF_ATTN_BLOCKWISE_SM90 && ch.warps == 4, "forced sm_90: kernel %d",
          ch.kernel);
    CHECK_OK(attn_select(&p, &d, STOF_ATTN_BLOCKWISE, &ch));
    CHECK(ch.kernel == STOF_ATTN_BLOCKWISE, "forced mma.sync on sm_90: kernel %d", ch.kernel);
    CHECK_STATUS(attn_select(&p, &a, STOF_ATTN_BLOCKWISE_SM90, &ch), STOF_ERR_UNSUPPORTED);
    CHECK(strstr(stof_last_error(), "9.0") && strstr(stof_last_error(), "8.0"), "message: %s",
          stof_last_error());
    CHECK_STATUS(attn_select(&p, &nb, STOF_ATTN_BLOCKWISE_SM90, &ch), STOF_ERR_UNSUPPORTED);
    CHECK(strstr(stof_last_error(), "not built") != NULL, "message: %s", stof_last_error());
    p = problem(4, 16, 4096, 32, 128, 64, 64.0);
    CHECK_STATUS(attn_select(&p, &d, STOF_ATTN_BLOCKWISE_SM90, &ch), STOF_ERR_UNSUPPORTED);
    CHECK(strstr(stof_last_error(), "head dim 32") != NULL, "message: %s", stof_last_error());
    p = problem(4, 16, 4096, 64, 32, 32, 64.0);
    CHECK_STATUS(attn_select(&p, &d, STOF_ATTN_BLOCKWISE_SM90, &ch), STOF_ERR_UNSUPPORTED);
    CHECK(strstr(stof_last_error(), "32x32") != NULL, "message: %s", stof_last_error());
}

/* Rule 4: head dim 128 with an all-visible, causal or band mask (no split,
 * no modifiers) takes the warp-specialised kernel where rule 3 would run the
 * wgmma kernel; forcing either sm_90 kernel gets that one. */
static void test_ws_rule(void)
{
    attn_device d = h100_sm90(), a = h100(), nb = h100_sm90();
    a.cc = 80;
    nb.sm90_kernels = 0;
    stof_attn_choice ch;
    attn_problem p = problem(4, 16, 4096, 128, 128, 64, 64.0);
    p.analytic = 1;
    check_choice("dense 4096 head dim 128", p, d, STOF_ATTN_BLOCKWISE_SM90_WS, 0, 0);
    CHECK(attn_ws_serves(128, 1, 0) && !attn_ws_serves(64, 1, 0) && !attn_ws_serves(128, 0, 0) &&
              attn_ws_serves(128, 1, ATTN_MODS_ALIBI_CAP) &&
              !attn_ws_serves(128, 1, ATTN_MODS_TABLE),
          "attn_ws_serves");
    /* Which masks it walks without the list, under which bias (attn_ws_analytic). */
    CHECK(attn_ws_analytic(1, 0, 0, 1, STOF_BIAS_ALIBI) &&
              attn_ws_analytic(0, 1, 1, 1, STOF_BIAS_ALIBI) &&
              attn_ws_analytic(0, 0, 1, 1, STOF_BIAS_NONE) &&
              !attn_ws_analytic(0, 0, 1, 1, STOF_BIAS_ALIBI) && !attn_ws_analytic(0, 0, 0, 1, 0) &&
              !attn_ws_analytic(0, 0, 1, 2, STOF_BIAS_NONE),
          "attn_ws_analytic");
    CHECK(attn_mods_class(STOF_BIAS_NONE, 0.0f) == ATTN_MODS_NONE &&
              attn_mods_class(STOF_BIAS_ALIBI, 0.0f) == ATTN_MODS_ALIBI_CAP &&
              attn_mods_class(STOF_BIAS_NONE, 30.0f) == ATTN_MODS_ALIBI_CAP &&
              attn_mods_class(STOF_BIAS_ALIBI, 30.0f) == ATTN_MODS_ALIBI_CAP &&
              attn_mods_class(STOF_BIAS_T5, 0.0f) == ATTN_MODS_TABLE &&
              attn_mods_class(STOF_BIAS_TENSOR, 30.0f) == ATTN_MODS_TABLE,
          "attn_mods_class");
    /* Two Q buffers (4 x 16 KB), K and V stages (4 x 32 KB), alignment,
     * mbarriers and modifiers: within the 227 KB an sm_90 block may opt in to. */
    CHECK(ATTN_WS_SMEM_BYTES == 65536 + 131072 + 1024 + 256 && ATTN_WS_SMEM_BYTES <= 232448,
          "ws smem %d", ATTN_WS_SMEM_BYTES);
    p = causal(1, 32, 8192, 128, 128, 64, 64.0);
    p.analytic = 1;
    check_choice("causal 8192 head dim 128", p, d, STOF_ATTN_BLOCKWISE_SM90_WS, 0, 0);
    /* A sliding window (window:4096:0) over 16384 keys: a band, 65 listed tiles a row. */
    attn_problem w = problem(1, 32, 16384, 128, 128, 64, 65.0);
    w.analytic = 1;
    check_choice("window:4096:0 at 16384 head dim 128", w, d, STOF_ATTN_BLOCKWISE_SM90_WS, 0, 0);
    CHECK_OK(attn_select(&p, &d, STOF_ATTN_BLOCKWISE_SM90, &ch));
    CHECK(ch.kernel == STOF_ATTN_BLOCKWISE_SM90, "forced old sm_90: kernel %d", ch.kernel);
    CHECK_OK(attn_select(&p, &d, STOF_ATTN_BLOCKWISE_SM90_WS, &ch));
    CHECK(ch.kernel == STOF_ATTN_BLOCKWISE_SM90_WS && ch.block_m == 128 && ch.block_n == 128,
          "forced ws: kernel %d block %dx%d", ch.kernel, ch.block_m, ch.block_n);
    /* Not served: head dim 64, a listed mask, modifiers, another device, no build. */
    check_choice("dense 4096 head dim 64", problem(4, 16, 4096, 64, 128, 64, 64.0), d,
                 STOF_ATTN_BLOCKWISE_SM90, 0, 0);
    p = problem(4, 16, 4096, 128, 128, 64, 64.0);
    check_choice("listed mask at head dim 128", p, d, STOF_ATTN_BLOCKWISE_SM90, 0, 0);
    CHECK_STATUS(attn_select(&p, &d, STOF_ATTN_BLOCKWISE_SM90_WS, &ch), STOF_ERR_UNSUPPORTED);
    CHECK(strstr(stof_last_error(), "another mask") != NULL, "message: %s", stof_last_error());
    p.analytic = 1;
    /* ALiBi or a soft cap: the warp-specialised kernel under AUTO and forced,
     * the older one forced; a T5 or tensor bias refused by name. */
    p.mods = ATTN_MODS_ALIBI_CAP;
    check_choice("ALiBi or a cap at head dim 128", p, d, STOF_ATTN_BLOCKWISE_SM90_WS, 0, 0);
    CHECK_OK(attn_select(&p, &d, STOF_ATTN_BLOCKWISE_SM90_WS, &ch));
    CHECK(ch.kernel == STOF_ATTN_BLOCKWISE_SM90_WS, "forced ws with a cap: kernel %d", ch.kernel);
    CHECK_OK(attn_select(&p, &d, STOF_ATTN_BLOCKWISE_SM90, &ch));
    CHECK(ch.kernel == STOF_ATTN_BLOCKWISE_SM90, "forced sm_90 with a cap: kernel %d", ch.kernel);
    p.mods = ATTN_MODS_TABLE;
    check_choice("T5 bias at head dim 128", p, d, STOF_ATTN_BLOCKWISE_SM90, 0, 0);
    CHECK_STATUS(attn_select(&p, &d, STOF_ATTN_BLOCKWISE_SM90_WS, &ch), STOF_ERR_UNSUPPORTED);
    CHECK(strstr(stof_last_error(), "a T5 or tensor bias") != NULL, "message: %s",
          stof_last_error());
    p.mods = 0;
    CHECK_STATUS(attn_select(&p, &a, STOF_ATTN_BLOCKWISE_SM90_WS, &ch), STOF_ERR_UNSUPPORTED);
    CHECK(strstr(stof_last_error(), "8.0") != NULL, "message: %s", stof_last_error());
    CHECK_STATUS(attn_select(&p, &nb, STOF_ATTN_BLOCKWISE_SM90_WS, &ch), STOF_ERR_UNSUPPORTED);
    CHECK(strstr(stof_last_error(), "not built") != NULL, "message: %s", stof_last_error());
    CHECK_OK(attn_select(&p, &nb, STOF_ATTN_AUTO, &ch));
    CHECK(ch.kernel == STOF_ATTN_BLOCKWISE, "no sm_90a build: kernel %d", ch.kernel);
}

static int naive_nth(uint64_t w, int n)
{
    for (int i = 0; i < 64; i++)
        if ((w >> i) & 1ull && n-- == 0) return i;
    return -1;
}

static void test_bits(void)
{
    test_rng r;
    test_rng_init(&r, test_seed());
    int bad_nth = 0, bad_drop = 0;
    for (int it = 0; it < 20000; it++) {
        uint64_t w = test_rng_next(&r);
        int sparsity = (int)test_rng_int(&r, 0, 3); /* thin some words out */
        for (int s = 0; s < sparsity; s++)
            w &= test_rng_next(&r);
        if (it == 0) w = ~0ull;
        if (it == 1) w = 1ull << 63;
        int c = attn_popc64(w);
        for (int n = 0; n < c; n++)
            if (attn_nth_set_bit(w, n) != naive_nth(w, n)) bad_nth++;
        int take = (int)test_rng_int(&r, 0, 65);
        uint64_t want = w;
        for (int k = 0; k < take && want; k++)
            want &= want - 1;
        if (attn_drop_low_bits(w, take) != want) bad_drop++;
    }
    CHECK(bad_nth == 0, "%d wrong nth-set-bit answers", bad_nth);
    CHECK(bad_drop == 0, "%d wrong drop-low-bits answers", bad_drop);
    CHECK(attn_low_mask(0) == 0 && attn_low_mask(-5) == 0, "low mask <= 0");
    CHECK(attn_low_mask(64) == ~0ull && attn_low_mask(1000) == ~0ull, "low mask >= 64");
    CHECK(attn_low_mask(17) == 0x1ffffull, "low mask 17");
}

int main(void)
{
    test_rowwise_costs();
    test_occupancy();
    test_blockwise_choices();
    test_rowwise_choices();
    test_forced_and_extremes();
    test_sm90_rule();
    test_ws_rule();
    test_bits();
    return test_finish("test_attn_select");
}
