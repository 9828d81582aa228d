/* Gated DeltaNet kernels (kernels/gated_delta.h): the micro-kernels of every
 * level this machine (or qemu) runs against the scalar reference (bitwise),
 * a hand-computed dk = dv = 2 case, the chunked form against the reference
 * recurrence (lengths 1..300, random start positions, GQA 1 and 2, tiled
 * and grouped heads, dk = dv = 16 / 128 and dk != dv, state carried across
 * calls), steps at multiples of 64 bitwise equal to one call, snapshots,
 * batch, thread and column-split invariance, the conv, the gates, the gated
 * norm and bad arguments.
 *
 * Tolerance of the chunked form against the recurrence: max |fast - ref|
 * over a call's outputs (or a state) <= TOL_CHUNK * max |ref| of the same
 * tensor (2e-5; the largest seen is ~8e-7 on x86-64 and aarch64, printed at
 * the end: the UT transform's solve and the pairwise decays round
 * differently from the token-by-token update). */
#include "testutil.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/cpu.h"
#include "base/pool.h"
#include "kernels/dispatch.h"
#include "kernels/gated_delta.h"
#include "kernels/ref/ops_ref.h"
#include "kernels/ref/ref.h"

#define TOL_CHUNK 2e-5

static uint64_t g_rng = 0x9e3779b97f4a7c15ull;
static uint32_t rnd_u32(void) {
    g_rng ^= g_rng >> 12;
    g_rng ^= g_rng << 25;
    g_rng ^= g_rng >> 27;
    return (uint32_t)((g_rng * 2685821657736338717ull) >> 32);
}
static float rnd(void) { /* [-1, 1) */
    return (float)(rnd_u32() >> 8) / (float)(1u << 23) - 1.0f;
}
static int rnd_int(int lo, int hi) {
    return lo + (int)(rnd_u32() % (uint32_t)(hi - lo + 1));
}

static pg_pool *g_pool2;
static double g_worst; /* largest chunked-vs-reference error seen (reported at the end) */

/* The distinct micro-kernel sets of the levels this CPU runs, scalar first. */
static int uk_sets(const pg_gdn_ukernels **out) {
    int n = 0;
    for (int l = 0; l < PG_ISA_COUNT; l++) {
        const pg_kernel_table *t = pg_kernels_for_isa(pg_isa_name((pg_isa)l));
        if (!t) continue;
        bool seen = false;
        for (int i = 0; i < n; i++)
            seen |= out[i] == t->gdn;
        if (!seen) out[n++] = t->gdn;
    }
    return n;
}

static float *fbuf(size_t n) {
    float *p = pg_malloc_aligned((n ? n : 1) * sizeof(float));
    assert_non_null(p);
    return p;
}
static float *frand(size_t n, float lo, float hi) {
    float *p = fbuf(n);
    for (size_t i = 0; i < n; i++)
        p[i] = lo + (hi - lo) * 0.5f * (rnd() + 1.0f);
    return p;
}
static float *fdup(const float *src, size_t n) {
    float *p = fbuf(n);
    memcpy(p, src, n * sizeof(float));
    return p;
}

/* max |a - b| / max |b| (0 when both are 0). */
static double rel_err(const float *a, const float *b, size_t n) {
    double e = 0, m = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - (double)b[i]);
        if (!(d <= e)) e = d; /* NaN counts */
        if (fabs((double)b[i]) > m) m = fabs((double)b[i]);
    }
    return m > 0 ? e / m : e;
}

/* ---- micro-kernels ---------------------------------------------------------------- */

static void check_recurrent(const pg_gdn_ukernels *uk, int n, int dk, int nc) {
    const int64_t lds = nc + 5, ldqk = dk + 3, ldv = nc + 7, ldo = nc + 2;
    float *S = frand((size_t)dk * lds, -1, 1), *q = frand((size_t)n * ldqk, -0.3f, 0.3f);
    float *k = frand((size_t)n * ldqk, -0.3f, 0.3f), *v = frand((size_t)n * ldv, -1, 1);
    float *eg = frand((size_t)n, 0.2f, 1), *beta = frand((size_t)n, 0, 1);
    float *o1 = frand((size_t)n * ldo, -1, 1), *S2 = fdup(S, (size_t)dk * lds);
    float *o2 = fdup(o1, (size_t)n * ldo);
    pg_ref_gdn_recurrent_uk(n, dk, nc, S, lds, q, k, ldqk, v, ldv, eg, beta, o1, ldo);
    uk->recurrent(n, dk, nc, S2, lds, q, k, ldqk, v, ldv, eg, beta, o2, ldo);
    if (memcmp(S, S2, (size_t)dk * lds * 4) || memcmp(o1, o2, (size_t)n * ldo * 4))
        fail_msg("recurrent %s n=%d dk=%d nc=%d differs from the reference", uk->name, n, dk, nc);
    pg_free(S), pg_free(q), pg_free(k), pg_free(v), pg_free(eg), pg_free(beta);
    pg_free(o1), pg_free(S2), pg_free(o2);
}

static void check_mm(const pg_gdn_ukernels *uk, int m, int n, int k, float cscale) {
    const int64_t lda = k + 3, ldb = n + 1, ldc = n + 4;
    float *a = frand((size_t)m * lda + 1, -1, 1), *b = frand((size_t)(k ? k : 1) * ldb, -1, 1);
    float *c1 = frand((size_t)m * ldc, -1, 1), *c2 = fdup(c1, (size_t)m * ldc);
    pg_ref_gdn_mm_uk(m, n, k, a, lda, b, ldb, c1, ldc, cscale);
    uk->mm(m, n, k, a, lda, b, ldb, c2, ldc, cscale);
    if (memcmp(c1, c2, (size_t)m * ldc * 4))
        fail_msg("mm %s m=%d n=%d k=%d cscale=%g differs from the reference", uk->name, m, n, k,
                 (double)cscale);
    pg_free(a), pg_free(b), pg_free(c1), pg_free(c2);
}

static void test_ukernels_match_reference(void **state) {
    (void)state;
    const pg_gdn_ukernels *uk[PG_ISA_COUNT];
    const int nu = uk_sets(uk);
    assert_string_equal(uk[0]->name, "scalar");
    for (int u = 1; u < nu; u++) {
        for (int nc = 1; nc <= 70; nc++)
            check_recurrent(uk[u], 1 + nc % 3, 1 + nc % 17, nc);
        check_recurrent(uk[u], 3, 128, 128);
        check_recurrent(uk[u], 2, 128, 130);
        check_recurrent(uk[u], 2, 16, 96);
        const float cs[3] = {0.0f, 1.0f, 0.625f};
        for (int n = 1; n <= 70; n++)
            check_mm(uk[u], 1 + n % 13, n, (n * 7) % 67, cs[n % 3]);
        for (int m = 1; m <= 13; m++)
            check_mm(uk[u], m, 64 + m, 64, cs[m % 3]);
        check_mm(uk[u], 128, 128, 64, 0.5f);
        check_mm(uk[u], 128, 64, 128, 0.0f);
        check_mm(uk[u], 3, 16, 0, 1.0f);
    }
}

