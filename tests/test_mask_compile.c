/*
 * test_mask_compile.c — the CPU mask compiler against the dense oracle.
 *
 * 1. Known answers: each kind of part, with lengths and Lq != Lk, checked
 *    against formulas written out here (random blocks with this file's own
 *    splitmix64), so a wrong predicate cannot hide behind the oracle that
 *    shares it with the compiler.
 * 2. The word form (mask_tile_word, what the GPU builder evaluates) against
 *    the element predicate, bit by bit, on random cases here on the host.
 * 3. A property test over hundreds of random specs (test_mask_gen.c): decode
 *    equals the oracle for every (b, h), tiles hold exactly the spec's
 *    elements (rows past the query length included where the oracle
 *    reaches), the CSR structure is sound, stats and estimate agree.
 */
#include "test_mask_gen.c"

#include "mask/mask_internal.h"

#include <math.h>
#include <stdio.h>

/* ---------------------------------------------------------------- known answers */

static uint64_t ref_mix(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

/* The documented random-block rule, restated independently. */
static bool ref_random(int block, int per_row, uint64_t seed, int b, int lenk, int i, int j)
{
    int ncol = (lenk + block - 1) / block;
    if (ncol == 0) return false;
    uint64_t key = ref_mix(ref_mix(ref_mix(seed) ^ (uint64_t)b) ^ (uint64_t)(i / block));
    for (int k = 0; k < per_row; k++)
        if ((int)((uint32_t)(ref_mix(key + (uint64_t)k) >> 32) % (uint32_t)ncol) == j / block)
            return true;
    return false;
}

typedef enum {
    K_FULL,
    K_CAUSAL,
    K_WINDOW,
    K_DILATED,
    K_GLOBAL,
    K_LIST,
    K_RANDOM,
    K_BLOCKS
} ref_kind;

typedef struct ref_case {
    const char *text;
    ref_kind kind;
    int a, b;
} ref_case;

static const int32_t ref_list[] = {0, 7, 20};
static const char *ref_layout[] = {"1100", "0110", "0011", "1001", "0000", "1111"};

/* off: the analytic parts' row offset (len_k - len_q bottom-right, 0 top-left). */
static bool ref_visible(const ref_case *c, int b, int lenk, int off, int i, int j)
{
    const int a = i + off;
    switch (c->kind) {
    case K_FULL: return true;
    case K_CAUSAL: return j <= a;
    case K_WINDOW: return a - c->a <= j && j <= a + c->b;
    case K_DILATED: return abs(a - j) <= c->a * c->b && (a - j) % c->b == 0;
    case K_GLOBAL: return i < c->a || j < c->a;
    case K_LIST:
        for (int k = 0; k < 3; k++)
            if (i == ref_list[k] || j == ref_list[k]) return true;
        return false;
    case K_RANDOM: return ref_random(c->a, c->b, 12345, b, lenk, i, j);
    case K_BLOCKS: return ref_layout[i / c->a][j / c->a] == '1';
    }
    return false;
}

static void test_known_answers(stof_ctx *ctx)
{
    static const ref_case cases[] = {
        {"full", K_FULL, 0, 0},
        {"causal", K_CAUSAL, 0, 0},
        {"window:3", K_WINDOW, 3, 3},
        {"window:2:5", K_WINDOW, 2, 5},
        {"window:0", K_WINDOW, 0, 0},
        {"dilated:3x4", K_DILATED, 3, 4},
        {"global:5", K_GLOBAL, 5, 0},
        {"global:[20,0,7]", K_LIST, 0, 0},
        {"random:8x2@12345", K_RANDOM, 8, 2},
        {"blocks:6:1100/0110/0011/1001/0000/1111", K_BLOCKS, 6, 0},
    };
    /* Shapes: (Lq, Lk, lengths or none), Lq != Lk included. */
    static const int shapes[][2] = {{23, 23}, {17, 24}, {24, 9}, {1, 1}};
    static const int32_t lens_q[] = {23, 11}, lens_k[] = {23, 9};
    static const int tiles[] = {16, 32, 64, 128};
    /* Bands (within:), written out: -left <= j - a <= right; left -1: no bound. */
    static const struct {
        const char *text;
        int left, right;
    } bands[] = {{"", -1, 1 << 30},
                 {",within:causal", -1, 0},
                 {",within:2:5", 2, 5},
                 {",within:0:3", 0, 3},
                 {",within:1", 1, 1}};
    const size_t n_bands = sizeof bands / sizeof bands[0];
    for (size_t kk = 0; kk < 2 * n_bands * (sizeof cases / sizeof cases[0]); kk++) {
        /* Each case in each band bottom-right (the default), then top-left. */
        const size_t k = kk / (2 * n_bands), bi = kk / 2 % n_bands;
        const bool top_left = kk % 2;
        char text[128];
        snprintf(text, sizeof text, "%s%s%s", cases[k].text, bands[bi].text,
                 top_left ? ",topleft" : "");
        stof_mask_spec *spec = NULL;
        CHECK_OK(stof_mask_spec_parse(text, &spec));
        if (!spec) continue;
        for (int s = 0; s < 4; s++) {
            int lq = shapes[s][0], lk = shapes[s][1];
            bool with_lens = s == 0;
            int tm = tiles[(k + s) % 4], tn = tiles[(k + 2 * s + 1) % 4];
            stof_mask_params p = stof_mask_default_params();
            p.batch = 2;
            p.heads = 1;
            p.len_q = lq;
            p.len_k = lk;
            p.tile_m = tm;
            p.tile_n = tn;
            p.builder = STOF_BUILDER_CPU;
            int64_t two = 2;
            stof_tensor tq = stof_tensor_make((void *)lens_q, STOF_I32, STOF_MEM_HOST, 1, &two);
            stof_tensor tk = stof_tensor_make((void *)lens_k, STOF_I32, STOF_MEM_HOST, 1, &two);
            if (with_lens) {
                p.lengths_q = &tq;
                p.lengths_k = &tk;
            }
            stof_mask *m = NULL;
            stof_status st = stof_mask_compile(ctx, spec, &p, &m);
            if (cases[k].kind == K_BLOCKS && (lq > 36 || lk > 24)) {
                CHECK_STATUS(st, STOF_ERR_SHAPE);
                continue;
            }
            CHECK(st == STOF_OK, "%s at %dx%d: %s", text, lq, lk, stof_last_error());
            if (st != STOF_OK) continue;
            uint8_t got[24 * 24], oracle[24 * 24];
            int64_t nnz = 0;
            for (int b = 0; b < 2; b++) {
                int lenq = with_lens ? lens_q[b] : lq, lenk = with_lens ? lens_k[b] : lk;
                CHECK_OK(stof_mask_decode(m, b, 0, got, sizeof got));
                CHECK_OK(stof_mask_spec_to_dense(spec, 2, 1, lq, lk, with_lens ? lens_q : NULL,
                                                 with_lens ? lens_k : NULL, b, 0, oracle));
                int wrong = 0, wrong_oracle = 0;
                for (int i = 0; i < lq; i++) {
                    for (int j = 0; j < lk; j++) {
                        int off = top_left ? 0 : lenk - lenq;
                        bool in_band = (bands[bi].left < 0 || j - (i + off) >= -bands[bi].left) &&
                                       j - (i + off) <= bands[bi].right;
                        int want = i < lenq && j < lenk && in_band &&
                                   ref_visible(&cases[k], b, lenk, off, i, j);
                        nnz += want;
                        wrong += got[i * lk + j] != want;
                        wrong_oracle += oracle[i * lk + j] != want;
                    }
                }
                CHECK(wrong == 0 && wrong_oracle == 0,
                      "%s at %dx%d tiles %dx%d, b %d: %d decoded and %d oracle elements wrong",
                      text, lq, lk, tm, tn, b, wrong, wrong_oracle);
            }
            stof_mask_stats stats;
            CHECK_OK(stof_mask_stats_get(m, &stats));
            /* Random parts and lengths make entries differ; otherwise one instance. */
            int inst = (with_lens || cases[k].kind == K_RANDOM) ? 2 : 1;
            CHECK(stats.instances == inst, "%s: %d instances, want %d", cases[k].text,
                  stats.instances, inst);
            if (inst == 1) nnz /= 2;
            CHECK(stats.nnz == nnz, "%s at %dx%d: nnz %lld want %lld", text, lq, lk,
                  (long long)stats.nnz, (long long)nnz);
            stof_mask_destroy(m);
        }
        stof_mask_spec_destroy(spec);
    }
}

/* Tile classes of a few shapes worked out by hand. */
static void test_tile_rule(stof_ctx *ctx)
{
    /* causal (top-left) over 40 x 40, 16 x 16 tiles, len_q 20 and len_k 30 of
     * entry 0: tile rows 0 and 1 are live (row 1 starts at 16 < 20), row 2
     * (32) is not; row 0: tile 0 partial (diagonal); row 1: tile 0 full, tile
     * 1 partial. */
    stof_mask_spec *spec = NULL;
    CHECK_OK(stof_mask_spec_parse("causal,topleft", &spec));
    int32_t lq[1] = {20}, lk[1] = {30};
    int64_t one = 1;
    stof_tensor tq = stof_tensor_make(lq, STOF_I32, STOF_MEM_HOST, 1, &one);
    stof_tensor tk = stof_tensor_make(lk, STOF_I32, STOF_MEM_HOST, 1, &one);
    stof_mask_params p = stof_mask_default_params();
    p.len_q = p.len_k = 40;
    p.tile_m = p.tile_n = 16;
    p.lengths_q = &tq;
    p.lengths_k = &tk;
    stof_mask *m = NULL;
    CHECK_OK(stof_mask_compile(ctx, spec, &p, &m));
    mask_tiles_host h;
    if (m && stof_mask_to_host(m, &h) == STOF_OK) {
        const mask_tiles *t = &h.t;
        CHECK(t->n_trow == 3 && t->n_tcol == 3, "grid %dx%d", t->n_trow, t->n_tcol);
        CHECK(h.entries == 3 && h.partial == 2, "entries %lld partial %lld", (long long)h.entries,
              (long long)h.partial);
        CHECK(t->row_ptr[0] == 0 && t->row_ptr[1] == 1 && t->row_ptr[2] == 3 && t->row_ptr[3] == 3,
              "row_ptr %d %d %d %d", t->row_ptr[0], t->row_ptr[1], t->row_ptr[2], t->row_ptr[3]);
        CHECK(t->col[0] == 0 && t->bits[0] == 0 && t->col[1] == 0 && t->bits[1] == -1 &&
                  t->col[2] == 1 && t->bits[2] == 1,
              "entries (%d,%d) (%d,%d) (%d,%d)", t->col[0], t->bits[0], t->col[1], t->bits[1],
              t->col[2], t->bits[2]);
        /* Tile (1, 1) rows 16..31 follow the spec past len_q: row 31 (rr 15) sees 16..29. */
        const uint64_t *bm = t->bitmap + 1 * 16;
        CHECK(bm[15] == 0x3fff && bm[0] == 0x1, "rows past len_q follow the spec: %llx %llx",
              (unsigned long long)bm[15], (unsigned long long)bm[0]);
        mask_tiles_host_free(&h);
    }
    stof_mask_destroy(m);
    /* full with key length 70 over 64-wide tiles: tile 0 full, tile 1 (64..127) partial. */
    stof_mask_spec_destroy(spec);
    CHECK_OK(stof_mask_spec_parse("full", &spec));
    int32_t l70[1] = {70};
    tk = stof_tensor_make(l70, STOF_I32, STOF_MEM_HOST, 1, &one);
    p = stof_mask_default_params();
    p.len_q = 10;
    p.len_k = 128;
    p.lengths_k = &tk;
    m = NULL;
    CHECK_OK(stof_mask_compile(ctx, spec, &p, &m));
    if (m && stof_mask_to_host(m, &h) == STOF_OK) {
        CHECK(h.entries == 2 && h.partial == 1 && h.t.bits[0] == -1 && h.t.bits[1] == 0 &&
                  h.t.bitmap[2] == 0x3f && h.t.bitmap[63] == 0x3f,
              "full clipped at 70: %lld entries, %lld partial", (long long)h.entries,
              (long long)h.partial);
        mask_tiles_host_free(&h);
    }
    stof_mask_destroy(m);
    stof_mask_spec_destroy(spec);
}

static void test_random_cases(stof_ctx *ctx, test_rng *r, int count)
{
    int failed_cases = 0;
    for (int k = 0; k < count; k++) {
        gen_case g;
        gen_case_make(r, &g, NULL, true);
        stof_tensor tq, tk;
        stof_mask_params p = gen_params(&g, &tq, &tk, STOF_BUILDER_CPU);
        stof_mask *m = NULL;
        stof_status st = stof_mask_compile(ctx, g.spec, &p, &m);
        CHECK(st == STOF_OK, "case %d (%s): %s", k, g.desc, stof_last_error());
        if (st == STOF_OK) {
            int bad = check_mask_case(&g, m);
            CHECK(bad == 0, "case %d: %d problems", k, bad);
            failed_cases += bad != 0;
        }
        stof_mask_destroy(m);
        gen_case_free(&g, NULL);
        if (failed_cases > 5) break;
    }
}

/* row_imbalance of the estimate over sequences of 4096 and 2000 tokens (64 and
 * 32 tile rows): full lists 64 tiles in the longest rows against a mean of
 * (64 * 64 + 32 * 32) / 96, 1.2; causal 64 against (2080 + 528) / 96, 2.36;
 * rows of global tokens list every tile against a mean near the window's. */
static void test_row_imbalance(stof_ctx *ctx)
{
    static const struct {
        const char *spec;
        double lo, hi;
    } cases[] = {{"full", 1.19, 1.21},
                 {"window:128", 1.0, 1.3},
                 {"causal", 2.3, 2.4},
                 {"full,within:causal", 2.3, 2.4},
                 {"window:128,global:32", 8.0, 16.0}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        stof_mask_spec *spec = NULL;
        CHECK_OK(stof_mask_spec_parse(cases[i].spec, &spec));
        int32_t lens[2] = {4096, 2000};
        int64_t two = 2;
        stof_tensor tl = stof_tensor_make(lens, STOF_I32, STOF_MEM_HOST, 1, &two);
        stof_mask_params p = stof_mask_default_params();
        p.batch = 2;
        p.len_q = p.len_k = 4096;
        p.tile_m = p.tile_n = 64;
        p.lengths_q = &tl;
        stof_mask *m = NULL;
        CHECK_OK(stof_mask_compile(ctx, spec, &p, &m));
        if (m) {
            double r = stof_mask_estimate_view(m)->row_imbalance;
            CHECK(r >= cases[i].lo && r <= cases[i].hi, "%s: row_imbalance %.3f not in [%g, %g]",
                  cases[i].spec, r, cases[i].lo, cases[i].hi);
        }
        stof_mask_destroy(m);
        stof_mask_spec_destroy(spec);
    }
}

/* The spec compiled as the flag tests take it: two entries, Lq 300 and Lk
 * 700 (a row offset under bottom-right alignment), with per-entry lengths
 * (300 and 17 queries, 700 and 650 keys) when asked. NULL on failure (a
 * failed check). */
static stof_mask *compile_flagged(stof_ctx *ctx, const char *text, bool lengths)
{
    stof_mask_spec *spec = NULL;
    CHECK_OK(stof_mask_spec_parse(text, &spec));
    stof_mask_params p = stof_mask_default_params();
    p.batch = 2;
    p.len_q = 300;
    p.len_k = 700;
    int32_t lq[2] = {300, 17}, lk[2] = {700, 650};
    int64_t n = 2;
    stof_tensor tq = stof_tensor_make(lq, STOF_I32, STOF_MEM_HOST, 1, &n);
    stof_tensor tk = stof_tensor_make(lk, STOF_I32, STOF_MEM_HOST, 1, &n);
    if (lengths) {
        p.lengths_q = &tq;
        p.lengths_k = &tk;
    }
    stof_mask *m = NULL;
    if (spec) CHECK_OK(stof_mask_compile(ctx, spec, &p, &m));
    stof_mask_spec_destroy(spec);
    return m;
}

/* The causal flag (mask.h): set for the causal mask however it is written,
 * at either alignment, and for nothing else; check_causal (test_mask_gen.c)
 * holds every flagged random case to its promise. */
static void test_causal_flag(stof_ctx *ctx)
{
    static const struct {
        const char *spec;
        int causal, all_visible;
    } cases[] = {{"causal", 1, 0},
                 {"causal,topleft", 1, 0},
                 {"full,within:causal", 1, 0},
                 {"causal,within:causal", 1, 0},
                 {"causal,within:4", 0, 0},
                 {"full", 0, 1},
                 {"full,causal", 0, 1},
                 {"window:128", 0, 0},
                 {"causal,window:16", 0, 0},
                 {"causal,global:2", 0, 0},
                 {"full,within:causal,global:2", 1, 0}}; /* the band cuts every part */
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        stof_mask *m = compile_flagged(ctx, cases[i].spec, false);
        if (m) {
            const mask_tiles *t = stof_mask_tiles_view(m);
            CHECK(t->causal == cases[i].causal && t->all_visible == cases[i].all_visible,
                  "%s: causal %d all_visible %d (want %d, %d)", cases[i].spec, t->causal,
                  t->all_visible, cases[i].causal, cases[i].all_visible);
        }
        stof_mask_destroy(m);
    }
}

