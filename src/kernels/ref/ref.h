/* Scalar reference kernels: the specification every SIMD variant is tested
 * against. Plain C, sequential left-to-right sums in f32. */
#ifndef PAGODA_KERNELS_REF_H
#define PAGODA_KERNELS_REF_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include "base/dtype.h"

float pg_ref_dot_f32(const float *a, const float *b, size_t n);
float pg_ref_dot_bf16_f32(const uint16_t *w, const float *x, size_t n);
float pg_ref_dot_f16_f32(const uint16_t *w, const float *x, size_t n);

/* attention.c: scalar attention micro-kernels (see pg_attn_ukernels in
 * kernels/attention.h) and exp over an array (libm expf, the vexp spec). */
void pg_ref_attn_qk_f32kv(const float *q, int ldq, int nr, const void *const *tiles, int bs, int nk,
                          int hd, float scale, float *s, int lds);
void pg_ref_attn_qk_bf16kv(const float *q, int ldq, int nr, const void *const *tiles, int bs,
                           int nk, int hd, float scale, float *s, int lds);
void pg_ref_attn_pv_f32kv(const float *p, int ldp, int nr, const void *const *tiles, int bs, int nk,
                          int hd, float *acc, int ldacc);
void pg_ref_attn_pv_bf16kv(const float *p, int ldp, int nr, const void *const *tiles, int bs,
                           int nk, int hd, float *acc, int ldacc);
void pg_ref_attn_softmax(float *s, int lds, int nr, int nk, float *m, float *l, float *acc,
                         int ldacc, int hd);
void pg_ref_vexp_f32(const float *x, float *y, size_t n);

/* argmax.c: index of the first largest non-NaN value; 0 if n == 0 or all NaN. */
size_t pg_ref_argmax_f32(const float *x, size_t n);

/* ---- GEMM (kernels/gemm.h). */

/* silu(x) = x * sigmoid(x) = x / (1 + e^-x) (Elfwing et al. 2017; Hendrycks
 * & Gimpel's "SiLU"), the epilogue every GEMM variant and the reference share. */
static inline float pg_silu_f32(float x) {
    return x / (1.0f + expf(-x));
}

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

/* ---- Quantized GEMM (kernels/qgemm.h). */
struct pg_qweight;
/* Scalar microkernels (pg_qgemm_ukernel, dispatch.h): mr 4, nr 8, kg 4,
 * ar 1, vw 16, signed activations; int32 sums, then one fmaf per group. */
void pg_ref_qgemm_uk_w8(int64_t ngroups, int64_t gk, const void *a, int64_t a_stride,
                        const float *as, int64_t as_stride, const int32_t *ac, int64_t ac_stride,
                        const void *w, float *c, int64_t ldc, int mr, int accumulate);
void pg_ref_qgemm_uk_w4(int64_t ngroups, int64_t gk, const void *a, int64_t a_stride,
                        const float *as, int64_t as_stride, const int32_t *ac, int64_t ac_stride,
                        const void *w, float *c, int64_t ldc, int mr, int accumulate);
void pg_ref_qgemm_uk_w8_hs(int64_t ngroups, int64_t gk, const void *a, int64_t a_stride,
                           const float *as, int64_t as_stride, const int32_t *ac, int64_t ac_stride,
                           const void *w, float *c, int64_t ldc, int mr, int accumulate);
void pg_ref_qgemm_uk_w4_hs(int64_t ngroups, int64_t gk, const void *a, int64_t a_stride,
                           const float *as, int64_t as_stride, const int32_t *ac, int64_t ac_stride,
                           const void *w, float *c, int64_t ldc, int mr, int accumulate);
/* Activation quantization entries (dispatch.h amax_f32 / quant_i8). */
float pg_ref_amax_f32(const float *x, size_t n);
int32_t pg_ref_quant_i8(const float *x, size_t n, float inv, int8_t *q);
/* The quantized GEMM specification on unpacked weights (kernels/qgemm.h):
 * w (and w_up for SwiGLU, else NULL), ep a pg_gemm_epilogue. */
void pg_ref_qgemm(const struct pg_qweight *w, const struct pg_qweight *w_up, const float *A,
                  int64_t M, int64_t lda, float *C, int64_t ldc, const float *bias, int ep);

/* ---- Gated DeltaNet (kernels/gated_delta.h, ref/gated_delta.c): the
 * scalar micro-kernels of pg_gdn_ukernels (recurrent / mm), the spec every
 * variant reproduces bit for bit. */
void pg_ref_gdn_recurrent_uk(int n, int dk, int nc, float *S, int64_t lds, const float *q,
                             const float *k, int64_t ldqk, const float *v, int64_t ldv,
                             const float *eg, const float *beta, float *o, int64_t ldo);
void pg_ref_gdn_mm_uk(int m, int n, int k, const float *a, int64_t lda, const float *b, int64_t ldb,
                      float *c, int64_t ldc, float cscale);

/* The quantized references' store of one output element c (row m, column
 * n < N): y (+ bias[n]), then PG_GEMM_STORE c = y, PG_GEMM_RESIDUAL c += y,
 * or PG_GEMM_SWIGLU c = swiglu(y + bias[n], u + bias[N + n]) by the process
 * table's swiglu_f32 (as the driver's epilogue). bias may be NULL. */
