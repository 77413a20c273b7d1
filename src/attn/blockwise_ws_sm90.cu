/*
 * blockwise_ws_sm90.cu — attention at head dim 128 on Hopper (sm_90a) with
 * warp specialisation, for the masks that need no tile list: all-visible ones
 * (mask.h's all_visible: dense, padded and packed batches, Lq != Lk), the
 * causal mask (mask.h's causal) and analytic bands (mask.h's band: sliding
 * and two-sided windows, within:L:R on a full part), bottom-right alignment
 * included, fp16 and bf16, grouped-query heads read in place, with no
 * modifier, a soft cap, ALiBi (not on a band) or both (mods.cuh's
 * definitions; ws_apply_mods). Everything else (other masks, T5 and tensor
 * biases, ALiBi on a band, other head dims, split masks) stays on
 * blockwise_sm90.cu, whose contract this kernel keeps: online softmax in
 * the log2 domain, rows with nothing visible and rows past a sequence write
 * zeros, keys past a sequence masked out of S and their V rows zeroed before
 * P V (the memory there may hold NaN, and P = 0 times NaN is NaN).
 *
 * Why a second kernel. At head dim 128 blockwise_sm90.cu ran 470-526 TFLOP/s
 * on an H200 where cuDNN's SDPA runs 590-660: its consumer warpgroups issue
 * the copies themselves and meet at a CTA barrier every 64-key tile, so the
 * tensor pipe idles while the slowest warpgroup reaches it. The structure
 * here is FlashAttention-3's (read for ideas, written anew):
 *
 *   one persistent CTA per SM (384 threads), walking work items (128 query
 *   rows of one head and batch entry) in grid.cuh's order: warpgroup 0 is the
 *   producer, which gives its registers away (setmaxnreg 40) and whose one
 *   elected thread moves each item's Q and every 128-key K and V tile by the
 *   copy engine (TMA) into a ring of two stages, each with a full and an
 *   empty mbarrier; warpgroups 1 and 2 are the consumers (setmaxnreg 224),
 *   each owning 64 of an item's 128 query rows:
 *     S = Q K^T   m64n128k16, Q and K from shared memory (Q in registers as
 *                 blockwise_sm90.cu holds it would cost 32 more registers a
 *                 thread beside O, S and P: 64 + 64 + 32 of the 224);
 *     softmax     online, log2 domain, the scale folded into the exponent's
 *                 FFMA; only the tiles that reach past a row's last key
 *                 (the sequence's end, or the causal diagonal) are masked,
 *                 by index compare;
 *     O += P V    m64n128k16, P from registers (the accumulator of S packed
 *                 in place into A fragments), V MN-major from shared memory.
 *   Intra-warpgroup overlap: iteration i issues S_i, then P_{i-1} V_{i-1},
 *   waits for S_i alone and takes its row maxima while the product runs
 *   (inside a branch of its own: ptxas hoists a wgmma wait to the top of
 *   its basic block); after the second wait come the exponentials, O's
 *   rescale and P_i's pack, in one block, which ptxas interleaves.
 *   Inter-warpgroup ping-pong: each consumer issues its products only after
 *   the other has issued its own (two named barriers), so that one's softmax
 *   runs while the other's products hold the tensor pipe.
 *
 * Persistence. With one CTA a work item, a CTA of a short row (causal at
 * 2048 keys walks 1-16 tiles) paid its prologue (barriers, Q, the first K/V
 * tiles) and its output store in the open. Here the ring and its parities
 * run on across a CTA's items (g numbers its tiles), and Q has two buffers,
 * which items take in turn: the producer loads an item's Q while the one
 * before it runs, and each consumer stages its output in its half of its
 * item's own buffer (every S of the item is done by then), which it then
 * releases for the item after next. Items with nothing to compute (rows
 * past a sequence, no visible key) touch no barrier but the item ring's,
 * and the consumers write their zeros. The consumers' turns run on across
 * items without a break: the turn that issues an item's S_0 also issues the
 * previous item's last P V, and the previous item's output is stored while
 * S_0 runs (ws_consume), so that an item costs one turn a tile. Against
 * the kernel that gave that last P V a turn of its own and stored after it:
 * causal 0.9-3.2% faster at 1024-8192 keys, dense unchanged
 * (bench/results/attention-ws-pipe-2026-11-26-h100.txt).
 *
 * The causal and band variants draw their items, heaviest first, from a
 * counter (grid.cuh's attn_work_draw): the producer draws an item's
 * successor as the item starts and hands each item to the consumers
 * through a two-slot ring (work_lin, with its full and empty barriers), the
 * end as -1. Counting tiles on 132 SMs, causal (8, 32, 2048) gave the
 * busiest CTA 1.031 times the mean under the static split this replaces
 * (units of a heavy row block and its light mirror, unit u to CTA u mod the
 * grid: 2048 units, 15.5 a CTA), 1.012 under a greedy split in that zigzag
 * order, 1.001 drawn in descending order; causal 4096 and 8192 likewise
 * 1.031 against 1.004 and 1.002. Per-entry lengths are not weighed.
 * Measured against the static split on an H200, each side round-robin with
 * cuDNN in one process (bench/results/attention-ws-draw-2026-11-26-h200.txt),
 * cuDNN's time over the kernel's went from 0.978-0.980 to 1.006-1.007 at
 * GQA causal (8, 32, 2048), from 0.980-0.984 to 1.008-1.020 at MHA, from
 * 1.075 to 1.109-1.116 at GQA causal (1, 32, 8192) and from 1.078-1.080 to
 * 1.096-1.115 at MHA, the last with sections of three quarters of the L2
 * (attention.c). The all-visible variant, whose items all cost the same,
 * takes every gridDim.x-th and carries none of the draw's code: drawing
 * there, or only carrying the code, cost it 1-1.5% through ptxas's
 * schedule of the tile loop, which is now the static split's instruction
 * for instruction.
 *
 * The last tile of a sequence may bring rows past its keys: the producer warp
 * waits for that V tile itself (on a barrier of its own), zeroes those rows,
 * and only then completes the stage's full barrier. Q rows past the sequence
 * are computed and never stored (store_output writes zeros there).
 *
 * Causal: an item's keys end at its last live row's diagonal (row + off + 1,
 * off = len_k - len_q under bottom-right alignment, 0 under top-left), so no
 * tile past the diagonal is loaded; tiles crossing it are masked by index.
 * The heavy-first order of grid.cuh applies (attention.c sets it from the
 * mask's row imbalance). A band (left, right) reads the keys from its
 * item's first row's first visible key (row0 + off - left, down to a
 * multiple of 128) to its last live row's last (+ right): producer and
 * consumers walk the same tiles from there (ws_key_range), and tiles that
 * reach before a row's first key are masked on that side too
 * (ws_mask_before). The band variant is a template instance of its own, so
 * the dense and causal ones carry none of its code. The modifiers (ALiBi,
 * the soft cap) of an item's head sit in shared memory, one copy a consumer
 * and an item's parity (ws_mods), written at the item's start.
 *
 * Measured on an H100 against blockwise_sm90.cu in one process
 * (bench/results/attention-ws-2026-11-26-h100.txt, one CTA an item then):
 * 557-648 TFLOP/s against 394-544 over dense, causal and GQA causal at
 * 2048-8192 keys, fp16 and bf16. Persistence, against the same kernel one
 * CTA an item (bench/results/attention-ab-2026-11-26-h100.txt): no case
 * moved beyond the 2-5% that the order of the runs moves it; it stays for
 * the prologue it hides where rows are short. Against cuDNN's SDPA in
 * compare_attention.py's suite B on an H100, both timed round-robin in one
 * loop (bench/results/attention-2026-11-27-h100.json): 0.990-1.000 of its
 * speed dense at 4096-8192 keys, 1.058-1.088 causal and GQA causal at
 * 4096-8192, 0.996 on GQA causal (8, 32, 2048), where it read 0.91 before
 * the items were pipelined and 0.975 before they were drawn. The dense gap
 * is not the grid's last round of items: at item counts that fill it
 * exactly (heads 33 for 32) the ratio to cuDNN is the same, and cuDNN runs
 * 132 persistent CTAs too. Nsight Compute on
 * dense (4, 16, 4096) finds the same wgmma count in 1.07x cuDNN's cycles,
 * with fewer instructions: the tensor pipe busy 69% of the time against
 * 73%, the gap being when the warpgroups' products are issued, not how
 * much either side computes
 * (bench/results/attention-ws-dense-gap-2026-11-26-h100.txt). A per-tile
 * timeline of both consumers (clock64;
 * bench/results/attention-ws-timeline-2026-11-26-h100.txt) puts the dense
 * period at ~3000 cycles for 2048 of tensor work: it is one warpgroup's
 * chain, its issue (the tensor pipe takes the 16 wgmma no faster) and a
 * softmax of ~1700 cycles, where the other warpgroup's, run while nothing
 * is issued beside it, takes ~1200. Exponentials on the FMA pipe, a tree
 * for the row maxima, FlashAttention-3's rescale between the two issues and
 * an earlier K wait were all slower; testing K_i's and V_{i-1}'s barriers
 * together (mbar_wait_both) gained 0.2-0.9%, and running the exponentials
 * after the P V wait, in one basic block with O's rescale (now without its
 * skip) and P's pack, 1.7-4.2%: the FMULs and conversions fill the MUFU
 * ops' stalls where they had followed them. Tiles of 160 keys for the
 * all-visible variant (FlashAttention-3 takes 176 there) were slower:
 * 1-3% at 2048-4096 keys, 19% at 1024
 * (bench/results/attention-ws-wide-tiles-2026-11-27-h100.txt).
 * At head dim 64 the same kernel (with P V summing the rows) was slower
 * than blockwise_sm90.cu's settled maxima wherever rows are short or the
 * mask dense (bench/results/attention-ws-d64-left-out-2026-11-26-h100.txt),
 * so it serves head dim 128 alone.
 * Bands, ALiBi and the soft cap here rather than on blockwise_sm90.cu:
 * window:4096:0 over 16384 keys 2.00 -> 1.6-1.7 ms, ALiBi causal (1, 32,
 * 8192) 1.34 -> 1.05-1.09, soft cap (4, 16, 4096) 1.68 -> 1.47-1.49.
 */
