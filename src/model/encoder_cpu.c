/*
 * encoder_cpu.c — the BERT encoder forward on the CPU, in fp32, padding-free:
 * real tokens are packed into [T, hidden] rows and every operator except
 * attention runs on those rows only; attention runs per sequence on its own
 * [heads, len, head_dim] slices. Built from the CPU reference ops, it is the
 * CPU backend and the oracle the GPU forward is tested against.
 *
 * The one non-obvious choice: the attention mask comes from the spec through
 * stof_mask_spec_to_dense (the mask part's element-by-element oracle), not
 * through the tile compiler, so a bug in the compiler or in the GPU kernels
 * cannot hide in the reference. Planes are evaluated once per forward and
 * shared by every layer; a sequence keeps one plane when all heads agree.
 */
#include "model/encoder.h"

#include "cpu/cpu_ref.h"
#include "mask/mask.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Scratch kept by the model between forwards, grown when a batch needs more. */
struct enc_cpu_ws {
    int64_t cap_tokens;
    int cap_len;
    float *x, *qkv, *attn, *tmp, *inter; /* [T, H], [T, 3H], [T, H], [T, H], [T, I] */
    int32_t *ids, *pos, *types;          /* [T] packed token inputs */
    float *qh, *kh, *vh, *oh;            /* [heads, len, D] slices of one sequence */
    uint8_t *plane;                      /* [L, L]: one mask plane straight from the spec */
};

/* Attention visibility of one sequence: [heads or 1][len][len] bytes, or NULL
 * planes when every pair is visible. */
typedef struct seq_mask {
    uint8_t *planes;
    int64_t stride_h; /* 0 when every head shares the first plane */
} seq_mask;

void enc_cpu_ws_free(enc_cpu_ws *ws)
{
    if (!ws) return;
    void *bufs[] = {ws->x,     ws->qkv, ws->attn, ws->tmp, ws->inter, ws->ids,  ws->pos,
                    ws->types, ws->qh,  ws->kh,   ws->vh,  ws->oh,    ws->plane};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        free(bufs[i]);
    free(ws);
}

static stof_status alloc_floats(float **p, int64_t n)
{
    free(*p);
    *p = NULL;
    return stof_host_alloc((size_t)(n > 0 ? n : 1) * sizeof(float), (void **)p);
}

static stof_status alloc_i32(int32_t **p, int64_t n)
{
    free(*p);
    *p = NULL;
    return stof_host_alloc((size_t)(n > 0 ? n : 1) * sizeof(int32_t), (void **)p);
}

/* Token-sized buffers for at least T tokens and sequence-sized ones for L. */
static stof_status ws_reserve(stof_model *m, int64_t T, int L)
{
    if (!m->cpu) STOF_TRY(stof_host_calloc(1, sizeof *m->cpu, (void **)&m->cpu));
    enc_cpu_ws *ws = m->cpu;
    const bert_config *c = &m->w.config;
    int64_t H = c->hidden_size, I = c->intermediate_size;
    if (T > ws->cap_tokens || !ws->x) {
        ws->cap_tokens = 0;
        STOF_TRY(alloc_floats(&ws->x, T * H));
        STOF_TRY(alloc_floats(&ws->qkv, T * 3 * H));
        STOF_TRY(alloc_floats(&ws->attn, T * H));
        STOF_TRY(alloc_floats(&ws->tmp, T * H));
        STOF_TRY(alloc_floats(&ws->inter, T * I));
        STOF_TRY(alloc_i32(&ws->ids, T));
        STOF_TRY(alloc_i32(&ws->pos, T));
        STOF_TRY(alloc_i32(&ws->types, T));
        ws->cap_tokens = T;
    }
    if (L > ws->cap_len || !ws->qh) {
        ws->cap_len = 0;
        STOF_TRY(alloc_floats(&ws->qh, (int64_t)L * H));
        STOF_TRY(alloc_floats(&ws->kh, (int64_t)L * H));
        STOF_TRY(alloc_floats(&ws->vh, (int64_t)L * H));
        STOF_TRY(alloc_floats(&ws->oh, (int64_t)L * H));
        free(ws->plane);
        ws->plane = NULL;
        STOF_TRY(stof_host_alloc((size_t)L * (size_t)L, (void **)&ws->plane));
        ws->cap_len = L;
    }
    return STOF_OK;
}

/* ids, positions (0..len-1 within each sequence) and token types of the real tokens. */
static void pack_inputs(const enc_request *r, enc_cpu_ws *ws)
{
    for (int b = 0; b < r->batch; b++) {
        int64_t t0 = r->cu_seqlens[b];
        for (int i = 0; i < r->lengths[b]; i++) {
            ws->ids[t0 + i] = (int32_t)enc_token_at(r->ids, b, i);
            ws->pos[t0 + i] = i;
            ws->types[t0 + i] = r->types ? (int32_t)enc_token_at(r->types, b, i) : 0;
        }
    }
}

