/*
 * weights.c — any family's checkpoint into the canonical layout of engine.h,
 * one tensor at a time, in the run dtype.
 *
 * The family's name table says where each role lives; this file assembles
 * the canonical tensors from it (separate q/k/v and gate/up concatenated,
 * Conv1D's [in, out] transposed), converts each element once from the
 * stored dtype (F32, F16, BF16) to the run dtype in one host staging buffer,
 * and hands the result to a weight_sink. Every tensor's dtype and shape is
 * checked before it is read and before the stage grows to hold it, so a
 * config that claims enormous sizes fails on the first mismatch, not on an
 * allocation. Sharded checkpoints
 * (model.safetensors.index.json) are read through their weight_map.
 */
#include "model/config.h"
#include "model/engine.h"
#include "io/safetensors.h"

#include <cjson/cJSON.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "safetensors data is little-endian; big-endian hosts are not supported"
#endif

#define NAME_LEN 256
#define MAX_SHARDS 256

/* The open checkpoint: one file, or the shards an index names. */
typedef struct ckpt {
    safetensors_file *file[MAX_SHARDS];
    char shard_name[MAX_SHARDS][NAME_LEN];
    int n_files;
    cJSON *index;      /* the index's weight_map (sharded), else NULL */
    cJSON *index_root;
    const char *path;  /* for messages */
} ckpt;

typedef struct loader {
    ckpt ck;
    const family_def *fam;
    const model_desc *d;
    const char *prefix;
    stof_dtype dtype;
    weight_sink *sink;
    void *stage;
    size_t stage_bytes;
    int64_t n_params;
} loader;

static void ckpt_close(ckpt *c)
{
    for (int i = 0; i < c->n_files; i++)
        stof_safetensors_close(c->file[i]);
    cJSON_Delete(c->index_root);
    memset(c, 0, sizeof *c);
}

static stof_status open_shard(ckpt *c, const char *dir, const char *file)
{
    for (int i = 0; i < c->n_files; i++)
        if (strcmp(c->shard_name[i], file) == 0) return STOF_OK;
    STOF_REQUIRE(c->n_files < MAX_SHARDS, STOF_ERR_UNSUPPORTED, "%s: more than %d shards", c->path,
                 MAX_SHARDS);
    STOF_REQUIRE(strlen(file) < NAME_LEN && !strchr(file, '/') && strcmp(file, "..") != 0,
                 STOF_ERR_FORMAT, "%s: shard \"%.64s\" must be a file name inside the folder",
                 c->path, file);
    char path[MODEL_PATH_MAX + NAME_LEN + 2];
    snprintf(path, sizeof path, "%s/%s", dir, file);
    STOF_TRY(stof_safetensors_open(path, &c->file[c->n_files]));
    snprintf(c->shard_name[c->n_files], NAME_LEN, "%s", file);
    c->n_files++;
    return STOF_OK;
}

static stof_status ckpt_open(const model_files *files, ckpt *c)
{
    memset(c, 0, sizeof *c);
    c->path = files->weights_path;
    if (!files->sharded) {
        c->n_files = 1;
        return stof_safetensors_open(files->weights_path, &c->file[0]);
    }
    STOF_TRY(cfg_load_json(files->weights_path, &c->index_root));
    c->index = cJSON_GetObjectItemCaseSensitive(c->index_root, "weight_map");
    STOF_REQUIRE(cJSON_IsObject(c->index), STOF_ERR_FORMAT, "%s: no \"weight_map\" object",
                 c->path);
    const cJSON *e;
    cJSON_ArrayForEach(e, c->index)
    {
        STOF_REQUIRE(cJSON_IsString(e), STOF_ERR_FORMAT,
                     "%s: weight_map[\"%.64s\"] is not a file name", c->path, e->string);
        STOF_TRY(open_shard(c, files->dir, e->valuestring));
    }
    return STOF_OK;
}

static const safetensors_tensor *ckpt_find(const ckpt *c, const char *name)
{
    if (!c->index) return stof_safetensors_find(c->file[0], name);
    const cJSON *e = cJSON_GetObjectItemCaseSensitive(c->index, name);
    if (!cJSON_IsString(e)) return NULL;
    for (int i = 0; i < c->n_files; i++)
        if (strcmp(c->shard_name[i], e->valuestring) == 0)
            return stof_safetensors_find(c->file[i], name);
    return NULL;
}

