/*
 * tensor.c — tensor descriptors, their validation, and host conversions
 * between float and the 16-bit formats (round to nearest even).
 */
#include "core.h"

#include <math.h>
#include <string.h>

size_t stof_dtype_size(stof_dtype dtype)
{
    switch (dtype) {
    case STOF_F32: return 4;
    case STOF_F16: return 2;
    case STOF_BF16: return 2;
    case STOF_I32: return 4;
    case STOF_U8: return 1;
    case STOF_I64: return 8;
    }
    return 0;
}

const char *stof_dtype_name(stof_dtype dtype)
{
    switch (dtype) {
    case STOF_F32: return "f32";
    case STOF_F16: return "f16";
    case STOF_BF16: return "bf16";
    case STOF_I32: return "i32";
    case STOF_U8: return "u8";
    case STOF_I64: return "i64";
    }
    return "unknown";
}

stof_tensor stof_tensor_make(void *data, stof_dtype dtype, stof_memory memory, int ndim,
                             const int64_t *shape)
{
    stof_tensor t;
    memset(&t, 0, sizeof t);
    t.data = data;
    t.dtype = dtype;
    t.memory = memory;
    t.ndim = ndim;
    if (ndim < 1 || ndim > STOF_MAX_DIMS || !shape) return t; /* stof_tensor_check reports it */
    int64_t s = 1;
    for (int d = ndim - 1; d >= 0; d--) {
        t.shape[d] = shape[d];
        t.stride[d] = s;
        s *= shape[d] > 0 ? shape[d] : 1;
    }
    return t;
}

int64_t stof_tensor_numel(const stof_tensor *t)
{
    int64_t n = 1;
    for (int d = 0; d < t->ndim; d++) n *= t->shape[d];
    return n;
}

bool stof_tensor_is_contiguous(const stof_tensor *t)
{
    int64_t s = 1;
    for (int d = t->ndim - 1; d >= 0; d--) {
        if (t->shape[d] != 1 && t->stride[d] != s) return false;
        s *= t->shape[d];
    }
    return true;
}

stof_status stof_tensor_check(const stof_tensor *t, const char *name)
{
    STOF_REQUIRE(t, STOF_ERR_INVALID_ARG, "tensor %s is NULL", name);
    STOF_REQUIRE(t->data, STOF_ERR_INVALID_ARG, "tensor %s has NULL data", name);
    STOF_REQUIRE(stof_dtype_size(t->dtype) != 0, STOF_ERR_INVALID_ARG,
                 "tensor %s has unknown dtype %d", name, (int)t->dtype);
    STOF_REQUIRE(t->memory == STOF_MEM_HOST || t->memory == STOF_MEM_DEVICE,
                 STOF_ERR_INVALID_ARG, "tensor %s has unknown memory kind %d", name,
                 (int)t->memory);
    STOF_REQUIRE(t->ndim >= 1 && t->ndim <= STOF_MAX_DIMS, STOF_ERR_SHAPE,
                 "tensor %s has %d dimensions (1 to %d allowed)", name, t->ndim,
                 STOF_MAX_DIMS);
    for (int d = 0; d < t->ndim; d++) {
        STOF_REQUIRE(t->shape[d] >= 1, STOF_ERR_SHAPE, "tensor %s has shape[%d] = %lld (must be >= 1)",
                     name, d, (long long)t->shape[d]);
        STOF_REQUIRE(t->stride[d] >= 0, STOF_ERR_SHAPE,
                     "tensor %s has stride[%d] = %lld (must be >= 0)", name, d,
                     (long long)t->stride[d]);
    }
    return STOF_OK;
}

stof_status stof_tensor_check_memory(const stof_ctx *ctx, const stof_tensor *t, const char *name)
{
    stof_memory want = ctx->device == STOF_DEVICE_GPU ? STOF_MEM_DEVICE : STOF_MEM_HOST;
    STOF_REQUIRE(t->memory == want, STOF_ERR_INVALID_ARG,
                 "tensor %s is in %s memory but the context runs on the %s", name,
                 t->memory == STOF_MEM_DEVICE ? "device" : "host",
                 ctx->device == STOF_DEVICE_GPU ? "GPU" : "CPU");
    return STOF_OK;
}

