/* Paged attention: the reference against a dense (unpaged) attention, every
 * micro-kernel set this machine (or qemu) runs against the reference on
 * random shapes (decode, multi-token queries over a cached prefix, mixed
 * batches, GQA 1/2/4/8, head_dim 8/64/128/80, block sizes 16/128, F32 and
 * BF16 KV, sliding window, sinks, soft-capping, the non-causal mode of
 * encoders and cross-attention), bitwise batch invariance (alone vs among 15
 * others, 1 vs 2 threads, split-KV vs not, chunked prefill, causal and
 * non-causal), the fused RoPE + KV store against a plain reference, and bad
 * arguments. */
#include "testutil.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/log.h"
#include "base/pool.h"
#include "kernels/attention.h"
#include "kernels/dispatch.h"
#include "kernels/ref/ops_ref.h"

static uint64_t g_rng = 0x243f6a8885a308d3ull;
static uint32_t rnd_u32(void) {
    g_rng ^= g_rng >> 12;
    g_rng ^= g_rng << 25;
    g_rng ^= g_rng >> 27;
    return (uint32_t)((g_rng * 2685821657736338717ull) >> 32);
}
static float rnd(void) {
    return (float)(rnd_u32() >> 8) / (float)(1u << 23) - 1.0f;
} /* [-1,1) */
static int rnd_int(int lo, int hi) {
    return lo + (int)(rnd_u32() % (uint32_t)(hi - lo + 1));
}

static pg_pool *g_pool2;

/* ---- a test case: cache + batch + q ------------------------------------------------ */

typedef struct tcase {
    pg_attn_params p;
    pg_paged_kv kv;
    int n_seqs;
    int32_t cu[40], lens[40];
    int32_t *tables[40];
    const int32_t *ctables[40];
    pg_attn_batch b;
    float *q, *sinks;
    size_t q_stride;
    int n_tokens;
} tcase;

/* Random cache contents; block ids handed out as a shuffled permutation
 * (block 0 left unused, like the engine's null block). */
static void tcase_init(tcase *t, int n_heads, int n_kv, int hd, int bs, pg_dtype dt, int n_seqs,
                       const int *qlens, const int *kvlens) {
    memset(t, 0, sizeof *t);
    t->p = (pg_attn_params){n_heads, n_kv, hd, 1.0f / sqrtf((float)hd), 0, NULL, 0, false};
    t->n_seqs = n_seqs;
    int nblocks = 1;
    for (int s = 0; s < n_seqs; s++)
        nblocks += (kvlens[s] + bs - 1) / bs;
    t->kv = (pg_paged_kv){NULL, NULL, dt, nblocks, n_kv, bs, hd};
    size_t bytes = pg_paged_kv_bytes(dt, nblocks, n_kv, bs, hd);
    t->kv.k = pg_malloc_aligned(bytes);
    t->kv.v = pg_malloc_aligned(bytes);
    assert_true(t->kv.k && t->kv.v);
    size_t n = bytes / (dt == PG_F32 ? 4 : 2);
    for (size_t i = 0; i < n; i++) {
        float a = rnd(), b = rnd();
        if (dt == PG_F32)
            ((float *)t->kv.k)[i] = a, ((float *)t->kv.v)[i] = b;
        else
            ((uint16_t *)t->kv.k)[i] = pg_f32_to_bf16(a),
                       ((uint16_t *)t->kv.v)[i] = pg_f32_to_bf16(b);
    }
    int32_t *perm = malloc((size_t)nblocks * sizeof *perm);
    for (int i = 0; i < nblocks - 1; i++)
        perm[i] = i + 1;
    for (int i = nblocks - 2; i > 0; i--) {
        int j = rnd_int(0, i);
        int32_t x = perm[i];
        perm[i] = perm[j], perm[j] = x;
    }
    int used = 0;
    t->cu[0] = 0;
    for (int s = 0; s < n_seqs; s++) {
        t->cu[s + 1] = t->cu[s] + qlens[s];
        t->lens[s] = kvlens[s];
        int nb = (kvlens[s] + bs - 1) / bs;
        t->tables[s] = malloc((size_t)(nb + 1) * sizeof(int32_t));
        for (int i = 0; i < nb; i++)
            t->tables[s][i] = perm[used++];
        t->ctables[s] = t->tables[s];
    }
    free(perm);
    /* slots past each sequence's end were never written: NaN there, so a
     * kernel that reads them (even with a zero weight) fails */
    for (int s = 0; s < n_seqs; s++) {
        if (kvlens[s] % bs == 0) continue;
        const size_t blk = (size_t)t->tables[s][kvlens[s] / bs];
        for (int h = 0; h < n_kv; h++)
            for (int j = kvlens[s] % bs; j < bs; j++)
                for (int d = 0; d < hd; d++) {
                    size_t ik = pg_paged_kv_k_index(&t->kv, (int32_t)blk, h, j, d),
                           iv = pg_paged_kv_v_index(&t->kv, (int32_t)blk, h, j, d);
                    if (dt == PG_F32)
                        ((float *)t->kv.k)[ik] = NAN, ((float *)t->kv.v)[iv] = NAN;
                    else
                        ((uint16_t *)t->kv.k)[ik] = 0x7fc0, ((uint16_t *)t->kv.v)[iv] = 0x7fc0;
                }
    }
    t->n_tokens = t->cu[n_seqs];
    t->b = (pg_attn_batch){n_seqs, t->cu, t->lens, t->ctables};
    t->q_stride = (size_t)n_heads * hd + 3; /* a padded row, as in a fused QKV buffer */
    t->q = malloc(((size_t)t->n_tokens * t->q_stride + 1) * sizeof(float));
    for (size_t i = 0; i < (size_t)t->n_tokens * t->q_stride; i++)
        t->q[i] = rnd() * 2.0f;
    t->sinks = malloc((size_t)n_heads * sizeof(float));
    for (int h = 0; h < n_heads; h++)
        t->sinks[h] = rnd() * 3.0f;
}

