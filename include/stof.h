/*
 * stof.h — the public C API of stof: fast transformer inference with sparse
 * attention masks on NVIDIA GPUs (and a CPU backend for machines without one).
 *
 * Conventions
 *  - Every call returns a stof_status; on failure stof_last_error() gives a
 *    message (thread-local) naming what was wrong and the offending value.
 *  - Objects are opaque handles created by stof_*_create / *_compile and freed
 *    by the matching *_destroy (which accept NULL).
 *  - Parameter structs come from stof_*_default_params(); new fields are added
 *    at the end with defaults, so callers that start from the defaults keep
 *    compiling and behaving the same.
 *  - Tensors are described, never owned: stof reads and writes the caller's
 *    memory in place (host memory for a CPU context, device memory for a GPU
 *    context).
 */
#ifndef STOF_H
#define STOF_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(_WIN32)
#define STOF_API
#else
#define STOF_API __attribute__((visibility("default")))
#endif

#define STOF_VERSION_MAJOR 0
#define STOF_VERSION_MINOR 1
#define STOF_VERSION_PATCH 0

/* ---------------------------------------------------------------- status */

typedef enum stof_status {
    STOF_OK = 0,
    STOF_ERR_INVALID_ARG = 1, /* NULL pointer, out-of-range value, misuse */
    STOF_ERR_SHAPE = 2,       /* shapes or dtypes that do not fit together */
    STOF_ERR_PARSE = 3,       /* a mask spec or other text that does not parse */
    STOF_ERR_UNSUPPORTED = 4, /* valid request this build or device cannot run */
    STOF_ERR_OOM = 5,         /* host or device memory exhausted */
    STOF_ERR_CUDA = 6,        /* a CUDA runtime or library call failed */
    STOF_ERR_IO = 7,          /* a file could not be opened, read or written */
    STOF_ERR_FORMAT = 8,      /* a file's content is malformed */
    STOF_ERR_NO_DEVICE = 9,   /* a GPU was asked for and none is usable */
    STOF_ERR_INTERNAL = 10    /* a bug in stof: please report it */
} stof_status;

/* Short constant name of a status, e.g. "STOF_ERR_SHAPE". */
STOF_API const char *stof_status_str(stof_status status);
/* Message of the last failed call on this thread ("" when none). */
STOF_API const char *stof_last_error(void);

STOF_API const char *stof_version(void); /* "0.1.0" */

/* ---------------------------------------------------------------- context */

typedef enum stof_device {
    STOF_DEVICE_AUTO = 0, /* the GPU when one is usable, else the CPU */
    STOF_DEVICE_CPU = 1,
    STOF_DEVICE_GPU = 2
} stof_device;

typedef struct stof_ctx stof_ctx;

typedef struct stof_ctx_params {
    stof_device device;
    int gpu_index;          /* CUDA device ordinal for STOF_DEVICE_GPU/AUTO */
    void *stream;           /* cudaStream_t to run on; NULL: the ctx makes its own, a
                               blocking stream ordered after the legacy default stream */
    size_t workspace_bytes; /* initial workspace arena; grows on demand outside a forward */
    int cpu_threads;        /* CPU backend threads; 0: OpenBLAS default */
} stof_ctx_params;

STOF_API stof_ctx_params stof_ctx_default_params(void);
STOF_API stof_status stof_ctx_create(const stof_ctx_params *params, stof_ctx **out);
STOF_API void stof_ctx_destroy(stof_ctx *ctx);
/* STOF_DEVICE_CPU or STOF_DEVICE_GPU: what the context actually runs on. */
STOF_API stof_device stof_ctx_device(const stof_ctx *ctx);
/* Human-readable device name ("NVIDIA H100 80GB HBM3", "cpu"). */
STOF_API const char *stof_ctx_device_name(const stof_ctx *ctx);
/* Work is enqueued on this stream from now on (GPU contexts only). */
STOF_API stof_status stof_ctx_set_stream(stof_ctx *ctx, void *stream);
STOF_API void *stof_ctx_stream(const stof_ctx *ctx);
STOF_API stof_status stof_ctx_synchronize(stof_ctx *ctx);
/* Number of usable CUDA devices (0 when there is no driver or device). */
STOF_API int stof_gpu_count(void);

