/*
 * gemm_sm90.cu — template (d): y = act(x w^T + b) on Hopper (sm_90a), the
 * operation and epilogue of gemm_bias_act.cu with the main loop on TMA and
 * warpgroup MMA (wgmma), for the big linear + act segments (QKV, FFN1 with
 * exact GELU), where the cp.async + mma.sync template falls well short of the
 * tensor cores.
 *
 * Warp specialisation, as in CUTLASS's and FlashAttention-3's Hopper kernels:
 * warpgroups 0..WG-1 are consumers, each owning 64 rows of the block_m x
 * block_n tile and issuing wgmma m64n{block_n}k16 with both operands read
 * from shared memory; after them comes the producer, one thread of which
 * streams 64-deep K slices of x and w into a ring of STAGES shared-memory
 * stages with TMA.
 * Two mbarriers per stage hand it over: "full" (the producer announces the
 * stage's bytes, TMA completes them) and "empty" (one arrival per consumer
 * warp once the wgmma that read the stage has retired). Consumers keep one
 * wgmma group in flight, so a stage is released one slice late.
 *
 * Layout: a TMA box of 64 K elements (128 bytes) by rows with the 128-byte
 * swizzle writes the canonical K-major layout wgmma descriptors read: 8-row x
 * 128-byte atoms 1024 bytes apart (the stride byte offset), 16-byte chunk c of
 * row r at chunk c ^ (r % 8), every tile base 1024-byte aligned; a k16 step
 * adds 32 bytes to the start address. TMA zero-fills rows and K columns past
 * the tensor, so ragged m, n and k need nothing in the main loop; the
 * epilogue masks its stores.
 *
 * The kernel is persistent: as many CTAs as fit walk the tiles in groups of
 * SM90_GROUP_M row blocks per column sweep (the rows and weights in use stay
 * in L2), and the producer loads the next tile while the consumers run the
 * epilogue: bias and activation in fp32 on the accumulator fragments, stored
 * as 16-bit pairs. That epilogue is not free (exact GELU is some 25
 * instructions per element, a few microseconds per 128x256 tile against about
 * ten of MMA) and the tensor cores idle through it unless another CTA shares
 * the SM. Hence two shapes: the 128x256 tile reuses each load most, one CTA
 * per SM with a producer warpgroup whose registers setmaxnreg hands to the
 * consumers; the 128x128 tile with 3 stages is sized for two CTAs per SM, so
 * one's epilogue overlaps the other's main loop, with a single producer warp
 * so that both fit in the register file.
 *
 * A third schedule keeps one CTA per SM and overlaps within it (ping-pong,
 * as CUTLASS's Hopper pingpong GEMM): two consumer warpgroups each own whole
 * tiles (64x256, or 128x128 as two m64 blocks), the CTA's tiles taken in
 * turns, and the producer fills one ring for both in turn order. A named
 * barrier per warpgroup orders the main loops, so one warpgroup's epilogue
 * runs while the other's MMAs do (the GLU epilogue with erff took 36% of a
 * 128x256 tile's time at K = 768). It loads 2.5 (64x256) or 2 (128x128)
 * bytes per output and K step against the 128x256 tile's 1.5; which wins is
 * bench_fuse --glu's to say (config.c's GLU rule).
 *
 * A last shape serves a few hundred rows (the encoder's small batches): a
 * 64x64 tile, one consumer warpgroup and 12 stages, so that a K of 768 is
 * one pass of loads and a BERT-base GEMM of 128 rows is one wave of 72-96
 * CTAs. The kernel is launched with PDL; when the caller vouches that w was
 * complete before the previous kernel started (fuse_linear_args.w_ready:
 * model weights), the producer requests w for every stage of its first work
 * item before it waits for the previous grid, and x after. Kernels in front
 * of it that call stof_grid_launch_dependents early (the embeddings, the
 * LayerNorm, attention, this kernel before its epilogue) thus hide the weight reads
 * behind their own run. With fp32 partial sums as output (parts), the work
 * items are (tile, K slice) pairs, each slice a multiple of 64 deep: the
 * residual + LayerNorm segments' GEMM, whose slices the LayerNorm kernel adds
 * up with bias and residual.
 *
 * Measured and left out (bench/results/encoder-ln-in-gemm-*.txt): that
 * LayerNorm inside this kernel, where the K-split grid is one wave, behind a
 * grid barrier of self-resetting device words. BERT-base (1, 128) took 35-40
 * us longer than with the LayerNorm kernel launched after it with PDL: the
 * barrier (fence, atomics, a spin through L2) and the rows normalised after
 * it cost more than the kernel boundary, also when only the CTAs with rows to
 * normalise waited and the rest exited, leaving their SMs to the next GEMM's
 * early weight fetch.
 *
 * Also measured and left out (bench/results/fuse-left-out-2026-11-26-h100.txt),
 * when this kernel ran ModernBERT's FFN1 ([23923 x 768] x [768 x 2304]) at
 * 0.77 of cuBLAS's rate with erff in its GLU epilogue (vec.cuh says why that
 * epilogue held it back): the ping-pong tiles in 2-CTA clusters with the w
 * tile multicast, 3-9% slower than unclustered (Nsight Compute had found the
 * L2 32% busy: operand traffic is not what this kernel lacks).
 *
 * The epilogue writes 16-byte pieces of its rows (store_piece): with 4-byte
 * stores a plain [23923 x 768] x [768 x 2304] GEMM took 0.2045 ms against
 * cuBLASLt's 0.1189 (0.58 of its rate), with the pieces 0.1415 against 0.1192
 * (0.84); the GLU epilogue, half as wide, went from 0.85 of cuBLASLt to 0.87
 * (bench/results/fuse-pieces-2026-11-26-h100.txt; each figure against the
 * cuBLASLt GEMM timed in its own run).
 * Only then did RoPE in the QKV epilogue pay: 0.1409 ms against 0.1731 for
 * cuBLASLt and the separate pass (0.2031 before the pieces, and slower still
 * with a sincosf per pair before the (cos, sin) table).
 * What the epilogue still costs there (bench/results/fuse-epilogue-share-
 * 2026-11-26-h100.txt, the epilogue skipped in a device-only build): the
 * 128x256 tile's main loop alone runs 1.08-1.13x cuBLASLt at 16384-23923
 * rows, its RoPE or GeGLU epilogue 21% of the time, the tensor cores idle.
 * Measured and left out there: the output through a 16 KB staging tile per
 * warpgroup and a TMA store, so that the warpgroup goes on while the copy
 * engine writes: 2-10% slower (ModernBERT's QKV + RoPE 0.1392 -> 0.1492 ms).
 * The stores from registers are not what the epilogue waits on; its
 * arithmetic and the staging's two barriers per 128 columns stayed. Nor
 * the shuffles' latency: packing four pieces first and running each
 * exchange round over all four gained nothing on the 128x256 tile, and
 * put the 128x128 ping-pong's accumulators on the stack.
 *
 * Two more epilogues: a residual added after the bias (act none; the
 * pre-norm layers' x = x + a w^T + b, residual and y the same buffer, each
 * element read by the thread that writes it), and a GLU (fuse.h's
 * FUSE_GLU_BLOCK layout of w: 8-column steps 2q and 2q + 1 are the two
 * halves of the same units) storing act(a) * b, half as wide as the GEMM.
 * And RoPE (fuse_rope_epi, act none): the q and k heads of the QKV
 * projection turned by their row's position on the fp32 accumulators
 * (rope_epi.cuh), where a thread holds both columns of each pair when the
 * tile holds whole heads, instead of a second pass over q and k in memory.
 *
 * The tensor maps are encoded on the host for each call (cuTensorMapEncodeTiled
 * through the runtime's driver entry point: no libcuda link) and passed as
 * __grid_constant__ parameters, so they depend only on the call's pointers and
 * shapes and a launch captured in a CUDA graph keeps its own copy.
 */
