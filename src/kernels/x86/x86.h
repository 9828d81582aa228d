/* x86-64 SIMD kernel variants. Each has the signature and meaning of the
 * dispatch table entry of the same name (src/kernels/dispatch.h) and of its
 * scalar reference in src/kernels/ref/; only the summation order differs
 * (fixed for a given n). Call them only through the dispatch table, which
 * checks the CPU first: the files are compiled with ISA flags taken from
 * their name suffix (cmake/arch.cmake). */
#ifndef PAGODA_KERNELS_X86_H
#define PAGODA_KERNELS_X86_H

#include <stddef.h>
#include <stdint.h>

/* dot_avx2.c: AVX2 + FMA + F16C. 4 accumulators x 8 lanes (32 elements per
 * step); the tail (< 32) is zero-padded into one more step. */
float pg_avx2_dot_f32(const float *a, const float *b, size_t n);
float pg_avx2_dot_bf16_f32(const uint16_t *w, const float *x, size_t n);
float pg_avx2_dot_f16_f32(const uint16_t *w, const float *x, size_t n);

/* dot_avx512.c: AVX-512 F + BW + VL. 4 accumulators x 16 lanes (64 per
 * step), then 16-element steps; the tail (< 16) uses masked loads. */
float pg_avx512_dot_f32(const float *a, const float *b, size_t n);
float pg_avx512_dot_bf16_f32(const uint16_t *w, const float *x, size_t n);
float pg_avx512_dot_f16_f32(const uint16_t *w, const float *x, size_t n);

/* attention_avx2.c / attention_avx512.c / attention_avx512bf16.c: paged-
 * attention micro-kernels (pg_attn_ukernels, kernels/attention.h) and the
 * vector exp (dispatch entry vexp_f32). avx2 and avx512 widen BF16 K/V to
 * f32 exactly; avx512bf16 computes with VDPBF16PS (q and p rounded to BF16). */
void pg_avx2_vexp_f32(const float *x, float *y, size_t n);
void pg_avx2_attn_qk_f32kv(const float *q, int ldq, int nr, const void *const *tiles, int bs,
                           int nk, int hd, float scale, float *s, int lds);
void pg_avx2_attn_qk_bf16kv(const float *q, int ldq, int nr, const void *const *tiles, int bs,
                            int nk, int hd, float scale, float *s, int lds);
void pg_avx2_attn_softmax(float *s, int lds, int nr, int nk, float *m, float *l, float *acc,
                          int ldacc, int hd);
void pg_avx2_attn_pv_f32kv(const float *p, int ldp, int nr, const void *const *tiles, int bs,
                           int nk, int hd, float *acc, int ldacc);
void pg_avx2_attn_pv_bf16kv(const float *p, int ldp, int nr, const void *const *tiles, int bs,
                            int nk, int hd, float *acc, int ldacc);

void pg_avx512_vexp_f32(const float *x, float *y, size_t n);
void pg_avx512_attn_qk_f32kv(const float *q, int ldq, int nr, const void *const *tiles, int bs,
                             int nk, int hd, float scale, float *s, int lds);
void pg_avx512_attn_qk_bf16kv(const float *q, int ldq, int nr, const void *const *tiles, int bs,
                              int nk, int hd, float scale, float *s, int lds);
void pg_avx512_attn_softmax(float *s, int lds, int nr, int nk, float *m, float *l, float *acc,
                            int ldacc, int hd);
void pg_avx512_attn_pv_f32kv(const float *p, int ldp, int nr, const void *const *tiles, int bs,
                             int nk, int hd, float *acc, int ldacc);
void pg_avx512_attn_pv_bf16kv(const float *p, int ldp, int nr, const void *const *tiles, int bs,
                              int nk, int hd, float *acc, int ldacc);

void pg_avx512bf16_attn_qk_bf16kv(const float *q, int ldq, int nr, const void *const *tiles, int bs,
                                  int nk, int hd, float scale, float *s, int lds);
void pg_avx512bf16_attn_pv_bf16kv(const float *p, int ldp, int nr, const void *const *tiles, int bs,
                                  int nk, int hd, float *acc, int ldacc);

/* ops_avx2.c / ops_avx512.c: row ops (dispatch entries rmsnorm_f32 ...). */
void pg_avx2_rmsnorm_f32(float *out, const float *x, const float *w, size_t m, size_t n, float eps);
void pg_avx2_softmax_f32(float *x, size_t n);
void pg_avx2_silu_f32(float *out, const float *x, size_t n);
void pg_avx2_swiglu_f32(float *out, const float *gate, const float *up, size_t n);
size_t pg_avx2_argmax_f32(const float *x, size_t n);
void pg_avx2_layernorm_f32(float *out, const float *x, const float *w, const float *b, size_t m,
                           size_t n, float eps);
