/*
 * model.c — the public model API: stof_model_load / destroy / get_info and
 * stof_model_forward, for every family, dispatching to the CPU executor or
 * the GPU engine.
 *
 * Every argument of a forward is checked here, once, before a backend sees
 * it: tensor kinds and shapes, the lengths against L and the model's
 * positions, and (when they are in host memory) every real token id and
 * token type against its table. Values at padding positions are never read,
 * so callers may leave anything there.
 *
 * Run dtype: a GPU context runs F16 (default) or BF16; a CPU context always
 * computes in F32 and accepts any float dtype request, so the default
 * parameters work on both.
 */
#include "model/encoder.h"
#include "tune/tune.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

stof_model_params stof_model_default_params(void)
{
    stof_model_params p;
    memset(&p, 0, sizeof p);
    p.dtype = STOF_F16;
    return p;
}

stof_forward_params stof_forward_default_params(void)
{
    stof_forward_params p;
    memset(&p, 0, sizeof p);
    p.mask = NULL;
    return p;
}

stof_tune_params stof_tune_default_params(void)
{
    stof_tune_params p;
    memset(&p, 0, sizeof p);
    p.budget = TUNE_DEFAULT_BUDGET;
    p.store = 1;
    return p;
}

void model_tune_key(const stof_model *m, int batch, int len, int64_t tokens,
                    const char *mask_text, tune_key *key)
{
    const stof_ctx *ctx = m->ctx;
    const stof_model_info *info = &m->info;
    memset(key, 0, sizeof *key);
    size_t name_len = strnlen(ctx->device_name, sizeof key->gpu - 1);
    memcpy(key->gpu, ctx->device_name, name_len); /* key is zeroed: stays terminated */
    key->sm_count = ctx->sm_count;
    key->cc = ctx->cc_major * 10 + ctx->cc_minor;
    snprintf(key->version, sizeof key->version, "%s", stof_version());
    key->hidden = info->hidden;
    key->layers = info->layers;
    key->heads = info->heads;
    key->intermediate = info->intermediate;
    key->dtype = (int)info->dtype;
    key->batch = batch;
    key->len = len;
    key->token_bucket = tune_token_bucket(tokens);
    tune_mask_signature(mask_text, key->mask, sizeof key->mask);
    snprintf(key->family, sizeof key->family, "%s", m->desc.family);
    snprintf(key->desc_hash, sizeof key->desc_hash, "%016llx",
             (unsigned long long)desc_hash(&m->desc));
}

#if !STOF_HAVE_CUDA
/* The search measures GPU plans (tune_gpu.c); a CPU-only build has none. */
stof_status stof_model_tune(stof_model *model, const stof_tune_params *params,
                            const stof_tensor *ids, const stof_tensor *lengths,
                            const stof_tensor *token_types, stof_tune_result *out)
{
    return stof_error(STOF_ERR_UNSUPPORTED,
                      "stof_model_tune measures GPU plans; this stof was built without CUDA");
}
#endif

/* ---------------------------------------------------------------- load */

static stof_status run_dtype(const stof_ctx *ctx, const stof_model_params *p, stof_dtype *out)
{
    STOF_REQUIRE(p->dtype == STOF_F32 || p->dtype == STOF_F16 || p->dtype == STOF_BF16,
                 STOF_ERR_INVALID_ARG, "stof_model_load: run dtype %s (%d) is not f32, f16 or bf16",
                 stof_dtype_name(p->dtype), (int)p->dtype);
    if (ctx->device != STOF_DEVICE_GPU) {
        *out = STOF_F32;
        return STOF_OK;
    }
    STOF_REQUIRE(p->dtype != STOF_F32, STOF_ERR_UNSUPPORTED,
                 "stof_model_load: the GPU runs models in f16 or bf16, not f32");
    *out = p->dtype;
    return STOF_OK;
}

