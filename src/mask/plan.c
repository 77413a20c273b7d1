/*
 * plan.c — compile parameters checked against a spec, the instance counts,
 * and the host-side pass that bounds the compiled mask's size (so the GPU
 * builder can allocate without reading the device) and fills mask_estimate.
 *
 * The bound, per tile row: a tile is listed only if some part touches it,
 * and it is a candidate for a bitmap (mixed or unknown) only if some part is
 * partial on it and none covers it, or it straddles the key length. Analytic
 * parts give intervals of tile columns (touched, and covered), merged
 * exactly; the other parts add counts. Unknown (device) lengths are bounded
 * at the padded length plus one straddling tile per row. The CPU builder
 * checks its exact counts against both forms, so the CPU tests exercise them.
 *
 * A band (within:) is an interval too: each interval part is cut to the tiles
 * the band touches and covers, so "full,within:causal" bounds (and estimates)
 * exactly as "causal" does; counts of the other parts cannot be placed, so
 * they stay as they are and none of them counts as covering. Tiles the band
 * touches without covering may all be candidates.
 */
#include "mask/mask_internal.h"

#include <stdlib.h>
#include <string.h>

/* Exact per-instance bounds while bm * tile rows stays below this; beyond it
 * the length-independent bound is used (cheaper on the host, looser). */
#define PLAN_EXACT_ROWS_MAX 8192

stof_status mask_download(stof_ctx *ctx, void *dst, const void *src, size_t bytes)
{
    STOF_TRY(stof_dev_download(ctx, dst, src, bytes));
    return ctx ? stof_ctx_synchronize(ctx) : STOF_OK;
}

/* ---------------------------------------------------------------- validation */

static bool tile_size_ok(int t)
{
    return t == 0 || t == 16 || t == 32 || t == 64 || t == 128;
}

static stof_status check_part_shapes(const mask_part *p, int k, const mask_plan *plan)
{
    if (p->kind == MASK_PART_BLOCKS) {
        STOF_REQUIRE(p->heads == 1 || p->heads == plan->heads, STOF_ERR_SHAPE,
                     "blocks part %d has %d heads but the mask has %d (must be 1 or %d)", k,
                     p->heads, plan->heads, plan->heads);
        STOF_REQUIRE((int64_t)p->rows * p->a >= plan->lq, STOF_ERR_SHAPE,
                     "blocks part %d: %d rows of %d cover %lld query positions, fewer than "
                     "len_q %d",
                     k, p->rows, p->a, (long long)p->rows * p->a, plan->lq);
        STOF_REQUIRE((int64_t)p->cols * p->a >= plan->lk, STOF_ERR_SHAPE,
                     "blocks part %d: %d columns of %d cover %lld key positions, fewer than "
                     "len_k %d",
                     k, p->cols, p->a, (long long)p->cols * p->a, plan->lk);
    } else if (p->kind == MASK_PART_DENSE) {
        const int64_t *s = p->dense.shape;
        STOF_REQUIRE(s[0] == 1 || s[0] == plan->batch, STOF_ERR_SHAPE,
                     "dense part %d has batch dimension %lld but the mask has batch %d (must be "
                     "1 or %d)",
                     k, (long long)s[0], plan->batch, plan->batch);
        STOF_REQUIRE(s[1] == 1 || s[1] == plan->heads, STOF_ERR_SHAPE,
                     "dense part %d has head dimension %lld but the mask has %d heads (must be "
                     "1 or %d)",
                     k, (long long)s[1], plan->heads, plan->heads);
        STOF_REQUIRE(s[2] == plan->lq, STOF_ERR_SHAPE,
                     "dense part %d has Lq = %lld but len_q is %d", k, (long long)s[2], plan->lq);
        STOF_REQUIRE(s[3] == plan->lk, STOF_ERR_SHAPE,
                     "dense part %d has Lk = %lld but len_k is %d", k, (long long)s[3], plan->lk);
    }
    return STOF_OK;
}

static stof_status check_lengths_tensor(const stof_tensor *t, const char *name, int batch)
{
    STOF_TRY(stof_tensor_check(t, name));
    STOF_REQUIRE(t->dtype == STOF_I32, STOF_ERR_SHAPE, "%s has dtype %s (must be i32)", name,
                 stof_dtype_name(t->dtype));
    STOF_REQUIRE(t->ndim == 1 && t->shape[0] == batch, STOF_ERR_SHAPE,
                 "%s must have shape [%d] (the batch), got %d dimensions, shape[0] = %lld", name,
                 batch, t->ndim, (long long)t->shape[0]);
    return STOF_OK;
}

