/*
 * test_attn_cpu.c — stof_attention on a CPU context against cpu_attention fed
 * with masks built straight from the spec (stof_mask_spec_to_dense), so the
 * compiled tiles, their decoding, the dtype conversions and the strided and
 * packed layouts are all on trial; then the decoder and T5 features (GQA,
 * bottom-right offsets, biases, soft cap) against cpu_attention_ex. Then API
 * misuse: every bad input returns a status with a message.
 */
#include "cpu/cpu_ref.h"
#include "mask/mask.h"
#include "testlib.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static test_rng rng;

/* A host tensor of logical shape [B, H, L, D] stored as [B, L, H, D + pad]. */
static stof_tensor blhd_view(void *data, stof_dtype dt, int64_t B, int64_t H, int64_t L, int64_t D,
                             int64_t pad)
{
    int64_t shape[4] = {B, H, L, D};
    stof_tensor t = stof_tensor_make(data, dt, STOF_MEM_HOST, 4, shape);
    int64_t row = D + pad;
    t.stride[0] = L * H * row;
    t.stride[1] = row;
    t.stride[2] = H * row;
    t.stride[3] = 1;
    return t;
}

static int64_t view_bytes(const stof_tensor *t)
{
    int64_t last = 0;
    for (int d = 0; d < t->ndim; d++)
        last += (t->shape[d] - 1) * t->stride[d];
    return (last + 1) * (int64_t)stof_dtype_size(t->dtype);
}

static int64_t offset_of(const stof_tensor *t, const int64_t *idx)
{
    int64_t off = 0;
    for (int d = 0; d < t->ndim; d++)
        off += idx[d] * t->stride[d];
    return off;
}

/* Random values in [-amp, amp] written into the view, and the values as stored
 * (rounded to the dtype) into ref, contiguous in logical order. */
static void fill_view(stof_tensor *t, float amp, float *ref)
{
    int64_t n = stof_tensor_numel(t), idx[4] = {0, 0, 0, 0};
    for (int64_t e = 0; e < n; e++) {
        int64_t rem = e;
        for (int d = t->ndim - 1; d >= 0; d--) {
            idx[d] = rem % t->shape[d];
            rem /= t->shape[d];
        }
        int64_t off = offset_of(t, idx);
        stof_store_f(t->data, t->dtype, off, test_rng_float(&rng, -amp, amp));
        ref[e] = stof_load_f(t->data, t->dtype, off);
    }
}

static void read_view(const stof_tensor *t, float *dst)
{
    int64_t n = stof_tensor_numel(t), idx[4] = {0, 0, 0, 0};
    for (int64_t e = 0; e < n; e++) {
        int64_t rem = e;
        for (int d = t->ndim - 1; d >= 0; d--) {
            idx[d] = rem % t->shape[d];
            rem /= t->shape[d];
        }
        dst[e] = stof_load_f(t->data, t->dtype, offset_of(t, idx));
    }
}

static stof_mask *compile(stof_ctx *ctx, stof_mask_spec *spec, int B, int H, int Lq, int Lk,
                          int32_t *lens_q, int32_t *lens_k, int tile)
{
    int64_t bshape[1] = {B};
    stof_tensor tq = stof_tensor_make(lens_q, STOF_I32, STOF_MEM_HOST, 1, bshape);
    stof_tensor tk = stof_tensor_make(lens_k, STOF_I32, STOF_MEM_HOST, 1, bshape);
    stof_mask_params mp = stof_mask_default_params();
    mp.batch = B;
    mp.heads = H;
    mp.len_q = Lq;
    mp.len_k = Lk;
    mp.lengths_q = lens_q ? &tq : NULL;
    mp.lengths_k = lens_k ? &tk : NULL;
    mp.tile_m = mp.tile_n = tile;
    stof_mask *m = NULL;
    CHECK_OK(stof_mask_compile(ctx, spec, &mp, &m));
    return m;
}

/* Dense reference over contiguous [B, H, L, D] fp32 with the spec's planes. */
static void reference(const stof_mask_spec *spec, int B, int H, int Lq, int Lk, int D,
                      const int32_t *lens_q, const int32_t *lens_k, const float *q, const float *k,
                      const float *v, float scale, float *out)
{
    uint8_t *plane = malloc((size_t)Lq * Lk);
    for (int b = 0; b < B; b++) {
        for (int h = 0; h < H; h++) {
            CHECK_OK(stof_mask_spec_to_dense(spec, B, H, Lq, Lk, lens_q, lens_k, b, h, plane));
            int64_t bh = (int64_t)b * H + h;
            cpu_attention(q + bh * Lq * D, k + bh * Lk * D, v + bh * Lk * D, out + bh * Lq * D, 1,
                          1, Lq, Lk, D, plane, 0, 0, scale);
        }
    }
    free(plane);
}

