/*
 * family_golden.h — the golden files of tests/data/families
 * (gen_family_golden.py): a right-padded batch (ids, lengths) and Hugging
 * Face's fp32 outputs for it, read by the CPU test of every family
 * (test_model_family.c) and the GPU one (test_model_golden_gpu.c), and the
 * error they both report: max |out - ref| / max |ref| over the real tokens.
 */
#ifndef STOF_TEST_FAMILY_GOLDEN_H
#define STOF_TEST_FAMILY_GOLDEN_H

#include "io/safetensors.h"

#include <stdbool.h>
#include <stdint.h>

typedef struct family_golden {
    safetensors_file *f;
    const int32_t *ids, *lengths; /* [B, L] (0 past a length), [B] */
    int B, L;
} family_golden;

/* Opens tests/data/families/<name>.golden.safetensors; exits on failure. */
void family_golden_open(const char *name, family_golden *g);
void family_golden_close(family_golden *g);
/* The f32 tensor name of numel elements; exits when it is missing or misshapen. */
const float *family_golden_f32(const family_golden *g, const char *name, int64_t numel);
/* Real tokens of the batch. */
int64_t family_golden_tokens(const family_golden *g);
/* max |out - ref| / max |ref| over rows [b, i < lengths[b]] of [B, L, W] refs;
 * out is [B, L, W] too, or the packed real rows [T, W] when packed. A NaN in
 * out gives +inf. */
double family_golden_err(const float *out, const float *ref, const family_golden *g, int64_t W,
                         bool packed);
/* The same over each sequence's last real row: out [B, W] against the refs'
 * rows (b, lengths[b] - 1) of [B, L, W] (last-token logits, last-token
 * pooling); sequences of length 0 are skipped. */
double family_golden_last_err(const float *out, const float *ref, const family_golden *g,
                              int64_t W);
/* Whether the padding rows of a [B, L, W] output are exact zeros. */
bool family_golden_padding_zero(const float *out, const family_golden *g, int64_t W);

#endif /* STOF_TEST_FAMILY_GOLDEN_H */
