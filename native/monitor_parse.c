/* Streaming MONITOR parser and key extraction; see monitor_parse.h. */
#include "monitor_parse.h"

#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------ table */

typedef struct {
    char *name;
    size_t name_len;
    int special;
    mp_keyspec *specs;
    int nspecs;
} mp_cmd;

struct mp_table {
    mp_cmd *cmds;
    size_t n, cap;
    uint32_t *slots; /* index+1 into cmds, 0 = empty */
    size_t nslots;   /* power of two */
};

static uint32_t fnv1a(const char *s, size_t n) {
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < n; i++) {
        h ^= (unsigned char)s[i];
        h *= 16777619u;
    }
    return h;
}

static inline char lower(char c) { return (c >= 'A' && c <= 'Z') ? (char)(c + 32) : c; }

static int ieq(const char *a, size_t al, const char *b, size_t bl) {
    if (al != bl) return 0;
    for (size_t i = 0; i < al; i++)
        if (lower(a[i]) != lower(b[i])) return 0;
    return 1;
}

mp_table *mp_table_new(void) { return (mp_table *)calloc(1, sizeof(mp_table)); }

static void cmd_free(mp_cmd *c) {
    for (int i = 0; i < c->nspecs; i++) free(c->specs[i].keyword);
    free(c->specs);
    free(c->name);
}

void mp_table_free(mp_table *t) {
    if (!t) return;
    for (size_t i = 0; i < t->n; i++) cmd_free(&t->cmds[i]);
    free(t->cmds);
    free(t->slots);
    free(t);
}

size_t mp_table_size(const mp_table *t) { return t ? t->n : 0; }

static const mp_cmd *table_find(const mp_table *t, const char *lname, size_t n) {
    if (!t || !t->nslots) return NULL;
    size_t mask = t->nslots - 1, i = fnv1a(lname, n) & mask;
    while (t->slots[i]) {
        const mp_cmd *c = &t->cmds[t->slots[i] - 1];
        if (c->name_len == n && memcmp(c->name, lname, n) == 0) return c;
        i = (i + 1) & mask;
    }
    return NULL;
}

static int table_rehash(mp_table *t, size_t nslots) {
    uint32_t *s = (uint32_t *)calloc(nslots, sizeof(uint32_t));
    if (!s) return -1;
    free(t->slots);
    t->slots = s;
    t->nslots = nslots;
    for (size_t k = 0; k < t->n; k++) {
        size_t i = fnv1a(t->cmds[k].name, t->cmds[k].name_len) & (nslots - 1);
        while (s[i]) i = (i + 1) & (nslots - 1);
        s[i] = (uint32_t)(k + 1);
    }
    return 0;
}

int mp_table_add(mp_table *t, const char *name, size_t name_len, int special,
                 const mp_keyspec *specs, int nspecs) {
    if (name_len == 0 || name_len >= MP_MAX_NAME) return -2;
    char lname[MP_MAX_NAME];
    for (size_t i = 0; i < name_len; i++) lname[i] = lower(name[i]);
    mp_cmd c;
    memset(&c, 0, sizeof c);
    c.name = (char *)malloc(name_len);
    c.specs = nspecs > 0 ? (mp_keyspec *)calloc((size_t)nspecs, sizeof(mp_keyspec)) : NULL;
    if (!c.name || (nspecs > 0 && !c.specs)) goto oom;
    memcpy(c.name, lname, name_len);
    c.name_len = name_len;
    c.special = special;
    for (int i = 0; i < nspecs; i++) {
        c.specs[i] = specs[i];
        c.specs[i].keyword = NULL;
        c.nspecs = i + 1;
        if (specs[i].keyword && specs[i].keyword_len) {
            c.specs[i].keyword = (char *)malloc(specs[i].keyword_len);
            if (!c.specs[i].keyword) goto oom;
            memcpy(c.specs[i].keyword, specs[i].keyword, specs[i].keyword_len);
        } else {
            c.specs[i].keyword_len = 0;
        }
    }
    c.nspecs = nspecs > 0 ? nspecs : 0;
    /* replace an existing entry of that name */
    const mp_cmd *old = table_find(t, lname, name_len);
    if (old) {
        mp_cmd *o = &t->cmds[old - t->cmds];
        cmd_free(o);
        *o = c;
        return 0;
    }
    if (t->n == t->cap) {
        size_t cap = t->cap ? t->cap * 2 : 256;
        mp_cmd *nc = (mp_cmd *)realloc(t->cmds, cap * sizeof(mp_cmd));
        if (!nc) goto oom;
        t->cmds = nc;
        t->cap = cap;
    }
    t->cmds[t->n++] = c;
    if (t->n * 2 > t->nslots) {
        size_t ns = t->nslots ? t->nslots : 512;
        while (t->n * 2 > ns) ns *= 2;
        if (table_rehash(t, ns) < 0) { t->n--; goto oom; }
    } else {
        size_t mask = t->nslots - 1, i = fnv1a(lname, name_len) & mask;
        while (t->slots[i]) i = (i + 1) & mask;
        t->slots[i] = (uint32_t)t->n;
    }
    return 0;
oom:
    cmd_free(&c);
    return -1;
}

