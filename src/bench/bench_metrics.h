/* Serving-benchmark metrics (`pagoda bench serve`): pure arithmetic over the
 * per-request timelines the client recorded, no I/O.
 *
 * Definitions follow vLLM's benchmark client (vllm/benchmarks/serve.py,
 * calculate_metrics) so numbers compare; see /work/shared/BENCHMARKS.md:
 * - TTFT: request start -> first SSE chunk carrying `choices`.
 * - ITL: gaps between consecutive choice-carrying chunks, pooled over all
 *   requests before taking statistics.
 * - E2EL: request start -> last chunk.
 * - TPOT per request: (E2EL - TTFT) / (output_tokens - 1), only for requests
 *   with more than one output token; statistics over requests.
 * - mean / median / population std (numpy's np.std, ddof 0) / percentiles by
 *   linear interpolation between closest ranks (numpy's default
 *   np.percentile); an empty sample gives 0 everywhere (vLLM's `x or 0`).
 * - Goodput: requests whose TTFT, TPOT (0 when output <= 1) and E2EL are all
 *   <= the SLOs given, per second of benchmark duration.
 * - Peak output tokens/s: every choice-carrying chunk counts one token at its
 *   arrival time, bucketed by whole seconds from the earliest request start;
 *   the fullest bucket.
 * - Peak concurrent requests: the most successful requests in flight at one
 *   instant, each occupying the half-open interval [start, start + E2EL)
 *   (a request ending at t is gone before one starting at t arrives): an
 *   exact sweep over start/end events, as vLLM's calculate_metrics. It
 *   cannot exceed --max-concurrency. */
#ifndef PAGODA_SERVER_BENCH_METRICS_H
#define PAGODA_SERVER_BENCH_METRICS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/status.h"

#define PG_BENCH_MAX_PERCENTILES 16

/* One request's outcome. Times in seconds; start_time on any clock shared
 * by all requests of the run. */
typedef struct pg_bench_outcome {
    bool success;
    int32_t prompt_len;    /* input tokens */
    int32_t output_tokens; /* usage.completion_tokens, else re-tokenized text */
    double start_time;     /* s: just before the request was sent */
    double ttft;           /* s */
    double latency;        /* s: E2EL */
    const double *itl;     /* s: gaps between consecutive choice chunks */
    size_t n_itl;
} pg_bench_outcome;

/* Statistics of one metric, milliseconds. pct[i] is the percentile
 * requested as percentiles[i]. */
typedef struct pg_bench_stat {
    double mean, median, std;
    double pct[PG_BENCH_MAX_PERCENTILES];
} pg_bench_stat;

/* Service-level objectives for goodput, milliseconds; a negative value means
 * "not set". With none set, request_goodput stays 0 and has_goodput false. */
typedef struct pg_bench_slo {
    double ttft_ms, tpot_ms, e2el_ms;
} pg_bench_slo;

typedef struct pg_bench_metrics {
    int64_t completed, failed;
    int64_t total_input, total_output; /* tokens, successful requests only */
    int64_t good_completed;
    bool has_goodput;
    double duration;               /* s */
    double request_throughput;     /* completed / duration, req/s */
    double request_goodput;        /* good_completed / duration, req/s */
    double output_throughput;      /* tok/s */
    double total_token_throughput; /* (input + output) / duration, tok/s */
    double max_output_tokens_per_s;
    int64_t max_concurrent_requests;
    size_t n_percentiles;
    double percentiles[PG_BENCH_MAX_PERCENTILES]; /* as requested, e.g. 99 */
    pg_bench_stat ttft, tpot, itl, e2el;          /* ms */
} pg_bench_metrics;

/* numpy's np.percentile (linear method) of an ascending `sorted[n]`, p in
 * [0, 100]: the value at rank p/100*(n-1), interpolated between the two
 * closest ranks. n == 0 gives 0. */
double pg_bench_percentile(const double *sorted, size_t n, double p);

/* Mean, median, population std and the requested percentiles of `x[n]`
 * (seconds; sorted in place), reported in milliseconds. */
void pg_bench_stat_compute(double *x, size_t n, const double *percentiles, size_t n_pct,
                           pg_bench_stat *out);

/* All metrics of a run of `n` requests lasting `duration_s` (> 0).
 * percentiles: 1..PG_BENCH_MAX_PERCENTILES values in [0, 100].
 * slo may be NULL. Errors: PAGODA_ERR_INVALID_ARG (bad percentile or
 * duration), PAGODA_ERR_NOMEM. */
pagoda_status pg_bench_metrics_compute(const pg_bench_outcome *o, size_t n, double duration_s,
                                       const double *percentiles, size_t n_pct,
                                       const pg_bench_slo *slo, pg_bench_metrics *out);

#endif
