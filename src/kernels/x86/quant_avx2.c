/* The quantized GEMM's activation input stage with AVX2 (dispatch entries
 * amax_f32 / quant_i8; specs pg_ref_amax_f32 / pg_ref_quant_i8), bit for
 * bit equal to the reference (see quant_avx512.c). Tails run the scalar
 * formula. */
#include <immintrin.h>
#include <math.h>

#include "kernels/x86/x86.h"

float pg_avx2_amax_f32(const float *x, size_t n) {
    const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));
    __m256 m0 = _mm256_setzero_ps();
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        m0 = _mm256_max_ps(_mm256_and_ps(_mm256_loadu_ps(x + i), abs_mask), m0);
    float t[8], m = 0.0f;
    _mm256_storeu_ps(t, m0);
    for (int j = 0; j < 8; j++)
        m = t[j] > m ? t[j] : m;
    for (; i < n; i++) {
        float v = fabsf(x[i]);
        m = v > m ? v : m;
    }
    return m;
}

int32_t pg_avx2_quant_i8(const float *x, size_t n, float inv, int8_t *q) {
    const __m256 vi = _mm256_set1_ps(inv), hi = _mm256_set1_ps(127.0f),
                 lo = _mm256_set1_ps(-127.0f);
    __m256i sum = _mm256_setzero_si256();
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 v = _mm256_mul_ps(_mm256_loadu_ps(x + i), vi);
        v = _mm256_min_ps(_mm256_max_ps(v, lo), hi);
        __m256i t = _mm256_cvtps_epi32(v);
        sum = _mm256_add_epi32(sum, t);
        __m128i w = _mm_packs_epi32(_mm256_castsi256_si128(t), _mm256_extracti128_si256(t, 1));
        _mm_storel_epi64((__m128i *)(q + i), _mm_packs_epi16(w, w));
    }
    int32_t s[8], total = 0;
    _mm256_storeu_si256((__m256i *)s, sum);
    for (int j = 0; j < 8; j++)
        total += s[j];
    for (; i < n; i++) {
        float v = x[i] * inv;
        v = v > 127.0f ? 127.0f : (v < -127.0f ? -127.0f : v);
        q[i] = (int8_t)rintf(v);
        total += q[i];
    }
    return total;
}
