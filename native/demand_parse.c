/* Batched parser of demand reports: see demand_parse.h for the rules it follows. */
#include "demand_parse.h"

#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------ memory */

void dp_batch_init(dp_batch *b) { memset(b, 0, sizeof *b); }

void dp_batch_reset(dp_batch *b) {
    b->alen = 0;
    b->nents = 0;
}

void dp_batch_free(dp_batch *b) {
    free(b->arena);
    free(b->ents);
    free(b->raw);
    free(b->slots);
    free(b->num);
    dp_batch_init(b);
}

static int grow(void **p, size_t *cap, size_t need, size_t size) {
    if (need <= *cap)
        return 0;
    size_t n = *cap ? *cap : 64;
    while (n < need)
        n *= 2;
    void *q = realloc(*p, n * size);
    if (!q)
        return -1;
    *p = q;
    *cap = n;
    return 0;
}

static int arena_put(dp_batch *b, const void *s, size_t n) {
    if (grow((void **)&b->arena, &b->acap, b->alen + n, 1) < 0)
        return -1;
    memcpy(b->arena + b->alen, s, n);
    b->alen += n;
    return 0;
}

/* ------------------------------------------------------------------ UTF-8 */

int dp_utf8_valid(const unsigned char *s, size_t len) {
    size_t i = 0;
    while (i < len) {
        while (i + 8 <= len) { /* ASCII, 8 bytes at a time */
            uint64_t w;
            memcpy(&w, s + i, 8);
            if (w & 0x8080808080808080ULL)
                break;
            i += 8;
        }
        if (i >= len)
            break;
        unsigned char c = s[i];
        if (c < 0x80) {
            i++;
            continue;
        }
        size_t need;
        unsigned char lo = 0x80, hi = 0xBF;
        if (c >= 0xC2 && c <= 0xDF)
            need = 1;
        else if (c >= 0xE0 && c <= 0xEF) {
            need = 2;
            if (c == 0xE0)
                lo = 0xA0;
            else if (c == 0xED)
                hi = 0x9F; /* no surrogates in strict UTF-8 */
        } else if (c >= 0xF0 && c <= 0xF4) {
            need = 3;
            if (c == 0xF0)
                lo = 0x90;
            else if (c == 0xF4)
                hi = 0x8F;
        } else
            return 0;
        if (len - i <= need)
            return 0;
        if (s[i + 1] < lo || s[i + 1] > hi)
            return 0;
        for (size_t k = 2; k <= need; k++)
            if ((s[i + k] & 0xC0) != 0x80)
                return 0;
        i += need + 1;
    }
    return 1;
}

/* ------------------------------------------------------------------ JSON */

typedef struct {
    const unsigned char *p, *end;
    dp_batch *b;
    const dp_limits *lim;
    int nomem;
} scan;

typedef struct {
    int is_int;
    int64_t i;
    double d;
} number;

static void ws(scan *s) {
    while (s->p < s->end && (*s->p == ' ' || *s->p == '\t' || *s->p == '\n' || *s->p == '\r'))
        s->p++;
}

