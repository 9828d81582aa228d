/* KV cache manager: coordinator over KV cache groups sharing one block pool. */
#include "engine/kv_cache_manager.h"

#include <stdlib.h>
#include <string.h>

#include "engine/kv_cache_group.h"
#include "engine/state_cache.h"

struct pg_kvm {
    int32_t block_size;
    int32_t max_model_len;
    int32_t max_blocks; /* per request per group */
    int32_t num_tables; /* max_num_seqs */
    bool caching;
    int32_t num_groups;
    pg_kv_group groups[PG_KV_MAX_GROUPS];
    pg_block_pool *pool;
    /* kv_slot allocation: stack of free table indices */
    int32_t *free_slots;
    int32_t num_free_slots;
    /* the last prefix lookup */
    const pg_request *hit_req;
    int32_t hit_blocks;
    int32_t *hit_ids; /* [num_groups * max_blocks] */
    int32_t hit_snapshot; /* the state snapshot of the last lookup's hit, or -1 */
    uint64_t queries, hits;
    pg_state_cache *sc;   /* snapshots of recurrent states, or NULL */
    int32_t snap_align;   /* their spacing in blocks */
    bool has_mamba;
};

pagoda_status pg_kvm_create(const pg_kvm_config *cfg, pg_kvm **out) {
    *out = NULL;
    if (!cfg) return pg_error(PAGODA_ERR_INVALID_ARG, "kv cache manager: NULL config");
    if (cfg->block_size < 1 || cfg->max_model_len < 2 || cfg->max_num_seqs < 1 ||
        cfg->num_groups < 0 || cfg->num_groups > PG_KV_MAX_GROUPS)
        return pg_error(PAGODA_ERR_INVALID_ARG,
                        "kv cache manager: block_size %d, max_model_len %d, max_num_seqs %d, "
                        "num_groups %d (need >= 1, >= 2, >= 1, 0..%d)",
                        cfg->block_size, cfg->max_model_len, cfg->max_num_seqs, cfg->num_groups,
                        PG_KV_MAX_GROUPS);
    pg_kvm *m = calloc(1, sizeof *m);
    if (!m) return pg_error(PAGODA_ERR_NOMEM, "kv cache manager: out of memory");
    m->block_size = cfg->block_size;
    m->max_model_len = cfg->max_model_len;
    m->max_blocks = (cfg->max_model_len + cfg->block_size - 1) / cfg->block_size;
    m->num_tables = cfg->max_num_seqs;
    m->caching = cfg->enable_prefix_caching;
    pagoda_status st = pg_block_pool_create(cfg->num_blocks, cfg->enable_prefix_caching, &m->pool);
    if (st) goto fail;
    pg_kv_cache_spec def = {.kind = PG_KV_FULL_ATTENTION,
                            .block_size = cfg->block_size,
                            .num_layers = 1,
                            .num_kv_heads = 1,
                            .head_size = 1,
                            .dtype_bytes = 1};
    int32_t ng = cfg->num_groups ? cfg->num_groups : 1;
    for (int32_t g = 0; g < ng; g++) {
        const pg_kv_cache_spec *spec = cfg->num_groups ? &cfg->groups[g] : &def;
        if (spec->block_size != cfg->block_size) {
            st =
                pg_error(PAGODA_ERR_INVALID_ARG,
                         "kv cache manager: group %d block_size %d differs from %d (one block size "
                         "for all groups)",
                         g, spec->block_size, cfg->block_size);
            goto fail;
        }
        st = pg_kv_group_init(&m->groups[g], g, spec, m->pool, m->caching, m->num_tables,
                              m->max_blocks);
        m->num_groups = g + 1; /* release what was initialised, even on failure */
        if (st) goto fail;
    }
    for (int32_t g = 0; g < m->num_groups; g++)
        m->has_mamba |= m->groups[g].spec.kind == PG_KV_MAMBA;
    m->hit_snapshot = -1;
    if (m->has_mamba && m->caching && cfg->num_state_snapshots > 0) {
        int32_t align = cfg->state_snapshot_align > 0 ? cfg->state_snapshot_align : m->block_size;
        if (align % m->block_size) {
            st = pg_error(PAGODA_ERR_INVALID_ARG,
                          "kv cache manager: state snapshot spacing %d is not a multiple of the "
                          "block size %d",
                          align, m->block_size);
            goto fail;
        }
        m->snap_align = align / m->block_size;
        if ((st = pg_state_cache_create(cfg->num_state_snapshots, &m->sc))) goto fail;
    }
    m->free_slots = malloc((size_t)m->num_tables * sizeof *m->free_slots);
    m->hit_ids = malloc((size_t)ng * (size_t)m->max_blocks * sizeof *m->hit_ids);
    if (!m->free_slots || !m->hit_ids) {
        st = pg_error(PAGODA_ERR_NOMEM, "kv cache manager: out of memory");
        goto fail;
    }
    for (int32_t i = 0; i < m->num_tables; i++)
        m->free_slots[i] = m->num_tables - 1 - i;
    m->num_free_slots = m->num_tables;
    *out = m;
    return PAGODA_OK;
fail:
    pg_kvm_destroy(m);
    return st;
}

