/*
 * testlib.c — shared test helpers (see testlib.h).
 */
#include "testlib.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#if STOF_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

int test_passed, test_failed;

static uint64_t splitmix(uint64_t *x)
{
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

uint64_t test_seed(void)
{
    static uint64_t seed;
    static bool have;
    if (!have) {
        const char *s = getenv("STOF_TEST_SEED");
        if (s && *s) {
            seed = strtoull(s, NULL, 0);
        } else {
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            seed = (uint64_t)ts.tv_sec * 1000000007ull ^ (uint64_t)ts.tv_nsec;
        }
        have = true;
        fprintf(stderr, "test seed: STOF_TEST_SEED=%llu\n", (unsigned long long)seed);
    }
    return seed;
}

void test_rng_init(test_rng *r, uint64_t seed)
{
    uint64_t x = seed;
    for (int i = 0; i < 4; i++) r->s[i] = splitmix(&x);
}

static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

uint64_t test_rng_next(test_rng *r)
{
    uint64_t *s = r->s;
    uint64_t result = rotl(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return result;
}

int64_t test_rng_int(test_rng *r, int64_t lo, int64_t hi)
{
    uint64_t span = (uint64_t)(hi - lo) + 1;
    return lo + (int64_t)(test_rng_next(r) % span);
}

float test_rng_float(test_rng *r, float lo, float hi)
{
    double u = (double)(test_rng_next(r) >> 11) * (1.0 / 9007199254740992.0);
    return lo + (float)(u * (hi - lo));
}

void test_fill_uniform(test_rng *r, float *x, int64_t n, float lo, float hi)
{
    for (int64_t i = 0; i < n; i++) x[i] = test_rng_float(r, lo, hi);
}

void test_poison_f32(float *x, int64_t n)
{
    for (int64_t i = 0; i < n; i++) x[i] = NAN;
}

void test_poison_bytes(void *x, size_t bytes) { memset(x, 0xff, bytes); }

double test_rel_err(const float *out, const float *ref, int64_t n)
{
    double num = 0, den = 0;
    for (int64_t i = 0; i < n; i++) {
        if (isnan(out[i]) || isnan(ref[i])) return INFINITY;
        double d = (double)out[i] - (double)ref[i];
        num += d * d;
        den += (double)ref[i] * (double)ref[i];
    }
    if (den == 0) return num == 0 ? 0 : INFINITY;
    return sqrt(num / den);
}

double test_max_abs_diff(const float *out, const float *ref, int64_t n)
{
    double m = 0;
    for (int64_t i = 0; i < n; i++) {
        if (isnan(out[i]) || isnan(ref[i])) return INFINITY;
        double d = fabs((double)out[i] - (double)ref[i]);
        if (d > m) m = d;
    }
    return m;
}

bool test_have_gpu(void)
{
#if STOF_HAVE_CUDA
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        (void)cudaGetLastError();
        return false;
    }
    return n > 0;
#else
    return false; /* a CPU-only build */
#endif
}

void test_require_gpu(const char *test_name)
{
    if (!test_have_gpu()) {
        printf("%s: skipped: %s\n", test_name,
               STOF_HAVE_CUDA ? "no CUDA device" : "a CPU-only build (STOF_CUDA=OFF)");
        exit(TEST_SKIP_CODE);
    }
}

int test_finish(const char *name)
{
    printf("%s: %d passed, %d failed\n", name, test_passed, test_failed);
    return test_failed == 0 && test_passed > 0 ? 0 : 1;
}
