/* Prepacked GEMM for linear layers: C[M,N] = A[M,K] . W[N,K]^T (+ bias),
 * with fused epilogues.
 *
 * Shapes and dtypes
 *   A    [M, K] f32, row-major, row stride lda (floats, >= K).
 *   W    [N, K] row-major (the nn.Linear / GGUF layout: one row per output
 *        feature), source dtype F32, F16 or BF16, packed once by pg_gemm_pack
 *        (or quantized: Q8_0 / Q4_0 rows, pg_gemm_pack_quantize,
 *        pg_gemm_pack_qweight; see below and kernels/qgemm.h; or MXFP4
 *        rows / gpt-oss blocks, see "MXFP4" below).
 *   C    [M, N] f32 (SwiGLU: [M, N] with N the gate/up row count), row
 *        stride ldc (floats, >= N).
 *   bias [N] f32 or NULL (SwiGLU: [2N], the gate bias then the up bias).
 *
 * Arithmetic (the scalar reference pg_ref_gemm in ref/gemm.c is the
 * specification)
 *   - BF16 path (F16 or BF16 source): W is stored as BF16 (F16 rounds to
 *     nearest even BF16 at pack time), A is rounded to BF16 (nearest even)
 *     once per call in the GEMM's input stage, products are exact in f32 and
 *     accumulate in f32. This is what VDPBF16PS (x86 AVX512_BF16) and BFMMLA
 *     (Arm FEAT_BF16) compute; CPUs without them widen BF16 to f32 and FMA.
 *   - F32 path (F32 source): W and A stay f32; one FMA per product, in
 *     increasing k. Exact f32 semantics (this is what the F32 reference
 *     models, e.g. stories260K, need).
 *
 * Epilogues, applied to y = sum_k A[m,k] W[n,k] after the whole K sum:
 *   PG_GEMM_STORE     C[m,n]  = y + bias[n]
 *   PG_GEMM_RESIDUAL  C[m,n] += y + bias[n]            (residual add)
 *   PG_GEMM_SWIGLU    C[m,n]  = silu(g) * u, g = y_gate[n] + bias[n],
 *                     u = y_up[n] + bias[N + n], silu(x) = x / (1 + e^-x)
 *                     (Shazeer 2020, "GLU Variants Improve Transformer";
 *                     needs a weight from pg_gemm_pack_swiglu); applied
 *                     by the table's swiglu_f32 (spec pg_ref_swiglu, SIMD
 *                     variants within a few ulp: their vexp_f32).
 *
 * Batch invariance: every C[m,n] is reduced over K in one fixed order that
 * depends only on K and the kernel table (not on M, on the row's position,
 * on the thread count or on the K blocking), so row i computed alone equals
 * row i computed inside any batch, bit for bit. docs/ARCHITECTURE.md ("GEMM")
 * gives the argument and the packed layouts.
 *
 * Threads: pool NULL runs on the caller; otherwise the call is one or two
 * fork-join regions on `pool` (static split of N, and of M when N is too
 * narrow). No allocation happens in pg_gemm: the caller passes `scratch` of
 * at least pg_gemm_scratch_size bytes, 64-byte aligned. */
#ifndef PAGODA_KERNELS_GEMM_H
#define PAGODA_KERNELS_GEMM_H

#include <stddef.h>
#include <stdint.h>

#include "base/dtype.h"
#include "base/pool.h"
#include "base/status.h"
#include "kernels/dispatch.h"

typedef enum pg_gemm_epilogue {
    PG_GEMM_STORE = 0,
    PG_GEMM_RESIDUAL,
    PG_GEMM_SWIGLU,
} pg_gemm_epilogue;

/* Packed weight: opaque; owns its (huge-page) buffer. */
typedef struct pg_packed_weight pg_packed_weight;

/* Pack W [N, K] (src_dtype F32, F16 or BF16, row-major, contiguous) for the
 * GEMM of table kt (NULL = pg_kernels()). The result keeps no pointer to W:
 * the caller may unmap the source afterwards. F32 -> packed F32 panels;
 * F16/BF16 -> packed BF16 panels. Packing runs over the default pool's
 * threads (pg_pool_default; the bytes do not depend on the split). Errors:
 * PAGODA_ERR_INVALID_ARG (N or K < 1, NULL W, K not a multiple of 32 for
 * Q8_0 / Q4_0 / MXFP4 / IQ4_NL or of 256 for the K-quants / IQ4_XS),
 * PAGODA_ERR_UNSUPPORTED (other dtype), PAGODA_ERR_NOMEM. */