void pg_avx2_gelu_f32(float *out, const float *x, size_t n);
void pg_avx512_rmsnorm_f32(float *out, const float *x, const float *w, size_t m, size_t n,
                           float eps);
void pg_avx512_softmax_f32(float *x, size_t n);
void pg_avx512_silu_f32(float *out, const float *x, size_t n);
void pg_avx512_swiglu_f32(float *out, const float *gate, const float *up, size_t n);
size_t pg_avx512_argmax_f32(const float *x, size_t n);
void pg_avx512_layernorm_f32(float *out, const float *x, const float *w, const float *b, size_t m,
                             size_t n, float eps);
void pg_avx512_gelu_f32(float *out, const float *x, size_t n);
/* GEMM microkernels (pg_gemm_ukernel, dispatch.h) and the activation
 * input stage (cvt_f32_bf16). Shapes: gemm_avx2.c f32 6x16, bf16 4x16;
 * gemm_avx512.c f32 6x64, bf16 8x32 (widen + FMA);
 * gemm_avx512bf16.c bf16 6x64 (VDPBF16PS). All bf16 kernels use k-pairs
 * (kg 2) and row-major A (ar 1); all are bitwise equal to the reference. */
void pg_avx2_gemm_uk_f32(int64_t ngroups, const void *a, int64_t a_stride, const void *w, float *c,
                         int64_t ldc, int mr, int accumulate);
void pg_avx2_gemm_uk_bf16(int64_t ngroups, const void *a, int64_t a_stride, const void *w, float *c,
                          int64_t ldc, int mr, int accumulate);
void pg_avx2_cvt_f32_bf16(const float *src, uint16_t *dst, size_t n);
void pg_avx512_gemm_uk_f32(int64_t ngroups, const void *a, int64_t a_stride, const void *w,
                           float *c, int64_t ldc, int mr, int accumulate);
void pg_avx512_gemm_uk_bf16(int64_t ngroups, const void *a, int64_t a_stride, const void *w,
                            float *c, int64_t ldc, int mr, int accumulate);
void pg_avx512_cvt_f32_bf16(const float *src, uint16_t *dst, size_t n);
void pg_avx512bf16_gemm_uk_bf16(int64_t ngroups, const void *a, int64_t a_stride, const void *w,
                                float *c, int64_t ldc, int mr, int accumulate);
void pg_avx512bf16_gemm_uk_bf16_pf(int64_t ngroups, const void *a, int64_t a_stride, const void *w,
                                   float *c, int64_t ldc, int mr, int accumulate, const void *pf,
                                   int64_t pf_lines);
void pg_avx512bf16_cvt_f32_bf16(const float *src, uint16_t *dst, size_t n);

/* quant_avx2.c / quant_avx512.c: the quantized GEMM's activation input
 * stage (dispatch entries amax_f32 / quant_i8). */
float pg_avx2_amax_f32(const float *x, size_t n);
int32_t pg_avx2_quant_i8(const float *x, size_t n, float inv, int8_t *q);
float pg_avx512_amax_f32(const float *x, size_t n);
int32_t pg_avx512_quant_i8(const float *x, size_t n, float inv, int8_t *q);

/* Quantized GEMM microkernels (pg_qgemm_ukernel, dispatch.h; bitwise equal
 * to the scalar reference). qgemm_avx512vnni.c: 6x32, kg 4, VPDPBUSD on
 * zmm with offset-unsigned weights (w_u8); qgemm_avxvnni.c: 3x16, kg 4, VEX
 * VPDPBUSD on ymm (AVX-VNNI), A as qa + 128 (a_u8). qgemm_avx2.c: 3x16, kg 4, VPMADDUBSW on |w| and
 * a * sign(w), then VPMADDWD (no VNNI; signed A). */
void pg_avx512vnni_qgemm_uk_w8(int64_t ngroups, int64_t gk, const void *a, int64_t a_stride,
                               const float *as, int64_t as_stride, const int32_t *ac,
                               int64_t ac_stride, const void *w, float *c, int64_t ldc, int mr,
                               int accumulate);
void pg_avx512vnni_qgemm_uk_w4(int64_t ngroups, int64_t gk, const void *a, int64_t a_stride,
                               const float *as, int64_t as_stride, const int32_t *ac,
                               int64_t ac_stride, const void *w, float *c, int64_t ldc, int mr,
                               int accumulate);
/* the same with F16 scales in the group header (pg_qgemm_ukernel.run_hs) */
void pg_avx512vnni_qgemm_uk_w8_hs(int64_t ngroups, int64_t gk, const void *a, int64_t a_stride,
                                  const float *as, int64_t as_stride, const int32_t *ac,
                                  int64_t ac_stride, const void *w, float *c, int64_t ldc, int mr,
                                  int accumulate);
