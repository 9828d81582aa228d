/* Element types of tensors in model files and kernels.
 *
 * Block-quantized types follow GGML's definitions (ggml-common.h):
 *   Q8_0: blocks of 32 weights = f16 scale d, then 32 x int8 q;  w = d * q
 *   Q4_0: blocks of 32 weights = f16 scale d, then 16 bytes of nibbles;
 *         byte j holds element j (low nibble) and j+16 (high nibble);
 *         w = d * (nibble - 8)
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
    PG_DTYPE_COUNT
} pg_dtype;

/* "F32", "BF16", "Q4_0", ... */
const char *pg_dtype_name(pg_dtype t);
/* Elements per block (1 for plain types, 32 for Q8_0/Q4_0). */
size_t pg_dtype_block_elems(pg_dtype t);
/* Bytes per block (4 for F32, 34 for Q8_0, 18 for Q4_0). */
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

/* Dequantize/convert one row of n elements of type t at src into f32 dst.
 * n must be a multiple of pg_dtype_block_elems(t). Supports F32, F16, BF16,
 * Q8_0, Q4_0. Scalar reference; kernels may provide faster versions. */
void pg_dequant_row(pg_dtype t, const void *src, float *dst, size_t n);

#endif
