/* `pagoda bench serve` end to end against a fake OpenAI-compatible server
 * running in this process (loopback, ephemeral port, one thread per
 * connection): streamed chunks with usage and injected delays, HTTP 500,
 * dropped connections, in-stream errors, refused connections. Durations
 * are bounded (a few hundred ms per test); the only timing checks are
 * causal lower bounds (TTFT cannot beat the server's injected delay). */
#include "testutil.h"

#include <arpa/inet.h>
#include <cjson/cJSON.h>
#include <math.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "bench/bench_serve.h"
#include "bench/bench_tokenizer.h"
#include "serve_proc.h"

/* ------------------------------------------------------------------ */
/* the fake server                                                      */

typedef enum { REPLY_OK, REPLY_500, REPLY_DROP, REPLY_STREAM_ERROR } reply_kind;

typedef struct fake {
    int fd, port;
    pthread_t acceptor;
    atomic_int stop;
    int ttft_ms, itl_ms;
    bool usage;    /* send the usage event */
    bool failures; /* request r: r % 4 == 0 ok, 1 HTTP 500, 2 drop, 3 stream error */
    bool models_broken;
    atomic_int n_posts, in_flight, max_in_flight;
    pthread_mutex_t mu;
    char first_body[16384];
    pthread_t conns[512];
    int n_conns;
} fake;

typedef struct conn {
    fake *f;
    int fd;
} conn;

