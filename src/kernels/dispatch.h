/* The kernel dispatch table: one set of function pointers per ISA level
 * (src/base/cpu.h), filled once per process from the CPU's features. The
 * process-wide table, pg_kernels(), uses the best level the CPU supports,
 * possibly lowered by PAGODA_ISA ("scalar", "avx2", "avx512", "avx512bf16",
 * "neon", "sve"). Every entry has a scalar reference in src/kernels/ref/ that
 * is its specification; SIMD variants live in src/kernels/x86/ and
 * src/kernels/arm/ and are tested against it (tests/test_dispatch.c). An
 * entry without a variant at some level inherits the next lower level's.
 *
 * Reduction order: a variant's result may differ from the reference in the
 * last bits (different summation order), but for one table the order depends
 * only on n, never on where the row sits in a batch or on pointer alignment
 * (batch invariance).
 *
 * Adding an entry: the reference in ref/, variants in x86/ and arm/, a field
 * here (plus its `variant` name), the assignments in dispatch.c (fill_table
 * and pg_kernels_describe), and a test in tests/test_dispatch.c. */
#ifndef PAGODA_KERNELS_DISPATCH_H
#define PAGODA_KERNELS_DISPATCH_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

struct pg_attn_ukernels; /* kernels/attention.h */
struct pg_gdn_ukernels;  /* kernels/gated_delta.h */
/* A GEMM microkernel (driven by src/kernels/gemm.c; layouts in
 * docs/ARCHITECTURE.md "GEMM"). It computes an mr x nr tile
 *     c[i][j] (+)= sum over ngroups k-groups of A(row i) . W(column j)
 * where W is one packed panel slice (ngroups x nr x kg elements: for each
 * k-group, for each of the nr columns, kg consecutive k) and A is ngroups
 * k-groups of mr rows: ar == 1: row i at a + i*a_stride, kg consecutive k
 * per group; ar == 2: row pairs (BFMMLA), pair p at a + p*a_stride, each
 * group = row 2p's kg values then row 2p+1's. Elements are uint16 BF16 bits
 * (bf16 kernels) or f32. c is row-major with stride ldc floats; accumulate
 * == 0 starts from zero, 1 adds to what c holds. 1 <= mr <= the kernel's mr.
 * Every c[i][j] is reduced in increasing k-group order in one accumulator
 * whose lane does not depend on mr or i: the batch-invariance contract.
 * run_pf (optional, NULL when a variant has none) is run plus a software
 * prefetch of pf_lines 64-byte lines starting at pf, spread over the first
 * k-groups (ceil(pf_lines / ngroups) per group, at most 4; more are
 * dropped): the driver streams the next W slice from memory while a small-M
 * tile computes. Same results as run, bit for bit. */
typedef struct pg_gemm_ukernel {
    const char *name; /* variant, for reports: "avx512bf16", "scalar", ... */
    int mr, nr;       /* max rows per call; panel width in columns */
    int kg, ar;       /* k per group; rows per A group (1 or 2) */
    void (*run)(int64_t ngroups, const void *a, int64_t a_stride, const void *w, float *c,
                int64_t ldc, int mr, int accumulate);
    void (*run_pf)(int64_t ngroups, const void *a, int64_t a_stride, const void *w, float *c,
                   int64_t ldc, int mr, int accumulate, const void *pf, int64_t pf_lines);
} pg_gemm_ukernel;

