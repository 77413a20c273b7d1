/*
 * rowops.c — argument checks in front of the row kernels of rows.cu. The
 * aliasing rule everywhere: an output may be exactly an input it replaces
 * row for row (in-place), never a partial overlap.
 */
#include "fuse/internal.h"

static stof_status check_batch(int batch, int len, const char *what)
{
    STOF_REQUIRE(batch >= 1 && batch <= 65535, STOF_ERR_SHAPE, "%s: batch %d is not in [1, 65535]",
                 what, batch);
    STOF_REQUIRE(len >= 1 && (int64_t)batch * len <= INT32_MAX, STOF_ERR_SHAPE,
                 "%s: len %d (batch %d) gives no rows or more than 2^31 - 1", what, len, batch);
    return STOF_OK;
}

stof_status fuse_bias_act(stof_ctx *ctx, stof_dtype dtype, int64_t m, int n, const void *x,
                          const void *bias, stof_act act, void *y)
{
    const char *what = "fuse_bias_act";
    STOF_TRY(fuse_check_ctx(ctx, what));
    STOF_TRY(fuse_check_dtype(dtype, what));
    STOF_TRY(fuse_check_rows(m, "m", what));
    STOF_TRY(fuse_check_width(n, INT32_MAX, "n", what));
    STOF_TRY(fuse_check_ptr(x, "x", what));
    STOF_TRY(fuse_check_ptr(y, "y", what));
    STOF_TRY(fuse_check_opt_ptr(bias, "bias", what));
    STOF_TRY(fuse_check_act(act, what));
    STOF_TRY(fuse_check_in_place(x, y, (size_t)m * n * 2, "x", what));
    return fuse_launch_bias_act(ctx, dtype, m, n, x, bias, act, y);
}

static stof_status layernorm_checked(const char *what, stof_ctx *ctx, stof_dtype dtype,
                                     int64_t rows, int cols, const void *x, const void *bias,
                                     const void *residual, const void *gamma, const void *beta,
                                     float eps, void *y)
{
    STOF_TRY(fuse_check_ctx(ctx, what));
    STOF_TRY(fuse_check_dtype(dtype, what));
    STOF_TRY(fuse_check_rows(rows, "rows", what));
    STOF_TRY(fuse_check_width(cols, FUSE_MAX_ROW_WIDTH, "cols", what));
    STOF_TRY(fuse_check_ptr(x, "x", what));
    STOF_TRY(fuse_check_ptr(gamma, "gamma", what));
    STOF_TRY(fuse_check_ptr(beta, "beta", what));
    STOF_TRY(fuse_check_ptr(y, "y", what));
    STOF_TRY(fuse_check_opt_ptr(bias, "bias", what));
    STOF_TRY(fuse_check_opt_ptr(residual, "residual", what));
    STOF_TRY(fuse_check_eps(eps, what));
    size_t bytes = (size_t)rows * cols * 2;
    STOF_TRY(fuse_check_in_place(x, y, bytes, "x", what));
    if (residual) STOF_TRY(fuse_check_in_place(residual, y, bytes, "residual", what));
    return fuse_launch_layernorm(ctx, dtype, rows, cols, x, bias, residual, gamma, beta, eps, y);
}

stof_status fuse_add_layernorm(stof_ctx *ctx, stof_dtype dtype, int64_t rows, int cols,
                               const void *x, const void *residual, const void *gamma,
                               const void *beta, float eps, void *y)
{
    return layernorm_checked("fuse_add_layernorm", ctx, dtype, rows, cols, x, NULL, residual, gamma,
                             beta, eps, y);
}

stof_status fuse_bias_residual_layernorm(stof_ctx *ctx, stof_dtype dtype, int64_t rows, int cols,
                                         const void *x, const void *bias, const void *residual,
                                         const void *gamma, const void *beta, float eps, void *y)
{
    return layernorm_checked("fuse_bias_residual_layernorm", ctx, dtype, rows, cols, x, bias,
                             residual, gamma, beta, eps, y);
}

