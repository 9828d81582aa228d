/* Sampler (src/engine/sampler.h) and its per-request RNG (src/engine/rng.h). */
#include "testutil.h"

#include <float.h>
#include <math.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "engine/rng.h"
#include "engine/sampler.h"

/* ---- helpers */

/* Deterministic test data (xorshift64*), independent of the code under test. */
static uint64_t g_state = 0x243F6A8885A308D3ull;
static double test_rand(void) {
    g_state ^= g_state >> 12;
    g_state ^= g_state << 25;
    g_state ^= g_state >> 27;
    return (double)((g_state * 0x2545F4914F6CDD1Dull) >> 11) * 0x1.0p-53;
}

/* Logits roughly like a model's: a Gaussian-ish bulk with a few peaks. */
static void fill_logits(float *x, size_t v, float scale) {
    for (size_t i = 0; i < v; i++) {
        double g = test_rand() + test_rand() + test_rand() + test_rand() - 2.0;
        x[i] = (float)(g * scale);
    }
    for (int j = 0; j < 5; j++)
        x[(size_t)(test_rand() * (double)v)] += 4.0f * scale;
}

static pg_sampler *make_sampler(int32_t v) {
    pg_sampler *s = NULL;
    assert_int_equal(pg_sampler_create(v, &s), PAGODA_OK);
    assert_non_null(s);
    return s;
}

/* Sample with no history except the draw position (output ids are all 0 and
 * never read because penalties are off). */
static int32_t draw_at(pg_sampler *s, const pg_sampling_params *p, const pg_rng *rng,
                       const float *logits, size_t v, size_t pos) {
    static int32_t zeros[1 << 18];
    float *work = malloc(v * sizeof(float));
    assert_non_null(work);
    memcpy(work, logits, v * sizeof(float));
    int32_t tok = -1;
    assert_true(pos <= sizeof zeros / sizeof zeros[0]);
    pagoda_status st = pg_sampler_sample(s, p, rng, work, NULL, 0, zeros, pos, NULL, &tok);
    if (st != PAGODA_OK) fail_msg("sample failed: %s", pg_last_error());
    free(work);
    assert_true(tok >= 0 && (size_t)tok < v);
    return tok;
}

static double softmax_at(const float *x, size_t v, float t, size_t id) {
    double m = -INFINITY, z = 0.0;
    for (size_t i = 0; i < v; i++)
        if ((double)x[i] > m) m = (double)x[i];
    for (size_t i = 0; i < v; i++)
        z += exp(((double)x[i] - m) / (double)t);
    return exp(((double)x[id] - m) / (double)t) / z;
}

/* Pearson chi-squared of `counts` against probabilities `p` (n draws). */
static double chi2(const long *counts, const double *p, size_t k, long n) {
    double c = 0.0;
    for (size_t i = 0; i < k; i++) {
        double e = p[i] * (double)n;
        double d = (double)counts[i] - e;
        c += d * d / e;
    }
    return c;
}

/* Upper 1e-9 quantiles of chi-squared with df degrees of freedom (computed
 * with mpmath: the regularised upper incomplete gamma Q(df/2, x/2) = 1e-9).
 * A correct sampler exceeds them with probability < 1e-9. */
static const double CHI2_1E9[8] = {0, 37.33, 41.45, 44.85, 47.88, 0, 0, 55.88};

/* ---- RNG */

static void test_philox_known_answers(void **state) {
    (void)state;
    /* Random123 tests/kat_vectors, "philox4x32 10": ctr[4] key[2] -> out[4] */
    static const uint32_t kat[3][10] = {
        {0, 0, 0, 0, 0, 0, 0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8},
        {0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0x408f276d,
         0x41c83b0e, 0xa20bc7c6, 0x6d5451fd},
        {0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344, 0xa4093822, 0x299f31d0, 0xd16cfe09,
         0x94fdcceb, 0x5001e420, 0x24126ea1},
    };
    for (int t = 0; t < 3; t++) {
        uint32_t out[4];
        pg_philox4x32_10(&kat[t][0], &kat[t][4], out);
        for (int j = 0; j < 4; j++)
            assert_int_equal(out[j], kat[t][6 + j]);
    }
}

static void test_rng_is_a_pure_function(void **state) {
    (void)state;
    pg_rng a = pg_rng_from_seed(1234), b = pg_rng_from_seed(1234), c = pg_rng_from_seed(1235);
    assert_true(a.key == 1234);
    double sum = 0.0;
    for (uint64_t i = 0; i < 1000; i++) {
        double u = pg_rng_uniform(&a, i, PG_RNG_STREAM_SAMPLE);
        assert_true(u >= 0.0 && u < 1.0);
        assert_true(u == pg_rng_uniform(&b, i, PG_RNG_STREAM_SAMPLE));
        assert_true(u != pg_rng_uniform(&c, i, PG_RNG_STREAM_SAMPLE));
        assert_true(u != pg_rng_uniform(&a, i, PG_RNG_STREAM_SPEC));
        assert_true(u != pg_rng_uniform(&a, i + (1ull << 32), PG_RNG_STREAM_SAMPLE));
        sum += u;
    }
    /* mean of 1000 uniforms: sd 0.0091; 7 sd */
    assert_true(fabs(sum / 1000.0 - 0.5) < 0.064);
    /* the key words map to Philox's key: seed 0, index 0 is the zero KAT */
    pg_rng z = pg_rng_from_seed(0);
    uint32_t w[4];
    pg_rng_bits(&z, 0, 0, w);
    assert_int_equal(w[0], 0x6627e8d5);
    /* random seeds: distinct per call */
    pg_rng r1 = pg_rng_from_seed(-1), r2 = pg_rng_from_seed(-1);
    assert_true(r1.key != r2.key);
    /* other negative seeds are ordinary seeds */
    assert_true(pg_rng_from_seed(-2).key == (uint64_t)-2);
}

/* ---- greedy, temperature, filters */

static void test_greedy_is_argmax_lowest_id_on_ties(void **state) {
    (void)state;
    pg_sampler *s = make_sampler(6);
    pg_rng rng = pg_rng_from_seed(7);
    pg_sampling_params p = pg_sampling_params_default();
    const float x[6] = {0.5f, 3.0f, -1.0f, 3.0f, 2.9f, 3.0f};
    float temps[3] = {0.0f, 1e-6f, 0.99e-5f};
    for (int t = 0; t < 3; t++) {
        p.temperature = temps[t];
        for (size_t pos = 0; pos < 20; pos++)
            assert_int_equal(draw_at(s, &p, &rng, x, 6, pos), 1);
    }
    /* greedy ignores the filters */
    p.temperature = 0.0f;
    p.top_k = 3;
    p.top_p = 0.1f;
    p.min_p = 0.9f;
    assert_int_equal(draw_at(s, &p, &rng, x, 6, 0), 1);
    /* random tokens on the tie are still possible with temperature on */
    p = pg_sampling_params_default();
    p.temperature = 0.05f;
    int seen[6] = {0};
    for (size_t pos = 0; pos < 300; pos++)
        seen[draw_at(s, &p, &rng, x, 6, pos)]++;
    assert_true(seen[1] > 0 && seen[3] > 0 && seen[5] > 0);
    assert_int_equal(seen[0] + seen[2], 0);
    pg_sampler_free(s);
}

