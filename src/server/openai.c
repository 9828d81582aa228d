/* OpenAI request parsing/validation and response building (see openai.h). */
#include "server/openai.h"

#include "server/harmony_chat.h"
#include "server/json_check.h"

#include <cjson/cJSON.h>
#include <float.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/utf8.h"

pagoda_status pg_api_fail(pg_api_error *err, int status, const char *param, const char *fmt, ...) {
    err->status = status;
    err->type = status == 401   ? "authentication_error"
                : status == 404 ? "invalid_request_error"
                : status >= 500 ? "server_error"
                                : "invalid_request_error";
    err->code = NULL;
    snprintf(err->param, sizeof err->param, "%s", param ? param : "");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->message, sizeof err->message, fmt, ap);
    va_end(ap);
    return PAGODA_ERR_INVALID_ARG;
}

char *pg_api_error_json(const pg_api_error *err) {
    /* messages may quote raw client bytes (path, method) or be cut inside a
     * character: JSON text must be valid UTF-8 */
    char *msg = pg_api_utf8_dup(err->message, strlen(err->message));
    if (!msg) return NULL;
    cJSON *root = cJSON_CreateObject();
    cJSON *e = cJSON_AddObjectToObject(root, "error");
    cJSON_AddStringToObject(e, "message", msg);
    free(msg);
    cJSON_AddStringToObject(e, "type", err->type ? err->type : "invalid_request_error");
    if (err->param[0])
        cJSON_AddStringToObject(e, "param", err->param);
    else
        cJSON_AddNullToObject(e, "param");
    if (err->code)
        cJSON_AddStringToObject(e, "code", err->code);
    else
        cJSON_AddNumberToObject(e, "code", err->status);
    char *s = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    return s;
}

/* ------------------------------------------------------------ field access */

typedef struct parse_ctx {
    const cJSON *root;
    pg_api_error *err;
    const char *body; /* the checked JSON text (top-level members' raw text) */
    size_t len;
} parse_ctx;

static const cJSON *field(const parse_ctx *p, const char *name) {
    const cJSON *f = cJSON_GetObjectItemCaseSensitive(p->root, name);
    return f && !cJSON_IsNull(f) ? f : NULL;
}

static bool is_int(const cJSON *v) {
    if (!cJSON_IsNumber(v)) return false;
    double d = v->valuedouble;
    return isfinite(d) && d == floor(d) && d >= -9.2e18 && d <= 9.2e18;
}

/* Each getter: absent/null leaves *out alone and succeeds. */
static pagoda_status get_bool(const parse_ctx *p, const char *name, bool *out) {
    const cJSON *f = field(p, name);
    if (!f) return PAGODA_OK;
    if (!cJSON_IsBool(f)) return pg_api_fail(p->err, 400, name, "'%s' must be a boolean", name);
    *out = cJSON_IsTrue(f);
    return PAGODA_OK;
}

static pagoda_status get_float(const parse_ctx *p, const char *name, float *out) {
    const cJSON *f = field(p, name);
    if (!f) return PAGODA_OK;
    if (!cJSON_IsNumber(f) || !isfinite(f->valuedouble))
        return pg_api_fail(p->err, 400, name, "'%s' must be a number", name);
    *out = (float)f->valuedouble;
    return PAGODA_OK;
}

static pagoda_status get_int64(const parse_ctx *p, const char *name, int64_t lo, int64_t hi,
                               bool *present, int64_t *out) {
    const cJSON *f = field(p, name);
    if (!f) return PAGODA_OK;
    if (!is_int(f)) return pg_api_fail(p->err, 400, name, "'%s' must be an integer", name);
    double d = f->valuedouble;
    if (d < (double)lo || d > (double)hi)
        return pg_api_fail(p->err, 400, name, "'%s' must be in [%lld, %lld], got %.0f", name,
                           (long long)lo, (long long)hi, d);
    *out = (int64_t)d;
    if (present) *present = true;
    return PAGODA_OK;
}

static pagoda_status get_int32(const parse_ctx *p, const char *name, int64_t lo, int64_t hi,
                               int32_t *out) {
    int64_t v = *out;
    pagoda_status st = get_int64(p, name, lo, hi, NULL, &v);
    if (st == PAGODA_OK) *out = (int32_t)v;
    return st;
}

static pagoda_status get_string(const parse_ctx *p, const char *name, char **out) {
    const cJSON *f = field(p, name);
    if (!f) return PAGODA_OK;
    if (!cJSON_IsString(f)) return pg_api_fail(p->err, 400, name, "'%s' must be a string", name);
    *out = strdup(f->valuestring);
    return *out ? PAGODA_OK : pg_api_fail(p->err, 500, name, "out of memory");
}

static const char *type_name(const cJSON *v) {
    if (cJSON_IsString(v)) return "a string";
    if (cJSON_IsNumber(v)) return "a number";
    if (cJSON_IsArray(v)) return "a list";
    if (cJSON_IsObject(v)) return "an object";
    if (cJSON_IsBool(v)) return "a boolean";
    return "null";
}

/* Token ids of `arr`. outer != SIZE_MAX: arr is item `outer` of a list of
 * token-id lists (error messages name both indices). */
static pagoda_status parse_ids(const parse_ctx *p, const cJSON *arr, const char *name, size_t outer,
                               int32_t **ids, size_t *n) {
    size_t cnt = (size_t)cJSON_GetArraySize(arr);
    *ids = NULL;
    *n = 0;
    if (cnt == 0) return PAGODA_OK;
    int32_t *v = malloc(cnt * sizeof *v);
    if (!v) return pg_api_fail(p->err, 500, name, "out of memory");
    size_t i = 0;
    const cJSON *it;
    cJSON_ArrayForEach(it, arr) {
        if (!is_int(it) || it->valuedouble < 0 || it->valuedouble > 2147483647.0) {
            free(v);
            char what[48];
            if (cJSON_IsNumber(it))
                snprintf(what, sizeof what, "%.17g", it->valuedouble);
            else
                snprintf(what, sizeof what, "%s", type_name(it));
            if (outer != SIZE_MAX)
                return pg_api_fail(p->err, 400, name,
                                   "'%s' item %zu: token %zu must be a non-negative integer "
                                   "token id, got %s",
                                   name, outer, i, what);
            return pg_api_fail(p->err, 400, name,
                               "'%s' item %zu must be a non-negative integer token id, got %s",
                               name, i, what);
        }
        v[i++] = (int32_t)it->valuedouble;
    }
    *ids = v;
    *n = cnt;
    return PAGODA_OK;
}

/* ---------------------------------------------------------------- prompts */

#define PROMPT_FORMS "a string, a list of strings, a list of token ids or a list of token-id lists"

/* OpenAI / vLLM accept exactly four prompt forms; the first item of a list
 * decides which one it is and every other item must match it. */
