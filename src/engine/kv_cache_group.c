/* Per-group KV cache managers: full attention, sliding window, recurrent state. */
#include "engine/kv_cache_group.h"

#include <stdlib.h>

/* ---- full attention (vLLM FullAttentionManager) ---- */

static int32_t full_num_table_blocks(const pg_kv_group *g, int32_t num_tokens) {
    int32_t bs = g->spec.block_size;
    return (num_tokens + bs - 1) / bs;
}

/* Walk the chain from the first block; stop at the first miss. */
static int32_t full_find_cached_prefix(const pg_kv_group *g, const pg_block_hash *hashes,
                                       int32_t max_blocks, int32_t *out) {
    int32_t n = 0;
    while (n < max_blocks) {
        int32_t id = pg_block_pool_lookup(g->pool, hashes[n], g->index);
        if (id < 0) break;
        out[n++] = id;
    }
    return n;
}

static const pg_kv_group_ops FULL_OPS = {
    .name = "full_attention",
    .num_table_blocks = full_num_table_blocks,
    .find_cached_prefix = full_find_cached_prefix,
    .remove_skipped = NULL,
};

/* ---- sliding window (vLLM SlidingWindowManager) ----
 * The table keeps one entry per block position; blocks entirely before the
 * window of the next query become PG_NULL_BLOCK and return to the pool. */

/* First block the query at position `pos` reads: keys (pos - window, pos]. */
static int32_t window_first_block(const pg_kv_group *g, int32_t pos) {
    int32_t first = pos - g->spec.u.sliding.window + 1;
    return first > 0 ? first / g->spec.block_size : 0;
}

/* Longest hit L <= max_blocks such that the blocks the next query (at
 * position L * block_size) reads, [window_first_block, L), are all cached;
 * earlier entries become PG_NULL_BLOCK. Unlike full attention this is not
 * prefix-closed (a shorter L may miss), so the coordinator asks again with
 * smaller caps until all groups agree. Each block is looked up at most once
 * (out[] doubles as the memo, -2 = not looked up). */
static int32_t sliding_find_cached_prefix(const pg_kv_group *g, const pg_block_hash *hashes,
                                          int32_t max_blocks, int32_t *out) {
    for (int32_t i = 0; i < max_blocks; i++)
        out[i] = -2;
    for (int32_t L = max_blocks; L > 0; L--) {
        int32_t start = window_first_block(g, L * g->spec.block_size);
        bool ok = true;
        for (int32_t i = L - 1; i >= start && ok; i--) {
            if (out[i] == -2) out[i] = pg_block_pool_lookup(g->pool, hashes[i], g->index);
            ok = out[i] >= 0;
        }
        if (ok) {
            for (int32_t i = 0; i < start; i++)
                out[i] = PG_NULL_BLOCK;
            return L;
        }
    }
    return 0;
}

static void sliding_remove_skipped(pg_kv_group *g, pg_kv_block_table *t, int32_t num_computed) {
    /* the next query is at position num_computed: blocks before its window go */
    int32_t skip = window_first_block(g, num_computed);
    if (skip > t->n) skip = t->n;
    for (int32_t i = skip - 1; i >= 0; i--) { /* last first, stop at the previous boundary */
        if (t->ids[i] == PG_NULL_BLOCK) break;
        pg_block_pool_free(g->pool, &t->ids[i], 1);
        t->ids[i] = PG_NULL_BLOCK;
    }
}

static const pg_kv_group_ops SLIDING_OPS = {
    .name = "sliding_window",
    .num_table_blocks = full_num_table_blocks,
    .find_cached_prefix = sliding_find_cached_prefix,
    .remove_skipped = sliding_remove_skipped,
};

/* ---- fixed-size recurrent state (vLLM MambaManager) ----
 * One block per request holds the whole state (conv + SSM / linear-attention
 * state), whatever the length: the runner addresses it through block_table[0]
 * and has no per-token slots. No prefix reuse (the state after a prefix is not
 * kept per block), so a model with such a group gets no prefix-cache hits. */

static int32_t state_num_table_blocks(const pg_kv_group *g, int32_t num_tokens) {
    return num_tokens > 0 ? 1 : 0;
}

static int32_t no_cached_prefix(const pg_kv_group *g, const pg_block_hash *hashes,
                                int32_t max_blocks, int32_t *out) {
    return 0;
}

static const pg_kv_group_ops MAMBA_OPS = {
    .name = "mamba",
    .num_table_blocks = state_num_table_blocks,
    .find_cached_prefix = no_cached_prefix,
    .remove_skipped = NULL,
};

/* ---- cross-attention (vLLM CrossAttentionManager) ----
 * The encoder output's K/V of one request: ceil(max_encoder_len /
 * block_size) blocks, allocated whole when the request is admitted
 * (whatever its decoder length) and freed when it ends. Never shared
 * between requests (its content depends on the audio, not on the tokens
 * the block hashes cover). */

