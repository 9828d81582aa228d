/* Chat templates: Hugging Face transformers' apply_chat_template(...,
 * tokenize=False) in C, over the Jinja subset interpreter of jinja.h.
 *
 * Reference: transformers `render_jinja_template` (chat_template_utils.py):
 * jinja2 ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
 * extensions=[loopcontrols]); globals raise_exception(msg) and
 * strftime_now(fmt); tojson = json.dumps(ensure_ascii=False, indent=...).
 * The template sees: messages, tools (None when not given), documents (None),
 * add_generation_prompt, the tokenizer's special tokens (bos_token,
 * eos_token, pad_token, unk_token as strings) and every key of the
 * chat_template_kwargs object (e.g. enable_thinking) at top level.
 *
 * Templates are untrusted (server users may send one): rendering is bounded
 * by limits on output size (16 MiB), memory (256 MiB), evaluation steps
 * (5M), nesting and macro recursion (see jinja.h); exceeding one is an
 * error (PAGODA_ERR_LIMIT), never a crash or a hang.
 *
 * Thread safety: a compiled template is immutable; renders of the same
 * template may run concurrently. */
#ifndef PAGODA_TOKENIZER_CHAT_TEMPLATE_H
#define PAGODA_TOKENIZER_CHAT_TEMPLATE_H

#include <stdbool.h>
#include <time.h>

#include "base/status.h"

struct cJSON;
typedef struct pg_chat_template pg_chat_template;

/* Special tokens passed to the template as strings; NULL = not passed (the
 * template then sees it as undefined). */
typedef struct pg_chat_special_tokens {
    const char *bos_token, *eos_token, *pad_token, *unk_token;
} pg_chat_special_tokens;

/* Compile Jinja source (UTF-8, NUL-terminated).
 * Errors: PAGODA_ERR_FORMAT "chat template: line N: <problem>" for syntax
 * errors and unsupported statements (include/extends/block, recursive
 * loops); NOMEM. */
pagoda_status pg_chat_template_compile(const char *source, pg_chat_template **out);
void pg_chat_template_free(pg_chat_template *t);

/* How the template wants message content, as vLLM detects it
 * (chat_utils._detect_content_format): true ("openai") when the template
 * loops over a message's content (`for part in message['content']`, also
 * through a variable set from it), so content stays a list of
 * {"type": "text", "text": ...} parts; false ("string") when it prints
 * content as a string, so a server should join text parts first. */
bool pg_chat_template_iterates_content(const pg_chat_template *t);

/* vLLM's message preparation for an OpenAI chat request (chat_utils.py
 * _parse_chat_message_content + _postprocess_messages), before rendering:
 * - openai_content false ("string" templates): a list of content parts
 *   becomes its text parts joined with "\n"; null content becomes "".
 * - openai_content true: string content becomes [{"type":"text","text":s}],
 *   text parts are kept as {"type":"text","text":...}; null becomes [].
 * - assistant tool_calls[].function.arguments given as a JSON string are
 *   parsed into an object (templates apply tojson to them).
 * Other keys (name, tool_call_id, reasoning_content, ...) are kept.
 * *out: a new array (cJSON_Delete it). Errors: INVALID_ARG (not an array of
 * objects, a part without text, arguments that are not valid JSON),
 * UNSUPPORTED (image/audio/video parts: no multimodal input). */
pagoda_status pg_chat_messages_prepare(const struct cJSON *messages, bool openai_content,
                                       struct cJSON **out);

/* Render a conversation to the prompt text.
 * messages: JSON array of message objects ({"role", "content", ...}; content
 *   may be a string or a list of parts, tool_calls etc. pass through as is).
 * tools: JSON array of tool schemas or NULL; kwargs: JSON object or NULL
 *   (chat_template_kwargs, merged at top level; cannot override messages,
 *   tools, documents or add_generation_prompt).
 * sp: special tokens or NULL. strftime_now() uses the local time now.
 * *out_text: malloc'ed NUL-terminated UTF-8 text (caller frees).
 * Errors (one line, "chat template: line N: ..."): PAGODA_ERR_FORMAT for
 * template errors, including raise_exception(msg) whose message is msg;
 * PAGODA_ERR_LIMIT when a limit is hit; PAGODA_ERR_INVALID_ARG when
 * messages is not an array / kwargs not an object. */
pagoda_status pg_chat_template_render(const pg_chat_template *t, const struct cJSON *messages,
                                      const struct cJSON *tools, const struct cJSON *kwargs,
                                      bool add_generation_prompt, const pg_chat_special_tokens *sp,
                                      char **out_text);

/* Same with a fixed clock for strftime_now() (`now` is a broken-down local
 * time; NULL = now), for reproducible renders and tests. */
pagoda_status pg_chat_template_render_at(const pg_chat_template *t, const struct cJSON *messages,
                                         const struct cJSON *tools, const struct cJSON *kwargs,
                                         bool add_generation_prompt,
                                         const pg_chat_special_tokens *sp, const struct tm *now,
                                         char **out_text);

/* continue_final_message (transformers apply_chat_template): cut `text`, a
 * rendering made with add_generation_prompt=false, right after the final
 * message's content so the model continues that message. The content is the
 * last message's string, or the text of its last part that has one; it is
 * found with rindex of its stripped form, keeping its leading/trailing
 * whitespace only as far as the template kept it. Truncates in place.
 * Errors: INVALID_ARG (no final message text, or the template did not
 * render it). */
pagoda_status pg_chat_continue_final_message(char *text, const struct cJSON *messages);

/* Where a model's template and special tokens come from. */
typedef struct pg_chat_config {
    char *source; /* template text */
    char *bos_token, *eos_token, *pad_token, *unk_token; /* NULL if absent */
} pg_chat_config;

/* Find the template for `model_path` (a Hugging Face model directory, a
 * tokenizer_config.json file, or a .gguf file whose tokenizer.chat_template
 * and BOS/EOS token texts are used): `template_file` if not NULL (--chat-template),
 * else the directory's chat_template.jinja, else tokenizer_config.json's
 * "chat_template" (a string, or a list of {"name", "template"} of which
 * "default" is used). Special tokens come from tokenizer_config.json
 * (strings or {"content": ...} objects) when it exists. model_path may be
 * NULL when template_file is given.
 * Errors: PAGODA_ERR_NOT_FOUND "...: no chat template (tokenizer_config.json
 * has no chat_template; pass --chat-template FILE)"; IO; FORMAT (bad JSON). */
pagoda_status pg_chat_config_load(const char *model_path, const char *template_file,
                                  pg_chat_config *out);
void pg_chat_config_free(pg_chat_config *c);
/* View of a config's special tokens (pointers into `c`). */
pg_chat_special_tokens pg_chat_config_tokens(const pg_chat_config *c);

#endif
