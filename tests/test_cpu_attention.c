/*
 * test_cpu_attention.c — cpu_attention against a dense formula written the
 * other way round: the whole [Lq, Lk] score matrix with -inf at masked
 * entries, a full softmax per row, then P V, with empty rows zeroed at the
 * end. Covers Lq != Lk, L = 1, D = 1..128, broadcast masks (stride 0), empty
 * rows (exact zeros), all-visible rows, large scores, and the permutation
 * property: reordering the keys, values and mask columns together changes
 * nothing.
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

int main(void)
{
    test_rng r;
    test_rng_init(&r, test_seed() ^ 0x44);
    test_by_hand();
    test_null_mask(&r);

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
