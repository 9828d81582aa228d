/* aarch64 SIMD kernel variants. Each has the signature and meaning of the
 * dispatch table entry of the same name (src/kernels/dispatch.h) and of its
 * scalar reference in src/kernels/ref/; only the summation order differs
 * (fixed for a given n and, for SVE, the machine's vector length). Call them
 * only through the dispatch table, which checks the CPU first: the files are
 * compiled with ISA flags taken from their name suffix (cmake/arch.cmake). */
#ifndef PAGODA_KERNELS_ARM_H
#define PAGODA_KERNELS_ARM_H

#include <stddef.h>
#include <stdint.h>

/* dot_neon.c: Advanced SIMD. 4 accumulators x 4 lanes (16 elements per
 * step); the tail (< 16) is zero-padded into one more step. */
float pg_neon_dot_f32(const float *a, const float *b, size_t n);
float pg_neon_dot_bf16_f32(const uint16_t *w, const float *x, size_t n);
float pg_neon_dot_f16_f32(const uint16_t *w, const float *x, size_t n);

/* dot_sve.c: SVE, vector-length agnostic. 2 accumulators x VL (2*VL
 * elements per step), then predicated VL steps (svwhilelt) for the rest. */
float pg_sve_dot_f32(const float *a, const float *b, size_t n);
float pg_sve_dot_bf16_f32(const uint16_t *w, const float *x, size_t n);
float pg_sve_dot_f16_f32(const uint16_t *w, const float *x, size_t n);

/* attention_neon.c: paged-attention micro-kernels (pg_attn_ukernels,
 * kernels/attention.h; BF16 K/V widened exactly) and the vector exp.
 * attention_bf16.c (FEAT_BF16): BF16-KV QK and PV with BFDOT (q and p
 * rounded to BF16). */
void pg_neon_vexp_f32(const float *x, float *y, size_t n);
void pg_neon_attn_qk_f32kv(const float *q, int ldq, int nr, const void *const *tiles, int bs,
                           int nk, int hd, float scale, float *s, int lds);
void pg_neon_attn_qk_bf16kv(const float *q, int ldq, int nr, const void *const *tiles, int bs,
                            int nk, int hd, float scale, float *s, int lds);
void pg_neon_attn_softmax(float *s, int lds, int nr, int nk, float *m, float *l, float *acc,
                          int ldacc, int hd);
void pg_neon_attn_pv_f32kv(const float *p, int ldp, int nr, const void *const *tiles, int bs,
                           int nk, int hd, float *acc, int ldacc);
void pg_neon_attn_pv_bf16kv(const float *p, int ldp, int nr, const void *const *tiles, int bs,
                            int nk, int hd, float *acc, int ldacc);
void pg_neon_bf16_attn_qk_bf16kv(const float *q, int ldq, int nr, const void *const *tiles, int bs,
                                 int nk, int hd, float scale, float *s, int lds);
void pg_neon_bf16_attn_pv_bf16kv(const float *p, int ldp, int nr, const void *const *tiles, int bs,
                                 int nk, int hd, float *acc, int ldacc);

/* ops_neon.c: row ops (dispatch entries rmsnorm_f32 ...). */
void pg_neon_rmsnorm_f32(float *out, const float *x, const float *w, size_t m, size_t n, float eps);
void pg_neon_softmax_f32(float *x, size_t n);
void pg_neon_silu_f32(float *out, const float *x, size_t n);
void pg_neon_swiglu_f32(float *out, const float *gate, const float *up, size_t n);
size_t pg_neon_argmax_f32(const float *x, size_t n);
void pg_neon_layernorm_f32(float *out, const float *x, const float *w, const float *b, size_t m,
                           size_t n, float eps);
void pg_neon_gelu_f32(float *out, const float *x, size_t n);
/* GEMM microkernels (pg_gemm_ukernel, dispatch.h).
 * gemm_neon.c: f32 5x16 (FMLA, one FMA per product in increasing k:
 *   bitwise the reference); bf16 for cores without FEAT_BF16 4x16 (k-pairs,
 *   widen + FMA odd then even: bitwise the reference); cvt_f32_bf16.
 * gemm_bf16.c: bf16 8x8 with BFMMLA (kg 4, A in row pairs: ar 2). */
