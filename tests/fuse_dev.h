/*
 * fuse_dev.h — the device-side helpers of the fuse tests (test_fuse_dev.cu):
 * uploads and downloads in the test dtype, poisoning, and the relative error
 * against an fp32 reference on the device; and the GPU context with its
 * cuBLASLt workspace that the GEMM tests start from (fuse_test_open).
 */
#ifndef STOF_TESTS_FUSE_DEV_H
#define STOF_TESTS_FUSE_DEV_H

#include "fuse/fuse.h"
#include "stof.h"
#include "testlib.h"

#include <cuda_runtime_api.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

double fuse_test_rel_err(const void *out, stof_dtype dtype, const float *ref, int64_t n,
                         int64_t cols);
const char *fuse_test_rel_err_detail(void);
void *fuse_test_alloc(size_t bytes);
void fuse_test_fill(void *dev, int byte, size_t bytes);
void fuse_test_poison(void *dev, size_t bytes);
void fuse_test_put_bytes(void *dev, const void *host, size_t bytes);
void fuse_test_copy(void *dst, const void *src, size_t bytes);
void fuse_test_put(void *dev, const float *host, int64_t n, stof_dtype dtype);
void *fuse_test_upload(const float *host, int64_t n, stof_dtype dtype);
void fuse_test_get(float *host, const void *dev, int64_t n, stof_dtype dtype);
float *fuse_test_host(int64_t n);
float *fuse_test_grid(test_rng *r, int64_t n, float lo, float hi);

/* The bound on ||out - ref|| / ||ref|| of a 16-bit output. */
static inline double fuse_test_tolerance(stof_dtype dt)
{
    return dt == STOF_BF16 ? 1e-2 : 5e-3;
}

/* Checks that the call returned STOF_OK and that its output y is within tol
 * (0: fuse_test_tolerance) of the fp32 reference ref_dev on the device;
 * returns the error, or -1 where the call failed. */
static inline double fuse_test_expect_close(const char *label, stof_status st, const void *y,
                                            stof_dtype dt, const float *ref_dev, int64_t n,
                                            int64_t cols, double tol)
{
    CHECK(st == STOF_OK, "%s: %s: %s", label, stof_status_str(st), stof_last_error());
    if (st != STOF_OK) return -1.0;
    if (tol <= 0.0) tol = fuse_test_tolerance(dt);
    const double e = fuse_test_rel_err(y, dt, ref_dev, n, cols);
    CHECK(e <= tol, "%s: rel err %.3g > %.1g%s", label, e, tol, fuse_test_rel_err_detail());
    return e;
}

/* The same against a reference on the host. */
static inline void fuse_test_expect_close_host(const char *label, stof_status st, const void *y,
                                               stof_dtype dt, const float *ref_host, int64_t n,
                                               int64_t cols, double tol)
{
    float *ref_dev = fuse_test_upload(ref_host, n, STOF_F32);
    fuse_test_expect_close(label, st, y, dt, ref_dev, n, cols, tol);
    cudaFree(ref_dev);
}

/* y = x w^T + bias over m x n outputs, k inputs; the epilogue is the caller's. */
static inline fuse_linear_args fuse_test_linear_args(stof_dtype dt, int64_t m, int n, int k,
                                                     const void *x, const void *w, const void *bias,
                                                     void *y)
{
    fuse_linear_args a;
    memset(&a, 0, sizeof a);
    a.dtype = dt;
    a.m = m;
    a.n = n;
    a.k = k;
    a.x = x;
    a.w = w;
    a.bias = bias;
    a.y = y;
    return a;
}

/* The RoPE table of inv (host, rot_dim / 2 frequencies) over positions
 * positions, built into a block poisoned first; *cs the block to free. */
static inline fuse_rope_table fuse_test_rope_table(stof_ctx *ctx, const float *inv, int rot_dim,
                                                   int positions, float **cs)
{
    fuse_rope_table t;
    memset(&t, 0, sizeof t);
    *cs = (float *)fuse_test_alloc(fuse_rope_table_bytes(positions, rot_dim));
    fuse_test_poison(*cs, fuse_rope_table_bytes(positions, rot_dim));
    CHECK_OK(fuse_rope_table_build(ctx, inv, rot_dim, positions, *cs, &t));
    return t;
}

/* The test's GPU context and the cuBLASLt workspace in *ws; NULL where the
 * context could not be made (the check counted it). Exits 77 without a GPU. */
static inline stof_ctx *fuse_test_open(const char *name, fuse_ws *ws)
{
    test_require_gpu(name);
    stof_ctx_params p = stof_ctx_default_params();
    p.device = STOF_DEVICE_GPU;
    stof_ctx *ctx = NULL;
    CHECK_OK(stof_ctx_create(&p, &ctx));
    if (!ctx) return NULL;
    void *ws_ptr = NULL;
    CHECK_OK(stof_ctx_workspace(ctx, FUSE_LT_WORKSPACE_BYTES, &ws_ptr));
    ws->ptr = ws_ptr;
    ws->bytes = FUSE_LT_WORKSPACE_BYTES;
    return ctx;
}

#endif /* STOF_TESTS_FUSE_DEV_H */
