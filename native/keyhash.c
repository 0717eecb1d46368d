/* The exported fingerprint (sketch_hash); the hash itself is inline in keyhash.h. */
#include "keyhash.h"

uint32_t hk_key_hash(const void *key, size_t len, uint64_t seed) {
    hk_key k;
    hk_key_init(&k, seed);
    return hk_fingerprint(hk_key_hash64(key, len, &k));
}
