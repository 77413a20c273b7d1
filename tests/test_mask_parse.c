/*
 * test_mask_parse.c — mask spec text form and API misuse: every documented
 * form parses and formats back canonically (and the canonical form is a
 * fixed point); malformed specs are rejected with STOF_ERR_PARSE and a
 * message giving the position; builder, compile, stats and decode misuse
 * return a status and a message, never crash.
 */
#include "mask/mask.h"
#include "testlib.h"

#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- valid forms */

static void check_round_trip(const char *text, const char *canonical)
{
    stof_mask_spec *spec = NULL;
    stof_status st = stof_mask_spec_parse(text, &spec);
    CHECK(st == STOF_OK && spec, "parse \"%s\": %s", text, stof_last_error());
    if (!spec) return;
    char buf[512];
    size_t needed = 0;
    CHECK_OK(stof_mask_spec_format(spec, buf, sizeof buf, &needed));
    CHECK(strcmp(buf, canonical) == 0, "format(\"%s\") = \"%s\", want \"%s\"", text, buf,
          canonical);
    CHECK(needed == strlen(canonical) + 1, "needed %zu for \"%s\"", needed, canonical);
    stof_mask_spec *again = NULL;
    CHECK_OK(stof_mask_spec_parse(buf, &again));
    if (again) {
        char buf2[512];
        CHECK_OK(stof_mask_spec_format(again, buf2, sizeof buf2, NULL));
        CHECK(strcmp(buf, buf2) == 0, "canonical form not a fixed point: \"%s\" -> \"%s\"", buf,
              buf2);
    }
    stof_mask_spec_destroy(again);
    stof_mask_spec_destroy(spec);
}

static void test_valid_forms(void)
{
    static const char *forms[][2] = {
        {"full", "full"},
        {"causal", "causal"},
        {"window:128", "window:128"},
        {"window:0", "window:0"},
        {"window:3:5", "window:3:5"},
        {"window:4:4", "window:4"},
        {"window:007", "window:7"},
        {"window:2147483647", "window:2147483647"},
        {"dilated:4x2", "dilated:4x2"},
        {"dilated:0x1", "dilated:0x1"},
        {"global:32", "global:32"},
        {"global:[7]", "global:[7]"},
        {"global:[5,1,3,3,0]", "global:[0,1,3,5]"},
        {"random:64x3@7", "random:64x3@7"},
        {"random:1x256@18446744073709551615", "random:1x256@18446744073709551615"},
        {"blocks:2:10/01", "blocks:2:10/01"},
        {"blocks:64:1", "blocks:64:1"},
        {"blocks:16:0110/1111/0000", "blocks:16:0110/1111/0000"},
        {" window:128 , global:32 ,random:64x3@7 ", "window:128,global:32,random:64x3@7"},
        {"\twindow:1\n,\r causal", "window:1,causal"},
        {"causal,causal", "causal,causal"},
        {"causal,topleft", "causal,topleft"},
        {"topleft , window:3", "window:3,topleft"},
        {"causal,bottomright", "causal"},
        {"topleft,bottomright,causal", "causal"},
        /* Bands: printed once, after the parts, before the alignment; several intersect. */
        {"global:64,within:causal", "global:64,within:causal"},
        {"within:causal,window:256,global:64", "window:256,global:64,within:causal"},
        {"full,within:8", "full,within:8"},
        {"full,within:8:8", "full,within:8"},
        {"full,within:3:0", "full,within:3:0"},
        {"full,within:0", "full,within:0"},
        {"topleft,full,within:2:5", "full,within:2:5,topleft"},
        {"full,within:causal,within:4", "full,within:4:0"},
        {"full,within:9:2,within:3:7", "full,within:3:2"},
        {"full,within:causal,within:causal", "full,within:causal"},
        {"full,within:2147483647", "full,within:2147483647"},
    };
    for (size_t k = 0; k < sizeof forms / sizeof forms[0]; k++)
        check_round_trip(forms[k][0], forms[k][1]);

    /* Truncation follows snprintf: NUL-terminated, *needed the full size. */
    stof_mask_spec *spec = NULL;
    CHECK_OK(stof_mask_spec_parse("window:128,global:32", &spec));
    char small[8];
    size_t needed = 0;
    CHECK_OK(stof_mask_spec_format(spec, small, sizeof small, &needed));
    CHECK(needed == 21 && strcmp(small, "window:") == 0, "truncated \"%s\", needed %zu", small,
          needed);
    CHECK_OK(stof_mask_spec_format(spec, NULL, 0, &needed));
    CHECK(needed == 21, "size query gives %zu", needed);
    stof_mask_spec_destroy(spec);

    /* Parts from the builder print in the text form; dense and per-head layouts by name. */
    CHECK_OK(stof_mask_spec_create(&spec));
    uint8_t layout[2 * 2 * 2] = {1, 0, 0, 1, 1, 1, 0, 0};
    int32_t toks[3] = {9, 2, 9};
    uint8_t dense[4] = {1, 0, 0, 1};
    int64_t shape[4] = {1, 1, 2, 2};
    stof_tensor t = stof_tensor_make(dense, STOF_U8, STOF_MEM_HOST, 4, shape);
    CHECK_OK(stof_mask_spec_add_window(spec, 1, 2));
    CHECK_OK(stof_mask_spec_add_global_list(spec, toks, 3));
    CHECK_OK(stof_mask_spec_add_random(spec, 16, 2, 99));
    CHECK_OK(stof_mask_spec_add_blocks(spec, 4, 2, 2, 2, layout));
    CHECK_OK(stof_mask_spec_add_dense(spec, &t));
    char buf[256];
    CHECK_OK(stof_mask_spec_format(spec, buf, sizeof buf, NULL));
    CHECK(strcmp(buf, "window:1:2,global:[2,9],random:16x2@99,blocks:4:heads=2,dense") == 0,
          "builder spec formats as \"%s\"", buf);
    stof_mask_spec_destroy(spec);
}

