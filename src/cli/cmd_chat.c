/* `pagoda chat MODEL` and `pagoda chat --url http://host:port`: an
 * interactive terminal chat (issue 20).
 *
 * Local mode runs the engine in this process: each turn renders the whole
 * conversation with the model's chat template (pagoda_apply_chat_template,
 * as the server's /v1/chat/completions does), tokenizes it without adding
 * BOS (the template wrote it) and streams the answer from the engine's
 * text deltas. --url mode sends the conversation to a running server's
 * /v1/chat/completions with "stream": true (libcurl) and reads the SSE
 * events' choices[0].delta.content / reasoning_content.
 *
 * The context: before each turn the oldest turns are left out of the
 * request (never the system prompt, never the new message) until the
 * prompt plus the answer's room (--max-tokens, else a quarter of the
 * context, at most 1024 tokens) fits the model's context, with a note on
 * standard error; the conversation itself (/save) keeps them. The prompt is
 * counted with the chat template and tokenizer (local), or by the
 * server's POST /tokenize (vLLM's shape; max_model_len from /v1/models),
 * else bounded by its UTF-8 bytes + 16 per message. Without --max-tokens
 * the answer may run to the end of the context (the server caps it).
 * A streamed answer that ends without a finish_reason (the server went
 * away) keeps what came and is marked " [interrupted]".
 *
 * Input: on a terminal, libedit (history in memory, arrow keys, editing);
 * otherwise lines from standard input (scriptable). A line ending in '\'
 * continues on the next line; a line `"""` opens a block ended by another
 * `"""` line. Commands: /system TEXT, /reset, /save FILE, /load FILE,
 * /help, /exit.
 *
 * Ctrl-C: the SIGINT handler only sets a flag (g_sigint). While an answer
 * streams, the flag aborts it (pagoda_engine_abort, or the transfer is cut
 * and the server drops the request) and the prompt returns. At the prompt,
 * libedit would restart a read(2) interrupted by the signal and never see
 * it, so libedit reads through our own character reader (EL_GETCFN) that
 * polls standard input in 100 ms slices and checks the flag: Ctrl-C on an
 * empty prompt exits, on a line with text discards it. */
#include <cjson/cJSON.h>
#include <curl/curl.h>
#include <errno.h>
#include <histedit.h>
#include <langinfo.h>
#include <locale.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <utf8proc.h>

#include "base/strbuf.h"
#include "cli/args.h"
#include "cli/commands.h"
#include "cli/engine_args.h"
#include "pagoda.h"

#define CMD "pagoda chat"

static const char USAGE[] =
    "usage: pagoda chat MODEL [options]\n"
    "       pagoda chat --url http://HOST:PORT [options]\n"
    "\n"
    "An interactive chat: MODEL runs in this process (a Hugging Face directory, a GGUF\n"
    "file or a hub repo id org/name[:QUANT]); --url talks to a running `pagoda serve`\n"
    "(or any OpenAI-compatible server) through /v1/chat/completions.\n"
    "\n"
    "options:\n"
    "  --url URL            server base URL (http://host:port, with or without /v1)\n"
    "  --model NAME         the model to ask with --url (default: the first of /v1/models)\n"
    "  --api-key KEY        bearer token for --url (default: env PAGODA_API_KEY)\n"
    "  --system TEXT        system prompt to start with\n"
    "  --chat-template FILE Jinja chat template overriding the model's (local mode)\n"
    "  --max-tokens N       at most N tokens per answer (default: up to the context)\n"
    "  --temperature T      0 = greedy (default: generation_config.json, else 1)\n"
    "  --top-p P            nucleus sampling, (0, 1]\n"
    "  --seed S             random seed (default: random)\n"
    "\n"
    "In the chat: a line ending in '\\' continues on the next line; a line \"\"\"\n"
    "starts a block that another \"\"\" line ends. /help lists the commands. Ctrl-C\n"
    "stops an answer; Ctrl-C or Ctrl-D at an empty prompt exits. When standard input\n"
    "is not a terminal, lines are read from it as they come (no editing), and the\n"
    "reasoning of thinking models is not printed.\n"
    "\n" PG_ENGINE_ARGS_HELP;

static const char HELP[] = "commands:\n"
                           "  /system TEXT   set the system prompt (/system alone removes it)\n"
                           "  /reset         forget the conversation (the system prompt stays)\n"
                           "  /save FILE     write the conversation as a JSON array of messages\n"
                           "  /load FILE     read a conversation written by /save\n"
                           "  /help          this list\n"
                           "  /exit          leave (also Ctrl-D, or Ctrl-C at an empty prompt)\n"
                           "input: end a line with '\\' to continue it; \"\"\" on its own line "
                           "starts and ends a block.\n"
                           "Ctrl-C stops an answer.\n";

/* ---- signals ------------------------------------------------------------ */

static volatile sig_atomic_t g_sigint;

static void on_sigint(int sig) {
    (void)sig;
    g_sigint = 1;
}

/* ---- state --------------------------------------------------------------- */

typedef struct chat {
    /* local mode */
    pagoda_engine *engine;
    char *tmpl; /* --chat-template text, or NULL */
    /* --url mode */
    char base[1024]; /* ".../v1" */
    char root[1024]; /* the server root, for /tokenize */
    bool no_tokenize; /* the server has no /tokenize: estimate */
    char *model;
    const char *api_key;
    /* sampling (NAN / -1 = not given) */
    float temperature, top_p;
    long max_tokens;
    long long seed;
    cJSON *messages; /* the conversation, OpenAI format */
    int ctx;         /* the model's context in tokens (0: unknown, nothing left out) */
    int told_out;    /* messages left out of the requests that the user was told of */
    bool tty_in, tty_out;
    /* libedit */
    EditLine *el;
    History *hist;
    bool continuation; /* the prompt shows "... " */
} chat;

/* ---- the answer stream: <think> split, printing --------------------------- */

typedef struct stream {
    chat *c;
    bool in_think;
    char pend[16]; /* a tag's possible beginning held back */
    size_t npend;
    bool reasoning_shown; /* some reasoning was printed (a newline ends it) */
    pg_strbuf content;    /* the answer without reasoning */
    unsigned char u8[4];  /* a UTF-8 character cut at a chunk's end, held back */
    size_t nu8, need8;    /* its bytes so far, its length */
    bool u8_reasoning;    /* it is reasoning text */
} stream;

