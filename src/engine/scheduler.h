/* Scheduler: continuous batching with chunked prefill, prefix caching and
 * preemption by recompute, over integers only (no model).
 *
 * Idea from vLLM v1 vllm/v1/core/sched/scheduler.py (Scheduler.schedule,
 * update_from_output, _preempt_request, finish_requests) and
 * vllm/v1/core/sched/output.py (SchedulerOutput). Our own policy details:
 *
 * One step = pg_scheduler_schedule -> (runner executes the output) ->
 * pg_scheduler_update_from_output. Each step has a budget of
 * max_num_batched_tokens tokens and at most max_num_seqs requests:
 *   1. running requests with one pending token (decodes), in admission order;
 *   2. running requests with a partly computed prompt (prefill chunks), in
 *      admission order, each as many tokens as the budget allows;
 *   3. waiting requests, FCFS, only if nobody was preempted in this step:
 *      prefix-cache lookup, then a prefill chunk of what is left. The queue
 *      head blocks the queue when it does not fit (no skipping).
 * When a running request needs a block and none is free, the most recently
 * admitted running request NOT yet scheduled in this step is preempted
 * (possibly the request itself): its blocks are freed, num_computed_tokens
 * reset to 0 (recomputed later from prompt + outputs so far; its outputs are
 * kept) and it goes back to the FRONT of the waiting queue, so preempted
 * requests resume before newer ones. Its full blocks stay in the prefix
 * cache, so resuming usually re-reads them instead of recomputing.
 *
 * num_computed_tokens advances in update_from_output (as the runner reports),
 * except prefix-cache hits, which count as computed at admission.
 * No call allocates in the steady state: step buffers are sized at create;
 * only add_request allocates (block hashes its creator did not compute and,
 * when they grow, the id map and the waiting queue). Requests are borrowed:
 * their creator allocates and frees them (pg_scheduler_add_request). Not
 * thread-safe: one engine thread owns the scheduler. */
#ifndef PAGODA_ENGINE_SCHEDULER_H
#define PAGODA_ENGINE_SCHEDULER_H

#include <stdbool.h>
#include <stdint.h>

#include "base/status.h"
#include "engine/kv_cache_manager.h"
#include "engine/request.h"

/* Speculative decoding (vLLM v1's spec decode: the scheduler side of
 * vllm/v1/core/sched/scheduler.py, spec_token_ids): a running request that
 * decodes may carry draft tokens (pg_request.spec_token_ids) proposed to
 * follow its last token. They are scheduled as extra query tokens of its
 * decode (positions num_tokens ..; counted against the token budget; KV
 * slots allocated for them) so the runner scores all of them in the step's
 * one batched forward, with logits for every one of them and for the last
 * token (num_spec_tokens[i] + 1 sampling rows). update_from_output_spec then
 * takes the accepted drafts plus one more token: num_computed_tokens counts
 * only what was accepted (the rejected drafts' KV slots are rolled back),
 * blocks past the accepted length are freed, and block hashes (prefix cache)
 * only ever cover accepted tokens (they are hashed when appended).
 *
 * Who proposes: pg_spec_config.propose (NULL: the n-gram proposer over the
 * request's own tokens, engine/ngram.h). The adaptive rule: drafts go only
 * to decodes while the step's decode tokens plus drafts stay within
 * max_batch_tokens (a small step streams the weights once whatever its size,
 * so extra query tokens are nearly free; a large one is compute-bound and
 * drafts would only cost), in admission order, and none at all while
 * disable_by_batch_size or more requests run (vLLM's
 * speculative_disable_by_batch_size). Requests with no_spec, and models with
 * recurrent-state or cross-attention groups (their state cannot be rolled
 * back), never get drafts.
 *
 * Acceptance-adaptive K (per request, on top of the rule above): each
 * verifying step with D drafts of which A were accepted adds A accepted and
 * (A < D) one rejection to the request's counts, both first multiplied by
 * PG_SPEC_DECAY (0.8: the last ~5 verifying steps weigh most). Its
 * per-token acceptance estimate is a = (acc + 1) / (acc + rej + 1) (the
 * maximum-likelihood rate of a geometric run of acceptances, with one
 * accepted draft as prior so a single miss does not end speculation), and
 * its draft cap the largest k <= num_speculative_tokens with a^k >=
 * min_draft_gain: the k-th draft is used with probability a^k, so it is
 * proposed only while that expected yield beats its cost (one more query
 * token to verify plus, for a draft model, one more draft forward, in units
 * of a decode step). A request with no rejection yet gets
 * num_speculative_tokens. When the cap falls to 0 (a draft that never
 * agrees) the request decodes without drafts for spec_wait steps, then
 * gets a probe of 1 draft; a failed probe doubles the wait (2, 4, .. up
 * to PG_SPEC_MAX_WAIT steps), an accepted one raises a and so the cap
 * again (all of K once the estimate recovers). Greedy outputs do not depend
 * on the cap (a draft only saves a step), sampled ones keep the target's
 * distribution, and the cap depends only on the request's own history. */
