/*
 * test_mask_gen.c — random mask cases for the mask tests (#included by
 * test_mask_compile.c and test_mask_gpu.c, not a test of its own): unions of
 * every kind of part, within bands or not, per-batch and per-head variation,
 * lengths (including 0 and full), odd and rectangular shapes, every tile
 * size; plus the checks
 * every compiled mask must pass against the dense oracle.
 *
 * Dense parts are drawn as a mixture of solid rectangles and noise so that
 * tiles come out full, empty and partial; an optional hook moves them (and
 * lengths) to device memory.
 */
#include "mask/mask.h"
#include "testlib.h"

#include <stdlib.h>
#include <string.h>

#define GEN_MAX_DENSE 4

typedef struct gen_case {
    stof_mask_spec *spec;
    int batch, heads, lq, lk, tm, tn;
    int32_t *len_q, *len_k; /* host [batch] or NULL (as passed to compile) */
    int32_t *eff_k;         /* key lengths in effect (the NULL rule applied), host [batch] */
    bool has_dense_or_blocks;
    bool has_full;  /* a full part (all_visible) */
    bool band_cuts; /* a band that may cut the plane (all_visible off) */
    void *dense_mem[GEN_MAX_DENSE];
    stof_memory dense_kind[GEN_MAX_DENSE];
    int n_dense;
    int n_parts;
    char desc[1024];
} gen_case;

/* Where dense tensors go: NULL keeps them on the host. */
typedef void *(*gen_place_fn)(const void *host, size_t bytes);
typedef void (*gen_release_fn)(void *p);

static int gen_pick(test_rng *r, const int *v, int n)
{
    return v[test_rng_int(r, 0, n - 1)];
}

static int gen_length(test_rng *r)
{
    static const int pool[] = {1,  2,  7,   15,  16,  17,  31,  33,  63,  64,
                               65, 96, 100, 127, 128, 129, 191, 200, 257, 300};
    return gen_pick(r, pool, (int)(sizeof pool / sizeof pool[0]));
}

static int32_t gen_real_length(test_rng *r, int full)
{
    switch (test_rng_int(r, 0, 5)) {
    case 0: return full;
    case 1: return 0;
    case 2: return (int32_t)test_rng_int(r, full > 1 ? full - 1 : full, full);
    default: return (int32_t)test_rng_int(r, 0, full);
    }
}

static void gen_appendf(gen_case *g, const char *fmt, ...) STOF_PRINTF(2, 3);

static void gen_appendf(gen_case *g, const char *fmt, ...)
{
    size_t n = strlen(g->desc);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(g->desc + n, sizeof g->desc - n, fmt, ap);
    va_end(ap);
}

/* Solid rectangles over noise: a plane with full, empty and mixed tiles. */
static void gen_dense_plane(test_rng *r, uint8_t *p, int lq, int lk, int64_t row_stride)
{
    int mode = (int)test_rng_int(r, 0, 3);
    double density = mode == 0 ? 0.02 : mode == 1 ? 0.5 : mode == 2 ? 0.97 : 0.0;
    for (int i = 0; i < lq; i++)
        for (int j = 0; j < lk; j++)
            p[i * row_stride + j] = test_rng_float(r, 0, 1) < density;
    int rects = (int)test_rng_int(r, 0, 3);
    for (int k = 0; k < rects; k++) {
        int i0 = (int)test_rng_int(r, 0, lq - 1), j0 = (int)test_rng_int(r, 0, lk - 1);
        int i1 = (int)test_rng_int(r, i0, lq - 1), j1 = (int)test_rng_int(r, j0, lk - 1);
        uint8_t v = (uint8_t)test_rng_int(r, 0, 1);
        for (int i = i0; i <= i1; i++)
            for (int j = j0; j <= j1; j++)
                p[i * row_stride + j] = v;
    }
}

