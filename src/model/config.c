/*
 * config.c — config.json of a Hugging Face BertModel, and the folder layouts
 * (plain and sentence-transformers) that hold it.
 *
 * Keys that save_pretrained always writes but BertConfig can default
 * (hidden_act, layer_norm_eps, max_position_embeddings, type_vocab_size) take
 * BertConfig's defaults when absent, as transformers does; the sizes that
 * fix every weight shape are required. Anything stof would run differently
 * from transformers (another model type, relative positions, a decoder, an
 * unknown activation or pooling) is refused rather than approximated.
 */
#include "model/config.h"
#include "model/engine.h"

#include <cjson/cJSON.h>

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* config.json, modules.json and pooling configs are a few kilobytes. */
#define SMALL_JSON_MAX (16u << 20)

stof_status stof_model_read_text(const char *path, size_t max_bytes, char **out, size_t *len)
{
    size_t n;
    STOF_TRY(stof_read_file(path, max_bytes, out, &n));
    if (len) *len = n;
    return STOF_OK;
}

/* ---- JSON helpers */

static stof_status parse_json(const char *text, size_t len, const char *name, cJSON **out)
{
    /* A private NUL-terminated copy: the parser never sees past the text. */
    char *copy;
    STOF_TRY(stof_host_alloc(len + 1, (void **)&copy));
    memcpy(copy, text, len);
    copy[len] = '\0';
    const char *stop = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(copy, len, &stop, 0);
    size_t at = stop && stop >= copy ? (size_t)(stop - copy) : 0;
    if (root) {
        while (at < len &&
               (copy[at] == ' ' || copy[at] == '\t' || copy[at] == '\n' || copy[at] == '\r'))
            at++;
    }
    free(copy);
    if (!root)
        return stof_error(STOF_ERR_FORMAT, "%s: not valid JSON (error near byte %zu)", name, at);
    if (at != len) {
        cJSON_Delete(root);
        return stof_error(STOF_ERR_FORMAT, "%s: unexpected bytes after the JSON at byte %zu", name,
                          at);
    }
    *out = root;
    return STOF_OK;
}

stof_status cfg_load_json(const char *path, cJSON **out)
{
    char *text;
    size_t len;
    STOF_TRY(stof_model_read_text(path, SMALL_JSON_MAX, &text, &len));
    stof_status st = parse_json(text, len, path, out);
    free(text);
    return st;
}

static void describe(const cJSON *v, char *buf, size_t cap)
{
    if (cJSON_IsNumber(v))
        snprintf(buf, cap, "%.17g", v->valuedouble);
    else if (cJSON_IsString(v))
        snprintf(buf, cap, "\"%.48s\"", v->valuestring);
    else if (cJSON_IsBool(v))
        snprintf(buf, cap, "%s", cJSON_IsTrue(v) ? "true" : "false");
    else if (cJSON_IsArray(v))
        snprintf(buf, cap, "an array");
    else if (cJSON_IsObject(v))
        snprintf(buf, cap, "an object");
    else
        snprintf(buf, cap, "null");
}

/* An integer field in [lo, hi]; dflt is used when absent and not required. */
stof_status cfg_int(const cJSON *root, const char *key, const char *name, bool required, int dflt,
                    int lo, int hi, int *out)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, key);
    if (!v) {
        STOF_REQUIRE(!required, STOF_ERR_FORMAT, "%s: \"%s\" is missing", name, key);
        *out = dflt;
        return STOF_OK;
    }
    char got[80];
    describe(v, got, sizeof got);
    STOF_REQUIRE(cJSON_IsNumber(v) && v->valuedouble == floor(v->valuedouble), STOF_ERR_FORMAT,
                 "%s: \"%s\" must be an integer, got %s", name, key, got);
    STOF_REQUIRE(v->valuedouble >= lo && v->valuedouble <= hi, STOF_ERR_FORMAT,
                 "%s: \"%s\" = %s is out of range [%d, %d]", name, key, got, lo, hi);
    *out = (int)v->valuedouble;
    return STOF_OK;
}

