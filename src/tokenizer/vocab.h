/* Build a tokenizer from GGUF-style vocab metadata (tokenizer.ggml.*),
 * independent of how the metadata was read. Behaviour follows llama.cpp
 * llama-vocab.cpp: model "llama" = SentencePiece BPE merged by piece score
 * (llm_tokenizer_spm) with <0xXX> byte fallback and a '▁' space prefix;
 * model "gpt2" = byte-level BPE over tokenizer.ggml.merges with the
 * pre-tokenizer regexes chosen by tokenizer.ggml.pre. */
#ifndef PAGODA_TOKENIZER_VOCAB_H
#define PAGODA_TOKENIZER_VOCAB_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tokenizer/tokenizer.h"

/* llama.cpp token types (tokenizer.ggml.token_type) */
enum {
    PG_TOKTYPE_NORMAL = 1,
    PG_TOKTYPE_UNKNOWN = 2,
    PG_TOKTYPE_CONTROL = 3,
    PG_TOKTYPE_USER_DEFINED = 4,
    PG_TOKTYPE_UNUSED = 5,
    PG_TOKTYPE_BYTE = 6,
};

typedef struct pg_vocab_spec {
    const char *what;       /* file name, for messages */
    const char *model;      /* "llama" | "gpt2" */
    const char *pre;        /* tokenizer.ggml.pre or NULL */
    int32_t n_tokens;
    const char *const *tokens; /* NUL-terminated texts */
    const size_t *token_lens;  /* optional: lengths (else strlen) */
    const float *scores;       /* n_tokens or NULL */
    const int32_t *types;      /* n_tokens or NULL (all normal) */
    int32_t n_merges;
    const char *const *merges; /* "a b" strings */
    const size_t *merge_lens;  /* optional */
    int32_t bos_id, eos_id, unk_id, pad_id; /* -1 if absent */
    int add_bos, add_eos;     /* -1 absent, 0/1 */
    int add_space_prefix;     /* -1 absent, 0/1 */
    const char *chat_template;
} pg_vocab_spec;

/* Errors: PAGODA_ERR_FORMAT (inconsistent arrays, merge of unknown token),
 * PAGODA_ERR_UNSUPPORTED (unknown model or pre-tokenizer type), NOMEM. */
pagoda_status pg_tokenizer_from_vocab(const pg_vocab_spec *spec, pg_tokenizer **out);

#endif
