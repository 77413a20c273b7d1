/*
 * desc.h — a model as data: what every family's config.json turns into, and
 * the names its tensors carry. One executor on the GPU and one on the CPU walk
 * a model_desc; no family has a forward of its own (DESIGN.md, "One engine,
 * many model families").
 *
 * A family is a family_def: the config.json model_type values it takes, a
 * function that fills a model_desc from the parsed config, and a table from
 * weight roles to Hugging Face tensor names (llama.cpp's LLM_TN idea). Layers
 * carry their own description because windows, RoPE thetas and kv heads vary
 * by layer (ModernBERT's local/global layers, Mistral's window).
 *
 * One layer, as the executor runs it (x: [T, hidden] packed real tokens):
 *   pre-norm:  h = norm_attn(x);  x = x + out(attn(qkv(h)));
 *              h = norm_mlp(x);   x = x + mlp(h)
 *   post-norm: x = norm_attn(x + out(attn(qkv(x))));
 *              x = norm_mlp(x + mlp(x))
 * with RoPE applied to q and k after the QKV projection when pos == POS_ROPE,
 * attention over the layer's mask kind intersected with the forward's stof
 * mask spec and the sequence lengths, and mlp(h) = down(act(up(h))) or, for a
 * GLU, down(act(up(h)) * gate(h)).
 */
#ifndef STOF_MODEL_DESC_H
#define STOF_MODEL_DESC_H

#include "core/act.h"
#include "core/core.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum desc_norm {
    NORM_NONE = 0, /* identity (ModernBERT's first attention norm) */
    NORM_LAYER = 1, /* LayerNorm, biased variance; a bias only when norm_bias */
    NORM_RMS = 2    /* x / sqrt(mean(x^2) + eps) * w (LLaMA: computed in fp32) */
} desc_norm;

typedef enum desc_norm_place { NORM_POST = 0, NORM_PRE = 1 } desc_norm_place;

typedef enum desc_pos {
    POS_NONE = 0,    /* no positions inside attention (learned ones live in the embedding) */
    POS_ROPE = 1,    /* rotary, rotate-half convention (HF's rotate_half) */
    POS_REL_BUCKETS = 2 /* T5 relative-position buckets (bias from a [buckets, H] table) */
} desc_pos;

typedef enum desc_rope_scaling {
    ROPE_SCALING_NONE = 0,
    ROPE_SCALING_LINEAR = 1, /* positions divided by factor */
    ROPE_SCALING_LLAMA3 = 2  /* LLaMA 3.1's frequency-dependent wavelength scaling */
} desc_rope_scaling;

typedef struct rope_desc {
    float theta;     /* base */
    int rot_dim;     /* leading dims of a head that rotate (head_dim unless partial) */
    desc_rope_scaling scaling;
    float factor;    /* linear / llama3 */
    float low_freq_factor, high_freq_factor; /* llama3 */
    int original_max_positions;              /* llama3 */
} rope_desc;

/* The family's own mask for a layer; the forward's stof mask spec and the
 * sequence lengths intersect it. */
typedef enum desc_mask {
    MASK_KIND_FULL = 0,   /* bidirectional */
    MASK_KIND_CAUSAL = 1, /* j <= i */
    MASK_KIND_WINDOW = 2, /* i - left <= j <= i + right (ModernBERT local: left = right) */
    MASK_KIND_CAUSAL_WINDOW = 3 /* i - left <= j <= i (Mistral's sliding window) */
} desc_mask;

typedef enum desc_mlp {
    MLP_PLAIN = 0, /* down(act(up(h))) */
    MLP_GLU = 1    /* down(act(up(h)) * gate(h)): SwiGLU (LLaMA), GeGLU (ModernBERT) */
} desc_mlp;

typedef struct layer_desc {
    desc_norm attn_norm, mlp_norm; /* kinds of the two norms (attn_norm may be NONE) */
    int heads, kv_heads, head_dim; /* kv_heads divides heads (GQA, MQA) */
    desc_pos pos;
    rope_desc rope;
    desc_mask mask;
    int window_left, window_right; /* MASK_KIND_WINDOW / CAUSAL_WINDOW */
    desc_mlp mlp;
    stof_act act;
    int intermediate;
    bool qkv_bias, out_bias, mlp_bias; /* which linears carry a bias */
} layer_desc;

typedef enum desc_embed {
    EMBED_TOKEN = 0,          /* word embeddings only (LLaMA, ModernBERT) */
    EMBED_TOKEN_POS = 1,      /* + learned absolute positions (GPT-2) */
    EMBED_TOKEN_POS_TYPE = 2  /* + token types (BERT) */
} desc_embed;

