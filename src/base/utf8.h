/* UTF-8 through utf8proc, the project's Unicode library. */
#ifndef PAGODA_BASE_UTF8_H
#define PAGODA_BASE_UTF8_H

#include <stddef.h>
#include <utf8proc.h>

/* Length of the well-formed UTF-8 sequence at s[0..n) (RFC 3629: no
 * overlongs, surrogates or code points above U+10FFFF), 0 if s[0] starts
 * none or n cuts it off. */
static inline size_t pg_utf8_seq_len(const void *s, size_t n) {
    utf8proc_int32_t cp;
    utf8proc_ssize_t k = utf8proc_iterate((const utf8proc_uint8_t *)s, (utf8proc_ssize_t)n, &cp);
    return k > 0 ? (size_t)k : 0;
}

#endif
