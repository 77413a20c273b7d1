/*
 * family_gpt2.c — GPT-2 as data: learned positions, pre-LayerNorm layers with
 * biases, causal attention, a plain GELU-tanh MLP, a final LayerNorm and the
 * LM head tied to the token embeddings. Its linears are Conv1D, stored
 * [in, out]; the loader transposes them into the canonical [out, in].
 */
#include "model/config.h"

#include <stdio.h>
#include <string.h>

static stof_status gpt2_describe(const cJSON *config, const char *path, model_desc *d)
{
    int layers, heads;
    snprintf(d->family, sizeof d->family, "gpt2");
    snprintf(d->model_type, sizeof d->model_type, "gpt2");
    STOF_TRY(cfg_int(config, "n_embd", path, true, 0, 1, 65536, &d->hidden));
    STOF_TRY(cfg_int(config, "n_layer", path, true, 0, 1, 1024, &layers));
    STOF_TRY(cfg_int(config, "n_head", path, true, 0, 1, 1024, &heads));
    STOF_TRY(cfg_int(config, "vocab_size", path, true, 0, 1, 1 << 24, &d->vocab));
    STOF_TRY(cfg_int(config, "n_positions", path, false, 1024, 1, 1 << 20, &d->max_positions));
    STOF_REQUIRE(d->hidden % heads == 0, STOF_ERR_FORMAT,
                 "%s: n_embd %d is not divisible by n_head %d", path, d->hidden, heads);
    int inter;
    STOF_TRY(cfg_int_or_null(config, "n_inner", path, 4 * d->hidden, 1, 1 << 20, &inter));
    stof_act act;
    STOF_TRY(cfg_act(config, "activation_function", path, "gelu_new", &act));
    STOF_TRY(cfg_float(config, "layer_norm_epsilon", path, false, 1e-5, 1e-30, 0.1, &d->norm_eps));
    bool scale = true, by_layer = false, upcast = false;
    STOF_TRY(cfg_bool(config, "scale_attn_weights", path, true, &scale));
    STOF_TRY(cfg_bool(config, "scale_attn_by_inverse_layer_idx", path, false, &by_layer));
    STOF_TRY(cfg_bool(config, "reorder_and_upcast_attn", path, false, &upcast));
    STOF_REQUIRE(scale && !by_layer, STOF_ERR_UNSUPPORTED,
                 "%s: scale_attn_weights false or scale_attn_by_inverse_layer_idx true is not "
                 "supported (stof scales scores by 1/sqrt(head_dim))",
                 path);
    STOF_TRY(cfg_bool(config, "tie_word_embeddings", path, true, &d->tied_lm_head));
    d->embed = EMBED_TOKEN_POS;
    d->embed_norm = NORM_NONE;
    d->final_norm = NORM_LAYER;
    d->norm_place = NORM_PRE;
    d->norm_bias = true;
    d->head = HEAD_LM;
    d->causal = true;
    d->pad_token_id = -1;
    STOF_TRY(cfg_alloc_layers(d, layers));
    for (int i = 0; i < layers; i++) {
        layer_desc *l = &d->layer[i];
        l->attn_norm = l->mlp_norm = NORM_LAYER;
        l->heads = l->kv_heads = heads;
        l->head_dim = d->hidden / heads;
        l->mask = MASK_KIND_CAUSAL;
        l->mlp = MLP_PLAIN;
        l->act = act;
        l->intermediate = inter;
        l->qkv_bias = l->out_bias = l->mlp_bias = true;
    }
    return STOF_OK;
}

static const char *const gpt2_types[] = {"gpt2", NULL};
static const char *const gpt2_prefixes[] = {"", "transformer.", NULL};

static const weight_name gpt2_names[] = {
    {W_EMB_TOKEN, "wte.weight", false},
    {W_EMB_POS, "wpe.weight", false},
    {W_ATTN_NORM, "h.%d.ln_1.weight", false},
    {W_ATTN_NORM_B, "h.%d.ln_1.bias", false},
    {W_QKV, "h.%d.attn.c_attn.weight", true},
    {W_QKV_B, "h.%d.attn.c_attn.bias", false},
    {W_O, "h.%d.attn.c_proj.weight", true},
    {W_O_B, "h.%d.attn.c_proj.bias", false},
    {W_MLP_NORM, "h.%d.ln_2.weight", false},
    {W_MLP_NORM_B, "h.%d.ln_2.bias", false},
    {W_UP, "h.%d.mlp.c_fc.weight", true},
    {W_UP_B, "h.%d.mlp.c_fc.bias", false},
    {W_DOWN, "h.%d.mlp.c_proj.weight", true},
    {W_DOWN_B, "h.%d.mlp.c_proj.bias", false},
    {W_FINAL_NORM, "ln_f.weight", false},
    {W_FINAL_NORM_B, "ln_f.bias", false},
    {W_LM_HEAD, "lm_head.weight", false}, /* outside the prefix; only when untied */
};

const family_def family_gpt2 = {
    .name = "gpt2",
    .model_types = gpt2_types,
    .prefixes = gpt2_prefixes,
    .names = gpt2_names,
    .n_names = (int)(sizeof gpt2_names / sizeof gpt2_names[0]),
    .describe = gpt2_describe,
};