/* A string field copied into out[cap]; dflt when absent. */
stof_status cfg_string(const cJSON *root, const char *key, const char *name, const char *dflt,
                       char *out, size_t cap)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, key);
    const char *s = dflt;
    if (v) {
        char got[80];
        describe(v, got, sizeof got);
        STOF_REQUIRE(cJSON_IsString(v), STOF_ERR_FORMAT, "%s: \"%s\" must be a string, got %s",
                     name, key, got);
        s = v->valuestring;
    }
    STOF_REQUIRE(strlen(s) < cap, STOF_ERR_UNSUPPORTED,
                 "%s: \"%s\" = \"%.48s...\" is not supported", name, key, s);
    memcpy(out, s, strlen(s) + 1);
    return STOF_OK;
}

/* A number field in [lo, hi]; dflt when absent or null and not required. */
stof_status cfg_float(const cJSON *root, const char *key, const char *name, bool required,
                      double dflt, double lo, double hi, float *out)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, key);
    if (!v || cJSON_IsNull(v)) {
        STOF_REQUIRE(!required, STOF_ERR_FORMAT, "%s: \"%s\" is missing", name, key);
        *out = (float)dflt;
        return STOF_OK;
    }
    char got[80];
    describe(v, got, sizeof got);
    STOF_REQUIRE(cJSON_IsNumber(v) && v->valuedouble >= lo && v->valuedouble <= hi,
                 STOF_ERR_FORMAT, "%s: \"%s\" = %s is not a number in [%g, %g]", name, key, got,
                 lo, hi);
    *out = (float)v->valuedouble;
    return STOF_OK;
}

stof_status cfg_bool(const cJSON *root, const char *key, const char *name, bool dflt, bool *out)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, key);
    if (!v || cJSON_IsNull(v)) {
        *out = dflt;
        return STOF_OK;
    }
    char got[80];
    describe(v, got, sizeof got);
    STOF_REQUIRE(cJSON_IsBool(v), STOF_ERR_FORMAT, "%s: \"%s\" must be true or false, got %s",
                 name, key, got);
    *out = cJSON_IsTrue(v);
    return STOF_OK;
}

/* One rope parameter set: HF 5's rope_parameters object ({"rope_type",
 * "rope_theta", "factor", ...}) or HF 4's rope_scaling object beside a
 * top-level rope_theta (theta then comes in as dflt_theta). */
stof_status cfg_rope(const cJSON *params, const char *name, double dflt_theta, rope_desc *out)
{
    out->scaling = ROPE_SCALING_NONE;
    out->factor = 1.0f;
    STOF_TRY(cfg_float(params, "rope_theta", name, false, dflt_theta, 1e-3, 1e12, &out->theta));
    if (!params) return STOF_OK;
    STOF_REQUIRE(cJSON_IsObject(params), STOF_ERR_FORMAT, "%s: rope parameters must be an object",
                 name);
    char type[32];
    const char *key = cJSON_GetObjectItemCaseSensitive(params, "rope_type") ? "rope_type" : "type";
    STOF_TRY(cfg_string(params, key, name, "default", type, sizeof type));
    if (strcmp(type, "default") == 0) return STOF_OK;
    STOF_TRY(cfg_float(params, "factor", name, true, 1, 1e-6, 1e6, &out->factor));
    if (strcmp(type, "linear") == 0) {
        out->scaling = ROPE_SCALING_LINEAR;
        return STOF_OK;
    }
    STOF_REQUIRE(strcmp(type, "llama3") == 0, STOF_ERR_UNSUPPORTED,
                 "%s: rope_type \"%s\" is not supported (default, linear, llama3)", name, type);
    out->scaling = ROPE_SCALING_LLAMA3;
    STOF_TRY(cfg_float(params, "low_freq_factor", name, true, 1, 1e-6, 1e6,
                       &out->low_freq_factor));
    STOF_TRY(cfg_float(params, "high_freq_factor", name, true, 4, 1e-6, 1e6,
                       &out->high_freq_factor));
    return cfg_int(params, "original_max_position_embeddings", name, true, 0, 1, 1 << 24,
                   &out->original_max_positions);
}

/* An integer field that may be null (HF writes "sliding_window": null): dflt then. */
stof_status cfg_int_or_null(const cJSON *root, const char *key, const char *name, int dflt, int lo,
                            int hi, int *out)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, key);
    if (cJSON_IsNull(v)) {
        *out = dflt;
        return STOF_OK;
    }
    return cfg_int(root, key, name, false, dflt, lo, hi, out);
}

