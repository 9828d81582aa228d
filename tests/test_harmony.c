/* The harmony format (src/tokenizer/harmony.c): renderings byte-identical to
 * openai/harmony's test vectors (tests/data/harmony/, see its README) and to
 * the gpt-oss Hugging Face template's Python jinja2 renderings; the output
 * parser on every channel, split at every byte, and on random garbage. */
#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"
#include "tokenizer/harmony.h"

/* ---- rendering ---------------------------------------------------------- */

static char *fixture(const char *name) {
    const char *src = getenv("PAGODA_SOURCE_DIR");
    char path[1024];
    snprintf(path, sizeof path, "%s/tests/data/harmony/%s", src ? src : ".", name);
    size_t len;
    char *s = pg_test_read_file(path, &len);
    while (len > 0 && (s[len - 1] == '\n' || s[len - 1] == ' ' || s[len - 1] == '\r'))
        s[--len] = 0;
    return s;
}

static void check_render(const char *fixture_name, const char *messages_json,
                         const char *tools_json, pg_harmony_render_opts o) {
    cJSON *m = cJSON_Parse(messages_json);
    assert_non_null(m);
    cJSON *t = tools_json ? cJSON_Parse(tools_json) : NULL;
    if (tools_json) assert_non_null(t);
    char *out = NULL;
    pagoda_status st = pg_harmony_render(m, t, &o, &out);
    if (st) fail_msg("%s: %s", fixture_name, pg_last_error());
    char *want = fixture(fixture_name);
    if (strcmp(out, want) != 0) fail_msg("%s:\n--- got\n%s\n--- want\n%s", fixture_name, out, want);
    free(want);
    free(out);
    cJSON_Delete(m);
    cJSON_Delete(t);
}

#define Q_CAPITAL                                                                                  \
    "[%s{\"role\":\"user\",\"content\":\"What is the capital of the largest country in the "       \
    "world?\"}]"
#define ROBOT "{\"role\":\"system\",\"content\":\"Answer the user's questions like a robot.\"},"

static void test_render_reference_simple(void **state) {
    (void)state;
    pg_harmony_render_opts o = {.date = "", .add_generation_prompt = true};
    check_render("test_simple_convo.txt", "[{\"role\":\"user\",\"content\":\"What is 2 + 2?\"}]",
                 NULL, o);
    static const char *const effort[] = {"low", "medium", "high"};
    for (int e = 0; e < 3; e++) {
        char name[128], msgs[512];
        o.reasoning_effort = effort[e];
        snprintf(name, sizeof name, "test_simple_convo_%s_effort.txt", effort[e]);
        snprintf(msgs, sizeof msgs, Q_CAPITAL, ROBOT);
        check_render(name, msgs, NULL, o);
        snprintf(name, sizeof name, "test_simple_convo_%s_effort_no_instruction.txt", effort[e]);
        snprintf(msgs, sizeof msgs, Q_CAPITAL, "");
        check_render(name, msgs, NULL, o);
    }
    /* the developer role is the same as system */
    o.reasoning_effort = "low";
    check_render("test_simple_convo_low_effort.txt",
                 "[{\"role\":\"developer\",\"content\":[{\"type\":\"text\",\"text\":\"Answer the "
                 "user's questions like a robot.\"}]},"
                 "{\"role\":\"user\",\"content\":\"What is the capital of the largest country in "
                 "the world?\"}]",
                 NULL, o);
    pg_harmony_render_opts nt = {.date = "2025-06-28", .add_generation_prompt = true};
    check_render("test_no_tools.txt", "[]", NULL, nt);
}

