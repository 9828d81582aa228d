/* `pagoda bench serve` HTTP client over curl_multi: see bench_client.h. */
#include "bench/bench_client.h"

#include <cjson/cJSON.h>
#include <curl/curl.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench/bench_sse.h"

#define ERRBODY_MAX 2048 /* bytes of a non-200 body kept for the message */

bool pg_bench_endpoint_is_chat(const char *endpoint) {
    static const char suffix[] = "chat/completions";
    size_t n = strlen(endpoint), k = sizeof suffix - 1;
    return n >= k && !strcmp(endpoint + n - k, suffix);
}

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static CURLcode curl_init_rc = CURLE_OK;
static void curl_init(void) {
    curl_init_rc = curl_global_init(CURL_GLOBAL_DEFAULT);
}

static pagoda_status ensure_curl(void) {
    pthread_once(&curl_once, curl_init);
    if (curl_init_rc != CURLE_OK)
        return pg_error(PAGODA_ERR_INTERNAL, "curl_global_init: %s",
                        curl_easy_strerror(curl_init_rc));
    return PAGODA_OK;
}

/* ---- growable byte buffer ---- */
typedef struct gbuf {
    char *p;
    size_t len, cap;
} gbuf;

static bool gbuf_add(gbuf *b, const char *s, size_t n) {
    if (b->len + n + 1 > b->cap) {
        size_t c = b->cap ? b->cap : 256;
        while (c < b->len + n + 1)
            c *= 2;
        char *q = realloc(b->p, c);
        if (!q) return false;
        b->p = q;
        b->cap = c;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = 0;
    return true;
}

/* ---- one request in flight ---- */
typedef struct slot {
    CURL *easy;
    struct curl_slist *headers;
    char *body;
    bool chat;
    pg_sse_parser sse;
    double st, last_ts, now; /* now: timestamp of the read being parsed */
    bool got_first;
    double ttft;
    bool status_known;
    long status;
    char errbuf[CURL_ERROR_SIZE];
    gbuf errbody;
    gbuf text;
    double *itl;
    size_t n_itl, cap_itl;
    int32_t n_chunks;
    int32_t usage_tokens, usage_prompt_tokens;
    char *error; /* first problem seen in the stream */
    size_t req_index;
} slot;

static void slot_fail(slot *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void slot_fail(slot *s, const char *fmt, ...) {
    if (s->error) return; /* keep the first */
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    for (char *c = msg; *c; c++)
        if (*c == '\n' || *c == '\r') *c = ' ';
    s->error = strdup(msg);
}

/* The message of an OpenAI-style error object: {"error": {"message": ..}},
 * {"error": "..."}, or {"object": "error", "message": ..}. NULL if `j` is
 * not an error. */
static const char *error_message(const cJSON *j, bool *is_error) {
    *is_error = false;
    const cJSON *err = cJSON_GetObjectItemCaseSensitive(j, "error");
    const cJSON *obj = cJSON_GetObjectItemCaseSensitive(j, "object");
    if (err && !cJSON_IsNull(err)) {
        *is_error = true;
        if (cJSON_IsString(err)) return err->valuestring;
        const cJSON *m = cJSON_GetObjectItemCaseSensitive(err, "message");
        return cJSON_IsString(m) ? m->valuestring : "(no message)";
    }
    if (cJSON_IsString(obj) && !strcmp(obj->valuestring, "error")) {
        *is_error = true;
        const cJSON *m = cJSON_GetObjectItemCaseSensitive(j, "message");
        return cJSON_IsString(m) ? m->valuestring : "(no message)";
    }
    return NULL;
}

/* usage.<key>: -1 when absent or null; an integer in [0, INT32_MAX] */
static pagoda_status usage_count(const cJSON *usage, const char *key, int32_t *out) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(usage, key);
    *out = -1;
    if (!v || cJSON_IsNull(v)) return PAGODA_OK;
    double d = cJSON_IsNumber(v) ? v->valuedouble : -1.0;
    if (!(d >= 0 && d <= (double)INT32_MAX) || d != floor(d)) {
        char *txt = cJSON_PrintUnformatted(v);
        pagoda_status st = pg_error(PAGODA_ERR_FORMAT, "usage.%s is not a token count: %.40s", key,
                                    txt ? txt : "?");
        cJSON_free(txt);
        return st;
    }
    *out = (int32_t)d;
    return PAGODA_OK;
}

pagoda_status pg_bench_event_parse(const char *data, size_t len, bool chat, pg_bench_event *ev) {
    memset(ev, 0, sizeof *ev);
    ev->completion_tokens = ev->prompt_tokens = -1;
    if (len == 6 && !memcmp(data, "[DONE]", 6)) {
        ev->kind = PG_BENCH_EVENT_DONE;
        return PAGODA_OK;
    }
    cJSON *j = cJSON_ParseWithLength(data, len);
    if (!j || !cJSON_IsObject(j)) {
        cJSON_Delete(j);
        return pg_error(PAGODA_ERR_FORMAT, "malformed JSON in the event stream: %.*s",
                        (int)(len < 80 ? len : 80), data);
    }
    bool is_error;
    const char *emsg = error_message(j, &is_error);
    const cJSON *choices = cJSON_GetObjectItemCaseSensitive(j, "choices");
    pagoda_status st = PAGODA_OK;
    if (is_error) {
        ev->kind = PG_BENCH_EVENT_ERROR;
        ev->text = emsg;
    } else if (cJSON_IsArray(choices) && cJSON_GetArraySize(choices) > 0) {
        const cJSON *c0 = cJSON_GetArrayItem(choices, 0);
        const cJSON *txt = chat ? cJSON_GetObjectItemCaseSensitive(
                                      cJSON_GetObjectItemCaseSensitive(c0, "delta"), "content")
                                : cJSON_GetObjectItemCaseSensitive(c0, "text");
        ev->kind = PG_BENCH_EVENT_CHOICE;
        ev->text = cJSON_IsString(txt) ? txt->valuestring : NULL;
    } else {
        const cJSON *usage = cJSON_GetObjectItemCaseSensitive(j, "usage");
        ev->kind = PG_BENCH_EVENT_OTHER;
        st = usage_count(usage, "completion_tokens", &ev->completion_tokens);
        if (!st) st = usage_count(usage, "prompt_tokens", &ev->prompt_tokens);
    }
    if (st) {
        cJSON_Delete(j);
        memset(ev, 0, sizeof *ev);
        return st;
    }
    ev->json = j;
    return PAGODA_OK;
}

void pg_bench_event_free(pg_bench_event *ev) {
    cJSON_Delete(ev->json);
    memset(ev, 0, sizeof *ev);
}

static bool on_event(void *ctx, const char *data, size_t len) {
    slot *s = ctx;
    pg_bench_event ev;
    if (pg_bench_event_parse(data, len, s->chat, &ev) != PAGODA_OK) {
        slot_fail(s, "%s", pg_last_error());
        return false;
    }
    if (ev.kind == PG_BENCH_EVENT_DONE) return true;
    if (ev.kind == PG_BENCH_EVENT_ERROR) {
        slot_fail(s, "server error in stream: %s", ev.text);
        pg_bench_event_free(&ev);
        return false;
    }
    if (ev.kind == PG_BENCH_EVENT_CHOICE) {
        if (!s->got_first) {
            s->got_first = true;
            s->ttft = s->now - s->st;
        } else {
            if (s->n_itl == s->cap_itl) {
                size_t c = s->cap_itl ? s->cap_itl * 2 : 64;
                double *g = realloc(s->itl, c * sizeof *g);
                if (!g) {
                    slot_fail(s, "out of memory recording %zu inter-token gaps", c);
                    pg_bench_event_free(&ev);
                    return false;
                }
                s->itl = g;
                s->cap_itl = c;
            }
            s->itl[s->n_itl++] = s->now - s->last_ts;
        }
        s->last_ts = s->now;
        s->n_chunks++;
        if (ev.text && !gbuf_add(&s->text, ev.text, strlen(ev.text))) {
            slot_fail(s, "out of memory for the generated text");
            pg_bench_event_free(&ev);
            return false;
        }
    } else {
        if (ev.completion_tokens >= 0) s->usage_tokens = ev.completion_tokens;
        if (ev.prompt_tokens >= 0) s->usage_prompt_tokens = ev.prompt_tokens;
    }
    /* vLLM's chat client moves its "most recent" timestamp on every data
     * event (the usage event included); its completions client only on
     * choice-carrying ones. */
    if (s->chat && s->got_first) s->last_ts = s->now;
    pg_bench_event_free(&ev);
    return true;
}

static size_t on_write(char *ptr, size_t size, size_t nmemb, void *ud) {
    slot *s = ud;
    size_t n = size * nmemb;
    if (!s->status_known) {
        curl_easy_getinfo(s->easy, CURLINFO_RESPONSE_CODE, &s->status);
        s->status_known = true;
    }
    if (s->status != 200) {
        size_t room = s->errbody.len < ERRBODY_MAX ? ERRBODY_MAX - s->errbody.len : 0;
        if (room) gbuf_add(&s->errbody, ptr, n < room ? n : room);
        return n;
    }
    s->now = pg_bench_now();
    if (pg_sse_feed(&s->sse, ptr, n, on_event, s) != PAGODA_OK) {
        slot_fail(s, "%s", pg_last_error());
        return 0; /* abort the transfer */
    }
    return n;
}

static void slot_free(slot *s) {
    if (!s) return;
    if (s->easy) curl_easy_cleanup(s->easy);
    curl_slist_free_all(s->headers);
    free(s->body);
    pg_sse_free(&s->sse);
    free(s->errbody.p);
    free(s->text.p);
    free(s->itl);
    free(s->error);
    free(s);
}

/* The JSON body of request `r`, malloc'ed. */
static char *build_body(const pg_bench_client_cfg *cfg, bool chat, const pg_bench_request *r) {
    cJSON *o = cJSON_CreateObject();
    if (!o) return NULL;
    cJSON_AddStringToObject(o, "model", cfg->model);
    if (chat) {
        cJSON *msgs = cJSON_AddArrayToObject(o, "messages");
        cJSON *m = cJSON_CreateObject();
        cJSON_AddItemToArray(msgs, m);
        cJSON_AddStringToObject(m, "role", "user");
        cJSON_AddStringToObject(m, "content", r->prompt);
    } else if (cfg->prompt_as_ids) {
        cJSON *ids = cJSON_AddArrayToObject(o, "prompt");
        for (int32_t i = 0; i < r->prompt_len; i++)
            cJSON_AddItemToArray(ids, cJSON_CreateNumber(r->prompt_ids[i]));
    } else {
        cJSON_AddStringToObject(o, "prompt", r->prompt);
    }
    cJSON_AddNumberToObject(o, "temperature", 0.0);
    cJSON_AddNumberToObject(o, "max_tokens", r->output_len);
    if (chat) cJSON_AddNumberToObject(o, "max_completion_tokens", r->output_len);
    cJSON_AddTrueToObject(o, "stream");
    cJSON *so = cJSON_AddObjectToObject(o, "stream_options");
    cJSON_AddTrueToObject(so, "include_usage");
    if (cfg->ignore_eos) cJSON_AddTrueToObject(o, "ignore_eos");
    char *s = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return s;
}

static struct curl_slist *make_headers(const char *api_key, bool json_body) {
    struct curl_slist *h = NULL, *t;
    if (json_body) {
        if (!(t = curl_slist_append(h, "Content-Type: application/json"))) goto fail;
        h = t;
        if (!(t = curl_slist_append(h, "Expect:"))) goto fail; /* no 100-continue round trip */
        h = t;
    }
    if (api_key && *api_key) {
        char line[1024];
        snprintf(line, sizeof line, "Authorization: Bearer %s", api_key);
        if (!(t = curl_slist_append(h, line))) goto fail;
        h = t;
    }
    return h;
fail:
    curl_slist_free_all(h);
    return NULL;
}

static char *join_url(const char *base, const char *path) {
    size_t nb = strlen(base);
    while (nb && base[nb - 1] == '/')
        nb--;
    const char *p = path;
    while (*p == '/')
        p++;
    size_t len = nb + 1 + strlen(p) + 1;
    char *u = malloc(len);
    if (u) snprintf(u, len, "%.*s/%s", (int)nb, base, p);
    return u;
}

static void set_common(CURL *e, const char *url, double timeout_s, char *errbuf) {
    curl_easy_setopt(e, CURLOPT_URL, url);
    curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(e, CURLOPT_TCP_NODELAY, 1L);
    curl_easy_setopt(e, CURLOPT_ERRORBUFFER, errbuf);
    curl_easy_setopt(e, CURLOPT_TIMEOUT_MS,
                     (long)((timeout_s > 0 ? timeout_s : 6 * 3600.0) * 1000));
    curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, 30000L);
    errbuf[0] = 0;
}

