/*
 * test_attn_cpu_fast.c — the tile-walking CPU attention (attn_cpu_fast.c)
 * against the reference cpu_attention (double accumulation) fed with planes
 * built straight from the spec (stof_mask_spec_to_dense), on fresh random
 * inputs: dense, causal, window, dilated (split into residue classes),
 * longformer, bigbird, lengths, packed batches with their own cu_seqlens,
 * Lq != Lk, GQA, every tile shape, odd head dims, strided views, three
 * dtypes, and each instruction set the machine runs; then the executor's
 * entry over packed QKV rows (attn_cpu_fast_rows). Outputs are poisoned
 * first, so a row left unwritten fails.
 */
#include "attn/attn_cpu_fast.h"
#include "cpu/cpu_ref.h"
#include "testlib.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static test_rng rng;

typedef struct fcase {
    const char *spec;
    int B, H, Hk, Lq, Lk, D, tile_m, tile_n;
    bool lengths; /* the mask gets lengths (random per batch entry) */
    bool packed;  /* [T, H, D] with cu_seqlens (random lengths) */
    stof_dtype dt;
} fcase;

/* [B, H, L, D] (padded) or [T, H, D] (packed) over rows of D + pad elements. */
static stof_tensor make_view(void *data, stof_dtype dt, bool packed, int64_t B, int64_t H,
                             int64_t L, int64_t T, int64_t D, int64_t pad)
{
    int64_t row = D + pad;
    if (packed) {
        int64_t shape[3] = {T, H, D};
        stof_tensor t = stof_tensor_make(data, dt, STOF_MEM_HOST, 3, shape);
        t.stride[0] = H * row;
        t.stride[1] = row;
        t.stride[2] = 1;
        return t;
    }
    int64_t shape[4] = {B, H, L, D};
    stof_tensor t = stof_tensor_make(data, dt, STOF_MEM_HOST, 4, shape);
    t.stride[0] = L * H * row; /* stored [B, L, H, D + pad] */
    t.stride[1] = row;
    t.stride[2] = H * row;
    t.stride[3] = 1;
    return t;
}

/* Offset of (b, h, i) in a view: padded row i of (b, h), or packed token cu[b] + i. */
static int64_t elem(const stof_tensor *t, const int32_t *cu, int b, int h, int i)
{
    if (cu) return ((int64_t)cu[b] + i) * t->stride[0] + (int64_t)h * t->stride[1];
    return (int64_t)b * t->stride[0] + (int64_t)h * t->stride[1] + (int64_t)i * t->stride[2];
}

/* Random values written into (b, h, rows < len[b]) of the view; a contiguous
 * fp32 copy [B][H][L][D] of what was stored goes to ref. */
static void fill(stof_tensor *t, const int32_t *cu, int B, int H, int L, const int *len, int D,
                 float amp, float *ref)
{
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++)
            for (int i = 0; i < len[b]; i++) {
                int64_t off = elem(t, cu, b, h, i);
                float *dst = ref + (((int64_t)b * H + h) * L + i) * D;
                for (int d = 0; d < D; d++) {
                    stof_store_f(t->data, t->dtype, off + d, test_rng_float(&rng, -amp, amp));
                    dst[d] = stof_load_f(t->data, t->dtype, off + d);
                }
            }
}

static double tolerance(stof_dtype dt)
{
    return dt == STOF_F32 ? 2e-5 : dt == STOF_F16 ? 2e-3 : 1e-2;
}

