/*
 * blockwise_sm90.cu — the block-wise sparse attention kernel for Hopper
 * (sm_90a): the same contract as blockwise.cu (only the K/V tiles the mask
 * lists for a tile row, in list order; online softmax in the log2 domain; full
 * tiles free of mask code, partial tiles and tiles reaching past the keys
 * masked by one 64-bit word per row; padded and packed layouts; rows with
 * nothing visible write zeros), with the matrix products on warpgroup MMA.
 *
 * One CTA per (64 or 128 query rows, head, batch entry): WG = 1 or 2 consumer
 * warpgroups of 128 threads, each owning 64 query rows, sharing every K/V
 * tile. Per warpgroup and listed tile:
 *   S = Q K^T   wgmma.mma_async m64n64k16, Q and K read from shared memory
 *               through matrix descriptors (both K-major);
 *   softmax     on the accumulator fragments, which per warp have the layout
 *               of mma.sync m16n8 C blocks (warp w owns rows 16w..16w+15);
 *   O += P V    wgmma m64n{D}k16 with P as the register A operand (two
 *               adjacent n8 score blocks make one k16 A fragment) and V read
 *               from shared memory as an MN-major (transposed) B operand.
 * Q, K and V tiles sit in shared memory in the canonical 128-byte-swizzle
 * layout: column blocks of 64 elements (128 bytes per row), rows 128 bytes
 * apart, 16-byte chunk c of row r stored at chunk c ^ (r % 8), every tile base
 * 1024-byte aligned. The loads are cp.async (each thread fences its writes
 * into the async proxy before the barrier that publishes them to wgmma).
 *
 * The one non-obvious choice is the order of work inside an iteration
 * (FlashAttention-3's intra-warpgroup overlap): iteration i issues S_i = Q K_i^T
 * and then O += P_{i-1} V_{i-1}, waits for S_i only, and runs the softmax of
 * tile i while the tensor cores still work on P_{i-1} V_{i-1}; O is rescaled
 * once that product has landed. So V_{i-1} and K_i are live in one iteration,
 * and tile i+1 loads meanwhile: two K buffers and two V buffers suffice, with
 * K_{i+1} and V_i loaded during iteration i.
 */
#include "attn/attn.h"
#include "attn/bits.h"
#include "attn/mma.cuh"
#include "attn/select.h"
#include "core/hopper.cuh"
#include "core/launch.cuh"

#include <cuda_runtime.h>

#define SM90_BLOCK_N 64
#define SM90_SUB_ROWS 64            /* rows of one tile (and of one warpgroup's Q block) */
#define SM90_BLOCK_BYTES (64 * 128) /* one 64-element column block of a 64-row tile */

/* ---------------------------------------------------------------- PTX */

