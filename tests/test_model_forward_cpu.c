/*
 * test_model_forward_cpu.c — the BERT encoder forward on a CPU context.
 *
 * 1. Golden cases: stof's forward against an independent float64 numpy
 *    implementation of Hugging Face's BertModel (tests/data/
 *    gen_tiny_bert_golden.py) on the tiny model folders: padded batches,
 *    a dense run, sparse masks (window + global, causal, dilated + global
 *    list), a per-head dense mask tensor, sentence-transformers folders with
 *    mean + normalise and CLS pooling, f16 and bf16 stored weights. Token ids
 *    and types at padding hold out-of-range values, so reading them fails.
 * 2. Padding-free properties on fresh random inputs: a sequence gives the
 *    same rows alone and inside any batch, empty sequences give zeros, a
 *    repeated forward is bit-identical, half outputs are the rounded f32 ones.
 * 3. Misuse: every bad argument gives its status and a message naming it.
 */
#include "model/config.h"
#include "testlib.h"

#include <cjson/cJSON.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#ifndef STOF_TEST_DATA_DIR
#error "STOF_TEST_DATA_DIR must name tests/data"
#endif

static const char *const data_dir = STOF_TEST_DATA_DIR;

/* A call that must fail with status and a message holding needle. */
#define CHECK_FAIL(call, status, needle)                                                           \
    do {                                                                                           \
        stof_status cf_st_ = (call);                                                               \
        CHECK(cf_st_ == (status) && strstr(stof_last_error(), (needle)) != NULL,                   \
              "%s -> %s (want %s), message \"%s\" should contain \"%s\"", #call,                   \
              stof_status_str(cf_st_), stof_status_str(status), stof_last_error(), (needle));      \
    } while (0)

static void *xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (!p) {
        fprintf(stderr, "out of memory\n");
        exit(1);
    }
    return p;
}

static void model_path(char *out, size_t cap, const char *folder)
{
    snprintf(out, cap, "%s/%s", data_dir, folder);
}

static stof_ctx *cpu_ctx(void)
{
    stof_ctx_params p = stof_ctx_default_params();
    p.device = STOF_DEVICE_CPU;
    stof_ctx *ctx = NULL;
    if (stof_ctx_create(&p, &ctx) != STOF_OK) {
        fprintf(stderr, "cannot create a CPU context: %s\n", stof_last_error());
        exit(1);
    }
    return ctx;
}

static stof_model *load(stof_ctx *ctx, const char *folder)
{
    char path[1024];
    model_path(path, sizeof path, folder);
    stof_model *m = NULL;
    stof_status st = stof_model_load(ctx, path, NULL, &m);
    if (st != STOF_OK) {
        fprintf(stderr, "cannot load %s: %s\n", path, stof_last_error());
        exit(1);
    }
    return m;
}

/* ---------------------------------------------------------------- golden cases */

typedef struct golden {
    cJSON *root;
    float *values;
    size_t count;
} golden;

static void golden_load(golden *g)
{
    char path[1024];
    size_t n = 0;
    char *text = NULL;
    snprintf(path, sizeof path, "%s/tiny_bert_golden.json", data_dir);
    if (stof_model_read_text(path, (size_t)1 << 24, &text, &n) != STOF_OK) {
        fprintf(stderr, "cannot read %s: %s\n", path, stof_last_error());
        exit(1);
    }
    g->root = cJSON_Parse(text);
    free(text);
    if (!g->root) {
        fprintf(stderr, "%s does not parse\n", path);
        exit(1);
    }
    snprintf(path, sizeof path, "%s/tiny_bert_golden.bin", data_dir);
    if (stof_model_read_text(path, (size_t)1 << 28, &text, &n) != STOF_OK) {
        fprintf(stderr, "cannot read %s: %s\n", path, stof_last_error());
        exit(1);
    }
    g->values = (float *)text; /* the buffer from malloc is aligned for float */
    g->count = n / sizeof(float);
    int want = cJSON_GetObjectItem(g->root, "floats")->valueint;
    if ((size_t)want != g->count) {
        fprintf(stderr, "%s holds %zu floats, the index says %d\n", path, g->count, want);
        exit(1);
    }
}

static int json_int(const cJSON *o, const char *key)
{
    return cJSON_GetObjectItem(o, key)->valueint;
}

/* A [B, L] int matrix from JSON, or NULL for null. */
static int32_t *json_matrix(const cJSON *o, const char *key, int B, int L)
{
    const cJSON *m = cJSON_GetObjectItem(o, key);
    if (!m || cJSON_IsNull(m)) return NULL;
    int32_t *out = xmalloc(sizeof(int32_t) * (size_t)B * (size_t)L);
    for (int b = 0; b < B; b++) {
        const cJSON *row = cJSON_GetArrayItem(m, b);
        for (int i = 0; i < L; i++)
            out[b * L + i] = cJSON_GetArrayItem(row, i)->valueint;
    }
    return out;
}

