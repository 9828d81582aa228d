/* `pagoda serve` with a reasoning parser: structured outputs and forced tool
 * calls apply after the reasoning (pagoda_request.grammar_after_reasoning,
 * pg_oparse_grammar_reasoning). The real server runs in this process on the
 * tiny random-weight Qwen3 (../shared/assets/oracles/qwen3-dense-tiny/hf,
 * whose tokenizer has <think> / </think> as single tokens) with an
 * ephemeral port; requests go through testutil's pg_test_http_post.
 *
 * The random model is steered deterministically by the request itself
 * (greedy): logit_bias <think> +100, "~" +100, </think> +50 and
 * repetition_penalty 10 (a positive logit of a token already in the prompt
 * or output is divided by 10). Inside the reasoning nothing is masked, so
 * the model writes <think> (the only biased token the first mask allows),
 * "~" (100 against 50 and 100/10), </think> (50 against 100/10 twice): each
 * step wins by >= 40 logits over the biased rivals and by ~50 over the
 * unbiased tokens, while this model's own logits spread over a few units
 * (top-20 logprobs within ~3.5 of each other), on every ISA. After </think>
 * the grammar allows neither "~" nor the tags, so the model writes the
 * grammar's output. Before this feature the grammar applied from the first
 * token: no reasoning, and these tests fail. */
#define _GNU_SOURCE
#include "testutil.h"

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pagoda.h"
#include "server/server.h"

static pagoda_engine *g_engine;
static pg_server *g_srv;
static int g_port;
static int32_t g_think, g_end, g_tilde; /* <think>, </think>, "~" */

static const char *SCHEMA = "{\"type\":\"object\",\"properties\":{\"n\":{\"type\":\"integer\"}},"
                            "\"required\":[\"n\"]}";

static int32_t one_token(const char *text) {
    int32_t *ids = NULL;
    size_t n = 0;
    if (pagoda_tokenize_flags(g_engine, text, strlen(text), PAGODA_TOKENIZE_PARSE_SPECIAL, &ids,
                              &n) != PAGODA_OK ||
        n != 1) {
        pagoda_free(ids);
        return -1;
    }
    int32_t t = ids[0];
    pagoda_free(ids);
    return t;
}

static int group_setup(void **state) {
    (void)state;
    pagoda_engine_options o;
    pagoda_engine_options_default(&o);
    o.kv_cache_memory = 16u << 20;
    o.max_model_len = 1024;
    o.num_threads = 1;
    o.seed = 7;
    if (pagoda_engine_create(pg_test_asset("oracles/qwen3-dense-tiny/hf"), &o, &g_engine) !=
        PAGODA_OK) {
        fprintf(stderr, "engine: %s\n", pagoda_last_error());
        return -1;
    }
    g_think = one_token("<think>");
    g_end = one_token("</think>");
    g_tilde = one_token("~");
    if (g_think < 0 || g_end < 0 || g_tilde < 0) {
        fprintf(stderr, "the tokenizer lacks <think>, </think> or \"~\" as single tokens\n");
        return -1;
    }
    return 0;
}

static int group_teardown(void **state) {
    (void)state;
    pagoda_engine_free(g_engine);
    return 0;
}

/* A server on the shared engine with these parsers / template. */
static void start(const char *reasoning, const char *tools, const char *tpl) {
    pg_server_options so = {0};
    so.max_queue = -1;
    so.reasoning_parser = reasoning;
    so.tool_call_parser = tools;
    so.chat_template = tpl;
    if (pg_server_start(g_engine, &so, &g_srv) != PAGODA_OK)
        fail_msg("server: %s", pagoda_last_error());
    g_port = pg_server_port(g_srv);
}

static void stop(void) {
    pg_server_stop(g_srv);
    g_srv = NULL;
}

/* After each test, also a failed one: its server stops (the next test
 * starts its own on the shared engine, whose steps one thread makes). */
static int teardown(void **state) {
    (void)state;
    if (g_srv) stop();
    return 0;
}

/* A greedy chat body with the steering biases (<think> only when asked)
 * plus `extra` (JSON members). Malloc'ed. */