static double tolerance(stof_dtype dt)
{
    return dt == STOF_F32 ? 1e-5 : dt == STOF_F16 ? 2e-3 : 1e-2;
}

/* Padded [B, H, L, D] views over [B, L, H, D + 8] memory, cross lengths. */
static void test_padded_strided(stof_ctx *ctx, stof_dtype dt, const char *text, float scale)
{
    const int B = 2, H = 3, Lq = 37, Lk = 45, D = 24, pad = 8;
    int32_t lens_q[2] = {37, 20}, lens_k[2] = {45, 30};
    stof_mask_spec *spec = NULL;
    CHECK_OK(stof_mask_spec_parse(text, &spec));
    if (!spec) return;
    stof_mask *mask = compile(ctx, spec, B, H, Lq, Lk, lens_q, lens_k, 16);
    size_t es = stof_dtype_size(dt);
    void *qb = calloc((size_t)B * Lq * H * (D + pad), es);
    void *kb = calloc((size_t)B * Lk * H * (D + pad), es);
    void *vb = calloc((size_t)B * Lk * H * (D + pad), es);
    void *ob = malloc((size_t)B * Lq * H * (D + pad) * es);
    stof_tensor q = blhd_view(qb, dt, B, H, Lq, D, pad), k = blhd_view(kb, dt, B, H, Lk, D, pad);
    stof_tensor v = blhd_view(vb, dt, B, H, Lk, D, pad), o = blhd_view(ob, dt, B, H, Lq, D, pad);
    int64_t nq = (int64_t)B * H * Lq * D, nk = (int64_t)B * H * Lk * D;
    float *qf = malloc(nq * 4), *kf = malloc(nk * 4), *vf = malloc(nk * 4);
    float *out = malloc(nq * 4), *ref = malloc(nq * 4);
    fill_view(&q, 1.5f, qf);
    fill_view(&k, 1.5f, kf);
    fill_view(&v, 1.0f, vf);
    test_poison_bytes(ob, (size_t)view_bytes(&o));
    stof_attn_params p = stof_attn_default_params();
    p.scale = scale;
    CHECK_OK(stof_attention(ctx, &p, &q, &k, &v, mask, NULL, NULL, &o));
    read_view(&o, out);
    float s = scale != 0.0f ? scale : 1.0f / sqrtf((float)D);
    reference(spec, B, H, Lq, Lk, D, lens_q, lens_k, qf, kf, vf, s, ref);
    double err = test_rel_err(out, ref, nq);
    CHECK(err <= tolerance(dt), "padded %s %s scale %g: rel err %g", stof_dtype_name(dt), text,
          (double)scale, err);
    /* Padded query rows (b = 1, i >= 20) are exact zeros. */
    int nonzero = 0;
    for (int h = 0; h < H; h++)
        for (int i = 20; i < Lq; i++)
            for (int d = 0; d < D; d++)
                nonzero += out[(((int64_t)1 * H + h) * Lq + i) * D + d] != 0.0f;
    CHECK(nonzero == 0, "%d nonzero values in padded rows", nonzero);
    stof_attn_choice ch;
    CHECK_OK(stof_attention_select(ctx, &p, &q, mask, &ch));
    CHECK(ch.kernel == STOF_ATTN_CPU, "CPU ctx reports STOF_ATTN_CPU, got %d", ch.kernel);
    free(qb), free(kb), free(vb), free(ob), free(qf), free(kf), free(vf), free(out), free(ref);
    stof_mask_destroy(mask);
    stof_mask_spec_destroy(spec);
}

