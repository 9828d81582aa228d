/* The harmony -> OpenAI chat mapping of `pagoda serve` without an engine
 * (src/server/harmony_chat.c, the harmony parts of src/server/openai.c):
 * synthetic gpt-oss output (special tokens as text) becomes
 * reasoning_content, content, tool_calls and finish_reason, non-streamed
 * and as stream deltas; streamed deltas add up to the message whatever
 * the split; malformed output becomes content. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/harmony_chat.h"
#include "server/openai.h"
#include "testutil.h"

#define TOOL_CALL_TEXT                                                                             \
    "<|channel|>analysis<|message|>think<|end|><|start|>assistant<|channel|>commentary "           \
    "to=functions.get_weather <|constrain|>json<|message|>{\"city\":\"Paris\"}<|call|>"

#define FINAL_TEXT                                                                                 \
    "<|channel|>analysis<|message|>The user greets.<|end|><|start|>assistant<|channel|>final"      \
    "<|message|>Hello, world!<|return|>"

static pg_hchat *mapped(const char *text, uint64_t seed) {
    pg_hchat *h = NULL;
    assert_int_equal(pg_hchat_create(seed, &h), PAGODA_OK);
    assert_int_equal(pg_hchat_feed(h, text, strlen(text)), PAGODA_OK);
    assert_int_equal(pg_hchat_finish(h), PAGODA_OK);
    return h;
}

static const char *str_of(const cJSON *o, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

static bool is_null(const cJSON *o, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return v && cJSON_IsNull(v);
}

static void test_tool_call_message(void **state) {
    (void)state;
    pg_hchat *h = mapped(TOOL_CALL_TEXT, 42);
    cJSON *m = pg_hchat_message(h);
    assert_non_null(m);
    assert_string_equal(str_of(m, "role"), "assistant");
    assert_true(is_null(m, "content")); /* tool calls and no text: null, as OpenAI */
    assert_string_equal(str_of(m, "reasoning_content"), "think");
    const cJSON *tc = cJSON_GetObjectItemCaseSensitive(m, "tool_calls");
    assert_true(cJSON_IsArray(tc));
    assert_int_equal(cJSON_GetArraySize(tc), 1);
    const cJSON *c = cJSON_GetArrayItem(tc, 0);
    char id[64];
    assert_non_null(str_of(c, "id"));
    snprintf(id, sizeof id, "%s", str_of(c, "id"));
    assert_int_equal(strncmp(id, "call_", 5), 0);
    assert_int_equal(strlen(id), 5 + 24);
    assert_string_equal(str_of(c, "type"), "function");
    assert_null(cJSON_GetObjectItemCaseSensitive(c, "index")); /* only in stream deltas */
    const cJSON *f = cJSON_GetObjectItemCaseSensitive(c, "function");
    assert_string_equal(str_of(f, "name"), "get_weather");
    assert_string_equal(str_of(f, "arguments"), "{\"city\":\"Paris\"}");
    assert_string_equal(pg_hchat_finish_name(h, PAGODA_FINISH_STOP), "tool_calls");
    assert_string_equal(pg_hchat_finish_name(h, PAGODA_FINISH_LENGTH), "length");
    assert_null(pg_hchat_finish_name(h, PAGODA_FINISH_NONE));
    assert_int_equal(pg_hchat_num_calls(h), 1);
    assert_int_equal(pg_hchat_issues(h), 0);
    cJSON_Delete(m);

    /* ids: fixed by the seed, different for another seed */
    pg_hchat *same = mapped(TOOL_CALL_TEXT, 42), *other = mapped(TOOL_CALL_TEXT, 43);
    cJSON *ms = pg_hchat_message(same), *mo = pg_hchat_message(other);
    const char *ids = str_of(cJSON_GetArrayItem(cJSON_GetObjectItem(ms, "tool_calls"), 0), "id");
    const char *ido = str_of(cJSON_GetArrayItem(cJSON_GetObjectItem(mo, "tool_calls"), 0), "id");
    assert_string_equal(ids, id);
    assert_string_not_equal(ids, ido);
    cJSON_Delete(ms);
    cJSON_Delete(mo);
    pg_hchat_free(same);
    pg_hchat_free(other);
    pg_hchat_free(h);
}

