/* The OpenAI API layer of `pagoda serve` without an engine: request parsing
 * and validation, response / SSE / error JSON, Prometheus text. */
#include <float.h>
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/metrics.h"
#include "server/openai.h"
#include "testutil.h"

static pagoda_sampling defaults(void) {
    pagoda_sampling s;
    memset(&s, 0, sizeof s);
    s.temperature = 0.7f;
    s.top_p = 0.9f;
    s.top_k = 40;
    s.repetition_penalty = 1.0f;
    s.seed = -1;
    s.skip_special_tokens = true;
    s.logprobs = -1;
    return s;
}

static pagoda_status parse(pg_api_kind k, const char *body, pg_api_request *r, pg_api_error *e) {
    pagoda_sampling d = defaults();
    return pg_api_parse(k, body, strlen(body), &d, r, e);
}

/* Parse must fail with a 400 naming `param` (and `needle` in the message). */
static void expect_bad(pg_api_kind k, const char *body, const char *param, const char *needle) {
    pg_api_request r;
    pg_api_error e;
    memset(&e, 0, sizeof e);
    pagoda_status st = parse(k, body, &r, &e);
    if (st != PAGODA_ERR_INVALID_ARG) fail_msg("accepted: %s", body);
    assert_int_equal(e.status, 400);
    if (param && strcmp(e.param, param))
        fail_msg("param '%s' != '%s' for %s", e.param, param, body);
    if (needle && !strstr(e.message, needle))
        fail_msg("message '%s' lacks '%s' for %s", e.message, needle, body);
    assert_null(r.prompts);
    assert_null(r.messages_json);
}

static void test_completion_fields(void **state) {
    (void)state;
    pg_api_request r;
    pg_api_error e;
    const char *body =
        "{\"model\": \"m\", \"prompt\": \"Hello\", \"max_tokens\": 7, \"n\": 3, \"temperature\": 0,"
        " \"top_p\": 0.5, \"top_k\": 5, \"min_p\": 0.1, \"seed\": 42, \"stop\": [\"a\", \"bc\"],"
        " \"stop_token_ids\": [2, 3], \"presence_penalty\": 0.5, \"frequency_penalty\": -0.5,"
        " \"repetition_penalty\": 1.2, \"logit_bias\": {\"17\": -100, \"5\": 2.5}, \"logprobs\": 3,"
        " \"echo\": true, \"ignore_eos\": true, \"min_tokens\": 2, \"skip_special_tokens\": false,"
        " \"include_stop_str_in_output\": true, \"stream\": true,"
        " \"stream_options\": {\"include_usage\": true}, \"user\": \"u1\", \"unknown_field\": [1]}";
    assert_int_equal(parse(PG_API_COMPLETION, body, &r, &e), PAGODA_OK);
    assert_string_equal(r.model, "m");
    assert_int_equal(r.n_prompts, 1);
    assert_string_equal(r.prompts[0].text, "Hello");
    assert_int_equal(r.engine_req.sampling.max_tokens, 7);
    assert_int_equal(r.n, 3);
    assert_true(r.engine_req.sampling.temperature == 0.0f);
    assert_true(r.engine_req.sampling.top_p == 0.5f);
    assert_int_equal(r.engine_req.sampling.top_k, 5);
    assert_true(fabsf(r.engine_req.sampling.min_p - 0.1f) < 1e-6f);
    assert_int_equal(r.engine_req.sampling.seed, 42);
    assert_int_equal(r.engine_req.sampling.n_stop, 2);
    assert_string_equal(r.engine_req.sampling.stop[1], "bc");
    assert_int_equal(r.engine_req.sampling.n_stop_token_ids, 2);
    assert_int_equal(r.engine_req.sampling.stop_token_ids[1], 3);
    assert_true(r.engine_req.sampling.presence_penalty == 0.5f);
    assert_true(r.engine_req.sampling.frequency_penalty == -0.5f);
    assert_true(fabsf(r.engine_req.sampling.repetition_penalty - 1.2f) < 1e-6f);
    assert_int_equal(r.engine_req.sampling.n_logit_bias, 2);
    assert_int_equal(r.engine_req.sampling.logit_bias[0].token, 17);
    assert_true(r.engine_req.sampling.logit_bias[0].bias == -100.0f);
    assert_int_equal(r.engine_req.sampling.logprobs, 3);
    assert_true(r.echo && r.engine_req.sampling.ignore_eos && r.stream && r.include_usage);
    assert_int_equal(r.engine_req.sampling.min_tokens, 2);
    assert_false(r.engine_req.sampling.skip_special_tokens);
    assert_true(r.engine_req.sampling.include_stop_str_in_output);
    assert_string_equal(r.user, "u1");
    assert_true(r.engine_req.add_special_tokens);
    pg_api_request_free(&r);
}

static void test_completion_defaults(void **state) {
    (void)state;
    pg_api_request r;
    pg_api_error e;
    assert_int_equal(parse(PG_API_COMPLETION, "{\"prompt\": \"x\", \"max_tokens\": null}", &r, &e),
                     PAGODA_OK);
    assert_null(r.model);
    assert_int_equal(r.engine_req.sampling.max_tokens, 0);  /* null = up to the context */
    assert_true(r.engine_req.sampling.temperature == 0.7f); /* the model's defaults */
    assert_int_equal(r.engine_req.sampling.top_k, 40);
    assert_int_equal(r.engine_req.sampling.seed, -1);
    assert_int_equal(r.n, 1);
    assert_int_equal(r.engine_req.sampling.logprobs, -1);
    assert_false(r.stream);
    /* the engine request's other fields: pagoda_request_defaults' */
    assert_int_equal(r.engine_req.prompt_logits_pos, -1);
    assert_int_equal(r.engine_req.reasoning_start_id, -1);
    assert_int_equal(r.engine_req.reasoning_end_id, -1);
    assert_null(r.engine_req.grammar);
    assert_null(r.engine_req.prompt);
    pg_api_request_free(&r);
}

/* The model's default stop ids stay; the request's are added. */
static void test_default_stop_ids(void **state) {
    (void)state;
    static const int32_t eos[] = {2, 9};
    pagoda_sampling d = defaults();
    d.stop_token_ids = eos;
    d.n_stop_token_ids = 2;
    pg_api_request r;
    pg_api_error e;
    const char *b1 = "{\"prompt\": \"x\"}";
    assert_int_equal(pg_api_parse(PG_API_COMPLETION, b1, strlen(b1), &d, &r, &e), PAGODA_OK);
    assert_int_equal(r.engine_req.sampling.n_stop_token_ids, 2);
    assert_int_equal(r.engine_req.sampling.stop_token_ids[1], 9);
    pg_api_request_free(&r);
    const char *b2 = "{\"prompt\": \"x\", \"stop_token_ids\": [5]}";
    assert_int_equal(pg_api_parse(PG_API_COMPLETION, b2, strlen(b2), &d, &r, &e), PAGODA_OK);
    assert_int_equal(r.engine_req.sampling.n_stop_token_ids, 3);
    assert_int_equal(r.engine_req.sampling.stop_token_ids[0], 2);
    assert_int_equal(r.engine_req.sampling.stop_token_ids[2], 5);
    pg_api_request_free(&r);
}