/* A per-head dense mask: head h sees key j from query i when |i - j| <= h or j == 0
 * (the generator's "dense:head_window"). */
static uint8_t *head_window_mask(int heads, int L)
{
    uint8_t *m = xmalloc((size_t)heads * (size_t)L * (size_t)L);
    for (int h = 0; h < heads; h++)
        for (int i = 0; i < L; i++)
            for (int j = 0; j < L; j++)
                m[((size_t)h * L + i) * L + j] = (uint8_t)(abs(i - j) <= h || j == 0);
    return m;
}

/* The mask spec of a case; *dense gets the tensor memory it references. */
static stof_mask_spec *case_spec(const char *text, int heads, int L, uint8_t **dense)
{
    *dense = NULL;
    if (!text) return NULL;
    stof_mask_spec *spec = NULL;
    if (strcmp(text, "dense:head_window") == 0) {
        *dense = head_window_mask(heads, L);
        int64_t shape[4] = {1, heads, L, L};
        stof_tensor t = stof_tensor_make(*dense, STOF_U8, STOF_MEM_HOST, 4, shape);
        CHECK_OK(stof_mask_spec_create(&spec));
        CHECK_OK(stof_mask_spec_add_dense(spec, &t));
        return spec;
    }
    CHECK_OK(stof_mask_spec_parse(text, &spec));
    return spec;
}

/* Out-of-range ids and types at padding: the forward must not read them. */
static void poison_padding(int32_t *x, const int32_t *lengths, int B, int L, int32_t bad)
{
    for (int b = 0; b < B; b++)
        for (int i = lengths ? lengths[b] : L; i < L; i++)
            x[b * L + i] = bad + i;
}

/* Rows at padding must be exact zeros; returns how many elements are not. */
static int64_t nonzero_padding(const float *hidden, const int32_t *lengths, int B, int L, int H)
{
    int64_t bad = 0;
    for (int b = 0; b < B; b++)
        for (int i = lengths ? lengths[b] : L; i < L; i++)
            for (int c = 0; c < H; c++)
                bad += hidden[((int64_t)b * L + i) * H + c] != 0.0f;
    return bad;
}

static void run_golden_case(stof_ctx *ctx, const cJSON *c, const golden *g)
{
    const char *name = cJSON_GetObjectItem(c, "name")->valuestring;
    const char *folder = cJSON_GetObjectItem(c, "model")->valuestring;
    int B = json_int(c, "batch"), L = json_int(c, "len"), H = json_int(c, "hidden");
    const cJSON *mask_j = cJSON_GetObjectItem(c, "mask");
    const char *mask_text = cJSON_IsString(mask_j) ? mask_j->valuestring : NULL;
    int32_t *ids = json_matrix(c, "ids", B, L);
    int32_t *types = json_matrix(c, "token_types", B, L);
    int32_t *lengths = NULL;
    const cJSON *lj = cJSON_GetObjectItem(c, "lengths");
    if (!cJSON_IsNull(lj)) {
        lengths = xmalloc(sizeof(int32_t) * (size_t)B);
        for (int b = 0; b < B; b++)
            lengths[b] = cJSON_GetArrayItem(lj, b)->valueint;
    }
    stof_model *m = load(ctx, folder);
    stof_model_info info;
    CHECK_OK(stof_model_get_info(m, &info));
    const char *pooling = cJSON_GetObjectItem(c, "pooling")->valuestring;
    bool normalize = cJSON_IsTrue(cJSON_GetObjectItem(c, "normalize"));
    CHECK(info.pooling == (strcmp(pooling, "cls") == 0 ? STOF_POOL_CLS : STOF_POOL_MEAN),
          "%s: pooling %d, golden says %s", name, (int)info.pooling, pooling);
    CHECK(info.normalize == (int)normalize, "%s: normalize %d, golden says %d", name,
          info.normalize, (int)normalize);
    CHECK(info.hidden == H && info.dtype == STOF_F32, "%s: hidden %d dtype %s", name, info.hidden,
          stof_dtype_name(info.dtype));

    poison_padding(ids, lengths, B, L, info.vocab + 1000);
    if (types) poison_padding(types, lengths, B, L, -50);
    uint8_t *dense = NULL;
    stof_mask_spec *spec = case_spec(mask_text, info.heads, L, &dense);

    int64_t sh_ids[2] = {B, L}, sh_len[1] = {B}, sh_hid[3] = {B, L, H}, sh_pool[2] = {B, H};
    float *hidden = xmalloc(sizeof(float) * (size_t)B * L * H);
    float *pooled = xmalloc(sizeof(float) * (size_t)B * H);
    test_poison_f32(hidden, (int64_t)B * L * H);
    test_poison_f32(pooled, (int64_t)B * H);
    stof_tensor t_ids = stof_tensor_make(ids, STOF_I32, STOF_MEM_HOST, 2, sh_ids);
    stof_tensor t_len = stof_tensor_make(lengths, STOF_I32, STOF_MEM_HOST, 1, sh_len);
    stof_tensor t_types = stof_tensor_make(types, STOF_I32, STOF_MEM_HOST, 2, sh_ids);
    stof_tensor t_hid = stof_tensor_make(hidden, STOF_F32, STOF_MEM_HOST, 3, sh_hid);
    stof_tensor t_pool = stof_tensor_make(pooled, STOF_F32, STOF_MEM_HOST, 2, sh_pool);
    stof_forward_params fp = stof_forward_default_params();
    fp.mask = spec;
    CHECK_OK(stof_model_forward(m, &fp, &t_ids, lengths ? &t_len : NULL, types ? &t_types : NULL,
                                &t_hid, &t_pool));

    const float *want_h = g->values + json_int(c, "hidden_offset");
    const float *want_p = g->values + json_int(c, "pooled_offset");
    double eh = test_rel_err(hidden, want_h, (int64_t)B * L * H);
    double ep = test_rel_err(pooled, want_p, (int64_t)B * H);
    int64_t pad = nonzero_padding(hidden, lengths, B, L, H);
    printf("  %-24s %-20s B=%d L=%d mask %-24s hidden rel err %.2e, pooled %.2e\n", name, folder, B,
           L, mask_text ? mask_text : "-", eh, ep);
    CHECK(eh < 1e-5, "%s: last hidden state rel err %.3e", name, eh);
    CHECK(ep < 1e-5, "%s: pooled rel err %.3e", name, ep);
    CHECK(pad == 0, "%s: %lld padding elements are not zero", name, (long long)pad);

    /* The same forward with only one output asked for gives the same values. */
    float *pooled2 = xmalloc(sizeof(float) * (size_t)B * H);
    stof_tensor t_pool2 = stof_tensor_make(pooled2, STOF_F32, STOF_MEM_HOST, 2, sh_pool);
    test_poison_f32(pooled2, (int64_t)B * H);
    CHECK_OK(stof_model_forward(m, &fp, &t_ids, lengths ? &t_len : NULL, types ? &t_types : NULL,
                                NULL, &t_pool2));
    CHECK(memcmp(pooled, pooled2, sizeof(float) * (size_t)B * H) == 0,
          "%s: pooled-only forward differs from the full one", name);

    free(pooled2);
    free(hidden);
    free(pooled);
    free(ids);
    free(types);
    free(lengths);
    free(dense);
    stof_mask_spec_destroy(spec);
    stof_model_destroy(m);
}

