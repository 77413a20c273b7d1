/*
 * bench_mask_compile.c — GPU mask compile time for the BENCH.md masks at
 * (B, H, L) = (4, 16, 4096): longformer (window:128,global:32 with
 * per-entry lengths, device tensor) and bigbird (64-blocks |bi-bj| <= 1 or
 * bi < 2 or bj < 2, plus random:64x3). Each compile is timed with CUDA events
 * on the ctx's stream after a warm-up; the table gives the median and the
 * 90th percentile. The events see the whole compile as the stream does,
 * host-side gaps between launches included, on an otherwise idle GPU.
 * Before timing, each mask is compiled by both builders and the GPU result
 * must be byte-identical to the CPU one (the run fails otherwise).
 *
 * usage: bench_mask_compile [--runs N] [--warmup N] [--json FILE]
 * Exits 77 when no GPU is usable.
 */
#include "mask/mask.h"
#include "stof.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cuda_runtime_api.h>

#define B 4
#define H 16
#define L 4096

typedef struct bench_case {
    const char *name;
    double median_us, p90_us, host_us;
    int64_t tiles, partial;
} bench_case;

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec * 1e-3;
}

static stof_mask_spec *make_spec(const char *name)
{
    stof_mask_spec *spec = NULL;
    if (strcmp(name, "longformer") == 0) {
        if (stof_mask_spec_parse("window:128,global:32", &spec) != STOF_OK) return NULL;
        return spec;
    }
    if (stof_mask_spec_create(&spec) != STOF_OK) return NULL;
    static uint8_t layout[64 * 64];
    for (int i = 0; i < 64; i++)
        for (int j = 0; j < 64; j++)
            layout[i * 64 + j] = abs(i - j) <= 1 || i < 2 || j < 2;
    if (stof_mask_spec_add_blocks(spec, 64, 1, 64, 64, layout) != STOF_OK ||
        stof_mask_spec_add_random(spec, 64, 3, 20261121) != STOF_OK) {
        stof_mask_spec_destroy(spec);
        return NULL;
    }
    return spec;
}

static int same_bytes(const void *a, const void *b, size_t n, const char *mask, const char *what)
{
    if (n == 0 || memcmp(a, b, n) == 0) return 1;
    size_t k = 0;
    while (((const uint8_t *)a)[k] == ((const uint8_t *)b)[k])
        k++;
    fprintf(stderr, "%s: GPU and CPU builders differ in %s at byte %zu of %zu\n", mask, what, k, n);
    return 0;
}

/* Whether two host copies of a compiled mask are byte-identical. */
static int same_mask(const char *name, const mask_tiles_host *hc, const mask_tiles_host *hg)
{
    const mask_tiles *a = &hc->t, *b = &hg->t;
    if (hc->entries != hg->entries || hc->partial != hg->partial || a->n_inst != b->n_inst ||
        a->n_trow != b->n_trow || a->n_tcol != b->n_tcol || a->tile_m != b->tile_m ||
        a->tile_n != b->tile_n) {
        fprintf(stderr,
                "%s: CPU builder %lld tiles / %lld partial, GPU %lld / %lld (or shapes differ)\n",
                name, (long long)hc->entries, (long long)hc->partial, (long long)hg->entries,
                (long long)hg->partial);
        return 0;
    }
    size_t rows = (size_t)a->n_inst * a->n_trow;
    size_t words = (size_t)hc->partial * a->tile_m * a->words_per_row;
    return same_bytes(a->len_q, b->len_q, (size_t)a->bm * 4, name, "len_q") &&
           same_bytes(a->len_k, b->len_k, (size_t)a->bm * 4, name, "len_k") &&
           same_bytes(a->row_ptr, b->row_ptr, (rows + 1) * 4, name, "row_ptr") &&
           same_bytes(a->col, b->col, (size_t)hc->entries * 4, name, "col") &&
           same_bytes(a->bits, b->bits, (size_t)hc->entries * 4, name, "bits") &&
           same_bytes(a->bitmap, b->bitmap, words * 8, name, "bitmap");
}

/* Leaves poisoned blocks in the stream-ordered pool the compiler allocates
 * from, so that output the GPU builder fails to write shows up. */
static void poison_pool(stof_ctx *ctx)
{
    cudaStream_t s = (cudaStream_t)stof_ctx_stream(ctx);
    void *p[4] = {NULL, NULL, NULL, NULL};
    for (int k = 0; k < 4; k++)
        if (cudaMallocAsync(&p[k], (size_t)(16 << 20) >> k, s) == cudaSuccess)
            cudaMemsetAsync(p[k], 0xA5, (size_t)(16 << 20) >> k, s);
    for (int k = 0; k < 4; k++)
        if (p[k]) cudaFreeAsync(p[k], s);
    cudaStreamSynchronize(s);
}