static void gen_add_dense(test_rng *r, gen_case *g, gen_place_fn place)
{
    int64_t shape[4] = {test_rng_int(r, 0, 1) ? g->batch : 1, test_rng_int(r, 0, 1) ? g->heads : 1,
                        g->lq, g->lk};
    bool strided = test_rng_int(r, 0, 3) == 0;
    int64_t row_stride = g->lk + (strided ? test_rng_int(r, 1, 9) : 0);
    int64_t plane = g->lq * row_stride;
    size_t bytes = (size_t)(shape[0] * shape[1] * plane);
    uint8_t *host = calloc(bytes, 1);
    for (int64_t k = 0; k < shape[0] * shape[1]; k++)
        gen_dense_plane(r, host + k * plane, g->lq, g->lk, row_stride);
    stof_tensor t = stof_tensor_make(host, STOF_U8, STOF_MEM_HOST, 4, shape);
    t.stride[2] = row_stride;
    t.stride[1] = plane;
    t.stride[0] = plane * shape[1];
    if (place && test_rng_int(r, 0, 1)) {
        t.data = place(host, bytes);
        t.memory = STOF_MEM_DEVICE;
        free(host);
    }
    g->dense_mem[g->n_dense] = t.data;
    g->dense_kind[g->n_dense] = t.memory;
    g->n_dense++;
    g->n_parts += stof_mask_spec_add_dense(g->spec, &t) == STOF_OK;
    gen_appendf(g, "dense[%lld,%lld%s%s],", (long long)shape[0], (long long)shape[1],
                strided ? ",strided" : "", t.memory == STOF_MEM_DEVICE ? ",dev" : "");
}

static void gen_add_blocks(test_rng *r, gen_case *g)
{
    static const int sizes[] = {1, 5, 8, 16, 24, 32, 64, 100};
    int bs = gen_pick(r, sizes, 8);
    if ((int64_t)stof_cdiv(g->lq, bs) * stof_cdiv(g->lk, bs) > 40000) bs = 64;
    int heads = test_rng_int(r, 0, 1) ? g->heads : 1;
    int rows = (int)stof_cdiv(g->lq, bs) + (int)test_rng_int(r, 0, 1);
    int cols = (int)stof_cdiv(g->lk, bs) + (int)test_rng_int(r, 0, 1);
    size_t n = (size_t)heads * rows * cols;
    uint8_t *layout = malloc(n);
    double density = test_rng_float(r, 0, 1);
    int style = (int)test_rng_int(r, 0, 2);
    for (size_t k = 0; k < n; k++) {
        int rr = (int)(k / cols % rows), cc = (int)(k % cols);
        if (style == 0)
            layout[k] = test_rng_float(r, 0, 1) < density;
        else if (style == 1)
            layout[k] = abs(rr - cc) <= 1 || rr < 2 || cc < 2; /* BigBird-like */
        else
            layout[k] = (uint8_t)(test_rng_float(r, 0, 1) < 0.2 || rr == cc);
    }
    g->n_parts += stof_mask_spec_add_blocks(g->spec, bs, heads, rows, cols, layout) == STOF_OK;
    free(layout);
    gen_appendf(g, "blocks:%d(h%d,%dx%d,s%d),", bs, heads, rows, cols, style);
}