#include "attn/attn.h"
#include "attn/grid.cuh"
#include "attn/mods.cuh"
#include "attn/select.h"
#include "attn/sm90.cuh"
#include "core/hopper.cuh"
#include "core/launch.cuh"
#include "core/ptx.cuh"

#include <cuda_runtime.h>

#define WS_D 128
#define WS_BLOCK_M 128                 /* query rows of a CTA (64 per consumer warpgroup) */
#define WS_BLOCK_N 128                 /* keys of a K/V tile */
#define WS_Q_TILE (64 * WS_D * 2)      /* one consumer's Q rows, two 8 KB column blocks */
#define WS_KV_BLOCK (WS_BLOCK_N * 128) /* one 64-element column block of a K/V tile */
#define WS_KV_TILE (WS_BLOCK_N * WS_D * 2)
#define WS_CONSUMERS 256 /* threads of the two consumer warpgroups */
/* Two Q buffers (which also stage the output), two K and two V stages,
 * thirteen mbarriers (104 bytes of 128), the consumers' modifiers (4 x 16
 * bytes) and the item ring (four mbarriers, two ints) in another 128; 1024
 * bytes of slack to align the base: 197888 bytes, select.h's figure, which
 * the selector checks against the device. */
#define WS_SMEM ATTN_WS_SMEM_BYTES
static_assert(WS_SMEM >= 4 * WS_Q_TILE + 4 * WS_KV_TILE + 1024 + 128 + 64 + 32 + 8,
              "select.h's figure");

/* The producer's and the consumers' registers per thread: 40 * 128 + 224 *
 * 256 = 62464 of the 64512 (168 a thread of 384) that __launch_bounds__(384,
 * 1) leaves. The producer walks the work items (their order, sequence and
 * key range), which at 24 spilled 52 bytes; the consumers' code reaches
 * register 190 whether given 224 or 240. ptxas -v shows no spill. */
#define WS_PRODUCER_REGS 40
#define WS_CONSUMER_REGS 224

/* S = Q K^T for one consumer warpgroup: eight k16 steps, 32 bytes along a
 * 128-byte row each, four to a column block (8 KB in the 64-row Q tile, 16
 * KB in the 128-row K tile). */
