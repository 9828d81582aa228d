/* Quantized prepacked GEMM: W8A8 and W4A8 linear layers,
 * C[M,N] = epilogue(A[M,K] . W[N,K]^T (+ bias)), the integer counterpart of
 * kernels/gemm.h (same loops, epilogues, threading and batch-invariance
 * contract; docs/ARCHITECTURE.md "Quantized GEMM").
 *
 * Weights (symmetric, no zero point)
 *   W[n,k] = s[n, k / G] * q[n,k], q int8 (W8: [-128, 127]) or int4
 *   (W4: [-8, 7]); group size G in {32, 64, 128, ...} (a multiple of 32) or
 *   G = 0: one scale per output channel. K need not be a multiple of G: the
 *   last group is short. Scales are f32 (BF16/F16 sources widen exactly).
 *   GGUF Q8_0 is W8 with G = 32 and F16 scales, Q4_0 is W4 with G = 32 and
 *   q = nibble - 8 (base/dtype.h).
 * Activations: each row m of A is quantized dynamically, per token, in the
 *   GEMM's input stage (pg_qgemm_quantize_row): a_s[m] = max_k |A[m,k]| / 127,
 *   qa[m,k] = clamp(rint(A[m,k] * (127 / max)), -127, 127).
 * Arithmetic (pg_ref_qgemm in ref/qgemm.c is the specification):
 *   isum[m,n,g] = sum over k in group g of qa[m,k] * q[n,k]   (exact int32)
 *   y = 0; for g increasing: y = fmaf((float)isum[m,n,g], s[n,g], y)
 *   y = y * a_s[m]; then the epilogue: + bias[n], residual add or SwiGLU,
 *   exactly as in kernels/gemm.h (SwiGLU by the process table's
 *   swiglu_f32, elementwise).
 * The integer sums are exact in any order, and the float steps are done in
 * one fixed order, so every variant (x86 AVX512_VNNI / AVX-VNNI VPDPBUSD, Arm
 * SDOT / SMMLA, scalar) equals the reference bit for bit, and a row's result
 * never depends on the other rows (batch invariance by construction).
 * VPDPBUSD multiplies unsigned by signed bytes. AVX512_VNNI stores the
 * weights offset to unsigned (q + 128, or q + 8 for W4) and starts each
 * group's sum at -offset * sum_k qa[m,k], computed per (token, group) in the
 * input stage (a_s and these sums come out of the same pass over the row);
 * AVX-VNNI feeds qa + 128 and starts at -128 * sum_k q[n,k], precomputed at
 * pack time. W4 nibbles are unpacked in registers (never as int8 in memory).
 * The input stage runs the table's amax_f32 / quant_i8 (SIMD, exact). */
#ifndef PAGODA_KERNELS_QGEMM_H
#define PAGODA_KERNELS_QGEMM_H

#include <stddef.h>
#include <stdint.h>

#include "base/dtype.h"
#include "base/pool.h"
#include "base/status.h"
#include "kernels/dispatch.h"
#include "kernels/gemm.h"

/* A quantized packed weight is a pg_packed_weight of format W8A8 or W4A8
 * (the one GEMM driver: kernels/gemm_driver.h); pg_gemm and the pg_gemm_*
 * queries take it as it is. */
typedef struct pg_packed_weight pg_qpacked;

/* Unpacked quantized weight (the interchange form every source converts
 * to): q [N, K] one int8 per element (W4: values in [-8, 7]), scale
 * [N, ngroups] f32 with ngroups = ceil(K / group) (group 0: ngroups 1). */
typedef struct pg_qweight {
    int bits;      /* 8 or 4 */
    int64_t group; /* 0: per channel; else a multiple of 32 */
    int64_t N, K;
    const int8_t *q;
    const float *scale;
    /* 1 (group-wise weights only): activations get one scale per token AND
     * weight group (llama.cpp's Q8_0 activation blocks when group is 32)
     * instead of one per token; the f32 step per group is then
     * y = fmaf((float)isum, s[n,g] * a_s[m,g], y) and no final a_s multiply. */
    int act_group;
} pg_qweight;

/* Groups of a weight: ceil(K / group), or 1 for per channel. */
int64_t pg_qweight_ngroups(int64_t K, int64_t group);

/* Pack w (and w_up for a SwiGLU gate/up pair: same bits, group, N, K; else
 * NULL) for microkernel uk (NULL: the process table's for w->bits). Keeps no
 * pointer to the inputs. Errors: PAGODA_ERR_INVALID_ARG (bits not 4/8,
 * group not 0 or a multiple of 32, sizes < 1, values out of range, NULL,
 * per-channel K or group too long for exact int32 sums (> 65536)),
 * PAGODA_ERR_NOMEM. */
pagoda_status pg_qgemm_pack(const pg_qweight *w, const pg_qweight *w_up, const pg_qgemm_ukernel *uk,
                            pg_qpacked **out);
