/* MTP proposer for speculative decoding (vLLM's "mtp" method, also spelled
 * "qwen3_next_mtp" / "qwen3_5_mtp"; vllm/v1/spec_decode/eagle.py with
 * qwen3_5_mtp.py): the checkpoint's multi-token-prediction head
 * (model/model.h pg_model_mtp_create) guesses the next K tokens from the
 * target's own hidden states; the target verifies them in its normal step
 * (scheduler.h "Speculative decoding").
 *
 * The head's MTP position t reads the target's final-normed hidden state
 * h_t (the target's runner writes every token's into pg_mtp_hidden) and
 * token t + 1, and writes its own paged KV at t (its own KV cache manager,
 * prefix caching off, and runner). Per target request it keeps a shadow
 * request whose KV covers positions [base, exact) computed from the
 * target's hidden states (base: the first position this request computed
 * in the target, > 0 after a prefix-cache hit: the head then attends to
 * the positions from there on only; its KV index is position - base, its
 * RoPE position the absolute one).
 *   - after every target step (pg_mtp_observe): for each scheduled request,
 *     its positions computed and kept this step (prefill chunk rows, or
 *     the verified last token and accepted drafts) run through the head
 *     in one batched forward, after its KV past `exact` (previous drafts'
 *     positions) is rolled back; when the request's last token is the next
 *     one, the last row's argmax is draft 1 and its hidden state is kept;
 *   - before the next step (pg_mtp_prepare, the scheduler's prepare hook):
 *     drafts 2..K chain the head on its own hidden state (vLLM's rule): one
 *     batched forward per further draft at positions exact, exact + 1, ...
 * A request whose state was dropped (pool full, evicted, preempted and
 * recomputed) starts again at its next computed position. Proposals are
 * greedy (q one-hot, as pg_draft). Engine thread only. */
#ifndef PAGODA_ENGINE_MTP_H
#define PAGODA_ENGINE_MTP_H

#include <stdint.h>

#include "base/dtype.h"
#include "base/status.h"
#include "engine/request.h"
#include "engine/scheduler.h"
#include "model/model.h"

typedef struct pg_mtp pg_mtp;

/* Create the MTP head of `target` (loaded from src with options mo; both
 * must outlive it) with a KV cache of kv_dtype in blocks of block_size.
 * Errors: those of pg_model_mtp_create (PAGODA_ERR_UNSUPPORTED for a model
 * without MTP weights), of pg_runner_plan_kv. */
pagoda_status pg_mtp_create(const pg_model *target, const pg_model_source *src,
                            const pg_model_options *mo, pg_dtype kv_dtype, int32_t block_size,
                            pg_mtp **out);
/* K and V bytes of one position of the head's layer. */
uint64_t pg_mtp_kv_bytes_per_token(const pg_mtp *d);
/* Allocate its KV cache of num_blocks blocks (null block included), runner
 * and per-request state for max_num_seqs requests of max_model_len tokens,
 * forwards of max_num_batched_tokens tokens (the target's step), k drafts
 * (1..PG_MAX_SPEC_TOKENS). Errors: PAGODA_ERR_INVALID_ARG, PAGODA_ERR_NOMEM. */
pagoda_status pg_mtp_start(pg_mtp *d, int32_t num_blocks, int32_t max_num_seqs,
                           int32_t max_model_len, int32_t max_num_batched_tokens, int32_t k);
void pg_mtp_free(pg_mtp *d);

/* [max_num_batched_tokens][hidden_size] f32 for the target's runner to
 * write each step's hidden states into (pg_runner_set_hidden). */
float *pg_mtp_hidden(pg_mtp *d);
size_t pg_mtp_kv_bytes(const pg_mtp *d);
size_t pg_mtp_workspace_bytes(const pg_mtp *d);
int32_t pg_mtp_num_blocks(const pg_mtp *d);

/* After the target's step `so` (executed with pg_mtp_hidden as its
 * hidden_out) and the scheduler's update: reqs[i] is so's request i as it
 * is now (NULL: finished). Runs the head over every kept position (above).
 * Errors: those of the head's forward. */
pagoda_status pg_mtp_observe(pg_mtp *d, const pg_sched_output *so, const pg_request *const *reqs);
/* The scheduler's prepare hook (pg_spec_prepare_fn, ctx = the pg_mtp):
 * drafts 2..max_drafts[i] of reqs[0..n). Errors: those of the forward. */
pagoda_status pg_mtp_prepare(void *ctx, pg_request *const *reqs, const int32_t *max_drafts,
                             int32_t n);
/* The scheduler's propose hook (pg_spec_propose_fn): the drafts prepared
 * for r at its current length, at most max_drafts, into out; 0 if none. */
int32_t pg_mtp_propose(void *ctx, const pg_request *r, int32_t max_drafts, int32_t *out);
/* Drop the state of finished / aborted requests ids[0..n). */
void pg_mtp_release(pg_mtp *d, const uint64_t *ids, int32_t n);

/* For tests: positions [base, exact) of request id held exactly (-1: no
 * state), and the head's pool invariants (pg_kvm_check). */
int32_t pg_mtp_exact(const pg_mtp *d, uint64_t id);
pagoda_status pg_mtp_check(const pg_mtp *d);

#endif
