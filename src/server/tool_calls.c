/* Tool choice checks and forced-call grammars (see tool_calls.h). */
#include "server/tool_calls.h"

#include "base/strbuf.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

pagoda_status pg_tools_check(const pg_api_request *r, pg_tool_format format, bool harmony,
                             bool auto_enabled, bool *parse, pg_api_error *err) {
    *parse = false;
    if (r->kind != PG_API_CHAT || !r->n_tools || r->tool_choice == PG_TOOL_CHOICE_NONE)
        return PAGODA_OK;
    if (harmony) { /* the harmony parser always reads calls (vLLM: use_harmony) */
        if (r->tool_choice != PG_TOOL_CHOICE_AUTO)
            return pg_api_fail(err, 400, "tool_choice",
                               "tool_choice \"required\" or a named function is not supported for "
                               "harmony (gpt-oss) models yet; use \"auto\"");
        *parse = true;
        return PAGODA_OK;
    }
    if (r->tool_choice == PG_TOOL_CHOICE_AUTO && (!auto_enabled || format == PG_TOOLS_NONE))
        return pg_api_fail(err, 400, "tool_choice",
                           "\"auto\" tool choice requires --enable-auto-tool-choice and "
                           "--tool-call-parser to be set%s",
                           format == PG_TOOLS_NONE
                               ? " (this model's chat template has no known tool-call syntax)"
                               : "");
    if (format == PG_TOOLS_NONE)
        return pg_api_fail(err, 400, "tool_choice",
                           "tool_choice \"required\" or a named function needs a tool-call "
                           "parser: this model's chat template has no known tool-call syntax; "
                           "start the server with --tool-call-parser "
                           "hermes|llama3_json|mistral");
    *parse = true;
    return PAGODA_OK;
}

/* An EBNF string literal of s (names are [a-zA-Z0-9_-]; the syntax is
 * fixed text): quotes, backslashes and newlines escaped. */
static void tlit(pg_strbuf *b, const char *s) {
    pg_strbuf_puts(b, "\"");
    for (; *s; s++) {
        char c[3] = {*s, 0, 0};
        if (*s == '"' || *s == '\\') c[0] = '\\', c[1] = *s;
        if (*s == '\n') c[0] = '\\', c[1] = 'n';
        pg_strbuf_puts(b, c);
    }
    pg_strbuf_puts(b, "\"");
}

pagoda_status pg_tools_grammar_spec(const pg_api_request *r, pg_tool_format format,
                                    bool mistral_v11, char **spec, pg_api_error *err) {
    *spec = NULL;
    if (format == PG_TOOLS_NONE || format == PG_TOOLS_HARMONY)
        return pg_api_fail(err, 400, "tool_choice",
                           "tool_choice \"required\" or a named function cannot be forced in the "
                           "%s format",
                           pg_tool_format_name(format));
    cJSON *tools = cJSON_Parse(r->tools_json ? r->tools_json : "[]");
    cJSON *schemas = cJSON_CreateArray();
    pg_strbuf e = {0};
    /* one alternative per allowed function: its fixed call text around
     * schema-i (the arguments) */
    pg_strbuf_puts(&e, "call ::= ");
    int i = 0, k = 0;
    for (const cJSON *t = tools ? tools->child : NULL; t; t = t->next, i++) {
        const cJSON *fn = cJSON_GetObjectItemCaseSensitive(t, "function");
        const char *name = cJSON_GetObjectItemCaseSensitive(fn, "name")->valuestring;
        if (r->tool_choice == PG_TOOL_CHOICE_NAMED && strcmp(name, r->tool_choice_name) != 0)
            continue;
        const cJSON *params = cJSON_GetObjectItemCaseSensitive(fn, "parameters");
        cJSON *sc = cJSON_IsObject(params)
                        ? cJSON_Duplicate(params, true)
                        : cJSON_Parse("{\"type\": \"object\", \"properties\": {}, "
                                      "\"additionalProperties\": false}");
        cJSON_AddItemToArray(schemas, sc);
        char pre[160], post[16];
        switch (format) {
        case PG_TOOLS_HERMES:
            snprintf(pre, sizeof pre, "<tool_call>\n{\"name\": \"%s\", \"arguments\": ", name);
            snprintf(post, sizeof post, "}\n</tool_call>");
            break;
        case PG_TOOLS_LLAMA3_JSON:
            snprintf(pre, sizeof pre, "{\"name\": \"%s\", \"parameters\": ", name);
            snprintf(post, sizeof post, "}");
            break;
        default: /* mistral */
            if (mistral_v11)
                snprintf(pre, sizeof pre, "[TOOL_CALLS]%s[ARGS]", name);
            else
                snprintf(pre, sizeof pre, "{\"name\": \"%s\", \"arguments\": ", name);
            snprintf(post, sizeof post, "%s", mistral_v11 ? "" : "}");
            break;
        }
        char ref[32];
        snprintf(ref, sizeof ref, " schema-%d ", k++);
        if (k > 1) pg_strbuf_puts(&e, " | ");
        tlit(&e, pre);
        pg_strbuf_puts(&e, ref);
        if (post[0]) tlit(&e, post);
    }
    pg_strbuf_puts(&e, "\n");
    /* several calls only for "required" with parallel_tool_calls (a named
     * choice is one call, as OpenAI's) */
    bool multi = r->parallel_tool_calls && r->tool_choice == PG_TOOL_CHOICE_REQUIRED;
    const char *sep = format == PG_TOOLS_HERMES        ? "\"\\n\" "
                      : format == PG_TOOLS_LLAMA3_JSON ? "\"; \" "
                      : mistral_v11                    ? ""
                                                       : "\", \" ";
    bool list = format == PG_TOOLS_MISTRAL && !mistral_v11;
    char root[160];
    snprintf(root, sizeof root, "root ::= %scall%s%s%s%s\n", list ? "\"[TOOL_CALLS][\" " : "",
             multi ? " ( " : "", multi ? sep : "", multi ? "call )*" : "", list ? " \"]\"" : "");
    pg_strbuf_puts(&e, root);
    cJSON *o = cJSON_CreateObject();
    pagoda_status st = PAGODA_OK;
    if (!tools || k == 0) {
        st = pg_api_fail(err, 400, "tool_choice", "no tool to call");
    } else if (e.oom || !o) {
        st = pg_api_fail(err, 500, NULL, "out of memory");
    } else {
        cJSON_AddStringToObject(o, "ebnf", pg_strbuf_cstr(&e));
        cJSON_AddItemToObject(o, "schemas", schemas);
        schemas = NULL;
        *spec = cJSON_PrintUnformatted(o);
        if (!*spec) st = pg_api_fail(err, 500, NULL, "out of memory");
    }
    cJSON_Delete(o);
    cJSON_Delete(schemas);
    cJSON_Delete(tools);
    pg_strbuf_free(&e);
    return st;
}