/* Host values of a lengths tensor into out[n] (n = 1 or B): checked when the
 * tensor is on the host, clamped when it was downloaded from the device. */
static stof_status read_lengths(stof_ctx *ctx, const stof_tensor *t, const char *name, int n,
                                int full, int32_t *out)
{
    if (!t) {
        for (int b = 0; b < n; b++)
            out[b] = full;
        return STOF_OK;
    }
    int64_t st = t->stride[0];
    if (t->memory == STOF_MEM_HOST) {
        const int32_t *v = (const int32_t *)t->data;
        for (int b = 0; b < n; b++) {
            int32_t x = v[b * st];
            STOF_REQUIRE(x >= 0 && x <= full, STOF_ERR_INVALID_ARG,
                         "%s[%d] = %d is outside [0, %d] (the padded length)", name, b, (int)x,
                         full);
            out[b] = x;
        }
        return STOF_OK;
    }
    size_t count = (size_t)((n - 1) * st + 1);
    int32_t *tmp = NULL;
    STOF_TRY(stof_host_alloc(count * sizeof *tmp, (void **)&tmp));
    stof_status s = mask_download(ctx, tmp, t->data, count * sizeof *tmp);
    if (s == STOF_OK)
        for (int b = 0; b < n; b++)
            out[b] = mask_len(tmp, st, b, full);
    free(tmp);
    return s;
}

static stof_status plan_lengths(stof_ctx *ctx, const stof_mask_params *p, bool download,
                                mask_plan *plan)
{
    plan->lengths_q = p->lengths_q;
    plan->lengths_k = p->lengths_k ? p->lengths_k : (p->len_q == p->len_k ? p->lengths_q : NULL);
    const stof_tensor *lens[2] = {plan->lengths_q, plan->lengths_k};
    const char *names[2] = {"lengths_q", p->lengths_k ? "lengths_k" : "lengths_q"};
    bool on_device = false;
    for (int w = 0; w < 2; w++) {
        if (!lens[w]) continue;
        STOF_TRY(check_lengths_tensor(lens[w], names[w], plan->batch));
        if (lens[w]->memory == STOF_MEM_DEVICE) {
            STOF_REQUIRE(!ctx || ctx->device == STOF_DEVICE_GPU, STOF_ERR_INVALID_ARG,
                         "%s is in device memory but the context runs on the CPU", names[w]);
            on_device = true;
        }
    }
    STOF_TRY(stof_host_alloc((size_t)plan->bm * sizeof(int32_t), (void **)&plan->len_q));
    STOF_TRY(stof_host_alloc((size_t)plan->bm * sizeof(int32_t), (void **)&plan->len_k));
    plan->lens_known = !on_device || download;
    if (!plan->lens_known) {
        /* Host-side lengths still get checked; the device ones are clamped in-kernel. */
        for (int w = 0; w < 2; w++)
            if (!lens[w] || lens[w]->memory == STOF_MEM_HOST)
                STOF_TRY(read_lengths(ctx, lens[w], names[w], plan->bm, w ? plan->lk : plan->lq,
                                      w ? plan->len_k : plan->len_q));
        return STOF_OK;
    }
    STOF_TRY(read_lengths(ctx, lens[0], names[0], plan->bm, plan->lq, plan->len_q));
    STOF_TRY(read_lengths(ctx, lens[1], names[1], plan->bm, plan->lk, plan->len_k));
    return STOF_OK;
}