pagoda_status pg_gemm_pack(pg_dtype src_dtype, const void *W, int64_t N, int64_t K,
                           const pg_kernel_table *kt, pg_packed_weight **out);

/* Pack a gate/up pair (each [N, K], same dtype) for PG_GEMM_SWIGLU: gate and
 * up panels interleaved so one pass over A computes both. Errors as
 * pg_gemm_pack. */
pagoda_status pg_gemm_pack_swiglu(pg_dtype src_dtype, const void *W_gate, const void *W_up,
                                  int64_t N, int64_t K, const pg_kernel_table *kt,
                                  pg_packed_weight **out);

void pg_gemm_free(pg_packed_weight *w); /* NULL is a no-op */

/* Quantized weights (kernels/qgemm.h has the arithmetic): a packed weight
 * may also be W8A8 or W4A8; pg_gemm, pg_gemm_scratch_size and the queries
 * below then run the quantized GEMM (per-token int8 activations). GGUF
 * Q8_0 / Q4_0 rows given to pg_gemm_pack / pg_gemm_pack_swiglu become W8A8
 * / W4A8 with group 32 (no detour through BF16) and per-(token, block)
 * activation scales, the arithmetic of llama.cpp's Q8_0 activation blocks. */
struct pg_qweight;
/* Pack an unpacked quantized weight (and its up half for SwiGLU, else
 * NULL) for table kt (NULL = pg_kernels()). Errors: those of pg_qgemm_pack. */
pagoda_status pg_gemm_pack_qweight(const struct pg_qweight *w, const struct pg_qweight *w_up,
                                   const pg_kernel_table *kt, pg_packed_weight **out);
/* The same, packing over pool's threads (pg_qgemm_pack_pool: identical
 * bytes; NULL = the caller's thread). */
pagoda_status pg_gemm_pack_qweight_pool(const struct pg_qweight *w, const struct pg_qweight *w_up,
                                        const pg_kernel_table *kt, pg_pool *pool,
                                        pg_packed_weight **out);
/* Quantize W [N, K] (and W_up, else NULL) of src_dtype F32/F16/BF16 at load
 * time (pg_qgemm_quantize_weight: symmetric round-to-nearest, bits 8 or 4,
 * group 0 = per channel or a multiple of 32), rows split over `pool` (NULL:
 * the caller), then pack (column panels split over `pool` too). act_group
 * 1 (group-wise only): activation scales per token and group
 * (pg_qweight.act_group) instead of per token. Errors:
 * PAGODA_ERR_INVALID_ARG, PAGODA_ERR_UNSUPPORTED (source dtype),
 * PAGODA_ERR_NOMEM. */
pagoda_status pg_gemm_pack_quantize(pg_dtype src_dtype, const void *W, const void *W_up, int64_t N,
                                    int64_t K, int bits, int64_t group, int act_group,
                                    const pg_kernel_table *kt, pg_pool *pool,
                                    pg_packed_weight **out);
