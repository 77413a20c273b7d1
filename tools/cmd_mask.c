/*
 * cmd_mask.c — `stof mask SPEC`: compile a mask and show what the attention
 * kernels will see: tile counts, density, and a map of one instance's tiles
 * (F full, p partial, . empty).
 */
#include "cli.h"

#include <stdio.h>
#include <stdlib.h>

#define MAX_BATCH 4096

static void mask_usage(void)
{
    printf("usage: stof mask SPEC [--seq L] [--seq-k LK] [--batch B] [--heads H]\n"
           "                 [--lengths l1,l2,..] [--tile T] [--device auto|cpu|gpu] [--map]\n"
           "  --map  draw instance (0,0) tile by tile (at most 128 tile columns)\n");
}

/* Tile columns a map may have; wider maps are not drawn, and the dense
 * decode they would need (Lq x Lk bytes) is never made. */
#define MAP_MAX_COLS 128

/* Draw the tile map of instance (0, 0) from its dense decode. */
static void print_tile_map(const uint8_t *dense, int lq, int lk, int tm, int tn)
{
    int rows = (lq + tm - 1) / tm, cols = (lk + tn - 1) / tn;
    for (int r = 0; r < rows; r++) {
        for (int c = 0; c < cols; c++) {
            long on = 0, all = 0;
            for (int i = r * tm; i < (r + 1) * tm && i < lq; i++)
                for (int j = c * tn; j < (c + 1) * tn && j < lk; j++) {
                    on += dense[(size_t)i * lk + j];
                    all++;
                }
            putchar(on == 0 ? '.' : on == all ? 'F' : 'p');
        }
        putchar('\n');
    }
}

int cmd_mask(cli_args *a)
{
    const char *spec_text = NULL;
    int lq = 1024, lk = -1, batch = 1, heads = 1, tile = 0, nlen = 0;
    bool map = false;
    stof_device device = STOF_DEVICE_AUTO;
    static int32_t lengths[MAX_BATCH];
    const cli_opt opts[] = {
        CLI_OPT_ARG("SPEC", &spec_text),
        CLI_OPT_INT("--seq", &lq, 1, 1 << 20),
        CLI_OPT_INT("--seq-k", &lk, 1, 1 << 20),
        CLI_OPT_INT("--batch", &batch, 1, MAX_BATCH),
        CLI_OPT_INT("--heads", &heads, 1, 1024),
        CLI_OPT_INT("--tile", &tile, 0, 128),
        CLI_OPT_INT_LIST("--lengths", lengths, 0, 1 << 20, MAX_BATCH, &nlen),
        CLI_OPT_DEVICE("--device", &device),
        CLI_OPT_FLAG("--map", &map),
    };
    if (!cli_parse(a, opts, CLI_COUNT(opts), mask_usage)) return 2;
    if (!spec_text) {
        mask_usage();
        return 2;
    }
    if (lk < 0) lk = lq;
    if (!cli_check_lengths(a, lengths, nlen, batch, lq)) return 2; /* query lengths */

    stof_status st;
    stof_mask_spec *spec = NULL;
    stof_ctx *ctx = NULL;
    stof_mask *mask = NULL;
    uint8_t *dense = NULL;
    int rc = 1;
    if ((st = stof_mask_spec_parse(spec_text, &spec)))
        return cli_fail(a, "parsing the mask spec", st);
    stof_ctx_params cp = stof_ctx_default_params();
    cp.device = device;
    if ((st = stof_ctx_create(&cp, &ctx))) {
        cli_fail(a, "creating the context", st);
        goto done;
    }
    int64_t lshape[1] = {batch};
    stof_tensor lt = stof_tensor_make(lengths, STOF_I32, STOF_MEM_HOST, 1, lshape);
    stof_mask_params mp = stof_mask_default_params();
    mp.batch = batch;
    mp.heads = heads;
    mp.len_q = lq;
    mp.len_k = lk;
    mp.tile_m = mp.tile_n = tile;
    mp.lengths_q = nlen ? &lt : NULL;
    double t0 = cli_now_ms();
    if ((st = stof_mask_compile(ctx, spec, &mp, &mask)) || (st = stof_ctx_synchronize(ctx))) {
        cli_fail(a, "compiling the mask", st);
        goto done;
    }
    double t1 = cli_now_ms();
    stof_mask_stats ms;
    if ((st = stof_mask_stats_get(mask, &ms))) {
        cli_fail(a, "reading mask statistics", st);
        goto done;
    }
    char canon[1024];
    if ((st = stof_mask_spec_format(spec, canon, sizeof canon, NULL)))
        snprintf(canon, sizeof canon, "(spec too long to print)");
    printf("spec          %s\n", canon);
    printf("shape         B=%d H=%d Lq=%d Lk=%d on %s\n", batch, heads, lq, lk,
           stof_ctx_device_name(ctx));
    printf("instances     %d\n", ms.instances);
    printf(
        "tiles         %dx%d: %lld listed of %lld (%lld full, %lld partial), tile density %.4f\n",
        ms.tile_m, ms.tile_n, (long long)(ms.tiles_full + ms.tiles_partial),
        (long long)ms.tiles_total, (long long)ms.tiles_full, (long long)ms.tiles_partial,
        ms.tile_density);
    printf("visible pairs %lld, density %.4f\n", (long long)ms.nnz, ms.density);
    printf("compile       %.3f ms (first call, host clock, includes set-up)\n", t1 - t0);
    int map_cols = (lk + ms.tile_n - 1) / ms.tile_n;
    if (map && map_cols > MAP_MAX_COLS) {
        printf("(tile map omitted: %d tile columns, at most %d are drawn)\n", map_cols,
               MAP_MAX_COLS);
    } else if (map) {
        dense = malloc((size_t)lq * (size_t)lk);
        if (!dense) {
            fprintf(stderr, "stof mask: out of memory for the tile map\n");
            goto done;
        }
        if ((st = stof_mask_decode(mask, 0, 0, dense, (size_t)lq * (size_t)lk))) {
            cli_fail(a, "decoding the mask", st);
            goto done;
        }
        print_tile_map(dense, lq, lk, ms.tile_m, ms.tile_n);
    }
    rc = 0;
done:
    free(dense);
    stof_mask_destroy(mask);
    stof_ctx_destroy(ctx);
    stof_mask_spec_destroy(spec);
    return rc;
}