/* ---------------------------------------------------------------- tensors */

typedef enum stof_dtype {
    STOF_F32 = 0,
    STOF_F16 = 1,
    STOF_BF16 = 2,
    STOF_I32 = 3,
    STOF_U8 = 4,
    STOF_I64 = 5
} stof_dtype;

typedef enum stof_memory {
    STOF_MEM_HOST = 0,
    STOF_MEM_DEVICE = 1
} stof_memory;

#define STOF_MAX_DIMS 4

/* A view of caller memory. stride[] is in elements; a tensor made by
 * stof_tensor_make is contiguous row-major. Attention inputs need unit
 * stride on their last dimension; other dimensions may be strided (so a
 * [B, L, H, D] buffer viewed as [B, H, L, D] needs no copy). */
typedef struct stof_tensor {
    void *data;
    stof_dtype dtype;
    stof_memory memory;
    int ndim;
    int64_t shape[STOF_MAX_DIMS];
    int64_t stride[STOF_MAX_DIMS];
} stof_tensor;

STOF_API stof_tensor stof_tensor_make(void *data, stof_dtype dtype, stof_memory memory, int ndim,
                                      const int64_t *shape);
STOF_API size_t stof_dtype_size(stof_dtype dtype);
STOF_API const char *stof_dtype_name(stof_dtype dtype);

/* ---------------------------------------------------------------- masks */

/*
 * A mask spec is a union of parts; key j is visible from query i when any part
 * says so, and (always) i < length_q[b] and j < length_k[b]. The analytic
 * parts (causal, window, dilated) see query row i at position a = i + off,
 * off = length_k[b] - length_q[b] (bottom-right alignment, the default, as
 * FlashAttention defines it: the last query sees the last key, so prefill
 * after a cached prefix and chunked prefill are right); with top-left
 * alignment off = 0. When Lq == Lk and lengths agree the two coincide. Parts:
 *   full                      every pair
 *   causal                    j <= a
 *   window(left, right)       a-left <= j <= a+right
 *   dilated(window, dilation) |a-j| <= window*dilation and (a-j) % dilation == 0
 *   global(n)                 i < n or j < n
 *   global(list)              i or j is a listed token
 *   random(block, per_row, seed)
 *                             BigBird random blocks: for each block row bi of
 *                             batch entry b, per_row block columns drawn from
 *                             the seed (reproducible, different per entry)
 *   blocks(layout)            user block layout [1|H][rows][cols] of 0/1 bytes
 *                             over blocks of block_size x block_size
 *   dense(tensor)             0/1 mask [B|1, H|1, Lq, Lk] (U8; any nonzero byte is visible)
 *
 * Text form (CLI and Python), parts separated by ',':
 *   full | causal | window:W | window:L:R | dilated:WxD | global:N |
 *   global:[i,j,...] | random:BxN@SEED | blocks:B:ROW/ROW/... (ROW = 0/1 chars)
 * and, anywhere among them, the alignment words topleft or bottomright (the
 * default, not printed by the formatter), and band clauses:
 *   within:causal             j <= a
 *   within:W | within:L:R     a-L <= j <= a+R (W: L = R = W)
 * A band is no part: it intersects the union of the parts (key j is visible
 * when some part says so AND j lies in the band), at the same row offset as
 * the analytic parts, so "window:256,global:64,within:causal" is a causal
 * LLaMA's layers with BigBird-style sparsity. Several clauses intersect (the
 * formatter prints the one band they leave, after the parts); a spec of
 * alignment words and bands alone is refused.
 * e.g. "window:128,global:32,random:64x3@7". dense masks come only from a
 * tensor (stof_mask_spec_add_dense); they, and per-head block layouts, format as
 * "dense" and "blocks:B:heads=H", which do not parse back. A random part takes
 * at most 256 blocks per row.
 */
typedef struct stof_mask_spec stof_mask_spec;

typedef enum stof_mask_align {
    STOF_ALIGN_BOTTOM_RIGHT = 0, /* off = length_k - length_q (the default) */
    STOF_ALIGN_TOP_LEFT = 1      /* off = 0 */
} stof_mask_align;

