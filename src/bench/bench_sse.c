/* Incremental SSE parser: see bench_sse.h (WHATWG event-stream rules). */
#include "bench/bench_sse.h"

#include <stdlib.h>
#include <string.h>

void pg_sse_init(pg_sse_parser *p) {
    memset(p, 0, sizeof *p);
    p->max_bytes = (size_t)16 << 20;
}

void pg_sse_free(pg_sse_parser *p) {
    free(p->line);
    free(p->data);
    memset(p, 0, sizeof *p);
}

static pagoda_status grow(char **buf, size_t *cap, size_t need, size_t limit) {
    if (need <= *cap) return PAGODA_OK;
    if (need > limit)
        return pg_error(PAGODA_ERR_LIMIT, "SSE: line or event longer than %zu bytes", limit);
    size_t c = *cap ? *cap : 256;
    while (c < need)
        c *= 2;
    char *b = realloc(*buf, c);
    if (!b) return pg_error(PAGODA_ERR_NOMEM, "SSE: no memory for %zu bytes", c);
    *buf = b;
    *cap = c;
    return PAGODA_OK;
}

static pagoda_status dispatch(pg_sse_parser *p, pg_sse_event_fn fn, void *ctx) {
    if (!p->has_data) return PAGODA_OK;
    size_t len = p->data_len;
    if (len && p->data[len - 1] == '\n') len--; /* drop the last data line's '\n' */
    pagoda_status st = grow(&p->data, &p->data_cap, len + 1, p->max_bytes + 1);
    if (st != PAGODA_OK) return st;
    p->data[len] = 0;
    p->has_data = false;
    p->data_len = 0;
    if (!fn(ctx, p->data, len)) p->stopped = true;
    return PAGODA_OK;
}

/* One complete line (p->line, p->line_len). */
static pagoda_status process_line(pg_sse_parser *p, pg_sse_event_fn fn, void *ctx) {
    const char *l = p->line;
    size_t n = p->line_len;
    p->line_len = 0;
    if (n == 0) return dispatch(p, fn, ctx);
    if (l[0] == ':') return PAGODA_OK; /* comment (keep-alive ping) */
    const char *colon = memchr(l, ':', n);
    size_t flen = colon ? (size_t)(colon - l) : n;
    const char *val = colon ? colon + 1 : l + n;
    size_t vlen = colon ? n - flen - 1 : 0;
    if (vlen && *val == ' ') {
        val++;
        vlen--;
    }
    if (flen == 4 && !memcmp(l, "data", 4)) {
        if (p->data_len + vlen + 1 > p->max_bytes)
            return pg_error(PAGODA_ERR_LIMIT, "SSE: line or event longer than %zu bytes",
                            p->max_bytes);
        pagoda_status st = grow(&p->data, &p->data_cap, p->data_len + vlen + 2, p->max_bytes + 2);
        if (st != PAGODA_OK) return st;
        memcpy(p->data + p->data_len, val, vlen);
        p->data_len += vlen;
        p->data[p->data_len++] = '\n';
        p->has_data = true;
    }
    return PAGODA_OK;
}

pagoda_status pg_sse_feed(pg_sse_parser *p, const char *buf, size_t n, pg_sse_event_fn fn,
                          void *ctx) {
    for (size_t i = 0; i < n && !p->stopped; i++) {
        char c = buf[i];
        if (p->skip_lf) {
            p->skip_lf = false;
            if (c == '\n') continue;
        }
        if (c == '\r' || c == '\n') {
            p->skip_lf = c == '\r';
            pagoda_status st = process_line(p, fn, ctx);
            if (st != PAGODA_OK) return st;
            continue;
        }
        if (p->line_len >= p->max_bytes)
            return pg_error(PAGODA_ERR_LIMIT, "SSE: line or event longer than %zu bytes",
                            p->max_bytes);
        if (p->line_len + 1 > p->line_cap) {
            pagoda_status st = grow(&p->line, &p->line_cap, p->line_len + 1, p->max_bytes);
            if (st != PAGODA_OK) return st;
        }
        p->line[p->line_len++] = c;
    }
    return PAGODA_OK;
}

pagoda_status pg_sse_finish(pg_sse_parser *p, pg_sse_event_fn fn, void *ctx) {
    if (p->stopped) return PAGODA_OK;
    if (p->line_len) {
        pagoda_status st = process_line(p, fn, ctx);
        if (st != PAGODA_OK) return st;
    }
    if (p->stopped) return PAGODA_OK;
    return dispatch(p, fn, ctx);
}
