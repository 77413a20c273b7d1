/*
 * decoder_ops_gpu.c — argument checks in front of the kernels of norms.cu and
 * decoder_rows.cu (the ops the decoder families and ModernBERT add). The
 * aliasing rule of rowops.c holds: an output may be exactly an input it
 * replaces row for row, never a partial overlap.
 */
#include "fuse/internal.h"

#include <cuda_runtime_api.h>

stof_status fuse_norm(stof_ctx *ctx, stof_dtype dtype, fuse_norm_kind kind, int64_t rows, int cols,
                      const void *x, const void *residual, const void *gamma, const void *beta,
                      float eps, void *y, void *sum_out)
{
    const char *what = "fuse_norm";
    STOF_TRY(fuse_check_ctx(ctx, what));
    STOF_TRY(fuse_check_dtype(dtype, what));
    STOF_REQUIRE(kind == FUSE_NORM_LAYER || kind == FUSE_NORM_RMS, STOF_ERR_INVALID_ARG,
                 "%s: unknown norm kind %d", what, (int)kind);
    STOF_REQUIRE(kind != FUSE_NORM_RMS || !beta, STOF_ERR_INVALID_ARG,
                 "%s: RMSNorm takes no beta", what);
    STOF_TRY(fuse_check_rows(rows, "rows", what));
    STOF_TRY(fuse_check_width(cols, FUSE_MAX_ROW_WIDTH, "cols", what));
    STOF_TRY(fuse_check_ptr(x, "x", what));
    STOF_TRY(fuse_check_ptr(y, "y", what));
    STOF_TRY(fuse_check_opt_ptr(residual, "residual", what));
    STOF_TRY(fuse_check_opt_ptr(gamma, "gamma", what));
    STOF_TRY(fuse_check_opt_ptr(beta, "beta", what));
    STOF_TRY(fuse_check_opt_ptr(sum_out, "sum_out", what));
    STOF_TRY(fuse_check_eps(eps, what));
    size_t bytes = (size_t)rows * cols * 2;
    const void *outs[2] = {y, sum_out};
    for (int i = 0; i < 2 && outs[i]; i++) {
        STOF_TRY(fuse_check_in_place(x, outs[i], bytes, "x", what));
        if (residual) STOF_TRY(fuse_check_in_place(residual, outs[i], bytes, "residual", what));
    }
    STOF_REQUIRE(!sum_out || !fuse_overlap(y, bytes, sum_out, bytes), STOF_ERR_INVALID_ARG,
                 "%s: y and sum_out overlap", what);
    return fuse_launch_norm(ctx, dtype, kind, rows, cols, x, residual, gamma, beta, eps, y,
                            sum_out);
}

size_t fuse_rope_table_bytes(int positions, int rot_dim)
{
    if (positions < 1 || positions == INT32_MAX || rot_dim < 2 || rot_dim % 2 != 0 ||
        rot_dim > 2 * FUSE_ROPE_MAX_HALF)
        return 0;
    return (size_t)(positions + 1) * (size_t)(rot_dim / 2) * 2 * sizeof(float);
}

stof_status fuse_rope_table_build(stof_ctx *ctx, const float *inv_freq_host, int rot_dim,
                                  int positions, float *cs, fuse_rope_table *out)
{
    const char *what = "fuse_rope_table_build";
    STOF_TRY(fuse_check_ctx(ctx, what));
    STOF_REQUIRE(inv_freq_host && out, STOF_ERR_INVALID_ARG, "%s: inv_freq_host or out is NULL",
                 what);
    STOF_REQUIRE(fuse_rope_table_bytes(positions, rot_dim) > 0, STOF_ERR_SHAPE,
                 "%s: %d positions of rot_dim %d (positions in [1, 2^31 - 2], rot_dim even in "
                 "[2, %d])",
                 what, positions, rot_dim, 2 * FUSE_ROPE_MAX_HALF);
    *out = (fuse_rope_table){cs, positions, rot_dim};
    STOF_TRY(fuse_check_rope_table(out, rot_dim, what));
    return fuse_launch_rope_table(ctx, inv_freq_host, rot_dim, positions, cs);
}

stof_status fuse_rope(stof_ctx *ctx, stof_dtype dtype, void *x, int64_t tokens, int heads,
                      int head_dim, int64_t row_stride, const int32_t *positions,
                      const fuse_rope_table *table)
{
    const char *what = "fuse_rope";
    STOF_TRY(fuse_check_ctx(ctx, what));
    STOF_TRY(fuse_check_dtype(dtype, what));
    STOF_REQUIRE(tokens >= 0, STOF_ERR_SHAPE, "%s: tokens %lld is negative", what,
                 (long long)tokens);
    STOF_REQUIRE(heads >= 1 && head_dim >= 2, STOF_ERR_SHAPE,
                 "%s: %d heads of %d dims: need at least one head of two dims", what, heads,
                 head_dim);
    STOF_TRY(fuse_check_rope_table(table, head_dim, what));
    STOF_REQUIRE(row_stride >= (int64_t)heads * head_dim, STOF_ERR_SHAPE,
                 "%s: row_stride %lld is shorter than %d heads of %d", what,
                 (long long)row_stride, heads, head_dim);
    STOF_REQUIRE(x, STOF_ERR_INVALID_ARG, "%s: x is NULL", what);
    STOF_TRY(fuse_check_index_ptr(positions, "positions", what));
    if (tokens == 0) return STOF_OK;
    return fuse_launch_rope(ctx, dtype, x, tokens, heads, head_dim, row_stride, positions, table);
}

