/*
 * gpu_build.c — host side of the GPU builder. The spec (parts with device
 * pointers, global lists, block layouts and their summed-area tables, host
 * lengths, zeroed counters) goes to the device in one upload into a scratch
 * block that also holds the kernels' work arrays; the mask itself is one
 * block sized by the plan's bounds. Then the kernels of compile_gpu.cu run
 * and the scratch block is freed in stream order: nothing is read back and
 * nothing waits. Lengths in device memory cannot be checked without a round
 * trip, so the kernels clamp them to [0, L] (the CPU builder, which downloads
 * them, clamps the same way); lengths in host memory are checked.
 */
#include "mask/mask_internal.h"

#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

static size_t align256(size_t n)
{
    return (n + 255) & ~(size_t)255;
}

typedef struct scratch_plan {
    size_t parts, list[MASK_MAX_PARTS], layout[MASK_MAX_PARTS], sat[MASK_MAX_PARTS];
    size_t dense[MASK_MAX_PARTS], dense_bytes[MASK_MAX_PARTS];
    size_t len_q, len_k, counters, blob_end;
    size_t cls, cand, ptile, row_e, row_p, blk_e, blk_p, total;
    int64_t n_blocks;
} scratch_plan;

static scratch_plan scratch_layout(const stof_mask_spec *spec, const mask_plan *plan)
{
    scratch_plan s;
    memset(&s, 0, sizeof s);
    size_t off = 0;
#define TAKE(dst, bytes)                                                                           \
    do {                                                                                           \
        dst = off;                                                                                 \
        off += align256(bytes);                                                                    \
    } while (0)
    TAKE(s.parts, (size_t)spec->n_parts * sizeof(mask_part_eval));
    for (int k = 0; k < spec->n_parts; k++) {
        const mask_part *p = &spec->parts[k];
        if (p->kind == MASK_PART_GLOBAL_LIST) TAKE(s.list[k], (size_t)p->a * 4);
        if (p->kind == MASK_PART_BLOCKS) {
            size_t cells = (size_t)p->heads * p->rows * p->cols;
            TAKE(s.layout[k], cells);
            TAKE(s.sat[k], (size_t)p->heads * (p->rows + 1) * (p->cols + 1) * 4);
        }
    }
    TAKE(s.len_q, (size_t)plan->bm * 4);
    TAKE(s.len_k, (size_t)plan->bm * 4);
    TAKE(s.counters, 4 * sizeof(uint32_t));
    s.blob_end = off;
    for (int k = 0; k < spec->n_parts; k++) {
        const mask_part *p = &spec->parts[k];
        if (p->kind == MASK_PART_DENSE && p->dense.memory == STOF_MEM_HOST) {
            s.dense_bytes[k] = mask_tensor_extent_bytes(&p->dense);
            TAKE(s.dense[k], s.dense_bytes[k]);
        }
    }
    s.n_blocks = stof_cdiv(plan->n_rows, MASK_GPU_ROWS_PER_BLOCK);
    TAKE(s.cls, (size_t)plan->n_tiles);
    TAKE(s.cand, (size_t)plan->cap_partial * 4);
    TAKE(s.ptile, (size_t)plan->cap_partial * 4);
    TAKE(s.row_e, (size_t)plan->n_rows * 4);
    TAKE(s.row_p, (size_t)plan->n_rows * 4);
    TAKE(s.blk_e, (size_t)s.n_blocks * 4);
    TAKE(s.blk_p, (size_t)s.n_blocks * 4);
#undef TAKE
    s.total = off;
    return s;
}

/* The uploaded part of the scratch block, with pointers into dev. */
static void fill_blob(const stof_mask_spec *spec, const mask_plan *plan, const scratch_plan *s,
                      char *dev, char *host)
{
    mask_part_eval *parts = (mask_part_eval *)(host + s->parts);
    for (int k = 0; k < spec->n_parts; k++) {
        const mask_part *p = &spec->parts[k];
        mask_part_eval_fill(p, plan, &parts[k]);
        if (p->kind == MASK_PART_GLOBAL_LIST) {
            memcpy(host + s->list[k], p->list, (size_t)p->a * 4);
            parts[k].list = (const int32_t *)(dev + s->list[k]);
        } else if (p->kind == MASK_PART_BLOCKS) {
            memcpy(host + s->layout[k], p->layout, (size_t)p->heads * p->rows * p->cols);
            memcpy(host + s->sat[k], p->sat, (size_t)p->heads * (p->rows + 1) * (p->cols + 1) * 4);
            parts[k].data = (const uint8_t *)(dev + s->layout[k]);
            parts[k].sat = (const int32_t *)(dev + s->sat[k]);
        } else if (p->kind == MASK_PART_DENSE && p->dense.memory == STOF_MEM_HOST) {
            parts[k].data = (const uint8_t *)(dev + s->dense[k]);
        }
    }
    memcpy(host + s->len_q, plan->len_q, (size_t)plan->bm * 4);
    memcpy(host + s->len_k, plan->len_k, (size_t)plan->bm * 4);
}

