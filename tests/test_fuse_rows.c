/*
 * test_fuse_rows.c — the row kernels against the CPU reference: bias +
 * activation, add + LayerNorm and bias + residual + LayerNorm (every width
 * class: one warp per row up to 1024, a CTA per row up to 8192, plus widths
 * that leave lanes idle), fused embeddings, cu_seqlens, pack / unpack /
 * positions (with device-side lengths that lie), and mean pooling, in f16 and
 * bf16. Inputs lie on the grid f16 and bf16 share; outputs are poisoned first.
 * Fills and uploads go through the device helpers, which finish before they
 * return: the ctx's stream is non-blocking, so it would not wait for them.
 */
#include "cpu/cpu_ref.h"
#include "fuse/fuse.h"
#include "fuse_dev.h"
#include "testlib.h"

#include <cuda_runtime_api.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define EPS 1e-5f

static const stof_dtype dtypes[] = {STOF_F16, STOF_BF16};

static float *host_alloc(int64_t n)
{
    float *p = malloc((size_t)(n > 0 ? n : 1) * sizeof(float));
    if (!p) exit(1);
    return p;
}

static float grid_value(test_rng *r, float lo, float hi)
{
    float v = stof_bf16_to_f32(stof_f32_to_bf16(test_rng_float(r, lo, hi)));
    const float floor_mag = 1.0f / 256;
    if (fabsf(v) < floor_mag) v = v < 0 ? -floor_mag : floor_mag;
    return v;
}

static float *grid_array(test_rng *r, int64_t n, float lo, float hi)
{
    float *p = host_alloc(n);
    for (int64_t i = 0; i < n; i++)
        p[i] = grid_value(r, lo, hi);
    return p;
}

/* y [n / cols, cols] against the host reference. */
static void bias_act_case(stof_ctx *ctx, test_rng *r, int64_t m, int n, stof_act act, stof_dtype dt,
                          bool with_bias, bool in_place)
{
    float *x = grid_array(r, m * n, -3.f, 3.f);
    float *b = grid_array(r, n, -1.f, 1.f);
    /* ReLU of the 8 values of m=1 n=8 is all zero once in 256 draws, and
     * the comparison refuses an all-zero reference: one value stays above 0 */
    x[0] = 2.f;
    float *ref = host_alloc(m * n);
    for (int64_t i = 0; i < m * n; i++)
        ref[i] = x[i] + (with_bias ? b[i % n] : 0);
    cpu_activation(ref, m * n, (stof_act)act);
    void *dx = fuse_test_upload(x, m * n, dt);
    void *db = fuse_test_upload(b, n, dt);
    void *dy = in_place ? dx : fuse_test_alloc((size_t)m * n * 2);
    if (!in_place) fuse_test_poison(dy, (size_t)m * n * 2);
    char label[160];
    snprintf(label, sizeof label, "bias_act m=%lld n=%d %s %s%s%s", (long long)m, n,
             fuse_act_name(act), stof_dtype_name(dt), with_bias ? " bias" : "",
             in_place ? " in-place" : "");
    fuse_test_expect_close_host(label,
                                fuse_bias_act(ctx, dt, m, n, dx, with_bias ? db : NULL, act, dy),
                                dy, dt, ref, m * n, n, fuse_test_tolerance(dt));
    if (!in_place) cudaFree(dy);
    cudaFree(dx);
    cudaFree(db);
    free(x);
    free(b);
    free(ref);
}

static void test_bias_act(stof_ctx *ctx, test_rng *r)
{
    const int64_t ms[] = {1, 7, 1000};
    const int ns[] = {8, 200, 384, 3072};
    const stof_act acts[] = {ACT_NONE, ACT_GELU, ACT_GELU_TANH, ACT_RELU, ACT_SILU};
    for (size_t mi = 0; mi < 3; mi++)
        for (size_t ni = 0; ni < 4; ni++)
            for (size_t ai = 0; ai < 4; ai++)
                for (int di = 0; di < 2; di++)
                    bias_act_case(ctx, r, ms[mi], ns[ni], acts[ai], dtypes[di], (ai + mi) % 2 == 0,
                                  (ai + ni) % 2 == 0);
    /* 1.5M vectors: four per thread of a full grid on a GPU of 180 SMs (2048
     * threads each), more on smaller ones, so each thread takes several steps
     * and its bias column wraps (375 vectors per row do not divide the
     * grid's stride) */
    for (int di = 0; di < 2; di++)
        bias_act_case(ctx, r, 4001, 3000, ACT_GELU, dtypes[di], true, di == 1);
}