/* Model and server text on a terminal (issue 20 D1): it is written through
 * this filter so that it cannot drive the terminal (set the title, clear
 * the screen, write the clipboard with OSC 52...). Control characters
 * (utf8proc's category Cc: C0 but \n and \t, DEL, C1) and bytes that are
 * not valid UTF-8 (overlong, surrogates, > U+10FFFF) are written as U+FFFD,
 * one for each maximal ill-formed run (a byte that cannot continue the held
 * ones ends them and starts afresh, as Unicode recommends); valid UTF-8
 * passes unchanged. A character cut at the end of a chunk is held in s->u8
 * until the next chunk; term_flush ends it (U+FFFD if incomplete). Output
 * that is not a terminal gets the text unchanged. */
static const char REPL[] = "\xef\xbf\xbd"; /* U+FFFD */

/* Can p[0..m) still begin a well-formed character of n bytes (n from
 * utf8proc_utf8class)? utf8proc decides, on p completed with continuation
 * bytes all 0x80 or all 0xBF: where UTF-8 narrows the range of a second
 * byte (after E0, ED, F0, F4), the range keeps one of those two ends. */
static bool utf8_viable(const unsigned char *p, size_t m, size_t n) {
    for (int end = 0; end < 2 && n; end++) {
        unsigned char c[4];
        memcpy(c, p, m);
        memset(c + m, end ? 0xBF : 0x80, n - m);
        utf8proc_int32_t cp;
        if (utf8proc_iterate(c, (utf8proc_ssize_t)n, &cp) == (utf8proc_ssize_t)n) return true;
    }
    return false;
}

static void term_write(stream *s, const char *t, size_t n) {
    char out[1024];
    size_t k = 0;
    for (size_t i = 0; i < n;) {
        if (k + 8 > sizeof out) {
            fwrite(out, 1, k, stdout);
            k = 0;
        }
        unsigned char b = (unsigned char)t[i];
        if (!s->nu8) s->need8 = (size_t)utf8proc_utf8class[b];
        s->u8[s->nu8] = b;
        if (!utf8_viable(s->u8, s->nu8 + 1, s->need8)) {
            /* U+FFFD for a byte that starts no character, or for the held
             * bytes that this one cannot continue (then it starts afresh) */
            memcpy(out + k, REPL, 3), k += 3;
            if (!s->nu8) i++;
            s->nu8 = 0;
            continue;
        }
        s->nu8++;
        i++;
        if (s->nu8 < s->need8) continue;
        utf8proc_int32_t cp;
        utf8proc_iterate(s->u8, (utf8proc_ssize_t)s->nu8, &cp);
        if (utf8proc_category(cp) == UTF8PROC_CATEGORY_CC && cp != '\n' && cp != '\t') {
            memcpy(out + k, REPL, 3), k += 3;
        } else {
            memcpy(out + k, s->u8, s->nu8);
            k += s->nu8;
        }
        s->nu8 = 0;
    }
    fwrite(out, 1, k, stdout);
}

/* Ends the filtered text: a held-back incomplete character becomes U+FFFD. */
static void term_flush(stream *s) {
    if (s->nu8) fputs(REPL, stdout);
    s->nu8 = 0;
}

/* Model text to standard output: filtered on a terminal (term_write). */
static void out_text(stream *s, const char *t, size_t n) {
    if (s->c->tty_out) term_write(s, t, n);
    else fwrite(t, 1, n, stdout);
}

static void emit(stream *s, bool reasoning, const char *t, size_t n) {
    if (!n) return;
    if (s->nu8 && s->u8_reasoning != reasoning) term_flush(s); /* cut off by a switch */
    s->u8_reasoning = reasoning;
    if (reasoning) {
        if (!s->c->tty_out) return; /* scripts get the answer only */
        fputs("\x1b[2m", stdout);
        term_write(s, t, n);
        fputs("\x1b[0m", stdout);
        s->reasoning_shown = true;
    } else {
        if (s->reasoning_shown && !s->content.len) {
            fputc('\n', stdout);
            /* the answer starts after the reasoning's own newlines */
            while (n && (*t == '\n' || *t == ' '))
                t++, n--;
            if (!n) return;
        }
        out_text(s, t, n);
        pg_strbuf_add(&s->content, t, n);
    }
    fflush(stdout);
}

/* Feed answer text that may contain <think>...</think> (local mode; a
 * server without a reasoning parser), tags possibly split across calls. */
static void feed(stream *s, const char *t, size_t n) {
    char buf[4096];
    while (n || s->npend) {
        /* the held-back bytes, then as much new text as fits */
        size_t k = s->npend, take = n < sizeof buf - k ? n : sizeof buf - k;
        memcpy(buf, s->pend, k);
        memcpy(buf + k, t, take);
        k += take;
        t += take, n -= take;
        s->npend = 0;
        const char *tag = s->in_think ? "</think>" : "<think>";
        size_t tl = strlen(tag), i = 0, from = 0;
        while (i < k) {
            if (buf[i] != '<') {
                i++;
                continue;
            }
            size_t m = 0;
            while (m < tl && i + m < k && buf[i + m] == tag[m])
                m++;
            if (m == tl) { /* the tag: text before it, then switch */
                emit(s, s->in_think, buf + from, i - from);
                s->in_think = !s->in_think;
                i += tl;
                from = i;
                tag = s->in_think ? "</think>" : "<think>";
                tl = strlen(tag);
            } else if (i + m == k && !n) { /* a possible tag cut off: hold it */
                emit(s, s->in_think, buf + from, i - from);
                memcpy(s->pend, buf + i, m);
                s->npend = m;
                from = i = k;
            } else {
                i++;
            }
        }
        emit(s, s->in_think, buf + from, k - from);
        if (!n) break;
    }
}

static void feed_end(stream *s) {
    emit(s, s->in_think, s->pend, s->npend);
    s->npend = 0;
    term_flush(s);
}

/* ---- local mode ---------------------------------------------------------- */

/* The prompt of `msgs` (local mode): rendered with the chat template and
 * tokenized without BOS (the template wrote it). *ids (pagoda_free) and
 * *n; false with the error printed when `say` (else silent). */
static bool local_prompt(chat *c, const cJSON *msgs, bool say, int32_t **ids, size_t *n) {
    char *js = cJSON_PrintUnformatted(msgs), *prompt = NULL;
    *ids = NULL;
    *n = 0;
    pagoda_status st =
        js ? pagoda_apply_chat_template(c->engine, js, NULL, NULL, true, c->tmpl, &prompt)
           : PAGODA_ERR_NOMEM;
    free(js);
    bool ok = false;
    if (st == PAGODA_ERR_NOT_FOUND) {
        if (say)
            fprintf(stderr, CMD ": the model has no chat template; pass --chat-template FILE\n");
    } else if (st != PAGODA_OK ||
               pagoda_tokenize_flags(c->engine, prompt, strlen(prompt),
                                     PAGODA_TOKENIZE_PARSE_SPECIAL, ids, n) != PAGODA_OK) {
        if (say) fprintf(stderr, CMD ": %s\n", pagoda_last_error());
    } else {
        ok = true;
    }
    pagoda_free(prompt);
    return ok;
}

