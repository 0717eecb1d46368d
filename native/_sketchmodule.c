/* Thin CPython binding for the sketch core (the only file that includes Python.h).
 *
 * Concurrent use from threads is safe even though update_lines releases the GIL (see
 * SketchObject for how). Python code that may run (``__index__`` of counts, buffer exports)
 * runs BEFORE an operation waits for the sketch, so a re-entrant call can never deadlock.
 * The module declares no Py_mod_gil slot: free-threaded builds keep the GIL for it. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <pythread.h>

#include "lines.h"
#include "keyhash.h"
#include "murmur3.h"
#include "sketch.h"

#if defined(__GNUC__) || defined(__clang__)
#define PREFETCH(p) __builtin_prefetch((p), 0, 3)
#else
#define PREFETCH(p) ((void)0)
#endif
#ifndef PREFETCH_AHEAD /* overridable for A/B builds only */
#define PREFETCH_AHEAD 32
#endif
#ifndef PREFETCH_DATA_AHEAD
#define PREFETCH_DATA_AHEAD (PREFETCH_AHEAD / 2)
#endif
#ifndef PREFETCH_DATA_MIN
#define PREFETCH_DATA_MIN 48u /* SK_RUN_MIN_LEN: from there sk_agg_repeat reads the key's tail */
#endif

/* Every cache line of a bytes object's data. The data starts 32 bytes into the object,
 * so for half of all objects (pymalloc's 16-byte alignment) its first line is not the
 * header's: skipping it cost a memory stall in the hash for those keys (Zipf 0.8, 34 B:
 * hk_long_hash 12 % of perf). No branch on where the data starts or ends (a mispredicted
 * one per key cost 10 % at 12 B): the first and the last line are always prefetched. */
static inline void prefetch_data(PyObject *q) {
    if (PyBytes_CheckExact(q)) {
        const char *d = PyBytes_AS_STRING(q);
        uintptr_t a = (uintptr_t)d & ~(uintptr_t)63,
                  last = ((uintptr_t)d + (uintptr_t)PyBytes_GET_SIZE(q)) & ~(uintptr_t)63;
        PREFETCH((const void *)a);
        for (a += 64; a < last; a += 64)
            PREFETCH((const void *)a);
        PREFETCH((const void *)last);
    }
}

/* update_many's hash memo: a long key met again in one call (the same bytes or str object:
 * a hot key repeated through a chunk) takes its hash from the memo instead of reading and
 * hashing its bytes again. Direct-mapped on the data pointer; an entry is used only when
 * pointer and length both match, so a collision costs a hash, never a wrong one. Only
 * bytes and str keys (immutable, alive for the whole call: see update_many), only from
 * MEMO_MIN_LEN bytes on, where hashing costs more than a probe (docs/sketch.md). The memo
 * changes which work is done, not the result: the hash is the one sk_hash would return.
 * Keys that are new objects every time (decoded off the wire) never hit: after each
 * MEMO_TRIAL probes with fewer than one hit in MEMO_MISS_DEN, the call stops probing. */
#ifndef MEMO_MIN_LEN /* overridable for A/B builds only */
#define MEMO_MIN_LEN 64u
#endif
#ifndef MEMO_BITS /* overridable for A/B builds only */
#define MEMO_BITS 12
#endif
#define MEMO_TRIAL 1024u
#define MEMO_MISS_DEN 8u
/* A memo entry also remembers the aggregation entry its key went to (ent, 1-based) and
 * in which round (a count of drains, in the high bits of tag): a hit in the same round adds
 * to that entry directly, as sk_agg_push would after probing for it (a round's entries
 * are distinct keys, so it is the one entry the probe finds). */
#define MEMO_ENT_BITS 13 /* entries 1..SK_AGG_CAP */
#define MEMO_ROUNDS ((uint32_t)1 << (32 - MEMO_ENT_BITS)) /* then the memo is cleared */
#if SK_AGG_CAP >= (1u << MEMO_ENT_BITS)
#error "MEMO_ENT_BITS must hold every aggregation entry index"
#endif
typedef struct {
    const char *p;
    uint64_t hash;
    uint32_t len;
    uint32_t tag; /* round << MEMO_ENT_BITS | ent; 0 = none */
} hash_memo;

static inline hash_memo *memo_slot(hash_memo *memo, const char *p) {
    return &memo[((uint64_t)(uintptr_t)p * 0x9E3779B97F4A7C15ull) >> (64 - MEMO_BITS)];
}

/* After a drain: the next round; when the round numbers run out, every tag is dropped. */
static uint32_t memo_next_round(hash_memo *memo, uint32_t round) {
    if (++round < MEMO_ROUNDS)
        return round;
    if (memo)
        memset(memo, 0, ((size_t)1 << MEMO_BITS) * sizeof(hash_memo));
    return 1;
}

static PyObject *SketchError;
static PyObject *SerializationError;

/* Exclusion. Every method works on the sketch while holding the GIL, except update_lines,
 * which releases it while it parses and counts. update_lines marks the object busy (under
 * the GIL, after waiting for it to be idle), holds `lock` while it works without the GIL,
 * and clears busy (release store) before giving the lock back. So a method holding the GIL
 * owns the sketch as soon as a plain load sees busy == 0: other methods need the GIL it
 * holds, and no GIL-free worker can start without the GIL either. The fast path has no
 * atomic read-modify-write: the two a benaphore needs cost ~11 ns of a ~100 ns update()
 * call at Zipf 0.8 (perf: a locked instruction waits for the caller's pending stores). */
typedef struct {
    PyObject_HEAD
    sk_sketch *sk;
    PyThread_type_lock lock; /* held by the GIL-free worker; waiters block on it */
    int busy; /* a GIL-free worker owns the sketch; written under the GIL or by it */
} SketchObject;

static PyTypeObject HeavyKeeperType;
static PyTypeObject CountMinType;

static int kind_of(PyTypeObject *tp) {
    return PyType_IsSubtype(tp, &HeavyKeeperType) ? SK_KIND_HEAVYKEEPER : SK_KIND_COUNTMIN;
}

static PyThread_type_lock lock_new(void) { return PyThread_allocate_lock(); }

/* GIL held: 1 when no GIL-free worker owns the sketch (it is then ours until we release
 * the GIL). */
static inline int sketch_idle(SketchObject *self) {
    return !__atomic_load_n(&self->busy, __ATOMIC_ACQUIRE);
}

/* GIL held on entry and on return: wait, with the GIL released, until no worker owns the
 * sketch. A waiter holds `lock` only for an instant and never while it wants the GIL. */
static void wait_idle(SketchObject *self) {
    while (!sketch_idle(self)) {
        Py_BEGIN_ALLOW_THREADS PyThread_acquire_lock(self->lock, WAIT_LOCK);
        PyThread_release_lock(self->lock);
        Py_END_ALLOW_THREADS
    }
}

