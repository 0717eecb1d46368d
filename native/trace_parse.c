/* Timestamped trace lines of ``hotkeyd replay``: ``<ts> <key> [<count>]``.
 *
 * Pure C99, no Python.h: the CPython binding lives in _tracemodule.c. The pure-Python
 * twin is ``hotkeyd/replay/_trace_py.py``; both give identical results. */
#include "trace_parse.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define MS_ABOVE 1e11

static int is_sep(char c) { return c == ' ' || c == '\t'; }

/* The first separator at or after k (end if none). Two memchr calls instead of a byte loop:
 * keys run to hundreds of bytes, and memchr scans a word or a vector at a time. */
static const char *key_end(const char *k, const char *end) {
    const char *sp = memchr(k, ' ', (size_t)(end - k));
    const char *lim = sp ? sp : end;
    const char *tab = memchr(k, '\t', (size_t)(lim - k));
    return tab ? tab : lim;
}

int tr_parse_line(const char *p, const char *end, tr_line *out) {
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
    q = key_end(k, end);
    if (q == k)
        return 0;
    out->key = k;
    out->klen = (size_t)(q - k);
    while (q < end && is_sep(*q))
        q++;
    unsigned long long n = 1;
    out->cdigits = NULL;
    out->cdlen = 0;
    if (q < end) {
        n = 0;
        const char *d = q;
        while (q < end && *q >= '0' && *q <= '9') {
            n = n * 10 + (unsigned long long)(*q - '0');
            if (n > 0xFFFFFFFFULL)
                return 0;
            q++;
        }
        out->cdigits = d;
        out->cdlen = (size_t)(q - d);
        while (q < end && is_sep(*q))
            q++;
        if (q == d || q != end || n == 0)
            return 0;
    }
    out->ts = t;
    out->count = n;
    return 1;
}
