/* Harmony parser events -> OpenAI chat message and stream deltas (see
 * harmony_chat.h). */
#include "server/harmony_chat.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/strbuf.h"
#include "server/output_parser.h"
#include "tokenizer/harmony.h"

/* Model text: a NUL byte (valid UTF-8, but the end of a C string for cJSON)
 * becomes U+FFFD, so the message and the deltas keep all the text. */
static bool sbuf_add_text(pg_strbuf *b, const char *s, size_t n) {
    for (;;) {
        const char *z = memchr(s, 0, n);
        if (!z) return pg_strbuf_add(b, s, n);
        size_t k = (size_t)(z - s);
        if (!pg_strbuf_add(b, s, k) || !pg_strbuf_add(b, "\xEF\xBF\xBD", 3)) return false;
        s += k + 1;
        n -= k + 1;
    }
}

typedef struct hcall {
    char id[32];
    char *name;
    pg_strbuf args;
} hcall;

/* A pending stream delta: consecutive pieces of one kind are joined. */
typedef enum dkind { D_REASONING, D_CONTENT, D_CALL_BEGIN, D_CALL_ARGS } dkind;

typedef struct hdelta {
    dkind kind;
    int index; /* D_CALL_*: the call */
    pg_strbuf text;
} hdelta;

struct pg_hchat {
    pg_harmony_parser *parser; /* harmony output, or */
    pg_oparse *text;           /* reasoning tags / a family's tool-call syntax */
    uint64_t seed;
    pg_strbuf reasoning, content;
    hcall *calls;
    size_t n_calls, cap_calls;
    hdelta *pend;
    size_t n_pend, cap_pend;
    bool called;       /* a call ended with <|call|> */
    size_t max_calls;  /* 0 = any number (parallel_tool_calls false: 1) */
    bool no_reasoning; /* include_reasoning false */
    bool finished;
    bool oom;
};

