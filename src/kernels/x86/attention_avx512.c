/* AVX-512 paged-attention micro-kernels (see pg_attn_ukernels in
 * kernels/attention.h) and the vector exp over an array.
 *
 * QK: K tiles are stored transposed ([d][token], BF16: [d/2][token][2]), so
 * one vector holds 16 tokens of one d and QK is an outer-product update:
 * acc[r][tokens] += q[r][d] * K[d][tokens], register-blocked 4 rows x 4
 * vectors (64 tokens); every element is one FMA chain over d = 0..hd-1, so
 * its value does not depend on the blocking. PV: V rows [token][d];
 * acc[r][cols] += p[r][j] * V[j][cols], blocked 4 rows x 64 columns, one FMA
 * chain over j per element. BF16 tiles are widened to f32 with a shift / a
 * mask (the low / high half of each 32-bit lane), so the arithmetic is the
 * F32 path's on the exact BF16 values. */
#include <immintrin.h>
#include <math.h>
#include <stdint.h>

#include "kernels/x86/vexp_avx512.h"
#include "kernels/x86/x86.h"

#define INLINE static inline __attribute__((always_inline))
/* The register-block loops (R, V, C <= 4, constants after inlining) carry
 * "#pragma GCC unroll 4": -O2 alone keeps the accumulator arrays in memory. */

void pg_avx512_vexp_f32(const float *x, float *y, size_t n) {
    size_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm512_storeu_ps(y + i, pg_exp_avx512(_mm512_loadu_ps(x + i)));
    if (i < n) {
        __mmask16 m = (__mmask16)((1u << (n - i)) - 1);
        _mm512_mask_storeu_ps(y + i, m, pg_exp_avx512(_mm512_maskz_loadu_ps(m, x + i)));
    }
}

/* ---- QK --------------------------------------------------------------------------------- */

/* R rows x V vectors of 16 tokens starting at token j0. bf16: K tile is
 * [hd/2][bs][2] BF16, else [hd][bs] f32. */
INLINE void qk_tile(const float *q, int ldq, const void *const *tiles, int bs, int j0, int hd,
                    float scale, float *s, int lds, int R, int V, int bf16) {
    __m512 acc[4][4];
#pragma GCC unroll 4
    for (int r = 0; r < R; r++)
#pragma GCC unroll 4
        for (int v = 0; v < V; v++)
            acc[r][v] = _mm512_setzero_ps();
    if (!bf16) {
        const float *kp[4];
#pragma GCC unroll 4
        for (int v = 0; v < V; v++) {
            const int j = j0 + 16 * v; /* a vector never crosses a block: 16 | bs */
            kp[v] = (const float *)tiles[j / bs] + j % bs;
        }
        for (int d = 0; d < hd; d++) {
            __m512 kv[4];
#pragma GCC unroll 4
            for (int v = 0; v < V; v++)
                kv[v] = _mm512_loadu_ps(kp[v] + (size_t)d * bs);
#pragma GCC unroll 4
            for (int r = 0; r < R; r++) {
                __m512 qb = _mm512_set1_ps(q[(size_t)r * ldq + d]);
#pragma GCC unroll 4
                for (int v = 0; v < V; v++)
                    acc[r][v] = _mm512_fmadd_ps(qb, kv[v], acc[r][v]);
            }
        }
    } else {
        const uint16_t *kp[4];
#pragma GCC unroll 4
        for (int v = 0; v < V; v++) {
            const int j = j0 + 16 * v;
            kp[v] = (const uint16_t *)tiles[j / bs] + 2 * (size_t)(j % bs);
        }
        const __m512i hi_mask = _mm512_set1_epi32((int)0xffff0000u);
        for (int i = 0; i < hd / 2; i++) {
            __m512 klo[4], khi[4];
#pragma GCC unroll 4
            for (int v = 0; v < V; v++) {
                __m512i x = _mm512_loadu_si512(kp[v] + (size_t)i * bs * 2);
                klo[v] = _mm512_castsi512_ps(_mm512_slli_epi32(x, 16));
                khi[v] = _mm512_castsi512_ps(_mm512_and_si512(x, hi_mask));
            }
#pragma GCC unroll 4
            for (int r = 0; r < R; r++) {
                __m512 q0 = _mm512_set1_ps(q[(size_t)r * ldq + 2 * i]);
                __m512 q1 = _mm512_set1_ps(q[(size_t)r * ldq + 2 * i + 1]);
#pragma GCC unroll 4
                for (int v = 0; v < V; v++) {
                    acc[r][v] = _mm512_fmadd_ps(q0, klo[v], acc[r][v]);
                    acc[r][v] = _mm512_fmadd_ps(q1, khi[v], acc[r][v]);
                }
            }
        }
    }
    const __m512 sc = _mm512_set1_ps(scale);
#pragma GCC unroll 4
    for (int r = 0; r < R; r++)
#pragma GCC unroll 4
        for (int v = 0; v < V; v++)
            _mm512_storeu_ps(s + (size_t)r * lds + j0 + 16 * v, _mm512_mul_ps(acc[r][v], sc));
}