static const char *kitchen_tools =
    "[{\"type\":\"function\",\"function\":{\"name\":\"get_location\",\"description\":\"Gets the "
    "location of the user.\"}},"
    "{\"type\":\"function\",\"function\":{\"name\":\"get_current_weather\","
    "\"description\":\"Gets the current weather in the provided location.\","
    "\"parameters\":{\"type\":\"object\",\"properties\":{\"location\":{\"type\":\"string\","
    "\"description\":\"The city and state, e.g. San Francisco, CA\"},"
    "\"format\":{\"type\":\"string\",\"enum\":[\"celsius\",\"fahrenheit\"],\"default\":\"celsius\"}"
    "},"
    "\"required\":[\"location\"]}}},"
    "{\"type\":\"function\",\"function\":{\"name\":\"get_multiple_weathers\","
    "\"description\":\"Gets the current weather in the provided list of locations.\","
    "\"parameters\":{\"type\":\"object\",\"properties\":{\"locations\":{\"type\":\"array\","
    "\"items\":{\"type\":\"string\"},"
    "\"description\":\"List of city and state, e.g. [\\\"San Francisco, CA\\\", \\\"New York, "
    "NY\\\"]\"},"
    "\"format\":{\"type\":\"string\",\"enum\":[\"celsius\",\"fahrenheit\"],\"default\":\"celsius\"}"
    "},"
    "\"required\":[\"locations\"]}}},"
    "{\"type\":\"function\",\"function\":{\"name\":\"kitchensink\",\"description\":\"A function "
    "with various complex schemas.\","
    "\"parameters\":{\"description\":\"params object\",\"type\":\"object\",\"properties\":{"
    "\"string\":{\"type\":\"string\",\"title\":\"STRING\",\"description\":\"A "
    "string\",\"examples\":[\"hello\",\"world\"]},"
    "\"string_nullable\":{\"type\":\"string\",\"nullable\":true,\"description\":\"A nullable "
    "string\",\"default\":\"the default\"},"
    "\"string_enum\":{\"type\":\"string\",\"enum\":[\"a\",\"b\",\"c\"]},"
    "\"oneof_string_or_number\":{\"oneOf\":[{\"type\":\"string\",\"default\":\"default_string_in_"
    "oneof\"},"
    "{\"type\":\"number\",\"description\":\"numbers can happen too\"}],\"description\":\"a "
    "oneof\",\"default\":20}}}}}]";

static void test_render_reference_tools(void **state) {
    (void)state;
    pg_harmony_render_opts o = {
        .date = "2025-06-28", .reasoning_effort = "high", .add_generation_prompt = true};
    check_render("test_render_functions_with_parameters.txt",
                 "[{\"role\":\"system\",\"content\":\"Always respond in riddles\"},"
                 "{\"role\":\"user\",\"content\":\"What is the weather like in SF?\"}]",
                 kitchen_tools, o);
}

static void test_render_reference_history(void **state) {
    (void)state;
    const char *cot = "[{\"role\":\"user\",\"content\":\"What is 2 + 2?\"},"
                      "{\"role\":\"assistant\",\"reasoning_content\":\"User asks a simple "
                      "question: \\\"What is 2 + 2?\\\" The answer: 4.\","
                      "\"content\":\"2 + 2 equals 4.\"},"
                      "{\"role\":\"user\",\"content\":\"What about 9 / 2?\"}]";
    pg_harmony_render_opts o = {.no_system_message = true, .add_generation_prompt = true};
    check_render("test_dropping_cot_by_default.txt", cot, NULL, o);
    o.keep_analysis = true;
    check_render("test_preserve_cot.txt", cot, NULL, o);
    pg_harmony_render_opts k = {.no_system_message = true};
    check_render("test_keep_analysis_between_finals.txt",
                 "[{\"role\":\"user\",\"content\":\"What is 2 + 2?\"},"
                 "{\"role\":\"assistant\",\"thinking\":\"thinking 2+2\",\"content\":\"4\"},"
                 "{\"role\":\"user\",\"content\":\"What is 3 + 5?\"},"
                 "{\"role\":\"assistant\",\"reasoning\":\"thinking 3+5\",\"content\":\"8\"}]",
                 NULL, k);
    const char *call = "[{\"role\":\"user\",\"content\":\"What is the weather in SF?\"},"
                       "{\"role\":\"assistant\",\"content\":null,"
                       "\"reasoning_content\":\"User asks: \xe2\x80\x9cWhat is the weather in "
                       "SF?\xe2\x80\x9d We need to use lookup_weather tool.\","
                       "\"tool_calls\":[{\"id\":\"call_1\",\"type\":\"function\",\"function\":{"
                       "\"name\":\"lookup_weather\","
                       "\"arguments\":\"{\\\"location\\\": \\\"San Francisco\\\"}\"}}]},"
                       "{\"role\":\"tool\",\"tool_call_id\":\"call_1\",\"content\":\"{"
                       "\\\"temperature\\\": 20, \\\"description\\\": \\\"sunny\\\"}\"}]";
    pg_harmony_render_opts c = {.no_system_message = true, .add_generation_prompt = true};
    check_render("tool_call_ongoing_analysis.txt", call, NULL, c);
}

