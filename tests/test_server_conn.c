/* `pagoda serve` against hostile connections (issue #6's break-it pass):
 * slowloris (half-sent requests, bodies trickled byte by byte) under a low
 * RLIMIT_NOFILE, idle keep-alive connections, HEAD on GET endpoints, and a
 * streaming client that never reads (its request aborted, KV blocks freed,
 * its connection dropped). The real server (src/server/server.c) runs in
 * this process on stories260K with an ephemeral port; the clients are raw
 * sockets. Waits are bounded liveness checks (a deadline that the old code
 * misses by minutes), never speed assertions. */
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
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "pagoda.h"
#include "server/server.h"

static pagoda_engine *g_engine;
static struct rlimit g_nofile; /* as the test started: restored after each test */
static pg_server *g_srv;       /* the running server, stopped even if a test fails */

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void sleep_ms(int ms) {
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static int setup(void **state) {
    (void)state;
    pagoda_engine_options o;
    getrlimit(RLIMIT_NOFILE, &g_nofile);
    pagoda_engine_options_default(&o);
    o.kv_cache_memory = 32u << 20;
    o.num_threads = 1;
    o.seed = 7;
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

static void stop(void) {
    pg_server_stop(g_srv);
    g_srv = NULL;
}

/* Per-test teardown: a failed test leaves its server running. */
static int cleanup(void **state) {
    (void)state;
    stop();
    setrlimit(RLIMIT_NOFILE, &g_nofile);
    return 0;
}

static pg_server *start(pg_server_options *so) {
    pg_server *s = NULL;
    so->port = 0;
    /* a small SO_SNDBUF: a client that does not read stalls the stream after
     * tens of KB instead of the MBs the kernel's autotuning would buffer */
    so->socket_send_buffer = 16 << 10;
    if (pg_server_start(g_engine, so, &s) != PAGODA_OK) fail_msg("%s", pagoda_last_error());
    g_srv = s;
    return s;
}

/* A connected TCP socket to the server; rcvbuf > 0 shrinks its receive
 * buffer (before connect, so the window is small from the start). */
static int dial(int port, int rcvbuf) {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) fail_msg("socket: %s", strerror(errno));
    if (rcvbuf > 0) setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof rcvbuf);
    struct sockaddr_in a = {0};
    a.sin_family = AF_INET;
    a.sin_port = htons((uint16_t)port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, (struct sockaddr *)&a, sizeof a)) fail_msg("connect: %s", strerror(errno));
    return fd;
}

static void send_str(int fd, const char *s) {
    size_t n = strlen(s);
    while (n) {
        ssize_t k = send(fd, s, n, MSG_NOSIGNAL);
        if (k <= 0) fail_msg("send: %s", strerror(errno));
        s += k;
        n -= (size_t)k;
    }
}

/* Read what is there within `ms`: >0 bytes appended to buf, 0 = EOF (or
 * reset by the peer), -1 = nothing yet. */
static int read_some(int fd, char *buf, size_t cap, size_t *len, int ms) {
    struct pollfd p = {.fd = fd, .events = POLLIN};
    if (poll(&p, 1, ms) <= 0) return -1;
    char tmp[4096];
    ssize_t k = recv(fd, tmp, sizeof tmp, 0);
    if (k <= 0) return 0;
    size_t room = *len < cap ? cap - *len : 0;
    size_t copy = (size_t)k < room ? (size_t)k : room;
    memcpy(buf + *len, tmp, copy);
    *len += copy;
    return 1;
}

/* One request on a fresh connection (Connection: close); the whole reply in
 * a malloc'ed string. Returns the HTTP status, or -1 if no complete reply
 * came within timeout_s. */
static int http(int port, const char *method, const char *path, const char *body, char **reply,
                double timeout_s) {
    int fd = dial(port, 0);
    char head[512];
    if (body)
        snprintf(head, sizeof head,
                 "%s %s HTTP/1.1\r\nHost: t\r\nConnection: close\r\n"
                 "Content-Type: application/json\r\nContent-Length: %zu\r\n\r\n",
                 method, path, strlen(body));
    else
        snprintf(head, sizeof head, "%s %s HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n",
                 method, path);
    send_str(fd, head);
    if (body) send_str(fd, body);
    size_t cap = 1 << 20, len = 0;
    char *buf = calloc(1, cap + 1);
    assert_non_null(buf);
    double end = now_s() + timeout_s;
    int r = -1;
    while (now_s() < end && (r = read_some(fd, buf, cap, &len, 100)) != 0) {
    }
    close(fd);
    int status = -1;
    if (r == 0 && sscanf(buf, "HTTP/1.1 %d", &status) != 1) status = -1;
    if (reply)
        *reply = buf;
    else
        free(buf);
    return status;
}

