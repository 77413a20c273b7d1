/*
 * compile.c — stof_mask_compile and the CPU builder: every tile row of every
 * instance is walked in column order, tiles are classified by the interval
 * reasoning of mask_eval.h, and only undecided ones are evaluated element
 * by element. The result is exact-sized; on a GPU context it is uploaded.
 *
 * The CPU builder also checks its counts against the host-side bounds the
 * GPU builder allocates with (for known and for unknown lengths), so the CPU
 * tests catch a bound that is too small before a GPU ever sees it.
 */
#include "mask/mask_internal.h"

#include <stdlib.h>
#include <string.h>

stof_mask_params stof_mask_default_params(void)
{
    stof_mask_params p;
    memset(&p, 0, sizeof p);
    p.batch = 1;
    p.heads = 1;
    p.builder = STOF_BUILDER_AUTO;
    return p;
}

/* Points m->t at the arrays of a block laid out by m->lay. */
void mask_point_tiles(stof_mask *m, const mask_plan *plan, void *base)
{
    char *p = (char *)base;
    mask_tiles *t = &m->t;
    t->batch = plan->batch;
    t->heads = plan->heads;
    t->bm = plan->bm;
    t->hm = plan->hm;
    t->n_inst = plan->n_inst;
    t->lq = plan->lq;
    t->lk = plan->lk;
    t->tile_m = plan->tm;
    t->tile_n = plan->tn;
    t->n_trow = plan->n_trow;
    t->n_tcol = plan->n_tcol;
    t->words_per_row = plan->wpr;
    t->len_q = (const int32_t *)(p + m->lay.len_q);
    t->len_k = (const int32_t *)(p + m->lay.len_k);
    t->row_ptr = (const int32_t *)(p + m->lay.row_ptr);
    t->col = (const int32_t *)(p + m->lay.col);
    t->bits = (const int32_t *)(p + m->lay.bits);
    t->bitmap = (const uint64_t *)(p + m->lay.bitmap);
    t->split = 1;
    t->all_visible = 0;
    t->causal = 0;
    t->band = 0;
    t->band_left = t->band_right = MASK_TILES_OPEN;
    t->align_end = plan->align_end;
    m->storage = base;
}

/* ---------------------------------------------------------------- CPU builder */

typedef struct cpu_out {
    int32_t *row_ptr, *col, *bits;
    uint64_t *bitmap;
    int64_t entries, cap, partial, bitmap_cap, candidates;
} cpu_out;

static stof_status grow(void **p, int64_t *cap, int64_t need, size_t elem)
{
    if (need <= *cap) return STOF_OK;
    int64_t n = *cap ? *cap : 256;
    while (n < need)
        n *= 2;
    void *q = realloc(*p, (size_t)n * elem);
    STOF_REQUIRE(q, STOF_ERR_OOM, "out of host memory compiling a mask (%lld x %zu bytes)",
                 (long long)n, elem);
    *p = q;
    *cap = n;
    return STOF_OK;
}

/* Bits of one tile; *any / *all say whether some / every element is set. */
static void cpu_tile_bits(const mask_eval *e, int b, int h, int lenq, int lenk, int r, int c,
                          int wpr, uint64_t *out, bool *any, bool *all)
{
    int tm = e->tile_m, tn = e->tile_n;
    int i0 = r * tm, j0 = c * tn;
    uint64_t full = tn >= 64 ? ~0ull : ((1ull << tn) - 1);
    *any = false;
    *all = true;
    for (int rr = 0; rr < tm; rr++) {
        for (int w = 0; w < wpr; w++) {
            uint64_t word = 0;
            int width = tn - 64 * w < 64 ? tn - 64 * w : 64;
            for (int bit = 0; bit < width; bit++)
                if (mask_tile_element(e, b, h, lenq, lenk, i0 + rr, j0 + 64 * w + bit))
                    word |= 1ull << bit;
            out[rr * wpr + w] = word;
            *any |= word != 0;
            *all &= word == full;
        }
    }
}

