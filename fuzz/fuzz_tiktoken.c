/* libFuzzer target: a tiktoken BPE file ("base64(token bytes) rank" lines,
 * openai/whisper's gpt2.tiktoken / multilingual.tiktoken), loaded with
 * pg_tokenizer_load_tiktoken as Whisper's tokenizer; the first input byte
 * picks the number of language tokens (0..100), the rest is the file. The
 * tokenizer then encodes and decodes (fz_use_tokenizer). Seeds: the first
 * lines of the asset tiktoken files (scripts/fuzz.sh).
 * Dictionary: fuzz/tokenizer.dict
 */
#include <stdlib.h>

#include "fz_util.h"
#include "tokenizer/tokenizer.h"

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    fz_init();
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    int langs = data[0] % 102; /* 101: one past the largest valid count */
    char *path = fz_write("vocab.tiktoken", data + 1, size - 1);
    pg_tokenizer *tok = NULL;
    if (pg_tokenizer_load_tiktoken(path, langs, &tok) == PAGODA_OK) {
        fz_use_tokenizer(tok, NULL, 0);
        pg_tokenizer_free(tok);
    }
    free(path);
    return 0;
}