void pg_avx512vnni_qgemm_uk_w4_hs(int64_t ngroups, int64_t gk, const void *a, int64_t a_stride,
                                  const float *as, int64_t as_stride, const int32_t *ac,
                                  int64_t ac_stride, const void *w, float *c, int64_t ldc, int mr,
                                  int accumulate);
void pg_avx2_qgemm_uk_w8(int64_t ngroups, int64_t gk, const void *a, int64_t a_stride,
                         const float *as, int64_t as_stride, const int32_t *ac, int64_t ac_stride,
                         const void *w, float *c, int64_t ldc, int mr, int accumulate);
void pg_avx2_qgemm_uk_w4(int64_t ngroups, int64_t gk, const void *a, int64_t a_stride,
                         const float *as, int64_t as_stride, const int32_t *ac, int64_t ac_stride,
                         const void *w, float *c, int64_t ldc, int mr, int accumulate);
void pg_avx2_qgemm_uk_w8_hs(int64_t ngroups, int64_t gk, const void *a, int64_t a_stride,
                            const float *as, int64_t as_stride, const int32_t *ac,
                            int64_t ac_stride, const void *w, float *c, int64_t ldc, int mr,
                            int accumulate);
void pg_avx2_qgemm_uk_w4_hs(int64_t ngroups, int64_t gk, const void *a, int64_t a_stride,
                            const float *as, int64_t as_stride, const int32_t *ac,
                            int64_t ac_stride, const void *w, float *c, int64_t ldc, int mr,
                            int accumulate);
void pg_avxvnni_qgemm_uk_w8(int64_t ngroups, int64_t gk, const void *a, int64_t a_stride,
                            const float *as, int64_t as_stride, const int32_t *ac,
                            int64_t ac_stride, const void *w, float *c, int64_t ldc, int mr,
                            int accumulate);
void pg_avxvnni_qgemm_uk_w4(int64_t ngroups, int64_t gk, const void *a, int64_t a_stride,
                            const float *as, int64_t as_stride, const int32_t *ac,
                            int64_t ac_stride, const void *w, float *c, int64_t ldc, int mr,
                            int accumulate);

/* MXFP4 microkernels (pg_kernel_table.mxfp4, dispatch.h; bitwise equal to
 * pg_ref_mxfp4_uk). mxfp4_avx512vnni.c: 6x32, kg 4, codes to kv + 12 by
 * VPSHUFB, VPDPBUSD with signed A and the input stage's -12 sum a (w_u8);
 * mxfp4_avx2.c: 3x16, kg 4, codes to kv by VPSHUFB, VPMADDUBSW on |kv|
 * and a * sign(kv). */
void pg_avx512vnni_mxfp4_uk(int64_t ngroups, int64_t gk, const void *a, int64_t a_stride,
                            const float *as, int64_t as_stride, const int32_t *ac,
                            int64_t ac_stride, const void *w, float *c, int64_t ldc, int mr,
                            int accumulate);
void pg_avx2_mxfp4_uk(int64_t ngroups, int64_t gk, const void *a, int64_t a_stride, const float *as,
                      int64_t as_stride, const int32_t *ac, int64_t ac_stride, const void *w,
                      float *c, int64_t ldc, int mr, int accumulate);

/* gated_delta_avx2.c / gated_delta_avx512.c: Gated DeltaNet micro-kernels
 * (pg_gdn_ukernels, kernels/gated_delta.h; bitwise equal to the scalar
 * reference). */
void pg_avx2_gdn_recurrent(int n, int dk, int nc, float *S, int64_t lds, const float *q,
                           const float *k, int64_t ldqk, const float *v, int64_t ldv,
                           const float *eg, const float *beta, float *o, int64_t ldo);
void pg_avx2_gdn_mm(int m, int n, int k, const float *a, int64_t lda, const float *b, int64_t ldb,
                    float *c, int64_t ldc, float cscale);
void pg_avx512_gdn_recurrent(int n, int dk, int nc, float *S, int64_t lds, const float *q,
                             const float *k, int64_t ldqk, const float *v, int64_t ldv,
                             const float *eg, const float *beta, float *o, int64_t ldo);
void pg_avx512_gdn_mm(int m, int n, int k, const float *a, int64_t lda, const float *b, int64_t ldb,
                      float *c, int64_t ldc, float cscale);

/* K-quant microkernels for AVX2 (pg_kernel_table.q2_k .. iq4_nl, dispatch.h;
 * bitwise equal to pg_ref_kq_uk_*). kquant_avx2.c: up to 4 x 32 on the shared
 * packed layout, VPMADDUBSW with int16 sums over up to 8 k-chunks, then
 * VPMADDWD by the sub-block scales. */
void pg_avx2_kq_uk_q2_k(int64_t ngroups, int64_t gk, const void *a, int64_t a_stride,
                        const float *as, int64_t as_stride, const int32_t *ac, int64_t ac_stride,
                        const void *w, float *c, int64_t ldc, int mr, int accumulate);
