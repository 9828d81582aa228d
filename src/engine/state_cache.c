/* Recurrent-state snapshot cache (see state_cache.h): entries in an LRU list
 * plus an open-addressing hash table (linear probing, tombstones) from block
 * hash to published entry. */
#include "engine/state_cache.h"

#include <stdlib.h>

#include "engine/rng.h"

enum { E_FREE = 0, E_WRITING, E_PUBLISHED };

typedef struct entry {
    pg_block_hash h;
    int32_t pins;
    uint8_t state;
    int32_t prev, next; /* LRU list of published entries (head = least recent) */
} entry;

struct pg_state_cache {
    int32_t n;
    entry *e;
    int32_t *free_list;
    int32_t n_free;
    int32_t lru_head, lru_tail;
    int32_t *table; /* [cap]: entry index, -1 empty, -2 tombstone */
    int32_t cap;    /* power of two >= 2n */
    int32_t published;
    int32_t tombstones;
    uint64_t snapshots, restores, evictions;
    uint32_t shift; /* 64 - log2(cap) */
    uint64_t key;   /* random odd multiplier (see slot_of) */
};

/* Multiply-shift with a random odd key, as block_pool.c's home(): clients
 * can compute block hashes, so the slot function is keyed. */
static uint32_t slot_of(const pg_state_cache *c, pg_block_hash h) {
    return (uint32_t)((h.w[0] * c->key) >> c->shift);
}

pagoda_status pg_state_cache_create(int32_t n_entries, pg_state_cache **out) {
    *out = NULL;
    if (n_entries < 1 || n_entries > (1 << 24))
        return pg_error(PAGODA_ERR_INVALID_ARG, "state cache: %d entries (need 1..2^24)",
                        n_entries);
    pg_state_cache *c = calloc(1, sizeof *c);
    if (!c) return pg_error(PAGODA_ERR_NOMEM, "state cache: out of memory");
    c->n = n_entries;
    c->cap = 4;
    while (c->cap < 2 * n_entries)
        c->cap *= 2;
    c->shift = 64;
    for (int32_t k = c->cap; k > 1; k >>= 1)
        c->shift--;
    c->key = pg_rng_random_seed() | 1;
    c->e = calloc((size_t)n_entries, sizeof *c->e);
    c->free_list = malloc((size_t)n_entries * sizeof *c->free_list);
    c->table = malloc((size_t)c->cap * sizeof *c->table);
    if (!c->e || !c->free_list || !c->table) {
        pg_state_cache_destroy(c);
        return pg_error(PAGODA_ERR_NOMEM, "state cache: out of memory");
    }
    for (int32_t i = 0; i < c->cap; i++)
        c->table[i] = -1;
    for (int32_t i = 0; i < n_entries; i++)
        c->free_list[i] = n_entries - 1 - i;
    c->n_free = n_entries;
    c->lru_head = c->lru_tail = -1;
    *out = c;
    return PAGODA_OK;
}

void pg_state_cache_destroy(pg_state_cache *c) {
    if (!c) return;
    free(c->e);
    free(c->free_list);
    free(c->table);
    free(c);
}

int32_t pg_state_cache_capacity(const pg_state_cache *c) {
    return c->n;
}

int32_t pg_state_cache_lookup(const pg_state_cache *c, pg_block_hash h) {
    for (uint32_t s = slot_of(c, h), k = 0; k < (uint32_t)c->cap; k++, s = (s + 1) & (c->cap - 1)) {
        int32_t i = c->table[s];
        if (i == -1) return -1;
        if (i >= 0 && pg_block_hash_eq(c->e[i].h, h)) return i;
    }
    return -1;
}

static void lru_unlink(pg_state_cache *c, int32_t i) {
    entry *x = &c->e[i];
    if (x->prev >= 0)
        c->e[x->prev].next = x->next;
    else
        c->lru_head = x->next;
    if (x->next >= 0)
        c->e[x->next].prev = x->prev;
    else
        c->lru_tail = x->prev;
    x->prev = x->next = -1;
}

static void lru_push_back(pg_state_cache *c, int32_t i) {
    entry *x = &c->e[i];
    x->next = -1;
    x->prev = c->lru_tail;
    if (c->lru_tail >= 0)
        c->e[c->lru_tail].next = i;
    else
        c->lru_head = i;
    c->lru_tail = i;
}

