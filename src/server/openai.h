/* OpenAI API mapping for `pagoda serve`: request parsing and validation,
 * response / SSE chunk / error JSON building. Pure data in, pure data out:
 * nothing here touches an engine, so it is unit-tested on its own
 * (tests/test_server_api.c).
 *
 * Reference: the OpenAI API reference (Completions, Chat Completions,
 * streaming) and vLLM's protocol.py (extra sampling fields: top_k, min_p,
 * repetition_penalty, stop_token_ids, ignore_eos, min_tokens,
 * skip_special_tokens, include_stop_str_in_output, chat_template_kwargs). */
#ifndef PAGODA_SERVER_OPENAI_H
#define PAGODA_SERVER_OPENAI_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "pagoda.h"

#define PG_API_MAX_LOGPROBS 20 /* vLLM's default max_logprobs */
#define PG_API_MAX_N 128       /* choices per request */
#define PG_API_MAX_STOP 16     /* stop strings per request */

typedef enum pg_api_kind {
    PG_API_COMPLETION = 0, /* POST /v1/completions */
    PG_API_CHAT,           /* POST /v1/chat/completions */
} pg_api_kind;

/* An HTTP error in OpenAI's shape:
 * {"error": {"message", "type", "param", "code"}}. */
typedef struct pg_api_error {
    int status;       /* HTTP status: 400, 401, 404, 405, 413, 503, 500 */
    const char *type; /* "invalid_request_error", "authentication_error", ... */
    const char *code; /* NULL or e.g. "model_not_found" */
    char param[64];   /* offending field ("" = none) */
    char message[768];
} pg_api_error;