stof_status mask_plan_make(stof_ctx *ctx, const stof_mask_spec *spec, const stof_mask_params *p,
                           bool download_lengths, mask_plan *plan)
{
    memset(plan, 0, sizeof *plan);
    plan->ctx = ctx;
    STOF_REQUIRE(spec, STOF_ERR_INVALID_ARG, "mask compile: spec is NULL");
    STOF_REQUIRE(p, STOF_ERR_INVALID_ARG, "mask compile: params is NULL");
    STOF_REQUIRE(spec->n_parts > 0, STOF_ERR_INVALID_ARG,
                 "mask compile: the spec has no parts (add at least one)");
    STOF_REQUIRE(p->batch >= 1, STOF_ERR_INVALID_ARG, "mask compile: batch %d must be >= 1",
                 p->batch);
    STOF_REQUIRE(p->heads >= 1, STOF_ERR_INVALID_ARG, "mask compile: heads %d must be >= 1",
                 p->heads);
    STOF_REQUIRE(p->len_q >= 1 && p->len_q <= MASK_MAX_LEN, STOF_ERR_INVALID_ARG,
                 "mask compile: len_q %d must be in [1, %d]", p->len_q, MASK_MAX_LEN);
    STOF_REQUIRE(p->len_k >= 1 && p->len_k <= MASK_MAX_LEN, STOF_ERR_INVALID_ARG,
                 "mask compile: len_k %d must be in [1, %d]", p->len_k, MASK_MAX_LEN);
    STOF_REQUIRE(tile_size_ok(p->tile_m) && tile_size_ok(p->tile_n), STOF_ERR_INVALID_ARG,
                 "mask compile: tile_m %d / tile_n %d must be 16, 32, 64, 128 or 0 (default)",
                 p->tile_m, p->tile_n);
    plan->batch = p->batch;
    plan->heads = p->heads;
    plan->lq = p->len_q;
    plan->lk = p->len_k;
    plan->align_end = spec->align == STOF_ALIGN_BOTTOM_RIGHT;
    plan->band_left = spec->band_left;
    plan->band_right = spec->band_right;
    plan->tm = p->tile_m ? p->tile_m : 64;
    plan->tn = p->tile_n ? p->tile_n : 64;
    plan->n_trow = (int)stof_cdiv(plan->lq, plan->tm);
    plan->n_tcol = (int)stof_cdiv(plan->lk, plan->tn);
    plan->wpr = (int)stof_cdiv(plan->tn, 64);

    bool by_batch = p->lengths_q || p->lengths_k, by_head = false;
    for (int k = 0; k < spec->n_parts; k++) {
        const mask_part *part = &spec->parts[k];
        STOF_TRY(check_part_shapes(part, k, plan));
        if (part->kind == MASK_PART_RANDOM) by_batch = true;
        if (part->kind == MASK_PART_BLOCKS && part->heads > 1) by_head = true;
        if (part->kind == MASK_PART_DENSE) {
            if (part->dense.shape[0] > 1) by_batch = true;
            if (part->dense.shape[1] > 1) by_head = true;
            STOF_REQUIRE(part->dense.memory == STOF_MEM_HOST || !ctx ||
                             ctx->device == STOF_DEVICE_GPU,
                         STOF_ERR_INVALID_ARG,
                         "dense part %d is in device memory but the context runs on the CPU", k);
        }
    }
    plan->bm = by_batch ? plan->batch : 1;
    plan->hm = by_head ? plan->heads : 1;
    plan->n_inst = plan->bm * plan->hm;
    plan->n_rows = (int64_t)plan->n_inst * plan->n_trow;
    plan->n_tiles = plan->n_rows * plan->n_tcol;
    STOF_REQUIRE(plan->n_tiles <= INT32_MAX, STOF_ERR_UNSUPPORTED,
                 "mask compile: %d instances x %d x %d tiles = %lld tiles is too many (at most "
                 "%d); use larger tiles",
                 plan->n_inst, plan->n_trow, plan->n_tcol, (long long)plan->n_tiles, INT32_MAX);
    return plan_lengths(ctx, p, download_lengths, plan);
}

void mask_plan_free(mask_plan *plan)
{
    free(plan->len_q);
    free(plan->len_k);
    plan->len_q = plan->len_k = NULL;
}

/* ---------------------------------------------------------------- evaluation */

void mask_eval_set_geometry(const mask_plan *plan, mask_eval *e)
{
    e->bm = plan->bm;
    e->hm = plan->hm;
    e->lq = plan->lq;
    e->lk = plan->lk;
    e->tile_m = plan->tm;
    e->tile_n = plan->tn;
    e->n_trow = plan->n_trow;
    e->n_tcol = plan->n_tcol;
    e->align_end = plan->align_end;
    e->band_left = plan->band_left;
    e->band_right = plan->band_right;
}

