/* The harmony format: rendering (OpenAI chat -> prompt text) and the
 * incremental output parser. See harmony.h for the reference. */
#include "tokenizer/harmony.h"

#include <cjson/cJSON.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---- growable string ------------------------------------------------------ */

typedef struct hbuf {
    char *p;
    size_t len, cap;
    bool oom;
} hbuf;

static void hb_addn(hbuf *b, const char *s, size_t n) {
    if (b->oom || n == 0) return;
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 64;
        while (cap < b->len + n + 1)
            cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p) {
            b->oom = true;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = 0;
}

static void hb_add(hbuf *b, const char *s) {
    hb_addn(b, s, strlen(s));
}

static void hb_free(hbuf *b) {
    free(b->p);
    *b = (hbuf){0};
}

/* Takes the buffer's string (never NULL unless out of memory). */
static char *hb_take(hbuf *b) {
    if (b->oom) {
        hb_free(b);
        return NULL;
    }
    if (!b->p) {
        b->p = calloc(1, 1);
        if (!b->p) return NULL;
    }
    char *p = b->p;
    *b = (hbuf){0};
    return p;
}

/* ---- JSON printing ------------------------------------------------------- */

/* Compact JSON as serde_json's Display prints it (the reference's
 * "default: {}" comments) - cJSON's unformatted printer is the same for
 * strings, integers, bools, null, arrays and objects. */
static void hb_json_compact(hbuf *b, const cJSON *v) {
    char *s = cJSON_PrintUnformatted(v);
    if (!s) {
        b->oom = true;
        return;
    }
    hb_add(b, s);
    cJSON_free(s);
}

/* Python json.dumps(ensure_ascii=False) string escaping. */
static void hb_py_string(hbuf *b, const char *s) {
    hb_add(b, "\"");
    for (const unsigned char *c = (const unsigned char *)s; *c; c++) {
        char esc[8];
        switch (*c) {
        case '"':
            hb_add(b, "\\\"");
            break;
        case '\\':
            hb_add(b, "\\\\");
            break;
        case '\n':
            hb_add(b, "\\n");
            break;
        case '\r':
            hb_add(b, "\\r");
            break;
        case '\t':
            hb_add(b, "\\t");
            break;
        case '\b':
            hb_add(b, "\\b");
            break;
        case '\f':
            hb_add(b, "\\f");
            break;
        default:
            if (*c < 0x20) {
                snprintf(esc, sizeof esc, "\\u%04x", *c);
                hb_add(b, esc);
            } else {
                hb_addn(b, (const char *)c, 1);
            }
        }
    }
    hb_add(b, "\"");
}

/* Python json.dumps(ensure_ascii=False) (jinja's tojson in the HF
 * template): ", " and ": " separators. */
static void hb_py_json(hbuf *b, const cJSON *v, int depth) {
    if (depth > 64) {
        hb_add(b, "null");
        return;
    }
    if (cJSON_IsString(v)) {
        hb_py_string(b, v->valuestring);
    } else if (cJSON_IsArray(v) || cJSON_IsObject(v)) {
        bool obj = cJSON_IsObject(v);
        hb_add(b, obj ? "{" : "[");
        for (const cJSON *c = v->child; c; c = c->next) {
            if (obj) {
                hb_py_string(b, c->string ? c->string : "");
                hb_add(b, ": ");
            }
            hb_py_json(b, c, depth + 1);
            if (c->next) hb_add(b, ", ");
        }
        hb_add(b, obj ? "}" : "]");
    } else if (cJSON_IsBool(v)) {
        hb_add(b, cJSON_IsTrue(v) ? "true" : "false");
    } else {
        hb_json_compact(b, v); /* numbers, null */
    }
}

/* ---- JSON schema -> TypeScript (encoding.rs json_schema_to_typescript) ---- */

static const char *jstr(const cJSON *o, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

static bool is_enum(const cJSON *schema) {
    const cJSON *e = cJSON_GetObjectItemCaseSensitive(schema, "enum");
    return cJSON_IsArray(e) && cJSON_GetArraySize(e) > 0;
}

static bool is_nullable(const cJSON *schema) {
    return cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(schema, "nullable"));
}

/* "default: ..." text for a schema's default value (no leading space). */
static void hb_default(hbuf *b, const cJSON *schema, const cJSON *def) {
    if (cJSON_IsString(def) && !is_enum(schema)) {
        hb_add(b, "default: \"");
        hb_add(b, def->valuestring);
        hb_add(b, "\"");
    } else if (cJSON_IsString(def)) {
        hb_add(b, "default: ");
        hb_add(b, def->valuestring);
    } else {
        hb_add(b, "default: ");
        hb_json_compact(b, def);
    }
}

static void ts_type(hbuf *out, const cJSON *schema, const char *indent, int depth);

/* A variant type with " | null" appended when nullable and not already there. */
static void ts_variant(hbuf *out, const cJSON *variant, const char *indent, int depth) {
    hbuf t = {0};
    ts_type(&t, variant, indent, depth + 1);
    if (t.oom) out->oom = true;
    if (t.p) hb_add(out, t.p);
    if (is_nullable(variant) && !(t.p && strstr(t.p, "null"))) hb_add(out, " | null");
    hb_free(&t);
}

static char *indent_plus(const char *indent, const char *more) {
    size_t a = strlen(indent), m = strlen(more);
    char *s = malloc(a + m + 1);
    if (!s) return NULL;
    memcpy(s, indent, a);
    memcpy(s + a, more, m + 1);
    return s;
}

