/* The audio endpoints' request side and serving several models, without a
 * speech model:
 *  - pg_audio_form (server/audio_form.h): parts, limits, every field rule;
 *  - the real server in this process on two chat models (stories260K-hf
 *    and stories260K-hf-bf16) with libcurl clients: /v1/models lists both
 *    with their task, requests route by `model` (absent: the first), an
 *    unknown model is a 404 naming both, /metrics labels each model once per
 *    family, both engines serve concurrent streams (one engine thread), and
 *    audio requests that must fail before any model runs: wrong
 *    content type 415, no boundary / a boundary libmicrohttpd misreads
 *    (a parameter after it, one character) / truncated body 400, missing or empty
 *    file 400, bad fields 400, a file over --max-audio-bytes 413 (form and
 *    Content-Length), a chat model asked to transcribe 400 naming it, no
 *    speech model 400; the server keeps answering afterwards. */
#define _GNU_SOURCE
#include "testutil.h"

#include <cjson/cJSON.h>
#include <curl/curl.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pagoda.h"
#include "server/audio_form.h"
#include "server/server.h"

/* ------------------------------------------------------------------ form */

static pg_audio_form *form_with(const char *const *kv, size_t n_kv, const void *file,
                                size_t file_len, size_t max_file) {
    pg_audio_form *f = pg_audio_form_create(max_file);
    assert_non_null(f);
    pg_api_error err;
    for (size_t i = 0; i + 1 < n_kv; i += 2)
        assert_int_equal(pg_audio_form_add(f, kv[i], NULL, kv[i + 1], 0, strlen(kv[i + 1]), &err),
                         PAGODA_OK);
    if (file) {
        /* in two chunks, as the post processor may hand them over */
        size_t half = file_len / 2;
        assert_int_equal(pg_audio_form_add(f, "file", "a.wav", file, 0, half, &err), PAGODA_OK);
        assert_int_equal(pg_audio_form_add(f, "file", "a.wav", (const char *)file + half, half,
                                           file_len - half, &err),
                         PAGODA_OK);
    }
    return f;
}

/* finish must fail with `status` naming `param` and mentioning `needle`. */
static void expect_finish_error(const char *const *kv, size_t n_kv, int status, const char *param,
                                const char *needle) {
    pg_audio_form *f = form_with(kv, n_kv, "RIFFdata", 8, 1000);
    pg_audio_params p;
    pg_api_error err;
    assert_int_not_equal(pg_audio_form_finish(f, &p, &err), PAGODA_OK);
    assert_int_equal(err.status, status);
    if (param) assert_string_equal(err.param, param);
    if (!strstr(err.message, needle)) fail_msg("'%s' lacks '%s'", err.message, needle);
    pg_audio_form_free(f);
}

