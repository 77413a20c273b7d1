/*
 * stof.c — the stof command: one binary, one subcommand per job.
 */
#include "cli.h"

#include <stdio.h>
#include <string.h>

static void usage(FILE *f)
{
    fprintf(f,
            "usage: stof COMMAND [options]\n"
            "\n"
            "commands:\n"
            "  embed    sentence embeddings of text with a model folder, as JSON lines (GPU when present)\n"
            "  demo     compile a mask, run masked attention on random inputs, check it\n"
            "           against the CPU backend and time it (GPU when present)\n"
            "  mask     compile a mask spec and show its tile structure and density\n"
            "  run      run forwards of a model folder (any family) on random token ids and time them\n"
            "  tune     search the fastest execution plan for a model and shape, store it in the\n"
            "           tuning cache (GPU)\n"
            "  score    log-likelihood and perplexity of token id sequences under a decoder\n"
            "  serve    an HTTP embeddings server (OpenAI /v1/embeddings, /embed) batching\n"
            "           concurrent requests\n"
            "  tokenize text to token ids (or ids to text) with a model folder's tokenizer, as JSON lines\n"
            "  version  print the library version\n"
            "\n"
            "Run 'stof COMMAND --help' for a command's options.\n"
            "Mask specs: full | causal | window:W | window:L:R | dilated:WxD | global:N |\n"
            "  global:[i,j,..] | random:BxN@SEED | blocks:B:ROW/ROW/..., joined with ','\n"
            "  e.g. window:128,global:32,random:64x3@7; within:causal or within:L:R cuts\n"
            "  the union to a band (window:256,global:64,within:causal)\n");
}

int main(int argc, char **argv)
{
    if (argc < 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0 ||
        strcmp(argv[1], "help") == 0) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    cli_args a = {.argc = argc, .argv = argv, .pos = 2, .cmd = argv[1]};
    if (strcmp(argv[1], "version") == 0 || strcmp(argv[1], "--version") == 0) {
        printf("stof %s\n", stof_version());
        return 0;
    }
    if (strcmp(argv[1], "demo") == 0) return cmd_demo(&a);
    if (strcmp(argv[1], "mask") == 0) return cmd_mask(&a);
    if (strcmp(argv[1], "run") == 0) return cmd_run(&a);
    if (strcmp(argv[1], "embed") == 0) return cmd_embed(&a);
    if (strcmp(argv[1], "tune") == 0) return cmd_tune(&a);
    if (strcmp(argv[1], "score") == 0) return cmd_score(&a);
    if (strcmp(argv[1], "serve") == 0) return cmd_serve(&a);
    if (strcmp(argv[1], "tokenize") == 0) return cmd_tokenize(&a);
    fprintf(stderr, "stof: unknown command '%s'\n\n", argv[1]);
    usage(stderr);
    return 2;
}
