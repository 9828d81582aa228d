/* `pagoda bench serve` as a library call: see bench_serve.h. */
#include "bench/bench_serve.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench/bench_schedule.h"

void pg_bench_serve_defaults(pg_bench_serve_opts *o) {
    memset(o, 0, sizeof *o);
    o->client.base_url = "http://127.0.0.1:8000";
    o->client.endpoint = "/v1/completions";
    o->client.ignore_eos = true;
    o->random.input_len = 1024;
    o->random.output_len = 128;
    o->num_prompts = 1000;
    o->request_rate = INFINITY;
    o->burstiness = 1.0;
    o->percentiles[0] = 99.0;
    o->n_percentiles = 1;
    o->metrics =
        PG_BENCH_METRIC_TTFT | PG_BENCH_METRIC_TPOT | PG_BENCH_METRIC_ITL | PG_BENCH_METRIC_E2EL;
    o->slo.ttft_ms = o->slo.tpot_ms = o->slo.e2el_ms = -1.0;
    o->ready_check_timeout_s = 600.0;
}

static void sleep_s(double s) {
    struct timespec ts = {(time_t)s, (long)((s - floor(s)) * 1e9)};
    nanosleep(&ts, NULL);
}

/* vLLM's wait_for_endpoint: send the first prompt until it succeeds. */
static pagoda_status ready_check(const pg_bench_serve_opts *o, const pg_bench_client_cfg *cfg,
                                 const pg_bench_request *first, FILE *out) {
    fprintf(out, "Starting initial single prompt test run...\n");
    pg_bench_client_cfg c = *cfg;
    c.progress = false;
    c.max_concurrency = 1;
    double deadline = pg_bench_now() + o->ready_check_timeout_s, zero = 0.0;
    for (;;) {
        pg_bench_req_result r;
        double dur;
        pagoda_status st = pg_bench_client_run(&c, first, 1, &zero, &r, &dur);
        if (st != PAGODA_OK) return st;
        bool ok = r.success;
        char msg[600];
        snprintf(msg, sizeof msg, "%s", r.error ? r.error : "");
        pg_bench_req_result_free(&r);
        if (ok) break;
        if (pg_bench_now() + 1.0 > deadline)
            return pg_error(PAGODA_ERR_IO,
                            "bench: initial test run failed (check the benchmark options and "
                            "that the server is up): %s",
                            msg);
        sleep_s(1.0);
    }
    fprintf(out, "Initial test run completed. Starting main benchmark run...\n");
    return PAGODA_OK;
}

