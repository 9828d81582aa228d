/* Loop order shared by the BF16/F32 GEMM (gemm.c) and the quantized GEMM
 * (qgemm.c): a thread's share of panels [P0, P1) x rows [M0, M1) is walked
 * as jc blocks of nc panels, ic blocks of mc rows, pc blocks of kc k-groups,
 * then the panels jr of the jc block (BLIS order: Goto & van de Geijn 2008,
 * "Anatomy of high-performance matrix multiplication"). The small-M paths
 * prefetch the slice after the current one, which this finds. */
#ifndef PAGODA_KERNELS_BLOCKING_H
#define PAGODA_KERNELS_BLOCKING_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "base/pool.h"

/* Advance (*jr, *pc), the slice being read in block (jc, ic), to the next
 * slice in that order; false after the share's last one. ngroups: k-groups
 * of the whole K. */
static inline bool pg_gemm_next_slice_pos(int64_t *jr, int64_t *pc, int64_t jc, int64_t ic,
                                          int64_t M1, int64_t P1, int64_t nc, int64_t kc,
                                          int64_t mc, int64_t ngroups) {
    const int64_t jc1 = jc + nc < P1 ? jc + nc : P1;
    if (*jr + 1 < jc1) {
        ++*jr;
    } else if (*pc + kc < ngroups) {
        *jr = jc;
        *pc += kc;
    } else if (ic + mc < M1) {
        *jr = jc;
        *pc = 0;
    } else if (jc1 < P1) {
        *jr = jc1;
        *pc = 0;
    } else {
        return false;
    }
    return true;
}

/* The packed weight a decode forward reads after this one (pg_gemm_set_next):
 * its panels, so that a thread can prefetch the start of its share of them. */
typedef struct pg_next_weight {
    const char *data;   /* NULL: no next weight */
    size_t panel_bytes; /* bytes per panel (whole K) */
    int64_t npanels;
    int unit; /* panels per partition unit (2 for a SwiGLU gate/up pair) */
} pg_next_weight;

/* Bytes of its share of the next weight a thread prefetches (to L2) when it
 * ends its share of a decode-sized call: about what the memory delivers to
 * one core while the other threads finish, the join and the serial work
 * between two GEMMs of a decode step (~10 us) take; env PAGODA_PF_NEXT_KB
 * overrides it (0 turns it off). */
static inline size_t pg_next_weight_budget(void) {
    /* read lazily by every pool thread: an atomic (relaxed: every thread
     * computes the same value), not a plain static (a data race; TSan) */
    static _Atomic size_t budget = (size_t)-1;
    size_t b = atomic_load_explicit(&budget, memory_order_relaxed);
    if (b == (size_t)-1) {
        const char *e = getenv("PAGODA_PF_NEXT_KB");
        b = (size_t)(e ? atol(e) : 256) * 1024;
        atomic_store_explicit(&budget, b, memory_order_relaxed);
    }
    return b;
}

/* Prefetch (to L2) the first bytes of thread tid's share of n, split over
 * nthreads as the GEMM drivers split a decode call (panel units, statically:
 * pg_pool_partition; the share of a call with M <= the tile rows is walked
 * panel after panel, so its first bytes are the first ones it reads). */
static inline void pg_next_weight_prefetch(const pg_next_weight *n, int tid, int nthreads) {
    if (!n->data || nthreads < 1) return;
    const int64_t units = n->npanels / n->unit;
    const int tn = units < nthreads ? (int)units : nthreads;
    if (tid >= tn) return;
    size_t b, e;
    pg_pool_partition((size_t)units, 1, tn, tid, &b, &e);
    size_t bytes = (e - b) * (size_t)n->unit * n->panel_bytes, budget = pg_next_weight_budget();
    if (bytes > budget) bytes = budget;
    const char *p = n->data + b * (size_t)n->unit * n->panel_bytes;
    for (size_t off = 0; off < bytes; off += 64)
        __builtin_prefetch(p + off, 0, 2);
}

#endif
