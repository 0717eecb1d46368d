/* CPython binding of the demand report parser (demand_parse.c). Thin on purpose:
 * argument checking, GIL release around parsing, result objects. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "demand_parse.h"

static const char *const REASONS[] = {
    "ok", "oversized", "malformed", "version", "too_many_entries", "bad_entry", "malformed"};

static int limits_from(PyObject *o, dp_limits *lim) {
    long long v[8];
    double d[3];
    if (!PyTuple_Check(o) || PyTuple_GET_SIZE(o) != 11) {
        PyErr_SetString(PyExc_TypeError,
                        "limits must be a tuple (max_bytes, entries_max, seq_max, name_max, "
                        "interval_max, db_max, count_max, max_depth, max_rate, "
                        "interval_min_s, interval_max_s)");
        return -1;
    }
    for (int k = 0; k < 8; k++) {
        PyObject *x = PyTuple_GET_ITEM(o, k);
        if (!PyLong_Check(x)) {
            PyErr_Format(PyExc_TypeError, "limit %d must be int, not %.100s", k,
                         Py_TYPE(x)->tp_name);
            return -1;
        }
        v[k] = PyLong_AsLongLong(x);
        if (v[k] == -1 && PyErr_Occurred())
            return -1;
        if (v[k] < 0) {
            PyErr_Format(PyExc_ValueError, "limit %d must be >= 0, got %lld", k, v[k]);
            return -1;
        }
    }
    for (int k = 0; k < 3; k++) {
        d[k] = PyFloat_AsDouble(PyTuple_GET_ITEM(o, 8 + k));
        if (d[k] == -1.0 && PyErr_Occurred())
            return -1;
        if (!(d[k] >= 0.0)) {
            PyErr_Format(PyExc_ValueError, "limit %d must be a number >= 0", 8 + k);
            return -1;
        }
    }
    if (v[7] > 10000) {
        PyErr_SetString(PyExc_ValueError, "max_depth above 10000");
        return -1;
    }
    lim->max_bytes = (size_t)v[0];
    lim->entries_max = v[1];
    lim->seq_max = v[2];
    lim->name_max = v[3];
    lim->interval_max = v[4];
    lim->db_max = v[5];
    lim->count_max = v[6];
    lim->max_depth = (int)v[7];
    lim->max_rate = d[0];
    lim->interval_min_s = d[1];
    lim->interval_max_s = d[2];
    return 0;
}

static PyObject *groups_of(const dp_batch *b, const dp_report *r) {
    PyObject *out = PyList_New(0);
    if (!out)
        return NULL;
    size_t i = r->ent_first, end = r->ent_first + r->nent;
    while (i < end) {
        size_t j = i;
        while (j < end && b->ents[j].rank == b->ents[i].rank)
            j++;
        PyObject *keys = PyList_New((Py_ssize_t)(j - i));
        PyObject *counts = PyList_New((Py_ssize_t)(j - i));
        PyObject *g = NULL;
        if (!keys || !counts)
            goto fail;
        for (size_t k = i; k < j; k++) {
            const dp_entry *e = &b->ents[k];
            PyObject *key =
                PyBytes_FromStringAndSize(b->arena + e->key_off, (Py_ssize_t)e->key_len);
            PyObject *n = PyLong_FromUnsignedLongLong(e->n);
            if (!key || !n) {
                Py_XDECREF(key);
                Py_XDECREF(n);
                goto fail;
            }
            PyList_SET_ITEM(keys, (Py_ssize_t)(k - i), key);
            PyList_SET_ITEM(counts, (Py_ssize_t)(k - i), n);
        }
        g = Py_BuildValue("(LNN)", (long long)b->ents[i].db, keys, counts);
        if (!g) {
            keys = counts = NULL; /* stolen by "N" even on failure */
            goto fail;
        }
        if (PyList_Append(out, g) < 0) {
            Py_DECREF(g);
            Py_DECREF(out);
            return NULL;
        }
        Py_DECREF(g);
        i = j;
        continue;
    fail:
        Py_XDECREF(keys);
        Py_XDECREF(counts);
        Py_DECREF(out);
        return NULL;
    }
    return out;
}

