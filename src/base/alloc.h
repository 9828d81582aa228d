/* Memory: 64-byte aligned heap blocks, huge-page-backed weight buffers, and
 * a bump arena for per-step scratch ("workspace").
 *
 * The process allocator is mimalloc when the binary links it (see
 * CMakeLists.txt: linking libmimalloc overrides malloc/free process-wide);
 * these helpers sit on top of whatever malloc is. */
#ifndef PAGODA_BASE_ALLOC_H
#define PAGODA_BASE_ALLOC_H

#include <stddef.h>
#include <stdint.h>

#include "base/status.h"

#define PG_ALIGN 64 /* cache line; also the widest vector (AVX-512) */

/* size bytes aligned to PG_ALIGN, uninitialised; NULL on failure or size==0
 * overflow. Free with pg_free. */
void *pg_malloc_aligned(size_t size);
/* Same, zero-filled. */
void *pg_calloc_aligned(size_t count, size_t size);
void pg_free(void *p);

/* Large buffer for weights / KV cache: anonymous mmap, 2 MiB aligned when
 * large, advised MADV_HUGEPAGE (transparent huge pages). Zero-filled. Returns
 * NULL on failure. Free with pg_free_huge(p, size) using the same size. */
void *pg_alloc_huge(size_t size);
void pg_free_huge(void *p, size_t size);

/* Bump arena over one preallocated block. Allocation is O(1), never calls
 * malloc, and returns PG_ALIGN-aligned memory; reset frees everything at
 * once. A step's scratch (activations) lives here so compute never
 * allocates in the steady state. Not thread-safe: one arena per owner. */
typedef struct pg_arena {
    uint8_t *base;
    size_t cap;
    size_t used;
    size_t high_water; /* max `used` ever seen: sizes the arena in tests */
} pg_arena;

/* Reserve `cap` bytes. Errors: PAGODA_ERR_NOMEM. */
pagoda_status pg_arena_init(pg_arena *a, size_t cap);
void pg_arena_free(pg_arena *a);
/* `size` bytes aligned to PG_ALIGN, or NULL when the arena is exhausted
 * (callers size arenas up front, so NULL is a bug to report, not a retry). */
void *pg_arena_alloc(pg_arena *a, size_t size);
static inline size_t pg_arena_mark(const pg_arena *a) { return a->used; }
static inline void pg_arena_restore(pg_arena *a, size_t mark) { a->used = mark; }
static inline void pg_arena_reset(pg_arena *a) { a->used = 0; }

#endif
