/*
 * test_model_load.c — safetensors parsing, config.json and BERT weight loading.
 *
 * The tiny folders under tests/data (written by gen_tiny_bert.py) are loaded
 * and every tensor is compared with the checksums the script recorded; then
 * broken files and folders are made in a temporary directory, and each must
 * fail with its status and a message that names the problem. A final round of
 * random mutations of a real header must never crash or accept a file whose
 * tensors leave the data section. The engine's canonical loader (weights.c)
 * must give the same tensors as the fp32 BERT loader, rounded once to the
 * run dtype, through a weight sink that sees each tensor once.
 */
#include "model/config.h"
#include "io/safetensors.h"
#include "model/engine.h"
#include "model/weights.h"
#include "testlib.h"

#include <cjson/cJSON.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#ifndef STOF_TEST_DATA_DIR
#error "STOF_TEST_DATA_DIR must name tests/data"
#endif

static const char *const data_dir = STOF_TEST_DATA_DIR;
static char tmp_root[512];

/* A call that must fail with status and a message holding needle. */
#define CHECK_FAIL(call, status, needle)                                                           \
    do {                                                                                           \
        stof_status cf_st_ = (call);                                                               \
        CHECK(cf_st_ == (status) && strstr(stof_last_error(), (needle)) != NULL,                   \
              "%s -> %s (want %s), message \"%s\" should contain \"%s\"", #call,                   \
              stof_status_str(cf_st_), stof_status_str(status), stof_last_error(), (needle));      \
    } while (0)

/* ---- small file helpers */

static void path_join(char *out, size_t cap, const char *a, const char *b)
{
    int n = snprintf(out, cap, "%s/%s", a, b);
    if (n < 0 || (size_t)n >= cap) {
        fprintf(stderr, "path %s/%s too long\n", a, b);
        exit(1);
    }
}

static void write_bytes(const char *path, const void *bytes, size_t n)
{
    FILE *fp = fopen(path, "wb");
    if (!fp) {
        fprintf(stderr, "cannot write %s\n", path);
        exit(1);
    }
    if (n) fwrite(bytes, 1, n, fp);
    fclose(fp);
}

static void write_text(const char *path, const char *text)
{
    write_bytes(path, text, strlen(text));
}

static uint8_t *read_bytes(const char *path, size_t *n)
{
    char *text = NULL;
    if (stof_model_read_text(path, (size_t)1 << 30, &text, n) != STOF_OK) {
        fprintf(stderr, "cannot read %s: %s\n", path, stof_last_error());
        exit(1);
    }
    return (uint8_t *)text;
}

static void make_dir(const char *path)
{
    if (mkdir(path, 0700) != 0) {
        fprintf(stderr, "cannot create %s\n", path);
        exit(1);
    }
}

/* A new empty folder under the temporary root. */
static void tmp_dir(char *out, size_t cap, const char *name)
{
    path_join(out, cap, tmp_root, name);
    make_dir(out);
}

/* Removal without nftw: the test knows the few names it creates. */
static void remove_tree(const char *dir)
{
    static const char *const names[] = {
        "config.json",      "model.safetensors", "modules.json",          "pytorch_model.bin",
        "case.safetensors", "0_Transformer",     "1_Pooling/config.json", "1_Pooling"};
    char p[1024];
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        path_join(p, sizeof p, dir, names[i]);
        remove(p);
    }
    remove(dir);
}

static cJSON *load_json_file(const char *path)
{
    size_t n;
    char *text = (char *)read_bytes(path, &n);
    cJSON *j = cJSON_Parse(text);
    free(text);
    if (!j) {
        fprintf(stderr, "%s does not parse\n", path);
        exit(1);
    }
    return j;
}

/* ---- checks of the tiny folders against checksums.json */

static const float *weight_by_name(const bert_weights *w, const char *name)
{
    const struct {
        const char *name;
        const float *p;
    } emb[] = {
        {"embeddings.word_embeddings.weight", w->word_emb},
        {"embeddings.position_embeddings.weight", w->pos_emb},
        {"embeddings.token_type_embeddings.weight", w->type_emb},
        {"embeddings.LayerNorm.weight", w->emb_ln_g},
        {"embeddings.LayerNorm.bias", w->emb_ln_b},
    };
    for (size_t i = 0; i < sizeof emb / sizeof emb[0]; i++)
        if (strcmp(name, emb[i].name) == 0) return emb[i].p;
    int layer = -1, used = 0;
    if (sscanf(name, "encoder.layer.%d.%n", &layer, &used) != 1 || used == 0 || layer < 0 ||
        layer >= w->config.num_hidden_layers)
        return NULL;
    const bert_layer_weights *l = &w->layers[layer];
    const struct {
        const char *name;
        const float *p;
    } per_layer[] = {
        {"attention.self.query.weight", l->q_w},
        {"attention.self.query.bias", l->q_b},
        {"attention.self.key.weight", l->k_w},
        {"attention.self.key.bias", l->k_b},
        {"attention.self.value.weight", l->v_w},
        {"attention.self.value.bias", l->v_b},
        {"attention.output.dense.weight", l->attn_out_w},
        {"attention.output.dense.bias", l->attn_out_b},
        {"attention.output.LayerNorm.weight", l->attn_ln_g},
        {"attention.output.LayerNorm.bias", l->attn_ln_b},
        {"intermediate.dense.weight", l->inter_w},
        {"intermediate.dense.bias", l->inter_b},
        {"output.dense.weight", l->out_w},
        {"output.dense.bias", l->out_b},
        {"output.LayerNorm.weight", l->out_ln_g},
        {"output.LayerNorm.bias", l->out_ln_b},
    };
    for (size_t i = 0; i < sizeof per_layer / sizeof per_layer[0]; i++)
        if (strcmp(name + used, per_layer[i].name) == 0) return per_layer[i].p;
    return NULL;
}

static int64_t json_numel(const cJSON *shape)
{
    int64_t n = 1;
    for (const cJSON *d = shape ? shape->child : NULL; d; d = d->next)
        n *= (int64_t)d->valuedouble;
    return n;
}

