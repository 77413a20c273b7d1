/*
 * rows.cu — the memory-bound kernels around the GEMMs: bias + activation,
 * (bias +) residual + LayerNorm, fused BERT embeddings + LayerNorm, and the
 * padding-free helpers (cu_seqlens, pack/unpack, positions, mean pooling).
 *
 * LayerNorm keeps a row in registers between the statistics and the output:
 * rows up to 1024 wide take one warp each, wider ones (to 8192) a 256-thread
 * CTA; each thread holds up to four 16-byte vectors. Statistics are two-pass
 * (mean, then squared deviations) in fp32 over the values in registers.
 * Device-side indices (cu_seqlens, token ids) are clamped, never trusted.
 */
#include "fuse/internal.h"
#include "fuse/vec.cuh"
#include "fuse/rows.cuh"
#include "core/launch.cuh"

/* gamma and beta of the vectors one thread normalises (vector i of thread
 * `lane` is columns (lane + i * TPR) * 8 ..), as loaded. They are parameters
 * no kernel of a forward writes, so the row kernels load them before their
 * grid-dependency wait, overlapping the previous kernel's tail. Loaded after
 * the statistics, they were a second memory round trip on every row, which
 * is what a LayerNorm of a few hundred rows costs most. */
template <int VPL> struct ln_params {
    uint4 gamma[VPL], beta[VPL];
};

template <typename T, int TPR, int VPL>
static __device__ __forceinline__ void ln_params_load(ln_params<VPL> &p, int lane, int cols,
                                                      const T *__restrict__ gamma,
                                                      const T *__restrict__ beta)
{
#pragma unroll
    for (int i = 0; i < VPL; i++) {
        int c = (lane + i * TPR) * 8;
        if (c < cols) {
            p.gamma[i] = *reinterpret_cast<const uint4 *>(gamma + c);
            p.beta[i] = *reinterpret_cast<const uint4 *>(beta + c);
        }
    }
}

/* Normalise the row this thread group holds (vector i of thread `lane` is
 * columns (lane + i * TPR) * 8 ..) and store it. */
template <typename T, int TPR, int VPL>
static __device__ __forceinline__ void layernorm_store(float (&v)[VPL][8], int lane, int cols,
                                                       const ln_params<VPL> &p, float eps, T *out,
                                                       float *red)
{
    const int nvec = cols / 8;
    float s = 0.f;
#pragma unroll
    for (int i = 0; i < VPL; i++)
#pragma unroll
        for (int j = 0; j < 8; j++)
            s += v[i][j]; /* unused vectors are zero */
    const float mean = row_sum<TPR>(s, red) / (float)cols;
    float q = 0.f;
#pragma unroll
    for (int i = 0; i < VPL; i++) {
        if (lane + i * TPR < nvec) {
#pragma unroll
            for (int j = 0; j < 8; j++) {
                float d = v[i][j] - mean;
                q += d * d;
            }
        }
    }
    const float rstd = rsqrtf(row_sum<TPR>(q, red) / (float)cols + eps);
#pragma unroll
    for (int i = 0; i < VPL; i++) {
        int c = (lane + i * TPR) * 8;
        if (c < cols) {
            float g[8], b[8], o[8];
            unpack8<T>(g, p.gamma[i]);
            unpack8<T>(b, p.beta[i]);
#pragma unroll
            for (int j = 0; j < 8; j++)
                o[j] = (v[i][j] - mean) * rstd * g[j] + b[j];
            store8(out + c, o);
        }
    }
}

/* ---------------------------------------------------------------- bias + activation */

/* c + step within [0, n), for c, step in [0, n). */
static __device__ __forceinline__ int wrap_add(int c, int step, int n)
{
    c += step;
    return c >= n ? c - n : c;
}

