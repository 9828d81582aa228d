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

typedef struct pg_pairmap {
    uint64_t *keys; /* (left << 32 | right) + 1; 0 = empty */
    uint64_t *vals; /* rank << 32 | (uint32)merged id */
    size_t cap;
    size_t count;
} pg_pairmap;

pagoda_status pg_pairmap_init(pg_pairmap *m, size_t expected);
void pg_pairmap_free(pg_pairmap *m);
/* Insert unless present (first insertion wins, as in HF: lowest rank). */
pagoda_status pg_pairmap_put(pg_pairmap *m, int32_t left, int32_t right, uint32_t rank,
                             int32_t merged);
/* 1 and (rank, merged) set if present, else 0. */
static inline int pg_pairmap_get(const pg_pairmap *m, int32_t left, int32_t right,
                                 uint32_t *rank, int32_t *merged) {
    if (!m->cap) return 0;
    uint64_t k = (((uint64_t)(uint32_t)left << 32) | (uint32_t)right) + 1;
    uint64_t h = k * 0x9E3779B97F4A7C15ull;
    size_t mask = m->cap - 1, i = (size_t)(h >> 20) & mask;
    for (;;) {
        uint64_t s = m->keys[i];
        if (s == k) {
            *rank = (uint32_t)(m->vals[i] >> 32);
            *merged = (int32_t)(uint32_t)m->vals[i];
            return 1;
        }
        if (!s) return 0;
        i = (i + 1) & mask;
    }
}

#endif