static void tcase_free(tcase *t) {
    pg_free(t->kv.k);
    pg_free(t->kv.v);
    for (int s = 0; s < t->n_seqs; s++)
        free(t->tables[s]);
    free(t->q);
    free(t->sinks);
}

static float *run_fast(const tcase *t, const pg_attn_ukernels *uk, pg_pool *pool,
                       size_t out_stride) {
    int nt = pool ? pg_pool_size(pool) : 1;
    size_t sb = pg_attention_scratch_bytes(&t->p, &t->b, &t->kv, nt);
    assert_true(sb > 0);
    void *scratch = pg_malloc_aligned(sb);
    float *out = calloc((size_t)t->n_tokens * out_stride + 1, sizeof(float));
    assert_non_null(out);
    pagoda_status st = pg_attention(&t->p, &t->b, &t->kv, t->q, t->q_stride, out, out_stride,
                                    scratch, sb, pool, uk);
    if (st != PAGODA_OK)
        fail_msg("pg_attention(%s): %s", uk ? uk->name : "default", pg_last_error());
    pg_free(scratch);
    return out;
}

static float *run_ref(const tcase *t) {
    size_t os = (size_t)t->p.n_heads * t->p.head_dim;
    float *out = calloc((size_t)t->n_tokens * os + 1, sizeof(float));
    pagoda_status st = pg_ref_attention(&t->p, &t->b, &t->kv, t->q, t->q_stride, out, os);
    if (st != PAGODA_OK) fail_msg("pg_ref_attention: %s", pg_last_error());
    return out;
}

/* Variants that round q and p to BF16 (VDPBF16PS, BFDOT) get a looser bound. */
static float tolerance(const pg_attn_ukernels *uk) {
    return strstr(uk->name, "bf16") ? 1e-2f : 5e-5f;
}

static void compare_all_variants(const tcase *t, const char *what) {
    float *ref = run_ref(t);
    size_t os = (size_t)t->p.n_heads * t->p.head_dim;
    const pg_attn_ukernels *v[8];
    int nv = pg_attn_ukernel_variants(t->kv.dtype, v, 8);
    assert_true(nv >= 1);
    for (int i = 0; i < nv; i++)
        for (int threads = 1; threads <= 2; threads++) {
            float *out = run_fast(t, v[i], threads == 2 ? g_pool2 : NULL, os);
            float tol = tolerance(v[i]), worst = 0;
            size_t at = 0;
            for (size_t e = 0; e < (size_t)t->n_tokens * os; e++) {
                float d = fabsf(out[e] - ref[e]);
                if (isnan(d)) { /* a NaN must not be forgotten by later elements */
                    worst = d, at = e;
                    break;
                }
                if (d > worst) worst = d, at = e;
            }
            if (!(worst <= tol))
                fail_msg("%s: %s/%s, %d thread(s): |fast - ref| = %g at token %zu dim %zu "
                         "(%g vs %g), tolerance %g",
                         what, v[i]->name, pg_dtype_name(t->kv.dtype), threads, (double)worst,
                         at / os, at % os, (double)out[at], (double)ref[at], (double)tol);
            free(out);
        }
    free(ref);
}

/* ---- the reference against a dense attention ----------------------------------------- */

