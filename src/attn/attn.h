/*
 * attn.h — internals of the sparse attention part: the launch description
 * shared by the host dispatcher (attention.c) and the two GPU kernels, and
 * the entry points of those kernels.
 *
 * One description serves both layouts. Element (b, h, i, :) of q lives at
 *     q + b * q_sb + h * q_sh + (cu_q ? cu_q[b] : 0) * q_sp + i * q_sl
 * so the padded layout [B, H, L, D] (any strides) has cu_q == NULL, and the
 * packed layout [T, H, D] has q_sb == 0, q_sp = the token stride and cu_q the
 * device prefix sums. The same holds for k, v (cu_k) and out (cu_q).
 *
 * A mask stored split by residue class (split = d > 1, mask.h) runs each
 * class as a sequence: the kernels see heads = H * d, head hv standing for
 * real head hv / d and class p = hv % d, whose row i is token i * d + p. So
 * q_sl = d * q_sp, the class's first row lies p * q_sp further, and lq, lk
 * are the classes' lengths. Without a split, d = 1 and q_sl = q_sp.
 */
#ifndef STOF_ATTN_H
#define STOF_ATTN_H

#include "mask/mask.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Most T5 buckets past the exact ones (thresholds the kernel compares
 * distances with) and the largest max_distance the GPU serves (its table of
 * 2 * max_distance + 1 biases sits in shared memory). */
#define ATTN_T5_MAX_LEVELS 64
#define ATTN_T5_MAX_DISTANCE 2048
/* The most buckets such a table has: n a direction, n - n / 2 - 1 of them
 * logarithmic (at most ATTN_T5_MAX_LEVELS), so n <= 2 (levels + 1); two
 * directions. */
#define ATTN_T5_MAX_BUCKETS (4 * (ATTN_T5_MAX_LEVELS + 1))

/* The score modifiers of one launch (stof.h's bias_kind and softcap). */
typedef struct attn_mods {
    int bias_kind;        /* STOF_BIAS_* */
    float softcap;        /* > 0: cap(x) = softcap tanh(x / softcap) */
    const void *bias;     /* T5 table, ALiBi slopes (F32) or the tensor */
    int64_t bias_st[4];   /* element strides: T5 (bucket, head); ALiBi (head); tensor (b, h,
                             i, j), 0 on broadcast dimensions */
    int bias_dtype;       /* the tensor's stof_dtype */
    int bias_lq, bias_lk; /* the tensor's Lq, Lk */
    int t5_bidirectional, t5_num_buckets, t5_max_distance;
    int t5_exact;                       /* buckets taken one distance each */
    int t5_levels;                      /* thresholds in t5_thr */
    int32_t t5_thr[ATTN_T5_MAX_LEVELS]; /* least distance of bucket t5_exact + 1 + k */
} attn_mods;

typedef struct attn_launch {
    const void *q, *k, *v;
    void *out;
    int64_t q_sb, q_sh, q_sl, q_sp; /* element strides of batch, head, row and token */
    int64_t k_sb, k_sh, k_sl, k_sp;
    int64_t v_sb, v_sh, v_sl, v_sp;
    int64_t o_sb, o_sh, o_sl, o_sp;
    const int32_t *cu_q, *cu_k; /* packed layout: device prefix sums [B+1]; NULL: padded */
    int64_t tq, tk;             /* packed layout: token counts of q/out and of k/v */
    mask_tiles tiles;           /* the compiled mask, device pointers */
    int batch, heads, lq, lk, head_dim; /* heads and lengths as the kernels see them */
    int split;                          /* residue classes per real head (1: none) */
    int bf16;         /* 1: bf16 inputs, 0: fp16 */
    float scale_log2; /* softmax scale times log2(e): scores go through exp2 */
    int pdl;          /* launch with programmatic dependent launch (src/core/launch.cuh) */
    int heavy_first;  /* block-wise grids: the launch order of grid.cuh's attn_block_order */
    int section;      /* heavy_first: (head, batch entry) pairs per L2 section (grid.cuh) */
    int sms;          /* the device's SMs: a persistent kernel's grid (grid.cuh) */
    int *work;        /* a persistent kernel's work counter pair, zero (grid.cuh) */
    int kv_group;     /* query heads per kv head (real heads; 1: MHA) */
    float scale;      /* the softmax scale (score modifiers work in natural units) */
    attn_mods mods;   /* read only by the modifier variants (block-wise and sm_90 kernels) */
} attn_launch;