/* A conversation with tools, a preamble, two calls, results and a final
 * answer: the format documented in docs/format.md, checked literally. */
static void test_render_multi_turn_tools(void **state) {
    (void)state;
    cJSON *m = cJSON_Parse("[{\"role\":\"user\",\"content\":\"Weather in Paris and Rome?\"},"
                           "{\"role\":\"assistant\",\"content\":\"Checking "
                           "both.\",\"reasoning_content\":\"two calls\",\"tool_calls\":["
                           "{\"id\":\"a\",\"type\":\"function\",\"function\":{\"name\":\"get_"
                           "weather\",\"arguments\":\"{\\\"city\\\":\\\"Paris\\\"}\"}},"
                           "{\"id\":\"b\",\"type\":\"function\",\"function\":{\"name\":\"get_"
                           "time\",\"arguments\":{\"city\":\"Rome\"}}}]},"
                           "{\"role\":\"tool\",\"tool_call_id\":\"a\",\"content\":\"21C\"},"
                           "{\"role\":\"tool\",\"tool_call_id\":\"b\",\"content\":\"noon\"},"
                           "{\"role\":\"assistant\",\"content\":\"Paris 21C, Rome noon.\"},"
                           "{\"role\":\"user\",\"content\":\"Thanks\"}]");
    cJSON *t = cJSON_Parse(
        "[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"description\":\"Weather."
        "\\nLine two\","
        "\"parameters\":{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\"},"
        "\"days\":{\"type\":\"integer\",\"default\":1},\"opts\":{\"type\":\"object\","
        "\"properties\":"
        "{\"unit\":{\"type\":[\"string\",\"null\"]}},\"required\":[\"unit\"]},"
        "\"tags\":{\"type\":\"array\",\"items\":{\"type\":\"number\"}},\"any\":{}},\"required\":["
        "\"city\"]}}},"
        "{\"type\":\"function\",\"function\":{\"name\":\"get_time\",\"parameters\":null}}]");
    pg_harmony_render_opts o = {.date = "2025-01-02", .add_generation_prompt = true};
    char *out = NULL;
    assert_int_equal(pg_harmony_render(m, t, &o, &out), PAGODA_OK);
    const char *want =
        "<|start|>system<|message|>You are ChatGPT, a large language model trained by OpenAI.\n"
        "Knowledge cutoff: 2024-06\nCurrent date: 2025-01-02\n\nReasoning: medium\n\n"
        "# Valid channels: analysis, commentary, final. Channel must be included for every "
        "message.\n"
        "Calls to these tools must go to the commentary channel: 'functions'.<|end|>"
        "<|start|>developer<|message|># Tools\n\n## functions\n\nnamespace functions {\n\n"
        "// Weather.\n// Line two\ntype get_weather = (_: {\ncity: string,\ndays?: number, // "
        "default: 1\n"
        "opts?: {\n    unit: string | null,\n    },\ntags?: number[],\nany?: any,\n}) => any;\n\n"
        "type get_time = () => any;\n\n} // namespace functions<|end|>"
        "<|start|>user<|message|>Weather in Paris and Rome?<|end|>"
        "<|start|>assistant<|channel|>commentary<|message|>Checking both.<|end|>"
        "<|start|>assistant to=functions.get_weather<|channel|>commentary "
        "<|constrain|>json<|message|>{\"city\":\"Paris\"}<|call|>"
        "<|start|>assistant to=functions.get_time<|channel|>commentary "
        "<|constrain|>json<|message|>{\"city\":\"Rome\"}<|call|>"
        "<|start|>functions.get_weather to=assistant<|channel|>commentary<|message|>21C<|end|>"
        "<|start|>functions.get_time to=assistant<|channel|>commentary<|message|>noon<|end|>"
        "<|start|>assistant<|channel|>final<|message|>Paris 21C, Rome noon.<|end|>"
        "<|start|>user<|message|>Thanks<|end|><|start|>assistant";
    if (strcmp(out, want) != 0) fail_msg("got\n%s\nwant\n%s", out, want);
    free(out);
    cJSON_Delete(m);
    cJSON_Delete(t);
}

