/*
 * compile_gpu.cu — the GPU mask compiler: spec -> two-level tile format with
 * no host round trip. The tiles of all instances (grid order: instance, tile
 * row, tile column) are cut into one contiguous chunk per block, and each
 * block runs two phases on its chunk:
 *
 *   classify  one thread per tile: interval reasoning (mask_eval.h) says
 *             empty / full / mixed / unknown; the block's warps settle its
 *             unknown tiles, stopping once both a set and an unset bit are
 *             seen; the block stores the classes and its listed and partial
 *             counts;
 *   place     each block sums the counts of the blocks before it (a few
 *             thousand at most), then writes row_ptr, col and bits in tile
 *             order and, one warp per tile, the bitmaps of its partial tiles.
 *
 * The grid is one wave (four blocks per SM), so both phases run in one
 * cooperative launch with a grid-wide barrier between them; a device that
 * cannot hold the grid at once gets them as two kernels. A compile is then
 * one allocation and one launch: at these sizes the host's launch calls, not
 * the kernels, are most of its time.
 *
 * The non-obvious choice: tiles are evaluated one 64-column word per lane
 * (mask_tile_word: ranges and periodic patterns for analytic parts, block
 * ranges for random and blocks parts), so a 64 x 64 bitmap is two steps of a
 * warp. Specs with a dense part settle tiles element by element instead (32
 * elements a step across the warp), where the early exit after a step beats
 * reading whole rows per lane. Specs of a few parts travel in the kernel
 * parameters with the host lengths: then a compile uploads nothing.
 *
 * The mask is one block sized by the plan's bounds (plan.c); the scratch
 * (tile classes, block counts, and when needed the uploaded global lists,
 * block layouts, dense parts, parts and lengths) follows it in the same block
 * unless it is the larger, when it is a block of its own freed in stream
 * order: nothing is read back and nothing waits. Writes past the bounds are
 * dropped and flagged in meta[2], never made. Lengths in device memory cannot
 * be checked without a round trip, so the kernels clamp them to [0, L] (the
 * CPU builder, which downloads them, clamps the same way).
 */
#include "mask/mask_internal.h"

#include <stdlib.h>
#include <string.h>

#include <cooperative_groups.h>
#include <cuda_runtime.h>

#define FULL_WARP 0xffffffffu
#define BLOCK_THREADS 256
#define BLOCK_WARPS (BLOCK_THREADS / 32)
/* Tiles per block: at least MIN_CHUNK (so that a block's warps can settle a
 * chunk of unknown tiles one tile each), and few enough blocks that each place
 * block can sum the counts of the blocks before it. */
#define MIN_CHUNK 8
#define MAX_BLOCKS 4096
/* Blocks per SM the build kernel is compiled for (grid_shape sizes its grid by it). */
#define BUILD_BLOCKS_PER_SM 4
/* What travels in the kernel parameters (about 1.2 KB in all). */
#define INLINE_PARTS 8
#define INLINE_LENGTHS 32

/* Everything the kernels read, passed by value. */
typedef struct compile_args {
    mask_eval e; /* device pointers; parts unused when parts_inline, a length
                    array unused when it is inline */
    int64_t n_tiles, n_rows, chunk;
    int64_t cap_entries, cap_partial;
    int wpr;
    int dense;        /* a dense part: settle and fill tiles element by element */
    int parts_inline; /* parts[] holds the parts */
    int len_q_inline, len_k_inline;
    int32_t *len_q_out, *len_k_out, *row_ptr, *meta, *col, *bits;
    uint64_t *bitmap;
    uint8_t *cls;           /* scratch [n_tiles]: final tile classes */
    int32_t *blk_e, *blk_p; /* scratch [blocks]: listed and partial tiles per block */
    mask_part_eval parts[INLINE_PARTS];
    int32_t len_q[INLINE_LENGTHS], len_k[INLINE_LENGTHS];
} compile_args;

extern __shared__ __align__(16) unsigned char mask_smem[];

/* ---------------------------------------------------------------- device helpers */

__device__ static int lane_id()
{
    return threadIdx.x & 31;
}

__device__ static unsigned lanes_below()
{
    return (1u << lane_id()) - 1u;
}

