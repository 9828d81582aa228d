/* Vector exp for AVX-512 kernels (include only from *_avx512*.c files).
 *   x clamped to [-104, 89] (NaN kept: the min/max operand order returns x);
 *   n = round(x log2 e);  r = x - n ln2 (ln2 split in two: Cody & Waite 1980);
 *   e^r = 1 + r + r^2 P(r), P of degree 5 (Cephes expf, S. Moshier);
 *   2^n = 2^(n>>1) * 2^(n - (n>>1)): both halves are normal floats for every
 *   n in [-150, 128], so results in the denormal range round once and
 *   x close to ln(FLT_MAX) does not overflow early.
 * Within 2 ulp of the correctly rounded e^x (tests/test_vexp.c). */
#ifndef PAGODA_KERNELS_X86_VEXP_AVX512_H
#define PAGODA_KERNELS_X86_VEXP_AVX512_H

#include <immintrin.h>

#include "kernels/vexp_consts.h"

static inline __m512 pg_exp_avx512(__m512 x) {
    x = _mm512_min_ps(_mm512_set1_ps(PG_VEXP_HI), x);
    x = _mm512_max_ps(_mm512_set1_ps(PG_VEXP_LO), x);
    __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(PG_VEXP_LOG2E)),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(PG_VEXP_LN2_HI), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(PG_VEXP_LN2_LO), r);
    __m512 y = _mm512_set1_ps(PG_VEXP_P5);
    y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(PG_VEXP_P4));
    y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(PG_VEXP_P3));
    y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(PG_VEXP_P2));
    y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(PG_VEXP_P1));
    y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(PG_VEXP_P0));
    y = _mm512_fmadd_ps(y, _mm512_mul_ps(r, r), r);
    y = _mm512_add_ps(y, _mm512_set1_ps(1.0f));
    __m512i ni = _mm512_cvtps_epi32(n);
    __m512i n1 = _mm512_srai_epi32(ni, 1), n2 = _mm512_sub_epi32(ni, n1);
    __m512i bias = _mm512_set1_epi32(127);
    __m512 s1 = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(n1, bias), 23));
    __m512 s2 = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(n2, bias), 23));
    return _mm512_mul_ps(_mm512_mul_ps(y, s1), s2);
}

#endif
