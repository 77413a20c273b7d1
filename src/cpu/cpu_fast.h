/*
 * cpu_fast.h — the CPU backend's fast row ops: fp32, vectorisable, split over
 * rows on the thread pool (pool.h). Each has its exact twin in cpu_ref.h (the
 * same name without _fast, double accumulation), which is its oracle in the
 * tests. `threads` is a context's cpu_threads (0: every core).
 */
#ifndef STOF_CPU_FAST_H
#define STOF_CPU_FAST_H

#include <stdint.h>

#include "core/act.h"

#ifdef __cplusplus
extern "C" {
#endif

/* act(x) elementwise in place, n elements; GELU's erf and the exponentials of
 * tanh-GELU and SiLU by polynomial (absolute error below 1e-6 * max(1, |x|)). */
void cpu_activation_fast(int threads, float *x, int64_t n, stof_act act);

/* y[r, :] = act(y[r, :] + bias) (bias may be NULL): the epilogue of an sgemm. */
void cpu_bias_act_fast(int threads, float *y, const float *bias, int64_t rows, int64_t cols,
                       stof_act act);

/* cpu_linear split into row (or column) slices on the pool, each an OpenBLAS
 * sgemm at one thread followed by its bias and activation. */
void cpu_linear_fast(int threads, const float *x, const float *w, const float *bias, float *y,
                     int64_t m, int64_t n, int64_t k, stof_act act);

/* cpu_layernorm in fp32 (two-pass statistics per row); y may alias x or residual. */
void cpu_layernorm_fast(int threads, const float *x, const float *residual, const float *gamma,
                        const float *beta, float *y, int64_t rows, int64_t cols, float eps);

/* cpu_embeddings: word + type + position rows summed and normalised per token. */
void cpu_embeddings_fast(int threads, const int32_t *ids, const int32_t *positions,
                         const int32_t *types, int64_t T, const float *word, const float *pos,
                         const float *type, const float *gamma, const float *beta, int64_t hidden,
                         float eps, float *out);

/* cpu_mean_pool: out[b, :] = mean of the packed rows of sequence b (zeros if empty). */
void cpu_mean_pool_fast(int threads, const float *packed, const int32_t *cu_seqlens, int64_t B,
                        int64_t W, float *out);

/* The decoder and ModernBERT families' row ops (decoder_fast.c). */

/* cpu_rmsnorm with fp32 statistics; y may alias x or residual. */
void cpu_rmsnorm_fast(int threads, const float *x, const float *residual, const float *w, float *y,
                      int64_t rows, int64_t cols, float eps);

/* cpu_glu, the activation by polynomial as cpu_activation_fast; y must not
 * overlap x (rows run in parallel). */
void cpu_glu_fast(int threads, const float *x, float *y, int64_t rows, int64_t inter, stof_act act);

/* cpu_rope with cos and sin taken once per token and frequency for all of
 * the token's `heads` heads (pass q's and k's together when they are
 * adjacent in a row, as in a fused QKV row). */
void cpu_rope_fast(int threads, float *x, int64_t tokens, int heads, int head_dim,
                   int64_t row_stride, const int32_t *positions, const float *inv_freq,
                   int rot_dim);

/* cpu_add: y = a + b over n elements; y may alias a or b. */
void cpu_add_fast(int threads, const float *a, const float *b, float *y, int64_t n);

#ifdef __cplusplus
}
#endif

#endif /* STOF_CPU_FAST_H */