#include "core/hopper.cuh"
#include "core/launch.cuh"
#include "fuse/internal.h"
#include "fuse/rope_epi.cuh"
#include "fuse/tile.cuh"
#include "fuse/vec.cuh"

#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime.h>

#define SM90_GROUP_M 8 /* row blocks per column sweep of the tile order */

/* Compile-time constants of one configuration: a BM x BN tile, STAGES
 * pipeline stages. Cooperative (WN 1): WM consumer warpgroups share each
 * tile, 64 rows each (BM = 64 WM). Ping-pong (WM 1, WN 2): two consumer
 * warpgroups each own whole tiles in turns, MW = BM / 64 blocks of 64 rows. */
template <int BM_, int BN, int WM, int WN, int STAGES> struct sm90_traits {
    static constexpr int BM = BM_;
    static constexpr int WG = WM * WN; /* consumer warpgroups */
    static constexpr bool PINGPONG = WN == 2;
    static constexpr int MW = BM / (64 * WM);     /* 64-row blocks per warpgroup and tile */
    static constexpr uint32_t A_BYTES = BM * 128; /* a stage of x: BM rows of 64 elements */
    static constexpr uint32_t B_BYTES = BN * 128; /* a stage of w: BN rows */
    static constexpr uint32_t STAGE_BYTES = A_BYTES + B_BYTES;
    static constexpr size_t SMEM = FUSE_SM90_SMEM_BYTES(BM, BN, STAGES);
    static constexpr int CTAS_PER_SM = FUSE_SM90_CTAS_PER_SM(SMEM);
    /* The producer after the consumers: a whole warpgroup that hands its
     * registers to the consumers (setmaxnreg) where one CTA holds the SM, a
     * single warp where two share it (two CTAs of 384 threads start at 80
     * registers a thread, too few for ptxas to fit the wgmma accumulators;
     * with 288 threads each may have 112). */
    static constexpr bool PRODUCER_WG = CTAS_PER_SM == 1;
    static constexpr int THREADS = 128 * WG + (PRODUCER_WG ? 128 : 32);
    /* Registers each thread starts with (what __launch_bounds__ allows) and
     * the split setmaxnreg makes of them. */
    static constexpr int REGS_FIT = 65536 / (THREADS * CTAS_PER_SM);
    static constexpr int REGS = (REGS_FIT > 255 ? 255 : REGS_FIT) / 8 * 8;
    static constexpr int PRODUCER_REGS = 40;
    static constexpr int CONSUMER_REGS_FIT =
        (REGS * THREADS - PRODUCER_REGS * 128) / (128 * WG) / 8 * 8;
    static constexpr int CONSUMER_REGS = CONSUMER_REGS_FIT > 256 ? 256 : CONSUMER_REGS_FIT;
    static_assert(BN == 64 || BN == 128 || BN == 256, "wgmma shapes m64n{64,128,256}k16");
    static_assert(WG >= 1 && WG <= 2, "one or two consumer warpgroups");
    static_assert(WN == 1 ? BM == 64 * WM : WM == 1 && WN == 2 && (BM == 64 || BM == 128),
                  "64 rows per cooperative warpgroup, or ping-pong tiles of 64 or 128 rows");
    static_assert(MW * BN / 2 <= 128, "a warpgroup's accumulators: 128 floats a thread");
    static_assert(STAGES >= 2, "a pipeline needs two stages");
    static_assert(!PRODUCER_WG || CONSUMER_REGS > REGS, "setmaxnreg moves registers to consumers");
};

/* ---------------------------------------------------------------- PTX */

#define SM90_REGS_0_63                                                                             \
    "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, "   \
    "%20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, "   \
    "%38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, "   \
    "%56, %57, %58, %59, %60, %61, %62, %63"
#define SM90_REGS_0_31                                                                             \
    "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, "   \
    "%20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
#define SM90_REGS_64_127                                                                           \
    "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, "   \
    "%82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, %96, %97, %98, %99, "   \
    "%100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, %112, %113, %114, "   \
    "%115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127"
#define SM90_OUT32(d, i)                                                                           \
    SM90_OUT8(d, i), SM90_OUT8(d, i + 8), SM90_OUT8(d, i + 16), SM90_OUT8(d, i + 24)
