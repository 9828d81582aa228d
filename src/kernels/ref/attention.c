/* The straightforward attention reference (materialised scores, plain
 * softmax, weighted sum) and the scalar micro-kernels of the fast driver. */
#include <math.h>
#include <stdlib.h>

#include "base/dtype.h"
#include "kernels/attention.h"
#include "kernels/ref/ref.h"

/* K(j, d) / V(j, d) of one tile as f32. */
static inline float tile_k(const void *tile, pg_dtype dt, int bs, int j, int d) {
    if (dt == PG_F32) return ((const float *)tile)[(size_t)d * bs + j];
    return pg_bf16_to_f32(((const uint16_t *)tile)[((size_t)(d >> 1) * bs + j) * 2 + (d & 1)]);
}
static inline float tile_v(const void *tile, pg_dtype dt, int hd, int j, int d) {
    if (dt == PG_F32) return ((const float *)tile)[(size_t)j * hd + d];
    return pg_bf16_to_f32(((const uint16_t *)tile)[((size_t)(j >> 1) * hd + d) * 2 + (j & 1)]);
}

pagoda_status pg_ref_attention(const pg_attn_params *p, const pg_attn_batch *b,
                               const pg_paged_kv *kv, const float *q, size_t q_stride, float *out,
                               size_t out_stride) {
    pagoda_status st = pg_attn_check(p, b, kv, q_stride, out_stride);
    if (st != PAGODA_OK) return st;
    const int hd = p->head_dim, bs = kv->block_size, group = p->n_heads / p->n_kv_heads;
    int32_t max_kv = 0;
    for (int32_t s = 0; s < b->n_seqs; s++)
        if (b->seq_lens[s] > max_kv) max_kv = b->seq_lens[s];
    float *sc = malloc(((size_t)max_kv + 1) * sizeof *sc);
    if (!sc) return pg_error(PAGODA_ERR_NOMEM, "ref attention: %d scores", (int)max_kv);
    const size_t tile_elems = (size_t)bs * hd, esz = kv->dtype == PG_F32 ? 4 : 2;
    for (int32_t s = 0; s < b->n_seqs; s++) {
        const int32_t q0 = b->cu_seqlens_q[s], ql = b->cu_seqlens_q[s + 1] - q0;
        const int32_t kl = b->seq_lens[s];
        for (int32_t i = 0; i < ql; i++) {
            /* causal: keys [lo, pos]; non-causal: all keys [0, kl) */
            const int32_t pos = p->non_causal ? kl - 1 : kl - ql + i;
            const int32_t lo = p->sliding_window > 0 && pos - p->sliding_window + 1 > 0
                                   ? pos - p->sliding_window + 1
                                   : 0;
            for (int32_t h = 0; h < p->n_heads; h++) {
                const int32_t kvh = h / group;
                const float *qr = q + (size_t)(q0 + i) * q_stride + (size_t)h * hd;
                float *o = out + (size_t)(q0 + i) * out_stride + (size_t)h * hd;
                float m = p->sinks ? p->sinks[h] : -INFINITY;
                for (int32_t j = lo; j <= pos; j++) {
                    int32_t blk = b->block_tables[s][j / bs];
                    const char *kt = (const char *)kv->k +
                                     ((size_t)blk * kv->num_kv_heads + kvh) * tile_elems * esz;
                    float dot = 0;
                    for (int d = 0; d < hd; d++)
                        dot += qr[d] * tile_k(kt, kv->dtype, bs, j % bs, d);
                    float x = p->scale * dot;
                    if (p->softcap > 0) x = p->softcap * tanhf(x / p->softcap);
                    sc[j - lo] = x;
                    if (x > m) m = x;
                }
                float l = p->sinks ? expf(p->sinks[h] - m) : 0.0f;
                for (int32_t j = lo; j <= pos; j++) {
                    sc[j - lo] = expf(sc[j - lo] - m);
                    l += sc[j - lo];
                }
                for (int d = 0; d < hd; d++)
                    o[d] = 0;
                for (int32_t j = lo; j <= pos; j++) {
                    int32_t blk = b->block_tables[s][j / bs];
                    const char *vt = (const char *)kv->v +
                                     ((size_t)blk * kv->num_kv_heads + kvh) * tile_elems * esz;
                    for (int d = 0; d < hd; d++)
                        o[d] += sc[j - lo] * tile_v(vt, kv->dtype, hd, j % bs, d);
                }
                for (int d = 0; d < hd; d++) /* no visible key (empty non-causal KV): 0 */
                    o[d] = l > 0 ? o[d] / l : 0.0f;
            }
        }
    }
    free(sc);
    return PAGODA_OK;
}

