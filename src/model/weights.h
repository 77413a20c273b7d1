/*
 * weights.h — the weights of a BERT encoder in host fp32, loaded from a
 * safetensors checkpoint by Hugging Face names and checked against the config.
 *
 * Linear weights keep PyTorch's layout, [out, in] (y = x W^T + b). The query,
 * key and value projections live in one fused [3H, H] matrix (rows: q, then k,
 * then v) with a [3H] bias; q_w/k_w/v_w and their biases point into it, so
 * the fused and the separate views cost no extra memory. The pooler and any
 * task head are ignored.
 */
#ifndef STOF_MODEL_WEIGHTS_H
#define STOF_MODEL_WEIGHTS_H

#include "model/config.h"
#include "io/safetensors.h"

#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct bert_layer_weights {
    float *qkv_w, *qkv_b;           /* [3H, H], [3H] */
    float *q_w, *k_w, *v_w;         /* [H, H] each, views into qkv_w */
    float *q_b, *k_b, *v_b;         /* [H] each, views into qkv_b */
    float *attn_out_w, *attn_out_b; /* attention.output.dense: [H, H], [H] */
    float *attn_ln_g, *attn_ln_b;   /* attention.output.LayerNorm: [H], [H] */
    float *inter_w, *inter_b;       /* intermediate.dense: [I, H], [I] */
    float *out_w, *out_b;           /* output.dense: [H, I], [H] */
    float *out_ln_g, *out_ln_b;     /* output.LayerNorm: [H], [H] */
} bert_layer_weights;

typedef struct bert_weights {
    bert_config config;
    float *word_emb;                /* [V, H] */
    float *pos_emb;                 /* [P, H] */
    float *type_emb;                /* [T, H] */
    float *emb_ln_g, *emb_ln_b;     /* [H], [H] */
    bert_layer_weights *layers;     /* [num_hidden_layers] */
    int64_t n_params;               /* floats loaded (each fused q/k/v counted once) */
    char prefix[64];                /* name prefix found in the file: "", "bert.", ... */
    safetensors_dtype stored_dtype; /* dtype of the word embeddings in the file */
    float *storage;                 /* one allocation behind every array */
} bert_weights;

/* Load every tensor of cfg's model from an opened file. On failure nothing is
 * left allocated and the message names the tensor, the expected and the found
 * shape or dtype (STOF_ERR_FORMAT). */
stof_status stof_bert_weights_from_safetensors(const safetensors_file *f, const bert_config *cfg,
                                               bert_weights *out);
/* Same, opening the .safetensors file at path. */
stof_status stof_bert_weights_load_file(const char *path, const bert_config *cfg,
                                        bert_weights *out);
/* Locate the folder (stof_bert_locate), read its config and its weights.
 * files may be NULL. Checks a sentence-transformers pooling dimension
 * against hidden_size. */
stof_status stof_bert_load_dir(const char *dir, bert_files *files, bert_weights *out);
void stof_bert_weights_free(bert_weights *w);

/* One line: "bert: 12 layers, hidden 768, 12 heads (dim 64), intermediate
 * 3072, gelu, vocab 30522, 85.6M params (stored F32)". Returns snprintf's count. */
int stof_bert_weights_summary(const bert_weights *w, char *buf, size_t cap);
void stof_bert_weights_print_summary(const bert_weights *w, FILE *fp);

#ifdef __cplusplus
}
#endif

#endif /* STOF_MODEL_WEIGHTS_H */
