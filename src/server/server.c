/* The HTTP side of `pagoda serve` (see server.h): routing, auth, limits,
 * the engine thread, non-streamed and SSE responses. */
#define _GNU_SOURCE
#include "server/structured.h"
#include "server/server.h"

#include <arpa/inet.h>
#include <cjson/cJSON.h>
#include <errno.h>
#include <microhttpd.h>
#include <netdb.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "base/log.h"
#include "tokenizer/harmony.h"
#include "server/conn_guard.h"
#include "server/harmony_chat.h"
#include "server/tool_calls.h"
#include "server/webui.h"
#include "server/metrics.h"
#include "server/openai.h"
#include "server/server_internal.h"

#define DEFAULT_MAX_BODY ((size_t)16 << 20)
#define DEFAULT_MAX_STREAM_BUFFER ((size_t)4 << 20)
#define DEFAULT_REQUEST_TIMEOUT 30
#define DEFAULT_KEEPALIVE_TIMEOUT 5
#define DEFAULT_MAX_CONNECTIONS 4096
#define FD_RESERVE 64        /* descriptors kept free beyond those open at start */
#define FDS_PER_CONNECTION 2 /* the socket and the guard's dup of it */
#define WAIT_SLICE_MS PG_SRV_WAIT_SLICE_MS
#define DEFAULT_MAX_AUDIO_BYTES ((size_t)25 << 20)
#define DEFAULT_MAX_AUDIO_SECONDS 1800.0

uint64_t pg_srv_mix64(uint64_t x) {
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

double pg_srv_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* ----------------------------------------------------------- responses */

enum MHD_Result pg_srv_send_text(struct MHD_Connection *c, unsigned status, const char *ctype,
                                 char *body_owned, size_t len, const char *extra_hdr,
                                 const char *extra_val) {
    struct MHD_Response *r = MHD_create_response_from_buffer(
        len, body_owned ? body_owned : (void *)"",
        body_owned ? MHD_RESPMEM_MUST_FREE : MHD_RESPMEM_PERSISTENT);
    if (!r) {
        free(body_owned);
        return MHD_NO;
    }
    if (ctype) MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, ctype);
    if (extra_hdr) MHD_add_response_header(r, extra_hdr, extra_val);
    enum MHD_Result ret = MHD_queue_response(c, status, r);
    MHD_destroy_response(r);
    return ret;
}

static enum MHD_Result send_json(struct MHD_Connection *c, unsigned status, char *json) {
    if (!json) return pg_srv_send_text(c, 500, "text/plain", NULL, 0, NULL, NULL);
    return pg_srv_send_text(c, status, "application/json", json, strlen(json), NULL, NULL);
}

enum MHD_Result pg_srv_send_error(struct MHD_Connection *c, const pg_api_error *err) {
    char *js = pg_api_error_json(err);
    if (!js) return MHD_NO;
    const char *hdr = NULL, *val = NULL;
    if (err->status == 503) hdr = MHD_HTTP_HEADER_RETRY_AFTER, val = "1";
    if (err->status == 401) hdr = MHD_HTTP_HEADER_WWW_AUTHENTICATE, val = "Bearer";
    if (err->status == 405) hdr = MHD_HTTP_HEADER_ALLOW, val = "GET, POST";
    return pg_srv_send_text(c, (unsigned)err->status, "application/json", js, strlen(js), hdr, val);
}

/* 503 while draining, with `Connection: close` so that a kept-alive client
 * opens its next connection elsewhere (this server no longer listens). */
static enum MHD_Result send_shutting_down(struct MHD_Connection *c) {
    pg_api_error err;
    pg_api_fail(&err, 503, NULL, "server shutting down: not accepting new requests");
    char *js = pg_api_error_json(&err);
    if (!js) return MHD_NO;
    struct MHD_Response *r = MHD_create_response_from_buffer(strlen(js), js, MHD_RESPMEM_MUST_FREE);
    if (!r) {
        free(js);
        return MHD_NO;
    }
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "application/json");
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONNECTION, "close");
    enum MHD_Result ret = MHD_queue_response(c, 503, r);
    MHD_destroy_response(r);
    return ret;
}

static enum MHD_Result fail(struct MHD_Connection *c, int status, const char *param,
                            const char *msg) {
    pg_api_error err;
    pg_api_fail(&err, status, param, "%s", msg);
    return pg_srv_send_error(c, &err);
}

/* ------------------------------------------------------------ jobs */

static void job_free(job *j) {
    if (!j) return;
    for (size_t i = 0; i < j->n_choices; i++)
        pg_api_choice_free(&j->choices[i]);
    for (size_t i = 0; j->subs && i < j->n_choices; i++) {
        pagoda_detokenizer_free(j->subs[i].dt);
        free(j->subs[i].ids);
        free(j->subs[i].spare);
    }
    free(j->choices);
    free(j->subs);
    free(j->out);
    pg_api_request_free(&j->req);
    pagoda_grammar_free(j->grammar);
    pthread_cond_destroy(&j->cv);
    free(j);
}

/* Count choice i in the finished-request metrics once (mu held). */
static void meter_locked(job *j, size_t i, pagoda_finish_reason r, double now) {
    sub *sb = &j->subs[i];
    if (sb->metered) return;
    sb->metered = true;
    bool eng = sb->t_end > 0; /* the engine's final output came */
    pg_metrics_finished(&j->m->metrics, r, (eng ? sb->t_end : now) - sb->arrival,
                        eng ? sb->queue : -1, eng ? sb->ttft : -1);
}

/* Unregister (mu held): abort engine requests still running. */
static void job_unregister_locked(job *j) {
    pg_server *s = j->srv;
    srv_model *m = j->m;
    if (!j->registered) return;
    for (size_t i = 0; i < j->n_choices; i++) {
        sub *sb = &j->subs[i];
        if (!sb->done) {
            pagoda_engine_abort(m->e, sb->eid);
            sb->done = true;
            m->inflight--;
            meter_locked(j, i, PAGODA_FINISH_ABORT, pg_srv_now());
        }
        /* over, but the client left before the consumer finished it */
        meter_locked(j, i, sb->cut ? sb->cut_finish : sb->eng_finish, pg_srv_now());
    }
    pg_srv_wake_locked(s);
    pg_srv_job_unlink_locked(j);
}

void pg_srv_job_unlink_locked(job *j) {
    pg_server *s = j->srv;
    if (!j->registered) return;
    if (j->prev)
        j->prev->next = j->next;
    else
        s->jobs = j->next;
    if (j->next) j->next->prev = j->prev;
    j->prev = j->next = NULL;
    j->registered = false;
}

void pg_srv_wake_locked(pg_server *s) {
    s->work_seq++;
    pthread_cond_signal(&s->work_cv);
}

void pg_srv_job_register_locked(job *j) {
    pg_server *s = j->srv;
    j->prev = NULL;
    j->next = s->jobs;
    if (s->jobs) s->jobs->prev = j;
    s->jobs = j;
    j->registered = true;
    pg_srv_wake_locked(s);
}

void pg_srv_new_id(pg_server *s, const char *prefix, char *out, size_t cap, uint64_t *num) {
    /* ids: a splitmix64 stream keyed per server start (unique, not secret) */
    uint64_t x = atomic_fetch_add(&s->next_id, 0x9E3779B97F4A7C15ull);
    uint64_t a = pg_srv_mix64(x), b = pg_srv_mix64(x ^ 0xD1B54A32D192ED03ull);
    snprintf(out, cap, "%s-%016llx%016llx", prefix, (unsigned long long)a, (unsigned long long)b);
    if (num) *num = a ^ pg_srv_mix64(b);
}

static void job_log(const job *j) {
    int64_t out_tokens = 0, prompt_tokens = 0;
    double ttft = -1;
    const char *fin = "abort";
    for (size_t i = 0; i < j->n_choices; i++) {
        out_tokens += j->choices[i].n_output_tokens;
        if (i % (size_t)j->req.n == 0) prompt_tokens += j->choices[i].n_prompt_tokens;
        if (j->subs[i].first_token > 0 &&
            (ttft < 0 || j->subs[i].first_token - j->subs[i].arrival < ttft))
            ttft = j->subs[i].first_token - j->subs[i].arrival;
        if (pagoda_finish_reason_name(j->choices[i].finish))
            fin = pagoda_finish_reason_name(j->choices[i].finish);
    }
    PG_INFO(
        "%s: %zu choice%s, prompt %lld tokens, output %lld tokens, ttft %.1f ms, total %.1f ms, "
        "finish %s",
        j->id, j->n_choices, j->n_choices == 1 ? "" : "s", (long long)prompt_tokens,
        (long long)out_tokens, ttft < 0 ? -1.0 : ttft * 1e3, (pg_srv_now() - j->t_start) * 1e3,
        fin);
    int issues = 0;
    for (size_t i = 0; i < j->n_choices; i++)
        if (j->choices[i].harmony) issues += pg_hchat_issues(j->choices[i].harmony);
    if (issues)
        PG_DEBUG("%s: %d output format issue%s (malformed reasoning / tool calls delivered as "
                 "content)",
                 j->id, issues, issues == 1 ? "" : "s");
}

/* True when the peer closed its end of the connection. */
bool pg_srv_peer_gone(int fd) {
    if (fd < 0) return false;
    struct pollfd p = {.fd = fd, .events = POLLIN | POLLRDHUP};
    if (poll(&p, 1, 0) <= 0) return false;
    if (p.revents & (POLLRDHUP | POLLHUP | POLLERR)) return true;
    if (p.revents & POLLIN) {
        char b;
        ssize_t n = recv(fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
        return n == 0;
    }
    return false;
}

void pg_srv_timed_wait(pthread_cond_t *cv, pthread_mutex_t *mu) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_nsec += WAIT_SLICE_MS * 1000000L;
    if (ts.tv_nsec >= 1000000000L) ts.tv_sec++, ts.tv_nsec -= 1000000000L;
    pthread_cond_timedwait(cv, mu, &ts);
}

static void timed_wait(job *j) {
    pg_srv_timed_wait(&j->cv, &j->srv->mu);
}

/* Token text for logprobs (UTF-8-safe), decoded after the previous token so
 * that SentencePiece's leading-space rule applies as in the running text:
 * decode([prev, tok]) minus decode([prev]). prev < 0: the token alone. */
static char *token_text(pagoda_engine *e, int32_t prev, int32_t tok) {
    char *a = NULL, *b = NULL;
    size_t la = 0, lb = 0;
    int32_t pair[2] = {prev, tok};
    const char *src = NULL;
    size_t len = 0;
    if (prev >= 0 && pagoda_detokenize(e, pair, 2, false, &a, &la) == PAGODA_OK &&
        pagoda_detokenize(e, pair, 1, false, &b, &lb) == PAGODA_OK && lb <= la &&
        memcmp(a, b, lb) == 0) {
        src = a + lb;
        len = la - lb;
    }
    pagoda_free(b);
    b = NULL;
    if (!src) {
        pagoda_free(a);
        a = NULL;
        if (pagoda_detokenize(e, &tok, 1, false, &a, &la) != PAGODA_OK) return strdup("");
        src = a;
        len = la;
    }
    char *s = pg_api_utf8_dup(src, len);
    pagoda_free(a);
    return s;
}

/* Decode the token texts of logprob entries lp[0..n) that have none yet
 * (the engine thread records ids only). Connection side, mu not held:
 * the entries must be the caller's (a copy, or a finished choice's). An
 * entry whose text cannot be decoded gets "" (out of memory). */
static void logprob_texts(pagoda_engine *e, pg_api_logprob *lp, size_t n) {
    for (size_t k = 0; k < n; k++) {
        if (!lp[k].text) lp[k].text = token_text(e, lp[k].prev, lp[k].token);
        for (int32_t t = 0; t < lp[k].n_top; t++)
            if (!lp[k].top[t].text)
                lp[k].top[t].text = token_text(e, lp[k].prev, lp[k].top[t].token);
    }
}

/* Bytes a logprob entry with n_top alternatives adds to a stream before its
 * texts are decoded (the --max-stream-buffer estimate: ~16 bytes a text). */