/* Random specs from the builder: their canonical text parses back to itself. */
static void test_builder_round_trip(test_rng *r)
{
    for (int k = 0; k < 300; k++) {
        stof_mask_spec *spec = NULL;
        CHECK_OK(stof_mask_spec_create(&spec));
        int parts = (int)test_rng_int(r, 1, 6);
        for (int p = 0; p < parts; p++) {
            int v = (int)test_rng_int(r, 0, 1000000), w = (int)test_rng_int(r, 1, 300);
            switch (test_rng_int(r, 0, 7)) {
            case 0: stof_mask_spec_add_full(spec); break;
            case 1: stof_mask_spec_add_causal(spec); break;
            case 2: stof_mask_spec_add_window(spec, v, test_rng_int(r, 0, 1) ? v : w); break;
            case 3: stof_mask_spec_add_dilated(spec, v, w); break;
            case 4: stof_mask_spec_add_global(spec, w); break;
            case 5: {
                int32_t tok[5] = {v, w, 0, v, 7};
                stof_mask_spec_add_global_list(spec, tok, (int)test_rng_int(r, 1, 5));
                break;
            }
            case 6: stof_mask_spec_add_random(spec, w, 1 + w % 256, test_rng_next(r)); break;
            default: {
                uint8_t lay[12];
                for (int c = 0; c < 12; c++)
                    lay[c] = (uint8_t)test_rng_int(r, 0, 1);
                stof_mask_spec_add_blocks(spec, w, 1, 3, 4, lay);
                break;
            }
            }
        }
        /* Bands, one in three specs, sometimes two (they intersect). */
        for (int n = (int)test_rng_int(r, 0, 5) - 3; n > 0; n--) {
            if (test_rng_int(r, 0, 2) == 0)
                CHECK_OK(stof_mask_spec_within_causal(spec));
            else
                CHECK_OK(stof_mask_spec_within_window(spec, (int)test_rng_int(r, 0, 300),
                                                      (int)test_rng_int(r, 0, 300)));
        }
        if (test_rng_int(r, 0, 3) == 0) stof_mask_spec_set_align(spec, STOF_ALIGN_TOP_LEFT);
        size_t needed = 0;
        CHECK_OK(stof_mask_spec_format(spec, NULL, 0, &needed));
        char *a = malloc(needed), *b = malloc(needed);
        CHECK_OK(stof_mask_spec_format(spec, a, needed, NULL));
        stof_mask_spec *again = NULL;
        stof_status st = stof_mask_spec_parse(a, &again);
        CHECK(st == STOF_OK, "builder text \"%s\" does not parse: %s", a, stof_last_error());
        if (again) {
            CHECK_OK(stof_mask_spec_format(again, b, needed, NULL));
            CHECK(strcmp(a, b) == 0, "\"%s\" re-formats as \"%s\"", a, b);
        }
        /* A copy outlives its original and formats the same. */
        stof_mask_spec *copy = NULL;
        CHECK_OK(stof_mask_spec_copy(spec, &copy));
        stof_mask_spec_destroy(spec);
        if (copy) {
            CHECK_OK(stof_mask_spec_format(copy, b, needed, NULL));
            CHECK(strcmp(a, b) == 0, "copy of \"%s\" formats as \"%s\"", a, b);
        }
        free(a);
        free(b);
        stof_mask_spec_destroy(again);
        stof_mask_spec_destroy(copy);
    }
}