/* Frequencies of 200k seeded draws from a fixed 8-token softmax match the
 * probabilities (Pearson chi-squared, df 7). */
static void test_empirical_distribution_matches_softmax(void **state) {
    (void)state;
    const float x[8] = {1.0f, 0.0f, 2.0f, -1.0f, 0.5f, 1.5f, -0.3f, 0.7f};
    pg_sampler *s = make_sampler(8);
    pg_rng rng = pg_rng_from_seed(20261130);
    pg_sampling_params p = pg_sampling_params_default();
    const long n = 200000;
    long counts[8] = {0};
    for (long i = 0; i < n; i++)
        counts[draw_at(s, &p, &rng, x, 8, (size_t)i)]++;
    double prob[8];
    for (size_t i = 0; i < 8; i++)
        prob[i] = softmax_at(x, 8, 1.0f, i);
    double c = chi2(counts, prob, 8, n);
    print_message("chi2 (df 7) = %.2f, bound %.2f\n", c, CHI2_1E9[7]);
    assert_true(c < CHI2_1E9[7]);
    /* the same counts are far from a wrong distribution (temperature 2) */
    for (size_t i = 0; i < 8; i++)
        prob[i] = softmax_at(x, 8, 2.0f, i);
    assert_true(chi2(counts, prob, 8, n) > 1000.0);
    pg_sampler_free(s);
}

/* The full-vocabulary draw walks per-block sums (256 ids): mass on block
 * edges and in the last, partial block is drawn with the right frequencies,
 * and never an id without mass. */
static void test_blocked_draw_across_block_edges(void **state) {
    (void)state;
    const size_t v = 1000, ids[5] = {0, 255, 256, 511, 999};
    float *x = malloc(v * sizeof(float));
    assert_non_null(x);
    for (size_t i = 0; i < v; i++)
        x[i] = -INFINITY;
    for (int j = 0; j < 5; j++)
        x[ids[j]] = 0.5f * (float)j;
    pg_sampler *s = make_sampler((int32_t)v);
    pg_rng rng = pg_rng_from_seed(77);
    pg_sampling_params p = pg_sampling_params_default();
    const long n = 50000;
    long counts[5] = {0};
    for (long i = 0; i < n; i++) {
        int32_t t = draw_at(s, &p, &rng, x, v, (size_t)i);
        int j = 0;
        while (j < 5 && ids[j] != (size_t)t)
            j++;
        if (j == 5) fail_msg("drew id %d, which has no mass", t);
        counts[j]++;
    }
    double prob[5], z = 0;
    for (int j = 0; j < 5; j++)
        z += exp(0.5 * j);
    for (int j = 0; j < 5; j++)
        prob[j] = exp(0.5 * j) / z;
    assert_true(chi2(counts, prob, 5, n) < CHI2_1E9[4]);
    free(x);
    pg_sampler_free(s);
}

static void test_temperature_scales_the_distribution(void **state) {
    (void)state;
    const float x[3] = {1.0f, 0.0f, -0.5f};
    pg_sampler *s = make_sampler(3);
    pg_rng rng = pg_rng_from_seed(99);
    pg_sampling_params p = pg_sampling_params_default();
    const float temps[3] = {0.5f, 1.0f, 3.0f};
    double p0[3];
    for (int t = 0; t < 3; t++) {
        p.temperature = temps[t];
        const long n = 30000;
        long counts[3] = {0};
        for (long i = 0; i < n; i++)
            counts[draw_at(s, &p, &rng, x, 3, (size_t)i)]++;
        double prob[3];
        for (size_t i = 0; i < 3; i++)
            prob[i] = softmax_at(x, 3, temps[t], i);
        assert_true(chi2(counts, prob, 3, n) < CHI2_1E9[2]);
        p0[t] = (double)counts[0] / (double)n;
    }
    /* colder = sharper */
    assert_true(p0[0] > p0[1] && p0[1] > p0[2]);
    pg_sampler_free(s);
}

static void test_top_k_1_is_greedy(void **state) {
    (void)state;
    const size_t v = 4000;
    float *x = malloc(v * sizeof(float));
    pg_sampler *s = make_sampler((int32_t)v);
    pg_sampling_params p = pg_sampling_params_default();
    pg_sampling_params g = pg_sampling_params_default();
    g.temperature = 0.0f;
    p.top_k = 1;
    p.temperature = 1.5f;
    for (int trial = 0; trial < 20; trial++) {
        fill_logits(x, v, 2.0f);
        if (trial % 2) { /* ties at the top: the lowest id wins both ways */
            size_t best = 0;
            for (size_t i = 1; i < v; i++)
                if (x[i] > x[best]) best = i;
            x[v - 1] = x[best];
            x[trial] = x[best];
        }
        pg_rng rng = pg_rng_from_seed(trial);
        assert_int_equal(draw_at(s, &p, &rng, x, v, (size_t)trial),
                         draw_at(s, &g, &rng, x, v, (size_t)trial));
    }
    free(x);
    pg_sampler_free(s);
}

/* Draw n tokens and check: tokens with want[i] == 0 never appear, the others
 * match want[] (renormalised) by chi-squared. */
static void check_distribution(pg_sampler *s, const pg_sampling_params *p, const float *x, size_t v,
                               const double *want, long n) {
    pg_rng rng = pg_rng_from_seed(555);
    long counts[16] = {0};
    assert_true(v <= 16);
    for (long i = 0; i < n; i++)
        counts[draw_at(s, p, &rng, x, v, (size_t)i)]++;
    long kc[16];
    double kp[16], z = 0.0;
    size_t k = 0;
    for (size_t i = 0; i < v; i++)
        z += want[i];
    for (size_t i = 0; i < v; i++) {
        if (want[i] == 0.0) {
            if (counts[i] != 0)
                fail_msg("token %zu drawn %ld times, should be filtered", i, counts[i]);
            continue;
        }
        kc[k] = counts[i];
        kp[k] = want[i] / z;
        k++;
    }
    if (k > 1) {
        assert_true(k - 1 < 8 && CHI2_1E9[k - 1] > 0);
        double c = chi2(kc, kp, k, n);
        if (c >= CHI2_1E9[k - 1]) fail_msg("chi2 %.2f >= %.2f (df %zu)", c, CHI2_1E9[k - 1], k - 1);
    } else {
        assert_int_equal(kc[0], n);
    }
}

/* Speculative decoding's rejection sampling (pg_sampler_verify) against a
 * one-hot draft: over 100k seeds, the verified token's frequencies match
 * the target distribution (Pearson chi-squared, df 7 or the kept tokens'),
 * whether the draft is the likeliest token, an unlikely one, or one the
 * filters remove; the full-vocabulary and the top-k paths; the same seed,
 * position and draft always give the same token. */
