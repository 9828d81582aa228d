/* KV cache manager: the coordinator over KV cache groups. It owns the block
 * pool and one block table per (group, running request), answers prefix-cache
 * lookups, and allocates/frees blocks for requests.
 *
 * Idea from vLLM v1 vllm/v1/core/kv_cache_manager.py (KVCacheManager:
 * get_computed_blocks, allocate_slots, free) and
 * vllm/v1/core/kv_cache_coordinator.py (one manager per group over a shared
 * BlockPool; the cache hit is the length every group agrees on).
 *
 * Request side: a pg_request carries its tokens, num_computed_tokens and
 * full-block hashes; the manager stores its tables under req->kv_slot, which
 * it assigns on the first allocation and releases in pg_kvm_free. At most
 * max_num_seqs requests hold blocks at once. All storage is sized at create:
 * no call after create allocates. Not thread-safe. */
#ifndef PAGODA_ENGINE_KV_CACHE_MANAGER_H
#define PAGODA_ENGINE_KV_CACHE_MANAGER_H

#include <stdbool.h>
#include <stdint.h>

#include "base/status.h"
#include "engine/block_pool.h"
#include "engine/kv_cache_spec.h"
#include "engine/request.h"

#define PG_KV_MAX_GROUPS 8

typedef struct pg_kvm_config {
    int32_t num_blocks;         /* pool size including the null block (see pg_kv_num_blocks) */
    int32_t block_size;         /* tokens per block; every group's spec must use it */
    int32_t max_model_len;      /* tokens per request at most: sizes the block tables */
    int32_t max_num_seqs;       /* requests holding blocks at once */
    bool enable_prefix_caching; /* default on */
    /* block hash of the prefix cache (engine/block_hash.h): default
     * PG_BLOCK_HASH_SHA256 (0); the scheduler hashes requests with it */
    pg_block_hash_algo hash_algo;
    int32_t num_groups;         /* 1..PG_KV_MAX_GROUPS; 0 = one full-attention group */
    pg_kv_cache_spec groups[PG_KV_MAX_GROUPS];
    /* recurrent-state (mamba) groups: snapshots for prefix caching
     * (engine/state_cache.h); 0 = none, and such a model gets no hits */
    int32_t num_state_snapshots;
    int32_t state_snapshot_align; /* tokens, a multiple of block_size (0 = block_size) */
} pg_kvm_config;

typedef struct pg_kvm_stats {
    uint64_t prefix_queries_tokens; /* tokens of requests looked up at admission */
    uint64_t prefix_hits_tokens;    /* of those, tokens served from the cache */
    uint64_t evictions;             /* cached blocks reclaimed for new content */
    int32_t num_free_blocks;        /* in the free queue (cached or not) */
    int32_t num_cached_blocks;      /* holding a registered hash (in use or free) */
    double usage;                   /* fraction of usable blocks in use */
} pg_kvm_stats;

typedef struct pg_kvm pg_kvm;

/* Groups: full attention, sliding window (frees blocks outside the window;
 * prefix hits need the window's blocks cached), mamba (one state block per
 * request, no slots, no prefix reuse) and cross-attention (the encoder
 * output's K/V: ceil(max_encoder_len / block_size) blocks from a request's
 * admission to its end, whatever its decoder length; no prefix reuse, so a
 * model with such a group gets no hits). Errors: PAGODA_ERR_INVALID_ARG
 * (sizes, block size mismatch between config and a group spec),
 * PAGODA_ERR_NOMEM. */
pagoda_status pg_kvm_create(const pg_kvm_config *cfg, pg_kvm **out);
void pg_kvm_destroy(pg_kvm *m);

int32_t pg_kvm_num_groups(const pg_kvm *m);
/* Spec of group g (0 <= g < num_groups). */
const pg_kv_cache_spec *pg_kvm_group_spec(const pg_kvm *m, int32_t g);
int32_t pg_kvm_block_size(const pg_kvm *m);
/* Block-table capacity per request: ceil(max_model_len / block_size). */
int32_t pg_kvm_max_blocks_per_request(const pg_kvm *m);
/* Usable blocks (pool size minus the null block). */
int32_t pg_kvm_num_usable_blocks(const pg_kvm *m);
/* Blocks (summed over groups) a request of num_tokens tokens needs in total. */
int32_t pg_kvm_blocks_for_tokens(const pg_kvm *m, int32_t num_tokens);
pg_block_pool *pg_kvm_pool(pg_kvm *m);