static stof_status cpu_push(cpu_out *o, int32_t col, int32_t bits)
{
    if (o->entries == o->cap) {
        int64_t n = o->cap ? o->cap * 2 : 256;
        int32_t *c = realloc(o->col, (size_t)n * sizeof *c);
        if (c) o->col = c;
        int32_t *k = c ? realloc(o->bits, (size_t)n * sizeof *k) : NULL;
        if (k) o->bits = k;
        STOF_REQUIRE(c && k, STOF_ERR_OOM, "out of host memory compiling a mask (%lld tiles)",
                     (long long)n);
        o->cap = n;
    }
    o->col[o->entries] = col;
    o->bits[o->entries] = bits;
    o->entries++;
    return STOF_OK;
}

static stof_status cpu_build_rows(const mask_eval *e, const mask_plan *plan, cpu_out *o)
{
    int words = plan->tm * plan->wpr;
    uint64_t *tile = NULL;
    STOF_TRY(stof_host_alloc((size_t)words * sizeof *tile, (void **)&tile));
    stof_status st = STOF_OK;
    for (int s = 0; s < plan->n_inst && st == STOF_OK; s++) {
        int b, h;
        mask_instance_bh(e, s, &b, &h);
        int lenq = plan->len_q[b], lenk = plan->len_k[b];
        for (int r = 0; r < plan->n_trow && st == STOF_OK; r++) {
            o->row_ptr[(int64_t)s * plan->n_trow + r] = (int32_t)o->entries;
            for (int c = 0; c < plan->n_tcol && st == STOF_OK; c++) {
                int cls = mask_tile_class(e, b, h, lenq, lenk, r, c);
                if (cls == MASK_TILE_EMPTY) continue;
                if (cls == MASK_TILE_FULL) {
                    st = cpu_push(o, c, -1);
                    continue;
                }
                o->candidates++;
                bool any, all;
                cpu_tile_bits(e, b, h, lenq, lenk, r, c, plan->wpr, tile, &any, &all);
                if (!any) continue;
                if (all) {
                    st = cpu_push(o, c, -1);
                    continue;
                }
                st = grow((void **)&o->bitmap, &o->bitmap_cap, (o->partial + 1) * words,
                          sizeof(uint64_t));
                if (st != STOF_OK) break;
                memcpy(o->bitmap + o->partial * words, tile, (size_t)words * sizeof *tile);
                st = cpu_push(o, c, (int32_t)o->partial);
                o->partial++;
            }
        }
    }
    o->row_ptr[plan->n_rows] = (int32_t)o->entries;
    free(tile);
    return st;
}

/* The exact counts must fit the bounds the GPU builder would allocate with. */
static stof_status cpu_check_bounds(const stof_mask_spec *spec, const mask_plan *plan,
                                    const cpu_out *o)
{
    mask_plan unknown = *plan;
    unknown.lens_known = false;
    STOF_TRY(mask_plan_bound(spec, &unknown));
    const mask_plan *forms[2] = {plan, &unknown};
    for (int k = 0; k < 2; k++)
        STOF_REQUIRE(o->entries <= forms[k]->cap_entries && o->candidates <= forms[k]->cap_partial,
                     STOF_ERR_INTERNAL,
                     "mask compile: %lld tiles / %lld candidates exceed the %s-length bound "
                     "%lld / %lld",
                     (long long)o->entries, (long long)o->candidates, k ? "unknown" : "known",
                     (long long)forms[k]->cap_entries, (long long)forms[k]->cap_partial);
    return STOF_OK;
}

