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

#ifdef __cplusplus
extern "C" {
#endif

#define BERT_PATH_MAX 4096


typedef enum bert_pooling {
    BERT_POOL_MEAN = 0, /* mean over the valid tokens */
    BERT_POOL_CLS = 1   /* the first token's hidden state */
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

/* Reads a whole file of at most max_bytes into a NUL-terminated heap buffer
 * (free() it). STOF_ERR_IO when it cannot be read, STOF_ERR_FORMAT when larger. */
stof_status stof_model_read_text(const char *path, size_t max_bytes, char **out, size_t *len);

#ifdef __cplusplus
}
#endif

#endif /* STOF_MODEL_CONFIG_H */
