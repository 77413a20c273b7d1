/*
 * cmd_demo.c — `stof demo`: the library end to end on random inputs. It
 * compiles a mask, runs masked attention on the GPU when there is one (on the
 * CPU backend otherwise), checks a GPU result against the CPU backend on the
 * same rounded inputs, and reports times. The default size runs in about a
 * second on the CPU; a slow call (a large size on the CPU) is announced and
 * followed by a progress bar.
 */
#include "cli.h"
#include "core/core.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_BATCH 4096

static void demo_usage(void)
{
    printf("usage: stof demo [--mask SPEC] [--batch B] [--heads H] [--seq L] [--dim D]\n"
           "                 [--lengths l1,l2,..] [--dtype f16|bf16|f32] [--device auto|cpu|gpu]\n"
           "                 [--iters N] [--seed S] [--threads N]\n"
           "defaults: --mask window:128,global:32 --batch 2 --heads 4 --seq 512 --dim 64\n"
           "          --dtype f16 (f32 on the CPU) --iters 20 (5 on the CPU)\n"
           "--threads N: CPU threads (0, the default: every core)\n");
}

typedef struct demo_opts {
    const char *mask;
    int batch, heads, seq, dim, iters, nlen;
    int threads; /* CPU backend threads; 0: every core */
    unsigned seed;
    stof_dtype dtype;
    bool dtype_set;
    stof_device device;
    int32_t lengths[MAX_BATCH];
} demo_opts;

static bool parse_demo(cli_args *a, demo_opts *o)
{
    const cli_opt opts[] = {
        CLI_OPT_STRING("--mask", &o->mask),
        CLI_OPT_INT("--batch", &o->batch, 1, MAX_BATCH),
        CLI_OPT_INT("--heads", &o->heads, 1, 256),
        CLI_OPT_INT("--seq", &o->seq, 1, 1 << 17),
        CLI_OPT_INT("--dim", &o->dim, 1, 256),
        CLI_OPT_INT("--iters", &o->iters, 1, 100000),
        CLI_OPT_SEED("--seed", &o->seed),
        CLI_OPT_INT_LIST("--lengths", o->lengths, 0, 1 << 17, MAX_BATCH, &o->nlen),
        CLI_OPT_DTYPE_SET("--dtype", &o->dtype, &o->dtype_set),
        CLI_OPT_DEVICE("--device", &o->device),
        CLI_OPT_INT("--threads", &o->threads, 0, 1024),
    };
    if (!cli_parse(a, opts, CLI_COUNT(opts), demo_usage)) return false;
    return cli_check_lengths(a, o->lengths, o->nlen, o->batch, o->seq);
}

/* Deterministic uniform values in [-1, 1), rounded to dtype and stored. */
static void fill_random(void *host, float *as_f32, int64_t n, stof_dtype dtype, unsigned *state)
{
    for (int64_t i = 0; i < n; i++) {
        *state = *state * 1664525u + 1013904223u;
        float x = (float)((*state >> 8) & 0xffffff) / 8388608.0f - 1.0f;
        stof_store_f(host, dtype, i, x);
        as_f32[i] = stof_load_f(host, dtype, i);
    }
}

typedef struct demo_buffers {
    void *host[4]; /* q, k, v, out in the run dtype */
    float *ref[4]; /* q, k, v, out as fp32 for the CPU check */
    void *dev[4];
    stof_tensor t[4];
} demo_buffers;

static void free_buffers(stof_ctx *ctx, demo_buffers *b)
{
    for (int i = 0; i < 4; i++) {
        free(b->host[i]);
        free(b->ref[i]);
        if (b->dev[i]) stof_dev_free(ctx, b->dev[i]);
    }
}

static stof_status alloc_buffers(stof_ctx *ctx, demo_buffers *b, const demo_opts *o, bool gpu)
{
    int64_t shape[4] = {o->batch, o->heads, o->seq, o->dim};
    int64_t n = (int64_t)o->batch * o->heads * o->seq * o->dim;
    size_t bytes = (size_t)n * stof_dtype_size(o->dtype);
    unsigned state = o->seed;
    for (int i = 0; i < 4; i++) {
        STOF_TRY(stof_host_alloc(bytes, &b->host[i]));
        STOF_TRY(stof_host_alloc((size_t)n * sizeof(float), (void **)&b->ref[i]));
        if (i < 3)
            fill_random(b->host[i], b->ref[i], n, o->dtype, &state);
        else
            memset(b->host[i], 0xff, bytes); /* poison: NaN in every dtype */
        void *data = b->host[i];
        if (gpu) {
            STOF_TRY(stof_dev_alloc(ctx, bytes, &b->dev[i]));
            STOF_TRY(stof_dev_upload(ctx, b->dev[i], b->host[i], bytes));
            data = b->dev[i];
        }
        b->t[i] = stof_tensor_make(data, o->dtype, gpu ? STOF_MEM_DEVICE : STOF_MEM_HOST, 4, shape);
    }
    return STOF_OK;
}

