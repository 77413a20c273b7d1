/*
 * decoder_rows.cu — the memory-bound ops the decoder families and ModernBERT
 * add to BERT's: rotary embeddings applied in place to the q and k heads of
 * the packed QKV rows, the gated linear unit act(a) * b of SwiGLU / GeGLU,
 * embeddings without a norm (token, or token + learned position), and the
 * gather of each sequence's last packed row (last-token pooling, the LM
 * head's input).
 *
 * RoPE reads (cos, sin) from the table of rope_epi.cuh (fuse_rope_table),
 * which rope_table_kernel builds once per inv_freq set with the angle and
 * sincosf HF takes; the rotation is fp32, rounded once. Device-side indices
 * (token ids, positions, cu_seqlens) are checked, never trusted.
 */
#include "fuse/internal.h"
#include "fuse/vec.cuh"
#include "fuse/rows.cuh"
#include "fuse/rope_epi.cuh"

/* ---------------------------------------------------------------- RoPE */

/* The frequencies of one set, passed by value: the table's build needs
 * no device copy of them. */
typedef struct rope_freqs {
    float f[FUSE_ROPE_MAX_HALF];
} rope_freqs;

/* cs[p][i] = rope_cos_sin(p, inv_freq[i]) for p < positions, then the NaN
 * row; one thread per entry. */
__global__ void rope_table_kernel(float2 *cs, int positions, int half, const rope_freqs freqs)
{
    const int64_t n = (int64_t)(positions + 1) * half;
    for (int64_t k = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; k < n;
         k += (int64_t)gridDim.x * blockDim.x) {
        const int p = (int)(k / half), i = (int)(k - (int64_t)p * half);
        cs[k] = p < positions ? rope_cos_sin(p, freqs.f[i]) : make_float2(nanf(""), nanf(""));
    }
}

extern "C" stof_status fuse_launch_rope_table(stof_ctx *ctx, const float *inv_freq_host,
                                              int rot_dim, int positions, float *cs)
{
    rope_freqs freqs;
    const int half = rot_dim / 2;
    for (int i = 0; i < FUSE_ROPE_MAX_HALF; i++)
        freqs.f[i] = i < half ? inv_freq_host[i] : 0.f;
    int64_t blocks = stof_cdiv((int64_t)(positions + 1) * half, 256),
            cap = (int64_t)ctx->sm_count * 8;
    if (blocks > cap) blocks = cap;
    rope_table_kernel<<<(unsigned)blocks, 256, 0, (cudaStream_t)ctx->stream>>>(
        (float2 *)cs, positions, half, freqs);
    return STOF_CUDA(cudaGetLastError());
}

/* One CTA per token: the row of its position in the table (every head turns
 * by the same angles), then the heads' pairs (x[h, i], x[h, i + half]), eight
 * at a time in 16-byte vectors when V (every row, head and half 16-byte
 * aligned; their (cos, sin) in four 16-byte loads), else one at a time. */
template <typename T, bool V>
__global__ void rope_kernel(T *x, int heads, int head_dim, int64_t row_stride,
                            const int32_t *__restrict__ positions, const float2 *__restrict__ table,
                            int table_positions, int half)
{
    const int64_t t = blockIdx.x;
    const float2 *cs = table + (size_t)rope_table_row(__ldg(positions + t), table_positions) * half;
    T *row = x + t * row_stride;
    const int per_head = V ? half / 8 : half;
    for (int w = threadIdx.x; w < heads * per_head; w += blockDim.x) {
        const int h = w / per_head, i0 = (w - h * per_head) * (V ? 8 : 1);
        T *p = row + (int64_t)h * head_dim + i0;
        if constexpr (V) {
            float4 c[4];
#pragma unroll
            for (int e = 0; e < 4; e++)
                c[e] = rope_load2(cs + i0 + 2 * e);
            float a[8], b[8];
            load8<T>(a, p);
            load8<T>(b, p + half);
#pragma unroll
            for (int e = 0; e < 4; e++) {
                rope_turn(a[2 * e], b[2 * e], make_float2(c[e].x, c[e].y));
                rope_turn(a[2 * e + 1], b[2 * e + 1], make_float2(c[e].z, c[e].w));
            }
            store8<T>(p, a);
            store8<T>(p + half, b);
        } else {
            float a = (float)p[0], b = (float)p[half];
            rope_turn(a, b, cs[i0]);
            p[0] = (T)a;
            p[half] = (T)b;
        }
    }
}

