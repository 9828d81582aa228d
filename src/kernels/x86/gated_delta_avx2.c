/* Gated DeltaNet micro-kernels, AVX2 + FMA (pg_gdn_ukernels,
 * kernels/gated_delta.h). Bitwise equal to pg_ref_gdn_recurrent_uk /
 * pg_ref_gdn_mm_uk: the same fmaf chains in the same order, 8 columns per
 * vector, the last vector of a block masked (VMASKMOVPS).
 *   recurrent: column blocks of up to 32 (4 ymm), all tokens per block;
 *   mm: tiles of up to 6 rows x 16 columns (12 accumulators). */
#include <immintrin.h>

#include "kernels/x86/x86.h"

#define INLINE static inline __attribute__((always_inline))

/* Lanes < n set (n in [1, 8]). */
INLINE __m256i lane_mask(int n) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

INLINE __m256 ld(const float *p, int v, int NV, int MASKED, __m256i m) {
    return MASKED && v == NV - 1 ? _mm256_maskload_ps(p + 8 * v, m) : _mm256_loadu_ps(p + 8 * v);
}

INLINE void st(float *p, int v, int NV, int MASKED, __m256i m, __m256 x) {
    if (MASKED && v == NV - 1)
        _mm256_maskstore_ps(p + 8 * v, m, x);
    else
        _mm256_storeu_ps(p + 8 * v, x);
}

INLINE void rec_block(const int NV, const int MASKED, int n, int dk, float *S, int64_t lds,
                      const float *q, const float *k, int64_t ldqk, const float *v, int64_t ldv,
                      const float *eg, const float *beta, float *o, int64_t ldo, __m256i m) {
    for (int t = 0; t < n; t++) {
        const float *qt = q + t * ldqk, *kt = k + t * ldqk;
        __m256 kv[4], d[4], acc[4];
#pragma GCC unroll 4
        for (int u = 0; u < NV; u++)
            kv[u] = _mm256_setzero_ps();
        for (int i = 0; i < dk; i++) {
            const __m256 ki = _mm256_set1_ps(kt[i]);
            const float *si = S + i * lds;
#pragma GCC unroll 4
            for (int u = 0; u < NV; u++)
                kv[u] = _mm256_fmadd_ps(ld(si, u, NV, MASKED, m), ki, kv[u]);
        }
        const __m256 e = _mm256_set1_ps(eg[t]), bt = _mm256_set1_ps(beta[t]);
        const float *vt = v + t * ldv;
#pragma GCC unroll 4
        for (int u = 0; u < NV; u++) {
            d[u] = _mm256_mul_ps(_mm256_fnmadd_ps(kv[u], e, ld(vt, u, NV, MASKED, m)), bt);
            acc[u] = _mm256_setzero_ps();
        }
        for (int i = 0; i < dk; i++) {
            const __m256 ki = _mm256_set1_ps(kt[i]), qi = _mm256_set1_ps(qt[i]);
            float *si = S + i * lds;
#pragma GCC unroll 4
            for (int u = 0; u < NV; u++) {
                const __m256 s =
                    _mm256_fmadd_ps(ki, d[u], _mm256_mul_ps(ld(si, u, NV, MASKED, m), e));
                st(si, u, NV, MASKED, m, s);
                acc[u] = _mm256_fmadd_ps(s, qi, acc[u]);
            }
        }
        float *ot = o + t * ldo;
#pragma GCC unroll 4
        for (int u = 0; u < NV; u++)
            st(ot, u, NV, MASKED, m, acc[u]);
    }
}

#define REC_CASE(NV)                                                                               \
    case NV:                                                                                       \
        rec_block(NV, 0, n, dk, Sc, lds, q, k, ldqk, vc, ldv, eg, beta, oc, ldo, m);               \
        break;

/* Columns as whole vectors in blocks of up to 32, then the n % 8 rest as
 * one masked vector (VMASKMOVPS stores are slow on some cores). */
