/* Internals of `pagoda serve` shared by server.c (routing, the engine
 * thread, completions and chats) and transcription.c (the audio endpoints).
 * Not a public interface: see server.h. */
#ifndef PAGODA_SERVER_SERVER_INTERNAL_H
#define PAGODA_SERVER_SERVER_INTERNAL_H

#include <microhttpd.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "pagoda.h"
#include "server/audio_form.h"
#include "server/conn_guard.h"
#include "server/metrics.h"
#include "server/openai.h"
#include "server/output_parser.h"
#include "server/server.h"

#define PG_SRV_WAIT_SLICE_MS 200

typedef struct job job;
typedef struct tjob tjob;

/* One served model: its engine and what the server derived from it. */
typedef struct srv_model {
    pg_server *srv;
    pagoda_engine *e;
    char *name; /* the `model` of the API */
    int32_t max_model_len;
    /* Chats in OpenAI's harmony format (gpt-oss): rendered by
     * pg_harmony_render, generation stops at <|return|> / <|call|>. */
    bool harmony;
    int32_t harmony_stop_ids[2]; /* <|return|>, <|call|> */
    /* the tokens of "<|channel|>final<|message|>": a harmony chat's grammar
     * (structured outputs) applies after them (pagoda_request's
     * reasoning_end_ids); 0 ids: structured outputs are 400s */
    int32_t harmony_final_ids[PAGODA_MAX_REASONING_END_IDS];
    size_t n_harmony_final_ids;
    /* Chat output parsing (server/output_parser.h): the tool-call syntax
     * (HARMONY for harmony models) and reasoning tags, from the chat
     * template or --tool-call-parser / --reasoning-parser. */
    pg_tool_format tool_format;
    bool mistral_v11; /* [TOOL_CALLS]NAME[ARGS]... rather than a JSON list */
    pg_reasoning_format reasoning;
    /* The single tokens <think> and </think> with a reasoning format (-1:
     * not single tokens; a chat's grammar then constrains the whole
     * output), for pagoda_request.grammar_after_reasoning. */
    int32_t think_ids[2];
    /* Encoder-decoder speech model (Whisper): serves the audio endpoints
     * only; completions and chats are 400s naming it. */
    bool speech;
    int32_t n_mels, n_frames; /* its encoder input */
    pg_metrics metrics;
    /* speculative decoding's periodic log line: the stats at its last line */
    pagoda_stats spec_logged;
    double spec_logged_t;
    int64_t inflight; /* (mu) engine requests not finished; a transcription counts 1 */
} srv_model;

struct pg_server {
    struct MHD_Daemon *mhd;
    int port;
    srv_model *models;
    size_t n_models;
    char *api_key;
    char *chat_template;
    bool auto_tools; /* --enable-auto-tool-choice */
    bool webui;      /* the web chat page at / (server/webui.h); off: --no-webui */
    size_t max_body;
    size_t max_stream_buffer;
    size_t max_audio_bytes;
    double max_audio_seconds;
    unsigned request_timeout;
    int max_connections;
    pg_guard *guard;
    int64_t inflight_limit; /* per model: max_num_seqs + max_queue engine requests */
    int64_t max_num_seqs, max_queue;

    pthread_mutex_t mu;      /* guards everything below and every job's results */
    pthread_cond_t work_cv;  /* the engine thread sleeps on it when no engine has work */
    uint64_t work_seq;       /* bumped (mu) whenever a request is added or aborted */
    job *jobs;               /* registered jobs (doubly linked) */
    atomic_bool stopping;    /* no new work; waits end */
    atomic_bool draining;    /* graceful shutdown: new requests get 503, the rest go on */
    atomic_bool aborting;    /* the shutdown timeout passed: in-flight requests are aborted */
    int listen_fd;           /* the quiesced listening socket (closed after MHD stops), or -1 */
    int64_t n_active;        /* (mu) generation / transcription requests not answered in full */
    atomic_bool engine_stop; /* the engine thread exits (after the HTTP threads) */
    pthread_t engine_thread;
    bool engine_started;
    atomic_uint_fast64_t next_id;
};

