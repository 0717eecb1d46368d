/* The sketch's key hash: one 64-bit multiply-fold hash for every length (XXH3-style).
 * Keys of HK_SHORT_KEY bytes or more are folded in 16-byte blocks (independent, so the CPU
 * overlaps their multiplies); shorter keys are read as two overlapping words and folded
 * once. The 64-bit result H places the key in its rows; its fold to 32 bits is the
 * fingerprint (and sketch_hash). Specification in keyhash.c and docs/sketch.md.
 *
 * Plain C99 (128-bit product via __int128 where the compiler has it, else four 32-bit
 * products; same result). The pure-Python twin (_sketch_py) computes the same function,
 * so both place keys in the same buckets. */
#ifndef HOTKEYD_KEYHASH_H
#define HOTKEYD_KEYHASH_H

#include <stddef.h>
#include <stdint.h>

#define HK_SHORT_KEY 16u

/* MurmurHash3's 64-bit finalizer (the sketch also derives row indexes with it). */
static inline uint64_t hk_fmix64(uint64_t x) {
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ULL;
    x ^= x >> 33;
    return x;
}

/* The specification, shared with the twin (all arithmetic mod 2^64):
 *   s64 = seed * P0
 *   keys of 16 bytes or more:  acc = len * P1 + s64
 *     for each full 16-byte block i (little-endian words a, b):
 *       acc += fold(a ^ (S[2i mod 16] + s64 + i), b ^ (S[2i+1 mod 16] - s64 - i))
 *     if len is not a multiple of 16, the last 16 bytes (a, b) once more:
 *       acc += fold(a ^ (S[16] + s64), b ^ (S[17] - s64))
 *   keys under 16 bytes: two little-endian words a, b read from the key
 *     (8-15 bytes: the first 8 and the last 8; 4-7: the first 4 and the last 4;
 *      1-3: a = k[0] | k[len/2] << 8 | k[len-1] << 16, b = 0; empty: a = b = 0),
 *     lo = a ^ (S[16] + s64), hi = b ^ (S[17] - s64),
 *     acc = len * P1 + s64 + bswap64(lo) + hi + fold(lo, hi)
 *   H = fmix64(acc); fingerprint = (H ^ (H >> 32)) mod 2^32
 * where fold(x, y) = low64(x*y) ^ high64(x*y) of the 128-bit product and S are the
 * first 18 outputs of SplitMix64 from state 0. Short keys take one multiply and no loop
 * (12 bytes: ~4 ns less latency than MurmurHash3, which the per-call path waits on). */
#define HK_P0 0x9E3779B97F4A7C15ull
#define HK_P1 0xC2B2AE3D27D4EB4Full

static const uint64_t HK_S[18] = {
    0xE220A8397B1DCDAFull, 0x6E789E6AA1B965F4ull, 0x06C45D188009454Full, 0xF88BB8A8724C81ECull,
    0x1B39896A51A8749Bull, 0x53CB9F0C747EA2EAull, 0x2C829ABE1F4532E1ull, 0xC584133AC916AB3Cull,
    0x3EE5789041C98AC3ull, 0xF3B8488C368CB0A6ull, 0x657EECDD3CB13D09ull, 0xC2D326E0055BDEF6ull,
    0x8621A03FE0BBDB7Bull, 0x8E1F7555983AA92Full, 0xB54E0F1600CC4D19ull, 0x84BB3F97971D80ABull,
    0x7D29825C75521255ull, 0xC3CF17102B7F7F86ull,
};

static inline uint64_t hk_load_le64(const unsigned char *p) {
    return (uint64_t)p[0] | ((uint64_t)p[1] << 8) | ((uint64_t)p[2] << 16) |
           ((uint64_t)p[3] << 24) | ((uint64_t)p[4] << 32) | ((uint64_t)p[5] << 40) |
           ((uint64_t)p[6] << 48) | ((uint64_t)p[7] << 56);
}