static void test_reference_matches_dense(void **state) {
    (void)state;
    for (int mode = 0; mode < 4; mode++) {
        /* causal, then non-causal (every query sees all kv_len keys, also
         * more queries than keys) */
        const int nc = mode >= 2, dti = mode % 2;
        const int ql[3] = {1, nc ? 20 : 7, 20}, kl[3] = {37, 7, 50};
        tcase t;
        pg_dtype dt = dti ? PG_BF16 : PG_F32;
        tcase_init(&t, 4, 2, 8, 16, dt, 3, ql, kl);
        t.p.non_causal = nc;
        float *ref = run_ref(&t);
        const int hd = 8, G = 2;
        for (int s = 0; s < 3; s++)
            for (int i = 0; i < ql[s]; i++)
                for (int h = 0; h < 4; h++) {
                    int pos = nc ? kl[s] - 1 : kl[s] - ql[s] + i;
                    const float *qr = t.q + (size_t)(t.cu[s] + i) * t.q_stride + h * hd;
                    double sc[64], m = -INFINITY, l = 0, o[8] = {0};
                    for (int j = 0; j <= pos; j++) {
                        int blk = t.tables[s][j / 16], off = j % 16;
                        double dot = 0;
                        for (int d = 0; d < hd; d++) { /* layout written out, not via helpers */
                            float kv;
                            size_t tile = ((size_t)blk * 2 + h / G) * 16 * hd;
                            if (dt == PG_F32)
                                kv = ((float *)t.kv.k)[tile + d * 16 + off];
                            else
                                kv = pg_bf16_to_f32(
                                    ((uint16_t *)t.kv.k)[tile + (d / 2) * 32 + off * 2 + d % 2]);
                            dot += (double)qr[d] * kv;
                        }
                        sc[j] = dot * t.p.scale;
                        if (sc[j] > m) m = sc[j];
                    }
                    for (int j = 0; j <= pos; j++) {
                        int blk = t.tables[s][j / 16], off = j % 16;
                        double e = exp(sc[j] - m);
                        l += e;
                        size_t tile = ((size_t)blk * 2 + h / G) * 16 * hd;
                        for (int d = 0; d < hd; d++) {
                            float vv =
                                dt == PG_F32
                                    ? ((float *)t.kv.v)[tile + off * hd + d]
                                    : pg_bf16_to_f32((
                                          (uint16_t *)
                                              t.kv.v)[tile + (off / 2) * hd * 2 + d * 2 + off % 2]);
                            o[d] += e * vv;
                        }
                    }
                    for (int d = 0; d < hd; d++) {
                        float got = ref[(size_t)(t.cu[s] + i) * 32 + h * hd + d];
                        assert_true(fabs(got - o[d] / l) < 1e-5);
                    }
                }
        free(ref);
        tcase_free(&t);
    }
}

/* ---- variants against the reference --------------------------------------------------- */

static void test_variants_decode(void **state) {
    (void)state;
    const int ratios[4] = {1, 2, 4, 8}, hds[4] = {64, 128, 8, 80};
    for (int dti = 0; dti < 2; dti++)
        for (int ri = 0; ri < 4; ri++) {
            int nkv = ri == 3 ? 1 : 2, hd = hds[ri], bs = ri % 2 ? 128 : 16;
            int ql[4] = {1, 1, 1, 1}, kl[4] = {1, rnd_int(2, 40), rnd_int(100, 300), 600};
            tcase t;
            tcase_init(&t, nkv * ratios[ri], nkv, hd, bs, dti ? PG_BF16 : PG_F32, 4, ql, kl);
            char what[96];
            snprintf(what, sizeof what, "decode G=%d hd=%d bs=%d", ratios[ri], hd, bs);
            compare_all_variants(&t, what);
            tcase_free(&t);
        }
}

static void test_variants_prefill_with_prefix(void **state) {
    (void)state;
    const int hds[4] = {64, 8, 128, 80};
    for (int dti = 0; dti < 2; dti++)
        for (int i = 0; i < 4; i++) {
            int G = 1 << i, nkv = 2, bs = i % 2 ? 16 : 128;
            /* a fresh prompt, a chunk over a cached prefix, a verification of 5 tokens */
            int ql[3] = {rnd_int(20, 45), rnd_int(10, 30), 5};
            int kl[3] = {ql[0], ql[1] + rnd_int(100, 260), 5 + rnd_int(30, 200)};
            tcase t;
            tcase_init(&t, nkv * G, nkv, hds[i], bs, dti ? PG_BF16 : PG_F32, 3, ql, kl);
            char what[96];
            snprintf(what, sizeof what, "prefill G=%d hd=%d bs=%d", G, hds[i], bs);
            compare_all_variants(&t, what);
            tcase_free(&t);
        }
}