/* Layer i's entry of "layer_types" ("full_attention" / "sliding_attention"):
 * 1 sliding, 0 full, -1 when the config has no such list. */
stof_status cfg_layer_type(const cJSON *root, const char *name, int layers, int i, int *sliding)
{
    const cJSON *types = cJSON_GetObjectItemCaseSensitive(root, "layer_types");
    *sliding = -1;
    if (!types || cJSON_IsNull(types)) return STOF_OK;
    STOF_REQUIRE(cJSON_IsArray(types) && cJSON_GetArraySize(types) == layers, STOF_ERR_FORMAT,
                 "%s: \"layer_types\" must be an array of %d strings", name, layers);
    const cJSON *t = cJSON_GetArrayItem(types, i);
    STOF_REQUIRE(cJSON_IsString(t), STOF_ERR_FORMAT, "%s: \"layer_types\"[%d] is not a string",
                 name, i);
    if (strcmp(t->valuestring, "full_attention") == 0)
        *sliding = 0;
    else if (strcmp(t->valuestring, "sliding_attention") == 0)
        *sliding = 1;
    else
        return stof_error(STOF_ERR_UNSUPPORTED,
                          "%s: \"layer_types\"[%d] = \"%.48s\" is not supported "
                          "(full_attention, sliding_attention)",
                          name, i, t->valuestring);
    return STOF_OK;
}

/* The family's layers, allocated once (desc_free releases them). */
stof_status cfg_alloc_layers(model_desc *d, int layers)
{
    d->layers = layers;
    return stof_host_calloc((size_t)layers, sizeof *d->layer, (void **)&d->layer);
}

/* ---- config.json */

static const struct {
    const char *name;
    stof_act act;
} act_names[] = {
    {"gelu", ACT_GELU},
    {"gelu_new", ACT_GELU_TANH},
    {"gelu_pytorch_tanh", ACT_GELU_TANH},
    {"gelu_fast", ACT_GELU_TANH},
    {"relu", ACT_RELU},
    {"silu", ACT_SILU},
    {"swish", ACT_SILU},
};

const char *stof_bert_act_str(stof_act act)
{
    switch (act) {
    case ACT_GELU: return "gelu";
    case ACT_GELU_TANH: return "gelu_tanh";
    case ACT_RELU: return "relu";
    case ACT_SILU: return "silu";
    case ACT_NONE: return "none";
    }
    return "unknown";
}

const char *stof_bert_pooling_str(bert_pooling pooling)
{
    return pooling == BERT_POOL_CLS    ? "cls"
           : pooling == BERT_POOL_MEAN ? "mean"
           : pooling == BERT_POOL_LAST ? "lasttoken"
                                       : "unknown";
}

stof_status cfg_act(const cJSON *root, const char *key, const char *name, const char *dflt,
                    stof_act *out)
{
    char act[64];
    STOF_TRY(cfg_string(root, key, name, dflt, act, sizeof act));
    for (size_t i = 0; i < sizeof act_names / sizeof act_names[0]; i++) {
        if (strcmp(act, act_names[i].name) == 0) {
            *out = act_names[i].act;
            return STOF_OK;
        }
    }
    return stof_error(STOF_ERR_UNSUPPORTED,
                      "%s: %s \"%s\" is not supported (gelu, gelu_new, gelu_pytorch_tanh, "
                      "gelu_fast, relu, silu)",
                      name, key, act);
}

static stof_status read_activation(const cJSON *root, const char *name, bert_config *c)
{
    char act[64];
    STOF_TRY(cfg_string(root, "hidden_act", name, "gelu", act, sizeof act));
    for (size_t i = 0; i < sizeof act_names / sizeof act_names[0]; i++) {
        /* BERT runs the GELUs and ReLU (the GPU epilogues it was built for). */
        if (strcmp(act, act_names[i].name) == 0 && act_names[i].act != ACT_SILU) {
            c->hidden_act = act_names[i].act;
            snprintf(c->hidden_act_name, sizeof c->hidden_act_name, "%s", act_names[i].name);
            return STOF_OK;
        }
    }
    return stof_error(STOF_ERR_UNSUPPORTED,
                      "%s: hidden_act \"%s\" is not supported (gelu, gelu_new, "
                      "gelu_pytorch_tanh, gelu_fast, relu)",
                      name, act);
}