/* ---------------------------------------------------------------- masks */

static void free_masks(seq_mask *masks, int B)
{
    if (!masks) return;
    for (int b = 0; b < B; b++)
        free(masks[b].planes);
    free(masks);
}

/* The [len, len] top-left corner of a [L, L] plane, made contiguous. */
static void crop_plane(const uint8_t *plane, int L, int len, uint8_t *out)
{
    for (int i = 0; i < len; i++)
        memcpy(out + (size_t)i * len, plane + (size_t)i * L, (size_t)len);
}

/* Planes of sequence b, one per head, folded to one when all heads agree. */
static stof_status build_seq_mask(const stof_model *m, const enc_request *r, uint8_t *plane, int b,
                                  seq_mask *out)
{
    int heads = m->info.heads, len = r->lengths[b];
    size_t area = (size_t)len * (size_t)len;
    if (len == 0) return STOF_OK;
    STOF_TRY(stof_host_alloc(area * (size_t)heads, (void **)&out->planes));
    bool same = true;
    for (int h = 0; h < heads; h++) {
        STOF_TRY(stof_mask_spec_to_dense(r->mask, r->batch, heads, r->len, r->len, r->lengths, NULL,
                                         b, h, plane));
        uint8_t *dst = out->planes + area * (size_t)h;
        crop_plane(plane, r->len, len, dst);
        if (h > 0 && memcmp(dst, out->planes, area) != 0) same = false;
    }
    out->stride_h = same ? 0 : (int64_t)area;
    return STOF_OK;
}

static stof_status build_masks(const stof_model *m, const enc_request *r, uint8_t *plane,
                               seq_mask **out)
{
    *out = NULL;
    if (!r->mask) return STOF_OK;
    seq_mask *masks;
    STOF_TRY(stof_host_calloc((size_t)r->batch, sizeof *masks, (void **)&masks));
    for (int b = 0; b < r->batch; b++) {
        stof_status st = build_seq_mask(m, r, plane, b, &masks[b]);
        if (st != STOF_OK) {
            free_masks(masks, r->batch);
            return st;
        }
    }
    *out = masks;
    return STOF_OK;
}

/* ---------------------------------------------------------------- layers */

/* qkv rows [len, 3H] (q | k | v, heads of D inside each) -> three [heads, len, D] blocks. */
static void split_heads(const float *qkv, int len, int heads, int D, float *q, float *k, float *v)
{
    int64_t H = (int64_t)heads * D;
    for (int i = 0; i < len; i++) {
        const float *row = qkv + (int64_t)i * 3 * H;
        for (int h = 0; h < heads; h++) {
            size_t bytes = (size_t)D * sizeof(float);
            int64_t dst = ((int64_t)h * len + i) * D;
            memcpy(q + dst, row + (int64_t)h * D, bytes);
            memcpy(k + dst, row + H + (int64_t)h * D, bytes);
            memcpy(v + dst, row + 2 * H + (int64_t)h * D, bytes);
        }
    }
}

/* [heads, len, D] -> rows [len, H]. */
static void merge_heads(const float *o, int len, int heads, int D, float *rows)
{
    int64_t H = (int64_t)heads * D;
    for (int i = 0; i < len; i++)
        for (int h = 0; h < heads; h++)
            memcpy(rows + (int64_t)i * H + (int64_t)h * D, o + ((int64_t)h * len + i) * D,
                   (size_t)D * sizeof(float));
}

/* Multi-head attention of every sequence: ws->qkv -> ws->attn. */
static void attention_all(const stof_model *m, const enc_request *r, const seq_mask *masks,
                          enc_cpu_ws *ws)
{
    int heads = m->info.heads, D = m->info.head_dim;
    int64_t H = m->info.hidden;
    float scale = (float)(1.0 / sqrt((double)D));
    for (int b = 0; b < r->batch; b++) {
        int len = r->lengths[b];
        if (len == 0) continue;
        int64_t t0 = r->cu_seqlens[b];
        split_heads(ws->qkv + t0 * 3 * H, len, heads, D, ws->qh, ws->kh, ws->vh);
        const uint8_t *mask = masks ? masks[b].planes : NULL;
        int64_t stride_h = masks ? masks[b].stride_h : 0;
        cpu_attention(ws->qh, ws->kh, ws->vh, ws->oh, 1, heads, len, len, D, mask, 0, stride_h,
                      scale);
        merge_heads(ws->oh, len, heads, D, ws->attn + t0 * H);
    }
}