/* Own the sketch for an operation that keeps the GIL (nothing to give back). */
static inline void lock_take(SketchObject *self) {
    if (!sketch_idle(self))
        wait_idle(self);
}

/* Two sketches at once: both idle at the same moment (waiting for one can let the other
 * become busy again). */
static void lock_take2(SketchObject *a, SketchObject *b) {
    while (!sketch_idle(a) || !sketch_idle(b)) {
        wait_idle(a);
        wait_idle(b);
    }
}

/* GIL held on entry; returns with the GIL released and the sketch owned by this thread. */
static PyThreadState *worker_begin(SketchObject *self) {
    PyThreadState *ts;
    wait_idle(self);
    __atomic_store_n(&self->busy, 1, __ATOMIC_RELAXED);
    ts = PyEval_SaveThread();
    PyThread_acquire_lock(self->lock, WAIT_LOCK); /* waiters hold it only for an instant */
    return ts;
}

/* Give the sketch back and take the GIL again. */
static void worker_end(SketchObject *self, PyThreadState *ts) {
    __atomic_store_n(&self->busy, 0, __ATOMIC_RELEASE);
    PyThread_release_lock(self->lock);
    PyEval_RestoreThread(ts);
}

/* ------------------------------------------------------------ conversions */

typedef struct {
    const char *p;
    Py_ssize_t n;
    Py_buffer view;
    int has_view;
} keyref;

static void key_release(keyref *k) {
    if (k->has_view) {
        PyBuffer_Release(&k->view);
        k->has_view = 0;
    }
}

static int key_get(PyObject *o, keyref *k) {
    k->has_view = 0;
    if (PyBytes_Check(o)) {
        k->p = PyBytes_AS_STRING(o);
        k->n = PyBytes_GET_SIZE(o);
        return 0;
    }
    if (PyUnicode_Check(o)) {
        k->p = PyUnicode_AsUTF8AndSize(o, &k->n);
        return k->p ? 0 : -1;
    }
    if (PyObject_CheckBuffer(o)) {
        if (PyObject_GetBuffer(o, &k->view, PyBUF_SIMPLE) != 0) {
            PyErr_Clear();
            PyErr_Format(PyExc_TypeError, "key must be a contiguous bytes-like object, not %.100s",
                         Py_TYPE(o)->tp_name);
            return -1;
        }
        k->has_view = 1;
        k->p = (const char *)k->view.buf;
        k->n = k->view.len;
        return 0;
    }
    PyErr_Format(PyExc_TypeError, "key must be bytes, str or a bytes-like object, not %.100s",
                 Py_TYPE(o)->tp_name);
    return -1;
}

static int key_check_len(SketchObject *self, keyref *k) {
    if ((size_t)k->n > self->sk->max_key_len) {
        PyErr_Format(SketchError, "key is %zd bytes, longer than max_key_len=%u (allowed: 0..%u)",
                     k->n, self->sk->max_key_len, self->sk->max_key_len);
        return -1;
    }
    return 0;
}

static int count_get(PyObject *o, uint32_t *out) {
    PyObject *v;
    long long x;
    int overflow;
    if (!PyIndex_Check(o)) {
        PyErr_Format(PyExc_TypeError, "count must be an int, not %.100s", Py_TYPE(o)->tp_name);
        return -1;
    }
    v = PyNumber_Index(o);
    if (!v)
        return -1;
    x = PyLong_AsLongLongAndOverflow(v, &overflow);
    if (x == -1 && PyErr_Occurred()) {
        Py_DECREF(v);
        return -1;
    }
    if (overflow || x < 0 || x > (long long)SK_COUNT_MAX) {
        PyErr_Format(SketchError, "count must be in [0, %u], got %R", SK_COUNT_MAX, v);
        Py_DECREF(v);
        return -1;
    }
    Py_DECREF(v);
    *out = (uint32_t)x;
    return 0;
}

/* Optional int argument: None/absent -> SK_UNSET; out of int64 -> clamps that fail range checks. */
static int int_arg(PyObject *o, const char *name, int allow_none, int64_t *out) {
    long long x;
    int overflow;
    if (o == NULL || (o == Py_None && allow_none)) {
        *out = SK_UNSET;
        return 0;
    }
    if (!PyLong_Check(o)) {
        PyErr_Format(PyExc_TypeError, "%s must be an int%s, not %.100s", name,
                     allow_none ? " or None" : "", Py_TYPE(o)->tp_name);
        return -1;
    }
    x = PyLong_AsLongLongAndOverflow(o, &overflow);
    if (x == -1 && PyErr_Occurred())
        return -1;
    if (overflow)
        *out = overflow > 0 ? INT64_MAX : INT64_MIN + 1;
    else
        *out = x == SK_UNSET ? INT64_MIN + 1 : x;
    return 0;
}

/* A hash seed: an int in [0, 2^64) (TypeError otherwise, SketchError when out of range;
 * the value is never echoed: seeds are secrets). */
static int seed_arg(PyObject *o, uint64_t *out) {
    unsigned long long x;
    if (o == NULL) {
        *out = 0;
        return 0;
    }
    if (!PyLong_Check(o)) {
        PyErr_Format(PyExc_TypeError, "seed must be an int, not %.100s", Py_TYPE(o)->tp_name);
        return -1;
    }
    x = PyLong_AsUnsignedLongLong(o);
    if (x == (unsigned long long)-1 && PyErr_Occurred()) {
        if (!PyErr_ExceptionMatches(PyExc_OverflowError))
            return -1;
        PyErr_Clear();
        PyErr_SetString(SketchError, "seed must be in [0, 2**64 - 1]");
        return -1;
    }
    *out = (uint64_t)x;
    return 0;
}

/* ------------------------------------------------------------ lifecycle */

static PyObject *Sketch_new(PyTypeObject *type, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {"k",           "memory",    "width",      "depth", "seed",
                             "max_key_len", "key_bytes", "adapt_keys", NULL};
    PyObject *ok = NULL, *omem = NULL, *ow = NULL, *od = NULL, *oseed = NULL, *oml = NULL,
             *okb = NULL, *oadapt = NULL;
    int adapt = 0;
    int64_t k, mem, w, d, ml, kb;
    uint64_t seed;
    sk_params p;
    char err[512];
    SketchObject *self;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "|OO$OOOOOO", kwlist, &ok, &omem, &ow, &od, &oseed,
                                     &oml, &okb, &oadapt))
        return NULL;
    if (oadapt) {
        if (!PyBool_Check(oadapt)) {
            PyErr_Format(PyExc_TypeError, "adapt_keys must be a bool, not %.100s",
                         Py_TYPE(oadapt)->tp_name);
            return NULL;
        }
        adapt = oadapt == Py_True;
    }
    if (int_arg(ok, "k", 0, &k) || int_arg(omem, "memory", 1, &mem) ||
        int_arg(ow, "width", 1, &w) || int_arg(od, "depth", 1, &d) || seed_arg(oseed, &seed) ||
        int_arg(oml, "max_key_len", 0, &ml) || int_arg(okb, "key_bytes", 1, &kb))
        return NULL;
    if (!ok)
        k = 100;
    if (!oml)
        ml = 1024;
    if (sk_plan(kind_of(type), k, mem, w, d, seed, ml, kb, &p, err, sizeof err) != 0) {
        PyErr_SetString(SketchError, err);
        return NULL;
    }
    p.adaptive = p.adaptive && adapt;
    self = (SketchObject *)type->tp_alloc(type, 0);
    if (!self)
        return NULL;
    self->lock = lock_new();
    self->sk = sk_new(&p);
    if (!self->lock || !self->sk) {
        Py_DECREF(self);
        return PyErr_NoMemory();
    }
    return (PyObject *)self;
}