static char *body(bool bias_think, bool stream, const char *extra) {
    char *b = NULL;
    char think[32] = "";
    if (bias_think) snprintf(think, sizeof think, "\"%d\":100,", g_think);
    if (asprintf(&b,
                 "{\"messages\":[{\"role\":\"user\",\"content\":\"Give me a number.\"}],"
                 "\"temperature\":0,\"max_tokens\":96,\"repetition_penalty\":10,\"stream\":%s,"
                 "\"logit_bias\":{%s\"%d\":100,\"%d\":50},%s}",
                 stream ? "true" : "false", think, g_tilde, g_end, extra) < 0)
        fail_msg("out of memory");
    return b;
}

static cJSON *chat(const char *b) {
    char *reply = NULL;
    int st = pg_test_http_post(g_port, "/v1/chat/completions", b, &reply);
    if (st != 200) fail_msg("status %d: %s", st, reply);
    cJSON *o = cJSON_Parse(reply);
    if (!o) fail_msg("not JSON: %s", reply);
    free(reply);
    return o;
}

static const cJSON *message(const cJSON *resp) {
    const cJSON *c = cJSON_GetArrayItem(cJSON_GetObjectItem(resp, "choices"), 0);
    assert_non_null(c);
    const cJSON *m = cJSON_GetObjectItem(c, "message");
    assert_non_null(m);
    return m;
}