static void test_final_message(void **state) {
    (void)state;
    pg_hchat *h = mapped(FINAL_TEXT, 1);
    cJSON *m = pg_hchat_message(h);
    assert_string_equal(str_of(m, "content"), "Hello, world!");
    assert_string_equal(str_of(m, "reasoning_content"), "The user greets.");
    assert_null(cJSON_GetObjectItemCaseSensitive(m, "tool_calls"));
    assert_string_equal(pg_hchat_finish_name(h, PAGODA_FINISH_STOP), "stop");
    cJSON_Delete(m);
    pg_hchat_free(h);

    /* no analysis: reasoning_content null */
    h = mapped("<|channel|>final<|message|>Hi", 1);
    m = pg_hchat_message(h);
    assert_string_equal(str_of(m, "content"), "Hi");
    assert_true(is_null(m, "reasoning_content"));
    cJSON_Delete(m);
    pg_hchat_free(h);
}

/* A call ended by <|end|> (or cut by max_tokens) is a tool call, but the
 * finish_reason stays the engine's: "tool_calls" needs <|call|>. */
static void test_call_without_call_token(void **state) {
    (void)state;
    pg_hchat *h = mapped("<|channel|>commentary to=functions.f<|message|>{\"a\":1}<|end|>", 1);
    assert_int_equal(pg_hchat_num_calls(h), 1);
    assert_string_equal(pg_hchat_finish_name(h, PAGODA_FINISH_STOP), "stop");
    pg_hchat_free(h);
    h = mapped("<|channel|>commentary to=functions.f<|message|>{\"a\":", 1);
    cJSON *m = pg_hchat_message(h);
    const cJSON *c = cJSON_GetArrayItem(cJSON_GetObjectItem(m, "tool_calls"), 0);
    assert_string_equal(str_of(cJSON_GetObjectItem(c, "function"), "arguments"), "{\"a\":");
    assert_string_equal(pg_hchat_finish_name(h, PAGODA_FINISH_LENGTH), "length");
    cJSON_Delete(m);
    pg_hchat_free(h);
}

static void test_two_calls(void **state) {
    (void)state;
    const char *text = "<|channel|>commentary to=functions.a <|constrain|>json<|message|>{}<|call|>"
                       "<|start|>assistant to=functions.b<|channel|>commentary<|message|>[1]"
                       "<|call|>";
    pg_hchat *h = mapped(text, 9);
    cJSON *m = pg_hchat_message(h);
    const cJSON *tc = cJSON_GetObjectItem(m, "tool_calls");
    assert_int_equal(cJSON_GetArraySize(tc), 2);
    const cJSON *a = cJSON_GetArrayItem(tc, 0), *b = cJSON_GetArrayItem(tc, 1);
    assert_string_equal(str_of(cJSON_GetObjectItem(a, "function"), "name"), "a");
    assert_string_equal(str_of(cJSON_GetObjectItem(b, "function"), "name"), "b");
    assert_string_equal(str_of(cJSON_GetObjectItem(b, "function"), "arguments"), "[1]");
    assert_string_not_equal(str_of(a, "id"), str_of(b, "id"));
    cJSON_Delete(m);
    pg_hchat_free(h);
}

/* Malformed output never fails: its text is content. */
static void test_malformed_is_content(void **state) {
    (void)state;
    const char *cases[] = {
        "just text, no header",
        "<|message|>stray<|end|>",
        "<|channel|><|channel|><|channel|>",
        "<|channel|>nonsense<|message|>x<|end|>",
        "<|start|>user<|message|>not me<|end|>",
        "<|channel|>commentary to=browser.search<|message|>{}<|call|>",
        "<|return|><|call|><|constrain|>",
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        pg_hchat *h = mapped(cases[i], 1);
        cJSON *m = pg_hchat_message(h);
        assert_non_null(m);
        const char *content = str_of(m, "content");
        assert_non_null(content);
        assert_true(pg_hchat_issues(h) > 0);
        assert_int_equal(pg_hchat_num_calls(h), 0);
        if (i == 0) assert_string_equal(content, cases[0]);
        if (i == 2) assert_non_null(strstr(content, "<|channel|>"));
        cJSON_Delete(m);
        pg_hchat_free(h);
    }
}

/* Stream deltas: joined per kind within one take; a call's first delta has
 * index, id, type, name and empty arguments, the later ones index and an
 * argument fragment. Fed at every split, they add up to the message. */