static void sleep_ms(int ms) {
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static void send_all(int fd, const char *p, size_t n) {
    while (n) {
        ssize_t k = send(fd, p, n, MSG_NOSIGNAL);
        if (k <= 0) return; /* the client went away */
        p += k;
        n -= (size_t)k;
    }
}

static void send_str(int fd, const char *s) {
    send_all(fd, s, strlen(s));
}

/* One HTTP/1.1 chunk. */
static void send_chunk(int fd, const char *p, size_t n) {
    char head[32];
    snprintf(head, sizeof head, "%zx\r\n", n);
    send_str(fd, head);
    send_all(fd, p, n);
    send_str(fd, "\r\n");
}

/* An SSE event split across two HTTP chunks (two sends), so the client sees
 * events cut at odd places. */
static void send_event(int fd, const char *json) {
    char ev[1024];
    int n = snprintf(ev, sizeof ev, "data: %s\n\n", json);
    size_t cut = (size_t)n / 2;
    send_chunk(fd, ev, cut);
    send_chunk(fd, ev + cut, (size_t)n - cut);
}

static void reply_json(int fd, const char *status, const char *body) {
    char head[256];
    snprintf(head, sizeof head,
             "HTTP/1.1 %s\r\nContent-Type: application/json\r\nContent-Length: %zu\r\n"
             "Connection: close\r\n\r\n",
             status, strlen(body));
    send_str(fd, head);
    send_str(fd, body);
}

static void *serve_conn(void *arg) {
    conn c = *(conn *)arg;
    free(arg);
    fake *f = c.f;
    char *buf = malloc(1 << 20);
    size_t len = 0, need = 0;
    char *hdr_end = NULL;
    for (;;) { /* headers, then Content-Length bytes of body */
        ssize_t k = recv(c.fd, buf + len, (1 << 20) - 1 - len, 0);
        if (k <= 0) goto done;
        len += (size_t)k;
        buf[len] = 0;
        if (!hdr_end && (hdr_end = strstr(buf, "\r\n\r\n"))) {
            size_t cl = 0;
            for (char *l = buf; l && l < hdr_end;
                 l = strstr(l, "\r\n") ? strstr(l, "\r\n") + 2 : NULL)
                if (!strncasecmp(l, "Content-Length:", 15)) cl = strtoul(l + 15, NULL, 10);
            need = (size_t)(hdr_end + 4 - buf) + cl;
        }
        if (hdr_end && len >= need) break;
    }
    if (!strncmp(buf, "GET /v1/models", 14)) {
        reply_json(c.fd, "200 OK",
                   f->models_broken ? "{\"object\":\"list\"}"
                                    : "{\"object\":\"list\",\"data\":[{\"id\":\"fake-model\","
                                      "\"object\":\"model\"}]}");
        goto done;
    }
    const char *body = hdr_end + 4;
    bool chat = !strncmp(buf, "POST /v1/chat/completions", 25);
    int r = atomic_fetch_add(&f->n_posts, 1);
    if (r == 0) {
        pthread_mutex_lock(&f->mu);
        snprintf(f->first_body, sizeof f->first_body, "%s", body);
        pthread_mutex_unlock(&f->mu);
    }
    int now = atomic_fetch_add(&f->in_flight, 1) + 1;
    int seen = atomic_load(&f->max_in_flight);
    while (now > seen && !atomic_compare_exchange_weak(&f->max_in_flight, &seen, now)) {
    }
    cJSON *j = cJSON_Parse(body);
    const cJSON *mt = cJSON_GetObjectItem(j, "max_tokens");
    int max_tokens = cJSON_IsNumber(mt) ? (int)mt->valuedouble : 4;
    /* usage.prompt_tokens: one per id / character of the prompt, plus a BOS */
    const cJSON *pr = cJSON_GetObjectItem(j, "prompt");
    const cJSON *msg = cJSON_GetArrayItem(cJSON_GetObjectItem(j, "messages"), 0);
    const cJSON *content = cJSON_GetObjectItem(msg, "content");
    int prompt_tokens = 1 + (cJSON_IsArray(pr)         ? cJSON_GetArraySize(pr)
                             : cJSON_IsString(pr)      ? (int)strlen(pr->valuestring)
                             : cJSON_IsString(content) ? (int)strlen(content->valuestring)
                                                       : 0);
    cJSON_Delete(j);
    reply_kind kind = f->failures ? (reply_kind)(r % 4) : REPLY_OK;
    /* in_flight drops just before the last bytes go out: the client can only
     * start another request after it has them, so max_in_flight measures
     * the client's concurrency, not this thread's scheduling */
    if (kind == REPLY_500) {
        atomic_fetch_sub(&f->in_flight, 1);
        reply_json(
            c.fd, "500 Internal Server Error",
            "{\"error\":{\"message\":\"boom\",\"type\":\"InternalServerError\",\"code\":500}}");
        goto done;
    }
    send_str(c.fd, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                   "Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n");
    send_chunk(c.fd, ": ping\r\n\r\n", 10);
    sleep_ms(f->ttft_ms);
    for (int k = 0; k < max_tokens; k++) {
        if (chat)
            send_event(c.fd, k == 0
                                 ? "{\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\","
                                   "\"content\":\"x\"}}]}"
                                 : "{\"choices\":[{\"index\":0,\"delta\":{\"content\":\"x\"}}]}");
        else
            send_event(c.fd, "{\"choices\":[{\"index\":0,\"text\":\"x\"}]}");
        if (kind == REPLY_DROP) { /* close mid-stream, no terminating chunk */
            atomic_fetch_sub(&f->in_flight, 1);
            goto done;
        }
        if (kind == REPLY_STREAM_ERROR) {
            send_event(c.fd, "{\"error\":{\"message\":\"kv cache full\",\"code\":500}}");
            break;
        }
        if (k + 1 < max_tokens) sleep_ms(f->itl_ms);
    }
    if (f->usage && kind == REPLY_OK) {
        char u[256];
        snprintf(u, sizeof u,
                 "{\"choices\":[],\"usage\":{\"prompt_tokens\":%d,\"completion_tokens\":%d}}",
                 prompt_tokens, max_tokens);
        send_event(c.fd, u);
    }
    send_event(c.fd, "[DONE]");
    atomic_fetch_sub(&f->in_flight, 1);
    send_str(c.fd, "0\r\n\r\n");
done:
    free(buf);
    close(c.fd);
    return NULL;
}

static void *accept_loop(void *arg) {
    fake *f = arg;
    while (!atomic_load(&f->stop)) {
        struct pollfd p = {f->fd, POLLIN, 0};
        if (poll(&p, 1, 20) <= 0) continue;
        int fd = accept(f->fd, NULL, NULL);
        if (fd < 0) continue;
        conn *c = malloc(sizeof *c);
        c->f = f;
        c->fd = fd;
        if (f->n_conns == 512 || pthread_create(&f->conns[f->n_conns], NULL, serve_conn, c)) {
            close(fd);
            free(c);
            continue;
        }
        f->n_conns++;
    }
    return NULL;
}

static int listen_loopback(int *port) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(fd >= 0);
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = 0};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof a), 0);
    assert_int_equal(listen(fd, 512), 0);
    socklen_t al = sizeof a;
    assert_int_equal(getsockname(fd, (struct sockaddr *)&a, &al), 0);
    *port = ntohs(a.sin_port);
    return fd;
}

