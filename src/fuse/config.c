/*
 * config.c — template descriptors: the table of instantiated kernels, their
 * validation, their shared-memory footprint and the rule-based default.
 * Pure host logic (tested without a GPU). The smem formulas here are the
 * ones the launchers use, so the kernels' carve-up and the checks agree.
 */
#include "fuse/fuse.h"
#include "fuse/instances.h"
#include "fuse/internal.h"

#include <stdio.h>
#include <string.h>

#define ROW_BIAS_ACT(bm, bn, bk, wm, wn, st) {FUSE_TPL_GEMM_BIAS_ACT, bm, bn, bk, wm, wn, st},
#define ROW_RES_LN(bm, bn, bk, wm, wn, st) {FUSE_TPL_GEMM_RES_LN, bm, bn, bk, wm, wn, st},
#define ROW_CHAIN(bm, bn, bk, wm, wn, st) {FUSE_TPL_FFN_CHAIN, bm, bn, bk, wm, wn, st},
#define ROW_SM90(bm, bn, bk, wm, wn, st) {FUSE_TPL_GEMM_SM90, bm, bn, bk, wm, wn, st},

static const fuse_config gemm_bias_act_list[] = {FUSE_GEMM_BIAS_ACT_INSTANCES(ROW_BIAS_ACT)};
static const fuse_config gemm_res_ln_list[] = {FUSE_GEMM_RES_LN_INSTANCES(ROW_RES_LN)};
static const fuse_config ffn_chain_list[] = {FUSE_FFN_CHAIN_INSTANCES(ROW_CHAIN)};
static const fuse_config gemm_sm90_list[] = {FUSE_GEMM_SM90_INSTANCES(ROW_SM90)};

#define COUNT_OF(a) ((int)(sizeof(a) / sizeof((a)[0])))

const char *fuse_act_name(stof_act act)
{
    switch (act) {
    case ACT_NONE: return "none";
    case ACT_GELU: return "gelu";
    case ACT_GELU_TANH: return "gelu_tanh";
    case ACT_RELU: return "relu";
    case ACT_SILU: return "silu";
    }
    return "unknown";
}

const char *fuse_tpl_name(fuse_tpl tpl)
{
    switch (tpl) {
    case FUSE_TPL_NONE: return "none";
    case FUSE_TPL_GEMM_BIAS_ACT: return "gemm_bias_act";
    case FUSE_TPL_GEMM_RES_LN: return "gemm_res_ln";
    case FUSE_TPL_FFN_CHAIN: return "ffn_chain";
    case FUSE_TPL_GEMM_SM90: return "gemm_sm90";
    case FUSE_TPL_COUNT: break;
    }
    return "unknown";
}

const fuse_config *fuse_config_list(fuse_tpl tpl, int *count)
{
    const fuse_config *list = NULL;
    int n = 0;
    switch (tpl) {
    case FUSE_TPL_GEMM_BIAS_ACT:
        list = gemm_bias_act_list;
        n = COUNT_OF(gemm_bias_act_list);
        break;
    case FUSE_TPL_GEMM_RES_LN:
        list = gemm_res_ln_list;
        n = COUNT_OF(gemm_res_ln_list);
        break;
    case FUSE_TPL_FFN_CHAIN:
        list = ffn_chain_list;
        n = COUNT_OF(ffn_chain_list);
        break;
    case FUSE_TPL_GEMM_SM90:
        list = gemm_sm90_list;
        n = COUNT_OF(gemm_sm90_list);
        break;
    default: break;
    }
    if (count) *count = n;
    return list;
}

int fuse_config_format(const fuse_config *c, char *buf, size_t cap)
{
    return snprintf(buf, cap, "%s %dx%dx%d w%dx%d s%d", fuse_tpl_name(c->tpl), c->block_m,
                    c->block_n, c->block_k, c->warps_m, c->warps_n, c->stages);
}

bool fuse_chain_hidden_ok(int hidden)
{
#define HIDDEN_IS(h) || hidden == (h)
    return false FUSE_FFN_CHAIN_HIDDENS(HIDDEN_IS);
#undef HIDDEN_IS
}