static void ts_object(hbuf *out, const cJSON *schema, const char *indent, int depth) {
    const char *desc = jstr(schema, "description");
    if (desc) {
        hb_add(out, indent);
        hb_add(out, "// ");
        hb_add(out, desc);
        hb_add(out, "\n");
    }
    hb_add(out, "{\n");
    const cJSON *props = cJSON_GetObjectItemCaseSensitive(schema, "properties");
    const cJSON *req = cJSON_GetObjectItemCaseSensitive(schema, "required");
    char *ind3 = indent_plus(indent, "   "), *ind4 = indent_plus(indent, "    ");
    if (!ind3 || !ind4) out->oom = true;
    if (cJSON_IsObject(props) && ind3 && ind4) {
        for (const cJSON *val = props->child; val; val = val->next) {
            const char *key = val->string ? val->string : "";
            bool required = false;
            if (cJSON_IsArray(req))
                for (const cJSON *r = req->child; r; r = r->next)
                    if (cJSON_IsString(r) && strcmp(r->valuestring, key) == 0) required = true;
            const char *title = jstr(val, "title");
            if (title) {
                hb_add(out, indent);
                hb_add(out, "// ");
                hb_add(out, title);
                hb_add(out, "\n");
                hb_add(out, indent);
                hb_add(out, "//\n");
            }
            const cJSON *one_of = cJSON_GetObjectItemCaseSensitive(val, "oneOf");
            const char *pdesc = jstr(val, "description");
            if (!one_of && pdesc) {
                hb_add(out, indent);
                hb_add(out, "// ");
                hb_add(out, pdesc);
                hb_add(out, "\n");
            }
            const cJSON *ex = cJSON_GetObjectItemCaseSensitive(val, "examples");
            if (cJSON_IsArray(ex) && cJSON_GetArraySize(ex) > 0) {
                hb_add(out, indent);
                hb_add(out, "// Examples:\n");
                for (const cJSON *e = ex->child; e; e = e->next) {
                    if (!cJSON_IsString(e)) continue;
                    hb_add(out, indent);
                    hb_add(out, "// - \"");
                    hb_add(out, e->valuestring);
                    hb_add(out, "\"\n");
                }
            }
            const cJSON *def = cJSON_GetObjectItemCaseSensitive(val, "default");
            if (cJSON_IsArray(one_of)) {
                const char *first_desc = one_of->child ? jstr(one_of->child, "description") : NULL;
                bool skip = pdesc && first_desc && strcmp(pdesc, first_desc) == 0;
                bool above = false;
                if (!skip && pdesc) {
                    hb_add(out, indent);
                    hb_add(out, "// ");
                    hb_add(out, pdesc);
                    hb_add(out, "\n");
                    above = true;
                }
                if (def) {
                    hb_add(out, indent);
                    hb_add(out, "// ");
                    hb_default(out, val, def);
                    hb_add(out, "\n");
                }
                hb_add(out, indent);
                hb_add(out, key);
                hb_add(out, required ? ":\n" : "?:\n");
                int i = 0;
                for (const cJSON *v = one_of->child; v; v = v->next, i++) {
                    hb_add(out, indent);
                    hb_add(out, " | ");
                    ts_variant(out, v, ind3, depth);
                    hbuf c = {0};
                    const char *vdesc = jstr(v, "description");
                    if (!(i == 0 && above) && vdesc && !(pdesc && strcmp(vdesc, pdesc) == 0))
                        hb_add(&c, vdesc);
                    const cJSON *vdef = cJSON_GetObjectItemCaseSensitive(v, "default");
                    if (vdef) {
                        if (c.len) hb_add(&c, " ");
                        hb_default(&c, v, vdef);
                    }
                    if (c.oom) out->oom = true;
                    if (c.len) {
                        hb_add(out, " // ");
                        hb_add(out, c.p);
                    }
                    hb_free(&c);
                    hb_add(out, "\n");
                }
                hb_add(out, indent);
                hb_add(out, ",\n");
                continue;
            }
            hb_add(out, indent);
            hb_add(out, key);
            hb_add(out, required ? ": " : "?: ");
            ts_variant(out, val, ind4, depth);
            hb_add(out, ",");
            if (!one_of && def) {
                hb_add(out, " // ");
                hb_default(out, val, def);
            }
            hb_add(out, "\n");
        }
    }
    free(ind3);
    free(ind4);
    hb_add(out, indent);
    hb_add(out, "}");
}

static void ts_type(hbuf *out, const cJSON *schema, const char *indent, int depth) {
    if (depth > 64) { /* hostile nesting: the reference would recurse on */
        hb_add(out, "any");
        return;
    }
    const cJSON *one_of = cJSON_GetObjectItemCaseSensitive(schema, "oneOf");
    if (cJSON_IsArray(one_of)) {
        char *ind3 = indent_plus(indent, "   ");
        if (!ind3) {
            out->oom = true;
            return;
        }
        for (const cJSON *v = one_of->child; v; v = v->next) {
            hb_add(out, "\n");
            hb_add(out, indent);
            hb_add(out, " | ");
            ts_variant(out, v, ind3, depth);
            hbuf c = {0};
            const char *vdesc = jstr(v, "description");
            if (vdesc) hb_add(&c, vdesc);
            const cJSON *vdef = cJSON_GetObjectItemCaseSensitive(v, "default");
            if (vdef) {
                if (c.len) hb_add(&c, " ");
                hb_default(&c, v, vdef);
            }
            if (c.oom) out->oom = true;
            if (c.len) {
                hb_add(out, " // ");
                hb_add(out, c.p);
            }
            hb_free(&c);
        }
        free(ind3);
        return;
    }
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(schema, "type");
    if (cJSON_IsArray(type)) {
        bool any = false;
        for (const cJSON *t = type->child; t; t = t->next) {
            if (!cJSON_IsString(t)) continue;
            if (any) hb_add(out, " | ");
            hb_add(out, strcmp(t->valuestring, "integer") == 0 ? "number" : t->valuestring);
            any = true;
        }
        if (any) return;
    }
    if (!cJSON_IsString(type)) {
        hb_add(out, "any");
        return;
    }
    const char *ty = type->valuestring;
    if (strcmp(ty, "object") == 0) {
        ts_object(out, schema, indent, depth);
    } else if (strcmp(ty, "string") == 0) {
        const cJSON *e = cJSON_GetObjectItemCaseSensitive(schema, "enum");
        bool any = false;
        if (cJSON_IsArray(e))
            for (const cJSON *v = e->child; v; v = v->next) {
                if (!cJSON_IsString(v)) continue;
                if (any) hb_add(out, " | ");
                hb_add(out, "\"");
                hb_add(out, v->valuestring);
                hb_add(out, "\"");
                any = true;
            }
        if (!any) hb_add(out, "string");
    } else if (strcmp(ty, "number") == 0 || strcmp(ty, "integer") == 0) {
        hb_add(out, "number");
    } else if (strcmp(ty, "boolean") == 0) {
        hb_add(out, "boolean");
    } else if (strcmp(ty, "array") == 0) {
        const cJSON *items = cJSON_GetObjectItemCaseSensitive(schema, "items");
        if (items) {
            ts_type(out, items, indent, depth + 1);
            hb_add(out, "[]");
        } else {
            hb_add(out, "Array<any>");
        }
    } else {
        hb_add(out, "any");
    }
}