/* Returns the element count checked, so the caller can compare with n_params. */
static int64_t check_tensor(const char *folder, const bert_weights *w, const cJSON *expect)
{
    const char *name = expect->string;
    const float *p = weight_by_name(w, name);
    CHECK(p != NULL, "%s: no loaded array for %s", folder, name);
    if (!p) return 0;
    int64_t n = json_numel(cJSON_GetObjectItem(expect, "shape"));
    double sum = 0, wsum = 0, mag = 0;
    for (int64_t i = 0; i < n; i++) {
        sum += p[i];
        wsum += (double)p[i] * (double)(i % 17 + 1);
        mag += fabs(p[i]) * 17;
    }
    double want_sum = cJSON_GetObjectItem(expect, "sum")->valuedouble;
    double want_wsum = cJSON_GetObjectItem(expect, "wsum")->valuedouble;
    CHECK(fabs(sum - want_sum) <= 1e-9 * mag + 1e-12, "%s %s: sum %.17g, expected %.17g", folder,
          name, sum, want_sum);
    CHECK(fabs(wsum - want_wsum) <= 1e-9 * mag + 1e-12, "%s %s: weighted sum %.17g, expected %.17g",
          folder, name, wsum, want_wsum);
    for (const cJSON *s = cJSON_GetObjectItem(expect, "samples")->child; s; s = s->next) {
        int64_t i = (int64_t)s->child->valuedouble;
        float want = (float)s->child->next->valuedouble;
        CHECK(i < n && p[i] == want, "%s %s[%lld] = %.9g, expected %.9g", folder, name,
              (long long)i, i < n ? p[i] : NAN, want);
    }
    return n;
}

static void check_config_matches(const char *folder, const bert_config *c, const cJSON *expect)
{
    const struct {
        const char *key;
        int value;
    } ints[] = {
        {"hidden_size", c->hidden_size},
        {"num_hidden_layers", c->num_hidden_layers},
        {"num_attention_heads", c->num_attention_heads},
        {"intermediate_size", c->intermediate_size},
        {"vocab_size", c->vocab_size},
        {"max_position_embeddings", c->max_position_embeddings},
        {"type_vocab_size", c->type_vocab_size},
    };
    for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++) {
        int want = (int)cJSON_GetObjectItem(expect, ints[i].key)->valuedouble;
        CHECK(ints[i].value == want, "%s: %s = %d, expected %d", folder, ints[i].key, ints[i].value,
              want);
    }
    CHECK(c->head_dim == c->hidden_size / c->num_attention_heads, "%s: head_dim %d", folder,
          c->head_dim);
    CHECK(c->hidden_act == ACT_GELU && strcmp(c->hidden_act_name, "gelu") == 0,
          "%s: activation %s", folder, c->hidden_act_name);
    CHECK(c->layer_norm_eps == 1e-12f, "%s: layer_norm_eps %g", folder, (double)c->layer_norm_eps);
    CHECK(strcmp(c->model_type, "bert") == 0, "%s: model_type %s", folder, c->model_type);
}

static void check_layout(const char *folder, const bert_files *files, const bert_weights *w,
                         const cJSON *expect)
{
    const char *layout = cJSON_GetObjectItem(expect, "layout")->valuestring;
    const char *pooling = cJSON_GetObjectItem(expect, "pooling")->valuestring;
    const char *dtype = cJSON_GetObjectItem(expect, "dtype")->valuestring;
    const char *prefix = cJSON_GetObjectItem(expect, "prefix")->valuestring;
    bool normalize = cJSON_IsTrue(cJSON_GetObjectItem(expect, "normalize"));
    CHECK(files->sentence_transformers == (strncmp(layout, "st", 2) == 0),
          "%s: sentence_transformers flag %d for layout %s", folder, files->sentence_transformers,
          layout);
    CHECK(strcmp(stof_bert_pooling_str(files->pooling), pooling) == 0, "%s: pooling %s, want %s",
          folder, stof_bert_pooling_str(files->pooling), pooling);
    CHECK(files->normalize == normalize, "%s: normalize %d", folder, files->normalize);
    CHECK(files->pooling_from_file == files->sentence_transformers, "%s: pooling_from_file %d",
          folder, files->pooling_from_file);
    bool sub = strcmp(layout, "st_subfolder") == 0;
    size_t ld = strlen(files->dir);
    CHECK(sub == (ld >= 13 && strcmp(files->dir + ld - 13, "0_Transformer") == 0),
          "%s: resolved folder %s for layout %s", folder, files->dir, layout);
    CHECK(strcmp(stof_safetensors_dtype_name(w->stored_dtype), dtype) == 0,
          "%s: stored dtype %s, want %s", folder, stof_safetensors_dtype_name(w->stored_dtype),
          dtype);
    CHECK(strcmp(w->prefix, prefix) == 0, "%s: prefix '%s', want '%s'", folder, w->prefix, prefix);
}

/* q, k and v are views into the fused matrix, in that order. */
static void check_fused_qkv(const char *folder, const bert_weights *w)
{
    int64_t h = w->config.hidden_size;
    for (int i = 0; i < w->config.num_hidden_layers; i++) {
        const bert_layer_weights *l = &w->layers[i];
        CHECK(l->qkv_w == l->q_w && l->k_w == l->q_w + h * h && l->v_w == l->q_w + 2 * h * h,
              "%s: layer %d fused qkv weight layout", folder, i);
        CHECK(l->qkv_b == l->q_b && l->k_b == l->q_b + h && l->v_b == l->q_b + 2 * h,
              "%s: layer %d fused qkv bias layout", folder, i);
    }
}

static void check_folder(const char *sub, bert_weights *w)
{
    char dir[1024], sums[1024];
    path_join(dir, sizeof dir, data_dir, sub);
    path_join(sums, sizeof sums, dir, "checksums.json");
    cJSON *expect = load_json_file(sums);
    bert_files files;
    CHECK_OK(stof_bert_load_dir(dir, &files, w));
    if (!w->storage) {
        cJSON_Delete(expect);
        return;
    }
    check_config_matches(sub, &w->config, cJSON_GetObjectItem(expect, "config"));
    check_layout(sub, &files, w, expect);
    check_fused_qkv(sub, w);
    int64_t checked = 0;
    int tensors = 0;
    for (const cJSON *t = cJSON_GetObjectItem(expect, "tensors")->child; t; t = t->next, tensors++)
        checked += check_tensor(sub, w, t);
    CHECK(tensors == 5 + 16 * w->config.num_hidden_layers, "%s: %d tensors recorded", sub, tensors);
    CHECK(checked == w->n_params, "%s: checked %lld floats of %lld", sub, (long long)checked,
          (long long)w->n_params);
    char line[512];
    stof_bert_weights_summary(w, line, sizeof line);
    CHECK(strstr(line, "2 layers, hidden 64, 4 heads (dim 16), intermediate 128") != NULL,
          "summary \"%s\"", line);
    cJSON_Delete(expect);
}