static void run_case(stof_ctx *ctx, const fcase *c, const char *isa)
{
    int B = c->B, H = c->H, Hk = c->Hk, Lq = c->Lq, Lk = c->Lk, D = c->D, G = H / Hk;
    int32_t lens_q[8], lens_k[8], cu_q[9] = {0}, cu_k[9] = {0};
    int rows_q[8], rows_k[8]; /* rows present in the tensors per batch entry */
    for (int b = 0; b < B; b++) {
        lens_q[b] = (int32_t)test_rng_int(&rng, 0, Lq);
        lens_k[b] = (int32_t)test_rng_int(&rng, 1, Lk);
        rows_q[b] = c->packed ? (int)test_rng_int(&rng, 0, Lq) : Lq;
        rows_k[b] = c->packed ? (int)test_rng_int(&rng, 0, Lk) : Lk;
        cu_q[b + 1] = cu_q[b] + rows_q[b];
        cu_k[b + 1] = cu_k[b] + rows_k[b];
    }
    const int32_t *mq = c->lengths ? lens_q : NULL, *mk = c->lengths ? lens_k : NULL;
    stof_mask_spec *spec = NULL;
    CHECK_OK(stof_mask_spec_parse(c->spec, &spec));
    int64_t bshape[1] = {B}, cshape[1] = {B + 1};
    stof_tensor tlq = stof_tensor_make(lens_q, STOF_I32, STOF_MEM_HOST, 1, bshape);
    stof_tensor tlk = stof_tensor_make(lens_k, STOF_I32, STOF_MEM_HOST, 1, bshape);
    stof_mask_params mp = stof_mask_default_params();
    mp.batch = B;
    mp.heads = H;
    mp.len_q = Lq;
    mp.len_k = Lk;
    mp.lengths_q = mq ? &tlq : NULL;
    mp.lengths_k = mk ? &tlk : NULL;
    mp.tile_m = c->tile_m;
    mp.tile_n = c->tile_n;
    stof_mask *mask = NULL;
    CHECK_OK(stof_mask_compile(ctx, spec, &mp, &mask));

    int pad = (int)test_rng_int(&rng, 0, 3);
    size_t es = stof_dtype_size(c->dt);
    int64_t Tq = cu_q[B], Tk = cu_k[B];
    int64_t nq = c->packed ? Tq * H : (int64_t)B * H * Lq,
            nk = c->packed ? Tk * Hk : (int64_t)B * Hk * Lk;
    void *qb = calloc((size_t)(nq + 1) * (D + pad), es),
         *ob = malloc((size_t)(nq + 1) * (D + pad) * es);
    void *kb = calloc((size_t)(nk + 1) * (D + pad), es),
         *vb = calloc((size_t)(nk + 1) * (D + pad), es);
    stof_tensor q = make_view(qb, c->dt, c->packed, B, H, Lq, Tq, D, pad);
    stof_tensor k = make_view(kb, c->dt, c->packed, B, Hk, Lk, Tk, D, pad);
    stof_tensor v = make_view(vb, c->dt, c->packed, B, Hk, Lk, Tk, D, pad);
    stof_tensor o = make_view(ob, c->dt, c->packed, B, H, Lq, Tq, D, pad);
    const int32_t *cq = c->packed ? cu_q : NULL, *ck = c->packed ? cu_k : NULL;
    float *qf = calloc((size_t)B * H * Lq * D, 4), *kf = calloc((size_t)B * Hk * Lk * D, 4);
    float *vf = calloc((size_t)B * Hk * Lk * D, 4);
    fill(&q, cq, B, H, Lq, rows_q, D, 2.0f, qf);
    fill(&k, ck, B, Hk, Lk, rows_k, D, 2.0f, kf);
    fill(&v, ck, B, Hk, Lk, rows_k, D, 1.0f, vf);
    test_poison_bytes(ob, (size_t)(nq + 1) * (D + pad) * es);

    stof_tensor tcq = stof_tensor_make(cu_q, STOF_I32, STOF_MEM_HOST, 1, cshape);
    stof_tensor tck = stof_tensor_make(cu_k, STOF_I32, STOF_MEM_HOST, 1, cshape);
    attn_shape s;
    memset(&s, 0, sizeof s);
    s.packed = c->packed;
    s.dtype = c->dt;
    s.B = B;
    s.H = H;
    s.Lq = Lq;
    s.Lk = Lk;
    s.D = D;
    s.Tq = Tq;
    s.Tk = Tk;
    s.scale = 1.0f / sqrtf((float)D);
    CHECK(attn_cpu_fast_supports(&s, &q, &k, &v, &o), "%s: not supported", c->spec);
    CHECK_OK(attn_cpu_fast_run(&s, &q, &k, &v, mask, c->packed ? &tcq : NULL,
                               c->packed ? &tck : NULL, &o));

    uint8_t *plane = malloc((size_t)Lq * Lk), *sub = malloc((size_t)Lq * Lk);
    float *ref = malloc((size_t)Lq * D * 4);
    int64_t bad = 0;
    double worst = 0.0;
    for (int b = 0; b < B; b++) {
        for (int h = 0; h < H; h++) {
            CHECK_OK(stof_mask_spec_to_dense(spec, B, H, Lq, Lk, mq, mk, b, h, plane));
            int lq = rows_q[b], lk = rows_k[b];
            for (int i = 0; i < lq; i++)
                memcpy(sub + (int64_t)i * lk, plane + (int64_t)i * Lk, (size_t)lk);
            int64_t kv = ((int64_t)b * Hk + h / G) * Lk * D;
            cpu_attention(qf + ((int64_t)b * H + h) * Lq * D, kf + kv, vf + kv, ref, 1, 1, lq, lk,
                          D, sub, 0, 0, s.scale);
            for (int i = 0; i < lq; i++) {
                int64_t off = elem(&o, cq, b, h, i);
                for (int d = 0; d < D; d++) {
                    double got = stof_load_f(o.data, c->dt, off + d), want = ref[i * D + d];
                    double err = fabs(got - want);
                    if (!(err <= tolerance(c->dt))) {
                        if (bad++ == 0)
                            fprintf(stderr, "  first miss: b %d h %d row %d dim %d: %g vs %g\n", b,
                                    h, i, d, got, want);
                    }
                    if (err > worst || err != err) worst = err;
                }
            }
        }
    }
    CHECK(bad == 0, "%s [%s] %s B%d H%d/%d Lq%d Lk%d D%d tiles %dx%d%s%s: %lld misses, worst %g",
          c->spec, isa, stof_dtype_name(c->dt), B, H, Hk, Lq, Lk, D, c->tile_m, c->tile_n,
          c->lengths ? " lengths" : "", c->packed ? " packed" : "", (long long)bad, worst);
    free(plane), free(sub), free(ref), free(qf), free(kf), free(vf);
    free(qb), free(kb), free(vb), free(ob);
    stof_mask_destroy(mask);
    stof_mask_spec_destroy(spec);
}