/* The evaluation description with its parts (and inline lengths) in shared
 * memory: every evaluation walks the parts. Every thread must call it. */
__device__ static mask_eval stage_eval(const compile_args &a, int32_t *len_sh)
{
    mask_part_eval *parts = (mask_part_eval *)mask_smem;
    const uint32_t *src = (const uint32_t *)(a.parts_inline ? a.parts : a.e.parts);
    uint32_t *dst = (uint32_t *)parts;
    int words = a.e.n_parts * (int)(sizeof(mask_part_eval) / 4);
    for (int k = threadIdx.x; k < words; k += blockDim.x)
        dst[k] = src[k];
    for (int k = threadIdx.x; k < a.e.bm && k < INLINE_LENGTHS; k += blockDim.x) {
        len_sh[k] = a.len_q[k];
        len_sh[INLINE_LENGTHS + k] = a.len_k[k];
    }
    __syncthreads();
    mask_eval e = a.e;
    e.parts = parts;
    if (a.len_q_inline) {
        e.len_q = len_sh;
        e.len_q_stride = 1;
    }
    if (a.len_k_inline) {
        e.len_k = len_sh + INLINE_LENGTHS;
        e.len_k_stride = 1;
    }
    return e;
}

/* Tile t (grid order: instance, tile row, tile column) and what it stands for. */
struct tile_ref {
    int b, h, r, c, lenq, lenk;
};

__device__ static tile_ref tile_locate(const mask_eval &e, int64_t t)
{
    tile_ref x;
    int64_t row = t / e.n_tcol;
    x.c = (int)(t - row * e.n_tcol);
    int s = (int)(row / e.n_trow);
    x.r = (int)(row - (int64_t)s * e.n_trow);
    mask_instance_bh(&e, s, &x.b, &x.h);
    x.lenq = mask_len(e.len_q, e.len_q_stride, x.b, e.lq);
    x.lenk = mask_len(e.len_k, e.len_k_stride, x.b, e.lk);
    return x;
}

/* Word q of a tile's bitmap (mask.h layout: row q / wpr, columns 64 (q % wpr)
 * onwards); *width gets the columns it spans. */
__device__ static uint64_t tile_word(const mask_eval &e, const tile_ref &x, int wpr, int q,
                                     int *width)
{
    int rr = q / wpr, w = q - rr * wpr;
    *width = e.tile_n - 64 * w < 64 ? e.tile_n - 64 * w : 64;
    return mask_tile_word(&e, x.b, x.h, x.lenq, x.lenk, x.r * e.tile_m + rr,
                          x.c * e.tile_n + 64 * w, *width);
}

/*
 * Settles a tile word by word, one word per lane, 32 words a step, visiting
 * steps from both ends inwards and stopping once both a set and an unset bit
 * were seen. Returns EMPTY, FULL or MIXED, as the CPU builder decides them.
 */
__device__ static int tile_settle_words(const mask_eval &e, const tile_ref &x, int wpr)
{
    int words = e.tile_m * wpr, steps = (words + 31) / 32;
    unsigned any = 0, all = FULL_WARP;
    for (int n = 0; n < steps; n++) {
        int q = ((n & 1) ? steps - 1 - (n >> 1) : (n >> 1)) * 32 + lane_id();
        bool set = false, full = true;
        if (q < words) {
            int width;
            uint64_t w = tile_word(e, x, wpr, q, &width);
            set = w != 0;
            full = w == mask_bit_range(0, width - 1, width);
        }
        any |= __ballot_sync(FULL_WARP, set);
        all &= __ballot_sync(FULL_WARP, full);
        if (any && all != FULL_WARP) return MASK_TILE_MIXED;
    }
    return any == 0 ? MASK_TILE_EMPTY : (all == FULL_WARP ? MASK_TILE_FULL : MASK_TILE_MIXED);
}

/* Writes a tile's bitmap, one word per lane (coalesced). */
__device__ static void tile_fill_words(const mask_eval &e, const tile_ref &x, int wpr,
                                       uint64_t *out)
{
    int words = e.tile_m * wpr, width;
    for (int q = lane_id(); q < words; q += 32)
        out[q] = tile_word(e, x, wpr, q, &width);
}