/* Copies the exact-sized result into one block (host or device) and points m at it. */
static stof_status cpu_store(stof_ctx *ctx, const mask_plan *plan, const cpu_out *o, stof_mask *m)
{
    m->lay = mask_layout_make(plan->bm, plan->n_rows, plan->tm, plan->wpr, o->entries, o->partial);
    char *host = NULL;
    STOF_TRY(stof_host_calloc(1, m->lay.total, (void **)&host));
    int32_t meta[4] = {(int32_t)o->entries, (int32_t)o->partial, 0, 0};
    memcpy(host + m->lay.len_q, plan->len_q, (size_t)plan->bm * 4);
    memcpy(host + m->lay.len_k, plan->len_k, (size_t)plan->bm * 4);
    memcpy(host + m->lay.row_ptr, o->row_ptr, (size_t)(plan->n_rows + 1) * 4);
    memcpy(host + m->lay.meta, meta, sizeof meta);
    if (o->entries) {
        memcpy(host + m->lay.col, o->col, (size_t)o->entries * 4);
        memcpy(host + m->lay.bits, o->bits, (size_t)o->entries * 4);
    }
    if (o->partial)
        memcpy(host + m->lay.bitmap, o->bitmap, (size_t)o->partial * plan->tm * plan->wpr * 8);
    m->entries = m->cap_entries = o->entries;
    m->partial = m->cap_partial = o->partial;
    if (ctx->device != STOF_DEVICE_GPU) {
        mask_point_tiles(m, plan, host);
        return STOF_OK;
    }
    void *dev = NULL;
    stof_status st = stof_dev_alloc(ctx, m->lay.total, &dev);
    if (st == STOF_OK)
        st = stof_dev_upload(ctx, dev, host, m->lay.total);
    /* A pageable source is staged before the copy call returns: host can go now. */
    free(host);
    if (st != STOF_OK) {
        stof_dev_free(ctx, dev);
        return st;
    }
    mask_point_tiles(m, plan, dev);
    return STOF_OK;
}

static stof_status cpu_build(stof_ctx *ctx, const stof_mask_spec *spec, const mask_plan *plan,
                             stof_mask *m)
{
    mask_host_eval he;
    cpu_out o;
    memset(&o, 0, sizeof o);
    stof_status st = mask_host_eval_make(spec, plan, &he);
    if (st == STOF_OK)
        st = stof_host_alloc((size_t)(plan->n_rows + 1) * sizeof(int32_t), (void **)&o.row_ptr);
    if (st == STOF_OK) st = cpu_build_rows(&he.e, plan, &o);
    if (st == STOF_OK) st = cpu_check_bounds(spec, plan, &o);
    if (st == STOF_OK) st = cpu_store(ctx, plan, &o, m);
    mask_host_eval_free(&he);
    free(o.row_ptr);
    free(o.col);
    free(o.bits);
    free(o.bitmap);
    return st;
}

/* ---------------------------------------------------------------- entry points */

/*
 * Default tile shape. 64 x 64 tiles waste little on sparse masks and serve
 * every kernel. 128-row tiles let the block-wise kernel run 128-row CTAs of
 * four 32-row warps, which halve both the K/V traffic from L2 and the
 * shared-memory traffic per flop (measured on an H200: dense (4, 16, 4096)
 * 1.09 -> 0.99 ms, causal 0.60 -> 0.57 ms) but list more masked-out area on
 * sparse masks (window 0.113 -> 0.128 ms). So 128 x 64 is tried only when the
 * kernel has 32-row warps for the head dim (<= 64), rows are long (Lq >= 1024)
 * and the 128-row CTAs still fill two waves of the device, and kept only when
 * its listed area stays within 10% of the 64 x 64 plan's.
 */
bool mask_tall_tiles_may_pay(const stof_ctx *ctx, const stof_mask_params *p)
{
    if (!ctx || ctx->device != STOF_DEVICE_GPU || ctx->sm_count <= 0) return false;
    if (p->head_dim <= 0 || p->head_dim > 64 || p->len_q < 1024) return false;
    double ctas = (double)p->batch * p->heads * (double)stof_cdiv(p->len_q, 128);
    return ctas >= 2.0 * ctx->sm_count;
}

/* Listed tile area of a plan, in elements (from its host-side estimate). */
static double plan_listed_area(const mask_plan *plan)
{
    return plan->est.tiles_per_row * (double)plan->n_rows * plan->tm * plan->tn;
}