/* Widths chosen to hit every (threads per row, vectors per thread) kernel. */
static void test_layernorm(stof_ctx *ctx, test_rng *r)
{
    const int widths[] = {8, 64, 200, 384, 768, 1024, 1032, 2048, 4096, 6144, 8192};
    const int64_t rows_list[] = {1, 7, 1000};
    for (size_t wi = 0; wi < sizeof widths / sizeof widths[0]; wi++)
        for (size_t ri = 0; ri < 3; ri++)
            for (int di = 0; di < 2; di++)
                for (int variant = 0; variant < 3; variant++) {
                    /* 0: add_layernorm without residual, y fresh; 1: with residual, y == x;
                     * 2: bias + residual, y == residual */
                    int cols = widths[wi];
                    int64_t rows = rows_list[ri];
                    stof_dtype dt = dtypes[di];
                    int64_t n = rows * cols;
                    float *x = grid_array(r, n, -2.f, 2.f);
                    float *res = grid_array(r, n, -1.f, 1.f);
                    float *b = grid_array(r, cols, -1.f, 1.f);
                    float *g = grid_array(r, cols, 0.5f, 1.5f);
                    float *be = grid_array(r, cols, -0.5f, 0.5f);
                    float *ref = host_alloc(n);
                    if (variant == 2) {
                        float *xb = host_alloc(n);
                        for (int64_t i = 0; i < n; i++)
                            xb[i] = x[i] + b[i % cols];
                        cpu_layernorm(xb, res, g, be, ref, rows, cols, EPS);
                        free(xb);
                    } else {
                        cpu_layernorm(x, variant ? res : NULL, g, be, ref, rows, cols, EPS);
                    }
                    void *dx = fuse_test_upload(x, n, dt), *dres = fuse_test_upload(res, n, dt);
                    void *db = fuse_test_upload(b, cols, dt), *dg = fuse_test_upload(g, cols, dt);
                    void *dbe = fuse_test_upload(be, cols, dt);
                    void *dy = variant == 0   ? fuse_test_alloc((size_t)n * 2)
                               : variant == 1 ? dx
                                              : dres;
                    if (variant == 0) fuse_test_poison(dy, (size_t)n * 2);
                    stof_status st =
                        variant == 2 ? fuse_bias_residual_layernorm(ctx, dt, rows, cols, dx, db,
                                                                    dres, dg, dbe, EPS, dy)
                                     : fuse_add_layernorm(ctx, dt, rows, cols, dx,
                                                          variant ? dres : NULL, dg, dbe, EPS, dy);
                    char label[160];
                    snprintf(label, sizeof label, "layernorm rows=%lld cols=%d %s variant %d",
                             (long long)rows, cols, stof_dtype_name(dt), variant);
                    fuse_test_expect_close_host(label, st, dy, dt, ref, n, cols,
                                                fuse_test_tolerance(dt));
                    if (variant == 0) cudaFree(dy);
                    void *ptrs[] = {dx, dres, db, dg, dbe};
                    for (int i = 0; i < 5; i++)
                        cudaFree(ptrs[i]);
                    float *hs[] = {x, res, b, g, be, ref};
                    for (int i = 0; i < 6; i++)
                        free(hs[i]);
                }
}

static int32_t *dev_i32(const int32_t *host, int64_t n)
{
    int32_t *d = fuse_test_alloc((size_t)(n > 0 ? n : 1) * 4);
    fuse_test_put_bytes(d, host, (size_t)n * 4);
    return d;
}