static void check_stream(const char *text, size_t step) {
    pg_hchat *h = NULL, *ref = mapped(text, 5);
    assert_int_equal(pg_hchat_create(5, &h), PAGODA_OK);
    char reasoning[512] = "", content[512] = "", args[4][256] = {{0}}, names[4][64] = {{0}};
    char ids[4][40] = {{0}};
    int heads = 0;
    size_t n = strlen(text);
    for (size_t off = 0; off <= n; off += step) {
        size_t k = off + step <= n ? step : n - off;
        if (off < n) assert_int_equal(pg_hchat_feed(h, text + off, k), PAGODA_OK);
        if (off + step > n) assert_int_equal(pg_hchat_finish(h), PAGODA_OK);
        cJSON *ds = pg_hchat_take_deltas(h);
        assert_non_null(ds);
        const cJSON *d;
        int prev_kind = -1;
        cJSON_ArrayForEach(d, ds) {
            assert_int_equal(cJSON_GetArraySize(d), 1); /* one field per delta */
            const char *r = str_of(d, "reasoning_content"), *c = str_of(d, "content");
            const cJSON *tc = cJSON_GetObjectItem(d, "tool_calls");
            int kind = r ? 0 : c ? 1 : 2;
            if (kind != 2) assert_int_not_equal(kind, prev_kind); /* joined */
            prev_kind = kind;
            if (r) strcat(reasoning, r);
            if (c) strcat(content, c);
            if (!tc) continue;
            assert_int_equal(cJSON_GetArraySize(tc), 1);
            const cJSON *call = cJSON_GetArrayItem(tc, 0);
            int idx = (int)cJSON_GetObjectItem(call, "index")->valuedouble;
            assert_true(idx >= 0 && idx < 4);
            const cJSON *f = cJSON_GetObjectItem(call, "function");
            const char *id = str_of(call, "id");
            if (id) { /* the head */
                assert_int_equal(idx, heads++);
                assert_string_equal(str_of(call, "type"), "function");
                assert_string_equal(str_of(f, "arguments"), "");
                snprintf(names[idx], sizeof names[idx], "%s", str_of(f, "name"));
                snprintf(ids[idx], sizeof ids[idx], "%s", id);
            } else {
                assert_null(cJSON_GetObjectItem(call, "type"));
                assert_null(cJSON_GetObjectItem(f, "name"));
                assert_true(idx < heads);
                strcat(args[idx], str_of(f, "arguments"));
            }
        }
        cJSON_Delete(ds);
    }
    cJSON *m = pg_hchat_message(ref);
    const char *mc = str_of(m, "content"), *mr = str_of(m, "reasoning_content");
    assert_string_equal(content, mc ? mc : "");
    assert_string_equal(reasoning, mr ? mr : "");
    const cJSON *tc = cJSON_GetObjectItem(m, "tool_calls");
    assert_int_equal(heads, cJSON_GetArraySize(tc));
    for (int i = 0; i < heads; i++) {
        const cJSON *c = cJSON_GetArrayItem(tc, i);
        assert_string_equal(ids[i], str_of(c, "id"));
        assert_string_equal(names[i], str_of(cJSON_GetObjectItem(c, "function"), "name"));
        assert_string_equal(args[i], str_of(cJSON_GetObjectItem(c, "function"), "arguments"));
    }
    cJSON_Delete(m);
    pg_hchat_free(ref);
    pg_hchat_free(h);
}

static void test_stream_deltas(void **state) {
    (void)state;
    const char *texts[] = {
        TOOL_CALL_TEXT, FINAL_TEXT,
        "<|channel|>commentary to=functions.a<|message|>{\"x\":[1,2]}<|call|>"
        "<|start|>assistant<|channel|>commentary to=functions.b<|message|>{}"
        "<|call|>",
        "<|channel|>commentary<|message|>Let me check.<|end|>"
        "<|start|>assistant<|channel|>commentary to=functions.w <|constrain|>json"
        "<|message|>{}<|call|>",
        "garbage <|message|> more"};
    size_t steps[] = {1, 2, 3, 7, 1000};
    for (size_t t = 0; t < sizeof texts / sizeof texts[0]; t++)
        for (size_t s = 0; s < sizeof steps / sizeof steps[0]; s++)
            check_stream(texts[t], steps[s]);

    /* one shot: exactly reasoning, call head, call arguments */
    pg_hchat *h = mapped(TOOL_CALL_TEXT, 3);
    cJSON *ds = pg_hchat_take_deltas(h);
    assert_int_equal(cJSON_GetArraySize(ds), 3);
    char *js = cJSON_PrintUnformatted(ds);
    cJSON *m = pg_hchat_message(h);
    const char *id = str_of(cJSON_GetArrayItem(cJSON_GetObjectItem(m, "tool_calls"), 0), "id");
    char want[512];
    snprintf(want, sizeof want,
             "[{\"reasoning_content\":\"think\"},{\"tool_calls\":[{\"index\":0,\"id\":\"%s\","
             "\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"arguments\":\"\"}}]},"
             "{\"tool_calls\":[{\"index\":0,\"function\":{\"arguments\":"
             "\"{\\\"city\\\":\\\"Paris\\\"}\"}}]}]",
             id);
    assert_string_equal(js, want);
    free(js);
    cJSON_Delete(m);
    cJSON_Delete(ds);
    /* taken: nothing left */
    ds = pg_hchat_take_deltas(h);
    assert_int_equal(cJSON_GetArraySize(ds), 0);
    cJSON_Delete(ds);
    pg_hchat_free(h);
}