static pagoda_status parse_prompts(const parse_ctx *p, pg_api_request *r) {
    const cJSON *f = field(p, "prompt");
    if (!f) return pg_api_fail(p->err, 400, "prompt", "'prompt' is required");
    if (cJSON_IsString(f)) {
        if (!f->valuestring[0]) return pg_api_fail(p->err, 400, "prompt", "'prompt' is empty");
        r->prompts = calloc(1, sizeof *r->prompts);
        if (!r->prompts || !(r->prompts[0].text = strdup(f->valuestring)))
            return pg_api_fail(p->err, 500, "prompt", "out of memory");
        r->prompts[0].text_len = strlen(f->valuestring);
        r->n_prompts = 1;
        return PAGODA_OK;
    }
    if (!cJSON_IsArray(f))
        return pg_api_fail(p->err, 400, "prompt", "'prompt' must be " PROMPT_FORMS ", got %s",
                           type_name(f));
    int cnt = cJSON_GetArraySize(f);
    if (cnt == 0) return pg_api_fail(p->err, 400, "prompt", "'prompt' is empty");
    const cJSON *first = f->child;
    if (cJSON_IsNumber(first)) { /* one prompt of token ids */
        r->prompts = calloc(1, sizeof *r->prompts);
        if (!r->prompts) return pg_api_fail(p->err, 500, "prompt", "out of memory");
        r->n_prompts = 1;
        return parse_ids(p, f, "prompt", SIZE_MAX, &r->prompts[0].ids, &r->prompts[0].n_ids);
    }
    if (!cJSON_IsString(first) && !cJSON_IsArray(first))
        return pg_api_fail(p->err, 400, "prompt",
                           "'prompt' item 0 is %s; 'prompt' must be " PROMPT_FORMS,
                           type_name(first));
    bool strings = cJSON_IsString(first);
    if (cnt > PG_API_MAX_N)
        return pg_api_fail(p->err, 400, "prompt", "at most %d prompts per request, got %d",
                           PG_API_MAX_N, cnt);
    r->prompts = calloc((size_t)cnt, sizeof *r->prompts);
    if (!r->prompts) return pg_api_fail(p->err, 500, "prompt", "out of memory");
    r->n_prompts = (size_t)cnt;
    size_t i = 0;
    const cJSON *it;
    cJSON_ArrayForEach(it, f) {
        pg_api_prompt *pr = &r->prompts[i];
        if (strings != (bool)cJSON_IsString(it) || (!strings && !cJSON_IsArray(it)))
            return pg_api_fail(p->err, 400, "prompt",
                               "'prompt' item %zu is %s but item 0 is %s: a list prompt holds "
                               "only strings or only token-id lists",
                               i, type_name(it), type_name(first));
        if (strings) {
            if (!it->valuestring[0])
                return pg_api_fail(p->err, 400, "prompt", "'prompt' item %zu is empty", i);
            if (!(pr->text = strdup(it->valuestring)))
                return pg_api_fail(p->err, 500, "prompt", "out of memory");
            pr->text_len = strlen(it->valuestring);
        } else {
            if (cJSON_GetArraySize(it) == 0)
                return pg_api_fail(p->err, 400, "prompt", "'prompt' item %zu is empty", i);
            if (parse_ids(p, it, "prompt", i, &pr->ids, &pr->n_ids)) return PAGODA_ERR_INVALID_ARG;
        }
        i++;
    }
    return PAGODA_OK;
}

/* OpenAI's function names: ^[a-zA-Z0-9_-]{1,64}$ */
static bool valid_function_name(const char *s) {
    size_t n = strlen(s);
    if (n == 0 || n > 64) return false;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '_' || c == '-'))
            return false;
    }
    return true;
}

/* tools, tool_choice, parallel_tool_calls (OpenAI; vLLM's check_tool_usage). */
static pagoda_status parse_tools(const parse_ctx *p, pg_api_request *r) {
    const cJSON *tools = field(p, "tools");
    if (tools) {
        if (!cJSON_IsArray(tools))
            return pg_api_fail(p->err, 400, "tools", "'tools' must be a list");
        int i = 0;
        for (const cJSON *t = tools->child; t; t = t->next, i++) {
            const cJSON *type = cJSON_GetObjectItemCaseSensitive(t, "type");
            const cJSON *fn = cJSON_GetObjectItemCaseSensitive(t, "function");
            const cJSON *name = cJSON_GetObjectItemCaseSensitive(fn, "name");
            const cJSON *params = cJSON_GetObjectItemCaseSensitive(fn, "parameters");
            const cJSON *desc = cJSON_GetObjectItemCaseSensitive(fn, "description");
            if (!cJSON_IsObject(t) || !cJSON_IsString(type) ||
                strcmp(type->valuestring, "function") != 0)
                return pg_api_fail(p->err, 400, "tools",
                                   "tools[%d] must be {\"type\": \"function\", \"function\": "
                                   "{...}} (only function tools are supported)",
                                   i);
            if (!cJSON_IsObject(fn) || !cJSON_IsString(name))
                return pg_api_fail(p->err, 400, "tools", "tools[%d].function.name is required", i);
            if (!valid_function_name(name->valuestring))
                return pg_api_fail(p->err, 400, "tools",
                                   "tools[%d].function.name '%.80s' must be 1 to 64 letters, "
                                   "digits, underscores or dashes",
                                   i, name->valuestring);
            if (params && !cJSON_IsNull(params) && !cJSON_IsObject(params))
                return pg_api_fail(p->err, 400, "tools",
                                   "tools[%d].function.parameters must be a JSON Schema object", i);
            if (desc && !cJSON_IsNull(desc) && !cJSON_IsString(desc))
                return pg_api_fail(p->err, 400, "tools",
                                   "tools[%d].function.description must be a string", i);
        }
        r->n_tools = i;
        r->tools_json = cJSON_PrintUnformatted(tools);
        if (!r->tools_json) return pg_api_fail(p->err, 500, "tools", "out of memory");
    }
    r->tool_choice = r->n_tools ? PG_TOOL_CHOICE_AUTO : PG_TOOL_CHOICE_NONE;
    const cJSON *tc = field(p, "tool_choice");
    if (tc) {
        if (!tools)
            return pg_api_fail(p->err, 400, "tool_choice",
                               "When using `tool_choice`, `tools` must be set.");
        const cJSON *fn = cJSON_GetObjectItemCaseSensitive(tc, "function");
        const cJSON *name = cJSON_GetObjectItemCaseSensitive(fn, "name");
        const cJSON *type = cJSON_GetObjectItemCaseSensitive(tc, "type");
        if (cJSON_IsString(tc) && !strcmp(tc->valuestring, "none")) {
            r->tool_choice = PG_TOOL_CHOICE_NONE;
        } else if (cJSON_IsString(tc) && !strcmp(tc->valuestring, "auto")) {
            r->tool_choice = PG_TOOL_CHOICE_AUTO;
        } else if (cJSON_IsString(tc) && !strcmp(tc->valuestring, "required")) {
            r->tool_choice = PG_TOOL_CHOICE_REQUIRED;
        } else if (cJSON_IsObject(tc) && cJSON_IsString(type) &&
                   !strcmp(type->valuestring, "function") && cJSON_IsString(name)) {
            bool found = false;
            for (const cJSON *t = tools->child; t && !found; t = t->next)
                found = !strcmp(
                    cJSON_GetObjectItem(cJSON_GetObjectItem(t, "function"), "name")->valuestring,
                    name->valuestring);
            if (!found)
                return pg_api_fail(p->err, 400, "tool_choice",
                                   "Tool '%.80s' has not been passed in `tools`.",
                                   name->valuestring);
            r->tool_choice = PG_TOOL_CHOICE_NAMED;
            r->tool_choice_name = strdup(name->valuestring);
            if (!r->tool_choice_name) return pg_api_fail(p->err, 500, NULL, "out of memory");
        } else {
            return pg_api_fail(p->err, 400, "tool_choice",
                               "'tool_choice' must be \"none\", \"auto\", \"required\" or "
                               "{\"type\": \"function\", \"function\": {\"name\": ...}}");
        }
        if (r->tool_choice != PG_TOOL_CHOICE_NONE && r->n_tools == 0)
            return pg_api_fail(p->err, 400, "tool_choice",
                               "'tool_choice' needs at least one tool in `tools`");
    }
    r->parallel_tool_calls = true;
    pagoda_status st = get_bool(p, "parallel_tool_calls", &r->parallel_tool_calls);
    if (st) return st;
    r->include_reasoning = true;
    return get_bool(p, "include_reasoning", &r->include_reasoning);
}