/* y = act(x + bias) over m x n elements as nvec 8-element vectors (nvec plus
 * the grid's thread count stays below 2^31: the launcher checks). Thread t of
 * the grid takes vectors t, t + S, t + 2S, ... (S the grid's thread count); a
 * vector's bias column advances by S mod (n / 8) per step, so the loop
 * divides nothing, and the activation is a template argument. With a 64-bit
 * modulo per vector and the activation switched at run time, exact GELU over
 * 16384 x 3072 took 9% longer on an H200; loading two or four vectors per
 * step before the math was slower too (the registers cost more occupancy
 * than the extra loads in flight gain). Exact GELU's erf is what keeps the
 * kernel above ReLU's time (69 against 55 us at that size with erff, 64 with
 * a branchless rational erf; vec.cuh's fuse_erf is branchless too). */
template <typename T, int ACT>
__global__ void __launch_bounds__(256)
    bias_act_kernel(const T *x, const T *__restrict__ bias, T *y, int nvec, int row_vecs)
{
    const int S = gridDim.x * blockDim.x;
    const int step = S % row_vecs;
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    int col = i % row_vecs;
    stof_grid_wait(); /* launched with PDL after the GEMM that wrote x */
    for (; i < nvec; i += S) {
        float v[8];
        load8(v, x + (int64_t)i * 8);
        if (bias) {
            float b[8];
            load8(b, bias + col * 8);
#pragma unroll
            for (int j = 0; j < 8; j++)
                v[j] += b[j];
        }
#pragma unroll
        for (int j = 0; j < 8; j++)
            v[j] = act_apply(v[j], ACT);
        store8(y + (int64_t)i * 8, v);
        col = wrap_add(col, step, row_vecs);
    }
}

template <typename T>
static stof_status launch_bias_act_t(stof_ctx *ctx, int64_t m, int n, const void *x,
                                     const void *bias, stof_act act, void *y)
{
    int64_t nvec64 = m * n / 8;
    /* a vector per thread, up to 8 CTAs of 256 per SM (all the threads an SM
     * holds); past that the threads loop */
    int64_t cap = (int64_t)ctx->sm_count * 8;
    STOF_REQUIRE(nvec64 + cap * 256 <= INT32_MAX, STOF_ERR_UNSUPPORTED,
                 "fuse_bias_act: %lld x %d elements are more than the kernel indexes (about 2^34)",
                 (long long)m, n);
    int nvec = (int)nvec64;
    int64_t blocks = stof_cdiv(nvec, 256);
    if (blocks > cap) blocks = cap;
    const T *xt = (const T *)x, *bt = (const T *)bias;
    T *yt = (T *)y;
    int row_vecs = n / 8;
    void *args[] = {&xt, &bt, &yt, &nvec, &row_vecs};
    const void *fn;
    switch (act) {
    case ACT_GELU: fn = (const void *)bias_act_kernel<T, ACT_GELU>; break;
    case ACT_GELU_TANH: fn = (const void *)bias_act_kernel<T, ACT_GELU_TANH>; break;
    case ACT_RELU: fn = (const void *)bias_act_kernel<T, ACT_RELU>; break;
    case ACT_SILU: fn = (const void *)bias_act_kernel<T, ACT_SILU>; break;
    default: fn = (const void *)bias_act_kernel<T, ACT_NONE>; break;
    }
    STOF_CUDA_TRY(stof_launch_pdl(ctx->cc_major >= 9, fn, dim3((unsigned)blocks), dim3(256), args,
                                  0, (cudaStream_t)ctx->stream));
    return STOF_CUDA(cudaGetLastError());
}

extern "C" stof_status fuse_launch_bias_act(stof_ctx *ctx, stof_dtype dtype, int64_t m, int n,
                                            const void *x, const void *bias, stof_act act, void *y)
{
    if (dtype == STOF_BF16) return launch_bias_act_t<__nv_bfloat16>(ctx, m, n, x, bias, act, y);
    return launch_bias_act_t<__half>(ctx, m, n, x, bias, act, y);
}

/* ---------------------------------------------------------------- (bias +) residual + LayerNorm */

/* Eight consecutive values of X as loaded (16-bit types: one 16-byte word;
 * fp32: two), converted only when added, so that a thread's loads can all be
 * in flight while few registers hold them. */
template <typename X> struct raw8 {
    uint4 u;
};
template <> struct raw8<float> {
    float4 a, b;
};

