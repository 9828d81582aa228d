/* Reasoning and tool-call parsers of plain-text chat output (see
 * output_parser.h). */
#include "server/output_parser.h"

#include "base/strbuf.h"

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

#define THINK_OPEN "<think>"
#define THINK_CLOSE "</think>"
#define HERMES_OPEN "<tool_call>"
#define HERMES_CLOSE "</tool_call>"
#define MISTRAL_OPEN "[TOOL_CALLS]"
#define MISTRAL_ARGS "[ARGS]"
#define PYTHON_TAG "<|python_tag|>"
#define MAX_NAME 256 /* bytes of a v11 Mistral function name before we give up */

typedef enum pstate {
    ST_THINK_START, /* output start: an opening <think> may come */
    ST_REASON,      /* inside <think> */
    ST_CONTENT,     /* content; a call may start */
    ST_CALL,        /* inside a call's text */
    ST_AFTER_L3,    /* llama3_json: after a call, ";" and another may follow */
    ST_PLAIN,       /* content to the end (llama3_json output that is no call) */
} pstate;

struct pg_oparse {
    pg_oparse_opts o;
    pg_harmony_emit_fn emit;
    void *user;
    pstate st;
    pg_strbuf buf; /* text not processed yet */
    pg_strbuf ws;  /* trailing whitespace of content, held back */
    int n_calls, issues;
    bool strip; /* drop whitespace before the content after </think> */
    bool finished, oom;
    /* a call whose arguments are being streamed (see stream_open) */
    bool streaming, args_done, in_str, esc;
    bool v11; /* the streamed call is mistral's NAME[ARGS]{...} */
    int depth;
    pg_strbuf args; /* the compacted arguments sent so far */
    /* mistral's [TOOL_CALLS][...] list once its first item streamed:
     * LIST_ITEM an item comes next, LIST_SEP a ',' or ']' */
    enum { LIST_NONE = 0, LIST_ITEM, LIST_SEP } list;
};

