/* HeavyKeeper and Count-Min (conservative update) with a shared top-k heap.
 * See sketch.h and docs/sketch.md. Integer arithmetic only, so that the
 * pure-Python twin reproduces every result bit for bit. */
#include "sketch.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "keyhash.h"

/* ------------------------------------------------------------------ helpers */

static inline uint64_t mulhi64(uint64_t a, uint64_t b) {
#if defined(__SIZEOF_INT128__)
    return (uint64_t)(((unsigned __int128)a * b) >> 64);
#else
    uint64_t a0 = (uint32_t)a, a1 = a >> 32, b0 = (uint32_t)b, b1 = b >> 32;
    uint64_t p00 = a0 * b0, p01 = a0 * b1, p10 = a1 * b0, p11 = a1 * b1;
    uint64_t mid = (p00 >> 32) + (uint32_t)p01 + (uint32_t)p10;
    return p11 + (p01 >> 32) + (p10 >> 32) + (mid >> 32);
#endif
}

static inline uint64_t rng_next(uint64_t *state) {
    uint64_t z = (*state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

/* Rows straight from the 64-bit key hash (its halves drive double hashing): no second
 * mix on the path from the key's bytes to its first two buckets. Rows from the third on
 * mix x first: plain double hashing puts a key whose first two rows match another key's
 * (h1 and h2 both close: odds 1/width^2 per pair) in that key's other rows too, so a cold
 * key could read a hot key's count in every row of a Count-Min sketch. */
static inline void row_indexes(uint64_t hash, uint32_t width, uint32_t depth, uint32_t *idx) {
    uint32_t h1 = (uint32_t)hash, h2 = (uint32_t)(hash >> 32) | 1u;
    uint32_t i;
    /* depth >= 1; rows 0 and 1 unrolled (the default depth is 2: no loop for them) */
    idx[0] = (uint32_t)(((uint64_t)h1 * width) >> 32);
    if (depth < 2)
        return;
    idx[1] = (uint32_t)(((uint64_t)(h1 + h2) * width) >> 32);
    for (i = 2; i < depth; i++) {
        uint32_t x = h1 + i * h2;
        x ^= x >> 16;
        x *= 0x45D9F3Bu;
        x ^= x >> 16;
        idx[i] = (uint32_t)(((uint64_t)x * width) >> 32);
    }
}

/* ------------------------------------------------- HeavyKeeper decay tables */

/* T[c] = floor(2^64 * b^-c) by iterated integer floor; POW[c][j] ~ (1 - T[c]/2^64)^(2^j)
 * in 0.64 fixed point, by repeated squaring with floor. Computed once. */
#define HK_MAX_LEVELS 640
#define HK_POW_BITS 32
static uint64_t hk_pow[HK_MAX_LEVELS][HK_POW_BITS];
static uint64_t hk_p0[HK_MAX_LEVELS]; /* hk_pow[c][0], dense: the unit-update hot path */
static uint32_t hk_levels; /* counters >= hk_levels never decay (probability < 2^-64) */

static uint32_t crc_table[256];

/* Called once at module init (under the GIL), before any sketch exists. */
void sk_tables_init(void) {
    uint64_t t = 0xFFFFFFFFFFFFFFFFULL;
    uint32_t c, n;
    if (hk_levels)
        return;
    hk_simd_init();
    for (n = 0; n < 256; n++) {
        uint32_t v = n;
        int b;
        for (b = 0; b < 8; b++)
            v = (v & 1u) ? 0xEDB88320u ^ (v >> 1) : v >> 1;
        crc_table[n] = v;
    }
    for (c = 1; c < HK_MAX_LEVELS; c++) {
        int j;
        t = (t / SK_DECAY_DEN) * SK_DECAY_NUM + ((t % SK_DECAY_DEN) * SK_DECAY_NUM) / SK_DECAY_DEN;
        if (t == 0)
            break;
        hk_p0[c] = hk_pow[c][0] = ~t;
        for (j = 1; j < HK_POW_BITS; j++)
            hk_pow[c][j] = mulhi64(hk_pow[c][j - 1], hk_pow[c][j - 1]);
    }
    hk_levels = c;
}

/* Number of failed decay trials before the first success at counter level c,
 * capped at n (n >= 1): the largest t with (1-p)^t >= u / 2^64, found bit by bit. */
static inline uint32_t hk_failures(uint32_t c, uint32_t n, uint64_t u) {
    int j = 31;
    uint32_t t = 0;
    uint64_t acc = 0;
    int have = 0;
    const uint64_t *pw = hk_pow[c];
#if defined(__GNUC__) || defined(__clang__)
    j = 31 - __builtin_clz(n); /* the top bit of n (n >= 1): no loop over its leading zeros */
#else
    while (!(n >> j))
        j--;
#endif
    for (; j >= 0; j--) {
        uint64_t cand = have ? mulhi64(acc, pw[j]) : pw[j];
        if (cand >= u) {
            acc = cand;
            have = 1;
            t += (uint32_t)1 << j;
            if (t >= n)
                return n;
        }
    }
    return t;
}

/* ------------------------------------------------------------------ planning */

static uint32_t next_pow2(uint32_t x) {
    uint32_t p = 1;
    while (p < x)
        p <<= 1;
    return p;
}

static uint32_t index_slots(uint32_t k) {
    uint32_t want = 2 * k;
    return next_pow2(want < 8 ? 8 : want);
}

static uint64_t fixed_bytes(int kind, uint32_t k, uint32_t key_bytes) {
    (void)kind;
    return (uint64_t)SK_OVERHEAD + (uint64_t)k * SK_ENTRY_COST + (uint64_t)index_slots(k) * 4u +
           key_bytes;
}

/* Bytes per bucket: SK_HK_SLOTS uint64 slots (HeavyKeeper) or one uint32 counter (Count-Min). */
static uint32_t cell_size(int kind) { return kind == SK_KIND_HEAVYKEEPER ? 8u * SK_HK_SLOTS : 4u; }

/* Number of stored words: slots (HeavyKeeper) or counters (Count-Min). */
static size_t table_words(int kind, uint32_t width, uint32_t depth) {
    return (size_t)width * depth * (kind == SK_KIND_HEAVYKEEPER ? SK_HK_SLOTS : 1u);
}

uint64_t sk_params_nbytes(const sk_params *p) {
    return fixed_bytes(p->kind, p->k, p->key_bytes) +
           (uint64_t)p->width * p->depth * cell_size(p->kind);
}

int sk_plan(int kind, int64_t k, int64_t memory, int64_t width, int64_t depth, uint64_t seed,
            int64_t max_key_len, int64_t key_bytes, sk_params *out, char *err, size_t errlen) {
    uint64_t fixed, cs = cell_size(kind);
    if (k < 1 || k > (int64_t)SK_MAX_K) {
        snprintf(err, errlen, "k must be in [1, %u], got %lld", SK_MAX_K, (long long)k);
        return -1;
    }
    if (max_key_len < 1 || max_key_len > (int64_t)SK_MAX_KEY_LEN) {
        snprintf(err, errlen, "max_key_len must be in [1, %u], got %lld", SK_MAX_KEY_LEN,
                 (long long)max_key_len);
        return -1;
    }
    if (depth == SK_UNSET)
        depth = kind == SK_KIND_HEAVYKEEPER ? SK_DEFAULT_DEPTH_HK : SK_DEFAULT_DEPTH_CM;
    if (depth < 1 || depth > (int64_t)SK_MAX_DEPTH) {
        snprintf(err, errlen, "depth must be in [1, %u], got %lld", SK_MAX_DEPTH, (long long)depth);
        return -1;
    }
    out->adaptive = 0;
    if (key_bytes == SK_UNSET) {
        /* The automatic split: a quarter of the budget holds keys (never more than k keys
         * of max_key_len), the rest buckets; docs/sketch.md, "Memory". */
        if (width == SK_UNSET || memory != SK_UNSET) {
            int64_t budget = memory == SK_UNSET ? SK_DEFAULT_MEMORY : memory;
            key_bytes = budget > 0 ? budget / SK_KEY_SHARE : 0;
            if (key_bytes > k * max_key_len)
                key_bytes = k * max_key_len;
            out->adaptive = 1;
        } else {
            key_bytes =
                k * (max_key_len < (int64_t)SK_KEY_RESERVE_AVG ? max_key_len : SK_KEY_RESERVE_AVG);
        }
        if (key_bytes < max_key_len)
            key_bytes = max_key_len;
        if (key_bytes > (int64_t)SK_MAX_KEY_BYTES)
            key_bytes = SK_MAX_KEY_BYTES;
    }
    if (key_bytes < max_key_len || key_bytes > (int64_t)SK_MAX_KEY_BYTES) {
        snprintf(err, errlen, "key_bytes must be in [max_key_len=%lld, %u], got %lld",
                 (long long)max_key_len, SK_MAX_KEY_BYTES, (long long)key_bytes);
        return -1;
    }
    out->kind = kind;
    out->k = (uint32_t)k;
    out->depth = (uint32_t)depth;
    out->seed = seed;
    out->max_key_len = (uint32_t)max_key_len;
    out->key_bytes = (uint32_t)key_bytes;
    fixed = fixed_bytes(kind, out->k, out->key_bytes);
    if (width == SK_UNSET) {
        uint64_t need = fixed + (uint64_t)depth * SK_MIN_WIDTH * cs, w;
        if (memory == SK_UNSET)
            memory = SK_DEFAULT_MEMORY;
        if (memory < 0 || (uint64_t)memory < need) {
            snprintf(err, errlen,
                     "memory=%lld bytes is too small for k=%lld: need at least %llu bytes (top-k "
                     "heap, index and %llu key bytes, plus %u buckets per row)",
                     (long long)memory, (long long)k, (unsigned long long)need,
                     (unsigned long long)key_bytes, SK_MIN_WIDTH);
            return -1;
        }
        w = ((uint64_t)memory - fixed) / ((uint64_t)depth * cs);
        if (w * (uint64_t)depth > SK_MAX_CELLS)
            w = SK_MAX_CELLS / (uint64_t)depth;
        out->width = (uint32_t)w;
    } else {
        if (width < 1 || (uint64_t)width * (uint64_t)depth > SK_MAX_CELLS) {
            snprintf(err, errlen, "width must be in [1, %llu] for depth=%lld, got %lld",
                     (unsigned long long)(SK_MAX_CELLS / (uint64_t)depth), (long long)depth,
                     (long long)width);
            return -1;
        }
        out->width = (uint32_t)width;
        if (memory != SK_UNSET && (memory < 0 || sk_params_nbytes(out) > (uint64_t)memory)) {
            snprintf(err, errlen,
                     "memory=%lld bytes is too small for k=%lld, width=%lld, depth=%lld: need %llu "
                     "bytes",
                     (long long)memory, (long long)k, (long long)width, (long long)depth,
                     (unsigned long long)sk_params_nbytes(out));
            return -1;
        }
    }
    return 0;
}

/* ------------------------------------------------------------- lifecycle */

sk_sketch *sk_new(const sk_params *p) {
    sk_sketch *s = (sk_sketch *)calloc(1, sizeof(sk_sketch));
    size_t cells = table_words(p->kind, p->width, p->depth);
    uint32_t slots = index_slots(p->k);
    if (!s)
        return NULL;
    sk_tables_init();
    s->kind = p->kind;
    s->k = p->k;
    s->width = p->width;
    s->depth = p->depth;
    s->seed = p->seed;
    hk_key_init(&s->hkey, p->seed);
    s->max_key_len = p->max_key_len;
    s->key_bytes = p->key_bytes;
    s->adaptive = p->adaptive;
    s->rng0 = s->rng = (uint64_t)p->seed ^ 0xd1b54a32d192ed03ULL;
    if (p->kind == SK_KIND_HEAVYKEEPER)
        s->hk = (uint64_t *)calloc(cells, sizeof(uint64_t));
    else
        s->cm = (uint32_t *)calloc(cells, sizeof(uint32_t));
    s->heap = (sk_entry *)calloc(p->k, sizeof(sk_entry));
    s->index = (uint32_t *)calloc(slots, sizeof(uint32_t));
    s->mask = slots - 1;
    s->scratch = (uint32_t *)calloc(p->k, sizeof(uint32_t));
    s->arena = (unsigned char *)malloc(p->key_bytes ? p->key_bytes : 1);
    if ((!s->hk && !s->cm) || !s->heap || !s->index || !s->scratch || !s->arena) {
        sk_free(s);
        return NULL;
    }
    return s;
}

void sk_free(sk_sketch *s) {
    if (!s)
        return;
    free(s->hk);
    free(s->cm);
    free(s->heap);
    free(s->index);
    free(s->scratch);
    free(s->arena);
    free(s);
}

uint64_t sk_nbytes(const sk_sketch *s) {
    sk_params p;
    p.kind = s->kind;
    p.k = s->k;
    p.width = s->width;
    p.depth = s->depth;
    p.key_bytes = s->key_bytes;
    return sk_params_nbytes(&p);
}

static void heap_reset(sk_sketch *s) {
    s->size = 0;
    memset(s->index, 0, ((size_t)s->mask + 1) * sizeof(uint32_t));
    s->arena_used = 0;
    s->live_bytes = 0;
    s->space_evictions = 0;
}

void sk_clear(sk_sketch *s) {
    size_t cells = table_words(s->kind, s->width, s->depth);
    if (s->hk)
        memset(s->hk, 0, cells * sizeof(uint64_t));
    if (s->cm)
        memset(s->cm, 0, cells * sizeof(uint32_t));
    heap_reset(s);
    s->rng = s->rng0;
}

/* ------------------------------------------------------------ top-k heap */

static inline int entry_is(const sk_sketch *s, const sk_entry *e, uint32_t h, const void *key,
                           size_t len) {
    return e->hash == h && e->len == len &&
           sk_bytes_eq(s->arena + e->off, (const unsigned char *)key, (uint32_t)len);
}

static inline int64_t heap_find(const sk_sketch *s, uint32_t h, const void *key, size_t len) {
    uint32_t i = h & s->mask;
    for (;;) {
        uint32_t v = s->index[i];
        if (!v)
            return -1;
        if (entry_is(s, &s->heap[v - 1], h, key, len))
            return (int64_t)v - 1;
        i = (i + 1) & s->mask;
    }
}

static inline void index_insert(sk_sketch *s, uint32_t pos) {
    uint32_t i = s->heap[pos].hash & s->mask;
    while (s->index[i])
        i = (i + 1) & s->mask;
    s->index[i] = pos + 1;
    s->heap[pos].slot = i;
}

/* Backward-shift deletion keeps probe chains intact without tombstones. */
static void index_remove(sk_sketch *s, uint32_t slot) {
    uint32_t i = slot, j = slot, mask = s->mask;
    s->index[i] = 0;
    for (;;) {
        uint32_t home;
        j = (j + 1) & mask;
        if (!s->index[j])
            return;
        home = s->heap[s->index[j] - 1].hash & mask;
        /* Entry at j may move to i unless its home lies cyclically in (i, j]. */
        if ((i <= j) ? (i < home && home <= j) : (i < home || home <= j))
            continue;
        s->index[i] = s->index[j];
        s->heap[s->index[i] - 1].slot = i;
        s->index[j] = 0;
        i = j;
    }
}

static inline void heap_swap(sk_sketch *s, uint32_t a, uint32_t b) {
    sk_entry t = s->heap[a];
    s->heap[a] = s->heap[b];
    s->heap[b] = t;
    s->index[s->heap[a].slot] = a + 1;
    s->index[s->heap[b].slot] = b + 1;
}

static void sift_down(sk_sketch *s, uint32_t p) {
    for (;;) {
        uint32_t l = 2 * p + 1, m, r = l + 1;
        if (l >= s->size)
            return;
        m = l;
        if (r < s->size && s->heap[r].count < s->heap[l].count)
            m = r;
        if (s->heap[m].count < s->heap[p].count) {
            heap_swap(s, p, m);
            p = m;
        } else {
            return;
        }
    }
}

static void sift_up(sk_sketch *s, uint32_t p) {
    while (p > 0) {
        uint32_t parent = (p - 1) / 2;
        if (s->heap[p].count < s->heap[parent].count) {
            heap_swap(s, p, parent);
            p = parent;
        } else {
            return;
        }
    }
}

/* Pack live keys to the front of the arena (entries sorted by offset). */
static void arena_compact(sk_sketch *s) {
    uint32_t n = s->size, gap, i, cursor = 0;
    uint32_t *o = s->scratch;
    for (i = 0; i < n; i++)
        o[i] = i;
    for (gap = n / 2; gap > 0; gap /= 2) {
        for (i = gap; i < n; i++) {
            uint32_t v = o[i], j = i;
            while (j >= gap && s->heap[o[j - gap]].off > s->heap[v].off) {
                o[j] = o[j - gap];
                j -= gap;
            }
            o[j] = v;
        }
    }
    for (i = 0; i < n; i++) {
        sk_entry *e = &s->heap[o[i]];
        if (e->len && e->off != cursor)
            memmove(s->arena + cursor, s->arena + e->off, e->len);
        e->off = cursor;
        cursor += e->len;
    }
    s->arena_used = cursor;
}

static uint32_t arena_alloc(sk_sketch *s, const void *key, uint32_t len) {
    uint32_t off;
    if ((uint64_t)s->arena_used + len > s->key_bytes)
        arena_compact(s);
    off = s->arena_used;
    if (len)
        memcpy(s->arena + off, key, len);
    s->arena_used += len;
    return off;
}

/* Remove the minimum entry (its key bytes become dead arena space). */
static void heap_pop_min(sk_sketch *s) {
    index_remove(s, s->heap[0].slot);
    s->live_bytes -= s->heap[0].len;
    s->size--;
    if (s->size) {
        s->heap[0] = s->heap[s->size];
        s->index[s->heap[0].slot] = 1;
        sift_down(s, 0);
    }
}

/* The key store adapts to the key lengths seen (automatic split only): when a key does not
 * fit and k keys of the average length tracked so far would not either, the table gives
 * bytes to the store by halving its width, down to max(SK_MIN_WIDTH, k) buckets per row.
 * Old bucket j covers the hash range [j, j+1) * 2^32 / w; it is merged into every new
 * bucket whose range meets it: Count-Min keeps the larger counter (still an upper bound
 * for every key there), HeavyKeeper keeps the two strongest slots (a fingerprint met twice
 * keeps its larger count; earlier buckets and slot 0 first on ties). Returns 1 when it grew. */
static int want_more_keys(const sk_sketch *s, uint32_t len) {
    return s->adaptive &&
           ((uint64_t)s->live_bytes + len) * s->k > (uint64_t)s->key_bytes * (s->size + 1u);
}

static void hk_merge_slot(uint64_t *b, uint64_t w) {
    uint32_t c = (uint32_t)w, j, weak;
    if (!c)
        return;
    for (j = 0; j < SK_HK_SLOTS; j++) {
        if ((uint32_t)b[j] && (b[j] >> 32) == (w >> 32)) {
            if (c > (uint32_t)b[j])
                b[j] = w;
            return;
        }
    }
    for (j = 0; j < SK_HK_SLOTS; j++) {
        if (!(uint32_t)b[j]) {
            b[j] = w;
            return;
        }
    }
    weak = (uint32_t)b[1] < (uint32_t)b[0] ? 1u : 0u;
    if (c > (uint32_t)b[weak])
        b[weak] = w;
}

/* Whether sk_grow_keys has room to grow (it also fails when out of memory). Inline: once
 * the table is at its narrowest, every offer that finds the store full asks again. */
static inline int can_grow_keys(const sk_sketch *s) {
    const uint32_t minw = s->k > SK_MIN_WIDTH ? s->k : SK_MIN_WIDTH;
    return s->width / 2 >= minw && s->key_bytes < (uint64_t)s->k * s->max_key_len &&
           s->key_bytes < SK_MAX_KEY_BYTES;
}

static int sk_grow_keys(sk_sketch *s) {
    const uint32_t w = s->width, w2 = w / 2, d = s->depth;
    const uint64_t cap = (uint64_t)s->k * s->max_key_len;
    const size_t words = s->hk ? SK_HK_SLOTS : 1u;
    uint64_t nk;
    unsigned char *arena;
    uint64_t *row64 = NULL;
    uint32_t *row32 = NULL;
    uint32_t r, j;
    if (!can_grow_keys(s))
        return 0;
    nk = s->key_bytes + (uint64_t)(w - w2) * d * cell_size(s->kind);
    if (nk > cap)
        nk = cap;
    if (nk > SK_MAX_KEY_BYTES)
        nk = SK_MAX_KEY_BYTES;
    if (s->hk)
        row64 = (uint64_t *)malloc((size_t)w2 * words * sizeof(uint64_t));
    else
        row32 = (uint32_t *)malloc((size_t)w2 * sizeof(uint32_t));
    arena = (unsigned char *)realloc(s->arena, (size_t)nk);
    if (arena)
        s->arena = arena;
    if (!arena || (!row64 && !row32)) {
        free(row64);
        free(row32);
        return 0;
    }
    for (r = 0; r < d; r++) {
        if (row64)
            memset(row64, 0, (size_t)w2 * words * sizeof(uint64_t));
        else
            memset(row32, 0, (size_t)w2 * sizeof(uint32_t));
        for (j = 0; j < w; j++) {
            uint64_t xlo = (((uint64_t)j << 32) + w - 1) / w;
            uint64_t xhi = ((((uint64_t)j + 1) << 32) + w - 1) / w - 1;
            uint32_t m, mlo = (uint32_t)((xlo * w2) >> 32), mhi = (uint32_t)((xhi * w2) >> 32);
            for (m = mlo; m <= mhi; m++) {
                if (row64) {
                    const uint64_t *old = &s->hk[((size_t)r * w + j) * SK_HK_SLOTS];
                    uint32_t t;
                    for (t = 0; t < SK_HK_SLOTS; t++)
                        hk_merge_slot(&row64[(size_t)m * SK_HK_SLOTS], old[t]);
                } else {
                    uint32_t c = s->cm[(size_t)r * w + j];
                    if (c > row32[m])
                        row32[m] = c;
                }
            }
        }
        /* New row r ends at (r+1)*w2 <= r*w + w2: it overwrites only rows already read. */
        if (row64)
            memcpy(&s->hk[(size_t)r * w2 * SK_HK_SLOTS], row64,
                   (size_t)w2 * words * sizeof(uint64_t));
        else
            memcpy(&s->cm[(size_t)r * w2], row32, (size_t)w2 * sizeof(uint32_t));
    }
    free(row64);
    free(row32);
    if (s->hk) {
        uint64_t *t = (uint64_t *)realloc(s->hk, (size_t)w2 * d * words * sizeof(uint64_t));
        if (t)
            s->hk = t;
    } else {
        uint32_t *t = (uint32_t *)realloc(s->cm, (size_t)w2 * d * sizeof(uint32_t));
        if (t)
            s->cm = t;
    }
    s->width = w2;
    s->key_bytes = (uint32_t)nk;
    return 1;
}

/* 1 when an offer of v cannot change the heap (inline in the callers: most offers stop
 * here once the heap is full). A full heap whose minimum is >= v cannot change: a member
 * already has count >= min. Nor can a full key store that will not grow (size < k: the
 * key bytes bind): topk_insert would refuse a newcomer before popping anything. */
static inline int topk_unchanged(const sk_sketch *s, uint32_t len, uint32_t v) {
    return v == 0 || (s->size && v <= s->heap[0].count &&
                      (s->size == s->k || ((uint64_t)s->live_bytes + len > s->key_bytes &&
                                           !(want_more_keys(s, len) && can_grow_keys(s)))));
}

/* Offer (key, v) to the heap; v is the key's sketch estimate after the update.
 * As in the HeavyKeeper paper, a member's count becomes max(count, v). For
 * HeavyKeeper both are lower bounds of the true count; for Count-Min both are
 * upper bounds. (Adding the exact increment to members was tried: tighter counts,
 * but lower precision, because members then outrank non-members whose estimates
 * are decayed; see docs/sketch.md.) */
static void topk_insert(sk_sketch *s, const void *key, uint32_t len, uint32_t h, uint32_t v) {
    int64_t pos;
    uint32_t hole_off = 0, hole_len = 0;
    pos = heap_find(s, h, key, len);
    if (pos >= 0) {
        if (v > s->heap[pos].count) {
            s->heap[pos].count = v;
            sift_down(s, (uint32_t)pos);
        }
        return;
    }
    if (s->size == s->k && (uint64_t)s->live_bytes - s->heap[0].len + len <= s->key_bytes) {
        /* The common replacement: the new key takes the minimum's entry in place. */
        sk_entry *e = &s->heap[0];
        index_remove(s, e->slot);
        s->live_bytes -= e->len;
        if (len <= e->len) {
            if (len)
                memcpy(s->arena + e->off, key, len);
        } else {
            e->len = 0; /* dead during compaction */
            e->off = arena_alloc(s, key, len);
        }
        s->live_bytes += len;
        e->len = len;
        e->count = v;
        e->hash = h;
        index_insert(s, 0);
        sift_down(s, 0);
        return;
    }
    /* The key does not fit beside the others: drop the weakest entries (all lighter than
     * v) until it does, so a heavy key is never refused because lighter keys hold the
     * space. If the rest are all at least as heavy, it stays untracked. */
    /* The largest key popped here leaves a hole the new key may take (its bytes are dead):
     * without it, a store full of keys (size < k: the key bytes bind) compacts the whole
     * arena for every new entry. Only where the bytes live changes, not the result. */
    if (s->size == s->k) {
        hole_off = s->heap[0].off;
        hole_len = s->heap[0].len;
        heap_pop_min(s);
    }
    while ((uint64_t)s->live_bytes + len > s->key_bytes) {
        if (want_more_keys(s, len) && can_grow_keys(s) && sk_grow_keys(s))
            continue;
        if (s->heap[0].count >= v)
            return;
        if (s->heap[0].len > hole_len) {
            hole_off = s->heap[0].off;
            hole_len = s->heap[0].len;
        }
        heap_pop_min(s);
        if (s->space_evictions != SK_COUNT_MAX)
            s->space_evictions++;
    }
    {
        uint32_t p, off;
        if (len <= hole_len) {
            off = hole_off;
            if (len)
                memcpy(s->arena + off, key, len);
        } else {
            off = arena_alloc(s, key, len); /* before size++: compaction must not see p */
        }
        p = s->size++;
        s->heap[p].count = v;
        s->heap[p].hash = h;
        s->heap[p].len = len;
        s->heap[p].off = off;
        s->live_bytes += len;
        index_insert(s, p);
        sift_up(s, p);
    }
}

static inline void topk_offer(sk_sketch *s, const void *key, uint32_t len, uint32_t h, uint32_t v) {
    if (!topk_unchanged(s, len, v))
        topk_insert(s, key, len, h, v);
}

/* ------------------------------------------------------------- updates */

/* One row of hk_update_cells: the key's bucket b; returns the new maxv. */
static inline uint32_t hk_update_row(uint64_t *b, uint32_t h, uint32_t n, uint32_t maxv,
                                     uint64_t *rng, uint32_t levels) {
    const uint64_t hh = (uint64_t)h << 32;
    uint64_t w0 = b[0], w1 = b[1];
    uint32_t c0 = (uint32_t)w0, c1 = (uint32_t)w1;
    /* '&' and '|', not '&&': which slot matches is data-dependent, so selecting it
     * with arithmetic avoids a second mispredicted branch per row. */
    uint32_t m0 = (uint32_t)(c0 != 0) & (uint32_t)((w0 >> 32) == h);
    uint32_t m1 = (uint32_t)(c1 != 0) & (uint32_t)((w1 >> 32) == h);
    if (m0 | m1) {
        uint64_t *cell = b + (m0 ^ 1u); /* slot 0 first */
        uint32_t c = sk_sat_add((uint32_t)*cell, n);
        *cell = hh | c;
        if (c > maxv)
            maxv = c;
    } else if ((c0 == 0) | (c1 == 0)) {
        b[c0 != 0] = hh | n; /* first empty slot */
        if (n > maxv)
            maxv = n;
    } else if (n == 1) {
        /* The unit update, most events at low skew: one draw, decrement with
         * probability b^-c, and the key takes the slot when it reaches 0. Whether it
         * decrements is a coin flip, so it is selected arithmetically, not branched on
         * (same draws and result as the general loop below). */
        uint32_t weak = c1 < c0, c = weak ? c1 : c0, take;
        uint64_t fp = weak ? w1 >> 32 : w0 >> 32;
        if (c < levels) {
            uint64_t u = rng_next(rng);
            c -= (uint32_t)(u > hk_p0[c]);
            take = (uint32_t)(c == 0);
            fp ^= (fp ^ h) & (0 - (uint64_t)take);
            c += take;
            maxv += take & (uint32_t)(maxv == 0); /* max(maxv, 1) when taken */
        }
        b[weak] = (fp << 32) | c;
    } else {
        uint32_t weak = c1 < c0, c = weak ? c1 : c0, rem = n; /* slot 0 on ties */
        uint64_t fp = weak ? w1 >> 32 : w0 >> 32;
        while (c < levels) {
            uint64_t u = rng_next(rng);
            uint32_t g = rem == 1 ? (u > hk_p0[c] ? 0u : 1u) : hk_failures(c, rem, u);
            if (g >= rem)
                break;
            rem -= g;
            c--;
            if (c == 0) {
                fp = h;
                c = rem;
                if (c > maxv)
                    maxv = c;
                break;
            }
            rem--;
            if (rem == 0)
                break;
        }
        b[weak] = (fp << 32) | c;
    }
    return maxv;
}

/* One bucket per row, SK_HK_SLOTS (2) slots per bucket (HeavyGuardian-style, Yang et al.
 * KDD 2018): the key's own slot is incremented; else an empty slot is taken; else only the
 * weaker slot (smaller counter, slot 0 on ties) decays, so a heavy key sharing its bucket
 * with a stream of light keys is never touched by them. Checks run in this order so a key
 * never holds two slots of one bucket. */
static uint32_t hk_update_cells(sk_sketch *s, uint64_t hash, uint32_t n) {
    uint32_t idx[SK_MAX_DEPTH], i, maxv = 0;
    const uint32_t h = hk_fingerprint(hash);
    /* Locals, not s-> and globals: a store to a bucket may alias them as far as the compiler
     * knows (-fno-strict-aliasing), which reloaded them and stored the rng state per row. */
    uint64_t *const hk = s->hk;
    const uint32_t width = s->width, depth = s->depth, levels = hk_levels;
    uint64_t rng = s->rng;
    if (depth == 2) { /* the default depth: both rows straight-line, in the same order */
        row_indexes(hash, width, 2, idx);
        maxv = hk_update_row(&hk[(size_t)idx[0] * SK_HK_SLOTS], h, n, maxv, &rng, levels);
        maxv = hk_update_row(&hk[((size_t)width + idx[1]) * SK_HK_SLOTS], h, n, maxv, &rng, levels);
    } else {
        row_indexes(hash, width, depth, idx);
        for (i = 0; i < depth; i++)
            maxv = hk_update_row(&hk[((size_t)i * width + idx[i]) * SK_HK_SLOTS], h, n, maxv, &rng,
                                 levels);
    }
    s->rng = rng;
    return maxv;
}

static uint32_t cm_update_cells(sk_sketch *s, uint64_t hash, uint32_t n) {
    uint32_t idx[SK_MAX_DEPTH], i, est = SK_COUNT_MAX, v;
    row_indexes(hash, s->width, s->depth, idx);
    for (i = 0; i < s->depth; i++) {
        uint32_t c = s->cm[(size_t)i * s->width + idx[i]];
        if (c < est)
            est = c;
    }
    v = sk_sat_add(est, n);
    for (i = 0; i < s->depth; i++) {
        uint32_t *c = &s->cm[(size_t)i * s->width + idx[i]];
        if (*c < v)
            *c = v;
    }
    return v;
}

static inline void update_hashed(sk_sketch *s, const void *key, uint32_t len, uint64_t hash,
                                 uint32_t count) {
    uint32_t v = s->kind == SK_KIND_HEAVYKEEPER ? hk_update_cells(s, hash, count)
                                                : cm_update_cells(s, hash, count);
    topk_offer(s, key, len, hk_fingerprint(hash), v);
}

void sk_update(sk_sketch *s, const void *key, size_t len, uint32_t count) {
    if (count == 0)
        return;
    update_hashed(s, key, (uint32_t)len, hk_key_hash64(key, len, &s->hkey), count);
}

uint64_t sk_hash(const sk_sketch *s, const void *key, size_t len) {
    return hk_key_hash64(key, len, &s->hkey);
}

void sk_agg_init(sk_agg *a) {
    a->n = 0;
    a->last = 0;
    a->events = 0;
    a->direct = 0;
    a->drain_first = 0;
    memset(a->slot, 0, sizeof a->slot);
}

/* Empty the round after its entries were applied or copied, and pick the next mode. */
static void agg_next(sk_agg *a) {
    if (a->direct) {
        a->n = 0; /* a direct queue used no slots */
        return;
    }
    if (a->drain_first) {
        a->drain_first = 0;
        a->n = 0;
        a->last = 0;
        a->events = 0;
        return;
    }
    if (a->n == SK_AGG_CAP && (uint64_t)a->n * SK_DIRECT_DEN >= a->events * SK_DIRECT_NUM)
        a->direct = SK_DIRECT_SPAN;
    a->n = 0;
    a->last = 0;
    a->events = 0;
    memset(a->slot, 0, sizeof a->slot);
}

#if defined(__GNUC__) || defined(__clang__)
#define SK_PREFETCH_W(p) __builtin_prefetch((p), 1, 3)
#else
#define SK_PREFETCH_W(p) ((void)(p))
#endif
#define SK_APPLY_AHEAD 4

/* Start loading the buckets of a key applied a few entries later: bucket loads are the
 * main cost of an update once the table outgrows L1 (perf: ~40 % of hk_update_cells). */
static inline void prefetch_cells(const sk_sketch *s, uint64_t hash) {
    uint32_t idx[SK_MAX_DEPTH], i, d = s->depth < 4 ? s->depth : 4;
    row_indexes(hash, s->width, d, idx);
    for (i = 0; i < d; i++) {
        if (s->hk)
            SK_PREFETCH_W(&s->hk[((size_t)i * s->width + idx[i]) * SK_HK_SLOTS]);
        else
            SK_PREFETCH_W(&s->cm[(size_t)i * s->width + idx[i]]);
    }
}

void sk_apply(sk_sketch *s, const sk_agg_entry *e, size_t n) {
    size_t i;
    for (i = 0; i < n && i < SK_APPLY_AHEAD; i++)
        prefetch_cells(s, e[i].hash);
    for (i = 0; i < n; i++) {
        if (i + SK_APPLY_AHEAD < n)
            prefetch_cells(s, e[i + SK_APPLY_AHEAD].hash);
        update_hashed(s, e[i].key, e[i].len, e[i].hash, e[i].count);
    }
}

void sk_agg_flush(sk_sketch *s, sk_agg *a) {
    sk_apply(s, a->e, a->n);
    agg_next(a);
}

uint32_t sk_agg_drain(sk_agg *a, sk_agg_entry *out) {
    uint32_t n = a->n;
    memcpy(out, a->e, (size_t)n * sizeof(sk_agg_entry));
    agg_next(a);
    return n;
}

void sk_agg_add(sk_sketch *s, sk_agg *a, const void *key, size_t len, uint32_t count) {
    uint64_t h;
    if (count == 0 || sk_agg_repeat(a, key, (uint32_t)len, count))
        return;
    h = hk_key_hash64(key, len, &s->hkey);
    if (sk_agg_push(a, key, (uint32_t)len, h, count)) {
        sk_agg_flush(s, a);
        sk_agg_push(a, key, (uint32_t)len, h, count);
    }
}

uint32_t sk_estimate(const sk_sketch *s, const void *key, size_t len) {
    const uint64_t hash = hk_key_hash64(key, len, &s->hkey);
    uint32_t h = hk_fingerprint(hash), idx[SK_MAX_DEPTH], i, est;
    int64_t pos;
    row_indexes(hash, s->width, s->depth, idx);
    if (s->kind == SK_KIND_HEAVYKEEPER) {
        est = 0;
        for (i = 0; i < s->depth; i++) {
            const uint64_t *b = &s->hk[((size_t)i * s->width + idx[i]) * SK_HK_SLOTS];
            uint32_t j;
            for (j = 0; j < SK_HK_SLOTS; j++) {
                uint32_t c = (uint32_t)b[j];
                if (c && (uint32_t)(b[j] >> 32) == h && c > est)
                    est = c;
            }
        }
    } else {
        est = SK_COUNT_MAX;
        for (i = 0; i < s->depth; i++) {
            uint32_t c = s->cm[(size_t)i * s->width + idx[i]];
            if (c < est)
                est = c;
        }
    }
    /* Heap counts are tighter bounds: lower for HeavyKeeper, upper for Count-Min. */
    pos = heap_find(s, h, key, len);
    if (pos >= 0 &&
        (s->kind == SK_KIND_HEAVYKEEPER ? s->heap[pos].count > est : s->heap[pos].count < est))
        est = s->heap[pos].count;
    return est;
}

static void heap_rebuild(sk_sketch *s) {
    uint32_t i;
    memset(s->index, 0, ((size_t)s->mask + 1) * sizeof(uint32_t));
    for (i = 0; i < s->size; i++)
        index_insert(s, i);
    for (i = s->size / 2; i-- > 0;)
        sift_down(s, i);
}

void sk_decay(sk_sketch *s, uint64_t f) {
    size_t cells = table_words(s->kind, s->width, s->depth), i;
    uint32_t r, w = 0;
    if (f >= ((uint64_t)1 << 32))
        return;
    if (s->hk) {
        for (i = 0; i < cells; i++) {
            uint32_t c = (uint32_t)(((uint64_t)(uint32_t)s->hk[i] * f) >> 32);
            s->hk[i] = c ? ((s->hk[i] & 0xFFFFFFFF00000000ULL) | c) : 0;
        }
    } else {
        for (i = 0; i < cells; i++)
            s->cm[i] = (uint32_t)(((uint64_t)s->cm[i] * f) >> 32);
    }
    for (r = 0; r < s->size; r++) {
        uint32_t c = (uint32_t)(((uint64_t)s->heap[r].count * f) >> 32);
        if (c == 0) {
            s->live_bytes -= s->heap[r].len;
            continue;
        }
        s->heap[w] = s->heap[r];
        s->heap[w].count = c;
        w++;
    }
    s->size = w;
    heap_rebuild(s);
}

static int entry_cmp(const sk_sketch *s, uint32_t a, uint32_t b) {
    const sk_entry *x = &s->heap[a], *y = &s->heap[b];
    uint32_t n;
    int c;
    if (x->count != y->count)
        return x->count > y->count ? -1 : 1;
    n = x->len < y->len ? x->len : y->len;
    c = n ? memcmp(s->arena + x->off, s->arena + y->off, n) : 0;
    if (c)
        return c;
    return x->len < y->len ? -1 : (x->len > y->len ? 1 : 0);
}

void sk_topk_order(const sk_sketch *s, uint32_t *order) {
    /* Insertion into a sorted prefix via binary search; k is small and this is not hot. */
    uint32_t i;
    for (i = 0; i < s->size; i++) {
        uint32_t lo = 0, hi = i;
        while (lo < hi) {
            uint32_t mid = (lo + hi) / 2;
            if (entry_cmp(s, order[mid], i) <= 0)
                lo = mid + 1;
            else
                hi = mid;
        }
        memmove(order + lo + 1, order + lo, (i - lo) * sizeof(uint32_t));
        order[lo] = i;
    }
}

/* ------------------------------------------------------------- merge */

int sk_merge(sk_sketch *dst, const sk_sketch *src, char *err, size_t errlen) {
    size_t cells = (size_t)dst->width * dst->depth, i, total = 0, off = 0;
    uint32_t n = 0, j;
    unsigned char *keys;
    uint32_t *lens;
    if (dst->kind != SK_KIND_COUNTMIN || src->kind != SK_KIND_COUNTMIN) {
        snprintf(err, errlen, "only CountMinTopK sketches can be merged");
        return -1;
    }
    if (dst->width != src->width || dst->depth != src->depth || dst->seed != src->seed ||
        dst->max_key_len != src->max_key_len) {
        snprintf(err, errlen,
                 "cannot merge sketches of different shape: width/depth/max_key_len "
                 "%u/%u/%u vs %u/%u/%u, seeds %s (all must be equal)",
                 dst->width, dst->depth, dst->max_key_len, src->width, src->depth, src->max_key_len,
                 dst->seed == src->seed ? "equal" : "differ");
        return -1;
    }
    /* Candidates: dst heap in array order, then src keys not already present. */
    for (j = 0; j < dst->size; j++)
        total += dst->heap[j].len;
    for (j = 0; j < src->size; j++)
        total += src->heap[j].len;
    keys = (unsigned char *)malloc(total ? total : 1);
    lens = (uint32_t *)malloc(((size_t)dst->size + src->size + 1) * sizeof(uint32_t));
    if (!keys || !lens) {
        free(keys);
        free(lens);
        return -2;
    }
    for (j = 0; j < dst->size; j++) {
        const sk_entry *e = &dst->heap[j];
        memcpy(keys + off, dst->arena + e->off, e->len);
        off += e->len;
        lens[n++] = e->len;
    }
    for (j = 0; j < src->size; j++) {
        const sk_entry *e = &src->heap[j];
        if (heap_find(dst, e->hash, src->arena + e->off, e->len) >= 0)
            continue;
        memcpy(keys + off, src->arena + e->off, e->len);
        off += e->len;
        lens[n++] = e->len;
    }
    for (i = 0; i < cells; i++)
        dst->cm[i] = sk_sat_add(dst->cm[i], src->cm[i]);
    {
        uint32_t kept = dst->space_evictions;
        heap_reset(dst);
        dst->space_evictions = kept; /* rebuilding adds to it, never forgets */
    }
    off = 0;
    for (j = 0; j < n; j++) {
        const unsigned char *key = keys + off;
        const uint64_t hash = hk_key_hash64(key, lens[j], &dst->hkey);
        uint32_t h = hk_fingerprint(hash), idx[SK_MAX_DEPTH], r, est = SK_COUNT_MAX;
        row_indexes(hash, dst->width, dst->depth, idx);
        for (r = 0; r < dst->depth; r++) {
            uint32_t c = dst->cm[(size_t)r * dst->width + idx[r]];
            if (c < est)
                est = c;
        }
        topk_offer(dst, key, lens[j], h, est);
        off += lens[j];
    }
    free(keys);
    free(lens);
    return 0;
}

/* ------------------------------------------------------------- serialization */

uint32_t sk_crc32(const unsigned char *buf, size_t len) {
    uint32_t c = 0xFFFFFFFFu;
    size_t i;
    for (i = 0; i < len; i++)
        c = crc_table[(c ^ buf[i]) & 0xFFu] ^ (c >> 8);
    return c ^ 0xFFFFFFFFu;
}

static void put32(unsigned char *p, uint32_t v) {
    p[0] = (unsigned char)v;
    p[1] = (unsigned char)(v >> 8);
    p[2] = (unsigned char)(v >> 16);
    p[3] = (unsigned char)(v >> 24);
}

static void put64(unsigned char *p, uint64_t v) {
    put32(p, (uint32_t)v);
    put32(p + 4, (uint32_t)(v >> 32));
}

static uint32_t get32(const unsigned char *p) {
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}

static uint64_t get64(const unsigned char *p) { return get32(p) | ((uint64_t)get32(p + 4) << 32); }

size_t sk_serialized_size(const sk_sketch *s) {
    size_t n = SK_HEADER_SIZE + (size_t)s->width * s->depth * cell_size(s->kind) + 4;
    uint32_t i;
    for (i = 0; i < s->size; i++)
        n += 8 + s->heap[i].len;
    return n;
}

void sk_serialize(const sk_sketch *s, unsigned char *out) {
    unsigned char *p = out;
    size_t cells = table_words(s->kind, s->width, s->depth), i;
    memcpy(p, "HKSK", 4);
    p[4] = (unsigned char)SK_SERIAL_VERSION;
    p[5] = 0;
    p[6] = (unsigned char)s->kind;
    p[7] = (unsigned char)s->adaptive;
    put32(p + 8, s->k);
    put32(p + 12, s->width);
    put32(p + 16, s->depth);
    put32(p + 20, (uint32_t)s->seed);
    put32(p + 24, s->max_key_len);
    put32(p + 28, s->key_bytes);
    put32(p + 32, SK_DECAY_NUM);
    put32(p + 36, SK_DECAY_DEN);
    put64(p + 40, s->rng);
    put32(p + 48, s->size);
    put32(p + 52, s->space_evictions);
    put32(p + 56, (uint32_t)(s->seed >> 32));
    p += SK_HEADER_SIZE;
    if (s->hk) {
        for (i = 0; i < cells; i++, p += 8)
            put64(p, s->hk[i]);
    } else {
        for (i = 0; i < cells; i++, p += 4)
            put32(p, s->cm[i]);
    }
    for (i = 0; i < s->size; i++) {
        const sk_entry *e = &s->heap[i];
        put32(p, e->count);
        put32(p + 4, e->len);
        if (e->len)
            memcpy(p + 8, s->arena + e->off, e->len);
        p += 8 + e->len;
    }
    put32(p, sk_crc32(out, (size_t)(p - out)));
}

sk_sketch *sk_deserialize(const unsigned char *buf, size_t len, int kind, char *err, size_t errlen,
                          int *oom) {
    sk_params pr;
    sk_sketch *s;
    uint32_t size, i, version;
    size_t cells, pos, table;
    *oom = 0;
    if (len < SK_HEADER_SIZE + 4) {
        snprintf(err, errlen, "truncated sketch: %zu bytes, need at least %u", len,
                 SK_HEADER_SIZE + 4);
        return NULL;
    }
    if (memcmp(buf, "HKSK", 4) != 0) {
        snprintf(err, errlen, "bad magic: not a hotkeyd sketch");
        return NULL;
    }
    version = (uint32_t)buf[4] | ((uint32_t)buf[5] << 8);
    if (version != SK_SERIAL_VERSION) {
        snprintf(err, errlen, "unsupported sketch version %u (supported: %u)", version,
                 SK_SERIAL_VERSION);
        return NULL;
    }
    if (get32(buf + len - 4) != sk_crc32(buf, len - 4)) {
        snprintf(err, errlen, "checksum mismatch: sketch bytes are corrupt or truncated");
        return NULL;
    }
    if (buf[6] != kind) {
        snprintf(err, errlen, "sketch kind %u does not match the class (expected %d)", buf[6],
                 kind);
        return NULL;
    }
    if (buf[7] > 1 || get32(buf + 32) != SK_DECAY_NUM || get32(buf + 36) != SK_DECAY_DEN) {
        snprintf(err, errlen, "corrupt header: reserved or decay fields invalid");
        return NULL;
    }
    if (sk_plan(kind, get32(buf + 8), SK_UNSET, get32(buf + 12), get32(buf + 16),
                get32(buf + 20) | ((uint64_t)get32(buf + 56) << 32), get32(buf + 24),
                get32(buf + 28), &pr, err, errlen) != 0)
        return NULL;
    cells = table_words(kind, pr.width, pr.depth);
    table = (size_t)pr.width * pr.depth * cell_size(kind);
    size = get32(buf + 48);
    if (size > pr.k || table > len - 4 - SK_HEADER_SIZE) {
        snprintf(err, errlen, "corrupt sketch: heap size or table does not fit");
        return NULL;
    }
    s = sk_new(&pr);
    if (!s) {
        *oom = 1;
        return NULL;
    }
    s->adaptive = buf[7];
    s->rng = get64(buf + 40);
    s->space_evictions = get32(buf + 52);
    pos = SK_HEADER_SIZE;
    for (i = 0; i < cells; i++) {
        if (s->hk) {
            s->hk[i] = get64(buf + pos);
            pos += 8;
        } else {
            s->cm[i] = get32(buf + pos);
            pos += 4;
        }
    }
    for (i = 0; i < size; i++) {
        uint32_t count, klen, h;
        const unsigned char *key;
        if (len - 4 - pos < 8)
            goto corrupt;
        count = get32(buf + pos);
        klen = get32(buf + pos + 4);
        pos += 8;
        if (klen > pr.max_key_len || klen > len - 4 - pos || count == 0 ||
            (uint64_t)s->live_bytes + klen > s->key_bytes)
            goto corrupt;
        key = buf + pos;
        h = hk_fingerprint(hk_key_hash64(key, klen, &s->hkey));
        if (heap_find(s, h, key, klen) >= 0)
            goto corrupt;
        if (i > 0 && count < s->heap[(i - 1) / 2].count)
            goto corrupt;
        s->heap[i].count = count;
        s->heap[i].hash = h;
        s->heap[i].len = klen;
        s->heap[i].off = arena_alloc(s, key, klen);
        s->live_bytes += klen;
        s->size = i + 1;
        index_insert(s, i);
        pos += klen;
    }
    if (pos != len - 4)
        goto corrupt;
    return s;
corrupt:
    snprintf(err, errlen, "corrupt sketch: invalid top-k entries");
    sk_free(s);
    return NULL;
}