static void test_form_fields(void **state) {
    (void)state;
    const char *kv[] = {"model",
                        "whisper",
                        "language",
                        "en",
                        "prompt",
                        "Hello.",
                        "response_format",
                        "verbose_json",
                        "temperature",
                        "0.2",
                        "timestamp_granularities[]",
                        "segment",
                        "stream",
                        "true",
                        "seed",
                        "-5",
                        "top_p",
                        "0.9",
                        "top_k",
                        "40",
                        "min_p",
                        "0.05",
                        "frequency_penalty",
                        "0.5",
                        "presence_penalty",
                        "-0.5",
                        "repetition_penalty",
                        "1.1",
                        "max_completion_tokens",
                        "100",
                        "chunking_strategy",
                        "auto"}; /* unknown: ignored */
    pg_audio_form *f = form_with(kv, sizeof kv / sizeof kv[0], "0123456789", 10, 10);
    pg_audio_params p;
    pg_api_error err;
    assert_int_equal(pg_audio_form_finish(f, &p, &err), PAGODA_OK);
    assert_int_equal(p.file_len, 10);
    assert_memory_equal(p.file, "0123456789", 10);
    assert_string_equal(p.filename, "a.wav");
    assert_string_equal(p.model, "whisper");
    assert_string_equal(p.language, "en");
    assert_string_equal(p.prompt, "Hello.");
    assert_int_equal(p.format, PG_TFMT_VERBOSE_JSON);
    assert_float_equal(p.temperature, 0.2f, 1e-7);
    assert_true(p.stream);
    assert_int_equal(p.seed, INT64_MAX - 4); /* -5 & INT64_MAX */
    assert_true(p.top_p_set && p.top_k_set && p.min_p_set);
    assert_float_equal(p.top_p, 0.9f, 1e-7);
    assert_int_equal(p.top_k, 40);
    assert_true(p.frequency_penalty_set && p.presence_penalty_set && p.repetition_penalty_set);
    assert_float_equal(p.presence_penalty, -0.5f, 1e-7);
    assert_int_equal(p.max_tokens, 100);
    pg_audio_form_free(f);

    /* defaults */
    f = form_with(NULL, 0, "x", 1, 10);
    assert_int_equal(pg_audio_form_finish(f, &p, &err), PAGODA_OK);
    assert_null(p.model);
    assert_null(p.language);
    assert_int_equal(p.format, PG_TFMT_JSON);
    assert_false(p.stream);
    assert_int_equal(p.seed, -1);
    assert_false(p.top_p_set);
    assert_float_equal(p.temperature, 0.0f, 0);
    pg_audio_form_free(f);

    static const struct {
        const char *name;
        pg_transcript_format f;
    } fmts[] = {{"json", PG_TFMT_JSON},
                {"text", PG_TFMT_TEXT},
                {"srt", PG_TFMT_SRT},
                {"vtt", PG_TFMT_VTT},
                {"verbose_json", PG_TFMT_VERBOSE_JSON}};
    for (size_t i = 0; i < sizeof fmts / sizeof fmts[0]; i++) {
        const char *k2[] = {"response_format", fmts[i].name};
        f = form_with(k2, 2, "x", 1, 10);
        assert_int_equal(pg_audio_form_finish(f, &p, &err), PAGODA_OK);
        assert_int_equal(p.format, fmts[i].f);
        pg_audio_form_free(f);
    }
}