static slot *slot_start(const pg_bench_client_cfg *cfg, bool chat, const char *url,
                        const pg_bench_request *r) {
    slot *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    s->chat = chat;
    s->usage_tokens = -1;
    s->usage_prompt_tokens = -1;
    pg_sse_init(&s->sse);
    s->body = build_body(cfg, chat, r);
    s->headers = make_headers(cfg->api_key, true);
    s->easy = curl_easy_init();
    if (!s->body || !s->headers || !s->easy) {
        slot_free(s);
        return NULL;
    }
    CURL *e = s->easy;
    set_common(e, url, cfg->timeout_s, s->errbuf);
    curl_easy_setopt(e, CURLOPT_POST, 1L);
    curl_easy_setopt(e, CURLOPT_POSTFIELDS, s->body);
    curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE, (long)strlen(s->body));
    curl_easy_setopt(e, CURLOPT_HTTPHEADER, s->headers);
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_write);
    curl_easy_setopt(e, CURLOPT_WRITEDATA, s);
    curl_easy_setopt(e, CURLOPT_PRIVATE, s);
    return s;
}

/* The first line of an HTTP error body, or its JSON error message. */
static void http_error(slot *s) {
    const char *body = s->errbody.p ? s->errbody.p : "";
    cJSON *j = cJSON_Parse(body);
    bool is_error = false;
    const char *msg = j ? error_message(j, &is_error) : NULL;
    if (msg)
        slot_fail(s, "HTTP %ld: %s", s->status, msg);
    else
        slot_fail(s, "HTTP %ld: %.200s", s->status, *body ? body : "(empty body)");
    cJSON_Delete(j);
}

