/* Loop order shared by the BF16/F32 GEMM (gemm.c) and the quantized GEMM
 * (qgemm.c): a thread's share of panels [P0, P1) x rows [M0, M1) is walked
 * as jc blocks of nc panels, ic blocks of mc rows, pc blocks of kc k-groups,
 * then the panels jr of the jc block (BLIS order: Goto & van de Geijn 2008,
 * "Anatomy of high-performance matrix multiplication"). The small-M paths
 * prefetch the slice after the current one, which this finds. */
#ifndef PAGODA_KERNELS_BLOCKING_H
#define PAGODA_KERNELS_BLOCKING_H

#include <stdbool.h>
#include <stdint.h>

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

#endif
