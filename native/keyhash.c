/* The exported fingerprint (sketch_hash) and the AVX2 block sum; the hash itself is
 * inline in keyhash.h. */
#include "keyhash.h"

#if !defined(HK_NO_SIMD) && defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define HK_AVX2 1
#include <immintrin.h>
#endif

int hk_simd = 0;

#ifdef HK_AVX2
static int hk_simd_detected(void) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") ? 1 : 0;
}

/* Four blocks per step: two 32-byte loads hold words a0 b0 a1 b1 | a2 b2 a3 b3, and the
 * 64-bit unpacks give lanes of blocks 0, 2, 1, 3 (so the masks are laid out in that order).
 * mix per lane: fold(x, y) from the four 32x32 products, plus a ^ rotl64(b, 32) (the
 * 32-bit halves of b swapped). */
__attribute__((target("avx2"))) uint64_t hk_groups_avx2(const unsigned char *p, size_t ngroups,
                                                        const hk_key *k) {
    const __m256i m32 = _mm256_set1_epi64x(0xFFFFFFFFll);
    const long long *t = (const long long *)(const void *)k->t;
    const __m256i t0a = _mm256_setr_epi64x(t[0], t[4], t[2], t[6]);
    const __m256i t1a = _mm256_setr_epi64x(t[1], t[5], t[3], t[7]);
    const __m256i t0b = _mm256_setr_epi64x(t[8], t[12], t[10], t[14]);
    const __m256i t1b = _mm256_setr_epi64x(t[9], t[13], t[11], t[15]);
    const __m256i step = _mm256_set1_epi64x((long long)k->step);
    __m256i tw = _mm256_setzero_si256(), acc = _mm256_setzero_si256();
    size_t g;
    int h;
    for (g = 0; g < ngroups; g++, p += 128, tw = _mm256_add_epi64(tw, step)) {
        for (h = 0; h < 2; h++) {
            __m256i l0 = _mm256_loadu_si256((const __m256i *)(const void *)(p + 64 * h));
            __m256i l1 = _mm256_loadu_si256((const __m256i *)(const void *)(p + 64 * h + 32));
            __m256i a = _mm256_unpacklo_epi64(l0, l1), b = _mm256_unpackhi_epi64(l0, l1);
            __m256i x = _mm256_xor_si256(a, _mm256_add_epi64(h ? t0b : t0a, tw));
            __m256i y = _mm256_xor_si256(b, _mm256_sub_epi64(h ? t1b : t1a, tw));
            __m256i xh = _mm256_srli_epi64(x, 32), yh = _mm256_srli_epi64(y, 32);
            __m256i ll = _mm256_mul_epu32(x, y), lh = _mm256_mul_epu32(x, yh);
            __m256i hl = _mm256_mul_epu32(xh, y), hh = _mm256_mul_epu32(xh, yh);
            __m256i mid = _mm256_add_epi64(
                _mm256_srli_epi64(ll, 32),
                _mm256_add_epi64(_mm256_and_si256(lh, m32), _mm256_and_si256(hl, m32)));
            __m256i lo = _mm256_blend_epi32(ll, _mm256_slli_epi64(mid, 32), 0xAA);
            __m256i hi = _mm256_add_epi64(
                _mm256_add_epi64(hh, _mm256_srli_epi64(mid, 32)),
                _mm256_add_epi64(_mm256_srli_epi64(lh, 32), _mm256_srli_epi64(hl, 32)));
            __m256i rb = _mm256_shuffle_epi32(b, 0xB1);
            acc = _mm256_add_epi64(
                acc, _mm256_add_epi64(_mm256_xor_si256(lo, hi), _mm256_xor_si256(a, rb)));
        }
    }
    {
        __m128i s = _mm_add_epi64(_mm256_castsi256_si128(acc), _mm256_extracti128_si256(acc, 1));
        return (uint64_t)_mm_cvtsi128_si64(s) + (uint64_t)_mm_extract_epi64(s, 1);
    }
}
#else
static int hk_simd_detected(void) { return 0; }

uint64_t hk_groups_avx2(const unsigned char *p, size_t ngroups, const hk_key *k) {
    (void)p;
    (void)ngroups;
    (void)k;
    return 0; /* never called: hk_simd stays 0 */
}
#endif

void hk_simd_init(void) { hk_simd = hk_simd_detected(); }

int hk_simd_set(int on) {
    int was = hk_simd;
    hk_simd = on ? hk_simd_detected() : 0;
    return was;
}

/* Keys of HK_MID_KEY bytes or more (keyhash.h has the specification and the shorter
 * paths): 8-block groups (AVX2 when the CPU has it), then the rest of the blocks. */
uint64_t hk_long_hash64(const unsigned char *p, size_t len, const hk_key *k) {
    const size_t nblocks = len / 16;
    uint64_t acc = (uint64_t)len * HK_P1 + k->s64, tw = 0;
    size_t i = 0, j;
    if (nblocks >= 8 && hk_simd) {
        const size_t groups = nblocks / 8;
        acc += hk_groups_avx2(p, groups, k);
        i = groups * 8;
        tw = (uint64_t)groups * k->step;
    }
    for (; i + 8 <= nblocks; i += 8, tw += k->step)
        for (j = 0; j < 8; j++)
            acc += hk_mix(hk_load_le64(p + 16 * (i + j)), hk_load_le64(p + 16 * (i + j) + 8),
                          k->t[2 * j] + tw, k->t[2 * j + 1] - tw);
    for (j = 0; i + j < nblocks; j++)
        acc += hk_mix(hk_load_le64(p + 16 * (i + j)), hk_load_le64(p + 16 * (i + j) + 8),
                      k->t[2 * j] + tw, k->t[2 * j + 1] - tw);
    if (len & 15u)
        acc +=
            hk_mix(hk_load_le64(p + len - 16), hk_load_le64(p + len - 8), k->last[0], k->last[1]);
    return hk_fmix64(acc);
}

uint32_t hk_key_hash(const void *key, size_t len, uint64_t seed) {
    hk_key k;
    hk_key_init(&k, seed);
    return hk_fingerprint(hk_key_hash64(key, len, &k));
}