static void test_variants_window_sinks_softcap(void **state) {
    (void)state;
    for (int dti = 0; dti < 2; dti++)
        for (int mode = 0; mode < 4; mode++) {
            int ql[3] = {1, 24, 3}, kl[3] = {300, 90, 40};
            tcase t;
            tcase_init(&t, 8, 2, 64, 16, dti ? PG_BF16 : PG_F32, 3, ql, kl);
            if (mode == 0) t.p.sliding_window = 37;
            if (mode == 1) t.p.sinks = t.sinks;
            if (mode == 2) t.p.softcap = 2.5f, t.p.sliding_window = 128, t.p.sinks = t.sinks;
            /* the 300-token decode's window starts in a later tile of its
             * super-block than the first, whose last tile is part-written */
            if (mode == 3) t.p.sliding_window = 8, t.p.sinks = t.sinks;
            if (t.p.sliding_window) /* blocks wholly before every window may be null/invalid */
                for (int s = 0; s < 3; s++) {
                    int lo = kl[s] - ql[s] - t.p.sliding_window + 1;
                    for (int i = 0; lo > 0 && i < lo / 16; i++) t.tables[s][i] = -7;
                }
            static const char *names[4] = {"window 37", "sinks", "softcap+window+sinks",
                                           "window 8+sinks"};
            compare_all_variants(&t, names[mode]);
            tcase_free(&t);
        }
}

/* Non-causal mode: an encoder's self-attention (one request, q_len = kv_len)
 * and Whisper's cross-attention (decoder tokens over a 1500-token encoder
 * output: decodes split across partitions at 2 threads, a prompt, an empty
 * KV giving zero rows, more queries than keys). */
static void test_variants_non_causal(void **state) {
    (void)state;
    for (int dti = 0; dti < 2; dti++) {
        const pg_dtype dt = dti ? PG_BF16 : PG_F32;
        int eq = 300, ek = 300;
        tcase enc;
        tcase_init(&enc, 4, 4, 64, 128, dt, 1, &eq, &ek);
        enc.p.non_causal = true;
        compare_all_variants(&enc, "non-causal encoder window");
        tcase_free(&enc);
        for (int gi = 0; gi < 2; gi++) {
            int ql[5] = {1, 4, 17, 3, 9}, kl[5] = {1500, 1500, 700, 0, 5};
            tcase cr;
            tcase_init(&cr, gi ? 8 : 6, gi ? 4 : 6, gi ? 80 : 64, 16, dt, 5, ql, kl);
            cr.p.non_causal = true;
            compare_all_variants(&cr, gi ? "non-causal cross G=2 hd=80" : "non-causal cross");
            /* the empty-KV request's rows are zeros */
            float *out = run_fast(&cr, NULL, g_pool2, (size_t)cr.p.n_heads * cr.p.head_dim);
            const size_t os = (size_t)cr.p.n_heads * cr.p.head_dim;
            for (size_t e = (size_t)cr.cu[3] * os; e < (size_t)cr.cu[4] * os; e++)
                assert_true(out[e] == 0.0f);
            free(out);
            tcase_free(&cr);
        }
    }
}

/* ---- batch invariance -------------------------------------------------------------------- */

/* Rows of request `s` of case t, copied. */
static float *rows_of(const tcase *t, const float *out, int s) {
    size_t os = (size_t)t->p.n_heads * t->p.head_dim, n = (size_t)(t->cu[s + 1] - t->cu[s]) * os;
    float *r = malloc(n * sizeof *r);
    memcpy(r, out + (size_t)t->cu[s] * os, n * sizeof *r);
    return r;
}

/* Build the target request alone (tcase a) and at index 7 among 15 others
 * (tcase b) with the same K/V/q contents. */
