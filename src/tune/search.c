/*
 * search.c — the two-stage search (search.h says what each stage does).
 */
#include "tune/search.h"

#include <stdlib.h>
#include <string.h>

#define TUNE_MAX_VARIANTS 64

typedef struct search {
    const tune_ops *ops;
    tune_stats *st;
    int total; /* measurements announced to progress */
} search;

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double tune_median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static stof_status measure(search *s, const tune_plan *p, const char *stage, double *ms,
                           bool *valid)
{
    STOF_TRY(s->ops->measure(s->ops->user, p, ms, valid));
    s->st->measured++;
    if (!*valid) s->st->rejected++;
    if (s->ops->progress) {
        if (s->st->measured > s->total) s->total = s->st->measured;
        s->ops->progress(s->ops->user, s->st->measured, s->total, stage);
    }
    return STOF_OK;
}

static bool beats(double t, double best)
{
    return t < best * (1.0 - TUNE_MIN_GAIN);
}

/* Stage 1: greedy over scheme variants. */
static stof_status scheme_stage(search *s, tune_plan *cur, double *cur_ms, tune_plan *buf)
{
    for (int round = 0; round < TUNE_SCHEME_ROUNDS; round++) {
        int n = s->ops->schemes(s->ops->user, cur, buf, TUNE_MAX_VARIANTS);
        s->total += n;
        int best = -1;
        double best_ms = *cur_ms;
        for (int i = 0; i < n; i++) {
            double t;
            bool ok;
            STOF_TRY(measure(s, &buf[i], "schemes", &t, &ok));
            if (ok && beats(t, best_ms)) {
                best = i;
                best_ms = t;
            }
        }
        if (best < 0) return STOF_OK;
        *cur = buf[best];
        *cur_ms = best_ms;
        s->st->scheme_changes++;
    }
    return STOF_OK;
}

static bool same_setting(const tune_plan *a, const tune_plan *b, int dim)
{
    if (dim == TUNE_DIM_ATTN)
        return a->attn_kernel == b->attn_kernel && a->attn_warps == b->attn_warps &&
               a->attn_block_m == b->attn_block_m && a->attn2_kernel == b->attn2_kernel &&
               a->attn2_warps == b->attn2_warps && a->attn2_block_m == b->attn2_block_m;
    return memcmp(&a->seg[dim], &b->seg[dim], sizeof a->seg[dim]) == 0;
}

/* Measures up to count untried parameter variants of dimension dim of *cur,
 * adopting each one that beats it; *gain grows by what was saved. */
static stof_status try_params(search *s, int dim, int count, int *tried, tune_plan *cur,
                              double *cur_ms, double *gain, tune_plan *buf)
{
    int n = s->ops->params(s->ops->user, cur, dim, buf, TUNE_MAX_VARIANTS);
    /* The settings of a dimension come in a fixed order for a scheme, so tried
     * counts how much of that order was spent, across rounds and adoptions. */
    for (int i = *tried; i < n && count > 0; i++) {
        double t;
        bool ok;
        (*tried)++;
        if (same_setting(&buf[i], cur, dim)) continue;
        count--;
        STOF_TRY(measure(s, &buf[i], "parameters", &t, &ok));
        if (ok && beats(t, *cur_ms)) {
            *gain += *cur_ms - t;
            /* keep what the other dimensions chose: copy only this dimension */
            tune_plan next = *cur;
            if (dim == TUNE_DIM_ATTN) {
                next.attn_kernel = buf[i].attn_kernel;
                next.attn_warps = buf[i].attn_warps;
                next.attn_block_m = buf[i].attn_block_m;
                next.attn2_kernel = buf[i].attn2_kernel;
                next.attn2_warps = buf[i].attn2_warps;
                next.attn2_block_m = buf[i].attn2_block_m;
            } else {
                next.seg[dim] = buf[i].seg[dim];
            }
            *cur = next;
            *cur_ms = t;
            s->st->param_changes++;
        }
    }
    return STOF_OK;
}