/* One answer from the in-process engine to `msgs`. Returns false (message
 * printed) on an error; *stopped tells an answer cut short by Ctrl-C. */
static bool reply_local(chat *c, const cJSON *msgs, stream *s, bool *stopped) {
    int32_t *ids = NULL;
    size_t n = 0;
    bool ok = false;
    if (!local_prompt(c, msgs, true, &ids, &n)) goto out;
    int ctx = pagoda_engine_max_model_len(c->engine);
    if (n == 0 || n + 1 > (size_t)ctx) {
        fprintf(stderr,
                CMD ": the prompt is %zu tokens even without the earlier turns; the context is %d "
                    "(send a shorter message or /system)\n",
                n, ctx);
        goto out;
    }
    pagoda_request req;
    pagoda_request_defaults(c->engine, &req);
    if (!isnan(c->temperature)) req.sampling.temperature = c->temperature;
    if (!isnan(c->top_p)) req.sampling.top_p = c->top_p;
    req.sampling.seed = c->seed;
    long room = ctx - (long)n;
    req.sampling.max_tokens =
        (int32_t)(c->max_tokens > 0 && c->max_tokens < room ? c->max_tokens : room);
    req.prompt_token_ids = ids;
    req.n_prompt_token_ids = n;
    uint64_t id;
    if (pagoda_engine_add_request(c->engine, &req, &id, NULL) != PAGODA_OK) {
        fprintf(stderr, CMD ": %s\n", pagoda_last_error());
        goto out;
    }
    bool aborted = false;
    ok = true;
    while (pagoda_engine_has_unfinished(c->engine)) {
        if (g_sigint && !aborted) {
            pagoda_engine_abort(c->engine, id);
            aborted = true;
        }
        size_t nout;
        if (pagoda_engine_step(c->engine, &nout) != PAGODA_OK) {
            fprintf(stderr, "\n" CMD ": %s\n", pagoda_last_error());
            ok = false;
            break;
        }
        const pagoda_output *outs = pagoda_engine_outputs(c->engine, &nout);
        for (size_t k = 0; k < nout; k++) {
            if (outs[k].id != id) continue;
            if (!aborted) feed(s, outs[k].text_delta, outs[k].text_delta_len);
            if (outs[k].finish_reason == PAGODA_FINISH_ERROR) {
                fprintf(stderr, "\n" CMD ": %s\n", outs[k].error ? outs[k].error : "error");
                ok = false;
            }
        }
    }
    *stopped = aborted;
out:
    pagoda_free(ids);
    return ok;
}

/* ---- --url mode ---------------------------------------------------------- */

typedef struct http_reply {
    CURL *curl;
    long status;
    pg_strbuf line; /* the SSE line being read */
    pg_strbuf body; /* a non-200 response */
    char *error;    /* an error event's message */
    stream *s;
    bool done;     /* [DONE] came */
    bool finished; /* a choice's finish_reason came: the answer is complete */
} http_reply;

static void sse_line(http_reply *h, const char *l) {
    if (strncmp(l, "data:", 5)) return;
    l += 5;
    while (*l == ' ')
        l++;
    if (!strcmp(l, "[DONE]")) {
        h->done = true;
        return;
    }
    cJSON *j = cJSON_Parse(l);
    if (!j) return;
    const cJSON *err = cJSON_GetObjectItem(j, "error");
    if (err && !h->error) {
        const cJSON *m = cJSON_GetObjectItem(err, "message");
        h->error = strdup(cJSON_IsString(m) ? m->valuestring : "error event");
    }
    const cJSON *ch = cJSON_GetArrayItem(cJSON_GetObjectItem(j, "choices"), 0);
    if (cJSON_IsString(cJSON_GetObjectItem(ch, "finish_reason"))) h->finished = true;
    const cJSON *d = cJSON_GetObjectItem(ch, "delta");
    const cJSON *r = cJSON_GetObjectItem(d, "reasoning_content");
    if (!cJSON_IsString(r)) r = cJSON_GetObjectItem(d, "reasoning");
    if (cJSON_IsString(r)) emit(h->s, true, r->valuestring, strlen(r->valuestring));
    const cJSON *t = cJSON_GetObjectItem(d, "content");
    if (cJSON_IsString(t)) feed(h->s, t->valuestring, strlen(t->valuestring));
    cJSON_Delete(j);
}

static size_t on_data(char *p, size_t size, size_t nm, void *ud) {
    http_reply *h = ud;
    size_t n = size * nm;
    if (g_sigint) return 0; /* Ctrl-C: cut the transfer (the server aborts the request) */
    if (!h->status) curl_easy_getinfo(h->curl, CURLINFO_RESPONSE_CODE, &h->status);
    if (h->status != 200) {
        if (h->body.len < (1u << 16)) pg_strbuf_add(&h->body, p, n);
        return n;
    }
    for (size_t i = 0; i < n; i++) {
        if (p[i] == '\n') {
            while (h->line.len && h->line.p[h->line.len - 1] == '\r')
                h->line.len--;
            if (h->line.p) h->line.p[h->line.len] = 0;
            sse_line(h, pg_strbuf_cstr(&h->line));
            h->line.len = 0;
            if (g_sigint) return 0;
        } else {
            pg_strbuf_add(&h->line, p + i, 1);
        }
    }
    return n;
}

static int on_progress(void *ud, curl_off_t a, curl_off_t b, curl_off_t c, curl_off_t d) {
    (void)ud, (void)a, (void)b, (void)c, (void)d;
    return g_sigint ? 1 : 0;
}

/* A request to base + path with the JSON and auth headers (*hdrs: free
 * with curl_slist_free_all). */
static CURL *http_new_at(const chat *c, const char *base, const char *path,
                         struct curl_slist **hdrs) {
    CURL *curl = curl_easy_init();
    if (!curl) return NULL;
    char url[1200], auth[1100];
    snprintf(url, sizeof url, "%s%s", base, path);
    curl_easy_setopt(curl, CURLOPT_URL, url);
    curl_easy_setopt(curl, CURLOPT_CONNECTTIMEOUT, 30L);
    curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
    *hdrs = curl_slist_append(NULL, "Content-Type: application/json");
    if (c->api_key && *c->api_key) {
        snprintf(auth, sizeof auth, "Authorization: Bearer %.1000s", c->api_key);
        *hdrs = curl_slist_append(*hdrs, auth);
    }
    curl_easy_setopt(curl, CURLOPT_HTTPHEADER, *hdrs);
    return curl;
}

