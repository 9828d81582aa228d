/* NEON (Advanced SIMD) paged-attention micro-kernels and vector exp: the
 * scheme of x86/attention_avx512.c on 4-lane vectors with 32 registers:
 * QK blocks 4 rows x 4 vectors (16 tokens), PV 4 rows x 4 vectors (16
 * columns); every element is one FMA chain over d (QK) or over tokens (PV).
 * Token tails run as whole vectors (the tile holds block_size >= 16 tokens,
 * softmax pads with -inf); column tails (head_dim % 4 == 2) use scalar fmaf,
 * the same fused operation. BF16 K/V are widened exactly (shift / mask). */
#include <arm_neon.h>
#include <math.h>
#include <stdint.h>

#include "base/dtype.h"
#include "kernels/arm/arm.h"
#include "kernels/arm/vexp_neon.h"

#define INLINE static inline __attribute__((always_inline))
/* The register-block loops (R, V, C <= 4, constants after inlining) carry
 * "#pragma GCC unroll 4": -O2 alone keeps the accumulator arrays in memory. */

void pg_neon_vexp_f32(const float *x, float *y, size_t n) {
    size_t i = 0;
    for (; i + 4 <= n; i += 4)
        vst1q_f32(y + i, pg_exp_neon(vld1q_f32(x + i)));
    if (i < n) {
        float buf[4] = {0, 0, 0, 0};
        for (size_t j = i; j < n; j++)
            buf[j - i] = x[j];
        vst1q_f32(buf, pg_exp_neon(vld1q_f32(buf)));
        for (size_t j = i; j < n; j++)
            y[j] = buf[j - i];
    }
}

/* ---- QK ------------------------------------------------------------------------------ */

INLINE void qk_tile(const float *q, int ldq, const void *const *tiles, int bs, int j0, int hd,
                    float scale, float *s, int lds, int R, int V, int bf16) {
    float32x4_t acc[4][4];
#pragma GCC unroll 4
    for (int r = 0; r < R; r++)
#pragma GCC unroll 4
        for (int v = 0; v < V; v++)
            acc[r][v] = vdupq_n_f32(0);
    if (!bf16) {
        const float *kp[4];
#pragma GCC unroll 4
        for (int v = 0; v < V; v++) {
            const int j = j0 + 4 * v; /* a vector never crosses a block: 4 | bs */
            kp[v] = (const float *)tiles[j / bs] + j % bs;
        }
        for (int d = 0; d < hd; d++) {
            float32x4_t kv[4];
#pragma GCC unroll 4
            for (int v = 0; v < V; v++)
                kv[v] = vld1q_f32(kp[v] + (size_t)d * bs);
#pragma GCC unroll 4
            for (int r = 0; r < R; r++) {
                float qd = q[(size_t)r * ldq + d];
#pragma GCC unroll 4
                for (int v = 0; v < V; v++)
                    acc[r][v] = vfmaq_n_f32(acc[r][v], kv[v], qd);
            }
        }
    } else {
        const uint16_t *kp[4];
#pragma GCC unroll 4
        for (int v = 0; v < V; v++) {
            const int j = j0 + 4 * v;
            kp[v] = (const uint16_t *)tiles[j / bs] + 2 * (size_t)(j % bs);
        }
        const uint32x4_t hi_mask = vdupq_n_u32(0xffff0000u);
        for (int i = 0; i < hd / 2; i++) {
            float32x4_t klo[4], khi[4];
#pragma GCC unroll 4
            for (int v = 0; v < V; v++) {
                uint32x4_t x = vld1q_u32((const uint32_t *)(kp[v] + (size_t)i * bs * 2));
                klo[v] = vreinterpretq_f32_u32(vshlq_n_u32(x, 16));
                khi[v] = vreinterpretq_f32_u32(vandq_u32(x, hi_mask));
            }
#pragma GCC unroll 4
            for (int r = 0; r < R; r++) {
                float q0 = q[(size_t)r * ldq + 2 * i], q1 = q[(size_t)r * ldq + 2 * i + 1];
#pragma GCC unroll 4
                for (int v = 0; v < V; v++) {
                    acc[r][v] = vfmaq_n_f32(acc[r][v], klo[v], q0);
                    acc[r][v] = vfmaq_n_f32(acc[r][v], khi[v], q1);
                }
            }
        }
    }
#pragma GCC unroll 4
    for (int r = 0; r < R; r++)
#pragma GCC unroll 4
        for (int v = 0; v < V; v++)
            vst1q_f32(s + (size_t)r * lds + j0 + 4 * v, vmulq_n_f32(acc[r][v], scale));
}