/* Each lower-precision copy is the fp32 weights rounded once. */
static void check_rounding(const bert_weights *ref, const bert_weights *w, double rel,
                           const char *what)
{
    CHECK(ref->n_params == w->n_params, "%s: %lld vs %lld params", what, (long long)ref->n_params,
          (long long)w->n_params);
    int64_t bad = 0, identical = 0;
    for (int64_t i = 0; i < ref->n_params && i < w->n_params; i++) {
        double a = ref->storage[i], b = w->storage[i];
        if (!(fabs(a - b) <= rel * fabs(a) + 1e-7)) bad++;
        identical += a == b;
    }
    CHECK(bad == 0, "%s: %lld values off by more than %g relative", what, (long long)bad, rel);
    CHECK(identical < ref->n_params / 2, "%s: %lld of %lld values unchanged by rounding", what,
          (long long)identical, (long long)ref->n_params);
}

static void test_tiny_folders(void)
{
    bert_weights f32, f16, bf16, st, st_root;
    check_folder("tiny_bert", &f32);
    check_folder("tiny_bert_f16", &f16);
    check_folder("tiny_bert_prefixed", &bf16);
    check_folder("tiny_bert_st", &st);
    check_folder("tiny_bert_st_root", &st_root);
    if (f32.storage && f16.storage) check_rounding(&f32, &f16, 1.0 / 2048, "f16 vs f32");
    if (f32.storage && bf16.storage) check_rounding(&f32, &bf16, 1.0 / 256, "bf16 vs f32");
    if (f32.storage && st.storage)
        CHECK(memcmp(f32.storage, st.storage, (size_t)f32.n_params * 4) == 0,
              "sentence-transformers copy differs from tiny_bert");
    stof_bert_weights_free(&f32);
    CHECK(f32.storage == NULL && f32.layers == NULL, "free clears the struct");
    stof_bert_weights_free(&f16);
    stof_bert_weights_free(&bf16);
    stof_bert_weights_free(&st);
    stof_bert_weights_free(&st_root);
    stof_bert_weights_free(NULL);
}

/* ---- the canonical loader (engine.h) against the fp32 BERT loader */

/* A sink that counts what it is given and fails at put number fail_at (0: never). */
typedef struct counting_sink {
    weight_sink sink, host;
    int puts, fail_at;
    char first[32], last[32];
} counting_sink;

static stof_status counting_put(weight_sink *sink, const char *what, void **slot,
                                const void *src, size_t bytes, int glu_half)
{
    counting_sink *c = sink->user;
    c->puts++;
    if (glu_half != 0) return stof_error(STOF_ERR_INTERNAL, "BERT has no GLU, yet %s is one", what);
    if (c->puts == 1) snprintf(c->first, sizeof c->first, "%s", what);
    snprintf(c->last, sizeof c->last, "%s", what);
    if (c->puts == c->fail_at) return stof_error(STOF_ERR_OOM, "sink full at %s", what);
    return c->host.put(&c->host, what, slot, src, bytes, glu_half);
}

/* Element i of a canonical tensor in dtype, as the run dtype rounds ref. */
static bool same_rounded(const void *t, stof_dtype dtype, const float *ref, int64_t n)
{
    for (int64_t i = 0; i < n; i++) {
        float want = ref[i];
        if (dtype == STOF_F16) want = stof_f16_to_f32(stof_f32_to_f16(ref[i]));
        if (dtype == STOF_BF16) want = stof_bf16_to_f32(stof_f32_to_bf16(ref[i]));
        float got = dtype == STOF_F32    ? ((const float *)t)[i]
                    : dtype == STOF_F16 ? stof_f16_to_f32(((const uint16_t *)t)[i])
                                        : stof_bf16_to_f32(((const uint16_t *)t)[i]);
        if (memcmp(&got, &want, sizeof got) != 0) return false;
    }
    return true;
}

static void check_canonical(const char *sub, const bert_weights *ref, stof_dtype dtype)
{
    char dir[1024];
    path_join(dir, sizeof dir, data_dir, sub);
    model_files files;
    model_desc d;
    const family_def *fam = NULL;
    CHECK_OK(model_load_files(dir, &files, &fam, &d));
    if (!fam) return;
    counting_sink c = {.host = weight_sink_host()};
    c.sink = (weight_sink){counting_put, &c};
    model_weights w;
    CHECK_OK(model_load_weights(&files, fam, &d, dtype, &c.sink, &w));
    const bert_config *cf = &ref->config;
    int64_t H = cf->hidden_size, I = cf->intermediate_size;
    CHECK(strcmp(fam->name, "bert") == 0 && d.layers == cf->num_hidden_layers && d.hidden == H,
          "%s: family %s, %d layers, hidden %d", sub, fam->name, d.layers, d.hidden);
    CHECK(c.puts == 5 + 12 * d.layers && strcmp(c.first, "tok_emb") == 0 &&
              strcmp(c.last, "layers.1.down_b") == 0,
          "%s: %d tensors put, first %s, last %s", sub, c.puts, c.first, c.last);
    CHECK(w.n_params == ref->n_params && w.dtype == dtype, "%s: %lld params vs %lld", sub,
          (long long)w.n_params, (long long)ref->n_params);
    const char *t = stof_dtype_name(dtype);
    CHECK(same_rounded(w.tok_emb, dtype, ref->word_emb, (int64_t)cf->vocab_size * H) &&
              same_rounded(w.pos_emb, dtype, ref->pos_emb, (int64_t)cf->max_position_embeddings * H) &&
              same_rounded(w.type_emb, dtype, ref->type_emb, (int64_t)cf->type_vocab_size * H) &&
              same_rounded(w.emb_norm, dtype, ref->emb_ln_g, H) &&
              same_rounded(w.emb_norm_b, dtype, ref->emb_ln_b, H),
          "%s %s: embeddings", sub, t);
    for (int i = 0; i < d.layers; i++) {
        const layer_weights *l = &w.layer[i];
        const bert_layer_weights *r = &ref->layers[i];
        CHECK(same_rounded(l->qkv, dtype, r->qkv_w, 3 * H * H) &&
                  same_rounded(l->qkv_b, dtype, r->qkv_b, 3 * H) &&
                  same_rounded(l->o, dtype, r->attn_out_w, H * H) &&
                  same_rounded(l->o_b, dtype, r->attn_out_b, H) &&
                  same_rounded(l->attn_norm, dtype, r->attn_ln_g, H) &&
                  same_rounded(l->attn_norm_b, dtype, r->attn_ln_b, H) &&
                  same_rounded(l->mlp_in, dtype, r->inter_w, I * H) &&
                  same_rounded(l->mlp_in_b, dtype, r->inter_b, I) &&
                  same_rounded(l->down, dtype, r->out_w, H * I) &&
                  same_rounded(l->down_b, dtype, r->out_b, H) &&
                  same_rounded(l->mlp_norm, dtype, r->out_ln_g, H) &&
                  same_rounded(l->mlp_norm_b, dtype, r->out_ln_b, H),
              "%s %s: layer %d", sub, t, i);
    }
    CHECK(w.lm_head == NULL && w.final_norm == NULL, "%s: an encoder has no head, no final norm",
          sub);
    model_weights_free_host(&w);
    /* A sink that fails stops the load with its error. */
    counting_sink f = {.host = weight_sink_host(), .fail_at = 7};
    f.sink = (weight_sink){counting_put, &f};
    CHECK_FAIL(model_load_weights(&files, fam, &d, dtype, &f.sink, &w), STOF_ERR_OOM,
               "sink full at layers.0.attn_norm_b");
    CHECK(f.puts == 7, "%s: %d puts after the sink failed", sub, f.puts);
    model_weights_free_host(&w);
    desc_free(&d);
}

