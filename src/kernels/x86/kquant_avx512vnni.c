/* K-quant GEMM microkernels with AVX512_VNNI (pg_kernel_table.q2_k .. q6_k,
 * dispatch.h; spec pg_ref_kq_gemm, bitwise equal to pg_ref_kq_uk_*).
 *
 * Tile up to 4 rows x 32 columns on the packed layout of gemm_kquant.c. The
 * weights u are unsigned (0..63), the activations signed: VPDPBUSD takes
 * them as they are, four k per lane, no offset correction. Per sub-block
 * (32 k for Q4_K / Q5_K, 16 for Q2_K / Q3_K / Q6_K) each row keeps two zmm of int32 sums
 * (16 columns each), multiplied by the column's sub-block scale (VPMULLD)
 * into the super-block sum P. The minimum term Q = sum_s m[s] * (activation
 * sum of s) is 8 VPDPWSSD per row and vector: int16 pairs of (m, m) or
 * (m[2p], m[2p+1]) times the input stage's int16 16-sums two at a time.
 * At the super-block end, per row and vector: y = fma(P, d * a_s, y), y =
 * fnmadd(Q, dm * a_s, y) (fnmadd(Q, s, y) = -(Q s) + y = fmaf(-Q, s, y)
 * exactly), kept in c between super-blocks (L1: the tile is the driver's
 * acc block).
 *
 * Unpacking a k-chunk (4 k x 32 columns): one 64-byte load, an AND and a
 * shift + AND for the two nibble vectors; Q5_K / Q6_K OR in the high bits
 * from their planes, one shift + VPTERNLOG per vector.
 *
 * The M = 1 tile prefetches the bytes PF_GROUPS = 4 super-blocks ahead of
 * the one it reads into L2 (PREFETCHT1), a share per sub-block, past the
 * end of its panel slice too (the next panel, which a decode share reads
 * next, follows it in memory; a prefetch does not fault): without it the
 * hardware prefetcher alone streamed 13 GB/s on one thread against a 30
 * GB/s read bandwidth. Into L1 (T0) 2 ahead streamed 8% less end to end,
 * T0 4 or 8 ahead less still (docs/PERFORMANCE.md, issue 23 "prefetch").
 *
 * IQ4_XS (cb): VPSHUFB (AVX512BW) maps the nibbles to kv + 128 (1..241,
 * unsigned), so VPDPBUSD gives sum qa (kv + 128); its scaled sum P' and the
 * minimum term Q of m = sc give the exact P = P' - 128 Q (int32: |P'| <
 * 8 * 32 * 32 * 241 * 127), and y = fma(P, d * a_s, y) alone. IQ4_NL
 * (fs): per sub-block, its sum minus 128 times its activation sum (two
 * 16-sums) goes straight to the outputs, y = fma(I, ds * a_s, y). */
#include <immintrin.h>
#include <string.h>

#include "base/kquant.h"
#include "kernels/gemm_driver.h"
#include "kernels/kquant_uk.h"
#include "kernels/x86/x86.h"

/* MR: the tile's rows; NV: vectors of 16 columns; PF_GROUPS: how many
 * super-blocks ahead the M = 1 tile prefetches (into L2). */
enum { MR = 4, NV = 2, PF_GROUPS = 4 };

static inline __attribute__((always_inline)) __m512i bcast4(const int8_t *p) {
    int32_t q4;
    memcpy(&q4, p, 4);
    return _mm512_set1_epi32(q4);
}

/* Move bits [sh0, sh0 + hb) of every byte of h to bits [4, 4 + hb). */
static inline __attribute__((always_inline)) __m512i place_hi(__m512i h, int sh0) {
    if (sh0 < 4) return _mm512_slli_epi16(h, (unsigned)(4 - sh0));
    if (sh0 > 4) return _mm512_srli_epi16(h, (unsigned)(sh0 - 4));
    return h;
}

