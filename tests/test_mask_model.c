/*
 * test_mask_model.c — mask specs within a model's own masks, on the CPU
 * executor (tests/data/families checkpoints: LLaMA causal, Mistral with a
 * sliding window, ModernBERT with global and local layers).
 *
 * 1. A band the user writes that the layers already hold changes nothing:
 *    "full,within:causal" on a causal family is bit for bit the forward with
 *    no spec, on the reference and on the fast path (whose layer masks are
 *    the user's spec within the kind's band, compiled). A band ignored or cut
 *    wrong lets later tokens in and shows.
 * 2. Sparse specs only a band expresses under causal and local layers
 *    (global tokens, random blocks, a band of the user's own) run on the fast
 *    path and match the reference, which intersects element by element.
 */
#include "testlib.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const data_dir = STOF_TEST_DATA_DIR "/families";

enum { B = 3, L = 24 };

typedef struct run_out {
    float *hidden, *logits;
    size_t n_hidden, n_logits;
} run_out;

static stof_status forward(stof_model *m, const stof_model_info *info, const int32_t *ids,
                           const int32_t *lens, const char *text, bool reference, run_out *o)
{
    if (reference)
        setenv("STOF_CPU_REFERENCE", "1", 1);
    else
        unsetenv("STOF_CPU_REFERENCE");
    int64_t sh_ids[2] = {B, L}, sh_len[1] = {B}, sh_hid[3] = {B, L, info->hidden};
    int64_t sh_log[3] = {B, L, info->vocab};
    test_poison_f32(o->hidden, (int64_t)o->n_hidden);
    test_poison_f32(o->logits, (int64_t)o->n_logits);
    stof_tensor tids = stof_tensor_make((void *)ids, STOF_I32, STOF_MEM_HOST, 2, sh_ids);
    stof_tensor tlen = stof_tensor_make((void *)lens, STOF_I32, STOF_MEM_HOST, 1, sh_len);
    stof_tensor hid = stof_tensor_make(o->hidden, STOF_F32, STOF_MEM_HOST, 3, sh_hid);
    stof_tensor log = stof_tensor_make(o->logits, STOF_F32, STOF_MEM_HOST, 3, sh_log);
    stof_forward_params p = stof_forward_default_params();
    stof_mask_spec *spec = NULL;
    stof_status st = text ? stof_mask_spec_parse(text, &spec) : STOF_OK;
    p.mask = spec;
    p.logits = info->is_decoder ? &log : NULL;
    p.logits_all = info->is_decoder;
    if (st == STOF_OK) st = stof_model_forward(m, &p, &tids, &tlen, NULL, &hid, NULL);
    stof_mask_spec_destroy(spec);
    unsetenv("STOF_CPU_REFERENCE");
    return st;
}

static void run_family(stof_ctx *ctx, const char *name, const char *own, test_rng *r)
{
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/%s", data_dir, name);
    stof_model *m = NULL;
    CHECK_OK(stof_model_load(ctx, dir, NULL, &m));
    if (!m) return;
    stof_model_info info;
    CHECK_OK(stof_model_get_info(m, &info));
    int32_t ids[B * L], lens[B] = {L, 13, 4};
    for (int i = 0; i < B * L; i++)
        ids[i] = (int32_t)test_rng_int(r, 1, info.vocab - 1);
    run_out base, got;
    base.n_hidden = got.n_hidden = (size_t)B * L * info.hidden;
    base.n_logits = got.n_logits = info.is_decoder ? (size_t)B * L * info.vocab : 0;
    base.hidden = malloc(base.n_hidden * 4);
    got.hidden = malloc(got.n_hidden * 4);
    base.logits = malloc(base.n_logits * 4 + 4);
    got.logits = malloc(got.n_logits * 4 + 4);
    for (int ref = 0; ref < 2; ref++) {
        const char *path = ref ? "reference" : "fast path";
        /* 1. the family's own band, written by the user */
        if (own) {
            CHECK_OK(forward(m, &info, ids, lens, NULL, ref, &base));
            CHECK_OK(forward(m, &info, ids, lens, own, ref, &got));
            CHECK(memcmp(base.hidden, got.hidden, base.n_hidden * 4) == 0 &&
                      memcmp(base.logits, got.logits, base.n_logits * 4) == 0,
                  "%s %s: \"%s\" differs from the family's own mask", name, path, own);
        }
    }
    /* 2. sparse specs within the layers' bands: fast path against the reference */
    static const char *sparse[] = {"window:3,global:2", "window:2,global:[0,9],random:4x1@9",
                                   "full,within:2:1", "dilated:2x2,global:1,within:causal"};
    for (size_t k = 0; k < sizeof sparse / sizeof sparse[0]; k++) {
        CHECK_OK(forward(m, &info, ids, lens, sparse[k], true, &base));
        CHECK_OK(forward(m, &info, ids, lens, sparse[k], false, &got));
        double eh = test_rel_err(got.hidden, base.hidden, (int64_t)base.n_hidden);
        double el =
            info.is_decoder ? test_rel_err(got.logits, base.logits, (int64_t)base.n_logits) : 0.0;
        CHECK(eh <= 1e-4 && el <= 1e-4, "%s \"%s\": fast path off the reference by %.3g / %.3g",
              name, sparse[k], eh, el);
        /* and the spec is not the no-spec forward: the sparsity reached the layers */
        CHECK_OK(forward(m, &info, ids, lens, NULL, true, &got));
        CHECK(test_rel_err(got.hidden, base.hidden, (int64_t)base.n_hidden) > 1e-3,
              "%s \"%s\": the spec changed nothing", name, sparse[k]);
    }
    free(base.hidden), free(base.logits), free(got.hidden), free(got.logits);
    stof_model_destroy(m);
}

int main(void)
{
    stof_ctx_params p = stof_ctx_default_params();
    p.device = STOF_DEVICE_CPU;
    stof_ctx *ctx = NULL;
    CHECK_OK(stof_ctx_create(&p, &ctx));
    if (!ctx) return test_finish("test_mask_model");
    test_rng r;
    test_rng_init(&r, test_seed());
    run_family(ctx, "llama", "full,within:causal", &r);
    /* Mistral's window is 5 (j >= i - 4): the user's window:4:0 is its own mask */
    run_family(ctx, "mistral", "window:4:0,within:causal", &r);
    run_family(ctx, "modernbert", NULL, &r);
    stof_ctx_destroy(ctx);
    return test_finish("test_mask_model");
}