static void test_embeddings(stof_ctx *ctx, test_rng *r)
{
    const int hiddens[] = {384, 768, 1024, 2048};
    const int64_t tokens_list[] = {1, 7, 1000};
    const int vocab = 1000, max_pos = 512, type_vocab = 2;
    for (size_t hi = 0; hi < 4; hi++)
        for (size_t ti = 0; ti < 3; ti++)
            for (int di = 0; di < 2; di++) {
                int H = hiddens[hi];
                int64_t T = tokens_list[ti];
                stof_dtype dt = dtypes[di];
                bool with_types = (hi + ti) % 2 == 0;
                float *word = grid_array(r, (int64_t)vocab * H, -1.f, 1.f);
                float *pos = grid_array(r, (int64_t)max_pos * H, -1.f, 1.f);
                float *typ = grid_array(r, (int64_t)type_vocab * H, -1.f, 1.f);
                float *g = grid_array(r, H, 0.5f, 1.5f), *be = grid_array(r, H, -0.5f, 0.5f);
                int32_t *ids = malloc((size_t)T * 4), *ps = malloc((size_t)T * 4),
                        *ts = malloc((size_t)T * 4);
                for (int64_t t = 0; t < T; t++) {
                    ids[t] = (int32_t)test_rng_int(r, 0, vocab - 1);
                    ps[t] = (int32_t)test_rng_int(r, 0, max_pos - 1);
                    ts[t] = with_types ? (int32_t)test_rng_int(r, 0, type_vocab - 1) : 0;
                }
                float *ref = host_alloc(T * H);
                cpu_embeddings(ids, ps, with_types ? ts : NULL, T, word, pos, typ, g, be, H, EPS,
                               ref);
                fuse_embed_tables tb;
                tb.word = fuse_test_upload(word, (int64_t)vocab * H, dt);
                tb.position = fuse_test_upload(pos, (int64_t)max_pos * H, dt);
                tb.type = fuse_test_upload(typ, (int64_t)type_vocab * H, dt);
                tb.gamma = fuse_test_upload(g, H, dt);
                tb.beta = fuse_test_upload(be, H, dt);
                tb.vocab = vocab;
                tb.max_pos = max_pos;
                tb.type_vocab = type_vocab;
                tb.hidden = H;
                tb.eps = EPS;
                int32_t *dids = dev_i32(ids, T), *dps = dev_i32(ps, T), *dts = dev_i32(ts, T);
                void *out = fuse_test_alloc((size_t)T * H * 2);
                fuse_test_poison(out, (size_t)T * H * 2);
                char label[160];
                snprintf(label, sizeof label, "embeddings T=%lld H=%d %s%s", (long long)T, H,
                         stof_dtype_name(dt), with_types ? " types" : "");
                fuse_test_expect_close_host(
                    label,
                    fuse_embeddings(ctx, dt, &tb, dids, dps, with_types ? dts : NULL, T, out), out,
                    dt, ref, T * H, H, fuse_test_tolerance(dt));
                if (T == 7) {
                    /* a bad id gives a NaN row and leaves the others right */
                    ids[3] = vocab;
                    fuse_test_put_bytes(dids, ids, (size_t)T * 4);
                    fuse_test_poison(out, (size_t)T * H * 2);
                    CHECK_OK(
                        fuse_embeddings(ctx, dt, &tb, dids, dps, with_types ? dts : NULL, T, out));
                    float *got = host_alloc(T * H);
                    fuse_test_get(got, out, T * H, dt);
                    int nan_row = 0, bad_other = 0;
                    for (int64_t t = 0; t < T; t++)
                        for (int c = 0; c < H; c++) {
                            float v = got[t * H + c];
                            if (t == 3)
                                nan_row += isnan(v);
                            else if (!(fabsf(v - ref[t * H + c]) < 0.1f))
                                bad_other++;
                        }
                    CHECK(nan_row == H && bad_other == 0,
                          "embeddings bad id: %d of %d NaN in its row, %d wrong elsewhere", nan_row,
                          H, bad_other);
                    free(got);
                }
                void *ptrs[] = {(void *)tb.word,
                                (void *)tb.position,
                                (void *)tb.type,
                                (void *)tb.gamma,
                                (void *)tb.beta,
                                dids,
                                dps,
                                dts,
                                out};
                for (int i = 0; i < 9; i++)
                    cudaFree(ptrs[i]);
                free(word), free(pos), free(typ), free(g), free(be), free(ids), free(ps), free(ts);
                free(ref);
            }
}

