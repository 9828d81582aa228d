/* `pagoda bench serve` pure parts: vLLM's metrics on hand-made timelines,
 * the SSE parser fed at every split point, the gamma arrival schedule, the
 * random dataset (with a toy tokenizer) and the report/JSON output. */
#include "testutil.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "bench/bench_dataset.h"
#include "bench/bench_metrics.h"
#include "bench/bench_report.h"
#include "bench/bench_schedule.h"
#include "bench/bench_sse.h"
#include "bench/bench_tokenizer.h"

#define EPS 1e-9

/* ------------------------------------------------------------------ */
/* metrics                                                             */

static void test_percentile_is_numpy_linear(void **state) {
    (void)state;
    const double x[] = {1, 2, 3, 4};
    assert_float_equal(pg_bench_percentile(x, 4, 50), 2.5, EPS);
    assert_float_equal(pg_bench_percentile(x, 4, 0), 1, EPS);
    assert_float_equal(pg_bench_percentile(x, 4, 100), 4, EPS);
    /* rank 0.99 * 3 = 2.97 -> 3 + 0.97 * (4 - 3) */
    assert_float_equal(pg_bench_percentile(x, 4, 99), 3.97, EPS);
    /* rank 0.25 * 3 = 0.75 -> 1.75 */
    assert_float_equal(pg_bench_percentile(x, 4, 25), 1.75, EPS);
    const double one[] = {7};
    assert_float_equal(pg_bench_percentile(one, 1, 99), 7, EPS);
    assert_float_equal(pg_bench_percentile(NULL, 0, 99), 0, EPS);
}

/* Four requests, worked by hand (times in s):
 *  A ok  prompt 10 out 4  start 0.0 ttft 0.5 itl .1 .2 .3  -> e2el 1.1, tpot .2
 *  B ok  prompt 20 out 3  start 0.2 ttft 1.0 itl .4 .6     -> e2el 2.0, tpot .5
 *  C failed, prompt 30
 *  D ok  prompt 5  out 1  start 1.5 ttft 0.3 no itl        -> e2el 0.3, no tpot
 * duration 4 s. */
static const double ITL_A[] = {0.1, 0.2, 0.3}, ITL_B[] = {0.4, 0.6};
static void timeline(pg_bench_outcome o[4]) {
    memset(o, 0, 4 * sizeof *o);
    o[0] = (pg_bench_outcome){true, 10, 4, 0.0, 0.5, 1.1, ITL_A, 3};
    o[1] = (pg_bench_outcome){true, 20, 3, 0.2, 1.0, 2.0, ITL_B, 2};
    o[2] = (pg_bench_outcome){false, 30, 0, 0.4, 0, 0, NULL, 0};
    o[3] = (pg_bench_outcome){true, 5, 1, 1.5, 0.3, 0.3, NULL, 0};
}

static void test_metrics_hand_timeline(void **state) {
    (void)state;
    pg_bench_outcome o[4];
    timeline(o);
    const double pct[] = {99, 25, 50};
    pg_bench_metrics m;
    assert_int_equal(pg_bench_metrics_compute(o, 4, 4.0, pct, 3, NULL, &m), PAGODA_OK);
    assert_int_equal(m.completed, 3);
    assert_int_equal(m.failed, 1);
    assert_int_equal(m.total_input, 35);
    assert_int_equal(m.total_output, 8);
    assert_false(m.has_goodput);
    assert_float_equal(m.request_throughput, 0.75, EPS);
    assert_float_equal(m.output_throughput, 2.0, EPS);
    assert_float_equal(m.total_token_throughput, 10.75, EPS);
    /* TTFT {0.3, 0.5, 1.0}: mean .6, std sqrt(.26/3) */
    assert_float_equal(m.ttft.mean, 600, 1e-6);
    assert_float_equal(m.ttft.median, 500, 1e-6);
    assert_float_equal(m.ttft.std, sqrt(0.26 / 3) * 1000, 1e-6);
    assert_float_equal(m.ttft.pct[0], 990, 1e-6); /* .5 + .98 * .5 */
    assert_float_equal(m.ttft.pct[1], 400, 1e-6);
    assert_float_equal(m.ttft.pct[2], 500, 1e-6);
    /* TPOT over A, B only: {.2, .5} */
    assert_float_equal(m.tpot.mean, 350, 1e-6);
    assert_float_equal(m.tpot.median, 350, 1e-6);
    assert_float_equal(m.tpot.std, 150, 1e-6);
    assert_float_equal(m.tpot.pct[0], 497, 1e-6);
    /* ITL pooled {.1 .2 .3 .4 .6}: mean .32, std sqrt(.148/5) */
    assert_float_equal(m.itl.mean, 320, 1e-6);
    assert_float_equal(m.itl.median, 300, 1e-6);
    assert_float_equal(m.itl.std, sqrt(0.148 / 5) * 1000, 1e-6);
    assert_float_equal(m.itl.pct[0], 592, 1e-6); /* rank 3.96: .4 + .96 * .2 */
    assert_float_equal(m.itl.pct[1], 200, 1e-6);
    /* E2EL {.3, 1.1, 2.0} */
    assert_float_equal(m.e2el.mean, 3400.0 / 3, 1e-6);
    assert_float_equal(m.e2el.median, 1100, 1e-6);
    assert_float_equal(m.e2el.pct[0], 1982, 1e-6);
    /* token times A .5 .6 .8 1.1, B 1.2 1.6 2.2, D 1.8 -> buckets 3, 4, 1 */
    assert_float_equal(m.max_output_tokens_per_s, 4, EPS);
    /* in flight A [0, 1.1), B [0.2, 2.2), D [1.5, 1.8): never more than two at
     * once (counting whole seconds a request touches would say 3) */
    assert_int_equal(m.max_concurrent_requests, 2);
}