static int hexval(unsigned char c) {
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

static int hex4(const unsigned char *p, const unsigned char *end, unsigned *out) {
    if (end - p < 4)
        return -1;
    unsigned v = 0;
    for (int k = 0; k < 4; k++) {
        int h = hexval(p[k]);
        if (h < 0)
            return -1;
        v = v * 16 + (unsigned)h;
    }
    *out = v;
    return 0;
}

/* Encode a code point as UTF-8; surrogates as "surrogatepass" does (3 bytes). */
static size_t utf8_put(unsigned cp, unsigned char *o) {
    if (cp < 0x80) {
        o[0] = (unsigned char)cp;
        return 1;
    }
    if (cp < 0x800) {
        o[0] = (unsigned char)(0xC0 | (cp >> 6));
        o[1] = (unsigned char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        o[0] = (unsigned char)(0xE0 | (cp >> 12));
        o[1] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
        o[2] = (unsigned char)(0x80 | (cp & 0x3F));
        return 3;
    }
    o[0] = (unsigned char)(0xF0 | (cp >> 18));
    o[1] = (unsigned char)(0x80 | ((cp >> 12) & 0x3F));
    o[2] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
    o[3] = (unsigned char)(0x80 | (cp & 0x3F));
    return 4;
}

/* A string at s->p (the opening quote). keep: append its decoded bytes to the arena
 * and set *off and *len. Returns 0, or -1 when it is not a valid JSON string. */
static int string(scan *s, int keep, size_t *off, size_t *len) {
    dp_batch *b = s->b;
    const unsigned char *p = s->p + 1, *end = s->end;
    size_t start = b->alen;
    for (;;) {
        const unsigned char *run = p;
        while (p < end && *p != '"' && *p != '\\' && *p >= 0x20)
            p++;
        if (keep && p > run && arena_put(b, run, (size_t)(p - run)) < 0) {
            s->nomem = 1;
            return -1;
        }
        if (p >= end || *p < 0x20)
            return -1;
        if (*p == '"')
            break;
        /* an escape */
        if (end - p < 2)
            return -1;
        unsigned char e = p[1], c;
        unsigned char out[8];
        size_t n = 1;
        p += 2;
        switch (e) {
        case '"':
            c = '"';
            break;
        case '\\':
            c = '\\';
            break;
        case '/':
            c = '/';
            break;
        case 'b':
            c = '\b';
            break;
        case 'f':
            c = '\f';
            break;
        case 'n':
            c = '\n';
            break;
        case 'r':
            c = '\r';
            break;
        case 't':
            c = '\t';
            break;
        case 'u': {
            unsigned cp;
            if (hex4(p, end, &cp) < 0)
                return -1;
            p += 4;
            if (cp >= 0xD800 && cp <= 0xDBFF && end - p >= 6 && p[0] == '\\' && p[1] == 'u') {
                unsigned lo;
                if (hex4(p + 2, end, &lo) < 0)
                    return -1; /* Python: "Invalid \uXXXX escape" */
                if (lo >= 0xDC00 && lo <= 0xDFFF) {
                    cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                    p += 6;
                }
            }
            n = utf8_put(cp, out);
            c = 0;
            break;
        }
        default:
            return -1;
        }
        if (n == 1 && e != 'u')
            out[0] = c;
        if (keep && arena_put(b, out, n) < 0) {
            s->nomem = 1;
            return -1;
        }
    }
    s->p = p + 1;
    if (keep) {
        *off = start;
        *len = b->alen - start;
    }
    return 0;
}

/* A number at s->p by the JSON grammar and strictjson's rule. */
static int num(scan *s, number *out) {
    const unsigned char *p = s->p, *end = s->end, *start = p;
    int is_int = 1;
    if (p < end && *p == '-')
        p++;
    if (p >= end)
        return -1;
    if (*p == '0')
        p++;
    else if (*p >= '1' && *p <= '9')
        while (p < end && *p >= '0' && *p <= '9')
            p++;
    else
        return -1;
    if (p < end && *p == '.') {
        is_int = 0;
        p++;
        if (p >= end || *p < '0' || *p > '9')
            return -1;
        while (p < end && *p >= '0' && *p <= '9')
            p++;
    }
    if (p < end && (*p == 'e' || *p == 'E')) {
        is_int = 0;
        p++;
        if (p < end && (*p == '+' || *p == '-'))
            p++;
        if (p >= end || *p < '0' || *p > '9')
            return -1;
        while (p < end && *p >= '0' && *p <= '9')
            p++;
    }
    size_t n = (size_t)(p - start);
    out->is_int = is_int;
    if (is_int) {
        if (n > 20) /* strictjson: "integer of N digits" */
            return -1;
        const unsigned char *q = start;
        int neg = *q == '-';
        if (neg)
            q++;
        uint64_t v = 0;
        for (; q < p; q++) {
            unsigned d = (unsigned)(*q - '0');
            if (v > (UINT64_MAX - d) / 10)
                return -1;
            v = v * 10 + d;
        }
        if (neg ? v > (uint64_t)INT64_MAX + 1 : v > (uint64_t)INT64_MAX)
            return -1; /* outside the signed 64-bit range */
        out->i = neg ? (int64_t)(0 - v) : (int64_t)v;
        out->d = (double)out->i;
    } else {
        dp_batch *b = s->b;
        if (grow((void **)&b->num, &b->numcap, n + 1, 1) < 0) {
            s->nomem = 1;
            return -1;
        }
        memcpy(b->num, start, n);
        b->num[n] = 0;
        double d = strtod(b->num, NULL);
        if (d > 1.7976931348623157e308 || d < -1.7976931348623157e308)
            return -1; /* not finite (1e400) */
        out->d = d;
        out->i = 0;
    }
    s->p = p;
    return 0;
}

static int lit(scan *s, const char *word, size_t n) {
    if ((size_t)(s->end - s->p) < n || memcmp(s->p, word, n) != 0)
        return -1;
    s->p += n;
    return 0;
}

/* Any value at s->p; a container there would be at nesting depth `depth`. */
static int value(scan *s, int depth) {
    ws(s);
    if (s->p >= s->end)
        return -1;
    unsigned char c = *s->p;
    if (c == '"')
        return string(s, 0, NULL, NULL);
    if (c == '{' || c == '[') {
        if (depth > s->lim->max_depth)
            return -1;
        unsigned char close = c == '{' ? '}' : ']';
        s->p++;
        ws(s);
        if (s->p < s->end && *s->p == close) {
            s->p++;
            return 0;
        }
        for (;;) {
            if (c == '{') {
                ws(s);
                if (s->p >= s->end || *s->p != '"' || string(s, 0, NULL, NULL) < 0)
                    return -1;
                ws(s);
                if (s->p >= s->end || *s->p != ':')
                    return -1;
                s->p++;
            }
            if (value(s, depth + 1) < 0)
                return -1;
            ws(s);
            if (s->p >= s->end)
                return -1;
            if (*s->p == ',') {
                s->p++;
                continue;
            }
            if (*s->p != close)
                return -1;
            s->p++;
            return 0;
        }
    }
    if (c == 't')
        return lit(s, "true", 4);
    if (c == 'f')
        return lit(s, "false", 5);
    if (c == 'n')
        return lit(s, "null", 4);
    number n;
    return num(s, &n);
}

typedef struct {
    int64_t count; /* elements of the last "entries" array */
    int reason; /* DP_OK or why its first bad entry is bad */
    const char *msg;
    int seen; /* an "entries" array was read */
} ent_state;

static int entries_inline(scan *s, int depth, ent_state *st);

/* An object's members: for each name in names[], where its last value starts (or
 * NULL). Validates every value. The object is at nesting depth `depth`. With st, the
 * member names[entries_at] holding an array is read as the report's entries on the way
 * (one pass over the document; the last such member wins, as Python's json has it). */
static int members_ex(scan *s, int depth, const char *const *names, int nnames,
                      const unsigned char **at, int entries_at, ent_state *st) {
    for (int k = 0; k < nnames; k++)
        at[k] = NULL;
    if (depth > s->lim->max_depth)
        return -1;
    s->p++; /* '{' */
    ws(s);
    if (s->p < s->end && *s->p == '}') {
        s->p++;
        return 0;
    }
    dp_batch *b = s->b;
    for (;;) {
        ws(s);
        if (s->p >= s->end || *s->p != '"')
            return -1;
        size_t mark = b->alen, off, len;
        const char *name;
        const unsigned char *q = s->p + 1;
        while (q < s->end && *q != '"' && *q != '\\' && *q >= 0x20)
            q++;
        if (q < s->end && *q == '"') { /* no escapes: compare in place */
            name = (const char *)s->p + 1;
            len = (size_t)(q - s->p - 1);
            s->p = q + 1;
        } else {
            if (string(s, 1, &off, &len) < 0)
                return -1;
            name = b->arena + off;
        }
        int which = -1;
        for (int k = 0; k < nnames; k++)
            if (strlen(names[k]) == len && memcmp(name, names[k], len) == 0)
                which = k;
        b->alen = mark;
        ws(s);
        if (s->p >= s->end || *s->p != ':')
            return -1;
        s->p++;
        ws(s);
        if (which >= 0)
            at[which] = s->p;
        if (st && which == entries_at && s->p < s->end && *s->p == '[') {
            if (entries_inline(s, depth + 1, st) < 0)
                return -1;
        } else if (value(s, depth + 1) < 0)
            return -1;
        ws(s);
        if (s->p >= s->end)
            return -1;
        if (*s->p == ',') {
            s->p++;
            continue;
        }
        if (*s->p != '}')
            return -1;
        s->p++;
        return 0;
    }
}

static int members(scan *s, int depth, const char *const *names, int nnames,
                   const unsigned char **at) {
    return members_ex(s, depth, names, nnames, at, -1, NULL);
}

/* Readers of a value already validated (at points at its first character). */
static int get_int(scan *s, const unsigned char *at, int64_t *v) {
    if (!at || *at == 't' || *at == 'f' || *at == 'n' || *at == '"' || *at == '{' || *at == '[')
        return -1;
    scan t = *s;
    t.p = at;
    number n;
    if (num(&t, &n) < 0 || !n.is_int) {
        s->nomem |= t.nomem;
        return -1;
    }
    *v = n.i;
    return 0;
}

static int get_number(scan *s, const unsigned char *at, double *d) {
    if (!at || *at == 't' || *at == 'f' || *at == 'n' || *at == '"' || *at == '{' || *at == '[')
        return -1;
    scan t = *s;
    t.p = at;
    number n;
    if (num(&t, &n) < 0) {
        s->nomem |= t.nomem;
        return -1;
    }
    *d = n.d;
    return 0;
}

static int get_string(scan *s, const unsigned char *at, size_t *off, size_t *len) {
    if (!at || *at != '"')
        return -1;
    scan t = *s;
    t.p = at;
    int r = string(&t, 1, off, len);
    s->nomem |= t.nomem;
    return r;
}

static int is_word(scan *s, const unsigned char *at, const char *w) {
    size_t mark = s->b->alen, off, len;
    int eq = get_string(s, at, &off, &len) == 0 && len == strlen(w) &&
             memcmp(s->b->arena + off, w, len) == 0;
    s->b->alen = mark;
    return eq;
}

static int b64val(unsigned char c) {
    if (c >= 'A' && c <= 'Z')
        return c - 'A';
    if (c >= 'a' && c <= 'z')
        return c - 'a' + 26;
    if (c >= '0' && c <= '9')
        return c - '0' + 52;
    if (c == '+')
        return 62;
    if (c == '/')
        return 63;
    return -1;
}

/* Python's base64.b64decode(key, validate=True), in place: the key must match
 * [A-Za-z0-9+/]*={0,2}, and binascii's strict mode then applies (3.11+). */
static int b64_inplace(char *buf, size_t len, size_t *out_len) {
    size_t d = 0;
    while (d < len && b64val((unsigned char)buf[d]) >= 0)
        d++;
    size_t pads = len - d;
    if (pads > 2)
        return -1;
    for (size_t k = d; k < len; k++)
        if (buf[k] != '=')
            return -1;
    /* binascii's strict mode (as CPython 3.11 has it): padding completes the last quad
     * and nothing follows it; after a full quad it is ignored, but not leading */
    if (!((d % 4 == 0 && (pads == 0 || d > 0)) || (pads == 2 && d % 4 == 2) ||
          (pads == 1 && d % 4 == 3)))
        return -1;
    size_t o = 0;
    uint32_t acc = 0;
    int bits = 0;
    for (size_t k = 0; k < d; k++) {
        acc = (acc << 6) | (uint32_t)b64val((unsigned char)buf[k]);
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            buf[o++] = (char)((acc >> bits) & 0xFF);
        }
    }
    *out_len = o;
    return 0;
}

static size_t codepoints(const char *s, size_t n) {
    size_t c = 0;
    for (size_t i = 0; i < n; i++)
        c += ((unsigned char)s[i] & 0xC0) != 0x80;
    return c;
}

/* ------------------------------------------------------------------ the report */

static const char *const TOP[] = {"v", "type", "app", "seq", "ts", "interval_ms", "entries"};
enum { T_V, T_TYPE, T_APP, T_SEQ, T_TS, T_INTERVAL, T_ENTRIES, T_N };
static const char *const ENT[] = {"key", "enc", "db", "n"};
enum { E_KEY, E_ENC, E_DB, E_N, E_NN };

static int reject(dp_report *out, int reason, const char *msg) {
    out->reason = reason;
    out->msg = msg;
    return 0;
}

static int nomem(dp_report *out) {
    out->reason = DP_NOMEM;
    out->msg = "out of memory";
    return -1;
}

/* The fields of one entry object (validated); appends it to b->raw. Returns DP_OK or
 * a reason (*msg set). */
static int entry(scan *s, const unsigned char *const *f, const char **msg) {
    dp_batch *b = s->b;
    const dp_limits *lim = s->lim;
    size_t koff, klen;
    if (!f[E_KEY] || *f[E_KEY] != '"') {
        *msg = "entry has no string 'key'";
        return DP_BAD_ENTRY;
    }
    size_t mark = b->alen;
    int base64 = 0;
    if (f[E_ENC] && *f[E_ENC] != 'n') { /* absent or null: utf-8 */
        if (is_word(s, f[E_ENC], "base64"))
            base64 = 1;
        else if (!is_word(s, f[E_ENC], "utf-8")) {
            *msg = "unknown key encoding";
            return s->nomem ? DP_NOMEM : DP_BAD_ENTRY;
        }
    }
    if (get_string(s, f[E_KEY], &koff, &klen) < 0)
        return DP_NOMEM;
    if (base64 && b64_inplace(b->arena + koff, klen, &klen) < 0) {
        b->alen = mark;
        *msg = "invalid base64 key";
        return DP_BAD_ENTRY;
    }
    b->alen = koff + klen;
    int64_t db = 0, n;
    if (f[E_DB] && (get_int(s, f[E_DB], &db) < 0 || db < 0 || db > lim->db_max)) {
        *msg = "db must be an integer in [0, db_max]";
        return DP_BAD_ENTRY;
    }
    if (get_int(s, f[E_N], &n) < 0 || n < 1 || n > lim->count_max) {
        *msg = "n must be an integer in [1, count_max]";
        return DP_BAD_ENTRY;
    }
    if (grow((void **)&b->raw, &b->rawcap, b->nraw + 1, sizeof *b->raw) < 0)
        return DP_NOMEM;
    dp_entry *e = &b->raw[b->nraw++];
    e->key_off = koff;
    e->key_len = klen;
    e->db = db;
    e->n = (uint64_t)n;
    e->rank = 0;
    return DP_OK;
}

/* The entries array at s->p (nesting depth `depth`): validated, counted, and its
 * entries collected into b->raw until the first bad one or the limit. */
static int entries_inline(scan *s, int depth, ent_state *st) {
    const dp_limits *lim = s->lim;
    if (depth > lim->max_depth)
        return -1;
    s->b->nraw = 0;
    st->count = 0;
    st->reason = DP_OK;
    st->msg = NULL;
    st->seen = 1;
    s->p++;
    ws(s);
    if (s->p < s->end && *s->p == ']') {
        s->p++;
        return 0;
    }
    for (;;) {
        ws(s);
        if (s->p >= s->end)
            return -1;
        int take = st->reason == DP_OK && ++st->count <= lim->entries_max;
        if (!take && st->reason != DP_OK)
            st->count++;
        if (take && *s->p == '{') {
            const unsigned char *f[E_NN];
            if (members(s, depth + 1, ENT, E_NN, f) < 0)
                return -1;
            int r = entry(s, f, &st->msg);
            if (r == DP_NOMEM) {
                s->nomem = 1;
                return -1;
            }
            st->reason = r;
        } else {
            if (take) {
                st->reason = DP_BAD_ENTRY;
                st->msg = "entry is not a JSON object";
            }
            if (value(s, depth + 1) < 0)
                return -1;
        }
        ws(s);
        if (s->p >= s->end)
            return -1;
        if (*s->p == ',') {
            s->p++;
            continue;
        }
        if (*s->p != ']')
            return -1;
        s->p++;
        return 0;
    }
}

/* Only to find repeated keys within one report: not a sketch hash, no secret needed
 * (a crafted collision costs its sender probes within its own report). */
static uint64_t mix(const char *k, size_t n, int64_t db) {
    uint64_t h = 0x9E3779B97F4A7C15ULL ^ (uint64_t)db * 0xFF51AFD7ED558CCDULL ^ n;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t w;
        memcpy(&w, k + i, 8);
        h = (h ^ w) * 0xBF58476D1CE4E5B9ULL;
        h ^= h >> 31;
    }
    uint64_t w = 0;
    memcpy(&w, k + i, n - i);
    h = (h ^ w) * 0x94D049BB133111EBULL;
    return h ^ (h >> 29);
}

