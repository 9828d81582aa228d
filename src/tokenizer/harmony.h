/* The OpenAI harmony format (gpt-oss models, tokenizer o200k_harmony):
 * rendering an OpenAI chat conversation to the prompt text, and parsing the
 * model's output into channels, incrementally.
 *
 * Reference: openai/harmony (docs/format.md, src/encoding.rs v0.0.8):
 * rendering is byte-identical to HarmonyEncoding::render_conversation_for_
 * completion (SystemContent, DeveloperContent with function tools rendered
 * by json_schema_to_typescript, RenderConversationConfig's default
 * auto_drop_analysis); the output parser follows StreamableParser's header
 * rules (parse_header_from_string) on text instead of tokens.
 *
 * Message text is "decoded with special tokens kept": the harmony tokens
 * appear as their text <|start|> <|end|> <|message|> <|channel|>
 * <|constrain|> <|return|> <|call|>. */
#ifndef PAGODA_TOKENIZER_HARMONY_H
#define PAGODA_TOKENIZER_HARMONY_H

#include <stdbool.h>
#include <stddef.h>

#include "base/status.h"

struct cJSON;

/* ---- rendering ---------------------------------------------------------- */

typedef struct pg_harmony_render_opts {
    /* "low", "medium" or "high"; NULL = "medium". */
    const char *reasoning_effort;
    /* "YYYY-MM-DD" for "Current date:"; NULL = today (UTC); "" = no date
     * line (the reference's SystemContent without a start date). */
    const char *date;
    /* Model identity line; NULL = "You are ChatGPT, a large language model
     * trained by OpenAI." */
    const char *model_identity;
    /* Append "<|start|>assistant" (the reference's ..._for_completion). */
    bool add_generation_prompt;
    /* Omit the system message (reference conversations without one). */
    bool no_system_message;
    /* Keep all analysis messages (RenderConversationConfig
     * auto_drop_analysis=false). */
    bool keep_analysis;
    /* Render as the gpt-oss Hugging Face chat template does
     * (chat-templates/openai-gpt-oss-120b.jinja) instead of the harmony
     * library: "# Instructions\n\n...\n\n" with a trailing blank line, only
     * messages[0] as instructions, tool calls as "to=functions.X<|channel|>
     * commentary json" with tojson'ed arguments, tool results tojson'ed,
     * reasoning never rendered except for a tool call's turn in progress. */
    bool hf_template;
} pg_harmony_render_opts;

/* Render an OpenAI chat conversation in harmony.
 * messages: JSON array of {"role", "content", ...}: content a string, null or
 *   a list of {"type":"text","text":...} parts (concatenated).
 *   - "system"/"developer": their text becomes the developer message's
 *     "# Instructions" (several are joined with "\n\n").
 *   - "user": <|start|>user<|message|>TEXT<|end|>.
 *   - "assistant": "reasoning_content" (or "reasoning", "thinking") becomes
 *     an analysis message; content a final message, or, with "tool_calls",
 *     a commentary preamble followed by one message per call:
 *     <|start|>assistant to=functions.NAME<|channel|>commentary
 *     <|constrain|>json<|message|>ARGS<|call|> (ARGS: the "arguments"
 *     string verbatim, an object printed as compact JSON).
 *   - "tool": <|start|>functions.NAME to=assistant<|channel|>commentary
 *     <|message|>TEXT<|end|>; NAME from "name", else the call whose id is
 *     "tool_call_id", else the latest call.
 *   Analysis messages before the first final message are dropped when the
 *   last assistant message is final (the reference's auto_drop_analysis).
 * tools: NULL or a JSON array of {"type":"function","function":{"name",
 *   "description", "parameters"}}, rendered as TypeScript in
 *   "namespace functions { ... }".
 * *out: malloc'ed NUL-terminated text (caller frees).
 * Errors: INVALID_ARG (not an array, unknown role, a non-text content
 * part, a tool without a name, a tool message with no call before it,
 * unknown reasoning effort, bad date), UNSUPPORTED (image/audio parts),
 * NOMEM. */
pagoda_status pg_harmony_render(const struct cJSON *messages, const struct cJSON *tools,
                                const pg_harmony_render_opts *opts, char **out);

/* ---- parsing ------------------------------------------------------------ */

typedef enum pg_harmony_event_kind {
    PG_HARMONY_REASONING,       /* text: a delta of an analysis message */
    PG_HARMONY_CONTENT,         /* text: a delta of final / commentary preamble /
                                   degraded text */
    PG_HARMONY_TOOL_CALL_BEGIN, /* name, index: a function call starts */
    PG_HARMONY_TOOL_ARGS,       /* text: a delta of the call's arguments */
    PG_HARMONY_TOOL_CALL_END,   /* name, index, text = all arguments, end */
    PG_HARMONY_MESSAGE_END,     /* end: a message ended */
    PG_HARMONY_ISSUE,           /* text: malformed output, what was done */
} pg_harmony_event_kind;

typedef enum pg_harmony_end {
    PG_HARMONY_END_NONE,   /* no end token: output ended / <|start|> came first */
    PG_HARMONY_END_END,    /* <|end|> */
    PG_HARMONY_END_RETURN, /* <|return|>: the final answer is complete */
    PG_HARMONY_END_CALL,   /* <|call|>: a tool call is complete */
} pg_harmony_end;

typedef struct pg_harmony_event {
    pg_harmony_event_kind kind;
    const char *text; /* valid during the callback; not NUL-terminated */
    size_t len;
    const char *name;    /* TOOL_*: the function name (after "functions.") */
    int index;           /* TOOL_*: 0-based index of the call in the output */
    pg_harmony_end end;  /* MESSAGE_END, TOOL_CALL_END */
    const char *channel; /* the current message's channel ("" if none) */
} pg_harmony_event;

typedef void (*pg_harmony_emit_fn)(void *user, const pg_harmony_event *ev);

typedef struct pg_harmony_parser pg_harmony_parser;

/* A parser for the text the model generates after "<|start|>assistant"
 * (the first message's role is assistant). Events go to emit(user, ev).
 * Errors: NOMEM. */
pagoda_status pg_harmony_parser_create(pg_harmony_emit_fn emit, void *user,
                                       pg_harmony_parser **out);
void pg_harmony_parser_free(pg_harmony_parser *p);

/* Feed the next `len` bytes of output. Text that may be the start of a
 * special token or an incomplete UTF-8 sequence is held back until the
 * next feed or finish, so any split of the output gives the same text.
 * Malformed output never fails: it is reported as PG_HARMONY_ISSUE events
 * and its text delivered as content (unknown channel, no channel, a
 * non-assistant author, a recipient other than functions.*, text outside a
 * message, a header without <|message|> or longer than 512 bytes).
 * Errors: NOMEM only (the parser is then unusable). */
pagoda_status pg_harmony_parser_feed(pg_harmony_parser *p, const char *text, size_t len);

/* End of output: flushes held-back text, ends an open message
 * (MESSAGE_END with PG_HARMONY_END_NONE; an open tool call gets its
 * TOOL_CALL_END and an issue). Errors: NOMEM. */
pagoda_status pg_harmony_parser_finish(pg_harmony_parser *p);

/* Number of PG_HARMONY_ISSUE events so far. */
int pg_harmony_parser_issues(const pg_harmony_parser *p);

#endif