static void invariance_case(pg_dtype dt, int G, int hd, int bs, int target_q, int target_kv,
                            bool non_causal) {
    enum { N = 16, AT = 7 };
    int ql[N], kl[N];
    for (int s = 0; s < N; s++) {
        ql[s] = rnd_int(0, 3) ? 1 : rnd_int(2, 12);
        kl[s] = ql[s] + rnd_int(0, 160);
    }
    ql[AT] = target_q, kl[AT] = target_kv;
    tcase big;
    tcase_init(&big, 2 * G, 2, hd, bs, dt, N, ql, kl);
    tcase one;
    tcase_init(&one, 2 * G, 2, hd, bs, dt, 1, &ql[AT], &kl[AT]);
    big.p.non_causal = one.p.non_causal = non_causal;
    /* copy the target's K/V tiles and q rows into `one` */
    size_t tile = (size_t)bs * hd * (dt == PG_F32 ? 4 : 2) * 2 /* kv heads */;
    int nb = (target_kv + bs - 1) / bs;
    for (int i = 0; i < nb; i++) {
        memcpy((char *)one.kv.k + (size_t)one.tables[0][i] * tile,
               (char *)big.kv.k + (size_t)big.tables[AT][i] * tile, tile);
        memcpy((char *)one.kv.v + (size_t)one.tables[0][i] * tile,
               (char *)big.kv.v + (size_t)big.tables[AT][i] * tile, tile);
    }
    for (int i = 0; i < target_q; i++)
        memcpy(one.q + (size_t)i * one.q_stride, big.q + (size_t)(big.cu[AT] + i) * big.q_stride,
               big.q_stride * sizeof(float));
    size_t os = (size_t)big.p.n_heads * hd, n = (size_t)target_q * os;
    const pg_attn_ukernels *v[8];
    int nv = pg_attn_ukernel_variants(dt, v, 8);
    for (int i = 0; i < nv; i++) {
        float *alone1 = run_fast(&one, v[i], NULL, os);
        float *alone2 = run_fast(&one, v[i], g_pool2, os); /* split-KV when long */
        float *batch1 = run_fast(&big, v[i], NULL, os);
        float *batch2 = run_fast(&big, v[i], g_pool2, os);
        float *b1 = rows_of(&big, batch1, AT), *b2 = rows_of(&big, batch2, AT);
        if (memcmp(alone1, alone2, n * sizeof(float)) || memcmp(alone1, b1, n * sizeof(float)) ||
            memcmp(alone1, b2, n * sizeof(float)))
            fail_msg("%s %s G=%d hd=%d bs=%d q=%d kv=%d%s: not bitwise batch invariant", v[i]->name,
                     pg_dtype_name(dt), G, hd, bs, target_q, target_kv,
                     non_causal ? " non-causal" : "");
        free(alone1), free(alone2), free(batch1), free(batch2), free(b1), free(b2);
    }
    tcase_free(&big);
    tcase_free(&one);
}

static void test_batch_invariance(void **state) {
    (void)state;
    invariance_case(PG_F32, 4, 64, 16, 1, 1300, false); /* long decode: split-KV at 2 threads */
    invariance_case(PG_BF16, 4, 64, 128, 1, 1100, false);
    invariance_case(PG_F32, 2, 128, 128, 5, 600, false); /* verification of 5 tokens */
    invariance_case(PG_BF16, 8, 80, 16, 33, 250, false); /* prefill chunk over a prefix */
    invariance_case(PG_BF16, 1, 8, 16, 1, 700, false);
    /* non-causal: a cross-attention decode and prompt over 1500 keys */
    invariance_case(PG_F32, 1, 64, 16, 1, 1500, true);
    invariance_case(PG_BF16, 1, 64, 16, 7, 1500, true);
}

/* A prompt in one go vs the same prompt as two chunks: the second chunk's
 * rows are bitwise those of the one-go run. */
static void test_chunked_prefill_invariance(void **state) {
    (void)state;
    for (int dti = 0; dti < 2; dti++) {
        pg_dtype dt = dti ? PG_BF16 : PG_F32;
        int qw = 90, kw = 90;
        tcase whole;
        tcase_init(&whole, 8, 2, 64, 16, dt, 1, &qw, &kw);
        int qc = 37, kc = 90; /* last 37 tokens as a chunk over a 53-token prefix */
        tcase chunk;
        tcase_init(&chunk, 8, 2, 64, 16, dt, 1, &qc, &kc);
        size_t tile = (size_t)16 * 64 * (dt == PG_F32 ? 4 : 2) * 2;
        for (int i = 0; i < 6; i++) {
            memcpy((char *)chunk.kv.k + (size_t)chunk.tables[0][i] * tile,
                   (char *)whole.kv.k + (size_t)whole.tables[0][i] * tile, tile);
            memcpy((char *)chunk.kv.v + (size_t)chunk.tables[0][i] * tile,
                   (char *)whole.kv.v + (size_t)whole.tables[0][i] * tile, tile);
        }
        memcpy(chunk.q, whole.q + (size_t)53 * whole.q_stride, (size_t)37 * whole.q_stride * 4);
        size_t os = 8 * 64;
        const pg_attn_ukernels *v[8];
        int nv = pg_attn_ukernel_variants(dt, v, 8);
        for (int i = 0; i < nv; i++) {
            float *a = run_fast(&whole, v[i], g_pool2, os), *c = run_fast(&chunk, v[i], NULL, os);
            if (memcmp(a + 53 * os, c, 37 * os * sizeof(float)))
                fail_msg("%s %s: chunked prefill differs from one-go prefill", v[i]->name,
                         pg_dtype_name(dt));
            free(a), free(c);
        }
        tcase_free(&whole);
        tcase_free(&chunk);
    }
}

/* ---- RoPE + store ------------------------------------------------------------------------- */

