/* Tokenizers: SentencePiece-style BPE with byte fallback (Llama 2,
 * TinyStories) and byte-level BPE (GPT-2, Llama 3, Qwen, GPT-OSS o200k),
 * built from a Hugging Face tokenizer.json (+ tokenizer_config.json) or from
 * a GGUF file's tokenizer.ggml.* metadata. Reference behaviour: Hugging Face
 * `tokenizers` (encode with add_special_tokens True/False) and llama.cpp's
 * llama-vocab.cpp. Immutable after load: safe to share between threads. */
#ifndef PAGODA_TOKENIZER_TOKENIZER_H
#define PAGODA_TOKENIZER_TOKENIZER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/status.h"

typedef struct pg_tokenizer pg_tokenizer;

/* Load from `path`: a directory holding tokenizer.json (+ optional
 * tokenizer_config.json), a tokenizer.json file, a .gguf file (its vocab
 * metadata), or a tiktoken BPE file (`*.tiktoken`, loaded as Whisper's
 * tokenizer with 99 languages: pg_tokenizer_load_tiktoken).
 * Errors: PAGODA_ERR_IO / NOT_FOUND / FORMAT / UNSUPPORTED (one line). */
pagoda_status pg_tokenizer_load(const char *path, pg_tokenizer **out);

/* openai/whisper's tokenizer (whisper/tokenizer.py get_encoding, c0d2f62)
 * from a tiktoken file (lines "base64(token bytes) rank", ranks 0..n-1:
 * multilingual.tiktoken n = 50257, gpt2.tiktoken n = 50256): byte-level BPE
 * merged by rank as tiktoken does, the GPT-2 pre-tokenizer regex, and the
 * special tokens after the ranks: <|endoftext|> (= n, also BOS/EOS),
 * <|startoftranscript|>, num_languages language tokens in LANGUAGES order
 * (tokenizer/whisper_lang.h; 99, or 100 with <|yue|> for large-v3),
 * <|translate|>, <|transcribe|>, <|startoflm|>, <|startofprev|>,
 * <|nospeech|>, <|notimestamps|>, <|0.00|> ... <|30.00|> (step 0.02).
 * Vocab size n + 1609 + num_languages (multilingual: 51865). Token texts are
 * the byte-level form of HF's Whisper tokenizer.json ("\u0120the").
 * Errors: PAGODA_ERR_IO / NOT_FOUND (file), FORMAT (malformed line, bad
 * base64, ranks not dense, a byte without its own rank), INVALID_ARG
 * (num_languages outside [0, 100]), NOMEM. */
pagoda_status pg_tokenizer_load_tiktoken(const char *path, int num_languages, pg_tokenizer **out);

/* pg_tokenizer_load, except that a `*.tiktoken` file gets the number of
 * languages of a Whisper model with model_vocab tokens (51866 -> 100, else
 * 99; whisper/model.py num_languages); model_vocab <= 0: 99. */
pagoda_status pg_tokenizer_load_for_vocab(const char *path, int32_t model_vocab, pg_tokenizer **out);

/* True if path names a tiktoken file (ends in ".tiktoken"). */
bool pg_tokenizer_is_tiktoken_path(const char *path);
void pg_tokenizer_free(pg_tokenizer *tok);

/* Encode `len` bytes of UTF-8 text.
 * add_special=false: no BOS/EOS added, and special-token text in the input
 *   is plain text (the safe default for user content).
 * add_special=true: behave like HF `encode(text)` (add_special_tokens=True):
 *   add BOS/EOS as the tokenizer's post-processor / add_bos_token says, and
 *   match added special tokens in the text.
 * Writes up to `cap` ids to `ids`; *n_out gets the full count (call again
 * with a larger buffer if *n_out > cap). Errors: PAGODA_ERR_INVALID_ARG. */
pagoda_status pg_tokenizer_encode(const pg_tokenizer *tok, const char *text, size_t len,
                                  bool add_special, int32_t *ids, size_t cap, size_t *n_out);

