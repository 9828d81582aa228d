/* GEMM microkernels with AVX2 + FMA (see x86.h, dispatch.h).
 *
 * f32:  tile 6 x 16 (12 ymm accumulators, 2 ymm of W per k, A broadcast),
 *       one FMA per product in increasing k: bitwise the reference.
 * bf16: tile 4 x 16; each ymm of W holds 8 columns x one k-pair, widened
 *       exactly (even k: shift left 16, odd k: mask the high half); per
 *       k-pair: FMA the odd product, then the even one (exact products), the
 *       reference's order and rounding, bit for bit. */
#include <immintrin.h>
#include <string.h>

#include "kernels/x86/x86.h"

enum { F_MR = 6, F_NV = 2, F_NR = 8 * F_NV };
enum { B_MR = 4, B_NV = 2, B_NR = 8 * B_NV };

static inline __attribute__((always_inline)) void tile_f32(const int mr, int64_t nk, const float *a,
                                                           int64_t as, const float *w, float *c,
                                                           int64_t ldc, int accumulate) {
    __m256 acc[F_MR][F_NV];
#pragma GCC unroll 16
    for (int i = 0; i < mr; i++)
#pragma GCC unroll 16
        for (int v = 0; v < F_NV; v++)
            acc[i][v] = accumulate ? _mm256_loadu_ps(c + i * ldc + 8 * v) : _mm256_setzero_ps();
    for (int64_t k = 0; k < nk; k++) {
        __m256 wv[F_NV];
#pragma GCC unroll 16
        for (int v = 0; v < F_NV; v++)
            wv[v] = _mm256_loadu_ps(w + k * F_NR + 8 * v);
#pragma GCC unroll 16
        for (int i = 0; i < mr; i++) {
            __m256 av = _mm256_broadcast_ss(a + i * as + k);
#pragma GCC unroll 16
            for (int v = 0; v < F_NV; v++)
                acc[i][v] = _mm256_fmadd_ps(av, wv[v], acc[i][v]);
        }
    }
#pragma GCC unroll 16
    for (int i = 0; i < mr; i++)
#pragma GCC unroll 16
        for (int v = 0; v < F_NV; v++)
            _mm256_storeu_ps(c + i * ldc + 8 * v, acc[i][v]);
}

void pg_avx2_gemm_uk_f32(int64_t ngroups, const void *a, int64_t a_stride, const void *w, float *c,
                         int64_t ldc, int mr, int accumulate) {
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
    const __m256i hi = _mm256_set1_epi32((int)0xffff0000u);
    __m256 acc[B_MR][B_NV];
#pragma GCC unroll 16
    for (int i = 0; i < mr; i++)
#pragma GCC unroll 16
        for (int v = 0; v < B_NV; v++)
            acc[i][v] = accumulate ? _mm256_loadu_ps(c + i * ldc + 8 * v) : _mm256_setzero_ps();
    for (int64_t g = 0; g < ng; g++) {
        __m256 we[B_NV], wo[B_NV];
#pragma GCC unroll 16
        for (int v = 0; v < B_NV; v++) {
            __m256i x = _mm256_loadu_si256((const __m256i *)(w + g * 2 * B_NR + 16 * v));
            we[v] = _mm256_castsi256_ps(_mm256_slli_epi32(x, 16));
            wo[v] = _mm256_castsi256_ps(_mm256_and_si256(x, hi));
        }
#pragma GCC unroll 16
        for (int i = 0; i < mr; i++) {
            int32_t pair;
            memcpy(&pair, a + i * as + 2 * g, 4);
            __m256i p = _mm256_set1_epi32(pair);
            __m256 ae = _mm256_castsi256_ps(_mm256_slli_epi32(p, 16));
            __m256 ao = _mm256_castsi256_ps(_mm256_and_si256(p, hi));
#pragma GCC unroll 16
            for (int v = 0; v < B_NV; v++) {
                acc[i][v] = _mm256_fmadd_ps(ao, wo[v], acc[i][v]);
                acc[i][v] = _mm256_fmadd_ps(ae, we[v], acc[i][v]);
            }
        }
    }
#pragma GCC unroll 16
    for (int i = 0; i < mr; i++)
#pragma GCC unroll 16
        for (int v = 0; v < B_NV; v++)
            _mm256_storeu_ps(c + i * ldc + 8 * v, acc[i][v]);
}

void pg_avx2_gemm_uk_bf16(int64_t ngroups, const void *a, int64_t a_stride, const void *w, float *c,
                          int64_t ldc, int mr, int accumulate) {
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
    default:
        tile_bf16(4, ngroups, a, a_stride, w, c, ldc, accumulate);
        break;
    }
}

/* Round to nearest even in integer arithmetic, NaN -> quiet NaN, 8 at a time. */
static inline __m128i cvt8(__m256 x) {
    __m256i u = _mm256_castps_si256(x);
    __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
    __m256i r = _mm256_add_epi32(u, _mm256_add_epi32(_mm256_set1_epi32(0x7fff), lsb));
    __m256i q = _mm256_or_si256(u, _mm256_set1_epi32(0x00400000));
    __m256i nan = _mm256_castps_si256(_mm256_cmp_ps(x, x, _CMP_UNORD_Q));
    r = _mm256_srli_epi32(_mm256_blendv_epi8(r, q, nan), 16);
    /* pack the 8 low halves: lanes 0..3 and 4..7 sit in separate 128-bit halves */
    __m128i lo = _mm256_castsi256_si128(r), hi = _mm256_extracti128_si256(r, 1);
    return _mm_packus_epi32(lo, hi);
}

void pg_avx2_cvt_f32_bf16(const float *src, uint16_t *dst, size_t n) {
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128((__m128i *)(dst + i), cvt8(_mm256_loadu_ps(src + i)));
    for (; i < n; i++) {
        uint32_t u;
        memcpy(&u, src + i, 4);
        if ((u & 0x7fffffffu) > 0x7f800000u) {
            dst[i] = (uint16_t)((u >> 16) | 0x40);
            continue;
        }
        u += 0x7fffu + ((u >> 16) & 1u);
        dst[i] = (uint16_t)(u >> 16);
    }
}
