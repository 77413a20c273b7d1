/*
 * test_model_tune_gpu.c — stof_model_tune on families beside BERT: a LLaMA
 * (GQA 4:1, SwiGLU) and a ModernBERT (two mask kinds) of the golden set at
 * head dim 32 (tests/data/families/<family>_hd32), f16, on the golden batch.
 * A search with a small budget must finish, store its entry under the
 * model's key (family + description hash) in a fresh cache file, and the
 * tuned forward (the remembered plan, then the cache's in a model loaded
 * anew) must equal the untuned one within the tuner's own tolerance and HF's
 * outputs within the golden test's. A requested plan that puts all four
 * GEMM segments on the stof template (what a search may pick) is checked
 * against HF too, so the template path of pre-norm layers (their GLU and
 * residual epilogues) is covered whatever the search chooses, on a Hopper
 * also with all four on gemm_sm90, and so are plans that run each layer mask
 * kind's attention on its own kernel. Outputs are poisoned before every run.
 */
#include "attn/attn.h"
#include "attn/select.h"
#include "family_golden.h"
#include "fuse/fuse.h"
#include "model/encoder.h"
#include "testlib.h"
#include "tune/tune.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cuda_runtime_api.h>

static const double tol_same = 1e-2; /* tuned vs untuned: the tuner's f16 bound */
static const double tol_hf = 2e-2;   /* vs HF in f16 (test_model_golden_gpu.c) */

typedef struct tune_case {
    const char *name, *family;
    int shape[TUNE_NSEG][2]; /* GEMM (n, k) of QKV, out-proj, FFN1 (both GLU halves), FFN2 */
} tune_case;

static const tune_case cases[] = {
    {"llama_hd32", "llama", {{192, 128}, {128, 128}, {384, 128}, {128, 192}}},
    {"modernbert_hd32", "modernbert", {{192, 64}, {64, 64}, {192, 64}, {64, 96}}},
};

static char cache_path[512];

typedef struct batch {
    family_golden g;
    stof_tensor ids, lengths;
    int64_t sh_ids[2], sh_len[1], sh_h[3];
    float *dev, *host; /* hidden [B, L, H] f32 */
    int64_t n;
} batch;

static stof_status run(stof_model *m, batch *b, const tune_plan *plan, float *out)
{
    cudaMemset(b->dev, 0xff, (size_t)b->n * sizeof(float));
    stof_tensor hid = stof_tensor_make(b->dev, STOF_F32, STOF_MEM_DEVICE, 3, b->sh_h);
    stof_status st = enc_forward_plan(m, NULL, &b->ids, &b->lengths, NULL, &hid, NULL, plan);
    if (st != STOF_OK) return st;
    if (cudaDeviceSynchronize() != cudaSuccess ||
        cudaMemcpy(out, b->dev, (size_t)b->n * sizeof(float), cudaMemcpyDeviceToHost) !=
            cudaSuccess)
        return stof_error(STOF_ERR_CUDA, "copying the hidden state back");
    return STOF_OK;
}

static double vs_hf(const batch *b, const float *out, int H)
{
    return family_golden_err(out, family_golden_f32(&b->g, "hidden", b->n), &b->g, H, false);
}

static stof_model *load(stof_ctx *ctx, const char *name)
{
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/families/%s", STOF_TEST_DATA_DIR, name);
    stof_model_params mp = stof_model_default_params();
    mp.dtype = STOF_F16;
    mp.tune_cache = cache_path;
    stof_model *m = NULL;
    CHECK_OK(stof_model_load(ctx, dir, &mp, &m));
    return m;
}

static tune_seg seg_of(const fuse_config *c)
{
    return (tune_seg){1,          0,          (int)c->tpl, c->block_m, c->block_n,
                      c->block_k, c->warps_m, c->warps_n,  c->stages};
}

/* Every GEMM segment on gemm_sm90, each in its rule-based config: its
 * residual epilogue (out-projection, FFN2) and GLU epilogue (FFN1). */
static void sm90_plan(const stof_ctx *ctx, const tune_case *c, int64_t rows, tune_plan *p)
{
    tune_plan_default(p);
    for (int s = 0; s < TUNE_NSEG; s++) {
        fuse_config d =
            fuse_config_default(FUSE_TPL_GEMM_SM90, rows, c->shape[s][0], c->shape[s][1],
                                ctx->sm_count, ctx->smem_per_block_optin);
        p->seg[s] = seg_of(&d);
    }
}