static int32_t verify_at(pg_sampler *s, const pg_sampling_params *p, int64_t seed, const float *x,
                         size_t v, size_t pos, int32_t draft) {
    static int32_t zeros[64];
    float work[16];
    memcpy(work, x, v * sizeof(float));
    pg_rng rng = pg_rng_from_seed(seed);
    int32_t tok = -1;
    pagoda_status st = pg_sampler_verify(s, p, &rng, work, NULL, 0, zeros, pos, draft, NULL, &tok);
    if (st != PAGODA_OK) fail_msg("verify failed: %s", pg_last_error());
    return tok;
}

static void test_rejection_sampling_keeps_the_target_distribution(void **state) {
    (void)state;
    const float x[8] = {1.0f, 0.0f, 2.0f, -1.0f, 0.5f, 1.5f, -0.3f, 0.7f};
    pg_sampler *s = make_sampler(8);
    const long n = 100000;
    for (int cfg = 0; cfg < 2; cfg++) {
        pg_sampling_params p = pg_sampling_params_default();
        p.temperature = 0.8f;
        double want[8], z = 0.0;
        for (size_t i = 0; i < 8; i++)
            want[i] = softmax_at(x, 8, p.temperature, i);
        if (cfg == 1) { /* top-k 4 keeps ids 2, 5, 0, 7 */
            p.top_k = 4;
            want[1] = want[3] = want[4] = want[6] = 0.0;
        }
        for (size_t i = 0; i < 8; i++)
            z += want[i];
        const int32_t drafts[4] = {2, 7, 3, 6}; /* likeliest, middle, least, (filtered) */
        for (int d = 0; d < 4; d++) {
            long counts[8] = {0};
            for (long i = 0; i < n; i++)
                counts[verify_at(s, &p, 1000 + i, x, 8, (size_t)(i % 3), drafts[d])]++;
            long kc[8];
            double kp[8];
            size_t k = 0;
            for (size_t i = 0; i < 8; i++) {
                if (want[i] == 0.0) {
                    assert_int_equal(counts[i], 0); /* a filtered draft is always rejected */
                    continue;
                }
                kc[k] = counts[i];
                kp[k++] = want[i] / z;
            }
            double c = chi2(kc, kp, k, n);
            print_message("top_k %d, draft %d (p %.3f): accepted %.3f, chi2 (df %zu) = %.2f\n",
                          p.top_k, drafts[d], want[drafts[d]] / z, (double)counts[drafts[d]] / n,
                          k - 1, c);
            assert_true(c < CHI2_1E9[k - 1]);
            /* always accepting the draft would be far off */
            if (want[drafts[d]] > 0) {
                size_t at = 0;
                for (size_t i = 0; i < (size_t)drafts[d]; i++)
                    at += want[i] > 0.0;
                kc[at] = n;
                for (size_t i = 0; i < k; i++)
                    if (i != at) kc[i] = 0;
                assert_true(chi2(kc, kp, k, n) > 1000.0);
            }
        }
        /* reproducible: a pure function of seed, position and draft */
        for (long i = 0; i < 200; i++)
            assert_int_equal(verify_at(s, &p, 77 + i, x, 8, 5, 7),
                             verify_at(s, &p, 77 + i, x, 8, 5, 7));
    }
    /* greedy: the argmax whatever the draft (the caller compares) */
    pg_sampling_params g = pg_sampling_params_default();
    g.temperature = 0.0f;
    assert_int_equal(verify_at(s, &g, 1, x, 8, 0, 7), 2);
    assert_int_equal(verify_at(s, &g, 1, x, 8, 0, 2), 2);
    /* a draft outside the vocabulary is an error */
    float work[8];
    memcpy(work, x, sizeof work);
    pg_rng rng = pg_rng_from_seed(1);
    int32_t tok;
    pg_sampling_params p = pg_sampling_params_default();
    assert_int_equal(pg_sampler_verify(s, &p, &rng, work, NULL, 0, NULL, 0, 8, NULL, &tok),
                     PAGODA_ERR_INVALID_ARG);
    pg_sampler_free(s);
}

static void test_min_p_top_p_top_k_on_a_hand_made_distribution(void **state) {
    (void)state;
    const double pr[4] = {0.5, 0.3, 0.15, 0.05};
    float x[4];
    for (int i = 0; i < 4; i++)
        x[i] = (float)log(pr[i]);
    pg_sampler *s = make_sampler(4);
    pg_sampling_params p = pg_sampling_params_default();
    const long n = 20000;

    /* min_p 0.2: threshold 0.1 drops 0.05 */
    p.min_p = 0.2f;
    check_distribution(s, &p, x, 4, (const double[4]){0.5, 0.3, 0.15, 0}, n);
    /* min_p 0.5: threshold 0.25 keeps 0.5 and 0.3 */
    p.min_p = 0.5f;
    check_distribution(s, &p, x, 4, (const double[4]){0.5, 0.3, 0, 0}, n);
    p.min_p = 1.0f; /* only the most likely */
    check_distribution(s, &p, x, 4, (const double[4]){1, 0, 0, 0}, n);
    p.min_p = 0.0f;

    /* top_p: smallest prefix with mass >= p */
    p.top_p = 0.75f;
    check_distribution(s, &p, x, 4, (const double[4]){0.5, 0.3, 0, 0}, n);
    p.top_p = 0.85f;
    check_distribution(s, &p, x, 4, (const double[4]){0.5, 0.3, 0.15, 0}, n);
    p.top_p = 0.01f;
    check_distribution(s, &p, x, 4, (const double[4]){1, 0, 0, 0}, n);
    p.top_p = 1.0f;

    /* top_k */
    p.top_k = 2;
    check_distribution(s, &p, x, 4, (const double[4]){0.5, 0.3, 0, 0}, n);
    p.top_k = 4;
    check_distribution(s, &p, x, 4, pr, n);
    p.top_k = -1;
    check_distribution(s, &p, x, 4, pr, n);
    p.top_k = 0;

    /* vLLM's order: top-p sees the min-p survivors renormalised.
     * min_p 0.2 leaves {0.5, 0.3, 0.15}/0.95 = {0.526, 0.316, 0.158};
     * top_p 0.84 then keeps two (0.842 >= 0.84); top-p alone would keep three. */
    p.min_p = 0.2f;
    p.top_p = 0.84f;
    check_distribution(s, &p, x, 4, (const double[4]){0.5, 0.3, 0, 0}, n);
    p.min_p = 0.0f;
    check_distribution(s, &p, x, 4, (const double[4]){0.5, 0.3, 0.15, 0}, n);

    /* temperature applies before min-p: at T = 2 the ratios are sqrt'ed:
     * 0.05/0.5 = 0.1 -> 0.316 >= 0.3 survives; 0.15/0.5 -> 0.548 */
    p.top_p = 1.0f;
    p.temperature = 2.0f;
    p.min_p = 0.3f;
    check_distribution(s, &p, x, 4, (const double[4]){sqrt(0.5), sqrt(0.3), sqrt(0.15), sqrt(0.05)},
                       n);
    p.min_p = 0.35f;
    check_distribution(s, &p, x, 4, (const double[4]){sqrt(0.5), sqrt(0.3), sqrt(0.15), 0}, n);
    pg_sampler_free(s);
}

