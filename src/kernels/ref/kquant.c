/* Scalar K-quant GEMM: the "scalar" table's microkernels for the packed
 * layout of gemm_kquant.c, and the specification pg_ref_kq_gemm on GGUF
 * rows (kernels/gemm.h "K-quants", dispatch.h above pg_kernel_table).
 * Block layouts: base/kquant.h (llama.cpp ggml-common.h / ggml-quants.c);
 * the activation blocks are llama.cpp's block_q8_K (one scale per 256, the
 * sums of every 16). IQ4_XS is the codebook row: u is a nibble, its weight
 * pg_iq4nl_kvalues[u] (base/kquant.h). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/dtype.h"
#include "base/kquant.h"
#include "kernels/gemm.h"
#include "kernels/gemm_driver.h"
#include "kernels/kquant_uk.h"
#include "kernels/qgemm.h"
#include "kernels/ref/ref.h"

/* u of column j at k of one packed super-block's nibble plane nib
 * (gemm_kquant.c layout). */
static int packed_u(const uint8_t *nib, int bits, int k, int j) {
    const int ch = k / 4, half = j / 16, at = (j % 16) * 4 + k % 4, hb = bits - 4;
    int u = half ? nib[ch * 64 + at] >> 4 : nib[ch * 64 + at] & 15;
    if (hb) {
        const int per = 4 / hb, v = 2 * (ch % per) + half;
        u |= ((nib[PG_KQ_NIB_BYTES + (ch / per) * 64 + at] >> (hb * v)) & ((1 << hb) - 1)) << 4;
    }
    return u;
}

static uint16_t rd16(const uint8_t *p) {
    uint16_t v;
    memcpy(&v, p, 2);
    return v;
}

/* One super-block's float step (the order every kernel follows); the
 * codebook type (IQ4_XS) has no minimum term. */
static float kq_step(float y, int32_t P, int32_t Q, float d, float dm, float as, int cb) {
    y = fmaf((float)P, d * as, y);
    return cb ? y : fmaf(-(float)Q, dm * as, y);
}

/* The integer weight of u: the codebook value for IQ4_XS, else u. */
static int weight_of(int u, int cb) {
    return cb ? pg_iq4nl_kvalues[u] : u;
}

static void ref_kq_uk(int bits, int sub, int has_min, int cb, int fs, int64_t ngroups,
                      const void *a, int64_t a_stride, const float *as, int64_t as_stride,
                      const int32_t *ac, int64_t ac_stride, const void *w, float *c, int64_t ldc,
                      int mr, int accumulate) {
    const pg_kq_shape sh = pg_kq_shape_of(bits, sub, has_min, fs);
    const int S = sh.S;
    for (int i = 0; i < mr; i++) {
        const int8_t *ar = (const int8_t *)a + i * a_stride;
        const int16_t *bs = (const int16_t *)(ac + i * ac_stride);
        for (int j = 0; j < PG_KQ_NR; j++) {
            float y = accumulate ? c[i * ldc + j] : 0.0f;
            for (int64_t g = 0; g < ngroups; g++) {
                const pg_kq_view gv = pg_kq_view_at(w, g, &sh, has_min);
                const uint8_t *grp = (const uint8_t *)gv.grp;
                const int8_t *sc = gv.sc, *m = gv.m;
                int32_t P = 0, Q = 0;
                for (int s = 0; s < S; s++) {
                    int32_t isum = 0, bsum = 0;
                    for (int k = s * sub; k < (s + 1) * sub; k++)
                        isum += (int32_t)ar[g * PG_QK_K + k] *
                                weight_of(packed_u(gv.nib, bits, k, j), cb);
                    if (fs) { /* IQ4_NL: the sub-block's own F16 scale */
                        const float ds = pg_f16_to_f32(rd16(grp + 2 * (s * PG_KQ_NR + j)));
                        y = fmaf((float)isum, ds * as[i * as_stride + g], y);
                        continue;
                    }
                    for (int t = s * sub / 16; t < (s + 1) * sub / 16; t++)
                        bsum += bs[g * 16 + t];
                    P += sc[s * PG_KQ_NR + j] * isum;
                    Q += m[s * PG_KQ_NR + j] * bsum;
                }
                if (fs) continue;
                y = kq_step(y, P, Q, pg_f16_to_f32(rd16(grp + 2 * j)),
                            pg_f16_to_f32(rd16(grp + 2 * PG_KQ_NR + 2 * j)), as[i * as_stride + g],
                            cb);
            }
            c[i * ldc + j] = y;
        }
    }
}

