/*
 * mask_eval.h — the element predicate of a mask spec, its word-wise form
 * (64 columns of a row at once, equal to the predicate bit for bit) and the
 * per-tile interval reasoning, as static inline functions compiled both for
 * the host (C) and for the device (CUDA). The CPU compiler, the GPU compiler
 * and the dense oracle all evaluate the same flat description through this
 * header, so the two compilers cannot disagree.
 *
 * The non-obvious choice: the compiled format is canonical (a tile is listed
 * iff an element is set, full iff every element is set), so the interval
 * reasoning here only has to be *sound* — it may answer "unknown", never a
 * wrong "full" or "empty"; unknown tiles are settled by evaluating elements.
 *
 * Indices: i is a query row, j a key column, both >= 0 and below 2^31 - 128
 * (compile rejects longer lengths), so differences fit in 32 bits; sums that
 * involve user parameters are taken in 64 bits.
 *
 * The band (a spec's within: clauses) intersects the union of the parts:
 * element (i, j) is set iff some part holds and -band_left <= j - (i + off)
 * <= band_right, off the analytic parts' row offset. A side without a bound is
 * MASK_BAND_OPEN, far past any index, so "no band" is the band (OPEN, OPEN)
 * and every test below stays a plain comparison. A band's tile class is
 * exact (its rows' column ranges overlap), which is what keeps the
 * intersection's interval reasoning sound: a tile is empty when either side
 * is, full only when both are.
 *
 * Random blocks: block column k of block row bi of batch entry b is
 *     hi32(mix64(row_key(seed, b, bi) + k)) % ceil(len_k[b] / block)
 * with row_key = mix64(mix64(mix64(seed) ^ b) ^ bi) and mix64 the splitmix64
 * finaliser. It is part of the mask's definition: do not change it.
 */
#ifndef STOF_MASK_EVAL_H
#define STOF_MASK_EVAL_H

#include <stdint.h>

#if defined(__CUDACC__)
#define MASK_HD __host__ __device__
#else
#define MASK_HD
#endif

enum {
    MASK_PART_FULL = 0,
    MASK_PART_CAUSAL = 1,
    MASK_PART_WINDOW = 2,      /* a = left, b = right */
    MASK_PART_DILATED = 3,     /* a = window, b = dilation, span = a * b */
    MASK_PART_GLOBAL_N = 4,    /* a = n */
    MASK_PART_GLOBAL_LIST = 5, /* a = count, list sorted and unique */
    MASK_PART_RANDOM = 6,      /* a = block, b = per_row, seed */
    MASK_PART_BLOCKS = 7,      /* a = block size, heads, rows, cols, data, sat */
    MASK_PART_DENSE = 8        /* rows = Lq, cols = Lk, data, stride[4] */
};

/* What a part or a tile is over a tile's rectangle. */
enum {
    MASK_TILE_EMPTY = 0,  /* no element set */
    MASK_TILE_FULL = 1,   /* every element set */
    MASK_TILE_MIXED = 2,  /* known to be partial */
    MASK_TILE_UNKNOWN = 3 /* to be settled element by element */
};

/* A band side without a bound: beyond any index difference (< 2^32). */
#define MASK_BAND_OPEN ((int64_t)1 << 40)

/* Block rows x picks examined per tile before the random part answers "unknown". */
#define MASK_RANDOM_PROBE_MAX 64

typedef struct mask_part_eval {
    int32_t kind;
    int32_t a, b;
    int32_t heads, rows, cols;
    int64_t span;
    uint64_t seed;
    const int32_t *list; /* global list */
    const uint8_t *data; /* blocks layout [heads][rows][cols] or dense base */
    const int32_t *sat;  /* blocks: summed-area table [heads][rows + 1][cols + 1] */
    int64_t stride[4];   /* dense strides in elements; 0 on broadcast dims */
} mask_part_eval;

