/* Transformer building blocks used by the architecture files (src/model/):
 * RMSNorm, RoPE, softmax, SiLU/SwiGLU and the linear layer (matmul against a
 * weight matrix in F32/F16/BF16/Q8_0/Q4_0).
 *
 * All activations are f32, row-major. Every op has a scalar reference in
 * src/kernels/ref/ops_ref.h that is its specification; the entry points here
 * are what models call and may later dispatch to SIMD variants.
 *
 * Batch invariance (see docs/ARCHITECTURE.md): each output element is computed
 * from its own row's inputs in an order that depends only on the sizes of that
 * row (K for matmul, n for norms), never on M, on the other rows, or on the
 * number of threads. */
#ifndef PAGODA_KERNELS_OPS_H
#define PAGODA_KERNELS_OPS_H

#include <stdbool.h>
#include <stddef.h>

#include "base/dtype.h"
#include "base/status.h"

/* ---- RMSNorm (Zhang & Sennrich 2019, "Root Mean Square Layer Normalization")
 * For each of the m rows of x[m, n]:
 *   out[r, i] = x[r, i] / sqrt(mean_i(x[r, i]^2) + eps) * w[i]
 * w: f32 [n]. out may alias x. The mean of squares is accumulated in f32,
 * left to right (as llama2.c and HF's float32 upcast do). */
void pg_rmsnorm(float *out, const float *x, const float *w, size_t m, size_t n, float eps);

/* ---- RoPE (Su et al. 2021, "RoFormer: Enhanced Transformer with Rotary
 * Position Embedding").
 *
 * Frequency table: inv_freq[i] = theta^(-2i/d) for i in [0, d/2), d = head_dim,
 * optionally rescaled:
 *  - PG_ROPE_FREQ_LINEAR: inv_freq[i] / factor (position interpolation,
 *    Chen et al. 2023), as HF `_compute_linear_scaling_rope_parameters`;
 *  - PG_ROPE_FREQ_LLAMA3: HF transformers `_compute_llama3_parameters`
 *    (Llama 3.1): wavelengths longer than original_max_position /
 *    low_freq_factor are divided by `factor`, shorter than original_max /
 *    high_freq_factor are kept, and the band between is interpolated with
 *    smooth = (original_max / wavelen - low) / (high - low).
 * Computed once per model in double precision, stored as f32. */
typedef enum pg_rope_freq_scaling {
    PG_ROPE_FREQ_NONE = 0,
    PG_ROPE_FREQ_LINEAR,
    PG_ROPE_FREQ_LLAMA3,
    /* YaRN (Peng et al. 2023; transformers' _compute_yarn_parameters): with
     * dim(r) = d ln(original_max / (2 pi r)) / (2 ln theta), the correction
     * range low = dim(beta_fast), high = dim(beta_slow) (floored / ceiled
     * when truncate; clamped to [0, d - 1]), ramp_i = clamp((i - low) /
     * (high - low), 0, 1) (high += 0.001 when equal), and
     * f_i = f_i/factor * ramp_i + f_i * (1 - ramp_i). The attention factor
     * (cos/sin scale, pg_rope_yarn_attention_factor) is the caller's. */
    PG_ROPE_FREQ_YARN,
} pg_rope_freq_scaling;

typedef struct pg_rope_freq_params {
    int head_dim; /* d, even */
    double theta; /* base, e.g. 10000 or 500000 */
    pg_rope_freq_scaling scaling;
    double factor;                            /* LINEAR / LLAMA3 */
    double low_freq_factor, high_freq_factor; /* LLAMA3 */
    double original_max_position;             /* LLAMA3, YARN */
    double beta_fast, beta_slow;              /* YARN */
    bool truncate;                            /* YARN */
} pg_rope_freq_params;

/* YaRN's default attention factor for a scaling factor: 0.1 ln(factor) + 1
 * (1 for factor <= 1), transformers' get_mscale. */
double pg_rope_yarn_attention_factor(double factor);

/* Fill inv_freq[d/2]. Errors: PAGODA_ERR_INVALID_ARG (odd/zero head_dim,
 * theta <= 0, factor <= 0, llama3 with high_freq_factor <= low_freq_factor). */
pagoda_status pg_rope_inv_freq(const pg_rope_freq_params *p, float *inv_freq);

/* Rotate x[n_heads, head_dim] in place for position `pos`: for each pair
 * (a, b) of dimensions and its frequency f_i, with angle = pos * f_i:
 *   a' = a cos - b sin,   b' = a sin + b cos.
 * interleaved=true:  pairs (2i, 2i+1)        (GGUF / llama.cpp / llama2.c layout)
 * interleaved=false: pairs (i, i + d/2)      (HF "rotate_half", GPT-NeoX layout)
 * The angle is formed in double (pos * (double)inv_freq[i]) and its cos/sin
 * rounded to f32. */
void pg_rope(float *x, size_t n_heads, size_t head_dim, int pos, const float *inv_freq,
             bool interleaved);

/* ---- Softmax, numerically stable: x[i] = exp(x[i] - max) / sum_j exp(x[j] - max),
 * in place over n >= 1 floats (sum in f32, left to right). */
void pg_softmax(float *x, size_t n);

/* ---- SiLU (Hendrycks & Gimpel 2016; Elfwing et al. 2017): silu(x) = x * sigmoid(x).
 * out may alias x. */
void pg_silu(float *out, const float *x, size_t n);

/* ---- SwiGLU (Shazeer 2020, "GLU Variants Improve Transformer"):
 *   out[i] = silu(gate[i]) * up[i]        over n floats; out may alias gate or up. */
void pg_swiglu(float *out, const float *gate, const float *up, size_t n);

/* ---- Linear layer: out[M, N] = x[M, K] . W[N, K]^T (+ bias[N]).
 * W is row-major [N, K] in `wtype` (a PyTorch nn.Linear weight): F32, F16,
 * BF16 (raw 16-bit words) or GGML Q8_0 / Q4_0 blocks (K % 32 == 0; each row
 * is K/32 blocks, rows contiguous). bias is f32 [N] or NULL.
 * Each out[m, n] is ONE dot product over K through pg_kernels() (dot_f32 for
 * F32 and for dequantized Q8_0/Q4_0 rows, dot_bf16_f32, dot_f16_f32), so it
 * depends only on x[m, :] and W[n, :]: batch invariant and independent of the
 * thread count. Quantized rows are dequantized one at a time into an f32
 * scratch row (pg_dequant_row); fast quantized kernels replace this later.
 * out must not alias x. Threads: the N dimension is split across the
 * process thread pool (results do not depend on the split).
 * Errors: PAGODA_ERR_UNSUPPORTED for another dtype, PAGODA_ERR_INVALID_ARG
 * for K not a multiple of the block size, PAGODA_ERR_NOMEM. */
pagoda_status pg_matmul(float *out, const float *x, const void *w, pg_dtype wtype,
                        const float *bias, size_t M, size_t N, size_t K);

/* True if pg_matmul accepts weights of this dtype. */
bool pg_matmul_supports(pg_dtype wtype);

#endif
