/* `pagoda serve` with a gpt-oss model: chats in the harmony format. The
 * real server (src/server/server.c) runs in this process on the tiny
 * random-weight gpt-oss (../shared/assets/oracles/gpt-oss-tiny/hf, whose
 * tokenizer has the harmony special tokens) with an ephemeral port; the
 * client is a raw socket. Checks: the prompt is pg_harmony_render's text
 * (usage.prompt_tokens and /tokenize against the test's own rendering, not
 * the model's Jinja template), tools and reasoning_effort are taken, the
 * special tokens reach the parser (a logit bias makes the model write
 * <|channel|>), <|end|> does not stop generation but <|call|> does, and the
 * random model's arbitrary output gives valid OpenAI JSON, streamed and
 * not, the streamed deltas adding up to the non-streamed message. */
#define _GNU_SOURCE
#include "testutil.h"

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pagoda.h"
#include "server/server.h"
#include "tokenizer/harmony.h"

static pagoda_engine *g_engine;
static pg_server *g_srv;
static int g_port;

static const char *TOOLS =
    "[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"description\":\"Current "
    "weather in a city\",\"parameters\":{\"type\":\"object\",\"properties\":{\"city\":{\"type\":"
    "\"string\",\"description\":\"City name\"},\"unit\":{\"type\":\"string\",\"enum\":[\"c\","
    "\"f\"]}},\"required\":[\"city\"]}}}]";
static const char *MESSAGES =
    "[{\"role\":\"system\",\"content\":\"Be brief.\"},{\"role\":\"user\",\"content\":\"What is "
    "the weather in Paris?\"}]";

static int setup(void **state) {
    (void)state;
    pagoda_engine_options o;
    pagoda_engine_options_default(&o);
    o.kv_cache_memory = 32u << 20;
    o.max_model_len = 2048;
    o.num_threads = 1;
    o.seed = 7;
    if (pagoda_engine_create(pg_test_asset("oracles/gpt-oss-tiny/hf"), &o, &g_engine) !=
        PAGODA_OK) {
        fprintf(stderr, "engine: %s\n", pagoda_last_error());
        return -1;
    }
    pg_server_options so = {0};
    so.max_queue = -1;
    if (pg_server_start(g_engine, &so, &g_srv) != PAGODA_OK) {
        fprintf(stderr, "server: %s\n", pagoda_last_error());
        return -1;
    }
    g_port = pg_server_port(g_srv);
    return 0;
}

static int teardown(void **state) {
    (void)state;
    pg_server_stop(g_srv);
    pagoda_engine_free(g_engine);
    return 0;
}

/* POST `body` to `path` (testutil's pg_test_http_post). Returns the status;
 * *out gets the body. */
static int post(const char *path, const char *body, char **out) {
    return pg_test_http_post(g_port, path, body, out);
}

static cJSON *post_json(const char *path, const char *body, int want_status) {
    char *reply = NULL;
    int st = post(path, body, &reply);
    if (st != want_status) fail_msg("%s: status %d, want %d: %s", path, st, want_status, reply);
    cJSON *o = cJSON_Parse(reply);
    if (!o) fail_msg("%s: not JSON: %s", path, reply);
    free(reply);
    return o;
}

static double num(const cJSON *o, const char *k) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    if (!cJSON_IsNumber(v)) fail_msg("'%s' is not a number", k);
    return v->valuedouble;
}

static const char *str(const cJSON *o, const char *k) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

/* Tokens of a rendered prompt as the server counts them (special-token
 * text matched, no BOS/EOS added). */
static size_t count_tokens(const char *text) {
    int32_t *ids = NULL, *none = NULL;
    size_t n = 0, n0 = 0;
    assert_int_equal(pagoda_tokenize(g_engine, text, strlen(text), true, &ids, &n), PAGODA_OK);
    assert_int_equal(pagoda_tokenize(g_engine, "", 0, true, &none, &n0), PAGODA_OK);
    pagoda_free(ids);
    pagoda_free(none);
    return n - n0;
}

static size_t harmony_tokens(const char *effort) {
    cJSON *m = cJSON_Parse(MESSAGES), *t = cJSON_Parse(TOOLS);
    pg_harmony_render_opts o = {0};
    o.reasoning_effort = effort;
    o.add_generation_prompt = true;
    char *text = NULL;
    assert_int_equal(pg_harmony_render(m, t, &o, &text), PAGODA_OK);
    assert_non_null(strstr(text, "namespace functions"));
    size_t n = count_tokens(text);
    free(text);
    cJSON_Delete(m);
    cJSON_Delete(t);
    return n;
}

