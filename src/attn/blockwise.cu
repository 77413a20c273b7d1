/*
 * blockwise.cu — the block-wise sparse attention kernel (STOF's block-wise
 * MHA): one CTA per (block of query rows, head, batch entry), WARPS warps each
 * owning 16 query rows, Q held in registers, and only the K/V tiles the mask
 * lists for the tile row, in list order, double-buffered through shared
 * memory with cp.async (the prefetch fetches the NEXT LISTED tile, whatever
 * its column). Scores and P.V run on mma.sync m16n8k16 with fp32
 * accumulation; the softmax is online (running max and sum, rescaled as
 * tiles arrive) in the log2 domain. Full tiles run no mask code; partial
 * tiles, and tiles reaching past the keys, apply a 64-bit word per row.
 *
 * The one non-obvious choice: a CTA may cover only part of a mask tile row
 * (block_m = 16 * WARPS dividing tile_m), so a mask compiled with 128 x 64
 * tiles runs either on 128-row CTAs (half the K/V traffic per flop) or on
 * 64-row CTAs (twice the CTAs for short or few sequences); the selector
 * picks. Shared-memory rows are padded by 16 bytes, which spreads the eight
 * rows of every ldmatrix and cp.async phase over distinct bank groups.
 *
 * Modifier variants (MODS = 1, 4 warps of 64 rows, every head dim) take the
 * scores through mods.cuh (soft cap, T5/ALiBi/tensor bias) instead of the
 * plain scale; head dims 80, 96 and 256 have only that configuration.
 */
#include "attn/attn.h"
#include "attn/bits.h"
#include "attn/grid.cuh"
#include "attn/mods.cuh"
#include "attn/select.h"
#include "core/launch.cuh"
#include "core/ptx.cuh"

#include <cuda_runtime.h>

#define BW_BLOCK_N 64
#define BW_PAD 8 /* halves of padding per shared-memory row */

/* K and V rows [key0, key0 + BLOCK_N) into one stage; rows past len_k are
 * zero-filled and never read. */
template <int D, int THREADS>
static __device__ __forceinline__ void load_kv_tile(uint32_t sk, uint32_t sv, const attn_seq *s,
                                                    const attn_launch *a, int key0)
{
    const int PITCH = D + BW_PAD, CH = D / 8;
#pragma unroll
    for (int it = 0; it < BW_BLOCK_N * CH / THREADS; it++) {
        const int idx = threadIdx.x + it * THREADS;
        const int r = idx / CH, c = idx % CH;
        const int j = key0 + r;
        const bool ok = j < s->len_k;
        const int64_t row = ok ? j : 0;
        const uint32_t off = (uint32_t)(r * PITCH + c * 8) * 2u;
        cp_async16(sk + off, s->k + row * a->k_sl + c * 8, ok ? 16 : 0);
        cp_async16(sv + off, s->v + row * a->v_sl + c * 8, ok ? 16 : 0);
    }
}

/* Byte offset, inside a K stage, of the row this lane addresses in ldmatrix.x4:
 * the four 8x8 matrices are (keys 0-7, dims 0-7), (keys 0-7, dims 8-15),
 * (keys 8-15, dims 0-7), (keys 8-15, dims 8-15), i.e. b0, b1 of n-block 2np,
 * then of 2np+1 (lanes 8m .. 8m+7 address matrix m). */
template <int D> static __device__ __forceinline__ uint32_t k_lane_offset(int lane)
{
    return (uint32_t)((((lane >> 4) * 8 + (lane & 7)) * (D + BW_PAD) + ((lane >> 3) & 1) * 8) * 2);
}

/* The same for V read with .trans: matrices (keys 0-7, dims 0-7), (keys 8-15,
 * dims 0-7), (keys 0-7, dims 8-15), (keys 8-15, dims 8-15), i.e. b0, b1 of
 * d-block 2dp, then of 2dp+1. */
template <int D> static __device__ __forceinline__ uint32_t v_lane_offset(int lane)
{
    return (uint32_t)(((((lane >> 3) & 1) * 8 + (lane & 7)) * (D + BW_PAD) + (lane >> 4) * 8) * 2);
}