static void test_form_errors(void **state) {
    (void)state;
#define BAD(k, v, status, param, needle)                                                           \
    do {                                                                                           \
        const char *kv_[] = {k, v};                                                                \
        expect_finish_error(kv_, 2, status, param, needle);                                        \
    } while (0)
    BAD("response_format", "xml", 400, "response_format", "json, text, srt, vtt, verbose_json");
    BAD("response_format", "JSON", 400, "response_format", "got 'JSON'");
    BAD("temperature", "1.5", 400, "temperature", "[0, 1]");
    BAD("temperature", "-0.1", 400, "temperature", "[0, 1]");
    BAD("temperature", "hot", 400, "temperature", "got 'hot'");
    BAD("temperature", "nan", 400, "temperature", "[0, 1]");
    BAD("timestamp_granularities[]", "word", 400, "timestamp_granularities[]",
        "'word' is not supported");
    BAD("timestamp_granularities[]", "char", 400, "timestamp_granularities[]", "'segment'");
    BAD("stream", "yes", 400, "stream", "true or false");
    BAD("seed", "1.5", 400, "seed", "integer");
    BAD("seed", "99999999999999999999", 400, "seed", "integer");
    BAD("top_p", "0", 400, "top_p", "(0, 1]");
    BAD("top_k", "-2", 400, "top_k", ">= -1");
    BAD("min_p", "2", 400, "min_p", "[0, 1]");
    BAD("frequency_penalty", "3", 400, "frequency_penalty", "[-2, 2]");
    BAD("repetition_penalty", "0", 400, "repetition_penalty", "> 0");
    BAD("max_completion_tokens", "0", 400, "max_completion_tokens", ">= 1");
    BAD("language", "\xff\xfe", 400, "language", "not valid UTF-8");
#undef BAD
    /* word among segment */
    const char *both[] = {"timestamp_granularities[]", "segment", "timestamp_granularities[]",
                          "word"};
    expect_finish_error(both, 4, 400, "timestamp_granularities[]", "not supported");

    pg_audio_params p;
    pg_api_error err;
    /* no file part; an empty one */
    pg_audio_form *f = form_with(NULL, 0, NULL, 0, 10);
    assert_int_not_equal(pg_audio_form_finish(f, &p, &err), PAGODA_OK);
    assert_int_equal(err.status, 400);
    assert_string_equal(err.param, "file");
    assert_non_null(strstr(err.message, "no 'file' part"));
    pg_audio_form_free(f);
    f = pg_audio_form_create(10);
    assert_int_equal(pg_audio_form_add(f, "file", "empty.wav", "", 0, 0, &err), PAGODA_OK);
    assert_int_not_equal(pg_audio_form_finish(f, &p, &err), PAGODA_OK);
    assert_int_equal(err.status, 400);
    assert_non_null(strstr(err.message, "'empty.wav' is empty"));
    pg_audio_form_free(f);

    /* over the file limit: 413 with the limit, whichever chunk crosses it */
    f = pg_audio_form_create(10);
    assert_int_equal(pg_audio_form_add(f, "file", "a.wav", "0123456789", 0, 10, &err), PAGODA_OK);
    assert_int_not_equal(pg_audio_form_add(f, "file", "a.wav", "x", 10, 1, &err), PAGODA_OK);
    assert_int_equal(err.status, 413);
    assert_non_null(strstr(err.message, "10 bytes"));
    assert_non_null(strstr(err.message, "--max-audio-bytes"));
    pg_audio_form_free(f);

    /* a second file part; a repeated field; a NUL byte; a long field */
    f = pg_audio_form_create(100);
    assert_int_equal(pg_audio_form_add(f, "file", "a.wav", "abc", 0, 3, &err), PAGODA_OK);
    assert_int_equal(pg_audio_form_add(f, "model", NULL, "m", 0, 1, &err), PAGODA_OK);
    assert_int_not_equal(pg_audio_form_add(f, "file", "b.wav", "def", 0, 3, &err), PAGODA_OK);
    assert_int_equal(err.status, 400);
    assert_non_null(strstr(err.message, "more than one 'file'"));
    assert_int_not_equal(pg_audio_form_add(f, "model", NULL, "n", 0, 1, &err), PAGODA_OK);
    assert_non_null(strstr(err.message, "'model' more than once"));
    assert_int_not_equal(pg_audio_form_add(f, "prompt", NULL, "a\0b", 0, 3, &err), PAGODA_OK);
    assert_non_null(strstr(err.message, "NUL"));
    char *big = malloc(PG_AUDIO_FORM_MAX_FIELD + 1);
    memset(big, 'a', PG_AUDIO_FORM_MAX_FIELD + 1);
    assert_int_equal(pg_audio_form_add(f, "language", NULL, big, 0, PG_AUDIO_FORM_MAX_FIELD, &err),
                     PAGODA_OK);
    assert_int_not_equal(
        pg_audio_form_add(f, "language", NULL, big, PG_AUDIO_FORM_MAX_FIELD, 1, &err), PAGODA_OK);
    assert_non_null(strstr(err.message, "longer than"));
    free(big);
    pg_audio_form_free(f);

    /* a text field in chunks is joined; an empty first call at offset 0 is
     * not a second field (MHD may deliver parts that way) */
    f = pg_audio_form_create(100);
    assert_int_equal(pg_audio_form_add(f, "prompt", NULL, "", 0, 0, &err), PAGODA_OK);
    assert_int_equal(pg_audio_form_add(f, "prompt", NULL, "Hel", 0, 3, &err), PAGODA_OK);
    assert_int_equal(pg_audio_form_add(f, "prompt", NULL, "lo", 3, 2, &err), PAGODA_OK);
    assert_int_equal(pg_audio_form_add(f, "file", "a.wav", "", 0, 0, &err), PAGODA_OK);
    assert_int_equal(pg_audio_form_add(f, "file", "a.wav", "abc", 0, 3, &err), PAGODA_OK);
    assert_int_equal(pg_audio_form_finish(f, &p, &err), PAGODA_OK);
    assert_string_equal(p.prompt, "Hello");
    assert_int_equal(p.file_len, 3);
    pg_audio_form_free(f);
}

