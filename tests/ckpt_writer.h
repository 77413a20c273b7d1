/*
 * ckpt_writer.h — random-weight Hugging Face checkpoints written by tests:
 * a list of named tensors and a safetensors writer (F32, F16 or BF16), so
 * that model tests build the folders they load instead of shipping them.
 */
#ifndef STOF_TEST_CKPT_WRITER_H
#define STOF_TEST_CKPT_WRITER_H

#include "testlib.h"

#include <stdint.h>

typedef struct ckpt_tensor {
    char name[192];
    int ndim;
    int64_t shape[2];
    float *values;
} ckpt_tensor;

typedef struct ckpt {
    ckpt_tensor *t;
    int count, cap;
} ckpt;

/* A [d0] (d1 == 0) or [d0, d1] tensor uniform around mean with standard deviation std. */
void ckpt_add(ckpt *ck, test_rng *r, const char *name, int64_t d0, int64_t d1, float mean,
              float std);
void ckpt_free(ckpt *ck);
/* safetensors: 8-byte header length, JSON header (padded to 8), data back to back. */
void ckpt_write_safetensors(const char *path, const ckpt *ck, const char *dtype);
void ckpt_write_text(const char *path, const char *text);
void ckpt_make_dir(const char *path);

#endif /* STOF_TEST_CKPT_WRITER_H */
