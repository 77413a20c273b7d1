/*
 * weights.c — BERT weights from a safetensors checkpoint into host fp32.
 *
 * Loading runs in two passes: first every expected tensor is found and its
 * dtype and shape checked against the config, then one buffer is allocated
 * and filled. A config that claims enormous sizes therefore fails on the
 * shape check before anything large is allocated.
 */
#include "model/weights.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "safetensors data is little-endian; big-endian hosts are not supported"
#endif

#define NAME_MAX_LEN 192

/* One expected tensor: where its floats go in the storage buffer and which
 * struct field points at them. */
typedef struct weight_slot {
    char name[NAME_MAX_LEN];     /* with the file's prefix */
    char alt_name[NAME_MAX_LEN]; /* older spelling (LayerNorm gamma/beta), or "" */
    int ndim;
    int64_t shape[2];
    int64_t offset; /* floats into the storage */
    float **field;
    const safetensors_tensor *t;
} weight_slot;

typedef struct weight_plan {
    weight_slot *slots;
    int count, cap;
    int64_t total; /* floats */
    const char *prefix;
} weight_plan;

/* Tensor names stay far below NAME_MAX_LEN: a prefix under 64 bytes plus
 * at most "encoder.layer.NNNN.attention.output.LayerNorm.weight". */
static void name_format(char *out, const char *fmt, ...) STOF_PRINTF(2, 3);
static void name_format(char *out, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(out, NAME_MAX_LEN, fmt, ap);
    va_end(ap);
}

static stof_status plan_add(weight_plan *p, float **field, int ndim, int64_t d0, int64_t d1,
                            const char *name, const char *alt)
{
    if (p->count == p->cap) {
        int ncap = p->cap ? p->cap * 2 : 64;
        weight_slot *ns = realloc(p->slots, (size_t)ncap * sizeof *ns);
        STOF_REQUIRE(ns, STOF_ERR_OOM, "out of memory planning the weights");
        p->slots = ns;
        p->cap = ncap;
    }
    weight_slot *s = &p->slots[p->count++];
    memset(s, 0, sizeof *s);
    name_format(s->name, "%s%s", p->prefix, name);
    if (alt) name_format(s->alt_name, "%s%s", p->prefix, alt);
    s->ndim = ndim;
    s->shape[0] = d0;
    s->shape[1] = d1;
    s->offset = p->total;
    s->field = field;
    p->total += ndim == 1 ? d0 : d0 * d1;
    return STOF_OK;
}

/* A LayerNorm's gamma and beta, under "LayerNorm.weight" or the older "LayerNorm.gamma". */
static stof_status plan_layernorm(weight_plan *p, float **g, float **b, const char *base, int64_t h)
{
    char n[NAME_MAX_LEN], alt[NAME_MAX_LEN];
    name_format(n, "%s.LayerNorm.weight", base);
    name_format(alt, "%s.LayerNorm.gamma", base);
    STOF_TRY(plan_add(p, g, 1, h, 0, n, alt));
    name_format(n, "%s.LayerNorm.bias", base);
    name_format(alt, "%s.LayerNorm.beta", base);
    return plan_add(p, b, 1, h, 0, n, alt);
}

static stof_status plan_linear(weight_plan *p, float **w, float **b, const char *base,
                               int64_t out_features, int64_t in_features)
{
    char n[NAME_MAX_LEN];
    name_format(n, "%s.weight", base);
    STOF_TRY(plan_add(p, w, 2, out_features, in_features, n, NULL));
    name_format(n, "%s.bias", base);
    return plan_add(p, b, 1, out_features, 0, n, NULL);
}

/* Weights first, then biases, for q, k, v: each run lands contiguous, which
 * makes the fused [3H, H] matrix and [3H] bias. */
