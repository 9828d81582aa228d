/* KV block pool: ids of the blocks of one preallocated KV region, their
 * reference counts, the LRU free queue and the prefix-cache hash map.
 *
 * Idea from vLLM v1 vllm/v1/core/block_pool.py (BlockPool,
 * FreeKVCacheBlockQueue): every block is either in use (ref_cnt > 0) or in the
 * free queue (ref_cnt == 0). A free block may still hold a cached full block
 * (it keeps its hash): a later request with the same prefix takes it back out
 * of the queue ("touch"). New blocks are taken from the queue's HEAD; a taken
 * block that still holds a hash is evicted from the cache at that moment,
 * i.e. only when the memory is needed. Freed blocks holding a hash are
 * appended at the TAIL, so among cached blocks the head is the least recently
 * used; freed blocks holding no hash go to the HEAD (our refinement of vLLM,
 * which appends both): they are reused first, so a cached block is evicted
 * only when no empty free block is left.
 *
 * Block 0 is the reserved "null block": never handed out, used as a
 * placeholder in block tables (sliding-window positions already dropped).
 * The pool manages ids only; the bytes live in the runner's KV tensors.
 * Not thread-safe (the scheduler thread owns it). */
#ifndef PAGODA_ENGINE_BLOCK_POOL_H
#define PAGODA_ENGINE_BLOCK_POOL_H

#include <stdbool.h>
#include <stdint.h>

#include "base/status.h"
#include "engine/block_hash.h"

#define PG_NULL_BLOCK 0

typedef struct pg_block_pool pg_block_pool;

/* A pool of `num_blocks` block ids (0 = null block, 1..num_blocks-1 usable),
 * all free and uncached. enable_caching=false makes cache_block a no-op.
 * Errors: PAGODA_ERR_INVALID_ARG (num_blocks < 2), PAGODA_ERR_NOMEM. */
pagoda_status pg_block_pool_create(int32_t num_blocks, bool enable_caching, pg_block_pool **out);
void pg_block_pool_destroy(pg_block_pool *pool);

/* Total ids including the null block. */
int32_t pg_block_pool_num_blocks(const pg_block_pool *pool);
/* Blocks in the free queue (cached or not): what alloc can hand out. */
int32_t pg_block_pool_num_free(const pg_block_pool *pool);
/* Fraction of usable blocks in use, 0..1. */
double pg_block_pool_usage(const pg_block_pool *pool);

/* Take n blocks from the head of the free queue into out[0..n) with ref_cnt 1,
 * evicting their cached hashes. Errors: PAGODA_ERR_LIMIT if fewer than n are
 * free (nothing is taken then). */
pagoda_status pg_block_pool_alloc(pg_block_pool *pool, int32_t n, int32_t *out);

/* Add a reference to each of ids[0..n) (prefix-cache hits): blocks with
 * ref_cnt 0 leave the free queue, keeping their hash. The null block is
 * ignored. */
void pg_block_pool_touch(pg_block_pool *pool, const int32_t *ids, int32_t n);

/* Drop one reference from each of ids[0..n) IN THIS ORDER; a cached block
 * reaching ref_cnt 0 is appended to the free queue's tail (so ids[0] is
 * evicted before ids[1]), an uncached one goes to the head. Callers pass a
 * request's blocks in reverse so its tail blocks are evicted first (vLLM
 * KVCacheManager.free). The null block is ignored.
 * Freeing a block whose ref_cnt is 0 is a bug: it is logged and ignored. */
void pg_block_pool_free(pg_block_pool *pool, const int32_t *ids, int32_t n);

/* Cached block holding `hash` for KV cache group `group`, or -1. */
int32_t pg_block_pool_lookup(const pg_block_pool *pool, pg_block_hash hash, int32_t group);

/* Register block `id` (in use, full, not yet cached) as holding `hash` for
 * `group`. Returns false (and leaves the block uncached) when caching is off
 * or another block already holds the same (hash, group). */
bool pg_block_pool_cache_block(pg_block_pool *pool, int32_t id, pg_block_hash hash, int32_t group);

/* Forget every cached hash. Only allowed when no block is in use (as vLLM's
 * reset_prefix_cache). Errors: PAGODA_ERR_INVALID_ARG naming the used count. */
pagoda_status pg_block_pool_reset_cache(pg_block_pool *pool);

/* Introspection, for the manager and tests. */
int32_t pg_block_pool_ref_cnt(const pg_block_pool *pool, int32_t id);
bool pg_block_pool_is_cached(const pg_block_pool *pool, int32_t id);
/* Free queue order: writes up to max ids from head (next evicted) to tail;
 * returns the queue length. */
int32_t pg_block_pool_free_queue(const pg_block_pool *pool, int32_t *ids, int32_t max);
/* Cache evictions (hash entries removed by alloc) since create. */
uint64_t pg_block_pool_num_evictions(const pg_block_pool *pool);
/* Number of cached (hash-holding) blocks. */
int32_t pg_block_pool_num_cached(const pg_block_pool *pool);

/* Check every invariant (queue links and length, ref_cnt 0 <=> queued, hash
 * map <=> block hashes, null block untouched). Errors: PAGODA_ERR_INTERNAL
 * with the first broken one. O(num_blocks): for tests and debugging. */
pagoda_status pg_block_pool_check(const pg_block_pool *pool);

#endif