/* Peak concurrency is the most requests in flight at one instant
 * ([start, start + E2EL) intervals, vLLM's sweep), never more than the
 * client's --max-concurrency. */
static void test_peak_concurrency_is_exact(void **state) {
    (void)state;
    const double pct[] = {99};
    pg_bench_metrics m;
    /* back to back: one ends at 1.0 exactly when the next starts */
    pg_bench_outcome o[3] = {{true, 1, 1, 0.0, 0.1, 1.0, NULL, 0},
                             {true, 1, 1, 1.0, 0.1, 1.0, NULL, 0},
                             {false, 1, 0, 0.5, 0, 0, NULL, 0}};
    assert_int_equal(pg_bench_metrics_compute(o, 3, 2.0, pct, 1, NULL, &m), PAGODA_OK);
    assert_int_equal(m.max_concurrent_requests, 1); /* the failed one does not count */
    o[1].start_time = 0.999;
    assert_int_equal(pg_bench_metrics_compute(o, 3, 2.0, pct, 1, NULL, &m), PAGODA_OK);
    assert_int_equal(m.max_concurrent_requests, 2);

    /* A closed loop with 16 slots, as the client runs --max-concurrency 16:
     * 400 requests of uneven length (10 ms .. 1.6 s), each started the moment
     * a slot frees, so at most 16 overlap and 16 do. Most seconds of the run
     * see far more than 16 requests start or end in them. */
    enum { N = 400, SLOTS = 16 };
    pg_bench_outcome *r = calloc(N, sizeof *r);
    double free_at[SLOTS] = {0};
    uint64_t x = 88172645463325252ull;
    for (int i = 0; i < N; i++) {
        int s = 0;
        for (int k = 1; k < SLOTS; k++)
            if (free_at[k] < free_at[s]) s = k;
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        double len = 0.01 + (double)(x % 1600) / 1000.0;
        r[i] = (pg_bench_outcome){true, 4, 2, free_at[s], len / 2, len, NULL, 0};
        free_at[s] += len;
    }
    double end = 0;
    for (int k = 0; k < SLOTS; k++)
        end = free_at[k] > end ? free_at[k] : end;
    assert_int_equal(pg_bench_metrics_compute(r, N, end, pct, 1, NULL, &m), PAGODA_OK);
    assert_int_equal(m.max_concurrent_requests, SLOTS);
    free(r);
}

static void test_goodput_slos(void **state) {
    (void)state;
    pg_bench_outcome o[4];
    timeline(o);
    const double pct[] = {99};
    pg_bench_metrics m;
    /* ttft <= 600 and tpot <= 300: A (.5, .2) and D (.3, tpot 0) pass, B fails */
    pg_bench_slo slo = {600, 300, -1};
    assert_int_equal(pg_bench_metrics_compute(o, 4, 4.0, pct, 1, &slo, &m), PAGODA_OK);
    assert_true(m.has_goodput);
    assert_int_equal(m.good_completed, 2);
    assert_float_equal(m.request_goodput, 0.5, EPS);
    /* SLO equal to the value passes (vLLM: slo >= value) */
    slo = (pg_bench_slo){500, -1, -1};
    assert_int_equal(pg_bench_metrics_compute(o, 4, 4.0, pct, 1, &slo, &m), PAGODA_OK);
    assert_int_equal(m.good_completed, 2); /* A .5, D .3 */
    slo = (pg_bench_slo){-1, -1, 1000};
    assert_int_equal(pg_bench_metrics_compute(o, 4, 4.0, pct, 1, &slo, &m), PAGODA_OK);
    assert_int_equal(m.good_completed, 1); /* only D (E2EL .3) */
}

static void test_metrics_all_failed_and_bad_args(void **state) {
    (void)state;
    pg_bench_outcome o[2] = {{.success = false, .prompt_len = 3}, {.success = false}};
    const double pct[] = {99};
    pg_bench_metrics m;
    assert_int_equal(pg_bench_metrics_compute(o, 2, 1.0, pct, 1, NULL, &m), PAGODA_OK);
    assert_int_equal(m.completed, 0);
    assert_int_equal(m.failed, 2);
    assert_int_equal(m.total_input, 0);
    assert_float_equal(m.ttft.mean, 0, EPS);
    assert_float_equal(m.itl.pct[0], 0, EPS);
    assert_float_equal(m.max_output_tokens_per_s, 0, EPS);
    assert_int_equal(pg_bench_metrics_compute(o, 2, 0.0, pct, 1, NULL, &m), PAGODA_ERR_INVALID_ARG);
    assert_non_null(strstr(pg_last_error(), "duration"));
    const double badp[] = {101};
    assert_int_equal(pg_bench_metrics_compute(o, 2, 1.0, badp, 1, NULL, &m),
                     PAGODA_ERR_INVALID_ARG);
    assert_non_null(strstr(pg_last_error(), "percentile 101"));
}

/* ------------------------------------------------------------------ */
/* SSE                                                                  */

