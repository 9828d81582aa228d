/* Gated DeltaNet micro-kernels, AVX-512 (pg_gdn_ukernels, kernels/gated_delta.h).
 * Bitwise equal to pg_ref_gdn_recurrent_uk / pg_ref_gdn_mm_uk: the same
 * fmaf chains in the same order, 16 columns per vector (columns are
 * independent lanes; the last vector of a block is masked).
 *   recurrent: column blocks of up to 128 (8 zmm: 8 independent FMA chains
 *     for the latency of kv and o), all tokens per block, so the block's
 *     state rows (dk x 512 bytes) stay in L1/L2 across tokens;
 *   mm: tiles of up to 6 rows x 64 columns (24 accumulators), B rows
 *     loaded once per k for all the tile's rows. */
#include <immintrin.h>

#include "kernels/x86/x86.h"

#define INLINE static inline __attribute__((always_inline))

INLINE __mmask16 tail_mask(int n) {
    return n >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << n) - 1u);
}

/* Vector v of NV at p (the last one masked by m). */
INLINE __m512 ld(const float *p, int v, int NV, int MASKED, __mmask16 m) {
    return MASKED && v == NV - 1 ? _mm512_maskz_loadu_ps(m, p + 16 * v)
                                 : _mm512_loadu_ps(p + 16 * v);
}

INLINE void st(float *p, int v, int NV, int MASKED, __mmask16 m, __m512 x) {
    if (MASKED && v == NV - 1)
        _mm512_mask_storeu_ps(p + 16 * v, m, x);
    else
        _mm512_storeu_ps(p + 16 * v, x);
}

INLINE void rec_block(const int NV, const int MASKED, int n, int dk, float *S, int64_t lds,
                      const float *q, const float *k, int64_t ldqk, const float *v, int64_t ldv,
                      const float *eg, const float *beta, float *o, int64_t ldo, __mmask16 m) {
    for (int t = 0; t < n; t++) {
        const float *qt = q + t * ldqk, *kt = k + t * ldqk;
        __m512 kv[8], d[8], acc[8];
#pragma GCC unroll 8
        for (int u = 0; u < NV; u++)
            kv[u] = _mm512_setzero_ps();
        for (int i = 0; i < dk; i++) {
            const __m512 ki = _mm512_set1_ps(kt[i]);
            const float *si = S + i * lds;
#pragma GCC unroll 8
            for (int u = 0; u < NV; u++)
                kv[u] = _mm512_fmadd_ps(ld(si, u, NV, MASKED, m), ki, kv[u]);
        }
        const __m512 e = _mm512_set1_ps(eg[t]), bt = _mm512_set1_ps(beta[t]);
        const float *vt = v + t * ldv;
#pragma GCC unroll 8
        for (int u = 0; u < NV; u++) {
            d[u] = _mm512_mul_ps(_mm512_fnmadd_ps(kv[u], e, ld(vt, u, NV, MASKED, m)), bt);
            acc[u] = _mm512_setzero_ps();
        }
        for (int i = 0; i < dk; i++) {
            const __m512 ki = _mm512_set1_ps(kt[i]), qi = _mm512_set1_ps(qt[i]);
            float *si = S + i * lds;
#pragma GCC unroll 8
            for (int u = 0; u < NV; u++) {
                const __m512 s =
                    _mm512_fmadd_ps(ki, d[u], _mm512_mul_ps(ld(si, u, NV, MASKED, m), e));
                st(si, u, NV, MASKED, m, s);
                acc[u] = _mm512_fmadd_ps(s, qi, acc[u]);
            }
        }
        float *ot = o + t * ldo;
#pragma GCC unroll 8
        for (int u = 0; u < NV; u++)
            st(ot, u, NV, MASKED, m, acc[u]);
    }
}

#define REC_CASE(NV)                                                                               \
    case NV:                                                                                       \
        rec_block(NV, 0, n, dk, Sc, lds, q, k, ldqk, vc, ldv, eg, beta, oc, ldo, m);               \
        break;

/* Columns [c0, c0 + 16 nv) as whole vectors, then the n % 16 rest as one
 * masked vector (masked stores are slow on some cores: only the tail pays). */
