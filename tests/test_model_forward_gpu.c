/*
 * test_model_forward_gpu.c — the GPU encoder forward against the CPU forward
 * (the fp32 reference of test_model_forward_cpu.c) on random-weight BERT
 * models written by this test: a small one (head dim 32, sentence-
 * transformers layout, mean pooling + normalise), a middle one (head dim 64,
 * tanh GELU, CLS pooling) and a BERT-base-sized one (hidden 768, 12 heads,
 * 2 layers) whose larger batches take the fused templates (GEMM + residual +
 * LayerNorm, FFN chain) while small ones take cuBLASLt. Dense, padded (with
 * an empty sequence) and sparse masks, f16 and bf16, ids on the host and on
 * the device, f32 and half hidden outputs, pooled outputs on either side.
 * Outputs are poisoned before every run; padding must come back as zeros.
 * The tiny test folders (head dim 16) must be refused with a clear error.
 * CUDA graphs: each case runs again until its bucket is captured and
 * replayed, then replays with the batch reversed (same bucket, new lengths);
 * every run is checked against the CPU forward.
 */
#include "ckpt_writer.h"
#include "core/core.h"
#include "fuse/fuse.h"
#include "model/encoder.h"
#include "tune/tune.h"
#include "testlib.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <sys/stat.h>

#include <cuda_runtime_api.h>

#ifndef STOF_TEST_DATA_DIR
#error "STOF_TEST_DATA_DIR must name tests/data"
#endif

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

static void *dev_alloc(size_t n)
{
    void *p = NULL;
    if (cudaMalloc(&p, n ? n : 16) != cudaSuccess) {
        fprintf(stderr, "cudaMalloc(%zu) failed\n", n);
        exit(1);
    }
    return p;
}

static void to_dev(void *dst, const void *src, size_t n)
{
    if (cudaMemcpy(dst, src, n, cudaMemcpyHostToDevice) != cudaSuccess) exit(1);
}

static void to_host(void *dst, const void *src, size_t n)
{
    if (cudaMemcpy(dst, src, n, cudaMemcpyDeviceToHost) != cudaSuccess) exit(1);
}

/* ---------------------------------------------------------------- model folders */

typedef struct tiny_desc {
    const char *name;
    int hidden, heads, inter, layers, vocab, positions, types;
    const char *act;
    const char *stored;  /* "F32", "F16" or "BF16" */
    const char *layout;  /* "plain", "st_sub" (0_Transformer), "st_root" */
    const char *pooling; /* "mean" or "cls" */
    bool normalize;
} tiny_desc;

static char tmp_root[512];
static stof_ctx *g_cpu, *g_gpu;

static void ck_linear(ckpt *ck, test_rng *r, const char *base, int out, int in)
{
    char n[192];
    snprintf(n, sizeof n, "%s.weight", base);
    ckpt_add(ck, r, n, out, in, 0.0f, 1.0f / sqrtf((float)in));
    snprintf(n, sizeof n, "%s.bias", base);
    ckpt_add(ck, r, n, out, 0, 0.0f, 0.05f);
}

static void ck_layernorm(ckpt *ck, test_rng *r, const char *base, int h)
{
    char n[192];
    snprintf(n, sizeof n, "%s.LayerNorm.weight", base);
    ckpt_add(ck, r, n, h, 0, 1.0f, 0.1f);
    snprintf(n, sizeof n, "%s.LayerNorm.bias", base);
    ckpt_add(ck, r, n, h, 0, 0.0f, 0.05f);
}

static void random_checkpoint(const tiny_desc *d, test_rng *r, ckpt *ck)
{
    memset(ck, 0, sizeof *ck);
    ckpt_add(ck, r, "embeddings.word_embeddings.weight", d->vocab, d->hidden, 0.0f, 0.5f);
    ckpt_add(ck, r, "embeddings.position_embeddings.weight", d->positions, d->hidden, 0.0f, 0.2f);
    ckpt_add(ck, r, "embeddings.token_type_embeddings.weight", d->types, d->hidden, 0.0f, 0.2f);
    ck_layernorm(ck, r, "embeddings", d->hidden);
    for (int l = 0; l < d->layers; l++) {
        char b[128];
        const char *lin[3] = {"query", "key", "value"};
        for (int i = 0; i < 3; i++) {
            snprintf(b, sizeof b, "encoder.layer.%d.attention.self.%s", l, lin[i]);
            ck_linear(ck, r, b, d->hidden, d->hidden);
        }
        snprintf(b, sizeof b, "encoder.layer.%d.attention.output.dense", l);
        ck_linear(ck, r, b, d->hidden, d->hidden);
        snprintf(b, sizeof b, "encoder.layer.%d.attention.output", l);
        ck_layernorm(ck, r, b, d->hidden);
        snprintf(b, sizeof b, "encoder.layer.%d.intermediate.dense", l);
        ck_linear(ck, r, b, d->inter, d->hidden);
        snprintf(b, sizeof b, "encoder.layer.%d.output.dense", l);
        ck_linear(ck, r, b, d->hidden, d->inter);
        snprintf(b, sizeof b, "encoder.layer.%d.output", l);
        ck_layernorm(ck, r, b, d->hidden);
    }
}

static void write_config(const char *dir, const tiny_desc *d)
{
    char path[1024], text[2048];
    snprintf(path, sizeof path, "%s/config.json", dir);
    snprintf(text, sizeof text,
             "{\"architectures\": [\"BertModel\"], \"model_type\": \"bert\", \"hidden_size\": %d,"
             " \"num_hidden_layers\": %d, \"num_attention_heads\": %d, \"intermediate_size\": %d,"
             " \"hidden_act\": \"%s\", \"layer_norm_eps\": 1e-12, \"vocab_size\": %d,"
             " \"max_position_embeddings\": %d, \"type_vocab_size\": %d, \"pad_token_id\": 0,"
             " \"position_embedding_type\": \"absolute\", \"hidden_dropout_prob\": 0.1,"
             " \"attention_probs_dropout_prob\": 0.1, \"initializer_range\": 0.02}\n",
             d->hidden, d->layers, d->heads, d->inter, d->act, d->vocab, d->positions, d->types);
    ckpt_write_text(path, text);
}

