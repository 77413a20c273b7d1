/*
 * family_bert.c — BERT as data: post-LayerNorm layers with biases, learned
 * absolute positions and token types, bidirectional attention. The config
 * is read by stof_bert_config_from_json (config.c), whose checks the BERT
 * tests pin down; this file maps it onto a model_desc and names the tensors.
 */
#include "model/config.h"

#include <stdio.h>

static stof_status bert_describe(const cJSON *config, const char *path, model_desc *d)
{
    bert_config c;
    STOF_TRY(stof_bert_config_from_json(config, path, &c));
    snprintf(d->family, sizeof d->family, "bert");
    snprintf(d->model_type, sizeof d->model_type, "%s", c.model_type);
    d->hidden = c.hidden_size;
    d->vocab = c.vocab_size;
    d->embed = EMBED_TOKEN_POS_TYPE;
    d->max_positions = c.max_position_embeddings;
    d->type_vocab = c.type_vocab_size;
    d->embed_norm = NORM_LAYER;
    d->final_norm = NORM_NONE;
    d->norm_place = NORM_POST;
    d->norm_bias = true;
    d->norm_eps = c.layer_norm_eps;
    d->head = HEAD_HIDDEN;
    d->pad_token_id = -1;
    STOF_TRY(cfg_int(config, "pad_token_id", path, false, -1, -1, c.vocab_size - 1,
                     &d->pad_token_id));
    STOF_TRY(cfg_alloc_layers(d, c.num_hidden_layers));
    for (int i = 0; i < d->layers; i++) {
        layer_desc *l = &d->layer[i];
        l->attn_norm = l->mlp_norm = NORM_LAYER;
        l->heads = l->kv_heads = c.num_attention_heads;
        l->head_dim = c.head_dim;
        l->mask = MASK_KIND_FULL;
        l->mlp = MLP_PLAIN;
        l->act = c.hidden_act;
        l->intermediate = c.intermediate_size;
        l->qkv_bias = l->out_bias = l->mlp_bias = true;
    }
    return STOF_OK;
}

static const char *const bert_types[] = {"bert", NULL};
static const char *const bert_prefixes[] = {"", "bert.", "model.", NULL};

/* LayerNorms also appear as .gamma / .beta in old checkpoints (weights.c tries both). */
static const weight_name bert_names[] = {
    {W_EMB_TOKEN, "embeddings.word_embeddings.weight", false},
    {W_EMB_POS, "embeddings.position_embeddings.weight", false},
    {W_EMB_TYPE, "embeddings.token_type_embeddings.weight", false},
    {W_EMB_NORM, "embeddings.LayerNorm.weight", false},
    {W_EMB_NORM_B, "embeddings.LayerNorm.bias", false},
    {W_Q, "encoder.layer.%d.attention.self.query.weight", false},
    {W_Q_B, "encoder.layer.%d.attention.self.query.bias", false},
    {W_K, "encoder.layer.%d.attention.self.key.weight", false},
    {W_K_B, "encoder.layer.%d.attention.self.key.bias", false},
    {W_V, "encoder.layer.%d.attention.self.value.weight", false},
    {W_V_B, "encoder.layer.%d.attention.self.value.bias", false},
    {W_O, "encoder.layer.%d.attention.output.dense.weight", false},
    {W_O_B, "encoder.layer.%d.attention.output.dense.bias", false},
    {W_ATTN_NORM, "encoder.layer.%d.attention.output.LayerNorm.weight", false},
    {W_ATTN_NORM_B, "encoder.layer.%d.attention.output.LayerNorm.bias", false},
    {W_UP, "encoder.layer.%d.intermediate.dense.weight", false},
    {W_UP_B, "encoder.layer.%d.intermediate.dense.bias", false},
    {W_DOWN, "encoder.layer.%d.output.dense.weight", false},
    {W_DOWN_B, "encoder.layer.%d.output.dense.bias", false},
    {W_MLP_NORM, "encoder.layer.%d.output.LayerNorm.weight", false},
    {W_MLP_NORM_B, "encoder.layer.%d.output.LayerNorm.bias", false},
};

const family_def family_bert = {
    .name = "bert",
    .model_types = bert_types,
    .prefixes = bert_prefixes,
    .names = bert_names,
    .n_names = (int)(sizeof bert_names / sizeof bert_names[0]),
    .describe = bert_describe,
};