static pagoda_status parse_messages(const parse_ctx *p, pg_api_request *r) {
    const cJSON *f = field(p, "messages");
    if (!f) return pg_api_fail(p->err, 400, "messages", "'messages' is required");
    if (!cJSON_IsArray(f) || cJSON_GetArraySize(f) == 0)
        return pg_api_fail(p->err, 400, "messages", "'messages' must be a non-empty list");
    size_t i = 0;
    const cJSON *m;
    cJSON_ArrayForEach(m, f) {
        if (!cJSON_IsObject(m))
            return pg_api_fail(p->err, 400, "messages", "messages[%zu] must be an object", i);
        const cJSON *role = cJSON_GetObjectItemCaseSensitive(m, "role");
        if (!cJSON_IsString(role))
            return pg_api_fail(p->err, 400, "messages", "messages[%zu].role must be a string", i);
        static const char *const roles[] = {"system", "user", "assistant", "tool", "developer"};
        bool known = false;
        for (size_t k = 0; k < sizeof roles / sizeof roles[0]; k++)
            known |= !strcmp(role->valuestring, roles[k]);
        if (!known)
            return pg_api_fail(p->err, 400, "messages",
                               "messages[%zu].role '%s' is not one of system, user, assistant, "
                               "tool, developer",
                               i, role->valuestring);
        /* OpenAI's assistant-message fields no template renders: a
         * previous audio answer, the deprecated function_call, a refusal */
        static const struct {
            const char *key, *why;
        } unrendered[] = {
            {"audio", "audio output is not supported"},
            {"function_call", "the deprecated functions API is not supported: use 'tool_calls'"},
            {"refusal", "chat templates do not render refusals: send the text as 'content'"},
        };
        for (size_t k = 0; k < sizeof unrendered / sizeof unrendered[0]; k++) {
            const cJSON *v = cJSON_GetObjectItemCaseSensitive(m, unrendered[k].key);
            if (v && !cJSON_IsNull(v))
                return pg_api_fail(p->err, 400, "messages", "messages[%zu].%s is not supported: %s",
                                   i, unrendered[k].key, unrendered[k].why);
        }
        const cJSON *content = cJSON_GetObjectItemCaseSensitive(m, "content");
        if (content && !cJSON_IsNull(content) && !cJSON_IsString(content)) {
            if (!cJSON_IsArray(content))
                return pg_api_fail(p->err, 400, "messages",
                                   "messages[%zu].content must be a string or a list of parts", i);
            const cJSON *part;
            cJSON_ArrayForEach(part, content) {
                const cJSON *type = cJSON_GetObjectItemCaseSensitive(part, "type");
                const cJSON *text = cJSON_GetObjectItemCaseSensitive(part, "text");
                if (cJSON_IsObject(part) && cJSON_IsString(type) &&
                    (!strcmp(type->valuestring, "image_url") ||
                     !strcmp(type->valuestring, "input_image") ||
                     !strcmp(type->valuestring, "image") ||
                     !strcmp(type->valuestring, "video_url") ||
                     !strcmp(type->valuestring, "input_audio") ||
                     !strcmp(type->valuestring, "audio_url")))
                    return pg_api_fail(p->err, 400, "messages",
                                       "messages[%zu].content: '%s' parts are not supported: "
                                       "pagoda runs the text part of the model (a checkpoint's "
                                       "vision or audio tower is not loaded); send text parts",
                                       i, type->valuestring);
                if (!cJSON_IsObject(part) || !cJSON_IsString(type) ||
                    strcmp(type->valuestring, "text") != 0 || !cJSON_IsString(text))
                    return pg_api_fail(p->err, 400, "messages",
                                       "messages[%zu].content parts must be {\"type\": \"text\", "
                                       "\"text\": \"...\"} (no other part types are supported)",
                                       i);
            }
        }
        i++;
    }
    r->messages_json = cJSON_PrintUnformatted(f);
    if (!r->messages_json) return pg_api_fail(p->err, 500, "messages", "out of memory");
    pagoda_status st = parse_tools(p, r);
    if (st) return st;
    const cJSON *kw = field(p, "chat_template_kwargs");
    if (kw && !cJSON_IsObject(kw))
        return pg_api_fail(p->err, 400, "chat_template_kwargs",
                           "'chat_template_kwargs' must be an object");
    if ((st = get_bool(p, "add_generation_prompt", &r->add_generation_prompt))) return st;
    /* vLLM: Literal["low", "medium", "high"]; harmony models render it, other
     * templates see it as the variable `reasoning_effort` (vLLM's template
     * kwargs), unless chat_template_kwargs sets that */
    if ((st = get_string(p, "reasoning_effort", &r->reasoning_effort))) return st;
    if (r->reasoning_effort && strcmp(r->reasoning_effort, "low") != 0 &&
        strcmp(r->reasoning_effort, "medium") != 0 && strcmp(r->reasoning_effort, "high") != 0)
        return pg_api_fail(p->err, 400, "reasoning_effort",
                           "'reasoning_effort' must be one of low, medium, high, got '%s'",
                           r->reasoning_effort);
    if (kw || r->reasoning_effort) {
        cJSON *k = kw ? cJSON_Duplicate(kw, true) : cJSON_CreateObject();
        if (k && r->reasoning_effort && !cJSON_GetObjectItemCaseSensitive(k, "reasoning_effort"))
            cJSON_AddStringToObject(k, "reasoning_effort", r->reasoning_effort);
        r->kwargs_json = k ? cJSON_PrintUnformatted(k) : NULL;
        cJSON_Delete(k);
        if (!r->kwargs_json) return pg_api_fail(p->err, 500, NULL, "out of memory");
    }
    if ((st = get_bool(p, "continue_final_message", &r->continue_final_message))) return st;
    if (!r->continue_final_message) return PAGODA_OK;
    if (r->add_generation_prompt)
        return pg_api_fail(p->err, 400, "continue_final_message",
                           "Cannot set both `continue_final_message` and `add_generation_prompt` "
                           "to True (add_generation_prompt defaults to true: send "
                           "\"add_generation_prompt\": false)");
    /* the text to continue: the content string, or the last text part (HF) */
    size_t last = i - 1;
    const cJSON *lm = cJSON_GetArrayItem(f, (int)last);
    const cJSON *role = cJSON_GetObjectItemCaseSensitive(lm, "role");
    if (strcmp(role->valuestring, "assistant") != 0)
        return pg_api_fail(p->err, 400, "continue_final_message",
                           "'continue_final_message' needs the last message to be from the "
                           "assistant, but messages[%zu] has role '%s'",
                           last, role->valuestring);
    const cJSON *content = cJSON_GetObjectItemCaseSensitive(lm, "content");
    const char *text = cJSON_IsString(content) ? content->valuestring : NULL;
    if (cJSON_IsArray(content)) {
        const cJSON *part;
        cJSON_ArrayForEach(part, content) {
            text = cJSON_GetObjectItemCaseSensitive(part, "text")->valuestring;
        }
    }
    if (!text)
        return pg_api_fail(p->err, 400, "continue_final_message",
                           "'continue_final_message' is set but messages[%zu] has no text to "
                           "continue",
                           last);
    r->final_text = strdup(text);
    return r->final_text ? PAGODA_OK : pg_api_fail(p->err, 500, "messages", "out of memory");
}

/* --------------------------------------------------------------- sampling */

static pagoda_status parse_stop(const parse_ctx *p, pg_api_request *r) {
    const cJSON *f = field(p, "stop");
    if (!f) return PAGODA_OK;
    size_t cnt = cJSON_IsString(f) ? 1 : cJSON_IsArray(f) ? (size_t)cJSON_GetArraySize(f) : 0;
    if (!cJSON_IsString(f) && !cJSON_IsArray(f))
        return pg_api_fail(p->err, 400, "stop", "'stop' must be a string or a list of strings");
    if (cnt > PG_API_MAX_STOP)
        return pg_api_fail(p->err, 400, "stop", "at most %d stop strings, got %zu", PG_API_MAX_STOP,
                           cnt);
    if (cnt == 0) return PAGODA_OK;
    r->stop = calloc(cnt, sizeof *r->stop);
    if (!r->stop) return pg_api_fail(p->err, 500, "stop", "out of memory");
    r->engine_req.sampling.n_stop = cnt;
    if (cJSON_IsString(f)) {
        if (!f->valuestring[0]) return pg_api_fail(p->err, 400, "stop", "empty stop string");
        r->stop[0] = strdup(f->valuestring);
        return r->stop[0] ? PAGODA_OK : pg_api_fail(p->err, 500, "stop", "out of memory");
    }
    size_t i = 0;
    const cJSON *it;
    cJSON_ArrayForEach(it, f) {
        if (!cJSON_IsString(it))
            return pg_api_fail(p->err, 400, "stop", "'stop' item %zu must be a string", i);
        if (!it->valuestring[0])
            return pg_api_fail(p->err, 400, "stop", "'stop' item %zu is empty", i);
        if (!(r->stop[i] = strdup(it->valuestring)))
            return pg_api_fail(p->err, 500, "stop", "out of memory");
        i++;
    }
    return PAGODA_OK;
}

