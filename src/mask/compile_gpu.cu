/*
 * compile_gpu.cu — the GPU mask compiler: spec -> two-level tile format with
 * no host round trip. Five kernels on the ctx's stream:
 *
 *   classify  one thread per tile: interval reasoning (mask_eval.h) says
 *             empty / full / mixed / unknown; unknown tiles are appended to
 *             a candidate list (warp-aggregated atomics);
 *   resolve   one warp per candidate: evaluates elements (ballots), stopping
 *             as soon as the tile is known to be mixed; an all-ones tile
 *             becomes full and an all-zeros one empty, as in the CPU builder;
 *   count     one warp per tile row: entries and partial tiles per row, per
 *             block; the last block to finish scans the block totals;
 *   fill      one warp per tile row: row_ptr, col and bits in column order,
 *             partial tiles numbered in CSR order (ballot + popc);
 *   bitmap    one warp per partial tile: its bitmap, 32 elements per ballot.
 *
 * Work lists are sized by the host-side bound (plan.c); writes past it are
 * dropped and flagged in meta[2], never made. The parts are staged in shared
 * memory: every element evaluation walks them.
 */
#include "mask/mask_internal.h"

#include <cuda_runtime.h>

#define FULL_WARP 0xffffffffu
#define BLOCK_THREADS 256

static_assert(BLOCK_THREADS / 32 == MASK_GPU_ROWS_PER_BLOCK, "one warp per tile row");

extern __shared__ __align__(16) unsigned char mask_smem[];

/* A copy of e whose parts live in shared memory (every thread must call it). */
__device__ static mask_eval stage_parts(const mask_eval &e)
{
    mask_part_eval *sh = (mask_part_eval *)mask_smem;
    const uint32_t *src = (const uint32_t *)e.parts;
    uint32_t *dst = (uint32_t *)sh;
    int words = e.n_parts * (int)(sizeof(mask_part_eval) / 4);
    for (int k = threadIdx.x; k < words; k += blockDim.x)
        dst[k] = src[k];
    __syncthreads();
    mask_eval l = e;
    l.parts = sh;
    return l;
}

__device__ static int lane_id()
{
    return threadIdx.x & 31;
}

__device__ static unsigned lanes_below()
{
    return (1u << lane_id()) - 1u;
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

/*
 * Evaluates a tile with the whole warp, 32 elements per ballot in row-major
 * order. With early_exit, chunks are visited from both ends inwards and the
 * walk stops once both a set and an unset element were seen. With out, lane
 * 0 stores the bitmap words (mask.h layout). Returns EMPTY, FULL or MIXED.
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
        int v = mask_tile_element(&e, x.b, x.h, x.lenk, i0 + (f >> shift), j0 + (f & (tn - 1)));
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

__global__ void __launch_bounds__(BLOCK_THREADS) mask_classify_kernel(mask_gpu_job j)
{
    mask_eval e = stage_parts(j.e);
    int64_t t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (t < e.bm) {
        j.len_q[t] = mask_len(e.len_q, e.len_q_stride, (int)t, e.lq);
        j.len_k[t] = mask_len(e.len_k, e.len_k_stride, (int)t, e.lk);
    }
    bool cand = false;
    if (t < j.n_tiles) {
        tile_ref x = tile_locate(e, t);
        int cls = mask_tile_class(&e, x.b, x.h, x.lenq, x.lenk, x.r, x.c);
        j.cls[t] = (uint8_t)cls;
        cand = cls == MASK_TILE_UNKNOWN; /* mixed tiles are partial already */
    }
    unsigned vote = __ballot_sync(FULL_WARP, cand);
    if (!vote) return;
    int leader = __ffs(vote) - 1;
    uint32_t base = 0;
    if (lane_id() == leader) base = atomicAdd(&j.counters[0], (uint32_t)__popc(vote));
    base = __shfl_sync(FULL_WARP, base, leader);
    if (cand) {
        uint32_t slot = base + (uint32_t)__popc(vote & lanes_below());
        if (slot < (uint64_t)j.cap_partial)
            j.cand[slot] = (int32_t)t;
        else
            j.counters[2] = 1;
    }
}