/* One choice of a job: an engine request and what was streamed of it.
 * The engine thread (apply_output, mu held) only hands over token ids and
 * logprobs; the connection's thread (consume_locked) turns the ids into
 * text with the choice's detokenizer, matches the stop strings and ends the
 * engine request on a match (pagoda_request.no_detokenize). */
typedef struct sub {
    uint64_t eid;
    int32_t last_token; /* context for logprob token texts (-1 none) */
    /* (mu) the engine request is over: its final output came, or the
     * server aborted it (server_abort) */
    bool done, server_abort;
    bool role_sent, finish_sent;
    size_t sent_text, sent_lp;
    double last_token_time;
    double arrival, first_token;
    /* (mu) the engine's final output: finish, stop token, when, and the
     * queue time / TTFT for the metrics (-1: none) */
    pagoda_finish_reason eng_finish;
    int32_t eng_stop_token;
    double t_end, queue, ttft;
    /* detokenization on the connection's side */
    pagoda_detokenizer *dt; /* the consumer's only */
    int32_t *ids;           /* (mu) output ids handed over, not yet taken */
    size_t n_ids, cap_ids;
    int32_t *spare; /* the consumer's: the ids it took (swapped with ids) */
    size_t cap_spare;
    size_t n_used; /* (mu) ids the consumer kept: the choice's output tokens */
    /* (mu) a stop string matched at output n_used (or the consumer
     * failed): the engine request is aborted, later ids are dropped and the
     * finish is cut_finish */
    bool cut;
    pagoda_finish_reason cut_finish;
    bool final;   /* (mu) text complete, finish set: the finish may be sent */
    bool metered; /* (mu) counted in the finished-request metrics */
    /* the consumer's, one pass of consume_locked: ids taken, whether the
     * engine had finished then, and what they gave */
    size_t c_n, c_used;
    bool c_go, c_done, c_skip;
    const char *c_text;
    size_t c_len;
    pagoda_status c_st;
} sub;

/* One generation HTTP request (n_prompts x n engine requests), or one
 * 30-second window of a transcription (`window`: one engine request whose
 * tokens are collected for pg_transcribe). */
struct job {
    pg_server *srv;
    srv_model *m;
    job *prev, *next;
    pg_api_request req;
    pagoda_grammar *grammar; /* structured output (server/structured.h), a forced tool call
                                (server/tool_calls.h) or NULL */
    bool parse_tools;        /* chat: tool calls are parsed from the output */
    char id[112];            /* "chatcmpl-" + 32 hex digits, or + the request's request_id */
    uint64_t id_num;         /* the random number behind `id` (seeds tool call ids) */
    pg_api_meta meta;
    size_t n_choices, n_done; /* n_done: (mu) choices whose engine request is over */
    size_t n_final;           /* (mu) choices whose result is complete (sub.final) */
    pg_api_choice *choices;
    sub *subs;
    pthread_cond_t cv;
    bool registered;
    int fd; /* client socket, to notice a client that went away */
    struct MHD_Connection *mc;
    /* streaming */
    char *out;
    size_t out_len, out_off;
    size_t unsent; /* output bytes (text + logprob entries) not yet turned into SSE */
    bool overflow; /* aborted: the client left more than max_stream_buffer unread */
    bool usage_sent, done_sent;
    double t_start;
    /* transcription window */
    bool window;
    int32_t *tokens; /* [cap] the window's generated ids (not owned) */
    int32_t cap, n_tokens;
    bool final; /* the engine reported the request's last output */
    pagoda_finish_reason finish;
    char error[256]; /* FINISH_ERROR's message */
};

typedef enum endpoint {
    EP_NONE = 0,
    EP_HEALTH,
    EP_VERSION,
    EP_MODELS,
    EP_METRICS,
    EP_TOKENIZE,
    EP_DETOKENIZE,
    EP_COMPLETIONS,
    EP_CHAT,
    EP_TRANSCRIPTIONS,
    EP_TRANSLATIONS,
} endpoint;