static pagoda_status parse_logit_bias(const parse_ctx *p, pg_api_request *r) {
    const cJSON *f = field(p, "logit_bias");
    if (!f) return PAGODA_OK;
    if (!cJSON_IsObject(f))
        return pg_api_fail(p->err, 400, "logit_bias",
                           "'logit_bias' must be an object of token id strings to numbers");
    size_t cnt = (size_t)cJSON_GetArraySize(f);
    if (cnt == 0) return PAGODA_OK;
    r->logit_bias = calloc(cnt, sizeof *r->logit_bias);
    if (!r->logit_bias) return pg_api_fail(p->err, 500, "logit_bias", "out of memory");
    size_t i = 0;
    const cJSON *it;
    cJSON_ArrayForEach(it, f) {
        char *end = NULL;
        long tok = strtol(it->string, &end, 10);
        if (!it->string[0] || *end || tok < 0 || tok > 2147483647L)
            return pg_api_fail(p->err, 400, "logit_bias", "'logit_bias' key '%s' is not a token id",
                               it->string);
        if (!cJSON_IsNumber(it) || !isfinite(it->valuedouble) || it->valuedouble < -100 ||
            it->valuedouble > 100)
            return pg_api_fail(p->err, 400, "logit_bias",
                               "'logit_bias' value of '%s' must be a number in [-100, 100]",
                               it->string);
        r->logit_bias[i].token = (int32_t)tok;
        r->logit_bias[i].bias = (float)it->valuedouble;
        i++;
    }
    r->engine_req.sampling.logit_bias = r->logit_bias;
    r->engine_req.sampling.n_logit_bias = cnt;
    return PAGODA_OK;
}

/* seed: any int64 as vLLM (Field(ge=-2**63, le=2**63-1)), read exactly from
 * the number's text rather than through a double (which would round
 * 9223372036854775807 up out of range). pagoda_sampling.seed < 0 means
 * "random", so a negative seed maps to seed & INT64_MAX. */
static pagoda_status get_seed(const parse_ctx *p, int64_t *out) {
    const cJSON *f = field(p, "seed");
    if (!f) return PAGODA_OK;
    const char *raw = NULL;
    size_t n = 0;
    long long v = 0;
    if (!cJSON_IsNumber(f) || !pg_json_member_raw(p->body, p->len, "seed", &raw, &n) ||
        !pg_json_parse_int64(raw, n, &v)) {
        if (!cJSON_IsNumber(f))
            return pg_api_fail(p->err, 400, "seed", "'seed' must be an integer, got %s",
                               type_name(f));
        return pg_api_fail(p->err, 400, "seed",
                           "'seed' must be an integer in [-9223372036854775808, "
                           "9223372036854775807], got %.*s",
                           (int)(n < 40 ? n : 40), raw ? raw : "?");
    }
    *out = v < 0 ? (int64_t)v & INT64_MAX : (int64_t)v;
    return PAGODA_OK;
}

static pagoda_status parse_sampling(const parse_ctx *p, pg_api_request *r) {
    pagoda_sampling *s = &r->engine_req.sampling;
    pagoda_status st;
    /* max_tokens: null or absent = up to the context */
    int64_t mt = 0;
    bool has_mt = false;
    const char *mt_name = "max_tokens";
    if (r->kind == PG_API_CHAT && field(p, "max_completion_tokens"))
        mt_name = "max_completion_tokens";
    if (field(p, mt_name) && is_int(field(p, mt_name)) && field(p, mt_name)->valuedouble < 1)
        return pg_api_fail(p->err, 400, mt_name, "'%s' must be at least 1, got %.0f", mt_name,
                           field(p, mt_name)->valuedouble);
    if ((st = get_int64(p, mt_name, 1, 2147483647LL, &has_mt, &mt))) return st;
    s->max_tokens = has_mt ? (int32_t)mt : 0;

    if ((st = get_float(p, "temperature", &s->temperature))) return st;
    if (s->temperature < 0)
        return pg_api_fail(p->err, 400, "temperature", "'temperature' must be >= 0, got %g",
                           (double)s->temperature);
    if ((st = get_float(p, "top_p", &s->top_p))) return st;
    /* a positive top_p below float's range (1e-300: vLLM takes it) keeps
     * the smallest normal float, which keeps only the most likely token */
    const cJSON *tp = field(p, "top_p");
    if (tp && tp->valuedouble > 0 && s->top_p < FLT_MIN) s->top_p = FLT_MIN;
    if (!(s->top_p > 0 && s->top_p <= 1))
        return pg_api_fail(p->err, 400, "top_p", "'top_p' must be in (0, 1], got %g",
                           (double)s->top_p);
    if ((st = get_int32(p, "top_k", -1, 2147483647LL, &s->top_k))) return st;
    if ((st = get_float(p, "min_p", &s->min_p))) return st;
    if (s->min_p < 0 || s->min_p > 1)
        return pg_api_fail(p->err, 400, "min_p", "'min_p' must be in [0, 1], got %g",
                           (double)s->min_p);
    if ((st = get_float(p, "presence_penalty", &s->presence_penalty))) return st;
    if (s->presence_penalty < -2 || s->presence_penalty > 2)
        return pg_api_fail(p->err, 400, "presence_penalty",
                           "'presence_penalty' must be in [-2, 2], got %g",
                           (double)s->presence_penalty);
    if ((st = get_float(p, "frequency_penalty", &s->frequency_penalty))) return st;
    if (s->frequency_penalty < -2 || s->frequency_penalty > 2)
        return pg_api_fail(p->err, 400, "frequency_penalty",
                           "'frequency_penalty' must be in [-2, 2], got %g",
                           (double)s->frequency_penalty);
    if ((st = get_float(p, "repetition_penalty", &s->repetition_penalty))) return st;
    if (!(s->repetition_penalty > 0))
        return pg_api_fail(p->err, 400, "repetition_penalty",
                           "'repetition_penalty' must be > 0, got %g",
                           (double)s->repetition_penalty);
    if ((st = get_seed(p, &s->seed))) return st;
    if ((st = get_int32(p, "min_tokens", 0, 2147483647LL, &s->min_tokens))) return st;
    if (s->max_tokens > 0 && s->min_tokens > s->max_tokens)
        return pg_api_fail(p->err, 400, "min_tokens",
                           "'min_tokens' (%d) must not exceed max_tokens (%d)", s->min_tokens,
                           s->max_tokens);
    if ((st = get_bool(p, "ignore_eos", &s->ignore_eos))) return st;
    if ((st = get_bool(p, "skip_special_tokens", &s->skip_special_tokens))) return st;
    if ((st = get_bool(p, "include_stop_str_in_output", &s->include_stop_str_in_output))) return st;
    if ((st = parse_stop(p, r))) return st;
    s->stop = (const char *const *)r->stop;
    const cJSON *sti = field(p, "stop_token_ids");
    if (sti) {
        if (!cJSON_IsArray(sti))
            return pg_api_fail(p->err, 400, "stop_token_ids",
                               "'stop_token_ids' must be a list of token ids");
        int32_t *ids = NULL;
        size_t n = 0;
        if ((st = parse_ids(p, sti, "stop_token_ids", SIZE_MAX, &ids, &n))) return st;
        /* the model's default stop ids (generation_config) stay in force */
        size_t nd = s->n_stop_token_ids;
        if (n + nd) {
            r->stop_token_ids = malloc((n + nd) * sizeof *r->stop_token_ids);
            if (!r->stop_token_ids) {
                free(ids);
                return pg_api_fail(p->err, 500, "stop_token_ids", "out of memory");
            }
            if (nd) memcpy(r->stop_token_ids, s->stop_token_ids, nd * sizeof *ids);
            if (n) memcpy(r->stop_token_ids + nd, ids, n * sizeof *ids);
        }
        free(ids);
        s->stop_token_ids = r->stop_token_ids;
        s->n_stop_token_ids = n + nd;
    }
    return parse_logit_bias(p, r);
}

static pagoda_status parse_logprobs(const parse_ctx *p, pg_api_request *r) {
    const cJSON *f = field(p, "logprobs");
    if (r->kind == PG_API_COMPLETION) {
        if (f && (cJSON_IsBool(f) || !is_int(f)))
            return pg_api_fail(p->err, 400, "logprobs", "'logprobs' must be an integer");
        return get_int32(p, "logprobs", 0, PG_API_MAX_LOGPROBS, &r->engine_req.sampling.logprobs);
    }
    bool want = false;
    pagoda_status st = get_bool(p, "logprobs", &want);
    if (st) return st;
    int32_t top = 0;
    const cJSON *t = field(p, "top_logprobs");
    if ((st = get_int32(p, "top_logprobs", 0, PG_API_MAX_LOGPROBS, &top))) return st;
    if (t && !want)
        return pg_api_fail(p->err, 400, "top_logprobs",
                           "'top_logprobs' needs 'logprobs' set to true");
    r->engine_req.sampling.logprobs = want ? top : -1;
    return PAGODA_OK;
}

