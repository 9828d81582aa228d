/* The K-quant weight formats of the GEMM driver (gemm_driver.h): GGUF Q2_K,
 * Q3_K, Q4_K, Q5_K and Q6_K rows packed at load into panels of 32 columns, int8
 * activations with one scale per token and super-block of 256 and the
 * activation sums of every 16 k (llama.cpp's block_q8_K: scale, int8 values,
 * bsums), computed in the input stage. Arithmetic and layout: gemm.h
 * "K-quants"; spec pg_ref_kq_gemm (ref/kquant.c); block decoding
 * base/kquant.h. The plan, tile call and epilogues are the int8 formats'
 * (qgemm.c pg_qfmt_*); the microkernels are the table's q2_k .. q6_k
 * entries (dispatch.h). Q2_K (2-bit u) and Q3_K (3-bit u) are widened to
 * the 4-bit lanes of Q4_K: one packed super-block of 32 columns is 5248
 * bytes for Q2_K (5.1 bits per weight against the file's 2.625) and 4736
 * for Q3_K (4.6 against 3.4375), so they read as many bytes per weight as
 * Q4_K, not fewer. IQ4_XS (codebook nibbles, 6-bit scales ls - 32 per 32,
 * F16 d per 256) is the sixth row: u is the nibble, sc = ls - 32, dm = 0,
 * no m; the microkernels map nibbles to codebook values in registers (the
 * table's iq4_xs entry). 4480 bytes per super-block of 32 columns: 4.375
 * bits per weight against the file's 4.25. IQ4_NL (rows with K a multiple
 * of 256) is the seventh: eight blocks of 32 as one super-block, its header
 * the blocks' F16 scales ds[8][32] (no d, dm, sc), 4608 bytes: 4.5 bits per
 * weight, the file's.
 *
 * Packed super-block of one panel (PG_KQ_* in gemm_driver.h), for
 * every ISA:
 *   uint16 d[32], dm[32]                 F16 per column
 *   int8 sc[S][32], then m[S][32]        S = 256 / sub (Q6_K, Q3_K: m = sc, not stored)
 *   nibbles: 64 k-chunks of 4 k, 64 bytes each: byte 4 c + kk holds column c
 *     (low nibble) and column c + 16 (high nibble) at k = 4 chunk + kk
 *   high bits (Q5_K 1, Q6_K 2 per weight): per 4 / hb chunks one 64-byte
 *     plane; byte 4 c + kk, bits hb * v .. hb * v + hb - 1 belong to vector
 *     v = 2 (chunk % (4 / hb)) + half (half 0: columns 0-15, 1: 16-31). */
#include <string.h>

#include "base/alloc.h"
#include "base/kquant.h"
#include "base/log.h"
#include "kernels/gemm.h"
#include "kernels/gemm_driver.h"

const pg_qgemm_ukernel *pg_kq_ukernel(const pg_kernel_table *kt, pg_dtype t) {
    if (!kt) kt = pg_kernels();
    switch (t) {
    case PG_Q2_K:
        return &kt->q2_k;
    case PG_Q3_K:
        return &kt->q3_k;
    case PG_Q4_K:
        return &kt->q4_k;
    case PG_Q5_K:
        return &kt->q5_k;
    case PG_Q6_K:
        return &kt->q6_k;
    case PG_IQ4_XS:
        return &kt->iq4_xs;
    case PG_IQ4_NL:
        return &kt->iq4_nl;
    default:
        return NULL;
    }
}

const pg_gemm_format *pg_kq_format(pg_dtype t) {
    switch (t) {
    case PG_Q2_K:
        return &pg_gemm_format_q2_k;
    case PG_Q3_K:
        return &pg_gemm_format_q3_k;
    case PG_Q4_K:
        return &pg_gemm_format_q4_k;
    case PG_Q5_K:
        return &pg_gemm_format_q5_k;
    case PG_Q6_K:
        return &pg_gemm_format_q6_k;
    case PG_IQ4_XS:
        return &pg_gemm_format_iq4_xs;
    case PG_IQ4_NL:
        return &pg_gemm_format_iq4_nl;
    default:
        return NULL;
    }
}

/* Write the decoded block b as column c of one packed super-block grp (fs:
 * the header is b's per-sub-block F16 scales). */