/* ---- problems: one layer's inputs for a batch of rows --------------------------------- */

typedef struct prob {
    pg_gdn_params p;
    int T;
    float *q, *k, *v, *g, *beta;
    int64_t ldq, ldk, ldv, ldo;
} prob;

/* Random inputs for T rows; g in [gmin, 0], beta in (0, 1). */
static void prob_init(prob *pr, int nk, int nv, bool tiled, int dk, int dv, int T, float gmin) {
    memset(pr, 0, sizeof *pr);
    pr->p = (pg_gdn_params){nk, nv, dk, dv, tiled, 1.0f / sqrtf((float)dk), NULL};
    pr->T = T;
    pr->ldq = (int64_t)nk * dk + 3, pr->ldk = (int64_t)nk * dk + 1;
    pr->ldv = (int64_t)nv * dv + 2, pr->ldo = (int64_t)nv * dv + 5;
    pr->q = frand((size_t)T * pr->ldq, -1, 1);
    pr->k = frand((size_t)T * pr->ldk, -1, 1);
    pr->v = frand((size_t)T * pr->ldv, -1, 1);
    pr->g = frand((size_t)T * nv, gmin, 0);
    pr->beta = frand((size_t)T * nv, 0.02f, 0.98f);
}

static void prob_free(prob *pr) {
    pg_free(pr->q), pg_free(pr->k), pg_free(pr->v), pg_free(pr->g), pg_free(pr->beta);
}

static size_t state_floats(const prob *pr) {
    return (size_t)pr->p.n_v_heads * pr->p.dk * pr->p.dv;
}

/* Run a batch whose sequence i is rows [cu[i], cu[i+1]) of pr (fast path
 * with pool and the set uk, or the reference). out has pr->T rows. */
static pagoda_status run_batch(const prob *pr, const pg_gdn_batch *b, float *out, bool ref,
                               const pg_gdn_ukernels *uk, pg_pool *pool) {
    if (ref)
        return pg_ref_gdn_forward(&pr->p, b, pr->q, pr->ldq, pr->k, pr->ldk, pr->v, pr->ldv, pr->g,
                                  pr->beta, out, pr->ldo);
    pg_gdn_params p = pr->p;
    p.uk = uk;
    const size_t sb = pg_gdn_scratch_bytes(&p, pr->T, pool ? pg_pool_size(pool) : 1);
    assert_true(sb > 0);
    void *scratch = pg_malloc_aligned(sb);
    assert_non_null(scratch);
    pagoda_status st = pg_gdn_forward(&p, b, pr->q, pr->ldq, pr->k, pr->ldk, pr->v, pr->ldv, pr->g,
                                      pr->beta, out, pr->ldo, scratch, sb, pool);
    pg_free(scratch);
    return st;
}

/* One sequence: rows [r0, r1) of pr at absolute position pos (the state S
 * in/out), outputs to the same rows of out; snap > 0 copies the state after
 * snap rows to snapS. */
static void run_seq(const prob *pr, int r0, int r1, int32_t pos, float *S, float *out, bool ref,
                    const pg_gdn_ukernels *uk, pg_pool *pool, int32_t snap, float *snapS) {
    const int32_t cu[2] = {0, r1 - r0};
    float *states[1] = {S}, *snaps[1] = {snapS};
    const int32_t snaps_len[1] = {snap};
    pg_gdn_batch b = {1,    cu,   &pos, states, snap > 0 ? snaps_len : NULL, snap > 0 ? snaps : NULL,
                      NULL, NULL, NULL, 0};
    prob sub = *pr;
    sub.T = r1 - r0;
    sub.q += (int64_t)r0 * pr->ldq, sub.k += (int64_t)r0 * pr->ldk, sub.v += (int64_t)r0 * pr->ldv;
    sub.g += (int64_t)r0 * pr->p.n_v_heads, sub.beta += (int64_t)r0 * pr->p.n_v_heads;
    assert_int_equal(run_batch(&sub, &b, out + (int64_t)r0 * pr->ldo, ref, uk, pool), PAGODA_OK);
}

/* Compare output rows [r0, r1) (the heads' columns only) of a against b. */
static double out_err(const prob *pr, const float *a, const float *b, int r0, int r1) {
    const size_t w = (size_t)pr->p.n_v_heads * pr->p.dv, n = (size_t)(r1 - r0) * w;
    float *x = fbuf(n), *y = fbuf(n);
    for (int r = r0; r < r1; r++) {
        memcpy(x + (size_t)(r - r0) * w, a + (int64_t)r * pr->ldo, w * 4);
        memcpy(y + (size_t)(r - r0) * w, b + (int64_t)r * pr->ldo, w * 4);
    }
    double e = rel_err(x, y, n);
    pg_free(x), pg_free(y);
    return e;
}

static bool out_equal(const prob *pr, const float *a, const float *b, int r0, int r1) {
    const size_t w = (size_t)pr->p.n_v_heads * pr->p.dv;
    for (int r = r0; r < r1; r++)
        if (memcmp(a + (int64_t)r * pr->ldo, b + (int64_t)r * pr->ldo, w * 4)) return false;
    return true;
}

static void expect_close(double e, const char *what, int len, int pos, const char *uk) {
    if (e > g_worst) g_worst = e;
    if (!(e <= TOL_CHUNK))
        fail_msg("%s: len %d pos %d (%s): relative error %.3g > %.1g", what, len, pos, uk, e,
                 TOL_CHUNK);
}

/* ---- a case computed by hand ------------------------------------------------------------- */

/* dk = dv = 2, one head, scale 1, S0 = 0, two tokens (q, k raw: l2norm makes
 * them unit vectors up to the 1e-6 inside the root):
 *   t0: q (2, 0) -> (1, 0); k (0.5, 0) -> (1, 0); v (2, 4); g 0 (e^g = 1);
 *       beta 0.5.  kv = S^T k = 0; delta = (v - 0) 0.5 = (1, 2);
 *       S = k delta^T = [[1, 2], [0, 0]];  o = S^T q = (1, 2).
 *   t1: q (0, 3) -> (0, 1); k (3, 4) -> (0.6, 0.8); v (1, 1); g ln 0.5;
 *       beta 1.  S = 0.5 S = [[0.5, 1], [0, 0]];
 *       kv_j = 0.6 S[0][j] + 0.8 S[1][j] = (0.3, 0.6);
 *       delta = (1 - 0.3, 1 - 0.6) = (0.7, 0.4);
 *       S[0] += 0.6 delta -> (0.92, 1.24); S[1] += 0.8 delta -> (0.56, 0.32);
 *       o = S^T q = (S[1][0], S[1][1]) = (0.56, 0.32). */
