/* Dot products with Advanced SIMD (see arm.h). Full f32 precision: BF16
 * weights widen exactly by a 16-bit shift (SHLL), F16 by FCVTL; the
 * multiply-add is f32 FMLA. Summation order depends only on n. */
#include <arm_neon.h>
#include <string.h>

#include "kernels/arm/arm.h"

#define STEP 16 /* elements per loop iteration: 4 accumulators x 4 lanes */

/* acc[k] += a[4k..4k+3] * b[4k..4k+3] for k = 0..3. */
static inline void step_f32(float32x4_t acc[4], const float *a, const float *b) {
    for (int k = 0; k < 4; k++)
        acc[k] = vfmaq_f32(acc[k], vld1q_f32(a + 4 * k), vld1q_f32(b + 4 * k));
}

static inline void step_bf16(float32x4_t acc[4], const uint16_t *w, const float *x) {
    for (int k = 0; k < 2; k++) {
        uint16x8_t h = vld1q_u16(w + 8 * k);
        float32x4_t lo = vreinterpretq_f32_u32(vshll_n_u16(vget_low_u16(h), 16));
        float32x4_t hi = vreinterpretq_f32_u32(vshll_high_n_u16(h, 16));
        acc[2 * k] = vfmaq_f32(acc[2 * k], lo, vld1q_f32(x + 8 * k));
        acc[2 * k + 1] = vfmaq_f32(acc[2 * k + 1], hi, vld1q_f32(x + 8 * k + 4));
    }
}

static inline void step_f16(float32x4_t acc[4], const uint16_t *w, const float *x) {
    for (int k = 0; k < 2; k++) {
        float16x8_t h = vreinterpretq_f16_u16(vld1q_u16(w + 8 * k));
        acc[2 * k] = vfmaq_f32(acc[2 * k], vcvt_f32_f16(vget_low_f16(h)), vld1q_f32(x + 8 * k));
        acc[2 * k + 1] = vfmaq_f32(acc[2 * k + 1], vcvt_high_f32_f16(h), vld1q_f32(x + 8 * k + 4));
    }
}

static inline float finish(float32x4_t acc[4]) {
    return vaddvq_f32(vaddq_f32(vaddq_f32(acc[0], acc[1]), vaddq_f32(acc[2], acc[3])));
}

float pg_neon_dot_f32(const float *a, const float *b, size_t n) {
    float32x4_t acc[4] = {vdupq_n_f32(0), vdupq_n_f32(0), vdupq_n_f32(0), vdupq_n_f32(0)};
    size_t i = 0;
    for (; i + STEP <= n; i += STEP)
        step_f32(acc, a + i, b + i);
    if (i < n) { /* tail: zero-padded copy, one more step */
        float ta[STEP] = {0}, tb[STEP] = {0};
        memcpy(ta, a + i, (n - i) * sizeof *a);
        memcpy(tb, b + i, (n - i) * sizeof *b);
        step_f32(acc, ta, tb);
    }
    return finish(acc);
}

float pg_neon_dot_bf16_f32(const uint16_t *w, const float *x, size_t n) {
    float32x4_t acc[4] = {vdupq_n_f32(0), vdupq_n_f32(0), vdupq_n_f32(0), vdupq_n_f32(0)};
    size_t i = 0;
    for (; i + STEP <= n; i += STEP)
        step_bf16(acc, w + i, x + i);
    if (i < n) {
        uint16_t tw[STEP] = {0};
        float tx[STEP] = {0};
        memcpy(tw, w + i, (n - i) * sizeof *w);
        memcpy(tx, x + i, (n - i) * sizeof *x);
        step_bf16(acc, tw, tx);
    }
    return finish(acc);
}

float pg_neon_dot_f16_f32(const uint16_t *w, const float *x, size_t n) {
    float32x4_t acc[4] = {vdupq_n_f32(0), vdupq_n_f32(0), vdupq_n_f32(0), vdupq_n_f32(0)};
    size_t i = 0;
    for (; i + STEP <= n; i += STEP)
        step_f16(acc, w + i, x + i);
    if (i < n) {
        uint16_t tw[STEP] = {0};
        float tx[STEP] = {0};
        memcpy(tw, w + i, (n - i) * sizeof *w);
        memcpy(tx, x + i, (n - i) * sizeof *x);
        step_f16(acc, tw, tx);
    }
    return finish(acc);
}