PyDoc_STRVAR(parse_doc,
             "parse(payloads, limits) -> list\n\n"
             "Parse and validate raw demand reports (bytes, MACs already checked) by the\n"
             "rules of DemandReport.loads, merge repeated keys and cap their sums. One item\n"
             "per payload: (app, seq, ts, interval_ms, total, groups, capped) for a good\n"
             "report, groups being [(db, keys, counts)], or (reason, message) for a\n"
             "rejected one. The GIL is released while parsing.");

static PyObject *parse(PyObject *self, PyObject *args) {
    PyObject *payloads, *limits;
    if (!PyArg_ParseTuple(args, "OO:parse", &payloads, &limits))
        return NULL;
    dp_limits lim;
    if (limits_from(limits, &lim) < 0)
        return NULL;
    PyObject *items = PySequence_Tuple(payloads); /* holds the bytes while the GIL is off */
    if (!items)
        return NULL;
    Py_ssize_t n = PyTuple_GET_SIZE(items);
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *x = PyTuple_GET_ITEM(items, i);
        if (!PyBytes_Check(x)) {
            PyErr_Format(PyExc_TypeError, "payload %zd must be bytes, not %.100s", i,
                         Py_TYPE(x)->tp_name);
            Py_DECREF(items);
            return NULL;
        }
    }
    dp_report *reps = PyMem_RawCalloc(n ? (size_t)n : 1, sizeof *reps);
    if (!reps) {
        Py_DECREF(items);
        return PyErr_NoMemory();
    }
    dp_batch b;
    dp_batch_init(&b);
    int oom = 0;
    Py_BEGIN_ALLOW_THREADS for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *x = PyTuple_GET_ITEM(items, i);
        if (dp_parse(&b, &lim, PyBytes_AS_STRING(x), (size_t)PyBytes_GET_SIZE(x), &reps[i]) < 0) {
            oom = 1;
            break;
        }
    }
    Py_END_ALLOW_THREADS PyObject *out = NULL;
    if (oom) {
        PyErr_NoMemory();
        goto done;
    }
    out = PyList_New(n);
    if (!out)
        goto done;
    for (Py_ssize_t i = 0; i < n; i++) {
        const dp_report *r = &reps[i];
        PyObject *item;
        if (r->reason != DP_OK)
            item = Py_BuildValue("(ss)", REASONS[r->reason], r->msg);
        else {
            PyObject *groups = groups_of(&b, r);
            item = groups == NULL
                       ? NULL
                       : Py_BuildValue(
                             "(NLdLKNK)",
                             PyUnicode_DecodeUTF8(b.arena + r->app_off, (Py_ssize_t)r->app_len,
                                                  "surrogatepass"),
                             (long long)r->seq, r->ts, (long long)r->interval_ms,
                             (unsigned long long)r->total, groups, (unsigned long long)r->capped);
        }
        if (!item) {
            Py_CLEAR(out);
            goto done;
        }
        PyList_SET_ITEM(out, i, item);
    }
done:
    dp_batch_free(&b);
    PyMem_RawFree(reps);
    Py_DECREF(items);
    return out;
}

static PyMethodDef methods[] = {
    {"parse", parse, METH_VARARGS, parse_doc},
    {NULL, NULL, 0, NULL},
};

/* Multi-phase init (PEP 489), as the other bindings: the module keeps no state (m_size
 * 0) and adds nothing beyond its methods, so the one exec slot is empty. */
static int demand_exec(PyObject *m) {
    (void)m;
    return 0;
}

static PyModuleDef_Slot demand_slots[] = {
    {Py_mod_exec, demand_exec},
    {0, NULL},
};

static struct PyModuleDef moddef = {
    PyModuleDef_HEAD_INIT,
    .m_name = "hotkeyd.sources._demand",
    .m_doc = "Batched demand report parser (C core).",
    .m_size = 0,
    .m_methods = methods,
    .m_slots = demand_slots,
};

PyMODINIT_FUNC PyInit__demand(void) { return PyModuleDef_Init(&moddef); }