/* Known OpenAI / vLLM request fields pagoda does not implement: accepted
 * only with a value that asks for nothing (their default, given by its
 * compact JSON text; several separated by '|'), else a 400 naming the
 * field. Sources: the OpenAI API reference (Chat Completions, Completions)
 * and vLLM's protocol.py (ChatCompletionRequest, CompletionRequest).
 * Fields that only label a request (metadata: an object of strings;
 * prompt_cache_key, safety_identifier, user, request_id: strings) are
 * accepted with any value of their type. */
#define FOR_CHAT 1
#define FOR_COMPLETION 2
#define FOR_BOTH 3
static const struct unsupported_field {
    const char *name;
    int kinds;
    const char *allowed; /* JSON texts of accepted values ("" = none) */
    const char *why;
} UNSUPPORTED[] = {
    {"audio", FOR_CHAT, "", "audio output is not supported"},
    {"modalities", FOR_CHAT, "[\"text\"]", "only text output is supported"},
    {"functions", FOR_CHAT, "", "the deprecated functions API is not supported: use 'tools'"},
    {"function_call", FOR_CHAT, "",
     "the deprecated functions API is not supported: use 'tool_choice'"},
    {"prediction", FOR_CHAT, "", "predicted outputs are not supported"},
    {"web_search_options", FOR_CHAT, "", "web search is not supported"},
    {"verbosity", FOR_CHAT, "", "output verbosity is not supported"},
    {"store", FOR_CHAT, "false", "stored completions are not supported"},
    {"service_tier", FOR_BOTH, "\"auto\"|\"default\"", "there is one service tier"},
    {"prompt_cache_retention", FOR_CHAT, "\"in_memory\"|\"in-memory\"",
     "the prefix cache lives in memory only"},
    {"echo", FOR_CHAT, "false", "echo of the last message is not supported"},
    {"add_special_tokens", FOR_CHAT, "false",
     "chats are tokenized as rendered by the chat template"},
    {"documents", FOR_CHAT, "[]", "documents for the chat template are not supported"},
    {"chat_template", FOR_CHAT, "",
     "per-request chat templates are not supported: start the "
     "server with --chat-template"},
    {"mm_processor_kwargs", FOR_CHAT, "{}", "multimodal inputs are not supported"},
    {"media_io_kwargs", FOR_CHAT, "{}", "multimodal inputs are not supported"},
    {"best_of", FOR_BOTH, "1", "best_of is not supported (as in vLLM V1)"},
    {"use_beam_search", FOR_BOTH, "false", "beam search is not supported"},
    {"length_penalty", FOR_BOTH, "1", "length_penalty only applies to beam search"},
    {"spaces_between_special_tokens", FOR_BOTH, "true",
     "special tokens are always detokenized with the tokenizer's own spacing"},
    {"truncate_prompt_tokens", FOR_BOTH, "", "prompt truncation is not supported"},
    {"prompt_logprobs", FOR_BOTH, "", "prompt logprobs are not supported"},
    {"allowed_token_ids", FOR_BOTH, "", "allowed_token_ids is not supported: use logit_bias"},
    {"bad_words", FOR_BOTH, "[]", "bad_words is not supported"},
    {"logits_processors", FOR_BOTH, "[]", "custom logits processors are not supported"},
    {"return_tokens_as_token_ids", FOR_BOTH, "false", "tokens as token ids are not supported"},
    {"return_token_ids", FOR_BOTH, "false", "returning token ids is not supported"},
    {"priority", FOR_BOTH, "0", "priority scheduling is not supported"},
    {"kv_transfer_params", FOR_BOTH, "", "disaggregated prefill is not supported"},
    {"vllm_xargs", FOR_BOTH, "", "vllm_xargs is not supported"},
    {"thinking_token_budget", FOR_BOTH, "", "a thinking token budget is not supported"},
    {"max_repetition_pattern_size", FOR_BOTH, "0",
     "stopping on repeated token patterns is not supported"},
    {"min_repetition_pattern_size", FOR_BOTH, "0",
     "stopping on repeated token patterns is not supported"},
    {"repetition_min_count", FOR_BOTH, "0",
     "stopping on repeated token patterns is not supported"},
    {"prompt_embeds", FOR_COMPLETION, "", "prompt embeddings are not supported"},
};

static bool allowed_value(const cJSON *v, const char *allowed) {
    if (!allowed[0]) return false;
    char *t = cJSON_PrintUnformatted(v);
    if (!t) return false;
    bool ok = false;
    size_t n = strlen(t);
    for (const char *a = allowed; *a && !ok;) {
        const char *bar = strchr(a, '|');
        size_t k = bar ? (size_t)(bar - a) : strlen(a);
        ok = k == n && memcmp(a, t, n) == 0;
        a += k + (bar ? 1 : 0);
    }
    cJSON_free(t);
    return ok;
}

static pagoda_status check_unsupported(const parse_ctx *p, pg_api_kind kind) {
    int k = kind == PG_API_CHAT ? FOR_CHAT : FOR_COMPLETION;
    for (size_t i = 0; i < sizeof UNSUPPORTED / sizeof UNSUPPORTED[0]; i++) {
        const struct unsupported_field *u = &UNSUPPORTED[i];
        const cJSON *v = field(p, u->name);
        if (!(u->kinds & k) || !v || allowed_value(v, u->allowed)) continue;
        /* best_of equal to n asks for nothing more */
        if (!strcmp(u->name, "best_of") && is_int(v) && field(p, "n") && is_int(field(p, "n")) &&
            v->valuedouble == field(p, "n")->valuedouble)
            continue;
        return pg_api_fail(p->err, 400, u->name, "'%s' is not supported: %s%s%s", u->name, u->why,
                           u->allowed[0] ? "; accepted value: " : "", u->allowed);
    }
    /* labels: their type is checked, their value only echoed or ignored */
    const cJSON *md = field(p, "metadata");
    if (md && !cJSON_IsNull(md)) {
        bool ok = cJSON_IsObject(md);
        for (const cJSON *it = ok ? md->child : NULL; it; it = it->next)
            ok &= cJSON_IsString(it) != 0;
        if (!ok)
            return pg_api_fail(p->err, 400, "metadata",
                               "'metadata' must be an object of string values");
    }
    static const char *const labels[] = {"prompt_cache_key", "safety_identifier"};
    for (size_t i = 0; i < sizeof labels / sizeof labels[0]; i++) {
        const cJSON *v = field(p, labels[i]);
        if (v && !cJSON_IsNull(v) && !cJSON_IsString(v))
            return pg_api_fail(p->err, 400, labels[i], "'%s' must be a string", labels[i]);
    }
    const cJSON *so = field(p, "stream_options");
    const cJSON *cu = so ? cJSON_GetObjectItemCaseSensitive(so, "continuous_usage_stats") : NULL;
    if (cu && !cJSON_IsNull(cu) && !cJSON_IsFalse(cu))
        return pg_api_fail(p->err, 400, "stream_options",
                           "'stream_options.continuous_usage_stats' is not supported: usage "
                           "comes in the last event (include_usage)");
    return PAGODA_OK;
}

/* Strictly check, then parse a request body that must be a JSON object.
 * NULL with `err` set (400, or 500 when out of memory) on failure. */
