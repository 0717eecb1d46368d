/* Top-K sketches in plain C99 (no Python): HeavyKeeper and Count-Min with
 * conservative update, sharing one top-k min-heap with an open-addressing index.
 *
 * Everything here is deterministic for a given seed: the pure-Python twin
 * (hotkeyd/_sketch_py.py) performs the same integer operations in the same order,
 * so both produce identical estimates, top-k lists and serialized bytes.
 * Design notes and error bounds: docs/sketch.md. */
#ifndef HOTKEYD_SKETCH_H
#define HOTKEYD_SKETCH_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "keyhash.h"

#define SK_KIND_HEAVYKEEPER 1
#define SK_KIND_COUNTMIN 2

/* Limits (also enforced by the twin). */
#define SK_MAX_K (1u << 20)
#define SK_MAX_DEPTH 16u
#define SK_MAX_CELLS (1u << 27)
#define SK_MAX_KEY_LEN (1u << 20)
#define SK_MAX_KEY_BYTES (1u << 30)
#define SK_MIN_WIDTH 8u
#define SK_COUNT_MAX 0xFFFFFFFFu

/* Memory accounting (identical in the twin). nbytes = SK_OVERHEAD
 * + cells * cell_size + k * SK_ENTRY_COST + index_slots * 4 + key_bytes. */
#define SK_OVERHEAD 256u
#define SK_ENTRY_COST 24u /* 20-byte heap entry + 4-byte compaction scratch */
#define SK_KEY_RESERVE_AVG 32u /* key bytes per entry when only width= is given */
#define SK_KEY_SHARE 4u /* default key store: memory / SK_KEY_SHARE, capped at k*max_key_len */
#define SK_DEFAULT_MEMORY 65536
#define SK_DEFAULT_DEPTH_HK 2
#define SK_DEFAULT_DEPTH_CM 4
/* HeavyKeeper bucket = SK_HK_SLOTS adjacent uint64 slots (fingerprint << 32 | counter): a key
 * owns or takes a slot, and only the weakest slot of a full bucket decays. */
#define SK_HK_SLOTS 2u

/* Decay base b = DEN/NUM = 27/25 = 1.08. */
#define SK_DECAY_NUM 25u
#define SK_DECAY_DEN 27u

#define SK_UNSET INT64_MIN

#define SK_SERIAL_VERSION                                                                          \
    6u /* 6: 64-bit seed, keyed hash (hk_key); 5: one 64-bit key hash, rows from it; 4: keys of    \
          32+ bytes hashed by hk_long_hash; 3: space-eviction counter in the header; 2: two-slot   \
          buckets */
#define SK_HEADER_SIZE 60u

typedef struct {
    int kind;
    uint32_t k, width, depth, max_key_len, key_bytes;
    uint32_t adaptive; /* 1: key_bytes was the automatic split, so it may grow (sk_grow_keys) */
    uint64_t seed;
} sk_params;

typedef struct {
    uint32_t count, hash, off, len, slot;
} sk_entry;

typedef struct sk_sketch {
    int kind;
    uint32_t k, width, depth, max_key_len, key_bytes;
    uint64_t seed;
    uint64_t rng, rng0;
    uint64_t *hk; /* HeavyKeeper slots: fingerprint << 32 | counter, SK_HK_SLOTS per bucket */
    uint32_t *cm; /* Count-Min counters */
    sk_entry *heap;
    uint32_t size;
    uint32_t *index; /* open addressing, value = heap position + 1, 0 = empty */
    uint32_t mask;
    uint32_t *scratch;
    unsigned char *arena;
    uint32_t arena_used, live_bytes;
    uint32_t space_evictions; /* entries dropped to free key bytes (saturating) */
    uint32_t adaptive; /* the key store may take bytes from the table (docs/sketch.md) */
    hk_key hkey; /* the hash's key, derived from seed once (last: the hot fields above share
                    their cache lines) */
} sk_sketch;

/* Batch pre-aggregation: repeated keys of a batch are summed (first-occurrence order,
 * saturating) and applied as one weighted update each, in rounds of at most SK_AGG_CAP
 * distinct keys. Key bytes are borrowed from the caller until sk_agg_flush. */
