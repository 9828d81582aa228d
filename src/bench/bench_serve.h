/* `pagoda bench serve` as a library call: build the random dataset, draw
 * the arrival schedule, check the endpoint with one request, run every
 * request through the streaming client, compute vLLM's metrics, print the
 * result table and optionally write the result JSON. The CLI
 * (src/cli/cmd_bench.c) only parses options into pg_bench_serve_opts. */
#ifndef PAGODA_SERVER_BENCH_SERVE_H
#define PAGODA_SERVER_BENCH_SERVE_H

#include <stdio.h>

#include "bench/bench_client.h"
#include "bench/bench_dataset.h"
#include "bench/bench_metrics.h"
#include "bench/bench_report.h"

typedef struct pg_bench_serve_opts {
    pg_bench_client_cfg client; /* client.model NULL: first of GET /v1/models */
    pg_bench_random_cfg random;
    const pg_bench_tokenizer *tok; /* NULL: token-id prompts (client.prompt_as_ids) */
    size_t num_prompts;
    double request_rate; /* req/s, INFINITY: all at once */
    double burstiness;
    uint64_t seed;
    double percentiles[PG_BENCH_MAX_PERCENTILES];
    size_t n_percentiles;
    unsigned metrics;        /* PG_BENCH_METRIC_* sections reported */
    pg_bench_slo slo;        /* negative fields: not set */
    const char *output_json; /* NULL: no file */
    const char *label;
    const char *tokenizer_id;
    bool save_detailed;
    double ready_check_timeout_s; /* retry the first prompt this long; 0 skips */
} pg_bench_serve_opts;

/* Defaults as vLLM's: 1000 prompts, random 1024/128, rate inf, burstiness 1,
 * seed 0, p99, ttft/tpot/itl/e2el, ignore_eos, /v1/completions on
 * http://127.0.0.1:8000, 600 s ready check. */
void pg_bench_serve_defaults(pg_bench_serve_opts *o);

/* Run the benchmark; progress lines and the table go to `out`, *m gets the
 * metrics. Failed requests are counted, not errors. Errors: option
 * problems (PAGODA_ERR_INVALID_ARG), no server / endpoint never ready
 * (PAGODA_ERR_IO), PAGODA_ERR_NOMEM, tokenizer errors. */
pagoda_status pg_bench_serve(const pg_bench_serve_opts *o, FILE *out, pg_bench_metrics *m);

#endif
