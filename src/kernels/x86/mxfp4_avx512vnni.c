/* MXFP4 GEMM microkernel with AVX512_VNNI VPDPBUSD (pg_kernel_table.mxfp4,
 * dispatch.h; spec pg_ref_mxfp4_uk / pg_ref_mxfp4_gemm in ref/mxfp4.c).
 *
 * Tile 6 rows x 32 columns, as x86/qgemm_avx512vnni.c: per row two zmm
 * int32 accumulators (16 columns each, four k per VPDPBUSD) and two zmm f32
 * accumulators. A packed block (32 k) is the columns' 32 E8M0 bytes, then
 * 8 k-chunks of 64 bytes: the 4-bit codes of columns 0-15 in the low
 * nibbles, of columns 16-31 in the high ones (vw 64).
 *
 * VPDPBUSD multiplies unsigned by signed bytes. The codes are expanded in
 * registers by VPSHUFB (a 16-entry table in every 128-bit lane) straight to
 * u = kv + 12 in [0, 24], the unsigned operand, and the signed activations
 * are broadcast four bytes at a time; each block's sums start at the input
 * stage's correction -12 * sum_k qa[m,k] (one int32 per row and block,
 * pg_qfmt_input), so they end at exactly sum qa * kv. This keeps the
 * offset on the activation side, nothing per column is streamed.
 * (The alternative sign trick, |kv| unsigned and the sign moved onto the
 * activation, needs a per-(row, column) negation at 512 bits, where there
 * is no VPSIGNB: a masked subtract per row and vector, as many extra ops
 * as VPDPBUSDs.) Per chunk: one load, an and, a shift + and, two VPSHUFB
 * (none on the multiply pipes), then 2 mr VPDPBUSD.
 *
 * Block end: d = 2^(E-128) built from the E bytes as f32 bits (E >= 2:
 * (E - 1) << 23; E = 0, 1: the subnormals 0x00200000 << E), times the
 * row's activation scale (rounded, as the reference), one FMA per row and
 * vector in increasing block order. With one or two rows (decode) each row
 * keeps a second pair of integer accumulators for the odd k-chunks (added
 * exactly at the block's end) so the VPDPBUSD chains halve. */
#include <immintrin.h>
#include <string.h>

#include "kernels/x86/x86.h"

enum { MR = 6, NV = 2, NR = 16 * NV, KB = 32, CHUNKS = KB / 4 };

static inline __attribute__((always_inline)) __m512i bcast4(const int8_t *p) {
    int32_t q4;
    memcpy(&q4, p, 4);
    return _mm512_set1_epi32(q4);
}

/* Codes of k-chunk ch (64 bytes) -> kv + 12 of columns 0-15 and 16-31. */
static inline __attribute__((always_inline)) void weights(const char *d, int ch, __m512i lut,
                                                          __m512i wv[NV]) {
    const __m512i lo = _mm512_set1_epi8(0x0F);
    const __m512i x = _mm512_loadu_si512(d + ch * 64);
    wv[0] = _mm512_shuffle_epi8(lut, _mm512_and_si512(x, lo));
    wv[1] = _mm512_shuffle_epi8(lut, _mm512_and_si512(_mm512_srli_epi16(x, 4), lo));
}

/* 16 E8M0 bytes -> 2^(E-128) as f32 (pg_e8m0_half_to_f32). */
static inline __attribute__((always_inline)) __m512 e8m0_half(const uint8_t *e) {
    const __m512i x = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)e));
    const __m512i big = _mm512_slli_epi32(_mm512_sub_epi32(x, _mm512_set1_epi32(1)), 23);
    const __m512i small = _mm512_sllv_epi32(_mm512_set1_epi32(0x00200000), x);
    const __mmask16 sub = _mm512_cmplt_epu32_mask(x, _mm512_set1_epi32(2));
    return _mm512_castsi512_ps(_mm512_mask_blend_epi32(sub, big, small));
}

