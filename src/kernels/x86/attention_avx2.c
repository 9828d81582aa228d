/* AVX2 + FMA paged-attention micro-kernels and vector exp: the scheme of
 * attention_avx512.c on 8-lane vectors with 16 registers, so the register
 * blocks are 4 rows x 2 vectors (16 tokens in QK, 16 columns in PV). BF16
 * K/V are widened exactly (shift / mask of each 32-bit lane). */
#include <immintrin.h>
#include <math.h>
#include <stdint.h>

#include "kernels/x86/vexp_avx2.h"
#include "kernels/x86/x86.h"

#define INLINE static inline __attribute__((always_inline))
/* The register-block loops (R, V, C <= 4, constants after inlining) carry
 * "#pragma GCC unroll 4": -O2 alone keeps the accumulator arrays in memory. */

/* Lanes i < n set (n clamped to [0, 8]). */
static inline __m256i tail_mask(int n) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

void pg_avx2_vexp_f32(const float *x, float *y, size_t n) {
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(y + i, pg_exp_avx2(_mm256_loadu_ps(x + i)));
    if (i < n) {
        __m256i m = tail_mask((int)(n - i));
        _mm256_maskstore_ps(y + i, m, pg_exp_avx2(_mm256_maskload_ps(x + i, m)));
    }
}

/* ---- QK ---------------------------------------------------------------------------- */

INLINE void qk_tile(const float *q, int ldq, const void *const *tiles, int bs, int j0, int hd,
                    float scale, float *s, int lds, int R, int V, int bf16) {
    __m256 acc[4][2];
#pragma GCC unroll 4
    for (int r = 0; r < R; r++)
#pragma GCC unroll 4
        for (int v = 0; v < V; v++)
            acc[r][v] = _mm256_setzero_ps();
    if (!bf16) {
        const float *kp[4];
#pragma GCC unroll 4
        for (int v = 0; v < V; v++) {
            const int j = j0 + 8 * v; /* a vector never crosses a block: 8 | bs */
            kp[v] = (const float *)tiles[j / bs] + j % bs;
        }
        for (int d = 0; d < hd; d++) {
            __m256 kv[2];
#pragma GCC unroll 4
            for (int v = 0; v < V; v++)
                kv[v] = _mm256_loadu_ps(kp[v] + (size_t)d * bs);
#pragma GCC unroll 4
            for (int r = 0; r < R; r++) {
                __m256 qb = _mm256_broadcast_ss(q + (size_t)r * ldq + d);
#pragma GCC unroll 4
                for (int v = 0; v < V; v++)
                    acc[r][v] = _mm256_fmadd_ps(qb, kv[v], acc[r][v]);
            }
        }
    } else {
        const uint16_t *kp[4];
#pragma GCC unroll 4
        for (int v = 0; v < V; v++) {
            const int j = j0 + 8 * v;
            kp[v] = (const uint16_t *)tiles[j / bs] + 2 * (size_t)(j % bs);
        }
        const __m256i hi_mask = _mm256_set1_epi32((int)0xffff0000u);
        for (int i = 0; i < hd / 2; i++) {
            __m256 klo[2], khi[2];
#pragma GCC unroll 4
            for (int v = 0; v < V; v++) {
                __m256i x = _mm256_loadu_si256((const __m256i *)(kp[v] + (size_t)i * bs * 2));
                klo[v] = _mm256_castsi256_ps(_mm256_slli_epi32(x, 16));
                khi[v] = _mm256_castsi256_ps(_mm256_and_si256(x, hi_mask));
            }
#pragma GCC unroll 4
            for (int r = 0; r < R; r++) {
                __m256 q0 = _mm256_broadcast_ss(q + (size_t)r * ldq + 2 * i);
                __m256 q1 = _mm256_broadcast_ss(q + (size_t)r * ldq + 2 * i + 1);
#pragma GCC unroll 4
                for (int v = 0; v < V; v++) {
                    acc[r][v] = _mm256_fmadd_ps(q0, klo[v], acc[r][v]);
                    acc[r][v] = _mm256_fmadd_ps(q1, khi[v], acc[r][v]);
                }
            }
        }
    }
    const __m256 sc = _mm256_set1_ps(scale);
#pragma GCC unroll 4
    for (int r = 0; r < R; r++)
#pragma GCC unroll 4
        for (int v = 0; v < V; v++)
            _mm256_storeu_ps(s + (size_t)r * lds + j0 + 8 * v, _mm256_mul_ps(acc[r][v], sc));
}

