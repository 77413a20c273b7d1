/*
 * test_engine_gpu.c — the GPU executor against the CPU executor (exec_cpu.c,
 * fp32, the oracle) for every family on random-weight checkpoints this test
 * writes: GPT-2 (Conv1D weights, tied head, a vocabulary that is no multiple
 * of 8), LLaMA (RMSNorm, SwiGLU, RoPE with llama3 scaling), Qwen2 (q/k/v
 * biases), Mistral (a sliding window shorter than the batch), ModernBERT
 * (GeGLU, global and local layers with their own RoPE thetas, no first
 * attention norm) and a GQA LLaMA. Padded batches with ragged lengths, f16
 * and bf16, hidden states, pooled embeddings and logits (last token and every
 * token), stof mask specs intersected with the family's mask (windows, and
 * global tokens and random blocks, which only a band expresses under causal
 * and local layers), each case run three times (kernel by kernel, graph
 * capture, graph replay) with outputs poisoned before every run.
 *
 * The oracle is the CPU reference (STOF_CPU_REFERENCE=1), which intersects a
 * spec with a layer's kind element by element; the CPU fast path, which
 * compiles the same banded specs the GPU does, is checked against it too.
 *
 * Tolerance: ||gpu - cpu|| / ||cpu|| under 1e-2 in f16 and 3e-2 in bf16 (a
 * few layers of 16-bit rounding of random weights; the BERT tests hold the
 * same bounds).
 */
#include "ckpt_writer.h"
#include "core/core.h"
#include "testlib.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cuda_runtime_api.h>

typedef enum fam { F_GPT2, F_LLAMA, F_QWEN2, F_MISTRAL, F_MODERNBERT, F_LLAMA_GQA } fam;

typedef struct tiny {
    const char *name;
    fam f;
    int hidden, heads, kv_heads, inter, layers, vocab, positions;
} tiny;

static const tiny models[] = {
    {"gpt2", F_GPT2, 64, 2, 2, 256, 2, 101, 128},
    {"llama", F_LLAMA, 64, 2, 2, 96, 2, 96, 256},
    {"qwen2", F_QWEN2, 64, 2, 2, 96, 2, 96, 256},
    {"mistral", F_MISTRAL, 64, 2, 2, 96, 2, 96, 256},
    {"modernbert", F_MODERNBERT, 64, 2, 2, 64, 3, 96, 512},
    {"llama_gqa", F_LLAMA_GQA, 128, 4, 1, 96, 2, 96, 256},
};

static char tmp_root[512];

static bool decoder(fam f)
{
    return f != F_MODERNBERT;
}

static void add_lin(ckpt *ck, test_rng *r, const char *name, int out, int in, bool bias)
{
    char n[192];
    snprintf(n, sizeof n, "%s.weight", name);
    ckpt_add(ck, r, n, out, in, 0.0f, 1.0f / sqrtf((float)in));
    if (!bias) return;
    snprintf(n, sizeof n, "%s.bias", name);
    ckpt_add(ck, r, n, out, 0, 0.0f, 0.05f);
}

/* GPT-2's Conv1D: weight [in, out], bias [out]. */
static void add_conv1d(ckpt *ck, test_rng *r, const char *name, int in, int out)
{
    char n[192];
    snprintf(n, sizeof n, "%s.weight", name);
    ckpt_add(ck, r, n, in, out, 0.0f, 1.0f / sqrtf((float)in));
    snprintf(n, sizeof n, "%s.bias", name);
    ckpt_add(ck, r, n, out, 0, 0.0f, 0.05f);
}

static void add_norm(ckpt *ck, test_rng *r, const char *name, int h, bool bias)
{
    char n[192];
    snprintf(n, sizeof n, "%s.weight", name);
    ckpt_add(ck, r, n, h, 0, 1.0f, 0.1f);
    if (!bias) return;
    snprintf(n, sizeof n, "%s.bias", name);
    ckpt_add(ck, r, n, h, 0, 0.0f, 0.05f);
}

