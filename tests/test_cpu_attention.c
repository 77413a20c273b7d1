/*
 * test_cpu_attention.c — cpu_attention against a dense formula written the
 * other way round: the whole [Lq, Lk] score matrix with -inf at masked
 * entries, a full softmax per row, then P V, with empty rows zeroed at the
 * end. Covers Lq != Lk, L = 1, D = 1..128, broadcast masks (stride 0), empty
 * rows (exact zeros), all-visible rows, large scores, and the permutation
 * property: reordering the keys, values and mask columns together changes
 * nothing. The extended form (cpu_attention_ex: grouped-query heads, soft
 * cap, T5/ALiBi/tensor biases at offset positions) against a formula with
 * each extra spelled out, and T5 buckets against values worked by hand.
 */
#include "cpu/cpu_ref.h"
#include "testlib.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct attn_case {
    int64_t B, H, Lq, Lk, D;
    int64_t mb, mh; /* mask planes along b and h (1 = broadcast) */
    float scale;
    float *q, *k, *v;
    uint8_t *mask;
} attn_case;

static int64_t mask_stride_b(const attn_case *c)
{
    return c->mb > 1 ? c->mh * c->Lq * c->Lk : 0;
}
static int64_t mask_stride_h(const attn_case *c)
{
    return c->mh > 1 ? c->Lq * c->Lk : 0;
}

static const uint8_t *mask_plane(const attn_case *c, int64_t b, int64_t h)
{
    return c->mask + b * mask_stride_b(c) + h * mask_stride_h(c);
}

static void reference_attention(const attn_case *c, float *out)
{
    int64_t Lq = c->Lq, Lk = c->Lk, D = c->D;
    double *scores = malloc(sizeof(double) * (size_t)(Lq * Lk));
    for (int64_t b = 0; b < c->B; b++) {
        for (int64_t h = 0; h < c->H; h++) {
            int64_t bh = b * c->H + h;
            const float *q = c->q + bh * Lq * D, *k = c->k + bh * Lk * D, *v = c->v + bh * Lk * D;
            const uint8_t *m = mask_plane(c, b, h);
            float *o = out + bh * Lq * D;
            for (int64_t i = 0; i < Lq; i++)
                for (int64_t j = 0; j < Lk; j++) {
                    double s = 0;
                    for (int64_t d = D - 1; d >= 0; d--)
                        s += (double)q[i * D + d] * k[j * D + d];
                    scores[i * Lk + j] = m[i * Lk + j] ? s * c->scale : -INFINITY;
                }
            for (int64_t i = 0; i < Lq; i++) {
                double *row = scores + i * Lk, mx = -INFINITY, sum = 0;
                for (int64_t j = 0; j < Lk; j++)
                    mx = fmax(mx, row[j]);
                for (int64_t j = 0; j < Lk; j++) {
                    row[j] = mx == -INFINITY ? 0.0 : exp(row[j] - mx);
                    sum += row[j];
                }
                for (int64_t j = 0; j < Lk; j++)
                    row[j] = sum > 0 ? row[j] / sum : 0.0;
            }
            for (int64_t d = 0; d < D; d++)
                for (int64_t i = 0; i < Lq; i++) {
                    double acc = 0;
                    for (int64_t j = 0; j < Lk; j++)
                        acc += scores[i * Lk + j] * v[j * D + d];
                    o[i * D + d] = (float)acc;
                }
        }
    }
    free(scores);
}

/* Density in [0, 1]; some rows are forced empty or fully visible. */
static void fill_mask(test_rng *r, attn_case *c, double density)
{
    int64_t rows = c->mb * c->mh * c->Lq;
    for (int64_t row = 0; row < rows; row++) {
        uint8_t *m = c->mask + row * c->Lk;
        int64_t kind = test_rng_int(r, 0, 9);
        for (int64_t j = 0; j < c->Lk; j++) {
            if (kind == 0)
                m[j] = 0;
            else if (kind == 1)
                m[j] = 1;
            else
                m[j] = test_rng_float(r, 0.0f, 1.0f) < density;
        }
    }
}