static void test_hand_computed(void **state) {
    (void)state;
    const float q[4] = {2, 0, 0, 3}, k[4] = {0.5f, 0, 3, 4}, v[4] = {2, 4, 1, 1};
    const float g[2] = {0, logf(0.5f)}, beta[2] = {0.5f, 1};
    const float want_o[4] = {1, 2, 0.56f, 0.32f}, want_s[4] = {0.92f, 1.24f, 0.56f, 0.32f};
    const pg_gdn_ukernels *uk[PG_ISA_COUNT];
    const int nu = uk_sets(uk);
    for (int u = -1; u < nu; u++) {
        pg_gdn_params p = {1, 1, 2, 2, false, 1.0f, u >= 0 ? uk[u] : NULL};
        float S[4] = {0}, o[4] = {0};
        float *states[1] = {S};
        const int32_t cu[2] = {0, 2};
        pg_gdn_batch b = {1, cu, NULL, states, NULL, NULL, NULL, NULL, NULL, 0};
        if (u < 0) {
            assert_int_equal(pg_ref_gdn_forward(&p, &b, q, 2, k, 2, v, 2, g, beta, o, 2),
                             PAGODA_OK);
        } else {
            char scratch[1 << 16];
            assert_true(pg_gdn_scratch_bytes(&p, 2, 1) <= sizeof scratch);
            assert_int_equal(pg_gdn_forward(&p, &b, q, 2, k, 2, v, 2, g, beta, o, 2, scratch,
                                            sizeof scratch, NULL),
                             PAGODA_OK);
        }
        for (int i = 0; i < 4; i++) {
            if (fabsf(o[i] - want_o[i]) > 1e-5f)
                fail_msg("%s: o[%d] = %.7g, want %g", u < 0 ? "ref" : uk[u]->name, i, (double)o[i],
                         (double)want_o[i]);
            if (fabsf(S[i] - want_s[i]) > 1e-5f)
                fail_msg("%s: S[%d] = %.7g, want %g", u < 0 ? "ref" : uk[u]->name, i, (double)S[i],
                         (double)want_s[i]);
        }
    }
}

/* ---- the chunked form against the recurrence -------------------------------------------- */

typedef struct cfg {
    int nk, nv;
    bool tiled;
    int dk, dv;
} cfg;

/* One sequence of len rows from position pos with a random initial state:
 * fast (set uk) against the reference, outputs and final state. */
static void check_seq(const cfg *c, int len, int pos, float gmin, const pg_gdn_ukernels *uk) {
    prob pr;
    prob_init(&pr, c->nk, c->nv, c->tiled, c->dk, c->dv, len, gmin);
    const size_t ns = state_floats(&pr);
    float *S1 = frand(ns, -0.5f, 0.5f), *S2 = fdup(S1, ns);
    float *o1 = fbuf((size_t)len * pr.ldo), *o2 = fbuf((size_t)len * pr.ldo);
    run_seq(&pr, 0, len, pos, S1, o1, true, NULL, NULL, 0, NULL);
    run_seq(&pr, 0, len, pos, S2, o2, false, uk, NULL, 0, NULL);
    char what[96];
    snprintf(what, sizeof what, "nk %d nv %d %s dk %d dv %d output", c->nk, c->nv,
             c->tiled ? "tiled" : "grouped", c->dk, c->dv);
    expect_close(out_err(&pr, o2, o1, 0, len), what, len, pos, uk->name);
    snprintf(what, sizeof what, "nk %d nv %d %s dk %d dv %d state", c->nk, c->nv,
             c->tiled ? "tiled" : "grouped", c->dk, c->dv);
    expect_close(rel_err(S2, S1, ns), what, len, pos, uk->name);
    /* pieces shorter than PG_GDN_MIN_CHUNK run the recurrent form: bitwise */
    const int first = PG_GDN_CHUNK - pos % PG_GDN_CHUNK;
    if (len <= first && len < PG_GDN_MIN_CHUNK) {
        assert_true(out_equal(&pr, o2, o1, 0, len));
        assert_memory_equal(S1, S2, ns * 4);
    }
    pg_free(S1), pg_free(S2), pg_free(o1), pg_free(o2);
    prob_free(&pr);
}

static const cfg SMALL[] = {
    {1, 1, false, 16, 16}, {2, 4, false, 16, 16}, {2, 4, true, 16, 16},
    {1, 2, false, 16, 24}, {2, 2, true, 24, 16},  {1, 2, true, 8, 40},
};

static void test_chunked_matches_recurrence_lengths(void **state) {
    (void)state;
    const pg_gdn_ukernels *best = pg_kernels()->gdn;
    const int nc = (int)(sizeof SMALL / sizeof SMALL[0]);
    for (int len = 1; len <= 300; len++)
        check_seq(&SMALL[len % nc], len, rnd_int(0, 200), len % 2 ? -2.0f : -0.05f, best);
    /* no decay at all (g = 0), and decays that underflow within a chunk */
    for (int len = 60; len <= 300; len += 80) {
        check_seq(&SMALL[len % nc], len, rnd_int(0, 200), 0.0f, best);
        check_seq(&SMALL[(len + 1) % nc], len, rnd_int(0, 200), -40.0f, best);
    }
}

static void test_chunked_matches_recurrence_big_heads(void **state) {
    (void)state;
    const pg_gdn_ukernels *uk[PG_ISA_COUNT];
    const int nu = uk_sets(uk);
    const cfg big[3] = {{1, 2, false, 128, 128}, {1, 2, true, 128, 128}, {2, 2, false, 128, 64}};
    const int lens[6] = {1, 17, 64, 100, 150, 300};
    for (int u = 0; u < nu; u++)
        for (int i = 0; i < 6; i++)
            check_seq(&big[i % 3], lens[i], rnd_int(0, 130), i % 2 ? -1.0f : -0.02f, uk[u]);
    /* every set on the small shapes too */
    for (int u = 0; u < nu; u++)
        for (int len = 10; len <= 140; len += 13)
            check_seq(&SMALL[len % 6], len, rnd_int(0, 90), -1.0f, uk[u]);
}

/* A conversation: state carried across calls of random lengths (decode and
 * prefill steps), fast against reference after every call. */