static void test_canonical_loader(void)
{
    static const char *const subs[] = {"tiny_bert", "tiny_bert_f16", "tiny_bert_prefixed",
                                       "tiny_bert_st", "tiny_bert_st_root"};
    const stof_dtype dtypes[] = {STOF_F32, STOF_F16, STOF_BF16};
    for (size_t i = 0; i < sizeof subs / sizeof subs[0]; i++) {
        char dir[1024];
        path_join(dir, sizeof dir, data_dir, subs[i]);
        bert_weights ref;
        CHECK_OK(stof_bert_load_dir(dir, NULL, &ref));
        if (!ref.storage) continue;
        for (size_t j = 0; j < sizeof dtypes / sizeof dtypes[0]; j++)
            check_canonical(subs[i], &ref, dtypes[j]);
        stof_bert_weights_free(&ref);
    }
}

/* The prefixed file carries a pooler, a classifier and an I64 buffer: the
 * parser sees them, the loader ignores them. */
static void test_lookup(void)
{
    char path[1024];
    path_join(path, sizeof path, data_dir, "tiny_bert_prefixed/model.safetensors");
    safetensors_file *f = NULL;
    CHECK_OK(stof_safetensors_open(path, &f));
    if (!f) return;
    CHECK(f->n_tensors == 37 + 5, "%d tensors", f->n_tensors);
    const safetensors_tensor *t = stof_safetensors_find(f, "bert.embeddings.position_ids");
    CHECK(t && t->dtype == ST_I64 && t->ndim == 2 && t->shape[0] == 1 && t->shape[1] == 32,
          "position_ids entry");
    if (t) {
        int64_t last;
        memcpy(&last, (const uint8_t *)t->data + 31 * 8, 8);
        CHECK(last == 31, "position_ids[31] = %lld", (long long)last);
    }
    for (int i = 0; i < f->n_tensors; i++)
        CHECK(stof_safetensors_find(f, f->tensors[i].name) == &f->tensors[i], "find %s",
              f->tensors[i].name);
    CHECK(stof_safetensors_find(f, "bert.encoder.layer.2.output.dense.weight") == NULL,
          "absent name");
    CHECK(stof_safetensors_find(f, "") == NULL, "empty name");
    stof_safetensors_close(f);
    stof_safetensors_close(NULL);
    CHECK_FAIL(stof_safetensors_open("/nonexistent/model.safetensors", &f), STOF_ERR_IO,
               "/nonexistent/model.safetensors");
    CHECK(f == NULL, "no file on failure");
    CHECK_FAIL(stof_safetensors_open(data_dir, &f), STOF_ERR_IO, "not a readable regular file");
}

/* ---- malformed safetensors, built in memory */

/* 8-byte length, header text, data_bytes of a byte pattern. */
static uint8_t *build_st(const char *header, uint64_t claimed_len, size_t data_bytes, size_t *n)
{
    size_t hl = strlen(header);
    *n = 8 + hl + data_bytes;
    uint8_t *buf = malloc(*n);
    for (int i = 0; i < 8; i++)
        buf[i] = (uint8_t)(claimed_len >> (8 * i));
    memcpy(buf + 8, header, hl);
    for (size_t i = 0; i < data_bytes; i++)
        buf[8 + hl + i] = (uint8_t)(i * 37 + 11);
    return buf;
}

static void st_case(const char *header, size_t data_bytes, stof_status want, const char *needle)
{
    size_t n;
    uint8_t *buf = build_st(header, strlen(header), data_bytes, &n);
    safetensors_file *f = NULL;
    stof_status st = stof_safetensors_parse(buf, n, "case.safetensors", &f);
    const char *msg = stof_last_error();
    CHECK(st == want &&
              (want == STOF_OK || (strstr(msg, needle) && strstr(msg, "case.safetensors"))),
          "header %s -> %s (want %s), message \"%s\" should name the file and contain \"%s\"",
          header, stof_status_str(st), stof_status_str(want), msg, needle);
    CHECK((st == STOF_OK) == (f != NULL), "output set only on success");
    stof_safetensors_close(f);
    free(buf);
}