static stof_status plan_layer(weight_plan *p, bert_layer_weights *lw, int i, const bert_config *c)
{
    int64_t h = c->hidden_size, inter = c->intermediate_size;
    char base[NAME_MAX_LEN], n[NAME_MAX_LEN];
    name_format(base, "encoder.layer.%d", i);
    const char *qkv[3] = {"query", "key", "value"};
    float **qkv_w[3] = {&lw->q_w, &lw->k_w, &lw->v_w};
    float **qkv_b[3] = {&lw->q_b, &lw->k_b, &lw->v_b};
    for (int j = 0; j < 3; j++) {
        name_format(n, "%s.attention.self.%s.weight", base, qkv[j]);
        STOF_TRY(plan_add(p, qkv_w[j], 2, h, h, n, NULL));
    }
    for (int j = 0; j < 3; j++) {
        name_format(n, "%s.attention.self.%s.bias", base, qkv[j]);
        STOF_TRY(plan_add(p, qkv_b[j], 1, h, 0, n, NULL));
    }
    name_format(n, "%s.attention.output.dense", base);
    STOF_TRY(plan_linear(p, &lw->attn_out_w, &lw->attn_out_b, n, h, h));
    name_format(n, "%s.attention.output", base);
    STOF_TRY(plan_layernorm(p, &lw->attn_ln_g, &lw->attn_ln_b, n, h));
    name_format(n, "%s.intermediate.dense", base);
    STOF_TRY(plan_linear(p, &lw->inter_w, &lw->inter_b, n, inter, h));
    name_format(n, "%s.output.dense", base);
    STOF_TRY(plan_linear(p, &lw->out_w, &lw->out_b, n, h, inter));
    name_format(n, "%s.output", base);
    return plan_layernorm(p, &lw->out_ln_g, &lw->out_ln_b, n, h);
}

static stof_status plan_model(weight_plan *p, bert_weights *w)
{
    const bert_config *c = &w->config;
    int64_t h = c->hidden_size;
    STOF_TRY(
        plan_add(p, &w->word_emb, 2, c->vocab_size, h, "embeddings.word_embeddings.weight", NULL));
    STOF_TRY(plan_add(p, &w->pos_emb, 2, c->max_position_embeddings, h,
                      "embeddings.position_embeddings.weight", NULL));
    STOF_TRY(plan_add(p, &w->type_emb, 2, c->type_vocab_size, h,
                      "embeddings.token_type_embeddings.weight", NULL));
    STOF_TRY(plan_layernorm(p, &w->emb_ln_g, &w->emb_ln_b, "embeddings", h));
    for (int i = 0; i < c->num_hidden_layers; i++)
        STOF_TRY(plan_layer(p, &w->layers[i], i, c));
    return STOF_OK;
}

/* ---- matching the plan against the file */

static const char *const anchor = "embeddings.word_embeddings.weight";

/* The prefix in front of HF names: "" (BertModel), "bert." (task heads), or
 * else the one prefix that some tensor ending in the word embeddings' name
 * carries ("model.", "0.auto_model.", ...). */
static stof_status find_prefix(const safetensors_file *f, char *prefix, size_t cap)
{
    static const char *const known[] = {"", "bert."};
    for (size_t k = 0; k < sizeof known / sizeof known[0]; k++) {
        char n[NAME_MAX_LEN];
        name_format(n, "%s%s", known[k], anchor);
        if (stof_safetensors_find(f, n)) {
            snprintf(prefix, cap, "%s", known[k]);
            return STOF_OK;
        }
    }
    const char *found = NULL;
    size_t la = strlen(anchor), found_len = 0;
    for (int i = 0; i < f->n_tensors; i++) {
        const char *n = f->tensors[i].name;
        size_t ln = strlen(n);
        if (ln <= la || strcmp(n + ln - la, anchor) != 0 || n[ln - la - 1] != '.') continue;
        STOF_REQUIRE(!found, STOF_ERR_FORMAT,
                     "%s: several encoders in one file ('%.80s' and '%.80s'); cannot tell which "
                     "is the BERT model",
                     f->name, found, n);
        found = n;
        found_len = ln - la;
    }
    STOF_REQUIRE(found, STOF_ERR_FORMAT,
                 "%s: tensor '%s' is missing (nor found as 'bert.%s'): not a BERT checkpoint",
                 f->name, anchor, anchor);
    STOF_REQUIRE(found_len < cap, STOF_ERR_FORMAT, "%s: tensor name prefix of '%.80s' is too long",
                 f->name, found);
    memcpy(prefix, found, found_len);
    prefix[found_len] = '\0';
    return STOF_OK;
}

