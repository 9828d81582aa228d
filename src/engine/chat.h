/* pagoda_apply_chat_template (include/pagoda.h) over the chat-template
 * engine of src/tokenizer/chat_template.h. */
#ifndef PAGODA_ENGINE_CHAT_H
#define PAGODA_ENGINE_CHAT_H

#include "pagoda.h"

/* The MODEL path the engine was created from (HF directory, .gguf file or
 * resolved snapshot directory), where the chat template and the special
 * tokens are looked up. The engine defines it; chat.c carries a weak
 * fallback returning NULL (then only a template override can be used). */
const char *pg_engine_model_path(const pagoda_engine *e);

/* A model's chat template compiled once, with its special tokens: found and
 * compiled on the first chat request, then shared (read-only) by every
 * request of the engine, so a chat request renders without reading
 * tokenizer_config.json or the GGUF again (vLLM resolves the template once
 * per tokenizer too: chat_utils.resolve_hf_chat_template is cached). */
typedef struct pg_chat_cache pg_chat_cache;
void pg_chat_cache_free(pg_chat_cache *c);

/* The engine's cache: installs `install` when it has none, and returns the
 * one installed (`install` if it won; the caller frees a loser). NULL with
 * install NULL = nothing cached yet. Thread-safe (the engine's mutex). */
pg_chat_cache *pg_engine_chat_cache(const pagoda_engine *e, pg_chat_cache *install);

#endif
