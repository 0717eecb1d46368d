/* MurmurHash3 x86_32 (Austin Appleby's public-domain algorithm), written from the
 * specification. Reads blocks with memcpy so unaligned keys are fine and the
 * result is little-endian regardless of the host. */
#include "murmur3.h"

#include <string.h>

static inline uint32_t rotl32(uint32_t x, int r) { return (x << r) | (x >> (32 - r)); }

static inline uint32_t load_le32(const unsigned char *p) {
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}

uint32_t hk_murmur3_32(const void *key, size_t len, uint32_t seed) {
    const unsigned char *data = (const unsigned char *)key;
    const size_t nblocks = len / 4;
    const uint32_t c1 = 0xcc9e2d51u, c2 = 0x1b873593u;
    uint32_t h1 = seed;
    size_t i;

    for (i = 0; i < nblocks; i++) {
        uint32_t k1 = load_le32(data + i * 4);
        k1 *= c1;
        k1 = rotl32(k1, 15);
        k1 *= c2;
        h1 ^= k1;
        h1 = rotl32(h1, 13);
        h1 = h1 * 5u + 0xe6546b64u;
    }

    {
        const unsigned char *tail = data + nblocks * 4;
        uint32_t k1 = 0;
        switch (len & 3u) {
        case 3:
            k1 ^= (uint32_t)tail[2] << 16; /* fall through */
        case 2:
            k1 ^= (uint32_t)tail[1] << 8; /* fall through */
        case 1:
            k1 ^= (uint32_t)tail[0];
            k1 *= c1;
            k1 = rotl32(k1, 15);
            k1 *= c2;
            h1 ^= k1;
        default:
            break;
        }
    }

    h1 ^= (uint32_t)len;
    h1 ^= h1 >> 16;
    h1 *= 0x85ebca6bu;
    h1 ^= h1 >> 13;
    h1 *= 0xc2b2ae35u;
    h1 ^= h1 >> 16;
    return h1;
}
