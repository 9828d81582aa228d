/* Tool calling of a chat request: `tools` / `tool_choice` /
 * `parallel_tool_calls` checked against what the served model can do, and
 * the grammar that forces a valid call for tool_choice "required" or a named
 * function, written in the model family's call syntax.
 *
 * Behaviour follows vLLM's serving_chat.py and protocol.py
 * (ChatCompletionRequest.check_tool_usage): tools without tool_choice mean
 * "auto"; "auto" needs the server started with --enable-auto-tool-choice and
 * a tool-call parser (harmony models excepted), else a 400; "none" keeps the
 * tools in the prompt and parses no calls. Unlike vLLM, which forces a bare
 * JSON list for "required", the forced output here is the family's own
 * syntax (what the model was trained to write, and what the parser of
 * "auto" reads), as llama.cpp's tool-call grammars do:
 *   hermes       <tool_call>\n{"name": N, "arguments": ARGS}\n</tool_call>
 *                (parallel: more, separated by "\n")
 *   llama3_json  {"name": N, "parameters": ARGS} (parallel: "; " between)
 *   mistral      [TOOL_CALLS][{"name": N, "arguments": ARGS}, ...] (v3), or
 *                [TOOL_CALLS]N[ARGS]ARGS (v11 templates; parallel: repeated)
 * where ARGS is a JSON value of the function's `parameters` schema (the
 * grammar engine's JSON Schema subset: an unsupported keyword is a 400
 * naming it; no `parameters`: only {}). Several calls only for "required"
 * with parallel_tool_calls true (a named choice is one call). */
#ifndef PAGODA_SERVER_TOOL_CALLS_H
#define PAGODA_SERVER_TOOL_CALLS_H

#include <stdbool.h>

#include "server/openai.h"
#include "server/output_parser.h"

/* The grammar spec (PAGODA_GRAMMAR_EBNF_SCHEMA: {"ebnf", "schema"} JSON
 * text, malloc'ed into *spec) forcing one call (parallel false) or one or
 * more calls of the request's tools in `format`'s syntax: any tool for
 * tool_choice "required", only `r->tool_choice_name` for a named choice.
 * Errors: INVALID_ARG with err filled (400 naming "tool_choice" for a
 * format that cannot be forced, NONE or HARMONY), NOMEM (500). */
pagoda_status pg_tools_grammar_spec(const pg_api_request *r, pg_tool_format format,
                                    bool mistral_v11, char **spec, pg_api_error *err);

/* What a served model does with the request's tools: `format` (its parser,
 * NONE when it has none), `harmony` (gpt-oss), `auto_enabled`
 * (--enable-auto-tool-choice). 400 (param "tool_choice") for "auto" without
 * the flag or a parser (vLLM's message), and for "required" / named on a
 * model with no parser or on harmony models (not supported yet). Sets
 * *parse: tool calls are parsed from the output (tools given, choice not
 * "none"). */
pagoda_status pg_tools_check(const pg_api_request *r, pg_tool_format format, bool harmony,
                             bool auto_enabled, bool *parse, pg_api_error *err);

#endif