/* ---------------------------------------------------------------- malformed */

static void check_rejected(const char *text, int position)
{
    stof_mask_spec *spec = (stof_mask_spec *)(uintptr_t)1;
    stof_status st = stof_mask_spec_parse(text, &spec);
    const char *msg = stof_last_error();
    CHECK(st == STOF_ERR_PARSE && strstr(msg, "position") != NULL && spec == NULL,
          "\"%s\" -> %s, message \"%s\"", text, stof_status_str(st), msg);
    if (position > 0) {
        char want[32];
        snprintf(want, sizeof want, "position %d:", position);
        CHECK(strstr(msg, want) != NULL, "\"%s\": message \"%s\" lacks \"%s\"", text, msg, want);
    }
    if (st == STOF_OK) stof_mask_spec_destroy(spec);
}

static void test_malformed(void)
{
    static const struct {
        const char *text;
        int position; /* 0: not checked */
    } bad[] = {
        {"", 1},
        {"   ", 4},
        {"window", 7},
        {"window:", 8},
        {"window:x", 8},
        {"window:-1", 8},
        {"window:+1", 8},
        {"window:1:", 10},
        {"window:1:2:3", 11},
        {"window:2147483648", 8},
        {"window:99999999999999999999", 8},
        {"window: 1", 8},
        {"window :1", 7},
        {"Window:1", 1},
        {"windows:1", 1},
        {"dilated:3", 10},
        {"dilated:3x0", 11},
        {"dilated:x2", 9},
        {"dilated:3X2", 10},
        {"global:0", 8},
        {"global:", 8},
        {"global:[", 9},
        {"global:[]", 9},
        {"global:[1,", 11},
        {"global:[1,,2]", 11},
        {"global:[1 ,2]", 10},
        {"global:[-1]", 9},
        {"global:[1]x", 11},
        {"random:64x3", 12},
        {"random:64x3@", 13},
        {"random:64x3@x", 13},
        {"random:0x3@1", 8},
        {"random:64x0@1", 11},
        {"random:64x257@1", 11},
        {"random:64x3@18446744073709551616", 13},
        {"random:64@1", 10},
        {"blocks:", 8},
        {"blocks:4", 9},
        {"blocks:4:", 10},
        {"blocks:4:12", 11},
        {"blocks:4:10/1", 13},
        {"blocks:4:10/", 13},
        {"blocks:0:1", 8},
        {"full:1", 5},
        {"fullx", 1},
        {"causal causal", 8},
        {"window:1,", 10},
        {",window:1", 1},
        {"window:1,,global:2", 10},
        {"window:1;global:2", 9},
        {"dense", 1},
        {"foo", 1},
        {"window:\xff", 8},
        {"causal\x01", 7},
        {"full,within", 12},
        {"full,within:", 13},
        {"full,within:x", 13},
        {"full,within:-1", 13},
        {"full,within:3:", 15},
        {"full,within:causalx", 19},
        {"full,within:causal:1", 19},
        {"full,within:2147483648", 13},
        {"full,Within:1", 6},
    };
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++)
        check_rejected(bad[k].text, bad[k].position);
    /* 64 parts parse; the 65th is refused where it starts. */
    char many[65 * 7 + 1] = "";
    for (int k = 0; k < 64; k++)
        strcat(many, k ? ",causal" : "causal");
    stof_mask_spec *spec = NULL;
    CHECK_OK(stof_mask_spec_parse(many, &spec));
    stof_mask_spec_destroy(spec);
    strcat(many, ",causal");
    check_rejected(many, 64 * 7 + 1);
    CHECK(strstr(stof_last_error(), "64") != NULL, "too-many message: %s", stof_last_error());
    /* The dense message says where dense masks come from. */
    check_rejected("dense", 1);
    CHECK(strstr(stof_last_error(), "tensor") != NULL, "dense message: %s", stof_last_error());
    /* The alignment words place parts; alone they are no spec (and would format as "",
     * which does not parse back). */
    check_rejected("bottomright", 1);
    check_rejected("\n\nbottomright", 1);
    check_rejected("topleft", 1);
    check_rejected("topleft,bottomright", 1);
    /* So is a band alone (it qualifies parts, and would format as a spec of none). */
    check_rejected("within:causal", 1);
    check_rejected("within:4,topleft", 1);
    CHECK(strstr(stof_last_error(), "within") != NULL, "band-alone message: %s", stof_last_error());
    /* An alignment word is no part, nor is a band: 64 parts with topleft and a band, in
     * either order, parse and format back to a spec that parses. */
    {
        char text[64 * 12 + 32] = "topleft,within:3:1";
        for (int i = 0; i < 64; i++)
            strcat(text, ",global:2");
        stof_mask_spec *aligned = NULL;
        CHECK_OK(stof_mask_spec_parse(text, &aligned));
        char back[sizeof text];
        if (aligned) {
            CHECK_OK(stof_mask_spec_format(aligned, back, sizeof back, NULL));
            stof_mask_spec *again = NULL;
            CHECK_OK(stof_mask_spec_parse(back, &again));
            stof_mask_spec_destroy(again);
        }
        stof_mask_spec_destroy(aligned);
    }
}

