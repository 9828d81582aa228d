/* Quantized GEMM microkernels with AVX512_VNNI VPDPBUSD (see x86.h,
 * dispatch.h pg_qgemm_ukernel, kernels/qgemm.h).
 *
 * Tile 6 rows x 32 columns: per row two zmm int32 accumulators (lane j of
 * vector v = column 16v + j, four k per VPDPBUSD) and two zmm f32
 * accumulators. w_u8 layout: the weights are VPDPBUSD's unsigned operand,
 * stored as q + 128 (W8) or as nibbles q + 8 (W4), and the signed
 * activations are broadcast four bytes at a time; each group's integer sum
 * starts at the driver's -offset * (sum of the row's activations over the
 * group), so it is the exact signed sum. The group header is the f32
 * scales only (no per-column compensation: 4 bytes per column and group
 * fewer to stream). W4: one 64-byte load holds two k-chunks of nibbles,
 * x & 0xF and (x >> 4) & 0xF. With one or two rows (decode) each row keeps
 * two interleaved integer accumulators per vector (even and odd k-chunks,
 * added exactly at the group's end), so the VPDPBUSD latency chain halves. */
#include <immintrin.h>
#include <string.h>

#include "kernels/x86/x86.h"

enum { MR = 6, NV = 2, NR = 16 * NV };

static inline __attribute__((always_inline)) __m512i bcast4(const int8_t *p) {
    int32_t q4;
    memcpy(&q4, p, 4);
    return _mm512_set1_epi32(q4);
}

static inline __attribute__((always_inline)) void weights(const int bits, const char *d, int64_t ch,
                                                          __m512i wv[NV]) {
    if (bits == 8) {
        wv[0] = _mm512_loadu_si512(d + ch * 4 * NR);
        wv[1] = _mm512_loadu_si512(d + ch * 4 * NR + 64);
    } else {
        const __m512i lo_mask = _mm512_set1_epi8(0x0F);
        __m512i x = _mm512_loadu_si512(d + ch * 2 * NR);
        wv[0] = _mm512_and_si512(x, lo_mask);
        wv[1] = _mm512_and_si512(_mm512_srli_epi16(x, 4), lo_mask);
    }
}

static inline __attribute__((always_inline)) void
tile(const int mr, const int bits, const int hs, int64_t ng, int64_t gk, const int8_t *a,
     int64_t as, const float *asc, int64_t ass, const int32_t *ac, int64_t acs, const char *w,
     float *c, int64_t ldc, int accumulate) {
    const int split = mr <= 2;
    __m512 f[MR][NV];
#pragma GCC unroll 16
    for (int i = 0; i < mr; i++)
#pragma GCC unroll 16
        for (int v = 0; v < NV; v++)
            f[i][v] = accumulate ? _mm512_loadu_ps(c + i * ldc + 16 * v) : _mm512_setzero_ps();
    const size_t hbytes = (size_t)NR * (hs ? 2 : 4);
    const size_t gbytes = hbytes + (size_t)(gk * NR * bits / 8);
    for (int64_t g = 0; g < ng; g++) {
        const char *grp = w + (size_t)g * gbytes;
        const char *d = grp + hbytes;
        const int8_t *ag = a + g * gk;
        __m512i acc[MR][NV], acc2[2][NV];
#pragma GCC unroll 16
        for (int i = 0; i < mr; i++) {
            __m512i start = _mm512_set1_epi32(ac[i * acs + g]);
#pragma GCC unroll 16
            for (int v = 0; v < NV; v++)
                acc[i][v] = start;
        }
        if (split) {
#pragma GCC unroll 16
            for (int i = 0; i < mr; i++)
#pragma GCC unroll 16
                for (int v = 0; v < NV; v++)
                    acc2[i][v] = _mm512_setzero_si512();
            /* gk is a multiple of 32: an even number of k-chunks */
            for (int64_t ch = 0; ch < gk / 4; ch += 2) {
                __m512i w0[NV], w1[NV];
                weights(bits, d, ch, w0);
                weights(bits, d, ch + 1, w1);
#pragma GCC unroll 16
                for (int i = 0; i < mr; i++) {
                    __m512i a0 = bcast4(ag + i * as + 4 * ch),
                            a1 = bcast4(ag + i * as + 4 * ch + 4);
#pragma GCC unroll 16
                    for (int v = 0; v < NV; v++) {
                        acc[i][v] = _mm512_dpbusd_epi32(acc[i][v], w0[v], a0);
                        acc2[i][v] = _mm512_dpbusd_epi32(acc2[i][v], w1[v], a1);
                    }
                }
            }
#pragma GCC unroll 16
            for (int i = 0; i < mr; i++)
#pragma GCC unroll 16
                for (int v = 0; v < NV; v++)
                    acc[i][v] = _mm512_add_epi32(acc[i][v], acc2[i][v]);
        } else {
            for (int64_t ch = 0; ch < gk / 4; ch++) {
                __m512i wv[NV];
                weights(bits, d, ch, wv);
#pragma GCC unroll 16
                for (int i = 0; i < mr; i++) {
                    __m512i av = bcast4(ag + i * as + 4 * ch);
#pragma GCC unroll 16
                    for (int v = 0; v < NV; v++)
                        acc[i][v] = _mm512_dpbusd_epi32(acc[i][v], wv[v], av);
                }
            }
        }
#pragma GCC unroll 16
        for (int v = 0; v < NV; v++) {
            __m512 s = hs ? _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)grp + v))
                          : _mm512_loadu_ps((const float *)grp + 16 * v);