static cJSON *parse_body(const char *body, size_t len, pg_api_error *err) {
    pg_json_check_result jr;
    if (pg_json_check(body, len, PG_JSON_MAX_DEPTH, &jr) != PAGODA_OK) {
        pg_api_fail(err, 400, NULL, "request body is not valid JSON: %s at byte %zu", jr.message,
                    jr.offset);
        return NULL;
    }
    if (jr.has_nul) {
        if (jr.nul_member[0])
            pg_api_fail(err, 400, jr.nul_member,
                        "'%s' contains a NUL character (\\u0000, in the string at byte %zu); "
                        "pagoda does not accept NUL in strings",
                        jr.nul_member, jr.nul_offset);
        else
            pg_api_fail(err, 400, NULL,
                        "request body contains a NUL character (\\u0000, in the string at byte "
                        "%zu); pagoda does not accept NUL in strings",
                        jr.nul_offset);
        return NULL;
    }
    size_t i = 0;
    while (i < len && (body[i] == ' ' || body[i] == '\t' || body[i] == '\n' || body[i] == '\r'))
        i++; /* the text is valid JSON: its value starts here */
    if (i == len || body[i] != '{') {
        pg_api_fail(err, 400, NULL, "request body must be a JSON object");
        return NULL;
    }
    cJSON *root = cJSON_ParseWithLength(body, len);
    if (!root) pg_api_fail(err, 500, NULL, "out of memory while parsing the request body");
    return root;
}

/* (defaults' stop_token_ids, if any, are borrowed: they must outlive the
 * request, as the engine's own defaults do.) */
pagoda_status pg_api_parse(pg_api_kind kind, const char *body, size_t len,
                           const pagoda_sampling *defaults, pg_api_request *out,
                           pg_api_error *err) {
    memset(out, 0, sizeof *out);
    out->kind = kind;
    out->n = 1;
    out->add_generation_prompt = true;
    pagoda_request *t = &out->engine_req; /* pagoda_request_defaults' non-sampling values */
    t->add_special_tokens = kind == PG_API_COMPLETION;
    t->prompt_logits_pos = -1;
    t->reasoning_start_id = t->reasoning_end_id = -1;
    t->sampling = *defaults;
    t->sampling.logit_bias = NULL;
    t->sampling.n_logit_bias = 0;
    /* defaults->stop_token_ids (engine-owned, e.g. generation_config's extra
     * EOS ids) are kept by reference unless the request adds its own */
    t->sampling.stop = NULL;
    t->sampling.n_stop = 0;
    t->sampling.logprobs = -1;

    cJSON *root = parse_body(body, len, err);
    if (!root) return PAGODA_ERR_INVALID_ARG;
    parse_ctx p = {root, err, body, len};
    pagoda_status st = PAGODA_OK;
    if ((st = check_unsupported(&p, kind))) goto done;
    if ((st = get_string(&p, "model", &out->model))) goto done;
    if ((st = get_string(&p, "user", &out->user))) goto done;
    if ((st = get_string(&p, "request_id", &out->request_id))) goto done;
    if (out->request_id && (!out->request_id[0] || strlen(out->request_id) > 96)) {
        st = pg_api_fail(err, 400, "request_id", "'request_id' must be 1 to 96 bytes");
        goto done;
    }
    /* vLLM (protocol.py check_cache_salt_support): a non-empty string */
    const cJSON *salt = field(&p, "cache_salt");
    if (salt && (!cJSON_IsString(salt) || !*salt->valuestring)) {
        st = pg_api_fail(err, 400, "cache_salt",
                         "'cache_salt' must be a non-empty string if provided, got %s",
                         cJSON_IsString(salt) ? "an empty string" : type_name(salt));
        goto done;
    }
    if ((st = get_string(&p, "cache_salt", &out->cache_salt))) goto done;
    t->cache_salt = out->cache_salt;
    if (kind == PG_API_COMPLETION) {
        if ((st = parse_prompts(&p, out))) goto done;
        if ((st = get_bool(&p, "echo", &out->echo))) goto done;
        /* vLLM: "suffix is not currently supported" (silently ignoring it
         * would return a completion that ignores the text after the gap) */
        if (field(&p, "suffix")) {
            st = pg_api_fail(err, 400, "suffix", "'suffix' is not supported");
            goto done;
        }
        if ((st = get_bool(&p, "add_special_tokens", &out->engine_req.add_special_tokens)))
            goto done;
    } else {
        if ((st = parse_messages(&p, out))) goto done;
    }
    if ((st = get_int32(&p, "n", 1, PG_API_MAX_N, &out->n))) goto done;
    if ((st = get_bool(&p, "stream", &out->stream))) goto done;
    const cJSON *so = field(&p, "stream_options");
    if (so) {
        if (!cJSON_IsObject(so)) {
            st = pg_api_fail(err, 400, "stream_options", "'stream_options' must be an object");
            goto done;
        }
        if (!out->stream) {
            st = pg_api_fail(err, 400, "stream_options",
                             "'stream_options' is only allowed when 'stream' is true");
            goto done;
        }
        parse_ctx q = {so, err, NULL, 0};
        if ((st = get_bool(&q, "include_usage", &out->include_usage))) goto done;
    }
    if ((st = parse_logprobs(&p, out))) goto done;
    if ((st = parse_sampling(&p, out))) goto done;
done:
    cJSON_Delete(root);
    if (st) pg_api_request_free(out);
    return st ? PAGODA_ERR_INVALID_ARG : PAGODA_OK;
}

void pg_api_request_free(pg_api_request *r) {
    if (!r) return;
    free(r->model);
    for (size_t i = 0; i < r->n_prompts; i++) {
        free(r->prompts[i].text);
        free(r->prompts[i].ids);
    }
    free(r->prompts);
    cJSON_free(r->messages_json);
    cJSON_free(r->tools_json);
    free(r->tool_choice_name);
    cJSON_free(r->kwargs_json);
    free(r->final_text);
    free(r->reasoning_effort);
    free(r->user);
    free(r->request_id);
    free(r->cache_salt);
    free(r->logit_bias);
    free(r->stop_token_ids);
    if (r->stop)
        for (size_t i = 0; i < r->engine_req.sampling.n_stop; i++)
            free(r->stop[i]);
    free(r->stop);
    memset(r, 0, sizeof *r);
}

pagoda_status pg_api_parse_tokenize(const char *body, size_t len, pg_api_request *out,
                                    pg_api_error *err) {
    memset(out, 0, sizeof *out);
    out->add_generation_prompt = true;
    out->engine_req.sampling.logprobs = -1;
    cJSON *root = parse_body(body, len, err);
    if (!root) return PAGODA_ERR_INVALID_ARG;
    parse_ctx p = {root, err, body, len};
    pagoda_status st;
    if ((st = get_string(&p, "model", &out->model))) goto done;
    const cJSON *prompt = field(&p, "prompt");
    if (prompt) {
        out->kind = PG_API_COMPLETION;
        out->engine_req.add_special_tokens = true;
        if (!cJSON_IsString(prompt)) {
            st = pg_api_fail(err, 400, "prompt", "'prompt' must be a string, got %s",
                             type_name(prompt));
            goto done;
        }
        out->prompts = calloc(1, sizeof *out->prompts);
        if (!out->prompts || !(out->prompts[0].text = strdup(prompt->valuestring))) {
            st = pg_api_fail(err, 500, "prompt", "out of memory");
            goto done;
        }
        out->prompts[0].text_len = strlen(prompt->valuestring);
        out->n_prompts = 1;
    } else if (field(&p, "messages")) {
        out->kind = PG_API_CHAT;
        if ((st = parse_messages(&p, out))) goto done;
    } else {
        st = pg_api_fail(err, 400, "prompt",
                         "'prompt' (a string) or 'messages' (a list) is required");
        goto done;
    }
    if ((st = get_bool(&p, "add_special_tokens", &out->engine_req.add_special_tokens))) goto done;
    st = get_bool(&p, "return_token_strs", &out->return_token_strs);
done:
    cJSON_Delete(root);
    if (st) pg_api_request_free(out);
    return st ? PAGODA_ERR_INVALID_ARG : PAGODA_OK;
}

pagoda_status pg_api_parse_detokenize(const char *body, size_t len, pg_api_request *out,
                                      pg_api_error *err) {
    memset(out, 0, sizeof *out);
    out->engine_req.sampling.logprobs = -1;
    cJSON *root = parse_body(body, len, err);
    if (!root) return PAGODA_ERR_INVALID_ARG;
    parse_ctx p = {root, err, body, len};
    pagoda_status st;
    if ((st = get_string(&p, "model", &out->model))) goto done;
    const cJSON *toks = field(&p, "tokens");
    if (!cJSON_IsArray(toks)) {
        st = pg_api_fail(err, 400, "tokens", "'tokens' (a list of token ids) is required");
        goto done;
    }
    out->prompts = calloc(1, sizeof *out->prompts);
    if (!out->prompts) {
        st = pg_api_fail(err, 500, "tokens", "out of memory");
        goto done;
    }
    out->n_prompts = 1;
    st = parse_ids(&p, toks, "tokens", SIZE_MAX, &out->prompts[0].ids, &out->prompts[0].n_ids);
done:
    cJSON_Delete(root);
    if (st) pg_api_request_free(out);
    return st ? PAGODA_ERR_INVALID_ARG : PAGODA_OK;
}

