/*
 * attn_cpu_fast.h — the CPU backend's attention: FlashAttention's loop over
 * the compiled tile lists (attn_cpu_fast.c). The reference in attn_cpu.c
 * stays the oracle and serves what this path does not.
 */
#ifndef STOF_ATTN_CPU_FAST_H
#define STOF_ATTN_CPU_FAST_H

#include "attn/attn.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Whether attn_cpu_fast_run serves this validated call: MHA or GQA (k's head
 * count dividing q's), unit stride on the last dimension of every tensor,
 * head dim up to 512, and STOF_CPU_REFERENCE not set (src/cpu/pool.h).
 * Position biases and the soft cap (s->mods) are not served. */
bool attn_cpu_fast_supports(const attn_shape *s, const stof_tensor *q, const stof_tensor *k,
                            const stof_tensor *v, const stof_tensor *out);

/* Attention over the listed tiles only, fp32 accumulation, threads from the
 * mask's context (cpu_threads). Inputs are validated already, the packed
 * prefix sums included. Rows with no visible key are written as zeros. */
stof_status attn_cpu_fast_run(const attn_shape *s, const stof_tensor *q, const stof_tensor *k,
                              const stof_tensor *v, stof_mask *mask, const stof_tensor *cu_q,
                              const stof_tensor *cu_k, stof_tensor *out);

/* The CPU executor's attention over packed rows: qkv [T, (heads + 2 kv_heads) D]
 * holds each token's q heads, then k heads, then v heads; out [T, heads D];
 * sequences by the host prefix sums cu_seqlens [B + 1] (each at most L long);
 * mask compiled on a CPU context for (B, heads, L, L) with the batch's
 * lengths. STOF_ERR_UNSUPPORTED (nothing written) when this path does not
 * serve the call (attn_cpu_fast_supports), so the caller runs the reference. */
stof_status attn_cpu_fast_rows(const float *qkv, float *out, int64_t T, int B, int L, int heads,
                               int kv_heads, int D, const int32_t *cu_seqlens, stof_mask *mask,
                               float scale);

/* Tests and benchmarks: run the inner loops built for one instruction set
 * ("base", "avx2", "avx512") instead of the best the machine has; false when
 * the machine lacks it. NULL goes back to the best. Not thread-safe. */
bool attn_cpu_fast_force_isa(const char *name);

#ifdef __cplusplus
}
#endif

#endif /* STOF_ATTN_CPU_FAST_H */