/* ------------------------------------------------------------------ output */

void mp_out_init(mp_out *o) { memset(o, 0, sizeof *o); }

/* Buffers keep their capacity between feeds (no realloc per chunk), except a capacity
 * above MP_KEEP bytes, which only a rare large line needs: it is released once that line
 * is done, so three 50 MB SETs do not pin 150 MB for the life of the tap. */
#define MP_KEEP ((size_t)1 << 20)

static void release_big(void **buf, size_t *cap, size_t elem) {
    if (*cap * elem > MP_KEEP) {
        free(*buf);
        *buf = NULL;
        *cap = 0;
    }
}

void mp_out_reset(mp_out *o) {
    release_big((void **)&o->arena, &o->arena_cap, 1);
    release_big((void **)&o->items, &o->items_cap, sizeof(mp_item));
    release_big((void **)&o->lines, &o->lines_cap, sizeof(mp_line));
    release_big((void **)&o->replies, &o->replies_cap, sizeof(mp_item));
    o->arena_len = o->nitems = o->nlines = o->nreplies = 0;
    o->n_monitor = o->n_skipped = o->n_malformed = o->n_too_long = o->n_unknown = 0;
    o->ts_first = o->ts_last = 0.0;
}

void mp_out_free(mp_out *o) {
    free(o->arena);
    free(o->items);
    free(o->lines);
    free(o->replies);
    memset(o, 0, sizeof *o);
}

static int grow(void **buf, size_t *cap, size_t need, size_t elem) {
    if (need <= *cap) return 0;
    size_t nc = *cap ? *cap : 64;
    while (nc < need) nc *= 2;
    void *nb = realloc(*buf, nc * elem);
    if (!nb) return -1;
    *buf = nb;
    *cap = nc;
    return 0;
}

static int arena_put(mp_out *o, const char *s, size_t n, size_t *off) {
    if (grow((void **)&o->arena, &o->arena_cap, o->arena_len + n + 1, 1) < 0) return -1;
    if (n) memcpy(o->arena + o->arena_len, s, n);
    *off = o->arena_len;
    o->arena_len += n;
    return 0;
}

static int item_put(mp_out *o, const char *s, size_t n, uint32_t tag) {
    size_t off;
    if (arena_put(o, s, n, &off) < 0) return -1;
    if (grow((void **)&o->items, &o->items_cap, o->nitems + 1, sizeof(mp_item)) < 0) return -1;
    o->items[o->nitems].off = off;
    o->items[o->nitems].len = n;
    o->items[o->nitems].tag = tag;
    o->nitems++;
    return 0;
}

