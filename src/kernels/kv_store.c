/* KV cache shapes, argument checks, RoPE and the fused RoPE + KV store
 * kernel (see attention.h for the layout). */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "kernels/attention.h"

size_t pg_paged_kv_bytes(pg_dtype dtype, int32_t num_blocks, int32_t num_kv_heads,
                         int32_t block_size, int32_t head_dim) {
    size_t esz = dtype == PG_F32 ? 4 : dtype == PG_BF16 ? 2 : 0;
    if (!esz || num_blocks < 0 || num_kv_heads < 0 || block_size < 0 || head_dim < 0) return 0;
    size_t n = (size_t)num_blocks;
    size_t f[4] = {(size_t)num_kv_heads, (size_t)block_size, (size_t)head_dim, esz};
    for (int i = 0; i < 4; i++) {
        if (f[i] && n > SIZE_MAX / f[i]) return 0;
        n *= f[i];
    }
    return n;
}

pagoda_status pg_paged_kv_check(const pg_paged_kv *kv) {
    if (!kv || !kv->k || !kv->v)
        return pg_error(PAGODA_ERR_INVALID_ARG, "kv cache: missing K/V memory");
    if (kv->dtype != PG_F32 && kv->dtype != PG_BF16)
        return pg_error(PAGODA_ERR_UNSUPPORTED, "kv cache: dtype %s not supported (F32 or BF16)",
                        pg_dtype_name(kv->dtype));
    if (kv->block_size < PG_KV_MIN_BLOCK_SIZE || kv->block_size > PG_KV_MAX_BLOCK_SIZE ||
        kv->block_size % 16)
        return pg_error(PAGODA_ERR_INVALID_ARG,
                        "kv cache: block_size %d is not a multiple of 16 in [%d, %d]",
                        (int)kv->block_size, PG_KV_MIN_BLOCK_SIZE, PG_KV_MAX_BLOCK_SIZE);
    if (kv->head_dim < 2 || kv->head_dim > PG_KV_MAX_HEAD_DIM || kv->head_dim % 2)
        return pg_error(PAGODA_ERR_INVALID_ARG, "kv cache: head_dim %d is not even in [2, %d]",
                        (int)kv->head_dim, PG_KV_MAX_HEAD_DIM);
    if (kv->num_blocks < 1 || kv->num_kv_heads < 1)
        return pg_error(PAGODA_ERR_INVALID_ARG,
                        "kv cache: num_blocks %d, num_kv_heads %d (need >= 1)", (int)kv->num_blocks,
                        (int)kv->num_kv_heads);
    if (!pg_paged_kv_bytes(kv->dtype, kv->num_blocks, kv->num_kv_heads, kv->block_size,
                           kv->head_dim))
        return pg_error(PAGODA_ERR_INVALID_ARG, "kv cache: size overflows");
    return PAGODA_OK;
}