void pg_neon_gemm_uk_f32(int64_t ngroups, const void *a, int64_t a_stride, const void *w, float *c,
                         int64_t ldc, int mr, int accumulate);
void pg_neon_gemm_uk_bf16(int64_t ngroups, const void *a, int64_t a_stride, const void *w, float *c,
                          int64_t ldc, int mr, int accumulate);
void pg_neon_cvt_f32_bf16(const float *src, uint16_t *dst, size_t n);
void pg_bf16_gemm_uk_bfmmla(int64_t ngroups, const void *a, int64_t a_stride, const void *w,
                            float *c, int64_t ldc, int mr, int accumulate);
void pg_bf16_gemm_uk_bfmmla_pf(int64_t ngroups, const void *a, int64_t a_stride, const void *w,
                               float *c, int64_t ldc, int mr, int accumulate, const void *pf,
                               int64_t pf_lines);

/* vexp_sve.c: the vector exp with SVE (vector-length agnostic). */
void pg_sve_vexp_f32(const float *x, float *y, size_t n);

/* quant_neon.c: the quantized GEMM's activation input stage (dispatch
 * entries amax_f32 / quant_i8). */
float pg_neon_amax_f32(const float *x, size_t n);
int32_t pg_neon_quant_i8(const float *x, size_t n, float inv, int8_t *q);

/* Quantized GEMM microkernels (pg_qgemm_ukernel, dispatch.h; bitwise equal
 * to the scalar reference). qgemm_dotprod.c: 4x8, kg 4, SDOT by lane;
 * qgemm_i8mm.c: 4x8, kg 8, A in row pairs (ar 2), SMMLA. Signed A. */
void pg_dotprod_qgemm_uk_w8(int64_t ngroups, int64_t gk, const void *a, int64_t a_stride,
                            const float *as, int64_t as_stride, const int32_t *ac,
                            int64_t ac_stride, const void *w, float *c, int64_t ldc, int mr,
                            int accumulate);
void pg_dotprod_qgemm_uk_w4(int64_t ngroups, int64_t gk, const void *a, int64_t a_stride,
                            const float *as, int64_t as_stride, const int32_t *ac,
                            int64_t ac_stride, const void *w, float *c, int64_t ldc, int mr,
                            int accumulate);
void pg_dotprod_qgemm_uk_w8_hs(int64_t ngroups, int64_t gk, const void *a, int64_t a_stride,
                               const float *as, int64_t as_stride, const int32_t *ac,
                               int64_t ac_stride, const void *w, float *c, int64_t ldc, int mr,
                               int accumulate);
void pg_dotprod_qgemm_uk_w4_hs(int64_t ngroups, int64_t gk, const void *a, int64_t a_stride,
                               const float *as, int64_t as_stride, const int32_t *ac,
                               int64_t ac_stride, const void *w, float *c, int64_t ldc, int mr,
                               int accumulate);
void pg_i8mm_qgemm_uk_w8(int64_t ngroups, int64_t gk, const void *a, int64_t a_stride,
                         const float *as, int64_t as_stride, const int32_t *ac, int64_t ac_stride,
                         const void *w, float *c, int64_t ldc, int mr, int accumulate);
void pg_i8mm_qgemm_uk_w4(int64_t ngroups, int64_t gk, const void *a, int64_t a_stride,
                         const float *as, int64_t as_stride, const int32_t *ac, int64_t ac_stride,
                         const void *w, float *c, int64_t ldc, int mr, int accumulate);
void pg_i8mm_qgemm_uk_w8_hs(int64_t ngroups, int64_t gk, const void *a, int64_t a_stride,
                            const float *as, int64_t as_stride, const int32_t *ac,
                            int64_t ac_stride, const void *w, float *c, int64_t ldc, int mr,
                            int accumulate);
