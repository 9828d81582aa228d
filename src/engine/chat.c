/* pagoda_apply_chat_template: parse the JSON texts, find the model's chat
 * template and special tokens (pg_chat_config_load), render (see chat.h). */
#include "engine/chat.h"

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

#include "base/status.h"
#include "tokenizer/chat_template.h"

__attribute__((weak)) const char *pg_engine_model_path(const pagoda_engine *e) {
    (void)e;
    return NULL;
}

static pagoda_status parse_json(const char *what, const char *text, int want_array, cJSON **out) {
    *out = NULL;
    if (!text) return PAGODA_OK;
    cJSON *v = cJSON_Parse(text);
    if (!v || (want_array ? !cJSON_IsArray(v) : !cJSON_IsObject(v))) {
        cJSON_Delete(v);
        return pg_error(PAGODA_ERR_INVALID_ARG, "chat template: %s must be a JSON %s", what,
                        want_array ? "array" : "object");
    }
    *out = v;
    return PAGODA_OK;
}

pagoda_status pagoda_apply_chat_template(const pagoda_engine *e, const char *messages_json,
                                         const char *tools_json, const char *kwargs_json,
                                         bool add_generation_prompt, const char *template_override,
                                         char **out) {
    *out = NULL;
    if (!messages_json)
        return pg_error(PAGODA_ERR_INVALID_ARG, "chat template: messages are required");
    const char *path = e ? pg_engine_model_path(e) : NULL;
    pg_chat_config cfg;
    /* With an override the model's config still gives the special tokens;
     * "/dev/null" stands in for the template file we do not need. */
    pagoda_status st = pg_chat_config_load(path, template_override ? "/dev/null" : NULL, &cfg);
    if (st) return st;
    const char *source = template_override ? template_override : cfg.source;
    cJSON *messages = NULL, *tools = NULL, *kwargs = NULL;
    cJSON *prepared = NULL;
    pg_chat_template *t = NULL;
    /* messages as vLLM hands them to the template: content in the form the
     * template reads (a string, or text parts), null content of an
     * assistant's tool call as "", tool call arguments given as JSON text
     * parsed (templates tojson them) */
    if (!(st = parse_json("messages", messages_json, 1, &messages)) &&
        !(st = parse_json("tools", tools_json, 1, &tools)) &&
        !(st = parse_json("chat_template_kwargs", kwargs_json, 0, &kwargs)) &&
        !(st = pg_chat_template_compile(source, &t)) &&
        !(st = pg_chat_messages_prepare(messages, pg_chat_template_iterates_content(t),
                                        &prepared))) {
        pg_chat_special_tokens sp = pg_chat_config_tokens(&cfg);
        st = pg_chat_template_render(t, prepared, tools, kwargs, add_generation_prompt, &sp, out);
    }
    pg_chat_template_free(t);
    cJSON_Delete(prepared);
    cJSON_Delete(messages);
    cJSON_Delete(tools);
    cJSON_Delete(kwargs);
    pg_chat_config_free(&cfg);
    return st;
}

pagoda_status pagoda_chat_template_source(const pagoda_engine *e, const char *template_override,
                                          char **out) {
    *out = NULL;
    if (template_override) {
        *out = strdup(template_override);
        return *out ? PAGODA_OK : pg_error(PAGODA_ERR_NOMEM, "chat template: out of memory");
    }
    pg_chat_config cfg;
    pagoda_status st = pg_chat_config_load(e ? pg_engine_model_path(e) : NULL, NULL, &cfg);
    if (st) return st;
    *out = cfg.source;
    cfg.source = NULL;
    pg_chat_config_free(&cfg);
    return PAGODA_OK;
}