static void Sketch_dealloc(SketchObject *self) {
    sk_free(self->sk);
    if (self->lock)
        PyThread_free_lock(self->lock);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* ------------------------------------------------------------ methods */

static PyObject *Sketch_update(SketchObject *self, PyObject *const *args, Py_ssize_t nargsf,
                               PyObject *kwnames) {
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf), i, nkw = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
    PyObject *okey = nargs > 0 ? args[0] : NULL, *ocount = nargs > 1 ? args[1] : NULL;
    uint32_t count = 1;
    keyref k;
    if (nargs > 2) {
        PyErr_Format(PyExc_TypeError, "update() takes at most 2 arguments (%zd given)", nargs);
        return NULL;
    }
    for (i = 0; i < nkw; i++) {
        PyObject *name = PyTuple_GET_ITEM(kwnames, i);
        PyObject **slot;
        if (PyUnicode_CompareWithASCIIString(name, "key") == 0)
            slot = &okey;
        else if (PyUnicode_CompareWithASCIIString(name, "count") == 0)
            slot = &ocount;
        else {
            PyErr_Format(PyExc_TypeError, "update() got an unexpected keyword argument '%U'", name);
            return NULL;
        }
        if (*slot) {
            PyErr_Format(PyExc_TypeError, "update() got multiple values for argument '%U'", name);
            return NULL;
        }
        *slot = args[nargs + i];
    }
    if (!okey) {
        PyErr_SetString(PyExc_TypeError, "update() missing required argument 'key'");
        return NULL;
    }
    if (ocount && count_get(ocount, &count))
        return NULL;
    if (key_get(okey, &k))
        return NULL;
    if (key_check_len(self, &k)) {
        key_release(&k);
        return NULL;
    }
    lock_take(self);
    sk_update(self->sk, k.p, (size_t)k.n, count);
    key_release(&k);
    Py_RETURN_NONE;
}

/* counts given as a buffer of native integers (numpy arrays, array.array). */
static int counts_from_buffer(PyObject *o, Py_ssize_t n, uint32_t *out) {
    Py_buffer v;
    const char *fmt;
    char code;
    Py_ssize_t i;
    int ok = 1;
    if (PyObject_GetBuffer(o, &v, PyBUF_FORMAT | PyBUF_C_CONTIGUOUS) != 0)
        return -1;
    fmt = v.format ? v.format : "B";
    if (*fmt == '@' || *fmt == '=' || *fmt == '<')
        fmt++;
    code = fmt[0];
    if (fmt[0] == 0 || fmt[1] != 0 || !strchr("bBhHiIlLqQnN", code) || v.ndim != 1) {
        PyErr_Format(PyExc_TypeError, "counts must hold integers, not buffer format '%s'",
                     v.format ? v.format : "B");
        PyBuffer_Release(&v);
        return -1;
    }
    if (v.len / v.itemsize != n) {
        PyErr_Format(SketchError, "counts has %zd items but keys has %zd (lengths must match)",
                     (Py_ssize_t)(v.len / v.itemsize), n);
        PyBuffer_Release(&v);
        return -1;
    }
    for (i = 0; i < n && ok; i++) {
        const char *p = (const char *)v.buf + i * v.itemsize;
        long long s = 0;
        unsigned long long u = 0;
        int is_signed = code >= 'a';
        switch (v.itemsize) {
        case 1:
            if (is_signed)
                s = *(const signed char *)p;
            else
                u = *(const unsigned char *)p;
            break;
        case 2:
            if (is_signed) {
                int16_t t;
                memcpy(&t, p, 2);
                s = t;
            } else {
                uint16_t t;
                memcpy(&t, p, 2);
                u = t;
            }
            break;
        case 4:
            if (is_signed) {
                int32_t t;
                memcpy(&t, p, 4);
                s = t;
            } else {
                uint32_t t;
                memcpy(&t, p, 4);
                u = t;
            }
            break;
        case 8:
            if (is_signed) {
                int64_t t;
                memcpy(&t, p, 8);
                s = t;
            } else {
                uint64_t t;
                memcpy(&t, p, 8);
                u = t;
            }
            break;
        default:
            ok = 0;
            PyErr_SetString(PyExc_TypeError, "counts has an unsupported integer size");
            continue;
        }
        if (is_signed) {
            if (s < 0 || s > (long long)SK_COUNT_MAX) {
                PyErr_Format(SketchError, "count must be in [0, %u], got %lld (at index %zd)",
                             SK_COUNT_MAX, s, i);
                ok = 0;
            } else {
                out[i] = (uint32_t)s;
            }
        } else if (u > SK_COUNT_MAX) {
            PyErr_Format(SketchError, "count must be in [0, %u], got %llu (at index %zd)",
                         SK_COUNT_MAX, u, i);
            ok = 0;
        } else {
            out[i] = (uint32_t)u;
        }
    }
    PyBuffer_Release(&v);
    return ok ? 0 : -1;
}

/* Fast path only for native-order integer buffers; a byte-swapped buffer ('>' or '!')
 * goes through the generic sequence path, which reads it correctly. */
static int native_order_buffer(PyObject *o) {
    Py_buffer v;
    int ok;
    if (!PyObject_CheckBuffer(o) || PyBytes_Check(o) || PyByteArray_Check(o))
        return 0;
    if (PyObject_GetBuffer(o, &v, PyBUF_FORMAT | PyBUF_ND) != 0) {
        PyErr_Clear();
        return 1; /* let counts_from_buffer report the problem */
    }
    ok = !(v.format && (v.format[0] == '>' || v.format[0] == '!'));
    PyBuffer_Release(&v);
    return ok;
}

