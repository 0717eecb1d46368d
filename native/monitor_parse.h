/* Streaming parser of Redis MONITOR output, with key extraction.
 *
 * MONITOR replies are RESP simple strings, one per executed command:
 *
 *     +<sec>.<usec> [<db> <addr>] "arg" "arg" ...\r\n
 *
 * where every argument is quoted and escaped by Redis' sdscatrepr():
 * backslash and double quote get a backslash, \n \r \t \a \b their C escape,
 * other bytes outside 0x20..0x7e become \xHH. The parser undoes that exactly, so
 * binary keys and keys containing spaces or quotes come back byte for byte.
 *
 * feed() accepts any chunk of the byte stream (lines may be split anywhere) and
 * keeps the partial line between calls. Key positions come from a command table
 * built from the server's COMMAND INFO (Redis 7 key specs, or legacy
 * first/last/step converted to one range spec), so extraction runs in C too.
 *
 * Pure C99, no Python.h: the CPython binding lives in _monitormodule.c.
 */
#ifndef HOTKEYD_MONITOR_PARSE_H
#define HOTKEYD_MONITOR_PARSE_H

#include <stddef.h>
#include <stdint.h>

#define MP_BS_UNKNOWN 0
#define MP_BS_INDEX 1
#define MP_BS_KEYWORD 2

#define MP_FK_UNKNOWN 0
#define MP_FK_RANGE 1
#define MP_FK_KEYNUM 2

/* Commands whose keys no key spec describes fully. */
#define MP_SPECIAL_NONE 0
#define MP_SPECIAL_SORT 1    /* SORT key [BY pat] [LIMIT o c] [GET pat ...] [STORE dest] */
#define MP_SPECIAL_MIGRATE 2 /* MIGRATE host port key|"" db timeout ... [KEYS k ...] */
#define MP_SPECIAL_CONTAINER 3 /* keys depend on the subcommand: look up "name|sub" */

#define MP_MAX_NAME 128

typedef struct {
    int bs_type;       /* MP_BS_* */
    int bs_arg;        /* index: position; keyword: startfrom */
    char *keyword;     /* keyword (owned copy) or NULL */
    size_t keyword_len;
    int fk_type;       /* MP_FK_* */
    int fk_a, fk_b, fk_c; /* range: lastkey, keystep, limit; keynum: keynumidx, firstkey, keystep */
    int write;         /* 1 when the spec writes (RW/OW/RM/insert/update/delete) */
} mp_keyspec;

typedef struct mp_table mp_table;

mp_table *mp_table_new(void);
void mp_table_free(mp_table *t);
/* Add a command (name is lower-cased; "container|sub" for subcommands). Specs are
 * copied. Returns 0, -1 on out of memory, -2 on a name too long. */
int mp_table_add(mp_table *t, const char *name, size_t name_len, int special,
                 const mp_keyspec *specs, int nspecs);
size_t mp_table_size(const mp_table *t);

/* One extracted item: bytes [off, off+len) of the output arena, and a tag.
 * Keys mode: tag = db * 2 + write. Args mode: the args of each line. */
typedef struct {
    size_t off, len;
    uint32_t tag;
} mp_item;

/* One MONITOR line in args mode (or one non-MONITOR reply in both modes). */
typedef struct {
    double ts;
    long db;
    size_t addr_off, addr_len; /* into the arena */
    size_t first_item, nitems;
} mp_line;

typedef struct {
    char *arena; size_t arena_len, arena_cap;
    mp_item *items; size_t nitems, items_cap;
    mp_line *lines; size_t nlines, lines_cap;     /* args mode only */
    mp_item *replies; size_t nreplies, replies_cap; /* "+OK", "-ERR ..." (tag 0/1) */
    uint64_t n_monitor;    /* MONITOR lines parsed */
    uint64_t n_skipped;    /* own or script lines skipped */
    uint64_t n_malformed;  /* unparsable lines */
    uint64_t n_too_long;   /* lines over max_line, dropped */
    uint64_t n_unknown;    /* commands missing from the table */
    double ts_first, ts_last; /* 0 when no MONITOR line */
} mp_out;

void mp_out_init(mp_out *o);
void mp_out_reset(mp_out *o); /* empty, keep capacity */
void mp_out_free(mp_out *o);

typedef struct mp_parser mp_parser;

/* max_line: longest line kept (bytes); longer lines are dropped and counted. */
mp_parser *mp_parser_new(size_t max_line);
void mp_parser_free(mp_parser *p);
/* The table is borrowed: it must outlive its use by the parser. NULL = no keys. */
void mp_parser_set_table(mp_parser *p, const mp_table *t);
/* Lines whose address equals one of these are skipped (the tap's own clients).
 * Copies the strings. Returns 0 or -1 on out of memory. */
int mp_parser_set_skip(mp_parser *p, const char *const *addrs, const size_t *lens, size_t n);
/* Skip lines run by scripts ("[db lua]"): their EVAL/FCALL was counted already. */
void mp_parser_set_skip_scripts(mp_parser *p, int skip);
size_t mp_parser_pending(const mp_parser *p);

#define MP_MODE_KEYS 0
#define MP_MODE_ARGS 1
/* Parse a chunk; results are appended to out. Returns 0, or -1 on out of memory. */
int mp_feed(mp_parser *p, const char *data, size_t len, int mode, mp_out *out);

/* Key extraction on already-split args (tests, and the args -> keys path).
 * Appends one item per key to out (tag = write flag). Returns 0 or -1. */
int mp_extract(const mp_table *t, const char *const *argv, const size_t *argl, int argc,
               mp_out *out, uint32_t tag_base);

#endif