typedef struct events {
    char got[16][64];
    int n;
    int stop_after; /* 0: never */
} events;

static bool collect(void *ctx, const char *data, size_t len) {
    events *e = ctx;
    assert_true(e->n < 16);
    assert_int_equal(strlen(data), len);
    snprintf(e->got[e->n++], 64, "%s", data);
    return !(e->stop_after && e->n >= e->stop_after);
}

static const char STREAM[] = ": keep-alive ping\r\n"
                             "data: {\"a\":1}\r\n\r\n"
                             "data: line1\ndata: line2\n\n"
                             "event: message\nid: 5\nretry: 10\ndata:nospace\r\r"
                             "data\n\n"
                             "data: [DONE]\n\n";
static const char *const WANT[] = {"{\"a\":1}", "line1\nline2", "nospace", "", "[DONE]"};

static void check_events(const events *e) {
    assert_int_equal(e->n, 5);
    for (int i = 0; i < 5; i++)
        assert_string_equal(e->got[i], WANT[i]);
}

static void test_sse_whole_bytewise_and_every_split(void **state) {
    (void)state;
    size_t len = sizeof STREAM - 1;
    pg_sse_parser p;
    events e = {0};
    pg_sse_init(&p);
    assert_int_equal(pg_sse_feed(&p, STREAM, len, collect, &e), PAGODA_OK);
    assert_int_equal(pg_sse_finish(&p, collect, &e), PAGODA_OK);
    pg_sse_free(&p);
    check_events(&e);

    memset(&e, 0, sizeof e);
    pg_sse_init(&p);
    for (size_t i = 0; i < len; i++)
        assert_int_equal(pg_sse_feed(&p, STREAM + i, 1, collect, &e), PAGODA_OK);
    assert_int_equal(pg_sse_finish(&p, collect, &e), PAGODA_OK);
    pg_sse_free(&p);
    check_events(&e);

    for (size_t cut = 0; cut <= len; cut++) {
        memset(&e, 0, sizeof e);
        pg_sse_init(&p);
        assert_int_equal(pg_sse_feed(&p, STREAM, cut, collect, &e), PAGODA_OK);
        assert_int_equal(pg_sse_feed(&p, STREAM + cut, len - cut, collect, &e), PAGODA_OK);
        assert_int_equal(pg_sse_finish(&p, collect, &e), PAGODA_OK);
        pg_sse_free(&p);
        check_events(&e);
    }
}

static void test_sse_unterminated_tail_limit_and_stop(void **state) {
    (void)state;
    pg_sse_parser p;
    events e = {0};
    /* no trailing newline at all: the last event is still delivered */
    pg_sse_init(&p);
    const char tail[] = "data: {\"x\":2}\n\ndata: {\"y\":3}";
    assert_int_equal(pg_sse_feed(&p, tail, sizeof tail - 1, collect, &e), PAGODA_OK);
    assert_int_equal(e.n, 1);
    assert_int_equal(pg_sse_finish(&p, collect, &e), PAGODA_OK);
    assert_int_equal(e.n, 2);
    assert_string_equal(e.got[1], "{\"y\":3}");
    pg_sse_free(&p);

    /* a line longer than the limit is an error, not a crash */
    pg_sse_init(&p);
    p.max_bytes = 16;
    const char big[] = "data: 0123456789012345678901234567890\n\n";
    assert_int_equal(pg_sse_feed(&p, big, sizeof big - 1, collect, &e), PAGODA_ERR_LIMIT);
    assert_non_null(strstr(pg_last_error(), "longer than 16 bytes"));
    pg_sse_free(&p);

    /* the callback stops the parser */
    memset(&e, 0, sizeof e);
    e.stop_after = 1;
    pg_sse_init(&p);
    assert_int_equal(pg_sse_feed(&p, STREAM, sizeof STREAM - 1, collect, &e), PAGODA_OK);
    assert_int_equal(pg_sse_finish(&p, collect, &e), PAGODA_OK);
    assert_int_equal(e.n, 1);
    pg_sse_free(&p);
}

/* ------------------------------------------------------------------ */
/* schedule                                                             */

static void gamma_moments(double shape, double scale) {
    pg_bench_rng r;
    pg_bench_rng_seed(&r, 42);
    const int n = 200000;
    double s = 0, s2 = 0;
    for (int i = 0; i < n; i++) {
        double x = pg_bench_rng_gamma(&r, shape, scale);
        assert_true(x >= 0);
        s += x;
        s2 += x * x;
    }
    double mean = s / n, var = s2 / n - mean * mean;
    double want_mean = shape * scale, want_var = shape * scale * scale;
    /* 200k samples: the standard error of the mean is < 0.3% of it here */
    assert_true(fabs(mean - want_mean) < 0.02 * want_mean);
    assert_true(fabs(var - want_var) < 0.05 * want_var);
}

static void test_gamma_moments(void **state) {
    (void)state;
    /* rate 4 req/s: scale = 1/(rate * burstiness), mean gap = 1/rate */
    gamma_moments(1.0, 1.0 / 4.0);
    gamma_moments(0.5, 1.0 / (4.0 * 0.5));
    gamma_moments(4.0, 1.0 / (4.0 * 4.0));
}

