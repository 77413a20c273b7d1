/*
 * test_cpu_batch.c — padding-free batches: cu_seqlens, pack/unpack round trip
 * with zeros at padding (lengths 0 and L included), lengths from an HF
 * attention_mask (prefixes accepted, holes and non-0/1 values rejected with
 * the row named), BERT embeddings against a direct double computation, and
 * mean pooling including an empty sequence.
 */
#include "cpu/cpu_ref.h"
#include "testlib.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static void random_lengths(test_rng *r, int32_t *lengths, int64_t B, int64_t L)
{
    for (int64_t b = 0; b < B; b++)
        lengths[b] = (int32_t)test_rng_int(r, 0, L);
    lengths[0] = 0;
    if (B > 1) lengths[1] = (int32_t)L;
}

static void test_pack_round_trip(test_rng *r, int64_t B, int64_t L, int64_t W)
{
    int32_t *lengths = malloc(sizeof(int32_t) * (size_t)B);
    int32_t *cu = malloc(sizeof(int32_t) * (size_t)(B + 1));
    random_lengths(r, lengths, B, L);
    int64_t T = cpu_cu_seqlens(lengths, B, cu);
    int64_t sum = 0, bad_cu = cu[0] != 0;
    for (int64_t b = 0; b < B; b++) {
        sum += lengths[b];
        bad_cu += cu[b + 1] != sum;
    }
    CHECK(T == sum && bad_cu == 0, "cu_seqlens: T=%lld want %lld, %lld wrong entries", (long long)T,
          (long long)sum, (long long)bad_cu);

    int64_t n = B * L * W;
    float *padded = malloc(sizeof(float) * (size_t)n), *back = malloc(sizeof(float) * (size_t)n);
    float *packed = malloc(sizeof(float) * (size_t)(T > 0 ? T * W : 1));
    test_fill_uniform(r, padded, n, -1.0f, 1.0f);
    test_poison_f32(packed, T * W);
    test_poison_f32(back, n);
    cpu_pack(padded, lengths, B, L, W, packed);
    int64_t bad_pack = 0;
    for (int64_t b = 0; b < B; b++)
        for (int64_t i = 0; i < lengths[b]; i++)
            for (int64_t c = 0; c < W; c++)
                bad_pack += packed[(cu[b] + i) * W + c] != padded[(b * L + i) * W + c];
    CHECK(bad_pack == 0, "pack B=%lld L=%lld W=%lld: %lld wrong", (long long)B, (long long)L,
          (long long)W, (long long)bad_pack);

    cpu_unpack(packed, lengths, B, L, W, back);
    int64_t bad_real = 0, bad_pad = 0;
    for (int64_t b = 0; b < B; b++)
        for (int64_t i = 0; i < L; i++)
            for (int64_t c = 0; c < W; c++) {
                int64_t at = (b * L + i) * W + c;
                if (i < lengths[b])
                    bad_real += back[at] != padded[at];
                else
                    bad_pad += back[at] != 0.0f;
            }
    CHECK(bad_real == 0 && bad_pad == 0, "unpack: %lld wrong tokens, %lld non-zero padding",
          (long long)bad_real, (long long)bad_pad);
    free(lengths);
    free(cu);
    free(padded);
    free(back);
    free(packed);
}

static void test_lengths_from_mask(void)
{
    const int32_t good[4 * 5] = {1,       1, 1, 0, 0, /* */ 0, 0, 0, 0, 0, /* */ 1, 1, 1, 1, 1,
                                 /* */ 1, 0, 0, 0, 0};
    int32_t lengths[4] = {-7, -7, -7, -7};
    int64_t bad_row = -5;
    int rc = cpu_lengths_from_attention_mask(good, 4, 5, lengths, &bad_row);
    CHECK(rc == 0 && lengths[0] == 3 && lengths[1] == 0 && lengths[2] == 5 && lengths[3] == 1,
          "prefix rows: rc %d lengths %d %d %d %d", rc, lengths[0], lengths[1], lengths[2],
          lengths[3]);
    CHECK(bad_row == -5, "bad_row untouched on success (%lld)", (long long)bad_row);

    const int32_t hole[3 * 3] = {1, 1, 0, /* */ 1, 0, 1, /* */ 1, 1, 1};
    rc = cpu_lengths_from_attention_mask(hole, 3, 3, lengths, &bad_row);
    CHECK(rc == -1 && bad_row == 1, "row 1 0 1 rejected: rc %d bad_row %lld", rc,
          (long long)bad_row);

    const int32_t leading_zero[2 * 3] = {1, 1, 1, /* */ 0, 1, 1};
    bad_row = -5;
    rc = cpu_lengths_from_attention_mask(leading_zero, 2, 3, lengths, &bad_row);
    CHECK(rc == -1 && bad_row == 1, "row 0 1 1 rejected: rc %d bad_row %lld", rc,
          (long long)bad_row);

    const int32_t not_binary[2 * 2] = {1, 2, /* */ 1, 1};
    bad_row = -5;
    rc = cpu_lengths_from_attention_mask(not_binary, 2, 2, lengths, &bad_row);
    CHECK(rc == -1 && bad_row == 0, "value 2 rejected: rc %d bad_row %lld", rc, (long long)bad_row);
}

