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

/* LayerNorm (Ba et al. 2016; torch.nn.functional.layer_norm in f32) of m
 * rows of n: mean = (sum_i x_i) / n, var = (sum_i (x_i - mean)^2) / n (two
 * passes, sequential f32 sums), y_i = (x_i - mean) * (1 / sqrtf(var + eps))
 * * w_i + b_i (b NULL: no bias). out may equal x. */
void pg_ref_layernorm(float *out, const float *x, const float *w, const float *b, size_t m,
                      size_t n, float eps);
/* GELU with the exact erf (Hendrycks & Gimpel 2016; torch's
 * F.gelu(approximate='none'), transformers' "gelu", openai/whisper's
 * nn.GELU): y = 0.5 x (1 + erf(x / sqrt(2))) in f32 with libm erff. out may
 * equal x. */
void pg_ref_gelu(float *out, const float *x, size_t n);

/* Rows [n0, n1) of out[M, N] = x[M, K] . W[N, K]^T (+ bias), using the
 * scalar reference dots (pg_ref_dot_*). `scratch` holds K floats (used for
 * Q8_0/Q4_0 rows; may be NULL for F32/F16/BF16). The caller has checked the
 * dtype and K. */
void pg_ref_matmul_rows(float *out, const float *x, const void *w, pg_dtype wtype,
                        const float *bias, size_t M, size_t N, size_t K, size_t n0, size_t n1,
                        float *scratch);

#endif
