/*
 * bench_attention.c — stof's sparse attention on the BENCH.md shapes and
 * masks: median time over many runs (CUDA events around each call, after
 * warm-up), effective TFLOP/s counting only visible pairs (4 * nnz * D), the
 * kernel the selector picked (and, with --all-kernels, each kernel forced;
 * with --sm90-warps, the Hopper kernel with one or two warpgroups instead of
 * the selector's pick; with --kernels, each kernel of the list forced in
 * turn, so that two kernels are timed side by side in one process), the mask
 * compile time, and a check of sampled rows against the CPU reference in the
 * same run. Exits 77 without a GPU.
 *
 *   bench_attention [--iters N] [--warmup N] [--all-kernels] [--tile M,N]
 *                   [--sm90-warps 4|8] [--shape B,H,L,D] [--mask NAME]
 *                   [--kernels auto,blockwise,rowwise,sm90,sm90_ws] [--dtype f16|bf16]
 *                   [--kv-heads N]
 *
 * --kv-heads gives k and v N heads (grouped-query attention; N divides H).
 *
 * The one non-obvious choice: the check decodes nothing from the compiled
 * mask; it rebuilds each sampled row's visibility from the spec, so a wrong
 * mask compile shows up here as well as a wrong kernel.
 */
#include "attn/attn.h"
#include "attn/select.h"
#include "cpu/cpu_ref.h"
#include "mask/mask.h"
#include "stof.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#define SEED 1234u

typedef struct shape {
    int B, H, L, D;
} shape;

static const shape default_shapes[] = {
    {1, 12, 128, 64},  {8, 12, 512, 64},  {8, 12, 1024, 64}, {16, 12, 2048, 64}, {4, 16, 4096, 64},
    {2, 16, 8192, 64}, {8, 12, 1024, 32}, {4, 16, 4096, 32}, {8, 12, 1024, 128}, {4, 16, 4096, 128},
};

/* The BENCH.md masks, then masks run only when --mask names them:
 * dilated-whole is dilated with a redundant part (the diagonal), so that it is
 * stored whole instead of split by residue class (src/mask/mask.h): the same
 * mask, for measuring what the split gives. */
static const char *const mask_names[] = {"dense",      "causal",  "window", "dilated",
                                         "longformer", "bigbird", "varlen", "dilated-whole"};
#define N_MASKS 8
#define N_BENCH_MASKS 7

typedef struct options {
    int iters, warmup;
    int all_kernels;
    int sm90_warps; /* > 0: the sm_90 kernel forced with this many warps */
    int tile_m, tile_n;
    int one_shape;
    shape shape;
    const char *mask;
    int n_kernels; /* > 0: --kernels, forced one after the other */
    stof_attn_kernel kernels[8];
    stof_dtype dtype;
    int kv_heads; /* 0: H */
} options;

static uint64_t lcg_state = SEED;
static uint32_t lcg(void)
{
    lcg_state = lcg_state * 6364136223846793005ull + 1442695040888963407ull;
    return (uint32_t)(lcg_state >> 33);
}

static int die(const char *what, stof_status st)
{
    fprintf(stderr, "bench_attention: %s: %s: %s\n", what, stof_status_str(st), stof_last_error());
    exit(1);
}

/* The BENCH.md mask `name` for (B, L); lengths filled for varlen. */
static stof_mask_spec *make_spec(const char *name, int B, int L, int32_t *lengths, int *has_len)
{
    stof_mask_spec *s = NULL;
    stof_status st = STOF_OK;
    *has_len = 0;
    if (!strcmp(name, "dense") || !strcmp(name, "varlen"))
        st = stof_mask_spec_parse("full", &s);
    else if (!strcmp(name, "causal"))
        st = stof_mask_spec_parse("causal", &s);
    else if (!strcmp(name, "window"))
        st = stof_mask_spec_parse("window:128", &s);
    else if (!strcmp(name, "dilated"))
        st = stof_mask_spec_parse("dilated:128x2", &s);
    else if (!strcmp(name, "dilated-whole"))
        st = stof_mask_spec_parse("dilated:128x2,window:0", &s);
    else if (!strcmp(name, "longformer"))
        st = stof_mask_spec_parse("window:128,global:32", &s);
    else if (!strcmp(name, "bigbird")) {
        int nb = (L + 63) / 64;
        uint8_t *lay = malloc((size_t)nb * nb);
        for (int r = 0; r < nb; r++)
            for (int c = 0; c < nb; c++)
                lay[r * nb + c] = abs(r - c) <= 1;
        st = stof_mask_spec_create(&s);
        if (st == STOF_OK) st = stof_mask_spec_add_blocks(s, 64, 1, nb, nb, lay);
        if (st == STOF_OK) st = stof_mask_spec_add_global(s, L < 128 ? L : 128);
        if (st == STOF_OK) st = stof_mask_spec_add_random(s, 64, 3, SEED);
        free(lay);
    } else {
        fprintf(stderr, "bench_attention: unknown mask %s\n", name);
        exit(2);
    }
    if (st != STOF_OK) die("mask spec", st);
    if (!strcmp(name, "varlen")) {
        *has_len = 1;
        for (int b = 0; b < B; b++)
            lengths[b] = L / 2 + (int32_t)(lcg() % (uint32_t)(L - L / 2 + 1));
    }
    return s;
}

