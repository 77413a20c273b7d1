/*
 * exec_gpu.c — the one GPU layer executor: walks the model description's
 * layers on the packed rows with a small vocabulary of ops (norms, linears
 * with bias / activation / residual epilogues, RoPE, attention, GLU).
 *
 * Post-norm BERT layers run the fused and tuned segments of plan_gpu.c: the
 * QKV GEMM + bias, sparse attention on strided views of the QKV output (no
 * copies), out-projection + bias + residual + LayerNorm, and the FFN.
 * Pre-norm layers (GPT-2, LLaMA and its kin, ModernBERT) keep the residual
 * stream x apart from the normalised h: h = norm(x); QKV (+ bias); RoPE on
 * q and k (in the QKV GEMM's epilogue where the plan runs it on gemm_sm90
 * with a tile of whole heads, else in place after it); attention over the
 * layer's mask kind with kv_heads read from k's shape; then each sublayer's
 * projection adds itself to x in its GEMM epilogue (x = x + a w^T + b:
 * cuBLASLt's C with beta = 1, or the stof templates' residual) and one row
 * pass writes h = next norm(x); the MLP is act(up) or act(a) * b (GLU), the
 * latter in FFN1's epilogue where the plan runs a stof template, else as a
 * row pass (fuse_glu) after the cuBLASLt GEMM. The last layer's pass writes
 * the final norm over x: the hidden state out.
 */
#include "model/engine_gpu.h"

#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

/* Attention of layer l on strided views of the packed QKV rows: q [T, heads,
 * D], k and v [T, kv_heads, D] (GQA reads kv_heads from k's shape). */
static stof_status attention(stof_model *m, const enc_request *r, const dev_inputs *in,
                             const layer_plan *p, int l, stof_mask *mask)
{
    enc_gpu *g = m->gpu;
    const layer_desc *ld = &m->desc.layer[l];
    int64_t T = in->rows, D = ld->head_dim, qd = (int64_t)ld->heads * D,
            kd = (int64_t)ld->kv_heads * D;
    int64_t qshape[3] = {T, ld->heads, D}, kshape[3] = {T, ld->kv_heads, D};
    stof_tensor q = stof_tensor_make(g->qkv, g->dtype, STOF_MEM_DEVICE, 3, qshape);
    stof_tensor k = stof_tensor_make((char *)g->qkv + qd * 2, g->dtype, STOF_MEM_DEVICE, 3, kshape);
    stof_tensor v = k;
    v.data = (char *)g->qkv + (qd + kd) * 2;
    q.stride[0] = k.stride[0] = v.stride[0] = qd + 2 * kd; /* rows of the fused QKV output */
    stof_tensor out = stof_tensor_make(g->attn, g->dtype, STOF_MEM_DEVICE, 3, qshape);
    int64_t ncu = r->batch + 1;
    stof_tensor cu = stof_tensor_make(in->cu, STOF_I32, STOF_MEM_DEVICE, 1, &ncu);
    stof_attn_params ap = stof_attn_default_params();
    const stof_attn_choice *a = &p->attn[g->layer_kind[l]];
    const stof_attn_choice *choice = a->kernel == STOF_ATTN_AUTO ? NULL : a;
    return attn_attention_with(m->ctx, &ap, choice, &q, &k, &v, mask, &cu, &cu, &out);
}

static stof_status wait_mask(stof_model *m, void *mask_ready)
{
    if (!mask_ready) return STOF_OK;
    return STOF_CUDA(cudaStreamWaitEvent((cudaStream_t)m->ctx->stream, (cudaEvent_t)mask_ready, 0));
}

/* ---------------------------------------------------------------- BERT (post-norm) */

/* Segment seg of layer w as a forward runs it on its inputs: in->rows rows,
 * of which the GEMM segments may skip those past in->live. */
static fuse_linear_args layer_args(const stof_model *m, int l, int seg, const dev_inputs *in)
{
    fuse_linear_args a = eng_segment_args(m, l, seg, in->rows);
    a.live_rows = in->live;
    return a;
}

static stof_status ffn(stof_model *m, int l, const layer_plan *p, const dev_inputs *in)
{
    const layer_weights *w = &m->w.layer[l];
    enc_gpu *g = m->gpu;
    const model_desc *d = &m->desc;
    if (p->use_chain) {
        fuse_ffn_args f;
        memset(&f, 0, sizeof f);
        f.dtype = g->dtype;
        f.m = in->rows;
        f.hidden = d->hidden;
        f.inter = d->layer[0].intermediate;
        f.x = g->x;
        f.w1 = w->mlp_in;
        f.b1 = w->mlp_in_b;
        f.act = d->layer[0].act;
        f.w2 = w->down;
        f.b2 = w->down_b;
        f.residual = g->x;
        f.gamma = w->mlp_norm;
        f.beta = w->mlp_norm_b;
        f.eps = d->norm_eps;
        f.y = g->x;
        f.inter_buf = g->inter;
        return fuse_ffn(m->ctx, &p->chain, &f, g->lt);
    }
    fuse_linear_args up = layer_args(m, l, TUNE_SEG_FFN1, in);
    STOF_TRY(fuse_linear_act(m->ctx, &p->ffn1, &up, g->lt));
    fuse_linear_args down = layer_args(m, l, TUNE_SEG_FFN2, in);
    return fuse_linear_res_ln(m->ctx, &p->ffn2, &down, g->lt);
}

