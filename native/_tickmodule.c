/* CPython glue of the detector's per-tick work (algorithm in tick.c; pure-Python twin in
 * hotkeyd/detector/_tick_py.py, same arguments and results). One call per evaluation:
 * the top-k dicts of every closed sub-window in, the candidates' rates and the contenders
 * out; the window sums themselves are the sketch core's window_sums, called once per lane
 * from here. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdint.h>
#include <string.h>

#include "tick.h"

typedef struct {
    PyObject **objs; /* candidate key objects (borrowed), in set order */
    uint8_t *hot;
    size_t cap;
} cands;

static int cands_room(cands *c, size_t n) {
    if (n <= c->cap)
        return 0;
    size_t cap = c->cap ? c->cap : 64;
    while (cap < n)
        cap *= 2;
    PyObject **o = (PyObject **)PyMem_Realloc(c->objs, cap * sizeof(*o));
    if (!o)
        return -1;
    c->objs = o;
    uint8_t *h = (uint8_t *)PyMem_Realloc(c->hot, cap);
    if (!h)
        return -1;
    c->hot = h;
    c->cap = cap;
    return 0;
}

/* Adds ``key`` (bytes) to the candidates; marks it hot when ``hot``. */
static int add_key(tk_set *s, cands *c, PyObject *key, int hot) {
    int added;
    ptrdiff_t i;
    if (!PyBytes_Check(key)) {
        PyErr_Format(PyExc_TypeError, "keys must be bytes, not %.100s", Py_TYPE(key)->tp_name);
        return -1;
    }
    Py_hash_t h = PyObject_Hash(key); /* cached in the bytes object: no rehash of long keys */
    if (h == -1)
        return -1;
    i = tk_set_add(s, PyBytes_AS_STRING(key), (size_t)PyBytes_GET_SIZE(key),
                   (uint32_t)((uint64_t)h ^ ((uint64_t)h >> 32)), &added);
    if (i < 0 || cands_room(c, (size_t)i + 1)) {
        PyErr_NoMemory();
        return -1;
    }
    if (added) {
        c->objs[i] = key;
        c->hot[i] = 0;
    }
    if (hot)
        c->hot[i] = 1;
    return 0;
}

/* The lane tuple's sequence at ``pos`` (a new reference to a fast sequence). */
static PyObject *lane_seq(PyObject *lane, Py_ssize_t pos, Py_ssize_t n, const char *what) {
    PyObject *seq = PySequence_Fast(PyTuple_GET_ITEM(lane, pos), what);
    if (seq && n >= 0 && PySequence_Fast_GET_SIZE(seq) != n) {
        PyErr_Format(PyExc_ValueError, "a lane's %s differ in length from its sketches", what);
        Py_CLEAR(seq);
    }
    return seq;
}

/* Selects one lane's candidates: fills its estimate caches from the top-k (as the
 * ring's top-k cache does) and adds the keys that may reach ``need`` (all with !prune). */
