/* POST /v1/audio/transcriptions and /v1/audio/translations (OpenAI's audio
 * API on a Whisper model): the multipart body through MHD's post processor
 * into a pg_audio_form, the file decoded by src/audio, pg_transcribe
 * (src/speech) with a backend that hands each 30-second window to the
 * engine thread as one engine request and waits for its last output, the
 * result rendered by pg_transcript_render or streamed as OpenAI's
 * transcript.text.delta / transcript.text.done events.
 * See docs/ARCHITECTURE.md "HTTP server", "Audio endpoints". */
#define _GNU_SOURCE
#include <cjson/cJSON.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "audio/audio.h"
#include "base/log.h"
#include "server/server_internal.h"
#include "speech/transcribe.h"

#define FORM_BUFFER 65536 /* MHD post processor buffer */

/* One transcription / translation request. */
struct tjob {
    pg_server *srv;
    srv_model *m;
    pg_audio_params p; /* points into the conn's form */
    pg_speech_task task;
    pg_audio audio;
    char id[48];
    double t_start;
    int conn_fd;   /* the client's socket (for the connection thread's checks) */
    int window_fd; /* what window waits poll: conn_fd when they run on the connection's
                      thread, -1 in the streaming thread (it has `cancel`) */
    struct MHD_Connection *mc;
    atomic_bool cancel; /* the client went away: abort the window in flight */
    bool admitted;      /* counted in m->inflight */
    int32_t n_windows, n_segments;
    const char *outcome;
    /* streaming (mu) */
    pthread_cond_t cv;
    pthread_t th;
    bool th_started;
    char *out;
    size_t out_len, out_off;
    bool finished; /* the streaming thread pushed its last event */
};

/* ------------------------------------------------------------ the form */

static enum MHD_Result form_iter(void *cls, enum MHD_ValueKind kind, const char *key,
                                 const char *filename, const char *content_type,
                                 const char *transfer_encoding, const char *data, uint64_t off,
                                 size_t size) {
    (void)kind, (void)content_type, (void)transfer_encoding;
    conn *cc = cls;
    if (cc->form_failed) return MHD_NO;
    if (pg_audio_form_add(cc->form, key, filename, data, off, size, &cc->form_err) != PAGODA_OK) {
        cc->form_failed = true;
        return MHD_NO;
    }
    return MHD_YES;
}

static enum MHD_Result fail_early(conn *cc, struct MHD_Connection *c, int status, const char *msg) {
    pg_api_error err;
    pg_api_fail(&err, status, NULL, "%s", msg);
    cc->early_done = true;
    return pg_srv_send_error(c, &err);
}

/* The largest body the audio endpoints read: the file limit plus room for
 * the other fields and the part headers. */
static size_t audio_body_limit(const pg_server *s) {
    return s->max_audio_bytes + PG_AUDIO_FORM_MAX_FIELDS * (size_t)1024 + ((size_t)1 << 20);
}

static void body_too_big(conn *cc, unsigned long long got) {
    size_t limit = audio_body_limit(cc->srv);
    pg_api_fail(&cc->form_err, 413, "file",
                "request body of %llu bytes is over the limit of %zu bytes (audio files: "
                "--max-audio-bytes %zu)",
                got, limit, cc->srv->max_audio_bytes);
    cc->form_failed = true;
}

/* What libmicrohttpd 0.9.75's post processor makes of the boundary: the
 * whole rest of the Content-Type after "boundary=" (a parameter after it
 * becomes part of the boundary, so no part is ever found: "the form has no
 * 'file' part"), and it refuses one character (NULL, reported as "needs a
 * boundary"). Returns false with msg set for the Content-Types it would
 * misread; true otherwise (no boundary: MHD's NULL says so). */
static bool boundary_usable(const char *ct, char *msg, size_t n) {
    const char *b = strcasestr(ct, "boundary=");
    if (!b) return true;
    b += 9;
    const char *end;
    if (*b == '"') {
        end = strchr(b + 1, '"');
        if (!end) return true;
        end++;
    } else {
        end = b + strcspn(b, "; \t");
    }
    size_t len = (size_t)(end - b) - (*b == '"' ? 2 : 0);
    const char *rest = end + strspn(end, " \t");
    if (*rest) {
        snprintf(msg, n,
                 "Content-Type '%.100s': parameters after 'boundary' are not supported (the "
                 "multipart parser would read '%.40s' as part of the boundary); send boundary "
                 "as the last parameter",
                 ct, rest);
        return false;
    }
    if (len == 1) {
        snprintf(msg, n,
                 "Content-Type '%.100s': a boundary of 1 character is not supported; use 2 to 70 "
                 "characters",
                 ct);
        return false;
    }
    return true;
}

