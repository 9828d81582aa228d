/* Draft-model proposer for speculative decoding (vLLM's "draft_model"
 * method, vllm/v1/spec_decode/draft_model.py; Leviathan et al. 2023,
 * "Fast Inference from Transformers via Speculative Decoding"): a smaller
 * model of the target's vocabulary guesses the next K tokens greedily, the
 * target verifies them in its normal step (scheduler.h "Speculative
 * decoding").
 *
 * The draft has its own KV cache manager (block pool, prefix caching off)
 * and its own runner (paged K/V memory and workspace). Per target request
 * it keeps a shadow request: the tokens whose draft KV is computed. Each
 * step (pg_draft_prepare, the scheduler's prepare hook) it
 *   1. rolls the shadow back to the longest prefix the request still has
 *      (rejected drafts: pg_kvm_truncate frees blocks past it),
 *   2. catches up on the request's tokens it has not seen (the prompt at
 *      first, then the accepted drafts and the correction / bonus token) in
 *      batched forwards of at most max_num_batched_tokens tokens, the last
 *      one giving the first draft (argmax of its logits),
 *   3. runs one batched forward per further draft position over every
 *      request still drafting (query: its previous draft).
 * Proposals are greedy, so for the rejection sampler the draft
 * distribution q is one-hot at the proposed token, which makes the
 * acceptance rule min(1, p/q) = p(draft) exact (sampler.h). A draft
 * sampled with its own q is a later step.
 *
 * Models with recurrent-state or cross-attention layers cannot be drafts
 * (their state cannot be rolled back). Engine thread only. */
#ifndef PAGODA_ENGINE_DRAFT_H
#define PAGODA_ENGINE_DRAFT_H

#include <stddef.h>
#include <stdint.h>

#include "base/dtype.h"
#include "base/status.h"
#include "engine/request.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

typedef struct pg_draft pg_draft;

/* Load the draft model at `path` (HF directory or GGUF file) with the
 * target's model options `mo` (compute dtype, quantization; max_context is
 * the target's max_model_len, clamped to the draft's positions) and check
 * its vocabulary against the target's: the same vocab_size (embedding rows)
 * and a tokenizer with the same tokens (count and every token's text).
 * The draft is loaded whole whatever mo's tensor-parallel fields say: under
 * tensor parallelism rank 0 runs it alone, between the target's steps.
 * kv_dtype: PG_F32 / PG_BF16 for its KV cache; block_size: tokens per block.
 * Errors: those of the model source / loader / tokenizer, PAGODA_ERR_INVALID_ARG
 * (vocabulary mismatch, naming the first differing id), PAGODA_ERR_UNSUPPORTED
 * (recurrent-state or cross-attention layers). */
pagoda_status pg_draft_load(const char *path, const pg_model_options *mo,
                            const pg_tokenizer *target_tok, int32_t target_vocab, pg_dtype kv_dtype,
                            int32_t block_size, pg_draft **out);

/* K and V bytes of one token over all the draft's layers (its KV memory is
 * num_blocks * block_size times this). */
uint64_t pg_draft_kv_bytes_per_token(const pg_draft *d);

/* Allocate the draft's KV cache of num_blocks blocks (including the null
 * block), its runner and its per-request state: max_num_seqs requests of up
 * to max_model_len tokens, forwards of at most max_num_batched_tokens
 * tokens, k = num_speculative_tokens (1..PG_MAX_SPEC_TOKENS).
 * Errors: PAGODA_ERR_INVALID_ARG (sizes), PAGODA_ERR_NOMEM. */
pagoda_status pg_draft_start(pg_draft *d, int32_t num_blocks, int32_t max_num_seqs,
                             int32_t max_model_len, int32_t max_num_batched_tokens, int32_t k);
void pg_draft_free(pg_draft *d);

/* Bytes of the draft's KV memory and workspace (after pg_draft_start). */
size_t pg_draft_kv_bytes(const pg_draft *d);
size_t pg_draft_workspace_bytes(const pg_draft *d);
int32_t pg_draft_num_blocks(const pg_draft *d); /* usable blocks of its pool */
const char *pg_draft_arch_name(const pg_draft *d);

/* The scheduler's prepare hook (pg_spec_prepare_fn; ctx = the pg_draft):
 * compute up to max_drafts[i] greedy drafts for each of reqs[0..n) (running
 * decodes), batched as described above. A request the draft's pool has no
 * room for gets none this step (its draft state is dropped). Errors: those
 * of the draft's forward. */
pagoda_status pg_draft_prepare(void *ctx, pg_request *const *reqs, const int32_t *max_drafts,
                               int32_t n);
/* The scheduler's propose hook (pg_spec_propose_fn): the drafts prepared
 * for r at its current length, at most max_drafts, into out; 0 if none. */
int32_t pg_draft_propose(void *ctx, const pg_request *r, int32_t max_drafts, int32_t *out);
/* Drop the draft state of finished / aborted requests ids[0..n). */
void pg_draft_release(pg_draft *d, const uint64_t *ids, int32_t n);

/* For tests: the number of tokens whose draft KV is held for request id
 * (-1: none), and the draft's pool invariants (pg_kvm_check). */
int32_t pg_draft_num_computed(const pg_draft *d, uint64_t id);
pagoda_status pg_draft_check(const pg_draft *d);

#endif
