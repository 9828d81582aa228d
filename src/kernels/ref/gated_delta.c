/* Gated DeltaNet references (kernels/gated_delta.h): the scalar
 * micro-kernels (the "scalar" table's gdn set, the spec every SIMD variant
 * reproduces bit for bit), the whole-layer recurrence token by token and the
 * causal conv. Plain loops, single thread. */
#include <math.h>
#include <string.h>

#include "kernels/gated_delta.h"
#include "kernels/ref/ops_ref.h"
#include "kernels/ref/ref.h"

void pg_ref_gdn_recurrent_uk(int n, int dk, int nc, float *S, int64_t lds, const float *q,
                             const float *k, int64_t ldqk, const float *v, int64_t ldv,
                             const float *eg, const float *beta, float *o, int64_t ldo) {
    for (int t = 0; t < n; t++) {
        const float *qt = q + t * ldqk, *kt = k + t * ldqk, *vt = v + t * ldv;
        float *ot = o + t * ldo;
        const float e = eg[t], bt = beta[t];
        for (int j = 0; j < nc; j++) {
            /* kv = (S^T k)[j] on the old state; the decay enters below */
            float kv = 0.0f;
            for (int i = 0; i < dk; i++)
                kv = fmaf(S[i * lds + j], kt[i], kv);
            const float d = fmaf(-kv, e, vt[j]) * bt; /* (v - e kv) beta */
            float acc = 0.0f;
            for (int i = 0; i < dk; i++) {
                const float s = fmaf(kt[i], d, S[i * lds + j] * e); /* e S + k d^T */
                S[i * lds + j] = s;
                acc = fmaf(s, qt[i], acc);
            }
            ot[j] = acc;
        }
    }
}

void pg_ref_gdn_mm_uk(int m, int n, int k, const float *a, int64_t lda, const float *b, int64_t ldb,
                      float *c, int64_t ldc, float cscale) {
    for (int i = 0; i < m; i++)
        for (int j = 0; j < n; j++) {
            float acc = cscale != 0.0f ? cscale * c[i * ldc + j] : 0.0f;
            for (int p = 0; p < k; p++)
                acc = fmaf(a[i * lda + p], b[p * ldb + j], acc);
            c[i * ldc + j] = acc;
        }
}

pagoda_status pg_ref_gdn_forward(const pg_gdn_params *p, const pg_gdn_batch *b, const float *q,
                                 int64_t ldq, const float *k, int64_t ldk, const float *v,
                                 int64_t ldv, const float *g, const float *beta, float *out,
                                 int64_t ldo) {
    pagoda_status st = pg_gdn_check(p, b, ldq, ldk, ldv, ldo);
    if (st != PAGODA_OK) return st;
    const int dk = p->dk, dv = p->dv, nv = p->n_v_heads;
    float qn[PG_GDN_MAX_HEAD_DIM], kn[PG_GDN_MAX_HEAD_DIM];
    for (int32_t s = 0; s < b->n_seqs; s++) {
        const int32_t r0 = b->cu_seqlens[s], len = b->cu_seqlens[s + 1] - r0;
        const int32_t snap = b->snap_len ? b->snap_len[s] : 0;
        for (int32_t h = 0; h < nv; h++) {
            float *S = b->states[s] + (size_t)h * dk * dv;
            const int32_t kh = pg_gdn_k_head(p, h);
            for (int32_t r = 0; r < len; r++) {
                const int64_t row = r0 + r;
                pg_gdn_l2norm(q + row * ldq + (int64_t)kh * dk, dk, p->scale, qn);
                pg_gdn_l2norm(k + row * ldk + (int64_t)kh * dk, dk, 1.0f, kn);
                const float eg = expf(g[row * nv + h]), bt = beta[row * nv + h];
                pg_ref_gdn_recurrent_uk(1, dk, dv, S, dv, qn, kn, 0,
                                        v + row * ldv + (int64_t)h * dv, 0, &eg, &bt,
                                        out + row * ldo + (int64_t)h * dv, 0);
                if (r + 1 == snap)
                    memcpy(b->snap_states[s] + (size_t)h * dk * dv, S,
                           (size_t)dk * dv * sizeof(float));
                if (b->row_snaps && r < b->row_snaps[s])
                    memcpy(b->row_snap_states[s] + (size_t)r * (size_t)b->row_snap_stride +
                               (size_t)h * dk * dv,
                           S, (size_t)dk * dv * sizeof(float));
            }
        }
    }
    return PAGODA_OK;
}

pagoda_status pg_ref_gdn_conv1d(int32_t C, int32_t K, const float *w, const pg_gdn_batch *b,
                                float *const *conv_states, float *const *snap_conv_states,
                                const float *x, int64_t ldx, float *y, int64_t ldy) {
    pagoda_status st = pg_gdn_conv_check(C, K, w, b, conv_states, snap_conv_states, x, ldx, y, ldy);
    if (st != PAGODA_OK) return st;
    const int32_t H = K - 1; /* history rows */
    for (int32_t s = 0; s < b->n_seqs; s++) {
        const int32_t r0 = b->cu_seqlens[s], len = b->cu_seqlens[s + 1] - r0;
        const int32_t snap = b->snap_len ? b->snap_len[s] : 0;
        if (len == 0) continue;
        float *state = conv_states[s];
        for (int32_t c = 0; c < C; c++) {
            float win[PG_GDN_MAX_CONV_KERNEL]; /* x_{t-K+1} .. x_t: history first */
            for (int32_t m = 0; m < H; m++)
                win[m] = state[(size_t)m * C + c];
            for (int32_t t = 0; t < len; t++) {
                win[H] = x[(int64_t)(r0 + t) * ldx + c];
                float acc = 0.0f;
                for (int32_t j = 0; j < K; j++)
                    acc = acc + w[(size_t)c * K + j] * win[j];
                y[(int64_t)(r0 + t) * ldy + c] = pg_silu_f32(acc);
                for (int32_t m = 0; m < H; m++)
                    win[m] = win[m + 1];
                if (t + 1 == snap)
                    for (int32_t m = 0; m < H; m++)
                        snap_conv_states[s][(size_t)m * C + c] = win[m];
                if (b->row_snaps && t < b->row_snaps[s])
                    for (int32_t m = 0; m < H; m++)
                        b->row_snap_conv[s][(size_t)t * (size_t)b->row_snap_stride +
                                            (size_t)m * C + c] = win[m];
            }
            for (int32_t m = 0; m < H; m++)
                state[(size_t)m * C + c] = win[m];
        }
    }
    return PAGODA_OK;
}

void pg_ref_gdn_gated_rmsnorm(int64_t T, int32_t n_heads, int32_t dv, const float *x, int64_t ldx,
                              const float *z, int64_t ldz, const float *w, float eps, float *out,
                              int64_t ldo) {
    for (int64_t t = 0; t < T; t++)
        for (int32_t h = 0; h < n_heads; h++) {
            float *oh = out + t * ldo + (int64_t)h * dv;
            const float *zh = z + t * ldz + (int64_t)h * dv;
            pg_ref_rmsnorm(oh, x + t * ldx + (int64_t)h * dv, w, 1, (size_t)dv, eps);
            for (int32_t i = 0; i < dv; i++)
                oh[i] *= pg_silu_f32(zh[i]);
        }
}