static void put_block(uint8_t *grp, int bits, int has_min, int fs, int c, const pg_kq_block *b) {
    const int S = PG_QK_K / b->sub, hb = bits - 4;
    if (fs) {
        for (int s = 0; s < S; s++)
            memcpy(grp + 2 * (s * PG_KQ_NR + c), &b->ds[s], 2);
    } else {
        memcpy(grp + 2 * c, &b->d, 2);
        memcpy(grp + PG_KQ_NR * 2 + 2 * c, &b->dm, 2);
        int8_t *sc = (int8_t *)grp + PG_KQ_SC_OFF;
        for (int s = 0; s < S; s++) {
            sc[s * PG_KQ_NR + c] = b->sc[s];
            if (has_min) sc[(S + s) * PG_KQ_NR + c] = b->m[s];
        }
    }
    uint8_t *nib = grp + pg_kq_hdr_bytes(b->sub, has_min, fs), *hi = nib + PG_KQ_NIB_BYTES;
    const int half = c / 16, cc = c % 16;
    for (int k = 0; k < PG_QK_K; k++) {
        const int ch = k / 4, at = cc * 4 + k % 4;
        uint8_t *byte = &nib[ch * 64 + at];
        const int u = b->u[k];
        *byte =
            half ? (uint8_t)((*byte & 0x0F) | (u & 15) << 4) : (uint8_t)((*byte & 0xF0) | (u & 15));
        if (hb) {
            const int per = 4 / hb, v = 2 * (ch % per) + half;
            hi[(ch / per) * 64 + at] |= (uint8_t)((u >> 4) << (hb * v));
        }
    }
}

typedef struct {
    pg_packed_weight *pw;
    const uint8_t *h[2];
    int bad; /* a block whose dm is not an F16 (set by any thread) */
} kq_job;

static void pack_panels(void *ctx, size_t begin, size_t end, int tid) {
    (void)tid;
    kq_job *j = ctx;
    const pg_packed_weight *pw = j->pw;
    const pg_dtype t = (pg_dtype)pw->kq;
    const int64_t nb = pw->kgroups;
    const size_t bb = pg_kq_super_bytes(t);
    pg_kq_block b;
    for (int64_t p = (int64_t)begin; p < (int64_t)end; p++) {
        const int h = pw->swiglu ? (int)(p % 2) : 0;
        const int64_t n0 = (pw->swiglu ? p / 2 : p) * PG_KQ_NR;
        uint8_t *panel = (uint8_t *)pw->data + (size_t)p * pw->panel_bytes;
        for (int64_t n = n0; n < n0 + PG_KQ_NR && n < pw->N; n++)
            for (int64_t g = 0; g < nb; g++) {
                if (pg_kq_decode(t, j->h[h] + (size_t)(n * nb + g) * bb, &b)) j->bad = 1;
                put_block(panel + (size_t)g * pw->gbytes, pw->bits, pg_kq_has_min(t),
                          pg_kq_fscale(t), (int)(n - n0), &b);
            }
    }
}

pagoda_status pg_kq_pack_gguf(pg_dtype t, const void *Wg, const void *Wu, int64_t N, int64_t K,
                              const pg_kernel_table *kt, pg_packed_weight **out) {
    *out = NULL;
    if (K % PG_QK_K)
        return pg_error(PAGODA_ERR_INVALID_ARG,
                        "gemm: pack: %s needs K a multiple of 256, got K=%lld", pg_dtype_name(t),
                        (long long)K);
    const pg_qgemm_ukernel *uk = pg_kq_ukernel(kt, t);
    if (!uk || !uk->run || uk->nr != PG_KQ_NR)
        return pg_error(PAGODA_ERR_INVALID_ARG, "gemm: pack: no %s microkernel", pg_dtype_name(t));
    pg_packed_weight *pw = pg_gemm_weight_new();
    if (!pw) return pg_error(PAGODA_ERR_NOMEM, "gemm: pack: out of memory");
    pw->quk = *uk;
    pw->fmt = pg_kq_format(t);
    pw->kq = (int)t;
    pw->mr = uk->mr;
    pw->nr = PG_KQ_NR;
    pw->ar = 1;
    pw->bits = pg_kq_bits(t);
    pw->act_group = 1;
    pw->swiglu = Wu != NULL;
    pw->N = N;
    pw->K = K;
    pw->group = PG_QK_K;
    pw->gk = PG_QK_K;
    pw->kgroups = K / PG_QK_K;
    const int64_t np = pg_ceil_div64(N, PG_KQ_NR);
    pw->npanels = pw->swiglu ? 2 * np : np;
    pw->hbytes = pg_kq_hdr_bytes(pg_kq_sub(t), pg_kq_has_min(t), pg_kq_fscale(t));
    pw->gbytes = pg_kq_group_bytes(pw->bits, pg_kq_sub(t), pg_kq_has_min(t), pg_kq_fscale(t));
    pw->panel_bytes = (size_t)pw->kgroups * pw->gbytes;
    pw->bytes = (size_t)pw->npanels * pw->panel_bytes;
    pw->data = pg_alloc_huge(pw->bytes); /* zero-filled: missing columns stay 0 */
    if (!pw->data) {
        pg_free(pw);
        return pg_error(PAGODA_ERR_NOMEM, "gemm: pack: cannot allocate %zu bytes", pw->bytes);
    }
    kq_job j = {pw, {Wg, Wu ? Wu : Wg}, 0};
    pg_pool *pool = pg_pool_default();
    if (pool && pg_pool_size(pool) > 1 && N * K >= 65536)
        pg_pool_parallel_for(pool, (size_t)pw->npanels, pw->swiglu ? 2 : 1, pack_panels, &j);
    else
        pack_panels(&j, 0, (size_t)pw->npanels, 0);
    if (j.bad) {
        pg_gemm_free(pw);
        return pg_error(PAGODA_ERR_UNSUPPORTED,
                        "gemm: pack: a %s block's scale %s is beyond the F16 range",
                        pg_dtype_name(t), t == PG_Q3_K ? "4 d" : "32 d");
    }
    *out = pw;
    return PAGODA_OK;
}