pagoda_status pg_attn_check(const pg_attn_params *p, const pg_attn_batch *b, const pg_paged_kv *kv,
                            size_t q_stride, size_t out_stride) {
    pagoda_status st = pg_paged_kv_check(kv);
    if (st != PAGODA_OK) return st;
    if (!p || !b) return pg_error(PAGODA_ERR_INVALID_ARG, "attention: missing params or batch");
    if (p->n_kv_heads != kv->num_kv_heads || p->head_dim != kv->head_dim)
        return pg_error(PAGODA_ERR_INVALID_ARG,
                        "attention: %d KV heads x head_dim %d, but the cache has %d x %d",
                        (int)p->n_kv_heads, (int)p->head_dim, (int)kv->num_kv_heads,
                        (int)kv->head_dim);
    if (p->n_heads < 1 || p->n_heads % p->n_kv_heads)
        return pg_error(PAGODA_ERR_INVALID_ARG,
                        "attention: n_heads %d is not a positive multiple of n_kv_heads %d",
                        (int)p->n_heads, (int)p->n_kv_heads);
    if (p->non_causal && p->sliding_window)
        return pg_error(PAGODA_ERR_INVALID_ARG,
                        "attention: a sliding window (%d) in non-causal mode",
                        (int)p->sliding_window);
    if (p->sliding_window < 0 || !(p->softcap >= 0) || !isfinite(p->scale))
        return pg_error(PAGODA_ERR_INVALID_ARG,
                        "attention: sliding_window %d, softcap %g, scale %g out of range",
                        (int)p->sliding_window, (double)p->softcap, (double)p->scale);
    size_t row = (size_t)p->n_heads * (size_t)p->head_dim;
    if (q_stride < row || out_stride < row)
        return pg_error(PAGODA_ERR_INVALID_ARG,
                        "attention: q_stride %zu / out_stride %zu below n_heads*head_dim %zu",
                        q_stride, out_stride, row);
    if (b->n_seqs < 0 || (b->n_seqs && (!b->cu_seqlens_q || !b->seq_lens || !b->block_tables)))
        return pg_error(PAGODA_ERR_INVALID_ARG, "attention: batch arrays missing");
    if (b->n_seqs && b->cu_seqlens_q[0] != 0)
        return pg_error(PAGODA_ERR_INVALID_ARG, "attention: cu_seqlens_q[0] = %d, not 0",
                        (int)b->cu_seqlens_q[0]);
    for (int32_t s = 0; s < b->n_seqs; s++) {
        int32_t ql = b->cu_seqlens_q[s + 1] - b->cu_seqlens_q[s], kl = b->seq_lens[s];
        if (ql < 0 || kl < 0 || (!p->non_causal && kl < ql))
            return pg_error(PAGODA_ERR_INVALID_ARG,
                            "attention: request %d has %d query tokens but kv_len %d", (int)s,
                            (int)ql, (int)kl);
        if (kl && !b->block_tables[s])
            return pg_error(PAGODA_ERR_INVALID_ARG, "attention: request %d has no block table",
                            (int)s);
        int32_t nb = (kl + kv->block_size - 1) / kv->block_size;
        int32_t first = 0;
        if (p->sliding_window > 0 && ql > 0) { /* blocks wholly before the window may be null */
            int32_t lo = kl - ql - p->sliding_window + 1;
            first = lo > 0 ? lo / kv->block_size : 0;
        }
        for (int32_t i = first; i < nb; i++)
            if (b->block_tables[s][i] < 0 || b->block_tables[s][i] >= kv->num_blocks)
                return pg_error(PAGODA_ERR_INVALID_ARG,
                                "attention: request %d block %d is id %d, outside [0, %d)", (int)s,
                                (int)i, (int)b->block_tables[s][i], (int)kv->num_blocks);
    }
    if (p->sinks)
        for (int32_t h = 0; h < p->n_heads; h++)
            if (isnan(p->sinks[h]))
                return pg_error(PAGODA_ERR_INVALID_ARG, "attention: sink of head %d is NaN",
                                (int)h);
    return PAGODA_OK;
}

/* ---- RoPE ---------------------------------------------------------------------- */

static pagoda_status rope_check(const pg_rope_spec *rope, int32_t head_dim) {
    if (!rope) return PAGODA_OK;
    if (rope->style != PG_ROPE_INTERLEAVED && rope->style != PG_ROPE_NEOX)
        return pg_error(PAGODA_ERR_INVALID_ARG, "rope: unknown style %d", (int)rope->style);
    if (rope->rotary_dim < 0 || rope->rotary_dim % 2 || rope->rotary_dim > head_dim ||
        (rope->rotary_dim && !rope->inv_freq))
        return pg_error(PAGODA_ERR_INVALID_ARG,
                        "rope: rotary_dim %d must be even, <= head_dim %d, with inv_freq",
                        (int)rope->rotary_dim, (int)head_dim);
    return PAGODA_OK;
}

/* Rotate x with precomputed cos/sin of each pair (half = rotary_dim/2). */
static void rope_rotate(pg_rope_style style, int32_t half, const float *c, const float *s,
                        float *x) {
    if (style == PG_ROPE_INTERLEAVED) {
        for (int32_t i = 0; i < half; i++) {
            float a = x[2 * i], b = x[2 * i + 1];
            x[2 * i] = a * c[i] - b * s[i];
            x[2 * i + 1] = a * s[i] + b * c[i];
        }
    } else {
        for (int32_t i = 0; i < half; i++) {
            float a = x[i], b = x[i + half];
            x[i] = a * c[i] - b * s[i];
            x[i + half] = a * s[i] + b * c[i];
        }
    }
}

static void rope_angles(const pg_rope_spec *rope, int32_t position, float *c, float *s) {
    for (int32_t i = 0; i < rope->rotary_dim / 2; i++) {
        double theta = (double)position * (double)rope->inv_freq[i];
        c[i] = (float)cos(theta);
        s[i] = (float)sin(theta);
    }
}

void pg_rope_apply(const pg_rope_spec *rope, int32_t position, float *x, int32_t head_dim) {
    (void)head_dim;
    if (!rope || rope->rotary_dim == 0) return;
    float c[PG_KV_MAX_HEAD_DIM / 2], s[PG_KV_MAX_HEAD_DIM / 2];
    rope_angles(rope, position, c, s);
    rope_rotate(rope->style, rope->rotary_dim / 2, c, s, x);
}