static void fill_info(stof_model *m, stof_dtype dtype)
{
    const model_desc *d = &m->desc;
    const layer_desc *l = &d->layer[0];
    stof_model_info *i = &m->info;
    i->hidden = d->hidden;
    i->layers = d->layers;
    i->heads = l->heads;
    i->head_dim = l->head_dim;
    i->intermediate = l->intermediate;
    i->vocab = d->vocab;
    i->max_positions = d->max_positions;
    i->type_vocab = d->embed == EMBED_TOKEN_POS_TYPE ? d->type_vocab : 0;
    i->layer_norm_eps = d->norm_eps;
    i->dtype = dtype;
    i->pooling = m->files.pooling;
    i->normalize = m->files.normalize ? 1 : 0;
    snprintf(i->family, sizeof i->family, "%s", d->family);
    snprintf(i->model_type, sizeof i->model_type, "%s", d->model_type);
    i->kv_heads = l->kv_heads;
    i->is_decoder = d->head == HEAD_LM;
}

/* The folder's description and, on a CPU context, its weights in host
 * memory in F32. A GPU context streams them to the device in the run dtype
 * (enc_gpu_create), with no host copy of the model. */
static stof_status load_model(stof_model *m, const char *dir)
{
    STOF_TRY(model_load_files(dir, &m->files, &m->family, &m->desc));
    if (m->ctx->device == STOF_DEVICE_GPU) return STOF_OK;
    weight_sink sink = weight_sink_host();
    return model_load_weights(&m->files, m->family, &m->desc, STOF_F32, &sink, &m->w);
}

stof_status stof_model_load(stof_ctx *ctx, const char *dir, const stof_model_params *params,
                            stof_model **out)
{
    STOF_REQUIRE(out, STOF_ERR_INVALID_ARG, "stof_model_load: out is NULL");
    *out = NULL;
    STOF_REQUIRE(ctx, STOF_ERR_INVALID_ARG, "stof_model_load: ctx is NULL");
    STOF_REQUIRE(dir, STOF_ERR_INVALID_ARG, "stof_model_load: dir is NULL");
    stof_model_params p = params ? *params : stof_model_default_params();
    stof_dtype dtype = STOF_F32;
    STOF_TRY(run_dtype(ctx, &p, &dtype));
    stof_model *m;
    STOF_TRY(stof_host_calloc(1, sizeof *m, (void **)&m));
    m->ctx = ctx;
    stof_status st = load_model(m, dir);
    if (st == STOF_OK) {
        fill_info(m, dtype);
#if STOF_HAVE_CUDA
        if (ctx->device == STOF_DEVICE_GPU) st = enc_gpu_create(m);
        if (st == STOF_OK && m->gpu)
            enc_gpu_set_tune_cache(m->gpu, p.tune_cache, p.tune_cache_off != 0);
#endif
    }
    if (st != STOF_OK) {
        stof_model_destroy(m);
        return st;
    }
    *out = m;
    return STOF_OK;
}

void stof_model_destroy(stof_model *model)
{
    if (!model) return;
#if STOF_HAVE_CUDA
    enc_gpu_destroy(model->gpu);
#endif
    exec_cpu_ws_free(model->cpu);
    model_weights_free_host(&model->w);
    desc_free(&model->desc);
    free(model->lens);
    free(model);
}

stof_status stof_model_get_info(const stof_model *model, stof_model_info *out)
{
    STOF_REQUIRE(model, STOF_ERR_INVALID_ARG, "stof_model_get_info: model is NULL");
    STOF_REQUIRE(out, STOF_ERR_INVALID_ARG, "stof_model_get_info: out is NULL");
    *out = model->info;
    return STOF_OK;
}

/* ---------------------------------------------------------------- forward checks */

static bool on_gpu(const stof_model *m)
{
    return m->ctx->device == STOF_DEVICE_GPU;
}

/* A device-memory input: only on a GPU context, and contiguous (kernels read it). */
static stof_status check_device_input(const stof_model *m, const stof_tensor *t, const char *name)
{
    if (t->memory != STOF_MEM_DEVICE) return STOF_OK;
    STOF_REQUIRE(on_gpu(m), STOF_ERR_INVALID_ARG,
                 "%s is in device memory but the model runs on the CPU", name);
    STOF_REQUIRE(stof_tensor_is_contiguous(t), STOF_ERR_SHAPE,
                 "%s in device memory must be contiguous", name);
    return STOF_OK;
}

/* ids or token_types: I32 or I64 [B, L]; host memory, or device memory on a
 * GPU context (contiguous there, since kernels read it). */
