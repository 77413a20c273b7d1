/*
 * internal.h — what the files of src/fuse share and nobody else uses: the
 * argument checks and the kernel launchers. Launchers assume checked
 * arguments; the public functions in fuse.h check first.
 */
#ifndef STOF_FUSE_INTERNAL_H
#define STOF_FUSE_INTERNAL_H

#include "fuse/fuse.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- checks: each returns OK or an error naming `what` (the calling op) */

stof_status fuse_check_ctx(const stof_ctx *ctx, const char *what);
stof_status fuse_check_dtype(stof_dtype dtype, const char *what);
/* Non-NULL and 16-byte aligned. */
stof_status fuse_check_ptr(const void *p, const char *name, const char *what);
/* NULL allowed; otherwise 16-byte aligned. */
stof_status fuse_check_opt_ptr(const void *p, const char *name, const char *what);
/* A feature count: 8 <= n <= max and a multiple of 8. */
stof_status fuse_check_width(int64_t n, int64_t max, const char *name, const char *what);
stof_status fuse_check_rows(int64_t m, const char *name, const char *what);
stof_status fuse_check_act(stof_act act, const char *what);
stof_status fuse_check_eps(float eps, const char *what);
/* A RoPE table (fuse_rope_table) that covers rot_dim rotating dims of heads
 * of head_dim. */
stof_status fuse_check_rope_table(const fuse_rope_table *t, int head_dim, const char *what);
/* An index array: non-NULL and 4-byte aligned. */
stof_status fuse_check_index_ptr(const void *p, const char *name, const char *what);
/* An output of bytes that may be the input in exactly (in-place), or elsewhere. */
stof_status fuse_check_in_place(const void *in, const void *out, size_t bytes,
                                const char *in_name, const char *what);
/* True when [a, a + a_bytes) and [b, b + b_bytes) share a byte. */
bool fuse_overlap(const void *a, size_t a_bytes, const void *b, size_t b_bytes);
/* Shared memory a block may use on the ctx's device. */
size_t fuse_smem_limit(const stof_ctx *ctx);

/* ---- the K-split cuBLASLt path: its fp32 partial sums take the front of the
 * workspace (fuse_lt_parts_bytes, a multiple of 256), cuBLASLt the rest */
size_t fuse_lt_parts_bytes(int splits, int64_t m, int n);
fuse_ws fuse_lt_parts_rest(fuse_ws ws, int splits, int64_t m, int n);

/* ---- launchers (the .cu files of src/fuse) */

stof_status fuse_launch_gemm_bias_act(stof_ctx *ctx, const fuse_config *c,
                                      const fuse_linear_args *a);
stof_status fuse_launch_gemm_res_ln(stof_ctx *ctx, const fuse_config *c, const fuse_linear_args *a);
stof_status fuse_launch_ffn_chain(stof_ctx *ctx, const fuse_config *c, const fuse_ffn_args *a);
/* gemm_sm90's CTAs per SM for smem bytes of dynamic shared memory: two when
 * both fit in the SM's 228 KB with the 1 KB the driver reserves per CTA. */
#define FUSE_SM90_CTAS_PER_SM(smem) (2 * ((smem) + 1024) <= 228 * 1024 ? 2 : 1)
/* gemm_sm90.cu: built only with STOF_HAVE_FUSE_SM90; runs on compute capability 9.0 only. */
stof_status fuse_launch_gemm_sm90(stof_ctx *ctx, const fuse_config *c, const fuse_linear_args *a);
/* The same GEMM cut into splits K slices (k / splits a multiple of 64, or
 * splits 1), slice s writing its fp32 partial sums to plane s of parts
 * ([splits][m, n]); no bias, activation or output y. */
stof_status fuse_launch_gemm_sm90_parts(stof_ctx *ctx, const fuse_config *c,
                                        const fuse_linear_args *a, int splits, float *parts);

stof_status fuse_launch_bias_act(stof_ctx *ctx, stof_dtype dtype, int64_t m, int n, const void *x,
                                 const void *bias, stof_act act, void *y);
/* y = LN(x + bias + residual) * gamma + beta; bias and residual may be NULL. */
stof_status fuse_launch_layernorm(stof_ctx *ctx, stof_dtype dtype, int64_t rows, int cols,
                                  const void *x, const void *bias, const void *residual,
                                  const void *gamma, const void *beta, float eps, void *y);
/* The same over the sum of count fp32 planes of rows x cols (a split GEMM's
 * partial sums, plane p at parts + p * rows * cols); rows at or past *live
 * (fuse_linear_args.live_rows; NULL: rows) are left as they were. */
stof_status fuse_launch_layernorm_parts(stof_ctx *ctx, stof_dtype dtype, int64_t rows, int cols,
                                        const float *parts, int count, const void *bias,
                                        const void *residual, const void *gamma, const void *beta,
                                        float eps, void *y, const int32_t *live);
stof_status fuse_launch_embeddings(stof_ctx *ctx, stof_dtype dtype, const fuse_embed_tables *t,
                                   const int32_t *ids, const int32_t *positions,
                                   const int32_t *types, int64_t tokens, void *out);
stof_status fuse_launch_cu_seqlens(stof_ctx *ctx, const int32_t *lengths, int batch, int len,
                                   int32_t *cu_seqlens);
/* Moves rows of row_bytes between padded [batch, len] and packed [cap] layouts. */
stof_status fuse_launch_pack_rows(stof_ctx *ctx, const void *src, const int32_t *cu_seqlens,
                                  int batch, int len, int64_t row_bytes, void *dst,
                                  int64_t packed_cap, bool unpack);
stof_status fuse_launch_positions(stof_ctx *ctx, const int32_t *cu_seqlens, int batch, int len,
                                  int32_t *positions, int64_t packed_cap);
stof_status fuse_launch_mean_pool(stof_ctx *ctx, stof_dtype in_dtype, const void *packed,
                                  const int32_t *cu_seqlens, int batch, int width,
                                  int64_t packed_cap, stof_dtype out_dtype, void *out);

/* norms.cu, decoder_rows.cu (decoder_ops_gpu.c checks their arguments) */
stof_status fuse_launch_norm(stof_ctx *ctx, stof_dtype dtype, fuse_norm_kind kind, int64_t rows,
                             int cols, const void *x, const void *residual, const void *gamma,
                             const void *beta, float eps, void *y, void *sum_out);
stof_status fuse_launch_rope(stof_ctx *ctx, stof_dtype dtype, void *x, int64_t tokens, int heads,
                             int head_dim, int64_t row_stride, const int32_t *positions,
                             const fuse_rope_table *table);
stof_status fuse_launch_rope_table(stof_ctx *ctx, const float *inv_freq_host, int rot_dim,
                                   int positions, float *cs);
stof_status fuse_launch_glu(stof_ctx *ctx, stof_dtype dtype, int64_t rows, int inter,
                            const void *x, stof_act act, void *y);
stof_status fuse_launch_embed_sum(stof_ctx *ctx, stof_dtype dtype, const void *word, int vocab,
                                  const void *position, int max_pos, int hidden,
                                  const int32_t *ids, const int32_t *positions, int64_t tokens,
                                  void *out);
stof_status fuse_launch_gather_last(stof_ctx *ctx, stof_dtype in_dtype, const void *packed,
                                    const int32_t *cu_seqlens, int batch, int width,
                                    int64_t packed_cap, stof_dtype out_dtype, void *out);

#ifdef __cplusplus
}
#endif

#endif /* STOF_FUSE_INTERNAL_H */