template <typename X> static __device__ __forceinline__ raw8<X> raw8_load(const X *p)
{
    raw8<X> r;
    r.u = *reinterpret_cast<const uint4 *>(p);
    return r;
}
template <> __device__ __forceinline__ raw8<float> raw8_load<float>(const float *p)
{
    raw8<float> r;
    r.a = reinterpret_cast<const float4 *>(p)[0];
    r.b = reinterpret_cast<const float4 *>(p)[1];
    return r;
}

template <typename X> static __device__ __forceinline__ void raw8_add(float (&v)[8], raw8<X> r)
{
    float f[8];
    unpack8<X>(f, r.u);
#pragma unroll
    for (int j = 0; j < 8; j++)
        v[j] += f[j];
}
template <> __device__ __forceinline__ void raw8_add<float>(float (&v)[8], raw8<float> r)
{
    v[0] += r.a.x, v[1] += r.a.y, v[2] += r.a.z, v[3] += r.a.w;
    v[4] += r.b.x, v[5] += r.b.y, v[6] += r.b.z, v[7] += r.b.w;
}

/*
 * y = LN(sum of parts planes of x + bias + residual). X is T (one plane: a
 * GEMM's output) or float (the fp32 partial sums of a GEMM whose K was split,
 * plane elements apart). Every load of a row is issued before the first sum
 * that needs it (up to four planes at once, one more round for each further
 * four): the planes come from L2, and a loop of dependent loads, one plane
 * per trip, cost more than a microsecond per LayerNorm of a hundred rows.
 */
template <typename T, typename X, int TPR, int VPL>
__global__ void layernorm_kernel(const X *x, int parts, int64_t plane, const T *__restrict__ bias,
                                 const T *residual, const T *__restrict__ gamma,
                                 const T *__restrict__ beta, T *y, int64_t rows, int cols, float eps,
                                 const int32_t *live)
{
    constexpr int Q = sizeof(X) == 4 ? 4 : 1; /* planes loaded together */
    __shared__ float red[TPR / 32];
    const int64_t row = (int64_t)blockIdx.x * (blockDim.x / TPR) + threadIdx.x / TPR;
    const int lane = threadIdx.x % TPR;
    ln_params<VPL> p;
    ln_params_load<T, TPR, VPL>(p, lane, cols, gamma, beta);
    /* The next GEMM (gemm_sm90) may start loading its weights now. */
    stof_grid_launch_dependents();
    stof_grid_wait(); /* launched with PDL after the GEMM that wrote x */
    if (row >= rows || (live && row >= *live)) return; /* a whole row group leaves together */
    const int nvec = cols / 8;
    const X *xr = x + row * cols;
    const T *rr = residual ? residual + row * cols : NULL;
    float v[VPL][8];
#pragma unroll
    for (int i = 0; i < VPL; i++) {
        int c = lane + i * TPR;
#pragma unroll
        for (int j = 0; j < 8; j++)
            v[i][j] = 0.f;
        if (c < nvec && Q == 1) { /* one plane of T */
            raw8_add(v[i], raw8_load(xr + c * 8));
            if (bias) raw8_add(v[i], raw8_load(bias + c * 8));
            if (rr) raw8_add(v[i], raw8_load(rr + c * 8));
        } else if (c < nvec) {
            raw8<X> part[Q];
            raw8<T> b, r;
#pragma unroll
            for (int q = 0; q < Q; q++)
                if (q < parts) part[q] = raw8_load(xr + q * plane + c * 8);
            if (bias) b = raw8_load(bias + c * 8);
            if (rr) r = raw8_load(rr + c * 8);
#pragma unroll
            for (int q = 0; q < Q; q++)
                if (q < parts) raw8_add(v[i], part[q]);
            if (bias) raw8_add(v[i], b);
            if (rr) raw8_add(v[i], r);
        }
    }
    for (int q0 = Q; Q > 1 && q0 < parts; q0 += Q) { /* more than Q planes */
#pragma unroll
        for (int i = 0; i < VPL; i++) {
            int c = lane + i * TPR;
            if (c >= nvec) continue;
            raw8<X> part[Q];
#pragma unroll
            for (int q = 0; q < Q; q++)
                if (q0 + q < parts) part[q] = raw8_load(xr + (q0 + q) * plane + c * 8);
#pragma unroll
            for (int q = 0; q < Q; q++)
                if (q0 + q < parts) raw8_add(v[i], part[q]);
        }
    }
    /* every read of this row is done: y may be x or residual */
    layernorm_store<T, TPR, VPL>(v, lane, cols, p, eps, y + row * cols, red);
}