/* S = Q K^T for the warp's MW x 16 rows against the BLOCK_N keys of one stage.
 * Each K fragment read from shared memory feeds MW mma's: with MW = 2 the
 * shared-memory traffic per flop halves, which is what bounds mma.sync.
 * k_lane: shared address of this lane's ldmatrix row in the stage (k_lane_offset). */
template <int D, int MW, int BF16>
static __device__ __forceinline__ void scores_qk(float s[MW][BW_BLOCK_N / 8][4],
                                                 const uint32_t qf[MW][D / 16][4], uint32_t k_lane)
{
    const int PITCH = D + BW_PAD;
#pragma unroll
    for (int mi = 0; mi < MW; mi++)
#pragma unroll
        for (int j = 0; j < BW_BLOCK_N / 8; j++)
            s[mi][j][0] = s[mi][j][1] = s[mi][j][2] = s[mi][j][3] = 0.0f;
#pragma unroll
    for (int ks = 0; ks < D / 16; ks++) {
#pragma unroll
        for (int np = 0; np < BW_BLOCK_N / 16; np++) {
            uint32_t r[4];
            ldsm_x4(r, k_lane + (uint32_t)(np * 16 * PITCH + ks * 16) * 2u);
#pragma unroll
            for (int mi = 0; mi < MW; mi++) {
                mma_16816<BF16>(s[mi][2 * np], qf[mi][ks], r[0], r[1]);
                mma_16816<BF16>(s[mi][2 * np + 1], qf[mi][ks], r[2], r[3]);
            }
        }
    }
}

/* Invisible elements to -inf. w_lo / w_hi: visibility words of rows g and
 * g+8 of one m-block, bit c = key column c of the tile, already shifted by 2t. */
static __device__ __forceinline__ void apply_tile_mask(float s[BW_BLOCK_N / 8][4], uint64_t w_lo,
                                                       uint64_t w_hi)
{
#pragma unroll
    for (int j = 0; j < BW_BLOCK_N / 8; j++) {
#pragma unroll
        for (int e = 0; e < 2; e++) {
            if (!((w_lo >> (j * 8 + e)) & 1ull)) s[j][e] = -INFINITY;
            if (!((w_hi >> (j * 8 + e)) & 1ull)) s[j][2 + e] = -INFINITY;
        }
    }
}

/* Online softmax over one tile for one m-block: s holds scores in log2 units
 * and becomes P; m, l: running max and (per-thread partial) sum of rows g and
 * g+8; o is rescaled by the change of max. A row that has seen nothing
 * visible keeps m = -inf and exponentiates against 0, so it stays exactly zero. */
template <int D>
static __device__ __forceinline__ void softmax_online(float s[BW_BLOCK_N / 8][4], float m[2],
                                                      float l[2], float o[D / 8][4])
{
    float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int j = 0; j < BW_BLOCK_N / 8; j++) {
        mx[0] = fmaxf(mx[0], fmaxf(s[j][0], s[j][1]));
        mx[1] = fmaxf(mx[1], fmaxf(s[j][2], s[j][3]));
    }
    float alpha[2], base[2];
#pragma unroll
    for (int r = 0; r < 2; r++) {
        const float m_new = fmaxf(m[r], quad_max(mx[r]));
        base[r] = m_new == -INFINITY ? 0.0f : m_new;
        alpha[r] = exp2_approx(m[r] - base[r]);
        m[r] = m_new;
    }
    float sum[2] = {0.0f, 0.0f};
#pragma unroll
    for (int j = 0; j < BW_BLOCK_N / 8; j++) {
#pragma unroll
        for (int e = 0; e < 4; e++) {
            s[j][e] = exp2_approx(s[j][e] - base[e >> 1]);
            sum[e >> 1] += s[j][e];
        }
    }
    l[0] = l[0] * alpha[0] + sum[0];
    l[1] = l[1] * alpha[1] + sum[1];
#pragma unroll
    for (int d = 0; d < D / 8; d++) {
        o[d][0] *= alpha[0];
        o[d][1] *= alpha[0];
        o[d][2] *= alpha[1];
        o[d][3] *= alpha[1];
    }
}

/* O += P V: P comes straight from the score accumulators (two n-blocks of C
 * make one A fragment), V through ldmatrix.trans (v_lane: v_lane_offset); each
 * V fragment feeds the MW m-blocks. */