stof_status fuse_cu_seqlens(stof_ctx *ctx, const int32_t *lengths, int batch, int len,
                            int32_t *cu_seqlens)
{
    const char *what = "fuse_cu_seqlens";
    STOF_TRY(fuse_check_ctx(ctx, what));
    STOF_TRY(check_batch(batch, len, what));
    STOF_TRY(fuse_check_index_ptr(lengths, "lengths", what));
    STOF_TRY(fuse_check_index_ptr(cu_seqlens, "cu_seqlens", what));
    STOF_REQUIRE(!fuse_overlap(lengths, (size_t)batch * 4, cu_seqlens, (size_t)(batch + 1) * 4),
                 STOF_ERR_INVALID_ARG, "%s: cu_seqlens overlaps lengths", what);
    return fuse_launch_cu_seqlens(ctx, lengths, batch, len, cu_seqlens);
}

static stof_status check_pack(const char *what, stof_ctx *ctx, stof_dtype dtype, const void *padded,
                              const int32_t *cu_seqlens, int batch, int len, int width,
                              const void *packed, int64_t packed_cap, int64_t *row_bytes)
{
    STOF_TRY(fuse_check_ctx(ctx, what));
    STOF_REQUIRE(dtype == STOF_F32 || dtype == STOF_F16 || dtype == STOF_BF16 || dtype == STOF_I32,
                 STOF_ERR_INVALID_ARG, "%s: dtype %s is not f32, f16, bf16 or i32", what,
                 stof_dtype_name(dtype));
    STOF_TRY(check_batch(batch, len, what));
    STOF_REQUIRE(width >= 1, STOF_ERR_SHAPE, "%s: width %d is not positive", what, width);
    STOF_REQUIRE(packed_cap >= 0 && packed_cap <= (int64_t)batch * len, STOF_ERR_SHAPE,
                 "%s: packed_cap %lld is not in [0, batch * len = %lld]", what,
                 (long long)packed_cap, (long long)batch * len);
    STOF_TRY(fuse_check_index_ptr(cu_seqlens, "cu_seqlens", what));
    STOF_REQUIRE(padded && packed, STOF_ERR_INVALID_ARG, "%s: %s is NULL", what,
                 padded ? "packed" : "padded");
    int64_t rb = (int64_t)width * (int64_t)stof_dtype_size(dtype);
    /* the kernel moves 16-, 4- or 2-byte words, whichever divides a row */
    int64_t word = rb % 16 == 0 ? 16 : rb % 4 == 0 ? 4 : 2;
    STOF_REQUIRE((uintptr_t)padded % word == 0 && (uintptr_t)packed % word == 0,
                 STOF_ERR_INVALID_ARG, "%s: padded %p or packed %p is not %lld-byte aligned", what,
                 padded, packed, (long long)word);
    STOF_REQUIRE(!fuse_overlap(padded, (size_t)batch * len * rb, packed, (size_t)packed_cap * rb),
                 STOF_ERR_INVALID_ARG, "%s: padded and packed overlap", what);
    *row_bytes = rb;
    return STOF_OK;
}

stof_status fuse_pack(stof_ctx *ctx, stof_dtype dtype, const void *padded,
                      const int32_t *cu_seqlens, int batch, int len, int width, void *packed,
                      int64_t packed_cap)
{
    int64_t rb = 0;
    STOF_TRY(check_pack("fuse_pack", ctx, dtype, padded, cu_seqlens, batch, len, width, packed,
                        packed_cap, &rb));
    return fuse_launch_pack_rows(ctx, padded, cu_seqlens, batch, len, rb, packed, packed_cap,
                                 false);
}

stof_status fuse_unpack(stof_ctx *ctx, stof_dtype dtype, const void *packed,
                        const int32_t *cu_seqlens, int batch, int len, int width, void *padded,
                        int64_t packed_cap)
{
    int64_t rb = 0;
    STOF_TRY(check_pack("fuse_unpack", ctx, dtype, padded, cu_seqlens, batch, len, width, packed,
                        packed_cap, &rb));
    return fuse_launch_pack_rows(ctx, packed, cu_seqlens, batch, len, rb, padded, packed_cap, true);
}