/*
 * Evaluates a tile with the whole warp, 32 elements per ballot in row-major
 * order (the path for specs with a dense part). With early_exit, chunks are
 * visited from both ends inwards and the walk stops once both a set and an
 * unset element were seen. With out, lane 0 stores the bitmap words (mask.h
 * layout). Returns EMPTY, FULL or MIXED.
 */
__device__ static int tile_eval_warp(const mask_eval &e, const tile_ref &x, bool early_exit,
                                     uint64_t *out)
{
    int tm = e.tile_m, tn = e.tile_n;
    int shift = __ffs(tn) - 1;
    int chunks = tm * tn / 32;
    int i0 = x.r * tm, j0 = x.c * tn, lane = lane_id();
    unsigned any = 0, all = FULL_WARP, low = 0;
    for (int n = 0; n < chunks; n++) {
        int q = early_exit ? ((n & 1) ? chunks - 1 - (n >> 1) : (n >> 1)) : n;
        int f = q * 32 + lane;
        int v =
            mask_tile_element(&e, x.b, x.h, x.lenq, x.lenk, i0 + (f >> shift), j0 + (f & (tn - 1)));
        unsigned w = __ballot_sync(FULL_WARP, v);
        any |= w;
        all &= w;
        if (early_exit && any && all != FULL_WARP) return MASK_TILE_MIXED;
        if (out && lane == 0) {
            if (tn >= 64) {
                if (q & 1)
                    out[q >> 1] = (uint64_t)low | ((uint64_t)w << 32);
                else
                    low = w;
            } else if (tn == 32) {
                out[q] = w;
            } else {
                out[2 * q] = w & 0xffffu;
                out[2 * q + 1] = w >> 16;
            }
        }
    }
    return any == 0 ? MASK_TILE_EMPTY : (all == FULL_WARP ? MASK_TILE_FULL : MASK_TILE_MIXED);
}

__device__ static int warp_sum(int v)
{
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(FULL_WARP, v, o);
    return v;
}

/* Sum of v over the block (every thread gets it; every thread must call it). */
__device__ static int block_sum(int v, int *red)
{
    v = warp_sum(v);
    if (lane_id() == 0) red[threadIdx.x >> 5] = v;
    __syncthreads();
    int s = 0;
    for (int k = 0; k < BLOCK_WARPS; k++)
        s += red[k];
    __syncthreads();
    return s;
}

/* ---------------------------------------------------------------- phases */

/* Shared memory of the two phases (one block runs them one after the other). */
struct classify_smem {
    int32_t todo[BLOCK_THREADS]; /* unknown tiles of the step (thread slots) */
    uint8_t cls[BLOCK_THREADS];
    int n_todo;
};
struct place_smem {
    int32_t plist[BLOCK_THREADS]; /* partial tiles of the step, in CSR order */
    int warp_l[BLOCK_WARPS], warp_p[BLOCK_WARPS];
};

/* Classifies the block's chunk into a.cls and stores its listed and partial counts. */
__device__ static void classify_chunk(const compile_args &a, const mask_eval &e, classify_smem &sh,
                                      int *red)
{
    if (blockIdx.x == 0)
        for (int b = threadIdx.x; b < e.bm; b += BLOCK_THREADS) {
            a.len_q_out[b] = mask_len(e.len_q, e.len_q_stride, b, e.lq);
            a.len_k_out[b] = mask_len(e.len_k, e.len_k_stride, b, e.lk);
        }
    int64_t begin = (int64_t)blockIdx.x * a.chunk;
    int64_t end = begin + a.chunk < a.n_tiles ? begin + a.chunk : a.n_tiles;
    int listed = 0, partial = 0;
    for (int64_t base = begin; base < end; base += BLOCK_THREADS) {
        if (threadIdx.x == 0) sh.n_todo = 0;
        __syncthreads();
        int64_t t = base + threadIdx.x;
        int cls = MASK_TILE_EMPTY;
        if (t < end) {
            tile_ref x = tile_locate(e, t);
            cls = mask_tile_class(&e, x.b, x.h, x.lenq, x.lenk, x.r, x.c);
            /* mixed tiles are partial already */
            if (cls == MASK_TILE_UNKNOWN) sh.todo[atomicAdd(&sh.n_todo, 1)] = threadIdx.x;
        }
        sh.cls[threadIdx.x] = (uint8_t)cls;
        __syncthreads();
        for (int k = threadIdx.x >> 5; k < sh.n_todo; k += BLOCK_WARPS) {
            int slot = sh.todo[k];
            tile_ref x = tile_locate(e, base + slot);
            int settled =
                a.dense ? tile_eval_warp(e, x, true, NULL) : tile_settle_words(e, x, a.wpr);
            if (lane_id() == 0) sh.cls[slot] = (uint8_t)settled;
        }
        __syncthreads();
        if (t < end) {
            cls = sh.cls[threadIdx.x];
            a.cls[t] = (uint8_t)cls;
            listed += cls == MASK_TILE_FULL || cls == MASK_TILE_MIXED;
            partial += cls == MASK_TILE_MIXED;
        }
    }
    listed = block_sum(listed, red);
    partial = block_sum(partial, red);
    if (threadIdx.x == 0) {
        a.blk_e[blockIdx.x] = listed;
        a.blk_p[blockIdx.x] = partial;
    }
}