static stof_status read_layer_norm_eps(const cJSON *root, const char *name, bert_config *c)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, "layer_norm_eps");
    if (!v) {
        c->layer_norm_eps = 1e-12f;
        return STOF_OK;
    }
    char got[80];
    describe(v, got, sizeof got);
    STOF_REQUIRE(cJSON_IsNumber(v) && v->valuedouble > 0 && v->valuedouble <= 0.1, STOF_ERR_FORMAT,
                 "%s: \"layer_norm_eps\" = %s is not a number in (0, 0.1]", name, got);
    c->layer_norm_eps = (float)v->valuedouble;
    return STOF_OK;
}

/* What would make the forward differ from transformers'. */
static stof_status check_supported_variant(const cJSON *root, const char *name, bert_config *c)
{
    STOF_TRY(cfg_string(root, "model_type", name, "bert", c->model_type, sizeof c->model_type));
    STOF_REQUIRE(strcmp(c->model_type, "bert") == 0, STOF_ERR_UNSUPPORTED,
                 "%s: model_type \"%s\" is not supported (stof reads \"bert\")", name,
                 c->model_type);
    char pos[64];
    STOF_TRY(cfg_string(root, "position_embedding_type", name, "absolute", pos, sizeof pos));
    STOF_REQUIRE(strcmp(pos, "absolute") == 0, STOF_ERR_UNSUPPORTED,
                 "%s: position_embedding_type \"%s\" is not supported (only \"absolute\")", name,
                 pos);
    const cJSON *dec = cJSON_GetObjectItemCaseSensitive(root, "is_decoder");
    STOF_REQUIRE(!cJSON_IsTrue(dec), STOF_ERR_UNSUPPORTED,
                 "%s: \"is_decoder\" is true; stof runs BERT as an encoder only", name);
    return STOF_OK;
}

stof_status stof_bert_config_validate(const bert_config *c, const char *name)
{
    STOF_REQUIRE(c, STOF_ERR_INVALID_ARG, "bert config is NULL");
    if (!name) name = "config";
    const struct {
        const char *key;
        int value, hi;
    } sizes[] = {
        {"hidden_size", c->hidden_size, BERT_MAX_HIDDEN},
        {"num_hidden_layers", c->num_hidden_layers, BERT_MAX_LAYERS},
        {"num_attention_heads", c->num_attention_heads, BERT_MAX_HEADS},
        {"intermediate_size", c->intermediate_size, BERT_MAX_INTERMEDIATE},
        {"vocab_size", c->vocab_size, BERT_MAX_VOCAB},
        {"max_position_embeddings", c->max_position_embeddings, BERT_MAX_POSITIONS},
        {"type_vocab_size", c->type_vocab_size, BERT_MAX_TYPE_VOCAB},
    };
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
        STOF_REQUIRE(sizes[i].value >= 1 && sizes[i].value <= sizes[i].hi, STOF_ERR_FORMAT,
                     "%s: \"%s\" = %d is out of range [1, %d]", name, sizes[i].key, sizes[i].value,
                     sizes[i].hi);
    STOF_REQUIRE(c->hidden_size % c->num_attention_heads == 0, STOF_ERR_FORMAT,
                 "%s: hidden_size %d is not divisible by num_attention_heads %d", name,
                 c->hidden_size, c->num_attention_heads);
    STOF_REQUIRE(c->head_dim == c->hidden_size / c->num_attention_heads, STOF_ERR_FORMAT,
                 "%s: head_dim %d is not hidden_size / num_attention_heads = %d", name, c->head_dim,
                 c->hidden_size / c->num_attention_heads);
    STOF_REQUIRE(c->hidden_act == ACT_GELU || c->hidden_act == ACT_GELU_TANH ||
                     c->hidden_act == ACT_RELU,
                 STOF_ERR_UNSUPPORTED, "%s: activation %d is not supported", name,
                 (int)c->hidden_act);
    STOF_REQUIRE(c->layer_norm_eps > 0 && c->layer_norm_eps <= 0.1f, STOF_ERR_FORMAT,
                 "%s: layer_norm_eps %g is not in (0, 0.1]", name, (double)c->layer_norm_eps);
    return STOF_OK;
}

