/* Structured-output fields of a completions / chat request -> a compiled
 * engine constraint (pagoda_grammar):
 *   response_format {"type": "text" | "json_object" | "json_schema",
 *                    "json_schema": {"name", "schema", "strict", "description"}}
 *   structured_outputs {"json" | "regex" | "choice" | "grammar" | "json_object"} (vLLM)
 *   guided_json, guided_regex, guided_choice, guided_grammar (vLLM, older names)
 *   guided_decoding_backend: accepted, pagoda has one backend.
 * At most one constraint per request. Errors are 400s naming the field
 * (and, for an unsupported schema keyword, the keyword). */
#ifndef PAGODA_SERVER_STRUCTURED_H
#define PAGODA_SERVER_STRUCTURED_H

#include <stdbool.h>
#include <stddef.h>

#include "pagoda.h"
#include "server/openai.h"

/* body: the request body (already checked strict JSON by pg_api_parse).
 * *out: NULL when the request has no constraint, else a reference the
 * caller frees with pagoda_grammar_free. harmony: a harmony-format chat
 * whose final message cannot be constrained (the model's tokenizer lacks
 * the channel tokens): a constraint is a 400 naming the field. (Harmony
 * chats of gpt-oss constrain the final channel's content, after
 * "<|channel|>final<|message|>": pagoda_request.reasoning_end_ids.)
 * Errors: PAGODA_ERR_INVALID_ARG with err filled (400). */
pagoda_status pg_structured_from_body(pagoda_engine *e, const char *body, size_t len, bool harmony,
                                      pagoda_grammar **out, pg_api_error *err);

#endif