static size_t logprob_pending_bytes(int32_t n_top) {
    return sizeof(pg_api_logprob) + (size_t)n_top * sizeof(pg_api_top) + 16 * (size_t)(1 + n_top);
}

/* Output bytes one token id adds to a stream before the connection's
 * thread turns it into text (the --max-stream-buffer estimate). */
#define TOKEN_PENDING_BYTES 4

/* Append ids[0..n) to sub's hand-over buffer (mu held). False when out of
 * memory. */
static bool ids_push(sub *sb, const int32_t *ids, size_t n) {
    if (sb->n_ids + n > sb->cap_ids) {
        size_t cap = sb->cap_ids ? 2 * sb->cap_ids : 16;
        while (cap < sb->n_ids + n)
            cap *= 2;
        int32_t *g = realloc(sb->ids, cap * sizeof *g);
        if (!g) return false;
        sb->ids = g;
        sb->cap_ids = cap;
    }
    memcpy(sb->ids + sb->n_ids, ids, n * sizeof *ids);
    sb->n_ids += n;
    return true;
}

/* Hand one engine output over to its choice (mu held): token ids and
 * logprob entries for the connection's thread (consume_locked), counts,
 * and on the final output the engine's finish. */
static void apply_output(job *j, size_t i, const pagoda_output *o, double now) {
    srv_model *m = j->m;
    pg_api_choice *ch = &j->choices[i];
    sub *sb = &j->subs[i];
    /* aborted by the server (shutdown, stream overflow): what the step in
     * flight still produced must not follow the finish event */
    if (sb->done) return;
    /* a stop string matched (consume_locked): the engine request is being
     * aborted and what it still produces is not part of the output */
    if (!sb->cut) {
        if (o->n_new_tokens && !ids_push(sb, o->new_token_ids, o->n_new_tokens)) {
            PG_ERROR("%s: out of memory taking its output", j->id);
            sb->cut = true;
            sb->cut_finish = PAGODA_FINISH_ERROR;
            if (o->finish_reason == PAGODA_FINISH_NONE) pagoda_engine_abort(m->e, sb->eid);
        }
        j->unsent += o->n_new_tokens * TOKEN_PENDING_BYTES;
    }
    const int32_t want_lp = j->req.engine_req.sampling.logprobs; /* top-N, -1 none */
    if (!sb->cut && o->logprobs && want_lp >= 0) {
        for (size_t k = 0; k < o->n_new_tokens; k++) {
            const pagoda_token_logprobs *tl = &o->logprobs[k];
            /* ids only: the texts are decoded on the connection's side */
            pg_api_logprob lp = {NULL, tl->logprob, NULL, 0, tl->token, sb->last_token};
            int32_t nt = tl->n_top < want_lp ? tl->n_top : want_lp;
            if (nt > 0 && (lp.top = calloc((size_t)nt, sizeof *lp.top))) {
                lp.n_top = nt;
                for (int32_t t = 0; t < nt; t++) {
                    lp.top[t].token = tl->top[t].token;
                    lp.top[t].logprob = tl->top[t].logprob;
                }
            }
            j->unsent += logprob_pending_bytes(lp.n_top);
            pg_api_choice_add_logprob(ch, &lp);
            sb->last_token = tl->token;
        }
    }
    if (!sb->cut) {
        ch->n_prompt_tokens = o->n_prompt_tokens;
        ch->n_output_tokens = o->n_output_tokens;
        ch->n_cached_tokens = o->n_cached_tokens;
    }
    sb->arrival = o->arrival_time;
    if (o->first_token_time > 0) sb->first_token = o->first_token_time;
    if (o->n_new_tokens && !sb->cut) { /* (tokens past a stop string are not output) */
        if (sb->last_token_time > 0)
            pg_metrics_itl(&m->metrics, (now - sb->last_token_time) / (double)o->n_new_tokens,
                           o->n_new_tokens);
        sb->last_token_time = now;
    }
    if (o->finish_reason != PAGODA_FINISH_NONE) {
        sb->eng_finish = o->finish_reason;
        sb->eng_stop_token = o->stop_token;
        if (o->finish_reason == PAGODA_FINISH_ERROR && o->error)
            PG_WARN("%s: request failed: %s", j->id, o->error);
        sb->done = true;
        j->n_done++;
        m->inflight--;
        sb->t_end = now;
        sb->queue = o->first_scheduled_time > 0 ? o->first_scheduled_time - o->arrival_time : -1;
        sb->ttft = o->first_token_time > 0 ? o->first_token_time - o->arrival_time : -1;
    }
}

/* Choice i's result is complete (mu held): its finish, stop token and, for
 * a harmony chat that the engine ended at <|return|> / <|call|>, that token
 * (the engine keeps stop tokens out of the text, but the parser needs
 * them). */
static void finalize_locked(job *j, size_t i) {
    pg_api_choice *ch = &j->choices[i];
    sub *sb = &j->subs[i];
    ch->finish = sb->cut ? sb->cut_finish : sb->server_abort ? PAGODA_FINISH_ABORT : sb->eng_finish;
    ch->stop_token = !sb->cut && ch->finish == PAGODA_FINISH_STOP ? sb->eng_stop_token : -1;
    size_t pl = 0;
    const char *piece = ch->harmony && ch->stop_token >= 0
                            ? pagoda_token_piece(j->m->e, ch->stop_token, &pl)
                            : NULL;
    if (piece && pg_hchat_is_end_token(piece, pl)) pg_api_choice_append(ch, piece, pl);
    meter_locked(j, i, ch->finish, pg_srv_now());
    sb->final = true;
    j->n_final++;
}

/* The per-request consumer (vLLM's front-end output processor): called
 * with mu held on the connection's thread, it drops mu while it turns the
 * ids the engine handed over into text (each choice's detokenizer: UTF-8
 * and stop-string hold-back as the engine's), and holds it again on
 * return. A stop string ends the choice as the engine's own match would
 * have: finish "stop" (or the engine's "length" when both end at the same
 * token), usage and logprobs counted up to the token that completed it,
 * later tokens dropped, and the engine request aborted. */
static void consume_locked(job *j) {
    pg_server *s = j->srv;
    for (int pass = 0; pass < 3; pass++) {
        bool any = false;
        for (size_t i = 0; i < j->n_choices; i++) {
            sub *sb = &j->subs[i];
            sb->c_go = sb->dt && !sb->final && !sb->cut && (sb->n_ids || sb->done);
            if (!sb->c_go) continue;
            any = true;
            int32_t *t = sb->spare;
            size_t tc = sb->cap_spare;
            sb->spare = sb->ids;
            sb->cap_spare = sb->cap_ids;
            sb->c_n = sb->n_ids;
            sb->ids = t;
            sb->cap_ids = tc;
            sb->n_ids = 0;
            sb->c_done = sb->done;
            sb->c_skip = sb->done && !sb->server_abort && sb->eng_finish == PAGODA_FINISH_STOP &&
                         sb->eng_stop_token >= 0;
        }
        if (!any) { /* nothing to detokenize: choices cut before may be over now */
            for (size_t i = 0; i < j->n_choices; i++) {
                sub *sb = &j->subs[i];
                if (!sb->final && sb->done && (sb->cut || !sb->dt)) finalize_locked(j, i);
            }
            return;
        }
        pthread_mutex_unlock(&s->mu);
        for (size_t i = 0; i < j->n_choices; i++) {
            sub *sb = &j->subs[i];
            if (!sb->c_go) continue;
            sb->c_used = 0;
            sb->c_text = NULL;
            sb->c_len = 0;
            sb->c_st = sb->c_n ? pagoda_detokenizer_add(sb->dt, sb->spare, sb->c_n, sb->c_skip,
                                                        &sb->c_used)
                               : PAGODA_OK;
            bool stopped = pagoda_detokenizer_stop_reason(sb->dt) != NULL;
            if (!sb->c_st)
                sb->c_st =
                    pagoda_detokenizer_take(sb->dt, sb->c_done || stopped, &sb->c_text, &sb->c_len);
        }
        pthread_mutex_lock(&s->mu);
        bool again = false;
        for (size_t i = 0; i < j->n_choices; i++) {
            sub *sb = &j->subs[i];
            pg_api_choice *ch = &j->choices[i];
            if (sb->c_go) {
                sb->c_go = false;
                const char *stop = pagoda_detokenizer_stop_reason(sb->dt);
                if (sb->c_st) {
                    PG_ERROR("%s: detokenizing its output failed: %s", j->id, pagoda_last_error());
                    stop = NULL;
                    sb->cut = true;
                    sb->cut_finish = PAGODA_FINISH_ERROR;
                } else if (sb->c_len) {
                    pg_api_choice_append(ch, sb->c_text, sb->c_len);
                }
                sb->n_used += sb->c_used;
                if (stop) {
                    sb->cut = true;
                    /* the engine's "length" stands when it ended at the
                     * same token (the engine keeps it then, too) */
                    bool at_end = sb->c_done && sb->c_used == sb->c_n;
                    sb->cut_finish = at_end && sb->eng_finish == PAGODA_FINISH_LENGTH
                                         ? PAGODA_FINISH_LENGTH
                                         : PAGODA_FINISH_STOP;
                    free(ch->stop_reason);
                    ch->stop_reason = strdup(stop);
                    ch->n_output_tokens = (int32_t)sb->n_used;
                    while (ch->n_lp > sb->n_used)
                        pg_api_logprob_free(&ch->lp[--ch->n_lp]);
                }
                if (sb->cut) {
                    sb->n_ids = 0;
                    if (!sb->done) {
                        pagoda_engine_abort(j->m->e, sb->eid);
                        pg_srv_wake_locked(s);
                    }
                }
                if (sb->c_done) {
                    finalize_locked(j, i);
                    continue;
                }
            }
            if (!sb->final && sb->done && (sb->cut || !sb->dt)) finalize_locked(j, i);
            if (!sb->final && sb->done) again = true;
        }
        if (!again) return;
    }
}

/* Abort what is still running of a job (mu held): its KV blocks are freed
 * at the next step and each unfinished choice gets finish_reason "abort".
 * overflow: a streamed job's stream then ends with an error (the client is
 * not reading); else the job ends normally (final events, [DONE]). */
static void job_abort_locked(job *j, bool overflow) {
    srv_model *m = j->m;
    if (overflow) j->overflow = true;
    double now = pg_srv_now();
    for (size_t i = 0; i < j->n_choices; i++) {
        sub *sb = &j->subs[i];
        if (sb->done) continue;
        pagoda_engine_abort(m->e, sb->eid);
        sb->done = sb->server_abort = true;
        j->n_done++;
        m->inflight--;
        meter_locked(j, i, sb->cut ? sb->cut_finish : PAGODA_FINISH_ABORT, now);
    }
}

/* A streamed job whose client left more than max_stream_buffer bytes of
 * output unread (mu held). */
static void job_overflow_locked(pg_server *s, job *j, size_t pending) {
    PG_WARN("%s: the client is not reading its stream: %zu bytes of output pending (limit %zu, "
            "--max-stream-buffer); request aborted",
            j->id, pending, s->max_stream_buffer);
    job_abort_locked(j, true);
}

/* Step model m's engine once and hand its outputs to the waiting jobs. */
static void step_model(pg_server *s, srv_model *m) {
    size_t n = 0;
    if (pagoda_engine_step(m->e, &n) != PAGODA_OK) {
        PG_ERROR("%s: engine step failed: %s", m->name, pagoda_last_error());
        struct timespec ts = {0, 10000000L};
        nanosleep(&ts, NULL);
        return;
    }
    const pagoda_output *outs = pagoda_engine_outputs(m->e, &n);
    if (!n) return;
    double now = pg_srv_now();
    pthread_mutex_lock(&s->mu);
    for (size_t k = 0; k < n; k++) {
        for (job *j = s->jobs; j; j = j->next) {
            if (j->m != m) continue;
            size_t i = 0;
            while (i < j->n_choices && j->subs[i].eid != outs[k].id)
                i++;
            if (i == j->n_choices) continue;
            if (j->window) {
                pg_srv_window_output(j, &outs[k], now);
            } else {
                apply_output(j, i, &outs[k], now);
                size_t pending = j->unsent + (j->out_len - j->out_off);
                if (j->req.stream && !j->overflow && pending > s->max_stream_buffer)
                    job_overflow_locked(s, j, pending);
            }
            pthread_cond_broadcast(&j->cv);
            break;
        }
    }
    pthread_mutex_unlock(&s->mu);
}

