/*
 * engine.h — the one engine behind stof_model: the model object, the
 * canonical weight layout every family is loaded into, and the contract
 * between the loader (weights.c), the public API (model.c) and the two
 * executors, CPU (exec_cpu.c, fp32, the oracle) and GPU (engine_gpu.c and
 * its parts).
 *
 * Canonical weights. Whatever the checkpoint's names and layout (separate or
 * fused q/k/v, Conv1D's [in, out], fused or separate up/gate), the loader
 * hands every executor the same tensors, linear weights as PyTorch's
 * [out, in]:
 *   qkv     [(heads + 2 kv_heads) * head_dim, hidden]   rows: q, then k, then v
 *   o       [hidden, heads * head_dim]
 *   mlp_in  [intermediate, hidden], or for a GLU [2 * intermediate, hidden]
 *           whose rows [0, I) go through the activation and rows [I, 2I)
 *           multiply it (LLaMA: gate_proj then up_proj; ModernBERT: Wi as is);
 *           the GPU keeps these rows (and the bias's) interleaved in blocks
 *           (FUSE_GLU_BLOCK in src/fuse/fuse.h), so that its GEMM epilogue
 *           meets both halves of a unit in one thread
 *   down    [hidden, intermediate]
 *   norms   [hidden] (bias [hidden] where the family has one)
 * and, model-wide, tok_emb [vocab, hidden], pos_emb [max_positions, hidden],
 * type_emb [type_vocab, hidden], lm_head [vocab, hidden] (the same pointer as
 * tok_emb when tied). An absent tensor is NULL.
 *
 * Loading streams: the loader builds one canonical tensor at a time in the
 * run dtype in a host staging buffer and gives it to a weight_sink, which
 * keeps it (CPU: a host copy) or uploads it (GPU: into the device arena). No
 * whole-model fp32 copy exists on a GPU context.
 */
#ifndef STOF_MODEL_ENGINE_H
#define STOF_MODEL_ENGINE_H

#include "model/desc.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct layer_weights {
    void *attn_norm, *attn_norm_b;
    void *qkv, *qkv_b;
    void *o, *o_b;
    void *mlp_norm, *mlp_norm_b;
    void *mlp_in, *mlp_in_b;
    void *down, *down_b;
} layer_weights;

typedef struct model_weights {
    stof_dtype dtype; /* of every tensor below */
    void *tok_emb, *pos_emb, *type_emb;
    void *emb_norm, *emb_norm_b;
    void *final_norm, *final_norm_b;
    void *lm_head;
    layer_weights *layer; /* [layers] */
    int64_t n_params;     /* elements loaded (a tied head counted once) */
    int layers;           /* entries of layer */
} model_weights;

/* Receives each canonical tensor once: *slot is to point at where the sink
 * keeps its n elements of the run dtype (bytes long, at host_src now; the
 * buffer is reused after put returns). what names it for messages
 * ("layers.3.qkv"). glu_half: for a GLU's mlp_in or mlp_in_b, the rows of
 * each half (the intermediate size), which a sink may lay out its own way;
 * 0 for every other tensor. */
typedef struct weight_sink {
    stof_status (*put)(struct weight_sink *sink, const char *what, void **slot,
                       const void *host_src, size_t bytes, int glu_half);
    void *user;
} weight_sink;

/* Where a model's files are, as the folder says (plain HF folder, or a
 * sentence-transformers layout with modules.json and 1_Pooling). */
#define MODEL_PATH_MAX 4096
typedef struct model_files {
    char dir[MODEL_PATH_MAX];          /* folder holding config.json and the weights */
    char config_path[MODEL_PATH_MAX];
    char weights_path[MODEL_PATH_MAX]; /* model.safetensors or model.safetensors.index.json */
    bool sharded;                      /* weights_path is an index of shards */
    bool sentence_transformers;
    stof_pooling pooling;              /* from 1_Pooling, else the family's default */
    bool pooling_from_file;
    int pooling_dim;
    bool normalize;                    /* a Normalize module follows pooling */
} model_files;

typedef struct exec_cpu_ws exec_cpu_ws;
typedef struct engine_gpu engine_gpu;

struct stof_model {
    stof_ctx *ctx;
    const family_def *family;
    model_desc desc;
    model_files files;
    model_weights w;     /* host (CPU context) or device (GPU context) memory */
    stof_model_info info;
    exec_cpu_ws *cpu;    /* CPU scratch, grown on demand */
    engine_gpu *gpu;     /* device arena and per-shape state; NULL on the CPU */
    int32_t *lens;       /* host scratch of the forward: lengths [B], cu_seqlens [B + 1] */
    int lens_cap;
};

/* Reads the folder's config into d through the family that takes its
 * model_type, and streams every canonical tensor of d into sink in dtype.
 * A missing or misshapen tensor, or an unsupported model_type, is named in
 * the error. w->dtype is set; its pointers are the sink's slots. */
stof_status model_load_files(const char *dir, model_files *files, const family_def **family,
                             model_desc *d);
stof_status model_load_weights(const model_files *files, const family_def *family,
                               const model_desc *d, stof_dtype dtype, weight_sink *sink,
                               model_weights *w);
/* Frees what a host sink (weight_sink_host) kept. */
void model_weights_free_host(model_weights *w);
/* A sink that keeps host copies (CPU contexts, tests). */
weight_sink weight_sink_host(void);

#ifdef __cplusplus
}
#endif

#endif /* STOF_MODEL_ENGINE_H */
