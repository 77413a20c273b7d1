/*
 * engine_gpu.h — the state of the GPU forward shared by its files: the
 * device arena and workspace (engine_gpu.c, workspace_gpu.c), the packed
 * inputs (inputs_gpu.c, inputs.cu), the forward's masks (masks_gpu.c), the
 * layer plans and tuning-cache lookups (plan_gpu.c), the layers
 * (exec_gpu.c) and the captured CUDA graphs (graphs_gpu.c). Private to
 * src/model; model.c reaches the GPU forward through encoder.h.
 */
#ifndef STOF_MODEL_ENGINE_GPU_H
#define STOF_MODEL_ENGINE_GPU_H

#include "model/encoder.h"

#include "attn/attn.h"
#include "fuse/fuse.h"
#include "mask/mask.h"
#include "tune/tune.h"

#include <cuda_runtime_api.h>

#define ENG_MASK_KINDS 2 /* distinct layer mask kinds a model may have (ModernBERT: 2) */

/* Fusion scheme of the layers for one token count. */
typedef struct layer_plan {
    fuse_choice qkv, out, ffn1, ffn2, chain;
    bool use_chain;
    stof_attn_choice attn[ENG_MASK_KINDS]; /* per layer mask kind; kernel AUTO: the selector */
} layer_plan;
#define ENC_GRAPHS 8 /* captured buckets kept per model (least recently used goes) */
#define ENC_PLANS 16 /* tuning-cache lookups remembered per model */

/* One captured forward bucket. */
typedef struct enc_graph {
    bool used, failed; /* failed: capture did not work; this bucket runs kernel by kernel */
    int batch, len, has_types, runs;
    int64_t rows;
    char *mask_text;
    layer_plan plan;
    stof_mask *mask[ENG_MASK_KINDS]; /* reusable, reading the lengths of the device inputs */
    cudaGraphExec_t exec;
    uint64_t last_use;
} enc_graph;

/* The graph the last forward launched ahead of the scan's read back found for
 * a batch of this shape with the model's full mask: the next one of that
 * shape skips the mask formatting, the plan lookup and the graph search while
 * the scan runs. Valid while gen equals engine_gpu.gen. */
typedef struct enc_ahead_memo {
    bool valid, has_types;
    int batch, len;
    uint64_t gen;
    enc_graph *graph;
} enc_ahead_memo;

/* A remembered tuning-cache lookup. */
typedef struct enc_plan_memo {
    bool used, found;
    tune_key key;
    tune_plan plan;
} enc_plan_memo;

/* A layer's own mask, as the desc gives it (desc_mask and its window). */
typedef struct eng_mask_kind {
    desc_mask kind;
    int left, right;
} eng_mask_kind;

/* The widest of each per-token buffer over the layers (eng_widths). */
typedef struct eng_widths {
    int qkv;   /* (heads + 2 kv_heads) head_dim */
    int attn;  /* heads head_dim */
    int inter; /* intermediate, twice that for a GLU */
} eng_widths;

struct engine_gpu {
    stof_ctx *ctx;
    stof_dtype dtype;
    const model_desc *desc;
    model_weights *w; /* the model's, holding device pointers */
    bool bert; /* post-norm BERT: the fused, tuned layer path of plan_gpu.c */
    void **allocs; /* device weights, one allocation per canonical tensor (weights_gpu.c) */
    int n_allocs, cap_allocs;
    /* RoPE: each layer's table (engine_gpu.c's rope_reserve; cs NULL without
     * RoPE, and rope_tab NULL in a model without any), layers of the same
     * frequencies sharing one, all in rope_block, covering positions 0 ..
     * rope_positions - 1 */
    fuse_rope_table *rope_tab;
    void *rope_block;
    int rope_positions;
    fuse_embed_tables emb;
    eng_mask_kind kinds[ENG_MASK_KINDS];
    int n_kinds;
    int *layer_kind; /* [layers]: index into kinds */
    eng_widths widths;
    stof_mask_spec *full; /* the mask of a forward that names none */
    /* workspace for cap_tokens packed tokens and cap_batch sequences */
    void *ws;
    int64_t cap_tokens;
    int cap_batch;
    int32_t *in; /* cu_seqlens | ids | types | positions, laid out per forward */
    void *x, *h, *qkv, *attn, *inter, *gated; /* h, gated: pre-norm layers */
    void *last;  /* [cap_batch, hidden]: each sequence's last row (logits) */
    float *pooled;
    const void *lm_head; /* [vocab_pad, hidden]: the head, or lm_head_pad */
    void *lm_head_pad;   /* its copy padded with zero rows, when vocab % 8 != 0 */
    int vocab_pad;
    void *logits_buf; /* logits in the dtype, grown on demand */
    size_t logits_cap;
    int32_t *report; /* the input scan: [cap_batch][ENC_SCAN_WORDS], then [cap_batch] lengths */
    fuse_ws lt;
    /* pinned host staging of the packed inputs; stage_event marks the end of
     * the last copy out of it */
    int32_t *stage;
    int64_t stage_cap;
    void *stage_event;
    bool stage_busy;
    void *report_event;   /* the input scan's report is on the host */
    int32_t *host_report; /* pinned [cap_batch][ENC_SCAN_WORDS] */
    int32_t *host_report_dev; /* host_report as the device writes it (mapped), or NULL: copied */
    enc_graph graphs[ENC_GRAPHS];
    uint64_t clock;
    int64_t ahead; /* forwards launched ahead of the scan's read back */
    enc_ahead_memo ahead_memo;
    uint64_t gen;         /* bumped whenever a graph slot or a remembered plan changes */
    void *capture_stream; /* cudaStream_t graphs are captured on (made on first use) */
    void *mask_stream;    /* and the one a graph's mask rebuild branches off to */
    void *fork_event, *mask_event; /* the branch's start and end in a capture */
    /* tuning cache: loaded at the first forward that looks for a plan */
    char cache_path[1024];
    bool cache_off, cache_loaded;
    tune_cache *cache;
    enc_plan_memo memo[ENC_PLANS];
    int memo_next;
    /* RoPE in the QKV GEMM's epilogue: from this many rows the rule-based
     * plan runs QKV on gemm_sm90 with it (plan_rope; FUSE_SM90_ROPE_ROWS, or
     * the environment's STOF_ROPE_EPI_ROWS); and how many layers of the last
     * forward that host code enqueued (not a graph replay) took it */
    int64_t rope_epi_rows;
    int rope_epi_layers;
};