/* Writes the folder of d under tmp_root; out gets the path to load. */
static void write_model(const tiny_desc *d, test_rng *r, char *out, size_t cap)
{
    char root[768], tdir[900], path[1024], text[1024];
    snprintf(root, sizeof root, "%s/%s", tmp_root, d->name);
    ckpt_make_dir(root);
    bool st = strcmp(d->layout, "plain") != 0;
    bool sub = strcmp(d->layout, "st_sub") == 0;
    snprintf(tdir, sizeof tdir, "%s%s", root, sub ? "/0_Transformer" : "");
    ckpt_make_dir(tdir);
    ckpt ck;
    random_checkpoint(d, r, &ck);
    snprintf(path, sizeof path, "%s/model.safetensors", tdir);
    ckpt_write_safetensors(path, &ck, d->stored);
    ckpt_free(&ck);
    write_config(tdir, d);
    if (st) {
        snprintf(path, sizeof path, "%s/modules.json", root);
        snprintf(text, sizeof text,
                 "[{\"idx\": 0, \"name\": \"0\", \"path\": \"%s\", \"type\": "
                 "\"sentence_transformers.models.Transformer\"},"
                 " {\"idx\": 1, \"name\": \"1\", \"path\": \"1_Pooling\", \"type\": "
                 "\"sentence_transformers.models.Pooling\"}%s]\n",
                 sub ? "0_Transformer" : "",
                 d->normalize ? ", {\"idx\": 2, \"name\": \"2\", \"path\": \"2_Normalize\", "
                                "\"type\": \"sentence_transformers.models.Normalize\"}"
                              : "");
        ckpt_write_text(path, text);
        snprintf(path, sizeof path, "%s/1_Pooling", root);
        ckpt_make_dir(path);
        snprintf(path, sizeof path, "%s/1_Pooling/config.json", root);
        bool cls = strcmp(d->pooling, "cls") == 0;
        snprintf(text, sizeof text,
                 "{\"word_embedding_dimension\": %d, \"pooling_mode_cls_token\": %s,"
                 " \"pooling_mode_mean_tokens\": %s, \"pooling_mode_max_tokens\": false,"
                 " \"pooling_mode_mean_sqrt_len_tokens\": false}\n",
                 d->hidden, cls ? "true" : "false", cls ? "false" : "true");
        ckpt_write_text(path, text);
        if (d->normalize) {
            snprintf(path, sizeof path, "%s/2_Normalize", root);
            ckpt_make_dir(path);
        }
    }
    snprintf(out, cap, "%s", root);
}

/* ---------------------------------------------------------------- one comparison */

typedef struct run_case {
    int B, L;
    bool lengths_null; /* every sequence L long */
    bool empty_seq;    /* sequence 1 has length 0 */
    bool types;
    const char *mask; /* spec text, "dense:heads" (per-head dense tensor) or NULL */
} run_case;

typedef struct models {
    stof_model *cpu, *gpu;
    stof_model_info info;
} models;

/* A per-head dense mask: head h sees key j from query i when |i - j| <= 2 + h or j == 0. */
static uint8_t *per_head_dense(int heads, int L)
{
    uint8_t *m = xmalloc((size_t)heads * L * L);
    for (int h = 0; h < heads; h++)
        for (int i = 0; i < L; i++)
            for (int j = 0; j < L; j++)
                m[((size_t)h * L + i) * L + j] = (uint8_t)(abs(i - j) <= 2 + h || j == 0);
    return m;
}