template <int BF16>
static __device__ __forceinline__ void ws_issue_scores(float (&s)[64], uint64_t q, uint64_t k)
{
#pragma unroll
    for (int ks = 0; ks < WS_D / 16; ks++) {
        const uint32_t in_row = (uint32_t)(ks & 3) * 32;
        wgmma_ss_n128<BF16>(s, desc_at(q, (ks >> 2) * SM90_BLOCK_BYTES + in_row),
                            desc_at(k, (ks >> 2) * WS_KV_BLOCK + in_row), ks > 0);
    }
}

/* O += P V: eight k16 steps over the tile's 128 keys, 16 rows (2048 bytes)
 * down both column blocks of V each. */
template <int BF16>
static __device__ __forceinline__ void ws_issue_pv(float (&o)[64], const uint32_t (&p)[8][4],
                                                   uint64_t v)
{
#pragma unroll
    for (int kk = 0; kk < WS_BLOCK_N / 16; kk++)
        wgmma_rs<WS_D, BF16>(o, p[kk], desc_at(v, kk * 2048));
}

/* Scores of keys past a row's last visible key (lim: rows g and g + 8 of the
 * thread) to -inf; key0: the tile's first key. A negative softmax scale flips
 * the scores first, so that the maxima stay maxima. */
static __device__ __forceinline__ void ws_sign_and_mask(float (&s)[64], bool negate, bool masked,
                                                        int key0, const int (&lim)[2], int t)
{
    if (negate) {
#pragma unroll
        for (int i = 0; i < 64; i++)
            s[i] = -s[i];
    }
    if (masked) {
#pragma unroll
        for (int j = 0; j < 16; j++) {
#pragma unroll
            for (int e = 0; e < 2; e++) {
                const int key = key0 + 8 * j + 2 * t + e;
                if (key > lim[0]) s[4 * j + e] = -INFINITY;
                if (key > lim[1]) s[4 * j + 2 + e] = -INFINITY;
            }
        }
    }
}

/* Scores of keys before a row's first visible key to -inf, for bands with
 * a left side (ws_sign_and_mask takes the right side). lo: that key for the
 * thread's row g, unclamped but for [-2^30, len_k] (ws_row_first); row g +
 * 8's is lo + 8 (keys are never negative, and those at or past len_k are
 * masked on the right). */
static __device__ __forceinline__ void ws_mask_before(float (&s)[64], int key0, int lo, int t)
{
#pragma unroll
    for (int j = 0; j < 16; j++) {
#pragma unroll
        for (int e = 0; e < 2; e++) {
            const int key = key0 + 8 * j + 2 * t + e;
            if (key < lo) s[4 * j + e] = -INFINITY;
            if (key < lo + 8) s[4 * j + 2 + e] = -INFINITY;
        }
    }
}

/* The modifiers this kernel serves, from mods.cuh's context: ALiBi and the
 * soft cap, in mods.cuh's units (out folded in), of one work item's head.
 * Its copies live in shared memory after the mbarriers (one a consumer and
 * item parity: ws_consume) and are read a tile at a time, so that they hold
 * none of the consumers' registers across the loop. */
typedef struct ws_mods {
    float mul;   /* raw q.k to the cap's argument (scale / cap), or without a cap to
                    out units (scale * out) */
    float cap;   /* the cap times out; 0: no cap */
    float slope; /* ALiBi's slope times out; 0: none */
    int off;     /* a row's position minus the row (bottom-right alignment) */
} ws_mods;

static __device__ __forceinline__ ws_mods ws_mods_of(const attn_mod_ctx &c, int off)
{
    ws_mods m;
    m.cap = c.cap > 0.0f ? c.cap : 0.0f;
    m.mul = c.cap > 0.0f ? c.scale * c.inv_cap : c.scale * c.out;
    m.slope = c.kind == STOF_BIAS_ALIBI ? c.slope : 0.0f;
    m.off = off; /* the mask's (mask_tiles_offset), which the causal mask's LEFT form needs */
    return m;
}

/* mods.cuh's attn_apply_mods for ALiBi and the cap alone (its T5 and tensor
 * paths cost the consumers registers they do not have): raw q.k becomes
 * (cap(raw scale) - slope |key - query position|) out. row_g: the
 * thread's row g; col_t: the key of column 2t of n-block 0. The tests are
 * uniform: one branch a tile each. LEFT: every visible key is at or left
 * of its query's position (causal), so that |key - position| is position -
 * key, and the bias is an FADD and an FFMA a score, no temporary (the
 * absolute value's made the causal variant spill). ALIBI 0: no ALiBi code
 * (the band variant: even the form of LEFT spilled there, so a band with
 * ALiBi stays on blockwise_sm90.cu: select.c's attn_ws_analytic). */
template <bool LEFT, bool ALIBI>
static __device__ __forceinline__ void ws_apply_mods(float (&s)[64], const ws_mods *m, int row_g,
                                                     int col_t)
{
    const float cap = m->cap, mul = m->mul, slope = m->slope;
    if (cap != 0.0f) {
#pragma unroll
        for (int i = 0; i < 64; i++)
            s[i] = cap * tanh_approx(s[i] * mul);
    } else {
#pragma unroll
        for (int i = 0; i < 64; i++)
            s[i] *= mul;
    }
    if (!ALIBI || slope == 0.0f) return;
    const int rel0 = col_t - (row_g + m->off); /* key - position, element 0 of n-block 0 */
    if (LEFT) {
        const float r0 = slope * (float)rel0;
#pragma unroll
        for (int j = 0; j < 16; j++)
#pragma unroll
            for (int e = 0; e < 4; e++)
                s[4 * j + e] = fmaf(slope, (float)ATTN_MOD_DELTA(j, e), s[4 * j + e] + r0);
    } else {
        const float base = (float)rel0;
#pragma unroll
        for (int j = 0; j < 16; j++)
#pragma unroll
            for (int e = 0; e < 4; e++)
                s[4 * j + e] =
                    fmaf(-slope, fabsf(base + (float)ATTN_MOD_DELTA(j, e)), s[4 * j + e]);
    }
}

/* What the mask is to the kernel (a template parameter: the all-visible and
 * causal variants carry no band code). */
enum { WS_MASK_ALL = 0, WS_MASK_CAUSAL = 1, WS_MASK_BAND = 2 };

/* Whether a variant's CTAs draw their items (grid.cuh's attn_work_draw),
 * heaviest first, or take every gridDim.x-th: the rows of an all-visible
 * mask cost the same, and its variant carries none of the draw's code. */