static bool is_float_dtype(safetensors_dtype d)
{
    return d == ST_F32 || d == ST_F16 || d == ST_BF16;
}

static stof_status check_slot(const safetensors_file *f, weight_slot *s)
{
    char want[64], got[256];
    stof_safetensors_shape_str(s->shape, s->ndim, want, sizeof want);
    s->t = stof_safetensors_find(f, s->name);
    if (!s->t && s->alt_name[0]) s->t = stof_safetensors_find(f, s->alt_name);
    STOF_REQUIRE(s->t, STOF_ERR_FORMAT, "%s: tensor '%s' is missing (expected shape %s)", f->name,
                 s->name, want);
    const safetensors_tensor *t = s->t;
    stof_safetensors_shape_str(t->shape, t->ndim, got, sizeof got);
    STOF_REQUIRE(is_float_dtype(t->dtype), STOF_ERR_FORMAT,
                 "%s: tensor '%s' has dtype %s; expected F32, F16 or BF16", f->name, t->name,
                 stof_safetensors_dtype_name(t->dtype));
    bool same = t->ndim == s->ndim;
    for (int d = 0; same && d < s->ndim; d++)
        same = t->shape[d] == s->shape[d];
    STOF_REQUIRE(same, STOF_ERR_FORMAT, "%s: tensor '%s' has shape %s, expected %s", f->name,
                 t->name, got, want);
    return STOF_OK;
}

/* Element i of an F16/BF16 tensor; the data carries no alignment promise. */
static uint16_t load_u16(const uint8_t *p, int64_t i)
{
    uint16_t v;
    memcpy(&v, p + 2 * i, sizeof v);
    return v;
}

static void convert_to_f32(const safetensors_tensor *t, float *dst)
{
    const uint8_t *src = t->data;
    switch (t->dtype) {
    case ST_F32: memcpy(dst, src, (size_t)t->numel * sizeof(float)); break;
    case ST_F16:
        for (int64_t i = 0; i < t->numel; i++)
            dst[i] = stof_f16_to_f32(load_u16(src, i));
        break;
    case ST_BF16:
        for (int64_t i = 0; i < t->numel; i++)
            dst[i] = stof_bf16_to_f32(load_u16(src, i));
        break;
    default: break; /* check_slot admits float dtypes only */
    }
}

/* More layers in the file than the config uses is legal (a truncated model)
 * but usually a config mistake, so it is reported. */
static void warn_unused_layers(const safetensors_file *f, const char *prefix, int layers)
{
    char n[NAME_MAX_LEN];
    name_format(n, "%sencoder.layer.%d.attention.self.query.weight", prefix, layers);
    if (stof_safetensors_find(f, n))
        stof_log(STOF_LOG_WARN, "%s: holds '%s' but num_hidden_layers is %d; extra layers unused",
                 f->name, n, layers);
}

static stof_status fill_weights(const safetensors_file *f, weight_plan *p, bert_weights *w)
{
    for (int i = 0; i < p->count; i++)
        STOF_TRY(check_slot(f, &p->slots[i]));
    STOF_TRY(stof_host_alloc((size_t)p->total * sizeof(float), (void **)&w->storage));
    for (int i = 0; i < p->count; i++) {
        weight_slot *s = &p->slots[i];
        *s->field = w->storage + s->offset;
        convert_to_f32(s->t, *s->field);
        STOF_TRY(stof_check_finite(*s->field, s->t->numel, f->name, s->t->name));
    }
    for (int i = 0; i < w->config.num_hidden_layers; i++) {
        w->layers[i].qkv_w = w->layers[i].q_w;
        w->layers[i].qkv_b = w->layers[i].q_b;
    }
    w->n_params = p->total;
    w->stored_dtype = p->slots[0].t->dtype;
    return STOF_OK;
}