static int counts_get(PyObject *o, Py_ssize_t n, uint32_t *out) {
    PyObject *seq;
    Py_ssize_t i;
    if (native_order_buffer(o))
        return counts_from_buffer(o, n, out);
    if (PyUnicode_Check(o)) {
        PyErr_SetString(PyExc_TypeError, "counts must be a sequence of ints, not str");
        return -1;
    }
    seq = PySequence_Fast(o, "counts must be a sequence of ints or an integer array");
    if (!seq)
        return -1;
    if (PySequence_Fast_GET_SIZE(seq) != n) {
        PyErr_Format(SketchError, "counts has %zd items but keys has %zd (lengths must match)",
                     PySequence_Fast_GET_SIZE(seq), n);
        Py_DECREF(seq);
        return -1;
    }
    for (i = 0; i < n; i++) {
        PyObject *item;
        int rc;
        /* count_get may run Python code (__index__) that resizes the caller's list:
           re-check the size and hold the item while it is converted. */
        if (PySequence_Fast_GET_SIZE(seq) != n) {
            PyErr_SetString(PyExc_RuntimeError, "counts changed size during update_many");
            Py_DECREF(seq);
            return -1;
        }
        item = PySequence_Fast_GET_ITEM(seq, i);
        Py_INCREF(item);
        rc = count_get(item, &out[i]);
        Py_DECREF(item);
        if (rc) {
            Py_DECREF(seq);
            return -1;
        }
    }
    Py_DECREF(seq);
    return 0;
}

static PyObject *Sketch_update_many(SketchObject *self, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {"keys", "counts", NULL};
    PyObject *okeys, *ocounts = Py_None, *seq = NULL, *hold = NULL, *result = NULL;
    Py_ssize_t n, i, nviews = 0;
    size_t nplan = 0;
    sk_agg_entry *plan = NULL;
    uint32_t *counts = NULL;
    keyref *views = NULL;
    sk_agg *agg = NULL; /* per-call scratch (128 KiB), not sketch state */
    hash_memo *memo = NULL; /* per-call, allocated at the first long key (96 KiB) */
    uint32_t memo_probes = 0, memo_hits = 0, round = 1; /* round: drains so far + 1 */
    int memo_on = 1;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O|O:update_many", kwlist, &okeys, &ocounts))
        return NULL;
    if (PyBytes_Check(okeys) || PyUnicode_Check(okeys) || PyByteArray_Check(okeys) ||
        PyMemoryView_Check(okeys)) {
        PyErr_Format(PyExc_TypeError, "keys must be a sequence of keys, not a single %.100s",
                     Py_TYPE(okeys)->tp_name);
        return NULL;
    }
    seq = PySequence_Fast(okeys, "keys must be a sequence (list or tuple) of bytes or str");
    if (!seq)
        return NULL;
    n = PySequence_Fast_GET_SIZE(seq);
    /* At most one plan entry per key: every round holds distinct keys of its stretch. */
    plan = (sk_agg_entry *)PyMem_Malloc((size_t)(n ? n : 1) * sizeof(sk_agg_entry));
    if (!plan) {
        PyErr_NoMemory();
        goto done;
    }
    if (ocounts != Py_None) {
        counts = (uint32_t *)PyMem_Malloc((size_t)(n ? n : 1) * sizeof(uint32_t));
        if (!counts) {
            PyErr_NoMemory();
            goto done;
        }
        if (counts_get(ocounts, n, counts))
            goto done;
        /* Converting counts can run Python code (__index__) that edits the keys list. */
        if (PySequence_Fast_GET_SIZE(seq) != n) {
            PyErr_SetString(PyExc_RuntimeError, "keys changed size during update_many");
            goto done;
        }
    }
    agg = (sk_agg *)PyMem_Malloc(sizeof(sk_agg));
    if (!agg) {
        PyErr_NoMemory();
        goto done;
    }
    sk_agg_init(agg);
    {
        /* One pass reads, checks, hashes and pre-aggregates every key while its bytes are
           in cache; the sketch is touched only after all keys passed (all-or-nothing).
           Items are read after the counts: no Python code runs from here on for bytes
           and str keys, so the caller's list cannot change under the pointers taken. */
        PyObject **items = PySequence_Fast_ITEMS(seq);
        const size_t maxlen = self->sk->max_key_len;
        for (i = 0; i < n; i++) {
            PyObject *o = items[i];
            const char *p;
            Py_ssize_t len;
            uint32_t c = counts ? counts[i] : 1;
            uint64_t h;
            hash_memo *m;
            int hit;
            /* Two stages: the object header PREFETCH_AHEAD ahead, then (header now cached)
               every cache line of a bytes key's data PREFETCH_DATA_AHEAD ahead (below). */
            if (!hold && i + PREFETCH_AHEAD < n)
                PREFETCH(items[i + PREFETCH_AHEAD]);
            if (!hold && !PyBytes_Check(o) && !PyUnicode_Check(o) && !PyTuple_CheckExact(seq)) {
                /* Other buffers may run Python code when opened (__buffer__ on 3.12+):
                   from the first such key on, work on a private tuple of the keys. */
                hold = PySequence_Tuple(seq);
                if (!hold)
                    goto done;
                items = PySequence_Fast_ITEMS(hold);
                o = items[i];
            }
            int immutable = 1;
            if (PyBytes_Check(o)) {
                p = PyBytes_AS_STRING(o);
                len = PyBytes_GET_SIZE(o);
            } else if (PyUnicode_Check(o)) {
                p = PyUnicode_AsUTF8AndSize(o, &len);
                if (!p)
                    goto done;
            } else {
                immutable = 0;
                if (!views) {
                    views = (keyref *)PyMem_Calloc((size_t)n, sizeof(keyref));
                    if (!views) {
                        PyErr_NoMemory();
                        goto done;
                    }
                }
                if (key_get(o, &views[nviews]))
                    goto done;
                p = views[nviews].p;
                len = views[nviews].n;
                nviews++;
            }
            /* The data stage only while keys are long (this key is: keys of one batch tend
               to be alike): for short keys reading the header early costs more than the
               miss it saves (Zipf 1.0, 12 B: +16 % without it); from 48 B on the run check
               reads the key's tail before the hash reads the rest, two misses in a row
               without it (100 B at 16 KiB: +15 % with it). */
            if (!hold && (size_t)len >= PREFETCH_DATA_MIN && i + PREFETCH_DATA_AHEAD < n)
                prefetch_data(items[i + PREFETCH_DATA_AHEAD]);
            if ((size_t)len > maxlen) {
                PyErr_Format(SketchError,
                             "key at index %zd is %zd bytes, longer than max_key_len=%u "
                             "(allowed: 0..%u)",
                             i, len, self->sk->max_key_len, self->sk->max_key_len);
                goto done;
            }
            if (c == 0 || sk_agg_repeat(agg, p, (uint32_t)len, c))
                continue;
            m = NULL;
            hit = 0;
            if (immutable && memo_on && (size_t)len >= MEMO_MIN_LEN) {
                if (!memo) {
                    memo = (hash_memo *)PyMem_Calloc((size_t)1 << MEMO_BITS, sizeof(hash_memo));
                    if (!memo) {
                        PyErr_NoMemory();
                        goto done;
                    }
                }
                m = memo_slot(memo, p);
                if (m->p == p && m->len == (uint32_t)len) {
                    memo_hits++;
                    hit = 1;
                }
                if (++memo_probes == MEMO_TRIAL) {
                    memo_on = memo_hits * MEMO_MISS_DEN >= MEMO_TRIAL;
                    memo_probes = memo_hits = 0;
                }
                if (hit) {
                    /* Same round, aggregating (not direct, no drain due): the entry. */
                    if ((m->tag >> MEMO_ENT_BITS) == round && !agg->direct && !agg->drain_first) {
                        const uint32_t ent = m->tag & ((1u << MEMO_ENT_BITS) - 1u);
                        sk_agg_entry *e = &agg->e[ent - 1];
                        e->count = sk_sat_add(e->count, c);
                        agg->events++;
                        agg->last = ent;
                        continue;
                    }
                    h = m->hash;
                } else {
                    m->p = p;
                    m->len = (uint32_t)len;
                }
            }
            if (!hit) { /* one call site: the hash stays inline */
                h = hk_key_hash64(p, (size_t)len, &self->sk->hkey);
                if (m)
                    m->hash = h;
            }
            if (sk_agg_push(agg, p, (uint32_t)len, h, c)) {
                nplan += sk_agg_drain(agg, plan + nplan);
                round = memo_next_round(memo, round);
                sk_agg_push(agg, p, (uint32_t)len, h, c);
            }
            /* agg->last is this key's entry after an aggregating push; after a direct one
               the tag is never used (that round ends in a drain first). */
            if (m)
                m->tag = round << MEMO_ENT_BITS | agg->last;
        }
        /* The last round is applied from the aggregation table itself (below): no copy
           to the plan, and no emptying of a table that is freed next. */
    }
    if (!sketch_idle(self)) {
        /* Waiting releases the GIL: keep the key objects alive against list mutation. */
        if (!hold) {
            hold = PySequence_Tuple(seq);
            if (!hold)
                goto done;
        }
        wait_idle(self);
    }
    sk_apply(self->sk, plan, nplan);
    sk_apply(self->sk, agg->e, agg->n);
    result = Py_None;
    Py_INCREF(result);
done:
    for (i = 0; i < nviews; i++)
        key_release(&views[i]);
    PyMem_Free(views);
    PyMem_Free(agg);
    PyMem_Free(memo);
    PyMem_Free(plan);
    PyMem_Free(counts);
    Py_XDECREF(hold);
    Py_XDECREF(seq);
    return result;
}

