/*
 * masks_gpu.c — the forward's attention mask: compiled for the host lengths
 * (kernel by kernel), or reusable from the device lengths (a graph rebuilds
 * it per launch), and its canonical text (tuning key and graph bucket).
 */
#include "model/engine_gpu.h"

#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

/* Compile parameters of a forward's mask with host lengths (lengths must
 * outlive the params). */
static stof_mask_params mask_params(const stof_model *m, int batch, int len,
                                    stof_tensor *lengths)
{
    stof_mask_params p = stof_mask_default_params();
    p.batch = batch;
    p.heads = m->info.heads;
    p.len_q = len;
    p.len_k = len;
    p.lengths_q = lengths;
    p.head_dim = m->info.head_dim;
    return p;
}

/* The forward's mask (every pair when it names none) for these lengths. */
stof_status eng_compile_mask(stof_model *m, const enc_request *r, stof_mask **out)
{
    int64_t n = r->batch;
    stof_tensor lengths = stof_tensor_make((void *)r->lengths, STOF_I32, STOF_MEM_HOST, 1, &n);
    stof_mask_params p = mask_params(m, r->batch, r->len, &lengths);
    return stof_mask_compile(m->ctx, r->mask ? r->mask : m->gpu->full, &p, out);
}

stof_status enc_gpu_mask_tiles(stof_model *m, int batch, int len, const int32_t *host_lengths,
                               const stof_mask_spec *mask, int *tile_m, int *tile_n)
{
    int64_t n = batch;
    stof_tensor lengths = stof_tensor_make((void *)host_lengths, STOF_I32, STOF_MEM_HOST, 1, &n);
    stof_mask_params p = mask_params(m, batch, len, &lengths);
    return stof_mask_choose_tiles(m->ctx, mask ? mask : m->gpu->full, &p, tile_m, tile_n);
}

/* The same mask, reusable, reading the lengths from the device inputs (a graph
 * rebuilds it for every forward). Its tile shape is the one the host lengths
 * give, so that a plan's attention configuration fits both. */
stof_status eng_compile_reusable_mask(stof_model *m, const enc_request *r, const dev_inputs *in,
                                         stof_mask **out)
{
    int tm = 0, tn = 0;
    STOF_TRY(enc_gpu_mask_tiles(m, r->batch, r->len, r->lengths, r->mask, &tm, &tn));
    int64_t n = r->batch;
    stof_tensor lengths = stof_tensor_make(in->lens, STOF_I32, STOF_MEM_DEVICE, 1, &n);
    stof_mask_params p = mask_params(m, r->batch, r->len, &lengths);
    p.tile_m = tm;
    p.tile_n = tn;
    p.builder = STOF_BUILDER_GPU;
    p.reusable = 1;
    return stof_mask_compile(m->ctx, r->mask ? r->mask : m->gpu->full, &p, out);
}

/* Canonical text of a forward's mask (the model's "full" when it names none),
 * on the heap; NULL (error cleared) when it cannot be formatted. One per
 * forward: the tuning key and the graph bucket both read it. */
char *eng_format_mask(const enc_gpu *g, const stof_mask_spec *mask)
{
    const stof_mask_spec *spec = mask ? mask : g->full;
    size_t need = 0;
    char *text = NULL;
    if (stof_mask_spec_format(spec, NULL, 0, &need) == STOF_OK && need > 0) text = malloc(need);
    if (text && stof_mask_spec_format(spec, text, need, NULL) != STOF_OK) {
        free(text);
        text = NULL;
    }
    if (!text) stof_clear_error();
    return text;
}