static bool is_ws(char c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

static size_t skip_ws(const char *s, size_t n, size_t i) {
    while (i < n && is_ws(s[i]))
        i++;
    return i;
}

static const char *find(const char *s, size_t n, const char *tag) {
    size_t t = strlen(tag);
    for (size_t i = 0; i + t <= n; i++)
        if (s[i] == tag[0] && memcmp(s + i, tag, t) == 0) return s + i;
    return NULL;
}

/* Length of the longest suffix of s[0..n) that is a proper prefix of tag. */
static size_t partial_suffix(const char *s, size_t n, const char *tag) {
    size_t t = strlen(tag);
    for (size_t k = t - 1 < n ? t - 1 : n; k > 0; k--)
        if (memcmp(s + n - k, tag, k) == 0) return k;
    return 0;
}

/* s[0..n) is a proper prefix of tag. */
static bool is_prefix_of(const char *s, size_t n, const char *tag) {
    return n < strlen(tag) && memcmp(s, tag, n) == 0;
}

static void emit_text(pg_oparse *p, pg_harmony_event_kind kind, const char *s, size_t n) {
    if (!n) return;
    pg_harmony_event ev = {.kind = kind, .text = s, .len = n, .channel = ""};
    p->emit(p->user, &ev);
}

static void issue(pg_oparse *p, const char *what) {
    p->issues++;
    emit_text(p, PG_HARMONY_ISSUE, what, strlen(what));
}

/* Content; with tools, trailing whitespace waits for more content (dropped
 * when a call comes next or ends the output). */
static void content(pg_oparse *p, const char *s, size_t n) {
    if (!n) return;
    if (p->o.tools == PG_TOOLS_NONE) {
        emit_text(p, PG_HARMONY_CONTENT, s, n);
        return;
    }
    size_t e = n;
    while (e > 0 && is_ws(s[e - 1]))
        e--;
    if (e > 0) {
        emit_text(p, PG_HARMONY_CONTENT, p->ws.p, p->ws.len);
        p->ws.len = 0;
        emit_text(p, PG_HARMONY_CONTENT, s, e);
    }
    pg_strbuf_add(&p->ws, s + e, n - e);
}

static void emit_call(pg_oparse *p, const char *name, const char *args) {
    p->ws.len = 0;
    int idx = p->n_calls++;
    pg_harmony_event ev = {
        .kind = PG_HARMONY_TOOL_CALL_BEGIN, .name = name, .index = idx, .channel = ""};
    p->emit(p->user, &ev);
    ev.kind = PG_HARMONY_TOOL_ARGS;
    ev.text = args;
    ev.len = strlen(args);
    if (ev.len) p->emit(p->user, &ev);
    ev.kind = PG_HARMONY_TOOL_CALL_END;
    ev.end = PG_HARMONY_END_CALL;
    p->emit(p->user, &ev);
}

/* The arguments text of a call: an object printed compactly (vLLM's
 * json.dumps), a string taken as given; absent: "{}". NULL: not valid. */
static char *args_text(const cJSON *a) {
    if (!a) return strdup("{}");
    if (cJSON_IsObject(a)) return cJSON_PrintUnformatted(a);
    if (cJSON_IsString(a)) {
        cJSON *o = cJSON_Parse(a->valuestring);
        bool ok = cJSON_IsObject(o);
        cJSON_Delete(o);
        return ok ? strdup(a->valuestring) : NULL;
    }
    return NULL;
}

/* One {"name", args_key...} object as a call; false when it is not one. */
static bool object_call(pg_oparse *p, const cJSON *o, bool llama) {
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(o, "name");
    if (!cJSON_IsObject(o) || !cJSON_IsString(name) || !name->valuestring[0]) return false;
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(o, "arguments");
    if (llama && !a) a = cJSON_GetObjectItemCaseSensitive(o, "parameters");
    if (llama && !a) return false;
    char *args = args_text(a);
    if (!args) return false;
    emit_call(p, name->valuestring, args);
    cJSON_free(args);
    return true;
}

/* Objects of `v` (one object, or a list of them for mistral) as calls, all
 * or none (checked first). */
static bool value_calls(pg_oparse *p, const cJSON *v, bool llama) {
    if (cJSON_IsArray(v)) {
        if (!cJSON_GetArraySize(v)) return false;
        for (const cJSON *it = v->child; it; it = it->next) {
            const cJSON *name = cJSON_GetObjectItemCaseSensitive(it, "name");
            const cJSON *a = cJSON_GetObjectItemCaseSensitive(it, "arguments");
            if (!cJSON_IsObject(it) || !cJSON_IsString(name) || !name->valuestring[0] ||
                (a && !cJSON_IsObject(a) && !cJSON_IsString(a)))
                return false;
        }
        for (const cJSON *it = v->child; it; it = it->next)
            if (!object_call(p, it, llama)) return false;
        return true;
    }
    return object_call(p, v, llama);
}

/* End of the JSON object/array starting at s[0] ('{' or '['): its length,
 * 0 while incomplete. Strings and escapes are skipped; the value is parsed
 * (and so validated) afterwards. */
static size_t json_extent(const char *s, size_t n) {
    int depth = 0;
    bool str = false, esc = false;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (str) {
            if (esc)
                esc = false;
            else if (c == '\\')
                esc = true;
            else if (c == '"')
                str = false;
            continue;
        }
        if (c == '"')
            str = true;
        else if (c == '{' || c == '[')
            depth++;
        else if ((c == '}' || c == ']') && --depth == 0)
            return i + 1;
    }
    return 0;
}

/* s[0..n) as one JSON value with nothing but whitespace around it (as
 * Python's json.loads, which vLLM's parsers use), else NULL. */
static cJSON *parse_n(const char *s, size_t n) {
    const char *end = NULL;
    cJSON *v = cJSON_ParseWithLengthOpts(s, n, &end, false);
    if (v && skip_ws(s, n, (size_t)(end - s)) != n) {
        cJSON_Delete(v);
        return NULL;
    }
    return v;
}

/* Malformed call text: content (all of `raw`), and an issue. */
static void degrade(pg_oparse *p, const char *prefix, const char *raw, size_t n, const char *why) {
    issue(p, why);
    if (prefix) content(p, prefix, strlen(prefix));
    content(p, raw, n);
}

/* Does s[0..n) start a call object as the models write it,
 * `{"name": "NAME", "arguments": {` (any whitespace between; llama: the key
 * may be "parameters" too)? 1: yes, with the name at s[*name_at..+*name_len)
 * and the arguments' '{' at s[*args_at]; 0: not (or not in this order: the
 * whole call is then parsed at its end); -1: s is a prefix of one, more
 * text decides. */