void pg_avx2_gdn_recurrent(int n, int dk, int nc, float *S, int64_t lds, const float *q,
                           const float *k, int64_t ldqk, const float *v, int64_t ldv,
                           const float *eg, const float *beta, float *o, int64_t ldo) {
    const int nfull = nc / 8, rest = nc % 8;
    const __m256i m = lane_mask(rest);
    for (int v0 = 0; v0 < nfull; v0 += 4) {
        const int nv = nfull - v0 < 4 ? nfull - v0 : 4, c0 = 8 * v0;
        float *Sc = S + c0, *oc = o + c0;
        const float *vc = v + c0;
        /* clang-format off */
        switch (nv) {
        REC_CASE(1) REC_CASE(2) REC_CASE(3)
        default: rec_block(4, 0, n, dk, Sc, lds, q, k, ldqk, vc, ldv, eg, beta, oc, ldo, m); break;
        }
        /* clang-format on */
    }
    if (rest) {
        const int c0 = 8 * nfull;
        rec_block(1, 1, n, dk, S + c0, lds, q, k, ldqk, v + c0, ldv, eg, beta, o + c0, ldo, m);
    }
}

INLINE void mm_tile(const int MR, const int NV, const int MASKED, int k, const float *a,
                    int64_t lda, const float *b, int64_t ldb, float *c, int64_t ldc, float cscale,
                    __m256i m) {
    __m256 acc[6][2];
    if (cscale != 0.0f) {
        const __m256 cs = _mm256_set1_ps(cscale);
#pragma GCC unroll 6
        for (int i = 0; i < MR; i++)
#pragma GCC unroll 2
            for (int u = 0; u < NV; u++)
                acc[i][u] = _mm256_mul_ps(ld(c + i * ldc, u, NV, MASKED, m), cs);
    } else {
#pragma GCC unroll 6
        for (int i = 0; i < MR; i++)
#pragma GCC unroll 2
            for (int u = 0; u < NV; u++)
                acc[i][u] = _mm256_setzero_ps();
    }
    for (int p = 0; p < k; p++) {
        __m256 bv[2];
#pragma GCC unroll 2
        for (int u = 0; u < NV; u++)
            bv[u] = ld(b + p * ldb, u, NV, MASKED, m);
#pragma GCC unroll 6
        for (int i = 0; i < MR; i++) {
            const __m256 ai = _mm256_broadcast_ss(a + i * lda + p);
#pragma GCC unroll 2
            for (int u = 0; u < NV; u++)
                acc[i][u] = _mm256_fmadd_ps(ai, bv[u], acc[i][u]);
        }
    }
#pragma GCC unroll 6
    for (int i = 0; i < MR; i++)
#pragma GCC unroll 2
        for (int u = 0; u < NV; u++)
            st(c + i * ldc, u, NV, MASKED, m, acc[i][u]);
}

#define MM_CASE(MR, NV)                                                                            \
    case (MR)*4 + (NV):                                                                            \
        mm_tile(MR, NV, 0, k, ai, lda, bj, ldb, cij, ldc, cscale, msk);                            \
        break;
#define MM_ROW(MR) MM_CASE(MR, 1) MM_CASE(MR, 2)
#define MM_TAIL(MR)                                                                                \
    case MR:                                                                                       \
        mm_tile(MR, 1, 1, k, ai, lda, bj, ldb, cij, ldc, cscale, msk);                             \
        break;

/* Whole-vector column blocks of up to 16, then the n % 8 rest masked. */
void pg_avx2_gdn_mm(int m, int n, int k, const float *a, int64_t lda, const float *b, int64_t ldb,
                    float *c, int64_t ldc, float cscale) {
    const int nfull = n / 8, rest = n % 8;
    const __m256i msk = lane_mask(rest);
    for (int v0 = 0, nv; v0 < nfull || (rest && v0 == nfull); v0 += nv) {
        const int tail = v0 == nfull;
        nv = tail ? 1 : nfull - v0 < 2 ? nfull - v0 : 2;
        const float *bj = b + 8 * v0;
        for (int i0 = 0; i0 < m; i0 += 6) {
            const int mr = m - i0 < 6 ? m - i0 : 6;
            const float *ai = a + i0 * lda;
            float *cij = c + i0 * ldc + 8 * v0;
            /* clang-format off */
            if (tail) {
                switch (mr) {
                MM_TAIL(1) MM_TAIL(2) MM_TAIL(3) MM_TAIL(4) MM_TAIL(5) MM_TAIL(6)
                default: break;
                }
            } else {
                switch (mr * 4 + nv) {
                MM_ROW(1) MM_ROW(2) MM_ROW(3) MM_ROW(4) MM_ROW(5) MM_ROW(6)
                default: break;
                }
            }
            /* clang-format on */
        }
    }
}
