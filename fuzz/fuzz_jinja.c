/* libFuzzer target: Jinja chat templates, compiled and rendered (the
 * server's --chat-template and every model's tokenizer_config.json
 * chat_template are untrusted text). The input is the template, optionally
 * followed by a NUL byte and a JSON array of messages (else a fixed
 * conversation with a system prompt, a tool call and its result). The
 * messages are prepared as the server prepares them
 * (pg_chat_messages_prepare, in the content format the template wants) and
 * rendered with tools, chat_template_kwargs, special tokens and a fixed
 * clock. The renderer's limits (output size, memory, steps, nesting and
 * recursion: jinja.h) must end every render with an error: libFuzzer's
 * -timeout and -rss_limit_mb turn a hang or a blow-up into a failure.
 * Seeds: every template in ../shared/assets/chat-templates (scripts/fuzz.sh).
 * Dictionary: fuzz/jinja.dict
 */
#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "fz_util.h"
#include "tokenizer/chat_template.h"

static cJSON *g_default_messages, *g_tools, *g_kwargs;

static const char k_messages[] =
    "[{\"role\":\"system\",\"content\":\"You are helpful.\"},"
    "{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"Weather in Paris?\"}]},"
    "{\"role\":\"assistant\",\"content\":null,\"reasoning_content\":\"Use the tool.\","
    "\"tool_calls\":[{\"id\":\"c1\",\"type\":\"function\",\"function\":{\"name\":\"get_weather\","
    "\"arguments\":\"{\\\"city\\\": \\\"Paris\\\"}\"}}]},"
    "{\"role\":\"tool\",\"tool_call_id\":\"c1\",\"content\":\"22 C\"},"
    "{\"role\":\"assistant\",\"content\":\"It is 22 C.\"},"
    "{\"role\":\"user\",\"content\":\"Thanks \\u00e9\\u4f60\"}]";
static const char k_tools[] =
    "[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"description\":\"Weather\","
    "\"parameters\":{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\"}},"
    "\"required\":[\"city\"]}}}]";

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    fz_init();
    g_default_messages = cJSON_Parse(k_messages);
    g_tools = cJSON_Parse(k_tools);
    g_kwargs = cJSON_Parse("{\"enable_thinking\":true,\"reasoning_effort\":\"low\"}");
    if (!g_default_messages || !g_tools || !g_kwargs) abort();
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const uint8_t *msg;
    size_t msg_len, src_len;
    fz_split(data, size, &msg, &msg_len, &src_len);
    char *src = fz_strndup(data, src_len);
    pg_chat_template *t = NULL;
    if (pg_chat_template_compile(src, &t) == PAGODA_OK) {
        cJSON *given = msg ? cJSON_ParseWithLength((const char *)msg, msg_len) : NULL;
        const cJSON *messages = given ? given : g_default_messages;
        cJSON *prepared = NULL;
        if (pg_chat_messages_prepare(messages, pg_chat_template_iterates_content(t), &prepared) ==
            PAGODA_OK) {
            const pg_chat_special_tokens sp = {"<s>", "</s>", "<pad>", "<unk>"};
            struct tm now = {.tm_year = 126, .tm_mon = 11, .tm_mday = 2, .tm_hour = 7};
            char *out = NULL;
            if (pg_chat_template_render_at(t, prepared, g_tools, g_kwargs, true, &sp, &now, &out) ==
                PAGODA_OK) {
                pg_chat_continue_final_message(out, prepared);
                free(out);
            }
            out = NULL;
            if (pg_chat_template_render_at(t, prepared, NULL, NULL, false, NULL, &now, &out) ==
                PAGODA_OK)
                free(out);
            cJSON_Delete(prepared);
        }
        cJSON_Delete(given);
        pg_chat_template_free(t);
    }
    free(src);
    return 0;
}