static void test_arrivals(void **state) {
    (void)state;
    const size_t n = 2000;
    double *t = malloc(n * sizeof *t), *u = malloc(n * sizeof *u);
    pg_bench_rng r;
    pg_bench_rng_seed(&r, 7);
    assert_int_equal(pg_bench_arrivals(n, 10.0, 1.0, &r, t), PAGODA_OK);
    for (size_t i = 1; i < n; i++)
        assert_true(t[i] >= t[i - 1]);
    assert_true(t[0] >= 0);
    assert_float_equal(t[n - 1], n / 10.0, 1e-9); /* rescaled to n / rate, as vLLM */
    /* Poisson: the gaps' coefficient of variation is ~1; burstiness 4: ~0.5 */
    double s = 0, s2 = 0;
    for (size_t i = 1; i < n; i++) {
        double g = t[i] - t[i - 1];
        s += g;
        s2 += g * g;
    }
    double mean = s / (n - 1), cv = sqrt(s2 / (n - 1) - mean * mean) / mean;
    assert_true(cv > 0.85 && cv < 1.15);
    pg_bench_rng_seed(&r, 7);
    assert_int_equal(pg_bench_arrivals(n, 10.0, 4.0, &r, u), PAGODA_OK);
    s = s2 = 0;
    for (size_t i = 1; i < n; i++) {
        double g = u[i] - u[i - 1];
        s += g;
        s2 += g * g;
    }
    mean = s / (n - 1);
    cv = sqrt(s2 / (n - 1) - mean * mean) / mean;
    assert_true(cv > 0.4 && cv < 0.6);
    /* same seed, same schedule */
    double *v = malloc(n * sizeof *v);
    pg_bench_rng_seed(&r, 7);
    assert_int_equal(pg_bench_arrivals(n, 10.0, 1.0, &r, v), PAGODA_OK);
    assert_memory_equal(t, v, n * sizeof *t);
    /* inf rate: all at once; inf burstiness: constant gaps */
    assert_int_equal(pg_bench_arrivals(n, INFINITY, 1.0, &r, v), PAGODA_OK);
    for (size_t i = 0; i < n; i++)
        assert_float_equal(v[i], 0, 0);
    assert_int_equal(pg_bench_arrivals(4, 2.0, INFINITY, &r, v), PAGODA_OK);
    for (size_t i = 0; i < 4; i++)
        assert_float_equal(v[i], 0.5 * (double)(i + 1), 1e-12);
    assert_int_equal(pg_bench_arrivals(4, 0.0, 1.0, &r, v), PAGODA_ERR_INVALID_ARG);
    assert_non_null(strstr(pg_last_error(), "request rate"));
    assert_int_equal(pg_bench_arrivals(4, 1.0, -1.0, &r, v), PAGODA_ERR_INVALID_ARG);
    assert_non_null(strstr(pg_last_error(), "burstiness"));
    free(t);
    free(u);
    free(v);
}

static void test_rng_int_covers_range(void **state) {
    (void)state;
    pg_bench_rng r;
    pg_bench_rng_seed(&r, 1);
    int seen[5] = {0};
    for (int i = 0; i < 1000; i++) {
        int64_t x = pg_bench_rng_int(&r, -2, 2);
        assert_true(x >= -2 && x <= 2);
        seen[x + 2]++;
    }
    for (int k = 0; k < 5; k++)
        assert_true(seen[k] > 100);
    double u = pg_bench_rng_uniform(&r);
    assert_true(u >= 0 && u < 1);
}

/* ------------------------------------------------------------------ */
/* dataset: a toy tokenizer whose decode -> encode is not the identity  */

/* id 0 "<s>" (special), 1 "a", 2 "b", 3 "ab", 4 "c", 5 " ", 6 "d", 7 "e".
 * Encoding is greedy longest match, so "a" then "b" re-encode as one "ab". */
static const char *const TOY[] = {"<s>", "a", "b", "ab", "c", " ", "d", "e"};

static bool toy_special(void *ctx, int32_t id) {
    (void)ctx;
    return id == 0;
}

static pagoda_status toy_encode(void *ctx, const char *text, size_t len, int32_t **ids, size_t *n) {
    (void)ctx;
    int32_t *out = malloc((len + 1) * sizeof *out);
    size_t k = 0;
    for (size_t i = 0; i < len;) {
        int best = -1;
        size_t best_len = 0;
        for (int id = 1; id < 8; id++) {
            size_t l = strlen(TOY[id]);
            if (l > best_len && i + l <= len && !memcmp(text + i, TOY[id], l)) {
                best = id;
                best_len = l;
            }
        }
        if (best < 0) {
            free(out);
            return pg_error(PAGODA_ERR_INVALID_ARG, "toy: cannot encode '%c'", text[i]);
        }
        out[k++] = best;
        i += best_len;
    }
    *ids = out;
    *n = k;
    return PAGODA_OK;
}

static pagoda_status toy_decode(void *ctx, const int32_t *ids, size_t n, char **text, size_t *len) {
    (void)ctx;
    char *out = malloc(n * 3 + 1);
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        size_t l = strlen(TOY[ids[i]]);
        memcpy(out + k, TOY[ids[i]], l);
        k += l;
    }
    out[k] = 0;
    *text = out;
    *len = k;
    return PAGODA_OK;
}

static const pg_bench_tokenizer TOY_TOK = {NULL, 8, toy_special, toy_encode, toy_decode, 0};

