/* What the K-quant microkernels share, whatever the ISA (ref/kquant.c,
 * x86/kquant_avx2.c, x86/kquant_avx512vnni.c, arm/kquant_dotprod.c): the
 * list of rows with their compile-time parameters, and where the parts of
 * one packed super-block are (the layout of gemm_kquant.c, sizes in
 * gemm_driver.h). Internal to src/kernels. */
#ifndef PAGODA_KERNELS_KQUANT_UK_H
#define PAGODA_KERNELS_KQUANT_UK_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/gemm_driver.h"

/* The rows, as X(P_<row>, bits, sub, has_min, cb, fs): bits of u as packed
 * (4 nibble, 5 / 6 with high-bit planes), elements per sub-block, own
 * minimums (else m = sc, or none for the codebook rows), cb: u indexes
 * pg_iq4nl_kvalues, fs: an F16 scale per sub-block instead of d sc
 * (base/kquant.h). A file instantiates its microkernels P_q2_k ..
 * P_iq4_nl with PG_KQ_ROWS(its macro, P). */
#define PG_KQ_ROWS(X, P)                                                                           \
    X(P##_q2_k, 4, 16, 1, 0, 0)                                                                    \
    X(P##_q3_k, 4, 16, 0, 0, 0)                                                                    \
    X(P##_q4_k, 4, 32, 1, 0, 0)                                                                    \
    X(P##_q5_k, 5, 32, 1, 0, 0)                                                                    \
    X(P##_q6_k, 6, 16, 0, 0, 0)                                                                    \
    X(P##_iq4_xs, 4, 32, 0, 1, 0)                                                                  \
    X(P##_iq4_nl, 4, 32, 0, 1, 1)

/* A row's packed super-block: S sub-blocks of cps 4-k chunks, hb high bits
 * per weight in planes of per chunks each, gbytes in all, the nibble
 * plane hdr bytes in. */
typedef struct pg_kq_shape {
    int S, cps, hb, per;
    size_t gbytes, hdr;
} pg_kq_shape;

static inline pg_kq_shape pg_kq_shape_of(int bits, int sub, int has_min, int fs) {
    const int hb = bits - 4;
    return (pg_kq_shape){256 / sub,
                         sub / 4,
                         hb,
                         hb ? 4 / hb : 1,
                         pg_kq_group_bytes(bits, sub, has_min, fs),
                         pg_kq_hdr_bytes(sub, has_min, fs)};
}

/* Super-block g of a panel slice w: its header's int8 scales sc[S][32] and
 * minimums m[S][32] (m = sc for rows without their own; neither for fs
 * rows, whose header is F16 ds[S][32] at grp), and its nibble plane. */
typedef struct pg_kq_view {
    const char *grp;
    const int8_t *sc, *m;
    const uint8_t *nib;
} pg_kq_view;

static inline pg_kq_view pg_kq_view_at(const void *w, int64_t g, const pg_kq_shape *sh,
                                       int has_min) {
    const char *grp = (const char *)w + (size_t)g * sh->gbytes;
    const int8_t *sc = (const int8_t *)grp + PG_KQ_SC_OFF;
    return (pg_kq_view){grp, sc, has_min ? sc + sh->S * PG_KQ_NR : sc,
                        (const uint8_t *)grp + sh->hdr};
}

/* The decode (M = 1) tiles' software prefetch: sub-block s's share (of
 * sh->S) of the cache lines of the super-block `ahead` super-blocks past
 * grp, into L1 (PREFETCHT0) or, with l2 (a constant), into L2 only
 * (PREFETCHT1). It may lie past the panel slice's end: with M = 1 a slice is a whole
 * panel, and the next panel, the next one a decode share reads, follows it
 * in memory (a prefetch does not fault; at a share's end it touches a
 * neighbour's first lines). The bounds are computed outside the for:
 * UBSan's division checks in its condition would make GCC drop the loop
 * annotation, an error under -Werror. */
static inline __attribute__((always_inline)) void
pg_kq_prefetch_share(const char *grp, const pg_kq_shape *sh, int s, int ahead, const int l2) {
    const int nl = (int)(sh->gbytes / 64); /* cache lines per super-block */
    const int l0 = s * nl / sh->S, l1 = (s + 1) * nl / sh->S;
    const char *p = grp + (size_t)ahead * sh->gbytes;
    if (l2) {
#pragma GCC unroll 1
        for (int l = l0; l < l1; l++)
            __builtin_prefetch(p + 64 * l, 0, 2);
    } else {
#pragma GCC unroll 1
        for (int l = l0; l < l1; l++)
            __builtin_prefetch(p + 64 * l, 0, 3);
    }
}

#endif