/* A finished transfer: fill the result and free the slot. */
static void slot_finish(slot *s, CURLcode rc, double t0, pg_bench_req_result *res) {
    memset(res, 0, sizeof *res);
    res->start_time = s->st - t0;
    res->usage_tokens = -1;
    res->usage_prompt_tokens = -1;
    curl_easy_getinfo(s->easy, CURLINFO_RESPONSE_CODE, &s->status);
    if (rc != CURLE_OK) {
        slot_fail(s, "%s", s->errbuf[0] ? s->errbuf : curl_easy_strerror(rc));
    } else if (s->status != 200) {
        http_error(s);
    } else {
        s->now = pg_bench_now();
        if (pg_sse_finish(&s->sse, on_event, s) != PAGODA_OK) slot_fail(s, "%s", pg_last_error());
        if (!s->got_first) slot_fail(s, "the response carried no chunk with choices");
    }
    if (s->error) {
        res->error = s->error;
        s->error = NULL;
    } else {
        res->success = true;
        res->ttft = s->ttft;
        res->latency = s->last_ts - s->st;
        res->n_chunks = s->n_chunks;
        res->usage_tokens = s->usage_tokens;
        res->usage_prompt_tokens = s->usage_prompt_tokens;
        res->itl = s->itl;
        res->n_itl = s->n_itl;
        s->itl = NULL;
        res->text = s->text.p ? s->text.p : strdup("");
        res->text_len = s->text.len;
        s->text.p = NULL;
    }
    slot_free(s);
}