void mask_part_eval_fill(const mask_part *src, const mask_plan *plan, mask_part_eval *dst)
{
    memset(dst, 0, sizeof *dst);
    dst->kind = src->kind;
    dst->a = src->a;
    dst->b = src->b;
    dst->seed = src->seed;
    switch (src->kind) {
    case MASK_PART_DILATED: dst->span = (int64_t)src->a * src->b; break;
    case MASK_PART_GLOBAL_LIST: dst->list = src->list; break;
    case MASK_PART_BLOCKS:
        dst->heads = src->heads;
        dst->rows = src->rows;
        dst->cols = src->cols;
        dst->data = src->layout;
        dst->sat = src->sat;
        break;
    case MASK_PART_DENSE:
        dst->rows = plan->lq;
        dst->cols = plan->lk;
        dst->data = (const uint8_t *)src->dense.data;
        for (int d = 0; d < 4; d++)
            dst->stride[d] = src->dense.shape[d] == 1 ? 0 : src->dense.stride[d];
        break;
    default: break;
    }
}

size_t mask_tensor_extent_bytes(const stof_tensor *t)
{
    int64_t last = 0;
    for (int d = 0; d < t->ndim; d++) last += (t->shape[d] - 1) * t->stride[d];
    return (size_t)(last + 1) * stof_dtype_size(t->dtype);
}

stof_status mask_host_eval_make(const stof_mask_spec *spec, const mask_plan *plan,
                                mask_host_eval *he)
{
    memset(he, 0, sizeof *he);
    for (int k = 0; k < spec->n_parts; k++) {
        const mask_part *src = &spec->parts[k];
        mask_part_eval_fill(src, plan, &he->parts[k]);
        if (src->kind == MASK_PART_DENSE && src->dense.memory == STOF_MEM_DEVICE) {
            size_t bytes = mask_tensor_extent_bytes(&src->dense);
            STOF_TRY(stof_host_alloc(bytes, &he->owned[k]));
            STOF_TRY(mask_download(plan->ctx, he->owned[k], src->dense.data, bytes));
            he->parts[k].data = (const uint8_t *)he->owned[k];
        }
    }
    mask_eval *e = &he->e;
    e->parts = he->parts;
    e->n_parts = spec->n_parts;
    mask_eval_set_geometry(plan, e);
    e->len_q = plan->len_q;
    e->len_k = plan->len_k;
    e->len_q_stride = e->len_k_stride = 1;
    return STOF_OK;
}

void mask_host_eval_free(mask_host_eval *he)
{
    for (int k = 0; k < MASK_MAX_PARTS; k++)
        free(he->owned[k]);
    memset(he->owned, 0, sizeof he->owned);
}

mask_layout mask_layout_make(int bm, int64_t n_rows, int tm, int wpr, int64_t entries,
                             int64_t partial)
{
    mask_layout l;
    size_t off = 0;
#define PLACE(field, bytes)                                                                        \
    do {                                                                                           \
        l.field = off;                                                                             \
        off += ((size_t)(bytes) + 255) & ~(size_t)255;                                             \
    } while (0)
    PLACE(len_q, (size_t)bm * 4);
    PLACE(len_k, (size_t)bm * 4);
    PLACE(row_ptr, (size_t)(n_rows + 1) * 4);
    PLACE(meta, 4 * 4);
    PLACE(col, (size_t)entries * 4);
    PLACE(bits, (size_t)entries * 4);
    PLACE(bitmap, (size_t)partial * tm * wpr * 8);
#undef PLACE
    l.total = off;
    return l;
}

/* ---------------------------------------------------------------- bounds */

/* Tile-column counts of one tile row, built part by part. */
typedef struct row_acc {
    int64_t t_lo[MASK_MAX_PARTS], t_hi[MASK_MAX_PARTS];
    int64_t f_lo[MASK_MAX_PARTS], f_hi[MASK_MAX_PARTS];
    int nt, nf;
    int64_t bt_lo, bt_hi, bf_lo, bf_hi; /* tiles the band touches / covers (empty: lo > hi) */
    bool banded;                        /* a band that bounds (counts cannot be placed) */
    int64_t t_scattered; /* touched tiles of non-interval parts (a sum) */
    int64_t f_scattered; /* largest covered-tile count of one non-interval part */
    int64_t unknown;     /* sum over parts of tiles a part leaves undecided */
} row_acc;

