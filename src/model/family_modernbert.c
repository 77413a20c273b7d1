/*
 * family_modernbert.c — ModernBERT as data: token embeddings and a LayerNorm
 * (no biases unless norm_bias), pre-norm layers whose first attention norm
 * is the identity, fused Wqkv, RoPE, a GeGLU MLP through Wi [2I, H] (the
 * activated half first, as the canonical layout wants), a final norm.
 * Attention is global every global_attn_every_n_layers layers (layer 0
 * included) with global_rope_theta, and elsewhere a local window of
 * |i - j| <= local_attention / 2 with local_rope_theta. HF 5 spells the same
 * as "layer_types" and a per-kind "rope_parameters", which win when present.
 */
#include "model/config.h"

#include <cjson/cJSON.h>

#include <stdio.h>

/* The rope of one layer kind ("full_attention" / "sliding_attention"). */
static stof_status mb_rope(const cJSON *config, const char *path, bool sliding, int head_dim,
                           rope_desc *r)
{
    float theta;
    STOF_TRY(cfg_float(config, sliding ? "local_rope_theta" : "global_rope_theta", path, false,
                       sliding ? 10000.0 : 160000.0, 1e-3, 1e12, &theta));
    const cJSON *params = cJSON_GetObjectItemCaseSensitive(config, "rope_parameters");
    if (cJSON_IsObject(params))
        params = cJSON_GetObjectItemCaseSensitive(params,
                                                  sliding ? "sliding_attention" : "full_attention");
    else
        params = NULL;
    STOF_TRY(cfg_rope(params, path, theta, r));
    r->rot_dim = head_dim;
    return STOF_OK;
}

static stof_status mb_describe(const cJSON *config, const char *path, model_desc *d)
{
    int layers, heads, inter, every, local;
    snprintf(d->family, sizeof d->family, "modernbert");
    snprintf(d->model_type, sizeof d->model_type, "modernbert");
    STOF_TRY(cfg_int(config, "hidden_size", path, true, 0, 1, 65536, &d->hidden));
    STOF_TRY(cfg_int(config, "num_hidden_layers", path, true, 0, 1, 1024, &layers));
    STOF_TRY(cfg_int(config, "num_attention_heads", path, true, 0, 1, 1024, &heads));
    STOF_TRY(cfg_int(config, "intermediate_size", path, true, 0, 1, 1 << 20, &inter));
    STOF_TRY(cfg_int(config, "vocab_size", path, true, 0, 1, 1 << 24, &d->vocab));
    STOF_TRY(cfg_int(config, "max_position_embeddings", path, false, 8192, 1, 1 << 24,
                     &d->max_positions));
    STOF_TRY(cfg_float(config, "norm_eps", path, false, 1e-5, 1e-30, 0.1, &d->norm_eps));
    STOF_TRY(cfg_bool(config, "norm_bias", path, false, &d->norm_bias));
    bool attn_bias = false, mlp_bias = false;
    STOF_TRY(cfg_bool(config, "attention_bias", path, false, &attn_bias));
    STOF_TRY(cfg_bool(config, "mlp_bias", path, false, &mlp_bias));
    stof_act act;
    STOF_TRY(cfg_act(config, "hidden_activation", path, "gelu", &act));
    STOF_TRY(cfg_int(config, "global_attn_every_n_layers", path, false, 3, 1, 1 << 20, &every));
    STOF_TRY(cfg_int(config, "local_attention", path, false, 128, 0, 1 << 24, &local));
    STOF_TRY(cfg_int_or_null(config, "pad_token_id", path, -1, -1, d->vocab - 1, &d->pad_token_id));
    STOF_REQUIRE(d->hidden % heads == 0, STOF_ERR_FORMAT,
                 "%s: hidden_size %d is not divisible by num_attention_heads %d", path, d->hidden,
                 heads);
    d->embed = EMBED_TOKEN;
    d->embed_norm = NORM_LAYER;
    d->final_norm = NORM_LAYER;
    d->norm_place = NORM_PRE;
    d->head = HEAD_HIDDEN;
    STOF_TRY(cfg_alloc_layers(d, layers));
    for (int i = 0; i < layers; i++) {
        layer_desc *l = &d->layer[i];
        int sliding;
        STOF_TRY(cfg_layer_type(config, path, layers, i, &sliding));
        if (sliding < 0) sliding = i % every != 0;
        l->attn_norm = i == 0 ? NORM_NONE : NORM_LAYER;
        l->mlp_norm = NORM_LAYER;
        l->heads = l->kv_heads = heads;
        l->head_dim = d->hidden / heads;
        l->pos = POS_ROPE;
        STOF_TRY(mb_rope(config, path, sliding, l->head_dim, &l->rope));
        l->mask = sliding ? MASK_KIND_WINDOW : MASK_KIND_FULL;
        l->window_left = l->window_right = sliding ? local / 2 : 0;
        l->mlp = MLP_GLU;
        l->act = act;
        l->intermediate = inter;
        l->qkv_bias = l->out_bias = attn_bias;
        l->mlp_bias = mlp_bias;
    }
    return STOF_OK;
}

static const char *const mb_types[] = {"modernbert", NULL};
static const char *const mb_prefixes[] = {"", "model.", NULL};

static const weight_name mb_names[] = {
    {W_EMB_TOKEN, "embeddings.tok_embeddings.weight", false},
    {W_EMB_NORM, "embeddings.norm.weight", false},
    {W_EMB_NORM_B, "embeddings.norm.bias", false},
    {W_ATTN_NORM, "layers.%d.attn_norm.weight", false},
    {W_ATTN_NORM_B, "layers.%d.attn_norm.bias", false},
    {W_QKV, "layers.%d.attn.Wqkv.weight", false},
    {W_QKV_B, "layers.%d.attn.Wqkv.bias", false},
    {W_O, "layers.%d.attn.Wo.weight", false},
    {W_O_B, "layers.%d.attn.Wo.bias", false},
    {W_MLP_NORM, "layers.%d.mlp_norm.weight", false},
    {W_MLP_NORM_B, "layers.%d.mlp_norm.bias", false},
    {W_UP_GATE, "layers.%d.mlp.Wi.weight", false},
    {W_DOWN, "layers.%d.mlp.Wo.weight", false},
    {W_DOWN_B, "layers.%d.mlp.Wo.bias", false},
    {W_FINAL_NORM, "final_norm.weight", false},
    {W_FINAL_NORM_B, "final_norm.bias", false},
};

const family_def family_modernbert = {
    .name = "modernbert",
    .model_types = mb_types,
    .prefixes = mb_prefixes,
    .names = mb_names,
    .n_names = (int)(sizeof mb_names / sizeof mb_names[0]),
    .describe = mb_describe,
};