/* Every GEMM segment on the GEMM + bias + activation template, in the first
 * listed config that fits all four shapes; false when none does. */
static bool template_plan(const stof_ctx *ctx, const tune_case *c, int64_t rows, tune_plan *p)
{
    tune_plan_default(p);
    int count = 0;
    const fuse_config *list = fuse_config_list(FUSE_TPL_GEMM_BIAS_ACT, &count);
    for (int i = 0; i < count; i++) {
        bool fits = true;
        for (int s = 0; s < TUNE_NSEG && fits; s++)
            fits = fuse_config_check_shape(&list[i], rows, c->shape[s][0], c->shape[s][1],
                                           ctx->smem_per_block_optin) == STOF_OK;
        stof_clear_error();
        if (!fits) continue;
        for (int s = 0; s < TUNE_NSEG; s++)
            p->seg[s] = seg_of(&list[i]);
        return true;
    }
    return false;
}

static void run_case(stof_ctx *ctx, const tune_case *c)
{
    stof_model *m = load(ctx, c->name);
    if (!m) return;
    stof_model_info info;
    CHECK_OK(stof_model_get_info(m, &info));
    int H = info.hidden;
    batch b;
    memset(&b, 0, sizeof b);
    family_golden_open(c->name, &b.g);
    b.sh_ids[0] = b.g.B, b.sh_ids[1] = b.g.L, b.sh_len[0] = b.g.B;
    b.sh_h[0] = b.g.B, b.sh_h[1] = b.g.L, b.sh_h[2] = H;
    b.n = (int64_t)b.g.B * b.g.L * H;
    b.ids = stof_tensor_make((void *)b.g.ids, STOF_I32, STOF_MEM_HOST, 2, b.sh_ids);
    b.lengths = stof_tensor_make((void *)b.g.lengths, STOF_I32, STOF_MEM_HOST, 1, b.sh_len);
    if (cudaMalloc((void **)&b.dev, (size_t)b.n * sizeof(float)) != cudaSuccess) exit(1);
    float *untuned = malloc((size_t)b.n * sizeof(float));
    float *tuned = malloc((size_t)b.n * sizeof(float));

    CHECK_OK(run(m, &b, NULL, untuned));
    double e0 = vs_hf(&b, untuned, H);
    CHECK(e0 <= tol_hf, "%s untuned: err vs HF %.3g", c->name, e0);

    stof_tune_params tp = stof_tune_default_params();
    tp.budget = 6;
    stof_tune_result res;
    stof_status st = stof_model_tune(m, &tp, &b.ids, &b.lengths, NULL, &res);
    CHECK(st == STOF_OK, "%s: stof_model_tune: %s", c->name, stof_last_error());
    if (st == STOF_OK) {
        CHECK(res.measured >= 1 && res.default_ms > 0 && res.tuned_ms > 0,
              "%s: measured %d, default %.4f ms, tuned %.4f ms", c->name, res.measured,
              res.default_ms, res.tuned_ms);
        CHECK(strcmp(res.cache_path, cache_path) == 0, "%s: stored in \"%s\"", c->name,
              res.cache_path);
        printf("%s: %d measured, %d rejected, %.4f -> %.4f ms:", c->name, res.measured,
               res.rejected, res.default_ms, res.tuned_ms);
        for (int s = 0; s < STOF_TUNE_SEGMENTS; s++) {
            CHECK(res.chosen[s][0] != '\0', "%s: segment %d has no choice", c->name, s);
            printf(" %s [%s]", res.segment[s], res.chosen[s]);
        }
        printf("\n");
    }

    /* The remembered plan. */
    CHECK_OK(run(m, &b, NULL, tuned));
    double same = test_rel_err(tuned, untuned, b.n), e1 = vs_hf(&b, tuned, H);
    CHECK(same <= tol_same, "%s tuned vs untuned: rel err %.3g", c->name, same);
    CHECK(e1 <= tol_hf, "%s tuned: err vs HF %.3g", c->name, e1);

    /* The cache holds it under the model's family and description hash. */
    tune_key key;
    CHECK_OK(enc_gpu_tune_key(m, b.g.B, b.g.L, family_golden_tokens(&b.g), NULL, &key));
    CHECK(strcmp(key.family, c->family) == 0 && strlen(key.desc_hash) == 16,
          "%s: key family \"%s\", desc_hash \"%s\"", c->name, key.family, key.desc_hash);
    tune_cache *cache = NULL;
    CHECK_OK(tune_cache_load(cache_path, stof_version(), &cache));
    CHECK(cache && tune_cache_find(cache, &key, NULL), "%s: no cache entry under its key", c->name);
    tune_cache_free(cache);

    /* A model loaded anew finds the entry in the file. */
    stof_model *again = load(ctx, c->name);
    if (again) {
        CHECK_OK(run(again, &b, NULL, tuned));
        same = test_rel_err(tuned, untuned, b.n);
        CHECK(same <= tol_same, "%s from the cache vs untuned: rel err %.3g", c->name, same);
        stof_model_destroy(again);
    }

    /* Every GEMM segment on the stof template. */
    tune_plan p;
    CHECK(template_plan(ctx, c, family_golden_tokens(&b.g), &p),
          "%s: no GEMM + bias + act config fits its segments", c->name);
    CHECK_OK(run(m, &b, &p, tuned));
    double e2 = vs_hf(&b, tuned, H);
    same = test_rel_err(tuned, untuned, b.n);
    CHECK(e2 <= tol_hf && same <= tol_same, "%s template plan: err vs HF %.3g, vs cuBLASLt %.3g",
          c->name, e2, same);
    printf("%s: err vs HF untuned %.2e, tuned %.2e, all-template %.2e\n", c->name, e0, e1, e2);
    if (fuse_sm90_available(ctx)) { /* and every GEMM segment on the Hopper template */
        sm90_plan(ctx, c, family_golden_tokens(&b.g), &p);
        CHECK_OK(run(m, &b, &p, tuned));
        double e4 = vs_hf(&b, tuned, H);
        same = test_rel_err(tuned, untuned, b.n);
        CHECK(e4 <= tol_hf && same <= tol_same,
              "%s gemm_sm90 plan: err vs HF %.3g, vs the untuned plan %.3g", c->name, e4, same);
    }

    /* Each layer mask kind's attention on a kernel of its own: row-wise for one
     * kind, the selector for the other (the plan carries one per kind). */
    int tile_m = 0, tile_n = 0;
    CHECK_OK(enc_gpu_mask_tiles(m, b.g.B, b.g.L, b.g.lengths, NULL, &tile_m, &tile_n));
    CHECK(attn_rowwise_available(info.head_dim, tile_n), "%s: no row-wise kernel for tiles %dx%d",
          c->name, tile_m, tile_n);
    for (int kind = 0; kind < 2 && attn_rowwise_available(info.head_dim, tile_n); kind++) {
        tune_plan_default(&p);
        if (kind == 0)
            p.attn_kernel = STOF_ATTN_ROWWISE, p.attn_warps = ATTN_ROWWISE_WARPS;
        else
            p.attn2_kernel = STOF_ATTN_ROWWISE, p.attn2_warps = ATTN_ROWWISE_WARPS;
        CHECK_OK(run(m, &b, &p, tuned));
        double e3 = vs_hf(&b, tuned, H);
        same = test_rel_err(tuned, untuned, b.n);
        CHECK(e3 <= tol_hf && same <= tol_same,
              "%s row-wise attention for kind %d: err vs HF %.3g, vs the selector's %.3g", c->name,
              kind, e3, same);
    }

    free(untuned);
    free(tuned);
    cudaFree(b.dev);
    family_golden_close(&b.g);
    stof_model_destroy(m);
}

int main(void)
{
    test_require_gpu("test_model_tune_gpu");
    snprintf(cache_path, sizeof cache_path, "%s/stof_tune_gpu_%d.json",
             getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp", (int)getpid());
    unlink(cache_path);
    stof_ctx_params p = stof_ctx_default_params();
    p.device = STOF_DEVICE_GPU;
    stof_ctx *ctx = NULL;
    CHECK_OK(stof_ctx_create(&p, &ctx));
    for (size_t i = 0; ctx && i < sizeof cases / sizeof cases[0]; i++)
        run_case(ctx, &cases[i]);
    stof_ctx_destroy(ctx);
    unlink(cache_path);
    char lock[600];
    snprintf(lock, sizeof lock, "%s.lock", cache_path);
    unlink(lock);
    return test_finish("test_model_tune_gpu");
}
