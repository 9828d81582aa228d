/* Scalar references of the transformer ops in src/kernels/ops.h: the
 * specification the entry points (and any later SIMD variant) are tested
 * against. Plain C, f32 arithmetic, sequential left-to-right sums. Shapes,
 * math and papers are documented in src/kernels/ops.h. */
#ifndef PAGODA_KERNELS_REF_OPS_REF_H
#define PAGODA_KERNELS_REF_OPS_REF_H

#include <stdbool.h>
#include <stddef.h>

#include "base/dtype.h"

void pg_ref_rmsnorm(float *out, const float *x, const float *w, size_t m, size_t n, float eps);
void pg_ref_rope(float *x, size_t n_heads, size_t head_dim, int pos, const float *inv_freq,
                 bool interleaved);
void pg_ref_softmax(float *x, size_t n);
void pg_ref_silu(float *out, const float *x, size_t n);
void pg_ref_swiglu(float *out, const float *gate, const float *up, size_t n);
/* GPT-OSS's clamped SwiGLU (transformers GptOssExperts; openai/gpt-oss
 * swiglu): g = min(gate, limit), u = clamp(up, -limit, limit),
 * out = (u + 1) * g * sigmoid(alpha * g), sigmoid(x) = 1 / (1 + e^-x), in
 * f32 with libm expf. out may alias gate or up. */
void pg_ref_swiglu_oai(float *out, const float *gate, const float *up, size_t n, float limit,
                       float alpha);

/* Rows [n0, n1) of out[M, N] = x[M, K] . W[N, K]^T (+ bias), using the
 * scalar reference dots (pg_ref_dot_*). `scratch` holds K floats (used for
 * Q8_0/Q4_0 rows; may be NULL for F32/F16/BF16). The caller has checked the
 * dtype and K. */
void pg_ref_matmul_rows(float *out, const float *x, const void *w, pg_dtype wtype,
                        const float *bias, size_t M, size_t N, size_t K, size_t n0, size_t n1,
                        float *scratch);

#endif