/* Appends "// line" for each line of s (Rust str::lines: split on \n,
 * a trailing \r dropped, no line for a final empty piece). */
static void hb_comment_lines(hbuf *b, const char *s) {
    while (*s) {
        const char *nl = strchr(s, '\n');
        size_t n = nl ? (size_t)(nl - s) : strlen(s);
        size_t m = (n > 0 && s[n - 1] == '\r') ? n - 1 : n;
        hb_add(b, "// ");
        hb_addn(b, s, m);
        hb_add(b, "\n");
        s += n + (nl ? 1 : 0);
    }
}

/* "## functions\n\nnamespace functions {\n\n...} // namespace functions"
 * (template_tools_section without the "# Tools" heading). */
static pagoda_status render_functions(hbuf *b, const cJSON *tools) {
    hb_add(b, "## functions\n\nnamespace functions {\n\n");
    int i = 0;
    for (const cJSON *t = tools->child; t; t = t->next, i++) {
        const cJSON *fn = cJSON_GetObjectItemCaseSensitive(t, "function");
        if (!cJSON_IsObject(fn)) fn = t;
        const char *name = jstr(fn, "name");
        if (!name || !*name)
            return pg_error(PAGODA_ERR_INVALID_ARG, "harmony: tools[%d] has no function name", i);
        const char *desc = jstr(fn, "description");
        if (desc) hb_comment_lines(b, desc);
        const cJSON *params = cJSON_GetObjectItemCaseSensitive(fn, "parameters");
        hb_add(b, "type ");
        hb_add(b, name);
        if (params && !cJSON_IsNull(params)) {
            hb_add(b, " = (_: ");
            ts_type(b, params, "", 0);
            hb_add(b, ") => any;\n\n");
        } else {
            hb_add(b, " = () => any;\n\n");
        }
    }
    hb_add(b, "} // namespace functions");
    return PAGODA_OK;
}

/* ---- OpenAI messages -> harmony messages ---------------------------------- */

typedef struct hmsg {
    const char *author;  /* role, or the tool's name ("functions.x") */
    char *recipient;     /* owned; NULL = none */
    const char *channel; /* NULL = none */
    const char *ctype;   /* NULL = none */
    char *content;       /* owned */
    const char *end;     /* end token */
} hmsg;

typedef struct hconv {
    hmsg *m;
    int n, cap;
    hbuf instructions;
    bool have_instructions;
} hconv;

static void conv_free(hconv *c) {
    for (int i = 0; i < c->n; i++) {
        free(c->m[i].recipient);
        free(c->m[i].content);
    }
    free(c->m);
    hb_free(&c->instructions);
}

static hmsg *conv_add(hconv *c, const char *author, const char *channel, char *content) {
    if (!content) return NULL;
    if (c->n == c->cap) {
        int cap = c->cap ? c->cap * 2 : 16;
        hmsg *m = realloc(c->m, (size_t)cap * sizeof *m);
        if (!m) {
            free(content);
            return NULL;
        }
        c->m = m;
        c->cap = cap;
    }
    hmsg *m = &c->m[c->n++];
    *m = (hmsg){.author = author, .channel = channel, .content = content, .end = "<|end|>"};
    return m;
}

/* Text of a message's content: a string, null (""), or text parts joined. */
static pagoda_status content_text(const cJSON *msg, int i, char **out) {
    const cJSON *c = cJSON_GetObjectItemCaseSensitive(msg, "content");
    hbuf b = {0};
    if (cJSON_IsString(c)) {
        hb_add(&b, c->valuestring);
    } else if (cJSON_IsArray(c)) {
        for (const cJSON *part = c->child; part; part = part->next) {
            const char *type = jstr(part, "type");
            const char *text = jstr(part, "text");
            if (type && strcmp(type, "text") != 0) {
                hb_free(&b);
                if (strstr(type, "image") || strstr(type, "audio") || strstr(type, "video"))
                    return pg_error(PAGODA_ERR_UNSUPPORTED,
                                    "harmony: messages[%d]: '%s' content is not supported", i,
                                    type);
                return pg_error(PAGODA_ERR_INVALID_ARG,
                                "harmony: messages[%d]: unknown content part type '%s'", i, type);
            }
            if (!text) {
                hb_free(&b);
                return pg_error(PAGODA_ERR_INVALID_ARG,
                                "harmony: messages[%d]: content part without text", i);
            }
            hb_add(&b, text);
        }
    } else if (c && !cJSON_IsNull(c)) {
        return pg_error(PAGODA_ERR_INVALID_ARG,
                        "harmony: messages[%d]: content must be a string, a list of parts or null",
                        i);
    }
    *out = hb_take(&b);
    return *out ? PAGODA_OK : pg_error(PAGODA_ERR_NOMEM, "harmony: out of memory");
}

