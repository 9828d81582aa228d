/* One chat choice as OpenAI sees it, for harmony models (gpt-oss) and for
 * the plain-text formats of server/output_parser.h (<think> reasoning,
 * hermes / llama3_json / mistral tool calls): the model's output text goes
 * through a parser (src/tokenizer/harmony.h, or pg_oparse: both emit
 * pg_harmony_event) and comes out as the assistant message's
 * `reasoning_content` (analysis channel; vLLM's field name), `content`
 * (final channel, commentary preambles, malformed text) and `tool_calls`
 * (commentary messages to functions.NAME), with finish_reason "tool_calls"
 * when a call ended with <|call|>.
 *
 * Pure data in, JSON out: no engine, no HTTP, so the mapping is unit-tested
 * on synthetic model text (tests/test_server_harmony.c). The server keeps
 * one per choice (n > 1: one parser each), feeds it what the engine
 * produced, and turns it into a non-streamed message (pg_hchat_message) or
 * into stream deltas (pg_hchat_take_deltas), so the streamed deltas always
 * add up to the non-streamed message. Malformed output never fails: the
 * parser delivers its text as content and counts an issue. */
#ifndef PAGODA_SERVER_HARMONY_CHAT_H
#define PAGODA_SERVER_HARMONY_CHAT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "pagoda.h"
#include "server/output_parser.h"

struct cJSON;

typedef struct pg_hchat pg_hchat;

/* A choice's mapper. `seed` makes its tool call ids ("call_" + 24 hex
 * digits, a mix of seed and the call's index: unique per server start when
 * the server seeds it per job and choice). Errors: NOMEM. */
pagoda_status pg_hchat_create(uint64_t seed, pg_hchat **out);
/* The same for plain-text output: reasoning tags and a tool-call syntax
 * per `opts` (server/output_parser.h). Errors: INVALID_ARG (harmony
 * tools: use pg_hchat_create), NOMEM. */
pagoda_status pg_hchat_create_text(uint64_t seed, const pg_oparse_opts *opts, pg_hchat **out);
void pg_hchat_free(pg_hchat *h);

/* Request options: at most max_calls tool calls (0 = any; OpenAI's
 * parallel_tool_calls false: 1; later calls are dropped), and no
 * reasoning_content when include_reasoning is false (vLLM's field). Call
 * before the first feed. */
void pg_hchat_limit(pg_hchat *h, size_t max_calls, bool include_reasoning);

/* Feed the next `len` bytes of model output (any split). Errors: NOMEM
 * (the mapper is then unusable). */
pagoda_status pg_hchat_feed(pg_hchat *h, const char *text, size_t len);

/* End of output: flushes held-back text and ends an open message. Further
 * feeds are ignored. Errors: NOMEM. */
pagoda_status pg_hchat_finish(pg_hchat *h);

/* True for the text of a token that ends a harmony message or turn and
 * that the engine keeps out of the text when it stops on it (<|return|>,
 * <|call|>, <|end|>): the server feeds it before pg_hchat_finish. */
bool pg_hchat_is_end_token(const char *text, size_t len);

/* What was produced since the previous call, as the "delta" objects of
 * chat.completion.chunk events, in order (a cJSON array, caller frees;
 * NULL when out of memory). Consecutive pieces of one kind are joined:
 *   {"reasoning_content": "..."}
 *   {"content": "..."}
 *   {"tool_calls": [{"index": i, "id": "call_...", "type": "function",
 *                    "function": {"name": "NAME", "arguments": ""}}]}
 *   {"tool_calls": [{"index": i, "function": {"arguments": "..."}}]}
 * (OpenAI's streaming shape: a call's first delta names it, later ones
 * carry argument fragments). */
struct cJSON *pg_hchat_take_deltas(pg_hchat *h);

/* The whole assistant message so far: {"role": "assistant", "content":
 * text, or null when there is none and there are tool calls,
 * "reasoning_content": text or null, "tool_calls": [{"id", "type":
 * "function", "function": {"name", "arguments"}}] (only when there are
 * calls)}. NULL when out of memory. */
struct cJSON *pg_hchat_message(const pg_hchat *h);

/* The choice's finish_reason: "tool_calls" when the engine stopped (STOP)
 * and a call ended with <|call|>; else the engine's ("stop", "length",
 * "abort", "error"); NULL while running. Plain-text formats: every parsed
 * call counts as ended with <|call|>. */
const char *pg_hchat_finish_name(const pg_hchat *h, pagoda_finish_reason r);

/* Tool calls so far, and how many issues (malformed output) the parser saw. */
size_t pg_hchat_num_calls(const pg_hchat *h);
int pg_hchat_issues(const pg_hchat *h);

#endif
