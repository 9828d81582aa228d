/* Chat templates against the reference renderings of Python jinja2 +
 * transformers (chat-templates/expected/chat_template_renderings.json), the
 * plain conversation over every template in the folder, template lookup
 * from a model directory, and random mutations of real templates (must give
 * an error or an output, never a crash or a hang). */
#include <cjson/cJSON.h>
#include <dirent.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"
#include "tokenizer/chat_template.h"

static cJSON *load_json(const char *rel) {
    size_t len;
    char *text = pg_test_read_file(pg_test_asset(rel), &len);
    cJSON *j = cJSON_ParseWithLength(text, len);
    free(text);
    assert_non_null(j);
    return j;
}

static char *load_template(const char *name) {
    char rel[512];
    snprintf(rel, sizeof rel, "chat-templates/%s", name);
    size_t len;
    return pg_test_read_file(pg_test_asset(rel), &len);
}

/* the reference fixes strftime_now to 2025-06-15 (a Sunday) */
static struct tm fixed_now(void) {
    struct tm t = {0};
    t.tm_year = 2025 - 1900;
    t.tm_mon = 5;
    t.tm_mday = 15;
    t.tm_wday = 0;
    t.tm_yday = 165;
    return t;
}

static const char *jstr(const cJSON *o, const char *k) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

/* print where two strings first differ */
static void report_diff(const char *tpl, const char *cs, const char *want, const char *got) {
    size_t i = 0;
    while (want[i] && want[i] == got[i]) i++;
    size_t from = i > 40 ? i - 40 : 0;
    fprintf(stderr, "MISMATCH %s / %s at byte %zu\n  want: ...", tpl, cs, i);
    for (size_t k = from; want[k] && k < i + 40; k++) fputc(want[k] == '\n' ? '|' : want[k], stderr);
    fprintf(stderr, "\n  got:  ...");
    for (size_t k = from; got[k] && k < i + 40; k++) fputc(got[k] == '\n' ? '|' : got[k], stderr);
    fprintf(stderr, "\n");
}

static void test_reference_renderings(void **state) {
    (void)state;
    cJSON *ref = load_json("chat-templates/expected/chat_template_renderings.json");
    const cJSON *cases = cJSON_GetObjectItemCaseSensitive(ref, "cases");
    const cJSON *results = cJSON_GetObjectItemCaseSensitive(ref, "results");
    assert_true(cJSON_IsArray(cases) && cJSON_IsArray(results));
    struct tm now = fixed_now();
    int total = 0, pass = 0;
    const cJSON *r;
    cJSON_ArrayForEach(r, results) {
        total++;
        const char *tname = jstr(r, "template"), *cname = jstr(r, "case");
        assert_non_null(tname);
        assert_non_null(cname);
        const cJSON *cs = NULL, *e;
        cJSON_ArrayForEach(e, cases) if (strcmp(jstr(e, "name"), cname) == 0) cs = e;
        assert_non_null(cs);
        const cJSON *stok = cJSON_GetObjectItemCaseSensitive(r, "special_tokens");
        pg_chat_special_tokens sp = {jstr(stok, "bos_token"), jstr(stok, "eos_token"),
                                     jstr(stok, "pad_token"), jstr(stok, "unk_token")};
        char *src = load_template(tname);
        pg_chat_template *t = NULL;
        pagoda_status st = pg_chat_template_compile(src, &t);
        free(src);
        if (st != PAGODA_OK) {
            fprintf(stderr, "COMPILE %s: %s\n", tname, pg_last_error());
            continue;
        }
        char *out = NULL;
        st = pg_chat_template_render_at(
            t, cJSON_GetObjectItemCaseSensitive(cs, "messages"),
            cJSON_GetObjectItemCaseSensitive(cs, "tools"), cJSON_GetObjectItemCaseSensitive(r, "kwargs"),
            cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(cs, "add_generation_prompt")), &sp, &now,
            &out);
        const char *want = jstr(r, "output");
        const char *want_err = jstr(r, "error");
        if (want_err) {
            const char *colon = strstr(want_err, ": ");
            const char *msg = colon ? colon + 2 : want_err;
            if (st == PAGODA_OK)
                fprintf(stderr, "MISSING ERROR %s / %s: want '%s'\n", tname, cname, want_err);
            else if (!strstr(pg_last_error(), msg))
                fprintf(stderr, "WRONG ERROR %s / %s: want '%s', got '%s'\n", tname, cname, msg,
                        pg_last_error());
            else
                pass++;
        } else if (st != PAGODA_OK) {
            fprintf(stderr, "ERROR %s / %s: %s\n", tname, cname, pg_last_error());
        } else if (!want || strcmp(want, out) != 0) {
            report_diff(tname, cname, want ? want : "", out);
        } else {
            pass++;
        }
        free(out);
        pg_chat_template_free(t);
    }
    fprintf(stderr, "reference renderings: %d / %d match\n", pass, total);
    cJSON_Delete(ref);
    assert_true(total > 0);
    assert_int_equal(pass, total);
}

