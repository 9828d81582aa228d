/* GEMM microkernels with Advanced SIMD (see arm.h, dispatch.h).
 *
 * f32:  tile 5 x 16 (20 q accumulators, 4 q of W per k, A broadcast with
 *       LD1R), one FMLA per product in increasing k: bitwise the reference.
 *       5 rows, not 6: 24 accumulators + 4 W + the 6 A values GCC keeps live
 *       exceed the 32 registers, and one accumulator was spilled to the stack
 *       every k (a store-load round trip on its FMA chain; docs/PERFORMANCE.md
 *       "Arm kernels: instruction counts").
 * bf16: for cores without FEAT_BF16 (Neoverse N1, Cortex-A76). Tile 4 x 16;
 *       each q of W holds 4 columns x one k-pair, widened exactly (even k:
 *       shift left 16, odd k: mask the high half); per k-pair: FMLA the odd
 *       product, then the even one (exact products): the reference's order
 *       and rounding, bit for bit. */
#include <arm_neon.h>
#include <string.h>

#include "kernels/arm/arm.h"

enum { F_MR = 5, F_NV = 4, F_NR = 4 * F_NV };
enum { B_MR = 4, B_NV = 4, B_NR = 4 * B_NV };

static inline __attribute__((always_inline)) void tile_f32(const int mr, int64_t nk, const float *a,
                                                           int64_t as, const float *w, float *c,
                                                           int64_t ldc, int accumulate) {
    float32x4_t acc[F_MR][F_NV];
#pragma GCC unroll 16
    for (int i = 0; i < mr; i++)
#pragma GCC unroll 16
        for (int v = 0; v < F_NV; v++)
            acc[i][v] = accumulate ? vld1q_f32(c + i * ldc + 4 * v) : vdupq_n_f32(0.0f);
    for (int64_t k = 0; k < nk; k++) {
        float32x4_t wv[F_NV];
#pragma GCC unroll 16
        for (int v = 0; v < F_NV; v++)
            wv[v] = vld1q_f32(w + k * F_NR + 4 * v);
#pragma GCC unroll 16
        for (int i = 0; i < mr; i++) {
            float32x4_t av = vld1q_dup_f32(a + i * as + k);
#pragma GCC unroll 16
            for (int v = 0; v < F_NV; v++)
                acc[i][v] = vfmaq_f32(acc[i][v], av, wv[v]);
        }
    }
#pragma GCC unroll 16
    for (int i = 0; i < mr; i++)
#pragma GCC unroll 16
        for (int v = 0; v < F_NV; v++)
            vst1q_f32(c + i * ldc + 4 * v, acc[i][v]);
}

void pg_neon_gemm_uk_f32(int64_t ngroups, const void *a, int64_t a_stride, const void *w, float *c,
                         int64_t ldc, int mr, int accumulate) {
    switch (mr) {
    case 1:
        tile_f32(1, ngroups, a, a_stride, w, c, ldc, accumulate);
        break;
    case 2:
        tile_f32(2, ngroups, a, a_stride, w, c, ldc, accumulate);
        break;
    case 3:
        tile_f32(3, ngroups, a, a_stride, w, c, ldc, accumulate);
        break;
    case 4:
        tile_f32(4, ngroups, a, a_stride, w, c, ldc, accumulate);
        break;
    default:
        tile_f32(5, ngroups, a, a_stride, w, c, ldc, accumulate);
        break;
    }
}

static inline __attribute__((always_inline)) void tile_bf16(const int mr, int64_t ng,
                                                            const uint16_t *a, int64_t as,
                                                            const uint16_t *w, float *c,
                                                            int64_t ldc, int accumulate) {
    const uint32x4_t hi = vdupq_n_u32(0xffff0000u);
    float32x4_t acc[B_MR][B_NV];
#pragma GCC unroll 16
    for (int i = 0; i < mr; i++)
#pragma GCC unroll 16
        for (int v = 0; v < B_NV; v++)
            acc[i][v] = accumulate ? vld1q_f32(c + i * ldc + 4 * v) : vdupq_n_f32(0.0f);
    for (int64_t g = 0; g < ng; g++) {
        float32x4_t we[B_NV], wo[B_NV];
#pragma GCC unroll 16
        for (int v = 0; v < B_NV; v++) {
            uint32x4_t x = vreinterpretq_u32_u16(vld1q_u16(w + g * 2 * B_NR + 8 * v));
            we[v] = vreinterpretq_f32_u32(vshlq_n_u32(x, 16));
            wo[v] = vreinterpretq_f32_u32(vandq_u32(x, hi));
        }
#pragma GCC unroll 16
        for (int i = 0; i < mr; i++) {
            uint32_t pair;
            memcpy(&pair, a + i * as + 2 * g, 4);
            float32x4_t ae = vreinterpretq_f32_u32(vdupq_n_u32(pair << 16));
            float32x4_t ao = vreinterpretq_f32_u32(vdupq_n_u32(pair & 0xffff0000u));
#pragma GCC unroll 16
            for (int v = 0; v < B_NV; v++) {
                acc[i][v] = vfmaq_f32(acc[i][v], ao, wo[v]);
                acc[i][v] = vfmaq_f32(acc[i][v], ae, we[v]);
            }
        }
    }
#pragma GCC unroll 16
    for (int i = 0; i < mr; i++)
#pragma GCC unroll 16
        for (int v = 0; v < B_NV; v++)
            vst1q_f32(c + i * ldc + 4 * v, acc[i][v]);
}

void pg_neon_gemm_uk_bf16(int64_t ngroups, const void *a, int64_t a_stride, const void *w, float *c,
                          int64_t ldc, int mr, int accumulate) {
    switch (mr) {
    case 1:
        tile_bf16(1, ngroups, a, a_stride, w, c, ldc, accumulate);
        break;
    case 2:
        tile_bf16(2, ngroups, a, a_stride, w, c, ldc, accumulate);
        break;
    case 3:
        tile_bf16(3, ngroups, a, a_stride, w, c, ldc, accumulate);
        break;
    default:
        tile_bf16(4, ngroups, a, a_stride, w, c, ldc, accumulate);
        break;
    }
}

/* Round to nearest even in integer arithmetic, NaN -> quiet NaN, 4 at a time. */
static inline uint16x4_t cvt4(float32x4_t x) {
    uint32x4_t u = vreinterpretq_u32_f32(x);
    uint32x4_t lsb = vandq_u32(vshrq_n_u32(u, 16), vdupq_n_u32(1));
    uint32x4_t r = vaddq_u32(u, vaddq_u32(vdupq_n_u32(0x7fff), lsb));
    uint32x4_t q = vorrq_u32(u, vdupq_n_u32(0x00400000));
    uint32x4_t ok = vceqq_f32(x, x); /* false for NaN */
    return vshrn_n_u32(vbslq_u32(ok, r, q), 16);
}

void pg_neon_cvt_f32_bf16(const float *src, uint16_t *dst, size_t n) {
    size_t i = 0;
    for (; i + 4 <= n; i += 4)
        vst1_u16(dst + i, cvt4(vld1q_f32(src + i)));
    if (i < n) {
        float t[4] = {0, 0, 0, 0};
        uint16_t h[4];
        memcpy(t, src + i, (n - i) * sizeof(float));
        vst1_u16(h, cvt4(vld1q_f32(t)));
        memcpy(dst + i, h, (n - i) * sizeof(uint16_t));
    }
}