/* ------------------------------------------------------ server + libcurl */

static pagoda_engine *g_engines[2];
static pg_server *g_srv;
static char g_base[64];

static int setup(void **state) {
    (void)state;
    curl_global_init(CURL_GLOBAL_ALL);
    const char *dirs[2] = {"llm/stories260K-hf", "llm/stories260K-hf-bf16"};
    for (int k = 0; k < 2; k++) {
        pagoda_engine_options o;
        pagoda_engine_options_default(&o);
        o.kv_cache_memory = 32u << 20;
        o.num_threads = k == 0 ? 1 : 0; /* the second shares the configured pool */
        o.seed = 7;
        if (pagoda_engine_create(pg_test_asset(dirs[k]), &o, &g_engines[k]) != PAGODA_OK) {
            fprintf(stderr, "engine: %s\n", pagoda_last_error());
            return -1;
        }
    }
    pg_server_options so = {0};
    so.port = 0;
    so.max_audio_bytes = 4096;
    if (pg_server_start_models(g_engines, 2, &so, &g_srv) != PAGODA_OK) {
        fprintf(stderr, "server: %s\n", pagoda_last_error());
        return -1;
    }
    snprintf(g_base, sizeof g_base, "http://127.0.0.1:%d", pg_server_port(g_srv));
    return 0;
}

static int teardown(void **state) {
    (void)state;
    pg_server_stop(g_srv);
    for (int k = 0; k < 2; k++)
        pagoda_engine_free(g_engines[k]);
    curl_global_cleanup();
    return 0;
}

typedef struct buf {
    char *p;
    size_t n;
} buf;

static size_t on_data(char *d, size_t sz, size_t nm, void *u) {
    buf *b = u;
    size_t n = sz * nm;
    char *q = realloc(b->p, b->n + n + 1);
    if (!q) return 0;
    memcpy(q + b->n, d, n);
    b->p = q;
    b->n += n;
    b->p[b->n] = 0;
    return n;
}

/* One request: JSON body (json != NULL), a multipart form (mime != NULL,
 * consumed) or a raw body with its content type; GET when all are NULL.
 * Returns the status; *out the body (malloc'ed). */
static long request(const char *path, const char *json, curl_mime *mime, const char *raw,
                    const char *raw_type, char **out) {
    CURL *c = curl_easy_init();
    assert_non_null(c);
    char url[256];
    snprintf(url, sizeof url, "%s%s", g_base, path);
    buf b = {calloc(1, 1), 0};
    struct curl_slist *h = NULL;
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_data);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &b);
    curl_easy_setopt(c, CURLOPT_TIMEOUT, 60L);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    if (json) {
        h = curl_slist_append(h, "Content-Type: application/json");
        curl_easy_setopt(c, CURLOPT_POSTFIELDS, json);
    } else if (mime) {
        curl_easy_setopt(c, CURLOPT_MIMEPOST, mime);
    } else if (raw) {
        char ct[200];
        snprintf(ct, sizeof ct, "Content-Type: %s", raw_type);
        h = curl_slist_append(h, ct);
        curl_easy_setopt(c, CURLOPT_POSTFIELDS, raw);
    }
    if (h) curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
    CURLcode rc = curl_easy_perform(c);
    if (rc != CURLE_OK) fail_msg("%s: %s", path, curl_easy_strerror(rc));
    long status = 0;
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
    curl_easy_cleanup(c);
    curl_slist_free_all(h);
    if (mime) curl_mime_free(mime);
    *out = b.p;
    return status;
}

