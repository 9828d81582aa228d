/* One generation request as the engine core sees it: token ids (prompt then
 * outputs), how many of them have KV computed, the hashes of its full blocks
 * and its finish conditions. The engine's one request struct: built once by
 * pagoda_engine_add_request, queued, then borrowed by the scheduler.
 *
 * Idea from vLLM v1 vllm/v1/request.py (Request, RequestStatus,
 * num_computed_tokens, block_hashes) and vllm/v1/core/sched/utils.py
 * (check_stop). The sampler, detokenizer and stop STRINGS live elsewhere; this
 * module only knows token ids. */
#ifndef PAGODA_ENGINE_REQUEST_H
#define PAGODA_ENGINE_REQUEST_H

#include <stdbool.h>
#include <stdint.h>

#include "base/status.h"
#include "engine/block_hash.h"

#define PG_MAX_STOP_TOKENS 16
/* Draft tokens one request may have verified per step at most (speculative
 * decoding; vLLM's num_speculative_tokens). */
#define PG_MAX_SPEC_TOKENS 16

typedef enum pg_request_status {
    PG_REQ_WAITING = 0, /* queued, never admitted */
    PG_REQ_RUNNING,     /* admitted: holds KV blocks */
    PG_REQ_PREEMPTED,   /* queued again after preemption: blocks freed, recomputed later */
    PG_REQ_FINISHED,    /* see finish_reason */
} pg_request_status;

typedef enum pg_finish_reason {
    PG_FINISH_NONE = 0,
    PG_FINISH_STOP,   /* EOS or a stop token id (stop_token says which) */
    PG_FINISH_LENGTH, /* max_tokens reached or max_model_len reached */
    PG_FINISH_ABORT,  /* aborted by the client/server */
} pg_finish_reason;

/* (Named for users by pagoda_finish_reason_name, the one namer: the engine
 * maps these to pagoda_finish_reason.) */

/* One request, from pagoda_engine_add_request (which builds it on the
 * caller's thread) through the engine's queue to the scheduler, which
 * borrows it while it is queued or running; its creator owns and frees it.
 * The fields under "what the client asks" are the creator's to set before
 * pg_scheduler_add_request and are read-only afterwards; the rest is the
 * scheduler's bookkeeping (read-only to everyone else). */
typedef struct pg_request {
    /* ---- what the client asks (token level) */
    uint64_t id;               /* unique among the scheduler's live requests */
    int32_t *tokens;           /* [max_total_tokens]: prompt, then outputs; entries past
                                  num_tokens are scratch (the engine puts the drafts it
                                  verifies there while sampling) */
    int32_t num_prompt_tokens; /* >= 1 and < max_model_len */
    int32_t max_total_tokens;  /* min(prompt + max_tokens, max_model_len) */
    int32_t max_tokens;        /* >= 1: output tokens at most */
    int32_t min_tokens;        /* 0..max_tokens: EOS/stop tokens ignored before this many outputs */
    int32_t eos_token_id;      /* -1: none */
    bool ignore_eos;           /* keep going past EOS */
    int32_t stop_token_ids[PG_MAX_STOP_TOKENS]; /* extra stop tokens */
    int32_t num_stop_token_ids;
    uint8_t *salt; /* cache salt (pg_request_set_salt), NULL = none */
    size_t salt_len;
    /* encoder-decoder models: encoder pieces to run before the decoder's
     * first token (pg_model_encoder_steps), 0 = none */
    int32_t encoder_steps;
    /* a "probe": the runner also computes the logits after the first
     * probe_len prompt tokens (those of position probe_len - 1; e.g.
     * Whisper's no-speech probability at <|startoftranscript|>); 0 = none,
     * else 1..num_prompt_tokens */
    int32_t probe_len;
    /* never speculate for this request (structured outputs, logits
     * processors: they see one position at a time) */
    bool no_spec;

    /* ---- block hashes (pg_request_hash_blocks) */
    int32_t block_size;
    pg_block_hash *block_hashes;  /* [max_total_tokens / block_size + 1]: hash of each full block */
    int32_t num_block_hashes;     /* == num_tokens / block_size (0 without hash_blocks) */
    bool hash_blocks;             /* false: prefix caching off, no block hashes */
    pg_block_hash_algo hash_algo; /* the scheduler's (pg_kvm_config.hash_algo) */

    /* ---- the scheduler's */
    int32_t num_tokens;
    pg_request_status status;
    pg_finish_reason finish_reason;
    int32_t stop_token; /* the token that stopped it, -1 otherwise */
    int32_t kv_slot; /* its block tables' index in the KV cache manager; -1: holds none */
    /* hybrid models (engine/state_cache.h): the snapshot its admission restores
     * (pinned until that step ran) and its newest decode snapshot; -1: none */
    int32_t state_restore, state_snap_decode;
    pg_block_hash state_snap_decode_hash; /* the key state_snap_decode was published under */
    int32_t num_computed_tokens; /* tokens whose KV is in the cache (prefix hits included) */
    int32_t num_cached_tokens;   /* prefix-cache hit at the latest admission (tokens) */
    int32_t num_preemptions;
    /* encoder pieces done (reset by preemption: its cross-attention blocks
     * are freed), and the encoder state slot it holds while 0 < done <
     * encoder_steps (-1: none) */
    int32_t encoder_done, encoder_slot;
    /* speculative decoding: the draft tokens proposed to follow tokens[]
     * (positions num_tokens ..), verified in the next decode step; never
     * part of tokens[] or block_hashes[] until accepted */
    int32_t spec_token_ids[PG_MAX_SPEC_TOKENS];
    int32_t num_spec_tokens;
    /* acceptance-adaptive draft count (scheduler.h, "Acceptance-adaptive
     * K"): decayed counts of accepted drafts and of rejections over its
     * verifying steps, and, while they give a cap of 0, the decode steps
     * still to pass before one probe draft and the wait after a failed one */
    float spec_acc, spec_rej;
    int32_t spec_wait, spec_backoff;
    int64_t scheduled_step; /* last step that scheduled it, -1: never */
    bool abort_pending;     /* abort requested while its step was in flight */
} pg_request;