static void test_malformed_headers(void)
{
    const stof_status F = STOF_ERR_FORMAT;
    /* accepted: tight and padded headers, metadata, empty and zero-sized tensors */
    st_case("{\"a\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[0,16]}}", 16, STOF_OK, "");
    st_case("{\"__metadata__\":{\"format\":\"pt\"},\"a\":{\"dtype\":\"BF16\",\"shape\":[],"
            "\"data_offsets\":[0,2]}}    ",
            2, STOF_OK, "");
    st_case("{}", 0, STOF_OK, "");
    st_case("{\"a\":{\"dtype\":\"U8\",\"shape\":[0,5],\"data_offsets\":[3,3]},"
            "\"b\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]}}",
            4, STOF_OK, "");
    /* JSON */
    st_case("{\"a\":{\"dtype\":", 0, F, "not valid JSON");
    st_case("[1,2]", 0, F, "must be a JSON object");
    st_case("{} x", 0, F, "after the JSON");
    st_case("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4, STOF_OK, "");
    st_case("{\"__metadata__\":{\"n\":3}}", 0, F, "__metadata__");
    st_case("{\"__metadata__\":[1]}", 0, F, "__metadata__");
    st_case("{\"a\":7}", 0, F, "tensor 'a': entry must be an object, got 7");
    /* dtype */
    st_case("{\"w\":{\"dtype\":\"F7\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4, F,
            "tensor 'w': unknown dtype \"F7\"");
    st_case("{\"w\":{\"dtype\":4,\"shape\":[1],\"data_offsets\":[0,4]}}", 4, F,
            "\"dtype\" must be a string, got 4");
    st_case("{\"w\":{\"shape\":[1],\"data_offsets\":[0,4]}}", 4, F, "got missing");
    /* shape */
    st_case("{\"w\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,4]}}", 4, F,
            "shape[0] = -1");
    st_case("{\"w\":{\"dtype\":\"F32\",\"shape\":[2.5],\"data_offsets\":[0,4]}}", 4, F,
            "shape[0] = 2.5");
    st_case("{\"w\":{\"dtype\":\"F32\",\"shape\":\"2\",\"data_offsets\":[0,4]}}", 4, F,
            "\"shape\" must be an array");
    st_case("{\"w\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,4]}}", 4,
            F, "rank 9");
    st_case("{\"w\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296,16],"
            "\"data_offsets\":[0,4]}}",
            4, F, "overflows");
    st_case("{\"w\":{\"dtype\":\"F32\",\"shape\":[1e300],\"data_offsets\":[0,4]}}", 4, F,
            "shape[0] = 1.0000000000000001e+300");
    /* offsets */
    st_case("{\"w\":{\"dtype\":\"F32\",\"shape\":[100],\"data_offsets\":[0,400]}}", 16, F,
            "data_offsets [0, 400] run past the data section (16 bytes)");
    st_case("{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,4]}}", 16, F,
            "begin is past end");
    st_case("{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0.5,4]}}", 16, F,
            "begin = 0.5");
    st_case("{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,-4]}}", 16, F, "end = -4");
    st_case("{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4,8]}}", 16, F,
            "array of 3 values");
    st_case("{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":null}}", 16, F,
            "\"data_offsets\" must be [begin, end], got null");
    st_case("{\"w\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,8]}}", 16, F,
            "hold 8 bytes, but shape [4] of F32 needs 4 x 4 bytes");
    st_case("{\"w\":{\"dtype\":\"F16\",\"shape\":[3],\"data_offsets\":[0,7]}}", 16, F,
            "hold 7 bytes");
    st_case("{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]},"
            "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,16]}}",
            16, F, "overlap tensor 'a' at [0, 16]");
    st_case("{\"a\":{\"dtype\":\"U8\",\"shape\":[8],\"data_offsets\":[4,12]},"
            "\"b\":{\"dtype\":\"U8\",\"shape\":[16],\"data_offsets\":[0,16]},"
            "\"c\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[14,16]}}",
            16, F, "overlap");
    st_case("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
            "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
            16, F, "tensor 'a': appears more than once");
    /* names with control bytes are shown escaped */
    st_case("{\"bad\\u0001name\":{\"dtype\":\"X\",\"shape\":[1],\"data_offsets\":[0,1]}}", 4, F,
            "tensor 'bad?name'");
}

static void test_malformed_lengths(void)
{
    size_t n;
    safetensors_file *f = NULL;
    uint8_t *buf = build_st("{}", 2, 0, &n);
    CHECK_FAIL(stof_safetensors_parse(buf, 5, "short.safetensors", &f), STOF_ERR_FORMAT,
               "short.safetensors: file is 5 bytes, too short");
    free(buf);
    buf = build_st("{}", 0, 0, &n);
    CHECK_FAIL(stof_safetensors_parse(buf, n, "z.safetensors", &f), STOF_ERR_FORMAT,
               "header length is 0");
    free(buf);
    buf = build_st("{}  ", 1000, 0, &n);
    CHECK_FAIL(stof_safetensors_parse(buf, n, "eof.safetensors", &f), STOF_ERR_FORMAT,
               "header length 1000 runs past the end of the file (4 bytes follow");
    free(buf);
    buf = build_st("{}", (uint64_t)1 << 40, 0, &n);
    CHECK_FAIL(stof_safetensors_parse(buf, n, "big.safetensors", &f), STOF_ERR_FORMAT,
               "header length 1099511627776 exceeds the limit of 100000000 bytes");
    free(buf);
    buf = build_st("{\"a\" :{}}", 9, 0, &n);
    buf[8 + 4] = '\0';
    CHECK_FAIL(stof_safetensors_parse(buf, n, "nul.safetensors", &f), STOF_ERR_FORMAT,
               "NUL byte at offset 12");
    free(buf);
    CHECK(f == NULL, "no file on failure");
    CHECK_FAIL(stof_safetensors_parse(NULL, 0, "x", &f), STOF_ERR_FORMAT, "too short");
    CHECK_STATUS(stof_safetensors_parse("", 0, "x", NULL), STOF_ERR_INVALID_ARG);
}

/* Truncations of a real checkpoint, through the file API. */
static void test_truncated_files(void)
{
    char src[1024], dst[1024];
    path_join(src, sizeof src, data_dir, "tiny_bert_f16/model.safetensors");
    path_join(dst, sizeof dst, tmp_root, "case.safetensors");
    size_t n;
    uint8_t *bytes = read_bytes(src, &n);
    safetensors_file *f = NULL;
    write_bytes(dst, bytes, n - 1);
    CHECK_FAIL(stof_safetensors_open(dst, &f), STOF_ERR_FORMAT, "run past the data section");
    CHECK(strstr(stof_last_error(), dst) != NULL, "message names the file: %s", stof_last_error());
    write_bytes(dst, bytes, n / 2);
    CHECK_FAIL(stof_safetensors_open(dst, &f), STOF_ERR_FORMAT, "run past the data section");
    write_bytes(dst, bytes, 100);
    CHECK_FAIL(stof_safetensors_open(dst, &f), STOF_ERR_FORMAT, "runs past the end of the file");
    write_bytes(dst, bytes, 3);
    CHECK_FAIL(stof_safetensors_open(dst, &f), STOF_ERR_FORMAT, "file is 3 bytes");
    write_bytes(dst, bytes, 0);
    CHECK_FAIL(stof_safetensors_open(dst, &f), STOF_ERR_FORMAT, "file is 0 bytes");
    write_bytes(dst, bytes, n);
    CHECK_OK(stof_safetensors_open(dst, &f));
    stof_safetensors_close(f);
    remove(dst);
    free(bytes);
}

/* ---- weights: files rewritten from a real one with one change */

typedef struct st_edit {
    const char *drop;   /* tensor left out */
    const char *retype; /* tensor given dtype / shape below (same bytes) */
    const char *dtype;
    int ndim;
    int64_t shape[2];
} st_edit;

