/*
 * test_fuse_dev.cu — device-side helpers for the fuse tests: uploads in the
 * test dtype, poisoning (0xff bytes: NaN in f16, bf16 and f32), downloads,
 * and the relative error ||out - ref|| / ||ref|| computed on the GPU against
 * an fp32 reference already on the device, so that comparing a 16384 x 4096
 * output costs milliseconds instead of a host round trip. Any non-finite
 * output value makes the error infinite, and fuse_test_rel_err_detail() then
 * says where the first one is and what it holds. Also the host inputs the
 * tests share: fuse_test_grid's values, which both 16-bit types hold.
 *
 * The non-obvious choice: every helper returns only once its device work is
 * complete. The operators under test run on the ctx's stream, which is
 * created non-blocking, so it is NOT ordered after work on the legacy default
 * stream; a cudaMemset or a device-to-device cudaMemcpy returns before it is
 * done (and a pageable host-to-device copy may too). A poison fill still
 * running when the kernel starts overwrites finished output with NaN.
 */
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "testlib.h"

/* Wait for all device work; a device error here is fatal for the test run. */
static void finish_or_die(const char *what)
{
    cudaError_t e = cudaDeviceSynchronize();
    if (e != cudaSuccess) {
        fprintf(stderr, "%s: device error: %s\n", what, cudaGetErrorString(e));
        exit(1);
    }
}

static __device__ __forceinline__ float to_f(__half v)
{
    return __half2float(v);
}
static __device__ __forceinline__ float to_f(__nv_bfloat16 v)
{
    return __bfloat162float(v);
}
static __device__ __forceinline__ float to_f(float v)
{
    return v;
}

/* Device results of one comparison. first_* start at all-ones (no index). */
struct err_stats {
    double num, den;
    unsigned long long first_bad_out, first_bad_ref;
    unsigned long long bad_out, bad_ref;
};

template <typename T>
__global__ void rel_err_kernel(const T *out, const float *ref, int64_t n, err_stats *st)
{
    __shared__ double s_num[256], s_den[256];
    double num = 0, den = 0;
    /* a thread walks increasing indices, so its first hit is its smallest */
    unsigned long long first_out = ~0ull, first_ref = ~0ull, bad_out = 0, bad_ref = 0;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        float o = to_f(out[i]), r = ref[i];
        if (!isfinite(o)) {
            if (!bad_out) first_out = (unsigned long long)i;
            bad_out++;
        }
        if (!isfinite(r)) {
            if (!bad_ref) first_ref = (unsigned long long)i;
            bad_ref++;
        }
        double d = (double)o - (double)r;
        num += d * d;
        den += (double)r * (double)r;
    }
    if (bad_out) {
        atomicMin(&st->first_bad_out, first_out);
        atomicAdd(&st->bad_out, bad_out);
    }
    if (bad_ref) {
        atomicMin(&st->first_bad_ref, first_ref);
        atomicAdd(&st->bad_ref, bad_ref);
    }
    s_num[threadIdx.x] = num;
    s_den[threadIdx.x] = den;
    __syncthreads();
    for (int s = 128; s > 0; s >>= 1) {
        if ((int)threadIdx.x < s) {
            s_num[threadIdx.x] += s_num[threadIdx.x + s];
            s_den[threadIdx.x] += s_den[threadIdx.x + s];
        }
        __syncthreads();
    }
    if (threadIdx.x == 0) {
        atomicAdd(&st->num, s_num[0]);
        atomicAdd(&st->den, s_den[0]);
    }
}

static char rel_err_detail[512];

extern "C" const char *fuse_test_rel_err_detail(void)
{
    return rel_err_detail;
}

/* Raw bits of element i of a device array of dtype (f16, bf16 or f32). */
static unsigned element_bits(const void *dev, stof_dtype dtype, int64_t i)
{
    size_t es = stof_dtype_size(dtype);
    unsigned char b[4] = {0, 0, 0, 0};
    if (cudaMemcpy(b, (const unsigned char *)dev + (size_t)i * es, es, cudaMemcpyDeviceToHost) !=
        cudaSuccess)
        return 0;
    unsigned v = 0;
    for (size_t j = es; j-- > 0;)
        v = v << 8 | b[j]; /* little-endian */
    return v;
}

/* "; 12 of 50331648 outputs are not finite, first at index 4096 (row 1, col 1024):
 *  bits 0xffff (the poison fill ...), reference 0.25" */