pagoda_status pg_api_check_model(const char *requested, const char *served, pg_api_error *err) {
    if (!requested || !strcmp(requested, served)) return PAGODA_OK;
    pg_api_fail(err, 404, "model", "The model `%s` does not exist (this server serves `%s`).",
                requested, served);
    err->code = "model_not_found";
    return PAGODA_ERR_NOT_FOUND;
}

pagoda_status pg_api_check_capacity(size_t n_choices, int64_t max_num_seqs, int64_t max_queue,
                                    pg_api_error *err) {
    if ((int64_t)n_choices <= max_num_seqs + max_queue) return PAGODA_OK;
    return pg_api_fail(err, 400, "n",
                       "this request needs %zu sequences (prompts x n) but the server holds at "
                       "most %lld at once (--max-num-seqs %lld running + --max-queue %lld "
                       "waiting); lower n or send fewer prompts",
                       n_choices, (long long)(max_num_seqs + max_queue), (long long)max_num_seqs,
                       (long long)max_queue);
}

static bool is_space(char c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

pagoda_status pg_api_continue_final(const char *rendered, size_t len, const char *final_text,
                                    size_t *keep, pg_api_error *err) {
    size_t fl = strlen(final_text), a = 0, b = fl;
    while (a < b && is_space(final_text[a]))
        a++;
    while (b > a && is_space(final_text[b - 1]))
        b--;
    size_t sl = b - a; /* final_text.strip() */
    size_t loc = SIZE_MAX;
    if (sl <= len)
        for (size_t k = len - sl + 1; k-- > 0;)
            if (memcmp(rendered + k, final_text + a, sl) == 0) {
                loc = k;
                break;
            }
    if (loc == SIZE_MAX)
        return pg_api_fail(err, 400, "continue_final_message",
                           "continue_final_message is set but the final message does not appear "
                           "in the chat after applying the chat template (the template changes "
                           "its text)");
    /* the template preserved the text (no leading whitespace, trailing kept) */
    if (a == 0 && loc + fl <= len && memcmp(rendered + loc, final_text, fl) == 0)
        *keep = loc + fl;
    else
        *keep = loc + sl;
    return PAGODA_OK;
}

pagoda_status pg_api_check_length(int32_t n_prompt, int32_t max_tokens, int32_t max_model_len,
                                  pg_api_error *err) {
    if (n_prompt <= 0) return pg_api_fail(err, 400, "prompt", "the prompt is empty (0 tokens)");
    if (n_prompt >= max_model_len)
        return pg_api_fail(err, 400, "prompt",
                           "This model's maximum context length is %d tokens. However, your "
                           "prompt has %d tokens, which leaves no room for output.",
                           max_model_len, n_prompt);
    if (max_tokens > 0 && (int64_t)n_prompt + max_tokens > max_model_len)
        return pg_api_fail(err, 400, "max_tokens",
                           "This model's maximum context length is %d tokens. However, you "
                           "requested %lld tokens (%d in the prompt, %d for the completion). "
                           "Please reduce the prompt or max_tokens.",
                           max_model_len, (long long)n_prompt + max_tokens, n_prompt, max_tokens);
    return PAGODA_OK;
}

/* ---------------------------------------------------------------- results */

pagoda_status pg_api_choice_append(pg_api_choice *c, const char *text, size_t len) {
    if (c->len + len + 1 > c->cap) {
        size_t cap = c->cap ? c->cap : 64;
        while (cap < c->len + len + 1)
            cap *= 2;
        char *t = realloc(c->text, cap);
        if (!t) return pg_error(PAGODA_ERR_NOMEM, "server: out of memory for %zu bytes", cap);
        c->text = t;
        c->cap = cap;
    }
    if (len) memcpy(c->text + c->len, text, len);
    c->len += len;
    c->text[c->len] = 0;
    return PAGODA_OK;
}

pagoda_status pg_api_choice_add_logprob(pg_api_choice *c, pg_api_logprob *lp) {
    if (c->n_lp == c->cap_lp) {
        size_t cap = c->cap_lp ? c->cap_lp * 2 : 16;
        pg_api_logprob *v = realloc(c->lp, cap * sizeof *v);
        if (!v) {
            pg_api_logprob_free(lp);
            return pg_error(PAGODA_ERR_NOMEM, "server: out of memory for logprobs");
        }
        c->lp = v;
        c->cap_lp = cap;
    }
    c->lp[c->n_lp++] = *lp;
    return PAGODA_OK;
}

void pg_api_logprob_free(pg_api_logprob *lp) {
    free(lp->text);
    for (int32_t i = 0; i < lp->n_top; i++)
        free(lp->top[i].text);
    free(lp->top);
}

void pg_api_choice_free(pg_api_choice *c) {
    free(c->text);
    for (size_t i = 0; i < c->n_lp; i++)
        pg_api_logprob_free(&c->lp[i]);
    free(c->lp);
    free(c->stop_reason);
    pg_hchat_free(c->harmony);
    memset(c, 0, sizeof *c);
}

char *pg_api_utf8_dup(const char *s, size_t len) {
    char *out = malloc(len * 3 + 1);
    if (!out) return NULL;
    size_t o = 0;
    const unsigned char *u = (const unsigned char *)s;
    for (size_t i = 0; i < len;) {
        size_t k = pg_utf8_seq_len(u + i, len - i);
        if (k == 0 || (k == 1 && u[i] == 0)) {
            memcpy(out + o, "\xEF\xBF\xBD", 3);
            o += 3;
            i++;
        } else {
            memcpy(out + o, u + i, k);
            o += k;
            i += k;
        }
    }
    out[o] = 0;
    return out;
}

pg_api_usage pg_api_usage_of(const pg_api_choice *choices, size_t n_choices, int32_t n_per_prompt) {
    pg_api_usage u = {0, 0, 0};
    for (size_t i = 0; i < n_choices; i++) {
        if (n_per_prompt <= 1 || i % (size_t)n_per_prompt == 0) {
            u.prompt_tokens += choices[i].n_prompt_tokens;
            u.cached_tokens += choices[i].n_cached_tokens;
        }
        u.completion_tokens += choices[i].n_output_tokens;
    }
    return u;
}

static void add_usage(cJSON *obj, const pg_api_usage *u) {
    cJSON *us = cJSON_AddObjectToObject(obj, "usage");
    cJSON_AddNumberToObject(us, "prompt_tokens", (double)u->prompt_tokens);
    cJSON_AddNumberToObject(us, "completion_tokens", (double)u->completion_tokens);
    cJSON_AddNumberToObject(us, "total_tokens", (double)(u->prompt_tokens + u->completion_tokens));
    if (u->cached_tokens > 0) {
        cJSON *d = cJSON_AddObjectToObject(us, "prompt_tokens_details");
        cJSON_AddNumberToObject(d, "cached_tokens", (double)u->cached_tokens);
    }
}

static cJSON *meta_object(const pg_api_meta *m, bool chunk) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "id", m->id);
    cJSON_AddStringToObject(o, "object",
                            m->kind == PG_API_CHAT
                                ? (chunk ? "chat.completion.chunk" : "chat.completion")
                                : "text_completion");
    cJSON_AddNumberToObject(o, "created", (double)m->created);
    cJSON_AddStringToObject(o, "model", m->model);
    return o;
}

static cJSON *bytes_array(const char *s) {
    cJSON *a = cJSON_CreateArray();
    for (const unsigned char *u = (const unsigned char *)s; *u; u++)
        cJSON_AddItemToArray(a, cJSON_CreateNumber(*u));
    return a;
}