static int select_lane(PyObject *lane, tk_set *s, cands *c, int prune, double need) {
    PyObject *sks = NULL, *caches = NULL, *facs = NULL, *tops = NULL, *ks = NULL;
    tk_slot *slots = NULL;
    int64_t *counts = NULL;
    size_t *take = NULL, total = 0, off;
    Py_ssize_t ns, i, pos;
    PyObject *key, *val;
    int rc = -1;
    sks = lane_seq(lane, 1, -1, "sketches");
    if (!sks)
        goto done;
    ns = PySequence_Fast_GET_SIZE(sks);
    if (!(caches = lane_seq(lane, 2, ns, "caches")) || !(facs = lane_seq(lane, 3, ns, "factors")) ||
        !(tops = lane_seq(lane, 4, ns, "tops")) || !(ks = lane_seq(lane, 5, ns, "ks")))
        goto done;
    for (i = 0; i < ns; i++) {
        PyObject *top = PySequence_Fast_GET_ITEM(tops, i);
        if (!PyDict_Check(top) || !PyDict_Check(PySequence_Fast_GET_ITEM(caches, i))) {
            PyErr_SetString(PyExc_TypeError, "tops and caches must be dicts");
            goto done;
        }
        total += (size_t)PyDict_GET_SIZE(top);
    }
    slots = (tk_slot *)PyMem_Calloc((size_t)ns + 1, sizeof(*slots));
    counts = (int64_t *)PyMem_Calloc(total + 1, sizeof(*counts));
    take = (size_t *)PyMem_Calloc((size_t)ns + 1, sizeof(*take));
    if (!slots || !counts || !take) {
        PyErr_NoMemory();
        goto done;
    }
    off = 0;
    for (i = 0; i < ns; i++) {
        PyObject *top = PySequence_Fast_GET_ITEM(tops, i);
        PyObject *est = PySequence_Fast_GET_ITEM(caches, i);
        slots[i].counts = counts + off;
        slots[i].factor = PyFloat_AsDouble(PySequence_Fast_GET_ITEM(facs, i));
        slots[i].k = PyLong_AsLongLong(PySequence_Fast_GET_ITEM(ks, i));
        if (PyErr_Occurred())
            goto done;
        pos = 0;
        while (PyDict_Next(top, &pos, &key, &val)) {
            long long v = PyLong_AsLongLong(val);
            if (v == -1 && PyErr_Occurred())
                goto done;
            if (!PyDict_SetDefault(est, key, val))
                goto done;
            counts[off++] = v;
        }
        slots[i].n = (size_t)(counts + off - slots[i].counts);
        take[i] = slots[i].n;
    }
    if (prune)
        tk_reach(slots, (size_t)ns, need, take);
    for (i = 0; i < ns; i++) {
        size_t j = 0;
        pos = 0;
        while (j < take[i] && PyDict_Next(PySequence_Fast_GET_ITEM(tops, i), &pos, &key, &val)) {
            if (add_key(s, c, key, 0))
                goto done;
            j++;
        }
    }
    rc = 0;
done:
    Py_XDECREF(sks);
    Py_XDECREF(caches);
    Py_XDECREF(facs);
    Py_XDECREF(tops);
    Py_XDECREF(ks);
    PyMem_Free(slots);
    PyMem_Free(counts);
    PyMem_Free(take);
    return rc;
}

/* Adds one lane's window sums of the candidates ``keys`` into ``acc``. */
static int sum_lane(PyObject *lane, PyObject *keys, Py_ssize_t cap, double *acc, double *buf) {
    PyObject *sks = PySequence_Fast(PyTuple_GET_ITEM(lane, 1), "sketches");
    PyObject *caches = NULL, *got = NULL, *fast = NULL;
    Py_ssize_t i, n = PyList_GET_SIZE(keys);
    int rc = -1;
    if (!sks)
        return -1;
    if (PySequence_Fast_GET_SIZE(sks) == 0) {
        Py_DECREF(sks);
        return 0;
    }
    caches = PySequence_Fast(PyTuple_GET_ITEM(lane, 2), "caches");
    if (!caches)
        goto done;
    for (i = 0; i < PySequence_Fast_GET_SIZE(caches); i++) {
        PyObject *est = PySequence_Fast_GET_ITEM(caches, i);
        if (PyDict_Check(est) && PyDict_GET_SIZE(est) > cap)
            PyDict_Clear(est);
    }
    got = PyObject_CallFunctionObjArgs(PyTuple_GET_ITEM(lane, 0), PyTuple_GET_ITEM(lane, 1),
                                       PyTuple_GET_ITEM(lane, 2), PyTuple_GET_ITEM(lane, 3), keys,
                                       NULL);
    if (!got || !(fast = PySequence_Fast(got, "window_sums must return a sequence")))
        goto done;
    if (PySequence_Fast_GET_SIZE(fast) != n) {
        PyErr_SetString(PyExc_ValueError, "window_sums returned a wrong number of sums");
        goto done;
    }
    for (i = 0; i < n; i++) {
        buf[i] = PyFloat_AsDouble(PySequence_Fast_GET_ITEM(fast, i));
        if (buf[i] == -1.0 && PyErr_Occurred())
            goto done;
    }
    tk_add_lane(acc, buf, (size_t)n);
    rc = 0;
done:
    Py_XDECREF(sks);
    Py_XDECREF(caches);
    Py_XDECREF(got);
    Py_XDECREF(fast);
    return rc;
}

PyDoc_STRVAR(evaluate_doc,
             "evaluate(lanes, hot, need, prune, min_rate, inv, cap, keep_all) -> (rates, "
             "contenders)\n\n"
             "One evaluation's candidate selection and threshold checks. ``lanes``: per lane\n"
             "(window_sums, sketches, caches, factors, tops, ks) of its closed sub-windows;\n"
             "returns the kept candidates' rates and the keys not hot at or above min_rate.");