#define REF_KQ(NAME, BITS, SUB, MIN, CB, FS)                                                       \
    void NAME(int64_t ngroups, int64_t gk, const void *a, int64_t a_stride, const float *as,       \
              int64_t as_stride, const int32_t *ac, int64_t ac_stride, const void *w, float *c,    \
              int64_t ldc, int mr, int accumulate) {                                               \
        (void)gk;                                                                                  \
        ref_kq_uk(BITS, SUB, MIN, CB, FS, ngroups, a, a_stride, as, as_stride, ac, ac_stride, w,   \
                  c, ldc, mr, accumulate);                                                         \
    }
PG_KQ_ROWS(REF_KQ, pg_ref_kq_uk)

/* Row n of a GGUF K-quant weight: one output element from the int8
 * activations qa (K), their per-256 scales asg and 16-sums bs. */
static float ref_dot(pg_dtype t, const uint8_t *W, int64_t n, int64_t K, const int8_t *qa,
                     const float *asg, const int32_t *bs) {
    const int64_t nb = K / PG_QK_K;
    const size_t bb = pg_kq_super_bytes(t);
    const int cb = pg_kq_codebook(t), fs = pg_kq_fscale(t);
    pg_kq_block b;
    float y = 0.0f;
    for (int64_t g = 0; g < nb; g++) {
        (void)pg_kq_decode(t, W + (size_t)(n * nb + g) * bb, &b);
        int32_t P = 0, Q = 0;
        for (int s = 0; s < PG_QK_K / b.sub; s++) {
            int32_t isum = 0, bsum = 0;
            for (int k = s * b.sub; k < (s + 1) * b.sub; k++)
                isum += (int32_t)qa[g * PG_QK_K + k] * weight_of(b.u[k], cb);
            if (fs) {
                y = fmaf((float)isum, pg_f16_to_f32(b.ds[s]) * asg[g], y);
                continue;
            }
            for (int q = s * b.sub / 16; q < (s + 1) * b.sub / 16; q++)
                bsum += bs[g * 16 + q];
            P += b.sc[s] * isum;
            Q += b.m[s] * bsum;
        }
        if (!fs) y = kq_step(y, P, Q, pg_f16_to_f32(b.d), pg_f16_to_f32(b.dm), asg[g], cb);
    }
    return y;
}

void pg_ref_kq_gemm(pg_dtype t, const void *Wg, const void *Wu, int64_t N, int64_t K,
                    const float *A, int64_t M, int64_t lda, float *C, int64_t ldc,
                    const float *bias, int ep) {
    const int64_t nb = K / PG_QK_K;
    int8_t *qa = malloc((size_t)K);
    float *asg = malloc((size_t)nb * sizeof(float));
    int32_t *bs = malloc((size_t)nb * 16 * sizeof(int32_t));
    if (!qa || !asg || !bs) abort();
    for (int64_t m = 0; m < M; m++) {
        for (int64_t g = 0; g < nb; g++) {
            const float *x = A + m * lda + g * PG_QK_K;
            const float mx = pg_ref_amax_f32(x, PG_QK_K);
            asg[g] = mx / 127.0f;
            for (int s = 0; s < 16; s++)
                bs[g * 16 + s] = pg_ref_quant_i8(x + 16 * s, 16, mx > 0.0f ? 127.0f / mx : 0.0f,
                                                 qa + g * PG_QK_K + 16 * s);
        }
        for (int64_t n = 0; n < N; n++) {
            const float y = ref_dot(t, Wg, n, K, qa, asg, bs);
            const float u = ep == PG_GEMM_SWIGLU ? ref_dot(t, Wu, n, K, qa, asg, bs) : 0.0f;
            pg_ref_qgemm_store(&C[m * ldc + n], y, u, bias, N, n, ep);
        }
    }
    free(qa);
    free(asg);
    free(bs);
}
