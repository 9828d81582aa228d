/* Whisper's special tokens, found in whatever tokenizer the engine loaded
 * (a tiktoken file with the specials appended by
 * pg_tokenizer_load_tiktoken, or a Hugging Face Whisper tokenizer.json
 * whose added tokens carry the same texts), and the token lists the
 * decoding rules need.
 *
 * Reference: openai/whisper whisper/tokenizer.py (c0d2f62): Tokenizer
 * (sot, eot, translate, transcribe, sot_lm, sot_prev, no_speech,
 * no_timestamps, timestamp_begin, all_language_tokens, sot_sequence,
 * non_speech_tokens) and whisper/decoding.py DecodingTask._get_suppress_tokens. */
#ifndef PAGODA_SPEECH_WHISPER_VOCAB_H
#define PAGODA_SPEECH_WHISPER_VOCAB_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/status.h"
#include "pagoda.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/whisper_lang.h"

/* The text side of a tokenizer, seen through the engine (pagoda.h) or
 * directly (a pg_tokenizer: tests). */
typedef struct pg_speech_tok {
    void *ctx;
    int32_t n_vocab; /* the model's vocabulary (logits rows) */
    /* stored text of id (e.g. "<|en|>", "\u0120the"), or NULL */
    const char *(*piece)(void *ctx, int32_t id, size_t *len);
    /* encode without special tokens (special-token text is plain text);
     * *ids malloc'ed */
    pagoda_status (*encode)(void *ctx, const char *text, size_t len, int32_t **ids, size_t *n);
    /* decode to exact bytes, special tokens kept; *text malloc'ed, NUL-terminated */
    pagoda_status (*decode)(void *ctx, const int32_t *ids, size_t n, char **text, size_t *len);
} pg_speech_tok;

/* Adapters: the engine's tokenizer (vocabulary = pagoda_engine_vocab_size)
 * and a pg_tokenizer (vocabulary = model_vocab, or its own size if <= 0). */
pg_speech_tok pg_speech_tok_engine(const pagoda_engine *e);
pg_speech_tok pg_speech_tok_tokenizer(const pg_tokenizer *tok, int32_t model_vocab);

typedef struct pg_whisper_tokens {
    int32_t n_vocab;
    bool multilingual; /* n_vocab >= 51865 (model.py is_multilingual) */
    int32_t eot, sot, translate, transcribe, sot_lm, sot_prev, no_speech, no_timestamps;
    int32_t timestamp_begin; /* <|0.00|>, or no_timestamps + 1 when the vocab lacks it */
    /* all_language_tokens: lang[i] is <|PG_WHISPER_LANGUAGES[i].code|>, i <
     * n_languages (model.py num_languages); -1 where the tokenizer lacks it */
    int32_t n_languages;
    int32_t lang[PG_WHISPER_MAX_LANGUAGES];
    /* encode(" ") + [eot]: what SuppressBlank bans at the first sampled step */
    int32_t blank[8];
    int32_t n_blank;
    /* tokenizer.non_speech_tokens, sorted */
    int32_t *non_speech;
    int32_t n_non_speech;
} pg_whisper_tokens;

/* Find the special tokens by their texts ("<|endoftext|>", "<|startoftranscript|>",
 * "<|en|>", ..., "<|notimestamps|>", "<|0.00|>") and compute blank and
 * non_speech_tokens with the tokenizer (tokenizer.py: each symbol of
 * '"#()*+/:;<=>@[\]^_`{|}~「」『』', "<< >> <<< >>> -- --- -( -[ (' (\" (( )) ((( ))) [[ ]]
 * {{ }} ♪♪ ♪♪♪", alone and after a space, when it is one token, and the first
 * token of each of ♩♪♫♬♭♮♯; plus the first tokens of " -" and " '").
 * Errors: PAGODA_ERR_INVALID_ARG naming the missing token when the
 * tokenizer is not Whisper's (no <|startoftranscript|>, <|endoftext|>,
 * <|transcribe|>, <|translate|>, <|notimestamps|>, ...); tokenizer errors; NOMEM. */
pagoda_status pg_whisper_tokens_init(pg_whisper_tokens *t, const pg_speech_tok *tok);
void pg_whisper_tokens_free(pg_whisper_tokens *t);

/* Language token of PG_WHISPER_LANGUAGES[index], or -1 (not in this model). */
int32_t pg_whisper_language_token(const pg_whisper_tokens *t, int index);

/* decoding.py _get_suppress_tokens: `spec` is openai's suppress_tokens string
 * ("-1" = non_speech_tokens, "1,2,-1" = those plus non_speech_tokens,
 * "" = none); then transcribe, translate, sot, sot_prev, sot_lm, no_speech
 * are added; sorted, unique. *out malloc'ed (n >= 6). With spec NULL or ""
 * openai applies no SuppressTokens filter at all: *out NULL, *n 0.
 * Errors: PAGODA_ERR_INVALID_ARG (not integers, ids out of the vocabulary), NOMEM. */
pagoda_status pg_whisper_suppress_tokens(const pg_whisper_tokens *t, const char *spec,
                                         int32_t **out, int32_t *n);

/* tokenizer.sot_sequence (+ <|notimestamps|> when without_timestamps), as
 * DecodingTask builds it: multilingual [sot, language, task], English-only
 * [sot]. Writes up to 4 ids; returns the count. */
int pg_whisper_sot_sequence(const pg_whisper_tokens *t, int lang_index, bool translate,
                            bool without_timestamps, int32_t out[4]);

#endif
