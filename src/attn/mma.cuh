/*
 * mma.cuh — the PTX building blocks of the attention kernels: cp.async copies
 * into shared memory (zero-filling what lies past a sequence), ldmatrix
 * fragment loads, mma.sync m16n8k16 with fp32 accumulation, fp32 -> 16-bit
 * packing, exp2 and warp reductions. Included by the .cu files of this part.
 *
 * Fragment layouts (PTX ISA, mma.m16n8k16 with .f16/.bf16): lane = 4 * g + t.
 *   A (16 x 16, row-major):  a0 = (row g, cols 2t, 2t+1), a1 = row g+8,
 *                            a2 = (row g, cols 2t+8, 2t+9), a3 = row g+8 of those
 *   B (16 x 8, k x n):       b0 = (k 2t, 2t+1; n g),  b1 = (k 2t+8, 2t+9; n g)
 *   C (16 x 8, fp32):        c0, c1 = (row g, cols 2t, 2t+1), c2, c3 = row g+8
 * The lower 16 bits of a packed register hold the lower column (or k) index.
 */
#ifndef STOF_ATTN_MMA_CUH
#define STOF_ATTN_MMA_CUH

#include <stdint.h>

#include <cuda_fp16.h>

#include "core/launch.cuh"

#define ATTN_FULL_WARP 0xffffffffu

static __device__ __forceinline__ uint32_t smem_addr(const void *p)
{
    return (uint32_t)__cvta_generic_to_shared(p);
}

/* 16 bytes global -> shared, bypassing L1; src_bytes 0 writes zeros and reads
 * nothing (src must still be a valid address). */
static __device__ __forceinline__ void cp_async16(uint32_t dst, const void *src, int src_bytes)
{
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src),
                 "r"(src_bytes)
                 : "memory");
}

static __device__ __forceinline__ void cp_async_commit(void)
{
    asm volatile("cp.async.commit_group;\n" ::: "memory");
}

static __device__ __forceinline__ void cp_async_wait_all(void)
{
    asm volatile("cp.async.wait_group 0;\n" ::: "memory");
}

static __device__ __forceinline__ void ldsm_x4(uint32_t r[4], uint32_t addr)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
}

static __device__ __forceinline__ void ldsm_x4_trans(uint32_t r[4], uint32_t addr)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
}

/* c += a * b for one m16n8k16 tile. */
template <int BF16>
static __device__ __forceinline__ void mma_16816(float c[4], const uint32_t a[4], uint32_t b0,
                                                 uint32_t b1)
{
    if (BF16) {
        asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, "
            "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
            : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
    } else {
        asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, "
            "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
            : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
    }
}

/* Two floats -> one register of two 16-bit values, lo in the lower half
 * (cvt packs its first source into the upper half). */
template <int BF16> static __device__ __forceinline__ uint32_t pack2(float lo, float hi)
{
    uint32_t r;
    if (BF16)
        asm("cvt.rn.bf16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
    else
        asm("cvt.rn.f16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
}

template <int BF16> static __device__ __forceinline__ float half_to_float(uint16_t x)
{
    if (BF16) return __uint_as_float((uint32_t)x << 16);
    return __half2float(__ushort_as_half(x));
}

template <int BF16> static __device__ __forceinline__ uint16_t float_to_half(float f)
{
    return (uint16_t)(pack2<BF16>(f, 0.0f) & 0xffffu);
}

/* 2^x, approximate (2 ulp); 2^-inf = +0. */
static __device__ __forceinline__ float exp2_approx(float x)
{
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
    return y;
}

/* Reductions over the 4 lanes of a quad (the lanes sharing an accumulator row). */
static __device__ __forceinline__ float quad_max(float x)
{
    x = fmaxf(x, __shfl_xor_sync(ATTN_FULL_WARP, x, 1));
    return fmaxf(x, __shfl_xor_sync(ATTN_FULL_WARP, x, 2));
}

static __device__ __forceinline__ float quad_sum(float x)
{
    x += __shfl_xor_sync(ATTN_FULL_WARP, x, 1);
    return x + __shfl_xor_sync(ATTN_FULL_WARP, x, 2);
}

static __device__ __forceinline__ float warp_max(float x)
{
    for (int o = 16; o > 0; o >>= 1)
        x = fmaxf(x, __shfl_xor_sync(ATTN_FULL_WARP, x, o));
    return x;
}

static __device__ __forceinline__ float warp_sum(float x)
{
    for (int o = 16; o > 0; o >>= 1)
        x += __shfl_xor_sync(ATTN_FULL_WARP, x, o);
    return x;
}

/*
 * Launch order of the block-wise kernels (the hardware starts CTAs in
 * x-fastest order). Masks whose rows list about the same tiles (dense, window,
 * padded) run on a (row blocks, heads, batch) grid, so neighbouring CTAs read
 * one head's K/V tiles while they are in L2. Masks with heavy rows
 * (a.heavy_first: causal, global tokens) run on a (heads, batch, row blocks)
 * grid: one step for every (head, batch entry) at a time, the steps walking
 * the row blocks from both ends inwards (last, first, second last, ...), so
 * the heaviest rows start first everywhere and none is left to run alone at
 * the end. Sets the head, the batch entry and the row block of this CTA.
 */
static __device__ __forceinline__ void attn_block_order(const attn_launch *a, int *h, int *b,
                                                        int *x)
{
    if (a->heavy_first) {
        const int step = blockIdx.z, steps = gridDim.z;
        *h = blockIdx.x;
        *b = blockIdx.y;
        *x = (step & 1) ? step >> 1 : steps - 1 - (step >> 1);
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

/* Launches a block-wise kernel fn of threads threads on the grid of
 * attn_block_order, block_m query rows per CTA. args: the kernel's parameters
 * (the first is the attn_launch a); NULL: a alone. */
static inline stof_status attn_block_launch(const attn_launch *a, const void *fn, int block_m,
                                            int threads, size_t smem, cudaStream_t stream,
                                            void **args = NULL)
{
    const int64_t row_blocks = (int64_t)a->tiles.n_trow * (a->tiles.tile_m / block_m);
    STOF_REQUIRE(row_blocks <= 65535 && a->batch <= 65535 && a->heads <= 65535,
                 STOF_ERR_UNSUPPORTED,
                 "block-wise attention: %lld row blocks of %d, %d heads and a batch of %d; at "
                 "most 65535 each",
                 (long long)row_blocks, block_m, a->heads, a->batch);
    const dim3 grid = a->heavy_first
                          ? dim3((unsigned)a->heads, (unsigned)a->batch, (unsigned)row_blocks)
                          : dim3((unsigned)row_blocks, (unsigned)a->heads, (unsigned)a->batch);
    void *only_a[1] = {(void *)a};
    STOF_CUDA_TRY(
        stof_launch_pdl(a->pdl != 0, fn, grid, dim3(threads), args ? args : only_a, smem, stream));
    return STOF_CUDA(cudaGetLastError());
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

/* Rows [row0, row0 + rows) of out that exist get zeros (both block-wise kernels). */
template <int D, int THREADS>
static __device__ __forceinline__ void store_zero_rows(const attn_seq *s, const attn_launch *a,
                                                       int row0, int rows)
{
    const int CH = D / 8;
    const uint4 zero = make_uint4(0u, 0u, 0u, 0u);
    for (int idx = threadIdx.x; idx < rows * CH; idx += THREADS) {
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

#endif /* STOF_ATTN_MMA_CUH */