static void test_prompt_forms(void **state) {
    (void)state;
    pg_api_request r;
    pg_api_error e;
    assert_int_equal(parse(PG_API_COMPLETION, "{\"prompt\": [\"a\", \"bb\"]}", &r, &e), PAGODA_OK);
    assert_int_equal(r.n_prompts, 2);
    assert_string_equal(r.prompts[1].text, "bb");
    assert_int_equal(r.prompts[1].text_len, 2);
    pg_api_request_free(&r);
    assert_int_equal(parse(PG_API_COMPLETION, "{\"prompt\": [1, 2, 3]}", &r, &e), PAGODA_OK);
    assert_int_equal(r.n_prompts, 1);
    assert_null(r.prompts[0].text);
    assert_int_equal(r.prompts[0].n_ids, 3);
    assert_int_equal(r.prompts[0].ids[2], 3);
    pg_api_request_free(&r);
    assert_int_equal(parse(PG_API_COMPLETION, "{\"prompt\": [[1], [4, 5]]}", &r, &e), PAGODA_OK);
    assert_int_equal(r.n_prompts, 2);
    assert_int_equal(r.prompts[1].n_ids, 2);
    assert_int_equal(r.prompts[1].ids[0], 4);
    pg_api_request_free(&r);
    expect_bad(PG_API_COMPLETION, "{\"prompt\": \"\"}", "prompt", "empty");
    expect_bad(PG_API_COMPLETION, "{\"prompt\": []}", "prompt", "empty");
    expect_bad(PG_API_COMPLETION, "{\"prompt\": [\"a\", \"\"]}", "prompt", "item 1");
    expect_bad(PG_API_COMPLETION, "{\"prompt\": [[1], []]}", "prompt", "item 1");
    expect_bad(PG_API_COMPLETION, "{\"prompt\": 5}", "prompt", "must be");
    expect_bad(PG_API_COMPLETION, "{\"prompt\": [1, -2]}", "prompt",
               "item 1 must be a non-negative");
    expect_bad(PG_API_COMPLETION, "{\"prompt\": [1.5]}", "prompt", "item 0 must be a non-negative");
    expect_bad(PG_API_COMPLETION, "{\"prompt\": [\"a\", 3]}", "prompt", "item 1");
    expect_bad(PG_API_COMPLETION, "{\"max_tokens\": 3}", "prompt", "required");
}

/* A list prompt is all strings, all token ids, or all token-id lists, and
 * errors name the list item (and the token inside it) that is wrong. */
static void test_prompt_lists_not_mixed(void **state) {
    (void)state;
    expect_bad(PG_API_COMPLETION, "{\"prompt\": [[1, 2], \"a\"]}", "prompt",
               "item 1 is a string but item 0 is a list");
    expect_bad(PG_API_COMPLETION, "{\"prompt\": [\"a\", [1]]}", "prompt",
               "item 1 is a list but item 0 is a string");
    expect_bad(PG_API_COMPLETION, "{\"prompt\": [\"a\", \"b\", {}]}", "prompt",
               "item 2 is an object");
    expect_bad(PG_API_COMPLETION, "{\"prompt\": [1, \"a\"]}", "prompt", "item 1 must be a");
    expect_bad(PG_API_COMPLETION, "{\"prompt\": [1, [2]]}", "prompt", "item 1 must be a");
    expect_bad(PG_API_COMPLETION, "{\"prompt\": [[1], [2], [3, -1]]}", "prompt",
               "'prompt' item 2: token 1 must be a non-negative integer token id, got -1");
    expect_bad(PG_API_COMPLETION, "{\"prompt\": [[1], [2, \"x\"]]}", "prompt",
               "item 1: token 1 must be");
    expect_bad(PG_API_COMPLETION, "{\"prompt\": [[1], 2]}", "prompt", "item 1 is a number");
    expect_bad(PG_API_COMPLETION, "{\"prompt\": [null]}", "prompt", "item 0 is null");
    expect_bad(PG_API_COMPLETION, "{\"prompt\": [true, 1]}", "prompt", "item 0 is a boolean");
    expect_bad(PG_API_COMPLETION, "{\"prompt\": [[1], [], [2]]}", "prompt", "item 1 is empty");
    expect_bad(PG_API_COMPLETION, "{\"prompt\": \"a\", \"stop_token_ids\": [1, 2, -3]}",
               "stop_token_ids", "item 2");
}

/* Bodies cJSON alone would accept (or silently change) must be a 400. */
static void test_strict_json(void **state) {
    (void)state;
    static const char *const bad[][2] = {
        {"{\"prompt\": \"Once\\uZZZZ upon\"}", "4 hex digits) at byte 16"},
        {"{\"prompt\": \"a\\ud800\"}", "lone high surrogate"},
        {"{\"prompt\": \"a\\udc00b\"}", "lone low surrogate"},
        {"{\"prompt\": \"caf\xe9\"}", "invalid UTF-8 byte 0xe9"},
        {"{\"prompt\": \"\xc0\xaf\"}", "invalid UTF-8"},
        {"{\"prompt\": \"\xed\xa0\x80\"}", "invalid UTF-8"},
        {"{\"prompt\": \"a\"} x", "unexpected text after the JSON value"},
        {"{\"prompt\": \"a\"}{}", "unexpected text after the JSON value"},
        {"{\"prompt\": \"a\", \"max_tokens\": 01}", "leading zero"},
        {"{\"prompt\": \"a\", \"max_tokens\": 1.}", "digits after '.'"},
        {"{\"prompt\": \"a\", \"temperature\": .5}", "unexpected character '.'"},
        {"{\"prompt\": \"a\", \"max_tokens\": +1}", "unexpected character '+'"},
        {"{\"prompt\": \"a\tb\"}", "raw control character 0x09"},
        {"{\"prompt\": \"a\nb\"}", "raw control character 0x0a"},
        {"{\"prompt\": \"a\",}", "member name"},
        {"{\"prompt\": NaN}", "unexpected character 'N'"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        expect_bad(PG_API_COMPLETION, bad[i][0], NULL, "request body is not valid JSON: ");
        expect_bad(PG_API_COMPLETION, bad[i][0], NULL, bad[i][1]);
    }
    char deep[600];
    int k = 0;
    k += snprintf(deep, sizeof deep, "{\"prompt\": \"a\", \"x\": ");
    for (int d = 0; d < 200; d++)
        deep[k++] = '[';
    for (int d = 0; d < 200; d++)
        deep[k++] = ']';
    deep[k++] = '}';
    deep[k] = 0;
    expect_bad(PG_API_COMPLETION, deep, NULL, "nesting deeper than");
    /* U+0000 is valid JSON, but not in pagoda's strings: a 400 naming the field */
    expect_bad(PG_API_COMPLETION, "{\"prompt\": \"Once\\u0000 upon\"}", "prompt",
               "'prompt' contains a NUL character");
    expect_bad(PG_API_CHAT, "{\"messages\": [{\"role\": \"user\", \"content\": \"\\u0000\"}]}",
               "messages", "NUL");
    expect_bad(PG_API_COMPLETION, "{\"prompt\": \"a\", \"stop\": [\"x\\u0000\"]}", "stop", "NUL");
    /* the good forms still parse, with escapes decoded */
    pg_api_request r;
    pg_api_error e;
    assert_int_equal(parse(PG_API_COMPLETION,
                           " {\"prompt\": \"caf\\u00e9 \\ud83d\\ude00\\n\xe2\x82\xac\","
                           " \"temperature\": 0.5e0, \"max_tokens\": 1E1}\r\n",
                           &r, &e),
                     PAGODA_OK);
    assert_string_equal(r.prompts[0].text, "caf\xc3\xa9 \xf0\x9f\x98\x80\n\xe2\x82\xac");
    assert_int_equal(r.engine_req.sampling.max_tokens, 10);
    pg_api_request_free(&r);
}

/* seed: the whole int64 range, read exactly; nothing else. */
static void test_seed_int64(void **state) {
    (void)state;
    static const struct {
        const char *seed;
        int64_t want;
    } ok[] = {
        {"0", 0},
        {"42", 42},
        {"9223372036854775807", INT64_MAX},
        {"9223372036854775806", INT64_MAX - 1},
        {"-9223372036854775808", 0}, /* negative: seed & INT64_MAX */
        {"-1", INT64_MAX},
        {"-2", INT64_MAX - 1},
        {"42.0", 42},
        {"1e3", 1000},
    };
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        char body[128];
        snprintf(body, sizeof body, "{\"prompt\": \"a\", \"seed\": %s}", ok[i].seed);
        pg_api_request r;
        pg_api_error e;
        if (parse(PG_API_COMPLETION, body, &r, &e) != PAGODA_OK)
            fail_msg("seed %s rejected: %s", ok[i].seed, e.message);
        if (r.engine_req.sampling.seed != ok[i].want)
            fail_msg("seed %s -> %lld", ok[i].seed, (long long)r.engine_req.sampling.seed);
        pg_api_request_free(&r);
    }
    expect_bad(PG_API_COMPLETION, "{\"prompt\": \"a\", \"seed\": 9223372036854775808}", "seed",
               "[-9223372036854775808, 9223372036854775807], got 9223372036854775808");
    expect_bad(PG_API_COMPLETION, "{\"prompt\": \"a\", \"seed\": 18446744073709551615}", "seed",
               "got 18446744073709551615");
    expect_bad(PG_API_COMPLETION, "{\"prompt\": \"a\", \"seed\": -9223372036854775809}", "seed",
               NULL);
    expect_bad(PG_API_COMPLETION, "{\"prompt\": \"a\", \"seed\": 1.5}", "seed", "got 1.5");
    expect_bad(PG_API_COMPLETION, "{\"prompt\": \"a\", \"seed\": 1e30}", "seed", NULL);
    expect_bad(PG_API_COMPLETION, "{\"prompt\": \"a\", \"seed\": \"5\"}", "seed", "a string");
    expect_bad(PG_API_COMPLETION, "{\"prompt\": \"a\", \"seed\": true}", "seed", "a boolean");
    /* the first of duplicate members counts, as for every other field */
    pg_api_request r;
    pg_api_error e;
    assert_int_equal(
        parse(PG_API_COMPLETION, "{\"prompt\": \"a\", \"seed\": 7, \"seed\": 1.5}", &r, &e),
        PAGODA_OK);
    assert_int_equal(r.engine_req.sampling.seed, 7);
    pg_api_request_free(&r);
}