template <int MASK> static constexpr bool ws_draws = MASK != WS_MASK_ALL;

/* A row's last visible key (clamped to [-1, len_k - 1]) for the causal and
 * band variants, and its first (band; clamped to [-2^30, len_k]). */
template <int MASK>
static __device__ __forceinline__ int ws_row_last(const mask_tiles *t, int row, int off, int len_k)
{
    const int64_t right = MASK == WS_MASK_BAND ? t->band_right : 0;
    return (int)max((int64_t)-1, min((int64_t)len_k - 1, (int64_t)row + off + right));
}

static __device__ __forceinline__ int ws_row_first(const mask_tiles *t, int row, int off, int len_k)
{
    return (int)min((int64_t)len_k, max(-((int64_t)1 << 30), (int64_t)row + off - t->band_left));
}

/* A 1 the compiler cannot see through: the branch it guards ends a basic
 * block, which keeps ptxas from hoisting the next wgmma wait above the work
 * inside it. */
static __device__ __forceinline__ int ws_opaque_one(void)
{
    int x;
    asm volatile("mov.u32 %0, 1;\n" : "=r"(x));
    return x;
}

/* Shared memory: two Q buffers (items alternate between them; a buffer
 * holds one 64-row tile per consumer, and stages that consumer's output of
 * its item once the item's last S is done), two K and two V stages, and the
 * mbarriers. */
typedef struct ws_layout {
    uint32_t q, k, v;
    uint32_t q_full;  /* [2] Q buffer landed */
    uint32_t q_empty; /* [2] Q buffer free: both consumers stored their output from it */
    uint32_t k_full;  /* [2] K stage landed */
    uint32_t k_empty; /* [2] K stage read by both consumers */
    uint32_t v_full;  /* [2] V stage landed (tail rows zeroed) */
    uint32_t v_empty; /* [2] V stage read by both consumers */
    uint32_t v_raw;   /* the last V tile of an item landed, not yet zeroed */
    uint32_t mods;    /* [2 consumers][2 item parities] ws_mods (MODS variants) */
    uint32_t work_full;  /* [2] work_lin[i] written by the producer */
    uint32_t work_empty; /* [2] work_lin[i] read by both consumers */
    uint32_t work_lin;   /* [2] ints: the CTA's items in turn, -1 past its last */
} ws_layout;

/* The layout in this CTA's dynamic shared memory (its base aligned to 1024
 * bytes, as the 128-byte swizzle wants), computed by each role for itself. */
static __device__ __forceinline__ ws_layout ws_layout_of(void)
{
    extern __shared__ __align__(1024) unsigned char smem_raw[];
    const uint32_t base = (smem_addr(smem_raw) + 1023u) & ~1023u;
    ws_layout sm;
    sm.q = base;
    sm.k = sm.q + 4 * WS_Q_TILE;
    sm.v = sm.k + 2 * WS_KV_TILE;
    const uint32_t bars = sm.v + 2 * WS_KV_TILE;
    sm.q_full = bars;
    sm.q_empty = bars + 16;
    sm.k_full = bars + 32;
    sm.k_empty = bars + 48;
    sm.v_full = bars + 64;
    sm.v_empty = bars + 80;
    sm.v_raw = bars + 96;
    sm.mods = bars + 128;
    sm.work_full = bars + 192;
    sm.work_empty = bars + 208;
    sm.work_lin = bars + 224;
    return sm;
}

/* Row blocks of 128 rows a (head, batch entry) pair. */
static __device__ __forceinline__ int ws_row_blocks(const attn_launch &a)
{
    return (a.lq + WS_BLOCK_M - 1) / WS_BLOCK_M;
}

/* The ring of the CTA's items: the producer's t-th item (t = 0, 1, ...)
 * handed over (lin: attn_item_order's linear index; -1: no more), and taken
 * by a consumer thread, which frees the slot at once. */
static __device__ __forceinline__ void ws_work_put(const ws_layout &sm, int t, int lin)
{
    const int slot = t & 1;
    if (t >= 2) mbar_wait(sm.work_empty + 8 * slot, ((t >> 1) + 1) & 1);
    asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(sm.work_lin + 4 * slot), "r"(lin) : "memory");
    mbar_arrive(sm.work_full + 8 * slot);
}

static __device__ __forceinline__ int ws_work_take(const ws_layout &sm, int t)
{
    const int slot = t & 1;
    int lin;
    mbar_wait(sm.work_full + 8 * slot, (t >> 1) & 1);
    asm volatile("ld.shared.b32 %0, [%1];\n" : "=r"(lin) : "r"(sm.work_lin + 4 * slot) : "memory");
    mbar_arrive(sm.work_empty + 8 * slot);
    return lin;
}

/* One work item: 128 query rows of one (head, batch entry), and the keys
 * they read. */
typedef struct ws_item {
    attn_seq s;
    int h, b, row0;
    int off;  /* the analytic row offset of the mask's own lengths (mask_tiles_offset) */
    int kbeg; /* the first key read (a multiple of 128) */
    int n;    /* 128-key tiles read from there */
} ws_item;

/* The keys an item reads, tiles of 128 from w->kbeg: all-visible, every key
 * of the sequence; causal and bands, from the first live row's first
 * visible key to the last live row's last one (mask.h, band; off =
 * len_k - len_q under bottom-right alignment, 0 under top-left). 64-bit
 * sums: an open side is 2^40. Sets w->off, w->kbeg and w->n. */
template <int MASK>
static __device__ __forceinline__ void ws_key_range(const attn_launch *a, ws_item *w)
{
    const mask_tiles *t = &a->tiles;
    const int bi = t->bm > 1 ? w->b : 0;
    /* mask_tiles_offset written out: calling it changes this kernel's code
     * as ptxas schedules it, which has not been timed */
    w->off = t->align_end ? t->len_k[bi] - t->len_q[bi] : 0;
    int64_t beg = 0, end = w->s.len_k;
    if (MASK != WS_MASK_ALL) {
        const int64_t right = MASK == WS_MASK_BAND ? t->band_right : 0;
        const int64_t last = (int64_t)min(w->row0 + WS_BLOCK_M, w->s.len_q) - 1 + w->off;
        end = min(end, last + right + 1);
    }
    if (MASK == WS_MASK_BAND) {
        beg = max((int64_t)0, (int64_t)w->row0 + w->off - t->band_left);
        beg -= beg % WS_BLOCK_N;
    }
    w->kbeg = (int)beg;
    w->n = end > beg ? (int)((end - beg + WS_BLOCK_N - 1) / WS_BLOCK_N) : 0;
}