/* Packed [T, H, D] with cu_seqlens, one plane per sequence, per-batch masks. */
static void test_packed(stof_ctx *ctx, stof_dtype dt, const char *text)
{
    const int B = 3, H = 2, L = 19, D = 16;
    int32_t lens[3] = {7, 19, 1}, cu[4] = {0, 7, 26, 27};
    const int T = 27;
    stof_mask_spec *spec = NULL;
    CHECK_OK(stof_mask_spec_parse(text, &spec));
    if (!spec) return;
    stof_mask *mask = compile(ctx, spec, B, H, L, L, lens, lens, 64);
    size_t es = stof_dtype_size(dt);
    int64_t shape[3] = {T, H, D}, cshape[1] = {B + 1};
    void *qb = malloc((size_t)T * H * D * es), *kb = malloc((size_t)T * H * D * es);
    void *vb = malloc((size_t)T * H * D * es), *ob = malloc((size_t)T * H * D * es);
    stof_tensor q = stof_tensor_make(qb, dt, STOF_MEM_HOST, 3, shape);
    stof_tensor k = stof_tensor_make(kb, dt, STOF_MEM_HOST, 3, shape);
    stof_tensor v = stof_tensor_make(vb, dt, STOF_MEM_HOST, 3, shape);
    stof_tensor o = stof_tensor_make(ob, dt, STOF_MEM_HOST, 3, shape);
    stof_tensor cut = stof_tensor_make(cu, STOF_I32, STOF_MEM_HOST, 1, cshape);
    int64_t n = (int64_t)T * H * D;
    float *qf = malloc(n * 4), *kf = malloc(n * 4), *vf = malloc(n * 4);
    float *out = malloc(n * 4), *ref = calloc((size_t)n, 4);
    fill_view(&q, 1.5f, qf);
    fill_view(&k, 1.5f, kf);
    fill_view(&v, 1.0f, vf);
    test_poison_bytes(ob, (size_t)n * es);
    CHECK_OK(stof_attention(ctx, NULL, &q, &k, &v, mask, &cut, &cut, &o));
    read_view(&o, out);
    /* Reference: each sequence's [len, len] corner of its plane. */
    uint8_t *plane = malloc((size_t)L * L), *sub = malloc((size_t)L * L);
    float *qs = malloc((size_t)L * D * 4), *ks = malloc((size_t)L * D * 4);
    float *vs = malloc((size_t)L * D * 4), *os = malloc((size_t)L * D * 4);
    for (int b = 0; b < B; b++) {
        int len = lens[b];
        for (int h = 0; h < H; h++) {
            CHECK_OK(stof_mask_spec_to_dense(spec, B, H, L, L, lens, lens, b, h, plane));
            for (int i = 0; i < len; i++)
                memcpy(sub + i * len, plane + i * L, (size_t)len);
            for (int i = 0; i < len; i++) {
                int64_t src = ((int64_t)(cu[b] + i) * H + h) * D;
                memcpy(qs + i * D, qf + src, D * 4);
                memcpy(ks + i * D, kf + src, D * 4);
                memcpy(vs + i * D, vf + src, D * 4);
            }
            cpu_attention(qs, ks, vs, os, 1, 1, len, len, D, sub, 0, 0, 1.0f / sqrtf(D));
            for (int i = 0; i < len; i++)
                memcpy(ref + ((int64_t)(cu[b] + i) * H + h) * D, os + i * D, D * 4);
        }
    }
    double err = test_rel_err(out, ref, n);
    CHECK(err <= tolerance(dt), "packed %s %s: rel err %g", stof_dtype_name(dt), text, err);
    free(plane), free(sub), free(qs), free(ks), free(vs), free(os);
    free(qb), free(kb), free(vb), free(ob), free(qf), free(kf), free(vf), free(out), free(ref);
    stof_mask_destroy(mask);
    stof_mask_spec_destroy(spec);
}

