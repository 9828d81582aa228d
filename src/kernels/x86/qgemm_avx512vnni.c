/* Quantized GEMM microkernels with AVX512_VNNI VPDPBUSD (see x86.h,
 * dispatch.h pg_qgemm_ukernel, kernels/qgemm.h).
 *
 * Tile 6 rows x 32 columns: per row two zmm int32 accumulators (16 columns
 * each, four k per VPDPBUSD) and two zmm f32 accumulators. w_u8 layout: the
 * weights are VPDPBUSD's unsigned operand, stored as q + 128 (W8) or as
 * nibbles u = q + 8 (W4), and the signed activations are broadcast four bytes
 * at a time; each group's integer sums start at the driver's corrections
 * (-offset * the row's activation sum over the group), so they end exact.
 * The group header is the scales only (F16 or f32).
 *
 * W4: one 64-byte load x holds one k-chunk of all 32 columns, columns 0-15
 * in the low nibbles and 16-31 in the high ones. Instead of unpacking both
 * halves (and, shift, and per chunk) the kernel feeds the raw bytes x =
 * u_lo + 16 u_hi and h = x & 0xF0 = 16 u_hi to VPDPBUSD (one vpandd per
 * chunk): acc_x = sum x a and acc_h = sum 16 u_hi a, started at 17 c and
 * 16 c (c = -8 * sum a: the driver's pair per row and group), so at the end
 * of the group acc_x - acc_h = isum_lo and acc_h >> 4 = isum_hi, exactly
 * (VPDPBUSD and vpsubd wrap modulo 2^32, the true values fit in int32 and
 * acc_h is an exact multiple of 16).
 *
 * Cost model (measured on Zen 4, tests of 16 VPDPBUSD plus 2 other zmm ops
 * per loop): VPDPBUSD, FMA, FMUL, VPMADDUBSW/VPMADDWD and zmm stores share
 * the two multiply pipes (each costs one VPDPBUSD slot); vcvtdq2ps, vcvtph2ps,
 * logic, shifts, integer add/sub, loads, broadcasts and register moves
 * issue beside them for free. So a 32-k group of the 6x32 tile costs 96
 * VPDPBUSD + 12 FMA (the per-group fmaf of the specification): at most 89%
 * of the VPDPBUSD peak at group 32 (97% measured for the kernel alone per
 * channel, 86% at group 32), whatever the tile shape or the nibble unpack.
 * The kernel avoids the other paying ops (no f32 spill; per token / per
 * channel no scale multiply). With per-(row, group) activation scales (asc,
 * GGUF Q8_0 / Q4_0 arithmetic) each group also pays 12 MUL (weight scale x
 * activation scale, rounded once as the reference's s * as): 96 + 12 + 12 =
 * 120 slots, at most 80% of the peak; measured 78% for the kernel alone
 * (bench kernels --kernels quk, "g32 act"; 2 F16 vcvtph2ps, 12 vcvtdq2ps, 6
 * broadcasts, the acc-init copies and the spilled row pointers cost nothing
 * measurable: a W tile resident in L1 (K 512) or in L2 (K 2048) measures the
 * same). Fewer paying ops would need other arithmetic than the reference's
 * (the 192 scale products of a tile and group are all distinct), so the
 * act-group GEMM tops out near 75% of the peak at M = 512.
 *
 * A 32-k group (GGUF Q4_0 / Q8_0, W4A8 g32) is straight-line code: the tile
 * is specialised on gk == 32 and its 8 k-chunks unrolled (about +6% over a
 * loop of 8); other groups and per channel run a plain k-chunk loop (which
 * streams long K best: 99% of the peak alone). With one or two rows
 * (decode) each row keeps a second set of integer accumulators (odd
 * k-chunks, added exactly at the group's end) so the VPDPBUSD latency chain
 * halves, in a two-chunk loop that loads both chunks first. */
#include <immintrin.h>
#include <string.h>

#include "kernels/x86/x86.h"

enum { MR = 6, NV = 2, NR = 16 * NV, KB = 32 };

static inline __attribute__((always_inline)) __m512i bcast4(const int8_t *p) {
    int32_t q4;
    memcpy(&q4, p, 4);
    return _mm512_set1_epi32(q4);
}

/* Weight vectors of k-chunk ch: W8 the two column halves, W4 x and x & 0xF0. */
static inline __attribute__((always_inline)) void weights(const int bits, const char *d, int64_t ch,
                                                          __m512i wv[NV]) {
    if (bits == 8) {
        wv[0] = _mm512_loadu_si512(d + ch * 4 * NR);
        wv[1] = _mm512_loadu_si512(d + ch * 4 * NR + 64);
    } else {
        wv[0] = _mm512_loadu_si512(d + ch * 2 * NR);
        wv[1] = _mm512_and_si512(wv[0], _mm512_set1_epi8((char)0xF0));
    }
}

