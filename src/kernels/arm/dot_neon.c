/* Dot products with Advanced SIMD (see arm.h). Full f32 precision: BF16
 * weights widen exactly by a 16-bit shift (SHLL), F16 by FCVTL; the
 * multiply-add is f32 FMLA. Summation order depends only on n. */
#include <arm_neon.h>
#include <string.h>

#include "kernels/arm/arm.h"

#define STEP 16 /* elements per loop iteration: 4 accumulators x 4 lanes */

/* Four named accumulators (a struct, not an indexed array, so the compiler
 * keeps them in registers). */
typedef struct {
    float32x4_t v0, v1, v2, v3;
} acc4;

/* acc.vk += w_k * x[4k..4k+3] for k = 0..3 (w already widened). */
static inline void fma4(acc4 *acc, float32x4_t w0, float32x4_t w1, float32x4_t w2, float32x4_t w3,
                        const float *x) {
    acc->v0 = vfmaq_f32(acc->v0, w0, vld1q_f32(x));
    acc->v1 = vfmaq_f32(acc->v1, w1, vld1q_f32(x + 4));
    acc->v2 = vfmaq_f32(acc->v2, w2, vld1q_f32(x + 8));
    acc->v3 = vfmaq_f32(acc->v3, w3, vld1q_f32(x + 12));
}

static inline void step_f32(acc4 *acc, const float *a, const float *b) {
    fma4(acc, vld1q_f32(a), vld1q_f32(a + 4), vld1q_f32(a + 8), vld1q_f32(a + 12), b);
}

/* BF16 -> f32 is exact: the bits move to the top half (SHLL #16). */
static inline void step_bf16(acc4 *acc, const uint16_t *w, const float *x) {
    uint16x8_t h0 = vld1q_u16(w), h1 = vld1q_u16(w + 8);
    fma4(acc, vreinterpretq_f32_u32(vshll_n_u16(vget_low_u16(h0), 16)),
         vreinterpretq_f32_u32(vshll_high_n_u16(h0, 16)),
         vreinterpretq_f32_u32(vshll_n_u16(vget_low_u16(h1), 16)),
         vreinterpretq_f32_u32(vshll_high_n_u16(h1, 16)), x);
}

static inline void step_f16(acc4 *acc, const uint16_t *w, const float *x) {
    float16x8_t h0 = vreinterpretq_f16_u16(vld1q_u16(w));
    float16x8_t h1 = vreinterpretq_f16_u16(vld1q_u16(w + 8));
    fma4(acc, vcvt_f32_f16(vget_low_f16(h0)), vcvt_high_f32_f16(h0), vcvt_f32_f16(vget_low_f16(h1)),
         vcvt_high_f32_f16(h1), x);
}

static inline float finish(const acc4 *acc) {
    return vaddvq_f32(vaddq_f32(vaddq_f32(acc->v0, acc->v1), vaddq_f32(acc->v2, acc->v3)));
}

float pg_neon_dot_f32(const float *a, const float *b, size_t n) {
    acc4 acc = {vdupq_n_f32(0), vdupq_n_f32(0), vdupq_n_f32(0), vdupq_n_f32(0)};
    size_t i = 0;
    for (; i + STEP <= n; i += STEP)
        step_f32(&acc, a + i, b + i);
    if (i < n) { /* tail: zero-padded copy, one more step */
        float ta[STEP] = {0}, tb[STEP] = {0};
        memcpy(ta, a + i, (n - i) * sizeof *a);
        memcpy(tb, b + i, (n - i) * sizeof *b);
        step_f32(&acc, ta, tb);
    }
    return finish(&acc);
}

float pg_neon_dot_bf16_f32(const uint16_t *w, const float *x, size_t n) {
    acc4 acc = {vdupq_n_f32(0), vdupq_n_f32(0), vdupq_n_f32(0), vdupq_n_f32(0)};
    size_t i = 0;
    for (; i + STEP <= n; i += STEP)
        step_bf16(&acc, w + i, x + i);
    if (i < n) {
        uint16_t tw[STEP] = {0};
        float tx[STEP] = {0};
        memcpy(tw, w + i, (n - i) * sizeof *w);
        memcpy(tx, x + i, (n - i) * sizeof *x);
        step_bf16(&acc, tw, tx);
    }
    return finish(&acc);
}

float pg_neon_dot_f16_f32(const uint16_t *w, const float *x, size_t n) {
    acc4 acc = {vdupq_n_f32(0), vdupq_n_f32(0), vdupq_n_f32(0), vdupq_n_f32(0)};
    size_t i = 0;
    for (; i + STEP <= n; i += STEP)
        step_f16(&acc, w + i, x + i);
    if (i < n) {
        uint16_t tw[STEP] = {0};
        float tx[STEP] = {0};
        memcpy(tw, w + i, (n - i) * sizeof *w);
        memcpy(tx, x + i, (n - i) * sizeof *x);
        step_f16(&acc, tw, tx);
    }
    return finish(&acc);
}
