/* apply_chat_template over the Jinja interpreter (see chat_template.h). */
#include "tokenizer/chat_template.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "jinja/jinja.h"
#include "tokenizer/tokenizer.h"

struct pg_chat_template {
    jj_template *t;
};

/* ---- content format detection (vLLM's _detect_content_format, simplified) */
typedef struct names_ {
    const char *v[64];
    int n;
} names_;

/* strip filters / tests / slices: `message['content'] | list` -> message['content'] */
static const jj_node *strip_expr(const jj_node *e) {
    while (e && (e->kind == E_FILTER || e->kind == E_SLICE)) e = e->a;
    return e;
}

static bool is_content_access(const jj_node *e, const names_ *vars) {
    e = strip_expr(e);
    if (!e) return false;
    if (e->kind == E_ATTR && e->s && strcmp(e->s, "content") == 0) return true;
    if (e->kind == E_ITEM && e->b && e->b->kind == E_LIT && jv_is_str(e->b->lit, "content"))
        return true;
    if (e->kind == E_NAME && strcmp(e->s, "content") == 0) return true; /* a macro's content param */
    if (e->kind == E_NAME)
        for (int i = 0; i < vars->n; i++)
            if (strcmp(vars->v[i], e->s) == 0) return true;
    return false;
}

static bool walk_content(jj_node *const *body, size_t n, names_ *vars, int depth) {
    if (depth > JJ_MAX_DEPTH) return false;
    for (size_t i = 0; i < n; i++) {
        const jj_node *s = body[i];
        if (!s) continue;
        if (s->kind == S_SET && !s->a && s->nkw == 1 && is_content_access(s->b, vars) &&
            vars->n < 64)
            vars->v[vars->n++] = s->kwn[0];
        if (s->kind == S_FOR && is_content_access(s->a, vars)) return true;
        if (walk_content(s->items, s->n, vars, depth + 1)) return true;
        if (walk_content(s->body2, s->n2, vars, depth + 1)) return true;
    }
    return false;
}

bool pg_chat_template_iterates_content(const pg_chat_template *t) {
    if (!t) return false;
    names_ vars = {.n = 0};
    /* two passes: a variable may be set from content after the macro using it */
    walk_content(t->t->body, t->t->n, &vars, 0);
    return walk_content(t->t->body, t->t->n, &vars, 0);
}

/* prefix the interpreter's message ("line N: ...") */
static pagoda_status rewrap(pagoda_status st) {
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", pg_last_error());
    return pg_error(st, "chat template: %s", msg);
}

pagoda_status pg_chat_template_compile(const char *source, pg_chat_template **out) {
    *out = NULL;
    if (!source) return pg_error(PAGODA_ERR_INVALID_ARG, "chat template: no source");
    pg_chat_template *ct = calloc(1, sizeof *ct);
    if (!ct) return pg_error(PAGODA_ERR_NOMEM, "chat template: out of memory");
    pagoda_status st = jj_compile(source, &ct->t);
    if (st != PAGODA_OK) {
        free(ct);
        return rewrap(st);
    }
    *out = ct;
    return PAGODA_OK;
}

void pg_chat_template_free(pg_chat_template *t) {
    if (!t) return;
    jj_template_free(t->t);
    free(t);
}

static pagoda_status set_token(jj_ctx *c, const char *name, const char *v) {
    if (!v) return PAGODA_OK;
    jj_arena *a = jj_ctx_arena(c);
    (void)a;
    return jj_ctx_set(c, name, jv_cstr(v));
}