bool fuse_config_equal(const fuse_config *a, const fuse_config *b)
{
    return a->tpl == b->tpl && a->block_m == b->block_m && a->block_n == b->block_n &&
           a->block_k == b->block_k && a->warps_m == b->warps_m && a->warps_n == b->warps_n &&
           a->stages == b->stages;
}

/* The rules every kernel of the family relies on; instantiated configs obey them. */
static stof_status check_structure(const fuse_config *c)
{
    char name[96];
    fuse_config_format(c, name, sizeof name);
    STOF_REQUIRE(
        c->block_m >= 16 && c->block_m <= 256 && c->block_m % 16 == 0, STOF_ERR_INVALID_ARG,
        "fuse config %s: block_m %d is not a multiple of 16 in [16, 256]", name, c->block_m);
    STOF_REQUIRE(
        c->block_n >= 16 && c->block_n <= 256 && c->block_n % 16 == 0, STOF_ERR_INVALID_ARG,
        "fuse config %s: block_n %d is not a multiple of 16 in [16, 256]", name, c->block_n);
    STOF_REQUIRE(c->block_k == 32 || c->block_k == 64, STOF_ERR_INVALID_ARG,
                 "fuse config %s: block_k %d is not 32 or 64", name, c->block_k);
    STOF_REQUIRE(c->warps_m >= 1 && c->warps_n >= 1 && c->warps_m * c->warps_n <= 16,
                 STOF_ERR_INVALID_ARG, "fuse config %s: %d x %d warps (1 to 16 in all)", name,
                 c->warps_m, c->warps_n);
    /* gemm_sm90's small-tile ring holds a whole K of 768 (12 slices of 64) */
    const int max_stages = c->tpl == FUSE_TPL_GEMM_SM90 ? 12 : 8;
    STOF_REQUIRE(c->stages >= 2 && c->stages <= max_stages, STOF_ERR_INVALID_ARG,
                 "fuse config %s: stages %d is not in [2, %d]", name, c->stages, max_stages);
    STOF_REQUIRE(c->block_m % (16 * c->warps_m) == 0, STOF_ERR_INVALID_ARG,
                 "fuse config %s: block_m %d does not split into %d warp rows of 16-row tiles",
                 name, c->block_m, c->warps_m);
    /* B fragments are loaded two n8 tiles at a time. */
    STOF_REQUIRE(c->block_n % (16 * c->warps_n) == 0, STOF_ERR_INVALID_ARG,
                 "fuse config %s: block_n %d does not split into %d warp columns of 16", name,
                 c->block_n, c->warps_n);
    if (c->tpl == FUSE_TPL_FFN_CHAIN) {
        STOF_REQUIRE(c->warps_m == 1, STOF_ERR_INVALID_ARG,
                     "fuse config %s: the FFN chain splits warps over columns only (warps_m %d)",
                     name, c->warps_m);
        STOF_REQUIRE(c->block_n % c->block_k == 0, STOF_ERR_INVALID_ARG,
                     "fuse config %s: intermediate chunk %d is not a multiple of block_k %d", name,
                     c->block_n, c->block_k);
    }
    if (c->tpl == FUSE_TPL_GEMM_SM90) {
        /* a consumer warpgroup per 64 rows of a tile (wgmma's m64), or two
         * taking whole tiles in turns (ping-pong) with at most 128
         * accumulators a thread; K slices of one 128-byte swizzle atom,
         * wgmma n up to 256 */
        bool pingpong = c->warps_m == 1 && c->warps_n == 2 &&
                        (c->block_m == 64 || c->block_m == 128) &&
                        c->block_m / 64 * c->block_n <= 256;
        STOF_REQUIRE((c->block_m == 64 * c->warps_m && c->warps_n == 1) || pingpong,
                     STOF_ERR_INVALID_ARG,
                     "fuse config %s: block_m %d must be 64 x warps_m (%d consumer warpgroups) "
                     "with warps_n 1 (got %d), or a ping-pong 64x256 or 128x128 tile with warps_m "
                     "1 and warps_n 2",
                     name, c->block_m, c->warps_m, c->warps_n);
        STOF_REQUIRE(c->block_k == 64, STOF_ERR_INVALID_ARG,
                     "fuse config %s: block_k %d is not 64 (one 128-byte swizzle atom)", name,
                     c->block_k);
        STOF_REQUIRE(c->block_n % 64 == 0, STOF_ERR_INVALID_ARG,
                     "fuse config %s: block_n %d is not a multiple of 64 up to 256", name,
                     c->block_n);
    }
    return STOF_OK;
}