/* ---- names */

static const weight_name *role_name(const family_def *f, weight_role r)
{
    for (int i = 0; i < f->n_names; i++)
        if (f->names[i].role == r && f->names[i].pattern) return &f->names[i];
    return NULL;
}

static bool has_role(const family_def *f, weight_role r)
{
    return role_name(f, r) != NULL;
}

/* The tensor of role r (layer ignored for model-wide roles), under the
 * model's prefix; the LM head may also sit outside it (GPT2LMHeadModel), and
 * LayerNorms may carry BERT's old .gamma / .beta names. */
static const safetensors_tensor *find_role(const loader *ld, weight_role r, int layer, char *name)
{
    const weight_name *wn = role_name(ld->fam, r);
    char base[NAME_LEN];
    /* The patterns are the family's own literals with at most one %d. */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wformat-nonliteral"
    snprintf(base, sizeof base, wn->pattern, layer);
#pragma GCC diagnostic pop
    snprintf(name, NAME_LEN, "%s%s", ld->prefix, base);
    const safetensors_tensor *t = ckpt_find(&ld->ck, name);
    if (!t && r == W_LM_HEAD) t = ckpt_find(&ld->ck, base);
    static const char *const old[][2] = {{"LayerNorm.weight", "LayerNorm.gamma"},
                                         {"LayerNorm.bias", "LayerNorm.beta"}};
    for (int i = 0; !t && i < 2; i++) {
        size_t n = strlen(name), k = strlen(old[i][0]);
        if (n < k || strcmp(name + n - k, old[i][0]) != 0) continue;
        char alt[NAME_LEN];
        snprintf(alt, sizeof alt, "%.*s%s", (int)(n - k), name, old[i][1]);
        t = ckpt_find(&ld->ck, alt);
    }
    return t;
}

/* The first of the family's prefixes under which the token embeddings exist. */
static stof_status find_prefix(loader *ld)
{
    const weight_name *wn = role_name(ld->fam, W_EMB_TOKEN);
    for (int i = 0; ld->fam->prefixes[i]; i++) {
        char name[NAME_LEN];
        snprintf(name, sizeof name, "%s%s", ld->fam->prefixes[i], wn->pattern);
        if (ckpt_find(&ld->ck, name)) {
            ld->prefix = ld->fam->prefixes[i];
            return STOF_OK;
        }
    }
    return stof_error(STOF_ERR_FORMAT, "%s: no tensor \"%s\" (tried the prefixes of %s: \"\", %s)",
                      ld->ck.path, wn->pattern, ld->fam->name,
                      ld->fam->prefixes[1] ? ld->fam->prefixes[1] : "none");
}

/* ---- conversion */

static float read_elem(const safetensors_tensor *t, int64_t i)
{
    const unsigned char *p = t->data;
    if (t->dtype == ST_F32) {
        float v;
        memcpy(&v, p + 4 * i, 4);
        return v;
    }
    uint16_t h;
    memcpy(&h, p + 2 * i, 2);
    return t->dtype == ST_BF16 ? stof_bf16_to_f32(h) : stof_f16_to_f32(h);
}

static void write_elem(void *dst, stof_dtype dtype, int64_t i, float v)
{
    if (dtype == STOF_F32)
        ((float *)dst)[i] = v;
    else if (dtype == STOF_BF16)
        ((uint16_t *)dst)[i] = stof_f32_to_bf16(v);
    else
        ((uint16_t *)dst)[i] = stof_f32_to_f16(v);
}

/* One piece of a canonical tensor: role r's tensor, rows x cols in the
 * canonical [out, in] layout (cols 0: a vector of rows). */
typedef struct piece {
    weight_role role;
    int64_t rows, cols;
} piece;