pagoda_status pg_chat_template_render_at(const pg_chat_template *t, const cJSON *messages,
                                         const cJSON *tools, const cJSON *kwargs,
                                         bool add_generation_prompt,
                                         const pg_chat_special_tokens *sp, const struct tm *now,
                                         char **out_text) {
    *out_text = NULL;
    if (!t) return pg_error(PAGODA_ERR_INVALID_ARG, "chat template: no template");
    if (!cJSON_IsArray(messages))
        return pg_error(PAGODA_ERR_INVALID_ARG, "chat template: messages must be a JSON array");
    if (kwargs && !cJSON_IsObject(kwargs) && !cJSON_IsNull(kwargs))
        return pg_error(PAGODA_ERR_INVALID_ARG,
                        "chat template: chat_template_kwargs must be a JSON object");
    if (tools && !cJSON_IsArray(tools) && !cJSON_IsNull(tools))
        return pg_error(PAGODA_ERR_INVALID_ARG, "chat template: tools must be a JSON array");
    struct tm tmv;
    if (!now) {
        time_t tt = time(NULL);
        localtime_r(&tt, &tmv);
        now = &tmv;
    }
    jj_render_opts o = {.year = now->tm_year + 1900, .month = now->tm_mon + 1,
                        .day = now->tm_mday, .hour = now->tm_hour, .min = now->tm_min,
                        .sec = now->tm_sec, .wday = now->tm_wday, .yday = now->tm_yday};
    jj_ctx *c = jj_ctx_new(&o);
    if (!c) return pg_error(PAGODA_ERR_NOMEM, "chat template: out of memory");
    pagoda_status st = PAGODA_OK;
    if (sp) {
        if (!st) st = set_token(c, "bos_token", sp->bos_token);
        if (!st) st = set_token(c, "eos_token", sp->eos_token);
        if (!st) st = set_token(c, "pad_token", sp->pad_token);
        if (!st) st = set_token(c, "unk_token", sp->unk_token);
    }
    if (kwargs && cJSON_IsObject(kwargs))
        for (const cJSON *e = kwargs->child; e && !st; e = e->next)
            if (e->string) st = jj_ctx_set_json(c, e->string, e);
    if (!st) st = jj_ctx_set_json(c, "messages", messages);
    if (!st) st = jj_ctx_set_json(c, "tools", cJSON_IsArray(tools) ? tools : NULL);
    if (!st) st = jj_ctx_set_json(c, "documents", NULL);
    if (!st) st = jj_ctx_set(c, "add_generation_prompt", jv_bool(add_generation_prompt));
    if (st) {
        jj_ctx_free(c);
        return rewrap(st);
    }
    size_t n = 0;
    st = jj_render(c, t->t, out_text, &n);
    jj_ctx_free(c);
    if (st) return rewrap(st);
    return PAGODA_OK;
}

pagoda_status pg_chat_template_render(const pg_chat_template *t, const cJSON *messages,
                                      const cJSON *tools, const cJSON *kwargs,
                                      bool add_generation_prompt, const pg_chat_special_tokens *sp,
                                      char **out_text) {
    return pg_chat_template_render_at(t, messages, tools, kwargs, add_generation_prompt, sp, NULL,
                                      out_text);
}

/* ---- OpenAI request messages -> template messages --------------------------- */
/* replace content in place (templates may iterate a message's keys in order) */
static void set_content(cJSON *msg, cJSON *v) {
    if (cJSON_GetObjectItemCaseSensitive(msg, "content"))
        cJSON_ReplaceItemInObjectCaseSensitive(msg, "content", v);
    else
        cJSON_AddItemToObject(msg, "content", v);
}