stof_status mask_plan_tiles(stof_ctx *ctx, const stof_mask_spec *spec,
                            const stof_mask_params *params, bool download, mask_plan *plan)
{
    STOF_TRY(mask_plan_make(ctx, spec, params, download, plan));
    stof_status st = mask_plan_bound(spec, plan);
    if (st != STOF_OK || params->tile_m || params->tile_n || !mask_tall_tiles_may_pay(ctx, params))
        return st;
    stof_mask_params tall_params = *params;
    tall_params.tile_m = 128;
    tall_params.tile_n = 64;
    mask_plan tall;
    st = mask_plan_make(ctx, spec, &tall_params, download, &tall);
    if (st == STOF_OK) st = mask_plan_bound(spec, &tall);
    if (st == STOF_OK && plan_listed_area(&tall) <= 1.1 * plan_listed_area(plan)) {
        mask_plan_free(plan);
        *plan = tall;
        return STOF_OK;
    }
    /* Tall tiles are an option, never a reason to fail: the 64 x 64 plan stands. */
    mask_plan_free(&tall);
    stof_clear_error();
    return STOF_OK;
}

/* Whether the spec holds everywhere (mask.h, all_visible): a union with a
 * full part, in a band that reaches every pair of the tile-padded plane at
 * any row offset (|off| <= max(Lq, Lk)). */
static bool spec_all_visible(const stof_mask_spec *spec, const mask_plan *plan)
{
    int64_t rows = (int64_t)plan->n_trow * plan->tm;
    if (spec->band_left < rows + plan->lk || spec->band_right < (int64_t)plan->lq + plan->lk)
        return false;
    for (int i = 0; i < spec->n_parts; i++)
        if (spec->parts[i].kind == MASK_PART_FULL) return true;
    return false;
}

/* Whether the spec is the causal mask (mask.h, causal): within a band whose
 * left side reaches every pair (as for all_visible), either a full part cut
 * by a band ending at the diagonal (within:causal) or causal parts alone,
 * which a band ending at or past the diagonal leaves as they are. */
static bool spec_causal(const stof_mask_spec *spec, const mask_plan *plan)
{
    int64_t rows = (int64_t)plan->n_trow * plan->tm;
    if (spec->n_parts < 1 || spec->band_left < rows + plan->lk) return false;
    bool full = false, causal_only = true;
    for (int i = 0; i < spec->n_parts; i++) {
        full = full || spec->parts[i].kind == MASK_PART_FULL;
        causal_only = causal_only && spec->parts[i].kind == MASK_PART_CAUSAL;
    }
    return full ? spec->band_right == 0 : causal_only && spec->band_right >= 0;
}

/* Whether the spec is an analytic band (mask.h, band) and which: each of
 * full, causal and window holds on an interval of j - (i + off) containing 0
 * (full: open both sides, causal: open to the left and 0 to the right), so a
 * union of them is one interval, [-max left, max right]; the within: band
 * then cuts it. Any other part (dilated, global, random, blocks, dense) is
 * not a band. */
_Static_assert(MASK_TILES_OPEN == MASK_BAND_OPEN, "mask.h's open band side is mask_eval.h's");

static bool spec_band(const stof_mask_spec *spec, int64_t *left, int64_t *right)
{
    if (spec->n_parts < 1) return false;
    int64_t l = 0, r = 0;
    for (int i = 0; i < spec->n_parts; i++) {
        const mask_part *p = &spec->parts[i];
        switch (p->kind) {
        case MASK_PART_FULL: l = r = MASK_BAND_OPEN; break;
        case MASK_PART_CAUSAL: l = MASK_BAND_OPEN; break;
        case MASK_PART_WINDOW:
            l = mask_max64(l, p->a);
            r = mask_max64(r, p->b);
            break;
        default: return false;
        }
    }
    *left = mask_min64(l, spec->band_left);
    *right = mask_min64(r, spec->band_right);
    return true;
}

/* ---------------------------------------------------------------- residue split */

/* The d by which a mask of this spec and these params is stored split
 * (mask.h): every part dilated by one d > 1, no lengths, d dividing Lq and
 * Lk, and no row offset (Lq == Lk or top-left alignment). Else 1. */