/* The gpt-oss chat template's jinja2 renderings (shared assets). */
static void test_render_hf_template(void **state) {
    (void)state;
    size_t len;
    char *text = pg_test_read_file(
        pg_test_asset("chat-templates/expected/chat_template_renderings.json"), &len);
    cJSON *d = cJSON_ParseWithLength(text, len);
    free(text);
    assert_non_null(d);
    const cJSON *cases = cJSON_GetObjectItem(d, "cases"),
                *results = cJSON_GetObjectItem(d, "results");
    int checked = 0;
    const cJSON *r;
    cJSON_ArrayForEach(r, results) {
        if (strcmp(cJSON_GetObjectItem(r, "template")->valuestring, "openai-gpt-oss-120b.jinja") !=
            0)
            continue;
        const char *name = cJSON_GetObjectItem(r, "case")->valuestring;
        const cJSON *c, *found = NULL;
        cJSON_ArrayForEach(
            c, cases) if (strcmp(cJSON_GetObjectItem(c, "name")->valuestring, name) == 0) found = c;
        assert_non_null(found);
        pg_harmony_render_opts o = {.date = "2025-06-15",
                                    .hf_template = true,
                                    .add_generation_prompt = cJSON_IsTrue(
                                        cJSON_GetObjectItem(found, "add_generation_prompt"))};
        char *out = NULL;
        pagoda_status st = pg_harmony_render(cJSON_GetObjectItem(found, "messages"),
                                             cJSON_GetObjectItem(found, "tools"), &o, &out);
        if (st) fail_msg("%s: %s", name, pg_last_error());
        const char *want = cJSON_GetObjectItem(r, "output")->valuestring;
        if (strcmp(out, want) != 0) fail_msg("%s:\n--- got\n%s\n--- want\n%s", name, out, want);
        free(out);
        checked++;
    }
    assert_int_equal(checked, 7);
    cJSON_Delete(d);
}

static void expect_render_error(const char *messages, const char *tools, const char *effort,
                                const char *date, pagoda_status want, const char *needle) {
    cJSON *m = cJSON_Parse(messages);
    cJSON *t = tools ? cJSON_Parse(tools) : NULL;
    pg_harmony_render_opts o = {
        .reasoning_effort = effort, .date = date, .add_generation_prompt = true};
    char *out = (char *)1;
    assert_int_equal(pg_harmony_render(m, t, &o, &out), want);
    assert_null(out);
    if (!strstr(pg_last_error(), needle)) fail_msg("'%s' lacks '%s'", pg_last_error(), needle);
    cJSON_Delete(m);
    cJSON_Delete(t);
}