/* The one engine thread: every engine shares the process-wide thread pool,
 * so one thread steps them all, round-robin: each pass steps every engine
 * that has work once, in turn (a busy model delays another by one step,
 * never more). With nothing to do it sleeps until a request is added or
 * aborted (work_seq) or 100 ms pass. It runs until the HTTP threads are gone
 * (engine_stop), so a transcription waiting for its aborted window's last
 * output always gets it. */
/* Every 10 s (vLLM's log interval) a model that verified draft tokens logs
 * vLLM's SpecDecoding metrics line for the interval. */
static void log_spec_stats(pg_server *s) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    const double now = (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
    for (size_t k = 0; k < s->n_models; k++) {
        srv_model *m = &s->models[k];
        if (m->spec_logged_t == 0) m->spec_logged_t = now;
        if (now - m->spec_logged_t < 10.0) continue;
        pagoda_stats st;
        pagoda_engine_get_stats(m->e, &st);
        char line[512];
        if (pg_metrics_spec_line(&m->spec_logged, &st, now - m->spec_logged_t, line, sizeof line))
            PG_INFO("%s: %s", m->name, line);
        m->spec_logged = st;
        m->spec_logged_t = now;
    }
}

static void *engine_main(void *arg) {
    pg_server *s = arg;
    while (!atomic_load(&s->engine_stop)) {
        log_spec_stats(s);
        pthread_mutex_lock(&s->mu);
        uint64_t seen = s->work_seq;
        pthread_mutex_unlock(&s->mu);
        bool any = false;
        for (size_t k = 0; k < s->n_models; k++) {
            srv_model *m = &s->models[k];
            if (!pagoda_engine_has_unfinished(m->e)) continue;
            any = true;
            step_model(s, m);
        }
        if (any) continue;
        pthread_mutex_lock(&s->mu);
        if (s->work_seq == seen && !atomic_load(&s->engine_stop))
            pg_srv_timed_wait(&s->work_cv, &s->mu);
        pthread_mutex_unlock(&s->mu);
        /* idle: a tensor-parallel rank lost meanwhile ends the server now,
         * not at the next request (which would fail) */
        for (size_t k = 0; k < s->n_models; k++)
            pagoda_engine_check_ranks(s->models[k].e);
    }
    return NULL;
}

/* --------------------------------------------------------- generation */

static char *detok(pagoda_engine *e, const int32_t *ids, size_t n, bool skip_special, size_t *len) {
    char *t = NULL;
    if (pagoda_detokenize(e, ids, n, skip_special, &t, len) != PAGODA_OK) return NULL;
    char *s = malloc(*len + 1);
    if (s) {
        // NOLINTNEXTLINE(bugprone-not-null-terminated-result)
        memcpy(s, t, *len);
        s[*len] = 0;
    }
    pagoda_free(t);
    return s;
}

/* Tokenize a rendered chat prompt as vLLM does (add_special_tokens=False
 * with special-token text matched: the template wrote BOS itself). */
static pagoda_status encode_rendered(const srv_model *s, const char *text, size_t len,
                                     int32_t **ids, size_t *n) {
    if (pagoda_tokenize_flags(s->e, text, len, PAGODA_TOKENIZE_PARSE_SPECIAL, ids, n) != PAGODA_OK)
        return PAGODA_ERR_INVALID_ARG;
    return PAGODA_OK;
}

/* A harmony model's chat: pg_harmony_render of messages, tools and
 * reasoning_effort (default medium) with today's date (UTC), instead of the
 * model's Jinja template. *text is malloc'ed. */
static pagoda_status render_harmony(const pg_api_request *r, char **text, pg_api_error *err) {
    if (r->continue_final_message)
        return pg_api_fail(err, 400, "continue_final_message",
                           "'continue_final_message' is not supported for harmony (gpt-oss) "
                           "chats");
    cJSON *messages = cJSON_Parse(r->messages_json);
    cJSON *tools = r->tools_json ? cJSON_Parse(r->tools_json) : NULL;
    pagoda_status st = PAGODA_ERR_NOMEM;
    if (messages && (tools || !r->tools_json)) {
        pg_harmony_render_opts o = {0};
        o.reasoning_effort = r->reasoning_effort;
        o.add_generation_prompt = r->add_generation_prompt;
        st = pg_harmony_render(messages, tools, &o, text);
    }
    cJSON_Delete(messages);
    cJSON_Delete(tools);
    if (st == PAGODA_ERR_NOMEM) return pg_api_fail(err, 500, NULL, "out of memory");
    if (st) return pg_api_fail(err, 400, "messages", "%s", pagoda_last_error());
    return *text ? PAGODA_OK : pg_api_fail(err, 500, NULL, "out of memory");
}

/* Render a chat request's messages (continue_final_message: cut after the
 * final message's text). *text is malloc'ed. */
static pagoda_status render_chat(const srv_model *s, const pg_api_request *r, char **text,
                                 pg_api_error *err) {
    if (s->harmony) return render_harmony(r, text, err);
    char *t = NULL;
    if (pagoda_apply_chat_template(s->e, r->messages_json, r->tools_json, r->kwargs_json,
                                   r->add_generation_prompt, s->srv->chat_template,
                                   &t) != PAGODA_OK)
        return pg_api_fail(err, 400, "messages", "%s", pagoda_last_error());
    size_t keep = strlen(t);
    if (r->continue_final_message &&
        pg_api_continue_final(t, keep, r->final_text, &keep, err) != PAGODA_OK) {
        pagoda_free(t);
        return PAGODA_ERR_INVALID_ARG;
    }
    *text = strndup(t, keep);
    pagoda_free(t);
    return *text ? PAGODA_OK : pg_api_fail(err, 500, NULL, "out of memory");
}

/* Tokenize every prompt (chat: render the template first) and check lengths.
 * On success ids[i] / n_ids[i] are malloc'ed and echo texts set. */
static pagoda_status prepare_prompts(const srv_model *s, job *j, int32_t ***ids_out, size_t **n_out,
                                     pg_api_error *err) {
    pg_api_request *r = &j->req;
    if (r->kind == PG_API_CHAT) {
        char *text = NULL;
        if (render_chat(s, r, &text, err)) return PAGODA_ERR_INVALID_ARG;
        r->prompts = calloc(1, sizeof *r->prompts);
        if (!r->prompts) {
            free(text);
            return pg_api_fail(err, 500, NULL, "out of memory");
        }
        r->n_prompts = 1;
        r->prompts[0].text = text;
        r->prompts[0].text_len = strlen(text);
    }
    int32_t **ids = calloc(r->n_prompts, sizeof *ids);
    size_t *n = calloc(r->n_prompts, sizeof *n);
    *ids_out = ids;
    *n_out = n;
    if (!ids || !n) return pg_api_fail(err, 500, NULL, "out of memory");
    int32_t vocab = pagoda_engine_vocab_size(s->e);
    for (size_t p = 0; p < r->n_prompts; p++) {
        pg_api_prompt *pr = &r->prompts[p];
        if (pr->text) {
            pagoda_status st =
                r->kind == PG_API_CHAT
                    ? encode_rendered(s, pr->text, pr->text_len, &ids[p], &n[p])
                    : pagoda_tokenize(s->e, pr->text, pr->text_len,
                                      r->engine_req.add_special_tokens, &ids[p], &n[p]);
            if (st) return pg_api_fail(err, 400, "prompt", "%s", pagoda_last_error());
        } else {
            for (size_t k = 0; k < pr->n_ids; k++) {
                if (pr->ids[k] < vocab) continue;
                if (r->n_prompts > 1)
                    return pg_api_fail(err, 400, "prompt",
                                       "'prompt' item %zu: token id %d at position %zu is out "
                                       "of the vocabulary (size %d)",
                                       p, pr->ids[k], k, vocab);
                return pg_api_fail(err, 400, "prompt",
                                   "token id %d at prompt position %zu is out of the "
                                   "vocabulary (size %d)",
                                   pr->ids[k], k, vocab);
            }
            ids[p] = malloc((pr->n_ids ? pr->n_ids : 1) * sizeof(int32_t));
            if (!ids[p]) return pg_api_fail(err, 500, NULL, "out of memory");
            memcpy(ids[p], pr->ids, pr->n_ids * sizeof(int32_t));
            n[p] = pr->n_ids;
        }
        if (pg_api_check_length((int32_t)n[p], r->engine_req.sampling.max_tokens, s->max_model_len,
                                err)) {
            /* a chat request's prompt is its messages */
            if (r->kind == PG_API_CHAT && !strcmp(err->param, "prompt"))
                snprintf(err->param, sizeof err->param, "messages");
            return PAGODA_ERR_INVALID_ARG;
        }
    }
    return PAGODA_OK;
}

static void free_ids(int32_t **ids, size_t *n, size_t count) {
    if (ids)
        for (size_t i = 0; i < count; i++)
            pagoda_free(ids[i]);
    free(ids);
    free(n);
}

/* A chat grammar that itself starts with a "<think>" block (after no or one
 * whitespace character, as the qwen3 parser allows): it owns the reasoning
 * (pg_oparse_grammar_reasoning). */
static bool grammar_writes_think(const pagoda_grammar *g) {
    static const char *const starts[] = {"<think>", " <think>", "\n<think>", "\t<think>"};
    for (size_t i = 0; i < sizeof starts / sizeof starts[0]; i++)
        if (pagoda_grammar_allows_prefix(g, starts[i], 0)) return true;
    return false;
}

