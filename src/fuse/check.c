/*
 * check.c — argument checks shared by the fuse entry points. Each names the
 * calling operation and the offending value, so a bad call says what to fix.
 */
#include "fuse/internal.h"

#include <math.h>

stof_status fuse_check_ctx(const stof_ctx *ctx, const char *what)
{
    STOF_REQUIRE(ctx, STOF_ERR_INVALID_ARG, "%s: ctx is NULL", what);
    STOF_REQUIRE(ctx->device == STOF_DEVICE_GPU, STOF_ERR_INVALID_ARG,
                 "%s: the context runs on the CPU; this operator needs a GPU context", what);
    return STOF_OK;
}

stof_status fuse_check_dtype(stof_dtype dtype, const char *what)
{
    STOF_REQUIRE(dtype == STOF_F16 || dtype == STOF_BF16, STOF_ERR_INVALID_ARG,
                 "%s: dtype %s (%d) is not f16 or bf16", what, stof_dtype_name(dtype), (int)dtype);
    return STOF_OK;
}

stof_status fuse_check_ptr(const void *p, const char *name, const char *what)
{
    STOF_REQUIRE(p, STOF_ERR_INVALID_ARG, "%s: %s is NULL", what, name);
    return fuse_check_opt_ptr(p, name, what);
}

stof_status fuse_check_opt_ptr(const void *p, const char *name, const char *what)
{
    STOF_REQUIRE((uintptr_t)p % 16 == 0, STOF_ERR_INVALID_ARG, "%s: %s = %p is not 16-byte aligned",
                 what, name, p);
    return STOF_OK;
}

stof_status fuse_check_width(int64_t n, int64_t max, const char *name, const char *what)
{
    STOF_REQUIRE(n >= 8 && n <= max && n % 8 == 0, STOF_ERR_SHAPE,
                 "%s: %s = %lld is not a multiple of 8 in [8, %lld]", what, name, (long long)n,
                 (long long)max);
    return STOF_OK;
}

stof_status fuse_check_rows(int64_t m, const char *name, const char *what)
{
    STOF_REQUIRE(m >= 1 && m <= ((int64_t)1 << 30), STOF_ERR_SHAPE,
                 "%s: %s = %lld rows (1 to 2^30)", what, name, (long long)m);
    return STOF_OK;
}

stof_status fuse_check_act(stof_act act, const char *what)
{
    STOF_REQUIRE(act == ACT_NONE || act == ACT_GELU || act == ACT_GELU_TANH ||
                     act == ACT_RELU || act == ACT_SILU,
                 STOF_ERR_INVALID_ARG, "%s: unknown activation %d", what, (int)act);
    return STOF_OK;
}

stof_status fuse_check_eps(float eps, const char *what)
{
    STOF_REQUIRE(isfinite(eps) && eps > 0.f, STOF_ERR_INVALID_ARG,
                 "%s: LayerNorm eps %g is not a positive finite number", what, (double)eps);
    return STOF_OK;
}

bool fuse_overlap(const void *a, size_t a_bytes, const void *b, size_t b_bytes)
{
    if (!a || !b) return false;
    uintptr_t x = (uintptr_t)a, y = (uintptr_t)b;
    return x < y + b_bytes && y < x + a_bytes;
}

size_t fuse_smem_limit(const stof_ctx *ctx)
{
    return ctx->smem_per_block_optin;
}

stof_status fuse_check_rope_table(const fuse_rope_table *t, int head_dim, const char *what)
{
    STOF_REQUIRE(t, STOF_ERR_INVALID_ARG, "%s: the RoPE table is NULL", what);
    STOF_REQUIRE(t->cs && (uintptr_t)t->cs % 16 == 0, STOF_ERR_INVALID_ARG,
                 "%s: the RoPE table's cs = %p is NULL or not 16-byte aligned", what,
                 (const void *)t->cs);
    STOF_REQUIRE(t->positions >= 1, STOF_ERR_SHAPE, "%s: a RoPE table of %d positions", what,
                 t->positions);
    STOF_REQUIRE(t->rot_dim >= 2 && t->rot_dim % 2 == 0 && t->rot_dim <= head_dim &&
                     t->rot_dim <= 2 * FUSE_ROPE_MAX_HALF,
                 STOF_ERR_SHAPE, "%s: rot_dim %d must be even, in [2, min(head_dim = %d, %d)]",
                 what, t->rot_dim, head_dim, 2 * FUSE_ROPE_MAX_HALF);
    return STOF_OK;
}

stof_status fuse_check_index_ptr(const void *p, const char *name, const char *what)
{
    STOF_REQUIRE(p, STOF_ERR_INVALID_ARG, "%s: %s is NULL", what, name);
    STOF_REQUIRE((uintptr_t)p % 4 == 0, STOF_ERR_INVALID_ARG, "%s: %s = %p is not 4-byte aligned",
                 what, name, p);
    return STOF_OK;
}

stof_status fuse_check_in_place(const void *in, const void *out, size_t bytes,
                                  const char *in_name, const char *what)
{
    STOF_REQUIRE(in == out || !fuse_overlap(in, bytes, out, bytes), STOF_ERR_INVALID_ARG,
                 "%s: the output partly overlaps %s (in-place must be the same pointer)", what,
                 in_name);
    return STOF_OK;
}