static void gen_add_part(test_rng *r, gen_case *g, gen_place_fn place)
{
    int lmax = g->lq > g->lk ? g->lq : g->lk;
    int kind = (int)test_rng_int(r, 0, 19);
    switch (kind) {
    case 0:
        if (stof_mask_spec_add_full(g->spec) == STOF_OK) {
            g->n_parts++;
            g->has_full = true;
        }
        gen_appendf(g, "full,");
        break;
    case 1:
    case 2:
        g->n_parts += stof_mask_spec_add_causal(g->spec) == STOF_OK;
        gen_appendf(g, "causal,");
        break;
    case 3:
    case 4:
    case 5: {
        int left = (int)test_rng_int(r, 0, lmax), right = (int)test_rng_int(r, 0, lmax);
        if (test_rng_int(r, 0, 2) == 0) right = left;
        if (test_rng_int(r, 0, 5) == 0) left = 2000000000; /* no overflow at the extremes */
        g->n_parts += stof_mask_spec_add_window(g->spec, left, right) == STOF_OK;
        gen_appendf(g, "window:%d:%d,", left, right);
        break;
    }
    case 6:
    case 7: {
        int w = (int)test_rng_int(r, 0, 24), d = (int)test_rng_int(r, 1, 40);
        g->n_parts += stof_mask_spec_add_dilated(g->spec, w, d) == STOF_OK;
        gen_appendf(g, "dilated:%dx%d,", w, d);
        break;
    }
    case 8:
    case 9: {
        int n = (int)test_rng_int(r, 1, lmax + 3);
        g->n_parts += stof_mask_spec_add_global(g->spec, n) == STOF_OK;
        gen_appendf(g, "global:%d,", n);
        break;
    }
    case 10:
    case 11: {
        int count = (int)test_rng_int(r, 1, 8);
        int32_t tok[40];
        gen_appendf(g, "global:[");
        bool run = test_rng_int(r, 0, 2) == 0; /* a run can cover whole tiles */
        if (run) count = (int)test_rng_int(r, 16, 40);
        int start = (int)test_rng_int(r, 0, lmax);
        for (int k = 0; k < count; k++) {
            tok[k] = run ? start + k : (int32_t)test_rng_int(r, 0, lmax + 4);
            gen_appendf(g, "%d ", (int)tok[k]);
        }
        gen_appendf(g, "],");
        g->n_parts += stof_mask_spec_add_global_list(g->spec, tok, count) == STOF_OK;
        break;
    }
    case 12:
    case 13:
    case 14: {
        static const int blocks[] = {1, 3, 8, 16, 32, 64, 128, 20};
        int block = gen_pick(r, blocks, 8), per_row = (int)test_rng_int(r, 1, 4);
        if (test_rng_int(r, 0, 9) == 0) per_row = 70; /* past the probe limit */
        uint64_t seed = test_rng_next(r);
        g->n_parts += stof_mask_spec_add_random(g->spec, block, per_row, seed) == STOF_OK;
        gen_appendf(g, "random:%dx%d@%llu,", block, per_row, (unsigned long long)seed);
        break;
    }
    case 15:
    case 16:
    case 17:
        gen_add_blocks(r, g);
        g->has_dense_or_blocks = true;
        break;
    default:
        if (g->n_dense < GEN_MAX_DENSE) {
            gen_add_dense(r, g, place);
            g->has_dense_or_blocks = true;
        }
        break;
    }
}

/* A random case; lengths as host arrays (the caller may move them). */
static void gen_case_make(test_rng *r, gen_case *g, gen_place_fn place, bool allow_long)
{
    memset(g, 0, sizeof *g);
    stof_mask_spec_create(&g->spec);
    static const int tiles[] = {0, 16, 32, 64, 128};
    g->tm = gen_pick(r, tiles, 5);
    g->tn = gen_pick(r, tiles, 5);
    if (allow_long && test_rng_int(r, 0, 60) == 0) {
        g->batch = g->heads = 1;
        g->lq = g->lk = 4097;
        if (test_rng_int(r, 0, 1)) g->lk = 1500;
    } else {
        g->batch = (int)test_rng_int(r, 1, 3);
        g->heads = (int)test_rng_int(r, 1, 3);
        g->lq = gen_length(r);
        g->lk = test_rng_int(r, 0, 2) ? g->lq : gen_length(r);
    }
    int lens = (int)test_rng_int(r, 0, 2);
    if (lens >= 1) {
        g->len_q = malloc((size_t)g->batch * 4);
        for (int b = 0; b < g->batch; b++)
            g->len_q[b] = gen_real_length(r, g->lq);
    }
    if (lens == 2) {
        g->len_k = malloc((size_t)g->batch * 4);
        for (int b = 0; b < g->batch; b++)
            g->len_k[b] = gen_real_length(r, g->lk);
    }
    g->eff_k = malloc((size_t)g->batch * 4);
    for (int b = 0; b < g->batch; b++)
        g->eff_k[b] = g->len_k ? g->len_k[b] : (g->len_q && g->lq == g->lk ? g->len_q[b] : g->lk);
    gen_appendf(g, "B%d H%d Lq%d Lk%d tile %dx%d lens%d: ", g->batch, g->heads, g->lq, g->lk, g->tm,
                g->tn, lens);
    bool big = (int64_t)g->lq * g->lk > 1000000;
    int parts = (int)test_rng_int(r, 1, 4);
    for (int k = 0; k < parts; k++) {
        if (big) {
            /* Long rows: analytic parts, lists and random blocks keep the oracle quick. */
            int kind = (int)test_rng_int(r, 0, 3);
            stof_status st;
            if (kind == 0)
                st = stof_mask_spec_add_window(g->spec, 100, 37);
            else if (kind == 1)
                st = stof_mask_spec_add_global(g->spec, 40);
            else if (kind == 2)
                st = stof_mask_spec_add_random(g->spec, 64, 3, test_rng_next(r));
            else
                st = stof_mask_spec_add_dilated(g->spec, 8, 3);
            g->n_parts += st == STOF_OK;
            gen_appendf(g, "big%d,", kind);
            continue;
        }
        gen_add_part(r, g, place);
    }
    if (g->n_parts == 0) {
        g->n_parts += stof_mask_spec_add_causal(g->spec) == STOF_OK;
        gen_appendf(g, "causal,");
    }
    /* One case in three within a band (the union cut to it), sometimes two
     * (intersected); a band of 2e9 a side cuts nothing. */
    for (int n = (int)test_rng_int(r, 0, 5) - 3; n > 0; n--) {
        int lmax = g->lq > g->lk ? g->lq : g->lk;
        int kind = (int)test_rng_int(r, 0, 5);
        if (kind == 0) {
            stof_mask_spec_within_causal(g->spec);
            g->band_cuts = true;
            gen_appendf(g, "within:causal,");
            continue;
        }
        int left = (int)test_rng_int(r, 0, lmax), right = (int)test_rng_int(r, 0, lmax);
        if (kind == 1) right = 0;
        if (kind == 2) left = right = 2000000000;
        g->band_cuts |= kind != 2;
        stof_mask_spec_within_window(g->spec, left, right);
        gen_appendf(g, "within:%d:%d,", left, right);
    }
    /* One case in four top-left; the rest at the default bottom-right alignment. */
    if (test_rng_int(r, 0, 3) == 0) {
        stof_mask_spec_set_align(g->spec, STOF_ALIGN_TOP_LEFT);
        gen_appendf(g, "topleft,");
    }
}

