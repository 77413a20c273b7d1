/*
 * cmd_run.c — `stof run`: load a model folder of any family, run forwards on
 * random token ids and report the median time per forward and the real
 * tokens per second. A batch whose buffers cannot fit the memory left is
 * refused up front with the sizes, rather than being killed mid-run.
 *
 * Lengths are drawn uniformly from [L/2, L] with the seed (the benchmark
 * shapes of BENCH.md) unless --lengths gives them; throughput counts real
 * tokens only, since padding is never computed. On a GPU the outputs live in
 * device memory and the ids stay on the host, as a tokenizer hands them over
 * (host ids are checked on the host, so the forward never waits for the GPU).
 */
#include "cli.h"
#include "core/core.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#if STOF_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

#define RUN_MAX_BATCH 4096

static void run_usage(void)
{
    printf("usage: stof run --model DIR [--batch B] [--seq L] [--mask SPEC]\n"
           "                [--device auto|cpu|gpu] [--dtype f16|bf16] [--iters N]\n"
           "                [--lengths l1,l2,..] [--seed S] [--eager] [--threads N]\n"
           "defaults: --batch 1 --seq 128 --iters 20 (5 on the CPU) --device auto --dtype f16;\n"
           "lengths uniform in [L/2, L] from the seed unless --lengths gives them;\n"
           "--threads N: CPU threads (0, the default: every core).\n"
           "On a GPU a forward replays a CUDA graph of its shape once one is captured\n"
           "(the second forward of a shape); --eager launches kernel by kernel instead.\n"
           "A plan tuned by 'stof tune' for the same shape is used when the cache has one.\n");
}

typedef struct run_opts {
    const char *model, *mask;
    int batch, seq, iters, nlen;
    int threads; /* CPU backend threads; 0: every core */
    bool iters_set, eager;
    unsigned seed;
    stof_device device;
    stof_dtype dtype;
    int32_t lengths[RUN_MAX_BATCH];
} run_opts;

static bool parse_run(cli_args *a, run_opts *o)
{
    const cli_opt opts[] = {
        CLI_OPT_STRING("--model", &o->model),
        CLI_OPT_STRING("--mask", &o->mask),
        CLI_OPT_INT("--batch", &o->batch, 1, RUN_MAX_BATCH),
        CLI_OPT_INT("--seq", &o->seq, 1, 1 << 20),
        CLI_OPT_INT_SET("--iters", &o->iters, 1, 100000, &o->iters_set),
        CLI_OPT_INT_LIST("--lengths", o->lengths, 0, 1 << 20, RUN_MAX_BATCH, &o->nlen),
        CLI_OPT_DEVICE("--device", &o->device),
        CLI_OPT_DTYPE("--dtype", &o->dtype),
        CLI_OPT_SEED("--seed", &o->seed),
        CLI_OPT_FLAG("--eager", &o->eager),
        CLI_OPT_INT("--threads", &o->threads, 0, 1024),
    };
    if (!cli_parse(a, opts, CLI_COUNT(opts), run_usage)) return false;
    if (!o->model) {
        fprintf(stderr, "stof run: --model DIR is required\n");
        return false;
    }
    return cli_check_lengths(a, o->lengths, o->nlen, o->batch, o->seq);
}

typedef struct run_buffers {
    int32_t *ids_host;
    void *hidden, *pooled;
    bool gpu;
    stof_tensor ids, lengths, hidden_t, pooled_t;
} run_buffers;

static void free_run_buffers(run_buffers *b)
{
    free(b->ids_host);
#if STOF_HAVE_CUDA
    if (b->gpu) {
        if (b->hidden) (void)cudaFree(b->hidden);
        if (b->pooled) (void)cudaFree(b->pooled);
    } else
#endif
    {
        free(b->hidden);
        free(b->pooled);
    }
}