static void test_continue_final_message(void **state) {
    (void)state;
    const char *user = "{\"role\": \"user\", \"content\": \"hi\"}";
    char body[512];
    snprintf(body, sizeof body,
             "{\"messages\": [%s, {\"role\": \"assistant\", \"content\": \"Once upon \"}],"
             " \"continue_final_message\": true}",
             user);
    expect_bad(PG_API_CHAT, body, "continue_final_message",
               "Cannot set both `continue_final_message` and `add_generation_prompt`");
    snprintf(body, sizeof body,
             "{\"messages\": [%s], \"continue_final_message\": true,"
             " \"add_generation_prompt\": false}",
             user);
    expect_bad(PG_API_CHAT, body, "continue_final_message", "messages[0] has role 'user'");
    snprintf(body, sizeof body,
             "{\"messages\": [%s, {\"role\": \"assistant\", \"content\": null}],"
             " \"continue_final_message\": true, \"add_generation_prompt\": false}",
             user);
    expect_bad(PG_API_CHAT, body, "continue_final_message", "no text");
    expect_bad(PG_API_CHAT,
               "{\"messages\": [{\"role\": \"assistant\", \"content\": \"x\"}],"
               " \"continue_final_message\": 1}",
               "continue_final_message", "boolean");
    pg_api_request r;
    pg_api_error e;
    snprintf(body, sizeof body,
             "{\"messages\": [%s, {\"role\": \"assistant\", \"content\": [{\"type\": \"text\","
             " \"text\": \"a\"}, {\"type\": \"text\", \"text\": \"Once upon \"}]}],"
             " \"continue_final_message\": true, \"add_generation_prompt\": false}",
             user);
    assert_int_equal(parse(PG_API_CHAT, body, &r, &e), PAGODA_OK);
    assert_true(r.continue_final_message);
    assert_false(r.add_generation_prompt);
    assert_string_equal(r.final_text, "Once upon ");
    pg_api_request_free(&r);

    /* the cut, as transformers' apply_chat_template(continue_final_message=True) */
    const char *rendered = "<s>user: Once upon</s><s>assistant: Once upon </s>\n";
    size_t keep = 0;
    assert_int_equal(pg_api_continue_final(rendered, strlen(rendered), "Once upon ", &keep, &e),
                     PAGODA_OK);
    assert_int_equal(keep, strlen("<s>user: Once upon</s><s>assistant: Once upon "));
    const char *trimmed = "<|im_start|>assistant\nOnce upon<|im_end|>\n"; /* template strips */
    assert_int_equal(pg_api_continue_final(trimmed, strlen(trimmed), "  Once upon\n", &keep, &e),
                     PAGODA_OK);
    assert_int_equal(keep, strlen("<|im_start|>assistant\nOnce upon"));
    assert_int_equal(pg_api_continue_final(trimmed, strlen(trimmed), "Twice", &keep, &e),
                     PAGODA_ERR_INVALID_ARG);
    assert_int_equal(e.status, 400);
    assert_non_null(strstr(e.message, "does not appear"));
    assert_int_equal(pg_api_continue_final(trimmed, strlen(trimmed), "", &keep, &e), PAGODA_OK);
    assert_int_equal(keep, strlen(trimmed));
}

static void test_capacity_and_model(void **state) {
    (void)state;
    pg_api_error e;
    assert_int_equal(pg_api_check_capacity(41, 1, 40, &e), PAGODA_OK);
    assert_int_equal(pg_api_check_capacity(42, 1, 40, &e), PAGODA_ERR_INVALID_ARG);
    assert_int_equal(e.status, 400);
    assert_string_equal(e.param, "n");
    assert_non_null(strstr(e.message, "needs 42 sequences"));
    assert_non_null(strstr(e.message, "--max-num-seqs 1 running + --max-queue 40 waiting"));
    assert_int_equal(pg_api_check_model(NULL, "m", &e), PAGODA_OK);
    assert_int_equal(pg_api_check_model("m", "m", &e), PAGODA_OK);
    assert_int_not_equal(pg_api_check_model("gpt-9", "m", &e), PAGODA_OK);
    assert_int_equal(e.status, 404);
    assert_string_equal(e.code, "model_not_found");
    assert_non_null(strstr(e.message, "gpt-9"));
}

