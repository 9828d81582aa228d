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

#endif