#define SK_AGG_CAP 4096u
#define SK_AGG_SLOTS 8192u
/* Adaptive: a full round whose distinct keys are at least SK_DIRECT_NUM/SK_DIRECT_DEN of
 * its events (few repeats: low skew) switches the next SK_DIRECT_SPAN events to direct
 * mode, each applied as its own update in arrival order with no table probe; then a
 * new round measures again. Same rule in the twin (docs/sketch.md, "Pre-aggregation"). */
#ifndef SK_DIRECT_NUM /* overridable for A/B builds only (benchmarks/ab_sketch.py) */
#define SK_DIRECT_NUM 5u
#endif
#ifndef SK_DIRECT_DEN
#define SK_DIRECT_DEN 8u
#endif
#ifndef SK_DIRECT_SPAN
#define SK_DIRECT_SPAN 32768u
#endif
typedef struct {
    const unsigned char *key;
    uint64_t hash; /* hk_key_hash64 */
    uint32_t len, count;
} sk_agg_entry;
typedef struct {
    uint32_t n;
    uint32_t last; /* entry of the previous event + 1, 0 = none (runs skip the hash) */
    uint64_t events; /* events added to the current round (aggregating mode; 64 bits: a round
                      * of few keys can see 2^32 events in one update_lines, and the twin's
                      * count never wraps) */
    uint32_t direct; /* events left in direct mode; 0 = aggregating */
    int drain_first; /* direct mode ended: drain its queue before the next round */
    /* entry index + 1 (low 16 bits, 0 = empty) and the key hash's high 16 bits: a probe
     * reads an entry (96 KiB of them, past L1) only when the tags match. */
    uint32_t slot[SK_AGG_SLOTS];
    sk_agg_entry e[SK_AGG_CAP];
} sk_agg;

/* Resolve constructor arguments. SK_UNSET means "not given" for memory,
 * width, depth and key_bytes. Returns 0, or -1 with a message in err. */
int sk_plan(int kind, int64_t k, int64_t memory, int64_t width, int64_t depth, uint64_t seed,
            int64_t max_key_len, int64_t key_bytes, sk_params *out, char *err, size_t errlen);
uint64_t sk_params_nbytes(const sk_params *p);

void sk_tables_init(void);
sk_sketch *sk_new(const sk_params *p); /* NULL on allocation failure */
void sk_free(sk_sketch *s);
uint64_t sk_nbytes(const sk_sketch *s);
void sk_clear(sk_sketch *s);

/* len must be <= max_key_len (callers check). */
void sk_update(sk_sketch *s, const void *key, size_t len, uint32_t count);
/* The 64-bit key hash (hk_key_hash64 with the sketch's seed). */
uint64_t sk_hash(const sk_sketch *s, const void *key, size_t len);
void sk_agg_init(sk_agg *a);
/* Add one event to the round (flushes first when the round is full). */
void sk_agg_add(sk_sketch *s, sk_agg *a, const void *key, size_t len, uint32_t count);
/* Apply the round's keys in first-occurrence order and empty it. */
void sk_agg_flush(sk_sketch *s, sk_agg *a);
/* Two-phase form (update_many: validate and aggregate everything, then apply):
 * sk_agg_push returns 1 without adding when the round is full and the key is new (or a
 * direct-mode queue is full or must be applied before the next round): drain, push again;
 * sk_agg_drain copies the round to out (returns how many), picks the next mode, empties it;
 * sk_apply applies drained entries in order. Same result as sk_agg_add/flush. */
/* sk_agg_push and sk_agg_repeat (1, count added, when key equals the previous event's
 * key: a run, no hash needed) are inline, at the end of this header: update_many calls
 * them once per event from another translation unit. */
uint32_t sk_agg_drain(sk_agg *a, sk_agg_entry *out);
void sk_apply(sk_sketch *s, const sk_agg_entry *e, size_t n);
uint32_t sk_estimate(const sk_sketch *s, const void *key, size_t len);
/* factor_fp = floor(factor * 2^32), in [0, 2^32]; counters become floor(c * factor_fp / 2^32). */
void sk_decay(sk_sketch *s, uint64_t factor_fp);
/* Fill order[0..size) with heap positions sorted by count desc, key asc. */
void sk_topk_order(const sk_sketch *s, uint32_t *order);
/* 0 ok, -1 shape mismatch (message in err), -2 out of memory. */
int sk_merge(sk_sketch *dst, const sk_sketch *src, char *err, size_t errlen);