static uint32_t f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static float bits_f32(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

uint16_t stof_f32_to_f16(float f)
{
    uint32_t x = f32_bits(f);
    uint32_t sign = (x >> 16) & 0x8000u;
    uint32_t exp = (x >> 23) & 0xffu;
    uint32_t man = x & 0x7fffffu;
    if (exp == 0xff) return (uint16_t)(sign | 0x7c00u | (man ? 0x200u | (man >> 13) : 0));
    int e = (int)exp - 127 + 15;
    if (e >= 31) return (uint16_t)(sign | 0x7c00u); /* overflow to inf */
    if (e <= 0) {
        /* subnormal or zero in half */
        if (e < -10) return (uint16_t)sign;
        man |= 0x800000u;
        uint32_t shift = (uint32_t)(14 - e);
        uint32_t h = man >> shift;
        uint32_t rem = man & ((1u << shift) - 1);
        uint32_t half = 1u << (shift - 1);
        if (rem > half || (rem == half && (h & 1u))) h++;
        return (uint16_t)(sign | h);
    }
    uint32_t h = ((uint32_t)e << 10) | (man >> 13);
    uint32_t rem = man & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) h++; /* may carry into exponent: correct */
    return (uint16_t)(sign | h);
}

float stof_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t man = h & 0x3ffu;
    if (exp == 0) {
        if (man == 0) return bits_f32(sign);
        float v = ldexpf((float)man, -24);
        return sign ? -v : v;
    }
    if (exp == 31) return bits_f32(sign | 0x7f800000u | (man << 13));
    return bits_f32(sign | ((exp - 15 + 127) << 23) | (man << 13));
}

uint16_t stof_f32_to_bf16(float f)
{
    uint32_t x = f32_bits(f);
    if ((x & 0x7f800000u) == 0x7f800000u && (x & 0x7fffffu)) return (uint16_t)((x >> 16) | 0x40u);
    uint32_t lsb = (x >> 16) & 1u;
    x += 0x7fffu + lsb;
    return (uint16_t)(x >> 16);
}

float stof_bf16_to_f32(uint16_t h) { return bits_f32((uint32_t)h << 16); }

float stof_load_f(const void *data, stof_dtype dtype, int64_t i)
{
    switch (dtype) {
    case STOF_F32: return ((const float *)data)[i];
    case STOF_F16: return stof_f16_to_f32(((const uint16_t *)data)[i]);
    case STOF_BF16: return stof_bf16_to_f32(((const uint16_t *)data)[i]);
    case STOF_I32: return (float)((const int32_t *)data)[i];
    case STOF_U8: return (float)((const uint8_t *)data)[i];
    case STOF_I64: return (float)((const int64_t *)data)[i];
    }
    return 0.0f;
}

void stof_store_f(void *data, stof_dtype dtype, int64_t i, float v)
{
    switch (dtype) {
    case STOF_F32: ((float *)data)[i] = v; break;
    case STOF_F16: ((uint16_t *)data)[i] = stof_f32_to_f16(v); break;
    case STOF_BF16: ((uint16_t *)data)[i] = stof_f32_to_bf16(v); break;
    case STOF_I32: ((int32_t *)data)[i] = (int32_t)v; break;
    case STOF_U8: ((uint8_t *)data)[i] = (uint8_t)v; break;
    case STOF_I64: ((int64_t *)data)[i] = (int64_t)v; break;
    }
}

stof_status stof_nonfinite_error(float v, int64_t i, const char *file, const char *tensor)
{
    return stof_error(STOF_ERR_FORMAT,
                      "%s: tensor '%s' holds %s at element %lld; a model's weights must be finite",
                      file, tensor, isnan(v) ? "NaN" : "an infinity", (long long)i);
}

stof_status stof_check_finite(const float *x, int64_t n, const char *file, const char *tensor)
{
    for (int64_t i = 0; i < n; i++)
        if (!isfinite(x[i])) return stof_nonfinite_error(x[i], i, file, tensor);
    return STOF_OK;
}