STOF_API stof_status stof_mask_spec_create(stof_mask_spec **out);
STOF_API void stof_mask_spec_destroy(stof_mask_spec *spec);
/* Parse the text form; on STOF_ERR_PARSE the message gives the position and reason. */
STOF_API stof_status stof_mask_spec_parse(const char *text, stof_mask_spec **out);
/* Canonical text form (dense parts print as "dense"). Writes at most cap bytes
 * including the NUL; *needed (optional) gets the full length + 1. */
STOF_API stof_status stof_mask_spec_format(const stof_mask_spec *spec, char *buf, size_t cap,
                                           size_t *needed);
STOF_API stof_status stof_mask_spec_set_align(stof_mask_spec *spec, stof_mask_align align);
STOF_API stof_status stof_mask_spec_add_full(stof_mask_spec *spec);
STOF_API stof_status stof_mask_spec_add_causal(stof_mask_spec *spec);
STOF_API stof_status stof_mask_spec_add_window(stof_mask_spec *spec, int left, int right);
STOF_API stof_status stof_mask_spec_add_dilated(stof_mask_spec *spec, int window, int dilation);
STOF_API stof_status stof_mask_spec_add_global(stof_mask_spec *spec, int n);
STOF_API stof_status stof_mask_spec_add_global_list(stof_mask_spec *spec, const int32_t *tokens,
                                                    int count);
STOF_API stof_status stof_mask_spec_add_random(stof_mask_spec *spec, int block, int per_row,
                                               uint64_t seed);
/* layout: heads x rows x cols bytes (0/1), heads 1 or H; copied. */
STOF_API stof_status stof_mask_spec_add_blocks(stof_mask_spec *spec, int block_size, int heads,
                                               int rows, int cols, const uint8_t *layout);
/* dense: U8 tensor [B|1, H|1, Lq, Lk], host or device memory; referenced, not
 * copied: it must stay valid until every stof_mask_compile that uses it returns. */
STOF_API stof_status stof_mask_spec_add_dense(stof_mask_spec *spec, const stof_tensor *dense);
/* Intersect the spec's band with causal (j <= a) / with a-left <= j <= a+right
 * (left, right >= 0): text "within:causal" / "within:L:R". */
STOF_API stof_status stof_mask_spec_within_causal(stof_mask_spec *spec);
STOF_API stof_status stof_mask_spec_within_window(stof_mask_spec *spec, int left, int right);
/* A copy of spec (lists and layouts copied; dense tensors referenced, as by spec). */
STOF_API stof_status stof_mask_spec_copy(const stof_mask_spec *spec, stof_mask_spec **out);

typedef enum stof_mask_builder {
    STOF_BUILDER_AUTO = 0, /* the context's device */
    STOF_BUILDER_CPU = 1,  /* build on the host (then upload for a GPU context) */
    STOF_BUILDER_GPU = 2   /* build with GPU kernels (GPU context only) */
} stof_mask_builder;

typedef struct stof_mask_params {
    int batch;                   /* B >= 1 */
    int heads;                   /* H >= 1 */
    int len_q;                   /* Lq >= 1: padded query length */
    int len_k;                   /* Lk >= 1: padded key length */
    const stof_tensor *lengths_q; /* optional I32 [B]: real query lengths, 0 allowed. Host
                                    lengths outside [0, Lq] are rejected; device lengths
                                    cannot be checked without a round trip and are clamped */
    const stof_tensor *lengths_k; /* optional I32 [B]; NULL: lengths_q when Lq == Lk */
    int tile_m;                  /* 16, 32, 64 or 128; 0 (with tile_n 0): chosen for the device */
    int tile_n;                  /* 16, 32, 64 or 128; 0: 64 */
    stof_mask_builder builder;
    int head_dim;                /* head dim of the attention it will serve: a hint for the
                                    tile choice (0: unknown) */
    int reusable;                /* 1: keep what stof_mask_rebuild needs (GPU builder; its
                                    device scratch stays allocated with the mask) */
} stof_mask_params;

/* A mask compiled to the two-level tile format, resident where the ctx runs. */
typedef struct stof_mask stof_mask;

STOF_API stof_mask_params stof_mask_default_params(void);
/* Enqueued on the ctx's stream; a GPU compile makes no host round trip. */
STOF_API stof_status stof_mask_compile(stof_ctx *ctx, const stof_mask_spec *spec,
                                       const stof_mask_params *params, stof_mask **out);
