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

static stof_status load_json(const char *path, cJSON **out)
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
static stof_status int_field(const cJSON *root, const char *key, const char *name, bool required,
                             int dflt, int lo, int hi, int *out)
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
static stof_status string_field(const cJSON *root, const char *key, const char *name,
                                const char *dflt, char *out, size_t cap)
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

/* ---- config.json */

static const struct {
    const char *name;
    bert_act act;
} act_names[] = {
    {"gelu", BERT_ACT_GELU},
    {"gelu_new", BERT_ACT_GELU_TANH},
    {"gelu_pytorch_tanh", BERT_ACT_GELU_TANH},
    {"gelu_fast", BERT_ACT_GELU_TANH},
    {"relu", BERT_ACT_RELU},
};

const char *stof_bert_act_str(bert_act act)
{
    switch (act) {
    case BERT_ACT_GELU: return "gelu";
    case BERT_ACT_GELU_TANH: return "gelu_tanh";
    case BERT_ACT_RELU: return "relu";
    }
    return "unknown";
}

const char *stof_bert_pooling_str(bert_pooling pooling)
{
    return pooling == BERT_POOL_CLS ? "cls" : pooling == BERT_POOL_MEAN ? "mean" : "unknown";
}

static stof_status read_activation(const cJSON *root, const char *name, bert_config *c)
{
    char act[64];
    STOF_TRY(string_field(root, "hidden_act", name, "gelu", act, sizeof act));
    for (size_t i = 0; i < sizeof act_names / sizeof act_names[0]; i++) {
        if (strcmp(act, act_names[i].name) == 0) {
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
    STOF_TRY(string_field(root, "model_type", name, "bert", c->model_type, sizeof c->model_type));
    STOF_REQUIRE(strcmp(c->model_type, "bert") == 0, STOF_ERR_UNSUPPORTED,
                 "%s: model_type \"%s\" is not supported (stof reads \"bert\")", name,
                 c->model_type);
    char pos[64];
    STOF_TRY(string_field(root, "position_embedding_type", name, "absolute", pos, sizeof pos));
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
    STOF_REQUIRE(c->hidden_act == BERT_ACT_GELU || c->hidden_act == BERT_ACT_GELU_TANH ||
                     c->hidden_act == BERT_ACT_RELU,
                 STOF_ERR_UNSUPPORTED, "%s: activation %d is not supported", name,
                 (int)c->hidden_act);
    STOF_REQUIRE(c->layer_norm_eps > 0 && c->layer_norm_eps <= 0.1f, STOF_ERR_FORMAT,
                 "%s: layer_norm_eps %g is not in (0, 0.1]", name, (double)c->layer_norm_eps);
    return STOF_OK;
}

static stof_status config_from_json(const cJSON *root, const char *name, bert_config *c)
{
    STOF_REQUIRE(cJSON_IsObject(root), STOF_ERR_FORMAT, "%s: must hold a JSON object", name);
    STOF_TRY(check_supported_variant(root, name, c));
    STOF_TRY(int_field(root, "hidden_size", name, true, 0, 1, BERT_MAX_HIDDEN, &c->hidden_size));
    STOF_TRY(int_field(root, "num_hidden_layers", name, true, 0, 1, BERT_MAX_LAYERS,
                       &c->num_hidden_layers));
    STOF_TRY(int_field(root, "num_attention_heads", name, true, 0, 1, BERT_MAX_HEADS,
                       &c->num_attention_heads));
    STOF_TRY(int_field(root, "intermediate_size", name, true, 0, 1, BERT_MAX_INTERMEDIATE,
                       &c->intermediate_size));
    STOF_TRY(int_field(root, "vocab_size", name, true, 0, 1, BERT_MAX_VOCAB, &c->vocab_size));
    STOF_TRY(int_field(root, "max_position_embeddings", name, false, 512, 1, BERT_MAX_POSITIONS,
                       &c->max_position_embeddings));
    STOF_TRY(int_field(root, "type_vocab_size", name, false, 2, 1, BERT_MAX_TYPE_VOCAB,
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
    stof_status st = config_from_json(root, name, &c);
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
    STOF_TRY(load_json(path, &root));
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
    {"pooling_mode_weightedmean_tokens", -1},  {"pooling_mode_lasttoken", -1},
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
                 "%s: \"%s\" is not supported (cls and mean pooling are)", path,
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
        else
            return stof_error(STOF_ERR_UNSUPPORTED,
                              "%s: pooling_mode \"%.48s\" is not supported (cls and mean are)",
                              path, mode->valuestring);
    } else {
        STOF_TRY(pooling_from_flags(root, path, out));
    }
    out->pooling_from_file = true;
    return int_field(root, "word_embedding_dimension", path, false, 0, 1, BERT_MAX_HIDDEN,
                     &out->pooling_dim);
}

static stof_status read_pooling(const char *path, bert_files *out)
{
    cJSON *root;
    STOF_TRY(load_json(path, &root));
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
    STOF_REQUIRE(!is_regular_file(other), STOF_ERR_UNSUPPORTED,
                 "%s: sharded safetensors checkpoints are not supported yet", other);
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