template <typename T, typename X, int TPR, int VPL>
static stof_status launch_layernorm_tv(stof_ctx *ctx, int64_t rows, int cols, const void *x,
                                       int parts, const void *bias, const void *residual,
                                       const void *gamma, const void *beta, float eps, void *y,
                                       const int32_t *live)
{
    const int threads = TPR == 32 ? 128 : TPR;
    const int rows_per_block = threads / TPR;
    const X *xt = (const X *)x;
    const T *bt = (const T *)bias, *rt = (const T *)residual, *gt = (const T *)gamma,
            *et = (const T *)beta;
    T *yt = (T *)y;
    int64_t plane = rows * cols;
    void *args[] = {&xt, &parts, &plane, &bt, &rt, &gt, &et, &yt, &rows, &cols, &eps, &live};
    STOF_CUDA_TRY(stof_launch_pdl(ctx->cc_major >= 9,
                                  (const void *)layernorm_kernel<T, X, TPR, VPL>,
                                  dim3((unsigned)stof_cdiv(rows, rows_per_block)), dim3(threads),
                                  args, 0, (cudaStream_t)ctx->stream));
    return STOF_CUDA(cudaGetLastError());
}

template <typename T, typename X>
static stof_status launch_layernorm_t(stof_ctx *ctx, int64_t rows, int cols, const void *x,
                                      int parts, const void *bias, const void *residual,
                                      const void *gamma, const void *beta, float eps, void *y,
                                      const int32_t *live)
{
    int nvec = cols / 8;
#define LN_CASE(tpr, vpl)                                                                          \
    if (nvec <= (tpr) * (vpl))                                                                     \
        return launch_layernorm_tv<T, X, tpr, vpl>(ctx, rows, cols, x, parts, bias, residual,      \
                                                   gamma, beta, eps, y, live);
    LN_CASE(32, 1)
    LN_CASE(32, 2) LN_CASE(32, 3) LN_CASE(32, 4) LN_CASE(256, 1) LN_CASE(256, 2) LN_CASE(256, 3)
        LN_CASE(256, 4)
#undef LN_CASE
            return stof_error(STOF_ERR_INTERNAL, "layernorm: width %d is too wide", cols);
}

extern "C" stof_status fuse_launch_layernorm(stof_ctx *ctx, stof_dtype dtype, int64_t rows,
                                             int cols, const void *x, const void *bias,
                                             const void *residual, const void *gamma,
                                             const void *beta, float eps, void *y)
{
    if (dtype == STOF_BF16)
        return launch_layernorm_t<__nv_bfloat16, __nv_bfloat16>(ctx, rows, cols, x, 1, bias,
                                                                residual, gamma, beta, eps, y,
                                                                NULL);
    return launch_layernorm_t<__half, __half>(ctx, rows, cols, x, 1, bias, residual, gamma, beta,
                                              eps, y, NULL);
}

extern "C" stof_status fuse_launch_layernorm_parts(stof_ctx *ctx, stof_dtype dtype, int64_t rows,
                                                   int cols, const float *parts, int count,
                                                   const void *bias, const void *residual,
                                                   const void *gamma, const void *beta, float eps,
                                                   void *y, const int32_t *live)
{
    if (dtype == STOF_BF16)
        return launch_layernorm_t<__nv_bfloat16, float>(ctx, rows, cols, parts, count, bias,
                                                        residual, gamma, beta, eps, y, live);
    return launch_layernorm_t<__half, float>(ctx, rows, cols, parts, count, bias, residual, gamma,
                                             beta, eps, y, live);
}

/* ---------------------------------------------------------------- embeddings */

