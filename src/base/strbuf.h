/* A growable byte string, always NUL-terminated (so it can be printed or
 * searched as a C string when it holds no NUL byte). Out of memory is
 * sticky: after a failed growth every append is a no-op and `oom` stays
 * set, so a builder can append freely and check once at the end. */
#ifndef PAGODA_BASE_STRBUF_H
#define PAGODA_BASE_STRBUF_H

#include <stdbool.h>
#include <stddef.h>

typedef struct pg_strbuf {
    char *p; /* NULL until the first append */
    size_t len, cap;
    bool oom;
} pg_strbuf;

/* Append s[0..n) (s may point into b itself). False when out of memory. */
bool pg_strbuf_add(pg_strbuf *b, const char *s, size_t n);
/* Append a NUL-terminated string. */
bool pg_strbuf_puts(pg_strbuf *b, const char *s);
/* Drop the first n bytes (n <= len). */
void pg_strbuf_consume(pg_strbuf *b, size_t n);
/* The text ("" before the first append). */
const char *pg_strbuf_cstr(const pg_strbuf *b);
void pg_strbuf_free(pg_strbuf *b);

#endif