static int call_head(const char *s, size_t n, bool llama, size_t *name_at, size_t *name_len,
                     size_t *args_at) {
    static const char *const parts[] = {"{", "\"name\"",      ":", "\"", NULL,
                                        ",", "\"arguments\"", ":", "{"};
    size_t i = 0;
    for (size_t k = 0; k < sizeof parts / sizeof parts[0]; k++) {
        i = skip_ws(s, n, i);
        if (k == 6 && llama) { /* "arguments" or "parameters" */
            static const char *const keys[] = {"\"arguments\"", "\"parameters\""};
            bool partial = false, hit = false;
            for (size_t q = 0; q < 2 && !hit; q++) {
                size_t t = strlen(keys[q]);
                if (n - i < t)
                    partial |= is_prefix_of(s + i, n - i, keys[q]);
                else if (!memcmp(s + i, keys[q], t))
                    hit = true, i += t;
            }
            if (hit) continue;
            return partial ? -1 : 0;
        }
        if (k == 4) { /* the name, a plain string (no escapes) */
            *name_at = i;
            while (i < n && s[i] != '"' && s[i] != '\\' && (unsigned char)s[i] >= 0x20)
                i++;
            if (i == n) return i - *name_at > MAX_NAME ? 0 : -1;
            if (s[i] != '"' || i == *name_at || i - *name_at > MAX_NAME) return 0;
            *name_len = i - *name_at;
            i++;
            continue;
        }
        size_t t = strlen(parts[k]);
        if (n - i < t) return is_prefix_of(s + i, n - i, parts[k]) ? -1 : 0;
        if (memcmp(s + i, parts[k], t)) return 0;
        if (k == 8) {
            *args_at = i;
            return 1;
        }
        i += t;
    }
    return 0;
}

/* Send the arguments text of a streamed hermes call from buf, compacted
 * (whitespace outside strings dropped, as the whole-call path prints them),
 * up to the end of the arguments object; consumed as sent. */
static void stream_args(pg_oparse *p) {
    pg_strbuf *b = &p->buf;
    pg_strbuf out = {0};
    size_t i = 0;
    for (; i < b->len && !p->args_done; i++) {
        char c = b->p[i];
        if (p->in_str) {
            if (p->esc)
                p->esc = false;
            else if (c == '\\')
                p->esc = true;
            else if (c == '"')
                p->in_str = false;
        } else if (is_ws(c)) {
            continue;
        } else if (c == '"') {
            p->in_str = true;
        } else if (c == '{' || c == '[') {
            p->depth++;
        } else if ((c == '}' || c == ']') && --p->depth == 0) {
            p->args_done = true;
        }
        pg_strbuf_add(&out, &c, 1);
    }
    if (out.len) {
        pg_harmony_event ev = {.kind = PG_HARMONY_TOOL_ARGS,
                               .text = out.p,
                               .len = out.len,
                               .index = p->n_calls - 1,
                               .channel = ""};
        p->emit(p->user, &ev);
        pg_strbuf_add(&p->args, out.p, out.len);
    }
    if (out.oom) p->oom = true;
    pg_strbuf_free(&out);
    pg_strbuf_consume(b, i);
}

/* Start streaming a call (OpenAI's deltas: the call's index, id, type and
 * name first, then pieces of function.arguments, as vLLM's streaming
 * parsers do): its name is buf[name_at..+name_len), its arguments' '{' at
 * buf[args_at]; buf is consumed up to that '{'. */
static void stream_open(pg_oparse *p, size_t name_at, size_t name_len, size_t args_at) {
    pg_strbuf *b = &p->buf;
    char *name = strndup(b->p + name_at, name_len);
    if (!name) {
        p->oom = true;
        return;
    }
    p->ws.len = 0;
    pg_harmony_event ev = {
        .kind = PG_HARMONY_TOOL_CALL_BEGIN, .name = name, .index = p->n_calls++, .channel = ""};
    p->emit(p->user, &ev);
    free(name);
    pg_strbuf_consume(b, args_at);
    p->streaming = true;
    p->args_done = p->in_str = p->esc = p->v11 = false;
    p->depth = 0;
    p->args.len = 0;
}

/* Stream the arguments that arrived; true once they are complete (or the
 * output ended: final). */
static bool stream_more(pg_oparse *p, bool final) {
    if (!p->args_done) stream_args(p);
    return p->args_done || final;
}