__global__ void __launch_bounds__(BLOCK_THREADS) mask_resolve_kernel(mask_gpu_job j)
{
    mask_eval e = stage_parts(j.e);
    int64_t w = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    int64_t n = j.counters[0] < j.cap_partial ? (int64_t)j.counters[0] : j.cap_partial;
    if (w >= n) return;
    int32_t t = j.cand[w];
    int cls = tile_eval_warp(e, tile_locate(e, t), true, NULL);
    if (lane_id() == 0) j.cls[t] = (uint8_t)cls;
}

__device__ static int warp_sum(int v)
{
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(FULL_WARP, v, o);
    return v;
}

/* Exclusive prefix of v over the block (BLOCK_THREADS threads); *total gets the sum. */
__device__ static int block_exclusive_scan(int v, int *total)
{
    __shared__ int warp_tot[BLOCK_THREADS / 32];
    int lane = lane_id(), wid = threadIdx.x >> 5, x = v;
    for (int o = 1; o < 32; o <<= 1) {
        int y = __shfl_up_sync(FULL_WARP, x, o);
        if (lane >= o) x += y;
    }
    if (lane == 31) warp_tot[wid] = x;
    __syncthreads();
    int before = 0, sum = 0;
    for (int k = 0; k < BLOCK_THREADS / 32; k++) {
        if (k < wid) before += warp_tot[k];
        sum += warp_tot[k];
    }
    __syncthreads();
    *total = sum;
    return before + x - v;
}

/* Exclusive scan in place of a[n] by one block (values written by other blocks). */
__device__ static int scan_in_place(int32_t *a, int64_t n)
{
    volatile int32_t *va = a;
    int64_t per = (n + BLOCK_THREADS - 1) / BLOCK_THREADS;
    int64_t lo = threadIdx.x * per, hi = lo + per < n ? lo + per : n;
    int local = 0;
    for (int64_t k = lo; k < hi; k++)
        local += va[k];
    int total;
    int run = block_exclusive_scan(local, &total);
    for (int64_t k = lo; k < hi; k++) {
        int v = va[k];
        va[k] = run;
        run += v;
    }
    return total;
}

__global__ void __launch_bounds__(BLOCK_THREADS) mask_count_kernel(mask_gpu_job j)
{
    __shared__ int warp_e[MASK_GPU_ROWS_PER_BLOCK], warp_p[MASK_GPU_ROWS_PER_BLOCK];
    __shared__ bool is_last;
    int lane = lane_id(), wid = threadIdx.x >> 5;
    int64_t row = (int64_t)blockIdx.x * MASK_GPU_ROWS_PER_BLOCK + wid;
    int ce = 0, cp = 0;
    if (row < j.n_rows) {
        const uint8_t *cls = j.cls + row * j.e.n_tcol;
        for (int c = lane; c < j.e.n_tcol; c += 32) {
            int k = cls[c];
            ce += k == MASK_TILE_FULL || k == MASK_TILE_MIXED;
            cp += k == MASK_TILE_MIXED;
        }
        ce = warp_sum(ce);
        cp = warp_sum(cp);
        if (lane == 0) {
            j.row_e[row] = ce;
            j.row_p[row] = cp;
        }
    }
    if (lane == 0) {
        warp_e[wid] = ce;
        warp_p[wid] = cp;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        int se = 0, sp = 0;
        for (int k = 0; k < MASK_GPU_ROWS_PER_BLOCK; k++) {
            se += warp_e[k];
            sp += warp_p[k];
        }
        j.blk_e[blockIdx.x] = se;
        j.blk_p[blockIdx.x] = sp;
        __threadfence();
        is_last = atomicAdd(&j.counters[1], 1u) == gridDim.x - 1;
    }
    __syncthreads();
    if (!is_last) return;
    __threadfence();
    int total_e = scan_in_place(j.blk_e, gridDim.x);
    int total_p = scan_in_place(j.blk_p, gridDim.x);
    if (threadIdx.x == 0) {
        volatile uint32_t *flag = j.counters + 2;
        bool over = *flag != 0 || total_e > j.cap_entries || total_p > j.cap_partial;
        j.meta[0] = total_e;
        j.meta[1] = total_p;
        j.meta[2] = over ? 1 : 0;
        j.meta[3] = 0;
    }
}