static void test_tokenize_bodies(void **state) {
    (void)state;
    pg_api_request r;
    pg_api_error e;
    const char *b = "{\"prompt\": \"Hi\", \"model\": \"m\", \"return_token_strs\": true}";
    assert_int_equal(pg_api_parse_tokenize(b, strlen(b), &r, &e), PAGODA_OK);
    assert_int_equal(r.kind, PG_API_COMPLETION);
    assert_string_equal(r.prompts[0].text, "Hi");
    assert_string_equal(r.model, "m");
    assert_true(r.return_token_strs && r.engine_req.add_special_tokens);
    pg_api_request_free(&r);
    b = "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"add_generation_prompt\": "
        "false, \"chat_template_kwargs\": {\"k\": 1}}";
    assert_int_equal(pg_api_parse_tokenize(b, strlen(b), &r, &e), PAGODA_OK);
    assert_int_equal(r.kind, PG_API_CHAT);
    assert_false(r.engine_req.add_special_tokens || r.add_generation_prompt || r.return_token_strs);
    assert_non_null(r.kwargs_json);
    pg_api_request_free(&r);
    static const char *const bad[][3] = {
        {"{}", "prompt", "is required"},
        {"{\"prompt\": 5}", "prompt", "must be a string"},
        {"{\"prompt\": \"a\", \"model\": 1}", "model", "string"},
        {"{\"prompt\": \"a\", \"return_token_strs\": \"yes\"}", "return_token_strs", "boolean"},
        {"{\"prompt\": \"a\", \"add_special_tokens\": 1}", "add_special_tokens", "boolean"},
        {"{\"messages\": [{\"role\": \"wizard\"}]}", "messages", "wizard"},
        {"{\"prompt\": \"a\\ud800\"}", "", "not valid JSON"},
        {"[1]", "", "JSON object"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        memset(&e, 0, sizeof e);
        if (pg_api_parse_tokenize(bad[i][0], strlen(bad[i][0]), &r, &e) == PAGODA_OK)
            fail_msg("tokenize accepted %s", bad[i][0]);
        assert_int_equal(e.status, 400);
        assert_string_equal(e.param, bad[i][1]);
        if (!strstr(e.message, bad[i][2])) fail_msg("'%s' lacks '%s'", e.message, bad[i][2]);
        assert_null(r.prompts);
    }
    b = "{\"tokens\": [1, 2, 3], \"model\": \"x\"}";
    assert_int_equal(pg_api_parse_detokenize(b, strlen(b), &r, &e), PAGODA_OK);
    assert_int_equal(r.prompts[0].n_ids, 3);
    assert_int_equal(r.prompts[0].ids[2], 3);
    assert_string_equal(r.model, "x");
    pg_api_request_free(&r);
    b = "{\"tokens\": []}";
    assert_int_equal(pg_api_parse_detokenize(b, strlen(b), &r, &e), PAGODA_OK);
    assert_int_equal(r.prompts[0].n_ids, 0);
    pg_api_request_free(&r);
    static const char *const dbad[][2] = {
        {"{}", "is required"},
        {"{\"tokens\": \"1 2\"}", "is required"},
        {"{\"tokens\": [1, -1]}", "item 1 must be a non-negative"},
        {"{\"tokens\": [1, 2.5]}", "item 1"},
        {"{\"tokens\": [1], \"x\": 01}", "not valid JSON"},
    };
    for (size_t i = 0; i < sizeof dbad / sizeof dbad[0]; i++) {
        if (pg_api_parse_detokenize(dbad[i][0], strlen(dbad[i][0]), &r, &e) == PAGODA_OK)
            fail_msg("detokenize accepted %s", dbad[i][0]);
        assert_int_equal(e.status, 400);
        if (!strstr(e.message, dbad[i][1])) fail_msg("'%s' lacks '%s'", e.message, dbad[i][1]);
    }
}

static void test_bad_json_and_types(void **state) {
    (void)state;
    expect_bad(PG_API_COMPLETION, "{\"prompt\": \"a\"", NULL, "not valid JSON");
    expect_bad(PG_API_COMPLETION, "", NULL, "not valid JSON");
    expect_bad(PG_API_COMPLETION, "[1]", NULL, "JSON object");
    expect_bad(PG_API_COMPLETION, "{\"prompt\": \"a\", \"max_tokens\": \"10\"}", "max_tokens",
               "integer");
    expect_bad(PG_API_COMPLETION, "{\"prompt\": \"a\", \"max_tokens\": 2.5}", "max_tokens",
               "integer");
    expect_bad(PG_API_COMPLETION, "{\"prompt\": \"a\", \"temperature\": \"hot\"}", "temperature",
               "number");
    expect_bad(PG_API_COMPLETION, "{\"prompt\": \"a\", \"stream\": 1}", "stream", "boolean");
    expect_bad(PG_API_COMPLETION, "{\"prompt\": \"a\", \"stop\": 5}", "stop", NULL);
    expect_bad(PG_API_COMPLETION, "{\"prompt\": \"a\", \"stop\": [\"x\", 1]}", "stop", "item 1");
    expect_bad(PG_API_COMPLETION, "{\"prompt\": \"a\", \"stop\": \"\"}", "stop", "empty");
    expect_bad(PG_API_COMPLETION, "{\"prompt\": \"a\", \"model\": 3}", "model", "string");
    expect_bad(PG_API_COMPLETION, "{\"prompt\": \"a\", \"logit_bias\": {\"x\": 1}}", "logit_bias",
               "not a token id");
    expect_bad(PG_API_COMPLETION, "{\"prompt\": \"a\", \"logit_bias\": {\"3\": 101}}", "logit_bias",
               "[-100, 100]");
    expect_bad(PG_API_COMPLETION, "{\"prompt\": \"a\", \"logit_bias\": [1]}", "logit_bias", NULL);
    expect_bad(PG_API_COMPLETION, "{\"prompt\": \"a\", \"stop_token_ids\": 3}", "stop_token_ids",
               NULL);
    expect_bad(PG_API_COMPLETION, "{\"prompt\": \"a\", \"echo\": \"yes\"}", "echo", "boolean");
    expect_bad(PG_API_COMPLETION, "{\"prompt\": \"a\", \"suffix\": \"b\"}", "suffix", "not supported");
    expect_bad(PG_API_COMPLETION, "{\"prompt\": \"a\", \"logprobs\": true}", "logprobs", "integer");
    expect_bad(PG_API_COMPLETION, "{\"prompt\": \"a\", \"user\": 1}", "user", "string");
    expect_bad(PG_API_COMPLETION, "{\"prompt\": \"a\", \"stream_options\": 1, \"stream\": true}",
               "stream_options", "object");
}

/* cache_salt (vLLM): a non-empty string on both endpoints, else a 400
 * naming it; absent or null means the shared cache. */
static void test_cache_salt(void **state) {
    (void)state;
    static const char *const bad[] = {"1", "\"\"", "[\"a\"]", "{\"k\": \"v\"}", "true"};
    static const char *const says[] = {"a number", "an empty string", "a list", "an object",
                                       "a boolean"};
    char body[256];
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        snprintf(body, sizeof body, "{\"prompt\": \"a\", \"cache_salt\": %s}", bad[i]);
        expect_bad(PG_API_COMPLETION, body, "cache_salt", says[i]);
        snprintf(body, sizeof body,
                 "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}], "
                 "\"cache_salt\": %s}",
                 bad[i]);
        expect_bad(PG_API_CHAT, body, "cache_salt", says[i]);
    }
    pg_api_request r;
    pg_api_error e;
    assert_int_equal(parse(PG_API_COMPLETION, "{\"prompt\": \"a\", \"cache_salt\": \"t-1\"}", &r, &e),
                     PAGODA_OK);
    assert_string_equal(r.cache_salt, "t-1");
    assert_ptr_equal(r.engine_req.cache_salt, r.cache_salt); /* the engine request's */
    pg_api_request_free(&r);
    assert_int_equal(parse(PG_API_CHAT,
                           "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}], "
                           "\"cache_salt\": \"\\u00e9t\xc3\xa9\"}",
                           &r, &e),
                     PAGODA_OK);
    assert_string_equal(r.cache_salt, "\xc3\xa9t\xc3\xa9");
    pg_api_request_free(&r);
    assert_int_equal(parse(PG_API_COMPLETION, "{\"prompt\": \"a\", \"cache_salt\": null}", &r, &e),
                     PAGODA_OK);
    assert_null(r.cache_salt);
    assert_null(r.engine_req.cache_salt);
    pg_api_request_free(&r);
}

static void test_ranges(void **state) {
    (void)state;
    expect_bad(PG_API_COMPLETION, "{\"prompt\": \"a\", \"max_tokens\": 0}", "max_tokens",
               "at least 1");
    expect_bad(PG_API_COMPLETION, "{\"prompt\": \"a\", \"max_tokens\": -5}", "max_tokens",
               "at least 1");
    expect_bad(PG_API_COMPLETION, "{\"prompt\": \"a\", \"temperature\": -0.1}", "temperature",
               ">= 0");
    expect_bad(PG_API_COMPLETION, "{\"prompt\": \"a\", \"top_p\": 0}", "top_p", "(0, 1]");
    expect_bad(PG_API_COMPLETION, "{\"prompt\": \"a\", \"top_p\": -1e-300}", "top_p", "(0, 1]");
    { /* positive but below float's range: accepted (vLLM), the smallest normal float */
        pg_api_request r;
        pg_api_error e;
        assert_int_equal(parse(PG_API_COMPLETION, "{\"prompt\": \"a\", \"top_p\": 1e-300}", &r, &e),
                         PAGODA_OK);
        assert_true(r.engine_req.sampling.top_p == FLT_MIN);
        pg_api_request_free(&r);
    }
    expect_bad(PG_API_COMPLETION, "{\"prompt\": \"a\", \"top_p\": 1.5}", "top_p", "(0, 1]");
    expect_bad(PG_API_COMPLETION, "{\"prompt\": \"a\", \"n\": 0}", "n", "[1, ");
    expect_bad(PG_API_COMPLETION, "{\"prompt\": \"a\", \"n\": 1000}", "n", NULL);
    expect_bad(PG_API_COMPLETION, "{\"prompt\": \"a\", \"min_p\": 2}", "min_p", NULL);
    expect_bad(PG_API_COMPLETION, "{\"prompt\": \"a\", \"top_k\": -2}", "top_k", NULL);
    expect_bad(PG_API_COMPLETION, "{\"prompt\": \"a\", \"presence_penalty\": 3}",
               "presence_penalty", NULL);
    expect_bad(PG_API_COMPLETION, "{\"prompt\": \"a\", \"frequency_penalty\": -3}",
               "frequency_penalty", NULL);
    expect_bad(PG_API_COMPLETION, "{\"prompt\": \"a\", \"repetition_penalty\": 0}",
               "repetition_penalty", NULL);
    expect_bad(PG_API_COMPLETION, "{\"prompt\": \"a\", \"logprobs\": 21}", "logprobs", NULL);
    expect_bad(PG_API_COMPLETION, "{\"prompt\": \"a\", \"max_tokens\": 2, \"min_tokens\": 3}",
               "min_tokens", NULL);
    expect_bad(PG_API_COMPLETION,
               "{\"prompt\": \"a\", \"stream_options\": {\"include_usage\": true}}",
               "stream_options", "stream");
    pg_api_request r;
    pg_api_error e;
    assert_int_equal(
        parse(PG_API_COMPLETION, "{\"prompt\": \"a\", \"top_p\": 1, \"top_k\": -1}", &r, &e),
        PAGODA_OK);
    pg_api_request_free(&r);
}