static void gpt2_weights(const tiny *t, test_rng *r, ckpt *ck)
{
    int H = t->hidden;
    ckpt_add(ck, r, "wte.weight", t->vocab, H, 0.0f, 0.5f);
    ckpt_add(ck, r, "wpe.weight", t->positions, H, 0.0f, 0.2f);
    for (int l = 0; l < t->layers; l++) {
        char b[128];
        snprintf(b, sizeof b, "h.%d.ln_1", l), add_norm(ck, r, b, H, true);
        snprintf(b, sizeof b, "h.%d.ln_2", l), add_norm(ck, r, b, H, true);
        snprintf(b, sizeof b, "h.%d.attn.c_attn", l), add_conv1d(ck, r, b, H, 3 * H);
        snprintf(b, sizeof b, "h.%d.attn.c_proj", l), add_conv1d(ck, r, b, H, H);
        snprintf(b, sizeof b, "h.%d.mlp.c_fc", l), add_conv1d(ck, r, b, H, t->inter);
        snprintf(b, sizeof b, "h.%d.mlp.c_proj", l), add_conv1d(ck, r, b, t->inter, H);
    }
    add_norm(ck, r, "ln_f", H, true);
}

static void llama_weights(const tiny *t, test_rng *r, ckpt *ck)
{
    int H = t->hidden, D = H / t->heads, I = t->inter;
    bool qkv_bias = t->f == F_QWEN2;
    ckpt_add(ck, r, "model.embed_tokens.weight", t->vocab, H, 0.0f, 0.5f);
    for (int l = 0; l < t->layers; l++) {
        char b[128];
        snprintf(b, sizeof b, "model.layers.%d.input_layernorm", l), add_norm(ck, r, b, H, false);
        snprintf(b, sizeof b, "model.layers.%d.post_attention_layernorm", l),
            add_norm(ck, r, b, H, false);
        snprintf(b, sizeof b, "model.layers.%d.self_attn.q_proj", l),
            add_lin(ck, r, b, t->heads * D, H, qkv_bias);
        snprintf(b, sizeof b, "model.layers.%d.self_attn.k_proj", l),
            add_lin(ck, r, b, t->kv_heads * D, H, qkv_bias);
        snprintf(b, sizeof b, "model.layers.%d.self_attn.v_proj", l),
            add_lin(ck, r, b, t->kv_heads * D, H, qkv_bias);
        snprintf(b, sizeof b, "model.layers.%d.self_attn.o_proj", l),
            add_lin(ck, r, b, H, t->heads * D, false);
        snprintf(b, sizeof b, "model.layers.%d.mlp.gate_proj", l), add_lin(ck, r, b, I, H, false);
        snprintf(b, sizeof b, "model.layers.%d.mlp.up_proj", l), add_lin(ck, r, b, I, H, false);
        snprintf(b, sizeof b, "model.layers.%d.mlp.down_proj", l), add_lin(ck, r, b, H, I, false);
    }
    add_norm(ck, r, "model.norm", H, false);
    ckpt_add(ck, r, "lm_head.weight", t->vocab, H, 0.0f, 1.0f / sqrtf((float)H));
}

static void modernbert_weights(const tiny *t, test_rng *r, ckpt *ck)
{
    int H = t->hidden, I = t->inter;
    ckpt_add(ck, r, "model.embeddings.tok_embeddings.weight", t->vocab, H, 0.0f, 0.5f);
    add_norm(ck, r, "model.embeddings.norm", H, false);
    for (int l = 0; l < t->layers; l++) {
        char b[128];
        if (l > 0) snprintf(b, sizeof b, "model.layers.%d.attn_norm", l), add_norm(ck, r, b, H, false);
        snprintf(b, sizeof b, "model.layers.%d.mlp_norm", l), add_norm(ck, r, b, H, false);
        snprintf(b, sizeof b, "model.layers.%d.attn.Wqkv", l), add_lin(ck, r, b, 3 * H, H, false);
        snprintf(b, sizeof b, "model.layers.%d.attn.Wo", l), add_lin(ck, r, b, H, H, false);
        snprintf(b, sizeof b, "model.layers.%d.mlp.Wi", l), add_lin(ck, r, b, 2 * I, H, false);
        snprintf(b, sizeof b, "model.layers.%d.mlp.Wo", l), add_lin(ck, r, b, H, I, false);
    }
    add_norm(ck, r, "model.final_norm", H, false);
}