/* Work item lin (attn_item_order over row_blocks row blocks a pair). */
template <int MASK>
static __device__ __forceinline__ ws_item ws_item_of(const attn_launch *a, int lin, int row_blocks)
{
    ws_item w;
    int x;
    attn_item_order(a, lin, row_blocks, ws_draws<MASK>, &w.h, &w.b, &x);
    w.row0 = x * WS_BLOCK_M;
    w.s = attn_seq_of(a, w.b, w.h);
    ws_key_range<MASK>(a, &w);
    return w;
}

/* An item with keys to read and rows to compute; the others only write
 * zeros (rows with nothing visible) or nothing (rows past the sequence's
 * stored rows), and touch no barrier past the item ring, so every role
 * skips them alike. */
static __device__ __forceinline__ bool ws_item_live(const ws_item *w)
{
    return w->n > 0 && w->row0 < w->s.len_q;
}

/* One live item's loads (ws_produce): Q into buffer live & 1, then its K
 * and V tiles from ring tile g on (g advanced past them). */
static __device__ __forceinline__ void ws_produce_item(const ws_layout &sm, const ws_item &w,
                                                       const attn_launch &a,
                                                       const CUtensorMap *q_map,
                                                       const CUtensorMap *k_map,
                                                       const CUtensorMap *v_map, int live, int &g,
                                                       uint32_t &raw_phase)
{
    const int lane = threadIdx.x & 31;
    const int kv_y = w.s.k_row0, kv_h = w.s.kv_head, kv_w = a.cu_k ? 0 : w.b;
    if (lane == 0) {
        /* Buffer qb's previous item (live - 2) stored by both consumers. */
        const int qb = live & 1;
        const uint32_t q_full = sm.q_full + 8 * qb, q_dst = sm.q + qb * 2 * WS_Q_TILE;
        if (live >= 2) mbar_wait(sm.q_empty + 8 * qb, ((live >> 1) + 1) & 1);
        mbar_arrive_expect_tx(q_full, 2 * WS_Q_TILE);
        const int q_w = a.cu_q ? 0 : w.b;
#pragma unroll
        for (int c = 0; c < 2; c++)
#pragma unroll
            for (int cb = 0; cb < 2; cb++)
                tma_load_4d(q_dst + c * WS_Q_TILE + cb * SM90_BLOCK_BYTES, q_map, q_full,
                            cb * 64, w.s.q_row0 + w.row0 + c * 64, w.h, q_w);
    }
    for (int i = 0; i < w.n; i++, g++) {
        const int st = g & 1, key0 = w.kbeg + i * WS_BLOCK_N;
        const bool tail = key0 + WS_BLOCK_N > w.s.len_k;
        if (lane == 0) {
            /* Stage st's previous tile (g - 2) released by both consumers. */
            const uint32_t was = ((g >> 1) + 1) & 1;
            if (g >= 2) mbar_wait(sm.k_empty + 8 * st, was);
            mbar_arrive_expect_tx(sm.k_full + 8 * st, WS_KV_TILE);
            for (int cb = 0; cb < 2; cb++)
                tma_load_4d(sm.k + st * WS_KV_TILE + cb * WS_KV_BLOCK, k_map,
                            sm.k_full + 8 * st, cb * 64, kv_y + key0, kv_h, kv_w);
            if (g >= 2) mbar_wait(sm.v_empty + 8 * st, was);
            const uint32_t vbar = tail ? sm.v_raw : sm.v_full + 8 * st;
            mbar_arrive_expect_tx(vbar, WS_KV_TILE);
            for (int cb = 0; cb < 2; cb++)
                tma_load_4d(sm.v + st * WS_KV_TILE + cb * WS_KV_BLOCK, v_map, vbar, cb * 64,
                            kv_y + key0, kv_h, kv_w);
        }
        __syncwarp();
        if (tail) {
            /* The one tile of the item reaching past the keys (its last):
             * its rows there to zeros before the consumers may read it. */
            mbar_wait(sm.v_raw, raw_phase);
            raw_phase ^= 1;
            zero_tail_rows<WS_D, 32, WS_BLOCK_N>(sm.v + st * WS_KV_TILE, w.s.len_k - key0,
                                                 lane);
            fence_proxy_async();
            __syncwarp();
            if (lane == 0) mbar_arrive(sm.v_full + 8 * st);
        }
    }
}

/* The producer warp: the CTA's items drawn in turn and handed to the
 * consumers (each item's successor drawn as it starts, so that the draw's
 * round trip is hidden); for each live item, Q once both consumers are
 * done with the previous item's, then its K and V tiles through the ring.
 * g numbers the CTA's tiles across items, so that the ring's stages and
 * parities run on from one item into the next. */
template <int MASK>
static __device__ __forceinline__ void ws_produce(const attn_launch &a, const CUtensorMap *q_map,
                                                  const CUtensorMap *k_map,
                                                  const CUtensorMap *v_map)
{
    const ws_layout sm = ws_layout_of();
    const int row_blocks = ws_row_blocks(a), items = row_blocks * a.heads * a.batch;
    const int lane = threadIdx.x & 31;
    if (lane == 0) {
        tma_prefetch_map(q_map);
        tma_prefetch_map(k_map);
        tma_prefetch_map(v_map);
    }
    int g = 0, live = 0;
    uint32_t raw_phase = 0;
    for (int t = 0, lin = (int)blockIdx.x;; t++) {
        if (lin >= items) lin = -1;
        if constexpr (ws_draws<MASK>)
            if (lane == 0) ws_work_put(sm, t, lin);
        if (lin < 0) break;
        int next = lin + (int)gridDim.x;
        if constexpr (ws_draws<MASK>) next = lane == 0 ? attn_work_draw(&a) : 0;
        const ws_item w = ws_item_of<MASK>(&a, lin, row_blocks);
        if (ws_item_live(&w)) {
            ws_produce_item(sm, w, a, q_map, k_map, v_map, live, g, raw_phase);
            live++;
        }
        lin = __shfl_sync(PTX_FULL_WARP, next, 0);
    }
    if constexpr (ws_draws<MASK>)
        if (lane == 0) attn_work_done(&a);
}