static const char *PLAIN_CONVERSATION =
    "[{\"role\":\"system\",\"content\":\"You are a helpful assistant.\"},"
    "{\"role\":\"user\",\"content\":\"Hi there\"},"
    "{\"role\":\"assistant\",\"content\":\"Hello! How can I help?\"},"
    "{\"role\":\"user\",\"content\":\"Tell me a joke.\"}]";

/* Templates that need more than messages in Python jinja2 too: tool-use
 * variants iterate `tools` (None when not given), firefunction-v2 reads
 * `functions` and `datetime` kwargs; gemma-2 rejects a system message by
 * design (raise_exception). */
static const char *const NEEDS_TOOLS[] = {"CohereForAI-c4ai-command-r-plus-tool_use.jinja",
                                          "NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use.jinja",
                                          NULL};
static const char *const REJECTS_SYSTEM[] = {"google-gemma-2-2b-it.jinja", NULL};

static bool listed(const char *const *list, const char *name) {
    for (; *list; list++)
        if (strcmp(*list, name) == 0) return true;
    return false;
}

static void test_all_templates_plain_conversation(void **state) {
    (void)state;
    DIR *d = opendir(pg_test_asset("chat-templates"));
    assert_non_null(d);
    cJSON *msgs = cJSON_Parse(PLAIN_CONVERSATION);
    cJSON *tools = cJSON_Parse(
        "[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"description\":"
        "\"Weather\",\"parameters\":{\"type\":\"object\",\"properties\":{\"city\":{\"description\":\"City\",\"type\":"
        "\"string\"}},\"required\":[\"city\"]}}}]");
    cJSON *fire_kwargs = cJSON_Parse("{\"functions\":\"[]\",\"datetime\":\"2025-06-15\"}");
    pg_chat_special_tokens sp = {"<s>", "</s>", "<pad>", "<unk>"};
    struct tm now = fixed_now();
    int total = 0, ok = 0;
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        size_t n = strlen(de->d_name);
        if (n < 6 || strcmp(de->d_name + n - 6, ".jinja") != 0) continue;
        total++;
        char *src = load_template(de->d_name);
        pg_chat_template *t = NULL;
        char *out = NULL;
        const cJSON *tl = listed(NEEDS_TOOLS, de->d_name) ? tools : NULL;
        const cJSON *kw = strstr(de->d_name, "firefunction") ? fire_kwargs : NULL;
        pagoda_status st = pg_chat_template_compile(src, &t);
        if (st == PAGODA_OK)
            st = pg_chat_template_render_at(t, msgs, tl, kw, true, &sp, &now, &out);
        if (listed(REJECTS_SYSTEM, de->d_name)) {
            if (st == PAGODA_ERR_FORMAT && strstr(pg_last_error(), "System role not supported"))
                ok++;
            else
                fprintf(stderr, "FAIL %s: expected its 'System role not supported' error\n",
                        de->d_name);
        } else if (st != PAGODA_OK) {
            fprintf(stderr, "FAIL %s: %s\n", de->d_name, pg_last_error());
        } else if (!strstr(out, "Tell me a joke.") || !strstr(out, "Hello! How can I help?")) {
            fprintf(stderr, "FAIL %s: conversation text missing from the rendering\n", de->d_name);
        } else {
            ok++;
        }
        free(out);
        free(src);
        pg_chat_template_free(t);
    }
    closedir(d);
    cJSON_Delete(msgs);
    cJSON_Delete(tools);
    cJSON_Delete(fire_kwargs);
    fprintf(stderr, "plain conversation: %d / %d templates render\n", ok, total);
    assert_true(total >= 40);
    assert_int_equal(ok, total);
}

