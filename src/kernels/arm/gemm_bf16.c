/* GEMM microkernel with FEAT_BF16 BFMMLA (see arm.h, dispatch.h).
 *
 * BFMMLA Vd.4S, Vn.8H, Vm.8H multiplies a 2x4 BF16 matrix (Vn: two rows of
 * A, four k each) by the transpose of another (Vm: two columns of W, the
 * same four k) and adds the 2x2 f32 result to Vd = [r0c0 r0c1 r1c0 r1c1].
 * Tile 8 rows x 8 columns = 4 row pairs x 4 column pairs: 16 accumulators,
 * 4 q of A and 4 q of W per k-quad, 16 BFMMLA (256 multiply-adds) per 8
 * loads. Element (r, c) of a BFMMLA depends only on row r and column c, so
 * a row's partner in its pair (another row, or zero padding) never changes
 * its value: row i of C is the same for any M (batch invariance). Each
 * accumulator lane adds one 4-product sum per k-quad, in increasing k. */
#include <arm_neon.h>

#include "kernels/arm/arm.h"

enum { RP = 4, CP = 4, NR = 2 * CP };

static inline __attribute__((always_inline)) void tile(const int mr, int64_t ng, const uint16_t *a,
                                                       int64_t as, const uint16_t *w, float *c,
                                                       int64_t ldc, int accumulate, const char *pf,
                                                       int64_t npf) {
    const int rp = (mr + 1) / 2;
    float32x4_t acc[RP][CP];
#pragma GCC unroll 16
    for (int p = 0; p < rp; p++) {
        const int two = 2 * p + 1 < mr; /* the pair's second row exists */
#pragma GCC unroll 16
        for (int q = 0; q < CP; q += 2) {
            float64x2_t r0, r1;
            if (accumulate) {
                r0 = vreinterpretq_f64_f32(vld1q_f32(c + 2 * p * ldc + 2 * q));
                r1 = two ? vreinterpretq_f64_f32(vld1q_f32(c + (2 * p + 1) * ldc + 2 * q))
                         : vdupq_n_f64(0.0);
            } else {
                r0 = r1 = vdupq_n_f64(0.0);
            }
            acc[p][q] = vreinterpretq_f32_f64(vzip1q_f64(r0, r1));
            acc[p][q + 1] = vreinterpretq_f32_f64(vzip2q_f64(r0, r1));
        }
    }
    /* the first k-quads also prefetch `per` lines each of pf[0, npf) into
     * L2 (PRFM PLDL2KEEP): the next W slice, for the driver's small-M tiles */
    const int64_t per = npf > 0 ? (npf + ng - 1) / ng : 0;
    for (int64_t g = 0; g < ng; g++) {
        for (int64_t l = g * per; l < g * per + per && l < npf; l++)
            __builtin_prefetch(pf + 64 * l, 0, 2);
        bfloat16x8_t wv[CP];
#pragma GCC unroll 16
        for (int q = 0; q < CP; q++)
            wv[q] = vreinterpretq_bf16_u16(vld1q_u16(w + g * 4 * NR + 8 * q));
#pragma GCC unroll 16
        for (int p = 0; p < rp; p++) {
            bfloat16x8_t av = vreinterpretq_bf16_u16(vld1q_u16(a + p * as + 8 * g));
#pragma GCC unroll 16
            for (int q = 0; q < CP; q++)
                acc[p][q] = vbfmmlaq_f32(acc[p][q], av, wv[q]);
        }
    }
#pragma GCC unroll 16
    for (int p = 0; p < rp; p++) {
        const int two = 2 * p + 1 < mr;
#pragma GCC unroll 16
        for (int q = 0; q < CP; q += 2) {
            float64x2_t x = vreinterpretq_f64_f32(acc[p][q]);
            float64x2_t y = vreinterpretq_f64_f32(acc[p][q + 1]);
            vst1q_f32(c + 2 * p * ldc + 2 * q, vreinterpretq_f32_f64(vzip1q_f64(x, y)));
            if (two)
                vst1q_f32(c + (2 * p + 1) * ldc + 2 * q, vreinterpretq_f32_f64(vzip2q_f64(x, y)));
        }
    }
}

void pg_bf16_gemm_uk_bfmmla_pf(int64_t ngroups, const void *a, int64_t a_stride, const void *w,
                               float *c, int64_t ldc, int mr, int accumulate, const void *pf,
                               int64_t pf_lines) {
    if (!pf || pf_lines < 0) pf_lines = 0;
    if (pf_lines > 4 * ngroups) pf_lines = 4 * ngroups;
    switch (mr) {
    case 1:
        tile(1, ngroups, a, a_stride, w, c, ldc, accumulate, pf, pf_lines);
        break;
    case 2:
        tile(2, ngroups, a, a_stride, w, c, ldc, accumulate, pf, pf_lines);
        break;
    case 3:
        tile(3, ngroups, a, a_stride, w, c, ldc, accumulate, pf, pf_lines);
        break;
    case 4:
        tile(4, ngroups, a, a_stride, w, c, ldc, accumulate, pf, pf_lines);
        break;
    case 5:
        tile(5, ngroups, a, a_stride, w, c, ldc, accumulate, pf, pf_lines);
        break;
    case 6:
        tile(6, ngroups, a, a_stride, w, c, ldc, accumulate, pf, pf_lines);
        break;
    case 7:
        tile(7, ngroups, a, a_stride, w, c, ldc, accumulate, pf, pf_lines);
        break;
    default:
        tile(8, ngroups, a, a_stride, w, c, ldc, accumulate, pf, pf_lines);
        break;
    }
}

void pg_bf16_gemm_uk_bfmmla(int64_t ngroups, const void *a, int64_t a_stride, const void *w,
                            float *c, int64_t ldc, int mr, int accumulate) {
    pg_bf16_gemm_uk_bfmmla_pf(ngroups, a, a_stride, w, c, ldc, mr, accumulate, NULL, 0);
}