/* One k-chunk (4 k) of rows 0..mr-1 into acc. */
static inline __attribute__((always_inline)) void chunk(const int mr, const int bits, const char *d,
                                                        const int8_t *ag, int64_t as, int64_t ch,
                                                        __m512i acc[MR][NV]) {
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

/* The tile; g32: gk is 32 (compile-time, straight-line groups). */
static inline __attribute__((always_inline)) void
tile(const int mr, const int bits, const int hs, const int g32, int64_t ng, int64_t gk,
     const int8_t *a, int64_t as, const float *asc, int64_t ass, const int32_t *ac, int64_t acs,
     const char *w, float *c, int64_t ldc, int accumulate) {
    const int split = mr <= 2;
    __m512 f[MR][NV];
#pragma GCC unroll 16
    for (int i = 0; i < mr; i++)
#pragma GCC unroll 16
        for (int v = 0; v < NV; v++)
            f[i][v] = accumulate ? _mm512_loadu_ps(c + i * ldc + 16 * v) : _mm512_setzero_ps();
    const size_t hbytes = (size_t)NR * (hs ? 2 : 4);
    const size_t gbytes = hbytes + (size_t)(gk * NR * bits / 8);
    if (g32) gk = KB;
    for (int64_t g = 0; g < ng; g++) {
        const char *grp = w + (size_t)g * gbytes;
        const char *d = grp + hbytes;
        const int8_t *ag = a + g * gk;
        __m512i acc[MR][NV], acc2[2][NV];
#pragma GCC unroll 16
        for (int i = 0; i < mr; i++) {
            if (bits == 8) {
                acc[i][0] = acc[i][1] = _mm512_set1_epi32(ac[i * acs + g]);
            } else {
                acc[i][0] = _mm512_set1_epi32(ac[i * acs + 2 * g]);
                acc[i][1] = _mm512_set1_epi32(ac[i * acs + 2 * g + 1]);
            }
        }
        if (split) {
            /* decode: two k-chunks per step, both loaded first (measured to
             * stream memory better than an unrolled 32-k block) */
#pragma GCC unroll 16
            for (int i = 0; i < mr; i++)
#pragma GCC unroll 16
                for (int v = 0; v < NV; v++)
                    acc2[i][v] = _mm512_setzero_si512();
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
        } else if (g32) { /* one 32-k group: straight-line code */
#pragma GCC unroll 8
            for (int ch = 0; ch < KB / 4; ch++)
                chunk(mr, bits, d, ag, as, ch, acc);
        } else {
            for (int64_t ch = 0; ch < gk / 4; ch++)
                chunk(mr, bits, d, ag, as, ch, acc);
        }
        if (split)
#pragma GCC unroll 16
            for (int i = 0; i < mr; i++)
#pragma GCC unroll 16
                for (int v = 0; v < NV; v++)
                    acc[i][v] = _mm512_add_epi32(acc[i][v], acc2[i][v]);
        __m512 s[NV];
#pragma GCC unroll 16
        for (int v = 0; v < NV; v++)
            s[v] = hs ? _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)grp + v))
                      : _mm512_loadu_ps((const float *)grp + 16 * v);
#pragma GCC unroll 16
        for (int i = 0; i < mr; i++) {
            __m512i x[NV] = {acc[i][0], acc[i][1]};
            if (bits == 4) { /* isum_lo, isum_hi (the shift is exact) */
                x[0] = _mm512_sub_epi32(x[0], x[1]);
                x[1] = _mm512_srai_epi32(x[1], 4);
            }
#pragma GCC unroll 16
            for (int v = 0; v < NV; v++) {
                __m512 si = asc ? _mm512_mul_ps(s[v], _mm512_set1_ps(asc[i * ass + g])) : s[v];
                f[i][v] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(x[v]), si, f[i][v]);
            }
        }
    }
#pragma GCC unroll 16
    for (int i = 0; i < mr; i++)
#pragma GCC unroll 16
        for (int v = 0; v < NV; v++)
            _mm512_storeu_ps(c + i * ldc + 16 * v, f[i][v]);
}

#define TILE(MR_, BITS, HS)                                                                        \
    do {                                                                                           \
        if (gk == KB)                                                                              \
            tile(MR_, BITS, HS, 1, ngroups, gk, a, a_stride, as, as_stride, ac, ac_stride, w, c,   \
                 ldc, accumulate);                                                                 \
        else                                                                                       \
            tile(MR_, BITS, HS, 0, ngroups, gk, a, a_stride, as, as_stride, ac, ac_stride, w, c,   \
                 ldc, accumulate);                                                                 \
    } while (0)

#define DISPATCH(BITS, HS)                                                                         \
    switch (mr) {                                                                                  \
    case 1:                                                                                        \
        TILE(1, BITS, HS);                                                                         \
        break;                                                                                     \
    case 2:                                                                                        \
        TILE(2, BITS, HS);                                                                         \
        break;                                                                                     \
    case 3:                                                                                        \
        TILE(3, BITS, HS);                                                                         \
        break;                                                                                     \
    case 4:                                                                                        \
        TILE(4, BITS, HS);                                                                         \
        break;                                                                                     \
    case 5:                                                                                        \
        TILE(5, BITS, HS);                                                                         \
        break;                                                                                     \
    default:                                                                                       \
        TILE(MR, BITS, HS);                                                                        \
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