static pagoda_status prep_content(cJSON *msg, size_t idx, bool openai) {
    cJSON *c = cJSON_GetObjectItemCaseSensitive(msg, "content");
    cJSON *parts = cJSON_CreateArray();
    if (!parts) return pg_error(PAGODA_ERR_NOMEM, "messages: out of memory");
    if (cJSON_IsString(c)) {
        cJSON *p = cJSON_CreateObject();
        cJSON_AddItemToArray(parts, p);
        cJSON_AddStringToObject(p, "type", "text");
        cJSON_AddStringToObject(p, "text", c->valuestring);
    } else if (cJSON_IsArray(c)) {
        const cJSON *e;
        cJSON_ArrayForEach(e, c) {
            const cJSON *ty = cJSON_GetObjectItemCaseSensitive(e, "type");
            const cJSON *tx = cJSON_GetObjectItemCaseSensitive(e, "text");
            const char *t = cJSON_IsString(ty) ? ty->valuestring : "";
            if (cJSON_IsString(e)) { /* a bare string part */
                tx = e;
                t = "text";
            }
            if (strcmp(t, "text") != 0 && strcmp(t, "input_text") != 0) {
                cJSON_Delete(parts);
                if (!strcmp(t, "image_url") || !strcmp(t, "input_audio") ||
                    !strcmp(t, "audio_url") || !strcmp(t, "video_url") || !strcmp(t, "image"))
                    return pg_error(PAGODA_ERR_UNSUPPORTED,
                                    "messages[%zu]: content part type '%s' is not supported "
                                    "(text only)",
                                    idx, t);
                return pg_error(PAGODA_ERR_INVALID_ARG,
                                "messages[%zu]: unknown content part type '%s'", idx, t);
            }
            if (!cJSON_IsString(tx)) {
                cJSON_Delete(parts);
                return pg_error(PAGODA_ERR_INVALID_ARG, "messages[%zu]: text part without text",
                                idx);
            }
            cJSON *p = cJSON_CreateObject();
            cJSON_AddItemToArray(parts, p);
            cJSON_AddStringToObject(p, "type", "text");
            cJSON_AddStringToObject(p, "text", tx->valuestring);
        }
    } else if (c && !cJSON_IsNull(c)) {
        cJSON_Delete(parts);
        return pg_error(PAGODA_ERR_INVALID_ARG,
                        "messages[%zu]: content must be a string, a list of parts or null", idx);
    }
    if (openai) {
        set_content(msg, parts);
        return PAGODA_OK;
    }
    size_t len = 0, n = 0;
    const cJSON *p;
    cJSON_ArrayForEach(p, parts) {
        len += strlen(cJSON_GetObjectItem(p, "text")->valuestring) + 1;
        n++;
    }
    char *joined = malloc(len + 1), *w = joined;
    if (!joined) {
        cJSON_Delete(parts);
        return pg_error(PAGODA_ERR_NOMEM, "messages: out of memory");
    }
    *w = 0;
    size_t k = 0;
    cJSON_ArrayForEach(p, parts) {
        const char *t = cJSON_GetObjectItem(p, "text")->valuestring;
        size_t tl = strlen(t);
        memcpy(w, t, tl);
        w += tl;
        if (++k < n) *w++ = '\n';
        *w = 0;
    }
    cJSON_Delete(parts);
    cJSON *js = cJSON_CreateString(joined);
    free(joined);
    if (!js) return pg_error(PAGODA_ERR_NOMEM, "messages: out of memory");
    set_content(msg, js);
    return PAGODA_OK;
}

pagoda_status pg_chat_messages_prepare(const cJSON *messages, bool openai_content, cJSON **out) {
    *out = NULL;
    if (!cJSON_IsArray(messages))
        return pg_error(PAGODA_ERR_INVALID_ARG, "messages must be a JSON array");
    cJSON *m = cJSON_Duplicate(messages, true);
    if (!m) return pg_error(PAGODA_ERR_NOMEM, "messages: out of memory");
    size_t idx = 0;
    cJSON *msg;
    cJSON_ArrayForEach(msg, m) {
        if (!cJSON_IsObject(msg)) {
            cJSON_Delete(m);
            return pg_error(PAGODA_ERR_INVALID_ARG, "messages[%zu] must be an object", idx);
        }
        pagoda_status st = prep_content(msg, idx, openai_content);
        if (st) {
            cJSON_Delete(m);
            return st;
        }
        cJSON *calls = cJSON_GetObjectItemCaseSensitive(msg, "tool_calls");
        cJSON *call;
        if (cJSON_IsArray(calls)) cJSON_ArrayForEach(call, calls) {
            cJSON *fn = cJSON_GetObjectItemCaseSensitive(call, "function");
            cJSON *args = cJSON_GetObjectItemCaseSensitive(fn, "arguments");
            if (!cJSON_IsString(args)) continue;
            cJSON *parsed = cJSON_Parse(args->valuestring);
            if (!parsed) {
                cJSON_Delete(m);
                return pg_error(PAGODA_ERR_INVALID_ARG,
                                "messages[%zu]: tool call arguments are not valid JSON", idx);
            }
            cJSON_ReplaceItemInObjectCaseSensitive(fn, "arguments", parsed);
        }
        idx++;
    }
    *out = m;
    return PAGODA_OK;
}

static bool is_py_space(char ch) {
    return ch == ' ' || ch == '\t' || ch == '\n' || ch == '\r' || ch == '\v' || ch == '\f';
}