/* Per-head masks: a blocks layout with one plane per head and a dense part. */
static void test_per_head(stof_ctx *ctx)
{
    const int B = 2, H = 2, L = 40, D = 8;
    stof_mask_spec *spec = NULL;
    CHECK_OK(stof_mask_spec_create(&spec));
    if (!spec) return;
    uint8_t layout[2 * 3 * 3] = {1, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 1, 1, 0, 0, 0, 1, 1};
    CHECK_OK(stof_mask_spec_add_blocks(spec, 16, 2, 3, 3, layout));
    uint8_t *dense = malloc((size_t)H * L * L);
    for (int e = 0; e < H * L * L; e++)
        dense[e] = test_rng_int(&rng, 0, 9) == 0;
    int64_t dshape[4] = {1, H, L, L};
    stof_tensor dt = stof_tensor_make(dense, STOF_U8, STOF_MEM_HOST, 4, dshape);
    CHECK_OK(stof_mask_spec_add_dense(spec, &dt));
    stof_mask *mask = compile(ctx, spec, B, H, L, L, NULL, NULL, 32);
    int64_t shape[4] = {B, H, L, D}, n = (int64_t)B * H * L * D;
    float *q = malloc(n * 4), *k = malloc(n * 4), *v = malloc(n * 4);
    float *o = malloc(n * 4), *ref = malloc(n * 4);
    test_fill_uniform(&rng, q, n, -2.0f, 2.0f);
    test_fill_uniform(&rng, k, n, -2.0f, 2.0f);
    test_fill_uniform(&rng, v, n, -1.0f, 1.0f);
    test_poison_f32(o, n);
    stof_tensor tq = stof_tensor_make(q, STOF_F32, STOF_MEM_HOST, 4, shape);
    stof_tensor tk = stof_tensor_make(k, STOF_F32, STOF_MEM_HOST, 4, shape);
    stof_tensor tv = stof_tensor_make(v, STOF_F32, STOF_MEM_HOST, 4, shape);
    stof_tensor to = stof_tensor_make(o, STOF_F32, STOF_MEM_HOST, 4, shape);
    CHECK_OK(stof_attention(ctx, NULL, &tq, &tk, &tv, mask, NULL, NULL, &to));
    reference(spec, B, H, L, L, D, NULL, NULL, q, k, v, 1.0f / sqrtf(D), ref);
    double err = test_rel_err(o, ref, n);
    CHECK(err <= 1e-5, "per-head blocks + dense: rel err %g", err);
    free(q), free(k), free(v), free(o), free(ref), free(dense);
    stof_mask_destroy(mask);
    stof_mask_spec_destroy(spec);
}

