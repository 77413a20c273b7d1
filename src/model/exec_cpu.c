/*
 * exec_cpu.c — the one CPU executor: walks a model_desc's layers in fp32 on
 * packed real tokens with the CPU reference ops, for every family. Attention
 * runs per sequence on its own [heads, len, head_dim] slices. It is the CPU
 * backend and the oracle the GPU engine is tested against.
 *
 * The one non-obvious choice: the attention mask comes from the spec through
 * stof_mask_spec_to_dense (the mask part's element-by-element oracle), not
 * through the tile compiler, so a bug in the compiler or in the GPU kernels
 * cannot hide in the reference. Spec planes are evaluated once per forward;
 * each layer intersects them with its own mask kind (causal, windows).
 *
 * Fast path (the default; STOF_CPU_REFERENCE=1 turns it off, for the tests
 * that check the GPU against this oracle): linears, LayerNorm, RMSNorm, GLU,
 * RoPE, residual adds, embeddings and pooling run the fast row ops
 * (src/cpu/cpu_fast.h) on the context's cpu_threads, and attention walks a
 * tile mask compiled once per forward per layer kind (attn_cpu_fast_rows), so
 * neither its time nor its memory grows with L x L. Its masks are the user's
 * spec within the layer kind's band (desc_layer_mask_spec, as the GPU engine
 * compiles them); the reference intersects element by element on its own, so
 * it stays the oracle of both.
 */
#include "model/encoder.h"

#include "attn/attn_cpu_fast.h"
#include "cpu/cpu_fast.h"
#include "cpu/cpu_ref.h"
#include "cpu/pool.h"
#include "mask/mask.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Tile masks one forward keeps (distinct layer kinds and head counts). */
enum { EXEC_FAST_MASKS = 8 };

/* Scratch kept by the model between forwards, grown when a batch needs more. */
struct exec_cpu_ws {
    int64_t cap_tokens;
    int cap_len;
    float *x, *h, *qkv, *attn, *tmp; /* [T, H], [T, H], [T, qkv], [T, heads D], [T, H] */
    float *inter, *gated;            /* [T, I or 2I], [T, I] */
    int32_t *ids, *pos, *types;      /* [T] packed token inputs */
    float *qh, *kh, *vh, *oh;        /* [heads, len, D] slices of one sequence */
    uint8_t *plane;                  /* [L, L]: one mask plane straight from the spec */
    uint8_t *layer_planes;           /* [heads or 1, L, L]: the spec and a layer's kind */
    size_t layer_planes_cap;
    float *inv_freq; /* [head_dim / 2] */
    /* this forward's fast path (see the top): on or off, threads, tile masks */
    bool fast;
    int threads;
    struct fast_mask {
        int kind, left, right, heads;
        stof_mask *mask; /* NULL: the compile failed, the reference runs */
    } fast_masks[EXEC_FAST_MASKS];
    int n_fast_masks;
};

/* The forward's spec for one sequence: [heads or 1][len][len] bytes, or NULL
 * planes when the spec lets every pair through. */
typedef struct seq_mask {
    uint8_t *planes;
    int64_t stride_h; /* 0 when every head shares the first plane */
} seq_mask;

void exec_cpu_ws_free(exec_cpu_ws *ws)
{
    if (!ws) return;
    void *bufs[] = {ws->x,   ws->h,     ws->qkv,   ws->attn,  ws->tmp,          ws->inter,
                    ws->gated, ws->ids, ws->pos,   ws->types, ws->qh,           ws->kh,
                    ws->vh,  ws->oh,    ws->plane, ws->layer_planes, ws->inv_freq};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        free(bufs[i]);
    free(ws);
}

static stof_status alloc_bytes(void **p, int64_t n)
{
    free(*p);
    *p = NULL;
    return stof_host_alloc((size_t)(n > 0 ? n : 1), p);
}

/* The widest of each buffer over the layers (heads, kv heads and widths may vary). */
typedef struct widths {
    int64_t qkv, attn, inter, heads_d, heads, head_dim;
} widths;