#define SM90_OUT64(d) SM90_OUT32(d, 0), SM90_OUT32(d, 32)
#define SM90_OUT128(d) SM90_OUT64(d), SM90_OUT32(d, 64), SM90_OUT32(d, 96)

/* d (+)= A B^T for one k16 step: A 64 x 16 and B N x 16, both K-major in
 * shared memory (descriptors); accumulate = 0 overwrites d. */
#define SM90_WGMMA_N64(T)                                                                          \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"                                      \
                 "wgmma.mma_async.sync.aligned.m64n64k16.f32." T "." T " {" SM90_REGS_0_31         \
                 "}, %32, %33, p, 1, 1, 0, 0;\n}\n"                                                \
                 : SM90_OUT32(d, 0)                                                                \
                 : "l"(da), "l"(db), "r"(accumulate))
#define SM90_WGMMA_N128(T)                                                                         \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"                                      \
                 "wgmma.mma_async.sync.aligned.m64n128k16.f32." T "." T " {" SM90_REGS_0_63        \
                 "}, %64, %65, p, 1, 1, 0, 0;\n}\n"                                                \
                 : SM90_OUT64(d)                                                                   \
                 : "l"(da), "l"(db), "r"(accumulate))
#define SM90_WGMMA_N256(T)                                                                         \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"                                     \
                 "wgmma.mma_async.sync.aligned.m64n256k16.f32." T "." T " {" SM90_REGS_0_63        \
                 ", " SM90_REGS_64_127 "}, %128, %129, p, 1, 1, 0, 0;\n}\n"                        \
                 : SM90_OUT128(d)                                                                  \
                 : "l"(da), "l"(db), "r"(accumulate))

template <typename T> struct sm90_is_bf16 {
    static constexpr bool value = false;
};
template <> struct sm90_is_bf16<__nv_bfloat16> {
    static constexpr bool value = true;
};

template <typename T, int BN>
static __device__ __forceinline__ void wgmma_ss(float (&d)[BN / 2], uint64_t da, uint64_t db,
                                                int accumulate)
{
    constexpr bool bf16 = sm90_is_bf16<T>::value;
    if constexpr (BN == 64) {
        if constexpr (bf16)
            SM90_WGMMA_N64("bf16");
        else
            SM90_WGMMA_N64("f16");
    } else if constexpr (BN == 128) {
        if constexpr (bf16)
            SM90_WGMMA_N128("bf16");
        else
            SM90_WGMMA_N128("f16");
    } else {
        if constexpr (bf16)
            SM90_WGMMA_N256("bf16");
        else
            SM90_WGMMA_N256("f16");
    }
}

/* ---------------------------------------------------------------- tiles */

/* Tile index -> (row block, column block): groups of SM90_GROUP_M row blocks,
 * each group swept column by column, rows fastest inside a column. */
static __device__ __forceinline__ void tile_coords(int tile, int tiles_m, int tiles_n, int &tm,
                                                   int &tn)
{
    const int per_group = SM90_GROUP_M * tiles_n;
    const int group = tile / per_group;
    const int first = group * SM90_GROUP_M;
    const int rows = min(tiles_m - first, SM90_GROUP_M);
    const int r = tile - group * per_group;
    tm = first + r % rows;
    tn = r / rows;
}

/* The first row of 64-row block i of warpgroup wg in row tile tm: a
 * ping-pong warpgroup owns the whole tile, a cooperative one its 64 rows. */
template <typename G> static __device__ __forceinline__ int64_t block_row0(int tm, int i, int wg)
{
    return (int64_t)tm * G::BM + (G::PINGPONG ? 64 * i : wg * 64);
}

/* Row g of the thread's fragment rows (g and g + 8; tile_fragments) in the
 * warpgroup's 64 rows from row0. */
static __device__ __forceinline__ int64_t fragment_row(int64_t row0)
{
    return row0 + ((threadIdx.x >> 5) & 3) * 16 + ((threadIdx.x & 31) >> 2);
}

/* The output fragments of the warpgroup's 64 rows from row0 and BN columns
 * from col0 that lie inside [m, n]: put(col, lo, hi, lo_ok, hi_ok, j) for
 * each 8-column step j, lo and hi the element offsets of (row, col) in a
 * row-major [m, n] output for the thread's two rows. Accumulator layout of
 * wgmma m64nN (per warp, as mma.sync C blocks): warp w owns rows
 * 16w..16w+15; d[4j], d[4j+1] are row g, columns 8j + 2t, +1 and d[4j+2],
 * d[4j+3] the same columns of row g + 8. */
template <int BN, typename Put>
static __device__ __forceinline__ void tile_fragments(int64_t row0, int col0, int64_t m, int n,
                                                      Put put)
{
    const int lane = threadIdx.x & 31;
    const int64_t r_lo = fragment_row(row0);
    const bool lo_ok = r_lo < m, hi_ok = r_lo + 8 < m;
    const int c0 = col0 + 2 * (lane & 3);
    const int64_t lo = r_lo * n + c0, hi = lo + 8 * (int64_t)n;
#pragma unroll
    for (int j = 0; j < BN / 8; j++) {
        const int col = c0 + 8 * j;
        if (col >= n) continue; /* n is even, so col + 1 < n too */
        put(col, lo + 8 * j, hi + 8 * j, lo_ok, hi_ok, j);
    }
}

/*
 * Output rows in 16-byte pieces. In the accumulator layout a lane holds one
 * pair of columns (2t, 2t + 1) of each 8-column step of its rows, so that a
 * plain store writes 4 bytes a lane: a warp's store then touches 8 rows with
 * 16 bytes each, and the epilogue of a 64 x 256 tile takes 64 of them a
 * thread. Four steps s of a row, one packed pair a lane (w[s]: step s,
 * columns 2t, 2t + 1), transposed across the lane's quad (two exchanges of
 * two words, on lane bits 1 and 0) become lane t's eight contiguous
 * columns of step t: a quarter of the stores, each writing whole 32-byte
 * sectors. The same transpose takes a row's 16-byte pieces back to the
 * accumulator layout (a residual read before the store).
 */
