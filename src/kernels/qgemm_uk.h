/* Entry points of a W8A8 / W4A8 microkernel family (kernels/qgemm.h,
 * pg_qgemm_ukernel.run and run_hs), shared by the per-ISA files whose tile
 * function has the signature
 *   tile(MR, BITS, HS, ngroups, gk, a, a_stride, as, as_stride, w, c, ldc, accumulate)
 * with MR, BITS and HS compile-time constants (the register tile is
 * specialised on them). PG_QGEMM_UK_FAMILY(P, MRMAX) defines P##_w8, P##_w4,
 * P##_w8_hs and P##_w4_hs, each mapping the run-time mr (1..MRMAX) onto a
 * specialised tile; MRMAX is 3 or 4. The activation column sums (ac) are
 * not used by these families. */
#ifndef PAGODA_KERNELS_QGEMM_UK_H
#define PAGODA_KERNELS_QGEMM_UK_H

#define PG_QGEMM_UK_TILE(MR, BITS, HS)                                                             \
    tile(MR, BITS, HS, ngroups, gk, a, a_stride, as, as_stride, w, c, ldc, accumulate)

#define PG_QGEMM_UK(NAME, BITS, HS, MRMAX)                                                         \
    void NAME(int64_t ngroups, int64_t gk, const void *a, int64_t a_stride, const float *as,       \
              int64_t as_stride, const int32_t *ac, int64_t ac_stride, const void *w, float *c,    \
              int64_t ldc, int mr, int accumulate) {                                               \
        (void)ac;                                                                                  \
        (void)ac_stride;                                                                           \
        switch (mr) {                                                                              \
        case 1:                                                                                    \
            PG_QGEMM_UK_TILE(1, BITS, HS);                                                         \
            break;                                                                                 \
        case 2:                                                                                    \
            PG_QGEMM_UK_TILE(2, BITS, HS);                                                         \
            break;                                                                                 \
        case 3:                                                                                    \
            PG_QGEMM_UK_TILE(3, BITS, HS);                                                         \
            break;                                                                                 \
        default:                                                                                   \
            PG_QGEMM_UK_TILE(MRMAX, BITS, HS);                                                     \
            break;                                                                                 \
        }                                                                                          \
    }

#define PG_QGEMM_UK_FAMILY(P, MRMAX)                                                               \
    PG_QGEMM_UK(P##_w8, 8, 0, MRMAX)                                                               \
    PG_QGEMM_UK(P##_w4, 4, 0, MRMAX)                                                               \
    PG_QGEMM_UK(P##_w8_hs, 8, 1, MRMAX)                                                            \
    PG_QGEMM_UK(P##_w4_hs, 4, 1, MRMAX)

#endif
