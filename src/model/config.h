/*
 * config.h — a BERT model folder as Hugging Face writes it: config.json read
 * into struct bert_config, and the folder layout resolved (a plain BertModel
 * folder, or a sentence-transformers folder with modules.json, 1_Pooling and
 * the transformer at the root or in 0_Transformer).
 */
#ifndef STOF_MODEL_CONFIG_H
#define STOF_MODEL_CONFIG_H

#include "core/act.h"
#include "core/core.h"
#include "model/desc.h"

#ifdef __cplusplus
extern "C" {
#endif

#define BERT_PATH_MAX 4096


typedef enum bert_pooling {
    BERT_POOL_MEAN = 0, /* mean over the valid tokens */
    BERT_POOL_CLS = 1,  /* the first token's hidden state */
    BERT_POOL_LAST = 2  /* the last real token's (decoder embeddings) */
} bert_pooling;

typedef struct bert_config {
    char model_type[32];
    int hidden_size;
    int num_hidden_layers;
    int num_attention_heads;
    int head_dim; /* hidden_size / num_attention_heads */
    int intermediate_size;
    stof_act hidden_act;
    char hidden_act_name[32]; /* as written in config.json */
    float layer_norm_eps;
    int vocab_size;
    int max_position_embeddings;
    int type_vocab_size;
    int pad_token_id; /* 0 when absent */
} bert_config;

/* Upper bounds that reject nonsense before any allocation depends on it. */
#define BERT_MAX_HIDDEN 65536
#define BERT_MAX_LAYERS 1024
#define BERT_MAX_HEADS 1024
#define BERT_MAX_INTERMEDIATE 262144
#define BERT_MAX_VOCAB (1 << 24)
#define BERT_MAX_POSITIONS (1 << 20)
#define BERT_MAX_TYPE_VOCAB 65536

/* Where a model's files are and how it pools. */
typedef struct bert_files {
    char dir[BERT_PATH_MAX]; /* folder holding config.json + model.safetensors */
    char config_path[BERT_PATH_MAX];
    char weights_path[BERT_PATH_MAX];
    bool sharded; /* weights_path is a model.safetensors.index.json */
    bool sentence_transformers; /* modules.json or 0_Transformer found */
    bert_pooling pooling;       /* BERT_POOL_MEAN unless a pooling config says otherwise */
    bool pooling_from_file;     /* a 1_Pooling config was read */
    int pooling_dim;            /* its word_embedding_dimension, 0 when absent */
    bool normalize;             /* a Normalize module follows pooling */
} bert_files;

/* Parse config.json text (len bytes, need not be NUL-terminated); name labels
 * messages. Validates too. Unknown activations, model types other than
 * "bert" and non-absolute position embeddings give STOF_ERR_UNSUPPORTED;
 * anything malformed or out of range gives STOF_ERR_FORMAT. */
stof_status stof_bert_config_parse(const char *json, size_t len, const char *name,
                                   bert_config *out);
stof_status stof_bert_config_load(const char *path, bert_config *out);
/* Consistency and range checks (also run by parse). */
stof_status stof_bert_config_validate(const bert_config *c, const char *name);

/* Resolve a model folder (see the top of this file). Files are checked for
 * presence, not parsed, except modules.json and the pooling config. */
stof_status stof_bert_locate(const char *dir, bert_files *out);

const char *stof_bert_act_str(stof_act act);
const char *stof_bert_pooling_str(bert_pooling pooling);

/* ---- config.json fields, for every family (errors name the file and key) */

typedef struct cJSON cJSON;
stof_status cfg_load_json(const char *path, cJSON **out);
/* An integer in [lo, hi]; dflt when absent and not required. */
stof_status cfg_int(const cJSON *root, const char *key, const char *name, bool required, int dflt,
                    int lo, int hi, int *out);
/* A number in [lo, hi]; dflt when absent or null and not required. */
stof_status cfg_float(const cJSON *root, const char *key, const char *name, bool required,
                      double dflt, double lo, double hi, float *out);
stof_status cfg_bool(const cJSON *root, const char *key, const char *name, bool dflt, bool *out);
stof_status cfg_string(const cJSON *root, const char *key, const char *name, const char *dflt,
                       char *out, size_t cap);
/* An HF activation name (gelu, gelu_new, gelu_pytorch_tanh, gelu_fast, relu, silu, swish). */
stof_status cfg_act(const cJSON *root, const char *key, const char *name, const char *dflt,
                    stof_act *out);
/* A rope parameter object (HF 5 rope_parameters, or HF 4 rope_scaling with
 * theta dflt_theta); params NULL: default rope of theta dflt_theta. */
stof_status cfg_rope(const cJSON *params, const char *name, double dflt_theta, rope_desc *out);
stof_status cfg_int_or_null(const cJSON *root, const char *key, const char *name, int dflt, int lo,
                            int hi, int *out);
/* Layer i of "layer_types": *sliding 1 (sliding_attention), 0 (full), -1 (no list). */
stof_status cfg_layer_type(const cJSON *root, const char *name, int layers, int i, int *sliding);
stof_status cfg_alloc_layers(model_desc *d, int layers);
/* stof_bert_config_parse on parsed JSON. */
stof_status stof_bert_config_from_json(const cJSON *root, const char *name, bert_config *c);

/* Reads a whole file of at most max_bytes into a NUL-terminated heap buffer
 * (free() it). STOF_ERR_IO when it cannot be read, STOF_ERR_FORMAT when larger. */
stof_status stof_model_read_text(const char *path, size_t max_bytes, char **out, size_t *len);

#ifdef __cplusplus
}
#endif

#endif /* STOF_MODEL_CONFIG_H */
