/*
 * cmd_embed.c — `stof embed`: sentence embeddings of text with a model folder, as
 * sentence-transformers computes them (WordPiece ids truncated at the model's
 * max_seq_length, an encoder forward, the folder's pooling, L2 normalisation when
 * it has a Normalize module), printed as JSON lines {"text": ..., "embedding": [...]}.
 *
 * Texts are taken a window at a time (a few batches' worth) through the library's
 * embedding pipeline (stof_model_embed: tokenized, sorted by token count so that each
 * batch pads little, run in batches) and printed in input order when the window is
 * done: memory stays bounded however long --file is.
 * Lines of --file that are empty or only whitespace are skipped (a blank line is a
 * separator, not a sentence); a TEXT argument is always embedded, even "".
 */
#include "cli.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define EMBED_MAX_BATCH 4096
#define EMBED_MIN_WINDOW 1024

static void embed_usage(void)
{
    printf(
        "usage: stof embed --model DIR [--mask SPEC] [--device auto|cpu|gpu] [--dtype f16|bf16]\n"
        "                  [--batch N] [--max-length N] (TEXT... | --file F)\n"
        "Prints one JSON line {\"text\": ..., \"embedding\": [...]} per text, in input order.\n"
        "  --file F        one text per line ('-': standard input); blank lines are skipped\n"
        "  --batch N       texts per forward (default 32); batches are sorted by length\n"
        "  --max-length N  truncate at N tokens, [CLS] and [SEP] included (default: the\n"
        "                  folder's max_seq_length, as sentence-transformers; at most the\n"
        "                  model's max_position_embeddings)\n"
        "  --device        auto (default: the GPU when present), cpu (OpenBLAS) or gpu\n"
        "  --dtype         GPU run dtype (default f16); the CPU always computes in f32\n"
        "  --mask SPEC     sparse attention mask, e.g. window:64 (default: dense)\n"
        "  --              the arguments after it are texts, even when they start with --\n");
}

typedef struct embed_opts {
    const char *model, *mask, *file;
    int batch, max_length;
    stof_device device;
    stof_dtype dtype;
} embed_opts;

/* The texts to embed: argv entries or lines of a file (then `buf` owns them). */
typedef struct text_list {
    const char **text;
    size_t *len;
    size_t n, cap;
    char *buf;
} text_list;

static void free_texts(text_list *t)
{
    free(t->text);
    free(t->len);
    free(t->buf);
    memset(t, 0, sizeof *t);
}

static bool push_text(text_list *t, const char *s, size_t len)
{
    if (t->n == t->cap) {
        size_t cap = t->cap ? 2 * t->cap : 64;
        const char **text = realloc(t->text, cap * sizeof *text);
        if (text) t->text = text;
        size_t *lens = realloc(t->len, cap * sizeof *lens);
        if (lens) t->len = lens;
        if (!text || !lens) return false;
        t->cap = cap;
    }
    t->text[t->n] = s;
    t->len[t->n] = len;
    t->n++;
    return true;
}

/* Returns 0 to go on, 1 after --help, -1 on a usage error (already reported).
 * Walks the arguments itself rather than by cli_parse: texts are any number of
 * positionals, "--" makes the rest texts, and --help returns instead of exiting
 * (test_model_embed runs cmd_embed in its own process). */
static int parse_embed(cli_args *a, embed_opts *o, text_list *args)
{
    const cli_opt opts[] = {
        CLI_OPT_STRING("--model", &o->model),
        CLI_OPT_STRING("--mask", &o->mask),
        CLI_OPT_STRING("--file", &o->file),
        CLI_OPT_INT("--batch", &o->batch, 1, EMBED_MAX_BATCH),
        CLI_OPT_INT("--max-length", &o->max_length, 2, 1 << 20),
        CLI_OPT_DEVICE("--device", &o->device),
        CLI_OPT_DTYPE("--dtype", &o->dtype),
    };
    const char *s;
    bool opt, texts_only = false;
    while ((s = cli_next(a, &opt))) {
        if (texts_only || !opt) {
            if (!texts_only && strcmp(s, "--") == 0) {
                texts_only = true;
                continue;
            }
            if (!push_text(args, s, strlen(s))) {
                fprintf(stderr, "stof embed: out of memory for the texts\n");
                return -1;
            }
            continue;
        }
        if (strcmp(s, "--help") == 0) {
            embed_usage();
            return 1;
        }
        if (!cli_option(a, opts, CLI_COUNT(opts), s, " (see stof embed --help)")) return -1;
    }
    if (!o->model) {
        fprintf(stderr, "stof embed: --model DIR is required (see stof embed --help)\n");
        return -1;
    }
    if (o->file && args->n) {
        fprintf(stderr, "stof embed: give TEXT arguments or --file, not both\n");
        return -1;
    }
    if (!o->file && !args->n) {
        fprintf(stderr, "stof embed: no text to embed: give TEXT arguments or --file F\n");
        return -1;
    }
    return 0;
}