static fake *fake_start(int ttft_ms, int itl_ms) {
    fake *f = calloc(1, sizeof *f);
    f->ttft_ms = ttft_ms;
    f->itl_ms = itl_ms;
    f->usage = true;
    pthread_mutex_init(&f->mu, NULL);
    f->fd = listen_loopback(&f->port);
    assert_int_equal(pthread_create(&f->acceptor, NULL, accept_loop, f), 0);
    return f;
}

static void fake_stop(fake *f) {
    atomic_store(&f->stop, 1);
    pthread_join(f->acceptor, NULL);
    for (int i = 0; i < f->n_conns; i++)
        pthread_join(f->conns[i], NULL);
    close(f->fd);
    pthread_mutex_destroy(&f->mu);
    free(f);
}

/* ------------------------------------------------------------------ */
/* a one-character-per-token tokenizer: ids 32..126 are ASCII, the rest  */
/* special                                                              */

static bool ch_special(void *ctx, int32_t id) {
    (void)ctx;
    return id < 32 || id > 126;
}

static pagoda_status ch_encode(void *ctx, const char *text, size_t len, int32_t **ids, size_t *n) {
    (void)ctx;
    *ids = malloc((len + 1) * sizeof **ids);
    for (size_t i = 0; i < len; i++)
        (*ids)[i] = (unsigned char)text[i];
    *n = len;
    return PAGODA_OK;
}

static pagoda_status ch_decode(void *ctx, const int32_t *ids, size_t n, char **text, size_t *len) {
    (void)ctx;
    *text = malloc(n + 1);
    for (size_t i = 0; i < n; i++)
        (*text)[i] = (char)ids[i];
    (*text)[n] = 0;
    *len = n;
    return PAGODA_OK;
}

static const pg_bench_tokenizer CHAR_TOK = {NULL, 128, ch_special, ch_encode, ch_decode, 0};

static pg_bench_serve_opts base_opts(const fake *f, char *url, size_t url_cap) {
    pg_bench_serve_opts o;
    pg_bench_serve_defaults(&o);
    snprintf(url, url_cap, "http://127.0.0.1:%d", f->port);
    o.client.base_url = url;
    o.client.prompt_as_ids = true;
    o.random.vocab_size = 1000;
    o.random.input_len = 16;
    o.random.output_len = 6;
    o.num_prompts = 12;
    o.ready_check_timeout_s = 0;
    o.n_percentiles = 3;
    o.percentiles[0] = 0;
    o.percentiles[1] = 50;
    o.percentiles[2] = 100;
    return o;
}

static FILE *devnull(void) {
    FILE *f = fopen("/dev/null", "w");
    assert_non_null(f);
    return f;
}

/* ------------------------------------------------------------------ */