static int32_t cross_num_table_blocks(const pg_kv_group *g, int32_t num_tokens) {
    (void)num_tokens;
    int32_t bs = g->spec.block_size;
    return (g->spec.u.cross.max_encoder_len + bs - 1) / bs;
}

static const pg_kv_group_ops CROSS_OPS = {
    .name = "cross_attention",
    .num_table_blocks = cross_num_table_blocks,
    .find_cached_prefix = no_cached_prefix,
    .remove_skipped = NULL,
};

/* ---- common ---- */

pagoda_status pg_kv_group_init(pg_kv_group *g, int32_t index, const pg_kv_cache_spec *spec,
                               pg_block_pool *pool, bool caching, int32_t num_tables,
                               int32_t max_blocks) {
    *g = (pg_kv_group){0};
    pagoda_status st = pg_kv_cache_spec_check(spec);
    if (st) return st;
    switch (spec->kind) {
    case PG_KV_FULL_ATTENTION:
        g->ops = &FULL_OPS;
        break;
    case PG_KV_SLIDING_WINDOW:
        g->ops = &SLIDING_OPS;
        break;
    case PG_KV_MAMBA:
        g->ops = &MAMBA_OPS;
        caching = false; /* its one block is a state, not the tokens of block 0 */
        break;
    case PG_KV_CROSS_ATTENTION:
        g->ops = &CROSS_OPS;
        caching = false; /* the encoder's K/V, not the tokens the hashes cover */
        {
            int32_t need = cross_num_table_blocks(&(pg_kv_group){.spec = *spec}, 0);
            if (need > max_blocks) max_blocks = need;
        }
        break;
    default:
        return pg_error(PAGODA_ERR_INVALID_ARG, "kv cache group %d: unknown kind %d", index,
                        (int)spec->kind); /* (pg_kv_cache_spec_check refuses it first) */
    }
    g->spec = *spec;
    g->index = index;
    g->pool = pool;
    g->caching = caching;
    g->max_blocks = max_blocks;
    g->num_tables = num_tables;
    g->tables = calloc((size_t)num_tables, sizeof *g->tables);
    if (!g->tables) return pg_error(PAGODA_ERR_NOMEM, "kv cache group %d: out of memory", index);
    for (int32_t i = 0; i < num_tables; i++) {
        g->tables[i].ids = malloc((size_t)max_blocks * sizeof(int32_t));
        if (!g->tables[i].ids) {
            pg_kv_group_release(g);
            return pg_error(PAGODA_ERR_NOMEM, "kv cache group %d: out of memory for %d x %d blocks",
                            index, num_tables, max_blocks);
        }
    }
    return PAGODA_OK;
}

void pg_kv_group_release(pg_kv_group *g) {
    if (g->tables)
        for (int32_t i = 0; i < g->num_tables; i++)
            free(g->tables[i].ids);
    free(g->tables);
    g->tables = NULL;
}

int32_t pg_kv_group_blocks_needed(const pg_kv_group *g, const pg_kv_block_table *t,
                                  int32_t num_tokens, int32_t num_hits) {
    int32_t need = g->ops->num_table_blocks(g, num_tokens) - (t->n + num_hits);
    return need > 0 ? need : 0;
}

pagoda_status pg_kv_group_append_new(pg_kv_group *g, pg_kv_block_table *t, int32_t n) {
    if (n <= 0) return PAGODA_OK;
    if (t->n + n > g->max_blocks)
        return pg_error(PAGODA_ERR_INTERNAL, "kv cache group %d: block table of %d + %d exceeds %d",
                        g->index, t->n, n, g->max_blocks);
    pagoda_status st = pg_block_pool_alloc(g->pool, n, t->ids + t->n);
    if (st) return st;
    t->n += n;
    return PAGODA_OK;
}

void pg_kv_group_cache_full(pg_kv_group *g, pg_kv_block_table *t, const pg_block_hash *hashes,
                            int32_t num_full) {
    if (num_full > t->n) num_full = t->n;
    if (g->caching)
        for (int32_t i = t->num_cached; i < num_full; i++)
            if (t->ids[i] != PG_NULL_BLOCK && !pg_block_pool_is_cached(g->pool, t->ids[i]))
                pg_block_pool_cache_block(g->pool, t->ids[i], hashes[i], g->index);
    if (num_full > t->num_cached) t->num_cached = num_full;
}

void pg_kv_group_truncate(pg_kv_group *g, pg_kv_block_table *t, int32_t num_blocks) {
    if (num_blocks < 0) num_blocks = 0;
    for (int32_t i = t->n - 1; i >= num_blocks; i--)
        pg_block_pool_free(g->pool, &t->ids[i], 1);
    if (t->n > num_blocks) t->n = num_blocks;
    if (t->num_cached > t->n) t->num_cached = t->n;
}

void pg_kv_group_free(pg_kv_group *g, pg_kv_block_table *t) {
    for (int32_t i = t->n - 1; i >= 0; i--)
        pg_block_pool_free(g->pool, &t->ids[i], 1);
    t->n = 0;
    t->num_cached = 0;
}
