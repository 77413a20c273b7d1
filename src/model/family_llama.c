/*
 * family_llama.c — LLaMA, Mistral and Qwen2 as data: pre-RMSNorm layers,
 * RoPE (rope_scaling default, linear, llama3), grouped-query attention,
 * SwiGLU, no biases except Qwen2's q/k/v, a final RMSNorm and an LM head
 * (tied when tie_word_embeddings). The three differ only in their masks and
 * biases:
 *   - Mistral's sliding_window W: key j is visible from i when i - W < j <= i
 *     (HF's sliding_window_overlay), a causal window of left W - 1;
 *   - Qwen2: q/k/v biases, and sliding windows only on layers at or past
 *     max_window_layers when use_sliding_window (HF 5 spells this out as
 *     "layer_types", which wins when present).
 * Config keys of HF 4 (rope_theta, rope_scaling) and HF 5 (rope_parameters)
 * are both read.
 */
#include "model/config.h"

#include <cjson/cJSON.h>

#include <stdio.h>
#include <string.h>

/* Which layers slide, and by how much (0: none). */
static stof_status read_window(const cJSON *config, const char *path, model_desc *d, int i,
                               int *window)
{
    bool qwen2 = strcmp(d->model_type, "qwen2") == 0;
    int w = 0, sliding = -1;
    STOF_TRY(cfg_int_or_null(config, "sliding_window", path, 0, 0, 1 << 30, &w));
    STOF_TRY(cfg_layer_type(config, path, d->layers, i, &sliding));
    if (sliding < 0 && qwen2) {
        bool use = false;
        int from = 0;
        STOF_TRY(cfg_bool(config, "use_sliding_window", path, false, &use));
        STOF_TRY(cfg_int_or_null(config, "max_window_layers", path, d->layers, 0, 1 << 20, &from));
        sliding = use && i >= from;
    }
    if (sliding < 0) sliding = w > 0; /* Mistral: every layer, when a window is set */
    STOF_REQUIRE(!sliding || w > 0, STOF_ERR_FORMAT,
                 "%s: layer %d slides but \"sliding_window\" is not a positive integer", path, i);
    *window = sliding ? w : 0;
    return STOF_OK;
}

static stof_status llama_rope(const cJSON *config, const char *path, int head_dim, rope_desc *r)
{
    const cJSON *params = cJSON_GetObjectItemCaseSensitive(config, "rope_parameters");
    float theta;
    STOF_TRY(cfg_float(config, "rope_theta", path, false, 10000.0, 1e-3, 1e12, &theta));
    if (!params || cJSON_IsNull(params)) params = cJSON_GetObjectItemCaseSensitive(config, "rope_scaling");
    if (cJSON_IsNull(params)) params = NULL;
    STOF_TRY(cfg_rope(params, path, theta, r));
    float partial = 1.0f;
    STOF_TRY(cfg_float(config, "partial_rotary_factor", path, false, 1.0, 1e-3, 1.0, &partial));
    r->rot_dim = (int)((float)head_dim * partial);
    return STOF_OK;
}