enum MHD_Result pg_srv_audio_begin(conn *cc, struct MHD_Connection *c,
                                   unsigned long long content_length) {
    const char *ct = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_TYPE);
    char msg[512];
    if (!ct || strncasecmp(ct, "multipart/form-data", 19) != 0) {
        snprintf(msg, sizeof msg,
                 "the audio endpoints take multipart/form-data (a 'file' part and fields), not "
                 "Content-Type '%.100s'",
                 ct ? ct : "(none)");
        return fail_early(cc, c, 415, msg);
    }
    if (!boundary_usable(ct, msg, sizeof msg)) return fail_early(cc, c, 400, msg);
    cc->form = pg_audio_form_create(cc->srv->max_audio_bytes);
    if (!cc->form) return MHD_NO;
    cc->pp = MHD_create_post_processor(c, FORM_BUFFER, form_iter, cc);
    if (!cc->pp) {
        snprintf(msg, sizeof msg,
                 "malformed Content-Type '%.100s': multipart/form-data needs a boundary", ct);
        return fail_early(cc, c, 400, msg);
    }
    if (content_length > audio_body_limit(cc->srv)) body_too_big(cc, content_length);
    return MHD_YES;
}

enum MHD_Result pg_srv_audio_chunk(conn *cc, struct MHD_Connection *c, const char *data,
                                   size_t size) {
    (void)c;
    if (cc->form_failed) return MHD_YES; /* drain */
    cc->form_bytes += size;
    if (cc->form_bytes > audio_body_limit(cc->srv)) {
        body_too_big(cc, cc->form_bytes);
        return MHD_YES;
    }
    if (MHD_post_process(cc->pp, data, size) != MHD_YES && !cc->form_failed) {
        pg_api_fail(&cc->form_err, 400, NULL, "malformed multipart/form-data body");
        cc->form_failed = true;
    }
    return MHD_YES;
}

/* ------------------------------------------------------------- windows */

void pg_srv_window_output(job *w, const pagoda_output *o, double now) {
    for (size_t k = 0; k < o->n_new_tokens; k++)
        if (w->n_tokens < w->cap) w->tokens[w->n_tokens++] = o->new_token_ids[k];
    if (o->finish_reason == PAGODA_FINISH_NONE || w->final) return;
    w->final = true;
    w->finish = o->finish_reason;
    w->subs[0].done = true;
    if (o->finish_reason == PAGODA_FINISH_ERROR)
        snprintf(w->error, sizeof w->error, "%s", o->error ? o->error : "window failed");
    double queue = o->first_scheduled_time > 0 ? o->first_scheduled_time - o->arrival_time : -1;
    double ttft = o->first_token_time > 0 ? o->first_token_time - o->arrival_time : -1;
    pg_metrics_finished(&w->m->metrics, o->finish_reason, now - o->arrival_time, queue, ttft);
}

static void window_free(job *w) {
    free(w->subs);
    free(w->choices);
    pthread_cond_destroy(&w->cv);
    free(w);
}

/* pg_speech_backend.run: one window as an engine request of the engine
 * thread; waits for its last output (also after an abort: the request's
 * logits processor lives in pg_transcribe's frame). */