static void describe_bad(const void *out, stof_dtype dtype, const float *ref, int64_t n,
                         int64_t cols, const err_stats *h)
{
    size_t len = 0;
    rel_err_detail[0] = '\0';
    if (h->bad_out) {
        int64_t i = (int64_t)h->first_bad_out;
        unsigned bits = element_bits(out, dtype, i);
        unsigned poison = dtype == STOF_F32 ? 0xffffffffu : 0xffffu;
        float r = NAN;
        cudaMemcpy(&r, ref + i, sizeof r, cudaMemcpyDeviceToHost);
        len += (size_t)snprintf(
            rel_err_detail + len, sizeof rel_err_detail - len,
            "; %llu of %lld outputs are not finite, first at index %lld (row %lld, col %lld): "
            "bits 0x%0*x%s, reference %g",
            h->bad_out, (long long)n, (long long)i, (long long)(i / cols), (long long)(i % cols),
            dtype == STOF_F32 ? 8 : 4, bits,
            bits == poison ? " (the poison fill: never written, or the fill landed after the run)"
                           : " (computed)",
            (double)r);
    }
    if (h->bad_ref && len < sizeof rel_err_detail) {
        int64_t i = (int64_t)h->first_bad_ref;
        snprintf(rel_err_detail + len, sizeof rel_err_detail - len,
                 "; %llu reference values are not finite, first at index %lld (row %lld, col "
                 "%lld)",
                 h->bad_ref, (long long)i, (long long)(i / cols), (long long)(i % cols));
    }
}

/*
 * ||out - ref|| / ||ref|| over n values (rows of cols values, for the report);
 * +inf when any value is not finite, the reference is all zero or the device
 * failed, with the reason in fuse_test_rel_err_detail().
 */
extern "C" double fuse_test_rel_err(const void *out, stof_dtype dtype, const float *ref, int64_t n,
                                    int64_t cols)
{
    rel_err_detail[0] = '\0';
    if (cols < 1) cols = n > 0 ? n : 1;
    cudaError_t e = cudaDeviceSynchronize();
    if (e != cudaSuccess) {
        snprintf(rel_err_detail, sizeof rel_err_detail, "; device error before comparing: %s",
                 cudaGetErrorString(e));
        return INFINITY;
    }
    err_stats *st = NULL;
    if (cudaMalloc(&st, sizeof *st) != cudaSuccess) {
        snprintf(rel_err_detail, sizeof rel_err_detail, "; cudaMalloc for the comparison failed");
        return INFINITY;
    }
    err_stats init;
    memset(&init, 0, sizeof init);
    init.first_bad_out = init.first_bad_ref = ~0ull;
    cudaMemcpy(st, &init, sizeof init, cudaMemcpyHostToDevice);
    int64_t blocks = (n + 255) / 256;
    if (blocks > 2048) blocks = 2048;
    if (blocks < 1) blocks = 1;
    if (dtype == STOF_F16)
        rel_err_kernel<<<(unsigned)blocks, 256>>>((const __half *)out, ref, n, st);
    else if (dtype == STOF_BF16)
        rel_err_kernel<<<(unsigned)blocks, 256>>>((const __nv_bfloat16 *)out, ref, n, st);
    else
        rel_err_kernel<<<(unsigned)blocks, 256>>>((const float *)out, ref, n, st);
    err_stats h;
    memset(&h, 0, sizeof h);
    e = cudaGetLastError();
    if (e == cudaSuccess) e = cudaMemcpy(&h, st, sizeof h, cudaMemcpyDeviceToHost);
    cudaFree(st);
    if (e != cudaSuccess) {
        snprintf(rel_err_detail, sizeof rel_err_detail, "; comparison failed: %s",
                 cudaGetErrorString(e));
        return INFINITY;
    }
    if (h.bad_out || h.bad_ref) {
        describe_bad(out, dtype, ref, n, cols, &h);
        return INFINITY;
    }
    if (!(h.den > 0)) {
        snprintf(rel_err_detail, sizeof rel_err_detail, "; the reference is all zero");
        return INFINITY;
    }
    return sqrt(h.num / h.den);
}