/* A quantized GEMM microkernel (kernels/qgemm.h; layouts in
 * docs/ARCHITECTURE.md "Quantized GEMM"). It computes an mr x nr tile
 *     for each of ngroups groups of gk k (gk a multiple of 32):
 *         c[i][j] = fmaf((float)isum_g[i][j], scale_g[j], c[i][j])
 * where isum_g is the exact int32 sum over the group of a[i][k] * q[j][k]
 * (accumulate == 0: c starts at 0). The packed panel holds, per group:
 * for a_u8 kernels only, int32 comp[nr] (the start of each column's integer
 * sum: -128 * sum q, scaled by 16 for W4); then the scales, f32 scale[nr]
 * (or F16 for run_hs); then the weights: for each k-chunk of kg, for each column,
 * kg int8 values; W4 halves this stream: each 2*vw bytes become vw bytes
 * whose low nibbles hold the first vw values and high nibbles the next vw.
 * A: int8 (a_u8: plus 128, as uint8), row i at a + i*a_stride (ar 2: row
 * pairs, each kg-chunk = row 2p's kg values then row 2p+1's). 1 <= mr <=
 * the kernel's mr.
 * w_u8 kernels (VPDPBUSD with the weights as the unsigned operand) store
 * q + 128 (W8) or q + 8 (W4 nibbles) and get per row i and group g the
 * correction c = -128 (W8) or -8 (W4) times the sum of row i's activations
 * over the group, which the driver computes in its input stage: W8 at
 * ac[i*ac_stride + g] = c, W4 as the pair ac[i*ac_stride + 2g] = 17 c,
 * ac[i*ac_stride + 2g + 1] = 16 c (the starts of the raw-byte and high-nibble
 * sums of x86/qgemm_avx512vnni.c). ac is NULL for other kernels.
 * as == NULL: per-token activation scales (applied later by the driver);
 * else per-group ones: group g of row i uses scale_g[j] * as[i*as_stride + g]
 * (that product rounded to f32) in place of scale_g[j]. */
typedef struct pg_qgemm_ukernel {
    const char *name; /* "avx512vnni", "i8mm", "scalar", ... */
    int mr, nr, kg, ar, vw, a_u8, bits;
    int w_u8; /* offset-unsigned weights, activation-sum corrections (see above) */
    void (*run)(int64_t ngroups, int64_t gk, const void *a, int64_t a_stride, const float *as,
                int64_t as_stride, const int32_t *ac, int64_t ac_stride, const void *w, float *c,
                int64_t ldc, int mr, int accumulate);
    /* Optional (NULL: none): run with the header's scales
     * stored as F16 (nr x 2 bytes, widened exactly). Packing picks it when
     * every scale of the weight is an exact F16 (GGUF Q8_0/Q4_0 always;
     * load-time quantization rounds its scales to F16): 2 bytes per column
     * and group fewer to stream. */
    void (*run_hs)(int64_t ngroups, int64_t gk, const void *a, int64_t a_stride, const float *as,
                   int64_t as_stride, const int32_t *ac, int64_t ac_stride, const void *w, float *c,
                   int64_t ldc, int mr, int accumulate);
} pg_qgemm_ukernel;

/* An MXFP4 GEMM microkernel (kernels/gemm.h "MXFP4") is a pg_qgemm_ukernel
 * with bits 4, gk 32 (one OCP block per group) and per-(row, block)
 * activation scales (as never NULL), computing per block g
 *     c[i][j] = fmaf((float)isum_g[i][j], d_g[j] * as[i*as_stride + g], c[i][j])
 * with isum_g = sum over the block of a[i][k] * kv[code[j][k]] (kv =
 * pg_mxfp4_kvalues, twice the E2M1 values) and d_g[j] = 2^(E-128) of the
 * column's E8M0 byte (pg_e8m0_half_to_f32). The packed panel holds per
 * block: uint8 E[nr], then the 4-bit codes (not values) in the W4 layout
 * above (k-chunks of kg, vw nibble pairing). w_u8 kernels map a code to
 * kv + 12 (unsigned) and get ac[i*ac_stride + g] = -12 * (sum of row i's
 * activations over block g) from the input stage; others use kv itself.
 * run_hs is NULL. Spec: pg_ref_mxfp4_gemm (ref/mxfp4.c).
 *
 * A K-quant microkernel (q2_k .. q6_k; kernels/gemm.h "K-quants") is a
 * pg_qgemm_ukernel with nr 32, ar 1, gk 256 (one super-block per group) and
 * `bits` 4 / 5 / 6 (Q2_K and Q3_K: 4, their u widened to nibbles), on the packed layout of
 * gemm_kquant.c (the same for every ISA). Per super-block g, row i, column j it computes the exact
 * int32 P = sum_s sc[s][j] * sum_{k in s} a[i][k] * u[j][k] and Q = sum_s
 * m[s][j] * (activation sums of sub-block s), then
 *     c[i][j] = fmaf((float)P, d[j] * as[i*as_stride + g], c[i][j])
 *     c[i][j] = fmaf(-(float)Q, dm[j] * as[i*as_stride + g], c[i][j])
 * The activation sums come from the input stage as int16, 16 per
 * super-block (one per 16 k): row i's at (const int16_t *)(ac + i *
 * ac_stride) + 16 g. iq4_xs is the same contract with bits 4, u a
 * codebook index: a[i][k] * u[j][k] becomes a[i][k] * pg_iq4nl_kvalues[u]
 * and there is no Q step (base/kquant.h); iq4_nl is iq4_xs with an F16
 * scale ds[s][j] per sub-block in place of d and sc: per sub-block s in
 * order c[i][j] = fmaf((float)(sum_{k in s} a[i][k] kv[u[j][k]]), ds[s][j] *
 * as[i*as_stride + g], c[i][j]). Spec: pg_ref_kq_gemm
 * (ref/kquant.c). */