/* ---- MXFP4 (OCP Microscaling v1.0; gpt-oss experts)
 *
 * Weights: blocks of 32 along K, each 32 E2M1 4-bit codes (values +-{0,
 *   0.5, 1, 1.5, 2, 3, 4, 6}) and one E8M0 scale byte E (2^(E-127)). Twice
 *   an E2M1 value is an integer kv = pg_mxfp4_kvalues[code] in [-12, 12]
 *   (base/dtype.h), so the block's scale is taken halved: d = 2^(E-128) =
 *   pg_e8m0_half_to_f32(E), exact as an f32 for every E (E = 1, 0: the
 *   subnormals 2^-127, 2^-128; E = 255, the OCP NaN code, is not special:
 *   2^127; both as llama.cpp's ggml_e8m0_to_fp32_half). Weights stay 4-bit
 *   in the packed panels (codes, expanded in registers by a table lookup:
 *   VPSHUFB on x86, TBL on Arm).
 * Activations: quantized per token AND 32-block in the input stage (as
 *   W4A8 with act_group, GGUF Q8_0 activation blocks): a_s[m,g] =
 *   max |A[m, block g]| / 127, qa = clamp(rint(A / a_s), -127, 127).
 * Arithmetic (pg_ref_mxfp4_gemm in ref/mxfp4.c is the specification):
 *   isum[m,n,g] = sum over block g of qa[m,k] * kv[n,k]      (exact int32)
 *   y = 0; for g increasing: y = fmaf((float)isum, d[n,g] * a_s[m,g], y)
 *   (the product d * a_s rounded to f32 first); then bias and the epilogue
 *   as above. Integer sums are exact and the float order is fixed, so every
 *   kernel table equals the reference bit for bit, and a row's result never
 *   depends on M or on the other rows (batch invariance). The int8 formats'
 *   input stage also gives MXFP4 the fused RMSNorm of pg_qgemm_rmsnorm.
 *
 * GGUF rows: pg_gemm_pack(PG_MXFP4, W, N, K, kt, &pw) and
 * pg_gemm_pack_swiglu(PG_MXFP4, Wg, Wu, N, K, kt, &pw) take [N, K/32]
 * block_mxfp4 (17 bytes: E, then byte j = element j low nibble, element j +
 * 16 high nibble); K must be a multiple of 32 (else PAGODA_ERR_INVALID_ARG).
 *
 * Hugging Face layout (gpt-oss `*_blocks` / `*_scales`, one expert's slice):
 * blocks [N, K/32, 16] uint8, byte i of a block = element 2i (low nibble)
 * and 2i + 1 (high nibble); scales [N, K/32] uint8 E8M0. Row n's blocks at
 * blocks + n * (K/32) * 16, its scales at scales + n * (K/32). up_blocks /
 * up_scales (both or neither; NULL: a plain weight) make a SwiGLU gate/up
 * pair (the caller de-interleaves gpt-oss's fused gate_up rows). Packing
 * runs over pool's threads (NULL: the caller; identical bytes). The result
 * keeps no pointer to the inputs and is byte-identical to packing the same
 * weights from GGUF rows. Errors: PAGODA_ERR_INVALID_ARG (NULL pointers, N
 * < 1, K not a positive multiple of 32), PAGODA_ERR_NOMEM.
 * pg_gemm_format_name gives "mxfp4", pg_gemm_quant_bits 4. */
pagoda_status pg_gemm_pack_mxfp4(const uint8_t *blocks, const uint8_t *scales,
                                 const uint8_t *up_blocks, const uint8_t *up_scales, int64_t N,
                                 int64_t K, const pg_kernel_table *kt, pg_pool *pool,
                                 pg_packed_weight **out);

/* ---- K-quants (GGUF Q2_K, Q3_K, Q4_K, Q5_K, Q6_K; base/kquant.h has the
 * blocks)
 *
 * pg_gemm_pack(PG_Q2_K | PG_Q3_K | PG_Q4_K | PG_Q5_K | PG_Q6_K, rows, N, K,
 * kt, &pw) and pg_gemm_pack_swiglu take [N, K/256] GGUF super-blocks (K a multiple of
 * 256, else PAGODA_ERR_INVALID_ARG) and prepack them (over the default
 * pool's threads) into panels of 32 columns with unsigned weights u (4, 5
 * or 6 bits, nibble and high-bit planes), int8 sub-block scales sc and
 * minimums m, F16 d and dm per super-block (kernels/gemm_kquant.c). Weights:
 * x = d * sc[s] * u - dm * m[s] (Q6_K: m = sc, dm = 32 d; Q3_K: m = sc = ls -
 * 32, dm = 4 d, u = q + 4; Q2_K / Q3_K u widened to nibbles).
 * Activations: int8 per token and super-block of 256, a_s = max|A| / 127
 *   (llama.cpp's block_q8_K), with the sums of every 16 quantized values,
 *   computed in the input stage (with the fused RMSNorm of
 *   pg_qgemm_rmsnorm).
 * Arithmetic (pg_ref_kq_gemm in ref/kquant.c is the specification), per
 *   super-block g in increasing order:
 *   P = sum_s sc[s] * sum_{k in s} qa[k] u[k], Q = sum_s m[s] * sum_{k in s} qa[k]
 *   (exact int32: the minimum term comes from the input stage's sums)
 *   y = fmaf((float)P, d * a_s, y); y = fmaf(-(float)Q, dm * a_s, y)
 *   then bias and the epilogue. Every kernel equals the reference bit for
 *   bit; a row's result never depends on the others (batch invariance).
 * GGUF IQ4_XS is the codebook row of the same form: u a nibble whose
 *   weight is pg_iq4nl_kvalues[u], sc = ls - 32, no Q step:
 *   P = sum_s sc[s] sum_{k in s} qa[k] kv[u[k]], y = fmaf((float)P, d * a_s, y).
 * pg_gemm_format_name gives "q2_k", "q3_k", "q4_k", "q5_k", "q6_k",
 * "iq4_xs", "iq4_nl"; pg_gemm_quant_bits the packed bits 4, 4, 4, 5, 6, 4,
 * 4. GGUF IQ4_NL with K a multiple of 256 is the codebook row with a float
 * scale per sub-block (eight blocks of 32 as one super-block): per
 * sub-block s in order, y = fmaf((float)sum_{k in s} qa[k] kv[u[k]],
 * ds[s] * a_s, y). IQ4_NL rows with another K (a multiple of 32) become
 * W8A8 with groups of 32 ("w8a8", 8 bits; kernels/qgemm.h
 * pg_qgemm_from_gguf). */

