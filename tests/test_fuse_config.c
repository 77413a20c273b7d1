/*
 * test_fuse_config.c — the host logic of src/fuse without a GPU: the table of
 * instantiated template configs, descriptor validation (each broken field is
 * named), shared-memory footprints, shape checks, the rule-based default, and
 * the argument checks of every entry point. The checks run before any CUDA
 * call, so a context that merely claims to be a GPU (never used for work)
 * exercises them; a check that went missing would reach CUDA with bogus
 * pointers and fail here with the wrong status.
 */
#include "fuse/fuse.h"
#include "testlib.h"

#include <stdlib.h>
#include <string.h>

#define H100_SMEM 232448

static bool message_has(const char *needle)
{
    return strstr(stof_last_error(), needle) != NULL;
}

static void test_tables(void)
{
    fuse_tpl tpls[] = {FUSE_TPL_GEMM_BIAS_ACT, FUSE_TPL_GEMM_RES_LN, FUSE_TPL_FFN_CHAIN,
                       FUSE_TPL_GEMM_SM90};
    for (int t = 0; t < 4; t++) {
        int n = 0;
        const fuse_config *list = fuse_config_list(tpls[t], &n);
        CHECK(list && n > 0, "%s has no instantiated configs", fuse_tpl_name(tpls[t]));
        for (int i = 0; i < n; i++) {
            char name[96];
            fuse_config_format(&list[i], name, sizeof name);
            CHECK(list[i].tpl == tpls[t], "%s carries template %d", name, (int)list[i].tpl);
            CHECK_OK(fuse_config_check(&list[i]));
            CHECK(strncmp(name, fuse_tpl_name(tpls[t]), strlen(fuse_tpl_name(tpls[t]))) == 0,
                  "format gives \"%s\"", name);
        }
    }
    int n = 1;
    CHECK(fuse_config_list(FUSE_TPL_NONE, &n) == NULL && n == 0, "tpl NONE lists %d", n);
    n = 1;
    CHECK(fuse_config_list((fuse_tpl)42, &n) == NULL && n == 0, "tpl 42 lists %d", n);
    CHECK(strcmp(fuse_act_name(ACT_GELU_TANH), "gelu_tanh") == 0, "act name");
    CHECK(strcmp(fuse_tpl_name(FUSE_TPL_GEMM_SM90), "gemm_sm90") == 0, "sm90 name");
    CHECK(FUSE_TPL_COUNT == 5, "template count %d", (int)FUSE_TPL_COUNT);
    CHECK(fuse_chain_hidden_ok(768) && !fuse_chain_hidden_ok(512), "chain hidden sizes");
}

