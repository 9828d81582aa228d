/* Structured-output request fields (structured.h). Field names and shapes
 * follow OpenAI's response_format and vLLM's StructuredOutputsParams /
 * guided_* request fields. */
#define _GNU_SOURCE /* memmem */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/structured.h"

typedef struct want {
    pagoda_grammar_kind kind;
    char *spec; /* malloc'ed; NULL for json_object */
    char field[64];
    int count;
} want;

static pagoda_status set(want *w, pagoda_grammar_kind kind, const cJSON *spec_json,
                         const char *spec_text, const char *field, pg_api_error *err) {
    w->count++;
    if (w->count > 1)
        return pg_api_fail(err, 400, field,
                           "only one structured-output constraint may be given ('%s' and '%s')",
                           w->field, field);
    snprintf(w->field, sizeof w->field, "%s", field);
    w->kind = kind;
    if (spec_json) {
        w->spec = cJSON_PrintUnformatted(spec_json);
        if (!w->spec) return pg_api_fail(err, 500, NULL, "out of memory");
    } else if (spec_text) {
        w->spec = strdup(spec_text);
        if (!w->spec) return pg_api_fail(err, 500, NULL, "out of memory");
    }
    return PAGODA_OK;
}

/* A schema given as an object, a boolean, or a string holding JSON. */
static pagoda_status schema(want *w, const cJSON *v, const char *field, pg_api_error *err) {
    if (cJSON_IsObject(v) || cJSON_IsBool(v))
        return set(w, PAGODA_GRAMMAR_JSON_SCHEMA, v, NULL, field, err);
    if (cJSON_IsString(v))
        return set(w, PAGODA_GRAMMAR_JSON_SCHEMA, NULL, v->valuestring, field, err);
    return pg_api_fail(err, 400, field, "'%s' must be a JSON Schema object (or its JSON text)",
                       field);
}

static pagoda_status string_field(want *w, pagoda_grammar_kind kind, const cJSON *v,
                                  const char *field, pg_api_error *err) {
    if (!cJSON_IsString(v)) return pg_api_fail(err, 400, field, "'%s' must be a string", field);
    return set(w, kind, NULL, v->valuestring, field, err);
}

static pagoda_status choice_field(want *w, const cJSON *v, const char *field, pg_api_error *err) {
    if (!cJSON_IsArray(v) || cJSON_GetArraySize(v) == 0)
        return pg_api_fail(err, 400, field, "'%s' must be a non-empty list of strings", field);
    for (const cJSON *x = v->child; x; x = x->next)
        if (!cJSON_IsString(x))
            return pg_api_fail(err, 400, field, "'%s' must be a non-empty list of strings", field);
    return set(w, PAGODA_GRAMMAR_CHOICE, v, NULL, field, err);
}

static pagoda_status response_format(want *w, const cJSON *rf, pg_api_error *err) {
    if (!cJSON_IsObject(rf))
        return pg_api_fail(err, 400, "response_format", "'response_format' must be an object");
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(rf, "type");
    if (!cJSON_IsString(type))
        return pg_api_fail(err, 400, "response_format", "'response_format.type' must be a string");
    const char *t = type->valuestring;
    if (!strcmp(t, "text")) return PAGODA_OK;
    if (!strcmp(t, "json_object"))
        return set(w, PAGODA_GRAMMAR_JSON_OBJECT, NULL, NULL, "response_format", err);
    if (!strcmp(t, "json_schema")) {
        const cJSON *js = cJSON_GetObjectItemCaseSensitive(rf, "json_schema");
        if (!cJSON_IsObject(js))
            return pg_api_fail(err, 400, "response_format",
                               "'response_format.json_schema' must be an object");
        const cJSON *sc = cJSON_GetObjectItemCaseSensitive(js, "schema");
        if (!sc)
            return pg_api_fail(err, 400, "response_format",
                               "'response_format.json_schema.schema' is required");
        return schema(w, sc, "response_format", err);
    }
    return pg_api_fail(
        err, 400, "response_format",
        "response_format type '%s' is not supported (text, json_object, json_schema)", t);
}