/* A request to the API: c->base ("/v1") + path. */
static CURL *http_new(const chat *c, const char *path, struct curl_slist **hdrs) {
    return http_new_at(c, c->base, path, hdrs);
}

/* The error text of a failed response: its JSON error.message, else the body. */
static void print_http_error(long status, const pg_strbuf *body) {
    cJSON *j = body->len ? cJSON_ParseWithLength(body->p, body->len) : NULL;
    const cJSON *m = cJSON_GetObjectItem(cJSON_GetObjectItem(j, "error"), "message");
    if (cJSON_IsString(m))
        fprintf(stderr, CMD ": the server answered %ld: %s\n", status, m->valuestring);
    else
        fprintf(stderr, CMD ": the server answered %ld: %.*s\n", status,
                (int)(body->len > 400 ? 400 : body->len), body->len ? body->p : "");
    cJSON_Delete(j);
}

static size_t collect(char *p, size_t size, size_t nm, void *ud) {
    pg_strbuf_add(ud, p, size * nm);
    return size * nm;
}

/* --model, else the first model of GET /v1/models; c->ctx from that
 * model's max_model_len (vLLM and pagoda list it). With --model a server
 * that does not answer /v1/models is no error (ctx stays unknown). */
static bool pick_model(chat *c) {
    bool named = c->model != NULL;
    struct curl_slist *hdrs = NULL;
    CURL *curl = http_new(c, "/models", &hdrs);
    pg_strbuf body = {0};
    bool ok = named;
    if (!curl) goto out;
    curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, collect);
    curl_easy_setopt(curl, CURLOPT_WRITEDATA, &body);
    curl_easy_setopt(curl, CURLOPT_TIMEOUT, 60L);
    CURLcode rc = curl_easy_perform(curl);
    long status = 0;
    curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &status);
    if (rc != CURLE_OK) {
        if (!named) fprintf(stderr, CMD ": cannot reach %s: %s\n", c->base, curl_easy_strerror(rc));
        goto out;
    }
    if (status != 200) {
        if (!named) print_http_error(status, &body);
        goto out;
    }
    cJSON *j = cJSON_ParseWithLength(body.p, body.len);
    const cJSON *data = cJSON_GetObjectItem(j, "data"), *m = cJSON_GetArrayItem(data, 0);
    if (named) { /* the named one, if listed */
        const cJSON *x;
        m = NULL;
        cJSON_ArrayForEach(x, data) {
            const cJSON *id = cJSON_GetObjectItem(x, "id");
            if (cJSON_IsString(id) && !strcmp(id->valuestring, c->model)) m = x;
        }
    }
    const cJSON *id = cJSON_GetObjectItem(m, "id");
    const cJSON *len = cJSON_GetObjectItem(m, "max_model_len");
    if (cJSON_IsNumber(len) && len->valuedouble >= 1 && len->valuedouble < 1e9)
        c->ctx = (int)len->valuedouble;
    if (!named && cJSON_IsString(id)) {
        c->model = strdup(id->valuestring);
        ok = c->model != NULL;
    } else if (!named) {
        fprintf(stderr, CMD ": %s/models lists no model (give --model NAME)\n", c->base);
    }
    cJSON_Delete(j);
out:
    if (curl) curl_easy_cleanup(curl);
    curl_slist_free_all(hdrs);
    pg_strbuf_free(&body);
    return ok;
}

/* Prompt tokens of `msgs` as the server renders them: POST {root}/tokenize
 * with {"model", "messages"} (vLLM's and pagoda's shape) -> "count". -1
 * when the server cannot say (then c->no_tokenize: not asked again). */
static long http_count(chat *c, const cJSON *msgs) {
    if (c->no_tokenize) return -1;
    cJSON *req = cJSON_CreateObject();
    cJSON_AddStringToObject(req, "model", c->model);
    cJSON_AddItemReferenceToObject(req, "messages", (cJSON *)msgs);
    char *js = cJSON_PrintUnformatted(req);
    cJSON_Delete(req);
    struct curl_slist *hdrs = NULL;
    CURL *curl = js ? http_new_at(c, c->root, "/tokenize", &hdrs) : NULL;
    pg_strbuf body = {0};
    long n = -1;
    if (curl) {
        curl_easy_setopt(curl, CURLOPT_POSTFIELDS, js);
        curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, collect);
        curl_easy_setopt(curl, CURLOPT_WRITEDATA, &body);
        curl_easy_setopt(curl, CURLOPT_TIMEOUT, 60L);
        long status = 0;
        if (curl_easy_perform(curl) == CURLE_OK) {
            curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &status);
            cJSON *j = status == 200 ? cJSON_ParseWithLength(body.p, body.len) : NULL;
            const cJSON *cnt = cJSON_GetObjectItem(j, "count");
            if (cJSON_IsNumber(cnt) && cnt->valuedouble >= 0) n = (long)cnt->valuedouble;
            cJSON_Delete(j);
            if (n < 0 && (status == 404 || status == 405 || status == 200)) c->no_tokenize = true;
        }
        curl_easy_cleanup(curl);
    }
    curl_slist_free_all(hdrs);
    pg_strbuf_free(&body);
    free(js);
    return n;
}

/* One streamed answer from the server to `msgs`. Returns false (message
 * printed) when nothing usable came; *stopped tells an answer cut short by
 * Ctrl-C, *interrupted one whose stream ended (or broke) before its
 * finish_reason: what came is kept, the error printed. */
