/* The quantized GEMM's activation input stage with AVX-512 F (dispatch
 * entries amax_f32 / quant_i8; specs pg_ref_amax_f32 / pg_ref_quant_i8).
 * Exact: max is order-free and every element is rounded on its own
 * (VCVTPS2DQ under the default round-to-nearest-even, as rintf), so the
 * results equal the reference bit for bit. */
#include <immintrin.h>

#include "kernels/x86/x86.h"

float pg_avx512_amax_f32(const float *x, size_t n) {
    __m512 m0 = _mm512_setzero_ps(), m1 = _mm512_setzero_ps();
    size_t i = 0;
    /* abs(x) as the first operand: a NaN there yields the second (ignored) */
    for (; i + 32 <= n; i += 32) {
        m0 = _mm512_max_ps(_mm512_abs_ps(_mm512_loadu_ps(x + i)), m0);
        m1 = _mm512_max_ps(_mm512_abs_ps(_mm512_loadu_ps(x + i + 16)), m1);
    }
    for (; i < n; i += 16) {
        __mmask16 k = n - i >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (n - i)) - 1);
        m0 = _mm512_max_ps(_mm512_abs_ps(_mm512_maskz_loadu_ps(k, x + i)), m0);
    }
    return _mm512_reduce_max_ps(_mm512_max_ps(m0, m1));
}

int32_t pg_avx512_quant_i8(const float *x, size_t n, float inv, int8_t *q) {
    const __m512 vi = _mm512_set1_ps(inv), hi = _mm512_set1_ps(127.0f),
                 lo = _mm512_set1_ps(-127.0f);
    __m512i sum = _mm512_setzero_si512();
    for (size_t i = 0; i < n; i += 16) {
        __mmask16 k = n - i >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (n - i)) - 1);
        __m512 v = _mm512_mul_ps(_mm512_maskz_loadu_ps(k, x + i), vi);
        v = _mm512_min_ps(_mm512_max_ps(v, lo), hi);
        __m512i t = _mm512_cvtps_epi32(v);
        sum = _mm512_add_epi32(sum, t);
        _mm_mask_storeu_epi8(q + i, k, _mm512_cvtepi32_epi8(t));
    }
    return _mm512_reduce_add_epi32(sum);
}
