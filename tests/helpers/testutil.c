#define _GNU_SOURCE /* nftw */
#include "testutil.h"

#include "base/pool.h"

#include <ftw.h>
#include <limits.h>
#include <errno.h>
#include <stdio.h>
#include <sys/stat.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

const char *pg_test_asset(const char *rel) {
    static char buf[PATH_MAX];
    const char *root = getenv("PAGODA_ASSETS");
    if (!root || !*root) root = "../shared/assets";
    snprintf(buf, sizeof buf, "%s/%s", root, rel);
    return buf;
}

const char *pg_test_exec_wrapper(void) {
    const char *w = getenv("PAGODA_EXEC_WRAPPER");
    return w ? w : "";
}

/* Temporary directories made by pg_test_tmpdir, removed at exit unless
 * PAGODA_KEEP_TMP is set (to inspect a failing test's files). */
#define MAX_TMPDIRS 256
static char g_tmpdirs[MAX_TMPDIRS][PATH_MAX];
static int g_n_tmpdirs;

static int remove_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw) {
    (void)sb;
    (void)flag;
    (void)ftw;
    return remove(path);
}

static void remove_tmpdirs(void) {
    if (getenv("PAGODA_KEEP_TMP")) return;
    for (int i = 0; i < g_n_tmpdirs; i++) nftw(g_tmpdirs[i], remove_entry, 16, FTW_DEPTH | FTW_PHYS);
}

const char *pg_test_tmpdir(void) {
    static char buf[PATH_MAX];
    const char *t = getenv("TMPDIR");
    snprintf(buf, sizeof buf, "%s/pagoda-test-XXXXXX", t && *t ? t : "/tmp");
    if (!mkdtemp(buf)) fail_msg("mkdtemp failed");
    if (g_n_tmpdirs == 0) atexit(remove_tmpdirs);
    if (g_n_tmpdirs < MAX_TMPDIRS) memcpy(g_tmpdirs[g_n_tmpdirs++], buf, sizeof buf);
    return buf;
}

char *pg_test_read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) fail_msg("cannot open %s", path);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)n + 1);
    assert_non_null(buf);
    if (fread(buf, 1, (size_t)n, f) != (size_t)n) fail_msg("short read on %s", path);
    fclose(f);
    buf[n] = 0;
    if (len) *len = (size_t)n;
    return buf;
}

void pg_test_write_file(const char *path, const void *data, size_t len) {
    FILE *f = fopen(path, "wb");
    if (!f) fail_msg("cannot create %s", path);
    if (fwrite(data, 1, len, f) != len) fail_msg("short write on %s", path);
    fclose(f);
}

void pg_test_mkdirs(const char *path) {
    char buf[4096];
    if ((size_t)snprintf(buf, sizeof buf, "%s", path) >= sizeof buf) fail_msg("path too long");
    for (char *s = buf + 1; *s; s++)
        if (*s == '/') {
            *s = 0;
            mkdir(buf, 0755);
            *s = '/';
        }
    if (mkdir(buf, 0755) && errno != EEXIST) fail_msg("cannot create %s", path);
}

const char *pg_test_pagoda_bin(void) {
    static char buf[PATH_MAX];
    const char *dir = getenv("PAGODA_BUILD_DIR");
    snprintf(buf, sizeof buf, "%s/pagoda", dir && *dir ? dir : ".");
    return buf;
}

int pg_test_run_command(const char *cmd, char **out) {
    FILE *p = popen(cmd, "r");
    if (!p) fail_msg("popen failed: %s", cmd);
    size_t cap = 1 << 16, len = 0, n;
    char *buf = malloc(cap);
    assert_non_null(buf);
    while ((n = fread(buf + len, 1, cap - len - 1, p)) > 0) {
        len += n;
        if (cap - len < 1024) {
            buf = realloc(buf, cap *= 2);
            assert_non_null(buf);
        }
    }
    buf[len] = 0;
    int status = pclose(p);
    *out = buf;
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

static uint64_t g_test_rng = 0x9e3779b97f4a7c15ull;

uint64_t pg_test_rnd_u64(void) {
    g_test_rng ^= g_test_rng >> 12;
    g_test_rng ^= g_test_rng << 25;
    g_test_rng ^= g_test_rng >> 27;
    return g_test_rng * 0x2545f4914f6cdd1dull;
}

float pg_test_rnd(void) {
    return (float)((double)(pg_test_rnd_u64() >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

pg_pool *pg_test_pool(int n) {
    pg_pool_options o = pg_pool_options_default();
    o.n_threads = n;
    o.pin = 0;
    o.blocktime_us = 0;
    pg_pool *p = NULL;
    assert_int_equal(pg_pool_create(&o, &p), PAGODA_OK);
    return p;
}

static double mono_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int pg_test_http_post(int port, const char *path, const char *body, char **out) {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    assert_true(fd >= 0);
    struct sockaddr_in a = {0};
    a.sin_family = AF_INET;
    a.sin_port = htons((uint16_t)port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, (struct sockaddr *)&a, sizeof a))
        fail_msg("connect to port %d: %s", port, strerror(errno));
    char head[512];
    snprintf(head, sizeof head,
             "POST %s HTTP/1.0\r\nHost: t\r\nContent-Type: application/json\r\n"
             "Content-Length: %zu\r\n\r\n",
             path, strlen(body));
    const char *parts[2] = {head, body};
    for (int i = 0; i < 2; i++)
        for (size_t n = strlen(parts[i]), off = 0; off < n;) {
            ssize_t k = send(fd, parts[i] + off, n - off, MSG_NOSIGNAL);
            if (k <= 0) fail_msg("send: %s", strerror(errno));
            off += (size_t)k;
        }
    size_t cap = 1 << 16, len = 0;
    char *buf = malloc(cap + 1);
    assert_non_null(buf);
    double end = mono_s() + 600;
    for (;;) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (mono_s() > end) fail_msg("%s: no complete reply within 600 s", path);
        if (poll(&p, 1, 100) <= 0) continue;
        if (len == cap) {
            cap *= 2;
            buf = realloc(buf, cap + 1);
            assert_non_null(buf);
        }
        ssize_t k = recv(fd, buf + len, cap - len, 0);
        if (k <= 0) break;
        len += (size_t)k;
    }
    close(fd);
    buf[len] = 0;
    int status = -1;
    if (sscanf(buf, "HTTP/1.%*d %d", &status) != 1)
        fail_msg("%s: not an HTTP reply: %s", path, buf);
    const char *b = strstr(buf, "\r\n\r\n");
    if (!b) fail_msg("%s: reply without a body: %s", path, buf);
    *out = strdup(b + 4);
    assert_non_null(*out);
    free(buf);
    return status;
}