pagoda_status pg_chat_continue_final_message(char *text, const cJSON *messages) {
    const cJSON *last = cJSON_IsArray(messages) ? cJSON_GetArrayItem(messages, cJSON_GetArraySize(messages) - 1) : NULL;
    const cJSON *c = cJSON_GetObjectItemCaseSensitive(last, "content");
    const char *fm = NULL;
    if (cJSON_IsString(c)) {
        fm = c->valuestring;
    } else if (cJSON_IsArray(c)) {
        for (int i = cJSON_GetArraySize(c) - 1; i >= 0 && !fm; i--) {
            const cJSON *t = cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(c, i), "text");
            if (cJSON_IsString(t)) fm = t->valuestring;
        }
    }
    if (!fm)
        return pg_error(PAGODA_ERR_INVALID_ARG,
                        "continue_final_message: the final message has no text to continue");
    /* stripped form [lo, hi) of fm */
    size_t n = strlen(fm), lo = 0, hi = n;
    while (lo < hi && is_py_space(fm[lo])) lo++;
    while (hi > lo && is_py_space(fm[hi - 1])) hi--;
    size_t sl = hi - lo, tl = strlen(text);
    const char *loc = NULL;
    if (sl == 0) {
        loc = text + tl;
    } else {
        for (size_t k = tl >= sl ? tl - sl + 1 : 0; k-- > 0;)
            if (memcmp(text + k, fm + lo, sl) == 0) {
                loc = text + k;
                break;
            }
    }
    if (!loc)
        return pg_error(PAGODA_ERR_INVALID_ARG,
                        "continue_final_message: the final message does not appear in the "
                        "rendered chat (the template changes it)");
    size_t at = (size_t)(loc - text), keep = n - lo; /* len(final_message.lstrip()) */
    if (at + keep <= tl && memcmp(loc, fm + lo, keep) == 0)
        text[at + keep] = 0;
    else
        text[at + sl] = 0;
    return PAGODA_OK;
}

/* ---- locating a model's template ------------------------------------------ */
static pagoda_status read_text(const char *path, char **out) {
    *out = NULL;
    FILE *f = fopen(path, "rb");
    if (!f) {
        return pg_error(errno == ENOENT ? PAGODA_ERR_NOT_FOUND : PAGODA_ERR_IO, "%s: %s", path,
                        strerror(errno));
    }
    if (fseek(f, 0, SEEK_END) != 0) {
        fclose(f);
        return pg_error(PAGODA_ERR_IO, "%s: cannot seek", path);
    }
    long sz = ftell(f);
    if (sz < 0 || sz > (64L << 20)) {
        fclose(f);
        return pg_error(PAGODA_ERR_IO, "%s: bad size or larger than 64 MiB", path);
    }
    rewind(f);
    char *buf = malloc((size_t)sz + 1);
    if (!buf) {
        fclose(f);
        return pg_error(PAGODA_ERR_NOMEM, "%s: out of memory", path);
    }
    size_t got = fread(buf, 1, (size_t)sz, f);
    fclose(f);
    if (got != (size_t)sz) {
        free(buf);
        return pg_error(PAGODA_ERR_IO, "%s: short read", path);
    }
    buf[sz] = 0;
    if (strlen(buf) != (size_t)sz) {
        free(buf);
        return pg_error(PAGODA_ERR_FORMAT, "%s: contains a NUL byte", path);
    }
    *out = buf;
    return PAGODA_OK;
}

static bool is_dir(const char *p) {
    struct stat s;
    return stat(p, &s) == 0 && S_ISDIR(s.st_mode);
}

static char *dup_token(const cJSON *cfg, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(cfg, key);
    if (cJSON_IsObject(v)) v = cJSON_GetObjectItemCaseSensitive(v, "content");
    if (!cJSON_IsString(v) || !v->valuestring) return NULL;
    return strdup(v->valuestring);
}

void pg_chat_config_free(pg_chat_config *c) {
    if (!c) return;
    free(c->source);
    free(c->bos_token);
    free(c->eos_token);
    free(c->pad_token);
    free(c->unk_token);
    memset(c, 0, sizeof *c);
}

pg_chat_special_tokens pg_chat_config_tokens(const pg_chat_config *c) {
    pg_chat_special_tokens s = {c->bos_token, c->eos_token, c->pad_token, c->unk_token};
    return s;
}

static char *token_text(const pg_tokenizer *tok, int32_t id) {
    size_t n = 0;
    const char *b = id >= 0 ? pg_tokenizer_token_bytes(tok, id, &n) : NULL;
    if (!b) return NULL;
    char *s = malloc(n + 1);
    if (!s) return NULL;
    memcpy(s, b, n);
    s[n] = 0;
    return s;
}

