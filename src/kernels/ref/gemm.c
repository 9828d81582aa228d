/* Scalar GEMM: the reference microkernels (also the "scalar" table's GEMM)
 * and the plain specification pg_ref_gemm. See ref.h. */
#include <math.h>
#include <string.h>

#include "kernels/gemm.h"
#include "kernels/ref/ref.h"

void pg_ref_cvt_f32_bf16(const float *src, uint16_t *dst, size_t n) {
    for (size_t i = 0; i < n; i++)
        dst[i] = pg_f32_to_bf16(src[i]);
}

enum { REF_MR = 4, REF_NR = 16 };

void pg_ref_gemm_uk_bf16(int64_t ngroups, const void *a, int64_t a_stride, const void *w, float *c,
                         int64_t ldc, int mr, int accumulate) {
    const uint16_t *ap = a, *wp = w;
    for (int i = 0; i < mr; i++) {
        float acc[REF_NR];
        for (int j = 0; j < REF_NR; j++)
            acc[j] = accumulate ? c[i * ldc + j] : 0.0f;
        const uint16_t *ar = ap + i * a_stride;
        for (int64_t g = 0; g < ngroups; g++) {
            float a0 = pg_bf16_to_f32(ar[2 * g]), a1 = pg_bf16_to_f32(ar[2 * g + 1]);
            const uint16_t *wg = wp + g * 2 * REF_NR;
            for (int j = 0; j < REF_NR; j++) {
                acc[j] += a1 * pg_bf16_to_f32(wg[2 * j + 1]);
                acc[j] += a0 * pg_bf16_to_f32(wg[2 * j]);
            }
        }
        for (int j = 0; j < REF_NR; j++)
            c[i * ldc + j] = acc[j];
    }
}

void pg_ref_gemm_uk_f32(int64_t ngroups, const void *a, int64_t a_stride, const void *w, float *c,
                        int64_t ldc, int mr, int accumulate) {
    const float *ap = a, *wp = w;
    for (int i = 0; i < mr; i++) {
        float acc[REF_NR];
        for (int j = 0; j < REF_NR; j++)
            acc[j] = accumulate ? c[i * ldc + j] : 0.0f;
        const float *ar = ap + i * a_stride;
        for (int64_t k = 0; k < ngroups; k++)
            for (int j = 0; j < REF_NR; j++)
                acc[j] = fmaf(ar[k], wp[k * REF_NR + j], acc[j]);
        for (int j = 0; j < REF_NR; j++)
            c[i * ldc + j] = acc[j];
    }
}

static float w_at(pg_dtype t, const void *W, int64_t K, int64_t n, int64_t k) {
    if (t == PG_F32) return ((const float *)W)[n * K + k];
    uint16_t h = ((const uint16_t *)W)[n * K + k];
    return t == PG_F16 ? pg_f16_to_f32(h) : pg_bf16_to_f32(h);
}

/* y = sum_k A[m,k] W[n,k] in the specified order. */
static float ref_dot(pg_dtype t, const void *W, int64_t K, int64_t n, const float *a) {
    float acc = 0.0f;
    if (t == PG_F32) {
        for (int64_t k = 0; k < K; k++)
            acc = fmaf(a[k], w_at(t, W, K, n, k), acc);
        return acc;
    }
    for (int64_t k0 = 0; k0 < K; k0 += 2) {
        float a0 = pg_bf16_to_f32(pg_f32_to_bf16(a[k0]));
        float w0 = pg_bf16_to_f32(pg_f32_to_bf16(w_at(t, W, K, n, k0)));
        float a1 = 0.0f, w1 = 0.0f;
        if (k0 + 1 < K) {
            a1 = pg_bf16_to_f32(pg_f32_to_bf16(a[k0 + 1]));
            w1 = pg_bf16_to_f32(pg_f32_to_bf16(w_at(t, W, K, n, k0 + 1)));
        }
        acc += a1 * w1;
        acc += a0 * w0;
    }
    return acc;
}

void pg_ref_gemm(pg_dtype wdtype, const void *W, const void *W_up, int64_t N, int64_t K,
                 const float *A, int64_t M, int64_t lda, float *C, int64_t ldc, const float *bias,
                 int ep, float *y_out) {
    for (int64_t m = 0; m < M; m++) {
        const float *a = A + m * lda;
        for (int64_t n = 0; n < N; n++) {
            float y = ref_dot(wdtype, W, K, n, a);
            if (ep == PG_GEMM_SWIGLU) {
                float u = ref_dot(wdtype, W_up, K, n, a);
                if (y_out) y_out[m * 2 * N + n] = y, y_out[m * 2 * N + N + n] = u;
                if (bias) y += bias[n], u += bias[N + n];
                C[m * ldc + n] = pg_silu_f32(y) * u;
                continue;
            }
            if (y_out) y_out[m * 2 * N + n] = y;
            if (bias) y += bias[n];
            if (ep == PG_GEMM_RESIDUAL)
                C[m * ldc + n] += y;
            else
                C[m * ldc + n] = y;
        }
    }
}