#define PG_SPEC_DECAY 0.8f
#define PG_SPEC_DEFAULT_MIN_DRAFT_GAIN 0.2f
#define PG_SPEC_MAX_WAIT 64
typedef int32_t (*pg_spec_propose_fn)(void *ctx, const pg_request *r, int32_t max_drafts,
                                      int32_t *out);
/* Called once per step before any propose, when the step may carry drafts:
 * reqs[0..n) are the running decodes (one pending token, not no_spec) that
 * may get drafts, in the order propose will see them, and max_drafts[i] the
 * drafts i may get at most (num_speculative_tokens, what it may still
 * output, and the step's draft budget given to those before it). A proposer
 * that batches its work (the draft model, engine/draft.h) computes all of
 * it here. An error fails the step. */
typedef pagoda_status (*pg_spec_prepare_fn)(void *ctx, pg_request *const *reqs,
                                            const int32_t *max_drafts, int32_t n);

typedef struct pg_spec_config {
    int32_t num_speculative_tokens;               /* drafts per request and step at most; 0 = off */
    int32_t prompt_lookup_min, prompt_lookup_max; /* n-gram lengths (vLLM's names) */
    int32_t max_batch_tokens;      /* decode tokens + drafts per step at most (adaptive rule) */
    int32_t disable_by_batch_size; /* no drafts while this many requests run; 0 = no limit */
    pg_spec_propose_fn propose;    /* NULL: n-gram */
    void *propose_ctx;
    pg_spec_prepare_fn prepare; /* NULL: none; gets propose_ctx */
    /* acceptance-adaptive K (above): the expected yield a draft position
     * must reach; 0: PG_SPEC_DEFAULT_MIN_DRAFT_GAIN; < 0: off (every
     * request may get num_speculative_tokens drafts) */
    float min_draft_gain;
    /* the runner rolls recurrent states back to the last accepted draft
     * (engine/runner.h pg_runner_spec_keep); false: speculation is off for
     * models with a recurrent-state group */
    bool states_roll_back;
} pg_spec_config;

/* Probe rows (pg_request.probe_len) per step at most: a chunk that
 * would hold one more ends before its probe position. */
#define PG_SCHED_MAX_PROBES 8

typedef struct pg_sched_config {
    int32_t max_num_batched_tokens; /* token budget per step (vLLM CPU online default 2048) */
    int32_t max_num_seqs;           /* requests running / per step (default 128) */
    int32_t max_model_len;          /* tokens per request (prompt + output) */
    /* Prefill chunks end at multiples of this many positions unless they end
     * the prompt (0 / 1: anywhere): models whose state layers compute in
     * fixed position chunks (Gated DeltaNet: 64, pg_kv_plan.state_align) then
     * give bitwise the same result whatever the budget and the batch. A chunk
     * that cannot reach the next multiple in this step waits for a later one
     * (unless the step is otherwise empty: a budget below the multiple). */
    int32_t prefill_align;
    /* Encoder-decoder models (requests with pg_request.encoder_steps):
     * each encoder piece costs encoder_step_tokens of the step's encoder
     * budget, max_num_encoder_tokens (vLLM's max_num_encoder_input_tokens,
     * separate from the decoder's token budget; 0 = max_num_batched_tokens):
     * a step runs as many pieces as it allows and at least one while any
     * request is encoding (so encoders always progress), and at most
     * max_num_encoding requests are between their first and last piece at
     * once (the runner's encoder state slots). */
    int32_t encoder_step_tokens;
    int32_t max_num_encoder_tokens;
    int32_t max_num_encoding;
    /* KV cache: num_blocks, block_size, enable_prefix_caching, groups. Its
     * max_model_len and max_num_seqs are taken from the fields above. */
    pg_kvm_config kv;
    pg_spec_config spec; /* speculative decoding; zeroed = off */
} pg_sched_config;