static pagoda_status window_run(void *ctx, const pagoda_request *req, int32_t *tokens, int32_t cap,
                                int32_t *n_tokens, pagoda_finish_reason *finish) {
    tjob *t = ctx;
    pg_server *s = t->srv;
    srv_model *m = t->m;
    *n_tokens = 0;
    *finish = PAGODA_FINISH_NONE;
    pagoda_request r = *req;
    const pg_audio_params *p = &t->p;
    if (p->top_p_set) r.sampling.top_p = p->top_p;
    if (p->top_k_set) r.sampling.top_k = p->top_k;
    if (p->min_p_set) r.sampling.min_p = p->min_p;
    if (p->frequency_penalty_set) r.sampling.frequency_penalty = p->frequency_penalty;
    if (p->presence_penalty_set) r.sampling.presence_penalty = p->presence_penalty;
    if (p->repetition_penalty_set) r.sampling.repetition_penalty = p->repetition_penalty;
    /* the window's tokens are all pg_transcribe reads: no text on the engine thread */
    if (!r.sampling.n_stop) r.no_detokenize = true;
    job *w = calloc(1, sizeof *w);
    if (w) {
        w->subs = calloc(1, sizeof *w->subs);
        w->choices = calloc(1, sizeof *w->choices);
    }
    if (!w || !w->subs || !w->choices) {
        if (w) free(w->subs), free(w->choices), free(w);
        return pg_error(PAGODA_ERR_NOMEM, "out of memory");
    }
    pthread_cond_init(&w->cv, NULL);
    w->srv = s;
    w->m = m;
    w->window = true;
    w->n_choices = 1;
    w->tokens = tokens;
    w->cap = cap;
    w->fd = -1;
    snprintf(w->id, sizeof w->id, "%s", t->id);
    pthread_mutex_lock(&s->mu);
    if (pg_srv_cut(s) || atomic_load(&t->cancel)) {
        pthread_mutex_unlock(&s->mu);
        window_free(w);
        return pg_error(PAGODA_ERR_IO, "%s: request aborted", t->id);
    }
    pagoda_status st = pagoda_engine_add_request(m->e, &r, &w->subs[0].eid, NULL);
    if (st != PAGODA_OK) {
        pthread_mutex_unlock(&s->mu);
        window_free(w);
        return st; /* its message stays this thread's last error */
    }
    t->n_windows++;
    w->subs[0].arrival = pg_srv_now();
    pg_srv_job_register_locked(w);
    bool aborted = false;
    while (!w->final) {
        if (!aborted && (pg_srv_cut(s) || atomic_load(&t->cancel) ||
                         (t->window_fd >= 0 && pg_srv_peer_gone(t->window_fd)))) {
            atomic_store(&t->cancel, true);
            pagoda_engine_abort(m->e, w->subs[0].eid);
            pg_srv_wake_locked(s);
            aborted = true;
        }
        pg_srv_timed_wait(&w->cv, &s->mu);
    }
    pg_srv_job_unlink_locked(w);
    pthread_mutex_unlock(&s->mu);
    *n_tokens = w->n_tokens;
    *finish = w->finish;
    char error[256];
    snprintf(error, sizeof error, "%s", w->error);
    window_free(w);
    if (aborted || *finish == PAGODA_FINISH_ABORT)
        return pg_error(PAGODA_ERR_IO, "%s: request aborted", t->id);
    if (*finish == PAGODA_FINISH_ERROR)
        return pg_error(PAGODA_ERR_INTERNAL, "%s: decoding failed: %s", t->id, error);
    return PAGODA_OK;
}

/* ----------------------------------------------------------- the request */

static void release(tjob *t) {
    if (!t->admitted) return;
    pthread_mutex_lock(&t->srv->mu);
    t->m->inflight--;
    pthread_mutex_unlock(&t->srv->mu);
    t->admitted = false;
}

/* The HTTP answer to a failed decode. */
static void decode_error(const tjob *t, pagoda_status st, pg_api_error *err) {
    const char *msg = pagoda_last_error();
    switch (st) {
    case PAGODA_ERR_NOMEM:
        pg_api_fail(err, 500, NULL, "out of memory decoding the audio file");
        break;
    case PAGODA_ERR_LIMIT:
        pg_api_fail(err, 400, "file", "%s (the server's limit: --max-audio-seconds %g)", msg,
                    t->srv->max_audio_seconds);
        break;
    case PAGODA_ERR_UNSUPPORTED:
        pg_api_fail(err, 400, "file", "unsupported audio file: %s", msg);
        break;
    default:
        pg_api_fail(err, 400, "file", "cannot decode the audio file: %s", msg);
        break;
    }
}

