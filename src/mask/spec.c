/*
 * spec.c — mask specs: the builder calls, the text parser and the canonical
 * formatter. The parser is a small recursive descent over the grammar of
 * stof.h; every rejection names the 1-based character position and what was
 * expected there. Values are checked by the parser (so the message can point
 * at them) and again by the builder calls (for API users).
 */
#include "mask/mask_internal.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- builder */

stof_status stof_mask_spec_create(stof_mask_spec **out)
{
    STOF_REQUIRE(out, STOF_ERR_INVALID_ARG, "stof_mask_spec_create: out is NULL");
    *out = NULL;
    stof_mask_spec *s = NULL;
    STOF_TRY(stof_host_calloc(1, sizeof *s, (void **)&s));
    s->band_left = s->band_right = MASK_BAND_OPEN;
    *out = s;
    return STOF_OK;
}

void stof_mask_spec_destroy(stof_mask_spec *spec)
{
    if (!spec) return;
    for (int i = 0; i < spec->n_parts; i++) {
        free(spec->parts[i].list);
        free(spec->parts[i].layout);
        free(spec->parts[i].sat);
    }
    free(spec);
}

stof_status stof_mask_spec_set_align(stof_mask_spec *spec, stof_mask_align align)
{
    STOF_REQUIRE(spec, STOF_ERR_INVALID_ARG, "stof_mask_spec_set_align: spec is NULL");
    STOF_REQUIRE(align == STOF_ALIGN_BOTTOM_RIGHT || align == STOF_ALIGN_TOP_LEFT,
                 STOF_ERR_INVALID_ARG,
                 "stof_mask_spec_set_align: alignment %d is not STOF_ALIGN_BOTTOM_RIGHT (0) or "
                 "STOF_ALIGN_TOP_LEFT (1)",
                 (int)align);
    spec->align = align;
    return STOF_OK;
}

/* Both calls intersect: the band only ever narrows, so the order of the
 * clauses does not matter and the result is one band again (causal is the
 * band with no left bound and right 0). */
stof_status stof_mask_spec_within_causal(stof_mask_spec *spec)
{
    STOF_REQUIRE(spec, STOF_ERR_INVALID_ARG, "stof_mask_spec_within_causal: spec is NULL");
    spec->band_right = 0;
    return STOF_OK;
}

stof_status stof_mask_spec_within_window(stof_mask_spec *spec, int left, int right)
{
    STOF_REQUIRE(spec, STOF_ERR_INVALID_ARG, "stof_mask_spec_within_window: spec is NULL");
    STOF_REQUIRE(left >= 0 && right >= 0, STOF_ERR_INVALID_ARG,
                 "stof_mask_spec_within_window: left %d and right %d must be >= 0", left, right);
    if (left < spec->band_left) spec->band_left = left;
    if (right < spec->band_right) spec->band_right = right;
    return STOF_OK;
}

/* Copies of the arrays a part owns (list, layout, summed-area table). */
static stof_status spec_copy_part(const mask_part *src, mask_part *dst)
{
    *dst = *src;
    dst->list = NULL;
    dst->layout = NULL;
    dst->sat = NULL;
    if (src->list) {
        size_t bytes = (size_t)src->a * sizeof *src->list;
        STOF_TRY(stof_host_alloc(bytes, (void **)&dst->list));
        memcpy(dst->list, src->list, bytes);
    }
    if (src->layout) {
        size_t cells = (size_t)src->heads * src->rows * src->cols;
        size_t sat = (size_t)src->heads * (src->rows + 1) * (src->cols + 1) * sizeof *src->sat;
        STOF_TRY(stof_host_alloc(cells, (void **)&dst->layout));
        memcpy(dst->layout, src->layout, cells);
        STOF_TRY(stof_host_alloc(sat, (void **)&dst->sat));
        memcpy(dst->sat, src->sat, sat);
    }
    return STOF_OK;
}

