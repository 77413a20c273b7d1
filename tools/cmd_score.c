/*
 * cmd_score.c — `stof score`: the log-likelihood and perplexity of token
 * sequences under a decoder (GPT-2, LLaMA, Mistral, Qwen2), one JSON line per
 * sequence:
 *   {"line": 3, "tokens": 12, "log_likelihood": -35.25, "perplexity": 18.9}
 * log_likelihood = sum over i >= 1 of log p(ids[i] | ids[0..i-1]) (natural
 * log), perplexity = exp(-log_likelihood / (tokens - 1)); a sequence of one
 * token has nothing to predict (0 and null). Sequences come as token ids,
 * one whitespace-separated line each (--ids), or as text, one line each
 * (--file), tokenized by the folder's tokenizer with its special tokens (the
 * ids Hugging Face's tokenizer gives by default); blank lines are skipped.
 * Each runs as its own forward with logits for every token; the log-softmax
 * is taken in double.
 */
#include "cli.h"
#include "core/core.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void score_usage(void)
{
    printf("usage: stof score --model DIR (--ids FILE | --file FILE) [--device auto|cpu|gpu]\n"
           "                  [--dtype f16|bf16]\n"
           "Prints one JSON line per sequence of FILE: its log-likelihood (natural log, the\n"
           "sum over every token after the first) and perplexity under the decoder DIR.\n"
           "  --ids FILE   one sequence per line: token ids separated by spaces ('-': standard\n"
           "               input); blank lines are skipped\n"
           "  --file FILE  one text per line ('-': standard input), tokenized by DIR's\n"
           "               tokenizer with its special tokens; blank lines are skipped\n");
}

typedef struct score_opts {
    const char *model, *ids, *file;
    stof_device device;
    stof_dtype dtype;
} score_opts;

/* One line's ids into *ids (grown as needed); *n = 0 for a blank line. */
static stof_status parse_ids(const char *line, int lineno, const char *path, int32_t **ids,
                             int *n, int *cap)
{
    *n = 0;
    const char *p = line;
    for (;;) {
        while (*p && isspace((unsigned char)*p))
            p++;
        if (!*p) return STOF_OK;
        char *end;
        errno = 0;
        long v = strtol(p, &end, 10);
        STOF_REQUIRE(end != p && (!*end || isspace((unsigned char)*end)) && errno == 0 &&
                         v >= 0 && v <= INT32_MAX,
                     STOF_ERR_INVALID_ARG, "%s:%d: '%.*s' is not a token id", path, lineno,
                     (int)(strcspn(p, " \t\r\n") < 24 ? strcspn(p, " \t\r\n") : 24), p);
        if (*n == *cap) {
            int ncap = *cap ? 2 * *cap : 256;
            int32_t *grown = realloc(*ids, (size_t)ncap * sizeof(int32_t));
            STOF_REQUIRE(grown, STOF_ERR_OOM, "out of memory reading %s", path);
            *ids = grown;
            *cap = ncap;
        }
        (*ids)[(*n)++] = (int32_t)v;
        p = end;
    }
}

/* Log-likelihood of ids[1..n) from logits [n, V] (host). */
static double log_likelihood(const float *logits, const int32_t *ids, int n, int V)
{
    double ll = 0.0;
    for (int i = 0; i + 1 < n; i++) {
        const float *row = logits + (int64_t)i * V;
        double mx = -INFINITY, sum = 0.0;
        for (int v = 0; v < V; v++)
            if (row[v] > mx) mx = row[v];
        for (int v = 0; v < V; v++)
            sum += exp((double)row[v] - mx);
        ll += (double)row[ids[i + 1]] - mx - log(sum);
    }
    return ll;
}

/* One sequence: a forward with every token's logits, then its score line. */
static stof_status score_one(stof_model *m, const int32_t *ids, int n, int V, int lineno,
                             float **logits, size_t *cap)
{
    size_t need = (size_t)n * (size_t)V * sizeof(float);
    if (need > *cap) {
        free(*logits);
        *logits = NULL;
        *cap = 0;
        STOF_REQUIRE((*logits = malloc(need)), STOF_ERR_OOM,
                     "line %d: %d tokens need %.1f MiB of logits", lineno, n,
                     (double)need / 1048576.0);
        *cap = need;
    }
    int64_t sh_ids[2] = {1, n}, sh_log[3] = {1, n, V};
    stof_tensor t_ids = stof_tensor_make((void *)ids, STOF_I32, STOF_MEM_HOST, 2, sh_ids);
    stof_tensor t_log = stof_tensor_make(*logits, STOF_F32, STOF_MEM_HOST, 3, sh_log);
    stof_forward_params p = stof_forward_default_params();
    p.logits = &t_log;
    p.logits_all = 1;
    stof_status st = stof_model_forward(m, &p, &t_ids, NULL, NULL, NULL, NULL);
    if (st != STOF_OK) return st;
    double ll = log_likelihood(*logits, ids, n, V);
    if (n > 1)
        printf("{\"line\": %d, \"tokens\": %d, \"log_likelihood\": %.6f, \"perplexity\": %.6g}\n",
               lineno, n, ll, exp(-ll / (n - 1)));
    else
        printf("{\"line\": %d, \"tokens\": %d, \"log_likelihood\": 0, \"perplexity\": null}\n",
               lineno, n);
    return STOF_OK;
}