/* u of k-chunk ch: columns 0-15 in wv[0], 16-31 in wv[1]. */
static inline __attribute__((always_inline)) void weights(const char *nib, const int bits,
                                                          const int cb, int ch, __m512i wv[NV]) {
    const __m512i lo = _mm512_set1_epi8(0x0F);
    const __m512i x = _mm512_loadu_si512(nib + ch * 64);
    wv[0] = _mm512_and_si512(x, lo);
    wv[1] = _mm512_and_si512(_mm512_srli_epi16(x, 4), lo);
    if (cb) {
        /* kv + 128 as unsigned bytes: flipping the sign bit adds 128 */
        const __m512i kv = _mm512_xor_si512(
            _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)pg_iq4nl_kvalues)),
            _mm512_set1_epi8((char)0x80));
        wv[0] = _mm512_shuffle_epi8(kv, wv[0]);
        wv[1] = _mm512_shuffle_epi8(kv, wv[1]);
    }
    if (bits > 4) {
        const int hb = bits - 4, per = 4 / hb, v0 = 2 * (ch % per);
        const __m512i hm = _mm512_set1_epi8((char)(((1 << hb) - 1) << 4));
        const __m512i h = _mm512_loadu_si512(nib + PG_KQ_NIB_BYTES + (ch / per) * 64);
        /* wv | (placed & hm): VPTERNLOG 0xF8 = A | (B & C) */
        wv[0] = _mm512_ternarylogic_epi32(wv[0], place_hi(h, hb * v0), hm, 0xF8);
        wv[1] = _mm512_ternarylogic_epi32(wv[1], place_hi(h, hb * (v0 + 1)), hm, 0xF8);
    }
}

/* int16 pairs (lo, hi) of two int8 rows of 16 columns, widened. */
static inline __attribute__((always_inline)) __m512i pairs(const int8_t *lo, const int8_t *hi) {
    const __m512i l = _mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)lo));
    const __m512i h = _mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)hi));
    return _mm512_or_si512(_mm512_and_si512(l, _mm512_set1_epi32(0xFFFF)),
                           _mm512_slli_epi32(h, 16));
}

static inline __attribute__((always_inline)) void
tile(const int mr, const int bits, const int sub, const int has_min, const int cb, const int fs,
     int64_t ng, const int8_t *a, int64_t as, const float *asc, int64_t ass, const int32_t *ac,
     int64_t acs, const char *w, float *c, int64_t ldc, int accumulate) {
    const pg_kq_shape sh = pg_kq_shape_of(bits, sub, has_min, fs);
    const int S = sh.S, cps = sh.cps;
    for (int64_t g = 0; g < ng; g++) {
        const pg_kq_view gv = pg_kq_view_at(w, g, &sh, has_min);
        const char *grp = gv.grp;
        const int8_t *sc = gv.sc, *mm = gv.m;
        const char *nib = (const char *)gv.nib;
        const int8_t *ag = a + g * 256;
        __m512i P[MR][NV];
        __m512 Y[MR][NV]; /* fs: the outputs, one FMA per sub-block */
#pragma GCC unroll 4
        for (int i = 0; i < mr; i++) {
            P[i][0] = P[i][1] = _mm512_setzero_si512();
            if (fs) {
                Y[i][0] = accumulate || g ? _mm512_loadu_ps(c + i * ldc) : _mm512_setzero_ps();
                Y[i][1] = accumulate || g ? _mm512_loadu_ps(c + i * ldc + 16) : _mm512_setzero_ps();
            }
        }
#pragma GCC unroll 1
        for (int s = 0; s < S; s++) {
            if (mr == 1) pg_kq_prefetch_share(grp, &sh, s, PF_GROUPS, 1);
            __m512i I[MR][NV];
#pragma GCC unroll 4
            for (int i = 0; i < mr; i++)
                I[i][0] = I[i][1] = _mm512_setzero_si512();
#pragma GCC unroll 8
            for (int cc = 0; cc < cps; cc++) {
                const int ch = s * cps + cc;
                __m512i wv[NV];
                weights(nib, bits, cb, ch, wv);
#pragma GCC unroll 4
                for (int i = 0; i < mr; i++) {
                    const __m512i av = bcast4(ag + i * as + 4 * ch);
                    I[i][0] = _mm512_dpbusd_epi32(I[i][0], wv[0], av);
                    I[i][1] = _mm512_dpbusd_epi32(I[i][1], wv[1], av);
                }
            }
            if (fs) {
                /* sum qa kv = sum qa (kv + 128) - 128 * (the sub-block's two 16-sums) */
#pragma GCC unroll 4
                for (int i = 0; i < mr; i++) {
                    const int16_t *bs = (const int16_t *)(ac + i * acs) + 16 * g + 2 * s;
                    const __m512i off = _mm512_set1_epi32(((int32_t)bs[0] + bs[1]) * 128);
                    const __m512 ai = _mm512_set1_ps(asc[i * ass + g]);
#pragma GCC unroll 2
                    for (int v = 0; v < NV; v++) {
                        const __m512 ds = _mm512_cvtph_ps(_mm256_loadu_si256(
                            (const __m256i *)(grp + 2 * (s * PG_KQ_NR + 16 * v))));
                        Y[i][v] =
                            _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(I[i][v], off)),
                                            _mm512_mul_ps(ds, ai), Y[i][v]);
                    }
                }
                continue;
            }
#pragma GCC unroll 2
            for (int v = 0; v < NV; v++) {
                const __m512i scv = _mm512_cvtepi8_epi32(
                    _mm_loadu_si128((const __m128i *)(sc + s * PG_KQ_NR + 16 * v)));
#pragma GCC unroll 4
                for (int i = 0; i < mr; i++)
                    P[i][v] = _mm512_add_epi32(P[i][v], _mm512_mullo_epi32(I[i][v], scv));
            }
        }
        if (fs) {
#pragma GCC unroll 4
            for (int i = 0; i < mr; i++) {
                _mm512_storeu_ps(c + i * ldc, Y[i][0]);
                _mm512_storeu_ps(c + i * ldc + 16, Y[i][1]);
            }
            continue;
        }
        /* Q: 8 pairs of 16-sums per super-block */
        __m512i Q[MR][NV];