/* Wait until at most N committed cp.async groups of this thread are pending. */
template <int N> static __device__ __forceinline__ void cp_async_wait(void)
{
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

/* Generic-proxy writes to shared memory (cp.async included) become visible to
 * the async proxy, which is where wgmma reads its shared-memory operands. */
static __device__ __forceinline__ void fence_proxy_async(void)
{
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

/* Named barrier over the 128 threads of one warpgroup (id 0 is __syncthreads);
 * immediate ids, so that the CTA reserves three barriers, not sixteen. */
static __device__ __forceinline__ void warpgroup_sync(int wg)
{
    if (wg == 0)
        asm volatile("bar.sync 1, 128;\n" ::: "memory");
    else
        asm volatile("bar.sync 2, 128;\n" ::: "memory");
}

#define SM90_ACC32                                                                                 \
    "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "                      \
    "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}"
#define SM90_ACC64                                                                                 \
    "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "                      \
    "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "             \
    "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "             \
    "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}"
#define SM90_OUT32(d) SM90_OUT8(d, 0), SM90_OUT8(d, 8), SM90_OUT8(d, 16), SM90_OUT8(d, 24)
#define SM90_OUT64(d)                                                                              \
    SM90_OUT32(d), SM90_OUT8(d, 32), SM90_OUT8(d, 40), SM90_OUT8(d, 48), SM90_OUT8(d, 56)

/* d (+)= A B for m64n64k16, A and B K-major in shared memory (descriptors);
 * accumulate = 0 overwrites d. */
#define SM90_SS_N64(T)                                                                             \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"                                      \
                 "wgmma.mma_async.sync.aligned.m64n64k16.f32." T "." T " " SM90_ACC32              \
                 ", %32, %33, p, 1, 1, 0, 0;\n}\n"                                                 \
                 : SM90_OUT32(d)                                                                   \
                 : "l"(da), "l"(db), "r"(accumulate))
template <int BF16>
static __device__ __forceinline__ void wgmma_ss_n64(float (&d)[32], uint64_t da, uint64_t db,
                                                    int accumulate)
{
    if (BF16)
        SM90_SS_N64("bf16");
    else
        SM90_SS_N64("f16");
}

/* d += A B for m64n{64,128}k16, A from registers (the mma.sync A fragment of
 * the warp's 16 rows), B MN-major in shared memory (transpose flag 1). */
#define SM90_RS_N64(T)                                                                             \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"                                      \
                 "wgmma.mma_async.sync.aligned.m64n64k16.f32." T "." T " " SM90_ACC32              \
                 ", {%32, %33, %34, %35}, %36, p, 1, 1, 1;\n}\n"                                   \
                 : SM90_OUT32(d)                                                                   \
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(1))
#define SM90_RS_N128(T)                                                                            \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"                                      \
                 "wgmma.mma_async.sync.aligned.m64n128k16.f32." T "." T " " SM90_ACC64             \
                 ", {%64, %65, %66, %67}, %68, p, 1, 1, 1;\n}\n"                                   \
                 : SM90_OUT64(d)                                                                   \
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(1))
template <int D, int BF16>
static __device__ __forceinline__ void wgmma_rs(float (&d)[D / 2], const uint32_t (&a)[4],
                                                uint64_t db)
{
    if constexpr (D == 64) {
        if (BF16)
            SM90_RS_N64("bf16");
        else
            SM90_RS_N64("f16");
    } else {
        static_assert(D == 128, "head dims 64 and 128");
        if (BF16)
            SM90_RS_N128("bf16");
        else
            SM90_RS_N128("f16");
    }
}

/* ---------------------------------------------------------------- tiles */

/* Byte offset of 16-byte chunk c (of D / 8) of row r inside a 64-row tile:
 * column block c / 8 (64 elements), row r at 128 bytes, chunk swizzled. */
static __device__ __forceinline__ uint32_t sw128_offset(int r, int c)
{
    return (uint32_t)((c >> 3) * SM90_BLOCK_BYTES + r * 128 + (((c & 7) ^ (r & 7)) << 4));
}

/* Rows [row0, row0 + ROWS) of a row-major source (row stride `stride`
 * elements) into consecutive 64-row swizzled tiles at dst; rows at or past
 * len are zero-filled and read nothing. */
template <int D, int ROWS, int THREADS>
static __device__ __forceinline__ void load_rows(uint32_t dst, const uint16_t *src, int64_t stride,
                                                 int row0, int len)
{
    const int CH = D / 8, TILE = SM90_SUB_ROWS * D * 2;
    static_assert(ROWS * CH % THREADS == 0, "whole chunks per thread");
#pragma unroll
    for (int it = 0; it < ROWS * CH / THREADS; it++) {
        const int idx = threadIdx.x + it * THREADS;
        const int r = idx / CH, c = idx % CH;
        const int j = row0 + r;
        const bool ok = j < len;
        const int64_t row = ok ? j : 0;
        cp_async16(dst + (uint32_t)(r / SM90_SUB_ROWS) * TILE + sw128_offset(r % SM90_SUB_ROWS, c),
                   src + row * stride + c * 8, ok ? 16 : 0);
    }
}

/* ---------------------------------------------------------------- math */

/* S = Q K^T for one warpgroup: D / 16 k-steps; a step moves 32 bytes along a
 * 128-byte row, four steps cross into the next column block. */
template <int D, int BF16>
static __device__ __forceinline__ void issue_scores(float (&s)[32], uint32_t q_tile,
                                                    uint32_t k_tile)
{
#pragma unroll
    for (int ks = 0; ks < D / 16; ks++) {
        const uint32_t off = (uint32_t)((ks >> 2) * SM90_BLOCK_BYTES + (ks & 3) * 32);
        wgmma_ss_n64<BF16>(s, sw128_desc(q_tile + off, 16, 1024),
                           sw128_desc(k_tile + off, 16, 1024), ks > 0);
    }
}

