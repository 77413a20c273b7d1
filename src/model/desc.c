/*
 * desc.c — what every model description must satisfy before an executor
 * walks it, its hash (the tuning cache's key), and the family registry.
 *
 * A layer's mask under a user's spec is the spec within the layer's band,
 * not a rewrite of its parts: the band composes with every kind of part
 * (global tokens, random blocks, dense masks) and the compiled tiles are
 * canonical, so "full,within:causal" compiles to what "causal" does.
 *
 * The hash is FNV-1a over the fields one by one, never over raw structs, so
 * padding bytes and pointer values never reach it and the key stays stable
 * across builds.
 */
#include "model/desc.h"

#include <stdlib.h>
#include <string.h>

void desc_free(model_desc *d)
{
    if (!d) return;
    free(d->layer);
    d->layer = NULL;
}

stof_status desc_layer_mask_spec(desc_mask mask, int left, int right, const stof_mask_spec *user,
                                 stof_mask_spec **out)
{
    *out = NULL;
    stof_mask_spec *s = NULL;
    if (user)
        STOF_TRY(stof_mask_spec_copy(user, &s));
    else
        STOF_TRY(stof_mask_spec_create(&s));
    /* Without a user spec the kind is its own part: the spec says what it is. */
    stof_status st = STOF_OK;
    switch (mask) {
    case MASK_KIND_FULL: st = user ? STOF_OK : stof_mask_spec_add_full(s); break;
    case MASK_KIND_CAUSAL:
        st = user ? stof_mask_spec_within_causal(s) : stof_mask_spec_add_causal(s);
        break;
    case MASK_KIND_WINDOW:
        st = user ? stof_mask_spec_within_window(s, left, right)
                  : stof_mask_spec_add_window(s, left, right);
        break;
    case MASK_KIND_CAUSAL_WINDOW:
        st =
            user ? stof_mask_spec_within_window(s, left, 0) : stof_mask_spec_add_window(s, left, 0);
        break;
    }
    if (st != STOF_OK) {
        stof_mask_spec_destroy(s);
        return st;
    }
    *out = s;
    return STOF_OK;
}

static uint64_t fnv_int(uint64_t h, int64_t v)
{
    return stof_fnv1a(h, &v, sizeof v);
}

static uint64_t fnv_float(uint64_t h, float v)
{
    uint32_t bits;
    memcpy(&bits, &v, sizeof bits);
    return fnv_int(h, bits);
}

static uint64_t hash_layer(uint64_t h, const layer_desc *l)
{
    const int64_t ints[] = {l->attn_norm, l->mlp_norm, l->heads, l->kv_heads, l->head_dim, l->pos,
                            l->rope.rot_dim, l->rope.scaling, l->rope.original_max_positions,
                            l->mask, l->window_left, l->window_right, l->mlp, l->act,
                            l->intermediate, l->qkv_bias, l->out_bias, l->mlp_bias};
    for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++)
        h = fnv_int(h, ints[i]);
    const float floats[] = {l->rope.theta, l->rope.factor, l->rope.low_freq_factor,
                            l->rope.high_freq_factor};
    for (size_t i = 0; i < sizeof floats / sizeof floats[0]; i++)
        h = fnv_float(h, floats[i]);
    return h;
}

uint64_t desc_hash(const model_desc *d)
{
    uint64_t h = STOF_FNV_BASIS;
    h = stof_fnv1a(h, d->family, strnlen(d->family, sizeof d->family));
    h = stof_fnv1a(h, d->model_type, strnlen(d->model_type, sizeof d->model_type));
    const int64_t ints[] = {d->hidden, d->vocab, d->layers, d->embed, d->max_positions,
                            d->type_vocab, d->embed_norm, d->final_norm, d->norm_place,
                            d->norm_bias, d->head, d->tied_lm_head, d->causal};
    for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++)
        h = fnv_int(h, ints[i]);
    h = fnv_float(h, d->norm_eps);
    for (int i = 0; i < d->layers && d->layer; i++)
        h = hash_layer(h, &d->layer[i]);
    return h;
}