/* One BERT layer on the packed rows ws->x (in place). */
static void layer_forward(const stof_model *m, const bert_layer_weights *lw, const enc_request *r,
                          const seq_mask *masks, enc_cpu_ws *ws)
{
    const bert_config *c = &m->w.config;
    int64_t T = r->tokens, H = c->hidden_size, I = c->intermediate_size;
    float eps = c->layer_norm_eps;
    cpu_linear(ws->x, lw->qkv_w, lw->qkv_b, ws->qkv, T, 3 * H, H, ACT_NONE);
    attention_all(m, r, masks, ws);
    cpu_linear(ws->attn, lw->attn_out_w, lw->attn_out_b, ws->tmp, T, H, H, ACT_NONE);
    cpu_layernorm(ws->tmp, ws->x, lw->attn_ln_g, lw->attn_ln_b, ws->x, T, H, eps);
    cpu_linear(ws->x, lw->inter_w, lw->inter_b, ws->inter, T, I, H, (stof_act)c->hidden_act);
    cpu_linear(ws->inter, lw->out_w, lw->out_b, ws->tmp, T, H, I, ACT_NONE);
    cpu_layernorm(ws->tmp, ws->x, lw->out_ln_g, lw->out_ln_b, ws->x, T, H, eps);
}

/* ---------------------------------------------------------------- outputs */

/* Packed rows -> [B, L, H] in the tensor's dtype, zeros at padding. */
static void write_hidden(const enc_request *r, const float *x, int64_t H, stof_tensor *out)
{
    if (out->dtype == STOF_F32) {
        cpu_unpack(x, r->lengths, r->batch, r->len, H, (float *)out->data);
        return;
    }
    for (int b = 0; b < r->batch; b++)
        for (int i = 0; i < r->len; i++) {
            int64_t dst = ((int64_t)b * r->len + i) * H;
            const float *src = i < r->lengths[b] ? x + (r->cu_seqlens[b] + i) * H : NULL;
            for (int64_t c = 0; c < H; c++)
                stof_store_f(out->data, out->dtype, dst + c, src ? src[c] : 0.0f);
        }
}

/* x / max(||x||, 1e-12), as torch.nn.functional.normalize (sentence-transformers' Normalize). */
static void l2_normalize(float *x, int64_t n)
{
    double ss = 0.0;
    for (int64_t i = 0; i < n; i++)
        ss += (double)x[i] * x[i];
    double norm = sqrt(ss);
    if (norm < 1e-12) norm = 1e-12;
    for (int64_t i = 0; i < n; i++)
        x[i] = (float)(x[i] / norm);
}

static void write_pooled(const stof_model *m, const enc_request *r, const float *x, float *out)
{
    int64_t H = m->info.hidden;
    if (m->info.pooling == STOF_POOL_CLS) {
        for (int b = 0; b < r->batch; b++) {
            float *dst = out + (int64_t)b * H;
            if (r->lengths[b] > 0)
                memcpy(dst, x + (int64_t)r->cu_seqlens[b] * H, (size_t)H * sizeof(float));
            else
                memset(dst, 0, (size_t)H * sizeof(float));
        }
    } else {
        cpu_mean_pool(x, r->cu_seqlens, r->batch, H, out);
    }
    if (m->info.normalize)
        for (int b = 0; b < r->batch; b++)
            l2_normalize(out + (int64_t)b * H, H);
}

/* ---------------------------------------------------------------- forward */

stof_status enc_cpu_forward(stof_model *m, const enc_request *r)
{
    const bert_weights *w = &m->w;
    const bert_config *c = &w->config;
    STOF_TRY(ws_reserve(m, r->tokens, r->len));
    enc_cpu_ws *ws = m->cpu;
    seq_mask *masks = NULL;
    STOF_TRY(build_masks(m, r, ws->plane, &masks));
    int64_t T = r->tokens, H = c->hidden_size;
    if (T > 0) {
        pack_inputs(r, ws);
        cpu_embeddings(ws->ids, ws->pos, ws->types, T, w->word_emb, w->pos_emb, w->type_emb,
                       w->emb_ln_g, w->emb_ln_b, H, c->layer_norm_eps, ws->x);
        for (int l = 0; l < c->num_hidden_layers; l++)
            layer_forward(m, &w->layers[l], r, masks, ws);
    }
    free_masks(masks, r->batch);
    if (r->hidden) write_hidden(r, ws->x, H, r->hidden);
    if (r->pooled) write_pooled(m, r, ws->x, (float *)r->pooled->data);
    return STOF_OK;
}
