/* The hub answer parsers (model/hub_parse.h): revision info JSON, header
 * lines, sizes, Content-Range and the resume checks, redirect targets,
 * the HEAD result. Every malformed form is refused; fuzz/fuzz_hub.c drives
 * the same functions with random bytes. */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/hub_parse.h"
#include "testutil.h"

#define C40 "0123456789abcdef0123456789abcdef01234567"

static void feed(pg_hub_headers *h, const char *line) {
    pg_hub_header_line(h, line, strlen(line));
}

static void test_commit_ids(void **state) {
    (void)state;
    assert_true(pg_hub_is_commit(C40));
    assert_true(pg_hub_is_commit("0123456789ABCDEF0123456789ABCDEF01234567"));
    assert_false(pg_hub_is_commit(C40 "8"));                                   /* 41 */
    assert_false(pg_hub_is_commit("0123456789abcdef0123456789abcdef0123456")); /* 39 */
    assert_false(pg_hub_is_commit("0123456789abcdef0123456789abcdef0123456g"));
    assert_false(pg_hub_is_commit("../../../../../../../../../../etc/passwdx"));
    assert_false(pg_hub_is_commit(""));
    assert_false(pg_hub_is_commit(NULL));
}

static void test_info_ok(void **state) {
    (void)state;
    const char *body = "{\"sha\":\"" C40 "\",\"siblings\":[{\"rfilename\":\"config.json\"},"
                       "{\"rfilename\":\"sub/model.gguf\"},{\"rfilename\":\"../evil\"},"
                       "{\"rfilename\":\"/etc/passwd\"},{\"rfilename\":\"a/./b\"},"
                       "{\"rfilename\":\"a\\\\b\"},{\"rfilename\":7},{\"size\":3}]}";
    pg_hub_info info;
    assert_int_equal(pg_hub_parse_info(body, strlen(body), &info), PAGODA_OK);
    assert_string_equal(info.commit, C40);
    assert_int_equal(info.n_files, 2);
    assert_string_equal(info.files[0], "config.json");
    assert_string_equal(info.files[1], "sub/model.gguf");
    assert_int_equal(info.n_unsafe, 6);
    pg_hub_info_free(&info);
    assert_null(info.files);
    /* not NUL-terminated: only len bytes are read */
    char buf[128];
    int n = snprintf(buf, sizeof buf, "{\"sha\":\"%s\",\"siblings\":[]}", C40);
    buf[n] = 'x';
    assert_int_equal(pg_hub_parse_info(buf, (size_t)n, &info), PAGODA_OK);
    assert_int_equal(info.n_files, 0);
    pg_hub_info_free(&info);
}