static bool reply_http(chat *c, const cJSON *msgs, stream *s, bool *stopped, bool *interrupted) {
    cJSON *req = cJSON_CreateObject();
    cJSON_AddStringToObject(req, "model", c->model);
    cJSON_AddItemReferenceToObject(req, "messages", (cJSON *)msgs);
    cJSON_AddBoolToObject(req, "stream", true);
    if (!isnan(c->temperature)) cJSON_AddNumberToObject(req, "temperature", c->temperature);
    if (!isnan(c->top_p)) cJSON_AddNumberToObject(req, "top_p", c->top_p);
    if (c->max_tokens > 0) cJSON_AddNumberToObject(req, "max_tokens", (double)c->max_tokens);
    if (c->seed >= 0) cJSON_AddNumberToObject(req, "seed", (double)c->seed);
    char *body = cJSON_PrintUnformatted(req);
    cJSON_Delete(req);
    struct curl_slist *hdrs = NULL;
    http_reply h = {.s = s};
    bool ok = false;
    CURL *curl = body ? http_new(c, "/chat/completions", &hdrs) : NULL;
    if (!curl) {
        fprintf(stderr, CMD ": out of memory\n");
        goto out;
    }
    h.curl = curl;
    curl_easy_setopt(curl, CURLOPT_POSTFIELDS, body);
    curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, on_data);
    curl_easy_setopt(curl, CURLOPT_WRITEDATA, &h);
    curl_easy_setopt(curl, CURLOPT_NOPROGRESS, 0L);
    curl_easy_setopt(curl, CURLOPT_XFERINFOFUNCTION, on_progress);
    CURLcode rc = curl_easy_perform(curl);
    *stopped = g_sigint && (rc == CURLE_ABORTED_BY_CALLBACK || rc == CURLE_WRITE_ERROR);
    bool got = s->content.len || s->reasoning_shown; /* some of the answer came */
    if (*stopped) {
        ok = true;
    } else if (rc != CURLE_OK) {
        fprintf(stderr, "\n" CMD ": %s: %s\n", c->base, curl_easy_strerror(rc));
        if (h.status == 200 && got) ok = *interrupted = true; /* the connection broke mid-answer */
    } else if (h.status != 200) {
        print_http_error(h.status, &h.body);
    } else if (h.error) {
        fprintf(stderr, "\n" CMD ": %s\n", h.error);
    } else if (!h.finished) {
        fprintf(stderr, "\n" CMD ": the stream from %s ended before the answer did\n", c->base);
        ok = *interrupted = got;
    } else {
        ok = true;
    }
out:
    if (curl) curl_easy_cleanup(curl);
    curl_slist_free_all(hdrs);
    free(body);
    pg_strbuf_free(&h.line);
    pg_strbuf_free(&h.body);
    free(h.error);
    return ok;
}

/* ---- the conversation ---------------------------------------------------- */

static void add_message(cJSON *msgs, const char *role, const char *text) {
    cJSON *m = cJSON_CreateObject();
    cJSON_AddStringToObject(m, "role", role);
    cJSON_AddStringToObject(m, "content", text);
    cJSON_AddItemToArray(msgs, m);
}

static bool has_system(const chat *c) {
    const cJSON *first = cJSON_GetArrayItem(c->messages, 0);
    const cJSON *role = cJSON_GetObjectItem(first, "role");
    return cJSON_IsString(role) && !strcmp(role->valuestring, "system");
}

static void set_system(chat *c, const char *text) {
    if (has_system(c)) cJSON_DeleteItemFromArray(c->messages, 0);
    if (!text || !*text) return;
    cJSON *m = cJSON_CreateObject();
    cJSON_AddStringToObject(m, "role", "system");
    cJSON_AddStringToObject(m, "content", text);
    cJSON_InsertItemInArray(c->messages, 0, m);
}

/* A conversation file: a JSON array of {"role": string, "content": string}.
 * NULL with a message in err otherwise. */
static cJSON *load_conversation(const char *path, char *err, size_t cap) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        snprintf(err, cap, "cannot read %s: %s", path, strerror(errno));
        return NULL;
    }
    pg_strbuf b = {0};
    char chunk[8192];
    size_t r;
    while ((r = fread(chunk, 1, sizeof chunk, f)) > 0)
        pg_strbuf_add(&b, chunk, r);
    fclose(f);
    cJSON *j = b.len ? cJSON_ParseWithLength(b.p, b.len) : NULL;
    pg_strbuf_free(&b);
    if (!cJSON_IsArray(j)) {
        snprintf(err, cap, "%s is not a JSON array of messages", path);
        cJSON_Delete(j);
        return NULL;
    }
    int i = 0;
    const cJSON *m;
    cJSON_ArrayForEach(m, j) {
        const cJSON *role = cJSON_GetObjectItem(m, "role");
        const cJSON *content = cJSON_GetObjectItem(m, "content");
        if (!cJSON_IsString(role) || !cJSON_IsString(content)) {
            snprintf(err, cap, "%s: message %d needs string \"role\" and \"content\"", path, i);
            cJSON_Delete(j);
            return NULL;
        }
        const char *rn = role->valuestring;
        if (strcmp(rn, "user") && strcmp(rn, "assistant") && (strcmp(rn, "system") || i)) {
            snprintf(err, cap,
                     "%s: message %d has role \"%.40s\" (a conversation has \"user\" and "
                     "\"assistant\" messages after an optional first \"system\")",
                     path, i, rn);
            cJSON_Delete(j);
            return NULL;
        }
        i++;
    }
    return j;
}

/* ---- fitting the conversation to the context ----------------------------- */

/* The messages sent when the conversation is sent from message `from` on:
 * the system prompt (if any), then messages[from..]. A new array. */
static cJSON *messages_from(const chat *c, int from) {
    cJSON *a = cJSON_CreateArray();
    bool sys = has_system(c);
    int i = 0;
    const cJSON *m;
    cJSON_ArrayForEach(m, c->messages) {
        if ((i == 0 && sys) || i >= from) cJSON_AddItemToArray(a, cJSON_Duplicate(m, true));
        i++;
    }
    return a;
}

/* Prompt tokens of `msgs`: exact (the local template and tokenizer, or the
 * server's /tokenize), else an upper bound: a byte-level or byte-fallback
 * tokenizer makes at most one token per UTF-8 byte, plus 16 per message for
 * the template's markup. -1 when the local template fails (the reply then
 * reports it). */
static long count_tokens(chat *c, const cJSON *msgs) {
    if (c->engine) {
        int32_t *ids;
        size_t n;
        if (!local_prompt(c, msgs, false, &ids, &n)) return -1;
        pagoda_free(ids);
        return (long)n;
    }
    long n = http_count(c, msgs);
    if (n >= 0) return n;
    n = 16;
    const cJSON *m;
    cJSON_ArrayForEach(m, msgs) {
        const cJSON *t = cJSON_GetObjectItem(m, "content");
        n += 16 + (cJSON_IsString(t) ? (long)strlen(t->valuestring) : 0);
    }
    return n;
}

/* The room kept for the answer: --max-tokens, else a quarter of the
 * context (at most 1024 tokens). */
static long answer_room(const chat *c) {
    if (c->max_tokens > 0) return c->max_tokens;
    long q = c->ctx / 4;
    return q < 1 ? 1 : q > 1024 ? 1024 : q;
}