static void test_validation(void)
{
    int n = 0;
    const fuse_config base = fuse_config_list(FUSE_TPL_GEMM_BIAS_ACT, &n)[1]; /* 128x128x32 */
    fuse_config c;

    CHECK_STATUS(fuse_config_check(NULL), STOF_ERR_INVALID_ARG);
    c = base;
    c.tpl = (fuse_tpl)9;
    CHECK_STATUS(fuse_config_check(&c), STOF_ERR_INVALID_ARG);
    CHECK(message_has("unknown template 9"), "message: %s", stof_last_error());
    c = base;
    c.block_k = 48;
    CHECK_STATUS(fuse_config_check(&c), STOF_ERR_INVALID_ARG);
    CHECK(message_has("block_k 48"), "message: %s", stof_last_error());
    c = base;
    c.block_m = 24;
    CHECK_STATUS(fuse_config_check(&c), STOF_ERR_INVALID_ARG);
    CHECK(message_has("block_m 24"), "message: %s", stof_last_error());
    c = base;
    c.block_n = 512;
    CHECK_STATUS(fuse_config_check(&c), STOF_ERR_INVALID_ARG);
    CHECK(message_has("block_n 512"), "message: %s", stof_last_error());
    c = base;
    c.warps_m = 0;
    CHECK_STATUS(fuse_config_check(&c), STOF_ERR_INVALID_ARG);
    c = base;
    c.warps_m = 5;
    c.warps_n = 4;
    CHECK_STATUS(fuse_config_check(&c), STOF_ERR_INVALID_ARG);
    CHECK(message_has("5 x 4 warps"), "message: %s", stof_last_error());
    c = base;
    c.stages = 1;
    CHECK_STATUS(fuse_config_check(&c), STOF_ERR_INVALID_ARG);
    CHECK(message_has("stages 1"), "message: %s", stof_last_error());
    c = base;
    c.stages = 9;
    CHECK_STATUS(fuse_config_check(&c), STOF_ERR_INVALID_ARG);
    c = base;
    c.block_m = 32;
    c.warps_m = 4; /* 8-row warp tiles */
    c.warps_n = 2;
    CHECK_STATUS(fuse_config_check(&c), STOF_ERR_INVALID_ARG);
    CHECK(message_has("block_m 32 does not split"), "message: %s", stof_last_error());
    c = base;
    c.block_n = 64;
    c.warps_n = 8; /* 8-column warp tiles */
    c.warps_m = 1;
    CHECK_STATUS(fuse_config_check(&c), STOF_ERR_INVALID_ARG);
    CHECK(message_has("block_n 64 does not split"), "message: %s", stof_last_error());
    /* well formed, not compiled */
    c = base;
    c.stages = 5;
    CHECK_STATUS(fuse_config_check(&c), STOF_ERR_INVALID_ARG);
    CHECK(message_has("not instantiated"), "message: %s", stof_last_error());
    /* chain rules */
    c = fuse_config_list(FUSE_TPL_FFN_CHAIN, &n)[0];
    c.warps_m = 2;
    CHECK_STATUS(fuse_config_check(&c), STOF_ERR_INVALID_ARG);
    CHECK(message_has("columns only"), "message: %s", stof_last_error());

    /* Hopper rules: 64 rows per consumer warpgroup with warps_n 1 (or whole
     * tiles of up to 128 accumulators a thread for two ping-pong warpgroups,
     * warps_m 1 and warps_n 2), block_k 64, block_n a multiple of 64; the
     * instances carry the tiles the brief names */
    const fuse_config *sm90 = fuse_config_list(FUSE_TPL_GEMM_SM90, &n);
    CHECK(n >= 2 && n <= 5, "gemm_sm90 has %d instances", n);
    bool has_256 = false, has_128 = false, has_pingpong = false;
    for (int i = 0; i < n; i++) {
        const bool pingpong = sm90[i].warps_m == 1 && sm90[i].warps_n == 2 &&
                              sm90[i].block_m / 64 * sm90[i].block_n <= 256;
        CHECK(((sm90[i].block_m == 64 * sm90[i].warps_m && sm90[i].warps_n == 1) || pingpong) &&
                  sm90[i].block_k == 64 && sm90[i].block_n % 64 == 0,
              "gemm_sm90 instance %d breaks its own rules", i);
        has_256 |= sm90[i].block_m == 128 && sm90[i].block_n == 256;
        has_128 |= sm90[i].block_m == 128 && sm90[i].block_n == 128;
        has_pingpong |= pingpong;
    }
    CHECK(has_256 && has_128 && has_pingpong, "gemm_sm90 lacks 128x256, 128x128 or ping-pong");
    /* the GLU rule gives a gemm_sm90 config that fits, and the default below
     * the ping-pong threshold's rows */
    fuse_config glu = fuse_config_sm90_glu(128, 2304, 768, 132, 227 * 1024);
    fuse_config def = fuse_config_default(FUSE_TPL_GEMM_SM90, 128, 2304, 768, 132, 227 * 1024);
    CHECK(fuse_config_equal(&glu, &def), "GLU rule at 128 rows is not the default");
    glu = fuse_config_sm90_glu(24000, 2304, 768, 132, 227 * 1024);
    CHECK(glu.tpl == FUSE_TPL_GEMM_SM90 && fuse_config_check(&glu) == STOF_OK,
          "GLU rule at 24000 rows gives no gemm_sm90 config");
    CHECK(glu.block_m == 64 && glu.block_n == 256 && glu.warps_n == 2,
          "GLU rule at 24000 rows: %dx%d w%dx%d, not the 64x256 ping-pong", glu.block_m,
          glu.block_n, glu.warps_m, glu.warps_n);
    const fuse_config sm = sm90[0];
    c = sm;
    c.warps_m = 1; /* 128 rows for one warpgroup */
    CHECK_STATUS(fuse_config_check(&c), STOF_ERR_INVALID_ARG);
    CHECK(message_has("64 x warps_m"), "message: %s", stof_last_error());
    c = sm;
    c.block_m = 192; /* 192 rows for two warpgroups */
    CHECK_STATUS(fuse_config_check(&c), STOF_ERR_INVALID_ARG);
    CHECK(message_has("64 x warps_m"), "message: %s", stof_last_error());
    c = sm;
    c.warps_n = 2;
    CHECK_STATUS(fuse_config_check(&c), STOF_ERR_INVALID_ARG);
    CHECK(message_has("warps_n 1"), "message: %s", stof_last_error());
    c = sm;
    c.block_k = 32;
    CHECK_STATUS(fuse_config_check(&c), STOF_ERR_INVALID_ARG);
    CHECK(message_has("block_k 32 is not 64"), "message: %s", stof_last_error());
    c = sm;
    c.block_n = 96;
    CHECK_STATUS(fuse_config_check(&c), STOF_ERR_INVALID_ARG);
    CHECK(message_has("block_n 96 is not a multiple of 64"), "message: %s", stof_last_error());
    c = sm;
    c.stages = 7; /* well formed, not compiled */
    CHECK_STATUS(fuse_config_check(&c), STOF_ERR_INVALID_ARG);
    CHECK(message_has("not instantiated"), "message: %s", stof_last_error());
    /* the same tile under another template is another kernel */
    c = sm;
    c.tpl = FUSE_TPL_GEMM_BIAS_ACT;
    CHECK_STATUS(fuse_config_check(&c), STOF_ERR_INVALID_ARG);
}

static fuse_config find_config(fuse_tpl tpl, int bm, int bn, int bk)
{
    int n = 0;
    const fuse_config *list = fuse_config_list(tpl, &n);
    for (int i = 0; i < n; i++)
        if (list[i].block_m == bm && list[i].block_n == bn && list[i].block_k == bk) return list[i];
    fuse_config none;
    memset(&none, 0, sizeof none);
    return none;
}