INLINE void qk_rows(const float *q, int ldq, const void *const *tiles, int bs, int nk, int hd,
                    float scale, float *s, int lds, int R, int bf16) {
    const int nv = (nk + 3) / 4;
    int v = 0;
    for (; v + 4 <= nv; v += 4)
        qk_tile(q, ldq, tiles, bs, 4 * v, hd, scale, s, lds, R, 4, bf16);
    switch (nv - v) {
    case 3:
        qk_tile(q, ldq, tiles, bs, 4 * v, hd, scale, s, lds, R, 3, bf16);
        break;
    case 2:
        qk_tile(q, ldq, tiles, bs, 4 * v, hd, scale, s, lds, R, 2, bf16);
        break;
    case 1:
        qk_tile(q, ldq, tiles, bs, 4 * v, hd, scale, s, lds, R, 1, bf16);
        break;
    default:
        break;
    }
}

INLINE void qk_any(const float *q, int ldq, int nr, const void *const *tiles, int bs, int nk,
                   int hd, float scale, float *s, int lds, int bf16) {
    int r = 0;
    for (; r + 4 <= nr; r += 4)
        qk_rows(q + (size_t)r * ldq, ldq, tiles, bs, nk, hd, scale, s + (size_t)r * lds, lds, 4,
                bf16);
    for (; r < nr; r++)
        qk_rows(q + (size_t)r * ldq, ldq, tiles, bs, nk, hd, scale, s + (size_t)r * lds, lds, 1,
                bf16);
}

void pg_neon_attn_qk_f32kv(const float *q, int ldq, int nr, const void *const *tiles, int bs,
                           int nk, int hd, float scale, float *s, int lds) {
    qk_any(q, ldq, nr, tiles, bs, nk, hd, scale, s, lds, 0);
}

void pg_neon_attn_qk_bf16kv(const float *q, int ldq, int nr, const void *const *tiles, int bs,
                            int nk, int hd, float scale, float *s, int lds) {
    qk_any(q, ldq, nr, tiles, bs, nk, hd, scale, s, lds, 1);
}

/* ---- softmax step --------------------------------------------------------------------- */

/* s[j..j+4) with lanes at or past nk replaced by -inf. */
static inline float32x4_t load_pad(const float *s, int j, int nk) {
    static const int32_t idx[4] = {0, 1, 2, 3};
    uint32x4_t valid = vcltq_s32(vld1q_s32(idx), vdupq_n_s32(nk - j));
    return vbslq_f32(valid, vld1q_f32(s + j), vdupq_n_f32(-INFINITY));
}

void pg_neon_attn_softmax(float *s, int lds, int nr, int nk, float *m, float *l, float *acc,
                          int ldacc, int hd) {
    for (int r = 0; r < nr; r++) {
        float *sr = s + (size_t)r * lds;
        float32x4_t bm = vdupq_n_f32(-INFINITY);
        for (int j = 0; j < nk; j += 4)
            bm = vmaxq_f32(bm, load_pad(sr, j, nk));
        float bmax = vmaxvq_f32(bm);
        float mn = bmax > m[r] ? bmax : m[r];
        if (mn == -INFINITY) {
            for (int j = 0; j < nk; j++)
                sr[j] = 0;
            continue;
        }
        const float32x4_t mv = vdupq_n_f32(mn);
        float32x4_t sum = vdupq_n_f32(0);
        for (int j = 0; j < nk; j += 4) {
            float32x4_t e = pg_exp_neon(vsubq_f32(load_pad(sr, j, nk), mv));
            vst1q_f32(sr + j, e); /* lanes past nk: 0, inside the tile's block_size columns */
            sum = vaddq_f32(sum, e);
        }
        if (mn != m[r]) {
            float alpha = expf(m[r] - mn);
            float *ar = acc + (size_t)r * ldacc;
            l[r] *= alpha;
            for (int d = 0; d < hd; d++)
                ar[d] *= alpha;
            m[r] = mn;
        }
        l[r] += vaddvq_f32(sum);
    }
}

/* ---- PV ------------------------------------------------------------------------------- */

