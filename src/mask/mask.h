/*
 * mask.h — internals of mask specs and of the compiled two-level tile format.
 * The attention kernels, the CPU backend and the tests read compiled masks
 * through struct mask_tiles.
 *
 * Two-level tile format. The Lq x Lk score plane of each mask instance is cut
 * into tile_m x tile_n outer tiles. For each tile row the visible tiles are
 * listed CSR-style in ascending column order: col[] names the tile column and
 * bits[] says whether the tile is full (-1: every element visible, the kernel
 * runs no mask code) or partial (>= 0: index of its bitmap). Empty tiles are
 * absent. A bitmap holds tile_m rows of words_per_row 64-bit words; bit (c % 64)
 * of word (c / 64) of row r is element (r, c) of the tile.
 *
 * Visibility of element (i, j) of instance (b, h) (what decoding yields):
 *     i < len_q[b] && j < len_k[b] && spec(b, h, i, j)
 * What the tiles store: tile rows that start at or past len_q[b] are empty
 * (no work for padding). In the other tile rows, element (i, j) is set iff
 * j < len_k[b] && spec(b, h, i, j): columns at or past len_k[b] (or lk) are
 * never set, so a tile reaching past them is partial and full tiles need no
 * bounds code; rows at or past len_q[b] inside a tile row follow the spec
 * alone (the kernel never writes them back and decoding clips them).
 *
 * Instances: a mask varies by batch entry when it has lengths, a random part
 * or a dense part with B > 1 (bm = B, else 1), and by head when a blocks or
 * dense part has H > 1 (hm = H, else 1). Instance of (b, h) is
 * (bm > 1 ? b : 0) * hm + (hm > 1 ? h : 0).
 *
 * Residue split (split = d > 1). A dilated mask relates only positions of one
 * residue class mod d, and within a class it is a plain window: with
 * i = a d + p and j = c d + p, abs(i - j) <= w d and d | (i - j) is
 * abs(a - c) <= w. Such a mask is stored as that window over the classes'
 * positions: lq, lk, the lengths and every tile count describe one class
 * (Lq / d by Lk / d), and element (a, c) of the stored plane is element
 * (a d + p, c d + p) of the mask for every p; elements of different classes
 * are invisible. The kernels run each class as a sequence of its own, rows d
 * apart in memory, so that no tile carries the other classes' zeros (a
 * dilation-2 mask otherwise lists every tile of its band half empty).
 * stof_mask_compile stores a mask so when every part is dilated with one
 * dilation d > 1, no lengths are given and d divides Lq and Lk; a band
 * (within:) is carried over as the band it is over the classes.
 */
#ifndef STOF_MASK_H
#define STOF_MASK_H

#include "core/core.h"
#include "mask/mask_eval.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct mask_tiles {
    int batch, heads;         /* B, H the mask was compiled for */
    int bm, hm, n_inst;       /* instances: bm * hm */
    int lq, lk;               /* padded lengths (of one residue class when split > 1) */
    int tile_m, tile_n;
    int n_trow, n_tcol;       /* ceil(lq / tile_m), ceil(lk / tile_n) */
    int words_per_row;        /* ceil(tile_n / 64) */
    const int32_t *len_q;     /* [bm] real lengths */
    const int32_t *len_k;     /* [bm] */
    const int32_t *row_ptr;   /* [n_inst * n_trow + 1]; tile row r of instance s is
                                 entries row_ptr[s*n_trow + r] .. row_ptr[s*n_trow + r + 1] */
    const int32_t *col;       /* [entries] tile column */
    const int32_t *bits;      /* [entries] -1 full, else bitmap index */
    const uint64_t *bitmap;   /* [partial][tile_m][words_per_row] */
    int split;                /* residue classes (see above); 1: none */
    int all_visible;          /* 1: the spec holds everywhere (a full part, no band that
                                 cuts the plane), so
                                 that tile row r lists columns 0 .. ceil(len_k / tile_n)
                                 - 1 when r * tile_m < len_q (none otherwise), all full
                                 but a last one cut by len_k; kernels may skip the list */
    int align_end;            /* 1: bottom-right alignment (stof.h): query row i of entry b
                                 sits at i + len_k[b] - len_q[b], for the position biases */
    int causal;               /* 1: the spec is the causal mask (a causal part, or a full
                                 part within:causal; the band's left side open), so that
                                 row i < len_q sees keys j <= i + mask_tiles_offset,
                                 j < len_k; kernels may skip the list */
    int band;                 /* 1: the spec is an analytic band (not all-visible, not split):
                                 row i < len_q sees exactly the keys j < len_k with
                                 i + off - band_left <= j <= i + off + band_right,
                                 off = mask_tiles_offset; a side without a bound holds
                                 MASK_TILES_OPEN. Causal is the band (open, 0), and a
                                 window, within:L:R on a full part and their unions are
                                 bands; kernels may skip the list */
    int64_t band_left, band_right;
} mask_tiles;