static void test_smem_and_shapes(void)
{
    fuse_config a = find_config(FUSE_TPL_GEMM_BIAS_ACT, 128, 128, 32);
    fuse_config b = find_config(FUSE_TPL_GEMM_RES_LN, 32, 128, 32);
    fuse_config c = find_config(FUSE_TPL_FFN_CHAIN, 32, 128, 32);
    CHECK(a.tpl && b.tpl && c.tpl, "expected configs are listed");
    /* stages x (bm + bn) rows x (bk + 8) x 2 bytes */
    CHECK(fuse_config_smem_bytes(&a, 0) == 4 * 256 * 40 * 2, "gemm smem %zu",
          fuse_config_smem_bytes(&a, 0));
    /* + block_m x (n + 8) fp32 */
    CHECK(fuse_config_smem_bytes(&b, 768) == 3 * 160 * 40 * 2 + 32 * 776 * 4, "res_ln smem %zu",
          fuse_config_smem_bytes(&b, 768));
    /* x block + h chunk + 2 stages of max(w1 slice, w2 slice) + reductions */
    size_t want = 32 * 776 * 2 + 32 * 136 * 2 + 2 * (768 * 24 * 2) + 2 * 8 * 32 * 4;
    CHECK(fuse_config_smem_bytes(&c, 768) == want, "chain smem %zu (want %zu)",
          fuse_config_smem_bytes(&c, 768), want);

    CHECK_OK(fuse_config_check_shape(&a, 16384, 3072, 768, H100_SMEM));
    CHECK_OK(fuse_config_check_shape(&a, 1, 8, 8, H100_SMEM));
    CHECK_STATUS(fuse_config_check_shape(&a, 0, 768, 768, H100_SMEM), STOF_ERR_SHAPE);
    CHECK_STATUS(fuse_config_check_shape(&a, 128, 12, 768, H100_SMEM), STOF_ERR_SHAPE);
    CHECK(message_has("n = 12"), "message: %s", stof_last_error());
    CHECK_STATUS(fuse_config_check_shape(&a, 128, 768, 0, H100_SMEM), STOF_ERR_SHAPE);
    CHECK_STATUS(fuse_config_check_shape(&a, (int64_t)128 * 70000, 768, 768, H100_SMEM),
                 STOF_ERR_SHAPE);
    CHECK_STATUS(fuse_config_check_shape(&a, 128, 768, 768, 48 * 1024), STOF_ERR_UNSUPPORTED);
    CHECK(message_has("shared memory"), "message: %s", stof_last_error());
    CHECK_OK(fuse_config_check_shape(&b, 128, 768, 3072, H100_SMEM));
    CHECK_STATUS(fuse_config_check_shape(&b, 128, 8200, 3072, 1 << 30), STOF_ERR_SHAPE);
    CHECK_STATUS(fuse_config_check_shape(&b, 128, 4096, 3072, H100_SMEM), STOF_ERR_UNSUPPORTED);
    CHECK_OK(fuse_config_check_shape(&c, 128, 768, 3072, H100_SMEM));
    CHECK_STATUS(fuse_config_check_shape(&c, 128, 512, 2048, H100_SMEM), STOF_ERR_UNSUPPORTED);
    CHECK(message_has("hidden size 512"), "message: %s", stof_last_error());
    CHECK_STATUS(fuse_config_check_shape(&c, 128, 768, 3000, H100_SMEM), STOF_ERR_SHAPE);
    CHECK(message_has("intermediate size 3000"), "message: %s", stof_last_error());

    /* gemm_sm90: stages x (bm + bn) rows of 128 bytes, 16 bytes of mbarriers
     * per stage, 1 KB to align the tiles */
    fuse_config big = find_config(FUSE_TPL_GEMM_SM90, 128, 256, 64);
    fuse_config small = find_config(FUSE_TPL_GEMM_SM90, 128, 128, 64);
    CHECK(big.tpl && small.tpl, "expected gemm_sm90 configs are listed");
    if (big.tpl && small.tpl) {
        size_t want_big = (size_t)big.stages * (128 + 256) * 128 + (size_t)big.stages * 16 + 1024;
        size_t want_small =
            (size_t)small.stages * (128 + 128) * 128 + (size_t)small.stages * 16 + 1024;
        CHECK(fuse_config_smem_bytes(&big, 0) == want_big, "sm90 128x256 smem %zu (want %zu)",
              fuse_config_smem_bytes(&big, 0), want_big);
        CHECK(fuse_config_smem_bytes(&small, 3072) == want_small,
              "sm90 128x128 smem %zu (want %zu)", fuse_config_smem_bytes(&small, 3072), want_small);
        CHECK(want_big <= H100_SMEM, "128x256 does not fit an H100 (%zu)", want_big);
        CHECK_OK(fuse_config_check_shape(&big, 16384, 3072, 768, H100_SMEM));
        CHECK_OK(fuse_config_check_shape(&big, 1, 8, 8, H100_SMEM));
        CHECK_OK(fuse_config_check_shape(&small, 77, 200, 72, H100_SMEM));
        CHECK_STATUS(fuse_config_check_shape(&big, 128, 768, 768, 100 * 1024),
                     STOF_ERR_UNSUPPORTED);
        CHECK(message_has("shared memory"), "message: %s", stof_last_error());
        CHECK_OK(fuse_config_check_shape(&big, 1000, 3072, 200, H100_SMEM));
        CHECK_STATUS(fuse_config_check_shape(&big, 128, 3072, 4, H100_SMEM), STOF_ERR_SHAPE);
        /* 2^23 row blocks x 512 column blocks: too many tiles for the grid's int */
        CHECK_STATUS(fuse_config_check_shape(&big, (int64_t)1 << 30, 131072, 64, H100_SMEM),
                     STOF_ERR_SHAPE);
        CHECK(message_has("tiles"), "message: %s", stof_last_error());
    }
}

static void test_default_rule(void)
{
    fuse_config d = fuse_config_default(FUSE_TPL_GEMM_BIAS_ACT, 16384, 3072, 768, 132, H100_SMEM);
    CHECK(d.tpl == FUSE_TPL_GEMM_BIAS_ACT && d.block_m * d.block_n == 128 * 256,
          "big GEMM default %dx%d", d.block_m, d.block_n);
    d = fuse_config_default(FUSE_TPL_GEMM_BIAS_ACT, 1, 768, 768, 132, H100_SMEM);
    CHECK(d.tpl == FUSE_TPL_GEMM_BIAS_ACT && d.block_m == 32 && d.block_n == 64,
          "one-token GEMM default %dx%d", d.block_m, d.block_n);
    d = fuse_config_default(FUSE_TPL_GEMM_RES_LN, 128, 768, 3072, 132, H100_SMEM);
    CHECK(d.tpl == FUSE_TPL_GEMM_RES_LN && d.block_m == 16, "res_ln default block_m %d", d.block_m);
    d = fuse_config_default(FUSE_TPL_GEMM_RES_LN, 65536, 768, 3072, 132, H100_SMEM);
    CHECK(d.tpl == FUSE_TPL_GEMM_RES_LN && d.block_m == 32,
          "res_ln default at 64k tokens: block_m %d (64 needs too much smem at 768)", d.block_m);
    d = fuse_config_default(FUSE_TPL_FFN_CHAIN, 4096, 768, 3072, 132, H100_SMEM);
    CHECK(d.tpl == FUSE_TPL_FFN_CHAIN, "chain default exists at 768");
    CHECK_OK(fuse_config_check_shape(&d, 4096, 768, 3072, H100_SMEM));
    d = fuse_config_default(FUSE_TPL_FFN_CHAIN, 4096, 512, 2048, 132, H100_SMEM);
    CHECK(d.tpl == FUSE_TPL_NONE, "chain default at hidden 512 should be NONE");
    d = fuse_config_default(FUSE_TPL_GEMM_BIAS_ACT, 128, 768, 768, 132, 1024);
    CHECK(d.tpl == FUSE_TPL_NONE, "nothing fits in 1 KiB of smem");

    /* gemm_sm90 by the same rule, and only when asked for by name */
    d = fuse_config_default(FUSE_TPL_GEMM_SM90, 16384, 3072, 768, 132, H100_SMEM);
    CHECK(d.tpl == FUSE_TPL_GEMM_SM90 && d.block_m == 128 && d.block_n == 256,
          "big sm90 default %s %dx%d", fuse_tpl_name(d.tpl), d.block_m, d.block_n);
    d = fuse_config_default(FUSE_TPL_GEMM_SM90, 128, 2304, 768, 132, H100_SMEM);
    CHECK(d.tpl == FUSE_TPL_GEMM_SM90 && d.block_m == 64 && d.block_n == 64 && d.stages == 12,
          "small sm90 default %dx%d s%d (most CTAs)", d.block_m, d.block_n, d.stages);
    d = fuse_config_default(FUSE_TPL_GEMM_SM90, 2048, 2304, 768, 132, 150 * 1024);
    CHECK(d.tpl == FUSE_TPL_GEMM_SM90 && d.block_m == 128 && d.block_n == 128,
          "sm90 default without room for 12 stages %dx%d", d.block_m, d.block_n);
    fuse_config deep = d;
    deep.stages = 13;
    CHECK_STATUS(fuse_config_check(&deep), STOF_ERR_INVALID_ARG);
    CHECK(message_has("stages 13 is not in [2, 12]"), "message: %s", stof_last_error());
    d = fuse_config_default(FUSE_TPL_GEMM_SM90, 16384, 3072, 768, 132, 150 * 1024);
    CHECK(d.tpl == FUSE_TPL_GEMM_SM90 && d.block_n == 128,
          "sm90 default under 150 KiB of smem %dx%d", d.block_m, d.block_n);
    d = fuse_config_default(FUSE_TPL_GEMM_SM90, 128, 768, 768, 132, 48 * 1024);
    CHECK(d.tpl == FUSE_TPL_NONE, "an sm90 config in 48 KiB of smem");
    d = fuse_config_default(FUSE_TPL_GEMM_BIAS_ACT, 16384, 3072, 768, 132, H100_SMEM);
    CHECK(d.tpl == FUSE_TPL_GEMM_BIAS_ACT, "the gemm_bias_act default became %s",
          fuse_tpl_name(d.tpl));
    d = fuse_config_default(FUSE_TPL_NONE, 16384, 3072, 768, 132, H100_SMEM);
    CHECK(d.tpl == FUSE_TPL_NONE, "tpl NONE picked %s", fuse_tpl_name(d.tpl));
}