#pragma GCC unroll 4
        for (int i = 0; i < mr; i++)
            Q[i][0] = Q[i][1] = _mm512_setzero_si512();
#pragma GCC unroll 1
        for (int p = 0; p < 8; p++) {
#pragma GCC unroll 2
            for (int v = 0; v < NV; v++) {
                const int8_t *m0 = mm + (sub == 32 ? p : 2 * p) * PG_KQ_NR + 16 * v;
                const __m512i mp = pairs(m0, sub == 32 ? m0 : m0 + PG_KQ_NR);
#pragma GCC unroll 4
                for (int i = 0; i < mr; i++) {
                    int32_t b2;
                    memcpy(&b2, (const int16_t *)(ac + i * acs) + 16 * g + 2 * p, 4);
                    Q[i][v] = _mm512_dpwssd_epi32(Q[i][v], mp, _mm512_set1_epi32(b2));
                }
            }
        }
#pragma GCC unroll 2
        for (int v = 0; v < NV; v++) {
            const __m512 d = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(grp + 32 * v)));
            const __m512 dm =
                _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(grp + 2 * PG_KQ_NR + 32 * v)));
#pragma GCC unroll 4
            for (int i = 0; i < mr; i++) {
                const __m512 ai = _mm512_set1_ps(asc[i * ass + g]);
                float *ci = c + i * ldc + 16 * v;
                __m512 y = accumulate || g ? _mm512_loadu_ps(ci) : _mm512_setzero_ps();
                if (cb) {
                    const __m512i p = _mm512_sub_epi32(P[i][v], _mm512_slli_epi32(Q[i][v], 7));
                    y = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p), _mm512_mul_ps(d, ai), y);
                } else {
                    y = _mm512_fmadd_ps(_mm512_cvtepi32_ps(P[i][v]), _mm512_mul_ps(d, ai), y);
                    y = _mm512_fnmadd_ps(_mm512_cvtepi32_ps(Q[i][v]), _mm512_mul_ps(dm, ai), y);
                }
                _mm512_storeu_ps(ci, y);
            }
        }
    }
}

#define TILE(MR_, BITS, SUB, MIN, CB, FS)                                                          \
    tile(MR_, BITS, SUB, MIN, CB, FS, ngroups, a, a_stride, as, as_stride, ac, ac_stride, w, c,    \
         ldc, accumulate)
#define KQ_UK(NAME, BITS, SUB, MIN, CB, FS)                                                        \
    void NAME(int64_t ngroups, int64_t gk, const void *a, int64_t a_stride, const float *as,       \
              int64_t as_stride, const int32_t *ac, int64_t ac_stride, const void *w, float *c,    \
              int64_t ldc, int mr, int accumulate) {                                               \
        (void)gk;                                                                                  \
        switch (mr) {                                                                              \
        case 1:                                                                                    \
            TILE(1, BITS, SUB, MIN, CB, FS);                                                       \
            break;                                                                                 \
        case 2:                                                                                    \
            TILE(2, BITS, SUB, MIN, CB, FS);                                                       \
            break;                                                                                 \
        case 3:                                                                                    \
            TILE(3, BITS, SUB, MIN, CB, FS);                                                       \
            break;                                                                                 \
        default:                                                                                   \
            TILE(MR, BITS, SUB, MIN, CB, FS);                                                      \
            break;                                                                                 \
        }                                                                                          \
    }
PG_KQ_ROWS(KQ_UK, pg_avx512vnni_kq_uk)
