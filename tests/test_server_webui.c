/* The web chat page of `pagoda serve` (src/server/webui.c, the assets
 * embedded by cmake/embed_webui.cmake): every asset is served byte for byte
 * as the file in src/server/webui/ with its Content-Type, the strict
 * Content-Security-Policy and the caching headers; a matching If-None-Match
 * gets 304; HEAD has no body; other methods get 405; the page needs no API
 * key (the API still does); with disable_webui (`--no-webui`) nothing of it
 * is served. Static checks of the files themselves: no inline script or
 * event-handler attribute, no external URL, and every asset index.html
 * refers to is served. The server runs in this process on stories260K
 * with an ephemeral port; the clients are raw sockets (HTTP/1.1,
 * Connection: close). */
#define _GNU_SOURCE
#include "testutil.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include "pagoda.h"
#include "server/server.h"
#include "server/webui.h"

static pagoda_engine *g_engine;
static pg_server *g_srv; /* the running server, stopped even if a test fails */

/* Every asset and the type it must be sent with, by file name. */
static const struct {
    const char *file, *path, *type;
} EXPECTED[] = {
    {"index.html", "/", "text/html; charset=utf-8"},
    {"app.js", "/webui/app.js", "text/javascript; charset=utf-8"},
    {"markdown.js", "/webui/markdown.js", "text/javascript; charset=utf-8"},
    {"style.css", "/webui/style.css", "text/css; charset=utf-8"},
    {"favicon.svg", "/webui/favicon.svg", "image/svg+xml"},
};
#define N_EXPECTED (sizeof EXPECTED / sizeof EXPECTED[0])

static int setup(void **state) {
    (void)state;
    pagoda_engine_options o;
    pagoda_engine_options_default(&o);
    o.kv_cache_memory = 16u << 20;
    o.num_threads = 1;
    if (pagoda_engine_create(pg_test_asset("llm/stories260K-hf"), &o, &g_engine) != PAGODA_OK) {
        fprintf(stderr, "engine: %s\n", pagoda_last_error());
        return -1;
    }
    return 0;
}

static int teardown(void **state) {
    (void)state;
    pagoda_engine_free(g_engine);
    return 0;
}

static int cleanup(void **state) {
    (void)state;
    if (g_srv) pg_server_stop(g_srv);
    g_srv = NULL;
    return 0;
}

static int start(pg_server_options *so) {
    so->port = 0;
    if (pg_server_start(g_engine, so, &g_srv) != PAGODA_OK) fail_msg("%s", pagoda_last_error());
    return pg_server_port(g_srv);
}

/* A parsed reply. */
typedef struct reply {
    int status;
    char *raw;        /* the whole reply, NUL-terminated */
    const char *body; /* after the blank line */
    size_t body_len;
} reply;

/* One request on a fresh connection; `extra` is more header lines (each
 * ending in \r\n) or NULL. Fails the test if no complete reply comes
 * within 60 s (only a hung server takes that long). */
static reply request(int port, const char *method, const char *path, const char *extra) {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    assert_true(fd >= 0);
    struct sockaddr_in a = {0};
    a.sin_family = AF_INET;
    a.sin_port = htons((uint16_t)port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, (struct sockaddr *)&a, sizeof a)) fail_msg("connect: %s", strerror(errno));
    char head[1024];
    int n = snprintf(head, sizeof head,
                     "%s %s HTTP/1.1\r\nHost: t\r\nConnection: close\r\n%s%s\r\n", method, path,
                     extra ? extra : "", strcmp(method, "POST") ? "" : "Content-Length: 0\r\n");
    assert_true(send(fd, head, (size_t)n, MSG_NOSIGNAL) == n);
    size_t cap = 1 << 20, len = 0;
    char *buf = calloc(1, cap + 1);
    assert_non_null(buf);
    for (;;) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, 60000) <= 0) fail_msg("%s %s: no reply within 60 s", method, path);
        ssize_t k = recv(fd, buf + len, cap - len, 0);
        if (k <= 0) break;
        len += (size_t)k;
        assert_true(len < cap);
    }
    close(fd);
    reply r = {.raw = buf, .status = -1};
    if (sscanf(buf, "HTTP/1.1 %d", &r.status) != 1) fail_msg("no status line: %.200s", buf);
    const char *end = strstr(buf, "\r\n\r\n");
    assert_non_null(end);
    r.body = end + 4;
    r.body_len = len - (size_t)(r.body - buf);
    return r;
}