STOF_API void stof_mask_destroy(stof_mask *mask);
/*
 * Builds a mask compiled with reusable = 1 (by the GPU builder) again, in its own
 * storage: lengths and dense parts that live in device memory are read again
 * (so new lengths of the same batch take effect); host-side inputs are those of
 * the compile, and the spec need not outlive it (a device dense tensor must).
 * Enqueued on the ctx's stream; it allocates nothing and copies nothing from the
 * host, so it may be captured in a CUDA graph. Statistics read before it are
 * dropped. INVALID_ARG for a mask that is not reusable.
 */
STOF_API stof_status stof_mask_rebuild(stof_mask *mask);

typedef struct stof_mask_stats {
    int instances;       /* distinct masks stored (batch entries x heads that differ) */
    int tile_m, tile_n;
    int64_t tiles_total; /* instances x tile rows x tile cols; a dilated mask stored split by
                            residue class (src/mask/mask.h) counts the tiles of one class,
                            which every class shares */
    int64_t tiles_full;
    int64_t tiles_partial;
    int64_t nnz;         /* visible (query, key) pairs over all instances */
    double tile_density; /* (full + partial) / total */
    double density;      /* nnz / (sum over instances of Lq * Lk) */
} stof_mask_stats;

/* Exact statistics (synchronises the ctx's stream for a GPU mask). */
STOF_API stof_status stof_mask_stats_get(stof_mask *mask, stof_mask_stats *out);
/* Decode instance (b, h) back to a dense 0/1 host array of Lq*Lk bytes. */
STOF_API stof_status stof_mask_decode(stof_mask *mask, int b, int h, uint8_t *dense, size_t cap);

/* ---------------------------------------------------------------- attention */

typedef enum stof_attn_kernel {
    STOF_ATTN_AUTO = 0,      /* the analytical selector decides */
    STOF_ATTN_BLOCKWISE = 1, /* tensor-core tiles over the compiled mask */
    STOF_ATTN_ROWWISE = 2,   /* warps walk the visible keys of a row */
    STOF_ATTN_CPU = 3,       /* reported when a CPU context ran it */
    STOF_ATTN_BLOCKWISE_SM90 = 4, /* block-wise on Hopper warpgroup MMA, sm_90 devices */
    /* Hopper, warp-specialised: head dim 128, all-visible and causal masks without a
     * bias or soft cap (AUTO picks it there) */
    STOF_ATTN_BLOCKWISE_SM90_WS = 5
} stof_attn_kernel;

/* A position bias added to the scores in the kernel (never an [H, L, L] tensor).
 * Positions follow the mask's alignment: query row i is at a = i + off
 * (stof_mask_align; off = length_k - length_q under the default). */
typedef enum stof_attn_bias_kind {
    STOF_BIAS_NONE = 0,
    STOF_BIAS_T5 = 1,    /* T5 relative-position buckets: bias = F32 table [num_buckets, H],
                            score += table[bucket(j - a), h] (Hugging Face's
                            _relative_position_bucket with t5_bidirectional, num_buckets
                            (the table's rows, even, >= 2 bidirectional) and t5_max_distance) */
    STOF_BIAS_ALIBI = 2, /* ALiBi: bias = F32 slopes [H], score += -slope[h] * |j - a|
                            (FlashAttention's form; under causal it equals slope * (j - a)) */
    STOF_BIAS_TENSOR = 3 /* additive tensor [B|1, H|1, Lq, Lk] F32, F16 or BF16 (any strides,
                            a dimension of extent 1 broadcasts), padded layout */
} stof_attn_bias_kind;

typedef struct stof_attn_params {
    float scale;             /* softmax scale; 0: 1/sqrt(head_dim) */
    stof_attn_kernel kernel; /* force a kernel, or AUTO */
    /* Added for decoders and T5; the defaults (zeros) change nothing. */
    stof_attn_bias_kind bias_kind;
    const stof_tensor *bias; /* the table, slopes or tensor bias_kind names, in q's memory */
    int t5_bidirectional;    /* T5: 1 encoder (both directions), 0 decoder */
    int t5_max_distance;     /* T5: distance from which buckets saturate; 0: 128 */
    float softcap;           /* > 0: scores become softcap * tanh(score / softcap) before the
                                bias (Gemma 2); 0: none */
} stof_attn_params;