static char *chat_body(const char *extra) {
    char *b = NULL;
    assert_true(asprintf(&b, "{\"messages\":%s,\"tools\":%s%s}", MESSAGES, TOOLS, extra) > 0);
    return b;
}

/* The architecture is told by the engine; the server renders with
 * pg_harmony_render: prompt_tokens and /tokenize match the test's own
 * harmony rendering (and not the Jinja template, which has no system or
 * developer message), reasoning_effort changes the prompt. */
static void test_prompt_is_harmony(void **state) {
    (void)state;
    assert_string_equal(pagoda_engine_architecture(g_engine), "gpt_oss");
    size_t want = harmony_tokens("high");
    char *t = NULL;
    assert_int_equal(pagoda_apply_chat_template(g_engine, MESSAGES, TOOLS, NULL, true, NULL, &t),
                     PAGODA_OK);
    size_t jinja = count_tokens(t);
    pagoda_free(t);
    assert_int_not_equal(want, jinja);

    char *body = chat_body(",\"reasoning_effort\":\"high\",\"max_tokens\":4,\"seed\":1");
    cJSON *o = post_json("/v1/chat/completions", body, 200);
    free(body);
    assert_string_equal(str(o, "object"), "chat.completion");
    assert_int_equal((size_t)num(cJSON_GetObjectItem(o, "usage"), "prompt_tokens"), want);
    cJSON_Delete(o);

    /* /tokenize renders chats the same way; the effort is in the prompt */
    body = chat_body(",\"reasoning_effort\":\"high\"");
    cJSON *hi = post_json("/tokenize", body, 200);
    free(body);
    assert_int_equal((size_t)num(hi, "count"), want);
    body = chat_body(",\"reasoning_effort\":\"low\"");
    cJSON *lo = post_json("/tokenize", body, 200);
    free(body);
    assert_int_equal((size_t)num(lo, "count"), harmony_tokens("low"));
    char *a = cJSON_PrintUnformatted(cJSON_GetObjectItem(hi, "tokens"));
    char *b = cJSON_PrintUnformatted(cJSON_GetObjectItem(lo, "tokens"));
    assert_string_not_equal(a, b);
    free(a);
    free(b);
    cJSON_Delete(hi);
    cJSON_Delete(lo);
    /* default effort: medium */
    body = chat_body("");
    cJSON *md = post_json("/tokenize", body, 200);
    free(body);
    assert_int_equal((size_t)num(md, "count"), harmony_tokens("medium"));
    cJSON_Delete(md);
}

static void test_bad_effort(void **state) {
    (void)state;
    char *body = chat_body(",\"reasoning_effort\":\"extreme\"");
    cJSON *o = post_json("/v1/chat/completions", body, 400);
    free(body);
    assert_string_equal(str(cJSON_GetObjectItem(o, "error"), "param"), "reasoning_effort");
    cJSON_Delete(o);
}

/* One choice as the client sees it (non-streamed, or rebuilt from chunks). */
typedef struct seen {
    char content[8192], reasoning[8192];
    bool content_null;
    int n_calls;
    char names[8][64], args[8][1024];
    char finish[16];
} seen;

static void check_finish(const char *f) {
    if (!f || (strcmp(f, "stop") && strcmp(f, "length") && strcmp(f, "tool_calls")))
        fail_msg("bad finish_reason %s", f ? f : "(null)");
}