static int slots_for(dp_batch *b, size_t n) {
    size_t want = 16;
    while (want < 2 * n)
        want *= 2;
    if (want > b->nslots) {
        uint32_t *q = realloc(b->slots, want * sizeof *q);
        if (!q)
            return -1;
        b->slots = q;
        b->nslots = want;
    }
    memset(b->slots, 0, want * sizeof *b->slots);
    return 0;
}

static size_t slot_mask(size_t n) {
    size_t want = 16;
    while (want < 2 * n)
        want *= 2;
    return want - 1;
}

/* The intake's step: merge repeated (db, key), cap each sum, group by db. */
static int merge(dp_batch *b, dp_report *out) {
    size_t m = b->nraw;
    out->ent_first = b->nents;
    out->nent = 0;
    out->capped = 0;
    if (m == 0)
        return 0;
    if (grow((void **)&b->ents, &b->ecap, b->nents + m, sizeof *b->ents) < 0)
        return -1;
    dp_entry *dst = b->ents + b->nents;
    if (slots_for(b, m) < 0)
        return -1;
    size_t mask = slot_mask(m), k = 0;
    int one_db = 1;
    for (size_t i = 0; i < m; i++) {
        dp_entry *e = &b->raw[i];
        size_t h = (size_t)mix(b->arena + e->key_off, e->key_len, e->db) & mask;
        for (;;) {
            uint32_t s = b->slots[h];
            if (s == 0) {
                b->slots[h] = (uint32_t)(k + 1);
                dst[k++] = *e;
                break;
            }
            dp_entry *o = &dst[s - 1];
            if (o->db == e->db && o->key_len == e->key_len &&
                memcmp(b->arena + o->key_off, b->arena + e->key_off, e->key_len) == 0) {
                o->n += e->n;
                break;
            }
            h = (h + 1) & mask;
        }
        one_db &= e->db == b->raw[0].db;
    }
    for (size_t j = 0; j < k; j++)
        if (dst[j].n > out->cap) {
            dst[j].n = out->cap;
            out->capped++;
        }
    if (!one_db) { /* rank dbs by first appearance, then a stable counting sort */
        if (slots_for(b, k) < 0)
            return -1;
        size_t dmask = slot_mask(k);
        uint32_t ranks = 0;
        int64_t *dbs = malloc(k * sizeof *dbs);
        size_t *count = calloc(k + 1, sizeof *count);
        if (!dbs || !count) {
            free(dbs);
            free(count);
            return -1;
        }
        for (size_t j = 0; j < k; j++) {
            size_t h = (size_t)mix("", 0, dst[j].db) & dmask;
            for (;;) {
                uint32_t s = b->slots[h];
                if (s == 0) {
                    dbs[ranks] = dst[j].db;
                    b->slots[h] = ++ranks;
                    dst[j].rank = ranks - 1;
                    break;
                }
                if (dbs[s - 1] == dst[j].db) {
                    dst[j].rank = s - 1;
                    break;
                }
                h = (h + 1) & dmask;
            }
            count[dst[j].rank + 1]++;
        }
        for (size_t r = 1; r <= ranks; r++)
            count[r] += count[r - 1];
        /* b->raw is free now: sort through it */
        for (size_t j = 0; j < k; j++)
            b->raw[count[dst[j].rank]++] = dst[j];
        memcpy(dst, b->raw, k * sizeof *dst);
        free(dbs);
        free(count);
    }
    b->nents += k;
    out->nent = k;
    return 0;
}