static void test_tiny_top_p_is_argmax(void **state) {
    (void)state;
    const size_t v = 5000;
    float *x = malloc(v * sizeof(float));
    pg_sampler *s = make_sampler((int32_t)v);
    pg_sampling_params p = pg_sampling_params_default();
    p.top_p = 1e-6f;
    for (int trial = 0; trial < 10; trial++) {
        fill_logits(x, v, 1.0f);
        size_t best = 0;
        for (size_t i = 1; i < v; i++)
            if (x[i] > x[best]) best = i;
        pg_rng rng = pg_rng_from_seed(trial);
        assert_int_equal(draw_at(s, &p, &rng, x, v, (size_t)trial * 3), (int32_t)best);
    }
    free(x);
    pg_sampler_free(s);
}

/* ---- a straightforward reference of sampler.h's steps 7-8 (one full sort,
 * no heap, no bins), using the same float formulas, so the optimised paths
 * must pick exactly the same token for the same uniform. */

static const float *g_ref_x;
static int ref_cmp(const void *a, const void *b) {
    int32_t i = *(const int32_t *)a, j = *(const int32_t *)b;
    if (g_ref_x[i] != g_ref_x[j]) return g_ref_x[i] > g_ref_x[j] ? -1 : 1;
    return i < j ? -1 : 1;
}

static int32_t ref_sample(const float *x, size_t v, const pg_sampling_params *p, double u) {
    float m = -INFINITY;
    for (size_t i = 0; i < v; i++)
        m = fmaxf(m, x[i]);
    const float inv_t = 1.0f / p->temperature;
    float *e = malloc(v * sizeof(float));
    int32_t *order = malloc(v * sizeof(int32_t));
    bool *keep = calloc(v, sizeof(bool));
    for (size_t i = 0; i < v; i++) {
        e[i] = expf((x[i] - m) * inv_t);
        if (e[i] < p->min_p) e[i] = 0.0f;
        order[i] = (int32_t)i;
    }
    g_ref_x = x;
    qsort(order, v, sizeof(int32_t), ref_cmp);
    const bool use_k = p->top_k > 0 && (size_t)p->top_k < v;
    size_t n = use_k ? (size_t)p->top_k : v; /* best-first candidates */
    size_t kept = 0;
    while (kept < n && e[order[kept]] > 0.0f)
        kept++;
    if (p->top_p < 1.0f) {
        /* top_p is a share of the candidates' mass: summed best-first after
         * top-k, by id over the whole vocabulary otherwise (as sampler.c) */
        double total = 0.0;
        if (use_k)
            for (size_t j = 0; j < kept; j++)
                total += e[order[j]];
        else
            for (size_t i = 0; i < v; i++)
                total += e[i];
        double cum = 0.0;
        for (size_t j = 0; j < kept; j++) {
            cum += e[order[j]];
            if (cum >= (double)p->top_p * total) {
                kept = j + 1;
                break;
            }
        }
    }
    for (size_t j = 0; j < kept; j++)
        keep[order[j]] = true;
    /* inverse CDF over the kept tokens in id order */
    double total = 0.0, cum = 0.0;
    int32_t tok = -1, last = -1;
    for (size_t i = 0; i < v; i++)
        if (keep[i]) total += e[i];
    for (size_t i = 0; i < v && tok < 0; i++) {
        if (!keep[i]) continue;
        cum += e[i];
        last = (int32_t)i;
        if (cum > u * total) tok = (int32_t)i;
    }
    if (tok < 0) tok = last;
    free(e);
    free(order);
    free(keep);
    return tok;
}

static void test_fast_paths_match_a_full_sort_reference(void **state) {
    (void)state;
    const size_t v = 5000;
    float *x = malloc(v * sizeof(float));
    pg_sampler *s = make_sampler((int32_t)v);
    struct {
        float t, top_p, min_p, scale;
        int32_t top_k;
    } cfg[] = {
        {1.0f, 1.0f, 0.0f, 1.0f, 0},    /* no filter: id-order inverse CDF */
        {0.8f, 1.0f, 0.0f, 1.0f, 50},   /* top-k heap */
        {1.2f, 1.0f, 0.0f, 1.0f, 2000}, /* large k */
        {1.0f, 0.9f, 0.0f, 0.3f, 0},    /* flat: top-p crosses in the bulk */
        {0.7f, 0.5f, 0.0f, 2.0f, 0},    /* peaked: top-p crosses in the peaks */
        {1.0f, 0.5f, 0.0f, 1.0f, 0},     {1.0f, 0.2f, 0.0f, 0.5f, 0},
        {0.05f, 0.9f, 0.0f, 1.0f, 0},    /* cold: wide bins, few tokens per bin */
        {20.0f, 0.7f, 0.0f, 1.0f, 0},    /* hot: the whole bulk in one or two bins */
        {1.0f, 0.95f, 0.01f, 1.0f, 0},   /* min-p + top-p */
        {0.7f, 0.9f, 0.02f, 1.0f, 100},  /* everything */
        {1.0f, 1.0f, 0.05f, 1.0f, 0},    /* min-p only */
        {3.0f, 0.99f, 0.0f, 1.0f, 4999}, /* k = V - 1 */
    };
    int checked = 0;
    for (size_t c = 0; c < sizeof cfg / sizeof cfg[0]; c++) {
        pg_sampling_params p = pg_sampling_params_default();
        p.temperature = cfg[c].t;
        p.top_p = cfg[c].top_p;
        p.min_p = cfg[c].min_p;
        p.top_k = cfg[c].top_k;
        for (int trial = 0; trial < 4; trial++) {
            fill_logits(x, v, cfg[c].scale);
            pg_rng rng = pg_rng_from_seed(1000 * (int64_t)c + trial);
            for (size_t pos = 0; pos < 25; pos++) {
                double u = pg_rng_uniform(&rng, pos, PG_RNG_STREAM_SAMPLE);
                int32_t want = ref_sample(x, v, &p, u);
                int32_t got = draw_at(s, &p, &rng, x, v, pos);
                if (got != want)
                    fail_msg("config %zu trial %d pos %zu: got %d want %d", c, trial, pos, got,
                             want);
                checked++;
            }
        }
    }
    assert_int_equal(checked, (int)(sizeof cfg / sizeof cfg[0]) * 4 * 25);
    free(x);
    pg_sampler_free(s);
}

/* ---- penalties and bias (hand-computed; checked on the processed logits
 * the sampler leaves in place) */