static const char *reasoning_of(const cJSON *msg) {
    static const char *const keys[] = {"reasoning_content", "reasoning", "thinking"};
    for (int k = 0; k < 3; k++) {
        const char *s = jstr(msg, keys[k]);
        if (s && *s) return s;
    }
    return NULL;
}

static char *dupstr(const char *s) {
    size_t n = strlen(s);
    char *d = malloc(n + 1);
    if (d) memcpy(d, s, n + 1);
    return d;
}

static char *concat(const char *a, const char *b) {
    hbuf h = {0};
    hb_add(&h, a);
    hb_add(&h, b);
    return hb_take(&h);
}

/* Arguments of a tool call: the reference prints a string verbatim and an
 * object compactly; the HF template applies tojson (to the parsed object,
 * as the server's message preparation parses argument strings). */
static char *call_arguments(const cJSON *args, bool hf) {
    hbuf b = {0};
    if (!hf) {
        if (cJSON_IsString(args))
            hb_add(&b, args->valuestring);
        else if (args && !cJSON_IsNull(args))
            hb_json_compact(&b, args);
        return hb_take(&b);
    }
    if (cJSON_IsString(args)) {
        cJSON *parsed = cJSON_Parse(args->valuestring);
        if (parsed)
            hb_py_json(&b, parsed, 0);
        else
            hb_py_string(&b, args->valuestring);
        cJSON_Delete(parsed);
    } else if (args) {
        hb_py_json(&b, args, 0);
    } else {
        hb_add(&b, "null");
    }
    return hb_take(&b);
}

/* The function name of the call `id` (or the latest call) before message i. */
static const char *tool_name_for(const cJSON *messages, int upto, const char *id) {
    const char *latest = NULL;
    int i = 0;
    for (const cJSON *m = messages->child; m && i < upto; m = m->next, i++) {
        const cJSON *calls = cJSON_GetObjectItemCaseSensitive(m, "tool_calls");
        if (!cJSON_IsArray(calls)) continue;
        for (const cJSON *c = calls->child; c; c = c->next) {
            const cJSON *fn = cJSON_GetObjectItemCaseSensitive(c, "function");
            const char *name = jstr(cJSON_IsObject(fn) ? fn : c, "name");
            if (!name) continue;
            const char *cid = jstr(c, "id");
            if (id && cid && strcmp(id, cid) == 0) return name;
            latest = name;
        }
    }
    return latest;
}

#define NOMEM_RET() return pg_error(PAGODA_ERR_NOMEM, "harmony: out of memory")

static pagoda_status convert(const cJSON *messages, const pg_harmony_render_opts *o, hconv *c) {
    bool hf = o->hf_template;
    int n = cJSON_GetArraySize(messages);
    int i = 0;
    for (const cJSON *msg = messages->child; msg; msg = msg->next, i++) {
        if (!cJSON_IsObject(msg))
            return pg_error(PAGODA_ERR_INVALID_ARG, "harmony: messages[%d] is not an object", i);
        const char *role = jstr(msg, "role");
        if (!role) return pg_error(PAGODA_ERR_INVALID_ARG, "harmony: messages[%d] has no role", i);
        char *text = NULL;
        pagoda_status st = content_text(msg, i, &text);
        if (st) return st;
        if (strcmp(role, "system") == 0 || strcmp(role, "developer") == 0) {
            if (!hf || i == 0) {
                if (c->have_instructions) hb_add(&c->instructions, "\n\n");
                hb_add(&c->instructions, text);
                c->have_instructions = true;
            }
            free(text);
        } else if (strcmp(role, "user") == 0) {
            if (!conv_add(c, "user", NULL, text)) NOMEM_RET();
        } else if (strcmp(role, "assistant") == 0) {
            const char *reasoning = reasoning_of(msg);
            const cJSON *calls = cJSON_GetObjectItemCaseSensitive(msg, "tool_calls");
            bool has_calls = cJSON_IsArray(calls) && cJSON_GetArraySize(calls) > 0;
            if (hf && has_calls) {
                /* the template's analysis: content or thinking, kept only
                 * when no later assistant message without tool calls */
                bool future_final = false;
                const cJSON *f = msg->next;
                for (; f; f = f->next) {
                    const char *r = jstr(f, "role");
                    if (r && strcmp(r, "assistant") == 0 &&
                        !cJSON_GetObjectItemCaseSensitive(f, "tool_calls"))
                        future_final = true;
                }
                const char *think = jstr(msg, "thinking");
                if (*text && think && *think) {
                    free(text);
                    return pg_error(PAGODA_ERR_INVALID_ARG,
                                    "harmony: messages[%d]: cannot pass both content and thinking "
                                    "with tool calls",
                                    i);
                }
                const char *analysis = *text ? text : (think && *think ? think : NULL);
                if (analysis && !future_final &&
                    !conv_add(c, "assistant", "analysis", dupstr(analysis))) {
                    free(text);
                    NOMEM_RET();
                }
                free(text);
            } else if (has_calls) {
                if (reasoning && !conv_add(c, "assistant", "analysis", dupstr(reasoning))) {
                    free(text);
                    NOMEM_RET();
                }
                if (*text) {
                    if (!conv_add(c, "assistant", "commentary", text)) NOMEM_RET();
                } else {
                    free(text);
                }
            } else {
                bool last_training = hf && i == n - 1 && !o->add_generation_prompt;
                if (reasoning && (!hf || last_training) &&
                    !conv_add(
                        c, "assistant", "analysis",
                        dupstr(hf ? (jstr(msg, "thinking") ? jstr(msg, "thinking") : reasoning)
                                  : reasoning))) {
                    free(text);
                    NOMEM_RET();
                }
                hmsg *m = conv_add(c, "assistant", "final", text);
                if (!m) NOMEM_RET();
                if (last_training) m->end = "<|return|>";
            }
            if (has_calls) {
                int k = 0;
                for (const cJSON *call = calls->child; call; call = call->next, k++) {
                    const cJSON *fn = cJSON_GetObjectItemCaseSensitive(call, "function");
                    if (!cJSON_IsObject(fn)) fn = call;
                    const char *name = jstr(fn, "name");
                    if (!name || !*name)
                        return pg_error(PAGODA_ERR_INVALID_ARG,
                                        "harmony: messages[%d].tool_calls[%d] has no function name",
                                        i, k);
                    char *args =
                        call_arguments(cJSON_GetObjectItemCaseSensitive(fn, "arguments"), hf);
                    hmsg *m = conv_add(c, "assistant", "commentary", args);
                    if (!m) NOMEM_RET();
                    m->recipient = concat("functions.", name);
                    if (!m->recipient) NOMEM_RET();
                    m->ctype = hf ? "json" : "<|constrain|>json";
                    m->end = "<|call|>";
                }
            }
        } else if (strcmp(role, "tool") == 0) {
            const char *name = jstr(msg, "name");
            if (!name) name = tool_name_for(messages, i, jstr(msg, "tool_call_id"));
            if (!name) {
                free(text);
                return pg_error(PAGODA_ERR_INVALID_ARG,
                                "harmony: messages[%d]: tool message without a previous tool call",
                                i);
            }
            if (hf) {
                hbuf b = {0};
                hb_py_string(&b, text);
                free(text);
                text = hb_take(&b);
            }
            hmsg *m = conv_add(c, NULL, "commentary", text);
            if (!m) NOMEM_RET();
            m->recipient = dupstr("assistant");
            char *author = concat("functions.", name);
            if (!m->recipient || !author) {
                free(author);
                NOMEM_RET();
            }
            m->author = author; /* freed by pg_harmony_render */
        } else {
            free(text);
            return pg_error(PAGODA_ERR_INVALID_ARG, "harmony: messages[%d]: unknown role '%s'", i,
                            role);
        }
    }
    return c->instructions.oom ? pg_error(PAGODA_ERR_NOMEM, "harmony: out of memory") : PAGODA_OK;
}