static void test_state_carried_across_calls(void **state) {
    (void)state;
    const cfg c = {2, 4, false, 32, 32};
    prob pr;
    prob_init(&pr, c.nk, c.nv, c.tiled, c.dk, c.dv, 700, -0.5f);
    const size_t ns = state_floats(&pr);
    float *S1 = fbuf(ns), *S2 = fbuf(ns);
    memset(S1, 0, ns * 4), memset(S2, 0, ns * 4);
    float *o1 = fbuf((size_t)pr.T * pr.ldo), *o2 = fbuf((size_t)pr.T * pr.ldo);
    int r = 0;
    const int steps[10] = {5, 1, 1, 90, 1, 33, 64, 130, 1, 200};
    for (int i = 0; i < 10 && r + steps[i] <= pr.T; i++) {
        run_seq(&pr, r, r + steps[i], r, S1, o1, true, NULL, NULL, 0, NULL);
        run_seq(&pr, r, r + steps[i], r, S2, o2, false, NULL, g_pool2, 0, NULL);
        expect_close(out_err(&pr, o2, o1, r, r + steps[i]), "carried output", steps[i], r,
                     "default");
        expect_close(rel_err(S2, S1, ns), "carried state", steps[i], r, "default");
        r += steps[i];
    }
    pg_free(S1), pg_free(S2), pg_free(o1), pg_free(o2);
    prob_free(&pr);
}

/* ---- decomposition: steps, snapshots -------------------------------------------------------- */

static void test_steps_at_multiples_of_64_are_bitwise(void **state) {
    (void)state;
    const cfg c = {1, 2, false, 32, 48};
    const int pos0s[3] = {0, 37, 64};
    for (int pi = 0; pi < 3; pi++) {
        const int pos0 = pos0s[pi], T = 300;
        prob pr;
        prob_init(&pr, c.nk, c.nv, c.tiled, c.dk, c.dv, T, -0.3f);
        const size_t ns = state_floats(&pr);
        float *S0 = frand(ns, -0.5f, 0.5f), *S1 = fdup(S0, ns), *S2 = fdup(S0, ns);
        float *S3 = fdup(S0, ns);
        float *o1 = fbuf((size_t)T * pr.ldo), *o2 = fbuf((size_t)T * pr.ldo);
        float *o3 = fbuf((size_t)T * pr.ldo);
        run_seq(&pr, 0, T, pos0, S1, o1, false, NULL, NULL, 0, NULL);
        /* steps ending at absolute multiples of 64 (and the end) */
        int r = 0, k = 0;
        while (r < T) {
            int end = ((pos0 + r) / 64 + 1 + k % 3) * 64 - pos0;
            if (end > T) end = T;
            run_seq(&pr, r, end, pos0 + r, S2, o2, false, NULL, g_pool2, 0, NULL);
            r = end, k++;
        }
        assert_true(out_equal(&pr, o1, o2, 0, T));
        assert_memory_equal(S1, S2, ns * 4);
        /* any other split: within tolerance */
        const int cuts[4] = {0, 100, 103, T};
        for (int i = 0; i < 3; i++)
            run_seq(&pr, cuts[i], cuts[i + 1], pos0 + cuts[i], S3, o3, false, NULL, NULL, 0, NULL);
        expect_close(out_err(&pr, o3, o1, 0, T), "odd split output", T, pos0, "default");
        expect_close(rel_err(S3, S1, ns), "odd split state", T, pos0, "default");
        pg_free(S0), pg_free(S1), pg_free(S2), pg_free(S3);
        pg_free(o1), pg_free(o2), pg_free(o3);
        prob_free(&pr);
    }
}

static void test_snapshots(void **state) {
    (void)state;
    const cfg c = {2, 4, true, 16, 32};
    const int T = 250;
    prob pr;
    prob_init(&pr, c.nk, c.nv, c.tiled, c.dk, c.dv, T, -0.4f);
    const size_t ns = state_floats(&pr);
    float *S0 = frand(ns, -0.5f, 0.5f);
    const int snaps[5] = {1, 100, 128, 7, T};
    const int pos0s[5] = {0, 0, 0, 60, 10};
    for (int i = 0; i < 5; i++) {
        const int n = snaps[i], pos0 = pos0s[i];
        float *Sa = fdup(S0, ns), *Sb = fdup(S0, ns), *Sc = fdup(S0, ns), *snap = fbuf(ns);
        float *Sr = fdup(S0, ns), *snapr = fbuf(ns);
        float *oa = fbuf((size_t)T * pr.ldo), *ob = fbuf((size_t)T * pr.ldo);
        float *oc = fbuf((size_t)T * pr.ldo), *orf = fbuf((size_t)T * pr.ldo);
        run_seq(&pr, 0, T, pos0, Sa, oa, false, NULL, g_pool2, n, snap);
        run_seq(&pr, 0, n, pos0, Sb, ob, false, NULL, NULL, 0, NULL);
        /* the snapshot is bitwise the state of the shorter call; so are its rows */
        assert_memory_equal(snap, Sb, ns * 4);
        assert_true(out_equal(&pr, oa, ob, 0, n));
        /* continuing from the snapshot gives the rest bitwise */
        run_seq(&pr, n, T, pos0 + n, Sb, ob, false, NULL, NULL, 0, NULL);
        assert_true(out_equal(&pr, oa, ob, 0, T));
        assert_memory_equal(Sa, Sb, ns * 4);
        /* without the snapshot: the same within tolerance; the reference agrees */
        run_seq(&pr, 0, T, pos0, Sc, oc, false, NULL, NULL, 0, NULL);
        expect_close(out_err(&pr, oa, oc, 0, T), "snapshot vs none", T, pos0, "default");
        run_seq(&pr, 0, T, pos0, Sr, orf, true, NULL, NULL, n, snapr);
        expect_close(rel_err(snap, snapr, ns), "snapshot vs reference", n, pos0, "default");
        pg_free(Sa), pg_free(Sb), pg_free(Sc), pg_free(snap), pg_free(Sr), pg_free(snapr);
        pg_free(oa), pg_free(ob), pg_free(oc), pg_free(orf);
    }
    pg_free(S0);
    prob_free(&pr);
}

/* Per-row snapshots (speculative decoding's verification): a sequence of n
 * rows with row_snaps = m writes the state after each of its first m rows,
 * bitwise the states of n one-row calls (decode steps), and its outputs are
 * theirs too, whatever its position (across a 64 boundary) and length (the
 * chunked form would take >= 16 rows); the reference writes the same. The
 * conv's row snapshots are the conv states of one-row calls. */