/* Fill `err` (printf-style message) and return PAGODA_ERR_INVALID_ARG. */
pagoda_status pg_api_fail(pg_api_error *err, int status, const char *param, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* The error JSON text of `err` (malloc'ed; bytes of the message that are not
 * valid UTF-8 become U+FFFD). NULL when out of memory. */
char *pg_api_error_json(const pg_api_error *err);

/* One prompt of a completion request: text or token ids (exactly one set). */
typedef struct pg_api_prompt {
    char *text; /* NUL-terminated UTF-8, or NULL */
    size_t text_len;
    int32_t *ids;
    size_t n_ids;
} pg_api_prompt;

/* tool_choice of a chat request (OpenAI): "none", "auto", "required" or
 * {"type": "function", "function": {"name": ...}}. */
typedef enum pg_tool_choice {
    PG_TOOL_CHOICE_NONE = 0,
    PG_TOOL_CHOICE_AUTO,
    PG_TOOL_CHOICE_REQUIRED,
    PG_TOOL_CHOICE_NAMED,
} pg_tool_choice;

/* A parsed and validated /v1/completions or /v1/chat/completions body. */
typedef struct pg_api_request {
    pg_api_kind kind;
    char *model;            /* NULL when absent */
    pg_api_prompt *prompts; /* completions: >= 1 prompts */
    size_t n_prompts;
    char *messages_json;         /* chat: the messages array re-serialized */
    char *tools_json;            /* chat: tools array or NULL */
    int n_tools;                 /* chat: items of tools */
    pg_tool_choice tool_choice;  /* chat: default AUTO with tools, NONE without */
    char *tool_choice_name;      /* NAMED: the function */
    bool parallel_tool_calls;    /* default true; false: at most one call */
    bool include_reasoning;      /* vLLM, default true; false: no reasoning_content */
    char *kwargs_json;           /* chat: chat_template_kwargs object or NULL */
    bool add_generation_prompt;  /* chat, default true */
    bool continue_final_message; /* chat (vLLM): the prompt ends inside the final
                                    assistant message (see pg_api_continue_final) */
    char *final_text;            /* that message's text (continue_final_message) */
    char *reasoning_effort;      /* chat: "low", "medium", "high" or NULL (harmony models) */
    bool return_token_strs;      /* /tokenize (vLLM): also return the token pieces */
    int32_t n;                   /* choices per prompt, >= 1 */
    bool stream;
    bool include_usage; /* stream_options.include_usage */
    bool echo;          /* completions: prepend the prompt text */
    char *user;
    char *request_id; /* vLLM: the response id becomes "chatcmpl-" / "cmpl-" + it */
    /* The engine request every choice submits a copy of (the server adds
     * the prompt's ids and the choice's seed): filled by the parser with
     * the sampling defaults and the body's fields: sampling (logprobs: -1
     * none; completions: top-N; chat: top_logprobs), add_special_tokens
     * (text prompts; completions default true, chat default false),
     * cache_salt; prompt_logits_pos and the reasoning ids -1. The server
     * sets the grammar and what it applies after. Its arrays point into the
     * owned copies below. */
    pagoda_request engine_req;
    char *cache_salt; /* vLLM's cache_salt: a non-empty string or NULL (absent) */
    pagoda_logit_bias *logit_bias;
    int32_t *stop_token_ids;
    char **stop;
} pg_api_request;

/* Parse and validate a JSON body into `out` (its engine_req included). The
 * body must be strict RFC 8259 JSON
 * (src/server/json_check.h: bad escapes, lone surrogates, invalid UTF-8,
 * raw control characters, bad numbers, trailing text, nesting over
 * PG_JSON_MAX_DEPTH all give a 400 "request body is not valid JSON: <why>
 * at byte N"); a string holding U+0000 (\u0000) gives a 400 naming the
 * field, since pagoda's strings are NUL-terminated. `defaults` gives the sampling defaults
 * (pagoda_sampling_defaults); its stop_token_ids (borrowed, must outlive the
 * request) stay in force and the request's are appended; its other array
 * fields are ignored. On error `err`
 * gets a 400 with the field name and the reason, nothing is allocated and
 * PAGODA_ERR_INVALID_ARG is returned. Unknown fields are ignored; known
 * fields of the wrong type are errors. Context-length checks need the
 * tokenizer and happen later (pg_api_check_length).
 * Completions: `prompt` is a string, a list of strings, a list of token ids
 * or a list of token-id lists (not a mix; errors name the item's index).
 * `seed` is any int64, read exactly from the number's text (vLLM accepts
 * [-2^63, 2^63-1]); negative seeds map to seed & INT64_MAX.
 * `cache_salt` (both endpoints, vLLM's field) must be a non-empty string:
 * requests share prefix-cache blocks only with requests of the same salt.
 * Chat: continue_final_message needs add_generation_prompt false (its
 * default is true, as in vLLM) and an assistant message last. `tools`
 * items are {"type": "function", "function": {"name" (OpenAI's
 * [a-zA-Z0-9_-]{1,64}), "description", "parameters" (an object), "strict"}};
 * tool_choice is "none" | "auto" | "required" | {"type": "function",
 * "function": {"name"}} naming one of the tools, and needs tools (vLLM's
 * "When using `tool_choice`, `tools` must be set."). */
pagoda_status pg_api_parse(pg_api_kind kind, const char *body, size_t len,
                           const pagoda_sampling *defaults, pg_api_request *out, pg_api_error *err);
void pg_api_request_free(pg_api_request *r);

/* POST /tokenize (vLLM's TokenizeCompletionRequest / TokenizeChatRequest):
 * `prompt` (a string; out->prompts[0], kind COMPLETION, add_special_tokens
 * default true) or `messages` (validated as for chat; kind CHAT,
 * add_special_tokens default false, add_generation_prompt default true,
 * tools, chat_template_kwargs, continue_final_message), `model`,
 * `return_token_strs`. Same JSON strictness and errors as pg_api_parse. */
pagoda_status pg_api_parse_tokenize(const char *body, size_t len, pg_api_request *out,
                                    pg_api_error *err);

/* POST /detokenize: `tokens` (non-negative integer ids; vocabulary range is
 * checked by the caller) and `model`. out->prompts[0].ids holds the ids. */
pagoda_status pg_api_parse_detokenize(const char *body, size_t len, pg_api_request *out,
                                      pg_api_error *err);

/* `model` of a request against the served name: NULL (absent) or equal is
 * fine; anything else is a 404 with code "model_not_found", as vLLM. */
pagoda_status pg_api_check_model(const char *requested, const char *served, pg_api_error *err);

/* n_choices engine requests (prompts x n) against what the server can ever
 * hold at once, max_num_seqs running + max_queue waiting: more can never be
 * admitted, so that is a 400 naming both limits (a transiently full queue
 * is the server's 503 + Retry-After instead). */
pagoda_status pg_api_check_capacity(size_t n_choices, int64_t max_num_seqs, int64_t max_queue,
                                    pg_api_error *err);

/* continue_final_message: the length of `rendered` (a chat rendered with
 * add_generation_prompt false) to keep so that the prompt ends right after
 * the final message's text, as HF transformers' apply_chat_template does:
 * find the last occurrence of final_text stripped of whitespace; keep the
 * text's trailing whitespace when the template preserved the text exactly.
 * 400 when the template does not reproduce the text. */
pagoda_status pg_api_continue_final(const char *rendered, size_t len, const char *final_text,
                                    size_t *keep, pg_api_error *err);

/* Check a prompt of n_prompt tokens against the context (max_model_len):
 * an empty prompt, a prompt that fills the context, or prompt + max_tokens
 * over it give a 400 naming the numbers. max_tokens 0 = up to the context. */
pagoda_status pg_api_check_length(int32_t n_prompt, int32_t max_tokens, int32_t max_model_len,
                                  pg_api_error *err);

/* --------------------------------------------------------------- results */

/* One generated position with its logprobs. The engine thread records the
 * token ids only (text NULL); the connection's thread decodes the texts
 * (UTF-8-safe: invalid bytes are replaced by U+FFFD) before the entry is
 * written out, in the context of `prev`, the token before it. */
typedef struct pg_api_top {
    char *text;
    float logprob;
    int32_t token;
} pg_api_top;

typedef struct pg_api_logprob {
    char *text;
    float logprob;
    pg_api_top *top;
    int32_t n_top;
    int32_t token, prev; /* the sampled token and the one before it (-1: none) */
} pg_api_logprob;

struct pg_hchat;
struct cJSON;

/* The accumulated result of one choice. */
typedef struct pg_api_choice {
    char *text; /* NUL-terminated; echo prefix included */
    size_t len, cap;
    pg_api_logprob *lp; /* one per generated token when logprobs were asked */
    size_t n_lp, cap_lp;
    size_t text_offset0; /* bytes of the echoed prompt (completions logprobs) */
    pagoda_finish_reason finish;
    char *stop_reason;  /* matched stop string or NULL */
    int32_t stop_token; /* matched stop token or -1 */
    int32_t n_prompt_tokens;
    int32_t n_output_tokens;
    int32_t n_cached_tokens;
    /* Chats of harmony models (server/harmony_chat.h): the message and the
     * finish_reason come from it instead of `text` (owned; NULL otherwise). */
    struct pg_hchat *harmony;
} pg_api_choice;

/* Append text / a logprob entry (taking ownership of `lp`'s strings). */
pagoda_status pg_api_choice_append(pg_api_choice *c, const char *text, size_t len);
pagoda_status pg_api_choice_add_logprob(pg_api_choice *c, pg_api_logprob *lp);
void pg_api_logprob_free(pg_api_logprob *lp);
void pg_api_choice_free(pg_api_choice *c);

/* Copy `len` bytes into a NUL-terminated string, replacing invalid UTF-8
 * sequences by U+FFFD (for token texts, which may split characters). */
char *pg_api_utf8_dup(const char *s, size_t len);

/* What every response / chunk carries. */
typedef struct pg_api_meta {
    pg_api_kind kind;
    const char *id;    /* "cmpl-..." / "chatcmpl-..." */
    int64_t created;   /* unix seconds */
    const char *model; /* served model name */
} pg_api_meta;

/* The "usage" object: prompt tokens of each prompt count once (n choices of
 * one prompt share it), completion tokens of every choice. */
typedef struct pg_api_usage {
    int64_t prompt_tokens, completion_tokens, cached_tokens;
} pg_api_usage;

pg_api_usage pg_api_usage_of(const pg_api_choice *choices, size_t n_choices, int32_t n_per_prompt);

/* Non-streamed response JSON (malloc'ed). */
char *pg_api_response_json(const pg_api_meta *m, const pg_api_choice *choices, size_t n_choices,
                           int32_t n_per_prompt);

/* One SSE event "data: {...}\n\n" (malloc'ed) for choice `index`: `text`
 * (len bytes, may be empty), logprob entries lp[0..n_lp), `finish` (NONE =
 * null). Chat: `role_first` adds delta.role = "assistant". `text_offset` is
 * the byte offset of `text` in the choice (completions logprobs). */
char *pg_api_chunk_sse(const pg_api_meta *m, int32_t index, bool role_first, const char *text,
                       size_t len, const pg_api_logprob *lp, size_t n_lp, size_t text_offset,
                       pagoda_finish_reason finish, const char *stop_reason);

/* One chat.completion.chunk event "data: {...}\n\n" (malloc'ed) for choice
 * `index` with `delta` (a cJSON object, consumed; NULL = {}), logprob entries
 * lp[0..n_lp) (none: null), finish_reason `finish` (NULL = null) and the
 * stop reason (a string, else stop_token when >= 0 and finish is set, else
 * null). Harmony chats stream with it (server/harmony_chat.h deltas). */
char *pg_api_chat_delta_sse(const pg_api_meta *m, int32_t index, struct cJSON *delta,
                            const pg_api_logprob *lp, size_t n_lp, const char *finish,
                            const char *stop_reason, int32_t stop_token);

/* The final usage event (choices: []) of a stream. */
char *pg_api_usage_sse(const pg_api_meta *m, const pg_api_usage *u);

#define PG_API_SSE_DONE "data: [DONE]\n\n"

/* finish_reason texts come from pagoda_finish_reason_name (the one namer;
 * pg_hchat_finish_name adds "tool_calls" for a chat that called a tool). */

#endif