static void rewrite_st(const safetensors_file *src, const char *dst, const st_edit *e)
{
    cJSON *hdr = cJSON_CreateObject();
    size_t total = 0;
    for (int i = 0; i < src->n_tensors; i++)
        total += src->tensors[i].end - src->tensors[i].begin;
    uint8_t *data = malloc(total + 1);
    size_t off = 0;
    for (int i = 0; i < src->n_tensors; i++) {
        const safetensors_tensor *t = &src->tensors[i];
        if (e->drop && strcmp(t->name, e->drop) == 0) continue;
        size_t bytes = t->end - t->begin;
        memcpy(data + off, t->data, bytes);
        bool edit = e->retype && strcmp(t->name, e->retype) == 0;
        cJSON *entry = cJSON_AddObjectToObject(hdr, t->name);
        cJSON_AddStringToObject(entry, "dtype",
                                edit ? e->dtype : stof_safetensors_dtype_name(t->dtype));
        cJSON *shape = cJSON_AddArrayToObject(entry, "shape");
        int nd = edit ? e->ndim : t->ndim;
        for (int d = 0; d < nd; d++)
            cJSON_AddItemToArray(shape,
                                 cJSON_CreateNumber((double)(edit ? e->shape[d] : t->shape[d])));
        cJSON *offs = cJSON_AddArrayToObject(entry, "data_offsets");
        cJSON_AddItemToArray(offs, cJSON_CreateNumber((double)off));
        cJSON_AddItemToArray(offs, cJSON_CreateNumber((double)(off + bytes)));
        off += bytes;
    }
    char *text = cJSON_PrintUnformatted(hdr);
    size_t hl = strlen(text), n = 8 + hl + off;
    uint8_t *file = malloc(n);
    for (int i = 0; i < 8; i++)
        file[i] = (uint8_t)((uint64_t)hl >> (8 * i));
    memcpy(file + 8, text, hl);
    memcpy(file + 8 + hl, data, off);
    write_bytes(dst, file, n);
    free(file);
    free(text);
    free(data);
    cJSON_Delete(hdr);
}

static void weights_case(const safetensors_file *src, const bert_config *cfg, const st_edit *e,
                         const char *needle)
{
    char dst[1024];
    path_join(dst, sizeof dst, tmp_root, "case.safetensors");
    rewrite_st(src, dst, e);
    bert_weights w;
    memset(&w, 0x5a, sizeof w);
    CHECK_FAIL(stof_bert_weights_load_file(dst, cfg, &w), STOF_ERR_FORMAT, needle);
    CHECK(w.storage == NULL && w.layers == NULL, "nothing left allocated on failure");
    remove(dst);
}

static void test_weight_errors(void)
{
    char path[1024];
    path_join(path, sizeof path, data_dir, "tiny_bert/config.json");
    bert_config cfg;
    CHECK_OK(stof_bert_config_load(path, &cfg));
    path_join(path, sizeof path, data_dir, "tiny_bert/model.safetensors");
    safetensors_file *src = NULL;
    CHECK_OK(stof_safetensors_open(path, &src));
    if (!src) return;

    st_edit none = {0};
    char dst[1024];
    path_join(dst, sizeof dst, tmp_root, "case.safetensors");
    rewrite_st(src, dst, &none);
    bert_weights w;
    CHECK_OK(stof_bert_weights_load_file(dst, &cfg, &w));
    stof_bert_weights_free(&w);
    remove(dst);

    st_edit drop = {.drop = "encoder.layer.1.output.LayerNorm.bias"};
    weights_case(src, &cfg, &drop,
                 "tensor 'encoder.layer.1.output.LayerNorm.bias' is missing (expected shape [64])");
    st_edit transposed = {.retype = "encoder.layer.0.intermediate.dense.weight",
                          .dtype = "F32",
                          .ndim = 2,
                          .shape = {64, 128}};
    weights_case(src, &cfg, &transposed,
                 "tensor 'encoder.layer.0.intermediate.dense.weight' has shape [64, 128], "
                 "expected [128, 64]");
    st_edit flat = {
        .retype = "embeddings.LayerNorm.weight", .dtype = "F32", .ndim = 2, .shape = {1, 64}};
    weights_case(src, &cfg, &flat, "has shape [1, 64], expected [64]");
    st_edit as_int = {.retype = "encoder.layer.0.attention.self.key.bias",
                      .dtype = "I32",
                      .ndim = 1,
                      .shape = {64}};
    weights_case(src, &cfg, &as_int,
                 "tensor 'encoder.layer.0.attention.self.key.bias' has dtype I32; expected F32, "
                 "F16 or BF16");
    st_edit no_emb = {.drop = "embeddings.word_embeddings.weight"};
    weights_case(src, &cfg, &no_emb, "'embeddings.word_embeddings.weight' is missing");

    bert_config bigger = cfg;
    bigger.vocab_size = 101;
    weights_case(src, &bigger, &none,
                 "'embeddings.word_embeddings.weight' has shape [100, 64], expected [101, 64]");
    bigger = cfg;
    bigger.num_hidden_layers = 3;
    weights_case(src, &bigger, &none, "'encoder.layer.2.attention.self.query.weight' is missing");
    /* A config claiming absurd sizes fails on shapes before allocating them. */
    bigger = cfg;
    bigger.vocab_size = BERT_MAX_VOCAB;
    bigger.hidden_size = 65536;
    bigger.num_attention_heads = 1;
    bigger.head_dim = 65536;
    weights_case(src, &bigger, &none, "expected [16777216, 65536]");
    bert_config broken = cfg;
    broken.num_attention_heads = 5;
    CHECK_FAIL(stof_bert_weights_from_safetensors(src, &broken, &w), STOF_ERR_FORMAT,
               "not divisible");

    /* Fewer layers than the file holds is a legal truncation. */
    bert_config fewer = cfg;
    fewer.num_hidden_layers = 1;
    CHECK_OK(stof_bert_weights_from_safetensors(src, &fewer, &w));
    CHECK(w.n_params > 0 && w.layers != NULL, "truncated model loads");
    stof_bert_weights_free(&w);
    stof_safetensors_close(src);
}

/* ---- config.json */

static char *config_variant(const char *key, cJSON *value)
{
    char path[1024];
    path_join(path, sizeof path, data_dir, "tiny_bert/config.json");
    cJSON *j = load_json_file(path);
    if (value) {
        if (cJSON_GetObjectItem(j, key))
            cJSON_ReplaceItemInObjectCaseSensitive(j, key, value);
        else
            cJSON_AddItemToObject(j, key, value);
    } else {
        cJSON_DeleteItemFromObjectCaseSensitive(j, key);
    }
    char *text = cJSON_Print(j);
    cJSON_Delete(j);
    return text;
}

