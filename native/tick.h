/* Per-tick work of the detector: candidate selection and threshold checks on arrays.
 *
 * Plain C99, no Python. An evaluation takes the top-k of every closed sub-window of every
 * lane, keeps those keys that may reach the lowest threshold (or all of them, for the
 * top rates), adds the hot keys, and after the window sums rates each candidate and picks
 * the ones at or above the lowest threshold. The CPython glue is _tickmodule.c; the
 * pure-Python twin is hotkeyd/detector/_tick_py.py and gives the same results. */
#ifndef HOTKEYD_TICK_H
#define HOTKEYD_TICK_H

#include <stddef.h>
#include <stdint.h>

/* A set of byte strings in insertion order: the candidates of one evaluation. The set
 * does not copy the keys; they must outlive it. */
typedef struct {
    uint32_t *table; /* 0 = empty, else index + 1 */
    size_t mask; /* table size - 1 (a power of two) */
    const char **ptr;
    size_t *len;
    uint32_t *hash;
    size_t n, cap;
} tk_set;

int tk_set_init(tk_set *s, size_t expect);
void tk_set_free(tk_set *s);
/* Index of key ``p[0..len)`` (hash ``h``, any well-mixed hash of its bytes: the binding
 * passes the one Python caches in each bytes object) in the set, adding it if new
 * (``*added`` = 1); -1 when out of memory. */
ptrdiff_t tk_set_add(tk_set *s, const char *p, size_t len, uint32_t h, int *added);

/* One closed sub-window's top-k: counts as the sketch listed them (count-descending), the
 * sketch's k (a top-k shorter than k is not full) and the sub-window's scale factor. */
typedef struct {
    const int64_t *counts;
    size_t n;
    int64_t k;
    double factor;
} tk_slot;

/* For each slot, how many leading entries may reach a scaled window count of ``total``:
 * a key outside a slot's full top-k counted at most that top-k's smallest count there, so
 * one reaching ``total`` is above that floor by ``(total - sum of floors) / slots`` in at
 * least one slot. ``take[i]`` is the length of that prefix of slot i. */
void tk_reach(const tk_slot *slots, size_t ns, double total, size_t *take);

/* A slot's floor: the smallest count of its top-k when full (n >= k), else 0. A key not
 * listed counted at most that there. */
int64_t tk_floor(const tk_slot *slot);

/* Adds one lane's window sums into ``acc`` (zeros add nothing, as the lanes' dicts did). */
void tk_add_lane(double *acc, const double *sums, size_t n);

/* Rates of the candidates: ``rate[i] = acc[i] * inv``. ``keep[i]``: the rate goes into
 * the evaluation (a positive count, or a hot key; with ``keep_all`` 0 only hot keys and
 * contenders). ``contenders`` gets the indexes of keys not hot whose rate is positive and
 * at least ``min_rate``; returns how many. */
size_t tk_classify(const double *acc, const uint8_t *hot, size_t n, double inv, double min_rate,
                   int keep_all, double *rate, uint8_t *keep, uint32_t *contenders);

#endif