/* The piece's tensor, its dtype and shape checked (nothing is read yet). */
static stof_status find_piece(loader *ld, int layer, const piece *p,
                              const safetensors_tensor **out)
{
    char name[NAME_LEN];
    const weight_name *wn = role_name(ld->fam, p->role);
    const safetensors_tensor *t = find_role(ld, p->role, layer, name);
    STOF_REQUIRE(t, STOF_ERR_FORMAT, "%s: tensor \"%s\" is missing", ld->ck.path, name);
    STOF_REQUIRE(t->dtype == ST_F32 || t->dtype == ST_F16 || t->dtype == ST_BF16, STOF_ERR_FORMAT,
                 "%s: tensor \"%s\" is %s; weights must be F32, F16 or BF16", ld->ck.path, name,
                 stof_safetensors_dtype_name(t->dtype));
    bool tr = wn->transposed && p->cols > 0;
    int64_t d0 = tr ? p->cols : p->rows, d1 = tr ? p->rows : p->cols;
    bool ok = p->cols == 0 ? t->ndim == 1 && t->shape[0] == p->rows
                           : t->ndim == 2 && t->shape[0] == d0 && t->shape[1] == d1;
    if (!ok) {
        char got[96];
        stof_safetensors_shape_str(t->shape, t->ndim, got, sizeof got);
        if (p->cols == 0)
            return stof_error(STOF_ERR_FORMAT, "%s: tensor \"%s\" has shape %s, expected [%lld]",
                              ld->ck.path, name, got, (long long)p->rows);
        return stof_error(STOF_ERR_FORMAT, "%s: tensor \"%s\" has shape %s, expected [%lld, %lld]",
                          ld->ck.path, name, got, (long long)d0, (long long)d1);
    }
    *out = t;
    return STOF_OK;
}

/* Writes a checked piece's rows at row0 of the stage, in the run dtype; a
 * non-finite weight is refused, naming the tensor and element. */
static stof_status fill_piece(loader *ld, const piece *p, const safetensors_tensor *t,
                              int64_t row0)
{
    bool tr = role_name(ld->fam, p->role)->transposed && p->cols > 0;
    int64_t cols = p->cols ? p->cols : 1;
    for (int64_t r = 0; r < p->rows; r++)
        for (int64_t c = 0; c < cols; c++) {
            int64_t at = tr ? c * p->rows + r : r * cols + c;
            float v = read_elem(t, at);
            if (!isfinite(v)) return stof_nonfinite_error(v, at, ld->ck.path, t->name);
            write_elem(ld->stage, ld->dtype, (row0 + r) * cols + c, v);
        }
    return STOF_OK;
}

/* Concatenates pieces (rows stacked) into one canonical tensor and gives it
 * to the sink (glu_half: weight_sink's). Every piece is checked before the
 * stage grows to hold them, so a config that claims enormous sizes fails on
 * a shape, not an allocation. */
static stof_status put_tensor(loader *ld, int layer, const char *what, void **slot,
                              const piece *pieces, int n, int glu_half)
{
    const safetensors_tensor *t[3];
    int64_t rows = 0, cols = pieces[0].cols ? pieces[0].cols : 1;
    for (int i = 0; i < n; i++) {
        STOF_TRY(find_piece(ld, layer, &pieces[i], &t[i]));
        rows += pieces[i].rows;
    }
    size_t bytes = (size_t)(rows * cols) * stof_dtype_size(ld->dtype);
    if (bytes > ld->stage_bytes) {
        free(ld->stage);
        ld->stage = NULL;
        ld->stage_bytes = 0;
        STOF_TRY(stof_host_alloc(bytes, &ld->stage));
        ld->stage_bytes = bytes;
    }
    for (int64_t i = 0, row0 = 0; i < n; row0 += pieces[i].rows, i++)
        STOF_TRY(fill_piece(ld, &pieces[i], t[i], row0));
    char label[64];
    if (layer >= 0)
        snprintf(label, sizeof label, "layers.%d.%s", layer, what);
    else
        snprintf(label, sizeof label, "%s", what);
    ld->n_params += rows * cols;
    return ld->sink->put(ld->sink, label, slot, ld->stage, bytes, glu_half);
}

static stof_status put_one(loader *ld, int layer, const char *what, void **slot, weight_role r,
                           int64_t rows, int64_t cols)
{
    piece p = {r, rows, cols};
    return put_tensor(ld, layer, what, slot, &p, 1, 0);
}

