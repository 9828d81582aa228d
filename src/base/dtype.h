/* Element types of tensors in model files and kernels.
 *
 * Block-quantized types follow GGML's definitions (ggml-common.h):
 *   Q8_0: blocks of 32 weights = f16 scale d, then 32 x int8 q;  w = d * q
 *   Q4_0: blocks of 32 weights = f16 scale d, then 16 bytes of nibbles;
 *         byte j holds element j (low nibble) and j+16 (high nibble);
 *         w = d * (nibble - 8)
 *   MXFP4 (OCP Microscaling v1.0; ggml type 39): blocks of 32 weights =
 *         uint8 e (E8M0 scale), then 16 bytes of E2M1 nibbles laid out as
 *         Q4_0 (byte j: element j low, j+16 high; llama.cpp ggml-common.h
 *         block_mxfp4); w = kvalues_mxfp4[nibble] * 2^(e-128), the table
 *         holding twice the E2M1 values (pg_mxfp4_kvalues) and the scale
 *         halved to match (pg_e8m0_half_to_f32).
 *   Q4_K / Q5_K / Q6_K: super-blocks of 256 weights with 6- or 8-bit
 *         sub-block scales (144 / 176 / 210 bytes; base/kquant.h).
 *   Q2_K / Q3_K: super-blocks of 256 with 4-bit scales and minimums / 6-bit
 *         signed scales (84 / 110 bytes); IQ4_NL (blocks of 32, 18 bytes)
 *         and IQ4_XS (super-blocks of 256, 136 bytes): 4-bit indices into
 *         the non-linear codebook pg_iq4nl_kvalues (base/kquant.h).
 * F16 is IEEE binary16; BF16 is the top 16 bits of an IEEE binary32. */
#ifndef PAGODA_BASE_DTYPE_H
#define PAGODA_BASE_DTYPE_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

typedef enum pg_dtype {
    PG_F32 = 0,
    PG_F16,
    PG_BF16,
    PG_Q8_0,
    PG_Q4_0,
    PG_I8,
    PG_U8,
    PG_I16,
    PG_I32,
    PG_I64,
    PG_F64,
    PG_BOOL,
    PG_MXFP4,
    PG_Q4_K, /* GGUF K-quants: super-blocks of 256 (base/kquant.h) */
    PG_Q5_K,
    PG_Q6_K,
    PG_Q2_K,   /* 84 bytes per 256 (base/kquant.h) */
    PG_Q3_K,   /* 110 bytes per 256 (base/kquant.h) */
    PG_IQ4_NL, /* 18 bytes per 32: F16 d, 16 bytes of codebook nibbles (base/kquant.h) */
    PG_IQ4_XS, /* 136 bytes per 256 (base/kquant.h) */
    PG_DTYPE_COUNT
} pg_dtype;

/* "F32", "BF16", "Q4_0", ... */
const char *pg_dtype_name(pg_dtype t);
/* Elements per block (1 for plain types, 32 for Q8_0/Q4_0/MXFP4, 256 for
 * the K-quants). */
size_t pg_dtype_block_elems(pg_dtype t);
/* Bytes per block (4 for F32, 34 for Q8_0, 18 for Q4_0, 17 for MXFP4). */
size_t pg_dtype_block_bytes(pg_dtype t);
/* Bytes for a row of n elements; 0 if n is not a multiple of the block size. */
size_t pg_dtype_row_bytes(pg_dtype t, size_t n);

/* IEEE binary16 <-> binary32, exact for every half (incl. subnormals, inf, nan). */
float pg_f16_to_f32(uint16_t h);
uint16_t pg_f32_to_f16(float f); /* round to nearest even */

static inline float pg_bf16_to_f32(uint16_t b) {
    uint32_t u = (uint32_t)b << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}
/* Round to nearest even; NaN stays NaN. */
static inline uint16_t pg_f32_to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

/* Twice the E2M1 value of each 4-bit code (sign bit 3, exponent bits 2-1,
 * mantissa bit 0): 2 * {0, 0.5, 1, 1.5, 2, 3, 4, 6} and their negatives,
 * integers in [-12, 12] (llama.cpp ggml-common.h kvalues_mxfp4). */
extern const int8_t pg_mxfp4_kvalues[16];

/* Half the value of an E8M0 scale byte, 2^(e-128), exact as an f32 for
 * every e: e >= 2 is the normal number with biased exponent e - 1; e = 1 and
 * e = 0 are the subnormals 2^-127 and 2^-128; e = 255 (the OCP NaN code) is
 * NOT special-cased and gives 2^127 (llama.cpp ggml-impl.h
 * ggml_e8m0_to_fp32_half, which we follow bit for bit). */
static inline float pg_e8m0_half_to_f32(uint8_t e) {
    uint32_t u = e < 2 ? 0x00200000u << e : (uint32_t)(e - 1) << 23;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* Dequantize/convert one row of n elements of type t at src into f32 dst.
 * n must be a multiple of pg_dtype_block_elems(t). Supports F32, F16, BF16,
 * Q8_0, Q4_0, MXFP4 (exact: a table value times a power of two), Q4_K,
 * Q5_K, Q6_K, Q2_K, Q3_K, IQ4_NL, IQ4_XS (llama.cpp's formulas,
 * base/kquant.h). Scalar
 * reference; kernels may provide faster versions. */
void pg_dequant_row(pg_dtype t, const void *src, float *dst, size_t n);

#endif
