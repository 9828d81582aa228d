/* The n-gram proposer of speculative decoding ("prompt lookup decoding",
 * Saxena 2023; vLLM's `ngram` method, vllm/v1/spec_decode/ngram_proposer.py):
 * draft tokens are copied from the request's own tokens (prompt and outputs)
 * after an earlier occurrence of their current suffix.
 *
 * Pure logic over token ids; no allocation. */
#ifndef PAGODA_ENGINE_NGRAM_H
#define PAGODA_ENGINE_NGRAM_H

#include <stdint.h>

/* Propose up to k draft tokens to follow tokens[0..n).
 * The longest n-gram length L in [min_n, max_n] whose suffix
 * tokens[n-L..n) also occurs earlier (starting at some j < n - L) is taken,
 * at its EARLIEST occurrence j (vLLM's choice); the drafts are the tokens
 * after that occurrence, tokens[j+L ..], at most k of them and at most up to
 * the end of tokens (an occurrence may overlap the suffix, so a repeating
 * cycle proposes its continuation). Writes them to out[0..k) and returns how
 * many (0: no match, n < min_n, k <= 0, or bad lengths: min_n < 1 or
 * max_n < min_n). Cost O(n * max_n) compares at most. */
int32_t pg_ngram_propose(const int32_t *tokens, int32_t n, int32_t min_n, int32_t max_n, int32_t k,
                         int32_t *out);

#endif
