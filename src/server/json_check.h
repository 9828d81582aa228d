/* Strict JSON text validation (RFC 8259) for request bodies, run before
 * cJSON, which is lenient: it drops bad \u escapes, accepts lone surrogates,
 * raw control characters in strings, invalid UTF-8, numbers such as 01, 1.,
 * .5 or +1, and ignores garbage after the value.
 *
 * What pg_json_check accepts is exactly RFC 8259's grammar:
 * - one value with optional whitespace (space, tab, LF, CR) around it;
 * - numbers  -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
 * - strings: no raw U+0000..U+001F; escapes \" \\ \/ \b \f \n \r \t \uXXXX;
 *   a \uD800-\uDBFF escape must be followed by a \uDC00-\uDFFF escape and a
 *   low surrogate may not stand alone; raw bytes must be well-formed UTF-8
 *   (RFC 3629: no overlong forms, no UTF-16 surrogates, nothing above
 *   U+10FFFF, no truncated sequences);
 * - literals true / false / null; arrays and objects nested at most
 *   `max_depth` levels (a bare scalar is depth 0, `[1]` depth 1).
 * Reference: RFC 8259 sections 2-8, RFC 3629 section 4 (UTF-8 syntax), and
 * the y_/n_ case families of Nicolas Seriot's JSONTestSuite. */
#ifndef PAGODA_SERVER_JSON_CHECK_H
#define PAGODA_SERVER_JSON_CHECK_H

#include <stdbool.h>
#include <stddef.h>

#include "base/status.h"

#define PG_JSON_MAX_DEPTH 128 /* default nesting limit for request bodies */

typedef struct pg_json_check_result {
    size_t offset;     /* byte offset of the first problem (error only) */
    char message[128]; /* what is wrong there, e.g. "lone surrogate \\ud800" */
    /* U+0000 is valid JSON (as \u0000) but C strings cannot hold it: the
     * first string holding one is reported so callers can reject it. */
    bool has_nul;
    size_t nul_offset;   /* byte offset of that string's opening quote */
    char nul_member[64]; /* name of the top-level object member whose key or
                            value holds it ("" when the top value is not an
                            object) */
} pg_json_check_result;

/* Validate text[0..len) (need not be NUL-terminated). PAGODA_OK when it is
 * one well-formed JSON value; else PAGODA_ERR_FORMAT with res->offset and
 * res->message set (and pg_error "json: <message> at byte <offset>").
 * max_depth <= 0 means PG_JSON_MAX_DEPTH. Never reads past len. */
pagoda_status pg_json_check(const char *text, size_t len, int max_depth, pg_json_check_result *res);

/* For text that passed pg_json_check with an object at the top: the raw
 * text of the value of the FIRST member whose (unescaped) name is `name`
 * (the one cJSON_GetObjectItem finds). *val points into text, *vlen bytes.
 * Returns false when there is no such member (or the top is not an object). */
bool pg_json_member_raw(const char *text, size_t len, const char *name, const char **val,
                        size_t *vlen);

/* Parse the raw text of a JSON number as an exact int64: an integer literal
 * (no fraction or exponent) in [INT64_MIN, INT64_MAX], or a fraction /
 * exponent form whose value is an integer of magnitude <= 2^53 (e.g. 42.0,
 * 1e3). Returns false for anything else (non-integers, out of range, not a
 * number). */
bool pg_json_parse_int64(const char *raw, size_t len, long long *out);

#endif
