/* Incremental parser for a Server-Sent Events stream (the body of an
 * OpenAI-compatible `stream: true` response), fed bytes as they arrive:
 * chunks may be split at any byte, also inside a CRLF.
 *
 * Follows the WHATWG HTML "server-sent events" parsing rules: lines end in
 * CRLF, LF or CR; a line starting with ':' is a comment; "field: value"
 * (one optional space after the colon); `data` lines are joined with '\n';
 * a blank line dispatches the event. Other fields (event, id, retry) are
 * ignored. At end of stream, pending data is dispatched too (lenient, like
 * vLLM's client, for servers that omit the final blank line).
 * `data: [DONE]` is an ordinary event here; the caller recognises it. */
#ifndef PAGODA_SERVER_BENCH_SSE_H
#define PAGODA_SERVER_BENCH_SSE_H

#include <stdbool.h>
#include <stddef.h>

#include "base/status.h"

/* Called once per event with its data (NUL-terminated, `len` bytes, no
 * trailing newline). Returns false to stop parsing (pg_sse_feed then returns
 * PAGODA_OK without consuming the rest of that buffer). */
typedef bool (*pg_sse_event_fn)(void *ctx, const char *data, size_t len);

typedef struct pg_sse_parser {
    char *line; /* current line, without terminator */
    size_t line_len, line_cap;
    char *data; /* data of the current event ("a\nb\n"...) */
    size_t data_len, data_cap;
    bool has_data;    /* a data field was seen since the last dispatch */
    bool skip_lf;     /* previous byte was CR: an LF right after it is part of it */
    bool stopped;     /* the callback asked to stop */
    size_t max_bytes; /* line/event size limit (default 16 MiB) */
} pg_sse_parser;

void pg_sse_init(pg_sse_parser *p);
void pg_sse_free(pg_sse_parser *p);

/* Feed `n` bytes. Errors: PAGODA_ERR_LIMIT when a line or event exceeds
 * max_bytes, PAGODA_ERR_NOMEM. */
pagoda_status pg_sse_feed(pg_sse_parser *p, const char *buf, size_t n, pg_sse_event_fn fn,
                          void *ctx);

/* End of stream: process an unterminated last line and dispatch pending data. */
pagoda_status pg_sse_finish(pg_sse_parser *p, pg_sse_event_fn fn, void *ctx);

#endif