void pg_kvm_destroy(pg_kvm *m) {
    if (!m) return;
    for (int32_t g = 0; g < m->num_groups; g++)
        pg_kv_group_release(&m->groups[g]);
    pg_block_pool_destroy(m->pool);
    pg_state_cache_destroy(m->sc);
    free(m->free_slots);
    free(m->hit_ids);
    free(m);
}

int32_t pg_kvm_num_groups(const pg_kvm *m) {
    return m->num_groups;
}
const pg_kv_cache_spec *pg_kvm_group_spec(const pg_kvm *m, int32_t g) {
    return &m->groups[g].spec;
}
int32_t pg_kvm_block_size(const pg_kvm *m) {
    return m->block_size;
}
int32_t pg_kvm_max_blocks_per_request(const pg_kvm *m) {
    return m->max_blocks;
}
int32_t pg_kvm_num_usable_blocks(const pg_kvm *m) {
    return pg_block_pool_num_blocks(m->pool) - 1;
}
pg_block_pool *pg_kvm_pool(pg_kvm *m) {
    return m->pool;
}

int32_t pg_kvm_blocks_for_tokens(const pg_kvm *m, int32_t num_tokens) {
    int32_t total = 0;
    for (int32_t g = 0; g < m->num_groups; g++)
        total += m->groups[g].ops->num_table_blocks(&m->groups[g], num_tokens);
    return total;
}

/* A mamba group's hit: the longest L <= max_blocks, a multiple of the
 * snapshot spacing, whose state snapshot is published (none: 0). */
static int32_t state_find_cached_prefix(pg_kvm *m, const pg_block_hash *hashes,
                                        int32_t max_blocks) {
    m->hit_snapshot = -1;
    if (!m->sc) return 0;
    for (int32_t L = max_blocks / m->snap_align * m->snap_align; L > 0; L -= m->snap_align) {
        int32_t e = pg_state_cache_lookup(m->sc, hashes[L - 1]);
        if (e >= 0) {
            m->hit_snapshot = e;
            return L;
        }
    }
    return 0;
}

struct pg_state_cache *pg_kvm_state_cache(pg_kvm *m) {
    return m->sc;
}

int32_t pg_kvm_state_snapshot_align(const pg_kvm *m) {
    return m->sc ? m->snap_align * m->block_size : 0;
}

int32_t pg_kvm_find_cached_prefix(pg_kvm *m, const pg_request *req) {
    m->hit_req = req;
    m->hit_blocks = 0;
    m->hit_snapshot = -1;
    if (!m->caching || req->kv_slot >= 0 || req->num_computed_tokens != 0) return 0;
    /* never the last token: it must be computed for its logits */
    int32_t max_blocks = (req->num_tokens - 1) / m->block_size;
    if (max_blocks > req->num_block_hashes) max_blocks = req->num_block_hashes;
    /* every group answers "longest hit <= cap"; lower the cap until all agree
     * (terminates: the cap only shrinks), so the last answer of every group is
     * for the final length (vLLM HybridKVCacheCoordinator) */
    bool changed = true;
    while (changed && max_blocks > 0) {
        changed = false;
        for (int32_t g = 0; g < m->num_groups && max_blocks > 0; g++) {
            pg_kv_group *grp = &m->groups[g];
            int32_t n = grp->spec.kind == PG_KV_MAMBA
                            ? state_find_cached_prefix(m, req->block_hashes, max_blocks)
                            : grp->ops->find_cached_prefix(grp, req->block_hashes, max_blocks,
                                                           m->hit_ids + (size_t)g * m->max_blocks);
            if (n < max_blocks) {
                max_blocks = n;
                changed = m->num_groups > 1;
            }
        }
    }
    m->hit_blocks = max_blocks;
    return max_blocks * m->block_size;
}