/* 8 or 4 for a quantized weight (4 for MXFP4; 4, 5, 6 for the K-quants), 0
 * otherwise. */
int pg_gemm_quant_bits(const pg_packed_weight *w);
/* w itself when it is quantized (a pg_qpacked of kernels/qgemm.h: e.g. for
 * pg_qgemm_rmsnorm), or NULL for a float weight or NULL w. */
const pg_packed_weight *pg_gemm_qpacked(const pg_packed_weight *w);

/* Output width N (for SwiGLU: the gate rows), reduction length K, whether it
 * is a SwiGLU pair, the packed bytes, and the variant name ("avx512bf16"...). */
int64_t pg_gemm_n(const pg_packed_weight *w);
int64_t pg_gemm_k(const pg_packed_weight *w);
int pg_gemm_is_swiglu(const pg_packed_weight *w);
size_t pg_gemm_packed_bytes(const pg_packed_weight *w);
const char *pg_gemm_variant(const pg_packed_weight *w);
/* The weight format (the driver's table row): "bf16", "f32", "w8a8", "w4a8",
 * "mxfp4", "q2_k", "q3_k", "q4_k", "q5_k", "q6_k". */
const char *pg_gemm_format_name(const pg_packed_weight *w);

/* ---- serialized packed weights (the packed-weight cache, model/pack_cache.h)
 *
 * A packed weight is its layout, PG_GEMM_DESC_WORDS int64 words (format,
 * shape, panel geometry, the microkernel's tile shape), and its data bytes
 * (pg_gemm_data, pg_gemm_packed_bytes). pg_gemm_describe fills the words;
 * pg_gemm_adopt rebuilds a weight from them over borrowed data (e.g. a
 * read-only file mapping, at least 64-byte aligned) for table kt (NULL =
 * pg_kernels()), checking that the table's microkernel for the format has
 * the same name and tile shape (mr, nr, kg, ar, vw, a_u8, w_u8, F16
 * scales) and that the geometry is consistent; the weight then computes
 * exactly what the weight that was described did. release(ctx) is called
 * once by pg_gemm_free (release may be NULL). Every format of the driver
 * (bf16, f32, w8a8, w4a8, mxfp4, q4_k, q5_k, q6_k) is serializable (word 0,
 * the format, is -1 for a format missing from the list: add new driver
 * formats to SERIAL_FORMATS in gemm.c). Errors of pg_gemm_adopt: PAGODA_ERR_FORMAT (unknown format, inconsistent
 * geometry, bytes differ), PAGODA_ERR_UNSUPPORTED (the table's microkernel
 * differs), PAGODA_ERR_NOMEM; release is not called on error. */
