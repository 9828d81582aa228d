/* Open-addressing hash maps used by the tokenizers:
 *   pg_strmap: byte string -> int32 (vocab text -> token id)
 *   pg_pairmap: (int32 left, int32 right) -> (uint32 rank, int32 merged id)
 * Both are built once at load and only read afterwards (thread-safe reads).
 * Hash: 64-bit FNV-1a for strings, a multiplicative mix for pairs. */
#ifndef PAGODA_TOKENIZER_TOK_MAP_H
#define PAGODA_TOKENIZER_TOK_MAP_H

#include <stddef.h>
#include <stdint.h>

#include "base/status.h"

typedef struct pg_strmap {
    /* slots: index into keys (+1), 0 = empty */
    uint32_t *slots;
    uint32_t *hashes; /* low 32 bits of each slot's hash, for fast reject */
    size_t cap;       /* power of two */
    size_t count;
    const char **keys; /* borrowed pointers, owned by the caller */
    uint32_t *key_lens;
    int32_t *vals;
    size_t keys_cap;
} pg_strmap;

pagoda_status pg_strmap_init(pg_strmap *m, size_t expected);
void pg_strmap_free(pg_strmap *m);
/* Insert or overwrite. `key` must outlive the map (not copied). */
pagoda_status pg_strmap_put(pg_strmap *m, const char *key, size_t len, int32_t val);
/* Value for key, or -1 if absent. */
int32_t pg_strmap_get(const pg_strmap *m, const char *key, size_t len);

typedef struct pg_pair_slot {
    uint64_t key; /* (left << 32 | right) + 1; 0 = empty */
    uint64_t val; /* rank << 32 | (uint32)merged id */
} pg_pair_slot;

typedef struct pg_pairmap {
    pg_pair_slot *slots; /* key and value side by side: one cache miss per probe */
    size_t cap;
    size_t count;
} pg_pairmap;

pagoda_status pg_pairmap_init(pg_pairmap *m, size_t expected);
void pg_pairmap_free(pg_pairmap *m);
/* Insert unless present (first insertion wins, as in HF: lowest rank). */
pagoda_status pg_pairmap_put(pg_pairmap *m, int32_t left, int32_t right, uint32_t rank,
                             int32_t merged);
/* 1 and (rank, merged) set if present, else 0. */
/* murmur3 fmix64: every key bit reaches every index bit */
static inline uint64_t pg_pairmap_mix(uint64_t k) {
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdull;
    k ^= k >> 33;
    k *= 0xc4ceb9fe1a85ec53ull;
    k ^= k >> 33;
    return k;
}

static inline int pg_pairmap_get(const pg_pairmap *m, int32_t left, int32_t right,
                                 uint32_t *rank, int32_t *merged) {
    if (!m->cap) return 0;
    uint64_t k = (((uint64_t)(uint32_t)left << 32) | (uint32_t)right) + 1;
    size_t mask = m->cap - 1, i = (size_t)pg_pairmap_mix(k) & mask;
    for (;;) {
        uint64_t s = m->slots[i].key;
        if (s == k) {
            *rank = (uint32_t)(m->slots[i].val >> 32);
            *merged = (int32_t)(uint32_t)m->slots[i].val;
            return 1;
        }
        if (!s) return 0;
        i = (i + 1) & mask;
    }
}

#endif
