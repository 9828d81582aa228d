/* Scalar MXFP4 GEMM: the "scalar" table's microkernel and the
 * specification pg_ref_mxfp4_gemm on GGUF rows (kernels/gemm.h "MXFP4",
 * dispatch.h above pg_kernel_table). Formats: OCP Microscaling Formats
 * (MX) v1.0 (E2M1 elements, E8M0 block scale, 32 per block); GGUF
 * block_mxfp4 and the doubled value table from llama.cpp
 * ggml/src/ggml-common.h, the halved scale from ggml/src/ggml-impl.h
 * ggml_e8m0_to_fp32_half (base/dtype.h). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/dtype.h"
#include "kernels/dispatch.h"
#include "kernels/gemm.h"
#include "kernels/qgemm.h"
#include "kernels/ref/ref.h"

/* The scalar layout: nr 8, kg 4, vw 16 (that of ref/qgemm.c). */
enum { REF_NR = 8, REF_KG = 4, REF_VW = 16, BLK = 32 };

/* Code of column j at block-local k of one block's packed codes. */
static int ref_code(const uint8_t *d, int64_t k, int j) {
    int64_t s = (k / REF_KG) * REF_NR * REF_KG + (int64_t)j * REF_KG + k % REF_KG;
    int64_t b = s / (2 * REF_VW), in = s % (2 * REF_VW);
    uint8_t byte = d[b * REF_VW + in % REF_VW];
    return in < REF_VW ? (byte & 0xF) : (byte >> 4);
}

void pg_ref_mxfp4_uk(int64_t ngroups, int64_t gk, const void *a, int64_t a_stride, const float *as,
                     int64_t as_stride, const int32_t *ac, int64_t ac_stride, const void *w,
                     float *c, int64_t ldc, int mr, int accumulate) {
    (void)ac;
    (void)ac_stride;
    const int8_t *ap = a;
    const size_t gbytes = REF_NR + (size_t)(gk * REF_NR / 2);
    for (int i = 0; i < mr; i++) {
        for (int j = 0; j < REF_NR; j++) {
            float y = accumulate ? c[i * ldc + j] : 0.0f;
            for (int64_t g = 0; g < ngroups; g++) {
                const uint8_t *grp = (const uint8_t *)w + (size_t)g * gbytes;
                const int8_t *ar = ap + i * a_stride + g * gk;
                int32_t isum = 0;
                for (int64_t k = 0; k < gk; k++)
                    isum += (int32_t)ar[k] * pg_mxfp4_kvalues[ref_code(grp + REF_NR, k, j)];
                const float s = pg_e8m0_half_to_f32(grp[j]) * as[i * as_stride + g];
                y = fmaf((float)isum, s, y);
            }
            c[i * ldc + j] = y;
        }
    }
}

/* Row n of a GGUF MXFP4 weight: one output element from the quantized
 * activations qa (K) and their per-block scales asg. */
static float ref_dot(const uint8_t *W, int64_t n, int64_t K, const int8_t *qa, const float *asg) {
    const int64_t nb = K / BLK;
    const uint8_t *blk = W + (size_t)(n * nb) * 17;
    float y = 0.0f;
    for (int64_t g = 0; g < nb; g++, blk += 17) {
        int32_t isum = 0;
        for (int j = 0; j < 16; j++) {
            isum += (int32_t)qa[g * BLK + j] * pg_mxfp4_kvalues[blk[1 + j] & 0xF];
            isum += (int32_t)qa[g * BLK + j + 16] * pg_mxfp4_kvalues[blk[1 + j] >> 4];
        }
        y = fmaf((float)isum, pg_e8m0_half_to_f32(blk[0]) * asg[g], y);
    }
    return y;
}

void pg_ref_mxfp4_gemm(const void *Wg, const void *Wu, int64_t N, int64_t K, const float *A,
                       int64_t M, int64_t lda, float *C, int64_t ldc, const float *bias, int ep) {
    const int64_t nb = K / BLK;
    int8_t *qa = malloc((size_t)K);
    float *asg = malloc((size_t)(nb + 1) * sizeof(float));
    if (!qa || !asg) abort();
    for (int64_t m = 0; m < M; m++) {
        for (int64_t g = 0; g < nb; g++)
            pg_qgemm_quantize_row(A + m * lda + g * BLK, BLK, qa + g * BLK, &asg[g]);
        for (int64_t n = 0; n < N; n++) {
            const float y = ref_dot(Wg, n, K, qa, asg);
            const float u = ep == PG_GEMM_SWIGLU ? ref_dot(Wu, n, K, qa, asg) : 0.0f;
            pg_ref_qgemm_store(&C[m * ldc + n], y, u, bias, N, n, ep);
        }
    }
    free(qa);
    free(asg);
}
