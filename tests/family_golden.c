/*
 * family_golden.c — reading the golden files of tests/data/families and the
 * error metric the family tests share (family_golden.h).
 */
#include "family_golden.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#ifndef STOF_TEST_DATA_DIR
#error "STOF_TEST_DATA_DIR must name tests/data"
#endif

void family_golden_open(const char *name, family_golden *g)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/families/%s.golden.safetensors", STOF_TEST_DATA_DIR, name);
    if (stof_safetensors_open(path, &g->f) != STOF_OK) {
        fprintf(stderr, "%s\n", stof_last_error());
        exit(1);
    }
    const safetensors_tensor *ids = stof_safetensors_find(g->f, "ids");
    const safetensors_tensor *len = stof_safetensors_find(g->f, "lengths");
    if (!ids || !len || ids->dtype != ST_I32 || len->dtype != ST_I32 || ids->ndim != 2 ||
        len->numel != ids->shape[0]) {
        fprintf(stderr, "%s: ids / lengths missing\n", path);
        exit(1);
    }
    g->ids = ids->data;
    g->lengths = len->data;
    g->B = (int)ids->shape[0];
    g->L = (int)ids->shape[1];
}

void family_golden_close(family_golden *g)
{
    stof_safetensors_close(g->f);
    g->f = NULL;
}

const float *family_golden_f32(const family_golden *g, const char *name, int64_t numel)
{
    const safetensors_tensor *t = stof_safetensors_find(g->f, name);
    if (!t || t->dtype != ST_F32 || t->numel != numel) {
        fprintf(stderr, "golden tensor %s missing or misshapen\n", name);
        exit(1);
    }
    return t->data;
}

int64_t family_golden_tokens(const family_golden *g)
{
    int64_t T = 0;
    for (int b = 0; b < g->B; b++)
        T += g->lengths[b];
    return T;
}

double family_golden_err(const float *out, const float *ref, const family_golden *g, int64_t W,
                         bool packed)
{
    double err = 0.0, mag = 0.0;
    int64_t t = 0;
    for (int b = 0; b < g->B; b++)
        for (int i = 0; i < g->lengths[b]; i++, t++) {
            const float *o = out + (packed ? t : (int64_t)b * g->L + i) * W;
            const float *r = ref + ((int64_t)b * g->L + i) * W;
            for (int64_t c = 0; c < W; c++) {
                double d = fabs((double)o[c] - r[c]);
                if (!(d <= err)) err = isnan(d) ? INFINITY : d;
                if (fabs(r[c]) > mag) mag = fabs(r[c]);
            }
        }
    return err / mag;
}

double family_golden_last_err(const float *out, const float *ref, const family_golden *g, int64_t W)
{
    double err = 0.0, mag = 0.0;
    for (int b = 0; b < g->B; b++) {
        if (g->lengths[b] == 0) continue;
        const float *r = ref + ((int64_t)b * g->L + g->lengths[b] - 1) * W;
        for (int64_t c = 0; c < W; c++) {
            double d = fabs((double)out[(int64_t)b * W + c] - r[c]);
            if (!(d <= err)) err = isnan(d) ? INFINITY : d;
            if (fabs(r[c]) > mag) mag = fabs(r[c]);
        }
    }
    return err / mag;
}

bool family_golden_padding_zero(const float *out, const family_golden *g, int64_t W)
{
    for (int b = 0; b < g->B; b++)
        for (int64_t i = g->lengths[b]; i < g->L; i++)
            for (int64_t c = 0; c < W; c++)
                if (out[((int64_t)b * g->L + i) * W + c] != 0.0f) return false;
    return true;
}