static void test_chat_parse(void **state) {
    (void)state;
    pg_api_request r;
    pg_api_error e;
    const char *body =
        "{\"messages\": [{\"role\": \"system\", \"content\": \"be brief\"},"
        " {\"role\": \"user\", \"content\": [{\"type\": \"text\", \"text\": \"hi\"}]},"
        " {\"role\": \"assistant\", \"content\": null, \"tool_calls\": []},"
        " {\"role\": \"tool\", \"content\": \"42\"}],"
        " \"max_completion_tokens\": 9, \"logprobs\": true, \"top_logprobs\": 2,"
        " \"chat_template_kwargs\": {\"enable_thinking\": false}, \"add_generation_prompt\": false,"
        " \"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"f\"}}]}";
    assert_int_equal(parse(PG_API_CHAT, body, &r, &e), PAGODA_OK);
    assert_non_null(r.messages_json);
    cJSON *m = cJSON_Parse(r.messages_json);
    assert_int_equal(cJSON_GetArraySize(m), 4);
    cJSON_Delete(m);
    assert_non_null(strstr(r.kwargs_json, "enable_thinking"));
    assert_non_null(strstr(r.tools_json, "function"));
    assert_false(r.add_generation_prompt);
    assert_false(r.engine_req.add_special_tokens);
    assert_int_equal(r.engine_req.sampling.max_tokens, 9);
    assert_int_equal(r.engine_req.sampling.logprobs, 2);
    pg_api_request_free(&r);
    assert_int_equal(parse(PG_API_CHAT,
                           "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}],"
                           " \"logprobs\": false}",
                           &r, &e),
                     PAGODA_OK);
    assert_int_equal(r.engine_req.sampling.logprobs, -1);
    assert_true(r.add_generation_prompt);
    pg_api_request_free(&r);
    expect_bad(PG_API_CHAT, "{}", "messages", "required");
    expect_bad(PG_API_CHAT, "{\"messages\": []}", "messages", "non-empty");
    expect_bad(PG_API_CHAT, "{\"messages\": \"hi\"}", "messages", NULL);
    expect_bad(PG_API_CHAT, "{\"messages\": [{\"role\": \"wizard\", \"content\": \"x\"}]}",
               "messages", "wizard");
    expect_bad(PG_API_CHAT, "{\"messages\": [{\"content\": \"x\"}]}", "messages", "role");
    expect_bad(PG_API_CHAT,
               "{\"messages\": [{\"role\": \"user\", \"content\": [{\"type\": \"image_url\"}]}]}",
               "messages", "text part of the model");
    expect_bad(PG_API_CHAT,
               "{\"messages\": [{\"role\": \"user\", \"content\": [{\"type\": \"text\", "
               "\"text\": \"what is this?\"}, {\"type\": \"image_url\", \"image_url\": "
               "{\"url\": \"data:image/png;base64,iVBORw0KGgo=\"}}]}]}",
               "messages", "'image_url' parts are not supported");
    expect_bad(PG_API_CHAT,
               "{\"messages\": [{\"role\": \"user\", \"content\": [{\"type\": \"video\"}]}]}",
               "messages", "text");
    expect_bad(PG_API_CHAT, "{\"messages\": [{\"role\": \"user\", \"content\": 5}]}", "messages",
               NULL);
    expect_bad(PG_API_CHAT,
               "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"top_logprobs\": 2}",
               "top_logprobs", "logprobs");
    expect_bad(PG_API_CHAT,
               "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"logprobs\": 3}",
               "logprobs", "boolean");
    expect_bad(PG_API_CHAT,
               "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], "
               "\"chat_template_kwargs\": []}",
               "chat_template_kwargs", NULL);
    expect_bad(PG_API_CHAT,
               "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], "
               "\"max_completion_tokens\": 0}",
               "max_completion_tokens", NULL);
    expect_bad(PG_API_CHAT,
               "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"tools\": {}}", "tools",
               NULL);
    /* assistant-message fields no template renders are 400s naming them;
     * null is "none" */
    static const char *const unrendered[][2] = {
        {"\"audio\": {\"id\": \"audio_1\"}", "messages[1].audio"},
        {"\"function_call\": {\"name\": \"f\", \"arguments\": \"{}\"}", "messages[1].function_call"},
        {"\"refusal\": \"I cannot\"", "messages[1].refusal"},
    };
    for (size_t i = 0; i < sizeof unrendered / sizeof unrendered[0]; i++) {
        char b[512];
        snprintf(b, sizeof b,
                 "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}, {\"role\": "
                 "\"assistant\", \"content\": \"y\", %s}, {\"role\": \"user\", \"content\": "
                 "\"z\"}]}",
                 unrendered[i][0]);
        expect_bad(PG_API_CHAT, b, "messages", unrendered[i][1]);
    }
    assert_int_equal(parse(PG_API_CHAT,
                           "{\"messages\": [{\"role\": \"assistant\", \"content\": \"y\", "
                           "\"audio\": null, \"refusal\": null, \"function_call\": null}]}",
                           &r, &e),
                     PAGODA_OK);
    pg_api_request_free(&r);
}

/* Known OpenAI / vLLM fields pagoda does not implement are 400s naming
 * them unless their value asks for nothing; label fields have their type
 * checked. */
static void test_known_fields(void **state) {
    (void)state;
    static const char *const pattern[] = {"max_repetition_pattern_size",
                                          "min_repetition_pattern_size", "repetition_min_count"};
    for (size_t i = 0; i < sizeof pattern / sizeof pattern[0]; i++) {
        char b[256];
        for (int k = 0; k < 2; k++) {
            pg_api_kind kind = k ? PG_API_CHAT : PG_API_COMPLETION;
            const char *base = k ? "\"messages\": [{\"role\": \"user\", \"content\": \"x\"}]"
                                 : "\"prompt\": \"x\"";
            snprintf(b, sizeof b, "{%s, \"%s\": 3}", base, pattern[i]);
            expect_bad(kind, b, pattern[i], "repeated token patterns");
            snprintf(b, sizeof b, "{%s, \"%s\": 0}", base, pattern[i]);
            pg_api_request r;
            pg_api_error e;
            assert_int_equal(parse(kind, b, &r, &e), PAGODA_OK);
            pg_api_request_free(&r);
        }
    }
    expect_bad(PG_API_CHAT,
               "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"metadata\": 5}",
               "metadata", "object of string values");
    expect_bad(PG_API_COMPLETION, "{\"prompt\": \"x\", \"metadata\": {\"a\": 1}}", "metadata",
               "object of string values");
    expect_bad(PG_API_COMPLETION, "{\"prompt\": \"x\", \"prompt_cache_key\": 5}",
               "prompt_cache_key", "string");
    expect_bad(PG_API_CHAT,
               "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], "
               "\"safety_identifier\": []}",
               "safety_identifier", "string");
    pg_api_request r;
    pg_api_error e;
    assert_int_equal(parse(PG_API_CHAT,
                           "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], "
                           "\"metadata\": {\"a\": \"b\"}, \"prompt_cache_key\": \"k\", "
                           "\"safety_identifier\": \"s\"}",
                           &r, &e),
                     PAGODA_OK);
    pg_api_request_free(&r);
}