/* A band side without a bound (mask_eval.h's MASK_BAND_OPEN): past any index
 * difference, so that the band's limits stay plain sums in 64 bits. */
#define MASK_TILES_OPEN ((int64_t)1 << 40)

/* The row offset of entry b's positions (position biases; the compiled tiles
 * already hold it for the mask parts), on the host and in kernels. */
MASK_HD static inline int64_t mask_tiles_offset(const mask_tiles *t, int lenq, int lenk)
{
    return t->align_end ? (int64_t)lenk - lenq : 0;
}

static inline int mask_instance(const mask_tiles *t, int b, int h)
{
    return (t->bm > 1 ? b : 0) * t->hm + (t->hm > 1 ? h : 0);
}

/* Host-side figures known at compile time without reading the device: the
 * selector uses them so that choosing a kernel never synchronises. They are
 * upper bounds from the spec (exact for analytic parts). */
typedef struct mask_estimate {
    double tiles_per_row;     /* mean listed tiles per (instance, tile row) */
    double partial_per_row;   /* mean partial tiles per (instance, tile row) */
    double tile_density;      /* listed / total tiles */
    double row_imbalance;     /* most tiles of one row / mean over the rows listing any:
                                 1 for dense, window and padded masks, about 2 for causal,
                                 far above for rows of global tokens */
} mask_estimate;

/* The compiled mask's view (pointers in the mask's memory: device for a GPU ctx). */
const mask_tiles *stof_mask_tiles_view(const stof_mask *mask);
const mask_estimate *stof_mask_estimate_view(const stof_mask *mask);
stof_ctx *stof_mask_ctx(const stof_mask *mask);
stof_memory stof_mask_memory(const stof_mask *mask);

/* A host copy of a compiled mask (arrays owned by it), for tests and the CPU
 * backend. */
typedef struct mask_tiles_host {
    mask_tiles t;
    int64_t entries, partial;
    void *storage;
} mask_tiles_host;
stof_status stof_mask_to_host(stof_mask *mask, mask_tiles_host *out);
void mask_tiles_host_free(mask_tiles_host *h);

/* The tile shape stof_mask_compile would use for these params (with tile 0 x
 * 0 the choice for the device), without building anything. */
stof_status stof_mask_choose_tiles(stof_ctx *ctx, const stof_mask_spec *spec,
                                   const stof_mask_params *params, int *tile_m, int *tile_n);

/* True when the spec's canonical text (stof_mask_spec_format) describes it
 * completely: no dense part and no per-head block layout. Two such specs with
 * the same text are the same mask. */
bool stof_mask_spec_textual(const stof_mask_spec *spec);

/* Dense 0/1 plane of instance (b, h) straight from the spec, element by
 * element, without the tile format: the oracle for the compiler. lengths may be
 * NULL (full length). dense has lq * lk bytes. */
stof_status stof_mask_spec_to_dense(const stof_mask_spec *spec, int batch, int heads, int lq,
                                    int lk, const int32_t *lengths_q, const int32_t *lengths_k,
                                    int b, int h, uint8_t *dense);
/* The plane as the tiles store it: rows [0, rows) (rows may pass lq), those at
 * or past the query length following the spec, at the row offset of the real
 * lengths; key lengths applied. dense has rows * lk bytes. */
stof_status stof_mask_spec_tile_plane(const stof_mask_spec *spec, int batch, int heads, int lq,
                                      int lk, const int32_t *lengths_q, const int32_t *lengths_k,
                                      int b, int h, int rows, uint8_t *dense);

#ifdef __cplusplus
}
#endif

#endif /* STOF_MASK_H */