static void test_render_errors(void **state) {
    (void)state;
    expect_render_error("{}", NULL, NULL, NULL, PAGODA_ERR_INVALID_ARG,
                        "messages must be an array");
    expect_render_error("[{\"role\":\"wizard\",\"content\":\"x\"}]", NULL, NULL, NULL,
                        PAGODA_ERR_INVALID_ARG, "unknown role 'wizard'");
    expect_render_error("[{\"content\":\"x\"}]", NULL, NULL, NULL, PAGODA_ERR_INVALID_ARG,
                        "has no role");
    expect_render_error("[{\"role\":\"tool\",\"content\":\"x\"}]", NULL, NULL, NULL,
                        PAGODA_ERR_INVALID_ARG, "without a previous tool call");
    expect_render_error(
        "[{\"role\":\"user\",\"content\":[{\"type\":\"image_url\",\"image_url\":{}}]}]", NULL, NULL,
        NULL, PAGODA_ERR_UNSUPPORTED, "image_url");
    expect_render_error("[{\"role\":\"user\",\"content\":5}]", NULL, NULL, NULL,
                        PAGODA_ERR_INVALID_ARG, "content must be");
    expect_render_error("[]", NULL, "max", NULL, PAGODA_ERR_INVALID_ARG, "reasoning effort 'max'");
    expect_render_error("[]", NULL, NULL, "2025/01/01", PAGODA_ERR_INVALID_ARG, "not YYYY-MM-DD");
    expect_render_error("[]", "[{\"type\":\"function\",\"function\":{}}]", NULL, NULL,
                        PAGODA_ERR_INVALID_ARG, "no function name");
    expect_render_error("[]", "{}", NULL, NULL, PAGODA_ERR_INVALID_ARG, "tools must be an array");
    expect_render_error("[{\"role\":\"assistant\",\"tool_calls\":[{\"function\":{}}]}]", NULL, NULL,
                        NULL, PAGODA_ERR_INVALID_ARG, "no function name");
    /* today's date when none is given */
    cJSON *m = cJSON_Parse("[]");
    char *out = NULL;
    assert_int_equal(pg_harmony_render(m, NULL, NULL, &out), PAGODA_OK);
    assert_non_null(strstr(out, "Current date: 20"));
    free(out);
    cJSON_Delete(m);
}

/* ---- parsing ------------------------------------------------------------ */

/* Events recorded as one line each; consecutive text deltas of the same
 * kind are merged so that any split of the input compares equal. */
typedef struct rec {
    char *s;
    size_t len, cap;
    int last_kind;
} rec;

static void rec_add(rec *r, const char *s, size_t n) {
    if (r->len + n + 1 > r->cap) {
        r->cap = (r->len + n + 1) * 2;
        r->s = realloc(r->s, r->cap);
        assert_non_null(r->s);
    }
    memcpy(r->s + r->len, s, n);
    r->len += n;
    r->s[r->len] = 0;
}

static void on_event(void *user, const pg_harmony_event *ev) {
    rec *r = user;
    static const char *const kinds[] = {"R", "C", "TB", "TA", "TE", "END", "ISSUE"};
    static const char *const ends[] = {"none", "end", "return", "call"};
    char head[256];
    bool delta = ev->kind == PG_HARMONY_REASONING || ev->kind == PG_HARMONY_CONTENT ||
                 ev->kind == PG_HARMONY_TOOL_ARGS;
    assert_true(ev->len == 0 || ev->text);
    if (delta && r->last_kind == (int)ev->kind && r->len > 0) {
        r->len--; /* drop the newline and continue the line */
        rec_add(r, ev->text, ev->len);
        rec_add(r, "\n", 1);
        return;
    }
    switch (ev->kind) {
    case PG_HARMONY_TOOL_CALL_BEGIN:
    case PG_HARMONY_TOOL_CALL_END:
        snprintf(head, sizeof head, "%s[%s #%d %s ch=%s]:", kinds[ev->kind], ev->name, ev->index,
                 ends[ev->end], ev->channel);
        break;
    case PG_HARMONY_MESSAGE_END:
        snprintf(head, sizeof head, "END[%s]:", ends[ev->end]);
        break;
    default:
        snprintf(head, sizeof head, "%s[%s]:", kinds[ev->kind], ev->channel);
    }
    rec_add(r, head, strlen(head));
    rec_add(r, ev->text, ev->len);
    rec_add(r, "\n", 1);
    r->last_kind = delta ? (int)ev->kind : -1;
}

