/*
 * sm90.cuh — the pieces both sm_90a attention kernels share (blockwise_sm90.cu,
 * the block-wise kernel over a tile list, and blockwise_sm90_ws.cu, the
 * warp-specialised one of head dim 128): the swizzled tile layout and its
 * descriptors, the wgmma forms with P (or Q) from registers, the online
 * softmax of a score fragment, the output store and the tensor maps of q, k
 * and v. Included only by *_sm90*.cu files.
 */
#ifndef STOF_ATTN_SM90_CUH
#define STOF_ATTN_SM90_CUH

#include "attn/attn.h"
#include "attn/grid.cuh"
#include "core/hopper.cuh"
#include "core/ptx.cuh"

#define SM90_SUB_ROWS 64            /* rows of one tile (and of one warpgroup's Q block) */
#define SM90_BLOCK_BYTES (64 * 128) /* one 64-element column block of a 64-row tile */

/* Generic-proxy writes to shared memory (cp.async included) become visible to
 * the async proxy, which is where wgmma reads its shared-memory operands. */
static __device__ __forceinline__ void fence_proxy_async(void)
{
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

/* At head dim 64 the row sums of P come out of P V as a 65th to 72nd column
 * of O (V extended by a block of ones), which O's accumulator registers
 * carry; at 128 the softmax adds them up. */
#define SM90_ONES_D(D) ((D) == 64)
#define SM90_OREGS(D) ((D) / 2 + (SM90_ONES_D(D) ? 4 : 0))

#define SM90_ACC32                                                                                 \
    "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "                      \
    "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}"
#define SM90_ACC64                                                                                 \
    "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "                      \
    "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "             \
    "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "             \
    "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}"
#define SM90_ACC36                                                                                 \
    "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "                      \
    "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "             \
    "%32, %33, %34, %35}"
#define SM90_OUT32(d) SM90_OUT8(d, 0), SM90_OUT8(d, 8), SM90_OUT8(d, 16), SM90_OUT8(d, 24)
#define SM90_OUT64(d)                                                                              \
    SM90_OUT32(d), SM90_OUT8(d, 32), SM90_OUT8(d, 40), SM90_OUT8(d, 48), SM90_OUT8(d, 56)

/* d += A B for m64n{64,128}k16, A from registers (the mma.sync A fragment of
 * the warp's 16 rows), B MN-major in shared memory (transpose flag 1). */
#define SM90_RS_N64(T, TB, ACC)                                                                    \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"                                      \
                 "wgmma.mma_async.sync.aligned.m64n64k16.f32." T "." T " " SM90_ACC32              \
                 ", {%32, %33, %34, %35}, %36, p, 1, 1, " TB ";\n}\n"                              \
                 : SM90_OUT32(d)                                                                   \
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(ACC))
#define SM90_RS_N72(T)                                                                             \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %41, 0;\n"                                      \
                 "wgmma.mma_async.sync.aligned.m64n72k16.f32." T "." T " " SM90_ACC36              \
                 ", {%36, %37, %38, %39}, %40, p, 1, 1, 1;\n}\n"                                   \
                 : SM90_OUT32(d), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35])               \
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(1))
#define SM90_RS_N128(T)                                                                            \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"                                      \
                 "wgmma.mma_async.sync.aligned.m64n128k16.f32." T "." T " " SM90_ACC64             \
                 ", {%64, %65, %66, %67}, %68, p, 1, 1, 1;\n}\n"                                   \
                 : SM90_OUT64(d)                                                                   \
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(1))
template <int D, int BF16>
static __device__ __forceinline__ void wgmma_rs(float (&d)[SM90_OREGS(D)], const uint32_t (&a)[4],
                                                uint64_t db)
{
    if constexpr (SM90_ONES_D(D)) {
        if (BF16)
            SM90_RS_N72("bf16");
        else
            SM90_RS_N72("f16");
    } else if constexpr (D == 64) {
        if (BF16)
            SM90_RS_N64("bf16", "1", 1);
        else
            SM90_RS_N64("f16", "1", 1);
    } else {
        static_assert(D == 128, "head dims 64 and 128");
        if (BF16)
            SM90_RS_N128("bf16");
        else
            SM90_RS_N128("f16");
    }
}