void pg_avx2_kq_uk_q3_k(int64_t ngroups, int64_t gk, const void *a, int64_t a_stride,
                        const float *as, int64_t as_stride, const int32_t *ac, int64_t ac_stride,
                        const void *w, float *c, int64_t ldc, int mr, int accumulate);
void pg_avx2_kq_uk_q4_k(int64_t ngroups, int64_t gk, const void *a, int64_t a_stride,
                        const float *as, int64_t as_stride, const int32_t *ac, int64_t ac_stride,
                        const void *w, float *c, int64_t ldc, int mr, int accumulate);
void pg_avx2_kq_uk_q5_k(int64_t ngroups, int64_t gk, const void *a, int64_t a_stride,
                        const float *as, int64_t as_stride, const int32_t *ac, int64_t ac_stride,
                        const void *w, float *c, int64_t ldc, int mr, int accumulate);
void pg_avx2_kq_uk_q6_k(int64_t ngroups, int64_t gk, const void *a, int64_t a_stride,
                        const float *as, int64_t as_stride, const int32_t *ac, int64_t ac_stride,
                        const void *w, float *c, int64_t ldc, int mr, int accumulate);
/* IQ4_XS (pg_kernel_table.iq4_xs): nibbles to codebook values by VPSHUFB,
 * then VPMADDUBSW on |kv| and the activations with kv's sign (VPSIGNB). */
void pg_avx2_kq_uk_iq4_xs(int64_t ngroups, int64_t gk, const void *a, int64_t a_stride,
                          const float *as, int64_t as_stride, const int32_t *ac, int64_t ac_stride,
                          const void *w, float *c, int64_t ldc, int mr, int accumulate);
void pg_avx2_kq_uk_iq4_nl(int64_t ngroups, int64_t gk, const void *a, int64_t a_stride,
                          const float *as, int64_t as_stride, const int32_t *ac, int64_t ac_stride,
                          const void *w, float *c, int64_t ldc, int mr, int accumulate);
/* K-quant microkernels (pg_kernel_table.q2_k .. q6_k, dispatch.h;
 * bitwise equal to pg_ref_kq_uk_*). kquant_avx512vnni.c: 4x32, VPDPBUSD on
 * the unsigned u, VPMULLD by the sub-block scales, VPDPWSSD for the minimum
 * term. */
void pg_avx512vnni_kq_uk_q2_k(int64_t ngroups, int64_t gk, const void *a, int64_t a_stride,
                              const float *as, int64_t as_stride, const int32_t *ac,
                              int64_t ac_stride, const void *w, float *c, int64_t ldc, int mr,
                              int accumulate);
void pg_avx512vnni_kq_uk_q3_k(int64_t ngroups, int64_t gk, const void *a, int64_t a_stride,
                              const float *as, int64_t as_stride, const int32_t *ac,
                              int64_t ac_stride, const void *w, float *c, int64_t ldc, int mr,
                              int accumulate);
void pg_avx512vnni_kq_uk_q4_k(int64_t ngroups, int64_t gk, const void *a, int64_t a_stride,
                              const float *as, int64_t as_stride, const int32_t *ac,
                              int64_t ac_stride, const void *w, float *c, int64_t ldc, int mr,
                              int accumulate);
void pg_avx512vnni_kq_uk_q5_k(int64_t ngroups, int64_t gk, const void *a, int64_t a_stride,
                              const float *as, int64_t as_stride, const int32_t *ac,
                              int64_t ac_stride, const void *w, float *c, int64_t ldc, int mr,
                              int accumulate);
void pg_avx512vnni_kq_uk_q6_k(int64_t ngroups, int64_t gk, const void *a, int64_t a_stride,
                              const float *as, int64_t as_stride, const int32_t *ac,
                              int64_t ac_stride, const void *w, float *c, int64_t ldc, int mr,
                              int accumulate);
/* IQ4_XS (pg_kernel_table.iq4_xs): nibbles to kv + 128 by VPSHUFB (BW),
 * VPDPBUSD, then minus 128 times the scaled activation sums. */
void pg_avx512vnni_kq_uk_iq4_xs(int64_t ngroups, int64_t gk, const void *a, int64_t a_stride,
                                const float *as, int64_t as_stride, const int32_t *ac,
                                int64_t ac_stride, const void *w, float *c, int64_t ldc, int mr,
                                int accumulate);
void pg_avx512vnni_kq_uk_iq4_nl(int64_t ngroups, int64_t gk, const void *a, int64_t a_stride,
                                const float *as, int64_t as_stride, const int32_t *ac,
                                int64_t ac_stride, const void *w, float *c, int64_t ldc, int mr,
                                int accumulate);

#endif