static stof_status alloc_run_buffers(run_buffers *b, run_opts *o, const stof_model_info *info,
                                     bool gpu, int64_t *tokens)
{
    int64_t n_ids = (int64_t)o->batch * o->seq;
    int64_t sh_ids[2] = {o->batch, o->seq}, sh_len[1] = {o->batch};
    int64_t sh_hid[3] = {o->batch, o->seq, info->hidden}, sh_pool[2] = {o->batch, info->hidden};
    size_t hid_bytes = (size_t)n_ids * (size_t)info->hidden * stof_dtype_size(info->dtype);
    size_t pool_bytes = (size_t)o->batch * (size_t)info->hidden * sizeof(float);
    b->gpu = gpu;
    STOF_TRY(stof_host_alloc((size_t)n_ids * sizeof(int32_t), (void **)&b->ids_host));
    *tokens = cli_fill_inputs(o->batch, o->seq, o->seed, o->nlen > 0, o->lengths, info->vocab,
                              b->ids_host);
    stof_memory mem = gpu ? STOF_MEM_DEVICE : STOF_MEM_HOST;
#if STOF_HAVE_CUDA
    if (gpu) {
        STOF_CUDA_TRY(cudaMalloc(&b->hidden, hid_bytes));
        STOF_CUDA_TRY(cudaMalloc(&b->pooled, pool_bytes));
    } else
#endif
    {
        STOF_TRY(stof_host_alloc(hid_bytes, &b->hidden));
        STOF_TRY(stof_host_alloc(pool_bytes, &b->pooled));
    }
    b->ids = stof_tensor_make(b->ids_host, STOF_I32, STOF_MEM_HOST, 2, sh_ids);
    b->lengths = stof_tensor_make(o->lengths, STOF_I32, STOF_MEM_HOST, 1, sh_len);
    b->hidden_t = stof_tensor_make(b->hidden, info->dtype, mem, 3, sh_hid);
    b->pooled_t = stof_tensor_make(b->pooled, STOF_F32, mem, 2, sh_pool);
    return STOF_OK;
}

/* Bytes a forward of this batch needs beyond the weights: the outputs, and on
 * the CPU the executor's fp32 scratch (exec_cpu.c: about eight hidden-wide
 * rows, the qkv rows and three intermediate-wide rows per token, and a mask
 * plane per head of the longest sequence). */
static double forward_bytes(const run_opts *o, const stof_model_info *info, bool gpu)
{
    double B = o->batch, L = o->seq, H = info->hidden, I = info->intermediate;
    double qkv = (double)(info->heads + 2 * info->kv_heads) * info->head_dim;
    double out = B * L * H * (double)stof_dtype_size(info->dtype) + B * H * 4.0;
    if (gpu) return out;
    return out + B * L * (8.0 * H + qkv + 3.0 * I) * 4.0 + (double)info->heads * L * L;
}

/* Refuses a batch that cannot fit: host memory available now (CPU), or the
 * device's free memory (GPU). */
static stof_status check_fits(const run_opts *o, const stof_model_info *info, bool gpu)
{
    double need = forward_bytes(o, info, gpu), have;
    have = (double)sysconf(_SC_AVPHYS_PAGES) * (double)sysconf(_SC_PAGESIZE);
#if STOF_HAVE_CUDA
    if (gpu) {
        size_t free_b = 0, total_b = 0;
        STOF_CUDA_TRY(cudaMemGetInfo(&free_b, &total_b));
        have = (double)free_b;
    }
#endif
    STOF_REQUIRE(need <= 0.9 * have, STOF_ERR_OOM,
                 "batch B=%d L=%d needs about %.2f GiB of %s memory for its activations and "
                 "outputs; %.2f GiB are free: use a smaller --batch or --seq",
                 o->batch, o->seq, need / 1073741824.0, gpu ? "device" : "host",
                 have / 1073741824.0);
    return STOF_OK;
}

/* Median and minimum wall time of iters forwards, synchronising after each;
 * two warm-up forwards first (the first at a shape sets up its workspace). */
static stof_status time_forwards(stof_ctx *ctx, stof_model *m, const stof_forward_params *fp,
                                 run_buffers *b, int iters, double *median_ms, double *min_ms)
{
    double *times = malloc(sizeof(double) * (size_t)iters);
    STOF_REQUIRE(times, STOF_ERR_OOM, "out of host memory");
    stof_status st = STOF_OK;
    for (int it = -2; it < iters && st == STOF_OK; it++) {
        double t0 = cli_now_ms();
        st = stof_model_forward(m, fp, &b->ids, &b->lengths, NULL, &b->hidden_t, &b->pooled_t);
        if (st == STOF_OK) st = stof_ctx_synchronize(ctx);
        if (it >= 0) times[it] = cli_now_ms() - t0;
    }
    if (st == STOF_OK) {
        qsort(times, (size_t)iters, sizeof(double), cli_cmp_double);
        *median_ms = times[iters / 2];
        *min_ms = times[0];
    }
    free(times);
    return st;
}