static void test_misuse(stof_ctx *ctx)
{
    const int B = 2, H = 2, L = 16, D = 8;
    stof_mask_spec *spec = NULL;
    CHECK_OK(stof_mask_spec_parse("causal", &spec));
    if (!spec) return;
    stof_mask *mask = compile(ctx, spec, B, H, L, L, NULL, NULL, 16);
    int64_t shape[4] = {B, H, L, D}, n = (int64_t)B * H * L * D;
    float *buf = calloc((size_t)n * 4, 4);
    uint16_t *hb = calloc((size_t)n, 2);
    stof_tensor q = stof_tensor_make(buf, STOF_F32, STOF_MEM_HOST, 4, shape);
    stof_tensor k = stof_tensor_make(buf + n, STOF_F32, STOF_MEM_HOST, 4, shape);
    stof_tensor v = stof_tensor_make(buf + 2 * n, STOF_F32, STOF_MEM_HOST, 4, shape);
    stof_tensor o = stof_tensor_make(buf + 3 * n, STOF_F32, STOF_MEM_HOST, 4, shape);
    CHECK_OK(stof_attention(ctx, NULL, &q, &k, &v, mask, NULL, NULL, &o));

    CHECK_STATUS(stof_attention(NULL, NULL, &q, &k, &v, mask, NULL, NULL, &o),
                 STOF_ERR_INVALID_ARG);
    CHECK_STATUS(stof_attention(ctx, NULL, NULL, &k, &v, mask, NULL, NULL, &o),
                 STOF_ERR_INVALID_ARG);
    CHECK_STATUS(stof_attention(ctx, NULL, &q, &k, &v, NULL, NULL, NULL, &o), STOF_ERR_INVALID_ARG);
    CHECK_STATUS(stof_attention(ctx, NULL, &q, &k, &v, mask, NULL, NULL, NULL),
                 STOF_ERR_INVALID_ARG);
    /* dtype mismatch */
    stof_tensor kh = stof_tensor_make(hb, STOF_F16, STOF_MEM_HOST, 4, shape);
    CHECK_STATUS(stof_attention(ctx, NULL, &q, &kh, &v, mask, NULL, NULL, &o), STOF_ERR_SHAPE);
    CHECK(strstr(stof_last_error(), "f16") && strstr(stof_last_error(), "f32"), "message: %s",
          stof_last_error());
    /* integer inputs */
    stof_tensor qi = q;
    qi.dtype = STOF_I32;
    CHECK_STATUS(stof_attention(ctx, NULL, &qi, &k, &v, mask, NULL, NULL, &o),
                 STOF_ERR_INVALID_ARG);
    /* shape against the mask: Lk differs, B differs */
    int64_t shape_k[4] = {B, H, L - 1, D};
    stof_tensor ks = stof_tensor_make(buf + n, STOF_F32, STOF_MEM_HOST, 4, shape_k);
    CHECK_STATUS(stof_attention(ctx, NULL, &q, &ks, &v, mask, NULL, NULL, &o), STOF_ERR_SHAPE);
    CHECK(strstr(stof_last_error(), "15") && strstr(stof_last_error(), "16"),
          "message names both lengths: %s", stof_last_error());
    int64_t shape_b[4] = {1, H, L, D};
    stof_tensor qb = stof_tensor_make(buf, STOF_F32, STOF_MEM_HOST, 4, shape_b);
    CHECK_STATUS(stof_attention(ctx, NULL, &qb, &k, &v, mask, NULL, NULL, &o), STOF_ERR_SHAPE);
    CHECK(strstr(stof_last_error(), "B=1") && strstr(stof_last_error(), "B=2"),
          "message names both batches: %s", stof_last_error());
    /* device memory on a CPU ctx */
    stof_tensor qd = q;
    qd.memory = STOF_MEM_DEVICE;
    CHECK_STATUS(stof_attention(ctx, NULL, &qd, &k, &v, mask, NULL, NULL, &o),
                 STOF_ERR_INVALID_ARG);
    CHECK(strstr(stof_last_error(), "device") != NULL, "message: %s", stof_last_error());
    /* non-unit stride on D */
    stof_tensor qs = q;
    qs.stride[3] = 2;
    CHECK_STATUS(stof_attention(ctx, NULL, &qs, &k, &v, mask, NULL, NULL, &o), STOF_ERR_SHAPE);
    /* params */
    stof_attn_params p = stof_attn_default_params();
    p.scale = NAN;
    CHECK_STATUS(stof_attention(ctx, &p, &q, &k, &v, mask, NULL, NULL, &o), STOF_ERR_INVALID_ARG);
    p = stof_attn_default_params();
    p.kernel = (stof_attn_kernel)7;
    CHECK_STATUS(stof_attention(ctx, &p, &q, &k, &v, mask, NULL, NULL, &o), STOF_ERR_INVALID_ARG);
    /* packed layout misuse: one cu_seqlens, 4-d q, wrong count, bad contents */
    int32_t cu[3] = {0, 16, 32};
    int64_t cshape[1] = {3}, pshape[3] = {32, H, D};
    stof_tensor cut = stof_tensor_make(cu, STOF_I32, STOF_MEM_HOST, 1, cshape);
    CHECK_STATUS(stof_attention(ctx, NULL, &q, &k, &v, mask, &cut, NULL, &o), STOF_ERR_INVALID_ARG);
    CHECK_STATUS(stof_attention(ctx, NULL, &q, &k, &v, mask, &cut, &cut, &o), STOF_ERR_SHAPE);
    stof_tensor pq = stof_tensor_make(buf, STOF_F32, STOF_MEM_HOST, 3, pshape);
    stof_tensor pk = stof_tensor_make(buf + n, STOF_F32, STOF_MEM_HOST, 3, pshape);
    stof_tensor pv = stof_tensor_make(buf + 2 * n, STOF_F32, STOF_MEM_HOST, 3, pshape);
    stof_tensor po = stof_tensor_make(buf + 3 * n, STOF_F32, STOF_MEM_HOST, 3, pshape);
    CHECK_OK(stof_attention(ctx, NULL, &pq, &pk, &pv, mask, &cut, &cut, &po));
    int64_t cshape2[1] = {2};
    stof_tensor cu2 = stof_tensor_make(cu, STOF_I32, STOF_MEM_HOST, 1, cshape2);
    CHECK_STATUS(stof_attention(ctx, NULL, &pq, &pk, &pv, mask, &cu2, &cu2, &po), STOF_ERR_SHAPE);
    cu[1] = 10;
    cu[2] = 5; /* decreasing */
    CHECK_STATUS(stof_attention(ctx, NULL, &pq, &pk, &pv, mask, &cut, &cut, &po),
                 STOF_ERR_INVALID_ARG);
    cu[2] = 26; /* not the token count */
    CHECK_STATUS(stof_attention(ctx, NULL, &pq, &pk, &pv, mask, &cut, &cut, &po), STOF_ERR_SHAPE);
    CHECK(strstr(stof_last_error(), "26") && strstr(stof_last_error(), "32"), "message: %s",
          stof_last_error());
    cu[1] = 0; /* a sequence longer than the mask's 16 */
    CHECK_STATUS(stof_attention(ctx, NULL, &pq, &pk, &pv, mask, &cut, &cut, &po), STOF_ERR_SHAPE);
    /* selection needs the same inputs */
    stof_attn_choice ch;
    CHECK_STATUS(stof_attention_select(ctx, NULL, &q, mask, NULL), STOF_ERR_INVALID_ARG);
    CHECK_STATUS(stof_attention_select(ctx, NULL, &qb, mask, &ch), STOF_ERR_SHAPE);
    free(buf);
    free(hb);
    stof_mask_destroy(mask);
    stof_mask_spec_destroy(spec);
}

