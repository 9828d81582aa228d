/* Tool calling without an engine: the request fields (tools, tool_choice,
 * parallel_tool_calls: every 400 of vLLM's check_tool_usage), the server's
 * checks against a model's parser (pg_tools_check: "auto" needs
 * --enable-auto-tool-choice, forcing needs a syntax), and the grammars that
 * force a call (pg_tools_grammar_spec -> PAGODA_GRAMMAR_EBNF_SCHEMAS): for
 * each family's syntax, the canonical call text is accepted byte by byte,
 * then parsed back by the output parser into the same call; a wrong name,
 * arguments against the schema, a second call when parallel_tool_calls is
 * false, and free text are refused. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/grammars.h"
#include "grammar/gram.h"
#include "server/harmony_chat.h"
#include "server/openai.h"
#include "server/tool_calls.h"
#include "testutil.h"

#define TOOLS                                                                                      \
    "[{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"description\": \"d\", " \
    "\"parameters\": {\"type\": \"object\", \"properties\": {\"city\": {\"type\": \"string\"}, "   \
    "\"unit\": {\"type\": \"string\", \"enum\": [\"C\", \"F\", 3]}}, \"required\": "               \
    "[\"city\"]}}}, "                                                                              \
    "{\"type\": \"function\", \"function\": {\"name\": \"now\"}}]"

static pagoda_status parse(const char *extra, pg_api_request *r, pg_api_error *err) {
    char body[4096];
    snprintf(body, sizeof body,
             "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}], \"tools\": " TOOLS "%s}",
             extra);
    pagoda_sampling d = {0};
    d.top_p = 1;
    d.repetition_penalty = 1;
    d.seed = -1;
    return pg_api_parse(PG_API_CHAT, body, strlen(body), &d, r, err);
}

static void test_request_fields(void **state) {
    (void)state;
    pg_api_request r;
    pg_api_error err;
    assert_int_equal(parse("", &r, &err), PAGODA_OK);
    assert_int_equal(r.tool_choice, PG_TOOL_CHOICE_AUTO); /* tools without tool_choice */
    assert_int_equal(r.n_tools, 2);
    assert_true(r.parallel_tool_calls);
    pg_api_request_free(&r);
    assert_int_equal(parse(", \"tool_choice\": {\"type\": \"function\", \"function\": "
                           "{\"name\": \"now\"}}, \"parallel_tool_calls\": false",
                           &r, &err),
                     PAGODA_OK);
    assert_int_equal(r.tool_choice, PG_TOOL_CHOICE_NAMED);
    assert_string_equal(r.tool_choice_name, "now");
    assert_false(r.parallel_tool_calls);
    pg_api_request_free(&r);
    assert_int_equal(parse(", \"tool_choice\": \"none\"", &r, &err), PAGODA_OK);
    assert_int_equal(r.tool_choice, PG_TOOL_CHOICE_NONE);
    assert_null(r.kwargs_json);
    pg_api_request_free(&r);
    /* reasoning_effort reaches non-harmony templates as a variable (vLLM);
     * chat_template_kwargs wins */
    assert_int_equal(parse(", \"reasoning_effort\": \"low\", \"chat_template_kwargs\": "
                           "{\"enable_thinking\": false}",
                           &r, &err),
                     PAGODA_OK);
    assert_string_equal(r.kwargs_json, "{\"enable_thinking\":false,\"reasoning_effort\":\"low\"}");
    pg_api_request_free(&r);
    assert_int_equal(parse(", \"reasoning_effort\": \"low\", \"chat_template_kwargs\": "
                           "{\"reasoning_effort\": \"x\"}",
                           &r, &err),
                     PAGODA_OK);
    assert_string_equal(r.kwargs_json, "{\"reasoning_effort\":\"x\"}");
    pg_api_request_free(&r);

    static const struct {
        const char *extra, *param, *msg;
    } bad[] = {
        {", \"tool_choice\": \"sometimes\"", "tool_choice", "must be"},
        {", \"tool_choice\": {\"type\": \"function\", \"function\": {\"name\": \"nope\"}}",
         "tool_choice", "Tool 'nope' has not been passed in `tools`."},
        {", \"tool_choice\": {\"function\": {\"name\": \"now\"}}", "tool_choice", "must be"},
        {", \"parallel_tool_calls\": 1", "parallel_tool_calls", "boolean"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        assert_int_equal(parse(bad[i].extra, &r, &err), PAGODA_ERR_INVALID_ARG);
        assert_int_equal(err.status, 400);
        assert_string_equal(err.param, bad[i].param);
        if (!strstr(err.message, bad[i].msg)) fail_msg("%s: %s", bad[i].extra, err.message);
    }
    /* tool_choice without tools; malformed tools */
    static const char *const bodies[] = {
        "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"tool_choice\": \"auto\"}",
        "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"tools\": [{\"type\": "
        "\"retrieval\"}]}",
        "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"tools\": [{\"type\": "
        "\"function\", \"function\": {\"name\": \"has space\"}}]}",
        "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"tools\": [{\"type\": "
        "\"function\", \"function\": {\"name\": \"f\", \"parameters\": [1]}}]}",
    };
    static const char *const msgs[] = {"When using `tool_choice`, `tools` must be set.",
                                       "only function tools", "letters, digits",
                                       "JSON Schema object"};
    pagoda_sampling d = {0};
    d.top_p = 1;
    d.repetition_penalty = 1;
    for (size_t i = 0; i < sizeof bodies / sizeof bodies[0]; i++) {
        assert_int_equal(pg_api_parse(PG_API_CHAT, bodies[i], strlen(bodies[i]), &d, &r, &err),
                         PAGODA_ERR_INVALID_ARG);
        if (!strstr(err.message, msgs[i])) fail_msg("%zu: %s", i, err.message);
    }
}