static void case_alloc(test_rng *r, attn_case *c, float input_range)
{
    int64_t nq = c->B * c->H * c->Lq * c->D, nk = c->B * c->H * c->Lk * c->D;
    c->q = malloc(sizeof(float) * (size_t)nq);
    c->k = malloc(sizeof(float) * (size_t)nk);
    c->v = malloc(sizeof(float) * (size_t)nk);
    c->mask = malloc((size_t)(c->mb * c->mh * c->Lq * c->Lk));
    test_fill_uniform(r, c->q, nq, -input_range, input_range);
    test_fill_uniform(r, c->k, nk, -input_range, input_range);
    test_fill_uniform(r, c->v, nk, -1.0f, 1.0f);
}

static void case_free(attn_case *c)
{
    free(c->q);
    free(c->k);
    free(c->v);
    free(c->mask);
}

static void run_attention(const attn_case *c, float *out)
{
    cpu_attention(c->q, c->k, c->v, out, c->B, c->H, c->Lq, c->Lk, c->D, c->mask, mask_stride_b(c),
                  mask_stride_h(c), c->scale);
}

/* Rows whose mask row is empty must be exact zeros; returns how many are not. */
static int64_t nonzero_empty_rows(const attn_case *c, const float *out, int64_t *n_empty)
{
    int64_t bad = 0;
    for (int64_t b = 0; b < c->B; b++)
        for (int64_t h = 0; h < c->H; h++)
            for (int64_t i = 0; i < c->Lq; i++) {
                const uint8_t *m = mask_plane(c, b, h) + i * c->Lk;
                int any = 0;
                for (int64_t j = 0; j < c->Lk; j++)
                    any |= m[j];
                if (any) continue;
                (*n_empty)++;
                const float *o = out + ((b * c->H + h) * c->Lq + i) * c->D;
                for (int64_t d = 0; d < c->D; d++)
                    if (o[d] != 0.0f || signbit(o[d])) {
                        bad++;
                        break;
                    }
            }
    return bad;
}

/* Keys, values and mask columns reordered by one random permutation. */
static void check_key_permutation(test_rng *r, const attn_case *c, const float *out)
{
    int64_t Lk = c->Lk, D = c->D;
    int64_t *perm = malloc(sizeof(int64_t) * (size_t)Lk);
    for (int64_t j = 0; j < Lk; j++)
        perm[j] = j;
    for (int64_t j = Lk - 1; j > 0; j--) {
        int64_t s = test_rng_int(r, 0, j), t = perm[j];
        perm[j] = perm[s], perm[s] = t;
    }
    attn_case p = *c;
    int64_t nk = c->B * c->H * Lk * D, mrows = c->mb * c->mh * c->Lq;
    p.k = malloc(sizeof(float) * (size_t)nk);
    p.v = malloc(sizeof(float) * (size_t)nk);
    p.mask = malloc((size_t)(mrows * Lk));
    for (int64_t bh = 0; bh < c->B * c->H; bh++)
        for (int64_t j = 0; j < Lk; j++) {
            memcpy(p.k + (bh * Lk + perm[j]) * D, c->k + (bh * Lk + j) * D,
                   sizeof(float) * (size_t)D);
            memcpy(p.v + (bh * Lk + perm[j]) * D, c->v + (bh * Lk + j) * D,
                   sizeof(float) * (size_t)D);
        }
    for (int64_t row = 0; row < mrows; row++)
        for (int64_t j = 0; j < Lk; j++)
            p.mask[row * Lk + perm[j]] = c->mask[row * Lk + j];
    int64_t n = c->B * c->H * c->Lq * D;
    float *pout = malloc(sizeof(float) * (size_t)n);
    test_poison_f32(pout, n);
    run_attention(&p, pout);
    double err = test_rel_err(pout, out, n);
    CHECK(err < 1e-6, "key permutation B=%lld H=%lld Lq=%lld Lk=%lld D=%lld: rel err %g",
          (long long)c->B, (long long)c->H, (long long)c->Lq, (long long)Lk, (long long)D, err);
    free(perm);
    free(p.k);
    free(p.v);
    free(p.mask);
    free(pout);
}

