/* KV block pool: ref counts, doubly linked LRU free queue over block ids,
 * open-addressing (linear probing, backward-shift deletion) hash map from
 * (block hash, group) to block id. See block_pool.h. */
#include "engine/block_pool.h"

#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "engine/rng.h"

typedef struct map_entry {
    pg_block_hash hash;
    int32_t group;
    int32_t block; /* -1: empty */
} map_entry;

struct pg_block_pool {
    int32_t num_blocks;
    bool caching;
    int32_t num_free;
    int32_t num_cached;
    uint64_t evictions;
    int32_t *ref;         /* [num_blocks] */
    int32_t *prev, *next; /* [num_blocks + 1]; index num_blocks is the queue sentinel */
    uint8_t *cached;      /* [num_blocks] 1 if hash[] / hash_group[] are valid */
    pg_block_hash *hash;  /* [num_blocks] */
    int32_t *hash_group;  /* [num_blocks] */
    map_entry *map;       /* [map_cap], map_cap a power of two >= 2 * num_blocks */
    uint32_t map_mask;
    uint32_t map_shift; /* 64 - log2(map_cap) */
    uint64_t map_key;   /* random odd multiplier of home() */
};

#define SENT(p) ((p)->num_blocks)

/* Home slot of (hash, group): multiply-shift with a random odd key per pool
 * (Dietzfelbinger et al. 1997, "A reliable randomized algorithm for the
 * closest-pair problem": any two distinct 64-bit keys share a slot with
 * probability <= 2 / map_cap). Block hashes are computable by clients, so a
 * fixed slot function would let a client pick prompts whose blocks pile up
 * in one probe run; with the secret key it cannot aim. */
static inline uint32_t home(const pg_block_pool *p, pg_block_hash h, int32_t group) {
    uint64_t x = h.w[0] ^ ((uint64_t)(uint32_t)group * 0x9E3779B97F4A7C15ULL);
    return (uint32_t)((x * p->map_key) >> p->map_shift);
}

/* ---- free queue ---- */

static void q_remove(pg_block_pool *p, int32_t id) {
    p->next[p->prev[id]] = p->next[id];
    p->prev[p->next[id]] = p->prev[id];
    p->prev[id] = p->next[id] = -1;
    p->num_free--;
}

static void q_push_front(pg_block_pool *p, int32_t id) {
    int32_t s = SENT(p), first = p->next[s];
    p->prev[first] = id;
    p->next[id] = first;
    p->prev[id] = s;
    p->next[s] = id;
    p->num_free++;
}

static void q_append(pg_block_pool *p, int32_t id) {
    int32_t s = SENT(p), last = p->prev[s];
    p->next[last] = id;
    p->prev[id] = last;
    p->next[id] = s;
    p->prev[s] = id;
    p->num_free++;
}

/* ---- hash map ---- */

static int32_t map_find(const pg_block_pool *p, pg_block_hash h, int32_t group) {
    for (uint32_t i = home(p, h, group);; i = (i + 1) & p->map_mask) {
        const map_entry *e = &p->map[i];
        if (e->block < 0) return -1;
        if (e->group == group && pg_block_hash_eq(e->hash, h)) return (int32_t)i;
    }
}

static void map_erase_at(pg_block_pool *p, uint32_t i) {
    uint32_t mask = p->map_mask;
    p->map[i].block = -1;
    for (uint32_t j = (i + 1) & mask; p->map[j].block >= 0; j = (j + 1) & mask) {
        uint32_t k = home(p, p->map[j].hash, p->map[j].group);
        /* entry j may move to the hole i if its home k is not in (i, j] cyclically */
        bool k_in = (i <= j) ? (k > i && k <= j) : (k > i || k <= j);
        if (!k_in) {
            p->map[i] = p->map[j];
            p->map[j].block = -1;
            i = j;
        }
    }
}

static void uncache(pg_block_pool *p, int32_t id) {
    int32_t at = map_find(p, p->hash[id], p->hash_group[id]);
    if (at >= 0 && p->map[at].block == id)
        map_erase_at(p, (uint32_t)at);
    else
        PG_ERROR("block pool: cached block %d missing from the hash map", id);
    p->cached[id] = 0;
    p->num_cached--;
}

/* ---- public ---- */