static void gen_case_free(gen_case *g, gen_release_fn release)
{
    stof_mask_spec_destroy(g->spec);
    for (int k = 0; k < g->n_dense; k++) {
        if (g->dense_kind[k] == STOF_MEM_DEVICE)
            release(g->dense_mem[k]);
        else
            free(g->dense_mem[k]);
    }
    free(g->len_q);
    free(g->len_k);
    free(g->eff_k);
    memset(g, 0, sizeof *g);
}

/* ---------------------------------------------------------------- checks */

static bool tile_bit(const mask_tiles *t, int32_t e, int rr, int cc)
{
    if (t->bits[e] < 0) return true;
    const uint64_t *bm = t->bitmap + (int64_t)t->bits[e] * t->tile_m * t->words_per_row;
    return (bm[rr * t->words_per_row + cc / 64] >> (cc % 64)) & 1;
}

/* Structure of the CSR lists and bitmaps, independent of the spec. */
static int check_structure(const mask_tiles_host *h, const char *desc)
{
    const mask_tiles *t = &h->t;
    int bad = 0;
    int64_t rows = (int64_t)t->n_inst * t->n_trow, next_partial = 0;
    if (t->row_ptr[0] != 0 || t->row_ptr[rows] != h->entries) bad++;
    for (int64_t row = 0; row < rows && bad < 5; row++) {
        int s = (int)(row / t->n_trow), r = (int)(row % t->n_trow);
        int b = t->bm > 1 ? s / t->hm : 0;
        int32_t e0 = t->row_ptr[row], e1 = t->row_ptr[row + 1];
        if (e1 < e0) bad++;
        if ((int64_t)r * t->tile_m >= t->len_q[b] && e1 != e0) {
            bad++;
            fprintf(stderr,
                    "  tile row %d of instance %d starts past len_q %d but lists %d tiles\n", r, s,
                    t->len_q[b], e1 - e0);
        }
        for (int32_t e = e0; e < e1; e++) {
            if (t->col[e] < 0 || t->col[e] >= t->n_tcol || (e > e0 && t->col[e] <= t->col[e - 1]))
                bad++;
            if (t->bits[e] >= 0) {
                if (t->bits[e] != next_partial) bad++; /* CSR order */
                next_partial++;
                int ones = 0, cells = t->tile_m * t->tile_n, stray = 0;
                for (int rr = 0; rr < t->tile_m; rr++) {
                    for (int cc = 0; cc < t->tile_n; cc++)
                        ones += tile_bit(t, e, rr, cc);
                    if (t->tile_n < 64) {
                        uint64_t w =
                            t->bitmap[((int64_t)t->bits[e] * t->tile_m + rr) * t->words_per_row];
                        stray += (w >> t->tile_n) != 0;
                    }
                }
                if (ones == 0 || ones == cells || stray) {
                    bad++;
                    fprintf(stderr, "  partial tile (row %lld, col %d) has %d of %d bits set%s\n",
                            (long long)row, t->col[e], ones, cells, stray ? " and stray bits" : "");
                }
            }
        }
    }
    if (next_partial != h->partial) bad++;
    if (bad) fprintf(stderr, "  structure: %d problems in %s\n", bad, desc);
    return bad;
}

