/* Quantized GEMM microkernels for AVX2 cores without VNNI (Haswell to
 * Skylake, AMD Zen 1-3; see x86.h, dispatch.h pg_qgemm_ukernel,
 * kernels/qgemm.h).
 *
 * Tile 3 rows x 16 columns (two ymm of 8 columns, four k per lane), signed
 * A (a_u8 0: the packed comp is unused). VPMADDUBSW multiplies unsigned by
 * signed bytes and adds pairs into int16 with saturation, so each step
 * feeds |w| (<= 128) as the unsigned operand and a * sign(w) (|a| <= 127,
 * VPSIGNB) as the signed one: a pair sums to at most 2 * 128 * 127 = 32512,
 * never saturating, and VPMADDWD by ones widens the pairs to the exact int32
 * sum of four products, as VPDPBUSD would. W4: (x << 4) & 0xF0 and x & 0xF0
 * give 16 q (|16 q| <= 128); group sums shift right by 4. */
#include <immintrin.h>
#include <string.h>

#include "kernels/x86/x86.h"
#include "kernels/qgemm_uk.h"

enum { MR = 3, NV = 2, NR = 8 * NV };

static inline __attribute__((always_inline)) void tile(const int mr, const int bits, const int hs,
                                                       int64_t ng, int64_t gk, const int8_t *a,
                                                       int64_t as, const float *asc, int64_t ass,
                                                       const char *w, float *c, int64_t ldc,
                                                       int accumulate) {
    __m256 f[MR][NV];
#pragma GCC unroll 16
    for (int i = 0; i < mr; i++)
#pragma GCC unroll 16
        for (int v = 0; v < NV; v++)
            f[i][v] = accumulate ? _mm256_loadu_ps(c + i * ldc + 8 * v) : _mm256_setzero_ps();
    const size_t hbytes = (size_t)NR * (hs ? 2 : 4);
    const size_t gbytes = hbytes + (size_t)(gk * NR * bits / 8);
    const __m256i hi_mask = _mm256_set1_epi8((char)0xF0), ones = _mm256_set1_epi16(1);
    for (int64_t g = 0; g < ng; g++) {
        const char *grp = w + (size_t)g * gbytes;
        const char *d = grp + hbytes;
        const int8_t *ag = a + g * gk;
        __m256i acc[MR][NV];
#pragma GCC unroll 16
        for (int v = 0; v < NV; v++)
#pragma GCC unroll 16
            for (int i = 0; i < mr; i++)
                acc[i][v] = _mm256_setzero_si256();
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
            __m256i wa[NV];
#pragma GCC unroll 16
            for (int v = 0; v < NV; v++)
                wa[v] = _mm256_abs_epi8(wv[v]);
#pragma GCC unroll 16
            for (int i = 0; i < mr; i++) {
                int32_t q4;
                memcpy(&q4, ag + i * as + 4 * ch, 4);
                __m256i av = _mm256_set1_epi32(q4);
#pragma GCC unroll 16
                for (int v = 0; v < NV; v++) {
                    __m256i p = _mm256_maddubs_epi16(wa[v], _mm256_sign_epi8(av, wv[v]));
                    acc[i][v] = _mm256_add_epi32(acc[i][v], _mm256_madd_epi16(p, ones));
                }
            }
        }
#pragma GCC unroll 16
        for (int v = 0; v < NV; v++) {
            __m256 s = hs ? _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)grp + v))
                          : _mm256_loadu_ps((const float *)grp + 8 * v);
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

PG_QGEMM_UK_FAMILY(pg_avx2_qgemm_uk, 3)