/* Fake device addresses: 16-byte aligned, never dereferenced. */
#define P(addr) ((void *)(uintptr_t)(addr))

static fuse_linear_args linear_args(void)
{
    fuse_linear_args a;
    memset(&a, 0, sizeof a);
    a.dtype = STOF_F16;
    a.m = 128;
    a.n = 768;
    a.k = 768;
    a.x = P(0x1000000);
    a.w = P(0x2000000);
    a.bias = P(0x3000000);
    a.residual = P(0x4000000);
    a.gamma = P(0x5000000);
    a.beta = P(0x6000000);
    a.eps = 1e-12f;
    a.y = P(0x7000000);
    return a;
}

static fuse_ffn_args ffn_args(void)
{
    fuse_ffn_args f;
    memset(&f, 0, sizeof f);
    f.dtype = STOF_BF16;
    f.m = 128;
    f.hidden = 768;
    f.inter = 3072;
    f.x = P(0x1000000);
    f.w1 = P(0x2000000);
    f.b1 = P(0x3000000);
    f.w2 = P(0x8000000);
    f.b2 = P(0x9000000);
    f.act = ACT_GELU;
    f.residual = P(0x1000000);
    f.gamma = P(0x5000000);
    f.beta = P(0x6000000);
    f.eps = 1e-12f;
    f.y = P(0x1000000);
    f.inter_buf = P(0x10000000);
    return f;
}

