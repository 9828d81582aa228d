/* K-quant GEMM microkernels for AVX2 (pg_kernel_table.q2_k .. iq4_nl,
 * dispatch.h; spec pg_ref_kq_gemm, bitwise equal to pg_ref_kq_uk_*). Used
 * by the avx2 table, and by the avx512 ones on CPUs without AVX512_VNNI.
 *
 * Tiles on the packed layout of gemm_kquant.c (shared with avx512vnni and
 * Arm), in vectors of 8 columns x 4 k (one ymm of a 64-byte k-chunk: the
 * low nibbles are columns 0-15, the high ones 16-31): M = 1 (decode) reads
 * each chunk once for all 32 columns (4 vectors; IQ4_XS / IQ4_NL, short
 * of registers for the codebook, 2 vectors per pass); 2 to 4 rows
 * (prefill, MR = 4) take 16 columns per pass, sharing each unpacked weight
 * vector between the rows. VPMADDUBSW multiplies the unsigned weights u by
 * the broadcast signed activations (|a| <= 127) into int16 pairs, and
 * those of up to 8 consecutive chunks of one sub-block are summed in int16
 * (span_of: a pair is at most 2 * umax * 127, so 8 chunks of 4-bit u, 4 of
 * 5-bit, 2 of 6-bit stay below 32768; test_kquant's test_extreme_sums
 * holds every weight and activation at its extreme). One VPMADDWD with the
 * column's (sc, sc) int16 pair widens a span and applies the sub-block
 * scale at once, into int32 P (llama.cpp's AVX2 Q4_K dot does the same
 * maddubs-then-madd; the previous kernel here did VPMADDWD by ones per
 * chunk and VPMULLD per sub-block). The minimum term Q is VPMADDWD of the
 * int16 pairs (m[2t], m[2t+1]) with the pair of the two sub-blocks'
 * activation sums (the input stage's 16-sums). Per super-block, row and
 * vector: y = fma(P, d * a_s, y), y = fnmadd(Q, dm * a_s, y), as the
 * spec's fmaf. High bits (Q5_K, Q6_K): a 16-bit shift of their plane and
 * AND / OR. IQ4_XS (cb): VPSHUFB maps the nibbles to the signed codebook
 * values kv, and VPMADDUBSW takes |a| against kv with a's sign (VPSIGNB;
 * |a| once per chunk): the exact sums of a * kv (at most 2 * 127 * 127 =
 * 32258 per int16 pair, so one chunk per span), no minimum term. IQ4_NL
 * (fs) as IQ4_XS, but each sub-block's int32 sums (VPMADDWD by ones) go
 * straight to the outputs: y = fma(I, ds * a_s, y) with the sub-block's
 * F16 scales ds. The M = 1 tile prefetches the bytes PF_GROUPS
 * super-blocks ahead of the one it reads, a share per sub-block, past the
 * end of its panel slice too: with M = 1 a slice is a whole panel and the
 * next panel, the next one a thread's decode share reads, follows it in
 * memory (a prefetch does not fault; at a share's end it touches a
 * neighbour's first lines). Stopping at the panel's end, as before, left
 * the first 2 of the 8 super-blocks of every K = 2048 panel to the
 * hardware prefetcher. */
#include <immintrin.h>
#include <string.h>

#include "base/kquant.h"
#include "kernels/gemm_driver.h"
#include "kernels/kquant_uk.h"
#include "kernels/x86/x86.h"

/* MR: the tile's rows; PF_GROUPS: how many super-blocks ahead the M = 1
 * tile prefetches (the hardware prefetcher alone leaves
 * the stream idle while a super-block computes). */
enum { MR = 4, PF_GROUPS = 2 };

/* Move bits [sh0, sh0 + hb) of every byte of h to bits [4, 4 + hb) (the
 * bits that cross a byte boundary land outside the mask applied after). */
static inline __attribute__((always_inline)) __m256i place_hi(__m256i h, int sh0) {
    if (sh0 < 4) return _mm256_slli_epi16(h, 4 - sh0);
    if (sh0 > 4) return _mm256_srli_epi16(h, sh0 - 4);
    return h;
}