/* The index of the first message to send: 0 when everything fits (or the
 * context is unknown), else the start (a user message) of the oldest turn
 * from which prompt + answer_room() <= ctx, by bisection over the turns
 * (leaving a turn out never makes the prompt longer). The last user
 * message (the new one) is always sent: if it does not fit alone, the
 * engine or the server says so. */
static int fit_history(chat *c) {
    int n = cJSON_GetArraySize(c->messages);
    if (c->ctx <= 0 || n < 2) return 0;
    int *starts = malloc((size_t)n * sizeof *starts), k = 0, i = 0;
    if (!starts) return 0;
    const cJSON *m;
    cJSON_ArrayForEach(m, c->messages) {
        const cJSON *role = cJSON_GetObjectItem(m, "role");
        if (cJSON_IsString(role) && !strcmp(role->valuestring, "user")) starts[k++] = i;
        i++;
    }
    int from = 0;
    long room = answer_room(c);
    for (int lo = 0, hi = k - 1, first = 1; k > 1 && lo <= hi;) {
        /* the first probe is everything (lo = 0); then bisect [1, k-1] */
        int mid = first ? 0 : (lo + hi) / 2;
        cJSON *msgs = messages_from(c, first ? 0 : starts[mid]);
        long t = count_tokens(c, msgs);
        cJSON_Delete(msgs);
        bool fits = t >= 0 && t + room <= c->ctx;
        if (first) {
            first = 0;
            if (fits) break;
            lo = 1;
            from = starts[k - 1];
            continue;
        }
        if (fits) {
            from = starts[mid];
            hi = mid - 1;
        } else {
            lo = mid + 1;
        }
    }
    free(starts);
    return from;
}

/* Handles a /command line; false when the chat should end. */
static bool command(chat *c, const char *line) {
    const char *arg = line + strcspn(line, " \t");
    size_t nlen = (size_t)(arg - line);
    while (*arg == ' ' || *arg == '\t')
        arg++;
#define IS(name) (nlen == strlen(name) && !strncmp(line, name, nlen))
    if (IS("/exit") || IS("/quit")) return false;
    if (IS("/help")) {
        fputs(HELP, stdout);
    } else if (IS("/system")) {
        set_system(c, arg);
        printf(*arg ? "(system prompt set)\n" : "(system prompt removed)\n");
    } else if (IS("/reset")) {
        cJSON *sys = has_system(c) ? cJSON_DetachItemFromArray(c->messages, 0) : NULL;
        cJSON_Delete(c->messages);
        c->messages = cJSON_CreateArray();
        if (sys) cJSON_AddItemToArray(c->messages, sys);
        c->told_out = 0;
        printf("(conversation cleared%s)\n", sys ? "; the system prompt stays" : "");
    } else if (IS("/save")) {
        if (!*arg) {
            fprintf(stderr, "/save needs a file name\n");
            return true;
        }
        char *js = cJSON_Print(c->messages);
        FILE *f = fopen(arg, "wb");
        bool ok = js && f && fputs(js, f) >= 0 && fputc('\n', f) != EOF;
        if (f && fclose(f)) ok = false;
        if (ok)
            printf("(saved %d messages to %s)\n", cJSON_GetArraySize(c->messages), arg);
        else
            fprintf(stderr, "/save: cannot write %s: %s\n", arg, strerror(errno));
        free(js);
    } else if (IS("/load")) {
        char err[600];
        cJSON *j = *arg ? load_conversation(arg, err, sizeof err) : NULL;
        if (!*arg) snprintf(err, sizeof err, "needs a file name");
        if (!j) {
            fprintf(stderr, "/load: %s\n", err);
            return true;
        }
        cJSON_Delete(c->messages);
        c->messages = j;
        c->told_out = 0;
        printf("(loaded %d messages from %s)\n", cJSON_GetArraySize(j), arg);
    } else {
        fprintf(stderr, "unknown command %.*s (/help lists them)\n", (int)nlen, line);
    }
    fflush(stdout);
    return true;
#undef IS
}

/* ---- input --------------------------------------------------------------- */

static char *prompt_fn(EditLine *el) {
    chat *c;
    el_get(el, EL_CLIENTDATA, &c);
    return c->continuation ? "... " : ">>> ";
}

/* libedit's character reader (EL_GETCFN): standard input polled in 100 ms
 * slices so that Ctrl-C (g_sigint, set by the handler) is seen at once;
 * UTF-8 decoded into a wide character by utf8proc (U+FFFD for bytes that
 * are not a character). Returns 1, 0 at end of input, -1 on Ctrl-C or an
 * error. */
static int getc_fn(EditLine *el, wchar_t *out) {
    (void)el;
    unsigned char b[4];
    size_t have = 0, need = 1;
    while (have < need) {
        if (g_sigint) return -1;
        struct pollfd p = {.fd = STDIN_FILENO, .events = POLLIN};
        int r = poll(&p, 1, 100);
        if (r < 0 && errno != EINTR) return -1;
        if (r <= 0) continue;
        ssize_t k = read(STDIN_FILENO, b + have, 1);
        if (k < 0 && errno == EINTR) continue;
        if (k < 0) return -1;
        if (k == 0) return 0;
        if (have++ == 0) {
            need = (size_t)utf8proc_utf8class[b[0]];
            if (!need) need = 1; /* a byte that starts no character */
        } else if ((b[have - 1] & 0xC0) != 0x80) {
            return *out = 0xFFFD, 1; /* a broken sequence */
        }
    }
    utf8proc_int32_t cp;
    if (utf8proc_iterate(b, (utf8proc_ssize_t)need, &cp) != (utf8proc_ssize_t)need) cp = 0xFFFD;
    *out = (wchar_t)cp;
    return 1;
}

/* One physical line: 1 read (malloc'ed in *line, no newline), 0 end of
 * input, -1 Ctrl-C (on the terminal). */
static int read_line(chat *c, char **line) {
    *line = NULL;
    if (c->el) {
        /* the terminal in libedit's mode before the prompt shows (libedit
         * itself switches at its first read): keys typed right after the
         * prompt are neither echoed by the kernel nor lost to a Ctrl-C */
        el_set(c->el, EL_PREP_TERM, 1);
        int n = 0;
        const char *l = el_gets(c->el, &n);
        el_set(c->el, EL_PREP_TERM, 0); /* back to the terminal's own mode (Ctrl-C signals) */
        if (!l || n <= 0) {
            if (g_sigint) return -1;
            return 0;
        }
        *line = strdup(l);
    } else {
        size_t cap = 0;
        ssize_t n = getline(line, &cap, stdin);
        if (n < 0) {
            free(*line);
            *line = NULL;
            return 0;
        }
    }
    if (!*line) return 0;
    size_t n = strlen(*line);
    while (n && ((*line)[n - 1] == '\n' || (*line)[n - 1] == '\r'))
        (*line)[--n] = 0;
    return 1;
}

