/*
 * test_tune_search.c — the two-stage search (src/tune/search.c) on synthetic
 * plans whose time is a sum of per-dimension costs drawn at random, so the best
 * plan is known: the search must never return a plan slower than the default,
 * must never return a candidate whose output is wrong (however fast), must find
 * a lone improvement when its budget reaches it, must respect the budget, and
 * must fall back to the default when the winner's speed was a fluke of one
 * measurement.
 */
#include "testlib.h"
#include "tune/search.h"

#include <math.h>
#include <string.h>

#define SETTINGS 4 /* per dimension and path: cuBLASLt algos 0..3, template configs 1..4 */

typedef struct synth {
    double base;
    double cost[TUNE_DIMS][2][SETTINGS]; /* dim, path (0 cuBLASLt, 1 template), setting */
    bool wrong[TUNE_DIMS][2][SETTINGS];  /* outputs that differ from the default's */
    int fluke_dim, fluke_setting;        /* looks fast the first time it is measured only */
    bool fluke_seen;
    int measured;
} synth;

static int setting_of(const tune_plan *p, int dim, int *path)
{
    if (dim == TUNE_DIM_ATTN) {
        *path = 0;
        return p->attn_warps; /* 0..3 */
    }
    *path = p->seg[dim].path;
    return p->seg[dim].path ? p->seg[dim].block_m - 1 : p->seg[dim].algo;
}

static double plan_cost(synth *s, const tune_plan *p, bool *valid)
{
    double t = s->base;
    *valid = true;
    for (int d = 0; d < TUNE_DIMS; d++) {
        int path, k = setting_of(p, d, &path);
        t += s->cost[d][path][k];
        if (s->wrong[d][path][k]) *valid = false;
        if (d == s->fluke_dim && path == 0 && k == s->fluke_setting && k != 0) {
            if (!s->fluke_seen) t -= 100.0; /* one lucky measurement */
            s->fluke_seen = true;
        }
    }
    return t;
}

static stof_status synth_measure(void *user, const tune_plan *p, double *ms, bool *valid)
{
    synth *s = user;
    s->measured++;
    *ms = plan_cost(s, p, valid);
    return STOF_OK;
}

static int synth_schemes(void *user, const tune_plan *base, tune_plan *out, int cap)
{
    (void)user;
    int n = 0;
    for (int d = 0; d < TUNE_NSEG && n < cap; d++) {
        out[n] = *base;
        if (base->seg[d].path) {
            memset(&out[n].seg[d], 0, sizeof out[n].seg[d]);
        } else {
            out[n].seg[d].path = 1;
            out[n].seg[d].block_m = 1; /* the sampled config */
        }
        n++;
    }
    return n;
}

static int synth_params(void *user, const tune_plan *base, int dim, tune_plan *out, int cap)
{
    (void)user;
    int n = 0;
    for (int k = 0; k < SETTINGS && n < cap; k++) {
        out[n] = *base;
        if (dim == TUNE_DIM_ATTN)
            out[n].attn_warps = k;
        else if (base->seg[dim].path)
            out[n].seg[dim].block_m = k + 1;
        else
            out[n].seg[dim].algo = k;
        n++;
    }
    return n;
}

static tune_ops synth_ops(synth *s)
{
    tune_ops ops = {s, synth_schemes, synth_params, synth_measure, NULL};
    return ops;
}

static void synth_make(test_rng *r, synth *s)
{
    memset(s, 0, sizeof *s);
    s->base = 100.0;
    for (int d = 0; d < TUNE_DIMS; d++)
        for (int p = 0; p < 2; p++)
            for (int k = 0; k < SETTINGS; k++)
                s->cost[d][p][k] = test_rng_float(r, 0.0f, 20.0f);
    s->fluke_dim = -1;
}

/* Random cost tables with wrong candidates sprinkled in. */
static void test_random_tables(test_rng *r)
{
    for (int it = 0; it < 300; it++) {
        synth s;
        synth_make(r, &s);
        for (int w = 0; w < 3; w++) {
            int d = (int)test_rng_int(r, 0, TUNE_DIMS - 1), p = (int)test_rng_int(r, 0, 1);
            int k = (int)test_rng_int(r, 1, SETTINGS - 1); /* never the default's own setting */
            s.wrong[d][p][k] = true;
            s.cost[d][p][k] = -50.0; /* the fastest by far */
        }
        int budget = (int)test_rng_int(r, 0, 40);
        tune_ops ops = synth_ops(&s);
        tune_plan best;
        tune_stats st;
        CHECK_OK(tune_search(&ops, budget, &best, &st));
        bool valid;
        tune_plan def;
        tune_plan_default(&def);
        double t_best = plan_cost(&s, &best, &valid), t_def = plan_cost(&s, &def, &valid);
        plan_cost(&s, &best, &valid);
        CHECK(valid, "iteration %d: a wrong candidate won", it);
        CHECK(t_best <= t_def, "iteration %d: tuned %.3f slower than default %.3f", it, t_best,
              t_def);
        CHECK(st.tuned_ms <= st.default_ms, "iteration %d: reported tuned %.3f > default %.3f", it,
              st.tuned_ms, st.default_ms);
        CHECK(fabs(best.tuned_ms - t_best) < 1e-9 && fabs(best.default_ms - t_def) < 1e-9,
              "iteration %d: plan times %.3f / %.3f, true %.3f / %.3f", it, best.tuned_ms,
              best.default_ms, t_best, t_def);
        /* default + schemes (<= rounds x segments) + budget + final interleaving */
        int bound = 1 + TUNE_SCHEME_ROUNDS * TUNE_NSEG + budget + 2 * TUNE_FINAL_ROUNDS;
        CHECK(st.measured == s.measured && st.measured <= bound,
              "iteration %d: %d measurements (ops saw %d), bound %d", it, st.measured, s.measured,
              bound);
    }
}