static void check_case(test_rng *r, attn_case *c, double density, float input_range)
{
    case_alloc(r, c, input_range);
    fill_mask(r, c, density);
    int64_t n = c->B * c->H * c->Lq * c->D;
    float *out = malloc(sizeof(float) * (size_t)n), *ref = malloc(sizeof(float) * (size_t)n);
    test_poison_f32(out, n);
    test_poison_f32(ref, n);
    run_attention(c, out);
    reference_attention(c, ref);
    double err = test_rel_err(out, ref, n);
    CHECK(err < 1e-6,
          "attention B=%lld H=%lld Lq=%lld Lk=%lld D=%lld mask %lldx%lld density %.2f range %g: "
          "rel err %g",
          (long long)c->B, (long long)c->H, (long long)c->Lq, (long long)c->Lk, (long long)c->D,
          (long long)c->mb, (long long)c->mh, density, input_range, err);
    int64_t n_empty = 0, bad = nonzero_empty_rows(c, out, &n_empty);
    CHECK(bad == 0, "%lld of %lld empty rows are not exact zeros", (long long)bad,
          (long long)n_empty);
    check_key_permutation(r, c, out);
    free(out);
    free(ref);
    case_free(c);
}

static attn_case make_case(int64_t B, int64_t H, int64_t Lq, int64_t Lk, int64_t D, int64_t mb,
                           int64_t mh)
{
    attn_case c = {B, H, Lq, Lk, D, mb, mh, 1.0f / sqrtf((float)D), NULL, NULL, NULL, NULL};
    return c;
}

/* Hand-checkable case: one query, two visible keys with equal scores -> mean of their values. */
static void test_by_hand(void)
{
    float q[2] = {1, 0}, k[3 * 2] = {1, 0, 5, 5, 1, 0}, v[3 * 2] = {2, 4, 100, 100, 6, -8};
    uint8_t mask[3] = {1, 0, 1};
    float out[2] = {NAN, NAN};
    cpu_attention(q, k, v, out, 1, 1, 1, 3, 2, mask, 0, 0, 0.5f);
    CHECK(out[0] == 4.0f && out[1] == -2.0f, "equal scores average the values: %g %g", out[0],
          out[1]);
    uint8_t none[3] = {0, 0, 0};
    out[0] = out[1] = NAN;
    cpu_attention(q, k, v, out, 1, 1, 1, 3, 2, none, 0, 0, 0.5f);
    CHECK(out[0] == 0.0f && out[1] == 0.0f, "empty row gives zeros: %g %g", out[0], out[1]);
    /* A single visible key returns its value row exactly, whatever the score. */
    uint8_t only_mid[3] = {0, 1, 0};
    cpu_attention(q, k, v, out, 1, 1, 1, 3, 2, only_mid, 0, 0, 1000.0f);
    CHECK(out[0] == 100.0f && out[1] == 100.0f, "one visible key: %g %g", out[0], out[1]);
}

/* A NULL mask means every key is visible; it must match an all-ones mask. */
static void test_null_mask(test_rng *r)
{
    attn_case c = make_case(2, 3, 17, 29, 64, 1, 1);
    case_alloc(r, &c, 1.0f);
    memset(c.mask, 1, (size_t)(c.Lq * c.Lk));
    int64_t n = c.B * c.H * c.Lq * c.D;
    float *a = malloc(sizeof(float) * (size_t)n), *b = malloc(sizeof(float) * (size_t)n);
    test_poison_f32(a, n);
    test_poison_f32(b, n);
    run_attention(&c, a);
    cpu_attention(c.q, c.k, c.v, b, c.B, c.H, c.Lq, c.Lk, c.D, NULL, 0, 0, c.scale);
    CHECK(memcmp(a, b, sizeof(float) * (size_t)n) == 0, "NULL mask == all-ones mask");
    free(a);
    free(b);
    case_free(&c);
}

/* Hugging Face's T5 buckets worked out by hand from its formula. */
static void test_t5_buckets(void)
{
    static const struct {
        int64_t rel;
        int bidir, want;
    } cases[] = {
        {0, 1, 0},     {-1, 1, 1},    {1, 1, 17},     {-7, 1, 7},    {-8, 1, 8},    {-16, 1, 10},
        {-127, 1, 15}, {-128, 1, 15}, {-1000, 1, 15}, {1000, 1, 31}, {16, 1, 26},   {5, 0, 0},
        {-5, 0, 5},    {-16, 0, 16},  {-32, 0, 21},   {-64, 0, 26},  {-200, 0, 31}, {0, 0, 0},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        int got = cpu_t5_bucket(cases[k].rel, cases[k].bidir, 32, 128);
        CHECK(got == cases[k].want, "T5 bucket of %lld (%s): %d, want %d", (long long)cases[k].rel,
              cases[k].bidir ? "bidirectional" : "unidirectional", got, cases[k].want);
    }
}