pagoda_status pg_block_pool_create(int32_t num_blocks, bool enable_caching, pg_block_pool **out) {
    *out = NULL;
    if (num_blocks < 2 || num_blocks > (1 << 30))
        return pg_error(PAGODA_ERR_INVALID_ARG,
                        "block pool: %d blocks; need 2..2^30 (block 0 is the null block)",
                        num_blocks);
    pg_block_pool *p = calloc(1, sizeof *p);
    if (!p) return pg_error(PAGODA_ERR_NOMEM, "block pool: out of memory");
    size_t n = (size_t)num_blocks;
    uint32_t cap = 16;
    while (cap < 2 * n)
        cap <<= 1;
    p->num_blocks = num_blocks;
    p->caching = enable_caching;
    p->ref = calloc(n, sizeof *p->ref);
    p->prev = malloc((n + 1) * sizeof *p->prev);
    p->next = malloc((n + 1) * sizeof *p->next);
    p->cached = calloc(n, 1);
    p->hash = calloc(n, sizeof *p->hash);
    p->hash_group = calloc(n, sizeof *p->hash_group);
    p->map = malloc(cap * sizeof *p->map);
    if (!p->ref || !p->prev || !p->next || !p->cached || !p->hash || !p->hash_group || !p->map) {
        pg_block_pool_destroy(p);
        return pg_error(PAGODA_ERR_NOMEM, "block pool: out of memory for %d blocks", num_blocks);
    }
    p->map_mask = cap - 1;
    p->map_shift = 64;
    for (uint32_t c = cap; c > 1; c >>= 1)
        p->map_shift--;
    p->map_key = pg_rng_random_seed() | 1;
    for (uint32_t i = 0; i < cap; i++)
        p->map[i].block = -1;
    int32_t s = SENT(p);
    p->prev[s] = p->next[s] = s;
    p->prev[PG_NULL_BLOCK] = p->next[PG_NULL_BLOCK] = -1;
    p->ref[PG_NULL_BLOCK] = 1; /* never free */
    for (int32_t i = 1; i < num_blocks; i++)
        q_append(p, i);
    *out = p;
    return PAGODA_OK;
}

void pg_block_pool_destroy(pg_block_pool *p) {
    if (!p) return;
    free(p->ref);
    free(p->prev);
    free(p->next);
    free(p->cached);
    free(p->hash);
    free(p->hash_group);
    free(p->map);
    free(p);
}

int32_t pg_block_pool_num_blocks(const pg_block_pool *p) {
    return p->num_blocks;
}
int32_t pg_block_pool_num_free(const pg_block_pool *p) {
    return p->num_free;
}
double pg_block_pool_usage(const pg_block_pool *p) {
    int32_t usable = p->num_blocks - 1;
    return usable > 0 ? (double)(usable - p->num_free) / usable : 0.0;
}
uint64_t pg_block_pool_num_evictions(const pg_block_pool *p) {
    return p->evictions;
}
int32_t pg_block_pool_num_cached(const pg_block_pool *p) {
    return p->num_cached;
}

pagoda_status pg_block_pool_alloc(pg_block_pool *p, int32_t n, int32_t *out) {
    if (n < 0 || n > p->num_free)
        return pg_error(PAGODA_ERR_LIMIT, "block pool: %d blocks requested, %d free", n,
                        p->num_free);
    for (int32_t i = 0; i < n; i++) {
        int32_t id = p->next[SENT(p)];
        q_remove(p, id);
        if (p->cached[id]) {
            uncache(p, id);
            p->evictions++;
        }
        p->ref[id] = 1;
        out[i] = id;
    }
    return PAGODA_OK;
}

void pg_block_pool_touch(pg_block_pool *p, const int32_t *ids, int32_t n) {
    for (int32_t i = 0; i < n; i++) {
        int32_t id = ids[i];
        if (id == PG_NULL_BLOCK) continue;
        if (p->ref[id] == 0) q_remove(p, id);
        p->ref[id]++;
    }
}

void pg_block_pool_free(pg_block_pool *p, const int32_t *ids, int32_t n) {
    for (int32_t i = 0; i < n; i++) {
        int32_t id = ids[i];
        if (id == PG_NULL_BLOCK) continue;
        if (id < 0 || id >= p->num_blocks || p->ref[id] <= 0) {
            PG_ERROR("block pool: free of block %d that is not in use (bug)", id);
            continue;
        }
        if (--p->ref[id] == 0) {
            if (p->cached[id])
                q_append(p, id);
            else
                q_push_front(p, id); /* nothing to keep: reuse it first */
        }
    }
}

int32_t pg_block_pool_lookup(const pg_block_pool *p, pg_block_hash hash, int32_t group) {
    if (!p->caching) return -1;
    int32_t at = map_find(p, hash, group);
    return at < 0 ? -1 : p->map[at].block;
}

