/* Dot products with AVX-512 F + BW + VL (see x86.h). Full f32 precision:
 * BF16 weights widen exactly by a 16-bit shift, F16 by VCVTPH2PS; the
 * multiply-add is f32 FMA. Summation order depends only on n: 64-element
 * steps into 4 accumulators, then 16-element steps into the first, then a
 * masked tail step (masked-off lanes load nothing, so no fault past the end). */
#include <immintrin.h>

#include "kernels/x86/x86.h"

static inline __m512 widen_bf16(__m256i h) {
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

static inline __m512 load_bf16(const uint16_t *p) {
    return widen_bf16(_mm256_loadu_si256((const __m256i *)p));
}

static inline __m512 load_f16(const uint16_t *p) {
    return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p));
}

/* Mask of the low r lanes, 0 < r < 16. */
static inline __mmask16 tail_mask(size_t r) {
    return (__mmask16)((1u << r) - 1u);
}

static inline float finish(__m512 a0, __m512 a1, __m512 a2, __m512 a3) {
    return _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)));
}

float pg_avx512_dot_f32(const float *a, const float *b, size_t n) {
    __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    size_t i = 0;
    for (; i + 64 <= n; i += 64) {
        a0 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i), a0);
        a1 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i + 16), _mm512_loadu_ps(b + i + 16), a1);
        a2 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i + 32), _mm512_loadu_ps(b + i + 32), a2);
        a3 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i + 48), _mm512_loadu_ps(b + i + 48), a3);
    }
    for (; i + 16 <= n; i += 16)
        a0 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i), a0);
    if (i < n) {
        __mmask16 m = tail_mask(n - i);
        a1 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, a + i), _mm512_maskz_loadu_ps(m, b + i), a1);
    }
    return finish(a0, a1, a2, a3);
}

float pg_avx512_dot_bf16_f32(const uint16_t *w, const float *x, size_t n) {
    __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    size_t i = 0;
    for (; i + 64 <= n; i += 64) {
        a0 = _mm512_fmadd_ps(load_bf16(w + i), _mm512_loadu_ps(x + i), a0);
        a1 = _mm512_fmadd_ps(load_bf16(w + i + 16), _mm512_loadu_ps(x + i + 16), a1);
        a2 = _mm512_fmadd_ps(load_bf16(w + i + 32), _mm512_loadu_ps(x + i + 32), a2);
        a3 = _mm512_fmadd_ps(load_bf16(w + i + 48), _mm512_loadu_ps(x + i + 48), a3);
    }
    for (; i + 16 <= n; i += 16)
        a0 = _mm512_fmadd_ps(load_bf16(w + i), _mm512_loadu_ps(x + i), a0);
    if (i < n) {
        __mmask16 m = tail_mask(n - i);
        __m512 wv = widen_bf16(_mm256_maskz_loadu_epi16(m, w + i));
        a1 = _mm512_fmadd_ps(wv, _mm512_maskz_loadu_ps(m, x + i), a1);
    }
    return finish(a0, a1, a2, a3);
}

float pg_avx512_dot_f16_f32(const uint16_t *w, const float *x, size_t n) {
    __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    size_t i = 0;
    for (; i + 64 <= n; i += 64) {
        a0 = _mm512_fmadd_ps(load_f16(w + i), _mm512_loadu_ps(x + i), a0);
        a1 = _mm512_fmadd_ps(load_f16(w + i + 16), _mm512_loadu_ps(x + i + 16), a1);
        a2 = _mm512_fmadd_ps(load_f16(w + i + 32), _mm512_loadu_ps(x + i + 32), a2);
        a3 = _mm512_fmadd_ps(load_f16(w + i + 48), _mm512_loadu_ps(x + i + 48), a3);
    }
    for (; i + 16 <= n; i += 16)
        a0 = _mm512_fmadd_ps(load_f16(w + i), _mm512_loadu_ps(x + i), a0);
    if (i < n) {
        __mmask16 m = tail_mask(n - i);
        __m512 wv = _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, w + i));
        a1 = _mm512_fmadd_ps(wv, _mm512_maskz_loadu_ps(m, x + i), a1);
    }
    return finish(a0, a1, a2, a3);
}
