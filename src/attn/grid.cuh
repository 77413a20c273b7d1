/*
 * grid.cuh — where the work of an attention CTA lies: the launch order and
 * grid of the block-wise kernels (and their shared-memory opt-in), the same
 * order walked in units by persistent CTAs (blockwise_ws_sm90.cu), the
 * sequence one (batch entry, head) addresses in either layout, its tile rows
 * in the mask, and the zero rows of an empty one. Included by the .cu files
 * of this part; the PTX they run on is core/ptx.cuh.
 */
#ifndef STOF_ATTN_GRID_CUH
#define STOF_ATTN_GRID_CUH

#include <stdint.h>

#include "core/launch.cuh"

/*
 * The order of attn_block_order (below) as a function of a linear index,
 * for kernels that walk work items in a loop (persistent CTAs): item lin of
 * steps row blocks per (head, batch entry) pair, 0 <= lin < steps * heads *
 * batch. Heavy-first: its sections and steps, the steps of a section walked
 * from both ends inwards, or with descending from the heaviest to the
 * lightest (the order in which persistent CTAs draw them, below); otherwise
 * row blocks fastest, then heads, then batch entries (the 3-D grid's x, y,
 * z).
 */
static __device__ __forceinline__ void attn_item_order(const attn_launch *a, int lin, int steps,
                                                       bool descending, int *h, int *b, int *x)
{
    if (a->heavy_first) {
        const int pairs = a->heads * a->batch;
        const int per = a->section * steps; /* items of a full section */
        const int sec = lin / per, j = lin - sec * per;
        const int first = sec * a->section, width = min(a->section, pairs - first);
        const int step = j / width, pair = first + j % width;
        *h = pair % a->heads;
        *b = pair / a->heads;
        if (descending)
            *x = steps - 1 - step;
        else
            *x = (step & 1) ? step >> 1 : steps - 1 - (step >> 1);
    } else {
        const int pair = lin / steps;
        *x = lin - pair * steps;
        *h = pair % a->heads;
        *b = pair / a->heads;
    }
}

/*
 * Launch order of the block-wise kernels (the hardware starts CTAs in
 * x-fastest order). Masks whose rows list about the same tiles (dense, window,
 * padded) run on a (row blocks, heads, batch) grid, so neighbouring CTAs read
 * one head's K/V tiles while they are in L2. Masks with heavy rows
 * (a.heavy_first: causal, global tokens) run heaviest rows first: the row
 * blocks walked from both ends inwards (last, first, second last, ...), one
 * step for every (head, batch entry) pair at a time, so that none of the
 * heaviest is left to run alone at the end. Taken over every pair at once
 * that order makes the resident CTAs read the K/V of every head together:
 * causal (1, 32, 8192, 128) holds 128 MB of K/V, past the L2, and each CTA
 * then streams its rows' keys from memory (GQA 4:1 with a quarter of the
 * K/V ran 1.45 times faster than MHA at the same FLOPs). So the pairs go in
 * sections of a.section pairs whose K/V fill half the L2 (attention.c), the
 * steps walked inside each section in turn, on a 1-D grid. Sets the head,
 * the batch entry and the row block of this CTA.
 */
static __device__ __forceinline__ void attn_block_order(const attn_launch *a, int *h, int *b,
                                                        int *x)
{
    if (a->heavy_first) {
        const int pairs = a->heads * a->batch;
        attn_item_order(a, (int)blockIdx.x, (int)(gridDim.x / (unsigned)pairs), false, h, b, x);
    } else {
        *x = blockIdx.x;
        *h = blockIdx.y;
        *b = blockIdx.z;
    }
}

/*
 * Opts each variants[i].fn into smem(&variants[i]) bytes of dynamic shared
 * memory on the current device, then runs then(device) when given, once per
 * device: done holds a bit per device ordinal (ordinals from 64 on are opted
 * in on every call). The bit is set only when everything succeeded.
 */
template <typename V>
static inline stof_status attn_opt_in_once(unsigned long long *done, const V *variants, int n,
                                           int (*smem)(const V *), stof_status (*then)(int))
{
    int dev = 0;
    STOF_CUDA_TRY(cudaGetDevice(&dev));
    const unsigned long long bit = dev < 64 ? 1ull << dev : 0ull;
    if (*done & bit) return STOF_OK;
    for (int i = 0; i < n; i++)
        STOF_CUDA_TRY(cudaFuncSetAttribute((const void *)variants[i].fn,
                                           cudaFuncAttributeMaxDynamicSharedMemorySize,
                                           smem(&variants[i])));
    if (then) STOF_TRY(then(dev));
    *done |= bit;
    return STOF_OK;
}

/* Launches a kernel fn of threads threads on the grid of attn_block_order,
 * row_blocks query row blocks per (head, batch entry). args: the kernel's
 * parameters (the first is the attn_launch a); NULL: a alone. */