/* A norm of kind k: its weight, and its bias where the family has one. */
static stof_status put_norm(loader *ld, int layer, const char *what, desc_norm k, void **w,
                            void **b, weight_role rw, weight_role rb)
{
    if (k == NORM_NONE) return STOF_OK;
    int64_t H = ld->d->hidden;
    STOF_TRY(put_one(ld, layer, what, w, rw, H, 0));
    if (k != NORM_LAYER || !ld->d->norm_bias) return STOF_OK;
    char bias[32];
    snprintf(bias, sizeof bias, "%s_b", what);
    return put_one(ld, layer, bias, b, rb, H, 0);
}

static stof_status put_layer(loader *ld, int i, layer_weights *lw)
{
    const model_desc *d = ld->d;
    const layer_desc *l = &d->layer[i];
    int64_t H = d->hidden, qd = (int64_t)l->heads * l->head_dim;
    int64_t kvd = (int64_t)l->kv_heads * l->head_dim, I = l->intermediate;
    bool fused_qkv = has_role(ld->fam, W_QKV);
    STOF_TRY(put_norm(ld, i, "attn_norm", l->attn_norm, &lw->attn_norm, &lw->attn_norm_b,
                      W_ATTN_NORM, W_ATTN_NORM_B));
    piece qkv[3] = {{W_Q, qd, H}, {W_K, kvd, H}, {W_V, kvd, H}};
    piece qkv_f = {W_QKV, qd + 2 * kvd, H};
    STOF_TRY(put_tensor(ld, i, "qkv", &lw->qkv, fused_qkv ? &qkv_f : qkv, fused_qkv ? 1 : 3, 0));
    if (l->qkv_bias) {
        piece b[3] = {{W_Q_B, qd, 0}, {W_K_B, kvd, 0}, {W_V_B, kvd, 0}};
        piece bf = {W_QKV_B, qd + 2 * kvd, 0};
        STOF_TRY(put_tensor(ld, i, "qkv_b", &lw->qkv_b, fused_qkv ? &bf : b, fused_qkv ? 1 : 3, 0));
    }
    STOF_TRY(put_one(ld, i, "o", &lw->o, W_O, H, qd));
    if (l->out_bias) STOF_TRY(put_one(ld, i, "o_b", &lw->o_b, W_O_B, H, 0));
    STOF_TRY(put_norm(ld, i, "mlp_norm", l->mlp_norm, &lw->mlp_norm, &lw->mlp_norm_b, W_MLP_NORM,
                      W_MLP_NORM_B));
    if (l->mlp == MLP_PLAIN) {
        STOF_TRY(put_one(ld, i, "mlp_in", &lw->mlp_in, W_UP, I, H));
        if (l->mlp_bias) STOF_TRY(put_one(ld, i, "mlp_in_b", &lw->mlp_in_b, W_UP_B, I, 0));
    } else if (has_role(ld->fam, W_UP_GATE)) {
        STOF_REQUIRE(!l->mlp_bias, STOF_ERR_UNSUPPORTED,
                     "%s: a fused up/gate projection with a bias (mlp_bias) is not supported",
                     ld->ck.path);
        piece ug = {W_UP_GATE, 2 * I, H};
        STOF_TRY(put_tensor(ld, i, "mlp_in", &lw->mlp_in, &ug, 1, (int)I));
    } else {
        piece gu[2] = {{W_GATE, I, H}, {W_UP, I, H}};
        STOF_TRY(put_tensor(ld, i, "mlp_in", &lw->mlp_in, gu, 2, (int)I));
        piece gub[2] = {{W_GATE_B, I, 0}, {W_UP_B, I, 0}};
        if (l->mlp_bias) STOF_TRY(put_tensor(ld, i, "mlp_in_b", &lw->mlp_in_b, gub, 2, (int)I));
    }
    STOF_TRY(put_one(ld, i, "down", &lw->down, W_DOWN, H, I));
    if (l->mlp_bias) STOF_TRY(put_one(ld, i, "down_b", &lw->down_b, W_DOWN_B, H, 0));
    return STOF_OK;
}