static void test_check_length(void **state) {
    (void)state;
    pg_api_error e;
    assert_int_equal(pg_api_check_length(10, 20, 512, &e), PAGODA_OK);
    assert_int_equal(pg_api_check_length(10, 0, 512, &e), PAGODA_OK);
    assert_int_equal(pg_api_check_length(0, 0, 512, &e), PAGODA_ERR_INVALID_ARG);
    assert_non_null(strstr(e.message, "empty"));
    assert_int_equal(pg_api_check_length(512, 0, 512, &e), PAGODA_ERR_INVALID_ARG);
    assert_non_null(strstr(e.message, "512"));
    assert_int_equal(pg_api_check_length(500, 20, 512, &e), PAGODA_ERR_INVALID_ARG);
    assert_int_equal(e.status, 400);
    assert_string_equal(e.param, "max_tokens");
    assert_non_null(strstr(e.message, "520 tokens (500 in the prompt, 20 for the completion)"));
    assert_int_equal(pg_api_check_length(492, 20, 512, &e), PAGODA_OK);
}

static void test_error_json(void **state) {
    (void)state;
    pg_api_error e;
    pg_api_fail(&e, 404, "model", "The model `%s` does not exist.", "x\"y");
    e.code = "model_not_found";
    char *js = pg_api_error_json(&e);
    cJSON *o = cJSON_Parse(js);
    cJSON *err = cJSON_GetObjectItem(o, "error");
    assert_string_equal(cJSON_GetObjectItem(err, "message")->valuestring,
                        "The model `x\"y` does not exist.");
    assert_string_equal(cJSON_GetObjectItem(err, "type")->valuestring, "invalid_request_error");
    assert_string_equal(cJSON_GetObjectItem(err, "param")->valuestring, "model");
    assert_string_equal(cJSON_GetObjectItem(err, "code")->valuestring, "model_not_found");
    cJSON_Delete(o);
    free(js);
    pg_api_fail(&e, 401, NULL, "no key");
    js = pg_api_error_json(&e);
    o = cJSON_Parse(js);
    err = cJSON_GetObjectItem(o, "error");
    assert_true(cJSON_IsNull(cJSON_GetObjectItem(err, "param")));
    assert_string_equal(cJSON_GetObjectItem(err, "type")->valuestring, "authentication_error");
    cJSON_Delete(o);
    free(js);
    /* a message quoting the client's raw bytes (a path or method with
     * non-UTF-8 bytes, or a multi-byte character cut by %.Ns) is still
     * valid UTF-8 in the JSON: each bad byte becomes U+FFFD */
    pg_api_fail(&e, 404, NULL, "no such endpoint: %s %.4s", "/v1/\xff\xfe", "ab\xE2\x82\xAC");
    js = pg_api_error_json(&e);
    o = cJSON_Parse(js);
    err = cJSON_GetObjectItem(o, "error");
    assert_string_equal(cJSON_GetObjectItem(err, "message")->valuestring,
                        "no such endpoint: /v1/\xEF\xBF\xBD\xEF\xBF\xBD "
                        "ab\xEF\xBF\xBD\xEF\xBF\xBD");
    cJSON_Delete(o);
    free(js);
}

static pg_api_logprob mk_lp(const char *t, float v, int ntop) {
    pg_api_logprob lp = {strdup(t), v, NULL, 0, -1, -1};
    if (ntop) {
        lp.top = calloc((size_t)ntop, sizeof *lp.top);
        lp.n_top = ntop;
        for (int i = 0; i < ntop; i++) {
            char b[16];
            snprintf(b, sizeof b, "t%d", i);
            lp.top[i].text = strdup(b);
            lp.top[i].logprob = -1.0f - (float)i;
        }
    }
    return lp;
}

static void test_response_completion(void **state) {
    (void)state;
    pg_api_choice ch[4];
    memset(ch, 0, sizeof ch);
    for (int i = 0; i < 4; i++) {
        ch[i].stop_token = -1;
        ch[i].n_prompt_tokens = i < 2 ? 5 : 7;
        ch[i].n_output_tokens = 3;
        ch[i].finish = i == 1 ? PAGODA_FINISH_STOP : PAGODA_FINISH_LENGTH;
    }
    assert_int_equal(pg_api_choice_append(&ch[0], "Hi", 2), PAGODA_OK);
    assert_int_equal(pg_api_choice_append(&ch[0], " there", 6), PAGODA_OK);
    ch[0].text_offset0 = 0;
    pg_api_logprob lp = mk_lp("Hi", -0.5f, 2);
    pg_api_choice_add_logprob(&ch[0], &lp);
    lp = mk_lp(" there", -1.5f, 2);
    pg_api_choice_add_logprob(&ch[0], &lp);
    ch[1].stop_reason = strdup("\n");
    pg_api_meta m = {PG_API_COMPLETION, "cmpl-1", 123, "tiny"};
    char *js = pg_api_response_json(&m, ch, 4, 2);
    cJSON *o = cJSON_Parse(js);
    assert_non_null(o);
    assert_string_equal(cJSON_GetObjectItem(o, "object")->valuestring, "text_completion");
    assert_string_equal(cJSON_GetObjectItem(o, "model")->valuestring, "tiny");
    assert_int_equal(cJSON_GetObjectItem(o, "created")->valueint, 123);
    cJSON *choices = cJSON_GetObjectItem(o, "choices");
    assert_int_equal(cJSON_GetArraySize(choices), 4);
    cJSON *c0 = cJSON_GetArrayItem(choices, 0);
    assert_string_equal(cJSON_GetObjectItem(c0, "text")->valuestring, "Hi there");
    assert_string_equal(cJSON_GetObjectItem(c0, "finish_reason")->valuestring, "length");
    cJSON *lps = cJSON_GetObjectItem(c0, "logprobs");
    assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItem(lps, "tokens")), 2);
    assert_int_equal(cJSON_GetArrayItem(cJSON_GetObjectItem(lps, "text_offset"), 1)->valueint, 2);
    cJSON *top1 = cJSON_GetArrayItem(cJSON_GetObjectItem(lps, "top_logprobs"), 1);
    assert_true(cJSON_GetObjectItem(top1, "t1")->valuedouble == -2.0);
    cJSON *c1 = cJSON_GetArrayItem(choices, 1);
    assert_string_equal(cJSON_GetObjectItem(c1, "finish_reason")->valuestring, "stop");
    assert_string_equal(cJSON_GetObjectItem(c1, "stop_reason")->valuestring, "\n");
    assert_int_equal(cJSON_GetObjectItem(c1, "index")->valueint, 1);
    assert_true(cJSON_IsNull(cJSON_GetObjectItem(c1, "logprobs")));
    cJSON *u = cJSON_GetObjectItem(o, "usage");
    /* two prompts x n=2: each prompt's tokens once */
    assert_int_equal(cJSON_GetObjectItem(u, "prompt_tokens")->valueint, 12);
    assert_int_equal(cJSON_GetObjectItem(u, "completion_tokens")->valueint, 12);
    assert_int_equal(cJSON_GetObjectItem(u, "total_tokens")->valueint, 24);
    cJSON_Delete(o);
    free(js);
    for (int i = 0; i < 4; i++)
        pg_api_choice_free(&ch[i]);
}

