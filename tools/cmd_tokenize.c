/*
 * cmd_tokenize.c — `stof tokenize`: text to token ids (or, with --decode, ids to text)
 * with a model folder's tokenizer, any family: one JSON line per input, in input order,
 * {"ids": [...]} or {"text": "..."}. Texts come from the arguments or from --file, one
 * per line (the newline is not part of the text); all of them are encoded in one batch
 * call spread over --threads threads.
 */
#include "cli.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

static void tokenize_usage(void)
{
    printf("usage: stof tokenize --model DIR [--decode] [--no-special] [--max-length N]\n"
           "                     [--threads N] (TEXT... | --file F)\n"
           "Prints one JSON line per input: {\"ids\": [...]} (or {\"text\": ...} with --decode).\n"
           "  --decode        inputs are ids (\"1,2,3\" or \"[1, 2, 3]\"); prints their text\n"
           "  --no-special    encode: no special tokens ([CLS], <s>, ...); decode: keep them\n"
           "  --max-length N  truncate to N ids, special tokens included (default: none)\n"
           "  --threads N     encoding threads (default 0: one per core)\n"
           "  --file F        one input per line ('-': standard input)\n"
           "  --              the arguments after it are inputs, even when they start with --\n");
}

typedef struct tokenize_opts {
    const char *model, *file;
    bool decode, no_special;
    int max_length, threads;
} tokenize_opts;

typedef struct input_list {
    char **s;
    size_t *len;
    size_t n, cap;
    bool owned; /* lines read from a file, freed with the list */
} input_list;

static bool push_input(input_list *l, char *s, size_t len)
{
    if (l->n == l->cap) {
        size_t cap = l->cap ? 2 * l->cap : 64;
        char **s2 = realloc(l->s, cap * sizeof *s2);
        if (s2) l->s = s2;
        size_t *len2 = realloc(l->len, cap * sizeof *len2);
        if (len2) l->len = len2;
        if (!s2 || !len2) return false;
        l->cap = cap;
    }
    l->s[l->n] = s;
    l->len[l->n++] = len;
    return true;
}

static void free_inputs(input_list *l)
{
    if (l->owned)
        for (size_t i = 0; i < l->n; i++)
            free(l->s[i]);
    free(l->s);
    free(l->len);
}

static int read_file_lines(const char *path, input_list *l)
{
    FILE *f = strcmp(path, "-") == 0 ? stdin : fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "stof tokenize: cannot open %s\n", path);
        return 1;
    }
    l->owned = true;
    char *line = NULL;
    size_t cap = 0;
    ssize_t got;
    int rc = 0;
    while ((got = getline(&line, &cap, f)) >= 0) {
        size_t n = (size_t)got;
        if (n && line[n - 1] == '\n') n--;
        if (n && line[n - 1] == '\r') n--;
        char *copy = malloc(n + 1);
        if (!copy || !push_input(l, copy, n)) {
            free(copy);
            fprintf(stderr, "stof tokenize: out of memory reading %s\n", path);
            rc = 1;
            break;
        }
        memcpy(copy, line, n);
        copy[n] = '\0';
    }
    free(line);
    if (f != stdin) fclose(f);
    return rc;
}

static int parse_tokenize(cli_args *a, tokenize_opts *o, input_list *in)
{
    const cli_opt opts[] = {
        CLI_OPT_STRING("--model", &o->model),
        CLI_OPT_STRING("--file", &o->file),
        CLI_OPT_FLAG("--decode", &o->decode),
        CLI_OPT_FLAG("--no-special", &o->no_special),
        CLI_OPT_INT("--max-length", &o->max_length, 1, 1 << 30),
        CLI_OPT_INT("--threads", &o->threads, 0, 1024),
    };
    const char *s;
    bool opt, inputs_only = false;
    while ((s = cli_next(a, &opt))) {
        if (inputs_only || !opt) {
            if (!inputs_only && strcmp(s, "--") == 0) {
                inputs_only = true;
                continue;
            }
            if (!push_input(in, (char *)s, strlen(s))) {
                fprintf(stderr, "stof tokenize: out of memory for the inputs\n");
                return -1;
            }
            continue;
        }
        if (strcmp(s, "--help") == 0) {
            tokenize_usage();
            return 1;
        }
        if (!cli_option(a, opts, CLI_COUNT(opts), s, " (see stof tokenize --help)")) return -1;
    }
    if (!o->model) {
        fprintf(stderr, "stof tokenize: --model DIR is required (see stof tokenize --help)\n");
        return -1;
    }
    if ((o->file != NULL) == (in->n > 0)) {
        fprintf(stderr, "stof tokenize: give inputs as arguments or --file F (one of them)\n");
        return -1;
    }
    return 0;
}