static __device__ __forceinline__ void quad_exchange(uint32_t &lo0, uint32_t &lo1, uint32_t &hi0,
                                                     uint32_t &hi1, int bit)
{
    const bool up = threadIdx.x & bit; /* sends and takes lo, its partner hi */
    const uint32_t a = __shfl_xor_sync(PTX_FULL_WARP, up ? lo0 : hi0, bit);
    const uint32_t b = __shfl_xor_sync(PTX_FULL_WARP, up ? lo1 : hi1, bit);
    if (up) {
        lo0 = a;
        lo1 = b;
    } else {
        hi0 = a;
        hi1 = b;
    }
}

static __device__ __forceinline__ void quad_transpose(uint32_t (&w)[4])
{
    quad_exchange(w[0], w[1], w[2], w[3], 2);
    quad_exchange(w[0], w[2], w[1], w[3], 1);
}

/* Whether a [m, n] output takes the 16-byte pieces: rows a multiple of 16
 * bytes apart from a 16-byte aligned base (else the 4-byte stores). */
template <typename T> static __device__ __forceinline__ bool rows16_ok(const T *y, int n)
{
    return n % 8 == 0 && ((uintptr_t)y & 15u) == 0;
}

/* One row's piece of four 8-column steps: v[s], the thread's pair of step
 * s (columns 2t, 2t + 1 of it), plus the residual's where RES, to lane t's
 * 16 bytes at y + at (step t's eight columns), written where ok. Every lane
 * of the warp takes part (the exchanges), ok or not. */
template <typename T, bool RES>
static __device__ __forceinline__ void store_piece(T *y, const T *residual, int64_t at, bool ok,
                                                   const float2 (&v)[4])
{
    constexpr int BF16 = ptx_bf16<T>;
    uint32_t w[4];
    if constexpr (RES) {
        uint4 q = make_uint4(0u, 0u, 0u, 0u);
        if (ok) q = *reinterpret_cast<const uint4 *>(residual + at);
        uint32_t r[4] = {q.x, q.y, q.z, q.w};
        quad_transpose(r);
#pragma unroll
        for (int s = 0; s < 4; s++) {
            const float2 f = unpack2<BF16>(r[s]);
            w[s] = pack2<BF16>(v[s].x + f.x, v[s].y + f.y);
        }
    } else {
#pragma unroll
        for (int s = 0; s < 4; s++)
            w[s] = pack2<BF16>(v[s].x, v[s].y);
    }
    quad_transpose(w);
    if (ok) *reinterpret_cast<uint4 *>(y + at) = make_uint4(w[0], w[1], w[2], w[3]);
}

/* y = act(acc + bias) (+ residual where RES) for the warpgroup's tile
 * fragments: in 16-byte pieces (store_piece) where PIECES and the rows
 * allow, else by pairs (tile_fragments). PIECES: the configuration has the
 * registers (one CTA an SM; in the two-CTA one, 96 a thread, the pieces
 * spilled 330 bytes). residual may be y: each element is read by the thread
 * that then writes it. */
template <typename T, int BN, int ACT, bool RES, bool PIECES>
static __device__ __forceinline__ void store_tile(const float (&acc)[BN / 2], const T *bias,
                                                  const T *residual, T *y, int64_t row0, int col0,
                                                  int64_t m, int n)
{
    if (PIECES && rows16_ok(y, n) && (!RES || rows16_ok(residual, n))) {
        const int t = threadIdx.x & 3;
        const int64_t r_lo = fragment_row(row0);
#pragma unroll
        for (int j0 = 0; j0 < BN / 8; j0 += 4) {
            float2 b[4];
#pragma unroll
            for (int s = 0; s < 4; s++) {
                const int col = col0 + 8 * (j0 + s) + 2 * t;
                b[s] = bias && col < n ? load2(bias + col) : make_float2(0.f, 0.f);
            }
            const int col = col0 + 8 * (j0 + t); /* lane t's piece; n % 8 == 0 */
#pragma unroll
            for (int r = 0; r < 2; r++) {
                float2 v[4];
#pragma unroll
                for (int s = 0; s < 4; s++) {
                    const int e = 4 * (j0 + s) + 2 * r;
                    v[s] = make_float2(act_apply(acc[e] + b[s].x, ACT),
                                       act_apply(acc[e + 1] + b[s].y, ACT));
                }
                const int64_t row = r_lo + 8 * r;
                store_piece<T, RES>(y, residual, row * n + col, row < m && col < n, v);
            }
        }
        return;
    }
    tile_fragments<BN>(row0, col0, m, n,
                       [&](int col, int64_t lo, int64_t hi, bool lo_ok, bool hi_ok, int j) {
                           const float2 b = bias ? load2(bias + col) : make_float2(0.f, 0.f);
                           if (lo_ok) {
                               const float2 r = RES ? load2(residual + lo) : make_float2(0.f, 0.f);
                               store2(y + lo, act_apply(acc[4 * j] + b.x, ACT) + r.x,
                                      act_apply(acc[4 * j + 1] + b.y, ACT) + r.y);
                           }
                           if (hi_ok) {
                               const float2 r = RES ? load2(residual + hi) : make_float2(0.f, 0.f);
                               store2(y + hi, act_apply(acc[4 * j + 2] + b.x, ACT) + r.x,
                                      act_apply(acc[4 * j + 3] + b.y, ACT) + r.y);
                           }
                       });
}

/* y [m, n / 2] = act(a + bias) * (b + bias) for the warpgroup's tile
 * fragments, w's rows in the GLU layout of fuse.h (FUSE_GLU_BLOCK 8): the
 * 8-column steps 2q and 2q + 1 are a's and b's of the same 8 units, so each
 * thread's pairs d[8q], d[8q+1] (a) and d[8q+4], d[8q+5] (b) make two
 * adjacent outputs of its row, and likewise d[8q+2..] for the row 8 below:
 * step q of an output half as wide, in 16-byte pieces where PIECES and its
 * rows allow (store_piece, store_tile), else by pairs. */
