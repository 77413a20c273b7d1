/*
 * test_mask_gpu.c — the GPU mask compiler against the CPU one: for hundreds
 * of random specs (test_mask_gen.c, within bands or not) both builders run
 * on one GPU context and their outputs must be byte-identical (lengths,
 * row_ptr, col, bits, bitmaps); the GPU result must also decode to the dense oracle. Lengths and
 * dense parts are given in host and in device memory. The device memory
 * pool is poisoned before each compile so that unwritten output shows up.
 * Reusable masks are built again for new device lengths, directly and from a
 * captured CUDA graph, over poisoned storage, and must decode to the oracle.
 * Builds run as one cooperative launch; part of the cases run again as two
 * kernels, the form used where the device cannot hold the grid at once.
 */
#include "test_mask_gen.c"

#include "mask/mask_internal.h"

#include <cuda_runtime_api.h>

static void *dev_place(const void *host, size_t bytes)
{
    void *d = NULL;
    if (cudaMalloc(&d, bytes) != cudaSuccess) return NULL;
    cudaMemcpy(d, host, bytes, cudaMemcpyHostToDevice);
    return d;
}

static void dev_release(void *p)
{
    cudaFree(p);
}

/* Leaves poisoned blocks in the stream-ordered pool the compiler allocates from. */
static void poison_pool(stof_ctx *ctx, size_t bytes)
{
    cudaStream_t s = (cudaStream_t)stof_ctx_stream(ctx);
    void *p[4] = {NULL};
    for (int k = 0; k < 4; k++) {
        if (cudaMallocAsync(&p[k], bytes >> k, s) != cudaSuccess) continue;
        cudaMemsetAsync(p[k], 0xA5, bytes >> k, s);
    }
    for (int k = 0; k < 4; k++)
        if (p[k]) cudaFreeAsync(p[k], s);
    cudaStreamSynchronize(s);
}

static int compare_bytes(const void *a, const void *b, size_t n, const char *what)
{
    if (n == 0 || memcmp(a, b, n) == 0) return 0;
    size_t k = 0;
    while (((const uint8_t *)a)[k] == ((const uint8_t *)b)[k])
        k++;
    fprintf(stderr, "  %s differs at byte %zu of %zu\n", what, k, n);
    return 1;
}

/* Byte-for-byte equality of two compiled masks. */
static int compare_masks(const mask_tiles_host *c, const mask_tiles_host *g)
{
    const mask_tiles *a = &c->t, *b = &g->t;
    if (c->entries != g->entries || c->partial != g->partial || a->n_inst != b->n_inst ||
        a->bm != b->bm || a->hm != b->hm || a->tile_m != b->tile_m || a->tile_n != b->tile_n ||
        a->n_trow != b->n_trow || a->n_tcol != b->n_tcol || a->all_visible != b->all_visible) {
        fprintf(stderr,
                "  cpu %lld entries / %lld partial, gpu %lld / %lld (or geometry differs)\n",
                (long long)c->entries, (long long)c->partial, (long long)g->entries,
                (long long)g->partial);
        return 1;
    }
    int bad = 0;
    size_t rows = (size_t)a->n_inst * a->n_trow;
    bad += compare_bytes(a->len_q, b->len_q, (size_t)a->bm * 4, "len_q");
    bad += compare_bytes(a->len_k, b->len_k, (size_t)a->bm * 4, "len_k");
    bad += compare_bytes(a->row_ptr, b->row_ptr, (rows + 1) * 4, "row_ptr");
    bad += compare_bytes(a->col, b->col, (size_t)c->entries * 4, "col");
    bad += compare_bytes(a->bits, b->bits, (size_t)c->entries * 4, "bits");
    bad += compare_bytes(a->bitmap, b->bitmap,
                         (size_t)c->partial * a->tile_m * a->words_per_row * 8, "bitmap");
    return bad;
}

/* Compiles g with both builders (lengths on the device when asked) and compares. */
static int run_case(stof_ctx *ctx, const gen_case *g, bool device_lengths, bool oracle)
{
    stof_tensor tq, tk;
    stof_mask_params p = gen_params(g, &tq, &tk, STOF_BUILDER_CPU);
    int32_t *dq = NULL, *dk = NULL;
    if (device_lengths) {
        if (p.lengths_q) tq.data = dq = dev_place(g->len_q, (size_t)g->batch * 4);
        if (p.lengths_k) tk.data = dk = dev_place(g->len_k, (size_t)g->batch * 4);
        tq.memory = tk.memory = STOF_MEM_DEVICE;
    }
    int bad = 0;
    stof_mask *cm = NULL, *gm = NULL;
    stof_status st = stof_mask_compile(ctx, g->spec, &p, &cm);
    if (st != STOF_OK) fprintf(stderr, "  cpu builder: %s\n", stof_last_error());
    bad += st != STOF_OK;
    poison_pool(ctx, 1 << 22);
    p.builder = STOF_BUILDER_GPU;
    st = stof_mask_compile(ctx, g->spec, &p, &gm);
    if (st != STOF_OK) fprintf(stderr, "  gpu builder: %s\n", stof_last_error());
    bad += st != STOF_OK;
    if (cm && gm) {
        mask_tiles_host hc, hg;
        stof_status sc = stof_mask_to_host(cm, &hc), sg = stof_mask_to_host(gm, &hg);
        if (sc != STOF_OK || sg != STOF_OK) {
            fprintf(stderr, "  to_host: %s\n", stof_last_error());
            bad++;
        } else {
            bad += compare_masks(&hc, &hg);
        }
        if (sc == STOF_OK) mask_tiles_host_free(&hc);
        if (sg == STOF_OK) mask_tiles_host_free(&hg);
        if (oracle && !bad) bad += check_mask_case(g, gm);
    }
    stof_mask_destroy(cm);
    stof_mask_destroy(gm);
    dev_release(dq);
    dev_release(dk);
    if (bad)
        fprintf(stderr, "  case (%s lengths): %s\n", device_lengths ? "device" : "host", g->desc);
    return bad;
}