static void test_rope_kv_store(void **state) {
    (void)state;
    enum { NT = 5, NH = 4, NKV = 2, HD = 16, BS = 16, NB = 4 };
    float inv_freq[HD / 2];
    for (int i = 0; i < HD / 2; i++)
        inv_freq[i] = powf(10000.0f, -2.0f * i / HD);
    const int32_t pos[NT] = {0, 1, 17, 40, 63},
                  slots[NT] = {3 * BS + 0, 3 * BS + 1, 1 * BS + 1, -1, 2 * BS + 15};
    for (int style = 0; style < 2; style++)
        for (int dti = 0; dti < 2; dti++)
            for (int rd = HD; rd >= HD / 2; rd -= HD / 2) {
                pg_dtype dt = dti ? PG_BF16 : PG_F32;
                pg_rope_spec rope = {(pg_rope_style)style, rd, inv_freq};
                size_t bytes = pg_paged_kv_bytes(dt, NB, NKV, BS, HD);
                pg_paged_kv kv = {calloc(1, bytes), calloc(1, bytes), dt, NB, NKV, BS, HD};
                float q[NT][NH * HD], q0[NT][NH * HD], k[NT][NKV * HD], v[NT][NKV * HD];
                for (int t = 0; t < NT; t++) {
                    for (int i = 0; i < NH * HD; i++)
                        q[t][i] = q0[t][i] = rnd();
                    for (int i = 0; i < NKV * HD; i++)
                        k[t][i] = rnd(), v[t][i] = rnd();
                }
                assert_int_equal(pg_rope_kv_store(&rope, NT, pos, slots, &q[0][0], NH * HD, NH,
                                                  &k[0][0], NKV * HD, &v[0][0], NKV * HD, &kv),
                                 PAGODA_OK);
                if (rd == HD) /* full rotation: the model's pg_ref_rope, same math */
                    for (int t = 0; t < NT; t++) {
                        float qq[NH * HD];
                        memcpy(qq, q0[t], sizeof qq);
                        pg_ref_rope(qq, NH, HD, pos[t], inv_freq, style == PG_ROPE_INTERLEAVED);
                        for (int i = 0; i < NH * HD; i++)
                            assert_true(fabsf(qq[i] - q[t][i]) <= 1e-6f);
                    }
                for (int t = 0; t < NT; t++) {
                    /* plain reference: the rotation written out from the definition */
                    float ref[NH + NKV][HD];
                    for (int h = 0; h < NH + NKV; h++) {
                        const float *x = h < NH ? &q0[t][h * HD] : &k[t][(h - NH) * HD];
                        for (int d = 0; d < HD; d++)
                            ref[h][d] = x[d];
                        for (int i = 0; i < rd / 2; i++) {
                            int a = style == PG_ROPE_NEOX ? i : 2 * i;
                            int bb = style == PG_ROPE_NEOX ? i + rd / 2 : 2 * i + 1;
                            double th = (double)pos[t] * (double)inv_freq[i];
                            float cth = (float)cos(th), sth = (float)sin(th);
                            ref[h][a] = x[a] * cth - x[bb] * sth;
                            ref[h][bb] = x[a] * sth + x[bb] * cth;
                        }
                    }
                    for (int h = 0; h < NH; h++)
                        for (int d = 0; d < HD; d++)
                            assert_true(fabsf(q[t][h * HD + d] - ref[h][d]) < 2e-6f);
                    if (slots[t] < 0) continue;
                    int blk = slots[t] / BS, off = slots[t] % BS;
                    for (int h = 0; h < NKV; h++)
                        for (int d = 0; d < HD; d++) {
                            size_t tile = ((size_t)blk * NKV + h) * BS * HD;
                            float kc, vc;
                            if (dt == PG_F32) {
                                kc = ((float *)kv.k)[tile + (size_t)d * BS + off];
                                vc = ((float *)kv.v)[tile + (size_t)off * HD + d];
                            } else {
                                kc = pg_bf16_to_f32(
                                    ((uint16_t *)
                                         kv.k)[tile + ((size_t)(d / 2) * BS + off) * 2 + d % 2]);
                                vc = pg_bf16_to_f32(
                                    ((uint16_t *)
                                         kv.v)[tile + ((size_t)(off / 2) * HD + d) * 2 + off % 2]);
                            }
                            float tol = dt == PG_F32 ? 2e-6f : 8e-3f;
                            assert_true(fabsf(kc - ref[NH + h][d]) <= tol);
                            if (dt == PG_F32)
                                assert_true(vc == v[t][h * HD + d]);
                            else
                                assert_true(vc == pg_bf16_to_f32(pg_f32_to_bf16(v[t][h * HD + d])));
                        }
                }
                /* the padding token (slot -1) wrote nothing: block 0 is untouched */
                for (size_t i = 0; i < bytes / NB; i++)
                    assert_int_equal(((char *)kv.k)[i], 0);
                free(kv.k), free(kv.v);
            }
}