static void test_completions_token_ids(void **state) {
    (void)state;
    fake *f = fake_start(30, 5);
    char url[64], json[512];
    pg_bench_serve_opts o = base_opts(f, url, sizeof url);
    o.client.max_concurrency = 3;
    o.ready_check_timeout_s = 5; /* one extra request first */
    snprintf(json, sizeof json, "%s/r.json", pg_test_tmpdir());
    o.output_json = json;
    pg_bench_metrics m;
    FILE *out = devnull();
    assert_int_equal(pg_bench_serve(&o, out, &m), PAGODA_OK);
    fclose(out);
    int posts = atomic_load(&f->n_posts), max_in_flight = atomic_load(&f->max_in_flight);
    char body[16384];
    snprintf(body, sizeof body, "%s", f->first_body);
    fake_stop(f);

    assert_int_equal(posts, 13);
    assert_true(max_in_flight >= 1 && max_in_flight <= 3); /* --max-concurrency held */
    assert_int_equal(m.completed, 12);
    assert_int_equal(m.failed, 0);
    assert_int_equal(m.total_input, 12 * 17); /* usage.prompt_tokens: 16 ids + the BOS */
    assert_int_equal(m.total_output, 12 * 6); /* usage.completion_tokens */
    assert_true(m.max_concurrent_requests >= 1 && m.max_concurrent_requests <= 3);
    assert_true(m.ttft.pct[0] >= 30.0); /* min TTFT >= the server's delay */
    assert_true(m.e2el.pct[0] >= 30.0 + 5 * 5.0);
    assert_true(m.tpot.mean > 0);
    assert_true(m.output_throughput > 0);
    assert_true(m.max_output_tokens_per_s >= 1);

    /* the request vLLM's client would send, with the model from /v1/models */
    cJSON *b = cJSON_Parse(body);
    assert_non_null(b);
    assert_string_equal(cJSON_GetObjectItem(b, "model")->valuestring, "fake-model");
    assert_true(cJSON_IsTrue(cJSON_GetObjectItem(b, "stream")));
    assert_true(cJSON_IsTrue(
        cJSON_GetObjectItem(cJSON_GetObjectItem(b, "stream_options"), "include_usage")));
    assert_true(cJSON_IsTrue(cJSON_GetObjectItem(b, "ignore_eos")));
    assert_int_equal((int)cJSON_GetObjectItem(b, "max_tokens")->valuedouble, 6);
    assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItem(b, "prompt")), 16);
    cJSON_Delete(b);

    char *js = pg_test_read_file(json, NULL);
    cJSON *j = cJSON_Parse(js);
    assert_non_null(j);
    assert_float_equal(cJSON_GetObjectItem(j, "completed")->valuedouble, 12, 0);
    assert_float_equal(cJSON_GetObjectItem(j, "max_concurrency")->valuedouble, 3, 0);
    cJSON *itls = cJSON_GetObjectItem(j, "itls");
    assert_int_equal(cJSON_GetArraySize(itls), 12);
    for (int i = 0; i < 12; i++) {
        assert_int_equal(cJSON_GetArraySize(cJSON_GetArrayItem(itls, i)), 5); /* 6 chunks */
        assert_float_equal(cJSON_GetArrayItem(cJSON_GetObjectItem(j, "input_lens"), i)->valuedouble,
                           17, 0);
        assert_true(cJSON_GetArrayItem(cJSON_GetObjectItem(j, "ttfts"), i)->valuedouble >= 0.030);
        assert_string_equal(cJSON_GetArrayItem(cJSON_GetObjectItem(j, "errors"), i)->valuestring,
                            "");
    }
    cJSON_Delete(j);
    free(js);
}

static void test_chat_text_prompts_retokenized_and_paced(void **state) {
    (void)state;
    fake *f = fake_start(10, 2);
    f->usage = false; /* the client must count tokens itself */
    char url[64];
    pg_bench_serve_opts o = base_opts(f, url, sizeof url);
    o.client.endpoint = "/v1/chat/completions";
    o.client.prompt_as_ids = false;
    o.client.model = "given-model";
    o.tok = &CHAR_TOK;
    o.num_prompts = 8;
    o.request_rate = 50.0; /* the last request is due at 8 / 50 = 0.16 s */
    pg_bench_metrics m;
    FILE *out = devnull();
    assert_int_equal(pg_bench_serve(&o, out, &m), PAGODA_OK);
    fclose(out);
    char body[16384];
    snprintf(body, sizeof body, "%s", f->first_body);
    fake_stop(f);

    assert_int_equal(m.completed, 8);
    assert_int_equal(m.total_output, 8 * 6); /* "xxxxxx" re-tokenized: 6 tokens each */
    assert_int_equal(m.total_input, 8 * 16);
    assert_true(m.duration >= 0.16);
    cJSON *b = cJSON_Parse(body);
    assert_non_null(b);
    assert_string_equal(cJSON_GetObjectItem(b, "model")->valuestring, "given-model");
    const cJSON *msg = cJSON_GetArrayItem(cJSON_GetObjectItem(b, "messages"), 0);
    assert_string_equal(cJSON_GetObjectItem(msg, "role")->valuestring, "user");
    assert_int_equal(strlen(cJSON_GetObjectItem(msg, "content")->valuestring), 16);
    assert_int_equal((int)cJSON_GetObjectItem(b, "max_completion_tokens")->valuedouble, 6);
    cJSON_Delete(b);
}

