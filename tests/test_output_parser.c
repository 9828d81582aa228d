/* Reasoning and tool-call parsers of plain-text chat output
 * (src/server/output_parser.c) through the chat mapper (pg_hchat): model
 * output strings of each family (hermes / Qwen <tool_call>, llama3_json,
 * mistral [TOOL_CALLS] in both syntaxes, qwen3 / deepseek_r1 <think>)
 * become reasoning_content, content and tool_calls; malformed output comes
 * back as content, never as an error; any split of the output (byte by
 * byte, chunks of 1..7 bytes) gives the same message, and the stream deltas
 * add up to it; format detection on the real chat templates. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/harmony_chat.h"
#include "server/output_parser.h"
#include "testutil.h"

static const pg_oparse_opts HERMES = {PG_REASONING_NONE, false, PG_TOOLS_HERMES};
static const pg_oparse_opts QWEN3 = {PG_REASONING_QWEN3, false, PG_TOOLS_HERMES};
static const pg_oparse_opts QWEN3_OPEN = {PG_REASONING_QWEN3, true, PG_TOOLS_NONE};
static const pg_oparse_opts R1 = {PG_REASONING_DEEPSEEK_R1, false, PG_TOOLS_NONE};
static const pg_oparse_opts LLAMA3 = {PG_REASONING_NONE, false, PG_TOOLS_LLAMA3_JSON};
static const pg_oparse_opts MISTRAL = {PG_REASONING_NONE, false, PG_TOOLS_MISTRAL};
static const pg_oparse_opts PLAIN = {PG_REASONING_NONE, false, PG_TOOLS_NONE};

/* Feed `text` in chunks of `step` bytes (0: one shot). */
static pg_hchat *run(const pg_oparse_opts *o, const char *text, size_t step) {
    pg_hchat *h = NULL;
    assert_int_equal(pg_hchat_create_text(7, o, &h), PAGODA_OK);
    size_t n = strlen(text);
    if (!step) step = n ? n : 1;
    for (size_t i = 0; i < n; i += step)
        assert_int_equal(pg_hchat_feed(h, text + i, i + step <= n ? step : n - i), PAGODA_OK);
    assert_int_equal(pg_hchat_finish(h), PAGODA_OK);
    return h;
}

static char *message_text(const pg_hchat *h) {
    cJSON *m = pg_hchat_message(h);
    assert_non_null(m);
    char *s = cJSON_PrintUnformatted(m);
    cJSON_Delete(m);
    return s;
}

/* The message of `text`, checked to be the same for every split and equal
 * to what the stream deltas add up to. Caller frees (cJSON_Delete). */