stof_status fuse_glu(stof_ctx *ctx, stof_dtype dtype, int64_t rows, int inter, const void *x,
                     stof_act act, void *y)
{
    const char *what = "fuse_glu";
    STOF_TRY(fuse_check_ctx(ctx, what));
    STOF_TRY(fuse_check_dtype(dtype, what));
    STOF_TRY(fuse_check_rows(rows, "rows", what));
    STOF_TRY(fuse_check_width(inter, INT32_MAX / 2, "inter", what));
    STOF_TRY(fuse_check_ptr(x, "x", what));
    STOF_TRY(fuse_check_ptr(y, "y", what));
    STOF_TRY(fuse_check_act(act, what));
    STOF_REQUIRE(!fuse_overlap(x, (size_t)rows * inter * 4, y, (size_t)rows * inter * 2),
                 STOF_ERR_INVALID_ARG, "%s: y overlaps x", what);
    return fuse_launch_glu(ctx, dtype, rows, inter, x, act, y);
}

/* Each half is inter / FUSE_GLU_BLOCK blocks of rows: one strided copy puts
 * a's blocks at even block slots of dst and one b's at odd ones. */
stof_status fuse_glu_upload(stof_ctx *ctx, void *dst, const void *src, int inter, size_t row_bytes)
{
    const char *what = "fuse_glu_upload";
    STOF_TRY(fuse_check_ctx(ctx, what));
    STOF_REQUIRE(dst && src, STOF_ERR_INVALID_ARG, "%s: dst or src is NULL", what);
    STOF_REQUIRE(inter >= FUSE_GLU_BLOCK && inter % FUSE_GLU_BLOCK == 0 && row_bytes > 0,
                 STOF_ERR_SHAPE,
                 "%s: inter %d is not a positive multiple of %d (rows of %zu bytes)", what, inter,
                 FUSE_GLU_BLOCK, row_bytes);
    const size_t block = FUSE_GLU_BLOCK * row_bytes;
    const size_t blocks = (size_t)inter / FUSE_GLU_BLOCK;
    cudaStream_t s = (cudaStream_t)ctx->stream;
    for (int half = 0; half < 2; half++)
        STOF_CUDA_TRY(cudaMemcpy2DAsync((char *)dst + half * block, 2 * block,
                                        (const char *)src + half * blocks * block, block, block,
                                        blocks, cudaMemcpyHostToDevice, s));
    return STOF_CUDA(cudaStreamSynchronize(s));
}

stof_status fuse_embed_sum(stof_ctx *ctx, stof_dtype dtype, const void *word, int vocab,
                           const void *position, int max_pos, int hidden, const int32_t *ids,
                           const int32_t *positions, int64_t tokens, void *out)
{
    const char *what = "fuse_embed_sum";
    STOF_TRY(fuse_check_ctx(ctx, what));
    STOF_TRY(fuse_check_dtype(dtype, what));
    STOF_TRY(fuse_check_width(hidden, INT32_MAX, "hidden", what));
    STOF_REQUIRE(vocab >= 1 && (!position || max_pos >= 1), STOF_ERR_SHAPE,
                 "%s: table sizes vocab %d, max_pos %d must be positive", what, vocab, max_pos);
    STOF_TRY(fuse_check_ptr(word, "word table", what));
    STOF_TRY(fuse_check_opt_ptr(position, "position table", what));
    STOF_TRY(fuse_check_rows(tokens, "tokens", what));
    STOF_TRY(fuse_check_index_ptr(ids, "ids", what));
    if (position) STOF_TRY(fuse_check_index_ptr(positions, "positions", what));
    STOF_TRY(fuse_check_ptr(out, "out", what));
    return fuse_launch_embed_sum(ctx, dtype, word, vocab, position, max_pos, hidden, ids,
                                 positions, tokens, out);
}

stof_status fuse_gather_last(stof_ctx *ctx, stof_dtype in_dtype, const void *packed,
                             const int32_t *cu_seqlens, int batch, int width, int64_t packed_cap,
                             stof_dtype out_dtype, void *out)
{
    const char *what = "fuse_gather_last";
    STOF_TRY(fuse_check_ctx(ctx, what));
    STOF_TRY(fuse_check_dtype(in_dtype, what));
    STOF_REQUIRE(out_dtype == STOF_F32 || out_dtype == in_dtype, STOF_ERR_INVALID_ARG,
                 "%s: out dtype %s is neither f32 nor the input's %s", what,
                 stof_dtype_name(out_dtype), stof_dtype_name(in_dtype));
    STOF_REQUIRE(batch >= 1 && batch <= INT32_MAX / 2, STOF_ERR_SHAPE, "%s: batch %d", what,
                 batch);
    STOF_TRY(fuse_check_width(width, INT32_MAX, "width", what));
    STOF_REQUIRE(packed_cap >= 0, STOF_ERR_SHAPE, "%s: packed_cap %lld is negative", what,
                 (long long)packed_cap);
    STOF_TRY(fuse_check_ptr(packed, "packed", what));
    STOF_TRY(fuse_check_index_ptr(cu_seqlens, "cu_seqlens", what));
    STOF_TRY(fuse_check_ptr(out, "out", what));
    return fuse_launch_gather_last(ctx, in_dtype, packed, cu_seqlens, batch, width, packed_cap,
                                   out_dtype, out);
}
