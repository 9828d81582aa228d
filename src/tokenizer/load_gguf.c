/* Tokenizer from a GGUF file's tokenizer.ggml.* metadata. */
#include "tokenizer/tok_internal.h"
#include "tokenizer/vocab.h"

pagoda_status pg_tok_load_gguf(const char *path, pg_tokenizer **out) {
    *out = NULL;
    return pg_error(PAGODA_ERR_UNSUPPORTED, "%s: GGUF vocab loading not available yet", path);
}