template <typename T, int BN, int ACT, bool PIECES>
static __device__ __forceinline__ void store_tile_glu(const float (&acc)[BN / 2], const T *bias,
                                                      T *y, int64_t row0, int col0, int64_t m,
                                                      int n)
{
    static_assert(FUSE_GLU_BLOCK == 8, "a GLU block is one 8-column step");
    const int lane = threadIdx.x & 31;
    const int64_t r_lo = fragment_row(row0);
    const int half = n / 2, t = lane & 3, t2 = 2 * t;
    if (PIECES && BN % 64 == 0 && rows16_ok(y, half)) {
#pragma unroll
        for (int q0 = 0; q0 < BN / 16; q0 += 4) {
            float2 ba[4], bb[4];
#pragma unroll
            for (int s = 0; s < 4; s++) {
                const int col = col0 + 16 * (q0 + s) + t2; /* a's column; b's is 8 on */
                const bool in = bias && col < n;           /* n % 16 == 0: b's is inside too */
                ba[s] = in ? load2(bias + col) : make_float2(0.f, 0.f);
                bb[s] = in ? load2(bias + col + 8) : make_float2(0.f, 0.f);
            }
            const int col = col0 / 2 + 8 * (q0 + t); /* lane t's piece of the output */
#pragma unroll
            for (int r = 0; r < 2; r++) {
                float2 v[4];
#pragma unroll
                for (int s = 0; s < 4; s++) {
                    const int e = 8 * (q0 + s) + 2 * r;
                    v[s] = make_float2(glu_apply(acc[e] + ba[s].x, acc[e + 4] + bb[s].x, ACT),
                                       glu_apply(acc[e + 1] + ba[s].y, acc[e + 5] + bb[s].y, ACT));
                }
                const int64_t row = r_lo + 8 * r;
                store_piece<T, false>(y, (const T *)NULL, row * half + col, row < m && col < half,
                                      v);
            }
        }
        return;
    }
    const bool lo_ok = r_lo < m, hi_ok = r_lo + 8 < m;
    const int64_t lo = r_lo * half + col0 / 2 + t2, hi = lo + 8 * (int64_t)half;
#pragma unroll
    for (int q = 0; q < BN / 16; q++) {
        const int col = col0 + 16 * q + t2; /* a's column; b's is 8 on */
        if (col >= n) continue;             /* n is a multiple of 16: b's is inside too */
        const float2 ba = bias ? load2(bias + col) : make_float2(0.f, 0.f);
        const float2 bb = bias ? load2(bias + col + 8) : make_float2(0.f, 0.f);
        const float *d = acc + 8 * q;
        if (lo_ok)
            store2(y + lo + 8 * q, glu_apply(d[0] + ba.x, d[4] + bb.x, ACT),
                   glu_apply(d[1] + ba.y, d[5] + bb.y, ACT));
        if (hi_ok)
            store2(y + hi + 8 * q, glu_apply(d[2] + ba.x, d[6] + bb.x, ACT),
                   glu_apply(d[3] + ba.y, d[7] + bb.y, ACT));
    }
}

/* The epilogue of a tile: the activation a template argument, the GLU or
 * (act none) the residual where asked for. */
template <typename T, int BN, bool GLU, bool PIECES>
static __device__ __forceinline__ void store_act(const float (&acc)[BN / 2], int act, const T *bias,
                                                 T *y, int64_t row0, int col0, int64_t m, int n)
{
#define SM90_STORE(A)                                                                              \
    if constexpr (GLU)                                                                             \
        store_tile_glu<T, BN, A, PIECES>(acc, bias, y, row0, col0, m, n);                          \
    else                                                                                           \
        store_tile<T, BN, A, false, PIECES>(acc, bias, NULL, y, row0, col0, m, n);
    switch (act) {
    case ACT_GELU: SM90_STORE(ACT_GELU) break;
    case ACT_GELU_TANH: SM90_STORE(ACT_GELU_TANH) break;
    case ACT_RELU: SM90_STORE(ACT_RELU) break;
    case ACT_SILU: SM90_STORE(ACT_SILU) break;
    default: SM90_STORE(ACT_NONE) break;
    }
#undef SM90_STORE
}

/* The table rows of the positions of the thread's fragment rows (g and g +
 * 8 of the warpgroup's 64 from row0; rows past m read position 0). Read
 * once the tile's operands have arrived, so past the producer's grid wait
 * (PDL: the positions are an earlier kernel's output). */
static __device__ __forceinline__ void rope_rows(const fuse_rope_epi &rope, int64_t row0, int64_t m,
                                                 unsigned (&rows)[2])
{
    const int64_t r_lo = fragment_row(row0);
    const int P = rope.table.positions;
    rows[0] = rope_table_row(r_lo < m ? __ldg(rope.positions + r_lo) : 0, P);
    rows[1] = rope_table_row(r_lo + 8 < m ? __ldg(rope.positions + r_lo + 8) : 0, P);
}

/* y = rope(acc + bias) for the warpgroup's tile fragments of a tile that
 * starts below rope.rope_cols: its q and k heads turned by the table rows of
 * the thread's two rows (rope_rows) in fp32 (rope_epi.cuh), then stored (a
 * tile of v's columns only takes the plain epilogue). The host checked that
 * the tile holds whole heads (fuse_rope_epi_fits). */