/* A NUL byte in the output (valid UTF-8) must not cut the message's JSON
 * string (cJSON strings end at NUL): it becomes U+FFFD, streamed or not. */
static void test_nul_byte(void **state) {
    (void)state;
    static const char text[] = "<|channel|>final<|message|>a\0b<|return|>";
    pg_hchat *h = NULL;
    assert_int_equal(pg_hchat_create(1, &h), PAGODA_OK);
    assert_int_equal(pg_hchat_feed(h, text, sizeof text - 1), PAGODA_OK);
    assert_int_equal(pg_hchat_finish(h), PAGODA_OK);
    cJSON *m = pg_hchat_message(h);
    assert_string_equal(str_of(m, "content"), "a\xEF\xBF\xBD"
                                              "b");
    cJSON *ds = pg_hchat_take_deltas(h);
    assert_string_equal(str_of(cJSON_GetArrayItem(ds, 0), "content"), "a\xEF\xBF\xBD"
                                                                      "b");
    cJSON_Delete(ds);
    cJSON_Delete(m);
    pg_hchat_free(h);
}

static void test_end_tokens(void **state) {
    (void)state;
    assert_true(pg_hchat_is_end_token("<|call|>", 8));
    assert_true(pg_hchat_is_end_token("<|return|>", 10));
    assert_true(pg_hchat_is_end_token("<|end|>", 7));
    assert_false(pg_hchat_is_end_token("<|endoftext|>", 13));
    assert_false(pg_hchat_is_end_token("<|call|>", 7));
    assert_false(pg_hchat_is_end_token("", 0));
}

