/* MXFP4 GEMM microkernel for AVX2 (pg_kernel_table.mxfp4, dispatch.h; spec
 * pg_ref_mxfp4_uk / pg_ref_mxfp4_gemm in ref/mxfp4.c). Used by the avx2
 * table, and by the avx512 ones on CPUs without AVX512_VNNI.
 *
 * Tile 3 rows x 16 columns (two ymm of 8 columns, four k per lane), signed
 * A, as x86/qgemm_avx2.c. A packed block is the columns' 16 E8M0 bytes,
 * then 8 k-chunks of 32 bytes: codes of columns 0-7 in the low nibbles,
 * 8-15 in the high ones (vw 32). VPSHUFB expands the codes to kv in
 * [-12, 12]; VPMADDUBSW multiplies unsigned by signed bytes with int16
 * saturation, so each step feeds |kv| (<= 12) as the unsigned operand and
 * a * sign(kv) (VPSIGNB, |a| <= 127) as the signed one: a pair sums to at
 * most 2 * 12 * 127 = 3048, never saturating; VPMADDWD by ones widens the
 * pairs to the exact int32 sum of four products. Block end: d = 2^(E-128)
 * from the E bytes as f32 bits, times the row's activation scale, one FMA
 * per row and vector. */
#include <immintrin.h>
#include <string.h>

#include "kernels/x86/x86.h"

enum { MR = 3, NV = 2, NR = 8 * NV, KB = 32, CHUNKS = KB / 4 };

/* 8 E8M0 bytes -> 2^(E-128) as f32 (pg_e8m0_half_to_f32). */
static inline __attribute__((always_inline)) __m256 e8m0_half(const char *e) {
    const __m256i x = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)e));
    const __m256i big = _mm256_slli_epi32(_mm256_sub_epi32(x, _mm256_set1_epi32(1)), 23);
    const __m256i small = _mm256_sllv_epi32(_mm256_set1_epi32(0x00200000), x);
    const __m256i sub = _mm256_cmpgt_epi32(_mm256_set1_epi32(2), x);
    return _mm256_castsi256_ps(_mm256_blendv_epi8(big, small, sub));
}

static inline __attribute__((always_inline)) void tile(const int mr, int64_t ng, const int8_t *a,
                                                       int64_t as, const float *asc, int64_t ass,
                                                       const char *w, float *c, int64_t ldc,
                                                       int accumulate) {
    const __m256i lut = _mm256_broadcastsi128_si256(
        _mm_setr_epi8(0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12));
    const __m256i lo = _mm256_set1_epi8(0x0F), ones = _mm256_set1_epi16(1);
    __m256 f[MR][NV];
#pragma GCC unroll 16
    for (int i = 0; i < mr; i++)
#pragma GCC unroll 16
        for (int v = 0; v < NV; v++)
            f[i][v] = accumulate ? _mm256_loadu_ps(c + i * ldc + 8 * v) : _mm256_setzero_ps();
    const size_t gbytes = NR + KB * NR / 2;
    for (int64_t g = 0; g < ng; g++) {
        const char *grp = w + (size_t)g * gbytes;
        const char *d = grp + NR;
        const int8_t *ag = a + g * KB;
        __m256i acc[MR][NV];
#pragma GCC unroll 16
        for (int i = 0; i < mr; i++)
#pragma GCC unroll 16
            for (int v = 0; v < NV; v++)
                acc[i][v] = _mm256_setzero_si256();
#pragma GCC unroll 8
        for (int ch = 0; ch < CHUNKS; ch++) {
            const __m256i x = _mm256_loadu_si256((const __m256i *)(d + ch * 32));
            __m256i wv[NV], wa[NV];
            wv[0] = _mm256_shuffle_epi8(lut, _mm256_and_si256(x, lo));
            wv[1] = _mm256_shuffle_epi8(lut, _mm256_and_si256(_mm256_srli_epi16(x, 4), lo));
#pragma GCC unroll 16
            for (int v = 0; v < NV; v++)
                wa[v] = _mm256_abs_epi8(wv[v]);
#pragma GCC unroll 16
            for (int i = 0; i < mr; i++) {
                int32_t q4;
                memcpy(&q4, ag + i * as + 4 * ch, 4);
                const __m256i av = _mm256_set1_epi32(q4);
#pragma GCC unroll 16
                for (int v = 0; v < NV; v++) {
                    const __m256i p = _mm256_maddubs_epi16(wa[v], _mm256_sign_epi8(av, wv[v]));
                    acc[i][v] = _mm256_add_epi32(acc[i][v], _mm256_madd_epi16(p, ones));
                }
            }
        }
#pragma GCC unroll 16
        for (int v = 0; v < NV; v++) {
            const __m256 s = e8m0_half(grp + 8 * v);
#pragma GCC unroll 16
            for (int i = 0; i < mr; i++) {
                const __m256 si = _mm256_mul_ps(s, _mm256_set1_ps(asc[i * ass + g]));
                f[i][v] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(acc[i][v]), si, f[i][v]);
            }
        }
    }
#pragma GCC unroll 16
    for (int i = 0; i < mr; i++)
#pragma GCC unroll 16
        for (int v = 0; v < NV; v++)
            _mm256_storeu_ps(c + i * ldc + 8 * v, f[i][v]);
}

void pg_avx2_mxfp4_uk(int64_t ngroups, int64_t gk, const void *a, int64_t a_stride, const float *as,
                      int64_t as_stride, const int32_t *ac, int64_t ac_stride, const void *w,
                      float *c, int64_t ldc, int mr, int accumulate) {
    (void)gk;
    (void)ac;
    (void)ac_stride;
    switch (mr) {
    case 1:
        tile(1, ngroups, a, a_stride, as, as_stride, w, c, ldc, accumulate);
        break;
    case 2:
        tile(2, ngroups, a, a_stride, as, as_stride, w, c, ldc, accumulate);
        break;
    default:
        tile(MR, ngroups, a, a_stride, as, as_stride, w, c, ldc, accumulate);
        break;
    }
}