template <typename T, int TPR, int VPL>
__global__ void embeddings_kernel(const int32_t *__restrict__ ids,
                                  const int32_t *__restrict__ positions,
                                  const int32_t *__restrict__ types, fuse_embed_tables tb,
                                  int64_t tokens, T *__restrict__ out)
{
    __shared__ float red[TPR / 32];
    const int64_t row = (int64_t)blockIdx.x * (blockDim.x / TPR) + threadIdx.x / TPR;
    const int lane = threadIdx.x % TPR;
    const int cols = tb.hidden, nvec = cols / 8;
    /* The next GEMM (gemm_sm90, PDL) may start loading its weights now. */
    stof_grid_launch_dependents();
    if (row >= tokens) return;
    ln_params<VPL> p; /* issued with the table loads below */
    ln_params_load<T, TPR, VPL>(p, lane, cols, (const T *)tb.gamma, (const T *)tb.beta);
    const int id = ids[row], pos = positions[row], tt = types ? types[row] : 0;
    T *o = out + row * cols;
    if (id < 0 || id >= tb.vocab || pos < 0 || pos >= tb.max_pos || tt < 0 || tt >= tb.type_vocab) {
        float nan8[8];
#pragma unroll
        for (int j = 0; j < 8; j++)
            nan8[j] = __int_as_float(0x7fc00000);
        for (int c = lane; c < nvec; c += TPR)
            store8(o + c * 8, nan8);
        return;
    }
    const T *wr = (const T *)tb.word + (int64_t)id * cols;
    const T *pr = (const T *)tb.position + (int64_t)pos * cols;
    const T *tr = (const T *)tb.type + (int64_t)tt * cols;
    float v[VPL][8];
#pragma unroll
    for (int i = 0; i < VPL; i++) {
        int c = lane + i * TPR;
#pragma unroll
        for (int j = 0; j < 8; j++)
            v[i][j] = 0.f;
        if (c < nvec) {
            float a[8], b[8];
            load8(v[i], wr + c * 8);
            load8(a, pr + c * 8);
            load8(b, tr + c * 8);
#pragma unroll
            for (int j = 0; j < 8; j++)
                v[i][j] += a[j] + b[j];
        }
    }
    layernorm_store<T, TPR, VPL>(v, lane, cols, p, tb.eps, o, red);
}

template <typename T>
static stof_status launch_embeddings_t(stof_ctx *ctx, const fuse_embed_tables *tb,
                                       const int32_t *ids, const int32_t *positions,
                                       const int32_t *types, int64_t tokens, void *out)
{
    int nvec = tb->hidden / 8;
#define EMB_CASE(tpr, vpl)                                                                         \
    if (nvec <= (tpr) * (vpl)) {                                                                   \
        const int threads = (tpr) == 32 ? 128 : (tpr);                                             \
        embeddings_kernel<T, tpr, vpl>                                                             \
            <<<(unsigned)stof_cdiv(tokens, threads / (tpr)), threads, 0,                           \
               (cudaStream_t)ctx->stream>>>(ids, positions, types, *tb, tokens, (T *)out);         \
        return STOF_CUDA(cudaGetLastError());                                                      \
    }
    EMB_CASE(32, 1)
    EMB_CASE(32, 2) EMB_CASE(32, 3) EMB_CASE(32, 4) EMB_CASE(256, 1) EMB_CASE(256, 2)
        EMB_CASE(256, 3) EMB_CASE(256, 4)
#undef EMB_CASE
            return stof_error(STOF_ERR_INTERNAL, "embeddings: hidden %d is too wide", tb->hidden);
}

extern "C" stof_status fuse_launch_embeddings(stof_ctx *ctx, stof_dtype dtype,
                                              const fuse_embed_tables *t, const int32_t *ids,
                                              const int32_t *positions, const int32_t *types,
                                              int64_t tokens, void *out)
{
    if (dtype == STOF_BF16)
        return launch_embeddings_t<__nv_bfloat16>(ctx, t, ids, positions, types, tokens, out);
    return launch_embeddings_t<__half>(ctx, t, ids, positions, types, tokens, out);
}

/* ---------------------------------------------------------------- padding-free helpers */

