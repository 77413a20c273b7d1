/*
 * unicode_bert.c — lookups over the generated tables of unicode_tables.h. Properties are
 * stored as sorted range starts and found by binary search: one table covers all of
 * Unicode in a few kilobytes.
 *
 * The first 2048 code points (ASCII, Latin, Greek, Cyrillic, Hebrew, Arabic: nearly all
 * of the text a server sees) answer from a direct table built once from those same
 * searches, so the two cannot disagree. A tokenizer asks several properties of every
 * character (clean-up, accents, pre-tokenizer, lower case), and with the searches alone
 * they were the largest host cost of serving a small encoder: 6% of `stof serve`'s CPU
 * time under load on the CPU, behind the forward itself.
 */
#include "tok/unicode_bert.h"

#include <pthread.h>
#include <stddef.h>

#include "tok/unicode_tables.h"

#define COUNT(a) (sizeof(a) / sizeof((a)[0]))

/* Index of the last start <= cp in a sorted array whose first element is 0. */
static size_t range_index(const uint32_t *starts, size_t n, uint32_t cp)
{
    size_t lo = 0, hi = n; /* starts[lo] <= cp < starts[hi] (hi = n: beyond the end) */
    while (hi - lo > 1) {
        size_t mid = lo + (hi - lo) / 2;
        if (starts[mid] <= cp)
            lo = mid;
        else
            hi = mid;
    }
    return lo;
}

static unsigned flags_searched(uint32_t cp)
{
    if (cp > 0x10FFFF) return 0;
    return uni_flag_value[range_index(uni_flag_start, COUNT(uni_flag_start), cp)];
}

static unsigned ccc_searched(uint32_t cp)
{
    if (cp > 0x10FFFF) return 0;
    return uni_ccc_value[range_index(uni_ccc_start, COUNT(uni_ccc_start), cp)];
}

/* The direct table of the first LOW code points (the file's comment). lower: the single
 * lower-case code point, or LOWER_SEARCH where the mapping is longer; plain: cp does not
 * decompose. */
#define LOW 0x800
#define LOWER_SEARCH 0xFFFF
static struct {
    uint8_t flags[LOW], ccc[LOW], plain[LOW];
    uint16_t lower[LOW];
} low;
static pthread_once_t low_once = PTHREAD_ONCE_INIT;

static int lower_searched(uint32_t cp, uint32_t out[2]);
static int decompose_into(uint32_t cp, uint32_t *out, int n, int depth);

static void low_build(void)
{
    for (uint32_t cp = 0; cp < LOW; cp++) {
        uint32_t d[STOF_UNI_MAX_DECOMP], l[2];
        low.flags[cp] = (uint8_t)flags_searched(cp);
        low.ccc[cp] = (uint8_t)ccc_searched(cp);
        low.plain[cp] = decompose_into(cp, d, 0, 0) == 1 && d[0] == cp;
        low.lower[cp] = lower_searched(cp, l) == 1 && l[0] < LOWER_SEARCH ? (uint16_t)l[0]
                                                                          : LOWER_SEARCH;
    }
}

static inline void low_ready(void)
{
    pthread_once(&low_once, low_build);
}

unsigned stof_uni_flags(uint32_t cp)
{
    if (cp < LOW) {
        low_ready();
        return low.flags[cp];
    }
    return flags_searched(cp);
}

unsigned stof_uni_ccc(uint32_t cp)
{
    if (cp < LOW) {
        low_ready();
        return low.ccc[cp];
    }
    return ccc_searched(cp);
}

/* Row of cp in uni_decomp, or -1. */
static long decomp_row(uint32_t cp)
{
    size_t lo = 0, hi = COUNT(uni_decomp);
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (uni_decomp[mid][0] < cp)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < COUNT(uni_decomp) && uni_decomp[lo][0] == cp ? (long)lo : -1;
}

enum {
    HANGUL_S = 0xAC00,
    HANGUL_COUNT = 11172,
    HANGUL_L = 0x1100,
    HANGUL_V = 0x1161,
    HANGUL_T = 0x11A7,
    HANGUL_V_COUNT = 21,
    HANGUL_T_COUNT = 28
};

/* Appends the decomposition of cp at out[n]; returns the new length. The generator
 * checks that no decomposition is longer than STOF_UNI_MAX_DECOMP, and the bound is
 * kept here as well so that a table edit can never write out of range. */
static int decompose_into(uint32_t cp, uint32_t *out, int n, int depth)
{
    if (cp - HANGUL_S < HANGUL_COUNT) {
        uint32_t s = cp - HANGUL_S;
        uint32_t t = s % HANGUL_T_COUNT;
        if (n + 3 > STOF_UNI_MAX_DECOMP) return n;
        out[n++] = HANGUL_L + s / (HANGUL_V_COUNT * HANGUL_T_COUNT);
        out[n++] = HANGUL_V + (s % (HANGUL_V_COUNT * HANGUL_T_COUNT)) / HANGUL_T_COUNT;
        if (t) out[n++] = HANGUL_T + t;
        return n;
    }
    long row = depth < STOF_UNI_MAX_DECOMP ? decomp_row(cp) : -1;
    if (row < 0) {
        if (n < STOF_UNI_MAX_DECOMP) out[n++] = cp;
        return n;
    }
    n = decompose_into(uni_decomp[row][1], out, n, depth + 1);
    if (uni_decomp[row][2]) n = decompose_into(uni_decomp[row][2], out, n, depth + 1);
    return n;
}

int stof_uni_decompose(uint32_t cp, uint32_t out[STOF_UNI_MAX_DECOMP])
{
    if (cp < LOW) {
        low_ready();
        if (low.plain[cp]) {
            out[0] = cp;
            return 1;
        }
    }
    return decompose_into(cp, out, 0, 0);
}

int stof_uni_lower(uint32_t cp, uint32_t out[2])
{
    if (cp < LOW) {
        low_ready();
        if (low.lower[cp] != LOWER_SEARCH) {
            out[0] = low.lower[cp];
            return 1;
        }
    }
    return lower_searched(cp, out);
}

static int lower_searched(uint32_t cp, uint32_t out[2])
{
    for (size_t i = 0; i < COUNT(uni_lower_multi); i++) {
        if (uni_lower_multi[i][0] == cp) {
            out[0] = uni_lower_multi[i][1];
            out[1] = uni_lower_multi[i][2];
            return 2;
        }
    }
    out[0] = cp;
    size_t lo = 0, hi = COUNT(uni_lower_runs); /* first run with last >= cp */
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (uni_lower_runs[mid].last < cp)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo < COUNT(uni_lower_runs)) {
        const uni_lower_run *r = &uni_lower_runs[lo];
        if (cp >= r->first && (cp - r->first) % (uint32_t)r->step == 0)
            out[0] = (uint32_t)((int32_t)cp + r->delta);
    }
    return 1;
}