/* One BERT layer: QKV + bias, attention, out-proj + bias + residual +
 * LayerNorm, FFN; mask_ready (a cudaEvent_t, or NULL) is where the mask is
 * complete, and attention waits for it. */
static stof_status bert_layer(stof_model *m, int l, const layer_plan *p, const enc_request *r,
                              const dev_inputs *in, stof_mask *mask, void *mask_ready)
{
    enc_gpu *g = m->gpu;
    fuse_linear_args a = layer_args(m, l, TUNE_SEG_QKV, in);
    STOF_TRY(fuse_linear_act(m->ctx, &p->qkv, &a, g->lt));
    STOF_TRY(wait_mask(m, mask_ready));
    STOF_TRY(attention(m, r, in, p, l, mask));
    a = layer_args(m, l, TUNE_SEG_OUT, in);
    STOF_TRY(fuse_linear_res_ln(m->ctx, &p->out, &a, g->lt));
    return ffn(m, l, p, in);
}

/* ---------------------------------------------------------------- pre-norm families */

/* A norm of the desc's kind over the residual stream. */
typedef struct norm_ref {
    desc_norm kind;
    const void *gamma, *beta;
} norm_ref;

/* x = x + (a.x w^T + bias) in the GEMM's epilogue (segment a writes x with
 * x as its residual; uncut, so each element is read and written by one
 * thread), then h = next(x), one row pass; the GEMM runs the plan's choice
 * c. *h is where the next sublayer reads: g->h, or x itself when the next
 * norm is NONE. last: the final norm, written over x (the hidden state out). */
static stof_status project_add_norm(stof_model *m, const dev_inputs *in, const fuse_choice *c,
                                    fuse_linear_args a, norm_ref next, bool last, const void **h)
{
    enc_gpu *g = m->gpu;
    STOF_TRY(fuse_linear_act(m->ctx, c, &a, g->lt));
    *h = g->x;
    if (next.kind == NORM_NONE) return STOF_OK;
    fuse_norm_kind kind = next.kind == NORM_RMS ? FUSE_NORM_RMS : FUSE_NORM_LAYER;
    void *out = last ? g->x : g->h;
    STOF_TRY(fuse_norm(m->ctx, g->dtype, kind, in->rows, m->desc.hidden, g->x, NULL, next.gamma,
                       next.beta, m->desc.norm_eps, out, NULL));
    *h = out;
    return STOF_OK;
}

/* FFN1 on h: act(x w^T + b), or for a GLU act(a) * b into gated: in the stof
 * templates' epilogue, or (cuBLASLt, which has no such epilogue) the GEMM's
 * interleaved halves into inter and fuse_glu over them. */
static stof_status mlp_in(stof_model *m, int l, const layer_plan *p, const dev_inputs *in,
                          const void *h)
{
    enc_gpu *g = m->gpu;
    const layer_desc *ld = &m->desc.layer[l];
    fuse_linear_args a = eng_segment_args(m, l, TUNE_SEG_FFN1, in->rows);
    a.x = h;
    if (ld->mlp != MLP_GLU) return fuse_linear_act(m->ctx, &p->ffn1, &a, g->lt);
    if (p->ffn1.path == FUSE_PATH_STOF) {
        a.glu = true;
        a.act = ld->act;
        a.y = g->gated;
        return fuse_linear_act(m->ctx, &p->ffn1, &a, g->lt);
    }
    STOF_TRY(fuse_linear_act(m->ctx, &p->ffn1, &a, g->lt));
    return fuse_glu(m->ctx, g->dtype, in->rows, ld->intermediate, g->inter, ld->act, g->gated);
}

static norm_ref attn_norm_of(const stof_model *m, int l)
{
    const layer_weights *w = &m->w.layer[l];
    return (norm_ref){m->desc.layer[l].attn_norm, w->attn_norm, w->attn_norm_b};
}

/* Whether the QKV choice c turns q and k in its GEMM epilogue (gemm_sm90
 * with a tile of whole heads), which the layer then does not do apart. */
static bool qkv_takes_rope(const fuse_choice *c, const layer_desc *ld)
{
    return c->path == FUSE_PATH_STOF &&
           fuse_rope_epi_fits(&c->config, ld->head_dim, ld->rope.rot_dim);
}

/* One pre-norm layer from h = attn_norm(x); leaves h = the next layer's
 * attn_norm(x) (or x = final_norm(x) after the last). Each GEMM runs the
 * plan's choice for its segment. */