/* O += P V: four k16 steps over the tile's 64 keys; a step moves 16 rows
 * (2048 bytes) down every column block of V. */
template <int D, int BF16>
static __device__ __forceinline__ void issue_pv(float (&o)[D / 2], const uint32_t (&p)[4][4],
                                                uint32_t v_tile)
{
#pragma unroll
    for (int kk = 0; kk < 4; kk++)
        wgmma_rs<D, BF16>(o, p[kk], sw128_desc(v_tile + kk * 2048, SM90_BLOCK_BYTES, 1024));
}

/* Invisible elements to -inf. w_lo / w_hi: visibility words of the thread's
 * rows g and g+8, bit c = key column c of the tile, already shifted by 2t. */
static __device__ __forceinline__ void mask_scores(float (&s)[32], uint64_t w_lo, uint64_t w_hi)
{
#pragma unroll
    for (int j = 0; j < 8; j++) {
#pragma unroll
        for (int e = 0; e < 2; e++) {
            if (!((w_lo >> (j * 8 + e)) & 1ull)) s[4 * j + e] = -INFINITY;
            if (!((w_hi >> (j * 8 + e)) & 1ull)) s[4 * j + 2 + e] = -INFINITY;
        }
    }
}

/* The online softmax of one tile, up to the rescale of O: s (scores in log2
 * units) becomes the unnormalised probabilities, m the new running maxima of
 * rows g and g+8, alpha the factor that carries the old O and sums over, sum
 * this tile's (per-thread partial) row sums. A row that has seen nothing
 * visible keeps m = -inf and exponentiates against 0, so it stays exactly 0. */
static __device__ __forceinline__ void softmax_tile(float (&s)[32], float (&m)[2],
                                                    float (&alpha)[2], float (&sum)[2])
{
    float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int j = 0; j < 8; j++) {
        mx[0] = fmaxf(mx[0], fmaxf(s[4 * j], s[4 * j + 1]));
        mx[1] = fmaxf(mx[1], fmaxf(s[4 * j + 2], s[4 * j + 3]));
    }
    float base[2];
#pragma unroll
    for (int r = 0; r < 2; r++) {
        const float m_new = fmaxf(m[r], quad_max(mx[r]));
        base[r] = m_new == -INFINITY ? 0.0f : m_new;
        alpha[r] = exp2_approx(m[r] - base[r]);
        m[r] = m_new;
        sum[r] = 0.0f;
    }
#pragma unroll
    for (int i = 0; i < 32; i++) {
        s[i] = exp2_approx(s[i] - base[(i >> 1) & 1]);
        sum[(i >> 1) & 1] += s[i];
    }
}

/* P as four k16 A fragments: keys 16kk.. of rows g, g+8 are n8 blocks 2kk, 2kk+1. */
template <int BF16>
static __device__ __forceinline__ void pack_p(uint32_t (&p)[4][4], const float (&s)[32])
{
#pragma unroll
    for (int kk = 0; kk < 4; kk++) {
        const float *lo = s + 8 * kk, *hi = s + 8 * kk + 4;
        p[kk][0] = pack2<BF16>(lo[0], lo[1]);
        p[kk][1] = pack2<BF16>(lo[2], lo[3]);
        p[kk][2] = pack2<BF16>(hi[0], hi[1]);
        p[kk][3] = pack2<BF16>(hi[2], hi[3]);
    }
}

/* ---------------------------------------------------------------- output */

/* Normalise the warp's 16 rows, stage them in its own rows of the
 * warpgroup's Q tile (same swizzle: conflict-free), write 16-byte chunks.
 * row_w: first of the warp's rows in the sequence; r_w: in the tile. */