static stof_status param_stage(search *s, int budget, tune_plan *cur, double *cur_ms,
                               tune_plan *buf)
{
    int first[TUNE_DIMS], second[TUNE_DIMS], tried[TUNE_DIMS] = {0}, cap[TUNE_DIMS];
    double gain[TUNE_DIMS] = {0};
    int avail[TUNE_DIMS];
    for (int d = 0; d < TUNE_DIMS; d++)
        avail[d] = s->ops->params(s->ops->user, cur, d, buf, TUNE_MAX_VARIANTS);
    tune_budget_first(budget, TUNE_EXPLORE, TUNE_DIMS, first);
    int used = 0;
    for (int d = 0; d < TUNE_DIMS; d++) {
        int k = first[d] < avail[d] ? first[d] : avail[d];
        s->total += k;
        int before = tried[d];
        STOF_TRY(try_params(s, d, k, &tried[d], cur, cur_ms, &gain[d], buf));
        used += tried[d] - before;
    }
    int remaining = budget - used;
    if (remaining <= 0) return STOF_OK;
    for (int d = 0; d < TUNE_DIMS; d++) {
        int n = s->ops->params(s->ops->user, cur, d, buf, TUNE_MAX_VARIANTS);
        cap[d] = n > tried[d] ? n - tried[d] : 0;
    }
    tune_budget_second(remaining, TUNE_DIMS, gain, cap, second);
    for (int d = 0; d < TUNE_DIMS; d++) {
        s->total += second[d];
        STOF_TRY(try_params(s, d, second[d], &tried[d], cur, cur_ms, &gain[d], buf));
    }
    return STOF_OK;
}

/* Default and winner measured alternately; the winner stays only if faster. */
static stof_status final_check(search *s, const tune_plan *def, tune_plan *cur)
{
    double a[TUNE_FINAL_ROUNDS], b[TUNE_FINAL_ROUNDS];
    bool same = memcmp(def, cur, sizeof *def) == 0;
    s->total += same ? TUNE_FINAL_ROUNDS : 2 * TUNE_FINAL_ROUNDS;
    for (int i = 0; i < TUNE_FINAL_ROUNDS; i++) {
        bool ok = true;
        STOF_TRY(measure(s, def, "final", &a[i], &ok));
        STOF_REQUIRE(ok, STOF_ERR_INTERNAL, "tune: the default plan disagrees with itself");
        if (same) {
            b[i] = a[i];
            continue;
        }
        STOF_TRY(measure(s, cur, "final", &b[i], &ok));
        STOF_REQUIRE(ok, STOF_ERR_INTERNAL,
                     "tune: the winning plan's output changed between measurements");
    }
    s->st->default_ms = tune_median(a, TUNE_FINAL_ROUNDS);
    s->st->tuned_ms = tune_median(b, TUNE_FINAL_ROUNDS);
    if (!same && !(s->st->tuned_ms < s->st->default_ms)) {
        stof_log(STOF_LOG_INFO,
                 "tune: the winner (%.4f ms) is not faster than the default (%.4f ms) when "
                 "measured again: keeping the default",
                 s->st->tuned_ms, s->st->default_ms);
        *cur = *def;
        s->st->tuned_ms = s->st->default_ms;
    }
    return STOF_OK;
}

stof_status tune_search(const tune_ops *ops, int budget, tune_plan *plan, tune_stats *stats)
{
    STOF_REQUIRE(ops && ops->schemes && ops->params && ops->measure && plan && stats,
                 STOF_ERR_INVALID_ARG, "tune_search: missing argument");
    STOF_REQUIRE(budget >= 0, STOF_ERR_INVALID_ARG, "tune_search: budget %d is negative", budget);
    memset(stats, 0, sizeof *stats);
    tune_plan *buf = NULL;
    STOF_TRY(stof_host_calloc(TUNE_MAX_VARIANTS, sizeof *buf, (void **)&buf));
    search s = {ops, stats, 1};
    tune_plan def, cur;
    tune_plan_default(&def);
    cur = def;
    double cur_ms = 0;
    bool ok = true;
    stof_status st = measure(&s, &def, "default", &cur_ms, &ok);
    if (st == STOF_OK && !ok)
        st = stof_error(STOF_ERR_INTERNAL, "tune: the default plan failed its own check");
    if (st == STOF_OK) st = scheme_stage(&s, &cur, &cur_ms, buf);
    if (st == STOF_OK) st = param_stage(&s, budget, &cur, &cur_ms, buf);
    if (st == STOF_OK) st = final_check(&s, &def, &cur);
    free(buf);
    STOF_TRY(st);
    cur.default_ms = stats->default_ms;
    cur.tuned_ms = stats->tuned_ms;
    *plan = cur;
    return STOF_OK;
}
