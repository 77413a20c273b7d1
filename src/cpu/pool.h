/*
 * pool.h — the CPU backend's threads: one small process-wide pthread pool that
 * row ops and attention split their work over, and the thread count of a
 * context (stof_ctx_params.cpu_threads, 0: every online core) applied to
 * OpenBLAS as well. Also the switch back to the exact reference ops.
 */
#ifndef STOF_CPU_POOL_H
#define STOF_CPU_POOL_H

#include <stdbool.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Threads a request stands for: requested if > 0; else STOF_CPU_THREADS from
 * the environment when it holds a positive integer (for callers that cannot
 * set cpu_threads, as OMP_NUM_THREADS is for torch); else the online cores. */
int cpu_threads_resolve(int requested);

/* fn(arg, item, worker) for every item in [0, n), on up to `threads` threads
 * (resolved as above; the caller is worker 0, the others 1 .. threads - 1).
 * Items are handed out in increasing order as workers free up, so callers
 * put their heaviest items first. Returns when every item is done. A call
 * made while the pool serves another (from a second user thread, or from
 * inside fn) runs its items on the calling thread alone, as worker 0. */
typedef void (*cpu_pool_fn)(void *arg, int64_t item, int worker);
void cpu_pool_for(int threads, int64_t n, cpu_pool_fn fn, void *arg);

/* OpenBLAS's thread count for the sgemm calls of a forward: sets it to
 * `threads` (resolved) and returns the count it replaces, for
 * cpu_blas_threads_restore once the forward is done. */
int cpu_blas_threads_enter(int threads);
void cpu_blas_threads_restore(int previous);

/* True when the environment sets STOF_CPU_REFERENCE=1: the CPU backend then
 * runs the reference ops (double accumulation, src/cpu's plain loops) instead
 * of the fast ones, so tests that check the GPU against the CPU compare with
 * the exact oracle. */
bool cpu_use_reference(void);

#ifdef __cplusplus
}
#endif

#endif /* STOF_CPU_POOL_H */