static const char *str_of(const cJSON *o, const char *k) {
    const cJSON *v = cJSON_GetObjectItem(o, k);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

/* content is the schema's JSON: {"n": integer} */
static void check_json(const char *content) {
    if (!content) fail_msg("no content");
    cJSON *v = cJSON_Parse(content);
    const cJSON *n = cJSON_GetObjectItemCaseSensitive(v, "n");
    if (!v || !cJSON_IsNumber(n) || n->valuedouble != (double)(long long)n->valuedouble ||
        cJSON_GetArraySize(v) != 1)
        fail_msg("content is not the schema's JSON: \"%s\"", content);
    cJSON_Delete(v);
}

/* The response_format member that asks for SCHEMA, into extra[n]. */
static void schema_format(char *extra, size_t n) {
    snprintf(extra, n,
             "\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"num\","
             "\"schema\":%s}}",
             SCHEMA);
}

/* A non-streamed chat of body(bias_think, false, extra) whose output must be
 * the steered split: reasoning_content "~", then the schema's JSON as content.
 * Returns the response (the caller deletes it). */
static cJSON *chat_think_then_json(bool bias_think, const char *extra) {
    char *b = body(bias_think, false, extra);
    cJSON *r = chat(b);
    free(b);
    const cJSON *m = message(r);
    const char *reasoning = str_of(m, "reasoning_content");
    if (!reasoning || strcmp(reasoning, "~"))
        fail_msg("reasoning_content: %s (content: %s)", reasoning ? reasoning : "null",
                 str_of(m, "content"));
    check_json(str_of(m, "content"));
    return r;
}

/* The reasoning and content deltas of a streamed chat, concatenated. */
static void stream_text(const char *b, char **reasoning, char **content) {
    char *reply = NULL;
    int st = pg_test_http_post(g_port, "/v1/chat/completions", b, &reply);
    if (st != 200) fail_msg("status %d: %s", st, reply);
    size_t rl = 0, cl = 0;
    *reasoning = calloc(1, 1);
    *content = calloc(1, 1);
    bool done = false;
    for (char *line = strtok(reply, "\n"); line; line = strtok(NULL, "\n")) {
        if (strncmp(line, "data: ", 6)) continue;
        if (!strcmp(line + 6, "[DONE]")) {
            done = true;
            continue;
        }
        cJSON *ev = cJSON_Parse(line + 6);
        if (!ev) fail_msg("bad event: %s", line);
        const cJSON *c = cJSON_GetArrayItem(cJSON_GetObjectItem(ev, "choices"), 0);
        const cJSON *d = c ? cJSON_GetObjectItem(c, "delta") : NULL;
        const char *r = d ? str_of(d, "reasoning_content") : NULL;
        const char *t = d ? str_of(d, "content") : NULL;
        if (r) {
            *reasoning = realloc(*reasoning, rl + strlen(r) + 1);
            strcpy(*reasoning + rl, r);
            rl += strlen(r);
        }
        if (t) {
            *content = realloc(*content, cl + strlen(t) + 1);
            strcpy(*content + cl, t);
            cl += strlen(t);
        }
        cJSON_Delete(ev);
    }
    assert_true(done);
    free(reply);
}

/* qwen3, Qwen3-style template (the prompt does not open <think>): the model
 * opens the reasoning itself, the JSON schema applies after </think>. */
static void test_json_schema_after_think(void **state) {
    (void)state;
    start("qwen3", NULL, NULL);
    char extra[512];
    schema_format(extra, sizeof extra);
    cJSON *r = chat_think_then_json(true, extra);
    /* streamed: the same split */
    char *sb = body(true, true, extra), *sr, *sc;
    stream_text(sb, &sr, &sc);
    assert_string_equal(sr, "~");
    assert_string_equal(sc, str_of(message(r), "content"));
    free(sr);
    free(sc);
    free(sb);
    cJSON_Delete(r);
}

/* A grammar that writes the <think> block itself owns the whole output: the
 * model may not open the reasoning on its own (else "~" would be the
 * reasoning and the regex would start over after </think>). */
static void test_grammar_writes_think(void **state) {
    (void)state;
    start("qwen3", NULL, NULL);
    char *b = body(true, false,
                   "\"structured_outputs\":{\"regex\":\"<think>[a-z]{1,4}</think>[0-9]{1,3}\"}");
    cJSON *r = chat(b);
    const cJSON *m = message(r);
    const char *reasoning = str_of(m, "reasoning_content"), *content = str_of(m, "content");
    if (!reasoning || !content ||
        strspn(reasoning, "abcdefghijklmnopqrstuvwxyz") != strlen(reasoning) || !*reasoning ||
        strspn(content, "0123456789") != strlen(content) || !*content)
        fail_msg("reasoning_content \"%s\", content \"%s\"", reasoning ? reasoning : "null",
                 content ? content : "null");
    cJSON_Delete(r);
    free(b);
}

/* deepseek_r1: the output is reasoning from its first token (no <think>
 * needed) up to </think>, then the schema's JSON. */
static void test_deepseek_r1(void **state) {
    (void)state;
    start("deepseek_r1", NULL, NULL);
    char extra[512];
    snprintf(extra, sizeof extra, "\"guided_json\":%s", SCHEMA);
    cJSON_Delete(chat_think_then_json(false, extra));
}

/* qwen3 with a thinking template (the prompt ends inside <think>, as
 * Qwen3-2507's): reasoning from the first token. */
static void test_prompt_opens_think(void **state) {
    (void)state;
    start("qwen3", NULL,
          "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + "
          "message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt "
          "%}{{ '<|im_start|>assistant\\n<think>\\n' }}{% endif %}");
    char extra[512];
    schema_format(extra, sizeof extra);
    cJSON_Delete(chat_think_then_json(false, extra));
}

/* tool_choice "required" (the grammar forcing a hermes call) after the
 * reasoning: reasoning_content, then a valid call. */
static void test_forced_tool_call_after_think(void **state) {
    (void)state;
    start("qwen3", "hermes", NULL);
    char extra[1024];
    snprintf(extra, sizeof extra,
             "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"pick\",\"parameters\":"
             "%s}}],\"tool_choice\":\"required\"",
             SCHEMA);
    char *b = body(true, false, extra);
    cJSON *r = chat(b);
    const cJSON *m = message(r);
    const char *reasoning = str_of(m, "reasoning_content");
    if (!reasoning || strcmp(reasoning, "~")) {
        char *t = cJSON_PrintUnformatted(m);
        fail_msg("reasoning_content: %s (message: %s)", reasoning ? reasoning : "null", t);
    }
    const cJSON *calls = cJSON_GetObjectItem(m, "tool_calls");
    assert_int_equal(cJSON_GetArraySize(calls), 1);
    const cJSON *fn = cJSON_GetObjectItem(cJSON_GetArrayItem(calls, 0), "function");
    assert_string_equal(str_of(fn, "name"), "pick");
    check_json(str_of(fn, "arguments"));
    const cJSON *c = cJSON_GetArrayItem(cJSON_GetObjectItem(r, "choices"), 0);
    assert_string_equal(str_of(c, "finish_reason"), "tool_calls");
    cJSON_Delete(r);
    free(b);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_json_schema_after_think, teardown),
        cmocka_unit_test_teardown(test_grammar_writes_think, teardown),
        cmocka_unit_test_teardown(test_deepseek_r1, teardown),
        cmocka_unit_test_teardown(test_prompt_opens_think, teardown),
        cmocka_unit_test_teardown(test_forced_tool_call_after_think, teardown),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
