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
/* The value after an option; prints an error and returns NULL when missing. */
const char *cli_value(cli_args *a, const char *opt);
/* Parse an int in [lo, hi]; prints "stof CMD: --opt: ..." and returns false otherwise. */
bool cli_int(const cli_args *a, const char *opt, const char *text, long lo, long hi, int *out);
/* Comma-separated ints in [lo, hi]; at most cap of them. */
bool cli_int_list(const cli_args *a, const char *opt, const char *text, long lo, long hi,
                  int32_t *out, int cap, int *n);
/* --lengths given (n > 0): n must equal --batch and each length fit --seq. */
bool cli_check_lengths(const cli_args *a, const int32_t *lengths, int n, int batch, int seq);
bool cli_device(const cli_args *a, const char *text, stof_device *out);
bool cli_dtype(const cli_args *a, const char *text, stof_dtype *out);

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

#endif