static stof_status check_token_tensor(const stof_model *m, const stof_tensor *t, const char *name)
{
    STOF_TRY(stof_tensor_check(t, name));
    STOF_REQUIRE(t->dtype == STOF_I32 || t->dtype == STOF_I64, STOF_ERR_SHAPE,
                 "%s is %s; token inputs are i32 or i64", name, stof_dtype_name(t->dtype));
    STOF_REQUIRE(t->ndim == 2, STOF_ERR_SHAPE, "%s has %d dimensions; want [B, L]", name, t->ndim);
    return check_device_input(m, t, name);
}

static stof_status check_lengths_tensor(const stof_model *m, const stof_tensor *t, int B)
{
    STOF_TRY(stof_tensor_check(t, "lengths"));
    STOF_REQUIRE(t->dtype == STOF_I32, STOF_ERR_SHAPE, "lengths is %s; it must be i32",
                 stof_dtype_name(t->dtype));
    STOF_REQUIRE(t->ndim == 1 && t->shape[0] == B, STOF_ERR_SHAPE,
                 "lengths has %d dimensions and %lld entries; want [B] = [%d]", t->ndim,
                 (long long)t->shape[0], B);
    return check_device_input(m, t, "lengths");
}

static stof_status check_mask_tensor(const stof_model *m, const stof_tensor *t, int B, int L)
{
    STOF_TRY(stof_tensor_check(t, "attention_mask"));
    STOF_REQUIRE(t->dtype == STOF_I32 || t->dtype == STOF_I64 || t->dtype == STOF_U8,
                 STOF_ERR_SHAPE, "attention_mask is %s; it must be i32, i64 or u8 (bool)",
                 stof_dtype_name(t->dtype));
    STOF_REQUIRE(t->ndim == 2 && t->shape[0] == B && t->shape[1] == L, STOF_ERR_SHAPE,
                 "attention_mask is %dD [%lld, %lld]; want [B, L] = [%d, %d] like ids", t->ndim,
                 (long long)t->shape[0], (long long)(t->ndim > 1 ? t->shape[1] : 0), B, L);
    return check_device_input(m, t, "attention_mask");
}

/* Lengths of a host attention mask row: ones, then zeros. */
static stof_status host_mask_lengths(const stof_tensor *t, int B, int L, int32_t *lens)
{
    for (int b = 0; b < B; b++) {
        int n = 0;
        for (int i = 0; i < L; i++) {
            int64_t off = (int64_t)b * t->stride[0] + (int64_t)i * t->stride[1];
            int64_t v = t->dtype == STOF_I64  ? ((const int64_t *)t->data)[off]
                        : t->dtype == STOF_U8 ? ((const uint8_t *)t->data)[off]
                                              : ((const int32_t *)t->data)[off];
            STOF_REQUIRE(v == 0 || v == 1, STOF_ERR_INVALID_ARG,
                         "attention_mask[%d, %d] = %lld; it must hold only 0 and 1", b, i,
                         (long long)v);
            STOF_REQUIRE(v == 0 || n == i, STOF_ERR_INVALID_ARG,
                         "attention_mask row %d has a 1 at %d after a 0 at %d: stof runs "
                         "right-padded batches (re-pad left-padded input on the right)",
                         b, i, n);
            n += v == 1 && n == i;
        }
        lens[b] = n;
    }
    return STOF_OK;
}

/* Learned position tables end at max_position_embeddings; rotary positions do not. */
static int position_limit(const stof_model *m)
{
    return m->desc.embed == EMBED_TOKEN ? INT32_MAX : m->info.max_positions;
}

static bool in_device(const stof_tensor *t)
{
    return t && t->memory == STOF_MEM_DEVICE;
}

/* The lengths (from lengths, the attention mask, or all L) into m->lens, with
 * cu_seqlens after them. Device inputs are scanned on the GPU, once. */
