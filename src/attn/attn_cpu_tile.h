/*
 * attn_cpu_tile.h — one tile row of the CPU attention (attn_cpu_fast.c), written
 * once over GCC vector types and included once per instruction set, each
 * time under that set's target pragma, with
 *     TV, TVI   float and int32 vectors of TW lanes
 *     TR        query rows per micro-kernel call
 *     TSFX      the suffix of the functions it defines
 *     TEXP2, TVMAX, THMAX, THSUM   (optional) the set's own 2^x, max,
 *               lane max and lane sum
 * (TW * TNV = FAST_CHUNK columns per call, TNV defined here); it undefines
 * them all at its end, ready for the next set. The
 * micro-kernel keeps a TR x FAST_CHUNK block of C in registers and streams
 * one row of B per step, so one body serves S = Q K^T (B: K^T tiles) and
 * O += P V (B: V tiles).
 */

#define TNV (FAST_CHUNK / TW)
#define TFN(name) TFN_(name, TSFX)
#define TFN_(name, sfx) TFN__(name, sfx)
#define TFN__(name, sfx) name##_##sfx

#define TLOAD(p) (*(const TV *)(const void *)(p))
#define TSTORE(p, x) (*(TV *)(void *)(p) = (x))

static inline __attribute__((always_inline)) TV TFN(vsel)(TVI keep, TV a, TV b)
{
    return (TV)(((TVI)a & keep) | ((TVI)b & ~keep));
}

/* max(a, b), b when either is NaN (as maxps); TVMAX replaces it when defined. */
#ifndef TVMAX
#define TVMAX TFN(vmax)
static inline __attribute__((always_inline)) TV TFN(vmax)(TV a, TV b)
{
    return TFN(vsel)(a > b, a, b);
}
#endif

/* TEXP2, when the includer defines it, is the set's own 2^x with the same
 * contract as the one below. */
#ifndef TEXP2
#define TEXP2 TFN(vexp2)
/* 2^x, rel. error ~2e-7: x = n + f with n = round(x), |f| <= 1/2, 2^f by
 * Cephes' exp2f polynomial, 2^n built in the exponent field. Inputs below
 * -127 (masked scores among them: -inf) give exactly 0; NaN stays NaN. */
static inline __attribute__((always_inline)) TV TFN(vexp2)(TV x)
{
    const TV lo = (TV){0} - 127.0f, hi = (TV){0} + 127.0f;
    x = TFN(vsel)(x < lo, lo, x);
    x = TFN(vsel)(x > hi, hi, x);
    TV xr = x + 0.5f;
    TVI n = __builtin_convertvector(xr, TVI);
    TV fn = __builtin_convertvector(n, TV);
    n += (TVI)(fn > xr); /* truncation rounded up for negatives: step down */
    TV f = x - __builtin_convertvector(n, TV);
    TV p = f * 1.535336188319500e-4f + 1.339887440266574e-3f;
    p = p * f + 9.618437357674640e-3f;
    p = p * f + 5.550332471162809e-2f;
    p = p * f + 2.402264791363012e-1f;
    p = p * f + 6.931472028550421e-1f;
    p = p * f + 1.0f;
    TVI e = (n + 127) << 23;
    return p * (TV)e;
}
#endif

/* Lane max and lane sum; THMAX and THSUM replace them when defined. */
#ifndef THMAX
#define THMAX TFN(hmax)
#define THSUM TFN(hsum)
static inline __attribute__((always_inline)) float TFN(hmax)(TV x)
{
    float lanes[TW], m;
    memcpy(lanes, &x, sizeof lanes);
    m = lanes[0];
    for (int k = 1; k < TW; k++)
        m = lanes[k] > m ? lanes[k] : m;
    return m;
}

static inline __attribute__((always_inline)) float TFN(hsum)(TV x)
{
    float lanes[TW], s = 0.0f;
    memcpy(lanes, &x, sizeof lanes);
    for (int k = 0; k < TW; k++)
        s += lanes[k];
    return s;
}
#endif

