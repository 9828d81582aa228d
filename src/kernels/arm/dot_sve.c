/* Dot products with SVE, vector-length agnostic (see arm.h). Full f32
 * precision: BF16/F16 weights are loaded zero-extended into 32-bit lanes
 * (LD1H), then widened exactly (BF16: shift left 16; F16: FCVT from the low
 * half of each lane); the multiply-add is f32 FMLA. Summation order depends
 * only on n and the vector length (fixed for a machine). */
#include <arm_sve.h>

#include "kernels/arm/arm.h"

static inline svfloat32_t load_bf16(svbool_t p, const uint16_t *w) {
    return svreinterpret_f32_u32(svlsl_n_u32_x(p, svld1uh_u32(p, w), 16));
}

static inline svfloat32_t load_f16(svbool_t p, const uint16_t *w) {
    return svcvt_f32_f16_x(p, svreinterpret_f16_u32(svld1uh_u32(p, w)));
}

float pg_sve_dot_f32(const float *a, const float *b, size_t n) {
    const size_t vl = svcntw();
    const svbool_t all = svptrue_b32();
    svfloat32_t acc0 = svdup_n_f32(0), acc1 = svdup_n_f32(0);
    size_t i = 0;
    for (; i + 2 * vl <= n; i += 2 * vl) {
        acc0 = svmla_f32_x(all, acc0, svld1_f32(all, a + i), svld1_f32(all, b + i));
        acc1 = svmla_f32_x(all, acc1, svld1_f32(all, a + i + vl), svld1_f32(all, b + i + vl));
    }
    for (; i < n; i += vl) { /* at most two predicated steps; inactive lanes keep acc */
        svbool_t p = svwhilelt_b32_u64(i, n);
        acc0 = svmla_f32_m(p, acc0, svld1_f32(p, a + i), svld1_f32(p, b + i));
    }
    return svaddv_f32(all, svadd_f32_x(all, acc0, acc1));
}

float pg_sve_dot_bf16_f32(const uint16_t *w, const float *x, size_t n) {
    const size_t vl = svcntw();
    const svbool_t all = svptrue_b32();
    svfloat32_t acc0 = svdup_n_f32(0), acc1 = svdup_n_f32(0);
    size_t i = 0;
    for (; i + 2 * vl <= n; i += 2 * vl) {
        acc0 = svmla_f32_x(all, acc0, load_bf16(all, w + i), svld1_f32(all, x + i));
        acc1 = svmla_f32_x(all, acc1, load_bf16(all, w + i + vl), svld1_f32(all, x + i + vl));
    }
    for (; i < n; i += vl) {
        svbool_t p = svwhilelt_b32_u64(i, n);
        acc0 = svmla_f32_m(p, acc0, load_bf16(p, w + i), svld1_f32(p, x + i));
    }
    return svaddv_f32(all, svadd_f32_x(all, acc0, acc1));
}

float pg_sve_dot_f16_f32(const uint16_t *w, const float *x, size_t n) {
    const size_t vl = svcntw();
    const svbool_t all = svptrue_b32();
    svfloat32_t acc0 = svdup_n_f32(0), acc1 = svdup_n_f32(0);
    size_t i = 0;
    for (; i + 2 * vl <= n; i += 2 * vl) {
        acc0 = svmla_f32_x(all, acc0, load_f16(all, w + i), svld1_f32(all, x + i));
        acc1 = svmla_f32_x(all, acc1, load_f16(all, w + i + vl), svld1_f32(all, x + i + vl));
    }
    for (; i < n; i += vl) {
        svbool_t p = svwhilelt_b32_u64(i, n);
        acc0 = svmla_f32_m(p, acc0, load_f16(p, w + i), svld1_f32(p, x + i));
    }
    return svaddv_f32(all, svadd_f32_x(all, acc0, acc1));
}