static void test_random_cases(stof_ctx *ctx, test_rng *r, int count)
{
    int failed = 0;
    for (int k = 0; k < count && failed < 5; k++) {
        gen_case g;
        gen_case_make(r, &g, dev_place, true);
        bool dev_lens = (g.len_q || g.len_k) && test_rng_int(r, 0, 1);
        int bad = run_case(ctx, &g, dev_lens, true);
        CHECK(bad == 0, "case %d: %d problems", k, bad);
        failed += bad != 0;
        gen_case_free(&g, dev_release);
    }
}

/* Device lengths outside [0, L] are clamped the same way by both builders. */
static void test_clamped_lengths(stof_ctx *ctx)
{
    gen_case g;
    memset(&g, 0, sizeof g);
    stof_mask_spec_parse("window:5,random:16x2@3", &g.spec);
    g.batch = 3;
    g.heads = 1;
    g.lq = g.lk = 100;
    g.tm = 32;
    g.tn = 16;
    int32_t raw[3] = {-7, 250, 40};
    g.len_q = raw;
    CHECK(run_case(ctx, &g, true, false) == 0, "clamped device lengths");
    stof_mask_spec_destroy(g.spec);
}

/* The two benchmark masks at full size, and the long masked case of a
 * decoder (BigBird-style sparsity within its causal band). */
static void test_large(stof_ctx *ctx, test_rng *r)
{
    const char *specs[3] = {"window:128,global:32", NULL, "window:256,global:64,within:causal"};
    for (int k = 0; k < 3; k++) {
        gen_case g;
        memset(&g, 0, sizeof g);
        g.batch = 4;
        g.heads = 16;
        g.lq = g.lk = 4096;
        if (specs[k]) {
            stof_mask_spec_parse(specs[k], &g.spec);
            g.len_q = malloc(4 * sizeof(int32_t));
            for (int b = 0; b < 4; b++)
                g.len_q[b] = (int32_t)test_rng_int(r, 2048, 4096);
        } else {
            stof_mask_spec_create(&g.spec);
            uint8_t *lay = malloc(64 * 64);
            for (int i = 0; i < 64; i++)
                for (int j = 0; j < 64; j++)
                    lay[i * 64 + j] = abs(i - j) <= 1 || i < 2 || j < 2;
            stof_mask_spec_add_blocks(g.spec, 64, 1, 64, 64, lay);
            stof_mask_spec_add_random(g.spec, 64, 3, 1234);
            free(lay);
        }
        CHECK(run_case(ctx, &g, specs[k] != NULL, false) == 0, "large case %d", k);
        stof_mask_spec_destroy(g.spec);
        free(g.len_q);
    }
}

/* New lengths for a case (host arrays in place; eff_k follows the NULL rule). */
static void new_lengths(test_rng *r, gen_case *g)
{
    for (int b = 0; b < g->batch; b++) {
        if (g->len_q) g->len_q[b] = gen_real_length(r, g->lq);
        if (g->len_k) g->len_k[b] = gen_real_length(r, g->lk);
        g->eff_k[b] =
            g->len_k ? g->len_k[b] : (g->len_q && g->lq == g->lk ? g->len_q[b] : g->lk);
    }
}

/* Captures stof_mask_rebuild in a graph on the ctx's stream and launches it. */
static stof_status rebuild_in_graph(stof_ctx *ctx, stof_mask *m)
{
    cudaStream_t s = (cudaStream_t)stof_ctx_stream(ctx);
    cudaGraph_t graph = NULL;
    cudaGraphExec_t exec = NULL;
    if (cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal) != cudaSuccess)
        return STOF_ERR_CUDA;
    stof_status st = stof_mask_rebuild(m);
    if (cudaStreamEndCapture(s, &graph) != cudaSuccess) st = STOF_ERR_CUDA;
    if (st == STOF_OK && cudaGraphInstantiate(&exec, graph, 0) != cudaSuccess) st = STOF_ERR_CUDA;
    if (st == STOF_OK && cudaGraphLaunch(exec, s) != cudaSuccess) st = STOF_ERR_CUDA;
    if (st == STOF_OK && cudaStreamSynchronize(s) != cudaSuccess) st = STOF_ERR_CUDA;
    if (exec) cudaGraphExecDestroy(exec);
    if (graph) cudaGraphDestroy(graph);
    return st;
}