void pg_bench_req_result_free(pg_bench_req_result *r) {
    free(r->itl);
    free(r->text);
    free(r->error);
    memset(r, 0, sizeof *r);
}

static void progress(size_t done, size_t n, double elapsed, bool final) {
    const int width = 40;
    int fill = n ? (int)((double)done / (double)n * width) : width;
    char bar[64];
    for (int i = 0; i < width; i++)
        bar[i] = i < fill ? '#' : '.';
    bar[width] = 0;
    fprintf(stderr, "\r%3d%% |%s| %zu/%zu [%.1fs]%s",
            n ? (int)(100.0 * (double)done / (double)n) : 100, bar, done, n, elapsed,
            final ? "\n" : "");
    fflush(stderr);
}

pagoda_status pg_bench_client_run(const pg_bench_client_cfg *cfg, const pg_bench_request *reqs,
                                  size_t n, const double *arrivals, pg_bench_req_result *results,
                                  double *duration_s) {
    *duration_s = 0.0;
    bool chat = pg_bench_endpoint_is_chat(cfg->endpoint);
    if (chat && cfg->prompt_as_ids)
        return pg_error(PAGODA_ERR_INVALID_ARG,
                        "bench: token-id prompts need /v1/completions, not %s", cfg->endpoint);
    for (size_t i = 0; i < n; i++) {
        if (!cfg->prompt_as_ids && !reqs[i].prompt)
            return pg_error(PAGODA_ERR_INVALID_ARG,
                            "bench: request %zu has no prompt text (no tokenizer: use "
                            "--prompt-as-ids)",
                            i);
        if (cfg->prompt_as_ids && !reqs[i].prompt_ids && reqs[i].prompt_len > 0)
            return pg_error(PAGODA_ERR_INVALID_ARG, "bench: request %zu has no prompt ids", i);
    }
    pagoda_status st = ensure_curl();
    if (st != PAGODA_OK) return st;
    char *url = join_url(cfg->base_url, cfg->endpoint);
    CURLM *multi = curl_multi_init();
    slot **live = calloc(n ? n : 1, sizeof(slot *));
    if (!url || !multi || !live) {
        free(url);
        free(live);
        if (multi) curl_multi_cleanup(multi);
        return pg_error(PAGODA_ERR_NOMEM, "bench: cannot set up curl");
    }
    curl_multi_setopt(multi, CURLMOPT_MAX_TOTAL_CONNECTIONS, 0L);
    curl_multi_setopt(multi, CURLMOPT_MAXCONNECTS,
                      cfg->max_concurrency > 0 ? (long)cfg->max_concurrency : (long)(n ? n : 1));

    double t0 = pg_bench_now(), last_draw = -1.0;
    size_t next = 0, done = 0, in_flight = 0;
    size_t limit = cfg->max_concurrency > 0 ? (size_t)cfg->max_concurrency : SIZE_MAX;
    while (done < n) {
        while (next < n && in_flight < limit && arrivals[next] <= pg_bench_now() - t0) {
            slot *s = slot_start(cfg, chat, url, &reqs[next]);
            if (!s) {
                st = pg_error(PAGODA_ERR_NOMEM, "bench: cannot prepare request %zu", next);
                goto out;
            }
            s->req_index = next;
            live[next] = s;
            s->st = pg_bench_now();
            s->last_ts = s->st;
            if (curl_multi_add_handle(multi, s->easy) != CURLM_OK) {
                live[next] = NULL;
                slot_free(s);
                st = pg_error(PAGODA_ERR_INTERNAL, "bench: curl_multi_add_handle failed");
                goto out;
            }
            next++;
            in_flight++;
        }
        int running = 0;
        CURLMcode mc = curl_multi_perform(multi, &running);
        if (mc != CURLM_OK) {
            st = pg_error(PAGODA_ERR_INTERNAL, "bench: curl_multi_perform: %s",
                          curl_multi_strerror(mc));
            goto out;
        }
        CURLMsg *msg;
        int queued;
        while ((msg = curl_multi_info_read(multi, &queued))) {
            if (msg->msg != CURLMSG_DONE) continue;
            slot *s = NULL;
            curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, (char **)&s);
            CURLcode rc = msg->data.result;
            curl_multi_remove_handle(multi, s->easy);
            size_t idx = s->req_index;
            live[idx] = NULL;
            slot_finish(s, rc, t0, &results[idx]);
            in_flight--;
            done++;
        }
        double now = pg_bench_now();
        if (cfg->progress && (now - last_draw >= 0.1 || done == n)) {
            progress(done, n, now - t0, done == n);
            last_draw = now;
        }
        if (done == n) break;
        long wait_ms = 100;
        if (next < n && in_flight < limit) {
            double dt = arrivals[next] - (now - t0);
            if (dt <= 0) continue;
            if (dt * 1000.0 < (double)wait_ms) wait_ms = (long)ceil(dt * 1000.0);
        }
        mc = curl_multi_poll(multi, NULL, 0, (int)wait_ms, NULL);
        if (mc != CURLM_OK) {
            st = pg_error(PAGODA_ERR_INTERNAL, "bench: curl_multi_poll: %s",
                          curl_multi_strerror(mc));
            goto out;
        }
    }
    *duration_s = pg_bench_now() - t0;