/* The band flag (mask.h): which masks are analytic bands and with which
 * sides (-1: open), at either alignment, with and without per-entry lengths;
 * dilated, global, random, multi-part unions with other parts and split
 * masks are not. test_mask_gen.c holds every flagged random case to the
 * oracle. */
static void test_band_flag(stof_ctx *ctx)
{
    static const struct {
        const char *spec;
        int band;
        int64_t left, right;
    } cases[] = {{"causal", 1, -1, 0},
                 {"causal,topleft", 1, -1, 0},
                 {"full,within:causal", 1, -1, 0},
                 {"window:4096:0", 1, 4096, 0},
                 {"window:100:37", 1, 100, 37},
                 {"window:5", 1, 5, 5},
                 {"window:5,topleft", 1, 5, 5},
                 {"full,within:300:20", 1, 300, 20},
                 {"causal,within:64", 1, 64, 0},
                 {"window:10:2,window:3:40", 1, 10, 40},
                 {"window:10:2,causal", 1, -1, 2},
                 {"window:100:37,within:50:60", 1, 50, 37},
                 {"full", 0, 0, 0},
                 {"full,causal", 0, 0, 0},
                 {"dilated:4x2", 0, 0, 0},
                 {"dilated:4x3", 0, 0, 0},
                 {"global:2", 0, 0, 0},
                 {"window:16,global:2", 0, 0, 0},
                 {"causal,global:2", 0, 0, 0},
                 {"window:64,random:64x2@3", 0, 0, 0}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        for (int lengths = 0; lengths < 2; lengths++) {
            stof_mask *m = compile_flagged(ctx, cases[i].spec, lengths);
            if (m) {
                const mask_tiles *t = stof_mask_tiles_view(m);
                const int64_t left = t->band_left >= MASK_TILES_OPEN ? -1 : t->band_left;
                const int64_t right = t->band_right >= MASK_TILES_OPEN ? -1 : t->band_right;
                CHECK(t->band == cases[i].band &&
                          (!t->band || (left == cases[i].left && right == cases[i].right)),
                      "%s (lengths %d): band %d (%lld, %lld), want %d (%lld, %lld)", cases[i].spec,
                      lengths, t->band, (long long)left, (long long)right, cases[i].band,
                      (long long)cases[i].left, (long long)cases[i].right);
            }
            stof_mask_destroy(m);
        }
    }
    /* A dilated mask stored split is a band over its classes, not a band. */
    stof_mask_spec *spec = NULL;
    CHECK_OK(stof_mask_spec_parse("dilated:3x4", &spec));
    stof_mask_params p = stof_mask_default_params();
    p.len_q = p.len_k = 64;
    stof_mask *m = NULL;
    CHECK_OK(stof_mask_compile(ctx, spec, &p, &m));
    if (m)
        CHECK(stof_mask_tiles_view(m)->split == 4 && !stof_mask_tiles_view(m)->band,
              "dilated:3x4 at 64: split %d band %d", stof_mask_tiles_view(m)->split,
              stof_mask_tiles_view(m)->band);
    stof_mask_destroy(m);
    stof_mask_spec_destroy(spec);
}