/* logprobs object: chat {"content": [...]}, completions the legacy shape. */
static cJSON *logprobs_json(pg_api_kind kind, const pg_api_logprob *lp, size_t n,
                            size_t text_offset) {
    cJSON *o = cJSON_CreateObject();
    if (kind == PG_API_CHAT) {
        cJSON *content = cJSON_AddArrayToObject(o, "content");
        for (size_t i = 0; i < n; i++) {
            cJSON *e = cJSON_CreateObject();
            cJSON_AddStringToObject(e, "token", lp[i].text);
            cJSON_AddNumberToObject(e, "logprob", fmax((double)lp[i].logprob, -9999.0));
            cJSON_AddItemToObject(e, "bytes", bytes_array(lp[i].text));
            cJSON *top = cJSON_AddArrayToObject(e, "top_logprobs");
            for (int32_t k = 0; k < lp[i].n_top; k++) {
                cJSON *t = cJSON_CreateObject();
                cJSON_AddStringToObject(t, "token", lp[i].top[k].text);
                cJSON_AddNumberToObject(t, "logprob", fmax((double)lp[i].top[k].logprob, -9999.0));
                cJSON_AddItemToObject(t, "bytes", bytes_array(lp[i].top[k].text));
                cJSON_AddItemToArray(top, t);
            }
            cJSON_AddItemToArray(content, e);
        }
        return o;
    }
    cJSON *tokens = cJSON_AddArrayToObject(o, "tokens");
    cJSON *tlp = cJSON_AddArrayToObject(o, "token_logprobs");
    cJSON *top = cJSON_AddArrayToObject(o, "top_logprobs");
    cJSON *off = cJSON_AddArrayToObject(o, "text_offset");
    size_t pos = text_offset;
    for (size_t i = 0; i < n; i++) {
        cJSON_AddItemToArray(tokens, cJSON_CreateString(lp[i].text));
        cJSON_AddItemToArray(tlp, cJSON_CreateNumber(fmax((double)lp[i].logprob, -9999.0)));
        cJSON *d = cJSON_CreateObject();
        for (int32_t k = 0; k < lp[i].n_top; k++)
            if (!cJSON_GetObjectItemCaseSensitive(d, lp[i].top[k].text))
                cJSON_AddNumberToObject(d, lp[i].top[k].text,
                                        fmax((double)lp[i].top[k].logprob, -9999.0));
        cJSON_AddItemToArray(top, d);
        cJSON_AddItemToArray(off, cJSON_CreateNumber((double)pos));
        pos += strlen(lp[i].text);
    }
    return o;
}

static void add_finish_name(cJSON *c, const char *fr, const char *stop_reason, int32_t stop_token) {
    if (fr)
        cJSON_AddStringToObject(c, "finish_reason", fr);
    else
        cJSON_AddNullToObject(c, "finish_reason");
    if (stop_reason)
        cJSON_AddStringToObject(c, "stop_reason", stop_reason);
    else if (fr && stop_token >= 0)
        cJSON_AddNumberToObject(c, "stop_reason", stop_token);
    else
        cJSON_AddNullToObject(c, "stop_reason");
}

static void add_finish(cJSON *c, pagoda_finish_reason finish, const char *stop_reason,
                       int32_t stop_token) {
    add_finish_name(c, pagoda_finish_reason_name(finish), stop_reason,
                    finish == PAGODA_FINISH_STOP ? stop_token : -1);
}

static char *print_free(cJSON *o) {
    char *s = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return s;
}

char *pg_api_response_json(const pg_api_meta *m, const pg_api_choice *choices, size_t n_choices,
                           int32_t n_per_prompt) {
    cJSON *o = meta_object(m, false);
    cJSON *arr = cJSON_AddArrayToObject(o, "choices");
    for (size_t i = 0; i < n_choices; i++) {
        const pg_api_choice *ch = &choices[i];
        cJSON *c = cJSON_CreateObject();
        cJSON_AddNumberToObject(c, "index", (double)i);
        if (m->kind == PG_API_CHAT && ch->harmony) {
            cJSON *msg = pg_hchat_message(ch->harmony);
            if (!msg) {
                cJSON_Delete(c);
                cJSON_Delete(o);
                return NULL;
            }
            cJSON_AddItemToObject(c, "message", msg);
        } else {
            /* the whole text: a generated NUL becomes U+FFFD instead of ending it */
            char *t = pg_api_utf8_dup(ch->text ? ch->text : "", ch->text ? ch->len : 0);
            if (!t) {
                cJSON_Delete(c);
                cJSON_Delete(o);
                return NULL;
            }
            if (m->kind == PG_API_CHAT) {
                cJSON *msg = cJSON_AddObjectToObject(c, "message");
                cJSON_AddStringToObject(msg, "role", "assistant");
                cJSON_AddStringToObject(msg, "content", t);
            } else {
                cJSON_AddStringToObject(c, "text", t);
            }
            free(t);
        }
        if (ch->lp)
            cJSON_AddItemToObject(c, "logprobs",
                                  logprobs_json(m->kind, ch->lp, ch->n_lp, ch->text_offset0));
        else
            cJSON_AddNullToObject(c, "logprobs");
        if (ch->harmony)
            add_finish_name(c, pg_hchat_finish_name(ch->harmony, ch->finish), ch->stop_reason,
                            ch->finish == PAGODA_FINISH_STOP ? ch->stop_token : -1);
        else
            add_finish(c, ch->finish, ch->stop_reason, ch->stop_token);
        cJSON_AddItemToArray(arr, c);
    }
    pg_api_usage u = pg_api_usage_of(choices, n_choices, n_per_prompt);
    add_usage(o, &u);
    return print_free(o);
}

static char *sse(cJSON *o) {
    char *js = print_free(o);
    if (!js) return NULL;
    size_t n = strlen(js) + 9;
    char *out = malloc(n);
    if (out) snprintf(out, n, "data: %s\n\n", js);
    cJSON_free(js);
    return out;
}

char *pg_api_chunk_sse(const pg_api_meta *m, int32_t index, bool role_first, const char *text,
                       size_t len, const pg_api_logprob *lp, size_t n_lp, size_t text_offset,
                       pagoda_finish_reason finish, const char *stop_reason) {
    cJSON *o = meta_object(m, true);
    cJSON *arr = cJSON_AddArrayToObject(o, "choices");
    cJSON *c = cJSON_CreateObject();
    cJSON_AddNumberToObject(c, "index", index);
    /* NUL (and any invalid byte) becomes U+FFFD: cJSON strings end at NUL */
    char *t = pg_api_utf8_dup(len ? text : "", len);
    if (!t) {
        cJSON_Delete(o);
        cJSON_Delete(c);
        return NULL;
    }
    if (m->kind == PG_API_CHAT) {
        cJSON *d = cJSON_AddObjectToObject(c, "delta");
        if (role_first) cJSON_AddStringToObject(d, "role", "assistant");
        if (len || role_first) cJSON_AddStringToObject(d, "content", t);
    } else {
        cJSON_AddStringToObject(c, "text", t);
    }
    free(t);
    if (n_lp)
        cJSON_AddItemToObject(c, "logprobs", logprobs_json(m->kind, lp, n_lp, text_offset));
    else
        cJSON_AddNullToObject(c, "logprobs");
    add_finish(c, finish, stop_reason, -1);
    cJSON_AddItemToArray(arr, c);
    return sse(o);
}

char *pg_api_chat_delta_sse(const pg_api_meta *m, int32_t index, cJSON *delta,
                            const pg_api_logprob *lp, size_t n_lp, const char *finish,
                            const char *stop_reason, int32_t stop_token) {
    cJSON *o = meta_object(m, true);
    cJSON *arr = cJSON_AddArrayToObject(o, "choices");
    cJSON *c = cJSON_CreateObject();
    cJSON_AddNumberToObject(c, "index", index);
    cJSON_AddItemToObject(c, "delta", delta ? delta : cJSON_CreateObject());
    if (n_lp)
        cJSON_AddItemToObject(c, "logprobs", logprobs_json(PG_API_CHAT, lp, n_lp, 0));
    else
        cJSON_AddNullToObject(c, "logprobs");
    add_finish_name(c, finish, stop_reason, stop_token);
    cJSON_AddItemToArray(arr, c);
    return sse(o);
}

char *pg_api_usage_sse(const pg_api_meta *m, const pg_api_usage *u) {
    cJSON *o = meta_object(m, true);
    cJSON_AddArrayToObject(o, "choices");
    add_usage(o, u);
    return sse(o);
}