int cmd_run(cli_args *a)
{
    static run_opts o;
    o = (run_opts){.batch = 1,
                   .seq = 128,
                   .iters = 20,
                   .seed = 1,
                   .device = STOF_DEVICE_AUTO,
                   .dtype = STOF_F16};
    if (!parse_run(a, &o)) return 2;

    stof_status st;
    stof_ctx *ctx = NULL;
    stof_model *model = NULL;
    stof_mask_spec *spec = NULL;
    run_buffers buf;
    memset(&buf, 0, sizeof buf);
    int rc = 1;
    stof_ctx_params cp = stof_ctx_default_params();
    cp.device = o.device;
    cp.cpu_threads = o.threads;
    if ((st = stof_ctx_create(&cp, &ctx))) return cli_fail(a, "creating the context", st);
    bool gpu = stof_ctx_device(ctx) == STOF_DEVICE_GPU;
    if (!gpu && !o.iters_set) o.iters = 5;
    if (o.mask && (st = stof_mask_spec_parse(o.mask, &spec))) {
        cli_fail(a, "parsing --mask", st);
        goto done;
    }
    stof_model_params mp = stof_model_default_params();
    mp.dtype = o.dtype;
    double t0 = cli_now_ms();
    if ((st = stof_model_load(ctx, o.model, &mp, &model))) {
        cli_fail(a, "loading the model", st);
        goto done;
    }
    double load_ms = cli_now_ms() - t0;
    stof_model_info info;
    if ((st = stof_model_get_info(model, &info))) {
        cli_fail(a, "reading the model info", st);
        goto done;
    }
    int64_t tokens = 0;
    if ((st = check_fits(&o, &info, gpu))) {
        cli_fail(a, "checking the batch size", st);
        goto done;
    }
    if ((st = alloc_run_buffers(&buf, &o, &info, gpu, &tokens))) {
        cli_fail(a, "allocating inputs", st);
        goto done;
    }
    printf("stof %s on %s%s\n", stof_version(), stof_ctx_device_name(ctx),
           gpu ? "" : " (no GPU in use: CPU backend)");
    printf("model         %s: %d layers, hidden %d, %d heads (dim %d), intermediate %d, vocab %d, "
           "run dtype %s, loaded in %.1f ms\n",
           o.model, info.layers, info.hidden, info.heads, info.head_dim, info.intermediate,
           info.vocab, stof_dtype_name(info.dtype), load_ms);
    printf("family        %s (model_type %s), %d kv heads, %s\n", info.family, info.model_type,
           info.kv_heads, info.is_decoder ? "decoder" : "encoder");
    stof_forward_params fp = stof_forward_default_params();
    fp.mask = spec;
    fp.eager = o.eager;
    double median = 0, best = 0;
    if ((st = time_forwards(ctx, model, &fp, &buf, o.iters, &median, &best))) {
        cli_fail(a, "running the forward", st);
        goto done;
    }
    printf("batch         B=%d L=%d, %lld real tokens of %lld (%.0f%%), mask %s\n", o.batch, o.seq,
           (long long)tokens, (long long)o.batch * o.seq,
           100.0 * (double)tokens / ((double)o.batch * o.seq), o.mask ? o.mask : "dense");
    printf("forward       median %.3f ms (min %.3f ms) over %d runs%s, %.0f tokens/s\n", median,
           best, o.iters, gpu ? (o.eager ? ", kernel by kernel" : ", CUDA graph") : "",
           median > 0 ? (double)tokens / (median * 1e-3) : 0.0);
    rc = 0;
done:
    free_run_buffers(&buf);
    stof_mask_spec_destroy(spec);
    stof_model_destroy(model);
    stof_ctx_destroy(ctx);
    return rc;
}