static PyObject *Sketch_update_lines(SketchObject *self, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {"buf", "counted", NULL};
    PyObject *obuf;
    int counted = 0;
    Py_buffer v;
    sk_agg *agg;
    PyThreadState *ts;
    sk_lines_result r = {0, 0, 0};
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O|p:update_lines", kwlist, &obuf, &counted))
        return NULL;
    if (PyUnicode_Check(obuf) || !PyObject_CheckBuffer(obuf)) {
        PyErr_Format(PyExc_TypeError, "buf must be a bytes-like object, not %.100s",
                     Py_TYPE(obuf)->tp_name);
        return NULL;
    }
    if (PyObject_GetBuffer(obuf, &v, PyBUF_SIMPLE) != 0) {
        PyErr_Clear();
        PyErr_Format(PyExc_TypeError, "buf must be a contiguous bytes-like object, not %.100s",
                     Py_TYPE(obuf)->tp_name);
        return NULL;
    }
    agg = (sk_agg *)PyMem_Malloc(sizeof(sk_agg)); /* per-call scratch, not sketch state */
    if (!agg) {
        PyBuffer_Release(&v);
        return PyErr_NoMemory();
    }
    ts = worker_begin(self);
    sk_feed_lines(self->sk, agg, (const unsigned char *)v.buf, (size_t)v.len, counted, &r);
    worker_end(self, ts);
    PyBuffer_Release(&v);
    PyMem_Free(agg);
    return Py_BuildValue("(KKK)", (unsigned long long)r.events, (unsigned long long)r.oversized,
                         (unsigned long long)r.malformed);
}

static PyObject *Sketch_topk(SketchObject *self, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {"n", NULL};
    PyObject *on = Py_None, *list = NULL;
    int64_t want;
    uint32_t *order = NULL, *counts = NULL, *lens = NULL, m, i;
    unsigned char *keys = NULL;
    size_t total = 0, off = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "|O:topk", kwlist, &on))
        return NULL;
    if (int_arg(on, "n", 1, &want))
        return NULL;
    if (want != SK_UNSET && want < 0) {
        PyErr_Format(SketchError, "n must be >= 0 or None, got %R", on);
        return NULL;
    }
    lock_take(self);
    m = self->sk->size;
    if (want != SK_UNSET && (uint64_t)want < m)
        m = (uint32_t)want;
    order = (uint32_t *)malloc(((size_t)self->sk->size + 1) * sizeof(uint32_t));
    counts = (uint32_t *)malloc(((size_t)m + 1) * sizeof(uint32_t));
    lens = (uint32_t *)malloc(((size_t)m + 1) * sizeof(uint32_t));
    if (order && counts && lens) {
        sk_topk_order(self->sk, order);
        for (i = 0; i < m; i++)
            total += self->sk->heap[order[i]].len;
        keys = (unsigned char *)malloc(total ? total : 1);
        if (keys) {
            for (i = 0; i < m; i++) {
                const sk_entry *e = &self->sk->heap[order[i]];
                memcpy(keys + off, self->sk->arena + e->off, e->len);
                counts[i] = e->count;
                lens[i] = e->len;
                off += e->len;
            }
        }
    }
    if (!order || !counts || !lens || !keys) {
        PyErr_NoMemory();
        goto done;
    }
    list = PyList_New(m);
    if (!list)
        goto done;
    off = 0;
    for (i = 0; i < m; i++) {
        PyObject *t = Py_BuildValue("(y#k)", (const char *)keys + off, (Py_ssize_t)lens[i],
                                    (unsigned long)counts[i]);
        if (!t) {
            Py_CLEAR(list);
            goto done;
        }
        PyList_SET_ITEM(list, i, t);
        off += lens[i];
    }
done:
    free(order);
    free(counts);
    free(lens);
    free(keys);
    return list;
}

static PyObject *Sketch_estimate(SketchObject *self, PyObject *okey) {
    keyref k;
    uint32_t est;
    if (key_get(okey, &k))
        return NULL;
    if (key_check_len(self, &k)) {
        key_release(&k);
        return NULL;
    }
    lock_take(self);
    est = sk_estimate(self->sk, k.p, (size_t)k.n);
    key_release(&k);
    return PyLong_FromUnsignedLong(est);
}