/* Parse `text` fed in pieces cut at the given positions; returns the log. */
static char *parse_split(const char *text, size_t len, const size_t *cuts, int ncuts) {
    rec r = {.last_kind = -1};
    rec_add(&r, "", 0);
    pg_harmony_parser *p;
    assert_int_equal(pg_harmony_parser_create(on_event, &r, &p), PAGODA_OK);
    size_t at = 0;
    for (int i = 0; i <= ncuts; i++) {
        size_t end = i < ncuts ? cuts[i] : len;
        assert_int_equal(pg_harmony_parser_feed(p, text + at, end - at), PAGODA_OK);
        at = end;
    }
    assert_int_equal(pg_harmony_parser_finish(p), PAGODA_OK);
    pg_harmony_parser_free(p);
    return r.s;
}

static char *parse_all(const char *text) {
    return parse_split(text, strlen(text), NULL, 0);
}

/* One-shot == split at every byte (one cut, then every byte alone). */
static void check_splits(const char *text) {
    size_t len = strlen(text);
    char *whole = parse_all(text);
    for (size_t c = 0; c <= len; c++) {
        char *s = parse_split(text, len, &c, 1);
        if (strcmp(s, whole) != 0) fail_msg("cut at %zu of '%s':\n%s\nvs\n%s", c, text, s, whole);
        free(s);
    }
    size_t *cuts = malloc((len + 1) * sizeof *cuts);
    for (size_t i = 0; i < len; i++)
        cuts[i] = i;
    char *bytes = parse_split(text, len, cuts, (int)len);
    if (strcmp(bytes, whole) != 0) fail_msg("byte by byte:\n%s\nvs\n%s", bytes, whole);
    free(bytes);
    free(cuts);
    free(whole);
}

static void expect_parse(const char *text, const char *want) {
    char *got = parse_all(text);
    if (strcmp(got, want) != 0) fail_msg("input '%s':\n--- got\n%s--- want\n%s", text, got, want);
    free(got);
    check_splits(text);
}

static void test_parse_channels(void **state) {
    (void)state;
    expect_parse("<|channel|>analysis<|message|>Think.<|end|><|start|>assistant<|channel|>final<|"
                 "message|>Hi!<|return|>",
                 "R[analysis]:Think.\nEND[end]:\nC[final]:Hi!\nEND[return]:\n");
    /* a preamble in commentary is content */
    expect_parse("<|channel|>commentary<|message|>Let me look.<|end|>",
                 "C[commentary]:Let me look.\nEND[end]:\n");
    /* text with '<' and '|' that is not a special token */
    expect_parse("<|channel|>final<|message|>a <b> <| x |> <|endoftext|> "
                 "\xc3\xa9\xe4\xb8\x96\xf0\x9f\x99\x82<|return|>",
                 "C[final]:a <b> <| x |> <|endoftext|> "
                 "\xc3\xa9\xe4\xb8\x96\xf0\x9f\x99\x82\nEND[return]:\n");
    /* truncated output: the message ends with no token */
    expect_parse("<|channel|>final<|message|>partial", "C[final]:partial\nEND[none]:\n");
    expect_parse("", "");
}