template <int D, int MW, int BF16>
static __device__ __forceinline__ void accumulate_pv(float o[MW][D / 8][4],
                                                     const float p[MW][BW_BLOCK_N / 8][4],
                                                     uint32_t v_lane)
{
    const int PITCH = D + BW_PAD;
#pragma unroll
    for (int kk = 0; kk < BW_BLOCK_N / 16; kk++) {
        uint32_t pa[MW][4];
#pragma unroll
        for (int mi = 0; mi < MW; mi++) {
            pa[mi][0] = pack2<BF16>(p[mi][2 * kk][0], p[mi][2 * kk][1]);
            pa[mi][1] = pack2<BF16>(p[mi][2 * kk][2], p[mi][2 * kk][3]);
            pa[mi][2] = pack2<BF16>(p[mi][2 * kk + 1][0], p[mi][2 * kk + 1][1]);
            pa[mi][3] = pack2<BF16>(p[mi][2 * kk + 1][2], p[mi][2 * kk + 1][3]);
        }
#pragma unroll
        for (int dp = 0; dp < D / 16; dp++) {
            uint32_t r[4];
            ldsm_x4_trans(r, v_lane + (uint32_t)(kk * 16 * PITCH + dp * 16) * 2u);
#pragma unroll
            for (int mi = 0; mi < MW; mi++) {
                mma_16816<BF16>(o[mi][2 * dp], pa[mi], r[0], r[1]);
                mma_16816<BF16>(o[mi][2 * dp + 1], pa[mi], r[2], r[3]);
            }
        }
    }
}

/* Normalise 16 rows of one m-block, stage them in the warp's own Q rows of
 * shared memory (free since Q went to registers), then write 16-byte chunks. */
template <int D, int BF16>
static __device__ __forceinline__ void store_output(float o[D / 8][4], const float l[2],
                                                    uint16_t *so, const attn_seq *s,
                                                    const attn_launch *a, int row_w, int lane)
{
    const int PITCH = D + BW_PAD, CH = D / 8;
    const int g = lane >> 2, t = lane & 3;
    float inv[2];
#pragma unroll
    for (int r = 0; r < 2; r++) {
        const float sum = quad_sum(l[r]);
        const int i = row_w + g + 8 * r;
        inv[r] = (i < s->len_q && sum > 0.0f) ? 1.0f / sum : 0.0f;
    }
#pragma unroll
    for (int d = 0; d < D / 8; d++) {
        *(uint32_t *)(so + g * PITCH + d * 8 + 2 * t) =
            pack2<BF16>(o[d][0] * inv[0], o[d][1] * inv[0]);
        *(uint32_t *)(so + (g + 8) * PITCH + d * 8 + 2 * t) =
            pack2<BF16>(o[d][2] * inv[1], o[d][3] * inv[1]);
    }
    __syncwarp();
#pragma unroll
    for (int it = 0; it < 16 * CH / 32; it++) {
        const int idx = lane + it * 32;
        const int r = idx / CH, c = idx % CH;
        const int i = row_w + r;
        if (i < s->store_rows)
            *(uint4 *)(s->o + (int64_t)i * a->o_sl + c * 8) =
                *(const uint4 *)(so + r * PITCH + c * 8);
    }
}

/* CTAs per SM the register budget aims at, the most that compile without
 * spills on sm_80 and sm_90: 16 warps at head dim 32, 12 (4-warp CTAs) or 8
 * (8-warp CTAs) at head dim 64, 8 at head dim 128; warps holding two m-blocks
 * need about twice the accumulators, so they aim at 8 warps per SM. */
#define BW_MIN_CTAS(D, WARPS, MW)                                                                  \
    ((D) > 128   ? 1                                                                               \
     : (MW) == 2 ? 8 / (WARPS)                                                                     \
     : (D) <= 32 ? 16 / (WARPS)                                                                    \
     : (D) <= 64 ? ((WARPS) == 4 ? 3 : 1)                                                          \
                 : 8 / (WARPS))