static PyObject *Sketch_decay(SketchObject *self, PyObject *of) {
    double f;
    uint64_t fp;
    if (PyBool_Check(of) || !(PyFloat_Check(of) || PyLong_Check(of))) {
        PyErr_Format(PyExc_TypeError, "factor must be a float, not %.100s", Py_TYPE(of)->tp_name);
        return NULL;
    }
    f = PyFloat_Check(of) ? PyFloat_AS_DOUBLE(of) : PyLong_AsDouble(of);
    if (f == -1.0 && PyErr_Occurred()) {
        PyErr_Clear();
        f = 2.0; /* huge int: out of range */
    }
    if (!(f > 0.0 && f <= 1.0)) {
        PyErr_Format(SketchError, "decay factor must be in (0, 1], got %R", of);
        return NULL;
    }
    fp = (uint64_t)(f * 4294967296.0);
    lock_take(self);
    sk_decay(self->sk, fp);
    Py_RETURN_NONE;
}

static PyObject *Sketch_clear(SketchObject *self, PyObject *unused) {
    lock_take(self);
    sk_clear(self->sk);
    Py_RETURN_NONE;
}

static PyObject *Sketch_merge(SketchObject *self, PyObject *oother) {
    SketchObject *other = (SketchObject *)oother;
    char err[512];
    int rc;
    if (!PyObject_TypeCheck(oother, &CountMinType)) {
        PyErr_Format(PyExc_TypeError, "merge() needs a native CountMinTopK, not %.100s",
                     Py_TYPE(oother)->tp_name);
        return NULL;
    }
    if (other == self) {
        sk_sketch *copy;
        size_t n;
        unsigned char *buf;
        int oom = 0;
        lock_take(self);
        n = sk_serialized_size(self->sk);
        buf = (unsigned char *)malloc(n);
        copy = NULL;
        if (buf) {
            sk_serialize(self->sk, buf);
            copy = sk_deserialize(buf, n, SK_KIND_COUNTMIN, err, sizeof err, &oom);
        }
        rc = copy ? sk_merge(self->sk, copy, err, sizeof err) : -2;
        free(buf);
        sk_free(copy);
    } else {
        lock_take2(self, other);
        rc = sk_merge(self->sk, other->sk, err, sizeof err);
    }
    if (rc == -1) {
        PyErr_SetString(SketchError, err);
        return NULL;
    }
    if (rc != 0)
        return PyErr_NoMemory();
    Py_RETURN_NONE;
}

static PyObject *Sketch_to_bytes(SketchObject *self, PyObject *unused) {
    PyObject *out;
    lock_take(self);
    out = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)sk_serialized_size(self->sk));
    if (out)
        sk_serialize(self->sk, (unsigned char *)PyBytes_AS_STRING(out));
    return out;
}

static PyObject *Sketch_from_bytes(PyTypeObject *cls, PyObject *ob) {
    Py_buffer v;
    char err[512];
    int oom = 0;
    sk_sketch *sk;
    SketchObject *self;
    if (PyUnicode_Check(ob) || !PyObject_CheckBuffer(ob)) {
        PyErr_Format(PyExc_TypeError, "from_bytes() needs a bytes-like object, not %.100s",
                     Py_TYPE(ob)->tp_name);
        return NULL;
    }
    if (PyObject_GetBuffer(ob, &v, PyBUF_SIMPLE) != 0)
        return NULL;
    sk = sk_deserialize((const unsigned char *)v.buf, (size_t)v.len, kind_of(cls), err, sizeof err,
                        &oom);
    PyBuffer_Release(&v);
    if (!sk) {
        if (oom)
            return PyErr_NoMemory();
        PyErr_SetString(SerializationError, err);
        return NULL;
    }
    self = (SketchObject *)cls->tp_alloc(cls, 0);
    if (!self) {
        sk_free(sk);
        return NULL;
    }
    self->sk = sk;
    self->lock = lock_new();
    if (!self->lock) {
        Py_DECREF(self);
        return PyErr_NoMemory();
    }
    return (PyObject *)self;
}

static PyObject *Sketch_reduce(SketchObject *self, PyObject *unused) {
    PyObject *b = Sketch_to_bytes(self, NULL), *fn, *r;
    if (!b)
        return NULL;
    fn = PyObject_GetAttrString((PyObject *)Py_TYPE(self), "from_bytes");
    if (!fn) {
        Py_DECREF(b);
        return NULL;
    }
    r = Py_BuildValue("(O(O))", fn, b);
    Py_DECREF(fn);
    Py_DECREF(b);
    return r;
}

static Py_ssize_t Sketch_len(SketchObject *self) {
    Py_ssize_t n;
    lock_take(self);
    n = (Py_ssize_t)self->sk->size;
    return n;
}

static PyObject *Sketch_repr(SketchObject *self) {
    const char *name = strrchr(Py_TYPE(self)->tp_name, '.');
    name = name ? name + 1 : Py_TYPE(self)->tp_name;
    return PyUnicode_FromFormat(
        "%s(k=%u, width=%u, depth=%u, seed=%llu, max_key_len=%u, nbytes=%llu)", name, self->sk->k,
        self->sk->width, self->sk->depth, (unsigned long long)self->sk->seed, self->sk->max_key_len,
        (unsigned long long)sk_nbytes(self->sk));
}

#define GETTER(name, expr)                                                                         \
    static PyObject *Sketch_get_##name(SketchObject *self, void *c) {                              \
        return PyLong_FromUnsignedLongLong((unsigned long long)(expr));                            \
    }
GETTER(k, self->sk->k)
GETTER(width, self->sk->width)
GETTER(depth, self->sk->depth)
GETTER(seed, self->sk->seed)
static PyObject *Sketch_get_adapt_keys(SketchObject *self, void *c) {
    (void)c;
    return PyBool_FromLong(self->sk->adaptive);
}
GETTER(max_key_len, self->sk->max_key_len)
GETTER(key_bytes, self->sk->key_bytes)
GETTER(nbytes, sk_nbytes(self->sk))
/* The only mutable field read by a getter: wait for a GIL-free update_lines to finish. */
static PyObject *Sketch_get_space_evictions(SketchObject *self, void *c) {
    (void)c;
    lock_take(self);
    return PyLong_FromUnsignedLong(self->sk->space_evictions);
}

