/* Batched parser of demand reports (hotkeyd.protocol.demand, wire version 1).
 *
 * One call parses one raw report (JSON bytes, the reporter MAC already checked by the
 * caller) by exactly the rules of the Python decoder (DemandReport.loads on top of
 * hotkeyd.protocol.strictjson), so the daemon can take thousands of reports per call:
 *
 *   - the document: valid UTF-8 throughout, JSON with the whitespace " \t\n\r" only,
 *     integers in the signed 64-bit range (at most 20 characters), finite numbers, no
 *     NaN/Infinity, nesting at most max_depth deep, and duplicate names resolved as
 *     Python's json does (the last one wins);
 *   - the report: v == 1 (as Python compares: 1, 1.0 or true), type "demand", app a
 *     string of 1..name_max code points, seq an integer in [0, seq_max], ts a number,
 *     interval_ms an integer in [1, interval_max], entries an array of at most
 *     entries_max objects, each with a string key (enc absent, null, "utf-8" or
 *     "base64" as Python's b64decode(validate=True) reads it), db in [0, db_max]
 *     (default 0) and n in [1, count_max];
 *   - then the intake's own step: a (db, key) listed twice is one key whose counts add
 *     up, and each key's sum is capped at cap; the entries come back grouped by db,
 *     dbs and keys in the order they first appear.
 *
 * Strings from \u escapes keep lone surrogates as Python's "surrogatepass" encodes them
 * (3 bytes), as the Python decoder's key.encode("utf-8", "surrogatepass") does.
 *
 * Pure C99, no Python.h: the CPython binding lives in _demandmodule.c.
 */
#ifndef HOTKEYD_DEMAND_PARSE_H
#define HOTKEYD_DEMAND_PARSE_H

#include <stddef.h>
#include <stdint.h>

/* Reasons (hotkeyd_demand_reports_dropped_total labels, see DemandError.reason). */
#define DP_OK 0
#define DP_OVERSIZED 1
#define DP_MALFORMED 2
#define DP_VERSION 3
#define DP_TOO_MANY_ENTRIES 4
#define DP_BAD_ENTRY 5
#define DP_NOMEM 6

typedef struct {
    size_t max_bytes;
    int64_t entries_max;
    int64_t seq_max;
    int64_t name_max; /* code points of app */
    int64_t interval_max;
    int64_t db_max;
    int64_t count_max;
    int max_depth;
    double max_rate; /* reads/s of one key; cap = max(1, int(max_rate * clamp(interval))) */
    double interval_min_s, interval_max_s; /* the clamp of interval_ms / 1000 */
} dp_limits;

typedef struct {
    size_t key_off, key_len; /* key bytes at arena + key_off */
    int64_t db;
    uint64_t n; /* summed, then capped */
    uint32_t rank; /* order of first appearance of db (grouping) */
} dp_entry;

typedef struct {
    int reason; /* DP_* */
    const char *msg; /* static text for a rejected report */
    size_t app_off, app_len; /* UTF-8 (surrogatepass) bytes of app at arena + app_off */
    int64_t seq;
    double ts;
    int64_t interval_ms;
    uint64_t total; /* sum of n over the entries as sent (the budget's measure) */
    size_t ent_first, nent; /* the merged entries, grouped by db, in b->ents */
    uint64_t capped; /* keys whose sum was above the cap */
    uint64_t cap;
} dp_report;

typedef struct {
    char *arena; /* decoded strings of every report parsed since the last reset */
    size_t alen, acap;
    dp_entry *ents; /* merged entries of every report since the last reset */
    size_t nents, ecap;
    /* scratch of one report */
    dp_entry *raw;
    size_t nraw, rawcap;
    uint32_t *slots; /* open addressing over raw entries (index + 1, 0 empty) */
    size_t nslots;
    char *num; /* NUL-terminated copy of a float literal for strtod */
    size_t numcap;
} dp_batch;

void dp_batch_init(dp_batch *b);
void dp_batch_reset(dp_batch *b); /* forget the reports parsed, keep the memory */
void dp_batch_free(dp_batch *b);

/* Parse one report; fills *out (reason DP_OK or why it is rejected). Returns -1 only
 * when memory ran out (out->reason DP_NOMEM), else 0. */
int dp_parse(dp_batch *b, const dp_limits *lim, const char *data, size_t len, dp_report *out);

/* 1 when data[0..len) is UTF-8 as Python's strict decoder accepts it. */
int dp_utf8_valid(const unsigned char *s, size_t len);

#endif
