/* Helpers shared by the libFuzzer targets in fuzz/ (one target per file,
 * each defining LLVMFuzzerTestOneInput; built by `make fuzz`, see
 * docs/FUZZING.md).
 *
 * Parsers that take a path (GGUF, safetensors, tokenizer files, model
 * directories) get the input written to a file in a private temporary
 * directory made once per process (removed at exit). Inputs that hold two
 * documents (e.g. tokenizer.json and tokenizer_config.json) are split at
 * their first NUL byte, which no JSON or template text contains. */
#ifndef PAGODA_FZ_UTIL_H
#define PAGODA_FZ_UTIL_H

#include <stddef.h>
#include <stdint.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv);

/* Once per process: discard pagoda's log lines (they are still formatted,
 * so format arguments are exercised) and make the temporary directory. */
void fz_init(void);

/* The path of `name` inside the private temporary directory, malloc'ed
 * (caller frees). Aborts when out of memory. */
char *fz_path(const char *name);

/* Write `n` bytes to fz_path(name); returns that path (caller frees).
 * Aborts on an I/O error (the fuzzing machine's fault, not the input's). */
char *fz_write(const char *name, const void *data, size_t n);

/* A symbolic link fz_path(name) -> target (replacing any old one); returns
 * the link's path (caller frees). Aborts on failure. */
char *fz_link(const char *name, const char *target);

/* The path of an asset (PAGODA_ASSETS, else the build's default, the
 * repository's ../shared/assets); caller frees. */
char *fz_asset(const char *rel);

/* A malloc'ed NUL-terminated copy of n bytes (aborts when out of memory). */
char *fz_strndup(const void *data, size_t n);

/* Split at the first NUL byte: the part before (first, *first_len) and the
 * part after it (*rest, *rest_len; NULL and 0 when there is no NUL). */
void fz_split(const uint8_t *data, size_t size, const uint8_t **rest, size_t *rest_len,
              size_t *first_len);

/* Exercise a loaded tokenizer: encode a fixed multilingual text with and
 * without special tokens plus `text` (may be NULL), decode the ids back
 * (with and without skipping specials), and look up the first ids' bytes,
 * texts and specialness (ids -1 and the vocabulary size included). */
struct pg_tokenizer;
void fz_use_tokenizer(const struct pg_tokenizer *tok, const char *text, size_t len);

#endif