static const char *const specs[] = {
    "full",
    "causal",
    "window:5",
    "window:3:9",
    "window:40",
    "dilated:4x2",
    "dilated:3x3",
    "window:16,global:4",
    "global:[0,7,30],window:8",
    "random:16x2@11,window:16,global:2",
    "causal,window:20",
    "blocks:64:1001/0110/1010/0101",
};

static const int tiles[] = {16, 32, 64, 128};
static const int dims[] = {8, 16, 24, 32, 40, 64, 80, 128};

static void random_cases(stof_ctx *ctx, const char *isa, int n)
{
    for (int it = 0; it < n; it++) {
        fcase c;
        memset(&c, 0, sizeof c);
        c.spec = specs[test_rng_int(&rng, 0, (int)(sizeof specs / sizeof specs[0]) - 1)];
        c.B = (int)test_rng_int(&rng, 1, 3);
        c.Hk = (int)test_rng_int(&rng, 1, 2);
        c.H = c.Hk * (int)test_rng_int(&rng, 1, 3);
        c.Lq = (int)test_rng_int(&rng, 1, 200);
        c.Lk = test_rng_int(&rng, 0, 2) == 0 ? (int)test_rng_int(&rng, 1, 200) : c.Lq;
        c.D = dims[test_rng_int(&rng, 0, 7)];
        c.tile_m = tiles[test_rng_int(&rng, 0, 3)];
        c.tile_n = tiles[test_rng_int(&rng, 0, 3)];
        c.lengths = test_rng_int(&rng, 0, 1);
        c.packed = test_rng_int(&rng, 0, 2) == 0;
        int dt = (int)test_rng_int(&rng, 0, 3);
        c.dt = dt == 0 ? STOF_BF16 : dt == 1 ? STOF_F16 : STOF_F32;
        run_case(ctx, &c, isa);
    }
}

/* Cases the random draw may miss: residue-class split (no lengths, d | L),
 * sizes that span many tiles, and every spec at the model's shapes. */
