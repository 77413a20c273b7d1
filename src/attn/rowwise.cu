/*
 * rowwise.cu — the row-wise sparse attention kernel (STOF's row-wise MHA):
 * one warp per query row, no synchronisation between warps. The selector
 * (select.h, rule 1) gives it sequences of a handful of queries and tile
 * shapes the block-wise kernels do not serve; on sparse long rows the
 * tensor-core tiles measured faster, even at one visible key per row.
 *
 * The warp walks the tiles listed for its tile row, turns each into 64-bit
 * visibility words (all ones for a full tile, the bitmap row for a partial
 * one, clipped at the sequence end) and hands the set bits to its lanes, 32
 * visible keys per batch. Each lane scores its key
 * (fp32 dot product against the query staged in shared memory), warp shuffles
 * give the batch maximum, and the P.V accumulation broadcasts each p_j while
 * lanes own D/32 consecutive output dims (coalesced V reads and stores).
 *
 * The one non-obvious choice: visible keys are packed into full batches of 32
 * across tile and word boundaries (a warp-wide queue), so a diagonal tile
 * with a handful of visible keys per row does not idle most of the warp, and
 * the online-softmax rescale happens once per 32 keys.
 */
#include "attn/attn.h"
#include "attn/bits.h"
#include "attn/grid.cuh"
#include "attn/select.h"
#include "core/launch.cuh"
#include "core/ptx.cuh"

#include <cuda_runtime.h>

/* PER consecutive 16-bit values -> float. */
template <int PER, int BF16>
static __device__ __forceinline__ void load_slice(const uint16_t *p, float out[PER])
{
    if (PER == 4) {
        const uint2 u = *(const uint2 *)p;
        out[0] = half_to_float<BF16>((uint16_t)(u.x & 0xffffu));
        out[1] = half_to_float<BF16>((uint16_t)(u.x >> 16));
        out[2] = half_to_float<BF16>((uint16_t)(u.y & 0xffffu));
        out[3] = half_to_float<BF16>((uint16_t)(u.y >> 16));
    } else if (PER == 2) {
        const uint32_t u = *(const uint32_t *)p;
        out[0] = half_to_float<BF16>((uint16_t)(u & 0xffffu));
        out[1] = half_to_float<BF16>((uint16_t)(u >> 16));
    } else {
        out[0] = half_to_float<BF16>(*p);
    }
}

template <int PER, int BF16>
static __device__ __forceinline__ void store_slice(uint16_t *p, const float v[PER])
{
    if (PER == 4) {
        uint2 u;
        u.x = pack2<BF16>(v[0], v[1]);
        u.y = pack2<BF16>(v[2], v[3]);
        *(uint2 *)p = u;
    } else if (PER == 2) {
        *(uint32_t *)p = pack2<BF16>(v[0], v[1]);
    } else {
        *p = float_to_half<BF16>(v[0]);
    }
}

/* q (pre-scaled, in shared memory) . k row, fp32. */
template <int D, int BF16>
static __device__ __forceinline__ float dot_q_k(const float *sq, const uint16_t *krow)
{
    float acc = 0.0f;
#pragma unroll
    for (int c = 0; c < D / 8; c++) {
        const uint4 u = *(const uint4 *)(krow + c * 8);
        const float4 qa = *(const float4 *)(sq + c * 8);
        const float4 qb = *(const float4 *)(sq + c * 8 + 4);
        acc += qa.x * half_to_float<BF16>((uint16_t)(u.x & 0xffffu));
        acc += qa.y * half_to_float<BF16>((uint16_t)(u.x >> 16));
        acc += qa.z * half_to_float<BF16>((uint16_t)(u.y & 0xffffu));
        acc += qa.w * half_to_float<BF16>((uint16_t)(u.y >> 16));
        acc += qb.x * half_to_float<BF16>((uint16_t)(u.z & 0xffffu));
        acc += qb.y * half_to_float<BF16>((uint16_t)(u.z >> 16));
        acc += qb.z * half_to_float<BF16>((uint16_t)(u.w & 0xffffu));
        acc += qb.w * half_to_float<BF16>((uint16_t)(u.w >> 16));
    }
    return acc;
}