/* Decoder and T5 features on the CPU context: k and v with Hkv heads, a mask
 * at the default bottom-right alignment with Lq < Lk and per-entry lengths,
 * each bias kind and the soft cap, against cpu_attention_ex over the whole
 * batch with the spec's planes and the offsets written out here. */
static void test_decoder_features(stof_ctx *ctx, stof_dtype dt, int bias_kind, float softcap,
                                  int Hkv, const char *text)
{
    const int B = 2, H = 4, Lq = 9, Lk = 23, D = 20, NB = 16;
    int32_t lens_q[2] = {9, 5}, lens_k[2] = {23, 17};
    stof_mask_spec *spec = NULL;
    CHECK_OK(stof_mask_spec_parse(text, &spec));
    if (!spec) return;
    stof_mask *mask = compile(ctx, spec, B, H, Lq, Lk, lens_q, lens_k, 16);
    const int64_t sq[4] = {B, H, Lq, D}, sk[4] = {B, Hkv, Lk, D};
    const int64_t nq = (int64_t)B * H * Lq * D, nk = (int64_t)B * Hkv * Lk * D;
    size_t es = stof_dtype_size(dt);
    void *qb = malloc((size_t)nq * es), *kb = malloc((size_t)nk * es),
         *vb = malloc((size_t)nk * es);
    void *ob = malloc((size_t)nq * es);
    stof_tensor q = stof_tensor_make(qb, dt, STOF_MEM_HOST, 4, sq);
    stof_tensor k = stof_tensor_make(kb, dt, STOF_MEM_HOST, 4, sk);
    stof_tensor v = stof_tensor_make(vb, dt, STOF_MEM_HOST, 4, sk);
    stof_tensor o = stof_tensor_make(ob, dt, STOF_MEM_HOST, 4, sq);
    float *qf = malloc(4 * (size_t)nq), *kf = malloc(4 * (size_t)nk), *vf = malloc(4 * (size_t)nk);
    float *got = malloc(4 * (size_t)nq), *want = malloc(4 * (size_t)nq);
    fill_view(&q, 1.5f, qf);
    fill_view(&k, 1.5f, kf);
    fill_view(&v, 1.0f, vf);
    memset(ob, 0xff, (size_t)nq * es);
    /* Bias inputs: a T5 table [NB, H], slopes [H], a tensor [1, H, Lq, Lk] (broadcast on B). */
    float table[16 * 4], slopes[4], tens[4 * 9 * 23];
    for (int e = 0; e < NB * H; e++)
        table[e] = test_rng_float(&rng, -2, 2);
    for (int h = 0; h < H; h++)
        slopes[h] = 1.0f / (float)(2 << h);
    for (int e = 0; e < H * Lq * Lk; e++)
        tens[e] = test_rng_float(&rng, -3, 3);
    const int64_t st[2] = {NB, H}, ss[1] = {H}, stn[4] = {1, H, Lq, Lk};
    stof_tensor t5 = stof_tensor_make(table, STOF_F32, STOF_MEM_HOST, 2, st);
    stof_tensor al = stof_tensor_make(slopes, STOF_F32, STOF_MEM_HOST, 1, ss);
    stof_tensor tn = stof_tensor_make(tens, STOF_F32, STOF_MEM_HOST, 4, stn);
    stof_attn_params p = stof_attn_default_params();
    p.bias_kind = bias_kind;
    p.bias = bias_kind == STOF_BIAS_T5       ? &t5
             : bias_kind == STOF_BIAS_ALIBI  ? &al
             : bias_kind == STOF_BIAS_TENSOR ? &tn
                                             : NULL;
    p.t5_bidirectional = 1;
    p.t5_max_distance = 20;
    p.softcap = softcap;
    CHECK_OK(stof_attention(ctx, &p, &q, &k, &v, mask, NULL, NULL, &o));
    read_view(&o, got);

    uint8_t *planes = malloc((size_t)B * Lq * Lk);
    for (int b = 0; b < B; b++)
        CHECK_OK(stof_mask_spec_to_dense(spec, B, H, Lq, Lk, lens_q, lens_k, b, 0,
                                         planes + (size_t)b * Lq * Lk));
    const bool top_left = strstr(text, "topleft") != NULL;
    int64_t off[2];
    for (int b = 0; b < B; b++)
        off[b] = top_left ? 0 : lens_k[b] - lens_q[b];
    cpu_attn_extra x;
    memset(&x, 0, sizeof x);
    x.bias_kind = bias_kind;
    x.table = bias_kind == STOF_BIAS_T5 ? table : slopes;
    x.heads = H;
    x.t5_num_buckets = NB;
    x.t5_bidirectional = 1;
    x.t5_max_distance = 20;
    x.tensor = tens;
    x.t_stride[1] = Lq * Lk;
    x.t_stride[2] = Lk;
    x.t_stride[3] = 1;
    x.softcap = softcap;
    x.off = off;
    cpu_attention_ex(qf, kf, vf, want, B, H, Hkv, Lq, Lk, D, planes, (int64_t)Lq * Lk, 0,
                     1.0f / sqrtf((float)D), &x);
    double err = 0;
    for (int b = 0; b < B; b++)
        for (int64_t e = 0; e < (int64_t)H * Lq * D; e++) {
            int64_t i = (e / D) % Lq, idx = b * (int64_t)H * Lq * D + e;
            if (i < lens_q[b])
                err = fmax(err, fabs((double)got[idx] - want[idx]));
            else
                CHECK(got[idx] == 0.0f, "padded row %lld of entry %d not zero", (long long)i, b);
        }
    CHECK(err <= tolerance(dt), "%s %s bias %d cap %g H %d / Hkv %d: max error %g", text,
          stof_dtype_name(dt), bias_kind, (double)softcap, H, Hkv, err);
    free(planes);
    free(qb);
    free(kb);
    free(vb);
    free(ob);
    free(qf);
    free(kf);
    free(vf);
    free(got);
    free(want);
    stof_mask_destroy(mask);
    stof_mask_spec_destroy(spec);
}

