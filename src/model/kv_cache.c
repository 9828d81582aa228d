#include "model/kv_cache.h"

#include <stdint.h>
#include <stdlib.h>

#include "base/alloc.h"

typedef struct contiguous_kv {
    float *k, *v;
    size_t bytes_each;
    size_t slot;      /* floats per (layer, pos) */
    size_t per_layer; /* floats per layer */
} contiguous_kv;

static float *contiguous_k(pg_kv_cache *kv, int layer, int pos) {
    contiguous_kv *c = kv->impl;
    return c->k + (size_t)layer * c->per_layer + (size_t)pos * c->slot;
}

static float *contiguous_v(pg_kv_cache *kv, int layer, int pos) {
    contiguous_kv *c = kv->impl;
    return c->v + (size_t)layer * c->per_layer + (size_t)pos * c->slot;
}

static void contiguous_destroy(pg_kv_cache *kv) {
    contiguous_kv *c = kv->impl;
    if (c) {
        pg_free_huge(c->k, c->bytes_each);
        pg_free_huge(c->v, c->bytes_each);
        free(c);
    }
    free(kv);
}

pagoda_status pg_kv_cache_create_contiguous(int n_layers, int n_kv_heads, int head_dim,
                                            int max_positions, pg_kv_cache **out) {
    *out = NULL;
    if (n_layers <= 0 || n_kv_heads <= 0 || head_dim <= 0 || max_positions <= 0)
        return pg_error(PAGODA_ERR_INVALID_ARG,
                        "kv cache: bad size (layers %d, kv heads %d, head_dim %d, positions %d)",
                        n_layers, n_kv_heads, head_dim, max_positions);
    size_t slot = (size_t)n_kv_heads * (size_t)head_dim;
    size_t per_layer = slot * (size_t)max_positions;
    size_t bytes = per_layer * (size_t)n_layers * sizeof(float);
    pg_kv_cache *kv = calloc(1, sizeof *kv);
    contiguous_kv *c = calloc(1, sizeof *c);
    if (!kv || !c) {
        free(kv);
        free(c);
        return pg_error(PAGODA_ERR_NOMEM, "kv cache: out of memory");
    }
    c->slot = slot;
    c->per_layer = per_layer;
    c->bytes_each = bytes;
    c->k = pg_alloc_huge(bytes);
    c->v = pg_alloc_huge(bytes);
    *kv = (pg_kv_cache){.n_layers = n_layers,
                        .n_kv_heads = n_kv_heads,
                        .head_dim = head_dim,
                        .max_positions = max_positions,
                        .k_ptr = contiguous_k,
                        .v_ptr = contiguous_v,
                        .destroy = contiguous_destroy,
                        .impl = c};
    if (!c->k || !c->v) {
        contiguous_destroy(kv);
        return pg_error(PAGODA_ERR_NOMEM, "kv cache: cannot allocate 2 x %zu bytes", bytes);
    }
    *out = kv;
    return PAGODA_OK;
}

void pg_kv_cache_free(pg_kv_cache *kv) {
    if (kv) kv->destroy(kv);
}