/* Device pointers of one forward's packed inputs. */
typedef struct dev_inputs {
    int32_t *cu, *lens, *ids, *types, *pos; /* types NULL: all type 0 */
    int64_t rows;                            /* Tb: rows computed (>= the T real tokens) */
    const int32_t *live; /* fixed rows (B * L): cu + B, T on the device, for the GEMM
                            segments to skip row tiles past it; NULL otherwise */
} dev_inputs;

static inline size_t align256(size_t n)
{
    return (n + 255) & ~(size_t)255;
}
static inline int64_t align4(int64_t n)
{
    return (n + 3) & ~(int64_t)3;
}

/* ---- weights_gpu.c */

/* The sink that uploads each canonical tensor as the loader streams it. */
weight_sink eng_weight_sink(enc_gpu *g);
/* Frees every tensor the sink uploaded. */
void eng_weights_free(enc_gpu *g);

/* ---- workspace_gpu.c */

/* Buffers for B sequences of up to L tokens; kept when they already fit. */
stof_status eng_ws_reserve(stof_model *m, int B, int L);
/* *event, created (without timing) on first use. */
stof_status eng_event_once(void **event);
/* Releases one captured bucket. */
void eng_graph_release(enc_gpu *g, enc_graph *e);
/* Every captured bucket goes (their pointers into the workspace are stale). */
void eng_graphs_drop(enc_gpu *g);
/* Rows a small batch computes whatever its token count (B * L), or 0. */
int64_t eng_fixed_rows(const stof_model *m, const enc_request *r, bool packed);

/* ---- inputs_gpu.c */

/* Packs and uploads one forward's inputs for rows computed rows. */
stof_status eng_upload_inputs(stof_model *m, const enc_request *r, int64_t rows, dev_inputs *in);

/* ---- masks_gpu.c */

/* The forward's masks for its host lengths, one per layer mask kind: its
 * spec (every pair when it names none) intersected with the kind; a named
 * STOF_ERR_UNSUPPORTED where no spec expresses the intersection. */
stof_status eng_compile_masks(stof_model *m, const enc_request *r,
                              stof_mask *out[ENG_MASK_KINDS]);
/* The same, reusable, reading the lengths of the device inputs (graphs). */
stof_status eng_compile_reusable_masks(stof_model *m, const enc_request *r, const dev_inputs *in,
                                       stof_mask *out[ENG_MASK_KINDS]);
void eng_masks_destroy(stof_mask *masks[ENG_MASK_KINDS]);
/* Canonical text of a forward's mask on the heap; NULL (error cleared) when none. */
char *eng_format_mask(const enc_gpu *g, const stof_mask_spec *mask);
/* The layers' distinct mask kinds into g->kinds and g->layer_kind. */
stof_status eng_mask_kinds(enc_gpu *g, const model_desc *d);


/* ---- plan_gpu.c */

/* GEMM segment seg (tune_segment) of layer l on T rows, as the executor runs it. */
fuse_linear_args eng_segment_args(const stof_model *m, int l, int seg, int64_t T);
/* K slices of segment seg's cuBLASLt GEMM. */
int eng_segment_splits(const stof_model *m, int seg, int64_t rows);
bool eng_plan_equal(const layer_plan *a, const layer_plan *b);
/* The plan of one forward: the request's own, the tuning cache's, or the rules. */
layer_plan eng_plan_for(stof_model *m, const enc_request *r, int64_t rows, const char *text);

/* ---- exec_gpu.c */

/* Embeddings and every layer; the first attention waits for mask_ready (a
 * cudaEvent_t, or NULL). */
stof_status eng_run_layers(stof_model *m, const enc_request *r, const dev_inputs *in,
                           const layer_plan *p, stof_mask *const masks[ENG_MASK_KINDS],
                           void *mask_ready);

/* ---- graphs_gpu.c */

/* Runs the layers from this bucket's graph when it has (or now gets) one;
 * *done false: run them kernel by kernel. */
stof_status eng_graph_run(stof_model *m, const enc_request *r, const dev_inputs *in,
                          const layer_plan *p, const char *text, bool *done);
/* Launches a small batch's captured graph ahead of the scan's read back. */
stof_status eng_launch_ahead(stof_model *m, const enc_request *r, bool *computed);

#endif /* STOF_MODEL_ENGINE_GPU_H */