stof_status stof_bert_weights_from_safetensors(const safetensors_file *f, const bert_config *cfg,
                                               bert_weights *out)
{
    STOF_REQUIRE(f && cfg && out, STOF_ERR_INVALID_ARG, "bert weights: NULL argument");
    memset(out, 0, sizeof *out);
    STOF_TRY(stof_bert_config_validate(cfg, f->name));
    out->config = *cfg;
    STOF_TRY(find_prefix(f, out->prefix, sizeof out->prefix));
    weight_plan plan;
    memset(&plan, 0, sizeof plan);
    plan.prefix = out->prefix;
    stof_status st = stof_host_calloc((size_t)cfg->num_hidden_layers, sizeof *out->layers,
                                      (void **)&out->layers);
    if (st == STOF_OK) st = plan_model(&plan, out);
    if (st == STOF_OK) st = fill_weights(f, &plan, out);
    free(plan.slots);
    if (st != STOF_OK) {
        stof_bert_weights_free(out);
        return st;
    }
    warn_unused_layers(f, out->prefix, cfg->num_hidden_layers);
    return STOF_OK;
}

stof_status stof_bert_weights_load_file(const char *path, const bert_config *cfg, bert_weights *out)
{
    STOF_REQUIRE(path && cfg && out, STOF_ERR_INVALID_ARG, "bert weights: NULL argument");
    memset(out, 0, sizeof *out);
    safetensors_file *f;
    STOF_TRY(stof_safetensors_open(path, &f));
    stof_status st = stof_bert_weights_from_safetensors(f, cfg, out);
    stof_safetensors_close(f);
    return st;
}

stof_status stof_bert_load_dir(const char *dir, bert_files *files, bert_weights *out)
{
    STOF_REQUIRE(dir && out, STOF_ERR_INVALID_ARG, "bert load: NULL argument");
    memset(out, 0, sizeof *out);
    bert_files *loc;
    STOF_TRY(stof_host_calloc(1, sizeof *loc, (void **)&loc));
    bert_config cfg;
    stof_status st = stof_bert_locate(dir, loc);
    if (st == STOF_OK) st = stof_bert_config_load(loc->config_path, &cfg);
    if (st == STOF_OK && loc->pooling_dim && loc->pooling_dim != cfg.hidden_size)
        st = stof_error(STOF_ERR_FORMAT,
                        "%s: pooling word_embedding_dimension %d differs from hidden_size %d", dir,
                        loc->pooling_dim, cfg.hidden_size);
    if (st == STOF_OK) st = stof_bert_weights_load_file(loc->weights_path, &cfg, out);
    if (st == STOF_OK && files) *files = *loc;
    free(loc);
    return st;
}

void stof_bert_weights_free(bert_weights *w)
{
    if (!w) return;
    free(w->storage);
    free(w->layers);
    memset(w, 0, sizeof *w);
}

int stof_bert_weights_summary(const bert_weights *w, char *buf, size_t cap)
{
    const bert_config *c = &w->config;
    const char *act = c->hidden_act_name[0] ? c->hidden_act_name : stof_bert_act_str(c->hidden_act);
    double n = (double)w->n_params;
    const char *unit = n >= 1e9 ? "B" : n >= 1e6 ? "M" : "K";
    double scaled = n >= 1e9 ? n / 1e9 : n >= 1e6 ? n / 1e6 : n / 1e3;
    return snprintf(buf, cap,
                    "%s: %d layers, hidden %d, %d heads (dim %d), intermediate %d, %s, vocab %d, "
                    "positions %d, %.1f%s params (stored %s)",
                    c->model_type[0] ? c->model_type : "bert", c->num_hidden_layers, c->hidden_size,
                    c->num_attention_heads, c->head_dim, c->intermediate_size, act, c->vocab_size,
                    c->max_position_embeddings, scaled, unit,
                    stof_safetensors_dtype_name(w->stored_dtype));
}

void stof_bert_weights_print_summary(const bert_weights *w, FILE *fp)
{
    char line[512];
    stof_bert_weights_summary(w, line, sizeof line);
    fprintf(fp ? fp : stdout, "%s\n", line);
}