static inline stof_status attn_grid_launch(const attn_launch *a, const void *fn, int64_t row_blocks,
                                           int block_m, int threads, size_t smem,
                                           cudaStream_t stream, void **args = NULL)
{
    const int64_t ctas = row_blocks * a->heads * a->batch;
    STOF_REQUIRE(a->heavy_first ? ctas < INT32_MAX && a->section >= 1
                                : row_blocks <= 65535 && a->batch <= 65535 && a->heads <= 65535,
                 STOF_ERR_UNSUPPORTED,
                 "block-wise attention: %lld row blocks of %d, %d heads and a batch of %d (%lld "
                 "CTAs); at most 65535 each, or 2^31 - 1 CTAs in all in heavy-first order",
                 (long long)row_blocks, block_m, a->heads, a->batch, (long long)ctas);
    const dim3 grid = a->heavy_first
                          ? dim3((unsigned)ctas)
                          : dim3((unsigned)row_blocks, (unsigned)a->heads, (unsigned)a->batch);
    void *only_a[1] = {(void *)a};
    STOF_CUDA_TRY(
        stof_launch_pdl(a->pdl != 0, fn, grid, dim3(threads), args ? args : only_a, smem, stream));
    return STOF_CUDA(cudaGetLastError());
}

/*
 * Persistent kernels (one CTA per SM) take the items of attn_item_order
 * (heavy-first: descending) one at a time: CTA i its first, item i, then
 * gridDim.x plus what it draws from a.work[0], a counter that every CTA
 * adds one to, so that an SM takes the next item as it frees up and the
 * lightest items come last (blockwise_ws_sm90.cu has the figures). A CTA
 * that draws past the last item adds one to a.work[1]; the CTA that makes
 * it gridDim.x zeroes both for the next launch given the same pair (the
 * context hands its pairs out in turn: core.h). Each CTA's draws come after
 * its stof_grid_wait, so that a launch never draws before the one before it
 * on the stream has finished. A kernel whose items all cost the same may
 * take every gridDim.x-th instead and leave a.work alone.
 */
static __device__ __forceinline__ int attn_work_draw(const attn_launch *a)
{
    return atomicAdd(a->work, 1) + (int)gridDim.x;
}

static __device__ __forceinline__ void attn_work_done(const attn_launch *a)
{
    __threadfence(); /* this CTA's last draw precedes its count */
    if (atomicAdd(a->work + 1, 1) == (int)gridDim.x - 1) {
        a->work[0] = 0;
        a->work[1] = 0;
    }
}

/* Launches a persistent kernel fn of threads threads on a 1-D grid of one
 * CTA per SM (a->sms, the context's count), or fewer where there are fewer
 * items (row_blocks row blocks a (head, batch entry) pair), drawing from
 * a->work (above). */
static inline stof_status attn_persistent_launch(const attn_launch *a, const void *fn,
                                                 int64_t row_blocks, int threads, size_t smem,
                                                 cudaStream_t stream, void **args)
{
    const int64_t items = row_blocks * a->heads * a->batch;
    const int sms = a->sms;
    STOF_REQUIRE(sms >= 1 && a->work, STOF_ERR_INTERNAL,
                 "persistent attention: the launch names %d SMs%s", sms,
                 a->work ? "" : " and no work counter");
    /* A draw's result plus the grid stays an int. */
    STOF_REQUIRE(items + sms < INT32_MAX && (!a->heavy_first || a->section >= 1),
                 STOF_ERR_UNSUPPORTED,
                 "persistent attention: %lld work items (row blocks x heads x batch); at most "
                 "2^31 - 1 less the SMs",
                 (long long)items);
    const int64_t ctas = items < sms ? items : sms;
    if (ctas < 1) return STOF_OK;
    STOF_CUDA_TRY(
        stof_launch_pdl(a->pdl != 0, fn, dim3((unsigned)ctas), dim3(threads), args, smem, stream));
    return STOF_CUDA(cudaGetLastError());
}

/* Launches a block-wise kernel fn: attn_grid_launch over the mask's tile rows,
 * block_m query rows per CTA. */
static inline stof_status attn_block_launch(const attn_launch *a, const void *fn, int block_m,
                                            int threads, size_t smem, cudaStream_t stream,
                                            void **args = NULL)
{
    const int64_t row_blocks = (int64_t)a->tiles.n_trow * (a->tiles.tile_m / block_m);
    return attn_grid_launch(a, fn, row_blocks, block_m, threads, smem, stream, args);
}

/* Where one (b, hv) sequence lives and how long it is, for either layout
 * (hv: the kernels' head, a real head's residue class under a split, attn.h).
 * The lengths are the mask's, clipped to cu_seqlens for a packed batch so that
 * no load crosses into the next sequence. store_rows: rows of out that belong
 * to this sequence (Lq padded, the real length packed; a class's share of
 * them under a split). */
