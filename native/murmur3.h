/* MurmurHash3 x86_32, bit-identical to mmh3.hash(key, seed, signed=False).
 *
 * Plain C99, no Python. The sketch hashes every key exactly once with this
 * function; the pure-Python twin uses the same function (via mmh3), so both
 * place keys in the same buckets. */
#ifndef HOTKEYD_MURMUR3_H
#define HOTKEYD_MURMUR3_H

#include <stddef.h>
#include <stdint.h>

uint32_t hk_murmur3_32(const void *key, size_t len, uint32_t seed);

#endif