template <typename T, int BN, bool PIECES>
static __device__ __forceinline__ void
store_tile_rope(float (&acc)[BN / 2], const T *bias, T *y, int64_t row0, int col0, int64_t m, int n,
                const fuse_rope_epi &rope, unsigned row_lo, unsigned row_hi)
{
    if (bias)
#pragma unroll
        for (int j = 0; j < BN / 8; j++) {
            const int col = col0 + 8 * j + 2 * (threadIdx.x & 3);
            const float2 b = col < n ? load2(bias + col) : make_float2(0.f, 0.f);
            acc[4 * j] += b.x, acc[4 * j + 1] += b.y, acc[4 * j + 2] += b.x, acc[4 * j + 3] += b.y;
        }
#define SM90_ROPE(d, r)                                                                            \
    if constexpr (BN % (d) == 0) {                                                                 \
        if (rope.head_dim == (d) && rope.table.rot_dim == (r))                                     \
            rope_tile<BN, d, r>(acc, (const float2 *)rope.table.cs, row_lo, row_hi, col0,          \
                                rope.rope_cols);                                                   \
    }
    FUSE_ROPE_EPI_SHAPES(SM90_ROPE)
#undef SM90_ROPE
    store_tile<T, BN, ACT_NONE, false, PIECES>(acc, (const T *)NULL, NULL, y, row0, col0, m, n);
}

/* parts[r, c] = acc for the warpgroup's tile fragments of an fp32 [m, n]
 * plane (one K slice's partial sums). */
template <int BN>
static __device__ __forceinline__ void store_tile_f32(const float (&acc)[BN / 2], float *parts,
                                                      int64_t row0, int col0, int64_t m, int n)
{
    tile_fragments<BN>(
        row0, col0, m, n, [&](int col, int64_t lo, int64_t hi, bool lo_ok, bool hi_ok, int j) {
            if (lo_ok) *(float2 *)(parts + lo) = make_float2(acc[4 * j], acc[4 * j + 1]);
            if (hi_ok) *(float2 *)(parts + hi) = make_float2(acc[4 * j + 2], acc[4 * j + 3]);
        });
}

/* The CTA's first work item from item on (steps of gridDim.x) whose row
 * tile lies below live_rows; items when there is none. */
template <int BM>
static __device__ __forceinline__ int sm90_next_live(int item, int items, int tiles, int tiles_m,
                                                     int tiles_n, int64_t live_rows)
{
    for (; item < items; item += gridDim.x) {
        int tm, tn;
        tile_coords(item % tiles, tiles_m, tiles_n, tm, tn);
        if ((int64_t)tm * BM < live_rows) break;
    }
    return item;
}

/* Moves a ring position (stage, phase) on by steps slots. */
template <int STAGES>
static __device__ __forceinline__ void ring_advance(int &stage, uint32_t &phase, int steps)
{
    stage += steps;
    phase ^= (uint32_t)(stage / STAGES) & 1u;
    stage %= STAGES;
}

/* ---------------------------------------------------------------- kernel */

/*
 * Work items are (output tile, K slice) pairs, tiles fastest: without parts
 * one slice of all k; with parts, k / kslice slices of kslice (a multiple of
 * 64) columns each, slice s writing its partial sums to plane s of parts
 * ([k / kslice][m, n] fp32) instead of the bias + activation epilogue.
 */