static void test_parse_tool_calls(void **state) {
    (void)state;
    /* the model's form: recipient after the channel, <|constrain|> adjacent */
    expect_parse("<|channel|>analysis<|message|>Need "
                 "weather.<|end|><|start|>assistant<|channel|>commentary to=functions.get_weather"
                 "<|constrain|>json<|message|>{\"latitude\":48.8566,\"longitude\":2.3522}<|call|>",
                 "R[analysis]:Need weather.\nEND[end]:\nTB[get_weather #0 none ch=commentary]:\n"
                 "TA[commentary]:{\"latitude\":48.8566,\"longitude\":2.3522}\n"
                 "TE[get_weather #0 call "
                 "ch=commentary]:{\"latitude\":48.8566,\"longitude\":2.3522}\nEND[call]:\n");
    /* the renderer's form: recipient before the channel, " <|constrain|>json" */
    expect_parse(
        " to=functions.get_weather<|channel|>commentary <|constrain|>json<|message|>{\"location\": "
        "\"Tokyo\"}<|call|>",
        "TB[get_weather #0 none ch=commentary]:\nTA[commentary]:{\"location\": \"Tokyo\"}\n"
        "TE[get_weather #0 call ch=commentary]:{\"location\": \"Tokyo\"}\nEND[call]:\n");
    /* two calls; plain "json" content type; second call truncated */
    expect_parse("<|channel|>commentary to=functions.a "
                 "json<|message|>{}<|call|><|start|>assistant<|channel|>commentary "
                 "to=functions.b<|message|>{\"x\":",
                 "TB[a #0 none ch=commentary]:\nTA[commentary]:{}\nTE[a #0 call "
                 "ch=commentary]:{}\nEND[call]:\n"
                 "TB[b #1 none ch=commentary]:\nTA[commentary]:{\"x\":\n"
                 "ISSUE[commentary]:tool call to 'b' not ended by <|call|>\n"
                 "TE[b #1 none ch=commentary]:{\"x\":\nEND[none]:\n");
}

static void test_parse_reference_output(void **state) {
    (void)state;
    char *text = fixture("test_streamable_parser.txt");
    char *got = parse_all(text);
    /* analysis, then a browser.search call (not a function: content, with
     * an issue), then the tool's answer (not the assistant: content) */
    assert_non_null(strstr(got, "R[analysis]:User asks \"Who is the current US president?\""));
    assert_non_null(strstr(got, "ISSUE[commentary]:unsupported recipient 'browser.search'"));
    assert_non_null(strstr(got, "C[commentary]:{\"query\": \"current US president July 2025\""));
    assert_non_null(
        strstr(got, "ISSUE[commentary]:message from 'browser.search', not the assistant"));
    assert_non_null(
        strstr(got, "C[commentary]:{\"result\": \"https://openai.com/\"}\nEND[end]:\n"));
    free(got);
    check_splits(text);
    free(text);
}

