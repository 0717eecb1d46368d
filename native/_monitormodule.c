/* CPython binding of the MONITOR parser (monitor_parse.c). Thin on purpose:
 * argument checking, GIL release around parsing, result objects. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "monitor_parse.h"

/* ------------------------------------------------------------------ Table */

typedef struct {
    PyObject_HEAD
    mp_table *t;
} TableObject;

static void Table_dealloc(TableObject *self) {
    mp_table_free(self->t);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int get_bytes(PyObject *o, const char **s, Py_ssize_t *n, const char *what) {
    if (PyBytes_Check(o)) {
        *s = PyBytes_AS_STRING(o);
        *n = PyBytes_GET_SIZE(o);
        return 0;
    }
    if (PyUnicode_Check(o)) {
        *s = PyUnicode_AsUTF8AndSize(o, n);
        return *s ? 0 : -1;
    }
    PyErr_Format(PyExc_TypeError, "%s must be bytes or str, not %.100s", what, Py_TYPE(o)->tp_name);
    return -1;
}

static int as_int(PyObject *o, int *out, const char *what) {
    if (!PyLong_Check(o)) {
        PyErr_Format(PyExc_TypeError, "%s must be int, not %.100s", what, Py_TYPE(o)->tp_name);
        return -1;
    }
    long v = PyLong_AsLong(o);
    if (v == -1 && PyErr_Occurred())
        return -1;
    if (v < -1000000 || v > 1000000) {
        PyErr_Format(PyExc_ValueError, "%s out of range: %ld", what, v);
        return -1;
    }
    *out = (int)v;
    return 0;
}

static int parse_spec(PyObject *o, mp_keyspec *ks) {
    memset(ks, 0, sizeof *ks);
    if (!PyTuple_Check(o) || PyTuple_GET_SIZE(o) != 8) {
        PyErr_SetString(
            PyExc_TypeError,
            "a key spec must be a tuple (bs_type, bs_arg, keyword, fk_type, a, b, c, write)");
        return -1;
    }
    if (as_int(PyTuple_GET_ITEM(o, 0), &ks->bs_type, "bs_type") < 0)
        return -1;
    if (as_int(PyTuple_GET_ITEM(o, 1), &ks->bs_arg, "bs_arg") < 0)
        return -1;
    PyObject *kw = PyTuple_GET_ITEM(o, 2);
    if (kw != Py_None) {
        const char *s;
        Py_ssize_t n;
        if (get_bytes(kw, &s, &n, "keyword") < 0)
            return -1;
        ks->keyword = (char *)s; /* copied by mp_table_add */
        ks->keyword_len = (size_t)n;
    }
    if (as_int(PyTuple_GET_ITEM(o, 3), &ks->fk_type, "fk_type") < 0)
        return -1;
    if (as_int(PyTuple_GET_ITEM(o, 4), &ks->fk_a, "a") < 0)
        return -1;
    if (as_int(PyTuple_GET_ITEM(o, 5), &ks->fk_b, "b") < 0)
        return -1;
    if (as_int(PyTuple_GET_ITEM(o, 6), &ks->fk_c, "c") < 0)
        return -1;
    int w = PyObject_IsTrue(PyTuple_GET_ITEM(o, 7));
    if (w < 0)
        return -1;
    ks->write = w;
    if (ks->bs_type < 0 || ks->bs_type > 2 || ks->fk_type < 0 || ks->fk_type > 2) {
        PyErr_SetString(PyExc_ValueError, "bs_type and fk_type must be 0, 1 or 2");
        return -1;
    }
    return 0;
}

static int Table_init(TableObject *self, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {"entries", NULL};
    PyObject *entries;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O:Table", kwlist, &entries))
        return -1;
    if (self->t) { /* parsers may hold the C table: it never changes once built */
        PyErr_SetString(PyExc_RuntimeError, "Table is immutable: build a new one");
        return -1;
    }
    self->t = mp_table_new();
    if (!self->t) {
        PyErr_NoMemory();
        return -1;
    }
    PyObject *it = PyObject_GetIter(entries);
    if (!it)
        return -1;
    PyObject *e;
    mp_keyspec specs[32];
    while ((e = PyIter_Next(it))) {
        const char *name;
        Py_ssize_t nlen;
        int special;
        if (!PyTuple_Check(e) || PyTuple_GET_SIZE(e) != 3) {
            PyErr_SetString(PyExc_TypeError,
                            "a table entry must be a tuple (name, special, specs)");
            goto fail;
        }
        if (get_bytes(PyTuple_GET_ITEM(e, 0), &name, &nlen, "name") < 0)
            goto fail;
        if (as_int(PyTuple_GET_ITEM(e, 1), &special, "special") < 0)
            goto fail;
        PyObject *sl = PySequence_Fast(PyTuple_GET_ITEM(e, 2), "specs must be a sequence");
        if (!sl)
            goto fail;
        Py_ssize_t ns = PySequence_Fast_GET_SIZE(sl);
        if (ns > 32) {
            Py_DECREF(sl);
            PyErr_SetString(PyExc_ValueError, "at most 32 key specs per command");
            goto fail;
        }
        for (Py_ssize_t i = 0; i < ns; i++) {
            if (parse_spec(PySequence_Fast_GET_ITEM(sl, i), &specs[i]) < 0) {
                Py_DECREF(sl);
                goto fail;
            }
        }
        int r = mp_table_add(self->t, name, (size_t)nlen, special, specs, (int)ns);
        Py_DECREF(sl);
        if (r == -1) {
            PyErr_NoMemory();
            goto fail;
        }
        if (r == -2) {
            PyErr_Format(PyExc_ValueError, "command name empty or longer than %d bytes",
                         MP_MAX_NAME - 1);
            goto fail;
        }
        Py_DECREF(e);
    }
    Py_DECREF(it);
    return PyErr_Occurred() ? -1 : 0;
fail:
    Py_DECREF(e);
    Py_DECREF(it);
    return -1;
}

static Py_ssize_t Table_len(TableObject *self) { return (Py_ssize_t)mp_table_size(self->t); }

static PySequenceMethods Table_as_seq = {.sq_length = (lenfunc)Table_len};

static PyTypeObject TableType = {
    PyVarObject_HEAD_INIT(NULL, 0) /* (the macro brings its own comma) */
        .tp_name = "hotkeyd.sources.monitor._monitor.Table",
    .tp_basicsize = sizeof(TableObject),
    .tp_dealloc = (destructor)Table_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Command table: name -> (special, key specs), for key extraction in C.",
    .tp_init = (initproc)Table_init,
    .tp_new = PyType_GenericNew,
    .tp_as_sequence = &Table_as_seq,
};

/* ------------------------------------------------------------------ results */

static PyObject *replies_list(const mp_out *o) {
    PyObject *l = PyList_New((Py_ssize_t)o->nreplies);
    if (!l)
        return NULL;
    for (size_t i = 0; i < o->nreplies; i++) {
        PyObject *b =
            PyBytes_FromStringAndSize(o->arena + o->replies[i].off, (Py_ssize_t)o->replies[i].len);
        if (!b) {
            Py_DECREF(l);
            return NULL;
        }
        PyList_SET_ITEM(l, (Py_ssize_t)i, b);
    }
    return l;
}

static PyObject *groups_dict(const mp_out *o) {
    PyObject *d = PyDict_New();
    if (!d)
        return NULL;
    PyObject *cur = NULL; /* borrowed from d */
    uint32_t cur_tag = 0;
    for (size_t i = 0; i < o->nitems; i++) {
        const mp_item *it = &o->items[i];
        if (!cur || it->tag != cur_tag) {
            PyObject *k = PyLong_FromUnsignedLong(it->tag);
            if (!k)
                goto fail;
            cur = PyDict_GetItemWithError(d, k);
            if (!cur) {
                if (PyErr_Occurred()) {
                    Py_DECREF(k);
                    goto fail;
                }
                cur = PyList_New(0);
                if (!cur || PyDict_SetItem(d, k, cur) < 0) {
                    Py_XDECREF(cur);
                    Py_DECREF(k);
                    goto fail;
                }
                Py_DECREF(cur);
            }
            Py_DECREF(k);
            cur_tag = it->tag;
        }
        PyObject *b = PyBytes_FromStringAndSize(o->arena + it->off, (Py_ssize_t)it->len);
        if (!b)
            goto fail;
        int r = PyList_Append(cur, b);
        Py_DECREF(b);
        if (r < 0)
            goto fail;
    }
    return d;
fail:
    Py_DECREF(d);
    return NULL;
}

static PyObject *args_lines(const mp_out *o) {
    PyObject *l = PyList_New((Py_ssize_t)o->nlines);
    if (!l)
        return NULL;
    for (size_t i = 0; i < o->nlines; i++) {
        const mp_line *L = &o->lines[i];
        PyObject *a = PyList_New((Py_ssize_t)L->nitems);
        if (!a) {
            Py_DECREF(l);
            return NULL;
        }
        for (size_t j = 0; j < L->nitems; j++) {
            const mp_item *it = &o->items[L->first_item + j];
            PyObject *b = PyBytes_FromStringAndSize(o->arena + it->off, (Py_ssize_t)it->len);
            if (!b) {
                Py_DECREF(a);
                Py_DECREF(l);
                return NULL;
            }
            PyList_SET_ITEM(a, (Py_ssize_t)j, b);
        }
        PyObject *t = Py_BuildValue("(dly#N)", L->ts, L->db, o->arena + L->addr_off,
                                    (Py_ssize_t)L->addr_len, a);
        if (!t) {
            Py_DECREF(l);
            return NULL;
        }
        PyList_SET_ITEM(l, (Py_ssize_t)i, t);
    }
    return l;
}

/* ------------------------------------------------------------------ Parser */

typedef struct {
    PyObject_HEAD
    mp_parser *p;
    mp_out out;
    PyObject *table; /* TableObject or NULL, kept alive while in use */
    int busy;
} ParserObject;

static void Parser_dealloc(ParserObject *self) {
    mp_parser_free(self->p);
    mp_out_free(&self->out);
    Py_XDECREF(self->table);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int set_table(ParserObject *self, PyObject *table) {
    if (table != Py_None && !PyObject_TypeCheck(table, &TableType)) {
        PyErr_Format(PyExc_TypeError, "table must be a Table or None, not %.100s",
                     Py_TYPE(table)->tp_name);
        return -1;
    }
    Py_XDECREF(self->table);
    self->table = NULL;
    mp_parser_set_table(self->p, NULL);
    if (table != Py_None) {
        Py_INCREF(table);
        self->table = table;
        mp_parser_set_table(self->p, ((TableObject *)table)->t);
    }
    return 0;
}

static int Parser_init(ParserObject *self, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {"table", "max_line", "skip_scripts", NULL};
    PyObject *table = Py_None;
    Py_ssize_t max_line = 64 << 20;
    int skip_scripts = 1;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "|O$np:Parser", kwlist, &table, &max_line,
                                     &skip_scripts))
        return -1;
    if (max_line < 64) {
        PyErr_Format(PyExc_ValueError, "max_line must be >= 64, got %zd", max_line);
        return -1;
    }
    if (self->p)
        return 0;
    self->p = mp_parser_new((size_t)max_line);
    if (!self->p) {
        PyErr_NoMemory();
        return -1;
    }
    mp_out_init(&self->out);
    mp_parser_set_skip_scripts(self->p, skip_scripts);
    return set_table(self, table);
}

