/* Vector exp for NEON kernels (include only from arm/ files); the method of
 * x86/vexp_avx512.h on 4 lanes. FMIN/FMAX propagate NaN. */
#ifndef PAGODA_KERNELS_ARM_VEXP_NEON_H
#define PAGODA_KERNELS_ARM_VEXP_NEON_H

#include <arm_neon.h>

#include "kernels/vexp_consts.h"

static inline float32x4_t pg_exp_neon(float32x4_t x) {
    x = vminq_f32(x, vdupq_n_f32(PG_VEXP_HI));
    x = vmaxq_f32(x, vdupq_n_f32(PG_VEXP_LO));
    float32x4_t n = vrndnq_f32(vmulq_n_f32(x, PG_VEXP_LOG2E));
    float32x4_t r = vfmsq_f32(x, n, vdupq_n_f32(PG_VEXP_LN2_HI));
    r = vfmsq_f32(r, n, vdupq_n_f32(PG_VEXP_LN2_LO));
    float32x4_t y = vdupq_n_f32(PG_VEXP_P5);
    y = vfmaq_f32(vdupq_n_f32(PG_VEXP_P4), y, r);
    y = vfmaq_f32(vdupq_n_f32(PG_VEXP_P3), y, r);
    y = vfmaq_f32(vdupq_n_f32(PG_VEXP_P2), y, r);
    y = vfmaq_f32(vdupq_n_f32(PG_VEXP_P1), y, r);
    y = vfmaq_f32(vdupq_n_f32(PG_VEXP_P0), y, r);
    y = vfmaq_f32(r, y, vmulq_f32(r, r));
    y = vaddq_f32(y, vdupq_n_f32(1.0f));
    int32x4_t ni = vcvtq_s32_f32(n);
    int32x4_t n1 = vshrq_n_s32(ni, 1), n2 = vsubq_s32(ni, n1);
    int32x4_t bias = vdupq_n_s32(127);
    float32x4_t s1 = vreinterpretq_f32_s32(vshlq_n_s32(vaddq_s32(n1, bias), 23));
    float32x4_t s2 = vreinterpretq_f32_s32(vshlq_n_s32(vaddq_s32(n2, bias), 23));
    return vmulq_f32(vmulq_f32(y, s1), s2);
}

#endif