static inline __attribute__((always_inline)) void
tile(const int mr, int64_t ng, const int8_t *a, int64_t as, const float *asc, int64_t ass,
     const int32_t *ac, int64_t acs, const char *w, float *c, int64_t ldc, int accumulate) {
    const int split = mr <= 2;
    const __m512i lut = _mm512_broadcast_i32x4(
        _mm_setr_epi8(12, 13, 14, 15, 16, 18, 20, 24, 12, 11, 10, 9, 8, 6, 4, 0));
    __m512 f[MR][NV];
#pragma GCC unroll 16
    for (int i = 0; i < mr; i++)
#pragma GCC unroll 16
        for (int v = 0; v < NV; v++)
            f[i][v] = accumulate ? _mm512_loadu_ps(c + i * ldc + 16 * v) : _mm512_setzero_ps();
    const size_t gbytes = NR + KB * NR / 2;
    for (int64_t g = 0; g < ng; g++) {
        const char *grp = w + (size_t)g * gbytes;
        const char *d = grp + NR;
        const int8_t *ag = a + g * KB;
        __m512i acc[MR][NV], acc2[2][NV];
#pragma GCC unroll 16
        for (int i = 0; i < mr; i++)
            acc[i][0] = acc[i][1] = _mm512_set1_epi32(ac[i * acs + g]);
        if (split) {
#pragma GCC unroll 16
            for (int i = 0; i < mr; i++)
#pragma GCC unroll 16
                for (int v = 0; v < NV; v++)
                    acc2[i][v] = _mm512_setzero_si512();
#pragma GCC unroll 4
            for (int ch = 0; ch < CHUNKS; ch += 2) {
                __m512i w0[NV], w1[NV];
                weights(d, ch, lut, w0);
                weights(d, ch + 1, lut, w1);
#pragma GCC unroll 16
                for (int i = 0; i < mr; i++) {
                    const __m512i a0 = bcast4(ag + i * as + 4 * ch),
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
#pragma GCC unroll 8
            for (int ch = 0; ch < CHUNKS; ch++) {
                __m512i wv[NV];
                weights(d, ch, lut, wv);
#pragma GCC unroll 16
                for (int i = 0; i < mr; i++) {
                    const __m512i av = bcast4(ag + i * as + 4 * ch);
#pragma GCC unroll 16
                    for (int v = 0; v < NV; v++)
                        acc[i][v] = _mm512_dpbusd_epi32(acc[i][v], wv[v], av);
                }
            }
        }
        __m512 s[NV];
#pragma GCC unroll 16
        for (int v = 0; v < NV; v++)
            s[v] = e8m0_half((const uint8_t *)grp + 16 * v);
#pragma GCC unroll 16
        for (int i = 0; i < mr; i++) {
            const __m512 ai = _mm512_set1_ps(asc[i * ass + g]);
#pragma GCC unroll 16
            for (int v = 0; v < NV; v++)
                f[i][v] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(acc[i][v]), _mm512_mul_ps(s[v], ai),
                                          f[i][v]);
        }
    }
#pragma GCC unroll 16
    for (int i = 0; i < mr; i++)
#pragma GCC unroll 16
        for (int v = 0; v < NV; v++)
            _mm512_storeu_ps(c + i * ldc + 16 * v, f[i][v]);
}

#define TILE(MR_)                                                                                  \
    tile(MR_, ngroups, a, a_stride, as, as_stride, ac, ac_stride, w, c, ldc, accumulate)

void pg_avx512vnni_mxfp4_uk(int64_t ngroups, int64_t gk, const void *a, int64_t a_stride,
                            const float *as, int64_t as_stride, const int32_t *ac,
                            int64_t ac_stride, const void *w, float *c, int64_t ldc, int mr,
                            int accumulate) {
    (void)gk; /* always one 32-k block per group */
    switch (mr) {
    case 1:
        TILE(1);
        break;
    case 2:
        TILE(2);
        break;
    case 3:
        TILE(3);
        break;
    case 4:
        TILE(4);
        break;
    case 5:
        TILE(5);
        break;
    default:
        TILE(MR);
        break;
    }
}
