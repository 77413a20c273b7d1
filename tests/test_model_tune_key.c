/*
 * test_model_tune_key.c — the tuning cache's key of a model (model_tune_key):
 * every family and description gets its own, one model loaded twice gets the
 * same, and an entry stored under one model's key is not found under
 * another's. CPU only: the key reads host fields (a GPU context adds its
 * device name, SM count and compute capability, which test_model_tune_gpu
 * covers).
 *
 * The models are the golden folders of tests/data/families: GPT-2, LLaMA,
 * Mistral and Qwen2 (one family "llama", three descriptions), ModernBERT and
 * BERT at head dim 32, and variants of the GPT-2 and Mistral folders whose
 * config changes one thing the model's dims do not show (the LayerNorm
 * epsilon, the sliding window), so only the description's hash can tell them
 * apart.
 */
#include "model/encoder.h"
#include "testlib.h"
#include "tune/tune.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char *const folders[] = {"gpt2_hd32",  "llama_hd32",      "mistral_hd32",
                                      "qwen2_hd32", "modernbert_hd32", "bert_hd32"};
#define N_FOLDERS (sizeof folders / sizeof folders[0])
#define N_MODELS (N_FOLDERS + 2) /* and the two variants */

static char tmp_root[256];

static stof_model *load(stof_ctx *ctx, const char *dir)
{
    stof_model *m = NULL;
    CHECK_OK(stof_model_load(ctx, dir, NULL, &m));
    return m;
}

static char *read_text(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    char *buf = calloc(1, 1 << 16);
    size_t n = buf ? fread(buf, 1, (1 << 16) - 1, f) : 0;
    fclose(f);
    if (n == 0) {
        free(buf);
        return NULL;
    }
    return buf;
}

/* A copy of folder <name> (its files linked) whose config.json has `from`
 * replaced by `to`; the copy's path into dir. */
static bool variant(const char *name, const char *from, const char *to, char *dir, size_t cap)
{
    char src[1024], path[1400], target[1400];
    snprintf(src, sizeof src, "%s/families/%s", STOF_TEST_DATA_DIR, name);
    snprintf(dir, cap, "%s/%s", tmp_root, name);
    mkdir(dir, 0700);
    static const char *const files[] = {"model.safetensors", "generation_config.json"};
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, files[i]);
        snprintf(target, sizeof target, "%s/%s", src, files[i]);
        unlink(path);
        if (access(target, R_OK) == 0 && symlink(target, path) != 0) return false;
    }
    snprintf(path, sizeof path, "%s/config.json", src);
    char *text = read_text(path);
    char *at = text ? strstr(text, from) : NULL;
    if (!at) {
        fprintf(stderr, "%s has no \"%s\"\n", path, from);
        free(text);
        return false;
    }
    snprintf(path, sizeof path, "%s/config.json", dir);
    FILE *f = fopen(path, "wb");
    bool ok = f && fwrite(text, 1, (size_t)(at - text), f) == (size_t)(at - text) &&
              fputs(to, f) >= 0 && fputs(at + strlen(from), f) >= 0;
    if (f) fclose(f);
    free(text);
    return ok;
}

static void remove_variant(const char *dir)
{
    static const char *const files[] = {"model.safetensors", "generation_config.json",
                                        "config.json"};
    char path[1400];
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, files[i]);
        unlink(path);
    }
    rmdir(dir);
}

