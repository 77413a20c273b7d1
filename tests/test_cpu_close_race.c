/*
 * test_cpu_close_race.c — models opened, run and closed from 8 threads at
 * once on one shared CPU context, 50 rounds each: every close lands while
 * other threads are inside stof_model_embed or stof_model_forward, on the
 * same process-wide thread pool and OpenBLAS settings, with one tokenizer
 * shared by all (stof.h allows that). This is the C side of the binding's
 * close-while-encoding finding; scripts/sanitize_cpu.sh runs it under
 * ThreadSanitizer, where a race or a use after free fails it even when the
 * outputs happen to come out right.
 *
 * Each call's output is checked against the same call made alone before the
 * threads start (max |diff| <= 1e-5: a pool that is busy runs a call's items
 * on its own thread, which may split a sum differently). Checks are counted
 * per thread and reported from the main thread (testlib's counters are not
 * atomic).
 */
#include "testlib.h"

#include <stof.h>

#include <math.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum { RACE_THREADS = 8, RACE_ROUNDS = 50, RACE_TEXTS = 6, LLAMA_B = 2, LLAMA_L = 12 };

static const char *const tiny_bert = STOF_TEST_DATA_DIR "/tiny_bert";
static char bert_dir[512]; /* tiny_bert with a vocabulary, made in a temporary folder */
static const char *const llama_dir = STOF_TEST_DATA_DIR "/families/llama";
static const char *const texts[RACE_TEXTS] = {
    "hello world",       "the quick brown fox jumps over the lazy dog", "a",
    "hello hello hello", "stof runs transformers on the cpu",           "world"};

typedef struct race_shared {
    stof_ctx *ctx;
    stof_tokenizer *tok;
    int hidden_bert, hidden_llama;
    float *want_embed;  /* [RACE_TEXTS, hidden_bert] */
    float *want_pooled; /* [LLAMA_B, hidden_llama] */
    int32_t ids[LLAMA_B * LLAMA_L], lengths[LLAMA_B];
} race_shared;

typedef struct race_thread {
    const race_shared *sh;
    int index, calls, failed;
    char first_error[256];
} race_thread;

static void race_fail(race_thread *t, const char *what)
{
    if (t->failed++ == 0) snprintf(t->first_error, sizeof t->first_error, "%s", what);
}

static double max_diff(const float *a, const float *b, int64_t n)
{
    double worst = 0.0;
    for (int64_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - (double)b[i]);
        if (!(d <= worst)) worst = d; /* NaN sticks */
    }
    return worst;
}

/* One embed call on a fresh model, or nonzero with the error. */
static stof_status embed_once(stof_ctx *ctx, const stof_tokenizer *tok, float *out)
{
    stof_model *m = NULL;
    stof_model_params mp = stof_model_default_params();
    stof_status st = stof_model_load(ctx, bert_dir, &mp, &m);
    if (st != STOF_OK) return st;
    stof_embed_params ep = stof_embed_default_params();
    ep.batch = 4;
    st = stof_model_embed(m, tok, texts, NULL, RACE_TEXTS, &ep, out);
    stof_model_destroy(m);
    return st;
}

/* One pooled forward of the tiny LLaMA on a fresh model. */
static stof_status forward_once(stof_ctx *ctx, const race_shared *sh, float *pooled, int hidden)
{
    stof_model *m = NULL;
    stof_model_params mp = stof_model_default_params();
    stof_status st = stof_model_load(ctx, llama_dir, &mp, &m);
    if (st != STOF_OK) return st;
    int64_t ishape[2] = {LLAMA_B, LLAMA_L}, lshape[1] = {LLAMA_B}, pshape[2] = {LLAMA_B, hidden};
    stof_tensor ids = stof_tensor_make((void *)sh->ids, STOF_I32, STOF_MEM_HOST, 2, ishape);
    stof_tensor lens = stof_tensor_make((void *)sh->lengths, STOF_I32, STOF_MEM_HOST, 1, lshape);
    stof_tensor out = stof_tensor_make(pooled, STOF_F32, STOF_MEM_HOST, 2, pshape);
    stof_forward_params fp = stof_forward_default_params();
    st = stof_model_forward(m, &fp, &ids, &lens, NULL, NULL, &out);
    stof_model_destroy(m);
    return st;
}

static void *race_main(void *arg)
{
    race_thread *t = arg;
    const race_shared *sh = t->sh;
    float *embed = malloc(sizeof(float) * RACE_TEXTS * (size_t)sh->hidden_bert);
    float *pooled = malloc(sizeof(float) * LLAMA_B * (size_t)sh->hidden_llama);
    char msg[256];
    for (int round = 0; round < RACE_ROUNDS && embed && pooled; round++) {
        if ((round + t->index) % 2 == 0) {
            test_poison_f32(embed, RACE_TEXTS * (int64_t)sh->hidden_bert);
            stof_status st = embed_once(sh->ctx, sh->tok, embed);
            double d = st == STOF_OK
                           ? max_diff(embed, sh->want_embed, RACE_TEXTS * (int64_t)sh->hidden_bert)
                           : INFINITY;
            if (st != STOF_OK || !(d <= 1e-5)) {
                snprintf(msg, sizeof msg, "embed round %d: %s (%s), max diff %g", round,
                         stof_status_str(st), stof_last_error(), d);
                race_fail(t, msg);
            }
        } else {
            test_poison_f32(pooled, LLAMA_B * (int64_t)sh->hidden_llama);
            stof_status st = forward_once(sh->ctx, sh, pooled, sh->hidden_llama);
            double d = st == STOF_OK
                           ? max_diff(pooled, sh->want_pooled, LLAMA_B * (int64_t)sh->hidden_llama)
                           : INFINITY;
            if (st != STOF_OK || !(d <= 1e-5)) {
                snprintf(msg, sizeof msg, "forward round %d: %s (%s), max diff %g", round,
                         stof_status_str(st), stof_last_error(), d);
                race_fail(t, msg);
            }
        }
        t->calls++;
    }
    if (!embed || !pooled) race_fail(t, "out of host memory");
    free(embed);
    free(pooled);
    return NULL;
}