/* End the streamed call. A streamed call cannot be taken back: `ok` false
 * (its text did not end as a valid call) adds an ISSUE, the call stays. */
static void stream_close(pg_oparse *p, bool ok, const char *why) {
    pg_harmony_event ev = {.kind = PG_HARMONY_TOOL_CALL_END,
                           .index = p->n_calls - 1,
                           .end = PG_HARMONY_END_CALL,
                           .channel = ""};
    p->emit(p->user, &ev);
    p->streaming = false;
    if (!ok) issue(p, why);
}

/* The streamed arguments are a JSON object. */
static bool args_valid(const pg_oparse *p) {
    cJSON *v = cJSON_ParseWithLength(p->args.p, p->args.len);
    bool ok = cJSON_IsObject(v);
    cJSON_Delete(v);
    return ok;
}

/* A hermes call streamed as it is generated once its text starts the usual
 * way (call_head). When the text after its arguments is not `}` and
 * </tool_call> (or the output ends inside the arguments), the call stays,
 * with an ISSUE, and that text is content.
 * Returns 0 when the call is not streamed (the whole-call path takes it at
 * its end), 1 when it ended, 2 when more text is needed. */
static int stream_hermes(pg_oparse *p, bool final) {
    pg_strbuf *b = &p->buf;
    if (!p->streaming) {
        size_t name_at = 0, name_len = 0, args_at = 0;
        int h = call_head(b->p, b->len, false, &name_at, &name_len, &args_at);
        if (h <= 0) return 0; /* not streamable (yet): the whole-call path decides */
        stream_open(p, name_at, name_len, args_at);
        if (p->oom) return 1;
    }
    if (!stream_more(p, final)) return 2;
    /* after the arguments: `}` then </tool_call> (or the end of output) */
    const char *e = find(b->p, b->len, HERMES_CLOSE);
    if (!e && !final) return 2;
    size_t body = e ? (size_t)(e - b->p) : b->len;
    size_t i = skip_ws(b->p, body, 0);
    bool ok = p->args_done && i < body && b->p[i] == '}' && skip_ws(b->p, body, i + 1) == body &&
              args_valid(p);
    stream_close(p, ok, "hermes: a streamed <tool_call> did not end as a valid call");
    if (!ok) {
        if (i < body && b->p[i] == '}' && p->args_done) i++; /* the call's own '}' */
        content(p, b->p + i, body - i);
        if (e) content(p, HERMES_CLOSE, strlen(HERMES_CLOSE));
    }
    pg_strbuf_consume(b, e ? body + strlen(HERMES_CLOSE) : body);
    p->st = ST_CONTENT;
    return 1;
}

/* The end of a streamed llama3_json call or mistral list item: `}` after
 * the arguments; then state `next` (llama: ST_AFTER_L3; mistral: LIST_SEP).
 * Otherwise the call stays with an ISSUE and the rest of the output is
 * content. False when more text is needed. */
static bool stream_object_tail(pg_oparse *p, bool final, const char *why) {
    pg_strbuf *b = &p->buf;
    if (!stream_more(p, final)) return false;
    size_t k = skip_ws(b->p, b->len, 0);
    if (k == b->len && !final) return false;
    bool closed = p->args_done && k < b->len && b->p[k] == '}';
    bool ok = closed && args_valid(p);
    stream_close(p, ok, why);
    if (closed) k++; /* the call's own '}' */
    if (ok) {
        pg_strbuf_consume(b, k);
        if (p->o.tools == PG_TOOLS_LLAMA3_JSON)
            p->st = ST_AFTER_L3;
        else
            p->list = LIST_SEP;
        return true;
    }
    content(p, b->p + k, b->len - k);
    pg_strbuf_consume(b, b->len);
    p->list = LIST_NONE;
    p->st = ST_PLAIN;
    return true;
}

/* mistral's [TOOL_CALLS][...] list after its first item was streamed
 * (p->list set): the next item (streamed when it starts the usual way,
 * else taken whole) or the ',' / ']' after one. False when more text is
 * needed. */
