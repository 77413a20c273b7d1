/*
 * mask_internal.h — what the files of src/mask share: the spec's storage, the
 * compile plan (validated parameters, instance counts, host-side capacity
 * bounds and estimate), the compiled mask object and the GPU builder's entry.
 *
 * A compiled mask is one allocation with this layout (mask_layout), the same
 * on the host and on the device: len_q[bm] len_k[bm] row_ptr[rows + 1]
 * meta[4] col[cap] bits[cap] bitmap[cap_partial][tile_m][words_per_row].
 * meta = {entries, partial tiles, capacity overflow flag, 0}: a GPU build
 * learns its counts on the device only.
 */
#ifndef STOF_MASK_INTERNAL_H
#define STOF_MASK_INTERNAL_H

#include "mask/mask.h"
#include "mask/mask_eval.h"

#ifdef __cplusplus
extern "C" {
#endif

#define MASK_MAX_PARTS 64
#define MASK_MAX_RANDOM_PER_ROW 256
#define MASK_MAX_GLOBAL_LIST (1 << 24)
#define MASK_MAX_LAYOUT_CELLS (1 << 28)
/* Padded lengths stay below this so that tile-padded indices fit in int32. */
#define MASK_MAX_LEN (INT32_MAX - 256)

typedef struct mask_part {
    int kind;
    int a, b; /* as in mask_part_eval */
    uint64_t seed;
    int32_t *list; /* global list: sorted, unique, owned */
    int heads, rows, cols;
    uint8_t *layout; /* blocks: owned copy */
    int32_t *sat;    /* blocks: summed-area table, owned */
    stof_tensor dense;
} mask_part;

struct stof_mask_spec {
    int n_parts;
    mask_part parts[MASK_MAX_PARTS];
    stof_mask_align align; /* how the analytic parts place rows when Lq != Lk */
    int64_t band_left, band_right; /* the within: band (mask_eval); MASK_BAND_OPEN: no bound */
};

/* Compile parameters checked against the spec. */
typedef struct mask_plan {
    stof_ctx *ctx; /* NULL for the oracle */
    int batch, heads, lq, lk;
    int tm, tn, n_trow, n_tcol, wpr;
    int bm, hm, n_inst;
    int64_t n_rows, n_tiles;                  /* n_inst * n_trow, n_rows * n_tcol */
    const stof_tensor *lengths_q, *lengths_k; /* after the "NULL: lengths_q" rule */
    bool lens_known; /* len_q/len_k hold every entry's lengths (host-checked or downloaded) */
    int32_t *len_q, *len_k; /* [bm], owned */
    int64_t cap_entries, cap_partial;
    mask_estimate est;
    int align_end; /* the spec's alignment is bottom-right (mask_eval.align_end) */
    int64_t band_left, band_right; /* the spec's band (mask_eval) */
} mask_plan;

typedef struct mask_layout {
    size_t len_q, len_k, row_ptr, meta, col, bits, bitmap, total;
} mask_layout;

struct mask_gpu_replay;

struct stof_mask {
    stof_ctx *ctx;
    stof_memory memory;
    mask_tiles t;
    mask_estimate est;
    mask_layout lay;
    void *storage;
    int64_t cap_entries, cap_partial;
    int64_t entries, partial;   /* -1 while only the device knows them */
    mask_tiles_host *host_copy; /* filled by the first stats/decode of a device mask */
    void *scratch;              /* reusable GPU mask: the builder's device scratch, when it
                                   is a block of its own (else it follows storage) */
    struct mask_gpu_replay *replay; /* reusable GPU mask: the builder's launch, kept */
};

/* ---- plan.c */

/* Validates params against spec and fills plan (lengths downloaded when
 * download_lengths and they are on the device). ctx NULL: the oracle, which
 * may read device tensors whatever the context. Call mask_plan_free either way. */
stof_status mask_plan_make(stof_ctx *ctx, const stof_mask_spec *spec, const stof_mask_params *p,
                           bool download_lengths, mask_plan *plan);
void mask_plan_free(mask_plan *plan);
/* Device -> host copy ordered after the ctx's stream (synchronous). */
stof_status mask_download(stof_ctx *ctx, void *dst, const void *src, size_t bytes);
/* Whether 128 x 64 tiles are worth trying for a mask compiled with tile 0 x 0
 * (compile.c says when they are kept). */
bool mask_tall_tiles_may_pay(const stof_ctx *ctx, const stof_mask_params *p);
/* The plan a compile uses: the params' tiles, or for tile 0 x 0 the 64 x 64
 * plan, replaced by the 128 x 64 one when tall tiles may pay and list at most
 * 10% more area. */
stof_status mask_plan_tiles(stof_ctx *ctx, const stof_mask_spec *spec,
                            const stof_mask_params *params, bool download, mask_plan *plan);
/* Capacities (entries, partial tiles) and the estimate, from the spec alone. */
stof_status mask_plan_bound(const stof_mask_spec *spec, mask_plan *plan);
mask_layout mask_layout_make(int bm, int64_t n_rows, int tm, int wpr, int64_t entries,
                             int64_t partial);

/* Host evaluation description: parts with host pointers; dense tensors that
 * live on the device are downloaded into owned buffers. */
typedef struct mask_host_eval {
    mask_eval e;
    mask_part_eval parts[MASK_MAX_PARTS];
    void *owned[MASK_MAX_PARTS];
} mask_host_eval;
stof_status mask_host_eval_make(const stof_mask_spec *spec, const mask_plan *plan,
                                mask_host_eval *he);
void mask_host_eval_free(mask_host_eval *he);
/* Bytes a strided tensor spans from its base (what a copy of it must move). */
size_t mask_tensor_extent_bytes(const stof_tensor *t);
/* The part as the evaluator sees it, pointing at the spec's arrays and the dense
 * tensor as given (the GPU builder swaps in device copies). */
void mask_part_eval_fill(const mask_part *src, const mask_plan *plan, mask_part_eval *dst);
/* The plan's instance and tile geometry into an evaluator (both builders' evaluators). */
void mask_eval_set_geometry(const mask_plan *plan, mask_eval *e);

/* ---- compile.c, compile_gpu.cu */

/* Points m->t (and m->storage) at a block laid out by m->lay. */
void mask_point_tiles(stof_mask *m, const mask_plan *plan, void *base);
/* The GPU builder (compile_gpu.cu): allocates by the plan's bounds, passes small
 * specs in the kernel parameters (uploads lists, layouts and host dense parts),
 * enqueues the kernels. */
stof_status mask_gpu_build(stof_ctx *ctx, const stof_mask_spec *spec, const mask_plan *plan,
                           bool reusable, stof_mask *m);
/* Enqueues the kept launch of a reusable GPU mask again (stof_mask_rebuild). */
stof_status mask_gpu_relaunch(stof_mask *m);
/* Whether GPU builds may run as one cooperative launch (default: yes, where the
 * device holds the grid at once); off forces the two-kernel form, for tests.
 * Not thread-safe: set it before compiling. */
void mask_gpu_set_cooperative(bool on);
/* True when every build on the ctx's device runs as one cooperative launch. */
bool mask_gpu_one_launch(const stof_ctx *ctx);
/* Releases a reusable mask's kept launch (not its scratch: the caller frees that). */
void mask_gpu_replay_free(struct mask_gpu_replay *r);

#ifdef __cplusplus
}
#endif

#endif /* STOF_MASK_INTERNAL_H */
