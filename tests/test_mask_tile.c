/*
 * test_mask_tile.c — the default tile shape of a mask compiled with tile 0:
 * 128 x 64 is tried only for long rows whose head dim has 32-row warps and
 * whose 128-row CTAs fill two waves, and kept only when it lists at most 10%
 * more area than 64 x 64 (dense and causal masks keep it; windows and BigBird
 * blocks do not). Runs on the CPU with a context that describes a 132-SM GPU
 * and the CPU builder.
 */
#include "mask/mask_internal.h"
#include "testlib.h"

#include <string.h>

static stof_mask_params shape(int b, int h, int l, int d)
{
    stof_mask_params p = stof_mask_default_params();
    p.batch = b;
    p.heads = h;
    p.len_q = p.len_k = l;
    p.head_dim = d;
    p.builder = STOF_BUILDER_CPU;
    return p;
}

/* Tile rows the compile would use for text at p on ctx (host-side planning only). */
static int planned_tile_m(stof_ctx *ctx, const char *text, stof_mask_params p)
{
    stof_mask_spec *spec = NULL;
    CHECK_OK(stof_mask_spec_parse(text, &spec));
    mask_plan plan;
    int tm = -1;
    stof_status st = mask_plan_tiles(ctx, spec, &p, true, &plan);
    CHECK(st == STOF_OK, "%s: %s", text, stof_last_error());
    if (st == STOF_OK) tm = plan.tm;
    mask_plan_free(&plan);
    stof_mask_spec_destroy(spec);
    return tm;
}

int main(void)
{
    stof_ctx gpu;
    memset(&gpu, 0, sizeof gpu);
    gpu.device = STOF_DEVICE_GPU;
    gpu.sm_count = 132;
    stof_mask_params p = shape(4, 16, 4096, 64);
    CHECK(mask_tall_tiles_may_pay(&gpu, &p), "long rows, head dim 64");
    p = shape(8, 12, 1024, 64);
    CHECK(mask_tall_tiles_may_pay(&gpu, &p), "1024: 768 CTAs");
    p = shape(8, 12, 512, 64);
    CHECK(!mask_tall_tiles_may_pay(&gpu, &p), "short rows");
    p = shape(1, 1, 4096, 64);
    CHECK(!mask_tall_tiles_may_pay(&gpu, &p), "32 CTAs do not fill two waves");
    p = shape(4, 16, 4096, 128);
    CHECK(!mask_tall_tiles_may_pay(&gpu, &p), "head dim 128 has no 32-row warps");
    p = shape(4, 16, 4096, 0);
    CHECK(!mask_tall_tiles_may_pay(&gpu, &p), "unknown head dim");
    p = shape(4, 16, 4096, 32);
    CHECK(mask_tall_tiles_may_pay(&gpu, &p), "head dim 32");
    stof_ctx cpu = gpu;
    cpu.device = STOF_DEVICE_CPU;
    p = shape(4, 16, 4096, 64);
    CHECK(!mask_tall_tiles_may_pay(&cpu, &p), "CPU contexts keep 64x64");
    CHECK(!mask_tall_tiles_may_pay(NULL, &p), "no context");

    /* The area rule, on the plans a compile would make. */
    p = shape(4, 16, 4096, 64);
    CHECK(planned_tile_m(&gpu, "full", p) == 128, "dense: tall");
    CHECK(planned_tile_m(&gpu, "causal", p) == 128, "causal: tall");
    CHECK(planned_tile_m(&gpu, "full,within:causal", p) == 128, "full within causal: tall");
    CHECK(planned_tile_m(&gpu, "window:128,global:32,within:causal", p) == 64,
          "longformer within causal: 64");
    CHECK(planned_tile_m(&gpu, "window:128", p) == 64, "window: 64");
    CHECK(planned_tile_m(&gpu, "window:128,global:32", p) == 64, "longformer: 64");
    CHECK(planned_tile_m(&gpu, "random:64x3@7,window:64", p) == 64, "random blocks: 64");
    CHECK(planned_tile_m(&cpu, "full", p) == 64, "CPU context: 64");
    p.tile_m = p.tile_n = 64;
    CHECK(planned_tile_m(&gpu, "full", p) == 64, "explicit tiles are kept");
    p = shape(4, 16, 4096, 128);
    CHECK(planned_tile_m(&gpu, "full", p) == 64, "head dim 128: 64");
    return test_finish("test_mask_tile");
}