/* Add the job's engine requests and register it; 503 when the queue is full. */
static pagoda_status submit(job *j, int32_t **ids, size_t *n, pg_api_error *err) {
    pg_server *s = j->srv;
    srv_model *m = j->m;
    pg_api_request *r = &j->req;
    if (!ids || !n) return pg_api_fail(err, 500, NULL, "out of memory");
    size_t per = (size_t)r->n;
    j->n_choices = r->n_prompts * per;
    j->choices = calloc(j->n_choices, sizeof *j->choices);
    j->subs = calloc(j->n_choices, sizeof *j->subs);
    if (!j->choices || !j->subs) return pg_api_fail(err, 500, NULL, "out of memory");
    bool harmony = m->harmony && r->kind == PG_API_CHAT;
    /* plain-text chats: reasoning tags and (when asked) the tool-call syntax */
    pg_oparse_opts po = {m->reasoning, false, j->parse_tools ? m->tool_format : PG_TOOLS_NONE};
    bool text_parse = !harmony && r->kind == PG_API_CHAT &&
                      (po.reasoning != PG_REASONING_NONE || po.tools != PG_TOOLS_NONE);
    if (text_parse && r->n_prompts)
        po.in_reasoning = pg_oparse_prompt_in_reasoning(r->prompts[0].text, r->prompts[0].text_len);
    /* a reasoning model's grammar applies after the reasoning */
    pg_grammar_reasoning gr = PG_GRAMMAR_WHOLE;
    if (text_parse && j->grammar && r->n_prompts && m->think_ids[0] >= 0)
        gr = pg_oparse_grammar_reasoning(m->reasoning, r->prompts[0].text, r->prompts[0].text_len,
                                         grammar_writes_think(j->grammar));
    for (size_t c = 0; c < j->n_choices; c++) {
        j->choices[c].stop_token = -1;
        pg_api_choice_append(&j->choices[c], "", 0);
        /* one output parser per choice; call ids keyed by the job and choice */
        uint64_t seed = pg_srv_mix64(j->id_num ^ pg_srv_mix64(c));
        pg_hchat **h = &j->choices[c].harmony;
        if ((harmony && pg_hchat_create(seed, h)) ||
            (text_parse && pg_hchat_create_text(seed, &po, h)))
            return pg_api_fail(err, 500, NULL, "out of memory");
        if (*h) pg_hchat_limit(*h, r->parallel_tool_calls ? 0 : 1, r->include_reasoning);
        if (r->echo) {
            const pg_api_prompt *pr = &r->prompts[c / per];
            if (pr->text) {
                pg_api_choice_append(&j->choices[c], pr->text, pr->text_len);
            } else {
                size_t len = 0;
                char *t = detok(m->e, pr->ids, pr->n_ids,
                                r->engine_req.sampling.skip_special_tokens, &len);
                if (t) pg_api_choice_append(&j->choices[c], t, len);
                free(t);
            }
            j->choices[c].text_offset0 = j->choices[c].len;
        }
        /* the choice's text is made on the connection's side (consume_locked) */
        j->subs[c].eng_stop_token = -1;
        if (pagoda_detokenizer_create(m->e, ids[c / per], n[c / per], &r->engine_req.sampling,
                                      &j->subs[c].dt) != PAGODA_OK)
            return pg_api_fail(err, 500, NULL, "%s", pagoda_last_error());
    }
    /* what every choice asks the engine for: the parsed template, the
     * grammar and the reasoning it applies after */
    pagoda_request *q = &r->engine_req;
    q->grammar = j->grammar;
    q->grammar_after_reasoning = gr != PG_GRAMMAR_WHOLE;
    q->reasoning_open = gr == PG_GRAMMAR_AFTER_OPEN;
    q->reasoning_start_id = m->think_ids[0];
    q->reasoning_end_id = m->think_ids[1];
    if (harmony && j->grammar) { /* analysis / commentary free, the final message constrained */
        q->grammar_after_reasoning = true;
        q->reasoning_open = true;
        q->reasoning_end_ids = m->harmony_final_ids;
        q->n_reasoning_end_ids = m->n_harmony_final_ids;
    }
    pthread_mutex_lock(&s->mu);
    if (atomic_load(&s->aborting)) { /* read before the drain began, parsed after its timeout */
        pthread_mutex_unlock(&s->mu);
        return pg_api_fail(err, 503, NULL, "server shutting down: not accepting new requests");
    }
    if (m->inflight + (int64_t)j->n_choices > s->inflight_limit) {
        int64_t inflight = m->inflight;
        pthread_mutex_unlock(&s->mu);
        return pg_api_fail(err, 503, NULL,
                           "server busy: %lld requests in flight, the limit is %lld "
                           "(--max-num-seqs + --max-queue); retry later",
                           (long long)inflight, (long long)s->inflight_limit);
    }
    for (size_t c = 0; c < j->n_choices; c++) {
        pagoda_request req = *q; /* the template, with this choice's prompt and seed */
        req.prompt_token_ids = ids[c / per];
        req.n_prompt_token_ids = n[c / per];
        /* token ids only: text and stop strings are the consumer's */
        req.no_detokenize = true;
        req.sampling.stop = NULL;
        req.sampling.n_stop = 0;
        if (q->sampling.seed >= 0) /* seed + i, wrapping within int64 */
            req.sampling.seed = (int64_t)(((uint64_t)q->sampling.seed + c % per) & INT64_MAX);
        if (pagoda_engine_add_request(m->e, &req, &j->subs[c].eid, NULL) != PAGODA_OK) {
            pg_api_fail(err, 400, NULL, "%s", pagoda_last_error());
            for (size_t k = 0; k < c; k++)
                pagoda_engine_abort(m->e, j->subs[k].eid);
            pthread_mutex_unlock(&s->mu);
            return PAGODA_ERR_INVALID_ARG;
        }
        j->subs[c].arrival = pg_srv_now();
        j->subs[c].last_token = n[c / per] ? ids[c / per][n[c / per] - 1] : -1;
    }
    m->inflight += (int64_t)j->n_choices;
    s->n_active++; /* until on_completed */
    pg_srv_job_register_locked(j);
    pthread_mutex_unlock(&s->mu);
    return PAGODA_OK;
}

/* Append src[0..n) to the byte buffer *buf of *len bytes. False when out
 * of memory (the buffer is unchanged). */
static bool buf_add(char **buf, size_t *len, const char *src, size_t n) {
    if (!n) return true;
    char *nb = realloc(*buf, *len + n);
    if (!nb) return false;
    // NOLINTNEXTLINE(bugprone-not-null-terminated-result): a byte buffer, not a string
    memcpy(nb + *len, src, n);
    *buf = nb;
    *len += n;
    return true;
}

/* Append a malloc'ed SSE event (consumed; NULL = none) to *buf. False when
 * out of memory. */
static bool buf_push(char **buf, size_t *len, char *ev) {
    if (!ev) return true;
    bool ok = buf_add(buf, len, ev, strlen(ev));
    free(ev);
    return ok;
}

/* What one choice has new since the last drain: taken under mu
 * (drain_take), turned into events without it (drain_format). */
typedef struct drain {
    char *text;         /* copy of the new output text (NULL: none) */
    size_t len, offset; /* its bytes, and its offset in the choice's text */
    pg_api_logprob *lp; /* copies of the new entries: texts their own, top arrays shared */
    size_t n_lp;
    bool role, fin; /* send the chat's role chunk / the finish */
    pagoda_finish_reason finish;
    const char *stop_reason; /* the choice's: set before `done`, then unchanged */
} drain;

/* mu held: take choice i's news into d and mark it sent. False when out of
 * memory. */
static bool drain_take(job *j, size_t i, drain *d) {
    pg_api_choice *ch = &j->choices[i];
    sub *sb = &j->subs[i];
    /* logprobs of the tokens the consumer kept (text is only ever theirs) */
    size_t n_lp = ch->n_lp < sb->n_used ? ch->n_lp : sb->n_used;
    size_t nt = ch->len - sb->sent_text, nl = n_lp > sb->sent_lp ? n_lp - sb->sent_lp : 0;
    memset(d, 0, sizeof *d);
    if (nt && !(d->text = malloc(nt))) return false;
    if (nl && !(d->lp = malloc(nl * sizeof *d->lp))) return false;
    if (nt) memcpy(d->text, ch->text + sb->sent_text, nt);
    if (nl) memcpy(d->lp, ch->lp + sb->sent_lp, nl * sizeof *d->lp);
    d->len = nt;
    d->offset = sb->sent_text;
    d->n_lp = nl;
    d->role = j->meta.kind == PG_API_CHAT && !sb->role_sent;
    d->fin = sb->final && !sb->finish_sent;
    d->finish = ch->finish;
    d->stop_reason = ch->stop_reason;
    sb->role_sent = true;
    sb->sent_text = ch->len;
    sb->sent_lp += nl;
    if (d->fin) sb->finish_sent = true;
    return true;
}

static void drain_free(drain *d) {
    for (size_t k = 0; k < d->n_lp; k++)
        free(d->lp[k].text); /* the top arrays stay the choice's */
    free(d->lp);
    free(d->text);
}

/* A harmony / parsed chat choice's news as chunks: the parser's deltas
 * (reasoning_content / content / tool_calls), the logprobs of the new
 * tokens on the last one, then an empty delta with the finish_reason. */
static bool format_parsed(job *j, size_t i, const drain *d, char **buf, size_t *len) {
    pg_hchat *h = j->choices[i].harmony;
    pagoda_status st = pg_hchat_feed(h, d->text ? d->text : "", d->len);
    if (!st && d->fin) st = pg_hchat_finish(h);
    cJSON *ds = st ? NULL : pg_hchat_take_deltas(h);
    if (!ds) return false;
    int nd = cJSON_GetArraySize(ds);
    bool ok = true;
    for (int k = 0; k < nd; k++) {
        bool last = k == nd - 1;
        ok &= buf_push(buf, len,
                       pg_api_chat_delta_sse(&j->meta, (int32_t)i, cJSON_DetachItemFromArray(ds, 0),
                                             last ? d->lp : NULL, last ? d->n_lp : 0, NULL, NULL,
                                             -1));
    }
    cJSON_Delete(ds);
    if (d->fin || (nd == 0 && d->n_lp))
        ok &= buf_push(buf, len,
                       pg_api_chat_delta_sse(&j->meta, (int32_t)i, NULL, nd == 0 ? d->lp : NULL,
                                             nd == 0 ? d->n_lp : 0,
                                             d->fin ? pg_hchat_finish_name(h, d->finish) : NULL,
                                             d->fin ? d->stop_reason : NULL, -1));
    return ok;
}

/* mu not held: choice i's drained news as SSE events appended to *buf
 * (logprob texts decoded, output parsers run). False when out of memory. */
static bool drain_format(job *j, size_t i, drain *d, char **buf, size_t *len) {
    bool ok = true;
    if (d->role)
        ok &= buf_push(buf, len,
                       pg_api_chunk_sse(&j->meta, (int32_t)i, true, "", 0, NULL, 0, 0,
                                        PAGODA_FINISH_NONE, NULL));
    if (!d->len && !d->n_lp && !d->fin) return ok;
    logprob_texts(j->m->e, d->lp, d->n_lp);
    if (j->choices[i].harmony) return ok && format_parsed(j, i, d, buf, len);
    return ok && buf_push(buf, len,
                          pg_api_chunk_sse(&j->meta, (int32_t)i, false, d->text ? d->text : "",
                                           d->len, d->lp, d->n_lp, d->offset,
                                           d->fin ? d->finish : PAGODA_FINISH_NONE,
                                           d->fin ? d->stop_reason : NULL));
}

/* Turn what arrived since the last call into SSE events on j->out. Called
 * with mu held; drops it while the output is detokenized (consume_locked),
 * the logprob texts are decoded, the output parsers run and the events are
 * written (the engine thread goes on stepping meanwhile), and holds it
 * again on return. */
static void stream_collect(job *j) {
    pg_server *s = j->srv;
    j->unsent = 0;
    consume_locked(j);
    drain *d = calloc(j->n_choices ? j->n_choices : 1, sizeof *d);
    bool ok = d != NULL;
    for (size_t i = 0; ok && i < j->n_choices; i++)
        ok = drain_take(j, i, &d[i]);
    pthread_mutex_unlock(&s->mu);
    char *buf = NULL;
    size_t len = 0;
    for (size_t i = 0; ok && i < j->n_choices; i++)
        ok = drain_format(j, i, &d[i], &buf, &len);
    for (size_t i = 0; d && i < j->n_choices; i++)
        drain_free(&d[i]);
    free(d);
    pthread_mutex_lock(&s->mu);
    ok = ok && buf_add(&j->out, &j->out_len, buf, len);
    free(buf);
    if (!ok) {
        PG_ERROR("%s: out of memory streaming its output", j->id);
        job_abort_locked(j, true);
        return;
    }
    if (j->n_final == j->n_choices && !j->done_sent) {
        bool all = true;
        for (size_t i = 0; i < j->n_choices; i++)
            all &= j->subs[i].finish_sent;
        if (!all) return;
        if (j->req.include_usage && !j->usage_sent) {
            pg_api_usage u = pg_api_usage_of(j->choices, j->n_choices, j->req.n);
            buf_push(&j->out, &j->out_len, pg_api_usage_sse(&j->meta, &u));
            j->usage_sent = true;
        }
        buf_push(&j->out, &j->out_len, strdup(PG_API_SSE_DONE));
        j->done_sent = true;
    }
}

/* Restart MHD's idle timer of a connection (call from its own thread).
 * MHD counts the time our handler or content reader spent waiting for the
 * engine as idle time: without this, a stream whose next token took longer
 * than the timeout would be cut right after that token (measured with MHD
 * 0.9.75). Setting the timeout to 0 and back resets the timer (microhttpd.h,
 * MHD_CONNECTION_OPTION_TIMEOUT). */
void pg_srv_restart_idle_timer(pg_server *s, struct MHD_Connection *c) {
    if (!c) return;
    MHD_set_connection_option(c, MHD_CONNECTION_OPTION_TIMEOUT, 0u);
    MHD_set_connection_option(c, MHD_CONNECTION_OPTION_TIMEOUT, s->request_timeout);
}