typedef struct stof_attn_choice {
    stof_attn_kernel kernel;
    int block_m, block_n; /* tile shape the kernel runs with */
    int warps;            /* warps per CTA */
    double score;         /* the selector's figure of merit (documented in src/attn/select.h) */
    int split;            /* reported: residue classes run as sequences of their own (a dilated
                             mask stored split, src/mask/mask.h); 1: none */
} stof_attn_choice;

STOF_API stof_attn_params stof_attn_default_params(void);

/*
 * Masked multi-head attention:
 *     out = softmax(cap(scale * q k^T) + bias + mask) v
 * (cap: params->softcap, bias: params->bias_kind). Layouts:
 *  - padded: q [B, H, Lq, D], k and v [B, Hkv, Lk, D], out [B, H, Lq, D] with
 *    any strides on B, H and L and unit stride on D (so [B, L, H, D] memory
 *    works through strides);
 *  - packed variable length: q [Tq, H, D], k and v [Tk, Hkv, D], out [Tq, H, D],
 *    with cu_seqlens_q / cu_seqlens_k I32 [B+1] prefix sums of the lengths
 *    (same memory kind as q). The mask must be compiled for those lengths.
 * Grouped-query attention comes from k's shape: Hkv must divide H, query head
 * h reads kv head h / (H / Hkv) (Hkv = 1: multi-query); K and V are never
 * copied. q, k, v, out share a dtype: F16 or BF16 on a GPU (head dim 32, 64,
 * 80, 96, 128 or 256; stof_attention_select says which kernel serves), F32,
 * F16 or BF16 on the CPU (any head dim). Rows with no visible key get zeros;
 * padded rows (i >= length_q[b]) are zeroed too.
 */
STOF_API stof_status stof_attention(stof_ctx *ctx, const stof_attn_params *params,
                                    const stof_tensor *q, const stof_tensor *k,
                                    const stof_tensor *v, stof_mask *mask,
                                    const stof_tensor *cu_seqlens_q,
                                    const stof_tensor *cu_seqlens_k, stof_tensor *out);

/* What stof_attention would run for these inputs (no work is done). */
STOF_API stof_status stof_attention_select(stof_ctx *ctx, const stof_attn_params *params,
                                           const stof_tensor *q, stof_mask *mask,
                                           stof_attn_choice *out);

/* ---------------------------------------------------------------- models */

/* A model loaded from a Hugging Face folder (config.json + model.safetensors,
 * or a sharded model.safetensors.index.json; also the sentence-transformers
 * layout). Families: bert, gpt2, llama (model_type llama, mistral, qwen2) and
 * modernbert; decoders (gpt2, llama) also give logits. */
typedef struct stof_model stof_model;

typedef struct stof_model_params {
    stof_dtype dtype;       /* run dtype: F16 or BF16 on a GPU (default F16), F32 on the CPU */
    const char *tune_cache; /* tuning cache file (stof_model_tune writes it, forwards read it);
                               NULL: $STOF_TUNE_CACHE, else $XDG_CACHE_HOME/stof/tune.json,
                               else ~/.cache/stof/tune.json */
    int tune_cache_off;     /* 1: never read the tuning cache (the analytical rules decide) */
} stof_model_params;

typedef enum stof_pooling {
    STOF_POOL_MEAN = 0, /* mean over the real tokens (sentence-transformers default) */
    STOF_POOL_CLS = 1,  /* the first token */
    STOF_POOL_LAST = 2  /* the last real token (decoders' default) */
} stof_pooling;

typedef struct stof_model_info {
    int hidden, layers, heads, head_dim, intermediate;
    int vocab, max_positions, type_vocab;
    float layer_norm_eps;
    stof_dtype dtype;     /* the run dtype */
    stof_pooling pooling; /* from the sentence-transformers config; mean by default */
    int normalize;        /* 1 when the folder asks for L2-normalised embeddings */
    char family[16];      /* "bert", "gpt2", "llama", "modernbert" */
    char model_type[32];  /* config.json's model_type ("mistral", "qwen2", ...) */
    int kv_heads;         /* key/value heads (< heads: grouped-query attention) */
    int is_decoder;       /* 1: causal, with an LM head (logits in stof_forward_params) */
} stof_model_info;

