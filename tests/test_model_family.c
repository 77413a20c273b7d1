/*
 * test_model_family.c — the CPU executor of every family against Hugging
 * Face's fp32 outputs (tests/data/families, gen_family_golden.py): GPT-2,
 * LLaMA (GQA 4:1, llama3 rope scaling), Mistral (a sliding window shorter
 * than the batch, a sharded checkpoint), Qwen2 (q/k/v biases, MQA, mixed
 * sliding layers, stored in bf16, tied head) and ModernBERT (global and
 * local layers), and the same families with BERT at head dim 32 (the GPU
 * set, test_model_golden_gpu.c). Each case runs a padded batch, the same batch packed, and
 * the batch under a stof mask spec intersected with the family's own masks;
 * pooled embeddings (last token for decoders, mean for encoders) are checked
 * too; the error is max |out - ref| / max |ref| over the real tokens, at most
 * 1e-4. Then the named errors: unknown model_type, missing and misshapen
 * tensors, outputs the family does not have.
 */
#include "cpu/cpu_ref.h"
#include "family_golden.h"
#include "testlib.h"

#include <stof.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define CHECK_FAIL(call, status, needle)                                                           \
    do {                                                                                           \
        stof_status cf_st_ = (call);                                                               \
        CHECK(cf_st_ == (status) && strstr(stof_last_error(), (needle)) != NULL,                   \
              "%s -> %s (want %s), message \"%s\" should contain \"%s\"", #call,                   \
              stof_status_str(cf_st_), stof_status_str(status), stof_last_error(), (needle));      \
    } while (0)

static const char *const data_dir = STOF_TEST_DATA_DIR "/families";
static const double tolerance = 1e-4;

typedef struct family_case {
    const char *name, *family, *model_type;
    int kv_heads, decoder;
    const char *spec; /* the golden's MASK_SPEC */
} family_case;

/* The CPU set, then the GPU set (head dim 32, L 72; test_model_golden_gpu.c). */
static const family_case cases[] = {
    {"gpt2", "gpt2", "gpt2", 4, 1, "window:2,global:1"},
    {"llama", "llama", "llama", 2, 1, "window:2,global:1"},
    {"mistral", "llama", "mistral", 2, 1, "window:2,global:1"},
    {"qwen2", "llama", "qwen2", 1, 1, "window:2,global:1"},
    {"modernbert", "modernbert", "modernbert", 4, 0, "window:2,global:1"},
    {"gpt2_hd32", "gpt2", "gpt2", 2, 1, "window:8,global:2"},
    {"llama_hd32", "llama", "llama", 1, 1, "window:8,global:2"},
    {"mistral_hd32", "llama", "mistral", 1, 1, "window:8,global:2"},
    {"qwen2_hd32", "llama", "qwen2", 1, 1, "window:8,global:2"},
    {"modernbert_hd32", "modernbert", "modernbert", 2, 0, "window:8,global:2"},
    {"bert_hd32", "bert", "bert", 2, 0, "window:8,global:2"},
};

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

/* One forward of the golden batch: hidden padded or packed, logits of every token. */
static stof_status forward(stof_model *m, const family_golden *g, const stof_mask_spec *spec,
                           bool packed, float *hidden, int H, float *logits, int V)
{
    int64_t sh_ids[2] = {g->B, g->L}, sh_len[1] = {g->B};
    int64_t sh_hid[3] = {g->B, g->L, H}, sh_packed[2] = {family_golden_tokens(g), H};
    int64_t sh_log[3] = {g->B, g->L, V};
    stof_tensor ids = stof_tensor_make((void *)g->ids, STOF_I32, STOF_MEM_HOST, 2, sh_ids);
    stof_tensor len = stof_tensor_make((void *)g->lengths, STOF_I32, STOF_MEM_HOST, 1, sh_len);
    stof_tensor hid = packed ? stof_tensor_make(hidden, STOF_F32, STOF_MEM_HOST, 2, sh_packed)
                             : stof_tensor_make(hidden, STOF_F32, STOF_MEM_HOST, 3, sh_hid);
    stof_tensor log = stof_tensor_make(logits, STOF_F32, STOF_MEM_HOST, 3, sh_log);
    stof_forward_params p = stof_forward_default_params();
    p.mask = spec;
    if (logits) {
        p.logits = &log;
        p.logits_all = 1;
    }
    return stof_model_forward(m, &p, &ids, &len, NULL, &hid, NULL);
}