static ssize_t stream_reader(void *cls, uint64_t pos, char *buf, size_t max) {
    (void)pos;
    job *j = cls;
    pg_server *s = j->srv;
    bool waited = false;
    pthread_mutex_lock(&s->mu);
    for (;;) {
        if (j->overflow) { /* the client did not read; end the stream as failed */
            pthread_mutex_unlock(&s->mu);
            return MHD_CONTENT_READER_END_WITH_ERROR;
        }
        if (j->out_off < j->out_len) {
            size_t n = j->out_len - j->out_off;
            if (n > max) n = max;
            memcpy(buf, j->out + j->out_off, n);
            j->out_off += n;
            if (j->out_off == j->out_len) j->out_off = j->out_len = 0;
            pthread_mutex_unlock(&s->mu);
            if (waited) pg_srv_restart_idle_timer(s, j->mc);
            return (ssize_t)n;
        }
        if (j->done_sent) {
            pthread_mutex_unlock(&s->mu);
            return MHD_CONTENT_READER_END_OF_STREAM;
        }
        stream_collect(j);
        if (j->out_len) continue;
        if (atomic_load(&s->stopping) || pg_srv_peer_gone(j->fd)) {
            pthread_mutex_unlock(&s->mu);
            return MHD_CONTENT_READER_END_WITH_ERROR;
        }
        timed_wait(j);
        waited = true;
    }
}

/* A harmony chat's generation: special tokens kept in the text (the parser
 * reads <|channel|>, <|message|>, ...) and stop at <|return|> / <|call|>
 * besides the model's and the request's stop ids. */
static pagoda_status harmony_sampling(const srv_model *s, pg_api_request *r) {
    pagoda_sampling *sp = &r->engine_req.sampling;
    sp->skip_special_tokens = false;
    size_t n = sp->n_stop_token_ids;
    int32_t *ids = malloc((n + 2) * sizeof *ids);
    if (!ids) return PAGODA_ERR_NOMEM;
    if (n) memcpy(ids, sp->stop_token_ids, n * sizeof *ids);
    ids[n] = s->harmony_stop_ids[0];
    ids[n + 1] = s->harmony_stop_ids[1];
    free(r->stop_token_ids);
    r->stop_token_ids = ids;
    sp->stop_token_ids = ids;
    sp->n_stop_token_ids = n + 2;
    return PAGODA_OK;
}

/* A chat's tools (server/tool_calls.h): whether calls are parsed, and for
 * tool_choice "required" / a named function the grammar that forces one. */
static pagoda_status tools_setup(const srv_model *m, job *j, pg_api_error *err) {
    pg_api_request *r = &j->req;
    if (pg_tools_check(r, m->tool_format, m->harmony, m->srv->auto_tools, &j->parse_tools, err))
        return PAGODA_ERR_INVALID_ARG;
    /* the call markers may be special tokens (Mistral's [TOOL_CALLS], Hermes
     * 2 Pro's <tool_call>): keep them in the text, as vLLM's hermes and
     * mistral parsers do (adjust_request) */
    if (j->parse_tools && (m->tool_format == PG_TOOLS_MISTRAL || m->tool_format == PG_TOOLS_HERMES))
        r->engine_req.sampling.skip_special_tokens = false;
    if (!j->parse_tools || m->harmony ||
        (r->tool_choice != PG_TOOL_CHOICE_REQUIRED && r->tool_choice != PG_TOOL_CHOICE_NAMED))
        return PAGODA_OK;
    if (j->grammar)
        return pg_api_fail(err, 400, "tool_choice",
                           "tool_choice \"required\" or a named function cannot be combined with "
                           "a structured output (response_format, structured_outputs, guided_*)");
    char *spec = NULL;
    if (pg_tools_grammar_spec(r, m->tool_format, m->mistral_v11, &spec, err))
        return PAGODA_ERR_INVALID_ARG;
    pagoda_status st =
        pagoda_grammar_compile(m->e, PAGODA_GRAMMAR_EBNF_SCHEMAS, spec, 0, &j->grammar);
    free(spec);
    if (st == PAGODA_ERR_NOMEM) return pg_api_fail(err, 500, NULL, "out of memory");
    if (st)
        return pg_api_fail(err, 400, "tools",
                           "cannot force a call of these tools: a function's parameters: %s",
                           pagoda_last_error());
    return PAGODA_OK;
}

static enum MHD_Result handle_generate(conn *cc, struct MHD_Connection *c) {
    pg_server *s = cc->srv;
    pg_api_error err;
    job *j = calloc(1, sizeof *j);
    if (!j) return fail(c, 500, NULL, "out of memory");
    j->srv = s;
    j->t_start = pg_srv_now();
    pthread_cond_init(&j->cv, NULL);
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    j->fd = ci ? ci->connect_fd : -1;
    j->mc = c;
    pg_api_kind kind = cc->ep == EP_CHAT ? PG_API_CHAT : PG_API_COMPLETION;
    /* the sampling defaults are the model's (generation_config.json): parse
     * with the first model's, and again when the request names another */
    srv_model *m = &s->models[0];
    for (int pass = 0; pass < 2; pass++) {
        pagoda_sampling defaults;
        pagoda_sampling_defaults(m->e, &defaults);
        if (pass) pg_api_request_free(&j->req);
        if (pg_api_parse(kind, cc->body ? cc->body : "", cc->len, &defaults, &j->req, &err)) {
            job_free(j);
            return pg_srv_send_error(c, &err);
        }
        srv_model *want = pg_srv_route(s, j->req.model, false, &err);
        if (!want) {
            job_free(j);
            return pg_srv_send_error(c, &err);
        }
        if (want == m) break;
        m = want;
    }
    j->m = m;
    if (pg_api_check_capacity((kind == PG_API_CHAT ? 1 : j->req.n_prompts) * (size_t)j->req.n,
                              s->max_num_seqs, s->max_queue, &err) ||
        pg_structured_from_body(m->e, cc->body ? cc->body : "", cc->len,
                                m->harmony && kind == PG_API_CHAT && !m->n_harmony_final_ids,
                                &j->grammar, &err)) {
        job_free(j);
        return pg_srv_send_error(c, &err);
    }
    if (kind == PG_API_CHAT && tools_setup(m, j, &err)) {
        job_free(j);
        return pg_srv_send_error(c, &err);
    }
    pg_srv_new_id(s, kind == PG_API_CHAT ? "chatcmpl" : "cmpl", j->id, sizeof j->id, &j->id_num);
    if (j->req.request_id) /* vLLM: the caller's id (call ids stay random) */
        snprintf(j->id, sizeof j->id, "%s-%s", kind == PG_API_CHAT ? "chatcmpl" : "cmpl",
                 j->req.request_id);
    if (kind == PG_API_CHAT && m->harmony && harmony_sampling(m, &j->req)) {
        job_free(j);
        return fail(c, 500, NULL, "out of memory");
    }
    j->meta = (pg_api_meta){kind, j->id, (int64_t)time(NULL), m->name};

    int32_t **ids = NULL;
    size_t *n = NULL;
    pagoda_status st = prepare_prompts(m, j, &ids, &n, &err);
    if (!st) st = submit(j, ids, n, &err);
    free_ids(ids, n, j->req.n_prompts);
    if (st) {
        job_free(j);
        return pg_srv_send_error(c, &err);
    }
    cc->job = j; /* counted in n_active by submit */
    if (j->req.stream) {
        struct MHD_Response *r =
            MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16384, stream_reader, j, NULL);
        if (!r) return MHD_NO;
        MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "text/event-stream");
        MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
        enum MHD_Result ret = MHD_queue_response(c, 200, r);
        MHD_destroy_response(r);
        return ret;
    }
    pthread_mutex_lock(&s->mu);
    bool gone = false;
    for (;;) {
        consume_locked(j); /* text and stop strings as the tokens come */
        if (j->n_final == j->n_choices || atomic_load(&s->stopping)) break;
        timed_wait(j);
        if (j->n_done < j->n_choices && pg_srv_peer_gone(j->fd)) {
            gone = true;
            break;
        }
    }
    bool complete = j->n_final == j->n_choices;
    pthread_mutex_unlock(&s->mu);
    if (gone) return MHD_NO;
    pg_srv_restart_idle_timer(s, c);
    if (!complete) return fail(c, 503, NULL, "server shutting down");
    /* Every choice finished: the engine thread writes nothing more to the
     * job (apply_output skips done choices), so the logprob texts, output
     * parsers and JSON are done here without mu. A matched stop string
     * left the engine's later logprob entries out (consume_locked). */
    const char *error = NULL;
    for (size_t i = 0; i < j->n_choices; i++)
        if (j->choices[i].finish == PAGODA_FINISH_ERROR)
            error = "generation failed (see the server log)";
    for (size_t i = 0; i < j->n_choices && !error; i++) {
        pg_api_choice *ch = &j->choices[i];
        logprob_texts(m->e, ch->lp, ch->n_lp);
        if (ch->harmony && (pg_hchat_feed(ch->harmony, ch->text, ch->len) ||
                            pg_hchat_finish(ch->harmony)))
            error = "out of memory";
    }
    if (error) return fail(c, 500, NULL, error);
    return send_json(c, 200, pg_api_response_json(&j->meta, j->choices, j->n_choices, j->req.n));
}

/* ------------------------------------------------------------ other endpoints */

/* "`a`, `b`" (at most ~400 bytes) for messages. */
static void model_list(const pg_server *s, bool only_speech_kind, bool speech, char *out,
                       size_t cap) {
    size_t n = 0;
    out[0] = 0;
    for (size_t k = 0; k < s->n_models && n + 8 < cap; k++) {
        if (only_speech_kind && s->models[k].speech != speech) continue;
        int w = snprintf(out + n, cap - n, "%s`%.120s`", n ? ", " : "", s->models[k].name);
        if (w < 0) break;
        n += (size_t)w;
        if (n >= cap) n = cap - 1;
    }
}

srv_model *pg_srv_route(pg_server *s, const char *requested, bool want_speech, pg_api_error *err) {
    char list[420];
    if (requested) {
        for (size_t k = 0; k < s->n_models; k++) {
            srv_model *m = &s->models[k];
            if (strcmp(m->name, requested) != 0) continue;
            if (m->speech == want_speech) return m;
            if (m->speech)
                pg_api_fail(err, 400, "model",
                            "The model `%s` is a speech-to-text model: it serves "
                            "/v1/audio/transcriptions and /v1/audio/translations, not "
                            "completions or chats.",
                            requested);
            else
                pg_api_fail(err, 400, "model",
                            "The model `%s` does not transcribe audio (it is a text generation "
                            "model); name a speech-to-text model such as Whisper.",
                            requested);
            return NULL;
        }
        model_list(s, false, false, list, sizeof list);
        pg_api_fail(err, 404, "model", "The model `%s` does not exist (this server serves %s).",
                    requested, list);
        err->code = "model_not_found";
        return NULL;
    }
    for (size_t k = 0; k < s->n_models; k++)
        if (s->models[k].speech == want_speech) return &s->models[k];
    model_list(s, false, false, list, sizeof list);
    if (want_speech)
        pg_api_fail(err, 400, "model",
                    "no model on this server transcribes audio (it serves %s, text generation)",
                    list);
    else
        pg_api_fail(err, 400, "model",
                    "no model on this server generates text (it serves %s, speech to text)", list);
    return NULL;
}

/* vLLM's model card plus what each model serves: "task" (vLLM's task
 * names: "generate", "transcription") and "capabilities" (the endpoints'
 * kinds). */
static enum MHD_Result handle_models(pg_server *s, struct MHD_Connection *c) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "object", "list");
    cJSON *data = cJSON_AddArrayToObject(o, "data");
    for (size_t k = 0; k < s->n_models; k++) {
        const srv_model *sm = &s->models[k];
        cJSON *m = cJSON_CreateObject();
        cJSON_AddStringToObject(m, "id", sm->name);
        cJSON_AddStringToObject(m, "object", "model");
        cJSON_AddNumberToObject(m, "created", (double)time(NULL));
        cJSON_AddStringToObject(m, "owned_by", "pagoda");
        cJSON_AddStringToObject(m, "root", sm->name);
        cJSON_AddNullToObject(m, "parent");
        cJSON_AddNumberToObject(m, "max_model_len", sm->max_model_len);
        cJSON_AddArrayToObject(m, "permission");
        cJSON_AddStringToObject(m, "task", sm->speech ? "transcription" : "generate");
        cJSON *caps = cJSON_AddArrayToObject(m, "capabilities");
        static const char *const SPEECH[] = {"transcription", "translation"};
        static const char *const TEXT[] = {"completion", "chat", "tokenize"};
        const char *const *names = sm->speech ? SPEECH : TEXT;
        int nn = sm->speech ? 2 : 3;
        for (int i = 0; i < nn; i++)
            cJSON_AddItemToArray(caps, cJSON_CreateString(names[i]));
        cJSON_AddItemToArray(data, m);
    }
    char *js = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return send_json(c, 200, js);
}