static int residue_split(const stof_mask_spec *spec, const stof_mask_params *p)
{
    if (!spec || spec->n_parts == 0 || p->lengths_q || p->lengths_k) return 1;
    if (spec->align == STOF_ALIGN_BOTTOM_RIGHT && p->len_q != p->len_k) return 1;
    const int d = spec->parts[0].b;
    for (int i = 0; i < spec->n_parts; i++)
        if (spec->parts[i].kind != MASK_PART_DILATED || spec->parts[i].b != d) return 1;
    if (d < 2 || p->len_q < d || p->len_k < d || p->len_q % d || p->len_k % d) return 1;
    return d;
}

/* What a split mask is compiled from: each dilated part as the window it is
 * over one residue class, at the classes' lengths. A band -L <= j - i <= R
 * is -L/d <= c - a <= R/d there (i - j = (a - c) d, rounded inwards). */
static stof_status split_inputs(const stof_mask_spec *spec, const stof_mask_params *params, int d,
                                stof_mask_spec **sub, stof_mask_params *sub_params)
{
    STOF_TRY(stof_mask_spec_create(sub));
    (*sub)->align = spec->align; /* no offset either way (residue_split) */
    if (spec->band_left != MASK_BAND_OPEN) (*sub)->band_left = spec->band_left / d;
    if (spec->band_right != MASK_BAND_OPEN) (*sub)->band_right = spec->band_right / d;
    for (int i = 0; i < spec->n_parts; i++) {
        stof_status st = stof_mask_spec_add_window(*sub, spec->parts[i].a, spec->parts[i].a);
        if (st != STOF_OK) {
            stof_mask_spec_destroy(*sub);
            *sub = NULL;
            return st;
        }
    }
    *sub_params = *params;
    sub_params->len_q = params->len_q / d;
    sub_params->len_k = params->len_k / d;
    return STOF_OK;
}

stof_status stof_mask_choose_tiles(stof_ctx *ctx, const stof_mask_spec *spec,
                                   const stof_mask_params *params, int *tile_m, int *tile_n)
{
    STOF_REQUIRE(ctx && spec && params && tile_m && tile_n, STOF_ERR_INVALID_ARG,
                 "stof_mask_choose_tiles: missing argument");
    const int d = residue_split(spec, params);
    if (d > 1) {
        stof_mask_spec *sub = NULL;
        stof_mask_params sub_params;
        STOF_TRY(split_inputs(spec, params, d, &sub, &sub_params));
        stof_status st = stof_mask_choose_tiles(ctx, sub, &sub_params, tile_m, tile_n);
        stof_mask_spec_destroy(sub);
        return st;
    }
    mask_plan plan;
    STOF_TRY(mask_plan_tiles(ctx, spec, params, false, &plan));
    *tile_m = plan.tm;
    *tile_n = plan.tn;
    mask_plan_free(&plan);
    return STOF_OK;
}