/* K and V rows of one token and KV head into (block, head) tile offset off:
 * the layouts of pg_paged_kv_k_index / pg_paged_kv_v_index with the tile's
 * base computed once (the stores are the same elements, in a cheaper loop). */
static void store_token(pg_paged_kv *kv, int32_t blk, int32_t h, int32_t off, const float *kr,
                        const float *vr) {
    const size_t hd = (size_t)kv->head_dim, bs = (size_t)kv->block_size;
    const size_t tile = ((size_t)blk * (size_t)kv->num_kv_heads + (size_t)h) * bs * hd;
    if (kv->dtype == PG_F32) {
        float *kc = (float *)kv->k + tile + (size_t)off; /* [hd][bs] */
        for (size_t d = 0; d < hd; d++)
            kc[d * bs] = kr[d];
        memcpy((float *)kv->v + tile + (size_t)off * hd, vr, hd * sizeof(float)); /* [bs][hd] */
        return;
    }
    uint16_t *kc = (uint16_t *)kv->k + tile + (size_t)off * 2; /* [hd/2][bs][2] */
    for (size_t i = 0; i < hd / 2; i++) {
        kc[i * bs * 2] = pg_f32_to_bf16(kr[2 * i]);
        kc[i * bs * 2 + 1] = pg_f32_to_bf16(kr[2 * i + 1]);
    }
    uint16_t *vc = (uint16_t *)kv->v + tile + ((size_t)(off >> 1) * hd) * 2 + (size_t)(off & 1);
    for (size_t d = 0; d < hd; d++) /* [bs/2][hd][2] */
        vc[d * 2] = pg_f32_to_bf16(vr[d]);
}

pagoda_status pg_rope_kv_store(const pg_rope_spec *rope, int32_t n_tokens, const int32_t *positions,
                               const int32_t *slot_mapping, float *q, size_t q_stride,
                               int32_t n_heads, const float *k, size_t k_stride, const float *v,
                               size_t v_stride, pg_paged_kv *kv) {
    pagoda_status st = pg_paged_kv_check(kv);
    if (st != PAGODA_OK) return st;
    const int32_t hd = kv->head_dim, nkv = kv->num_kv_heads, bs = kv->block_size;
    if ((st = rope_check(rope, hd)) != PAGODA_OK) return st;
    if (n_tokens < 0 || n_heads < 0 || (n_tokens && (!positions || !slot_mapping || !k || !v)) ||
        (n_tokens && n_heads && !q))
        return pg_error(PAGODA_ERR_INVALID_ARG, "rope_kv_store: missing arrays for %d tokens",
                        (int)n_tokens);
    if ((n_heads && q_stride < (size_t)n_heads * (size_t)hd) ||
        k_stride < (size_t)nkv * (size_t)hd || v_stride < (size_t)nkv * (size_t)hd)
        return pg_error(PAGODA_ERR_INVALID_ARG,
                        "rope_kv_store: a row stride is below heads*head_dim");
    const int64_t nslots = (int64_t)kv->num_blocks * bs;
    for (int32_t t = 0; t < n_tokens; t++) {
        if (positions[t] < 0)
            return pg_error(PAGODA_ERR_INVALID_ARG, "rope_kv_store: token %d has position %d",
                            (int)t, (int)positions[t]);
        if (slot_mapping[t] >= nslots)
            return pg_error(PAGODA_ERR_INVALID_ARG,
                            "rope_kv_store: token %d slot %d outside the cache's %lld slots",
                            (int)t, (int)slot_mapping[t], (long long)nslots);
    }
    const int32_t half = rope ? rope->rotary_dim / 2 : 0;
    float c[PG_KV_MAX_HEAD_DIM / 2], s[PG_KV_MAX_HEAD_DIM / 2], tmp[PG_KV_MAX_HEAD_DIM];
    for (int32_t t = 0; t < n_tokens; t++) {
        if (half) rope_angles(rope, positions[t], c, s);
        for (int32_t h = 0; h < n_heads && half; h++)
            rope_rotate(rope->style, half, c, s, q + (size_t)t * q_stride + (size_t)h * hd);
        int32_t slot = slot_mapping[t];
        if (slot < 0) continue;
        int32_t blk = slot / bs, off = slot % bs;
        for (int32_t h = 0; h < nkv; h++) {
            const float *kr = k + (size_t)t * k_stride + (size_t)h * hd;
            const float *vr = v + (size_t)t * v_stride + (size_t)h * hd;
            if (half) {
                for (int32_t d = 0; d < hd; d++)
                    tmp[d] = kr[d];
                rope_rotate(rope->style, half, c, s, tmp);
                kr = tmp;
            }
            store_token(kv, blk, h, off, kr, vr);
        }
    }
    return PAGODA_OK;
}