/* Defaults: 2048 tokens, 128 seqs, max_model_len 4096, block size
 * PG_KV_DEFAULT_BLOCK_SIZE, prefix caching on, one full-attention group;
 * kv.num_blocks = 0 must be set by the caller (pg_kv_num_blocks). */
void pg_sched_config_default(pg_sched_config *cfg);

/* The plan for one step: plain data for the runner. Arrays are owned by the
 * scheduler and valid until the next pg_scheduler_update_from_output. */
typedef struct pg_sched_output {
    int64_t step;       /* 0, 1, 2, ... */
    int32_t num_reqs;   /* scheduled requests, <= max_num_seqs */
    int32_t num_tokens; /* sum of num_scheduled_tokens, <= max_num_batched_tokens */
    int32_t num_groups; /* KV cache groups */
    int32_t block_size;
    int32_t req_stride;   /* = max_num_seqs: stride of the per-group request arrays */
    int32_t token_stride; /* = max_num_batched_tokens: stride of slot_mapping */

    /* per scheduled request i in batch order (decodes, prefill chunks, new admissions) */
    const uint64_t *req_ids;
    const int32_t *num_scheduled_tokens; /* query length of i */
    const int32_t *num_computed_tokens;  /* KV already cached for i before this step */
    const int32_t *query_start_loc;      /* [num_reqs + 1] (cu_seqlens_q): i's tokens are
                                            [query_start_loc[i], query_start_loc[i+1]) */
    const int32_t *seq_lens;             /* KV length after this step: computed + scheduled */
    const int32_t *kv_slots;             /* i's KV manager slot in [0, max_num_seqs), held while
                                            it holds blocks: the runner keys per-request state
                                            (recurrent-state layers) by it */
    const uint8_t *is_new;               /* admitted this step (new or resumed after preemption):
                                            the runner (re)builds its per-request state */
    const uint8_t *samples;              /* 1: this step reaches i's last token, so the runner
                                            samples one token for i (else a prefill chunk: no token) */
    const int32_t *num_spec_tokens;      /* draft tokens of i scheduled after its last token (the
                                            last num_spec_tokens[i] of its query; 0: none): the
                                            runner returns num_spec_tokens[i] + 1 logits rows */
    const int32_t *spec_token_ids;       /* i's drafts at [i * PG_MAX_SPEC_TOKENS] */
    int32_t num_spec_total;              /* sum of num_spec_tokens */
    /* hybrid models' state snapshots (engine/state_cache.h), per request i:
     * state_restore[i] >= 0: before the step, i's recurrent state is the
     * snapshot entry state_restore[i] (admitted on a prefix hit; else a
     * request with num_computed_tokens 0 starts from zero);
     * state_snap[i] >= 0: the layers also write i's state after its first
     * state_snap_len[i] tokens of this step into that entry */
    const int32_t *state_restore, *state_snap, *state_snap_len;
    /* probe_rows[i] >= 0: the token row of i's probe (its logits are wanted
     * too, pg_request.probe_len); at most PG_SCHED_MAX_PROBES a step */
    const int32_t *probe_rows;
    /* per group g and request i, at [g * req_stride + i] */
    const int32_t *const *block_tables; /* i's block table in group g (ids) */
    const int32_t *num_blocks;          /* its length */
    const int32_t *num_new_blocks;      /* entries appended this step (the last ones); a
                                           sliding-window table may also have had entries
                                           replaced by PG_NULL_BLOCK */
    /* per scheduled token t in [0, num_tokens) */
    const int32_t *token_ids;    /* input token id at that position */
    const int32_t *positions;    /* its position in its sequence (for RoPE) */
    const int32_t *slot_mapping; /* group g at [g * token_stride + t]: where to write the
                                    token's K/V: block_id * block_size + position % block_size;
                                    -1 for a mamba group (its state is block_tables[.][0]) */
    /* encoder pieces (encoder-decoder models), run before the decoder batch:
     * job j runs pieces [enc_step_begin[j], enc_step_begin[j] +
     * enc_num_steps[j]) of request enc_req_ids[j]'s encoder on state slot
     * enc_slots[j] (< max_num_encoding); when it runs the last piece
     * (enc_finishes[j]) the runner then writes the request's cross-attention
     * K/V into enc_cross_tables[j], its table in group enc_cross_group. A
     * request whose encoder finishes may also be in the decoder batch of the
     * same step. The decoder batch's cross-attention group has slot mapping
     * -1 (nothing is written there by decoder tokens). */
    int32_t num_enc;
    const uint64_t *enc_req_ids;
    const int32_t *enc_slots, *enc_step_begin, *enc_num_steps;
    const uint8_t *enc_finishes;
    const int32_t *const *enc_cross_tables;
    int32_t enc_cross_group; /* -1: no cross-attention group */
    /* events */
    const uint64_t *preempted_ids; /* preempted in this step (now waiting, blocks freed) */
    int32_t num_preempted;
    const uint64_t *finished_ids; /* requests that were running (the runner holds state for
                                     them) and finished or were aborted since the previous
                                     step: the runner drops their state. <= max_num_seqs */
    int32_t num_finished;
} pg_sched_output;