/* The end of an item for one consumer: its output, normalised by the row
 * sums l, staged in the consumer's half of the item's own Q buffer (every S
 * of the item is done: the next item's Q lies in the other buffer) and
 * written out; then that buffer is released to the producer, for the item
 * after next. The staging writes and reads are generic-proxy accesses that
 * the next TMA write to the buffer must follow (hence the fence). */
template <int BF16>
static __device__ __forceinline__ void ws_finish(const float (&o)[64], const float (&l)[2],
                                                 const ws_layout &sm, int buf, int c,
                                                 const attn_seq &s, const attn_launch &a,
                                                 int row_w)
{
    const int warp = (threadIdx.x >> 5) & 3, lane = threadIdx.x & 31;
    const float lsum[2] = {quad_sum(l[0]), quad_sum(l[1])};
    store_output<WS_D, BF16>(o, lsum, sm.q + buf * 2 * WS_Q_TILE + c * WS_Q_TILE, &s, &a, row_w,
                             warp * 16, lane);
    fence_proxy_async();
    mbar_arrive(sm.q_empty + 8 * buf);
}

/* Consumer warpgroup c (0 or 1): rows 64c.. of each live item, zeros for
 * the empty ones. g0 numbers the item's first tile among the CTA's (the
 * producer's g).
 *
 * The products run in turns (pingpong_wait/pass): a turn issues S_i and
 * P_{i-1} V_{i-1}. Items follow one another without a break in that
 * rhythm: the turn that issues an item's S_0 also issues the previous
 * item's last P V, and the previous item's output is normalised and stored
 * while S_0 runs (ws_finish), so that an item costs as many turns as it has
 * tiles. The CTA's last item's last P V takes a turn of its own. */
