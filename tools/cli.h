/*
 * cli.h — what the stof command's subcommands share: option parsing that
 * rejects what it does not understand, timing, and device buffers.
 */
#ifndef STOF_CLI_H
#define STOF_CLI_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "stof.h"

/* One "--name value" or "--flag" option; argv entries are consumed in order. */
typedef struct cli_args {
    int argc;
    char **argv;
    int pos;
    const char *cmd;
} cli_args;

/* Next option name ("--seq") or positional (returns it with *is_option false); NULL at the end. */
const char *cli_next(cli_args *a, bool *is_option);

/* What an option's value is, and what its destination points to. */
typedef enum cli_kind {
    CLI_STRING,   /* const char *: the value as given */
    CLI_INT,      /* int in [lo, hi] */
    CLI_INT_LIST, /* int32_t[cap]: comma-separated ints in [lo, hi], their number in *count */
    CLI_SEED,     /* unsigned in [0, 2^30] */
    CLI_DEVICE,   /* stof_device: auto, cpu or gpu */
    CLI_DTYPE,    /* stof_dtype: f16 (fp16), bf16 or f32 (fp32) */
    CLI_FLAG,     /* bool, set to true; takes no value */
    CLI_ARG,      /* const char *, NULL until given: the command's one positional argument,
                     named as its usage names it ("SPEC") */
} cli_kind;

/* One entry of a command's option table. */
typedef struct cli_opt {
    const char *name; /* "--batch" */
    cli_kind kind;
    void *dest;
    long lo, hi; /* bounds of CLI_INT and CLI_INT_LIST */
    int cap;     /* CLI_INT_LIST: at most cap values, */
    int *count;  /* their number stored here */
    bool *set;   /* when not NULL, set to true once the option is taken */
} cli_opt;

/* Table entries by kind. The destination must point to the type the kind
 * stores: another pointer type is a compile-time warning (the conditional
 * below). */
#define CLI_DEST(type, p) (1 ? (p) : (type *)0)
#define CLI_ENTRY(opt, kind_, type, p, lo_, hi_, cap_, count_, set_)                               \
    {                                                                                              \
        .name = (opt), .kind = (kind_), .dest = CLI_DEST(type, p), .lo = (lo_), .hi = (hi_),       \
        .cap = (cap_), .count = (count_), .set = (set_)                                            \
    }
#define CLI_OPT_STRING(opt, p) CLI_ENTRY(opt, CLI_STRING, const char *, p, 0, 0, 0, NULL, NULL)
#define CLI_OPT_INT(opt, p, lo, hi) CLI_ENTRY(opt, CLI_INT, int, p, lo, hi, 0, NULL, NULL)
#define CLI_OPT_INT_SET(opt, p, lo, hi, set) CLI_ENTRY(opt, CLI_INT, int, p, lo, hi, 0, NULL, set)
#define CLI_OPT_INT_LIST(opt, p, lo, hi, cap, count)                                               \
    CLI_ENTRY(opt, CLI_INT_LIST, int32_t, p, lo, hi, cap, count, NULL)
#define CLI_OPT_SEED(opt, p) CLI_ENTRY(opt, CLI_SEED, unsigned, p, 0, 0, 0, NULL, NULL)
#define CLI_OPT_DEVICE(opt, p) CLI_ENTRY(opt, CLI_DEVICE, stof_device, p, 0, 0, 0, NULL, NULL)
#define CLI_OPT_DTYPE(opt, p) CLI_ENTRY(opt, CLI_DTYPE, stof_dtype, p, 0, 0, 0, NULL, NULL)
#define CLI_OPT_DTYPE_SET(opt, p, set) CLI_ENTRY(opt, CLI_DTYPE, stof_dtype, p, 0, 0, 0, NULL, set)
#define CLI_OPT_FLAG(opt, p) CLI_ENTRY(opt, CLI_FLAG, bool, p, 0, 0, 0, NULL, NULL)
#define CLI_OPT_ARG(metavar, p) CLI_ENTRY(metavar, CLI_ARG, const char *, p, 0, 0, 0, NULL, NULL)

#define CLI_COUNT(opts) ((int)(sizeof(opts) / sizeof((opts)[0])))

/* Parses the rest of the arguments by the table, in order: "--help" prints
 * usage and exits 0; the first unknown option, missing or bad value, or
 * positional argument the table has no CLI_ARG for (or a second one) prints
 * "stof CMD: ..." and returns false. */
bool cli_parse(cli_args *a, const cli_opt *opts, int n, void (*usage)(void));
/* One option name from cli_next, for commands that walk the arguments
 * themselves: takes its value by the table, or reports it as unknown with
 * hint appended to the message. */
bool cli_option(cli_args *a, const cli_opt *opts, int n, const char *opt, const char *hint);

/* --lengths given (n > 0): n must equal --batch and each length fit --seq. */
bool cli_check_lengths(const cli_args *a, const int32_t *lengths, int n, int batch, int seq);

/* Print "stof CMD: <what>: <status>: <stof_last_error()>" and return 1. */
int cli_fail(const cli_args *a, const char *what, stof_status st);

double cli_now_ms(void);
/* Random inputs of `stof run` and `stof tune`: lengths uniform in [L/2, L] from
 * the seed (unless have_lengths), ids uniform over the vocabulary at real
 * positions, 0 at padding. ids holds batch * seq; returns the real tokens. */
int64_t cli_fill_inputs(int batch, int seq, unsigned seed, bool have_lengths, int32_t *lengths,
                        int vocab, int32_t *ids);
int cli_cmp_double(const void *x, const void *y);

int cmd_demo(cli_args *a);
int cmd_mask(cli_args *a);
int cmd_run(cli_args *a);
int cmd_embed(cli_args *a);
int cmd_tune(cli_args *a);
int cmd_score(cli_args *a);

#endif