/* What a mask flagged all_visible promises the kernels that skip its tile
 * list (mask.h): tile row r lists columns 0 .. ceil(len_k / tile_n) - 1 when
 * r * tile_m < len_q, nothing otherwise, all full but a last one cut by len_k. */
static int check_all_visible(const mask_tiles_host *h, const char *desc)
{
    const mask_tiles *t = &h->t;
    int bad = 0;
    for (int64_t row = 0; row < (int64_t)t->n_inst * t->n_trow && bad < 5; row++) {
        int s = (int)(row / t->n_trow), r = (int)(row % t->n_trow);
        int b = t->bm > 1 ? s / t->hm : 0;
        int lk = t->len_k[b],
            n = (int64_t)r * t->tile_m < t->len_q[b] ? (lk + t->tile_n - 1) / t->tile_n : 0;
        int32_t e0 = t->row_ptr[row], e1 = t->row_ptr[row + 1];
        bool ok = e1 - e0 == n;
        for (int32_t e = e0; ok && e < e1; e++) {
            bool cut = (e - e0 + 1) * t->tile_n > lk;
            ok = t->col[e] == e - e0 && (t->bits[e] >= 0) == cut;
        }
        if (!ok) {
            fprintf(stderr,
                    "  all_visible, but tile row %d of instance %d (len_q %d, len_k %d) lists "
                    "%d tiles against %d, or not in order, or not full: %s\n",
                    r, s, t->len_q[b], lk, e1 - e0, n, desc);
            bad++;
        }
    }
    return bad;
}

/* What a mask flagged causal or band promises the kernels that skip its
 * tile list (mask.h): the oracle's plane of entry b is exactly i + off - left
 * <= j <= i + off + right for i < len_q, j < len_k (off: len_k - len_q under
 * bottom-right alignment); causal is (open, 0), a band its own sides. */
static int check_interval(const mask_tiles *t, int b, const uint8_t *want, int lq, int lk,
                          int64_t left, int64_t right, const char *what, const char *desc)
{
    const int bi = t->bm > 1 ? b : 0, len_q = t->len_q[bi], len_k = t->len_k[bi];
    const int64_t off = mask_tiles_offset(t, len_q, len_k);
    for (int i = 0; i < lq; i++)
        for (int j = 0; j < lk; j++) {
            const int64_t d = (int64_t)j - (i + off);
            const int vis = i < len_q && j < len_k && d >= -left && d <= right;
            if (want[(size_t)i * lk + j] != vis) {
                fprintf(stderr, "  %s (%lld, %lld), but (b %d) (%d, %d) is %d in the oracle: %s\n",
                        what, (long long)left, (long long)right, b, i, j, want[(size_t)i * lk + j],
                        desc);
                return 1;
            }
        }
    return 0;
}

/*
 * Tile content against a dense plane of the spec (rows [0, rows) of instance
 * s, key lengths applied, query lengths not): a tile is listed iff a bit is
 * set, full iff all are, and its bitmap is the plane. Rows at or past `rows`
 * are not checked.
 */