bool pg_block_pool_cache_block(pg_block_pool *p, int32_t id, pg_block_hash hash, int32_t group) {
    if (!p->caching || id <= PG_NULL_BLOCK || id >= p->num_blocks || p->cached[id]) return false;
    uint32_t i = home(p, hash, group);
    for (;; i = (i + 1) & p->map_mask) {
        map_entry *e = &p->map[i];
        if (e->block < 0) break;
        if (e->group == group && pg_block_hash_eq(e->hash, hash)) return false; /* duplicate */
    }
    p->map[i] = (map_entry){hash, group, id};
    p->cached[id] = 1;
    p->hash[id] = hash;
    p->hash_group[id] = group;
    p->num_cached++;
    return true;
}

pagoda_status pg_block_pool_reset_cache(pg_block_pool *p) {
    int32_t used = p->num_blocks - 1 - p->num_free;
    if (used > 0)
        return pg_error(PAGODA_ERR_INVALID_ARG,
                        "block pool: cannot reset the prefix cache while %d blocks are in use",
                        used);
    for (uint32_t i = 0; i <= p->map_mask; i++)
        p->map[i].block = -1;
    memset(p->cached, 0, (size_t)p->num_blocks);
    p->num_cached = 0;
    return PAGODA_OK;
}

int32_t pg_block_pool_ref_cnt(const pg_block_pool *p, int32_t id) {
    return (id >= 0 && id < p->num_blocks) ? p->ref[id] : -1;
}

bool pg_block_pool_is_cached(const pg_block_pool *p, int32_t id) {
    return id >= 0 && id < p->num_blocks && p->cached[id];
}

int32_t pg_block_pool_free_queue(const pg_block_pool *p, int32_t *ids, int32_t max) {
    int32_t k = 0;
    for (int32_t id = p->next[SENT(p)]; id != SENT(p); id = p->next[id]) {
        if (k < max) ids[k] = id;
        k++;
    }
    return k;
}

pagoda_status pg_block_pool_check(const pg_block_pool *p) {
    int32_t s = SENT(p), count = 0, prev = s;
    if (p->ref[PG_NULL_BLOCK] != 1 || p->cached[PG_NULL_BLOCK])
        return pg_error(PAGODA_ERR_INTERNAL, "block pool: null block modified");
    for (int32_t id = p->next[s]; id != s; id = p->next[id]) {
        if (id <= PG_NULL_BLOCK || id >= p->num_blocks)
            return pg_error(PAGODA_ERR_INTERNAL, "block pool: bad id %d in free queue", id);
        if (p->prev[id] != prev)
            return pg_error(PAGODA_ERR_INTERNAL, "block pool: broken link at block %d", id);
        if (p->ref[id] != 0)
            return pg_error(PAGODA_ERR_INTERNAL, "block pool: queued block %d has ref_cnt %d", id,
                            p->ref[id]);
        if (++count > p->num_blocks)
            return pg_error(PAGODA_ERR_INTERNAL, "block pool: free queue has a cycle");
        prev = id;
    }
    if (p->prev[s] != prev) return pg_error(PAGODA_ERR_INTERNAL, "block pool: broken tail link");
    if (count != p->num_free)
        return pg_error(PAGODA_ERR_INTERNAL, "block pool: queue holds %d blocks, num_free %d",
                        count, p->num_free);
    int32_t zero = 0, cached = 0;
    for (int32_t id = 1; id < p->num_blocks; id++) {
        if (p->ref[id] < 0)
            return pg_error(PAGODA_ERR_INTERNAL, "block pool: block %d ref_cnt %d", id, p->ref[id]);
        if (p->ref[id] == 0) zero++;
        if (p->cached[id]) {
            cached++;
            int32_t at = map_find(p, p->hash[id], p->hash_group[id]);
            if (at < 0 || p->map[at].block != id)
                return pg_error(PAGODA_ERR_INTERNAL, "block pool: cached block %d not in hash map",
                                id);
        }
    }
    if (zero != p->num_free)
        return pg_error(PAGODA_ERR_INTERNAL, "block pool: %d blocks with ref_cnt 0 but %d queued",
                        zero, p->num_free);
    int32_t entries = 0;
    for (uint32_t i = 0; i <= p->map_mask; i++) {
        int32_t b = p->map[i].block;
        if (b < 0) continue;
        entries++;
        if (b >= p->num_blocks || !p->cached[b])
            return pg_error(PAGODA_ERR_INTERNAL, "block pool: map entry -> uncached block %d", b);
    }
    if (entries != cached || cached != p->num_cached)
        return pg_error(PAGODA_ERR_INTERNAL,
                        "block pool: %d map entries, %d cached blocks, count %d", entries, cached,
                        p->num_cached);
    return PAGODA_OK;
}