/* ---------------------------------------------------------------- builder misuse */

static void test_builder_misuse(void)
{
    CHECK_STATUS(stof_mask_spec_create(NULL), STOF_ERR_INVALID_ARG);
    stof_mask_spec *out = NULL;
    CHECK_STATUS(stof_mask_spec_parse(NULL, &out), STOF_ERR_INVALID_ARG);
    CHECK_STATUS(stof_mask_spec_parse("causal", NULL), STOF_ERR_INVALID_ARG);
    CHECK_STATUS(stof_mask_spec_format(NULL, NULL, 0, NULL), STOF_ERR_INVALID_ARG);
    CHECK_STATUS(stof_mask_spec_add_full(NULL), STOF_ERR_INVALID_ARG);
    CHECK_STATUS(stof_mask_spec_add_causal(NULL), STOF_ERR_INVALID_ARG);
    CHECK_STATUS(stof_mask_spec_add_window(NULL, 1, 1), STOF_ERR_INVALID_ARG);
    CHECK_STATUS(stof_mask_spec_add_dilated(NULL, 1, 1), STOF_ERR_INVALID_ARG);
    CHECK_STATUS(stof_mask_spec_add_global(NULL, 1), STOF_ERR_INVALID_ARG);
    CHECK_STATUS(stof_mask_spec_add_random(NULL, 1, 1, 0), STOF_ERR_INVALID_ARG);
    CHECK_STATUS(stof_mask_spec_set_align(NULL, STOF_ALIGN_TOP_LEFT), STOF_ERR_INVALID_ARG);
    CHECK_STATUS(stof_mask_spec_within_causal(NULL), STOF_ERR_INVALID_ARG);
    CHECK_STATUS(stof_mask_spec_within_window(NULL, 1, 1), STOF_ERR_INVALID_ARG);
    CHECK_STATUS(stof_mask_spec_copy(NULL, &out), STOF_ERR_INVALID_ARG);
    stof_mask_spec_destroy(NULL);

    stof_mask_spec *spec = NULL;
    CHECK_OK(stof_mask_spec_create(&spec));
    CHECK_STATUS(stof_mask_spec_format(spec, NULL, 4, NULL), STOF_ERR_INVALID_ARG);
    CHECK_STATUS(stof_mask_spec_add_window(spec, -1, 0), STOF_ERR_INVALID_ARG);
    CHECK_STATUS(stof_mask_spec_add_window(spec, 0, -5), STOF_ERR_INVALID_ARG);
    CHECK(strstr(stof_last_error(), "-5") != NULL, "message names the value: %s",
          stof_last_error());
    CHECK_STATUS(stof_mask_spec_within_window(spec, -2, 0), STOF_ERR_INVALID_ARG);
    CHECK(strstr(stof_last_error(), "-2") != NULL, "message names the value: %s",
          stof_last_error());
    CHECK_STATUS(stof_mask_spec_within_window(spec, 0, -1), STOF_ERR_INVALID_ARG);
    CHECK_STATUS(stof_mask_spec_copy(spec, NULL), STOF_ERR_INVALID_ARG);
    CHECK_STATUS(stof_mask_spec_add_dilated(spec, 1, 0), STOF_ERR_INVALID_ARG);
    CHECK_STATUS(stof_mask_spec_add_dilated(spec, -1, 1), STOF_ERR_INVALID_ARG);
    CHECK_STATUS(stof_mask_spec_add_global(spec, 0), STOF_ERR_INVALID_ARG);
    int32_t toks[2] = {3, -4};
    CHECK_STATUS(stof_mask_spec_add_global_list(spec, NULL, 1), STOF_ERR_INVALID_ARG);
    CHECK_STATUS(stof_mask_spec_add_global_list(spec, toks, 0), STOF_ERR_INVALID_ARG);
    CHECK_STATUS(stof_mask_spec_add_global_list(spec, toks, 2), STOF_ERR_INVALID_ARG);
    CHECK(strstr(stof_last_error(), "tokens[1]") != NULL, "message: %s", stof_last_error());
    CHECK_STATUS(stof_mask_spec_add_random(spec, 0, 1, 0), STOF_ERR_INVALID_ARG);
    CHECK_STATUS(stof_mask_spec_add_random(spec, 8, 0, 0), STOF_ERR_INVALID_ARG);
    CHECK_STATUS(stof_mask_spec_add_random(spec, 8, 257, 0), STOF_ERR_INVALID_ARG);
    uint8_t lay[4] = {1, 0, 2, 1};
    CHECK_STATUS(stof_mask_spec_add_blocks(spec, 4, 1, 2, 2, NULL), STOF_ERR_INVALID_ARG);
    CHECK_STATUS(stof_mask_spec_add_blocks(spec, 0, 1, 2, 2, lay), STOF_ERR_INVALID_ARG);
    CHECK_STATUS(stof_mask_spec_add_blocks(spec, 4, 0, 2, 2, lay), STOF_ERR_INVALID_ARG);
    CHECK_STATUS(stof_mask_spec_add_blocks(spec, 4, 1, 0, 2, lay), STOF_ERR_INVALID_ARG);
    CHECK_STATUS(stof_mask_spec_add_blocks(spec, 4, 1, 2, 2, lay), STOF_ERR_INVALID_ARG);
    CHECK(strstr(stof_last_error(), "[0][1][0] = 2") != NULL, "message: %s", stof_last_error());
    CHECK_STATUS(stof_mask_spec_add_blocks(spec, 4, 1, 100000, 100000, lay), STOF_ERR_INVALID_ARG);
    uint8_t d[4] = {0};
    int64_t shape4[4] = {1, 1, 2, 2}, shape3[3] = {1, 2, 2};
    stof_tensor t = stof_tensor_make(d, STOF_F32, STOF_MEM_HOST, 4, shape4);
    CHECK_STATUS(stof_mask_spec_add_dense(spec, NULL), STOF_ERR_INVALID_ARG);
    CHECK_STATUS(stof_mask_spec_add_dense(spec, &t), STOF_ERR_SHAPE);
    t = stof_tensor_make(d, STOF_U8, STOF_MEM_HOST, 3, shape3);
    CHECK_STATUS(stof_mask_spec_add_dense(spec, &t), STOF_ERR_SHAPE);
    t = stof_tensor_make(NULL, STOF_U8, STOF_MEM_HOST, 4, shape4);
    CHECK_STATUS(stof_mask_spec_add_dense(spec, &t), STOF_ERR_INVALID_ARG);
    /* Nothing was added by the failed calls; 64 parts fit, the 65th does not. */
    char buf[8];
    size_t needed = 0;
    CHECK_OK(stof_mask_spec_format(spec, buf, sizeof buf, &needed));
    CHECK(needed == 1, "failed adds left parts behind: \"%s\"", buf);
    for (int k = 0; k < 64; k++)
        CHECK_OK(stof_mask_spec_add_causal(spec));
    CHECK_STATUS(stof_mask_spec_add_causal(spec), STOF_ERR_INVALID_ARG);
    stof_mask_spec_destroy(spec);
}