/* The value of the first Prometheus sample whose line starts with `name`. */
static double metric(const char *text, const char *name) {
    const char *p = text;
    while ((p = strstr(p, name))) {
        char after = p[strlen(name)];
        if ((p == text || p[-1] == '\n') && (after == '{' || after == ' ' || after == ',')) {
            const char *eol = strchr(p, '\n');
            const char *sp = eol ? eol : p + strlen(p);
            while (sp > p && sp[-1] != ' ')
                sp--;
            return atof(sp);
        }
        p += strlen(name);
    }
    fail_msg("metric %s not found", name);
    return -1;
}

/* Wait (up to timeout_s) until no request runs or waits, the KV cache is
 * empty and at least `aborts` requests finished as "abort". */
static void wait_idle(int port, double aborts, double timeout_s) {
    double end = now_s() + timeout_s;
    char *m = NULL;
    for (;;) {
        free(m);
        m = NULL;
        assert_int_equal(http(port, "GET", "/metrics", NULL, &m, 10), 200);
        double running = metric(m, "vllm:num_requests_running");
        double waiting = metric(m, "vllm:num_requests_waiting");
        double kv = metric(m, "vllm:kv_cache_usage_perc");
        double n_abort = metric(m, "vllm:request_success_total{finished_reason=\"abort\"");
        if (running == 0 && waiting == 0 && kv == 0 && n_abort >= aborts) break;
        if (now_s() > end)
            fail_msg("not idle after %.0f s: running %g waiting %g kv %g aborts %g (want %g)",
                     timeout_s, running, waiting, kv, n_abort, aborts);
        sleep_ms(100);
    }
    free(m);
}

/* Wait until the server has taken a request (running, waiting or done). */
static void wait_started(int port, double timeout_s) {
    double end = now_s() + timeout_s;
    for (;;) {
        char *m = NULL;
        assert_int_equal(http(port, "GET", "/metrics", NULL, &m, 10), 200);
        double n = metric(m, "vllm:num_requests_running") + metric(m, "vllm:num_requests_waiting");
        static const char *const reasons[] = {"stop", "length", "abort", "error"};
        for (size_t i = 0; i < 4; i++) {
            char name[96];
            snprintf(name, sizeof name, "vllm:request_success_total{finished_reason=\"%s\"",
                     reasons[i]);
            n += metric(m, name);
        }
        free(m);
        if (n > 0) return;
        if (now_s() > end) fail_msg("no request started within %.0f s", timeout_s);
        sleep_ms(50);
    }
}

static const char *COMPLETION =
    "{\"prompt\": \"Once upon a time\", \"max_tokens\": 16, \"temperature\": 0}";

/* 200 half-sent requests under RLIMIT_NOFILE 256: the server raises the
 * limit and sizes its connection limit to it, so /health and a completion
 * still answer (the old server stopped accepting once accept() hit EMFILE,
 * for the 600 s its idle timeout held each half-sent request). */
static void test_slowloris_low_fd_limit(void **state) {
    (void)state;
    struct rlimit rl0 = g_nofile;
    bool lowered = false;
    if (rl0.rlim_max == RLIM_INFINITY || rl0.rlim_max > 1024) {
        struct rlimit low = {256, rl0.rlim_max};
        assert_int_equal(setrlimit(RLIMIT_NOFILE, &low), 0);
        lowered = true;
    }
    pg_server_options so = {0};
    so.max_queue = -1;
    pg_server *s = start(&so);
    int port = pg_server_port(s);
    struct rlimit rl;
    assert_int_equal(getrlimit(RLIMIT_NOFILE, &rl), 0);
    if (lowered) assert_true(rl.rlim_cur == rl.rlim_max); /* raised to the hard limit */
    assert_true(pg_server_max_connections(s) >= 200);

    enum { N = 200 };
    int fds[N];
    for (int i = 0; i < N; i++) {
        fds[i] = dial(port, 0);
        send_str(fds[i], i % 2 ? "POST /v1/completions HTTP/1.1\r\nHost: t\r\nContent-Le"
                               : "POST /v1/completions HTTP/1.1\r\nHost: t\r\n"
                                 "Content-Length: 100\r\n\r\n{\"prompt\"");
    }
    char *reply = NULL;
    assert_int_equal(http(port, "GET", "/health", NULL, NULL, 10), 200);
    assert_int_equal(http(port, "POST", "/v1/completions", COMPLETION, &reply, 30), 200);
    assert_non_null(strstr(reply, "\"text\""));
    free(reply);
    for (int i = 0; i < N; i++)
        close(fds[i]);
    stop();
}