static void test_golden(stof_ctx *ctx)
{
    golden g;
    golden_load(&g);
    const cJSON *cases = cJSON_GetObjectItem(g.root, "cases");
    int n = 0;
    for (const cJSON *c = cases->child; c; c = c->next, n++)
        run_golden_case(ctx, c, &g);
    CHECK(n >= 8, "only %d golden cases", n);
    cJSON_Delete(g.root);
    free(g.values);
}

/* ---------------------------------------------------------------- properties */

typedef struct batch {
    int B, L, H;
    int32_t *ids, *types, *lengths;
    float *hidden, *pooled;
} batch;

static void batch_alloc(batch *x, int B, int L, int H)
{
    x->B = B;
    x->L = L;
    x->H = H;
    x->ids = xmalloc(sizeof(int32_t) * (size_t)B * L);
    x->types = xmalloc(sizeof(int32_t) * (size_t)B * L);
    x->lengths = xmalloc(sizeof(int32_t) * (size_t)B);
    x->hidden = xmalloc(sizeof(float) * (size_t)B * L * H);
    x->pooled = xmalloc(sizeof(float) * (size_t)B * H);
}

static void batch_free(batch *x)
{
    free(x->ids);
    free(x->types);
    free(x->lengths);
    free(x->hidden);
    free(x->pooled);
}

static void batch_random(batch *x, test_rng *r, const stof_model_info *info, int min_len)
{
    for (int b = 0; b < x->B; b++) {
        x->lengths[b] = (int32_t)test_rng_int(r, min_len, x->L);
        for (int i = 0; i < x->L; i++) {
            bool real = i < x->lengths[b];
            x->ids[b * x->L + i] = real ? (int32_t)test_rng_int(r, 0, info->vocab - 1) : -1;
            x->types[b * x->L + i] = real ? (int32_t)test_rng_int(r, 0, info->type_vocab - 1) : 7;
        }
    }
}