extern "C" void *fuse_test_alloc(size_t bytes)
{
    void *p = NULL;
    if (cudaMalloc(&p, bytes ? bytes : 16) != cudaSuccess) {
        fprintf(stderr, "fuse_test_alloc: cudaMalloc(%zu) failed\n", bytes);
        exit(1);
    }
    return p;
}

/* bytes of dev set to byte, complete on return (see the top of the file). */
extern "C" void fuse_test_fill(void *dev, int byte, size_t bytes)
{
    finish_or_die("fuse_test_fill"); /* earlier work on any stream may still write dev */
    if (cudaMemset(dev, byte, bytes) != cudaSuccess) {
        fprintf(stderr, "fuse_test_fill: cudaMemset(%zu bytes) failed\n", bytes);
        exit(1);
    }
    finish_or_die("fuse_test_fill");
}

extern "C" void fuse_test_poison(void *dev, size_t bytes)
{
    fuse_test_fill(dev, 0xff, bytes);
}

/* Raw copies, complete on return: host -> device and device -> device. */
extern "C" void fuse_test_put_bytes(void *dev, const void *host, size_t bytes)
{
    finish_or_die("fuse_test_put_bytes");
    if (bytes && cudaMemcpy(dev, host, bytes, cudaMemcpyHostToDevice) != cudaSuccess) {
        fprintf(stderr, "fuse_test_put_bytes: copy of %zu bytes failed\n", bytes);
        exit(1);
    }
    finish_or_die("fuse_test_put_bytes");
}

extern "C" void fuse_test_copy(void *dst, const void *src, size_t bytes)
{
    finish_or_die("fuse_test_copy");
    if (bytes && cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToDevice) != cudaSuccess) {
        fprintf(stderr, "fuse_test_copy: copy of %zu bytes failed\n", bytes);
        exit(1);
    }
    finish_or_die("fuse_test_copy");
}

/* Copy n host floats to device memory as dtype (F32, F16 or BF16). */
extern "C" void fuse_test_put(void *dev, const float *host, int64_t n, stof_dtype dtype)
{
    size_t es = stof_dtype_size(dtype);
    void *tmp = malloc((size_t)n * es + 1);
    if (!tmp) exit(1);
    for (int64_t i = 0; i < n; i++)
        stof_store_f(tmp, dtype, i, host[i]);
    fuse_test_put_bytes(dev, tmp, (size_t)n * es);
    free(tmp);
}

extern "C" void *fuse_test_upload(const float *host, int64_t n, stof_dtype dtype)
{
    void *dev = fuse_test_alloc((size_t)n * stof_dtype_size(dtype));
    fuse_test_put(dev, host, n, dtype);
    return dev;
}

/* Copy n device values of dtype to host floats. */
extern "C" void fuse_test_get(float *host, const void *dev, int64_t n, stof_dtype dtype)
{
    size_t es = stof_dtype_size(dtype);
    void *tmp = malloc((size_t)n * es + 1);
    if (!tmp) exit(1);
    finish_or_die("fuse_test_get");
    if (cudaMemcpy(tmp, dev, (size_t)n * es, cudaMemcpyDeviceToHost) != cudaSuccess) {
        fprintf(stderr, "fuse_test_get: copy failed\n");
        exit(1);
    }
    for (int64_t i = 0; i < n; i++)
        host[i] = stof_load_f(tmp, dtype, i);
    free(tmp);
}

/* n host floats (at least one); out of memory ends the test run. */
extern "C" float *fuse_test_host(int64_t n)
{
    float *p = (float *)malloc((size_t)(n > 0 ? n : 1) * sizeof(float));
    if (!p) {
        fprintf(stderr, "fuse_test_host: out of host memory (%lld floats)\n", (long long)n);
        exit(1);
    }
    return p;
}

/* n values uniform in [lo, hi) rounded to bf16, so that f16 holds them
 * exactly too and one fp32 reference serves both dtypes; magnitudes below
 * 2^-8 move to +-2^-8 (bf16 and f16 share no finer grid there). */
extern "C" float *fuse_test_grid(test_rng *r, int64_t n, float lo, float hi)
{
    float *p = fuse_test_host(n);
    for (int64_t i = 0; i < n; i++) {
        float v = stof_bf16_to_f32(stof_f32_to_bf16(test_rng_float(r, lo, hi)));
        if (fabsf(v) < 1.0f / 256) v = v < 0 ? -1.0f / 256 : 1.0f / 256;
        p[i] = v;
    }
    return p;
}