stof_status stof_bert_config_from_json(const cJSON *root, const char *name, bert_config *c)
{
    STOF_REQUIRE(cJSON_IsObject(root), STOF_ERR_FORMAT, "%s: must hold a JSON object", name);
    STOF_TRY(check_supported_variant(root, name, c));
    STOF_TRY(cfg_int(root, "hidden_size", name, true, 0, 1, BERT_MAX_HIDDEN, &c->hidden_size));
    STOF_TRY(cfg_int(root, "num_hidden_layers", name, true, 0, 1, BERT_MAX_LAYERS,
                       &c->num_hidden_layers));
    STOF_TRY(cfg_int(root, "num_attention_heads", name, true, 0, 1, BERT_MAX_HEADS,
                       &c->num_attention_heads));
    STOF_TRY(cfg_int(root, "intermediate_size", name, true, 0, 1, BERT_MAX_INTERMEDIATE,
                       &c->intermediate_size));
    STOF_TRY(cfg_int(root, "vocab_size", name, true, 0, 1, BERT_MAX_VOCAB, &c->vocab_size));
    STOF_TRY(cfg_int(root, "max_position_embeddings", name, false, 512, 1, BERT_MAX_POSITIONS,
                       &c->max_position_embeddings));
    STOF_TRY(cfg_int(root, "type_vocab_size", name, false, 2, 1, BERT_MAX_TYPE_VOCAB,
                       &c->type_vocab_size));
    STOF_TRY(read_activation(root, name, c));
    STOF_TRY(read_layer_norm_eps(root, name, c));
    STOF_REQUIRE(c->hidden_size % c->num_attention_heads == 0, STOF_ERR_FORMAT,
                 "%s: hidden_size %d is not divisible by num_attention_heads %d", name,
                 c->hidden_size, c->num_attention_heads);
    c->head_dim = c->hidden_size / c->num_attention_heads;
    return stof_bert_config_validate(c, name);
}

stof_status stof_bert_config_parse(const char *json, size_t len, const char *name, bert_config *out)
{
    STOF_REQUIRE(json && out, STOF_ERR_INVALID_ARG, "bert config: NULL argument");
    if (!name) name = "config.json";
    memset(out, 0, sizeof *out);
    cJSON *root;
    STOF_TRY(parse_json(json, len, name, &root));
    bert_config c;
    memset(&c, 0, sizeof c);
    stof_status st = stof_bert_config_from_json(root, name, &c);
    cJSON_Delete(root);
    if (st == STOF_OK) *out = c;
    return st;
}

stof_status stof_bert_config_load(const char *path, bert_config *out)
{
    STOF_REQUIRE(path && out, STOF_ERR_INVALID_ARG, "bert config: NULL argument");
    memset(out, 0, sizeof *out);
    char *text;
    size_t len;
    STOF_TRY(stof_model_read_text(path, SMALL_JSON_MAX, &text, &len));
    stof_status st = stof_bert_config_parse(text, len, path, out);
    free(text);
    return st;
}

/* ---- folder layout */

static bool is_regular_file(const char *path)
{
    struct stat sb;
    return stat(path, &sb) == 0 && S_ISREG(sb.st_mode);
}

static bool is_directory(const char *path)
{
    struct stat sb;
    return stat(path, &sb) == 0 && S_ISDIR(sb.st_mode);
}

/* out = a "/" b (or a when b is empty); fails when it does not fit. */
static stof_status join_path(char *out, size_t cap, const char *a, const char *b)
{
    size_t la = strlen(a);
    bool slash = la > 0 && a[la - 1] != '/' && b[0];
    int n = snprintf(out, cap, "%s%s%s", a, slash ? "/" : "", b);
    STOF_REQUIRE(n >= 0 && (size_t)n < cap, STOF_ERR_INVALID_ARG,
                 "path \"%s/%s\" is longer than %zu bytes", a, b, cap - 1);
    return STOF_OK;
}