/* /tokenize and /detokenize: any model by name (Whisper has a tokenizer
 * too); without a name the first text model, else the first model. */
static srv_model *route_tokenizer(pg_server *s, const char *requested, pg_api_error *err) {
    if (requested) {
        for (size_t k = 0; k < s->n_models; k++)
            if (!strcmp(s->models[k].name, requested)) return &s->models[k];
        return pg_srv_route(s, requested, false, err);
    }
    for (size_t k = 0; k < s->n_models; k++)
        if (!s->models[k].speech) return &s->models[k];
    return &s->models[0];
}

static enum MHD_Result handle_tokenize(conn *cc, struct MHD_Connection *c) {
    pg_server *s = cc->srv;
    pg_api_request r;
    pg_api_error err;
    srv_model *m = NULL;
    if (pg_api_parse_tokenize(cc->body ? cc->body : "", cc->len, &r, &err) ||
        !(m = route_tokenizer(s, r.model, &err))) {
        pg_api_request_free(&r);
        return pg_srv_send_error(c, &err);
    }
    char *text = NULL;
    if (r.kind == PG_API_CHAT && render_chat(m, &r, &text, &err)) {
        pg_api_request_free(&r);
        return pg_srv_send_error(c, &err);
    }
    const char *src = text ? text : r.prompts[0].text;
    size_t src_len = text ? strlen(text) : r.prompts[0].text_len;
    int32_t *ids = NULL;
    size_t n = 0;
    pagoda_status tst =
        r.kind == PG_API_CHAT && !r.engine_req.add_special_tokens
            ? encode_rendered(m, src, src_len, &ids, &n)
            : pagoda_tokenize(m->e, src, src_len, r.engine_req.add_special_tokens, &ids, &n);
    bool want_strs = r.return_token_strs;
    free(text);
    pg_api_request_free(&r);
    if (tst) return fail(c, 400, "prompt", pagoda_last_error());
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "count", (double)n);
    cJSON_AddNumberToObject(o, "max_model_len", m->max_model_len);
    cJSON *arr = cJSON_AddArrayToObject(o, "tokens");
    for (size_t i = 0; i < n; i++)
        cJSON_AddItemToArray(arr, cJSON_CreateNumber(ids[i]));
    if (want_strs) { /* vLLM: tokenizer.convert_ids_to_tokens */
        cJSON *strs = cJSON_AddArrayToObject(o, "token_strs");
        for (size_t i = 0; i < n; i++) {
            size_t pl = 0;
            const char *piece = pagoda_token_piece(m->e, ids[i], &pl);
            char *safe = pg_api_utf8_dup(piece ? piece : "", pl);
            cJSON_AddItemToArray(strs, cJSON_CreateString(safe ? safe : ""));
            free(safe);
        }
    } else {
        cJSON_AddNullToObject(o, "token_strs");
    }
    pagoda_free(ids);
    char *js = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return send_json(c, 200, js);
}

static enum MHD_Result handle_detokenize(conn *cc, struct MHD_Connection *c) {
    pg_server *s = cc->srv;
    pg_api_request r;
    pg_api_error err;
    srv_model *m = NULL;
    if (pg_api_parse_detokenize(cc->body ? cc->body : "", cc->len, &r, &err) ||
        !(m = route_tokenizer(s, r.model, &err))) {
        pg_api_request_free(&r);
        return pg_srv_send_error(c, &err);
    }
    const pg_api_prompt *pr = &r.prompts[0];
    int32_t vocab = pagoda_engine_vocab_size(m->e);
    for (size_t i = 0; i < pr->n_ids; i++)
        if (pr->ids[i] >= vocab) {
            pg_api_fail(&err, 400, "tokens",
                        "'tokens' item %zu: token id %d is out of the vocabulary [0, %d)", i,
                        pr->ids[i], vocab);
            pg_api_request_free(&r);
            return pg_srv_send_error(c, &err);
        }
    size_t len = 0;
    char *text = detok(m->e, pr->ids, pr->n_ids, false, &len);
    pg_api_request_free(&r);
    if (!text) return fail(c, 400, "tokens", pagoda_last_error());
    cJSON *o = cJSON_CreateObject();
    char *safe = pg_api_utf8_dup(text, len);
    cJSON_AddStringToObject(o, "prompt", safe ? safe : "");
    free(safe);
    free(text);
    char *js = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return send_json(c, 200, js);
}

static enum MHD_Result handle_metrics(pg_server *s, struct MHD_Connection *c) {
    pagoda_stats *st = calloc(s->n_models, sizeof *st);
    pg_metrics_model *mm = calloc(s->n_models, sizeof *mm);
    char *txt = NULL;
    if (st && mm) {
        for (size_t k = 0; k < s->n_models; k++) {
            pagoda_engine_get_stats(s->models[k].e, &st[k]);
            mm[k] = (pg_metrics_model){s->models[k].name, &s->models[k].metrics, &st[k]};
        }
        txt = pg_metrics_render_models(mm, s->n_models);
    }
    free(st);
    free(mm);
    if (!txt) return fail(c, 500, NULL, "out of memory");
    return pg_srv_send_text(c, 200, "text/plain; version=0.0.4; charset=utf-8", txt, strlen(txt),
                            NULL, NULL);
}

/* --------------------------------------------------------------- routing */

typedef struct route {
    const char *path;
    const char *method;
    endpoint ep;
    bool auth;
} route;

static const route ROUTES[] = {
    {"/health", "GET", EP_HEALTH, false},
    {"/version", "GET", EP_VERSION, false},
    {"/metrics", "GET", EP_METRICS, false},
    {"/v1/models", "GET", EP_MODELS, true},
    {"/tokenize", "POST", EP_TOKENIZE, true},
    {"/detokenize", "POST", EP_DETOKENIZE, true},
    {"/v1/completions", "POST", EP_COMPLETIONS, true},
    {"/v1/chat/completions", "POST", EP_CHAT, true},
    {"/v1/audio/transcriptions", "POST", EP_TRANSCRIPTIONS, true},
    {"/v1/audio/translations", "POST", EP_TRANSLATIONS, true},
};

/* The largest body an endpoint takes: the audio endpoints' is the file
 * limit plus room for the form's other fields and part headers. */
static size_t body_limit(const pg_server *s, endpoint ep) {
    if (ep == EP_TRANSCRIPTIONS || ep == EP_TRANSLATIONS)
        return s->max_audio_bytes + PG_AUDIO_FORM_MAX_FIELDS * (size_t)1024 + ((size_t)1 << 20);
    return s->max_body;
}

static bool auth_ok(pg_server *s, struct MHD_Connection *c) {
    if (!s->api_key) return true;
    const char *h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
    if (!h || strncasecmp(h, "Bearer ", 7) != 0) return false;
    const char *k = h + 7;
    while (*k == ' ')
        k++;
    /* constant-time compare over the key's length */
    size_t n = strlen(s->api_key), m = strlen(k);
    unsigned diff = (unsigned)(n ^ m);
    for (size_t i = 0; i < n; i++)
        diff |= (unsigned char)s->api_key[i] ^ (unsigned char)(i < m ? k[i] : 0);
    return diff == 0;
}

/* MHD_OPTION_UNESCAPE_CALLBACK for the URL path and query arguments: the
 * %XX decoding of MHD_http_unescape except that "%00" is kept as the three
 * characters, since a decoded NUL would cut the C string and
 * "/webui/app.js%00.html" would be served as "/webui/app.js" (issue 20 D5a).
 * `s` is decoded in place (NUL-terminated); returns its new length. */
static int hexval(char ch) {
    if (ch >= '0' && ch <= '9') return ch - '0';
    if (ch >= 'a' && ch <= 'f') return ch - 'a' + 10;
    if (ch >= 'A' && ch <= 'F') return ch - 'A' + 10;
    return -1;
}

