/* Whisper's languages and special-token layout, shared by the tiktoken
 * loader (the special tokens it appends) and the speech module (language
 * codes, names, detection).
 *
 * Reference: openai/whisper whisper/tokenizer.py (c0d2f62): LANGUAGES (code ->
 * name, in token order), TO_LANGUAGE_CODE (names and aliases -> code),
 * get_encoding (special tokens after the ranks), and whisper/model.py
 * (num_languages = n_vocab - 51765 - is_multilingual, is_multilingual =
 * n_vocab >= 51865). */
#ifndef PAGODA_TOKENIZER_WHISPER_LANG_H
#define PAGODA_TOKENIZER_WHISPER_LANG_H

#include <stdint.h>

typedef struct pg_whisper_language {
    const char *code; /* "en", "haw", "yue" */
    const char *name; /* "english" (lower case, as tokenizer.py) */
} pg_whisper_language;

/* tokenizer.py's LANGUAGES in order: entry i is the language token
 * <|startoftranscript|> + 1 + i. 100 entries (the 100th, "yue", exists only
 * in large-v3's vocabulary). */
#define PG_WHISPER_MAX_LANGUAGES 100
extern const pg_whisper_language PG_WHISPER_LANGUAGES[PG_WHISPER_MAX_LANGUAGES];

/* Index into PG_WHISPER_LANGUAGES of a language given as a code ("en") or
 * a name or alias of TO_LANGUAGE_CODE ("English", "castilian"), case
 * insensitive; -1 if unknown. */
int pg_whisper_language_index(const char *code_or_name);

/* Languages of a Whisper model with n_vocab tokens (model.py num_languages):
 * 51865 (multilingual) -> 99, 51866 (large-v3) -> 100, 51864 (*.en) -> 99.
 * Returns 99 for any other size (openai's default). */
int pg_whisper_num_languages(int32_t n_vocab);

/* Number of special tokens get_encoding appends after the ranks:
 * <|endoftext|>, <|startoftranscript|>, num_languages language tokens,
 * <|translate|>, <|transcribe|>, <|startoflm|>, <|startofprev|>,
 * <|nospeech|>, <|notimestamps|>, <|0.00|> ... <|30.00|> (1501). */
#define PG_WHISPER_N_TIMESTAMPS 1501
static inline int pg_whisper_n_specials(int num_languages) {
    return 2 + num_languages + 6 + PG_WHISPER_N_TIMESTAMPS;
}

/* Text of the i-th special token of get_encoding(num_languages) into buf
 * (NUL-terminated, at most 31 bytes: "<|startoftranscript|>", "<|30.00|>"); returns its
 * length, or -1 for i outside [0, pg_whisper_n_specials). Timestamps are
 * f"<|{i * 0.02:.2f}|>". */
int pg_whisper_special_text(int num_languages, int i, char buf[32]);

#endif
