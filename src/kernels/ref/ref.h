/* Scalar reference kernels: the specification every SIMD variant is tested
 * against. Plain C, sequential left-to-right sums in f32. */
#ifndef PAGODA_KERNELS_REF_H
#define PAGODA_KERNELS_REF_H

#include <stddef.h>
#include <stdint.h>

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

#endif
