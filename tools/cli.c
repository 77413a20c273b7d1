/*
 * cli.c — option parsing and small utilities for the stof command.
 */
#include "cli.h"
#include "core/core.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

const char *cli_next(cli_args *a, bool *is_option)
{
    if (a->pos >= a->argc) return NULL;
    const char *s = a->argv[a->pos++];
    *is_option = s[0] == '-' && s[1] == '-' && s[2] != '\0';
    return s;
}

static const char *cli_value(cli_args *a, const char *opt)
{
    if (a->pos >= a->argc) {
        fprintf(stderr, "stof %s: %s needs a value\n", a->cmd, opt);
        return NULL;
    }
    return a->argv[a->pos++];
}

static bool parse_long(const char *text, long *out)
{
    char *end;
    errno = 0;
    long v = strtol(text, &end, 10);
    if (errno || end == text || *end != '\0') return false;
    *out = v;
    return true;
}

static bool cli_int(const cli_args *a, const char *opt, const char *text, long lo, long hi,
                    int *out)
{
    long v;
    if (!parse_long(text, &v) || v < lo || v > hi) {
        fprintf(stderr, "stof %s: %s: '%s' is not an integer in [%ld, %ld]\n", a->cmd, opt, text,
                lo, hi);
        return false;
    }
    *out = (int)v;
    return true;
}

static bool cli_int_list(const cli_args *a, const char *opt, const char *text, long lo, long hi,
                         int32_t *out, int cap, int *n)
{
    char buf[4096];
    if (strlen(text) >= sizeof buf) {
        fprintf(stderr, "stof %s: %s: list too long\n", a->cmd, opt);
        return false;
    }
    strcpy(buf, text);
    *n = 0;
    char *save = NULL;
    for (char *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        int v;
        if (*n >= cap) {
            fprintf(stderr, "stof %s: %s: more than %d values\n", a->cmd, opt, cap);
            return false;
        }
        if (!cli_int(a, opt, tok, lo, hi, &v)) return false;
        out[(*n)++] = v;
    }
    if (*n == 0) {
        fprintf(stderr, "stof %s: %s: empty list\n", a->cmd, opt);
        return false;
    }
    return true;
}

static bool cli_device(const cli_args *a, const char *text, stof_device *out)
{
    if (strcmp(text, "auto") == 0)
        *out = STOF_DEVICE_AUTO;
    else if (strcmp(text, "cpu") == 0)
        *out = STOF_DEVICE_CPU;
    else if (strcmp(text, "gpu") == 0)
        *out = STOF_DEVICE_GPU;
    else {
        fprintf(stderr, "stof %s: --device: '%s' is not one of auto, cpu, gpu\n", a->cmd, text);
        return false;
    }
    return true;
}

static bool cli_dtype(const cli_args *a, const char *text, stof_dtype *out)
{
    if (strcmp(text, "f16") == 0 || strcmp(text, "fp16") == 0)
        *out = STOF_F16;
    else if (strcmp(text, "bf16") == 0)
        *out = STOF_BF16;
    else if (strcmp(text, "f32") == 0 || strcmp(text, "fp32") == 0)
        *out = STOF_F32;
    else {
        fprintf(stderr, "stof %s: --dtype: '%s' is not one of f16, bf16, f32\n", a->cmd, text);
        return false;
    }
    return true;
}

/* The value of o after its name (a flag has none), stored where o points. */
static bool take_value(cli_args *a, const cli_opt *o)
{
    const char *v = NULL;
    if (o->kind != CLI_FLAG && !(v = cli_value(a, o->name))) return false;
    bool ok = true;
    int seed;
    switch (o->kind) {
    case CLI_STRING: *(const char **)o->dest = v; break;
    case CLI_INT: ok = cli_int(a, o->name, v, o->lo, o->hi, o->dest); break;
    case CLI_INT_LIST:
        ok = cli_int_list(a, o->name, v, o->lo, o->hi, o->dest, o->cap, o->count);
        break;
    case CLI_SEED:
        if ((ok = cli_int(a, o->name, v, 0, 1 << 30, &seed))) *(unsigned *)o->dest = (unsigned)seed;
        break;
    case CLI_DEVICE: ok = cli_device(a, v, o->dest); break;
    case CLI_DTYPE: ok = cli_dtype(a, v, o->dest); break;
    case CLI_FLAG: *(bool *)o->dest = true; break;
    case CLI_ARG: break;
    }
    if (ok && o->set) *o->set = true;
    return ok;
}

