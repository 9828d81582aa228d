/* The engine's structured-output registry: the vocabulary trie (built on
 * first use from the tokenizer's token bytes) and a cache of compiled
 * constraints keyed by (kind, spec), so requests with the same schema share
 * the per-node token caches (src/grammar/token_mask.h). Thread-safe. */
#ifndef PAGODA_ENGINE_GRAMMARS_H
#define PAGODA_ENGINE_GRAMMARS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "grammar/token_mask.h"
#include "pagoda.h"
#include "tokenizer/tokenizer.h"

typedef struct pg_grammars pg_grammars;

/* tok must outlive the registry; model_vocab >= the tokenizer's size (ids
 * beyond it are padding and always masked). NULL on NOMEM. */
pg_grammars *pg_grammars_create(const pg_tokenizer *tok, int32_t model_vocab);
void pg_grammars_free(pg_grammars *r);

/* A new reference to the compiled constraint (pg_tgram_release when done).
 * Errors as pagoda_grammar_compile. */
pagoda_status pg_grammars_get(pg_grammars *r, pagoda_grammar_kind kind, const char *spec,
                              size_t len, pg_tgram **out);

/* True when t was compiled by this registry (its vocabulary trie). */
bool pg_grammars_owns(pg_grammars *r, const pg_tgram *t);

/* Compile a spec to a grammar without the vocabulary (tests, benchmarks). */
pagoda_status pg_grammar_build(pagoda_grammar_kind kind, const char *spec, size_t len,
                               pg_gram **out);

/* The vocabulary trie of a tokenizer: special tokens and empty tokens are
 * excluded (never allowed by a grammar). */
pagoda_status pg_grammars_vocab_trie(const pg_tokenizer *tok, int32_t model_vocab,
                                     pg_vocab_trie **out);

#endif
