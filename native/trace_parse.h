/* Timestamped trace lines of ``hotkeyd replay``: one line, parsed without Python.
 *
 * A line is ``<ts> <key>`` or ``<ts> <key> <count>`` (space or TAB separated). ``ts`` is
 * Unix seconds, or milliseconds when larger than 1e11 (then divided by 1000); it must be
 * finite and >= 0. ``count`` is ASCII decimal in [1, 2^32-1], 1 when absent. Anything
 * else (a missing key, a fourth field, a sign in the count) makes the line malformed.
 *
 * Pure C99, no Python.h: the CPython binding lives in _tracemodule.c.
 */
#ifndef HOTKEYD_TRACE_PARSE_H
#define HOTKEYD_TRACE_PARSE_H

#include <stddef.h>

typedef struct {
    double ts; /* seconds */
    const char *key; /* into the line */
    size_t klen;
    unsigned long long count;
    const char *cdigits; /* the count's digits as written, or NULL when absent */
    size_t cdlen;
} tr_line;

/* Parse one line [p, end) (no newline, no trailing '\r'). Returns 1 and fills *out on
 * success, 0 for a malformed line (*out is then unspecified). */
int tr_parse_line(const char *p, const char *end, tr_line *out);

#endif