typedef struct pg_kernel_table {
    const char
        *isa; /* name of the level: "scalar", "avx2", "avx512", "avx512bf16", "neon", "sve" */
    /* sum_i a[i]*b[i] over n floats (any n >= 0, any alignment). */
    float (*dot_f32)(const float *a, const float *b, size_t n);
    /* sum_i bf16(w[i])*x[i]: BF16 weights (raw uint16 bits) times f32 activations. */
    float (*dot_bf16_f32)(const uint16_t *w, const float *x, size_t n);
    /* sum_i f16(w[i])*x[i]: F16 weights (raw uint16 bits) times f32 activations. */
    float (*dot_f16_f32)(const uint16_t *w, const float *x, size_t n);
    /* y[i] = e^{x[i]}, n floats (x == y allowed): range reduction x = n ln2 + r,
     * Cephes degree-7 polynomial, 2^n from exponent bits in two halves (so the
     * denormal range rounds once and x near 88.7 does not overflow early);
     * within 2 ulp of the correctly rounded value (tests/test_vexp.c);
     * -inf -> 0, +inf -> inf, NaN -> NaN, x < -104 -> 0. */
    void (*vexp_f32)(const float *x, float *y, size_t n);
    /* Paged-attention micro-kernels for an F32 / a BF16 KV cache (kernels/attention.h). */
    const struct pg_attn_ukernels *attn_f32kv, *attn_bf16kv;
    /* Row ops; specs: pg_ref_rmsnorm / pg_ref_softmax / pg_ref_silu /
     * pg_ref_swiglu (kernels/ref/ops_ref.h: m rows of n for RMSNorm, softmax
     * in place over n >= 1), pg_ref_argmax_f32 (ref/ref.h: first index of
     * the largest non-NaN value, 0 if none). Variants sum in an order fixed
     * by n and use the vexp above (tests/test_vops.c). */
    void (*rmsnorm_f32)(float *out, const float *x, const float *w, size_t m, size_t n, float eps);
    void (*softmax_f32)(float *x, size_t n);
    void (*silu_f32)(float *out, const float *x, size_t n);
    void (*swiglu_f32)(float *out, const float *gate, const float *up, size_t n);
    size_t (*argmax_f32)(const float *x, size_t n);
    /* Whisper's row ops; specs pg_ref_layernorm (m rows of n, bias b or
     * NULL; out may equal x) and pg_ref_gelu (exact-erf GELU, out may equal
     * x) in ref/ops_ref.h. Variants sum in an order fixed by n; their GELU
     * uses the erf of kernels/gelu_consts.h with the vexp above
     * (tests/test_vops.c gives the tolerances). */
    void (*layernorm_f32)(float *out, const float *x, const float *w, const float *b, size_t m,
                          size_t n, float eps);
    void (*gelu_f32)(float *out, const float *x, size_t n);

    /* GEMM microkernels (kernels/gemm.h): BF16 weights x BF16-rounded
     * activations with f32 accumulation, and exact f32 (one FMA per product). */
    pg_gemm_ukernel gemm_bf16, gemm_f32;
    /* dst[i] = bf16(src[i]), round to nearest even (NaN stays NaN), n >= 0:
     * the GEMM's activation input stage. */
    void (*cvt_f32_bf16)(const float *src, uint16_t *dst, size_t n);
    /* Quantized GEMM microkernels (kernels/qgemm.h): int8 and int4 weights
     * times int8 per-token activations. */
    pg_qgemm_ukernel qgemm_w8, qgemm_w4;
    /* MXFP4 weights (E2M1 codes, E8M0 block scales) times int8 activations
     * with per-(token, block) scales (see the comment above the table). */
    pg_qgemm_ukernel mxfp4;
    /* GGUF K-quant weights (Q2_K, Q3_K, Q4_K, Q5_K, Q6_K) times int8
     * activations with per-(token, 256) scales and 16-sums (see the comment
     * above the table). */
    pg_qgemm_ukernel q2_k, q3_k, q4_k, q5_k, q6_k, iq4_xs, iq4_nl;
    /* The quantized GEMM's activation input stage (kernels/qgemm.h; specs
     * pg_ref_amax_f32 / pg_ref_quant_i8 in ref/ref.h, every variant equal
     * bit for bit): amax_f32 = max |x[i]| over n >= 0 floats (0 for n 0;
     * NaN ignored); quant_i8: q[i] = rint(clamp(x[i] * inv, -127, 127))
     * (round to nearest even; NaN inputs unspecified), returns sum q[i]. */
    float (*amax_f32)(const float *x, size_t n);
    int32_t (*quant_i8)(const float *x, size_t n, float inv, int8_t *q);
    /* Gated DeltaNet micro-kernels (kernels/gated_delta.h: the recurrent
     * step and the chunked form's small matmul; specs pg_ref_gdn_*_uk in
     * ref/ref.h, every variant bitwise equal to them). */
    const struct pg_gdn_ukernels *gdn;

    /* Which variant fills each entry ("scalar", "avx2", ...), for reports. */
    struct {
        const char *dot_f32, *dot_bf16_f32, *dot_f16_f32, *cvt_f32_bf16;
        const char *vexp_f32, *attn_f32kv, *attn_bf16kv;
        const char *rmsnorm_f32, *softmax_f32, *silu_f32, *swiglu_f32, *argmax_f32;
        const char *layernorm_f32, *gelu_f32;
        const char *amax_f32, *quant_i8, *gdn;
    } variant;
} pg_kernel_table;