static void test_row_snapshots(void **state) {
    (void)state;
    const cfg c = {2, 4, true, 16, 32};
    const int T = 20;
    prob pr;
    prob_init(&pr, c.nk, c.nv, c.tiled, c.dk, c.dv, T, -0.4f);
    const size_t ns = state_floats(&pr);
    float *S0 = frand(ns, -0.5f, 0.5f);
    const int lens[3] = {5, 17, 20}, pos0s[3] = {0, 60, 3};
    for (int i = 0; i < 3; i++) {
        const int n = lens[i], m = n - 1, pos0 = pos0s[i];
        float *Sa = fdup(S0, ns), *Sb = fdup(S0, ns), *Sr = fdup(S0, ns);
        float *rows = fbuf(ns * (size_t)m), *rowsr = fbuf(ns * (size_t)m);
        float *oa = fbuf((size_t)T * pr.ldo), *ob = fbuf((size_t)T * pr.ldo);
        float *orf = fbuf((size_t)T * pr.ldo);
        const int32_t cu[2] = {0, n}, rs[1] = {m};
        int32_t pos = pos0;
        float *sts[1] = {Sa}, *rp[1] = {rows}, *stsr[1] = {Sr}, *rpr[1] = {rowsr};
        pg_gdn_batch b = {1, cu, &pos, sts, NULL, NULL, rs, rp, NULL, (int64_t)ns};
        assert_int_equal(run_batch(&pr, &b, oa, false, NULL, g_pool2), PAGODA_OK);
        pg_gdn_batch br = {1, cu, &pos, stsr, NULL, NULL, rs, rpr, NULL, (int64_t)ns};
        assert_int_equal(run_batch(&pr, &br, orf, true, NULL, NULL), PAGODA_OK);
        for (int r = 0; r < n; r++) {
            run_seq(&pr, r, r + 1, pos0 + r, Sb, ob, false, NULL, NULL, 0, NULL);
            if (r < m) {
                assert_memory_equal(rows + (size_t)r * ns, Sb, ns * 4);
                expect_close(rel_err(rowsr + (size_t)r * ns, Sb, ns), "row snapshot vs reference",
                             r, pos0, "default");
            }
        }
        assert_true(out_equal(&pr, oa, ob, 0, n));
        assert_memory_equal(Sa, Sb, ns * 4);
        pg_free(Sa), pg_free(Sb), pg_free(Sr), pg_free(rows), pg_free(rowsr);
        pg_free(oa), pg_free(ob), pg_free(orf);
    }
    /* the conv: states after each row = one-row calls' states */
    const int C = 37, K = 4, H = K - 1, n = 6;
    const int64_t ldx = C + 3;
    float *w = frand((size_t)C * K, -1, 1), *x = frand((size_t)n * ldx, -2, 2);
    float *y1 = fbuf((size_t)n * ldx), *y2 = fbuf((size_t)n * ldx);
    float *st1 = frand((size_t)H * C, -1, 1), *st2 = fdup(st1, (size_t)H * C);
    float *rows = fbuf((size_t)(n - 1) * H * C);
    {
        const int32_t cu[2] = {0, n}, rs[1] = {n - 1};
        float *sts[1] = {st1}, *rp[1] = {rows};
        pg_gdn_batch b = {1, cu, NULL, NULL, NULL, NULL, rs, NULL, rp, (int64_t)H * C};
        assert_int_equal(pg_gdn_conv1d(C, K, w, &b, sts, NULL, x, ldx, y1, ldx, g_pool2),
                         PAGODA_OK);
    }
    for (int r = 0; r < n; r++) {
        const int32_t cu[2] = {0, 1};
        float *sts[1] = {st2};
        pg_gdn_batch b = {1, cu, NULL, NULL, NULL, NULL, NULL, NULL, NULL, 0};
        assert_int_equal(pg_gdn_conv1d(C, K, w, &b, sts, NULL, x + (int64_t)r * ldx, ldx,
                                       y2 + (int64_t)r * ldx, ldx, NULL),
                         PAGODA_OK);
        if (r < n - 1) assert_memory_equal(rows + (size_t)r * H * C, st2, (size_t)H * C * 4);
    }
    assert_memory_equal(st1, st2, (size_t)H * C * 4);
    pg_free(w), pg_free(x), pg_free(y1), pg_free(y2), pg_free(st1), pg_free(st2), pg_free(rows);
    pg_free(S0);
    prob_free(&pr);
}

/* ---- batch and thread invariance --------------------------------------------------------------
 */

static void test_batch_invariance(void **state) {
    (void)state;
    const cfg cs[2] = {{2, 4, false, 32, 64}, {1, 1, false, 16, 128}};
    for (int ci = 0; ci < 2; ci++) {
        const cfg c = cs[ci];
        enum { NS = 6 };
        const int32_t lens[NS] = {1, 70, 0, 5, 130, 16};
        const int32_t pos[NS] = {500, 3, 9, 62, 0, 48};
        const int32_t snl[NS] = {0, 40, 0, 5, 64, 0};
        int32_t cu[NS + 1] = {0};
        for (int s = 0; s < NS; s++)
            cu[s + 1] = cu[s] + lens[s];
        prob pr;
        prob_init(&pr, c.nk, c.nv, c.tiled, c.dk, c.dv, cu[NS], -0.5f);
        const size_t ns = state_floats(&pr);
        float *init[NS], *Sb[NS], *Sn[NS], *So[NS], *snapb[NS], *snapo[NS], *snapn[NS];
        for (int s = 0; s < NS; s++) {
            init[s] = frand(ns, -0.5f, 0.5f);
            Sb[s] = fdup(init[s], ns), So[s] = fdup(init[s], ns), Sn[s] = fdup(init[s], ns);
            snapb[s] = fbuf(ns), snapo[s] = fbuf(ns), snapn[s] = fbuf(ns);
        }
        float *ob = fbuf((size_t)pr.T * pr.ldo), *oo = fbuf((size_t)pr.T * pr.ldo);
        float *on = fbuf((size_t)pr.T * pr.ldo);
        /* the whole batch on 2 threads, and on the calling thread */
        pg_gdn_batch b = {NS, cu, pos, Sb, snl, snapb, NULL, NULL, NULL, 0};
        assert_int_equal(run_batch(&pr, &b, ob, false, NULL, g_pool2), PAGODA_OK);
        pg_gdn_batch b1 = {NS, cu, pos, Sn, snl, snapn, NULL, NULL, NULL, 0};
        assert_int_equal(run_batch(&pr, &b1, on, false, NULL, NULL), PAGODA_OK);
        /* each sequence alone, single thread */
        for (int s = 0; s < NS; s++)
            run_seq(&pr, cu[s], cu[s + 1], pos[s], So[s], oo, false, NULL, NULL, snl[s], snapo[s]);
        assert_true(out_equal(&pr, ob, oo, 0, pr.T));
        assert_true(out_equal(&pr, on, oo, 0, pr.T));
        for (int s = 0; s < NS; s++) {
            assert_memory_equal(Sb[s], So[s], ns * 4);
            assert_memory_equal(Sn[s], So[s], ns * 4);
            if (snl[s] > 0) assert_memory_equal(snapb[s], snapo[s], ns * 4);
            if (snl[s] > 0) assert_memory_equal(snapn[s], snapo[s], ns * 4);
        }
        for (int s = 0; s < NS; s++) {
            pg_free(init[s]), pg_free(Sb[s]), pg_free(So[s]), pg_free(Sn[s]);
            pg_free(snapb[s]), pg_free(snapo[s]), pg_free(snapn[s]);
        }
        pg_free(ob), pg_free(oo), pg_free(on);
        prob_free(&pr);
    }
}