STOF_API stof_model_params stof_model_default_params(void);
/* Loads and checks every tensor (a missing or misshapen one is named in the error). */
STOF_API stof_status stof_model_load(stof_ctx *ctx, const char *dir,
                                     const stof_model_params *params, stof_model **out);
STOF_API void stof_model_destroy(stof_model *model);
STOF_API stof_status stof_model_get_info(const stof_model *model, stof_model_info *out);

typedef struct stof_forward_params {
    const stof_mask_spec *mask; /* attention mask; NULL: every pair (dense); always
                                   intersected with the sequence lengths */
    int eager;                  /* GPU: 1 launches kernel by kernel. 0 (default): the
                                   second forward of a shape bucket (B, L, token count
                                   rounded up by at most 12.5%, mask text) captures a
                                   CUDA graph and later ones replay it */
    const stof_tensor *attention_mask; /* [B, L] I32, I64 or U8, host or ctx memory: the
                                          Hugging Face 0/1 mask of a right-padded batch
                                          (each row ones, then zeros), an alternative to
                                          the lengths argument; NULL: use that */
    stof_tensor *logits;        /* decoders: F32 logits, host or ctx memory, contiguous:
                                   [B, vocab] for the last real token of each sequence,
                                   or [B, L, vocab] (zeros at padding) when logits_all;
                                   NULL: none. An encoder refuses it */
    int logits_all;             /* 1: logits for every token */
} stof_forward_params;

STOF_API stof_forward_params stof_forward_default_params(void);

/*
 * One encoder forward, padding-free inside: only real tokens are computed.
 *   ids          I32 or I64 [B, L] token ids (host memory, or the ctx's memory)
 *   lengths      I32 [B]: real tokens per sequence, host or ctx memory (NULL: all L,
 *                or what params->attention_mask says)
 *   token_types  I32 or I64 [B, L] (NULL: all 0)
 *   hidden_out   [B, L, hidden] last hidden state in the run dtype (or F32), zeros
 *                at padding, ctx memory; or [T, hidden] with T the real tokens: packed,
 *                sequence after sequence (CPU); NULL to skip
 *   pooled_out   F32 [B, hidden] pooled embeddings (L2-normalised when the model
 *                asks for it), ctx memory or host memory; NULL to skip
 * The batch is planned on the host. When the lengths (or the attention mask),
 * ids or types are in device memory, one small kernel checks them there and
 * the call waits for its report once (the lengths, the first bad value); with
 * every input in host memory the call does not wait for the GPU.
 */
STOF_API stof_status stof_model_forward(stof_model *model, const stof_forward_params *params,
                                        const stof_tensor *ids, const stof_tensor *lengths,
                                        const stof_tensor *token_types, stof_tensor *hidden_out,
                                        stof_tensor *pooled_out);

/* ---------------------------------------------------------------- tuning */

/*
 * stof_model_tune measures execution plans for one forward shape (the ids'
 * [B, L], the lengths' token count bucket, the mask) with the two-stage search
 * of the STOF paper (src/tune/search.h): which segments of a layer run as one
 * fused stof kernel or through cuBLASLt, the kernel parameters of each, and the
 * attention kernel. Every candidate's output is checked against the default
 * plan's before it may win. The winner serves this model's later forwards of
 * that bucket and, unless store is 0, goes into the model's tuning cache file,
 * where other processes loading a model with the same dims on the same GPU
 * and library version find it. GPU models only.
 */
typedef struct stof_tune_params {
    const stof_mask_spec *mask; /* the forwards' mask; NULL: every pair */
    int budget;                 /* parameter-search measurements; 0: 32 */
    int store;                  /* 1 (default): write the result to the tuning cache */
    /* called after every measurement (may be NULL) */
    void (*progress)(void *user, int done, int total, const char *stage);
    void *progress_user;
} stof_tune_params;

#define STOF_TUNE_SEGMENTS 5 /* qkv, out-proj, ffn1, ffn2, attention */