template <int BF16, int MASK, int MODS>
static __device__ __forceinline__ void ws_consume(const attn_launch &a)
{
    const ws_layout sm = ws_layout_of();
    const int row_blocks = ws_row_blocks(a);
    const int c = (threadIdx.x >> 7) - 1, warp = (threadIdx.x >> 5) & 3, lane = threadIdx.x & 31;
    const int tq = lane & 3;
    const uint64_t q_desc = opaque(sw128_desc(sm.q + c * WS_Q_TILE, 16, 1024));
    const uint64_t k_desc = opaque(sw128_desc(sm.k, 16, 1024));
    const uint64_t v_desc = opaque(sw128_desc(sm.v, WS_KV_BLOCK, 1024));
    /* With modifiers the scores leave them as natural units over |scale|,
     * signs applied, so that nothing is negated. */
    const bool negate = !MODS && a.scale_log2 < 0.0f;
    const float scale = fabsf(a.scale_log2);
    float o[64], sc[64], m[2], l[2] = {0.0f, 0.0f}, alpha[2], sum[2];
    uint32_t p[8][4];
#pragma unroll
    for (int i = 0; i < 64; i++)
        o[i] = 0.0f;
    /* The item whose last P V is still to be issued, if any: its sequence,
     * its warp's first row, its Q buffer and its last V stage. */
    bool pending = false;
    attn_seq ps;
    int p_row_w = 0, p_buf = 0, p_g = 0;
    int g0 = 0, live = 0;
    const int items = row_blocks * a.heads * a.batch;
    for (int t = 0;; t++) {
        int lin = (int)blockIdx.x + t * (int)gridDim.x;
        if constexpr (ws_draws<MASK>)
            lin = ws_work_take(sm, t);
        else if (lin >= items)
            lin = -1;
        if (lin < 0) break;
        const ws_item w = ws_item_of<MASK>(&a, lin, row_blocks);
        if (w.row0 >= w.s.store_rows) continue;
        if (!ws_item_live(&w)) {
            store_zero_rows<WS_D, WS_CONSUMERS>(&w.s, &a, w.row0, WS_BLOCK_M,
                                                (int)threadIdx.x - 128);
            continue;
        }
        const int n = w.n, kbeg = w.kbeg, buf = live & 1;
        /* The last visible key of the thread's rows g and g + 8, and the
         * least of the warpgroup's (a tile past it needs no mask); for a
         * band also the first visible key, and the greatest of the
         * warpgroup's. */
        const int row_w = w.row0 + c * 64 + warp * 16, row_g = row_w + (lane >> 2);
        const int len_k = w.s.len_k;
        int lim[2] = {len_k - 1, len_k - 1}, lim_wg = len_k - 1, lo = 0, lo_wg = 0;
        if (MASK != WS_MASK_ALL) {
            lim[0] = ws_row_last<MASK>(&a.tiles, row_g, w.off, len_k);
            lim[1] = ws_row_last<MASK>(&a.tiles, row_g + 8, w.off, len_k);
            lim_wg = ws_row_last<MASK>(&a.tiles, w.row0 + c * 64, w.off, len_k);
        }
        if (MASK == WS_MASK_BAND) {
            lo = ws_row_first(&a.tiles, row_g, w.off, len_k);
            lo_wg = ws_row_first(&a.tiles, w.row0 + c * 64 + 63, w.off, len_k);
        }
        auto needs_mask = [&](int key0) {
            return key0 + WS_BLOCK_N - 1 > lim_wg || (MASK == WS_MASK_BAND && key0 < lo_wg);
        };
        /* The item's modifiers: one thread of the warpgroup writes its copy
         * for this item's parity, which the warpgroup's barrier publishes (a
         * warp still on the previous item reads the other copy; none can be
         * two items behind, having passed the previous item's barrier). */
        const ws_mods *mods = (const ws_mods *)NULL;
        if constexpr (MODS) {
            extern __shared__ __align__(1024) unsigned char smem_raw[];
            const uint32_t at = sm.mods + (uint32_t)(c * 2 + buf) * sizeof(ws_mods);
            ws_mods *mine = (ws_mods *)(smem_raw + (at - smem_addr(smem_raw)));
            if ((threadIdx.x & 127) == 0)
                *mine = ws_mods_of(
                    attn_mod_setup(&a, &w.s, w.b, w.h, NULL, 1, attn_raw_unit(fabsf(a.scale))),
                    w.off);
            if (c == 0)
                named_bar_sync<3, 128>();
            else
                named_bar_sync<4, 128>();
            mods = mine;
        }
        /* The modifiers of the tile from key0, rows g and g + 8. */
        auto modify = [&](int key0) {
            if constexpr (MODS)
                ws_apply_mods<MASK == WS_MASK_CAUSAL, MASK != WS_MASK_BAND>(sc, mods, row_g,
                                                                            key0 + 2 * tq);
        };
        /* The band's left side, where the tile reaches before a row's first key. */
        auto mask_before = [&](int key0) {
            if (MASK == WS_MASK_BAND && key0 < lo_wg) ws_mask_before(sc, key0, lo, tq);
        };

        /* The second consumer lets the first take the first turn. */
        if (c == 1 && live == 0) pingpong_pass<WS_CONSUMERS>(c);
        const uint64_t qd = desc_at(q_desc, buf * 2 * WS_Q_TILE);
        mbar_wait(sm.q_full + 8 * buf, (live >> 1) & 1);

        /* Tile 0's turn: the previous item's last P V, then S_0; that
         * item's output leaves while S_0 runs. */
        int st = g0 & 1;
        if (pending) {
            mbar_wait_both(sm.k_full + 8 * st, (g0 >> 1) & 1, sm.v_full + 8 * (p_g & 1),
                           (p_g >> 1) & 1);
            pingpong_wait<WS_CONSUMERS>(c);
            wgmma_fence();
            ws_issue_pv<BF16>(o, p, desc_at(v_desc, (p_g & 1) * WS_KV_TILE));
            wgmma_commit();
            ws_issue_scores<BF16>(sc, qd, desc_at(k_desc, st * WS_KV_TILE));
            wgmma_commit();
            pingpong_pass<WS_CONSUMERS>(c);
            wgmma_wait<1>(); /* the last P V landed; S_0 may still run */
            reg_fence(o);
            mbar_arrive(sm.v_empty + 8 * (p_g & 1));
            ws_finish<BF16>(o, l, sm, p_buf, c, ps, a, p_row_w);
#pragma unroll
            for (int i = 0; i < 64; i++)
                o[i] = 0.0f;
        } else {
            mbar_wait(sm.k_full + 8 * st, (g0 >> 1) & 1);
            pingpong_wait<WS_CONSUMERS>(c);
            wgmma_fence();
            ws_issue_scores<BF16>(sc, qd, desc_at(k_desc, st * WS_KV_TILE));
            wgmma_commit();
            pingpong_pass<WS_CONSUMERS>(c);
        }
        wgmma_wait<0>();
        reg_fence(sc);
        mbar_arrive(sm.k_empty + 8 * st);
        m[0] = m[1] = -INFINITY;
        modify(kbeg);
        ws_sign_and_mask(sc, negate, needs_mask(kbeg), kbeg, lim, tq);
        mask_before(kbeg);
        softmax_tile<true>(sc, scale, m, alpha, sum);
        l[0] = sum[0];
        l[1] = sum[1];
        pack_p<BF16>(p, sc);

        for (int i = 1; i < n; i++) {
            const int g = g0 + i, key0 = kbeg + i * WS_BLOCK_N;
            st = g & 1;
            /* K_i, and V_{i-1}, which the producer issued before it. */
            mbar_wait_both(sm.k_full + 8 * st, (g >> 1) & 1, sm.v_full + 8 * (st ^ 1),
                           ((g - 1) >> 1) & 1);
            pingpong_wait<WS_CONSUMERS>(c);
            wgmma_fence();
            ws_issue_scores<BF16>(sc, qd, desc_at(k_desc, st * WS_KV_TILE));
            wgmma_commit();
            ws_issue_pv<BF16>(o, p, desc_at(v_desc, (st ^ 1) * WS_KV_TILE));
            wgmma_commit();
            pingpong_pass<WS_CONSUMERS>(c);
            wgmma_wait<1>(); /* S_i landed; P_{i-1} V_{i-1} may still run */
            reg_fence(sc);
            mbar_arrive(sm.k_empty + 8 * st);
            /* The softmax in two: the row maxima while P V may still run,
             * then, once it has landed, the exponentials, the rescale of
             * O and the pack of P in one basic block, so that ptxas
             * interleaves the FMULs and conversions with the MUFU ops
             * (rescale_o without its skip, a branch that would cut the
             * block). */
            float base[2];
            if (ws_opaque_one()) {
                modify(key0);
                ws_sign_and_mask(sc, negate, needs_mask(key0), key0, lim, tq);
                mask_before(key0);
                softmax_max(sc, scale, m, alpha, base);
            }
            wgmma_wait<0>(); /* O and P's registers are free from here on */
            reg_fence(o);
            mbar_arrive(sm.v_empty + 8 * (st ^ 1));
            exp_tile<true>(sc, scale, base, sum);
            rescale_o<WS_D, false>(o, alpha);
            l[0] = l[0] * alpha[0] + sum[0];
            l[1] = l[1] * alpha[1] + sum[1];
            pack_p<BF16>(p, sc);
        }
        pending = true;
        ps = w.s;
        p_row_w = row_w;
        p_buf = buf;
        p_g = g0 + n - 1;
        g0 += n;
        live++;
    }
    if (!pending) return;
    /* The CTA's last item's last P V, in a turn of its own; the second
     * consumer's is the CTA's last turn, which nobody takes over. */
    mbar_wait(sm.v_full + 8 * (p_g & 1), (p_g >> 1) & 1);
    pingpong_wait<WS_CONSUMERS>(c);
    wgmma_fence();
    ws_issue_pv<BF16>(o, p, desc_at(v_desc, (p_g & 1) * WS_KV_TILE));
    wgmma_commit();
    if (c == 0) pingpong_pass<WS_CONSUMERS>(c);
    wgmma_wait<0>();
    reg_fence(o);
    mbar_arrive(sm.v_empty + 8 * (p_g & 1));
    ws_finish<BF16>(o, l, sm, p_buf, c, ps, a, p_row_w);
}

/* MASK: WS_MASK_*; MODS: scores go through mods.cuh's modifiers (ALiBi, a
 * soft cap) in natural units and over |scale| (out = 1 / |scale|) before
 * the mask and softmax; 0: the plain variants, which carry none of that
 * code. */