static void print_json(cJSON *obj)
{
    char *s = obj ? cJSON_PrintUnformatted(obj) : NULL;
    if (s) puts(s);
    free(s);
    cJSON_Delete(obj);
}

static int encode_all(const cli_args *a, const tokenize_opts *o, stof_tokenizer *tok,
                      const input_list *in)
{
    stof_encode_params ep = stof_encode_default_params();
    ep.add_special_tokens = !o->no_special;
    ep.max_length = o->max_length;
    stof_token_lists out;
    stof_status st = stof_tokenizer_encode_batch(tok, (const char *const *)in->s, in->len,
                                                 (int)in->n, &ep, o->threads, &out);
    if (st) return cli_fail(a, "encoding", st);
    for (size_t i = 0; i < in->n; i++) {
        cJSON *line = cJSON_CreateObject(), *ids = cJSON_AddArrayToObject(line, "ids");
        for (int64_t k = out.offsets[i]; ids && k < out.offsets[i + 1]; k++)
            cJSON_AddItemToArray(ids, cJSON_CreateNumber(out.ids[k]));
        print_json(line);
    }
    stof_token_lists_free(&out);
    return 0;
}

/* "1,2,3", "[1, 2, 3]" or "1 2 3" into ids; false on anything else. */
static bool parse_ids(const char *s, size_t len, int32_t **ids, size_t *n)
{
    *n = 0;
    *ids = malloc((len / 2 + 1) * sizeof **ids);
    if (!*ids) return false;
    size_t i = 0;
    while (i < len && (isspace((unsigned char)s[i]) || s[i] == '['))
        i++;
    while (i < len && s[i] != ']') {
        char *end;
        long v = strtol(s + i, &end, 10);
        if (end == s + i || v < INT32_MIN || v > INT32_MAX) return false;
        (*ids)[(*n)++] = (int32_t)v;
        i = (size_t)(end - s);
        while (i < len && (isspace((unsigned char)s[i]) || s[i] == ','))
            i++;
    }
    return true;
}

static int decode_all(const cli_args *a, const tokenize_opts *o, stof_tokenizer *tok,
                      const input_list *in)
{
    stof_decode_params dp = stof_decode_default_params();
    dp.skip_special_tokens = !o->no_special;
    for (size_t i = 0; i < in->n; i++) {
        int32_t *ids;
        size_t n, len = 0;
        if (!parse_ids(in->s[i], in->len[i], &ids, &n)) {
            free(ids);
            fprintf(stderr, "stof tokenize: input %zu is not a list of ids: %.60s\n", i + 1,
                    in->s[i]);
            return 1;
        }
        size_t cap = 16 * n + 64;
        char *text = malloc(cap);
        stof_status st =
            text ? stof_tokenizer_decode(tok, ids, n, &dp, text, cap, &len, NULL) : STOF_ERR_OOM;
        if (st == STOF_ERR_INVALID_ARG && len + 1 > cap) {
            char *bigger = realloc(text, len + 1);
            st = bigger ? stof_tokenizer_decode(tok, ids, n, &dp, bigger, len + 1, &len, NULL)
                        : STOF_ERR_OOM;
            text = bigger ? bigger : text;
        }
        free(ids);
        if (st) {
            free(text);
            return cli_fail(a, "decoding", st);
        }
        cJSON *line = cJSON_CreateObject();
        cJSON_AddStringToObject(line, "text", text);
        print_json(line);
        free(text);
    }
    return 0;
}

int cmd_tokenize(cli_args *a)
{
    tokenize_opts o = {0};
    input_list in = {0};
    int rc = parse_tokenize(a, &o, &in);
    if (rc) {
        free_inputs(&in);
        return rc < 0 ? 2 : 0;
    }
    if (o.file && (rc = read_file_lines(o.file, &in))) {
        free_inputs(&in);
        return rc;
    }
    stof_tokenizer *tok = NULL;
    stof_status st = stof_tokenizer_open(o.model, &tok);
    if (st)
        rc = cli_fail(a, "loading the tokenizer", st);
    else if (in.n)
        rc = o.decode ? decode_all(a, &o, tok, &in) : encode_all(a, &o, tok, &in);
    stof_tokenizer_destroy(tok);
    free_inputs(&in);
    return rc;
}