static stof_status read_lengths(stof_model *m, const stof_tensor *lengths, const stof_tensor *mask,
                                int B, int L, enc_request *r)
{
    STOF_REQUIRE(!(lengths && mask), STOF_ERR_INVALID_ARG,
                 "stof_model_forward: give the lengths or an attention_mask, not both");
    if (B > m->lens_cap) {
        int32_t *p = NULL;
        STOF_TRY(stof_host_alloc((size_t)(2 * B + 1) * sizeof(int32_t), (void **)&p));
        free(m->lens);
        m->lens = p;
        m->lens_cap = B;
    }
    int32_t *lens = m->lens, *cu = m->lens + B;
    if (lengths) STOF_TRY(check_lengths_tensor(m, lengths, B));
    if (mask) STOF_TRY(check_mask_tensor(m, mask, B, L));
    if (in_device(lengths) || in_device(mask)) {
        /* filled by the scan */
    } else if (lengths) {
        for (int b = 0; b < B; b++)
            lens[b] = ((const int32_t *)lengths->data)[(int64_t)b * lengths->stride[0]];
    } else if (mask) {
        STOF_TRY(host_mask_lengths(mask, B, L, lens));
    } else {
        STOF_REQUIRE(L <= position_limit(m), STOF_ERR_INVALID_ARG,
                     "L = %d exceeds the model's %d positions (max_position_embeddings); pass "
                     "shorter lengths or a shorter batch",
                     L, m->info.max_positions);
        for (int b = 0; b < B; b++)
            lens[b] = L;
    }
#if STOF_HAVE_CUDA
    if (in_device(lengths) || in_device(mask) || in_device(r->ids) || in_device(r->types))
        STOF_TRY(enc_gpu_scan(m, r, in_device(mask) ? mask : NULL,
                              in_device(lengths) ? lengths : NULL, lens, &r->packed, &r->computed));
#endif
    int max_pos = position_limit(m);
    int64_t T = 0;
    cu[0] = 0;
    for (int b = 0; b < B; b++) {
        int32_t v = lens[b];
        STOF_REQUIRE(v >= 0 && v <= L, STOF_ERR_INVALID_ARG,
                     "lengths[%d] = %d is outside [0, L = %d]", b, (int)v, L);
        STOF_REQUIRE(v <= max_pos, STOF_ERR_INVALID_ARG,
                     "lengths[%d] = %d exceeds the model's %d positions "
                     "(max_position_embeddings)",
                     b, (int)v, max_pos);
        T += v;
        STOF_REQUIRE(T <= INT32_MAX, STOF_ERR_UNSUPPORTED,
                     "the batch holds more than %d real tokens", INT32_MAX);
        cu[b + 1] = (int32_t)T;
    }
    r->lengths = lens;
    r->cu_seqlens = cu;
    r->tokens = T;
    return STOF_OK;
}

/* Every real token's id and type inside its table (host tensors only; the GPU
 * backend checks device ones). */
static stof_status check_token_values(const stof_model *m, const enc_request *r)
{
    const stof_model_info *info = &m->info;
    const bool ids_host = r->ids->memory == STOF_MEM_HOST;
    const bool types_host = r->types && r->types->memory == STOF_MEM_HOST;
    /* Device inputs were checked by the scan; this loop runs after the host
     * waited for it, while the device is idle. */
    if (!ids_host && !types_host) return STOF_OK;
    for (int b = 0; b < r->batch; b++)
        for (int i = 0; i < r->lengths[b]; i++) {
            if (ids_host) {
                int64_t id = enc_token_at(r->ids, b, i);
                STOF_REQUIRE(id >= 0 && id < info->vocab, STOF_ERR_INVALID_ARG,
                             "ids[%d, %d] = %lld is outside the vocabulary [0, %d)", b, i,
                             (long long)id, info->vocab);
            }
            if (types_host) {
                int64_t ty = enc_token_at(r->types, b, i);
                STOF_REQUIRE(ty >= 0 && ty < info->type_vocab, STOF_ERR_INVALID_ARG,
                             "token_types[%d, %d] = %lld is outside [0, type_vocab_size = %d)", b,
                             i, (long long)ty, info->type_vocab);
            }
        }
    return STOF_OK;
}

