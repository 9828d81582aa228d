/* Quantized GEMM microkernels with AVX-VNNI VPDPBUSD (VEX, 256-bit) (see x86.h,
 * dispatch.h pg_qgemm_ukernel, kernels/qgemm.h).
 *
 * Tile 3 rows x 16 columns: per row two ymm int32 accumulators (lane j of
 * vector v = column 8v + j, four k per VPDPBUSD) and two ymm f32
 * accumulators. A holds qa + 128 (unsigned), broadcast four bytes at a
 * time; each group's integer sum starts at the packed -128 * sum q, so it
 * is the exact signed sum. W4: one 32-byte load holds two k-chunks of
 * nibbles; (x << 4) & 0xF0 and x & 0xF0 are 16 q as signed bytes, and the
 * group's sum is shifted right by 4 (exact) before the f32 step. */
#include <immintrin.h>
#include <string.h>

#include "kernels/x86/x86.h"

enum { MR = 3, NV = 2, NR = 8 * NV };

static inline __attribute__((always_inline)) void tile(const int mr, const int bits, int64_t ng,
                                                       int64_t gk, const uint8_t *a, int64_t as,
                                                       const float *asc, int64_t ass, const char *w,
                                                       float *c, int64_t ldc, int accumulate) {
    __m256 f[MR][NV];
#pragma GCC unroll 16
    for (int i = 0; i < mr; i++)
#pragma GCC unroll 16
        for (int v = 0; v < NV; v++)
            f[i][v] = accumulate ? _mm256_loadu_ps(c + i * ldc + 8 * v) : _mm256_setzero_ps();
    const size_t gbytes = (size_t)NR * 8 + (size_t)(gk * NR * bits / 8);
    const __m256i hi_mask = _mm256_set1_epi8((char)0xF0);
    for (int64_t g = 0; g < ng; g++) {
        const char *grp = w + (size_t)g * gbytes;
        const char *d = grp + NR * 8;
        const uint8_t *ag = a + g * gk;
        __m256i acc[MR][NV];
#pragma GCC unroll 16
        for (int v = 0; v < NV; v++) {
            __m256i comp = _mm256_loadu_si256((const __m256i *)(grp + 32 * v));
#pragma GCC unroll 16
            for (int i = 0; i < mr; i++)
                acc[i][v] = comp;
        }
        for (int64_t ch = 0; ch < gk / 4; ch++) {
            __m256i wv[NV];
            if (bits == 8) {
                wv[0] = _mm256_loadu_si256((const __m256i *)(d + ch * 4 * NR));
                wv[1] = _mm256_loadu_si256((const __m256i *)(d + ch * 4 * NR + 32));
            } else {
                __m256i x = _mm256_loadu_si256((const __m256i *)(d + ch * 2 * NR));
                wv[0] = _mm256_and_si256(_mm256_slli_epi16(x, 4), hi_mask);
                wv[1] = _mm256_and_si256(x, hi_mask);
            }
#pragma GCC unroll 16
            for (int i = 0; i < mr; i++) {
                int32_t q4;
                memcpy(&q4, ag + i * as + 4 * ch, 4);
                __m256i av = _mm256_set1_epi32(q4);
#pragma GCC unroll 16
                for (int v = 0; v < NV; v++)
                    acc[i][v] = _mm256_dpbusd_avx_epi32(acc[i][v], av, wv[v]);
            }
        }
#pragma GCC unroll 16
        for (int v = 0; v < NV; v++) {
            __m256 s = _mm256_loadu_ps((const float *)(grp + NR * 4) + 8 * v);
#pragma GCC unroll 16
            for (int i = 0; i < mr; i++) {
                __m256i t = bits == 4 ? _mm256_srai_epi32(acc[i][v], 4) : acc[i][v];
                __m256 si = asc ? _mm256_mul_ps(s, _mm256_set1_ps(asc[i * ass + g])) : s;
                f[i][v] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(t), si, f[i][v]);
            }
        }
    }
#pragma GCC unroll 16
    for (int i = 0; i < mr; i++)
#pragma GCC unroll 16
        for (int v = 0; v < NV; v++)
            _mm256_storeu_ps(c + i * ldc + 8 * v, f[i][v]);
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
    default:                                                                                       \
        tile(3, BITS, ngroups, gk, a, a_stride, as, as_stride, w, c, ldc, accumulate);             \
        break;                                                                                     \
    }

void pg_avxvnni_qgemm_uk_w8(int64_t ngroups, int64_t gk, const void *a, int64_t a_stride,
                            const float *as, int64_t as_stride, const int32_t *ac,
                            int64_t ac_stride, const void *w, float *c, int64_t ldc, int mr,
                            int accumulate) {
    DISPATCH(8)
}
void pg_avxvnni_qgemm_uk_w4(int64_t ngroups, int64_t gk, const void *a, int64_t a_stride,
                            const float *as, int64_t as_stride, const int32_t *ac,
                            int64_t ac_stride, const void *w, float *c, int64_t ldc, int mr,
                            int accumulate) {
    DISPATCH(4)
}