bool cli_option(cli_args *a, const cli_opt *opts, int n, const char *opt, const char *hint)
{
    for (int i = 0; i < n; i++)
        if (opts[i].kind != CLI_ARG && strcmp(opts[i].name, opt) == 0)
            return take_value(a, &opts[i]);
    fprintf(stderr, "stof %s: unknown option '%s'%s\n", a->cmd, opt, hint);
    return false;
}

static bool take_positional(const cli_args *a, const cli_opt *opts, int n, const char *arg)
{
    for (int i = 0; i < n; i++) {
        if (opts[i].kind != CLI_ARG) continue;
        const char **dest = opts[i].dest;
        if (*dest) {
            fprintf(stderr, "stof %s: more than one %s ('%s')\n", a->cmd, opts[i].name, arg);
            return false;
        }
        *dest = arg;
        return true;
    }
    fprintf(stderr, "stof %s: unexpected argument '%s'\n", a->cmd, arg);
    return false;
}

bool cli_parse(cli_args *a, const cli_opt *opts, int n, void (*usage)(void))
{
    const char *s;
    bool is_option;
    while ((s = cli_next(a, &is_option))) {
        if (!is_option) {
            if (!take_positional(a, opts, n, s)) return false;
        } else if (strcmp(s, "--help") == 0) {
            usage();
            exit(0);
        } else if (!cli_option(a, opts, n, s, "")) {
            return false;
        }
    }
    return true;
}

int cli_fail(const cli_args *a, const char *what, stof_status st)
{
    fprintf(stderr, "stof %s: %s: %s: %s\n", a->cmd, what, stof_status_str(st), stof_last_error());
    return 1;
}

double cli_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

int cli_cmp_double(const void *x, const void *y)
{
    double a = *(const double *)x, b = *(const double *)y;
    return (a > b) - (a < b);
}

FILE *cli_open_input(const char *who, const char *path)
{
    FILE *f = NULL;
    if (stof_file_open(path, true, &f) != STOF_OK) {
        fprintf(stderr, "%s %s\n", who, stof_last_error());
        return NULL;
    }
    return f;
}

void cli_progress(const char *what, int64_t done, int64_t total)
{
    static int tty = -1;
    if (tty < 0) tty = isatty(STDERR_FILENO);
    if (!tty || total <= 0) return;
    if (done >= total) {
        fprintf(stderr, "\r%72s\r", "");
    } else {
        enum { width = 30 };
        char bar[width + 1];
        int fill = (int)(width * done / total);
        for (int i = 0; i < width; i++)
            bar[i] = i < fill ? '#' : '.';
        bar[width] = '\0';
        fprintf(stderr, "\r  [%s] %lld/%lld %-20.20s", bar, (long long)done, (long long)total,
                what);
    }
    fflush(stderr);
}

static unsigned lcg(unsigned *state)
{
    *state = *state * 1664525u + 1013904223u;
    return *state >> 8;
}

int64_t cli_fill_inputs(int batch, int seq, unsigned seed, bool have_lengths, int32_t *lengths,
                        int vocab, int32_t *ids)
{
    unsigned state = seed * 2654435761u + 12345u;
    int lo = seq / 2 > 0 ? seq / 2 : 1;
    int64_t tokens = 0;
    for (int b = 0; b < batch; b++) {
        if (!have_lengths) lengths[b] = lo + (int32_t)(lcg(&state) % (unsigned)(seq - lo + 1));
        tokens += lengths[b];
        for (int i = 0; i < seq; i++)
            ids[(int64_t)b * seq + i] =
                i < lengths[b] ? (int32_t)(lcg(&state) % (unsigned)vocab) : 0;
    }
    return tokens;
}

bool cli_check_lengths(const cli_args *a, const int32_t *lengths, int n, int batch, int seq)
{
    if (n && n != batch) {
        fprintf(stderr, "stof %s: --lengths has %d values but --batch is %d\n", a->cmd, n, batch);
        return false;
    }
    for (int b = 0; b < n; b++)
        if (lengths[b] > seq) {
            fprintf(stderr, "stof %s: --lengths: %d is longer than --seq %d\n", a->cmd, lengths[b],
                    seq);
            return false;
        }
    return true;
}