static stof_status check_hidden_out(const stof_model *m, const stof_tensor *t, int B, int L)
{
    STOF_TRY(stof_tensor_check(t, "hidden_out"));
    STOF_TRY(stof_tensor_check_memory(m->ctx, t, "hidden_out"));
    if (t->ndim == 2) {
        /* Packed rows: the token count is known once the lengths are (check_packed_rows). */
        STOF_REQUIRE(!on_gpu(m), STOF_ERR_UNSUPPORTED,
                     "hidden_out [T, hidden] (packed) is a CPU output for now; give [B, L, hidden]");
        STOF_REQUIRE(t->shape[1] == m->info.hidden, STOF_ERR_SHAPE,
                     "hidden_out is [%lld, %lld]; want packed [T, hidden=%d]",
                     (long long)t->shape[0], (long long)t->shape[1], m->info.hidden);
    } else {
        STOF_REQUIRE(t->ndim == 3 && t->shape[0] == B && t->shape[1] == L &&
                         t->shape[2] == m->info.hidden,
                     STOF_ERR_SHAPE,
                     "hidden_out is %dD [%lld, %lld, %lld]; want [B=%d, L=%d, hidden=%d] or "
                     "packed [T, hidden]",
                     t->ndim, (long long)t->shape[0], (long long)(t->ndim > 1 ? t->shape[1] : 0),
                     (long long)(t->ndim > 2 ? t->shape[2] : 0), B, L, m->info.hidden);
    }
    if (on_gpu(m))
        STOF_REQUIRE(t->dtype == m->info.dtype || t->dtype == STOF_F32, STOF_ERR_SHAPE,
                     "hidden_out is %s; this model writes %s (its run dtype) or f32",
                     stof_dtype_name(t->dtype), stof_dtype_name(m->info.dtype));
    else
        STOF_REQUIRE(t->dtype == STOF_F32 || t->dtype == STOF_F16 || t->dtype == STOF_BF16,
                     STOF_ERR_SHAPE, "hidden_out is %s; it must be f32, f16 or bf16",
                     stof_dtype_name(t->dtype));
    STOF_REQUIRE(stof_tensor_is_contiguous(t), STOF_ERR_SHAPE, "hidden_out must be contiguous");
    return STOF_OK;
}

/* Logits: F32, [B, vocab] or [B, L, vocab] (logits_all), decoders only. */
static stof_status check_logits_out(const stof_model *m, const stof_tensor *t, bool all, int B,
                                    int L)
{
    STOF_REQUIRE(m->info.is_decoder, STOF_ERR_UNSUPPORTED,
                 "logits: %s is an encoder (family %s) without an LM head", m->info.model_type,
                 m->info.family);
    STOF_TRY(stof_tensor_check(t, "logits"));
    STOF_TRY(stof_tensor_check_memory(m->ctx, t, "logits"));
    STOF_REQUIRE(t->dtype == STOF_F32, STOF_ERR_SHAPE, "logits is %s; it must be f32",
                 stof_dtype_name(t->dtype));
    int V = m->info.vocab;
    bool ok = all ? t->ndim == 3 && t->shape[0] == B && t->shape[1] == L && t->shape[2] == V
                  : t->ndim == 2 && t->shape[0] == B && t->shape[1] == V;
    STOF_REQUIRE(ok, STOF_ERR_SHAPE, "logits has %d dimensions [%lld, %lld, ...]; want %s = [%d, %s%d]",
                 t->ndim, (long long)t->shape[0], (long long)(t->ndim > 1 ? t->shape[1] : 0),
                 all ? "[B, L, vocab] (logits_all)" : "[B, vocab]", B,
                 all ? (L == 0 ? "0, " : "L, ") : "", V);
    STOF_REQUIRE(stof_tensor_is_contiguous(t), STOF_ERR_SHAPE, "logits must be contiguous");
    return STOF_OK;
}