static int check_ready(ParserObject *self) {
    if (!self->p) {
        PyErr_SetString(PyExc_RuntimeError, "Parser not initialised");
        return -1;
    }
    if (self->busy) {
        PyErr_SetString(PyExc_RuntimeError, "Parser used from two threads at once");
        return -1;
    }
    return 0;
}

static int do_feed(ParserObject *self, PyObject *data, int mode) {
    Py_buffer view;
    if (check_ready(self) < 0)
        return -1;
    if (PyObject_GetBuffer(data, &view, PyBUF_SIMPLE) < 0)
        return -1;
    self->busy = 1;
    mp_out_reset(&self->out);
    int r;
    Py_BEGIN_ALLOW_THREADS r =
        mp_feed(self->p, (const char *)view.buf, (size_t)view.len, mode, &self->out);
    Py_END_ALLOW_THREADS self->busy = 0;
    PyBuffer_Release(&view);
    if (r < 0) {
        PyErr_NoMemory();
        return -1;
    }
    return 0;
}

static PyObject *Parser_feed(ParserObject *self, PyObject *data) {
    if (do_feed(self, data, MP_MODE_KEYS) < 0)
        return NULL;
    mp_out *o = &self->out;
    PyObject *g = groups_dict(o);
    if (!g)
        return NULL;
    PyObject *rl = replies_list(o);
    if (!rl) {
        Py_DECREF(g);
        return NULL;
    }
    return Py_BuildValue("(NNKKKKKdd)", g, rl, (unsigned long long)o->n_monitor,
                         (unsigned long long)o->n_skipped, (unsigned long long)o->n_malformed,
                         (unsigned long long)o->n_too_long, (unsigned long long)o->n_unknown,
                         o->ts_first, o->ts_last);
}

