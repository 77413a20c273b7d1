/*
 * masks_gpu.c — the forward's attention masks: one per distinct mask kind of
 * the model's layers (full, causal, window L:R, causal window), each the
 * forward's stof mask spec intersected with that kind. Compiled for the
 * host lengths (kernel by kernel), or reusable from the device lengths (a
 * graph rebuilds them per launch); and the spec's canonical text (tuning key
 * and graph bucket).
 *
 * The intersection is the user's spec within the kind's band (stof.h,
 * within:), made by desc_layer_mask_spec as the CPU executor makes it, so any
 * spec (global tokens, random blocks, dense parts) runs under causal and
 * windowed layers; with no user spec a kind is its own part.
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

stof_status enc_gpu_mask_tiles(stof_model *m, int batch, int len, const int32_t *host_lengths,
                               const stof_mask_spec *mask, int *tile_m, int *tile_n)
{
    int64_t n = batch;
    stof_tensor lengths = stof_tensor_make((void *)host_lengths, STOF_I32, STOF_MEM_HOST, 1, &n);
    stof_mask_params p = mask_params(m, batch, len, &lengths);
    return stof_mask_choose_tiles(m->ctx, mask ? mask : m->gpu->full, &p, tile_m, tile_n);
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

stof_status eng_mask_kinds(enc_gpu *g, const model_desc *d)
{
    STOF_TRY(stof_host_calloc((size_t)(d->layers > 0 ? d->layers : 1), sizeof *g->layer_kind,
                              (void **)&g->layer_kind));
    for (int i = 0; i < d->layers; i++) {
        const layer_desc *l = &d->layer[i];
        eng_mask_kind k = {l->mask, 0, 0};
        if (l->mask == MASK_KIND_WINDOW || l->mask == MASK_KIND_CAUSAL_WINDOW)
            k.left = l->window_left;
        if (l->mask == MASK_KIND_WINDOW) k.right = l->window_right;
        int j = 0;
        while (j < g->n_kinds && memcmp(&g->kinds[j], &k, sizeof k) != 0)
            j++;
        if (j == g->n_kinds) {
            STOF_REQUIRE(g->n_kinds < ENG_MASK_KINDS, STOF_ERR_UNSUPPORTED,
                         "the GPU engine takes at most %d distinct layer mask kinds; layer %d of "
                         "%s adds another",
                         ENG_MASK_KINDS, i, d->model_type);
            g->kinds[g->n_kinds++] = k;
        }
        g->layer_kind[i] = j;
    }
    if (g->n_kinds == 0) g->kinds[g->n_kinds++] = (eng_mask_kind){MASK_KIND_FULL, 0, 0};
    return STOF_OK;
}

/* The spec of kind k for this forward: *use points at it; *owned is a spec
 * made here (the caller destroys it) or NULL. */
static stof_status kind_spec(const enc_gpu *g, const stof_mask_spec *user, int k,
                             stof_mask_spec **owned, const stof_mask_spec **use)
{
    *owned = NULL;
    *use = user ? user : g->full;
    const eng_mask_kind *kind = &g->kinds[k];
    if (kind->kind == MASK_KIND_FULL) return STOF_OK;
    STOF_TRY(desc_layer_mask_spec(kind->kind, kind->left, kind->right, user, owned));
    *use = *owned;
    return STOF_OK;
}

/* One mask per kind, compiled with p (lengths set by the caller). */
static stof_status compile_kinds(stof_model *m, const enc_request *r, stof_mask_params *p,
                                 bool reuse_tiles, stof_mask *out[ENG_MASK_KINDS])
{
    enc_gpu *g = m->gpu;
    for (int k = 0; k < ENG_MASK_KINDS; k++)
        out[k] = NULL;
    stof_status st = STOF_OK;
    for (int k = 0; k < g->n_kinds && st == STOF_OK; k++) {
        stof_mask_spec *owned = NULL;
        const stof_mask_spec *use = NULL;
        st = kind_spec(g, r->mask, k, &owned, &use);
        if (st == STOF_OK && reuse_tiles) {
            /* the tile shape the host lengths give, so a plan's attention
             * configuration fits both builds */
            int64_t n = r->batch;
            stof_tensor host = stof_tensor_make((void *)r->lengths, STOF_I32, STOF_MEM_HOST, 1, &n);
            stof_mask_params hp = mask_params(m, r->batch, r->len, &host);
            st = stof_mask_choose_tiles(m->ctx, use, &hp, &p->tile_m, &p->tile_n);
        }
        if (st == STOF_OK) st = stof_mask_compile(m->ctx, use, p, &out[k]);
        stof_mask_spec_destroy(owned);
    }
    if (st != STOF_OK) eng_masks_destroy(out);
    return st;
}

stof_status eng_compile_masks(stof_model *m, const enc_request *r, stof_mask *out[ENG_MASK_KINDS])
{
    int64_t n = r->batch;
    stof_tensor lengths = stof_tensor_make((void *)r->lengths, STOF_I32, STOF_MEM_HOST, 1, &n);
    stof_mask_params p = mask_params(m, r->batch, r->len, &lengths);
    return compile_kinds(m, r, &p, false, out);
}

/* The same masks, reusable, reading the lengths from the device inputs (a
 * graph rebuilds them for every forward). */
stof_status eng_compile_reusable_masks(stof_model *m, const enc_request *r, const dev_inputs *in,
                                       stof_mask *out[ENG_MASK_KINDS])
{
    int64_t n = r->batch;
    stof_tensor lengths = stof_tensor_make(in->lens, STOF_I32, STOF_MEM_DEVICE, 1, &n);
    stof_mask_params p = mask_params(m, r->batch, r->len, &lengths);
    p.builder = STOF_BUILDER_GPU;
    p.reusable = 1;
    return compile_kinds(m, r, &p, true, out);
}

void eng_masks_destroy(stof_mask *masks[ENG_MASK_KINDS])
{
    for (int k = 0; k < ENG_MASK_KINDS; k++) {
        stof_mask_destroy(masks[k]);
        masks[k] = NULL;
    }
}