static void test_failures_are_counted_with_messages(void **state) {
    (void)state;
    fake *f = fake_start(5, 1);
    f->failures = true;
    char url[64], json[512], table[512];
    const char *dir = pg_test_tmpdir();
    snprintf(json, sizeof json, "%s/r.json", dir);
    snprintf(table, sizeof table, "%s/out.txt", dir);
    pg_bench_serve_opts o = base_opts(f, url, sizeof url);
    o.client.model = "m";
    o.output_json = json;
    pg_bench_metrics m;
    FILE *out = fopen(table, "w");
    assert_int_equal(pg_bench_serve(&o, out, &m), PAGODA_OK);
    fclose(out);
    fake_stop(f);

    /* 12 requests: 3 ok, 3 HTTP 500, 3 dropped mid-stream, 3 error events */
    assert_int_equal(m.completed, 3);
    assert_int_equal(m.failed, 9);
    assert_int_equal(m.total_output, 3 * 6);
    char *t = pg_test_read_file(table, NULL);
    assert_non_null(strstr(t, "First error (9 failed requests): "));
    assert_non_null(strstr(t, "Failed requests:                         9"));
    free(t);
    char *js = pg_test_read_file(json, NULL);
    cJSON *j = cJSON_Parse(js);
    int n500 = 0, ndrop = 0, nstream = 0, nok = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, cJSON_GetObjectItem(j, "errors")) {
        const char *s = e->valuestring;
        if (!*s) nok++;
        if (strstr(s, "HTTP 500: boom")) n500++;
        if (strstr(s, "partial") || strstr(s, "closed")) ndrop++;
        if (strstr(s, "server error in stream: kv cache full")) nstream++;
    }
    assert_int_equal(nok, 3);
    assert_int_equal(n500, 3);
    assert_int_equal(ndrop, 3);
    assert_int_equal(nstream, 3);
    cJSON_Delete(j);
    free(js);
}

static void test_refused_and_not_ready(void **state) {
    (void)state;
    /* a port that was just free: nothing listens there */
    int port;
    int fd = listen_loopback(&port);
    close(fd);
    char url[64];
    snprintf(url, sizeof url, "http://127.0.0.1:%d", port);
    pg_bench_serve_opts o;
    pg_bench_serve_defaults(&o);
    o.client.base_url = url;
    o.client.model = "m";
    o.client.prompt_as_ids = true;
    o.random.vocab_size = 100;
    o.random.input_len = 4;
    o.random.output_len = 2;
    o.num_prompts = 3;
    o.ready_check_timeout_s = 0;
    pg_bench_metrics m;
    FILE *out = devnull();
    assert_int_equal(pg_bench_serve(&o, out, &m), PAGODA_OK);
    assert_int_equal(m.completed, 0);
    assert_int_equal(m.failed, 3);
    /* with the ready check the run stops early with a clear error */
    o.ready_check_timeout_s = 0.2;
    assert_int_equal(pg_bench_serve(&o, out, &m), PAGODA_ERR_IO);
    assert_non_null(strstr(pg_last_error(), "initial test run failed"));
    /* no model given and no server: /v1/models fails */
    o.client.model = NULL;
    assert_int_equal(pg_bench_serve(&o, out, &m), PAGODA_ERR_IO);
    assert_non_null(strstr(pg_last_error(), "/v1/models"));
    fclose(out);
}