template <int D, int WARPS, int MW, int BF16, int MODS>
__global__ void __launch_bounds__(WARPS * 32, BW_MIN_CTAS(D, WARPS, MW))
    attn_blockwise_kernel(const attn_launch a)
{
    /* The next kernel (PDL: a gemm_sm90 out-projection) may load its weights meanwhile. */
    stof_grid_launch_dependents();
    stof_grid_wait(); /* launched with PDL: the inputs are the previous kernel's outputs */
    const int WM = 16 * MW; /* query rows per warp */
    const int BM = WARPS * WM, THREADS = WARPS * 32;
    const int PITCH = D + BW_PAD, CH = D / 8;
    extern __shared__ __align__(16) uint16_t smem[];
    uint16_t *sq = smem;                        /* [BM][PITCH] */
    uint16_t *sk = sq + BM * PITCH;             /* [2][BLOCK_N][PITCH] */
    uint16_t *sv = sk + 2 * BW_BLOCK_N * PITCH; /* [2][BLOCK_N][PITCH] */

    const mask_tiles *t = &a.tiles;
    int h, b, x;
    attn_block_order(&a, &h, &b, &x);
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int subs = t->tile_m / BM;
    const int tr = x / subs;
    const int row0 = tr * t->tile_m + (x % subs) * BM;
    const attn_seq s = attn_seq_of(&a, b, h);
    if (row0 >= s.store_rows) return;
    const int64_t ri = attn_row_index(&a, b, h, tr);
    const int e0 = t->row_ptr[ri], e1 = t->row_ptr[ri + 1];
    if (e0 >= e1 || row0 >= s.len_q) {
        store_zero_rows<D, THREADS>(&s, &a, row0, BM);
        return;
    }

    /* Q block (rows past the sequence zero-filled) and the first listed tile. */
#pragma unroll
    for (int it = 0; it < BM * CH / THREADS; it++) {
        const int idx = threadIdx.x + it * THREADS;
        const int r = idx / CH, c = idx % CH;
        const bool ok = row0 + r < s.len_q;
        const int64_t row = ok ? row0 + r : 0;
        cp_async16(smem_addr(sq + r * PITCH + c * 8), s.q + row * a.q_sl + c * 8, ok ? 16 : 0);
    }
    attn_mod_ctx mc;
    if constexpr (MODS)
        mc = attn_mod_setup(&a, &s, b, h, (float *)(sv + 2 * BW_BLOCK_N * PITCH), THREADS,
                            ATTN_LOG2E);
    int col = t->col[e0], bits = t->bits[e0];
    const uint32_t sk_addr = smem_addr(sk), sv_addr = smem_addr(sv);
    const uint32_t stage_bytes = BW_BLOCK_N * PITCH * 2;
    load_kv_tile<D, THREADS>(sk_addr, sv_addr, &s, &a, col * BW_BLOCK_N);
    cp_async_commit();
    int col_next = e0 + 1 < e1 ? t->col[e0 + 1] : 0;

    cp_async_wait<0>();
    __syncthreads();
    uint32_t qf[MW][D / 16][4];
#pragma unroll
    for (int mi = 0; mi < MW; mi++)
#pragma unroll
        for (int ks = 0; ks < D / 16; ks++)
            ldsm_x4(qf[mi][ks], smem_addr(sq + (warp * WM + mi * 16 + (lane & 15)) * PITCH +
                                          ks * 16 + (lane >> 4) * 8));

    float o[MW][D / 8][4];
    float m[MW][2], l[MW][2];
#pragma unroll
    for (int mi = 0; mi < MW; mi++) {
#pragma unroll
        for (int d = 0; d < D / 8; d++)
            o[mi][d][0] = o[mi][d][1] = o[mi][d][2] = o[mi][d][3] = 0.0f;
        m[mi][0] = m[mi][1] = -INFINITY;
        l[mi][0] = l[mi][1] = 0.0f;
    }
    /* Row of this thread's accumulator row g of m-block 0 inside the mask tile (for the bitmap). */
    const int tile_row = (x % subs) * BM + warp * WM + (lane >> 2);
    const int shift = 2 * (lane & 3);

    for (int e = e0; e < e1; e++) {
        const int stage = (e - e0) & 1;
        const int key0 = col * BW_BLOCK_N;
        /* Visibility words of rows g and g+8 of each m-block, fetched before the
         * wait so the load overlaps it. */
        uint64_t w_lo[MW], w_hi[MW];
#pragma unroll
        for (int mi = 0; mi < MW; mi++) {
            w_lo[mi] = w_hi[mi] = ~0ull;
            if (bits >= 0) {
                const uint64_t *bm = t->bitmap + ((int64_t)bits * t->tile_m + tile_row + mi * 16) *
                                                     t->words_per_row;
                w_lo[mi] = bm[0];
                w_hi[mi] = bm[8 * t->words_per_row];
            }
        }
        const bool masked = bits >= 0 || key0 + BW_BLOCK_N > s.len_k;
        if (key0 + BW_BLOCK_N > s.len_k) {
            const uint64_t in_seq = attn_low_mask(s.len_k - key0);
#pragma unroll
            for (int mi = 0; mi < MW; mi++) {
                w_lo[mi] &= in_seq;
                w_hi[mi] &= in_seq;
            }
        }

        cp_async_wait<0>();
        __syncthreads(); /* this stage landed; every warp is done with the other one */
        int bits_next = 0, col_after = 0;
        if (e + 1 < e1) {
            load_kv_tile<D, THREADS>(sk_addr + (stage ^ 1) * stage_bytes,
                                     sv_addr + (stage ^ 1) * stage_bytes, &s, &a,
                                     col_next * BW_BLOCK_N);
            bits_next = t->bits[e + 1];
            if (e + 2 < e1) col_after = t->col[e + 2];
        }
        cp_async_commit();

        float sc[MW][BW_BLOCK_N / 8][4];
        scores_qk<D, MW, BF16>(sc, qf, sk_addr + stage * stage_bytes + k_lane_offset<D>(lane));
#pragma unroll
        for (int mi = 0; mi < MW; mi++) {
            if constexpr (MODS) {
                attn_apply_mods<BW_BLOCK_N / 8>(
                    sc[mi], mc, row0 + warp * WM + mi * 16 + (lane >> 2), key0 + 2 * (lane & 3));
            } else {
#pragma unroll
                for (int j = 0; j < BW_BLOCK_N / 8; j++)
#pragma unroll
                    for (int q = 0; q < 4; q++)
                        sc[mi][j][q] *= a.scale_log2;
            }
            if (masked) apply_tile_mask(sc[mi], w_lo[mi] >> shift, w_hi[mi] >> shift);
            softmax_online<D>(sc[mi], m[mi], l[mi], o[mi]);
        }
        accumulate_pv<D, MW, BF16>(o, sc, sv_addr + stage * stage_bytes + v_lane_offset<D>(lane));

        col = col_next;
        bits = bits_next;
        col_next = col_after;
    }
#pragma unroll
    for (int mi = 0; mi < MW; mi++)
        store_output<D, BF16>(o[mi], l[mi], sq + (warp * WM + mi * 16) * PITCH, &s, &a,
                              row0 + warp * WM + mi * 16, lane);
}

