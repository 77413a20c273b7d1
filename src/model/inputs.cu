/*
 * inputs.cu — the few small kernels the GPU encoder needs beside
 * src/fuse: widening the last hidden state to f32, CLS pooling, L2
 * normalisation of pooled rows, and the inputs that arrive in device memory:
 * one scan that derives the lengths (from an attention mask) and range-checks
 * ids and types, and the packing of ids and types (I32 or I64) into I32, of
 * one tensor for given cu_seqlens or of a whole forward's inputs from the
 * scan's lengths.
 *
 * The one non-obvious choice: the scan reports, per sequence, the first
 * offending position and its value, so the host reads back a few words per
 * sequence in one copy and can still name the exact element in its message.
 */
#include "model/encoder.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <stdint.h>

static __device__ __forceinline__ float load_half(const void *p, int64_t i, int bf16)
{
    if (bf16) return __bfloat162float(((const __nv_bfloat16 *)p)[i]);
    return __half2float(((const __half *)p)[i]);
}

static int grid_for(int64_t n, int threads)
{
    int64_t blocks = (n + threads - 1) / threads;
    return (int)(blocks > 4096 ? 4096 : blocks < 1 ? 1 : blocks);
}

static stof_status launched(const char *what)
{
    return stof_cuda_status((int)cudaGetLastError(), what, __FILE__, __LINE__);
}

/* ---------------------------------------------------------------- widening */

/* dst[r, c] = src[r * stride + c] for r < rows, c < cols. */
static __global__ void half_to_f32_kernel(const void *src, int64_t rows, int64_t cols,
                                          int64_t stride, int bf16, float *dst)
{
    const int64_t n = rows * cols;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        dst[i] = load_half(src, cols == stride ? i : (i / cols) * stride + i % cols, bf16);
}

extern "C" stof_status enc_half_to_f32_rows(stof_ctx *ctx, stof_dtype dtype, const void *src,
                                            int64_t rows, int64_t cols, int64_t src_stride,
                                            float *dst)
{
    if (rows <= 0 || cols <= 0) return STOF_OK;
    half_to_f32_kernel<<<grid_for(rows * cols, 256), 256, 0, (cudaStream_t)ctx->stream>>>(
        src, rows, cols, src_stride, dtype == STOF_BF16, dst);
    return launched("half_to_f32_kernel");
}

extern "C" stof_status enc_half_to_f32(stof_ctx *ctx, stof_dtype dtype, const void *src, int64_t n,
                                       float *dst)
{
    return enc_half_to_f32_rows(ctx, dtype, src, 1, n, n, dst);
}

/* ---------------------------------------------------------------- pooling */

/* out[b] = row cu[b] of x as f32, zeros for an empty sequence. */
static __global__ void cls_pool_kernel(const void *x, const int32_t *cu, int hidden, int64_t tokens,
                                       int bf16, float *out)
{
    const int b = blockIdx.x;
    const int64_t first = cu[b];
    const bool has = cu[b + 1] > first && first >= 0 && first < tokens;
    for (int c = threadIdx.x; c < hidden; c += blockDim.x)
        out[(int64_t)b * hidden + c] = has ? load_half(x, first * hidden + c, bf16) : 0.0f;
}

extern "C" stof_status enc_cls_pool(stof_ctx *ctx, stof_dtype dtype, const void *x,
                                    const int32_t *cu_seqlens, int batch, int hidden,
                                    int64_t tokens, float *out)
{
    cls_pool_kernel<<<batch, 256, 0, (cudaStream_t)ctx->stream>>>(x, cu_seqlens, hidden, tokens,
                                                                  dtype == STOF_BF16, out);
    return launched("cls_pool_kernel");
}

/* x[b] /= max(||x[b]||, 1e-12), one CTA of 256 threads per row. */
static __global__ void l2_normalize_kernel(float *x, int cols)
{
    __shared__ float partial[8];
    float *row = x + (int64_t)blockIdx.x * cols;
    float s = 0.f;
    for (int c = threadIdx.x; c < cols; c += blockDim.x)
        s += row[c] * row[c];
    for (int o = 16; o > 0; o >>= 1)
        s += __shfl_xor_sync(0xffffffffu, s, o);
    if ((threadIdx.x & 31) == 0) partial[threadIdx.x >> 5] = s;
    __syncthreads();
    float total = 0.f;
    for (int w = 0; w < 8; w++)
        total += partial[w];
    const float inv = 1.0f / fmaxf(sqrtf(total), 1e-12f);
    for (int c = threadIdx.x; c < cols; c += blockDim.x)
        row[c] *= inv;
}

extern "C" stof_status enc_l2_normalize(stof_ctx *ctx, float *x, int rows, int cols)
{
    l2_normalize_kernel<<<rows, 256, 0, (cudaStream_t)ctx->stream>>>(x, cols);
    return launched("l2_normalize_kernel");
}