/* Module paths come from the file: they must stay inside the model folder. */
static stof_status check_relative_path(const char *path, const char *file)
{
    STOF_REQUIRE(path[0] != '/', STOF_ERR_FORMAT, "%s: module path \"%.200s\" is absolute", file,
                 path);
    for (const char *p = path; *p;) {
        const char *end = strchr(p, '/');
        size_t n = end ? (size_t)(end - p) : strlen(p);
        STOF_REQUIRE(!(n == 2 && p[0] == '.' && p[1] == '.'), STOF_ERR_FORMAT,
                     "%s: module path \"%.200s\" leaves the model folder", file, path);
        p += n + (end ? 1 : 0);
    }
    return STOF_OK;
}

static const char *type_suffix(const char *type)
{
    const char *dot = strrchr(type, '.');
    return dot ? dot + 1 : type;
}

typedef struct st_modules {
    char transformer[BERT_PATH_MAX];
    char pooling[BERT_PATH_MAX];
    bool has_transformer, has_pooling, normalize;
} st_modules;

static stof_status read_module(const cJSON *m, int idx, const char *file, st_modules *mods)
{
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(m, "type");
    const cJSON *path = cJSON_GetObjectItemCaseSensitive(m, "path");
    STOF_REQUIRE(cJSON_IsObject(m) && cJSON_IsString(type), STOF_ERR_FORMAT,
                 "%s: module %d has no \"type\" string", file, idx);
    const char *p = cJSON_IsString(path) ? path->valuestring : "";
    STOF_REQUIRE(!path || cJSON_IsString(path), STOF_ERR_FORMAT,
                 "%s: module %d (\"%.120s\") has a \"path\" that is not a string", file, idx,
                 type->valuestring);
    STOF_TRY(check_relative_path(p, file));
    STOF_REQUIRE(strlen(p) < BERT_PATH_MAX, STOF_ERR_FORMAT, "%s: module %d path is too long", file,
                 idx);
    const char *kind = type_suffix(type->valuestring);
    if (strcmp(kind, "Transformer") == 0 && !mods->has_transformer) {
        memcpy(mods->transformer, p, strlen(p) + 1);
        mods->has_transformer = true;
    } else if (strcmp(kind, "Pooling") == 0 && !mods->has_pooling) {
        memcpy(mods->pooling, p, strlen(p) + 1);
        mods->has_pooling = true;
    } else if (strcmp(kind, "Normalize") == 0) {
        mods->normalize = true;
    } else {
        return stof_error(STOF_ERR_UNSUPPORTED,
                          "%s: module %d \"%.120s\" is not supported (Transformer, Pooling and "
                          "Normalize are)",
                          file, idx, type->valuestring);
    }
    return STOF_OK;
}

static stof_status read_modules(const char *path, st_modules *mods)
{
    cJSON *root;
    STOF_TRY(cfg_load_json(path, &root));
    stof_status st = STOF_OK;
    if (!cJSON_IsArray(root)) st = stof_error(STOF_ERR_FORMAT, "%s: must be a JSON array", path);
    int idx = 0;
    for (const cJSON *m = root->child; st == STOF_OK && m; m = m->next, idx++)
        st = read_module(m, idx, path, mods);
    if (st == STOF_OK && !mods->has_transformer)
        st = stof_error(STOF_ERR_FORMAT, "%s: no sentence_transformers Transformer module", path);
    cJSON_Delete(root);
    return st;
}

static const struct {
    const char *key;
    int pooling; /* bert_pooling, or -1: a mode stof does not run */
} pooling_keys[] = {
    {"pooling_mode_cls_token", BERT_POOL_CLS}, {"pooling_mode_mean_tokens", BERT_POOL_MEAN},
    {"pooling_mode_max_tokens", -1},           {"pooling_mode_mean_sqrt_len_tokens", -1},
    {"pooling_mode_weightedmean_tokens", -1},  {"pooling_mode_lasttoken", BERT_POOL_LAST},
};

static stof_status pooling_from_flags(const cJSON *root, const char *path, bert_files *out)
{
    int set = 0, which = -1;
    for (size_t i = 0; i < sizeof pooling_keys / sizeof pooling_keys[0]; i++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, pooling_keys[i].key);
        if (!v) continue;
        STOF_REQUIRE(cJSON_IsBool(v), STOF_ERR_FORMAT, "%s: \"%s\" must be true or false", path,
                     pooling_keys[i].key);
        if (cJSON_IsTrue(v)) {
            set++;
            which = (int)i;
        }
    }
    STOF_REQUIRE(set > 0, STOF_ERR_FORMAT, "%s: no pooling_mode_* flag is true", path);
    STOF_REQUIRE(set == 1, STOF_ERR_UNSUPPORTED,
                 "%s: %d pooling modes are set; concatenated pooling is not supported", path, set);
    STOF_REQUIRE(pooling_keys[which].pooling >= 0, STOF_ERR_UNSUPPORTED,
                 "%s: \"%s\" is not supported (cls, mean and lasttoken pooling are)", path,
                 pooling_keys[which].key);
    out->pooling = (bert_pooling)pooling_keys[which].pooling;
    return STOF_OK;
}