/* The HTTP answer to a failed pg_transcribe. */
static void transcribe_error(const tjob *t, pagoda_status st, pg_api_error *err) {
    const char *msg = pagoda_last_error();
    if (pg_srv_cut(t->srv) && st == PAGODA_ERR_IO)
        pg_api_fail(err, 503, NULL, "server shutting down");
    else if (st == PAGODA_ERR_INVALID_ARG || st == PAGODA_ERR_LIMIT)
        pg_api_fail(err, 400, strstr(msg, "language") ? "language" : NULL, "%s", msg);
    else if (st == PAGODA_ERR_NOMEM)
        pg_api_fail(err, 500, NULL, "out of memory");
    else
        pg_api_fail(err, 500, NULL, "transcription failed: %s", msg);
}

static void options_of(const tjob *t, pg_transcribe_options *o) {
    pg_transcribe_options_default(o);
    o->task = t->task;
    o->language = t->p.language;
    o->prompt = t->p.prompt;
    o->temperature = t->p.temperature;
    o->seed = t->p.seed;
    o->max_tokens_per_window = t->p.max_tokens;
}

/* Append a malloc'ed SSE event (mu held). */
static void push_event(tjob *t, char *ev) {
    if (!ev) return;
    size_t n = strlen(ev);
    char *nb = realloc(t->out, t->out_len + n);
    if (nb) {
        memcpy(nb + t->out_len, ev, n);
        t->out = nb;
        t->out_len += n;
    }
    free(ev);
}

static char *sse_of(cJSON *o) {
    char *js = o ? cJSON_PrintUnformatted(o) : NULL;
    cJSON_Delete(o);
    if (!js) return NULL;
    size_t n = strlen(js);
    char *ev = malloc(n + 9);
    if (ev) snprintf(ev, n + 9, "data: %s\n\n", js);
    free(js);
    return ev;
}

static void on_segment(void *ctx, const pg_speech_segment *seg) {
    tjob *t = ctx;
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "type", "transcript.text.delta");
    char *safe = pg_api_utf8_dup(seg->text ? seg->text : "", seg->text ? strlen(seg->text) : 0);
    cJSON_AddStringToObject(o, "delta", safe ? safe : "");
    free(safe);
    char *ev = sse_of(o);
    pthread_mutex_lock(&t->srv->mu);
    t->n_segments++;
    push_event(t, ev);
    pthread_cond_broadcast(&t->cv);
    pthread_mutex_unlock(&t->srv->mu);
}

/* The streaming thread: pg_transcribe with a delta event per segment, then
 * transcript.text.done (or an error event) and [DONE]. */
static void *stream_main(void *arg) {
    tjob *t = arg;
    pg_speech_backend be = {window_run, t};
    pg_transcribe_options o;
    options_of(t, &o);
    pg_transcript *tr = NULL;
    pagoda_status st = pg_transcribe(t->m->e, &be, t->audio.samples, (size_t)t->audio.n_samples, &o,
                                     on_segment, t, &tr);
    char *ev = NULL;
    if (st == PAGODA_OK) {
        cJSON *d = cJSON_CreateObject();
        cJSON_AddStringToObject(d, "type", "transcript.text.done");
        char *safe = pg_api_utf8_dup(tr->text ? tr->text : "", tr->text ? strlen(tr->text) : 0);
        cJSON_AddStringToObject(d, "text", safe ? safe : "");
        free(safe);
        cJSON *u = cJSON_AddObjectToObject(d, "usage");
        cJSON_AddStringToObject(u, "type", "duration");
        cJSON_AddNumberToObject(u, "seconds", ceil(tr->duration));
        ev = sse_of(d);
        t->outcome = "ok";
    } else {
        pg_api_error err;
        transcribe_error(t, st, &err);
        char *js = pg_api_error_json(&err);
        if (js) {
            size_t n = strlen(js);
            if ((ev = malloc(n + 9))) snprintf(ev, n + 9, "data: %s\n\n", js);
            free(js);
        }
        t->outcome = atomic_load(&t->cancel) ? "aborted" : "failed";
        if (!atomic_load(&t->cancel)) PG_WARN("%s: %s", t->id, err.message);
    }
    pg_transcript_free(tr);
    pthread_mutex_lock(&t->srv->mu);
    push_event(t, ev);
    push_event(t, strdup(PG_API_SSE_DONE));
    t->finished = true;
    pthread_cond_broadcast(&t->cv);
    pthread_mutex_unlock(&t->srv->mu);
    return NULL;
}

