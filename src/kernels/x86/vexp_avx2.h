/* Vector exp for AVX2 + FMA kernels (include only from *_avx2.c files); the
 * method of vexp_avx512.h on 8 lanes. */
#ifndef PAGODA_KERNELS_X86_VEXP_AVX2_H
#define PAGODA_KERNELS_X86_VEXP_AVX2_H

#include <immintrin.h>

#include "kernels/vexp_consts.h"

static inline __m256 pg_exp_avx2(__m256 x) {
    x = _mm256_min_ps(_mm256_set1_ps(PG_VEXP_HI), x); /* NaN x: returns x */
    x = _mm256_max_ps(_mm256_set1_ps(PG_VEXP_LO), x);
    __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(PG_VEXP_LOG2E)),
                               _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(PG_VEXP_LN2_HI), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(PG_VEXP_LN2_LO), r);
    __m256 y = _mm256_set1_ps(PG_VEXP_P5);
    y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(PG_VEXP_P4));
    y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(PG_VEXP_P3));
    y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(PG_VEXP_P2));
    y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(PG_VEXP_P1));
    y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(PG_VEXP_P0));
    y = _mm256_fmadd_ps(y, _mm256_mul_ps(r, r), r);
    y = _mm256_add_ps(y, _mm256_set1_ps(1.0f));
    __m256i ni = _mm256_cvtps_epi32(n);
    __m256i n1 = _mm256_srai_epi32(ni, 1), n2 = _mm256_sub_epi32(ni, n1);
    __m256i bias = _mm256_set1_epi32(127);
    __m256 s1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n1, bias), 23));
    __m256 s2 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n2, bias), 23));
    return _mm256_mul_ps(_mm256_mul_ps(y, s1), s2);
}

#endif