static PyObject *tick_evaluate(PyObject *mod, PyObject *args) {
    PyObject *olanes, *ohot, *lanes = NULL, *hot = NULL, *keys = NULL, *rates = NULL;
    PyObject *conts = NULL, *out = NULL;
    double need, min_rate, inv;
    int prune, keep_all;
    Py_ssize_t cap, nl, i, n;
    tk_set set;
    cands c = {NULL, NULL, 0};
    double *acc = NULL, *buf = NULL, *rate = NULL;
    uint8_t *keep = NULL;
    uint32_t *ci = NULL;
    size_t nc;
    (void)mod;
    if (!PyArg_ParseTuple(args, "OOdpddnp:evaluate", &olanes, &ohot, &need, &prune, &min_rate, &inv,
                          &cap, &keep_all))
        return NULL;
    if (tk_set_init(&set, 1024))
        return PyErr_NoMemory();
    lanes = PySequence_Fast(olanes, "lanes must be a sequence");
    hot = lanes ? PySequence_Fast(ohot, "hot must be a sequence") : NULL;
    if (!hot)
        goto done;
    nl = PySequence_Fast_GET_SIZE(lanes);
    for (i = 0; i < nl; i++) {
        PyObject *lane = PySequence_Fast_GET_ITEM(lanes, i);
        if (!PyTuple_Check(lane) || PyTuple_GET_SIZE(lane) != 6) {
            PyErr_SetString(PyExc_TypeError, "each lane must be a 6-tuple");
            goto done;
        }
        if (select_lane(lane, &set, &c, prune, need))
            goto done;
    }
    for (i = 0; i < PySequence_Fast_GET_SIZE(hot); i++)
        if (add_key(&set, &c, PySequence_Fast_GET_ITEM(hot, i), 1))
            goto done;
    n = (Py_ssize_t)set.n;
    keys = PyList_New(n);
    acc = (double *)PyMem_Calloc((size_t)n + 1, sizeof(double));
    buf = (double *)PyMem_Calloc((size_t)n + 1, sizeof(double));
    rate = (double *)PyMem_Calloc((size_t)n + 1, sizeof(double));
    keep = (uint8_t *)PyMem_Calloc((size_t)n + 1, 1);
    ci = (uint32_t *)PyMem_Calloc((size_t)n + 1, sizeof(uint32_t));
    if (!keys || !acc || !buf || !rate || !keep || !ci) {
        if (!PyErr_Occurred())
            PyErr_NoMemory();
        goto done;
    }
    for (i = 0; i < n; i++) {
        Py_INCREF(c.objs[i]);
        PyList_SET_ITEM(keys, i, c.objs[i]);
    }
    for (i = 0; i < nl; i++)
        if (sum_lane(PySequence_Fast_GET_ITEM(lanes, i), keys, cap, acc, buf))
            goto done;
    nc = tk_classify(acc, c.hot, (size_t)n, inv, min_rate, keep_all, rate, keep, ci);
    rates = PyDict_New();
    conts = PyList_New((Py_ssize_t)nc);
    if (!rates || !conts)
        goto done;
    for (i = 0; i < n; i++) {
        if (!keep[i])
            continue;
        PyObject *r = PyFloat_FromDouble(rate[i]);
        if (!r || PyDict_SetItem(rates, PyList_GET_ITEM(keys, i), r) < 0) {
            Py_XDECREF(r);
            goto done;
        }
        Py_DECREF(r);
    }
    for (i = 0; i < (Py_ssize_t)nc; i++) {
        PyObject *k = PyList_GET_ITEM(keys, ci[i]);
        Py_INCREF(k);
        PyList_SET_ITEM(conts, i, k);
    }
    out = PyTuple_Pack(2, rates, conts);
done:
    tk_set_free(&set);
    PyMem_Free(c.objs);
    PyMem_Free(c.hot);
    PyMem_Free(acc);
    PyMem_Free(buf);
    PyMem_Free(rate);
    PyMem_Free(keep);
    PyMem_Free(ci);
    Py_XDECREF(lanes);
    Py_XDECREF(hot);
    Py_XDECREF(keys);
    Py_XDECREF(rates);
    Py_XDECREF(conts);
    return out;
}

PyDoc_STRVAR(may_cross_doc,
             "may_cross(top, factor, tops, ks, factors, need) -> dict\n\n"
             "The entries of the open sub-window's top-k ``top`` (scale ``factor``) whose count\n"
             "there plus an upper bound of their count in the closed sub-windows (``tops``,\n"
             "their sketches' ``ks``, ``factors``) may reach ``need``: the crossing check's\n"
             "candidates, without an estimate of any key.");