/* Per-connection state (MHD's con_cls). */
typedef struct conn {
    pg_server *srv;
    endpoint ep;
    char *body;
    size_t len, cap;
    bool too_big;
    bool early_done; /* an error response was queued on the first call */
    job *job;
    /* audio endpoints: the multipart body goes through MHD's post processor
     * into `form` */
    struct MHD_PostProcessor *pp;
    pg_audio_form *form;
    size_t form_bytes; /* body bytes fed so far */
    bool form_failed;  /* form_err is the answer; the rest of the body is drained */
    pg_api_error form_err;
    tjob *tjob;
} conn;

/* ---- shared helpers (server.c) ---- */

/* True once waits must end: the server is stopping, or the shutdown
 * timeout passed and in-flight requests are being aborted. */
static inline bool pg_srv_cut(pg_server *s) {
    return atomic_load(&s->stopping) || atomic_load(&s->aborting);
}
/* A request (generation or transcription) began / was answered in full. */
void pg_srv_active_add(pg_server *s, int64_t d);

double pg_srv_now(void);
uint64_t pg_srv_mix64(uint64_t x);
/* A fresh random-looking request id "<prefix>-<32 hex digits>". */
void pg_srv_new_id(pg_server *s, const char *prefix, char *out, size_t cap, uint64_t *num);
enum MHD_Result pg_srv_send_text(struct MHD_Connection *c, unsigned status, const char *ctype,
                                 char *body_owned, size_t len, const char *extra_hdr,
                                 const char *extra_val);
enum MHD_Result pg_srv_send_error(struct MHD_Connection *c, const pg_api_error *err);
/* True when the peer closed its end of the connection. */
bool pg_srv_peer_gone(int fd);
/* Wait on j->cv (mu held) for at most one slice. */
void pg_srv_timed_wait(pthread_cond_t *cv, pthread_mutex_t *mu);
/* Restart MHD's idle timer of a connection (from its own thread). */
void pg_srv_restart_idle_timer(pg_server *s, struct MHD_Connection *c);
/* Put j on the engine thread's list and wake it (mu held). */
void pg_srv_job_register_locked(job *j);
/* Take j off the list without aborting anything (mu held). */
void pg_srv_job_unlink_locked(job *j);
/* Tell the engine thread there is news (mu held). */
void pg_srv_wake_locked(pg_server *s);
/* The model a request names (NULL: the first model of the wanted kind):
 * 404 model_not_found for an unknown name, 400 naming the model when it is
 * of the other kind (want_speech: the audio endpoints). */
srv_model *pg_srv_route(pg_server *s, const char *requested, bool want_speech, pg_api_error *err);

/* ---- the audio endpoints (transcription.c) ---- */

/* First call for POST /v1/audio/{transcriptions,translations}: check the
 * content type (multipart/form-data with a boundary, else 415) and create
 * the post processor. MHD_YES with cc->early_done set when an error was
 * queued. content_length (0 = none) over the body limit: the body is
 * drained and answered 413. */
enum MHD_Result pg_srv_audio_begin(conn *cc, struct MHD_Connection *c,
                                   unsigned long long content_length);
/* A body chunk. */
enum MHD_Result pg_srv_audio_chunk(conn *cc, struct MHD_Connection *c, const char *data,
                                   size_t size);
/* The body is complete: validate, decode, transcribe, answer. */
enum MHD_Result pg_srv_audio_handle(conn *cc, struct MHD_Connection *c);
/* The connection is done (completed or dropped): stop and free what the
 * request holds. */
void pg_srv_audio_completed(conn *cc, enum MHD_RequestTerminationCode toe);
/* Engine thread, mu held: output `o` of a transcription window. */
void pg_srv_window_output(job *w, const pagoda_output *o, double now);

#endif
