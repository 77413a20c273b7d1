/*
 * ckpt_writer.c — see ckpt_writer.h.
 */
#include "ckpt_writer.h"

#include "core/core.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static void *xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (!p) {
        fprintf(stderr, "out of memory\n");
        exit(1);
    }
    return p;
}

static void write_file(const char *path, const void *data, size_t n)
{
    FILE *f = fopen(path, "wb");
    if (!f || (n && fwrite(data, 1, n, f) != n)) {
        fprintf(stderr, "cannot write %s\n", path);
        exit(1);
    }
    fclose(f);
}

void ckpt_write_text(const char *path, const char *text)
{
    write_file(path, text, strlen(text));
}

void ckpt_make_dir(const char *path)
{
    if (mkdir(path, 0700) != 0 && errno != EEXIST) {
        fprintf(stderr, "cannot create %s\n", path);
        exit(1);
    }
}

void ckpt_add(ckpt *ck, test_rng *r, const char *name, int64_t d0, int64_t d1,
                   float mean, float std)
{
    if (ck->count == ck->cap) {
        ck->cap = ck->cap ? 2 * ck->cap : 64;
        ck->t = realloc(ck->t, sizeof *ck->t * (size_t)ck->cap);
        if (!ck->t) exit(1);
    }
    ckpt_tensor *t = &ck->t[ck->count++];
    snprintf(t->name, sizeof t->name, "%s", name);
    t->ndim = d1 ? 2 : 1;
    t->shape[0] = d0;
    t->shape[1] = d1;
    int64_t n = d0 * (d1 ? d1 : 1);
    t->values = xmalloc(sizeof(float) * (size_t)n);
    float a = std * sqrtf(3.0f);
    for (int64_t i = 0; i < n; i++)
        t->values[i] = mean + test_rng_float(r, -a, a);
}

void ckpt_free(ckpt *ck)
{
    for (int i = 0; i < ck->count; i++)
        free(ck->t[i].values);
    free(ck->t);
}

void ckpt_write_safetensors(const char *path, const ckpt *ck, const char *dtype)
{
    size_t es = strcmp(dtype, "F32") == 0 ? 4 : 2;
    size_t cap = 256 + (size_t)ck->count * 256, len = 0, off = 0;
    char *hdr = xmalloc(cap);
    len += (size_t)snprintf(hdr + len, cap - len, "{\"__metadata__\":{\"format\":\"pt\"}");
    for (int i = 0; i < ck->count; i++) {
        const ckpt_tensor *t = &ck->t[i];
        size_t n = (size_t)t->shape[0] * (size_t)(t->ndim == 2 ? t->shape[1] : 1);
        if (t->ndim == 2)
            len += (size_t)snprintf(hdr + len, cap - len,
                                    ",\"%s\":{\"dtype\":\"%s\",\"shape\":[%lld,%lld],"
                                    "\"data_offsets\":[%zu,%zu]}",
                                    t->name, dtype, (long long)t->shape[0], (long long)t->shape[1],
                                    off, off + n * es);
        else
            len += (size_t)snprintf(hdr + len, cap - len,
                                    ",\"%s\":{\"dtype\":\"%s\",\"shape\":[%lld],"
                                    "\"data_offsets\":[%zu,%zu]}",
                                    t->name, dtype, (long long)t->shape[0], off, off + n * es);
        off += n * es;
    }
    len += (size_t)snprintf(hdr + len, cap - len, "}");
    while (len % 8)
        hdr[len++] = ' ';
    FILE *f = fopen(path, "wb");
    if (!f) exit(1);
    uint64_t hl = len;
    fwrite(&hl, 8, 1, f);
    fwrite(hdr, 1, len, f);
    for (int i = 0; i < ck->count; i++) {
        const ckpt_tensor *t = &ck->t[i];
        size_t n = (size_t)t->shape[0] * (size_t)(t->ndim == 2 ? t->shape[1] : 1);
        if (es == 4) {
            fwrite(t->values, 4, n, f);
            continue;
        }
        uint16_t *h = xmalloc(n * 2);
        for (size_t j = 0; j < n; j++)
            h[j] = strcmp(dtype, "F16") == 0 ? stof_f32_to_f16(t->values[j])
                                             : stof_f32_to_bf16(t->values[j]);
        fwrite(h, 2, n, f);
        free(h);
    }
    fclose(f);
    free(hdr);
}