/* One warp prefix-sums the lengths, 32 at a time. */
__global__ void cu_seqlens_kernel(const int32_t *__restrict__ lengths, int batch, int len,
                                  int32_t *__restrict__ cu)
{
    const int lane = threadIdx.x;
    int carry = 0;
    if (lane == 0) cu[0] = 0;
    for (int b0 = 0; b0 < batch; b0 += 32) {
        int b = b0 + lane;
        int v = b < batch ? lengths[b] : 0;
        v = v < 0 ? 0 : (v > len ? len : v);
#pragma unroll
        for (int o = 1; o < 32; o <<= 1) {
            int u = __shfl_up_sync(0xffffffffu, v, o);
            if (lane >= o) v += u;
        }
        if (b < batch) cu[b + 1] = carry + v;
        carry += __shfl_sync(0xffffffffu, v, 31);
    }
}

extern "C" stof_status fuse_launch_cu_seqlens(stof_ctx *ctx, const int32_t *lengths, int batch,
                                              int len, int32_t *cu_seqlens)
{
    cu_seqlens_kernel<<<1, 32, 0, (cudaStream_t)ctx->stream>>>(lengths, batch, len, cu_seqlens);
    return STOF_CUDA(cudaGetLastError());
}

/* A warp per padded row (b, i); VEC-byte words. pack: padded -> packed rows of
 * real tokens; unpack: packed -> padded, zeros past each length. */
template <typename V>
__global__ void pack_rows_kernel(const unsigned char *src, unsigned char *dst,
                                 const int32_t *__restrict__ cu, int batch, int len,
                                 int64_t row_bytes, int64_t cap, bool unpack)
{
    const int64_t r = (int64_t)blockIdx.x * (blockDim.x / 32) + (threadIdx.x >> 5);
    const int lane = threadIdx.x & 31;
    if (r >= (int64_t)batch * len) return;
    const int b = (int)(r / len), i = (int)(r % len);
    int64_t start;
    const int n = seq_extent(cu, b, len, &start);
    const int64_t t = start + i;
    const bool real = i < n && t < cap;
    const int64_t words = row_bytes / (int64_t)sizeof(V);
    if (!unpack) {
        if (!real) return;
        const V *s = reinterpret_cast<const V *>(src + r * row_bytes);
        V *d = reinterpret_cast<V *>(dst + t * row_bytes);
        for (int64_t w = lane; w < words; w += 32)
            d[w] = s[w];
    } else {
        V *d = reinterpret_cast<V *>(dst + r * row_bytes);
        if (real) {
            const V *s = reinterpret_cast<const V *>(src + t * row_bytes);
            for (int64_t w = lane; w < words; w += 32)
                d[w] = s[w];
        } else {
            const V zero = V();
            for (int64_t w = lane; w < words; w += 32)
                d[w] = zero;
        }
    }
}

template <typename V>
static stof_status launch_pack_v(stof_ctx *ctx, const void *src, const int32_t *cu, int batch,
                                 int len, int64_t row_bytes, void *dst, int64_t cap, bool unpack)
{
    int64_t rows = (int64_t)batch * len;
    pack_rows_kernel<V><<<(unsigned)stof_cdiv(rows, 8), 256, 0, (cudaStream_t)ctx->stream>>>(
        (const unsigned char *)src, (unsigned char *)dst, cu, batch, len, row_bytes, cap, unpack);
    return STOF_CUDA(cudaGetLastError());
}

extern "C" stof_status fuse_launch_pack_rows(stof_ctx *ctx, const void *src,
                                             const int32_t *cu_seqlens, int batch, int len,
                                             int64_t row_bytes, void *dst, int64_t packed_cap,
                                             bool unpack)
{
    if (row_bytes % 16 == 0)
        return launch_pack_v<uint4>(ctx, src, cu_seqlens, batch, len, row_bytes, dst, packed_cap,
                                    unpack);
    if (row_bytes % 4 == 0)
        return launch_pack_v<uint32_t>(ctx, src, cu_seqlens, batch, len, row_bytes, dst, packed_cap,
                                       unpack);
    return launch_pack_v<uint16_t>(ctx, src, cu_seqlens, batch, len, row_bytes, dst, packed_cap,
                                   unpack);
}