size_t sk_serialized_size(const sk_sketch *s);
void sk_serialize(const sk_sketch *s, unsigned char *out);
/* Returns NULL with a message in err (sets *oom when allocation failed). */
sk_sketch *sk_deserialize(const unsigned char *buf, size_t len, int kind, char *err, size_t errlen,
                          int *oom);

uint32_t sk_crc32(const unsigned char *buf, size_t len);

/* ------------------------------------------- inline helpers and the per-event agg calls */

static inline uint32_t sk_sat_add(uint32_t a, uint32_t b) {
    uint32_t r = a + b;
    return r < a ? SK_COUNT_MAX : r;
}

/* Equal bytes; short keys (the common case) without a library call. */
static inline int sk_bytes_eq(const unsigned char *a, const unsigned char *b, uint32_t len) {
    if (len >= 8 && len <= 16) {
        uint64_t x0, x1, y0, y1;
        memcpy(&x0, a, 8);
        memcpy(&y0, b, 8);
        memcpy(&x1, a + len - 8, 8);
        memcpy(&y1, b + len - 8, 8);
        return ((x0 ^ y0) | (x1 ^ y1)) == 0;
    }
    return len == 0 || memcmp(a, b, len) == 0;
}

static inline int sk_agg_push(sk_agg *a, const void *key, uint32_t len, uint64_t hash,
                              uint32_t count) {
    const uint32_t h = hk_fingerprint(hash), tag = h & 0xFFFF0000u;
    uint32_t i;
    if (a->direct) {
        sk_agg_entry *e;
        if (a->n == SK_AGG_CAP)
            return 1;
        e = &a->e[a->n++];
        e->key = (const unsigned char *)key;
        e->len = len;
        e->hash = hash;
        e->count = count;
        if (--a->direct == 0)
            a->drain_first = 1;
        return 0;
    }
    if (a->drain_first)
        return 1;
    a->events++; /* undone below when the round is full */
    for (i = h & (SK_AGG_SLOTS - 1);; i = (i + 1) & (SK_AGG_SLOTS - 1)) {
        uint32_t v = a->slot[i];
        sk_agg_entry *e;
        if (!v)
            break;
        if ((v & 0xFFFF0000u) != tag)
            continue;
        e = &a->e[(v & 0xFFFFu) - 1];
        if (e->hash == hash && e->len == len &&
            (e->key == key || sk_bytes_eq(e->key, (const unsigned char *)key, len))) {
            e->count = sk_sat_add(e->count, count);
            a->last = v & 0xFFFFu;
            return 0;
        }
    }
    if (a->n == SK_AGG_CAP) {
        a->events--;
        return 1;
    }
    a->e[a->n].key = (const unsigned char *)key;
    a->e[a->n].len = len;
    a->e[a->n].hash = hash;
    a->e[a->n].count = count;
    a->slot[i] = tag | ++a->n;
    a->last = a->n;
    return 0;
}

#define SK_RUN_MIN_LEN 48u

/* A hot-key storm repeats one key back to back: compare with the previous event's key
 * (tail first, where keys sharing a prefix differ) before paying for a hash. The result
 * is the same as sk_agg_push with the key's hash: only the work differs. */
static inline int sk_agg_repeat(sk_agg *a, const void *key, uint32_t len, uint32_t count) {
    sk_agg_entry *e;
    const unsigned char *k = (const unsigned char *)key;
    /* Short keys hash in a few ns: the extra, unpredictable branch would cost more
     * (Zipf 2.0, 12 B: 130 -> 89 M/s when tried for every key). */
    if (len < SK_RUN_MIN_LEN || !a->last || a->direct || a->drain_first)
        return 0;
    e = &a->e[a->last - 1];
    if (e->len != len)
        return 0;
    if (e->key != k) {
        if (len >= 8) {
            uint64_t x, y;
            memcpy(&x, e->key + len - 8, 8);
            memcpy(&y, k + len - 8, 8);
            if (x != y)
                return 0;
        }
        if (!sk_bytes_eq(e->key, k, len))
            return 0;
    }
    e->count = sk_sat_add(e->count, count);
    a->events++;
    return 1;
}

#endif