#define PG_GEMM_DESC_WORDS 24
void pg_gemm_describe(const pg_packed_weight *w, int64_t desc[PG_GEMM_DESC_WORDS]);
const void *pg_gemm_data(const pg_packed_weight *w);
pagoda_status pg_gemm_adopt(const int64_t desc[PG_GEMM_DESC_WORDS], const void *data, size_t bytes,
                            const pg_kernel_table *kt, void (*release)(void *ctx), void *ctx,
                            pg_packed_weight **out);

/* Decode prefetch hint: next (NULL: none) is the packed weight a decode
 * step's forward multiplies after w (qkv -> o -> gate/up -> down -> the next
 * layer's qkv ... -> lm_head -> the first qkv). When a thread ends its share
 * of a call of w with M <= the microkernel's rows (bandwidth-bound decode),
 * it prefetches to L2 the first bytes of its share of next in a call with as
 * many threads, so that the memory keeps streaming while the other threads
 * finish, through the join and the serial work between the two GEMMs (norms,
 * RoPE, attention, sampling) instead of idling. Results do not change (a
 * prefetch only moves lines into cache). next must outlive w's calls. */
void pg_gemm_set_next(pg_packed_weight *w, const pg_packed_weight *next);

/* Scratch bytes pg_gemm needs for M rows with nthreads threads (use
 * pg_pool_size(pool), or 1 for pool NULL). Monotonic in M and nthreads, so
 * size once for the largest step (max_num_batched_tokens). */
size_t pg_gemm_scratch_size(const pg_packed_weight *w, int64_t M, int nthreads);

/* C = epilogue(A . W^T + bias) as described above. M >= 1; lda >= K;
 * ldc >= N; A and C must not overlap; scratch >= pg_gemm_scratch_size(w, M,
 * threads of pool), 64-byte aligned. Errors: PAGODA_ERR_INVALID_ARG (bad
 * sizes, NULL pointers, SWIGLU with a non-pair weight or a pair with another
 * epilogue). */
pagoda_status pg_gemm(const pg_packed_weight *w, const float *A, int64_t M, int64_t lda, float *C,
                      int64_t ldc, const float *bias, pg_gemm_epilogue ep, pg_pool *pool,
                      void *scratch);

/* ---- grouped GEMM (mixture-of-experts experts)
 *
 * n independent problems C_i = epilogue(A_i . W_i^T + bias_i), each exactly
 * what pg_gemm computes for it (bit for bit: a row's result never depends
 * on the other rows, the problem's M or the split), run as one input stage
 * and one compute region: the panel units (a panel, or a gate/up panel
 * pair) of all problems form one list in (problem, unit) order, cut into
 * nthreads contiguous runs of equal cost (bytes streamed x (1 + row
 * tiles)), so one hot problem or 128 small ones keep every thread busy.
 * A problem with M = 0 is skipped (its weight is never read). a_rows
 * (NULL: rows 0..M-1) gathers row r of the problem from A + a_rows[r] * lda
 * in the input stage, so routed tokens need no copy. */
typedef struct pg_gemm_problem {
    const pg_packed_weight *w;
    const float *A;
    int64_t M, lda;
    const int32_t *a_rows;
    float *C;
    int64_t ldc;
    const float *bias;
    pg_gemm_epilogue ep;
    /* PG_GEMM_SWIGLU only: > 0 selects GPT-OSS's clamped SwiGLU,
     * (clamp(u, -L, L) + 1) * g' * sigmoid(1.702 g'), g' = min(g, L) with L
     * = glu_limit (ref/ops_ref.h pg_ref_swiglu_oai); 0: silu(g) * u. */
    float glu_limit;
} pg_gemm_problem;

/* Scratch bytes for a grouped call of at most max_problems problems whose
 * weights are packed like w (same format and shape; take the largest over
 * the formats in play) and whose M sum to at most total_rows, with nthreads
 * threads. */
size_t pg_gemm_grouped_scratch_size(const pg_packed_weight *w, int64_t total_rows,
                                    int max_problems, int nthreads);

/* Run the n problems (see above) on pool. scratch: 64-byte aligned, at
 * least pg_gemm_grouped_scratch_size bytes. Errors: those of pg_gemm for a
 * problem (nothing is computed then), PAGODA_ERR_INVALID_ARG for n < 0 or
 * bad scratch. */
pagoda_status pg_gemm_grouped(const pg_gemm_problem *p, int n, pg_pool *pool, void *scratch);

#endif