/* Writes the block's chunk of row_ptr, col, bits and bitmaps, after the counts
 * of every block are stored. */
__device__ static void place_chunk(const compile_args &a, const mask_eval &e, place_smem &sh,
                                   int *red)
{
    int lane = lane_id(), wid = threadIdx.x >> 5;
    /* Entries and partial tiles of the blocks before this one. */
    int eoff = 0, poff = 0;
    for (int k = threadIdx.x; k < (int)blockIdx.x; k += BLOCK_THREADS) {
        eoff += a.blk_e[k];
        poff += a.blk_p[k];
    }
    eoff = block_sum(eoff, red);
    poff = block_sum(poff, red);
    int64_t begin = (int64_t)blockIdx.x * a.chunk;
    int64_t end = begin + a.chunk < a.n_tiles ? begin + a.chunk : a.n_tiles;
    int64_t words = (int64_t)e.tile_m * a.wpr;
    for (int64_t base = begin; base < end; base += BLOCK_THREADS) {
        int64_t t = base + threadIdx.x;
        int k = t < end ? a.cls[t] : MASK_TILE_EMPTY;
        bool listed = k == MASK_TILE_FULL || k == MASK_TILE_MIXED, part = k == MASK_TILE_MIXED;
        unsigned vl = __ballot_sync(FULL_WARP, listed), vp = __ballot_sync(FULL_WARP, part);
        if (lane == 0) {
            sh.warp_l[wid] = __popc(vl);
            sh.warp_p[wid] = __popc(vp);
        }
        __syncthreads();
        int before_l = 0, before_p = 0, step_l = 0, step_p = 0;
        for (int w = 0; w < BLOCK_WARPS; w++) {
            if (w < wid) {
                before_l += sh.warp_l[w];
                before_p += sh.warp_p[w];
            }
            step_l += sh.warp_l[w];
            step_p += sh.warp_p[w];
        }
        int in_l = before_l + __popc(vl & lanes_below()),
            in_p = before_p + __popc(vp & lanes_below());
        if (t < end) {
            int64_t row = t / e.n_tcol, pos = eoff + in_l, idx = part ? poff + in_p : -1;
            int c = (int)(t - row * e.n_tcol);
            if (c == 0) a.row_ptr[row] = (int32_t)pos;
            if (listed && pos < a.cap_entries && idx < a.cap_partial) {
                a.col[pos] = c;
                a.bits[pos] = (int32_t)idx;
            }
            if (part) sh.plist[in_p] = threadIdx.x;
        }
        __syncthreads();
        for (int n = wid; n < step_p; n += BLOCK_WARPS) {
            int64_t idx = (int64_t)poff + n;
            if (idx >= a.cap_partial) break;
            tile_ref x = tile_locate(e, base + sh.plist[n]);
            uint64_t *out = a.bitmap + idx * words;
            if (a.dense)
                tile_eval_warp(e, x, false, out);
            else
                tile_fill_words(e, x, a.wpr, out);
        }
        eoff += step_l;
        poff += step_p;
        __syncthreads();
    }
    if (blockIdx.x == gridDim.x - 1 && threadIdx.x == 0) {
        a.row_ptr[a.n_rows] = eoff;
        a.meta[0] = eoff;
        a.meta[1] = poff;
        a.meta[2] = eoff > a.cap_entries || poff > a.cap_partial;
        a.meta[3] = 0;
    }
}