/* A reusable mask with device lengths, rebuilt for new lengths three times. */
static void test_rebuild(stof_ctx *ctx, test_rng *r, int count)
{
    int failed = 0;
    for (int k = 0; k < count && failed < 3; k++) {
        gen_case g;
        gen_case_make(r, &g, dev_place, true);
        if (!g.len_q && !g.len_k) {
            g.len_q = malloc((size_t)g.batch * 4);
            for (int b = 0; b < g.batch; b++)
                g.len_q[b] = g.lq;
            if (g.lq != g.lk) {
                g.len_k = malloc((size_t)g.batch * 4);
                for (int b = 0; b < g.batch; b++)
                    g.len_k[b] = g.lk;
            }
            new_lengths(r, &g);
        }
        stof_tensor tq, tk;
        stof_mask_params p = gen_params(&g, &tq, &tk, STOF_BUILDER_GPU);
        p.reusable = 1;
        int32_t *dq = NULL, *dk = NULL;
        if (p.lengths_q) tq.data = dq = dev_place(g.len_q, (size_t)g.batch * 4);
        if (p.lengths_k) tk.data = dk = dev_place(g.len_k, (size_t)g.batch * 4);
        tq.memory = tk.memory = STOF_MEM_DEVICE;
        stof_mask *m = NULL;
        int bad = 0;
        CHECK_OK(stof_mask_compile(ctx, g.spec, &p, &m));
        if (m) bad += check_mask_case(&g, m);
        for (int round = 0; m && round < 3 && !bad; round++) {
            new_lengths(r, &g);
            if (dq) cudaMemcpy(dq, g.len_q, (size_t)g.batch * 4, cudaMemcpyHostToDevice);
            if (dk) cudaMemcpy(dk, g.len_k, (size_t)g.batch * 4, cudaMemcpyHostToDevice);
            cudaMemset(m->storage, 0xA5, m->lay.total);
            stof_status st = round == 1 ? rebuild_in_graph(ctx, m) : stof_mask_rebuild(m);
            if (st != STOF_OK) {
                fprintf(stderr, "  rebuild (round %d): %s\n", round, stof_last_error());
                bad++;
                break;
            }
            bad += check_mask_case(&g, m);
        }
        CHECK(bad == 0, "rebuild case %d: %s", k, g.desc);
        failed += bad != 0;
        stof_mask_destroy(m);
        dev_release(dq);
        dev_release(dk);
        gen_case_free(&g, dev_release);
    }
    /* A mask that is not reusable cannot be rebuilt; a CPU builder cannot make one. */
    stof_mask_spec *spec = NULL;
    CHECK_OK(stof_mask_spec_parse("window:3", &spec));
    stof_mask_params p = stof_mask_default_params();
    p.len_q = p.len_k = 50;
    stof_mask *m = NULL;
    CHECK_OK(stof_mask_compile(ctx, spec, &p, &m));
    CHECK_STATUS(stof_mask_rebuild(m), STOF_ERR_INVALID_ARG);
    stof_mask_destroy(m);
    p.reusable = 1;
    p.builder = STOF_BUILDER_CPU;
    m = NULL;
    CHECK_STATUS(stof_mask_compile(ctx, spec, &p, &m), STOF_ERR_INVALID_ARG);
    CHECK(m == NULL, "a refused compile leaves no mask");
    CHECK_STATUS(stof_mask_rebuild(NULL), STOF_ERR_INVALID_ARG);
    stof_mask_spec_destroy(spec);
}

int main(void)
{
    test_require_gpu("test_mask_gpu");
    stof_ctx_params cp = stof_ctx_default_params();
    cp.device = STOF_DEVICE_GPU;
    stof_ctx *ctx = NULL;
    CHECK_OK(stof_ctx_create(&cp, &ctx));
    if (!ctx) return test_finish("test_mask_gpu");
    test_rng r;
    test_rng_init(&r, test_seed());
    test_clamped_lengths(ctx);
    test_large(ctx, &r);
    test_rebuild(ctx, &r, 150);
    const char *env = getenv("STOF_MASK_CASES");
    test_random_cases(ctx, &r, env ? atoi(env) : 600);
    /* Every grid the builder makes fits the device at once, so all of the
     * above ran as one cooperative launch; the two-kernel form, what a device
     * that cannot hold the grid gets, must build the same masks. */
    CHECK(mask_gpu_one_launch(ctx), "builds on %s run as one cooperative launch",
          stof_ctx_device_name(ctx));
    mask_gpu_set_cooperative(false);
    CHECK(!mask_gpu_one_launch(ctx), "the two-kernel form can be forced");
    test_large(ctx, &r);
    test_rebuild(ctx, &r, 40);
    test_random_cases(ctx, &r, env ? atoi(env) / 4 : 150);
    mask_gpu_set_cooperative(true);
    stof_ctx_destroy(ctx);
    return test_finish("test_mask_gpu");
}
