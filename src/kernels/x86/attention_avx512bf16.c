/* AVX512_BF16 paged-attention micro-kernels for a BF16 KV cache: QK and PV
 * with VDPBF16PS (Intel SDM vol. 2, "VDPBF16PS": per 32-bit lane,
 * acc += a[2i+1]*b[2i+1], then acc += a[2i]*b[2i], DAZ/FTZ, round to nearest even).
 *
 * QK: the K tile's 32-bit lanes are (K[t][2i], K[t][2i+1]); q rows are
 * rounded to BF16 pairs (VCVTNE2PS2BF16, round to nearest even) once per
 * call and broadcast, so one instruction does 16 tokens x 2 dims.
 * PV: the V tile's lanes are (V[2u][d], V[2u+1][d]); the probabilities of
 * a row are rounded to BF16 pairs (p[2u], p[2u+1]) and broadcast. Rounding q
 * and p to BF16 costs ~3 significant digits against the f32 reference
 * (tests allow 1e-2 on unit-scale outputs); every element is still one
 * fixed chain over d (QK) / over token pairs (PV), whatever the blocking. */
#include <immintrin.h>
#include <stdint.h>

#include "kernels/attention.h"
#include "kernels/x86/x86.h"

#define INLINE static inline __attribute__((always_inline))
/* The register-block loops (R, V, C <= 4, constants after inlining) carry
 * "#pragma GCC unroll 4": -O2 alone keeps the accumulator arrays in memory. */

static inline __mmask16 tail_mask(int n) {
    return n >= 16 ? (__mmask16)0xffff : n <= 0 ? 0 : (__mmask16)((1u << n) - 1);
}

/* n floats -> BF16, zero-padded to a multiple of 32 elements at dst. */
static void to_bf16(const float *x, int n, uint16_t *dst) {
    for (int i = 0; i < n; i += 32) {
        __m512 a = _mm512_maskz_loadu_ps(tail_mask(n - i), x + i);
        __m512 b = _mm512_maskz_loadu_ps(tail_mask(n - i - 16), x + i + 16);
        _mm512_storeu_si512(dst + i, (__m512i)_mm512_cvtne2ps_pbh(b, a));
    }
}

enum { QP = PG_KV_MAX_HEAD_DIM / 2, PP = PG_KV_MAX_BLOCK_SIZE / 2 + 16 };

/* ---- QK ------------------------------------------------------------------------------- */

INLINE void qk_tile(const uint32_t *qp, const void *const *k, int bs, int j0, int hd, float scale,
                    float *s, int lds, int R, int V) {
    __m512 acc[4][4];
#pragma GCC unroll 4
    for (int r = 0; r < R; r++)
#pragma GCC unroll 4
        for (int v = 0; v < V; v++)
            acc[r][v] = _mm512_setzero_ps();
    const uint16_t *kp[4];
#pragma GCC unroll 4
    for (int v = 0; v < V; v++) {
        const int j = j0 + 16 * v; /* a vector never crosses a block: 16 | bs */
        kp[v] = (const uint16_t *)k[j / bs] + 2 * (size_t)(j % bs);
    }
    for (int i = 0; i < hd / 2; i++) {
        __m512i kx[4];
#pragma GCC unroll 4
        for (int v = 0; v < V; v++)
            kx[v] = _mm512_loadu_si512(kp[v] + (size_t)i * bs * 2);
#pragma GCC unroll 4
        for (int r = 0; r < R; r++) {
            __m512i qb = _mm512_set1_epi32((int)qp[r * QP + i]);
#pragma GCC unroll 4
            for (int v = 0; v < V; v++)
                acc[r][v] = _mm512_dpbf16_ps(acc[r][v], (__m512bh)qb, (__m512bh)kx[v]);
        }
    }
    const __m512 sc = _mm512_set1_ps(scale);
#pragma GCC unroll 4
    for (int r = 0; r < R; r++)
#pragma GCC unroll 4
        for (int v = 0; v < V; v++)
            _mm512_storeu_ps(s + (size_t)r * lds + j0 + 16 * v, _mm512_mul_ps(acc[r][v], sc));
}

INLINE void qk_rows(const float *q, int ldq, const void *const *k, int bs, int nk, int hd,
                    float scale, float *s, int lds, int R) {
    uint32_t qp[4 * QP + 16];
#pragma GCC unroll 4
    for (int r = 0; r < R; r++)
        to_bf16(q + (size_t)r * ldq, hd, (uint16_t *)(qp + r * QP));
    const int nv = (nk + 15) / 16;
    int v = 0;
    for (; v + 4 <= nv; v += 4)
        qk_tile(qp, k, bs, 16 * v, hd, scale, s, lds, R, 4);
    switch (nv - v) {
    case 3:
        qk_tile(qp, k, bs, 16 * v, hd, scale, s, lds, R, 3);
        break;
    case 2:
        qk_tile(qp, k, bs, 16 * v, hd, scale, s, lds, R, 2);
        break;
    case 1:
        qk_tile(qp, k, bs, 16 * v, hd, scale, s, lds, R, 1);
        break;
    default:
        break;
    }
}