INLINE void qk_rows(const float *q, int ldq, const void *const *tiles, int bs, int nk, int hd,
                    float scale, float *s, int lds, int R, int bf16) {
    const int nv = (nk + 7) / 8;
    int v = 0;
    for (; v + 2 <= nv; v += 2)
        qk_tile(q, ldq, tiles, bs, 8 * v, hd, scale, s, lds, R, 2, bf16);
    if (v < nv) qk_tile(q, ldq, tiles, bs, 8 * v, hd, scale, s, lds, R, 1, bf16);
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

void pg_avx2_attn_qk_f32kv(const float *q, int ldq, int nr, const void *const *tiles, int bs,
                           int nk, int hd, float scale, float *s, int lds) {
    qk_any(q, ldq, nr, tiles, bs, nk, hd, scale, s, lds, 0);
}

void pg_avx2_attn_qk_bf16kv(const float *q, int ldq, int nr, const void *const *tiles, int bs,
                            int nk, int hd, float scale, float *s, int lds) {
    qk_any(q, ldq, nr, tiles, bs, nk, hd, scale, s, lds, 1);
}

/* ---- softmax step ----------------------------------------------------------------------- */

static inline float hmax(__m256 v) {
    __m128 x = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    x = _mm_max_ps(x, _mm_movehl_ps(x, x));
    x = _mm_max_ss(x, _mm_shuffle_ps(x, x, 1));
    return _mm_cvtss_f32(x);
}

static inline float hsum(__m256 v) {
    __m128 x = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    x = _mm_add_ps(x, _mm_movehl_ps(x, x));
    x = _mm_add_ss(x, _mm_shuffle_ps(x, x, 1));
    return _mm_cvtss_f32(x);
}

void pg_avx2_attn_softmax(float *s, int lds, int nr, int nk, float *m, float *l, float *acc,
                          int ldacc, int hd) {
    const __m256 ninf = _mm256_set1_ps(-INFINITY);
    for (int r = 0; r < nr; r++) {
        float *sr = s + (size_t)r * lds;
        __m256 bm = ninf;
        for (int j = 0; j < nk; j += 8) {
            __m256i mk = tail_mask(nk - j);
            __m256 x =
                _mm256_blendv_ps(ninf, _mm256_maskload_ps(sr + j, mk), _mm256_castsi256_ps(mk));
            bm = _mm256_max_ps(bm, x);
        }
        float bmax = hmax(bm);
        float mn = bmax > m[r] ? bmax : m[r];
        if (mn == -INFINITY) {
            for (int j = 0; j < nk; j += 8)
                _mm256_maskstore_ps(sr + j, tail_mask(nk - j), _mm256_setzero_ps());
            continue;
        }
        const __m256 mv = _mm256_set1_ps(mn);
        __m256 sum = _mm256_setzero_ps();
        for (int j = 0; j < nk; j += 8) {
            __m256i mk = tail_mask(nk - j);
            __m256 x =
                _mm256_blendv_ps(ninf, _mm256_maskload_ps(sr + j, mk), _mm256_castsi256_ps(mk));
            __m256 e = pg_exp_avx2(_mm256_sub_ps(x, mv));
            _mm256_maskstore_ps(sr + j, mk, e);
            sum = _mm256_add_ps(sum, e);
        }
        if (mn != m[r]) {
            float alpha = expf(m[r] - mn);
            const __m256 av = _mm256_set1_ps(alpha);
            float *ar = acc + (size_t)r * ldacc;
            l[r] *= alpha;
            for (int d = 0; d < hd; d += 8) {
                __m256i mk = tail_mask(hd - d);
                _mm256_maskstore_ps(ar + d, mk, _mm256_mul_ps(_mm256_maskload_ps(ar + d, mk), av));
            }
            m[r] = mn;
        }
        l[r] += hsum(sum);
    }
}

/* ---- PV --------------------------------------------------------------------------------- */

INLINE void pv_tile(const float *p, int ldp, const void *const *tiles, int bs, int nk, int hd,
                    int c0, float *acc, int ldacc, int R, int C, int bf16) {
    __m256 a[4][2];
    __m256i mk[2];
#pragma GCC unroll 4
    for (int c = 0; c < C; c++)
        mk[c] = tail_mask(hd - c0 - 8 * c);
#pragma GCC unroll 4
    for (int r = 0; r < R; r++)
#pragma GCC unroll 4
        for (int c = 0; c < C; c++)
            a[r][c] = _mm256_maskload_ps(acc + (size_t)r * ldacc + c0 + 8 * c, mk[c]);
    if (!bf16) {
        const float *v = (const float *)tiles[0] + c0;
        for (int j = 0, jt = 0, t = 0; j < nk; j++, jt++) {
            if (jt == bs) /* next block of the super-block */
                jt = 0, v = (const float *)tiles[++t] + c0;
            __m256 vv[2];
#pragma GCC unroll 4
            for (int c = 0; c < C; c++)
                vv[c] = _mm256_maskload_ps(v + (size_t)jt * hd + 8 * c, mk[c]);
#pragma GCC unroll 4
            for (int r = 0; r < R; r++) {
                __m256 pb = _mm256_broadcast_ss(p + (size_t)r * ldp + j);
#pragma GCC unroll 4
                for (int c = 0; c < C; c++)
                    a[r][c] = _mm256_fmadd_ps(pb, vv[c], a[r][c]);
            }
        }
    } else {
        const uint16_t *v = (const uint16_t *)tiles[0] + 2 * (size_t)c0;
        const __m256i hi_mask = _mm256_set1_epi32((int)0xffff0000u);
        for (int j = 0, jt = 0, t = 0; j < nk; j += 2, jt += 2) {
            if (jt == bs) /* next block (bs is even: pairs never straddle) */
                jt = 0, v = (const uint16_t *)tiles[++t] + 2 * (size_t)c0;
            __m256 vlo[2], vhi[2];
#pragma GCC unroll 4
            for (int c = 0; c < C; c++) {
                __m256i x = _mm256_maskload_epi32(
                    (const int *)(v + ((size_t)(jt / 2) * hd + 8 * c) * 2), mk[c]);
                vlo[c] = _mm256_castsi256_ps(_mm256_slli_epi32(x, 16));
                vhi[c] = _mm256_castsi256_ps(_mm256_and_si256(x, hi_mask));
            }
#pragma GCC unroll 4
            for (int r = 0; r < R; r++) {
                __m256 p0 = _mm256_broadcast_ss(p + (size_t)r * ldp + j);
#pragma GCC unroll 4
                for (int c = 0; c < C; c++)
                    a[r][c] = _mm256_fmadd_ps(p0, vlo[c], a[r][c]);
                if (j + 1 < nk) {
                    __m256 p1 = _mm256_broadcast_ss(p + (size_t)r * ldp + j + 1);
#pragma GCC unroll 4
                    for (int c = 0; c < C; c++)
                        a[r][c] = _mm256_fmadd_ps(p1, vhi[c], a[r][c]);
                }
            }
        }
    }
#pragma GCC unroll 4
    for (int r = 0; r < R; r++)
#pragma GCC unroll 4
        for (int c = 0; c < C; c++)
            _mm256_maskstore_ps(acc + (size_t)r * ldacc + c0 + 8 * c, mk[c], a[r][c]);
}

INLINE void pv_rows(const float *p, int ldp, const void *const *tiles, int bs, int nk, int hd,
                    float *acc, int ldacc, int R, int bf16) {
    const int nc = (hd + 7) / 8;
    int c = 0;
    for (; c + 2 <= nc; c += 2)
        pv_tile(p, ldp, tiles, bs, nk, hd, 8 * c, acc, ldacc, R, 2, bf16);
    if (c < nc) pv_tile(p, ldp, tiles, bs, nk, hd, 8 * c, acc, ldacc, R, 1, bf16);
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

void pg_avx2_attn_pv_f32kv(const float *p, int ldp, int nr, const void *const *tiles, int bs,
                           int nk, int hd, float *acc, int ldacc) {
    pv_any(p, ldp, nr, tiles, bs, nk, hd, acc, ldacc, 0);
}

void pg_avx2_attn_pv_bf16kv(const float *p, int ldp, int nr, const void *const *tiles, int bs,
                            int nk, int hd, float *acc, int ldacc) {
    pv_any(p, ldp, nr, tiles, bs, nk, hd, acc, ldacc, 1);
}