/* ---------------------------------------------------------------- compile misuse */

static void test_compile_misuse(stof_ctx *ctx)
{
    stof_mask_spec *spec = NULL, *empty = NULL;
    CHECK_OK(stof_mask_spec_parse("window:4", &spec));
    CHECK_OK(stof_mask_spec_create(&empty));
    stof_mask_params p = stof_mask_default_params();
    p.batch = 2;
    p.heads = 2;
    p.len_q = p.len_k = 40;
    stof_mask *m = (stof_mask *)(uintptr_t)1;
    CHECK_STATUS(stof_mask_compile(ctx, spec, &p, NULL), STOF_ERR_INVALID_ARG);
    CHECK_STATUS(stof_mask_compile(NULL, spec, &p, &m), STOF_ERR_INVALID_ARG);
    CHECK(m == NULL, "out cleared on failure");
    CHECK_STATUS(stof_mask_compile(ctx, NULL, &p, &m), STOF_ERR_INVALID_ARG);
    CHECK_STATUS(stof_mask_compile(ctx, spec, NULL, &m), STOF_ERR_INVALID_ARG);
    CHECK_STATUS(stof_mask_compile(ctx, empty, &p, &m), STOF_ERR_INVALID_ARG);

    stof_mask_params q = p;
    q.batch = 0;
    CHECK_STATUS(stof_mask_compile(ctx, spec, &q, &m), STOF_ERR_INVALID_ARG);
    q = p;
    q.heads = -1;
    CHECK_STATUS(stof_mask_compile(ctx, spec, &q, &m), STOF_ERR_INVALID_ARG);
    q = p;
    q.len_q = 0;
    CHECK_STATUS(stof_mask_compile(ctx, spec, &q, &m), STOF_ERR_INVALID_ARG);
    q = p;
    q.len_k = -3;
    CHECK_STATUS(stof_mask_compile(ctx, spec, &q, &m), STOF_ERR_INVALID_ARG);
    CHECK(strstr(stof_last_error(), "-3") != NULL, "message: %s", stof_last_error());
    q = p;
    q.len_q = 2147483647;
    CHECK_STATUS(stof_mask_compile(ctx, spec, &q, &m), STOF_ERR_INVALID_ARG);
    q = p;
    q.tile_m = 48;
    CHECK_STATUS(stof_mask_compile(ctx, spec, &q, &m), STOF_ERR_INVALID_ARG);
    q = p;
    q.tile_n = 256;
    CHECK_STATUS(stof_mask_compile(ctx, spec, &q, &m), STOF_ERR_INVALID_ARG);
    q = p;
    q.builder = (stof_mask_builder)7;
    CHECK_STATUS(stof_mask_compile(ctx, spec, &q, &m), STOF_ERR_INVALID_ARG);
    q = p;
    q.builder = STOF_BUILDER_GPU;
    CHECK_STATUS(stof_mask_compile(ctx, spec, &q, &m), STOF_ERR_INVALID_ARG);
    q = p;
    q.len_q = 100000;
    q.len_k = 100000;
    q.tile_m = q.tile_n = 16;
    q.batch = 300;
    int32_t big_lens[300];
    for (int b = 0; b < 300; b++)
        big_lens[b] = 5;
    int64_t n300 = 300;
    stof_tensor tbig = stof_tensor_make(big_lens, STOF_I32, STOF_MEM_HOST, 1, &n300);
    q.lengths_q = &tbig;
    CHECK_STATUS(stof_mask_compile(ctx, spec, &q, &m), STOF_ERR_UNSUPPORTED);

    /* Lengths: dtype, shape, range, memory. */
    int32_t lens[3] = {40, 41, 5};
    float flens[2] = {1, 2};
    int64_t n2 = 2, n3 = 3, n22[2] = {2, 1};
    stof_tensor tl = stof_tensor_make(lens, STOF_I32, STOF_MEM_HOST, 1, &n2);
    q = p;
    q.lengths_q = &tl;
    CHECK_STATUS(stof_mask_compile(ctx, spec, &q, &m), STOF_ERR_INVALID_ARG);
    CHECK(strstr(stof_last_error(), "lengths_q[1] = 41") != NULL, "message: %s", stof_last_error());
    lens[1] = -1;
    CHECK_STATUS(stof_mask_compile(ctx, spec, &q, &m), STOF_ERR_INVALID_ARG);
    lens[1] = 7;
    q.lengths_k = &tl;
    q.len_k = 6;
    CHECK_STATUS(stof_mask_compile(ctx, spec, &q, &m), STOF_ERR_INVALID_ARG);
    CHECK(strstr(stof_last_error(), "lengths_k") != NULL, "message: %s", stof_last_error());
    stof_tensor tf = stof_tensor_make(flens, STOF_F32, STOF_MEM_HOST, 1, &n2);
    q = p;
    q.lengths_q = &tf;
    CHECK_STATUS(stof_mask_compile(ctx, spec, &q, &m), STOF_ERR_SHAPE);
    stof_tensor t3 = stof_tensor_make(lens, STOF_I32, STOF_MEM_HOST, 1, &n3);
    q.lengths_q = &t3;
    CHECK_STATUS(stof_mask_compile(ctx, spec, &q, &m), STOF_ERR_SHAPE);
    stof_tensor t22 = stof_tensor_make(lens, STOF_I32, STOF_MEM_HOST, 2, n22);
    q.lengths_q = &t22;
    CHECK_STATUS(stof_mask_compile(ctx, spec, &q, &m), STOF_ERR_SHAPE);
    /* A device pointer is never dereferenced on a CPU context. */
    stof_tensor tdev = stof_tensor_make((void *)(uintptr_t)0x10, STOF_I32, STOF_MEM_DEVICE, 1, &n2);
    q.lengths_q = &tdev;
    CHECK_STATUS(stof_mask_compile(ctx, spec, &q, &m), STOF_ERR_INVALID_ARG);
    CHECK(strstr(stof_last_error(), "device") != NULL, "message: %s", stof_last_error());

    /* Dense parts: shapes against the params, memory against the ctx. */
    static uint8_t dense[2 * 2 * 40 * 40];
    struct {
        int64_t shape[4];
        stof_memory mem;
        stof_status want;
        const char *needle;
    } dcases[] = {
        {{2, 2, 40, 40}, STOF_MEM_HOST, STOF_OK, ""},
        {{1, 1, 40, 40}, STOF_MEM_HOST, STOF_OK, ""},
        {{2, 2, 39, 40}, STOF_MEM_HOST, STOF_ERR_SHAPE, "Lq = 39 but len_q is 40"},
        {{2, 2, 40, 41}, STOF_MEM_HOST, STOF_ERR_SHAPE, "Lk = 41 but len_k is 40"},
        {{3, 2, 40, 40}, STOF_MEM_HOST, STOF_ERR_SHAPE, "batch dimension 3"},
        {{2, 4, 40, 40}, STOF_MEM_HOST, STOF_ERR_SHAPE, "head dimension 4"},
        {{2, 2, 40, 40}, STOF_MEM_DEVICE, STOF_ERR_INVALID_ARG, "device"},
    };
    for (size_t k = 0; k < sizeof dcases / sizeof dcases[0]; k++) {
        stof_mask_spec *ds = NULL;
        CHECK_OK(stof_mask_spec_create(&ds));
        void *data = dcases[k].mem == STOF_MEM_HOST ? (void *)dense : (void *)(uintptr_t)0x10;
        stof_tensor t = stof_tensor_make(data, STOF_U8, dcases[k].mem, 4, dcases[k].shape);
        CHECK_OK(stof_mask_spec_add_dense(ds, &t));
        m = NULL;
        stof_status st = stof_mask_compile(ctx, ds, &p, &m);
        CHECK(st == dcases[k].want && strstr(stof_last_error(), dcases[k].needle),
              "dense case %zu -> %s \"%s\"", k, stof_status_str(st), stof_last_error());
        stof_mask_destroy(m);
        stof_mask_spec_destroy(ds);
    }

    /* Blocks: heads 1 or H, layouts that cover the lengths. */
    uint8_t lay[3 * 10 * 10];
    memset(lay, 1, sizeof lay);
    struct {
        int bs, heads, rows, cols;
        stof_status want;
    } bcases[] = {
        {4, 1, 10, 10, STOF_OK},        {4, 2, 10, 10, STOF_OK},
        {4, 3, 10, 10, STOF_ERR_SHAPE}, {4, 1, 9, 10, STOF_ERR_SHAPE},
        {4, 1, 10, 9, STOF_ERR_SHAPE},  {5, 1, 8, 8, STOF_OK},
    };
    for (size_t k = 0; k < sizeof bcases / sizeof bcases[0]; k++) {
        stof_mask_spec *bsp = NULL;
        CHECK_OK(stof_mask_spec_create(&bsp));
        CHECK_OK(stof_mask_spec_add_blocks(bsp, bcases[k].bs, bcases[k].heads, bcases[k].rows,
                                           bcases[k].cols, lay));
        m = NULL;
        stof_status st = stof_mask_compile(ctx, bsp, &p, &m);
        CHECK(st == bcases[k].want && (st == STOF_OK || stof_last_error()[0]),
              "blocks case %zu -> %s \"%s\"", k, stof_status_str(st), stof_last_error());
        stof_mask_destroy(m);
        stof_mask_spec_destroy(bsp);
    }

    /* Stats, decode and the oracle. */
    m = NULL;
    CHECK_OK(stof_mask_compile(ctx, spec, &p, &m));
    uint8_t plane[40 * 40];
    stof_mask_stats stats;
    CHECK_STATUS(stof_mask_stats_get(NULL, &stats), STOF_ERR_INVALID_ARG);
    CHECK_STATUS(stof_mask_stats_get(m, NULL), STOF_ERR_INVALID_ARG);
    CHECK_STATUS(stof_mask_decode(NULL, 0, 0, plane, sizeof plane), STOF_ERR_INVALID_ARG);
    CHECK_STATUS(stof_mask_decode(m, 0, 0, NULL, sizeof plane), STOF_ERR_INVALID_ARG);
    CHECK_STATUS(stof_mask_decode(m, 2, 0, plane, sizeof plane), STOF_ERR_INVALID_ARG);
    CHECK_STATUS(stof_mask_decode(m, 0, -1, plane, sizeof plane), STOF_ERR_INVALID_ARG);
    CHECK_STATUS(stof_mask_decode(m, 0, 0, plane, sizeof plane - 1), STOF_ERR_INVALID_ARG);
    CHECK_OK(stof_mask_decode(m, 1, 1, plane, sizeof plane));
    CHECK_STATUS(stof_mask_spec_to_dense(spec, 2, 2, 40, 40, NULL, NULL, 2, 0, plane),
                 STOF_ERR_INVALID_ARG);
    CHECK_STATUS(stof_mask_spec_to_dense(spec, 2, 2, 40, 40, NULL, NULL, 0, 0, NULL),
                 STOF_ERR_INVALID_ARG);
    CHECK_STATUS(stof_mask_spec_to_dense(empty, 2, 2, 40, 40, NULL, NULL, 0, 0, plane),
                 STOF_ERR_INVALID_ARG);
    CHECK_STATUS(stof_mask_spec_to_dense(spec, 2, 2, 0, 40, NULL, NULL, 0, 0, plane),
                 STOF_ERR_INVALID_ARG);
    mask_tiles_host h;
    CHECK_STATUS(stof_mask_to_host(NULL, &h), STOF_ERR_INVALID_ARG);
    CHECK_STATUS(stof_mask_to_host(m, NULL), STOF_ERR_INVALID_ARG);
    CHECK(stof_mask_tiles_view(NULL) == NULL && stof_mask_ctx(m) == ctx &&
              stof_mask_memory(m) == STOF_MEM_HOST,
          "views");
    stof_mask_destroy(m);
    stof_mask_destroy(NULL);
    stof_mask_spec_destroy(spec);
    stof_mask_spec_destroy(empty);
}

int main(void)
{
    test_rng r;
    test_rng_init(&r, test_seed());
    test_valid_forms();
    test_builder_round_trip(&r);
    test_malformed();
    test_builder_misuse();
    stof_ctx_params cp = stof_ctx_default_params();
    cp.device = STOF_DEVICE_CPU;
    stof_ctx *ctx = NULL;
    CHECK_OK(stof_ctx_create(&cp, &ctx));
    if (ctx) test_compile_misuse(ctx);
    stof_ctx_destroy(ctx);
    return test_finish("test_mask_parse");
}
