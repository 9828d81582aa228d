/* Gated DeltaNet micro-kernels, Advanced SIMD (pg_gdn_ukernels,
 * kernels/gated_delta.h). Bitwise equal to pg_ref_gdn_recurrent_uk /
 * pg_ref_gdn_mm_uk: the same fused multiply-add chains in the same order
 * (FMLA, FMLS), 4 columns per vector; the last n % 4 columns (no masked
 * loads here) run the scalar reference, whose per-column arithmetic is the
 * same.
 *   recurrent: column blocks of up to 32 (8 q registers), all tokens per
 *     block;
 *   mm: tiles of up to 5 rows x 16 columns (20 accumulators). */
#include <arm_neon.h>

#include "kernels/arm/arm.h"
#include "kernels/ref/ref.h"

#define INLINE static inline __attribute__((always_inline))

INLINE void rec_block(const int NV, int n, int dk, float *S, int64_t lds, const float *q,
                      const float *k, int64_t ldqk, const float *v, int64_t ldv, const float *eg,
                      const float *beta, float *o, int64_t ldo) {
    for (int t = 0; t < n; t++) {
        const float *qt = q + t * ldqk, *kt = k + t * ldqk;
        float32x4_t kv[8], d[8], acc[8];
#pragma GCC unroll 8
        for (int u = 0; u < NV; u++)
            kv[u] = vdupq_n_f32(0.0f);
        for (int i = 0; i < dk; i++) {
            const float32x4_t ki = vld1q_dup_f32(kt + i);
            const float *si = S + i * lds;
#pragma GCC unroll 8
            for (int u = 0; u < NV; u++)
                kv[u] = vfmaq_f32(kv[u], vld1q_f32(si + 4 * u), ki);
        }
        const float32x4_t e = vdupq_n_f32(eg[t]), bt = vdupq_n_f32(beta[t]);
        const float *vt = v + t * ldv;
#pragma GCC unroll 8
        for (int u = 0; u < NV; u++) {
            d[u] = vmulq_f32(vfmsq_f32(vld1q_f32(vt + 4 * u), kv[u], e), bt);
            acc[u] = vdupq_n_f32(0.0f);
        }
        for (int i = 0; i < dk; i++) {
            const float32x4_t ki = vld1q_dup_f32(kt + i), qi = vld1q_dup_f32(qt + i);
            float *si = S + i * lds;
#pragma GCC unroll 8
            for (int u = 0; u < NV; u++) {
                const float32x4_t s = vfmaq_f32(vmulq_f32(vld1q_f32(si + 4 * u), e), ki, d[u]);
                vst1q_f32(si + 4 * u, s);
                acc[u] = vfmaq_f32(acc[u], s, qi);
            }
        }
        float *ot = o + t * ldo;
#pragma GCC unroll 8
        for (int u = 0; u < NV; u++)
            vst1q_f32(ot + 4 * u, acc[u]);
    }
}

#define REC_CASE(NV)                                                                               \
    case NV:                                                                                       \
        rec_block(NV, n, dk, Sc, lds, q, k, ldqk, vc, ldv, eg, beta, oc, ldo);                     \
        break;

void pg_neon_gdn_recurrent(int n, int dk, int nc, float *S, int64_t lds, const float *q,
                           const float *k, int64_t ldqk, const float *v, int64_t ldv,
                           const float *eg, const float *beta, float *o, int64_t ldo) {
    const int nc4 = nc & ~3;
    for (int c0 = 0; c0 < nc4; c0 += 32) {
        const int nv = (nc4 - c0 < 32 ? nc4 - c0 : 32) / 4;
        float *Sc = S + c0, *oc = o + c0;
        const float *vc = v + c0;
        /* clang-format off */
        switch (nv) {
        REC_CASE(1) REC_CASE(2) REC_CASE(3) REC_CASE(4) REC_CASE(5) REC_CASE(6) REC_CASE(7)
        default: rec_block(8, n, dk, Sc, lds, q, k, ldqk, vc, ldv, eg, beta, oc, ldo); break;
        }
        /* clang-format on */
    }
    if (nc4 < nc)
        pg_ref_gdn_recurrent_uk(n, dk, nc - nc4, S + nc4, lds, q, k, ldqk, v + nc4, ldv, eg, beta,
                                o + nc4, ldo);
}

INLINE void mm_tile(const int MR, const int NV, int k, const float *a, int64_t lda, const float *b,
                    int64_t ldb, float *c, int64_t ldc, float cscale) {
    float32x4_t acc[5][4];
    if (cscale != 0.0f) {
        const float32x4_t cs = vdupq_n_f32(cscale);
#pragma GCC unroll 5
        for (int i = 0; i < MR; i++)
#pragma GCC unroll 4
            for (int u = 0; u < NV; u++)
                acc[i][u] = vmulq_f32(vld1q_f32(c + i * ldc + 4 * u), cs);
    } else {
#pragma GCC unroll 5
        for (int i = 0; i < MR; i++)
#pragma GCC unroll 4
            for (int u = 0; u < NV; u++)
                acc[i][u] = vdupq_n_f32(0.0f);
    }
    for (int p = 0; p < k; p++) {
        float32x4_t bv[4];
#pragma GCC unroll 4
        for (int u = 0; u < NV; u++)
            bv[u] = vld1q_f32(b + p * ldb + 4 * u);
#pragma GCC unroll 5
        for (int i = 0; i < MR; i++) {
            const float32x4_t ai = vld1q_dup_f32(a + i * lda + p);
#pragma GCC unroll 4
            for (int u = 0; u < NV; u++)
                acc[i][u] = vfmaq_f32(acc[i][u], ai, bv[u]);
        }
    }
#pragma GCC unroll 5
    for (int i = 0; i < MR; i++)
#pragma GCC unroll 4
        for (int u = 0; u < NV; u++)
            vst1q_f32(c + i * ldc + 4 * u, acc[i][u]);
}

#define MM_CASE(MR, NV)                                                                            \
    case (MR)*8 + (NV):                                                                            \
        mm_tile(MR, NV, k, ai, lda, bj, ldb, cij, ldc, cscale);                                    \
        break;
#define MM_ROW(MR) MM_CASE(MR, 1) MM_CASE(MR, 2) MM_CASE(MR, 3) MM_CASE(MR, 4)

void pg_neon_gdn_mm(int m, int n, int k, const float *a, int64_t lda, const float *b, int64_t ldb,
                    float *c, int64_t ldc, float cscale) {
    const int n4 = n & ~3;
    for (int j0 = 0; j0 < n4; j0 += 16) {
        const int nv = (n4 - j0 < 16 ? n4 - j0 : 16) / 4;
        const float *bj = b + j0;
        for (int i0 = 0; i0 < m; i0 += 5) {
            const int mr = m - i0 < 5 ? m - i0 : 5;
            const float *ai = a + i0 * lda;
            float *cij = c + i0 * ldc + j0;
            /* clang-format off */
            switch (mr * 8 + nv) {
            MM_ROW(1) MM_ROW(2) MM_ROW(3) MM_ROW(4) MM_ROW(5)
            default: break;
            }
            /* clang-format on */
        }
    }
    if (n4 < n) pg_ref_gdn_mm_uk(m, n - n4, k, a, lda, b + n4, ldb, c + n4, ldc, cscale);
}
