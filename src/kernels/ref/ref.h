/* Scalar reference kernels: the specification every SIMD variant is tested
 * against. Plain C, sequential left-to-right sums in f32. */
#ifndef PAGODA_KERNELS_REF_H
#define PAGODA_KERNELS_REF_H

#include <stddef.h>
#include <stdint.h>

float pg_ref_dot_f32(const float *a, const float *b, size_t n);
float pg_ref_dot_bf16_f32(const uint16_t *w, const float *x, size_t n);
float pg_ref_dot_f16_f32(const uint16_t *w, const float *x, size_t n);

#endif