typedef struct attn_seq {
    const uint16_t *q, *k, *v;
    uint16_t *o;
    int len_q, len_k, store_rows;
    int q_row0; /* row of q and out of the first query (packed: its token; plus the
                   residue class under a split) */
    int k_row0; /* row of k and v of the first key (its token: the sequence's first under a
                   packed layout, plus the residue class under a split) */
    int head;   /* the real head (hv / split) */
    int kv_head; /* the head of k and v (head / kv_group) */
} attn_seq;

static __device__ __forceinline__ attn_seq attn_seq_of(const attn_launch *a, int b, int hv)
{
    const mask_tiles *t = &a->tiles;
    const int d = a->split, h = d > 1 ? hv / d : hv;
    const int bi = t->bm > 1 ? b : 0;
    attn_seq s;
    s.len_q = t->len_q[bi];
    s.len_k = t->len_k[bi];
    s.store_rows = a->lq;
    int64_t q0 = 0, k0 = 0;
    int rows_q = 0, rows_k = 0; /* packed: the sequence's, clamped */
    if (a->cu_q) {
        /* Clamped to the token counts: prefix sums that point outside the
         * tensors give empty sequences instead of stray accesses. */
        q0 = a->cu_q[b];
        k0 = a->cu_k[b];
        const int64_t q1 = min((int64_t)a->cu_q[b + 1], a->tq);
        const int64_t k1 = min((int64_t)a->cu_k[b + 1], a->tk);
        const bool q_ok = q0 >= 0 && q0 <= a->tq, k_ok = k0 >= 0 && k0 <= a->tk;
        if (!q_ok) q0 = 0;
        if (!k_ok) k0 = 0;
        rows_q = q_ok && q1 > q0 ? (int)(q1 - q0) : 0;
        rows_k = k_ok && k1 > k0 ? (int)(k1 - k0) : 0;
        s.store_rows = rows_q;
        s.len_q = min(s.len_q, rows_q);
        s.len_k = min(s.len_k, rows_k);
    }
    s.k_row0 = (int)k0;
    s.q_row0 = (int)q0;
    s.head = h;
    s.kv_head = h / a->kv_group; /* grouped-query: k and v are read in place, never repeated */
    const int hk = s.kv_head;
    s.q = (const uint16_t *)a->q + b * a->q_sb + h * a->q_sh + q0 * a->q_sp;
    s.k = (const uint16_t *)a->k + b * a->k_sb + hk * a->k_sh + k0 * a->k_sp;
    s.v = (const uint16_t *)a->v + b * a->v_sb + hk * a->v_sh + k0 * a->v_sp;
    s.o = (uint16_t *)a->out + b * a->o_sb + h * a->o_sh + q0 * a->o_sp;
    if (d > 1) {
        /* Residue class p: rows p, p + d, ... of the sequence. */
        const int p = hv - h * d;
        s.k_row0 += p;
        s.q_row0 += p;
        s.q += p * a->q_sp;
        s.k += p * a->k_sp;
        s.v += p * a->v_sp;
        s.o += p * a->o_sp;
        if (a->cu_q) {
            auto class_rows = [&](int n) { return n > p ? (n - p + d - 1) / d : 0; };
            s.store_rows = class_rows(rows_q);
            s.len_q = min(t->len_q[bi], s.store_rows);
            s.len_k = min(t->len_k[bi], class_rows(rows_k));
        }
    }
    return s;
}

/* Rows [row0, row0 + rows) of out that exist get zeros (both block-wise
 * kernels); tid: the thread's index among the THREADS that share the work. */
template <int D, int THREADS>
static __device__ __forceinline__ void store_zero_rows(const attn_seq *s, const attn_launch *a,
                                                       int row0, int rows,
                                                       int tid = (int)threadIdx.x)
{
    const int CH = D / 8;
    const uint4 zero = make_uint4(0u, 0u, 0u, 0u);
    for (int idx = tid; idx < rows * CH; idx += THREADS) {
        const int r = idx / CH, c = idx % CH;
        if (row0 + r < s->store_rows)
            *(uint4 *)(s->o + (int64_t)(row0 + r) * a->o_sl + c * 8) = zero;
    }
}

/* Index of tile row tr of the instance (b, hv) in row_ptr (hv: the kernels'
 * head; every class of a split head shares the head's instance). */
static __device__ __forceinline__ int64_t attn_row_index(const attn_launch *a, int b, int hv, int tr)
{
    const mask_tiles *t = &a->tiles;
    const int inst = (t->bm > 1 ? b : 0) * t->hm + (t->hm > 1 ? hv / a->split : 0);
    return (int64_t)inst * t->n_trow + tr;
}

#endif /* STOF_ATTN_GRID_CUH */