/* A form with `file` (bytes; NULL = no file part) and field pairs. */
static curl_mime *form(const void *file, size_t len, const char *const *kv, size_t n_kv) {
    CURL *c = curl_easy_init();
    curl_mime *m = curl_mime_init(c);
    curl_easy_cleanup(c); /* the mime handle does not need it afterwards */
    for (size_t i = 0; i + 1 < n_kv; i += 2) {
        curl_mimepart *p = curl_mime_addpart(m);
        curl_mime_name(p, kv[i]);
        curl_mime_data(p, kv[i + 1], CURL_ZERO_TERMINATED);
    }
    if (file) {
        curl_mimepart *p = curl_mime_addpart(m);
        curl_mime_name(p, "file");
        curl_mime_filename(p, "speech.wav");
        curl_mime_type(p, "audio/wav");
        curl_mime_data(p, file, len);
    }
    return m;
}

/* body is an OpenAI error with `status`-typed message containing needle. */
static void expect_error(long status, long want, char *body, const char *needle) {
    if (status != want) fail_msg("status %ld, want %ld: %s", status, want, body);
    cJSON *o = cJSON_Parse(body);
    assert_non_null(o);
    cJSON *e = cJSON_GetObjectItem(o, "error");
    assert_non_null(e);
    const char *msg = cJSON_GetStringValue(cJSON_GetObjectItem(e, "message"));
    assert_non_null(msg);
    if (!strstr(msg, needle)) fail_msg("'%s' lacks '%s'", msg, needle);
    cJSON_Delete(o);
    free(body);
}

static void test_models_and_routing(void **state) {
    (void)state;
    char *body = NULL;
    assert_int_equal(request("/v1/models", NULL, NULL, NULL, NULL, &body), 200);
    cJSON *o = cJSON_Parse(body);
    cJSON *data = cJSON_GetObjectItem(o, "data");
    assert_int_equal(cJSON_GetArraySize(data), 2);
    const char *want[2] = {"stories260K-hf", "stories260K-hf-bf16"};
    for (int k = 0; k < 2; k++) {
        cJSON *m = cJSON_GetArrayItem(data, k);
        assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItem(m, "id")), want[k]);
        assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItem(m, "task")), "generate");
        cJSON *caps = cJSON_GetObjectItem(m, "capabilities");
        assert_true(cJSON_IsArray(caps));
        assert_string_equal(cJSON_GetStringValue(cJSON_GetArrayItem(caps, 0)), "completion");
    }
    cJSON_Delete(o);
    free(body);

    /* by name, and the first model without one (the same greedy text as
     * naming it) */
    char texts[3][256];
    const char *reqs[3] = {
        "{\"model\":\"stories260K-hf\",\"prompt\":\"Once "
        "upon\",\"max_tokens\":24,\"temperature\":0}",
        "{\"model\":\"stories260K-hf-bf16\",\"prompt\":\"Once upon\",\"max_tokens\":24,"
        "\"temperature\":0}",
        "{\"prompt\":\"Once upon\",\"max_tokens\":24,\"temperature\":0}"};
    const char *model_of[3] = {"stories260K-hf", "stories260K-hf-bf16", "stories260K-hf"};
    for (int k = 0; k < 3; k++) {
        long st = request("/v1/completions", reqs[k], NULL, NULL, NULL, &body);
        if (st != 200) fail_msg("%ld: %s", st, body);
        o = cJSON_Parse(body);
        assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItem(o, "model")), model_of[k]);
        cJSON *ch = cJSON_GetArrayItem(cJSON_GetObjectItem(o, "choices"), 0);
        snprintf(texts[k], sizeof texts[k], "%s",
                 cJSON_GetStringValue(cJSON_GetObjectItem(ch, "text")));
        cJSON_Delete(o);
        free(body);
    }
    assert_string_equal(texts[0], texts[2]);
    /* unknown model: 404 naming both */
    long st = request("/v1/completions", "{\"model\":\"gpt-4\",\"prompt\":\"a\"}", NULL, NULL, NULL,
                      &body);
    expect_error(st, 404, body, "`stories260K-hf`, `stories260K-hf-bf16`");
    /* tokenize routes too: the two models share a vocabulary, so counts agree */
    st = request("/tokenize", "{\"model\":\"stories260K-hf-bf16\",\"prompt\":\"Once upon\"}", NULL,
                 NULL, NULL, &body);
    assert_int_equal(st, 200);
    free(body);
    st = request("/tokenize", "{\"model\":\"nope\",\"prompt\":\"Once upon\"}", NULL, NULL, NULL,
                 &body);
    expect_error(st, 404, body, "`nope` does not exist");
}