static void test_random_dataset_with_tokenizer(void **state) {
    (void)state;
    pg_bench_random_cfg cfg = {.input_len = 40, .output_len = 16, .range_ratio = 0.0};
    pg_bench_rng r;
    pg_bench_rng_seed(&r, 0);
    pg_bench_request *req;
    const size_t n = 50;
    assert_int_equal(pg_bench_random_dataset(&cfg, &TOY_TOK, n, &r, &req), PAGODA_OK);
    for (size_t i = 0; i < n; i++) {
        assert_non_null(req[i].prompt);
        assert_int_equal(req[i].prompt_len, 40);
        assert_int_equal(req[i].output_len, 16);
        int32_t *ids;
        size_t k;
        assert_int_equal(toy_encode(NULL, req[i].prompt, strlen(req[i].prompt), &ids, &k),
                         PAGODA_OK);
        assert_int_equal(k, 40); /* the text re-encodes to exactly the intended length */
        assert_memory_equal(ids, req[i].prompt_ids, k * sizeof *ids);
        for (size_t j = 0; j < k; j++)
            assert_int_not_equal(ids[j], 0); /* no special */
        free(ids);
    }
    pg_bench_requests_free(req, n);
}

static void test_random_dataset_ids_lengths_prefix(void **state) {
    (void)state;
    pg_bench_random_cfg cfg = {.input_len = 100,
                               .output_len = 10,
                               .range_ratio = 0.25,
                               .prefix_len = 5,
                               .vocab_size = 1000};
    pg_bench_rng r;
    pg_bench_rng_seed(&r, 3);
    pg_bench_request *req;
    const size_t n = 400;
    assert_int_equal(pg_bench_random_dataset(&cfg, NULL, n, &r, &req), PAGODA_OK);
    int in_min = 1 << 30, in_max = 0, out_min = 1 << 30, out_max = 0;
    for (size_t i = 0; i < n; i++) {
        assert_null(req[i].prompt);
        int in = req[i].prompt_len - 5;
        if (in < in_min) in_min = in;
        if (in > in_max) in_max = in;
        if (req[i].output_len < out_min) out_min = req[i].output_len;
        if (req[i].output_len > out_max) out_max = req[i].output_len;
        /* shared prefix, then consecutive ids (offset + i + j) % vocab */
        assert_memory_equal(req[i].prompt_ids, req[0].prompt_ids, 5 * sizeof(int32_t));
        for (int j = 6; j < req[i].prompt_len; j++)
            assert_int_equal(req[i].prompt_ids[j], (req[i].prompt_ids[j - 1] + 1) % 1000);
    }
    /* [floor(100 * .75), ceil(100 * 1.25)] and [floor(7.5), ceil(12.5)], both ends hit */
    assert_int_equal(in_min, 75);
    assert_int_equal(in_max, 125);
    assert_int_equal(out_min, 7);
    assert_int_equal(out_max, 13);
    pg_bench_requests_free(req, n);

    /* the same seed gives the same prompts */
    pg_bench_request *a, *b;
    pg_bench_rng_seed(&r, 9);
    assert_int_equal(pg_bench_random_dataset(&cfg, NULL, 3, &r, &a), PAGODA_OK);
    pg_bench_rng_seed(&r, 9);
    assert_int_equal(pg_bench_random_dataset(&cfg, NULL, 3, &r, &b), PAGODA_OK);
    for (int i = 0; i < 3; i++) {
        assert_int_equal(a[i].prompt_len, b[i].prompt_len);
        assert_memory_equal(a[i].prompt_ids, b[i].prompt_ids, a[i].prompt_len * sizeof(int32_t));
    }
    pg_bench_requests_free(a, 3);
    pg_bench_requests_free(b, 3);
}

/* The copy dataset: the passage, then its first R tokens again (default:
 * all of it once); a repeat longer than the passage keeps the period;
 * text prompts and a negative R are refused. */
static void test_copy_prompts(void **state) {
    (void)state;
    pg_bench_random_cfg cfg = {.input_len = 10, .output_len = 4, .vocab_size = 1000};
    pg_bench_rng r;
    static const struct {
        int32_t len, repeat, passage;
    } C[] = {{10, 0, 5}, {11, 0, 6}, {10, 3, 7}, {10, 9, 1}, {10, 50, 1}, {10, 7, 3}, {1, 0, 1}};
    for (size_t c = 0; c < sizeof C / sizeof C[0]; c++) {
        cfg.input_len = C[c].len;
        pg_bench_rng_seed(&r, 4);
        pg_bench_request *req;
        assert_int_equal(pg_bench_random_dataset(&cfg, NULL, 2, &r, &req), PAGODA_OK);
        int32_t orig[16];
        memcpy(orig, req[1].prompt_ids, (size_t)C[c].len * sizeof(int32_t));
        assert_int_equal(pg_bench_copy_prompts(req, 2, C[c].repeat), PAGODA_OK);
        assert_int_equal(req[1].prompt_len, C[c].len);
        for (int32_t k = 0; k < C[c].len; k++) /* the passage kept, then from its start */
            assert_int_equal(req[1].prompt_ids[k], orig[k % C[c].passage]);
        pg_bench_requests_free(req, 2);
    }
    pg_bench_rng_seed(&r, 4);
    pg_bench_request *req;
    cfg.input_len = 10;
    assert_int_equal(pg_bench_random_dataset(&cfg, NULL, 1, &r, &req), PAGODA_OK);
    assert_int_equal(pg_bench_copy_prompts(req, 1, -1), PAGODA_ERR_INVALID_ARG);
    req[0].prompt = strdup("text");
    assert_int_equal(pg_bench_copy_prompts(req, 1, 2), PAGODA_ERR_INVALID_ARG);
    pg_bench_requests_free(req, 1);
}

