/* GGUF K-quant super-blocks (ggml types Q2_K 10, Q3_K 11, Q4_K 12, Q5_K 13,
 * Q6_K 14): decoding one block of 256 weights into the integer form every
 * pagoda kernel works from; and the IQ4 codebook types (IQ4_NL 20, IQ4_XS
 * 23), which the GEMM takes as int8 codebook values (kernels/qgemm.h).
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
 *   Q2_K (84 bytes): scales[16], qs[64], F16 d, F16 dmin. 16 sub-blocks of
 *     16; byte scales[s]: sc = low nibble, m = high nibble. Element e = 128 h
 *     + 32 j + l (l 0..31): q = (qs[32 h + l] >> 2 j) & 3. x = (d sc) q -
 *     (dmin m).
 *   Q3_K (110 bytes): hmask[32], qs[64], scales[12], F16 d. 16 sub-blocks
 *     of 16 with 6-bit scales ls (s < 8: low 4 bits scales[s] & 15, else
 *     scales[s - 8] >> 4; high 2 bits (scales[8 + s % 4] >> 2 (s / 4)) & 3).
 *     Element e = 128 h + 32 j + l: low 2 bits (qs[32 h + l] >> 2 j) & 3,
 *     high bit hb = bit 4 h + j of hmask[l]; q = low - (hb ? 0 : 4) (-4..3).
 *     x = (d (ls - 32)) q.
 *   IQ4_NL (18 bytes per 32): F16 d, qs[16] (byte j: element j low nibble,
 *     j + 16 high, as Q4_0). x = d kvalues[nibble].
 *   IQ4_XS (136 bytes): F16 d, uint16 scales_h, scales_l[4], qs[128]. 8
 *     sub-blocks of 32 with 6-bit ls = (scales_l[s / 2] >> 4 (s % 2)) & 15 |
 *     ((scales_h >> 2 s) & 3) << 4; sub-block s's bytes qs[16 s + j] hold
 *     element 32 s + j (low nibble) and 32 s + j + 16 (high).
 *     x = (d (ls - 32)) kvalues[nibble].
 *   kvalues = kvalues_iq4nl (ggml-common.h; pg_iq4nl_kvalues).
 *
 * The integer form: x[e] = d * sc[s] * u[e] - dm * m[s], s = e / sub, with
 * u unsigned (0..15 Q4_K, 0..31 Q5_K, 0..63 Q6_K). Q6_K maps to it with u =
 * q, m = sc and dm = 32 d (exact as an F16 unless it overflows); Q2_K is it
 * with u = q (0..3), dm = dmin; Q3_K with u = q + 4 (0..7), sc = m = ls - 32
 * and dm = 4 d. So a dot
 * product with int8 activations qa (per-256 scale a_s) is
 *   a_s * (d * sum_s sc[s] * sum_{e in s} qa u  -  dm * sum_s m[s] * sum_{e in s} qa),
 * the second sum needing only the activations' per-sub-block sums.
 * IQ4_XS is the codebook variant of it: u is the nibble, sc = ls - 32, and
 * the product is a_s * d * sum_s sc[s] * sum_{e in s} qa kv[u] (kv signed:
 * no minimum term; a kernel whose dot takes unsigned weights uses kv + 128
 * and subtracts 128 * sum_s sc[s] * sum_{e in s} qa, exact in int32).
 * IQ4_NL, eight blocks taken as one super-block, keeps a float scale per
 * sub-block: the product is sum_s a_s ds[s] sum_{e in s} qa kv[u]. */
#ifndef PAGODA_BASE_KQUANT_H
#define PAGODA_BASE_KQUANT_H

#include <stddef.h>
#include <stdint.h>

#include "base/dtype.h"

enum { PG_QK_K = 256 };

typedef struct pg_kq_block {
    uint16_t d, dm; /* F16 bits */
    uint16_t ds[8]; /* IQ4_NL: the F16 scale of each sub-block (block of 32); else unused */
    int sub;        /* elements per sub-block: 32 (Q4_K, Q5_K) or 16 (Q2_K, Q3_K, Q6_K) */
    int8_t sc[16], m[16];
    uint8_t u[PG_QK_K];
} pg_kq_block;

/* llama.cpp's kvalues_iq4nl: the 16 codebook values of IQ4_NL / IQ4_XS. */
extern const int8_t pg_iq4nl_kvalues[16];

/* True for the K-quant types this decoder reads (Q2_K, Q3_K, Q4_K, Q5_K,
 * Q6_K). */
int pg_kq_is_kquant(pg_dtype t);
/* True for the types the K-quant GEMM rows pack (kernels/gemm_kquant.c):
 * the K-quants, IQ4_XS and IQ4_NL (eight blocks of 32 as one super-block
 * of 256; rows with K a multiple of 256). */
int pg_kq_in_gemm(pg_dtype t);
/* 1 when u is an index into pg_iq4nl_kvalues (IQ4_XS: the weight is d sc
 * kv[u]; IQ4_NL: ds[s] kv[u]; no minimum term), else 0. */
int pg_kq_codebook(pg_dtype t);
/* 1 when each sub-block has its own F16 scale ds[s] instead of d sc[s]
 * (IQ4_NL), else 0. */
int pg_kq_fscale(pg_dtype t);
/* Bytes of one super-block of 256 weights of t (IQ4_NL: eight blocks,
 * 144), 0 for a type pg_kq_in_gemm rejects. */
size_t pg_kq_super_bytes(pg_dtype t);
/* Bits of u as the GEMM packs it: 4 (Q2_K, Q3_K, Q4_K, IQ4_XS and IQ4_NL:
 * one nibble each), 5 or 6 (0 for other types). */
int pg_kq_bits(pg_dtype t);
/* Elements per sub-block: 32 (Q4_K, Q5_K, IQ4_XS, IQ4_NL), 16 (Q2_K, Q3_K,
 * Q6_K); 0 else. */
int pg_kq_sub(pg_dtype t);
/* 1 when the minimums m are their own values (Q2_K, Q4_K, Q5_K), 0 when m
 * = sc (Q3_K, Q6_K, IQ4_XS), for IQ4_NL or when t is not a K-quant. */
int pg_kq_has_min(pg_dtype t);

/* Decode one super-block of type t (a K-quant, IQ4_XS, or eight IQ4_NL
 * blocks) at blk. IQ4_XS: u = the 4-bit codebook index, sc = m = ls - 32,
 * dm = 0 (x = d sc kv[u]). IQ4_NL: u as IQ4_XS, ds[s] = block s's d, d =
 * dm = 0 and sc = m = 0 (x = ds[s] kv[u]). Returns 0, or -1 when dm is not
 * an exact F16 (Q6_K / Q3_K with |32 d| / |4 d| beyond the F16 range), or
 * -2 for another type. */
int pg_kq_decode(pg_dtype t, const void *blk, pg_kq_block *out);

/* Dequantize n elements (a multiple of the block) of K-quant or IQ4 rows
 * with llama.cpp's float formulas (dequantize_row_*: Q4_K / Q5_K / Q2_K
 * (d sc) q - (dmin m), Q6_K (d sc) (q - 32), Q3_K (d (ls - 32)) q, IQ4_NL
 * d kv, IQ4_XS (d (ls - 32)) kv, each product rounded to f32). */
void pg_kq_dequant_row(pg_dtype t, const void *src, float *dst, int64_t n);

/* The 6-bit scale ls (0..63) of IQ4_XS sub-block s (0..7) of block blk. */
int pg_iq4xs_scale(const void *blk, int s);

#endif