/* Bad combinations of the decoder features get named errors. */
static void test_decoder_misuse(stof_ctx *ctx)
{
    const int64_t sq[4] = {1, 6, 8, 16}, sk4[4] = {1, 4, 8, 16}, sk3[4] = {1, 3, 8, 16};
    float qb[6 * 8 * 16] = {0}, kb[6 * 8 * 16] = {0}, vb[6 * 8 * 16] = {0}, ob[6 * 8 * 16];
    stof_tensor q = stof_tensor_make(qb, STOF_F32, STOF_MEM_HOST, 4, sq);
    stof_tensor o = stof_tensor_make(ob, STOF_F32, STOF_MEM_HOST, 4, sq);
    stof_tensor k4 = stof_tensor_make(kb, STOF_F32, STOF_MEM_HOST, 4, sk4);
    stof_tensor k3 = stof_tensor_make(kb, STOF_F32, STOF_MEM_HOST, 4, sk3);
    stof_tensor v3 = stof_tensor_make(vb, STOF_F32, STOF_MEM_HOST, 4, sk3);
    stof_mask_spec *spec = NULL;
    CHECK_OK(stof_mask_spec_parse("causal", &spec));
    stof_mask *mask = compile(ctx, spec, 1, 6, 8, 8, NULL, NULL, 16);
    stof_attn_params p = stof_attn_default_params();
    CHECK_STATUS(stof_attention(ctx, &p, &q, &k4, &k4, mask, NULL, NULL, &o), STOF_ERR_SHAPE);
    CHECK(strstr(stof_last_error(), "divide") != NULL, "kv heads message: %s", stof_last_error());
    CHECK_STATUS(stof_attention(ctx, &p, &q, &k3, &k4, mask, NULL, NULL, &o), STOF_ERR_SHAPE);
    CHECK_OK(stof_attention(ctx, &p, &q, &k3, &v3, mask, NULL, NULL, &o));
    float table[32 * 6] = {0};
    const int64_t bad_t5[2] = {32, 5}, odd_t5[2] = {7, 6}, bad_al[1] = {4},
                  bad_tn[4] = {1, 6, 8, 9};
    stof_tensor t5 = stof_tensor_make(table, STOF_F32, STOF_MEM_HOST, 2, bad_t5);
    p.bias_kind = STOF_BIAS_T5;
    p.bias = &t5;
    CHECK_STATUS(stof_attention(ctx, &p, &q, &k3, &v3, mask, NULL, NULL, &o), STOF_ERR_SHAPE);
    CHECK(strstr(stof_last_error(), "num_buckets") != NULL, "T5 message: %s", stof_last_error());
    t5 = stof_tensor_make(table, STOF_F32, STOF_MEM_HOST, 2, odd_t5);
    p.t5_bidirectional = 1;
    CHECK_STATUS(stof_attention(ctx, &p, &q, &k3, &v3, mask, NULL, NULL, &o), STOF_ERR_SHAPE);
    p.t5_bidirectional = 0;
    p.t5_max_distance = 3; /* not past the 3 exact buckets of 7 */
    CHECK_STATUS(stof_attention(ctx, &p, &q, &k3, &v3, mask, NULL, NULL, &o), STOF_ERR_INVALID_ARG);
    p.t5_max_distance = -1;
    CHECK_STATUS(stof_attention(ctx, &p, &q, &k3, &v3, mask, NULL, NULL, &o), STOF_ERR_INVALID_ARG);
    p.t5_max_distance = 0;
    stof_tensor al = stof_tensor_make(table, STOF_F32, STOF_MEM_HOST, 1, bad_al);
    p.bias_kind = STOF_BIAS_ALIBI;
    p.bias = &al;
    CHECK_STATUS(stof_attention(ctx, &p, &q, &k3, &v3, mask, NULL, NULL, &o), STOF_ERR_SHAPE);
    stof_tensor tn = stof_tensor_make(table, STOF_F32, STOF_MEM_HOST, 4, bad_tn);
    p.bias_kind = STOF_BIAS_TENSOR;
    p.bias = &tn;
    CHECK_STATUS(stof_attention(ctx, &p, &q, &k3, &v3, mask, NULL, NULL, &o), STOF_ERR_SHAPE);
    p.bias = NULL;
    CHECK_STATUS(stof_attention(ctx, &p, &q, &k3, &v3, mask, NULL, NULL, &o), STOF_ERR_INVALID_ARG);
    p.bias_kind = STOF_BIAS_NONE;
    p.bias = &tn;
    CHECK_STATUS(stof_attention(ctx, &p, &q, &k3, &v3, mask, NULL, NULL, &o), STOF_ERR_INVALID_ARG);
    p.bias = NULL;
    p.bias_kind = (stof_attn_bias_kind)7;
    CHECK_STATUS(stof_attention(ctx, &p, &q, &k3, &v3, mask, NULL, NULL, &o), STOF_ERR_INVALID_ARG);
    p.bias_kind = STOF_BIAS_NONE;
    p.softcap = -1.0f;
    CHECK_STATUS(stof_attention(ctx, &p, &q, &k3, &v3, mask, NULL, NULL, &o), STOF_ERR_INVALID_ARG);
    p.softcap = NAN;
    CHECK_STATUS(stof_attention(ctx, &p, &q, &k3, &v3, mask, NULL, NULL, &o), STOF_ERR_INVALID_ARG);
    stof_mask_destroy(mask);
    stof_mask_spec_destroy(spec);
}