template <typename T, int BM, int BN, int WM, int WN, int STAGES>
__global__ void __launch_bounds__(sm90_traits<BM, BN, WM, WN, STAGES>::THREADS,
                                  sm90_traits<BM, BN, WM, WN, STAGES>::CTAS_PER_SM)
    gemm_sm90_kernel(const __grid_constant__ CUtensorMap map_x,
                     const __grid_constant__ CUtensorMap map_w, const T *__restrict__ bias,
                     const T *residual, T *y, int64_t m, int n, int k, int act, int glu,
                     int w_ready, int kslice, float *__restrict__ parts,
                     const int32_t *__restrict__ live, const fuse_rope_epi rope)
{
    typedef sm90_traits<BM, BN, WM, WN, STAGES> G;
    constexpr bool PIECES = G::CTAS_PER_SM == 1; /* store_tile's 16-byte pieces */
    extern __shared__ __align__(1024) unsigned char smem_raw[];
    /* The slack in G::SMEM lets the base round up to 1024 bytes. */
    const uint32_t base = (smem_addr(smem_raw) + 1023u) & ~1023u;
    const uint32_t a_ring = base;                         /* [STAGES] x tiles */
    const uint32_t b_ring = base + STAGES * G::A_BYTES;   /* [STAGES] w tiles */
    const uint32_t full = base + STAGES * G::STAGE_BYTES; /* [STAGES] mbarriers */
    const uint32_t empty = full + STAGES * 8;             /* [STAGES] mbarriers */

    const int tiles_m = (int)((m + G::BM - 1) / G::BM);
    const int tiles_n = (n + BN - 1) / BN;
    const int tiles = tiles_m * tiles_n;
    const int items = parts ? tiles * (k / kslice) : tiles;
    const int ktiles = ((parts ? kslice : k) + 63) / 64;
    const int wg = threadIdx.x >> 7;
    /* Row tiles from *live on are not needed: their items are skipped alike by
     * the producer and the consumers (live was written before the previous
     * kernel started, so it is read before the grid dependency). */
    const int64_t live_rows = live ? (int64_t)*live : m;

    if (threadIdx.x == 0) {
        for (int s = 0; s < STAGES; s++) {
            mbar_init(full + 8 * s, 1);
            mbar_init(empty + 8 * s, 4 * WM); /* the warps of a tile's warpgroups */
        }
        fence_mbar_init();
    }
    __syncthreads();

    if (wg == G::WG) {
        /* Producer: one thread issues every load; the others leave. */
        if constexpr (G::PRODUCER_WG) setmaxnreg_dec<G::PRODUCER_REGS>();
        if (threadIdx.x != 128 * G::WG) return;
        tma_prefetch_map(&map_x);
        tma_prefetch_map(&map_w);
        /* Weights the previous kernel cannot be writing go up first, into
         * every stage of the first work item, while that kernel still runs
         * (PDL); x only once it has finished. */
        int early = 0, tm = 0, tn = 0;
        if ((int)blockIdx.x < items) tile_coords((int)blockIdx.x % tiles, tiles_m, tiles_n, tm, tn);
        if (w_ready && (int)blockIdx.x < items && (int64_t)tm * G::BM < live_rows) {
            const int k0 = (int)blockIdx.x / tiles * kslice;
            early = min(ktiles, STAGES);
            for (int kt = 0; kt < early; kt++) {
                mbar_arrive_expect_tx(full + 8 * kt, G::STAGE_BYTES);
                tma_load_2d(b_ring + kt * G::B_BYTES, &map_w, full + 8 * kt, k0 + kt * 64, tn * BN);
            }
        }
        stof_grid_wait();
        int stage = 0;
        uint32_t phase = 0;
        for (int item = blockIdx.x; item < items; item += gridDim.x, early = 0) {
            tile_coords(item % tiles, tiles_m, tiles_n, tm, tn);
            if ((int64_t)tm * G::BM >= live_rows) continue;
            const int k0 = item / tiles * kslice;
            for (int kt = 0; kt < ktiles; kt++) {
                const int kc = k0 + kt * 64;
                if (kt < early) { /* its weights are on their way: stage kt, first pass */
                    tma_load_2d(a_ring + kt * G::A_BYTES, &map_x, full + 8 * kt, kc, tm * G::BM);
                } else {
                    mbar_wait(empty + 8 * stage, phase ^ 1); /* the first pass finds stages free */
                    mbar_arrive_expect_tx(full + 8 * stage, G::STAGE_BYTES);
                    tma_load_2d(a_ring + stage * G::A_BYTES, &map_x, full + 8 * stage, kc,
                                tm * G::BM);
                    tma_load_2d(b_ring + stage * G::B_BYTES, &map_w, full + 8 * stage, kc, tn * BN);
                }
                if (++stage == STAGES) {
                    stage = 0;
                    phase ^= 1;
                }
            }
        }
        return;
    }

    /* Consumers. Cooperative: warpgroup wg owns rows 64 wg .. 64 wg + 63 of
     * every tile. Ping-pong: the CTA's live items take turns, warpgroup wg
     * the turns of its parity, and the ring slots of the other's items pass
     * it by. A turn's main loop waits for the previous turn's (a named
     * barrier per warpgroup), so that the warpgroups alternate on the tensor
     * cores, one's epilogue under the other's main loop; it also keeps every
     * full-barrier wait within one phase of the barrier, which a parity wait
     * needs: the ring slots before a turn's were all waited for by then. */
    if constexpr (G::PRODUCER_WG) setmaxnreg_inc<G::CONSUMER_REGS>();
    const int lane = threadIdx.x & 31;
    const uint32_t a_rows = G::PINGPONG ? 0u : (uint32_t)wg * 64 * 128;
    float acc[G::MW][BN / 2];
#pragma unroll
    for (int i = 0; i < G::MW; i++)
#pragma unroll
        for (int j = 0; j < BN / 2; j++)
            acc[i][j] = 0.f;
    int stage = 0;
    uint32_t phase = 0;
    int turn = 0;
    for (int item = sm90_next_live<G::BM>(blockIdx.x, items, tiles, tiles_m, tiles_n, live_rows),
             next;
         item < items; item = next, turn++) {
        next =
            sm90_next_live<G::BM>(item + (int)gridDim.x, items, tiles, tiles_m, tiles_n, live_rows);
        if constexpr (G::PINGPONG) {
            if ((turn & 1) != wg) {
                ring_advance<STAGES>(stage, phase, ktiles);
                continue;
            }
            if (turn > 0) pingpong_wait<256>(wg);
        }
        int tm, tn;
        tile_coords(item % tiles, tiles_m, tiles_n, tm, tn);
        int prev = 0;
        for (int kt = 0; kt < ktiles; kt++) {
            mbar_wait(full + 8 * stage, phase);
            __syncwarp(); /* wgmma is warp-collective: reconverge after the spin */
            const uint32_t a = a_ring + stage * G::A_BYTES + a_rows;
            const uint32_t b = b_ring + stage * G::B_BYTES;
            wgmma_fence();
#pragma unroll
            for (int ks = 0; ks < 4; ks++)
#pragma unroll
                for (int i = 0; i < G::MW; i++)
                    wgmma_ss<T, BN>(acc[i], sw128_desc(a + i * 64 * 128 + 32 * ks, 16, 1024),
                                    sw128_desc(b + 32 * ks, 16, 1024), kt > 0 || ks > 0);
            wgmma_commit();
            /* The previous slice's group has retired: its stage may be refilled. */
            wgmma_wait<1>();
            if (kt > 0 && lane == 0) mbar_arrive(empty + 8 * prev);
            prev = stage;
            if (++stage == STAGES) {
                stage = 0;
                phase ^= 1;
            }
        }
        /* Every slot of this turn has been waited for: the next turn may start
         * while this one's last MMAs and epilogue run. */
        if constexpr (G::PINGPONG) {
            if (next < items) pingpong_pass<256>(wg);
        }
        const int col0 = tn * BN;
        /* fuse_rope_epi_fits: the two-CTA tiles leave RoPE out */
        const bool rope_tile_here = G::CTAS_PER_SM == 1 && rope.positions && col0 < rope.rope_cols;
        /* The table rows of the thread's rows, loaded under the tile's last
         * MMAs where a warpgroup holds one 64-row block; where it holds two
         * (ping-pong 128-row tiles), ptxas spilled with them live across the
         * wait, so each block loads its own in the epilogue. */
        unsigned rope_at[2];
        if (G::MW == 1 && rope_tile_here) rope_rows(rope, block_row0<G>(tm, 0, wg), m, rope_at);
        wgmma_wait<0>();
        if (lane == 0) mbar_arrive(empty + 8 * prev);
#pragma unroll
        for (int i = 0; i < G::MW; i++)
            reg_fence(acc[i]);
        /* The next kernel (PDL) may be scheduled while this one stores. */
        if (next >= items) stof_grid_launch_dependents();

#pragma unroll
        for (int i = 0; i < G::MW; i++) {
            const int64_t row0 = block_row0<G>(tm, i, wg);
            if (parts)
                store_tile_f32<BN>(acc[i], parts + (int64_t)(item / tiles) * m * n, row0, col0, m,
                                   n);
            else if (glu)
                store_act<T, BN, true, PIECES>(acc[i], act, bias, y, row0, col0, m, n);
            else if (rope_tile_here) {
                if (G::MW > 1) rope_rows(rope, row0, m, rope_at);
                store_tile_rope<T, BN, PIECES>(acc[i], bias, y, row0, col0, m, n, rope, rope_at[0],
                                               rope_at[1]);
            } else if (residual)
                store_tile<T, BN, ACT_NONE, true, PIECES>(acc[i], bias, residual, y, row0, col0, m,
                                                          n);
            else
                store_act<T, BN, false, PIECES>(acc[i], act, bias, y, row0, col0, m, n);
        }
    }
}

