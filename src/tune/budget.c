/*
 * budget.c — how stage 2 of the search spreads its measurements over the
 * layer segments: an even exploration round, then the rest in proportion to
 * what each segment gained end-to-end, never more than a segment has left to
 * try. Pure integer bookkeeping; the search calls it between rounds.
 */
#include "tune/tune.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

void tune_budget_first(int total, double explore, int n, int *out)
{
    if (n <= 0 || !out) return;
    if (total < 0) total = 0;
    if (!(explore > 0)) explore = 0; /* NaN too */
    if (explore > 1) explore = 1;
    int k = (int)lround((double)total * explore);
    if (k > total) k = total;
    for (int i = 0; i < n; i++)
        out[i] = k / n + (i < k % n ? 1 : 0);
}

static double gain_weight(const double *gain_ms, int i)
{
    if (!gain_ms) return 0;
    double g = gain_ms[i];
    return g > 0 && isfinite(g) ? g : 0;
}

static int cap_of(const int *cap, int i)
{
    if (!cap) return INT32_MAX;
    return cap[i] > 0 ? cap[i] : 0;
}

/*
 * Rounds the real shares of `budget` to integers: floors first, then one more
 * to the largest remainders (earlier segment on a tie), never past cap.
 * Shares never exceed their cap here, so the sum always reaches budget.
 */
static void round_largest_remainder(int budget, int n, double *share, const int *cap,
                                    const bool *active, int *out)
{
    int given = 0;
    for (int i = 0; i < n; i++) {
        if (!active[i]) continue;
        int f = (int)floor(share[i]);
        if (f < 0) f = 0;
        if (f > cap_of(cap, i)) f = cap_of(cap, i);
        out[i] += f;
        given += f;
    }
    /* Floating error may overshoot by a unit: take it back from the smallest remainder. */
    while (given > budget) {
        int pick = -1;
        for (int i = 0; i < n; i++) {
            if (!active[i] || out[i] == 0) continue;
            double r = share[i] - floor(share[i]);
            if (pick < 0 || r < share[pick] - floor(share[pick])) pick = i;
        }
        if (pick < 0) break;
        out[pick]--;
        given--;
    }
    while (given < budget) {
        int pick = -1;
        double best = -1;
        for (int i = 0; i < n; i++) {
            if (!active[i] || out[i] >= cap_of(cap, i)) continue;
            double r = share[i] - floor(share[i]);
            if (r > best) {
                best = r;
                pick = i;
            }
        }
        if (pick < 0) break;
        out[pick]++;
        share[pick] = floor(share[pick]); /* one extra unit per segment per pass */
        given++;
    }
}

void tune_budget_second(int remaining, int n, const double *gain_ms, const int *cap, int *out)
{
    if (n <= 0 || !out) return;
    memset(out, 0, sizeof(int) * (size_t)n);
    enum { MAX_SEGS = 64 };
    bool active_buf[MAX_SEGS];
    double share_buf[MAX_SEGS];
    bool *active = active_buf;
    double *share = share_buf;
    bool heap = n > MAX_SEGS;
    if (heap) {
        active = malloc(sizeof(bool) * (size_t)n);
        share = malloc(sizeof(double) * (size_t)n);
        if (!active || !share) {
            free(active);
            free(share);
            return;
        }
    }

    long long sum_cap = 0;
    for (int i = 0; i < n; i++) {
        active[i] = cap_of(cap, i) > 0;
        sum_cap += cap_of(cap, i);
    }
    int budget = remaining > 0 ? remaining : 0;
    if ((long long)budget > sum_cap) budget = (int)sum_cap;

    /*
     * Segments whose proportional share passes their cap are fixed at the cap
     * and leave; the rest re-split what is left. Each pass removes one or
     * more segments or ends with the rounding.
     */
    while (budget > 0) {
        double wsum = 0;
        for (int i = 0; i < n; i++)
            if (active[i]) wsum += gain_weight(gain_ms, i);
        bool even = !(wsum > 0);
        int nactive = 0;
        for (int i = 0; i < n; i++) {
            if (!active[i]) continue;
            nactive++;
            double w = even ? 1.0 : gain_weight(gain_ms, i);
            share[i] = (double)budget * w / (even ? 1.0 : wsum);
        }
        if (nactive == 0) break;
        if (even)
            for (int i = 0; i < n; i++)
                if (active[i]) share[i] /= nactive;
        bool capped = false;
        for (int i = 0; i < n; i++) {
            if (active[i] && share[i] > (double)cap_of(cap, i)) {
                out[i] = cap_of(cap, i);
                budget -= out[i];
                active[i] = false;
                capped = true;
            }
        }
        if (capped) continue;
        round_largest_remainder(budget, n, share, cap, active, out);
        break;
    }
    if (heap) {
        free(active);
        free(share);
    }
}