static stof_status llama_describe(const cJSON *config, const char *path, model_desc *d)
{
    int layers, heads, kv_heads, head_dim, inter;
    snprintf(d->family, sizeof d->family, "llama");
    STOF_TRY(cfg_string(config, "model_type", path, "llama", d->model_type, sizeof d->model_type));
    STOF_TRY(cfg_int(config, "hidden_size", path, true, 0, 1, 65536, &d->hidden));
    STOF_TRY(cfg_int(config, "num_hidden_layers", path, true, 0, 1, 1024, &layers));
    STOF_TRY(cfg_int(config, "num_attention_heads", path, true, 0, 1, 1024, &heads));
    STOF_TRY(cfg_int_or_null(config, "num_key_value_heads", path, heads, 1, 1024, &kv_heads));
    STOF_TRY(cfg_int_or_null(config, "head_dim", path, d->hidden / heads, 1, 1024, &head_dim));
    STOF_TRY(cfg_int(config, "intermediate_size", path, true, 0, 1, 1 << 20, &inter));
    STOF_TRY(cfg_int(config, "vocab_size", path, true, 0, 1, 1 << 24, &d->vocab));
    STOF_TRY(cfg_int(config, "max_position_embeddings", path, false, 2048, 1, 1 << 24,
                     &d->max_positions));
    STOF_TRY(cfg_float(config, "rms_norm_eps", path, false, 1e-6, 1e-30, 0.1, &d->norm_eps));
    stof_act act;
    STOF_TRY(cfg_act(config, "hidden_act", path, "silu", &act));
    bool qwen2 = strcmp(d->model_type, "qwen2") == 0;
    bool attn_bias = qwen2, mlp_bias = false;
    if (!qwen2) STOF_TRY(cfg_bool(config, "attention_bias", path, false, &attn_bias));
    STOF_TRY(cfg_bool(config, "mlp_bias", path, false, &mlp_bias));
    STOF_TRY(cfg_bool(config, "tie_word_embeddings", path, false, &d->tied_lm_head));
    STOF_TRY(cfg_int_or_null(config, "pad_token_id", path, -1, -1, d->vocab - 1, &d->pad_token_id));
    rope_desc rope;
    memset(&rope, 0, sizeof rope);
    STOF_TRY(llama_rope(config, path, head_dim, &rope));
    d->embed = EMBED_TOKEN;
    d->embed_norm = NORM_NONE;
    d->final_norm = NORM_RMS;
    d->norm_place = NORM_PRE;
    d->norm_bias = false;
    d->head = HEAD_LM;
    d->causal = true;
    STOF_TRY(cfg_alloc_layers(d, layers));
    for (int i = 0; i < layers; i++) {
        layer_desc *l = &d->layer[i];
        l->attn_norm = l->mlp_norm = NORM_RMS;
        l->heads = heads;
        l->kv_heads = kv_heads;
        l->head_dim = head_dim;
        l->pos = POS_ROPE;
        l->rope = rope;
        int window = 0;
        STOF_TRY(read_window(config, path, d, i, &window));
        l->mask = window ? MASK_KIND_CAUSAL_WINDOW : MASK_KIND_CAUSAL;
        l->window_left = window ? window - 1 : 0;
        l->mlp = MLP_GLU;
        l->act = act;
        l->intermediate = inter;
        l->qkv_bias = attn_bias;
        l->out_bias = attn_bias && !qwen2; /* Qwen2's o_proj has none */
        l->mlp_bias = mlp_bias;
    }
    return STOF_OK;
}

static const char *const llama_types[] = {"llama", "mistral", "qwen2", NULL};
static const char *const llama_prefixes[] = {"", "model.", NULL};

/* The GLU's activated half is the gate: canonical rows [gate; up]. */
static const weight_name llama_names[] = {
    {W_EMB_TOKEN, "embed_tokens.weight", false},
    {W_ATTN_NORM, "layers.%d.input_layernorm.weight", false},
    {W_Q, "layers.%d.self_attn.q_proj.weight", false},
    {W_Q_B, "layers.%d.self_attn.q_proj.bias", false},
    {W_K, "layers.%d.self_attn.k_proj.weight", false},
    {W_K_B, "layers.%d.self_attn.k_proj.bias", false},
    {W_V, "layers.%d.self_attn.v_proj.weight", false},
    {W_V_B, "layers.%d.self_attn.v_proj.bias", false},
    {W_O, "layers.%d.self_attn.o_proj.weight", false},
    {W_O_B, "layers.%d.self_attn.o_proj.bias", false},
    {W_MLP_NORM, "layers.%d.post_attention_layernorm.weight", false},
    {W_GATE, "layers.%d.mlp.gate_proj.weight", false},
    {W_GATE_B, "layers.%d.mlp.gate_proj.bias", false},
    {W_UP, "layers.%d.mlp.up_proj.weight", false},
    {W_UP_B, "layers.%d.mlp.up_proj.bias", false},
    {W_DOWN, "layers.%d.mlp.down_proj.weight", false},
    {W_DOWN_B, "layers.%d.mlp.down_proj.bias", false},
    {W_FINAL_NORM, "norm.weight", false},
    {W_LM_HEAD, "lm_head.weight", false},
};

const family_def family_llama = {
    .name = "llama",
    .model_types = llama_types,
    .prefixes = llama_prefixes,
    .names = llama_names,
    .n_names = (int)(sizeof llama_names / sizeof llama_names[0]),
    .describe = llama_describe,
};