static int reply_put(mp_out *o, const char *s, size_t n, uint32_t tag) {
    size_t off;
    if (arena_put(o, s, n, &off) < 0) return -1;
    if (grow((void **)&o->replies, &o->replies_cap, o->nreplies + 1, sizeof(mp_item)) < 0) return -1;
    o->replies[o->nreplies].off = off;
    o->replies[o->nreplies].len = n;
    o->replies[o->nreplies].tag = tag;
    o->nreplies++;
    return 0;
}

/* ------------------------------------------------------------------ keys */

/* Parse a non-negative decimal integer; -1 when not one. */
static long long parse_count(const char *s, size_t n) {
    if (n == 0 || n > 18) return -1;
    long long v = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9') return -1;
        v = v * 10 + (s[i] - '0');
    }
    return v;
}

#define EMIT(i, w) \
    do { if (item_put(out, argv[i], argl[i], tag_base | (uint32_t)(w)) < 0) return -1; } while (0)

static int extract_spec(const mp_keyspec *s, const char *const *argv, const size_t *argl, int argc,
                        mp_out *out, uint32_t tag_base) {
    long long first = 0, last, step;
    if (s->bs_type == MP_BS_INDEX) {
        first = s->bs_arg;
    } else if (s->bs_type == MP_BS_KEYWORD) {
        int start = s->bs_arg > 0 ? s->bs_arg : argc + s->bs_arg;
        int end = s->bs_arg > 0 ? argc - 1 : 0;
        for (int i = start; i != end; i = start <= end ? i + 1 : i - 1) {
            if (i >= argc || i < 1) break;
            if (ieq(argv[i], argl[i], s->keyword, s->keyword_len)) { first = i + 1; break; }
        }
        if (!first) return 0;
    } else {
        return 0;
    }
    if (first < 1) return 0;
    if (s->fk_type == MP_FK_RANGE) {
        if (s->fk_a >= 0) last = first + s->fk_a;
        else if (s->fk_c <= 0) last = argc + s->fk_a;
        else last = first + ((argc - first) / s->fk_c + s->fk_a);
        step = s->fk_b;
    } else if (s->fk_type == MP_FK_KEYNUM) {
        long long ni = first + s->fk_a;
        if (ni < 0 || ni >= argc) return 0;
        long long nk = parse_count(argv[ni], argl[ni]);
        if (nk < 0) return 0;
        if (nk > argc) nk = argc; /* no more keys than args; avoids overflow */
        first += s->fk_b;
        step = s->fk_c;
        if (step < 1) return 0;
        last = first + (nk - 1) * step;
    } else {
        return 0;
    }
    if (step < 1) return 0;
    for (long long i = first; i <= last; i += step) {
        if (i >= argc) break;
        EMIT(i, s->write);
    }
    return 0;
}

static int extract_sort(const char *const *argv, const size_t *argl, int argc, mp_out *out,
                        uint32_t tag_base) {
    if (argc < 2) return 0;
    EMIT(1, 0);
    int store = -1;
    for (int i = 2; i < argc; i++) {
        if (ieq(argv[i], argl[i], "store", 5) && i + 1 < argc) { store = i + 1; i++; }
        else if ((ieq(argv[i], argl[i], "by", 2) || ieq(argv[i], argl[i], "get", 3))) i++;
        else if (ieq(argv[i], argl[i], "limit", 5)) i += 2;
    }
    if (store > 0) EMIT(store, 1);
    return 0;
}

static int extract_migrate(const char *const *argv, const size_t *argl, int argc, mp_out *out,
                           uint32_t tag_base) {
    if (argc < 6) return 0;
    if (argl[3] > 0) { EMIT(3, 1); return 0; }
    for (int i = 6; i < argc; i++) {
        if (ieq(argv[i], argl[i], "auth", 4)) i += 1;
        else if (ieq(argv[i], argl[i], "auth2", 5)) i += 2;
        else if (ieq(argv[i], argl[i], "keys", 4)) {
            for (int k = i + 1; k < argc; k++) EMIT(k, 1);
            break;
        }
    }
    return 0;
}