static bool step_mistral_list(pg_oparse *p, bool final) {
    pg_strbuf *b = &p->buf;
    if (p->streaming)
        return stream_object_tail(p, final, "mistral: a streamed call did not end as a valid call");
    size_t k = skip_ws(b->p, b->len, 0);
    if (k == b->len && !final) return false;
    if (p->list == LIST_SEP) {
        if (k < b->len && (b->p[k] == ',' || b->p[k] == ']')) {
            p->list = b->p[k] == ',' ? LIST_ITEM : LIST_NONE;
            if (p->list == LIST_NONE) p->st = ST_CONTENT;
            pg_strbuf_consume(b, k + 1);
            return true;
        }
        p->list = LIST_NONE;
        if (k == b->len) { /* the output ended after an item: the calls stand */
            p->st = ST_CONTENT;
            return true;
        }
        issue(p, "mistral: the list of calls did not continue with ',' or ']'");
        content(p, b->p + k, b->len - k);
        pg_strbuf_consume(b, b->len);
        p->st = ST_PLAIN;
        return true;
    }
    size_t name_at = 0, name_len = 0, args_at = 0;
    int h = call_head(b->p + k, b->len - k, false, &name_at, &name_len, &args_at);
    if (h < 0 && !final) return false;
    if (h == 1) {
        stream_open(p, k + name_at, name_len, k + args_at);
        return true;
    }
    size_t n = k < b->len && b->p[k] == '{' ? json_extent(b->p + k, b->len - k) : 0;
    if (!n && !final && k < b->len && b->p[k] == '{') return false;
    cJSON *v = n ? parse_n(b->p + k, n) : NULL;
    bool ok = v && object_call(p, v, false);
    cJSON_Delete(v);
    if (ok) {
        pg_strbuf_consume(b, k + n);
        p->list = LIST_SEP;
        return true;
    }
    issue(p, "mistral: an item of the list of calls is not a call");
    content(p, b->p + k, b->len - k);
    pg_strbuf_consume(b, b->len);
    p->list = LIST_NONE;
    p->st = ST_PLAIN;
    return true;
}

