/*
 * encoder.h — the forward request shared by the public API (model.c) and
 * the two executors, the CPU one (exec_cpu.c, fp32, the oracle of the GPU
 * path) and the GPU one (engine_gpu.c and its parts, engine_gpu.h); the
 * model object itself is struct stof_model of engine.h.
 *
 * model.c validates every argument of a forward and hands the backend an
 * enc_request whose lengths, cu_seqlens and token count are already checked
 * host values; the backends trust them.
 */
#ifndef STOF_MODEL_ENCODER_H
#define STOF_MODEL_ENCODER_H

#include "model/engine.h"

#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

struct tune_plan;
/* The GPU state (engine_gpu.h defines struct engine_gpu). */
typedef engine_gpu enc_gpu;

/* One forward's inputs after validation (model.c). */
typedef struct enc_request {
    int batch, len;             /* B, L */
    const int32_t *lengths;     /* host [B], each in [0, L] and <= max positions */
    const int32_t *cu_seqlens;  /* host [B + 1] */
    int64_t tokens;             /* T = cu_seqlens[B] */
    const stof_mask_spec *mask; /* NULL: every pair */
    const stof_tensor *ids;     /* I32 or I64 [B, L]: host, or device on a GPU context */
    const stof_tensor *types;   /* like ids, or NULL (type 0) */
    stof_tensor *hidden;        /* [B, L, hidden], or packed [T, hidden] (CPU), contiguous, or NULL */
    stof_tensor *pooled;        /* F32 [B, hidden], contiguous, or NULL */
    bool eager;                 /* GPU: launch kernel by kernel, no CUDA graph */
    bool packed;                /* GPU: enc_gpu_scan packed the inputs on the device (see there) */
    bool computed;              /* GPU: enc_gpu_scan also launched the layers (see there) */
    const struct tune_plan *plan; /* GPU: run this plan (the tuner's candidates); NULL: the
                                     tuning cache's, else the rules */
    stof_tensor *logits;        /* F32 [B, vocab], or [B, L, vocab] when logits_all; or NULL */
    bool logits_all;
} enc_request;

/* Element (b, i) of an I32 or I64 [B, L] host tensor (any strides). */
static inline int64_t enc_token_at(const stof_tensor *t, int64_t b, int64_t i)
{
    int64_t off = b * t->stride[0] + i * t->stride[1];
    if (t->dtype == STOF_I64) return ((const int64_t *)t->data)[off];
    return ((const int32_t *)t->data)[off];
}

/* ---- model.c */

/* stof_model_forward running the given plan (GPU; NULL: as stof_model_forward). */
stof_status enc_forward_plan(stof_model *model, const stof_forward_params *params,
                             const stof_tensor *ids, const stof_tensor *lengths,
                             const stof_tensor *token_types, stof_tensor *hidden_out,
                             stof_tensor *pooled_out, const struct tune_plan *plan);

/* The tuning-cache key of a forward of this shape on this model and device:
 * the device, the library version, the model's dims, its family and the hash
 * of its description (desc_hash), the padded shape, the token bucket and the
 * mask's canonical text (NULL: "full"). Host fields only: any context. */
struct tune_key;
void model_tune_key(const stof_model *m, int batch, int len, int64_t tokens,
                    const char *mask_text, struct tune_key *key);

/* ---- exec_cpu.c */

stof_status exec_cpu_forward(stof_model *m, const enc_request *r);
void exec_cpu_ws_free(exec_cpu_ws *ws);

/* ---- engine_gpu.c and its parts */

/* Uploads the weights in m->info.dtype and prepares the GPU state. */
stof_status enc_gpu_create(stof_model *m);
void enc_gpu_destroy(enc_gpu *g);
stof_status enc_gpu_forward(stof_model *m, const enc_request *r);
/*
 * The lengths of a forward whose lengths, attention mask, ids or types are in
 * device memory, into lens [B] (host): one scan kernel and one read back. mask
 * (a device attention mask) or lengths (device) give them; with neither, lens
 * holds them on entry. Device ids and types are range-checked for those
 * lengths. Errors name the first offending element. When the ids (and the
 * types, if any) are in device memory, the kernels ahead of the read back
 * also pack the forward's inputs (cu_seqlens, ids, types, positions) from the
 * scan's lengths, and *packed says so: nothing is left to upload once the
 * host has the lengths. A small batch of such inputs computes a fixed B * L
 * rows (graphs_gpu.c, "Small batches"); once its CUDA graph is captured the
 * graph is launched ahead of the read back too, and *computed says so: the
 * forward has only its outputs left to write. r->mask, r->types, r->eager and
 * r->plan must be set.
 */
stof_status enc_gpu_scan(stof_model *m, const enc_request *r, const stof_tensor *mask,
                         const stof_tensor *lengths, int32_t *lens, bool *packed, bool *computed);
/* Whether the GPU path can run this model (head dim, widths); the message says why not. */
stof_status enc_gpu_supports(const model_desc *d);
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
/* Forwards whose graph was launched ahead of the input scan's read back (for tests). */
int64_t enc_gpu_launched_ahead(const enc_gpu *g);
/* Layers of the last forward enqueued by host code (not a graph replay) whose
 * QKV GEMM turned q and k in its epilogue (for tests). */
