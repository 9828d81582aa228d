/* Reasoning and tool-call parsers of chat output in plain-text formats
 * (every family but harmony, whose parser is src/tokenizer/harmony.h): a
 * streaming parser fed the model's text in any split, calling back with the
 * same events as the harmony parser (pg_harmony_event: reasoning deltas,
 * content deltas, tool call begin / arguments / end, issues), so one mapper
 * (server/harmony_chat.h, pg_hchat) turns either into OpenAI's message and
 * stream deltas.
 *
 * Formats (vLLM's parser names; the references are vLLM's
 * entrypoints/openai/tool_parsers and reasoning parsers, and the families'
 * chat templates in ../shared/assets/chat-templates):
 *   reasoning qwen3:       <think>REASONING</think>CONTENT, the tag at the
 *                          start of the output (leading whitespace allowed);
 *                          no tag: all content. When the prompt already ends
 *                          inside <think> (opts.in_reasoning: Qwen3-2507
 *                          thinking and DeepSeek-R1 templates open it), the
 *                          output starts as reasoning.
 *   reasoning deepseek_r1: reasoning until </think> (an opening <think> at
 *                          the start is dropped); no </think>: all reasoning.
 *                          Content after </think> starts after its leading
 *                          whitespace (llama.cpp's choice; vLLM keeps the
 *                          "\n\n" the models write there).
 *   tools hermes:          <tool_call>{"name": N, "arguments": {...}}</tool_call>
 *                          (Hermes 2 Pro, Qwen2.5, Qwen3), any number; an
 *                          unclosed last call is taken at the end.
 *   tools llama3_json:     the output starts with {"name": N, "parameters"
 *                          (or "arguments"): {...}} (optionally after
 *                          <|python_tag|>); several separated by ";".
 *   tools mistral:         [TOOL_CALLS][{"name": N, "arguments": {...}}, ...]
 *                          (v3 tokenizers) or [TOOL_CALLS]N[ARGS]{...} (v11+).
 * Text outside calls is content; whitespace-only content around calls is
 * dropped (trailing whitespace of content is held back until more content
 * comes). Malformed output (bad JSON, a call without a name, arguments that
 * are not an object) is delivered as content with an ISSUE event: never an
 * error. A possible partial tag at the end of a feed is held back, so any
 * split gives the same events' text. A call that starts the usual way is
 * streamed (OpenAI's incremental tool-call deltas): hermes
 * {"name": N, "arguments": {, llama3_json the same with "parameters" or
 * "arguments", each item of mistral's [TOOL_CALLS][...] list written that
 * way, and mistral v11's N[ARGS]{. Begin (with the name) comes at once,
 * then the arguments (compacted: whitespace outside strings dropped) in
 * pieces as they are generated, end after the call's text (hermes:
 * </tool_call>; llama3_json and list items: the object's '}'; v11: the
 * arguments' '}'). Such a call is not taken back if it turns out malformed
 * (an ISSUE, the text after its arguments as content; a list that goes on
 * with something other than ',' or ']': the rest is content), as with
 * vLLM's streaming parsers. Other calls (keys in another order, arguments
 * as a JSON string) are delivered whole when their text is complete
 * (begin, one arguments delta, end). Either way a stream equals the
 * non-streamed message.
 *
 * Pure: no engine; unit-tested in tests/test_output_parser.c. */
#ifndef PAGODA_SERVER_OUTPUT_PARSER_H
#define PAGODA_SERVER_OUTPUT_PARSER_H

#include <stdbool.h>
#include <stddef.h>

#include "base/status.h"
#include "tokenizer/harmony.h"

typedef enum pg_reasoning_format {
    PG_REASONING_NONE = 0,
    PG_REASONING_QWEN3,
    PG_REASONING_DEEPSEEK_R1,
} pg_reasoning_format;

typedef enum pg_tool_format {
    PG_TOOLS_NONE = 0,
    PG_TOOLS_HERMES,
    PG_TOOLS_LLAMA3_JSON,
    PG_TOOLS_MISTRAL,
    PG_TOOLS_HARMONY, /* gpt-oss: parsed by the harmony parser, not here */
} pg_tool_format;

typedef struct pg_oparse_opts {
    pg_reasoning_format reasoning;
    bool in_reasoning;    /* the prompt ends inside an open <think> */
    pg_tool_format tools; /* NONE: no tool parsing (no tools, tool_choice none) */
} pg_oparse_opts;