template <int BF16, int MASK, int MODS>
__global__ void __launch_bounds__(384, 1)
    attn_ws_sm90_kernel(const attn_launch a, const __grid_constant__ CUtensorMap q_map,
                        const __grid_constant__ CUtensorMap k_map,
                        const __grid_constant__ CUtensorMap v_map)
{
    stof_grid_launch_dependents();
    stof_grid_wait(); /* launched with PDL: the inputs are the previous kernel's outputs */
    const ws_layout sm = ws_layout_of();
    if (threadIdx.x == 0) {
        mbar_init(sm.v_raw, 1);
#pragma unroll
        for (int st = 0; st < 2; st++) {
            mbar_init(sm.q_full + 8 * st, 1);
            mbar_init(sm.q_empty + 8 * st, WS_CONSUMERS);
            mbar_init(sm.k_full + 8 * st, 1);
            mbar_init(sm.v_full + 8 * st, 1);
            mbar_init(sm.k_empty + 8 * st, WS_CONSUMERS);
            mbar_init(sm.v_empty + 8 * st, WS_CONSUMERS);
            mbar_init(sm.work_full + 8 * st, 1);
            mbar_init(sm.work_empty + 8 * st, WS_CONSUMERS);
        }
        fence_mbar_init();
    }
    __syncthreads();

    if (threadIdx.x < 128) {
        setmaxnreg_dec<WS_PRODUCER_REGS>();
        if (threadIdx.x < 32) ws_produce<MASK>(a, &q_map, &k_map, &v_map);
        return;
    }
    setmaxnreg_inc<WS_CONSUMER_REGS>();
    ws_consume<BF16, MASK, MODS>(a);
}

/* ---------------------------------------------------------------- host */

typedef void (*ws_kernel_fn)(const attn_launch, const CUtensorMap, const CUtensorMap,
                             const CUtensorMap);
typedef struct ws_variant {
    int bf16, mask, mods;
    ws_kernel_fn fn;
} ws_variant;

static const ws_variant ws_variants[] = {
    {0, WS_MASK_ALL, 0, attn_ws_sm90_kernel<0, WS_MASK_ALL, 0>},
    {1, WS_MASK_ALL, 0, attn_ws_sm90_kernel<1, WS_MASK_ALL, 0>},
    {0, WS_MASK_CAUSAL, 0, attn_ws_sm90_kernel<0, WS_MASK_CAUSAL, 0>},
    {1, WS_MASK_CAUSAL, 0, attn_ws_sm90_kernel<1, WS_MASK_CAUSAL, 0>},
    {0, WS_MASK_BAND, 0, attn_ws_sm90_kernel<0, WS_MASK_BAND, 0>},
    {1, WS_MASK_BAND, 0, attn_ws_sm90_kernel<1, WS_MASK_BAND, 0>},
    {0, WS_MASK_ALL, 1, attn_ws_sm90_kernel<0, WS_MASK_ALL, 1>},
    {1, WS_MASK_ALL, 1, attn_ws_sm90_kernel<1, WS_MASK_ALL, 1>},
    {0, WS_MASK_CAUSAL, 1, attn_ws_sm90_kernel<0, WS_MASK_CAUSAL, 1>},
    {1, WS_MASK_CAUSAL, 1, attn_ws_sm90_kernel<1, WS_MASK_CAUSAL, 1>},
    {0, WS_MASK_BAND, 1, attn_ws_sm90_kernel<0, WS_MASK_BAND, 1>},
    {1, WS_MASK_BAND, 1, attn_ws_sm90_kernel<1, WS_MASK_BAND, 1>}};
#define WS_NVARIANTS ((int)(sizeof ws_variants / sizeof ws_variants[0]))

static int ws_smem(const ws_variant *v)
{
    (void)v;
    return WS_SMEM;
}

extern "C" stof_status attn_ws_sm90_prepare(void)
{
    static unsigned long long done; /* bit per device ordinal */
    return attn_opt_in_once(&done, ws_variants, WS_NVARIANTS, ws_smem, NULL);
}

extern "C" stof_status attn_ws_sm90_run(const attn_launch *a, void *stream)
{
    const int mods = attn_mods_class(a->mods.bias_kind, a->mods.softcap);
    const int analytic = attn_ws_analytic(a->tiles.all_visible, a->tiles.causal, a->tiles.band,
                                          a->split, a->mods.bias_kind);
    STOF_REQUIRE(attn_ws_serves(a->head_dim, analytic, mods), STOF_ERR_UNSUPPORTED,
                 "the warp-specialised sm_90 attention kernel serves head dim 128, all-visible, "
                 "causal or band masks (bands without ALiBi), no bias, ALiBi or a soft cap, no "
                 "split (asked: head dim %d, all-visible %d, causal %d, band %d, split %d, "
                 "modifiers %d (2: a T5 or tensor bias))",
                 a->head_dim, a->tiles.all_visible, a->tiles.causal, a->tiles.band, a->split, mods);
    const int mask = a->tiles.all_visible ? WS_MASK_ALL
                     : a->tiles.causal    ? WS_MASK_CAUSAL
                                          : WS_MASK_BAND;
    const ws_variant *v = NULL;
    for (int i = 0; i < WS_NVARIANTS && !v; i++)
        if (ws_variants[i].bf16 == a->bf16 && ws_variants[i].mask == mask &&
            ws_variants[i].mods == (mods != ATTN_MODS_NONE))
            v = &ws_variants[i];
    STOF_REQUIRE(v, STOF_ERR_INTERNAL, "warp-specialised sm_90 attention: no variant");
    STOF_TRY(attn_ws_sm90_prepare());
    CUtensorMap q_map, k_map, v_map;
    const int64_t q_rows = a->cu_q ? a->tq : a->lq;
    STOF_TRY(attn_sm90_encode_rows(&q_map, "q", a, a->q, q_rows, a->heads, a->cu_q ? 1 : a->batch,
                                   a->q_sb, a->q_sh, a->q_sp, 64));
    STOF_TRY(encode_kv(&k_map, "k", a, a->k, a->k_sb, a->k_sh, a->k_sp, WS_BLOCK_N));
    STOF_TRY(encode_kv(&v_map, "v", a, a->v, a->v_sb, a->v_sh, a->v_sp, WS_BLOCK_N));
    void *args[4] = {(void *)a, (void *)&q_map, (void *)&k_map, (void *)&v_map};
    const int64_t row_blocks = (a->lq + WS_BLOCK_M - 1) / WS_BLOCK_M;
    return attn_persistent_launch(a, (const void *)v->fn, row_blocks, 384, WS_SMEM,
                                  (cudaStream_t)stream, args);
}