/* Compiles the mask with both builders: whether the outputs are byte-identical. */
static int builders_agree(stof_ctx *ctx, const char *name, const stof_mask_spec *spec,
                          stof_mask_params p)
{
    stof_mask *m[2] = {NULL, NULL};
    mask_tiles_host h[2];
    int have[2] = {0, 0}, ok = 0;
    for (int k = 0; k < 2; k++) {
        p.builder = k ? STOF_BUILDER_GPU : STOF_BUILDER_CPU;
        if (k) poison_pool(ctx);
        have[k] = stof_mask_compile(ctx, spec, &p, &m[k]) == STOF_OK &&
                  stof_mask_to_host(m[k], &h[k]) == STOF_OK;
        if (!have[k]) {
            fprintf(stderr, "%s: self-check, %s builder: %s\n", name, k ? "GPU" : "CPU",
                    stof_last_error());
            break;
        }
    }
    if (have[0] && have[1]) ok = same_mask(name, &h[0], &h[1]);
    for (int k = 0; k < 2; k++) {
        if (have[k]) mask_tiles_host_free(&h[k]);
        stof_mask_destroy(m[k]);
    }
    return ok;
}

/* Times runs compiles of one mask; fills c. Returns 0 on success. */
static int bench_one(stof_ctx *ctx, bench_case *c, int warmup, int runs, const stof_tensor *lens)
{
    stof_mask_spec *spec = make_spec(c->name);
    if (!spec) {
        fprintf(stderr, "%s: spec: %s\n", c->name, stof_last_error());
        return 1;
    }
    stof_mask_params p = stof_mask_default_params();
    p.batch = B;
    p.heads = H;
    p.len_q = p.len_k = L;
    p.builder = STOF_BUILDER_GPU;
    if (strcmp(c->name, "longformer") == 0) p.lengths_q = lens;
    if (!builders_agree(ctx, c->name, spec, p)) {
        stof_mask_spec_destroy(spec);
        return 1;
    }
    cudaStream_t s = (cudaStream_t)stof_ctx_stream(ctx);
    cudaEvent_t e0, e1;
    cudaEventCreate(&e0);
    cudaEventCreate(&e1);
    double *gpu = calloc((size_t)runs, sizeof *gpu), *host = calloc((size_t)runs, sizeof *host);
    int err = 0;
    stof_mask *m = NULL;
    for (int k = -warmup; k < runs && !err; k++) {
        cudaStreamSynchronize(s);
        double h0 = now_us();
        cudaEventRecord(e0, s);
        stof_status st = stof_mask_compile(ctx, spec, &p, &m);
        cudaEventRecord(e1, s);
        double h1 = now_us();
        if (st != STOF_OK) {
            fprintf(stderr, "%s: compile: %s\n", c->name, stof_last_error());
            err = 1;
            break;
        }
        cudaEventSynchronize(e1);
        float ms = 0;
        cudaEventElapsedTime(&ms, e0, e1);
        if (k >= 0) {
            gpu[k] = ms * 1e3;
            host[k] = h1 - h0;
        }
        if (k < runs - 1) {
            stof_mask_destroy(m);
            m = NULL;
        }
    }
    if (!err) {
        stof_mask_stats stats;
        if (stof_mask_stats_get(m, &stats) != STOF_OK) {
            fprintf(stderr, "%s: stats: %s\n", c->name, stof_last_error());
            err = 1;
        } else {
            c->tiles = stats.tiles_full + stats.tiles_partial;
            c->partial = stats.tiles_partial;
        }
        qsort(gpu, (size_t)runs, sizeof *gpu, cmp_double);
        qsort(host, (size_t)runs, sizeof *host, cmp_double);
        c->median_us = gpu[runs / 2];
        c->p90_us = gpu[(runs * 9) / 10];
        c->host_us = host[runs / 2];
    }
    stof_mask_destroy(m);
    free(gpu);
    free(host);
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    stof_mask_spec_destroy(spec);
    return err;
}

static void json_string(FILE *f, const char *s)
{
    fputc('"', f);
    for (; *s; s++) {
        unsigned char ch = (unsigned char)*s;
        if (ch == '"' || ch == '\\')
            fprintf(f, "\\%c", ch);
        else if (ch < 0x20)
            fprintf(f, "\\u%04x", ch);
        else
            fputc(ch, f);
    }
    fputc('"', f);
}

