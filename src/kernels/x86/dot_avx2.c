/* Dot products with AVX2 + FMA + F16C (see x86.h). Full f32 precision:
 * BF16 weights widen exactly by a 16-bit shift, F16 by VCVTPH2PS; the
 * multiply-add is f32 FMA. Summation order depends only on n. */
#include <immintrin.h>
#include <string.h>

#include "kernels/x86/x86.h"

#define STEP 32 /* elements per loop iteration: 4 accumulators x 8 lanes */

/* Horizontal sum in a fixed order: (lo128 + hi128), then pairs. */
static inline float hsum(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

static inline __m256 load_bf16(const uint16_t *p) {
    __m256i u = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p));
    return _mm256_castsi256_ps(_mm256_slli_epi32(u, 16));
}

static inline __m256 load_f16(const uint16_t *p) {
    return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p));
}

/* Four named accumulators (a struct, not an indexed array, so the compiler
 * keeps them in registers). */
typedef struct {
    __m256 v0, v1, v2, v3;
} acc4;

/* acc.vk += w[8k..8k+7] * x[8k..8k+7] for k = 0..3 (w already widened). */
static inline void fma4(acc4 *acc, __m256 w0, __m256 w1, __m256 w2, __m256 w3, const float *x) {
    acc->v0 = _mm256_fmadd_ps(w0, _mm256_loadu_ps(x), acc->v0);
    acc->v1 = _mm256_fmadd_ps(w1, _mm256_loadu_ps(x + 8), acc->v1);
    acc->v2 = _mm256_fmadd_ps(w2, _mm256_loadu_ps(x + 16), acc->v2);
    acc->v3 = _mm256_fmadd_ps(w3, _mm256_loadu_ps(x + 24), acc->v3);
}

static inline void step_f32(acc4 *acc, const float *a, const float *b) {
    fma4(acc, _mm256_loadu_ps(a), _mm256_loadu_ps(a + 8), _mm256_loadu_ps(a + 16),
         _mm256_loadu_ps(a + 24), b);
}

static inline void step_bf16(acc4 *acc, const uint16_t *w, const float *x) {
    fma4(acc, load_bf16(w), load_bf16(w + 8), load_bf16(w + 16), load_bf16(w + 24), x);
}

static inline void step_f16(acc4 *acc, const uint16_t *w, const float *x) {
    fma4(acc, load_f16(w), load_f16(w + 8), load_f16(w + 16), load_f16(w + 24), x);
}

static inline float finish(const acc4 *acc) {
    return hsum(_mm256_add_ps(_mm256_add_ps(acc->v0, acc->v1), _mm256_add_ps(acc->v2, acc->v3)));
}

float pg_avx2_dot_f32(const float *a, const float *b, size_t n) {
    acc4 acc = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
    size_t i = 0;
    for (; i + STEP <= n; i += STEP)
        step_f32(&acc, a + i, b + i);
    if (i < n) { /* tail: zero-padded copy, one more step */
        float ta[STEP] = {0}, tb[STEP] = {0};
        memcpy(ta, a + i, (n - i) * sizeof *a);
        memcpy(tb, b + i, (n - i) * sizeof *b);
        step_f32(&acc, ta, tb);
    }
    return finish(&acc);
}

float pg_avx2_dot_bf16_f32(const uint16_t *w, const float *x, size_t n) {
    acc4 acc = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
    size_t i = 0;
    for (; i + STEP <= n; i += STEP)
        step_bf16(&acc, w + i, x + i);
    if (i < n) {
        uint16_t tw[STEP] = {0};
        float tx[STEP] = {0};
        memcpy(tw, w + i, (n - i) * sizeof *w);
        memcpy(tx, x + i, (n - i) * sizeof *x);
        step_bf16(&acc, tw, tx);
    }
    return finish(&acc);
}

float pg_avx2_dot_f16_f32(const uint16_t *w, const float *x, size_t n) {
    acc4 acc = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
    size_t i = 0;
    for (; i + STEP <= n; i += STEP)
        step_f16(&acc, w + i, x + i);
    if (i < n) {
        uint16_t tw[STEP] = {0};
        float tx[STEP] = {0};
        memcpy(tw, w + i, (n - i) * sizeof *w);
        memcpy(tx, x + i, (n - i) * sizeof *x);
        step_f16(&acc, tw, tx);
    }
    return finish(&acc);
}