static void write_config(const tiny *t, const char *path)
{
    char text[2048];
    switch (t->f) {
    case F_GPT2:
        snprintf(text, sizeof text,
                 "{\"model_type\": \"gpt2\", \"n_embd\": %d, \"n_layer\": %d, \"n_head\": %d,"
                 " \"vocab_size\": %d, \"n_positions\": %d, \"n_inner\": %d,"
                 " \"activation_function\": \"gelu_new\", \"layer_norm_epsilon\": 1e-5}\n",
                 t->hidden, t->layers, t->heads, t->vocab, t->positions, t->inter);
        break;
    case F_MODERNBERT:
        snprintf(text, sizeof text,
                 "{\"model_type\": \"modernbert\", \"hidden_size\": %d, \"num_hidden_layers\": %d,"
                 " \"num_attention_heads\": %d, \"intermediate_size\": %d, \"vocab_size\": %d,"
                 " \"max_position_embeddings\": %d, \"norm_eps\": 1e-5, \"norm_bias\": false,"
                 " \"attention_bias\": false, \"mlp_bias\": false, \"hidden_activation\": \"gelu\","
                 " \"global_attn_every_n_layers\": 3, \"local_attention\": 16,"
                 " \"global_rope_theta\": 160000.0, \"local_rope_theta\": 10000.0,"
                 " \"pad_token_id\": 0}\n",
                 t->hidden, t->layers, t->heads, t->inter, t->vocab, t->positions);
        break;
    default: {
        const char *type = t->f == F_QWEN2 ? "qwen2" : t->f == F_MISTRAL ? "mistral" : "llama";
        const char *extra = t->f == F_MISTRAL ? ", \"sliding_window\": 12"
                            : t->f == F_LLAMA
                                ? ", \"rope_scaling\": {\"rope_type\": \"llama3\", \"factor\": 8.0,"
                                  " \"low_freq_factor\": 1.0, \"high_freq_factor\": 4.0,"
                                  " \"original_max_position_embeddings\": 64}"
                                : "";
        snprintf(text, sizeof text,
                 "{\"model_type\": \"%s\", \"hidden_size\": %d, \"num_hidden_layers\": %d,"
                 " \"num_attention_heads\": %d, \"num_key_value_heads\": %d,"
                 " \"intermediate_size\": %d, \"vocab_size\": %d, \"max_position_embeddings\": %d,"
                 " \"rms_norm_eps\": 1e-6, \"rope_theta\": 10000.0, \"hidden_act\": \"silu\","
                 " \"tie_word_embeddings\": false%s}\n",
                 type, t->hidden, t->layers, t->heads, t->kv_heads, t->inter, t->vocab,
                 t->positions, extra);
    }
    }
    ckpt_write_text(path, text);
}

static void write_model(const tiny *t, test_rng *r, char *dir, size_t cap)
{
    snprintf(dir, cap, "%s/%s", tmp_root, t->name);
    ckpt_make_dir(dir);
    char path[1024];
    snprintf(path, sizeof path, "%s/config.json", dir);
    write_config(t, path);
    ckpt ck;
    memset(&ck, 0, sizeof ck);
    if (t->f == F_GPT2)
        gpt2_weights(t, r, &ck);
    else if (t->f == F_MODERNBERT)
        modernbert_weights(t, r, &ck);
    else
        llama_weights(t, r, &ck);
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    ckpt_write_safetensors(path, &ck, "F32");
    ckpt_free(&ck);
}

/* ---------------------------------------------------------------- comparison */

typedef struct outputs {
    float *hidden, *pooled, *logits;
} outputs;

/* One forward into host outputs (poisoned first); on a GPU context through
 * device outputs (poisoned too) copied back. */
