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

uint64_t hk_key_hash64(const void *key, size_t len, uint32_t seed);

/* The 32-bit fingerprint of a key hash. */
static inline uint32_t hk_fingerprint(uint64_t H) { return (uint32_t)(H ^ (H >> 32)); }

/* hk_fingerprint(hk_key_hash64(...)): sketch_hash. */
uint32_t hk_key_hash(const void *key, size_t len, uint32_t seed);

#endif
