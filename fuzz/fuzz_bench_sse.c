/* libFuzzer target: the `pagoda bench serve` client's Server-Sent Events
 * parser (src/bench/bench_sse.c), which reads whatever the server under
 * test sends. The first input byte gives a chunk size (1..256), the rest is
 * the stream. It is parsed twice, whole and in chunks of that size (as
 * libcurl may split it anywhere, also inside a CRLF), each event's data also
 * read as the client reads it (pg_bench_event_parse); the parser promises
 * that any split gives the same events, so the two event lists must be equal
 * (abort otherwise). Seeds: hand-written streams (scripts/fuzz.sh).
 * Dictionary: fuzz/sse.dict
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fz_util.h"
#include "bench/bench_client.h"
#include "bench/bench_sse.h"

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    fz_init();
    return 0;
}

typedef struct events {
    char *buf;
    size_t len, cap;
    size_t n;
    size_t text_bytes; /* of the events' texts as the client reads them */
} events;

static bool on_event(void *ctx, const char *data, size_t len) {
    events *e = ctx;
    if (data[len] != 0) { /* promised: NUL-terminated (the data may hold NULs too) */
        fprintf(stderr, "sse: event of %zu bytes is not NUL-terminated\n", len);
        abort();
    }
    size_t need = e->len + len + 1;
    if (need > e->cap) {
        size_t cap = need * 2;
        char *b = realloc(e->buf, cap);
        if (!b) abort();
        e->buf = b;
        e->cap = cap;
    }
    for (int chat = 0; chat < 2; chat++) {
        pg_bench_event ev;
        if (pg_bench_event_parse(data, len, chat, &ev) == PAGODA_OK) {
            if (ev.text) e->text_bytes += strlen(ev.text);
            pg_bench_event_free(&ev);
        }
    }
    memcpy(e->buf + e->len, data, len);
    e->buf[e->len + len] = '\x1e'; /* record separator: events stay apart */
    e->len = need;
    e->n++;
    return e->n < 100000;
}

static pagoda_status parse(const char *s, size_t n, size_t chunk, events *e) {
    pg_sse_parser p;
    pg_sse_init(&p);
    p.max_bytes = 1 << 16; /* reach the size limit with small inputs */
    pagoda_status st = PAGODA_OK;
    for (size_t off = 0; off < n && !st; off += chunk)
        st = pg_sse_feed(&p, s + off, n - off < chunk ? n - off : chunk, on_event, e);
    if (!st) st = pg_sse_finish(&p, on_event, e);
    pg_sse_free(&p);
    return st;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    size_t chunk = (size_t)data[0] + 1;
    const char *s = (const char *)data + 1;
    size_t n = size - 1;
    events whole = {0}, split = {0};
    pagoda_status a = parse(s, n, n ? n : 1, &whole);
    pagoda_status b = parse(s, n, chunk, &split);
    bool same = whole.len == split.len && (!whole.len || !memcmp(whole.buf, split.buf, whole.len));
    if (a != b || (!a && !same)) {
        fprintf(stderr, "sse: chunks of %zu bytes change the events (status %d vs %d)\n", chunk,
                (int)a, (int)b);
        abort();
    }
    free(whole.buf);
    free(split.buf);
    return 0;
}
