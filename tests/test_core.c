/*
 * test_core.c — status strings, error messages, contexts, tensor checks and
 * the host half/bfloat16 conversions.
 */
#include "core/core.h"
#include "testlib.h"

#include <math.h>
#include <string.h>

static void test_halves(void)
{
    /* Every finite f16 value round-trips exactly through float. */
    int bad = 0;
    for (uint32_t h = 0; h < 0x10000u; h++) {
        if ((h & 0x7c00u) == 0x7c00u) continue;
        float f = stof_f16_to_f32((uint16_t)h);
        if (stof_f32_to_f16(f) != (uint16_t)h) bad++;
    }
    CHECK(bad == 0, "%d f16 values do not round-trip", bad);
    CHECK(stof_f32_to_f16(65504.0f) == 0x7bff, "max half");
    CHECK(stof_f32_to_f16(1e6f) == 0x7c00, "overflow to inf");
    CHECK(stof_f32_to_f16(1.0f + 1.0f / 2048) == 0x3c00, "tie rounds to even");
    CHECK(stof_f32_to_f16(1.0f + 3.0f / 2048) == 0x3c02, "tie rounds to even (up)");
    CHECK(isnan(stof_f16_to_f32(stof_f32_to_f16(NAN))), "NaN preserved");
    CHECK(stof_f16_to_f32(0x0001) == ldexpf(1.0f, -24), "smallest subnormal");
    CHECK(stof_bf16_to_f32(stof_f32_to_bf16(1.5f)) == 1.5f, "bf16 exact");
    CHECK(stof_f32_to_bf16(1.0f + 1.0f / 256) == 0x3f80, "bf16 tie to even");
    CHECK(isnan(stof_bf16_to_f32(stof_f32_to_bf16(NAN))), "bf16 NaN preserved");
    test_rng r;
    test_rng_init(&r, test_seed());
    double worst = 0;
    for (int i = 0; i < 100000; i++) {
        float f = test_rng_float(&r, -100.0f, 100.0f);
        double e = fabs(stof_f16_to_f32(stof_f32_to_f16(f)) - f) / fmax(fabs(f), 1e-3);
        if (e > worst) worst = e;
    }
    CHECK(worst <= 1.0 / 2048 + 1e-9, "f16 relative rounding error %g", worst);
}

static void test_errors_and_ctx(void)
{
    CHECK(strcmp(stof_status_str(STOF_ERR_SHAPE), "STOF_ERR_SHAPE") == 0, "status name");
    CHECK(strcmp(stof_version(), "0.1.0") == 0, "version %s", stof_version());
    CHECK_STATUS(stof_ctx_create(NULL, NULL), STOF_ERR_INVALID_ARG);
    stof_ctx_params p = stof_ctx_default_params();
    p.device = (stof_device)42;
    stof_ctx *ctx = NULL;
    CHECK_STATUS(stof_ctx_create(&p, &ctx), STOF_ERR_INVALID_ARG);
    CHECK(ctx == NULL, "no ctx on failure");
    p = stof_ctx_default_params();
    p.device = STOF_DEVICE_CPU;
    CHECK_OK(stof_ctx_create(&p, &ctx));
    CHECK(ctx && stof_ctx_device(ctx) == STOF_DEVICE_CPU, "cpu ctx");
    CHECK_STATUS(stof_ctx_set_stream(ctx, NULL), STOF_ERR_INVALID_ARG);
    CHECK_OK(stof_ctx_synchronize(ctx));
    float buf[6];
    int64_t shape[2] = {2, 3};
    stof_tensor t = stof_tensor_make(buf, STOF_F32, STOF_MEM_DEVICE, 2, shape);
    CHECK_OK(stof_tensor_check(&t, "x"));
    CHECK(stof_tensor_is_contiguous(&t) && stof_tensor_numel(&t) == 6, "contiguous 2x3");
    CHECK_STATUS(stof_tensor_check_memory(ctx, &t, "x"), STOF_ERR_INVALID_ARG);
    CHECK(strstr(stof_last_error(), "device memory") != NULL, "message names memory: %s",
          stof_last_error());
    t.shape[1] = 0;
    CHECK_STATUS(stof_tensor_check(&t, "x"), STOF_ERR_SHAPE);
    CHECK(strstr(stof_last_error(), "shape[1] = 0") != NULL, "message names value: %s",
          stof_last_error());
    t.shape[1] = 3;
    t.data = NULL;
    CHECK_STATUS(stof_tensor_check(&t, "x"), STOF_ERR_INVALID_ARG);
    CHECK_STATUS(stof_tensor_check(NULL, "x"), STOF_ERR_INVALID_ARG);
    stof_ctx_destroy(ctx);
    stof_ctx_destroy(NULL);
    p.device = STOF_DEVICE_GPU;
    if (!test_have_gpu()) {
        CHECK_STATUS(stof_ctx_create(&p, &ctx), STOF_ERR_NO_DEVICE);
    } else {
        CHECK_OK(stof_ctx_create(&p, &ctx));
        CHECK(ctx && stof_ctx_device(ctx) == STOF_DEVICE_GPU, "gpu ctx");
        stof_ctx_destroy(ctx);
    }
}

int main(void)
{
    test_halves();
    test_errors_and_ctx();
    return test_finish("test_core");
}