typedef struct bound_ctx {
    const mask_plan *plan;
    const stof_mask_spec *spec;
    int64_t *list_tok[MASK_MAX_PARTS]; /* global lists: prefix counts over tile columns */
    int64_t *list_full[MASK_MAX_PARTS];
    mask_part_eval parts[MASK_MAX_PARTS];
    bool has_blocks, head_blocks; /* head_blocks: a blocks part with one layout per head */
} bound_ctx;

/* Tiles touched by columns [lo, hi] (element indices, inclusive): *c0..*c1. */
static void tiles_touched(int64_t lo, int64_t hi, int tn, int64_t *c0, int64_t *c1)
{
    *c0 = lo > hi ? 1 : lo / tn;
    *c1 = lo > hi ? 0 : hi / tn;
}

/* Tiles lying entirely inside columns [lo, hi]: *c0..*c1. */
static void tiles_covered(int64_t lo, int64_t hi, int tn, int64_t *c0, int64_t *c1)
{
    *c0 = (lo + tn - 1) / tn;
    *c1 = lo > hi ? *c0 - 1 : (hi + 1) / tn - 1;
}

/* Appends tiles c0..c1 cut to the band's b0..b1 to a list; *count: how many. */
static void acc_push(int64_t *lo, int64_t *hi, int *n, int64_t c0, int64_t c1, int64_t b0,
                     int64_t b1, int64_t *count)
{
    c0 = mask_max64(c0, b0);
    c1 = mask_min64(c1, b1);
    *count = 0;
    if (c0 > c1) return;
    lo[*n] = c0;
    hi[*n] = c1;
    (*n)++;
    *count = c1 - c0 + 1;
}

/* Tiles touched by columns [lo, hi] and by the band. */
static void acc_touch(row_acc *a, int64_t lo, int64_t hi, int tn, int64_t *count)
{
    int64_t c0, c1;
    tiles_touched(lo, hi, tn, &c0, &c1);
    acc_push(a->t_lo, a->t_hi, &a->nt, c0, c1, a->bt_lo, a->bt_hi, count);
}

/* Tiles lying entirely inside columns [lo, hi] that the band covers. */
static void acc_cover(row_acc *a, int64_t lo, int64_t hi, int tn, int64_t *count)
{
    int64_t c0, c1;
    tiles_covered(lo, hi, tn, &c0, &c1);
    acc_push(a->f_lo, a->f_hi, &a->nf, c0, c1, a->bf_lo, a->bf_hi, count);
}

/* An analytic part visible for columns [t_lo, t_hi] of some row of the tile
 * row and for columns [f_lo, f_hi] of every row. */
static void acc_interval(row_acc *a, int tn, int64_t lenk, int64_t t_lo, int64_t t_hi, int64_t f_lo,
                         int64_t f_hi, bool covers)
{
    int64_t nt, nf = 0;
    acc_touch(a, mask_max64(t_lo, 0), mask_min64(t_hi, lenk - 1), tn, &nt);
    if (covers) acc_cover(a, mask_max64(f_lo, 0), mask_min64(f_hi, lenk - 1), tn, &nf);
    a->unknown += nt - nf;
}

/* Tiles a block column of width block may straddle. */
static int64_t block_span_tiles(int64_t block, int tn)
{
    if (block % tn == 0) return block / tn;
    if (tn % block == 0) return 1;
    return (block + tn - 1) / tn + 1;
}

/* off_lo, off_hi: the least and most row offset of the analytic parts
 * (mask_row_offset) over the batch entries the bound stands for. */