static void test_check(void **state) {
    (void)state;
    pg_api_request r;
    pg_api_error err;
    bool parse_calls = true;
    assert_int_equal(parse("", &r, &err), PAGODA_OK);
    /* auto: needs the flag and a parser (vLLM's message) */
    assert_int_equal(pg_tools_check(&r, PG_TOOLS_HERMES, false, false, &parse_calls, &err),
                     PAGODA_ERR_INVALID_ARG);
    assert_string_equal(err.param, "tool_choice");
    assert_non_null(strstr(err.message, "--enable-auto-tool-choice"));
    assert_int_equal(pg_tools_check(&r, PG_TOOLS_NONE, false, true, &parse_calls, &err),
                     PAGODA_ERR_INVALID_ARG);
    assert_int_equal(pg_tools_check(&r, PG_TOOLS_HERMES, false, true, &parse_calls, &err),
                     PAGODA_OK);
    assert_true(parse_calls);
    /* harmony models parse calls without the flag (vLLM: use_harmony) */
    assert_int_equal(pg_tools_check(&r, PG_TOOLS_HARMONY, true, false, &parse_calls, &err),
                     PAGODA_OK);
    assert_true(parse_calls);
    pg_api_request_free(&r);
    assert_int_equal(parse(", \"tool_choice\": \"required\"", &r, &err), PAGODA_OK);
    assert_int_equal(pg_tools_check(&r, PG_TOOLS_LLAMA3_JSON, false, false, &parse_calls, &err),
                     PAGODA_OK); /* forcing needs no flag */
    assert_true(parse_calls);
    assert_int_equal(pg_tools_check(&r, PG_TOOLS_NONE, false, true, &parse_calls, &err),
                     PAGODA_ERR_INVALID_ARG);
    assert_non_null(strstr(err.message, "--tool-call-parser"));
    assert_int_equal(pg_tools_check(&r, PG_TOOLS_HARMONY, true, true, &parse_calls, &err),
                     PAGODA_ERR_INVALID_ARG);
    pg_api_request_free(&r);
    assert_int_equal(parse(", \"tool_choice\": \"none\"", &r, &err), PAGODA_OK);
    assert_int_equal(pg_tools_check(&r, PG_TOOLS_HERMES, false, false, &parse_calls, &err),
                     PAGODA_OK);
    assert_false(parse_calls);
    pg_api_request_free(&r);
}

static pg_gram *grammar_of(const char *extra, pg_tool_format f, bool v11) {
    pg_api_request r;
    pg_api_error err;
    assert_int_equal(parse(extra, &r, &err), PAGODA_OK);
    char *spec = NULL;
    assert_int_equal(pg_tools_grammar_spec(&r, f, v11, &spec, &err), PAGODA_OK);
    pg_gram *g = NULL;
    pagoda_status st = pg_grammar_build(PAGODA_GRAMMAR_EBNF_SCHEMAS, spec, strlen(spec), &g);
    if (st) fail_msg("%s: %s", spec, pagoda_last_error());
    free(spec);
    pg_api_request_free(&r);
    return g;
}