/* ---------------------------------------------------------------- kernels */

/* The phases asked for, on the block's chunk. Both: one cooperative launch
 * with a grid-wide barrier between them (four blocks of 256 threads fit an SM
 * at 64 registers a thread, so the grid of grid_shape, at most four blocks per
 * SM, is resident at once). One: a launch of its own, where a cooperative one
 * cannot run. */
template <bool CLASSIFY, bool PLACE>
__global__ void __launch_bounds__(BLOCK_THREADS, BUILD_BLOCKS_PER_SM)
    mask_build_kernel(const __grid_constant__ compile_args a)
{
    __shared__ int32_t len_sh[2 * INLINE_LENGTHS];
    __shared__ int red[BLOCK_WARPS];
    __shared__ union {
        classify_smem c;
        place_smem p;
    } sh;
    mask_eval e = stage_eval(a, len_sh);
    if (CLASSIFY) classify_chunk(a, e, sh.c, red);
    if (CLASSIFY && PLACE) cooperative_groups::this_grid().sync();
    if (PLACE) place_chunk(a, e, sh.p, red);
}

/* ---------------------------------------------------------------- host side */

static size_t align256(size_t n)
{
    return (n + 255) & ~(size_t)255;
}

/* Where lengths come from: absent (full length), the caller's device tensor,
 * the kernel parameters (host values, few entries) or the uploaded blob. */
enum { LEN_NONE, LEN_DEVICE, LEN_INLINE, LEN_BLOB };

static int length_source(const stof_tensor *t, int bm)
{
    if (!t) return LEN_NONE;
    if (t->memory == STOF_MEM_DEVICE) return LEN_DEVICE;
    return bm <= INLINE_LENGTHS ? LEN_INLINE : LEN_BLOB;
}

/* The scratch block: the uploaded blob [0, blob_end) (parts when not inline,
 * global lists, block layouts and their summed-area tables, host lengths that
 * are not inline), host dense parts, then the kernels' work arrays. */
typedef struct scratch_plan {
    bool parts_inline;
    int len_q_src, len_k_src;
    size_t parts, list[MASK_MAX_PARTS], layout[MASK_MAX_PARTS], sat[MASK_MAX_PARTS];
    size_t dense[MASK_MAX_PARTS], dense_bytes[MASK_MAX_PARTS];
    size_t len_q, len_k, blob_end;
    size_t cls, blk_e, blk_p, total;
    int64_t chunk, n_blocks;
} scratch_plan;

/* Tiles per block: one wave of blocks (BUILD_BLOCKS_PER_SM per SM, as the
 * kernels' 64 registers a thread allow), at least MIN_CHUNK tiles, at most
 * MAX_BLOCKS. */
static void grid_shape(const stof_ctx *ctx, int64_t n_tiles, int64_t *chunk, int64_t *n_blocks)
{
    int64_t target = ctx->sm_count > 0 ? BUILD_BLOCKS_PER_SM * (int64_t)ctx->sm_count : 512;
    int64_t c = stof_cdiv(n_tiles, target);
    if (c < MIN_CHUNK) c = MIN_CHUNK;
    if (c < stof_cdiv(n_tiles, MAX_BLOCKS)) c = stof_cdiv(n_tiles, MAX_BLOCKS);
    *chunk = c;
    *n_blocks = stof_cdiv(n_tiles, c);
}