int main(void)
{
    test_rng_init(&rng, test_seed());
    stof_ctx_params cp = stof_ctx_default_params();
    cp.device = STOF_DEVICE_CPU;
    stof_ctx *ctx = NULL;
    CHECK_OK(stof_ctx_create(&cp, &ctx));
    if (!ctx) return test_finish("test_attn_cpu");
    const stof_dtype dts[3] = {STOF_F32, STOF_F16, STOF_BF16};
    for (int i = 0; i < 3; i++) {
        test_padded_strided(ctx, dts[i], "window:5:9,global:3", 0.0f);
        test_padded_strided(ctx, dts[i], "causal,random:8x2@11", 0.3f);
        test_packed(ctx, dts[i], "causal,window:2,random:4x1@5");
    }
    test_padded_strided(ctx, STOF_F32, "full", 0.0f);
    test_packed(ctx, STOF_F16, "full");
    test_per_head(ctx);
    test_misuse(ctx);
    /* Decoder and T5 features: GQA 4:2 and MQA, every bias kind, the cap. */
    for (int bias = STOF_BIAS_NONE; bias <= STOF_BIAS_TENSOR; bias++) {
        test_decoder_features(ctx, STOF_F32, bias, 0.0f, 2, "causal");
        test_decoder_features(ctx, STOF_BF16, bias, 0.0f, 1, "window:3:2,global:1");
        test_decoder_features(ctx, STOF_F16, bias, 0.0f, 4, "causal,topleft");
    }
    test_decoder_features(ctx, STOF_F32, STOF_BIAS_NONE, 2.5f, 1, "causal");
    test_decoder_features(ctx, STOF_F16, STOF_BIAS_T5, 4.0f, 2, "full");
    test_decoder_misuse(ctx);
    stof_ctx_destroy(ctx);
    return test_finish("test_attn_cpu");
}