/* The tiny BERT (its 100 ids) with a vocab.txt, as the binding's tests make it. */
static bool make_bert_folder(void)
{
    snprintf(bert_dir, sizeof bert_dir, "/tmp/stof_close_race_XXXXXX");
    if (!mkdtemp(bert_dir)) return false;
    const char *files[2] = {"config.json", "model.safetensors"};
    char src[768], dst[768];
    for (int i = 0; i < 2; i++) {
        snprintf(src, sizeof src, "%s/%s", tiny_bert, files[i]);
        snprintf(dst, sizeof dst, "%s/%s", bert_dir, files[i]);
        if (symlink(src, dst) != 0) return false;
    }
    snprintf(dst, sizeof dst, "%s/vocab.txt", bert_dir);
    FILE *f = fopen(dst, "w");
    if (!f) return false;
    fputs("[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nhello\nworld\n", f);
    for (int i = 7; i < 100; i++)
        fprintf(f, "w%d\n", i);
    return fclose(f) == 0;
}

static void remove_bert_folder(void)
{
    const char *files[3] = {"config.json", "model.safetensors", "vocab.txt"};
    char path[768];
    for (int i = 0; i < 3; i++) {
        snprintf(path, sizeof path, "%s/%s", bert_dir, files[i]);
        unlink(path);
    }
    rmdir(bert_dir);
}

static int model_hidden(stof_ctx *ctx, const char *dir)
{
    stof_model *m = NULL;
    stof_model_params mp = stof_model_default_params();
    stof_model_info info;
    if (stof_model_load(ctx, dir, &mp, &m) != STOF_OK) return 0;
    int hidden = stof_model_get_info(m, &info) == STOF_OK ? info.hidden : 0;
    stof_model_destroy(m);
    return hidden;
}

int main(void)
{
    race_shared sh;
    memset(&sh, 0, sizeof sh);
    stof_ctx_params cp = stof_ctx_default_params();
    cp.device = STOF_DEVICE_CPU;
    cp.cpu_threads = 2;
    CHECK(make_bert_folder(), "a temporary model folder at %s", bert_dir);
    CHECK_OK(stof_ctx_create(&cp, &sh.ctx));
    CHECK_OK(stof_tokenizer_open(bert_dir, &sh.tok));
    if (!sh.ctx || !sh.tok) return test_finish("test_cpu_close_race");
    sh.hidden_bert = model_hidden(sh.ctx, bert_dir);
    sh.hidden_llama = model_hidden(sh.ctx, llama_dir);
    CHECK(sh.hidden_bert > 0 && sh.hidden_llama > 0, "models load: %s", stof_last_error());
    if (sh.hidden_bert <= 0 || sh.hidden_llama <= 0) return test_finish("test_cpu_close_race");
    test_rng rng;
    test_rng_init(&rng, test_seed());
    for (int b = 0; b < LLAMA_B; b++) {
        sh.lengths[b] = b == 0 ? LLAMA_L : LLAMA_L / 2 + 1;
        for (int i = 0; i < LLAMA_L; i++)
            sh.ids[b * LLAMA_L + i] = (int32_t)test_rng_int(&rng, 1, 200);
    }
    sh.want_embed = malloc(sizeof(float) * RACE_TEXTS * (size_t)sh.hidden_bert);
    sh.want_pooled = malloc(sizeof(float) * LLAMA_B * (size_t)sh.hidden_llama);
    CHECK_OK(embed_once(sh.ctx, sh.tok, sh.want_embed));
    CHECK_OK(forward_once(sh.ctx, &sh, sh.want_pooled, sh.hidden_llama));

    pthread_t th[RACE_THREADS];
    race_thread rt[RACE_THREADS];
    memset(rt, 0, sizeof rt);
    bool started[RACE_THREADS];
    for (int i = 0; i < RACE_THREADS; i++) {
        rt[i].sh = &sh;
        rt[i].index = i;
        started[i] = pthread_create(&th[i], NULL, race_main, &rt[i]) == 0;
        CHECK(started[i], "thread %d starts", i);
    }
    for (int i = 0; i < RACE_THREADS; i++) {
        if (!started[i]) continue;
        pthread_join(th[i], NULL);
        CHECK(rt[i].calls == RACE_ROUNDS && rt[i].failed == 0,
              "thread %d: %d of %d calls, %d failed; first: %s", i, rt[i].calls, RACE_ROUNDS,
              rt[i].failed, rt[i].first_error);
    }
    free(sh.want_embed);
    free(sh.want_pooled);
    stof_tokenizer_destroy(sh.tok);
    stof_ctx_destroy(sh.ctx);
    remove_bert_folder();
    return test_finish("test_cpu_close_race");
}
