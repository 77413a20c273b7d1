/*
 * testlib.h — what every stof test shares: a seeded RNG for fresh random
 * inputs, output poisoning, the relative-error metric
 * (||out - ref|| / ||ref||), checks that count failures instead of
 * stopping, and the GPU-skip convention (exit 77 = skipped in ctest).
 */
#ifndef STOF_TESTLIB_H
#define STOF_TESTLIB_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "stof.h"

#ifdef __cplusplus
extern "C" {
#endif

#define TEST_SKIP_CODE 77

/* xoshiro-style generator; the seed comes from STOF_TEST_SEED or the clock and
 * is printed so a failure can be replayed. */
typedef struct test_rng {
    uint64_t s[4];
} test_rng;

uint64_t test_seed(void);
void test_rng_init(test_rng *r, uint64_t seed);
uint64_t test_rng_next(test_rng *r);
/* Uniform integer in [lo, hi]. */
int64_t test_rng_int(test_rng *r, int64_t lo, int64_t hi);
/* Uniform float in [lo, hi). */
float test_rng_float(test_rng *r, float lo, float hi);
void test_fill_uniform(test_rng *r, float *x, int64_t n, float lo, float hi);

/* Poison value for float outputs (NaN) and the 16-bit pattern 0x7e00/0x7fc0. */
void test_poison_f32(float *x, int64_t n);
void test_poison_bytes(void *x, size_t bytes);

/* ||out - ref||_2 / ||ref||_2, NaN-propagating (any NaN gives +inf). */
double test_rel_err(const float *out, const float *ref, int64_t n);
double test_max_abs_diff(const float *out, const float *ref, int64_t n);

/* True when a CUDA device is usable. test_require_gpu() prints why and exits 77 otherwise. */
bool test_have_gpu(void);
void test_require_gpu(const char *test_name);

/* Counting checks: a failure is printed and counted; test_finish prints
 * "N passed, N failed" and returns the process exit code. */
extern int test_passed, test_failed;
#define CHECK(cond, ...)                                                                   \
    do {                                                                                   \
        if (cond) {                                                                        \
            test_passed++;                                                                 \
        } else {                                                                           \
            test_failed++;                                                                 \
            fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond);                \
            fprintf(stderr, __VA_ARGS__);                                                  \
            fputc('\n', stderr);                                                           \
        }                                                                                  \
    } while (0)
/* A stof call that must succeed; the message carries stof_last_error(). */
#define CHECK_OK(call)                                                                     \
    do {                                                                                   \
        stof_status check_st_ = (call);                                                    \
        CHECK(check_st_ == STOF_OK, "%s -> %s: %s", #call, stof_status_str(check_st_),      \
              stof_last_error());                                                          \
    } while (0)
/* A stof call that must fail with status and leave a non-empty message. */
#define CHECK_STATUS(call, status)                                                         \
    do {                                                                                   \
        stof_status check_st_ = (call);                                                    \
        CHECK(check_st_ == (status) && stof_last_error()[0] != '\0',                        \
              "%s -> %s (want %s), message \"%s\"", #call, stof_status_str(check_st_),     \
              stof_status_str(status), stof_last_error());                                 \
    } while (0)
int test_finish(const char *name);

#ifdef __cplusplus
}
#endif

#endif /* STOF_TESTLIB_H */
