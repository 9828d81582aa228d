/* Armv8.6 BF16 paged-attention micro-kernels for a BF16 KV cache: QK and PV
 * with BFDOT (Arm ARM, "BFDOT (vector)": per 32-bit lane
 * r += a[2i]*b[2i] + a[2i+1]*b[2i+1]).
 *
 * QK: the K tile's 32-bit lanes are (K[t][2i], K[t][2i+1]), so one BFDOT
 * does 4 tokens x 2 dims against a q pair (q rounded to BF16, nearest even)
 * duplicated in every lane; blocks of 4 rows x 4 vectors (16 tokens).
 * PV: the V tile's lanes are (V[2u][d], V[2u+1][d]); the probability pair
 * (p[2u], p[2u+1]) is rounded to BF16 and duplicated; 4 rows x 16 columns,
 * the 2-column tail of head_dim % 4 == 2 with the 64-bit BFDOT. BFMMLA
 * (2x4 by 4x2 blocks) would need a K layout grouped by 4 dims; BFDOT uses
 * the layout the x86 VDPBF16PS kernel shares. */
#include <arm_neon.h>
#include <stdint.h>

#include "base/dtype.h"
#include "kernels/arm/arm.h"
#include "kernels/attention.h"

#define INLINE static inline __attribute__((always_inline))
/* The register-block loops (R, V, C <= 4, constants after inlining) carry
 * "#pragma GCC unroll 4": -O2 alone keeps the accumulator arrays in memory. */

enum { QP = PG_KV_MAX_HEAD_DIM / 2, PP = PG_KV_MAX_BLOCK_SIZE / 2 };

/* Pairs (x[2i], x[2i+1]) as BF16 bits in one uint32 each; x[n] taken as 0. */
static void to_pairs(const float *x, int n, uint32_t *out) {
    for (int i = 0; 2 * i < n; i++) {
        uint32_t lo = pg_f32_to_bf16(x[2 * i]);
        uint32_t hi = 2 * i + 1 < n ? pg_f32_to_bf16(x[2 * i + 1]) : 0;
        out[i] = lo | hi << 16;
    }
}

static inline bfloat16x8_t dup_pair(uint32_t p) {
    return vreinterpretq_bf16_u32(vdupq_n_u32(p));
}

/* ---- QK --------------------------------------------------------------------------------- */

INLINE void qk_tile(const uint32_t *qp, const void *const *k, int bs, int j0, int hd, float scale,
                    float *s, int lds, int R, int V) {
    float32x4_t acc[4][4];
#pragma GCC unroll 4
    for (int r = 0; r < R; r++)
#pragma GCC unroll 4
        for (int v = 0; v < V; v++)
            acc[r][v] = vdupq_n_f32(0);
    const uint16_t *kp[4];
#pragma GCC unroll 4
    for (int v = 0; v < V; v++) {
        const int j = j0 + 4 * v; /* a vector never crosses a block: 4 | bs */
        kp[v] = (const uint16_t *)k[j / bs] + 2 * (size_t)(j % bs);
    }
    for (int i = 0; i < hd / 2; i++) {
        bfloat16x8_t kx[4];
#pragma GCC unroll 4
        for (int v = 0; v < V; v++)
            kx[v] = vreinterpretq_bf16_u16(vld1q_u16(kp[v] + (size_t)i * bs * 2));
#pragma GCC unroll 4
        for (int r = 0; r < R; r++) {
            bfloat16x8_t qb = dup_pair(qp[r * QP + i]);
#pragma GCC unroll 4
            for (int v = 0; v < V; v++)
                acc[r][v] = vbfdotq_f32(acc[r][v], kx[v], qb);
        }
    }
#pragma GCC unroll 4
    for (int r = 0; r < R; r++)
#pragma GCC unroll 4
        for (int v = 0; v < V; v++)
            vst1q_f32(s + (size_t)r * lds + j0 + 4 * v, vmulq_n_f32(acc[r][v], scale));
}

INLINE void qk_rows(const float *q, int ldq, const void *const *k, int bs, int nk, int hd,
                    float scale, float *s, int lds, int R) {
    uint32_t qp[4 * QP];
#pragma GCC unroll 4
    for (int r = 0; r < R; r++)
        to_pairs(q + (size_t)r * ldq, hd, qp + r * QP);
    const int nv = (nk + 3) / 4;
    int v = 0;
    for (; v + 4 <= nv; v += 4)
        qk_tile(qp, k, bs, 4 * v, hd, scale, s, lds, R, 4);
    switch (nv - v) {
    case 3:
        qk_tile(qp, k, bs, 4 * v, hd, scale, s, lds, R, 3);
        break;
    case 2:
        qk_tile(qp, k, bs, 4 * v, hd, scale, s, lds, R, 2);
        break;
    case 1:
        qk_tile(qp, k, bs, 4 * v, hd, scale, s, lds, R, 1);
        break;
    default:
        break;
    }
}