stof_status stof_mask_compile(stof_ctx *ctx, const stof_mask_spec *spec,
                              const stof_mask_params *params, stof_mask **out)
{
    STOF_REQUIRE(out, STOF_ERR_INVALID_ARG, "stof_mask_compile: out is NULL");
    *out = NULL;
    STOF_REQUIRE(ctx, STOF_ERR_INVALID_ARG, "stof_mask_compile: ctx is NULL");
    STOF_REQUIRE(params, STOF_ERR_INVALID_ARG, "stof_mask_compile: params is NULL");
    stof_mask_builder builder = params->builder;
    STOF_REQUIRE(builder == STOF_BUILDER_AUTO || builder == STOF_BUILDER_CPU ||
                     builder == STOF_BUILDER_GPU,
                 STOF_ERR_INVALID_ARG, "stof_mask_compile: unknown builder %d", (int)builder);
    bool gpu_ctx = ctx->device == STOF_DEVICE_GPU;
    STOF_REQUIRE(builder != STOF_BUILDER_GPU || gpu_ctx, STOF_ERR_INVALID_ARG,
                 "stof_mask_compile: the GPU builder needs a GPU context (this one runs on the "
                 "CPU)");
    bool use_gpu = builder == STOF_BUILDER_GPU || (builder == STOF_BUILDER_AUTO && gpu_ctx);
    STOF_REQUIRE(!params->reusable || use_gpu, STOF_ERR_INVALID_ARG,
                 "stof_mask_compile: a reusable mask needs the GPU builder (builder %d on a %s "
                 "context)",
                 (int)builder, gpu_ctx ? "GPU" : "CPU");
    const int d = residue_split(spec, params);
    if (d > 1) {
        stof_mask_spec *sub = NULL;
        stof_mask_params sub_params;
        STOF_TRY(split_inputs(spec, params, d, &sub, &sub_params));
        stof_status st = stof_mask_compile(ctx, sub, &sub_params, out);
        stof_mask_spec_destroy(sub);
        if (st == STOF_OK) {
            (*out)->t.split = d;
            (*out)->t.band = 0; /* a band over the classes, not over the positions */
        }
        return st;
    }
    mask_plan plan;
    stof_mask *m = NULL;
    stof_status st = mask_plan_tiles(ctx, spec, params, !use_gpu, &plan);
    if (st == STOF_OK) st = stof_host_calloc(1, sizeof *m, (void **)&m);
    if (st == STOF_OK) {
        m->ctx = ctx;
        m->memory = gpu_ctx ? STOF_MEM_DEVICE : STOF_MEM_HOST;
        m->est = plan.est;
        m->entries = m->partial = -1;
#if STOF_HAVE_CUDA
        st = use_gpu ? mask_gpu_build(ctx, spec, &plan, params->reusable != 0, m)
                     : cpu_build(ctx, spec, &plan, m);
#else
        st = cpu_build(ctx, spec, &plan, m);
#endif
        if (st == STOF_OK) {
            m->t.all_visible = spec_all_visible(spec, &plan);
            m->t.causal = !m->t.all_visible && spec_causal(spec, &plan);
            m->t.band = !m->t.all_visible && spec_band(spec, &m->t.band_left, &m->t.band_right);
        }
    }
    mask_plan_free(&plan);
    if (st != STOF_OK) {
        free(m);
        return st;
    }
    *out = m;
    return STOF_OK;
}

void stof_mask_destroy(stof_mask *mask)
{
    if (!mask) return;
    if (mask->memory == STOF_MEM_DEVICE)
        stof_dev_free(mask->ctx, mask->storage);
    else
        free(mask->storage);
    if (mask->host_copy) {
        mask_tiles_host_free(mask->host_copy);
        free(mask->host_copy);
    }
    if (mask->scratch) stof_dev_free(mask->ctx, mask->scratch);
#if STOF_HAVE_CUDA
    mask_gpu_replay_free(mask->replay);
#endif
    free(mask);
}

stof_status stof_mask_rebuild(stof_mask *mask)
{
    STOF_REQUIRE(mask, STOF_ERR_INVALID_ARG, "stof_mask_rebuild: mask is NULL");
    STOF_REQUIRE(mask->replay, STOF_ERR_INVALID_ARG,
                 "stof_mask_rebuild: the mask was not compiled with reusable = 1 by the GPU "
                 "builder");
    if (mask->host_copy) {
        mask_tiles_host_free(mask->host_copy);
        free(mask->host_copy);
        mask->host_copy = NULL;
    }
    mask->entries = mask->partial = -1;
#if STOF_HAVE_CUDA
    return mask_gpu_relaunch(mask);
#else
    return stof_error(STOF_ERR_INTERNAL, "stof_mask_rebuild: a reusable mask in a CPU-only build");
#endif
}

const mask_tiles *stof_mask_tiles_view(const stof_mask *mask)
{
    return mask ? &mask->t : NULL;
}

const mask_estimate *stof_mask_estimate_view(const stof_mask *mask)
{
    return mask ? &mask->est : NULL;
}

stof_ctx *stof_mask_ctx(const stof_mask *mask)
{
    return mask ? mask->ctx : NULL;
}

stof_memory stof_mask_memory(const stof_mask *mask)
{
    return mask ? mask->memory : STOF_MEM_HOST;
}