/* Running state of one query row: max and (per-lane partial) sum in log2
 * units, and the lane's D/32 output dims. */
typedef struct row_state {
    float m, l;
    float acc[4];
} row_state;

/* One batch of nb <= 32 visible keys; lane j < nb holds key j. */
template <int D, int BF16>
static __device__ __forceinline__ void rowwise_batch(row_state *st, const float *sq,
                                                     const attn_seq *s, const attn_launch *a,
                                                     int key, int nb, int lane)
{
    const int PER = D / 32;
    float x = -INFINITY;
    if (lane < nb) x = dot_q_k<D, BF16>(sq, s->k + (int64_t)key * a->k_sl);
    const float m_new = fmaxf(st->m, warp_max(x));
    const float base = m_new == -INFINITY ? 0.0f : m_new;
    const float alpha = exp2_approx(st->m - base);
    const float p = lane < nb ? exp2_approx(x - base) : 0.0f;
    st->m = m_new;
    st->l = st->l * alpha + p;
#pragma unroll
    for (int d = 0; d < PER; d++)
        st->acc[d] *= alpha;
    const uint16_t *vcol = s->v + lane * PER;
#pragma unroll 4
    for (int j = 0; j < nb; j++) {
        const float pj = __shfl_sync(PTX_FULL_WARP, p, j);
        const int kj = __shfl_sync(PTX_FULL_WARP, key, j);
        float v[PER];
        load_slice<PER, BF16>(vcol + (int64_t)kj * a->v_sl, v);
#pragma unroll
        for (int d = 0; d < PER; d++)
            st->acc[d] += pj * v[d];
    }
}

/* Five CTAs (20 warps) per SM: up to 96 registers, which the 16-byte K loads
 * in flight need without spilling at head dim 128. */