static ssize_t stream_reader(void *cls, uint64_t pos, char *buf, size_t max) {
    (void)pos;
    tjob *t = cls;
    pg_server *s = t->srv;
    bool waited = false;
    pthread_mutex_lock(&s->mu);
    for (;;) {
        if (t->out_off < t->out_len) {
            size_t n = t->out_len - t->out_off;
            if (n > max) n = max;
            memcpy(buf, t->out + t->out_off, n);
            t->out_off += n;
            if (t->out_off == t->out_len) t->out_off = t->out_len = 0;
            pthread_mutex_unlock(&s->mu);
            if (waited) pg_srv_restart_idle_timer(s, t->mc);
            return (ssize_t)n;
        }
        if (t->finished) {
            pthread_mutex_unlock(&s->mu);
            return MHD_CONTENT_READER_END_OF_STREAM;
        }
        if (pg_srv_cut(s) || pg_srv_peer_gone(t->conn_fd)) {
            atomic_store(&t->cancel, true);
            pthread_mutex_unlock(&s->mu);
            return MHD_CONTENT_READER_END_WITH_ERROR;
        }
        pg_srv_timed_wait(&t->cv, &s->mu);
        waited = true;
    }
}

/* Transcribe on this (the connection's) thread and answer. */
static enum MHD_Result run_plain(tjob *t, struct MHD_Connection *c) {
    pg_speech_backend be = {window_run, t};
    pg_transcribe_options o;
    options_of(t, &o);
    pg_transcript *tr = NULL;
    pagoda_status st = pg_transcribe(t->m->e, &be, t->audio.samples, (size_t)t->audio.n_samples, &o,
                                     NULL, NULL, &tr);
    release(t);
    pg_srv_restart_idle_timer(t->srv, c);
    if (st != PAGODA_OK) {
        pg_transcript_free(tr);
        if (atomic_load(&t->cancel) && !pg_srv_cut(t->srv)) {
            t->outcome = "aborted";
            return MHD_NO; /* the client is gone */
        }
        pg_api_error err;
        transcribe_error(t, st, &err);
        t->outcome = "failed";
        if (err.status >= 500) PG_WARN("%s: %s", t->id, err.message);
        return pg_srv_send_error(c, &err);
    }
    t->n_segments = tr->n_segments;
    char *body = NULL;
    size_t len = 0;
    st = pg_transcript_render(tr, t->p.format, t->task, &body, &len);
    pg_transcript_free(tr);
    if (st != PAGODA_OK) {
        pg_api_error err;
        pg_api_fail(&err, 500, NULL, "cannot render the transcript: %s", pagoda_last_error());
        t->outcome = "failed";
        return pg_srv_send_error(c, &err);
    }
    t->outcome = "ok";
    return pg_srv_send_text(c, 200, pg_transcript_format_mime(t->p.format), body, len, NULL, NULL);
}