/* ---- template lookup ------------------------------------------------------ */
static void test_config_no_template(void **state) {
    (void)state;
    pg_chat_config cfg;
    pagoda_status st = pg_chat_config_load(pg_test_asset("llm/stories260K-hf"), NULL, &cfg);
    assert_int_equal(st, PAGODA_ERR_NOT_FOUND);
    assert_non_null(strstr(pg_last_error(), "no chat template"));
    assert_non_null(strstr(pg_last_error(), "--chat-template"));
}

static void test_config_gguf(void **state) {
    (void)state;
    pg_chat_config cfg;
    char gguf[1024];
    snprintf(gguf, sizeof gguf, "%s", pg_test_asset("llm/llama2c/stories260K.gguf"));
    assert_int_equal(pg_chat_config_load(gguf, NULL, &cfg), PAGODA_ERR_NOT_FOUND);
    assert_non_null(strstr(pg_last_error(), "no chat template"));
    char tf[1024];
    snprintf(tf, sizeof tf, "%s/t.jinja", pg_test_tmpdir());
    pg_test_write_file(tf, "{{ bos_token }}|{{ eos_token }}", 31);
    assert_int_equal(pg_chat_config_load(gguf, tf, &cfg), PAGODA_OK);
    assert_string_equal(cfg.source, "{{ bos_token }}|{{ eos_token }}");
    assert_string_equal(cfg.bos_token, "<s>");
    assert_string_equal(cfg.eos_token, "</s>");
    pg_chat_config_free(&cfg);
}

static void test_config_named_templates_and_tokens(void **state) {
    (void)state;
    const char *dir = pg_test_tmpdir();
    char path[1024];
    snprintf(path, sizeof path, "%s/tokenizer_config.json", dir);
    const char *cfg_text =
        "{\"bos_token\":{\"content\":\"<B>\",\"lstrip\":false},\"eos_token\":\"<E>\","
        "\"chat_template\":[{\"name\":\"tool_use\",\"template\":\"TOOLS\"},"
        "{\"name\":\"default\",\"template\":\"{{ bos_token }}{% for m in messages %}"
        "{{ m.content }}{% endfor %}{{ eos_token }}\"}]}";
    pg_test_write_file(path, cfg_text, strlen(cfg_text));
    pg_chat_config cfg;
    assert_int_equal(pg_chat_config_load(dir, NULL, &cfg), PAGODA_OK);
    assert_string_equal(cfg.bos_token, "<B>");
    assert_string_equal(cfg.eos_token, "<E>");
    assert_null(cfg.pad_token);
    pg_chat_template *t;
    assert_int_equal(pg_chat_template_compile(cfg.source, &t), PAGODA_OK);
    cJSON *m = cJSON_Parse("[{\"role\":\"user\",\"content\":\"x\"}]");
    pg_chat_special_tokens sp = pg_chat_config_tokens(&cfg);
    char *out;
    assert_int_equal(pg_chat_template_render(t, m, NULL, NULL, false, &sp, &out), PAGODA_OK);
    assert_string_equal(out, "<B>x<E>");
    free(out);
    pg_chat_template_free(t);
    pg_chat_config_free(&cfg);

    /* --chat-template FILE wins over the config; chat_template.jinja next */
    char tf[1024];
    snprintf(tf, sizeof tf, "%s/override.jinja", dir);
    pg_test_write_file(tf, "OVERRIDE", 8);
    assert_int_equal(pg_chat_config_load(dir, tf, &cfg), PAGODA_OK);
    assert_string_equal(cfg.source, "OVERRIDE");
    assert_string_equal(cfg.eos_token, "<E>");
    pg_chat_config_free(&cfg);
    snprintf(tf, sizeof tf, "%s/chat_template.jinja", dir);
    pg_test_write_file(tf, "FROMJINJA", 9);
    assert_int_equal(pg_chat_config_load(dir, NULL, &cfg), PAGODA_OK);
    assert_string_equal(cfg.source, "FROMJINJA");
    pg_chat_config_free(&cfg);
    /* a missing override file is a clear error */
    snprintf(tf, sizeof tf, "%s/missing.jinja", dir);
    assert_int_equal(pg_chat_config_load(dir, tf, &cfg), PAGODA_ERR_NOT_FOUND);
    assert_non_null(strstr(pg_last_error(), "missing.jinja"));
    cJSON_Delete(m);

    /* list without "default" */
    const char *bad = "{\"chat_template\":[{\"name\":\"tool_use\",\"template\":\"T\"}]}";
    pg_test_write_file(path, bad, strlen(bad));
    remove(tf);
    snprintf(tf, sizeof tf, "%s/chat_template.jinja", dir);
    remove(tf);
    assert_int_equal(pg_chat_config_load(dir, NULL, &cfg), PAGODA_ERR_NOT_FOUND);
    assert_non_null(strstr(pg_last_error(), "default"));
}