static int cmp_float(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

/* Median ms of `iters` calls, each between its own pair of events. */
static float time_attention(stof_ctx *ctx, const stof_attn_params *p,
                            const stof_attn_choice *choice, const stof_tensor *q,
                            const stof_tensor *k, const stof_tensor *v, stof_mask *mask,
                            stof_tensor *o, const options *opt)
{
    cudaStream_t s = (cudaStream_t)stof_ctx_stream(ctx);
    for (int i = 0; i < opt->warmup; i++) {
        stof_status st = attn_attention_with(ctx, p, choice, q, k, v, mask, NULL, NULL, o);
        if (st != STOF_OK) die("attention", st);
    }
    cudaEvent_t ev[2];
    cudaEventCreate(&ev[0]);
    cudaEventCreate(&ev[1]);
    float *ms = malloc((size_t)opt->iters * sizeof(float));
    for (int i = 0; i < opt->iters; i++) {
        cudaEventRecord(ev[0], s);
        attn_attention_with(ctx, p, choice, q, k, v, mask, NULL, NULL, o);
        cudaEventRecord(ev[1], s);
        cudaEventSynchronize(ev[1]);
        cudaEventElapsedTime(&ms[i], ev[0], ev[1]);
    }
    qsort(ms, (size_t)opt->iters, sizeof(float), cmp_float);
    float med = ms[opt->iters / 2];
    free(ms);
    cudaEventDestroy(ev[0]);
    cudaEventDestroy(ev[1]);
    return med;
}

/* Worst relative error over sampled rows of (b, h) = (0, 0) and (B-1, H-1). */
static double check_rows(const stof_mask_spec *spec, const shape *sh, int hkv, stof_dtype dt,
                         const int32_t *lens, const uint16_t *qh, const uint16_t *kh,
                         const uint16_t *vh, const uint16_t *oh)
{
    int L = sh->L, D = sh->D;
    float *kf = malloc((size_t)L * D * 4), *vf = malloc((size_t)L * D * 4);
    float *qf = malloc((size_t)D * 4), *ref = malloc((size_t)D * 4);
    uint8_t *plane = malloc((size_t)L * L);
    double worst = 0;
    int pairs[2][2] = {{0, 0}, {sh->B - 1, sh->H - 1}};
    for (int pi = 0; pi < 2; pi++) {
        int b = pairs[pi][0], h = pairs[pi][1];
        if (stof_mask_spec_to_dense(spec, sh->B, sh->H, L, L, lens, lens, b, h, plane) != STOF_OK) {
            worst = INFINITY;
            break;
        }
        int64_t base = ((int64_t)b * sh->H + h) * L * D;
        int64_t kv_base = ((int64_t)b * hkv + h / (sh->H / hkv)) * L * D;
        for (int64_t e = 0; e < (int64_t)L * D; e++) {
            kf[e] = stof_load_f(kh, dt, kv_base + e);
            vf[e] = stof_load_f(vh, dt, kv_base + e);
        }
        for (int s = 0; s < 24; s++) {
            int i = s < 4 ? (s * (L - 1)) / 3 : (int)(lcg() % (uint32_t)L);
            for (int d = 0; d < D; d++)
                qf[d] = stof_load_f(qh, dt, base + (int64_t)i * D + d);
            cpu_attention(qf, kf, vf, ref, 1, 1, 1, L, D, plane + (int64_t)i * L, 0, 0,
                          1.0f / sqrtf((float)D));
            double num = 0, den = 0;
            for (int d = 0; d < D; d++) {
                double x = stof_load_f(oh, dt, base + (int64_t)i * D + d);
                num += (x - ref[d]) * (x - ref[d]);
                den += (double)ref[d] * ref[d];
            }
            double e = den > 0 ? sqrt(num / den) : sqrt(num) * 1e3;
            if (isnan(e) || e > worst) worst = isnan(e) ? INFINITY : e;
        }
    }
    free(kf), free(vf), free(qf), free(ref), free(plane);
    return worst;
}

static const char *kernel_name(stof_attn_kernel k)
{
    switch (k) {
    case STOF_ATTN_BLOCKWISE: return "blockwise";
    case STOF_ATTN_BLOCKWISE_SM90: return "blockwise_sm90";
    case STOF_ATTN_BLOCKWISE_SM90_WS: return "sm90_ws";
    case STOF_ATTN_ROWWISE: return "rowwise";
    default: return "cpu";
    }
}

/* --kernels names: the kernel, or -1. */
static int kernel_of(const char *name)
{
    static const struct {
        const char *name;
        stof_attn_kernel kernel;
    } names[] = {{"auto", STOF_ATTN_AUTO},
                 {"blockwise", STOF_ATTN_BLOCKWISE},
                 {"rowwise", STOF_ATTN_ROWWISE},
                 {"sm90", STOF_ATTN_BLOCKWISE_SM90},
                 {"sm90_ws", STOF_ATTN_BLOCKWISE_SM90_WS}};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (!strcmp(name, names[i].name)) return (int)names[i].kernel;
    return -1;
}

static void bench_case(stof_ctx *ctx, const shape *sh, const char *mname, const options *opt)
{
    int32_t lens[64];
    int has_len = 0;
    stof_mask_spec *spec = make_spec(mname, sh->B, sh->L, lens, &has_len);
    int64_t bshape[1] = {sh->B};
    stof_tensor lt = stof_tensor_make(lens, STOF_I32, STOF_MEM_HOST, 1, bshape);
    stof_mask_params mp = stof_mask_default_params();
    mp.batch = sh->B;
    mp.heads = sh->H;
    mp.len_q = mp.len_k = sh->L;
    mp.lengths_q = has_len ? &lt : NULL;
    mp.tile_m = opt->tile_m;
    mp.tile_n = opt->tile_n;
    cudaStream_t s = (cudaStream_t)stof_ctx_stream(ctx);
    stof_mask *mask = NULL;
    /* Compile time: once cold (first use of the spec), then the median of 5 recompiles. */
    float compile_ms[5];
    for (int r = 0; r < 5; r++) {
        cudaEvent_t e0, e1;
        cudaEventCreate(&e0);
        cudaEventCreate(&e1);
        stof_mask_destroy(mask);
        mask = NULL;
        cudaEventRecord(e0, s);
        stof_status st = stof_mask_compile(ctx, spec, &mp, &mask);
        cudaEventRecord(e1, s);
        if (st != STOF_OK) die("mask compile", st);
        cudaEventSynchronize(e1);
        cudaEventElapsedTime(&compile_ms[r], e0, e1);
        cudaEventDestroy(e0);
        cudaEventDestroy(e1);
    }
    qsort(compile_ms, 5, sizeof(float), cmp_float);
    stof_mask_stats stats;
    stof_status st = stof_mask_stats_get(mask, &stats);
    if (st != STOF_OK) die("mask stats", st);
    double pairs = (double)stats.nnz * ((double)sh->B * sh->H / stats.instances);

    const stof_dtype dt = opt->dtype;
    const int hkv = opt->kv_heads > 0 ? opt->kv_heads : sh->H;
    int64_t n = (int64_t)sh->B * sh->H * sh->L * sh->D;
    int64_t nkv = (int64_t)sh->B * hkv * sh->L * sh->D;
    uint16_t *hq = malloc((size_t)n * 2), *hk = malloc((size_t)nkv * 2);
    uint16_t *hv = malloc((size_t)nkv * 2), *ho = malloc((size_t)n * 2);
    for (int64_t e = 0; e < n; e++)
        stof_store_f(hq, dt, e, (float)(lcg() % 2001) / 1000.0f - 1.0f);
    for (int64_t e = 0; e < nkv; e++) {
        stof_store_f(hk, dt, e, (float)(lcg() % 2001) / 1000.0f - 1.0f);
        stof_store_f(hv, dt, e, (float)(lcg() % 2001) / 1000.0f - 1.0f);
    }
    void *dq, *dk, *dv, *dout;
    if (cudaMalloc(&dq, (size_t)n * 2) || cudaMalloc(&dk, (size_t)nkv * 2) ||
        cudaMalloc(&dv, (size_t)nkv * 2) || cudaMalloc(&dout, (size_t)n * 2)) {
        fprintf(stderr, "bench_attention: out of device memory\n");
        exit(1);
    }
    cudaMemcpy(dq, hq, (size_t)n * 2, cudaMemcpyHostToDevice);
    cudaMemcpy(dk, hk, (size_t)nkv * 2, cudaMemcpyHostToDevice);
    cudaMemcpy(dv, hv, (size_t)nkv * 2, cudaMemcpyHostToDevice);
    int64_t tshape[4] = {sh->B, sh->H, sh->L, sh->D}, kvshape[4] = {sh->B, hkv, sh->L, sh->D};
    stof_tensor q = stof_tensor_make(dq, dt, STOF_MEM_DEVICE, 4, tshape);
    stof_tensor k = stof_tensor_make(dk, dt, STOF_MEM_DEVICE, 4, kvshape);
    stof_tensor v = stof_tensor_make(dv, dt, STOF_MEM_DEVICE, 4, kvshape);
    stof_tensor o = stof_tensor_make(dout, dt, STOF_MEM_DEVICE, 4, tshape);

    /* Runs: the selector's choice; with --all-kernels also row-wise and every
     * block-wise configuration that serves the mask's tiles. */
    stof_attn_kernel kinds[2] = {STOF_ATTN_AUTO, STOF_ATTN_ROWWISE};
    int runs = opt->n_kernels > 0 ? opt->n_kernels : opt->all_kernels ? 2 + ATTN_BW_NCONFIGS : 1;
    for (int r = 0; r < runs; r++) {
        stof_attn_params p = stof_attn_default_params();
        stof_attn_choice ch;
        const stof_attn_choice *forced = NULL;
        if (opt->n_kernels > 0) {
            p.kernel = opt->kernels[r];
            if (stof_attention_select(ctx, &p, &q, mask, &ch) != STOF_OK) {
                printf("%2d %2d %5d %3d  %-10s  %-9s  (%s)\n", sh->B, sh->H, sh->L, sh->D, mname,
                       kernel_name(opt->kernels[r]), stof_last_error());
                continue;
            }
        } else if (r == 0 && opt->sm90_warps > 0) {
            memset(&ch, 0, sizeof ch);
            ch.kernel = STOF_ATTN_BLOCKWISE_SM90;
            ch.warps = opt->sm90_warps;
            ch.block_m = 16 * opt->sm90_warps;
            ch.block_n = stats.tile_n;
            forced = &ch;
        } else if (r < 2) {
            p.kernel = kinds[r];
            if (stof_attention_select(ctx, &p, &q, mask, &ch) != STOF_OK) {
                printf("%2d %2d %5d %3d  %-10s  %-9s  (%s)\n", sh->B, sh->H, sh->L, sh->D, mname,
                       r == 0 ? "auto" : kernel_name(kinds[r]), stof_last_error());
                continue;
            }
        } else {
            const attn_bw_config *c = &attn_bw_configs[r - 2];
            if (!attn_bw_config_fits(c, sh->D, stats.tile_m, stats.tile_n)) continue;
            memset(&ch, 0, sizeof ch);
            ch.kernel = STOF_ATTN_BLOCKWISE;
            ch.warps = c->warps;
            ch.block_m = c->block_m;
            ch.block_n = c->block_n;
            forced = &ch;
        }
        cudaMemset(dout, 0xff, (size_t)n * 2);
        float ms = time_attention(ctx, &p, forced, &q, &k, &v, mask, &o, opt);
        stof_ctx_synchronize(ctx);
        cudaMemcpy(ho, dout, (size_t)n * 2, cudaMemcpyDeviceToHost);
        double err = check_rows(spec, sh, hkv, dt, has_len ? lens : NULL, hq, hk, hv, ho);
        double tflops = 4.0 * pairs * sh->D / (ms * 1e-3) / 1e12;
        char split[16] = ""; /* a dilated mask stored split: its classes */
        if (stof_mask_tiles_view(mask)->split > 1)
            snprintf(split, sizeof split, " /%d", stof_mask_tiles_view(mask)->split);
        printf("%2d %2d %5d %3d  %-10s  %5.3f  %-4s %-9s %3dx%-3d %dw%s  %8.4f ms  %6.1f TF/s  "
               "compile %.3f ms  err %.1e%s\n",
               sh->B, sh->H, sh->L, sh->D, mname, stats.density,
               (opt->n_kernels > 0 ? opt->kernels[r] == STOF_ATTN_AUTO : r == 0) ? "auto" : "force",
               kernel_name(ch.kernel), ch.block_m, ch.block_n, ch.warps, split, ms, tflops,
               compile_ms[2], err, err > 1e-2 ? "  BAD" : "");
        fflush(stdout);
    }
    cudaFree(dq), cudaFree(dk), cudaFree(dv), cudaFree(dout);
    free(hq), free(hk), free(hv), free(ho);
    stof_mask_destroy(mask);
    stof_mask_spec_destroy(spec);
}

static void usage(void)
{
    fprintf(stderr, "usage: bench_attention [--iters N] [--warmup N] [--all-kernels] "
                    "[--tile M,N] [--sm90-warps 4|8] [--shape B,H,L,D] [--mask NAME] "
                    "[--kernels auto,blockwise,rowwise,sm90,sm90_ws] [--dtype f16|bf16] "
                    "[--kv-heads N]\n");
    exit(2);
}

int main(int argc, char **argv)
{
    options opt = {.iters = 50, .warmup = 10, .dtype = STOF_F16};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--all-kernels"))
            opt.all_kernels = 1;
        else if (!val)
            usage();
        else if (!strcmp(a, "--sm90-warps"))
            opt.sm90_warps = atoi(argv[++i]);
        else if (!strcmp(a, "--iters"))
            opt.iters = atoi(argv[++i]);
        else if (!strcmp(a, "--warmup"))
            opt.warmup = atoi(argv[++i]);
        else if (!strcmp(a, "--tile")) {
            if (sscanf(argv[++i], "%d,%d", &opt.tile_m, &opt.tile_n) != 2) usage();
        } else if (!strcmp(a, "--shape")) {
            shape *s = &opt.shape;
            if (sscanf(argv[++i], "%d,%d,%d,%d", &s->B, &s->H, &s->L, &s->D) != 4 || s->B < 1 ||
                s->B > 64 || s->H < 1 || s->L < 1 || s->D < 1)
                usage();
            opt.one_shape = 1;
        } else if (!strcmp(a, "--kernels")) {
            char list[256];
            snprintf(list, sizeof list, "%s", argv[++i]);
            for (char *tok = strtok(list, ","); tok; tok = strtok(NULL, ",")) {
                int kern = kernel_of(tok);
                if (kern < 0 || opt.n_kernels == 8) usage();
                opt.kernels[opt.n_kernels++] = (stof_attn_kernel)kern;
            }
        } else if (!strcmp(a, "--dtype")) {
            i++;
            if (!strcmp(val, "f16"))
                opt.dtype = STOF_F16;
            else if (!strcmp(val, "bf16"))
                opt.dtype = STOF_BF16;
            else
                usage();
        } else if (!strcmp(a, "--kv-heads"))
            opt.kv_heads = atoi(argv[++i]);
        else if (!strcmp(a, "--mask"))
            opt.mask = argv[++i];
        else
            usage();
    }
    if (opt.iters < 1 || opt.warmup < 0 || opt.kv_heads < 0) usage();
    if (stof_gpu_count() == 0) {
        printf("bench_attention: skipped: no CUDA device\n");
        return 77;
    }
    stof_ctx_params cp = stof_ctx_default_params();
    cp.device = STOF_DEVICE_GPU;
    stof_ctx *ctx = NULL;
    stof_status st = stof_ctx_create(&cp, &ctx);
    if (st != STOF_OK) die("context", st);
    printf("# %s, %s, median of %d runs after %d warm-up; TF/s over visible pairs\n",
           stof_ctx_device_name(ctx), opt.dtype == STOF_BF16 ? "bf16" : "fp16", opt.iters,
           opt.warmup);
    printf(" B  H     L   D  mask        dens.  kernel          tile  warps   time        "
           "rate\n");
    int n_shapes = opt.one_shape ? 1 : (int)(sizeof default_shapes / sizeof default_shapes[0]);
    for (int si = 0; si < n_shapes; si++) {
        const shape *sh = opt.one_shape ? &opt.shape : &default_shapes[si];
        for (int m = 0; m < N_MASKS; m++) {
            if (opt.mask ? strcmp(opt.mask, mask_names[m]) != 0 : m >= N_BENCH_MASKS) continue;
            bench_case(ctx, sh, mask_names[m], &opt);
        }
    }
    stof_ctx_destroy(ctx);
    return 0;
}