stof_status stof_mask_spec_copy(const stof_mask_spec *spec, stof_mask_spec **out)
{
    STOF_REQUIRE(out, STOF_ERR_INVALID_ARG, "stof_mask_spec_copy: out is NULL");
    *out = NULL;
    STOF_REQUIRE(spec, STOF_ERR_INVALID_ARG, "stof_mask_spec_copy: spec is NULL");
    stof_mask_spec *c = NULL;
    STOF_TRY(stof_mask_spec_create(&c));
    c->align = spec->align;
    c->band_left = spec->band_left;
    c->band_right = spec->band_right;
    stof_status st = STOF_OK;
    for (int i = 0; i < spec->n_parts && st == STOF_OK; i++) {
        st = spec_copy_part(&spec->parts[i], &c->parts[i]);
        c->n_parts = i + 1; /* the part's arrays are freed with c from here on */
    }
    if (st != STOF_OK) {
        stof_mask_spec_destroy(c);
        return st;
    }
    *out = c;
    return STOF_OK;
}

/* A fresh part slot, or an error naming the call. */
static stof_status spec_new_part(stof_mask_spec *spec, const char *call, int kind, mask_part **out)
{
    *out = NULL;
    STOF_REQUIRE(spec, STOF_ERR_INVALID_ARG, "%s: spec is NULL", call);
    STOF_REQUIRE(spec->n_parts < MASK_MAX_PARTS, STOF_ERR_INVALID_ARG,
                 "%s: the mask spec already has %d parts (the maximum)", call, MASK_MAX_PARTS);
    mask_part *p = &spec->parts[spec->n_parts];
    memset(p, 0, sizeof *p);
    p->kind = kind;
    *out = p;
    return STOF_OK;
}

stof_status stof_mask_spec_add_full(stof_mask_spec *spec)
{
    mask_part *p;
    STOF_TRY(spec_new_part(spec, "stof_mask_spec_add_full", MASK_PART_FULL, &p));
    spec->n_parts++;
    return STOF_OK;
}

stof_status stof_mask_spec_add_causal(stof_mask_spec *spec)
{
    mask_part *p;
    STOF_TRY(spec_new_part(spec, "stof_mask_spec_add_causal", MASK_PART_CAUSAL, &p));
    spec->n_parts++;
    return STOF_OK;
}

stof_status stof_mask_spec_add_window(stof_mask_spec *spec, int left, int right)
{
    mask_part *p;
    STOF_TRY(spec_new_part(spec, "stof_mask_spec_add_window", MASK_PART_WINDOW, &p));
    STOF_REQUIRE(left >= 0 && right >= 0, STOF_ERR_INVALID_ARG,
                 "stof_mask_spec_add_window: left %d and right %d must be >= 0", left, right);
    p->a = left;
    p->b = right;
    spec->n_parts++;
    return STOF_OK;
}

stof_status stof_mask_spec_add_dilated(stof_mask_spec *spec, int window, int dilation)
{
    mask_part *p;
    STOF_TRY(spec_new_part(spec, "stof_mask_spec_add_dilated", MASK_PART_DILATED, &p));
    STOF_REQUIRE(window >= 0, STOF_ERR_INVALID_ARG,
                 "stof_mask_spec_add_dilated: window %d must be >= 0", window);
    STOF_REQUIRE(dilation >= 1, STOF_ERR_INVALID_ARG,
                 "stof_mask_spec_add_dilated: dilation %d must be >= 1", dilation);
    p->a = window;
    p->b = dilation;
    spec->n_parts++;
    return STOF_OK;
}

stof_status stof_mask_spec_add_global(stof_mask_spec *spec, int n)
{
    mask_part *p;
    STOF_TRY(spec_new_part(spec, "stof_mask_spec_add_global", MASK_PART_GLOBAL_N, &p));
    STOF_REQUIRE(n >= 1, STOF_ERR_INVALID_ARG, "stof_mask_spec_add_global: n %d must be >= 1", n);
    p->a = n;
    spec->n_parts++;
    return STOF_OK;
}

