/*
 * embed.c — stof_model_embed: sentence embeddings of texts, the one pipeline
 * that `stof embed` and stof.Model.encode share (tokenize, sort by token
 * count, batch, forward with the model's pooling, back to input order).
 *
 * Sorting by token count makes each batch's padding small; since the
 * forward computes real tokens only, the order changes the work, not the
 * result. Ties keep input order so that a run is reproducible.
 */
#include "model/engine.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

stof_embed_params stof_embed_default_params(void)
{
    stof_embed_params p;
    memset(&p, 0, sizeof p);
    p.batch = 32;
    return p;
}

typedef struct embed_item {
    int32_t len;
    int64_t index;
} embed_item;

static int longer_first(const void *x, const void *y)
{
    const embed_item *a = x, *b = y;
    if (a->len != b->len) return b->len - a->len;
    return (a->index > b->index) - (a->index < b->index);
}

typedef struct embed_ws {
    int32_t *tokens; /* [n, max_len] */
    embed_item *order;
    int32_t *ids, *lens; /* [batch, max_len], [batch] */
    float *pooled;       /* [batch, hidden] */
} embed_ws;

static void embed_ws_free(embed_ws *w)
{
    free(w->tokens);
    free(w->order);
    free(w->ids);
    free(w->lens);
    free(w->pooled);
}

static stof_status embed_ws_alloc(embed_ws *w, int64_t n, int batch, int max_len, int hidden)
{
    size_t N = (size_t)n, B = (size_t)batch, M = (size_t)max_len;
    STOF_TRY(stof_host_alloc(N * M * sizeof(int32_t), (void **)&w->tokens));
    STOF_TRY(stof_host_alloc(N * sizeof(embed_item), (void **)&w->order));
    STOF_TRY(stof_host_alloc(B * M * sizeof(int32_t), (void **)&w->ids));
    STOF_TRY(stof_host_alloc(B * sizeof(int32_t), (void **)&w->lens));
    return stof_host_alloc(B * (size_t)hidden * sizeof(float), (void **)&w->pooled);
}

/* Texts order[first .. first + count) through one forward, into out rows. */
static stof_status embed_batch(stof_model *m, const stof_forward_params *fp, embed_ws *w,
                               int max_len, int hidden, int64_t first, int count, float *out)
{
    int L = 0;
    for (int b = 0; b < count; b++) {
        w->lens[b] = w->order[first + b].len;
        if (w->lens[b] > L) L = w->lens[b];
    }
    for (int b = 0; b < count; b++) {
        const int32_t *src = w->tokens + w->order[first + b].index * max_len;
        int32_t *dst = w->ids + (int64_t)b * L;
        memcpy(dst, src, (size_t)w->lens[b] * sizeof *dst);
        memset(dst + w->lens[b], 0, (size_t)(L - w->lens[b]) * sizeof *dst);
    }
    int64_t sh_ids[2] = {count, L}, sh_len[1] = {count}, sh_pool[2] = {count, hidden};
    stof_tensor ids = stof_tensor_make(w->ids, STOF_I32, STOF_MEM_HOST, 2, sh_ids);
    stof_tensor lens = stof_tensor_make(w->lens, STOF_I32, STOF_MEM_HOST, 1, sh_len);
    stof_tensor pooled = stof_tensor_make(w->pooled, STOF_F32, STOF_MEM_HOST, 2, sh_pool);
    STOF_TRY(stof_model_forward(m, fp, &ids, &lens, NULL, NULL, &pooled));
    for (int b = 0; b < count; b++) {
        const float *e = w->pooled + (int64_t)b * hidden;
        int64_t text = w->order[first + b].index;
        for (int j = 0; j < hidden; j++)
            STOF_REQUIRE(isfinite(e[j]), STOF_ERR_UNSUPPORTED,
                         "the embedding of text %lld is not finite (component %d): an overflow of "
                         "the run dtype (try bf16, or the CPU)",
                         (long long)text, j);
        memcpy(out + text * hidden, e, (size_t)hidden * sizeof(float));
    }
    return STOF_OK;
}

static stof_status embed_all(stof_model *m, const stof_tokenizer *tok, const char *const *texts,
                             const size_t *lens, int64_t n, const stof_embed_params *p,
                             int max_len, float *out)
{
    int hidden = m->info.hidden;
    embed_ws w;
    memset(&w, 0, sizeof w);
    stof_status st = embed_ws_alloc(&w, n, p->batch, max_len, hidden);
    for (int64_t i = 0; i < n && st == STOF_OK; i++) {
        const char *text = texts[i];
        size_t len = lens ? lens[i] : strlen(text);
        st = stof_tokenize_batch(tok, &text, &len, 1, max_len, w.tokens + i * max_len,
                                 (size_t)max_len, &w.order[i].len, NULL);
        w.order[i].index = i;
    }
    if (st == STOF_OK) qsort(w.order, (size_t)n, sizeof *w.order, longer_first);
    stof_forward_params fp = stof_forward_default_params();
    fp.mask = p->mask;
    for (int64_t i = 0; i < n && st == STOF_OK; i += p->batch) {
        int count = (int)(n - i < p->batch ? n - i : p->batch);
        st = embed_batch(m, &fp, &w, max_len, hidden, i, count, out);
    }
    embed_ws_free(&w);
    return st;
}

stof_status stof_model_embed(stof_model *model, const stof_tokenizer *tok,
                             const char *const *texts, const size_t *lens, int64_t n,
                             const stof_embed_params *params, float *out)
{
    STOF_REQUIRE(model && tok && out && (texts || n == 0), STOF_ERR_INVALID_ARG,
                 "stof_model_embed: NULL argument");
    STOF_REQUIRE(n >= 0, STOF_ERR_INVALID_ARG, "stof_model_embed: n = %lld", (long long)n);
    stof_embed_params p = params ? *params : stof_embed_default_params();
    STOF_REQUIRE(p.batch >= 1, STOF_ERR_INVALID_ARG, "stof_model_embed: batch %d must be >= 1",
                 p.batch);
    int positions = model->info.max_positions;
    STOF_REQUIRE(p.max_length <= positions, STOF_ERR_INVALID_ARG,
                 "stof_model_embed: max_length %d exceeds the model's %d positions "
                 "(max_position_embeddings)",
                 p.max_length, positions);
    int max_len = p.max_length ? p.max_length : stof_tokenizer_max_length(tok, positions);
    STOF_REQUIRE(max_len >= 2, STOF_ERR_INVALID_ARG,
                 "stof_model_embed: max_length %d leaves no room for [CLS] and [SEP]", max_len);
    for (int64_t i = 0; i < n; i++)
        STOF_REQUIRE(texts[i], STOF_ERR_INVALID_ARG, "stof_model_embed: texts[%lld] is NULL",
                     (long long)i);
    return embed_all(model, tok, texts, lens, n, &p, max_len, out);
}