/* ---------------------------------------------------------------- inputs */

static __device__ __forceinline__ long long load_int(const void *p, int dtype, int64_t i)
{
    if (dtype == STOF_I64) return ((const long long *)p)[i];
    if (dtype == STOF_U8) return ((const unsigned char *)p)[i];
    return ((const int *)p)[i];
}

/* A length as the forward uses it: clamped to [0, len]. */
static __device__ __forceinline__ int clamp_len(int v, int len)
{
    return v < 0 ? 0 : v > len ? len : v;
}

/* Whether an id or type v indexes a table of n rows. */
static __device__ __forceinline__ bool in_range(long long v, int n)
{
    return v >= 0 && v < n;
}

static __device__ __forceinline__ void put64(int32_t *w, long long v)
{
    w[0] = (int32_t)(unsigned)(unsigned long long)v;
    w[1] = (int32_t)(unsigned)((unsigned long long)v >> 32);
}

/* The report of sequence b (row b * len of the inputs): its length as found
 * or given, the first offending positions (INT32_MAX: none) and the values
 * there, into the device report and its mapped host copy. upto is the length
 * clamped to [0, len]. */
static __device__ void write_report(const enc_scan_args &a, int b, int length, int upto,
                                    int bad_value, int one_after, int bad_id, int bad_type)
{
    const int64_t row = (int64_t)b * a.len;
    int32_t w[ENC_SCAN_WORDS];
    w[ENC_SCAN_LENGTH] = length;
    w[ENC_SCAN_MASK_VALUE] = bad_value;
    w[ENC_SCAN_MASK_ONE_AFTER_ZERO] = one_after;
    w[ENC_SCAN_ID] = bad_id;
    w[ENC_SCAN_TYPE] = bad_type;
    put64(w + ENC_SCAN_MASK_VALUE_AT,
          bad_value < a.len ? load_int(a.mask, a.mask_dtype, row + bad_value) : 0);
    put64(w + ENC_SCAN_ID_VALUE, bad_id < upto ? load_int(a.ids, a.ids_dtype, row + bad_id) : 0);
    put64(w + ENC_SCAN_TYPE_VALUE,
          bad_type < upto ? load_int(a.types, a.types_dtype, row + bad_type) : 0);
    int32_t *rep = a.report + (int64_t)b * ENC_SCAN_WORDS;
    int32_t *host = a.report_host ? a.report_host + (int64_t)b * ENC_SCAN_WORDS : NULL;
    for (int k = 0; k < ENC_SCAN_WORDS; k++) {
        rep[k] = w[k];
        if (host) host[k] = w[k];
    }
}

/*
 * One CTA per sequence b. The length comes from the attention mask (the first
 * 0 of the row; the row is valid when no 1 follows it and every value is 0 or
 * 1), from device lengths, or from host lengths uploaded into the report's
 * input slots. Then every id and type before that length is range-checked.
 * Positions are reduced with shared atomics: the first value that is neither
 * 0 nor 1, the first 0, the first 1 after it.
 */
static __global__ void scan_inputs_kernel(enc_scan_args a)
{
    __shared__ int first_zero, one_after, bad_value, bad_id, bad_type;
    const int b = blockIdx.x;
    const int64_t row = (int64_t)b * a.len;
    if (threadIdx.x == 0) {
        first_zero = a.len;
        one_after = INT32_MAX;
        bad_value = bad_id = bad_type = INT32_MAX;
    }
    __syncthreads();
    int length;
    if (a.mask) {
        for (int i = threadIdx.x; i < a.len; i += blockDim.x) {
            const long long v = load_int(a.mask, a.mask_dtype, row + i);
            if (v == 0)
                atomicMin(&first_zero, i);
            else if (v != 1)
                atomicMin(&bad_value, i);
        }
        __syncthreads();
        length = first_zero;
        for (int i = length + 1 + threadIdx.x; i < a.len; i += blockDim.x)
            if (load_int(a.mask, a.mask_dtype, row + i) == 1) atomicMin(&one_after, i);
    } else {
        length = a.lengths[b];
    }
    const int upto = clamp_len(length, a.len);
    for (int i = threadIdx.x; i < upto; i += blockDim.x) {
        if (a.ids) {
            const long long id = load_int(a.ids, a.ids_dtype, row + i);
            if (!in_range(id, a.vocab)) atomicMin(&bad_id, i);
        }
        if (a.types) {
            const long long ty = load_int(a.types, a.types_dtype, row + i);
            if (!in_range(ty, a.type_vocab)) atomicMin(&bad_type, i);
        }
    }
    __syncthreads();
    if (threadIdx.x == 0)
        write_report(a, b, length, upto, bad_value, one_after, bad_id, bad_type);
}

