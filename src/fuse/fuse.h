/*
 * fuse.h — the GPU operators around attention: GEMM templates with fused
 * epilogues, the cuBLASLt path, row kernels (bias + activation, LayerNorm,
 * embeddings, pack/unpack, mean pooling) and the segment functions that run a
 * layer segment through either a stof template or cuBLASLt + row kernels.
 *
 * Conventions shared by every call here:
 *  - the ctx is a GPU context; work is enqueued on ctx->stream and nothing is
 *    allocated on the device while running (a caller-provided fuse_ws feeds
 *    cuBLASLt; the FFN split path takes its intermediate buffer from the caller);
 *  - activations, weights and outputs share one dtype, F16 or BF16, row-major
 *    and contiguous; accumulation and statistics are fp32;
 *  - every device pointer is 16-byte aligned and widths (features) are
 *    multiples of 8, so rows move in 16-byte vectors;
 *  - linear layers follow PyTorch: w is [out, in], y = x w^T + b.
 * Invalid arguments return a status with a message naming the value; a ctx is
 * used by one host thread at a time.
 */
#ifndef STOF_FUSE_H
#define STOF_FUSE_H

#include "core/act.h"
#include "core/core.h"

#ifdef __cplusplus
extern "C" {
#endif

const char *fuse_act_name(stof_act act);

/* Largest width the row kernels (LayerNorm, embeddings) accept. */
#define FUSE_MAX_ROW_WIDTH 8192
/* Workspace the cuBLASLt path asks for; less (even none) works with fewer algorithms. */
#define FUSE_LT_WORKSPACE_BYTES ((size_t)32 << 20)

/* Device scratch a caller lends to a call (taken once from stof_ctx_workspace). */
typedef struct fuse_ws {
    void *ptr;
    size_t bytes;
} fuse_ws;

/* ------------------------------------------------------------ template descriptors */

typedef enum fuse_tpl {
    FUSE_TPL_NONE = 0,          /* "choose by rule" where a config is optional */
    FUSE_TPL_GEMM_BIAS_ACT = 1, /* y = act(x w^T + b) */
    FUSE_TPL_GEMM_RES_LN = 2,   /* y = LN(x w^T + b + residual): a CTA owns block_m full rows */
    FUSE_TPL_FFN_CHAIN = 3,     /* y = [LN](act(x w1^T + b1) w2^T + b2 [+ residual]) */
    FUSE_TPL_GEMM_SM90 = 4,     /* y = act(x w^T + b) with TMA + wgmma (sm_90a builds, cc 9.0) */
    FUSE_TPL_COUNT = 5
} fuse_tpl;

const char *fuse_tpl_name(fuse_tpl tpl);

/*
 * One instantiated kernel of a template. Meaning of the tile fields:
 *   GEMM_BIAS_ACT  block_m x block_n output tile, block_k deep slices;
 *   GEMM_RES_LN    block_m full rows, computed block_n columns at a time;
 *   FFN_CHAIN      block_m full rows, the intermediate kept on chip block_n
 *                  columns at a time (its hidden size is a template parameter
 *                  too: fuse_chain_hidden_ok).
 * warps_m x warps_n warps split the tile; stages is the cp.async pipeline depth.
 * Except for
 *   GEMM_SM90      block_m x block_n output tile, block_k = 64 (one 128-byte
 *                  swizzle atom of K); warps_m is the number of consumer
 *                  warpgroups, each owning 64 rows (block_m = 64 warps_m),
 *                  warps_n = 1; block_n a multiple of 64 up to 256; stages is
 *                  the depth of the TMA ring in shared memory. A producer warp
 *                  (or warpgroup) comes on top of the consumers.
 */
typedef struct fuse_config {
    fuse_tpl tpl;
    int block_m, block_n, block_k;
    int warps_m, warps_n;
    int stages;
} fuse_config;

/* The instantiated configs of a template (a tuner enumerates these). */
const fuse_config *fuse_config_list(fuse_tpl tpl, int *count);
/* Same template and every tile field equal. */
bool fuse_config_equal(const fuse_config *a, const fuse_config *b);
/* OK when c names an instantiated kernel; else INVALID_ARG naming the bad field. */
stof_status fuse_config_check(const fuse_config *c);
/* True for the hidden sizes FFN_CHAIN is instantiated for (384, 768, 1024). */
bool fuse_chain_hidden_ok(int hidden);
/*
 * Dynamic shared memory the kernel needs. n: output width (GEMM_RES_LN keeps
 * block_m full fp32 rows on chip) or hidden size (FFN_CHAIN); ignored otherwise.
 */
size_t fuse_config_smem_bytes(const fuse_config *c, int n);
/*
 * OK when c can run these shapes on a device offering smem_limit bytes per
 * block; else SHAPE or UNSUPPORTED with the reason. GEMM templates: m x n out,
 * k in. FFN_CHAIN: n = hidden, k = intermediate.
 */
stof_status fuse_config_check_shape(const fuse_config *c, int64_t m, int n, int k,
                                    size_t smem_limit);
/*
 * The rule-based choice among the configs that fit: the largest tile that
 * still gives every SM a CTA, else the one with the most CTAs (the smaller
 * tile on a tie). The result's tpl is NONE when none fits.
 */
fuse_config fuse_config_default(fuse_tpl tpl, int64_t m, int n, int k, int sm_count,
                                size_t smem_limit);
/*
 * True when GEMM_SM90 can run on the ctx: the library was built with its
 * sm_90a kernels (STOF_HAVE_FUSE_SM90) and the ctx is a GPU of compute
 * capability exactly 9.0. Elsewhere running that template gives UNSUPPORTED.
 */
bool fuse_sm90_available(const stof_ctx *ctx);
/* "gemm_res_ln 32x128x32 w1x4 s3" (snprintf semantics). */
int fuse_config_format(const fuse_config *c, char *buf, size_t cap);

/* ------------------------------------------------------------ operands */

/*
 * A RoPE table: (cos, sin) of the angle (float)p * inv_freq[i] (fp32, as HF
 * forms it; full-precision sincosf) of every position p < positions and
 * pair index i < rot_dim / 2 at cs[2 (p rot_dim / 2 + i)], then one row of
 * NaN that a position outside [0, positions) reads instead: its heads come
 * out NaN, never a read outside the table. Built on the device once per
 * inv_freq set (fuse_rope_table_build); fuse_rope and the gemm_sm90 epilogue
 * read it instead of taking sincosf per token, which in the epilogue ran
 * longer than the GEMM's main loop.
 */
typedef struct fuse_rope_table {
    const float *cs; /* device [positions + 1][rot_dim / 2][2], 16-byte aligned */
    int positions;   /* rows of real positions, 0 .. positions - 1 */
    int rot_dim;     /* even, at most 2 FUSE_ROPE_MAX_HALF */
} fuse_rope_table;
#define FUSE_ROPE_MAX_HALF 256
/* Bytes of the table of positions positions and rot_dim rotating dims (the
 * NaN row included); 0 for a shape it cannot have. */
size_t fuse_rope_table_bytes(int positions, int rot_dim);
/* Fills cs (device, fuse_rope_table_bytes) with the table of inv_freq_host
 * (host F32 [rot_dim / 2]) for positions positions, on the ctx's stream;
 * *out describes it. */
stof_status fuse_rope_table_build(stof_ctx *ctx, const float *inv_freq_host, int rot_dim,
                                  int positions, float *cs, fuse_rope_table *out);

/*
 * Rotary embedding in the GEMM's epilogue (gemm_sm90 only): fuse_rope's
 * rotation of the q and k heads of each output row, applied to the fp32
 * accumulators + bias before the store (rounded once). Row r turns by
 * positions[r] (the table's row); columns [0, rope_cols) are heads of
 * head_dim whose first table.rot_dim dims rotate, columns from rope_cols on
 * (v) are stored as they are. A wgmma thread holds columns c and c +
 * rot_dim / 2 of a head when the head lies inside one output tile: block_n
 * a multiple of head_dim, and (head_dim, rot_dim) one of
 * FUSE_ROPE_EPI_SHAPES (fuse_rope_epi_fits; not the two-CTA tile, whose
 * registers have no room for it).
 */
typedef struct fuse_rope_epi {
    const int32_t *positions; /* device [m], or NULL: no rotation */
    fuse_rope_table table;
    int head_dim;
    int rope_cols; /* (heads + kv_heads) head_dim: q and k, a multiple of head_dim <= n */
} fuse_rope_epi;

/* The (head_dim, rot_dim) pairs the epilogue is compiled for. */
#define FUSE_ROPE_EPI_SHAPES(X) X(32, 32) X(64, 64) X(64, 32) X(128, 128) X(128, 64)

/* True when config c (gemm_sm90) can carry the rotation of heads of
 * head_dim whose first rot_dim dims rotate. */
bool fuse_rope_epi_fits(const fuse_config *c, int head_dim, int rot_dim);

/* A linear layer with its epilogue operands. */
typedef struct fuse_linear_args {
    stof_dtype dtype;         /* F16 or BF16, for every tensor below */
    int64_t m;                /* rows (tokens), >= 1 */
    int n, k;                 /* out and in features, multiples of 8 */
    const void *x;            /* [m, k] */
    const void *w;            /* [n, k] */
    const void *bias;         /* [n], or NULL */
    stof_act act;             /* linear_act only */
    const void *residual;     /* [m, n] or NULL; may equal y: linear_res_ln, and linear_act
                                 with act none (added after the bias) */
    const void *gamma, *beta; /* [n]: linear_res_ln only */
    float eps;                /* LayerNorm epsilon, > 0 */
    void *y;                  /* [m, n]; must not overlap x */
    int lt_algo;              /* cuBLASLt path: index into the heuristic's algorithms, best
                                 first (0: the heuristic's choice) */
    bool w_ready;             /* w was complete before the previous kernel of the stream
                                 started (model weights): gemm_sm90 loads it while that
                                 kernel runs */
    const int32_t *live_rows; /* device int in [0, m], written before the previous kernel
                                 of the stream started, or NULL: rows at or past it are
                                 not needed. gemm_sm90 skips its row tiles that start
                                 there and its LayerNorm those rows (left as they were);
                                 other paths compute them */
    bool glu;                 /* linear_act, path STOF only: w's rows and the bias hold a
                                 GLU's two halves a, b interleaved (FUSE_GLU_BLOCK); y is
                                 [m, n / 2] = act(a) * b, n a multiple of 2 FUSE_GLU_BLOCK */
    fuse_rope_epi rope;       /* rope.positions set: RoPE in the epilogue (path STOF with a
                                 gemm_sm90 config only; act none, no residual, no glu);
                                 every other path refuses it */
} fuse_linear_args;

/* The feed-forward block y = LN(act(x w1^T + b1) w2^T + b2 + residual). */
typedef struct fuse_ffn_args {
    stof_dtype dtype;
    int64_t m;
    int hidden, inter;   /* multiples of 8 */
    const void *x;       /* [m, hidden] */
    const void *w1, *b1; /* [inter, hidden], [inter] (b1 may be NULL) */
    stof_act act;
    const void *w2, *b2;      /* [hidden, inter], [hidden] (b2 may be NULL) */
    const void *residual;     /* [m, hidden] or NULL; may equal x and y */
    const void *gamma, *beta; /* [hidden], or both NULL for no LayerNorm */
    float eps;
    void *y;         /* [m, hidden]; may equal x */
    void *inter_buf; /* [m, inter]: the split path's intermediate (not for the chain) */
} fuse_ffn_args;

/* ------------------------------------------------------------ segments */

typedef enum fuse_path {
    FUSE_PATH_CUBLASLT = 0, /* cuBLASLt GEMM (bias/ReLU/tanh-GELU epilogues) + row kernels */
    FUSE_PATH_STOF = 1      /* the stof template of the segment, one kernel */
} fuse_path;

typedef struct fuse_choice {
    fuse_path path;
    fuse_config config; /* FUSE_PATH_STOF: the kernel; tpl NONE: the rule-based default */
    int lt_algo;        /* FUSE_PATH_CUBLASLT: which of the heuristic's algorithms (0: its first) */
    int splits;         /* residual + LayerNorm segments, in [0, FUSE_LT_MAX_SPLITS].
                           FUSE_PATH_CUBLASLT: 0 or 1 runs one GEMM with bias and residual in
                           its epilogue; S >= 2 cuts K into S slices (fuse_lt_gemm_parts, fp32
                           partial sums in the front of the workspace, S m n 4 bytes) and the
                           LayerNorm kernel adds them up with bias and residual
                           (fuse_lt_split_rule). FUSE_PATH_STOF with config.tpl GEMM_SM90: the
                           same with gemm_sm90 writing the S >= 1 planes (0 counts as 1), each
                           slice a multiple of 64 deep (fuse_sm90_small_rule). On both paths
                           the workspace's front is 16-byte aligned and clear of x, w,
                           residual and y, or the segment is refused before any launch */
} fuse_choice;

/* QKV and FFN1: y = act(x w^T + b). ws feeds cuBLASLt (may be empty). Path
 * STOF runs config.tpl GEMM_SM90 when given, else GEMM_BIAS_ACT (NONE: its
 * default). With args->glu (path STOF): y = act(a) * b of the interleaved
 * halves. With args->residual (act NONE, no glu): y = x w^T + b + residual,
 * residual equal to y or apart from it; no K split (choice->splits <= 1), so
 * each element of y is read as residual and written by the same thread or
 * cuBLASLt's epilogue (beta = 1), which makes y = residual in place safe. */
stof_status fuse_linear_act(stof_ctx *ctx, const fuse_choice *choice, const fuse_linear_args *args,
                            fuse_ws ws);
/* Attention output projection and FFN2: y = LN(x w^T + b + residual). */
stof_status fuse_linear_res_ln(stof_ctx *ctx, const fuse_choice *choice,
                               const fuse_linear_args *args, fuse_ws ws);
/* The whole FFN: STOF runs the chain template (intermediate on chip), CUBLASLT
 * runs two GEMMs through args->inter_buf. */
stof_status fuse_ffn(stof_ctx *ctx, const fuse_choice *choice, const fuse_ffn_args *args,
                     fuse_ws ws);

/* ------------------------------------------------------------ templates, directly */

stof_status fuse_run_gemm_bias_act(stof_ctx *ctx, const fuse_config *c,
                                   const fuse_linear_args *args);
stof_status fuse_run_gemm_res_ln(stof_ctx *ctx, const fuse_config *c, const fuse_linear_args *args);
/* c NULL or tpl NONE: the default among the GEMM_SM90 configs. UNSUPPORTED
 * where fuse_sm90_available is false. */
stof_status fuse_run_gemm_sm90(stof_ctx *ctx, const fuse_config *c, const fuse_linear_args *args);
stof_status fuse_run_ffn_chain(stof_ctx *ctx, const fuse_config *c, const fuse_ffn_args *args);

/* ------------------------------------------------------------ cuBLASLt */

/*
 * y = epilogue(x w^T + bias + residual) with cuBLASLt: act NONE, RELU or
 * GELU_TANH (fuse_lt_has_act; its GELU epilogue is the tanh approximation;
 * GELU and SILU give UNSUPPORTED: use epilogue NONE and fuse_bias_act). residual (beta = 1, may
 * equal y) only with act NONE. The handle lives in ctx->cublaslt; descriptors
 * and the chosen algorithm are cached per (m, n, k, dtype, epilogue, alignment,
 * workspace), so a repeated shape makes no heuristic query.
 */
stof_status fuse_lt_gemm(stof_ctx *ctx, const fuse_linear_args *args, stof_act act,
                         const void *residual, fuse_ws ws);
/* Whether cuBLASLt has an epilogue for act. */
bool fuse_lt_has_act(stof_act act);
/* How many algorithms cuBLASLt's heuristic offers for this GEMM (up to
 * FUSE_LT_MAX_ALGOS): the valid range of args->lt_algo. splits >= 2: for the
 * K-split GEMM of fuse_lt_gemm_parts instead (act and residual unused). */
#define FUSE_LT_MAX_ALGOS 8
stof_status fuse_lt_algo_count(stof_ctx *ctx, const fuse_linear_args *args, stof_act act,
                               const void *residual, int splits, fuse_ws ws, int *count);
/*
 * The K of x w^T cut into `splits` equal slices, run as one strided-batched
 * cuBLASLt GEMM: parts + s m n holds x[:, s k/S ..] w[:, s k/S ..]^T in fp32 for
 * slice s (args->bias and act are not applied; y is not written). k must be
 * a multiple of 8 splits, splits in [1, FUSE_LT_MAX_SPLITS]; args->lt_algo
 * indexes the heuristic's algorithms for this batched problem. parts must not
 * overlap x, w or ws.
 */
#define FUSE_LT_MAX_SPLITS 8
stof_status fuse_lt_gemm_parts(stof_ctx *ctx, const fuse_linear_args *args, int splits,
                               float *parts, fuse_ws ws);
/*
 * The rule for fuse_choice.splits of a residual + LayerNorm segment of m x n
 * outputs and k inputs with ws_bytes of workspace: 4 slices (fewer where k
 * gives no slice of 192 or more, a multiple of 8) up to 256 rows, 2 up to 512
 * rows when k >= 2n, else 1 -- and 1 wherever the partial sums would take
 * more than half of ws_bytes. A few hundred rows leave a GEMM of BERT's shapes
 * with a CTA on a fraction of the SMs, each streaming its weights through a
 * long K loop; K slices give more CTAs shorter loops, for fp32 partial sums
 * that the LayerNorm kernel reads anyway.
 */
int fuse_lt_split_rule(int64_t m, int n, int k, size_t ws_bytes);
/*
 * Whether a segment of m x n outputs and k inputs runs gemm_sm90's 64 x 64
 * tile (fuse_config_sm90_small) on an sm_count-SM Hopper, and in how many K
 * slices: 0 when it does not, 1 for a linear + act segment (residual false),
 * 1 to 4 for a residual + LayerNorm one. Up to 128 rows, where a cuBLASLt
 * GEMM leaves most SMs idle and its weights stream in behind the previous
 * kernel: the tile when one wave of CTAs (tiles x slices <= sm_count) each
 * takes a K slice of at most 768, a multiple of 64 when cut, that its 12
 * stages hold whole, so the weights are all requested while the previous
 * kernel runs (PDL); the most slices that allows, up to 4 (partial sums of
 * at most half ws_bytes). On an H200, stof run with BERT-base at 100 tokens:
 * 0.419-0.422 against 0.384-0.390 ms per forward.
 */
int fuse_sm90_small_rule(int64_t m, int n, int k, bool residual, int sm_count, size_t ws_bytes);
/* The gemm_sm90 config fuse_sm90_small_rule is about. */
fuse_config fuse_config_sm90_small(void);
/* The gemm_sm90 config of a GLU up projection (fuse_linear_args.glu) of m
 * rows, n = 2 inter outputs and k inputs: config.c's SM90_GLU_TILE from
 * SM90_GLU_ROWS rows on, else fuse_config_default's; tpl NONE when neither
 * fits. */
fuse_config fuse_config_sm90_glu(int64_t m, int n, int k, int sm_count, size_t smem_limit);
/* The gemm_sm90 config of a QKV projection of m rows (n outputs, k inputs)
 * carrying the rotary embedding of heads of head_dim (fuse_rope_epi):
 * fuse_config_default's where it fits the heads, else the first compiled
 * one that does; tpl NONE when none does. */
fuse_config fuse_config_sm90_rope(int64_t m, int n, int k, int head_dim, int rot_dim, int sm_count,
                                  size_t smem_limit);
/* Rows from which the rule-based plan of a RoPE layer on a Hopper runs its
 * QKV projection on gemm_sm90 with the rotation in the epilogue rather than
 * cuBLASLt + fuse_rope (the engine's default; STOF_ROPE_EPI_ROWS overrides
 * it: a row count, 0 for always, "off" for never). */
#define FUSE_SM90_ROPE_ROWS 4096
/* Number of cached cuBLASLt plans (for tests). */
int fuse_lt_cached_plans(const stof_ctx *ctx);

/* ------------------------------------------------------------ row kernels */

/* y[m, n] = act(x[m, n] + bias[n]); bias may be NULL; y may equal x. */
stof_status fuse_bias_act(stof_ctx *ctx, stof_dtype dtype, int64_t m, int n, const void *x,
                          const void *bias, stof_act act, void *y);
/* y = LN(x + residual) * gamma + beta over rows of width cols (8..8192, multiple
 * of 8); residual may be NULL; y may equal x or residual. On sm_90 the kernel
 * reads gamma and beta before its programmatic-dependent-launch wait: they
 * must not come from the kernel just before it in the stream (parameters
 * uploaded at load time never do). The same holds for the next function. */
stof_status fuse_add_layernorm(stof_ctx *ctx, stof_dtype dtype, int64_t rows, int cols,
                               const void *x, const void *residual, const void *gamma,
                               const void *beta, float eps, void *y);
/* y = LN(x + bias + residual) * gamma + beta; y may equal x or residual. */
stof_status fuse_bias_residual_layernorm(stof_ctx *ctx, stof_dtype dtype, int64_t rows, int cols,
                                         const void *x, const void *bias, const void *residual,
                                         const void *gamma, const void *beta, float eps, void *y);

/*
 * Padding-free batches. cu_seqlens: device I32 [batch + 1], prefix sums of
 * lengths in [0, len]. Rows are width elements of dtype (F32, F16, BF16, I32).
 * Device-side values are never trusted for addressing: a sequence longer than
 * len is cut at len and rows past packed_cap are neither read nor written.
 */
stof_status fuse_cu_seqlens(stof_ctx *ctx, const int32_t *lengths, int batch, int len,
                            int32_t *cu_seqlens);
/* packed[t] <- padded[b, i] for i < length b. */
stof_status fuse_pack(stof_ctx *ctx, stof_dtype dtype, const void *padded,
                      const int32_t *cu_seqlens, int batch, int len, int width, void *packed,
                      int64_t packed_cap);
/* padded[b, i] <- packed row, zeros for i >= length b. */
stof_status fuse_unpack(stof_ctx *ctx, stof_dtype dtype, const void *packed,
                        const int32_t *cu_seqlens, int batch, int len, int width, void *padded,
                        int64_t packed_cap);
/* positions[t] = index of packed token t inside its sequence. */
stof_status fuse_packed_positions(stof_ctx *ctx, const int32_t *cu_seqlens, int batch, int len,
                                  int32_t *positions, int64_t packed_cap);

/* Embedding tables and their LayerNorm (all dtype, hidden wide). */
typedef struct fuse_embed_tables {
    const void *word;     /* [vocab, hidden] */
    const void *position; /* [max_pos, hidden] */
    const void *type;     /* [type_vocab, hidden] */
    const void *gamma, *beta;
    int vocab, max_pos, type_vocab, hidden;
    float eps;
} fuse_embed_tables;

/*
 * out[t] = LN(word[ids[t]] + position[positions[t]] + type[types[t]]) for t <
 * tokens; types may be NULL (type 0). Indices are validated by the caller on
 * the host; an index out of its table gives a row of NaN instead of a read
 * outside it.
 */
stof_status fuse_embeddings(stof_ctx *ctx, stof_dtype dtype, const fuse_embed_tables *tables,
                            const int32_t *ids, const int32_t *positions, const int32_t *types,
                            int64_t tokens, void *out);

/* out[b] = mean of the packed rows of sequence b (zeros when empty); in_dtype
 * F16/BF16, out_dtype that or F32. */
stof_status fuse_mean_pool(stof_ctx *ctx, stof_dtype in_dtype, const void *packed,
                           const int32_t *cu_seqlens, int batch, int width, int64_t packed_cap,
                           stof_dtype out_dtype, void *out);

/* ------------------------------------------------------------ ops of the decoder families */

typedef enum fuse_norm_kind {
    FUSE_NORM_LAYER = 0, /* (h - mean) / sqrt(var + eps) * gamma + beta, biased variance */
    FUSE_NORM_RMS = 1    /* h / sqrt(mean(h^2) + eps) * gamma (beta must be NULL) */
} fuse_norm_kind;

/*
 * h = x + residual over rows of width cols (8..8192, a multiple of 8);
 * residual may be NULL (h = x). sum_out, when not NULL, receives h in the
 * dtype (the pre-norm residual stream), and y = norm(h) with h as rounded
 * there. gamma NULL means ones, beta NULL zeros (LayerNorm without a bias).
 * y and sum_out may each be x or residual exactly, never each other.
 */
stof_status fuse_norm(stof_ctx *ctx, stof_dtype dtype, fuse_norm_kind kind, int64_t rows, int cols,
                      const void *x, const void *residual, const void *gamma, const void *beta,
                      float eps, void *y, void *sum_out);
/*
 * Rotary embedding in place, rotate-half convention (cpu_rope): token t's
 * heads start at x + t * row_stride (elements), head h at h * head_dim; the
 * first table->rot_dim dims of each (<= head_dim) rotate by the angles of
 * position positions[t] (table, fuse_rope_table) on pairs (i, i + rot_dim /
 * 2). On a packed QKV buffer [T, (heads + 2 kv_heads) * D] one call with
 * heads + kv_heads heads turns q and k, which lie side by side in each row.
 */
stof_status fuse_rope(stof_ctx *ctx, stof_dtype dtype, void *x, int64_t tokens, int heads,
                      int head_dim, int64_t row_stride, const int32_t *positions,
                      const fuse_rope_table *table);
/*
 * The GPU layout of a GLU's up projection: on the device the rows of w
 * [2 inter, k] (and of its bias) interleave the two halves in blocks of
 * FUSE_GLU_BLOCK, a's block first: rows 16q..16q+7 are a's rows 8q..8q+7
 * (the activated half, first in the checkpoint's order) and rows
 * 16q+8..16q+15 b's. A GEMM's accumulator fragments (wgmma and mma.sync
 * alike) hold 8-column steps whose thread-local pairs of adjacent columns
 * then meet a's and b's of the same two units in one thread, so the GEMM
 * epilogue writes act(a) * b as 16-bit pairs (fuse_linear_args.glu).
 */
#define FUSE_GLU_BLOCK 8
/* Copies host rows [2 inter][row_bytes] in the checkpoint's order (a's inter
 * rows, then b's) into device memory dst in the interleaved layout: a
 * weight (row_bytes: k elements of 2 bytes) or a bias (one element).
 * inter a multiple of FUSE_GLU_BLOCK. Synchronous on ctx's stream. */
stof_status fuse_glu_upload(stof_ctx *ctx, void *dst, const void *src, int inter, size_t row_bytes);
/* y[r, i] = act(a[r, i]) * b[r, i] from x [rows, 2 inter] in the interleaved
 * layout (a's units 8q..8q+7 at columns 16q..16q+7, b's at 16q+8..16q+15),
 * y [rows, inter] (inter a multiple of 8); y must not overlap x. */
stof_status fuse_glu(stof_ctx *ctx, stof_dtype dtype, int64_t rows, int inter, const void *x,
                     stof_act act, void *y);
/* out[t] = word[ids[t]] (+ position[positions[t]] when position is not NULL)
 * for t < tokens, no norm; an index out of its table gives a row of NaN. */
stof_status fuse_embed_sum(stof_ctx *ctx, stof_dtype dtype, const void *word, int vocab,
                           const void *position, int max_pos, int hidden, const int32_t *ids,
                           const int32_t *positions, int64_t tokens, void *out);
/* out[b] = the last packed row of sequence b (zeros when empty); in_dtype
 * F16/BF16, out_dtype that or F32. */
stof_status fuse_gather_last(stof_ctx *ctx, stof_dtype in_dtype, const void *packed,
                             const int32_t *cu_seqlens, int batch, int width, int64_t packed_cap,
                             stof_dtype out_dtype, void *out);

#ifdef __cplusplus
}
#endif

#endif /* STOF_FUSE_H */