static int check_tiles_against(const mask_tiles *t, int s, const uint8_t *plane, int rows, int lk,
                               int lenq)
{
    int bad = 0;
    for (int r = 0; r < t->n_trow && bad < 3; r++) {
        int64_t row = (int64_t)s * t->n_trow + r;
        int32_t e = t->row_ptr[row], e1 = t->row_ptr[row + 1];
        if ((int64_t)r * t->tile_m >= lenq) continue; /* checked by check_structure */
        for (int c = 0; c < t->n_tcol; c++) {
            bool listed = e < e1 && t->col[e] == c;
            int ones = 0, cells = 0, diff = 0;
            for (int rr = 0; rr < t->tile_m; rr++) {
                int i = r * t->tile_m + rr;
                for (int cc = 0; cc < t->tile_n; cc++) {
                    int j = c * t->tile_n + cc;
                    if (i >= rows) continue;
                    int want = j < lk ? plane[(size_t)i * lk + j] : 0;
                    ones += want;
                    cells++;
                    if (listed && tile_bit(t, e, rr, cc) != want) diff++;
                }
            }
            bool full_rows = rows >= (r + 1) * t->tile_m;
            if ((!listed && ones) || (listed && !ones && full_rows) || diff ||
                (listed && full_rows && t->bits[e] < 0 && ones != cells)) {
                fprintf(stderr,
                        "  tile (inst %d, %d, %d): listed %d full %d, %d/%d set, %d differ\n", s, r,
                        c, listed, listed && t->bits[e] < 0, ones, cells, diff);
                bad++;
            }
            if (listed) e++;
        }
    }
    return bad;
}

/* The residue split the compiler must store the case with (mask.h), read
 * from the spec's canonical text: every part "dilated:WxD" with one D > 1
 * (bands aside),
 * no lengths, D dividing both lengths, and no row offset (Lq == Lk or
 * top-left alignment). Else 1. */
static int gen_expected_split(const gen_case *g)
{
    char text[1024];
    size_t need = 0;
    if (g->len_q || g->len_k ||
        stof_mask_spec_format(g->spec, text, sizeof text, &need) != STOF_OK || need > sizeof text)
        return 1;
    int d = 0;
    bool top_left = false;
    for (char *part = strtok(text, ","); part; part = strtok(NULL, ",")) {
        if (strcmp(part, "topleft") == 0) {
            top_left = true;
            continue;
        }
        if (strncmp(part, "within:", 7) == 0) continue; /* a split carries the band */
        int w = 0, dd = 0, used = 0;
        if (sscanf(part, "dilated:%dx%d%n", &w, &dd, &used) != 2 || part[used] != '\0') return 1;
        if (d && dd != d) return 1;
        d = dd;
    }
    if (!top_left && g->lq != g->lk) return 1;
    return d > 1 && g->lq % d == 0 && g->lk % d == 0 ? d : 1;
}