/* The process-wide table. Thread-safe; the first call reads PAGODA_ISA and
 * picks the level as pg_kernels_select does. Never NULL. */
const pg_kernel_table *pg_kernels(void);

/* The table for the level a PAGODA_ISA value asks for (NULL or "" = best
 * this CPU supports). A level the CPU lacks is clamped to the best one with
 * a warning; an unknown name (or a level of the other architecture) logs an
 * error and gives the best table. Never NULL. Does not change pg_kernels(). */
const pg_kernel_table *pg_kernels_select(const char *isa_or_null);

/* The table of exactly level `isa` (a pg_isa_name, case-insensitive), or
 * NULL when the name is unknown or this CPU cannot run that level. Lets
 * tests run every variant the machine supports. */
const pg_kernel_table *pg_kernels_for_isa(const char *isa);

/* Every quantized GEMM microkernel (kernels/qgemm.h) this machine can run
 * for `bits` (8 or 4), scalar first, including feature variants the tables
 * do not pick (SDOT where SMMLA exists, AVX-VNNI where AVX512_VNNI
 * exists), for tests and benchmarks. Returns the count (<= max). */
int pg_qgemm_ukernel_variants(int bits, const pg_qgemm_ukernel **out, int max);

/* Print one line per entry, "  <prefix><entry> <variant>", to f. */
void pg_kernels_describe(const pg_kernel_table *t, FILE *f, const char *prefix);

#endif