/* ---------------------------------------------------------------- input */

static bool read_all(FILE *f, char **out, size_t *len)
{
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap + 1);
    while (buf) {
        n += fread(buf + n, 1, cap - n, f);
        if (n < cap) break;
        char *bigger = realloc(buf, 2 * cap + 1);
        if (!bigger) {
            free(buf);
            buf = NULL;
            break;
        }
        buf = bigger;
        cap *= 2;
    }
    if (!buf) return false;
    buf[n] = '\0';
    *out = buf;
    *len = n;
    return true;
}

static bool is_blank(const char *s, size_t len)
{
    for (size_t i = 0; i < len; i++)
        if (!isspace((unsigned char)s[i])) return false;
    return true;
}

/* Splits the file at '\n' (a trailing '\r' is dropped) and keeps the non-blank lines. */
static int read_lines(const char *path, text_list *t)
{
    bool std_in = strcmp(path, "-") == 0;
    FILE *f = std_in ? stdin : fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "stof embed: --file %s: %s\n", path, strerror(errno));
        return 1;
    }
    size_t len = 0;
    bool ok = read_all(f, &t->buf, &len);
    bool read_error = ferror(f) != 0;
    if (!std_in) fclose(f);
    if (!ok || read_error) {
        fprintf(stderr, "stof embed: --file %s: %s\n", path, !ok ? "out of memory" : "read error");
        return 1;
    }
    char *p = t->buf, *end = t->buf + len;
    while (p < end) {
        char *nl = memchr(p, '\n', (size_t)(end - p));
        char *stop = nl ? nl : end;
        size_t n = (size_t)(stop - p);
        if (n && p[n - 1] == '\r') n--;
        if (!is_blank(p, n) && !push_text(t, p, n)) {
            fprintf(stderr, "stof embed: out of memory for the lines of %s\n", path);
            return 1;
        }
        p = stop + 1;
    }
    if (!t->n) {
        fprintf(stderr, "stof embed: --file %s holds no text (only blank lines)\n", path);
        return 1;
    }
    return 0;
}

/* ---------------------------------------------------------------- output */

/* Length of the valid UTF-8 sequence at s (RFC 3629: no overlongs, no surrogates,
 * at most U+10FFFF), or 0 when it is not one. */
static size_t utf8_valid_len(const unsigned char *s, size_t avail)
{
    unsigned c = s[0];
    size_t n;
    unsigned lo = 0x80, hi = 0xbf;
    if (c < 0x80) return 1;
    if (c >= 0xc2 && c <= 0xdf)
        n = 2;
    else if (c >= 0xe0 && c <= 0xef) {
        n = 3;
        if (c == 0xe0) lo = 0xa0;
        if (c == 0xed) hi = 0x9f;
    } else if (c >= 0xf0 && c <= 0xf4) {
        n = 4;
        if (c == 0xf0) lo = 0x90;
        if (c == 0xf4) hi = 0x8f;
    } else
        return 0;
    if (avail < n || s[1] < lo || s[1] > hi) return 0;
    for (size_t i = 2; i < n; i++)
        if (s[i] < 0x80 || s[i] > 0xbf) return 0;
    return n;
}

/* A JSON string; bytes that are not UTF-8 print as U+FFFD, one per byte. */
static void put_json_string(FILE *f, const char *text, size_t len)
{
    const unsigned char *s = (const unsigned char *)text;
    fputc('"', f);
    for (size_t i = 0; i < len;) {
        unsigned c = s[i];
        size_t n = utf8_valid_len(s + i, len - i);
        if (n == 0) {
            fputs("\\ufffd", f);
            i++;
            continue;
        }
        if (n > 1)
            fwrite(s + i, 1, n, f);
        else if (c == '"')
            fputs("\\\"", f);
        else if (c == '\\')
            fputs("\\\\", f);
        else if (c == '\n')
            fputs("\\n", f);
        else if (c == '\r')
            fputs("\\r", f);
        else if (c == '\t')
            fputs("\\t", f);
        else if (c < 0x20 || c == 0x7f)
            fprintf(f, "\\u%04x", c);
        else
            fputc((int)c, f);
        i += n;
    }
    fputc('"', f);
}

static void put_embedding_line(FILE *f, const char *text, size_t len, const float *e, int hidden)
{
    fputs("{\"text\": ", f);
    put_json_string(f, text, len);
    fputs(", \"embedding\": [", f);
    for (int j = 0; j < hidden; j++)
        fprintf(f, j ? ", %.7g" : "%.7g", (double)e[j]);
    fputs("]}\n", f);
}