template <int D, int BF16>
static __device__ __forceinline__ void
store_output(const float (&o)[D / 2], const float (&l)[2], uint32_t tile, const attn_seq *s,
             const attn_launch *a, int row_w, int r_w, int lane)
{
    const int CH = D / 8;
    const int g = lane >> 2, t = lane & 3;
    float inv[2];
#pragma unroll
    for (int r = 0; r < 2; r++) {
        const float sum = quad_sum(l[r]);
        const int i = row_w + g + 8 * r;
        inv[r] = (i < s->len_q && sum > 0.0f) ? 1.0f / sum : 0.0f;
    }
#pragma unroll
    for (int j = 0; j < D / 8; j++) {
#pragma unroll
        for (int r = 0; r < 2; r++) {
            const uint32_t v =
                pack2<BF16>(o[4 * j + 2 * r] * inv[r], o[4 * j + 2 * r + 1] * inv[r]);
            const uint32_t addr = tile + sw128_offset(r_w + g + 8 * r, j) + 4 * t;
            asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(addr), "r"(v) : "memory");
        }
    }
    __syncwarp();
#pragma unroll
    for (int it = 0; it < 16 * CH / 32; it++) {
        const int idx = lane + it * 32;
        const int r = idx / CH, c = idx % CH;
        const int i = row_w + r;
        uint4 v;
        asm volatile("ld.shared.v4.b32 {%0, %1, %2, %3}, [%4];\n"
                     : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                     : "r"(tile + sw128_offset(r_w + r, c))
                     : "memory");
        if (i < s->store_rows)
            asm volatile("st.global.v4.b32 [%0], {%1, %2, %3, %4};\n" ::"l"(
                             s->o + (int64_t)i * a->o_sl + c * 8),
                         "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w)
                         : "memory");
    }
}

/* ---------------------------------------------------------------- kernel */

/* Visibility words of rows g and g+8 of the thread (bit c = key column c),
 * all ones for a full tile inside the keys. */
static __device__ __forceinline__ void tile_words(const mask_tiles *t, int bits, int tile_row,
                                                  int key0, int len_k, uint64_t (&w)[2])
{
    w[0] = w[1] = ~0ull;
    if (bits >= 0) {
        const uint64_t *bm = t->bitmap + ((int64_t)bits * t->tile_m + tile_row) * t->words_per_row;
        w[0] = bm[0];
        w[1] = bm[8 * t->words_per_row];
    }
    if (key0 + SM90_BLOCK_N > len_k) {
        const uint64_t in_seq = attn_low_mask(len_k - key0);
        w[0] &= in_seq;
        w[1] &= in_seq;
    }
}

/* Scale, mask (partial tiles and tiles past the keys only) and the softmax. */
static __device__ __forceinline__ void scores_to_p(float (&s)[32], bool masked,
                                                   const uint64_t (&w)[2], int shift,
                                                   float scale_log2, float (&m)[2],
                                                   float (&alpha)[2], float (&sum)[2])
{
#pragma unroll
    for (int i = 0; i < 32; i++)
        s[i] *= scale_log2;
    if (masked) mask_scores(s, w[0] >> shift, w[1] >> shift);
    softmax_tile(s, m, alpha, sum);
}

/* CTAs per SM the register budget aims at (no spills at these bounds). */
#define SM90_MIN_CTAS(D, WG) ((D) == 64 ? ((WG) == 1 ? 3 : 2) : ((WG) == 1 ? 2 : 1))