static void test_response_chat(void **state) {
    (void)state;
    pg_api_choice ch;
    memset(&ch, 0, sizeof ch);
    ch.stop_token = 2;
    ch.finish = PAGODA_FINISH_STOP;
    ch.n_prompt_tokens = 4;
    ch.n_output_tokens = 2;
    pg_api_choice_append(&ch, "héllo", strlen("héllo"));
    pg_api_choice_append(&ch, "\0!", 2); /* a generated NUL: U+FFFD in the JSON */
    pg_api_logprob lp = mk_lp("h\xc3\xa9", -0.25f, 1);
    pg_api_choice_add_logprob(&ch, &lp);
    pg_api_meta m = {PG_API_CHAT, "chatcmpl-1", 5, "tiny"};
    char *js = pg_api_response_json(&m, &ch, 1, 1);
    cJSON *o = cJSON_Parse(js);
    assert_string_equal(cJSON_GetObjectItem(o, "object")->valuestring, "chat.completion");
    cJSON *c0 = cJSON_GetArrayItem(cJSON_GetObjectItem(o, "choices"), 0);
    cJSON *msg = cJSON_GetObjectItem(c0, "message");
    assert_string_equal(cJSON_GetObjectItem(msg, "role")->valuestring, "assistant");
    assert_string_equal(cJSON_GetObjectItem(msg, "content")->valuestring, "héllo\xEF\xBF\xBD!");
    assert_int_equal(cJSON_GetObjectItem(c0, "stop_reason")->valueint, 2);
    cJSON *content = cJSON_GetObjectItem(cJSON_GetObjectItem(c0, "logprobs"), "content");
    cJSON *e0 = cJSON_GetArrayItem(content, 0);
    assert_string_equal(cJSON_GetObjectItem(e0, "token")->valuestring, "h\xc3\xa9");
    assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItem(e0, "bytes")), 3);
    assert_int_equal(cJSON_GetArrayItem(cJSON_GetObjectItem(e0, "bytes"), 1)->valueint, 0xc3);
    assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItem(e0, "top_logprobs")), 1);
    cJSON_Delete(o);
    free(js);
    pg_api_choice_free(&ch);
}

/* "data: " + JSON + "\n\n", the JSON parsed. */
static cJSON *sse_json(char *ev) {
    assert_non_null(ev);
    size_t n = strlen(ev);
    assert_true(n > 8);
    assert_memory_equal(ev, "data: ", 6);
    assert_memory_equal(ev + n - 2, "\n\n", 2);
    assert_null(memchr(ev, '\n', n - 2)); /* one line: JSON escapes newlines */
    cJSON *o = cJSON_ParseWithLength(ev + 6, n - 8);
    assert_non_null(o);
    free(ev);
    return o;
}

static void test_sse_chunks(void **state) {
    (void)state;
    pg_api_meta m = {PG_API_CHAT, "chatcmpl-9", 7, "tiny"};
    cJSON *o = sse_json(pg_api_chunk_sse(&m, 0, true, "", 0, NULL, 0, 0, PAGODA_FINISH_NONE, NULL));
    assert_string_equal(cJSON_GetObjectItem(o, "object")->valuestring, "chat.completion.chunk");
    cJSON *c = cJSON_GetArrayItem(cJSON_GetObjectItem(o, "choices"), 0);
    cJSON *d = cJSON_GetObjectItem(c, "delta");
    assert_string_equal(cJSON_GetObjectItem(d, "role")->valuestring, "assistant");
    assert_true(cJSON_IsNull(cJSON_GetObjectItem(c, "finish_reason")));
    cJSON_Delete(o);
    o = sse_json(pg_api_chunk_sse(&m, 2, false, "a\nb\"", 4, NULL, 0, 0, PAGODA_FINISH_STOP, "x"));
    c = cJSON_GetArrayItem(cJSON_GetObjectItem(o, "choices"), 0);
    d = cJSON_GetObjectItem(c, "delta");
    assert_null(cJSON_GetObjectItem(d, "role"));
    assert_string_equal(cJSON_GetObjectItem(d, "content")->valuestring, "a\nb\"");
    assert_int_equal(cJSON_GetObjectItem(c, "index")->valueint, 2);
    assert_string_equal(cJSON_GetObjectItem(c, "finish_reason")->valuestring, "stop");
    assert_string_equal(cJSON_GetObjectItem(c, "stop_reason")->valuestring, "x");
    cJSON_Delete(o);
    /* a generated NUL byte is U+FFFD, not the end of the content */
    o = sse_json(pg_api_chunk_sse(&m, 0, false, "a\0b", 3, NULL, 0, 0, PAGODA_FINISH_NONE, NULL));
    c = cJSON_GetArrayItem(cJSON_GetObjectItem(o, "choices"), 0);
    assert_string_equal(cJSON_GetObjectItem(cJSON_GetObjectItem(c, "delta"), "content")->valuestring,
                        "a\xEF\xBF\xBD" "b");
    cJSON_Delete(o);
    /* a finish-only chat chunk has an empty delta */
    o = sse_json(pg_api_chunk_sse(&m, 0, false, "", 0, NULL, 0, 0, PAGODA_FINISH_LENGTH, NULL));
    c = cJSON_GetArrayItem(cJSON_GetObjectItem(o, "choices"), 0);
    assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItem(c, "delta")), 0);
    cJSON_Delete(o);
    /* completions chunk with logprobs at an offset */
    pg_api_meta mc = {PG_API_COMPLETION, "cmpl-9", 7, "tiny"};
    pg_api_logprob lp = mk_lp("cd", -0.5f, 0);
    o = sse_json(pg_api_chunk_sse(&mc, 0, false, "cd", 2, &lp, 1, 10, PAGODA_FINISH_NONE, NULL));
    c = cJSON_GetArrayItem(cJSON_GetObjectItem(o, "choices"), 0);
    assert_string_equal(cJSON_GetObjectItem(c, "text")->valuestring, "cd");
    cJSON *lps = cJSON_GetObjectItem(c, "logprobs");
    assert_int_equal(cJSON_GetArrayItem(cJSON_GetObjectItem(lps, "text_offset"), 0)->valueint, 10);
    cJSON_Delete(o);
    pg_api_logprob_free(&lp);
    pg_api_usage u = {3, 4, 0};
    o = sse_json(pg_api_usage_sse(&mc, &u));
    assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItem(o, "choices")), 0);
    assert_int_equal(cJSON_GetObjectItem(cJSON_GetObjectItem(o, "usage"), "total_tokens")->valueint,
                     7);
    cJSON_Delete(o);
    assert_string_equal(PG_API_SSE_DONE, "data: [DONE]\n\n");
}

static void test_utf8_dup(void **state) {
    (void)state;
    char *s = pg_api_utf8_dup("ok\xc3\xa9", 4);
    assert_string_equal(s, "ok\xc3\xa9");
    free(s);
    s = pg_api_utf8_dup("a\xe2\x82", 3); /* a cut 3-byte sequence */
    assert_string_equal(s, "a\xef\xbf\xbd\xef\xbf\xbd");
    free(s);
    s = pg_api_utf8_dup("\xc0\xaf\xed\xa0\x80", 5); /* overlong, surrogate */
    assert_null(strstr(s, "\xc0"));
    assert_null(strstr(s, "\xed"));
    free(s);
    s = pg_api_utf8_dup("a\0b", 3);
    assert_string_equal(s, "a\xef\xbf\xbd"
                           "b");
    free(s);
}

/* Every line of want[] appears in the metrics text t. */
static void assert_metrics_have(const char *t, const char *const *want, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (!strstr(t, want[i])) fail_msg("metrics text lacks: %s\n%s", want[i], t);
}