/* ---- bad input ------------------------------------------------------------------------------ */

static void test_bad_arguments(void **state) {
    (void)state;
    pg_log_level saved = pg_log_get_level();
    pg_log_set_level(PG_LOG_OFF);
    int ql[2] = {3, 1}, kl[2] = {40, 20};
    tcase t;
    tcase_init(&t, 4, 2, 64, 16, PG_F32, 2, ql, kl);
    size_t os = 4 * 64, sb = pg_attention_scratch_bytes(&t.p, &t.b, &t.kv, 1);
    void *scratch = pg_malloc_aligned(sb);
    float *out = calloc(4 * os, sizeof(float));
    /* scratch too small */
    assert_int_equal(
        pg_attention(&t.p, &t.b, &t.kv, t.q, t.q_stride, out, os, scratch, 16, NULL, NULL),
        PAGODA_ERR_INVALID_ARG);
    assert_non_null(strstr(pg_last_error(), "scratch"));
    /* wrong dtype micro-kernels */
    const pg_attn_ukernels *bf[8];
    assert_true(pg_attn_ukernel_variants(PG_BF16, bf, 8) >= 1);
    assert_int_equal(
        pg_attention(&t.p, &t.b, &t.kv, t.q, t.q_stride, out, os, scratch, sb, NULL, bf[0]),
        PAGODA_ERR_INVALID_ARG);
    /* q_len > kv_len: refused when causal, fine when not */
    t.lens[1] = 0;
    assert_int_equal(pg_ref_attention(&t.p, &t.b, &t.kv, t.q, t.q_stride, out, os),
                     PAGODA_ERR_INVALID_ARG);
    assert_non_null(strstr(pg_last_error(), "kv_len"));
    t.p.non_causal = true;
    assert_int_equal(pg_ref_attention(&t.p, &t.b, &t.kv, t.q, t.q_stride, out, os), PAGODA_OK);
    /* no sliding window in non-causal mode */
    t.p.sliding_window = 8;
    assert_int_equal(pg_ref_attention(&t.p, &t.b, &t.kv, t.q, t.q_stride, out, os),
                     PAGODA_ERR_INVALID_ARG);
    assert_non_null(strstr(pg_last_error(), "non-causal"));
    t.p.sliding_window = 0;
    t.p.non_causal = false;
    t.lens[1] = 20;
    /* block id out of range */
    int32_t saved_id = t.tables[0][2];
    t.tables[0][2] = t.kv.num_blocks;
    assert_int_equal(
        pg_attention(&t.p, &t.b, &t.kv, t.q, t.q_stride, out, os, scratch, sb, NULL, NULL),
        PAGODA_ERR_INVALID_ARG);
    assert_non_null(strstr(pg_last_error(), "outside"));
    t.tables[0][2] = saved_id;
    /* GQA mismatch, bad block size, bad head_dim, bad dtype */
    t.p.n_heads = 5;
    assert_int_equal(pg_ref_attention(&t.p, &t.b, &t.kv, t.q, t.q_stride, out, os),
                     PAGODA_ERR_INVALID_ARG);
    t.p.n_heads = 4;
    t.kv.block_size = 24;
    assert_int_equal(pg_ref_attention(&t.p, &t.b, &t.kv, t.q, t.q_stride, out, os),
                     PAGODA_ERR_INVALID_ARG);
    assert_non_null(strstr(pg_last_error(), "block_size 24"));
    t.kv.block_size = 16;
    t.kv.dtype = PG_F16;
    assert_int_equal(pg_paged_kv_check(&t.kv), PAGODA_ERR_UNSUPPORTED);
    t.kv.dtype = PG_F32;
    t.kv.head_dim = 7;
    assert_int_equal(pg_paged_kv_check(&t.kv), PAGODA_ERR_INVALID_ARG);
    t.kv.head_dim = 64;
    /* the good call still works */
    assert_int_equal(
        pg_attention(&t.p, &t.b, &t.kv, t.q, t.q_stride, out, os, scratch, sb, NULL, NULL),
        PAGODA_OK);
    /* rope store: slot past the cache, negative position, odd rotary_dim */
    float inv[32] = {0};
    pg_rope_spec rope = {PG_ROPE_NEOX, 64, inv};
    int32_t pos[1] = {0}, slot[1] = {t.kv.num_blocks * 16};
    float kq[4 * 64] = {0};
    assert_int_equal(pg_rope_kv_store(&rope, 1, pos, slot, kq, 256, 4, kq, 128, kq, 128, &t.kv),
                     PAGODA_ERR_INVALID_ARG);
    assert_non_null(strstr(pg_last_error(), "slot"));
    slot[0] = 0, pos[0] = -1;
    assert_int_equal(pg_rope_kv_store(&rope, 1, pos, slot, kq, 256, 4, kq, 128, kq, 128, &t.kv),
                     PAGODA_ERR_INVALID_ARG);
    pos[0] = 0, rope.rotary_dim = 63;
    assert_int_equal(pg_rope_kv_store(&rope, 1, pos, slot, kq, 256, 4, kq, 128, kq, 128, &t.kv),
                     PAGODA_ERR_INVALID_ARG);
    assert_int_equal(pg_rope_kv_store(NULL, 1, pos, slot, kq, 256, 4, kq, 100, kq, 128, &t.kv),
                     PAGODA_ERR_INVALID_ARG);
    assert_int_equal(pg_attention_scratch_bytes(NULL, &t.b, &t.kv, 1), 0);
    pg_free(scratch);
    free(out);
    tcase_free(&t);
    pg_log_set_level(saved);
}