static scratch_plan scratch_layout(const stof_ctx *ctx, const stof_mask_spec *spec,
                                   const mask_plan *plan)
{
    scratch_plan s;
    memset(&s, 0, sizeof s);
    s.parts_inline = spec->n_parts <= INLINE_PARTS;
    s.len_q_src = length_source(plan->lengths_q, plan->bm);
    s.len_k_src = length_source(plan->lengths_k, plan->bm);
    size_t off = 0;
#define TAKE(dst, bytes)                                                                           \
    do {                                                                                           \
        dst = off;                                                                                 \
        off += align256(bytes);                                                                    \
    } while (0)
    if (!s.parts_inline) TAKE(s.parts, (size_t)spec->n_parts * sizeof(mask_part_eval));
    for (int k = 0; k < spec->n_parts; k++) {
        const mask_part *p = &spec->parts[k];
        if (p->kind == MASK_PART_GLOBAL_LIST) TAKE(s.list[k], (size_t)p->a * 4);
        if (p->kind == MASK_PART_BLOCKS) {
            TAKE(s.layout[k], (size_t)p->heads * p->rows * p->cols);
            TAKE(s.sat[k], (size_t)p->heads * (p->rows + 1) * (p->cols + 1) * 4);
        }
    }
    if (s.len_q_src == LEN_BLOB) TAKE(s.len_q, (size_t)plan->bm * 4);
    if (s.len_k_src == LEN_BLOB) TAKE(s.len_k, (size_t)plan->bm * 4);
    s.blob_end = off;
    for (int k = 0; k < spec->n_parts; k++) {
        const mask_part *p = &spec->parts[k];
        if (p->kind == MASK_PART_DENSE && p->dense.memory == STOF_MEM_HOST) {
            s.dense_bytes[k] = mask_tensor_extent_bytes(&p->dense);
            TAKE(s.dense[k], s.dense_bytes[k]);
        }
    }
    grid_shape(ctx, plan->n_tiles, &s.chunk, &s.n_blocks);
    TAKE(s.cls, (size_t)plan->n_tiles);
    TAKE(s.blk_e, (size_t)s.n_blocks * 4);
    TAKE(s.blk_p, (size_t)s.n_blocks * 4);
#undef TAKE
    s.total = off;
    return s;
}

/* The parts as the kernels see them (pointers into the scratch block dev) into
 * parts[], and the blob's host image (when there is one). */
static void fill_parts(const stof_mask_spec *spec, const mask_plan *plan, const scratch_plan *s,
                       char *dev, char *blob, mask_part_eval *parts)
{
    for (int k = 0; k < spec->n_parts; k++) {
        const mask_part *p = &spec->parts[k];
        mask_part_eval_fill(p, plan, &parts[k]);
        if (p->kind == MASK_PART_GLOBAL_LIST) {
            memcpy(blob + s->list[k], p->list, (size_t)p->a * 4);
            parts[k].list = (const int32_t *)(dev + s->list[k]);
        } else if (p->kind == MASK_PART_BLOCKS) {
            memcpy(blob + s->layout[k], p->layout, (size_t)p->heads * p->rows * p->cols);
            memcpy(blob + s->sat[k], p->sat, (size_t)p->heads * (p->rows + 1) * (p->cols + 1) * 4);
            parts[k].data = (const uint8_t *)(dev + s->layout[k]);
            parts[k].sat = (const int32_t *)(dev + s->sat[k]);
        } else if (p->kind == MASK_PART_DENSE && p->dense.memory == STOF_MEM_HOST) {
            parts[k].data = (const uint8_t *)(dev + s->dense[k]);
        }
    }
    if (!s->parts_inline) memcpy(blob + s->parts, parts, (size_t)spec->n_parts * sizeof *parts);
    if (s->len_q_src == LEN_BLOB) memcpy(blob + s->len_q, plan->len_q, (size_t)plan->bm * 4);
    if (s->len_k_src == LEN_BLOB) memcpy(blob + s->len_k, plan->len_k, (size_t)plan->bm * 4);
}

/* Where the kernels read one side's lengths (mask_eval's pointer and stride). */
static void point_lengths(int src, const stof_tensor *t, char *dev, size_t off, const int32_t **p,
                          int64_t *stride)
{
    *p = NULL;
    *stride = 0;
    if (src == LEN_DEVICE) {
        *p = (const int32_t *)t->data;
        *stride = t->stride[0];
    } else if (src == LEN_BLOB) {
        *p = (const int32_t *)(dev + off);
        *stride = 1;
    }
}