/* What validation learned about one call (attention.c). Lq and Lk are the
 * mask's padded lengths; Tq and Tk the token counts of a packed batch. */
typedef struct attn_shape {
    bool packed;
    stof_dtype dtype;
    int64_t B, H, Lq, Lk, D;
    int64_t Hkv;                    /* kv heads (k's shape), dividing H */
    bool mods;                      /* a bias or a soft cap: modifier variants serve it */
    const stof_attn_params *params; /* the call's (validated) */
    int64_t Tq, Tk;
    float scale; /* resolved: never 0 */
} attn_shape;

/* CPU context: the reference attention per (batch, head) on fp32 copies, with
 * the dense mask decoded from the compiled tiles (attn_cpu.c). Inputs are
 * validated already, except the packed lengths, which it reads and checks. */
stof_status attn_cpu_run(const attn_shape *s, const stof_tensor *q, const stof_tensor *k,
                         const stof_tensor *v, stof_mask *mask, const stof_tensor *cu_q,
                         const stof_tensor *cu_k, stof_tensor *out);

/* The T5 bucket thresholds of params p into m (validated params). */
void attn_t5_levels(const stof_attn_params *p, attn_mods *m);

/* stof_attention with the kernel configuration given instead of selected
 * (choice: kernel BLOCKWISE with its warps, or ROWWISE; NULL: the selector
 * decides). For the tuner, which overrules the selector with measurements,
 * and for tests that must run every configuration. */
stof_status attn_attention_with(stof_ctx *ctx, const stof_attn_params *params,
                                const stof_attn_choice *choice, const stof_tensor *q,
                                const stof_tensor *k, const stof_tensor *v, stof_mask *mask,
                                const stof_tensor *cu_seqlens_q, const stof_tensor *cu_seqlens_k,
                                stof_tensor *out);

/* Block-wise tensor-core kernel with `warps` warps per CTA and block_m query
 * rows (16 or 32 per warp), tile_n keys per K/V tile. attn_blockwise_available
 * says whether that configuration is instantiated for the head dim and can
 * serve a mask of tile_m x tile_n tiles (block_m must divide tile_m). */
int attn_blockwise_available(int head_dim, int tile_m, int tile_n, int warps, int block_m);
/* "64x64, 128x64": the mask tile shapes some block-wise configuration serves. */
const char *attn_blockwise_shapes(void);
stof_status attn_blockwise_run(const attn_launch *a, int warps, int block_m, void *stream);
/* Raises the dynamic shared-memory limit of every block-wise instantiation on
 * the current device (once; attn_blockwise_run calls it). Call it before
 * capturing a CUDA graph that contains attention. */
stof_status attn_blockwise_prepare(void);

/* The sm_90 (wgmma) block-wise kernel (blockwise_sm90.cu, built for sm_90a
 * when STOF_HAVE_ATTN_SM90 is defined): warps 4 or 8 (one or two warpgroups),
 * block_m 64 or 128. attn_blockwise_sm90_prepare raises its shared-memory limit
 * (attn_blockwise_prepare calls it). */
stof_status attn_blockwise_sm90_run(const attn_launch *a, int warps, int block_m, void *stream);
/* The most residue classes the sm_90 kernel runs a split mask as: the copy
 * engine steps at most 256 rows per box, and a class's 64-row tile spans
 * 64 * split of them. */
#define ATTN_SM90_MAX_SPLIT 4
stof_status attn_blockwise_sm90_prepare(void);
/* Whether the sm_90 (wgmma) block-wise kernel with these warps and block_m can
 * run on ctx's device for this head dim and tile shape (built, cc 9.0). */
int attn_sm90_available(const stof_ctx *ctx, int head_dim, int tile_m, int tile_n, int warps,
                        int block_m);

/* The warp-specialised sm_90 kernel of head dim 128 (blockwise_ws_sm90.cu,
 * built with blockwise_sm90.cu): all-visible and causal masks without a
 * split, bias or soft cap (select.h, rule 4). attn_ws_sm90_prepare raises its
 * shared-memory limit (attn_blockwise_sm90_prepare calls it). */
stof_status attn_ws_sm90_run(const attn_launch *a, void *stream);
stof_status attn_ws_sm90_prepare(void);

/* Row-wise kernel: one warp per query row, any tile shape with tile_n <= 128. */
int attn_rowwise_available(int head_dim, int tile_n);
stof_status attn_rowwise_run(const attn_launch *a, void *stream);

#ifdef __cplusplus
}
#endif

#endif /* STOF_ATTN_H */
