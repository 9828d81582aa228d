/* libFuzzer target: the Hugging Face hub client's answer parsers
 * (src/model/hub_parse.c), which read what the hub, a mirror set in
 * HF_ENDPOINT, or anything between them sends. The first input byte picks
 * the input: even, the rest is a revision info body (JSON, also read as an
 * error body); odd, 16 bytes give a resume offset and a file size (int64,
 * little endian; the size's sign bit means unknown) and the rest is a block
 * of header lines (split after each '\n', as libcurl delivers them). The
 * answers are checked against what the parsers promise: every file name
 * kept is safe, a commit kept is 40 hex digits, a partial answer accepted
 * continues the file at the offset to its end, a Location accepted stays on
 * the host (abort otherwise).
 * Seeds: hand-written answers (fuzz/make_seeds.py).
 * Dictionary: fuzz/hub.dict
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fz_util.h"
#include "model/hub_parse.h"

#define C40 "0123456789abcdef0123456789abcdef01234567"

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    fz_init();
    return 0;
}

static void check(bool ok, const char *what) {
    if (!ok) {
        fprintf(stderr, "fuzz_hub: broken promise: %s\n", what);
        abort();
    }
}

static void info(const uint8_t *data, size_t size) {
    pg_hub_info in;
    if (pg_hub_parse_info((const char *)data, size, &in) == PAGODA_OK) {
        check(pg_hub_is_commit(in.commit), "commit of 40 hex digits");
        for (int i = 0; i < in.n_files; i++) {
            const char *f = in.files[i];
            size_t n = strlen(f);
            check(pg_hub_safe_filename(f) && f[0] != '/' && strcmp(f, "..") &&
                      strncmp(f, "../", 3) && !strstr(f, "/../") &&
                      (n < 3 || strcmp(f + n - 3, "/..")) && !strchr(f, '\\'),
                  "safe file names");
        }
    } else {
        check(in.files == NULL && in.n_files == 0, "nothing kept after an error");
    }
    pg_hub_info_free(&in);
    char msg[64];
    pg_hub_parse_error_body((const char *)data, size, msg, sizeof msg);
    for (const char *p = msg; *p; p++)
        check((unsigned char)*p >= 0x20 && *p != 0x7f, "error message without control bytes");
}

static long long le64(const uint8_t *p) {
    unsigned long long v = 0;
    for (int i = 7; i >= 0; i--)
        v = v << 8 | p[i];
    return (long long)(v & 0x7fffffffffffffffull);
}

static void headers(const uint8_t *data, size_t size) {
    if (size < 16) return;
    long long offset = le64(data), file_size = data[15] & 0x80 ? -1 : le64(data + 8);
    offset %= 1ll << 40; /* sizes the way they come: small enough to meet the header's */
    if (file_size >= 0) file_size %= 1ll << 40;
    data += 16;
    size -= 16;
    pg_hub_headers h;
    pg_hub_headers_reset(&h);
    for (size_t i = 0; i < size;) {
        size_t k = i;
        while (k < size && data[k] != '\n')
            k++;
        if (k < size) k++; /* with its '\n' */
        pg_hub_header_line(&h, (const char *)data + i, k - i);
        i = k;
    }
    char why[300], etag[160];
    long long sz = 0, start, end, total;
    if (pg_hub_head_result(&h, C40, etag, sizeof etag, &sz, why, sizeof why)) {
        check(!h.bad[0], "no malformed header in an accepted HEAD");
        check(etag[0] && !strchr(etag, '/') && strcmp(etag, "..") && strcmp(etag, "."),
              "an etag usable as a file name");
        check(sz >= -1, "a size or -1");
    }
    if (pg_hub_check_partial(&h, offset, file_size, why, sizeof why)) {
        check(pg_hub_parse_content_range(h.content_range, &start, &end, &total),
              "an accepted Content-Range parses");
        check(start == offset, "the partial answer starts at the offset");
        check(total < 0 || end + 1 == total, "the partial answer runs to the end");
        check(file_size < 0 || end + 1 == file_size, "the partial answer has the file's size");
        check(h.content_length < 0 || h.content_length == end - start + 1,
              "Content-Length agrees with Content-Range");
    }
    if (pg_hub_relative_location(h.location))
        check(h.location[0] == '/' && h.location[1] != '/' && h.location[1] != '\\' &&
                  !strpbrk(h.location, " \t\r\n"),
              "a Location on the same host");
    if (h.content_range[0] && pg_hub_parse_content_range(h.content_range, &start, &end, &total))
        check(start >= 0 && start <= end && (total < 0 || end < total), "a Content-Range in order");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    if (data[0] & 1)
        headers(data + 1, size - 1);
    else
        info(data + 1, size - 1);
    return 0;
}