/* The partition size depends on the block size only and is a multiple of it. */
static void test_partition_tokens(void **state) {
    (void)state;
    for (int bs = 16; bs <= 1024; bs += 16) {
        int pt = pg_attn_partition_tokens(bs);
        assert_true(pt >= bs && pt % bs == 0 && pt >= 512);
    }
}

/* A call below the pool's serial threshold runs on the caller without
 * forking and gives the bits of the forked call (a decode over a split KV:
 * the same partitions and merges either way). */
static void test_serial_below_threshold(void **state) {
    (void)state;
    int ql[2] = {1, 1}, kl[2] = {700, 1300};
    tcase t;
    tcase_init(&t, 8, 2, 64, 16, PG_F32, 2, ql, kl);
    const size_t os = (size_t)t.p.n_heads * t.p.head_dim, n = (size_t)t.n_tokens * os;
    const uint64_t r0 = pg_pool_region_count(g_pool2);
    float *forked = run_fast(&t, NULL, g_pool2, os);
    const uint64_t r1 = pg_pool_region_count(g_pool2);
    assert_true(r1 >= r0 + 2); /* phase 1 and the split units' merge */
    pg_pool_set_serial_macs(INT64_MAX);
    float *serial = run_fast(&t, NULL, g_pool2, os);
    assert_int_equal(pg_pool_region_count(g_pool2), r1);
    /* 2 KV heads x 4 rows x (700 + 1300) keys x 2 x 64 multiply-adds: forked at the
     * threshold, serial one above */
    const int64_t macs = 2LL * 4 * (700 + 1300) * 2 * 64;
    pg_pool_set_serial_macs(macs);
    float *at = run_fast(&t, NULL, g_pool2, os);
    assert_true(pg_pool_region_count(g_pool2) > r1);
    const uint64_t r2 = pg_pool_region_count(g_pool2);
    pg_pool_set_serial_macs(macs + 1);
    float *above = run_fast(&t, NULL, g_pool2, os);
    assert_int_equal(pg_pool_region_count(g_pool2), r2);
    pg_pool_set_serial_macs(0); /* the other tests: every call forks */
    assert_memory_equal(forked, serial, n * sizeof(float));
    assert_memory_equal(forked, at, n * sizeof(float));
    assert_memory_equal(forked, above, n * sizeof(float));
    free(forked), free(serial), free(at), free(above);
    tcase_free(&t);
}

static int setup(void **state) {
    (void)state;
    pg_pool_set_serial_macs(0); /* exercise the forked paths on small cases too */
    pg_pool_options o = pg_pool_options_default();
    o.n_threads = 2;
    o.pin = 0;
    return pg_pool_create(&o, &g_pool2) == PAGODA_OK ? 0 : -1;
}
static int teardown(void **state) {
    (void)state;
    pg_pool_free(g_pool2);
    return 0;
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_reference_matches_dense),
        cmocka_unit_test(test_variants_decode),
        cmocka_unit_test(test_variants_prefill_with_prefix),
        cmocka_unit_test(test_variants_window_sinks_softcap),
        cmocka_unit_test(test_variants_non_causal),
        cmocka_unit_test(test_batch_invariance),
        cmocka_unit_test(test_chunked_prefill_invariance),
        cmocka_unit_test(test_rope_kv_store),
        cmocka_unit_test(test_bad_arguments),
        cmocka_unit_test(test_partition_tokens),
        cmocka_unit_test(test_serial_below_threshold),
    };
    if (getenv("PAGODA_TEST_FILTER")) cmocka_set_test_filter(getenv("PAGODA_TEST_FILTER"));
    return cmocka_run_group_tests(tests, setup, teardown);
}