static void table_remove(pg_state_cache *c, int32_t i) {
    for (uint32_t s = slot_of(c, c->e[i].h), k = 0; k < (uint32_t)c->cap;
         k++, s = (s + 1) & (c->cap - 1)) {
        if (c->table[s] == -1) return;
        if (c->table[s] == i) {
            c->table[s] = -2;
            c->tombstones++;
            break;
        }
    }
    if (c->tombstones > c->cap / 4) { /* rebuild: misses would probe too far */
        for (int32_t j = 0; j < c->cap; j++)
            c->table[j] = -1;
        c->tombstones = 0;
        for (int32_t j = 0; j < c->n; j++) {
            if (c->e[j].state != E_PUBLISHED || j == i) continue;
            uint32_t t = slot_of(c, c->e[j].h);
            while (c->table[t] >= 0)
                t = (t + 1) & (uint32_t)(c->cap - 1);
            c->table[t] = j;
        }
    }
}

/* Unpublish published entry i (out of the table and the LRU list), to free. */
static void unpublish(pg_state_cache *c, int32_t i) {
    table_remove(c, i);
    lru_unlink(c, i);
    c->e[i].state = E_FREE;
    c->published--;
}

int32_t pg_state_cache_acquire(pg_state_cache *c) {
    int32_t i = -1;
    if (c->n_free > 0) {
        i = c->free_list[--c->n_free];
    } else {
        for (int32_t j = c->lru_head; j >= 0; j = c->e[j].next)
            if (c->e[j].pins == 0) {
                i = j;
                break;
            }
        if (i < 0) return -1;
        unpublish(c, i);
        c->evictions++;
    }
    c->e[i].state = E_WRITING;
    c->e[i].pins = 1;
    c->e[i].prev = c->e[i].next = -1;
    return i;
}

static void release_free(pg_state_cache *c, int32_t i) {
    c->e[i].state = E_FREE;
    c->e[i].pins = 0;
    c->free_list[c->n_free++] = i;
}

void pg_state_cache_publish(pg_state_cache *c, int32_t i, pg_block_hash h) {
    if (i < 0 || i >= c->n || c->e[i].state != E_WRITING) return;
    if (pg_state_cache_lookup(c, h) >= 0) {
        release_free(c, i);
        return;
    }
    /* the table has >= 2n slots and at most n live entries: a slot is free */
    uint32_t s = slot_of(c, h);
    while (c->table[s] >= 0)
        s = (s + 1) & (uint32_t)(c->cap - 1);
    if (c->table[s] == -2) c->tombstones--;
    c->table[s] = i;
    c->e[i].h = h;
    c->e[i].state = E_PUBLISHED;
    c->e[i].pins = 0;
    lru_push_back(c, i);
    c->published++;
    c->snapshots++;
}

void pg_state_cache_pin(pg_state_cache *c, int32_t i) {
    if (i < 0 || i >= c->n || c->e[i].state != E_PUBLISHED) return;
    c->e[i].pins++;
    lru_unlink(c, i);
    lru_push_back(c, i);
}

void pg_state_cache_unpin(pg_state_cache *c, int32_t i) {
    if (i < 0 || i >= c->n || c->e[i].pins <= 0) return;
    c->e[i].pins--;
}

void pg_state_cache_drop(pg_state_cache *c, int32_t i) {
    if (i < 0 || i >= c->n || c->e[i].state != E_PUBLISHED || c->e[i].pins > 0) return;
    unpublish(c, i);
    release_free(c, i);
}

void pg_state_cache_reset(pg_state_cache *c) {
    for (int32_t i = 0; i < c->n; i++)
        if (c->e[i].state == E_PUBLISHED && c->e[i].pins == 0) {
            unpublish(c, i);
            release_free(c, i);
        }
}

void pg_state_cache_count_restore(pg_state_cache *c) {
    c->restores++;
}

void pg_state_cache_get_stats(const pg_state_cache *c, pg_state_cache_stats *out) {
    out->num_entries = c->n;
    out->num_published = c->published;
    out->snapshots = c->snapshots;
    out->restores = c->restores;
    out->evictions = c->evictions;
}