static stof_status forward(stof_model *m, const tiny *t, int B, int L, const int32_t *ids,
                           const int32_t *lens, const char *spec, bool all_logits, outputs *o,
                           bool on_gpu)
{
    int64_t shape_ids[2] = {B, L}, shape_b[1] = {B};
    int64_t shape_h[3] = {B, L, t->hidden}, shape_p[2] = {B, t->hidden};
    int64_t shape_l3[3] = {B, L, t->vocab}, shape_l2[2] = {B, t->vocab};
    size_t nh = (size_t)B * L * t->hidden, nl = (size_t)B * (all_logits ? L : 1) * t->vocab;
    test_poison_f32(o->hidden, (int64_t)nh);
    test_poison_f32(o->pooled, (int64_t)B * t->hidden);
    test_poison_f32(o->logits, (int64_t)nl);
    stof_tensor tids = stof_tensor_make((void *)ids, STOF_I32, STOF_MEM_HOST, 2, shape_ids);
    stof_tensor tlen = stof_tensor_make((void *)lens, STOF_I32, STOF_MEM_HOST, 1, shape_b);
    size_t np = (size_t)B * t->hidden;
    float *dh = o->hidden, *dp = o->pooled, *dl = o->logits;
    stof_memory mem = on_gpu ? STOF_MEM_DEVICE : STOF_MEM_HOST;
    if (on_gpu) {
        if (cudaMalloc((void **)&dh, nh * 4) != cudaSuccess ||
            cudaMalloc((void **)&dp, np * 4) != cudaSuccess ||
            cudaMalloc((void **)&dl, nl * 4) != cudaSuccess)
            exit(1);
        cudaMemset(dh, 0xff, nh * 4), cudaMemset(dp, 0xff, np * 4), cudaMemset(dl, 0xff, nl * 4);
        cudaDeviceSynchronize();
    }
    stof_tensor th = stof_tensor_make(dh, STOF_F32, mem, 3, shape_h);
    stof_tensor tp = stof_tensor_make(dp, STOF_F32, mem, 2, shape_p);
    stof_tensor tl = all_logits ? stof_tensor_make(dl, STOF_F32, mem, 3, shape_l3)
                                : stof_tensor_make(dl, STOF_F32, mem, 2, shape_l2);
    stof_forward_params fp = stof_forward_default_params();
    stof_mask_spec *ms = NULL;
    if (spec) {
        stof_status st = stof_mask_spec_parse(spec, &ms);
        if (st != STOF_OK) return st;
        fp.mask = ms;
    }
    if (decoder(t->f)) {
        fp.logits = &tl;
        fp.logits_all = all_logits;
    }
    stof_status st = stof_model_forward(m, &fp, &tids, &tlen, NULL, &th, &tp);
    stof_mask_spec_destroy(ms);
    if (on_gpu) {
        if (cudaDeviceSynchronize() != cudaSuccess) exit(1);
        cudaMemcpy(o->hidden, dh, nh * 4, cudaMemcpyDeviceToHost);
        cudaMemcpy(o->pooled, dp, np * 4, cudaMemcpyDeviceToHost);
        cudaMemcpy(o->logits, dl, nl * 4, cudaMemcpyDeviceToHost);
        cudaFree(dh), cudaFree(dp), cudaFree(dl);
    }
    return st;
}

static void expect_close(const char *what, const char *label, const float *got, const float *ref,
                         int64_t n, double tol)
{
    double e = test_rel_err(got, ref, n);
    int64_t bad = 0;
    while (bad < n && !isnan(got[bad]))
        bad++;
    CHECK(isfinite(e) && e <= tol, "%s %s: rel err %.3g > %.3g (first NaN at %lld of %lld)",
          label, what, e, tol, (long long)bad, (long long)n);
}