static stof_status validate_layer(const model_desc *d, int i)
{
    const layer_desc *l = &d->layer[i];
    STOF_REQUIRE(l->heads > 0 && l->kv_heads > 0 && l->head_dim > 0, STOF_ERR_FORMAT,
                 "%s layer %d: heads %d, kv_heads %d and head_dim %d must be positive",
                 d->model_type, i, l->heads, l->kv_heads, l->head_dim);
    STOF_REQUIRE(l->heads % l->kv_heads == 0, STOF_ERR_FORMAT,
                 "%s layer %d: num_key_value_heads %d does not divide num_attention_heads %d",
                 d->model_type, i, l->kv_heads, l->heads);
    STOF_REQUIRE(l->intermediate > 0, STOF_ERR_FORMAT, "%s layer %d: intermediate_size %d",
                 d->model_type, i, l->intermediate);
    if (l->pos == POS_ROPE) {
        STOF_REQUIRE(l->rope.rot_dim > 0 && l->rope.rot_dim % 2 == 0 &&
                         l->rope.rot_dim <= l->head_dim,
                     STOF_ERR_FORMAT,
                     "%s layer %d: rotary dims %d must be even and in (0, head_dim = %d]",
                     d->model_type, i, l->rope.rot_dim, l->head_dim);
        STOF_REQUIRE(l->rope.theta > 0, STOF_ERR_FORMAT, "%s layer %d: rope_theta %g",
                     d->model_type, i, (double)l->rope.theta);
        STOF_REQUIRE(l->rope.scaling == ROPE_SCALING_NONE || l->rope.factor > 0, STOF_ERR_FORMAT,
                     "%s layer %d: rope_scaling factor %g must be positive", d->model_type, i,
                     (double)l->rope.factor);
        STOF_REQUIRE(l->rope.scaling != ROPE_SCALING_LLAMA3 ||
                         (l->rope.high_freq_factor > l->rope.low_freq_factor &&
                          l->rope.low_freq_factor > 0 && l->rope.original_max_positions > 0),
                     STOF_ERR_FORMAT,
                     "%s layer %d: llama3 rope_scaling needs 0 < low_freq_factor < "
                     "high_freq_factor and original_max_position_embeddings > 0",
                     d->model_type, i);
    }
    STOF_REQUIRE(l->window_left >= 0 && l->window_right >= 0, STOF_ERR_FORMAT,
                 "%s layer %d: window (%d, %d) must not be negative", d->model_type, i,
                 l->window_left, l->window_right);
    STOF_REQUIRE(l->attn_norm != NORM_NONE || i == 0 || d->norm_place == NORM_PRE, STOF_ERR_FORMAT,
                 "%s layer %d: only a pre-norm layer may skip its attention norm", d->model_type,
                 i);
    return STOF_OK;
}

stof_status desc_validate(const model_desc *d)
{
    STOF_REQUIRE(d && d->layer, STOF_ERR_INVALID_ARG, "desc_validate: no description");
    STOF_REQUIRE(d->hidden > 0 && d->vocab > 0 && d->layers > 0, STOF_ERR_FORMAT,
                 "%s: hidden_size %d, vocab_size %d and num_hidden_layers %d must be positive",
                 d->model_type, d->hidden, d->vocab, d->layers);
    STOF_REQUIRE(d->max_positions > 0, STOF_ERR_FORMAT, "%s: max_position_embeddings %d",
                 d->model_type, d->max_positions);
    STOF_REQUIRE(d->embed != EMBED_TOKEN_POS_TYPE || d->type_vocab > 0, STOF_ERR_FORMAT,
                 "%s: type_vocab_size %d", d->model_type, d->type_vocab);
    STOF_REQUIRE(d->norm_eps > 0, STOF_ERR_FORMAT, "%s: norm eps %g must be positive",
                 d->model_type, (double)d->norm_eps);
    STOF_REQUIRE(d->pad_token_id >= -1 && d->pad_token_id < d->vocab, STOF_ERR_FORMAT,
                 "%s: pad_token_id %d is outside the vocabulary", d->model_type, d->pad_token_id);
    for (int i = 0; i < d->layers; i++)
        STOF_TRY(validate_layer(d, i));
    return STOF_OK;
}

static const family_def *const families[] = {&family_bert, &family_gpt2, &family_llama,
                                             &family_modernbert, NULL};

const family_def *const *family_all(void)
{
    return families;
}

const family_def *family_for_type(const char *model_type)
{
    if (!model_type) return NULL;
    for (int f = 0; families[f]; f++)
        for (int t = 0; families[f]->model_types[t]; t++)
            if (strcmp(families[f]->model_types[t], model_type) == 0) return families[f];
    return NULL;
}