stof_status fuse_packed_positions(stof_ctx *ctx, const int32_t *cu_seqlens, int batch, int len,
                                  int32_t *positions, int64_t packed_cap)
{
    const char *what = "fuse_packed_positions";
    STOF_TRY(fuse_check_ctx(ctx, what));
    STOF_TRY(check_batch(batch, len, what));
    STOF_TRY(fuse_check_index_ptr(cu_seqlens, "cu_seqlens", what));
    STOF_TRY(fuse_check_index_ptr(positions, "positions", what));
    STOF_REQUIRE(packed_cap >= 0, STOF_ERR_SHAPE, "%s: packed_cap %lld is negative", what,
                 (long long)packed_cap);
    return fuse_launch_positions(ctx, cu_seqlens, batch, len, positions, packed_cap);
}

stof_status fuse_embeddings(stof_ctx *ctx, stof_dtype dtype, const fuse_embed_tables *t,
                            const int32_t *ids, const int32_t *positions, const int32_t *types,
                            int64_t tokens, void *out)
{
    const char *what = "fuse_embeddings";
    STOF_TRY(fuse_check_ctx(ctx, what));
    STOF_TRY(fuse_check_dtype(dtype, what));
    STOF_REQUIRE(t, STOF_ERR_INVALID_ARG, "%s: tables is NULL", what);
    STOF_TRY(fuse_check_width(t->hidden, FUSE_MAX_ROW_WIDTH, "hidden", what));
    STOF_REQUIRE(t->vocab >= 1 && t->max_pos >= 1 && t->type_vocab >= 1, STOF_ERR_SHAPE,
                 "%s: table sizes vocab %d, max_pos %d, type_vocab %d must be positive", what,
                 t->vocab, t->max_pos, t->type_vocab);
    STOF_TRY(fuse_check_ptr(t->word, "word table", what));
    STOF_TRY(fuse_check_ptr(t->position, "position table", what));
    STOF_TRY(fuse_check_ptr(t->type, "token type table", what));
    STOF_TRY(fuse_check_ptr(t->gamma, "gamma", what));
    STOF_TRY(fuse_check_ptr(t->beta, "beta", what));
    STOF_TRY(fuse_check_eps(t->eps, what));
    STOF_TRY(fuse_check_rows(tokens, "tokens", what));
    STOF_TRY(fuse_check_index_ptr(ids, "ids", what));
    STOF_TRY(fuse_check_index_ptr(positions, "positions", what));
    if (types) STOF_TRY(fuse_check_index_ptr(types, "types", what));
    STOF_TRY(fuse_check_ptr(out, "out", what));
    return fuse_launch_embeddings(ctx, dtype, t, ids, positions, types, tokens, out);
}

stof_status fuse_mean_pool(stof_ctx *ctx, stof_dtype in_dtype, const void *packed,
                           const int32_t *cu_seqlens, int batch, int width, int64_t packed_cap,
                           stof_dtype out_dtype, void *out)
{
    const char *what = "fuse_mean_pool";
    STOF_TRY(fuse_check_ctx(ctx, what));
    STOF_TRY(fuse_check_dtype(in_dtype, what));
    STOF_REQUIRE(out_dtype == STOF_F32 || out_dtype == in_dtype, STOF_ERR_INVALID_ARG,
                 "%s: out dtype %s is neither f32 nor the input's %s", what,
                 stof_dtype_name(out_dtype), stof_dtype_name(in_dtype));
    STOF_REQUIRE(batch >= 1 && batch <= 65535, STOF_ERR_SHAPE, "%s: batch %d is not in [1, 65535]",
                 what, batch);
    STOF_TRY(fuse_check_width(width, INT32_MAX, "width", what));
    STOF_REQUIRE(packed_cap >= 0, STOF_ERR_SHAPE, "%s: packed_cap %lld is negative", what,
                 (long long)packed_cap);
    STOF_TRY(fuse_check_ptr(packed, "packed", what));
    STOF_TRY(fuse_check_index_ptr(cu_seqlens, "cu_seqlens", what));
    STOF_TRY(fuse_check_ptr(out, "out", what));
    return fuse_launch_mean_pool(ctx, in_dtype, packed, cu_seqlens, batch, width, packed_cap,
                                 out_dtype, out);
}