/* cpu_attention_ex against the dense formula with every extra spelled out:
 * kv head h / (H / Hkv), cap, then the bias at query position i + off[b]. */
static void reference_ex(const float *q, const float *k, const float *v, const uint8_t *mask,
                         int64_t B, int64_t H, int64_t Hkv, int64_t Lq, int64_t Lk, int64_t D,
                         float scale, const cpu_attn_extra *x, float *out)
{
    double *p = malloc(sizeof(double) * (size_t)Lk);
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < H; h++) {
            const int64_t hk = h / (H / Hkv), off = x->off ? x->off[b] : 0;
            const float *kh = k + (b * Hkv + hk) * Lk * D, *vh = v + (b * Hkv + hk) * Lk * D;
            for (int64_t i = 0; i < Lq; i++) {
                const float *qi = q + ((b * H + h) * Lq + i) * D;
                double mx = -INFINITY, sum = 0;
                for (int64_t j = 0; j < Lk; j++) {
                    double s = 0;
                    for (int64_t d = 0; d < D; d++)
                        s += (double)qi[d] * kh[j * D + d];
                    s *= scale;
                    if (x->softcap > 0) s = x->softcap * tanh(s / x->softcap);
                    int64_t rel = j - i - off;
                    if (x->bias_kind == CPU_BIAS_T5)
                        s += x->table[cpu_t5_bucket(rel, x->t5_bidirectional, x->t5_num_buckets,
                                                    x->t5_max_distance) *
                                          H +
                                      h];
                    if (x->bias_kind == CPU_BIAS_ALIBI) s += -x->table[h] * fabs((double)rel);
                    if (x->bias_kind == CPU_BIAS_TENSOR)
                        s += x->tensor[((b * H + h) * Lq + i) * Lk + j];
                    p[j] = mask[(i * Lk) + j] ? s : -INFINITY;
                    mx = fmax(mx, p[j]);
                }
                for (int64_t j = 0; j < Lk; j++) {
                    p[j] = mx == -INFINITY ? 0.0 : exp(p[j] - mx);
                    sum += p[j];
                }
                for (int64_t d = 0; d < D; d++) {
                    double acc = 0;
                    for (int64_t j = 0; j < Lk; j++)
                        acc += p[j] * vh[j * D + d];
                    out[((b * H + h) * Lq + i) * D + d] = sum > 0 ? (float)(acc / sum) : 0.0f;
                }
            }
        }
    free(p);
}