/* What happened to one request in update_from_output. */
typedef struct pg_step_event {
    uint64_t req_id;
    int32_t token;         /* the (last) new output token, -1 if none (aborted) */
    const int32_t *tokens; /* every new output token of this step, in order (speculative
                              decoding: accepted drafts, then one more), num_tokens of them;
                              valid until the next update_from_output */
    int32_t num_tokens;
    pg_finish_reason finish;   /* PG_FINISH_NONE while it continues */
    int32_t stop_token;        /* for PG_FINISH_STOP: the EOS/stop token, else -1 */
    int32_t num_output_tokens; /* outputs so far, including this token */
} pg_step_event;

typedef struct pg_step_result {
    int32_t num_events;
    const pg_step_event *events; /* valid until the next update_from_output */
} pg_step_result;

/* Speculative decoding counters (vLLM's SpecDecodingStats). */
typedef struct pg_spec_stats {
    uint64_t num_drafts;          /* request-steps that verified at least one draft token */
    uint64_t num_draft_tokens;    /* draft tokens verified */
    uint64_t num_accepted_tokens; /* of those, accepted */
    uint64_t accepted_per_pos[PG_MAX_SPEC_TOKENS]; /* accepted at draft position p */
} pg_spec_stats;

typedef struct pg_sched_stats {
    int32_t num_running;
    int32_t num_waiting; /* includes preempted */
    int64_t num_steps;
    uint64_t num_preemptions;
    pg_spec_stats spec;
    pg_kvm_stats kv;
} pg_sched_stats;

typedef struct pg_scheduler pg_scheduler;

/* Errors: PAGODA_ERR_INVALID_ARG (budgets < 1, max_model_len < 2,
 * max_num_batched_tokens < max_num_seqs: every running request must be able
 * to decode in every step, as vLLM requires), anything pg_kvm_create returns.
 * Logs a warning when max_model_len tokens do not fit in the pool (such
 * requests are rejected by add_request). */
pagoda_status pg_scheduler_create(const pg_sched_config *cfg, pg_scheduler **out);
/* Frees the scheduler; the requests still queued or running are left to
 * their creators (pg_scheduler_add_request). */
void pg_scheduler_destroy(pg_scheduler *s);

/* Queue r, a new request (pg_request_create; state WAITING, FCFS order).
 * The scheduler borrows r: its creator keeps owning it and frees it
 * (pg_request_destroy) only once it has left the scheduler: it finished
 * (an update_from_output event with a finish reason), was aborted
 * (pg_scheduler_abort returned, or, when its step was in flight, the
 * update_from_output that completes the abort), or the scheduler was
 * destroyed. Meanwhile the creator only reads it (and may write the
 * scratch tokens past num_tokens between schedule and update). Its block
 * hashes are computed here unless r was hashed with this scheduler's
 * block size and algorithm already (pg_request_hash_blocks); a request
 * made for a longer max_model_len is capped to this one. Rejected before
 * admission (r is untouched but for its hashes and cap):
 * PAGODA_ERR_INVALID_ARG (not a new request, pg_request_validate fails,
 * id already live, encoder steps on a scheduler without a cross-attention
 * group or without encoder slots), PAGODA_ERR_LIMIT (prompt >=
 * max_model_len; or prompt + max_tokens, capped at max_model_len, needing
 * more blocks than the whole pool: it could never finish), with a message
 * naming the request and the numbers. PAGODA_ERR_NOMEM. */