void pg_ref_qgemm_store(float *c, float y, float u, const float *bias, int64_t N, int64_t n,
                        int ep);

/* ---- MXFP4 GEMM (kernels/gemm.h "MXFP4", ref/mxfp4.c). */
/* Scalar microkernel (dispatch.h, the pg_kernel_table.mxfp4 contract): mr
 * 4, nr 8, kg 4, vw 16, signed activations; E8M0 header bytes, codes. */
void pg_ref_mxfp4_uk(int64_t ngroups, int64_t gk, const void *a, int64_t a_stride, const float *as,
                     int64_t as_stride, const int32_t *ac, int64_t ac_stride, const void *w,
                     float *c, int64_t ldc, int mr, int accumulate);
/* The MXFP4 GEMM specification on GGUF rows (block_mxfp4, 17 bytes per 32
 * weights; Wg [N, K], Wu the up half for SwiGLU, else NULL; K a multiple of
 * 32): per row m and block g, a_s = max|A[m, block]| / 127 and qa =
 * clamp(rint(A / a_s), -127, 127) (pg_qgemm_quantize_row), isum = sum qa *
 * pg_mxfp4_kvalues[code] (exact int32), y = fmaf((float)isum,
 * pg_e8m0_half_to_f32(E) * a_s, y) in increasing g; then bias and the
 * epilogue ep (a pg_gemm_epilogue) exactly as pg_ref_qgemm. */
void pg_ref_mxfp4_gemm(const void *Wg, const void *Wu, int64_t N, int64_t K, const float *A,
                       int64_t M, int64_t lda, float *C, int64_t ldc, const float *bias, int ep);

/* ---- K-quant GEMM (kernels/gemm.h "K-quants", ref/kquant.c). */
/* Scalar microkernels (dispatch.h, the pg_kernel_table.q2_k .. q6_k and
 * iq4_xs contract) on the packed layout of gemm_kquant.c: mr 4, nr 32. */
void pg_ref_kq_uk_q2_k(int64_t ngroups, int64_t gk, const void *a, int64_t a_stride,
                       const float *as, int64_t as_stride, const int32_t *ac, int64_t ac_stride,
                       const void *w, float *c, int64_t ldc, int mr, int accumulate);
void pg_ref_kq_uk_q3_k(int64_t ngroups, int64_t gk, const void *a, int64_t a_stride,
                       const float *as, int64_t as_stride, const int32_t *ac, int64_t ac_stride,
                       const void *w, float *c, int64_t ldc, int mr, int accumulate);
void pg_ref_kq_uk_q4_k(int64_t ngroups, int64_t gk, const void *a, int64_t a_stride,
                       const float *as, int64_t as_stride, const int32_t *ac, int64_t ac_stride,
                       const void *w, float *c, int64_t ldc, int mr, int accumulate);
void pg_ref_kq_uk_q5_k(int64_t ngroups, int64_t gk, const void *a, int64_t a_stride,
                       const float *as, int64_t as_stride, const int32_t *ac, int64_t ac_stride,
                       const void *w, float *c, int64_t ldc, int mr, int accumulate);
void pg_ref_kq_uk_q6_k(int64_t ngroups, int64_t gk, const void *a, int64_t a_stride,
                       const float *as, int64_t as_stride, const int32_t *ac, int64_t ac_stride,
                       const void *w, float *c, int64_t ldc, int mr, int accumulate);
void pg_ref_kq_uk_iq4_xs(int64_t ngroups, int64_t gk, const void *a, int64_t a_stride,
                         const float *as, int64_t as_stride, const int32_t *ac, int64_t ac_stride,
                         const void *w, float *c, int64_t ldc, int mr, int accumulate);
void pg_ref_kq_uk_iq4_nl(int64_t ngroups, int64_t gk, const void *a, int64_t a_stride,
                         const float *as, int64_t as_stride, const int32_t *ac, int64_t ac_stride,
                         const void *w, float *c, int64_t ldc, int mr, int accumulate);
/* The K-quant GEMM specification on GGUF rows of type t (Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_XS, IQ4_NL;
 * Wg [N, K], Wu the up half for SwiGLU, else NULL; K a multiple of 256):
 * per row m and super-block g, a_s = max|A[m, g]| / 127, qa = clamp(rint(A
 * / a_s), -127, 127), bsum_t = the sum of qa over the 16 k of t; per
 * column n with the decoded block (base/kquant.h: d, dm, sc, m, u, sub)
 *   P = sum_s sc[s] * sum_{k in s} qa[k] u[k],  Q = sum_s m[s] * sum_{t in s} bsum_t
 * (exact int32), y = fmaf((float)P, d * a_s, y), y = fmaf(-(float)Q, dm *
 * a_s, y) in increasing g; IQ4_XS: u[k] replaced by the codebook value
 * pg_iq4nl_kvalues[u[k]] and no Q step; IQ4_NL (K a multiple of 256):
 * eight blocks as one super-block, and per sub-block s in order y =
 * fmaf((float)sum_{k in s} qa[k] kv[u[k]], ds[s] * a_s, y) instead. Then
 * bias and the epilogue ep exactly as pg_ref_qgemm. */
void pg_ref_kq_gemm(pg_dtype t, const void *Wg, const void *Wu, int64_t N, int64_t K,
                    const float *A, int64_t M, int64_t lda, float *C, int64_t ldc,
                    const float *bias, int ep);

#endif