void pg_neon_bf16_attn_qk_bf16kv(const float *q, int ldq, int nr, const void *const *tiles, int bs,
                                 int nk, int hd, float scale, float *s, int lds) {
    const void *const *k = tiles;
    int r = 0;
    for (; r + 4 <= nr; r += 4)
        qk_rows(q + (size_t)r * ldq, ldq, k, bs, nk, hd, scale, s + (size_t)r * lds, lds, 4);
    for (; r < nr; r++)
        qk_rows(q + (size_t)r * ldq, ldq, k, bs, nk, hd, scale, s + (size_t)r * lds, lds, 1);
}

/* ---- PV --------------------------------------------------------------------------------- */

INLINE void pv_tile(const uint32_t *pp, const void *const *v, int bs, int nk, int hd, int c0,
                    float *acc, int ldacc, int R, int C) {
    float32x4_t a[4][4];
#pragma GCC unroll 4
    for (int r = 0; r < R; r++)
#pragma GCC unroll 4
        for (int c = 0; c < C; c++)
            a[r][c] = vld1q_f32(acc + (size_t)r * ldacc + c0 + 4 * c);
    const int np = (nk + 1) / 2;
    const uint16_t *vb = v[0];
    for (int u = 0, ut = 0, t = 0; u < np; u++, ut++) {
        if (2 * ut == bs) /* next block of the super-block (bs even) */
            ut = 0, vb = v[++t];
        bfloat16x8_t vx[4];
#pragma GCC unroll 4
        for (int c = 0; c < C; c++) {
            uint32x4_t x = vld1q_u32((const uint32_t *)(vb + ((size_t)ut * hd + c0 + 4 * c) * 2));
            if (2 * u + 1 == nk) x = vandq_u32(x, vdupq_n_u32(0xffff)); /* token nk: not context */
            vx[c] = vreinterpretq_bf16_u32(x);
        }
#pragma GCC unroll 4
        for (int r = 0; r < R; r++) {
            bfloat16x8_t pb = dup_pair(pp[r * PP + u]);
#pragma GCC unroll 4
            for (int c = 0; c < C; c++)
                a[r][c] = vbfdotq_f32(a[r][c], vx[c], pb);
        }
    }
#pragma GCC unroll 4
    for (int r = 0; r < R; r++)
#pragma GCC unroll 4
        for (int c = 0; c < C; c++)
            vst1q_f32(acc + (size_t)r * ldacc + c0 + 4 * c, a[r][c]);
}

/* The last 2 columns (head_dim % 4 == 2) with the 64-bit BFDOT. */
static void pv_tail2(const uint32_t *pp, const void *const *v, int bs, int nk, int hd, int c0,
                     float *acc, int ldacc, int R) {
#pragma GCC unroll 4
    for (int r = 0; r < R; r++) {
        float32x2_t a = vld1_f32(acc + (size_t)r * ldacc + c0);
        const uint16_t *vb = v[0];
        for (int u = 0, ut = 0, t = 0; u < (nk + 1) / 2; u++, ut++) {
            if (2 * ut == bs) ut = 0, vb = v[++t];
            uint32x2_t x = vld1_u32((const uint32_t *)(vb + ((size_t)ut * hd + c0) * 2));
            if (2 * u + 1 == nk) x = vand_u32(x, vdup_n_u32(0xffff));
            a = vbfdot_f32(a, vreinterpret_bf16_u32(x),
                           vreinterpret_bf16_u32(vdup_n_u32(pp[r * PP + u])));
        }
        vst1_f32(acc + (size_t)r * ldacc + c0, a);
    }
}

INLINE void pv_rows(const float *p, int ldp, const void *const *v, int bs, int nk, int hd,
                    float *acc, int ldacc, int R) {
    uint32_t pp[4 * PP];
#pragma GCC unroll 4
    for (int r = 0; r < R; r++)
        to_pairs(p + (size_t)r * ldp, nk, pp + r * PP);
    const int nc = hd / 4;
    int c = 0;
    for (; c + 4 <= nc; c += 4)
        pv_tile(pp, v, bs, nk, hd, 4 * c, acc, ldacc, R, 4);
    switch (nc - c) {
    case 3:
        pv_tile(pp, v, bs, nk, hd, 4 * c, acc, ldacc, R, 3);
        break;
    case 2:
        pv_tile(pp, v, bs, nk, hd, 4 * c, acc, ldacc, R, 2);
        break;
    case 1:
        pv_tile(pp, v, bs, nk, hd, 4 * c, acc, ldacc, R, 1);
        break;
    default:
        break;
    }
    if (4 * nc < hd) pv_tail2(pp, v, bs, nk, hd, 4 * nc, acc, ldacc, R);
}

void pg_neon_bf16_attn_pv_bf16kv(const float *p, int ldp, int nr, const void *const *tiles, int bs,
                                 int nk, int hd, float *acc, int ldacc) {
    const void *const *v = tiles;
    int r = 0;
    for (; r + 4 <= nr; r += 4)
        pv_rows(p + (size_t)r * ldp, ldp, v, bs, nk, hd, acc + (size_t)r * ldacc, ldacc, 4);
    for (; r < nr; r++)
        pv_rows(p + (size_t)r * ldp, ldp, v, bs, nk, hd, acc + (size_t)r * ldacc, ldacc, 1);
}