stof_status fuse_config_check(const fuse_config *c)
{
    STOF_REQUIRE(c, STOF_ERR_INVALID_ARG, "fuse config is NULL");
    STOF_REQUIRE(c->tpl > FUSE_TPL_NONE && c->tpl < FUSE_TPL_COUNT, STOF_ERR_INVALID_ARG,
                 "fuse config: unknown template %d", (int)c->tpl);
    STOF_TRY(check_structure(c));
    int n = 0;
    const fuse_config *list = fuse_config_list(c->tpl, &n);
    for (int i = 0; i < n; i++)
        if (fuse_config_equal(&list[i], c)) return STOF_OK;
    char name[96];
    fuse_config_format(c, name, sizeof name);
    return stof_error(STOF_ERR_INVALID_ARG,
                      "fuse config %s is well formed but not instantiated (fuse_config_list "
                      "gives the %d compiled ones)",
                      name, n);
}

static size_t half_tile_bytes(int rows, int cols)
{
    return (size_t)rows * (cols + FUSE_SMEM_PAD) * 2;
}

size_t fuse_config_smem_bytes(const fuse_config *c, int n)
{
    size_t stages = (size_t)c->stages;
    switch (c->tpl) {
    case FUSE_TPL_GEMM_BIAS_ACT:
        return stages * half_tile_bytes(c->block_m + c->block_n, c->block_k);
    case FUSE_TPL_GEMM_RES_LN:
        /* pipeline + block_m fp32 rows of the pre-LayerNorm values */
        return stages * half_tile_bytes(c->block_m + c->block_n, c->block_k) +
               (size_t)c->block_m * ((size_t)n + FUSE_SMEM_PAD) * 4;
    case FUSE_TPL_FFN_CHAIN: {
        /* x block + intermediate chunk + ring of w1 [block_n x block_k] or
         * w2 [hidden x K2] slices + two [warps x block_m] fp32 reductions */
        size_t w1 = half_tile_bytes(c->block_n, c->block_k);
        size_t w2 = half_tile_bytes(n, FUSE_CHAIN_K2);
        return half_tile_bytes(c->block_m, n) + half_tile_bytes(c->block_m, c->block_n) +
               stages * (w1 > w2 ? w1 : w2) + 2 * (size_t)c->warps_n * c->block_m * 4;
    }
    case FUSE_TPL_GEMM_SM90: return FUSE_SM90_SMEM_BYTES(c->block_m, c->block_n, c->stages);
    default: return 0;
    }
}

