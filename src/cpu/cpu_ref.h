/*
 * cpu_ref.h — the CPU reference of every stof operator: plain fp32 C written
 * to be obviously right. It is the oracle the GPU kernels are tested against
 * and the CPU backend. Depends on core alone.
 *
 * Shapes are row-major and contiguous unless a stride is named. Linear layers
 * follow PyTorch: weight [out, in], y = x W^T + b.
 */
#ifndef STOF_CPU_REF_H
#define STOF_CPU_REF_H

#include <stdint.h>

#include "core/act.h"

#ifdef __cplusplus
extern "C" {
#endif

/* y[m, n] = act(x[m, k] W[n, k]^T + bias[n]); bias may be NULL. Uses OpenBLAS sgemm. */
void cpu_linear(const float *x, const float *w, const float *bias, float *y, int64_t m, int64_t n,
                int64_t k, stof_act act);
/* Plain triple loop in double precision: the oracle for cpu_linear itself. */
void cpu_linear_naive(const float *x, const float *w, const float *bias, float *y, int64_t m,
                      int64_t n, int64_t k, stof_act act);
void cpu_activation(float *x, int64_t n, stof_act act);
float cpu_gelu(float x);
float cpu_gelu_tanh(float x);

/* y[r, :] = LayerNorm(x[r, :] (+ residual[r, :])) * gamma + beta; residual may be NULL.
 * Variance is the biased one, as torch.nn.LayerNorm computes it. gamma may be
 * NULL (ones), beta NULL (zeros); y may alias x or residual. */
void cpu_layernorm(const float *x, const float *residual, const float *gamma, const float *beta,
                   float *y, int64_t rows, int64_t cols, float eps);
void cpu_add(const float *a, const float *b, float *y, int64_t n);

/*
 * Masked attention for one layout: q [B, H, Lq, D], k and v [B, H, Lk, D], out
 * [B, H, Lq, D], contiguous fp32. mask holds 0/1 bytes; the [Lq, Lk] plane of
 * (b, h) starts at mask + b * mask_stride_b + h * mask_stride_h (stride 0
 * broadcasts); mask may be NULL (every key visible) and any nonzero byte counts
 * as visible. Rows with no visible key give zeros. Accumulates in double.
 */
void cpu_attention(const float *q, const float *k, const float *v, float *out, int64_t B,
                   int64_t H, int64_t Lq, int64_t Lk, int64_t D, const uint8_t *mask,
                   int64_t mask_stride_b, int64_t mask_stride_h, float scale);

/* What decoders and T5 add to attention (stof.h's stof_attn_params, as plain
 * host arrays). Scores are s = cap(scale q.k) + bias(b, h, i, j), the bias
 * taken at query position i + off[b] (off NULL: 0), cap(x) = softcap *
 * tanh(x / softcap) when softcap > 0. */
enum { CPU_BIAS_NONE = 0, CPU_BIAS_T5 = 1, CPU_BIAS_ALIBI = 2, CPU_BIAS_TENSOR = 3 };
typedef struct cpu_attn_extra {
    int bias_kind;
    const float *table; /* T5: [t5_num_buckets, heads]; ALiBi: slopes [heads] */
    int heads;          /* the table's head count */
    int t5_num_buckets, t5_bidirectional, t5_max_distance;
    const float *tensor; /* TENSOR: element (b, h, i, j) at b*s0 + h*s1 + i*s2 + j*s3 */
    int64_t t_stride[4]; /* 0 on broadcast dimensions */
    float softcap;
    const int64_t *off; /* [batch entries] row offsets, indexed by b0 + b; NULL: 0 */
    int64_t b0, h0, i0; /* indices of the first batch entry, head and query row passed
                           (for callers that pass one (b, h) or a few rows at a time) */
} cpu_attn_extra;

/* Hugging Face's T5 bucket of relative position rel = key - query. */
int cpu_t5_bucket(int64_t rel, int bidirectional, int num_buckets, int max_distance);
/* s after the cap and the bias of (b, h, i, j) (absolute indices); x NULL: s. */
double cpu_attn_score(const cpu_attn_extra *x, int64_t b, int64_t h, int64_t i, int64_t j,
                      int64_t off, double s);
/* cpu_attention with Hkv kv heads (dividing H; k and v [B, Hkv, Lk, D], query
 * head h reading kv head h / (H / Hkv)) and the extras (x NULL: none). */
void cpu_attention_ex(const float *q, const float *k, const float *v, float *out, int64_t B,
                      int64_t H, int64_t Hkv, int64_t Lq, int64_t Lk, int64_t D,
                      const uint8_t *mask, int64_t mask_stride_b, int64_t mask_stride_h,
                      float scale, const cpu_attn_extra *x);

/* Padding-free batches (ByteTransformer). lengths[B] in [0, L].
 * cu_seqlens[B+1] = prefix sums; returns the token count T. */
int64_t cpu_cu_seqlens(const int32_t *lengths, int64_t B, int32_t *cu_seqlens);
/* packed[T, W] <- the first lengths[b] rows of each padded[b, L, W]. */
void cpu_pack(const float *padded, const int32_t *lengths, int64_t B, int64_t L, int64_t W,
              float *packed);
/* padded[B, L, W] <- packed rows, zeros at padding. */
void cpu_unpack(const float *packed, const int32_t *lengths, int64_t B, int64_t L, int64_t W,
                float *padded);
/* Lengths from an HF-style 0/1 attention_mask [B, L] (count of ones; the ones
 * must be a prefix of each row). Returns 0, or -1 (with *bad_row set) when a
 * row is not a prefix of ones; values other than 0/1 are rejected likewise. */
int cpu_lengths_from_attention_mask(const int32_t *attention_mask, int64_t B, int64_t L,
                                    int32_t *lengths, int64_t *bad_row);

/* BERT embeddings for T packed tokens:
 * out[t] = LayerNorm(word[ids[t]] + pos[positions[t]] + type[types[t]]) * gamma + beta.
 * types may be NULL (type 0). Indices are assumed validated by the caller. */
void cpu_embeddings(const int32_t *ids, const int32_t *positions, const int32_t *types, int64_t T,
                    const float *word, const float *pos, const float *type, const float *gamma,
                    const float *beta, int64_t hidden, float eps, float *out);

/* out[b, :] = mean of the packed rows of sequence b (zeros for an empty one). */
void cpu_mean_pool(const float *packed, const int32_t *cu_seqlens, int64_t B, int64_t W,
                   float *out);

/* ---- Ops of the decoder and ModernBERT families (HF semantics). */

/* y[r, :] = (x[r, :] (+ residual[r, :])) / sqrt(mean(x^2) + eps) * w, as HF's
 * LlamaRMSNorm: statistics in fp32 or better, w NULL means ones; y may alias
 * x or residual. */
void cpu_rmsnorm(const float *x, const float *residual, const float *w, float *y, int64_t rows,
                 int64_t cols, float eps);
/* inv_freq[i] for i < rot_dim / 2: theta^(-2i / rot_dim), rescaled as scaling
 * says (a desc_rope_scaling value: none, linear (/ factor), llama3 (LLaMA 3.1's
 * wavelength-dependent rule with low/high_freq_factor and the original
 * context length)), exactly as HF's rope init functions compute it. */
void cpu_rope_freqs(float theta, int rot_dim, int scaling, float factor, float low_freq_factor,
                    float high_freq_factor, int original_max_positions, float *inv_freq);
/* Rotary embedding in place, rotate-half convention: for each token t, head h,
 * x + t * row_stride + h * head_dim holds a head whose first rot_dim dims
 * rotate by angle positions[t] * inv_freq[i] (pairs i and i + rot_dim / 2). */
void cpu_rope(float *x, int64_t tokens, int heads, int head_dim, int64_t row_stride,
              const int32_t *positions, const float *inv_freq, int rot_dim);
/* Gated linear unit: x [rows, 2 * inter]; y[r, i] = act(x[r, i]) * x[r, inter + i]. */
void cpu_glu(const float *x, float *y, int64_t rows, int64_t inter, stof_act act);

#ifdef __cplusplus
}
#endif

#endif /* STOF_CPU_REF_H */