typedef struct stream_arg {
    const char *model;
    long status;
    int chunks;
    bool done;
    char *model_seen;
} stream_arg;

static void *stream_thread(void *p) {
    stream_arg *a = p;
    char json[256];
    snprintf(json, sizeof json,
             "{\"model\":\"%s\",\"prompt\":\"Once upon a time\",\"max_tokens\":200,"
             "\"ignore_eos\":true,\"stream\":true}",
             a->model);
    char *body = NULL;
    a->status = request("/v1/completions", json, NULL, NULL, NULL, &body);
    for (char *q = body; (q = strstr(q, "data: ")); q += 6) {
        if (!strncmp(q + 6, "[DONE]", 6)) {
            a->done = true;
            continue;
        }
        a->chunks++;
        if (!a->model_seen) {
            cJSON *o = cJSON_Parse(q + 6);
            const char *m = o ? cJSON_GetStringValue(cJSON_GetObjectItem(o, "model")) : NULL;
            a->model_seen = m ? strdup(m) : NULL;
            cJSON_Delete(o);
        }
    }
    free(body);
    return NULL;
}

/* Both engines at once: one engine thread steps them in turn. */
static void test_concurrent_models(void **state) {
    (void)state;
    stream_arg a[4] = {{.model = "stories260K-hf"},
                       {.model = "stories260K-hf-bf16"},
                       {.model = "stories260K-hf"},
                       {.model = "stories260K-hf-bf16"}};
    pthread_t th[4];
    for (int i = 0; i < 4; i++)
        pthread_create(&th[i], NULL, stream_thread, &a[i]);
    for (int i = 0; i < 4; i++)
        pthread_join(th[i], NULL);
    for (int i = 0; i < 4; i++) {
        assert_int_equal(a[i].status, 200);
        assert_true(a[i].done);
        assert_true(a[i].chunks >= 2);
        assert_non_null(a[i].model_seen);
        assert_string_equal(a[i].model_seen, a[i].model);
        free(a[i].model_seen);
    }
    char *body = NULL;
    assert_int_equal(request("/metrics", NULL, NULL, NULL, NULL, &body), 200);
    /* one HELP per family, one sample per model */
    const char *help = "# HELP vllm:num_requests_running ";
    char *first = strstr(body, help);
    assert_non_null(first);
    assert_null(strstr(first + 1, help));
    assert_non_null(strstr(body, "vllm:num_requests_running{model_name=\"stories260K-hf\"} 0\n"));
    assert_non_null(
        strstr(body, "vllm:num_requests_running{model_name=\"stories260K-hf-bf16\"} 0\n"));
    assert_non_null(
        strstr(body, "vllm:kv_cache_usage_perc{model_name=\"stories260K-hf-bf16\"} 0\n"));
    /* each model finished its own streams (>= 2 by length each) */
    assert_non_null(strstr(
        body,
        "vllm:request_success_total{finished_reason=\"length\",model_name=\"stories260K-hf\"}"));
    for (int k = 0; k < 2; k++) {
        char key[160];
        snprintf(key, sizeof key,
                 "vllm:request_success_total{finished_reason=\"length\",model_name=\"%s\"} ",
                 k ? "stories260K-hf-bf16" : "stories260K-hf");
        char *q = strstr(body, key);
        assert_non_null(q);
        assert_true(atoi(q + strlen(key)) >= 2);
    }
    free(body);
}