pagoda_status pg_scheduler_add_request(pg_scheduler *s, pg_request *r);

/* Abort a queued or running request: its blocks are freed and, if it was
 * running, its id is reported in the next output's finished_ids. If it is part of the step in
 * flight, the abort completes in update_from_output (its token is dropped and
 * an event with PG_FINISH_ABORT is reported). Errors: PAGODA_ERR_NOT_FOUND. */
pagoda_status pg_scheduler_abort(pg_scheduler *s, uint64_t id);

/* Plan the next step into *out (pointers into scheduler buffers).
 * num_reqs == 0 when there is nothing to do. Errors: PAGODA_ERR_INVALID_ARG
 * when the previous step's update_from_output is missing,
 * PAGODA_ERR_INTERNAL on a broken invariant. */
pagoda_status pg_scheduler_schedule(pg_scheduler *s, pg_sched_output *out);

/* Apply the runner's results of the step `so` (the last output of
 * pg_scheduler_schedule): every scheduled request's num_computed_tokens
 * grows by its num_scheduled_tokens; for requests with samples[i] == 1,
 * sampled_token_ids[i] (>= 0) is appended and the finish conditions checked;
 * finished requests free their blocks and leave the scheduler.
 * sampled_token_ids: [so->num_reqs], entries ignored where samples[i] == 0.
 * *res (may be NULL) lists one event per request that got a token or ended.
 * Errors: PAGODA_ERR_INVALID_ARG (not the step in flight, a missing or
 * negative token; nothing is applied then). */
pagoda_status pg_scheduler_update_from_output(pg_scheduler *s, const pg_sched_output *so,
                                              const int32_t *sampled_token_ids,
                                              pg_step_result *res);

/* update_from_output for steps with draft tokens: request i (samples[i])
 * got num_sampled[i] tokens at tokens[i * stride ..]: its first
 * num_sampled[i] - 1 drafts, accepted (they must equal
 * so->spec_token_ids of i), then the token sampled after them (a correction
 * or the bonus token), so 1 <= num_sampled[i] <= num_spec_tokens[i] + 1.
 * The tokens are appended one at a time with the finish checks after each
 * (an EOS among the accepted drafts ends the request there; the rest is
 * dropped). num_computed_tokens counts only the accepted positions; blocks
 * past what the request's tokens need are freed (pg_kvm_truncate). Events
 * list every appended token. num_sampled NULL: one token each, stride 1
 * (= pg_scheduler_update_from_output). Errors: those of
 * update_from_output, and PAGODA_ERR_INVALID_ARG for a count outside
 * [1, num_spec_tokens + 1] or accepted tokens that differ from the drafts
 * (nothing is applied then). */
pagoda_status pg_scheduler_update_from_output_spec(pg_scheduler *s, const pg_sched_output *so,
                                                   const int32_t *tokens,
                                                   const int32_t *num_sampled, int32_t stride,
                                                   pg_step_result *res);

/* Replace the draft proposer (pg_spec_config.propose; NULL: n-gram) for
 * the steps to come, and its prepare hook (NULL: none); speculative
 * decoding must be on (num_speculative_tokens > 0), else
 * PAGODA_ERR_INVALID_ARG. */
pagoda_status pg_scheduler_set_proposer(pg_scheduler *s, pg_spec_propose_fn fn, void *ctx);
pagoda_status pg_scheduler_set_prepare(pg_scheduler *s, pg_spec_prepare_fn fn);

/* A live (queued or running) request, NULL when unknown or finished.
 * Read-only view; valid until it finishes. */
const pg_request *pg_scheduler_get_request(const pg_scheduler *s, uint64_t id);
/* Requests queued or running. */
int32_t pg_scheduler_num_unfinished(const pg_scheduler *s);
void pg_scheduler_get_stats(const pg_scheduler *s, pg_sched_stats *out);
pg_kvm *pg_scheduler_kvm(pg_scheduler *s);

/* Check scheduler + KV invariants (queue states, kv slots, ref counts).
 * Errors: PAGODA_ERR_INTERNAL. Allocates: for tests and debugging. */
pagoda_status pg_scheduler_check(const pg_scheduler *s);

#endif
