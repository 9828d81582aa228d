/* `pagoda serve`: an OpenAI-compatible HTTP server over the public engine
 * API (include/pagoda.h) with libmicrohttpd, for one or several models (one
 * engine each; e.g. a chat model and a Whisper model).
 *
 * Threads: MHD runs one thread per connection (plus its listener); those
 * threads only parse, validate, tokenize, enqueue (pagoda_engine_add_request)
 * and wait on a condition variable / write SSE chunks; a transcription runs
 * pg_transcribe there (a streamed one in a thread of its own), each 30-second
 * window one engine request. One engine thread steps every engine with work
 * in turn (they share the process-wide thread pool) and copies each step's
 * outputs into the waiting requests under the server's mutex.
 * A client that goes away (socket closed) has its requests aborted
 * (pagoda_engine_abort), which frees their KV blocks at the next step.
 * Hostile connections: request-read and keep-alive deadlines (conn_guard.h),
 * a connection limit that fits the fd limit, a bound on the output a
 * streaming client may leave unread (the request is aborted past it), and
 * MHD's idle timeout for clients that stop reading a response.
 * See docs/ARCHITECTURE.md "HTTP server". */
#ifndef PAGODA_SERVER_SERVER_H
#define PAGODA_SERVER_SERVER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "pagoda.h"

typedef struct pg_server_options {
    const char *host;              /* address to bind; NULL = "127.0.0.1" */
    int port;                      /* 0 = an ephemeral port (see pg_server_port) */
    const char *api_key;           /* NULL = no authentication */
    const char *served_model_name; /* NULL = pagoda_engine_model_name() */
    const char *chat_template;     /* template source overriding the model's, or NULL */
    /* Chat output parsing (server/output_parser.h; vLLM's flags). NULL =
     * picked from each model's chat template. */
    const char *tool_call_parser; /* "hermes", "llama3_json", "mistral", "harmony" / "openai" */
    const char *reasoning_parser; /* "qwen3", "deepseek_r1" */
    bool disable_webui;           /* true: no web chat page at / (`--no-webui`; default: served,
                                     server/webui.h) */
    bool enable_auto_tool_choice; /* tool_choice "auto" (the default with tools) parses calls;
                                     without it such requests are 400s, as vLLM */
    int max_num_seqs;             /* the engine's, for the queue limit (0 = 256) */
    int max_queue;                /* engine requests allowed to wait beyond max_num_seqs;
                                     more get 503 + Retry-After. < 0 = default 1024 */
    size_t max_body_bytes;        /* larger request bodies get 413; 0 = 16 MiB */
    /* Hostile or broken clients (see conn_guard.h). */
    int request_timeout;        /* s: headers + body must arrive within it, and a client that
                                   reads nothing of a response for this long is dropped;
                                   0 = 30 */
    int keepalive_timeout;      /* s an idle kept-alive connection stays open; 0 = 5 */
    int max_connections;        /* 0 = 4096; lowered to fit RLIMIT_NOFILE (raised to its
                                   hard limit at start) minus the descriptors in use */
    int max_connections_per_ip; /* 0 = no per-client-address limit */
    size_t max_stream_buffer;   /* bytes of generated output a streaming client may leave
                                   unread before its request is aborted; 0 = 4 MiB */
    int socket_send_buffer;     /* SO_SNDBUF of connection sockets in bytes; 0 = the
                                   kernel's autotuning (tests make it small so that a
                                   client that does not read stalls the stream early) */
    /* The audio endpoints (speech models). */
    size_t max_audio_bytes;   /* largest uploaded audio file; larger: 413. 0 = 25 MiB */
    double max_audio_seconds; /* longest audio (decoded) accepted; longer: 400. 0 = 1800 */
} pg_server_options;

typedef struct pg_server pg_server;

/* Bind, start the HTTP threads and the engine thread. The engine must stay
 * alive until pg_server_stop. Errors: IO (cannot bind / resolve the host),
 * NOMEM. */
pagoda_status pg_server_start(pagoda_engine *e, const pg_server_options *opt, pg_server **out);

/* The same for n >= 1 engines, served under their pagoda_engine_model_name
 * (opt->served_model_name only with one engine). Requests go to the model
 * their `model` field names; without one to the first model of the
 * endpoint's kind (text generation for completions, chats and /tokenize;
 * an encoder-decoder speech model for the audio endpoints). Errors besides
 * pg_server_start's: INVALID_ARG (no engine, two models with one name,
 * served_model_name with several engines). */
pagoda_status pg_server_start_models(pagoda_engine *const *engines, size_t n_engines,
                                     const pg_server_options *opt, pg_server **out);

/* The connection limit in force (after fitting it to the fd limit). */
int pg_server_max_connections(const pg_server *s);

/* HTTP connections open now (MHD_DAEMON_INFO_CURRENT_CONNECTIONS). */
int pg_server_connections(const pg_server *s);

/* Served model k (in the order given to pg_server_start_models): its API
 * name, and whether it is a speech-to-text model (the audio endpoints). */
const char *pg_server_model_name(const pg_server *s, size_t k);
bool pg_server_model_is_speech(const pg_server *s, size_t k);

/* The bound TCP port (the ephemeral one when port 0 was asked). */
int pg_server_port(const pg_server *s);

/* The address the listening socket is really bound to, as the kernel
 * reports it (getsockname): "127.0.0.1", "0.0.0.0" (all IPv4 addresses),
 * "::1", "::" ... written NUL-terminated into buf (cap >= 46 bytes is
 * always enough; INET6_ADDRSTRLEN). Returns false (buf = "?") when the
 * socket cannot be queried. */
bool pg_server_bound_address(const pg_server *s, char *buf, size_t cap);

/* Graceful shutdown (SIGTERM), step 1: stop taking new work. The listening
 * socket is shut down, so new connections are refused (a load balancer
 * tries another replica at once, as with uvicorn under vLLM); a request
 * arriving on a connection already open gets 503 with `Connection: close`
 * (/health too; /metrics still answers). Requests in flight go on.
 * Idempotent; call from any thread. */
void pg_server_drain(pg_server *s);

/* Generation and transcription requests in flight: admitted and not yet
 * answered in full (a stream counts until its last byte is handed to the
 * socket or the client is gone). */
int64_t pg_server_active(pg_server *s);

/* Graceful shutdown, step 2 (the shutdown timeout passed): abort every
 * generation in flight. Its unfinished choices end with finish_reason
 * "abort" and the response completes normally: a stream gets a final chunk
 * per choice, the usage chunk if asked and `data: [DONE]`; a non-streamed
 * request a 200 response with that finish reason. A transcription in
 * flight aborts its window and answers 503 (a stream: an error event).
 * Returns the number of generation requests aborted. Wait for
 * pg_server_active to reach 0 (the final events being written), then call
 * pg_server_stop. */
int64_t pg_server_abort_active(pg_server *s);

/* Log each model's request totals by finish reason (the counters of
 * vllm:request_success_total), e.g. before pg_server_stop at shutdown. */
void pg_server_log_summary(pg_server *s);

/* Stop accepting, abort what is in flight, join every thread, free. */
void pg_server_stop(pg_server *s);

#endif