/* Dilated masks stored split by residue class (mask.h): when the compiler
 * splits and when it must not, and a split mask read back (decode, stats,
 * tile choice) as the mask it stands for. */
static void test_residue_split(stof_ctx *ctx)
{
    static const struct {
        const char *text;
        int lq, lk, lengths, want;
    } cases[] = {
        {"dilated:3x4", 24, 24, 0, 4},
        {"dilated:128x2", 1024, 1024, 0, 2},
        {"dilated:2x3,dilated:5x3,topleft", 30, 60, 0, 3},
        {"dilated:0x7,topleft", 49, 14, 0, 7},
        {"dilated:2x3", 30, 60, 0, 1}, /* bottom-right with Lq != Lk: rows offset by 30 */
        {"dilated:3x4", 24, 24, 1, 1}, /* lengths */
        {"dilated:3x2", 25, 25, 0, 1}, /* 2 does not divide 25 */
        {"dilated:3x2", 24, 23, 0, 1}, /* nor 23 */
        {"dilated:3x1", 24, 24, 0, 1}, /* dilation 1: a window already */
        {"dilated:2x2,dilated:3x4", 24, 24, 0, 1}, /* two dilations */
        {"dilated:3x2,causal", 24, 24, 0, 1},
        {"dilated:3x2,global:1", 24, 24, 0, 1},
        {"dilated:3x4,within:causal", 24, 24, 0, 4}, /* bands are carried to the classes */
        {"dilated:3x2,dilated:1x2,within:5:2,topleft", 30, 60, 0, 2},
        {"dilated:3x4,within:3:4", 48, 48, 0, 4},
    };
    const int32_t lens[2] = {24, 10};
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        stof_mask_spec *spec = NULL;
        CHECK_OK(stof_mask_spec_parse(cases[k].text, &spec));
        if (!spec) continue;
        int lq = cases[k].lq, lk = cases[k].lk;
        int64_t two = 2;
        stof_tensor tl = stof_tensor_make((void *)lens, STOF_I32, STOF_MEM_HOST, 1, &two);
        stof_mask_params p = stof_mask_default_params();
        p.batch = 2;
        p.heads = 3;
        p.len_q = lq;
        p.len_k = lk;
        p.lengths_q = cases[k].lengths ? &tl : NULL;
        p.lengths_k = cases[k].lengths ? &tl : NULL;
        p.tile_m = k % 2 ? 16 : 64;
        p.tile_n = k % 2 ? 32 : 64;
        stof_mask *m = NULL;
        CHECK_OK(stof_mask_compile(ctx, spec, &p, &m));
        if (!m) {
            stof_mask_spec_destroy(spec);
            continue;
        }
        const mask_tiles *t = stof_mask_tiles_view(m);
        int d = cases[k].want;
        CHECK(t->split == d, "%s at %dx%d: split %d, want %d", cases[k].text, lq, lk, t->split, d);
        CHECK(t->lq == lq / d && t->lk == lk / d, "%s: stored %dx%d, want %dx%d", cases[k].text,
              t->lq, t->lk, lq / d, lk / d);
        int tm = 0, tn = 0;
        CHECK_OK(stof_mask_choose_tiles(ctx, spec, &p, &tm, &tn));
        CHECK(tm == t->tile_m && tn == t->tile_n, "%s: choose_tiles %dx%d, compiled %dx%d",
              cases[k].text, tm, tn, t->tile_m, t->tile_n);
        size_t plane = (size_t)lq * lk;
        uint8_t *got = malloc(plane), *want = malloc(plane);
        int64_t nnz = 0;
        for (int b = 0; b < 2; b++) {
            for (int h = 0; h < 3; h++) {
                memset(got, 0xA5, plane);
                CHECK_OK(stof_mask_decode(m, b, h, got, plane));
                CHECK_OK(stof_mask_spec_to_dense(spec, 2, 3, lq, lk, p.lengths_q ? lens : NULL,
                                                 p.lengths_k ? lens : NULL, b, h, want));
                CHECK(memcmp(got, want, plane) == 0, "%s: decode (%d, %d) differs from the oracle",
                      cases[k].text, b, h);
                if (b == 0 && h == 0)
                    for (size_t e = 0; e < plane; e++)
                        nnz += want[e];
            }
        }
        CHECK_STATUS(stof_mask_decode(m, 0, 0, got, plane - 1), STOF_ERR_INVALID_ARG);
        stof_mask_stats st;
        CHECK_OK(stof_mask_stats_get(m, &st));
        if (!cases[k].lengths) {
            CHECK(st.nnz == nnz * st.instances, "%s: stats nnz %lld, want %lld", cases[k].text,
                  (long long)st.nnz, (long long)(nnz * st.instances));
            double density = (double)nnz / (double)plane;
            CHECK(fabs(st.density - density) < 1e-12, "%s: density %.6f, want %.6f", cases[k].text,
                  st.density, density);
        }
        free(got);
        free(want);
        stof_mask_destroy(m);
        stof_mask_spec_destroy(spec);
    }
}