/* A spec bound to compile parameters; every pointer valid on the evaluating side. */
typedef struct mask_eval {
    const mask_part_eval *parts;
    int32_t n_parts;
    int32_t bm, hm; /* instances vary by batch (bm = B) and head (hm = H) */
    int32_t lq, lk; /* padded lengths */
    int32_t tile_m, tile_n;
    int32_t n_trow, n_tcol;
    const int32_t *len_q; /* real lengths [B] (any stride), NULL: full; clamped to [0, L] */
    const int32_t *len_k;
    int64_t len_q_stride, len_k_stride;
    int32_t align_end; /* 1: analytic parts see row i as i + (lenk - lenq), bottom-right
                          alignment (stof.h); 0: top-left */
    int64_t band_left, band_right; /* the band (top of file); MASK_BAND_OPEN: no bound */
} mask_eval;

/* ---------------------------------------------------------------- helpers */

MASK_HD static inline int64_t mask_min64(int64_t a, int64_t b)
{
    return a < b ? a : b;
}
MASK_HD static inline int64_t mask_max64(int64_t a, int64_t b)
{
    return a > b ? a : b;
}

/* Floor division for a possibly negative numerator and a positive divisor. */
MASK_HD static inline int64_t mask_floor_div(int64_t a, int64_t d)
{
    int64_t q = a / d;
    return (a % d != 0 && a < 0) ? q - 1 : q;
}

/* Real length of batch entry b (index into the lengths tensor), clamped to [0, full]. */
MASK_HD static inline int mask_len(const int32_t *src, int64_t stride, int b, int full)
{
    if (!src) return full;
    int32_t v = src[(int64_t)b * stride];
    return v < 0 ? 0 : (v > full ? full : v);
}

/* What the analytic parts (causal, window, dilated) add to a row index:
 * lenk - lenq under bottom-right alignment (FlashAttention's convention, so
 * that the last query row sees the last key), 0 under top-left. */
MASK_HD static inline int64_t mask_row_offset(const mask_eval *e, int lenq, int lenk)
{
    return e->align_end ? (int64_t)lenk - lenq : 0;
}

/* Batch entry and head that instance s stands for. */
MASK_HD static inline void mask_instance_bh(const mask_eval *e, int s, int *b, int *h)
{
    *b = e->bm > 1 ? s / e->hm : 0;
    *h = e->hm > 1 ? s % e->hm : 0;
}

