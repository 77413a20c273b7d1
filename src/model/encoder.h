/*
 * encoder.h — the BERT encoder behind stof_model: the model object shared by
 * the public API (model.c) and the two backends, the CPU forward
 * (encoder_cpu.c, fp32, the oracle of the GPU path) and the GPU forward
 * (encoder_gpu.c).
 *
 * model.c validates every argument of a forward and hands the backend an
 * enc_request whose lengths, cu_seqlens and token count are already checked
 * host values; the backends trust them.
 */
#ifndef STOF_MODEL_ENCODER_H
#define STOF_MODEL_ENCODER_H

#include "model/weights.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct enc_cpu_ws enc_cpu_ws;
struct tune_plan;
typedef struct enc_gpu enc_gpu;

struct stof_model {
    stof_ctx *ctx;
    bert_weights w; /* host fp32 (released after the upload on a GPU context) */
    bert_files files;
    stof_model_info info;
    enc_cpu_ws *cpu; /* CPU scratch, grown on demand */
    enc_gpu *gpu;    /* device weights and per-shape state; NULL on the CPU */
    int32_t *lens;   /* host scratch of the forward: lengths [B], cu_seqlens [B + 1] */
    int lens_cap;    /* B it holds */
};

/* One forward's inputs after validation (model.c). */
typedef struct enc_request {
    int batch, len;             /* B, L */
    const int32_t *lengths;     /* host [B], each in [0, L] and <= max positions */
    const int32_t *cu_seqlens;  /* host [B + 1] */
    int64_t tokens;             /* T = cu_seqlens[B] */
    const stof_mask_spec *mask; /* NULL: every pair */
    const stof_tensor *ids;     /* I32 [B, L]: host, or device on a GPU context */
    const stof_tensor *types;   /* I32 [B, L] like ids, or NULL (type 0) */
    stof_tensor *hidden;        /* [B, L, hidden], contiguous, or NULL */
    stof_tensor *pooled;        /* F32 [B, hidden], contiguous, or NULL */
    bool eager;                 /* GPU: launch kernel by kernel, no CUDA graph */
    const struct tune_plan *plan; /* GPU: run this plan (the tuner's candidates); NULL: the
                                     tuning cache's, else the rules */
} enc_request;

/* Element (b, i) of an I32 [B, L] host tensor (any strides). */
static inline int32_t enc_i32_at(const stof_tensor *t, int64_t b, int64_t i)
{
    return ((const int32_t *)t->data)[b * t->stride[0] + i * t->stride[1]];
}

/* ---- model.c */

/* stof_model_forward running the given plan (GPU; NULL: as stof_model_forward). */
stof_status enc_forward_plan(stof_model *model, const stof_forward_params *params,
                             const stof_tensor *ids, const stof_tensor *lengths,
                             const stof_tensor *token_types, stof_tensor *hidden_out,
                             stof_tensor *pooled_out, const struct tune_plan *plan);

/* ---- encoder_cpu.c */

stof_status enc_cpu_forward(stof_model *m, const enc_request *r);
void enc_cpu_ws_free(enc_cpu_ws *ws);

/* ---- encoder_gpu.c */

/* Uploads the weights in m->info.dtype and prepares the GPU state. */
stof_status enc_gpu_create(stof_model *m);
void enc_gpu_destroy(enc_gpu *g);
stof_status enc_gpu_forward(stof_model *m, const enc_request *r);
/* Whether the GPU path can run this model (head dim, widths); the message says why not. */
stof_status enc_gpu_supports(const bert_config *c);
/* Where tuned plans come from: path (NULL or "": the default file), or none when off. */
void enc_gpu_set_tune_cache(enc_gpu *g, const char *path, bool off);
/* The tuning-cache key of a forward of this shape on this model and device. */
struct tune_key;
stof_status enc_gpu_tune_key(stof_model *m, int batch, int len, int64_t tokens,
                             const stof_mask_spec *mask, struct tune_key *key);
/* The tuning cache file of this model (the default one when none was given). */
stof_status enc_gpu_tune_cache_path(const enc_gpu *g, char *buf, size_t cap);
/* Makes plan the model's plan for forwards with this key (the tuner's result). */
void enc_gpu_remember_plan(enc_gpu *g, const struct tune_key *key, const struct tune_plan *plan);
/* The mask tile shape forwards of this shape use. */
stof_status enc_gpu_mask_tiles(stof_model *m, int batch, int len, const int32_t *host_lengths,
                               const stof_mask_spec *mask, int *tile_m, int *tile_n);
/* How many cuBLASLt algorithms the GEMM of a segment (tune_segment) can choose
 * from at this row count (after a forward of at least that many rows). */
stof_status enc_gpu_lt_algos(stof_model *m, int seg, int64_t rows, int *count);
/* Buckets that hold a captured CUDA graph (for tests). */
int enc_gpu_graphs_captured(const enc_gpu *g);

/* ---- encoder_kernels.cu (enqueued on ctx->stream; arguments trusted) */

/* dst[i] = src[i] for n F16 or BF16 elements. */
stof_status enc_half_to_f32(stof_ctx *ctx, stof_dtype dtype, const void *src, int64_t n,
                            float *dst);
/* out[b] = packed row cu_seqlens[b] as f32 (zeros for an empty sequence). */
stof_status enc_cls_pool(stof_ctx *ctx, stof_dtype dtype, const void *x, const int32_t *cu_seqlens,
                         int batch, int hidden, int64_t tokens, float *out);
/* Each row of x [rows, cols] divided by max(its L2 norm, 1e-12). */
stof_status enc_l2_normalize(stof_ctx *ctx, float *x, int rows, int cols);
/* report[0] / report[1] <- the first packed token whose id / type is out of
 * range, or INT32_MAX (ids or types may be NULL: not checked). */
stof_status enc_check_tokens(stof_ctx *ctx, const int32_t *ids, const int32_t *types,
                             int64_t tokens, int vocab, int type_vocab, int32_t *report);

#ifdef __cplusplus
}
#endif

#endif /* STOF_MODEL_ENCODER_H */