static pagoda_status structured_outputs(want *w, const cJSON *so, pg_api_error *err) {
    if (!cJSON_IsObject(so))
        return pg_api_fail(err, 400, "structured_outputs",
                           "'structured_outputs' must be an object");
    pagoda_status st = PAGODA_OK;
    for (const cJSON *k = so->child; k && !st; k = k->next) {
        const char *n = k->string;
        if (cJSON_IsNull(k)) continue;
        if (!strcmp(n, "json"))
            st = schema(w, k, "structured_outputs.json", err);
        else if (!strcmp(n, "regex"))
            st = string_field(w, PAGODA_GRAMMAR_REGEX, k, "structured_outputs.regex", err);
        else if (!strcmp(n, "choice"))
            st = choice_field(w, k, "structured_outputs.choice", err);
        else if (!strcmp(n, "grammar"))
            st = string_field(w, PAGODA_GRAMMAR_EBNF, k, "structured_outputs.grammar", err);
        else if (!strcmp(n, "json_object")) {
            if (!cJSON_IsBool(k))
                st = pg_api_fail(err, 400, "structured_outputs",
                                 "'structured_outputs.json_object' must be a boolean");
            else if (cJSON_IsTrue(k))
                st = set(w, PAGODA_GRAMMAR_JSON_OBJECT, NULL, NULL,
                         "structured_outputs.json_object", err);
        } else if (!strcmp(n, "disable_fallback") || !strcmp(n, "disable_additional_properties")) {
            continue; /* no fallback exists; additionalProperties is already strict */
        } else {
            st = pg_api_fail(err, 400, "structured_outputs",
                             "'structured_outputs.%s' is not supported", n);
        }
    }
    return st;
}

pagoda_status pg_structured_from_body(pagoda_engine *e, const char *body, size_t len, bool harmony,
                                      pagoda_grammar **out, pg_api_error *err) {
    *out = NULL;
    /* most requests carry no constraint: skip the second parse */
    static const char *const keys[] = {"response_format", "structured_outputs", "guided_"};
    bool any = false;
    for (size_t k = 0; k < sizeof keys / sizeof *keys && !any; k++)
        any = memmem(body, len, keys[k], strlen(keys[k])) != NULL;
    if (!any) return PAGODA_OK;
    cJSON *o = cJSON_ParseWithLength(body, len);
    if (!cJSON_IsObject(o)) {
        cJSON_Delete(o);
        return PAGODA_OK; /* pg_api_parse reported it */
    }
    want w = {0};
    pagoda_status st = PAGODA_OK;
    const cJSON *v;
    if ((v = cJSON_GetObjectItemCaseSensitive(o, "response_format")) && !cJSON_IsNull(v))
        st = response_format(&w, v, err);
    if (!st && (v = cJSON_GetObjectItemCaseSensitive(o, "structured_outputs")) && !cJSON_IsNull(v))
        st = structured_outputs(&w, v, err);
    if (!st && (v = cJSON_GetObjectItemCaseSensitive(o, "guided_json")) && !cJSON_IsNull(v))
        st = schema(&w, v, "guided_json", err);
    if (!st && (v = cJSON_GetObjectItemCaseSensitive(o, "guided_regex")) && !cJSON_IsNull(v))
        st = string_field(&w, PAGODA_GRAMMAR_REGEX, v, "guided_regex", err);
    if (!st && (v = cJSON_GetObjectItemCaseSensitive(o, "guided_choice")) && !cJSON_IsNull(v))
        st = choice_field(&w, v, "guided_choice", err);
    if (!st && (v = cJSON_GetObjectItemCaseSensitive(o, "guided_grammar")) && !cJSON_IsNull(v))
        st = string_field(&w, PAGODA_GRAMMAR_EBNF, v, "guided_grammar", err);
    if (!st && (v = cJSON_GetObjectItemCaseSensitive(o, "guided_whitespace_pattern")) &&
        !cJSON_IsNull(v))
        st = pg_api_fail(err, 400, "guided_whitespace_pattern",
                         "'guided_whitespace_pattern' is not supported");
    if (!st && (v = cJSON_GetObjectItemCaseSensitive(o, "guided_json_object")) && cJSON_IsTrue(v))
        st = set(&w, PAGODA_GRAMMAR_JSON_OBJECT, NULL, NULL, "guided_json_object", err);
    if (!st && w.count && harmony)
        st = pg_api_fail(err, 400, w.field,
                         "structured outputs ('%s') are not supported for this harmony-format "
                         "(gpt-oss) model: its tokenizer cannot spell the final channel's head",
                         w.field);
    if (!st && w.count) {
        pagoda_status cs =
            pagoda_grammar_compile(e, w.kind, w.spec, w.spec ? strlen(w.spec) : 0, out);
        if (cs != PAGODA_OK)
            st = pg_api_fail(err, cs == PAGODA_ERR_NOMEM ? 500 : 400, w.field, "'%s': %s", w.field,
                             pagoda_last_error());
    }
    free(w.spec);
    cJSON_Delete(o);
    return st;
}
