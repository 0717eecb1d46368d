/* Line parser for the update_lines fast path: one pass, no allocation; repeated keys are
 * pre-aggregated (sk_agg) and applied as weighted updates. */
#include "lines.h"

#include <string.h>

void sk_feed_lines(sk_sketch *s, sk_agg *agg, const unsigned char *buf, size_t len, int counted,
                   sk_lines_result *out) {
    const unsigned char *p = buf, *end = buf + len;
    const size_t maxlen = s->max_key_len;
    sk_agg_init(agg);
    while (p < end) {
        const unsigned char *nl = (const unsigned char *)memchr(p, '\n', (size_t)(end - p));
        const unsigned char *le = nl ? nl : end;
        size_t n = (size_t)(le - p);
        uint32_t count = 1;
        if (n && p[n - 1] == '\r')
            n--;
        if (n) {
            int ok = 1;
            if (counted) {
                const unsigned char *t = p + n;
                uint64_t v = 0;
                while (t > p && t[-1] != '\t')
                    t--;
                if (t == p || t == p + n) {
                    ok = 0;
                } else {
                    const unsigned char *d;
                    for (d = t; d < p + n; d++) {
                        if (*d < '0' || *d > '9') {
                            ok = 0;
                            break;
                        }
                        v = v * 10 + (uint64_t)(*d - '0');
                        if (v > SK_COUNT_MAX) {
                            ok = 0;
                            break;
                        }
                    }
                }
                if (!ok) {
                    out->malformed++;
                } else {
                    count = (uint32_t)v;
                    n = (size_t)(t - 1 - p);
                }
            }
            if (ok) {
                if (n > maxlen) {
                    out->oversized++;
                } else {
                    out->events += count;
                    sk_agg_add(s, agg, p, n, count);
                }
            }
        }
        p = nl ? nl + 1 : end;
    }
    sk_agg_flush(s, agg);
}
