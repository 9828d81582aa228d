/* Quantized GEMM microkernels with AVX512_VNNI VPDPBUSD (see x86.h,
 * dispatch.h pg_qgemm_ukernel, kernels/qgemm.h).
 *
 * Tile 6 rows x 32 columns: per row two zmm int32 accumulators (lane j of
 * vector v = column 16v + j, four k per VPDPBUSD) and two zmm f32
 * accumulators. A holds qa + 128 (unsigned), broadcast four bytes at a
 * time; each group's integer sum starts at the packed -128 * sum q, so it
 * is the exact signed sum. W4: one 64-byte load holds two k-chunks of
 * nibbles; (x << 4) & 0xF0 and x & 0xF0 are 16 q as signed bytes, and the
 * group's sum is shifted right by 4 (exact) before the f32 step. */
#include <immintrin.h>
#include <string.h>

#include "kernels/x86/x86.h"

enum { MR = 6, NV = 2, NR = 16 * NV };

static inline __attribute__((always_inline)) void tile(const int mr, const int bits, int64_t ng,
                                                       int64_t gk, const uint8_t *a, int64_t as,
                                                       const float *asc, int64_t ass, const char *w,
                                                       float *c, int64_t ldc, int accumulate) {
    __m512 f[MR][NV];
#pragma GCC unroll 16
    for (int i = 0; i < mr; i++)
#pragma GCC unroll 16
        for (int v = 0; v < NV; v++)
            f[i][v] = accumulate ? _mm512_loadu_ps(c + i * ldc + 16 * v) : _mm512_setzero_ps();
    const size_t gbytes = (size_t)NR * 8 + (size_t)(gk * NR * bits / 8);
    const __m512i hi_mask = _mm512_set1_epi8((char)0xF0);
    for (int64_t g = 0; g < ng; g++) {
        const char *grp = w + (size_t)g * gbytes;
        const char *d = grp + NR * 8;
        const uint8_t *ag = a + g * gk;
        __m512i acc[MR][NV];
#pragma GCC unroll 16
        for (int v = 0; v < NV; v++) {
            __m512i comp = _mm512_loadu_si512(grp + 64 * v);
#pragma GCC unroll 16
            for (int i = 0; i < mr; i++)
                acc[i][v] = comp;
        }
        for (int64_t ch = 0; ch < gk / 4; ch++) {
            __m512i wv[NV];
            if (bits == 8) {
                wv[0] = _mm512_loadu_si512(d + ch * 4 * NR);
                wv[1] = _mm512_loadu_si512(d + ch * 4 * NR + 64);
            } else {
                __m512i x = _mm512_loadu_si512(d + ch * 2 * NR);
                wv[0] = _mm512_and_si512(_mm512_slli_epi16(x, 4), hi_mask);
                wv[1] = _mm512_and_si512(x, hi_mask);
            }
#pragma GCC unroll 16
            for (int i = 0; i < mr; i++) {
                int32_t q4;
                memcpy(&q4, ag + i * as + 4 * ch, 4);
                __m512i av = _mm512_set1_epi32(q4);
#pragma GCC unroll 16
                for (int v = 0; v < NV; v++)
                    acc[i][v] = _mm512_dpbusd_epi32(acc[i][v], av, wv[v]);
            }
        }
#pragma GCC unroll 16
        for (int v = 0; v < NV; v++) {
            __m512 s = _mm512_loadu_ps((const float *)(grp + NR * 4) + 16 * v);
#pragma GCC unroll 16
            for (int i = 0; i < mr; i++) {
                __m512i t = bits == 4 ? _mm512_srai_epi32(acc[i][v], 4) : acc[i][v];
                __m512 si = asc ? _mm512_mul_ps(s, _mm512_set1_ps(asc[i * ass + g])) : s;
                f[i][v] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(t), si, f[i][v]);
            }
        }
    }
#pragma GCC unroll 16
    for (int i = 0; i < mr; i++)
#pragma GCC unroll 16
        for (int v = 0; v < NV; v++)
            _mm512_storeu_ps(c + i * ldc + 16 * v, f[i][v]);
}

#define DISPATCH(BITS)                                                                             \
    switch (mr) {                                                                                  \
    case 1:                                                                                        \
        tile(1, BITS, ngroups, gk, a, a_stride, as, as_stride, w, c, ldc, accumulate);             \
        break;                                                                                     \
    case 2:                                                                                        \
        tile(2, BITS, ngroups, gk, a, a_stride, as, as_stride, w, c, ldc, accumulate);             \
        break;                                                                                     \
    case 3:                                                                                        \
        tile(3, BITS, ngroups, gk, a, a_stride, as, as_stride, w, c, ldc, accumulate);             \
        break;                                                                                     \
    case 4:                                                                                        \
        tile(4, BITS, ngroups, gk, a, a_stride, as, as_stride, w, c, ldc, accumulate);             \
        break;                                                                                     \
    case 5:                                                                                        \
        tile(5, BITS, ngroups, gk, a, a_stride, as, as_stride, w, c, ldc, accumulate);             \
        break;                                                                                     \
    default:                                                                                       \
        tile(6, BITS, ngroups, gk, a, a_stride, as, as_stride, w, c, ldc, accumulate);             \
        break;                                                                                     \
    }

void pg_avx512vnni_qgemm_uk_w8(int64_t ngroups, int64_t gk, const void *a, int64_t a_stride,
                               const float *as, int64_t as_stride, const void *w, float *c,
                               int64_t ldc, int mr, int accumulate) {
    DISPATCH(8)
}
void pg_avx512vnni_qgemm_uk_w4(int64_t ngroups, int64_t gk, const void *a, int64_t a_stride,
                               const float *as, int64_t as_stride, const void *w, float *c,
                               int64_t ldc, int mr, int accumulate) {
    DISPATCH(4)
}