/* cu_seqlens, pack, unpack and positions against host loops and cpu_pack/unpack. */
static void test_pack(stof_ctx *ctx, test_rng *r)
{
    const int batches[] = {1, 3, 37};
    const int lens[] = {1, 5, 128};
    for (int bi = 0; bi < 3; bi++)
        for (int li = 0; li < 3; li++) {
            int B = batches[bi], L = lens[li];
            int32_t *lengths = malloc((size_t)B * 4), *cu = malloc((size_t)(B + 1) * 4);
            for (int b = 0; b < B; b++)
                lengths[b] = b == 0 ? L : (b == 1 ? 0 : (int32_t)test_rng_int(r, 0, L));
            int64_t T = cpu_cu_seqlens(lengths, B, cu);
            int32_t *dlen = dev_i32(lengths, B), *dcu = dev_i32(cu, B + 1);
            fuse_test_fill(dcu, 0xff, (size_t)(B + 1) * 4);
            CHECK_OK(fuse_cu_seqlens(ctx, dlen, B, L, dcu));
            int32_t *got_cu = malloc((size_t)(B + 1) * 4);
            cudaDeviceSynchronize();
            cudaMemcpy(got_cu, dcu, (size_t)(B + 1) * 4, cudaMemcpyDeviceToHost);
            CHECK(memcmp(got_cu, cu, (size_t)(B + 1) * 4) == 0, "cu_seqlens B=%d L=%d differ", B,
                  L);

            /* f32 rows of width 5 (4-byte words) and f16 rows of 384 (16-byte) and 3 (2-byte) */
            const int widths[] = {5, 384, 3};
            const stof_dtype kinds[] = {STOF_F32, STOF_F16, STOF_BF16};
            for (int k = 0; k < 3; k++) {
                int W = widths[k];
                stof_dtype dt = kinds[k];
                float *padded = grid_array(r, (int64_t)B * L * W, -1.f, 1.f);
                float *packed = host_alloc(T * W), *unpacked = host_alloc((int64_t)B * L * W);
                cpu_pack(padded, lengths, B, L, W, packed);
                cpu_unpack(packed, lengths, B, L, W, unpacked);
                void *dpad = fuse_test_upload(padded, (int64_t)B * L * W, dt);
                /* two spare rows past the capacity must stay poisoned */
                size_t es = stof_dtype_size(dt);
                void *dpk = fuse_test_alloc((size_t)(T + 2) * W * es + 16);
                fuse_test_poison(dpk, (size_t)(T + 2) * W * es);
                CHECK_OK(fuse_pack(ctx, dt, dpad, dcu, B, L, W, dpk, T));
                float *got = host_alloc((T + 2) * W);
                fuse_test_get(got, dpk, (T + 2) * W, dt);
                int wrong = 0, spare_touched = 0;
                for (int64_t i = 0; i < T * W; i++)
                    wrong += got[i] != packed[i];
                for (int64_t i = T * W; i < (T + 2) * W; i++)
                    spare_touched += !isnan(got[i]);
                CHECK(wrong == 0 && spare_touched == 0,
                      "pack B=%d L=%d W=%d %s: %d wrong, %d spare written", B, L, W,
                      stof_dtype_name(dt), wrong, spare_touched);

                void *dun = fuse_test_alloc((size_t)B * L * W * es);
                fuse_test_poison(dun, (size_t)B * L * W * es);
                CHECK_OK(fuse_unpack(ctx, dt, dpk, dcu, B, L, W, dun, T));
                float *got_un = host_alloc((int64_t)B * L * W);
                fuse_test_get(got_un, dun, (int64_t)B * L * W, dt);
                wrong = 0;
                for (int64_t i = 0; i < (int64_t)B * L * W; i++)
                    wrong += got_un[i] != unpacked[i];
                CHECK(wrong == 0, "unpack B=%d L=%d W=%d %s: %d wrong", B, L, W,
                      stof_dtype_name(dt), wrong);
                cudaFree(dpad), cudaFree(dpk), cudaFree(dun);
                free(padded), free(packed), free(unpacked), free(got), free(got_un);
            }

            /* token ids as i32 rows of width 1, and positions */
            int32_t *ids = malloc((size_t)B * L * 4), *want = malloc((size_t)(T + 1) * 4);
            for (int64_t i = 0; i < (int64_t)B * L; i++)
                ids[i] = (int32_t)(i * 7 + 1);
            for (int b = 0; b < B; b++)
                for (int i = 0; i < lengths[b]; i++)
                    want[cu[b] + i] = ids[(int64_t)b * L + i];
            int32_t *dids = dev_i32(ids, (int64_t)B * L);
            int32_t *dpk = fuse_test_alloc((size_t)(T + 1) * 4);
            CHECK_OK(fuse_pack(ctx, STOF_I32, dids, dcu, B, L, 1, dpk, T));
            int32_t *got = malloc((size_t)(T + 1) * 4);
            cudaDeviceSynchronize();
            cudaMemcpy(got, dpk, (size_t)T * 4, cudaMemcpyDeviceToHost);
            CHECK(T == 0 || memcmp(got, want, (size_t)T * 4) == 0, "pack i32 ids B=%d L=%d", B, L);
            fuse_test_fill(dpk, 0xff, (size_t)(T + 1) * 4);
            CHECK_OK(fuse_packed_positions(ctx, dcu, B, L, dpk, T));
            cudaDeviceSynchronize();
            cudaMemcpy(got, dpk, (size_t)T * 4, cudaMemcpyDeviceToHost);
            int wrong = 0;
            for (int b = 0; b < B; b++)
                for (int i = 0; i < lengths[b]; i++)
                    wrong += got[cu[b] + i] != i;
            CHECK(wrong == 0, "positions B=%d L=%d: %d wrong", B, L, wrong);

            /* lying cu_seqlens on the device: a length past L and a negative one */
            if (B >= 3 && L >= 5) {
                int32_t bad[4] = {0, L + 9, L + 4, L + 6}; /* lengths L+9, -5, 2 */
                int32_t *dbad = dev_i32(bad, 4);
                int64_t cap = L + 2;
                float *pad = grid_array(r, (int64_t)3 * L * 8, -1.f, 1.f);
                void *dpad = fuse_test_upload(pad, (int64_t)3 * L * 8, STOF_F16);
                void *dout = fuse_test_alloc((size_t)(cap + 4) * 8 * 2);
                fuse_test_poison(dout, (size_t)(cap + 4) * 8 * 2);
                CHECK_OK(fuse_pack(ctx, STOF_F16, dpad, dbad, 3, L, 8, dout, cap));
                float *g2 = host_alloc((cap + 4) * 8);
                fuse_test_get(g2, dout, (cap + 4) * 8, STOF_F16);
                int beyond = 0, first_ok = 0;
                for (int64_t i = cap * 8; i < (cap + 4) * 8; i++)
                    beyond += !isnan(g2[i]);
                for (int64_t i = 0; i < (int64_t)L * 8; i++)
                    first_ok += g2[i] == pad[i];
                CHECK(beyond == 0 && first_ok == L * 8,
                      "pack with lying lengths: %d writes past cap, %d of %d rows right", beyond,
                      first_ok / 8, L);
                cudaFree(dbad), cudaFree(dpad), cudaFree(dout);
                free(pad), free(g2);
            }
            cudaFree(dids), cudaFree(dpk), cudaFree(dlen), cudaFree(dcu);
            free(ids), free(want), free(got), free(lengths), free(cu), free(got_cu);
        }
}

