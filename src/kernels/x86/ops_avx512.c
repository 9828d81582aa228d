/* AVX-512 row ops: RMSNorm, LayerNorm, softmax, SiLU, SwiGLU, GELU, argmax
 * (dispatch entries of the same names; specs in kernels/ref/ops_ref.h and
 * ref/ref.h; GELU's erf in kernels/gelu_consts.h). Sums use
 * one 16-lane accumulator over the row, then a fixed horizontal reduction,
 * so a row's result depends on n only (batch invariant); exp is
 * pg_exp_avx512 (<= 1 ulp measured, tests/test_vexp.c). */
#include <immintrin.h>
#include <math.h>

#include "kernels/gelu_consts.h"
#include "kernels/x86/vexp_avx512.h"
#include "kernels/x86/x86.h"

static inline __mmask16 tail(size_t n) {
    return n >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << n) - 1);
}

void pg_avx512_rmsnorm_f32(float *out, const float *x, const float *w, size_t m, size_t n,
                           float eps) {
    for (size_t r = 0; r < m; r++) {
        const float *xr = x + r * n;
        float *yr = out + r * n;
        __m512 acc = _mm512_setzero_ps();
        for (size_t i = 0; i < n; i += 16) {
            __m512 v = _mm512_maskz_loadu_ps(tail(n - i), xr + i);
            acc = _mm512_fmadd_ps(v, v, acc);
        }
        float scale = 1.0f / sqrtf(_mm512_reduce_add_ps(acc) / (float)n + eps);
        const __m512 sv = _mm512_set1_ps(scale);
        for (size_t i = 0; i < n; i += 16) {
            __mmask16 k = tail(n - i);
            __m512 v = _mm512_mul_ps(sv, _mm512_maskz_loadu_ps(k, xr + i));
            _mm512_mask_storeu_ps(yr + i, k, _mm512_mul_ps(_mm512_maskz_loadu_ps(k, w + i), v));
        }
    }
}

void pg_avx512_softmax_f32(float *x, size_t n) {
    const __m512 ninf = _mm512_set1_ps(-INFINITY);
    __m512 mx = ninf;
    for (size_t i = 0; i < n; i += 16)
        mx = _mm512_max_ps(mx, _mm512_mask_loadu_ps(ninf, tail(n - i), x + i));
    const __m512 mv = _mm512_set1_ps(_mm512_reduce_max_ps(mx));
    __m512 sum = _mm512_setzero_ps();
    for (size_t i = 0; i < n; i += 16) {
        __mmask16 k = tail(n - i);
        __m512 e = pg_exp_avx512(_mm512_sub_ps(_mm512_mask_loadu_ps(ninf, k, x + i), mv));
        _mm512_mask_storeu_ps(x + i, k, e);
        sum = _mm512_add_ps(sum, e);
    }
    const __m512 inv = _mm512_set1_ps(1.0f / _mm512_reduce_add_ps(sum));
    for (size_t i = 0; i < n; i += 16) {
        __mmask16 k = tail(n - i);
        _mm512_mask_storeu_ps(x + i, k, _mm512_mul_ps(_mm512_maskz_loadu_ps(k, x + i), inv));
    }
}

static inline __m512 silu(__m512 g) {
    __m512 e = pg_exp_avx512(_mm512_sub_ps(_mm512_setzero_ps(), g));
    return _mm512_div_ps(g, _mm512_add_ps(_mm512_set1_ps(1.0f), e));
}

void pg_avx512_silu_f32(float *out, const float *x, size_t n) {
    for (size_t i = 0; i < n; i += 16) {
        __mmask16 k = tail(n - i);
        _mm512_mask_storeu_ps(out + i, k, silu(_mm512_maskz_loadu_ps(k, x + i)));
    }
}

/* Whole vectors by plain loads and stores, the tail masked: a masked load
 * does not take store forwarding, and callers often pass gate / up just
 * written (qgemm's SwiGLU epilogue: 32-column rows, ~4x slower all masked). */
void pg_avx512_swiglu_f32(float *out, const float *gate, const float *up, size_t n) {
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m512 s = silu(_mm512_loadu_ps(gate + i));
        _mm512_storeu_ps(out + i, _mm512_mul_ps(s, _mm512_loadu_ps(up + i)));
    }
    if (i < n) {
        __mmask16 k = tail(n - i);
        __m512 s = silu(_mm512_maskz_loadu_ps(k, gate + i));
        _mm512_mask_storeu_ps(out + i, k, _mm512_mul_ps(s, _mm512_maskz_loadu_ps(k, up + i)));
    }
}

size_t pg_avx512_argmax_f32(const float *x, size_t n) {
    const __m512 ninf = _mm512_set1_ps(-INFINITY);
    __m512 mx = ninf;
    for (size_t i = 0; i < n; i += 16) {
        __mmask16 k = tail(n - i);
        __m512 v = _mm512_mask_loadu_ps(ninf, k, x + i);
        /* NaN never wins: ordered lanes only */
        __mmask16 ord = _mm512_cmp_ps_mask(v, v, _CMP_ORD_Q);
        mx = _mm512_mask_max_ps(mx, ord, mx, v);
    }
    const float best = _mm512_reduce_max_ps(mx);
    const __m512 bv = _mm512_set1_ps(best);
    for (size_t i = 0; i < n; i += 16) {
        __mmask16 hit = _mm512_mask_cmp_ps_mask(
            tail(n - i), _mm512_maskz_loadu_ps(tail(n - i), x + i), bv, _CMP_EQ_OQ);
        if (hit) return i + (size_t)__builtin_ctz(hit);
    }
    return 0; /* n == 0 or every value NaN */
}