/* ---- scalar micro-kernels (the "scalar" dispatch level) --------------------------- */

static void qk_any(const float *q, int ldq, int nr, const void *const *tiles, pg_dtype dt, int bs,
                   int nk, int hd, float scale, float *s, int lds) {
    for (int r = 0; r < nr; r++)
        for (int j = 0; j < nk; j++) {
            float acc = 0;
            for (int d = 0; d < hd; d++)
                acc += q[(size_t)r * ldq + d] * tile_k(tiles[j / bs], dt, bs, j % bs, d);
            s[(size_t)r * lds + j] = scale * acc;
        }
}

static void pv_any(const float *p, int ldp, int nr, const void *const *tiles, pg_dtype dt, int bs,
                   int nk, int hd, float *acc, int ldacc) {
    for (int r = 0; r < nr; r++)
        for (int j = 0; j < nk; j++) {
            float pj = p[(size_t)r * ldp + j];
            for (int d = 0; d < hd; d++)
                acc[(size_t)r * ldacc + d] += pj * tile_v(tiles[j / bs], dt, hd, j % bs, d);
        }
}

void pg_ref_attn_qk_f32kv(const float *q, int ldq, int nr, const void *const *tiles, int bs, int nk,
                          int hd, float scale, float *s, int lds) {
    qk_any(q, ldq, nr, tiles, PG_F32, bs, nk, hd, scale, s, lds);
}
void pg_ref_attn_qk_bf16kv(const float *q, int ldq, int nr, const void *const *tiles, int bs,
                           int nk, int hd, float scale, float *s, int lds) {
    qk_any(q, ldq, nr, tiles, PG_BF16, bs, nk, hd, scale, s, lds);
}
void pg_ref_attn_pv_f32kv(const float *p, int ldp, int nr, const void *const *tiles, int bs, int nk,
                          int hd, float *acc, int ldacc) {
    pv_any(p, ldp, nr, tiles, PG_F32, bs, nk, hd, acc, ldacc);
}
void pg_ref_attn_pv_bf16kv(const float *p, int ldp, int nr, const void *const *tiles, int bs,
                           int nk, int hd, float *acc, int ldacc) {
    pv_any(p, ldp, nr, tiles, PG_BF16, bs, nk, hd, acc, ldacc);
}

void pg_ref_attn_softmax(float *s, int lds, int nr, int nk, float *m, float *l, float *acc,
                         int ldacc, int hd) {
    for (int r = 0; r < nr; r++) {
        float *sr = s + (size_t)r * lds;
        float bm = -INFINITY;
        for (int j = 0; j < nk; j++)
            bm = sr[j] > bm ? sr[j] : bm;
        float mn = bm > m[r] ? bm : m[r];
        if (mn == -INFINITY) {
            for (int j = 0; j < nk; j++)
                sr[j] = 0;
            continue;
        }
        float sum = 0;
        for (int j = 0; j < nk; j++) {
            sr[j] = expf(sr[j] - mn);
            sum += sr[j];
        }
        if (mn != m[r]) {
            float alpha = expf(m[r] - mn);
            l[r] *= alpha;
            for (int d = 0; d < hd; d++)
                acc[(size_t)r * ldacc + d] *= alpha;
            m[r] = mn;
        }
        l[r] += sum;
    }
}

void pg_ref_vexp_f32(const float *x, float *y, size_t n) {
    for (size_t i = 0; i < n; i++)
        y[i] = expf(x[i]);
}