extern "C" stof_status enc_scan_inputs(stof_ctx *ctx, const enc_scan_args *a)
{
    scan_inputs_kernel<<<a->batch, 256, 0, (cudaStream_t)ctx->stream>>>(*a);
    return launched("scan_inputs_kernel");
}

/* dst[cu[b] + i] = src[b, i] for i < cu[b + 1] - cu[b] (at most len, never past cap). */
static __global__ void pack_tokens_kernel(const void *src, int dtype, const int32_t *cu, int len,
                                          int64_t cap, int32_t *dst)
{
    const int b = blockIdx.y;
    const int64_t t0 = cu[b];
    int n = cu[b + 1] - cu[b];
    n = n < 0 ? 0 : n > len ? len : n;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        if (t0 + i >= 0 && t0 + i < cap) dst[t0 + i] = (int32_t)load_int(src, dtype, (int64_t)b * len + i);
}

extern "C" stof_status enc_pack_tokens(stof_ctx *ctx, const void *src, stof_dtype dtype,
                                       const int32_t *cu_seqlens, int batch, int len,
                                       int32_t *dst, int64_t cap)
{
    int xb = (len + 255) / 256;
    dim3 grid((unsigned)(xb > 16 ? 16 : xb < 1 ? 1 : xb), (unsigned)batch);
    pack_tokens_kernel<<<grid, 256, 0, (cudaStream_t)ctx->stream>>>(src, (int)dtype, cu_seqlens, len,
                                                                    cap, dst);
    return launched("pack_tokens_kernel");
}

/* An id or type as packed: v when it indexes a table of n rows, else 0. */
static __device__ __forceinline__ int32_t in_table(long long v, int n)
{
    return in_range(v, n) ? (int32_t)v : 0;
}

/* The inclusive sum of v over threads 0..threadIdx.x of the CTA (every thread
 * calls it; warp_total holds 32 words). */
static __device__ int block_inclusive_sum(int v, int *warp_total)
{
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    for (int o = 1; o < 32; o <<= 1) {
        const int y = __shfl_up_sync(0xffffffffu, v, o);
        if (lane >= o) v += y;
    }
    if (lane == 31) warp_total[warp] = v;
    __syncthreads();
    if (warp == 0) {
        int w = lane < (int)(blockDim.x >> 5) ? warp_total[lane] : 0;
        for (int o = 1; o < 32; o <<= 1) {
            const int y = __shfl_up_sync(0xffffffffu, w, o);
            if (lane >= o) w += y;
        }
        warp_total[lane] = w;
    }
    __syncthreads();
    return v + (warp > 0 ? warp_total[warp - 1] : 0);
}

/* lens and cu of enc_pack_inputs: one CTA of 1024 threads scanning the
 * lengths 1024 at a time, the running total carried between chunks. */
static __global__ void __launch_bounds__(1024) pack_prefix_kernel(enc_pack_args a)
{
    __shared__ int warp_total[32];
    __shared__ int carry;
    if (threadIdx.x == 0) {
        carry = 0;
        a.cu[0] = 0;
    }
    for (int base = 0; base < a.batch; base += blockDim.x) {
        const int b = base + threadIdx.x;
        int v = 0;
        if (b < a.batch) {
            v = clamp_len(a.report[(int64_t)b * ENC_SCAN_WORDS + ENC_SCAN_LENGTH], a.len);
            a.lens[b] = v;
        }
        /* carry is read after the sum's barriers, which follow its last write */
        const int sum = block_inclusive_sum(v, warp_total) + carry;
        if (b < a.batch) a.cu[b + 1] = sum;
        __syncthreads(); /* carry and warp_total are read by all before they change */
        if (threadIdx.x == blockDim.x - 1) carry = sum;
    }
}

/* The rows of enc_pack_inputs: CTA (x, b) covers positions of sequence b, and
 * zeroes packed row b * L + i when it lies past the real tokens. */
static __global__ void pack_rows_kernel(enc_pack_args a)
{
    const int b = blockIdx.y;
    const int64_t start = a.cu[b], total = a.cu[a.batch];
    const int n = a.cu[b + 1] - a.cu[b]; /* in [0, L]: the lengths were clamped */
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < a.len; i += gridDim.x * blockDim.x) {
        const int64_t src = (int64_t)b * a.len + i;
        if (i < n) {
            a.out_ids[start + i] = in_table(load_int(a.ids, a.ids_dtype, src), a.vocab);
            if (a.types)
                a.out_types[start + i] =
                    in_table(load_int(a.types, a.types_dtype, src), a.type_vocab);
            a.out_pos[start + i] = i;
        }
        if (src >= total) {
            a.out_ids[src] = 0;
            if (a.types) a.out_types[src] = 0;
            a.out_pos[src] = 0;
        }
    }
}

