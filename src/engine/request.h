/* One generation request as the engine core sees it: token ids (prompt then
 * outputs), how many of them have KV computed, the hashes of its full blocks
 * and its finish conditions.
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

/* What a client asks for (token level). */
typedef struct pg_request_params {
    uint64_t id;               /* caller's id, unique among live requests */
    const int32_t *prompt;     /* prompt token ids (copied) */
    int32_t num_prompt_tokens; /* >= 1 and < max_model_len */
    int32_t max_tokens;        /* >= 1: output tokens at most */
    int32_t min_tokens;        /* 0..max_tokens: EOS/stop tokens ignored before this many outputs */
    int32_t eos_token_id;      /* -1: none */
    bool ignore_eos;           /* keep going past EOS */
    const int32_t *stop_token_ids; /* extra stop tokens (copied), up to PG_MAX_STOP_TOKENS */
    int32_t num_stop_token_ids;
    /* cache salt (vLLM's request field cache_salt): bytes hashed into the
     * first block's hash (block_hash.h), so the whole chain differs from
     * other salts' and from unsalted requests'; NULL / 0 bytes = the shared
     * cache. Copied. */
    const void *cache_salt;
    size_t cache_salt_len;
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
} pg_request_params;

typedef struct pg_request {
    uint64_t id;
    int32_t kv_slot; /* its block tables' index in the KV cache manager; -1: holds none */
    /* hybrid models (engine/state_cache.h): the snapshot its admission restores
     * (pinned until that step ran) and its newest decode snapshot; -1: none */
    int32_t state_restore, state_snap_decode;
    pg_block_hash state_snap_decode_hash; /* the key state_snap_decode was published under */
    pg_request_status status;
    pg_finish_reason finish_reason;
    int32_t stop_token; /* the token that stopped it, -1 otherwise */

    int32_t *tokens; /* [max_total_tokens]: prompt, then outputs */
    int32_t num_tokens;
    int32_t num_prompt_tokens;
    int32_t max_total_tokens;    /* min(prompt + max_tokens, max_model_len) */
    int32_t num_computed_tokens; /* tokens whose KV is in the cache (prefix hits included) */
    int32_t num_cached_tokens;   /* prefix-cache hit at the latest admission (tokens) */

    int32_t block_size;
    pg_block_hash *block_hashes; /* [max_total_tokens / block_size]: hash of each full block */
    int32_t num_block_hashes;    /* == num_tokens / block_size (0 without hash_blocks) */
    bool hash_blocks;             /* false: prefix caching off, no block hashes */
    pg_block_hash_algo hash_algo; /* the scheduler's (pg_kvm_config.hash_algo) */
    uint8_t *salt;                /* copy of the cache salt, NULL = none */
    size_t salt_len;

    int32_t max_tokens, min_tokens, eos_token_id;
    bool ignore_eos;
    int32_t stop_token_ids[PG_MAX_STOP_TOKENS];
    int32_t num_stop_token_ids;

    int32_t num_preemptions;
    /* encoder-decoder models: pieces of the encoder to run (0: none), pieces
     * done (reset by preemption: its cross-attention blocks are freed), and
     * the encoder state slot it holds while 0 < done < steps (-1: none) */
    int32_t encoder_steps, encoder_done, encoder_slot;
    int32_t probe_len; /* 0: none (see pg_request_params) */
    /* speculative decoding: the draft tokens proposed to follow tokens[]
     * (positions num_tokens ..), verified in the next decode step; never
     * part of tokens[] or block_hashes[] until accepted */
    int32_t spec_token_ids[PG_MAX_SPEC_TOKENS];
    int32_t num_spec_tokens;
    bool no_spec;
    /* acceptance-adaptive draft count (scheduler.h, "Acceptance-adaptive
     * K"): decayed counts of accepted drafts and of rejections over its
     * verifying steps, and, while they give a cap of 0, the decode steps
     * still to pass before one probe draft and the wait after a failed one */
    float spec_acc, spec_rej;
    int32_t spec_wait, spec_backoff;
    /* scheduler bookkeeping */
    int64_t scheduled_step; /* last step that scheduled it, -1: never */
    bool abort_pending;     /* abort requested while its step was in flight */
} pg_request;

/* Validate params and build a request in state WAITING with the prompt's
 * block hashes computed. block_size: tokens per KV block (>= 1);
 * hash_algo: the block hash (engine/block_hash.h) of every full block, NULL
 * for none (prefix caching off: nothing reads them, and SHA-256 is not free).
 * Errors: PAGODA_ERR_INVALID_ARG (empty prompt, negative token id,
 * max_tokens < 1, min_tokens outside 0..max_tokens, too many stop tokens),
 * PAGODA_ERR_LIMIT (prompt >= max_model_len: no room for an output token),
 * PAGODA_ERR_NOMEM. Messages name the request id and the numbers. */
pagoda_status pg_request_create(const pg_request_params *p, int32_t block_size,
                                int32_t max_model_len, const pg_block_hash_algo *hash_algo,
                                pg_request **out);
void pg_request_destroy(pg_request *r);

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
