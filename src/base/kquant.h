/* GGUF K-quant super-blocks (ggml types Q4_K 12, Q5_K 13, Q6_K 14):
 * decoding one block of 256 weights into the integer form every pagoda
 * kernel works from.
 *
 * Bit layouts (llama.cpp ggml/src/ggml-common.h block_q*_K and
 * ggml-quants.c dequantize_row_q*_K; read for the facts, our own code):
 *   Q4_K (144 bytes): F16 d, F16 dmin, scales[12], qs[128]. 8 sub-blocks of
 *     32; sub-block s has a 6-bit scale sc and 6-bit min m packed in the 12
 *     bytes (s < 4: sc = b[s] & 63, m = b[s+4] & 63; s >= 4: sc = (b[s+4] &
 *     15) | (b[s-4] >> 6) << 4, m = (b[s+4] >> 4) | (b[s] >> 6) << 4).
 *     Element e: byte qs[32 (e / 64) + e % 32], low nibble when e % 64 < 32,
 *     else high. x = d sc q - dmin m.
 *   Q5_K (176 bytes): d, dmin, scales[12] as Q4_K, qh[32], qs[128] (as
 *     Q4_K's); q = nibble + 16 * bit (2 (e / 64) + (e % 64 >= 32)) of
 *     qh[e % 32]. x = d sc q - dmin m.
 *   Q6_K (210 bytes): ql[128], qh[64], int8 scales[16], F16 d. 16 sub-blocks
 *     of 16 (scale scales[e / 16]). Element e = 128 h + 32 j + l (j 0..3):
 *     low 4 bits from ql[64 h + l + 32 (j & 1)] (low nibble for j < 2, high
 *     for j >= 2), high 2 bits from qh[32 h + l] >> 2 j. x = d sc (q - 32).
 *
 * The integer form: x[e] = d * sc[s] * u[e] - dm * m[s], s = e / sub, with
 * u unsigned (0..15 Q4_K, 0..31 Q5_K, 0..63 Q6_K). Q6_K maps to it with u =
 * q, m = sc and dm = 32 d (exact as an F16 unless it overflows). So a dot
 * product with int8 activations qa (per-256 scale a_s) is
 *   a_s * (d * sum_s sc[s] * sum_{e in s} qa u  -  dm * sum_s m[s] * sum_{e in s} qa),
 * the second sum needing only the activations' per-sub-block sums. */
#ifndef PAGODA_BASE_KQUANT_H
#define PAGODA_BASE_KQUANT_H

#include <stdint.h>

#include "base/dtype.h"

enum { PG_QK_K = 256 };

typedef struct pg_kq_block {
    uint16_t d, dm; /* F16 bits */
    int sub;        /* elements per sub-block: 32 (Q4_K, Q5_K) or 16 (Q6_K) */
    int8_t sc[16], m[16];
    uint8_t u[PG_QK_K];
} pg_kq_block;

/* True for the K-quant types this decoder reads (Q4_K, Q5_K, Q6_K). */
int pg_kq_is_kquant(pg_dtype t);
/* Bits of u: 4, 5 or 6 (0 for other types). */
int pg_kq_bits(pg_dtype t);

/* Decode one block of type t at blk. Returns 0, or -1 when dm is not an
 * exact F16 (Q6_K with |32 d| beyond the F16 range), or -2 for a type that
 * is not a K-quant. */
int pg_kq_decode(pg_dtype t, const void *blk, pg_kq_block *out);

/* Dequantize n elements (a multiple of 256) of K-quant rows with llama.cpp's
 * float formulas (dequantize_row_q*_K: Q4_K / Q5_K (d sc) q - (dmin m), Q6_K
 * (d sc) (q - 32), each product rounded to f32). */
void pg_kq_dequant_row(pg_dtype t, const void *src, float *dst, int64_t n);

#endif
