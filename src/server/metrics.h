/* Prometheus metrics of `pagoda serve` (GET /metrics), with vLLM's metric
 * names and `model_name` label so existing dashboards work unchanged.
 *
 * Reference: the Prometheus text exposition format 0.0.4
 * (https://prometheus.io/docs/instrumenting/exposition_formats/) and
 * vLLM's v1/metrics/loggers.py (names, help texts, histogram buckets).
 *
 * Histograms and request counters are recorded by the server; gauges and
 * token / preemption / prefix-cache counters come from pagoda_stats at
 * scrape time. Thread-safe: one mutex guards the recorder. */
#ifndef PAGODA_SERVER_METRICS_H
#define PAGODA_SERVER_METRICS_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "pagoda.h"

#define PG_HIST_MAX_BUCKETS 24

typedef struct pg_histogram {
    const double *bounds; /* upper bounds (le), ascending; +Inf implicit */
    int n_bounds;
    uint64_t counts[PG_HIST_MAX_BUCKETS + 1]; /* per bucket, not cumulative; last = +Inf */
    uint64_t count;
    double sum;
} pg_histogram;

typedef struct pg_metrics {
    pthread_mutex_t mu;
    pg_histogram ttft, itl, e2e, queue;
    uint64_t success_stop, success_length, success_abort, success_error;
} pg_metrics;

void pg_metrics_init(pg_metrics *m);
void pg_metrics_destroy(pg_metrics *m);

/* Record one observation (seconds). Negative values are clamped to 0. */
void pg_histogram_observe(pg_histogram *h, double v);

/* Record a finished request: its finish reason and latencies in seconds
 * (queue < 0 or ttft < 0 = unknown, not recorded). */
void pg_metrics_finished(pg_metrics *m, pagoda_finish_reason r, double e2e, double queue,
                         double ttft);
/* Record `n` inter-token latencies of `itl` seconds each. */
void pg_metrics_itl(pg_metrics *m, double itl, size_t n);

/* One served model of a server: its name (the `model_name` label), its
 * recorder and its engine's stats. */
typedef struct pg_metrics_model {
    const char *name;
    pg_metrics *m;
    const pagoda_stats *st;
} pg_metrics_model;

/* vLLM's speculative-decoding log line (v1/spec_decode/metrics.py,
 * SpecDecodingLogging) over the interval from `prev` to `cur` (stats of one
 * engine, `seconds` apart) into buf: "SpecDecoding metrics: Mean acceptance
 * length: 2.80, Accepted throughput: ... tokens/s, Drafted throughput: ...
 * tokens/s, Accepted: N tokens, Drafted: N tokens, Per-position acceptance
 * rate: 0.900, 0.700, ..., Avg Draft acceptance rate: 61.2%". Mean
 * acceptance length = 1 + accepted / drafts (tokens per verifying step).
 * Returns false (buf untouched) when no draft was verified in the interval
 * or speculation is off. */
bool pg_metrics_spec_line(const pagoda_stats *prev, const pagoda_stats *cur, double seconds,
                          char *buf, size_t cap);

/* The exposition text (malloc'ed, NUL-terminated; NULL when out of memory)
 * for `n` >= 1 models: each metric family once (HELP, TYPE), then one sample
 * set per model, labelled with its name, in the order given. */
char *pg_metrics_render_models(const pg_metrics_model *models, size_t n);

/* pg_metrics_render_models of one model. */
char *pg_metrics_render(pg_metrics *m, const char *model_name, const pagoda_stats *st);

#endif