/* C[TR, FAST_CHUNK] (+)= A[TR, K] B[K, FAST_CHUNK]; B and C rows aligned. */
static inline __attribute__((always_inline)) void TFN(micro)(int K, const float *A, int64_t lda,
                                                             const float *B, int64_t ldb, float *C,
                                                             int64_t ldc, int accumulate)
{
    TV c[TR][TNV];
#pragma GCC unroll 16
    for (int r = 0; r < TR; r++)
#pragma GCC unroll 16
        for (int v = 0; v < TNV; v++)
            c[r][v] = accumulate ? TLOAD(C + r * ldc + v * TW) : (TV){0};
#pragma GCC unroll 4 /* the loop's compare and branch cost ~3-5% when not unrolled */
    for (int k = 0; k < K; k++) {
        TV b[TNV];
#pragma GCC unroll 16
        for (int v = 0; v < TNV; v++)
            b[v] = TLOAD(B + (int64_t)k * ldb + v * TW);
#pragma GCC unroll 16
        for (int r = 0; r < TR; r++) {
            float a = A[r * lda + k];
#pragma GCC unroll 16
            for (int v = 0; v < TNV; v++)
                c[r][v] += a * b[v];
        }
    }
#pragma GCC unroll 16
    for (int r = 0; r < TR; r++)
#pragma GCC unroll 16
        for (int v = 0; v < TNV; v++)
            TSTORE(C + r * ldc + v * TW, c[r][v]);
}

/* C[rows, cols] (+)= A[rows, K] B[K, cols]: rows a multiple of TR, cols of FAST_CHUNK. */
static void TFN(gemm)(int rows, int cols, int K, const float *A, int64_t lda, const float *B,
                      int64_t ldb, float *C, int64_t ldc, int accumulate)
{
    for (int c0 = 0; c0 < cols; c0 += FAST_CHUNK)
        for (int r0 = 0; r0 < rows; r0 += TR)
            TFN(micro)(K, A + r0 * lda, lda, B + c0, ldb, C + r0 * ldc + c0, ldc, accumulate);
}

/* Scores of row i of a tile made -inf where the tile hides them: bitmap row
 * `bm` (NULL: a full tile) and columns at or past `width`. */
static inline void TFN(mask_row)(float *s, const uint64_t *bm, int width, int cols)
{
    int32_t lane_bits[TW];
    for (int k = 0; k < TW; k++)
        lane_bits[k] = (int32_t)1 << k;
    TVI lanes;
    memcpy(&lanes, lane_bits, sizeof lanes);
    const TV ninf = (TV){0} - INFINITY;
    for (int j = 0; j < cols; j += TW) {
        uint32_t word = 0;
        if (j < width) {
            uint64_t w = bm ? bm[j >> 6] >> (j & 63) : ~0ull;
            int left = width - j;
            if (left < TW) w &= (1ull << left) - 1;
            word = (uint32_t)(w & ((1ull << TW) - 1));
        }
        TVI keep = ((TVI){0} + (int32_t)word) & lanes;
        keep = keep != 0;
        TSTORE(s + j, TFN(vsel)(keep, TLOAD(s + j), ninf));
    }
}

/* Online softmax of one row of scores (log2 domain) into probabilities, in
 * place; updates the row's running max *m and sum *l and rescales its
 * output row o. A row with nothing visible yet keeps m = -inf, P = 0. */