static void test_mean_pool(stof_ctx *ctx, test_rng *r)
{
    const int batches[] = {1, 4, 9};
    const int widths[] = {200, 384, 768};
    for (int bi = 0; bi < 3; bi++)
        for (int wi = 0; wi < 3; wi++)
            for (int di = 0; di < 2; di++)
                for (int out_f32 = 0; out_f32 < 2; out_f32++) {
                    int B = batches[bi], W = widths[wi];
                    stof_dtype dt = dtypes[di], odt = out_f32 ? STOF_F32 : dt;
                    int32_t *lengths = malloc((size_t)B * 4), *cu = malloc((size_t)(B + 1) * 4);
                    for (int b = 0; b < B; b++)
                        lengths[b] =
                            B == 1 ? 16384 : (b == 2 ? 0 : (int32_t)test_rng_int(r, 1, 300));
                    int64_t T = cpu_cu_seqlens(lengths, B, cu);
                    float *packed = grid_array(r, T * W, -1.f, 1.f);
                    float *ref = host_alloc((int64_t)B * W);
                    cpu_mean_pool(packed, cu, B, W, ref);
                    void *dpk = fuse_test_upload(packed, T * W, dt);
                    int32_t *dcu = dev_i32(cu, B + 1);
                    void *dout = fuse_test_alloc((size_t)B * W * 4);
                    fuse_test_poison(dout, (size_t)B * W * 4);
                    char label[160];
                    snprintf(label, sizeof label, "mean_pool B=%d W=%d %s -> %s", B, W,
                             stof_dtype_name(dt), stof_dtype_name(odt));
                    /* sums are fp32 either way: only the output rounding differs */
                    fuse_test_expect_close_host(
                        label, fuse_mean_pool(ctx, dt, dpk, dcu, B, W, T, odt, dout), dout, odt,
                        ref, (int64_t)B * W, W, out_f32 ? 1e-4 : fuse_test_tolerance(dt));
                    cudaFree(dpk), cudaFree(dcu), cudaFree(dout);
                    free(lengths), free(cu), free(packed), free(ref);
                }
}

int main(void)
{
    test_require_gpu("test_fuse_rows");
    stof_ctx_params p = stof_ctx_default_params();
    p.device = STOF_DEVICE_GPU;
    stof_ctx *ctx = NULL;
    CHECK_OK(stof_ctx_create(&p, &ctx));
    if (!ctx) return test_finish("test_fuse_rows");
    test_rng r;
    test_rng_init(&r, test_seed());
    test_bias_act(ctx, &r);
    test_layernorm(ctx, &r);
    test_embeddings(ctx, &r);
    test_pack(ctx, &r);
    test_mean_pool(ctx, &r);
    CHECK(cudaDeviceSynchronize() == cudaSuccess, "device error at the end: %s",
          cudaGetErrorString(cudaGetLastError()));
    stof_ctx_destroy(ctx);
    return test_finish("test_fuse_rows");
}
