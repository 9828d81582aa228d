/* The HTTP side of `pagoda bench serve`: drives streaming requests against
 * any OpenAI-compatible server (vLLM, llama.cpp's llama-server, pagoda) with
 * libcurl's multi interface, so hundreds of concurrent streams run from one
 * thread, and records each request's timeline the way vLLM's client does
 * (vllm/benchmarks/lib/endpoint_request_func.py):
 * - st = just before the request is handed to curl; TTFT = first SSE event
 *   carrying a non-empty `choices`; ITL = gaps between such events (events
 *   delivered in one read share a timestamp, as with aiohttp's iter_any);
 * - E2EL: /v1/completions: st -> last choice-carrying event;
 *   /v1/chat/completions: st -> last data event (usage included), as vLLM;
 * - output tokens = usage.completion_tokens and input tokens =
 *   usage.prompt_tokens when the server sends them (vLLM overrides its
 *   prompt_len with the server's count the same way).
 * A request fails on a transport error (refused, dropped connection,
 * truncated chunked body), an HTTP status other than 200, an `error` object
 * in the stream, or a stream without any choice-carrying event. */
#ifndef PAGODA_SERVER_BENCH_CLIENT_H
#define PAGODA_SERVER_BENCH_CLIENT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/status.h"
#include "bench/harness.h" /* pg_bench_now */
#include "bench/bench_dataset.h"

typedef struct pg_bench_client_cfg {
    const char *base_url; /* "http://127.0.0.1:8000" */
    const char *endpoint; /* "/v1/completions" or "/v1/chat/completions" */
    const char *model;    /* the request's "model" */
    const char *api_key;  /* Bearer token, NULL for none */
    bool prompt_as_ids;   /* /v1/completions: send prompt_ids as a list */
    bool ignore_eos;      /* send "ignore_eos": true */
    int max_concurrency;  /* 0: unlimited */
    bool progress;        /* draw a progress bar on stderr */
    double timeout_s;     /* per request, 0: 6 hours (vLLM's aiohttp timeout) */
} pg_bench_client_cfg;

/* One request's recorded timeline (seconds). */
typedef struct pg_bench_req_result {
    bool success;
    double start_time; /* s since the run began */
    double ttft, latency;
    double *itl;
    size_t n_itl;
    int32_t n_chunks;            /* choice-carrying events */
    int32_t usage_tokens;        /* usage.completion_tokens, -1 if not sent */
    int32_t usage_prompt_tokens; /* usage.prompt_tokens, -1 if not sent */
    char *text;                  /* generated text (concatenated deltas) */
    size_t text_len;
    char *error; /* one line, NULL on success */
} pg_bench_req_result;

/* Run `n` requests; request i is started at arrivals[i] seconds after the
 * run begins (or later, when max_concurrency requests are in flight).
 * results[n] are filled (free each with pg_bench_req_result_free);
 * *duration_s gets the wall time from the run's start to the last
 * completion. Request failures are recorded, not returned. Errors:
 * PAGODA_ERR_INVALID_ARG (endpoint, prompts), PAGODA_ERR_NOMEM,
 * PAGODA_ERR_INTERNAL (curl could not be set up). */
pagoda_status pg_bench_client_run(const pg_bench_client_cfg *cfg, const pg_bench_request *reqs,
                                  size_t n, const double *arrivals, pg_bench_req_result *results,
                                  double *duration_s);

void pg_bench_req_result_free(pg_bench_req_result *r);

/* GET base_url/v1/models and return the first model's id (malloc'ed).
 * Errors: PAGODA_ERR_IO (connection, HTTP status), PAGODA_ERR_FORMAT (no
 * data[0].id in the reply). */
pagoda_status pg_bench_fetch_model(const char *base_url, const char *api_key, double timeout_s,
                                   char **model);

/* One data event of an OpenAI stream, read as the client reads it. */
typedef enum pg_bench_event_kind {
    PG_BENCH_EVENT_DONE,   /* "[DONE]" */
    PG_BENCH_EVENT_ERROR,  /* an error object: message */
    PG_BENCH_EVENT_CHOICE, /* a non-empty `choices`: text (may be NULL) */
    PG_BENCH_EVENT_OTHER,  /* anything else (the usage event): the token counts */
} pg_bench_event_kind;

typedef struct pg_bench_event {
    pg_bench_event_kind kind;
    /* ERROR: the message; CHOICE: choices[0].text (completions) or
     * choices[0].delta.content (chat) when a string, else NULL. Points into
     * `json`. */
    const char *text;
    /* OTHER: usage.completion_tokens / usage.prompt_tokens, -1 when absent */
    int32_t completion_tokens, prompt_tokens;
    struct cJSON *json; /* owner of text (pg_bench_event_free) */
} pg_bench_event;

/* Read one SSE data payload (`len` bytes) of a completions (chat false) or
 * chat stream, as vLLM's client does: "[DONE]"; an error object
 * ({"error": {"message"}}, {"error": "..."}, {"object": "error", "message"});
 * a chunk with choices; or a chunk without (usage). Errors:
 * PAGODA_ERR_FORMAT "malformed JSON in the event stream: <data>" (not a
 * JSON object), "usage.completion_tokens is not a token count: <value>"
 * (usage counts must be integers in [0, 2^31-1]). Nothing to free on error. */
pagoda_status pg_bench_event_parse(const char *data, size_t len, bool chat, pg_bench_event *ev);
void pg_bench_event_free(pg_bench_event *ev);

/* True when `endpoint` names the chat API ("/chat/completions" suffix). */
bool pg_bench_endpoint_is_chat(const char *endpoint);

#endif
