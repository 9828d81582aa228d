/* pagoda_apply_chat_template: parse the JSON texts, find the model's chat
 * template and special tokens (pg_chat_config_load) and compile it once per
 * engine (pg_chat_cache), render (see chat.h). */
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

struct pg_chat_cache {
    char *override; /* the template override it was built for, NULL = the model's */
    pg_chat_config cfg;
    pg_chat_template *t;
};

void pg_chat_cache_free(pg_chat_cache *c) {
    if (!c) return;
    pg_chat_template_free(c->t);
    pg_chat_config_free(&c->cfg);
    free(c->override);
    free(c);
}

/* Find and compile the template (the override, else the model's). */
static pagoda_status chat_cache_build(const pagoda_engine *e, const char *template_override,
                                      pg_chat_cache **out) {
    *out = NULL;
    pg_chat_cache *c = calloc(1, sizeof *c);
    if (!c) return pg_error(PAGODA_ERR_NOMEM, "chat template: out of memory");
    const char *path = e ? pg_engine_model_path(e) : NULL;
    /* With an override the model's config still gives the special tokens;
     * "/dev/null" stands in for the template file we do not need. */
    pagoda_status st = pg_chat_config_load(path, template_override ? "/dev/null" : NULL, &c->cfg);
    if (!st && template_override && !(c->override = strdup(template_override)))
        st = pg_error(PAGODA_ERR_NOMEM, "chat template: out of memory");
    if (!st)
        st = pg_chat_template_compile(template_override ? template_override : c->cfg.source, &c->t);
    if (st) {
        pg_chat_cache_free(c);
        return st;
    }
    *out = c;
    return PAGODA_OK;
}

static bool chat_cache_matches(const pg_chat_cache *c, const char *template_override) {
    if (!c) return false;
    if (!c->override || !template_override) return !c->override && !template_override;
    return strcmp(c->override, template_override) == 0;
}

/* The compiled template for (e, template_override): the engine's cache when
 * it matches; otherwise built, and cached when the engine has none yet.
 * *owned is set when the caller must free the result. */
static pagoda_status chat_cache_get(const pagoda_engine *e, const char *template_override,
                                    const pg_chat_cache **out, pg_chat_cache **owned) {
    *out = NULL;
    *owned = NULL;
    pg_chat_cache *c = e ? pg_engine_chat_cache(e, NULL) : NULL;
    if (chat_cache_matches(c, template_override)) {
        *out = c;
        return PAGODA_OK;
    }
    pg_chat_cache *built;
    pagoda_status st = chat_cache_build(e, template_override, &built);
    if (st) return st;
    c = e && !c ? pg_engine_chat_cache(e, built) : NULL;
    if (c != built) *owned = built; /* another override is cached, or no engine */
    *out = built;
    return PAGODA_OK;
}

pagoda_status pagoda_apply_chat_template(const pagoda_engine *e, const char *messages_json,
                                         const char *tools_json, const char *kwargs_json,
                                         bool add_generation_prompt, const char *template_override,
                                         char **out) {
    *out = NULL;
    if (!messages_json)
        return pg_error(PAGODA_ERR_INVALID_ARG, "chat template: messages are required");
    const pg_chat_cache *cc;
    pg_chat_cache *owned;
    pagoda_status st = chat_cache_get(e, template_override, &cc, &owned);
    if (st) return st;
    cJSON *messages = NULL, *tools = NULL, *kwargs = NULL;
    cJSON *prepared = NULL;
    /* messages as vLLM hands them to the template: content in the form the
     * template reads (a string, or text parts), null content of an
     * assistant's tool call as "", tool call arguments given as JSON text
     * parsed (templates tojson them) */
    if (!(st = parse_json("messages", messages_json, 1, &messages)) &&
        !(st = parse_json("tools", tools_json, 1, &tools)) &&
        !(st = parse_json("chat_template_kwargs", kwargs_json, 0, &kwargs)) &&
        !(st = pg_chat_messages_prepare(messages, pg_chat_template_iterates_content(cc->t),
                                        &prepared))) {
        pg_chat_special_tokens sp = pg_chat_config_tokens(&cc->cfg);
        st = pg_chat_template_render(cc->t, prepared, tools, kwargs, add_generation_prompt, &sp,
                                     out);
    }
    cJSON_Delete(prepared);
    cJSON_Delete(messages);
    cJSON_Delete(tools);
    cJSON_Delete(kwargs);
    pg_chat_cache_free(owned);
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