static cJSON *message(const pg_oparse_opts *o, const char *text) {
    pg_hchat *h = run(o, text, 0);
    char *want = message_text(h);
    pg_hchat_free(h);
    for (size_t step = 1; step <= 7; step++) {
        pg_hchat *hs = NULL;
        assert_int_equal(pg_hchat_create_text(7, o, &hs), PAGODA_OK);
        /* stream: deltas taken after every feed, reassembled */
        char content[4096] = "", reasoning[4096] = "", names[8][64] = {{0}}, args[8][512] = {{0}},
             ids[8][40] = {{0}};
        int n_calls = 0;
        size_t n = strlen(text);
        for (size_t i = 0; i <= n; i += step) {
            if (i < n)
                assert_int_equal(pg_hchat_feed(hs, text + i, i + step <= n ? step : n - i),
                                 PAGODA_OK);
            else
                assert_int_equal(pg_hchat_finish(hs), PAGODA_OK);
            cJSON *ds = pg_hchat_take_deltas(hs);
            const cJSON *d;
            cJSON_ArrayForEach(d, ds) {
                const cJSON *c = cJSON_GetObjectItemCaseSensitive(d, "content");
                const cJSON *r = cJSON_GetObjectItemCaseSensitive(d, "reasoning_content");
                const cJSON *tc = cJSON_GetObjectItemCaseSensitive(d, "tool_calls");
                if (c) strcat(content, c->valuestring);
                if (r) strcat(reasoning, r->valuestring);
                if (tc) {
                    const cJSON *t = cJSON_GetArrayItem(tc, 0);
                    int k = cJSON_GetObjectItem(t, "index")->valueint;
                    const cJSON *f = cJSON_GetObjectItem(t, "function");
                    const cJSON *id = cJSON_GetObjectItem(t, "id");
                    if (id) { /* a call's first delta: id, type, name */
                        assert_int_equal(k, n_calls);
                        n_calls++;
                        snprintf(ids[k], sizeof ids[k], "%s", id->valuestring);
                        snprintf(names[k], sizeof names[k], "%s",
                                 cJSON_GetObjectItem(f, "name")->valuestring);
                        assert_string_equal(cJSON_GetObjectItem(t, "type")->valuestring,
                                            "function");
                    } else {
                        assert_true(k < n_calls);
                        assert_null(cJSON_GetObjectItem(f, "name"));
                    }
                    strcat(args[k], cJSON_GetObjectItem(f, "arguments")->valuestring);
                }
            }
            cJSON_Delete(ds);
            if (i == n) break;
            if (i + step > n) i = n - step;
        }
        char *got = message_text(hs);
        assert_string_equal(got, want);
        cJSON *m = cJSON_Parse(want);
        const cJSON *mc = cJSON_GetObjectItem(m, "content");
        const cJSON *mr = cJSON_GetObjectItem(m, "reasoning_content");
        assert_string_equal(content, cJSON_IsString(mc) ? mc->valuestring : "");
        assert_string_equal(reasoning, cJSON_IsString(mr) ? mr->valuestring : "");
        const cJSON *tcs = cJSON_GetObjectItem(m, "tool_calls");
        assert_int_equal(n_calls, tcs ? cJSON_GetArraySize(tcs) : 0);
        for (int k = 0; k < n_calls; k++) {
            const cJSON *t = cJSON_GetArrayItem(tcs, k);
            const cJSON *f = cJSON_GetObjectItem(t, "function");
            assert_string_equal(ids[k], cJSON_GetObjectItem(t, "id")->valuestring);
            assert_string_equal(names[k], cJSON_GetObjectItem(f, "name")->valuestring);
            assert_string_equal(args[k], cJSON_GetObjectItem(f, "arguments")->valuestring);
        }
        cJSON_Delete(m);
        cJSON_free(got);
        pg_hchat_free(hs);
    }
    cJSON *m = cJSON_Parse(want);
    cJSON_free(want);
    return m;
}