typedef enum desc_head {
    HEAD_HIDDEN = 0, /* encoders: last hidden state and pooled embeddings */
    HEAD_LM = 1      /* decoders: logits over the vocabulary as well */
} desc_head;

#define DESC_FAMILY_MAX 16
#define DESC_TYPE_MAX 32

typedef struct model_desc {
    char family[DESC_FAMILY_MAX];    /* "bert", "gpt2", "llama", "modernbert" */
    char model_type[DESC_TYPE_MAX];  /* config.json's model_type ("mistral", "qwen2", ...) */
    int hidden, vocab, layers;
    desc_embed embed;
    int max_positions, type_vocab;
    desc_norm embed_norm;            /* norm right after the embeddings (BERT, ModernBERT) */
    desc_norm final_norm;            /* after the last layer (pre-norm families) */
    desc_norm_place norm_place;
    bool norm_bias;                  /* LayerNorms carry a bias (not ModernBERT) */
    float norm_eps;
    desc_head head;
    bool tied_lm_head;               /* logits through the word embeddings */
    bool causal;                     /* a decoder: last-token pooling and logits make sense */
    int pad_token_id;
    layer_desc *layer;               /* [layers], owned (desc_free) */
} model_desc;

void desc_free(model_desc *d);
/* A stable 64-bit hash of everything that shapes the computation (the tuning
 * cache's key carries it with the family). */
uint64_t desc_hash(const model_desc *d);
/* Checks what every executor relies on (kv_heads divides heads, widths agree,
 * windows non-negative, ...); the message names the layer and field. */
stof_status desc_validate(const model_desc *d);
/* The mask a layer of this kind (window bounds left, right) attends with in a
 * forward whose spec is user (NULL: every pair): the kind's own spec, or the
 * user's within the kind's band (stof.h, within:). *out is new; the caller
 * destroys it. The one place a layer's kind meets the user's spec: the GPU
 * engine and the CPU executor's fast path both compile it. */
stof_status desc_layer_mask_spec(desc_mask mask, int left, int right, const stof_mask_spec *user,
                                 stof_mask_spec **out);

/* ---- weights by role */

typedef enum weight_role {
    W_EMB_TOKEN = 0, W_EMB_POS, W_EMB_TYPE, W_EMB_NORM, W_EMB_NORM_B,
    W_ATTN_NORM, W_ATTN_NORM_B, /* per layer from here to W_MLP_DOWN_B */
    W_QKV, W_QKV_B,             /* fused [q; k; v] rows (GPT-2 c_attn, ModernBERT Wqkv) */
    W_Q, W_Q_B, W_K, W_K_B, W_V, W_V_B,
    W_O, W_O_B,
    W_MLP_NORM, W_MLP_NORM_B,
    W_UP_GATE,                  /* fused [up; gate] rows (ModernBERT Wi) */
    W_UP, W_UP_B, W_GATE, W_GATE_B,
    W_DOWN, W_DOWN_B,
    W_FINAL_NORM, W_FINAL_NORM_B,
    W_LM_HEAD,
    W_ROLE_COUNT
} weight_role;

/* A layer-level role (name pattern takes the layer index). */
static inline bool weight_role_per_layer(weight_role r)
{
    return r >= W_ATTN_NORM && r <= W_DOWN_B;
}

/* One row of a family's name table: the role's tensor name with "%d" for the
 * layer, and whether the file stores a linear weight as [in, out] (GPT-2's
 * Conv1D) rather than PyTorch's [out, in]. A role absent from the table (or
 * with a NULL pattern) is not part of the family. */
typedef struct weight_name {
    weight_role role;
    const char *pattern;
    bool transposed;
} weight_name;

typedef struct cJSON cJSON;

typedef struct family_def {
    const char *name;                /* "bert" */
    const char *const *model_types;  /* NULL-terminated config model_type values */
    const char *const *prefixes;     /* NULL-terminated name prefixes tried in order
                                        ("", "bert.", "model.", ...) */
    const weight_name *names;        /* the name table */
    int n_names;
    /* Fills d from config.json (parsed); errors name the field (STOF_ERR_FORMAT)
     * or the unsupported feature (STOF_ERR_UNSUPPORTED). */
    stof_status (*describe)(const cJSON *config, const char *path, model_desc *d);
} family_def;

/* The family that takes this model_type, or NULL. */
const family_def *family_for_type(const char *model_type);
/* Every family, NULL-terminated (for messages and tests). */
const family_def *const *family_all(void);

extern const family_def family_bert, family_gpt2, family_llama, family_modernbert;

#ifdef __cplusplus
}
#endif

#endif /* STOF_MODEL_DESC_H */