static PyObject *tick_may_cross(PyObject *mod, PyObject *args) {
    PyObject *top, *otops, *oks, *ofacs, *tops = NULL, *ks = NULL, *facs = NULL, *out = NULL;
    PyObject *key, *val;
    double factor, need;
    tk_slot *slots = NULL;
    double *lows = NULL;
    Py_ssize_t ns, i, pos = 0;
    (void)mod;
    if (!PyArg_ParseTuple(args, "O!dOOOd:may_cross", &PyDict_Type, &top, &factor, &otops, &oks,
                          &ofacs, &need))
        return NULL;
    tops = PySequence_Fast(otops, "tops must be a sequence");
    ks = tops ? PySequence_Fast(oks, "ks must be a sequence") : NULL;
    facs = ks ? PySequence_Fast(ofacs, "factors must be a sequence") : NULL;
    if (!facs)
        goto done;
    ns = PySequence_Fast_GET_SIZE(tops);
    if (PySequence_Fast_GET_SIZE(ks) != ns || PySequence_Fast_GET_SIZE(facs) != ns) {
        PyErr_SetString(PyExc_ValueError, "tops, ks and factors differ in length");
        goto done;
    }
    slots = (tk_slot *)PyMem_Calloc((size_t)ns + 1, sizeof(*slots));
    lows = (double *)PyMem_Calloc((size_t)ns + 1, sizeof(double));
    if (!slots || !lows) {
        PyErr_NoMemory();
        goto done;
    }
    /* tk_floor needs each slot's floor: the counts of its top-k, in a scratch array. */
    for (i = 0; i < ns; i++) {
        PyObject *t = PySequence_Fast_GET_ITEM(tops, i), *v;
        Py_ssize_t p = 0, n = 0;
        int64_t *counts;
        if (!PyDict_Check(t)) {
            PyErr_SetString(PyExc_TypeError, "tops must be dicts");
            goto done;
        }
        counts = (int64_t *)PyMem_Calloc((size_t)PyDict_GET_SIZE(t) + 1, sizeof(int64_t));
        if (!counts) {
            PyErr_NoMemory();
            goto done;
        }
        slots[i].counts = counts;
        while (PyDict_Next(t, &p, &key, &v))
            counts[n++] = PyLong_AsLongLong(v);
        slots[i].n = (size_t)n;
        slots[i].k = PyLong_AsLongLong(PySequence_Fast_GET_ITEM(ks, i));
        slots[i].factor = PyFloat_AsDouble(PySequence_Fast_GET_ITEM(facs, i));
        if (PyErr_Occurred())
            goto done;
        lows[i] = (double)tk_floor(&slots[i]);
    }
    out = PyDict_New();
    if (!out)
        goto done;
    while (PyDict_Next(top, &pos, &key, &val)) {
        double ub = (double)PyLong_AsLongLong(val) * factor;
        if (PyErr_Occurred())
            goto fail;
        for (i = 0; i < ns && ub < need; i++) {
            PyObject *c = PyDict_GetItemWithError(PySequence_Fast_GET_ITEM(tops, i), key);
            if (!c && PyErr_Occurred())
                goto fail;
            ub += (c ? (double)PyLong_AsLongLong(c) : lows[i]) * slots[i].factor;
        }
        if (ub >= need && PyDict_SetItem(out, key, val) < 0)
            goto fail;
    }
    goto done;
fail:
    Py_CLEAR(out);
done:
    if (slots)
        for (i = 0; i < ns; i++)
            PyMem_Free((void *)slots[i].counts);
    PyMem_Free(slots);
    PyMem_Free(lows);
    Py_XDECREF(tops);
    Py_XDECREF(ks);
    Py_XDECREF(facs);
    return out;
}

static PyMethodDef tick_methods[] = {
    {"evaluate", tick_evaluate, METH_VARARGS, evaluate_doc},
    {"may_cross", tick_may_cross, METH_VARARGS, may_cross_doc},
    {NULL, NULL, 0, NULL},
};

/* Nothing to set up (no types, no state), but multi-phase init like the other bindings,
 * so the module loads in a sub-interpreter. */
static int tick_exec(PyObject *m) {
    (void)m;
    return 0;
}

static PyModuleDef_Slot tick_slots[] = {
    {Py_mod_exec, tick_exec},
    {0, NULL},
};

static struct PyModuleDef tick_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "hotkeyd.detector._tick",
    .m_doc = "C core of the detector's per-tick work (candidates, rates, contenders).",
    .m_size = 0,
    .m_methods = tick_methods,
    .m_slots = tick_slots,
};

PyMODINIT_FUNC PyInit__tick(void) { return PyModuleDef_Init(&tick_module); }