pagoda_status pg_bench_serve(const pg_bench_serve_opts *o, FILE *out, pg_bench_metrics *m) {
    memset(m, 0, sizeof *m);
    if (o->num_prompts == 0)
        return pg_error(PAGODA_ERR_INVALID_ARG, "bench: --num-prompts must be at least 1");
    if (o->client.max_concurrency < 0)
        return pg_error(PAGODA_ERR_INVALID_ARG, "bench: --max-concurrency must be >= 1");
    if (!o->tok && !o->client.prompt_as_ids)
        return pg_error(PAGODA_ERR_INVALID_ARG,
                        "bench: text prompts need a tokenizer (--tokenizer PATH); without one "
                        "use --prompt-as-ids with /v1/completions");
    pg_bench_client_cfg cfg = o->client;
    char *model = NULL;
    pg_bench_request *reqs = NULL;
    double *arrivals = NULL;
    pg_bench_req_result *res = NULL;
    pg_bench_outcome *outc = NULL;
    int32_t *out_lens = NULL;
    size_t n = o->num_prompts;
    pagoda_status st = PAGODA_OK;

    if (!cfg.model) {
        st = pg_bench_fetch_model(cfg.base_url, cfg.api_key, 30.0, &model);
        if (st != PAGODA_OK) goto out;
        cfg.model = model;
    }
    pg_bench_rng rng;
    pg_bench_rng_seed(&rng, o->seed);
    /* token-id prompts reach the model as they are: no BOS to leave room for */
    pg_bench_tokenizer tok_ids;
    const pg_bench_tokenizer *tok = o->tok;
    if (tok && cfg.prompt_as_ids) {
        tok_ids = *tok;
        tok_ids.num_special_to_add = 0;
        tok = &tok_ids;
    }
    st = pg_bench_random_dataset(&o->random, tok, n, &rng, &reqs);
    if (st != PAGODA_OK) goto out;
    arrivals = malloc(n * sizeof *arrivals);
    res = calloc(n, sizeof *res);
    outc = calloc(n, sizeof *outc);
    out_lens = calloc(n, sizeof *out_lens);
    if (!arrivals || !res || !outc || !out_lens) {
        st = pg_error(PAGODA_ERR_NOMEM, "bench: no memory for %zu requests", n);
        goto out;
    }
    st = pg_bench_arrivals(n, o->request_rate, o->burstiness, &rng, arrivals);
    if (st != PAGODA_OK) goto out;

    if (o->ready_check_timeout_s > 0) {
        st = ready_check(o, &cfg, &reqs[0], out);
        if (st != PAGODA_OK) goto out;
    }
    if (isinf(o->request_rate))
        fprintf(out, "Traffic request rate: inf\n");
    else if (o->request_rate == floor(o->request_rate) && o->request_rate < 1e15)
        fprintf(out, "Traffic request rate: %.1f\n", o->request_rate);
    else
        fprintf(out, "Traffic request rate: %g\n", o->request_rate);
    char burst[32];
    if (o->burstiness == floor(o->burstiness) && fabs(o->burstiness) < 1e15)
        snprintf(burst, sizeof burst, "%.1f", o->burstiness); /* Python prints 1.0 */
    else
        snprintf(burst, sizeof burst, "%g", o->burstiness);
    fprintf(out, "Burstiness factor: %s (%s)\n", burst,
            o->burstiness == 1.0 ? "Poisson process" : "Gamma distribution");
    if (cfg.max_concurrency > 0)
        fprintf(out, "Maximum request concurrency: %d\n", cfg.max_concurrency);
    else
        fprintf(out, "Maximum request concurrency: None\n");
    fflush(out);

    double duration;
    st = pg_bench_client_run(&cfg, reqs, n, arrivals, res, &duration);
    if (st != PAGODA_OK) goto out;
    st = pg_bench_outcomes(reqs, res, n, o->tok, outc, out_lens);
    if (st != PAGODA_OK) goto out;
    st = pg_bench_metrics_compute(outc, n, duration > 0 ? duration : 1e-9, o->percentiles,
                                  o->n_percentiles, &o->slo, m);
    if (st != PAGODA_OK) goto out;

    const char *first_error = NULL;
    for (size_t i = 0; i < n && !first_error; i++)
        if (!res[i].success) first_error = res[i].error;
    pg_bench_run_info info = {
        .endpoint_type = pg_bench_endpoint_is_chat(cfg.endpoint) ? "openai-chat" : "openai",
        .label = o->label,
        .model_id = cfg.model,
        .tokenizer_id = o->tokenizer_id,
        .num_prompts = n,
        .request_rate = o->request_rate,
        .burstiness = o->burstiness,
        .max_concurrency = cfg.max_concurrency,
        .metrics = o->metrics,
        .save_detailed = o->save_detailed,
    };
    pg_bench_print_report(out, m, &info, first_error);
    if (o->output_json) st = pg_bench_write_json(o->output_json, m, &info, reqs, res, out_lens, n);
out:
    if (res)
        for (size_t i = 0; i < n; i++)
            pg_bench_req_result_free(&res[i]);
    free(res);
    free(outc);
    free(out_lens);
    free(arrivals);
    pg_bench_requests_free(reqs, n);
    free(model);
    return st;
}