static stof_status pooling_from_json(const cJSON *root, const char *path, bert_files *out)
{
    STOF_REQUIRE(cJSON_IsObject(root), STOF_ERR_FORMAT, "%s: must hold a JSON object", path);
    const cJSON *mode = cJSON_GetObjectItemCaseSensitive(root, "pooling_mode");
    if (cJSON_IsString(mode)) {
        if (strcmp(mode->valuestring, "mean") == 0)
            out->pooling = BERT_POOL_MEAN;
        else if (strcmp(mode->valuestring, "cls") == 0)
            out->pooling = BERT_POOL_CLS;
        else if (strcmp(mode->valuestring, "lasttoken") == 0)
            out->pooling = BERT_POOL_LAST;
        else
            return stof_error(STOF_ERR_UNSUPPORTED,
                              "%s: pooling_mode \"%.48s\" is not supported (cls, mean and lasttoken are)",
                              path, mode->valuestring);
    } else {
        STOF_TRY(pooling_from_flags(root, path, out));
    }
    out->pooling_from_file = true;
    return cfg_int(root, "word_embedding_dimension", path, false, 0, 1, BERT_MAX_HIDDEN,
                     &out->pooling_dim);
}

static stof_status read_pooling(const char *path, bert_files *out)
{
    cJSON *root;
    STOF_TRY(cfg_load_json(path, &root));
    stof_status st = pooling_from_json(root, path, out);
    cJSON_Delete(root);
    return st;
}

/* The folder must hold model.safetensors; say why when it does not. */
static stof_status check_weights_present(bert_files *out)
{
    STOF_TRY(join_path(out->config_path, sizeof out->config_path, out->dir, "config.json"));
    STOF_TRY(join_path(out->weights_path, sizeof out->weights_path, out->dir, "model.safetensors"));
    STOF_TRY(stof_file_check_regular(out->config_path));
    if (is_regular_file(out->weights_path)) return STOF_OK;
    char other[BERT_PATH_MAX];
    STOF_TRY(join_path(other, sizeof other, out->dir, "model.safetensors.index.json"));
    if (is_regular_file(other)) {
        memcpy(out->weights_path, other, sizeof other);
        out->sharded = true;
        return STOF_OK;
    }
    STOF_TRY(join_path(other, sizeof other, out->dir, "pytorch_model.bin"));
    STOF_REQUIRE(!is_regular_file(other), STOF_ERR_UNSUPPORTED,
                 "%s: only model.safetensors is read; save the model with "
                 "safe_serialization=True",
                 other);
    return stof_file_check_regular(out->weights_path); /* says what is there instead */
}

static stof_status locate_sentence_transformers(const char *dir, const char *modules,
                                                bert_files *out)
{
    st_modules *mods;
    STOF_TRY(stof_host_calloc(1, sizeof *mods, (void **)&mods));
    stof_status st = read_modules(modules, mods);
    char pooling_cfg[BERT_PATH_MAX];
    if (st == STOF_OK) st = join_path(out->dir, sizeof out->dir, dir, mods->transformer);
    if (st == STOF_OK && mods->has_pooling) {
        char pdir[BERT_PATH_MAX];
        st = join_path(pdir, sizeof pdir, dir, mods->pooling);
        if (st == STOF_OK) st = join_path(pooling_cfg, sizeof pooling_cfg, pdir, "config.json");
        if (st == STOF_OK) st = read_pooling(pooling_cfg, out);
    }
    out->normalize = mods->normalize;
    out->sentence_transformers = true;
    free(mods);
    return st;
}