static inline uint64_t hk_load_le32(const unsigned char *p) {
    return (uint64_t)p[0] | ((uint64_t)p[1] << 8) | ((uint64_t)p[2] << 16) | ((uint64_t)p[3] << 24);
}

static inline uint64_t hk_bswap64(uint64_t x) {
#if defined(__GNUC__) || defined(__clang__)
    return __builtin_bswap64(x);
#else
    x = ((x & 0x00FF00FF00FF00FFull) << 8) | ((x >> 8) & 0x00FF00FF00FF00FFull);
    x = ((x & 0x0000FFFF0000FFFFull) << 16) | ((x >> 16) & 0x0000FFFF0000FFFFull);
    return (x << 32) | (x >> 32);
#endif
}

static inline uint64_t hk_fold(uint64_t x, uint64_t y) {
#ifdef __SIZEOF_INT128__
    __uint128_t r = (__uint128_t)x * y;
    return (uint64_t)r ^ (uint64_t)(r >> 64);
#else
    uint64_t xl = x & 0xFFFFFFFFu, xh = x >> 32, yl = y & 0xFFFFFFFFu, yh = y >> 32;
    uint64_t ll = xl * yl, lh = xl * yh, hl = xh * yl, hh = xh * yh;
    uint64_t mid = (ll >> 32) + (lh & 0xFFFFFFFFu) + (hl & 0xFFFFFFFFu);
    uint64_t lo = (mid << 32) | (ll & 0xFFFFFFFFu);
    uint64_t hi = hh + (lh >> 32) + (hl >> 32) + (mid >> 32);
    return lo ^ hi;
#endif
}

static inline uint64_t hk_long_hash64(const unsigned char *p, size_t len, uint64_t s64) {
    const size_t nblocks = len / 16;
    uint64_t acc = (uint64_t)len * HK_P1 + s64;
    size_t i;
    for (i = 0; i < nblocks; i++) {
        const unsigned char *b = p + i * 16;
        acc += hk_fold(hk_load_le64(b) ^ (HK_S[(2 * i) & 15] + s64 + i),
                       hk_load_le64(b + 8) ^ (HK_S[(2 * i + 1) & 15] - s64 - i));
    }
    if (len & 15u)
        acc += hk_fold(hk_load_le64(p + len - 16) ^ (HK_S[16] + s64),
                       hk_load_le64(p + len - 8) ^ (HK_S[17] - s64));
    return hk_fmix64(acc);
}

static inline uint64_t hk_short_hash64(const unsigned char *p, size_t len, uint64_t s64) {
    uint64_t a, b, lo, hi;
    if (len >= 8) {
        a = hk_load_le64(p);
        b = hk_load_le64(p + len - 8);
    } else if (len >= 4) {
        a = hk_load_le32(p);
        b = hk_load_le32(p + len - 4);
    } else if (len) {
        a = (uint64_t)p[0] | ((uint64_t)p[len >> 1] << 8) | ((uint64_t)p[len - 1] << 16);
        b = 0;
    } else {
        a = b = 0;
    }
    lo = a ^ (HK_S[16] + s64);
    hi = b ^ (HK_S[17] - s64);
    return hk_fmix64((uint64_t)len * HK_P1 + s64 + hk_bswap64(lo) + hi + hk_fold(lo, hi));
}

static inline uint64_t hk_key_hash64(const void *key, size_t len, uint32_t seed) {
    const uint64_t s64 = (uint64_t)seed * HK_P0;
    return len < HK_SHORT_KEY ? hk_short_hash64((const unsigned char *)key, len, s64)
                              : hk_long_hash64((const unsigned char *)key, len, s64);
}

/* The 32-bit fingerprint of a key hash. */
static inline uint32_t hk_fingerprint(uint64_t H) { return (uint32_t)(H ^ (H >> 32)); }

/* hk_fingerprint(hk_key_hash64(...)): sketch_hash. */
uint32_t hk_key_hash(const void *key, size_t len, uint32_t seed);

#endif
