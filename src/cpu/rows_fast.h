/*
 * rows_fast.h — what the fast row-op files of src/cpu share (private to the
 * part): how a job of rows is cut into pool items, the bias + activation
 * epilogue of one row, and the clone attribute that builds a hot loop for
 * AVX-512, AVX2 + FMA and the baseline, picked at load time.
 */
#ifndef STOF_CPU_ROWS_FAST_H
#define STOF_CPU_ROWS_FAST_H

#include <stdint.h>

#include "core/act.h"

/* Not under ThreadSanitizer: a clone's resolver runs while the loader
 * relocates, before the sanitizer's runtime is up, and its instrumented entry
 * crashes there (scripts/sanitize_cpu.sh builds that way). */
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && !defined(__SANITIZE_THREAD__)
#define ROWS_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define ROWS_CLONES
#endif

/* Elements per pool item: enough to pay for handing it out. */
enum { ROWS_GRAIN = 16384 };

/* Rows [first, first + count) of a job of `rows` rows, per_item a pool item. */
typedef struct row_split {
    int64_t rows, per_item;
} row_split;

/* About four items a thread, none under ROWS_GRAIN elements of `cols`-wide rows. */
row_split cpu_rows_split(int threads, int64_t rows, int64_t cols);
int64_t cpu_rows_split_items(const row_split *s);
void cpu_rows_split_item(const row_split *s, int64_t item, int64_t *first, int64_t *count);

/* y[i] = act(y[i] + bias[i]) for i < n (bias may be NULL), the activations by
 * polynomial (cpu_fast.h gives the bound). */
void cpu_bias_act_row(float *y, const float *bias, int64_t n, stof_act act);

#endif /* STOF_CPU_ROWS_FAST_H */
