/* Scalar reference kernels: the specification every SIMD variant is tested
 * against. Plain C, sequential left-to-right sums in f32. */
#ifndef PAGODA_KERNELS_REF_H
#define PAGODA_KERNELS_REF_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "base/dtype.h"

float pg_ref_dot_f32(const float *a, const float *b, size_t n);
float pg_ref_dot_bf16_f32(const uint16_t *w, const float *x, size_t n);
float pg_ref_dot_f16_f32(const uint16_t *w, const float *x, size_t n);

/* ---- GEMM (kernels/gemm.h). */

/* e^x for the GEMM's SwiGLU epilogue, specified operation by operation so
 * every SIMD variant reproduces it bit for bit: x clamped to [-87, 88];
 * n = rint(x * log2(e)) (nearest even); r = x - n ln2 with ln2 split in two
 * (Cody & Waite 1980), each step one fused multiply-add; e^r by the degree-7
 * Taylor polynomial in Horner form with FMA (|r| <= 0.35: truncation error
 * < 1e-8 relative); times 2^n built from exponent bits. Within 2 ulp of
 * expf on [-87, 88] (tests/test_gemm.c checks 4). NaN is not propagated
 * (the clamp of a NaN is unspecified). */
static inline float pg_gemm_expf(float x) {
    x = x < -87.0f ? -87.0f : x;
    x = x > 88.0f ? 88.0f : x;
    float n = rintf(x * 1.44269502e+00f);
    float r = fmaf(n, -6.93145752e-01f, x);
    r = fmaf(n, -1.42860677e-06f, r);
    float p = 1.98412698e-04f; /* 1/7! */
    p = fmaf(p, r, 1.38888889e-03f);
    p = fmaf(p, r, 8.33333333e-03f);
    p = fmaf(p, r, 4.16666667e-02f);
    p = fmaf(p, r, 1.66666667e-01f);
    p = fmaf(p, r, 5.00000000e-01f);
    p = fmaf(p, r, 1.0f);
    p = fmaf(p, r, 1.0f);
    uint32_t bits = (uint32_t)((int32_t)n + 127) << 23;
    float scale;
    memcpy(&scale, &bits, 4);
    return p * scale;
}

/* silu(x) = x * sigmoid(x) = x / (1 + e^-x) (Elfwing et al. 2017; Hendrycks
 * & Gimpel's "SiLU") with e^-x from pg_gemm_expf: the SwiGLU epilogue every
 * GEMM variant and the reference share (it may differ from expf-based SiLU,
 * e.g. pg_swiglu in ops.h, in the last bits). */
static inline float pg_silu_f32(float x) {
    return x / (1.0f + pg_gemm_expf(-x));
}

/* out[i] = silu(gate[i]) * up[i] over n >= 0 floats (the SwiGLU epilogue;
 * out may alias gate or up). */
void pg_ref_swiglu_f32(float *out, const float *gate, const float *up, size_t n);

/* dst[i] = bf16(src[i]), round to nearest even, NaN stays NaN. */
void pg_ref_cvt_f32_bf16(const float *src, uint16_t *dst, size_t n);

/* Scalar microkernels (see pg_gemm_ukernel in kernels/dispatch.h):
 * bf16: mr <= 4, nr 16, kg 2, ar 1. Per k-pair (k0 = 2g, k1 = 2g+1):
 *       c += a[k1]*w[k1]; c += a[k0]*w[k0]  (each product exact in f32, each
 *       add rounded: the order of the VDPBF16PS pseudocode, Intel SDM vol. 2,
 *       which x86 variants reproduce bit for bit).
 * f32:  mr <= 4, nr 16, kg 1, ar 1. c = fmaf(a[k], w[k], c), k increasing. */
void pg_ref_gemm_uk_bf16(int64_t ngroups, const void *a, int64_t a_stride, const void *w, float *c,
                         int64_t ldc, int mr, int accumulate);
void pg_ref_gemm_uk_f32(int64_t ngroups, const void *a, int64_t a_stride, const void *w, float *c,
                        int64_t ldc, int mr, int accumulate);

/* The GEMM specification on unpacked data (kernels/gemm.h for the meaning):
 * W [N, K] of wdtype F32/F16/BF16 (W_up: the up half of a SwiGLU pair, else
 * NULL), ep a pg_gemm_epilogue. F32: fmaf over increasing k. F16/BF16: W and
 * A rounded to BF16, k-pairs summed as pg_ref_gemm_uk_bf16 does (odd K: a
 * zero k appended). If y_out is not NULL it receives the raw sums
 * y [M, N] (SwiGLU: [M, 2N], gate then up), row stride 2N, for tests. */
void pg_ref_gemm(pg_dtype wdtype, const void *W, const void *W_up, int64_t N, int64_t K,
                 const float *A, int64_t M, int64_t lda, float *C, int64_t ldc, const float *bias,
                 int ep, float *y_out);

#endif