stof_status fuse_config_check_shape(const fuse_config *c, int64_t m, int n, int k,
                                    size_t smem_limit)
{
    STOF_TRY(fuse_config_check(c));
    char name[96];
    fuse_config_format(c, name, sizeof name);
    STOF_REQUIRE(m >= 1 && m <= (int64_t)1 << 30, STOF_ERR_SHAPE, "%s: m = %lld rows (1 to 2^30)",
                 name, (long long)m);
    STOF_REQUIRE(n >= 8 && n % 8 == 0, STOF_ERR_SHAPE, "%s: n = %d is not a positive multiple of 8",
                 name, n);
    STOF_REQUIRE(k >= 8 && k % 8 == 0, STOF_ERR_SHAPE, "%s: k = %d is not a positive multiple of 8",
                 name, k);
    switch (c->tpl) {
    case FUSE_TPL_GEMM_BIAS_ACT:
        /* M tiles run along grid.y */
        STOF_REQUIRE(stof_cdiv(m, c->block_m) <= 65535, STOF_ERR_SHAPE,
                     "%s: m = %lld needs more than 65535 row blocks", name, (long long)m);
        break;
    case FUSE_TPL_GEMM_RES_LN:
        STOF_REQUIRE(n <= FUSE_MAX_ROW_WIDTH, STOF_ERR_SHAPE,
                     "%s: LayerNorm width n = %d is above %d", name, n, FUSE_MAX_ROW_WIDTH);
        break;
    case FUSE_TPL_FFN_CHAIN:
        STOF_REQUIRE(fuse_chain_hidden_ok(n), STOF_ERR_UNSUPPORTED,
                     "%s: hidden size %d is not one the FFN chain is compiled for (384, 768, "
                     "1024)",
                     name, n);
        STOF_REQUIRE(n % c->block_k == 0 && n % (16 * c->warps_n) == 0, STOF_ERR_SHAPE,
                     "%s: hidden size %d does not split into block_k %d slices and %d warps", name,
                     n, c->block_k, c->warps_n);
        STOF_REQUIRE(k % c->block_n == 0, STOF_ERR_SHAPE,
                     "%s: intermediate size %d is not a multiple of the chunk %d", name, k,
                     c->block_n);
        break;
    case FUSE_TPL_GEMM_SM90:
        /* the persistent grid numbers its tiles in an int */
        STOF_REQUIRE(stof_cdiv(m, c->block_m) * stof_cdiv(n, c->block_n) <= (int64_t)1 << 30,
                     STOF_ERR_SHAPE, "%s: m = %lld, n = %d make more than 2^30 tiles", name,
                     (long long)m, n);
        break;
    default: break;
    }
    size_t need = fuse_config_smem_bytes(c, n);
    STOF_REQUIRE(need <= smem_limit, STOF_ERR_UNSUPPORTED,
                 "%s: needs %zu bytes of shared memory per block at n = %d; the device offers %zu",
                 name, need, n, smem_limit);
    return STOF_OK;
}

bool fuse_sm90_available(const stof_ctx *ctx)
{
#ifdef STOF_HAVE_FUSE_SM90
    return ctx && ctx->device == STOF_DEVICE_GPU && ctx->cc_major == 9 && ctx->cc_minor == 0;
#else
    (void)ctx;
    return false;
#endif
}

fuse_config fuse_config_sm90_small(void)
{
    static const fuse_config small[] = {FUSE_GEMM_SM90_SMALL(ROW_SM90)};
    return small[0];
}

/*
 * The GLU rule, in one place to flip once measured: from SM90_GLU_ROWS rows
 * on a GLU up projection runs SM90_GLU_TILE (any compiled gemm_sm90 config:
 * block_m, block_n, block_k, warps_m, warps_n, stages) instead of
 * fuse_config_default's cooperative 128x256; INT64_MAX: never. The GLU
 * epilogue (act(a) * b) leaves a cooperative tile's tensor cores idle while
 * it runs: 36% of a 128x256 tile's time at K = 768 with erff (clock64 in the
 * kernel; vec.cuh). The ping-pong tiles run it under the other warpgroup's
 * main loop, and the
 * two-CTA 128x128 under the other CTA's, but they load 2 (128x128) or 2.5
 * (64x256) bytes per output and K step rather than 1.5. Which wins is
 * measured by bench_fuse --glu (every config's row at 4096 .. 23923 tokens):
 * on an H100 (bench/results/fuse-glu-2026-11-26-h100.txt) the 64x256
 * ping-pong ran as fast as the 128x256 on ModernBERT-base's up projection
 * from 16384 tokens and 17% faster at 4096, and 3-20% faster on
 * LLaMA-3.2-1B's at every count; the 128x128 ping-pong lost on ModernBERT's
 * and the two-CTA 128x128 on both. With vec.cuh's branch-free activations
 * (fuse-glu-2026-11-26b-h100.txt) the 64x256 still led at every count but
 * LLaMA's 4096 rows, where the 128x128 ping-pong was 3% faster. Below 4096
 * rows nothing was measured.
 */
#define SM90_GLU_ROWS 4096
#define SM90_GLU_TILE 64, 256, 64, 1, 2, 5