static void fixed_cases(stof_ctx *ctx, const char *isa)
{
    const fcase cases[] = {
        {"dilated:4x2", 2, 2, 2, 128, 128, 64, 64, 64, false, false, STOF_F32},
        {"dilated:3x3", 1, 2, 1, 96, 96, 32, 32, 32, false, false, STOF_F32},
        {"dilated:4x2", 2, 2, 2, 128, 128, 64, 64, 64, false, true, STOF_F32},
        {"causal", 1, 2, 2, 700, 700, 64, 64, 64, false, false, STOF_F32},
        {"window:128", 1, 2, 1, 900, 900, 64, 64, 64, false, false, STOF_F32},
        {"window:128,global:32", 1, 2, 2, 600, 600, 64, 64, 64, true, false, STOF_F32},
        {"random:64x3@5,window:64,global:64", 2, 2, 2, 512, 512, 64, 64, 64, true, false,
         STOF_BF16},
        {"full", 3, 12, 12, 37, 37, 32, 64, 64, true, false, STOF_F32},
        {"full", 4, 12, 12, 40, 40, 32, 64, 64, false, true, STOF_F32},
        {"causal", 2, 4, 4, 300, 500, 128, 128, 64, false, false, STOF_F32},
        {"full", 1, 1, 1, 1, 1, 1, 16, 16, false, false, STOF_F32},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        run_case(ctx, &cases[i], isa);
}

/* GQA: k and v with fewer heads than q, shared by groups of query heads. */
static void gqa_cases(stof_ctx *ctx, const char *isa)
{
    const fcase cases[] = {
        {"causal", 2, 8, 2, 130, 130, 64, 64, 64, false, false, STOF_F32},
        {"window:20", 1, 6, 3, 77, 91, 32, 32, 64, true, true, STOF_BF16},
        {"full", 1, 4, 1, 50, 50, 128, 64, 64, false, false, STOF_F16},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        run_case(ctx, &cases[i], isa);
}

/* attn_cpu_fast_rows: q, k, v as column blocks of packed rows, as the CPU
 * executor holds them after its QKV projection, GQA included. */
static void rows_case(stof_ctx *ctx, const char *text, int B, int L, int H, int Hk, int D)
{
    int32_t lens[8], cu[9] = {0};
    for (int b = 0; b < B; b++) {
        lens[b] = (int32_t)test_rng_int(&rng, 0, L);
        cu[b + 1] = cu[b] + lens[b];
    }
    int64_t T = cu[B], width = (int64_t)(H + 2 * Hk) * D;
    stof_mask_spec *spec = NULL;
    CHECK_OK(stof_mask_spec_parse(text, &spec));
    int64_t bshape[1] = {B};
    stof_tensor tl = stof_tensor_make(lens, STOF_I32, STOF_MEM_HOST, 1, bshape);
    stof_mask_params mp = stof_mask_default_params();
    mp.batch = B;
    mp.heads = H;
    mp.len_q = mp.len_k = L;
    mp.lengths_q = &tl;
    stof_mask *mask = NULL;
    CHECK_OK(stof_mask_compile(ctx, spec, &mp, &mask));
    float *qkv = malloc((size_t)(T * width + 1) * 4), *out = malloc((size_t)(T * H * D + 1) * 4);
    test_fill_uniform(&rng, qkv, T * width, -2.0f, 2.0f);
    test_poison_f32(out, T * H * D);
    float scale = 1.0f / sqrtf((float)D);
    CHECK_OK(attn_cpu_fast_rows(qkv, out, T, B, L, H, Hk, D, cu, mask, scale));
    float *q = malloc((size_t)L * D * 4), *k = malloc((size_t)L * D * 4);
    float *v = malloc((size_t)L * D * 4), *ref = malloc((size_t)L * D * 4);
    uint8_t *plane = malloc((size_t)L * L), *sub = malloc((size_t)L * L);
    double worst = 0.0;
    for (int b = 0; b < B; b++) {
        int len = lens[b];
        for (int h = 0; h < H; h++) {
            CHECK_OK(stof_mask_spec_to_dense(spec, B, H, L, L, lens, lens, b, h, plane));
            for (int i = 0; i < len; i++) {
                memcpy(sub + (int64_t)i * len, plane + (int64_t)i * L, (size_t)len);
                const float *row = qkv + (cu[b] + i) * width;
                int hk = h / (H / Hk);
                memcpy(q + (int64_t)i * D, row + (int64_t)h * D, (size_t)D * 4);
                memcpy(k + (int64_t)i * D, row + (int64_t)(H + hk) * D, (size_t)D * 4);
                memcpy(v + (int64_t)i * D, row + (int64_t)(H + Hk + hk) * D, (size_t)D * 4);
            }
            cpu_attention(q, k, v, ref, 1, 1, len, len, D, sub, 0, 0, scale);
            for (int i = 0; i < len; i++)
                for (int d = 0; d < D; d++) {
                    double err =
                        fabs((double)out[(cu[b] + i) * H * D + h * D + d] - ref[i * D + d]);
                    if (err > worst || err != err) worst = err;
                }
        }
    }
    CHECK(worst <= tolerance(STOF_F32), "rows %s B%d L%d H%d/%d D%d: worst error %g", text, B, L, H,
          Hk, D, worst);
    free(qkv), free(out), free(q), free(k), free(v), free(ref), free(plane), free(sub);
    stof_mask_destroy(mask);
    stof_mask_spec_destroy(spec);
}

int main(void)
{
    test_rng_init(&rng, test_seed());
    unsetenv("STOF_CPU_REFERENCE"); /* the fast path is what is on trial */
    const char *isas[] = {"avx512", "avx2", "base"};
    int threads[] = {3, 1, 2};
    for (int i = 0; i < 3; i++) {
        if (!attn_cpu_fast_force_isa(isas[i])) {
            fprintf(stderr, "  %s: not on this machine\n", isas[i]);
            continue;
        }
        stof_ctx_params cp = stof_ctx_default_params();
        cp.device = STOF_DEVICE_CPU;
        cp.cpu_threads = threads[i];
        stof_ctx *ctx = NULL;
        CHECK_OK(stof_ctx_create(&cp, &ctx));
        fixed_cases(ctx, isas[i]);
        gqa_cases(ctx, isas[i]);
        random_cases(ctx, isas[i], 60);
        rows_case(ctx, "full", 5, 40, 12, 12, 32);
        rows_case(ctx, "causal", 3, 70, 8, 2, 64);
        rows_case(ctx, "window:8,global:2", 2, 150, 4, 4, 16);
        stof_ctx_destroy(ctx);
    }
    CHECK(attn_cpu_fast_force_isa("base"), "the baseline inner loops always run");
    attn_cpu_fast_force_isa(NULL);
    return test_finish("test_attn_cpu_fast");
}
