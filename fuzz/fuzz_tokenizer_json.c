/* libFuzzer target: a Hugging Face tokenizer.json (model, merges, added
 * tokens, normalizer, pre-tokenizer regexes, decoder, post-processor) and
 * tokenizer_config.json (special tokens, add_bos_token, chat_template).
 * The input is the tokenizer.json text, optionally followed by a NUL byte
 * and the tokenizer_config.json text; both are written to a directory that
 * is loaded with pg_tokenizer_load and pg_chat_config_load, and the
 * tokenizer then encodes and decodes (fz_use_tokenizer). Seeds: the small
 * tokenizers under ../shared/assets (scripts/fuzz.sh).
 * Dictionary: fuzz/tokenizer.dict
 */
#include <stdlib.h>
#include <unistd.h>

#include "fz_util.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

static char *g_dir, *g_config;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    fz_init();
    g_dir = fz_path("");
    g_config = fz_path("tokenizer_config.json");
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const uint8_t *cfg;
    size_t cfg_len, tok_len;
    fz_split(data, size, &cfg, &cfg_len, &tok_len);
    free(fz_write("tokenizer.json", data, tok_len));
    if (cfg)
        free(fz_write("tokenizer_config.json", cfg, cfg_len));
    else
        unlink(g_config);
    pg_tokenizer *tok = NULL;
    if (pg_tokenizer_load(g_dir, &tok) == PAGODA_OK) {
        fz_use_tokenizer(tok, (const char *)cfg, cfg_len);
        pg_tokenizer_free(tok);
    }
    pg_chat_config cc = {0};
    if (pg_chat_config_load(g_dir, NULL, &cc) == PAGODA_OK) pg_chat_config_free(&cc);
    return 0;
}