/* x, opaque to the compiler: keeps a running sum a chain of adds in
 * source order (GCC otherwise reassociates the unrolled int16 sums into a
 * tree whose partial sums spill out of the 16 ymm registers). */
static inline __attribute__((always_inline)) __m256i chain(__m256i x) {
    __asm__("" : "+x"(x));
    return x;
}

/* int16 pairs (p0[j], p1[j]) of 8 columns j of two int8 rows, sign-extended. */
static inline __attribute__((always_inline)) __m256i pairs(const int8_t *p0, const int8_t *p1) {
    return _mm256_cvtepi8_epi16(_mm_unpacklo_epi8(_mm_loadl_epi64((const __m128i *)p0),
                                                  _mm_loadl_epi64((const __m128i *)p1)));
}

/* Chunks of 4 k whose VPMADDUBSW int16 pairs may be summed in int16 before
 * the scale: one chunk's pair is at most 2 * umax * 127 (umax 15, 31, 63,
 * or 127 for |kv|), so 8 (30480), 4 (31496), 2 (32004) or 1 (32258). */
static inline __attribute__((always_inline)) int span_of(int bits, int cb, int cps) {
    const int sp = cb ? 1 : bits == 4 ? 8 : bits == 5 ? 4 : 2;
    return sp < cps ? sp : cps;
}

/* The minimum term Q of super-block g for the NV vectors of 8 columns of
 * one pass (first column c0, vector v at c0 + 8 v) and mr rows: per pair
 * of sub-blocks (2 t, 2 t + 1), VPMADDWD of the int16 pairs (m, m') with
 * the pair of their activation sums (the input stage's 16-sums added per
 * sub-block: at most 32 * 127, an int16). */
static inline __attribute__((always_inline)) void min_term(const int mr, const int NV,
                                                           const int sub, const int8_t *mm,
                                                           const int32_t *ac, int64_t acs,
                                                           int64_t g, int c0, __m256i Q[MR][4]) {
    const int S = 256 / sub;
#pragma GCC unroll 4
    for (int i = 0; i < mr; i++)
#pragma GCC unroll 4
        for (int v = 0; v < NV; v++)
            Q[i][v] = _mm256_setzero_si256();
#pragma GCC unroll 1
    for (int t = 0; t < S / 2; t++) {
        __m256i b[MR];
#pragma GCC unroll 4
        for (int i = 0; i < mr; i++) {
            const int16_t *bs = (const int16_t *)(ac + i * acs) + 16 * g;
            int32_t b2;
            if (sub == 16) {
                memcpy(&b2, bs + 2 * t, 4);
            } else {
                const uint16_t s0 = (uint16_t)(bs[4 * t] + bs[4 * t + 1]);
                const uint16_t s1 = (uint16_t)(bs[4 * t + 2] + bs[4 * t + 3]);
                b2 = (int32_t)((uint32_t)s0 | (uint32_t)s1 << 16);
            }
            b[i] = _mm256_set1_epi32(b2);
        }
#pragma GCC unroll 4
        for (int v = 0; v < NV; v++) {
            const int8_t *m0 = mm + 2 * t * PG_KQ_NR + c0 + 8 * v;
            const __m256i mp = pairs(m0, m0 + PG_KQ_NR);
#pragma GCC unroll 4
            for (int i = 0; i < mr; i++)
                Q[i][v] = _mm256_add_epi32(Q[i][v], _mm256_madd_epi16(mp, b[i]));
        }
    }
}

/* mr rows x the NV = 2 NH vectors of NH halves (from half h0) of one
 * panel. */