template <int D, int BF16>
__global__ void __launch_bounds__(ATTN_ROWWISE_WARPS * 32, 5)
    attn_rowwise_kernel(const attn_launch a)
{
    /* The next kernel (PDL: a gemm_sm90 out-projection) may load its weights meanwhile. */
    stof_grid_launch_dependents();
    stof_grid_wait(); /* launched with PDL: the inputs are the previous kernel's outputs */
    const int PER = D / 32;
    __shared__ __align__(16) float sq_all[ATTN_ROWWISE_WARPS][D];
    const mask_tiles *t = &a.tiles;
    const int b = blockIdx.z, h = blockIdx.y;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int i = blockIdx.x * ATTN_ROWWISE_WARPS + warp;
    const attn_seq s = attn_seq_of(&a, b, h);
    if (i >= s.store_rows || i >= a.lq) return;
    uint16_t *orow = s.o + (int64_t)i * a.o_sl + lane * PER;
    row_state st;
    st.m = -INFINITY;
    st.l = 0.0f;
    for (int d = 0; d < 4; d++)
        st.acc[d] = 0.0f;

    if (i < s.len_q) {
        const int tr = i / t->tile_m, r_in = i % t->tile_m;
        const int64_t ri = attn_row_index(&a, b, h, tr);
        const int e0 = t->row_ptr[ri], e1 = t->row_ptr[ri + 1];
        float *sq = sq_all[warp];
        const uint16_t *qrow = s.q + (int64_t)i * a.q_sl;
        for (int d = lane; d < D; d += 32)
            sq[d] = half_to_float<BF16>(qrow[d]) * a.scale_log2;
        __syncwarp();

        const int wpr = t->words_per_row;
        int npend = 0, key = 0;
        for (int eb = e0; eb < e1; eb += 32) {
            /* Lanes fetch 32 entries (column, kind, bitmap words) at once. */
            const int n = min(32, e1 - eb);
            int my_col = 0, my_bits = -1;
            uint64_t my_w0 = 0, my_w1 = 0;
            if (lane < n) {
                my_col = t->col[eb + lane];
                my_bits = t->bits[eb + lane];
                if (my_bits >= 0) {
                    const uint64_t *bm = t->bitmap + ((int64_t)my_bits * t->tile_m + r_in) * wpr;
                    my_w0 = bm[0];
                    if (wpr > 1) my_w1 = bm[1];
                }
            }
            for (int u = 0; u < n; u++) {
                const int col = __shfl_sync(PTX_FULL_WARP, my_col, u);
                const int bits = __shfl_sync(PTX_FULL_WARP, my_bits, u);
                const uint64_t w0 = __shfl_sync(PTX_FULL_WARP, my_w0, u);
                const uint64_t w1 = __shfl_sync(PTX_FULL_WARP, my_w1, u);
                for (int wi = 0; wi < wpr; wi++) {
                    const int base = col * t->tile_n + 64 * wi;
                    uint64_t w = bits < 0 ? attn_low_mask(t->tile_n - 64 * wi) : (wi ? w1 : w0);
                    w &= attn_low_mask(s.len_k - base);
                    while (w) {
                        const int take = min(attn_popc64(w), 32 - npend);
                        if (lane >= npend && lane < npend + take)
                            key = base + attn_nth_set_bit(w, lane - npend);
                        npend += take;
                        w = attn_drop_low_bits(w, take);
                        if (npend == 32) {
                            rowwise_batch<D, BF16>(&st, sq, &s, &a, key, 32, lane);
                            npend = 0;
                        }
                    }
                }
            }
        }
        if (npend > 0) rowwise_batch<D, BF16>(&st, sq, &s, &a, key, npend, lane);
    }
    const float sum = warp_sum(st.l);
    const float inv = sum > 0.0f ? 1.0f / sum : 0.0f;
    float outv[PER];
#pragma unroll
    for (int d = 0; d < PER; d++)
        outv[d] = st.acc[d] * inv;
    store_slice<PER, BF16>(orow, outv);
}

template <int D, int BF16>
static stof_status launch_rowwise(const attn_launch *a, cudaStream_t stream)
{
    const dim3 grid((unsigned)((a->lq + ATTN_ROWWISE_WARPS - 1) / ATTN_ROWWISE_WARPS),
                    (unsigned)a->heads, (unsigned)a->batch);
    void *args[1] = {(void *)a};
    STOF_CUDA_TRY(stof_launch_pdl(a->pdl != 0, (const void *)attn_rowwise_kernel<D, BF16>, grid,
                                  dim3(ATTN_ROWWISE_WARPS * 32), args, 0, stream));
    return STOF_CUDA(cudaGetLastError());
}

extern "C" int attn_rowwise_available(int head_dim, int tile_n)
{
    return attn_head_dim_supported(head_dim) && tile_n >= 1 && tile_n <= 128;
}

extern "C" stof_status attn_rowwise_run(const attn_launch *a, void *stream)
{
    STOF_REQUIRE(attn_rowwise_available(a->head_dim, a->tiles.tile_n), STOF_ERR_UNSUPPORTED,
                 "no row-wise kernel for head dim %d and tile_n %d (head dims 32, 64, 128; "
                 "tile_n <= 128)",
                 a->head_dim, a->tiles.tile_n);
    cudaStream_t st = (cudaStream_t)stream;
    switch (a->head_dim * 10 + a->bf16) {
    case 320: return launch_rowwise<32, 0>(a, st);
    case 321: return launch_rowwise<32, 1>(a, st);
    case 640: return launch_rowwise<64, 0>(a, st);
    case 641: return launch_rowwise<64, 1>(a, st);
    case 1280: return launch_rowwise<128, 0>(a, st);
    case 1281: return launch_rowwise<128, 1>(a, st);
    }
    return stof_error(STOF_ERR_INTERNAL, "row-wise dispatch: no case for head dim %d", a->head_dim);
}
