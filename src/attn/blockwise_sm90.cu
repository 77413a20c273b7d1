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
 *   S = Q K^T   wgmma.mma_async m64n64k16, Q from registers (the warp's
 *               16 rows, loaded once from shared memory by ldmatrix), K from
 *               shared memory through a K-major matrix descriptor;
 *   softmax     on the accumulator fragments, which per warp have the layout
 *               of mma.sync m16n8 C blocks (warp w owns rows 16w..16w+15),
 *               against settled row maxima once a warp has them (below);
 *   O += P V    wgmma m64n{D}k16 with P as the register A operand (two
 *               adjacent n8 score blocks make one k16 A fragment) and V read
 *               from shared memory as an MN-major (transposed) B operand;
 *               at head dim 64, m64n72k16: the descriptor's second column
 *               block (LBO bytes on) is the warpgroup's Q tile, which holds
 *               ones once Q is in registers, so that O's columns 64-71 are
 *               the running row sums of P. Those take no FADD per score,
 *               follow O's rescale for free, and sum P as rounded for the
 *               product.
 * Q, K and V tiles sit in shared memory in the canonical 128-byte-swizzle
 * layout: column blocks of 64 elements (128 bytes per row), rows 128 bytes
 * apart, 16-byte chunk c of row r stored at chunk c ^ (r % 8), every tile base
 * 1024-byte aligned. K and V tiles arrive by the bulk tensor copy engine (TMA:
 * one thread issues a 64 x 64 box per column block, which the engine swizzles
 * and completes on the buffer's mbarrier), so the 128 threads of a warpgroup
 * spend no instructions on addresses; Q, loaded once, is cp.async. The
 * tensor maps (host, per call) cover the whole k and v tensors, so the last
 * tile of a sequence may bring rows past its keys (the next sequence's, or a
 * padded batch's padding, NaN as likely as not): they are masked out of S,
 * and zeroed in V before P V, since P = 0 times NaN is still NaN. Under a
 * split mask (attn.h) a box spans 64 * split rows and the engine takes every
 * split-th, so a residue class's tile arrives as one.
 *
 * At head dim 64 a tile needs about as many MUFU cycles (64 x 64
 * exponentials, 16 a cycle a SM) as tensor cycles, so the kernel runs at the
 * rate at which the resident CTAs overlap one's softmax with another's
 * products: before the settled maxima, on the dense (4, 16, 4096) mask the
 * tensor pipe was active 44% of the time, the MUFU pipe 47%, the issue slots
 * 54%, and a fifth of the stall samples sat on the exponentials (the
 * experiments file named below). Instruction count is what bounds each warp,
 * hence: the softmax scale folded into the exponent's FFMA, the settled
 * maxima, the row sums on the tensor pipe (head dim 64: dense 4096 3%
 * faster, varlen 4096 3%), one mbarrier wait a tile for K_i and V_{i-1},
 * which are issued together (1-3% against one each), descriptors built
 * once, and the tile list read one iteration ahead. Q in registers halves
 * the shared-memory reads of S = Q K^T (1-2% where rows are long).
 *
 * Settled maxima. Online softmax may exponentiate a row against any
 * reference, as long as the exponentials stay in range; the running maximum
 * is only the usual choice. Once every row of a warp has seen a visible score
 * (after its first tile, as a rule), the warp exponentiates each further
 * tile against the row maxima as they stand (exp_settled): no maxima of the
 * tile (32 FMNMX and 4 shuffles a thread), no rescale factors, no vote and
 * no rescale of O, which is 14% of the loop's instructions per tile at head
 * dim 64 (SASS: 208 against 242). The packed P is checked instead
 * (pack_checked, 15 packed maxima): a probability past 256 (a score more
 * than 8 / scale past its row's maximum, overflow included) sends the warp
 * back to the full softmax for that tile, with the tile's scores computed
 * again on mma.sync from Q in registers and the K tile still in its buffer
 * (warp_scores), since the exponentials replaced them. Random inputs take
 * that path on the first tiles of a row at most; scores that climb by 2^8
 * from tile to tile would take it on every tile, correct but paying the
 * recomputation each time. Rows past the sequence (computed, never stored)
 * get zeros for Q and a maximum of 0 in the prologue, so that whatever their
 * storage holds never sends a warp back. Against the running-maximum softmax
 * (d86c9e0), on three H200s: dense 9-15% faster, causal 4096 10-12%, varlen
 * 8-10%, causal 1024 6-8%, the short-row masks 4-6%.
 *
 * All-visible masks (mask.h: a full part, such as the plain mask of a
 * padded or packed batch) run an instantiation of their own (ALL) that
 * takes a row's tiles to be columns 0, 1, ... up to the keys' end: no row
 * pointers, columns or tile classes are read, neither in the prologue, where
 * they stood between the CTA's start and its first K copy, nor per tile;
 * at head dim 64 the loop keeps its 128 registers with 8 bytes of spills
 * instead of 12, and no spill reload a tile. On an H200, against the same
 * kernel reading the list: dense and varlen (8, 12, 1024) and varlen
 * (4, 16, 4096) 4-5% faster, dense (4, 16, 4096) within its spread. That
 * spread is the device's power limit: under sustained dense attention an
 * H200 holds 700 W by lowering its clock (1470-1950 MHz instead of 1980),
 * and the kernel slows by 7-11%; sharing each K/V tile between two
 * warpgroups, which halves the tile traffic a product needs, recovers 2-7%
 * there (select.h, rule 3; experiments file, section 15).
 *
 * The order of work inside an iteration follows FlashAttention-3's
 * intra-warpgroup overlap: iteration i issues S_i = Q K_i^T and then
 * O += P_{i-1} V_{i-1}, waits for S_i only, exponentiates tile i against the
 * settled maxima while that product runs, and packs P_i (the product's
 * operand registers) once it has landed; the full softmax, which rescales O,
 * runs after the second wait. So V_{i-1} and K_i are live in one iteration,
 * and tile i+1 loads meanwhile: two K buffers and two V buffers suffice, with
 * K_{i+1} and V_i loaded during iteration i. Exponentiating ahead of the
 * second wait gained up to 3% at head dim 64 (dense 4096 within the spread)
 * and 7-10% at 128.
 *
 * Measured on an H200 and left out (each variant against this kernel on the
 * same GPU in the same run: bench_attention, and for the persistent CTAs, the
 * exponentials on the FMA pipe, the balanced folds and the head pairs
 * compare_attention.py,
 * bench/results/attention-experiments-2026-11-22-h200.txt):
 *  - Keeping the full softmax (row maxima, rescale) ahead of the second
 *    wait, before the settled maxima. ptxas hoists wgmma.wait_group to the
 *    top of its basic block, so the wait has to sit behind a branch that
 *    every warp of the warpgroup reaches alike (the wait is .aligned over the
 *    warpgroup: inside a per-warp branch it fails compute-sanitizer synccheck
 *    and gives wrong output under it); the rescale's skip branch, decided by
 *    a warpgroup barrier reduction per tile, measured within 1% of the kernel
 *    at L = 4096 and within 3% either way at L = 1024. (The settled path's
 *    branch ends before the wait, which every warp then reaches.)
 *  - Steps of two tiles (one n128 K^T product and eight k16 P V steps per
 *    barrier, row maxima and rescale): a fifth fewer instructions per key at
 *    head dim 64, but 3-25% slower than one tile per step with the same
 *    softmax placement (dense 4096: 0.690 against 0.655 ms; window 4096:
 *    0.102 against 0.082 ms; window 1024: 0.046 against 0.036 ms), with three
 *    CTAs per SM instead of four (scores of 64 x 128 per warpgroup, four-tile
 *    buffers).
 *  - Persistent CTAs (as many as the device holds; work items strided over
 *    them; the next item's Q loaded into a second Q buffer under the current
 *    item's first product, its first K and V tiles in the current item's last
 *    steps): slower on every mask, 5-16% where rows are even (dense,
 *    window, dilated) and 10-47% elsewhere (causal 4096: 0.567 against
 *    0.385 ms; a fixed stride over the heavy-first order hands some CTAs
 *    only heavy rows). The same code with one item per CTA was up to 7%
 *    slower than this kernel (128 registers against 117): the CTAs resident
 *    beside a starting one already cover its prologue, so chaining items
 *    across it won nothing.
 *  - A quarter or half of each tile's exponentials on the FMA pipe (floor by
 *    a round-down add, cubic for the fraction, exponent added as bits) to
 *    relieve the MUFU pipe: 2-5% and 6-12% slower than without (both on the
 *    persistent variant); the extra instructions cost more than the MUFU
 *    cycles they free.
 *  - The row maxima and sums as balanced trees instead of running folds
 *    (the profile's largest stall reason is "wait", fixed-latency
 *    dependences): within the spread of runs, the stall unchanged.
 *  - Reading the tile list and cu_seqlens ahead of the grid-dependency wait
 *    where the caller vouches that they were complete before the previous
 *    kernel (the encoder: mask built before the layers, a QKV GEMM between):
 *    stof run, BERT-base (1, 128), 0.436 against 0.436-0.437 ms; (4, 4096)
 *    Longformer mask, 7.21-7.24 against 7.22 ms. After a cuBLASLt GEMM the
 *    window before the wait is too short to matter.
 *  - FlashAttention-3's structure for the two-warpgroup CTA: a ring of four
 *    K and V buffers with landed and released mbarriers instead of the
 *    per-tile barrier, and the ping-pong (each warpgroup issues its products
 *    only after the other has issued its own): 8-16% slower than this
 *    kernel's two-warpgroup form (dense 4096: 0.80 against 0.69 ms), about
 *    as slow without the ping-pong (0.79). Alternating the warpgroups
 *    between the tensor and MUFU pipes does not raise their overlap at head
 *    dim 64. (At head dim 128, on all-visible and causal masks, that
 *    structure with a producer warpgroup, setmaxnreg and 128-key tiles is
 *    blockwise_ws_sm90.cu, which select.h's rule 4 runs instead of this
 *    kernel.)
 *  - Two heads a CTA one after the other (shared tile list, the second
 *    head's Q and first tiles loaded under the first head's): 1-27% slower
 *    (68% on Longformer 4096, whose global rows then pair up); half the CTAs
 *    balance worse over the SMs than the chaining saves.
 *  - Five CTAs a SM at head dim 64 (launch bounds forcing 94 registers;
 *    spills in the main loop): 1.8 times slower.
 *  - Each CTA bringing into L2 the Q rows of the CTA one device-full of
 *    CTAs later in launch order, so that Q's trip to memory leaves the
 *    prologue: 2-5% slower on the short-row masks, no gain elsewhere.
 */
#include "attn/attn.h"
#include "attn/bits.h"
#include "attn/grid.cuh"
#include "attn/mods.cuh"
#include "attn/select.h"
#include "attn/sm90.cuh"
#include "core/hopper.cuh"
#include "core/launch.cuh"
#include "core/ptx.cuh"

#include <cuda_runtime.h>

#define SM90_BLOCK_N 64

/* ---------------------------------------------------------------- PTX */

/* Named barrier over the 128 threads of one warpgroup (id 0 is __syncthreads);
 * immediate ids, so that the CTA reserves three barriers, not sixteen. */
static __device__ __forceinline__ void warpgroup_sync(int wg)
{
    if (wg == 0)
        asm volatile("bar.sync 1, 128;\n" ::: "memory");
    else
        asm volatile("bar.sync 2, 128;\n" ::: "memory");
}

/* d (+)= A B for m64n64k16, A from registers (Q), B K-major in shared
 * memory (a K tile); accumulate = 0 overwrites d. */
template <int BF16>
static __device__ __forceinline__ void wgmma_rs_kmajor_n64(float (&d)[32], const uint32_t (&a)[4],
                                                           uint64_t db, int accumulate)
{
    if (BF16)
        SM90_RS_N64("bf16", "0", accumulate);
    else
        SM90_RS_N64("f16", "0", accumulate);
}

/* S = Q K^T (onto: S += Q K^T) for one warpgroup: D / 16 k-steps, Q from registers (qf[ks]:
 * the A fragment of k-step ks, loaded once from the Q tile), K read through
 * its K-major descriptor k; a step moves 32 bytes along a 128-byte row, four
 * steps cross into the next column block. Q in registers halves the
 * shared-memory reads of the product (A is otherwise read again by every
 * k16 step of every tile). */
template <int D, int BF16>
static __device__ __forceinline__ void issue_scores(float (&s)[32], const uint32_t (&qf)[D / 16][4],
                                                    uint64_t k, bool onto = false)
{
#pragma unroll
    for (int ks = 0; ks < D / 16; ks++) {
        const uint32_t off = (uint32_t)((ks >> 2) * SM90_BLOCK_BYTES + (ks & 3) * 32);
        wgmma_rs_kmajor_n64<BF16>(s, qf[ks], desc_at(k, off), ks > 0 || onto);
    }
}

/* O += P V: four k16 steps over the tile's 64 keys; a step moves 16 rows
 * (2048 bytes) down every column block of V. v: the MN-major descriptor of
 * the V tile. */
template <int D, int BF16>
static __device__ __forceinline__ void issue_pv(float (&o)[SM90_OREGS(D)],
                                                const uint32_t (&p)[4][4], uint64_t v)
{
#pragma unroll
    for (int kk = 0; kk < 4; kk++)
        wgmma_rs<D, BF16>(o, p[kk], desc_at(v, kk * 2048));
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

/* Lane-wise maximum of two packed pairs of fp16 (bf16) values. */
template <int BF16> static __device__ __forceinline__ uint32_t max2(uint32_t a, uint32_t b)
{
    uint32_t r;
    if (BF16)
        asm("max.bf16x2 %0, %1, %2;\n" : "=r"(r) : "r"(a), "r"(b));
    else
        asm("max.f16x2 %0, %1, %2;\n" : "=r"(r) : "r"(a), "r"(b));
    return r;
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

/* Sign and mask (partial tiles and tiles past the keys only). A negative
 * softmax scale flips the scores, so that the maxima stay maxima. */
static __device__ __forceinline__ void sign_and_mask(float (&s)[32], bool masked,
                                                     const uint64_t (&w)[2], int shift, bool negate)
{
    if (negate) {
#pragma unroll
        for (int i = 0; i < 32; i++)
            s[i] = -s[i];
    }
    if (masked) mask_scores(s, w[0] >> shift, w[1] >> shift);
}

/* x added to every score (-inf stays -inf). */
static __device__ __forceinline__ void add_all(float (&s)[32], float x)
{
#pragma unroll
    for (int i = 0; i < 32; i++)
        s[i] += x;
}

/* Largest probability a tile may reach against settled row maxima, as a
 * 16-bit pattern (fp16 or bf16 256): a tile whose scores pass the running
 * maximum of their row by more than 8 / scale is taken again by the full
 * softmax. P stays far inside the 16-bit range, and the products and sums are
 * fp32. */
#define SM90_P_LIMIT_F16 0x5c00u
#define SM90_P_LIMIT_BF16 0x4380u

/* The head (log2 units) the settled maxima get over a row's maximum where
 * the bias comes from a table (T5 buckets, a bias tensor): such a bias may
 * rise by many units from one tile to a later one (the tiles go in the
 * mask's order, not the bias's), and each time it passes the limit above the
 * warp takes the tile again on mma.sync. With the head a score may pass its
 * row's maximum by 16 / scale first. P stays below 2^-8 of the limit's
 * range, so that fp16 P is normal down to 2^-6 of the row's largest. In
 * compare_attention.py's suite B (T5, a [32, H] table of N(0, 4) values, on
 * an H100) it took bidirectional (8, 12, 512, 64) from 1.41 times its time
 * without the bias to 1.24; causal stayed at 1.37. */
#define SM90_BIAS_HEAD 8.0f

/*
 * The softmax of a tile once the warp's rows all have a running maximum
 * (m finite): P = exp2(s * scale - m * scale) against that maximum as it
 * stands, with no row maxima, no shuffles, no rescale factor and no rescale
 * of O. Online softmax allows any reference for a row as long as the
 * exponentials stay in range, so the maximum only has to move when a score
 * passes it by far: pack_checked says whether one did, and the caller then
 * takes the tile again through softmax_tile, whose new maximum rescales O as
 * before. sum: this tile's per-thread row sums when SUMS.
 */
template <bool SUMS, bool FOLD = false>
static __device__ __forceinline__ void exp_settled(float (&s)[32], float scale, const float (&m)[2],
                                                   float (&sum)[2], float fold = 0.0f)
{
    const float base[2] = {FOLD ? (m[0] - fold) * scale : m[0] * scale,
                           FOLD ? (m[1] - fold) * scale : m[1] * scale};
    exp_tile<SUMS>(s, scale, base, sum);
}

/* P packed into p, and whether a probability of the thread's passed the
 * limit above (maxima of packed pairs; P >= 0, inf included). */
template <int BF16>
static __device__ __forceinline__ bool pack_checked(uint32_t (&p)[4][4], const float (&s)[32])
{
    pack_p<BF16>(p, s);
    uint32_t top[4];
#pragma unroll
    for (int kk = 0; kk < 4; kk++)
        top[kk] = max2<BF16>(max2<BF16>(p[kk][0], p[kk][1]), max2<BF16>(p[kk][2], p[kk][3]));
    const uint32_t x = max2<BF16>(max2<BF16>(top[0], top[1]), max2<BF16>(top[2], top[3]));
    const uint32_t limit = BF16 ? SM90_P_LIMIT_BF16 : SM90_P_LIMIT_F16;
    return (x & 0xffffu) > limit || (x >> 16) > limit;
}

/* S = Q K^T for the warp's own 16 rows on mma.sync (warp-level, where wgmma
 * is warpgroup-wide), from the K tile at k_tile (still in its buffer): the
 * scores of a tile again, in the accumulator layout of the wgmma, when
 * pack_checked found them past the running maximum. The ldmatrix.x4 of
 * (np, ks) brings the B fragments of key blocks 2np and 2np + 1. */
template <int D, int BF16>
static __device__ __forceinline__ void warp_scores(float (&s)[32], const uint32_t (&qf)[D / 16][4],
                                                   uint32_t k_tile, int lane)
{
#pragma unroll
    for (int i = 0; i < 32; i++)
        s[i] = 0.0f;
    const int key = ((lane >> 4) << 3) + (lane & 7), half = (lane >> 3) & 1;
    /* Each load's address depends on the previous products, so that ptxas
     * does not hoist all D / 4 fragment loads ahead (64 registers more for
     * the whole kernel, a CTA less per SM); this path is rare. */
    uint32_t chain = 0;
#pragma unroll
    for (int ks = 0; ks < D / 16; ks++) {
#pragma unroll
        for (int np = 0; np < 4; np++) {
            uint32_t r[4];
            ldsm_x4(r, k_tile + chain + sw128_offset(np * 16 + key, 2 * ks + half));
            mma_16816<BF16>(s + 8 * np, qf[ks], r[0], r[1]);
            mma_16816<BF16>(s + 8 * np + 4, qf[ks], r[2], r[3]);
            asm volatile("" : "+r"(chain) : "f"(s[8 * np]), "f"(s[8 * np + 4]));
        }
    }
}

/* Whether every row of the warp has a running maximum (warp-uniform):
 * exp_settled may then take its next tiles. */
static __device__ __forceinline__ bool warp_settled(const float (&m)[2])
{
    return __all_sync(PTX_FULL_WARP, m[0] != -INFINITY && m[1] != -INFINITY);
}

/* CTAs per SM the register budget aims at. At head dim 64 (128 registers
 * with one warpgroup or two) ptxas spills 12 bytes, two of them reloaded
 * from L1 a tile (all-visible masks: 8, none reloaded in the loop); with
 * one warpgroup the bound asks for four CTAs, since left to itself ptxas
 * gives the kernel with the settled softmax's fallback 156 registers, and
 * the SM three CTAs. */
#define SM90_MIN_CTAS(D, WG) ((D) == 64 ? ((WG) == 1 ? 4 : 2) : ((WG) == 1 ? 2 : 1))
/* Modifier variants (one warpgroup) hold the modifiers' context too: at
 * head dim 64 three CTAs (168 registers, no spills; left free ptxas takes
 * 196 and the SM two), at 128 two (240 registers). Three against two, T5
 * bias on an H200, (8, 12, 512, 64) full: 0.034 against 0.041 ms, causal
 * 0.029 against 0.035, (4, 12, 2048, 64): 0.182 against 0.221; four (128
 * registers, 150-220 bytes of spills) were 5-15% slower than three. The T5
 * path (MODS 2) at four (128 registers, 52-96 bytes of spills), on an H100,
 * time over the same call without a bias: (8, 12, 512, 64) full 1.326
 * against 1.263 at three, causal 1.324 against 1.328, (4, 12, 2048, 64)
 * full 1.181 against 1.256. */
#define SM90_MIN_CTAS_M(D, WG, MODS) ((MODS) ? ((D) == 64 ? 3 : 2) : SM90_MIN_CTAS(D, WG))

/* MODS 1: scores go through mods.cuh's modifiers (soft cap, position bias)
 * in raw units, before the sign and the mask, wherever they are computed.
 * MODS 2: a T5 bias alone (no cap, no split) on mods.cuh's T5 path: the
 * bias goes into the score product's accumulators before the product, or
 * into the exponentials' reference where a block has one bias (fold). */
template <int D, int WG, int BF16, bool ALL, int MODS>
__global__ void __launch_bounds__(WG * 128, SM90_MIN_CTAS_M(D, WG, MODS))
    attn_blockwise_sm90_kernel(const attn_launch a, const __grid_constant__ CUtensorMap k_map,
                               const __grid_constant__ CUtensorMap v_map)
{
    /* The next kernel (PDL: a gemm_sm90 out-projection) may load its weights meanwhile. */
    stof_grid_launch_dependents();
    stof_grid_wait(); /* launched with PDL: the inputs are the previous kernel's outputs */
    const int BM = WG * SM90_SUB_ROWS, THREADS = WG * 128;
    const uint32_t TILE = SM90_SUB_ROWS * D * 2;
    extern __shared__ __align__(1024) unsigned char smem_raw[];
    /* The slack of attn_sm90_smem_bytes lets the base round up to 1024 bytes. */
    const uint32_t base = (smem_addr(smem_raw) + 1023u) & ~1023u;
    const uint32_t sk = base;             /* [2] K tiles */
    const uint32_t sv = sk + 2 * TILE;    /* [2] V tiles */
    const uint32_t sq = sv + 2 * TILE;    /* [WG] 64-row Q tiles (after V: see v_desc_of) */
    const uint32_t bar0 = sq + WG * TILE; /* mbarrier: K_0 landed */
    const uint32_t sbar = bar0 + 8;       /* [2] mbarriers: stage s landed, on sbar[s & 1] */

    const mask_tiles *t = &a.tiles;
    int h, b, x;
    attn_block_order(&a, &h, &b, &x);
    const int wg = threadIdx.x >> 7, warp = (threadIdx.x >> 5) & 3, lane = threadIdx.x & 31;
    const int subs = t->tile_m / BM;
    const int tr = x / subs;
    const int row0 = tr * t->tile_m + (x % subs) * BM;
    const attn_seq s = attn_seq_of(&a, b, h);
    if (row0 >= s.store_rows) return;
    /* Q goes first when its rows are known to be wanted, so that its trip to
     * memory overlaps the dependent reads of the tile list and of the first
     * K tile: with one length for the whole batch (bm == 1) a row block past
     * it is rare (a lone sequence shorter than its padding), and Q comes in
     * up to the end of the sequence's storage (rows past len_q, whatever
     * they hold, store_output writes as zeros without reading their sums;
     * rows past the storage, zeros). With per-batch lengths, whole row
     * blocks of padding are common and Q waits for the lengths, which say
     * whether it is needed at all. */
    const bool q_early = t->bm == 1;
    if (q_early) {
        load_rows<D, BM, THREADS>(sq, s.q, a.q_sl, row0, s.store_rows);
        cp_async_commit();
    }
    /* ALL (the mask's all_visible): the row's tiles are columns 0, 1, ...
     * up to the keys' end, full but a last one cut by len_k, so the tile
     * list is never read (nor waited for: K_0 depends on nothing more). */
    int e0 = 0, n;
    if constexpr (ALL) {
        n = (s.len_k + SM90_BLOCK_N - 1) / SM90_BLOCK_N;
    } else {
        const int64_t ri = attn_row_index(&a, b, h, tr);
        e0 = t->row_ptr[ri];
        n = t->row_ptr[ri + 1] - e0;
    }
    if (n <= 0 || row0 >= s.len_q) {
        if (q_early) cp_async_wait<0>(); /* no copy may land after the CTA has gone */
        store_zero_rows<D, THREADS>(&s, &a, row0, BM);
        return;
    }
    if (!q_early) {
        load_rows<D, BM, THREADS>(sq, s.q, a.q_sl, row0, s.len_q);
        cp_async_commit();
    }
    /* The modifiers' context; a T5 table lands after the mbarriers, published
     * by the prologue's barrier. The T5 path's column of biases comes in
     * beside Q; its buckets are found before that barrier, its table is laid
     * out after it. */
    constexpr bool T5 = MODS == 2;
    float *const tab_smem = (float *)(smem_raw + (bar0 + 64 - smem_addr(smem_raw)));
    attn_mod_ctx mc;
    if constexpr (MODS == 1)
        mc = attn_mod_setup(&a, &s, b, h, tab_smem, THREADS, attn_raw_unit(a.scale));
    if constexpr (T5) {
        attn_t5_fetch(&a.mods, s.head, tab_smem + 2 * attn_t5_copy_floats(a.mods.t5_max_distance),
                      THREADS);
        cp_async_commit();
    }

    const uint32_t q_tile = sq + wg * TILE;
    /* Row of this thread's accumulator row g inside the mask tile (for the bitmap). */
    const int tile_row = (x % subs) * BM + wg * SM90_SUB_ROWS + warp * 16 + (lane >> 2);
    const int shift = 2 * (lane & 3);
    const bool negate = a.scale_log2 < 0.0f;
    const float scale = fabsf(a.scale_log2);
    float head = 0.0f; /* SM90_BIAS_HEAD in raw units, for a table's bias */
    if constexpr (MODS == 1)
        if ((mc.kind == STOF_BIAS_T5 || mc.kind == STOF_BIAS_TENSOR) && scale > 0.0f)
            head = SM90_BIAS_HEAD / scale;
    if constexpr (T5)
        if (scale > 0.0f) head = SM90_BIAS_HEAD / scale;
    /* Descriptors of K and V buffer 0; buffer 1 lies TILE
     * bytes further. */
    const uint64_t k_desc = opaque(sw128_desc(sk, 16, 1024));
    const uint64_t v_desc = opaque(sw128_desc(sv, SM90_BLOCK_BYTES, 1024));
    const uint64_t v_desc0 = opaque(sw128_desc(sv, q_tile - sv, 1024));
    const uint64_t v_desc1 = opaque(sw128_desc(sv + TILE, q_tile - sv - TILE, 1024));
    auto v_desc_of = [&](int j) {
        if constexpr (SM90_ONES_D(D))
            return (j & 1) ? v_desc1 : v_desc0;
        else
            return desc_at(v_desc, (j & 1) * TILE);
    };

    /* One thread moves every K and V tile: a 64 x 64 box per column block,
     * 128-byte swizzled by the copy engine, completing on an mbarrier. Rows:
     * the sequence's own, from k_row0 (padded: 0; packed: its first token),
     * split apart (a split's class: every split-th row). */
    const bool leader = threadIdx.x == 0;
    const int kv_y = s.k_row0, kv_h = s.kv_head, kv_w = a.cu_k ? 0 : b;
    auto load_tile = [&](uint32_t dst, const CUtensorMap *map, uint32_t bar, int key0) {
#pragma unroll
        for (int cb = 0; cb < D / 64; cb++)
            tma_load_4d(dst + cb * SM90_BLOCK_BYTES, map, bar, cb * 64, kv_y + key0 * a.split, kv_h,
                        kv_w);
    };
    /* K_0 alone, then stage s = 1 .. n: K_s (while s < n) and V_{s-1}, issued
     * together (iteration s - 1, or the prologue) and waited for together
     * (iteration s, or after the loop), on one mbarrier: sbar[s & 1], whose
     * (s - 1) / 2-th phase it is. vkey0: V_{s-1}'s first key. */
    auto load_stage = [&](int sidx, int kcol, int vkey0) {
        const uint32_t bar = sbar + 8 * (sidx & 1);
        mbar_arrive_expect_tx(bar, (sidx < n ? 2 : 1) * TILE);
        if (sidx < n) load_tile(sk + (sidx & 1) * TILE, &k_map, bar, kcol * SM90_BLOCK_N);
        load_tile(sv + ((sidx - 1) & 1) * TILE, &v_map, bar, vkey0);
    };
    /* Waits for stage sidx and zeroes V_{sidx-1}'s rows past the keys (its
     * first key vkey0); the caller's barrier then publishes them to every
     * warpgroup. */
    auto stage_landed = [&](int sidx, int vkey0) {
        mbar_wait(sbar + 8 * (sidx & 1), ((sidx - 1) >> 1) & 1);
        if (vkey0 + SM90_BLOCK_N > s.len_k) {
            zero_tail_rows<D, THREADS>(sv + ((sidx - 1) & 1) * TILE, max(s.len_k - vkey0, 0));
            fence_proxy_async();
        }
    };

    /* The softmax adds up the row sums where P V does not yield them. */
    constexpr bool SUMS = !SM90_ONES_D(D);
    float o[SM90_OREGS(D)], sc[32], m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
    float alpha[2], sum[2];
    uint32_t p[4][4];
    uint64_t w[2];
#pragma unroll
    for (int i = 0; i < SM90_OREGS(D); i++)
        o[i] = 0.0f;
#pragma unroll
    for (int i = 0; i < 32; i++)
        sc[i] = 0.0f;

    /* The tile list is read ahead: entering iteration i, col and bits are
     * tile i's, col_next tile i+1's column (its K loads in iteration i).
     * Modifier variants walk the list backwards, from the diagonal: a
     * position bias (ALiBi, T5 causal) grows towards it, and the row maxima
     * found first then hold, where ascending order would send warp after
     * warp back to the full softmax. */
    constexpr bool REV = MODS != 0;
    auto entry = [&](int i) { return REV ? e0 + n - 1 - i : e0 + i; };
    auto all_col = [&](int i) { return REV ? n - 1 - i : i; };
    int col = ALL ? all_col(0) : t->col[entry(0)], bits = ALL ? -1 : t->bits[entry(0)];
    int col_next = ALL ? all_col(1) : n > 1 ? t->col[entry(1)] : 0;

    /* Prologue: K_0 and stage 1 (K_1, V_0) on their way; Q (in flight
     * since the start) published by the barrier. */
    if (leader) {
#pragma unroll
        for (int j = 0; j < 3; j++)
            mbar_init(bar0 + 8 * j, 1);
        fence_mbar_init();
        tma_prefetch_map(&k_map);
        tma_prefetch_map(&v_map);
        mbar_arrive_expect_tx(bar0, TILE);
        load_tile(sk, &k_map, bar0, col * SM90_BLOCK_N);
        load_stage(1, col_next, col * SM90_BLOCK_N);
    }
    bool masked = bits >= 0 || col * SM90_BLOCK_N + SM90_BLOCK_N > s.len_k;
    if (masked) tile_words(t, bits, tile_row, col * SM90_BLOCK_N, s.len_k, w);
    if constexpr (T5) attn_t5_buckets(&a.mods, tab_smem, THREADS); /* under Q's trip */
    cp_async_wait<0>();
    fence_proxy_async();
    __syncthreads();
    if constexpr (T5) {
        const int nt = 2 * attn_t5_copy_floats(a.mods.t5_max_distance);
        attn_t5_build(&a.mods, tab_smem, tab_smem + nt, attn_raw_unit(a.scale), THREADS);
        __syncthreads();
    }
    int bits_next = !ALL && n > 1 ? t->bits[entry(1)] : -1;
    int col_after = !ALL && n > 2 ? t->col[entry(2)] : 0;
    int key0_prev = col * SM90_BLOCK_N;
    uint32_t qf[D / 16][4];
#pragma unroll
    for (int ks = 0; ks < D / 16; ks++)
        ldsm_x4(qf[ks], q_tile + sw128_offset(warp * 16 + (lane & 15), 2 * ks + (lane >> 4)));
    /* Rows g and g + 8 of the thread past the sequence (its last row block
     * only) are computed but never stored. Their Q may hold anything (NaN,
     * say), which would keep sending the warp to the full softmax: as zeros
     * (the A fragment's registers 0 and 2 are row g, 1 and 3 row g + 8) they
     * score 0 against every key. */
    const int row_g = row0 + wg * SM90_SUB_ROWS + warp * 16 + (lane >> 2);
    const bool live[2] = {row_g < s.len_q, row_g + 8 < s.len_q};
#pragma unroll
    for (int ks = 0; ks < D / 16; ks++)
#pragma unroll
        for (int c = 0; c < 4; c++)
            if (!live[c & 1]) qf[ks][c] = 0u;
    /* Such a row starts with a running maximum (0, its scores' largest), so
     * that it never holds the warp back from the settled softmax, even where
     * its first tile hides every key. */
#pragma unroll
    for (int r = 0; r < 2; r++)
        if (!live[r]) m[r] = 0.0f;
    if constexpr (SM90_ONES_D(D)) {
        /* The Q tile becomes the ones tile of the row sums: each warp
         * overwrites the 16 rows (2 KB) it alone read. */
        __syncwarp();
        const uint32_t one2 = BF16 ? 0x3f803f80u : 0x3c003c00u;
#pragma unroll
        for (int c = 0; c < 4; c++)
            st_shared_fill16(q_tile + warp * 2048 + (lane + c * 32) * 16, one2);
        fence_proxy_async(); /* published to wgmma by the barrier before the first P V */
    }
    /* T5: the tile's bias goes into the accumulators before the product,
     * or (folded) into the exponentials' reference; fold is in the units
     * after the sign. */
    attn_t5_view t5v;
    bool folded = false;
    float fold = 0.0f;
    if constexpr (T5) {
        t5v = attn_t5_view_of(&a.mods, tab_smem, row_g, row0 + wg * SM90_SUB_ROWS,
                              (int)mask_tiles_offset(&a.tiles, s.len_q, s.len_k));
        folded = attn_t5_tile<false>(sc, t5v, a.mods.t5_max_distance, col * SM90_BLOCK_N, fold);
        fold = negate ? -fold : fold;
    }
    mbar_wait(bar0, 0);
    wgmma_fence();
    issue_scores<D, BF16>(sc, qf, k_desc, T5 && !folded);
    wgmma_commit();
    wgmma_wait<0>();
    reg_fence(sc);
    if constexpr (MODS == 1)
        attn_apply_mods<8>(*(float(*)[8][4])sc, mc, row_g, col * SM90_BLOCK_N + 2 * (lane & 3));
    sign_and_mask(sc, masked, w, shift, negate);
    if (T5 && folded) add_all(sc, fold);
    softmax_tile<SUMS>(sc, scale, m, alpha, sum, head);
    if constexpr (SUMS) {
        l[0] = sum[0];
        l[1] = sum[1];
    }
    pack_p<BF16>(p, sc);
    bool settled = warp_settled(m);

    for (int i = 1; i < n; i++) {
        if constexpr (ALL) {
            col = all_col(i);
            col_next = all_col(i + 1);
        } else {
            col = col_next;
            bits = bits_next;
            col_next = col_after;
        }
        const int key0 = col * SM90_BLOCK_N;
        if constexpr (T5) {
            fold = 0.0f;
            folded = attn_t5_tile<false>(sc, t5v, a.mods.t5_max_distance, key0, fold);
            fold = negate ? -fold : fold;
        }

        /* Stage i landed: K_i and V_{i-1} (with its rows past the keys
         * zeroed); every warpgroup is done with K_{i-1} (its S was waited
         * for) and with V_{i-2} (its P V was waited for), so their buffers
         * take stage i + 1, K_{i+1} and V_i. */
        stage_landed(i, key0_prev);
        __syncthreads();
        if (leader) load_stage(i + 1, col_next, key0);
        if constexpr (!ALL) {
            if (i + 1 < n) bits_next = t->bits[entry(i + 1)];
            if (i + 2 < n) col_after = t->col[entry(i + 2)];
        }
        masked = bits >= 0 || key0 + SM90_BLOCK_N > s.len_k;
        if (masked) tile_words(t, bits, tile_row, key0, s.len_k, w);

        wgmma_fence();
        issue_scores<D, BF16>(sc, qf, desc_at(k_desc, (i & 1) * TILE), T5 && !folded);
        wgmma_commit();
        issue_pv<D, BF16>(o, p, v_desc_of(i - 1));
        wgmma_commit();
        wgmma_wait<1>(); /* S_i landed; P_{i-1} V_{i-1} may still run */
        reg_fence(sc);
        if constexpr (MODS == 1)
            attn_apply_mods<8>(*(float(*)[8][4])sc, mc, row_g, key0 + 2 * (lane & 3));
        sign_and_mask(sc, masked, w, shift, negate);
        /* Settled rows exponentiate while P_{i-1} V_{i-1} runs: the branch
         * ends the basic block, and ptxas hoists the wait below no further
         * than to the top of its own. */
        if (settled) exp_settled<SUMS, T5>(sc, scale, m, sum, fold);
        wgmma_wait<0>(); /* P's registers are rewritten from here on */
        reg_fence(o);
        bool full = !settled;
        if (settled) {
            full = __any_sync(PTX_FULL_WARP, pack_checked<BF16>(p, sc));
            if (full) {
                /* A score far past its row's maximum: this tile's scores
                 * again (the exponentials replaced them), for the full
                 * softmax with a new maximum. */
                warp_scores<D, BF16>(sc, qf, sk + (i & 1) * TILE, lane);
                if constexpr (MODS == 1)
                    attn_apply_mods<8>(*(float(*)[8][4])sc, mc, row_g, key0 + 2 * (lane & 3));
                if constexpr (T5) {
                    float same;
                    attn_t5_tile<true>(sc, t5v, a.mods.t5_max_distance, key0, same);
                }
                sign_and_mask(sc, masked, w, shift, negate);
            } else if constexpr (SUMS) {
                l[0] += sum[0];
                l[1] += sum[1];
            }
        }
        if (full) {
            if (T5 && folded) add_all(sc, fold);
            softmax_tile<SUMS>(sc, scale, m, alpha, sum, head);
            rescale_o<D>(o, alpha);
            if constexpr (SUMS) {
                l[0] = l[0] * alpha[0] + sum[0];
                l[1] = l[1] * alpha[1] + sum[1];
            }
            pack_p<BF16>(p, sc);
            settled = warp_settled(m);
        }
        key0_prev = key0;
    }

    /* The last P V once V_{n-1} (stage n) has landed. */
    stage_landed(n, key0_prev);
    __syncthreads();
    wgmma_fence();
    issue_pv<D, BF16>(o, p, v_desc_of(n - 1));
    wgmma_commit();
    wgmma_wait<0>();
    reg_fence(o);
    if constexpr (SM90_ONES_D(D)) {
        fence_proxy_async();
        warpgroup_sync(wg); /* no wgmma of this warpgroup reads its Q tile any more */
    }
    float lsum[2];
#pragma unroll
    for (int r = 0; r < 2; r++)
        lsum[r] = SM90_ONES_D(D) ? o[SM90_OREGS(D) - 4 + 2 * r] : quad_sum(l[r]);
    store_output<D, BF16>(o, lsum, q_tile, &s, &a, row0 + wg * SM90_SUB_ROWS + warp * 16, warp * 16,
                          lane);
}

/* ---------------------------------------------------------------- host */

/* Every instantiation: head dims 64 and 128, one or two warpgroups, fp16 and
 * bf16, masks with a tile list and all-visible ones; one warpgroup with the
 * general modifiers (1) and with the T5 path (2). */
typedef void (*sm90_kernel_fn)(const attn_launch, const CUtensorMap, const CUtensorMap);
typedef struct sm90_variant {
    int head_dim, wg, bf16, all, mods;
    sm90_kernel_fn fn;
} sm90_variant;

// clang-format off
#define SM90_VARIANT_ALL(D, WG, ALL, M)                                                            \
    {D, WG, 0, ALL, M, attn_blockwise_sm90_kernel<D, WG, 0, ALL, M>},                              \
    {D, WG, 1, ALL, M, attn_blockwise_sm90_kernel<D, WG, 1, ALL, M>}
#define SM90_VARIANT_M(D, WG, M) SM90_VARIANT_ALL(D, WG, false, M), SM90_VARIANT_ALL(D, WG, true, M)
#define SM90_VARIANT(D, WG) SM90_VARIANT_M(D, WG, 0)
// clang-format on
static const sm90_variant sm90_variants[] = {SM90_VARIANT(64, 1),      SM90_VARIANT(64, 2),
                                             SM90_VARIANT(128, 1),     SM90_VARIANT(128, 2),
                                             SM90_VARIANT_M(64, 1, 1), SM90_VARIANT_M(128, 1, 1),
                                             SM90_VARIANT_M(64, 1, 2), SM90_VARIANT_M(128, 1, 2)};
#define SM90_NVARIANTS ((int)(sizeof sm90_variants / sizeof sm90_variants[0]))

/* The opt-in of a modifier variant covers the largest T5 table (the T5
 * path's: both copies and the column). */
static int variant_smem(const sm90_variant *v)
{
    const int64_t table =
        v->mods == 2 ? (int64_t)attn_t5_smem_bytes(ATTN_T5_MAX_DISTANCE, ATTN_T5_MAX_BUCKETS)
        : v->mods    ? (int64_t)attn_t5_table_bytes(ATTN_T5_MAX_DISTANCE)
                     : 0;
    return (int)(attn_sm90_smem_bytes(v->head_dim, 64 * v->wg) + table);
}

extern "C" stof_status attn_blockwise_sm90_prepare(void)
{
    static unsigned long long done; /* bit per device ordinal */
    STOF_TRY(attn_opt_in_once(&done, sm90_variants, SM90_NVARIANTS, variant_smem, NULL));
    return attn_ws_sm90_prepare();
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
    const int wg = warps / 4, all = a->tiles.all_visible && a->split == 1;
    /* modifiers: 1 the general variant, 2 a T5 bias alone on the T5 path */
    int mods = a->mods.bias_kind != STOF_BIAS_NONE || a->mods.softcap > 0.0f;
    if (a->mods.bias_kind == STOF_BIAS_T5 && a->mods.softcap <= 0.0f && a->split == 1) mods = 2;
    STOF_REQUIRE(!mods || wg == 1, STOF_ERR_UNSUPPORTED,
                 "sm_90 attention with a bias or soft cap runs one warpgroup (asked: %d)", wg);
    const sm90_variant *v = NULL;
    for (int i = 0; i < SM90_NVARIANTS && !v; i++)
        if (sm90_variants[i].head_dim == a->head_dim && sm90_variants[i].wg == wg &&
            sm90_variants[i].bf16 == a->bf16 && sm90_variants[i].all == all &&
            sm90_variants[i].mods == mods)
            v = &sm90_variants[i];
    STOF_REQUIRE(v, STOF_ERR_INTERNAL,
                 "sm_90 block-wise dispatch: no variant for head dim %d, %d warps", a->head_dim,
                 warps);
    STOF_TRY(attn_blockwise_sm90_prepare());
    CUtensorMap k_map, v_map;
    STOF_REQUIRE(a->split <= ATTN_SM90_MAX_SPLIT, STOF_ERR_UNSUPPORTED,
                 "sm_90 attention: a mask split into %d residue classes (at most %d)", a->split,
                 ATTN_SM90_MAX_SPLIT);
    STOF_TRY(encode_kv(&k_map, "k", a, a->k, a->k_sb, a->k_sh, a->k_sp, SM90_SUB_ROWS));
    STOF_TRY(encode_kv(&v_map, "v", a, a->v, a->v_sb, a->v_sh, a->v_sp, SM90_SUB_ROWS));
    void *args[3] = {(void *)a, (void *)&k_map, (void *)&v_map};
    const size_t smem =
        (size_t)attn_sm90_smem_bytes(a->head_dim, block_m) +
        (mods == 2 ? attn_t5_smem_bytes(a->mods.t5_max_distance, a->mods.t5_num_buckets)
                   : attn_mods_smem_bytes(&a->mods));
    return attn_block_launch(a, (const void *)v->fn, block_m, 128 * wg, smem, (cudaStream_t)stream,
                             args);
}