void pg_avx512_layernorm_f32(float *out, const float *x, const float *w, const float *b, size_t m,
                             size_t n, float eps) {
    for (size_t r = 0; r < m; r++) {
        const float *xr = x + r * n;
        float *yr = out + r * n;
        __m512 acc = _mm512_setzero_ps();
        for (size_t i = 0; i < n; i += 16)
            acc = _mm512_add_ps(acc, _mm512_maskz_loadu_ps(tail(n - i), xr + i));
        const __m512 mv = _mm512_set1_ps(_mm512_reduce_add_ps(acc) / (float)n);
        acc = _mm512_setzero_ps();
        for (size_t i = 0; i < n; i += 16) {
            __mmask16 k = tail(n - i);
            __m512 d = _mm512_maskz_sub_ps(k, _mm512_maskz_loadu_ps(k, xr + i), mv);
            acc = _mm512_fmadd_ps(d, d, acc);
        }
        const __m512 rs = _mm512_set1_ps(1.0f / sqrtf(_mm512_reduce_add_ps(acc) / (float)n + eps));
        for (size_t i = 0; i < n; i += 16) {
            __mmask16 k = tail(n - i);
            __m512 d = _mm512_mul_ps(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, xr + i), mv), rs);
            __m512 y = _mm512_mul_ps(d, _mm512_maskz_loadu_ps(k, w + i));
            if (b) y = _mm512_add_ps(y, _mm512_maskz_loadu_ps(k, b + i));
            _mm512_mask_storeu_ps(yr + i, k, y);
        }
    }
}

/* 0.5 x (1 + erf(x / sqrt 2)), both erf intervals computed and blended. */
static inline __m512 gelu(__m512 x) {
    const __m512 z = _mm512_mul_ps(x, _mm512_set1_ps(PG_GELU_RSQRT2));
    const __m512 a = _mm512_abs_ps(z), z2 = _mm512_mul_ps(z, z);
    __m512 p = _mm512_set1_ps(PG_GELU_A5);
    p = _mm512_fmadd_ps(p, z2, _mm512_set1_ps(PG_GELU_A4));
    p = _mm512_fmadd_ps(p, z2, _mm512_set1_ps(PG_GELU_A3));
    p = _mm512_fmadd_ps(p, z2, _mm512_set1_ps(PG_GELU_A2));
    p = _mm512_fmadd_ps(p, z2, _mm512_set1_ps(PG_GELU_A1));
    p = _mm512_fmadd_ps(p, z2, _mm512_set1_ps(PG_GELU_A0));
    const __m512 one = _mm512_set1_ps(1.0f);
    const __m512 small = _mm512_add_ps(one, _mm512_fmadd_ps(p, z, z));
    const __m512 ac = _mm512_min_ps(a, _mm512_set1_ps(PG_GELU_BIG));
    __m512 q = _mm512_set1_ps(PG_GELU_B6);
    q = _mm512_fmadd_ps(q, ac, _mm512_set1_ps(PG_GELU_B5));
    q = _mm512_fmadd_ps(q, ac, _mm512_set1_ps(PG_GELU_B4));
    q = _mm512_fmadd_ps(q, ac, _mm512_set1_ps(PG_GELU_B3));
    q = _mm512_fmadd_ps(q, ac, _mm512_set1_ps(PG_GELU_B2));
    q = _mm512_fmadd_ps(q, ac, _mm512_set1_ps(PG_GELU_B1));
    q = _mm512_fmadd_ps(q, ac, _mm512_set1_ps(PG_GELU_B0));
    q = _mm512_fmadd_ps(q, ac, ac);
    __m512 e = pg_exp_avx512(_mm512_sub_ps(_mm512_setzero_ps(), q));
    e = _mm512_mask_mov_ps(e, _mm512_cmp_ps_mask(a, _mm512_set1_ps(PG_GELU_BIG), _CMP_GE_OQ),
                           _mm512_setzero_ps());
    const __mmask16 neg = _mm512_cmp_ps_mask(z, _mm512_setzero_ps(), _CMP_LT_OQ);
    const __m512 big = _mm512_mask_mov_ps(_mm512_sub_ps(_mm512_set1_ps(2.0f), e), neg, e);
    const __mmask16 in_small = _mm512_cmp_ps_mask(a, _mm512_set1_ps(PG_GELU_SPLIT), _CMP_LT_OQ);
    const __m512 t = _mm512_mask_mov_ps(big, in_small, small);
    return _mm512_mul_ps(_mm512_mul_ps(_mm512_set1_ps(0.5f), x), t);
}

void pg_avx512_gelu_f32(float *out, const float *x, size_t n) {
    size_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm512_storeu_ps(out + i, gelu(_mm512_loadu_ps(x + i)));
    if (i < n) {
        __mmask16 k = tail(n - i);
        _mm512_mask_storeu_ps(out + i, k, gelu(_mm512_maskz_loadu_ps(k, x + i)));
    }
}