static inline void TFN(softmax_row)(float *s, int cols, float *m, float *l, float *o, int dp)
{
    TV mx = (TV){0} - INFINITY;
    for (int j = 0; j < cols; j += TW)
        mx = TVMAX(mx, TLOAD(s + j));
    float row_max = THMAX(mx);
    float m_new = row_max > *m ? row_max : *m;
    if (m_new == -INFINITY) {
        memset(s, 0, (size_t)cols * sizeof(float));
        return;
    }
    TV sum = (TV){0};
    for (int j = 0; j < cols; j += TW) {
        TV p = TEXP2(TLOAD(s + j) - m_new);
        TSTORE(s + j, p);
        sum += p;
    }
    float alpha = exp2f(*m - m_new);
    if (alpha != 1.0f)
        for (int d = 0; d < dp; d += TW)
            TSTORE(o + d, TLOAD(o + d) * alpha);
    *l = *l * alpha + THSUM(sum);
    *m = m_new;
}

/* One query tile row of one sequence: gather, walk the row's tiles, store. */
static void TFN(tile_row)(const fast_job *j, const fast_seq *q, int r, fast_scratch *w)
{
    const mask_tiles *t = j->t;
    const fast_kv *kv = &j->kvs[q->kv];
    int tm = t->tile_m, tn = t->tile_n, tnp = j->tnp, dp = j->dp, lds = j->lds;
    int row0 = r * tm;
    int rows = q->rows_exist - row0 < tm ? q->rows_exist - row0 : tm;
    int vis = q->rows_visible - row0;
    vis = vis < 0 ? 0 : (vis > rows ? rows : vis);
    int rr = (vis + TR - 1) / TR * TR;
    fast_gather_q(j, q, row0, vis, rr, w->q);
    for (int i = 0; i < rr; i++) {
        w->m[i] = -INFINITY;
        w->l[i] = 0.0f;
    }
    memset(w->o, 0, (size_t)rr * dp * sizeof(float));
    int32_t e0 = q->row_ptr[r], e1 = q->row_ptr[r + 1];
    for (int32_t e = vis > 0 ? e0 : e1, n; e < e1; e += n) {
        int c = t->col[e];
        int width = kv->klim - c * tn;
        if (width <= 0) break; /* columns ascend: the rest lie past the keys too */
        if (width > tn) width = tn;
        int32_t bits = t->bits[e];
        /* a run of consecutive full tiles is one block: fewer softmax passes */
        n = 1;
        if (bits < 0 && width == tnp)
            while (n < j->run_tiles && e + n < e1 && t->col[e + n] == c + n && t->bits[e + n] < 0 &&
                   kv->klim - (c + n) * tn >= tn)
                n++;
        int cols = n > 1 ? n * tnp : (width + FAST_CHUNK - 1) / FAST_CHUNK * FAST_CHUNK;
        for (int g = 0; g < n; g++) {
            const float *kt = kv->kt + (int64_t)(c + g) * dp * tnp;
            TFN(gemm)(rr, n > 1 ? tnp : cols, dp, w->q, dp, kt, tnp, w->s + g * tnp, lds, 0);
        }
        int masked = n == 1 && (bits >= 0 || width < cols);
        for (int i = 0; i < vis; i++) {
            float *s = w->s + (int64_t)i * lds;
            if (masked) {
                const uint64_t *bm =
                    bits >= 0 ? t->bitmap + ((int64_t)bits * tm + i) * t->words_per_row : NULL;
                TFN(mask_row)(s, bm, width, cols);
            }
            TFN(softmax_row)(s, cols, &w->m[i], &w->l[i], w->o + (int64_t)i * dp, dp);
        }
        for (int i = vis; i < rr; i++)
            memset(w->s + (int64_t)i * lds, 0, (size_t)cols * sizeof(float));
        TFN(gemm)(rr, dp, cols, w->s, lds, kv->v + (int64_t)c * tnp * dp, dp, w->o, dp, 1);
    }
    fast_store_o(j, q, row0, rows, vis, w);
}

#undef TV
#undef TVI
#undef TW
#undef TR
#undef TSFX
#undef TEXP2
#undef TVMAX
#undef THMAX
#undef THSUM
#undef TNV
#undef TFN
#undef TFN_
#undef TFN__
#undef TLOAD
#undef TSTORE
