/*
 * cmd_tune.c — `stof tune`: load a model folder, search the fastest execution
 * plan for one forward shape on random token ids (the inputs `stof run` makes
 * from the same --batch, --seq and --seed, so its forwards find the plan), and
 * store it in the tuning cache. A progress bar goes to stderr when stderr is
 * a terminal; the table of chosen segments goes to stdout.
 */
#include "cli.h"

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#define TUNE_MAX_BATCH 4096

static void tune_usage(void)
{
    printf("usage: stof tune --model DIR [--batch B] [--seq L] [--mask SPEC] [--budget N]\n"
           "                 [--dtype f16|bf16] [--lengths l1,l2,..] [--seed S]\n"
           "                 [--cache FILE] [--no-store]\n"
           "defaults: --batch 1 --seq 128 --budget 32 --dtype f16 --seed 1; lengths uniform in\n"
           "[L/2, L] from the seed unless --lengths gives them (as 'stof run' draws them).\n"
           "The cache is --cache, else $STOF_TUNE_CACHE, else $XDG_CACHE_HOME/stof/tune.json,\n"
           "else ~/.cache/stof/tune.json. Needs a GPU.\n");
}

typedef struct tune_opts {
    const char *model, *mask, *cache;
    int batch, seq, budget, nlen;
    bool no_store;
    unsigned seed;
    stof_dtype dtype;
    int32_t lengths[TUNE_MAX_BATCH];
} tune_opts;

static bool parse_tune(cli_args *a, tune_opts *o)
{
    const cli_opt opts[] = {
        CLI_OPT_STRING("--model", &o->model),
        CLI_OPT_STRING("--mask", &o->mask),
        CLI_OPT_STRING("--cache", &o->cache),
        CLI_OPT_INT("--batch", &o->batch, 1, TUNE_MAX_BATCH),
        CLI_OPT_INT("--seq", &o->seq, 1, 1 << 20),
        CLI_OPT_INT("--budget", &o->budget, 1, 4096),
        CLI_OPT_INT_LIST("--lengths", o->lengths, 0, 1 << 20, TUNE_MAX_BATCH, &o->nlen),
        CLI_OPT_DTYPE("--dtype", &o->dtype),
        CLI_OPT_SEED("--seed", &o->seed),
        CLI_OPT_FLAG("--no-store", &o->no_store),
    };
    if (!cli_parse(a, opts, CLI_COUNT(opts), tune_usage)) return false;
    if (!o->model) {
        fprintf(stderr, "stof tune: --model DIR is required\n");
        return false;
    }
    return cli_check_lengths(a, o->lengths, o->nlen, o->batch, o->seq);
}

/* A one-line bar redrawn in place: [#####.....] done/total stage. */
static void draw_bar(void *user, int done, int total, const char *stage)
{
    (void)user;
    const int width = 30;
    int fill = total > 0 ? (int)((long)width * done / total) : 0;
    if (fill > width) fill = width;
    char bar[64];
    for (int i = 0; i < width; i++)
        bar[i] = i < fill ? '#' : '.';
    bar[width] = '\0';
    fprintf(stderr, "\r  [%s] %3d/%-3d %-10s", bar, done, total, stage);
    fflush(stderr);
}

static void print_result(const tune_opts *o, const stof_tune_result *r, int64_t tokens)
{
    printf("shape         B=%d L=%d, %lld real tokens, mask %s\n", o->batch, o->seq,
           (long long)tokens, o->mask ? o->mask : "dense");
    printf("search        %d candidates measured, %d rejected (wrong output), %.1f s\n",
           r->measured, r->rejected, r->tune_s);
    printf("\n%-10s  %-34s  %s\n", "segment", "tuned", "default");
    for (int i = 0; i < STOF_TUNE_SEGMENTS; i++)
        printf("%-10s  %-34s  %s\n", r->segment[i], r->chosen[i], r->fallback[i]);
    double gain = r->tuned_ms > 0 ? r->default_ms / r->tuned_ms : 1.0;
    printf("\nforward       default %.4f ms, tuned %.4f ms: %.3fx\n", r->default_ms, r->tuned_ms,
           gain);
    if (r->cache_path[0])
        printf("stored in     %s\n", r->cache_path);
    else
        printf("not stored    (--no-store)\n");
}

int cmd_tune(cli_args *a)
{
    static tune_opts o;
    o = (tune_opts){.batch = 1, .seq = 128, .budget = 32, .seed = 1, .dtype = STOF_F16};
    if (!parse_tune(a, &o)) return 2;
    stof_status st;
    stof_ctx *ctx = NULL;
    stof_model *model = NULL;
    stof_mask_spec *spec = NULL;
    int32_t *ids = NULL;
    int rc = 1;
    stof_ctx_params cp = stof_ctx_default_params();
    cp.device = STOF_DEVICE_GPU;
    if ((st = stof_ctx_create(&cp, &ctx))) return cli_fail(a, "creating a GPU context", st);
    if (o.mask && (st = stof_mask_spec_parse(o.mask, &spec))) {
        cli_fail(a, "parsing --mask", st);
        goto done;
    }
    stof_model_params mp = stof_model_default_params();
    mp.dtype = o.dtype;
    mp.tune_cache = o.cache;
    if ((st = stof_model_load(ctx, o.model, &mp, &model))) {
        cli_fail(a, "loading the model", st);
        goto done;
    }
    stof_model_info info;
    if ((st = stof_model_get_info(model, &info))) {
        cli_fail(a, "reading the model info", st);
        goto done;
    }
    int64_t n_ids = (int64_t)o.batch * o.seq;
    if (!(ids = malloc(sizeof(int32_t) * (size_t)n_ids))) {
        fprintf(stderr, "stof tune: out of host memory for %lld ids\n", (long long)n_ids);
        goto done;
    }
    int64_t tokens =
        cli_fill_inputs(o.batch, o.seq, o.seed, o.nlen > 0, o.lengths, info.vocab, ids);
    int64_t sh_ids[2] = {o.batch, o.seq}, sh_len[1] = {o.batch};
    stof_tensor t_ids = stof_tensor_make(ids, STOF_I32, STOF_MEM_HOST, 2, sh_ids);
    stof_tensor t_len = stof_tensor_make(o.lengths, STOF_I32, STOF_MEM_HOST, 1, sh_len);
    printf("stof %s on %s\n", stof_version(), stof_ctx_device_name(ctx));
    printf("model         %s: %s (%s), %d layers, hidden %d, %d heads, intermediate %d, %s\n",
           o.model, info.family, info.model_type, info.layers, info.hidden, info.heads,
           info.intermediate, stof_dtype_name(info.dtype));
    fflush(stdout);
    stof_tune_params tp = stof_tune_default_params();
    tp.mask = spec;
    tp.budget = o.budget;
    tp.store = !o.no_store;
    bool bar = isatty(STDERR_FILENO);
    if (bar) tp.progress = draw_bar;
    stof_tune_result res;
    st = stof_model_tune(model, &tp, &t_ids, &t_len, NULL, &res);
    if (bar) fprintf(stderr, "\r%60s\r", "");
    if (st) {
        cli_fail(a, "tuning", st);
        goto done;
    }
    print_result(&o, &res, tokens);
    rc = 0;
done:
    free(ids);
    stof_mask_spec_destroy(spec);
    stof_model_destroy(model);
    stof_ctx_destroy(ctx);
    return rc;
}