/* Create a request in state WAITING for id, holding a copy of
 * prompt[0..num_prompt_tokens) in token storage for max_total_tokens =
 * min(num_prompt_tokens + max_tokens, max_model_len) tokens. Its other
 * finish conditions start empty (min_tokens 0, eos_token_id -1, no stop
 * token ids), as do the salt, encoder_steps, probe_len and no_spec: the
 * creator sets those fields (the salt with pg_request_set_salt) before
 * pg_scheduler_add_request, which validates them (pg_request_validate) and
 * hashes the blocks if the creator did not (pg_request_hash_blocks).
 * Errors: PAGODA_ERR_INVALID_ARG (NULL or empty prompt, a negative token
 * id, max_tokens < 1, max_model_len < 2), PAGODA_ERR_LIMIT
 * (num_prompt_tokens >= max_model_len: no room for an output token),
 * PAGODA_ERR_NOMEM. Messages name the request id and the numbers. */
pagoda_status pg_request_create(uint64_t id, const int32_t *prompt, int32_t num_prompt_tokens,
                                int32_t max_tokens, int32_t max_model_len, pg_request **out);
/* Free r and what it holds (NULL: no-op). The scheduler never frees a
 * request: its creator does, once it has left the scheduler
 * (pg_scheduler_add_request). */
void pg_request_destroy(pg_request *r);

/* Copy salt[0..len) as r's cache salt (vLLM's cache_salt: bytes hashed into
 * the first block's hash, so the whole chain differs from other salts' and
 * from unsalted requests'); NULL / 0 bytes = the shared cache. Only before
 * its blocks are hashed. Errors: PAGODA_ERR_INVALID_ARG (blocks already
 * hashed), PAGODA_ERR_NOMEM. */
pagoda_status pg_request_set_salt(pg_request *r, const void *salt, size_t len);

/* Hash r's full blocks of block_size tokens with *algo (block_hash.h) and
 * from now on every block an appended token completes; algo NULL: no hashes
 * (prefix caching off: nothing reads them, and SHA-256 is not free). Only
 * while r holds no outputs (before it is queued); calling it again with
 * other parameters starts over. pg_scheduler_add_request calls it with the
 * scheduler's block size and algorithm unless r was hashed with them
 * already (the engine hashes on the caller's thread). Errors:
 * PAGODA_ERR_INVALID_ARG (block_size < 1, outputs present),
 * PAGODA_ERR_NOMEM. */
pagoda_status pg_request_hash_blocks(pg_request *r, int32_t block_size,
                                     const pg_block_hash_algo *algo);

/* Check the fields a creator sets: min_tokens in 0..max_tokens,
 * num_stop_token_ids in 0..PG_MAX_STOP_TOKENS with ids >= 0, encoder_steps
 * >= 0, probe_len in 0..num_prompt_tokens. Errors: PAGODA_ERR_INVALID_ARG
 * naming the request, the field and the numbers. */
pagoda_status pg_request_validate(const pg_request *r);

static inline int32_t pg_request_num_output_tokens(const pg_request *r) {
    return r->num_tokens - r->num_prompt_tokens;
}

/* Append one sampled token and hash any block it completes. Never
 * allocates. Errors: PAGODA_ERR_LIMIT when max_total_tokens is reached
 * (a scheduler bug: the request should have finished). */
pagoda_status pg_request_append_token(pg_request *r, int32_t token);

/* Finish check after an append (vLLM check_stop): STOP if at least min_tokens
 * outputs and the last token is EOS (unless ignore_eos) or a stop token;
 * else LENGTH if max_tokens outputs or max_model_len tokens; else NONE. */
pg_finish_reason pg_request_check_stop(const pg_request *r);

#endif