/* pg_qgemm_pack with the range check and the packing split over pool's
 * threads (column panels; NULL or a one-thread pool: the caller's thread).
 * The packed bytes are identical to pg_qgemm_pack's for every pool size. */
pagoda_status pg_qgemm_pack_pool(const pg_qweight *w, const pg_qweight *w_up,
                                 const pg_qgemm_ukernel *uk, pg_pool *pool, pg_qpacked **out);
void pg_qgemm_free(pg_qpacked *w); /* NULL is a no-op */
/* The packed bytes (pg_qgemm_packed_bytes of them), e.g. to compare two
 * packs. */
const void *pg_qgemm_packed_data(const pg_qpacked *w);
/* Activation scale groups: the weight group when activations are scaled
 * per (token, group) (pg_qweight.act_group), 0 when per token. */
int64_t pg_qgemm_act_group(const pg_qpacked *w);

int64_t pg_qgemm_n(const pg_qpacked *w);
int64_t pg_qgemm_k(const pg_qpacked *w);
int pg_qgemm_bits(const pg_qpacked *w);
int64_t pg_qgemm_group(const pg_qpacked *w);
int pg_qgemm_is_swiglu(const pg_qpacked *w);
size_t pg_qgemm_packed_bytes(const pg_qpacked *w);
const char *pg_qgemm_variant(const pg_qpacked *w);

/* Scratch bytes for M rows with nthreads threads; monotonic in both. */
size_t pg_qgemm_scratch_size(const pg_qpacked *w, int64_t M, int nthreads);

/* C = epilogue(A . W^T + bias) as above; arguments, errors and threading as
 * pg_gemm (kernels/gemm.h). */
pagoda_status pg_qgemm(const pg_qpacked *w, const float *A, int64_t M, int64_t lda, float *C,
                       int64_t ldc, const float *bias, pg_gemm_epilogue ep, pg_pool *pool,
                       void *scratch);

/* pg_qgemm with A = RMSNorm(X) (rows of K, weight norm_w [K], eps > 0;
 * Zhang & Sennrich 2019) fused into the input stage: each row is normed
 * by the table's rmsnorm_f32 into a per-thread row buffer (L1) and
 * quantized from there, so the f32 normed activations are never written to
 * memory. The quantized values are exactly those pg_qgemm computes from
 * rmsnorm_f32's output, so the results are identical bit for bit. Errors as
 * pg_qgemm, plus NULL norm_w or eps <= 0. */
pagoda_status pg_qgemm_rmsnorm(const pg_qpacked *w, const float *X, int64_t M, int64_t ldx,
                               const float *norm_w, float eps, float *C, int64_t ldc,
                               const float *bias, pg_gemm_epilogue ep, pg_pool *pool,
                               void *scratch);

/* Per-token activation quantization (the input stage; see above): K
 * floats -> K int8 and the row scale (0 for an all-zero row). */
void pg_qgemm_quantize_row(const float *a, int64_t K, int8_t *q, float *scale);

/* Round-to-nearest symmetric weight quantization of W [N, K] (src dtype F32,
 * F16 or BF16) into q [N, K] and scale [N, ngroups] (caller's buffers).
 * W8: d = max|w| / 127 per group, q = rint(w / d) (llama.cpp's Q8_0 rule);
 * W4: start from d0 = m / -8 with m the element of largest magnitude (sign
 * kept: the extreme maps to -8 exactly, llama.cpp's Q4_0 rule), then take
 * the d among d0 * (1 - 0.02 i), i = 0..12, with the least squared error of
 * q = clamp(rint(w / d), -8, 7) (a small grid search as in llama.cpp's
 * make_qx_quants / AWQ's scale search, without activation statistics).
 * Group-wise (group > 0): every candidate d in the normal F16 range is
 * first rounded to the nearest F16, as GGUF stores block scales, so the
 * packed header can hold it in 2 bytes exactly (pg_qgemm_ukernel.run_hs).
 * Rows [n0, n1) only (for threading). */
void pg_qgemm_quantize_weight(pg_dtype src, const void *W, int64_t K, int bits, int64_t group,
                              int64_t n0, int64_t n1, int8_t *q, float *scale);

/* GGUF rows (Q8_0, Q4_0 or IQ4_NL, [N, K], K a multiple of 32; or IQ4_XS,
 * K a multiple of 256) -> unpacked q and scale (group 32). IQ4_NL / IQ4_XS:
 * q = kvalues_iq4nl[nibble] (base/kquant.h), scale d / d (ls - 32) (exact
 * in f32: an F16 times a 6-bit integer), so q * scale is llama.cpp's
 * dequantized value bit for bit. Caller's buffers: q N*K, scale N*K/32.
 * Errors: PAGODA_ERR_INVALID_ARG (another type, NULL, bad N / K). */
pagoda_status pg_qgemm_from_gguf(pg_dtype t, const void *data, int64_t N, int64_t K, int8_t *q,
                                 float *scale);

#endif