/* One line of text (its line end dropped) into *ids through tok; *n = 0 for a
 * blank line. */
static stof_status encode_line(const stof_tokenizer *tok, const char *line, const char *path,
                               int32_t **ids, int *n, int *cap)
{
    size_t len = strcspn(line, "\r\n"), k = 0, got = 0;
    while (k < len && isspace((unsigned char)line[k]))
        k++;
    *n = 0;
    if (k == len) return STOF_OK;
    stof_status st;
    while ((st = stof_tokenizer_encode(tok, line, len, NULL, *ids, (size_t)*cap, &got)) ==
               STOF_ERR_INVALID_ARG &&
           got > (size_t)*cap) {
        STOF_REQUIRE(got <= INT32_MAX, STOF_ERR_SHAPE, "%s: a line of %zu tokens", path, got);
        int32_t *grown = realloc(*ids, got * sizeof(int32_t));
        STOF_REQUIRE(grown, STOF_ERR_OOM, "out of memory reading %s", path);
        *ids = grown;
        *cap = (int)got;
    }
    STOF_TRY(st);
    *n = (int)got;
    return STOF_OK;
}

/* Every line of the file, in order; the first failure stops the run. tok:
 * lines are text, else token ids. */
static stof_status score_file(stof_model *m, const score_opts *o, const stof_tokenizer *tok,
                              int V)
{
    const char *path = tok ? o->file : o->ids;
    bool std_in = strcmp(path, "-") == 0;
    FILE *f = NULL;
    if (!std_in) STOF_TRY(stof_file_open(path, true, &f));
    else f = stdin;
    char *line = NULL;
    size_t line_cap = 0, logits_cap = 0;
    int32_t *ids = NULL;
    int n = 0, ids_cap = 0, lineno = 0;
    float *logits = NULL;
    stof_status st = STOF_OK;
    while (st == STOF_OK && getline(&line, &line_cap, f) >= 0) {
        lineno++;
        st = tok ? encode_line(tok, line, path, &ids, &n, &ids_cap)
                 : parse_ids(line, lineno, path, &ids, &n, &ids_cap);
        if (st == STOF_OK && n > 0) st = score_one(m, ids, n, V, lineno, &logits, &logits_cap);
        if (st != STOF_OK && strstr(stof_last_error(), path) == NULL) {
            char msg[512];
            snprintf(msg, sizeof msg, "%s", stof_last_error());
            st = stof_error(st, "%s:%d: %s", path, lineno, msg);
        }
    }
    if (st == STOF_OK && ferror(f)) st = stof_error(STOF_ERR_IO, "%s: read failed", path);
    if (!std_in) fclose(f);
    free(line);
    free(ids);
    free(logits);
    return st;
}

int cmd_score(cli_args *a)
{
    score_opts o = {.device = STOF_DEVICE_AUTO, .dtype = STOF_F16};
    const cli_opt opts[] = {
        CLI_OPT_STRING("--model", &o.model),
        CLI_OPT_STRING("--ids", &o.ids),
        CLI_OPT_STRING("--file", &o.file),
        CLI_OPT_DEVICE("--device", &o.device),
        CLI_OPT_DTYPE("--dtype", &o.dtype),
    };
    if (!cli_parse(a, opts, CLI_COUNT(opts), score_usage)) return 2;
    if (!o.model || !o.ids == !o.file) {
        fprintf(stderr,
                "stof score: --model DIR and one of --ids FILE or --file FILE are required\n");
        return 2;
    }
    stof_ctx *ctx = NULL;
    stof_model *model = NULL;
    stof_tokenizer *tok = NULL;
    stof_ctx_params cp = stof_ctx_default_params();
    cp.device = o.device;
    stof_status st = stof_ctx_create(&cp, &ctx);
    if (st != STOF_OK) return cli_fail(a, "creating the context", st);
    stof_model_params mp = stof_model_default_params();
    mp.dtype = o.dtype;
    int rc = 1;
    stof_model_info info;
    if ((st = stof_model_load(ctx, o.model, &mp, &model)) != STOF_OK) {
        cli_fail(a, "loading the model", st);
    } else if ((st = stof_model_get_info(model, &info)) != STOF_OK) {
        cli_fail(a, "reading the model info", st);
    } else if (!info.is_decoder) {
        fprintf(stderr,
                "stof score: %s is an encoder (family %s, model_type %s); scoring needs a "
                "decoder\n",
                o.model, info.family, info.model_type);
    } else if (o.file && (st = stof_tokenizer_open(o.model, &tok)) != STOF_OK) {
        cli_fail(a, "loading the tokenizer", st);
    } else if ((st = score_file(model, &o, tok, info.vocab)) != STOF_OK) {
        cli_fail(a, "scoring", st);
    } else {
        rc = 0;
    }
    stof_tokenizer_destroy(tok);
    stof_model_destroy(model);
    stof_ctx_destroy(ctx);
    return rc;
}