static uint64_t mix64(uint64_t x) {
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

/* The pending delta to append a piece of `kind` to (a new one unless the
 * last one has the same kind and call). */
static hdelta *pend_for(pg_hchat *h, dkind kind, int index) {
    if (h->n_pend && kind != D_CALL_BEGIN) {
        hdelta *last = &h->pend[h->n_pend - 1];
        if (last->kind == kind && (kind != D_CALL_ARGS || last->index == index)) return last;
    }
    if (h->n_pend == h->cap_pend) {
        size_t cap = h->cap_pend ? h->cap_pend * 2 : 8;
        hdelta *v = realloc(h->pend, cap * sizeof *v);
        if (!v) return NULL;
        h->pend = v;
        h->cap_pend = cap;
    }
    hdelta *d = &h->pend[h->n_pend++];
    memset(d, 0, sizeof *d);
    d->kind = kind;
    d->index = index;
    return d;
}

static void add_piece(pg_hchat *h, dkind kind, int index, const char *s, size_t n) {
    hdelta *d = pend_for(h, kind, index);
    if (!d || !sbuf_add_text(&d->text, s, n)) h->oom = true;
}

static hcall *call_at(pg_hchat *h, int index) {
    return index >= 0 && (size_t)index < h->n_calls ? &h->calls[index] : NULL;
}

static void on_event(void *user, const pg_harmony_event *ev) {
    pg_hchat *h = user;
    switch (ev->kind) {
    case PG_HARMONY_REASONING:
        if (h->no_reasoning) break;
        if (!sbuf_add_text(&h->reasoning, ev->text, ev->len)) h->oom = true;
        add_piece(h, D_REASONING, -1, ev->text, ev->len);
        break;
    case PG_HARMONY_CONTENT:
        if (!sbuf_add_text(&h->content, ev->text, ev->len)) h->oom = true;
        add_piece(h, D_CONTENT, -1, ev->text, ev->len);
        break;
    case PG_HARMONY_TOOL_CALL_BEGIN: {
        if (h->max_calls && h->n_calls >= h->max_calls) break; /* its args and end find no call */
        if (h->n_calls == h->cap_calls) {
            size_t cap = h->cap_calls ? h->cap_calls * 2 : 4;
            hcall *v = realloc(h->calls, cap * sizeof *v);
            if (!v) {
                h->oom = true;
                return;
            }
            h->calls = v;
            h->cap_calls = cap;
        }
        hcall *c = &h->calls[h->n_calls];
        memset(c, 0, sizeof *c);
        uint64_t k = (uint64_t)h->n_calls;
        uint64_t a = mix64(h->seed ^ mix64(k + 1)), b = mix64(a ^ 0xD1B54A32D192ED03ull);
        snprintf(c->id, sizeof c->id, "call_%016llx%08llx", (unsigned long long)a,
                 (unsigned long long)(b >> 32));
        c->name = strdup(ev->name ? ev->name : "");
        if (!c->name) {
            h->oom = true;
            return;
        }
        h->n_calls++;
        /* the parser counts calls as we do: its index is ours */
        add_piece(h, D_CALL_BEGIN, (int)h->n_calls - 1, "", 0);
        break;
    }
    case PG_HARMONY_TOOL_ARGS: {
        hcall *c = call_at(h, ev->index);
        if (!c) return;
        if (!sbuf_add_text(&c->args, ev->text, ev->len)) h->oom = true;
        add_piece(h, D_CALL_ARGS, ev->index, ev->text, ev->len);
        break;
    }
    case PG_HARMONY_TOOL_CALL_END:
        if (ev->end == PG_HARMONY_END_CALL && call_at(h, ev->index)) h->called = true;
        break;
    case PG_HARMONY_MESSAGE_END:
    case PG_HARMONY_ISSUE:
        break;
    }
}

/* A mapper over the harmony parser (opts NULL) or a plain-text one. */
static pagoda_status hchat_new(uint64_t seed, const pg_oparse_opts *opts, pg_hchat **out) {
    *out = NULL;
    pg_hchat *h = calloc(1, sizeof *h);
    if (!h) return pg_error(PAGODA_ERR_NOMEM, "server: out of memory");
    h->seed = seed;
    pagoda_status st = opts ? pg_oparse_create(opts, on_event, h, &h->text)
                            : pg_harmony_parser_create(on_event, h, &h->parser);
    if (st) {
        free(h);
        return st;
    }
    *out = h;
    return PAGODA_OK;
}

pagoda_status pg_hchat_create(uint64_t seed, pg_hchat **out) {
    return hchat_new(seed, NULL, out);
}

pagoda_status pg_hchat_create_text(uint64_t seed, const pg_oparse_opts *opts, pg_hchat **out) {
    return hchat_new(seed, opts, out);
}

void pg_hchat_limit(pg_hchat *h, size_t max_calls, bool include_reasoning) {
    h->max_calls = max_calls;
    h->no_reasoning = !include_reasoning;
}

static void pend_clear(pg_hchat *h) {
    for (size_t i = 0; i < h->n_pend; i++)
        free(h->pend[i].text.p);
    h->n_pend = 0;
}

void pg_hchat_free(pg_hchat *h) {
    if (!h) return;
    pg_harmony_parser_free(h->parser);
    pg_oparse_free(h->text);
    free(h->reasoning.p);
    free(h->content.p);
    for (size_t i = 0; i < h->n_calls; i++) {
        free(h->calls[i].name);
        free(h->calls[i].args.p);
    }
    free(h->calls);
    pend_clear(h);
    free(h->pend);
    free(h);
}

static pagoda_status oom_status(const pg_hchat *h, pagoda_status st) {
    if (st) return st;
    return h->oom ? pg_error(PAGODA_ERR_NOMEM, "server: out of memory mapping harmony output")
                  : PAGODA_OK;
}

pagoda_status pg_hchat_feed(pg_hchat *h, const char *text, size_t len) {
    if (h->finished || len == 0) return oom_status(h, PAGODA_OK);
    return oom_status(h, h->text ? pg_oparse_feed(h->text, text, len)
                                 : pg_harmony_parser_feed(h->parser, text, len));
}

pagoda_status pg_hchat_finish(pg_hchat *h) {
    if (h->finished) return oom_status(h, PAGODA_OK);
    h->finished = true;
    return oom_status(h, h->text ? pg_oparse_finish(h->text) : pg_harmony_parser_finish(h->parser));
}

bool pg_hchat_is_end_token(const char *text, size_t len) {
    static const char *const ends[] = {"<|return|>", "<|call|>", "<|end|>"};
    for (size_t i = 0; i < sizeof ends / sizeof ends[0]; i++)
        if (len == strlen(ends[i]) && memcmp(text, ends[i], len) == 0) return true;
    return false;
}

/* {"index": i, "id", "type", "function": {"name", "arguments"}} for a call's
 * first stream delta, {"index": i, "function": {"arguments"}} after. */
static cJSON *call_json(const hcall *c, int index, bool head, const char *args) {
    cJSON *o = cJSON_CreateObject();
    if (!o) return NULL;
    if (index >= 0) cJSON_AddNumberToObject(o, "index", index);
    if (head) {
        cJSON_AddStringToObject(o, "id", c->id);
        cJSON_AddStringToObject(o, "type", "function");
    }
    cJSON *f = cJSON_AddObjectToObject(o, "function");
    if (f && head) cJSON_AddStringToObject(f, "name", c->name);
    if (f) cJSON_AddStringToObject(f, "arguments", args);
    return o;
}

cJSON *pg_hchat_take_deltas(pg_hchat *h) {
    cJSON *arr = cJSON_CreateArray();
    if (!arr) return NULL;
    for (size_t i = 0; i < h->n_pend; i++) {
        const hdelta *d = &h->pend[i];
        cJSON *o = cJSON_CreateObject();
        if (!o) break;
        cJSON_AddItemToArray(arr, o);
        if (d->kind == D_REASONING) {
            cJSON_AddStringToObject(o, "reasoning_content", pg_strbuf_cstr(&d->text));
        } else if (d->kind == D_CONTENT) {
            cJSON_AddStringToObject(o, "content", pg_strbuf_cstr(&d->text));
        } else {
            const hcall *c = call_at(h, d->index);
            cJSON *tc = cJSON_AddArrayToObject(o, "tool_calls");
            if (c && tc)
                cJSON_AddItemToArray(
                    tc, call_json(c, d->index, d->kind == D_CALL_BEGIN, pg_strbuf_cstr(&d->text)));
        }
    }
    pend_clear(h);
    return arr;
}

cJSON *pg_hchat_message(const pg_hchat *h) {
    cJSON *m = cJSON_CreateObject();
    if (!m) return NULL;
    cJSON_AddStringToObject(m, "role", "assistant");
    if (h->content.len || h->n_calls == 0)
        cJSON_AddStringToObject(m, "content", pg_strbuf_cstr(&h->content));
    else
        cJSON_AddNullToObject(m, "content");
    if (h->reasoning.len)
        cJSON_AddStringToObject(m, "reasoning_content", pg_strbuf_cstr(&h->reasoning));
    else
        cJSON_AddNullToObject(m, "reasoning_content");
    if (h->n_calls) {
        cJSON *tc = cJSON_AddArrayToObject(m, "tool_calls");
        for (size_t i = 0; tc && i < h->n_calls; i++)
            cJSON_AddItemToArray(
                tc, call_json(&h->calls[i], -1, true, pg_strbuf_cstr(&h->calls[i].args)));
    }
    return m;
}

const char *pg_hchat_finish_name(const pg_hchat *h, pagoda_finish_reason r) {
    if (r == PAGODA_FINISH_STOP && h && h->called) return "tool_calls";
    return pagoda_finish_reason_name(r);
}

size_t pg_hchat_num_calls(const pg_hchat *h) {
    return h->n_calls;
}

int pg_hchat_issues(const pg_hchat *h) {
    return h->text ? pg_oparse_issues(h->text) : pg_harmony_parser_issues(h->parser);
}
