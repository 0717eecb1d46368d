/* The sketch's key hash: MurmurHash3 x86_32 for keys under HK_LONG_KEY bytes, and for
 * longer keys a 64-bit multiply-fold hash over 16-byte blocks (XXH3-style: the blocks
 * are independent, so the CPU overlaps their multiplies), folded to 32 bits.
 *
 * Plain C99 (128-bit product via __int128 where the compiler has it, else four 32-bit
 * products; same result). The pure-Python twin (_sketch_py.sketch_hash) computes the
 * same function, so both place keys in the same buckets. */
#ifndef HOTKEYD_KEYHASH_H
#define HOTKEYD_KEYHASH_H

#include <stddef.h>
#include <stdint.h>

#define HK_LONG_KEY 32u

/* MurmurHash3's 64-bit finalizer (the sketch also derives row indexes with it). */
static inline uint64_t hk_fmix64(uint64_t x) {
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ULL;
    x ^= x >> 33;
    return x;
}

uint32_t hk_long_hash(const void *key, size_t len, uint32_t seed);
uint32_t hk_key_hash(const void *key, size_t len, uint32_t seed);

#endif