pagoda_status pg_kvm_allocate_slots(pg_kvm *m, pg_request *req, int32_t num_new_tokens,
                                    int32_t num_hit_tokens) {
    int32_t bs = m->block_size;
    int32_t hits = 0;
    if (num_hit_tokens > 0) {
        if (m->hit_req != req || num_hit_tokens != m->hit_blocks * bs || req->kv_slot >= 0)
            return pg_error(PAGODA_ERR_INVALID_ARG,
                            "kv cache manager: request %llu: %d hit tokens do not match the last "
                            "prefix lookup",
                            (unsigned long long)req->id, num_hit_tokens);
        hits = m->hit_blocks;
    }
    if (num_new_tokens < 0) num_new_tokens = 0;
    int64_t total = (int64_t)req->num_computed_tokens + num_hit_tokens + num_new_tokens;
    if (total > m->max_model_len || total > (int64_t)req->num_tokens + req->num_spec_tokens)
        return pg_error(PAGODA_ERR_INVALID_ARG,
                        "kv cache manager: request %llu: %lld tokens exceed its %d tokens or "
                        "max_model_len %d",
                        (unsigned long long)req->id, (long long)total, req->num_tokens,
                        m->max_model_len);
    bool admission = req->kv_slot < 0;
    if (admission && m->num_free_slots == 0)
        return pg_error(PAGODA_ERR_INTERNAL,
                        "kv cache manager: more than max_num_seqs %d requests hold blocks",
                        m->num_tables);

    /* blocks outside a sliding window go back first (vLLM remove_skipped_blocks) */
    if (!admission)
        for (int32_t g = 0; g < m->num_groups; g++)
            if (m->groups[g].ops->remove_skipped)
                m->groups[g].ops->remove_skipped(&m->groups[g], &m->groups[g].tables[req->kv_slot],
                                                 req->num_computed_tokens);

    /* count what we need: new blocks, and hit blocks that sit in the free queue
     * (touching them takes them out of it) */
    static const pg_kv_block_table EMPTY = {0};
    int64_t need = 0;
    int32_t evictable_hits = 0;
    for (int32_t g = 0; g < m->num_groups; g++) {
        const pg_kv_block_table *t = admission ? &EMPTY : &m->groups[g].tables[req->kv_slot];
        /* a mamba group's hit is a state snapshot, not table entries */
        const bool mamba = m->groups[g].spec.kind == PG_KV_MAMBA;
        need += pg_kv_group_blocks_needed(&m->groups[g], t, (int32_t)total, mamba ? 0 : hits);
        const int32_t *ids = m->hit_ids + (size_t)g * m->max_blocks;
        for (int32_t i = 0; i < (mamba ? 0 : hits); i++)
            if (pg_block_pool_ref_cnt(m->pool, ids[i]) == 0) evictable_hits++;
    }
    if (need > pg_block_pool_num_free(m->pool) - evictable_hits) return PAGODA_ERR_LIMIT;

    if (admission) {
        req->kv_slot = m->free_slots[--m->num_free_slots];
        if (m->caching) {
            m->queries += (uint64_t)req->num_tokens;
            m->hits += (uint64_t)num_hit_tokens;
        }
    }
    /* first take every group's hits out of the free queue, THEN allocate:
     * otherwise one group's new blocks could be popped from under another
     * group's hits (regression: test_random_stress_hybrid_groups) */
    for (int32_t g = 0; g < m->num_groups; g++) {
        pg_kv_block_table *t = &m->groups[g].tables[req->kv_slot];
        if (admission) t->n = t->num_cached = 0;
        if (hits && m->groups[g].spec.kind == PG_KV_MAMBA) {
            req->state_restore = m->hit_snapshot; /* restored by the runner */
            pg_state_cache_pin(m->sc, m->hit_snapshot);
            pg_state_cache_count_restore(m->sc);
        } else if (hits) {
            const int32_t *ids = m->hit_ids + (size_t)g * m->max_blocks;
            pg_block_pool_touch(m->pool, ids, hits);
            memcpy(t->ids + t->n, ids, (size_t)hits * sizeof *ids);
            t->n += hits;
            t->num_cached = t->n;
        }
    }
    int32_t num_full = (int32_t)total / bs;
    if (num_full > req->num_block_hashes) num_full = req->num_block_hashes;
    for (int32_t g = 0; g < m->num_groups; g++) {
        pg_kv_group *grp = &m->groups[g];
        pg_kv_block_table *t = &grp->tables[req->kv_slot];
        int32_t n_new = pg_kv_group_blocks_needed(grp, t, (int32_t)total, 0);
        pagoda_status st = pg_kv_group_append_new(grp, t, n_new);
        if (st) return st; /* cannot happen after the count above: a bug */
        pg_kv_group_cache_full(grp, t, req->block_hashes, num_full);
    }
    if (hits) m->hit_req = NULL;
    return PAGODA_OK;
}