static double rel_err_valid(const float *out, const float *ref, const int32_t *lengths, int B,
                            int L, int H, int64_t *pad_bad)
{
    double num = 0, den = 0;
    *pad_bad = 0;
    for (int b = 0; b < B; b++)
        for (int i = 0; i < L; i++)
            for (int c = 0; c < H; c++) {
                int64_t k = ((int64_t)b * L + i) * H + c;
                if (i >= lengths[b]) {
                    *pad_bad += out[k] != 0.0f;
                    continue;
                }
                double d = (double)out[k] - ref[k];
                num += isnan(out[k]) ? INFINITY : d * d;
                den += (double)ref[k] * ref[k];
            }
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

/* n f16 or bf16 elements (dtype) as f32. */
static void half_to_f32(const uint16_t *h, int64_t n, stof_dtype dtype, float *out)
{
    for (int64_t i = 0; i < n; i++)
        out[i] = dtype == STOF_BF16 ? stof_bf16_to_f32(h[i]) : stof_f16_to_f32(h[i]);
}

/* One GPU forward (host ids, device half hidden over poison, host pooled)
 * against a reference; with on_device, ids, types and lengths go to device
 * memory first (the scan then packs them on the device). */
static void check_forward_against(const models *mm, const stof_forward_params *fp, int B, int L,
                                  const int32_t *ids, const int32_t *types, const int32_t *lengths,
                                  bool lengths_null, bool on_device, const float *ref_h,
                                  const float *ref_p, double tol, const char *what)
{
    const stof_model_info *info = &mm->info;
    int H = info->hidden;
    int64_t nh = (int64_t)B * L * H, np = (int64_t)B * H;
    int64_t s_ids[2] = {B, L}, s_len[1] = {B}, s_hid[3] = {B, L, H}, s_pool[2] = {B, H};
    stof_tensor t_ids = stof_tensor_make((void *)ids, STOF_I32, STOF_MEM_HOST, 2, s_ids);
    stof_tensor t_types = stof_tensor_make((void *)types, STOF_I32, STOF_MEM_HOST, 2, s_ids);
    stof_tensor t_len = stof_tensor_make((void *)lengths, STOF_I32, STOF_MEM_HOST, 1, s_len);
    size_t es = stof_dtype_size(info->dtype);
    void *d_hid = dev_alloc((size_t)nh * es);
    float *pool = xmalloc(sizeof(float) * (size_t)np), *h = xmalloc(sizeof(float) * (size_t)nh);
    uint16_t *half = xmalloc(2 * (size_t)nh);
    cudaMemset(d_hid, 0xff, (size_t)nh * es);
    test_poison_f32(pool, np);
    stof_tensor hid = stof_tensor_make(d_hid, info->dtype, STOF_MEM_DEVICE, 3, s_hid);
    stof_tensor pt = stof_tensor_make(pool, STOF_F32, STOF_MEM_HOST, 2, s_pool);
    int32_t *d_in = NULL;
    if (on_device) {
        int64_t n = (int64_t)B * L;
        d_in = dev_alloc(sizeof(int32_t) * (size_t)(2 * n + B));
        to_dev(d_in, ids, sizeof(int32_t) * (size_t)n);
        if (types) to_dev(d_in + n, types, sizeof(int32_t) * (size_t)n);
        to_dev(d_in + 2 * n, lengths, sizeof(int32_t) * (size_t)B);
        t_ids = stof_tensor_make(d_in, STOF_I32, STOF_MEM_DEVICE, 2, s_ids);
        t_types = stof_tensor_make(d_in + n, STOF_I32, STOF_MEM_DEVICE, 2, s_ids);
        t_len = stof_tensor_make(d_in + 2 * n, STOF_I32, STOF_MEM_DEVICE, 1, s_len);
    }
    CHECK_OK(stof_model_forward(mm->gpu, fp, &t_ids, lengths_null ? NULL : &t_len,
                                types ? &t_types : NULL, &hid, &pt));
    CHECK_OK(stof_ctx_synchronize(g_gpu));
    if (d_in) cudaFree(d_in);
    to_host(half, d_hid, (size_t)nh * 2);
    half_to_f32(half, nh, info->dtype, h);
    int64_t pad_bad = 0;
    double eh = rel_err_valid(h, ref_h, lengths, B, L, H, &pad_bad);
    double ep = test_rel_err(pool, ref_p, np);
    CHECK(eh < tol && ep < tol && pad_bad == 0,
          "%s: hidden rel err %.3e, pooled %.3e (tolerance %.0e), %lld padding elements not "
          "zero",
          what, eh, ep, tol, (long long)pad_bad);
    cudaFree(d_hid);
    free(pool);
    free(h);
    free(half);
}

/* Graph capture and replay of a case (the last replay from device inputs),
 * then a replay with the batch reversed: same token count (same bucket), every
 * sequence at a new place, from device inputs. The reversed reference is the
 * reversed CPU output when the mask does not depend on the batch index (random
 * parts are seeded per entry). */
static void graph_runs(const models *mm, const run_case *rc, const stof_forward_params *fp,
                       const int32_t *ids, const int32_t *types, const int32_t *lengths,
                       const float *ref_h, const float *ref_p, double tol, const char *label)
{
    int B = rc->B, L = rc->L, H = mm->info.hidden;
    int32_t *eff = xmalloc(sizeof(int32_t) * (size_t)B);
    for (int b = 0; b < B; b++)
        eff[b] = rc->lengths_null ? L : lengths[b];
    const int32_t *tp = rc->types ? types : NULL;
    char what[160];
    int before = enc_gpu_graphs_captured(mm->gpu->gpu);
    int64_t ahead = enc_gpu_launched_ahead(mm->gpu->gpu);
    for (int k = 0; k < 6; k++) {
        snprintf(what, sizeof what, "%s B=%d L=%d %s graph run %d%s", label, B, L,
                 rc->mask ? rc->mask : "-", k, k >= 3 ? ", device inputs" : "");
        check_forward_against(mm, fp, B, L, ids, tp, eff, rc->lengths_null, k >= 3, ref_h, ref_p,
                              tol, what);
    }
    bool textual = !rc->mask || strcmp(rc->mask, "dense:heads") != 0;
    /* The first two runs of this case were kernel by kernel (eager); these
     * see the bucket again: the first of them captures it. A small batch of
     * device inputs has a bucket of its own (B * L rows): the first device run
     * goes kernel by kernel, the second captures, the third is launched ahead
     * of the scan's read back. */
    CHECK(!textual || enc_gpu_graphs_captured(mm->gpu->gpu) >= (before > 0 ? before : 1),
          "%s: no CUDA graph was captured", what);
    /* When the host runs' bucket is B * L rows too, its graph serves all three. */
    int64_t T = 0, BL = (int64_t)B * L;
    for (int b = 0; b < B; b++)
        T += eff[b];
    int64_t host_rows = tune_token_bucket(T) < BL ? tune_token_bucket(T) : BL;
    int want = !textual || BL > ENC_FIXED_ROWS ? 0 : host_rows == BL ? 3 : 1;
    CHECK(enc_gpu_launched_ahead(mm->gpu->gpu) - ahead == want,
          "%s: %lld forwards launched ahead of the read back (want %d)", what,
          (long long)(enc_gpu_launched_ahead(mm->gpu->gpu) - ahead), want);
    if (B > 1 && (!rc->mask || !strstr(rc->mask, "random"))) {
        int64_t row = (int64_t)L * H;
        int32_t *rids = xmalloc(sizeof(int32_t) * (size_t)B * L),
                *rtypes = xmalloc(sizeof(int32_t) * (size_t)B * L),
                *rlen = xmalloc(sizeof(int32_t) * (size_t)B);
        float *rh = xmalloc(sizeof(float) * (size_t)B * row),
              *rp = xmalloc(sizeof(float) * (size_t)B * H);
        for (int b = 0; b < B; b++) {
            int s = B - 1 - b;
            memcpy(rids + (int64_t)b * L, ids + (int64_t)s * L, sizeof(int32_t) * (size_t)L);
            memcpy(rtypes + (int64_t)b * L, types + (int64_t)s * L, sizeof(int32_t) * (size_t)L);
            rlen[b] = eff[s];
            memcpy(rh + b * row, ref_h + s * row, sizeof(float) * (size_t)row);
            memcpy(rp + (int64_t)b * H, ref_p + (int64_t)s * H, sizeof(float) * (size_t)H);
        }
        snprintf(what, sizeof what, "%s B=%d L=%d %s graph replay, batch reversed, device inputs",
                 label, B, L, rc->mask ? rc->mask : "-");
        check_forward_against(mm, fp, B, L, rids, tp ? rtypes : NULL, rlen, rc->lengths_null, true,
                              rh, rp, tol, what);
        free(rids);
        free(rtypes);
        free(rlen);
        free(rh);
        free(rp);
    }
    free(eff);
}

static int eff_len_of(const run_case *rc, const int32_t *lengths, int b, int L)
{
    return rc->lengths_null ? L : lengths[b];
}

static void compare_case(const models *mm, const run_case *rc, test_rng *r, double tol,
                         const char *label)
{
    const stof_model_info *info = &mm->info;
    int B = rc->B, L = rc->L, H = info->hidden;
    int64_t nid = (int64_t)B * L, nh = nid * H, np = (int64_t)B * H;
    int32_t *ids = xmalloc(sizeof(int32_t) * (size_t)nid),
            *types = xmalloc(sizeof(int32_t) * (size_t)nid);
    int32_t *lengths = xmalloc(sizeof(int32_t) * (size_t)B);
    for (int b = 0; b < B; b++) {
        lengths[b] = rc->lengths_null ? L : (int32_t)test_rng_int(r, L / 2 > 0 ? L / 2 : 1, L);
        if (rc->empty_seq && b == 1) lengths[b] = 0;
        for (int i = 0; i < L; i++) {
            bool real = i < lengths[b];
            ids[b * L + i] = real ? (int32_t)test_rng_int(r, 0, info->vocab - 1) : -77;
            types[b * L + i] = real ? (int32_t)test_rng_int(r, 0, info->type_vocab - 1) : 99;
        }
    }
    stof_mask_spec *spec = NULL;
    uint8_t *dense = NULL;
    if (rc->mask && strcmp(rc->mask, "dense:heads") == 0) {
        dense = per_head_dense(info->heads, L);
        int64_t sh[4] = {1, info->heads, L, L};
        stof_tensor t = stof_tensor_make(dense, STOF_U8, STOF_MEM_HOST, 4, sh);
        CHECK_OK(stof_mask_spec_create(&spec));
        CHECK_OK(stof_mask_spec_add_dense(spec, &t));
    } else if (rc->mask) {
        CHECK_OK(stof_mask_spec_parse(rc->mask, &spec));
    }
    stof_forward_params fp = stof_forward_default_params();
    fp.mask = spec;
    fp.eager = 1; /* the graph runs come after the two kernel-by-kernel ones */
    int64_t s_ids[2] = {B, L}, s_len[1] = {B}, s_hid[3] = {B, L, H}, s_pool[2] = {B, H};
    stof_tensor t_ids = stof_tensor_make(ids, STOF_I32, STOF_MEM_HOST, 2, s_ids);
    stof_tensor t_types = stof_tensor_make(types, STOF_I32, STOF_MEM_HOST, 2, s_ids);
    stof_tensor t_len = stof_tensor_make(lengths, STOF_I32, STOF_MEM_HOST, 1, s_len);
    const stof_tensor *lp = rc->lengths_null ? NULL : &t_len;
    const stof_tensor *tp = rc->types ? &t_types : NULL;

    /* CPU reference. */
    float *ref_h = xmalloc(sizeof(float) * (size_t)nh),
          *ref_p = xmalloc(sizeof(float) * (size_t)np);
    stof_tensor c_hid = stof_tensor_make(ref_h, STOF_F32, STOF_MEM_HOST, 3, s_hid);
    stof_tensor c_pool = stof_tensor_make(ref_p, STOF_F32, STOF_MEM_HOST, 2, s_pool);
    CHECK_OK(stof_model_forward(mm->cpu, &fp, &t_ids, lp, tp, &c_hid, &c_pool));

    /* GPU, host ids: half hidden (device), pooled to the host. */
    size_t es = stof_dtype_size(info->dtype);
    void *d_hid = dev_alloc((size_t)nh * es), *d_hid32 = dev_alloc((size_t)nh * 4);
    void *d_pool = dev_alloc((size_t)np * 4);
    float *g_pool = xmalloc(sizeof(float) * (size_t)np),
          *g_pool2 = xmalloc(sizeof(float) * (size_t)np);
    cudaMemset(d_hid, 0xff, (size_t)nh * es); /* NaN in f16 and bf16 */
    cudaMemset(d_hid32, 0xff, (size_t)nh * 4);
    cudaMemset(d_pool, 0xff, (size_t)np * 4);
    test_poison_f32(g_pool, np);
    stof_tensor g_hid_t = stof_tensor_make(d_hid, info->dtype, STOF_MEM_DEVICE, 3, s_hid);
    stof_tensor g_pool_t = stof_tensor_make(g_pool, STOF_F32, STOF_MEM_HOST, 2, s_pool);
    CHECK_OK(stof_model_forward(mm->gpu, &fp, &t_ids, lp, tp, &g_hid_t, &g_pool_t));
    CHECK_OK(stof_ctx_synchronize(g_gpu));

    uint16_t *half = xmalloc(2 * (size_t)nh);
    float *g_h = xmalloc(sizeof(float) * (size_t)nh);
    to_host(half, d_hid, (size_t)nh * 2);
    half_to_f32(half, nh, info->dtype, g_h);
    int32_t *eff_len = xmalloc(sizeof(int32_t) * (size_t)B);
    for (int b = 0; b < B; b++)
        eff_len[b] = rc->lengths_null ? L : lengths[b];
    int64_t pad_bad = 0;
    double eh = rel_err_valid(g_h, ref_h, eff_len, B, L, H, &pad_bad);
    double ep = test_rel_err(g_pool, ref_p, np);
    printf("  %-8s %-5s B=%-2d L=%-4d %-26s hidden rel err %.2e, pooled %.2e\n", label,
           stof_dtype_name(info->dtype), B, L,
           rc->mask ? rc->mask : (rc->lengths_null ? "dense" : "padded"), eh, ep);
    CHECK(eh < tol, "%s: hidden rel err %.3e (tolerance %.0e)", label, eh, tol);
    CHECK(ep < tol, "%s: pooled rel err %.3e (tolerance %.0e)", label, ep, tol);
    CHECK(pad_bad == 0, "%s: %lld padding elements are not zero", label, (long long)pad_bad);

    /* GPU, device inputs: I64 ids, I32 types, and the lengths as a device 0/1
     * attention mask (I64 or U8 by case, garbage ids at padding); f32 hidden,
     * pooled in device memory; same values. */
    int64_t *ids64 = xmalloc(sizeof(int64_t) * (size_t)nid);
    bool mask64 = (B + L) % 2 == 0;
    size_t mask_es = mask64 ? 8 : 1;
    unsigned char *am = xmalloc(mask_es * (size_t)nid);
    for (int b = 0; b < B; b++)
        for (int i = 0; i < L; i++) {
            int64_t k = (int64_t)b * L + i;
            bool real = i < eff_len_of(rc, lengths, b, L);
            ids64[k] = real ? ids[k] : -((int64_t)1 << 40);
            if (mask64)
                ((int64_t *)am)[k] = real;
            else
                am[k] = real;
        }
    int64_t *d_ids = dev_alloc(sizeof(int64_t) * (size_t)nid);
    int32_t *d_types = dev_alloc(sizeof(int32_t) * (size_t)nid);
    void *d_am = dev_alloc(mask_es * (size_t)nid);
    to_dev(d_ids, ids64, sizeof(int64_t) * (size_t)nid);
    to_dev(d_types, types, sizeof(int32_t) * (size_t)nid);
    to_dev(d_am, am, mask_es * (size_t)nid);
    stof_tensor dt_ids = stof_tensor_make(d_ids, STOF_I64, STOF_MEM_DEVICE, 2, s_ids);
    stof_tensor dt_types = stof_tensor_make(d_types, STOF_I32, STOF_MEM_DEVICE, 2, s_ids);
    stof_tensor dt_am = stof_tensor_make(d_am, mask64 ? STOF_I64 : STOF_U8, STOF_MEM_DEVICE, 2, s_ids);
    stof_tensor g_hid32 = stof_tensor_make(d_hid32, STOF_F32, STOF_MEM_DEVICE, 3, s_hid);
    stof_tensor g_pool_d = stof_tensor_make(d_pool, STOF_F32, STOF_MEM_DEVICE, 2, s_pool);
    stof_forward_params fp_dev = fp;
    fp_dev.attention_mask = &dt_am;
    CHECK_OK(stof_model_forward(mm->gpu, &fp_dev, &dt_ids, NULL, rc->types ? &dt_types : NULL,
                                &g_hid32, &g_pool_d));
    CHECK_OK(stof_ctx_synchronize(g_gpu)); /* the ctx's stream does not sync with cudaMemcpy */
    float *g_h32 = xmalloc(sizeof(float) * (size_t)nh);
    to_host(g_h32, d_hid32, sizeof(float) * (size_t)nh);
    to_host(g_pool2, d_pool, sizeof(float) * (size_t)np);
    double e32 = test_rel_err(g_h32, g_h, nh);
    double ep2 = test_rel_err(g_pool2, g_pool, np);
    CHECK(e32 < 1e-6, "%s: f32 hidden from device ids differs from the half one (%.3e)", label,
          e32);
    CHECK(ep2 < 1e-6, "%s: device pooled from device ids differs from the host one (%.3e)", label,
          ep2);

    fp.eager = 0;
    graph_runs(mm, rc, &fp, ids, types, lengths, ref_h, ref_p, tol, label);

    cudaFree(d_ids);
    cudaFree(d_types);
    cudaFree(d_am);
    cudaFree(d_hid);
    cudaFree(d_hid32);
    cudaFree(d_pool);
    free(ids64);
    free(am);
    free(g_h32);
    free(eff_len);
    free(half);
    free(g_h);
    free(g_pool);
    free(g_pool2);
    free(ref_h);
    free(ref_p);
    free(ids);
    free(types);
    free(lengths);
    free(dense);
    stof_mask_spec_destroy(spec);
}

/* ---------------------------------------------------------------- drivers */

static void load_pair(const char *dir, stof_dtype dtype, models *mm)
{
    stof_model_params p = stof_model_default_params();
    p.dtype = dtype;
    p.tune_cache_off = 1; /* the rules' plan, whatever the user's cache holds */
    mm->cpu = mm->gpu = NULL;
    CHECK_OK(stof_model_load(g_cpu, dir, NULL, &mm->cpu));
    CHECK_OK(stof_model_load(g_gpu, dir, &p, &mm->gpu));
    if (!mm->cpu || !mm->gpu) {
        fprintf(stderr, "cannot load %s\n", dir);
        exit(1);
    }
    CHECK_OK(stof_model_get_info(mm->gpu, &mm->info));
    stof_model_info ci;
    CHECK_OK(stof_model_get_info(mm->cpu, &ci));
    CHECK(mm->info.dtype == dtype && ci.dtype == STOF_F32 && ci.pooling == mm->info.pooling &&
              ci.normalize == mm->info.normalize,
          "%s: info differs between the CPU and GPU loads", dir);
}

static void free_pair(models *mm)
{
    stof_model_destroy(mm->cpu);
    stof_model_destroy(mm->gpu);
}

static void run_model(const tiny_desc *d, const run_case *cases, int n_cases, test_rng *r)
{
    char dir[1024];
    write_model(d, r, dir, sizeof dir);
    stof_dtype dts[2] = {STOF_F16, STOF_BF16};
    for (int k = 0; k < 2; k++) {
        models mm;
        load_pair(dir, dts[k], &mm);
        CHECK(mm.info.pooling ==
                      (strcmp(d->pooling, "cls") == 0 ? STOF_POOL_CLS : STOF_POOL_MEAN) &&
                  mm.info.normalize == (int)d->normalize,
              "%s: pooling/normalize not read from the folder", d->name);
        double tol = dts[k] == STOF_F16 ? 1e-2 : 3e-2;
        for (int c = 0; c < n_cases; c++)
            compare_case(&mm, &cases[c], r, tol, d->name);
        free_pair(&mm);
    }
}

static void test_small_models(test_rng *r)
{
    static const tiny_desc small = {"small", 64,     2,     128,      2,      200, 128,
                                     2,       "gelu", "F32", "st_sub", "mean", true};
    static const run_case small_cases[] = {
        {3, 24, false, true, true, NULL},
        {2, 17, true, false, false, NULL},
        {4, 64, false, false, true, "window:4,global:2"},
        {3, 100, false, true, false, "random:16x2@9,window:3"},
        {2, 40, false, false, true, "causal"},
        {2, 33, false, false, false, "dense:heads"},
    };
    run_model(&small, small_cases, (int)(sizeof small_cases / sizeof small_cases[0]), r);

    static const tiny_desc mid = {"mid", 128,        2,      256,       3,     300,  256,
                                   3,     "gelu_new", "BF16", "st_root", "cls", false};
    static const run_case mid_cases[] = {
        {5, 48, false, true, true, NULL},
        {1, 1, true, false, false, NULL},
        {2, 200, false, false, true, "dilated:8x2,global:[0,7]"},
        {3, 130, false, false, false, "window:16:0,global:1"},
    };
    run_model(&mid, mid_cases, (int)(sizeof mid_cases / sizeof mid_cases[0]), r);
}

static void test_base_model(test_rng *r)
{
    static const tiny_desc base = {"base", 768,    12,    3072,    2,      1000, 512,
                                    2,      "gelu", "F16", "plain", "mean", false};
    /* Small token counts run cuBLASLt + row kernels; the large batch
     * (thousands of tokens) runs the residual + LayerNorm and FFN chain templates. */
    static const run_case cases[] = {
        {1, 128, true, false, false, NULL},
        {4, 256, false, true, true, NULL},
        {2, 512, false, false, false, "window:64,global:4"},
        {2, 384, false, false, true, "random:64x2@5,window:32"},
        {12, 512, false, false, false, NULL},
        {10, 512, false, false, false, "window:128,global:16"},
    };
    run_model(&base, cases, (int)(sizeof cases / sizeof cases[0]), r);
}

/* Workspace growth and shrink: a repeat of a small shape after a large one gives the same. */
static void test_shapes(test_rng *r)
{
    static const tiny_desc d = {"shapes", 128,    4,     256,     1,      100,  256,
                                 2,        "relu", "F16", "plain", "mean", false};
    char dir[1024];
    write_model(&d, r, dir, sizeof dir);
    models mm;
    load_pair(dir, STOF_F16, &mm);
    int shapes[][2] = {{2, 16}, {6, 200}, {2, 16}, {1, 256}, {2, 16}};
    int32_t ids[2 * 16], lengths[2] = {16, 9};
    for (int i = 0; i < 32; i++)
        ids[i] = (int32_t)test_rng_int(r, 0, 99);
    float first[2 * 128], now[2 * 128];
    int64_t s_ids[2] = {2, 16}, s_len[1] = {2}, s_pool[2] = {2, 128};
    stof_tensor t_ids = stof_tensor_make(ids, STOF_I32, STOF_MEM_HOST, 2, s_ids);
    stof_tensor t_len = stof_tensor_make(lengths, STOF_I32, STOF_MEM_HOST, 1, s_len);
    for (size_t k = 0; k < sizeof shapes / sizeof shapes[0]; k++) {
        int B = shapes[k][0], L = shapes[k][1];
        if (B == 2 && L == 16) {
            stof_tensor t_pool = stof_tensor_make(now, STOF_F32, STOF_MEM_HOST, 2, s_pool);
            test_poison_f32(now, 2 * 128);
            CHECK_OK(stof_model_forward(mm.gpu, NULL, &t_ids, &t_len, NULL, NULL, &t_pool));
            if (k == 0) memcpy(first, now, sizeof first);
            double e = test_rel_err(now, first, 2 * 128);
            CHECK(e < 1e-6, "shape (2, 16) after larger shapes differs: %.3e", e);
            continue;
        }
        int32_t *big = xmalloc(sizeof(int32_t) * (size_t)B * L);
        for (int i = 0; i < B * L; i++)
            big[i] = (int32_t)test_rng_int(r, 0, 99);
        int64_t sh[2] = {B, L};
        stof_tensor tb = stof_tensor_make(big, STOF_I32, STOF_MEM_HOST, 2, sh);
        CHECK_OK(stof_model_forward(mm.gpu, NULL, &tb, NULL, NULL, NULL, NULL));
        free(big);
    }
    /* All sequences empty: zeros, nothing computed. */
    int32_t zero_len[2] = {0, 0};
    stof_tensor t_zero = stof_tensor_make(zero_len, STOF_I32, STOF_MEM_HOST, 1, s_len);
    stof_tensor t_pool = stof_tensor_make(now, STOF_F32, STOF_MEM_HOST, 2, s_pool);
    test_poison_f32(now, 2 * 128);
    CHECK_OK(stof_model_forward(mm.gpu, NULL, &t_ids, &t_zero, NULL, NULL, &t_pool));
    bool zeros = true;
    for (int i = 0; i < 2 * 128; i++)
        zeros &= now[i] == 0.0f;
    CHECK(zeros, "an all-empty batch must pool to zeros");
    free_pair(&mm);
}

/*
 * test_gpu_misuse's batch (2 x 8, device ids and attention mask) without
 * fp->eager: the third forward is launched ahead of the scan's read back. A
 * bad id or mask value found by the scan then still fails the forward with
 * the scan's message after the layers have run on the clamped inputs, and
 * the next good forward gives want (the eager result: other rows, so a
 * tolerance, not bit equality) in an output poisoned before it.
 */
static void misuse_ahead(stof_model *m, const stof_forward_params *eager, int32_t *ids, int64_t *am,
                         int32_t *d_ids, int64_t *d_am, stof_tensor *t_hid, const uint16_t *want)
{
    enum { B = 2, L = 8, H = 64, N = B * L * H };
    stof_forward_params fp = *eager;
    fp.eager = 0;
    int64_t ahead = enc_gpu_launched_ahead(m->gpu);
    uint16_t got[N];
    float fw[N], fg[N];
    half_to_f32(want, N, STOF_F16, fw);
    int64_t s_ids[2] = {B, L};
    stof_tensor dt_ids = stof_tensor_make(d_ids, STOF_I32, STOF_MEM_DEVICE, 2, s_ids);
    for (int k = 0; k < 3; k++)
        CHECK_OK(stof_model_forward(m, &fp, &dt_ids, NULL, NULL, t_hid, NULL));
    CHECK(enc_gpu_launched_ahead(m->gpu) == ahead + 1,
          "the third device forward of (2, 8) was not launched ahead of the read back");
    static const struct {
        bool id; /* else the attention mask */
        int at;
        int64_t bad;
        const char *msg;
    } bad[] = {
        {true, 1 * L + 3, 150, "ids[1, 3] = 150 is outside the vocabulary [0, 150)"},
        {false, 1 * L + 6, 1, "attention_mask row 1 has a 1 at 6 after a 0 at 5"},
        {false, 0 * L + 2, 7, "attention_mask[0, 2] = 7; it must hold only 0 and 1"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int at = bad[i].at;
        int64_t keep = bad[i].id ? ids[at] : am[at];
        for (int pass = 0; pass < 2; pass++) { /* set the bad value, then restore */
            int64_t v = pass == 0 ? bad[i].bad : keep;
            if (bad[i].id)
                ids[at] = (int32_t)v;
            else
                am[at] = v;
            to_dev(d_ids, ids, sizeof(int32_t) * B * L);
            to_dev(d_am, am, sizeof(int64_t) * B * L);
            if (pass == 0)
                CHECK_FAIL(stof_model_forward(m, &fp, &dt_ids, NULL, NULL, t_hid, NULL),
                           STOF_ERR_INVALID_ARG, bad[i].msg);
        }
    }
    CHECK(enc_gpu_launched_ahead(m->gpu) == ahead + 4,
          "the forwards with bad inputs were not launched ahead of the read back");
    cudaMemset(t_hid->data, 0xff, sizeof got);
    CHECK_OK(stof_model_forward(m, &fp, &dt_ids, NULL, NULL, t_hid, NULL));
    CHECK_OK(stof_ctx_synchronize(g_gpu));
    to_host(got, t_hid->data, sizeof got);
    half_to_f32(got, N, STOF_F16, fg);
    double e = test_rel_err(fg, fw, N);
    CHECK(e < 2e-3, "a good forward after refused ones differs from the eager one: %.3e", e);
}

static void test_gpu_misuse(test_rng *r)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/tiny_bert", STOF_TEST_DATA_DIR);
    stof_model *m = (stof_model *)&m;
    CHECK_FAIL(stof_model_load(g_gpu, path, NULL, &m), STOF_ERR_UNSUPPORTED,
               "head dims 32 to 256 (multiples of 8); layer 0 of bert has 16");
    CHECK(m == NULL, "out not reset after a refused load");
    static const tiny_desc d = {"misuse", 64,     2,     128,     1,      150,  64,
                                 2,        "gelu", "F32", "plain", "mean", false};
    char dir[1024];
    write_model(&d, r, dir, sizeof dir);
    stof_model_params p = stof_model_default_params();
    p.dtype = STOF_F32;
    CHECK_FAIL(stof_model_load(g_gpu, dir, &p, &m), STOF_ERR_UNSUPPORTED, "f16 or bf16");
    p.dtype = STOF_F16;
    m = NULL;
    CHECK_OK(stof_model_load(g_gpu, dir, &p, &m));
    if (!m) return;

    enum { B = 2, L = 8, H = 64 };
    int32_t ids[B * L], types[B * L], lengths[B] = {8, 5};
    for (int i = 0; i < B * L; i++) {
        ids[i] = i % 150;
        types[i] = i % 2;
    }
    int64_t s_ids[2] = {B, L}, s_len[1] = {B}, s_hid[3] = {B, L, H};
    int32_t *d_ids = dev_alloc(sizeof ids), *d_types = dev_alloc(sizeof types);
    void *d_hid = dev_alloc((size_t)B * L * H * 2);
    float host_hid[B * L * H];
    stof_tensor t_len = stof_tensor_make(lengths, STOF_I32, STOF_MEM_HOST, 1, s_len);
    stof_tensor dt_ids = stof_tensor_make(d_ids, STOF_I32, STOF_MEM_DEVICE, 2, s_ids);
    stof_tensor dt_types = stof_tensor_make(d_types, STOF_I32, STOF_MEM_DEVICE, 2, s_ids);
    stof_tensor t_hid = stof_tensor_make(d_hid, STOF_F16, STOF_MEM_DEVICE, 3, s_hid);

    ids[1 * L + 3] = 150;  /* vocab is 150 */
    ids[1 * L + 6] = -400; /* padding: never read */
    to_dev(d_ids, ids, sizeof ids);
    to_dev(d_types, types, sizeof types);
    CHECK_FAIL(stof_model_forward(m, NULL, &dt_ids, &t_len, NULL, &t_hid, NULL),
               STOF_ERR_INVALID_ARG, "ids[1, 3] = 150 is outside the vocabulary [0, 150)");
    ids[1 * L + 3] = 3;
    types[0 * L + 2] = 5;
    to_dev(d_ids, ids, sizeof ids);
    to_dev(d_types, types, sizeof types);
    CHECK_FAIL(stof_model_forward(m, NULL, &dt_ids, &t_len, &dt_types, &t_hid, NULL),
               STOF_ERR_INVALID_ARG, "token_types[0, 2] = 5 is outside");
    types[0 * L + 2] = 1;
    to_dev(d_types, types, sizeof types);
    CHECK_OK(stof_model_forward(m, NULL, &dt_ids, &t_len, &dt_types, &t_hid, NULL));

    stof_tensor bad = dt_ids;
    bad.stride[0] = 2 * L;
    bad.shape[1] = L / 2;
    CHECK_FAIL(stof_model_forward(m, NULL, &bad, NULL, NULL, NULL, NULL), STOF_ERR_SHAPE,
               "ids in device memory must be contiguous");
    /* Lengths and attention masks in device memory: checked there, named here. */
    int32_t *d_len = dev_alloc(sizeof lengths);
    int64_t am[B * L];
    int64_t *d_am = dev_alloc(sizeof am);
    stof_tensor dt_len = stof_tensor_make(d_len, STOF_I32, STOF_MEM_DEVICE, 1, s_len);
    stof_tensor dt_am = stof_tensor_make(d_am, STOF_I64, STOF_MEM_DEVICE, 2, s_ids);
    stof_forward_params fp = stof_forward_default_params();
    fp.eager = 1;
    uint16_t want[B * L * H], got[B * L * H];
    CHECK_OK(stof_model_forward(m, &fp, &dt_ids, &t_len, NULL, &t_hid, NULL));
    CHECK_OK(stof_ctx_synchronize(g_gpu));
    to_host(want, d_hid, sizeof want);
    int32_t long_len[B] = {8, 9};
    to_dev(d_len, long_len, sizeof long_len);
    CHECK_FAIL(stof_model_forward(m, &fp, &dt_ids, &dt_len, NULL, &t_hid, NULL),
               STOF_ERR_INVALID_ARG, "lengths[1] = 9 is outside [0, L = 8]");
    to_dev(d_len, lengths, sizeof lengths);
    cudaMemset(d_hid, 0xff, sizeof want);
    CHECK_OK(stof_model_forward(m, &fp, &dt_ids, &dt_len, NULL, &t_hid, NULL));
    CHECK_OK(stof_ctx_synchronize(g_gpu));
    to_host(got, d_hid, sizeof got);
    CHECK(memcmp(want, got, sizeof want) == 0, "device lengths give another result");
    for (int b = 0; b < B; b++)
        for (int i = 0; i < L; i++)
            am[b * L + i] = i < lengths[b];
    to_dev(d_am, am, sizeof am);
    fp.attention_mask = &dt_am;
    cudaMemset(d_hid, 0xff, sizeof want);
    CHECK_OK(stof_model_forward(m, &fp, &dt_ids, NULL, NULL, &t_hid, NULL));
    CHECK_OK(stof_ctx_synchronize(g_gpu));
    to_host(got, d_hid, sizeof got);
    CHECK(memcmp(want, got, sizeof want) == 0, "a device attention mask gives another result");
    CHECK_FAIL(stof_model_forward(m, &fp, &dt_ids, &t_len, NULL, &t_hid, NULL),
               STOF_ERR_INVALID_ARG, "not both");
    misuse_ahead(m, &fp, ids, am, d_ids, d_am, &t_hid, want);
    am[1 * L + 6] = 1; /* 1 1 1 1 1 0 1 0 */
    to_dev(d_am, am, sizeof am);
    CHECK_FAIL(stof_model_forward(m, &fp, &dt_ids, NULL, NULL, &t_hid, NULL),
               STOF_ERR_INVALID_ARG, "attention_mask row 1 has a 1 at 6 after a 0 at 5");
    am[1 * L + 6] = 0;
    am[0 * L + 3] = -1;
    to_dev(d_am, am, sizeof am);
    CHECK_FAIL(stof_model_forward(m, &fp, &dt_ids, NULL, NULL, &t_hid, NULL),
               STOF_ERR_INVALID_ARG, "attention_mask[0, 3] = -1; it must hold only 0 and 1");
    stof_tensor host_am = stof_tensor_make(am, STOF_I64, STOF_MEM_HOST, 2, s_ids);
    fp.attention_mask = &host_am;
    CHECK_FAIL(stof_model_forward(m, &fp, &dt_ids, NULL, NULL, &t_hid, NULL),
               STOF_ERR_INVALID_ARG, "attention_mask[0, 3] = -1; it must hold only 0 and 1");
    stof_tensor short_am = dt_am;
    short_am.shape[1] = L - 1;
    fp.attention_mask = &short_am;
    CHECK_FAIL(stof_model_forward(m, &fp, &dt_ids, NULL, NULL, &t_hid, NULL), STOF_ERR_SHAPE,
               "want [B, L] = [2, 8]");
    int64_t ids64[B * L];
    for (int i = 0; i < B * L; i++)
        ids64[i] = ids[i];
    ids64[0 * L + 7] = (int64_t)1 << 33;
    int64_t *d_ids64 = dev_alloc(sizeof ids64);
    to_dev(d_ids64, ids64, sizeof ids64);
    stof_tensor dt_ids64 = stof_tensor_make(d_ids64, STOF_I64, STOF_MEM_DEVICE, 2, s_ids);
    CHECK_FAIL(stof_model_forward(m, NULL, &dt_ids64, &t_len, NULL, &t_hid, NULL),
               STOF_ERR_INVALID_ARG, "ids[0, 7] = 8589934592 is outside the vocabulary");
    cudaFree(d_len);
    cudaFree(d_am);
    cudaFree(d_ids64);
    bad = stof_tensor_make(host_hid, STOF_F32, STOF_MEM_HOST, 3, s_hid);
    CHECK_FAIL(stof_model_forward(m, NULL, &dt_ids, &t_len, NULL, &bad, NULL), STOF_ERR_INVALID_ARG,
               "hidden_out is in host memory");
    bad = t_hid;
    bad.dtype = STOF_BF16;
    CHECK_FAIL(stof_model_forward(m, NULL, &dt_ids, &t_len, NULL, &bad, NULL), STOF_ERR_SHAPE,
               "hidden_out is bf16; this model writes f16");
    CHECK_OK(stof_model_forward(m, NULL, &dt_ids, &t_len, NULL, &t_hid, NULL));
    cudaFree(d_ids);
    cudaFree(d_types);
    cudaFree(d_hid);
    stof_model_destroy(m);
}

/* A plan with every segment on its stof template (the FFN as the chain), or
 * cuBLASLt with its second algorithm and a forced attention configuration. */
static void seg_set(tune_seg *t, const fuse_config *c)
{
    t->path = 1;
    t->tpl = (int)c->tpl;
    t->block_m = c->block_m, t->block_n = c->block_n, t->block_k = c->block_k;
    t->warps_m = c->warps_m, t->warps_n = c->warps_n, t->stages = c->stages;
}

/* kind 0: every segment on its stof template (the FFN as the chain); 1:
 * cuBLASLt with its second algorithm and a forced attention configuration; 2:
 * the Hopper GEMM on QKV and FFN1 (exact GELU in its epilogue), FFN2 on
 * cuBLASLt. */
static tune_plan forced_plan(int rows, int hidden, int inter, int kind)
{
    tune_plan p;
    tune_plan_default(&p);
    const stof_ctx *ctx = g_gpu;
    if (kind == 2) {
        fuse_config q = fuse_config_default(FUSE_TPL_GEMM_SM90, rows, 3 * hidden, hidden,
                                            ctx->sm_count, ctx->smem_per_block_optin);
        fuse_config f = fuse_config_default(FUSE_TPL_GEMM_SM90, rows, inter, hidden,
                                            ctx->sm_count, ctx->smem_per_block_optin);
        seg_set(&p.seg[TUNE_SEG_QKV], &q);
        seg_set(&p.seg[TUNE_SEG_FFN1], &f);
    } else if (kind == 0) {
        fuse_config c[3] = {
            fuse_config_default(FUSE_TPL_GEMM_BIAS_ACT, rows, 3 * hidden, hidden, ctx->sm_count,
                                ctx->smem_per_block_optin),
            fuse_config_default(FUSE_TPL_GEMM_RES_LN, rows, hidden, hidden, ctx->sm_count,
                                ctx->smem_per_block_optin),
            fuse_config_default(FUSE_TPL_FFN_CHAIN, rows, hidden, inter, ctx->sm_count,
                                ctx->smem_per_block_optin)};
        int seg[3] = {TUNE_SEG_QKV, TUNE_SEG_OUT, TUNE_SEG_FFN1};
        for (int i = 0; i < 3; i++)
            seg_set(&p.seg[seg[i]], &c[i]);
        p.ffn_chain = 1;
    } else {
        for (int i = 0; i < TUNE_NSEG; i++)
            p.seg[i].algo = 1;
        p.attn_kernel = STOF_ATTN_BLOCKWISE;
        p.attn_warps = 4;
        p.attn_block_m = 64;
    }
    return p;
}

/* Requested plans and stof_model_tune: outputs against the CPU forward, the
 * cache entry, and a fresh model that finds the plan in the cache. */
static void test_tune(test_rng *r)
{
    static const tiny_desc d = {"tune", 768,    12,    3072,    2,      1000, 512,
                                 2,      "gelu", "F16", "plain", "mean", false};
    char dir[1024];
    write_model(&d, r, dir, sizeof dir);
    models mm;
    load_pair(dir, STOF_F16, &mm);
    int B = 4, L = 256, H = d.hidden;
    int32_t *ids = xmalloc(sizeof(int32_t) * (size_t)B * L), lengths[4];
    int64_t T = 0;
    for (int b = 0; b < B; b++) {
        lengths[b] = (int32_t)test_rng_int(r, L / 2, L);
        T += lengths[b];
        for (int i = 0; i < L; i++)
            ids[b * L + i] = i < lengths[b] ? (int32_t)test_rng_int(r, 0, d.vocab - 1) : 0;
    }
    stof_mask_spec *spec = NULL;
    CHECK_OK(stof_mask_spec_parse("window:32,global:4", &spec));
    stof_forward_params fp = stof_forward_default_params();
    fp.mask = spec;
    int64_t s_ids[2] = {B, L}, s_len[1] = {B}, s_hid[3] = {B, L, H}, s_pool[2] = {B, H};
    stof_tensor t_ids = stof_tensor_make(ids, STOF_I32, STOF_MEM_HOST, 2, s_ids);
    stof_tensor t_len = stof_tensor_make(lengths, STOF_I32, STOF_MEM_HOST, 1, s_len);
    float *ref_h = xmalloc(sizeof(float) * (size_t)B * L * H),
          *ref_p = xmalloc(sizeof(float) * (size_t)B * H);
    stof_tensor c_hid = stof_tensor_make(ref_h, STOF_F32, STOF_MEM_HOST, 3, s_hid);
    stof_tensor c_pool = stof_tensor_make(ref_p, STOF_F32, STOF_MEM_HOST, 2, s_pool);
    CHECK_OK(stof_model_forward(mm.cpu, &fp, &t_ids, &t_len, NULL, &c_hid, &c_pool));

    /* Requested plans, kernel by kernel and from their graphs. */
    int rows = (int)tune_token_bucket(T);
    static const char *plan_names[3] = {"template", "cuBLASLt#1", "Hopper GEMM"};
    for (int k = 0; k < 3; k++) {
        if (k == 2 && !fuse_sm90_available(g_gpu)) {
            printf("  Hopper GEMM plan: skipped (%s has no sm_90a GEMM)\n", g_gpu->device_name);
            continue;
        }
        tune_plan p = forced_plan(rows, H, d.inter, k);
        for (int run = 0; run < 4; run++) {
            const stof_tensor *ids_t = &t_ids;
            int64_t sh_h[3] = {B, L, H};
            void *dh = dev_alloc((size_t)B * L * H * 2);
            float *pool = xmalloc(sizeof(float) * (size_t)B * H),
                  *h = xmalloc(sizeof(float) * (size_t)B * L * H);
            uint16_t *half = xmalloc((size_t)B * L * H * 2);
            cudaMemset(dh, 0xff, (size_t)B * L * H * 2);
            test_poison_f32(pool, (int64_t)B * H);
            stof_tensor th = stof_tensor_make(dh, STOF_F16, STOF_MEM_DEVICE, 3, sh_h);
            stof_tensor tp = stof_tensor_make(pool, STOF_F32, STOF_MEM_HOST, 2, s_pool);
            CHECK_OK(enc_forward_plan(mm.gpu, &fp, ids_t, &t_len, NULL, &th, &tp, &p));
            CHECK_OK(stof_ctx_synchronize(g_gpu));
            to_host(half, dh, (size_t)B * L * H * 2);
            for (int64_t i = 0; i < (int64_t)B * L * H; i++)
                h[i] = stof_f16_to_f32(half[i]);
            int64_t pad_bad = 0;
            double eh = rel_err_valid(h, ref_h, lengths, B, L, H, &pad_bad);
            double ep = test_rel_err(pool, ref_p, (int64_t)B * H);
            CHECK(eh < 1e-2 && ep < 1e-2 && pad_bad == 0,
                  "%s plan, run %d: hidden %.3e pooled %.3e, %lld padding not zero",
                  plan_names[k], run, eh, ep, (long long)pad_bad);
            cudaFree(dh);
            free(pool);
            free(h);
            free(half);
        }
    }

    /* The search, into a cache file of its own. */
    char cache[1200];
    snprintf(cache, sizeof cache, "%s/tune/cache.json", tmp_root);
    stof_model_destroy(mm.gpu);
    stof_model_params mp = stof_model_default_params();
    mp.tune_cache = cache;
    mm.gpu = NULL;
    CHECK_OK(stof_model_load(g_gpu, dir, &mp, &mm.gpu));
    stof_tune_params tp = stof_tune_default_params();
    tp.mask = spec;
    tp.budget = 12;
    stof_tune_result res;
    CHECK_OK(stof_model_tune(mm.gpu, &tp, &t_ids, &t_len, NULL, &res));
    printf("  tune: %d measured, %d rejected, default %.4f ms, tuned %.4f ms, %.1f s\n",
           res.measured, res.rejected, res.default_ms, res.tuned_ms, res.tune_s);
    for (int i = 0; i < STOF_TUNE_SEGMENTS; i++)
        printf("    %-10s %-34s (default %s)\n", res.segment[i], res.chosen[i], res.fallback[i]);
    CHECK(res.measured > 2 * 5 && res.tuned_ms > 0 && res.tuned_ms <= res.default_ms,
          "tune result: %d measured, tuned %.4f ms, default %.4f ms", res.measured, res.tuned_ms,
          res.default_ms);
    CHECK(strcmp(res.cache_path, cache) == 0, "stored in '%s', want '%s'", res.cache_path, cache);
    tune_cache *c = NULL;
    CHECK_OK(tune_cache_load(cache, stof_version(), &c));
    CHECK(c && tune_cache_count(c) == 1, "the cache holds %d entries", c ? tune_cache_count(c) : -1);
    tune_key key;
    CHECK_OK(enc_gpu_tune_key(mm.gpu, B, L, T, spec, &key));
    tune_plan found;
    CHECK(c && tune_cache_find(c, &key, &found), "the cache has no entry for the tuned shape");
    tune_cache_free(c);
    /* A fresh model reads the plan; its forwards (kernel by kernel, graph
     * capture, replay) match the CPU. */
    stof_model_destroy(mm.gpu);
    mm.gpu = NULL;
    CHECK_OK(stof_model_load(g_gpu, dir, &mp, &mm.gpu));
    for (int run = 0; run < 3; run++) {
        char what[64];
        snprintf(what, sizeof what, "tuned plan from the cache, run %d", run);
        check_forward_against(&mm, &fp, B, L, ids, NULL, lengths, false, false, ref_h, ref_p, 1e-2,
                              what);
    }
    free_pair(&mm);
    stof_mask_spec_destroy(spec);
    free(ids);
    free(ref_h);
    free(ref_p);
}

int main(void)
{
    test_require_gpu("test_model_forward_gpu");
    setenv("STOF_CPU_REFERENCE", "1", 1); /* the CPU side is the exact oracle */
    test_rng r;
    test_rng_init(&r, test_seed());
    const char *base = getenv("TMPDIR");
    snprintf(tmp_root, sizeof tmp_root, "%s/stof_model_forward_XXXXXX",
             base && *base ? base : "/tmp");
    if (!mkdtemp(tmp_root)) {
        fprintf(stderr, "cannot create a temporary folder\n");
        return 1;
    }
    stof_ctx_params cp = stof_ctx_default_params();
    cp.device = STOF_DEVICE_CPU;
    if (stof_ctx_create(&cp, &g_cpu) != STOF_OK) return 1;
    cp.device = STOF_DEVICE_GPU;
    if (stof_ctx_create(&cp, &g_gpu) != STOF_OK) {
        fprintf(stderr, "cannot create a GPU context: %s\n", stof_last_error());
        return 1;
    }
    test_small_models(&r);
    test_shapes(&r);
    test_gpu_misuse(&r);
    test_base_model(&r);
    test_tune(&r);
    stof_ctx_destroy(g_gpu);
    stof_ctx_destroy(g_cpu);
    char cmd[700];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp_root);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", tmp_root);
    return test_finish("test_model_forward_gpu");
}