static void config_case(const char *key, cJSON *value, stof_status want, const char *needle)
{
    char *text = config_variant(key, value);
    bert_config c;
    stof_status st = stof_bert_config_parse(text, strlen(text), "cfg.json", &c);
    CHECK(st == want && (want == STOF_OK || (strstr(stof_last_error(), needle) &&
                                             strstr(stof_last_error(), "cfg.json"))),
          "config with %s changed -> %s (want %s), message \"%s\" should contain \"%s\"", key,
          stof_status_str(st), stof_status_str(want), stof_last_error(), needle);
    free(text);
}

static void test_config_errors(void)
{
    const stof_status F = STOF_ERR_FORMAT, U = STOF_ERR_UNSUPPORTED;
    config_case("num_attention_heads", cJSON_CreateNumber(5), F,
                "hidden_size 64 is not divisible by num_attention_heads 5");
    config_case("hidden_act", cJSON_CreateString("silu"), U,
                "hidden_act \"silu\" is not supported");
    config_case("hidden_act", cJSON_CreateNumber(1), F, "\"hidden_act\" must be a string, got 1");
    config_case("hidden_size", NULL, F, "\"hidden_size\" is missing");
    config_case("hidden_size", cJSON_CreateNumber(0), F, "\"hidden_size\" = 0 is out of range");
    config_case("hidden_size", cJSON_CreateNumber(64.5), F, "must be an integer, got 64.5");
    config_case("hidden_size", cJSON_CreateString("64"), F, "must be an integer, got \"64\"");
    config_case("num_hidden_layers", cJSON_CreateNumber(1e12), F, "out of range [1, 1024]");
    config_case("vocab_size", cJSON_CreateNumber(-3), F, "\"vocab_size\" = -3");
    config_case("layer_norm_eps", cJSON_CreateNumber(0), F, "\"layer_norm_eps\" = 0");
    config_case("layer_norm_eps", cJSON_CreateString("1e-12"), F, "\"layer_norm_eps\"");
    config_case("model_type", cJSON_CreateString("roberta"), U, "model_type \"roberta\"");
    config_case("position_embedding_type", cJSON_CreateString("relative_key"), U,
                "\"relative_key\"");
    config_case("is_decoder", cJSON_CreateTrue(), U, "is_decoder");
    /* accepted variants, and BertConfig defaults for optional keys */
    config_case("hidden_act", cJSON_CreateString("gelu_pytorch_tanh"), STOF_OK, "");
    config_case("type_vocab_size", NULL, STOF_OK, "");
    const char *acts[][2] = {
        {"gelu_new", "2"}, {"gelu_pytorch_tanh", "2"}, {"relu", "3"}, {"gelu", "1"}};
    for (size_t i = 0; i < sizeof acts / sizeof acts[0]; i++) {
        char *text = config_variant("hidden_act", cJSON_CreateString(acts[i][0]));
        bert_config c;
        CHECK_OK(stof_bert_config_parse(text, strlen(text), "cfg.json", &c));
        CHECK((int)c.hidden_act == atoi(acts[i][1]), "%s -> %d", acts[i][0], (int)c.hidden_act);
        free(text);
    }
    const char *minimal = "{\"hidden_size\":32,\"num_hidden_layers\":1,\"num_attention_heads\":2,"
                          "\"intermediate_size\":64,\"vocab_size\":10}";
    bert_config c;
    CHECK_OK(stof_bert_config_parse(minimal, strlen(minimal), "min.json", &c));
    CHECK(c.max_position_embeddings == 512 && c.type_vocab_size == 2 &&
              c.layer_norm_eps == 1e-12f && c.hidden_act == ACT_GELU && c.head_dim == 16,
          "BertConfig defaults");
    CHECK_FAIL(stof_bert_config_parse("{\"hidden_size\":", 15, "bad.json", &c), F,
               "bad.json: not valid JSON");
    CHECK_FAIL(stof_bert_config_parse("[]", 2, "arr.json", &c), F, "must hold a JSON object");
    CHECK_FAIL(stof_bert_config_parse("{} {}", 5, "two.json", &c), F, "unexpected bytes");
    CHECK_FAIL(stof_bert_config_load("/nonexistent/config.json", &c), STOF_ERR_IO,
               "/nonexistent/config.json: no such file");
}

/* ---- folder layouts */

static void write_modules(const char *dir, const char *transformer_path, const char *extra)
{
    char p[1024], text[1024];
    snprintf(text, sizeof text,
             "[{\"idx\":0,\"name\":\"0\",\"path\":\"%s\","
             "\"type\":\"sentence_transformers.models.Transformer\"},"
             "{\"idx\":1,\"name\":\"1\",\"path\":\"1_Pooling\","
             "\"type\":\"sentence_transformers.models.Pooling\"}%s]",
             transformer_path, extra);
    path_join(p, sizeof p, dir, "modules.json");
    write_text(p, text);
}

static void write_pooling(const char *dir, const char *json)
{
    char p[1024];
    path_join(p, sizeof p, dir, "1_Pooling");
    make_dir(p);
    path_join(p, sizeof p, dir, "1_Pooling/config.json");
    write_text(p, json);
}

/* A sentence-transformers folder whose 0_Transformer links to tiny_bert. */
static void st_folder(char *dir, size_t cap, const char *name, const char *pooling_json,
                      const char *extra_modules)
{
    char target[1024], link[1024];
    tmp_dir(dir, cap, name);
    path_join(target, sizeof target, data_dir, "tiny_bert");
    path_join(link, sizeof link, dir, "0_Transformer");
    if (symlink(target, link) != 0) fprintf(stderr, "symlink %s failed\n", link);
    write_modules(dir, "0_Transformer", extra_modules);
    write_pooling(dir, pooling_json);
}