static int cmp_i32(const void *a, const void *b)
{
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

stof_status stof_mask_spec_add_global_list(stof_mask_spec *spec, const int32_t *tokens, int count)
{
    mask_part *p;
    STOF_TRY(spec_new_part(spec, "stof_mask_spec_add_global_list", MASK_PART_GLOBAL_LIST, &p));
    STOF_REQUIRE(tokens, STOF_ERR_INVALID_ARG, "stof_mask_spec_add_global_list: tokens is NULL");
    STOF_REQUIRE(count >= 1 && count <= MASK_MAX_GLOBAL_LIST, STOF_ERR_INVALID_ARG,
                 "stof_mask_spec_add_global_list: count %d must be in [1, %d]", count,
                 MASK_MAX_GLOBAL_LIST);
    for (int i = 0; i < count; i++)
        STOF_REQUIRE(tokens[i] >= 0, STOF_ERR_INVALID_ARG,
                     "stof_mask_spec_add_global_list: tokens[%d] = %d is negative", i,
                     (int)tokens[i]);
    int32_t *list = NULL;
    STOF_TRY(stof_host_alloc((size_t)count * sizeof *list, (void **)&list));
    memcpy(list, tokens, (size_t)count * sizeof *list);
    qsort(list, (size_t)count, sizeof *list, cmp_i32);
    int n = 0;
    for (int i = 0; i < count; i++)
        if (n == 0 || list[n - 1] != list[i]) list[n++] = list[i];
    p->list = list;
    p->a = n;
    spec->n_parts++;
    return STOF_OK;
}

stof_status stof_mask_spec_add_random(stof_mask_spec *spec, int block, int per_row, uint64_t seed)
{
    mask_part *p;
    STOF_TRY(spec_new_part(spec, "stof_mask_spec_add_random", MASK_PART_RANDOM, &p));
    STOF_REQUIRE(block >= 1, STOF_ERR_INVALID_ARG,
                 "stof_mask_spec_add_random: block %d must be >= 1", block);
    STOF_REQUIRE(per_row >= 1 && per_row <= MASK_MAX_RANDOM_PER_ROW, STOF_ERR_INVALID_ARG,
                 "stof_mask_spec_add_random: per_row %d must be in [1, %d]", per_row,
                 MASK_MAX_RANDOM_PER_ROW);
    p->a = block;
    p->b = per_row;
    p->seed = seed;
    spec->n_parts++;
    return STOF_OK;
}

/* Summed-area table of each head's layout: tile classification in O(1). */
static void blocks_fill_sat(const uint8_t *layout, int heads, int rows, int cols, int32_t *sat)
{
    int64_t w = (int64_t)cols + 1;
    for (int h = 0; h < heads; h++) {
        int32_t *s = sat + (int64_t)h * (rows + 1) * w;
        const uint8_t *l = layout + (int64_t)h * rows * cols;
        for (int64_t c = 0; c <= cols; c++)
            s[c] = 0;
        for (int64_t r = 0; r < rows; r++) {
            int32_t run = 0;
            s[(r + 1) * w] = 0;
            for (int64_t c = 0; c < cols; c++) {
                run += l[r * cols + c];
                s[(r + 1) * w + c + 1] = s[r * w + c + 1] + run;
            }
        }
    }
}

stof_status stof_mask_spec_add_blocks(stof_mask_spec *spec, int block_size, int heads, int rows,
                                      int cols, const uint8_t *layout)
{
    const char *call = "stof_mask_spec_add_blocks";
    mask_part *p;
    STOF_TRY(spec_new_part(spec, call, MASK_PART_BLOCKS, &p));
    STOF_REQUIRE(layout, STOF_ERR_INVALID_ARG, "%s: layout is NULL", call);
    STOF_REQUIRE(block_size >= 1, STOF_ERR_INVALID_ARG, "%s: block_size %d must be >= 1", call,
                 block_size);
    STOF_REQUIRE(heads >= 1 && rows >= 1 && cols >= 1, STOF_ERR_INVALID_ARG,
                 "%s: heads %d, rows %d and cols %d must be >= 1", call, heads, rows, cols);
    int64_t cells = (int64_t)heads * rows * cols;
    STOF_REQUIRE(cells <= MASK_MAX_LAYOUT_CELLS, STOF_ERR_INVALID_ARG,
                 "%s: layout of %d x %d x %d blocks is too large (at most %d)", call, heads, rows,
                 cols, MASK_MAX_LAYOUT_CELLS);
    for (int64_t k = 0; k < cells; k++)
        STOF_REQUIRE(layout[k] <= 1, STOF_ERR_INVALID_ARG,
                     "%s: layout[%lld][%lld][%lld] = %d (must be 0 or 1)", call,
                     (long long)(k / ((int64_t)rows * cols)), (long long)(k / cols % rows),
                     (long long)(k % cols), (int)layout[k]);
    uint8_t *copy = NULL;
    int32_t *sat = NULL;
    STOF_TRY(stof_host_alloc((size_t)cells, (void **)&copy));
    stof_status st = stof_host_alloc(
        (size_t)heads * ((size_t)rows + 1) * ((size_t)cols + 1) * sizeof *sat, (void **)&sat);
    if (st != STOF_OK) {
        free(copy);
        return st;
    }
    memcpy(copy, layout, (size_t)cells);
    blocks_fill_sat(copy, heads, rows, cols, sat);
    p->a = block_size;
    p->heads = heads;
    p->rows = rows;
    p->cols = cols;
    p->layout = copy;
    p->sat = sat;
    spec->n_parts++;
    return STOF_OK;
}

stof_status stof_mask_spec_add_dense(stof_mask_spec *spec, const stof_tensor *dense)
{
    const char *call = "stof_mask_spec_add_dense";
    mask_part *p;
    STOF_TRY(spec_new_part(spec, call, MASK_PART_DENSE, &p));
    STOF_TRY(stof_tensor_check(dense, "dense"));
    STOF_REQUIRE(dense->dtype == STOF_U8, STOF_ERR_SHAPE, "%s: dense has dtype %s (must be u8)",
                 call, stof_dtype_name(dense->dtype));
    STOF_REQUIRE(dense->ndim == 4, STOF_ERR_SHAPE,
                 "%s: dense has %d dimensions (must be 4: [B|1, H|1, Lq, Lk])", call, dense->ndim);
    p->dense = *dense;
    spec->n_parts++;
    return STOF_OK;
}

/* ---------------------------------------------------------------- parser */

typedef struct parser {
    const char *s;
    size_t pos;
    stof_mask_spec *spec;
} parser;

static stof_status parse_error(const parser *ps, size_t at, const char *fmt, ...) STOF_PRINTF(3, 4);

static stof_status parse_error(const parser *ps, size_t at, const char *fmt, ...)
{
    char what[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    char c = ps->s[at];
    if (c == '\0')
        return stof_error(STOF_ERR_PARSE,
                          "mask spec: at position %zu: %s (found the end of the text)", at + 1,
                          what);
    if (c >= 0x20 && c < 0x7f)
        return stof_error(STOF_ERR_PARSE, "mask spec: at position %zu: %s (found '%c')", at + 1,
                          what, c);
    return stof_error(STOF_ERR_PARSE, "mask spec: at position %zu: %s (found byte 0x%02x)", at + 1,
                      what, (unsigned)(unsigned char)c);
}

static bool is_space(char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}
static bool is_digit(char c)
{
    return c >= '0' && c <= '9';
}

static void skip_space(parser *ps)
{
    while (is_space(ps->s[ps->pos]))
        ps->pos++;
}

static bool accept(parser *ps, char c)
{
    if (ps->s[ps->pos] != c) return false;
    ps->pos++;
    return true;
}

static stof_status expect(parser *ps, char c, const char *after)
{
    if (accept(ps, c)) return STOF_OK;
    return parse_error(ps, ps->pos, "expected '%c' after '%s'", c, after);
}

/* Unsigned decimal up to max; *start gets its position for later messages. */
static stof_status parse_u64(parser *ps, uint64_t max, const char *after, uint64_t *out,
                             size_t *start)
{
    size_t at = ps->pos;
    if (start) *start = at;
    if (!is_digit(ps->s[at])) return parse_error(ps, at, "expected a number after '%s'", after);
    uint64_t v = 0;
    while (is_digit(ps->s[ps->pos])) {
        uint64_t d = (uint64_t)(ps->s[ps->pos] - '0');
        if (v > (max - d) / 10)
            return parse_error(ps, at, "number after '%s' is too large (at most %llu)", after,
                               (unsigned long long)max);
        v = v * 10 + d;
        ps->pos++;
    }
    *out = v;
    return STOF_OK;
}

/* A number that fits in int and is at least min. */
static stof_status parse_int(parser *ps, int min, const char *after, const char *what, int *out)
{
    uint64_t v = 0;
    size_t at = ps->pos;
    STOF_TRY(parse_u64(ps, INT_MAX, after, &v, &at));
    if ((int64_t)v < min) return parse_error(ps, at, "%s must be >= %d", what, min);
    *out = (int)v;
    return STOF_OK;
}

static stof_status parse_window(parser *ps)
{
    int left, right;
    STOF_TRY(parse_int(ps, 0, "window:", "window size", &left));
    right = left;
    if (accept(ps, ':')) STOF_TRY(parse_int(ps, 0, "window:L:", "right window size", &right));
    return stof_mask_spec_add_window(ps->spec, left, right);
}

static stof_status parse_dilated(parser *ps)
{
    int w, d;
    STOF_TRY(parse_int(ps, 0, "dilated:", "window size", &w));
    STOF_TRY(expect(ps, 'x', "dilated:W"));
    STOF_TRY(parse_int(ps, 1, "dilated:Wx", "dilation", &d));
    return stof_mask_spec_add_dilated(ps->spec, w, d);
}

static stof_status parse_global_list(parser *ps)
{
    int cap = 16, n = 0;
    int32_t *tokens = NULL;
    STOF_TRY(stof_host_alloc((size_t)cap * sizeof *tokens, (void **)&tokens));
    stof_status st = STOF_OK;
    for (;;) {
        int v;
        st = parse_int(ps, 0, n == 0 ? "global:[" : "','", "token", &v);
        if (st != STOF_OK) break;
        if (n == MASK_MAX_GLOBAL_LIST) {
            st = parse_error(ps, ps->pos, "too many global tokens (at most %d)",
                             MASK_MAX_GLOBAL_LIST);
            break;
        }
        if (n == cap) {
            int32_t *grown = realloc(tokens, (size_t)cap * 2 * sizeof *tokens);
            if (!grown) {
                st = stof_error(STOF_ERR_OOM, "out of host memory parsing a global list");
                break;
            }
            tokens = grown;
            cap *= 2;
        }
        tokens[n++] = v;
        if (accept(ps, ']')) break;
        if (!accept(ps, ',')) {
            st = parse_error(ps, ps->pos, "expected ',' or ']' in the global list");
            break;
        }
    }
    if (st == STOF_OK) st = stof_mask_spec_add_global_list(ps->spec, tokens, n);
    free(tokens);
    return st;
}

static stof_status parse_global(parser *ps)
{
    if (accept(ps, '[')) return parse_global_list(ps);
    int n;
    STOF_TRY(parse_int(ps, 1, "global:", "global count", &n));
    return stof_mask_spec_add_global(ps->spec, n);
}

static stof_status parse_random(parser *ps)
{
    int block, per_row;
    uint64_t seed = 0;
    STOF_TRY(parse_int(ps, 1, "random:", "block size", &block));
    STOF_TRY(expect(ps, 'x', "random:B"));
    size_t at = ps->pos;
    STOF_TRY(parse_int(ps, 1, "random:Bx", "blocks per row", &per_row));
    if (per_row > MASK_MAX_RANDOM_PER_ROW)
        return parse_error(ps, at, "blocks per row must be in [1, %d]", MASK_MAX_RANDOM_PER_ROW);
    STOF_TRY(expect(ps, '@', "random:BxN"));
    STOF_TRY(parse_u64(ps, UINT64_MAX, "random:BxN@", &seed, NULL));
    return stof_mask_spec_add_random(ps->spec, block, per_row, seed);
}

static stof_status parse_blocks(parser *ps)
{
    int bs;
    STOF_TRY(parse_int(ps, 1, "blocks:", "block size", &bs));
    STOF_TRY(expect(ps, ':', "blocks:B"));
    /* First pass: shape and characters; second: the bytes. */
    size_t first = ps->pos;
    int64_t rows = 0, cols = -1;
    for (;;) {
        size_t row_start = ps->pos;
        int64_t n = 0;
        while (ps->s[ps->pos] == '0' || ps->s[ps->pos] == '1') {
            ps->pos++;
            n++;
        }
        if (n == 0) return parse_error(ps, ps->pos, "expected a row of '0' and '1' in 'blocks:'");
        if (cols >= 0 && n != cols)
            return parse_error(ps, row_start,
                               "row %lld of 'blocks:' has %lld columns, row 1 has %lld",
                               (long long)rows + 1, (long long)n, (long long)cols);
        cols = n;
        rows++;
        if (rows * cols > MASK_MAX_LAYOUT_CELLS)
            return parse_error(ps, row_start, "block layout too large (at most %d cells)",
                               MASK_MAX_LAYOUT_CELLS);
        if (!accept(ps, '/')) break;
    }
    uint8_t *layout = NULL;
    STOF_TRY(stof_host_alloc((size_t)(rows * cols), (void **)&layout));
    int64_t k = 0;
    for (size_t i = first; i < ps->pos; i++)
        if (ps->s[i] != '/') layout[k++] = (uint8_t)(ps->s[i] - '0');
    stof_status st = stof_mask_spec_add_blocks(ps->spec, bs, 1, (int)rows, (int)cols, layout);
    free(layout);
    return st;
}

static stof_status parse_within(parser *ps)
{
    if (strncmp(ps->s + ps->pos, "causal", 6) == 0) {
        ps->pos += 6;
        return stof_mask_spec_within_causal(ps->spec);
    }
    if (!is_digit(ps->s[ps->pos]))
        return parse_error(ps, ps->pos, "expected 'causal' or a number after 'within:'");
    int left, right;
    STOF_TRY(parse_int(ps, 0, "within:", "band size", &left));
    right = left;
    if (accept(ps, ':')) STOF_TRY(parse_int(ps, 0, "within:L:", "right band size", &right));
    return stof_mask_spec_within_window(ps->spec, left, right);
}

static stof_status parse_part(parser *ps)
{
    size_t at = ps->pos;
    size_t n = 0;
    while (ps->s[at + n] >= 'a' && ps->s[at + n] <= 'z')
        n++;
    const char *w = ps->s + at;
#define KEYWORD(k) (n == sizeof(k) - 1 && memcmp(w, k, n) == 0)
    /* Alignment words: a setting of the whole spec, written among the parts (and not
     * one of them, so not counted against the limit). */
    if (KEYWORD("topleft") || KEYWORD("bottomright")) {
        ps->pos += n;
        return stof_mask_spec_set_align(ps->spec,
                                        *w == 't' ? STOF_ALIGN_TOP_LEFT : STOF_ALIGN_BOTTOM_RIGHT);
    }
    /* The band clause qualifies the parts like the alignment words: no part either. */
    if (KEYWORD("within")) {
        ps->pos += n;
        STOF_TRY(expect(ps, ':', "within"));
        return parse_within(ps);
    }
    if (ps->spec->n_parts == MASK_MAX_PARTS)
        return parse_error(ps, at, "too many parts (at most %d)", MASK_MAX_PARTS);
    if (KEYWORD("full")) {
        ps->pos += n;
        return stof_mask_spec_add_full(ps->spec);
    }
    if (KEYWORD("causal")) {
        ps->pos += n;
        return stof_mask_spec_add_causal(ps->spec);
    }
    if (KEYWORD("dense"))
        return parse_error(ps, at,
                           "dense masks come only from a tensor "
                           "(stof_mask_spec_add_dense), not from text");
    typedef stof_status (*part_fn)(parser *);
    static const struct {
        const char *name;
        part_fn fn;
    } with_args[] = {{"window", parse_window},
                     {"dilated", parse_dilated},
                     {"global", parse_global},
                     {"random", parse_random},
                     {"blocks", parse_blocks}};
    for (size_t k = 0; k < sizeof with_args / sizeof with_args[0]; k++) {
        if (n == strlen(with_args[k].name) && memcmp(w, with_args[k].name, n) == 0) {
            ps->pos += n;
            STOF_TRY(expect(ps, ':', with_args[k].name));
            return with_args[k].fn(ps);
        }
    }
#undef KEYWORD
    return parse_error(ps, at,
                       "expected a part: full, causal, window:W, window:L:R, dilated:WxD, "
                       "global:N, global:[i,...], random:BxN@SEED or blocks:B:ROW/... (or an "
                       "alignment: topleft, bottomright; or a band: within:causal, within:W, "
                       "within:L:R)");
}

stof_status stof_mask_spec_parse(const char *text, stof_mask_spec **out)
{
    STOF_REQUIRE(out, STOF_ERR_INVALID_ARG, "stof_mask_spec_parse: out is NULL");
    *out = NULL;
    STOF_REQUIRE(text, STOF_ERR_INVALID_ARG, "stof_mask_spec_parse: text is NULL");
    parser ps = {text, 0, NULL};
    STOF_TRY(stof_mask_spec_create(&ps.spec));
    stof_status st = STOF_OK;
    for (;;) {
        skip_space(&ps);
        st = parse_part(&ps);
        if (st != STOF_OK) break;
        skip_space(&ps);
        if (text[ps.pos] == '\0') break;
        if (!accept(&ps, ',')) {
            st = parse_error(&ps, ps.pos, "expected ',' or the end of the spec after a part");
            break;
        }
    }
    /* The alignment words and the band qualify the parts: a spec of them alone has none. */
    if (st == STOF_OK && ps.spec->n_parts == 0)
        st = parse_error(&ps, 0,
                         "a spec needs a part; topleft, bottomright and within: only qualify "
                         "them");
    if (st != STOF_OK) {
        stof_mask_spec_destroy(ps.spec);
        return st;
    }
    *out = ps.spec;
    return STOF_OK;
}

/* ---------------------------------------------------------------- formatter */

typedef struct text_out {
    char *buf;
    size_t cap, len; /* len counts every byte produced, written or not */
} text_out;

static void out_printf(text_out *o, const char *fmt, ...) STOF_PRINTF(2, 3);

static void out_printf(text_out *o, const char *fmt, ...)
{
    char tmp[64];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    for (int i = 0; i < n && i < (int)sizeof tmp - 1; i++) {
        if (o->len + 1 < o->cap) o->buf[o->len] = tmp[i];
        o->len++;
    }
}

static void out_char(text_out *o, char c)
{
    if (o->len + 1 < o->cap) o->buf[o->len] = c;
    o->len++;
}

static void format_part(text_out *o, const mask_part *p)
{
    switch (p->kind) {
    case MASK_PART_FULL: out_printf(o, "full"); break;
    case MASK_PART_CAUSAL: out_printf(o, "causal"); break;
    case MASK_PART_WINDOW:
        if (p->a == p->b)
            out_printf(o, "window:%d", p->a);
        else
            out_printf(o, "window:%d:%d", p->a, p->b);
        break;
    case MASK_PART_DILATED: out_printf(o, "dilated:%dx%d", p->a, p->b); break;
    case MASK_PART_GLOBAL_N: out_printf(o, "global:%d", p->a); break;
    case MASK_PART_GLOBAL_LIST:
        out_printf(o, "global:[");
        for (int i = 0; i < p->a; i++)
            out_printf(o, i ? ",%d" : "%d", (int)p->list[i]);
        out_char(o, ']');
        break;
    case MASK_PART_RANDOM:
        out_printf(o, "random:%dx%d@%llu", p->a, p->b, (unsigned long long)p->seed);
        break;
    case MASK_PART_BLOCKS:
        /* Per-head layouts have no text form; they print as a name, like dense. */
        if (p->heads > 1) {
            out_printf(o, "blocks:%d:heads=%d", p->a, p->heads);
            break;
        }
        out_printf(o, "blocks:%d:", p->a);
        for (int r = 0; r < p->rows; r++) {
            if (r) out_char(o, '/');
            for (int c = 0; c < p->cols; c++)
                out_char(o, (char)('0' + p->layout[(int64_t)r * p->cols + c]));
        }
        break;
    case MASK_PART_DENSE: out_printf(o, "dense"); break;
    }
}

/* The band's sides are both bounded, or it is causal (no left bound, right
 * 0): the builder calls only intersect those. */
static void format_band(text_out *o, const stof_mask_spec *spec)
{
    if (spec->band_left == MASK_BAND_OPEN)
        out_printf(o, "within:causal");
    else if (spec->band_left == spec->band_right)
        out_printf(o, "within:%lld", (long long)spec->band_left);
    else
        out_printf(o, "within:%lld:%lld", (long long)spec->band_left, (long long)spec->band_right);
}

bool stof_mask_spec_textual(const stof_mask_spec *spec)
{
    if (!spec) return false;
    for (int k = 0; k < spec->n_parts; k++) {
        const mask_part *p = &spec->parts[k];
        if (p->kind == MASK_PART_DENSE || (p->kind == MASK_PART_BLOCKS && p->heads > 1))
            return false;
    }
    return true;
}

stof_status stof_mask_spec_format(const stof_mask_spec *spec, char *buf, size_t cap, size_t *needed)
{
    STOF_REQUIRE(spec, STOF_ERR_INVALID_ARG, "stof_mask_spec_format: spec is NULL");
    STOF_REQUIRE(buf || cap == 0, STOF_ERR_INVALID_ARG,
                 "stof_mask_spec_format: buf is NULL but cap is %zu", cap);
    text_out o = {buf, cap, 0};
    for (int i = 0; i < spec->n_parts; i++) {
        if (i) out_char(&o, ',');
        format_part(&o, &spec->parts[i]);
    }
    bool band = spec->band_left != MASK_BAND_OPEN || spec->band_right != MASK_BAND_OPEN;
    if (band) {
        if (spec->n_parts) out_char(&o, ',');
        format_band(&o, spec);
    }
    if (spec->align == STOF_ALIGN_TOP_LEFT)
        out_printf(&o, spec->n_parts || band ? ",topleft" : "topleft");
    if (cap) buf[o.len < cap ? o.len : cap - 1] = '\0';
    if (needed) *needed = o.len + 1;
    return STOF_OK;
}