/* s with the first `from` replaced by `to`. */
static void replace(const char *s, const char *from, const char *to, char *out, size_t cap) {
    const char *at = strstr(s, from);
    assert_non_null(at);
    snprintf(out, cap, "%.*s%s%s", (int)(at - s), s, to, at + strlen(from));
}

/* The whole text is accepted and completes the grammar. */
static bool accepts(const pg_gram *g, const char *text) {
    pg_gstate *m = NULL;
    assert_int_equal(pg_gstate_create(g, &m), PAGODA_OK);
    bool ok = true;
    for (const char *c = text; *c && ok; c++) /* byte by byte, as tokens would */
        ok = pg_gstate_feed(m, (const uint8_t *)c, 1);
    ok = ok && pg_gstate_accepting(m);
    pg_gstate_free(m);
    return ok;
}

/* Parse `text` as the model's output: the calls' "name(args)" joined by " ". */
static void calls_of(pg_tool_format f, const char *text, char *out, size_t cap) {
    pg_oparse_opts o = {PG_REASONING_NONE, false, f};
    pg_hchat *h = NULL;
    assert_int_equal(pg_hchat_create_text(3, &o, &h), PAGODA_OK);
    assert_int_equal(pg_hchat_feed(h, text, strlen(text)), PAGODA_OK);
    assert_int_equal(pg_hchat_finish(h), PAGODA_OK);
    cJSON *m = pg_hchat_message(h);
    out[0] = 0;
    const cJSON *c;
    cJSON_ArrayForEach(c, cJSON_GetObjectItem(m, "tool_calls")) {
        const cJSON *fn = cJSON_GetObjectItem(c, "function");
        size_t n = strlen(out);
        snprintf(out + n, cap - n, "%s%s(%s)", n ? " " : "",
                 cJSON_GetObjectItem(fn, "name")->valuestring,
                 cJSON_GetObjectItem(fn, "arguments")->valuestring);
    }
    assert_true(cJSON_IsNull(cJSON_GetObjectItem(m, "content")));
    assert_string_equal(pg_hchat_finish_name(h, PAGODA_FINISH_STOP), "tool_calls");
    cJSON_Delete(m);
    pg_hchat_free(h);
}