MASK_HD static inline uint64_t mask_mix64(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

MASK_HD static inline uint64_t mask_random_row_key(uint64_t seed, int b, int64_t bi)
{
    return mask_mix64(mask_mix64(mask_mix64(seed) ^ (uint64_t)b) ^ (uint64_t)bi);
}

/* k-th random block column of a block row (ncol >= 1). */
MASK_HD static inline int mask_random_pick(uint64_t row_key, int k, int ncol)
{
    return (int)((uint32_t)(mask_mix64(row_key + (uint64_t)k) >> 32) % (uint32_t)ncol);
}

/* Block columns a random part draws from for key length lenk. */
MASK_HD static inline int mask_random_ncol(int block, int lenk)
{
    return (int)(((int64_t)lenk + block - 1) / block);
}

/* Number of list entries in [lo, hi) of a sorted list. */
MASK_HD static inline int mask_lower_bound(const int32_t *list, int n, int64_t x)
{
    int lo = 0, hi = n;
    while (lo < hi) {
        int mid = lo + (hi - lo) / 2;
        if ((int64_t)list[mid] < x)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

MASK_HD static inline int mask_list_count(const int32_t *list, int n, int64_t lo, int64_t hi)
{
    return mask_lower_bound(list, n, hi) - mask_lower_bound(list, n, lo);
}

MASK_HD static inline int mask_list_has(const int32_t *list, int n, int64_t x)
{
    int k = mask_lower_bound(list, n, x);
    return k < n && (int64_t)list[k] == x;
}

/* Sum of layout head hh over block rows [r0, r1] and block columns [c0, c1] (inclusive). */
MASK_HD static inline int64_t mask_sat_sum(const mask_part_eval *p, int hh, int64_t r0, int64_t r1,
                                           int64_t c0, int64_t c1)
{
    const int32_t *s = p->sat + (int64_t)hh * (p->rows + 1) * (p->cols + 1);
    int64_t w = p->cols + 1;
    return (int64_t)s[(r1 + 1) * w + c1 + 1] - s[r0 * w + c1 + 1] - s[(r1 + 1) * w + c0] +
           s[r0 * w + c0];
}

/* ---------------------------------------------------------------- elements */

MASK_HD static inline int mask_random_hit(const mask_part_eval *p, int b, int lenk, int i, int j)
{
    int ncol = mask_random_ncol(p->a, lenk);
    if (ncol <= 0) return 0;
    int bj = j / p->a;
    uint64_t key = mask_random_row_key(p->seed, b, i / p->a);
    for (int k = 0; k < p->b; k++)
        if (mask_random_pick(key, k, ncol) == bj) return 1;
    return 0;
}

/* Part p at (i, j) for batch entry b, head h (both 0 where the mask does not
 * vary); off: the row offset of the analytic parts (mask_row_offset). */
MASK_HD static inline int mask_part_visible(const mask_part_eval *p, int b, int h, int lenk,
                                            int64_t off, int i, int j)
{
    const int64_t ia = (int64_t)i + off;
    switch (p->kind) {
    case MASK_PART_FULL: return 1;
    case MASK_PART_CAUSAL: return (int64_t)j <= ia;
    case MASK_PART_WINDOW: return (int64_t)j >= ia - p->a && (int64_t)j <= ia + p->b;
    case MASK_PART_DILATED: {
        int64_t d = ia - j;
        return d >= -p->span && d <= p->span && d % p->b == 0;
    }
    case MASK_PART_GLOBAL_N: return i < p->a || j < p->a;
    case MASK_PART_GLOBAL_LIST:
        return mask_list_has(p->list, p->a, i) || mask_list_has(p->list, p->a, j);
    case MASK_PART_RANDOM: return mask_random_hit(p, b, lenk, i, j);
    case MASK_PART_BLOCKS: {
        int bi = i / p->a, bj = j / p->a;
        if (bi >= p->rows || bj >= p->cols) return 0;
        int hh = p->heads > 1 ? h : 0;
        return p->data[((int64_t)hh * p->rows + bi) * p->cols + bj] != 0;
    }
    case MASK_PART_DENSE:
        if (i >= p->rows || j >= p->cols) return 0;
        return p->data[(int64_t)b * p->stride[0] + (int64_t)h * p->stride[1] +
                       (int64_t)i * p->stride[2] + (int64_t)j * p->stride[3]] != 0;
    }
    return 0;
}

/* The union of the parts at (i, j) within the band, before lengths. */
MASK_HD static inline int mask_visible(const mask_eval *e, int b, int h, int lenq, int lenk, int i,
                                       int j)
{
    const int64_t off = mask_row_offset(e, lenq, lenk);
    const int64_t d = (int64_t)j - ((int64_t)i + off);
    if (d < -e->band_left || d > e->band_right) return 0;
    for (int p = 0; p < e->n_parts; p++)
        if (mask_part_visible(&e->parts[p], b, h, lenk, off, i, j)) return 1;
    return 0;
}

/* An element as the tile format stores it (mask.h): columns at or past the
 * key length are never set; rows follow the spec alone. */
MASK_HD static inline int mask_tile_element(const mask_eval *e, int b, int h, int lenq, int lenk,
                                            int i, int j)
{
    return j < lenk && mask_visible(e, b, h, lenq, lenk, i, j);
}

/* ---------------------------------------------------------------- words */

/*
 * Word-wise evaluation: 64 consecutive columns of one row at a time. Bit k of
 * mask_part_word(p, b, h, lenk, i, j0, width) is mask_part_visible(p, b, h,
 * lenk, i, j0 + k) for k < width (1 <= width <= 64); bits at or past width are
 * zero. Analytic parts are ranges (causal, window, global) or a periodic
 * pattern within a range (dilated); random and blocks parts are unions of
 * whole-block ranges; global lists set one bit per listed column; only dense
 * parts are read element by element. The GPU compiler builds bitmaps with them.
 */

/* Bits lo..hi (inclusive) clipped to [0, width); 0 when nothing is left. */
MASK_HD static inline uint64_t mask_bit_range(int64_t lo, int64_t hi, int width)
{
    if (lo < 0) lo = 0;
    if (hi > width - 1) hi = width - 1;
    if (lo > hi) return 0;
    uint64_t upto = hi >= 63 ? ~0ull : (1ull << (hi + 1)) - 1;
    return upto & ~((1ull << lo) - 1);
}

/* Dilated: bit k is i - (j0 + k) = d0 - k; visible when |d0 - k| <= span and
 * the dilation divides d0 - k, i.e. k = d0 (mod dilation). */
MASK_HD static inline uint64_t mask_dilated_word(const mask_part_eval *p, int64_t i, int j0,
                                                 int width)
{
    int64_t d0 = i - j0, step = p->b;
    uint64_t range = mask_bit_range(d0 - p->span, d0 + p->span, width);
    if (!range) return 0;
    int64_t first = d0 % step;
    if (first < 0) first += step;
    if (first >= width) return 0;
    /* Bits at every multiple of step below 64, by doubling. */
    uint64_t pattern = 1;
    for (int64_t s = step; s < 64; s <<= 1)
        pattern |= pattern << s;
    return (pattern << first) & range;
}

MASK_HD static inline uint64_t mask_global_list_word(const mask_part_eval *p, int i, int j0,
                                                     int width)
{
    if (mask_list_has(p->list, p->a, i)) return mask_bit_range(0, width - 1, width);
    uint64_t w = 0;
    for (int k = mask_lower_bound(p->list, p->a, j0);
         k < p->a && (int64_t)p->list[k] < (int64_t)j0 + width; k++)
        w |= 1ull << (p->list[k] - j0);
    return w;
}

/* Random: the union of the row's picked block columns, each a range. */
MASK_HD static inline uint64_t mask_random_word(const mask_part_eval *p, int b, int lenk, int i,
                                                int j0, int width)
{
    int ncol = mask_random_ncol(p->a, lenk);
    if (ncol <= 0) return 0;
    uint64_t key = mask_random_row_key(p->seed, b, i / p->a), w = 0;
    for (int k = 0; k < p->b; k++) {
        int64_t c0 = (int64_t)mask_random_pick(key, k, ncol) * p->a;
        w |= mask_bit_range(c0 - j0, c0 + p->a - 1 - j0, width);
    }
    return w;
}

/* Blocks: the set layout cells of the block row, each a range of columns. */
MASK_HD static inline uint64_t mask_blocks_word(const mask_part_eval *p, int h, int i, int j0,
                                                int width)
{
    int64_t bs = p->a, bi = i / p->a;
    if (bi >= p->rows) return 0;
    const uint8_t *cells = p->data + ((int64_t)(p->heads > 1 ? h : 0) * p->rows + bi) * p->cols;
    int64_t c1 = mask_min64(((int64_t)j0 + width - 1) / bs, (int64_t)p->cols - 1);
    uint64_t w = 0;
    for (int64_t c = j0 / bs; c <= c1; c++)
        if (cells[c]) w |= mask_bit_range(c * bs - j0, c * bs + bs - 1 - j0, width);
    return w;
}

MASK_HD static inline uint64_t mask_dense_word(const mask_part_eval *p, int b, int h, int i, int j0,
                                               int width)
{
    if (i >= p->rows) return 0;
    const uint8_t *row =
        p->data + (int64_t)b * p->stride[0] + (int64_t)h * p->stride[1] + (int64_t)i * p->stride[2];
    int n = (int)mask_min64(width, (int64_t)p->cols - j0);
    uint64_t w = 0;
    for (int k = 0; k < n; k++)
        if (row[(int64_t)(j0 + k) * p->stride[3]]) w |= 1ull << k;
    return w;
}

MASK_HD static inline uint64_t mask_part_word(const mask_part_eval *p, int b, int h, int lenk,
                                              int64_t off, int i, int j0, int width)
{
    const int64_t ia = (int64_t)i + off;
    switch (p->kind) {
    case MASK_PART_FULL: return mask_bit_range(0, width - 1, width);
    case MASK_PART_CAUSAL: return mask_bit_range(0, ia - j0, width);
    case MASK_PART_WINDOW: return mask_bit_range(ia - p->a - j0, ia + p->b - j0, width);
    case MASK_PART_DILATED: return mask_dilated_word(p, ia, j0, width);
    case MASK_PART_GLOBAL_N:
        return mask_bit_range(0, i < p->a ? width - 1 : (int64_t)p->a - 1 - j0, width);
    case MASK_PART_GLOBAL_LIST: return mask_global_list_word(p, i, j0, width);
    case MASK_PART_RANDOM: return mask_random_word(p, b, lenk, i, j0, width);
    case MASK_PART_BLOCKS: return mask_blocks_word(p, h, i, j0, width);
    case MASK_PART_DENSE: return mask_dense_word(p, b, h, i, j0, width);
    }
    return 0;
}

/* Bit k (k < width) is mask_tile_element(e, b, h, lenq, lenk, i, j0 + k): the union
 * of the parts within the band, cut at the key length; bits at or past width are zero. */
MASK_HD static inline uint64_t mask_tile_word(const mask_eval *e, int b, int h, int lenq, int lenk,
                                              int i, int j0, int width)
{
    int64_t n = (int64_t)lenk - j0;
    if (n <= 0) return 0;
    if (n < width) width = (int)n;
    const int64_t off = mask_row_offset(e, lenq, lenk), ia = (int64_t)i + off;
    uint64_t band = mask_bit_range(ia - e->band_left - j0, ia + e->band_right - j0, width), w = 0;
    for (int p = 0; p < e->n_parts && (w & band) != band; p++)
        w |= mask_part_word(&e->parts[p], b, h, lenk, off, i, j0, width);
    return w & band;
}

/* ---------------------------------------------------------------- tiles */

MASK_HD static inline int mask_random_tile_class(const mask_part_eval *p, int b, int lenk,
                                                 int64_t i0, int64_t i1, int64_t j0, int64_t j1)
{
    int block = p->a;
    int ncol = mask_random_ncol(block, lenk);
    if (ncol <= 0) return MASK_TILE_EMPTY;
    int64_t bi0 = i0 / block, bi1 = (i1 - 1) / block;
    if ((bi1 - bi0 + 1) * p->b > MASK_RANDOM_PROBE_MAX) return MASK_TILE_UNKNOWN;
    int any = 0, all = 1;
    for (int64_t bi = bi0; bi <= bi1; bi++) {
        uint64_t key = mask_random_row_key(p->seed, b, bi);
        int covered = 0;
        for (int k = 0; k < p->b; k++) {
            int64_t c0 = (int64_t)mask_random_pick(key, k, ncol) * block, c1 = c0 + block;
            if (c0 < j1 && c1 > j0) any = 1;
            if (c0 <= j0 && c1 >= j1) covered = 1;
        }
        all &= covered;
    }
    return all ? MASK_TILE_FULL : (any ? MASK_TILE_UNKNOWN : MASK_TILE_EMPTY);
}

MASK_HD static inline int mask_blocks_tile_class(const mask_part_eval *p, int h, int64_t i0,
                                                 int64_t i1, int64_t j0, int64_t j1)
{
    int64_t bs = p->a;
    int64_t br0 = i0 / bs, br1 = (i1 - 1) / bs, bc0 = j0 / bs, bc1 = (j1 - 1) / bs;
    if (br0 >= p->rows || bc0 >= p->cols) return MASK_TILE_EMPTY;
    int64_t r1 = mask_min64(br1, p->rows - 1), c1 = mask_min64(bc1, p->cols - 1);
    int64_t sum = mask_sat_sum(p, p->heads > 1 ? h : 0, br0, r1, bc0, c1);
    if (sum == 0) return MASK_TILE_EMPTY;
    if (r1 == br1 && c1 == bc1 && sum == (r1 - br0 + 1) * (c1 - bc0 + 1)) return MASK_TILE_FULL;
    return MASK_TILE_UNKNOWN;
}

/* Part p over rows [i0, i1) x columns [j0, j1) (j1 <= lenk): EMPTY, FULL or
 * UNKNOWN; off: the analytic parts' row offset (mask_row_offset). */
MASK_HD static inline int mask_part_tile_class(const mask_part_eval *p, int b, int h, int lenk,
                                               int64_t off, int64_t i0, int64_t i1, int64_t j0,
                                               int64_t j1)
{
    const int64_t a0 = i0 + off, a1 = i1 + off; /* the analytic parts' rows */
    switch (p->kind) {
    case MASK_PART_FULL: return MASK_TILE_FULL;
    case MASK_PART_CAUSAL:
        if (j1 - 1 <= a0) return MASK_TILE_FULL;
        return j0 > a1 - 1 ? MASK_TILE_EMPTY : MASK_TILE_UNKNOWN;
    case MASK_PART_WINDOW:
        if (j0 >= a1 - 1 - p->a && j1 - 1 <= a0 + p->b) return MASK_TILE_FULL;
        if (j0 > a1 - 1 + p->b || j1 - 1 < a0 - p->a) return MASK_TILE_EMPTY;
        return MASK_TILE_UNKNOWN;
    case MASK_PART_DILATED: {
        /* i - j takes every value in [dlo, dhi] over the rectangle. */
        int64_t dlo = a0 - (j1 - 1), dhi = (a1 - 1) - j0;
        int64_t lo = mask_max64(dlo, -p->span), hi = mask_min64(dhi, p->span);
        if (lo > hi || mask_floor_div(hi, p->b) * p->b < lo) return MASK_TILE_EMPTY;
        if (p->b == 1 && dlo >= -p->span && dhi <= p->span) return MASK_TILE_FULL;
        return MASK_TILE_UNKNOWN;
    }
    case MASK_PART_GLOBAL_N:
        if (i1 <= p->a || j1 <= p->a) return MASK_TILE_FULL;
        return (i0 >= p->a && j0 >= p->a) ? MASK_TILE_EMPTY : MASK_TILE_UNKNOWN;
    case MASK_PART_GLOBAL_LIST: {
        int64_t cr = mask_list_count(p->list, p->a, i0, i1);
        int64_t cc = mask_list_count(p->list, p->a, j0, j1);
        if (cr == i1 - i0 || cc == j1 - j0) return MASK_TILE_FULL;
        return (cr == 0 && cc == 0) ? MASK_TILE_EMPTY : MASK_TILE_UNKNOWN;
    }
    case MASK_PART_RANDOM: return mask_random_tile_class(p, b, lenk, i0, i1, j0, j1);
    case MASK_PART_BLOCKS: return mask_blocks_tile_class(p, h, i0, i1, j0, j1);
    case MASK_PART_DENSE: return i0 >= p->rows ? MASK_TILE_EMPTY : MASK_TILE_UNKNOWN;
    }
    return MASK_TILE_UNKNOWN;
}

/* The band over rows [a0, a1) (offset applied) x columns [j0, j1): EMPTY,
 * FULL or MIXED, exactly (a row's columns a-L..a+R overlap the next row's). */
MASK_HD static inline int mask_band_tile_class(const mask_eval *e, int64_t a0, int64_t a1,
                                               int64_t j0, int64_t j1)
{
    if (j0 >= a1 - 1 - e->band_left && j1 - 1 <= a0 + e->band_right) return MASK_TILE_FULL;
    if (j0 > a1 - 1 + e->band_right || j1 - 1 < a0 - e->band_left) return MASK_TILE_EMPTY;
    return MASK_TILE_MIXED;
}

/*
 * Tile (r, c) of instance (b, h) with real lengths lenq, lenk: EMPTY, FULL,
 * MIXED (known partial: a part covers the columns below lenk but the tile
 * reaches past them or the band cuts it) or UNKNOWN. Tile rows starting at
 * or past lenq are empty (mask.h).
 */
MASK_HD static inline int mask_tile_class(const mask_eval *e, int b, int h, int lenq, int lenk,
                                          int r, int c)
{
    int64_t i0 = (int64_t)r * e->tile_m, j0 = (int64_t)c * e->tile_n;
    if (i0 >= lenq || j0 >= lenk) return MASK_TILE_EMPTY;
    int64_t i1 = i0 + e->tile_m, j1 = j0 + e->tile_n;
    int64_t je = mask_min64(j1, lenk);
    const int64_t off = mask_row_offset(e, lenq, lenk);
    int band = mask_band_tile_class(e, i0 + off, i1 + off, j0, je);
    if (band == MASK_TILE_EMPTY) return MASK_TILE_EMPTY;
    int any = 0;
    for (int p = 0; p < e->n_parts; p++) {
        int k = mask_part_tile_class(&e->parts[p], b, h, lenk, off, i0, i1, j0, je);
        if (k == MASK_TILE_FULL)
            return je == j1 && band == MASK_TILE_FULL ? MASK_TILE_FULL : MASK_TILE_MIXED;
        if (k != MASK_TILE_EMPTY) any = 1;
    }
    return any ? MASK_TILE_UNKNOWN : MASK_TILE_EMPTY;
}

#endif /* STOF_MASK_EVAL_H */