static stof_status prenorm_layer(stof_model *m, int l, const layer_plan *p, const enc_request *r,
                                 const dev_inputs *in, stof_mask *mask, void *mask_ready,
                                 const void **h)
{
    enc_gpu *g = m->gpu;
    const model_desc *d = &m->desc;
    const layer_desc *ld = &d->layer[l];
    const layer_weights *w = &m->w.layer[l];
    fuse_linear_args a = eng_segment_args(m, l, TUNE_SEG_QKV, in->rows);
    a.x = *h;
    const int rope_cols = (ld->heads + ld->kv_heads) * ld->head_dim; /* q and k, side by side */
    const bool rope_epi = ld->pos == POS_ROPE && qkv_takes_rope(&p->qkv, ld);
    if (rope_epi) {
        a.rope = (fuse_rope_epi){in->pos, g->rope_tab[l], ld->head_dim, rope_cols};
        g->rope_epi_layers++;
    }
    STOF_TRY(fuse_linear_act(m->ctx, &p->qkv, &a, g->lt));
    if (ld->pos == POS_ROPE && !rope_epi) /* one call turns q and k */
        STOF_TRY(fuse_rope(m->ctx, g->dtype, g->qkv, in->rows, ld->heads + ld->kv_heads,
                           ld->head_dim, a.n, in->pos, &g->rope_tab[l]));
    STOF_TRY(wait_mask(m, mask_ready));
    STOF_TRY(attention(m, r, in, p, l, mask));
    norm_ref mlp_norm = {ld->mlp_norm, w->mlp_norm, w->mlp_norm_b};
    STOF_TRY(project_add_norm(m, in, &p->out, eng_segment_args(m, l, TUNE_SEG_OUT, in->rows),
                              mlp_norm, false, h));
    STOF_TRY(mlp_in(m, l, p, in, *h));
    bool last = l == d->layers - 1;
    norm_ref next = last ? (norm_ref){d->final_norm, m->w.final_norm, m->w.final_norm_b}
                         : attn_norm_of(m, l + 1);
    return project_add_norm(m, in, &p->ffn2, eng_segment_args(m, l, TUNE_SEG_FFN2, in->rows),
                            next, last, h);
}

/* x = the embeddings of the packed tokens (with the embedding norm, if any). */
static stof_status embed(stof_model *m, const dev_inputs *in)
{
    enc_gpu *g = m->gpu;
    const model_desc *d = &m->desc;
    if (d->embed == EMBED_TOKEN_POS_TYPE)
        return fuse_embeddings(m->ctx, g->dtype, &g->emb, in->ids, in->pos, in->types, in->rows,
                               g->x);
    const void *pos = d->embed == EMBED_TOKEN_POS ? m->w.pos_emb : NULL;
    STOF_TRY(fuse_embed_sum(m->ctx, g->dtype, m->w.tok_emb, d->vocab, pos, d->max_positions,
                            d->hidden, in->ids, in->pos, in->rows, g->x));
    if (d->embed_norm == NORM_NONE) return STOF_OK;
    return fuse_norm(m->ctx, g->dtype, d->embed_norm == NORM_RMS ? FUSE_NORM_RMS : FUSE_NORM_LAYER,
                     in->rows, d->hidden, g->x, NULL, m->w.emb_norm, m->w.emb_norm_b,
                     d->norm_eps, g->x, NULL);
}

/* Embeddings and every layer; the first attention waits for mask_ready. */
stof_status eng_run_layers(stof_model *m, const enc_request *r, const dev_inputs *in,
                           const layer_plan *p, stof_mask *const masks[ENG_MASK_KINDS],
                           void *mask_ready)
{
    enc_gpu *g = m->gpu;
    const model_desc *d = &m->desc;
    /* positions run below the batch's length: the tables cover it (enc_gpu_forward) */
    STOF_REQUIRE(!g->rope_tab || r->len <= g->rope_positions, STOF_ERR_SHAPE,
                 "encoder: sequences of %d tokens reach past the RoPE tables' %d positions", r->len,
                 g->rope_positions);
    STOF_TRY(embed(m, in));
    if (d->layers == 0) return wait_mask(m, mask_ready);
    if (g->bert) {
        for (int l = 0; l < d->layers; l++)
            STOF_TRY(bert_layer(m, l, p, r, in, masks[g->layer_kind[l]],
                                l == 0 ? mask_ready : NULL));
        return STOF_OK;
    }
    const void *h = g->x;
    g->rope_epi_layers = 0;
    norm_ref first = attn_norm_of(m, 0);
    if (first.kind != NORM_NONE) {
        STOF_TRY(fuse_norm(m->ctx, g->dtype, first.kind == NORM_RMS ? FUSE_NORM_RMS : FUSE_NORM_LAYER,
                           in->rows, d->hidden, g->x, NULL, first.gamma, first.beta, d->norm_eps,
                           g->h, NULL));
        h = g->h;
    }
    for (int l = 0; l < d->layers; l++)
        STOF_TRY(prenorm_layer(m, l, p, r, in, masks[g->layer_kind[l]],
                               l == 0 ? mask_ready : NULL, &h));
    return STOF_OK;
}
