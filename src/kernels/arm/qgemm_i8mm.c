/* Quantized GEMM microkernels with SMMLA (FEAT_I8MM; see arm.h, dispatch.h
 * pg_qgemm_ukernel, kernels/qgemm.h).
 *
 * Tile 4 rows (2 row pairs) x 8 columns (4 column pairs), k-chunks of 8
 * (kg 8) and A in row pairs (ar 2): each SMMLA multiplies a 2x8 block of A
 * (rows 2p, 2p+1) by a 2x8 block of W (columns 2q, 2q+1) into a 2x2 int32
 * accumulator [r0c0, r0c1, r1c0, r1c1]; the f32 accumulators keep that
 * layout, with the scale vector {s[2q], s[2q+1], s[2q], s[2q+1]}. Signed x
 * signed: the packed comp is unused. W4: a 16-byte load holds two column
 * pairs' chunk as nibbles (x << 4, x & 0xF0 = 16 q); sums shift right by 4. */
#include <arm_neon.h>

#include "kernels/arm/arm.h"
#include "kernels/qgemm_uk.h"

enum { MP = 2, NQ = 4, NR = 2 * NQ, KG = 8 };

static inline __attribute__((always_inline)) void tile(const int mr, const int bits, const int hs,
                                                       int64_t ng, int64_t gk, const int8_t *a,
                                                       int64_t as, const float *asc, int64_t ass,
                                                       const char *w, float *c, int64_t ldc,
                                                       int accumulate) {
    const int np = (mr + 1) / 2;
    float32x4_t f[MP][NQ];
#pragma GCC unroll 4
    for (int p = 0; p < np; p++) {
        const int two = 2 * p + 1 < mr;
#pragma GCC unroll 4
        for (int q = 0; q < NQ; q++) {
            if (!accumulate) {
                f[p][q] = vdupq_n_f32(0.0f);
                continue;
            }
            float32x2_t r0 = vld1_f32(c + 2 * p * ldc + 2 * q);
            float32x2_t r1 = two ? vld1_f32(c + (2 * p + 1) * ldc + 2 * q) : vdup_n_f32(0.0f);
            f[p][q] = vcombine_f32(r0, r1);
        }
    }
    const size_t hbytes = (size_t)NR * (hs ? 2 : 4);
    const size_t gbytes = hbytes + (size_t)(gk * NR * bits / 8);
    const int8x16_t hi_mask = vdupq_n_s8((int8_t)0xF0);
    for (int64_t g = 0; g < ng; g++) {
        const char *grp = w + (size_t)g * gbytes;
        const int8_t *d = (const int8_t *)(grp + hbytes);
        const int8_t *ag = a + g * gk * 2;
        int32x4_t acc[MP][NQ];
#pragma GCC unroll 4
        for (int p = 0; p < np; p++)
#pragma GCC unroll 4
            for (int q = 0; q < NQ; q++)
                acc[p][q] = vdupq_n_s32(0);
        for (int64_t ch = 0; ch < gk / KG; ch++) {
            int8x16_t wv[NQ];
            if (bits == 8) {
#pragma GCC unroll 4
                for (int q = 0; q < NQ; q++)
                    wv[q] = vld1q_s8(d + ch * KG * NR + 16 * q);
            } else {
                int8x16_t x0 = vld1q_s8(d + ch * KG * NR / 2);
                int8x16_t x1 = vld1q_s8(d + ch * KG * NR / 2 + 16);
                wv[0] = vshlq_n_s8(x0, 4);
                wv[1] = vandq_s8(x0, hi_mask);
                wv[2] = vshlq_n_s8(x1, 4);
                wv[3] = vandq_s8(x1, hi_mask);
            }
#pragma GCC unroll 4
            for (int p = 0; p < np; p++) {
                int8x16_t av = vld1q_s8(ag + p * as + ch * 2 * KG);
#pragma GCC unroll 4
                for (int q = 0; q < NQ; q++)
                    acc[p][q] = vmmlaq_s32(acc[p][q], av, wv[q]);
            }
        }
        float sbuf[NR];
        if (hs)
            for (int v = 0; v < NR / 4; v++)
                vst1q_f32(sbuf + 4 * v, vcvt_f32_f16(vld1_f16((const float16_t *)grp + 4 * v)));
        const float *sc = hs ? sbuf : (const float *)grp;
#pragma GCC unroll 4
        for (int q = 0; q < NQ; q++) {
            float32x2_t s2 = vld1_f32(sc + 2 * q);
            float32x4_t s = vcombine_f32(s2, s2);
#pragma GCC unroll 4
            for (int p = 0; p < np; p++) {
                int32x4_t t = bits == 4 ? vshrq_n_s32(acc[p][q], 4) : acc[p][q];
                float32x4_t si = s;
                if (asc) {
                    const float a0 = asc[2 * p * ass + g];
                    const float a1 = 2 * p + 1 < mr ? asc[(2 * p + 1) * ass + g] : 0.0f;
                    si = vcombine_f32(vmul_n_f32(s2, a0), vmul_n_f32(s2, a1));
                }
                f[p][q] = vfmaq_f32(f[p][q], vcvtq_f32_s32(t), si);
            }
        }
    }
#pragma GCC unroll 4
    for (int p = 0; p < np; p++) {
        const int two = 2 * p + 1 < mr;
#pragma GCC unroll 4
        for (int q = 0; q < NQ; q++) {
            vst1_f32(c + 2 * p * ldc + 2 * q, vget_low_f32(f[p][q]));
            if (two) vst1_f32(c + (2 * p + 1) * ldc + 2 * q, vget_high_f32(f[p][q]));
        }
    }
}

PG_QGEMM_UK_FAMILY(pg_i8mm_qgemm_uk, 4)