static void test_layouts(void)
{
    bert_files files;
    bert_weights w;
    char dir[1024], p[1024];

    tmp_dir(dir, sizeof dir, "empty");
    CHECK_FAIL(stof_bert_locate(dir, &files), STOF_ERR_IO, "no config.json, modules.json");
    path_join(p, sizeof p, dir, "config.json");
    write_text(p, "{}");
    CHECK_FAIL(stof_bert_locate(dir, &files), STOF_ERR_IO, "model.safetensors: no such file");
    path_join(p, sizeof p, dir, "pytorch_model.bin");
    write_text(p, "x");
    CHECK_FAIL(stof_bert_locate(dir, &files), STOF_ERR_UNSUPPORTED, "safe_serialization");
    remove_tree(dir);
    path_join(p, sizeof p, tmp_root, "no_such_folder");
    CHECK_FAIL(stof_bert_locate(p, &files), STOF_ERR_IO, "not a folder");

    const char *mean = "{\"word_embedding_dimension\":64,\"pooling_mode_cls_token\":false,"
                       "\"pooling_mode_mean_tokens\":true,\"pooling_mode_max_tokens\":false}";
    st_folder(dir, sizeof dir, "st_ok", mean, "");
    CHECK_OK(stof_bert_load_dir(dir, &files, &w));
    CHECK(files.sentence_transformers && files.pooling == BERT_POOL_MEAN && !files.normalize,
          "linked sentence-transformers folder");
    stof_bert_weights_free(&w);
    remove_tree(dir);

    st_folder(dir, sizeof dir, "st_dense", mean,
              ",{\"idx\":2,\"name\":\"2\",\"path\":\"2_Dense\","
              "\"type\":\"sentence_transformers.models.Dense\"}");
    CHECK_FAIL(stof_bert_locate(dir, &files), STOF_ERR_UNSUPPORTED,
               "module 2 \"sentence_transformers.models.Dense\" is not supported");
    remove_tree(dir);

    st_folder(dir, sizeof dir, "st_max", "{\"pooling_mode_max_tokens\":true}", "");
    CHECK_FAIL(stof_bert_locate(dir, &files), STOF_ERR_UNSUPPORTED,
               "\"pooling_mode_max_tokens\" is not supported");
    remove_tree(dir);

    st_folder(dir, sizeof dir, "st_two",
              "{\"pooling_mode_cls_token\":true,\"pooling_mode_mean_tokens\":true}", "");
    CHECK_FAIL(stof_bert_locate(dir, &files), STOF_ERR_UNSUPPORTED, "2 pooling modes are set");
    remove_tree(dir);

    st_folder(dir, sizeof dir, "st_none", "{\"pooling_mode_mean_tokens\":false}", "");
    CHECK_FAIL(stof_bert_locate(dir, &files), STOF_ERR_FORMAT, "no pooling_mode_* flag is true");
    remove_tree(dir);

    st_folder(dir, sizeof dir, "st_string", "{\"pooling_mode\":\"cls\"}", "");
    CHECK_OK(stof_bert_locate(dir, &files));
    CHECK(files.pooling == BERT_POOL_CLS, "pooling_mode string");
    remove_tree(dir);

    st_folder(dir, sizeof dir, "st_dim",
              "{\"word_embedding_dimension\":32,\"pooling_mode_mean_tokens\":true}", "");
    CHECK_FAIL(stof_bert_load_dir(dir, &files, &w), STOF_ERR_FORMAT,
               "word_embedding_dimension 32 differs from hidden_size 64");
    remove_tree(dir);

    tmp_dir(dir, sizeof dir, "st_escape");
    write_modules(dir, "../tiny_bert", "");
    CHECK_FAIL(stof_bert_locate(dir, &files), STOF_ERR_FORMAT,
               "module path \"../tiny_bert\" leaves the model folder");
    write_modules(dir, "/etc", "");
    CHECK_FAIL(stof_bert_locate(dir, &files), STOF_ERR_FORMAT, "is absolute");
    path_join(p, sizeof p, dir, "modules.json");
    write_text(p, "{\"not\":\"a list\"}");
    CHECK_FAIL(stof_bert_locate(dir, &files), STOF_ERR_FORMAT, "must be a JSON array");
    remove_tree(dir);
}

/* ---- random mutations: accepted files must still be self-consistent */

static void test_mutations(void)
{
    char src[1024];
    path_join(src, sizeof src, data_dir, "tiny_bert_prefixed/model.safetensors");
    size_t n;
    uint8_t *orig = read_bytes(src, &n);
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--)
        hlen = hlen << 8 | orig[i];
    uint8_t *buf = malloc(n);
    test_rng r;
    test_rng_init(&r, test_seed());
    int accepted = 0, rejected = 0, wrong = 0;
    for (int iter = 0; iter < 3000; iter++) {
        memcpy(buf, orig, n);
        int edits = (int)test_rng_int(&r, 1, 4);
        for (int e = 0; e < edits; e++) {
            size_t at = (size_t)test_rng_int(&r, 0, (int64_t)(8 + hlen - 1));
            static const char digits[] = "0123456789,[]{}\":-.e ";
            buf[at] = test_rng_int(&r, 0, 1) ? (uint8_t)digits[test_rng_int(&r, 0, 20)]
                                             : (uint8_t)test_rng_int(&r, 0, 255);
        }
        size_t len = test_rng_int(&r, 0, 9) == 0 ? (size_t)test_rng_int(&r, 0, (int64_t)n) : n;
        safetensors_file *f = NULL;
        stof_status st = stof_safetensors_parse(buf, len, "mutant", &f);
        if (st != STOF_OK) {
            rejected++;
            wrong += st != STOF_ERR_FORMAT || f != NULL || !strstr(stof_last_error(), "mutant");
            continue;
        }
        accepted++;
        for (int i = 0; i < f->n_tensors; i++) {
            const safetensors_tensor *t = &f->tensors[i];
            uint64_t sz = stof_safetensors_dtype_size(t->dtype);
            bool ok = t->begin <= t->end && t->end <= f->data_bytes &&
                      (uint8_t *)t->data == buf + 8 + (len - 8 - f->data_bytes) + t->begin &&
                      (t->end - t->begin) == (uint64_t)t->numel * sz &&
                      f->data + f->data_bytes == buf + len;
            wrong += !ok;
        }
        stof_safetensors_close(f);
    }
    CHECK(wrong == 0, "%d mutants broke an invariant", wrong);
    CHECK(accepted > 0 && rejected > 0, "mutants accepted %d, rejected %d", accepted, rejected);
    free(buf);
    free(orig);
}

int main(void)
{
    const char *base = getenv("TMPDIR");
    snprintf(tmp_root, sizeof tmp_root, "%s/stof_model_load_XXXXXX", base && *base ? base : "/tmp");
    if (!mkdtemp(tmp_root)) {
        fprintf(stderr, "mkdtemp %s failed\n", tmp_root);
        return 1;
    }
    test_tiny_folders();
    test_canonical_loader();
    test_lookup();
    test_malformed_headers();
    test_malformed_lengths();
    test_truncated_files();
    test_weight_errors();
    test_config_errors();
    test_layouts();
    test_mutations();
    remove(tmp_root);
    return test_finish("test_model_load");
}