static void test_extras(test_rng *r)
{
    for (int it = 0; it < 48; it++) {
        const int64_t B = test_rng_int(r, 1, 2), Hkv = test_rng_int(r, 1, 2);
        const int64_t group = (int64_t[]){1, 2, 4}[it % 3], H = Hkv * group;
        const int64_t Lq = test_rng_int(r, 1, 24), Lk = test_rng_int(r, 1, 40);
        const int64_t D = test_rng_int(r, 1, 40);
        const float scale = test_rng_float(r, 0.1f, 1.0f);
        const int64_t nq = B * H * Lq * D, nk = B * Hkv * Lk * D;
        float *q = malloc(4 * (size_t)nq), *k = malloc(4 * (size_t)nk), *v = malloc(4 * (size_t)nk);
        float *got = malloc(4 * (size_t)nq), *want = malloc(4 * (size_t)nq);
        uint8_t *mask = malloc((size_t)(Lq * Lk));
        float table[32 * 8], tensor[2 * 8 * 24 * 40];
        int64_t off[2];
        for (int64_t e = 0; e < nq; e++)
            q[e] = test_rng_float(r, -2, 2);
        for (int64_t e = 0; e < nk; e++) {
            k[e] = test_rng_float(r, -2, 2);
            v[e] = test_rng_float(r, -1, 1);
        }
        for (int64_t e = 0; e < Lq * Lk; e++)
            mask[e] = test_rng_int(r, 0, 4) != 0;
        for (int e = 0; e < 32 * 8; e++)
            table[e] = test_rng_float(r, -3, 3);
        for (int64_t e = 0; e < B * H * Lq * Lk; e++)
            tensor[e] = test_rng_float(r, -4, 4);
        for (int b = 0; b < 2; b++)
            off[b] = test_rng_int(r, -5, 20);
        cpu_attn_extra x;
        memset(&x, 0, sizeof x);
        x.bias_kind = it % 4;
        x.table = table;
        x.heads = (int)H;
        x.t5_num_buckets = it % 8 < 4 ? 32 : 8;
        x.t5_bidirectional = it % 2;
        x.t5_max_distance = it % 8 < 4 ? 128 : 10;
        x.tensor = tensor;
        x.t_stride[0] = H * Lq * Lk;
        x.t_stride[1] = Lq * Lk;
        x.t_stride[2] = Lk;
        x.t_stride[3] = 1;
        x.softcap = it % 3 == 0 ? test_rng_float(r, 0.5f, 5.0f) : 0.0f;
        x.off = off;
        test_poison_f32(got, nq);
        cpu_attention_ex(q, k, v, got, B, H, Hkv, Lq, Lk, D, mask, 0, 0, scale, &x);
        reference_ex(q, k, v, mask, B, H, Hkv, Lq, Lk, D, scale, &x, want);
        double err = 0;
        for (int64_t e = 0; e < nq; e++)
            err = fmax(err, fabs((double)got[e] - want[e]));
        CHECK(err < 1e-5,
              "extras case %d (bias %d, cap %g, H %lld / Hkv %lld, %lldx%lld, D %lld): "
              "max error %g",
              it, x.bias_kind, (double)x.softcap, (long long)H, (long long)Hkv, (long long)Lq,
              (long long)Lk, (long long)D, err);
        /* Grouped heads equal the same call with K and V repeated per query head. */
        if (x.bias_kind == CPU_BIAS_NONE && x.softcap == 0.0f && group > 1) {
            float *kr = malloc(4 * (size_t)(nk * group)), *vr = malloc(4 * (size_t)(nk * group));
            for (int64_t b = 0; b < B; b++)
                for (int64_t h = 0; h < H; h++) {
                    size_t n = (size_t)(Lk * D), src = (size_t)((b * Hkv + h / group) * Lk * D);
                    memcpy(kr + (b * H + h) * Lk * D, k + src, 4 * n);
                    memcpy(vr + (b * H + h) * Lk * D, v + src, 4 * n);
                }
            cpu_attention(q, kr, vr, want, B, H, Lq, Lk, D, mask, 0, 0, scale);
            CHECK(memcmp(got, want, 4 * (size_t)nq) == 0, "GQA %lld:%lld equals repeated K/V",
                  (long long)H, (long long)Hkv);
            free(kr);
            free(vr);
        }
        free(q);
        free(k);
        free(v);
        free(got);
        free(want);
        free(mask);
    }
}

int main(void)
{
    test_rng r;
    test_rng_init(&r, test_seed() ^ 0x44);
    test_by_hand();
    test_null_mask(&r);
    test_t5_buckets();
    test_extras(&r);

    attn_case fixed[] = {
        make_case(1, 1, 1, 1, 1, 1, 1),     make_case(1, 1, 1, 7, 3, 1, 1),
        make_case(1, 2, 9, 1, 16, 1, 2),    make_case(2, 3, 33, 65, 64, 2, 3),
        make_case(2, 2, 64, 64, 128, 1, 1), make_case(3, 2, 40, 24, 32, 3, 1),
        make_case(2, 4, 16, 48, 129, 2, 4), make_case(1, 1, 5, 300, 7, 1, 1),
        make_case(1, 2, 6, 10, 257, 1, 2),
    };
    for (size_t i = 0; i < sizeof fixed / sizeof fixed[0]; i++)
        check_case(&r, &fixed[i], 0.5, 1.0f);

    for (int i = 0; i < 40; i++) {
        int64_t B = test_rng_int(&r, 1, 3), H = test_rng_int(&r, 1, 3);
        attn_case c = make_case(B, H, test_rng_int(&r, 1, 48), test_rng_int(&r, 1, 48),
                                test_rng_int(&r, 1, 128), test_rng_int(&r, 0, 1) ? B : 1,
                                test_rng_int(&r, 0, 1) ? H : 1);
        c.scale = test_rng_float(&r, 0.05f, 2.0f);
        double density = test_rng_float(&r, 0.0f, 1.0f);
        check_case(&r, &c, density, 1.0f);
    }
    /* Scores in the thousands: exp without the max subtracted would overflow. */
    attn_case big = make_case(1, 2, 20, 30, 128, 1, 2);
    big.scale = 1.0f;
    check_case(&r, &big, 0.7, 12.0f);
    return test_finish("test_cpu_attention");
}