out:
    for (size_t i = 0; i < n; i++) { /* only after an error: abandon what is in flight */
        if (!live[i]) continue;
        curl_multi_remove_handle(multi, live[i]->easy);
        slot_free(live[i]);
    }
    free(live);
    curl_multi_cleanup(multi);
    free(url);
    return st;
}

static size_t on_write_buf(char *ptr, size_t size, size_t nmemb, void *ud) {
    gbuf *b = ud;
    size_t n = size * nmemb;
    if (b->len + n > ((size_t)16 << 20)) return 0; /* a model list is not this big */
    return gbuf_add(b, ptr, n) ? n : 0;
}

pagoda_status pg_bench_fetch_model(const char *base_url, const char *api_key, double timeout_s,
                                   char **model) {
    *model = NULL;
    pagoda_status st = ensure_curl();
    if (st != PAGODA_OK) return st;
    char *url = join_url(base_url, "/v1/models");
    struct curl_slist *h = make_headers(api_key, false);
    CURL *e = curl_easy_init();
    gbuf b = {0};
    char errbuf[CURL_ERROR_SIZE];
    if (!url || !e) {
        st = pg_error(PAGODA_ERR_NOMEM, "bench: cannot set up curl");
        goto out;
    }
    set_common(e, url, timeout_s, errbuf);
    if (h) curl_easy_setopt(e, CURLOPT_HTTPHEADER, h);
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_write_buf);
    curl_easy_setopt(e, CURLOPT_WRITEDATA, &b);
    CURLcode rc = curl_easy_perform(e);
    long status = 0;
    curl_easy_getinfo(e, CURLINFO_RESPONSE_CODE, &status);
    if (rc != CURLE_OK) {
        st =
            pg_error(PAGODA_ERR_IO, "GET %s: %s", url, errbuf[0] ? errbuf : curl_easy_strerror(rc));
        goto out;
    }
    if (status != 200) {
        st = pg_error(PAGODA_ERR_IO, "GET %s: HTTP %ld: %.200s", url, status, b.p ? b.p : "");
        goto out;
    }
    cJSON *j = cJSON_Parse(b.p ? b.p : "");
    const cJSON *data = cJSON_GetObjectItemCaseSensitive(j, "data");
    const cJSON *id = cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(data, 0), "id");
    if (cJSON_IsString(id) && id->valuestring[0]) {
        *model = strdup(id->valuestring);
        if (!*model) st = pg_error(PAGODA_ERR_NOMEM, "bench: no memory");
    } else {
        st = pg_error(PAGODA_ERR_FORMAT, "GET %s: the reply has no data[0].id (give --model)", url);
    }
    cJSON_Delete(j);
out:
    if (e) curl_easy_cleanup(e);
    curl_slist_free_all(h);
    free(url);
    free(b.p);
    return st;
}
