/* Hash maps for vocab and merge lookups (see tok_map.h). */
#include "tokenizer/tok_map.h"

#include <stdlib.h>
#include <string.h>

static uint64_t fnv1a(const char *s, size_t n) {
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) {
        h ^= (uint8_t)s[i];
        h *= 1099511628211ull;
    }
    return h ^ (h >> 29);
}

static size_t pow2_at_least(size_t n) {
    size_t c = 16;
    while (c < n) c <<= 1;
    return c;
}

pagoda_status pg_strmap_init(pg_strmap *m, size_t expected) {
    memset(m, 0, sizeof *m);
    m->cap = pow2_at_least(expected * 2 + 1);
    m->slots = calloc(m->cap, sizeof *m->slots);
    m->hashes = calloc(m->cap, sizeof *m->hashes);
    m->keys_cap = expected ? expected : 16;
    m->keys = malloc(m->keys_cap * sizeof *m->keys);
    m->key_lens = malloc(m->keys_cap * sizeof *m->key_lens);
    m->vals = malloc(m->keys_cap * sizeof *m->vals);
    if (!m->slots || !m->hashes || !m->keys || !m->key_lens || !m->vals) {
        pg_strmap_free(m);
        return pg_error(PAGODA_ERR_NOMEM, "tokenizer: out of memory (hash map)");
    }
    return PAGODA_OK;
}

void pg_strmap_free(pg_strmap *m) {
    free(m->slots);
    free(m->hashes);
    free(m->keys);
    free(m->key_lens);
    free(m->vals);
    memset(m, 0, sizeof *m);
}

static pagoda_status strmap_grow(pg_strmap *m) {
    size_t ncap = m->cap * 2;
    uint32_t *slots = calloc(ncap, sizeof *slots);
    uint32_t *hashes = calloc(ncap, sizeof *hashes);
    if (!slots || !hashes) {
        free(slots);
        free(hashes);
        return pg_error(PAGODA_ERR_NOMEM, "tokenizer: out of memory (hash map)");
    }
    for (size_t i = 0; i < m->cap; i++) {
        if (!m->slots[i]) continue;
        uint32_t k = m->slots[i] - 1;
        uint64_t h = fnv1a(m->keys[k], m->key_lens[k]);
        size_t j = (size_t)h & (ncap - 1);
        while (slots[j]) j = (j + 1) & (ncap - 1);
        slots[j] = m->slots[i];
        hashes[j] = (uint32_t)(h >> 32);
    }
    free(m->slots);
    free(m->hashes);
    m->slots = slots;
    m->hashes = hashes;
    m->cap = ncap;
    return PAGODA_OK;
}

pagoda_status pg_strmap_put(pg_strmap *m, const char *key, size_t len, int32_t val) {
    uint64_t h = fnv1a(key, len);
    size_t mask = m->cap - 1, i = (size_t)h & mask;
    uint32_t h32 = (uint32_t)(h >> 32);
    while (m->slots[i]) {
        uint32_t k = m->slots[i] - 1;
        if (m->hashes[i] == h32 && m->key_lens[k] == len && !memcmp(m->keys[k], key, len)) {
            m->vals[k] = val;
            return PAGODA_OK;
        }
        i = (i + 1) & mask;
    }
    if (m->count == m->keys_cap) {
        size_t nc = m->keys_cap * 2;
        const char **nk = realloc(m->keys, nc * sizeof *nk);
        if (nk) m->keys = nk;
        uint32_t *nl = realloc(m->key_lens, nc * sizeof *nl);
        if (nl) m->key_lens = nl;
        int32_t *nv = realloc(m->vals, nc * sizeof *nv);
        if (nv) m->vals = nv;
        if (!nk || !nl || !nv) return pg_error(PAGODA_ERR_NOMEM, "tokenizer: out of memory");
        m->keys_cap = nc;
    }
    m->keys[m->count] = key;
    m->key_lens[m->count] = (uint32_t)len;
    m->vals[m->count] = val;
    m->slots[i] = (uint32_t)(++m->count);
    m->hashes[i] = h32;
    if (m->count * 2 > m->cap) return strmap_grow(m);
    return PAGODA_OK;
}

int32_t pg_strmap_get(const pg_strmap *m, const char *key, size_t len) {
    if (!m->cap) return -1;
    uint64_t h = fnv1a(key, len);
    size_t mask = m->cap - 1, i = (size_t)h & mask;
    uint32_t h32 = (uint32_t)(h >> 32);
    while (m->slots[i]) {
        uint32_t k = m->slots[i] - 1;
        if (m->hashes[i] == h32 && m->key_lens[k] == len && !memcmp(m->keys[k], key, len))
            return m->vals[k];
        i = (i + 1) & mask;
    }
    return -1;
}

pagoda_status pg_pairmap_init(pg_pairmap *m, size_t expected) {
    memset(m, 0, sizeof *m);
    m->cap = pow2_at_least(expected * 2 + 1);
    m->slots = calloc(m->cap, sizeof *m->slots);
    if (!m->slots) {
        pg_pairmap_free(m);
        return pg_error(PAGODA_ERR_NOMEM, "tokenizer: out of memory (merge map)");
    }
    return PAGODA_OK;
}

void pg_pairmap_free(pg_pairmap *m) {
    free(m->slots);
    memset(m, 0, sizeof *m);
}

static void pair_insert_raw(pg_pair_slot *slots, size_t cap, uint64_t k, uint64_t v) {
    size_t mask = cap - 1, i = (size_t)pg_pairmap_mix(k) & mask;
    while (slots[i].key) i = (i + 1) & mask;
    slots[i].key = k;
    slots[i].val = v;
}

pagoda_status pg_pairmap_put(pg_pairmap *m, int32_t left, int32_t right, uint32_t rank,
                             int32_t merged) {
    uint32_t r0;
    int32_t m0;
    if (pg_pairmap_get(m, left, right, &r0, &m0)) return PAGODA_OK;
    if ((m->count + 1) * 2 > m->cap) {
        size_t ncap = m->cap * 2;
        pg_pair_slot *ns = calloc(ncap, sizeof *ns);
        if (!ns) return pg_error(PAGODA_ERR_NOMEM, "tokenizer: out of memory (merge map)");
        for (size_t i = 0; i < m->cap; i++)
            if (m->slots[i].key) pair_insert_raw(ns, ncap, m->slots[i].key, m->slots[i].val);
        free(m->slots);
        m->slots = ns;
        m->cap = ncap;
    }
    uint64_t k = (((uint64_t)(uint32_t)left << 32) | (uint32_t)right) + 1;
    pair_insert_raw(m->slots, m->cap, k, ((uint64_t)rank << 32) | (uint32_t)merged);
    m->count++;
    return PAGODA_OK;
}
