/* AVX2 + FMA row ops (RMSNorm, LayerNorm, softmax, SiLU, SwiGLU, GELU, argmax): the scheme of
 * ops_avx512.c on 8 lanes; tails through masked loads/stores. */
#include <immintrin.h>
#include <math.h>

#include "kernels/gelu_consts.h"
#include "kernels/x86/vexp_avx2.h"
#include "kernels/x86/x86.h"

static inline __m256i tail(size_t n) {
    int k = n >= 8 ? 8 : (int)n;
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(k), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

static inline float hsum(__m256 v) {
    __m128 x = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    x = _mm_add_ps(x, _mm_movehl_ps(x, x));
    x = _mm_add_ss(x, _mm_shuffle_ps(x, x, 1));
    return _mm_cvtss_f32(x);
}

static inline float hmax(__m256 v) {
    __m128 x = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    x = _mm_max_ps(x, _mm_movehl_ps(x, x));
    x = _mm_max_ss(x, _mm_shuffle_ps(x, x, 1));
    return _mm_cvtss_f32(x);
}

/* x[i..i+8) with lanes past n (and NaN lanes when drop_nan) set to -inf. */
static inline __m256 load_ninf(const float *x, size_t i, size_t n, int drop_nan) {
    __m256i k = tail(n - i);
    __m256 v = _mm256_maskload_ps(x + i, k), ninf = _mm256_set1_ps(-INFINITY);
    v = _mm256_blendv_ps(ninf, v, _mm256_castsi256_ps(k));
    if (drop_nan) v = _mm256_blendv_ps(ninf, v, _mm256_cmp_ps(v, v, _CMP_ORD_Q));
    return v;
}

void pg_avx2_rmsnorm_f32(float *out, const float *x, const float *w, size_t m, size_t n,
                         float eps) {
    for (size_t r = 0; r < m; r++) {
        const float *xr = x + r * n;
        float *yr = out + r * n;
        __m256 acc = _mm256_setzero_ps();
        for (size_t i = 0; i < n; i += 8) {
            __m256 v = _mm256_maskload_ps(xr + i, tail(n - i));
            acc = _mm256_fmadd_ps(v, v, acc);
        }
        const __m256 sv = _mm256_set1_ps(1.0f / sqrtf(hsum(acc) / (float)n + eps));
        for (size_t i = 0; i < n; i += 8) {
            __m256i k = tail(n - i);
            __m256 v = _mm256_mul_ps(sv, _mm256_maskload_ps(xr + i, k));
            _mm256_maskstore_ps(yr + i, k, _mm256_mul_ps(_mm256_maskload_ps(w + i, k), v));
        }
    }
}

void pg_avx2_softmax_f32(float *x, size_t n) {
    __m256 mx = _mm256_set1_ps(-INFINITY);
    for (size_t i = 0; i < n; i += 8)
        mx = _mm256_max_ps(mx, load_ninf(x, i, n, 0));
    const __m256 mv = _mm256_set1_ps(hmax(mx));
    __m256 sum = _mm256_setzero_ps();
    for (size_t i = 0; i < n; i += 8) {
        __m256 e = pg_exp_avx2(_mm256_sub_ps(load_ninf(x, i, n, 0), mv));
        _mm256_maskstore_ps(x + i, tail(n - i), e);
        sum = _mm256_add_ps(sum, e);
    }
    const __m256 inv = _mm256_set1_ps(1.0f / hsum(sum));
    for (size_t i = 0; i < n; i += 8) {
        __m256i k = tail(n - i);
        _mm256_maskstore_ps(x + i, k, _mm256_mul_ps(_mm256_maskload_ps(x + i, k), inv));
    }
}

static inline __m256 silu(__m256 g) {
    __m256 e = pg_exp_avx2(_mm256_sub_ps(_mm256_setzero_ps(), g));
    return _mm256_div_ps(g, _mm256_add_ps(_mm256_set1_ps(1.0f), e));
}

void pg_avx2_silu_f32(float *out, const float *x, size_t n) {
    for (size_t i = 0; i < n; i += 8) {
        __m256i k = tail(n - i);
        _mm256_maskstore_ps(out + i, k, silu(_mm256_maskload_ps(x + i, k)));
    }
}

void pg_avx2_swiglu_f32(float *out, const float *gate, const float *up, size_t n) {
    for (size_t i = 0; i < n; i += 8) {
        __m256i k = tail(n - i);
        __m256 s = silu(_mm256_maskload_ps(gate + i, k));
        _mm256_maskstore_ps(out + i, k, _mm256_mul_ps(s, _mm256_maskload_ps(up + i, k)));
    }
}

size_t pg_avx2_argmax_f32(const float *x, size_t n) {
    __m256 mx = _mm256_set1_ps(-INFINITY);
    for (size_t i = 0; i < n; i += 8)
        mx = _mm256_max_ps(mx, load_ninf(x, i, n, 1));
    const __m256 bv = _mm256_set1_ps(hmax(mx));
    for (size_t i = 0; i < n; i += 8) {
        __m256 v = _mm256_maskload_ps(x + i, tail(n - i));
        int hit = _mm256_movemask_ps(
            _mm256_and_ps(_mm256_cmp_ps(v, bv, _CMP_EQ_OQ), _mm256_castsi256_ps(tail(n - i))));
        if (hit) return i + (size_t)__builtin_ctz((unsigned)hit);
    }
    return 0; /* n == 0 or every value NaN */
}

void pg_avx2_layernorm_f32(float *out, const float *x, const float *w, const float *b, size_t m,
                           size_t n, float eps) {
    for (size_t r = 0; r < m; r++) {
        const float *xr = x + r * n;
        float *yr = out + r * n;
        __m256 acc = _mm256_setzero_ps();
        for (size_t i = 0; i < n; i += 8)
            acc = _mm256_add_ps(acc, _mm256_maskload_ps(xr + i, tail(n - i)));
        const __m256 mv = _mm256_set1_ps(hsum(acc) / (float)n);
        acc = _mm256_setzero_ps();
        for (size_t i = 0; i < n; i += 8) {
            __m256i k = tail(n - i);
            __m256 d = _mm256_and_ps(_mm256_sub_ps(_mm256_maskload_ps(xr + i, k), mv),
                                     _mm256_castsi256_ps(k));
            acc = _mm256_fmadd_ps(d, d, acc);
        }
        const __m256 rs = _mm256_set1_ps(1.0f / sqrtf(hsum(acc) / (float)n + eps));
        for (size_t i = 0; i < n; i += 8) {
            __m256i k = tail(n - i);
            __m256 d = _mm256_mul_ps(_mm256_sub_ps(_mm256_maskload_ps(xr + i, k), mv), rs);
            __m256 y = _mm256_mul_ps(d, _mm256_maskload_ps(w + i, k));
            if (b) y = _mm256_add_ps(y, _mm256_maskload_ps(b + i, k));
            _mm256_maskstore_ps(yr + i, k, y);
        }
    }
}

/* 0.5 x (1 + erf(x / sqrt 2)), both erf intervals computed and blended. */
static inline __m256 gelu(__m256 x) {
    const __m256 z = _mm256_mul_ps(x, _mm256_set1_ps(PG_GELU_RSQRT2));
    const __m256 a = _mm256_andnot_ps(_mm256_set1_ps(-0.0f), z), z2 = _mm256_mul_ps(z, z);
    __m256 p = _mm256_set1_ps(PG_GELU_A5);
    p = _mm256_fmadd_ps(p, z2, _mm256_set1_ps(PG_GELU_A4));
    p = _mm256_fmadd_ps(p, z2, _mm256_set1_ps(PG_GELU_A3));
    p = _mm256_fmadd_ps(p, z2, _mm256_set1_ps(PG_GELU_A2));
    p = _mm256_fmadd_ps(p, z2, _mm256_set1_ps(PG_GELU_A1));
    p = _mm256_fmadd_ps(p, z2, _mm256_set1_ps(PG_GELU_A0));
    const __m256 small = _mm256_add_ps(_mm256_set1_ps(1.0f), _mm256_fmadd_ps(p, z, z));
    const __m256 ac = _mm256_min_ps(a, _mm256_set1_ps(PG_GELU_BIG));
    __m256 q = _mm256_set1_ps(PG_GELU_B6);
    q = _mm256_fmadd_ps(q, ac, _mm256_set1_ps(PG_GELU_B5));
    q = _mm256_fmadd_ps(q, ac, _mm256_set1_ps(PG_GELU_B4));
    q = _mm256_fmadd_ps(q, ac, _mm256_set1_ps(PG_GELU_B3));
    q = _mm256_fmadd_ps(q, ac, _mm256_set1_ps(PG_GELU_B2));
    q = _mm256_fmadd_ps(q, ac, _mm256_set1_ps(PG_GELU_B1));
    q = _mm256_fmadd_ps(q, ac, _mm256_set1_ps(PG_GELU_B0));
    q = _mm256_fmadd_ps(q, ac, ac);
    __m256 e = pg_exp_avx2(_mm256_sub_ps(_mm256_setzero_ps(), q));
    e = _mm256_andnot_ps(_mm256_cmp_ps(a, _mm256_set1_ps(PG_GELU_BIG), _CMP_GE_OQ), e);
    const __m256 neg = _mm256_cmp_ps(z, _mm256_setzero_ps(), _CMP_LT_OQ);
    const __m256 big = _mm256_blendv_ps(_mm256_sub_ps(_mm256_set1_ps(2.0f), e), e, neg);
    const __m256 in_small = _mm256_cmp_ps(a, _mm256_set1_ps(PG_GELU_SPLIT), _CMP_LT_OQ);
    const __m256 t = _mm256_blendv_ps(big, small, in_small);
    return _mm256_mul_ps(_mm256_mul_ps(_mm256_set1_ps(0.5f), x), t);
}

void pg_avx2_gelu_f32(float *out, const float *x, size_t n) {
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(out + i, gelu(_mm256_loadu_ps(x + i)));
    if (i < n) {
        __m256i k = tail(n - i);
        _mm256_maskstore_ps(out + i, k, gelu(_mm256_maskload_ps(x + i, k)));
    }
}