/* Every check of a compiled mask against the oracle. Returns the problem count. */
static int check_mask_case(const gen_case *g, stof_mask *mask)
{
    int bad = 0;
    mask_tiles_host h;
    stof_status st = stof_mask_to_host(mask, &h);
    if (st != STOF_OK) {
        fprintf(stderr, "  to_host: %s\n", stof_last_error());
        return 1;
    }
    const mask_tiles *t = &h.t;
    bad += check_structure(&h, g->desc);
    if (t->all_visible != (int)(g->has_full && !g->band_cuts)) {
        fprintf(stderr, "  all_visible %d for %s\n", t->all_visible, g->desc);
        bad++;
    }
    if (t->all_visible) bad += check_all_visible(&h, g->desc);
    size_t plane = (size_t)g->lq * g->lk;
    uint8_t *want = malloc(plane), *got = malloc(plane);
    int64_t nnz_want = 0;
    /* Every (b, h): decode equals the oracle, which knows nothing of instances. */
    for (int b = 0; b < g->batch; b++) {
        for (int hh = 0; hh < g->heads; hh++) {
            memset(got, 0xA5, plane);
            st = stof_mask_spec_to_dense(g->spec, g->batch, g->heads, g->lq, g->lk, g->len_q,
                                         g->len_k, b, hh, want);
            if (st != STOF_OK) {
                fprintf(stderr, "  oracle: %s\n", stof_last_error());
                bad++;
                continue;
            }
            if (t->causal)
                bad +=
                    check_interval(t, b, want, g->lq, g->lk, MASK_TILES_OPEN, 0, "causal", g->desc);
            if (t->band)
                bad += check_interval(t, b, want, g->lq, g->lk, t->band_left, t->band_right, "band",
                                      g->desc);
            st = stof_mask_decode(mask, b, hh, got, plane);
            if (st != STOF_OK || memcmp(want, got, plane) != 0) {
                size_t k = 0;
                while (k < plane && want[k] == got[k])
                    k++;
                fprintf(stderr, "  decode (b %d, h %d) differs at (%zu, %zu): want %d got %d\n", b,
                        hh, k / g->lk, k % g->lk, k < plane ? want[k] : -1,
                        k < plane ? got[k] : -1);
                bad++;
            }
        }
    }
    /* Tile content, rows past the query length included where the oracle
     * reaches. A split mask's tiles hold one residue class: class 0's rows and
     * columns of the oracle's plane (decode, above, checked every class). */
    const int d = t->split;
    if (d != gen_expected_split(g)) {
        fprintf(stderr, "  stored with split %d, want %d\n", d, gen_expected_split(g));
        bad++;
    }
    int pad_rows = t->n_trow * t->tile_m;
    bool padded = !g->has_dense_or_blocks && pad_rows < 100000;
    int rows = padded ? pad_rows : g->lq / d, cols = g->lk / d;
    uint8_t *tile_plane = malloc((size_t)rows * d * g->lk);
    for (int s = 0; s < t->n_inst && bad < 10; s++) {
        int b = t->bm > 1 ? s / t->hm : 0, hh = t->hm > 1 ? s % t->hm : 0;
        st = stof_mask_spec_tile_plane(g->spec, g->batch, g->heads, g->lq, g->lk, g->len_q,
                                       g->len_k, b, hh, rows * d, tile_plane);
        if (st != STOF_OK) {
            fprintf(stderr, "  oracle (tiles): %s\n", stof_last_error());
            bad++;
            continue;
        }
        for (int i = 0; d > 1 && i < rows; i++)
            for (int j = 0; j < cols; j++)
                tile_plane[(size_t)i * cols + j] =
                    tile_plane[(size_t)i * d * g->lk + (size_t)j * d];
        bad += check_tiles_against(t, s, tile_plane, rows, cols, t->len_q[b]);
        stof_mask_spec_to_dense(g->spec, g->batch, g->heads, g->lq, g->lk, g->len_q, g->len_k, b,
                                hh, want);
        for (size_t k = 0; k < plane; k++)
            nnz_want += want[k];
    }
    stof_mask_stats stats;
    st = stof_mask_stats_get(mask, &stats);
    if (st != STOF_OK || stats.nnz != nnz_want || stats.instances != t->n_inst ||
        stats.tiles_full + stats.tiles_partial != h.entries || stats.tiles_partial != h.partial) {
        fprintf(stderr, "  stats: nnz %lld want %lld, full %lld partial %lld entries %lld\n",
                (long long)stats.nnz, (long long)nnz_want, (long long)stats.tiles_full,
                (long long)stats.tiles_partial, (long long)h.entries);
        bad++;
    }
    /* The estimate is an upper bound. */
    const mask_estimate *est = stof_mask_estimate_view(mask);
    double rows_total = (double)t->n_inst * t->n_trow;
    if (est->tiles_per_row * rows_total + 1e-6 < (double)h.entries ||
        est->partial_per_row * rows_total + 1e-6 < (double)h.partial) {
        fprintf(stderr, "  estimate %.3f/%.3f per row below actual %lld/%lld over %.0f rows\n",
                est->tiles_per_row, est->partial_per_row, (long long)h.entries,
                (long long)h.partial, rows_total);
        bad++;
    }
    free(tile_plane);
    free(want);
    free(got);
    mask_tiles_host_free(&h);
    if (bad) fprintf(stderr, "  case: %s\n", g->desc);
    return bad;
}

/* Compile parameters of a case; lengths point at the given tensors (or NULL). */
static stof_mask_params gen_params(const gen_case *g, stof_tensor *tq, stof_tensor *tk,
                                   stof_mask_builder builder)
{
    stof_mask_params p = stof_mask_default_params();
    p.batch = g->batch;
    p.heads = g->heads;
    p.len_q = g->lq;
    p.len_k = g->lk;
    p.tile_m = g->tm;
    p.tile_n = g->tn;
    p.builder = builder;
    int64_t n = g->batch;
    if (g->len_q) {
        *tq = stof_tensor_make(g->len_q, STOF_I32, STOF_MEM_HOST, 1, &n);
        p.lengths_q = tq;
    }
    if (g->len_k) {
        *tk = stof_tensor_make(g->len_k, STOF_I32, STOF_MEM_HOST, 1, &n);
        p.lengths_k = tk;
    }
    return p;
}