static PyObject *Parser_feed_args(ParserObject *self, PyObject *data) {
    if (do_feed(self, data, MP_MODE_ARGS) < 0)
        return NULL;
    mp_out *o = &self->out;
    PyObject *l = args_lines(o);
    if (!l)
        return NULL;
    PyObject *rl = replies_list(o);
    if (!rl) {
        Py_DECREF(l);
        return NULL;
    }
    return Py_BuildValue("(NNKK)", l, rl, (unsigned long long)o->n_malformed,
                         (unsigned long long)o->n_too_long);
}

static PyObject *Parser_set_skip(ParserObject *self, PyObject *addrs) {
    if (check_ready(self) < 0)
        return NULL;
    PyObject *seq = PySequence_Fast(addrs, "addrs must be a sequence of bytes");
    if (!seq)
        return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    const char **s = (const char **)PyMem_Calloc((size_t)n + 1, sizeof(char *));
    size_t *l = (size_t *)PyMem_Calloc((size_t)n + 1, sizeof(size_t));
    PyObject *ret = NULL;
    if (!s || !l) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_ssize_t len;
        if (get_bytes(PySequence_Fast_GET_ITEM(seq, i), &s[i], &len, "address") < 0)
            goto done;
        l[i] = (size_t)len;
    }
    if (mp_parser_set_skip(self->p, s, l, (size_t)n) < 0) {
        PyErr_NoMemory();
        goto done;
    }
    ret = Py_None;
    Py_INCREF(ret);