static void acc_part(const bound_ctx *bc, int k, row_acc *a, int64_t i0, int64_t i1, int64_t lenk,
                     int64_t nc, int64_t off_lo, int64_t off_hi)
{
    const mask_part *p = &bc->spec->parts[k];
    const mask_plan *pl = bc->plan;
    int tn = pl->tn;
    int64_t BIG = INT64_MAX / 4;
    switch (p->kind) {
    case MASK_PART_FULL: acc_interval(a, tn, lenk, 0, lenk - 1, 0, lenk - 1, true); break;
    case MASK_PART_CAUSAL:
        acc_interval(a, tn, lenk, 0, i1 - 1 + off_hi, -BIG, i0 + off_lo, true);
        break;
    case MASK_PART_WINDOW:
        acc_interval(a, tn, lenk, i0 + off_lo - p->a, i1 - 1 + off_hi + p->b,
                     i1 - 1 + off_hi - p->a, i0 + off_lo + p->b, true);
        break;
    case MASK_PART_DILATED: {
        int64_t span = (int64_t)p->a * p->b;
        acc_interval(a, tn, lenk, i0 + off_lo - span, i1 - 1 + off_hi + span,
                     i1 - 1 + off_hi - p->a, i0 + off_lo + p->a, p->b == 1);
        break;
    }
    case MASK_PART_GLOBAL_N:
        if (i1 <= p->a)
            acc_interval(a, tn, lenk, 0, lenk - 1, 0, lenk - 1, true);
        else if (i0 < p->a)
            acc_interval(a, tn, lenk, 0, lenk - 1, 0, p->a - 1, true);
        else
            acc_interval(a, tn, lenk, 0, p->a - 1, 0, p->a - 1, true);
        break;
    case MASK_PART_GLOBAL_LIST: {
        int64_t rows = mask_list_count(p->list, p->a, i0, i1);
        int64_t full = a->banded ? 0 : bc->list_full[k][lenk / tn];
        if (rows == i1 - i0) {
            acc_interval(a, tn, lenk, 0, lenk - 1, 0, lenk - 1, true);
        } else if (rows > 0) {
            int64_t nt;
            acc_touch(a, 0, lenk - 1, tn, &nt);
            a->unknown += nt - full;
            a->f_scattered = mask_max64(a->f_scattered, full);
        } else {
            int64_t tok = bc->list_tok[k][nc];
            a->t_scattered += tok;
            a->unknown += tok - full;
            a->f_scattered = mask_max64(a->f_scattered, full);
        }
        break;
    }
    case MASK_PART_RANDOM: {
        int64_t nbr = (i1 - 1) / p->a - i0 / p->a + 1;
        int64_t touched = nc;
        bool aligned = p->a % pl->tm == 0 && p->a % tn == 0;
        if (nbr * p->b <= MASK_RANDOM_PROBE_MAX)
            touched = mask_min64(nc, nbr * p->b * block_span_tiles(p->a, tn));
        else
            aligned = false;
        a->t_scattered += touched;
        if (!aligned) a->unknown += touched;
        break;
    }
    case MASK_PART_DENSE:
        a->t_scattered += nc;
        a->unknown += nc;
        break;
    default: break; /* blocks: per head, see acc_blocks */
    }
}

/* Blocks parts for head h: touched tiles and undecided tiles, added as counts. */
static void acc_blocks(const bound_ctx *bc, int h, int64_t i0, int64_t i1, int64_t nc,
                       int64_t *touched_sum, int64_t *unknown_sum)
{
    const mask_plan *pl = bc->plan;
    *touched_sum = *unknown_sum = 0;
    for (int k = 0; k < bc->spec->n_parts; k++) {
        const mask_part_eval *p = &bc->parts[k];
        if (p->kind != MASK_PART_BLOCKS) continue;
        int64_t br0 = i0 / p->a, br1 = (i1 - 1) / p->a;
        if (br0 >= p->rows) continue;
        int64_t ones = mask_sat_sum(p, p->heads > 1 ? h : 0, br0, mask_min64(br1, p->rows - 1), 0,
                                    p->cols - 1);
        int64_t touched = mask_min64(nc, ones * block_span_tiles(p->a, pl->tn));
        bool exact = p->a % pl->tm == 0 && p->a % pl->tn == 0 && br1 < p->rows;
        *touched_sum += touched;
        if (!exact) *unknown_sum += touched;
    }
}

static void sort_intervals(int64_t *lo, int64_t *hi, int n)
{
    for (int i = 1; i < n; i++) {
        int64_t l = lo[i], h = hi[i];
        int j = i - 1;
        for (; j >= 0 && lo[j] > l; j--) {
            lo[j + 1] = lo[j];
            hi[j + 1] = hi[j];
        }
        lo[j + 1] = l;
        hi[j + 1] = h;
    }
}

/* Size of the union of n inclusive intervals (sorted in place). */
static int64_t union_size(int64_t *lo, int64_t *hi, int n)
{
    sort_intervals(lo, hi, n);
    int64_t total = 0, cur_lo = 0, cur_hi = -1;
    for (int i = 0; i < n; i++) {
        if (lo[i] > cur_hi + 1 || cur_hi < cur_lo) {
            if (cur_hi >= cur_lo) total += cur_hi - cur_lo + 1;
            cur_lo = lo[i];
            cur_hi = hi[i];
        } else if (hi[i] > cur_hi) {
            cur_hi = hi[i];
        }
    }
    if (cur_hi >= cur_lo) total += cur_hi - cur_lo + 1;
    return total;
}