/* A GGUF file: tokenizer.chat_template and the BOS/EOS token texts. */
static pagoda_status load_gguf(const char *path, const char *template_file, pg_chat_config *out) {
    pg_tokenizer *tok = NULL;
    pagoda_status st = pg_tokenizer_load(path, &tok);
    if (st) return st;
    out->bos_token = token_text(tok, pg_tokenizer_bos(tok));
    out->eos_token = token_text(tok, pg_tokenizer_eos(tok));
    const char *src = pg_tokenizer_chat_template(tok);
    if (template_file) {
        st = read_text(template_file, &out->source);
    } else if (!src) {
        st = pg_error(PAGODA_ERR_NOT_FOUND,
                      "%s: no chat template (no tokenizer.chat_template key); pass "
                      "--chat-template FILE",
                      path);
    } else if (!(out->source = strdup(src))) {
        st = pg_error(PAGODA_ERR_NOMEM, "chat template: out of memory");
    }
    pg_tokenizer_free(tok);
    if (st) pg_chat_config_free(out);
    return st;
}

static bool has_suffix(const char *s, const char *suf) {
    size_t n = strlen(s), m = strlen(suf);
    return n >= m && strcmp(s + n - m, suf) == 0;
}

pagoda_status pg_chat_config_load(const char *model_path, const char *template_file,
                                  pg_chat_config *out) {
    memset(out, 0, sizeof *out);
    pagoda_status st;
    if (model_path && !is_dir(model_path) && has_suffix(model_path, ".gguf"))
        return load_gguf(model_path, template_file, out);
    char cfg_path[4096] = "";
    if (model_path) {
        if (is_dir(model_path))
            snprintf(cfg_path, sizeof cfg_path, "%s/tokenizer_config.json", model_path);
        else
            snprintf(cfg_path, sizeof cfg_path, "%s", model_path);
    }
    cJSON *cfg = NULL;
    if (cfg_path[0]) {
        char *text = NULL;
        st = read_text(cfg_path, &text);
        if (st == PAGODA_OK) {
            cfg = cJSON_Parse(text);
            free(text);
            if (!cfg)
                return pg_error(PAGODA_ERR_FORMAT, "%s: invalid JSON", cfg_path);
        } else if (st != PAGODA_ERR_NOT_FOUND || !template_file) {
            if (st == PAGODA_ERR_NOT_FOUND && is_dir(model_path)) {
                /* a directory without tokenizer_config.json may still hold a .jinja */
                pg_clear_error();
            } else {
                return st;
            }
        }
    }
    if (cfg) {
        out->bos_token = dup_token(cfg, "bos_token");
        out->eos_token = dup_token(cfg, "eos_token");
        out->pad_token = dup_token(cfg, "pad_token");
        out->unk_token = dup_token(cfg, "unk_token");
    }
    if (template_file) {
        st = read_text(template_file, &out->source);
        cJSON_Delete(cfg);
        if (st) pg_chat_config_free(out);
        return st;
    }
    if (model_path && is_dir(model_path)) {
        char p[4096];
        snprintf(p, sizeof p, "%s/chat_template.jinja", model_path);
        if (read_text(p, &out->source) == PAGODA_OK) {
            cJSON_Delete(cfg);
            return PAGODA_OK;
        }
        pg_clear_error();
    }
    const cJSON *ct = cfg ? cJSON_GetObjectItemCaseSensitive(cfg, "chat_template") : NULL;
    const char *src = NULL;
    if (ct && cJSON_IsString(ct)) {
        src = ct->valuestring;
    } else if (cJSON_IsArray(ct)) {
        const cJSON *e;
        cJSON_ArrayForEach(e, ct) {
            const cJSON *nm = cJSON_GetObjectItemCaseSensitive(e, "name");
            const cJSON *tx = cJSON_GetObjectItemCaseSensitive(e, "template");
            if (cJSON_IsString(nm) && cJSON_IsString(tx) && strcmp(nm->valuestring, "default") == 0)
                src = tx->valuestring;
        }
        if (!src) {
            cJSON_Delete(cfg);
            pg_chat_config_free(out);
            return pg_error(PAGODA_ERR_NOT_FOUND,
                            "%s: chat_template lists named templates but none is \"default\"; "
                            "pass --chat-template FILE",
                            cfg_path);
        }
    }
    if (!src) {
        cJSON_Delete(cfg);
        pg_chat_config_free(out);
        return pg_error(PAGODA_ERR_NOT_FOUND,
                        "%s: no chat template (no chat_template.jinja and tokenizer_config.json "
                        "has no chat_template); pass --chat-template FILE",
                        model_path ? model_path : "(no model)");
    }
    out->source = strdup(src);
    cJSON_Delete(cfg);
    if (!out->source) {
        pg_chat_config_free(out);
        return pg_error(PAGODA_ERR_NOMEM, "chat template: out of memory");
    }
    return PAGODA_OK;
}