/* The value of header `name` (case-insensitive) in a malloc'ed string, or NULL. */
static char *header(const reply *r, const char *name) {
    size_t n = strlen(name);
    for (const char *p = strstr(r->raw, "\r\n"); p && p < r->body; p = strstr(p + 2, "\r\n")) {
        const char *l = p + 2;
        if (!strncasecmp(l, name, n) && l[n] == ':') {
            l += n + 1;
            while (*l == ' ')
                l++;
            const char *e = strstr(l, "\r\n");
            return strndup(l, (size_t)(e - l));
        }
    }
    return NULL;
}

static void expect_header(const reply *r, const char *name, const char *want) {
    char *v = header(r, name);
    if (!v) fail_msg("%s: missing", name);
    if (strcmp(v, want)) fail_msg("%s: '%s', want '%s'", name, v, want);
    free(v);
}

static char *source_file(const char *name, size_t *len) {
    const char *src = getenv("PAGODA_SOURCE_DIR");
    char path[4096];
    snprintf(path, sizeof path, "%s/src/server/webui/%s", src && *src ? src : "..", name);
    char *b = pg_test_read_file(path, len);
    if (!b) fail_msg("cannot read %s", path);
    return b;
}

/* Every asset: 200, its type, the same bytes as the source file, the
 * security and caching headers; then 304 for its ETag, and HEAD. */
static void test_assets_served_with_headers(void **state) {
    (void)state;
    pg_server_options so = {0};
    int port = start(&so);
    assert_int_equal(pg_webui_n_assets, N_EXPECTED);
    for (size_t i = 0; i < N_EXPECTED; i++) {
        reply r = request(port, "GET", EXPECTED[i].path, NULL);
        if (r.status != 200) fail_msg("GET %s: %d", EXPECTED[i].path, r.status);
        expect_header(&r, "Content-Type", EXPECTED[i].type);
        expect_header(&r, "Content-Security-Policy", PG_WEBUI_CSP);
        expect_header(&r, "X-Content-Type-Options", "nosniff");
        expect_header(&r, "X-Frame-Options", "DENY");
        expect_header(&r, "Referrer-Policy", "no-referrer");
        expect_header(&r, "Cache-Control", "no-cache");
        size_t flen = 0;
        char *file = source_file(EXPECTED[i].file, &flen);
        assert_int_equal(r.body_len, flen);
        assert_memory_equal(r.body, file, flen);
        free(file);
        char *etag = header(&r, "ETag");
        assert_non_null(etag);
        assert_true(strlen(etag) == 18 && etag[0] == '"' && etag[17] == '"');
        free(r.raw);

        /* revalidation: the same ETag (also weak, also in a list) -> 304, no body */
        const char *forms[] = {"%s", "W/%s", "\"0000000000000000\", %s"};
        for (size_t f = 0; f < 3; f++) {
            char tag[64], extra[128];
            snprintf(tag, sizeof tag, forms[f], etag);
            snprintf(extra, sizeof extra, "If-None-Match: %s\r\n", tag);
            reply r2 = request(port, "GET", EXPECTED[i].path, extra);
            assert_int_equal(r2.status, 304);
            assert_int_equal(r2.body_len, 0);
            expect_header(&r2, "ETag", etag);
            free(r2.raw);
        }
        reply r3 =
            request(port, "GET", EXPECTED[i].path, "If-None-Match: \"0123456789abcdef\"\r\n");
        assert_int_equal(r3.status, 200);
        assert_int_equal(r3.body_len, flen);
        free(r3.raw);
        free(etag);

        reply h = request(port, "HEAD", EXPECTED[i].path, NULL);
        assert_int_equal(h.status, 200);
        assert_int_equal(h.body_len, 0);
        expect_header(&h, "Content-Type", EXPECTED[i].type);
        free(h.raw);
    }
    /* no other method; an unknown asset is a 404 */
    reply p = request(port, "POST", "/", NULL);
    assert_int_equal(p.status, 405);
    expect_header(&p, "Allow", "GET, HEAD");
    free(p.raw);
    reply u = request(port, "GET", "/webui/nope.js", NULL);
    assert_int_equal(u.status, 404);
    free(u.raw);
    /* a NUL in the decoded path must not cut it to an asset's path */
    const char *nul_paths[] = {"/webui/app.js%00.html", "/%00", "/%00/x", "/webui/style.css%00"};
    for (size_t i = 0; i < sizeof nul_paths / sizeof nul_paths[0]; i++) {
        reply z = request(port, "GET", nul_paths[i], NULL);
        if (z.status != 404) fail_msg("GET %s: %d, want 404", nul_paths[i], z.status);
        free(z.raw);
    }
    reply e = request(port, "GET", "/webui/%61pp.js", NULL); /* other escapes still decode */
    assert_int_equal(e.status, 200);
    free(e.raw);
    reply q = request(port, "GET", "/?x=1", NULL); /* a query string: still the page */
    assert_int_equal(q.status, 200);
    free(q.raw);
}

