/*
 * weights_gpu.c — the weights on the device: one block in the run dtype
 * behind every tensor (the query, key and value projections fused into one
 * [3H, H] matrix), converted on the host and copied once.
 */
#include "model/engine_gpu.h"

#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

typedef struct weight_entry {
    const float *src;
    int64_t n;
    const void **dst;
    size_t off;
} weight_entry;

typedef struct weight_list {
    weight_entry *e;
    int count;
    size_t total;
} weight_list;

static void weight_add(weight_list *l, const float *src, int64_t n, const void **dst)
{
    weight_entry *e = &l->e[l->count++];
    e->src = src;
    e->n = n;
    e->dst = dst;
    e->off = l->total;
    l->total += align256((size_t)n * 2);
}

static void list_weights(const bert_weights *w, enc_gpu *g, weight_list *l)
{
    const bert_config *c = &w->config;
    int64_t H = c->hidden_size, I = c->intermediate_size;
    weight_add(l, w->word_emb, (int64_t)c->vocab_size * H, &g->emb.word);
    weight_add(l, w->pos_emb, (int64_t)c->max_position_embeddings * H, &g->emb.position);
    weight_add(l, w->type_emb, (int64_t)c->type_vocab_size * H, &g->emb.type);
    weight_add(l, w->emb_ln_g, H, &g->emb.gamma);
    weight_add(l, w->emb_ln_b, H, &g->emb.beta);
    for (int i = 0; i < c->num_hidden_layers; i++) {
        const bert_layer_weights *s = &w->layers[i];
        gpu_layer *d = &g->layers[i];
        weight_add(l, s->qkv_w, 3 * H * H, &d->qkv_w);
        weight_add(l, s->qkv_b, 3 * H, &d->qkv_b);
        weight_add(l, s->attn_out_w, H * H, &d->o_w);
        weight_add(l, s->attn_out_b, H, &d->o_b);
        weight_add(l, s->attn_ln_g, H, &d->ln1_g);
        weight_add(l, s->attn_ln_b, H, &d->ln1_b);
        weight_add(l, s->inter_w, I * H, &d->i_w);
        weight_add(l, s->inter_b, I, &d->i_b);
        weight_add(l, s->out_w, H * I, &d->f_w);
        weight_add(l, s->out_b, H, &d->f_b);
        weight_add(l, s->out_ln_g, H, &d->ln2_g);
        weight_add(l, s->out_ln_b, H, &d->ln2_b);
    }
}

/* Converted to the run dtype on the host, then one copy. */
stof_status eng_upload_weights(stof_model *m, enc_gpu *g)
{
    const bert_config *c = &m->w.config;
    weight_list l = {0};
    STOF_TRY(stof_host_calloc((size_t)(5 + 12 * c->num_hidden_layers), sizeof *l.e, (void **)&l.e));
    list_weights(&m->w, g, &l);
    uint16_t *host = NULL;
    stof_status st = stof_host_alloc(l.total, (void **)&host);
    if (st == STOF_OK) st = stof_dev_alloc(g->ctx, l.total, &g->weights);
    if (st == STOF_OK) {
        for (int i = 0; i < l.count; i++) {
            uint16_t *dst = (uint16_t *)((char *)host + l.e[i].off);
            for (int64_t j = 0; j < l.e[i].n; j++)
                dst[j] = g->dtype == STOF_BF16 ? stof_f32_to_bf16(l.e[i].src[j])
                                               : stof_f32_to_f16(l.e[i].src[j]);
            *l.e[i].dst = (char *)g->weights + l.e[i].off;
        }
        cudaStream_t s = (cudaStream_t)g->ctx->stream;
        st = STOF_CUDA(cudaMemcpyAsync(g->weights, host, l.total, cudaMemcpyHostToDevice, s));
        if (st == STOF_OK) st = STOF_CUDA(cudaStreamSynchronize(s));
    }
    free(host);
    free(l.e);
    g->emb.vocab = c->vocab_size;
    g->emb.max_pos = c->max_position_embeddings;
    g->emb.type_vocab = c->type_vocab_size;
    g->emb.hidden = c->hidden_size;
    g->emb.eps = c->layer_norm_eps;
    return st;
}