/* Pooled embeddings: the last real token's hidden state (decoders) or the mean
 * of the real tokens' (encoders), from the golden hidden states. */
static void check_pooled(stof_model *m, const family_golden *g, const float *ref_hidden, int H,
                         bool last, const char *name)
{
    int64_t sh_ids[2] = {g->B, g->L}, sh_len[1] = {g->B}, sh_pool[2] = {g->B, H};
    float *out = malloc((size_t)g->B * H * sizeof(float));
    double *ref = calloc((size_t)g->B * H, sizeof(double));
    test_poison_f32(out, (int64_t)g->B * H);
    stof_tensor ids = stof_tensor_make((void *)g->ids, STOF_I32, STOF_MEM_HOST, 2, sh_ids);
    stof_tensor len = stof_tensor_make((void *)g->lengths, STOF_I32, STOF_MEM_HOST, 1, sh_len);
    stof_tensor pooled = stof_tensor_make(out, STOF_F32, STOF_MEM_HOST, 2, sh_pool);
    CHECK_OK(stof_model_forward(m, NULL, &ids, &len, NULL, NULL, &pooled));
    double err = 0.0, mag = 0.0;
    for (int b = 0; b < g->B; b++) {
        int n = g->lengths[b];
        for (int i = last ? n - 1 : 0; i < n; i++)
            for (int c = 0; c < H; c++)
                ref[(int64_t)b * H + c] +=
                    ref_hidden[((int64_t)b * g->L + i) * H + c] / (last ? 1.0 : (double)n);
        for (int c = 0; c < H; c++) {
            double d = fabs(out[(int64_t)b * H + c] - ref[(int64_t)b * H + c]);
            if (!(d <= err)) err = isnan(d) ? INFINITY : d;
            if (fabs(ref[(int64_t)b * H + c]) > mag) mag = fabs(ref[(int64_t)b * H + c]);
        }
    }
    CHECK(err / mag <= tolerance, "%s: pooled (%s) rel err %.3g", name,
          last ? "last token" : "mean", err / mag);
    free(out);
    free(ref);
}

/* Logits of the last real token only ([B, V]) against the golden rows. */
static void check_last_logits(stof_model *m, const family_golden *g, const float *ref, int V,
                              const char *name)
{
    int64_t sh_ids[2] = {g->B, g->L}, sh_len[1] = {g->B}, sh_log[2] = {g->B, V};
    float *out = malloc((size_t)g->B * V * sizeof(float));
    test_poison_f32(out, (int64_t)g->B * V);
    stof_tensor ids = stof_tensor_make((void *)g->ids, STOF_I32, STOF_MEM_HOST, 2, sh_ids);
    stof_tensor len = stof_tensor_make((void *)g->lengths, STOF_I32, STOF_MEM_HOST, 1, sh_len);
    stof_tensor log = stof_tensor_make(out, STOF_F32, STOF_MEM_HOST, 2, sh_log);
    stof_forward_params p = stof_forward_default_params();
    p.logits = &log;
    CHECK_OK(stof_model_forward(m, &p, &ids, &len, NULL, NULL, NULL));
    double err = family_golden_last_err(out, ref, g, V);
    CHECK(err <= tolerance, "%s: last-token logits rel err %.3g", name, err);
    free(out);
}

static void check_info(stof_model *m, const family_case *c)
{
    stof_model_info info;
    CHECK_OK(stof_model_get_info(m, &info));
    CHECK(strcmp(info.family, c->family) == 0 && strcmp(info.model_type, c->model_type) == 0,
          "%s: family %s, model_type %s", c->name, info.family, info.model_type);
    CHECK(info.kv_heads == c->kv_heads && info.is_decoder == c->decoder,
          "%s: kv_heads %d, is_decoder %d", c->name, info.kv_heads, info.is_decoder);
    CHECK(info.pooling == (c->decoder ? STOF_POOL_LAST : STOF_POOL_MEAN), "%s: pooling %d",
          c->name, (int)info.pooling);
}