/* The policy itself: same-origin only, no inline script or style. */
static void test_csp_is_strict(void **state) {
    (void)state;
    const char *csp = PG_WEBUI_CSP;
    assert_non_null(strstr(csp, "default-src 'self'"));
    assert_non_null(strstr(csp, "script-src 'self';"));
    assert_non_null(strstr(csp, "object-src 'none'"));
    assert_non_null(strstr(csp, "frame-ancestors 'none'"));
    assert_null(strstr(csp, "unsafe"));
    assert_null(strstr(csp, "data:"));
    assert_null(strstr(csp, "*"));
}

/* The page works under that policy: no inline script, no on* attribute, no
 * URL of another origin, and every /webui/ path index.html names is served. */
static void test_files_fit_the_policy(void **state) {
    (void)state;
    pg_server_options so = {0};
    int port = start(&so);
    for (size_t i = 0; i < N_EXPECTED; i++) {
        size_t len = 0;
        char *f = source_file(EXPECTED[i].file, &len);
        /* the one absolute URL allowed: the SVG namespace (a name, never fetched) */
        for (const char *p = f; (p = strstr(p, "//")); p += 2) {
            bool scheme = p > f && p[-1] == ':';
            if (scheme && !(p - f >= 12 && !strncmp(p - 12, "xmlns=\"http:", 12)))
                fail_msg("%s names an external URL: %.40s", EXPECTED[i].file, p - 6);
        }
        assert_null(strstr(f, "eval("));
        assert_null(strstr(f, "new Function"));
        free(f);
    }
    size_t len = 0;
    char *html = source_file("index.html", &len);
    int scripts = 0;
    for (const char *p = html; (p = strstr(p, "<script")); p++) {
        const char *end = strchr(p, '>');
        assert_non_null(end);
        if (!memmem(p, (size_t)(end - p), " src=", 5)) fail_msg("inline <script> in index.html");
        assert_true(!strncmp(end + 1, "</script>", 9)); /* nothing between the tags */
        scripts++;
    }
    assert_int_equal(scripts, 2);
    assert_null(strstr(html, "style="));
    for (const char *p = html; (p = strstr(p, " on")); p++) {
        const char *q = p + 3;
        while (*q >= 'a' && *q <= 'z')
            q++;
        if (*q == '=') fail_msg("event-handler attribute in index.html: %.20s", p);
    }
    int refs = 0;
    for (const char *p = html; (p = strstr(p, "\"/webui/")); p++) {
        const char *e = strchr(p + 1, '"');
        char path[256];
        snprintf(path, sizeof path, "%.*s", (int)(e - p - 1), p + 1);
        assert_non_null(pg_webui_find(path));
        reply r = request(port, "GET", path, NULL);
        if (r.status != 200) fail_msg("index.html refers to %s: %d", path, r.status);
        free(r.raw);
        refs++;
    }
    assert_int_equal(refs, 4); /* favicon, style, markdown.js, app.js */
    free(html);
}

/* The page is static: served without the API key the API asks for. */
static void test_page_needs_no_api_key(void **state) {
    (void)state;
    pg_server_options so = {.api_key = "sekrit"};
    int port = start(&so);
    reply r = request(port, "GET", "/", NULL);
    assert_int_equal(r.status, 200);
    free(r.raw);
    reply m = request(port, "GET", "/v1/models", NULL);
    assert_int_equal(m.status, 401);
    free(m.raw);
    reply m2 = request(port, "GET", "/v1/models", "Authorization: Bearer sekrit\r\n");
    assert_int_equal(m2.status, 200);
    free(m2.raw);
}

/* --no-webui: none of the page is served; the API is as before. */
static void test_disabled_serves_nothing(void **state) {
    (void)state;
    pg_server_options so = {.disable_webui = true};
    int port = start(&so);
    for (size_t i = 0; i < N_EXPECTED; i++) {
        reply r = request(port, "GET", EXPECTED[i].path, NULL);
        if (r.status != 404) fail_msg("--no-webui: GET %s: %d", EXPECTED[i].path, r.status);
        assert_null(strstr(r.raw, "Content-Security-Policy"));
        free(r.raw);
    }
    reply h = request(port, "GET", "/health", NULL);
    assert_int_equal(h.status, 200);
    free(h.raw);
    reply m = request(port, "GET", "/v1/models", NULL);
    assert_int_equal(m.status, 200);
    free(m.raw);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_assets_served_with_headers, cleanup),
        cmocka_unit_test(test_csp_is_strict),
        cmocka_unit_test_teardown(test_files_fit_the_policy, cleanup),
        cmocka_unit_test_teardown(test_page_needs_no_api_key, cleanup),
        cmocka_unit_test_teardown(test_disabled_serves_nothing, cleanup),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
