/* Growable byte strings (see strbuf.h). */
#include "base/strbuf.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

bool pg_strbuf_add(pg_strbuf *b, const char *s, size_t n) {
    if (b->oom) return false;
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 64;
        while (cap < b->len + n + 1)
            cap *= 2;
        size_t off = s && b->p && s >= b->p && s < b->p + b->cap ? (size_t)(s - b->p) : SIZE_MAX;
        char *q = realloc(b->p, cap);
        if (!q) {
            b->oom = true;
            return false;
        }
        if (off != SIZE_MAX) s = q + off; /* appending a piece of itself */
        b->p = q;
        b->cap = cap;
    }
    if (n) memmove(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = 0;
    return true;
}

bool pg_strbuf_puts(pg_strbuf *b, const char *s) {
    return pg_strbuf_add(b, s, strlen(s));
}

void pg_strbuf_consume(pg_strbuf *b, size_t n) {
    if (!b->p) return;
    memmove(b->p, b->p + n, b->len - n);
    b->len -= n;
    b->p[b->len] = 0;
}

const char *pg_strbuf_cstr(const pg_strbuf *b) {
    return b->p ? b->p : "";
}

void pg_strbuf_free(pg_strbuf *b) {
    free(b->p);
    *b = (pg_strbuf){0};
}