void pg_avx512bf16_attn_qk_bf16kv(const float *q, int ldq, int nr, const void *const *tiles, int bs,
                                  int nk, int hd, float scale, float *s, int lds) {
    const void *const *k = tiles;
    int r = 0;
    for (; r + 4 <= nr; r += 4)
        qk_rows(q + (size_t)r * ldq, ldq, k, bs, nk, hd, scale, s + (size_t)r * lds, lds, 4);
    for (; r < nr; r++)
        qk_rows(q + (size_t)r * ldq, ldq, k, bs, nk, hd, scale, s + (size_t)r * lds, lds, 1);
}

/* ---- PV ------------------------------------------------------------------------------- */

INLINE void pv_tile(const uint32_t *pp, const void *const *v, int bs, int nk, int hd, int c0,
                    float *acc, int ldacc, int R, int C) {
    __m512 a[4][4];
    __mmask16 mk[4] = {0};
#pragma GCC unroll 4
    for (int c = 0; c < C; c++)
        mk[c] = tail_mask(hd - c0 - 16 * c);
#pragma GCC unroll 4
    for (int r = 0; r < R; r++)
#pragma GCC unroll 4
        for (int c = 0; c < C; c++)
            a[r][c] = _mm512_maskz_loadu_ps(mk[c], acc + (size_t)r * ldacc + c0 + 16 * c);
    const int np = (nk + 1) / 2;
    const uint16_t *vb = v[0];
    for (int u = 0, ut = 0, t = 0; u < np; u++, ut++) {
        if (2 * ut == bs) /* next block of the super-block (bs even) */
            ut = 0, vb = v[++t];
        __m512i vx[4];
#pragma GCC unroll 4
        for (int c = 0; c < C; c++) {
            vx[c] = _mm512_maskz_loadu_epi32(mk[c], vb + ((size_t)ut * hd + c0 + 16 * c) * 2);
            if (2 * u + 1 == nk) /* odd tail: drop token nk (not part of the context) */
                vx[c] = _mm512_and_si512(vx[c], _mm512_set1_epi32(0xffff));
        }
#pragma GCC unroll 4
        for (int r = 0; r < R; r++) {
            __m512i pb = _mm512_set1_epi32((int)pp[r * PP + u]);
#pragma GCC unroll 4
            for (int c = 0; c < C; c++)
                a[r][c] = _mm512_dpbf16_ps(a[r][c], (__m512bh)pb, (__m512bh)vx[c]);
        }
    }
#pragma GCC unroll 4
    for (int r = 0; r < R; r++)
#pragma GCC unroll 4
        for (int c = 0; c < C; c++)
            _mm512_mask_storeu_ps(acc + (size_t)r * ldacc + c0 + 16 * c, mk[c], a[r][c]);
}

INLINE void pv_rows(const float *p, int ldp, const void *const *v, int bs, int nk, int hd,
                    float *acc, int ldacc, int R) {
    uint32_t pp[4 * PP];
#pragma GCC unroll 4
    for (int r = 0; r < R; r++)
        to_bf16(p + (size_t)r * ldp, nk, (uint16_t *)(pp + r * PP));
    const int nc = (hd + 15) / 16;
    int c = 0;
    for (; c + 4 <= nc; c += 4)
        pv_tile(pp, v, bs, nk, hd, 16 * c, acc, ldacc, R, 4);
    switch (nc - c) {
    case 3:
        pv_tile(pp, v, bs, nk, hd, 16 * c, acc, ldacc, R, 3);
        break;
    case 2:
        pv_tile(pp, v, bs, nk, hd, 16 * c, acc, ldacc, R, 2);
        break;
    case 1:
        pv_tile(pp, v, bs, nk, hd, 16 * c, acc, ldacc, R, 1);
        break;
    default:
        break;
    }
}

void pg_avx512bf16_attn_pv_bf16kv(const float *p, int ldp, int nr, const void *const *tiles, int bs,
                                  int nk, int hd, float *acc, int ldacc) {
    const void *const *v = tiles;
    int r = 0;
    for (; r + 4 <= nr; r += 4)
        pv_rows(p + (size_t)r * ldp, ldp, v, bs, nk, hd, acc + (size_t)r * ldacc, ldacc, 4);
    for (; r < nr; r++)
        pv_rows(p + (size_t)r * ldp, ldp, v, bs, nk, hd, acc + (size_t)r * ldacc, ldacc, 1);
}