static PyGetSetDef Sketch_getset[] = {
    {"k", (getter)Sketch_get_k, NULL, "Capacity of the top-k heap.", NULL},
    {"width", (getter)Sketch_get_width, NULL, "Buckets per row.", NULL},
    {"depth", (getter)Sketch_get_depth, NULL, "Number of rows.", NULL},
    {"seed", (getter)Sketch_get_seed, NULL, "Hash and decay RNG seed.", NULL},
    {"adapt_keys", (getter)Sketch_get_adapt_keys, NULL,
     "Whether the key store may take bytes from the table for long keys.", NULL},
    {"max_key_len", (getter)Sketch_get_max_key_len, NULL, "Longest accepted key in bytes.", NULL},
    {"key_bytes", (getter)Sketch_get_key_bytes, NULL, "Byte budget for keys held by the heap.",
     NULL},
    {"nbytes", (getter)Sketch_get_nbytes, NULL, "Bytes used (never above the memory budget).",
     NULL},
    {"space_evictions", (getter)Sketch_get_space_evictions, NULL,
     "Entries dropped to make room for a longer key (key_bytes too small for k keys).", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

#define COMMON_METHODS                                                                             \
    {"update", (PyCFunction)(void (*)(void))Sketch_update, METH_FASTCALL | METH_KEYWORDS,          \
     "update(key, count=1)"},                                                                      \
        {"update_many", (PyCFunction)(void (*)(void))Sketch_update_many,                           \
         METH_VARARGS | METH_KEYWORDS, "update_many(keys, counts=None)"},                          \
        {"update_lines", (PyCFunction)(void (*)(void))Sketch_update_lines,                         \
         METH_VARARGS | METH_KEYWORDS,                                                             \
         "update_lines(buf, counted=False) -> (events, oversized, malformed)"},                    \
        {"topk", (PyCFunction)(void (*)(void))Sketch_topk, METH_VARARGS | METH_KEYWORDS,           \
         "topk(n=None) -> list of (key, count)"},                                                  \
        {"estimate", (PyCFunction)Sketch_estimate, METH_O, "estimate(key) -> int"},                \
        {"decay", (PyCFunction)Sketch_decay, METH_O, "decay(factor)"},                             \
        {"clear", (PyCFunction)Sketch_clear, METH_NOARGS, "clear()"},                              \
        {"to_bytes", (PyCFunction)Sketch_to_bytes, METH_NOARGS, "to_bytes() -> bytes"},            \
        {"from_bytes", (PyCFunction)Sketch_from_bytes, METH_O | METH_CLASS,                        \
         "from_bytes(b) -> sketch"},                                                               \
        {"__reduce__", (PyCFunction)Sketch_reduce, METH_NOARGS, NULL},

static PyMethodDef HeavyKeeper_methods[] = {COMMON_METHODS{NULL, NULL, 0, NULL}};
static PyMethodDef CountMin_methods[] = {
    COMMON_METHODS{"merge", (PyCFunction)Sketch_merge, METH_O, "merge(other)"},
    {NULL, NULL, 0, NULL}};

static PySequenceMethods Sketch_as_sequence = {
    .sq_length = (lenfunc)Sketch_len,
};

static PyTypeObject HeavyKeeperType = {
    PyVarObject_HEAD_INIT(NULL, 0) /* (the macro brings its own comma) */
        .tp_name = "hotkeyd.sketch._sketch.HeavyKeeper",
    .tp_basicsize = sizeof(SketchObject),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
    .tp_doc =
        "HeavyKeeper(k=100, memory=None, *, width=None, depth=None, seed=0, max_key_len=1024, "
        "key_bytes=None, adapt_keys=False)\n\n"
        "HeavyKeeper top-k sketch (Gong et al., USENIX ATC 2018), C core.\n\n"
        "memory is the total byte budget (buckets, heap, index and key arena); nbytes never\n"
        "exceeds it. Results are identical to hotkeyd.sketch._sketch_py.HeavyKeeper for the same "
        "seed.\n\n"
        "Thread safety: sharing one sketch between threads is safe. update_lines releases the\n"
        "GIL while it works and marks the sketch busy; other methods wait for it.\n"
        "See docs/sketch.md.",
    .tp_new = Sketch_new,
    .tp_dealloc = (destructor)Sketch_dealloc,
    .tp_methods = HeavyKeeper_methods,
    .tp_getset = Sketch_getset,
    .tp_as_sequence = &Sketch_as_sequence,
    .tp_repr = (reprfunc)Sketch_repr,
};

static PyTypeObject CountMinType = {
    PyVarObject_HEAD_INIT(NULL, 0) /* (the macro brings its own comma) */
        .tp_name = "hotkeyd.sketch._sketch.CountMinTopK",
    .tp_basicsize = sizeof(SketchObject),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
    .tp_doc =
        "CountMinTopK(k=100, memory=None, *, width=None, depth=None, seed=0, max_key_len=1024, "
        "key_bytes=None, adapt_keys=False)\n\n"
        "Count-Min sketch with conservative update and a top-k heap, C core. Mergeable with a\n"
        "sketch of the same width, depth, seed and max_key_len.\n\n"
        "memory is the total byte budget (counters, heap, index and key arena); nbytes never\n"
        "exceeds it. Results are identical to hotkeyd.sketch._sketch_py.CountMinTopK for the same "
        "seed.\n\n"
        "Thread safety: sharing one sketch between threads is safe. update_lines releases the\n"
        "GIL while it works and marks the sketch busy; other methods wait for it.\n"
        "See docs/sketch.md.",
    .tp_new = Sketch_new,
    .tp_dealloc = (destructor)Sketch_dealloc,
    .tp_methods = CountMin_methods,
    .tp_getset = Sketch_getset,
    .tp_as_sequence = &Sketch_as_sequence,
    .tp_repr = (reprfunc)Sketch_repr,
};

static PyObject *native_murmur3_32(PyObject *mod, PyObject *args) {
    PyObject *okey;
    unsigned long long seed = 0;
    keyref k;
    uint32_t h;
    (void)mod;
    if (!PyArg_ParseTuple(args, "O|K:murmur3_32", &okey, &seed))
        return NULL;
    if (seed > 0xFFFFFFFFULL) {
        PyErr_SetString(SketchError, "seed must be in [0, 4294967295]");
        return NULL;
    }
    if (key_get(okey, &k))
        return NULL;
    h = hk_murmur3_32(k.p, (size_t)k.n, (uint32_t)seed);
    key_release(&k);
    return PyLong_FromUnsignedLong(h);
}

static PyObject *native_sketch_hash(PyObject *mod, PyObject *args) {
    PyObject *okey, *oseed = NULL;
    uint64_t seed;
    keyref k;
    uint32_t h;
    (void)mod;
    if (!PyArg_ParseTuple(args, "O|O:sketch_hash", &okey, &oseed) || seed_arg(oseed, &seed))
        return NULL;
    if (key_get(okey, &k))
        return NULL;
    h = hk_key_hash(k.p, (size_t)k.n, seed);
    key_release(&k);
    return PyLong_FromUnsignedLong(h);
}

/* window_sums(sketches, caches, factors, keys) -> list[float]: for each key, the sum over
 * the sub-window sketches of its count there times that sub-window's factor. A key's count
 * in sketch i is caches[i][key] when cached, else its estimate (stored into caches[i]).
 * One call per evaluation replaces a Python loop of one estimate() call per key and
 * sub-window; the pure-Python twin is _sketch_py.window_sums. The sums add in sketch
 * order (as Python's sum() over the columns), so both give the same floats. */
static PyObject *native_window_sums(PyObject *mod, PyObject *args) {
    PyObject *osk, *ocache, *ofac, *okeys, *sks = NULL, *caches = NULL, *keys = NULL;
    PyObject *out = NULL;
    double *fac = NULL, *acc = NULL;
    Py_ssize_t ns, nk, i, j;
    (void)mod;
    if (!PyArg_ParseTuple(args, "OOOO:window_sums", &osk, &ocache, &ofac, &okeys))
        return NULL;
    sks = PySequence_Fast(osk, "sketches must be a sequence");
    caches = sks ? PySequence_Fast(ocache, "caches must be a sequence") : NULL;
    keys = caches ? PySequence_Fast(okeys, "keys must be a sequence") : NULL;
    if (!keys)
        goto done;
    ns = PySequence_Fast_GET_SIZE(sks);
    nk = PySequence_Fast_GET_SIZE(keys);
    if (PySequence_Fast_GET_SIZE(caches) != ns || PyObject_Length(ofac) != ns) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_ValueError, "sketches, caches and factors differ in length");
        goto done;
    }
    fac = PyMem_Calloc((size_t)ns + 1, sizeof(double));
    acc = PyMem_Calloc((size_t)nk + 1, sizeof(double));
    if (!fac || !acc) {
        PyErr_NoMemory();
        goto done;
    }
    for (i = 0; i < ns; i++) {
        PyObject *sk = PySequence_Fast_GET_ITEM(sks, i);
        PyObject *f = PySequence_GetItem(ofac, i);
        if (!f)
            goto done;
        fac[i] = PyFloat_AsDouble(f);
        Py_DECREF(f);
        if (fac[i] == -1.0 && PyErr_Occurred())
            goto done;
        if (!PyObject_TypeCheck(sk, &HeavyKeeperType) && !PyObject_TypeCheck(sk, &CountMinType)) {
            PyErr_Format(PyExc_TypeError,
                         "sketches must be HeavyKeeper or CountMinTopK, not %.100s",
                         Py_TYPE(sk)->tp_name);
            goto done;
        }
        if (!PyDict_Check(PySequence_Fast_GET_ITEM(caches, i))) {
            PyErr_SetString(PyExc_TypeError, "caches must be dicts");
            goto done;
        }
    }
    for (i = 0; i < ns; i++) {
        SketchObject *so = (SketchObject *)PySequence_Fast_GET_ITEM(sks, i);
        PyObject *cache = PySequence_Fast_GET_ITEM(caches, i);
        double f = fac[i];
        for (j = 0; j < nk; j++) {
            PyObject *key = PySequence_Fast_GET_ITEM(keys, j);
            PyObject *v = PyDict_GetItemWithError(cache, key);
            unsigned long c;
            if (v) {
                c = PyLong_AsUnsignedLong(v);
                if (c == (unsigned long)-1 && PyErr_Occurred())
                    goto done;
            } else {
                keyref k;
                PyObject *cv;
                if (PyErr_Occurred() || key_get(key, &k))
                    goto done;
                if (key_check_len(so, &k)) {
                    key_release(&k);
                    goto done;
                }
                lock_take(so); /* an allocation above may have run Python (a finalizer) */
                c = sk_estimate(so->sk, k.p, (size_t)k.n);
                key_release(&k);
                cv = PyLong_FromUnsignedLong(c);
                if (!cv || PyDict_SetItem(cache, key, cv) < 0) {
                    Py_XDECREF(cv);
                    goto done;
                }
                Py_DECREF(cv);
            }
            acc[j] += f == 1.0 ? (double)c : (double)c * f;
        }
    }
    out = PyList_New(nk);
    if (!out)
        goto done;
    for (j = 0; j < nk; j++) {
        PyObject *v = PyFloat_FromDouble(acc[j]);
        if (!v) {
            Py_CLEAR(out);
            goto done;
        }
        PyList_SET_ITEM(out, j, v);
    }
done:
    PyMem_Free(fac);
    PyMem_Free(acc);
    Py_XDECREF(keys);
    Py_XDECREF(caches);
    Py_XDECREF(sks);
    return out;
}