/* Prefix-cache lookup for a request about to be admitted
 * (num_computed_tokens == 0, holding no blocks): the longest prefix of its
 * full blocks every group can reuse, capped so at least the last token is
 * computed (logits need it). Returns the hit length in TOKENS (a multiple
 * of block_size, 0 when caching is off). The hit blocks are remembered for
 * the next pg_kvm_allocate_slots of the same request; nothing is reserved. */
int32_t pg_kvm_find_cached_prefix(pg_kvm *m, const pg_request *req);

/* Make room for req's next num_new_tokens tokens (the tokens computed in
 * this step, with req->num_spec_tokens draft tokens past its last token
 * allowed: speculative decoding), after num_hit_tokens from the preceding
 * pg_kvm_find_cached_prefix (0 = no reuse). On success the hit blocks are
 * referenced and appended, new blocks are appended, full blocks covering
 * num_computed + hits + num_new tokens are registered in the prefix cache,
 * and req->kv_slot is set. Does NOT change req->num_computed_tokens.
 * Sliding-window groups first free blocks outside the window.
 * Errors: PAGODA_ERR_LIMIT when the pool lacks free blocks (nothing changed
 * except blocks outside a sliding window, which are freed anyway; no message
 * is formatted: this is the scheduler's normal "preempt" path),
 * PAGODA_ERR_INVALID_ARG (hits not from the last lookup, tokens beyond
 * max_model_len), PAGODA_ERR_INTERNAL on a broken invariant. */
pagoda_status pg_kvm_allocate_slots(pg_kvm *m, pg_request *req, int32_t num_new_tokens,
                                    int32_t num_hit_tokens);

/* Speculative decoding's rollback: keep only the blocks req needs for
 * num_tokens tokens in every full-attention / sliding-window group and free
 * the rest, last first (they hold rejected draft tokens only, so no prefix-
 * cache hash names them). Recurrent-state and cross-attention groups are
 * left alone. No-op when req holds nothing. */
void pg_kvm_truncate(pg_kvm *m, pg_request *req, int32_t num_tokens);

/* Free every block of req (each group's table last block first, so a
 * sequence's tail is evicted before its head) and release req->kv_slot.
 * Cached blocks stay in the prefix cache until evicted. No-op when req holds
 * nothing. */
void pg_kvm_free(pg_kvm *m, pg_request *req);

/* req's block table in group g: returns the ids (valid until the next
 * allocate/free of req) and the count in *n. NULL/0 when it holds none. */
const int32_t *pg_kvm_block_table(const pg_kvm *m, int32_t g, const pg_request *req, int32_t *n);

/* The recurrent-state snapshot cache (NULL: no mamba group, no snapshots or
 * caching off) and the spacing of its snapshots in tokens. A mamba group's
 * prefix hit is the longest L blocks, L * block_size a multiple of the
 * spacing, whose attention blocks are cached and whose state after L blocks
 * has a published snapshot (pg_kvm_allocate_slots then sets
 * req->state_restore to it, pinned; the scheduler unpins it after the step
 * that restored it). */
struct pg_state_cache *pg_kvm_state_cache(pg_kvm *m);
int32_t pg_kvm_state_snapshot_align(const pg_kvm *m);

/* Forget all cached prefixes; only when no request holds blocks. */
pagoda_status pg_kvm_reset_prefix_cache(pg_kvm *m);

void pg_kvm_get_stats(const pg_kvm *m, pg_kvm_stats *out);

/* Check pool invariants and that every block's ref_cnt equals the number of
 * block-table entries naming it. Errors: PAGODA_ERR_INTERNAL (first broken
 * invariant), PAGODA_ERR_NOMEM. Allocates; for tests and debugging. */
pagoda_status pg_kvm_check(const pg_kvm *m);

#endif