/* True when s is valid UTF-8 (what a JSON string must be). */
static bool valid_utf8(const char *s) {
    size_t n = strlen(s);
    for (size_t i = 0; i < n;) {
        utf8proc_int32_t cp;
        utf8proc_ssize_t k =
            utf8proc_iterate((const utf8proc_uint8_t *)s + i, (utf8proc_ssize_t)(n - i), &cp);
        if (k <= 0) return false;
        i += (size_t)k;
    }
    return true;
}

/* The project's tokenizers (SentencePiece-style with byte fallback and a
 * BOS, and byte-level BPE without one): every random prompt is valid UTF-8
 * without NUL, its text re-encodes to its ids, and encoded the way a server
 * does (special tokens added) it is exactly input_len + prefix_len tokens:
 * the dataset leaves room for the BOS (vLLM's num_special_tokens_to_add). */
static void random_dataset_real(const char *asset, int32_t n_special, int32_t input_len,
                                int32_t prefix_len, uint64_t seed) {
    pg_tokenizer *tk;
    assert_int_equal(pg_tokenizer_load(pg_test_asset(asset), &tk), PAGODA_OK);
    pg_bench_tokenizer bt = pg_bench_tokenizer_wrap(tk);
    assert_int_equal(bt.num_special_to_add, n_special);
    pg_bench_random_cfg cfg = {.input_len = input_len, .output_len = 8, .prefix_len = prefix_len};
    pg_bench_rng r;
    pg_bench_rng_seed(&r, seed);
    pg_bench_request *req;
    const size_t n = 32;
    assert_int_equal(pg_bench_random_dataset(&cfg, &bt, n, &r, &req), PAGODA_OK);
    size_t want = (size_t)(input_len + prefix_len);
    int32_t *server = malloc((want + 64) * sizeof *server);
    for (size_t i = 0; i < n; i++) {
        assert_int_equal(req[i].prompt_len, (int32_t)want - n_special);
        assert_true(valid_utf8(req[i].prompt));
        int32_t *ids;
        size_t k;
        assert_int_equal(bt.encode(bt.ctx, req[i].prompt, strlen(req[i].prompt), &ids, &k),
                         PAGODA_OK);
        assert_int_equal(k, want - (size_t)n_special);
        assert_memory_equal(ids, req[i].prompt_ids, k * sizeof *ids);
        for (size_t j = 0; j < k; j++)
            assert_false(pg_tokenizer_is_special(tk, ids[j]));
        free(ids);
        size_t ns = 0;
        assert_int_equal(pg_tokenizer_encode(tk, req[i].prompt, strlen(req[i].prompt), true, server,
                                             want + 64, &ns),
                         PAGODA_OK);
        if (ns != want)
            fail_msg("%s seed %llu prompt %zu: the server would see %zu tokens, not %zu", asset,
                     (unsigned long long)seed, i, ns, want);
    }
    free(server);
    pg_bench_requests_free(req, n);
    pg_tokenizer_free(tk);
}

static void test_random_dataset_real_tokenizers(void **state) {
    (void)state;
    /* stories260K: 512 ids, half of them byte-fallback tokens, so random
     * prompts are full of partial UTF-8 sequences and NUL bytes */
    for (uint64_t seed = 0; seed < 3; seed++)
        random_dataset_real("llm/stories260K-hf", 1, 64, 0, seed);
    random_dataset_real("llm/stories260K-hf", 1, 17, 8, 5);
    random_dataset_real("tokenizers/qwen3", 0, 64, 0, 0);
    random_dataset_real("tokenizers/qwen3", 0, 32, 16, 0);
}

static void test_random_dataset_bad_config(void **state) {
    (void)state;
    pg_bench_rng r;
    pg_bench_rng_seed(&r, 0);
    pg_bench_request *req = (pg_bench_request *)1;
    pg_bench_random_cfg cfg = {
        .input_len = 10, .output_len = 10, .range_ratio = 1.0, .vocab_size = 9};
    assert_int_equal(pg_bench_random_dataset(&cfg, NULL, 2, &r, &req), PAGODA_ERR_INVALID_ARG);
    assert_null(req);
    assert_non_null(strstr(pg_last_error(), "range ratio"));
    cfg.range_ratio = 0;
    cfg.output_len = 0;
    assert_int_equal(pg_bench_random_dataset(&cfg, NULL, 2, &r, &req), PAGODA_ERR_INVALID_ARG);
    cfg.output_len = 1;
    cfg.vocab_size = 0;
    assert_int_equal(pg_bench_random_dataset(&cfg, NULL, 2, &r, &req), PAGODA_ERR_INVALID_ARG);
    assert_non_null(strstr(pg_last_error(), "vocabulary size"));
    /* one token, and the tokenizer adds one: nothing left of the prompt's own
     * (vLLM: prefix + sampled must be at least 1) */
    pg_bench_tokenizer bos_tok = TOY_TOK;
    bos_tok.num_special_to_add = 1;
    cfg = (pg_bench_random_cfg){.input_len = 1, .output_len = 4};
    assert_int_equal(pg_bench_random_dataset(&cfg, &bos_tok, 2, &r, &req), PAGODA_ERR_INVALID_ARG);
    assert_non_null(strstr(pg_last_error(), "--random-input-len 1 is too small"));
    cfg.prefix_len = 1; /* a shared prefix token makes it valid */
    assert_int_equal(pg_bench_random_dataset(&cfg, &bos_tok, 2, &r, &req), PAGODA_OK);
    assert_int_equal(req[0].prompt_len, 1);
    pg_bench_requests_free(req, 2);
    cfg = (pg_bench_random_cfg){.input_len = 0, .output_len = 4, .vocab_size = 9};
    assert_int_equal(pg_bench_random_dataset(&cfg, NULL, 2, &r, &req), PAGODA_ERR_INVALID_ARG);
}

