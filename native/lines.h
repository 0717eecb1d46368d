/* Newline-delimited key batches fed straight into a sketch (no Python objects). */
#ifndef HOTKEYD_LINES_H
#define HOTKEYD_LINES_H

#include <stddef.h>
#include <stdint.h>

#include "sketch.h"

typedef struct {
    uint64_t events; /* sum of counts added */
    uint64_t oversized; /* lines whose key is longer than max_key_len */
    uint64_t malformed; /* counted lines without a tab or with a bad count */
} sk_lines_result;

/* Lines end with '\n' ('\r\n' accepted); empty lines are skipped; a final line
 * without '\n' counts. counted: "key<TAB>count", split at the LAST tab, count is
 * ASCII decimal in [0, 2^32-1]. */
/* agg: the caller's scratch (sk_agg, 128 KiB; see sketch.h). */
void sk_feed_lines(sk_sketch *s, sk_agg *agg, const unsigned char *buf, size_t len, int counted,
                   sk_lines_result *out);

#endif