/* Few (sequence, head) pairs for the threads: heads split into column
 * blocks (4 on 2 threads, 2 on 1 thread, none in a batch of 5 sequences);
 * the bits stay the same. */
static void test_column_split_invariance(void **state) {
    (void)state;
    const int dvs[2] = {128, 100};
    for (int di = 0; di < 2; di++) {
        enum { NS = 5, LEN = 90 };
        prob pr;
        prob_init(&pr, 1, 1, false, 32, dvs[di], NS * LEN, -0.3f);
        /* the same sequence NS times */
        for (int s = 1; s < NS; s++) {
            memcpy(pr.q + (size_t)s * LEN * pr.ldq, pr.q, (size_t)LEN * pr.ldq * 4);
            memcpy(pr.k + (size_t)s * LEN * pr.ldk, pr.k, (size_t)LEN * pr.ldk * 4);
            memcpy(pr.v + (size_t)s * LEN * pr.ldv, pr.v, (size_t)LEN * pr.ldv * 4);
            memcpy(pr.g + (size_t)s * LEN, pr.g, (size_t)LEN * 4);
            memcpy(pr.beta + (size_t)s * LEN, pr.beta, (size_t)LEN * 4);
        }
        const size_t ns = state_floats(&pr);
        float *S0 = frand(ns, -0.5f, 0.5f), *Sa = fdup(S0, ns), *Sb = fdup(S0, ns);
        float *oa = fbuf((size_t)pr.T * pr.ldo), *ob = fbuf((size_t)pr.T * pr.ldo);
        float *oc = fbuf((size_t)pr.T * pr.ldo), *Sr = fdup(S0, ns),
              *orf = fbuf((size_t)pr.T * pr.ldo);
        run_seq(&pr, 0, LEN, 5, Sa, oa, false, NULL, g_pool2, 0, NULL);
        run_seq(&pr, 0, LEN, 5, Sb, ob, false, NULL, NULL, 0, NULL);
        assert_true(out_equal(&pr, oa, ob, 0, LEN));
        assert_memory_equal(Sa, Sb, ns * 4);
        int32_t cu[NS + 1], pos[NS];
        float *Sc[NS];
        for (int s = 0; s < NS; s++)
            cu[s] = s * LEN, pos[s] = 5, Sc[s] = fdup(S0, ns);
        cu[NS] = NS * LEN;
        pg_gdn_batch b = {NS, cu, pos, Sc, NULL, NULL, NULL, NULL, NULL, 0};
        assert_int_equal(run_batch(&pr, &b, oc, false, NULL, NULL), PAGODA_OK);
        for (int s = 0; s < NS; s++) {
            for (int r = 0; r < LEN; r++)
                assert_memory_equal(oc + (int64_t)(s * LEN + r) * pr.ldo, oa + (int64_t)r * pr.ldo,
                                    (size_t)pr.p.dv * 4);
            assert_memory_equal(Sc[s], Sa, ns * 4);
            pg_free(Sc[s]);
        }
        run_seq(&pr, 0, LEN, 5, Sr, orf, true, NULL, NULL, 0, NULL);
        expect_close(out_err(&pr, oa, orf, 0, LEN), "column split output", LEN, 5, "default");
        expect_close(rel_err(Sa, Sr, ns), "column split state", LEN, 5, "default");
        pg_free(S0), pg_free(Sa), pg_free(Sb), pg_free(Sr);
        pg_free(oa), pg_free(ob), pg_free(oc), pg_free(orf);
        prob_free(&pr);
    }
}

/* ---- conv1d -----------------------------------------------------------------------------------
 */

/* y_t[c] = silu(sum_j w[c][j] x_{t-K+1+j}[c]) over one sequence from zero history. */
static void conv_direct(int C, int K, const float *w, const float *x, int64_t ldx, int T,
                        double *y) {
    for (int t = 0; t < T; t++)
        for (int c = 0; c < C; c++) {
            double s = 0;
            for (int j = 0; j < K; j++) {
                const int tt = t - K + 1 + j;
                if (tt >= 0) s += (double)w[c * K + j] * x[(int64_t)tt * ldx + c];
            }
            y[(size_t)t * C + c] = s / (1 + exp(-s));
        }
}

