/* Quantized GEMM microkernels with SDOT (FEAT_DotProd; see arm.h,
 * dispatch.h pg_qgemm_ukernel, kernels/qgemm.h).
 *
 * Tile 4 rows x 8 columns: per row two int32x4 accumulators (lane j of
 * vector v = column 4v + j, four k per SDOT, A taken by lane from a
 * 16-byte load = four k-chunks) and two f32x4 accumulators. SDOT is signed
 * x signed: A is qa itself and the packed comp is unused. W4: a 16-byte
 * load holds one k-chunk of 8 columns as nibbles; x << 4 and x & 0xF0 are
 * 16 q as signed bytes; the group's sum is shifted right by 4 (exact). */
#include <arm_neon.h>

#include "kernels/arm/arm.h"
#include "kernels/qgemm_uk.h"

enum { MR = 4, NV = 2, NR = 4 * NV };

static inline __attribute__((always_inline)) void tile(const int mr, const int bits, const int hs,
                                                       int64_t ng, int64_t gk, const int8_t *a,
                                                       int64_t as, const float *asc, int64_t ass,
                                                       const char *w, float *c, int64_t ldc,
                                                       int accumulate) {
    float32x4_t f[MR][NV];
#pragma GCC unroll 4
    for (int i = 0; i < mr; i++)
#pragma GCC unroll 4
        for (int v = 0; v < NV; v++)
            f[i][v] = accumulate ? vld1q_f32(c + i * ldc + 4 * v) : vdupq_n_f32(0.0f);
    const size_t hbytes = (size_t)NR * (hs ? 2 : 4);
    const size_t gbytes = hbytes + (size_t)(gk * NR * bits / 8);
    const int8x16_t hi_mask = vdupq_n_s8((int8_t)0xF0);
    for (int64_t g = 0; g < ng; g++) {
        const char *grp = w + (size_t)g * gbytes;
        const int8_t *d = (const int8_t *)(grp + hbytes);
        const int8_t *ag = a + g * gk;
        int32x4_t acc[MR][NV];
#pragma GCC unroll 4
        for (int i = 0; i < mr; i++)
#pragma GCC unroll 4
            for (int v = 0; v < NV; v++)
                acc[i][v] = vdupq_n_s32(0);
        for (int64_t c4 = 0; c4 < gk / 16; c4++) {
            int8x16_t av[MR];
#pragma GCC unroll 4
            for (int i = 0; i < mr; i++)
                av[i] = vld1q_s8(ag + i * as + 16 * c4);
#define STEP(L)                                                                                    \
    do {                                                                                           \
        const int64_t ch = 4 * c4 + (L);                                                           \
        int8x16_t wv[NV];                                                                          \
        if (bits == 8) {                                                                           \
            wv[0] = vld1q_s8(d + ch * 4 * NR);                                                     \
            wv[1] = vld1q_s8(d + ch * 4 * NR + 16);                                                \
        } else {                                                                                   \
            int8x16_t x = vld1q_s8(d + ch * 2 * NR);                                               \
            wv[0] = vshlq_n_s8(x, 4);                                                              \
            wv[1] = vandq_s8(x, hi_mask);                                                          \
        }                                                                                          \
        _Pragma("GCC unroll 4") for (int i = 0; i < mr; i++)                                       \
            _Pragma("GCC unroll 4") for (int v = 0; v < NV; v++) acc[i][v] =                       \
                vdotq_laneq_s32(acc[i][v], wv[v], av[i], (L));                                     \
    } while (0)
            STEP(0);
            STEP(1);
            STEP(2);
            STEP(3);
#undef STEP
        }
#pragma GCC unroll 4
        for (int v = 0; v < NV; v++) {
            float32x4_t s = hs ? vcvt_f32_f16(vld1_f16((const float16_t *)grp + 4 * v))
                               : vld1q_f32((const float *)grp + 4 * v);
#pragma GCC unroll 4
            for (int i = 0; i < mr; i++) {
                int32x4_t t = bits == 4 ? vshrq_n_s32(acc[i][v], 4) : acc[i][v];
                float32x4_t si = asc ? vmulq_n_f32(s, asc[i * ass + g]) : s;
                f[i][v] = vfmaq_f32(f[i][v], vcvtq_f32_s32(t), si);
            }
        }
    }
#pragma GCC unroll 4
    for (int i = 0; i < mr; i++)
#pragma GCC unroll 4
        for (int v = 0; v < NV; v++)
            vst1q_f32(c + i * ldc + 4 * v, f[i][v]);
}

PG_QGEMM_UK_FAMILY(pg_dotprod_qgemm_uk, 4)