void pg_i8mm_qgemm_uk_w4_hs(int64_t ngroups, int64_t gk, const void *a, int64_t a_stride,
                            const float *as, int64_t as_stride, const int32_t *ac,
                            int64_t ac_stride, const void *w, float *c, int64_t ldc, int mr,
                            int accumulate);

/* MXFP4 microkernel (pg_kernel_table.mxfp4, dispatch.h; bitwise equal to
 * pg_ref_mxfp4_uk). mxfp4_dotprod.c: 4x8, kg 4, codes to kv by
 * vqtbl1q_s8, SDOT by lane, signed A. */
void pg_dotprod_mxfp4_uk(int64_t ngroups, int64_t gk, const void *a, int64_t a_stride,
                         const float *as, int64_t as_stride, const int32_t *ac, int64_t ac_stride,
                         const void *w, float *c, int64_t ldc, int mr, int accumulate);

/* gated_delta_neon.c: Gated DeltaNet micro-kernels (pg_gdn_ukernels,
 * kernels/gated_delta.h; bitwise equal to the scalar reference). */
void pg_neon_gdn_recurrent(int n, int dk, int nc, float *S, int64_t lds, const float *q,
                           const float *k, int64_t ldqk, const float *v, int64_t ldv,
                           const float *eg, const float *beta, float *o, int64_t ldo);
void pg_neon_gdn_mm(int m, int n, int k, const float *a, int64_t lda, const float *b, int64_t ldb,
                    float *c, int64_t ldc, float cscale);

/* K-quant microkernels (pg_kernel_table.q2_k .. q6_k, dispatch.h;
 * bitwise equal to pg_ref_kq_uk_*). kquant_dotprod.c: 2x32 on the shared
 * packed layout, SDOT by lane, MLA by the sub-block scales. */
void pg_dotprod_kq_uk_q2_k(int64_t ngroups, int64_t gk, const void *a, int64_t a_stride,
                           const float *as, int64_t as_stride, const int32_t *ac, int64_t ac_stride,
                           const void *w, float *c, int64_t ldc, int mr, int accumulate);
void pg_dotprod_kq_uk_q3_k(int64_t ngroups, int64_t gk, const void *a, int64_t a_stride,
                           const float *as, int64_t as_stride, const int32_t *ac, int64_t ac_stride,
                           const void *w, float *c, int64_t ldc, int mr, int accumulate);
void pg_dotprod_kq_uk_q4_k(int64_t ngroups, int64_t gk, const void *a, int64_t a_stride,
                           const float *as, int64_t as_stride, const int32_t *ac, int64_t ac_stride,
                           const void *w, float *c, int64_t ldc, int mr, int accumulate);
void pg_dotprod_kq_uk_q5_k(int64_t ngroups, int64_t gk, const void *a, int64_t a_stride,
                           const float *as, int64_t as_stride, const int32_t *ac, int64_t ac_stride,
                           const void *w, float *c, int64_t ldc, int mr, int accumulate);
void pg_dotprod_kq_uk_q6_k(int64_t ngroups, int64_t gk, const void *a, int64_t a_stride,
                           const float *as, int64_t as_stride, const int32_t *ac, int64_t ac_stride,
                           const void *w, float *c, int64_t ldc, int mr, int accumulate);
/* IQ4_XS (pg_kernel_table.iq4_xs): nibbles to codebook values by TBL
 * (vqtbl1q_s8), then SDOT as the others. */
void pg_dotprod_kq_uk_iq4_xs(int64_t ngroups, int64_t gk, const void *a, int64_t a_stride,
                             const float *as, int64_t as_stride, const int32_t *ac,
                             int64_t ac_stride, const void *w, float *c, int64_t ldc, int mr,
                             int accumulate);
void pg_dotprod_kq_uk_iq4_nl(int64_t ngroups, int64_t gk, const void *a, int64_t a_stride,
                             const float *as, int64_t as_stride, const int32_t *ac,
                             int64_t ac_stride, const void *w, float *c, int64_t ldc, int mr,
                             int accumulate);

#endif