__global__ void __launch_bounds__(BLOCK_THREADS) mask_fill_kernel(mask_gpu_job j)
{
    int lane = lane_id(), wid = threadIdx.x >> 5;
    int64_t first = (int64_t)blockIdx.x * MASK_GPU_ROWS_PER_BLOCK, row = first + wid;
    if (row >= j.n_rows) return;
    int eoff = j.blk_e[blockIdx.x], poff = j.blk_p[blockIdx.x];
    for (int k = 0; k < wid; k++) {
        eoff += j.row_e[first + k];
        poff += j.row_p[first + k];
    }
    if (lane == 0) {
        j.row_ptr[row] = eoff;
        if (row == j.n_rows - 1) j.row_ptr[j.n_rows] = eoff + j.row_e[row];
    }
    int n_tcol = j.e.n_tcol;
    const uint8_t *cls = j.cls + row * n_tcol;
    for (int c0 = 0; c0 < n_tcol; c0 += 32) {
        int c = c0 + lane;
        int k = c < n_tcol ? cls[c] : MASK_TILE_EMPTY;
        bool listed = k == MASK_TILE_FULL || k == MASK_TILE_MIXED, partial = k == MASK_TILE_MIXED;
        unsigned vl = __ballot_sync(FULL_WARP, listed), vp = __ballot_sync(FULL_WARP, partial);
        if (listed) {
            int64_t pos = eoff + __popc(vl & lanes_below());
            int64_t idx = partial ? poff + __popc(vp & lanes_below()) : -1;
            if (pos < j.cap_entries && idx < j.cap_partial) {
                j.col[pos] = c;
                j.bits[pos] = (int32_t)idx;
                if (partial) j.ptile[idx] = (int32_t)(row * n_tcol + c);
            }
        }
        eoff += __popc(vl);
        poff += __popc(vp);
    }
}

__global__ void __launch_bounds__(BLOCK_THREADS) mask_bitmap_kernel(mask_gpu_job j)
{
    mask_eval e = stage_parts(j.e);
    int64_t p = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    int64_t n = j.meta[1] < j.cap_partial ? (int64_t)j.meta[1] : j.cap_partial;
    if (p >= n || j.meta[2]) return; /* past an overflow, ptile may be incomplete */
    uint64_t *out = j.bitmap + p * e.tile_m * j.wpr;
    tile_eval_warp(e, tile_locate(e, j.ptile[p]), false, out);
}

extern "C" stof_status mask_gpu_run(stof_ctx *ctx, const mask_gpu_job *job)
{
    cudaStream_t s = (cudaStream_t)ctx->stream;
    size_t smem = job->parts_smem;
    int64_t threads = job->n_tiles > job->e.bm ? job->n_tiles : job->e.bm;
    unsigned tile_blocks = (unsigned)stof_cdiv(threads, BLOCK_THREADS);
    unsigned row_blocks = (unsigned)stof_cdiv(job->n_rows, MASK_GPU_ROWS_PER_BLOCK);
    unsigned warp_blocks = (unsigned)stof_cdiv(job->cap_partial, BLOCK_THREADS / 32);
    mask_classify_kernel<<<tile_blocks, BLOCK_THREADS, smem, s>>>(*job);
    if (warp_blocks) mask_resolve_kernel<<<warp_blocks, BLOCK_THREADS, smem, s>>>(*job);
    mask_count_kernel<<<row_blocks, BLOCK_THREADS, 0, s>>>(*job);
    mask_fill_kernel<<<row_blocks, BLOCK_THREADS, 0, s>>>(*job);
    if (warp_blocks) mask_bitmap_kernel<<<warp_blocks, BLOCK_THREADS, smem, s>>>(*job);
    return STOF_CUDA(cudaGetLastError());
}