static void test_audio_errors(void **state) {
    (void)state;
    char *body = NULL;
    unsigned char wav[64] = "RIFF";
    long st;
    /* not multipart */
    st = request("/v1/audio/transcriptions", "{\"file\":\"x\"}", NULL, NULL, NULL, &body);
    expect_error(st, 415, body, "multipart/form-data");
    st = request("/v1/audio/translations", NULL, NULL, "file=abc",
                 "application/x-www-form-urlencoded", &body);
    expect_error(st, 415, body, "application/x-www-form-urlencoded");
    st = request("/v1/audio/transcriptions", NULL, NULL, "abc", "multipart/form-data", &body);
    expect_error(st, 400, body, "boundary");
    /* Content-Types libmicrohttpd 0.9.75 misreads: a parameter after the
     * boundary became part of it ("the form has no 'file' part"), a
     * one-character boundary was "needs a boundary" */
    const char *two =
        "--XyZ\r\nContent-Disposition: form-data; name=\"file\"; filename=\"a.wav\"\r\n\r\n"
        "RIFF\r\n--XyZ--\r\n";
    st = request("/v1/audio/transcriptions", NULL, NULL, two,
                 "multipart/form-data; boundary=XyZ; charset=utf-8", &body);
    expect_error(st, 400, body, "parameters after 'boundary' are not supported");
    st = request("/v1/audio/transcriptions", NULL, NULL, two,
                 "multipart/form-data; boundary=\"XyZ\" ; charset=utf-8", &body);
    expect_error(st, 400, body, "parameters after 'boundary' are not supported");
    st = request("/v1/audio/transcriptions", NULL, NULL,
                 "--B\r\nContent-Disposition: form-data; name=\"file\"; filename=\"a.wav\"\r\n"
                 "\r\nRIFF\r\n--B--\r\n",
                 "multipart/form-data; boundary=B", &body);
    expect_error(st, 400, body, "a boundary of 1 character is not supported");
    /* boundary last, quoted or not, still reaches the form (no speech model) */
    st = request("/v1/audio/transcriptions", NULL, NULL, two,
                 "multipart/form-data; charset=utf-8; boundary=\"XyZ\"", &body);
    expect_error(st, 400, body, "no model on this server transcribes audio");
    /* a body cut before its closing boundary */
    st = request(
        "/v1/audio/transcriptions", NULL, NULL,
        "--XyZ\r\nContent-Disposition: form-data; name=\"model\"\r\n\r\nwhisper\r\n--XyZ\r\n"
        "Content-Disposition: form-data; name=\"file\"; filename=\"a.wav\"\r\n\r\nRIFF",
        "multipart/form-data; boundary=XyZ", &body);
    assert_int_equal(st, 400);
    free(body);
    /* form errors come before the model */
    st = request("/v1/audio/transcriptions", NULL, form(NULL, 0, NULL, 0), NULL, NULL, &body);
    expect_error(st, 400, body, "no 'file' part");
    st = request("/v1/audio/transcriptions", NULL, form(wav, 0, NULL, 0), NULL, NULL, &body);
    expect_error(st, 400, body, "is empty");
    const char *fmt[] = {"response_format", "docx"};
    st =
        request("/v1/audio/transcriptions", NULL, form(wav, sizeof wav, fmt, 2), NULL, NULL, &body);
    expect_error(st, 400, body, "'response_format' must be one of");
    const char *word[] = {"timestamp_granularities[]", "word"};
    st = request("/v1/audio/transcriptions", NULL, form(wav, sizeof wav, word, 2), NULL, NULL,
                 &body);
    expect_error(st, 400, body, "'word' is not supported");
    const char *temp[] = {"temperature", "3"};
    st = request("/v1/audio/translations", NULL, form(wav, sizeof wav, temp, 2), NULL, NULL, &body);
    expect_error(st, 400, body, "'temperature'");
    /* over --max-audio-bytes (4096): the form's 413, and Content-Length's */
    unsigned char *big = calloc(1, 5000);
    st = request("/v1/audio/transcriptions", NULL, form(big, 5000, NULL, 0), NULL, NULL, &body);
    expect_error(st, 413, body, "4096 bytes");
    free(big);
    big = calloc(1, 3u << 20); /* read to its end, then 413 */
    st = request("/v1/audio/transcriptions", NULL, form(big, 3u << 20, NULL, 0), NULL, NULL, &body);
    expect_error(st, 413, body, "--max-audio-bytes 4096");
    free(big);
    big = calloc(1, 6u << 20); /* over 4x the limit: refused before the body */
    st = request("/v1/audio/transcriptions", NULL, form(big, 6u << 20, NULL, 0), NULL, NULL, &body);
    expect_error(st, 413, body, "--max-audio-bytes 4096");
    free(big);
    /* a chat model asked to transcribe; no speech model at all */
    const char *chat[] = {"model", "stories260K-hf-bf16"};
    st = request("/v1/audio/transcriptions", NULL, form(wav, sizeof wav, chat, 2), NULL, NULL,
                 &body);
    expect_error(st, 400, body, "`stories260K-hf-bf16` does not transcribe audio");
    st = request("/v1/audio/translations", NULL, form(wav, sizeof wav, chat, 2), NULL, NULL, &body);
    expect_error(st, 400, body, "`stories260K-hf-bf16` does not transcribe audio");
    st = request("/v1/audio/transcriptions", NULL, form(wav, sizeof wav, NULL, 0), NULL, NULL,
                 &body);
    expect_error(st, 400, body, "no model on this server transcribes audio");
    const char *unknown[] = {"model", "whisper-1"};
    st = request("/v1/audio/transcriptions", NULL, form(wav, sizeof wav, unknown, 2), NULL, NULL,
                 &body);
    expect_error(st, 404, body, "`whisper-1` does not exist");
    /* GET is 405 */
    st = request("/v1/audio/transcriptions", NULL, NULL, NULL, NULL, &body);
    assert_int_equal(st, 405);
    free(body);
    /* still serving */
    st = request("/v1/completions", "{\"prompt\":\"Once\",\"max_tokens\":4}", NULL, NULL, NULL,
                 &body);
    assert_int_equal(st, 200);
    free(body);
    assert_int_equal(request("/health", NULL, NULL, NULL, NULL, &body), 200);
    free(body);
}