/* Listed-tile and candidate-tile bounds of a row: tu/fu the unions of the
 * interval parts' touched/covered tiles, the rest counts; bt the tiles the
 * band touches, edge those it touches without covering (0 without a band). */
static void row_finish(int64_t tu, int64_t fu, int64_t t_scattered, int64_t f_scattered,
                       int64_t unknown, int64_t bt, int64_t edge, int64_t lenk, int tn,
                       bool lens_unknown, int64_t *t_out, int64_t *c_out)
{
    int64_t t = mask_min64(bt, tu + t_scattered);
    int64_t f = mask_max64(fu, f_scattered);
    int64_t c = mask_min64(mask_max64(0, t - f), unknown + edge + (lenk % tn != 0));
    if (lens_unknown) c += 1; /* the tile straddling an unknown key length */
    *t_out = t;
    *c_out = mask_min64(t, c);
}

static stof_status bound_prepare(bound_ctx *bc)
{
    const mask_plan *pl = bc->plan;
    for (int k = 0; k < bc->spec->n_parts; k++) {
        const mask_part *p = &bc->spec->parts[k];
        mask_part_eval_fill(p, pl, &bc->parts[k]);
        if (p->kind == MASK_PART_BLOCKS) bc->has_blocks = true;
        if (p->kind == MASK_PART_BLOCKS && p->heads > 1) bc->head_blocks = true;
        if (p->kind != MASK_PART_GLOBAL_LIST) continue;
        size_t n = (size_t)pl->n_tcol + 1;
        STOF_TRY(stof_host_calloc(n, sizeof(int64_t), (void **)&bc->list_tok[k]));
        STOF_TRY(stof_host_calloc(n, sizeof(int64_t), (void **)&bc->list_full[k]));
        int64_t *tok = bc->list_tok[k], *full = bc->list_full[k];
        /* Count tokens per tile column, then turn the counts into prefix sums. */
        for (int i = 0; i < p->a; i++) {
            int64_t c = p->list[i] / pl->tn;
            if (c < pl->n_tcol) tok[c + 1]++;
        }
        for (int64_t c = 0; c < pl->n_tcol; c++) {
            int64_t cnt = tok[c + 1];
            tok[c + 1] = tok[c] + (cnt > 0);
            full[c + 1] = full[c] + (cnt == pl->tn);
        }
    }
    return STOF_OK;
}

static void bound_release(bound_ctx *bc)
{
    for (int k = 0; k < bc->spec->n_parts; k++) {
        free(bc->list_tok[k]);
        free(bc->list_full[k]);
    }
}

/* Sums over the tile rows of one batch entry (all heads); rows past lenq skipped. */
/* The bounds of one (len_q, len_k) instance: listed and partial tiles in all,
 * the most listed tiles of one row, and the rows listing any. */