done:
    PyMem_Free((void *)s);
    PyMem_Free(l);
    Py_DECREF(seq);
    return ret;
}

static PyObject *Parser_set_table(ParserObject *self, PyObject *table) {
    if (check_ready(self) < 0)
        return NULL;
    if (set_table(self, table) < 0)
        return NULL;
    Py_RETURN_NONE;
}

static PyObject *Parser_get_pending(ParserObject *self, void *closure) {
    return PyLong_FromSize_t(self->p ? mp_parser_pending(self->p) : 0);
}

static PyMethodDef Parser_methods[] = {
    {"feed", (PyCFunction)Parser_feed, METH_O,
     "feed(data) -> (groups, replies, n_monitor, n_skipped, n_malformed, n_too_long, n_unknown, "
     "ts_first, ts_last); groups maps db*2+write to the list of keys."},
    {"feed_args", (PyCFunction)Parser_feed_args, METH_O,
     "feed_args(data) -> (lines, replies, n_malformed, n_too_long); lines are (ts, db, addr, "
     "args)."},
    {"set_skip", (PyCFunction)Parser_set_skip, METH_O, "Skip lines from these client addresses."},
    {"set_table", (PyCFunction)Parser_set_table, METH_O, "Replace the command table (or None)."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef Parser_getset[] = {
    {"pending", (getter)Parser_get_pending, NULL, "Bytes of the partial line kept.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject ParserType = {
    PyVarObject_HEAD_INIT(NULL, 0) /* (the macro brings its own comma) */
        .tp_name = "hotkeyd.sources.monitor._monitor.Parser",
    .tp_basicsize = sizeof(ParserObject),
    .tp_dealloc = (destructor)Parser_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Streaming MONITOR parser; feed() releases the GIL while parsing.",
    .tp_methods = Parser_methods,
    .tp_getset = Parser_getset,
    .tp_init = (initproc)Parser_init,
    .tp_new = PyType_GenericNew,
};

/* ------------------------------------------------------------------ module */

static PyObject *mod_extract(PyObject *m, PyObject *args) {
    PyObject *table, *argl;
    if (!PyArg_ParseTuple(args, "O!O:extract", &TableType, &table, &argl))
        return NULL;
    PyObject *seq = PySequence_Fast(argl, "args must be a sequence of bytes");
    if (!seq)
        return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    const char **s = (const char **)PyMem_Calloc((size_t)n + 1, sizeof(char *));
    size_t *l = (size_t *)PyMem_Calloc((size_t)n + 1, sizeof(size_t));
    PyObject *ret = NULL;
    mp_out out;
    mp_out_init(&out);
    if (!s || !l) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *o = PySequence_Fast_GET_ITEM(seq, i);
        if (!PyBytes_Check(o)) {
            PyErr_Format(PyExc_TypeError, "args must be bytes, not %.100s", Py_TYPE(o)->tp_name);
            goto done;
        }
        s[i] = PyBytes_AS_STRING(o);
        l[i] = (size_t)PyBytes_GET_SIZE(o);
    }
    if (mp_extract(((TableObject *)table)->t, s, l, (int)n, &out, 0) < 0) {
        PyErr_NoMemory();
        goto done;
    }
    ret = PyList_New((Py_ssize_t)out.nitems);
    if (!ret)
        goto done;
    for (size_t i = 0; i < out.nitems; i++) {
        PyObject *t =
            Py_BuildValue("(y#O)", out.arena + out.items[i].off, (Py_ssize_t)out.items[i].len,
                          out.items[i].tag & 1 ? Py_True : Py_False);
        if (!t) {
            Py_CLEAR(ret);
            goto done;
        }
        PyList_SET_ITEM(ret, (Py_ssize_t)i, t);
    }
done:
    mp_out_free(&out);
    PyMem_Free((void *)s);
    PyMem_Free(l);
    Py_DECREF(seq);
    return ret;
}

static PyMethodDef module_methods[] = {
    {"extract", mod_extract, METH_VARARGS,
     "extract(table, args) -> [(key, is_write), ...] for one command's args."},
    {NULL, NULL, 0, NULL},
};

/* Multi-phase initialization (PEP 489): the module object is created by the import
 * system and filled in by monitor_exec. The types are static and immutable state-free,
 * so the module keeps no per-module state (m_size 0). */
static int monitor_exec(PyObject *m) {
    if (PyType_Ready(&TableType) < 0 || PyType_Ready(&ParserType) < 0)
        return -1;
    if (PyModule_AddObjectRef(m, "Table", (PyObject *)&TableType) < 0)
        return -1;
    if (PyModule_AddObjectRef(m, "Parser", (PyObject *)&ParserType) < 0)
        return -1;
    return 0;
}

static PyModuleDef_Slot monitor_slots[] = {
    {Py_mod_exec, monitor_exec},
    {0, NULL},
};

static struct PyModuleDef moduledef = {
    PyModuleDef_HEAD_INIT,
    .m_name = "hotkeyd.sources.monitor._monitor",
    .m_doc = "C MONITOR parser of hotkeyd.",
    .m_size = 0,
    .m_methods = module_methods,
    .m_slots = monitor_slots,
};

PyMODINIT_FUNC PyInit__monitor(void) { return PyModuleDef_Init(&moduledef); }
