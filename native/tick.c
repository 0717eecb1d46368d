/* Per-tick work of the detector (see tick.h). */
#include "tick.h"

#include <stdlib.h>
#include <string.h>

static int tk_grow_table(tk_set *s, size_t size) {
    uint32_t *t = (uint32_t *)calloc(size, sizeof(uint32_t));
    size_t i;
    if (!t)
        return -1;
    free(s->table);
    s->table = t;
    s->mask = size - 1;
    for (i = 0; i < s->n; i++) {
        size_t b = s->hash[i] & s->mask;
        while (t[b])
            b = (b + 1) & s->mask;
        t[b] = (uint32_t)(i + 1);
    }
    return 0;
}

static int tk_grow_entries(tk_set *s, size_t cap) {
    const char **p = (const char **)realloc((void *)s->ptr, cap * sizeof(*p));
    size_t *l;
    uint32_t *h;
    if (!p)
        return -1;
    s->ptr = p;
    l = (size_t *)realloc(s->len, cap * sizeof(*l));
    if (!l)
        return -1;
    s->len = l;
    h = (uint32_t *)realloc(s->hash, cap * sizeof(*h));
    if (!h)
        return -1;
    s->hash = h;
    s->cap = cap;
    return 0;
}

int tk_set_init(tk_set *s, size_t expect) {
    size_t size = 16;
    memset(s, 0, sizeof(*s));
    while (size < 2 * expect + 2)
        size *= 2;
    if (tk_grow_table(s, size) || tk_grow_entries(s, expect + 8)) {
        tk_set_free(s);
        return -1;
    }
    return 0;
}

void tk_set_free(tk_set *s) {
    free(s->table);
    free((void *)s->ptr);
    free(s->len);
    free(s->hash);
    memset(s, 0, sizeof(*s));
}

ptrdiff_t tk_set_add(tk_set *s, const char *p, size_t len, uint32_t h, int *added) {
    size_t b = h & s->mask;
    *added = 0;
    while (s->table[b]) {
        size_t i = s->table[b] - 1;
        if (s->hash[i] == h && s->len[i] == len && memcmp(s->ptr[i], p, len) == 0)
            return (ptrdiff_t)i;
        b = (b + 1) & s->mask;
    }
    if (s->n == s->cap && tk_grow_entries(s, 2 * s->cap))
        return -1;
    if (2 * (s->n + 1) > s->mask + 1) {
        if (tk_grow_table(s, 2 * (s->mask + 1)))
            return -1;
        b = h & s->mask;
        while (s->table[b])
            b = (b + 1) & s->mask;
    }
    s->ptr[s->n] = p;
    s->len[s->n] = len;
    s->hash[s->n] = h;
    s->table[b] = (uint32_t)(s->n + 1);
    *added = 1;
    return (ptrdiff_t)s->n++;
}

static int64_t tk_low(const tk_slot *s) {
    int64_t low;
    size_t j;
    if (s->n == 0 || (int64_t)s->n < s->k)
        return 0;
    low = s->counts[0];
    for (j = 1; j < s->n; j++)
        if (s->counts[j] < low)
            low = s->counts[j];
    return low;
}

void tk_reach(const tk_slot *slots, size_t ns, double total, size_t *take) {
    double floor = 0.0, per;
    size_t i, j;
    if (ns == 0)
        return;
    for (i = 0; i < ns; i++)
        floor += (double)tk_low(&slots[i]) * slots[i].factor;
    per = (total - floor) / (double)ns;
    for (i = 0; i < ns; i++) {
        int64_t low = tk_low(&slots[i]);
        double f = slots[i].factor;
        for (j = 0; j < slots[i].n; j++)
            if ((double)(slots[i].counts[j] - low) * f < per)
                break;
        take[i] = j;
    }
}

int64_t tk_floor(const tk_slot *slot) { return tk_low(slot); }

void tk_add_lane(double *acc, const double *sums, size_t n) {
    size_t i;
    for (i = 0; i < n; i++)
        if (sums[i] != 0.0)
            acc[i] += sums[i];
}

size_t tk_classify(const double *acc, const uint8_t *hot, size_t n, double inv, double min_rate,
                   int keep_all, double *rate, uint8_t *keep, uint32_t *contenders) {
    size_t i, nc = 0;
    for (i = 0; i < n; i++) {
        double r = acc[i] * inv;
        int contender = !hot[i] && r > 0.0 && r >= min_rate;
        rate[i] = r;
        keep[i] = (uint8_t)(hot[i] || contender || (keep_all && acc[i] > 0.0));
        if (contender)
            contenders[nc++] = (uint32_t)i;
    }
    return nc;
}