/* Progress in ST_CALL. Returns false when more text is needed. */
static bool step_call(pg_oparse *p, bool final) {
    pg_strbuf *b = &p->buf;
    if (p->o.tools == PG_TOOLS_HERMES) {
        int r = stream_hermes(p, final);
        if (r) return r == 1;

        const char *e = find(b->p, b->len, HERMES_CLOSE);
        if (!e && !final) return false;
        size_t body = e ? (size_t)(e - b->p) : b->len;
        cJSON *v = parse_n(b->p, body);
        bool ok = v && object_call(p, v, false);
        cJSON_Delete(v);
        if (!ok) {
            degrade(p, HERMES_OPEN, b->p, body, "hermes: <tool_call> without a valid call");
            if (e) content(p, HERMES_CLOSE, strlen(HERMES_CLOSE));
        }
        pg_strbuf_consume(b, e ? body + strlen(HERMES_CLOSE) : body);
        p->st = ST_CONTENT;
        return true;
    }
    if (p->o.tools == PG_TOOLS_MISTRAL && p->streaming && p->v11) {
        if (!stream_more(p, final)) return false;
        stream_close(p, p->args_done && args_valid(p),
                     "mistral: streamed [ARGS] did not end as a valid object");
        p->st = ST_CONTENT;
        return true;
    }
    if (p->o.tools == PG_TOOLS_MISTRAL && p->list) return step_mistral_list(p, final);
    if (p->o.tools == PG_TOOLS_LLAMA3_JSON && p->streaming)
        return stream_object_tail(p, final, "llama3_json: a streamed call did not end as a call");
    size_t i = skip_ws(b->p, b->len, 0);
    if (i == b->len) {
        if (!final) return false;
        if (p->o.tools == PG_TOOLS_MISTRAL) degrade(p, MISTRAL_OPEN, "", 0, "mistral: no call");
        content(p, b->p, b->len);
        pg_strbuf_consume(b, b->len);
        p->st = ST_PLAIN;
        return true;
    }
    if (p->o.tools == PG_TOOLS_LLAMA3_JSON || b->p[i] == '[') {
        bool llama = p->o.tools == PG_TOOLS_LLAMA3_JSON;
        /* a call (llama) or the list's first item that starts the usual way
         * is streamed; else the whole value is parsed at its end */
        size_t at = llama ? i : skip_ws(b->p, b->len, i + 1);
        size_t name_at = 0, name_len = 0, args_at = 0;
        int h = call_head(b->p + at, b->len - at, llama, &name_at, &name_len, &args_at);
        if (h < 0 && !final) return false;
        if (h == 1) {
            if (!llama) p->list = LIST_ITEM;
            stream_open(p, at + name_at, name_len, at + args_at);
            return true;
        }
        size_t n = json_extent(b->p + i, b->len - i);
        if (!n && !final) return false;
        cJSON *v = n ? parse_n(b->p + i, n) : NULL;
        bool ok = v && value_calls(p, v, llama);
        cJSON_Delete(v);
        if (!ok) { /* the rest of the output is content */
            degrade(p, llama ? NULL : MISTRAL_OPEN, b->p, b->len,
                    llama ? "llama3_json: output is not a call" : "mistral: not a list of calls");
            pg_strbuf_consume(b, b->len);
            p->st = ST_PLAIN;
            return true;
        }
        pg_strbuf_consume(b, i + n);
        p->st = llama ? ST_AFTER_L3 : ST_CONTENT;
        return true;
    }
    /* mistral v11: NAME[ARGS]{...} */
    const char *a = find(b->p + i, b->len - i, MISTRAL_ARGS);
    size_t name_end = a ? (size_t)(a - b->p) : b->len;
    bool bad_name = name_end - i > MAX_NAME;
    for (size_t k = i; k < name_end && !bad_name; k++)
        bad_name = is_ws(b->p[k]) || b->p[k] == '{' || b->p[k] == '"';
    if (!a && !bad_name && !final) return false;
    size_t j = a ? skip_ws(b->p, b->len, name_end + strlen(MISTRAL_ARGS)) : b->len;
    if (a && !bad_name && name_end > i && j < b->len && b->p[j] == '{') {
        stream_open(p, i, name_end - i, j); /* NAME[ARGS]{ streams */
        p->v11 = true;
        return true;
    }
    size_t n = 0;
    if (a && !bad_name && j < b->len && b->p[j] == '{') {
        n = json_extent(b->p + j, b->len - j);
        if (!n && !final) return false;
    } else if (a && !bad_name && j == b->len && !final) {
        return false;
    }
    cJSON *v = n ? parse_n(b->p + j, n) : NULL;
    bool ok = cJSON_IsObject(v) && name_end > i && !bad_name;
    if (ok) {
        char *name = strndup(b->p + i, name_end - i);
        char *args = cJSON_PrintUnformatted(v);
        if (name && args)
            emit_call(p, name, args);
        else
            p->oom = true;
        free(name);
        cJSON_free(args);
    }
    cJSON_Delete(v);
    if (!ok) {
        degrade(p, MISTRAL_OPEN, b->p, b->len, "mistral: [TOOL_CALLS] without a valid call");
        pg_strbuf_consume(b, b->len);
        p->st = ST_PLAIN;
        return true;
    }
    pg_strbuf_consume(b, j + n);
    p->st = ST_CONTENT;
    return true;
}

