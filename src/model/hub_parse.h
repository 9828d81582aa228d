/* The Hugging Face hub's answers, parsed without the network (hub.c does
 * the transfers; fuzz/fuzz_hub.c and tests/test_hub_parse.c drive this).
 * Everything here reads bytes an untrusted server (or whoever sits between
 * it and us, or a redirect target) chose, and is strict:
 *
 *  - the revision info (GET /api/models/{repo}/revision/{rev}, JSON): the
 *    commit "sha" must be 40 hex digits; "siblings" an array of objects whose
 *    "rfilename" is a safe relative path (no "..", no absolute path, no
 *    backslash or control character; others are skipped and counted);
 *  - response headers (RFC 9110): numbers (Content-Length, X-Linked-Size)
 *    are decimal digits only, without sign and without overflow;
 *    X-Repo-Commit a commit id; ETag / X-Linked-Etag usable as a file name;
 *    Location followed only when relative to the same host ("/path", not
 *    "//host" or "/\host", which browsers and curl read as another host);
 *  - Content-Range of a resumed download (RFC 9110 14.4, "bytes S-E/T"):
 *    well formed, starting at the offset asked for, ending at the end of the
 *    file, T equal to the size announced, Content-Length equal to E - S + 1.
 * A malformed value is never "close enough": the first one is recorded
 * (pg_hub_headers.bad) and the answer refused. */
#ifndef PAGODA_MODEL_HUB_PARSE_H
#define PAGODA_MODEL_HUB_PARSE_H

#include <stdbool.h>
#include <stddef.h>

#include "base/status.h"

#define PG_HUB_COMMIT_LEN 40 /* a git commit id: 40 hex digits (SHA-1) */

/* True when S is exactly 40 hex digits (either case). */
bool pg_hub_is_commit(const char *s);

/* ETag header value without W/ and quotes; false if nothing remains or it
 * holds '/' or control characters (it becomes a file name). */
bool pg_hub_normalize_etag(const char *value, char *out, size_t cap);

/* True when NAME is a safe relative repo path: no leading '/', no "." or
 * ".." component, no backslash or control character, below 1024 bytes. */
bool pg_hub_safe_filename(const char *name);

/* ---- the revision info */

typedef struct pg_hub_info {
    char commit[PG_HUB_COMMIT_LEN + 1]; /* lower or upper hex, as sent */
    char **files;                       /* [n_files] safe names, in the answer's order */
    int n_files;
    int n_unsafe; /* siblings skipped: unsafe or missing "rfilename" */
} pg_hub_info;

/* Parse the revision info BODY[0..len) (need not be NUL-terminated; at most
 * 64 MiB). Fills OUT (free with pg_hub_info_free, also after an error).
 * Errors: FORMAT ("not JSON", "no commit \"sha\" of 40 hex digits", "no
 * \"siblings\" array", a sibling that is not an object), NOMEM. The message
 * names what is wrong, not the repo (the caller adds it). */
pagoda_status pg_hub_parse_info(const char *body, size_t len, pg_hub_info *out);
void pg_hub_info_free(pg_hub_info *info);

/* The hub's JSON error body {"error": "..."} into OUT (cap > 0; "" when it
 * is not one). Control characters become spaces. */
void pg_hub_parse_error_body(const char *body, size_t len, char *out, size_t cap);

/* ---- headers */

typedef struct pg_hub_headers {
    long status;
    char etag[160];
    char linked_etag[160];
    char repo_commit[64];
    char location[2048];
    char content_range[128];
    char error_code[64];
    char error_message[256];
    long long linked_size, content_length; /* -1: absent */
    char bad[64];                          /* "" or the name of the first malformed header */
} pg_hub_headers;

/* Empty: no status, numbers -1, strings "". */
void pg_hub_headers_reset(pg_hub_headers *h);

/* One header line as libcurl delivers it (LINE[0..n), with its CR LF; no
 * NUL needed). A status line ("HTTP/...") starts a new response (after a
 * redirect): everything is reset and the status taken from it. Names are
 * case-insensitive; a value longer than its field, a number that is not
 * digits or overflows, an X-Repo-Commit that is not 40 hex digits marks the
 * header bad (the first one is kept in h->bad). Unknown headers are ignored. */
void pg_hub_header_line(pg_hub_headers *h, const char *line, size_t n);

/* Decimal digits only (no sign, space or "0x"), at most 18 digits (below
 * 10^18 bytes, so sums of two never overflow int64). False otherwise. */
bool pg_hub_parse_size(const char *s, long long *out);

/* "bytes START-END/TOTAL" (TOTAL "*": unknown, *total = -1). START <= END,
 * END < TOTAL when known; sizes as pg_hub_parse_size. The unsatisfied form
 * "bytes * /TOTAL" (written without the space) is not accepted. */
bool pg_hub_parse_content_range(const char *v, long long *start, long long *end, long long *total);

/* A 206 answer to "Range: bytes=OFFSET-" for a file of SIZE bytes (-1:
 * unknown): Content-Range present and well formed, START == OFFSET, END the
 * file's last byte (END + 1 == TOTAL; TOTAL == SIZE when both are known),
 * Content-Length (when sent) == END - START + 1, no bad header. False with
 * the reason in WHY (cap > 0) otherwise. */
bool pg_hub_check_partial(const pg_hub_headers *h, long long offset, long long size, char *why,
                          size_t cap);

/* True when a redirect's Location may be followed with our Authorization
 * header: a path on the same host ("/..." but not "//..." or "/\..."),
 * printable ASCII without spaces, below 2048 bytes. */
bool pg_hub_relative_location(const char *loc);

/* The answer to HEAD of a file at COMMIT: the etag (X-Linked-Etag, else
 * ETag; normalized) into ETAG[cap], the size (X-Linked-Size, else the
 * Content-Length of a 200; -1 unknown) into *size. False with the reason in
 * WHY when a header is malformed, no usable etag was sent, or X-Repo-Commit
 * names another commit than COMMIT (case-insensitive). */
bool pg_hub_head_result(const pg_hub_headers *h, const char *commit, char *etag, size_t cap,
                        long long *size, char *why, size_t why_cap);

#endif