static enum MHD_Result run_stream(tjob *t, struct MHD_Connection *c) {
    pthread_cond_init(&t->cv, NULL);
    t->window_fd = -1;
    if (pthread_create(&t->th, NULL, stream_main, t)) {
        pg_api_error err;
        pg_api_fail(&err, 503, NULL, "cannot start a transcription thread; retry later");
        return pg_srv_send_error(c, &err);
    }
    t->th_started = true;
    struct MHD_Response *r =
        MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16384, stream_reader, t, NULL);
    if (!r) return MHD_NO;
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "text/event-stream");
    MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
    enum MHD_Result ret = MHD_queue_response(c, 200, r);
    MHD_destroy_response(r);
    return ret;
}
enum MHD_Result pg_srv_audio_handle(conn *cc, struct MHD_Connection *c) {
    pg_server *s = cc->srv;
    if (cc->pp) { /* flushes the last part */
        if (MHD_destroy_post_processor(cc->pp) != MHD_YES && !cc->form_failed) {
            pg_api_fail(&cc->form_err, 400, NULL,
                        "malformed multipart/form-data body (truncated or without its closing "
                        "boundary)");
            cc->form_failed = true;
        }
        cc->pp = NULL;
    }
    if (cc->form_failed) return pg_srv_send_error(c, &cc->form_err);
    pg_api_error err;
    tjob *t = calloc(1, sizeof *t);
    if (!t) return MHD_NO;
    cc->tjob = t;
    pg_srv_active_add(s, 1);
    t->srv = s;
    t->t_start = pg_srv_now();
    t->task = cc->ep == EP_TRANSLATIONS ? PG_SPEECH_TRANSLATE : PG_SPEECH_TRANSCRIBE;
    t->mc = c;
    t->outcome = "rejected";
    atomic_init(&t->cancel, false);
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    t->conn_fd = t->window_fd = ci ? ci->connect_fd : -1;
    pg_srv_new_id(s, t->task == PG_SPEECH_TRANSLATE ? "trsl" : "trsc", t->id, sizeof t->id, NULL);
    if (pg_audio_form_finish(cc->form, &t->p, &err)) return pg_srv_send_error(c, &err);
    if (!(t->m = pg_srv_route(s, t->p.model, true, &err))) return pg_srv_send_error(c, &err);
    pthread_mutex_lock(&s->mu);
    if (t->m->inflight + 1 > s->inflight_limit) {
        int64_t inflight = t->m->inflight;
        pthread_mutex_unlock(&s->mu);
        pg_api_fail(&err, 503, NULL,
                    "server busy: %lld requests in flight, the limit is %lld (--max-num-seqs + "
                    "--max-queue); retry later",
                    (long long)inflight, (long long)s->inflight_limit);
        return pg_srv_send_error(c, &err);
    }
    t->m->inflight++;
    t->admitted = true;
    pthread_mutex_unlock(&s->mu);
    pagoda_status st =
        pg_audio_decode(t->p.file, t->p.file_len, t->p.filename, s->max_audio_seconds, &t->audio);
    if (st != PAGODA_OK) {
        release(t);
        decode_error(t, st, &err);
        return pg_srv_send_error(c, &err);
    }
    PG_DEBUG("%s: %s, %.2f s (%s, %d Hz, %d channel%s) for %s", t->id,
             t->task == PG_SPEECH_TRANSLATE ? "translation" : "transcription",
             (double)t->audio.n_samples / PG_AUDIO_SAMPLE_RATE, t->audio.format,
             t->audio.source_rate, t->audio.source_channels,
             t->audio.source_channels == 1 ? "" : "s", t->m->name);
    return t->p.stream ? run_stream(t, c) : run_plain(t, c);
}

void pg_srv_audio_completed(conn *cc, enum MHD_RequestTerminationCode toe) {
    if (cc->pp) MHD_destroy_post_processor(cc->pp);
    cc->pp = NULL;
    tjob *t = cc->tjob;
    if (t) {
        if (toe != MHD_REQUEST_TERMINATED_COMPLETED_OK) atomic_store(&t->cancel, true);
        if (t->th_started) {
            pthread_mutex_lock(&t->srv->mu);
            pthread_cond_broadcast(&t->cv);
            pthread_mutex_unlock(&t->srv->mu);
            pthread_join(t->th, NULL);
            pthread_cond_destroy(&t->cv);
        }
        release(t);
        if (t->m && t->audio.n_samples > 0) {
            const char *outcome = t->outcome;
            if (toe != MHD_REQUEST_TERMINATED_COMPLETED_OK && strcmp(outcome, "ok") != 0)
                outcome = pg_srv_cut(t->srv) ? "aborted (server shutting down)"
                                                         : "aborted (client went away)";
            PG_INFO("%s: %s of %.1f s of audio by %s: %d window%s, %d segment%s, %.1f ms, %s",
                    t->id, t->task == PG_SPEECH_TRANSLATE ? "translation" : "transcription",
                    (double)t->audio.n_samples / PG_AUDIO_SAMPLE_RATE, t->m->name, t->n_windows,
                    t->n_windows == 1 ? "" : "s", t->n_segments, t->n_segments == 1 ? "" : "s",
                    (pg_srv_now() - t->t_start) * 1e3, outcome);
        }
        pg_srv_active_add(t->srv, -1);
        pg_audio_free(&t->audio);
        free(t->out);
        free(t);
        cc->tjob = NULL;
    }
    pg_audio_form_free(cc->form);
    cc->form = NULL;
}
