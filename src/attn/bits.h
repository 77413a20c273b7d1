/*
 * bits.h — bit tricks on 64-bit visibility words, shared by the row-wise
 * kernel (device) and its CPU unit test (host): the words of a tile row name
 * the visible keys, and a warp hands the set bits out to its lanes in order.
 */
#ifndef STOF_ATTN_BITS_H
#define STOF_ATTN_BITS_H

#include <stdint.h>

#ifdef __CUDACC__
#define ATTN_HD static __host__ __device__ __forceinline__
#else
#define ATTN_HD static inline
#endif

ATTN_HD int attn_popc64(uint64_t w)
{
#ifdef __CUDA_ARCH__
    return __popcll((unsigned long long)w);
#else
    return __builtin_popcountll((unsigned long long)w);
#endif
}

/* Position of the n-th (0-based) set bit of w; requires n < popcount(w).
 * Binary search on popcounts: five steps, no loop, no table. */
ATTN_HD int attn_nth_set_bit(uint64_t w, int n)
{
    int pos = 0;
    int c = attn_popc64(w & 0xffffffffull);
    if (n >= c) {
        n -= c;
        w >>= 32;
        pos += 32;
    }
    c = attn_popc64(w & 0xffffull);
    if (n >= c) {
        n -= c;
        w >>= 16;
        pos += 16;
    }
    c = attn_popc64(w & 0xffull);
    if (n >= c) {
        n -= c;
        w >>= 8;
        pos += 8;
    }
    c = attn_popc64(w & 0xfull);
    if (n >= c) {
        n -= c;
        w >>= 4;
        pos += 4;
    }
    c = attn_popc64(w & 0x3ull);
    if (n >= c) {
        n -= c;
        w >>= 2;
        pos += 2;
    }
    return pos + (n >= (int)(w & 1ull) ? 1 : 0);
}

/* w without its lowest n set bits (0 when n >= popcount(w)). */
ATTN_HD uint64_t attn_drop_low_bits(uint64_t w, int n)
{
    if (n <= 0) return w;
    if (n >= attn_popc64(w)) return 0;
    int p = attn_nth_set_bit(w, n - 1); /* < 63: a higher set bit exists */
    return w & ~((2ull << p) - 1ull);
}

/* Bits 0 .. n-1 set (n clamped to [0, 64]). */
ATTN_HD uint64_t attn_low_mask(int n)
{
    if (n <= 0) return 0;
    if (n >= 64) return ~0ull;
    return (1ull << n) - 1ull;
}

#endif /* STOF_ATTN_BITS_H */