/* Rows [0, R) (R = 4 or 1) over the nk (rounded up to 16) tokens. */
INLINE void qk_rows(const float *q, int ldq, const void *const *tiles, int bs, int nk, int hd,
                    float scale, float *s, int lds, int R, int bf16) {
    const int nv = (nk + 15) / 16;
    int v = 0;
    for (; v + 4 <= nv; v += 4)
        qk_tile(q, ldq, tiles, bs, 16 * v, hd, scale, s, lds, R, 4, bf16);
    switch (nv - v) {
    case 3:
        qk_tile(q, ldq, tiles, bs, 16 * v, hd, scale, s, lds, R, 3, bf16);
        break;
    case 2:
        qk_tile(q, ldq, tiles, bs, 16 * v, hd, scale, s, lds, R, 2, bf16);
        break;
    case 1:
        qk_tile(q, ldq, tiles, bs, 16 * v, hd, scale, s, lds, R, 1, bf16);
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

void pg_avx512_attn_qk_f32kv(const float *q, int ldq, int nr, const void *const *tiles, int bs,
                             int nk, int hd, float scale, float *s, int lds) {
    qk_any(q, ldq, nr, tiles, bs, nk, hd, scale, s, lds, 0);
}

void pg_avx512_attn_qk_bf16kv(const float *q, int ldq, int nr, const void *const *tiles, int bs,
                              int nk, int hd, float scale, float *s, int lds) {
    qk_any(q, ldq, nr, tiles, bs, nk, hd, scale, s, lds, 1);
}

/* ---- softmax step ------------------------------------------------------------------------- */

static inline __mmask16 tail_mask(int n) {
    return n >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << n) - 1);
}

void pg_avx512_attn_softmax(float *s, int lds, int nr, int nk, float *m, float *l, float *acc,
                            int ldacc, int hd) {
    const __m512 ninf = _mm512_set1_ps(-INFINITY);
    for (int r = 0; r < nr; r++) {
        float *sr = s + (size_t)r * lds;
        __m512 bm = ninf;
        for (int j = 0; j < nk; j += 16)
            bm = _mm512_max_ps(bm, _mm512_mask_loadu_ps(ninf, tail_mask(nk - j), sr + j));
        float bmax = _mm512_reduce_max_ps(bm);
        float mn = bmax > m[r] ? bmax : m[r];
        if (mn == -INFINITY) {
            for (int j = 0; j < nk; j += 16)
                _mm512_mask_storeu_ps(sr + j, tail_mask(nk - j), _mm512_setzero_ps());
            continue;
        }
        const __m512 mv = _mm512_set1_ps(mn);
        __m512 sum = _mm512_setzero_ps();
        for (int j = 0; j < nk; j += 16) {
            __mmask16 mk = tail_mask(nk - j);
            __m512 e = pg_exp_avx512(_mm512_sub_ps(_mm512_mask_loadu_ps(ninf, mk, sr + j), mv));
            _mm512_mask_storeu_ps(sr + j, mk, e);
            sum = _mm512_add_ps(sum, e);
        }
        if (mn != m[r]) {
            float alpha = expf(m[r] - mn);
            const __m512 av = _mm512_set1_ps(alpha);
            float *ar = acc + (size_t)r * ldacc;
            l[r] *= alpha;
            for (int d = 0; d < hd; d += 16) {
                __mmask16 mk = tail_mask(hd - d);
                _mm512_mask_storeu_ps(ar + d, mk,
                                      _mm512_mul_ps(_mm512_maskz_loadu_ps(mk, ar + d), av));
            }
            m[r] = mn;
        }
        l[r] += _mm512_reduce_add_ps(sum);
    }
}

/* ---- PV ----------------------------------------------------------------------------------- */

/* R rows x C column vectors (16 columns each, from column c0; the last may
 * be partial: masks) over tokens j < nk. */