static stof_status batch_forward(stof_model *m, const stof_mask_spec *spec, batch *x)
{
    int64_t sh_ids[2] = {x->B, x->L}, sh_len[1] = {x->B}, sh_hid[3] = {x->B, x->L, x->H},
            sh_pool[2] = {x->B, x->H};
    stof_tensor t_ids = stof_tensor_make(x->ids, STOF_I32, STOF_MEM_HOST, 2, sh_ids);
    stof_tensor t_types = stof_tensor_make(x->types, STOF_I32, STOF_MEM_HOST, 2, sh_ids);
    stof_tensor t_len = stof_tensor_make(x->lengths, STOF_I32, STOF_MEM_HOST, 1, sh_len);
    stof_tensor t_hid = stof_tensor_make(x->hidden, STOF_F32, STOF_MEM_HOST, 3, sh_hid);
    stof_tensor t_pool = stof_tensor_make(x->pooled, STOF_F32, STOF_MEM_HOST, 2, sh_pool);
    test_poison_f32(x->hidden, (int64_t)x->B * x->L * x->H);
    test_poison_f32(x->pooled, (int64_t)x->B * x->H);
    stof_forward_params fp = stof_forward_default_params();
    fp.mask = spec;
    return stof_model_forward(m, &fp, &t_ids, &t_len, &t_types, &t_hid, &t_pool);
}

/* Each sequence alone (B = 1, L = its length) equals its rows inside the batch. */
static void check_batch_invariance(stof_model *m, const stof_mask_spec *spec, const batch *x,
                                   const char *what)
{
    double worst = 0;
    for (int b = 0; b < x->B; b++) {
        int len = x->lengths[b];
        if (len == 0) continue;
        batch one;
        batch_alloc(&one, 1, len, x->H);
        memcpy(one.ids, x->ids + b * x->L, sizeof(int32_t) * (size_t)len);
        memcpy(one.types, x->types + b * x->L, sizeof(int32_t) * (size_t)len);
        one.lengths[0] = len;
        CHECK_OK(batch_forward(m, spec, &one));
        double e =
            test_rel_err(one.hidden, x->hidden + (int64_t)b * x->L * x->H, (int64_t)len * x->H);
        double ep = test_rel_err(one.pooled, x->pooled + (int64_t)b * x->H, x->H);
        if (e > worst) worst = e;
        if (ep > worst) worst = ep;
        batch_free(&one);
    }
    CHECK(worst < 1e-5, "%s: a sequence alone differs from its rows in the batch (%.3e)", what,
          worst);
}

static void test_properties(stof_ctx *ctx, test_rng *r)
{
    stof_model *m = load(ctx, "tiny_bert_st");
    stof_model_info info;
    CHECK_OK(stof_model_get_info(m, &info));
    const char *masks[] = {NULL, "window:3,global:2", "random:4x2@11,window:1", "causal"};
    for (size_t k = 0; k < sizeof masks / sizeof masks[0]; k++) {
        stof_mask_spec *spec = NULL;
        if (masks[k]) CHECK_OK(stof_mask_spec_parse(masks[k], &spec));
        int B = (int)test_rng_int(r, 2, 5), L = (int)test_rng_int(r, 8, info.max_positions);
        batch x;
        batch_alloc(&x, B, L, info.hidden);
        batch_random(&x, r, &info, 0);
        x.lengths[1] = 0; /* an empty sequence: zero rows, zero pooled vector */
        CHECK_OK(batch_forward(m, spec, &x));
        CHECK(nonzero_padding(x.hidden, x.lengths, B, L, x.H) == 0, "mask %s: padding not zero",
              masks[k] ? masks[k] : "-");
        bool pooled_zero = true, finite = true;
        for (int c = 0; c < x.H; c++)
            pooled_zero &= x.pooled[x.H + c] == 0.0f;
        for (int64_t i = 0; i < (int64_t)B * x.H; i++)
            finite &= isfinite(x.pooled[i]) != 0;
        CHECK(pooled_zero && finite, "mask %s: empty sequence pooled to non-zero or non-finite",
              masks[k] ? masks[k] : "-");
        /* Normalised pooling: unit vectors for the non-empty sequences. */
        for (int b = 0; b < B; b++) {
            if (x.lengths[b] == 0) continue;
            double ss = 0;
            for (int c = 0; c < x.H; c++)
                ss += (double)x.pooled[b * x.H + c] * x.pooled[b * x.H + c];
            CHECK(fabs(sqrt(ss) - 1.0) < 1e-5, "pooled[%d] has norm %.7f", b, sqrt(ss));
        }
        /* Random masks differ per batch entry, so a sequence alone sees another mask. */
        if (!masks[k] || !strstr(masks[k], "random"))
            check_batch_invariance(m, spec, &x, masks[k] ? masks[k] : "dense");

        /* A repeat gives identical bits. */
        float *h1 = xmalloc(sizeof(float) * (size_t)B * L * x.H);
        memcpy(h1, x.hidden, sizeof(float) * (size_t)B * L * x.H);
        CHECK_OK(batch_forward(m, spec, &x));
        CHECK(memcmp(h1, x.hidden, sizeof(float) * (size_t)B * L * x.H) == 0,
              "mask %s: a repeated forward differs", masks[k] ? masks[k] : "-");
        free(h1);
        batch_free(&x);
        stof_mask_spec_destroy(spec);
    }

    /* Half outputs hold the f32 result rounded once. */
    batch x;
    batch_alloc(&x, 3, 17, info.hidden);
    batch_random(&x, r, &info, 1);
    CHECK_OK(batch_forward(m, NULL, &x));
    int64_t n = (int64_t)3 * 17 * info.hidden, sh[3] = {3, 17, info.hidden}, sh_ids[2] = {3, 17},
            sh_len[1] = {3};
    uint16_t *half = xmalloc(sizeof(uint16_t) * (size_t)n);
    stof_dtype dts[2] = {STOF_F16, STOF_BF16};
    for (int d = 0; d < 2; d++) {
        test_poison_bytes(half, sizeof(uint16_t) * (size_t)n);
        stof_tensor t_ids = stof_tensor_make(x.ids, STOF_I32, STOF_MEM_HOST, 2, sh_ids);
        stof_tensor t_types = stof_tensor_make(x.types, STOF_I32, STOF_MEM_HOST, 2, sh_ids);
        stof_tensor t_len = stof_tensor_make(x.lengths, STOF_I32, STOF_MEM_HOST, 1, sh_len);
        stof_tensor t_h = stof_tensor_make(half, dts[d], STOF_MEM_HOST, 3, sh);
        CHECK_OK(stof_model_forward(m, NULL, &t_ids, &t_len, &t_types, &t_h, NULL));
        int64_t bad = 0;
        for (int64_t i = 0; i < n; i++) {
            uint16_t want =
                dts[d] == STOF_F16 ? stof_f32_to_f16(x.hidden[i]) : stof_f32_to_bf16(x.hidden[i]);
            bad += half[i] != want;
        }
        CHECK(bad == 0, "%s hidden_out: %lld elements differ from the rounded f32 output",
              stof_dtype_name(dts[d]), (long long)bad);
    }
    free(half);
    batch_free(&x);
    stof_model_destroy(m);
}