static void test_conv1d(void **state) {
    (void)state;
    const int Cs[3] = {37, 300, 8}, Ks[3] = {4, 4, 2};
    for (int ci = 0; ci < 3; ci++) {
        const int C = Cs[ci], K = Ks[ci], T = 50, H = K - 1;
        const int64_t ldx = C + 3, ldy = C + 1;
        float *w = frand((size_t)C * K, -1, 1), *x = frand((size_t)T * ldx, -2, 2);
        double *yd = malloc(sizeof(double) * (size_t)T * C);
        assert_non_null(yd);
        conv_direct(C, K, w, x, ldx, T, yd);
        float *y1 = fbuf((size_t)T * ldy), *y2 = fbuf((size_t)T * ldy), *y3 = fbuf((size_t)T * ldy);
        float *st1 = fbuf((size_t)(H ? H : 1) * C), *st2 = fbuf((size_t)(H ? H : 1) * C);
        float *st3 = fbuf((size_t)(H ? H : 1) * C), *snap = fbuf((size_t)(H ? H : 1) * C);
        memset(st1, 0, (size_t)H * C * 4), memset(st2, 0, (size_t)H * C * 4);
        memset(st3, 0, (size_t)H * C * 4);
        /* one call (with a snapshot after 20 rows) */
        {
            const int32_t cu[2] = {0, T}, sl[1] = {20};
            float *sts[1] = {st1}, *sn[1] = {snap};
            pg_gdn_batch b = {1, cu, NULL, NULL, sl, sn, NULL, NULL, NULL, 0};
            assert_int_equal(pg_gdn_conv1d(C, K, w, &b, sts, sn, x, ldx, y1, ldy, g_pool2),
                             PAGODA_OK);
        }
        /* steps of 1, 2, 17, 3, 27 rows carrying the state; the reference too */
        const int steps[5] = {1, 2, 17, 3, 27};
        for (int i = 0, r = 0; i < 5; r += steps[i], i++) {
            const int32_t cu[2] = {0, steps[i]};
            float *sts[1] = {st2}, *sts3[1] = {st3};
            pg_gdn_batch b = {1, cu, NULL, NULL, NULL, NULL, NULL, NULL, NULL, 0};
            assert_int_equal(pg_gdn_conv1d(C, K, w, &b, sts, NULL, x + (int64_t)r * ldx, ldx,
                                           y2 + (int64_t)r * ldy, ldy, NULL),
                             PAGODA_OK);
            assert_int_equal(pg_ref_gdn_conv1d(C, K, w, &b, sts3, NULL, x + (int64_t)r * ldx, ldx,
                                               y3 + (int64_t)r * ldy, ldy),
                             PAGODA_OK);
            if (r + steps[i] == 20) assert_memory_equal(snap, st2, (size_t)H * C * 4);
        }
        for (int t = 0; t < T; t++) {
            assert_memory_equal(y1 + (int64_t)t * ldy, y2 + (int64_t)t * ldy, (size_t)C * 4);
            for (int c = 0; c < C; c++) {
                const double want = yd[(size_t)t * C + c];
                const float got = y1[(int64_t)t * ldy + c], gref = y3[(int64_t)t * ldy + c];
                if (fabs(got - want) > 1e-5 * (1 + fabs(want)) ||
                    fabs(gref - want) > 1e-5 * (1 + fabs(want)))
                    fail_msg("conv C %d t %d c %d: %.8g / ref %.8g, want %.8g", C, t, c,
                             (double)got, (double)gref, want);
            }
        }
        assert_memory_equal(st1, st2, (size_t)H * C * 4);
        assert_memory_equal(st1, st3, (size_t)H * C * 4);
        for (int m = 0; m < H; m++) /* the state is the last K-1 inputs */
            assert_memory_equal(st1 + (size_t)m * C, x + (int64_t)(T - H + m) * ldx, (size_t)C * 4);
        /* in place (y == x), as a batch of two sequences on the pool */
        {
            float *xx = fdup(x, (size_t)T * ldx), *sa = fbuf((size_t)(H ? H : 1) * C * 2);
            memset(sa, 0, (size_t)H * C * 2 * 4);
            const int32_t cu[3] = {0, 20, T};
            float *sts[2] = {sa, sa + (size_t)H * C};
            pg_gdn_batch b = {2, cu, NULL, NULL, NULL, NULL, NULL, NULL, NULL, 0};
            assert_int_equal(pg_gdn_conv1d(C, K, w, &b, sts, NULL, xx, ldx, xx, ldx, g_pool2),
                             PAGODA_OK);
            for (int t = 0; t < 20; t++) /* sequence 0 = the first 20 rows of the single call */
                assert_memory_equal(xx + (int64_t)t * ldx, y1 + (int64_t)t * ldy, (size_t)C * 4);
            /* sequence 1 starts fresh: its rows equal a fresh call on rows 20.. */
            float *yf = fbuf((size_t)T * ldy), *sf = fbuf((size_t)(H ? H : 1) * C);
            memset(sf, 0, (size_t)H * C * 4);
            const int32_t cu1[2] = {0, T - 20};
            float *sfs[1] = {sf};
            pg_gdn_batch b1 = {1, cu1, NULL, NULL, NULL, NULL, NULL, NULL, NULL, 0};
            assert_int_equal(
                pg_gdn_conv1d(C, K, w, &b1, sfs, NULL, x + 20 * ldx, ldx, yf, ldy, NULL),
                PAGODA_OK);
            for (int t = 20; t < T; t++)
                assert_memory_equal(xx + (int64_t)t * ldx, yf + (int64_t)(t - 20) * ldy,
                                    (size_t)C * 4);
            assert_memory_equal(sts[1], sf, (size_t)H * C * 4);
            pg_free(xx), pg_free(sa), pg_free(yf), pg_free(sf);
        }
        pg_free(w), pg_free(x), free(yd), pg_free(y1), pg_free(y2), pg_free(y3);
        pg_free(st1), pg_free(st2), pg_free(st3), pg_free(snap);
    }
}

/* ---- gates and the gated norm -------------------------------------------------------------------
 */

static void test_gates(void **state) {
    (void)state;
    enum { T = 9, NV = 5 };
    float a[T * 7], bb[T * 6], g[T * NV], beta[T * NV];
    const float a_neg[NV] = {-0.01f, -1, -3.5f, -16, -0.5f}, dt[NV] = {0.5f, -1, 2, 0, 25};
    for (int i = 0; i < T * 7; i++)
        a[i] = 12 * rnd();
    for (int i = 0; i < T * 6; i++)
        bb[i] = 10 * rnd();
    a[0] = 30, a[7] = -30, bb[0] = -90, bb[6] = 90;
    pg_gdn_gates(T, NV, a, 7, bb, 6, a_neg, dt, g, beta);
    for (int t = 0; t < T; t++)
        for (int h = 0; h < NV; h++) {
            const double x = (double)(a[t * 7 + h] + dt[h]); /* the f32 sum the kernel sees */
            const double sp = x > 20 ? x : log1p(exp(x));
            const double wg = a_neg[h] * sp, wb = 1 / (1 + exp(-(double)bb[t * 6 + h]));
            if (fabs(g[t * NV + h] - wg) > 2e-6 * (1e-30 + fabs(wg)))
                fail_msg("g[%d][%d] = %.9g, want %.9g", t, h, (double)g[t * NV + h], wg);
            if (fabs(beta[t * NV + h] - wb) > 2e-6 * wb + 1e-37)
                fail_msg("beta[%d][%d] = %.9g, want %.9g", t, h, (double)beta[t * NV + h], wb);
            assert_true(g[t * NV + h] <= 0 && beta[t * NV + h] >= 0 && beta[t * NV + h] <= 1);
        }
}

static void test_gated_rmsnorm(void **state) {
    (void)state;
    enum { T = 4, H = 3, DV = 40 };
    const int64_t ldx = H * DV + 3, ldz = H * DV + 1, ldo = H * DV + 2;
    float *x = frand(T * ldx, -2, 2), *z = frand(T * ldz, -6, 6), *w = frand(DV, 0.5f, 1.5f);
    float *o = fbuf(T * ldo), *xi = fdup(x, T * ldx);
    pg_gdn_gated_rmsnorm(T, H, DV, x, ldx, z, ldz, w, 1e-6f, o, ldo);
    pg_gdn_gated_rmsnorm(T, H, DV, xi, ldx, z, ldz, w, 1e-6f, xi, ldx); /* in place */
    float *orf = fbuf(T * ldo);
    pg_ref_gdn_gated_rmsnorm(T, H, DV, x, ldx, z, ldz, w, 1e-6f, orf, ldo);
    for (int t = 0; t < T; t++)
        for (int h = 0; h < H; h++) {
            const float *xh = x + t * ldx + h * DV, *zh = z + t * ldz + h * DV;
            double ss = 0;
            for (int i = 0; i < DV; i++)
                ss += (double)xh[i] * xh[i];
            const double r = 1 / sqrt(ss / DV + 1e-6);
            for (int i = 0; i < DV; i++) {
                const double want = xh[i] * r * w[i] * (zh[i] / (1 + exp(-(double)zh[i])));
                const float got = o[t * ldo + h * DV + i], gref = orf[t * ldo + h * DV + i];
                if (fabs(got - want) > 1e-5 * (1 + fabs(want)) ||
                    fabs(gref - want) > 1e-5 * (1 + fabs(want)))
                    fail_msg("norm t %d h %d i %d: %.8g / ref %.8g, want %.8g", t, h, i,
                             (double)got, (double)gref, want);
                assert_true(got == xi[t * ldx + h * DV + i]);
            }
        }
    pg_free(x), pg_free(z), pg_free(w), pg_free(o), pg_free(xi), pg_free(orf);
}