static void test_info_bad(void **state) {
    (void)state;
    static const struct {
        const char *body, *msg;
    } cases[] = {
        {"", "not a JSON object"},
        {"[1]", "not a JSON object"},
        {"{\"sha\":\"" C40 "\",\"siblings\":[", "not a JSON object"},
        {"{\"siblings\":[]}", "40 hex"},
        {"{\"sha\":\"abc\",\"siblings\":[]}", "40 hex"},
        {"{\"sha\":\"../../x/0123456789abcdef0123456789abcdef\",\"siblings\":[]}", "40 hex"},
        {"{\"sha\":1,\"siblings\":[]}", "40 hex"},
        {"{\"sha\":\"" C40 "\"}", "\"siblings\" array"},
        {"{\"sha\":\"" C40 "\",\"siblings\":{}}", "\"siblings\" array"},
        {"{\"sha\":\"" C40 "\",\"siblings\":[{\"rfilename\":\"a\"},\"b\"]}", "siblings[1]"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        pg_hub_info info;
        pagoda_status s = pg_hub_parse_info(cases[i].body, strlen(cases[i].body), &info);
        if (s != PAGODA_ERR_FORMAT || !strstr(pg_last_error(), cases[i].msg))
            fail_msg("case %zu (%s): status %d, '%s'", i, cases[i].body, (int)s, pg_last_error());
        assert_null(info.files);
        assert_int_equal(info.n_files, 0);
    }
    pg_hub_info info;
    assert_int_equal(pg_hub_parse_info(NULL, 0, &info), PAGODA_ERR_FORMAT);
}

static void test_error_body(void **state) {
    (void)state;
    char out[16];
    const char *b = "{\"error\":\"Repo\\nnot found, really not\"}";
    pg_hub_parse_error_body(b, strlen(b), out, sizeof out);
    assert_string_equal(out, "Repo not found,"); /* control characters blanked, truncated */
    pg_hub_parse_error_body("<html>", 6, out, sizeof out);
    assert_string_equal(out, "");
    pg_hub_parse_error_body(NULL, 0, out, sizeof out);
    assert_string_equal(out, "");
}

static void test_sizes(void **state) {
    (void)state;
    long long v = 0;
    assert_true(pg_hub_parse_size("0", &v));
    assert_int_equal(v, 0);
    assert_true(pg_hub_parse_size("999999999999999999", &v)); /* 18 digits */
    assert_true(v == 999999999999999999LL);
    static const char *const bad[] = {"",
                                      "-1",
                                      "+1",
                                      " 1",
                                      "1 ",
                                      "0x10",
                                      "1e3",
                                      "1.",
                                      "a",
                                      "9223372036854775808",
                                      "1000000000000000000"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        if (pg_hub_parse_size(bad[i], &v)) fail_msg("'%s' accepted", bad[i]);
}

static void test_header_lines(void **state) {
    (void)state;
    pg_hub_headers h;
    pg_hub_headers_reset(&h);
    assert_true(h.content_length == -1 && h.linked_size == -1);
    feed(&h, "HTTP/1.1 302 Found\r\n");
    assert_int_equal(h.status, 302);
    feed(&h, "X-Linked-Etag: \"" C40 "\"\r\n");
    feed(&h, "x-linked-size: 1234\r\n");
    feed(&h, "Location: /api/x\r\n");
    feed(&h, "X-Repo-Commit: " C40 "\r\n");
    feed(&h, "X-Unknown: whatever\r\n");
    assert_string_equal(h.linked_etag, "\"" C40 "\"");
    assert_true(h.linked_size == 1234);
    assert_string_equal(h.location, "/api/x");
    assert_string_equal(h.repo_commit, C40);
    assert_string_equal(h.bad, "");
    /* a second response (redirect followed) resets everything */
    feed(&h, "HTTP/2 206\r\n");
    assert_int_equal(h.status, 206);
    assert_string_equal(h.location, "");
    assert_true(h.linked_size == -1);
    feed(&h, "Content-Range: bytes 10-19/20\r\n");
    feed(&h, "Content-Length: 10\r\n");
    assert_string_equal(h.content_range, "bytes 10-19/20");
    assert_true(h.content_length == 10);
    assert_string_equal(h.bad, "");
    /* malformed values: the first is named */
    static const struct {
        const char *line, *bad;
    } cases[] = {
        {"Content-Length: -5\r\n", "content-length"},
        {"Content-Length: 12abc\r\n", "content-length"},
        {"Content-Length: 99999999999999999999999\r\n", "content-length"},
        {"Content-Length:\r\n", "content-length"},
        {"X-Linked-Size: 0x10\r\n", "x-linked-size"},
        {"X-Repo-Commit: main\r\n", "x-repo-commit"},
        {"X-Repo-Commit: " C40 "0\r\n", "x-repo-commit"},
        {"ETag: \"a\x01b\"\r\n", "etag"},
        {"HTTP/1.1 2x0 OK\r\n", "status line"},
        {"HTTP/1.1\r\n", "status line"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        pg_hub_headers_reset(&h);
        feed(&h, cases[i].line);
        feed(&h, "Content-Length: -7\r\n"); /* a second bad one does not replace the first */
        if (strcmp(h.bad, cases[i].bad)) fail_msg("case %zu: bad '%s'", i, h.bad);
    }
    /* a value longer than its field */
    char line[4200];
    memset(line, 'a', sizeof line);
    memcpy(line, "Location: /", 11);
    pg_hub_headers_reset(&h);
    pg_hub_header_line(&h, line, sizeof line);
    assert_string_equal(h.bad, "location");
    assert_string_equal(h.location, "");
    /* shorter than the name, or no NUL after the line: nothing read past n */
    pg_hub_headers_reset(&h);
    pg_hub_header_line(&h, "ETa", 3);
    pg_hub_header_line(&h, "etag: abcdef", 8); /* "etag: ab" */
    assert_string_equal(h.etag, "ab");
}

static void test_content_range(void **state) {
    (void)state;
    long long a, b, t;
    assert_true(pg_hub_parse_content_range("bytes 0-0/1", &a, &b, &t));
    assert_true(a == 0 && b == 0 && t == 1);
    assert_true(pg_hub_parse_content_range("bytes 100-199/*", &a, &b, &t));
    assert_true(a == 100 && b == 199 && t == -1);
    assert_true(pg_hub_parse_content_range("Bytes 5-9/10", &a, &b, &t));
    static const char *const bad[] = {"",
                                      "bytes",
                                      "bytes 1-2",
                                      "bytes 2-1/10",
                                      "bytes 0-10/10",
                                      "bytes -1/2",
                                      "bytes 0-/10",
                                      "bytes */10",
                                      "bytes 0-1/",
                                      "bytes 0-1/10 ",
                                      "items 0-1/2",
                                      "bytes 0-1/1x",
                                      "bytes 0 -1/2",
                                      "bytes 0-1/-2",
                                      "bytes 0-1/99999999999999999999",
                                      "bytes 1000000000000000000-1000000000000000001/*"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        if (pg_hub_parse_content_range(bad[i], &a, &b, &t)) fail_msg("'%s' accepted", bad[i]);
}

static void partial(pg_hub_headers *h, const char *range, long long content_length) {
    pg_hub_headers_reset(h);
    h->status = 206;
    snprintf(h->content_range, sizeof h->content_range, "%s", range);
    h->content_length = content_length;
}

static void test_resume_checks(void **state) {
    (void)state;
    pg_hub_headers h;
    char why[300];
    partial(&h, "bytes 100-999/1000", 900);
    assert_true(pg_hub_check_partial(&h, 100, 1000, why, sizeof why));
    assert_true(pg_hub_check_partial(&h, 100, -1, why, sizeof why)); /* size unknown */
    partial(&h, "bytes 100-999/*", -1);
    assert_true(pg_hub_check_partial(&h, 100, 1000, why, sizeof why));
    static const struct {
        const char *range;
        long long cl, offset, size;
        const char *msg;
    } cases[] = {
        {"", 900, 100, 1000, "without Content-Range"},
        {"bytes 100-999", 900, 100, 1000, "malformed Content-Range"},
        {"bytes 0-999/1000", 1000, 100, 1000, "does not start at byte 100"},
        {"bytes 200-999/1000", 800, 100, 1000, "does not start at byte 100"},
        {"bytes 100-500/1000", 401, 100, 1000, "stops before the end"},
        {"bytes 100-1999/2000", 1900, 100, 1000, "disagrees with the file size 1000"},
        {"bytes 100-1999/*", 1900, 100, 1000, "disagrees with the file size 1000"},
        {"bytes 100-999/1000", 899, 100, 1000, "Content-Length 899"},
        {"bytes 100-999/1000", 5000000000LL, 100, -1, "Content-Length 5000000000"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        partial(&h, cases[i].range, cases[i].cl);
        why[0] = 0;
        if (pg_hub_check_partial(&h, cases[i].offset, cases[i].size, why, sizeof why) ||
            !strstr(why, cases[i].msg))
            fail_msg("case %zu (%s): '%s'", i, cases[i].range, why);
    }
    partial(&h, "bytes 100-999/1000", 900);
    snprintf(h.bad, sizeof h.bad, "content-length");
    assert_false(pg_hub_check_partial(&h, 100, 1000, why, sizeof why));
    assert_non_null(strstr(why, "malformed content-length header"));
}

static void test_locations(void **state) {
    (void)state;
    assert_true(pg_hub_relative_location("/org/name/resolve/main/x"));
    assert_true(pg_hub_relative_location("/a?b=c%20d"));
    static const char *const bad[] = {"",
                                      "//evil.example/x",
                                      "/\\evil.example/x",
                                      "https://cdn.example/x",
                                      "x/y",
                                      "/a b",
                                      "/a\tb",
                                      "/a\x7f",
                                      "/a\xc3\xa9",
                                      NULL};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        if (pg_hub_relative_location(bad[i])) fail_msg("case %zu accepted", i);
    char long_loc[2100];
    memset(long_loc, 'a', sizeof long_loc - 1);
    long_loc[0] = '/';
    long_loc[sizeof long_loc - 1] = 0;
    assert_false(pg_hub_relative_location(long_loc));
}

static void test_head_result(void **state) {
    (void)state;
    pg_hub_headers h;
    char etag[160], why[300];
    long long size = 0;
    pg_hub_headers_reset(&h);
    feed(&h, "HTTP/1.1 200 OK\r\n");
    feed(&h, "ETag: W/\"" C40 "\"\r\n");
    feed(&h, "Content-Length: 42\r\n");
    feed(&h, "X-Repo-Commit: " C40 "\r\n");
    assert_true(pg_hub_head_result(&h, C40, etag, sizeof etag, &size, why, sizeof why));
    assert_string_equal(etag, C40);
    assert_true(size == 42);
    /* case-insensitive commit comparison */
    assert_true(pg_hub_head_result(&h, "0123456789ABCDEF0123456789ABCDEF01234567", etag,
                                   sizeof etag, &size, why, sizeof why));
    /* another commit */
    assert_false(pg_hub_head_result(&h, "1123456789abcdef0123456789abcdef01234567", etag,
                                    sizeof etag, &size, why, sizeof why));
    assert_non_null(strstr(why, "answered for commit"));
    /* LFS: X-Linked-* win; a 302's Content-Length is not the file's */
    pg_hub_headers_reset(&h);
    feed(&h, "HTTP/1.1 302 Found\r\n");
    feed(&h, "ETag: \"small\"\r\n");
    feed(&h, "Content-Length: 7\r\n");
    assert_true(pg_hub_head_result(&h, C40, etag, sizeof etag, &size, why, sizeof why));
    assert_true(size == -1);
    feed(&h, "X-Linked-Etag: \"" C40 C40 "\"\r\n");
    feed(&h, "X-Linked-Size: 5000000000\r\n");
    assert_true(pg_hub_head_result(&h, C40, etag, sizeof etag, &size, why, sizeof why));
    assert_string_equal(etag, C40 C40);
    assert_true(size == 5000000000LL);
    /* no etag; an etag that would escape blobs/; a malformed size */
    pg_hub_headers_reset(&h);
    feed(&h, "HTTP/1.1 200 OK\r\n");
    assert_false(pg_hub_head_result(&h, C40, etag, sizeof etag, &size, why, sizeof why));
    assert_non_null(strstr(why, "no usable ETag"));
    feed(&h, "ETag: \"../../x\"\r\n");
    assert_false(pg_hub_head_result(&h, C40, etag, sizeof etag, &size, why, sizeof why));
    feed(&h, "ETag: \"ok\"\r\n");
    feed(&h, "Content-Length: 1-2\r\n");
    assert_false(pg_hub_head_result(&h, C40, etag, sizeof etag, &size, why, sizeof why));
    assert_non_null(strstr(why, "malformed content-length"));
}

static void test_names(void **state) {
    (void)state;
    char e[64];
    assert_true(pg_hub_normalize_etag("\"abc123\"", e, sizeof e));
    assert_string_equal(e, "abc123");
    assert_false(pg_hub_normalize_etag("\"a\x7f\"", e, sizeof e));
    assert_true(pg_hub_safe_filename("a/b.c"));
    assert_true(pg_hub_safe_filename("..a/b..")); /* dots inside names are fine */
    static const char *const bad[] = {"",     "/a", "a/../b", "..",    "a/..", "./a",
                                      "a//b", "a/", "a\\b",   "a\x7f", "a\nb", NULL};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        if (pg_hub_safe_filename(bad[i])) fail_msg("case %zu accepted", i);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_commit_ids),    cmocka_unit_test(test_info_ok),
        cmocka_unit_test(test_info_bad),      cmocka_unit_test(test_error_body),
        cmocka_unit_test(test_sizes),         cmocka_unit_test(test_header_lines),
        cmocka_unit_test(test_content_range), cmocka_unit_test(test_resume_checks),
        cmocka_unit_test(test_locations),     cmocka_unit_test(test_head_result),
        cmocka_unit_test(test_names),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
