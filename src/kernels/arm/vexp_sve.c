/* SVE vector exp over an array (dispatch entry vexp_f32 at the sve level):
 * the method of x86/vexp_avx512.h, vector-length agnostic, the tail
 * predicated with svwhilelt. FMIN/FMAX propagate NaN. */
#include <arm_sve.h>

#include "kernels/arm/arm.h"
#include "kernels/vexp_consts.h"

static inline svfloat32_t exp_sve(svbool_t pg, svfloat32_t x) {
    x = svmin_n_f32_x(pg, x, PG_VEXP_HI);
    x = svmax_n_f32_x(pg, x, PG_VEXP_LO);
    svfloat32_t n = svrintn_f32_x(pg, svmul_n_f32_x(pg, x, PG_VEXP_LOG2E));
    svfloat32_t r = svmls_n_f32_x(pg, x, n, PG_VEXP_LN2_HI); /* x - n * ln2_hi */
    r = svmls_n_f32_x(pg, r, n, PG_VEXP_LN2_LO);
    svfloat32_t y = svdup_n_f32(PG_VEXP_P5);
    y = svmad_n_f32_x(pg, y, r, PG_VEXP_P4); /* y * r + P4 */
    y = svmad_n_f32_x(pg, y, r, PG_VEXP_P3);
    y = svmad_n_f32_x(pg, y, r, PG_VEXP_P2);
    y = svmad_n_f32_x(pg, y, r, PG_VEXP_P1);
    y = svmad_n_f32_x(pg, y, r, PG_VEXP_P0);
    y = svmla_f32_x(pg, r, y, svmul_f32_x(pg, r, r)); /* r + y * r^2 */
    y = svadd_n_f32_x(pg, y, 1.0f);
    svint32_t ni = svcvt_s32_f32_x(pg, n);
    svint32_t n1 = svasr_n_s32_x(pg, ni, 1), n2 = svsub_s32_x(pg, ni, n1);
    svfloat32_t s1 = svreinterpret_f32_s32(svlsl_n_s32_x(pg, svadd_n_s32_x(pg, n1, 127), 23));
    svfloat32_t s2 = svreinterpret_f32_s32(svlsl_n_s32_x(pg, svadd_n_s32_x(pg, n2, 127), 23));
    return svmul_f32_x(pg, svmul_f32_x(pg, y, s1), s2);
}

void pg_sve_vexp_f32(const float *x, float *y, size_t n) {
    for (size_t i = 0; i < n; i += svcntw()) {
        svbool_t pg = svwhilelt_b32_u64(i, n);
        svst1_f32(pg, y + i, exp_sve(pg, svld1_f32(pg, x + i)));
    }
}