__global__ void positions_kernel(const int32_t *__restrict__ cu, int batch, int len,
                                 int32_t *__restrict__ positions, int64_t cap)
{
    const int64_t r = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= (int64_t)batch * len) return;
    const int b = (int)(r / len), i = (int)(r % len);
    int64_t start;
    const int n = seq_extent(cu, b, len, &start);
    if (i < n && start + i < cap) positions[start + i] = i;
}

extern "C" stof_status fuse_launch_positions(stof_ctx *ctx, const int32_t *cu_seqlens, int batch,
                                             int len, int32_t *positions, int64_t packed_cap)
{
    int64_t rows = (int64_t)batch * len;
    positions_kernel<<<(unsigned)stof_cdiv(rows, 256), 256, 0, (cudaStream_t)ctx->stream>>>(
        cu_seqlens, batch, len, positions, packed_cap);
    return STOF_CUDA(cudaGetLastError());
}

/* grid (width / 64 column groups, batch); 256 threads = 8 column vectors x 32
 * row lanes; the 32 partial sums of each column meet in shared memory. */
template <typename T, typename O>
__global__ void mean_pool_kernel(const T *__restrict__ packed, const int32_t *__restrict__ cu,
                                 int width, int64_t cap, O *__restrict__ out)
{
    __shared__ float part[32][65];
    const int b = blockIdx.y;
    const int cv = threadIdx.x & 7, rl = threadIdx.x >> 3;
    const int col = blockIdx.x * 64 + cv * 8;
    int64_t s = cu[b], e = cu[b + 1];
    if (s < 0) s = 0;
    if (e > cap) e = cap;
    float acc[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
    if (col < width) {
        for (int64_t r = s + rl; r < e; r += 32) {
            float v[8];
            load8(v, packed + r * width + col);
#pragma unroll
            for (int j = 0; j < 8; j++)
                acc[j] += v[j];
        }
    }
#pragma unroll
    for (int j = 0; j < 8; j++)
        part[rl][cv * 8 + j] = acc[j];
    __syncthreads();
    if (threadIdx.x < 64) {
        int c = blockIdx.x * 64 + threadIdx.x;
        if (c < width) {
            float sum = 0.f;
            for (int i = 0; i < 32; i++)
                sum += part[i][threadIdx.x];
            float mean = e > s ? sum / (float)(e - s) : 0.f;
            out[(int64_t)b * width + c] = (O)mean;
        }
    }
}

template <typename T, typename O>
static stof_status launch_mean_pool_t(stof_ctx *ctx, const void *packed, const int32_t *cu,
                                      int batch, int width, int64_t cap, void *out)
{
    dim3 grid((unsigned)stof_cdiv(width, 64), (unsigned)batch);
    mean_pool_kernel<T, O>
        <<<grid, 256, 0, (cudaStream_t)ctx->stream>>>((const T *)packed, cu, width, cap, (O *)out);
    return STOF_CUDA(cudaGetLastError());
}

extern "C" stof_status fuse_launch_mean_pool(stof_ctx *ctx, stof_dtype in_dtype, const void *packed,
                                             const int32_t *cu_seqlens, int batch, int width,
                                             int64_t packed_cap, stof_dtype out_dtype, void *out)
{
    if (in_dtype == STOF_BF16) {
        if (out_dtype == STOF_F32)
            return launch_mean_pool_t<__nv_bfloat16, float>(ctx, packed, cu_seqlens, batch, width,
                                                            packed_cap, out);
        return launch_mean_pool_t<__nv_bfloat16, __nv_bfloat16>(ctx, packed, cu_seqlens, batch,
                                                                width, packed_cap, out);
    }
    if (out_dtype == STOF_F32)
        return launch_mean_pool_t<__half, float>(ctx, packed, cu_seqlens, batch, width, packed_cap,
                                                 out);
    return launch_mean_pool_t<__half, __half>(ctx, packed, cu_seqlens, batch, width, packed_cap,
                                              out);
}