template <typename T>
static stof_status launch_rope_t(stof_ctx *ctx, void *x, int64_t tokens, int heads, int head_dim,
                                 int64_t row_stride, const int32_t *positions,
                                 const fuse_rope_table *tab)
{
    const int half = tab->rot_dim / 2;
    STOF_REQUIRE(tokens <= INT32_MAX, STOF_ERR_UNSUPPORTED,
                 "fuse_rope: %lld tokens (one CTA each: at most 2^31 - 1)", (long long)tokens);
    const bool v = half % 8 == 0 && head_dim % 8 == 0 && row_stride % 8 == 0 &&
                   ((uintptr_t)x & 15u) == 0;
    const int work = heads * (v ? half / 8 : half);
    const int threads = work >= 256 ? 256 : (work + 31) / 32 * 32;
    cudaStream_t st = (cudaStream_t)ctx->stream;
    const float2 *cs = (const float2 *)tab->cs;
    if (v)
        rope_kernel<T, true><<<(unsigned)tokens, threads, 0, st>>>(
            (T *)x, heads, head_dim, row_stride, positions, cs, tab->positions, half);
    else
        rope_kernel<T, false><<<(unsigned)tokens, threads, 0, st>>>(
            (T *)x, heads, head_dim, row_stride, positions, cs, tab->positions, half);
    return STOF_CUDA(cudaGetLastError());
}

extern "C" stof_status fuse_launch_rope(stof_ctx *ctx, stof_dtype dtype, void *x, int64_t tokens,
                                        int heads, int head_dim, int64_t row_stride,
                                        const int32_t *positions, const fuse_rope_table *table)
{
    if (dtype == STOF_BF16)
        return launch_rope_t<__nv_bfloat16>(ctx, x, tokens, heads, head_dim, row_stride, positions,
                                            table);
    return launch_rope_t<__half>(ctx, x, tokens, heads, head_dim, row_stride, positions, table);
}

/* ---------------------------------------------------------------- GLU */

/* y[r, 8v..] = act(a) * b with a = x[r, 16v..] and b = x[r, 16v + 8..] (the
 * interleaved layout of fuse.h, FUSE_GLU_BLOCK 8), 8-element vectors. */
static_assert(FUSE_GLU_BLOCK == 8, "one 8-element vector per half");

template <typename T>
__global__ void glu_kernel(const T *__restrict__ x, T *__restrict__ y, int64_t rows, int inter,
                           int act)
{
    const int rv = inter / 8;
    const int64_t n = rows * rv;
    for (int64_t k = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; k < n;
         k += (int64_t)gridDim.x * blockDim.x) {
        const int64_t r = k / rv;
        const int c = (int)(k % rv) * 8;
        float a[8], b[8];
        load8(a, x + r * 2 * inter + 2 * c);
        load8(b, x + r * 2 * inter + 2 * c + FUSE_GLU_BLOCK);
#pragma unroll
        for (int j = 0; j < 8; j++)
            a[j] = glu_apply(a[j], b[j], act);
        store8(y + r * inter + c, a);
    }
}

extern "C" stof_status fuse_launch_glu(stof_ctx *ctx, stof_dtype dtype, int64_t rows, int inter,
                                       const void *x, stof_act act, void *y)
{
    int64_t blocks = stof_cdiv(rows * (inter / 8), 256), cap = (int64_t)ctx->sm_count * 8;
    if (blocks > cap) blocks = cap;
    cudaStream_t s = (cudaStream_t)ctx->stream;
    if (dtype == STOF_BF16)
        glu_kernel<__nv_bfloat16><<<(unsigned)blocks, 256, 0, s>>>(
            (const __nv_bfloat16 *)x, (__nv_bfloat16 *)y, rows, inter, (int)act);
    else
        glu_kernel<__half><<<(unsigned)blocks, 256, 0, s>>>((const __half *)x, (__half *)y, rows,
                                                            inter, (int)act);
    return STOF_CUDA(cudaGetLastError());
}

/* ---------------------------------------------------------------- embeddings without a norm */

/* A warp per token: out[t] = word[ids[t]] (+ position[positions[t]]); an
 * index outside its table gives a row of NaN instead of a read outside it. */