/* Every instantiation, each compiled once here: 4 and 8 warps of one m-block
 * for head dims 32/64/128, and 4 warps of two m-blocks (128-row CTAs with half
 * the shared-memory traffic per flop) for head dims 32/64, where the doubled
 * accumulators still fit the register file (2 such warps on 64-row tiles would
 * spill at head dim 64: the K/V loads of a 64-thread CTA need the registers);
 * 4 warps of one m-block for head dims 80, 96 and 256, and the modifier
 * variants at every head dim. */
typedef void (*bw_kernel_fn)(const attn_launch);
typedef struct bw_variant {
    int head_dim, warps, mw, bf16, mods;
    bw_kernel_fn fn;
} bw_variant;

#define BW_VARIANT_M(D, W, MW, M)                                                                  \
    {D, W, MW, 0, M, attn_blockwise_kernel<D, W, MW, 0, M>},                                       \
    {                                                                                              \
        D, W, MW, 1, M, attn_blockwise_kernel<D, W, MW, 1, M>                                      \
    }
#define BW_VARIANT(D, W, MW) BW_VARIANT_M(D, W, MW, 0)
static const bw_variant bw_variants[] = {
    BW_VARIANT(32, 4, 1),       BW_VARIANT(32, 8, 1),       BW_VARIANT(32, 4, 2),
    BW_VARIANT(64, 4, 1),       BW_VARIANT(64, 8, 1),       BW_VARIANT(64, 4, 2),
    BW_VARIANT(128, 4, 1),      BW_VARIANT(128, 8, 1),      BW_VARIANT(80, 4, 1),
    BW_VARIANT(96, 4, 1),       BW_VARIANT(256, 4, 1),      BW_VARIANT_M(32, 4, 1, 1),
    BW_VARIANT_M(64, 4, 1, 1),  BW_VARIANT_M(80, 4, 1, 1),  BW_VARIANT_M(96, 4, 1, 1),
    BW_VARIANT_M(128, 4, 1, 1), BW_VARIANT_M(256, 4, 1, 1),
};
#define BW_NVARIANTS ((int)(sizeof bw_variants / sizeof bw_variants[0]))