/* ------------------------------------------------------------------ */
/* report                                                               */

static void test_parse_options(void **state) {
    (void)state;
    double p[PG_BENCH_MAX_PERCENTILES];
    size_t n;
    assert_int_equal(pg_bench_parse_percentiles("50,90,99.9", p, &n), PAGODA_OK);
    assert_int_equal(n, 3);
    assert_float_equal(p[2], 99.9, EPS);
    assert_int_equal(pg_bench_parse_percentiles("50,,99", p, &n), PAGODA_ERR_INVALID_ARG);
    assert_int_equal(pg_bench_parse_percentiles("101", p, &n), PAGODA_ERR_INVALID_ARG);
    assert_int_equal(pg_bench_parse_percentiles("", p, &n), PAGODA_ERR_INVALID_ARG);
    unsigned bits;
    assert_int_equal(pg_bench_parse_metric_names("ttft,e2el", &bits), PAGODA_OK);
    assert_int_equal(bits, PG_BENCH_METRIC_TTFT | PG_BENCH_METRIC_E2EL);
    assert_int_equal(pg_bench_parse_metric_names("ttft,foo", &bits), PAGODA_ERR_INVALID_ARG);
    pg_bench_slo slo = {-1, -1, -1};
    assert_int_equal(pg_bench_parse_slo("ttft:500", &slo), PAGODA_OK);
    assert_int_equal(pg_bench_parse_slo("e2el:2000.5", &slo), PAGODA_OK);
    assert_float_equal(slo.ttft_ms, 500, EPS);
    assert_float_equal(slo.tpot_ms, -1, EPS);
    assert_float_equal(slo.e2el_ms, 2000.5, EPS);
    assert_int_equal(pg_bench_parse_slo("itl:5", &slo), PAGODA_ERR_INVALID_ARG);
    assert_int_equal(pg_bench_parse_slo("ttft:-1", &slo), PAGODA_ERR_INVALID_ARG);
    assert_int_equal(pg_bench_parse_slo("ttft", &slo), PAGODA_ERR_INVALID_ARG);
    assert_int_equal(pg_bench_parse_slo("tpot:abc", &slo), PAGODA_ERR_INVALID_ARG);
}

static void test_outcomes_token_count_fallbacks(void **state) {
    (void)state;
    pg_bench_request req[3] = {{.prompt_len = 4}, {.prompt_len = 5}, {.prompt_len = 6}};
    double itl[2] = {0.1, 0.1};
    pg_bench_req_result res[3] = {
        {.success = true,
         .ttft = 0.1,
         .latency = 0.3,
         .itl = itl,
         .n_itl = 2,
         .n_chunks = 3,
         .usage_tokens = 7,
         .text = "abab"},
        {.success = true,
         .ttft = 0.1,
         .latency = 0.3,
         .itl = itl,
         .n_itl = 2,
         .n_chunks = 3,
         .usage_tokens = -1,
         .text = "abab c"},
        {.success = false, .error = "HTTP 500: boom"},
    };
    pg_bench_outcome o[3];
    int32_t lens[3];
    /* usage wins; else re-tokenize ("ab" "ab" " " "c" = 4 tokens); failed = 0 */
    assert_int_equal(pg_bench_outcomes(req, res, 3, &TOY_TOK, o, lens), PAGODA_OK);
    assert_int_equal(lens[0], 7);
    assert_int_equal(lens[1], 4);
    assert_int_equal(lens[2], 0);
    assert_false(o[2].success);
    assert_int_equal(o[1].prompt_len, 5);
    /* no tokenizer: count the chunks */
    assert_int_equal(pg_bench_outcomes(req, res, 3, NULL, o, lens), PAGODA_OK);
    assert_int_equal(lens[1], 3);
}