/* ---------------------------------------------------------------- misuse */

static void test_load_misuse(stof_ctx *ctx)
{
    stof_model *m = (stof_model *)&m; /* must be reset to NULL on failure */
    char path[1024];
    model_path(path, sizeof path, "tiny_bert");
    CHECK_FAIL(stof_model_load(NULL, path, NULL, &m), STOF_ERR_INVALID_ARG, "ctx is NULL");
    CHECK(m == NULL, "out not reset on failure");
    CHECK_FAIL(stof_model_load(ctx, NULL, NULL, &m), STOF_ERR_INVALID_ARG, "dir is NULL");
    CHECK_FAIL(stof_model_load(ctx, path, NULL, NULL), STOF_ERR_INVALID_ARG, "out is NULL");
    stof_model_params p = stof_model_default_params();
    p.dtype = STOF_I32;
    CHECK_FAIL(stof_model_load(ctx, path, &p, &m), STOF_ERR_INVALID_ARG, "i32");
    model_path(path, sizeof path, "no_such_model");
    stof_status st = stof_model_load(ctx, path, NULL, &m);
    CHECK(st != STOF_OK && strstr(stof_last_error(), "no_such_model") && m == NULL,
          "missing folder -> %s \"%s\"", stof_status_str(st), stof_last_error());
    stof_model_info info;
    CHECK_FAIL(stof_model_get_info(NULL, &info), STOF_ERR_INVALID_ARG, "model is NULL");
    stof_model_destroy(NULL);

    /* Every float run dtype is accepted on the CPU, which computes in f32. */
    model_path(path, sizeof path, "tiny_bert");
    stof_dtype dts[3] = {STOF_F32, STOF_F16, STOF_BF16};
    for (int d = 0; d < 3; d++) {
        p.dtype = dts[d];
        m = NULL;
        CHECK_OK(stof_model_load(ctx, path, &p, &m));
        if (m) {
            CHECK_OK(stof_model_get_info(m, &info));
            CHECK(info.dtype == STOF_F32 && info.hidden == 64 && info.layers == 2 &&
                      info.heads == 4 && info.head_dim == 16 && info.intermediate == 128 &&
                      info.vocab == 100 && info.max_positions == 32 && info.type_vocab == 2 &&
                      fabsf(info.layer_norm_eps - 1e-12f) < 1e-18f &&
                      info.pooling == STOF_POOL_MEAN && info.normalize == 0,
                  "info of tiny_bert is wrong");
        }
        stof_model_destroy(m);
    }
}