static widths max_widths(const model_desc *d)
{
    widths w = {0, 0, 0, 0, 0, 0};
    for (int i = 0; i < d->layers; i++) {
        const layer_desc *l = &d->layer[i];
        int64_t qkv = (int64_t)(l->heads + 2 * l->kv_heads) * l->head_dim;
        int64_t in = (l->mlp == MLP_GLU ? 2 : 1) * (int64_t)l->intermediate;
        if (qkv > w.qkv) w.qkv = qkv;
        if ((int64_t)l->heads * l->head_dim > w.attn) w.attn = (int64_t)l->heads * l->head_dim;
        if (in > w.inter) w.inter = in;
        if (l->heads > w.heads) w.heads = l->heads;
        if (l->head_dim > w.head_dim) w.head_dim = l->head_dim;
    }
    w.heads_d = w.heads * w.head_dim;
    return w;
}

/* Token-sized buffers for at least T tokens and sequence-sized ones for L. */
static stof_status ws_reserve(stof_model *m, int64_t T, int L)
{
    if (!m->cpu) STOF_TRY(stof_host_calloc(1, sizeof *m->cpu, (void **)&m->cpu));
    exec_cpu_ws *ws = m->cpu;
    const model_desc *d = &m->desc;
    widths w = max_widths(d);
    int64_t H = d->hidden, F = sizeof(float);
    if (T > ws->cap_tokens || !ws->x) {
        ws->cap_tokens = 0;
        STOF_TRY(alloc_bytes((void **)&ws->x, T * H * F));
        STOF_TRY(alloc_bytes((void **)&ws->h, T * H * F));
        STOF_TRY(alloc_bytes((void **)&ws->qkv, T * w.qkv * F));
        STOF_TRY(alloc_bytes((void **)&ws->attn, T * w.attn * F));
        STOF_TRY(alloc_bytes((void **)&ws->tmp, T * H * F));
        STOF_TRY(alloc_bytes((void **)&ws->inter, T * w.inter * F));
        STOF_TRY(alloc_bytes((void **)&ws->gated, T * w.inter * F));
        STOF_TRY(alloc_bytes((void **)&ws->ids, T * 4));
        STOF_TRY(alloc_bytes((void **)&ws->pos, T * 4));
        STOF_TRY(alloc_bytes((void **)&ws->types, T * 4));
        ws->cap_tokens = T;
    }
    if (L > ws->cap_len || !ws->qh) {
        ws->cap_len = 0;
        int64_t LL = (int64_t)L * L;
        STOF_TRY(alloc_bytes((void **)&ws->qh, L * w.heads_d * F));
        STOF_TRY(alloc_bytes((void **)&ws->kh, L * w.heads_d * F));
        STOF_TRY(alloc_bytes((void **)&ws->vh, L * w.heads_d * F));
        STOF_TRY(alloc_bytes((void **)&ws->oh, L * w.heads_d * F));
        STOF_TRY(alloc_bytes((void **)&ws->plane, LL));
        STOF_TRY(alloc_bytes((void **)&ws->inv_freq, w.head_dim * F));
        ws->cap_len = L;
    }
    return STOF_OK;
}