static void render_message(hbuf *b, const hmsg *m) {
    hb_add(b, "<|start|>");
    hb_add(b, m->author);
    if (m->recipient && strcmp(m->recipient, "all") != 0) {
        hb_add(b, " to=");
        hb_add(b, m->recipient);
    }
    if (m->channel) {
        hb_add(b, "<|channel|>");
        hb_add(b, m->channel);
    }
    if (m->ctype) {
        hb_add(b, " ");
        hb_add(b, m->ctype);
    }
    hb_add(b, "<|message|>");
    hb_add(b, m->content);
    hb_add(b, m->end);
}

static bool valid_date(const char *d) {
    if (strlen(d) != 10) return false;
    for (int i = 0; i < 10; i++) {
        if (i == 4 || i == 7) {
            if (d[i] != '-') return false;
        } else if (d[i] < '0' || d[i] > '9') {
            return false;
        }
    }
    return true;
}

pagoda_status pg_harmony_render(const cJSON *messages, const cJSON *tools,
                                const pg_harmony_render_opts *opts, char **out) {
    *out = NULL;
    pg_harmony_render_opts o =
        opts ? *opts : (pg_harmony_render_opts){.add_generation_prompt = true};
    if (!cJSON_IsArray(messages))
        return pg_error(PAGODA_ERR_INVALID_ARG, "harmony: messages must be an array");
    if (tools && !cJSON_IsNull(tools) && !cJSON_IsArray(tools))
        return pg_error(PAGODA_ERR_INVALID_ARG, "harmony: tools must be an array");
    const char *effort = o.reasoning_effort ? o.reasoning_effort : "medium";
    if (strcmp(effort, "low") && strcmp(effort, "medium") && strcmp(effort, "high"))
        return pg_error(PAGODA_ERR_INVALID_ARG,
                        "harmony: reasoning effort '%s' is not low, medium or high", effort);
    char today[16];
    const char *date = o.date;
    if (!date) {
        time_t now = time(NULL);
        struct tm tm;
        gmtime_r(&now, &tm);
        strftime(today, sizeof today, "%Y-%m-%d", &tm);
        date = today;
    }
    if (*date && !valid_date(date))
        return pg_error(PAGODA_ERR_INVALID_ARG, "harmony: date '%s' is not YYYY-MM-DD", date);
    bool has_tools = tools && cJSON_IsArray(tools) && cJSON_GetArraySize(tools) > 0;

    hconv c = {0};
    pagoda_status st = convert(messages, &o, &c);
    hbuf b = {0};
    if (st) goto done;

    if (!o.no_system_message) {
        hb_add(&b, "<|start|>system<|message|>");
        hb_add(&b, o.model_identity ? o.model_identity
                                    : "You are ChatGPT, a large language model trained by OpenAI.");
        hb_add(&b, "\nKnowledge cutoff: 2024-06");
        if (*date) {
            hb_add(&b, "\nCurrent date: ");
            hb_add(&b, date);
        }
        hb_add(&b, "\n\nReasoning: ");
        hb_add(&b, effort);
        hb_add(&b, "\n\n# Valid channels: analysis, commentary, final. Channel must be included "
                   "for every message.");
        if (has_tools)
            hb_add(&b, "\nCalls to these tools must go to the commentary channel: 'functions'.");
        hb_add(&b, "<|end|>");
    }
    if (c.have_instructions && o.hf_template && !*c.instructions.p) c.have_instructions = false;
    if (c.have_instructions || has_tools) {
        hb_add(&b, "<|start|>developer<|message|>");
        if (c.have_instructions) {
            hb_add(&b, "# Instructions\n\n");
            hb_add(&b, c.instructions.p ? c.instructions.p : "");
            if (o.hf_template)
                hb_add(&b, "\n\n");
            else if (has_tools)
                hb_add(&b, "\n\n");
        }
        if (has_tools) {
            hb_add(&b, "# Tools\n\n");
            st = render_functions(&b, tools);
            if (st) goto done;
        }
        hb_add(&b, "<|end|>");
    }

    /* the reference's auto_drop_analysis: when the last assistant message
     * is final, analysis messages before the first final one are dropped */
    int first_final = -1, last_assistant = -1;
    for (int i = 0; i < c.n; i++) {
        if (c.m[i].channel && strcmp(c.m[i].channel, "final") == 0 && first_final < 0)
            first_final = i;
        if (c.m[i].author && strcmp(c.m[i].author, "assistant") == 0) last_assistant = i;
    }
    bool drop = !o.keep_analysis && !o.hf_template && last_assistant >= 0 &&
                c.m[last_assistant].channel && strcmp(c.m[last_assistant].channel, "final") == 0;
    for (int i = 0; i < c.n; i++) {
        if (drop && i < first_final && c.m[i].channel && strcmp(c.m[i].channel, "analysis") == 0)
            continue;
        render_message(&b, &c.m[i]);
    }
    if (o.add_generation_prompt) hb_add(&b, "<|start|>assistant");
    if (b.oom) st = pg_error(PAGODA_ERR_NOMEM, "harmony: out of memory");

done:
    for (int i = 0; i < c.n; i++)
        if (c.m[i].author && strncmp(c.m[i].author, "functions.", 10) == 0)
            free((char *)c.m[i].author);
    conv_free(&c);
    if (st) {
        hb_free(&b);
        return st;
    }
    *out = hb_take(&b);
    return *out ? PAGODA_OK : pg_error(PAGODA_ERR_NOMEM, "harmony: out of memory");
}