static void test_parse_malformed(void **state) {
    (void)state;
    /* no header at all: plain text */
    expect_parse("Just an answer.",
                 "ISSUE[]:output ended inside a message header: header text delivered as content\n"
                 "C[]:Just an answer.\nEND[none]:\n");
    expect_parse(
        "<|channel|>banter<|message|>hey<|end|>",
        "ISSUE[banter]:unknown channel 'banter': delivered as content\nC[banter]:hey\nEND[end]:\n");
    expect_parse(
        "<|message|>no channel<|end|>",
        "ISSUE[]:message without a channel: delivered as content\nC[]:no channel\nEND[end]:\n");
    expect_parse(
        "<|channel|>final<|message|>a<|end|>stray<|start|>assistant<|channel|>final<|message|>b",
        "C[final]:a\nEND[end]:\nISSUE[]:text outside a message: delivered as content\nC[]:stray\n"
        "ISSUE[]:message not ended before <|start|>\nEND[none]:\nC[final]:b\nEND[none]:\n");
    /* control tokens inside a message's text are dropped, never part of the answer */
    expect_parse("<|channel|>final<|message|>a<|channel|>b<|message|>c<|constrain|>d<|end|>",
                 "C[final]:a\nISSUE[final]:<|channel|> inside a message: dropped\nC[final]:b\n"
                 "ISSUE[final]:<|message|> inside a message: dropped\nC[final]:c\n"
                 "ISSUE[final]:<|constrain|> inside a message: dropped\nC[final]:d\nEND[end]:\n");
    expect_parse("<|channel|>final<|end|>",
                 "ISSUE[]:message ended before <|message|>: header text delivered as content\n"
                 "C[]:<|channel|>final\nEND[end]:\n");
    expect_parse(
        "<|channel|>final<|message|>x<|end|><|channel|>final<|message|>y<|return|><|call|>",
        "C[final]:x\nEND[end]:\nISSUE[]:message without <|start|>: assistant "
        "assumed\nC[final]:y\nEND[return]:\n"
        "ISSUE[]:<|call|> outside a message: ignored\n");
    /* a header that never ends is bounded */
    char big[2000];
    memset(big, 'h', sizeof big - 1);
    big[sizeof big - 1] = 0;
    char *got = parse_all(big);
    assert_non_null(strstr(got, "longer than 512 bytes"));
    free(got);
    check_splits("<|start|><|start|>x<|message|><|message|><|constrain|><|channel|><|end|><|");
}

/* Random byte strings with special tokens and fragments sprinkled in: no
 * crash, no leak (ASan build), split-invariant. */
static void test_parse_fuzz(void **state) {
    (void)state;
    static const char *const pieces[] = {"<|start|>",
                                         "<|end|>",
                                         "<|message|>",
                                         "<|channel|>",
                                         "<|constrain|>",
                                         "<|return|>",
                                         "<|call|>",
                                         "assistant",
                                         "analysis",
                                         "final",
                                         "commentary",
                                         " to=functions.f",
                                         "to=browser.x",
                                         " json",
                                         "<|",
                                         "|>",
                                         "<",
                                         "\xe4\xb8",
                                         "\x96",
                                         " ",
                                         "{\"a\":1}",
                                         "user"};
    uint64_t x = 0x9E3779B97F4A7C15ull;
    for (int iter = 0; iter < 400; iter++) {
        char buf[512];
        size_t n = 0;
        int count = 1 + (int)(x % 24);
        for (int k = 0; k < count; k++) {
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            if (x % 3 == 0) {
                if (n + 1 < sizeof buf) buf[n++] = (char)(1 + (x >> 8) % 255);
            } else {
                const char *p = pieces[(x >> 16) % (sizeof pieces / sizeof *pieces)];
                size_t l = strlen(p);
                if (n + l < sizeof buf) memcpy(buf + n, p, l), n += l;
            }
        }
        buf[n] = 0;
        char *whole = parse_split(buf, n, NULL, 0);
        size_t cuts[3] = {n / 3, n / 2, n - (n > 0)};
        if (cuts[1] < cuts[0]) cuts[1] = cuts[0];
        if (cuts[2] < cuts[1]) cuts[2] = cuts[1];
        char *split = parse_split(buf, n, cuts, 3);
        if (strcmp(whole, split) != 0) fail_msg("iteration %d differs", iter);
        free(whole);
        free(split);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_render_reference_simple),
        cmocka_unit_test(test_render_reference_tools),
        cmocka_unit_test(test_render_reference_history),
        cmocka_unit_test(test_render_multi_turn_tools),
        cmocka_unit_test(test_render_hf_template),
        cmocka_unit_test(test_render_errors),
        cmocka_unit_test(test_parse_channels),
        cmocka_unit_test(test_parse_tool_calls),
        cmocka_unit_test(test_parse_reference_output),
        cmocka_unit_test(test_parse_malformed),
        cmocka_unit_test(test_parse_fuzz),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