static int write_json(const char *path, stof_ctx *ctx, int argc, char **argv, const bench_case *cs,
                      int n)
{
    FILE *f = fopen(path, "w");
    if (!f) {
        fprintf(stderr, "cannot write %s\n", path);
        return 1;
    }
    char date[32];
    time_t t = time(NULL);
    strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", gmtime(&t));
    char command[2048] = "";
    for (int k = 0; k < argc; k++) {
        if (k) strncat(command, " ", sizeof command - strlen(command) - 1);
        strncat(command, argv[k], sizeof command - strlen(command) - 1);
    }
    const char *commit = getenv("STOF_COMMIT");
    fprintf(f, "{\"device\": ");
    json_string(f, stof_ctx_device_name(ctx));
    fprintf(f, ", \"date\": ");
    json_string(f, date);
    fprintf(f, ", \"commit\": ");
    if (commit)
        json_string(f, commit);
    else
        fprintf(f, "null");
    fprintf(f, ", \"command\": ");
    json_string(f, command);
    fprintf(f, ", \"cases\": [");
    for (int k = 0; k < n; k++) {
        fprintf(f,
                "%s\n  {\"mask\": \"%s\", \"B\": %d, \"H\": %d, \"L\": %d, "
                "\"compile_us_median\": %.2f, \"compile_us_p90\": %.2f, \"host_us_median\": %.2f, "
                "\"tiles\": %lld, \"partial\": %lld}",
                k ? "," : "", cs[k].name, B, H, L, cs[k].median_us, cs[k].p90_us, cs[k].host_us,
                (long long)cs[k].tiles, (long long)cs[k].partial);
    }
    fprintf(f, "\n]}\n");
    return fclose(f) == 0 ? 0 : 1;
}

int main(int argc, char **argv)
{
    int runs = 500, warmup = 50;
    const char *json = NULL;
    for (int k = 1; k < argc; k++) {
        if (strcmp(argv[k], "--runs") == 0 && k + 1 < argc)
            runs = atoi(argv[++k]);
        else if (strcmp(argv[k], "--warmup") == 0 && k + 1 < argc)
            warmup = atoi(argv[++k]);
        else if (strcmp(argv[k], "--json") == 0 && k + 1 < argc)
            json = argv[++k];
        else {
            fprintf(stderr, "usage: %s [--runs N] [--warmup N] [--json FILE]\n", argv[0]);
            return 2;
        }
    }
    if (runs < 1 || warmup < 0) {
        fprintf(stderr, "--runs must be >= 1 and --warmup >= 0\n");
        return 2;
    }
    if (stof_gpu_count() == 0) {
        printf("bench_mask_compile: no CUDA device, skipped\n");
        return 77;
    }
    stof_ctx_params cp = stof_ctx_default_params();
    cp.device = STOF_DEVICE_GPU;
    stof_ctx *ctx = NULL;
    if (stof_ctx_create(&cp, &ctx) != STOF_OK) {
        fprintf(stderr, "ctx: %s\n", stof_last_error());
        return 1;
    }
    /* Per-entry lengths uniform in [L/2, L] (seeded), as a device tensor. */
    int32_t lens_host[B];
    uint64_t x = 7;
    for (int b = 0; b < B; b++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        lens_host[b] = L / 2 + (int32_t)((x >> 33) % (L / 2 + 1));
    }
    int32_t *lens_dev = NULL;
    cudaMalloc((void **)&lens_dev, sizeof lens_host);
    cudaMemcpy(lens_dev, lens_host, sizeof lens_host, cudaMemcpyHostToDevice);
    int64_t nb = B;
    stof_tensor lens = stof_tensor_make(lens_dev, STOF_I32, STOF_MEM_DEVICE, 1, &nb);

    bench_case cs[2] = {{"longformer", 0, 0, 0, 0, 0}, {"bigbird", 0, 0, 0, 0, 0}};
    int err = 0;
    for (int k = 0; k < 2 && !err; k++)
        err = bench_one(ctx, &cs[k], warmup, runs, &lens);
    if (!err) {
        printf("GPU mask compile on %s, %d runs (median / p90 of CUDA-event time; host = "
               "time in the call); both masks byte-identical to the CPU builder\n",
               stof_ctx_device_name(ctx), runs);
        printf("%-12s %3s %3s %5s %12s %12s %10s %8s %8s\n", "mask", "B", "H", "L", "median_us",
               "p90_us", "host_us", "tiles", "partial");
        for (int k = 0; k < 2; k++)
            printf("%-12s %3d %3d %5d %12.2f %12.2f %10.2f %8lld %8lld\n", cs[k].name, B, H, L,
                   cs[k].median_us, cs[k].p90_us, cs[k].host_us, (long long)cs[k].tiles,
                   (long long)cs[k].partial);
        if (json) err = write_json(json, ctx, argc, argv, cs, 2);
    }
    cudaFree(lens_dev);
    stof_ctx_destroy(ctx);
    return err;
}