INLINE void pv_tile(const float *p, int ldp, const void *const *tiles, int bs, int nk, int hd,
                    int c0, float *acc, int ldacc, int R, int C, int bf16) {
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
    if (!bf16) {
        const float *v = (const float *)tiles[0] + c0;
        for (int j = 0, jt = 0, t = 0; j < nk; j++, jt++) {
            if (jt == bs) /* next block of the super-block */
                jt = 0, v = (const float *)tiles[++t] + c0;
            __m512 vv[4];
#pragma GCC unroll 4
            for (int c = 0; c < C; c++)
                vv[c] = _mm512_maskz_loadu_ps(mk[c], v + (size_t)jt * hd + 16 * c);
#pragma GCC unroll 4
            for (int r = 0; r < R; r++) {
                __m512 pb = _mm512_set1_ps(p[(size_t)r * ldp + j]);
#pragma GCC unroll 4
                for (int c = 0; c < C; c++)
                    a[r][c] = _mm512_fmadd_ps(pb, vv[c], a[r][c]);
            }
        }
    } else {
        const uint16_t *v = (const uint16_t *)tiles[0] + 2 * (size_t)c0;
        const __m512i hi_mask = _mm512_set1_epi32((int)0xffff0000u);
        for (int j = 0, jt = 0, t = 0; j < nk; j += 2, jt += 2) {
            if (jt == bs) /* next block (bs is even: pairs never straddle) */
                jt = 0, v = (const uint16_t *)tiles[++t] + 2 * (size_t)c0;
            __m512 vlo[4], vhi[4];
#pragma GCC unroll 4
            for (int c = 0; c < C; c++) {
                __m512i x =
                    _mm512_maskz_loadu_epi32(mk[c], v + ((size_t)(jt / 2) * hd + 16 * c) * 2);
                vlo[c] = _mm512_castsi512_ps(_mm512_slli_epi32(x, 16));
                vhi[c] = _mm512_castsi512_ps(_mm512_and_si512(x, hi_mask));
            }
#pragma GCC unroll 4
            for (int r = 0; r < R; r++) {
                __m512 p0 = _mm512_set1_ps(p[(size_t)r * ldp + j]);
#pragma GCC unroll 4
                for (int c = 0; c < C; c++)
                    a[r][c] = _mm512_fmadd_ps(p0, vlo[c], a[r][c]);
                if (j + 1 < nk) {
                    __m512 p1 = _mm512_set1_ps(p[(size_t)r * ldp + j + 1]);
#pragma GCC unroll 4
                    for (int c = 0; c < C; c++)
                        a[r][c] = _mm512_fmadd_ps(p1, vhi[c], a[r][c]);
                }
            }
        }
    }
#pragma GCC unroll 4
    for (int r = 0; r < R; r++)
#pragma GCC unroll 4
        for (int c = 0; c < C; c++)
            _mm512_mask_storeu_ps(acc + (size_t)r * ldacc + c0 + 16 * c, mk[c], a[r][c]);
}

/* Rows [0, R) (R = 4 or 1) over all columns. */
INLINE void pv_rows(const float *p, int ldp, const void *const *tiles, int bs, int nk, int hd,
                    float *acc, int ldacc, int R, int bf16) {
    const int nc = (hd + 15) / 16;
    int c = 0;
    for (; c + 4 <= nc; c += 4)
        pv_tile(p, ldp, tiles, bs, nk, hd, 16 * c, acc, ldacc, R, 4, bf16);
    switch (nc - c) {
    case 3:
        pv_tile(p, ldp, tiles, bs, nk, hd, 16 * c, acc, ldacc, R, 3, bf16);
        break;
    case 2:
        pv_tile(p, ldp, tiles, bs, nk, hd, 16 * c, acc, ldacc, R, 2, bf16);
        break;
    case 1:
        pv_tile(p, ldp, tiles, bs, nk, hd, 16 * c, acc, ldacc, R, 1, bf16);
        break;
    default:
        break;
    }
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

void pg_avx512_attn_pv_f32kv(const float *p, int ldp, int nr, const void *const *tiles, int bs,
                             int nk, int hd, float *acc, int ldacc) {
    pv_any(p, ldp, nr, tiles, bs, nk, hd, acc, ldacc, 0);
}

void pg_avx512_attn_pv_bf16kv(const float *p, int ldp, int nr, const void *const *tiles, int bs,
                              int nk, int hd, float *acc, int ldacc) {
    pv_any(p, ldp, nr, tiles, bs, nk, hd, acc, ldacc, 1);
}