/* What an encode does besides splitting the text into tokens; the two are
 * separate in HF too (add_special_tokens vs split_special_tokens):
 * PG_ENCODE_ADD_SPECIAL: add BOS/EOS as the tokenizer's post-processor /
 *   add_bos_token says (HF add_special_tokens=True).
 * PG_ENCODE_PARSE_SPECIAL: special-token text in the input ("<|im_start|>")
 *   becomes that token (HF split_special_tokens=False); without it the text
 *   is encoded as plain text. A rendered chat prompt wants PARSE_SPECIAL
 *   alone (vLLM: add_special_tokens=False for chat). */
enum { PG_ENCODE_ADD_SPECIAL = 1u, PG_ENCODE_PARSE_SPECIAL = 2u };

/* pg_tokenizer_encode with the PG_ENCODE_* `flags` (add_special = both). */
pagoda_status pg_tokenizer_encode_flags(const pg_tokenizer *tok, const char *text, size_t len,
                                        unsigned flags, int32_t *ids, size_t cap, size_t *n_out);

/* Decode ids to exact bytes (byte-fallback and byte-level tokens become the
 * original bytes; SentencePiece's leading-space rule as HF applies it).
 * skip_special drops special/control tokens. Writes up to cap-1 bytes plus
 * NUL; *len_out gets the full length. */
pagoda_status pg_tokenizer_decode(const pg_tokenizer *tok, const int32_t *ids, size_t n,
                                  bool skip_special, char *out, size_t cap, size_t *len_out);

/* The working buffers of a decode, kept by a caller that decodes often (the
 * incremental detokenizer, twice a token) so that its decodes allocate
 * nothing once the buffers have grown to its texts. Zero-initialize; free
 * with pg_decode_scratch_free. */
typedef struct pg_decode_scratch {
    void *bytes[2], *pieces[2];
    size_t cap_bytes[2], cap_pieces[2];
} pg_decode_scratch;

/* pg_tokenizer_decode with its buffers from (and grown into) `scratch`. */
pagoda_status pg_tokenizer_decode_with(const pg_tokenizer *tok, const int32_t *ids, size_t n,
                                       bool skip_special, char *out, size_t cap, size_t *len_out,
                                       pg_decode_scratch *scratch);
void pg_decode_scratch_free(pg_decode_scratch *scratch);

/* The raw bytes one token stands for (after byte-level / byte-fallback
 * mapping, '▁' -> ' '), for incremental detokenization. *len gets the size;
 * returns bytes in a per-tokenizer table (NULL for an invalid id). */
const char *pg_tokenizer_token_bytes(const pg_tokenizer *tok, int32_t id, size_t *len);

/* The vocab entry of `id` as stored (tokenizer.json / GGUF text, e.g.
 * "\u2581the" or "\u0120the"), NUL-terminated; *len gets its size. NULL for an
 * invalid id. */
const char *pg_tokenizer_token_text(const pg_tokenizer *tok, int32_t id, size_t *len);

int32_t pg_tokenizer_vocab_size(const pg_tokenizer *tok);
/* True for an id a model's vocabulary has beyond the tokenizer's (padded to
 * a multiple of 64, ...): [vocab_size, model_vocab). Such ids, which a model
 * can generate, decode to nothing (as Hugging Face's decode skips unknown
 * ids); callers drop them before pg_tokenizer_decode. */
static inline bool pg_tokenizer_is_padding(const pg_tokenizer *tok, int32_t id,
                                           int32_t model_vocab) {
    return id >= pg_tokenizer_vocab_size(tok) && id < model_vocab;
}
int32_t pg_tokenizer_bos(const pg_tokenizer *tok); /* -1 if none */
int32_t pg_tokenizer_eos(const pg_tokenizer *tok); /* -1 if none */
bool pg_tokenizer_is_special(const pg_tokenizer *tok, int32_t id);
/* Id of the vocab entry whose stored text (as in tokenizer.json / GGUF,
 * e.g. "<|im_end|>" or the byte-level form "Ġthe") is text[0..len), or -1. */
int32_t pg_tokenizer_token_to_id(const pg_tokenizer *tok, const char *text, size_t len);
/* Chat template from tokenizer_config.json / GGUF, or NULL. */
const char *pg_tokenizer_chat_template(const pg_tokenizer *tok);

#endif