/* The opt-in covers the largest T5 table a modifier variant may carry. */
static int variant_smem(const bw_variant *v)
{
    const int64_t table = v->mods ? (int64_t)attn_t5_table_bytes(ATTN_T5_MAX_DISTANCE) : 0;
    return (int)(attn_bw_smem_bytes(v->head_dim, 16 * v->mw * v->warps, BW_BLOCK_N) + table);
}

/* The Hopper kernel's opt-in too, on devices of compute capability 9.0 in
 * builds that have it. */
static stof_status prepare_sm90(int dev)
{
#ifdef STOF_HAVE_ATTN_SM90
    int major = 0, minor = 0;
    STOF_CUDA_TRY(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
    STOF_CUDA_TRY(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev));
    if (major == 9 && minor == 0) STOF_TRY(attn_blockwise_sm90_prepare());
#else
    (void)dev;
#endif
    return STOF_OK;
}

extern "C" stof_status attn_blockwise_prepare(void)
{
    static unsigned long long done; /* bit per device ordinal */
    return attn_opt_in_once(&done, bw_variants, BW_NVARIANTS, variant_smem, prepare_sm90);
}

extern "C" int attn_blockwise_available(int head_dim, int tile_m, int tile_n, int warps,
                                        int block_m)
{
    for (int i = 0; i < ATTN_BW_NCONFIGS; i++)
        if (attn_bw_configs[i].warps == warps && attn_bw_configs[i].block_m == block_m &&
            attn_bw_config_fits(&attn_bw_configs[i], head_dim, tile_m, tile_n))
            return 1;
    return 0;
}

extern "C" const char *attn_blockwise_shapes(void)
{
    return "64x64, 128x64";
}

extern "C" stof_status attn_blockwise_run(const attn_launch *a, int warps, int block_m,
                                          void *stream)
{
    STOF_REQUIRE(attn_blockwise_available(a->head_dim, a->tiles.tile_m, a->tiles.tile_n, warps,
                                          block_m),
                 STOF_ERR_UNSUPPORTED,
                 "no block-wise kernel for head dim %d, %d warps, %d-row blocks and mask tiles "
                 "%dx%d (tile shapes served: %s)",
                 a->head_dim, warps, block_m, a->tiles.tile_m, a->tiles.tile_n,
                 attn_blockwise_shapes());
    const int mw = block_m / (16 * warps);
    const int mods = a->mods.bias_kind != STOF_BIAS_NONE || a->mods.softcap > 0.0f;
    const bw_variant *v = NULL;
    for (int i = 0; i < BW_NVARIANTS && !v; i++)
        if (bw_variants[i].head_dim == a->head_dim && bw_variants[i].warps == warps &&
            bw_variants[i].mw == mw && bw_variants[i].bf16 == a->bf16 &&
            bw_variants[i].mods == mods)
            v = &bw_variants[i];
    STOF_REQUIRE(v, STOF_ERR_INTERNAL,
                 "block-wise dispatch: no variant for head dim %d, %d warps, %d-row blocks",
                 a->head_dim, warps, block_m);
    STOF_TRY(attn_blockwise_prepare());
    const size_t smem = (size_t)attn_bw_smem_bytes(a->head_dim, block_m, BW_BLOCK_N) +
                        attn_mods_smem_bytes(&a->mods);
    return attn_block_launch(a, (const void *)v->fn, block_m, 32 * warps, smem,
                             (cudaStream_t)stream);
}
