/*
 * batch.c — padding-free batches (ByteTransformer): prefix sums of the
 * sequence lengths, pack [B, L, W] -> [T, W] and back with zeros at padding,
 * lengths from an HF attention_mask, and mean pooling of packed rows.
 * Lengths are trusted here (the public API validates them); the attention_mask
 * is not, since it comes straight from the user.
 */
#include "cpu/cpu_ref.h"

#include <string.h>

int64_t cpu_cu_seqlens(const int32_t *lengths, int64_t B, int32_t *cu_seqlens)
{
    int64_t total = 0;
    cu_seqlens[0] = 0;
    for (int64_t b = 0; b < B; b++) {
        total += lengths[b];
        cu_seqlens[b + 1] = (int32_t)total;
    }
    return total;
}

void cpu_pack(const float *padded, const int32_t *lengths, int64_t B, int64_t L, int64_t W,
              float *packed)
{
    int64_t t = 0;
    for (int64_t b = 0; b < B; b++) {
        size_t bytes = (size_t)lengths[b] * (size_t)W * sizeof(float);
        if (bytes) memcpy(packed + t * W, padded + b * L * W, bytes);
        t += lengths[b];
    }
}

void cpu_unpack(const float *packed, const int32_t *lengths, int64_t B, int64_t L, int64_t W,
                float *padded)
{
    int64_t t = 0;
    for (int64_t b = 0; b < B; b++) {
        int64_t len = lengths[b];
        float *seq = padded + b * L * W;
        if (len > 0) memcpy(seq, packed + t * W, (size_t)(len * W) * sizeof(float));
        if (len < L) memset(seq + len * W, 0, (size_t)((L - len) * W) * sizeof(float));
        t += len;
    }
}

/* The number of leading ones, or -1 when anything after them is not a zero. */
static int64_t prefix_length(const int32_t *row, int64_t L)
{
    int64_t n = 0;
    while (n < L && row[n] == 1)
        n++;
    for (int64_t j = n; j < L; j++)
        if (row[j] != 0) return -1;
    return n;
}

int cpu_lengths_from_attention_mask(const int32_t *attention_mask, int64_t B, int64_t L,
                                    int32_t *lengths, int64_t *bad_row)
{
    for (int64_t b = 0; b < B; b++) {
        int64_t n = prefix_length(attention_mask + b * L, L);
        if (n < 0) {
            if (bad_row) *bad_row = b;
            return -1;
        }
        lengths[b] = (int32_t)n;
    }
    return 0;
}

enum { POOL_SLICE = 256 };

/* Columns are summed in stack slices of doubles so pooling allocates nothing. */
void cpu_mean_pool(const float *packed, const int32_t *cu_seqlens, int64_t B, int64_t W, float *out)
{
    for (int64_t b = 0; b < B; b++) {
        int64_t first = cu_seqlens[b], count = cu_seqlens[b + 1] - cu_seqlens[b];
        for (int64_t c0 = 0; c0 < W; c0 += POOL_SLICE) {
            int64_t width = W - c0 < POOL_SLICE ? W - c0 : POOL_SLICE;
            double acc[POOL_SLICE] = {0};
            for (int64_t t = first; t < first + count; t++)
                for (int64_t c = 0; c < width; c++)
                    acc[c] += (double)packed[t * W + c0 + c];
            for (int64_t c = 0; c < width; c++)
                out[b * W + c0 + c] = count > 0 ? (float)(acc[c] / (double)count) : 0.0f;
        }
    }
}