/* d (+)= A B for m64n128k16 with both operands K-major in shared memory
 * (descriptors da, db): S = Q K^T over 128 keys; accumulate = 0 overwrites d. */
#define SM90_SS_N128(T)                                                                            \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"                                      \
                 "wgmma.mma_async.sync.aligned.m64n128k16.f32." T "." T " " SM90_ACC64             \
                 ", %64, %65, p, 1, 1, 0, 0;\n}\n"                                                 \
                 : SM90_OUT64(d)                                                                   \
                 : "l"(da), "l"(db), "r"(accumulate))
template <int BF16>
static __device__ __forceinline__ void wgmma_ss_n128(float (&d)[64], uint64_t da, uint64_t db,
                                                     int accumulate)
{
    if (BF16)
        SM90_SS_N128("bf16");
    else
        SM90_SS_N128("f16");
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
 * len are zero-filled and read nothing. (The Q block: once per CTA.) */
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

/* Four copies of the 32-bit word x into the 16 shared-memory bytes at addr. */
static __device__ __forceinline__ void st_shared_fill16(uint32_t addr, uint32_t x)
{
    asm volatile("st.shared.v4.b32 [%0], {%1, %1, %1, %1};\n" ::"r"(addr), "r"(x) : "memory");
}

/* Rows [first, ROWS) of a V tile of ROWS rows to zeros (every column block;
 * a row is 128 contiguous bytes of each, whatever the swizzle): the rows of
 * the last tile of a sequence that lie past its keys hold whatever follows in
 * memory, and P = 0 times a NaN there would still be NaN. tid: the thread's
 * index among the THREADS that share the work. */
template <int D, int THREADS, int ROWS = SM90_SUB_ROWS>
static __device__ __forceinline__ void zero_tail_rows(uint32_t tile, int first,
                                                      int tid = (int)threadIdx.x)
{
    const int per_block = (ROWS - first) * 8; /* 16-byte chunks */
    for (int idx = tid; idx < (D / 64) * per_block; idx += THREADS) {
        const int cb = idx / per_block, c = idx % per_block;
        const uint32_t addr = tile + cb * (ROWS * 128) + first * 128 + c * 16;
        st_shared_fill16(addr, 0u);
    }
}

/* ---------------------------------------------------------------- math */

/* A descriptor moved `bytes` further into shared memory: the start address
 * field (bits 0-13, address >> 4) never carries, every operand lying below
 * 256 KB, so one 32-bit add does it. */
static __device__ __forceinline__ uint64_t desc_at(uint64_t d, uint32_t bytes)
{
    return (d & 0xffffffff00000000ull) | (uint32_t)((uint32_t)d + (bytes >> 4));
}

/* x, computed once: the compiler may not rebuild it from its inputs in every
 * iteration (it otherwise rematerialises descriptors to save registers). */
static __device__ __forceinline__ uint64_t opaque(uint64_t x)
{
    asm volatile("" : "+l"(x));
    return x;
}

/* s = exp2(s * scale - base) against the rows' scaled references base (rows
 * g and g+8: one FFMA and one MUFU a score), and this tile's per-thread row
 * sums when SUMS. */
template <bool SUMS, int N>
static __device__ __forceinline__ void exp_tile(float (&s)[N], float scale, const float (&base)[2],
                                                float (&sum)[2])
{
    sum[0] = sum[1] = 0.0f;
#pragma unroll
    for (int i = 0; i < N; i++) {
        s[i] = exp2_approx(fmaf(s[i], scale, -base[(i >> 1) & 1]));
        if (SUMS) sum[(i >> 1) & 1] += s[i];
    }
}

/* The online softmax of one tile, up to the rescale of O. s holds raw
 * scores (sign already folded, so that scale > 0 is scale * log2(e)); m is the
 * running raw maximum of rows g and g+8 (N / 4 n8 blocks of the
 * accumulator fragment: 64 or 128 keys). s becomes the unnormalised
 * probabilities exp2(s * scale - m * scale) (one FFMA and one MUFU each), alpha
 * the factor that carries the old O and sums over (exactly 1 when the maximum
 * did not move), sum this tile's (per-thread partial) row sums when SUMS (the
 * kernel does not need them where P V yields them). A row that has seen nothing
 * visible keeps m = -inf and exponentiates against 0, so it stays exactly 0.
 * head (raw units, >= 0): m becomes a reference up to head above the row's
 * maximum (the tile's maximum plus head, where that passes the old m), which
 * gives a settled softmax (blockwise_sm90.cu) that much more room before a
 * later score sends it back here; P then stays below 2^(-head * scale).
 * In two steps, which a kernel may run apart (blockwise_ws_sm90.cu waits for
 * P V between them): softmax_max (the maxima, m, alpha and the exponent's
 * reference base of each row) and exp_tile. */
template <int N>
static __device__ __forceinline__ void softmax_max(const float (&s)[N], float scale, float (&m)[2],
                                                   float (&alpha)[2], float (&base)[2],
                                                   float head = 0.0f)
{
    float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int j = 0; j < N / 4; j++) {
        mx[0] = fmaxf(mx[0], fmaxf(s[4 * j], s[4 * j + 1]));
        mx[1] = fmaxf(mx[1], fmaxf(s[4 * j + 2], s[4 * j + 3]));
    }
#pragma unroll
    for (int r = 0; r < 2; r++) {
        const float m_new = fmaxf(m[r], quad_max(mx[r]) + head);
        const float b = m_new == -INFINITY ? 0.0f : m_new;
        alpha[r] = exp2_approx((m[r] - b) * scale);
        base[r] = b * scale;
        m[r] = m_new;
    }
}