static void test_forward_misuse(stof_ctx *ctx)
{
    stof_model *m = load(ctx, "tiny_bert");
    enum { B = 2, L = 8, H = 64 };
    int32_t ids[B * L], types[B * L], lengths[B] = {8, 5};
    for (int i = 0; i < B * L; i++) {
        ids[i] = 1 + i % 90;
        types[i] = i % 2;
    }
    float hidden[B * L * H], pooled[B * H];
    int64_t s_ids[2] = {B, L}, s_len[1] = {B}, s_hid[3] = {B, L, H}, s_pool[2] = {B, H};
    stof_tensor t_ids = stof_tensor_make(ids, STOF_I32, STOF_MEM_HOST, 2, s_ids);
    stof_tensor t_types = stof_tensor_make(types, STOF_I32, STOF_MEM_HOST, 2, s_ids);
    stof_tensor t_len = stof_tensor_make(lengths, STOF_I32, STOF_MEM_HOST, 1, s_len);
    stof_tensor t_hid = stof_tensor_make(hidden, STOF_F32, STOF_MEM_HOST, 3, s_hid);
    stof_tensor t_pool = stof_tensor_make(pooled, STOF_F32, STOF_MEM_HOST, 2, s_pool);
    CHECK_OK(stof_model_forward(m, NULL, &t_ids, &t_len, &t_types, &t_hid, &t_pool));
    CHECK_OK(stof_model_forward(m, NULL, &t_ids, NULL, NULL, NULL, NULL));

    CHECK_FAIL(stof_model_forward(NULL, NULL, &t_ids, &t_len, NULL, &t_hid, NULL),
               STOF_ERR_INVALID_ARG, "model is NULL");
    CHECK_FAIL(stof_model_forward(m, NULL, NULL, &t_len, NULL, &t_hid, NULL), STOF_ERR_INVALID_ARG,
               "ids is NULL");

    stof_tensor bad = t_ids;
    bad.dtype = STOF_F32;
    CHECK_FAIL(stof_model_forward(m, NULL, &bad, &t_len, NULL, &t_hid, NULL), STOF_ERR_SHAPE,
               "ids is f32");
    bad = stof_tensor_make(ids, STOF_I32, STOF_MEM_HOST, 1, (int64_t[1]){B * L});
    CHECK_FAIL(stof_model_forward(m, NULL, &bad, NULL, NULL, NULL, NULL), STOF_ERR_SHAPE,
               "ids has 1 dimensions");
    bad = t_ids;
    bad.memory = STOF_MEM_DEVICE;
    CHECK_FAIL(stof_model_forward(m, NULL, &bad, &t_len, NULL, &t_hid, NULL), STOF_ERR_INVALID_ARG,
               "ids is in device memory");

    ids[1 * L + 2] = 100; /* vocab is 100 */
    CHECK_FAIL(stof_model_forward(m, NULL, &t_ids, &t_len, NULL, &t_hid, NULL),
               STOF_ERR_INVALID_ARG, "ids[1, 2] = 100 is outside the vocabulary [0, 100)");
    ids[1 * L + 2] = -1;
    CHECK_FAIL(stof_model_forward(m, NULL, &t_ids, &t_len, NULL, &t_hid, NULL),
               STOF_ERR_INVALID_ARG, "ids[1, 2] = -1");
    ids[1 * L + 2] = 3;
    ids[1 * L + 6] = 5000; /* padding of sequence 1 (length 5): never read */
    CHECK_OK(stof_model_forward(m, NULL, &t_ids, &t_len, NULL, &t_hid, NULL));
    CHECK_FAIL(stof_model_forward(m, NULL, &t_ids, NULL, NULL, &t_hid, NULL), STOF_ERR_INVALID_ARG,
               "ids[1, 6] = 5000");
    ids[1 * L + 6] = 5;

    types[0 * L + 3] = 2;
    CHECK_FAIL(stof_model_forward(m, NULL, &t_ids, &t_len, &t_types, &t_hid, NULL),
               STOF_ERR_INVALID_ARG, "token_types[0, 3] = 2 is outside [0, type_vocab_size = 2)");
    types[0 * L + 3] = 1;
    bad = stof_tensor_make(types, STOF_I32, STOF_MEM_HOST, 2, (int64_t[2]){B, L - 1});
    CHECK_FAIL(stof_model_forward(m, NULL, &t_ids, &t_len, &bad, &t_hid, NULL), STOF_ERR_SHAPE,
               "token_types is [2, 7] but ids is [2, 8]");
    bad = t_types;
    bad.dtype = STOF_U8;
    CHECK_FAIL(stof_model_forward(m, NULL, &t_ids, &t_len, &bad, &t_hid, NULL), STOF_ERR_SHAPE,
               "token_types is u8");

    lengths[1] = 9;
    CHECK_FAIL(stof_model_forward(m, NULL, &t_ids, &t_len, NULL, &t_hid, NULL),
               STOF_ERR_INVALID_ARG, "lengths[1] = 9 is outside [0, L = 8]");
    lengths[1] = -2;
    CHECK_FAIL(stof_model_forward(m, NULL, &t_ids, &t_len, NULL, &t_hid, NULL),
               STOF_ERR_INVALID_ARG, "lengths[1] = -2");
    lengths[1] = 5;
    bad = stof_tensor_make(lengths, STOF_I32, STOF_MEM_HOST, 1, (int64_t[1]){B + 1});
    CHECK_FAIL(stof_model_forward(m, NULL, &t_ids, &bad, NULL, &t_hid, NULL), STOF_ERR_SHAPE,
               "want [B] = [2]");
    bad = t_len;
    bad.dtype = STOF_F32;
    CHECK_FAIL(stof_model_forward(m, NULL, &t_ids, &bad, NULL, &t_hid, NULL), STOF_ERR_SHAPE,
               "lengths is f32");
    bad = t_len;
    bad.memory = STOF_MEM_DEVICE;
    CHECK_FAIL(stof_model_forward(m, NULL, &t_ids, &bad, NULL, &t_hid, NULL), STOF_ERR_INVALID_ARG,
               "lengths is in device memory but the model runs on the CPU");

    /* A host 0/1 attention mask instead of the lengths: I64, I32 or U8. */
    {
        float want[B * L * H];
        CHECK_OK(stof_model_forward(m, NULL, &t_ids, &t_len, NULL, &t_hid, NULL));
        memcpy(want, hidden, sizeof want);
        int64_t am64[B * L];
        int32_t am32[B * L];
        uint8_t am8[B * L];
        for (int b = 0; b < B; b++)
            for (int i = 0; i < L; i++)
                am64[b * L + i] = am32[b * L + i] = am8[b * L + i] = i < lengths[b];
        stof_tensor t_am[3] = {stof_tensor_make(am64, STOF_I64, STOF_MEM_HOST, 2, (int64_t[2]){B, L}),
                               stof_tensor_make(am32, STOF_I32, STOF_MEM_HOST, 2, (int64_t[2]){B, L}),
                               stof_tensor_make(am8, STOF_U8, STOF_MEM_HOST, 2, (int64_t[2]){B, L})};
        stof_forward_params fp = stof_forward_default_params();
        for (int k = 0; k < 3; k++) {
            fp.attention_mask = &t_am[k];
            test_poison_f32(hidden, B * L * H);
            CHECK_OK(stof_model_forward(m, &fp, &t_ids, NULL, NULL, &t_hid, NULL));
            CHECK(memcmp(want, hidden, sizeof want) == 0,
                  "a %s attention mask gives another result than the lengths",
                  stof_dtype_name(t_am[k].dtype));
        }
        fp.attention_mask = &t_am[0];
        CHECK_FAIL(stof_model_forward(m, &fp, &t_ids, &t_len, NULL, &t_hid, NULL),
                   STOF_ERR_INVALID_ARG, "not both");
        am32[1 * L + 2] = 3;
        fp.attention_mask = &t_am[1];
        CHECK_FAIL(stof_model_forward(m, &fp, &t_ids, NULL, NULL, &t_hid, NULL),
                   STOF_ERR_INVALID_ARG, "attention_mask[1, 2] = 3; it must hold only 0 and 1");
        am8[0 * L + 1] = 0; /* row 0: 1 0 1 1 ... */
        fp.attention_mask = &t_am[2];
        CHECK_FAIL(stof_model_forward(m, &fp, &t_ids, NULL, NULL, &t_hid, NULL),
                   STOF_ERR_INVALID_ARG, "attention_mask row 0 has a 1 at 2 after a 0 at 1");
        stof_tensor f32_am = stof_tensor_make(want, STOF_F32, STOF_MEM_HOST, 2, (int64_t[2]){B, L});
        fp.attention_mask = &f32_am;
        CHECK_FAIL(stof_model_forward(m, &fp, &t_ids, NULL, NULL, &t_hid, NULL), STOF_ERR_SHAPE,
                   "attention_mask is f32");
        int64_t ids64[B * L];
        for (int i = 0; i < B * L; i++)
            ids64[i] = ids[i];
        stof_tensor t_ids64 = stof_tensor_make(ids64, STOF_I64, STOF_MEM_HOST, 2, (int64_t[2]){B, L});
        test_poison_f32(hidden, B * L * H);
        CHECK_OK(stof_model_forward(m, NULL, &t_ids64, &t_len, NULL, &t_hid, NULL));
        CHECK(memcmp(want, hidden, sizeof want) == 0, "I64 ids give another result than I32");
        ids64[1 * L + 4] = -((int64_t)1 << 35);
        CHECK_FAIL(stof_model_forward(m, NULL, &t_ids64, &t_len, NULL, &t_hid, NULL),
                   STOF_ERR_INVALID_ARG, "ids[1, 4] = -34359738368 is outside the vocabulary");
    }

    /* Longer than the model's 32 positions. */
    enum { LL = 40 };
    int32_t long_ids[LL] = {0}, long_len[1] = {33};
    stof_tensor t_long =
        stof_tensor_make(long_ids, STOF_I32, STOF_MEM_HOST, 2, (int64_t[2]){1, LL});
    stof_tensor t_long_len =
        stof_tensor_make(long_len, STOF_I32, STOF_MEM_HOST, 1, (int64_t[1]){1});
    CHECK_FAIL(stof_model_forward(m, NULL, &t_long, NULL, NULL, NULL, NULL), STOF_ERR_INVALID_ARG,
               "L = 40 exceeds the model's 32 positions");
    CHECK_FAIL(stof_model_forward(m, NULL, &t_long, &t_long_len, NULL, NULL, NULL),
               STOF_ERR_INVALID_ARG, "lengths[0] = 33 exceeds the model's 32 positions");
    long_len[0] = 32; /* L beyond the positions is fine when the lengths are not */
    CHECK_OK(stof_model_forward(m, NULL, &t_long, &t_long_len, NULL, NULL, NULL));

    bad = stof_tensor_make(hidden, STOF_F32, STOF_MEM_HOST, 3, (int64_t[3]){B, L, H / 2});
    CHECK_FAIL(stof_model_forward(m, NULL, &t_ids, &t_len, NULL, &bad, NULL), STOF_ERR_SHAPE,
               "want [B=2, L=8, hidden=64]");
    bad = t_hid;
    bad.dtype = STOF_I32;
    CHECK_FAIL(stof_model_forward(m, NULL, &t_ids, &t_len, NULL, &bad, NULL), STOF_ERR_SHAPE,
               "hidden_out is i32");
    bad = t_hid;
    bad.memory = STOF_MEM_DEVICE;
    CHECK_FAIL(stof_model_forward(m, NULL, &t_ids, &t_len, NULL, &bad, NULL), STOF_ERR_INVALID_ARG,
               "hidden_out is in device memory");
    bad = t_hid;
    bad.stride[0] = (int64_t)L * H * 2;
    CHECK_FAIL(stof_model_forward(m, NULL, &t_ids, &t_len, NULL, &bad, NULL), STOF_ERR_SHAPE,
               "hidden_out must be contiguous");
    bad = t_pool;
    bad.dtype = STOF_F16;
    CHECK_FAIL(stof_model_forward(m, NULL, &t_ids, &t_len, NULL, NULL, &bad), STOF_ERR_SHAPE,
               "pooled_out is f16");
    bad = stof_tensor_make(pooled, STOF_F32, STOF_MEM_HOST, 2, (int64_t[2]){B + 1, H});
    CHECK_FAIL(stof_model_forward(m, NULL, &t_ids, &t_len, NULL, NULL, &bad), STOF_ERR_SHAPE,
               "want [B=2, hidden=64]");
    bad = t_pool;
    bad.memory = STOF_MEM_DEVICE;
    CHECK_FAIL(stof_model_forward(m, NULL, &t_ids, &t_len, NULL, NULL, &bad), STOF_ERR_INVALID_ARG,
               "pooled_out is in device memory");

    /* A mask the model's shape cannot take: a dense part for other lengths, blocks for other heads.
     */
    uint8_t dense[L * L];
    memset(dense, 1, sizeof dense);
    stof_tensor t_dense =
        stof_tensor_make(dense, STOF_U8, STOF_MEM_HOST, 4, (int64_t[4]){1, 1, L - 1, L - 1});
    stof_mask_spec *spec = NULL;
    CHECK_OK(stof_mask_spec_create(&spec));
    CHECK_OK(stof_mask_spec_add_dense(spec, &t_dense));
    stof_forward_params fp = stof_forward_default_params();
    fp.mask = spec;
    stof_status st = stof_model_forward(m, &fp, &t_ids, &t_len, NULL, &t_hid, NULL);
    CHECK(st != STOF_OK && stof_last_error()[0], "dense mask of the wrong size -> %s",
          stof_status_str(st));
    stof_mask_spec_destroy(spec);
    uint8_t layout[3 * 2 * 2];
    memset(layout, 1, sizeof layout);
    CHECK_OK(stof_mask_spec_create(&spec));
    CHECK_OK(stof_mask_spec_add_blocks(spec, 4, 3, 2, 2, layout));
    fp.mask = spec;
    st = stof_model_forward(m, &fp, &t_ids, &t_len, NULL, &t_hid, NULL);
    CHECK(st != STOF_OK && stof_last_error()[0], "blocks for 3 heads on a 4-head model -> %s",
          stof_status_str(st));
    stof_mask_spec_destroy(spec);

    /* After every refusal the model still works. */
    CHECK_OK(stof_model_forward(m, NULL, &t_ids, &t_len, &t_types, &t_hid, &t_pool));
    stof_model_destroy(m);
}

int main(void)
{
    test_rng r;
    test_rng_init(&r, test_seed());
    stof_ctx *ctx = cpu_ctx();
    test_golden(ctx);
    test_properties(ctx, &r);
    test_load_misuse(ctx);
    test_forward_misuse(ctx);
    stof_ctx_destroy(ctx);
    return test_finish("test_model_forward_cpu");
}