#pragma GCC unroll 16
            for (int i = 0; i < mr; i++) {
                __m512 si = asc ? _mm512_mul_ps(s, _mm512_set1_ps(asc[i * ass + g])) : s;
                f[i][v] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(acc[i][v]), si, f[i][v]);
            }
        }
    }
#pragma GCC unroll 16
    for (int i = 0; i < mr; i++)
#pragma GCC unroll 16
        for (int v = 0; v < NV; v++)
            _mm512_storeu_ps(c + i * ldc + 16 * v, f[i][v]);
}

#define DISPATCH(BITS, HS)                                                                         \
    switch (mr) {                                                                                  \
    case 1:                                                                                        \
        tile(1, BITS, HS, ngroups, gk, a, a_stride, as, as_stride, ac, ac_stride, w, c, ldc,       \
             accumulate);                                                                          \
        break;                                                                                     \
    case 2:                                                                                        \
        tile(2, BITS, HS, ngroups, gk, a, a_stride, as, as_stride, ac, ac_stride, w, c, ldc,       \
             accumulate);                                                                          \
        break;                                                                                     \
    case 3:                                                                                        \
        tile(3, BITS, HS, ngroups, gk, a, a_stride, as, as_stride, ac, ac_stride, w, c, ldc,       \
             accumulate);                                                                          \
        break;                                                                                     \
    case 4:                                                                                        \
        tile(4, BITS, HS, ngroups, gk, a, a_stride, as, as_stride, ac, ac_stride, w, c, ldc,       \
             accumulate);                                                                          \
        break;                                                                                     \
    case 5:                                                                                        \
        tile(5, BITS, HS, ngroups, gk, a, a_stride, as, as_stride, ac, ac_stride, w, c, ldc,       \
             accumulate);                                                                          \
        break;                                                                                     \
    default:                                                                                       \
        tile(6, BITS, HS, ngroups, gk, a, a_stride, as, as_stride, ac, ac_stride, w, c, ldc,       \
             accumulate);                                                                          \
        break;                                                                                     \
    }

#define UK(NAME, BITS, HS)                                                                         \
    void NAME(int64_t ngroups, int64_t gk, const void *a, int64_t a_stride, const float *as,       \
              int64_t as_stride, const int32_t *ac, int64_t ac_stride, const void *w, float *c,    \
              int64_t ldc, int mr, int accumulate) {                                               \
        DISPATCH(BITS, HS)                                                                         \
    }

UK(pg_avx512vnni_qgemm_uk_w8, 8, 0)
UK(pg_avx512vnni_qgemm_uk_w4, 4, 0)
UK(pg_avx512vnni_qgemm_uk_w8_hs, 8, 1)
UK(pg_avx512vnni_qgemm_uk_w4_hs, 4, 1)