static void run_greedy(pg_sampler *s, const pg_sampling_params *p, float *x, const int32_t *prompt,
                       size_t np, const int32_t *out, size_t no, int32_t *tok) {
    pg_rng rng = pg_rng_from_seed(1);
    pagoda_status st = pg_sampler_sample(s, p, &rng, x, prompt, np, out, no, NULL, tok);
    if (st != PAGODA_OK) fail_msg("sample failed: %s", pg_last_error());
}

static void test_penalties_hand_computed(void **state) {
    (void)state;
    pg_sampler *s = make_sampler(6);
    pg_sampling_params p = pg_sampling_params_default();
    p.temperature = 0.0f;
    const int32_t prompt[3] = {0, 1, 0};
    const int32_t out[3] = {3, 4, 3};
    int32_t tok;

    /* repetition 2 over prompt+output: positive / 2, non-positive * 2 */
    p.repetition_penalty = 2.0f;
    float x[6] = {2.0f, -1.0f, 0.5f, 3.0f, -2.0f, 1.0f};
    run_greedy(s, &p, x, prompt, 3, out, 3, &tok);
    const float rep[6] = {1.0f, -2.0f, 0.5f, 1.5f, -4.0f, 1.0f};
    for (int i = 0; i < 6; i++)
        assert_float_equal(x[i], rep[i], 1e-6);
    assert_int_equal(tok, 3);

    /* frequency 0.5: output counts {3: 2, 4: 1}; prompt ignored */
    p.repetition_penalty = 1.0f;
    p.frequency_penalty = 0.5f;
    float y[6] = {2.0f, -1.0f, 0.5f, 3.0f, -2.0f, 1.0f};
    run_greedy(s, &p, y, prompt, 3, out, 3, &tok);
    const float freq[6] = {2.0f, -1.0f, 0.5f, 2.0f, -2.5f, 1.0f};
    for (int i = 0; i < 6; i++)
        assert_float_equal(y[i], freq[i], 1e-6);
    assert_int_equal(tok, 0); /* 2.0 ties 2.0: lowest id */

    /* presence 1.5: once per distinct output token */
    p.frequency_penalty = 0.0f;
    p.presence_penalty = 1.5f;
    float z[6] = {2.0f, -1.0f, 0.5f, 3.0f, -2.0f, 1.0f};
    run_greedy(s, &p, z, prompt, 3, out, 3, &tok);
    const float pres[6] = {2.0f, -1.0f, 0.5f, 1.5f, -3.5f, 1.0f};
    for (int i = 0; i < 6; i++)
        assert_float_equal(z[i], pres[i], 1e-6);

    /* all three, plus a negative presence penalty (encourages repeats) */
    p.repetition_penalty = 1.25f;
    p.frequency_penalty = 0.25f;
    p.presence_penalty = -0.5f;
    float w[6] = {2.0f, -1.0f, 0.5f, 3.0f, -2.0f, 1.0f};
    run_greedy(s, &p, w, prompt, 3, out, 3, &tok);
    const float all[6] = {1.6f, -1.25f, 0.5f, 3.0f / 1.25f - 0.5f + 0.5f, -2.5f - 0.25f + 0.5f,
                          1.0f};
    for (int i = 0; i < 6; i++)
        assert_float_equal(w[i], all[i], 1e-6);
    assert_int_equal(tok, 3);

    /* the count table is clean between calls: no history = no change */
    float q[6] = {2.0f, -1.0f, 0.5f, 3.0f, -2.0f, 1.0f};
    run_greedy(s, &p, q, NULL, 0, NULL, 0, &tok);
    assert_float_equal(q[3], 3.0f, 0.0);
    assert_float_equal(q[0], 2.0f, 0.0);

    /* penalties change greedy choice: the repeated top token loses */
    p = pg_sampling_params_default();
    p.temperature = 0.0f;
    p.frequency_penalty = 2.0f;
    float r[6] = {0.0f, 0.0f, 0.0f, 3.0f, 0.0f, 2.5f};
    run_greedy(s, &p, r, prompt, 3, out, 3, &tok);
    assert_int_equal(tok, 5);
    pg_sampler_free(s);
}

static void test_logit_bias_and_bans(void **state) {
    (void)state;
    pg_sampler *s = make_sampler(3);
    pg_sampling_params p = pg_sampling_params_default();
    const float x[3] = {0.0f, 1.0f, 2.0f};
    pg_rng rng = pg_rng_from_seed(3);

    p.temperature = 0.0f;
    pg_logit_bias up = {0, 100.0f};
    p.logit_bias = &up;
    p.n_logit_bias = 1;
    assert_int_equal(draw_at(s, &p, &rng, x, 3, 0), 0);
    pg_logit_bias down = {2, -100.0f};
    p.logit_bias = &down;
    assert_int_equal(draw_at(s, &p, &rng, x, 3, 0), 1);

    /* biases on one token add; the processed logits show it */
    pg_logit_bias twice[2] = {{1, 1.0f}, {1, 1.5f}};
    p.logit_bias = twice;
    p.n_logit_bias = 2;
    float y[3] = {0.0f, 1.0f, 2.0f};
    int32_t tok;
    run_greedy(s, &p, y, NULL, 0, NULL, 0, &tok);
    assert_float_equal(y[1], 3.5f, 0.0);
    assert_int_equal(tok, 1);

    /* -inf bans under random sampling: the rest keeps its softmax */
    p = pg_sampling_params_default();
    pg_logit_bias ban = {2, -INFINITY};
    p.logit_bias = &ban;
    p.n_logit_bias = 1;
    check_distribution(s, &p, x, 3, (const double[3]){1.0, exp(1.0), 0.0}, 20000);
    pg_logit_bias ban2[2] = {{2, -INFINITY}, {0, -INFINITY}};
    p.logit_bias = ban2;
    p.n_logit_bias = 2;
    for (size_t pos = 0; pos < 100; pos++)
        assert_int_equal(draw_at(s, &p, &rng, x, 3, pos), 1);

    /* everything banned: a clear error, greedy or not */
    pg_logit_bias ban3[3] = {{2, -INFINITY}, {0, -INFINITY}, {1, -INFINITY}};
    p.logit_bias = ban3;
    p.n_logit_bias = 3;
    for (int g = 0; g < 2; g++) {
        p.temperature = g ? 0.0f : 1.0f;
        float z[3] = {0.0f, 1.0f, 2.0f};
        tok = 77;
        assert_int_equal(pg_sampler_sample(s, &p, &rng, z, NULL, 0, NULL, 0, NULL, &tok),
                         PAGODA_ERR_INVALID_ARG);
        assert_non_null(strstr(pg_last_error(), "banned"));
        assert_int_equal(tok, 77);
    }
    pg_sampler_free(s);
}

/* Filters when most tokens are banned: top-k larger than what is left,
 * top-p over a handful of survivors. */