/* The response and chunk JSON of openai.c with a harmony choice. */
static void test_response_json(void **state) {
    (void)state;
    pg_api_meta meta = {PG_API_CHAT, "chatcmpl-1", 1700000000, "gpt-oss"};
    pg_api_choice ch[2];
    memset(ch, 0, sizeof ch);
    const char *texts[2] = {TOOL_CALL_TEXT, FINAL_TEXT};
    for (int i = 0; i < 2; i++) {
        ch[i].stop_token = 304 - 6 * i;
        ch[i].finish = PAGODA_FINISH_STOP;
        ch[i].n_prompt_tokens = 10;
        ch[i].n_output_tokens = 5;
        assert_int_equal(pg_api_choice_append(&ch[i], texts[i], strlen(texts[i])), PAGODA_OK);
        assert_int_equal(pg_hchat_create((uint64_t)i, &ch[i].harmony), PAGODA_OK);
        assert_int_equal(pg_hchat_feed(ch[i].harmony, ch[i].text, ch[i].len), PAGODA_OK);
        assert_int_equal(pg_hchat_finish(ch[i].harmony), PAGODA_OK);
    }
    char *js = pg_api_response_json(&meta, ch, 2, 2);
    assert_non_null(js);
    cJSON *o = cJSON_Parse(js);
    assert_non_null(o);
    assert_string_equal(str_of(o, "object"), "chat.completion");
    const cJSON *c0 = cJSON_GetArrayItem(cJSON_GetObjectItem(o, "choices"), 0);
    const cJSON *c1 = cJSON_GetArrayItem(cJSON_GetObjectItem(o, "choices"), 1);
    assert_string_equal(str_of(c0, "finish_reason"), "tool_calls");
    assert_string_equal(str_of(c1, "finish_reason"), "stop");
    assert_int_equal((int)cJSON_GetObjectItem(c0, "stop_reason")->valuedouble, 304);
    const cJSON *m0 = cJSON_GetObjectItem(c0, "message"), *m1 = cJSON_GetObjectItem(c1, "message");
    assert_string_equal(str_of(m0, "reasoning_content"), "think");
    assert_true(is_null(m0, "content"));
    const cJSON *call = cJSON_GetArrayItem(cJSON_GetObjectItem(m0, "tool_calls"), 0);
    assert_string_equal(str_of(cJSON_GetObjectItem(call, "function"), "name"), "get_weather");
    assert_string_equal(str_of(m1, "content"), "Hello, world!");
    /* usage: n=2 choices of one prompt count its tokens once */
    const cJSON *u = cJSON_GetObjectItem(o, "usage");
    assert_int_equal((int)cJSON_GetObjectItem(u, "prompt_tokens")->valuedouble, 10);
    assert_int_equal((int)cJSON_GetObjectItem(u, "completion_tokens")->valuedouble, 10);
    cJSON_Delete(o);
    free(js);

    /* chunks: a delta, and the last one with {} and the finish_reason */
    cJSON *d = cJSON_CreateObject();
    cJSON_AddStringToObject(d, "reasoning_content", "think");
    char *ev = pg_api_chat_delta_sse(&meta, 1, d, NULL, 0, NULL, NULL, -1);
    assert_non_null(ev);
    assert_int_equal(strncmp(ev, "data: {", 7), 0);
    assert_string_equal(ev + strlen(ev) - 2, "\n\n");
    o = cJSON_Parse(ev + 6);
    assert_non_null(o);
    assert_string_equal(str_of(o, "object"), "chat.completion.chunk");
    const cJSON *c = cJSON_GetArrayItem(cJSON_GetObjectItem(o, "choices"), 0);
    assert_int_equal((int)cJSON_GetObjectItem(c, "index")->valuedouble, 1);
    assert_string_equal(str_of(cJSON_GetObjectItem(c, "delta"), "reasoning_content"), "think");
    assert_true(is_null(c, "finish_reason"));
    assert_true(is_null(c, "logprobs"));
    cJSON_Delete(o);
    free(ev);
    ev = pg_api_chat_delta_sse(&meta, 0, NULL, NULL, 0, "tool_calls", NULL, -1);
    o = cJSON_Parse(ev + 6);
    c = cJSON_GetArrayItem(cJSON_GetObjectItem(o, "choices"), 0);
    assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItem(c, "delta")), 0);
    assert_string_equal(str_of(c, "finish_reason"), "tool_calls");
    assert_true(is_null(c, "stop_reason"));
    cJSON_Delete(o);
    free(ev);
    pg_api_choice_free(&ch[0]);
    pg_api_choice_free(&ch[1]);
}

/* reasoning_effort: vLLM's three values, else a 400 naming the field. */
static void test_reasoning_effort_parse(void **state) {
    (void)state;
    pagoda_sampling d;
    memset(&d, 0, sizeof d);
    d.temperature = 1;
    d.top_p = 1;
    d.repetition_penalty = 1;
    d.seed = -1;
    d.logprobs = -1;
    const char *ok = "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],"
                     "\"reasoning_effort\":\"high\"}";
    pg_api_request r;
    pg_api_error e;
    assert_int_equal(pg_api_parse(PG_API_CHAT, ok, strlen(ok), &d, &r, &e), PAGODA_OK);
    assert_string_equal(r.reasoning_effort, "high");
    pg_api_request_free(&r);
    const char *none = "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}";
    assert_int_equal(pg_api_parse(PG_API_CHAT, none, strlen(none), &d, &r, &e), PAGODA_OK);
    assert_null(r.reasoning_effort);
    pg_api_request_free(&r);
    const char *bad[] = {"{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],"
                         "\"reasoning_effort\":\"max\"}",
                         "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],"
                         "\"reasoning_effort\":2}"};
    for (int i = 0; i < 2; i++) {
        memset(&e, 0, sizeof e);
        assert_int_equal(pg_api_parse(PG_API_CHAT, bad[i], strlen(bad[i]), &d, &r, &e),
                         PAGODA_ERR_INVALID_ARG);
        assert_int_equal(e.status, 400);
        assert_string_equal(e.param, "reasoning_effort");
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tool_call_message),
        cmocka_unit_test(test_final_message),
        cmocka_unit_test(test_call_without_call_token),
        cmocka_unit_test(test_two_calls),
        cmocka_unit_test(test_malformed_is_content),
        cmocka_unit_test(test_stream_deltas),
        cmocka_unit_test(test_nul_byte),
        cmocka_unit_test(test_end_tokens),
        cmocka_unit_test(test_response_json),
        cmocka_unit_test(test_reasoning_effort_parse),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