/* ---- bad arguments
 * -------------------------------------------------------------------------------- */

static void test_bad_arguments(void **state) {
    (void)state;
    prob pr;
    prob_init(&pr, 2, 4, false, 16, 16, 10, -1);
    const size_t ns = state_floats(&pr);
    float *S = fbuf(ns), *out = fbuf((size_t)pr.T * pr.ldo);
    float *states[2] = {S, S};
    int32_t cu[3] = {0, 4, 10}, pos[2] = {0, 0}, sl[2] = {0, 0};
    pg_gdn_batch b = {2, cu, pos, states, sl, NULL, NULL, NULL, NULL, 0};
    const size_t sb = pg_gdn_scratch_bytes(&pr.p, pr.T, 1);
    void *scratch = pg_malloc_aligned(sb);
    const pg_gdn_params good = pr.p;
#define FWD(pp, ldo_)                                                                              \
    pg_gdn_forward(&(pp), &b, pr.q, pr.ldq, pr.k, pr.ldk, pr.v, pr.ldv, pr.g, pr.beta, out, ldo_,  \
                   scratch, sb, NULL)
    memset(S, 0, ns * 4);
    assert_int_equal(FWD(good, pr.ldo), PAGODA_OK);
    pg_gdn_params p = good;
    p.n_v_heads = 3;
    assert_int_equal(FWD(p, pr.ldo), PAGODA_ERR_INVALID_ARG);
    p = good, p.dk = 0;
    assert_int_equal(FWD(p, pr.ldo), PAGODA_ERR_INVALID_ARG);
    p = good, p.dv = PG_GDN_MAX_HEAD_DIM + 1;
    assert_int_equal(FWD(p, pr.ldo), PAGODA_ERR_INVALID_ARG);
    assert_int_equal(FWD(good, 4 * 16 - 1), PAGODA_ERR_INVALID_ARG);
    sl[1] = 7; /* longer than the sequence */
    assert_int_equal(FWD(good, pr.ldo), PAGODA_ERR_INVALID_ARG);
    sl[1] = 3; /* no snapshot buffers */
    assert_int_equal(FWD(good, pr.ldo), PAGODA_ERR_INVALID_ARG);
    sl[1] = 0, pos[1] = -1;
    assert_int_equal(FWD(good, pr.ldo), PAGODA_ERR_INVALID_ARG);
    pos[1] = 0, cu[0] = 1;
    assert_int_equal(FWD(good, pr.ldo), PAGODA_ERR_INVALID_ARG);
    cu[0] = 0, cu[1] = 11;
    assert_int_equal(FWD(good, pr.ldo), PAGODA_ERR_INVALID_ARG);
    cu[1] = 4, states[1] = NULL;
    assert_int_equal(FWD(good, pr.ldo), PAGODA_ERR_INVALID_ARG);
    states[1] = S;
    assert_int_equal(pg_gdn_forward(&good, &b, pr.q, pr.ldq, pr.k, pr.ldk, pr.v, pr.ldv, pr.g,
                                    pr.beta, out, pr.ldo, scratch, sb - 1, NULL),
                     PAGODA_ERR_INVALID_ARG);
    assert_int_equal(pg_ref_gdn_forward(&p, &b, pr.q, pr.ldq, pr.k, pr.ldk, pr.v, pr.ldv, pr.g,
                                        pr.beta, out, pr.ldo),
                     PAGODA_ERR_INVALID_ARG);
    assert_int_equal(pg_gdn_scratch_bytes(&p, 10, 1), 0);
    /* conv */
    float w[8], cs[64], x[64];
    float *css[2] = {cs, cs};
    assert_int_equal(pg_gdn_conv1d(8, 0, w, &b, css, NULL, x, 8, x, 8, NULL),
                     PAGODA_ERR_INVALID_ARG);
    assert_int_equal(pg_gdn_conv1d(8, 17, w, &b, css, NULL, x, 8, x, 8, NULL),
                     PAGODA_ERR_INVALID_ARG);
    assert_int_equal(pg_gdn_conv1d(8, 4, w, &b, css, NULL, x, 7, x, 8, NULL),
                     PAGODA_ERR_INVALID_ARG);
    css[1] = NULL;
    assert_int_equal(pg_gdn_conv1d(8, 4, w, &b, css, NULL, x, 8, x, 8, NULL),
                     PAGODA_ERR_INVALID_ARG);
#undef FWD
    pg_free(S), pg_free(out), pg_free(scratch);
    prob_free(&pr);
}

static int setup(void **state) {
    (void)state;
    pg_pool_options o = pg_pool_options_default();
    o.n_threads = 2;
    o.pin = 0;
    return pg_pool_create(&o, &g_pool2) == PAGODA_OK ? 0 : -1;
}
static int teardown(void **state) {
    (void)state;
    pg_pool_free(g_pool2);
    printf("gated delta: largest chunked-vs-recurrent relative error %.3g (tolerance %.1g)\n",
           g_worst, TOL_CHUNK);
    return 0;
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ukernels_match_reference),
        cmocka_unit_test(test_hand_computed),
        cmocka_unit_test(test_chunked_matches_recurrence_lengths),
        cmocka_unit_test(test_chunked_matches_recurrence_big_heads),
        cmocka_unit_test(test_state_carried_across_calls),
        cmocka_unit_test(test_steps_at_multiples_of_64_are_bitwise),
        cmocka_unit_test(test_snapshots),
        cmocka_unit_test(test_row_snapshots),
        cmocka_unit_test(test_batch_invariance),
        cmocka_unit_test(test_column_split_invariance),
        cmocka_unit_test(test_conv1d),
        cmocka_unit_test(test_gates),
        cmocka_unit_test(test_gated_rmsnorm),
        cmocka_unit_test(test_bad_arguments),
    };
    if (getenv("PAGODA_TEST_FILTER")) cmocka_set_test_filter(getenv("PAGODA_TEST_FILTER"));
    return cmocka_run_group_tests(tests, setup, teardown);
}