static void test_metrics_text(void **state) {
    (void)state;
    pg_metrics m;
    pg_metrics_init(&m);
    pg_metrics_finished(&m, PAGODA_FINISH_STOP, 0.4, 0.01, 0.003);
    pg_metrics_finished(&m, PAGODA_FINISH_LENGTH, 2.0, -1, 0.03);
    pg_metrics_finished(&m, PAGODA_FINISH_LENGTH, 900.0, 0.02, -1);
    pg_metrics_itl(&m, 0.02, 3);
    pagoda_stats st;
    memset(&st, 0, sizeof st);
    st.num_requests_running = 3;
    st.num_requests_waiting = 2;
    st.kv_cache_usage = 0.25;
    st.num_preemptions = 4;
    st.prompt_tokens = 100;
    st.generation_tokens = 50;
    st.prefix_cache_queries = 64;
    st.prefix_cache_hits = 32;
    char *t = pg_metrics_render(&m, "my\"model", &st);
    assert_non_null(t);
    const char *want[] = {
        "# TYPE vllm:time_to_first_token_seconds histogram\n",
        "vllm:time_to_first_token_seconds_bucket{le=\"0.001\",model_name=\"my\\\"model\"} 0\n",
        "vllm:time_to_first_token_seconds_bucket{le=\"0.005\",model_name=\"my\\\"model\"} 1\n",
        "vllm:time_to_first_token_seconds_bucket{le=\"0.04\",model_name=\"my\\\"model\"} 2\n",
        "vllm:time_to_first_token_seconds_bucket{le=\"+Inf\",model_name=\"my\\\"model\"} 2\n",
        "vllm:time_to_first_token_seconds_count{model_name=\"my\\\"model\"} 2\n",
        "vllm:e2e_request_latency_seconds_bucket{le=\"0.5\",model_name=\"my\\\"model\"} 1\n",
        "vllm:e2e_request_latency_seconds_bucket{le=\"7680\",model_name=\"my\\\"model\"} 3\n",
        "vllm:e2e_request_latency_seconds_sum{model_name=\"my\\\"model\"} 902.4\n",
        "vllm:request_queue_time_seconds_count{model_name=\"my\\\"model\"} 2\n",
        "vllm:inter_token_latency_seconds_count{model_name=\"my\\\"model\"} 3\n",
        "vllm:inter_token_latency_seconds_bucket{le=\"0.01\",model_name=\"my\\\"model\"} 0\n",
        "vllm:inter_token_latency_seconds_bucket{le=\"0.025\",model_name=\"my\\\"model\"} 3\n",
        "vllm:num_requests_running{model_name=\"my\\\"model\"} 3\n",
        "vllm:num_requests_waiting{model_name=\"my\\\"model\"} 2\n",
        "vllm:kv_cache_usage_perc{model_name=\"my\\\"model\"} 0.25\n",
        "vllm:num_preemptions_total{model_name=\"my\\\"model\"} 4\n",
        "vllm:prompt_tokens_total{model_name=\"my\\\"model\"} 100\n",
        "vllm:generation_tokens_total{model_name=\"my\\\"model\"} 50\n",
        "vllm:prefix_cache_queries_total{model_name=\"my\\\"model\"} 64\n",
        "vllm:prefix_cache_hits_total{model_name=\"my\\\"model\"} 32\n",
        "vllm:request_success_total{finished_reason=\"stop\",model_name=\"my\\\"model\"} 1\n",
        "vllm:request_success_total{finished_reason=\"length\",model_name=\"my\\\"model\"} 2\n",
    };
    assert_metrics_have(t, want, sizeof want / sizeof want[0]);
    /* every non-comment line is "name{labels} value" */
    for (char *line = strtok(t, "\n"); line; line = strtok(NULL, "\n")) {
        if (line[0] == '#') continue;
        assert_true(!strncmp(line, "vllm:", 5));
        assert_non_null(strstr(line, "} "));
    }
    free(t);
    pg_metrics_destroy(&m);
}

/* Speculative decoding's metrics: vLLM's counters in /metrics only when the
 * model speculates, and the SpecDecoding log line of an interval. */
static void test_spec_decode_metrics(void **state) {
    (void)state;
    pg_metrics m;
    pg_metrics_init(&m);
    pagoda_stats st;
    memset(&st, 0, sizeof st);
    char *t = pg_metrics_render(&m, "m", &st);
    assert_non_null(t);
    assert_null(strstr(t, "spec_decode")); /* off: not exported */
    free(t);
    char line[512];
    assert_false(pg_metrics_spec_line(NULL, &st, 1.0, line, sizeof line));
    pagoda_stats prev = st;
    prev.spec_num_positions = 3;
    prev.spec_num_drafts = 10;
    prev.spec_num_draft_tokens = 30;
    prev.spec_num_accepted_tokens = 12;
    prev.spec_accepted_per_pos[0] = 6;
    prev.spec_accepted_per_pos[1] = 4;
    prev.spec_accepted_per_pos[2] = 2;
    st = prev;
    st.spec_num_drafts += 4;
    st.spec_num_draft_tokens += 12;
    st.spec_num_accepted_tokens += 6;
    st.spec_accepted_per_pos[0] += 3;
    st.spec_accepted_per_pos[1] += 2;
    st.spec_accepted_per_pos[2] += 1;
    t = pg_metrics_render(&m, "m", &st);
    const char *want[] = {
        "# TYPE vllm:spec_decode_num_drafts counter\n",
        "vllm:spec_decode_num_drafts_total{model_name=\"m\"} 14\n",
        "vllm:spec_decode_num_draft_tokens_total{model_name=\"m\"} 42\n",
        "vllm:spec_decode_num_accepted_tokens_total{model_name=\"m\"} 18\n",
        "vllm:spec_decode_num_accepted_tokens_per_pos_total{model_name=\"m\",position=\"0\"} 9\n",
        "vllm:spec_decode_num_accepted_tokens_per_pos_total{model_name=\"m\",position=\"2\"} 3\n",
    };
    assert_metrics_have(t, want, sizeof want / sizeof want[0]);
    free(t);
    /* the interval: 4 drafts, 12 draft tokens, 6 accepted in 2 s */
    assert_true(pg_metrics_spec_line(&prev, &st, 2.0, line, sizeof line));
    assert_string_equal(line, "SpecDecoding metrics: Mean acceptance length: 2.50, Accepted "
                              "throughput: 3.00 tokens/s, Drafted throughput: 6.00 tokens/s, "
                              "Accepted: 6 tokens, Drafted: 12 tokens, Per-position acceptance "
                              "rate: 0.750, 0.500, 0.250, Avg Draft acceptance rate: 50.0%");
    assert_false(pg_metrics_spec_line(&st, &st, 2.0, line, sizeof line)); /* nothing new */
    pg_metrics_destroy(&m);
}

/* pagoda_apply_chat_template with a template override and no engine. */
static void test_apply_chat_template(void **state) {
    (void)state;
    const char *tmpl = "{% for m in messages %}{{ m.role }}={{ m.content }};{% endfor %}"
                       "{% if add_generation_prompt %}A:{% endif %}{{ flavor | default('') }}";
    const char *msgs = "[{\"role\": \"user\", \"content\": \"hi\"}]";
    char *out = NULL;
    assert_int_equal(pagoda_apply_chat_template(NULL, msgs, NULL, NULL, true, tmpl, &out),
                     PAGODA_OK);
    assert_string_equal(out, "user=hi;A:");
    free(out);
    assert_int_equal(
        pagoda_apply_chat_template(NULL, msgs, "[]", "{\"flavor\": \"x\"}", false, tmpl, &out),
        PAGODA_OK);
    assert_string_equal(out, "user=hi;x");
    free(out);
    assert_int_equal(pagoda_apply_chat_template(NULL, "{}", NULL, NULL, true, tmpl, &out),
                     PAGODA_ERR_INVALID_ARG);
    assert_null(out);
    assert_int_equal(pagoda_apply_chat_template(NULL, msgs, NULL, "[1]", true, tmpl, &out),
                     PAGODA_ERR_INVALID_ARG);
    assert_int_equal(pagoda_apply_chat_template(NULL, msgs, NULL, NULL, true, "{% if %}", &out),
                     PAGODA_ERR_FORMAT);
    /* no engine, no override: no template to find */
    assert_int_not_equal(pagoda_apply_chat_template(NULL, msgs, NULL, NULL, true, NULL, &out),
                         PAGODA_OK);
    assert_null(out);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_completion_fields),
        cmocka_unit_test(test_completion_defaults),
        cmocka_unit_test(test_prompt_forms),
        cmocka_unit_test(test_default_stop_ids),
        cmocka_unit_test(test_bad_json_and_types),
        cmocka_unit_test(test_cache_salt),
        cmocka_unit_test(test_prompt_lists_not_mixed),
        cmocka_unit_test(test_strict_json),
        cmocka_unit_test(test_seed_int64),
        cmocka_unit_test(test_continue_final_message),
        cmocka_unit_test(test_capacity_and_model),
        cmocka_unit_test(test_tokenize_bodies),
        cmocka_unit_test(test_ranges),
        cmocka_unit_test(test_chat_parse),
        cmocka_unit_test(test_known_fields),
        cmocka_unit_test(test_check_length),
        cmocka_unit_test(test_error_json),
        cmocka_unit_test(test_response_completion),
        cmocka_unit_test(test_response_chat),
        cmocka_unit_test(test_sse_chunks),
        cmocka_unit_test(test_utf8_dup),
        cmocka_unit_test(test_metrics_text),
        cmocka_unit_test(test_spec_decode_metrics),
        cmocka_unit_test(test_apply_chat_template),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
