/*
 * search.h — the two-stage search of the STOF paper over execution plans
 * (tune_plan), independent of what a plan runs: the caller supplies the
 * variants and the measurement.
 *
 * Dimensions: the four layer segments (tune_segment) and attention
 * (TUNE_DIM_ATTN: the kernel configuration of every layer mask kind; a
 * setting changes one kind's). A plan's *scheme* says which operators share a kernel (the
 * path of each segment, the FFN chain); its *parameters* are the tile configs,
 * cuBLASLt algorithm indices and the attention kernel configuration.
 *
 *  0. The default plan is measured first; its output is the reference every
 *     later candidate is checked against (by the caller's measure).
 *  1. Scheme search: the scheme variants of the current plan (segments
 *     expanded into fused templates or shrunk back to cuBLASLt, each with
 *     sampled parameters) are measured; the fastest that beats the current plan
 *     by more than TUNE_MIN_GAIN becomes the current plan, and the stage
 *     repeats from it (at most TUNE_SCHEME_ROUNDS rounds).
 *  2. Parameter search: budget measurements. The first round spreads
 *     TUNE_EXPLORE of them evenly over the dimensions (tune_budget_first), each
 *     candidate differing from the current plan in one dimension and adopted
 *     when it beats it by TUNE_MIN_GAIN; the second round gives the rest to
 *     the dimensions in proportion to what they gained end to end
 *     (tune_budget_second), capped by the candidates they have left.
 *  3. The default and the winner are measured again, interleaved; the winner
 *     is kept only when it is still faster, so a tuned plan is never slower
 *     than the default by the search's own measurement.
 * A candidate whose output is wrong is rejected (counted, logged by the caller)
 * and can never win.
 */
#ifndef STOF_TUNE_SEARCH_H
#define STOF_TUNE_SEARCH_H

#include "tune/tune.h"

#ifdef __cplusplus
extern "C" {
#endif

#define TUNE_DIM_ATTN TUNE_NSEG
#define TUNE_DIMS (TUNE_NSEG + 1)
#define TUNE_MIN_GAIN 0.01   /* a change must save 1% end to end */
#define TUNE_SCHEME_ROUNDS 3
#define TUNE_EXPLORE 0.5     /* share of the parameter budget spread evenly */
#define TUNE_FINAL_ROUNDS 5  /* interleaved re-measurements of default and winner */

typedef struct tune_ops {
    void *user;
    /* Scheme variants of base, each with sampled parameters: at most cap into out. */
    int (*schemes)(void *user, const tune_plan *base, tune_plan *out, int cap);
    /* Every parameter setting of dimension dim for base's scheme, as copies of
     * base differing in that dimension only, in an order that depends on the
     * scheme alone (most promising first; base's own setting may be among
     * them): at most cap into out. */
    int (*params)(void *user, const tune_plan *base, int dim, tune_plan *out, int cap);
    /* End-to-end time of one forward with plan (ms). *valid false: its output
     * differs from the default plan's beyond tolerance. */
    stof_status (*measure)(void *user, const tune_plan *plan, double *ms, bool *valid);
    /* Called after every measurement (may be NULL). */
    void (*progress)(void *user, int done, int total, const char *stage);
} tune_ops;

typedef struct tune_stats {
    int measured, rejected;
    int scheme_changes, param_changes;
    double default_ms, tuned_ms; /* medians of the final interleaved measurements */
} tune_stats;

/* Runs the search; *plan gets the winner (the default when nothing beat it),
 * with default_ms and tuned_ms filled (tune_s is the caller's). */
stof_status tune_search(const tune_ops *ops, int budget, tune_plan *plan, tune_stats *stats);

/* Median of n values (n >= 1; the array is reordered). */
double tune_median(double *v, int n);

#ifdef __cplusplus
}
#endif

#endif /* STOF_TUNE_SEARCH_H */
