/* Reporting for `pagoda bench serve`: turns the client's recorded timelines
 * into metric inputs, prints vLLM's result table, and writes vLLM's result
 * JSON (vllm/benchmarks/serve.py: the "Serving Benchmark Result" block and
 * the --save-result keys), so the two tools' outputs can be compared side by
 * side or fed to the same scripts. */
#ifndef PAGODA_SERVER_BENCH_REPORT_H
#define PAGODA_SERVER_BENCH_REPORT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "base/status.h"
#include "bench/bench_client.h"
#include "bench/bench_dataset.h"
#include "bench/bench_metrics.h"

/* Which latency metrics get a section in the table / keys in the JSON. */
enum {
    PG_BENCH_METRIC_TTFT = 1,
    PG_BENCH_METRIC_TPOT = 2,
    PG_BENCH_METRIC_ITL = 4,
    PG_BENCH_METRIC_E2EL = 8,
};

/* Run settings echoed into the report. */
typedef struct pg_bench_run_info {
    const char *endpoint_type; /* "openai" or "openai-chat" */
    const char *label;
    const char *model_id;
    const char *tokenizer_id; /* may be NULL */
    size_t num_prompts;
    double request_rate; /* INFINITY for "inf" */
    double burstiness;
    int max_concurrency; /* 0: none */
    unsigned metrics;    /* PG_BENCH_METRIC_* bits */
    bool save_detailed;  /* JSON: also generated_texts */
} pg_bench_run_info;

/* A request's input tokens: the server's usage.prompt_tokens when it sent
 * a positive one (what the server really prefilled, BOS included), else the dataset's
 * prompt_len (vLLM's RequestFuncOutput.prompt_len). */
int32_t pg_bench_input_len(const pg_bench_request *req, const pg_bench_req_result *res);

/* Fill out[n] (metric inputs) and output_lens[n] from the requests and
 * their results. A successful request's output token count is
 * usage.completion_tokens when the server sent a positive one, else the
 * generated text re-encoded with `tok` (no special tokens), else (tok NULL)
 * the number of choice-carrying chunks; failed requests count 0. Input
 * tokens are pg_bench_input_len. out[i].itl
 * points into res[i]. Errors: tokenizer errors. */
pagoda_status pg_bench_outcomes(const pg_bench_request *reqs, const pg_bench_req_result *res,
                                size_t n, const pg_bench_tokenizer *tok, pg_bench_outcome *out,
                                int32_t *output_lens);

/* Parse "50,90,99" into p[] (at most PG_BENCH_MAX_PERCENTILES values in
 * [0, 100]). Errors: PAGODA_ERR_INVALID_ARG. */
pagoda_status pg_bench_parse_percentiles(const char *s, double *p, size_t *n);
/* Parse "ttft,tpot,itl,e2el" (any subset) into PG_BENCH_METRIC_* bits. */
pagoda_status pg_bench_parse_metric_names(const char *s, unsigned *bits);
/* Parse one goodput SLO "ttft:MS" / "tpot:MS" / "e2el:MS" into slo.
 * Errors: PAGODA_ERR_INVALID_ARG (name, number, negative value). */
pagoda_status pg_bench_parse_slo(const char *s, pg_bench_slo *slo);

/* The table vLLM prints, to f. first_error (may be NULL) is shown above it
 * when requests failed. */
void pg_bench_print_report(FILE *f, const pg_bench_metrics *m, const pg_bench_run_info *info,
                           const char *first_error);

/* vLLM's result JSON to `path`. Errors: PAGODA_ERR_IO, PAGODA_ERR_NOMEM. */
pagoda_status pg_bench_write_json(const char *path, const pg_bench_metrics *m,
                                  const pg_bench_run_info *info, const pg_bench_request *reqs,
                                  const pg_bench_req_result *res, const int32_t *output_lens,
                                  size_t n);

#endif