static void test_filters_with_most_tokens_banned(void **state) {
    (void)state;
    const float x[10] = {5, 4, 3, 2, 1, 0, -1, -2, 0.5f, -0.5f};
    pg_sampler *s = make_sampler(10);
    pg_logit_bias ban[8];
    for (int i = 0; i < 8; i++)
        ban[i] = (pg_logit_bias){i, -INFINITY};
    pg_sampling_params p = pg_sampling_params_default();
    p.logit_bias = ban;
    p.n_logit_bias = 8;
    const double want[10] = {0, 0, 0, 0, 0, 0, 0, 0, exp(0.5), exp(-0.5)};
    p.top_k = 5;
    check_distribution(s, &p, x, 10, want, 20000);
    p.top_p = 0.99f;
    check_distribution(s, &p, x, 10, want, 20000);
    p.top_k = 0;
    check_distribution(s, &p, x, 10, want, 20000);
    p.top_p = 0.5f; /* 0.731 of the mass is token 8 */
    check_distribution(s, &p, x, 10, (const double[10]){0, 0, 0, 0, 0, 0, 0, 0, 1, 0}, 2000);
    p.top_k = 9;
    check_distribution(s, &p, x, 10, (const double[10]){0, 0, 0, 0, 0, 0, 0, 0, 1, 0}, 2000);
    pg_sampler_free(s);
}

/* ---- logprobs */

static void test_logprobs_are_raw_log_softmax(void **state) {
    (void)state;
    pg_sampler *s = make_sampler(5);
    const float x0[5] = {1.0f, 2.0f, 0.5f, 2.0f, -1.0f};
    double z = 0.0;
    for (int i = 0; i < 5; i++)
        z += exp((double)x0[i]);
    const double lse = log(z);

    pg_sampling_params p = pg_sampling_params_default();
    p.temperature = 0.0f;
    p.n_logprobs = 3;
    int32_t ids[5];
    float lps[5];
    pg_logprob_out lp = {.top_ids = ids, .top_logprobs = lps, .cap = 5};
    pg_rng rng = pg_rng_from_seed(5);
    float x[5];
    memcpy(x, x0, sizeof x);
    int32_t tok;
    assert_int_equal(pg_sampler_sample(s, &p, &rng, x, NULL, 0, NULL, 0, &lp, &tok), PAGODA_OK);
    assert_int_equal(tok, 1);
    assert_int_equal(lp.n_top, 3);
    const int32_t want_ids[3] = {1, 3, 0}; /* tie 1 / 3: lower id first */
    for (int j = 0; j < 3; j++) {
        assert_int_equal(ids[j], want_ids[j]);
        assert_float_equal(lps[j], (double)x0[want_ids[j]] - lse, 1e-6);
    }
    assert_float_equal(lp.sampled_logprob, 2.0 - lse, 1e-6);
    assert_int_equal(lp.sampled_rank, 2); /* two tokens have logprob >= its own */

    /* bias and penalties change the choice, not the (raw) logprobs */
    pg_logit_bias b = {4, 100.0f};
    p.logit_bias = &b;
    p.n_logit_bias = 1;
    p.repetition_penalty = 3.0f;
    p.n_logprobs = 5;
    const int32_t hist[2] = {1, 3};
    memcpy(x, x0, sizeof x);
    assert_int_equal(pg_sampler_sample(s, &p, &rng, x, hist, 2, hist, 2, &lp, &tok), PAGODA_OK);
    assert_int_equal(tok, 4);
    assert_int_equal(lp.n_top, 5);
    assert_int_equal(ids[4], 4);
    assert_float_equal(lps[4], -1.0 - lse, 1e-6);
    assert_float_equal(lp.sampled_logprob, -1.0 - lse, 1e-6);
    assert_int_equal(lp.sampled_rank, 5);
    double sum = 0.0;
    for (int j = 0; j < 5; j++)
        sum += exp((double)lps[j]);
    assert_float_equal(sum, 1.0, 1e-6);

    /* random sampling: the sampled logprob is that token's raw logprob */
    p = pg_sampling_params_default();
    p.n_logprobs = 0;
    for (size_t pos = 0; pos < 50; pos++) {
        memcpy(x, x0, sizeof x);
        const int32_t zeros[64] = {0};
        assert_int_equal(pg_sampler_sample(s, &p, &rng, x, NULL, 0, zeros, pos, &lp, &tok),
                         PAGODA_OK);
        assert_int_equal(lp.n_top, 0);
        assert_float_equal(lp.sampled_logprob, (double)x0[tok] - lse, 1e-6);
        int rank = 0;
        for (int i = 0; i < 5; i++)
            rank += x0[i] >= x0[tok];
        assert_int_equal(lp.sampled_rank, rank);
    }

    /* buffer too small: error */
    p.n_logprobs = 4;
    lp.cap = 3;
    memcpy(x, x0, sizeof x);
    assert_int_equal(pg_sampler_sample(s, &p, &rng, x, NULL, 0, NULL, 0, &lp, &tok),
                     PAGODA_ERR_INVALID_ARG);
    assert_non_null(strstr(pg_last_error(), "logprobs buffer"));
    pg_sampler_free(s);
}

/* ---- NaN / inf */

static void test_nan_and_inf_logits(void **state) {
    (void)state;
    pg_sampler *s = make_sampler(6);
    pg_rng rng = pg_rng_from_seed(11);
    pg_sampling_params p = pg_sampling_params_default();

    /* NaN is never sampled; it reads as -inf */
    const float a[6] = {NAN, 1.0f, 0.0f, NAN, -INFINITY, 0.5f};
    check_distribution(s, &p, a, 6, (const double[6]){0, exp(1.0), 1.0, 0, 0, exp(0.5)}, 20000);
    p.temperature = 0.0f;
    assert_int_equal(draw_at(s, &p, &rng, a, 6, 0), 1);

    /* one +inf token takes all the mass, greedy or not */
    const float b[6] = {1.0f, NAN, INFINITY, 3.0f, -INFINITY, FLT_MAX};
    assert_int_equal(draw_at(s, &p, &rng, b, 6, 0), 2);
    p.temperature = 1.0f;
    for (size_t pos = 0; pos < 50; pos++) {
        int32_t t = draw_at(s, &p, &rng, b, 6, pos);
        assert_true(t == 2 || t == 5); /* +inf reads as FLT_MAX, so they tie */
    }
    /* several +inf tokens share it evenly */
    const float c[6] = {INFINITY, 0.0f, 5.0f, INFINITY, NAN, 1.0f};
    check_distribution(s, &p, c, 6, (const double[6]){1, 0, 0, 1, 0, 0}, 20000);

    /* logprobs stay finite for finite tokens; NaN tokens get -inf */
    int32_t ids[6];
    float lps[6];
    pg_logprob_out lp = {.top_ids = ids, .top_logprobs = lps, .cap = 6};
    p.n_logprobs = 6;
    float x[6];
    memcpy(x, a, sizeof x);
    int32_t tok;
    assert_int_equal(pg_sampler_sample(s, &p, &rng, x, NULL, 0, NULL, 0, &lp, &tok), PAGODA_OK);
    assert_true(isfinite(lp.sampled_logprob));
    assert_int_equal(ids[0], 1);
    assert_true(isinf(lps[5]) && lps[5] < 0);

    /* all NaN: error, not a crash */
    float d[6] = {NAN, NAN, NAN, NAN, NAN, -INFINITY};
    tok = -5;
    assert_int_equal(pg_sampler_sample(s, &p, &rng, d, NULL, 0, NULL, 0, &lp, &tok),
                     PAGODA_ERR_INVALID_ARG);
    assert_non_null(strstr(pg_last_error(), "NaN"));
    assert_int_equal(tok, -5);

    /* a penalty pushing FLT_MAX past the float range stays finite */
    p = pg_sampling_params_default();
    p.temperature = 0.0f;
    p.repetition_penalty = 0.5f;
    const int32_t h[1] = {0};
    float e[6] = {FLT_MAX, 1.0f, 0.0f, 0.0f, 0.0f, 0.0f};
    run_greedy(s, &p, e, h, 1, NULL, 0, &tok);
    assert_int_equal(tok, 0);
    assert_true(e[0] == FLT_MAX);
    pg_sampler_free(s);
}