template <bool SUMS, int N>
static __device__ __forceinline__ void softmax_tile(float (&s)[N], float scale, float (&m)[2],
                                                    float (&alpha)[2], float (&sum)[2],
                                                    float head = 0.0f)
{
    float base[2];
    softmax_max(s, scale, m, alpha, base, head);
    exp_tile<SUMS>(s, scale, base, sum);
}

/* P as KK k16 A fragments: keys 16kk.. of rows g, g+8 are n8 blocks 2kk, 2kk+1. */
template <int BF16, int KK>
static __device__ __forceinline__ void pack_p(uint32_t (&p)[KK][4], const float (&s)[8 * KK])
{
#pragma unroll
    for (int kk = 0; kk < KK; kk++) {
        const float *lo = s + 8 * kk, *hi = s + 8 * kk + 4;
        p[kk][0] = pack2<BF16>(lo[0], lo[1]);
        p[kk][1] = pack2<BF16>(lo[2], lo[3]);
        p[kk][2] = pack2<BF16>(hi[0], hi[1]);
        p[kk][3] = pack2<BF16>(hi[2], hi[3]);
    }
}

/* ---------------------------------------------------------------- output */

/* Normalise the warp's 16 rows (l: the complete sums of the thread's rows g
 * and g+8), stage them in its own rows of the warpgroup's Q tile (same
 * swizzle: conflict-free), write 16-byte chunks. row_w: first of the warp's
 * rows in the sequence; r_w: in the tile. */