/* mask_tile_word against mask_tile_element: every row of each instance at
 * random word offsets and widths (bits past the width must be zero). */
static void test_words(test_rng *r, int count)
{
    int failed = 0;
    for (int k = 0; k < count && failed < 5; k++) {
        gen_case g;
        gen_case_make(r, &g, NULL, false);
        stof_tensor tq, tk;
        stof_mask_params p = gen_params(&g, &tq, &tk, STOF_BUILDER_CPU);
        mask_plan plan;
        mask_host_eval he;
        memset(&he, 0, sizeof he);
        stof_status st = mask_plan_make(NULL, g.spec, &p, true, &plan);
        if (st == STOF_OK) st = mask_host_eval_make(g.spec, &plan, &he);
        CHECK(st == STOF_OK, "case %d (%s): %s", k, g.desc, stof_last_error());
        int wrong = 0;
        for (int s = 0; st == STOF_OK && s < plan.n_inst && !wrong; s++) {
            int b, h;
            mask_instance_bh(&he.e, s, &b, &h);
            int lenq = plan.len_q[b], lenk = plan.len_k[b];
            for (int i = 0; i < plan.lq + 3 && !wrong; i++) {
                int j0 = (int)test_rng_int(r, 0, plan.lk), width = (int)test_rng_int(r, 1, 64);
                uint64_t w = mask_tile_word(&he.e, b, h, lenq, lenk, i, j0, width), want = 0;
                for (int bit = 0; bit < width; bit++)
                    if (mask_tile_element(&he.e, b, h, lenq, lenk, i, j0 + bit))
                        want |= 1ull << bit;
                if (w != want) {
                    fprintf(stderr,
                            "  word (b %d, h %d, row %d, j0 %d, width %d): %llx want %llx\n", b, h,
                            i, j0, width, (unsigned long long)w, (unsigned long long)want);
                    wrong = 1;
                }
            }
        }
        CHECK(!wrong, "case %d: word form differs from the elements: %s", k, g.desc);
        failed += wrong;
        mask_host_eval_free(&he);
        mask_plan_free(&plan);
        gen_case_free(&g, NULL);
    }
}

