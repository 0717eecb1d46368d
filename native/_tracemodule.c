/* Fast path of ``hotkeyd replay``: split timestamped trace lines into per-tick buffers.
 *
 * Input lines are ``<ts> <key>`` or ``<ts> <key> <count>`` (space or TAB separated;
 * ``\r\n`` accepted; empty lines skipped). ``ts`` is Unix seconds, or milliseconds
 * when larger than 1e11. Output: consecutive lines of the same tick
 * (``floor(ts / tick)``) become one buffer of ``key<TAB>count`` lines, ready for the
 * sketch's counted ``update_lines`` fast path. The pure-Python twin is
 * ``hotkeyd/replay/_trace_py.py``; both give identical results. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define MS_ABOVE 1e11

static int is_sep(char c) { return c == ' ' || c == '\t'; }

/* Parse one line [p, end). Returns 1 on success with ts, key span and count set. */
static int parse_line(const char *p, const char *end, double *ts, const char **key,
                      Py_ssize_t *klen, unsigned long long *count, const char **cdigits,
                      Py_ssize_t *cdlen) {
    const char *q = p;
    while (q < end && !is_sep(*q))
        q++;
    if (q == p || q >= end || q - p > 63)
        return 0;
    for (const char *v = p; v < q; v++) {
        if (!((*v >= '0' && *v <= '9') || *v == '.' || *v == 'e' || *v == 'E' || *v == '+' ||
              *v == '-'))
            return 0;
    }
    double t = 0.0;
    const char *c = p;
    while (c < q && *c >= '0' && *c <= '9' && c - p < 15)
        t = t * 10.0 + (*c++ - '0');
    if (c < q && *c == '.' && c > p && c - p <= 15) { /* the common form: digits.digits */
        c++;
        const char *frac = c;
        double f = 0.0, div = 1.0;
        while (c < q && *c >= '0' && *c <= '9' && c - frac < 15) {
            f = f * 10.0 + (*c++ - '0');
            div *= 10.0;
        }
        if (c == frac)
            c = p; /* "12." : let strtod decide */
        else
            t += f / div; /* the twin does the same two roundings */
    }
    if (c != q || c == p) { /* exponents, signs: the general parser */
        char num[64];
        memcpy(num, p, (size_t)(q - p));
        num[q - p] = 0;
        char *stop = NULL;
        t = strtod(num, &stop);
        if (stop == num || *stop != 0)
            return 0;
    }
    if (!isfinite(t) || t < 0)
        return 0;
    if (t > MS_ABOVE)
        t /= 1000.0;
    while (q < end && is_sep(*q))
        q++;
    const char *k = q;
    while (q < end && !is_sep(*q))
        q++;
    if (q == k)
        return 0;
    *key = k;
    *klen = q - k;
    while (q < end && is_sep(*q))
        q++;
    unsigned long long n = 1;
    *cdigits = NULL;
    *cdlen = 0;
    if (q < end) {
        n = 0;
        const char *d = q;
        while (q < end && *q >= '0' && *q <= '9') {
            n = n * 10 + (unsigned long long)(*q - '0');
            if (n > 0xFFFFFFFFULL)
                return 0;
            q++;
        }
        *cdigits = d;
        *cdlen = q - d;
        while (q < end && is_sep(*q))
            q++;
        if (q == d || q != end || n == 0)
            return 0;
    }
    *ts = t;
    *count = n;
    return 1;
}

typedef struct {
    char *buf;
    Py_ssize_t len, cap;
} outbuf;

static int out_put(outbuf *o, const char *s, Py_ssize_t n) {
    if (o->len + n > o->cap) {
        Py_ssize_t cap = o->cap ? o->cap : 4096;
        while (cap < o->len + n)
            cap *= 2;
        char *nb = (char *)PyMem_Realloc(o->buf, (size_t)cap);
        if (!nb)
            return -1;
        o->buf = nb;
        o->cap = cap;
    }
    memcpy(o->buf + o->len, s, (size_t)n);
    o->len += n;
    return 0;
}

static int flush_segment(PyObject *list, long long index, outbuf *o) {
    if (o->len == 0)
        return 0;
    PyObject *item = Py_BuildValue("(Ly#)", index, o->buf, o->len);
    if (!item)
        return -1;
    int rc = PyList_Append(list, item);
    Py_DECREF(item);
    o->len = 0;
    return rc;
}

PyDoc_STRVAR(split_ticks_doc,
             "split_ticks(buf, tick) -> (segments, events, malformed)\n\n"
             "Split complete ``ts key [count]`` lines into ``(tick_index, lines)`` segments of\n"
             "``key<TAB>count`` lines, one per run of lines in the same tick.");

static PyObject *split_ticks(PyObject *mod, PyObject *args) {
    Py_buffer view;
    double tick;
    if (!PyArg_ParseTuple(args, "y*d:split_ticks", &view, &tick))
        return NULL;
    if (!(tick > 0) || !isfinite(tick)) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_ValueError, "tick must be a positive number");
        return NULL;
    }
    PyObject *segments = PyList_New(0);
    if (!segments) {
        PyBuffer_Release(&view);
        return NULL;
    }
    const char *p = (const char *)view.buf;
    const char *end = p + view.len;
    outbuf o = {NULL, 0, 0};
    long long cur = 0;
    int have = 0;
    unsigned long long events = 0, malformed = 0;
    while (p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        const char *le = nl ? nl : end;
        const char *next = nl ? nl + 1 : end;
        if (le > p && le[-1] == '\r')
            le--;
        if (le == p) {
            p = next;
            continue;
        }
        double ts;
        const char *key;
        Py_ssize_t klen;
        unsigned long long count;
        const char *cd;
        Py_ssize_t cdlen;
        if (!parse_line(p, le, &ts, &key, &klen, &count, &cd, &cdlen)) {
            malformed++;
            p = next;
            continue;
        }
        long long index = (long long)floor(ts / tick + 1e-9);
        if (have && index != cur) {
            if (flush_segment(segments, cur, &o) < 0)
                goto fail;
        }
        cur = index;
        have = 1;
        int bad = out_put(&o, key, klen) < 0 ||
                  (cd ? (out_put(&o, "\t", 1) < 0 || out_put(&o, cd, cdlen) < 0 ||
                         out_put(&o, "\n", 1) < 0)
                      : out_put(&o, "\t1\n", 3) < 0);
        if (bad) {
            PyErr_NoMemory();
            goto fail;
        }
        events += count;
        p = next;
    }
    if (have && flush_segment(segments, cur, &o) < 0)
        goto fail;
    PyMem_Free(o.buf);
    PyBuffer_Release(&view);
    return Py_BuildValue("(NKK)", segments, events, malformed);
fail:
    PyMem_Free(o.buf);
    PyBuffer_Release(&view);
    Py_DECREF(segments);
    return NULL;
}

static PyMethodDef methods[] = {
    {"split_ticks", split_ticks, METH_VARARGS, split_ticks_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef moddef = {
    PyModuleDef_HEAD_INIT,
    "_trace",
    "Fast path of hotkeyd replay (see _trace_py).",
    -1,
    methods,
    NULL,
    NULL,
    NULL,
    NULL,
};

PyMODINIT_FUNC PyInit__trace(void) { return PyModule_Create(&moddef); }
