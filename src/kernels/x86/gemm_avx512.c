/* GEMM microkernels with AVX-512 F (see x86.h, dispatch.h).
 *
 * f32:  tile 6 x 64 (24 zmm accumulators, 4 zmm of W per k, A broadcast),
 *       one FMA per product in increasing k: bitwise the reference.
 * bf16: for CPUs without AVX512_BF16. Tile 8 x 32; each zmm of W holds 16
 *       columns x one k-pair, widened exactly to f32 (even k: shift left 16,
 *       odd k: mask the high half); per k-pair: FMA the odd product, then the
 *       even one. Products of two BF16 are exact in f32, so this is the
 *       reference's (and VDPBF16PS's) order and rounding, bit for bit. */
#include <immintrin.h>
#include <string.h>

#include "kernels/x86/x86.h"

enum { F_MR = 6, F_NV = 4, F_NR = 16 * F_NV };
enum { B_MR = 8, B_NV = 2, B_NR = 16 * B_NV };

static inline __attribute__((always_inline)) void tile_f32(const int mr, int64_t nk, const float *a,
                                                           int64_t as, const float *w, float *c,
                                                           int64_t ldc, int accumulate) {
    __m512 acc[F_MR][F_NV];
#pragma GCC unroll 16
    for (int i = 0; i < mr; i++)
#pragma GCC unroll 16
        for (int v = 0; v < F_NV; v++)
            acc[i][v] = accumulate ? _mm512_loadu_ps(c + i * ldc + 16 * v) : _mm512_setzero_ps();
    for (int64_t k = 0; k < nk; k++) {
        __m512 wv[F_NV];
#pragma GCC unroll 16
        for (int v = 0; v < F_NV; v++)
            wv[v] = _mm512_loadu_ps(w + k * F_NR + 16 * v);
#pragma GCC unroll 16
        for (int i = 0; i < mr; i++) {
            __m512 av = _mm512_set1_ps(a[i * as + k]);
#pragma GCC unroll 16
            for (int v = 0; v < F_NV; v++)
                acc[i][v] = _mm512_fmadd_ps(av, wv[v], acc[i][v]);
        }
    }
#pragma GCC unroll 16
    for (int i = 0; i < mr; i++)
#pragma GCC unroll 16
        for (int v = 0; v < F_NV; v++)
            _mm512_storeu_ps(c + i * ldc + 16 * v, acc[i][v]);
}

void pg_avx512_gemm_uk_f32(int64_t ngroups, const void *a, int64_t a_stride, const void *w,
                           float *c, int64_t ldc, int mr, int accumulate) {
    switch (mr) {
    case 1:
        tile_f32(1, ngroups, a, a_stride, w, c, ldc, accumulate);
        break;
    case 2:
        tile_f32(2, ngroups, a, a_stride, w, c, ldc, accumulate);
        break;
    case 3:
        tile_f32(3, ngroups, a, a_stride, w, c, ldc, accumulate);
        break;
    case 4:
        tile_f32(4, ngroups, a, a_stride, w, c, ldc, accumulate);
        break;
    case 5:
        tile_f32(5, ngroups, a, a_stride, w, c, ldc, accumulate);
        break;
    default:
        tile_f32(6, ngroups, a, a_stride, w, c, ldc, accumulate);
        break;
    }
}

static inline __attribute__((always_inline)) void tile_bf16(const int mr, int64_t ng,
                                                            const uint16_t *a, int64_t as,
                                                            const uint16_t *w, float *c,
                                                            int64_t ldc, int accumulate) {
    const __m512i hi = _mm512_set1_epi32((int)0xffff0000u);
    __m512 acc[B_MR][B_NV];
#pragma GCC unroll 16
    for (int i = 0; i < mr; i++)
#pragma GCC unroll 16
        for (int v = 0; v < B_NV; v++)
            acc[i][v] = accumulate ? _mm512_loadu_ps(c + i * ldc + 16 * v) : _mm512_setzero_ps();
    for (int64_t g = 0; g < ng; g++) {
        __m512 we[B_NV], wo[B_NV];
#pragma GCC unroll 16
        for (int v = 0; v < B_NV; v++) {
            __m512i x = _mm512_loadu_si512(w + g * 2 * B_NR + 32 * v);
            we[v] = _mm512_castsi512_ps(_mm512_slli_epi32(x, 16));
            wo[v] = _mm512_castsi512_ps(_mm512_and_si512(x, hi));
        }
#pragma GCC unroll 16
        for (int i = 0; i < mr; i++) {
            int32_t pair;
            memcpy(&pair, a + i * as + 2 * g, 4);
            __m512i p = _mm512_set1_epi32(pair);
            __m512 ae = _mm512_castsi512_ps(_mm512_slli_epi32(p, 16));
            __m512 ao = _mm512_castsi512_ps(_mm512_and_si512(p, hi));
#pragma GCC unroll 16
            for (int v = 0; v < B_NV; v++) {
                acc[i][v] = _mm512_fmadd_ps(ao, wo[v], acc[i][v]);
                acc[i][v] = _mm512_fmadd_ps(ae, we[v], acc[i][v]);
            }
        }
    }
#pragma GCC unroll 16
    for (int i = 0; i < mr; i++)
#pragma GCC unroll 16
        for (int v = 0; v < B_NV; v++)
            _mm512_storeu_ps(c + i * ldc + 16 * v, acc[i][v]);
}

void pg_avx512_gemm_uk_bf16(int64_t ngroups, const void *a, int64_t a_stride, const void *w,
                            float *c, int64_t ldc, int mr, int accumulate) {
    switch (mr) {
    case 1:
        tile_bf16(1, ngroups, a, a_stride, w, c, ldc, accumulate);
        break;
    case 2:
        tile_bf16(2, ngroups, a, a_stride, w, c, ldc, accumulate);
        break;
    case 3:
        tile_bf16(3, ngroups, a, a_stride, w, c, ldc, accumulate);
        break;
    case 4:
        tile_bf16(4, ngroups, a, a_stride, w, c, ldc, accumulate);
        break;
    case 5:
        tile_bf16(5, ngroups, a, a_stride, w, c, ldc, accumulate);
        break;
    case 6:
        tile_bf16(6, ngroups, a, a_stride, w, c, ldc, accumulate);
        break;
    case 7:
        tile_bf16(7, ngroups, a, a_stride, w, c, ldc, accumulate);
        break;
    default:
        tile_bf16(8, ngroups, a, a_stride, w, c, ldc, accumulate);
        break;
    }
}

/* Round to nearest even in integer arithmetic (the reference's rule,
 * NaN -> quiet NaN), 16 at a time. */
static inline __m256i cvt16(__m512 x) {
    __m512i u = _mm512_castps_si512(x);
    __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
    __m512i r = _mm512_add_epi32(u, _mm512_add_epi32(_mm512_set1_epi32(0x7fff), lsb));
    __m512i q = _mm512_or_si512(u, _mm512_set1_epi32(0x00400000));
    __mmask16 nan = _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);
    r = _mm512_mask_mov_epi32(r, nan, q);
    return _mm512_cvtepi32_epi16(_mm512_srli_epi32(r, 16));
}

void pg_avx512_cvt_f32_bf16(const float *src, uint16_t *dst, size_t n) {
    size_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm256_storeu_si256((__m256i *)(dst + i), cvt16(_mm512_loadu_ps(src + i)));
    if (i < n) {
        __mmask16 m = (__mmask16)((1u << (n - i)) - 1u);
        _mm256_mask_storeu_epi16(dst + i, m, cvt16(_mm512_maskz_loadu_ps(m, src + i)));
    }
}