static void fill_args(const stof_mask_spec *spec, const mask_plan *plan, const scratch_plan *s,
                      const mask_part_eval *parts, char *scr, char *out, const mask_layout *lay,
                      compile_args *a)
{
    memset(a, 0, sizeof *a);
    mask_eval *e = &a->e;
    e->parts = s->parts_inline ? NULL : (const mask_part_eval *)(scr + s->parts);
    e->n_parts = spec->n_parts;
    mask_eval_set_geometry(plan, e);
    point_lengths(s->len_q_src, plan->lengths_q, scr, s->len_q, &e->len_q, &e->len_q_stride);
    point_lengths(s->len_k_src, plan->lengths_k, scr, s->len_k, &e->len_k, &e->len_k_stride);
    a->n_tiles = plan->n_tiles;
    a->n_rows = plan->n_rows;
    a->chunk = s->chunk;
    a->cap_entries = plan->cap_entries;
    a->cap_partial = plan->cap_partial;
    a->wpr = plan->wpr;
    for (int k = 0; k < spec->n_parts; k++)
        a->dense |= spec->parts[k].kind == MASK_PART_DENSE;
    a->parts_inline = s->parts_inline;
    if (s->parts_inline) memcpy(a->parts, parts, (size_t)spec->n_parts * sizeof *parts);
    a->len_q_inline = s->len_q_src == LEN_INLINE;
    a->len_k_inline = s->len_k_src == LEN_INLINE;
    if (a->len_q_inline) memcpy(a->len_q, plan->len_q, (size_t)plan->bm * 4);
    if (a->len_k_inline) memcpy(a->len_k, plan->len_k, (size_t)plan->bm * 4);
    a->len_q_out = (int32_t *)(out + lay->len_q);
    a->len_k_out = (int32_t *)(out + lay->len_k);
    a->row_ptr = (int32_t *)(out + lay->row_ptr);
    a->meta = (int32_t *)(out + lay->meta);
    a->col = (int32_t *)(out + lay->col);
    a->bits = (int32_t *)(out + lay->bits);
    a->bitmap = (uint64_t *)(out + lay->bitmap);
    a->cls = (uint8_t *)(scr + s->cls);
    a->blk_e = (int32_t *)(scr + s->blk_e);
    a->blk_p = (int32_t *)(scr + s->blk_p);
}

static stof_status upload(stof_ctx *ctx, void *dst, const void *src, size_t bytes)
{
    return STOF_CUDA(
        cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, (cudaStream_t)ctx->stream));
}

/* Per device ordinal: blocks of the build kernel resident at once (0: not
 * known yet, -1: no cooperative launch there). */
#define CAPACITY_DEVICES 64
static int coop_capacity_cache[CAPACITY_DEVICES];
static int coop_disabled; /* mask_gpu_set_cooperative(false) */

/* Blocks of the build kernel the ctx's device holds at once with the most
 * shared memory a spec can ask (parts not inline); 0 when it cannot launch
 * the kernel cooperatively. */
static int coop_capacity(const stof_ctx *ctx)
{
    int dev = ctx->gpu_index;
    if (dev < 0 || dev >= CAPACITY_DEVICES) return 0;
    int cap = __atomic_load_n(&coop_capacity_cache[dev], __ATOMIC_RELAXED);
    if (cap == 0) {
        int coop = 0, per_sm = 0;
        size_t smem = (size_t)MASK_MAX_PARTS * sizeof(mask_part_eval);
        if (cudaDeviceGetAttribute(&coop, cudaDevAttrCooperativeLaunch, dev) != cudaSuccess ||
            cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, mask_build_kernel<true, true>,
                                                          BLOCK_THREADS, smem) != cudaSuccess)
            coop = per_sm = 0;
        (void)cudaGetLastError();
        cap = coop && per_sm > 0 ? per_sm * ctx->sm_count : -1;
        __atomic_store_n(&coop_capacity_cache[dev], cap, __ATOMIC_RELAXED);
    }
    return cap > 0 ? cap : 0;
}

extern "C" void mask_gpu_set_cooperative(bool on)
{
    coop_disabled = !on;
}

extern "C" bool mask_gpu_one_launch(const stof_ctx *ctx)
{
    return !coop_disabled && coop_capacity(ctx) >= BUILD_BLOCKS_PER_SM * ctx->sm_count;
}

/* One cooperative launch when the grid is resident at once, else the two phase
 * kernels (a launch refused as too large, as under a limit on the SMs a
 * process may use, falls back too). */