/* Calls slower than this are announced on stderr, with a progress bar. */
#define DEMO_SLOW_CALL_MS 500.0

/* Median wall time of iters attention calls, synchronising after each. */
static stof_status time_attention(stof_ctx *ctx, stof_mask *mask, demo_buffers *b, int iters,
                                  double *median_ms)
{
    stof_attn_params ap = stof_attn_default_params();
    double *times = malloc(sizeof(double) * (size_t)iters);
    STOF_REQUIRE(times, STOF_ERR_OOM, "out of host memory");
    stof_status st = STOF_OK;
    bool slow = false;
    for (int it = -2; it < iters && st == STOF_OK; it++) { /* two warm-up calls */
        double t0 = cli_now_ms();
        st = stof_attention(ctx, &ap, &b->t[0], &b->t[1], &b->t[2], mask, NULL, NULL, &b->t[3]);
        if (st == STOF_OK) st = stof_ctx_synchronize(ctx);
        double ms = cli_now_ms() - t0;
        if (it >= 0) times[it] = ms;
        if (it == -2 && st == STOF_OK && ms > DEMO_SLOW_CALL_MS) {
            slow = true;
            fprintf(stderr, "stof demo: one attention call takes %.1f s here; timing %d more "
                            "(about %.0f s; --iters and a smaller --seq or --batch run shorter)\n",
                    ms / 1e3, iters + 1, ms * (iters + 1) / 1e3);
        }
        if (slow) cli_progress("attention calls", it + 3, iters + 2);
    }
    if (st == STOF_OK) {
        qsort(times, (size_t)iters, sizeof(double), cli_cmp_double);
        *median_ms = times[iters / 2];
    }
    free(times);
    return st;
}

/* The same attention on a CPU context over the rounded fp32 inputs. */
static stof_status cpu_check(const demo_opts *o, const stof_mask_spec *spec,
                             const stof_mask_params *mp, demo_buffers *b, double *rel_err)
{
    stof_ctx_params cp = stof_ctx_default_params();
    cp.device = STOF_DEVICE_CPU;
    cp.cpu_threads = o->threads;
    stof_ctx *cpu = NULL;
    stof_mask *mask = NULL;
    STOF_TRY(stof_ctx_create(&cp, &cpu));
    stof_status st = stof_mask_compile(cpu, spec, mp, &mask);
    int64_t shape[4] = {o->batch, o->heads, o->seq, o->dim};
    int64_t n = (int64_t)o->batch * o->heads * o->seq * o->dim;
    stof_tensor t[4];
    for (int i = 0; i < 4; i++)
        t[i] = stof_tensor_make(b->ref[i], STOF_F32, STOF_MEM_HOST, 4, shape);
    stof_attn_params ap = stof_attn_default_params();
    if (st == STOF_OK) st = stof_attention(cpu, &ap, &t[0], &t[1], &t[2], mask, NULL, NULL, &t[3]);
    if (st == STOF_OK) {
        double num = 0, den = 0;
        for (int64_t i = 0; i < n; i++) {
            float g = stof_load_f(b->host[3], o->dtype, i);
            double d = (double)g - b->ref[3][i];
            num += isnan(g) ? INFINITY : d * d;
            den += (double)b->ref[3][i] * b->ref[3][i];
        }
        *rel_err = den > 0 ? sqrt(num / den) : sqrt(num);
    }
    stof_mask_destroy(mask);
    stof_ctx_destroy(cpu);
    return st;
}

