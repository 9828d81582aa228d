/* Per-group KV cache managers: one per KV cache group (layers sharing a cache
 * spec), all drawing blocks from one shared pg_block_pool. The kind-specific
 * behaviour sits behind a small vtable; block-table bookkeeping is common.
 *
 * Idea from vLLM v1 vllm/v1/core/single_type_kv_cache_manager.py
 * (SingleTypeKVCacheManager, FullAttentionManager, SlidingWindowManager,
 * MambaManager, CrossAttentionManager). Used by the coordinator in
 * kv_cache_manager.c; not called by the scheduler directly. */
#ifndef PAGODA_ENGINE_KV_CACHE_GROUP_H
#define PAGODA_ENGINE_KV_CACHE_GROUP_H

#include <stdbool.h>
#include <stdint.h>

#include "base/status.h"
#include "engine/block_hash.h"
#include "engine/block_pool.h"
#include "engine/kv_cache_spec.h"

/* One request's block table in one group. ids[i] holds tokens
 * [i*block_size, (i+1)*block_size); PG_NULL_BLOCK marks dropped positions. */
typedef struct pg_kv_block_table {
    int32_t *ids;       /* [cap] */
    int32_t n;          /* entries in use */
    int32_t num_cached; /* leading full blocks already offered to the prefix cache */
} pg_kv_block_table;

typedef struct pg_kv_group pg_kv_group;

typedef struct pg_kv_group_ops {
    const char *name;
    /* Block-table entries a request needs to hold num_tokens tokens
     * (full attention: ceil(num_tokens / block_size); a recurrent state: 1). */
    int32_t (*num_table_blocks)(const pg_kv_group *g, int32_t num_tokens);
    /* Longest usable cache hit of at most max_blocks blocks for the chain
     * hashes[0..max_blocks): writes the table entries (block ids, or
     * PG_NULL_BLOCK where the group needs nothing) to out[] and returns the
     * length. A shorter cap may give a different answer (sliding window): the
     * coordinator lowers the cap until every group returns it. Kinds that
     * cannot reuse blocks return 0. */
    int32_t (*find_cached_prefix)(const pg_kv_group *g, const pg_block_hash *hashes,
                                  int32_t max_blocks, int32_t *out);
    /* Free blocks that no query from position num_computed on can read
     * (sliding window: positions <= num_computed - window), replacing them by
     * PG_NULL_BLOCK in the table. NULL: nothing is ever skipped. */
    void (*remove_skipped)(pg_kv_group *g, pg_kv_block_table *t, int32_t num_computed);
} pg_kv_group_ops;

struct pg_kv_group {
    const pg_kv_group_ops *ops;
    pg_kv_cache_spec spec;
    int32_t index;       /* group id, part of the prefix-cache key */
    pg_block_pool *pool; /* shared, not owned */
    bool caching;        /* prefix caching on for this group */
    int32_t max_blocks;  /* table capacity per request */
    int32_t num_tables;
    pg_kv_block_table *tables; /* [num_tables], indexed by request kv_slot */
};

/* Set up group `index` for `spec` with num_tables tables of max_blocks
 * entries each (a cross-attention group: at least its encoder blocks).
 * Errors: PAGODA_ERR_INVALID_ARG (spec), PAGODA_ERR_NOMEM. */
pagoda_status pg_kv_group_init(pg_kv_group *g, int32_t index, const pg_kv_cache_spec *spec,
                               pg_block_pool *pool, bool caching, int32_t num_tables,
                               int32_t max_blocks);
void pg_kv_group_release(pg_kv_group *g);

/* New blocks table t must get to hold num_tokens tokens after num_hits cached
 * blocks are appended (never negative). */
int32_t pg_kv_group_blocks_needed(const pg_kv_group *g, const pg_kv_block_table *t,
                                  int32_t num_tokens, int32_t num_hits);
/* Append `n` blocks from the pool (caller checked availability). */
pagoda_status pg_kv_group_append_new(pg_kv_group *g, pg_kv_block_table *t, int32_t n);
/* Register t's full blocks [num_cached, num_full) under hashes[]. */
void pg_kv_group_cache_full(pg_kv_group *g, pg_kv_block_table *t, const pg_block_hash *hashes,
                            int32_t num_full);
/* Keep t's first num_blocks entries and free the rest, last first (the
 * blocks past a speculative step's accepted tokens). No-op when t holds at
 * most num_blocks. */
void pg_kv_group_truncate(pg_kv_group *g, pg_kv_block_table *t, int32_t num_blocks);
/* Free all of t's blocks, last block first, and empty it. */
void pg_kv_group_free(pg_kv_group *g, pg_kv_block_table *t);

#endif