/* ---- output parser ------------------------------------------------------- */

enum {
    TOK_START,
    TOK_END,
    TOK_MESSAGE,
    TOK_CHANNEL,
    TOK_CONSTRAIN,
    TOK_RETURN,
    TOK_CALL,
    TOK_COUNT
};
static const char *const tok_text[TOK_COUNT] = {"<|start|>",   "<|end|>",       "<|message|>",
                                                "<|channel|>", "<|constrain|>", "<|return|>",
                                                "<|call|>"};
#define TOK_MAX_LEN 13
#define HEADER_MAX 512

enum { ST_HEADER, ST_CONTENT, ST_EXPECT_START };
enum { MSG_REASONING, MSG_CONTENT, MSG_TOOL };

struct pg_harmony_parser {
    pg_harmony_emit_fn emit;
    void *user;
    int state;
    bool role_implied; /* the header's role is the prompt's "assistant" */
    hbuf pend;         /* input not yet processed */
    hbuf header;
    int kind;
    char channel[64];
    char *tool_name;
    hbuf args;
    int ntools;
    int issues;
    bool oom;
};

pagoda_status pg_harmony_parser_create(pg_harmony_emit_fn fn, void *user, pg_harmony_parser **out) {
    pg_harmony_parser *p = calloc(1, sizeof *p);
    if (!p) NOMEM_RET();
    p->emit = fn;
    p->user = user;
    p->state = ST_HEADER;
    p->role_implied = true;
    *out = p;
    return PAGODA_OK;
}

void pg_harmony_parser_free(pg_harmony_parser *p) {
    if (!p) return;
    hb_free(&p->pend);
    hb_free(&p->header);
    hb_free(&p->args);
    free(p->tool_name);
    free(p);
}

int pg_harmony_parser_issues(const pg_harmony_parser *p) {
    return p->issues;
}

static void emit_ev(pg_harmony_parser *p, pg_harmony_event_kind kind, const char *text, size_t len,
                    pg_harmony_end end) {
    pg_harmony_event ev = {.kind = kind,
                           .text = text ? text : "",
                           .len = len,
                           .end = end,
                           .channel = p->channel,
                           .index = -1};
    if (kind == PG_HARMONY_TOOL_CALL_BEGIN || kind == PG_HARMONY_TOOL_ARGS ||
        kind == PG_HARMONY_TOOL_CALL_END) {
        ev.name = p->tool_name;
        ev.index = p->ntools - 1;
    }
    if (p->emit) p->emit(p->user, &ev);
}

static void issue(pg_harmony_parser *p, const char *fmt, const char *arg) {
    char msg[256];
    snprintf(msg, sizeof msg, fmt, arg ? arg : "");
    p->issues++;
    emit_ev(p, PG_HARMONY_ISSUE, msg, strlen(msg), PG_HARMONY_END_NONE);
}

static void set_channel(pg_harmony_parser *p, const char *s, size_t n) {
    if (n >= sizeof p->channel) n = sizeof p->channel - 1;
    memcpy(p->channel, s, n);
    p->channel[n] = 0;
}

static void content_text_out(pg_harmony_parser *p, const char *s, size_t n) {
    if (n == 0) return;
    if (p->kind == MSG_REASONING) {
        emit_ev(p, PG_HARMONY_REASONING, s, n, PG_HARMONY_END_NONE);
    } else if (p->kind == MSG_TOOL) {
        hb_addn(&p->args, s, n);
        if (p->args.oom) p->oom = true;
        emit_ev(p, PG_HARMONY_TOOL_ARGS, s, n, PG_HARMONY_END_NONE);
    } else {
        emit_ev(p, PG_HARMONY_CONTENT, s, n, PG_HARMONY_END_NONE);
    }
}