template <int D, int WG, int BF16>
__global__ void __launch_bounds__(WG * 128, SM90_MIN_CTAS(D, WG))
    attn_blockwise_sm90_kernel(const attn_launch a)
{
    stof_grid_wait(); /* launched with PDL: the inputs are the previous kernel's outputs */
    const int BM = WG * SM90_SUB_ROWS, THREADS = WG * 128;
    const uint32_t TILE = SM90_SUB_ROWS * D * 2;
    extern __shared__ __align__(1024) unsigned char smem_raw[];
    /* The slack of attn_sm90_smem_bytes lets the base round up to 1024 bytes. */
    const uint32_t base = (smem_addr(smem_raw) + 1023u) & ~1023u;
    const uint32_t sq = base;           /* [WG] 64-row Q tiles */
    const uint32_t sk = sq + WG * TILE; /* [2] K tiles */
    const uint32_t sv = sk + 2 * TILE;  /* [2] V tiles */

    const mask_tiles *t = &a.tiles;
    int h, b, x;
    attn_block_order(&a, &h, &b, &x);
    const int wg = threadIdx.x >> 7, warp = (threadIdx.x >> 5) & 3, lane = threadIdx.x & 31;
    const int subs = t->tile_m / BM;
    const int tr = x / subs;
    const int row0 = tr * t->tile_m + (x % subs) * BM;
    const attn_seq s = attn_seq_of(&a, b, h);
    if (row0 >= s.store_rows) return;
    const int64_t ri = attn_row_index(t, b, h, tr);
    const int e0 = t->row_ptr[ri], n = t->row_ptr[ri + 1] - e0;
    if (n <= 0 || row0 >= s.len_q) {
        store_zero_rows<D, THREADS>(&s, &a, row0, BM);
        return;
    }

    const uint32_t q_tile = sq + wg * TILE;
    /* Row of this thread's accumulator row g inside the mask tile (for the bitmap). */
    const int tile_row = (x % subs) * BM + wg * SM90_SUB_ROWS + warp * 16 + (lane >> 2);
    const int shift = 2 * (lane & 3);

    float o[D / 2], sc[32], m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
    float alpha[2], sum[2];
    uint32_t p[4][4];
    uint64_t w[2];
#pragma unroll
    for (int i = 0; i < D / 2; i++)
        o[i] = 0.0f;
#pragma unroll
    for (int i = 0; i < 32; i++)
        sc[i] = 0.0f;

    /* Prologue: Q and K_0 in one group, K_1 and V_0 in the next, which keeps
     * loading while S_0 and its softmax run. */
    int col = t->col[e0], bits = t->bits[e0];
    load_rows<D, BM, THREADS>(sq, s.q, a.q_sl, row0, s.len_q);
    load_rows<D, SM90_SUB_ROWS, THREADS>(sk, s.k, a.k_sl, col * SM90_BLOCK_N, s.len_k);
    cp_async_commit();
    if (n > 1)
        load_rows<D, SM90_SUB_ROWS, THREADS>(sk + TILE, s.k, a.k_sl, t->col[e0 + 1] * SM90_BLOCK_N,
                                             s.len_k);
    load_rows<D, SM90_SUB_ROWS, THREADS>(sv, s.v, a.v_sl, col * SM90_BLOCK_N, s.len_k);
    cp_async_commit();
    tile_words(t, bits, tile_row, col * SM90_BLOCK_N, s.len_k, w);
    bool masked = bits >= 0 || col * SM90_BLOCK_N + SM90_BLOCK_N > s.len_k;
    cp_async_wait<1>();
    fence_proxy_async();
    __syncthreads();
    wgmma_fence();
    issue_scores<D, BF16>(sc, q_tile, sk);
    wgmma_commit();
    wgmma_wait<0>();
    reg_fence(sc);
    scores_to_p(sc, masked, w, shift, a.scale_log2, m, alpha, sum);
    l[0] = sum[0];
    l[1] = sum[1];
    pack_p<BF16>(p, sc);

    for (int i = 1; i < n; i++) {
        const int e = e0 + i;
        col = t->col[e];
        bits = t->bits[e];
        const int key0 = col * SM90_BLOCK_N;
        tile_words(t, bits, tile_row, key0, s.len_k, w);
        masked = bits >= 0 || key0 + SM90_BLOCK_N > s.len_k;

        /* K_i and V_{i-1} landed; every warpgroup is done with K_{i-1} (its S
         * was waited for) and with V_{i-2} (its P V was waited for). */
        cp_async_wait_all();
        fence_proxy_async();
        __syncthreads();
        if (i + 1 < n)
            load_rows<D, SM90_SUB_ROWS, THREADS>(sk + ((i + 1) & 1) * TILE, s.k, a.k_sl,
                                                 t->col[e + 1] * SM90_BLOCK_N, s.len_k);
        load_rows<D, SM90_SUB_ROWS, THREADS>(sv + (i & 1) * TILE, s.v, a.v_sl, key0, s.len_k);
        cp_async_commit();

        wgmma_fence();
        issue_scores<D, BF16>(sc, q_tile, sk + (i & 1) * TILE);
        wgmma_commit();
        issue_pv<D, BF16>(o, p, sv + ((i - 1) & 1) * TILE);
        wgmma_commit();
        wgmma_wait<1>(); /* S_i landed; P_{i-1} V_{i-1} may still run */
        reg_fence(sc);
        scores_to_p(sc, masked, w, shift, a.scale_log2, m, alpha, sum);
        wgmma_wait<0>();
        reg_fence(o);
#pragma unroll
        for (int d = 0; d < D / 2; d++)
            o[d] *= alpha[(d >> 1) & 1];
        l[0] = l[0] * alpha[0] + sum[0];
        l[1] = l[1] * alpha[1] + sum[1];
        pack_p<BF16>(p, sc);
    }

    /* The last P V once V_{n-1} has landed. */
    cp_async_wait_all();
    fence_proxy_async();
    __syncthreads();
    wgmma_fence();
    issue_pv<D, BF16>(o, p, sv + ((n - 1) & 1) * TILE);
    wgmma_commit();
    wgmma_wait<0>();
    reg_fence(o);
    fence_proxy_async();
    warpgroup_sync(wg); /* no wgmma of this warpgroup reads its Q tile any more */
    store_output<D, BF16>(o, l, q_tile, &s, &a, row0 + wg * SM90_SUB_ROWS + warp * 16, warp * 16,
                          lane);
}