static stof_status put_model(loader *ld, model_weights *w)
{
    const model_desc *d = ld->d;
    int64_t H = d->hidden;
    STOF_TRY(find_prefix(ld));
    STOF_TRY(put_one(ld, -1, "tok_emb", &w->tok_emb, W_EMB_TOKEN, d->vocab, H));
    if (d->embed != EMBED_TOKEN)
        STOF_TRY(put_one(ld, -1, "pos_emb", &w->pos_emb, W_EMB_POS, d->max_positions, H));
    if (d->embed == EMBED_TOKEN_POS_TYPE)
        STOF_TRY(put_one(ld, -1, "type_emb", &w->type_emb, W_EMB_TYPE, d->type_vocab, H));
    STOF_TRY(put_norm(ld, -1, "emb_norm", d->embed_norm, &w->emb_norm, &w->emb_norm_b, W_EMB_NORM,
                      W_EMB_NORM_B));
    for (int i = 0; i < d->layers; i++)
        STOF_TRY(put_layer(ld, i, &w->layer[i]));
    STOF_TRY(put_norm(ld, -1, "final_norm", d->final_norm, &w->final_norm, &w->final_norm_b,
                      W_FINAL_NORM, W_FINAL_NORM_B));
    if (d->head != HEAD_LM) return STOF_OK;
    if (d->tied_lm_head) {
        w->lm_head = w->tok_emb;
        return STOF_OK;
    }
    return put_one(ld, -1, "lm_head", &w->lm_head, W_LM_HEAD, d->vocab, H);
}

stof_status model_load_weights(const model_files *files, const family_def *family,
                               const model_desc *d, stof_dtype dtype, weight_sink *sink,
                               model_weights *w)
{
    STOF_REQUIRE(files && family && d && sink && w, STOF_ERR_INVALID_ARG,
                 "model_load_weights: NULL argument");
    STOF_REQUIRE(dtype == STOF_F32 || dtype == STOF_F16 || dtype == STOF_BF16,
                 STOF_ERR_INVALID_ARG, "model_load_weights: run dtype %s is not f32, f16 or bf16",
                 stof_dtype_name(dtype));
    memset(w, 0, sizeof *w);
    w->dtype = dtype;
    loader *ld;
    STOF_TRY(stof_host_calloc(1, sizeof *ld, (void **)&ld));
    ld->fam = family;
    ld->d = d;
    ld->dtype = dtype;
    ld->sink = sink;
    stof_status st = stof_host_calloc((size_t)d->layers, sizeof *w->layer, (void **)&w->layer);
    w->layers = st == STOF_OK ? d->layers : 0;
    if (st == STOF_OK) st = ckpt_open(files, &ld->ck);
    if (st == STOF_OK) st = put_model(ld, w);
    w->n_params = ld->n_params;
    free(ld->stage);
    ckpt_close(&ld->ck);
    free(ld);
    return st;
}

/* ---- the host sink */

static stof_status host_put(weight_sink *sink, const char *what, void **slot, const void *src,
                            size_t bytes, int glu_half)
{
    (void)glu_half; /* the CPU keeps the canonical order */
    void *p;
    STOF_REQUIRE(stof_host_alloc(bytes ? bytes : 1, &p) == STOF_OK, STOF_ERR_OOM,
                 "out of memory keeping %s (%zu bytes)", what, bytes);
    memcpy(p, src, bytes);
    *slot = p;
    return STOF_OK;
}

weight_sink weight_sink_host(void)
{
    weight_sink s = {host_put, NULL};
    return s;
}

void model_weights_free_host(model_weights *w)
{
    if (!w) return;
    if (w->lm_head != w->tok_emb) free(w->lm_head);
    void *model_wide[] = {w->tok_emb, w->pos_emb, w->type_emb, w->emb_norm, w->emb_norm_b,
                          w->final_norm, w->final_norm_b};
    for (size_t i = 0; i < sizeof model_wide / sizeof model_wide[0]; i++)
        free(model_wide[i]);
    for (int i = 0; w->layer && i < w->layers; i++) {
        layer_weights *l = &w->layer[i];
        void *per_layer[] = {l->attn_norm, l->attn_norm_b, l->qkv, l->qkv_b, l->o, l->o_b,
                             l->mlp_norm, l->mlp_norm_b, l->mlp_in, l->mlp_in_b, l->down,
                             l->down_b};
        for (size_t j = 0; j < sizeof per_layer / sizeof per_layer[0]; j++)
            free(per_layer[j]);
    }
    free(w->layer);
    memset(w, 0, sizeof *w);
}
