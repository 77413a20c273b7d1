/*
 * exec_gpu.c — the layers on the packed rows: embeddings + LayerNorm, then
 * per layer the QKV GEMM + bias, sparse attention on strided views of the
 * QKV output ([T, 3, heads, D] read as three [T, heads, D] tensors, no
 * copies), out-projection + bias + residual + LayerNorm, and the FFN.
 */
#include "model/engine_gpu.h"

#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

static stof_status attention(stof_model *m, const enc_request *r, const dev_inputs *in,
                             const layer_plan *p, stof_mask *mask)
{
    enc_gpu *g = m->gpu;
    int64_t T = in->rows, H = m->info.hidden, heads = m->info.heads, D = m->info.head_dim;
    int64_t shape[3] = {T, heads, D};
    stof_tensor q = stof_tensor_make(g->qkv, g->dtype, STOF_MEM_DEVICE, 3, shape);
    q.stride[0] = 3 * H; /* rows of the fused QKV output: q | k | v */
    stof_tensor k = q, v = q;
    k.data = (char *)g->qkv + H * 2;
    v.data = (char *)g->qkv + 2 * H * 2;
    stof_tensor out = stof_tensor_make(g->attn, g->dtype, STOF_MEM_DEVICE, 3, shape);
    int64_t ncu = r->batch + 1;
    stof_tensor cu = stof_tensor_make(in->cu, STOF_I32, STOF_MEM_DEVICE, 1, &ncu);
    stof_attn_params ap = stof_attn_default_params();
    const stof_attn_choice *choice = p->attn.kernel == STOF_ATTN_AUTO ? NULL : &p->attn;
    return attn_attention_with(m->ctx, &ap, choice, &q, &k, &v, mask, &cu, &cu, &out);
}

/* Segment seg of layer w as a forward runs it on its inputs: in->rows rows,
 * of which the GEMM segments may skip those past in->live. */
static fuse_linear_args layer_args(const stof_model *m, const gpu_layer *w, int seg,
                                   const dev_inputs *in)
{
    fuse_linear_args a = eng_segment_args(m, w, seg, in->rows);
    a.live_rows = in->live;
    return a;
}

static stof_status ffn(stof_model *m, const gpu_layer *w, const layer_plan *p, const dev_inputs *in)
{
    enc_gpu *g = m->gpu;
    const bert_config *c = &m->w.config;
    if (p->use_chain) {
        fuse_ffn_args f;
        memset(&f, 0, sizeof f);
        f.dtype = g->dtype;
        f.m = in->rows;
        f.hidden = c->hidden_size;
        f.inter = c->intermediate_size;
        f.x = g->x;
        f.w1 = w->i_w;
        f.b1 = w->i_b;
        f.act = c->hidden_act;
        f.w2 = w->f_w;
        f.b2 = w->f_b;
        f.residual = g->x;
        f.gamma = w->ln2_g;
        f.beta = w->ln2_b;
        f.eps = c->layer_norm_eps;
        f.y = g->x;
        f.inter_buf = g->inter;
        return fuse_ffn(m->ctx, &p->chain, &f, g->lt);
    }
    fuse_linear_args up = layer_args(m, w, TUNE_SEG_FFN1, in);
    STOF_TRY(fuse_linear_act(m->ctx, &p->ffn1, &up, g->lt));
    fuse_linear_args down = layer_args(m, w, TUNE_SEG_FFN2, in);
    return fuse_linear_res_ln(m->ctx, &p->ffn2, &down, g->lt);
}

/* One layer; mask_ready (a cudaEvent_t, or NULL) is recorded where the mask is
 * complete, and attention waits for it. */
static stof_status layer(stof_model *m, const gpu_layer *w, const layer_plan *p,
                         const enc_request *r, const dev_inputs *in, stof_mask *mask,
                         void *mask_ready)
{
    enc_gpu *g = m->gpu;
    fuse_linear_args a = layer_args(m, w, TUNE_SEG_QKV, in);
    STOF_TRY(fuse_linear_act(m->ctx, &p->qkv, &a, g->lt));
    if (mask_ready)
        STOF_CUDA_TRY(
            cudaStreamWaitEvent((cudaStream_t)m->ctx->stream, (cudaEvent_t)mask_ready, 0));
    STOF_TRY(attention(m, r, in, p, mask));
    a = layer_args(m, w, TUNE_SEG_OUT, in);
    STOF_TRY(fuse_linear_res_ln(m->ctx, &p->out, &a, g->lt));
    return ffn(m, w, p, in);
}

/* Embeddings and every layer; mask_ready as for layer (the first attention waits). */
stof_status eng_run_layers(stof_model *m, const enc_request *r, const dev_inputs *in,
                              const layer_plan *p, stof_mask *mask, void *mask_ready)
{
    enc_gpu *g = m->gpu;
    const bert_config *c = &m->w.config;
    STOF_TRY(
        fuse_embeddings(m->ctx, g->dtype, &g->emb, in->ids, in->pos, in->types, in->rows, g->x));
    for (int l = 0; l < c->num_hidden_layers; l++)
        STOF_TRY(layer(m, &g->layers[l], p, r, in, mask, l == 0 ? mask_ready : NULL));
    if (mask_ready && c->num_hidden_layers == 0)
        STOF_CUDA_TRY(
            cudaStreamWaitEvent((cudaStream_t)m->ctx->stream, (cudaEvent_t)mask_ready, 0));
    return STOF_OK;
}