template <typename T>
__global__ void embed_sum_kernel(const T *__restrict__ word, int vocab,
                                 const T *__restrict__ position, int max_pos, int hidden,
                                 const int32_t *__restrict__ ids,
                                 const int32_t *__restrict__ positions, int64_t tokens, T *out)
{
    const int64_t t = (int64_t)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    const int lane = threadIdx.x % 32;
    if (t >= tokens) return;
    const int id = ids[t], pos = position ? positions[t] : 0;
    const bool bad = id < 0 || id >= vocab || (position && (pos < 0 || pos >= max_pos));
    T *o = out + t * hidden;
    for (int c = lane * 8; c < hidden; c += 32 * 8) {
        float v[8];
        if (bad) {
#pragma unroll
            for (int j = 0; j < 8; j++)
                v[j] = __int_as_float(0x7fc00000);
        } else {
            load8(v, word + (int64_t)id * hidden + c);
            if (position) {
                float p[8];
                load8(p, position + (int64_t)pos * hidden + c);
#pragma unroll
                for (int j = 0; j < 8; j++)
                    v[j] += p[j];
            }
        }
        store8(o + c, v);
    }
}

extern "C" stof_status fuse_launch_embed_sum(stof_ctx *ctx, stof_dtype dtype, const void *word,
                                             int vocab, const void *position, int max_pos,
                                             int hidden, const int32_t *ids,
                                             const int32_t *positions, int64_t tokens, void *out)
{
    unsigned blocks = (unsigned)stof_cdiv(tokens, 4);
    cudaStream_t s = (cudaStream_t)ctx->stream;
    if (dtype == STOF_BF16)
        embed_sum_kernel<__nv_bfloat16><<<blocks, 128, 0, s>>>(
            (const __nv_bfloat16 *)word, vocab, (const __nv_bfloat16 *)position, max_pos, hidden,
            ids, positions, tokens, (__nv_bfloat16 *)out);
    else
        embed_sum_kernel<__half><<<blocks, 128, 0, s>>>((const __half *)word, vocab,
                                                        (const __half *)position, max_pos, hidden,
                                                        ids, positions, tokens, (__half *)out);
    return STOF_CUDA(cudaGetLastError());
}

/* ---------------------------------------------------------------- last token */

/* A CTA per sequence: out[b] = packed row cu[b + 1] - 1 (zeros when empty). */
template <typename T, typename O>
__global__ void gather_last_kernel(const T *__restrict__ packed, const int32_t *__restrict__ cu,
                                   int width, int64_t cap, O *__restrict__ out)
{
    const int b = blockIdx.x;
    int64_t start;
    const int n = seq_extent(cu, b, INT32_MAX, &start);
    const int64_t row = start + n - 1;
    const bool real = n > 0 && row < cap;
    for (int c = threadIdx.x * 8; c < width; c += blockDim.x * 8) {
        float v[8];
        if (real) {
            load8(v, packed + row * width + c);
        } else {
#pragma unroll
            for (int j = 0; j < 8; j++)
                v[j] = 0.f;
        }
        O *o = out + (int64_t)b * width + c;
        if constexpr (sizeof(O) == 4) {
#pragma unroll
            for (int j = 0; j < 8; j++)
                o[j] = v[j];
        } else {
            store8(o, v);
        }
    }
}

template <typename T>
static stof_status launch_gather_last_t(stof_ctx *ctx, const void *packed, const int32_t *cu,
                                        int batch, int width, int64_t cap, bool f32, void *out)
{
    cudaStream_t s = (cudaStream_t)ctx->stream;
    if (f32)
        gather_last_kernel<T, float>
            <<<batch, 128, 0, s>>>((const T *)packed, cu, width, cap, (float *)out);
    else
        gather_last_kernel<T, T><<<batch, 128, 0, s>>>((const T *)packed, cu, width, cap, (T *)out);
    return STOF_CUDA(cudaGetLastError());
}

extern "C" stof_status fuse_launch_gather_last(stof_ctx *ctx, stof_dtype in_dtype,
                                               const void *packed, const int32_t *cu_seqlens,
                                               int batch, int width, int64_t packed_cap,
                                               stof_dtype out_dtype, void *out)
{
    bool f32 = out_dtype == STOF_F32;
    if (in_dtype == STOF_BF16)
        return launch_gather_last_t<__nv_bfloat16>(ctx, packed, cu_seqlens, batch, width,
                                                   packed_cap, f32, out);
    return launch_gather_last_t<__half>(ctx, packed, cu_seqlens, batch, width, packed_cap, f32,
                                        out);
}
