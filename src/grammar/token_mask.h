/* Token masks for grammar-constrained decoding: per step, the vocabulary
 * tokens whose bytes keep the output a valid prefix of the grammar.
 *
 * Method (xgrammar's adaptive token mask cache, Dong et al. 2024, sec. 3;
 * llguidance's token trie walk):
 *  - pg_vocab_trie: every token's raw bytes, sorted, with the longest common
 *    prefix of neighbours and, per (token, depth), the end of the run of
 *    tokens sharing that prefix: an implicit byte trie in DFS order. A walk
 *    that dies at depth d skips the whole subtree in O(1).
 *  - per automaton node, computed once per grammar on first use and shared
 *    by all requests (thread-safe): the tokens accepted from that node
 *    whatever lies below it on the stack (context-independent accepted), and
 *    the runs of tokens that only pass by returning from the node's rule
 *    into the unknown context (context-dependent: "uncertain"); all others
 *    are rejected from that node.
 *  - per step: the union over the state's stacks of their nodes' accepted
 *    sets, plus the uncertain runs re-walked against the real stack.
 * Stop tokens (EOS, stop_token_ids) are allowed exactly when the grammar is
 * complete; special tokens are never allowed otherwise. */
#ifndef PAGODA_GRAMMAR_TOKEN_MASK_H
#define PAGODA_GRAMMAR_TOKEN_MASK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/status.h"
#include "grammar/gram.h"

typedef struct pg_vocab_trie pg_vocab_trie;

/* Tokens 0..n-1 with their raw bytes (bytes[i] NULL or lens[i] 0: never
 * allowed by a grammar: special, control, padding tokens). Copies the
 * bytes. Errors: NOMEM. */
pagoda_status pg_vocab_trie_create(const char *const *bytes, const size_t *lens, int32_t n,
                                   pg_vocab_trie **out);
void pg_vocab_trie_free(pg_vocab_trie *v);
int32_t pg_vocab_trie_size(const pg_vocab_trie *v); /* n */

/* A grammar bound to a vocabulary, with the per-node token caches.
 * Reference counted; shared by requests and threads. */
typedef struct pg_tgram pg_tgram;

/* Takes ownership of g (freed with the last release, or on error). The
 * trie must outlive the result. */
pagoda_status pg_tgram_create(pg_gram *g, const pg_vocab_trie *v, pg_tgram **out);
void pg_tgram_retain(pg_tgram *t);
void pg_tgram_release(pg_tgram *t);
const pg_gram *pg_tgram_gram(const pg_tgram *t);
const pg_vocab_trie *pg_tgram_trie(const pg_tgram *t);

/* A per-request matcher. stop_ids[0..n_stop): tokens allowed (only) when
 * the grammar is complete (EOS, stop_token_ids), copied. */
typedef struct pg_tmatch pg_tmatch;
pagoda_status pg_tmatch_create(pg_tgram *t, const int32_t *stop_ids, int32_t n_stop,
                               pg_tmatch **out);
void pg_tmatch_free(pg_tmatch *m);

/* Advance by one token: false (state unchanged) when the token is not
 * allowed. A stop token is allowed when complete and leaves the state.
 * Also false when matching failed (pg_tmatch_status: NOMEM, or LIMIT when
 * the token needed more than G_WORK_BUDGET steps; pg_last_error set). */
bool pg_tmatch_accept(pg_tmatch *m, int32_t token);
/* The error of the last pg_tmatch_accept / fill_mask / apply: PAGODA_OK,
 * NOMEM, or LIMIT (the per-operation work budget of the matcher ran out:
 * an ambiguous grammar, see gram_internal.h). */
pagoda_status pg_tmatch_status(const pg_tmatch *m);
/* The output so far is a complete sentence. */
bool pg_tmatch_complete(const pg_tmatch *m);

/* The allowed tokens of this step as bits[ceil(n/64)] (bit i of word i/64
 * = token i allowed), n the trie's vocabulary size. Returns the number of
 * allowed tokens. Errors are reported as 0 allowed plus pg_tmatch_status
 * and pg_last_error (NOMEM, or LIMIT: the work budget of one mask). */
int32_t pg_tmatch_fill_mask(pg_tmatch *m, uint64_t *bits);
/* Fill the mask and set logits[i] = -INFINITY for every token i < vocab not
 * allowed (ids >= the trie's size are always banned). Returns the number
 * allowed. */
int32_t pg_tmatch_apply(pg_tmatch *m, float *logits, int32_t vocab);

#endif