/* Returns 0, -1 on OOM, 1 when the command is not in the table. */
static int extract(const mp_table *t, const char *const *argv, const size_t *argl, int argc,
                   mp_out *out, uint32_t tag_base) {
    if (argc < 1 || !t) return 0;
    char lname[MP_MAX_NAME];
    size_t n = argl[0];
    if (n == 0 || n >= MP_MAX_NAME) return 1;
    for (size_t i = 0; i < n; i++) lname[i] = lower(argv[0][i]);
    const mp_cmd *c = table_find(t, lname, n);
    if (!c) return 1;
    if (c->special == MP_SPECIAL_CONTAINER) {
        if (argc < 2) return 0;
        size_t total = n + 1 + argl[1];
        if (total >= MP_MAX_NAME) return 0;
        lname[n] = '|';
        for (size_t i = n + 1; i < total && i < MP_MAX_NAME; i++) lname[i] = lower(argv[1][i - n - 1]);
        const mp_cmd *sub = table_find(t, lname, total);
        if (!sub) return 0;
        c = sub;
    }
    if (c->special == MP_SPECIAL_SORT) return extract_sort(argv, argl, argc, out, tag_base);
    if (c->special == MP_SPECIAL_MIGRATE) return extract_migrate(argv, argl, argc, out, tag_base);
    for (int i = 0; i < c->nspecs; i++)
        if (extract_spec(&c->specs[i], argv, argl, argc, out, tag_base) < 0) return -1;
    return 0;
}

int mp_extract(const mp_table *t, const char *const *argv, const size_t *argl, int argc,
               mp_out *out, uint32_t tag_base) {
    int r = extract(t, argv, argl, argc, out, tag_base);
    return r < 0 ? -1 : 0;
}

/* ------------------------------------------------------------------ parser */

struct mp_parser {
    size_t max_line;
    const mp_table *table;
    char **skip; size_t *skip_len; size_t nskip;
    int skip_scripts;
    char *partial; size_t partial_len, partial_cap;
    int dropping; /* inside an over-long line: discard until its end */
    char *scratch; size_t scratch_cap; /* decoded args */
    const char **argv; size_t *argl; size_t args_cap;
};

mp_parser *mp_parser_new(size_t max_line) {
    mp_parser *p = (mp_parser *)calloc(1, sizeof(mp_parser));
    if (!p) return NULL;
    p->max_line = max_line ? max_line : (64u << 20);
    p->skip_scripts = 1;
    return p;
}

static void skip_free(mp_parser *p) {
    for (size_t i = 0; i < p->nskip; i++) free(p->skip[i]);
    free(p->skip);
    free(p->skip_len);
    p->skip = NULL;
    p->skip_len = NULL;
    p->nskip = 0;
}

void mp_parser_free(mp_parser *p) {
    if (!p) return;
    skip_free(p);
    free(p->partial);
    free(p->scratch);
    free(p->argv);
    free(p->argl);
    free(p);
}

void mp_parser_set_table(mp_parser *p, const mp_table *t) { p->table = t; }
void mp_parser_set_skip_scripts(mp_parser *p, int skip) { p->skip_scripts = skip; }
size_t mp_parser_pending(const mp_parser *p) { return p->partial_len; }

int mp_parser_set_skip(mp_parser *p, const char *const *addrs, const size_t *lens, size_t n) {
    skip_free(p);
    if (!n) return 0;
    p->skip = (char **)calloc(n, sizeof(char *));
    p->skip_len = (size_t *)calloc(n, sizeof(size_t));
    if (!p->skip || !p->skip_len) { skip_free(p); return -1; }
    for (size_t i = 0; i < n; i++) {
        p->skip[i] = (char *)malloc(lens[i] ? lens[i] : 1);
        if (!p->skip[i]) { p->nskip = i; skip_free(p); return -1; }
        memcpy(p->skip[i], addrs[i], lens[i]);
        p->skip_len[i] = lens[i];
        p->nskip = i + 1;
    }
    return 0;
}

