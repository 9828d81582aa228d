/* MXFP4 GEMM microkernel with SDOT (FEAT_DotProd; pg_kernel_table.mxfp4,
 * dispatch.h; spec pg_ref_mxfp4_uk / pg_ref_mxfp4_gemm in ref/mxfp4.c).
 *
 * Tile 4 rows x 8 columns, as arm/qgemm_dotprod.c: per row two int32x4
 * accumulators (lane j of vector v = column 4v + j, four k per SDOT, A
 * taken by lane from a 16-byte load = four k-chunks) and two f32x4
 * accumulators. A packed block is the columns' 8 E8M0 bytes, then 8
 * k-chunks of 16 bytes: codes of columns 0-3 in the low nibbles, 4-7 in
 * the high ones (vw 16; the scalar table's layout). TBL (vqtbl1q_s8)
 * expands the codes to kv in [-12, 12] and SDOT is signed x signed, so
 * nothing is offset. Block end: d = 2^(E-128) from the E bytes as f32 bits,
 * times the row's activation scale (rounded), one FMLA (fused, as fmaf) per
 * row and vector. */
#include <arm_neon.h>

#include "kernels/arm/arm.h"

enum { MR = 4, NV = 2, NR = 4 * NV, KB = 32 };

/* 4 E8M0 bytes -> 2^(E-128) as f32 (pg_e8m0_half_to_f32). */
static inline __attribute__((always_inline)) float32x4_t e8m0_half(uint32x4_t x) {
    const uint32x4_t big = vshlq_n_u32(vsubq_u32(x, vdupq_n_u32(1)), 23);
    /* for E >= 2 the shift (by up to 255, read as a signed byte) is
     * discarded below */
    const uint32x4_t small = vshlq_u32(vdupq_n_u32(0x00200000), vreinterpretq_s32_u32(x));
    const uint32x4_t sub = vcltq_u32(x, vdupq_n_u32(2));
    return vreinterpretq_f32_u32(vbslq_u32(sub, small, big));
}

static inline __attribute__((always_inline)) void tile(const int mr, int64_t ng, const int8_t *a,
                                                       int64_t as, const float *asc, int64_t ass,
                                                       const char *w, float *c, int64_t ldc,
                                                       int accumulate) {
    static const int8_t KV[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};
    const int8x16_t lut = vld1q_s8(KV);
    const uint8x16_t lo = vdupq_n_u8(0x0F);
    float32x4_t f[MR][NV];
#pragma GCC unroll 4
    for (int i = 0; i < mr; i++)
#pragma GCC unroll 4
        for (int v = 0; v < NV; v++)
            f[i][v] = accumulate ? vld1q_f32(c + i * ldc + 4 * v) : vdupq_n_f32(0.0f);
    const size_t gbytes = NR + KB * NR / 2;
    for (int64_t g = 0; g < ng; g++) {
        const uint8_t *grp = (const uint8_t *)w + (size_t)g * gbytes;
        const uint8_t *d = grp + NR;
        const int8_t *ag = a + g * KB;
        int32x4_t acc[MR][NV];
#pragma GCC unroll 4
        for (int i = 0; i < mr; i++)
#pragma GCC unroll 4
            for (int v = 0; v < NV; v++)
                acc[i][v] = vdupq_n_s32(0);
#pragma GCC unroll 2
        for (int c4 = 0; c4 < KB / 16; c4++) {
            int8x16_t av[MR];
#pragma GCC unroll 4
            for (int i = 0; i < mr; i++)
                av[i] = vld1q_s8(ag + i * as + 16 * c4);
#define STEP(L)                                                                                    \
    do {                                                                                           \
        const uint8x16_t x = vld1q_u8(d + (4 * c4 + (L)) * 16);                                    \
        int8x16_t wv[NV];                                                                          \
        wv[0] = vqtbl1q_s8(lut, vandq_u8(x, lo));                                                  \
        wv[1] = vqtbl1q_s8(lut, vshrq_n_u8(x, 4));                                                 \
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
        const uint16x8_t e16 = vmovl_u8(vld1_u8(grp));
        const float32x4_t s[NV] = {e8m0_half(vmovl_u16(vget_low_u16(e16))),
                                   e8m0_half(vmovl_u16(vget_high_u16(e16)))};
#pragma GCC unroll 4
        for (int i = 0; i < mr; i++) {
            const float ai = asc[i * ass + g];
#pragma GCC unroll 4
            for (int v = 0; v < NV; v++)
                f[i][v] = vfmaq_f32(f[i][v], vcvtq_f32_s32(acc[i][v]), vmulq_n_f32(s[v], ai));
        }
    }
#pragma GCC unroll 4
    for (int i = 0; i < mr; i++)
#pragma GCC unroll 4
        for (int v = 0; v < NV; v++)
            vst1q_f32(c + i * ldc + 4 * v, f[i][v]);
}

void pg_dotprod_mxfp4_uk(int64_t ngroups, int64_t gk, const void *a, int64_t a_stride,
                         const float *as, int64_t as_stride, const int32_t *ac, int64_t ac_stride,
                         const void *w, float *c, int64_t ldc, int mr, int accumulate) {
    (void)gk;
    (void)ac;
    (void)ac_stride;
    switch (mr) {
    case 1:
        tile(1, ngroups, a, a_stride, as, as_stride, w, c, ldc, accumulate);
        break;
    case 2:
        tile(2, ngroups, a, a_stride, as, as_stride, w, c, ldc, accumulate);
        break;
    case 3:
        tile(3, ngroups, a, a_stride, as, as_stride, w, c, ldc, accumulate);
        break;
    default:
        tile(MR, ngroups, a, a_stride, as, as_stride, w, c, ldc, accumulate);
        break;
    }
}