static stof_status check_pooled_out(const stof_model *m, const stof_tensor *t, int B)
{
    STOF_TRY(stof_tensor_check(t, "pooled_out"));
    STOF_REQUIRE(t->dtype == STOF_F32, STOF_ERR_SHAPE, "pooled_out is %s; it must be f32",
                 stof_dtype_name(t->dtype));
    STOF_REQUIRE(t->ndim == 2 && t->shape[0] == B && t->shape[1] == m->info.hidden, STOF_ERR_SHAPE,
                 "pooled_out is %dD [%lld, %lld]; want [B=%d, hidden=%d]", t->ndim,
                 (long long)t->shape[0], (long long)(t->ndim > 1 ? t->shape[1] : 0), B,
                 m->info.hidden);
    STOF_REQUIRE(t->memory == STOF_MEM_HOST || on_gpu(m), STOF_ERR_INVALID_ARG,
                 "pooled_out is in device memory but the model runs on the CPU");
    STOF_REQUIRE(stof_tensor_is_contiguous(t), STOF_ERR_SHAPE, "pooled_out must be contiguous");
    return STOF_OK;
}

static stof_status check_forward(stof_model *m, const stof_forward_params *p,
                                 const stof_tensor *ids, const stof_tensor *lengths,
                                 const stof_tensor *types, stof_tensor *hidden, stof_tensor *pooled,
                                 const struct tune_plan *plan, enc_request *r)
{
    memset(r, 0, sizeof *r);
    STOF_TRY(check_token_tensor(m, ids, "ids"));
    STOF_REQUIRE(ids->shape[0] <= INT_MAX && ids->shape[1] <= INT_MAX / 2, STOF_ERR_UNSUPPORTED,
                 "ids is [%lld, %lld]: too large", (long long)ids->shape[0],
                 (long long)ids->shape[1]);
    int B = (int)ids->shape[0], L = (int)ids->shape[1];
    if (types) {
        STOF_REQUIRE(m->desc.embed == EMBED_TOKEN_POS_TYPE, STOF_ERR_INVALID_ARG,
                     "token_types given, but %s (family %s) has no token type embeddings",
                     m->info.model_type, m->info.family);
        STOF_TRY(check_token_tensor(m, types, "token_types"));
        STOF_REQUIRE(types->shape[0] == B && types->shape[1] == L, STOF_ERR_SHAPE,
                     "token_types is [%lld, %lld] but ids is [%d, %d]", (long long)types->shape[0],
                     (long long)types->shape[1], B, L);
    }
    if (hidden) STOF_TRY(check_hidden_out(m, hidden, B, L));
    if (pooled) STOF_TRY(check_pooled_out(m, pooled, B));
    if (p->logits) STOF_TRY(check_logits_out(m, p->logits, p->logits_all != 0, B, L));
    r->batch = B;
    r->len = L;
    r->mask = p->mask;
    r->ids = ids;
    r->types = types;
    r->hidden = hidden;
    r->pooled = pooled;
    r->eager = p->eager != 0;
    r->plan = plan;
    r->logits = p->logits;
    r->logits_all = p->logits_all != 0;
    STOF_TRY(read_lengths(m, lengths, p->attention_mask, B, L, r));
    STOF_REQUIRE(!hidden || hidden->ndim != 2 || hidden->shape[0] == r->tokens, STOF_ERR_SHAPE,
                 "hidden_out is packed [%lld, %d] but the batch holds %lld real tokens",
                 (long long)hidden->shape[0], m->info.hidden, (long long)r->tokens);
    return check_token_values(m, r);
}

stof_status enc_forward_plan(stof_model *model, const stof_forward_params *params,
                             const stof_tensor *ids, const stof_tensor *lengths,
                             const stof_tensor *token_types, stof_tensor *hidden_out,
                             stof_tensor *pooled_out, const struct tune_plan *plan)
{
    STOF_REQUIRE(model, STOF_ERR_INVALID_ARG, "stof_model_forward: model is NULL");
    stof_forward_params p = params ? *params : stof_forward_default_params();
    enc_request r;
    STOF_TRY(check_forward(model, &p, ids, lengths, token_types, hidden_out, pooled_out, plan, &r));
#if STOF_HAVE_CUDA
    if (on_gpu(model)) return enc_gpu_forward(model, &r);
#endif
    return exec_cpu_forward(model, &r);
}

stof_status stof_model_forward(stof_model *model, const stof_forward_params *params,
                               const stof_tensor *ids, const stof_tensor *lengths,
                               const stof_tensor *token_types, stof_tensor *hidden_out,
                               stof_tensor *pooled_out)
{
    return enc_forward_plan(model, params, ids, lengths, token_types, hidden_out, pooled_out,
                            NULL);
}