/* Where the kernels read lengths: the caller's device tensor, the uploaded
 * host values, or nowhere (full length). */
static void eval_lengths(const stof_tensor *t, char *dev, size_t off, const int32_t **src,
                         int64_t *stride)
{
    if (!t) {
        *src = NULL;
        *stride = 0;
    } else if (t->memory == STOF_MEM_DEVICE) {
        *src = (const int32_t *)t->data;
        *stride = t->stride[0];
    } else {
        *src = (const int32_t *)(dev + off);
        *stride = 1;
    }
}

static void fill_job(const stof_mask_spec *spec, const mask_plan *plan, const scratch_plan *s,
                     char *scr, char *out, const mask_layout *lay, mask_gpu_job *j)
{
    memset(j, 0, sizeof *j);
    mask_eval *e = &j->e;
    e->parts = (const mask_part_eval *)(scr + s->parts);
    e->n_parts = spec->n_parts;
    e->bm = plan->bm;
    e->hm = plan->hm;
    e->lq = plan->lq;
    e->lk = plan->lk;
    e->tile_m = plan->tm;
    e->tile_n = plan->tn;
    e->n_trow = plan->n_trow;
    e->n_tcol = plan->n_tcol;
    eval_lengths(plan->lengths_q, scr, s->len_q, &e->len_q, &e->len_q_stride);
    eval_lengths(plan->lengths_k, scr, s->len_k, &e->len_k, &e->len_k_stride);
    j->n_inst = plan->n_inst;
    j->wpr = plan->wpr;
    j->n_rows = plan->n_rows;
    j->n_tiles = plan->n_tiles;
    j->cap_entries = plan->cap_entries;
    j->cap_partial = plan->cap_partial;
    j->parts_smem = (size_t)spec->n_parts * sizeof(mask_part_eval);
    j->len_q = (int32_t *)(out + lay->len_q);
    j->len_k = (int32_t *)(out + lay->len_k);
    j->row_ptr = (int32_t *)(out + lay->row_ptr);
    j->meta = (int32_t *)(out + lay->meta);
    j->col = (int32_t *)(out + lay->col);
    j->bits = (int32_t *)(out + lay->bits);
    j->bitmap = (uint64_t *)(out + lay->bitmap);
    j->cls = (uint8_t *)(scr + s->cls);
    j->cand = (int32_t *)(scr + s->cand);
    j->ptile = (int32_t *)(scr + s->ptile);
    j->row_e = (int32_t *)(scr + s->row_e);
    j->row_p = (int32_t *)(scr + s->row_p);
    j->blk_e = (int32_t *)(scr + s->blk_e);
    j->blk_p = (int32_t *)(scr + s->blk_p);
    j->counters = (uint32_t *)(scr + s->counters);
}

static stof_status upload(stof_ctx *ctx, void *dst, const void *src, size_t bytes)
{
    return STOF_CUDA(
        cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, (cudaStream_t)ctx->stream));
}

stof_status mask_gpu_build(stof_ctx *ctx, const stof_mask_spec *spec, const mask_plan *plan,
                           stof_mask *m)
{
    m->lay = mask_layout_make(plan->bm, plan->n_rows, plan->tm, plan->wpr, plan->cap_entries,
                              plan->cap_partial);
    m->cap_entries = plan->cap_entries;
    m->cap_partial = plan->cap_partial;
    scratch_plan s = scratch_layout(spec, plan);
    void *out = NULL, *scr = NULL;
    char *blob = NULL;
    STOF_TRY(stof_dev_alloc(ctx, m->lay.total, &out));
    stof_status st = stof_dev_alloc(ctx, s.total, &scr);
    if (st == STOF_OK) st = stof_host_calloc(1, s.blob_end, (void **)&blob);
    if (st == STOF_OK) {
        fill_blob(spec, plan, &s, (char *)scr, blob);
        /* Pageable sources are staged before cudaMemcpyAsync returns; nothing waits. */
        st = upload(ctx, scr, blob, s.blob_end);
    }
    for (int k = 0; k < spec->n_parts && st == STOF_OK; k++)
        if (s.dense_bytes[k])
            st = upload(ctx, (char *)scr + s.dense[k], spec->parts[k].dense.data, s.dense_bytes[k]);
    if (st == STOF_OK) {
        mask_gpu_job job;
        fill_job(spec, plan, &s, (char *)scr, (char *)out, &m->lay, &job);
        st = mask_gpu_run(ctx, &job);
    }
    free(blob);
    stof_dev_free(ctx, scr);
    if (st != STOF_OK) {
        stof_dev_free(ctx, out);
        return st;
    }
    mask_point_tiles(m, plan, out);
    return STOF_OK;
}