template <int D, int BF16>
static __device__ __forceinline__ void
store_output(const float (&o)[SM90_OREGS(D)], const float (&l)[2], uint32_t tile, const attn_seq *s,
             const attn_launch *a, int row_w, int r_w, int lane)
{
    const int CH = D / 8;
    const int g = lane >> 2, t = lane & 3;
    float inv[2];
    bool live[2]; /* rows past len_q: zeros, selected (their Q may be anything, o NaN) */
#pragma unroll
    for (int r = 0; r < 2; r++) {
        const float sum = l[r];
        live[r] = row_w + g + 8 * r < s->len_q;
        inv[r] = sum > 0.0f ? 1.0f / sum : 0.0f;
    }
#pragma unroll
    for (int j = 0; j < D / 8; j++) {
#pragma unroll
        for (int r = 0; r < 2; r++) {
            const uint32_t v =
                live[r] ? pack2<BF16>(o[4 * j + 2 * r] * inv[r], o[4 * j + 2 * r + 1] * inv[r])
                        : 0u;
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

/* O *= alpha. SKIP: skipped by a warp whose rows all kept their maxima
 * (alpha == 1 exactly): after the first few tiles of a long row that is most
 * tiles. Without it, no branch: the FMULs stay in their basic block, where
 * ptxas can interleave them with the work around them (blockwise_ws_sm90.cu). */
template <int D, bool SKIP = true>
static __device__ __forceinline__ void rescale_o(float (&o)[SM90_OREGS(D)], const float (&alpha)[2])
{
    if (SKIP && !__any_sync(PTX_FULL_WARP, alpha[0] != 1.0f || alpha[1] != 1.0f)) return;
#pragma unroll
    for (int d = 0; d < SM90_OREGS(D); d++)
        o[d] *= alpha[(d >> 1) & 1];
}

/* A tensor map of rows of one (head, batch entry) of q, k or v (x, element
 * strides sb, sh, sp of batch, head and token; dims (D, rows, heads, batch)),
 * boxes of 64 elements of one column block by box_rows rows, 128-byte
 * swizzled, zeros past the tensor. A dimension of extent 1 is never stepped,
 * so its stride (free to be anything in the caller's tensor) is replaced by a
 * valid one. Under a split of d (attn.h) the box spans box_rows * d rows and
 * loads every d-th (the copy engine's traversal step). */
static inline stof_status attn_sm90_encode_rows(CUtensorMap *map, const char *name,
                                                const attn_launch *a, const void *x, int64_t rows,
                                                int64_t heads, int64_t batch, int64_t sb,
                                                int64_t sh, int64_t sp, int box_rows)
{
    const cuuint64_t dims[4] = {(cuuint64_t)a->head_dim, (cuuint64_t)(rows > 0 ? rows : 1),
                                (cuuint64_t)heads, (cuuint64_t)batch};
    int64_t st[3] = {sp * 2, sh * 2, sb * 2};
    if (rows <= 1) st[0] = (int64_t)a->head_dim * 2;
    if (heads == 1) st[1] = st[0] * (int64_t)dims[1];
    if (batch == 1) st[2] = st[1] * heads;
    for (int d = 0; d < 3; d++)
        STOF_REQUIRE(st[d] > 0 && st[d] % 16 == 0 && st[d] < (1ll << 40), STOF_ERR_UNSUPPORTED,
                     "sm_90 attention: %s has a stride of %lld bytes in dimension %d, which the "
                     "copy engine cannot step (positive multiple of 16 below 2^40)",
                     name, (long long)st[d], d);
    const cuuint64_t strides[3] = {(cuuint64_t)st[0], (cuuint64_t)st[1], (cuuint64_t)st[2]};
    const cuuint32_t box[4] = {64, (cuuint32_t)(box_rows * a->split), 1, 1};
    const cuuint32_t step[4] = {1, (cuuint32_t)a->split, 1, 1};
    return stof_tma_encode_sw128(map, "sm_90 attention", name, a->bf16, 4, x, dims, strides, box,
                                 step);
}

/* The tensor map of k or v: dimensions (D, Lk, H_kv, B) padded, (D, Tk,
 * H_kv, 1) packed (the kernel adds the sequence's first row), boxes of
 * box_rows keys (times the split, whose classes arrive packed). */
static inline stof_status encode_kv(CUtensorMap *map, const char *name, const attn_launch *a,
                                    const void *x, int64_t sb, int64_t sh, int64_t sp, int box_rows)
{
    const int64_t rows = a->cu_k ? a->tk : (int64_t)a->lk * a->split;
    const int64_t batch = a->cu_k ? 1 : a->batch, heads = a->heads / a->split / a->kv_group;
    return attn_sm90_encode_rows(map, name, a, x, rows, heads, batch, sb, sh, sp, box_rows);
}

#endif /* STOF_ATTN_SM90_CUH */