static bool iterates(const char *src) {
    pg_chat_template *t;
    assert_int_equal(pg_chat_template_compile(src, &t), PAGODA_OK);
    bool r = pg_chat_template_iterates_content(t);
    pg_chat_template_free(t);
    return r;
}

static bool iterates_file(const char *name) {
    char *src = load_template(name);
    bool r = iterates(src);
    free(src);
    return r;
}

static void test_content_format_detection(void **state) {
    (void)state;
    assert_false(iterates("{% for m in messages %}{{ m['content'] }}{% endfor %}"));
    assert_true(iterates("{% for m in messages %}{% for p in m['content'] %}{{ p.text }}{% endfor %}"
                         "{% endfor %}"));
    assert_true(iterates("{% for m in messages %}{% set c = m.content %}{% for p in c %}{% endfor %}"
                         "{% endfor %}"));
    assert_true(iterates("{% for m in messages %}{% if m.content is string %}{{ m.content }}"
                         "{% else %}{% for p in m.content | selectattr('type') %}{% endfor %}"
                         "{% endif %}{% endfor %}"));
    /* real templates: Llama 3.1 prints content; Qwen2.5 (text only) too; Qwen3.5 (vision)
     * iterates over content parts */
    assert_false(iterates_file("meta-llama-Llama-3.1-8B-Instruct.jinja"));
    assert_true(iterates_file("Qwen3.5-4B.jinja"));
}

static void test_messages_prepare(void **state) {
    (void)state;
    cJSON *in = cJSON_Parse(
        "[{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"a\"},"
        "{\"type\":\"text\",\"text\":\"b\"}],\"name\":\"u1\"},"
        "{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[{\"id\":\"c1\","
        "\"type\":\"function\",\"function\":{\"name\":\"f\",\"arguments\":\"{\\\"x\\\": 1}\"}}]},"
        "{\"role\":\"tool\",\"tool_call_id\":\"c1\",\"content\":\"42\"}]");
    assert_non_null(in);
    cJSON *out;
    assert_int_equal(pg_chat_messages_prepare(in, false, &out), PAGODA_OK);
    char *s = cJSON_PrintUnformatted(out);
    assert_string_equal(s,
                        "[{\"role\":\"user\",\"content\":\"a\\nb\",\"name\":\"u1\"},"
                        "{\"role\":\"assistant\",\"content\":\"\",\"tool_calls\":[{\"id\":\"c1\","
                        "\"type\":\"function\",\"function\":{\"name\":\"f\",\"arguments\":{\"x\":1}}}]},"
                        "{\"role\":\"tool\",\"tool_call_id\":\"c1\",\"content\":\"42\"}]");
    free(s);
    cJSON_Delete(out);
    assert_int_equal(pg_chat_messages_prepare(in, true, &out), PAGODA_OK);
    s = cJSON_PrintUnformatted(cJSON_GetArrayItem(out, 2));
    assert_string_equal(s, "{\"role\":\"tool\",\"tool_call_id\":\"c1\",\"content\":"
                           "[{\"type\":\"text\",\"text\":\"42\"}]}");
    free(s);
    cJSON_Delete(out);
    cJSON_Delete(in);

    in = cJSON_Parse("[{\"role\":\"user\",\"content\":[{\"type\":\"image_url\",\"image_url\":{}}]}]");
    assert_int_equal(pg_chat_messages_prepare(in, false, &out), PAGODA_ERR_UNSUPPORTED);
    assert_non_null(strstr(pg_last_error(), "image_url"));
    cJSON_Delete(in);
    in = cJSON_Parse("[{\"role\":\"assistant\",\"tool_calls\":[{\"function\":{\"arguments\":\"{bad\"}}]}]");
    assert_int_equal(pg_chat_messages_prepare(in, false, &out), PAGODA_ERR_INVALID_ARG);
    assert_non_null(strstr(pg_last_error(), "not valid JSON"));
    cJSON_Delete(in);
    in = cJSON_Parse("[1]");
    assert_int_equal(pg_chat_messages_prepare(in, false, &out), PAGODA_ERR_INVALID_ARG);
    cJSON_Delete(in);
}