/* ---- parameters */

static void expect_invalid(const pg_sampling_params *p, int32_t v, const char *what) {
    assert_int_equal(pg_sampling_params_validate(p, v), PAGODA_ERR_INVALID_ARG);
    if (!strstr(pg_last_error(), what))
        fail_msg("message '%s' does not mention '%s'", pg_last_error(), what);
}

static void test_invalid_params_rejected(void **state) {
    (void)state;
    pg_sampling_params ok = pg_sampling_params_default(), p;
    assert_int_equal(pg_sampling_params_validate(&ok, 10), PAGODA_OK);
    p = ok, p.top_p = 0.0f;
    expect_invalid(&p, 10, "top_p must be in (0, 1], got 0");
    p = ok, p.top_p = 1.5f;
    expect_invalid(&p, 10, "top_p");
    p = ok, p.top_p = NAN;
    expect_invalid(&p, 10, "top_p");
    p = ok, p.temperature = -0.5f;
    expect_invalid(&p, 10, "temperature");
    p = ok, p.temperature = INFINITY;
    expect_invalid(&p, 10, "temperature");
    p = ok, p.top_k = -2;
    expect_invalid(&p, 10, "top_k");
    p = ok, p.min_p = 1.5f;
    expect_invalid(&p, 10, "min_p");
    p = ok, p.repetition_penalty = 0.0f;
    expect_invalid(&p, 10, "repetition_penalty");
    p = ok, p.presence_penalty = 2.5f;
    expect_invalid(&p, 10, "presence_penalty");
    p = ok, p.frequency_penalty = -3.0f;
    expect_invalid(&p, 10, "frequency_penalty");
    p = ok, p.n_logprobs = -1;
    expect_invalid(&p, 10, "n_logprobs");
    p = ok, p.n_logprobs = 11;
    expect_invalid(&p, 10, "n_logprobs");
    pg_logit_bias bad_id = {10, 1.0f}, bad_val = {3, NAN}, plus_inf = {3, INFINITY};
    p = ok, p.logit_bias = &bad_id, p.n_logit_bias = 1;
    expect_invalid(&p, 10, "logit_bias token 10");
    p = ok, p.logit_bias = &bad_val, p.n_logit_bias = 1;
    expect_invalid(&p, 10, "logit_bias");
    p = ok, p.logit_bias = &plus_inf, p.n_logit_bias = 1;
    expect_invalid(&p, 10, "logit_bias");
    p = ok, p.n_logit_bias = 2;
    expect_invalid(&p, 10, "logit_bias is NULL");
    /* the edges are fine */
    p = ok, p.top_p = 1.0f, p.min_p = 1.0f, p.top_k = -1, p.temperature = 0.0f;
    p.presence_penalty = -2.0f, p.frequency_penalty = 2.0f, p.n_logprobs = 10;
    assert_int_equal(pg_sampling_params_validate(&p, 10), PAGODA_OK);

    /* sample validates too, and rejects history ids outside the vocabulary
     * without leaving state behind */
    pg_sampler *s = make_sampler(4);
    pg_rng rng = pg_rng_from_seed(0);
    float x[4] = {0, 1, 2, 3};
    int32_t tok = -9;
    p = ok, p.top_p = 2.0f;
    assert_int_equal(pg_sampler_sample(s, &p, &rng, x, NULL, 0, NULL, 0, NULL, &tok),
                     PAGODA_ERR_INVALID_ARG);
    p = ok, p.temperature = 0.0f, p.frequency_penalty = 1.0f;
    const int32_t bad[3] = {3, 3, 4};
    assert_int_equal(pg_sampler_sample(s, &p, &rng, x, NULL, 0, bad, 3, NULL, &tok),
                     PAGODA_ERR_INVALID_ARG);
    assert_non_null(strstr(pg_last_error(), "output token 2 is 4"));
    assert_int_equal(tok, -9);
    p.repetition_penalty = 2.0f;
    const int32_t neg[1] = {-1};
    assert_int_equal(pg_sampler_sample(s, &p, &rng, x, neg, 1, bad, 2, NULL, &tok),
                     PAGODA_ERR_INVALID_ARG);
    assert_non_null(strstr(pg_last_error(), "prompt token 0 is -1"));
    float y[4] = {0, 1, 2, 3};
    p.repetition_penalty = 1.0f;
    run_greedy(s, &p, y, NULL, 0, bad, 1, &tok); /* one 3: 3 - 1 = 2 */
    assert_float_equal(y[3], 2.0f, 0.0);
    assert_int_equal(tok, 2);

    pg_sampler *none = (pg_sampler *)&tok;
    assert_int_equal(pg_sampler_create(0, &none), PAGODA_ERR_INVALID_ARG);
    assert_null(none);
    pg_sampler_free(s);
    pg_sampler_free(NULL);
}

/* ---- reproducibility and independence */

/* A toy "model": logits for request `req` at output position `pos`
 * (a deterministic function of both, with a soft preference for a few ids). */
#define TOY_V 1000
static void toy_logits(int req, size_t pos, float *x) {
    uint64_t h =
        0x9E3779B97F4A7C15ull * (uint64_t)(req + 1) ^ (uint64_t)pos * 0xBF58476D1CE4E5B9ull;
    for (size_t i = 0; i < TOY_V; i++) {
        h ^= h >> 31;
        h *= 0x94D049BB133111EBull;
        h ^= h >> 29;
        x[i] = (float)((double)(h >> 11) * 0x1.0p-53 * 3.0);
    }
}

