/* The quantized GEMM's activation input stage with NEON (dispatch entries
 * amax_f32 / quant_i8; specs pg_ref_amax_f32 / pg_ref_quant_i8), bit for
 * bit equal to the reference: max is order-free, FCVTNS rounds to nearest
 * even as rintf does. Tails run the scalar formula. */
#include <arm_neon.h>
#include <math.h>

#include "kernels/arm/arm.h"

float pg_neon_amax_f32(const float *x, size_t n) {
    float32x4_t m0 = vdupq_n_f32(0.0f), m1 = vdupq_n_f32(0.0f);
    size_t i = 0;
    /* FMAXNM ignores a quiet NaN operand, as the reference does */
    for (; i + 8 <= n; i += 8) {
        m0 = vmaxnmq_f32(m0, vabsq_f32(vld1q_f32(x + i)));
        m1 = vmaxnmq_f32(m1, vabsq_f32(vld1q_f32(x + i + 4)));
    }
    float m = vmaxnmvq_f32(vmaxnmq_f32(m0, m1));
    for (; i < n; i++) {
        float v = fabsf(x[i]);
        m = v > m ? v : m;
    }
    return m;
}

int32_t pg_neon_quant_i8(const float *x, size_t n, float inv, int8_t *q) {
    const float32x4_t hi = vdupq_n_f32(127.0f), lo = vdupq_n_f32(-127.0f);
    int32x4_t sum = vdupq_n_s32(0);
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        float32x4_t a = vminq_f32(vmaxq_f32(vmulq_n_f32(vld1q_f32(x + i), inv), lo), hi);
        float32x4_t b = vminq_f32(vmaxq_f32(vmulq_n_f32(vld1q_f32(x + i + 4), inv), lo), hi);
        int32x4_t ia = vcvtnq_s32_f32(a), ib = vcvtnq_s32_f32(b);
        sum = vaddq_s32(sum, vaddq_s32(ia, ib));
        int16x8_t h = vcombine_s16(vmovn_s32(ia), vmovn_s32(ib));
        vst1_s8(q + i, vmovn_s16(h));
    }
    int32_t total = vaddvq_s32(sum);
    for (; i < n; i++) {
        float v = x[i] * inv;
        v = v > 127.0f ? 127.0f : (v < -127.0f ? -127.0f : v);
        q[i] = (int8_t)rintf(v);
        total += q[i];
    }
    return total;
}