static void test_bad_options_and_model_list(void **state) {
    (void)state;
    fake *f = fake_start(0, 0);
    f->models_broken = true;
    char url[64];
    pg_bench_serve_opts o = base_opts(f, url, sizeof url);
    pg_bench_metrics m;
    FILE *out = devnull();
    assert_int_equal(pg_bench_serve(&o, out, &m), PAGODA_ERR_FORMAT);
    assert_non_null(strstr(pg_last_error(), "no data[0].id"));
    o.client.model = "m";
    o.client.prompt_as_ids = false; /* text prompts without a tokenizer */
    assert_int_equal(pg_bench_serve(&o, out, &m), PAGODA_ERR_INVALID_ARG);
    assert_non_null(strstr(pg_last_error(), "tokenizer"));
    o.client.prompt_as_ids = true;
    o.client.endpoint = "/v1/chat/completions";
    assert_int_equal(pg_bench_serve(&o, out, &m), PAGODA_ERR_INVALID_ARG);
    assert_non_null(strstr(pg_last_error(), "token-id prompts need /v1/completions"));
    o.client.endpoint = "/v1/completions";
    o.num_prompts = 0;
    assert_int_equal(pg_bench_serve(&o, out, &m), PAGODA_ERR_INVALID_ARG);
    fclose(out);
    int posts = atomic_load(&f->n_posts);
    fake_stop(f);
    assert_int_equal(posts, 0); /* nothing was sent for a bad configuration */
}

/* ------------------------------------------------------------------ */
/* against a real `pagoda serve` of stories260K                         */

/* Random text prompts of --random-input-len tokens reach the server as
 * exactly that many tokens (the server's usage.prompt_tokens, BOS
 * included: stories260K's SentencePiece tokenizer adds one and is mostly
 * byte-fallback ids), and the peak concurrency reported never exceeds
 * --max-concurrency. */
static void test_real_server_input_lengths(void **state) {
    (void)state;
    const char *model = pg_test_asset("llm/stories260K-hf");
    char out_path[4200], json[4200], url[64];
    snprintf(out_path, sizeof out_path, "%s/serve.out", pg_test_tmpdir());
    snprintf(json, sizeof json, "%s/r.json", pg_test_tmpdir());
    char args[4200];
    snprintf(args, sizeof args, "'%s' --max-num-seqs 8", model);
    int port = 0;
    pid_t pid = pg_test_serve_start(args, out_path, &port);
    snprintf(url, sizeof url, "http://127.0.0.1:%d", port);

    pg_tokenizer *tk;
    assert_int_equal(pg_tokenizer_load(model, &tk), PAGODA_OK);
    pg_bench_tokenizer bt = pg_bench_tokenizer_wrap(tk);
    pg_bench_serve_opts o;
    pg_bench_serve_defaults(&o);
    o.client.base_url = url;
    o.client.max_concurrency = 3;
    o.tok = &bt;
    o.random.input_len = 40;
    o.random.output_len = 4;
    o.num_prompts = 16;
    o.ready_check_timeout_s = 60;
    o.output_json = json;
    pg_bench_metrics m;
    FILE *out = devnull();
    pagoda_status st = pg_bench_serve(&o, out, &m);
    fclose(out);
    pg_test_serve_stop(pid);
    pg_tokenizer_free(tk);
    assert_int_equal(st, PAGODA_OK);

    assert_int_equal(m.completed, 16);
    assert_int_equal(m.total_input, 16 * 40);
    assert_int_equal(m.total_output, 16 * 4);
    assert_true(m.max_concurrent_requests >= 1 && m.max_concurrent_requests <= 3);
    char *js = pg_test_read_file(json, NULL);
    cJSON *j = cJSON_Parse(js);
    assert_non_null(j);
    for (int i = 0; i < 16; i++)
        assert_float_equal(cJSON_GetArrayItem(cJSON_GetObjectItem(j, "input_lens"), i)->valuedouble,
                           40, 0);
    cJSON_Delete(j);
    free(js);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_completions_token_ids),
        cmocka_unit_test(test_chat_text_prompts_retokenized_and_paced),
        cmocka_unit_test(test_failures_are_counted_with_messages),
        cmocka_unit_test(test_refused_and_not_ready),
        cmocka_unit_test(test_bad_options_and_model_list),
        cmocka_unit_test(test_real_server_input_lengths),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
