/*
 * test_mask_tile.c — the default tile shape of a mask compiled with tile 0:
 * 128 x 64 only for dense-enough, long masks whose head dim has 32-row warps
 * and whose 128-row CTAs fill two waves; 64 x 64 otherwise. Runs on the CPU
 * with a context that describes a 132-SM GPU.
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
    return p;
}

int main(void)
{
    stof_ctx gpu;
    memset(&gpu, 0, sizeof gpu);
    gpu.device = STOF_DEVICE_GPU;
    gpu.sm_count = 132;
    stof_mask_params p = shape(4, 16, 4096, 64);
    CHECK(mask_prefers_tall_tiles(&gpu, &p, 1.0), "dense 4096");
    CHECK(mask_prefers_tall_tiles(&gpu, &p, 0.5), "causal 4096");
    CHECK(!mask_prefers_tall_tiles(&gpu, &p, 0.1), "window 4096 stays 64x64");
    p = shape(8, 12, 1024, 64);
    CHECK(mask_prefers_tall_tiles(&gpu, &p, 1.0), "dense 1024: 768 CTAs");
    p = shape(8, 12, 512, 64);
    CHECK(!mask_prefers_tall_tiles(&gpu, &p, 1.0), "short rows");
    p = shape(1, 1, 4096, 64);
    CHECK(!mask_prefers_tall_tiles(&gpu, &p, 1.0), "32 CTAs do not fill two waves");
    p = shape(4, 16, 4096, 128);
    CHECK(!mask_prefers_tall_tiles(&gpu, &p, 1.0), "head dim 128 has no 32-row warps");
    p = shape(4, 16, 4096, 0);
    CHECK(!mask_prefers_tall_tiles(&gpu, &p, 1.0), "unknown head dim");
    p = shape(4, 16, 4096, 32);
    CHECK(mask_prefers_tall_tiles(&gpu, &p, 1.0), "head dim 32");
    stof_ctx cpu = gpu;
    cpu.device = STOF_DEVICE_CPU;
    p = shape(4, 16, 4096, 64);
    CHECK(!mask_prefers_tall_tiles(&cpu, &p, 1.0), "CPU contexts keep 64x64");
    CHECK(!mask_prefers_tall_tiles(NULL, &p, 1.0), "no context");
    return test_finish("test_mask_tile");
}