/* Start a content message with no channel (degraded text). */
static void begin_plain(pg_harmony_parser *p) {
    p->state = ST_CONTENT;
    p->kind = MSG_CONTENT;
    p->channel[0] = 0;
}

static void end_message(pg_harmony_parser *p, pg_harmony_end end) {
    if (p->kind == MSG_TOOL) {
        if (end != PG_HARMONY_END_CALL)
            issue(p, "tool call to '%s' not ended by <|call|>", p->tool_name);
        emit_ev(p, PG_HARMONY_TOOL_CALL_END, p->args.p ? p->args.p : "", p->args.len, end);
        free(p->tool_name);
        p->tool_name = NULL;
        hb_free(&p->args);
    }
    emit_ev(p, PG_HARMONY_MESSAGE_END, NULL, 0, end);
    p->state = ST_EXPECT_START;
    p->kind = MSG_CONTENT;
    p->channel[0] = 0;
    p->role_implied = false;
}

/* A header that never got its <|message|>: its text becomes content. */
static void degrade_header(pg_harmony_parser *p, const char *why) {
    issue(p, "%s: header text delivered as content", why);
    begin_plain(p);
    hbuf h = p->header;
    p->header = (hbuf){0};
    content_text_out(p, h.p, h.len);
    hb_free(&h);
}

