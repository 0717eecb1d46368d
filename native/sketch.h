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
int sk_agg_push(sk_agg *a, const void *key, uint32_t len, uint64_t hash, uint32_t count);
/* 1 (count added) when key equals the previous event's key: a run, no hash needed. */
int sk_agg_repeat(sk_agg *a, const void *key, uint32_t len, uint32_t count);
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

#endif