static void from_message(const cJSON *choice, seen *s) {
    memset(s, 0, sizeof *s);
    const cJSON *m = cJSON_GetObjectItem(choice, "message");
    assert_string_equal(str(m, "role"), "assistant");
    const cJSON *c = cJSON_GetObjectItem(m, "content"),
                *r = cJSON_GetObjectItem(m, "reasoning_content");
    assert_true(cJSON_IsString(c) || cJSON_IsNull(c));
    assert_true(cJSON_IsString(r) || cJSON_IsNull(r));
    s->content_null = cJSON_IsNull(c);
    if (cJSON_IsString(c)) snprintf(s->content, sizeof s->content, "%s", c->valuestring);
    if (cJSON_IsString(r)) snprintf(s->reasoning, sizeof s->reasoning, "%s", r->valuestring);
    const cJSON *tc = cJSON_GetObjectItem(m, "tool_calls"), *call;
    if (tc) {
        assert_true(cJSON_IsArray(tc) && cJSON_GetArraySize(tc) > 0);
        cJSON_ArrayForEach(call, tc) {
            assert_int_equal(strncmp(str(call, "id"), "call_", 5), 0);
            assert_string_equal(str(call, "type"), "function");
            const cJSON *f = cJSON_GetObjectItem(call, "function");
            assert_true(s->n_calls < 8);
            snprintf(s->names[s->n_calls], 64, "%s", str(f, "name"));
            snprintf(s->args[s->n_calls], 1024, "%s", str(f, "arguments"));
            s->n_calls++;
        }
    }
    if (s->content_null) assert_true(s->n_calls > 0);
    snprintf(s->finish, sizeof s->finish, "%s", str(choice, "finish_reason"));
    check_finish(str(choice, "finish_reason"));
    if (!strcmp(s->finish, "tool_calls")) assert_true(s->n_calls > 0);
}

/* Rebuild n choices from an SSE body; every event must be a valid chunk. */
static void from_stream(const char *sse, seen *s, int n) {
    memset(s, 0, (size_t)n * sizeof *s);
    bool done = false;
    int finishes = 0;
    for (const char *p = sse; *p;) {
        const char *e = strstr(p, "\n\n");
        assert_non_null(e);
        assert_int_equal(strncmp(p, "data: ", 6), 0);
        assert_false(done); /* nothing after [DONE] */
        if (!strncmp(p + 6, "[DONE]", 6)) {
            done = true;
            p = e + 2;
            continue;
        }
        cJSON *o = cJSON_ParseWithLength(p + 6, (size_t)(e - p - 6));
        if (!o) fail_msg("bad chunk: %.*s", (int)(e - p), p);
        assert_string_equal(str(o, "object"), "chat.completion.chunk");
        const cJSON *ch = cJSON_GetArrayItem(cJSON_GetObjectItem(o, "choices"), 0);
        int i = (int)num(ch, "index");
        assert_true(i >= 0 && i < n);
        seen *si = &s[i];
        assert_int_equal(si->finish[0], 0); /* nothing after the finish */
        const cJSON *d = cJSON_GetObjectItem(ch, "delta");
        assert_true(cJSON_IsObject(d));
        if (str(d, "reasoning_content")) strcat(si->reasoning, str(d, "reasoning_content"));
        if (str(d, "content")) strcat(si->content, str(d, "content"));
        const cJSON *tc = cJSON_GetObjectItem(d, "tool_calls"), *call;
        cJSON_ArrayForEach(call, tc) {
            int k = (int)num(call, "index");
            const cJSON *f = cJSON_GetObjectItem(call, "function");
            if (str(call, "id")) { /* a call's first delta */
                assert_int_equal(k, si->n_calls);
                assert_string_equal(str(call, "type"), "function");
                assert_string_equal(str(f, "arguments"), "");
                snprintf(si->names[k], 64, "%s", str(f, "name"));
                si->n_calls++;
            } else {
                assert_true(k < si->n_calls);
                strcat(si->args[k], str(f, "arguments"));
            }
        }
        const cJSON *fr = cJSON_GetObjectItem(ch, "finish_reason");
        if (!cJSON_IsNull(fr)) {
            check_finish(fr->valuestring);
            snprintf(si->finish, sizeof si->finish, "%s", fr->valuestring);
            finishes++;
        }
        cJSON_Delete(o);
        p = e + 2;
    }
    assert_true(done);
    assert_int_equal(finishes, n);
}

/* The random model writes arbitrary tokens, special ones included (9 of
 * its 320): whatever it writes, both modes give valid OpenAI JSON and the
 * stream adds up to the non-streamed message (same seeds, same tokens). */