fuse_config fuse_config_sm90_glu(int64_t m, int n, int k, int sm_count, size_t smem_limit)
{
    const fuse_config glu = {FUSE_TPL_GEMM_SM90, SM90_GLU_TILE};
    if (m >= SM90_GLU_ROWS && fuse_config_check(&glu) == STOF_OK &&
        fuse_config_check_shape(&glu, m, n, k, smem_limit) == STOF_OK)
        return glu;
    stof_clear_error(); /* a refused config falls back to the default rule */
    return fuse_config_default(FUSE_TPL_GEMM_SM90, m, n, k, sm_count, smem_limit);
}

/* The two-CTA tiles run at 96 registers a thread, 64 of them accumulators:
 * the rotation's angles made ptxas spill some 200 bytes a thread there, so
 * their kernels leave it out. */
bool fuse_rope_epi_fits(const fuse_config *c, int head_dim, int rot_dim)
{
    if (!c || c->tpl != FUSE_TPL_GEMM_SM90 || head_dim < 1 || c->block_n % head_dim != 0 ||
        FUSE_SM90_CTAS_PER_SM(fuse_config_smem_bytes(c, 0)) != 1)
        return false;
#define ROPE_SHAPE(d, r)                                                                           \
    if (head_dim == (d) && rot_dim == (r)) return true;
    FUSE_ROPE_EPI_SHAPES(ROPE_SHAPE)
#undef ROPE_SHAPE
    return false;
}

fuse_config fuse_config_sm90_rope(int64_t m, int n, int k, int head_dim, int rot_dim, int sm_count,
                                  size_t smem_limit)
{
    fuse_config c = fuse_config_default(FUSE_TPL_GEMM_SM90, m, n, k, sm_count, smem_limit);
    if (fuse_rope_epi_fits(&c, head_dim, rot_dim)) return c;
    int count = 0;
    const fuse_config *list = fuse_config_list(FUSE_TPL_GEMM_SM90, &count);
    for (int i = 0; i < count; i++)
        if (fuse_rope_epi_fits(&list[i], head_dim, rot_dim) &&
            fuse_config_check_shape(&list[i], m, n, k, smem_limit) == STOF_OK)
            return list[i];
    stof_clear_error(); /* rejected candidates are not the caller's error */
    memset(&c, 0, sizeof c);
    return c; /* tpl NONE */
}

static int64_t config_ctas(const fuse_config *c, int64_t m, int n)
{
    int64_t rows = stof_cdiv(m, c->block_m);
    bool tiled = c->tpl == FUSE_TPL_GEMM_BIAS_ACT || c->tpl == FUSE_TPL_GEMM_SM90;
    return tiled ? rows * stof_cdiv(n, c->block_n) : rows;
}

fuse_config fuse_config_default(fuse_tpl tpl, int64_t m, int n, int k, int sm_count,
                                size_t smem_limit)
{
    fuse_config best = {FUSE_TPL_NONE, 0, 0, 0, 0, 0, 0};
    int count = 0;
    const fuse_config *list = fuse_config_list(tpl, &count);
    int64_t best_ctas = 0;
    int64_t best_area = 0;
    for (int i = 0; i < count; i++) {
        const fuse_config *c = &list[i];
        if (fuse_config_check_shape(c, m, n, k, smem_limit) != STOF_OK) continue;
        int64_t ctas = config_ctas(c, m, n);
        int64_t area = (int64_t)c->block_m * c->block_n;
        bool fills = ctas >= sm_count;
        bool best_fills = best_ctas >= sm_count;
        bool better;
        if (best.tpl == FUSE_TPL_NONE)
            better = true;
        else if (fills != best_fills)
            better = fills;
        else if (fills)
            better = area > best_area; /* enough CTAs: bigger tiles reuse more */
        else                           /* too few CTAs: spread wider, and waste less on a tie */
            better = ctas > best_ctas || (ctas == best_ctas && area < best_area);
        if (better) {
            best = *c;
            best_ctas = ctas;
            best_area = area;
        }
    }
    stof_clear_error(); /* rejected candidates are not the caller's error */
    return best;
}