/* ---------------------------------------------------------------- host */

/* A row-major [rows, k] operand as TMA boxes of 64 K elements x box_rows rows,
 * 128-byte swizzled, zeros outside the tensor. */
static stof_status encode_operand(CUtensorMap *map, const char *name, const void *ptr,
                                  stof_dtype dtype, int64_t rows, int k, int box_rows)
{
    const cuuint64_t dims[2] = {(cuuint64_t)k, (cuuint64_t)rows};
    const cuuint64_t strides[1] = {(cuuint64_t)k * 2};
    const cuuint32_t box[2] = {64, (cuuint32_t)box_rows};
    return stof_tma_encode_sw128(map, "gemm_sm90", name, dtype == STOF_BF16, 2, ptr, dims, strides,
                                 box, NULL);
}

template <typename T, int BM, int BN, int WM, int WN, int STAGES>
static stof_status launch_gemm_sm90(stof_ctx *ctx, const fuse_linear_args *a, int splits,
                                    float *parts)
{
    typedef sm90_traits<BM, BN, WM, WN, STAGES> G;
    static int opted[64];
    static int resident[64]; /* CTAs per SM, per device */
    void (*kernel)(const CUtensorMap, const CUtensorMap, const T *, const T *, T *, int64_t, int,
                   int, int, int, int, int, float *, const int32_t *, const fuse_rope_epi) =
        gemm_sm90_kernel<T, BM, BN, WM, WN, STAGES>;
    STOF_CUDA_TRY(smem_opt_in(kernel, G::SMEM, ctx->gpu_index, opted));
    const int dev = ctx->gpu_index;
    int per_sm = dev >= 0 && dev < 64 ? resident[dev] : 0;
    if (per_sm <= 0) {
        /* all of the SM's unified L1 / shared memory as shared, so that two
         * 128x128 CTAs fit side by side */
        STOF_CUDA_TRY(cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout,
                                           (int)cudaSharedmemCarveoutMaxShared));
        STOF_CUDA_TRY(
            cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, G::THREADS, G::SMEM));
        STOF_REQUIRE(per_sm >= 1, STOF_ERR_UNSUPPORTED,
                     "gemm_sm90 %dx%d s%d: no CTA fits on an SM of %s", G::BM, BN, STAGES,
                     ctx->device_name);
        if (dev >= 0 && dev < 64) resident[dev] = per_sm;
    }

    CUtensorMap map_x, map_w;
    STOF_TRY(encode_operand(&map_x, "x", a->x, a->dtype, a->m, a->k, G::BM));
    STOF_TRY(encode_operand(&map_w, "w", a->w, a->dtype, a->n, a->k, BN));
    const int64_t items = stof_cdiv(a->m, G::BM) * stof_cdiv(a->n, BN) * (parts ? splits : 1);
    const int64_t slots = (int64_t)per_sm * ctx->sm_count;
    const unsigned grid = (unsigned)(items < slots ? items : slots);
    const T *bias = (const T *)a->bias, *residual = (const T *)a->residual;
    T *y = (T *)a->y;
    int64_t m = a->m;
    int n = a->n, k = a->k, act = (int)a->act, glu = a->glu, w_ready = a->w_ready;
    int kslice = parts ? a->k / splits : a->k;
    const int32_t *live = a->live_rows;
    fuse_rope_epi rope = a->rope;
    void *args[] = {&map_x, &map_w, &bias,    &residual, &y,     &m,    &n,   &k,
                    &act,   &glu,   &w_ready, &kslice,   &parts, &live, &rope};
    return STOF_CUDA(stof_launch_pdl(true, (const void *)kernel, dim3(grid), dim3(G::THREADS), args,
                                     G::SMEM, (cudaStream_t)ctx->stream));
}

template <typename T>
static stof_status dispatch_gemm_sm90(stof_ctx *ctx, const fuse_config *c,
                                      const fuse_linear_args *a, int splits, float *parts)
{
#define TRY_CONFIG(bm, bn, bk, wm, wn, st)                                                         \
    if (c->block_m == bm && c->block_n == bn && c->block_k == bk && c->warps_m == wm &&            \
        c->warps_n == wn && c->stages == st)                                                       \
        return launch_gemm_sm90<T, bm, bn, wm, wn, st>(ctx, a, splits, parts);
    FUSE_GEMM_SM90_INSTANCES(TRY_CONFIG)
#undef TRY_CONFIG
    return stof_error(STOF_ERR_INTERNAL, "gemm_sm90: config %dx%dx%d s%d is not compiled",
                      c->block_m, c->block_n, c->block_k, c->stages);
}

extern "C" stof_status fuse_launch_gemm_sm90(stof_ctx *ctx, const fuse_config *c,
                                             const fuse_linear_args *a)
{
    if (a->dtype == STOF_BF16) return dispatch_gemm_sm90<__nv_bfloat16>(ctx, c, a, 1, NULL);
    return dispatch_gemm_sm90<__half>(ctx, c, a, 1, NULL);
}

extern "C" stof_status fuse_launch_gemm_sm90_parts(stof_ctx *ctx, const fuse_config *c,
                                                   const fuse_linear_args *a, int splits,
                                                   float *parts)
{
    if (a->dtype == STOF_BF16) return dispatch_gemm_sm90<__nv_bfloat16>(ctx, c, a, splits, parts);
    return dispatch_gemm_sm90<__half>(ctx, c, a, splits, parts);
}