static size_t unescape_keep_nul(void *cls, struct MHD_Connection *c, char *s) {
    (void)cls;
    (void)c;
    char *w = s;
    for (const char *r = s; *r;) {
        int hi = r[0] == '%' ? hexval(r[1]) : -1, lo = hi >= 0 ? hexval(r[2]) : -1;
        if (lo >= 0 && (hi | lo) != 0) {
            *w++ = (char)(hi << 4 | lo);
            r += 3;
        } else {
            *w++ = *r++;
        }
    }
    *w = 0;
    return (size_t)(w - s);
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url,
                                  const char *method, const char *version, const char *upload_data,
                                  size_t *upload_size, void **con_cls) {
    pg_server *s = cls;
    conn *cc = *con_cls;
    if (!cc) {
        cc = calloc(1, sizeof *cc);
        if (!cc) return MHD_NO;
        cc->srv = s;
        *con_cls = cc;
        /* the web chat page: static, no API key (its own calls send one) */
        const pg_webui_asset *page = s->webui ? pg_webui_find(url) : NULL;
        if (page) {
            cc->early_done = true;
            if (strcmp(method, "GET") && strcmp(method, "HEAD")) {
                pg_api_error err;
                pg_api_fail(&err, 405, NULL, "method %.16s is not allowed on %.200s", method, url);
                char *js = pg_api_error_json(&err);
                if (!js) return MHD_NO;
                return pg_srv_send_text(c, 405, "application/json", js, strlen(js),
                                        MHD_HTTP_HEADER_ALLOW, "GET, HEAD");
            }
            if (atomic_load(&s->draining)) return send_shutting_down(c);
            return pg_webui_send(c, page);
        }
        const route *rt = NULL;
        const char *allow = NULL;
        bool path_known = false;
        for (size_t i = 0; i < sizeof ROUTES / sizeof ROUTES[0]; i++) {
            if (strcmp(url, ROUTES[i].path) != 0) continue;
            path_known = true;
            bool get = !strcmp(ROUTES[i].method, "GET");
            allow = get ? "GET, HEAD" : ROUTES[i].method;
            /* HEAD is GET without the body (MHD drops the body of a HEAD reply) */
            if (!strcmp(method, ROUTES[i].method) || (get && !strcmp(method, "HEAD")))
                rt = &ROUTES[i];
        }
        cc->early_done = true;
        if (!path_known) {
            char msg[300];
            snprintf(msg, sizeof msg, "no such endpoint: %.200s", url);
            return fail(c, 404, NULL, msg);
        }
        if (!rt) {
            char msg[300];
            snprintf(msg, sizeof msg, "method %.16s is not allowed on %.200s", method, url);
            pg_api_error err;
            pg_api_fail(&err, 405, NULL, "%s", msg);
            char *js = pg_api_error_json(&err);
            if (!js) return MHD_NO;
            return pg_srv_send_text(c, 405, "application/json", js, strlen(js),
                                    MHD_HTTP_HEADER_ALLOW, allow);
        }
        /* graceful shutdown: the listening socket is closed; a request on a
         * connection already open is told to go elsewhere (/metrics still
         * answers, for the last scrape) */
        if (atomic_load(&s->draining) && rt->ep != EP_METRICS) return send_shutting_down(c);
        if (rt->auth && !auth_ok(s, c)) {
            pg_api_error err;
            pg_api_fail(&err, 401, NULL,
                        "missing or invalid API key (send 'Authorization: Bearer KEY')");
            err.code = "invalid_api_key";
            return pg_srv_send_error(c, &err);
        }
        const char *cl =
            MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
        size_t limit = body_limit(s, rt->ep);
        bool audio = rt->ep == EP_TRANSCRIPTIONS || rt->ep == EP_TRANSLATIONS;
        unsigned long long clv = cl ? strtoull(cl, NULL, 10) : 0;
        /* a body a little over the limit is read (and dropped) and answered
         * 413 at its end: a server that answers early and closes while the
         * client still uploads leaves unread data in the socket, the close
         * sends a reset, and clients (undici, the openai npm client, curl at
         * times) report a connection error instead of the 413 (the fault
         * soak saw it for JSON bodies too). The request read deadline bounds
         * the time this takes; a declared body over 4x the limit is refused
         * at once. */
        if (cl && clv > limit && clv / 4 > limit) {
            char msg[200];
            if (limit == s->max_body)
                snprintf(msg, sizeof msg,
                         "request body of %.20s bytes is over the limit of %zu bytes", cl, limit);
            else
                snprintf(msg, sizeof msg,
                         "request body of %.20s bytes is over the limit of %zu bytes (audio "
                         "files: --max-audio-bytes %zu)",
                         cl, limit, s->max_audio_bytes);
            return fail(c, 413, NULL, msg);
        }
        cc->early_done = false;
        cc->ep = rt->ep;
        if (audio) return pg_srv_audio_begin(cc, c, clv);
        return MHD_YES;
    }
    if (cc->early_done) {
        *upload_size = 0;
        return MHD_YES;
    }
    if (cc->pp) { /* the audio endpoints' multipart body */
        if (*upload_size) {
            size_t n = *upload_size;
            *upload_size = 0;
            return pg_srv_audio_chunk(cc, c, upload_data, n);
        }
        pg_guard_request_read(c);
        return pg_srv_audio_handle(cc, c);
    }
    if (*upload_size) {
        size_t n = *upload_size;
        *upload_size = 0;
        if (cc->too_big || cc->len + n > s->max_body) {
            cc->too_big = true;
            return MHD_YES;
        }
        if (cc->len + n + 1 > cc->cap) {
            size_t cap = cc->cap ? cc->cap : 4096;
            while (cap < cc->len + n + 1)
                cap *= 2;
            char *b = realloc(cc->body, cap);
            if (!b) return MHD_NO;
            cc->body = b;
            cc->cap = cap;
        }
        memcpy(cc->body + cc->len, upload_data, n);
        cc->len += n;
        cc->body[cc->len] = 0;
        return MHD_YES;
    }
    pg_guard_request_read(c); /* headers and body are in: no read deadline now */
    if (cc->too_big) {
        char msg[128];
        snprintf(msg, sizeof msg, "request body is over the limit of %zu bytes", s->max_body);
        return fail(c, 413, NULL, msg);
    }
    switch (cc->ep) {
    case EP_HEALTH:
        return pg_srv_send_text(c, 200, NULL, NULL, 0, NULL, NULL);
    case EP_VERSION: {
        char *js = strdup("{\"version\":\"" PAGODA_VERSION "\"}");
        return send_json(c, 200, js);
    }
    case EP_MODELS:
        return handle_models(s, c);
    case EP_METRICS:
        return handle_metrics(s, c);
    case EP_TOKENIZE:
        return handle_tokenize(cc, c);
    case EP_DETOKENIZE:
        return handle_detokenize(cc, c);
    case EP_COMPLETIONS:
    case EP_CHAT:
        return handle_generate(cc, c);
    default:
        return fail(c, 404, NULL, "no such endpoint");
    }
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls,
                         enum MHD_RequestTerminationCode toe) {
    (void)cls;
    /* kept alive from now (the idle deadline runs), or closing */
    pg_guard_request_done(c, toe != MHD_REQUEST_TERMINATED_COMPLETED_OK);
    conn *cc = *con_cls;
    if (!cc) return;
    if (cc->pp || cc->tjob || cc->form) pg_srv_audio_completed(cc, toe);
    if (cc->job) {
        pg_server *s = cc->srv;
        pthread_mutex_lock(&s->mu);
        bool aborted = cc->job->n_done < cc->job->n_choices;
        job_unregister_locked(cc->job);
        pthread_mutex_unlock(&s->mu);
        if (aborted) {
            if (atomic_load(&s->stopping))
                PG_INFO("%s: server shutting down, request aborted", cc->job->id);
            else if (toe == MHD_REQUEST_TERMINATED_TIMEOUT_REACHED)
                PG_INFO("%s: the client read nothing for %u s (--request-timeout), request "
                        "aborted",
                        cc->job->id, s->request_timeout);
            else
                PG_INFO("%s: client went away, request aborted", cc->job->id);
        }
        job_log(cc->job);
        job_free(cc->job);
        pg_srv_active_add(s, -1);
    }
    free(cc->body);
    free(cc);
    *con_cls = NULL;
}

/* -------------------------------------------------------------- lifecycle */

/* MHD's messages go through pagoda's logger. Those a client causes (a
 * disconnect mid-stream makes our content reader end the response with an
 * error, which MHD reports as an "internal error"; resets, timeouts, a
 * client over a limit) are DEBUG lines: the server logs its own line naming
 * the request. Other messages are warnings, at most a few per second (a
 * flood of connections must not flood the log). */
static void mhd_log(void *cls, const char *fmt, va_list ap) {
    (void)cls;
    char msg[512];
    vsnprintf(msg, sizeof msg, fmt, ap);
    size_t n = strlen(msg);
    while (n && (msg[n - 1] == '\n' || msg[n - 1] == '\r'))
        msg[--n] = 0;
    static const char *const client_caused[] = {
        "Application reported internal error",
        "closing connection",
        "Connection reset",
        "Broken pipe",
        "timed out",
        "Failed to receive",
        "Failed to send",
        "Socket disconnected",
        "reached connection limit",
        "per-IP",
        "per IP",
        "Error processing request",
        "closed by remote side",
        "application error generating response",
    };
    for (size_t i = 0; i < sizeof client_caused / sizeof client_caused[0]; i++)
        if (strstr(msg, client_caused[i])) {
            PG_DEBUG("http: %s", msg);
            return;
        }
    static _Atomic long long window;
    static atomic_int count;
    long long sec = (long long)pg_srv_now();
    if (atomic_exchange(&window, sec) != sec) atomic_store(&count, 0);
    if (atomic_fetch_add(&count, 1) < 5)
        PG_WARN("http: %s", msg);
    else
        PG_DEBUG("http: %s", msg);
}

/* The connection limit: the asked one, lowered so that every connection's
 * descriptors fit in RLIMIT_NOFILE (raised to its hard limit here) beside
 * those already open (model files, logs) and a reserve, so accept() never
 * fails with EMFILE (MHD would stop accepting, /health included). */
static int fit_connection_limit(int asked) {
    uint64_t nofile = pg_guard_raise_nofile(), used = pg_guard_open_fds() + FD_RESERVE;
    uint64_t fit = nofile > used ? (nofile - used) / FDS_PER_CONNECTION : 0;
    if (fit < 1) fit = 1;
    if ((uint64_t)asked <= fit) return asked;
    PG_WARN("http: RLIMIT_NOFILE is %llu with %llu descriptors in use: at most %llu connections "
            "(asked %d); raise `ulimit -n` for more",
            (unsigned long long)nofile, (unsigned long long)(used - FD_RESERVE),
            (unsigned long long)fit, asked);
    return (int)fit;
}

/* The id of `text` when the tokenizer has it as one (special) token, else -1. */
static int32_t single_token(const srv_model *s, const char *text) {
    int32_t *ids = NULL;
    size_t n = 0;
    if (encode_rendered(s, text, strlen(text), &ids, &n) != PAGODA_OK) return -1;
    int32_t id = n == 1 ? ids[0] : -1;
    pagoda_free(ids);
    return id;
}

/* Harmony chats: architecture gpt_oss, or a chat template (the override or
 * the model's) that writes <|channel|>; needs <|return|> and <|call|> as
 * tokens (else the model's template is used, with a warning). */
static void detect_harmony(srv_model *s, const pg_server_options *opt) {
    const char *arch = pagoda_engine_architecture(s->e);
    bool want = arch && !strcmp(arch, "gpt_oss");
    char *tpl = NULL;
    if (!want && pagoda_chat_template_source(s->e, opt->chat_template, &tpl) == PAGODA_OK)
        want = strstr(tpl, "<|channel|>") != NULL;
    pagoda_free(tpl);
    if (!want) return;
    s->harmony_stop_ids[0] = single_token(s, "<|return|>");
    s->harmony_stop_ids[1] = single_token(s, "<|call|>");
    if (s->harmony_stop_ids[0] < 0 || s->harmony_stop_ids[1] < 0) {
        PG_WARN("http: %s looks like a harmony (gpt-oss) model but its tokenizer has no "
                "<|return|> / <|call|> token: chats use its chat template",
                s->name);
        return;
    }
    s->harmony = true;
    PG_INFO("http: %s: chats in the harmony format (reasoning_content, tool_calls; stop tokens "
            "%d, %d)",
            s->name, s->harmony_stop_ids[0], s->harmony_stop_ids[1]);
    /* structured outputs constrain the final message: after these tokens */
    static const char final_head[] = "<|channel|>final<|message|>";
    int32_t *ids = NULL;
    size_t n = 0;
    if (pagoda_tokenize_flags(s->e, final_head, strlen(final_head), PAGODA_TOKENIZE_PARSE_SPECIAL,
                              &ids, &n) == PAGODA_OK &&
        n >= 1 && n <= PAGODA_MAX_REASONING_END_IDS) {
        memcpy(s->harmony_final_ids, ids, n * sizeof *ids);
        s->n_harmony_final_ids = n;
    } else {
        pg_clear_error();
        PG_WARN("http: %s: \"%s\" is not 1..%d tokens: structured outputs are not supported "
                "for its chats",
                s->name, final_head, PAGODA_MAX_REASONING_END_IDS);
    }
    pagoda_free(ids);
}

/* Reasoning tags and tool-call syntax of a (non-harmony) model's chats:
 * --tool-call-parser / --reasoning-parser, else read from its chat template. */
static void detect_output_formats(srv_model *s, const pg_server_options *opt) {
    s->think_ids[0] = s->think_ids[1] = -1;
    if (s->harmony) {
        s->tool_format = PG_TOOLS_HARMONY;
        return;
    }
    char *tpl = NULL;
    if (pagoda_chat_template_source(s->e, opt->chat_template, &tpl) == PAGODA_OK)
        pg_oparse_detect(tpl, &s->tool_format, &s->reasoning, &s->mistral_v11);
    else
        pg_clear_error();
    pagoda_free(tpl);
    if (opt->tool_call_parser) pg_tool_format_parse(opt->tool_call_parser, &s->tool_format);
    if (opt->reasoning_parser) pg_reasoning_format_parse(opt->reasoning_parser, &s->reasoning);
    if (s->tool_format == PG_TOOLS_HARMONY) {
        PG_WARN("http: %s: --tool-call-parser harmony needs a harmony (gpt-oss) model; no tool "
                "calls are parsed",
                s->name);
        s->tool_format = PG_TOOLS_NONE;
    }
    if (s->tool_format != PG_TOOLS_NONE || s->reasoning != PG_REASONING_NONE)
        PG_INFO("http: %s: chat output parsers: tool calls %s%s, reasoning %s", s->name,
                pg_tool_format_name(s->tool_format), s->mistral_v11 ? " (v11 syntax)" : "",
                pg_reasoning_format_name(s->reasoning));
    if (s->reasoning == PG_REASONING_NONE) return;
    static const char *const tags[2] = {"<think>", "</think>"};
    for (int k = 0; k < 2; k++) {
        int32_t *ids = NULL;
        size_t n = 0;
        if (pagoda_tokenize_flags(s->e, tags[k], strlen(tags[k]), PAGODA_TOKENIZE_PARSE_SPECIAL,
                                  &ids, &n) == PAGODA_OK &&
            n == 1)
            s->think_ids[k] = ids[0];
        pagoda_free(ids);
    }
    if (s->think_ids[0] < 0 || s->think_ids[1] < 0) {
        PG_WARN("http: %s: <think> / </think> are not single tokens: structured outputs and "
                "forced tool calls constrain the reasoning too",
                s->name);
        s->think_ids[0] = s->think_ids[1] = -1;
    }
}

/* What the server keeps of model k (name already set). */
static void model_init(pg_server *s, srv_model *m, pagoda_engine *e, const pg_server_options *opt) {
    m->srv = s;
    m->e = e;
    m->max_model_len = pagoda_engine_max_model_len(e);
    m->speech = pagoda_engine_encoder_input_shape(e, &m->n_mels, &m->n_frames);
    pg_metrics_init(&m->metrics);
    if (m->speech) return; /* no chats: no harmony handling */
    detect_harmony(m, opt);
    detect_output_formats(m, opt);
}