/* R rows x C full 4-column vectors from column c0. */
INLINE void pv_tile(const float *p, int ldp, const void *const *tiles, int bs, int nk, int hd,
                    int c0, float *acc, int ldacc, int R, int C, int bf16) {
    float32x4_t a[4][4];
#pragma GCC unroll 4
    for (int r = 0; r < R; r++)
#pragma GCC unroll 4
        for (int c = 0; c < C; c++)
            a[r][c] = vld1q_f32(acc + (size_t)r * ldacc + c0 + 4 * c);
    if (!bf16) {
        const float *v = (const float *)tiles[0] + c0;
        for (int j = 0, jt = 0, t = 0; j < nk; j++, jt++) {
            if (jt == bs) /* next block of the super-block */
                jt = 0, v = (const float *)tiles[++t] + c0;
            float32x4_t vv[4];
#pragma GCC unroll 4
            for (int c = 0; c < C; c++)
                vv[c] = vld1q_f32(v + (size_t)jt * hd + 4 * c);
#pragma GCC unroll 4
            for (int r = 0; r < R; r++) {
                float pj = p[(size_t)r * ldp + j];
#pragma GCC unroll 4
                for (int c = 0; c < C; c++)
                    a[r][c] = vfmaq_n_f32(a[r][c], vv[c], pj);
            }
        }
    } else {
        const uint16_t *v = (const uint16_t *)tiles[0] + 2 * (size_t)c0;
        const uint32x4_t hi_mask = vdupq_n_u32(0xffff0000u);
        for (int j = 0, jt = 0, t = 0; j < nk; j += 2, jt += 2) {
            if (jt == bs) /* next block (bs is even: pairs never straddle) */
                jt = 0, v = (const uint16_t *)tiles[++t] + 2 * (size_t)c0;
            float32x4_t vlo[4], vhi[4];
#pragma GCC unroll 4
            for (int c = 0; c < C; c++) {
                uint32x4_t x =
                    vld1q_u32((const uint32_t *)(v + ((size_t)(jt / 2) * hd + 4 * c) * 2));
                vlo[c] = vreinterpretq_f32_u32(vshlq_n_u32(x, 16));
                vhi[c] = vreinterpretq_f32_u32(vandq_u32(x, hi_mask));
            }
#pragma GCC unroll 4
            for (int r = 0; r < R; r++) {
                float p0 = p[(size_t)r * ldp + j];
#pragma GCC unroll 4
                for (int c = 0; c < C; c++)
                    a[r][c] = vfmaq_n_f32(a[r][c], vlo[c], p0);
                if (j + 1 < nk) {
                    float p1 = p[(size_t)r * ldp + j + 1];
#pragma GCC unroll 4
                    for (int c = 0; c < C; c++)
                        a[r][c] = vfmaq_n_f32(a[r][c], vhi[c], p1);
                }
            }
        }
    }
#pragma GCC unroll 4
    for (int r = 0; r < R; r++)
#pragma GCC unroll 4
        for (int c = 0; c < C; c++)
            vst1q_f32(acc + (size_t)r * ldacc + c0 + 4 * c, a[r][c]);
}

/* Columns [c0, hd) (fewer than 4) of R rows, scalar fmaf. */
static void pv_cols_tail(const float *p, int ldp, int R, const void *const *tiles, int bs, int nk,
                         int hd, int c0, float *acc, int ldacc, int bf16) {
    for (int r = 0; r < R; r++)
        for (int d = c0; d < hd; d++) {
            float a = acc[(size_t)r * ldacc + d];
            for (int j = 0; j < nk; j++) {
                const void *tile = tiles[j / bs];
                int jt = j % bs;
                float vj =
                    bf16 ? pg_bf16_to_f32(
                               ((const uint16_t *)tile)[((size_t)(jt / 2) * hd + d) * 2 + (jt & 1)])
                         : ((const float *)tile)[(size_t)jt * hd + d];
                a = fmaf(p[(size_t)r * ldp + j], vj, a);
            }
            acc[(size_t)r * ldacc + d] = a;
        }
}

INLINE void pv_rows(const float *p, int ldp, const void *const *tiles, int bs, int nk, int hd,
                    float *acc, int ldacc, int R, int bf16) {
    const int nc = hd / 4;
    int c = 0;
    for (; c + 4 <= nc; c += 4)
        pv_tile(p, ldp, tiles, bs, nk, hd, 4 * c, acc, ldacc, R, 4, bf16);
    switch (nc - c) {
    case 3:
        pv_tile(p, ldp, tiles, bs, nk, hd, 4 * c, acc, ldacc, R, 3, bf16);
        break;
    case 2:
        pv_tile(p, ldp, tiles, bs, nk, hd, 4 * c, acc, ldacc, R, 2, bf16);
        break;
    case 1:
        pv_tile(p, ldp, tiles, bs, nk, hd, 4 * c, acc, ldacc, R, 1, bf16);
        break;
    default:
        break;
    }
    if (4 * nc < hd) pv_cols_tail(p, ldp, R, tiles, bs, nk, hd, 4 * nc, acc, ldacc, bf16);
}

INLINE void pv_any(const float *p, int ldp, int nr, const void *const *tiles, int bs, int nk,
                   int hd, float *acc, int ldacc, int bf16) {
    int r = 0;
    for (; r + 4 <= nr; r += 4)
        pv_rows(p + (size_t)r * ldp, ldp, tiles, bs, nk, hd, acc + (size_t)r * ldacc, ldacc, 4,
                bf16);
    for (; r < nr; r++)
        pv_rows(p + (size_t)r * ldp, ldp, tiles, bs, nk, hd, acc + (size_t)r * ldacc, ldacc, 1,
                bf16);
}

void pg_neon_attn_pv_f32kv(const float *p, int ldp, int nr, const void *const *tiles, int bs,
                           int nk, int hd, float *acc, int ldacc) {
    pv_any(p, ldp, nr, tiles, bs, nk, hd, acc, ldacc, 0);
}

void pg_neon_attn_pv_bf16kv(const float *p, int ldp, int nr, const void *const *tiles, int bs,
                            int nk, int hd, float *acc, int ldacc) {
    pv_any(p, ldp, nr, tiles, bs, nk, hd, acc, ldacc, 1);
}
