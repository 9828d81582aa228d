#include "base/alloc.h"

#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

void *pg_malloc_aligned(size_t size) {
    if (size == 0) size = 1;
    size_t rounded = (size + PG_ALIGN - 1) & ~(size_t)(PG_ALIGN - 1);
    if (rounded < size) return NULL;
    return aligned_alloc(PG_ALIGN, rounded);
}

void *pg_calloc_aligned(size_t count, size_t size) {
    if (size && count > SIZE_MAX / size) return NULL;
    void *p = pg_malloc_aligned(count * size);
    if (p) memset(p, 0, count * size);
    return p;
}

void pg_free(void *p) { free(p); }

#define HUGE_2M ((size_t)2 << 20)

void *pg_alloc_huge(size_t size) {
    if (size == 0) return NULL;
    if (size < HUGE_2M) return pg_calloc_aligned(1, size);
    /* Over-map by 2 MiB so the returned block starts on a huge-page boundary;
     * trim the slack so pg_free_huge can unmap exactly [p, p+size). */
    size_t len = (size + HUGE_2M - 1) & ~(HUGE_2M - 1);
    uint8_t *raw = mmap(NULL, len + HUGE_2M, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                        -1, 0);
    if (raw == MAP_FAILED) return NULL;
    uint8_t *p = (uint8_t *)(((uintptr_t)raw + HUGE_2M - 1) & ~(uintptr_t)(HUGE_2M - 1));
    if (p > raw) munmap(raw, (size_t)(p - raw));
    size_t tail = (size_t)((raw + len + HUGE_2M) - (p + len));
    if (tail) munmap(p + len, tail);
#ifdef MADV_HUGEPAGE
    madvise(p, len, MADV_HUGEPAGE);
#endif
    return p;
}

void pg_free_huge(void *p, size_t size) {
    if (!p) return;
    if (size < HUGE_2M) {
        pg_free(p);
        return;
    }
    size_t len = (size + HUGE_2M - 1) & ~(HUGE_2M - 1);
    munmap(p, len);
}

pagoda_status pg_arena_init(pg_arena *a, size_t cap) {
    memset(a, 0, sizeof *a);
    a->base = pg_malloc_aligned(cap);
    if (!a->base) return pg_error(PAGODA_ERR_NOMEM, "workspace: cannot allocate %zu bytes", cap);
    a->cap = cap;
    return PAGODA_OK;
}

void pg_arena_free(pg_arena *a) {
    pg_free(a->base);
    memset(a, 0, sizeof *a);
}

void *pg_arena_alloc(pg_arena *a, size_t size) {
    size_t start = (a->used + PG_ALIGN - 1) & ~(size_t)(PG_ALIGN - 1);
    if (start > a->cap || size > a->cap - start) return NULL;
    a->used = start + size;
    if (a->used > a->high_water) a->high_water = a->used;
    return a->base + start;
}