/* ---------------------------------------------------------------- host */

/* Every instantiation: head dims 64 and 128, one or two warpgroups, fp16 and bf16. */
typedef void (*sm90_kernel_fn)(const attn_launch);
typedef struct sm90_variant {
    int head_dim, wg, bf16;
    sm90_kernel_fn fn;
} sm90_variant;

// clang-format off
#define SM90_VARIANT(D, WG)                                                                        \
    {D, WG, 0, attn_blockwise_sm90_kernel<D, WG, 0>}, {D, WG, 1, attn_blockwise_sm90_kernel<D, WG, 1>}
// clang-format on
static const sm90_variant sm90_variants[] = {SM90_VARIANT(64, 1), SM90_VARIANT(64, 2),
                                             SM90_VARIANT(128, 1), SM90_VARIANT(128, 2)};
#define SM90_NVARIANTS ((int)(sizeof sm90_variants / sizeof sm90_variants[0]))

static int variant_smem(const sm90_variant *v)
{
    return (int)attn_sm90_smem_bytes(v->head_dim, 64 * v->wg);
}

extern "C" stof_status attn_blockwise_sm90_prepare(void)
{
    static unsigned long long done; /* bit per device ordinal */
    int dev = 0;
    STOF_CUDA_TRY(cudaGetDevice(&dev));
    const unsigned long long bit = dev < 64 ? 1ull << dev : 0ull;
    if (done & bit) return STOF_OK;
    for (int i = 0; i < SM90_NVARIANTS; i++)
        STOF_CUDA_TRY(cudaFuncSetAttribute((const void *)sm90_variants[i].fn,
                                           cudaFuncAttributeMaxDynamicSharedMemorySize,
                                           variant_smem(&sm90_variants[i])));
    done |= bit;
    return STOF_OK;
}

extern "C" stof_status attn_blockwise_sm90_run(const attn_launch *a, int warps, int block_m,
                                               void *stream)
{
    STOF_REQUIRE(
        attn_sm90_config_fits(a->head_dim, a->tiles.tile_m, a->tiles.tile_n, warps, block_m),
        STOF_ERR_UNSUPPORTED,
        "no sm_90 block-wise kernel for head dim %d, %d warps, %d-row blocks and mask "
        "tiles %dx%d (it serves head dims 64 and 128 on 64x64 and 128x64 tiles with 4 "
        "warps and 64-row blocks, or on 128x64 tiles with 8 warps and 128-row blocks)",
        a->head_dim, warps, block_m, a->tiles.tile_m, a->tiles.tile_n);
    const int wg = warps / 4;
    const sm90_variant *v = NULL;
    for (int i = 0; i < SM90_NVARIANTS && !v; i++)
        if (sm90_variants[i].head_dim == a->head_dim && sm90_variants[i].wg == wg &&
            sm90_variants[i].bf16 == a->bf16)
            v = &sm90_variants[i];
    STOF_REQUIRE(v, STOF_ERR_INTERNAL,
                 "sm_90 block-wise dispatch: no variant for head dim %d, %d warps", a->head_dim,
                 warps);
    STOF_TRY(attn_blockwise_sm90_prepare());
    return attn_block_launch(a, (const void *)v->fn, block_m, 128 * wg,
                             (size_t)variant_smem(v), (cudaStream_t)stream);
}