static bool is_space(char c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

/* Parse the header (encoding.rs parse_header_from_string) and start the message. */
static void start_message(pg_harmony_parser *p) {
    char *h = p->header.p ? p->header.p : "";
    size_t hl = p->header.len;
    p->channel[0] = 0;
    bool have_channel = false;
    /* 1. the channel: after <|channel|> up to whitespace or '<' */
    char *cm = strstr(h, "<|channel|>");
    hbuf rest = {0};
    if (cm) {
        char *cv = cm + 11, *ce = cv;
        while (*ce && !is_space(*ce) && *ce != '<')
            ce++;
        set_channel(p, cv, (size_t)(ce - cv));
        have_channel = ce > cv;
        hb_addn(&rest, h, (size_t)(cm - h));
        hb_add(&rest, ce);
    } else {
        hb_addn(&rest, h, hl);
    }
    /* 2. a space before <|constrain|>, then split on whitespace */
    hbuf sp = {0};
    for (const char *s = rest.p ? rest.p : ""; *s; s++) {
        if (strncmp(s, "<|constrain|>", 13) == 0) hb_add(&sp, " ");
        hb_addn(&sp, s, 1);
    }
    hb_free(&rest);
    if (sp.oom) p->oom = true;
    char *parts[16];
    int np = 0;
    bool too_many = false;
    for (char *s = sp.p; s && *s;) {
        while (*s && is_space(*s))
            s++;
        if (!*s) break;
        char *e = s;
        while (*e && !is_space(*e))
            e++;
        if (*e) *e++ = 0;
        if (np < 16)
            parts[np++] = s;
        else
            too_many = true;
        s = e;
    }
    int first = 0;
    const char *author = NULL; /* non-assistant author */
    if (np > 0 && strcmp(parts[0], "assistant") == 0) {
        first = 1;
    } else if (!p->role_implied) {
        if (np == 0) {
            author = "";
        } else {
            author = parts[0];
            first = 1;
        }
    }
    const char *recipient = NULL, *ctype = NULL;
    int last = np - 1;
    if (last >= first) {
        const char *lp = parts[last--];
        if (strncmp(lp, "to=", 3) == 0) {
            recipient = lp + 3;
        } else if (last < first) {
            recipient = lp;
        } else {
            ctype = lp;
            const char *r = parts[last--];
            recipient = strncmp(r, "to=", 3) == 0 ? r + 3 : r;
        }
    }
    (void)ctype;
    if (too_many || last >= first) issue(p, "unexpected text in message header '%s'", h);
    p->state = ST_CONTENT;
    p->kind = MSG_CONTENT;
    if (author && strcmp(author, "assistant") != 0) {
        issue(p, "message from '%s', not the assistant: delivered as content", author);
    } else if (recipient && strncmp(recipient, "functions.", 10) == 0 && recipient[10]) {
        p->kind = MSG_TOOL;
        free(p->tool_name);
        p->tool_name = dupstr(recipient + 10);
        if (!p->tool_name) p->oom = true;
        hb_free(&p->args);
        p->ntools++;
        emit_ev(p, PG_HARMONY_TOOL_CALL_BEGIN, NULL, 0, PG_HARMONY_END_NONE);
    } else if (recipient && strcmp(recipient, "all") != 0 && strcmp(recipient, "assistant") != 0) {
        issue(p, "unsupported recipient '%s': delivered as content", recipient);
    } else if (!have_channel) {
        if (cm)
            issue(p, "empty channel: delivered as content", NULL);
        else
            issue(p, "message without a channel: delivered as content", NULL);
    } else if (strcmp(p->channel, "analysis") == 0) {
        p->kind = MSG_REASONING;
    } else if (strcmp(p->channel, "final") != 0 && strcmp(p->channel, "commentary") != 0) {
        issue(p, "unknown channel '%s': delivered as content", p->channel);
    }
    hb_free(&sp);
    hb_free(&p->header);
}

static void on_text(pg_harmony_parser *p, const char *s, size_t n) {
    if (n == 0) return;
    switch (p->state) {
    case ST_HEADER:
        if (p->header.len + n > HEADER_MAX) {
            degrade_header(p, "message header longer than 512 bytes");
            content_text_out(p, s, n);
        } else {
            hb_addn(&p->header, s, n);
            if (p->header.oom) p->oom = true;
        }
        break;
    case ST_CONTENT:
        content_text_out(p, s, n);
        break;
    default:
        issue(p, "text outside a message: delivered as content", NULL);
        begin_plain(p);
        content_text_out(p, s, n);
    }
}

static pg_harmony_end end_of(int tok) {
    return tok == TOK_END      ? PG_HARMONY_END_END
           : tok == TOK_RETURN ? PG_HARMONY_END_RETURN
                               : PG_HARMONY_END_CALL;
}

static void on_token(pg_harmony_parser *p, int tok) {
    switch (tok) {
    case TOK_START:
        if (p->state == ST_HEADER && (p->header.len > 0 || !p->role_implied)) {
            degrade_header(p, "<|start|> inside a message header");
            end_message(p, PG_HARMONY_END_NONE);
        } else if (p->state == ST_CONTENT) {
            issue(p, "message not ended before <|start|>", NULL);
            end_message(p, PG_HARMONY_END_NONE);
        }
        p->state = ST_HEADER;
        p->role_implied = false;
        hb_free(&p->header);
        break;
    case TOK_MESSAGE:
        if (p->state == ST_HEADER) {
            start_message(p);
        } else if (p->state == ST_CONTENT) {
            /* a control token is never text of the answer */
            issue(p, "<|message|> inside a message: dropped", NULL);
        } else {
            issue(p, "<|message|> without a header: delivered as content", NULL);
            begin_plain(p);
        }
        break;
    case TOK_CHANNEL:
    case TOK_CONSTRAIN:
        if (p->state == ST_EXPECT_START) {
            issue(p, "message without <|start|>: assistant assumed", NULL);
            p->state = ST_HEADER;
            p->role_implied = true;
            hb_free(&p->header);
        }
        if (p->state == ST_HEADER) {
            on_text(p, tok_text[tok], strlen(tok_text[tok]));
        } else {
            issue(p, "%s inside a message: dropped", tok_text[tok]);
        }
        break;
    default: /* end, return, call */
        if (p->state == ST_HEADER) {
            if (p->header.len == 0 && p->role_implied) {
                issue(p, "empty message", NULL);
            } else {
                degrade_header(p, "message ended before <|message|>");
            }
            end_message(p, end_of(tok));
        } else if (p->state == ST_CONTENT) {
            end_message(p, end_of(tok));
        } else {
            issue(p, "%s outside a message: ignored", tok_text[tok]);
        }
    }
}

/* Length of an incomplete UTF-8 sequence at the end of s[0..n) (0..3). */
static size_t utf8_tail(const char *s, size_t n) {
    for (size_t back = 1; back <= 3 && back <= n; back++) {
        unsigned char c = (unsigned char)s[n - back];
        if ((c & 0xC0) == 0x80) continue; /* continuation byte */
        size_t need = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
        return need > back ? back : 0;
    }
    return 0;
}

static pagoda_status process(pg_harmony_parser *p, bool final) {
    const char *s = p->pend.p;
    size_t n = p->pend.len, i = 0, text_start = 0, keep = n;
    while (i < n) {
        const char *lt = memchr(s + i, '<', n - i);
        if (!lt) {
            i = n;
            break;
        }
        size_t j = (size_t)(lt - s), rem = n - j;
        int tok = -1;
        bool prefix = false;
        for (int t = 0; t < TOK_COUNT; t++) {
            size_t tl = strlen(tok_text[t]);
            if (rem >= tl && memcmp(s + j, tok_text[t], tl) == 0) {
                tok = t;
                break;
            }
            if (rem < tl && memcmp(s + j, tok_text[t], rem) == 0) prefix = true;
        }
        if (tok >= 0) {
            on_text(p, s + text_start, j - text_start);
            on_token(p, tok);
            i = text_start = j + strlen(tok_text[tok]);
        } else if (prefix && !final) {
            keep = j;
            break;
        } else {
            i = j + 1;
        }
    }
    if (keep == n && !final) keep = n - utf8_tail(s + text_start, n - text_start);
    on_text(p, s + text_start, keep - text_start);
    /* keep [keep, n) */
    memmove(p->pend.p, s + keep, n - keep);
    p->pend.len = n - keep;
    p->pend.p[p->pend.len] = 0;
    if (p->oom) return pg_error(PAGODA_ERR_NOMEM, "harmony parser: out of memory");
    return PAGODA_OK;
}

pagoda_status pg_harmony_parser_feed(pg_harmony_parser *p, const char *text, size_t len) {
    if (p->oom) return pg_error(PAGODA_ERR_NOMEM, "harmony parser: out of memory");
    if (len == 0) return PAGODA_OK;
    hb_addn(&p->pend, text, len);
    if (p->pend.oom) {
        p->oom = true;
        return pg_error(PAGODA_ERR_NOMEM, "harmony parser: out of memory");
    }
    return process(p, false);
}

pagoda_status pg_harmony_parser_finish(pg_harmony_parser *p) {
    if (p->oom) return pg_error(PAGODA_ERR_NOMEM, "harmony parser: out of memory");
    if (p->pend.len) {
        pagoda_status st = process(p, true);
        if (st) return st;
    }
    if (p->state == ST_HEADER && (p->header.len > 0 || !p->role_implied)) {
        degrade_header(p, "output ended inside a message header");
        end_message(p, PG_HARMONY_END_NONE);
    } else if (p->state == ST_CONTENT) {
        end_message(p, PG_HARMONY_END_NONE);
    }
    p->state = ST_EXPECT_START;
    return p->oom ? pg_error(PAGODA_ERR_NOMEM, "harmony parser: out of memory") : PAGODA_OK;
}