static void check_case(stof_ctx *ctx, const family_case *c)
{
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/%s", data_dir, c->name);
    stof_model *m = NULL;
    CHECK_OK(stof_model_load(ctx, dir, NULL, &m));
    if (!m) return;
    check_info(m, c);
    stof_model_info info;
    stof_model_get_info(m, &info);
    family_golden g;
    family_golden_open(c->name, &g);
    int H = info.hidden, V = info.vocab;
    int64_t nh = (int64_t)g.B * g.L * H, nl = (int64_t)g.B * g.L * V;
    float *hidden = malloc((size_t)nh * sizeof(float));
    float *logits = c->decoder ? malloc((size_t)nl * sizeof(float)) : NULL;
    stof_mask_spec *spec = NULL;
    CHECK_OK(stof_mask_spec_parse(c->spec, &spec));
    for (int run = 0; run < 3; run++) {
        bool packed = run == 1, masked = run == 2;
        const char *what = packed ? "packed" : masked ? "masked" : "padded";
        test_poison_f32(hidden, nh);
        if (logits) test_poison_f32(logits, nl);
        CHECK_OK(forward(m, &g, masked ? spec : NULL, packed, hidden, H, logits, V));
        const float *ref_h = family_golden_f32(&g, masked ? "hidden_masked" : "hidden", nh);
        double eh = family_golden_err(hidden, ref_h, &g, H, packed);
        CHECK(eh <= tolerance, "%s %s: hidden rel err %.3g", c->name, what, eh);
        if (!packed)
            CHECK(family_golden_padding_zero(hidden, &g, H), "%s %s: padding rows", c->name, what);
        printf("%-10s %-6s hidden %.2e", c->name, what, eh);
        if (logits) {
            const float *ref_l = family_golden_f32(&g, masked ? "logits_masked" : "logits", nl);
            double el = family_golden_err(logits, ref_l, &g, V, false);
            CHECK(el <= tolerance, "%s %s: logits rel err %.3g", c->name, what, el);
            CHECK(family_golden_padding_zero(logits, &g, V), "%s %s: logits padding rows", c->name,
                  what);
            printf(" logits %.2e", el);
        }
        printf("\n");
    }
    if (c->decoder) check_last_logits(m, &g, family_golden_f32(&g, "logits", nl), V, c->name);
    check_pooled(m, &g, family_golden_f32(&g, "hidden", nh), H, c->decoder, c->name);
    stof_mask_spec_destroy(spec);
    free(hidden);
    free(logits);
    family_golden_close(&g);
    stof_model_destroy(m);
}

/* The llama3 frequencies of the llama case, against HF's rotary_emb.inv_freq. */
static void check_llama3_freqs(void)
{
    family_golden g;
    family_golden_open("llama", &g);
    const float *ref = family_golden_f32(&g, "inv_freq", 4);
    float got[4];
    cpu_rope_freqs(10000.0f, 8, 2, 8.0f, 1.0f, 4.0f, 16, got);
    for (int i = 0; i < 4; i++)
        CHECK(fabs(got[i] - ref[i]) <= 1e-6 * fabs(ref[i]), "inv_freq[%d] %.9g vs HF %.9g", i,
              got[i], ref[i]);
    family_golden_close(&g);
}

/* ---- named errors on altered copies of the gpt2 case */

static char tmp_dir[256];

static void write_text(const char *path, const char *text)
{
    FILE *f = fopen(path, "wb");
    if (!f || fputs(text, f) < 0) exit(1);
    fclose(f);
}

/* tmp_dir holding the gpt2 weights (a link) and config text. */
static void gpt2_variant(const char *config)
{
    char path[512], target[1024];
    snprintf(path, sizeof path, "%s/config.json", tmp_dir);
    write_text(path, config);
    snprintf(path, sizeof path, "%s/model.safetensors", tmp_dir);
    snprintf(target, sizeof target, "%s/gpt2/model.safetensors", data_dir);
    unlink(path);
    if (symlink(target, path) != 0) exit(1);
}