static void test_forced_grammars(void **state) {
    (void)state;
    static const struct {
        pg_tool_format f;
        bool v11;
        const char *one, *two, *bad_args, *calls;
    } cases[] = {
        {PG_TOOLS_HERMES, false,
         "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n"
         "</tool_call>",
         "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\", \"unit\": "
         "\"C\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"now\", \"arguments\": {}}\n</tool_call>",
         "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"unit\": \"C\"}}\n</tool_call>",
         "get_weather({\"city\":\"Oslo\",\"unit\":\"C\"}) now({})"},
        {PG_TOOLS_LLAMA3_JSON, false,
         "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}",
         "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Oslo\", \"unit\": \"C\"}}; "
         "{\"name\": \"now\", \"parameters\": {}}",
         "{\"name\": \"get_weather\", \"parameters\": {\"city\": 3}}",
         "get_weather({\"city\":\"Oslo\",\"unit\":\"C\"}) now({})"},
        {PG_TOOLS_MISTRAL, false,
         "[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}]",
         "[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\", \"unit\": "
         "\"C\"}}, {\"name\": \"now\", \"arguments\": {}}]",
         "[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"city\": \"a\", \"x\": 1}}]",
         "get_weather({\"city\":\"Oslo\",\"unit\":\"C\"}) now({})"},
        {PG_TOOLS_MISTRAL, true, "[TOOL_CALLS]get_weather[ARGS]{\"city\": \"Paris\"}",
         "[TOOL_CALLS]get_weather[ARGS]{\"city\": \"Oslo\", \"unit\": "
         "\"C\"}[TOOL_CALLS]now[ARGS]{}",
         "[TOOL_CALLS]get_weather[ARGS]{\"unit\": \"K\", \"city\": \"a\"}",
         "get_weather({\"city\":\"Oslo\",\"unit\":\"C\"}) now({})"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        pg_gram *req = grammar_of(", \"tool_choice\": \"required\"", cases[i].f, cases[i].v11);
        pg_gram *one = grammar_of(", \"tool_choice\": \"required\", \"parallel_tool_calls\": false",
                                  cases[i].f, cases[i].v11);
        pg_gram *named = grammar_of(", \"tool_choice\": {\"type\": \"function\", \"function\": "
                                    "{\"name\": \"now\"}}",
                                    cases[i].f, cases[i].v11);
        if (!accepts(req, cases[i].one)) fail_msg("case %zu: one call refused", i);
        if (!accepts(req, cases[i].two)) fail_msg("case %zu: two calls refused", i);
        assert_true(accepts(one, cases[i].one));
        assert_false(accepts(one, cases[i].two)); /* parallel_tool_calls false */
        assert_false(accepts(req, cases[i].bad_args));
        char v[256]; /* "unit": 3 is in the enum but not a string: `type` leaves it out */
        replace(cases[i].one, "\"Paris\"", "\"Paris\", \"unit\": 3", v, sizeof v);
        assert_false(accepts(req, v));
        replace(cases[i].one, "\"Paris\"", "\"Paris\", \"unit\": \"F\"", v, sizeof v);
        assert_true(accepts(req, v));
        assert_false(accepts(req, "Sure, let me check."));
        assert_false(accepts(req, ""));
        assert_false(accepts(named, cases[i].one)); /* another function */
        char buf[512];
        calls_of(cases[i].f, cases[i].two, buf, sizeof buf);
        assert_string_equal(buf, cases[i].calls);
        calls_of(cases[i].f, cases[i].one, buf, sizeof buf);
        assert_string_equal(buf, "get_weather({\"city\":\"Paris\"})");
        pg_gram_free(req);
        pg_gram_free(one);
        pg_gram_free(named);
    }
    /* named "now" (no parameters: only {}) */
    pg_gram *named = grammar_of(", \"tool_choice\": {\"type\": \"function\", \"function\": "
                                "{\"name\": \"now\"}}",
                                PG_TOOLS_HERMES, false);
    assert_true(
        accepts(named, "<tool_call>\n{\"name\": \"now\", \"arguments\": {}}\n</tool_call>"));
    assert_false(accepts(
        named, "<tool_call>\n{\"name\": \"now\", \"arguments\": {\"a\": 1}}\n</tool_call>"));
    pg_gram_free(named);

    /* formats that cannot be forced; a schema keyword the engine lacks */
    pg_api_request r;
    pg_api_error err;
    char *spec = NULL;
    assert_int_equal(parse(", \"tool_choice\": \"required\"", &r, &err), PAGODA_OK);
    assert_int_equal(pg_tools_grammar_spec(&r, PG_TOOLS_NONE, false, &spec, &err),
                     PAGODA_ERR_INVALID_ARG);
    assert_int_equal(pg_tools_grammar_spec(&r, PG_TOOLS_HARMONY, false, &spec, &err),
                     PAGODA_ERR_INVALID_ARG);
    pg_api_request_free(&r);
    const char *body = "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"tools\": "
                       "[{\"type\": \"function\", \"function\": {\"name\": \"f\", \"parameters\": "
                       "{\"type\": \"object\", \"properties\": {\"a\": {\"not\": {}}}}}}], "
                       "\"tool_choice\": \"required\"}";
    pagoda_sampling d = {0};
    d.top_p = 1;
    d.repetition_penalty = 1;
    assert_int_equal(pg_api_parse(PG_API_CHAT, body, strlen(body), &d, &r, &err), PAGODA_OK);
    assert_int_equal(pg_tools_grammar_spec(&r, PG_TOOLS_HERMES, false, &spec, &err), PAGODA_OK);
    pg_gram *g = NULL;
    assert_int_equal(pg_grammar_build(PAGODA_GRAMMAR_EBNF_SCHEMAS, spec, strlen(spec), &g),
                     PAGODA_ERR_UNSUPPORTED);
    assert_non_null(strstr(pagoda_last_error(), "not"));
    free(spec);
    pg_api_request_free(&r);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_request_fields),
        cmocka_unit_test(test_check),
        cmocka_unit_test(test_forced_grammars),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