/* One improvement, in the parameters of attention only: found with budget. */
static void test_lone_improvement(void)
{
    synth s;
    memset(&s, 0, sizeof s);
    s.base = 100.0;
    for (int d = 0; d < TUNE_DIMS; d++)
        for (int k = 0; k < SETTINGS; k++)
            s.cost[d][1][k] = 5.0; /* templates lose everywhere */
    s.cost[TUNE_DIM_ATTN][0][3] = -10.0;
    s.fluke_dim = -1;
    tune_ops ops = synth_ops(&s);
    tune_plan best;
    tune_stats st;
    CHECK_OK(tune_search(&ops, 40, &best, &st));
    CHECK(best.attn_warps == 3, "the attention improvement was not found (setting %d)",
          best.attn_warps);
    CHECK(best.seg[0].path == 0 && best.seg[1].path == 0, "a losing template was kept");
    CHECK(fabs(st.tuned_ms - 90.0) < 1e-9 && fabs(st.default_ms - 100.0) < 1e-9,
          "times %.3f / %.3f", st.tuned_ms, st.default_ms);
    /* With no budget the parameter stage tries nothing. */
    memset(&st, 0, sizeof st);
    CHECK_OK(tune_search(&ops, 0, &best, &st));
    CHECK(best.attn_warps == 0, "a zero budget still searched parameters");
}

/* A setting that was fast once only: the final interleaved check drops it. */
static void test_fluke(void)
{
    synth s;
    memset(&s, 0, sizeof s);
    s.base = 100.0;
    for (int d = 0; d < TUNE_DIMS; d++)
        for (int k = 0; k < SETTINGS; k++)
            s.cost[d][1][k] = 5.0;
    s.cost[TUNE_SEG_OUT][0][2] = 1.0; /* slower, but its first measurement says -99 */
    s.fluke_dim = TUNE_SEG_OUT;
    s.fluke_setting = 2;
    tune_ops ops = synth_ops(&s);
    tune_plan best, def;
    tune_stats st;
    CHECK_OK(tune_search(&ops, 40, &best, &st));
    tune_plan_default(&def);
    best.default_ms = best.tuned_ms = 0;
    CHECK(memcmp(&best, &def, sizeof def) == 0, "the fluke won (out-proj algo %d)",
          best.seg[TUNE_SEG_OUT].algo);
    CHECK(st.tuned_ms == st.default_ms, "fallback times differ: %.3f vs %.3f", st.tuned_ms,
          st.default_ms);
}

static stof_status failing_measure(void *user, const tune_plan *p, double *ms, bool *valid)
{
    (void)user;
    (void)p;
    *ms = 1.0;
    *valid = true;
    return stof_error(STOF_ERR_CUDA, "device lost");
}

static void test_errors(void)
{
    synth s;
    memset(&s, 0, sizeof s);
    tune_ops ops = synth_ops(&s);
    tune_plan best;
    tune_stats st;
    CHECK_STATUS(tune_search(NULL, 1, &best, &st), STOF_ERR_INVALID_ARG);
    CHECK_STATUS(tune_search(&ops, -1, &best, &st), STOF_ERR_INVALID_ARG);
    ops.measure = failing_measure;
    CHECK_STATUS(tune_search(&ops, 4, &best, &st), STOF_ERR_CUDA);
    double v[5] = {5, 1, 4, 2, 3};
    CHECK(tune_median(v, 5) == 3.0, "median of 5");
    double w[4] = {4, 1, 3, 2};
    CHECK(tune_median(w, 4) == 2.5, "median of 4");
}

int main(void)
{
    test_rng r;
    test_rng_init(&r, test_seed());
    test_random_tables(&r);
    test_lone_improvement();
    test_fluke();
    test_errors();
    return test_finish("test_tune_search");
}