/* Generate n tokens for a request, feeding back its output for penalties. */
static void generate(pg_sampler *s, int req, const pg_sampling_params *p, const pg_rng *rng,
                     const int32_t *prompt, size_t np, int32_t *out, size_t n) {
    float x[TOY_V];
    for (size_t pos = 0; pos < n; pos++) {
        toy_logits(req, pos, x);
        pagoda_status st = pg_sampler_sample(s, p, rng, x, prompt, np, out, pos, NULL, &out[pos]);
        if (st != PAGODA_OK) fail_msg("%s", pg_last_error());
    }
}

static pg_sampling_params busy_params(void) {
    pg_sampling_params p = pg_sampling_params_default();
    p.temperature = 0.9f;
    p.top_k = 200;
    p.top_p = 0.95f;
    p.min_p = 0.01f;
    p.repetition_penalty = 1.1f;
    p.frequency_penalty = 0.3f;
    p.presence_penalty = 0.2f;
    return p;
}

static void test_same_seed_same_tokens_other_seed_other_tokens(void **state) {
    (void)state;
    pg_sampler *s = make_sampler(TOY_V);
    pg_sampling_params p = busy_params();
    const int32_t prompt[4] = {5, 6, 7, 5};
    int32_t a[60], b[60], c[60];
    pg_rng r42 = pg_rng_from_seed(42), r43 = pg_rng_from_seed(43);
    generate(s, 0, &p, &r42, prompt, 4, a, 60);
    generate(s, 0, &p, &r42, prompt, 4, b, 60);
    generate(s, 0, &p, &r43, prompt, 4, c, 60);
    assert_memory_equal(a, b, sizeof a);
    int differ = 0;
    for (int i = 0; i < 60; i++)
        differ += a[i] != c[i];
    assert_true(differ > 30);
    pg_sampler_free(s);
}

typedef struct {
    int32_t out[60];
} thread_job;

static void *thread_main(void *arg) {
    thread_job *job = arg;
    pg_sampler *s = NULL;
    if (pg_sampler_create(TOY_V, &s) != PAGODA_OK) return NULL;
    pg_sampling_params p = busy_params();
    pg_rng r = pg_rng_from_seed(42);
    const int32_t prompt[4] = {5, 6, 7, 5};
    float x[TOY_V];
    for (size_t pos = 0; pos < 60; pos++) {
        toy_logits(0, pos, x);
        if (pg_sampler_sample(s, &p, &r, x, prompt, 4, job->out, pos, NULL, &job->out[pos]) !=
            PAGODA_OK)
            job->out[pos] = -1;
    }
    pg_sampler_free(s);
    return NULL;
}

static void test_same_tokens_on_any_thread(void **state) {
    (void)state;
    int32_t want[60];
    pg_sampler *s = make_sampler(TOY_V);
    pg_sampling_params p = busy_params();
    pg_rng r = pg_rng_from_seed(42);
    const int32_t prompt[4] = {5, 6, 7, 5};
    generate(s, 0, &p, &r, prompt, 4, want, 60);
    pg_sampler_free(s);
    thread_job jobs[4];
    pthread_t th[4];
    for (int t = 0; t < 4; t++)
        assert_int_equal(pthread_create(&th[t], NULL, thread_main, &jobs[t]), 0);
    for (int t = 0; t < 4; t++) {
        pthread_join(th[t], NULL);
        assert_memory_equal(jobs[t].out, want, sizeof want);
    }
}

/* Request A's tokens do not depend on request B being sampled in between
 * (same sampler object, different params, seeds and histories). */
static void test_interleaved_requests_are_independent(void **state) {
    (void)state;
    pg_sampler *s = make_sampler(TOY_V);
    pg_sampling_params pa = busy_params(), pb = pg_sampling_params_default();
    pb.temperature = 1.3f;
    pb.repetition_penalty = 1.5f;
    pb.presence_penalty = -1.0f;
    pg_rng ra = pg_rng_from_seed(7), rb = pg_rng_from_seed(8);
    const int32_t prompt_a[3] = {1, 2, 3}, prompt_b[5] = {3, 3, 9, 10, 11};
    int32_t alone_a[50], alone_b[50], mixed_a[50], mixed_b[50];
    generate(s, 1, &pa, &ra, prompt_a, 3, alone_a, 50);
    generate(s, 2, &pb, &rb, prompt_b, 5, alone_b, 50);
    float x[TOY_V];
    for (size_t pos = 0; pos < 50; pos++) {
        /* B runs one step ahead of A, as in a batch with staggered arrivals */
        toy_logits(2, pos, x);
        assert_int_equal(
            pg_sampler_sample(s, &pb, &rb, x, prompt_b, 5, mixed_b, pos, NULL, &mixed_b[pos]),
            PAGODA_OK);
        toy_logits(1, pos, x);
        assert_int_equal(
            pg_sampler_sample(s, &pa, &ra, x, prompt_a, 3, mixed_a, pos, NULL, &mixed_a[pos]),
            PAGODA_OK);
    }
    assert_memory_equal(alone_a, mixed_a, sizeof alone_a);
    assert_memory_equal(alone_b, mixed_b, sizeof alone_b);
    /* and a request that was recomputed (preempted) redraws the same tokens:
     * resuming at position 20 from its first 20 tokens gives the rest */
    int32_t resumed[50];
    memcpy(resumed, alone_a, 20 * sizeof(int32_t));
    for (size_t pos = 20; pos < 50; pos++) {
        toy_logits(1, pos, x);
        assert_int_equal(
            pg_sampler_sample(s, &pa, &ra, x, prompt_a, 3, resumed, pos, NULL, &resumed[pos]),
            PAGODA_OK);
    }
    assert_memory_equal(alone_a, resumed, sizeof alone_a);
    pg_sampler_free(s);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_philox_known_answers),
        cmocka_unit_test(test_rng_is_a_pure_function),
        cmocka_unit_test(test_greedy_is_argmax_lowest_id_on_ties),
        cmocka_unit_test(test_empirical_distribution_matches_softmax),
        cmocka_unit_test(test_blocked_draw_across_block_edges),
        cmocka_unit_test(test_temperature_scales_the_distribution),
        cmocka_unit_test(test_top_k_1_is_greedy),
        cmocka_unit_test(test_min_p_top_p_top_k_on_a_hand_made_distribution),
        cmocka_unit_test(test_rejection_sampling_keeps_the_target_distribution),
        cmocka_unit_test(test_tiny_top_p_is_argmax),
        cmocka_unit_test(test_fast_paths_match_a_full_sort_reference),
        cmocka_unit_test(test_penalties_hand_computed),
        cmocka_unit_test(test_logit_bias_and_bans),
        cmocka_unit_test(test_filters_with_most_tokens_banned),
        cmocka_unit_test(test_logprobs_are_raw_log_softmax),
        cmocka_unit_test(test_nan_and_inf_logits),
        cmocka_unit_test(test_invalid_params_rejected),
        cmocka_unit_test(test_same_seed_same_tokens_other_seed_other_tokens),
        cmocka_unit_test(test_same_tokens_on_any_thread),
        cmocka_unit_test(test_interleaved_requests_are_independent),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