typedef struct pg_oparse pg_oparse;

/* A parser with `opts` (HARMONY tools are refused: INVALID_ARG). Events go
 * to emit(user, ev); TOOL_CALL_END events carry end PG_HARMONY_END_CALL.
 * Errors: INVALID_ARG, NOMEM. */
pagoda_status pg_oparse_create(const pg_oparse_opts *opts, pg_harmony_emit_fn emit, void *user,
                               pg_oparse **out);
void pg_oparse_free(pg_oparse *p);

/* Feed the next len bytes of output. Errors: NOMEM only (then unusable). */
pagoda_status pg_oparse_feed(pg_oparse *p, const char *text, size_t len);

/* End of output: flush what was held back, take an unclosed last call.
 * Further feeds are ignored. Errors: NOMEM. */
pagoda_status pg_oparse_finish(pg_oparse *p);

/* ISSUE events so far (malformed output delivered as content). */
int pg_oparse_issues(const pg_oparse *p);

/* Names: "qwen3", "deepseek_r1" / "hermes", "llama3_json", "mistral",
 * "harmony" (and "openai", vLLM's name for harmony). False when unknown. */
bool pg_reasoning_format_parse(const char *name, pg_reasoning_format *out);
bool pg_tool_format_parse(const char *name, pg_tool_format *out);
const char *pg_tool_format_name(pg_tool_format f);
const char *pg_reasoning_format_name(pg_reasoning_format f);

/* The formats a chat template speaks, from its text: tools (<tool_call> ->
 * hermes, [TOOL_CALLS] -> mistral, Llama 3.1's "Given the following
 * functions" / <|python_tag|> -> llama3_json; else NONE) and reasoning
 * (<think> -> qwen3; else NONE). *mistral_v11: the template writes
 * "[TOOL_CALLS]NAME[ARGS]ARGS" rather than a JSON list. NULL text: NONE. */
void pg_oparse_detect(const char *template_text, pg_tool_format *tools,
                      pg_reasoning_format *reasoning, bool *mistral_v11);

/* True when a rendered prompt ends inside an open <think> (the last <think>
 * has no </think> after it): the output starts as reasoning. */
bool pg_oparse_prompt_in_reasoning(const char *prompt, size_t len);

/* Where a chat's grammar (response_format / structured_outputs / guided_*,
 * or the grammar forcing a tool call) applies on a reasoning model
 * (pagoda_request.grammar_after_reasoning): */
typedef enum pg_grammar_reasoning {
    PG_GRAMMAR_WHOLE = 0,     /* to the whole output (today's behaviour) */
    PG_GRAMMAR_AFTER_OPEN,    /* the output starts as reasoning: after its </think> */
    PG_GRAMMAR_AFTER_MAY_OPEN /* the first token may be <think>: after its </think>;
                                 any other first token starts the grammar's output */
} pg_grammar_reasoning;

/* The rule, for reasoning format f, the rendered prompt[0..len), and
 * whether the grammar itself may start with a "<think>" block
 * (grammar_writes_think: pagoda_grammar_allows_prefix after no or one
 * whitespace character):
 *  - NONE: WHOLE (nothing to split);
 *  - grammar_writes_think: WHOLE. The request spells the reasoning block
 *    itself (e.g. a regex "<think>[a-z]+</think>..."), so the grammar owns
 *    the whole output: letting the model open <think> instead would take
 *    the reasoning out of the grammar and then apply the grammar from its
 *    start after </think>, asking for a second <think> block;
 *  - deepseek_r1: AFTER_OPEN (the parser reads the output as reasoning up
 *    to </think> whether or not the prompt opened it: R1's template does);
 *  - qwen3: AFTER_OPEN when the prompt ends inside <think> (thinking
 *    templates: Qwen3-2507, R1-Distill); WHOLE when it ends with a closed
 *    block, </think> and whitespace (Qwen3's enable_thinking false: the
 *    model was told not to think); else AFTER_MAY_OPEN (Qwen3's template
 *    leaves opening <think> to the model).
 * Only the start of a grammar is checked: one that writes "</think>" after
 * other text (on a prompt ending inside <think>) is applied after the
 * model's own </think>. Pure. */
pg_grammar_reasoning pg_oparse_grammar_reasoning(pg_reasoning_format f, const char *prompt,
                                                 size_t len, bool grammar_writes_think);

#endif