/* One input (a line, continued lines or a """ block) in *text. 1 read,
 * 0 exit (end of input or Ctrl-C at an empty prompt), 2 Ctrl-C discarded
 * the input being typed. */
static int read_input(chat *c, char **text) {
    pg_strbuf b = {0};
    bool block = false;
    c->continuation = false;
    *text = NULL;
    g_sigint = 0;
    for (;;) {
        char *l;
        int r = read_line(c, &l);
        bool started = b.len || block || c->continuation;
        if (r < 0) {
            g_sigint = 0;
            const LineInfo *li = c->el ? el_line(c->el) : NULL;
            bool typed = li && li->lastchar > li->buffer;
            if (!typed && !started) {
                fputc('\n', stdout);
                pg_strbuf_free(&b);
                return 0;
            }
            fputs("^C\n", stdout);
            fflush(stdout);
            if (c->el) el_reset(c->el);
            pg_strbuf_free(&b);
            c->continuation = false;
            return 2;
        }
        if (r == 0) {
            if (c->tty_in) fputc('\n', stdout);
            if (!started) {
                pg_strbuf_free(&b);
                return 0;
            }
            break; /* end of input ends the block: send what came */
        }
        size_t n = strlen(l);
        if (!strcmp(l, "\"\"\"")) {
            free(l);
            if (block) break;
            if (!b.len) {
                block = true;
                c->continuation = true;
                continue;
            }
        } else if (!block && n && l[n - 1] == '\\') {
            pg_strbuf_add(&b, l, n - 1);
            pg_strbuf_add(&b, "\n", 1);
            c->continuation = true;
            free(l);
            continue;
        } else {
            pg_strbuf_add(&b, l, n);
            free(l);
            if (block) {
                pg_strbuf_add(&b, "\n", 1);
                continue;
            }
            break;
        }
    }
    c->continuation = false;
    if (block && b.len && b.p[b.len - 1] == '\n') b.p[--b.len] = 0; /* the block's last newline */
    *text = b.p ? b.p : strdup("");
    return 1;
}

/* ---- options -------------------------------------------------------------- */

typedef struct chat_options {
    const char *model, *url, *served_model, *system, *tmpl_file, *api_key;
    float temperature, top_p;
    long max_tokens;
    long long seed;
    pagoda_engine_options eng;
} chat_options;

static int parse_args(int argc, char **argv, chat_options *o) {
    *o = (chat_options){.temperature = NAN, .top_p = NAN, .seed = -1};
    o->api_key = getenv("PAGODA_API_KEY");
    pagoda_engine_options_default(&o->eng);
    static const char *const VALUED[] = {"--url",         "--model",         "--api-key",
                                         "--system",      "--chat-template", "--max-tokens",
                                         "--temperature", "--top-p",         "--seed"};
    for (int i = 1; i < argc; i++) {
        int e = pg_engine_args_parse(CMD, argc, argv, &i, &o->eng);
        if (e < 0) return 2;
        if (e > 0) continue;
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            fputs(USAGE, stdout);
            return -1;
        }
        if (!pg_args_is_option(a)) {
            if (o->model) return pg_args_unexpected(CMD, a);
            o->model = a;
            continue;
        }
        const char *v =
            pg_args_valued(CMD, argc, argv, &i, VALUED, sizeof VALUED / sizeof VALUED[0]);
        if (!v) return 2;
        long long ll;
        double d;
        if (!strcmp(a, "--url")) {
            if (strncmp(v, "http://", 7) && strncmp(v, "https://", 8))
                return pg_args_bad_value(CMD, a, v, "http://HOST:PORT");
            if (strlen(v) > 1000) return pg_args_bad_value(CMD, a, "...", "a shorter URL");
            o->url = v;
        } else if (!strcmp(a, "--model")) {
            o->served_model = v;
        } else if (!strcmp(a, "--api-key")) {
            o->api_key = v;
        } else if (!strcmp(a, "--system")) {
            o->system = v;
        } else if (!strcmp(a, "--chat-template")) {
            o->tmpl_file = v;
        } else if (!strcmp(a, "--max-tokens")) {
            if (!pg_args_long(v, 1, 1L << 30, &ll))
                return pg_args_bad_value(CMD, a, v, "an integer in [1, 2^30]");
            o->max_tokens = (long)ll;
        } else if (!strcmp(a, "--temperature")) {
            if (!pg_args_double(v, &d) || d < 0 || d > 1e6)
                return pg_args_bad_value(CMD, a, v, "a number >= 0");
            o->temperature = (float)d;
        } else if (!strcmp(a, "--top-p")) {
            if (!pg_args_double(v, &d) || !(d > 0 && d <= 1))
                return pg_args_bad_value(CMD, a, v, "a number in (0, 1]");
            o->top_p = (float)d;
        } else if (!strcmp(a, "--seed")) {
            if (!pg_args_long(v, 0, INT64_MAX, &ll))
                return pg_args_bad_value(CMD, a, v, "an integer >= 0");
            o->seed = ll;
        }
    }
    if (!o->model == !o->url) {
        fprintf(stderr, CMD ": %s\n\n",
                o->url ? "give MODEL or --url, not both" : "MODEL or --url is required");
        fputs(USAGE, stderr);
        return 2;
    }
    if (o->url && o->tmpl_file) {
        fprintf(stderr, CMD ": --chat-template is for a local MODEL (the server applies its "
                            "own; `pagoda serve --chat-template`)\n");
        return 2;
    }
    if (o->model && o->served_model) {
        fprintf(stderr, CMD ": --model names a model of the --url server\n");
        return 2;
    }
    return o->model ? pg_engine_args_check(CMD, &o->eng) : 0;
}

static char *slurp(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    pg_strbuf b = {0};
    char chunk[8192];
    size_t r;
    while ((r = fread(chunk, 1, sizeof chunk, f)) > 0)
        pg_strbuf_add(&b, chunk, r);
    fclose(f);
    return b.p ? b.p : strdup("");
}

/* The character type of the user's locale if it is UTF-8, else C.UTF-8:
 * input is decoded as UTF-8 (getc_fn) and libedit turns its wide
 * characters back into multibyte text with the locale's codeset, so in the
 * C/POSIX locale (no LANG: containers, ssh, cron) "café" came out as
 * "caf\a" and other characters as spaces, and the echo showed \U+2615. */
