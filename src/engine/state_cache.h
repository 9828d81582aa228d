/* Prefix cache of recurrent states (hybrid models: Gated DeltaNet / Mamba
 * layers beside attention). A recurrent layer keeps one fixed-size state per
 * request, not one entry per token, so reusing a cached prefix of L blocks
 * needs the state after exactly L * block_size tokens: a snapshot. This is
 * the bookkeeping of N snapshot entries (the bytes live in the runner, one
 * entry = every state layer's state of one request, pg_kv_plan
 * state_bytes_per_seq): an entry is acquired (pinned) when the scheduler
 * asks a step to write a snapshot, published under the block hash of the
 * block it ends (the same chain hash the KV blocks use, so one lookup key
 * covers tokens, salt and position) once the step ran, found by lookup at
 * admission, pinned while a request restores from it, and evicted least
 * recently used among the unpinned published entries.
 *
 * Policy (docs/ARCHITECTURE.md "Prefix caching on hybrid models"): the
 * scheduler snapshots at the last snapshot boundary inside each prefill
 * chunk and, while decoding, at each boundary it crosses, keeping only the
 * newest decode snapshot per request; so when a request ends its newest
 * boundary's state stays cached for the next turn of the conversation.
 * Idea: vLLM v1's mamba prefix caching (mamba_cache_mode "align",
 * vllm/v1/core/single_type_kv_cache_manager.py MambaManager), which keeps
 * states at block-aligned chunk ends. Not thread-safe; never allocates after
 * create. */
#ifndef PAGODA_ENGINE_STATE_CACHE_H
#define PAGODA_ENGINE_STATE_CACHE_H

#include <stdbool.h>
#include <stdint.h>

#include "base/status.h"
#include "engine/block_hash.h"

typedef struct pg_state_cache pg_state_cache;

typedef struct pg_state_cache_stats {
    int32_t num_entries;   /* capacity */
    int32_t num_published; /* entries holding a findable snapshot */
    uint64_t snapshots;    /* published so far */
    uint64_t restores;     /* admissions that resumed from a snapshot */
    uint64_t evictions;    /* published snapshots reclaimed for new ones */
} pg_state_cache_stats;

/* n_entries >= 1. Errors: PAGODA_ERR_INVALID_ARG, PAGODA_ERR_NOMEM. */
pagoda_status pg_state_cache_create(int32_t n_entries, pg_state_cache **out);
void pg_state_cache_destroy(pg_state_cache *c);
int32_t pg_state_cache_capacity(const pg_state_cache *c);

/* The published entry holding the state after the block whose chain hash is
 * h, or -1. Does not pin or touch it. */
int32_t pg_state_cache_lookup(const pg_state_cache *c, pg_block_hash h);

/* An entry to write a snapshot into: a free one, else the least recently
 * used unpinned published one (unpublished first). Returned pinned; -1 when
 * every entry is pinned. */
int32_t pg_state_cache_acquire(pg_state_cache *c);

/* Publish acquired entry e under h and unpin it. If another entry already
 * holds h, e is freed instead (same state, same key). */
void pg_state_cache_publish(pg_state_cache *c, int32_t e, pg_block_hash h);

/* Pin / unpin a published entry (a restore in flight keeps it from being
 * evicted); pin also marks it most recently used. */
void pg_state_cache_pin(pg_state_cache *c, int32_t e);
void pg_state_cache_unpin(pg_state_cache *c, int32_t e);

/* Drop published entry e if nothing pins it (a superseded decode snapshot). */
void pg_state_cache_drop(pg_state_cache *c, int32_t e);

/* Forget every unpinned snapshot. */
void pg_state_cache_reset(pg_state_cache *c);

void pg_state_cache_count_restore(pg_state_cache *c);
void pg_state_cache_get_stats(const pg_state_cache *c, pg_state_cache_stats *out);

#endif
