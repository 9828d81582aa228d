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

/* GEMM microkernels (pg_gemm_ukernel, dispatch.h) and the activation
 * input stage (cvt_f32_bf16). Shapes: gemm_avx2.c f32 6x16, bf16 4x16;
 * gemm_avx512.c f32 6x64, bf16 8x32 (widen + FMA);
 * gemm_avx512bf16.c bf16 6x64 (VDPBF16PS). All bf16 kernels use k-pairs
 * (kg 2) and row-major A (ar 1); all are bitwise equal to the reference. */
void pg_avx2_gemm_uk_f32(int64_t ngroups, const void *a, int64_t a_stride, const void *w,
                         float *c, int64_t ldc, int mr, int accumulate);
void pg_avx2_gemm_uk_bf16(int64_t ngroups, const void *a, int64_t a_stride, const void *w,
                          float *c, int64_t ldc, int mr, int accumulate);
void pg_avx2_cvt_f32_bf16(const float *src, uint16_t *dst, size_t n);
void pg_avx512_gemm_uk_f32(int64_t ngroups, const void *a, int64_t a_stride, const void *w,
                           float *c, int64_t ldc, int mr, int accumulate);
void pg_avx512_gemm_uk_bf16(int64_t ngroups, const void *a, int64_t a_stride, const void *w,
                            float *c, int64_t ldc, int mr, int accumulate);
void pg_avx512_cvt_f32_bf16(const float *src, uint16_t *dst, size_t n);
/* SwiGLU epilogue (swiglu_f32 entry): pg_gemm_expf's steps on vectors. */
void pg_avx2_swiglu_f32(float *out, const float *gate, const float *up, size_t n);
void pg_avx512_swiglu_f32(float *out, const float *gate, const float *up, size_t n);
void pg_avx512bf16_gemm_uk_bf16(int64_t ngroups, const void *a, int64_t a_stride, const void *w,
                                float *c, int64_t ldc, int mr, int accumulate);
void pg_avx512bf16_cvt_f32_bf16(const float *src, uint16_t *dst, size_t n);

#endif