/* Process as much of buf as possible; final: no more text comes. */
static void run(pg_oparse *p, bool final) {
    pg_strbuf *b = &p->buf;
    for (;;) {
        if (p->oom) return;
        switch (p->st) {
        case ST_THINK_START: {
            size_t i = skip_ws(b->p, b->len, 0);
            if (b->len - i >= strlen(THINK_OPEN) &&
                !memcmp(b->p + i, THINK_OPEN, strlen(THINK_OPEN))) {
                pg_strbuf_consume(b, i + strlen(THINK_OPEN));
                p->st = ST_REASON;
                continue;
            }
            if (!final && is_prefix_of(b->p + i, b->len - i, THINK_OPEN)) return;
            p->st = p->o.in_reasoning ? ST_REASON : ST_CONTENT;
            continue;
        }
        case ST_REASON: {
            const char *e = find(b->p, b->len, THINK_CLOSE);
            if (e) {
                size_t k = (size_t)(e - b->p);
                emit_text(p, PG_HARMONY_REASONING, b->p, k);
                pg_strbuf_consume(b, k + strlen(THINK_CLOSE));
                p->st = ST_CONTENT;
                p->strip = true;
                continue;
            }
            size_t keep = final ? 0 : partial_suffix(b->p, b->len, THINK_CLOSE);
            emit_text(p, PG_HARMONY_REASONING, b->p, b->len - keep);
            pg_strbuf_consume(b, b->len - keep);
            return;
        }
        case ST_CONTENT: {
            if (p->strip) { /* "</think>\n\n": the answer starts after the blank lines */
                size_t i = skip_ws(b->p, b->len, 0);
                pg_strbuf_consume(b, i);
                if (!b->len && !final) return;
                p->strip = false;
            }
            const char *tag = p->o.tools == PG_TOOLS_HERMES    ? HERMES_OPEN
                              : p->o.tools == PG_TOOLS_MISTRAL ? MISTRAL_OPEN
                                                               : NULL;
            if (p->o.tools == PG_TOOLS_LLAMA3_JSON) { /* a call only at the start */
                size_t i = skip_ws(b->p, b->len, 0);
                if (i == b->len && !final) return;
                if (!final && is_prefix_of(b->p + i, b->len - i, PYTHON_TAG)) return;
                size_t t = b->len - i >= strlen(PYTHON_TAG) &&
                                   !memcmp(b->p + i, PYTHON_TAG, strlen(PYTHON_TAG))
                               ? strlen(PYTHON_TAG)
                               : 0;
                size_t k = skip_ws(b->p, b->len, i + t);
                if (k < b->len && b->p[k] == '{') {
                    pg_strbuf_consume(b, k);
                    p->st = ST_CALL;
                    continue;
                }
                if (k == b->len && t && !final) return;
                p->st = ST_PLAIN;
                continue;
            }
            if (!tag) {
                content(p, b->p, b->len);
                pg_strbuf_consume(b, b->len);
                return;
            }
            const char *e = find(b->p, b->len, tag);
            if (e) {
                size_t k = (size_t)(e - b->p);
                content(p, b->p, k);
                pg_strbuf_consume(b, k + strlen(tag));
                p->st = ST_CALL;
                continue;
            }
            size_t keep = final ? 0 : partial_suffix(b->p, b->len, tag);
            content(p, b->p, b->len - keep);
            pg_strbuf_consume(b, b->len - keep);
            return;
        }
        case ST_CALL:
            if (!step_call(p, final)) return;
            if (final && !b->len) return;
            continue;
        case ST_AFTER_L3: {
            size_t i = skip_ws(b->p, b->len, 0);
            if (i < b->len && b->p[i] == ';') {
                pg_strbuf_consume(b, i + 1);
                continue;
            }
            if (i < b->len && b->p[i] == '{') {
                pg_strbuf_consume(b, i);
                p->st = ST_CALL;
                continue;
            }
            pg_strbuf_consume(b, i); /* whitespace after a call */
            if (!b->len) return;
            p->st = ST_PLAIN;
            continue;
        }
        case ST_PLAIN:
            content(p, b->p, b->len);
            pg_strbuf_consume(b, b->len);
            return;
        }
    }
}

pagoda_status pg_oparse_create(const pg_oparse_opts *opts, pg_harmony_emit_fn emit, void *user,
                               pg_oparse **out) {
    *out = NULL;
    if (opts->tools == PG_TOOLS_HARMONY)
        return pg_error(PAGODA_ERR_INVALID_ARG, "output parser: harmony output has its own parser");
    pg_oparse *p = calloc(1, sizeof *p);
    if (!p) return pg_error(PAGODA_ERR_NOMEM, "output parser: out of memory");
    p->o = *opts;
    if (p->o.reasoning == PG_REASONING_DEEPSEEK_R1) p->o.in_reasoning = true;
    if (p->o.reasoning == PG_REASONING_NONE) p->o.in_reasoning = false;
    p->emit = emit;
    p->user = user;
    /* both buffers exist from the start (searched even when empty) */
    if (!pg_strbuf_add(&p->buf, "", 0) || !pg_strbuf_add(&p->ws, "", 0)) {
        pg_oparse_free(p);
        return pg_error(PAGODA_ERR_NOMEM, "output parser: out of memory");
    }
    p->st = p->o.reasoning != PG_REASONING_NONE ? ST_THINK_START : ST_CONTENT;
    *out = p;
    return PAGODA_OK;
}

void pg_oparse_free(pg_oparse *p) {
    if (!p) return;
    pg_strbuf_free(&p->buf);
    pg_strbuf_free(&p->ws);
    pg_strbuf_free(&p->args);
    free(p);
}

static pagoda_status status_of(pg_oparse *p) {
    if (p->buf.oom || p->ws.oom || p->args.oom) p->oom = true;
    return p->oom ? pg_error(PAGODA_ERR_NOMEM, "output parser: out of memory") : PAGODA_OK;
}