stof_status stof_bert_locate(const char *dir, bert_files *out)
{
    STOF_REQUIRE(dir && out, STOF_ERR_INVALID_ARG, "bert_locate: NULL argument");
    memset(out, 0, sizeof *out);
    STOF_REQUIRE(is_directory(dir), STOF_ERR_IO, "%s: not a folder", dir);
    char probe[BERT_PATH_MAX];
    STOF_TRY(join_path(probe, sizeof probe, dir, "modules.json"));
    if (stof_file_exists(probe)) {
        STOF_TRY(locate_sentence_transformers(dir, probe, out));
        return check_weights_present(out);
    }
    STOF_TRY(join_path(probe, sizeof probe, dir, "config.json"));
    if (stof_file_exists(probe)) {
        STOF_TRY(join_path(out->dir, sizeof out->dir, dir, ""));
        return check_weights_present(out);
    }
    /* Older sentence-transformers folders without modules.json. */
    STOF_TRY(join_path(probe, sizeof probe, dir, "0_Transformer/config.json"));
    STOF_REQUIRE(is_regular_file(probe), STOF_ERR_IO,
                 "%s: no config.json, modules.json or 0_Transformer/config.json", dir);
    out->sentence_transformers = true;
    STOF_TRY(join_path(out->dir, sizeof out->dir, dir, "0_Transformer"));
    STOF_TRY(join_path(probe, sizeof probe, dir, "1_Pooling/config.json"));
    if (is_regular_file(probe)) STOF_TRY(read_pooling(probe, out));
    return check_weights_present(out);
}

/* ---- any family's folder */

static stof_status describe_config(const char *path, const family_def **family, model_desc *d)
{
    cJSON *root;
    STOF_TRY(cfg_load_json(path, &root));
    char type[DESC_TYPE_MAX];
    stof_status st = cJSON_IsObject(root) ? STOF_OK
                                          : stof_error(STOF_ERR_FORMAT,
                                                       "%s: must hold a JSON object", path);
    if (st == STOF_OK) st = cfg_string(root, "model_type", path, "bert", type, sizeof type);
    const family_def *f = st == STOF_OK ? family_for_type(type) : NULL;
    if (st == STOF_OK && !f)
        st = stof_error(STOF_ERR_UNSUPPORTED,
                        "%s: model_type \"%s\" is not supported (stof reads bert, gpt2, llama, "
                        "mistral, qwen2, modernbert)",
                        path, type);
    if (st == STOF_OK) st = f->describe(root, path, d);
    cJSON_Delete(root);
    if (st == STOF_OK) st = desc_validate(d);
    if (st != STOF_OK) {
        desc_free(d);
        return st;
    }
    *family = f;
    return STOF_OK;
}

stof_status model_load_files(const char *dir, model_files *files, const family_def **family,
                             model_desc *d)
{
    STOF_REQUIRE(dir && files && family && d, STOF_ERR_INVALID_ARG,
                 "model_load_files: NULL argument");
    memset(files, 0, sizeof *files);
    memset(d, 0, sizeof *d);
    bert_files *loc;
    STOF_TRY(stof_host_calloc(1, sizeof *loc, (void **)&loc));
    stof_status st = stof_bert_locate(dir, loc);
    if (st == STOF_OK) st = describe_config(loc->config_path, family, d);
    if (st == STOF_OK && loc->pooling_dim && loc->pooling_dim != d->hidden) {
        st = stof_error(STOF_ERR_FORMAT,
                        "%s: pooling word_embedding_dimension %d differs from hidden_size %d", dir,
                        loc->pooling_dim, d->hidden);
        desc_free(d);
    }
    if (st == STOF_OK) {
        memcpy(files->dir, loc->dir, sizeof files->dir);
        memcpy(files->config_path, loc->config_path, sizeof files->config_path);
        memcpy(files->weights_path, loc->weights_path, sizeof files->weights_path);
        files->sharded = loc->sharded;
        files->sentence_transformers = loc->sentence_transformers;
        files->pooling_from_file = loc->pooling_from_file;
        files->pooling_dim = loc->pooling_dim;
        files->normalize = loc->normalize;
        /* Without a pooling config: mean for encoders, the last token for decoders. */
        files->pooling = loc->pooling_from_file ? (stof_pooling)loc->pooling
                         : d->causal            ? STOF_POOL_LAST
                                                : STOF_POOL_MEAN;
    }
    free(loc);
    return st;
}