static int parse_one(dp_batch *b, const dp_limits *lim, const char *data, size_t len,
                     dp_report *out, size_t mark) {
    if (len > lim->max_bytes)
        return reject(out, DP_OVERSIZED, "report larger than the limit");
    const unsigned char *u = (const unsigned char *)data;
    if (!dp_utf8_valid(u, len))
        return reject(out, DP_MALFORMED, "report rejected: not UTF-8");
    scan s = {u, u + len, b, lim, 0};
    const unsigned char *f[T_N];
    ent_state st = {0, DP_OK, NULL, 0};
    b->nraw = 0;
    ws(&s);
    int is_obj = s.p < s.end && *s.p == '{';
    int bad = is_obj ? members_ex(&s, 1, TOP, T_N, f, T_ENTRIES, &st) : value(&s, 1);
    if (bad == 0) {
        ws(&s);
        bad = s.p != s.end; /* extra data after the JSON value */
    }
    if (s.nomem || bad)
        b->alen = mark;
    if (s.nomem)
        return nomem(out);
    if (bad)
        return reject(out, DP_MALFORMED, "report rejected: not JSON by the strict rule");
    if (!is_obj) {
        b->alen = mark;
        return reject(out, DP_MALFORMED, "report is not a JSON object");
    }
    /* v == 1 as Python compares it: 1, 1.0 (any literal equal to it) or true */
    const unsigned char *v = f[T_V];
    double dv;
    if (!(v && (*v == 't' || (get_number(&s, v, &dv) == 0 && dv == 1.0))))
        return reject(out, DP_VERSION, "unsupported demand report version");
    if (!is_word(&s, f[T_TYPE], "demand"))
        return s.nomem ? nomem(out) : reject(out, DP_MALFORMED, "type is not 'demand'");
    if (get_string(&s, f[T_APP], &out->app_off, &out->app_len) < 0) {
        b->alen = mark;
        return s.nomem ? nomem(out) : reject(out, DP_MALFORMED, "app must be a string");
    }
    size_t cps = codepoints(b->arena + out->app_off, out->app_len);
    if (cps == 0 || (int64_t)cps > lim->name_max) {
        b->alen = mark;
        return reject(out, DP_MALFORMED, "app must be a string of 1-name_max characters");
    }
    if (get_int(&s, f[T_SEQ], &out->seq) < 0 || out->seq < 0 || out->seq > lim->seq_max) {
        b->alen = mark;
        return reject(out, DP_MALFORMED, "seq must be an integer in [0, seq_max]");
    }
    if (get_number(&s, f[T_TS], &out->ts) < 0) {
        b->alen = mark;
        return reject(out, DP_MALFORMED, "ts must be a number");
    }
    if (get_int(&s, f[T_INTERVAL], &out->interval_ms) < 0 || out->interval_ms < 1 ||
        out->interval_ms > lim->interval_max) {
        b->alen = mark;
        return reject(out, DP_MALFORMED, "interval_ms must be an integer in [1, max]");
    }
    const unsigned char *ents = f[T_ENTRIES];
    if (!ents || *ents != '[') {
        b->alen = mark;
        return reject(out, DP_MALFORMED, "entries must be an array");
    }
    int64_t count = st.count;
    int reason = st.reason;
    const char *msg = st.msg;
    if (count > lim->entries_max) {
        b->alen = mark;
        return reject(out, DP_TOO_MANY_ENTRIES, "more entries than the limit per report");
    }
    if (reason != DP_OK) {
        b->alen = mark;
        return reject(out, reason, msg);
    }
    uint64_t total = 0;
    for (size_t i = 0; i < b->nraw; i++)
        total += b->raw[i].n;
    out->total = total;
    double interval = (double)out->interval_ms / 1000.0;
    if (interval < lim->interval_min_s)
        interval = lim->interval_min_s;
    if (interval > lim->interval_max_s)
        interval = lim->interval_max_s;
    double cap = lim->max_rate * interval;
    out->cap = cap >= 1.8e19 ? UINT64_MAX : cap < 1.0 ? 1 : (uint64_t)cap;
    if (merge(b, out) < 0) {
        b->alen = mark;
        return nomem(out);
    }
    out->reason = DP_OK;
    return 0;
}

int dp_parse(dp_batch *b, const dp_limits *lim, const char *data, size_t len, dp_report *out) {
    memset(out, 0, sizeof *out);
    size_t mark = b->alen;
    int r = parse_one(b, lim, data, len, out, mark);
    if (out->reason != DP_OK)
        b->alen = mark; /* a rejected report keeps nothing */
    return r;
}