/* A chat request names the model it wants: with one model the name is
 * optional; the single-model constructor keeps --served-model-name. */
static void test_single_model_name(void **state) {
    (void)state;
    pg_server_options so = {0};
    so.served_model_name = "alias";
    pg_server *s = NULL;
    assert_int_equal(pg_server_start_models(g_engines, 2, &so, &s), PAGODA_ERR_INVALID_ARG);
    assert_non_null(strstr(pagoda_last_error(), "one model"));
    pagoda_engine *same[2] = {g_engines[0], g_engines[0]};
    so.served_model_name = NULL;
    assert_int_equal(pg_server_start_models(same, 2, &so, &s), PAGODA_ERR_INVALID_ARG);
    assert_non_null(strstr(pagoda_last_error(), "two models are named 'stories260K-hf'"));
    so.served_model_name = "alias";
    assert_int_equal(pg_server_start(g_engines[1], &so, &s), PAGODA_OK);
    assert_string_equal(pg_server_model_name(s, 0), "alias");
    assert_false(pg_server_model_is_speech(s, 0));
    pg_server_stop(s);
}

int main(void) {
    const struct CMUnitTest form_tests[] = {
        cmocka_unit_test(test_form_fields),
        cmocka_unit_test(test_form_errors),
    };
    const struct CMUnitTest server_tests[] = {
        cmocka_unit_test(test_models_and_routing),
        cmocka_unit_test(test_concurrent_models),
        cmocka_unit_test(test_audio_errors),
        cmocka_unit_test(test_single_model_name),
    };
    int rc = cmocka_run_group_tests_name("audio_form", form_tests, NULL, NULL);
    rc |= cmocka_run_group_tests_name("server_models", server_tests, setup, teardown);
    return rc;
}