extern "C" stof_status enc_pack_inputs(stof_ctx *ctx, const enc_pack_args *a)
{
    cudaStream_t s = (cudaStream_t)ctx->stream;
    pack_prefix_kernel<<<1, 1024, 0, s>>>(*a);
    STOF_TRY(launched("pack_prefix_kernel"));
    int xb = (a->len + 255) / 256;
    dim3 grid((unsigned)(xb > 16 ? 16 : xb < 1 ? 1 : xb), (unsigned)a->batch);
    pack_rows_kernel<<<grid, 256, 0, s>>>(*a);
    return launched("pack_rows_kernel");
}

/* ---------------------------------------------------------------- small batches */

enum { SCAN_PACK_MAX = 1024 }; /* B * L: one element per thread of one CTA */

/*
 * scan_inputs_kernel, pack_prefix_kernel and pack_rows_kernel as one CTA with
 * a thread per element of [B, L] (B * L <= SCAN_PACK_MAX): a small batch pays
 * one launch instead of three. Per-sequence reductions go through shared
 * atomics as in the scan; the report is written as the scan writes it.
 */
static __global__ void __launch_bounds__(SCAN_PACK_MAX)
    scan_pack_kernel(enc_scan_args a, enc_pack_args p)
{
    __shared__ int first_zero[SCAN_PACK_MAX], one_after[SCAN_PACK_MAX], bad_value[SCAN_PACK_MAX],
        bad_id[SCAN_PACK_MAX], bad_type[SCAN_PACK_MAX], cu[SCAN_PACK_MAX + 1];
    __shared__ int warp_total[32];
    const int B = a.batch, L = a.len, n = B * L, i = threadIdx.x;
    const int b = i < n ? i / L : 0, pos = i - b * L;
    for (int k = i; k < B; k += blockDim.x) {
        first_zero[k] = L;
        one_after[k] = bad_value[k] = bad_id[k] = bad_type[k] = INT32_MAX;
    }
    __syncthreads();
    const long long v = i < n && a.mask ? load_int(a.mask, a.mask_dtype, i) : 1;
    if (i < n && a.mask) {
        if (v == 0)
            atomicMin(&first_zero[b], pos);
        else if (v != 1)
            atomicMin(&bad_value[b], pos);
    }
    __syncthreads();
    const int length = a.mask ? first_zero[b] : a.lengths[b];
    const int upto = clamp_len(length, L);
    long long id = 0, ty = 0;
    if (i < n) {
        if (a.mask && pos > length && v == 1) atomicMin(&one_after[b], pos);
        if (a.ids) id = load_int(a.ids, a.ids_dtype, i);
        if (a.types) ty = load_int(a.types, a.types_dtype, i);
        if (pos < upto && a.ids && !in_range(id, a.vocab)) atomicMin(&bad_id[b], pos);
        if (pos < upto && a.types && !in_range(ty, a.type_vocab)) atomicMin(&bad_type[b], pos);
    }
    __syncthreads();
    /* One thread per sequence: the report, then the prefix sums of the clamped lengths. */
    int own = 0;
    if (i < B) {
        const int len_i = a.mask ? first_zero[i] : a.lengths[i];
        const int upto_i = clamp_len(len_i, L);
        write_report(a, i, len_i, upto_i, bad_value[i], one_after[i], bad_id[i], bad_type[i]);
        own = upto_i;
        p.lens[i] = upto_i;
    }
    const int sum = block_inclusive_sum(own, warp_total);
    if (i < B) {
        cu[i + 1] = sum;
        p.cu[i + 1] = sum;
    }
    if (i == 0) {
        cu[0] = 0;
        p.cu[0] = 0;
    }
    __syncthreads();
    if (i < n) {
        if (pos < cu[b + 1] - cu[b]) {
            const int64_t at = cu[b] + pos;
            p.out_ids[at] = in_table(id, p.vocab);
            if (p.types) p.out_types[at] = in_table(ty, p.type_vocab);
            p.out_pos[at] = pos;
        }
        if (i >= cu[B]) {
            p.out_ids[i] = 0;
            if (p.types) p.out_types[i] = 0;
            p.out_pos[i] = 0;
        }
    }
}

extern "C" bool enc_scan_pack_fits(int batch, int len)
{
    return batch > 0 && len > 0 && (int64_t)batch * len <= SCAN_PACK_MAX;
}

extern "C" stof_status enc_scan_pack(stof_ctx *ctx, const enc_scan_args *a, const enc_pack_args *p)
{
    const int n = a->batch * a->len, threads = (n + 31) / 32 * 32;
    scan_pack_kernel<<<1, threads, 0, (cudaStream_t)ctx->stream>>>(*a, *p);
    return launched("scan_pack_kernel");
}