/* Test hook: the scalar (False) or the CPU's fastest (True) path of the key hash, which
 * agree bit for bit; returns whether SIMD was on. Not for use while other threads hash. */
static PyObject *native_hash_simd(PyObject *mod, PyObject *arg) {
    int on = PyObject_IsTrue(arg);
    if (on < 0)
        return NULL;
    return PyBool_FromLong(hk_simd_set(on));
}

static PyMethodDef module_methods[] = {
    {"murmur3_32", native_murmur3_32, METH_VARARGS,
     "murmur3_32(key, seed=0) -> int: MurmurHash3 x86_32, unsigned (as mmh3.hash(signed=False))."},
    {"sketch_hash", native_sketch_hash, METH_VARARGS,
     "sketch_hash(key, seed=0) -> int: the 32-bit hash the sketches place a key with."},
    {"_hash_simd", native_hash_simd, METH_O,
     "_hash_simd(on) -> bool: test hook, the key hash's SIMD path on (if the CPU has it) or "
     "off; returns the previous state."},
    {"window_sums", native_window_sums, METH_VARARGS,
     "window_sums(sketches, caches, factors, keys) -> list[float]: each key's count summed over "
     "the sketches (cached in caches[i], else estimated and cached), times factors[i]."},
    {NULL, NULL, 0, NULL},
};

/* Multi-phase initialization (PEP 489): the import system creates the module object and
 * sketch_exec fills it in. The types are static and the error classes are looked up once,
 * so there is no per-module state (m_size 0); a second module object shares them. */
static int sketch_exec(PyObject *m) {
    sk_tables_init();
    if (!SketchError || !SerializationError) {
        PyObject *errors = PyImport_ImportModule("hotkeyd.errors");
        if (!errors)
            return -1;
        Py_XSETREF(SketchError, PyObject_GetAttrString(errors, "SketchError"));
        Py_XSETREF(SerializationError, PyObject_GetAttrString(errors, "SerializationError"));
        Py_DECREF(errors);
        if (!SketchError || !SerializationError)
            return -1;
    }
    if (PyType_Ready(&HeavyKeeperType) < 0 || PyType_Ready(&CountMinType) < 0)
        return -1;
    if (PyModule_AddObjectRef(m, "HeavyKeeper", (PyObject *)&HeavyKeeperType) < 0)
        return -1;
    if (PyModule_AddObjectRef(m, "CountMinTopK", (PyObject *)&CountMinType) < 0)
        return -1;
    return 0;
}

static PyModuleDef_Slot sketch_slots[] = {
    {Py_mod_exec, sketch_exec},
    {0, NULL},
};

static struct PyModuleDef native_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "hotkeyd.sketch._sketch",
    .m_doc = "C core of the hotkeyd top-k sketches.",
    .m_size = 0,
    .m_methods = module_methods,
    .m_slots = sketch_slots,
};

PyMODINIT_FUNC PyInit__sketch(void) { return PyModuleDef_Init(&native_module); }