/* ids, positions (0..len-1 within each sequence) and token types of the real tokens. */
static void pack_inputs(const enc_request *r, exec_cpu_ws *ws)
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
static stof_status build_seq_mask(int heads, const enc_request *r, uint8_t *plane, int b,
                                  seq_mask *out)
{
    int len = r->lengths[b];
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

static stof_status build_masks(int heads, const enc_request *r, uint8_t *plane, seq_mask **out)
{
    *out = NULL;
    if (!r->mask) return STOF_OK;
    seq_mask *masks;
    STOF_TRY(stof_host_calloc((size_t)r->batch, sizeof *masks, (void **)&masks));
    for (int b = 0; b < r->batch; b++) {
        stof_status st = build_seq_mask(heads, r, plane, b, &masks[b]);
        if (st != STOF_OK) {
            free_masks(masks, r->batch);
            return st;
        }
    }
    *out = masks;
    return STOF_OK;
}

/* Room for the planes layer_mask writes: none when every layer is bidirectional,
 * one [L, L] plane, or one per head when the spec differs by head. */
static stof_status reserve_layer_planes(const model_desc *d, const enc_request *r,
                                        const seq_mask *masks, exec_cpu_ws *ws)
{
    bool kinds = false, per_head = false;
    int heads = 1;
    for (int i = 0; i < d->layers; i++) {
        kinds |= d->layer[i].mask != MASK_KIND_FULL;
        if (d->layer[i].heads > heads) heads = d->layer[i].heads;
    }
    for (int b = 0; masks && b < r->batch; b++)
        per_head |= masks[b].stride_h != 0;
    size_t need = kinds ? (size_t)(per_head ? heads : 1) * (size_t)r->len * (size_t)r->len : 0;
    if (need <= ws->layer_planes_cap) return STOF_OK;
    ws->layer_planes_cap = 0;
    STOF_TRY(alloc_bytes((void **)&ws->layer_planes, (int64_t)need));
    ws->layer_planes_cap = need;
    return STOF_OK;
}

/* Whether the layer's own mask kind lets query i see key j. */
static bool kind_visible(const layer_desc *l, int i, int j)
{
    switch (l->mask) {
    case MASK_KIND_FULL: return true;
    case MASK_KIND_CAUSAL: return j <= i;
    case MASK_KIND_WINDOW: return j >= i - l->window_left && j <= i + l->window_right;
    case MASK_KIND_CAUSAL_WINDOW: return j >= i - l->window_left && j <= i;
    }
    return false;
}

/* The planes one layer attends with for a sequence of len tokens: the spec's
 * (if any) intersected with the layer's kind. NULL: every pair. */
static const uint8_t *layer_mask(const layer_desc *l, const seq_mask *spec, int len,
                                 uint8_t *out, int64_t *stride_h)
{
    *stride_h = spec ? spec->stride_h : 0;
    if (l->mask == MASK_KIND_FULL) return spec ? spec->planes : NULL;
    int planes = spec && spec->stride_h ? l->heads : 1;
    size_t area = (size_t)len * (size_t)len;
    for (int h = 0; h < planes; h++)
        for (int i = 0; i < len; i++)
            for (int j = 0; j < len; j++) {
                size_t at = area * (size_t)h + (size_t)i * len + (size_t)j;
                bool spec_ok = !spec || spec->planes[at];
                out[at] = spec_ok && kind_visible(l, i, j);
            }
    return out;
}

/* ---------------------------------------------------------------- layers */

/* qkv rows [len, width] -> q [heads, len, D], k and v [kv_heads, len, D]. */
static void split_heads(const float *qkv, int len, const layer_desc *l, float *q, float *k,
                        float *v)
{
    int D = l->head_dim;
    int64_t qd = (int64_t)l->heads * D, kvd = (int64_t)l->kv_heads * D, width = qd + 2 * kvd;
    size_t bytes = (size_t)D * sizeof(float);
    for (int i = 0; i < len; i++) {
        const float *row = qkv + (int64_t)i * width;
        for (int h = 0; h < l->heads; h++)
            memcpy(q + ((int64_t)h * len + i) * D, row + (int64_t)h * D, bytes);
        for (int h = 0; h < l->kv_heads; h++) {
            memcpy(k + ((int64_t)h * len + i) * D, row + qd + (int64_t)h * D, bytes);
            memcpy(v + ((int64_t)h * len + i) * D, row + qd + kvd + (int64_t)h * D, bytes);
        }
    }
}

/* [heads, len, D] -> rows [len, heads * D]. */
static void merge_heads(const float *o, int len, int heads, int D, float *rows)
{
    int64_t W = (int64_t)heads * D;
    for (int i = 0; i < len; i++)
        for (int h = 0; h < heads; h++)
            memcpy(rows + (int64_t)i * W + (int64_t)h * D, o + ((int64_t)h * len + i) * D,
                   (size_t)D * sizeof(float));
}

/* ---------------------------------------------------------------- fast path */

/* The layer's tile mask for this forward, compiled on first use (NULL: none). */
static stof_mask *fast_mask(const stof_model *m, const layer_desc *l, const enc_request *r,
                            exec_cpu_ws *ws)
{
    int kind = (int)l->mask, left = l->window_left, right = l->window_right;
    for (int i = 0; i < ws->n_fast_masks; i++) {
        const struct fast_mask *f = &ws->fast_masks[i];
        if (f->kind == kind && f->left == left && f->right == right && f->heads == l->heads)
            return f->mask;
    }
    if (ws->n_fast_masks == EXEC_FAST_MASKS) return NULL;
    stof_mask_spec *own = NULL;
    stof_mask *mask = NULL;
    if (desc_layer_mask_spec(l->mask, l->window_left, l->window_right, r->mask, &own) == STOF_OK) {
        int64_t bshape[1] = {r->batch};
        stof_tensor lens = stof_tensor_make((void *)r->lengths, STOF_I32, STOF_MEM_HOST, 1, bshape);
        stof_mask_params mp = stof_mask_default_params();
        mp.batch = r->batch;
        mp.heads = l->heads;
        mp.len_q = mp.len_k = r->len;
        mp.lengths_q = &lens;
        if (stof_mask_compile(m->ctx, own, &mp, &mask) != STOF_OK) mask = NULL;
    }
    stof_mask_spec_destroy(own);
    ws->fast_masks[ws->n_fast_masks++] = (struct fast_mask){kind, left, right, l->heads, mask};
    return mask;
}

static void fast_masks_free(exec_cpu_ws *ws)
{
    for (int i = 0; i < ws->n_fast_masks; i++)
        stof_mask_destroy(ws->fast_masks[i].mask);
    ws->n_fast_masks = 0;
}

/* Attention of every sequence on the fast path; false: run the reference. */
static bool fast_attention(const stof_model *m, const layer_desc *l, const enc_request *r,
                           exec_cpu_ws *ws)
{
    if (!ws->fast || r->len <= 0) return false;
    stof_mask *mask = fast_mask(m, l, r, ws);
    if (!mask) return false;
    float scale = (float)(1.0 / sqrt((double)l->head_dim));
    return attn_cpu_fast_rows(ws->qkv, ws->attn, r->tokens, r->batch, r->len, l->heads, l->kv_heads,
                              l->head_dim, r->cu_seqlens, mask, scale) == STOF_OK;
}

static void linear(const exec_cpu_ws *ws, const float *x, const float *w, const float *bias,
                   float *y, int64_t m, int64_t n, int64_t k, stof_act act)
{
    if (ws->fast)
        cpu_linear_fast(ws->threads, x, w, bias, y, m, n, k, act);
    else
        cpu_linear(x, w, bias, y, m, n, k, act);
}

/* Attention of every sequence: ws->qkv -> ws->attn. Query head h reads kv
 * head h / (heads / kv_heads) (grouped-query attention). */
static void attention_all(const layer_desc *l, const enc_request *r, const seq_mask *masks,
                          exec_cpu_ws *ws)
{
    int D = l->head_dim, group = l->heads / l->kv_heads;
    int64_t width = (int64_t)(l->heads + 2 * l->kv_heads) * D;
    float scale = (float)(1.0 / sqrt((double)D));
    for (int b = 0; b < r->batch; b++) {
        int len = r->lengths[b];
        if (len == 0) continue;
        int64_t t0 = r->cu_seqlens[b], stride_h;
        split_heads(ws->qkv + t0 * width, len, l, ws->qh, ws->kh, ws->vh);
        const uint8_t *mask = layer_mask(l, masks ? &masks[b] : NULL, len, ws->layer_planes,
                                         &stride_h);
        for (int h = 0; h < l->heads; h++) {
            int64_t q_off = (int64_t)h * len * D, kv_off = (int64_t)(h / group) * len * D;
            cpu_attention(ws->qh + q_off, ws->kh + kv_off, ws->vh + kv_off, ws->oh + q_off, 1, 1,
                          len, len, D, mask ? mask + stride_h * h : NULL, 0, 0, scale);
        }
        merge_heads(ws->oh, len, l->heads, D, ws->attn + t0 * (int64_t)l->heads * D);
    }
}

/* y = a + b over n elements (the residual add); y may alias a or b. */
static void add_rows(const exec_cpu_ws *ws, const float *a, const float *b, float *y, int64_t n)
{
    if (ws->fast)
        cpu_add_fast(ws->threads, a, b, y, n);
    else
        cpu_add(a, b, y, n);
}

/* y = norm(x (+ residual)); NORM_NONE copies (or adds). y may alias x or residual. */
static void apply_norm(const exec_cpu_ws *ws, desc_norm kind, const float *x, const float *residual,
                       const void *w, const void *b, float *y, int64_t rows, int64_t cols,
                       float eps)
{
    if (kind == NORM_LAYER && ws->fast) {
        cpu_layernorm_fast(ws->threads, x, residual, w, b, y, rows, cols, eps);
    } else if (kind == NORM_LAYER) {
        cpu_layernorm(x, residual, w, b, y, rows, cols, eps);
    } else if (kind == NORM_RMS && ws->fast) {
        cpu_rmsnorm_fast(ws->threads, x, residual, w, y, rows, cols, eps);
    } else if (kind == NORM_RMS) {
        cpu_rmsnorm(x, residual, w, y, rows, cols, eps);
    } else if (residual) {
        add_rows(ws, x, residual, y, rows * cols);
    } else if (y != x) {
        memcpy(y, x, (size_t)(rows * cols) * sizeof(float));
    }
}

/* RoPE on the q and k columns of ws->qkv. */
static void rope_qk(const layer_desc *l, int64_t T, exec_cpu_ws *ws)
{
    if (l->pos != POS_ROPE) return;
    const rope_desc *p = &l->rope;
    cpu_rope_freqs(p->theta, p->rot_dim, (int)p->scaling, p->factor, p->low_freq_factor,
                   p->high_freq_factor, p->original_max_positions, ws->inv_freq);
    int64_t width = (int64_t)(l->heads + 2 * l->kv_heads) * l->head_dim;
    if (ws->fast) { /* q's heads and then k's lie side by side in a row */
        cpu_rope_fast(ws->threads, ws->qkv, T, l->heads + l->kv_heads, l->head_dim, width, ws->pos,
                      ws->inv_freq, p->rot_dim);
        return;
    }
    cpu_rope(ws->qkv, T, l->heads, l->head_dim, width, ws->pos, ws->inv_freq, p->rot_dim);
    cpu_rope(ws->qkv + (int64_t)l->heads * l->head_dim, T, l->kv_heads, l->head_dim, width,
             ws->pos, ws->inv_freq, p->rot_dim);
}

/* out[T, H] = mlp(in): plain down(act(up(in))) or down(act(gate(in)) * up(in)). */
static void mlp(const layer_desc *l, const layer_weights *lw, const float *in, float *out,
                int64_t T, int64_t H, exec_cpu_ws *ws)
{
    int64_t I = l->intermediate;
    if (l->mlp == MLP_PLAIN) {
        linear(ws, in, lw->mlp_in, lw->mlp_in_b, ws->inter, T, I, H, l->act);
        linear(ws, ws->inter, lw->down, lw->down_b, out, T, H, I, ACT_NONE);
        return;
    }
    linear(ws, in, lw->mlp_in, lw->mlp_in_b, ws->inter, T, 2 * I, H, ACT_NONE);
    if (ws->fast)
        cpu_glu_fast(ws->threads, ws->inter, ws->gated, T, I, l->act);
    else
        cpu_glu(ws->inter, ws->gated, T, I, l->act);
    linear(ws, ws->gated, lw->down, lw->down_b, out, T, H, I, ACT_NONE);
}

/* One layer on the packed rows ws->x (in place), pre- or post-norm (desc.h). */
static void layer_forward(const stof_model *m, int li, const enc_request *r, const seq_mask *masks,
                          exec_cpu_ws *ws)
{
    const model_desc *d = &m->desc;
    const layer_desc *l = &d->layer[li];
    const layer_weights *lw = &m->w.layer[li];
    int64_t T = r->tokens, H = d->hidden, qd = (int64_t)l->heads * l->head_dim;
    int64_t width = qd + 2 * (int64_t)l->kv_heads * l->head_dim;
    float eps = d->norm_eps;
    bool pre = d->norm_place == NORM_PRE;
    const float *in = ws->x;
    if (pre) {
        apply_norm(ws, l->attn_norm, ws->x, NULL, lw->attn_norm, lw->attn_norm_b, ws->h, T, H, eps);
        in = ws->h;
    }
    linear(ws, in, lw->qkv, lw->qkv_b, ws->qkv, T, width, H, ACT_NONE);
    rope_qk(l, T, ws);
    if (!fast_attention(m, l, r, ws)) attention_all(l, r, masks, ws);
    linear(ws, ws->attn, lw->o, lw->o_b, ws->tmp, T, H, qd, ACT_NONE);
    if (pre) {
        add_rows(ws, ws->tmp, ws->x, ws->x, T * H);
        apply_norm(ws, l->mlp_norm, ws->x, NULL, lw->mlp_norm, lw->mlp_norm_b, ws->h, T, H, eps);
        mlp(l, lw, ws->h, ws->tmp, T, H, ws);
        add_rows(ws, ws->tmp, ws->x, ws->x, T * H);
    } else {
        apply_norm(ws, l->attn_norm, ws->tmp, ws->x, lw->attn_norm, lw->attn_norm_b, ws->x, T, H,
                   eps);
        mlp(l, lw, ws->x, ws->tmp, T, H, ws);
        apply_norm(ws, l->mlp_norm, ws->tmp, ws->x, lw->mlp_norm, lw->mlp_norm_b, ws->x, T, H, eps);
    }
}

/* x[t] = tok[id] (+ pos[p]) (+ type[ty]), then the embedding norm. */
static void embed(const stof_model *m, int64_t T, exec_cpu_ws *ws)
{
    const model_desc *d = &m->desc;
    const model_weights *w = &m->w;
    int64_t H = d->hidden;
    if (d->embed == EMBED_TOKEN_POS_TYPE && d->embed_norm == NORM_LAYER) {
        if (ws->fast)
            cpu_embeddings_fast(ws->threads, ws->ids, ws->pos, ws->types, T, w->tok_emb, w->pos_emb,
                                w->type_emb, w->emb_norm, w->emb_norm_b, H, d->norm_eps, ws->x);
        else
            cpu_embeddings(ws->ids, ws->pos, ws->types, T, w->tok_emb, w->pos_emb, w->type_emb,
                           w->emb_norm, w->emb_norm_b, H, d->norm_eps, ws->x);
        return;
    }
    const float *tok = w->tok_emb, *pos = w->pos_emb, *type = w->type_emb;
    for (int64_t t = 0; t < T; t++) {
        float *x = ws->x + t * H;
        memcpy(x, tok + (int64_t)ws->ids[t] * H, (size_t)H * sizeof(float));
        if (d->embed != EMBED_TOKEN) cpu_add(x, pos + (int64_t)ws->pos[t] * H, x, H);
        if (d->embed == EMBED_TOKEN_POS_TYPE) cpu_add(x, type + (int64_t)ws->types[t] * H, x, H);
    }
    apply_norm(ws, d->embed_norm, ws->x, NULL, w->emb_norm, w->emb_norm_b, ws->x, T, H,
               d->norm_eps);
}

/* ---------------------------------------------------------------- outputs */

/* Packed rows -> [B, L, H] (zeros at padding) or [T, H], in the tensor's dtype. */
static void write_hidden(const enc_request *r, const float *x, int64_t H, stof_tensor *out)
{
    if (out->ndim == 2) {
        for (int64_t i = 0; i < r->tokens * H; i++)
            stof_store_f(out->data, out->dtype, i, x[i]);
        return;
    }
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
    if (m->info.pooling == STOF_POOL_MEAN && m->cpu->fast) {
        cpu_mean_pool_fast(m->cpu->threads, x, r->cu_seqlens, r->batch, H, out);
    } else if (m->info.pooling == STOF_POOL_MEAN) {
        cpu_mean_pool(x, r->cu_seqlens, r->batch, H, out);
    } else {
        for (int b = 0; b < r->batch; b++) {
            float *dst = out + (int64_t)b * H;
            int64_t row = m->info.pooling == STOF_POOL_CLS ? r->cu_seqlens[b]
                                                            : r->cu_seqlens[b + 1] - 1;
            if (r->lengths[b] > 0)
                memcpy(dst, x + row * H, (size_t)H * sizeof(float));
            else
                memset(dst, 0, (size_t)H * sizeof(float));
        }
    }
    if (m->info.normalize)
        for (int b = 0; b < r->batch; b++)
            l2_normalize(out + (int64_t)b * H, H);
}

/* Logits of the last real token of each sequence ([B, V]) or of every token
 * ([B, L, V], zeros at padding); an empty sequence gets zeros. */
static void write_logits(const stof_model *m, const enc_request *r, const float *x, float *out)
{
    int64_t H = m->desc.hidden, V = m->desc.vocab;
    const float *head = m->w.lm_head;
    for (int b = 0; b < r->batch; b++) {
        int len = r->lengths[b];
        int64_t t0 = r->cu_seqlens[b];
        if (r->logits_all) {
            float *dst = out + (int64_t)b * r->len * V;
            if (len > 0) cpu_linear(x + t0 * H, head, NULL, dst, len, V, H, ACT_NONE);
            memset(dst + (int64_t)len * V, 0, (size_t)((r->len - len) * V) * sizeof(float));
        } else if (len > 0) {
            cpu_linear(x + (t0 + len - 1) * H, head, NULL, out + b * V, 1, V, H, ACT_NONE);
        } else {
            memset(out + b * V, 0, (size_t)V * sizeof(float));
        }
    }
}

/* ---------------------------------------------------------------- forward */

stof_status exec_cpu_forward(stof_model *m, const enc_request *r)
{
    const model_desc *d = &m->desc;
    STOF_TRY(ws_reserve(m, r->tokens, r->len));
    exec_cpu_ws *ws = m->cpu;
    ws->fast = !cpu_use_reference();
    ws->threads = m->ctx->cpu_threads;
    seq_mask *masks = NULL;
    STOF_TRY(build_masks(max_widths(d).heads, r, ws->plane, &masks));
    stof_status st = reserve_layer_planes(d, r, masks, ws);
    if (st != STOF_OK) {
        free_masks(masks, r->batch);
        return st;
    }
    int64_t T = r->tokens, H = d->hidden;
    /* fast linears split the sgemm over our pool themselves: OpenBLAS at one thread */
    int blas_threads = cpu_blas_threads_enter(ws->fast ? 1 : ws->threads);
    if (T > 0) {
        pack_inputs(r, ws);
        embed(m, T, ws);
        for (int l = 0; l < d->layers; l++)
            layer_forward(m, l, r, masks, ws);
        apply_norm(ws, d->final_norm, ws->x, NULL, m->w.final_norm, m->w.final_norm_b, ws->x, T, H,
                   d->norm_eps);
    }
    fast_masks_free(ws);
    free_masks(masks, r->batch);
    if (r->hidden) write_hidden(r, ws->x, H, r->hidden);
    if (r->pooled) write_pooled(m, r, ws->x, (float *)r->pooled->data);
    if (r->logits) write_logits(m, r, ws->x, (float *)r->logits->data);
    cpu_blas_threads_restore(blas_threads);
    return STOF_OK;
}