static inline __attribute__((always_inline)) void
tile(const int mr, const int NH, const int bits, const int sub, const int has_min, const int cb,
     const int fs, int64_t ng, const int8_t *a, int64_t as, const float *asc, int64_t ass,
     const int32_t *ac, int64_t acs, const char *w, float *c, int64_t ldc, int accumulate) {
    const pg_kq_shape sh = pg_kq_shape_of(bits, sub, has_min, fs);
    const int S = sh.S, cps = sh.cps, hb = sh.hb, per = sh.per;
    const int NV = 2 * NH, SP = span_of(bits, cb, cps);
    const __m256i lo = _mm256_set1_epi8(0x0F), ones = _mm256_set1_epi16(1);
    const __m256i hm = _mm256_set1_epi8((char)(((1 << hb) - 1) << 4));
    const __m256i kv =
        _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)pg_iq4nl_kvalues));
    for (int64_t g = 0; g < ng; g++) {
        const pg_kq_view gv = pg_kq_view_at(w, g, &sh, has_min);
        const char *grp = gv.grp;
        const int8_t *sc = gv.sc, *mm = gv.m;
        const uint8_t *nib = gv.nib;
        const int8_t *ag = a + g * 256;
#pragma GCC unroll 1
        for (int h0 = 0; h0 < 2; h0 += NH) {
            const int c0 = 16 * h0; /* vector v: columns c0 + 8 v .. + 7 */
            /* decode: past the panel's end too (pg_kq_prefetch_share) */
            const int pf = mr == 1 && h0 == 0;
            __m256i P[MR][4];
            __m256 Y[MR][4]; /* fs: the outputs, one FMA per sub-block */
#pragma GCC unroll 4
            for (int i = 0; i < mr; i++)
#pragma GCC unroll 4
                for (int v = 0; v < NV; v++) {
                    P[i][v] = _mm256_setzero_si256();
                    if (fs)
                        Y[i][v] = accumulate || g ? _mm256_loadu_ps(c + i * ldc + c0 + 8 * v)
                                                  : _mm256_setzero_ps();
                }
#pragma GCC unroll 1
            for (int s = 0; s < S; s++) {
                if (pf) pg_kq_prefetch_share(grp, &sh, s, PF_GROUPS, 0);
                __m256i scv[4]; /* int16 (sc, sc) pairs, or ones for fs */
#pragma GCC unroll 4
                for (int v = 0; v < NV; v++)
                    scv[v] =
                        fs ? ones
                           : pairs(sc + s * PG_KQ_NR + c0 + 8 * v, sc + s * PG_KQ_NR + c0 + 8 * v);
                const int nsp = cps / SP; /* outside the for, as l0 / l1 above */
#pragma GCC unroll 4
                for (int sp = 0; sp < nsp; sp++) {
                    __m256i T[MR][4]; /* int16 pairs of SP chunks */
#pragma GCC unroll 8
                    for (int cc = 0; cc < SP; cc++) {
                        const int ch = s * cps + sp * SP + cc;
                        __m256i wq[4];
#pragma GCC unroll 4
                        for (int q = 0; q < 2; q++) {
                            const __m256i x =
                                _mm256_loadu_si256((const __m256i *)(nib + ch * 64 + 32 * q));
                            __m256i hp = _mm256_setzero_si256();
                            if (hb)
                                hp =
                                    _mm256_loadu_si256((const __m256i *)(nib + PG_KQ_NIB_BYTES +
                                                                         (ch / per) * 64 + 32 * q));
#pragma GCC unroll 4
                            for (int hh = 0; hh < NH; hh++) {
                                const int h = h0 + hh, v = 2 * hh + q;
                                __m256i u = h ? _mm256_and_si256(_mm256_srli_epi16(x, 4), lo)
                                              : _mm256_and_si256(x, lo);
                                if (hb) {
                                    const int sh0 = hb * (2 * (ch % per) + h);
                                    u = _mm256_or_si256(u, _mm256_and_si256(place_hi(hp, sh0), hm));
                                }
                                wq[v] = cb ? _mm256_shuffle_epi8(kv, u) : u;
                            }
                        }
#pragma GCC unroll 4
                        for (int i = 0; i < mr; i++) {
                            int32_t a4;
                            memcpy(&a4, ag + i * as + 4 * ch, 4);
                            const __m256i av = _mm256_set1_epi32(a4);
                            const __m256i aa = cb ? _mm256_abs_epi8(av) : av;
#pragma GCC unroll 4
                            for (int v = 0; v < NV; v++) {
                                const __m256i t =
                                    cb ? _mm256_maddubs_epi16(aa, _mm256_sign_epi8(wq[v], av))
                                       : _mm256_maddubs_epi16(wq[v], av);
                                T[i][v] = chain(cc ? _mm256_add_epi16(T[i][v], t) : t);
                            }
                        }
                    }
#pragma GCC unroll 4
                    for (int v = 0; v < NV; v++)
#pragma GCC unroll 4
                        for (int i = 0; i < mr; i++)
                            P[i][v] = _mm256_add_epi32(P[i][v], _mm256_madd_epi16(T[i][v], scv[v]));
                }
                if (fs) {
#pragma GCC unroll 4
                    for (int v = 0; v < NV; v++) {
                        const __m256 ds = _mm256_cvtph_ps(_mm_loadu_si128(
                            (const __m128i *)(grp + 2 * (s * PG_KQ_NR + c0 + 8 * v))));
#pragma GCC unroll 4
                        for (int i = 0; i < mr; i++) {
                            Y[i][v] = _mm256_fmadd_ps(
                                _mm256_cvtepi32_ps(P[i][v]),
                                _mm256_mul_ps(ds, _mm256_set1_ps(asc[i * ass + g])), Y[i][v]);
                            P[i][v] = _mm256_setzero_si256();
                        }
                    }
                }
            }
            if (fs) {
#pragma GCC unroll 4
                for (int i = 0; i < mr; i++)
#pragma GCC unroll 4
                    for (int v = 0; v < NV; v++)
                        _mm256_storeu_ps(c + i * ldc + c0 + 8 * v, Y[i][v]);
                continue;
            }
            __m256i Q[MR][4];
            if (!cb) min_term(mr, NV, sub, mm, ac, acs, g, c0, Q);
#pragma GCC unroll 4
            for (int v = 0; v < NV; v++) {
                const int col = c0 + 8 * v;
                const __m256 d = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(grp + 2 * col)));
                const __m256 dm = _mm256_cvtph_ps(
                    _mm_loadu_si128((const __m128i *)(grp + 2 * PG_KQ_NR + 2 * col)));
#pragma GCC unroll 4
                for (int i = 0; i < mr; i++) {
                    const __m256 ai = _mm256_set1_ps(asc[i * ass + g]);
                    float *ci = c + i * ldc + col;
                    __m256 y = accumulate || g ? _mm256_loadu_ps(ci) : _mm256_setzero_ps();
                    y = _mm256_fmadd_ps(_mm256_cvtepi32_ps(P[i][v]), _mm256_mul_ps(d, ai), y);
                    if (!cb)
                        y = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(Q[i][v]), _mm256_mul_ps(dm, ai), y);
                    _mm256_storeu_ps(ci, y);
                }
            }
        }
    }
}

