/* Fast path of ``hotkeyd replay``: split timestamped trace lines into per-tick buffers.
 *
 * Input lines are ``<ts> <key>`` or ``<ts> <key> <count>`` (space or TAB separated;
 * ``\r\n`` accepted; empty lines skipped). ``ts`` is Unix seconds, or milliseconds
 * when larger than 1e11. Output: consecutive lines of the same tick
 * (``floor(ts / tick)``) become one buffer of ``key<TAB>count`` lines, ready for the
 * sketch's counted ``update_lines`` fast path. The pure-Python twin is
 * ``hotkeyd/replay/_trace_py.py``; both give identical results. The line parser is plain
 * C in trace_parse.c; this file is the CPython glue: buffers in, segments out. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <math.h>
#include <string.h>

#include "trace_parse.h"

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

#define TICK_INDEX_MAX 9.0e18 /* below 2^63, so the cast is defined */

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
        tr_line ln;
        if (!tr_parse_line(p, le, &ln)) {
            malformed++;
            p = next;
            continue;
        }
        /* A tick index outside int64 (a timestamp of 19+ digits) is a malformed line,
         * as in the twin: converting such a double to long long is undefined. */
        double q = floor(ln.ts / tick + 1e-9);
        if (!(q >= -TICK_INDEX_MAX && q <= TICK_INDEX_MAX)) {
            malformed++;
            p = next;
            continue;
        }
        long long index = (long long)q;
        if (have && index != cur) {
            if (flush_segment(segments, cur, &o) < 0)
                goto fail;
        }
        cur = index;
        have = 1;
        int bad = out_put(&o, ln.key, (Py_ssize_t)ln.klen) < 0 ||
                  (ln.cdigits ? (out_put(&o, "\t", 1) < 0 ||
                                 out_put(&o, ln.cdigits, (Py_ssize_t)ln.cdlen) < 0 ||
                                 out_put(&o, "\n", 1) < 0)
                              : out_put(&o, "\t1\n", 3) < 0);
        if (bad) {
            PyErr_NoMemory();
            goto fail;
        }
        events += ln.count;
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

/* Multi-phase initialization (PEP 489): the import system creates the module; it has
 * no state (m_size 0) and nothing to add beyond its methods, so the one slot is empty. */
static int trace_exec(PyObject *m) {
    (void)m;
    return 0;
}

static PyModuleDef_Slot trace_slots[] = {
    {Py_mod_exec, trace_exec},
    {0, NULL},
};

static struct PyModuleDef moddef = {
    PyModuleDef_HEAD_INIT,
    .m_name = "hotkeyd.replay._trace",
    .m_doc = "Fast path of hotkeyd replay (see _trace_py).",
    .m_size = 0,
    .m_methods = methods,
    .m_slots = trace_slots,
};

PyMODINIT_FUNC PyInit__trace(void) { return PyModuleDef_Init(&moddef); }