int enc_gpu_rope_epi_layers(const enc_gpu *g);
/* Positions the RoPE tables cover (0: none yet, or no RoPE; for tests). */
int enc_gpu_rope_positions(const enc_gpu *g);
/* B * L up to which a batch of device inputs computes B * L rows (graphs_gpu.c). */
#define ENC_FIXED_ROWS 128

/* ---- inputs.cu (enqueued on ctx->stream; arguments trusted) */

/* dst[i] = src[i] for n F16 or BF16 elements. */
stof_status enc_half_to_f32(stof_ctx *ctx, stof_dtype dtype, const void *src, int64_t n,
                            float *dst);
/* dst[r, c] = src[r * src_stride + c] for rows x cols F16 or BF16 elements. */
stof_status enc_half_to_f32_rows(stof_ctx *ctx, stof_dtype dtype, const void *src, int64_t rows,
                                 int64_t cols, int64_t src_stride, float *dst);
/* out[b] = packed row cu_seqlens[b] as f32 (zeros for an empty sequence). */
stof_status enc_cls_pool(stof_ctx *ctx, stof_dtype dtype, const void *x, const int32_t *cu_seqlens,
                         int batch, int hidden, int64_t tokens, float *out);
/* Each row of x [rows, cols] divided by max(its L2 norm, 1e-12). */
stof_status enc_l2_normalize(stof_ctx *ctx, float *x, int rows, int cols);
/* The device inputs of one forward, scanned once before the batch is planned. */
enum {
    ENC_SCAN_LENGTH = 0,          /* the length (from the mask, or as given) */
    ENC_SCAN_MASK_VALUE,          /* first mask position holding neither 0 nor 1 */
    ENC_SCAN_MASK_ONE_AFTER_ZERO, /* the first position holding 1 after the first 0 */
    ENC_SCAN_ID,                  /* first position < length with an id out of range */
    ENC_SCAN_TYPE,                /* the same for token types */
    ENC_SCAN_MASK_VALUE_AT,       /* the offending values, 64-bit as (low, high) words */
    ENC_SCAN_ID_VALUE = ENC_SCAN_MASK_VALUE_AT + 2,
    ENC_SCAN_TYPE_VALUE = ENC_SCAN_ID_VALUE + 2,
    ENC_SCAN_WORDS = ENC_SCAN_TYPE_VALUE + 2 /* int32 words per sequence; "none" is INT32_MAX */
};

typedef struct enc_scan_args {
    int batch, len;
    const void *mask; /* device [B, L] contiguous, I32 / I64 / U8; or NULL */
    stof_dtype mask_dtype;
    const int32_t *lengths; /* device [B], read when mask is NULL */
    const void *ids, *types; /* device [B, L] contiguous I32 / I64, or NULL: not checked */
    stof_dtype ids_dtype, types_dtype;
    int vocab, type_vocab;
    int32_t *report;      /* device [B][ENC_SCAN_WORDS] */
    int32_t *report_host; /* a mapped host copy of report written alongside it, or NULL */
} enc_scan_args;

stof_status enc_scan_inputs(stof_ctx *ctx, const enc_scan_args *a);

/* The packed inputs of a forward from a scan's report (enc_scan_inputs), built
 * on the device: lens [B] (the report's lengths clamped to [0, L]), cu [B + 1]
 * (their prefix sums), and at row cu[b] + i of ids, types and pos the id, the
 * type and i for every i < lens[b]; rows from cu[B] up to B * L hold token 0,
 * type 0 at position 0. ids and types are contiguous device [B, L] I32 or I64
 * tensors (types NULL: out_types is not written). An id outside [0, vocab)
 * or a type outside [0, type_vocab) is packed as 0: the report names it, and
 * kernels that run before the host reads the report never index a table with
 * it. */
typedef struct enc_pack_args {
    int batch, len;
    const int32_t *report; /* device [B][ENC_SCAN_WORDS] */
    const void *ids, *types;
    stof_dtype ids_dtype, types_dtype;
    int vocab, type_vocab;
    int32_t *cu, *lens, *out_ids, *out_types, *out_pos; /* out_*: B * L rows each */
} enc_pack_args;

stof_status enc_pack_inputs(stof_ctx *ctx, const enc_pack_args *a);
/* Whether enc_scan_pack takes a batch of B sequences of L tokens (one CTA). */
bool enc_scan_pack_fits(int batch, int len);
/* enc_scan_inputs and then enc_pack_inputs in one kernel of one CTA, for a
 * batch enc_scan_pack_fits; p->report is a->report. */
stof_status enc_scan_pack(stof_ctx *ctx, const enc_scan_args *a, const enc_pack_args *p);
/* dst[cu[b] + i] = src[b, i] as I32 for the real tokens of each sequence; src
 * is a contiguous device [B, L] I32 or I64 tensor; rows at or past cap are
 * never written. */
stof_status enc_pack_tokens(stof_ctx *ctx, const void *src, stof_dtype dtype,
                            const int32_t *cu_seqlens, int batch, int len, int32_t *dst,
                            int64_t cap);

#ifdef __cplusplus
}
#endif

#endif /* STOF_MODEL_ENCODER_H */