/* A spec within a band lists what the part the band cuts it to does, and the
 * host-side estimate (which picks tiles and kernels) must say so too: a layer
 * kind met with a user's spec must not plan worse than the kind alone. */
static void test_band_estimate(stof_ctx *ctx)
{
    static const char *pairs[][2] = {
        {"full,within:causal", "causal"},
        {"window:8,within:causal", "window:8:0"},
        {"full,within:4", "window:4"},
        {"causal,within:7:3", "window:7:0"},
        {"full,within:100:0,topleft", "window:100:0,topleft"},
    };
    int32_t lens[3] = {300, 77, 1};
    int64_t three = 3;
    stof_tensor tl = stof_tensor_make(lens, STOF_I32, STOF_MEM_HOST, 1, &three);
    for (size_t k = 0; k < sizeof pairs / sizeof pairs[0]; k++) {
        for (int shape = 0; shape < 3; shape++) {
            stof_mask_params p = stof_mask_default_params();
            p.batch = 3;
            p.len_q = shape == 2 ? 150 : 300;
            p.len_k = 300;
            p.lengths_q = shape == 0 ? &tl : NULL;
            p.tile_m = shape == 1 ? 32 : 64;
            p.tile_n = 64;
            mask_estimate est[2];
            int64_t entries[2] = {-1, -2}, partial[2] = {-1, -2};
            for (int w = 0; w < 2; w++) {
                stof_mask_spec *spec = NULL;
                stof_mask *m = NULL;
                CHECK_OK(stof_mask_spec_parse(pairs[k][w], &spec));
                CHECK_OK(stof_mask_compile(ctx, spec, &p, &m));
                mask_tiles_host h;
                if (m && stof_mask_to_host(m, &h) == STOF_OK) {
                    est[w] = *stof_mask_estimate_view(m);
                    entries[w] = h.entries;
                    partial[w] = h.partial;
                    mask_tiles_host_free(&h);
                }
                stof_mask_destroy(m);
                stof_mask_spec_destroy(spec);
            }
            CHECK(entries[0] == entries[1] && partial[0] == partial[1],
                  "%s vs %s (shape %d): %lld/%lld tiles against %lld/%lld", pairs[k][0],
                  pairs[k][1], shape, (long long)entries[0], (long long)partial[0],
                  (long long)entries[1], (long long)partial[1]);
            CHECK(est[0].tiles_per_row == est[1].tiles_per_row &&
                      est[0].partial_per_row == est[1].partial_per_row &&
                      est[0].row_imbalance == est[1].row_imbalance,
                  "%s vs %s (shape %d): estimate %.4f/%.4f/%.4f against %.4f/%.4f/%.4f",
                  pairs[k][0], pairs[k][1], shape, est[0].tiles_per_row, est[0].partial_per_row,
                  est[0].row_imbalance, est[1].tiles_per_row, est[1].partial_per_row,
                  est[1].row_imbalance);
        }
    }
}

int main(void)
{
    stof_ctx_params cp = stof_ctx_default_params();
    cp.device = STOF_DEVICE_CPU;
    stof_ctx *ctx = NULL;
    CHECK_OK(stof_ctx_create(&cp, &ctx));
    if (!ctx) return test_finish("test_mask_compile");
    test_rng r;
    test_rng_init(&r, test_seed());
    test_known_answers(ctx);
    test_tile_rule(ctx);
    test_row_imbalance(ctx);
    test_causal_flag(ctx);
    test_band_flag(ctx);
    test_residue_split(ctx);
    test_band_estimate(ctx);
    test_words(&r, 300);
    const char *env = getenv("STOF_MASK_CASES");
    test_random_cases(ctx, &r, env ? atoi(env) : 1000);
    stof_ctx_destroy(ctx);
    return test_finish("test_mask_compile");
}
