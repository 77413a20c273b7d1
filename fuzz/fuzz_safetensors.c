/*
 * fuzz_safetensors.c — libFuzzer harness for the safetensors reader and the
 * BERT weight loader behind it.
 *
 * Each input is parsed from memory. When it is accepted, every byte of every
 * tensor is read (so the sanitizers see any range that leaves the buffer),
 * every name is looked up again, and the file is handed to the weight loader
 * with a tiny fixed config, which exercises the shape checks and the f16/bf16
 * conversions on whatever the input holds. A good seed is a tiny model for
 * that config (hidden 8, 1 layer, 2 heads, intermediate 16, vocab 4,
 * positions 4, 1 token type).
 */
#include "io/safetensors.h"
#include "model/weights.h"

#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static bert_config fuzz_config(void)
{
    bert_config c;
    memset(&c, 0, sizeof c);
    strcpy(c.model_type, "bert");
    c.hidden_size = 8;
    c.num_hidden_layers = 1;
    c.num_attention_heads = 2;
    c.head_dim = 4;
    c.intermediate_size = 16;
    c.hidden_act = ACT_GELU;
    strcpy(c.hidden_act_name, "gelu");
    c.layer_norm_eps = 1e-12f;
    c.vocab_size = 4;
    c.max_position_embeddings = 4;
    c.type_vocab_size = 1;
    return c;
}

/* Reads every byte the parser claims is inside the buffer. */
static void touch_tensors(const safetensors_file *f, const uint8_t *buf, size_t size)
{
    volatile uint8_t sink = 0;
    for (int i = 0; i < f->n_tensors; i++) {
        const safetensors_tensor *t = &f->tensors[i];
        const uint8_t *p = t->data;
        if (p < buf || p + (t->end - t->begin) > buf + size) abort();
        for (uint64_t b = 0; b < t->end - t->begin; b++)
            sink ^= p[b];
        if (stof_safetensors_find(f, t->name) != t) abort();
    }
    (void)sink;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    safetensors_file *f = NULL;
    stof_status st = stof_safetensors_parse(data, size, "fuzz", &f);
    if (st != STOF_OK) {
        bool expected = st == STOF_ERR_FORMAT || st == STOF_ERR_OOM;
        if (f != NULL || !expected || stof_last_error()[0] == '\0') abort();
        return 0;
    }
    touch_tensors(f, data, size);
    bert_config cfg = fuzz_config();
    bert_weights w;
    if (stof_bert_weights_from_safetensors(f, &cfg, &w) == STOF_OK) {
        char line[512];
        stof_bert_weights_summary(&w, line, sizeof line);
        stof_bert_weights_free(&w);
    }
    stof_safetensors_close(f);
    return 0;
}