static void test_continue_final_message(void **state) {
    (void)state;
    char *src = load_template("Qwen-Qwen2.5-7B-Instruct.jinja");
    pg_chat_template *t;
    assert_int_equal(pg_chat_template_compile(src, &t), PAGODA_OK);
    free(src);
    cJSON *m = cJSON_Parse("[{\"role\":\"user\",\"content\":\"Hi\"},"
                           "{\"role\":\"assistant\",\"content\":\"Hel \"}]");
    char *out;
    assert_int_equal(pg_chat_template_render(t, m, NULL, NULL, false, NULL, &out), PAGODA_OK);
    assert_int_equal(pg_chat_continue_final_message(out, m), PAGODA_OK);
    const char *tail = "<|im_start|>assistant\nHel ";
    assert_true(strlen(out) >= strlen(tail));
    assert_string_equal(out + strlen(out) - strlen(tail), tail);
    free(out);
    cJSON_Delete(m);
    /* the template drops the text: a clear error */
    m = cJSON_Parse("[{\"role\":\"user\",\"content\":\"Hi\"},{\"role\":\"assistant\",\"content\":\"zzz\"}]");
    char buf[] = "<|im_start|>user\nHi<|im_end|>\n";
    assert_int_equal(pg_chat_continue_final_message(buf, m), PAGODA_ERR_INVALID_ARG);
    cJSON_Delete(m);
    pg_chat_template_free(t);
}

static void test_render_bad_arguments(void **state) {
    (void)state;
    pg_chat_template *t;
    assert_int_equal(pg_chat_template_compile("{{ messages }}", &t), PAGODA_OK);
    cJSON *obj = cJSON_Parse("{\"a\":1}");
    cJSON *arr = cJSON_Parse("[]");
    char *out = NULL;
    assert_int_equal(pg_chat_template_render(t, obj, NULL, NULL, true, NULL, &out),
                     PAGODA_ERR_INVALID_ARG);
    assert_int_equal(pg_chat_template_render(t, arr, NULL, arr, true, NULL, &out),
                     PAGODA_ERR_INVALID_ARG);
    assert_int_equal(pg_chat_template_render(t, arr, obj, NULL, true, NULL, &out),
                     PAGODA_ERR_INVALID_ARG);
    assert_null(out);
    cJSON_Delete(obj);
    cJSON_Delete(arr);
    pg_chat_template_free(t);
}

/* ---- mutation fuzzing ----------------------------------------------------- */
static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static uint64_t rnd(void) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

static const char *const SNIPPETS[] = {
    "{%", "%}", "{{", "}}", "{#", "#}", "-", "'", "\"", "(", ")", "[", "]", "|", ".", ",",
    "{% for x in messages %}", "{% endfor %}", "{% if ", "{% endif %}", "{% macro m(a) %}{{ m(a) }}{% endmacro %}{{ m(1) }}",
    "{% set x = x ~ x ~ x ~ x %}", "**", "//", " not ", " is ", " in ", "loop.", "range(99999)",
    "{% for i in range(100000) %}{% for j in range(100000) %}", "|tojson", "|join", "[::-1]",
    "{% break %}", "{% raw %}", "}}{{", "\\", "9999999999999999999", "{% set ns.x = 1 %}",
};