static void bound_entry(const bound_ctx *bc, int64_t lenq, int64_t lenk, bool lens_unknown,
                        int64_t *t_sum, int64_t *c_sum, int64_t *t_max, int64_t *rows_listed)
{
    const mask_plan *pl = bc->plan;
    int64_t nc = (lenk + pl->tn - 1) / pl->tn;
    int64_t rows = (lenq + pl->tm - 1) / pl->tm;
    int heads = bc->head_blocks ? pl->hm : 1;
    int64_t mult = bc->head_blocks ? 1 : pl->hm;
    /* Unknown lengths: any offset a pair of lengths within the padding gives,
     * unless the keys' lengths are the queries' (offset 0) or there are none
     * (Lk - Lq). */
    int64_t off_lo = 0, off_hi = 0;
    if (pl->align_end) {
        const bool none = !pl->lengths_q && !pl->lengths_k;
        if (!lens_unknown || none) {
            off_lo = off_hi = lenk - lenq;
        } else if (pl->lengths_k != pl->lengths_q) {
            off_lo = -(int64_t)pl->lq;
            off_hi = pl->lk;
        }
    }
    *t_sum = *c_sum = *t_max = *rows_listed = 0;
    if (nc == 0) return;
    row_acc a;
    a.banded = pl->band_left != MASK_BAND_OPEN || pl->band_right != MASK_BAND_OPEN;
    for (int64_t r = 0; r < rows; r++) {
        int64_t i0 = r * pl->tm, i1 = i0 + pl->tm;
        a.nt = a.nf = 0;
        a.t_scattered = a.f_scattered = a.unknown = 0;
        /* The band over the tile row, as a window part is (acc_part), within the keys. */
        tiles_touched(mask_max64(i0 + off_lo - pl->band_left, 0),
                      mask_min64(i1 - 1 + off_hi + pl->band_right, lenk - 1), pl->tn, &a.bt_lo,
                      &a.bt_hi);
        tiles_covered(mask_max64(i1 - 1 + off_hi - pl->band_left, 0),
                      mask_min64(i0 + off_lo + pl->band_right, lenk - 1), pl->tn, &a.bf_lo,
                      &a.bf_hi);
        int64_t bt = mask_max64(0, a.bt_hi - a.bt_lo + 1);
        int64_t edge = a.banded ? bt - mask_max64(0, a.bf_hi - a.bf_lo + 1) : 0;
        for (int k = 0; k < bc->spec->n_parts; k++)
            acc_part(bc, k, &a, i0, i1, lenk, nc, off_lo, off_hi);
        int64_t tu = union_size(a.t_lo, a.t_hi, a.nt), fu = union_size(a.f_lo, a.f_hi, a.nf);
        for (int h = 0; h < heads; h++) {
            int64_t bt_blocks = 0, bu = 0, t, c;
            if (bc->has_blocks) acc_blocks(bc, h, i0, i1, nc, &bt_blocks, &bu);
            row_finish(tu, fu, a.t_scattered + bt_blocks, a.f_scattered, a.unknown + bu, bt, edge,
                       lenk, pl->tn, lens_unknown, &t, &c);
            *t_sum += t * mult;
            *c_sum += c * mult;
            if (t > *t_max) *t_max = t;
            if (t > 0) *rows_listed += mult;
        }
    }
}

stof_status mask_plan_bound(const stof_mask_spec *spec, mask_plan *plan)
{
    bound_ctx bc;
    bc.plan = plan;
    bc.spec = spec;
    bc.has_blocks = bc.head_blocks = false;
    memset(bc.list_tok, 0, (size_t)spec->n_parts * sizeof bc.list_tok[0]);
    memset(bc.list_full, 0, (size_t)spec->n_parts * sizeof bc.list_full[0]);
    stof_status st = bound_prepare(&bc);
    int64_t t_total = 0, c_total = 0, t = 0, c = 0, t_max = 0, t_row_max = 0, listed = 0, l = 0;
    if (st == STOF_OK) {
        bool exact = plan->lens_known && (int64_t)plan->bm * plan->n_trow <= PLAN_EXACT_ROWS_MAX;
        if (exact) {
            int64_t prev_q = -1, prev_k = -1;
            for (int b = 0; b < plan->bm; b++) {
                if (plan->len_q[b] != prev_q || plan->len_k[b] != prev_k)
                    bound_entry(&bc, plan->len_q[b], plan->len_k[b], false, &t, &c, &t_max, &l);
                prev_q = plan->len_q[b];
                prev_k = plan->len_k[b];
                t_total += t;
                c_total += c;
                listed += l;
                if (t_max > t_row_max) t_row_max = t_max;
            }
        } else {
            bound_entry(&bc, plan->lq, plan->lk, true, &t, &c, &t_row_max, &l);
            t_total = t * plan->bm;
            c_total = c * plan->bm;
            listed = l * plan->bm;
        }
    }
    bound_release(&bc);
    STOF_TRY(st);
    plan->cap_entries = t_total;
    plan->cap_partial = c_total;
    STOF_REQUIRE(t_total <= INT32_MAX, STOF_ERR_UNSUPPORTED,
                 "mask compile: up to %lld listed tiles is too many (at most %d); use larger "
                 "tiles",
                 (long long)t_total, INT32_MAX);
    double rows = (double)plan->n_rows;
    plan->est.tiles_per_row = (double)t_total / rows;
    plan->est.partial_per_row = (double)c_total / rows;
    plan->est.tile_density = (double)t_total / (rows * plan->n_tcol);
    plan->est.row_imbalance = listed > 0 ? (double)t_row_max * (double)listed / (double)t_total : 1.0;
    return STOF_OK;
}