static stof_status launch(stof_ctx *ctx, const scratch_plan *s, const compile_args *a)
{
    cudaStream_t st = (cudaStream_t)ctx->stream;
    size_t smem = (size_t)a->e.n_parts * sizeof(mask_part_eval);
    unsigned blocks = (unsigned)s->n_blocks;
    if (!coop_disabled && s->n_blocks <= coop_capacity(ctx)) {
        void *args[1] = {(void *)a};
        const void *both = (const void *)mask_build_kernel<true, true>;
        cudaError_t e = cudaLaunchCooperativeKernel(both, blocks, BLOCK_THREADS, args, smem, st);
        if (e != cudaErrorCooperativeLaunchTooLarge)
            return stof_cuda_status((int)e, "cudaLaunchCooperativeKernel(mask_build_kernel)",
                                    __FILE__, __LINE__);
        (void)cudaGetLastError();
    }
    mask_build_kernel<true, false><<<blocks, BLOCK_THREADS, smem, st>>>(*a);
    mask_build_kernel<false, true><<<blocks, BLOCK_THREADS, smem, st>>>(*a);
    return STOF_CUDA(cudaGetLastError());
}

/* What a reusable mask keeps to enqueue its build again. */
struct mask_gpu_replay {
    scratch_plan s;
    compile_args args;
};

extern "C" stof_status mask_gpu_relaunch(stof_mask *m)
{
    return launch(m->ctx, &m->replay->s, &m->replay->args);
}

extern "C" void mask_gpu_replay_free(mask_gpu_replay *r)
{
    free(r);
}

extern "C" stof_status mask_gpu_build(stof_ctx *ctx, const stof_mask_spec *spec,
                                      const mask_plan *plan, bool reusable, stof_mask *m)
{
    m->lay = mask_layout_make(plan->bm, plan->n_rows, plan->tm, plan->wpr, plan->cap_entries,
                              plan->cap_partial);
    m->cap_entries = plan->cap_entries;
    m->cap_partial = plan->cap_partial;
    scratch_plan s = scratch_layout(ctx, spec, plan);
    /* The scratch rides at the end of the mask's block (one allocation, freed
     * with the mask) unless it is larger than the mask: host dense parts, or
     * tile classes of a very sparse mask, get a block of their own, freed once
     * the build is enqueued. */
    const bool joint = s.total <= m->lay.total;
    void *out = NULL, *scr = NULL;
    char *blob = NULL;
    mask_part_eval parts[MASK_MAX_PARTS];
    compile_args args;
    STOF_TRY(stof_dev_alloc(ctx, m->lay.total + (joint ? s.total : 0), &out));
    stof_status st = STOF_OK;
    if (joint)
        scr = (char *)out + m->lay.total;
    else
        st = stof_dev_alloc(ctx, s.total, &scr);
    if (st == STOF_OK && s.blob_end) st = stof_host_calloc(1, s.blob_end, (void **)&blob);
    if (st == STOF_OK) {
        fill_parts(spec, plan, &s, (char *)scr, blob, parts);
        /* Pageable sources are staged before cudaMemcpyAsync returns; nothing waits. */
        if (s.blob_end) st = upload(ctx, scr, blob, s.blob_end);
    }
    for (int k = 0; k < spec->n_parts && st == STOF_OK; k++)
        if (s.dense_bytes[k])
            st = upload(ctx, (char *)scr + s.dense[k], spec->parts[k].dense.data, s.dense_bytes[k]);
    if (st == STOF_OK) {
        fill_args(spec, plan, &s, parts, (char *)scr, (char *)out, &m->lay, &args);
        st = launch(ctx, &s, &args);
    }
    if (st == STOF_OK && reusable) {
        st = stof_host_calloc(1, sizeof *m->replay, (void **)&m->replay);
        if (st == STOF_OK) {
            m->replay->s = s;
            m->replay->args = args;
            if (!joint) m->scratch = scr;
            scr = NULL;
        }
    }
    free(blob);
    if (!joint) stof_dev_free(ctx, scr);
    if (st != STOF_OK) {
        stof_dev_free(ctx, out);
        return st;
    }
    mask_point_tiles(m, plan, out);
    return STOF_OK;
}