static void test_report_table_and_json(void **state) {
    (void)state;
    pg_bench_outcome o[4];
    timeline(o);
    const double pct[] = {50, 99.9};
    pg_bench_slo slo = {600, 300, -1};
    pg_bench_metrics m;
    assert_int_equal(pg_bench_metrics_compute(o, 4, 4.0, pct, 2, &slo, &m), PAGODA_OK);
    pg_bench_run_info info = {.endpoint_type = "openai",
                              .model_id = "m",
                              .num_prompts = 4,
                              .request_rate = INFINITY,
                              .burstiness = 1.0,
                              .metrics = PG_BENCH_METRIC_TTFT | PG_BENCH_METRIC_TPOT |
                                         PG_BENCH_METRIC_ITL | PG_BENCH_METRIC_E2EL};
    const char *dir = pg_test_tmpdir();
    char path[512];
    snprintf(path, sizeof path, "%s/table.txt", dir);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    pg_bench_print_report(f, &m, &info, "HTTP 500: boom");
    fclose(f);
    char *t = pg_test_read_file(path, NULL);
    assert_non_null(strstr(t, "First error (1 failed request): HTTP 500: boom\n"));
    assert_non_null(strstr(t, "============ Serving Benchmark Result ============\n"));
    assert_non_null(strstr(t, "Successful requests:                     3         \n"));
    assert_non_null(strstr(t, "Benchmark duration (s):                  4.00      \n"));
    assert_non_null(strstr(t, "Request goodput (req/s):                 0.50      \n"));
    assert_non_null(strstr(t, "Peak output token throughput (tok/s):    4.00      \n"));
    assert_non_null(strstr(t, "-----Time per Output Token (excl. 1st token)------\n"));
    assert_non_null(strstr(t, "Mean TTFT (ms):                          600.00    \n"));
    assert_non_null(strstr(t, "P50 TTFT (ms):                           500.00    \n"));
    assert_non_null(strstr(t, "P99.9 ITL (ms):"));
    assert_non_null(strstr(t, "Median E2EL (ms):                        1100.00   \n"));
    assert_null(strstr(t, "Request rate configured"));
    free(t);

    pg_bench_request req[4] = {
        {.prompt_len = 10}, {.prompt_len = 20}, {.prompt_len = 30}, {.prompt_len = 5}};
    pg_bench_req_result res[4] = {
        {.success = true, .ttft = 0.5, .itl = (double *)ITL_A, .n_itl = 3},
        {.success = true, .ttft = 1.0, .itl = (double *)ITL_B, .n_itl = 2},
        {.success = false, .error = "HTTP 500: boom"},
        {.success = true, .ttft = 0.3}};
    int32_t lens[4] = {4, 3, 0, 1};
    snprintf(path, sizeof path, "%s/r.json", dir);
    assert_int_equal(pg_bench_write_json(path, &m, &info, req, res, lens, 4), PAGODA_OK);
    char *js = pg_test_read_file(path, NULL);
    cJSON *j = cJSON_Parse(js);
    assert_non_null(j);
    assert_float_equal(cJSON_GetObjectItem(j, "completed")->valuedouble, 3, EPS);
    assert_float_equal(cJSON_GetObjectItem(j, "failed")->valuedouble, 1, EPS);
    assert_float_equal(cJSON_GetObjectItem(j, "total_output_tokens")->valuedouble, 8, EPS);
    assert_float_equal(cJSON_GetObjectItem(j, "mean_ttft_ms")->valuedouble, 600, 1e-6);
    assert_float_equal(cJSON_GetObjectItem(j, "p50_tpot_ms")->valuedouble, 350, 1e-6);
    assert_non_null(cJSON_GetObjectItem(j, "p99.9_itl_ms"));
    assert_non_null(cJSON_GetObjectItem(j, "std_e2el_ms"));
    assert_float_equal(cJSON_GetObjectItem(j, "request_goodput")->valuedouble, 0.5, EPS);
    assert_string_equal(cJSON_GetObjectItem(j, "request_rate")->valuestring, "inf");
    assert_true(cJSON_IsNull(cJSON_GetObjectItem(j, "max_concurrency")));
    assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItem(j, "ttfts")), 4);
    assert_int_equal(cJSON_GetArraySize(cJSON_GetArrayItem(cJSON_GetObjectItem(j, "itls"), 0)), 3);
    assert_string_equal(cJSON_GetArrayItem(cJSON_GetObjectItem(j, "errors"), 2)->valuestring,
                        "HTTP 500: boom");
    assert_float_equal(cJSON_GetArrayItem(cJSON_GetObjectItem(j, "input_lens"), 1)->valuedouble, 20,
                       EPS);
    assert_null(cJSON_GetObjectItem(j, "generated_texts"));
    cJSON_Delete(j);
    free(js);
    /* an unwritable path is a clear error */
    assert_int_equal(pg_bench_write_json("/nonexistent-dir/x.json", &m, &info, req, res, lens, 4),
                     PAGODA_ERR_IO);
    assert_non_null(strstr(pg_last_error(), "/nonexistent-dir/x.json: cannot create"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_percentile_is_numpy_linear),
        cmocka_unit_test(test_metrics_hand_timeline),
        cmocka_unit_test(test_peak_concurrency_is_exact),
        cmocka_unit_test(test_goodput_slos),
        cmocka_unit_test(test_metrics_all_failed_and_bad_args),
        cmocka_unit_test(test_sse_whole_bytewise_and_every_split),
        cmocka_unit_test(test_sse_unterminated_tail_limit_and_stop),
        cmocka_unit_test(test_gamma_moments),
        cmocka_unit_test(test_arrivals),
        cmocka_unit_test(test_rng_int_covers_range),
        cmocka_unit_test(test_random_dataset_with_tokenizer),
        cmocka_unit_test(test_random_dataset_ids_lengths_prefix),
        cmocka_unit_test(test_random_dataset_real_tokenizers),
        cmocka_unit_test(test_random_dataset_bad_config),
        cmocka_unit_test(test_copy_prompts),
        cmocka_unit_test(test_parse_options),
        cmocka_unit_test(test_outcomes_token_count_fallbacks),
        cmocka_unit_test(test_report_table_and_json),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