pagoda_status pg_server_start(pagoda_engine *e, const pg_server_options *opt, pg_server **out) {
    return pg_server_start_models(&e, 1, opt, out);
}

pagoda_status pg_server_start_models(pagoda_engine *const *engines, size_t n_engines,
                                     const pg_server_options *opt, pg_server **out) {
    *out = NULL;
    if (n_engines == 0) return pg_error(PAGODA_ERR_INVALID_ARG, "server: no model");
    if (n_engines > 1 && opt->served_model_name)
        return pg_error(PAGODA_ERR_INVALID_ARG,
                        "server: served_model_name names one model, not %zu", n_engines);
    pg_server *s = calloc(1, sizeof *s);
    if (!s) return pg_error(PAGODA_ERR_NOMEM, "server: out of memory");
    s->listen_fd = -1;
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->work_cv, NULL);
    s->models = calloc(n_engines, sizeof *s->models);
    if (!s->models) {
        pg_server_stop(s);
        return pg_error(PAGODA_ERR_NOMEM, "server: out of memory");
    }
    s->api_key = opt->api_key && opt->api_key[0] ? strdup(opt->api_key) : NULL;
    s->chat_template = opt->chat_template ? strdup(opt->chat_template) : NULL;
    s->auto_tools = opt->enable_auto_tool_choice;
    s->webui = !opt->disable_webui;
    for (size_t k = 0; k < n_engines; k++) {
        const char *name =
            opt->served_model_name ? opt->served_model_name : pagoda_engine_model_name(engines[k]);
        s->models[k].name = strdup(name ? name : "model");
        if (!s->models[k].name) {
            pg_server_stop(s);
            return pg_error(PAGODA_ERR_NOMEM, "server: out of memory");
        }
        s->n_models = k + 1;
        model_init(s, &s->models[k], engines[k], opt);
        for (size_t i = 0; i < k; i++)
            if (!strcmp(s->models[i].name, s->models[k].name)) {
                char dup[256];
                snprintf(dup, sizeof dup, "%s", s->models[k].name);
                pg_server_stop(s);
                return pg_error(PAGODA_ERR_INVALID_ARG,
                                "server: two models are named '%s' (models are told apart by "
                                "their directory or file base name)",
                                dup);
            }
    }
    s->max_body = opt->max_body_bytes ? opt->max_body_bytes : DEFAULT_MAX_BODY;
    s->max_audio_bytes = opt->max_audio_bytes ? opt->max_audio_bytes : DEFAULT_MAX_AUDIO_BYTES;
    s->max_audio_seconds =
        opt->max_audio_seconds > 0 ? opt->max_audio_seconds : DEFAULT_MAX_AUDIO_SECONDS;
    s->max_stream_buffer =
        opt->max_stream_buffer ? opt->max_stream_buffer : DEFAULT_MAX_STREAM_BUFFER;
    s->request_timeout =
        opt->request_timeout > 0 ? (unsigned)opt->request_timeout : DEFAULT_REQUEST_TIMEOUT;
    unsigned keepalive =
        opt->keepalive_timeout > 0 ? (unsigned)opt->keepalive_timeout : DEFAULT_KEEPALIVE_TIMEOUT;
    s->max_connections = fit_connection_limit(opt->max_connections > 0 ? opt->max_connections
                                                                       : DEFAULT_MAX_CONNECTIONS);
    s->max_num_seqs = opt->max_num_seqs > 0 ? opt->max_num_seqs : 256;
    s->max_queue = opt->max_queue >= 0 ? opt->max_queue : 1024;
    s->inflight_limit = s->max_num_seqs + s->max_queue;
    atomic_init(&s->stopping, false);
    atomic_init(&s->draining, false);
    atomic_init(&s->aborting, false);
    s->listen_fd = -1;
    atomic_init(&s->engine_stop, false);
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    atomic_init(&s->next_id,
                pg_srv_mix64((uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec) ^
                    ((uint64_t)getpid() << 32));

    const char *host = opt->host ? opt->host : "127.0.0.1";
    char port[16];
    snprintf(port, sizeof port, "%d", opt->port);
    struct addrinfo hints = {0}, *ai = NULL;
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
    int gai = getaddrinfo(host, port, &hints, &ai);
    if (gai || !ai) {
        pg_server_stop(s);
        return pg_error(PAGODA_ERR_IO, "cannot resolve host '%s': %s", host, gai_strerror(gai));
    }
    if (pg_guard_create(s->request_timeout, keepalive, opt->socket_send_buffer, &s->guard) !=
        PAGODA_OK) {
        freeaddrinfo(ai);
        pg_server_stop(s);
        return PAGODA_ERR_NOMEM;
    }
    /* poll(), not select(): select() takes no descriptor >= FD_SETSIZE (1024),
     * and each connection holds two (its socket and conn_guard's dup), so
     * select() capped the server at ~500 connections whatever the limit */
    /* MHD_USE_ITC: needed by MHD_quiesce_daemon (graceful shutdown) */
    unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION |
                     MHD_USE_POLL | MHD_USE_ERROR_LOG | MHD_USE_ITC;
    if (ai->ai_family == AF_INET6) flags |= MHD_USE_IPv6;
    /* MHD_OPTION_CONNECTION_TIMEOUT is an idle timeout: it drops clients
     * that stop reading a response; the guard bounds the request read. */
    s->mhd = MHD_start_daemon(
        flags, (uint16_t)opt->port, NULL, NULL, on_request, s, MHD_OPTION_EXTERNAL_LOGGER, mhd_log,
        s, MHD_OPTION_SOCK_ADDR, ai->ai_addr, MHD_OPTION_NOTIFY_COMPLETED, on_completed, s,
        MHD_OPTION_UNESCAPE_CALLBACK, unescape_keep_nul, NULL,
        MHD_OPTION_NOTIFY_CONNECTION, pg_guard_notify, s->guard, MHD_OPTION_URI_LOG_CALLBACK,
        pg_guard_uri_log, s->guard, MHD_OPTION_CONNECTION_LIMIT, (unsigned)s->max_connections,
        MHD_OPTION_PER_IP_CONNECTION_LIMIT,
        (unsigned)(opt->max_connections_per_ip > 0 ? opt->max_connections_per_ip : 0),
        MHD_OPTION_CONNECTION_TIMEOUT, s->request_timeout, MHD_OPTION_THREAD_STACK_SIZE,
        (size_t)2 << 20, MHD_OPTION_END);
    freeaddrinfo(ai);
    if (!s->mhd) {
        int err = errno;
        pg_server_stop(s);
        return pg_error(PAGODA_ERR_IO, "cannot listen on %s:%d: %s", host, opt->port,
                        strerror(err));
    }
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(s->mhd, MHD_DAEMON_INFO_BIND_PORT);
    s->port = di ? di->port : opt->port;
    if (pthread_create(&s->engine_thread, NULL, engine_main, s)) {
        pg_server_stop(s);
        return pg_error(PAGODA_ERR_NOMEM, "cannot start the engine thread");
    }
    s->engine_started = true;
    *out = s;
    return PAGODA_OK;
}

int pg_server_max_connections(const pg_server *s) {
    return s->max_connections;
}

int pg_server_connections(const pg_server *s) {
    const union MHD_DaemonInfo *di =
        MHD_get_daemon_info(s->mhd, MHD_DAEMON_INFO_CURRENT_CONNECTIONS);
    return di ? (int)di->num_connections : -1;
}

const char *pg_server_model_name(const pg_server *s, size_t k) {
    return k < s->n_models ? s->models[k].name : NULL;
}

bool pg_server_model_is_speech(const pg_server *s, size_t k) {
    return k < s->n_models && s->models[k].speech;
}

int pg_server_port(const pg_server *s) {
    return s->port;
}

bool pg_server_bound_address(const pg_server *s, char *buf, size_t cap) {
    if (cap) snprintf(buf, cap, "?");
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(s->mhd, MHD_DAEMON_INFO_LISTEN_FD);
    if (!di || di->listen_fd == MHD_INVALID_SOCKET) return false;
    struct sockaddr_storage ss;
    socklen_t len = sizeof ss;
    if (getsockname(di->listen_fd, (struct sockaddr *)&ss, &len) != 0) return false;
    char tmp[INET6_ADDRSTRLEN];
    const void *a = ss.ss_family == AF_INET6
                        ? (const void *)&((const struct sockaddr_in6 *)&ss)->sin6_addr
                        : (const void *)&((const struct sockaddr_in *)&ss)->sin_addr;
    if (ss.ss_family != AF_INET && ss.ss_family != AF_INET6) return false;
    if (!inet_ntop(ss.ss_family, a, tmp, sizeof tmp)) return false;
    if (strlen(tmp) >= cap) return false;
    memcpy(buf, tmp, strlen(tmp) + 1);
    return true;
}

void pg_srv_active_add(pg_server *s, int64_t d) {
    pthread_mutex_lock(&s->mu);
    s->n_active += d;
    pthread_mutex_unlock(&s->mu);
}

void pg_server_drain(pg_server *s) {
    if (atomic_exchange(&s->draining, true)) return;
    /* MHD stops polling the listening socket; shutting it down makes the
     * kernel refuse new connections (and reset those in its accept queue)
     * while the descriptor stays valid until MHD_stop_daemon, as MHD asks */
    MHD_socket fd = MHD_quiesce_daemon(s->mhd);
    if (fd != MHD_INVALID_SOCKET) {
        s->listen_fd = fd;
        shutdown(fd, SHUT_RDWR);
    } else {
        PG_WARN("http: could not stop listening; new connections get 503 until the server stops");
    }
}

int64_t pg_server_active(pg_server *s) {
    pthread_mutex_lock(&s->mu);
    int64_t n = s->n_active;
    pthread_mutex_unlock(&s->mu);
    return n;
}

void pg_server_log_summary(pg_server *s) {
    for (size_t k = 0; k < s->n_models; k++) {
        pg_metrics *m = &s->models[k].metrics;
        pthread_mutex_lock(&m->mu);
        uint64_t st = m->success_stop, len = m->success_length, ab = m->success_abort,
                 er = m->success_error;
        pthread_mutex_unlock(&m->mu);
        PG_INFO("serve: %s: %llu requests finished (stop %llu, length %llu, abort %llu, error "
                "%llu)",
                s->models[k].name, (unsigned long long)(st + len + ab + er),
                (unsigned long long)st, (unsigned long long)len, (unsigned long long)ab,
                (unsigned long long)er);
    }
}

int64_t pg_server_abort_active(pg_server *s) {
    atomic_store(&s->aborting, true); /* transcriptions abort their window and answer 503 */
    int64_t n = 0;
    pthread_mutex_lock(&s->mu);
    for (job *j = s->jobs; j; j = j->next) {
        if (j->window || j->n_done == j->n_choices) continue;
        job_abort_locked(j, false);
        pthread_cond_broadcast(&j->cv);
        n++;
    }
    pg_srv_wake_locked(s);
    pthread_mutex_unlock(&s->mu);
    return n;
}

void pg_server_stop(pg_server *s) {
    if (!s) return;
    atomic_store(&s->stopping, true);
    /* the engine thread keeps stepping until the HTTP threads are gone: a
     * transcription ends by aborting its window and waiting for its last
     * output */
    if (s->mhd) MHD_stop_daemon(s->mhd);
    if (s->listen_fd >= 0) close(s->listen_fd);
    pg_guard_free(s->guard);
    pthread_mutex_lock(&s->mu);
    atomic_store(&s->engine_stop, true);
    pthread_cond_broadcast(&s->work_cv);
    pthread_mutex_unlock(&s->mu);
    if (s->engine_started) pthread_join(s->engine_thread, NULL);
    pthread_cond_destroy(&s->work_cv);
    pthread_mutex_destroy(&s->mu);
    for (size_t k = 0; k < s->n_models; k++) {
        pg_metrics_destroy(&s->models[k].metrics);
        free(s->models[k].name);
    }
    free(s->models);
    free(s->api_key);
    free(s->chat_template);
    free(s);
}