static void mutate(char *buf, size_t *len, size_t cap) {
    int kind = (int)(rnd() % 4);
    size_t n = *len;
    if (n == 0) return;
    size_t at = (size_t)(rnd() % n);
    if (kind == 0) { /* delete a span */
        size_t k = 1 + (size_t)(rnd() % 16);
        if (at + k > n) k = n - at;
        memmove(buf + at, buf + at + k, n - at - k);
        *len = n - k;
    } else if (kind == 1) { /* flip a byte */
        buf[at] = (char)(rnd() & 0x7f ? (char)(0x20 + rnd() % 95) : (char)(rnd() & 0xff));
        if (buf[at] == 0) buf[at] = ' ';
    } else if (kind == 2) { /* insert a snippet */
        const char *s = SNIPPETS[rnd() % (sizeof SNIPPETS / sizeof SNIPPETS[0])];
        size_t k = strlen(s);
        if (n + k >= cap) return;
        memmove(buf + at + k, buf + at, n - at);
        memcpy(buf + at, s, k);
        *len = n + k;
    } else { /* duplicate a span */
        size_t k = 1 + (size_t)(rnd() % 64);
        if (at + k > n) k = n - at;
        if (n + k >= cap) return;
        size_t to = (size_t)(rnd() % n);
        char tmp[64];
        memcpy(tmp, buf + at, k);
        memmove(buf + to + k, buf + to, n - to);
        memcpy(buf + to, tmp, k);
        *len = n + k;
    }
    buf[*len] = 0;
}

static void test_mutated_templates_never_crash(void **state) {
    (void)state;
    static const char *const names[] = {
        "Qwen-Qwen3-0.6B.jinja", "meta-llama-Llama-3.1-8B-Instruct.jinja",
        "openai-gpt-oss-120b.jinja", "google-gemma-2-2b-it.jinja",
        "mistralai-Mistral-Nemo-Instruct-2407.jinja", "Kimi-K2-Thinking.jinja",
        "GigaChat3-10B-A1.8B.jinja", "meetkai-functionary-medium-v3.2.jinja",
    };
    cJSON *ref = load_json("chat-templates/expected/chat_template_renderings.json");
    const cJSON *cases = cJSON_GetObjectItemCaseSensitive(ref, "cases");
    const cJSON *tools_case = cJSON_GetArrayItem(cases, 5);
    const cJSON *msgs = cJSON_GetObjectItemCaseSensitive(tools_case, "messages");
    const cJSON *tools = cJSON_GetObjectItemCaseSensitive(tools_case, "tools");
    pg_chat_special_tokens sp = {"<s>", "</s>", NULL, NULL};
    int iters = getenv("PAGODA_FUZZ_ITERS") ? atoi(getenv("PAGODA_FUZZ_ITERS")) : 60;
    int ok = 0, errs = 0;
    for (size_t ti = 0; ti < sizeof names / sizeof names[0]; ti++) {
        char *src = load_template(names[ti]);
        size_t n0 = strlen(src), cap = n0 + 4096;
        char *buf = malloc(cap);
        for (int it = 0; it < iters; it++) {
            memcpy(buf, src, n0 + 1);
            size_t len = n0;
            int nm = 1 + (int)(rnd() % 4);
            for (int k = 0; k < nm; k++) mutate(buf, &len, cap);
            pg_chat_template *t = NULL;
            char *out = NULL;
            pagoda_status st = pg_chat_template_compile(buf, &t);
            if (st == PAGODA_OK) st = pg_chat_template_render(t, msgs, tools, NULL, true, &sp, &out);
            if (st == PAGODA_OK) {
                ok++;
                assert_non_null(out);
            } else {
                errs++;
                assert_true(strlen(pg_last_error()) > 0);
                assert_null(strchr(pg_last_error(), '\n'));
            }
            free(out);
            pg_chat_template_free(t);
        }
        free(buf);
        free(src);
    }
    fprintf(stderr, "mutations: %d rendered, %d errors\n", ok, errs);
    assert_true(ok + errs > 0);
    cJSON_Delete(ref);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_reference_renderings),
        cmocka_unit_test(test_all_templates_plain_conversation),
        cmocka_unit_test(test_config_no_template),
        cmocka_unit_test(test_config_named_templates_and_tokens),
        cmocka_unit_test(test_config_gguf),
        cmocka_unit_test(test_render_bad_arguments),
        cmocka_unit_test(test_content_format_detection),
        cmocka_unit_test(test_messages_prepare),
        cmocka_unit_test(test_continue_final_message),
        cmocka_unit_test(test_mutated_templates_never_crash),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