int cmd_demo(cli_args *a)
{
    static demo_opts o;
    o = (demo_opts){.mask = "window:128,global:32",
                    .batch = 2,
                    .heads = 4,
                    .seq = 512,
                    .dim = 64,
                    .iters = 0, /* 20 on a GPU, 5 on the CPU */
                    .seed = 1,
                    .dtype = STOF_F16,
                    .device = STOF_DEVICE_AUTO};
    if (!parse_demo(a, &o)) return 2;

    stof_status st;
    stof_ctx *ctx = NULL;
    stof_mask_spec *spec = NULL;
    stof_mask *mask = NULL;
    demo_buffers buf;
    memset(&buf, 0, sizeof buf);
    int rc = 1;
    stof_ctx_params cp = stof_ctx_default_params();
    cp.device = o.device;
    cp.cpu_threads = o.threads;
    if ((st = stof_ctx_create(&cp, &ctx))) return cli_fail(a, "creating the context", st);
    bool gpu = stof_ctx_device(ctx) == STOF_DEVICE_GPU;
    if (!gpu && !o.dtype_set) o.dtype = STOF_F32;
    if (!o.iters) o.iters = gpu ? 20 : 5;
    printf("stof %s on %s%s\n", stof_version(), stof_ctx_device_name(ctx),
           gpu ? "" : " (no GPU in use: CPU backend)");
    if ((st = stof_mask_spec_parse(o.mask, &spec))) {
        cli_fail(a, "parsing --mask", st);
        goto done;
    }
    int64_t lshape[1] = {o.batch};
    stof_tensor lt = stof_tensor_make(o.lengths, STOF_I32, STOF_MEM_HOST, 1, lshape);
    stof_mask_params mp = stof_mask_default_params();
    mp.batch = o.batch;
    mp.heads = o.heads;
    mp.len_q = mp.len_k = o.seq;
    mp.lengths_q = o.nlen ? &lt : NULL;
    double t0 = cli_now_ms();
    if ((st = stof_mask_compile(ctx, spec, &mp, &mask)) || (st = stof_ctx_synchronize(ctx))) {
        cli_fail(a, "compiling the mask", st);
        goto done;
    }
    double compile_ms = cli_now_ms() - t0;
    stof_mask_stats ms;
    if ((st = stof_mask_stats_get(mask, &ms))) {
        cli_fail(a, "reading mask statistics", st);
        goto done;
    }
    if ((st = alloc_buffers(ctx, &buf, &o, gpu))) {
        cli_fail(a, "allocating inputs", st);
        goto done;
    }
    stof_attn_params ap = stof_attn_default_params();
    stof_attn_choice choice;
    if ((st = stof_attention_select(ctx, &ap, &buf.t[0], mask, &choice))) {
        cli_fail(a, "selecting a kernel", st);
        goto done;
    }
    double ms_attn = 0;
    if ((st = time_attention(ctx, mask, &buf, o.iters, &ms_attn))) {
        cli_fail(a, "running attention", st);
        goto done;
    }
    static const char *kernel_names[] = {"auto", "block-wise", "row-wise", "cpu",
                                         "block-wise (sm_90 wgmma)"};
    printf("mask          %s: %lld visible pairs (density %.3f), %lld tiles of %dx%d "
           "(%lld partial), compiled in %.3f ms\n",
           o.mask, (long long)ms.nnz, ms.density, (long long)(ms.tiles_full + ms.tiles_partial),
           ms.tile_m, ms.tile_n, (long long)ms.tiles_partial, compile_ms);
    /* Instances shared by several (b, h) pairs are computed once per pair. */
    double flops = 4.0 * (double)ms.nnz * o.dim * ((double)o.batch * o.heads / ms.instances);
    printf("attention     B=%d H=%d L=%d D=%d %s, %s kernel (%dx%d tiles, %d warps): %.3f ms, "
           "%.2f effective %s\n",
           o.batch, o.heads, o.seq, o.dim, stof_dtype_name(o.dtype), kernel_names[choice.kernel],
           choice.block_m, choice.block_n, choice.warps, ms_attn,
           flops / (ms_attn * (gpu ? 1e9 : 1e6)), gpu ? "TFLOP/s" : "GFLOP/s");
    if (gpu) {
        size_t bytes = (size_t)o.batch * o.heads * o.seq * o.dim * stof_dtype_size(o.dtype);
        if ((st = stof_dev_download(ctx, buf.host[3], buf.dev[3], bytes)) ||
            (st = stof_ctx_synchronize(ctx))) {
            cli_fail(a, "reading the output", st);
            goto done;
        }
        double err = 0;
        if ((st = cpu_check(&o, spec, &mp, &buf, &err))) {
            cli_fail(a, "checking on the CPU", st);
            goto done;
        }
        double tol = o.dtype == STOF_BF16 ? 2e-2 : 5e-3;
        printf("check         relative error vs the CPU backend %.2e (tolerance %.0e): %s\n", err,
               tol, err <= tol ? "ok" : "FAILED");
        if (err > tol) goto done;
    }
    rc = 0;
done:
    free_buffers(ctx, &buf);
    stof_mask_destroy(mask);
    stof_mask_spec_destroy(spec);
    stof_ctx_destroy(ctx);
    return rc;
}