static void test_stream_equals_nonstream(void **state) {
    (void)state;
    int with_reasoning = 0, with_calls = 0;
    for (int seed = 1; seed <= 8; seed++) {
        char extra[160];
        snprintf(extra, sizeof extra,
                 ",\"reasoning_effort\":\"low\",\"max_tokens\":48,\"n\":3,\"seed\":%d,"
                 "\"temperature\":1.0",
                 seed);
        char *body = chat_body(extra);
        cJSON *o = post_json("/v1/chat/completions", body, 200);
        free(body);
        seen ns[3], st[3];
        const cJSON *choices = cJSON_GetObjectItem(o, "choices");
        assert_int_equal(cJSON_GetArraySize(choices), 3);
        for (int i = 0; i < 3; i++)
            from_message(cJSON_GetArrayItem(choices, i), &ns[i]);
        cJSON_Delete(o);

        snprintf(extra, sizeof extra,
                 ",\"reasoning_effort\":\"low\",\"max_tokens\":48,\"n\":3,\"seed\":%d,"
                 "\"temperature\":1.0,\"stream\":true",
                 seed);
        body = chat_body(extra);
        char *sse = NULL;
        assert_int_equal(post("/v1/chat/completions", body, &sse), 200);
        free(body);
        from_stream(sse, st, 3);
        free(sse);
        for (int i = 0; i < 3; i++) {
            assert_string_equal(st[i].content, ns[i].content);
            assert_string_equal(st[i].reasoning, ns[i].reasoning);
            assert_string_equal(st[i].finish, ns[i].finish);
            assert_int_equal(st[i].n_calls, ns[i].n_calls);
            for (int k = 0; k < ns[i].n_calls; k++) {
                assert_string_equal(st[i].names[k], ns[i].names[k]);
                assert_string_equal(st[i].args[k], ns[i].args[k]);
            }
            with_reasoning += ns[i].reasoning[0] != 0;
            with_calls += ns[i].n_calls > 0;
        }
    }
    printf("# 24 random choices: %d with reasoning_content, %d with tool_calls\n", with_reasoning,
           with_calls);
}

/* Special tokens reach the parser (skip_special_tokens is off for harmony
 * chats): a model pushed to write only <|channel|> (id 300) gives a header
 * that never gets its <|message|>, which degrades to content. */
static void test_special_tokens_kept(void **state) {
    (void)state;
    for (int stream = 0; stream < 2; stream++) {
        char extra[160];
        snprintf(extra, sizeof extra, ",\"max_tokens\":3,\"logit_bias\":{\"300\":100}%s",
                 stream ? ",\"stream\":true" : "");
        char *body = chat_body(extra);
        seen s;
        if (stream) {
            char *sse = NULL;
            assert_int_equal(post("/v1/chat/completions", body, &sse), 200);
            from_stream(sse, &s, 1);
            free(sse);
        } else {
            cJSON *o = post_json("/v1/chat/completions", body, 200);
            from_message(cJSON_GetArrayItem(cJSON_GetObjectItem(o, "choices"), 0), &s);
            cJSON_Delete(o);
        }
        free(body);
        assert_string_equal(s.content, "<|channel|><|channel|><|channel|>");
        assert_string_equal(s.finish, "length");
    }
}

/* <|end|> (302) ends a message, not the turn; <|call|> (304) and <|return|>
 * (298) stop generation. */
static void test_stop_tokens(void **state) {
    (void)state;
    const struct {
        int token;
        int completion_tokens;
        const char *finish;
    } cases[] = {{302, 6, "length"}, {304, 1, "stop"}, {298, 1, "stop"}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char extra[128];
        snprintf(extra, sizeof extra, ",\"max_tokens\":6,\"logit_bias\":{\"%d\":100}",
                 cases[i].token);
        char *body = chat_body(extra);
        cJSON *o = post_json("/v1/chat/completions", body, 200);
        free(body);
        const cJSON *c = cJSON_GetArrayItem(cJSON_GetObjectItem(o, "choices"), 0);
        assert_string_equal(str(c, "finish_reason"), cases[i].finish);
        assert_int_equal((int)num(cJSON_GetObjectItem(o, "usage"), "completion_tokens"),
                         cases[i].completion_tokens);
        if (cases[i].completion_tokens == 1)
            assert_int_equal((int)num(c, "stop_reason"), cases[i].token);
        seen s;
        from_message(c, &s); /* valid, whatever the parser made of it */
        cJSON_Delete(o);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_prompt_is_harmony),
        cmocka_unit_test(test_bad_effort),
        cmocka_unit_test(test_stream_equals_nonstream),
        cmocka_unit_test(test_special_tokens_kept),
        cmocka_unit_test(test_stop_tokens),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