static const char *str_of(const cJSON *o, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

static int n_calls(const cJSON *m) {
    const cJSON *tc = cJSON_GetObjectItemCaseSensitive(m, "tool_calls");
    return tc ? cJSON_GetArraySize(tc) : 0;
}

static void assert_call(const cJSON *m, int i, const char *name, const char *args) {
    const cJSON *c = cJSON_GetArrayItem(cJSON_GetObjectItem(m, "tool_calls"), i);
    assert_non_null(c);
    assert_int_equal(strncmp(str_of(c, "id"), "call_", 5), 0);
    const cJSON *f = cJSON_GetObjectItem(c, "function");
    assert_string_equal(str_of(f, "name"), name);
    assert_string_equal(str_of(f, "arguments"), args);
}

static void test_hermes(void **state) {
    (void)state;
    cJSON *m = message(&HERMES, "Let me check.\n\n<tool_call>\n{\"name\": \"get_weather\", "
                                "\"arguments\": {\"city\": \"Paris\"}}\n</tool_call>");
    assert_string_equal(str_of(m, "content"), "Let me check.");
    assert_int_equal(n_calls(m), 1);
    assert_call(m, 0, "get_weather", "{\"city\":\"Paris\"}");
    cJSON_Delete(m);

    /* parallel calls, content null, finish_reason tool_calls */
    const char *two =
        "<tool_call>\n{\"name\": \"a\", \"arguments\": {\"x\": [1, 2]}}\n</tool_call>\n"
        "<tool_call>\n{\"name\": \"b\", \"arguments\": {}}\n</tool_call>\n";
    m = message(&HERMES, two);
    assert_true(cJSON_IsNull(cJSON_GetObjectItem(m, "content")));
    assert_int_equal(n_calls(m), 2);
    assert_call(m, 0, "a", "{\"x\":[1,2]}");
    assert_call(m, 1, "b", "{}");
    cJSON_Delete(m);
    pg_hchat *h = run(&HERMES, two, 0);
    assert_string_equal(pg_hchat_finish_name(h, PAGODA_FINISH_STOP), "tool_calls");
    assert_string_equal(pg_hchat_finish_name(h, PAGODA_FINISH_LENGTH), "length");
    assert_int_equal(pg_hchat_issues(h), 0);
    pg_hchat_free(h);

    /* arguments as a JSON string; an unclosed last call is taken */
    m = message(&HERMES, "<tool_call>{\"name\": \"f\", \"arguments\": \"{\\\"a\\\": 1}\"}");
    assert_call(m, 0, "f", "{\"a\": 1}");
    cJSON_Delete(m);

    /* no call: plain text, whitespace kept */
    m = message(&HERMES, "  Hello <tool but not a call\n");
    assert_string_equal(str_of(m, "content"), "  Hello <tool but not a call\n");
    assert_int_equal(n_calls(m), 0);
    cJSON_Delete(m);
}

static void test_hermes_malformed(void **state) {
    (void)state;
    static const char *const bad[] = {
        "<tool_call>\n{not json}\n</tool_call>",
        "<tool_call>{\"arguments\": {}}</tool_call>",                 /* no name */
        "<tool_call>{\"name\": \"f\", \"arguments\": 3}</tool_call>", /* args not an object */
        "<tool_call>{\"name\": \"f\", \"argu",                        /* cut off */
        "<tool_call>",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        cJSON *m = message(&HERMES, bad[i]);
        assert_int_equal(n_calls(m), 0);
        assert_string_equal(str_of(m, "content"), bad[i]);
        cJSON_Delete(m);
        pg_hchat *h = run(&HERMES, bad[i], 0);
        assert_int_equal(pg_hchat_issues(h), 1);
        assert_string_equal(pg_hchat_finish_name(h, PAGODA_FINISH_STOP), "stop");
        pg_hchat_free(h);
    }
    /* a streamed call cannot be taken back: text after its arguments is
     * content, with an issue, the call stays (vLLM's hermes streaming) */
    const char *after = "<tool_call>{\"name\": \"f\", \"arguments\": {}} x</tool_call>";
    cJSON *ma = message(&HERMES, after);
    assert_call(ma, 0, "f", "{}");
    assert_string_equal(str_of(ma, "content"), " x</tool_call>");
    cJSON_Delete(ma);
    pg_hchat *ha = run(&HERMES, after, 0);
    assert_int_equal(pg_hchat_issues(ha), 1);
    pg_hchat_free(ha);
    /* cut off inside the arguments (max_tokens): the call as far as it got */
    ma = message(&HERMES, "<tool_call>{\"name\": \"f\", \"arguments\": {\"a\": [1,");
    assert_call(ma, 0, "f", "{\"a\":[1,");
    cJSON_Delete(ma);
    /* a good call after a bad one still counts */
    cJSON *m = message(&HERMES, "<tool_call>oops</tool_call><tool_call>{\"name\": \"g\", "
                                "\"arguments\": {}}</tool_call>");
    assert_string_equal(str_of(m, "content"), "<tool_call>oops</tool_call>");
    assert_call(m, 0, "g", "{}");
    cJSON_Delete(m);
}

/* Tool-call arguments stream while they are generated: after the head
 * `{"name": "get_weather", "arguments": {"ci` the stream already carries
 * the call's index, id, type, name and the first argument bytes. */
static void test_hermes_streams_arguments(void **state) {
    (void)state;
    pg_hchat *h = NULL;
    assert_int_equal(pg_hchat_create_text(7, &HERMES, &h), PAGODA_OK);
    const char *head = "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"ci";
    assert_int_equal(pg_hchat_feed(h, head, strlen(head)), PAGODA_OK);
    cJSON *ds = pg_hchat_take_deltas(h);
    char *t = cJSON_PrintUnformatted(ds);
    assert_non_null(strstr(t, "\"name\":\"get_weather\""));
    assert_non_null(strstr(t, "\"type\":\"function\""));
    assert_non_null(strstr(t, "\"arguments\":\"{\\\"ci\""));
    cJSON_free(t);
    cJSON_Delete(ds);
    const char *rest = "ty\": \"Paris\"}}\n</tool_call>";
    assert_int_equal(pg_hchat_feed(h, rest, strlen(rest)), PAGODA_OK);
    assert_int_equal(pg_hchat_finish(h), PAGODA_OK);
    ds = pg_hchat_take_deltas(h);
    t = cJSON_PrintUnformatted(ds);
    /* later pieces: index and arguments only */
    assert_null(strstr(t, "\"name\""));
    assert_non_null(strstr(t, "\"arguments\":\"ty\\\":\\\"Paris\\\"}\""));
    cJSON_free(t);
    cJSON_Delete(ds);
    assert_string_equal(pg_hchat_finish_name(h, PAGODA_FINISH_STOP), "tool_calls");
    assert_int_equal(pg_hchat_issues(h), 0);
    pg_hchat_free(h);
}

static void test_reasoning(void **state) {
    (void)state;
    cJSON *m = message(&QWEN3, "<think>\nThe user wants X.\n</think>\n\nHere is X.");
    assert_string_equal(str_of(m, "reasoning_content"), "\nThe user wants X.\n");
    assert_string_equal(str_of(m, "content"), "Here is X.");
    cJSON_Delete(m);
    /* no tag: all content (enable_thinking false renders an empty think block) */
    m = message(&QWEN3, "Just an answer </think> with a stray tag");
    assert_true(cJSON_IsNull(cJSON_GetObjectItem(m, "reasoning_content")));
    assert_string_equal(str_of(m, "content"), "Just an answer </think> with a stray tag");
    cJSON_Delete(m);
    /* thinking, then a call */
    m = message(&QWEN3, "<think>need weather</think>\n\n<tool_call>\n{\"name\": \"w\", "
                        "\"arguments\": {\"c\": \"Oslo\"}}\n</tool_call>");
    assert_string_equal(str_of(m, "reasoning_content"), "need weather");
    assert_true(cJSON_IsNull(cJSON_GetObjectItem(m, "content")));
    assert_call(m, 0, "w", "{\"c\":\"Oslo\"}");
    cJSON_Delete(m);
    /* a <tool_call> inside the reasoning is reasoning */
    m = message(&QWEN3, "<think><tool_call>{}</tool_call></think>ok");
    assert_string_equal(str_of(m, "reasoning_content"), "<tool_call>{}</tool_call>");
    assert_string_equal(str_of(m, "content"), "ok");
    assert_int_equal(n_calls(m), 0);
    cJSON_Delete(m);
    /* the prompt opened <think> (thinking templates) */
    m = message(&QWEN3_OPEN, "plan</think>answer");
    assert_string_equal(str_of(m, "reasoning_content"), "plan");
    assert_string_equal(str_of(m, "content"), "answer");
    cJSON_Delete(m);
    /* unclosed reasoning stays reasoning */
    m = message(&QWEN3, "<think>still thinking");
    assert_string_equal(str_of(m, "reasoning_content"), "still thinking");
    assert_string_equal(str_of(m, "content"), "");
    cJSON_Delete(m);
    /* deepseek_r1: reasoning until </think>, an opening tag dropped */
    m = message(&R1, "<think>a</think>b");
    assert_string_equal(str_of(m, "reasoning_content"), "a");
    assert_string_equal(str_of(m, "content"), "b");
    cJSON_Delete(m);
    m = message(&R1, "no end tag at all");
    assert_string_equal(str_of(m, "reasoning_content"), "no end tag at all");
    cJSON_Delete(m);
    /* no parser: text as is */
    m = message(&PLAIN, "<think>x</think><tool_call>{}</tool_call>");
    assert_string_equal(str_of(m, "content"), "<think>x</think><tool_call>{}</tool_call>");
    cJSON_Delete(m);
}

static void test_llama3_json(void **state) {
    (void)state;
    cJSON *m =
        message(&LLAMA3, "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}");
    assert_call(m, 0, "get_weather", "{\"city\":\"Paris\"}");
    assert_true(cJSON_IsNull(cJSON_GetObjectItem(m, "content")));
    cJSON_Delete(m);
    m = message(&LLAMA3, "<|python_tag|>{\"name\": \"a\", \"arguments\": {}}; {\"name\": \"b\", "
                         "\"parameters\": {\"k\": \"}\"}}\n");
    assert_int_equal(n_calls(m), 2);
    assert_call(m, 0, "a", "{}");
    assert_call(m, 1, "b", "{\"k\":\"}\"}");
    cJSON_Delete(m);
    static const char *const plain[] = {
        "Hello {\"name\": \"a\", \"parameters\": {}}", /* not at the start */
        "{\"foo\": 1} and more",                       /* not a call */
        "{\"name\": \"a\", \"param",                    /* cut off before the arguments */
        "   ",
    };
    for (size_t i = 0; i < sizeof plain / sizeof plain[0]; i++) {
        m = message(&LLAMA3, plain[i]);
        assert_int_equal(n_calls(m), 0);
        assert_string_equal(str_of(m, "content"), plain[i]);
        cJSON_Delete(m);
    }
    /* a call, then text: the call stays, the rest is content */
    m = message(&LLAMA3, "{\"name\": \"a\", \"parameters\": {}} then words");
    assert_call(m, 0, "a", "{}");
    assert_string_equal(str_of(m, "content"), "then words");
    cJSON_Delete(m);
    /* a streamed call cannot be taken back: cut off inside its arguments
     * (max_tokens) it stays as far as it got, with an issue */
    const char *cut = "{\"name\": \"a\", \"parameters\": {\"x\": [1,";
    m = message(&LLAMA3, cut);
    assert_call(m, 0, "a", "{\"x\":[1,");
    cJSON_Delete(m);
    pg_hchat *h = run(&LLAMA3, cut, 0);
    assert_int_equal(pg_hchat_issues(h), 1);
    pg_hchat_free(h);
    /* text where the call's closing '}' belongs: content, with an issue */
    const char *open = "{\"name\": \"a\", \"parameters\": {\"x\": 1} oops";
    m = message(&LLAMA3, open);
    assert_call(m, 0, "a", "{\"x\":1}");
    assert_string_equal(str_of(m, "content"), "oops");
    cJSON_Delete(m);
    h = run(&LLAMA3, open, 0);
    assert_int_equal(pg_hchat_issues(h), 1);
    pg_hchat_free(h);
    /* keys in another order, arguments as a string: taken whole */
    m = message(&LLAMA3, "{\"parameters\": {\"k\": 2}, \"name\": \"b\"}");
    assert_call(m, 0, "b", "{\"k\":2}");
    cJSON_Delete(m);
}

static void test_mistral(void **state) {
    (void)state;
    cJSON *m = message(&MISTRAL, "[TOOL_CALLS][{\"name\": \"a\", \"arguments\": {\"x\": 1}}, "
                                 "{\"name\": \"b\", \"arguments\": {}}]");
    assert_int_equal(n_calls(m), 2);
    assert_call(m, 0, "a", "{\"x\":1}");
    assert_call(m, 1, "b", "{}");
    cJSON_Delete(m);
    m = message(&MISTRAL, "Sure.[TOOL_CALLS]get_weather[ARGS]{\"city\": \"Paris\"}"
                          "[TOOL_CALLS]b[ARGS]{}");
    assert_string_equal(str_of(m, "content"), "Sure.");
    assert_int_equal(n_calls(m), 2);
    assert_call(m, 0, "get_weather", "{\"city\":\"Paris\"}");
    assert_call(m, 1, "b", "{}");
    cJSON_Delete(m);
    static const char *const bad[] = {
        "[TOOL_CALLS]oops no args",
        "[TOOL_CALLS][{\"name\": \"a\", \"arguments\": 5}]",
        "[TOOL_CALLS][1, 2",
        "[TOOL_CALLS]f[ARGS]not json",
        "[TOOL_CALLS]",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        m = message(&MISTRAL, bad[i]);
        assert_int_equal(n_calls(m), 0);
        assert_string_equal(str_of(m, "content"), bad[i]);
        cJSON_Delete(m);
    }
    /* list items after a streamed one: a usual one streams too, one with
     * its keys in another order is taken whole; text after ']' is content */
    m = message(&MISTRAL, "[TOOL_CALLS][{\"name\": \"a\", \"arguments\": {}}, "
                          "{\"arguments\": {\"k\": 2}, \"name\": \"b\"}, {\"name\": \"c\", "
                          "\"arguments\": {\"s\": \"}]\"}}] done");
    assert_int_equal(n_calls(m), 3);
    assert_call(m, 0, "a", "{}");
    assert_call(m, 1, "b", "{\"k\":2}");
    assert_call(m, 2, "c", "{\"s\":\"}]\"}");
    assert_string_equal(str_of(m, "content"), " done");
    cJSON_Delete(m);
    /* streamed calls stay: the list going on with junk is content, with an
     * issue; the output ending after an item keeps the calls */
    const char *junk = "[TOOL_CALLS][{\"name\": \"a\", \"arguments\": {\"x\": 1}} x";
    m = message(&MISTRAL, junk);
    assert_call(m, 0, "a", "{\"x\":1}");
    assert_string_equal(str_of(m, "content"), "x");
    cJSON_Delete(m);
    pg_hchat *h = run(&MISTRAL, junk, 0);
    assert_int_equal(pg_hchat_issues(h), 1);
    pg_hchat_free(h);
    m = message(&MISTRAL, "[TOOL_CALLS][{\"name\": \"a\", \"arguments\": {\"x\": 1}}");
    assert_call(m, 0, "a", "{\"x\":1}");
    cJSON_Delete(m);
    /* v11 cut off inside the arguments: the call as far as it got */
    const char *cut = "[TOOL_CALLS]f[ARGS]{\"a\": \"b";
    m = message(&MISTRAL, cut);
    assert_call(m, 0, "f", "{\"a\":\"b");
    cJSON_Delete(m);
    h = run(&MISTRAL, cut, 0);
    assert_int_equal(pg_hchat_issues(h), 1);
    pg_hchat_free(h);
}

/* The deltas after feeding `head` of a call in format `o`: they carry the
 * call's id, type, name `name` and the first argument bytes `args0`
 * (escaped as in the JSON text); after `rest`, later pieces carry the
 * index and arguments only, and `args1` is among them. */
static void check_streams(const pg_oparse_opts *o, const char *head, const char *name,
                          const char *args0, const char *rest, const char *args1) {
    pg_hchat *h = NULL;
    assert_int_equal(pg_hchat_create_text(7, o, &h), PAGODA_OK);
    assert_int_equal(pg_hchat_feed(h, head, strlen(head)), PAGODA_OK);
    cJSON *ds = pg_hchat_take_deltas(h);
    char *t = cJSON_PrintUnformatted(ds);
    char want[256];
    snprintf(want, sizeof want, "\"name\":\"%s\"", name);
    assert_non_null(strstr(t, want));
    assert_non_null(strstr(t, "\"type\":\"function\""));
    assert_non_null(strstr(t, "\"id\":\"call_"));
    snprintf(want, sizeof want, "\"arguments\":\"%s\"", args0);
    assert_non_null(strstr(t, want));
    cJSON_free(t);
    cJSON_Delete(ds);
    assert_int_equal(pg_hchat_feed(h, rest, strlen(rest)), PAGODA_OK);
    assert_int_equal(pg_hchat_finish(h), PAGODA_OK);
    ds = pg_hchat_take_deltas(h);
    t = cJSON_PrintUnformatted(ds);
    assert_null(strstr(t, "\"name\""));
    snprintf(want, sizeof want, "\"arguments\":\"%s\"", args1);
    assert_non_null(strstr(t, want));
    cJSON_free(t);
    cJSON_Delete(ds);
    assert_string_equal(pg_hchat_finish_name(h, PAGODA_FINISH_STOP), "tool_calls");
    assert_int_equal(pg_hchat_issues(h), 0);
    pg_hchat_free(h);
}

/* llama3_json and both mistral syntaxes stream their arguments as hermes
 * does: id and name first, then argument pieces while they are generated. */
static void test_llama3_mistral_stream_arguments(void **state) {
    (void)state;
    check_streams(&LLAMA3, "<|python_tag|>{\"name\": \"get_weather\", \"parameters\": {\"ci",
                  "get_weather", "{\\\"ci", "ty\": \"Paris\"}}", "ty\\\":\\\"Paris\\\"}");
    check_streams(&MISTRAL, "[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"ci",
                  "get_weather", "{\\\"ci", "ty\": \"Paris\"}}]", "ty\\\":\\\"Paris\\\"}");
    check_streams(&MISTRAL, "[TOOL_CALLS]get_weather[ARGS]{\"ci", "get_weather", "{\\\"ci",
                  "ty\": \"Paris\"}", "ty\\\":\\\"Paris\\\"}");
    /* a second list item streams as the model writes it */
    check_streams(&MISTRAL, "[TOOL_CALLS][{\"name\": \"a\", \"arguments\": {}}, {\"name\": \"b\", "
                  "\"arguments\": {\"x",
                  "b", "{\\\"x", "\": 1}}]", "\\\":1}");
}

/* Random strings of tag fragments: never an error, and any split gives the
 * same message (message() checks every chunking). */
static void test_random_fragments(void **state) {
    (void)state;
    static const char *const frag[] = {
        "<think>",
        "</think>",
        "<tool_call>",
        "</tool_call>",
        "[TOOL_CALLS]",
        "[ARGS]",
        "<",
        "</",
        "[",
        "]",
        "{",
        "}",
        "\"name\"",
        ":",
        "\"f\"",
        ",",
        "\"arguments\"",
        "{}",
        " ",
        "\n",
        "\\",
        "\"",
        ";",
        "é",
        "text",
        "<|python_tag|>",
        "\"parameters\"",
    };
    const pg_oparse_opts *opts[] = {&HERMES, &QWEN3, &QWEN3_OPEN, &R1, &LLAMA3, &MISTRAL};
    uint64_t x = 12345;
    for (int it = 0; it < 300; it++) {
        char text[512] = "";
        int n = 1 + (int)(x % 12);
        for (int k = 0; k < n; k++) {
            x = x * 6364136223846793005ull + 1442695040888963407ull;
            strcat(text, frag[(x >> 33) % (sizeof frag / sizeof frag[0])]);
        }
        cJSON *m = message(opts[it % 6], text);
        assert_non_null(m);
        cJSON_Delete(m);
    }
}

static char *read_template(const char *name) {
    char rel[256];
    snprintf(rel, sizeof rel, "chat-templates/%s", name);
    size_t len = 0;
    return pg_test_read_file(pg_test_asset(rel), &len);
}

static void test_detect(void **state) {
    (void)state;
    static const struct {
        const char *file;
        pg_tool_format tools;
        pg_reasoning_format reasoning;
        bool v11;
    } cases[] = {
        {"Qwen-Qwen3-0.6B.jinja", PG_TOOLS_HERMES, PG_REASONING_QWEN3, false},
        {"Qwen-Qwen2.5-7B-Instruct.jinja", PG_TOOLS_HERMES, PG_REASONING_NONE, false},
        {"NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use.jinja", PG_TOOLS_HERMES, PG_REASONING_NONE,
         false},
        {"meta-llama-Llama-3.1-8B-Instruct.jinja", PG_TOOLS_LLAMA3_JSON, PG_REASONING_NONE, false},
        {"meta-llama-Llama-3.2-3B-Instruct.jinja", PG_TOOLS_LLAMA3_JSON, PG_REASONING_NONE, false},
        {"mistralai-Mistral-Nemo-Instruct-2407.jinja", PG_TOOLS_MISTRAL, PG_REASONING_NONE, false},
        {"unsloth-mistral-Devstral-Small-2507.jinja", PG_TOOLS_MISTRAL, PG_REASONING_NONE, true},
        {"deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja", PG_TOOLS_NONE, PG_REASONING_QWEN3,
         false},
        {"google-gemma-2-2b-it.jinja", PG_TOOLS_NONE, PG_REASONING_NONE, false},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *t = read_template(cases[i].file);
        pg_tool_format tf;
        pg_reasoning_format rf;
        bool v11;
        pg_oparse_detect(t, &tf, &rf, &v11);
        if (tf != cases[i].tools || rf != cases[i].reasoning || v11 != cases[i].v11)
            fail_msg("%s: tools %s reasoning %s v11 %d", cases[i].file, pg_tool_format_name(tf),
                     pg_reasoning_format_name(rf), v11);
        free(t);
    }
    const char *open = "<|im_start|>assistant\n<think>\n";
    const char *closed = "<|im_start|>assistant\n<think>\n\n</think>\n\n";
    assert_true(pg_oparse_prompt_in_reasoning(open, strlen(open)));
    assert_false(pg_oparse_prompt_in_reasoning(closed, strlen(closed)));
    assert_false(pg_oparse_prompt_in_reasoning("plain", 5));
    /* where a grammar applies on a reasoning model */
    const char *plain = "<|im_start|>assistant\n";
    assert_int_equal(pg_oparse_grammar_reasoning(PG_REASONING_QWEN3, open, strlen(open), false),
                     PG_GRAMMAR_AFTER_OPEN);
    assert_int_equal(pg_oparse_grammar_reasoning(PG_REASONING_QWEN3, plain, strlen(plain), false),
                     PG_GRAMMAR_AFTER_MAY_OPEN);
    assert_int_equal(pg_oparse_grammar_reasoning(PG_REASONING_QWEN3, closed, strlen(closed), false),
                     PG_GRAMMAR_WHOLE); /* enable_thinking false */
    assert_int_equal(pg_oparse_grammar_reasoning(PG_REASONING_QWEN3, plain, strlen(plain), true),
                     PG_GRAMMAR_WHOLE); /* the grammar writes <think> itself */
    assert_int_equal(pg_oparse_grammar_reasoning(PG_REASONING_QWEN3, open, strlen(open), true),
                     PG_GRAMMAR_WHOLE);
    assert_int_equal(
        pg_oparse_grammar_reasoning(PG_REASONING_DEEPSEEK_R1, plain, strlen(plain), false),
        PG_GRAMMAR_AFTER_OPEN);
    assert_int_equal(pg_oparse_grammar_reasoning(PG_REASONING_NONE, open, strlen(open), false),
                     PG_GRAMMAR_WHOLE);

    pg_tool_format tf;
    pg_reasoning_format rf;
    assert_true(pg_tool_format_parse("hermes", &tf) && tf == PG_TOOLS_HERMES);
    assert_true(pg_tool_format_parse("openai", &tf) && tf == PG_TOOLS_HARMONY);
    assert_false(pg_tool_format_parse("pythonic", &tf));
    assert_true(pg_reasoning_format_parse("deepseek_r1", &rf) && rf == PG_REASONING_DEEPSEEK_R1);
    assert_false(pg_reasoning_format_parse("granite", &rf));
    pg_hchat *h = NULL;
    pg_oparse_opts harmony = {PG_REASONING_NONE, false, PG_TOOLS_HARMONY};
    assert_int_equal(pg_hchat_create_text(1, &harmony, &h), PAGODA_ERR_INVALID_ARG);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hermes),
        cmocka_unit_test(test_hermes_malformed),
        cmocka_unit_test(test_hermes_streams_arguments),
        cmocka_unit_test(test_reasoning),
        cmocka_unit_test(test_llama3_json),
        cmocka_unit_test(test_mistral),
        cmocka_unit_test(test_llama3_mistral_stream_arguments),
        cmocka_unit_test(test_random_fragments),
        cmocka_unit_test(test_detect),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