static void use_utf8_locale(void) {
    setlocale(LC_CTYPE, "");
    const char *cs = nl_langinfo(CODESET);
    if (cs && (!strcmp(cs, "UTF-8") || !strcmp(cs, "utf8"))) return;
    static const char *const UTF8[] = {"C.UTF-8", "C.utf8", "en_US.UTF-8"};
    for (size_t i = 0; i < sizeof UTF8 / sizeof UTF8[0]; i++)
        if (setlocale(LC_CTYPE, UTF8[i])) return;
}

/* ---- the loop ------------------------------------------------------------- */

static int run(chat *c) {
    for (;;) {
        char *text;
        int r = read_input(c, &text);
        if (r == 0) return 0;
        if (r == 2) continue;
        const char *p = text;
        while (*p == ' ' || *p == '\t' || *p == '\n')
            p++;
        if (!*p) {
            free(text);
            continue;
        }
        if (c->hist) history(c->hist, &(HistEvent){0}, H_ENTER, text);
        if (*p == '/') {
            bool go_on = command(c, p);
            free(text);
            if (!go_on) return 0;
            continue;
        }
        add_message(c->messages, "user", text);
        free(text);
        int from = fit_history(c);
        int out = from ? from - (has_system(c) ? 1 : 0) : 0; /* messages left out */
        if (out > c->told_out)
            fprintf(stderr,
                    "(the oldest %d messages no longer fit in the context of %d tokens: they "
                    "are not sent; /save keeps them)\n",
                    out, c->ctx);
        c->told_out = out;
        cJSON *msgs = messages_from(c, from);
        stream s = {.c = c};
        bool stopped = false, interrupted = false;
        g_sigint = 0;
        bool ok = c->engine ? reply_local(c, msgs, &s, &stopped)
                            : reply_http(c, msgs, &s, &stopped, &interrupted);
        cJSON_Delete(msgs);
        if (ok) feed_end(&s);
        if (s.reasoning_shown && !s.content.len) fputs("\x1b[0m", stdout);
        fputs(stopped ? " [stopped]\n" : interrupted ? " [interrupted]\n" : "\n", stdout);
        fflush(stdout);
        if (ok) {
            add_message(c->messages, "assistant", pg_strbuf_cstr(&s.content));
            if (interrupted && !c->tty_in) {
                pg_strbuf_free(&s.content);
                return 1; /* a script sees the failure */
            }
        } else {
            /* the question stays unanswered: take it back so it can be asked again */
            cJSON_DeleteItemFromArray(c->messages, cJSON_GetArraySize(c->messages) - 1);
            if (!c->tty_in) {
                pg_strbuf_free(&s.content);
                return 1; /* a script sees the failure */
            }
        }
        pg_strbuf_free(&s.content);
        g_sigint = 0;
    }
}

int pg_cmd_chat(int argc, char **argv) {
    chat_options o;
    int rc = parse_args(argc, argv, &o);
    if (rc) return rc < 0 ? 0 : rc;
    use_utf8_locale();
    chat c = {.temperature = o.temperature,
              .top_p = o.top_p,
              .max_tokens = o.max_tokens,
              .seed = o.seed,
              .api_key = o.api_key,
              .tty_in = isatty(STDIN_FILENO),
              .tty_out = isatty(STDOUT_FILENO)};
    c.messages = cJSON_CreateArray();
    if (o.system) set_system(&c, o.system);

    /* Ctrl-C sets a flag; no SA_RESTART (reads and waits see EINTR) */
    struct sigaction sa = {0};
    sa.sa_handler = on_sigint;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);

    if (o.url) {
        size_t n = strlen(o.url);
        while (n && o.url[n - 1] == '/')
            n--;
        bool v1 = n >= 3 && !strncmp(o.url + n - 3, "/v1", 3);
        snprintf(c.base, sizeof c.base, "%.*s%s", (int)n, o.url, v1 ? "" : "/v1");
        snprintf(c.root, sizeof c.root, "%.*s", (int)(v1 ? n - 3 : n), o.url);
        curl_global_init(CURL_GLOBAL_DEFAULT);
        if (o.served_model) c.model = strdup(o.served_model);
        if (!pick_model(&c)) {
            rc = 1;
            goto out;
        }
        if (c.tty_out)
            fprintf(stderr, "pagoda chat: %s at %s (/help for commands)\n", c.model, c.base);
    } else {
        if (o.tmpl_file && !(c.tmpl = slurp(o.tmpl_file))) {
            fprintf(stderr, CMD ": --chat-template: cannot read '%s': %s\n", o.tmpl_file,
                    strerror(errno));
            rc = 1;
            goto out;
        }
        if (pagoda_engine_create(o.model, &o.eng, &c.engine) != PAGODA_OK) {
            fprintf(stderr, CMD ": %s\n", pagoda_last_error());
            rc = 1;
            goto out;
        }
        char *probe = NULL; /* a model without a template: say so before the first question */
        if (pagoda_chat_template_source(c.engine, c.tmpl, &probe) != PAGODA_OK) {
            fprintf(stderr, CMD ": %s has no chat template; pass --chat-template FILE\n", o.model);
            rc = 1;
            goto out;
        }
        pagoda_free(probe);
        c.ctx = pagoda_engine_max_model_len(c.engine);
        if (c.tty_out)
            fprintf(stderr, "pagoda chat: %s, context %d tokens (/help for commands)\n",
                    pagoda_engine_model_name(c.engine), pagoda_engine_max_model_len(c.engine));
    }
    if (c.tty_in) {
        c.el = el_init("pagoda", stdin, stdout, stderr);
        c.hist = history_init();
        if (!c.el || !c.hist) {
            fprintf(stderr, CMD ": cannot set up line editing\n");
            rc = 1;
            goto out;
        }
        HistEvent ev;
        history(c.hist, &ev, H_SETSIZE, 1000);
        history(c.hist, &ev, H_SETUNIQUE, 1);
        el_set(c.el, EL_CLIENTDATA, &c);
        el_set(c.el, EL_EDITOR, "emacs");
        el_set(c.el, EL_PROMPT, prompt_fn);
        el_set(c.el, EL_HIST, history, c.hist);
        el_set(c.el, EL_GETCFN, getc_fn);
        el_source(c.el, NULL); /* the user's ~/.editrc, if any */
    }
    rc = run(&c);
out:
    if (c.el) el_end(c.el);
    if (c.hist) history_end(c.hist);
    cJSON_Delete(c.messages);
    pagoda_engine_free(c.engine);
    free(c.tmpl);
    free(c.model);
    if (o.url) curl_global_cleanup();
    return rc;
}