typedef struct stof_tune_result {
    double default_ms, tuned_ms; /* one forward, medians of the final interleaved runs */
    double tune_s;               /* wall time of the search */
    int measured, rejected;      /* candidates timed; of them, wrong outputs */
    char segment[STOF_TUNE_SEGMENTS][24];  /* segment names */
    char chosen[STOF_TUNE_SEGMENTS][96];   /* what runs there in the tuned plan */
    char fallback[STOF_TUNE_SEGMENTS][96]; /* and in the default plan */
    char cache_path[1024];       /* where it was stored ("" when not) */
} stof_tune_result;

STOF_API stof_tune_params stof_tune_default_params(void);
STOF_API stof_status stof_model_tune(stof_model *model, const stof_tune_params *params,
                                     const stof_tensor *ids, const stof_tensor *lengths,
                                     const stof_tensor *token_types, stof_tune_result *out);

/* ---------------------------------------------------------------- tokenizer */

/* The tokenizer of a model folder, any family (see stof_tokenizer_model below): the
 * ids of Hugging Face's tokenizers, e.g. [CLS] tokens [SEP] for BERT. Invalid UTF-8
 * is not an error: it reads as Python's decode(errors="replace"). A loaded tokenizer
 * may be used from several threads at once. */
typedef struct stof_tokenizer stof_tokenizer;

/* Loads the tokenizer where sentence-transformers does: the folder of the
 * Transformer module (modules.json's path, 0_Transformer in older layouts),
 * else dir itself; tokenizer.json (its model type picks WordPiece, BPE or
 * Unigram), or BERT's vocab.txt. tokenizer_config.json gives model_max_length,
 * padding_side, truncation_side and the pad/bos/eos/unk tokens; tokenizer.json's
 * own truncation and padding sections are ignored, as transformers ignores them.
 * A missing folder or vocabulary gives STOF_ERR_IO naming the path, a malformed
 * file STOF_ERR_FORMAT (STOF_ERR_PARSE when it is not JSON), a component stof
 * does not implement STOF_ERR_UNSUPPORTED naming it. */
STOF_API stof_status stof_tokenizer_open(const char *dir, stof_tokenizer **out);
STOF_API void stof_tokenizer_destroy(stof_tokenizer *tok);

/* The length sentence-transformers truncates at, special tokens included:
 * sentence_bert_config.json's max_seq_length when present, else
 * tokenizer_config.json's model_max_length (for WordPiece 512 when absent; for
 * the others none, then max_positions); at most max_positions when that is > 0.
 * Returns 0 for a NULL tokenizer or no bound at all. */
STOF_API int stof_tokenizer_max_length(const stof_tokenizer *tok, int max_positions);

/* Tokenizes texts[0..batch) (lens NULL: NUL-terminated texts), special tokens
 * added, each truncated to max_len ids (>= 2), into a padded batch written
 * compactly as I32 [batch, L] row-major, L = the longest sequence (returned in
 * *seq_len): the pad token (tokenizer_config.json's, else 0) fills each row after
 * the sequence (before it when padding_side is "left"), lengths[b] = ids of
 * sequence b. ids holds ids_cap entries; batch * max_len always suffices. */
STOF_API stof_status stof_tokenize_batch(const stof_tokenizer *tok, const char *const *texts,
                                         const size_t *lens, int batch, int max_len,
                                         int32_t *ids, size_t ids_cap, int32_t *lengths,
                                         int *seq_len);

/* ---------------------------------------------------------------- embeddings */

/*
 * Sentence embeddings as sentence-transformers computes them, the one pipeline
 * behind `stof embed` and stof.Model.encode: texts[0..n) (lens NULL: NUL-
 * terminated) tokenized by tok and truncated at max_length, sorted by token
 * count so that each batch pads little, run batch by batch with the model's
 * pooling (L2-normalised when the folder has a Normalize module), written to
 * out (F32 host [n, hidden]) in input order. A non-finite embedding is an
 * error naming the text.
 */
typedef struct stof_embed_params {
    int batch;                  /* texts per forward (default 32) */
    int max_length;             /* ids per text, [CLS] and [SEP] included; 0 (default):
                                   the folder's (stof_tokenizer_max_length) */
    const stof_mask_spec *mask; /* attention mask; NULL: dense */
} stof_embed_params;