#define KQ_UK(NAME, BITS, SUB, MIN, CB, FS)                                                        \
    void NAME(int64_t ngroups, int64_t gk, const void *a, int64_t a_stride, const float *as,       \
              int64_t as_stride, const int32_t *ac, int64_t ac_stride, const void *w, float *c,    \
              int64_t ldc, int mr, int accumulate) {                                               \
        (void)gk;                                                                                  \
        switch (mr) {                                                                              \
        case 1:                                                                                    \
            tile(1, CB ? 1 : 2, BITS, SUB, MIN, CB, FS, ngroups, a, a_stride, as, as_stride, ac,   \
                 ac_stride, w, c, ldc, accumulate);                                                \
            break;                                                                                 \
        case 2:                                                                                    \
            tile(2, 1, BITS, SUB, MIN, CB, FS, ngroups, a, a_stride, as, as_stride, ac, ac_stride, \
                 w, c, ldc, accumulate);                                                           \
            break;                                                                                 \
        case 3:                                                                                    \
            tile(3, 1, BITS, SUB, MIN, CB, FS, ngroups, a, a_stride, as, as_stride, ac, ac_stride, \
                 w, c, ldc, accumulate);                                                           \
            break;                                                                                 \
        default:                                                                                   \
            tile(MR, 1, BITS, SUB, MIN, CB, FS, ngroups, a, a_stride, as, as_stride, ac,           \
                 ac_stride, w, c, ldc, accumulate);                                                \
        }                                                                                          \
    }
PG_KQ_ROWS(KQ_UK, pg_avx2_kq_uk)