static void test_embeddings(test_rng *r)
{
    const int64_t vocab = 50, max_pos = 40, n_types = 2, hidden = 96, T = 23;
    const float eps = 1e-12f;
    float *word = malloc(sizeof(float) * (size_t)(vocab * hidden));
    float *pos = malloc(sizeof(float) * (size_t)(max_pos * hidden));
    float *type = malloc(sizeof(float) * (size_t)(n_types * hidden));
    float *gamma = malloc(sizeof(float) * (size_t)hidden),
          *beta = malloc(sizeof(float) * (size_t)hidden);
    float *out = malloc(sizeof(float) * (size_t)(T * hidden)),
          *ref = malloc(sizeof(float) * (size_t)(T * hidden));
    int32_t ids[23], positions[23], types[23], zeros[23];
    test_fill_uniform(r, word, vocab * hidden, -1.0f, 1.0f);
    test_fill_uniform(r, pos, max_pos * hidden, -0.5f, 0.5f);
    test_fill_uniform(r, type, n_types * hidden, -0.5f, 0.5f);
    test_fill_uniform(r, gamma, hidden, 0.5f, 1.5f);
    test_fill_uniform(r, beta, hidden, -0.5f, 0.5f);
    for (int64_t t = 0; t < T; t++) {
        ids[t] = (int32_t)test_rng_int(r, 0, vocab - 1);
        positions[t] = (int32_t)test_rng_int(r, 0, max_pos - 1);
        types[t] = (int32_t)test_rng_int(r, 0, n_types - 1);
        zeros[t] = 0;
    }
    for (int64_t t = 0; t < T; t++) {
        double v[96], mean = 0, var = 0;
        for (int64_t c = 0; c < hidden; c++) {
            v[c] = (double)word[ids[t] * hidden + c] + pos[positions[t] * hidden + c] +
                   type[types[t] * hidden + c];
            mean += v[c] / (double)hidden;
        }
        for (int64_t c = 0; c < hidden; c++)
            var += (v[c] - mean) * (v[c] - mean) / (double)hidden;
        for (int64_t c = 0; c < hidden; c++)
            ref[t * hidden + c] = (float)((v[c] - mean) / sqrt(var + eps) * gamma[c] + beta[c]);
    }
    test_poison_f32(out, T * hidden);
    cpu_embeddings(ids, positions, types, T, word, pos, type, gamma, beta, hidden, eps, out);
    double err = test_rel_err(out, ref, T * hidden);
    CHECK(err < 1e-6, "embeddings rel err %g", err);

    /* types == NULL means type 0 for every token. */
    float *out_null = malloc(sizeof(float) * (size_t)(T * hidden));
    test_poison_f32(out_null, T * hidden);
    test_poison_f32(out, T * hidden);
    cpu_embeddings(ids, positions, NULL, T, word, pos, type, gamma, beta, hidden, eps, out_null);
    cpu_embeddings(ids, positions, zeros, T, word, pos, type, gamma, beta, hidden, eps, out);
    CHECK(memcmp(out, out_null, sizeof(float) * (size_t)(T * hidden)) == 0,
          "types NULL == all type 0");
    free(word);
    free(pos);
    free(type);
    free(gamma);
    free(beta);
    free(out);
    free(ref);
    free(out_null);
}

static void test_mean_pool(test_rng *r)
{
    const int64_t B = 5, W = 300; /* W > one accumulation slice */
    const int32_t lengths[5] = {3, 0, 1, 17, 6};
    int32_t cu[6];
    int64_t T = cpu_cu_seqlens(lengths, B, cu);
    float *packed = malloc(sizeof(float) * (size_t)(T * W));
    float out[5 * 300], ref[5 * 300];
    test_fill_uniform(r, packed, T * W, -2.0f, 2.0f);
    for (int64_t b = 0; b < B; b++)
        for (int64_t c = 0; c < W; c++) {
            double s = 0;
            for (int64_t t = cu[b]; t < cu[b + 1]; t++)
                s += packed[t * W + c];
            ref[b * W + c] = lengths[b] ? (float)(s / lengths[b]) : 0.0f;
        }
    test_poison_f32(out, B * W);
    cpu_mean_pool(packed, cu, B, W, out);
    double err = test_rel_err(out, ref, B * W);
    CHECK(err < 1e-6, "mean_pool rel err %g", err);
    int bad_empty = 0;
    for (int64_t c = 0; c < W; c++)
        bad_empty += out[1 * W + c] != 0.0f;
    CHECK(bad_empty == 0, "empty sequence pools to zeros (%d not)", bad_empty);
    int bad_single = 0;
    for (int64_t c = 0; c < W; c++)
        bad_single += out[2 * W + c] != packed[cu[2] * W + c];
    CHECK(bad_single == 0, "one-token sequence pools to itself (%d not)", bad_single);
    free(packed);
}

int main(void)
{
    test_rng r;
    test_rng_init(&r, test_seed() ^ 0x55);
    test_pack_round_trip(&r, 1, 1, 1);
    test_pack_round_trip(&r, 2, 1, 3);
    test_pack_round_trip(&r, 6, 37, 64);
    for (int i = 0; i < 10; i++)
        test_pack_round_trip(&r, test_rng_int(&r, 1, 9), test_rng_int(&r, 1, 50),
                             test_rng_int(&r, 1, 100));
    test_lengths_from_mask();
    test_embeddings(&r);
    test_mean_pool(&r);
    return test_finish("test_cpu_batch");
}
