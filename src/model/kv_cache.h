/* KV cache as seen by an architecture's attention: where the key and value
 * vectors of (layer, position) of the one sequence being run live.
 *
 * The model only calls pg_kv_k / pg_kv_v; it never assumes two positions are
 * adjacent in memory. Each slot holds n_kv_heads * head_dim f32 values, head
 * h at offset h * head_dim. The contiguous implementation here stores
 * [n_layers][max_positions][n_kv_heads * head_dim] for K and again for V; the
 * paged engine provides another implementation (block table -> block, offset)
 * behind the same function pointers. */
#ifndef PAGODA_MODEL_KV_CACHE_H
#define PAGODA_MODEL_KV_CACHE_H

#include <stddef.h>

#include "base/status.h"

typedef struct pg_kv_cache pg_kv_cache;

struct pg_kv_cache {
    int n_layers;
    int n_kv_heads;
    int head_dim;
    int max_positions; /* positions [0, max_positions) are addressable */
    /* Slot of (layer, pos): n_kv_heads * head_dim floats. Callers guarantee
     * 0 <= layer < n_layers and 0 <= pos < max_positions. */
    float *(*k_ptr)(pg_kv_cache *kv, int layer, int pos);
    float *(*v_ptr)(pg_kv_cache *kv, int layer, int pos);
    void (*destroy)(pg_kv_cache *kv);
    void *impl; /* implementation's private data */
};

static inline float *pg_kv_k(pg_kv_cache *kv, int layer, int pos) {
    return kv->k_ptr(kv, layer, pos);
}
static inline float *pg_kv_v(pg_kv_cache *kv, int layer, int pos) {
    return kv->v_ptr(kv, layer, pos);
}

/* A contiguous f32 cache for one sequence of up to max_positions tokens
 * (2 * n_layers * max_positions * n_kv_heads * head_dim * 4 bytes, from
 * pg_alloc_huge). Errors: PAGODA_ERR_INVALID_ARG for a non-positive size,
 * PAGODA_ERR_NOMEM naming the byte count. */
pagoda_status pg_kv_cache_create_contiguous(int n_layers, int n_kv_heads, int head_dim,
                                            int max_positions, pg_kv_cache **out);

/* Free any implementation (NULL is fine). */
void pg_kv_cache_free(pg_kv_cache *kv);

#endif