STOF_API stof_embed_params stof_embed_default_params(void);
STOF_API stof_status stof_model_embed(stof_model *model, const stof_tokenizer *tok,
                                      const char *const *texts, const size_t *lens, int64_t n,
                                      const stof_embed_params *params, float *out);
/* Every family's tokenizer: besides BERT's WordPiece (vocab.txt or tokenizer.json),
 * the BPE (GPT-2, LLaMA, Mistral, Qwen2, ModernBERT: byte-level or SentencePiece-style
 * with byte fallback) and Unigram (T5) models of a folder's tokenizer.json, with its
 * normalizer, pre-tokenizer, post-processor, decoder and added tokens, giving the ids
 * of Hugging Face's tokenizers library. Invalid UTF-8 reads as Python's
 * decode(errors="replace") would give it. */
typedef enum stof_tokenizer_model {
    STOF_TOKENIZER_WORDPIECE = 1,
    STOF_TOKENIZER_BPE = 2,
    STOF_TOKENIZER_UNIGRAM = 3
} stof_tokenizer_model;

typedef struct stof_tokenizer_info {
    stof_tokenizer_model model;
    int vocab_size;  /* one past the largest id, added tokens included */
    int max_length;  /* as stof_tokenizer_max_length(tok, 0); 0: unbounded */
    int32_t pad_id, bos_id, eos_id, unk_id; /* tokenizer_config.json's; -1 when absent */
} stof_tokenizer_info;

STOF_API stof_status stof_tokenizer_get_info(const stof_tokenizer *tok, stof_tokenizer_info *out);

typedef struct stof_encode_params {
    int add_special_tokens; /* 1 (default): the post-processor's tokens ([CLS] ... [SEP], <s> ...) */
    int max_length;         /* > 0: truncate to this many ids, special tokens included (cut at
                               the end, or the start when tokenizer_config.json says
                               truncation_side "left"); 0 (default): no truncation; -1: the
                               tokenizer's max length */
} stof_encode_params;

STOF_API stof_encode_params stof_encode_default_params(void);

/* The ids of text (len bytes, need not be NUL-terminated) into ids[0..cap); *n gets
 * their number, and STOF_ERR_INVALID_ARG means cap was too small (*n still says how
 * many). params NULL: the defaults. */
STOF_API stof_status stof_tokenizer_encode(const stof_tokenizer *tok, const char *text, size_t len,
                                           const stof_encode_params *params, int32_t *ids,
                                           size_t cap, size_t *n);

/* Ragged ids of a batch: text i's ids are ids[offsets[i] .. offsets[i+1]). */
typedef struct stof_token_lists {
    int batch;
    int32_t *ids;
    int64_t *offsets; /* [batch + 1] */
} stof_token_lists;

/* Encodes texts[0..batch) (lens NULL: NUL-terminated) on `threads` threads (<= 0: one per
 * core); output in input order, allocated into *out: free with stof_token_lists_free. */
STOF_API stof_status stof_tokenizer_encode_batch(const stof_tokenizer *tok,
                                                 const char *const *texts, const size_t *lens,
                                                 int batch, const stof_encode_params *params,
                                                 int threads, stof_token_lists *out);
STOF_API void stof_token_lists_free(stof_token_lists *lists);

typedef struct stof_decode_params {
    int skip_special_tokens; /* 1 (default): special added tokens give no text */
    int stream;              /* 0 (default); 1: an incomplete UTF-8 character at the end is held
                                back (its byte count in *held) instead of becoming U+FFFD, so
                                a generator can decode the ids so far and print what is final */
} stof_decode_params;

STOF_API stof_decode_params stof_decode_default_params(void);

/* The text of ids[0..n), NUL-terminated, into text[0..cap); *len gets its byte length
 * and STOF_ERR_INVALID_ARG means cap < *len + 1. held may be NULL. Ids outside the
 * vocabulary give nothing, as in the tokenizers library. */
STOF_API stof_status stof_tokenizer_decode(const stof_tokenizer *tok, const int32_t *ids,
                                           size_t n, const stof_decode_params *params, char *text,
                                           size_t cap, size_t *len, size_t *held);

#ifdef __cplusplus
}
#endif

#endif /* STOF_H */