/* ---------------------------------------------------------------- the run */

typedef struct embed_run {
    stof_model *model;
    stof_tokenizer *tok;
    stof_embed_params ep;
    int hidden;
    size_t window;
    float *emb; /* [window, hidden], in input order */
} embed_run;

/* One window of texts through the library's pipeline (stof_model_embed), printed in order. */
static int embed_window(const cli_args *a, embed_run *r, const text_list *t, size_t first, size_t n)
{
    stof_status st = stof_model_embed(r->model, r->tok, t->text + first, t->len + first,
                                      (int64_t)n, &r->ep, r->emb);
    if (st) return cli_fail(a, "embedding", st);
    for (size_t i = 0; i < n; i++)
        put_embedding_line(stdout, t->text[first + i], t->len[first + i],
                           r->emb + i * (size_t)r->hidden, r->hidden);
    return 0;
}

/* --max-length against the model, or the folder's own length. */
static int resolve_max_length(const embed_opts *o, const stof_model_info *info,
                              const stof_tokenizer *tok, int *out)
{
    if (o->max_length > info->max_positions) {
        fprintf(stderr,
                "stof embed: --max-length %d exceeds the model's %d positions "
                "(max_position_embeddings of %s)\n",
                o->max_length, info->max_positions, o->model);
        return 2;
    }
    *out = o->max_length ? o->max_length : stof_tokenizer_max_length(tok, info->max_positions);
    if (*out < 2) {
        fprintf(stderr, "stof embed: the model's %d positions leave no room for [CLS] and [SEP]\n",
                info->max_positions);
        return 1;
    }
    return 0;
}

static int embed_all(const cli_args *a, const embed_opts *o, const text_list *t, stof_ctx *ctx)
{
    embed_run r;
    memset(&r, 0, sizeof r);
    r.ep = stof_embed_default_params();
    stof_mask_spec *spec = NULL;
    stof_status st;
    int rc = 1;
    stof_model_params mp = stof_model_default_params();
    mp.dtype = o->dtype;
    stof_model_info info;
    if (o->mask && (st = stof_mask_spec_parse(o->mask, &spec))) {
        cli_fail(a, "parsing --mask", st);
        rc = 2;
        goto done;
    }
    if ((st = stof_tokenizer_open(o->model, &r.tok))) {
        cli_fail(a, "loading the tokenizer", st);
        goto done;
    }
    if ((st = stof_model_load(ctx, o->model, &mp, &r.model)) ||
        (st = stof_model_get_info(r.model, &info))) {
        cli_fail(a, "loading the model", st);
        goto done;
    }
    if ((rc = resolve_max_length(o, &info, r.tok, &r.ep.max_length))) goto done;
    rc = 1;
    r.ep.mask = spec;
    r.ep.batch = o->batch;
    r.hidden = info.hidden;
    r.window = (size_t)(4 * o->batch > EMBED_MIN_WINDOW ? 4 * o->batch : EMBED_MIN_WINDOW);
    if (r.window > t->n) r.window = t->n;
    if (!(r.emb = malloc(r.window * (size_t)r.hidden * sizeof *r.emb))) {
        fprintf(stderr, "stof embed: out of memory for %zu embeddings\n", r.window);
        goto done;
    }
    for (size_t first = 0; first < t->n; first += r.window) {
        size_t n = t->n - first < r.window ? t->n - first : r.window;
        if ((rc = embed_window(a, &r, t, first, n))) goto done;
    }
    if (fflush(stdout) != 0 || ferror(stdout)) {
        fprintf(stderr, "stof embed: writing the output failed: %s\n", strerror(errno));
        rc = 1;
    }
done:
    free(r.emb);
    stof_model_destroy(r.model);
    stof_tokenizer_destroy(r.tok);
    stof_mask_spec_destroy(spec);
    return rc;
}

int cmd_embed(cli_args *a)
{
    embed_opts o = {.batch = 32, .device = STOF_DEVICE_AUTO, .dtype = STOF_F16};
    text_list texts;
    memset(&texts, 0, sizeof texts);
    int rc = parse_embed(a, &o, &texts);
    if (rc) {
        free_texts(&texts);
        return rc > 0 ? 0 : 2;
    }
    if (o.file && (rc = read_lines(o.file, &texts))) {
        free_texts(&texts);
        return rc;
    }
    stof_ctx_params cp = stof_ctx_default_params();
    cp.device = o.device;
    stof_ctx *ctx = NULL;
    stof_status st = stof_ctx_create(&cp, &ctx);
    if (st)
        rc = cli_fail(a, "creating the context", st);
    else
        rc = embed_all(a, &o, &texts, ctx);
    stof_ctx_destroy(ctx);
    free_texts(&texts);
    return rc;
}
