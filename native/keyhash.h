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

/* The key: everything the hash takes from the seed, derived once per sketch (no work per
 * key or per byte). The seed is a per-process secret of 64 bits (the daemon draws it from
 * os.urandom at start): a crafted collision must guess it. */
typedef struct {
    uint64_t s64; /* offset added to every key's accumulator */
    uint64_t last[2]; /* t[16], t[17] of the spec: the last block and short keys (first, so
                         a short key's hash reads one cache line of the key) */
    uint64_t step; /* added to the block masks after every 8 blocks (odd) */
    uint64_t t[16]; /* block masks (block i: t[2(i mod 8)], t[2(i mod 8)+1]) */
} hk_key;

/* The specification, shared with the twin (all arithmetic mod 2^64):
 *   key from seed: x = seed; s64, t[0..17], step (| 1) are the next 20 SplitMix64 outputs
 *   keys of 16 bytes or more:  acc = len * P1 + s64
 *     for each full 16-byte block i (little-endian words a, b), tw = (i / 8) * step:
 *       acc += mix(a, b, t[2(i mod 8)] + tw, t[2(i mod 8) + 1] - tw)
 *     if len is not a multiple of 16, the last 16 bytes (a, b) once more:
 *       acc += mix(a, b, t[16], t[17])
 *   keys under 16 bytes: two little-endian words a, b read from the key
 *     (8-15 bytes: the first 8 and the last 8; 4-7: the first 4 and the last 4;
 *      1-3: a = k[0] | k[len/2] << 8 | k[len-1] << 16, b = 0; empty: a = b = 0),
 *     lo = a ^ t[16], hi = b ^ t[17],
 *     acc = len * P1 + s64 + bswap64(lo) + hi + fold(lo, hi)
 *   H = fmix64(acc); fingerprint = (H ^ (H >> 32)) mod 2^32
 * where mix(a, b, ka, kb) = fold(a ^ ka, b ^ kb) + (a ^ rotl64(b, 32)),
 * fold(x, y) = low64(x*y) ^ high64(x*y) of the 128-bit product.
 * Why mix adds the words themselves: fold alone is symmetric (a block whose masked words
 * are swapped collides) and a masked word of 0 makes it 0 whatever the other word is; the
 * added term keeps both words even then, so neither twin collides even for someone who
 * knows the masks. Why the masks come from the seed and change every 8 blocks by a
 * secret step: with fixed masks (or masks that differ by public constants) collisions
 * are the same for every seed. Short keys take one multiply and no loop. */
#define HK_P1 0xC2B2AE3D27D4EB4Full

static inline uint64_t hk_splitmix64(uint64_t *x) {
    uint64_t z = (*x += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static inline void hk_key_init(hk_key *k, uint64_t seed) {
    uint64_t x = seed;
    int i;
    k->s64 = hk_splitmix64(&x);
    for (i = 0; i < 16; i++)
        k->t[i] = hk_splitmix64(&x);
    k->last[0] = hk_splitmix64(&x);
    k->last[1] = hk_splitmix64(&x);
    k->step = hk_splitmix64(&x) | 1u;
}

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

static inline uint64_t hk_rotl64(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }

static inline uint64_t hk_mix(uint64_t a, uint64_t b, uint64_t ka, uint64_t kb) {
    return hk_fold(a ^ ka, b ^ kb) + (a ^ hk_rotl64(b, 32));
}

/* The same sum over whole groups of 8 blocks, 4 blocks at a time in AVX2 lanes (the
 * 128-bit products from four 32-bit ones, as hk_fold's portable branch): addition mod
 * 2^64 is the same in any order, so the result is bit for bit the scalar loop's. Used
 * from 128-byte keys on when the CPU has AVX2 (hk_simd, set by hk_simd_init; 0 until
 * then, and always without AVX2 or when built with HK_NO_SIMD). */
extern int hk_simd;
void hk_simd_init(void);
/* Test hook: force the scalar path (0) or the detected one (1); returns the previous. */
int hk_simd_set(int on);
uint64_t hk_groups_avx2(const unsigned char *p, size_t ngroups, const hk_key *k);

/* Keys of HK_MID_KEY bytes or more: the general loop, 8-block groups then the rest (in
 * keyhash.c, not inlined: its groups keep 16 masks live, and a key of 16-127 bytes paid
 * for that stack frame and the tw arithmetic too: 185 instructions for 100 B, now 129). */
#define HK_MID_KEY 128u
uint64_t hk_long_hash64(const unsigned char *p, size_t len, const hk_key *k);

/* HK_SHORT_KEY..HK_MID_KEY-1 bytes: 1-7 full blocks, all in the first group (tw = 0), so
 * each block is one straight-line mix with its two masks (the same sum as hk_long_hash64,
 * added in another order: the same result mod 2^64). */
static inline uint64_t hk_mid_hash64(const unsigned char *p, size_t len, const hk_key *k) {
    uint64_t acc = (uint64_t)len * HK_P1 + k->s64;
#define HK_BLOCK(j)                                                                                \
    hk_mix(hk_load_le64(p + 16 * (j)), hk_load_le64(p + 16 * (j) + 8), k->t[2 * (j)],              \
           k->t[2 * (j) + 1])
    switch (len >> 4) {
    case 7:
        acc += HK_BLOCK(6); /* fall through */
    case 6:
        acc += HK_BLOCK(5); /* fall through */
    case 5:
        acc += HK_BLOCK(4); /* fall through */
    case 4:
        acc += HK_BLOCK(3); /* fall through */
    case 3:
        acc += HK_BLOCK(2); /* fall through */
    case 2:
        acc += HK_BLOCK(1); /* fall through */
    default:
        acc += HK_BLOCK(0);
    }
#undef HK_BLOCK
    if (len & 15u)
        acc +=
            hk_mix(hk_load_le64(p + len - 16), hk_load_le64(p + len - 8), k->last[0], k->last[1]);
    return hk_fmix64(acc);
}

static inline uint64_t hk_short_hash64(const unsigned char *p, size_t len, const hk_key *k) {
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
    lo = a ^ k->last[0];
    hi = b ^ k->last[1];
    return hk_fmix64((uint64_t)len * HK_P1 + k->s64 + hk_bswap64(lo) + hi + hk_fold(lo, hi));
}

static inline uint64_t hk_key_hash64(const void *key, size_t len, const hk_key *k) {
    return len < HK_SHORT_KEY ? hk_short_hash64((const unsigned char *)key, len, k)
           : len < HK_MID_KEY ? hk_mid_hash64((const unsigned char *)key, len, k)
                              : hk_long_hash64((const unsigned char *)key, len, k);
}

/* The 32-bit fingerprint of a key hash. */
static inline uint32_t hk_fingerprint(uint64_t H) { return (uint32_t)(H ^ (H >> 32)); }

/* hk_fingerprint(hk_key_hash64(...)) under the key of seed: sketch_hash (derives the key
 * on every call: for tests and one-off hashes, not for the update path). */
uint32_t hk_key_hash(const void *key, size_t len, uint64_t seed);

#endif