/* --request-timeout 1: half-sent headers, a silent connection and bodies
 * trickled a byte every 100 ms (an idle timeout never fires for those) are
 * all closed; kept-alive connections are closed after --keep-alive-timeout;
 * the server keeps answering. */
static void test_request_timeout(void **state) {
    (void)state;
    pg_server_options so = {0};
    so.max_queue = -1;
    so.request_timeout = 1;
    so.keepalive_timeout = 1;
    pg_server *s = start(&so);
    int port = pg_server_port(s);
    enum { N_HALF = 20, N_TRICKLE = 3, N_KEEP = 3, N = N_HALF + 1 + N_TRICKLE + N_KEEP };
    int fds[N];
    bool closed[N];
    char got[N][256];
    size_t got_len[N];
    memset(closed, 0, sizeof closed);
    memset(got_len, 0, sizeof got_len);
    int k = 0;
    for (int i = 0; i < N_HALF; i++) {
        fds[k] = dial(port, 0);
        send_str(fds[k++], "POST /v1/completions HTTP/1.1\r\nHost: t\r\nContent-Type: appl");
    }
    fds[k++] = dial(port, 0); /* says nothing at all */
    int trickle0 = k;
    for (int i = 0; i < N_TRICKLE; i++) {
        fds[k] = dial(port, 0);
        send_str(fds[k++], "POST /v1/completions HTTP/1.1\r\nHost: t\r\n"
                           "Content-Length: 1000\r\n\r\n{");
    }
    int keep0 = k;
    for (int i = 0; i < N_KEEP; i++) {
        fds[k] = dial(port, 0);
        send_str(fds[k++], "GET /health HTTP/1.1\r\nHost: t\r\n\r\n");
    }
    double end = now_s() + 15;
    int n_closed = 0;
    while (n_closed < N && now_s() < end) {
        for (int i = trickle0; i < trickle0 + N_TRICKLE; i++)
            if (!closed[i]) send(fds[i], " ", 1, MSG_NOSIGNAL);
        for (int i = 0; i < N; i++) {
            if (closed[i]) continue;
            int r;
            while ((r = read_some(fds[i], got[i], sizeof got[i] - 1, &got_len[i], 0)) > 0) {
            }
            if (r == 0) closed[i] = true, n_closed++;
        }
        sleep_ms(100);
    }
    for (int i = 0; i < N; i++)
        if (!closed[i]) fail_msg("connection %d (of %d) still open after 15 s", i, N);
    for (int i = keep0; i < keep0 + N_KEEP; i++) {
        got[i][got_len[i]] = 0;
        if (strncmp(got[i], "HTTP/1.1 200", 12) != 0)
            fail_msg("kept-alive connection %d got no 200 before closing: '%s'", i, got[i]);
    }
    for (int i = 0; i < N; i++)
        close(fds[i]);
    assert_int_equal(http(port, "GET", "/health", NULL, NULL, 10), 200);
    stop();
}

/* HEAD on a GET endpoint answers like GET without a body; a method an
 * endpoint does not take is 405 with the Allow header of that endpoint. */
static void test_head(void **state) {
    (void)state;
    pg_server_options so = {0};
    so.max_queue = -1;
    pg_server *s = start(&so);
    int port = pg_server_port(s);
    static const char *const paths[] = {"/health", "/version", "/v1/models", "/metrics"};
    for (size_t i = 0; i < sizeof paths / sizeof paths[0]; i++) {
        char *get = NULL, *head = NULL;
        assert_int_equal(http(port, "GET", paths[i], NULL, &get, 10), 200);
        assert_int_equal(http(port, "HEAD", paths[i], NULL, &head, 10), 200);
        const char *end = strstr(head, "\r\n\r\n");
        assert_non_null(end);
        if (end[4]) fail_msg("HEAD %s sent a body: '%s'", paths[i], end + 4);
        if (!strcmp(paths[i], "/v1/models")) assert_non_null(strstr(get, "\"data\""));
        free(get);
        free(head);
    }
    char *r = NULL;
    assert_int_equal(http(port, "HEAD", "/v1/completions", NULL, &r, 10), 405);
    assert_non_null(strstr(r, "Allow: POST\r\n"));
    free(r);
    assert_int_equal(http(port, "DELETE", "/health", NULL, &r, 10), 405);
    assert_non_null(strstr(r, "Allow: GET, HEAD\r\n"));
    assert_non_null(strstr(r, "\"error\""));
    free(r);
    stop();
}