static void run_model(stof_ctx *cpu, stof_ctx *gpu, const tiny *t, test_rng *r)
{
    char dir[700];
    write_model(t, r, dir, sizeof dir);
    stof_model *mc = NULL;
    CHECK_OK(stof_model_load(cpu, dir, NULL, &mc));
    if (!mc) return;
    const int B = 3, L = 40;
    int32_t lens[3] = {L, 23, 5};
    int32_t *ids = malloc(sizeof(int32_t) * B * L);
    for (int i = 0; i < B * L; i++)
        ids[i] = (int32_t)test_rng_int(r, 1, t->vocab - 1);
    size_t nh = (size_t)B * L * t->hidden, nl = (size_t)B * L * t->vocab;
    outputs ref = {malloc(nh * 4), malloc((size_t)B * t->hidden * 4), malloc(nl * 4)};
    outputs got = {malloc(nh * 4), malloc((size_t)B * t->hidden * 4), malloc(nl * 4)};
    /* every spec within each layer's band: causal families cut a window to window:L:0,
     * ModernBERT cuts to its local window; global and random parts stay sparse inside */
    const char *specs[] = {NULL, "window:6", "causal,window:3:9", "window:8,global:2",
                           "window:4,global:[0,7],random:8x1@3"};
    for (int dt = 0; dt < 2; dt++) {
        stof_model_params mp = stof_model_default_params();
        mp.dtype = dt ? STOF_BF16 : STOF_F16;
        mp.tune_cache_off = 1;
        stof_model *mg = NULL;
        stof_status st = stof_model_load(gpu, dir, &mp, &mg);
        CHECK(st == STOF_OK, "%s: GPU load: %s", t->name, stof_last_error());
        if (!mg) continue;
        double tol = dt ? 3e-2 : 1e-2;
        for (size_t si = 0; si < sizeof specs / sizeof specs[0]; si++)
            for (int all = 0; all < 2; all++) {
                if (all && !decoder(t->f)) continue;
                char label[200];
                snprintf(label, sizeof label, "%s %s mask %s%s", t->name, dt ? "bf16" : "f16",
                         specs[si] ? specs[si] : "(none)", all ? " all-logits" : "");
                setenv("STOF_CPU_REFERENCE", "1", 1);
                CHECK_OK(forward(mc, t, B, L, ids, lens, specs[si], all, &ref, false));
                unsetenv("STOF_CPU_REFERENCE");
                if (dt == 0) { /* the CPU fast path, fp32 too: to rounding */
                    char fast[240];
                    snprintf(fast, sizeof fast, "%s (CPU fast path)", label);
                    CHECK_OK(forward(mc, t, B, L, ids, lens, specs[si], all, &got, false));
                    expect_close("hidden", fast, got.hidden, ref.hidden, (int64_t)nh, 1e-4);
                    if (decoder(t->f))
                        expect_close("logits", fast, got.logits, ref.logits,
                                     (int64_t)B * (all ? L : 1) * t->vocab, 1e-4);
                }
                for (int run = 0; run < 3; run++) {
                    st = forward(mg, t, B, L, ids, lens, specs[si], all, &got, true);
                    CHECK(st == STOF_OK, "%s run %d: %s", label, run, stof_last_error());
                    if (st != STOF_OK) break;
                    expect_close("hidden", label, got.hidden, ref.hidden, (int64_t)nh, tol);
                    expect_close("pooled", label, got.pooled, ref.pooled, (int64_t)B * t->hidden,
                                 tol);
                    if (decoder(t->f))
                        expect_close("logits", label, got.logits, ref.logits,
                                     (int64_t)B * (all ? L : 1) * t->vocab, tol);
                }
            }
        stof_model_destroy(mg);
    }
    stof_model_destroy(mc);
    free(ids);
    free(ref.hidden), free(ref.pooled), free(ref.logits);
    free(got.hidden), free(got.pooled), free(got.logits);
}

int main(void)
{
    test_require_gpu("test_engine_gpu");
    snprintf(tmp_root, sizeof tmp_root, "%s/stof_engine_gpu_%d",
             getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp", (int)getpid());
    ckpt_make_dir(tmp_root);
    stof_ctx_params p = stof_ctx_default_params();
    stof_ctx *cpu = NULL, *gpu = NULL;
    p.device = STOF_DEVICE_CPU;
    CHECK_OK(stof_ctx_create(&p, &cpu));
    p.device = STOF_DEVICE_GPU;
    CHECK_OK(stof_ctx_create(&p, &gpu));
    test_rng r;
    test_rng_init(&r, test_seed());
    const char *only = getenv("STOF_TEST_FAMILY"); /* one model by name, for debugging */
    for (size_t i = 0; cpu && gpu && i < sizeof models / sizeof models[0]; i++)
        if (!only || strcmp(only, models[i].name) == 0) run_model(cpu, gpu, &models[i], &r);
    stof_ctx_destroy(gpu);
    stof_ctx_destroy(cpu);
    return test_finish("test_engine_gpu");
}