static void test_argument_checks(void)
{
    stof_ctx fake;
    memset(&fake, 0, sizeof fake);
    fake.device = STOF_DEVICE_GPU;
    fake.sm_count = 132;
    fake.smem_per_block_optin = H100_SMEM;
    snprintf(fake.device_name, sizeof fake.device_name, "claimed GPU");
    stof_ctx *ctx = &fake;
    fuse_choice lt = {FUSE_PATH_CUBLASLT, {FUSE_TPL_NONE, 0, 0, 0, 0, 0, 0}, 0, 0};
    fuse_choice st = {FUSE_PATH_STOF, {FUSE_TPL_NONE, 0, 0, 0, 0, 0, 0}, 0, 0};
    fuse_ws ws = {NULL, 0};
    fuse_linear_args a;

    /* contexts */
    a = linear_args();
    CHECK_STATUS(fuse_linear_act(NULL, &lt, &a, ws), STOF_ERR_INVALID_ARG);
    stof_ctx_params cp = stof_ctx_default_params();
    cp.device = STOF_DEVICE_CPU;
    stof_ctx *cpu = NULL;
    CHECK_OK(stof_ctx_create(&cp, &cpu));
    CHECK_STATUS(fuse_linear_act(cpu, &lt, &a, ws), STOF_ERR_INVALID_ARG);
    CHECK(message_has("CPU"), "message: %s", stof_last_error());
    CHECK_STATUS(fuse_bias_act(cpu, STOF_F16, 4, 8, a.x, NULL, ACT_RELU, a.y),
                 STOF_ERR_INVALID_ARG);
    stof_ctx_destroy(cpu);

    /* linear + act */
    CHECK_STATUS(fuse_linear_act(ctx, NULL, &a, ws), STOF_ERR_INVALID_ARG);
    fuse_choice badpath = {(fuse_path)7, {FUSE_TPL_NONE, 0, 0, 0, 0, 0, 0}, 0, 0};
    CHECK_STATUS(fuse_linear_act(ctx, &badpath, &a, ws), STOF_ERR_INVALID_ARG);
    CHECK_STATUS(fuse_linear_act(ctx, &lt, NULL, ws), STOF_ERR_INVALID_ARG);
    a = linear_args();
    a.dtype = STOF_F32;
    CHECK_STATUS(fuse_linear_act(ctx, &st, &a, ws), STOF_ERR_INVALID_ARG);
    CHECK(message_has("f32"), "message: %s", stof_last_error());
    a = linear_args();
    a.x = P(0x1000002);
    CHECK_STATUS(fuse_linear_act(ctx, &lt, &a, ws), STOF_ERR_INVALID_ARG);
    CHECK(message_has("16-byte aligned"), "message: %s", stof_last_error());
    a = linear_args();
    a.w = NULL;
    CHECK_STATUS(fuse_linear_act(ctx, &st, &a, ws), STOF_ERR_INVALID_ARG);
    a = linear_args();
    a.n = 12;
    CHECK_STATUS(fuse_linear_act(ctx, &st, &a, ws), STOF_ERR_SHAPE);
    CHECK(message_has("n = 12"), "message: %s", stof_last_error());
    a = linear_args();
    a.k = 0;
    CHECK_STATUS(fuse_linear_act(ctx, &lt, &a, ws), STOF_ERR_SHAPE);
    a = linear_args();
    a.m = 0;
    CHECK_STATUS(fuse_linear_act(ctx, &st, &a, ws), STOF_ERR_SHAPE);
    a = linear_args();
    a.act = (stof_act)7;
    CHECK_STATUS(fuse_linear_act(ctx, &lt, &a, ws), STOF_ERR_INVALID_ARG);
    CHECK(message_has("activation 7"), "message: %s", stof_last_error());
    a = linear_args();
    a.y = P(0x1000000 + 128 * 768); /* inside x */
    CHECK_STATUS(fuse_linear_act(ctx, &st, &a, ws), STOF_ERR_INVALID_ARG);
    CHECK(message_has("overlaps x"), "message: %s", stof_last_error());
    a = linear_args();
    fuse_choice wrong_tpl = {FUSE_PATH_STOF, fuse_config_list(FUSE_TPL_GEMM_RES_LN, NULL)[0], 0, 0};
    CHECK_STATUS(fuse_linear_act(ctx, &wrong_tpl, &a, ws), STOF_ERR_INVALID_ARG);
    CHECK(message_has("does not run this segment"), "message: %s", stof_last_error());
    fuse_choice uncompiled = {FUSE_PATH_STOF, fuse_config_list(FUSE_TPL_GEMM_BIAS_ACT, NULL)[0], 0,
                              0};
    uncompiled.config.stages = 7;
    CHECK_STATUS(fuse_linear_act(ctx, &uncompiled, &a, ws), STOF_ERR_INVALID_ARG);

    /* the GLU and residual epilogues */
    a = linear_args();
    a.glu = true;
    CHECK_STATUS(fuse_linear_act(ctx, &lt, &a, ws), STOF_ERR_INVALID_ARG);
    CHECK(message_has("no GLU epilogue"), "message: %s", stof_last_error());
    a.residual = NULL;
    a.n = 776; /* not whole pairs of GLU blocks */
    CHECK_STATUS(fuse_linear_act(ctx, &st, &a, ws), STOF_ERR_INVALID_ARG);
    CHECK(message_has("multiple of 16"), "message: %s", stof_last_error());
    a.n = 768;
    a.residual = P(0x4000000); /* a GLU takes no residual */
    CHECK_STATUS(fuse_linear_act(ctx, &st, &a, ws), STOF_ERR_INVALID_ARG);
    a = linear_args();
    a.act = ACT_GELU; /* a residual goes with act none */
    CHECK_STATUS(fuse_linear_act(ctx, &st, &a, ws), STOF_ERR_INVALID_ARG);
    CHECK(message_has("act none"), "message: %s", stof_last_error());
    a = linear_args();
    a.residual = P(0x7000000 + 256); /* partly over y */
    CHECK_STATUS(fuse_linear_act(ctx, &lt, &a, ws), STOF_ERR_INVALID_ARG);
    CHECK(message_has("partly overlaps residual"), "message: %s", stof_last_error());
    fuse_choice cut = lt;
    cut.splits = 2; /* linear + act segments run uncut */
    a = linear_args();
    CHECK_STATUS(fuse_linear_act(ctx, &cut, &a, ws), STOF_ERR_INVALID_ARG);
    CHECK(message_has("uncut"), "message: %s", stof_last_error());

    /* gemm_sm90: unavailable on this claimed GPU (cc 0.0), refused before any
     * CUDA call; misused with the other segments, refused by template */
    fuse_choice hopper = {FUSE_PATH_STOF, fuse_config_list(FUSE_TPL_GEMM_SM90, NULL)[0], 0, 0};
    CHECK(!fuse_sm90_available(ctx), "a cc 0.0 context claims sm90");
    a = linear_args();
    CHECK_STATUS(fuse_linear_act(ctx, &hopper, &a, ws), STOF_ERR_UNSUPPORTED);
    CHECK(message_has("compute capability 9.0"), "message: %s", stof_last_error());
    CHECK_STATUS(fuse_run_gemm_sm90(ctx, NULL, &a), STOF_ERR_UNSUPPORTED);
    a.n = 12; /* argument errors come first */
    CHECK_STATUS(fuse_linear_act(ctx, &hopper, &a, ws), STOF_ERR_SHAPE);
    a = linear_args();
    CHECK_STATUS(fuse_linear_res_ln(ctx, &hopper, &a, ws), STOF_ERR_UNSUPPORTED);
    CHECK(message_has("compute capability 9.0"), "message: %s", stof_last_error());
    fuse_ffn_args hf = ffn_args();
    CHECK_STATUS(fuse_ffn(ctx, &hopper, &hf, ws), STOF_ERR_INVALID_ARG);
    CHECK(message_has("gemm_sm90 does not run this segment"), "message: %s", stof_last_error());
    stof_ctx ampere = fake, hopper_cpu = fake, hopper_gpu = fake;
    ampere.cc_major = 8;
    CHECK(!fuse_sm90_available(&ampere), "cc 8.0 claims sm90");
    CHECK_STATUS(fuse_linear_act(&ampere, &hopper, &a, ws), STOF_ERR_UNSUPPORTED);
    hopper_cpu.device = STOF_DEVICE_CPU;
    hopper_cpu.cc_major = 9;
    CHECK(!fuse_sm90_available(&hopper_cpu), "a CPU context claims sm90");
    hopper_gpu.cc_major = 9;
#ifdef STOF_HAVE_FUSE_SM90
    CHECK(fuse_sm90_available(&hopper_gpu), "cc 9.0 with sm_90a kernels built is not available");
#else
    CHECK(!fuse_sm90_available(&hopper_gpu), "cc 9.0 without sm_90a kernels claims sm90");
#endif
    hopper_gpu.cc_minor = 1; /* not a Hopper part sm_90a code runs on */
    CHECK(!fuse_sm90_available(&hopper_gpu), "cc 9.1 claims sm90");
    hopper_gpu.cc_major = 10;
    hopper_gpu.cc_minor = 0;
    CHECK(!fuse_sm90_available(&hopper_gpu),
          "cc 10.0 claims sm90 (sm_90a code does not run there)");
    CHECK(!fuse_sm90_available(NULL), "NULL ctx claims sm90");

    /* cuBLASLt specifics */
    a = linear_args();
    CHECK_STATUS(fuse_lt_gemm(ctx, &a, ACT_GELU, NULL, ws), STOF_ERR_UNSUPPORTED);
    CHECK(message_has("tanh"), "message: %s", stof_last_error());
    CHECK_STATUS(fuse_lt_gemm(ctx, &a, ACT_RELU, a.residual, ws), STOF_ERR_INVALID_ARG);
    a.glu = true;
    CHECK_STATUS(fuse_lt_gemm(ctx, &a, ACT_NONE, NULL, ws), STOF_ERR_INVALID_ARG);
    CHECK(message_has("GLU"), "message: %s", stof_last_error());
    a.glu = false;
    fuse_ws odd_ws = {P(0x20000010), 1 << 20};
    CHECK_STATUS(fuse_lt_gemm(ctx, &a, ACT_NONE, NULL, odd_ws), STOF_ERR_INVALID_ARG);
    CHECK(message_has("256-byte"), "message: %s", stof_last_error());

    /* linear + residual + LayerNorm */
    a = linear_args();
    a.residual = NULL;
    CHECK_STATUS(fuse_linear_res_ln(ctx, &st, &a, ws), STOF_ERR_INVALID_ARG);
    CHECK(message_has("residual is NULL"), "message: %s", stof_last_error());
    a = linear_args();
    a.eps = 0.f;
    CHECK_STATUS(fuse_linear_res_ln(ctx, &lt, &a, ws), STOF_ERR_INVALID_ARG);
    CHECK(message_has("eps"), "message: %s", stof_last_error());
    a = linear_args();
    a.n = 8200;
    CHECK_STATUS(fuse_linear_res_ln(ctx, &lt, &a, ws), STOF_ERR_SHAPE);
    a = linear_args();
    a.residual = P(0x7000000 + 256); /* partly over y */
    CHECK_STATUS(fuse_linear_res_ln(ctx, &st, &a, ws), STOF_ERR_INVALID_ARG);
    CHECK(message_has("partly overlaps residual"), "message: %s", stof_last_error());
    a = linear_args();
    a.gamma = NULL;
    CHECK_STATUS(fuse_run_gemm_res_ln(ctx, NULL, &a), STOF_ERR_INVALID_ARG);

    /* K split into partial sums: slice counts, slice widths, workspace */
    a = linear_args();
    fuse_choice split = lt;
    split.splits = FUSE_LT_MAX_SPLITS + 1;
    CHECK_STATUS(fuse_linear_res_ln(ctx, &split, &a, ws), STOF_ERR_INVALID_ARG);
    CHECK(message_has("splits 9"), "message: %s", stof_last_error());
    split.splits = -1;
    CHECK_STATUS(fuse_linear_act(ctx, &split, &a, ws), STOF_ERR_INVALID_ARG);
    split.splits = 4; /* 128 x 768 fp32, four times: 1.5 MiB */
    CHECK_STATUS(fuse_linear_res_ln(ctx, &split, &a, ws), STOF_ERR_INVALID_ARG);
    CHECK(message_has("workspace"), "message: %s", stof_last_error());
    fuse_ws small_ws = {P(0x20000000), 1 << 20};
    CHECK_STATUS(fuse_linear_res_ln(ctx, &split, &a, small_ws), STOF_ERR_INVALID_ARG);
    CHECK(message_has("1572864 bytes of workspace"), "message: %s", stof_last_error());
    fuse_ws big_ws = {P(0x20000000), 4 << 20};
    split.splits = 5; /* 768 is no multiple of 40 */
    CHECK_STATUS(fuse_linear_res_ln(ctx, &split, &a, big_ws), STOF_ERR_INVALID_ARG);
    CHECK(message_has("k = 768"), "message: %s", stof_last_error());
    float *parts = P(0x30000000);
    CHECK_STATUS(fuse_lt_gemm_parts(ctx, &a, 0, parts, big_ws), STOF_ERR_INVALID_ARG);
    CHECK_STATUS(fuse_lt_gemm_parts(ctx, &a, 4, P(0x20000100), big_ws), STOF_ERR_INVALID_ARG);
    CHECK(message_has("overlaps"), "message: %s", stof_last_error());
    CHECK_STATUS(fuse_lt_gemm_parts(ctx, &a, 4, P(0x30000004), big_ws), STOF_ERR_INVALID_ARG);
    CHECK(message_has("16-byte aligned"), "message: %s", stof_last_error());

    /* FFN */
    fuse_ffn_args f = ffn_args();
    f.beta = NULL;
    CHECK_STATUS(fuse_ffn(ctx, &st, &f, ws), STOF_ERR_INVALID_ARG);
    CHECK(message_has("gamma and beta"), "message: %s", stof_last_error());
    f = ffn_args();
    f.inter_buf = NULL;
    CHECK_STATUS(fuse_ffn(ctx, &lt, &f, ws), STOF_ERR_INVALID_ARG);
    CHECK(message_has("inter_buf"), "message: %s", stof_last_error());
    f = ffn_args();
    f.inter_buf = P(0x1000000 + 4096); /* inside x */
    CHECK_STATUS(fuse_ffn(ctx, &lt, &f, ws), STOF_ERR_INVALID_ARG);
    f = ffn_args();
    f.hidden = 512;
    f.inter = 2048;
    CHECK_STATUS(fuse_ffn(ctx, &st, &f, ws), STOF_ERR_UNSUPPORTED);
    f = ffn_args();
    f.inter = 3000;
    CHECK_STATUS(fuse_run_ffn_chain(ctx, NULL, &f), STOF_ERR_UNSUPPORTED);
    f = ffn_args();
    f.y = P(0x1000000 + 64); /* partly over x */
    CHECK_STATUS(fuse_ffn(ctx, &st, &f, ws), STOF_ERR_INVALID_ARG);
    f = ffn_args();
    f.w2 = P(0x1000000 + 1024); /* a weight under y */
    CHECK_STATUS(fuse_ffn(ctx, &st, &f, ws), STOF_ERR_INVALID_ARG);

    /* row kernels */
    void *x = P(0x1000000), *y = P(0x7000000), *g = P(0x5000000), *b = P(0x6000000);
    CHECK_STATUS(fuse_bias_act(ctx, STOF_F32, 4, 8, x, NULL, ACT_RELU, y), STOF_ERR_INVALID_ARG);
    CHECK_STATUS(fuse_bias_act(ctx, STOF_F16, 4, 12, x, NULL, ACT_RELU, y), STOF_ERR_SHAPE);
    CHECK_STATUS(fuse_bias_act(ctx, STOF_F16, 4, 8, x, NULL, ACT_RELU, P(0x1000010)),
                 STOF_ERR_INVALID_ARG);
    CHECK_STATUS(fuse_add_layernorm(ctx, STOF_F16, 4, 8200, x, NULL, g, b, 1e-5f, y),
                 STOF_ERR_SHAPE);
    CHECK_STATUS(fuse_add_layernorm(ctx, STOF_F16, 4, 768, x, NULL, NULL, b, 1e-5f, y),
                 STOF_ERR_INVALID_ARG);
    CHECK_STATUS(fuse_add_layernorm(ctx, STOF_F16, 4, 768, x, NULL, g, b, -1.f, y),
                 STOF_ERR_INVALID_ARG);
    CHECK_STATUS(
        fuse_bias_residual_layernorm(ctx, STOF_BF16, 4, 768, x, b, P(0x7000010), g, b, 1e-5f, y),
        STOF_ERR_INVALID_ARG);
    int32_t *cu = P(0xa000000);
    CHECK_STATUS(fuse_cu_seqlens(ctx, P(0xb000000), 0, 128, cu), STOF_ERR_SHAPE);
    CHECK_STATUS(fuse_cu_seqlens(ctx, P(0xb000002), 4, 128, cu), STOF_ERR_INVALID_ARG);
    CHECK_STATUS(fuse_pack(ctx, STOF_U8, x, cu, 4, 128, 768, y, 512), STOF_ERR_INVALID_ARG);
    CHECK_STATUS(fuse_pack(ctx, STOF_F16, x, cu, 4, 128, 768, y, 513), STOF_ERR_SHAPE);
    CHECK(message_has("packed_cap 513"), "message: %s", stof_last_error());
    CHECK_STATUS(fuse_pack(ctx, STOF_F16, P(0x1000004), cu, 4, 128, 768, y, 512),
                 STOF_ERR_INVALID_ARG);
    CHECK_STATUS(fuse_unpack(ctx, STOF_F16, x, cu, 4, 128, 768, P(0x1000000 + 1024), 512),
                 STOF_ERR_INVALID_ARG);
    CHECK_STATUS(fuse_packed_positions(ctx, cu, 4, 0, P(0xb000000), 512), STOF_ERR_SHAPE);
    fuse_embed_tables t;
    memset(&t, 0, sizeof t);
    t.word = P(0x11000000);
    t.position = P(0x12000000);
    t.type = P(0x13000000);
    t.gamma = g;
    t.beta = b;
    t.vocab = 30522;
    t.max_pos = 512;
    t.type_vocab = 2;
    t.hidden = 768;
    t.eps = 1e-12f;
    int32_t *ids = P(0xb000000);
    CHECK_STATUS(fuse_embeddings(ctx, STOF_F16, NULL, ids, ids, NULL, 4, y), STOF_ERR_INVALID_ARG);
    t.vocab = 0;
    CHECK_STATUS(fuse_embeddings(ctx, STOF_F16, &t, ids, ids, NULL, 4, y), STOF_ERR_SHAPE);
    t.vocab = 30522;
    t.hidden = 8200;
    CHECK_STATUS(fuse_embeddings(ctx, STOF_F16, &t, ids, ids, NULL, 4, y), STOF_ERR_SHAPE);
    t.hidden = 768;
    CHECK_STATUS(fuse_embeddings(ctx, STOF_F16, &t, NULL, ids, NULL, 4, y), STOF_ERR_INVALID_ARG);
    CHECK_STATUS(fuse_mean_pool(ctx, STOF_BF16, x, cu, 4, 768, 512, STOF_F16, y),
                 STOF_ERR_INVALID_ARG);
    CHECK(message_has("neither f32"), "message: %s", stof_last_error());
    CHECK_STATUS(fuse_mean_pool(ctx, STOF_F16, x, cu, 70000, 768, 512, STOF_F32, y),
                 STOF_ERR_SHAPE);
    CHECK_STATUS(fuse_mean_pool(ctx, STOF_F16, x, cu, 4, 100, 512, STOF_F32, y), STOF_ERR_SHAPE);
}