static int hexval(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* Parse "<sec>.<usec>"; returns the position after it, or NULL. */
static const char *parse_ts(const char *s, const char *end, double *ts) {
    long long sec = 0, frac = 0, scale = 1;
    const char *q = s;
    while (q < end && *q >= '0' && *q <= '9' && q - s < 18) sec = sec * 10 + (*q++ - '0');
    if (q == s || q >= end || *q != '.') return NULL;
    const char *f = ++q;
    while (q < end && *q >= '0' && *q <= '9' && q - f < 9) { frac = frac * 10 + (*q++ - '0'); scale *= 10; }
    if (q == f) return NULL;
    *ts = (double)sec + (double)frac / (double)scale;
    return q;
}

/* Parse one line (without \r\n). Returns 0 ok, -1 OOM. */
static int parse_line(mp_parser *p, const char *s, size_t n, int mode, mp_out *out) {
    const char *end = s + n;
    if (n == 0) { out->n_malformed++; return 0; }
    if (s[0] == '-') return reply_put(out, s, n, 1);
    if (s[0] != '+') { out->n_malformed++; return 0; }
    double ts;
    const char *q = parse_ts(s + 1, end, &ts);
    if (!q) return reply_put(out, s, n, 0); /* "+OK", "+RESET": a status reply */
    if (end - q < 4 || q[0] != ' ' || q[1] != '[') { out->n_malformed++; return 0; }
    q += 2;
    long db = 0;
    const char *d = q;
    while (q < end && *q >= '0' && *q <= '9' && q - d < 9) db = db * 10 + (*q++ - '0');
    if (q == d || q >= end || *q != ' ') { out->n_malformed++; return 0; }
    const char *addr = ++q;
    /* the address ends at the first "] \"" (IPv6 addresses contain ']') */
    const char *ae = NULL;
    for (const char *r = q; r + 2 < end; r++) {
        r = (const char *)memchr(r, ']', (size_t)(end - r - 2));
        if (!r) break;
        if (r[1] == ' ' && r[2] == '"') { ae = r; break; }
    }
    if (!ae) { out->n_malformed++; return 0; }
    size_t addr_len = (size_t)(ae - addr);
    q = ae + 2;
    /* decode args into scratch */
    if (grow((void **)&p->scratch, &p->scratch_cap, n + 1, 1) < 0) return -1;
    char *w = p->scratch;
    size_t argc = 0;
    while (q < end) {
        if (*q != '"') { out->n_malformed++; return 0; }
        q++;
        if (argc == p->args_cap) {
            size_t cap = p->args_cap ? p->args_cap * 2 : 16;
            const char **na = (const char **)realloc((void *)p->argv, cap * sizeof(char *));
            if (!na) return -1;
            p->argv = na;
            size_t *nl = (size_t *)realloc(p->argl, cap * sizeof(size_t));
            if (!nl) return -1;
            p->argl = nl;
            p->args_cap = cap;
        }
        char *a = w;
        for (;;) {
            /* copy the run of plain bytes */
            const char *r = q;
            while (r < end && *r != '"' && *r != '\\') r++;
            memcpy(w, q, (size_t)(r - q));
            w += r - q;
            q = r;
            if (q >= end) { out->n_malformed++; return 0; }
            if (*q == '"') { q++; break; }
            /* backslash escape */
            if (q + 1 >= end) { out->n_malformed++; return 0; }
            char e = q[1];
            q += 2;
            switch (e) {
            case 'n': *w++ = '\n'; break;
            case 'r': *w++ = '\r'; break;
            case 't': *w++ = '\t'; break;
            case 'a': *w++ = '\a'; break;
            case 'b': *w++ = '\b'; break;
            case 'x':
                if (q + 1 < end && hexval(q[0]) >= 0 && hexval(q[1]) >= 0) {
                    *w++ = (char)(hexval(q[0]) * 16 + hexval(q[1]));
                    q += 2;
                } else {
                    *w++ = 'x';
                }
                break;
            default: *w++ = e; break;
            }
        }
        p->argv[argc] = a;
        p->argl[argc] = (size_t)(w - a);
        argc++;
        if (q < end) {
            if (*q != ' ' || q + 1 >= end) { out->n_malformed++; return 0; }
            q++;
        }
    }
    if (argc == 0) { out->n_malformed++; return 0; }
    out->n_monitor++;
    if (out->ts_first == 0.0) out->ts_first = ts;
    if (ts > out->ts_last) out->ts_last = ts;
    int skip = 0;
    if (p->skip_scripts && addr_len == 3 && memcmp(addr, "lua", 3) == 0) skip = 1;
    for (size_t i = 0; !skip && i < p->nskip; i++)
        if (p->skip_len[i] == addr_len && memcmp(p->skip[i], addr, addr_len) == 0) skip = 1;
    if (mode == MP_MODE_ARGS) {
        if (grow((void **)&out->lines, &out->lines_cap, out->nlines + 1, sizeof(mp_line)) < 0) return -1;
        mp_line *L = &out->lines[out->nlines];
        L->ts = ts;
        L->db = db;
        if (arena_put(out, addr, addr_len, &L->addr_off) < 0) return -1;
        L->addr_len = addr_len;
        L->first_item = out->nitems;
        for (size_t i = 0; i < argc; i++)
            if (item_put(out, p->argv[i], p->argl[i], 0) < 0) return -1;
        L->nitems = argc;
        out->nlines++;
        return 0;
    }
    if (skip) { out->n_skipped++; return 0; }
    int r = extract(p->table, p->argv, p->argl, (int)argc, out, (uint32_t)db * 2u);
    if (r < 0) return -1;
    if (r == 1) out->n_unknown++;
    return 0;
}

static void release_line_buffers(mp_parser *p) {
    release_big((void **)&p->partial, &p->partial_cap, 1);
    release_big((void **)&p->scratch, &p->scratch_cap, 1);
    if (p->args_cap * (sizeof(char *) + sizeof(size_t)) > MP_KEEP) {
        free((void *)p->argv);
        free(p->argl);
        p->argv = NULL;
        p->argl = NULL;
        p->args_cap = 0;
    }
}

static int partial_put(mp_parser *p, const char *s, size_t n, mp_out *out) {
    if (p->dropping) return 0;
    if (p->partial_len + n > p->max_line) {
        p->dropping = 1;
        p->partial_len = 0;
        release_line_buffers(p);
        out->n_too_long++;
        return 0;
    }
    if (grow((void **)&p->partial, &p->partial_cap, p->partial_len + n, 1) < 0) return -1;
    memcpy(p->partial + p->partial_len, s, n);
    p->partial_len += n;
    return 0;
}

static int finish_line(mp_parser *p, const char *s, size_t n, int mode, mp_out *out) {
    if (n && s[n - 1] == '\r') n--;
    if (n > p->max_line) { out->n_too_long++; return 0; }
    int r = parse_line(p, s, n, mode, out);
    if (p->scratch_cap > MP_KEEP || p->args_cap * sizeof(char *) > MP_KEEP) {
        if (s != p->partial) release_line_buffers(p); /* partial: freed by the caller */
    }
    return r;
}

int mp_feed(mp_parser *p, const char *data, size_t len, int mode, mp_out *out) {
    const char *s = data, *end = data + len;
    while (s < end) {
        const char *nl = (const char *)memchr(s, '\n', (size_t)(end - s));
        if (!nl) return partial_put(p, s, (size_t)(end - s), out);
        if (p->dropping) {
            p->dropping = 0;
        } else if (p->partial_len) {
            if (partial_put(p, s, (size_t)(nl - s), out) < 0) return -1;
            if (p->dropping) {
                p->dropping = 0;
            } else {
                int r = finish_line(p, p->partial, p->partial_len, mode, out);
                p->partial_len = 0;
                release_line_buffers(p);
                if (r < 0) return -1;
            }
        } else {
            if (finish_line(p, s, (size_t)(nl - s), mode, out) < 0) return -1;
        }
        s = nl + 1;
    }
    return 0;
}