int main(void)
{
    stof_ctx_params cp = stof_ctx_default_params();
    cp.device = STOF_DEVICE_CPU;
    stof_ctx *ctx = NULL;
    CHECK_OK(stof_ctx_create(&cp, &ctx));
    if (!ctx) return test_finish("test_model_tune_key");
    snprintf(tmp_root, sizeof tmp_root, "%s/stof_tune_key_%d",
             getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp", (int)getpid());
    mkdir(tmp_root, 0700);

    char dirs[N_MODELS][1400];
    const char *names[N_MODELS];
    for (size_t i = 0; i < N_FOLDERS; i++) {
        snprintf(dirs[i], sizeof dirs[i], "%s/families/%s", STOF_TEST_DATA_DIR, folders[i]);
        names[i] = folders[i];
    }
    CHECK(variant("gpt2_hd32", "\"layer_norm_epsilon\": 1e-05", "\"layer_norm_epsilon\": 1e-06",
                  dirs[N_FOLDERS], sizeof dirs[0]),
          "writing the GPT-2 variant");
    names[N_FOLDERS] = "gpt2_hd32 eps 1e-6";
    CHECK(variant("mistral_hd32", "\"sliding_window\": 24", "\"sliding_window\": 20",
                  dirs[N_FOLDERS + 1], sizeof dirs[0]),
          "writing the Mistral variant");
    names[N_FOLDERS + 1] = "mistral_hd32 window 20";

    /* Same shape, tokens and mask for every model: only the model tells keys apart. */
    tune_key keys[N_MODELS];
    bool have[N_MODELS] = {false};
    for (size_t i = 0; i < N_MODELS; i++) {
        stof_model *a = load(ctx, dirs[i]), *b = load(ctx, dirs[i]);
        if (a && b) {
            tune_key again;
            model_tune_key(a, 3, 72, 122, "window:8,global:2", &keys[i]);
            model_tune_key(b, 3, 72, 122, "window:8,global:2", &again);
            have[i] = true;
            CHECK(tune_key_equal(&keys[i], &again), "%s: loaded twice, keys differ", names[i]);
            CHECK(strlen(keys[i].desc_hash) == 16 && keys[i].family[0] != '\0',
                  "%s: family \"%s\", desc_hash \"%s\"", names[i], keys[i].family,
                  keys[i].desc_hash);
            printf("%-24s family %-10s desc_hash %s\n", names[i], keys[i].family,
                   keys[i].desc_hash);
        }
        stof_model_destroy(a);
        stof_model_destroy(b);
    }
    for (size_t i = 0; i < N_MODELS; i++)
        for (size_t j = i + 1; j < N_MODELS; j++)
            if (have[i] && have[j])
                CHECK(!tune_key_equal(&keys[i], &keys[j]) &&
                          strcmp(keys[i].desc_hash, keys[j].desc_hash) != 0,
                      "%s and %s share a key", names[i], names[j]);
    /* The variants keep their base's dims and family: the hash alone differs. */
    for (int v = 0; v < 2; v++) {
        const tune_key *base = &keys[v ? 2 : 0], *var = &keys[N_FOLDERS + v];
        if (!have[v ? 2 : 0] || !have[N_FOLDERS + v]) continue;
        tune_key same = *var;
        snprintf(same.desc_hash, sizeof same.desc_hash, "%s", base->desc_hash);
        CHECK(tune_key_equal(&same, base), "%s differs from its base beyond desc_hash",
              names[N_FOLDERS + v]);
    }
    /* The shape, the token bucket and the mask are in the key too. */
    if (have[1]) {
        stof_model *m = load(ctx, dirs[1]);
        tune_key k;
        if (m) {
            model_tune_key(m, 3, 72, 122, NULL, &k);
            CHECK(strcmp(k.mask, "full") == 0 && !tune_key_equal(&k, &keys[1]), "mask \"%s\"",
                  k.mask);
            model_tune_key(m, 3, 72, 1000, "window:8,global:2", &k);
            CHECK(!tune_key_equal(&k, &keys[1]), "the token bucket is not in the key");
            model_tune_key(m, 4, 72, 122, "window:8,global:2", &k);
            CHECK(!tune_key_equal(&k, &keys[1]), "the batch is not in the key");
        }
        stof_model_destroy(m);
    }

    /* An entry stored under one model's key is found under it and no other. */
    char cache[400];
    snprintf(cache, sizeof cache, "%s/tune.json", tmp_root);
    if (have[1]) {
        tune_plan plan;
        tune_plan_default(&plan);
        plan.seg[TUNE_SEG_OUT].algo = 3;
        plan.tuned_ms = 1.5;
        CHECK_OK(tune_cache_store(cache, &keys[1], &plan));
        tune_cache *c = NULL;
        CHECK_OK(tune_cache_load(cache, stof_version(), &c));
        tune_plan got;
        CHECK(c && tune_cache_find(c, &keys[1], &got) && got.seg[TUNE_SEG_OUT].algo == 3,
              "the llama entry is not found under its key");
        for (size_t i = 0; i < N_MODELS; i++)
            if (i != 1 && have[i])
                CHECK(!tune_cache_find(c, &keys[i], NULL), "%s finds the llama entry", names[i]);
        tune_cache_free(c);
    }
    unlink(cache);
    char lock[420];
    snprintf(lock, sizeof lock, "%s.lock", cache);
    unlink(lock);

    /* Tuning measures GPU plans: a CPU model is refused by name. */
    stof_model *m = load(ctx, dirs[1]);
    if (m) {
        int32_t ids[4] = {1, 2, 3, 4};
        int64_t sh[2] = {1, 4};
        stof_tensor t = stof_tensor_make(ids, STOF_I32, STOF_MEM_HOST, 2, sh);
        stof_tune_result res;
        stof_status st = stof_model_tune(m, NULL, &t, NULL, NULL, &res);
        CHECK(st == STOF_ERR_UNSUPPORTED && stof_last_error()[0] != '\0',
              "tuning a CPU model: %s (%s)", stof_status_str(st), stof_last_error());
        stof_model_destroy(m);
    }
    remove_variant(dirs[N_FOLDERS]);
    remove_variant(dirs[N_FOLDERS + 1]);
    rmdir(tmp_root);
    stof_ctx_destroy(ctx);
    return test_finish("test_model_tune_key");
}