/* --max-connections-per-ip 2: a third connection from the same address is
 * refused while two are open, accepted once one closes. */
static void test_per_ip_limit(void **state) {
    (void)state;
    pg_server_options so = {0};
    so.max_queue = -1;
    so.max_connections_per_ip = 2;
    pg_server *s = start(&so);
    int port = pg_server_port(s);
    int a = dial(port, 0), b = dial(port, 0);
    send_str(a, "GET /hea");
    send_str(b, "GET /hea");
    sleep_ms(200); /* let the server accept both */
    assert_int_equal(http(port, "GET", "/health", NULL, NULL, 10), -1);
    close(a);
    double end = now_s() + 10;
    int st = -1;
    while (st != 200 && now_s() < end) { /* the close reaches the server soon */
        st = http(port, "GET", "/health", NULL, NULL, 10);
        if (st != 200) sleep_ms(100);
    }
    assert_int_equal(st, 200);
    close(b);
    stop();
}

/* A long streamed request (n choices of 480 tokens with top-k logprobs:
 * hundreds of KB of SSE, far more than the socket buffers hold) from a
 * client that never reads. */
static int stalled_stream(int port, int n, int k) {
    int fd = dial(port, 1024);
    char body[256];
    snprintf(body, sizeof body,
             "{\"prompt\": \"Once upon a time\", \"max_tokens\": 480, \"n\": %d, "
             "\"logprobs\": %d, \"ignore_eos\": true, \"stream\": true}",
             n, k);
    char head[256];
    snprintf(head, sizeof head,
             "POST /v1/completions HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n"
             "Content-Length: %zu\r\n\r\n",
             strlen(body));
    send_str(fd, head);
    send_str(fd, body);
    return fd;
}

/* Past --max-stream-buffer of unread output the request is aborted (its KV
 * blocks freed) while other requests go on. */
static void test_stalled_stream_aborted(void **state) {
    (void)state;
    pg_server_options so = {0};
    so.max_queue = -1;
    so.max_stream_buffer = 8 << 10;
    pg_server *s = start(&so);
    int port = pg_server_port(s);
    int fd = stalled_stream(port, 4, 5);
    char *reply = NULL;
    assert_int_equal(http(port, "POST", "/v1/completions", COMPLETION, &reply, 30), 200);
    assert_non_null(strstr(reply, "\"finish_reason\":\"length\""));
    free(reply);
    wait_idle(port, 4, 60); /* all 4 choices aborted, nothing left in the KV cache */
    close(fd);
    stop();
}

/* A client that reads nothing for --request-timeout seconds is dropped: the
 * server's connection count falls to 0 while the client still reads
 * nothing, its stream ends without [DONE] and nothing stays in the KV
 * cache. The stream buffer is large (no abort for that), so only MHD's
 * idle timeout, which the server sets to --request-timeout, can close it. */
static void test_stalled_stream_dropped(void **state) {
    (void)state;
    pg_server_options so = {0};
    so.max_queue = -1;
    so.request_timeout = 1;
    so.max_stream_buffer = (size_t)1 << 30;
    pg_server *s = start(&so);
    int port = pg_server_port(s);
    int fd = stalled_stream(port, 4, 5);
    wait_started(port, 60);
    /* not reading: the server must close the connection by itself */
    double until = now_s() + 15;
    while (pg_server_connections(s) > 0 && now_s() < until)
        sleep_ms(100);
    assert_int_equal(pg_server_connections(s), 0);
    wait_idle(port, 0, 60);
    size_t cap = 64 << 20, len = 0;
    char *buf = malloc(cap);
    assert_non_null(buf);
    double end = now_s() + 30;
    int r = -1;
    while (now_s() < end && (r = read_some(fd, buf, cap, &len, 200)) != 0) {
    }
    if (r != 0) fail_msg("the stalled stream was not closed (read %zu bytes)", len);
    assert_true(len > 0);
    const char *done = "data: [DONE]";
    bool complete = len >= strlen(done) + 4 && memmem(buf, len, done, strlen(done)) != NULL;
    if (complete) fail_msg("the stalled stream was sent to the end (%zu bytes)", len);
    free(buf);
    close(fd);
    stop();
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_slowloris_low_fd_limit, cleanup),
        cmocka_unit_test_teardown(test_request_timeout, cleanup),
        cmocka_unit_test_teardown(test_head, cleanup),
        cmocka_unit_test_teardown(test_per_ip_limit, cleanup),
        cmocka_unit_test_teardown(test_stalled_stream_aborted, cleanup),
        cmocka_unit_test_teardown(test_stalled_stream_dropped, cleanup),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