void pg_kvm_truncate(pg_kvm *m, pg_request *req, int32_t num_tokens) {
    if (req->kv_slot < 0) return;
    for (int32_t g = 0; g < m->num_groups; g++) {
        pg_kv_group *grp = &m->groups[g];
        if (grp->spec.kind != PG_KV_FULL_ATTENTION && grp->spec.kind != PG_KV_SLIDING_WINDOW)
            continue;
        pg_kv_group_truncate(grp, &grp->tables[req->kv_slot],
                             grp->ops->num_table_blocks(grp, num_tokens));
    }
}

void pg_kvm_free(pg_kvm *m, pg_request *req) {
    if (m->hit_req == req) m->hit_req = NULL;
    if (req->kv_slot < 0) return;
    for (int32_t g = 0; g < m->num_groups; g++)
        pg_kv_group_free(&m->groups[g], &m->groups[g].tables[req->kv_slot]);
    m->free_slots[m->num_free_slots++] = req->kv_slot;
    req->kv_slot = -1;
}

const int32_t *pg_kvm_block_table(const pg_kvm *m, int32_t g, const pg_request *req, int32_t *n) {
    if (g < 0 || g >= m->num_groups || req->kv_slot < 0) {
        *n = 0;
        return NULL;
    }
    const pg_kv_block_table *t = &m->groups[g].tables[req->kv_slot];
    *n = t->n;
    return t->ids;
}

pagoda_status pg_kvm_reset_prefix_cache(pg_kvm *m) {
    if (m->sc) pg_state_cache_reset(m->sc);
    return pg_block_pool_reset_cache(m->pool);
}

void pg_kvm_get_stats(const pg_kvm *m, pg_kvm_stats *out) {
    out->prefix_queries_tokens = m->queries;
    out->prefix_hits_tokens = m->hits;
    out->evictions = pg_block_pool_num_evictions(m->pool);
    out->num_free_blocks = pg_block_pool_num_free(m->pool);
    out->num_cached_blocks = pg_block_pool_num_cached(m->pool);
    out->usage = pg_block_pool_usage(m->pool);
}

pagoda_status pg_kvm_check(const pg_kvm *m) {
    pagoda_status st = pg_block_pool_check(m->pool);
    if (st) return st;
    int32_t nb = pg_block_pool_num_blocks(m->pool);
    int32_t *refs = calloc((size_t)nb, sizeof *refs);
    uint8_t *slot_free = calloc((size_t)m->num_tables, 1);
    if (!refs || !slot_free) {
        free(refs);
        free(slot_free);
        return pg_error(PAGODA_ERR_NOMEM, "kv cache manager check: out of memory");
    }
    for (int32_t i = 0; i < m->num_free_slots; i++)
        slot_free[m->free_slots[i]] = 1;
    for (int32_t g = 0; g < m->num_groups && !st; g++)
        for (int32_t s = 0; s < m->num_tables && !st; s++) {
            const pg_kv_block_table *t = &m->groups[g].tables[s];
            if (slot_free[s]) continue;
            if (t->n > m->groups[g].max_blocks || t->num_cached > t->n)
                st = pg_error(PAGODA_ERR_INTERNAL, "kv cache manager: table %d/%d: n %d cached %d",
                              g, s, t->n, t->num_cached);
            for (int32_t i = 0; i < t->n && !st; i++) {
                int32_t id = t->ids[i];
                if (id < 0 || id >= nb)
                    st = pg_error(PAGODA_ERR_INTERNAL,
                                  "kv cache manager: table %d/%d has bad id %d", g, s, id);
                else if (id != PG_NULL_BLOCK)
                    refs[id]++;
            }
        }
    for (int32_t id = 1; id < nb && !st; id++)
        if (refs[id] != pg_block_pool_ref_cnt(m->pool, id))
            st = pg_error(PAGODA_ERR_INTERNAL,
                          "kv cache manager: block %d has ref_cnt %d but %d table entries", id,
                          pg_block_pool_ref_cnt(m->pool, id), refs[id]);
    free(refs);
    free(slot_free);
    return st;
}
