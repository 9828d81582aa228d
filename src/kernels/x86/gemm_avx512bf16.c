/* GEMM microkernel with AVX512_BF16 VDPBF16PS (see x86.h, dispatch.h).
 *
 * Tile 6 rows x 64 columns: 24 zmm accumulators, 4 zmm of W per k-pair, A
 * broadcast from memory ({1to16} embedded broadcast of one row's k-pair).
 * Lane j of accumulator v holds column 16v + j for the whole K, and each
 * VDPBF16PS adds (odd product, then even product) to it: the order of the
 * reference, bit for bit (Intel SDM pseudocode; verified on Zen 4). */
#include <immintrin.h>
#include <string.h>

#include "kernels/x86/x86.h"

enum { MR = 6, NV = 4, NR = 16 * NV };

/* One k-group: acc[i][v] += A(row i, pair g) . W(pair g, columns 16v..). */
static inline __attribute__((always_inline)) void step(const int mr, int64_t g, const uint16_t *a,
                                                       int64_t as, const uint16_t *w,
                                                       __m512 acc[MR][NV]) {
    __m512bh wv[NV];
#pragma GCC unroll 16
    for (int v = 0; v < NV; v++)
        wv[v] = (__m512bh)_mm512_loadu_si512(w + g * 2 * NR + 32 * v);
#pragma GCC unroll 16
    for (int i = 0; i < mr; i++) {
        int32_t pair;
        memcpy(&pair, a + i * as + 2 * g, 4);
        __m512bh av = (__m512bh)_mm512_set1_epi32(pair);
#pragma GCC unroll 16
        for (int v = 0; v < NV; v++)
            acc[i][v] = _mm512_dpbf16_ps(acc[i][v], av, wv[v]);
    }
}

/* k-groups from 0 that also prefetch `per` lines each of pf[0, npf) (the
 * last one fewer); returns the first group left. */
static inline __attribute__((always_inline)) int64_t
prefetch_steps(const int mr, const int per, int64_t ng, const uint16_t *a, int64_t as,
               const uint16_t *w, __m512 acc[MR][NV], const char *pf, int64_t npf) {
    int64_t g = 0;
    for (; g < ng && (g + 1) * per <= npf; g++) {
#pragma GCC unroll 4
        for (int q = 0; q < per; q++)
            _mm_prefetch(pf + 64 * (g * per + q), _MM_HINT_T1);
        step(mr, g, a, as, w, acc);
    }
    if (g < ng && g * per < npf) {
        for (int64_t l = g * per; l < npf; l++)
            _mm_prefetch(pf + 64 * l, _MM_HINT_T1);
        step(mr, g, a, as, w, acc);
        g++;
    }
    return g;
}

/* The tile; the first k-groups also prefetch the lines of pf (the next W slice,
 * into L2: this loop reads W from L2 already, so L1 is left to A and W's
 * current lines). */
static inline __attribute__((always_inline)) void tile(const int mr, int64_t ng, const uint16_t *a,
                                                       int64_t as, const uint16_t *w, float *c,
                                                       int64_t ldc, int accumulate, const char *pf,
                                                       int64_t npf) {
    __m512 acc[MR][NV];
#pragma GCC unroll 16
    for (int i = 0; i < mr; i++)
#pragma GCC unroll 16
        for (int v = 0; v < NV; v++)
            acc[i][v] = accumulate ? _mm512_loadu_ps(c + i * ldc + 16 * v) : _mm512_setzero_ps();
    int64_t g = 0;
    switch (npf > 0 ? (npf + ng - 1) / ng : 0) { /* lines per k-group */
    case 0:
        break;
    case 1:
        g = prefetch_steps(mr, 1, ng, a, as, w, acc, pf, npf);
        break;
    case 2:
        g = prefetch_steps(mr, 2, ng, a, as, w, acc, pf, npf);
        break;
    case 3:
        g = prefetch_steps(mr, 3, ng, a, as, w, acc, pf, npf);
        break;
    default:
        g = prefetch_steps(mr, 4, ng, a, as, w, acc, pf, npf);
        break;
    }
    for (; g < ng; g++)
        step(mr, g, a, as, w, acc);
#pragma GCC unroll 16
    for (int i = 0; i < mr; i++)
#pragma GCC unroll 16
        for (int v = 0; v < NV; v++)
            _mm512_storeu_ps(c + i * ldc + 16 * v, acc[i][v]);
}

void pg_avx512bf16_gemm_uk_bf16_pf(int64_t ngroups, const void *a, int64_t a_stride, const void *w,
                                   float *c, int64_t ldc, int mr, int accumulate, const void *pf,
                                   int64_t pf_lines) {
    if (pf_lines > 4 * ngroups) pf_lines = 4 * ngroups;
    if (!pf || pf_lines < 0) pf_lines = 0;
    switch (mr) {
    case 1:
        tile(1, ngroups, a, a_stride, w, c, ldc, accumulate, pf, pf_lines);
        break;
    case 2:
        tile(2, ngroups, a, a_stride, w, c, ldc, accumulate, pf, pf_lines);
        break;
    case 3:
        tile(3, ngroups, a, a_stride, w, c, ldc, accumulate, pf, pf_lines);
        break;
    case 4:
        tile(4, ngroups, a, a_stride, w, c, ldc, accumulate, pf, pf_lines);
        break;
    case 5:
        tile(5, ngroups, a, a_stride, w, c, ldc, accumulate, pf, pf_lines);
        break;
    default:
        tile(6, ngroups, a, a_stride, w, c, ldc, accumulate, pf, pf_lines);
        break;
    }
}

void pg_avx512bf16_gemm_uk_bf16(int64_t ngroups, const void *a, int64_t a_stride, const void *w,
                                float *c, int64_t ldc, int mr, int accumulate) {
    pg_avx512bf16_gemm_uk_bf16_pf(ngroups, a, a_stride, w, c, ldc, mr, accumulate, NULL, 0);
}

/* VCVTNEPS2BF16: round to nearest even, NaN -> quiet NaN (the reference's
 * rule); denormal inputs become zero (DAZ). */
void pg_avx512bf16_cvt_f32_bf16(const float *src, uint16_t *dst, size_t n) {
    size_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm256_storeu_si256((__m256i *)(dst + i),
                            (__m256i)_mm512_cvtneps_pbh(_mm512_loadu_ps(src + i)));
    if (i < n) {
        __mmask16 m = (__mmask16)((1u << (n - i)) - 1u);
        __m256i h = (__m256i)_mm512_cvtneps_pbh(_mm512_maskz_loadu_ps(m, src + i));
        _mm256_mask_storeu_epi16(dst + i, m, h);
    }
}