/* Input stage: rows [r0, r1) (RMSNorm-ed first into the row buffer when
 * fused) -> int8 per super-block with one scale each (ascale[r, g]) and
 * the int16 sums of every 16 (acorr read as int16, 16 per super-block). */
static void kq_input(const pg_gemm_call *cl, int64_t r0, int64_t r1, int tid) {
    const pg_packed_weight *w = cl->w;
    const pg_kernel_table *kt = pg_kernels();
    const int64_t K = w->K, ng = w->kgroups;
    float *rowbuf = (float *)(cl->rowbuf + (size_t)tid * cl->g.row_bytes);
    for (int64_t r = r0; r < r1; r++) {
        int8_t *q = (int8_t *)cl->apack + r * cl->g.a_stride;
        int16_t *bs = (int16_t *)cl->acorr + r * ng * 16;
        const float *a = pg_gemm_a_row(cl, r);
        if (cl->norm_w) {
            kt->rmsnorm_f32(rowbuf, a, cl->norm_w, 1, (size_t)K, cl->eps);
            a = rowbuf;
        }
        for (int64_t g = 0; g < ng; g++) {
            const float m = kt->amax_f32(a + g * PG_QK_K, PG_QK_K);
            const float inv = m > 0.0f ? 127.0f / m : 0.0f;
            cl->ascale[r * ng + g] = m / 127.0f;
            for (int s = 0; s < 16; s++) {
                const int64_t k = g * PG_QK_K + 16 * s;
                bs[g * 16 + s] = (int16_t)kt->quant_i8(a + k, 16, inv, q + k);
            }
        }
    }
}

static void kq_plan(const pg_packed_weight *w, int64_t M, int gathered, pg_gemm_geometry *g) {
    pg_qfmt_plan(w, M, gathered, g);
    g->c_bytes = pg_align_up((size_t)M * (size_t)w->kgroups * 16 * sizeof(int16_t));
}

/* One row per type (the same stages; the name tells them apart). */
#define KQ_FORMAT(NAME)                                                                            \
    {                                                                                              \
        .name = NAME, .plan = kq_plan, .input = kq_input, .has_input = pg_qfmt_has_input,          \
        .pf_limit = pg_qfmt_pf_limit, .tile = pg_qfmt_tile, .epilogue = pg_qfmt_epilogue,          \
        .balanced_tiles = 1, .fused_rmsnorm = 1, .variant = pg_qfmt_variant,                       \
    }
const pg_gemm_format pg_gemm_format_q4_k = KQ_FORMAT("q4_k");
const pg_gemm_format pg_gemm_format_q5_k = KQ_FORMAT("q5_k");
const pg_gemm_format pg_gemm_format_q6_k = KQ_FORMAT("q6_k");
const pg_gemm_format pg_gemm_format_q2_k = KQ_FORMAT("q2_k");
const pg_gemm_format pg_gemm_format_q3_k = KQ_FORMAT("q3_k");
const pg_gemm_format pg_gemm_format_iq4_xs = KQ_FORMAT("iq4_xs");
const pg_gemm_format pg_gemm_format_iq4_nl = KQ_FORMAT("iq4_nl");