void pg_avx512_gdn_recurrent(int n, int dk, int nc, float *S, int64_t lds, const float *q,
                             const float *k, int64_t ldqk, const float *v, int64_t ldv,
                             const float *eg, const float *beta, float *o, int64_t ldo) {
    const int nfull = nc / 16, rest = nc % 16;
    const __mmask16 m = tail_mask(rest);
    for (int v0 = 0; v0 < nfull; v0 += 8) {
        const int nv = nfull - v0 < 8 ? nfull - v0 : 8, c0 = 16 * v0;
        float *Sc = S + c0, *oc = o + c0;
        const float *vc = v + c0;
        /* clang-format off */
        switch (nv) {
        REC_CASE(1) REC_CASE(2) REC_CASE(3) REC_CASE(4) REC_CASE(5) REC_CASE(6) REC_CASE(7)
        default: rec_block(8, 0, n, dk, Sc, lds, q, k, ldqk, vc, ldv, eg, beta, oc, ldo, m); break;
        }
        /* clang-format on */
    }
    if (rest) {
        const int c0 = 16 * nfull;
        rec_block(1, 1, n, dk, S + c0, lds, q, k, ldqk, v + c0, ldv, eg, beta, o + c0, ldo, m);
    }
}

INLINE void mm_tile(const int MR, const int NV, const int MASKED, int k, const float *a,
                    int64_t lda, const float *b, int64_t ldb, float *c, int64_t ldc, float cscale,
                    __mmask16 m) {
    __m512 acc[6][4];
    if (cscale != 0.0f) {
        const __m512 cs = _mm512_set1_ps(cscale);
#pragma GCC unroll 6
        for (int i = 0; i < MR; i++)
#pragma GCC unroll 4
            for (int u = 0; u < NV; u++)
                acc[i][u] = _mm512_mul_ps(ld(c + i * ldc, u, NV, MASKED, m), cs);
    } else {
#pragma GCC unroll 6
        for (int i = 0; i < MR; i++)
#pragma GCC unroll 4
            for (int u = 0; u < NV; u++)
                acc[i][u] = _mm512_setzero_ps();
    }
    for (int p = 0; p < k; p++) {
        __m512 bv[4];
#pragma GCC unroll 4
        for (int u = 0; u < NV; u++)
            bv[u] = ld(b + p * ldb, u, NV, MASKED, m);
#pragma GCC unroll 6
        for (int i = 0; i < MR; i++) {
            const __m512 ai = _mm512_set1_ps(a[i * lda + p]);
#pragma GCC unroll 4
            for (int u = 0; u < NV; u++)
                acc[i][u] = _mm512_fmadd_ps(ai, bv[u], acc[i][u]);
        }
    }
#pragma GCC unroll 6
    for (int i = 0; i < MR; i++)
#pragma GCC unroll 4
        for (int u = 0; u < NV; u++)
            st(c + i * ldc, u, NV, MASKED, m, acc[i][u]);
}

#define MM_CASE(MR, NV)                                                                            \
    case (MR)*8 + (NV):                                                                            \
        mm_tile(MR, NV, 0, k, ai, lda, bj, ldb, cij, ldc, cscale, msk);                            \
        break;
#define MM_ROW(MR) MM_CASE(MR, 1) MM_CASE(MR, 2) MM_CASE(MR, 3) MM_CASE(MR, 4)
#define MM_TAIL(MR)                                                                                \
    case MR:                                                                                       \
        mm_tile(MR, 1, 1, k, ai, lda, bj, ldb, cij, ldc, cscale, msk);                             \
        break;

/* Whole-vector column blocks of up to 64, then the n % 16 rest masked. */
void pg_avx512_gdn_mm(int m, int n, int k, const float *a, int64_t lda, const float *b, int64_t ldb,
                      float *c, int64_t ldc, float cscale) {
    const int nfull = n / 16, rest = n % 16;
    const __mmask16 msk = tail_mask(rest);
    for (int v0 = 0, nv; v0 < nfull || (rest && v0 == nfull); v0 += nv) {
        const int tail = v0 == nfull;
        nv = tail ? 1 : nfull - v0 < 4 ? nfull - v0 : 4;
        const float *bj = b + 16 * v0;
        for (int i0 = 0; i0 < m; i0 += 6) {
            const int mr = m - i0 < 6 ? m - i0 : 6;
            const float *ai = a + i0 * lda;
            float *cij = c + i0 * ldc + 16 * v0;
            /* clang-format off */
            if (tail) {
                switch (mr) {
                MM_TAIL(1) MM_TAIL(2) MM_TAIL(3) MM_TAIL(4) MM_TAIL(5) MM_TAIL(6)
                default: break;
                }
            } else {
                switch (mr * 8 + nv) {
                MM_ROW(1) MM_ROW(2) MM_ROW(3) MM_ROW(4) MM_ROW(5) MM_ROW(6)
                default: break;
                }
            }
            /* clang-format on */
        }
    }
}