static void check_errors(stof_ctx *ctx)
{
    snprintf(tmp_dir, sizeof tmp_dir, "/tmp/stof_family_%d", (int)getpid());
    mkdir(tmp_dir, 0700);
    stof_model *m = NULL;
    /* Configs beside the gpt2 weights: each load fails with a message naming the problem. */
    const char *base = "{\"model_type\": \"gpt2\", \"n_embd\": 64, \"n_head\": 4, "
                       "\"vocab_size\": 512, \"n_positions\": 32, ";
    static const struct {
        const char *tail; /* after base; NULL: the config is "{model_type t5}" */
        stof_status status;
        const char *needle;
    } variants[] = {
        {NULL, STOF_ERR_UNSUPPORTED, "model_type \"t5\" is not supported"},
        {"\"n_layer\": 3}", STOF_ERR_FORMAT, "tensor \"transformer.h.2.ln_1.weight\" is missing"},
        {"\"n_layer\": 2, \"n_inner\": 200}", STOF_ERR_FORMAT,
         "\"transformer.h.0.mlp.c_fc.weight\" has shape [64, 256], expected [64, 200]"},
        {"\"n_layer\": 2, \"activation_function\": \"mish\"}", STOF_ERR_UNSUPPORTED,
         "activation_function \"mish\" is not supported"},
        {"\"n_layer\": \"two\"}", STOF_ERR_FORMAT, "\"n_layer\" must be an integer"},
    };
    for (size_t i = 0; i < sizeof variants / sizeof variants[0]; i++) {
        char cfg[512];
        if (variants[i].tail)
            snprintf(cfg, sizeof cfg, "%s%s", base, variants[i].tail);
        else
            snprintf(cfg, sizeof cfg, "{\"model_type\": \"t5\", \"d_model\": 64}");
        gpt2_variant(cfg);
        CHECK_FAIL(stof_model_load(ctx, tmp_dir, NULL, &m), variants[i].status, variants[i].needle);
    }
    /* Sizes no machine holds fail on the first shape, before any allocation. */
    gpt2_variant("{\"model_type\": \"gpt2\", \"n_embd\": 65536, \"n_head\": 4, \"n_layer\": 1000, "
                 "\"vocab_size\": 16777216, \"n_positions\": 32}");
    CHECK_FAIL(stof_model_load(ctx, tmp_dir, NULL, &m), STOF_ERR_FORMAT,
               "\"transformer.wte.weight\" has shape [512, 64], expected [16777216, 65536]");
    CHECK(m == NULL, "failed loads leave no model");
    char path[512];
    snprintf(path, sizeof path, "%s/config.json", tmp_dir);
    unlink(path);
    snprintf(path, sizeof path, "%s/model.safetensors", tmp_dir);
    unlink(path);
    rmdir(tmp_dir);

    /* An encoder has no logits; a decoder has no token types. */
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/modernbert", data_dir);
    CHECK_OK(stof_model_load(ctx, dir, NULL, &m));
    int32_t ids[4] = {1, 2, 3, 4};
    float out[512];
    int64_t sh_ids[2] = {1, 4}, sh_log[2] = {1, 512};
    stof_tensor t_ids = stof_tensor_make(ids, STOF_I32, STOF_MEM_HOST, 2, sh_ids);
    stof_tensor t_log = stof_tensor_make(out, STOF_F32, STOF_MEM_HOST, 2, sh_log);
    stof_forward_params p = stof_forward_default_params();
    p.logits = &t_log;
    CHECK_FAIL(stof_model_forward(m, &p, &t_ids, NULL, NULL, NULL, NULL), STOF_ERR_UNSUPPORTED,
               "without an LM head");
    stof_model_destroy(m);
    snprintf(dir, sizeof dir, "%s/gpt2", data_dir);
    CHECK_OK(stof_model_load(ctx, dir, NULL, &m));
    CHECK_FAIL(stof_model_forward(m, NULL, &t_ids, NULL, &t_ids, NULL, NULL),
               STOF_ERR_INVALID_ARG, "has no token type embeddings");
    int64_t sh_bad[2] = {1, 100};
    stof_tensor t_bad = stof_tensor_make(out, STOF_F32, STOF_MEM_HOST, 2, sh_bad);
    p.logits = &t_bad;
    CHECK_FAIL(stof_model_forward(m, &p, &t_ids, NULL, NULL, NULL, NULL), STOF_ERR_SHAPE,
               "[B, vocab]");
    stof_model_destroy(m);
}

int main(void)
{
    stof_ctx *ctx = cpu_ctx();
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        check_case(ctx, &cases[i]);
    check_llama3_freqs();
    check_errors(ctx);
    stof_ctx_destroy(ctx);
    return test_finish("test_model_family");
}