pagoda_status pg_oparse_feed(pg_oparse *p, const char *text, size_t len) {
    if (p->finished || p->oom || !len) return status_of(p);
    if (pg_strbuf_add(&p->buf, text, len)) run(p, false);
    return status_of(p);
}

pagoda_status pg_oparse_finish(pg_oparse *p) {
    if (p->finished || p->oom) return status_of(p);
    p->finished = true;
    run(p, true);
    if (p->n_calls == 0) emit_text(p, PG_HARMONY_CONTENT, p->ws.p, p->ws.len);
    p->ws.len = 0;
    return status_of(p);
}

int pg_oparse_issues(const pg_oparse *p) {
    return p->issues;
}

bool pg_reasoning_format_parse(const char *name, pg_reasoning_format *out) {
    if (!strcmp(name, "qwen3"))
        *out = PG_REASONING_QWEN3;
    else if (!strcmp(name, "deepseek_r1"))
        *out = PG_REASONING_DEEPSEEK_R1;
    else
        return false;
    return true;
}

bool pg_tool_format_parse(const char *name, pg_tool_format *out) {
    if (!strcmp(name, "hermes"))
        *out = PG_TOOLS_HERMES;
    else if (!strcmp(name, "llama3_json"))
        *out = PG_TOOLS_LLAMA3_JSON;
    else if (!strcmp(name, "mistral"))
        *out = PG_TOOLS_MISTRAL;
    else if (!strcmp(name, "harmony") || !strcmp(name, "openai"))
        *out = PG_TOOLS_HARMONY;
    else
        return false;
    return true;
}

const char *pg_tool_format_name(pg_tool_format f) {
    static const char *const names[] = {"none", "hermes", "llama3_json", "mistral", "harmony"};
    return (unsigned)f < sizeof names / sizeof names[0] ? names[f] : "none";
}

const char *pg_reasoning_format_name(pg_reasoning_format f) {
    static const char *const names[] = {"none", "qwen3", "deepseek_r1"};
    return (unsigned)f < sizeof names / sizeof names[0] ? names[f] : "none";
}

void pg_oparse_detect(const char *t, pg_tool_format *tools, pg_reasoning_format *reasoning,
                      bool *mistral_v11) {
    *tools = PG_TOOLS_NONE;
    *reasoning = PG_REASONING_NONE;
    *mistral_v11 = false;
    if (!t) return;
    size_t n = strlen(t);
    if (find(t, n, HERMES_OPEN))
        *tools = PG_TOOLS_HERMES;
    else if (find(t, n, MISTRAL_OPEN)) {
        *tools = PG_TOOLS_MISTRAL;
        *mistral_v11 = find(t, n, MISTRAL_ARGS) != NULL;
    } else if (find(t, n, PYTHON_TAG) || find(t, n, "Given the following functions"))
        *tools = PG_TOOLS_LLAMA3_JSON;
    if (find(t, n, THINK_OPEN)) *reasoning = PG_REASONING_QWEN3;
}

bool pg_oparse_prompt_in_reasoning(const char *s, size_t n) {
    const char *last = NULL;
    for (const char *q = s; (q = find(q, n - (size_t)(q - s), THINK_OPEN)); q++)
        last = q;
    if (!last) return false;
    size_t off = (size_t)(last - s);
    return !find(last, n - off, THINK_CLOSE);
}

pg_grammar_reasoning pg_oparse_grammar_reasoning(pg_reasoning_format f, const char *prompt,
                                                 size_t len, bool grammar_writes_think) {
    if (f == PG_REASONING_NONE || grammar_writes_think) return PG_GRAMMAR_WHOLE;
    if (f == PG_REASONING_DEEPSEEK_R1) return PG_GRAMMAR_AFTER_OPEN;
    if (pg_oparse_prompt_in_reasoning(prompt, len)) return PG_GRAMMAR_AFTER_OPEN;
    size_t n = len, t = strlen(THINK_CLOSE);
    while (n && (prompt[n - 1] == ' ' || prompt[n - 1] == '\n' || prompt[n - 1] == '\t' ||
                 prompt[n - 1] == '\r'))
        n--;
    if (n >= t && !memcmp(prompt + n - t, THINK_CLOSE, t)) return PG_GRAMMAR_WHOLE;
    return PG_GRAMMAR_AFTER_MAY_OPEN;
}