/* The K-split rule: four slices to 256 rows, two to 512 where k >= 2n, slices
 * of at least 192, partial sums within half the workspace. */
static void test_split_rule(void)
{
    const size_t ws = FUSE_LT_WORKSPACE_BYTES;
    static const struct {
        int64_t m;
        int n, k;
        size_t ws;
        int want;
    } cases[] = {
        {1, 768, 3072, ws, 4},    {128, 768, 3072, ws, 4},       {128, 768, 768, ws, 4},
        {256, 1024, 4096, ws, 4}, {257, 768, 3072, ws, 2},       {512, 768, 3072, ws, 2},
        {300, 768, 768, ws, 1},   {513, 768, 3072, ws, 1},       {4096, 768, 3072, ws, 1},
        {128, 384, 384, ws, 2},   {128, 384, 1536, ws, 4},       {64, 200, 72, ws, 1},
        {128, 768, 600, ws, 3},   {256, 1024, 4096, 4 << 20, 2}, {256, 1024, 4096, 0, 1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int got = fuse_lt_split_rule(cases[i].m, cases[i].n, cases[i].k, cases[i].ws);
        CHECK(got == cases[i].want, "split rule m=%lld n=%d k=%d ws=%zu: %d slices, want %d",
              (long long)cases[i].m, cases[i].n, cases[i].k, cases[i].ws, got, cases[i].want);
    }
}

/* gemm_sm90's small tile: up to 128 rows, one wave, K slices of at most 768 */
static void test_sm90_small_rule(void)
{
    const size_t ws = FUSE_LT_WORKSPACE_BYTES;
    static const struct {
        int64_t m;
        int n, k;
        bool residual;
        int sms;
        size_t ws;
        int want;
    } cases[] = {
        /* BERT-base at 112 rows: QKV, FFN1, out-projection, FFN2 */
        {112, 2304, 768, false, 132, ws, 1},
        {112, 3072, 768, false, 132, ws, 1},
        {112, 768, 768, true, 132, ws, 4},
        {112, 768, 3072, true, 132, ws, 4},
        {129, 3072, 768, false, 132, ws, 0}, /* past 128 rows */
        {0, 3072, 768, false, 132, ws, 0},
        /* BERT-large: K of 1024 unsliced is deeper than the 12 stages */
        {128, 3072, 1024, false, 132, ws, 0},
        {128, 1024, 1024, true, 132, ws, 4},
        {128, 1024, 4096, true, 132, ws, 0},
        /* MiniLM: slices of 96 are no multiple of 64 */
        {128, 384, 384, true, 132, ws, 3},
        {128, 384, 1536, true, 132, ws, 4},
        {128, 1152, 384, false, 132, ws, 1},
        /* 60 SMs: more than one wave */
        {128, 3072, 768, false, 60, ws, 0},
        {128, 768, 768, true, 60, ws, 2},
        /* k that gives no 64-deep slices runs whole; no room for partial sums */
        {128, 768, 600, true, 132, ws, 1},
        {128, 768, 3072, true, 132, 0, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int got = fuse_sm90_small_rule(cases[i].m, cases[i].n, cases[i].k, cases[i].residual,
                                       cases[i].sms, cases[i].ws);
        CHECK(got == cases[i].want, "sm90 small rule m=%lld n=%d k=%d%s sms=%d: %d, want %d",
              (long long)cases[i].m, cases[i].n, cases[i].k, cases[i].residual ? " residual" : "",
              cases[i].sms, got, cases[i].want);
    }
    fuse_config small = fuse_config_sm90_small();
    CHECK_OK(fuse_config_check(&small));
    CHECK(small.block_m == 64 && small.block_n == 64 && small.stages == 12,
          "the small tile is %dx%d s%d", small.block_m, small.block_n, small.stages);
}

/* Which gemm_sm90 tiles carry RoPE in their epilogue (whole heads in a tile,
 * a compiled (head_dim, rot_dim) pair), and the QKV config the plan takes. */
static void test_rope_epi(void)
{
    int count = 0;
    const fuse_config *list = fuse_config_list(FUSE_TPL_GEMM_SM90, &count);
    CHECK(count > 0, "no gemm_sm90 configs listed");
    for (int i = 0; i < count; i++) {
        const fuse_config *c = &list[i];
        char name[64];
        fuse_config_format(c, name, sizeof name);
        /* the two-CTA 128x128 tile (3 stages) has no registers to spare */
        const bool two_ctas = c->block_m == 128 && c->block_n == 128 && c->warps_m == 2;
        CHECK((fuse_rope_epi_fits(c, 32, 32) && fuse_rope_epi_fits(c, 64, 64) &&
               fuse_rope_epi_fits(c, 64, 32)) == !two_ctas,
              "%s: heads of 32 and 64 fit every tile but the two-CTA one", name);
        CHECK(fuse_rope_epi_fits(c, 128, 128) == (!two_ctas && c->block_n % 128 == 0) &&
                  fuse_rope_epi_fits(c, 128, 64) == (!two_ctas && c->block_n % 128 == 0),
              "%s: heads of 128 fit where block_n is a multiple of 128", name);
        CHECK(!fuse_rope_epi_fits(c, 64, 48) && !fuse_rope_epi_fits(c, 96, 96) &&
                  !fuse_rope_epi_fits(c, 64, 8) && !fuse_rope_epi_fits(c, 0, 0),
              "%s: a (head_dim, rot_dim) that is not compiled fits", name);
    }
    int nb = 0;
    const fuse_config *bias_act = fuse_config_list(FUSE_TPL_GEMM_BIAS_ACT, &nb);
    CHECK(nb > 0 && !fuse_rope_epi_fits(&bias_act[0], 64, 64), "gemm_bias_act carries RoPE");
    CHECK(!fuse_rope_epi_fits(NULL, 64, 64), "a NULL config carries RoPE");
    /* ModernBERT-base's QKV at 23923 rows, LLaMA-3.2-1B's at 4096 */
    fuse_config c = fuse_config_sm90_rope(23923, 2304, 768, 64, 64, 132, H100_SMEM);
    fuse_config def = fuse_config_default(FUSE_TPL_GEMM_SM90, 23923, 2304, 768, 132, H100_SMEM);
    CHECK(fuse_config_equal(&c, &def), "ModernBERT's QKV: the default rule's tile carries RoPE");
    c = fuse_config_sm90_rope(4096, 3072, 2048, 64, 64, 132, H100_SMEM);
    CHECK(fuse_rope_epi_fits(&c, 64, 64), "LLaMA-1B's QKV: no config");
    /* few rows: the default's 64 columns split a head of 128, so another tile */
    c = fuse_config_sm90_rope(100, 768, 512, 128, 128, 132, H100_SMEM);
    def = fuse_config_default(FUSE_TPL_GEMM_SM90, 100, 768, 512, 132, H100_SMEM);
    CHECK(def.block_n == 64 && c.tpl == FUSE_TPL_GEMM_SM90 && c.block_n % 128 == 0,
          "heads of 128 at 100 rows: default %dx%d, rope config %dx%d", def.block_m, def.block_n,
          c.block_m, c.block_n);
    c = fuse_config_sm90_rope(100, 768, 512, 96, 96, 132, H100_SMEM);
    CHECK(c.tpl == FUSE_TPL_NONE, "heads of 96: a config %dx%d", c.block_m, c.block_n);
}

int main(void)
{
    test_tables();
    test_split_rule();
    test_sm90_small_rule();
    test_validation();
    test_smem_and_shapes();
    test_default_rule();
    test_argument_checks();
    test_rope_epi();
    return test_finish("test_fuse_config");
}
