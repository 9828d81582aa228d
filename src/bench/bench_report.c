/* Reporting for `pagoda bench serve`: see bench_report.h. */
#include "bench/bench_report.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

int32_t pg_bench_input_len(const pg_bench_request *req, const pg_bench_req_result *res) {
    return res->usage_prompt_tokens > 0 ? res->usage_prompt_tokens : req->prompt_len;
}

pagoda_status pg_bench_outcomes(const pg_bench_request *reqs, const pg_bench_req_result *res,
                                size_t n, const pg_bench_tokenizer *tok, pg_bench_outcome *out,
                                int32_t *output_lens) {
    for (size_t i = 0; i < n; i++) {
        pg_bench_outcome *o = &out[i];
        memset(o, 0, sizeof *o);
        o->success = res[i].success;
        o->prompt_len = pg_bench_input_len(&reqs[i], &res[i]);
        o->start_time = res[i].start_time;
        output_lens[i] = 0;
        if (!o->success) continue;
        o->ttft = res[i].ttft;
        o->latency = res[i].latency;
        o->itl = res[i].itl;
        o->n_itl = res[i].n_itl;
        int32_t count = res[i].usage_tokens;
        if (count <= 0) { /* vLLM: `if not output_len`: re-tokenize */
            if (tok) {
                int32_t *ids = NULL;
                size_t n_ids = 0;
                const char *t = res[i].text ? res[i].text : "";
                pagoda_status st = tok->encode(tok->ctx, t, strlen(t), &ids, &n_ids);
                free(ids);
                if (st != PAGODA_OK) return st;
                count = (int32_t)n_ids;
            } else {
                count = res[i].n_chunks;
            }
        }
        o->output_tokens = count;
        output_lens[i] = count;
    }
    return PAGODA_OK;
}

pagoda_status pg_bench_parse_percentiles(const char *s, double *p, size_t *n) {
    *n = 0;
    const char *c = s;
    for (;;) {
        char *end;
        errno = 0;
        double v = strtod(c, &end);
        if (end == c || errno || !(v >= 0.0 && v <= 100.0) || (*end && *end != ','))
            return pg_error(PAGODA_ERR_INVALID_ARG,
                            "bench: percentiles '%s': want numbers in [0, 100] separated by commas",
                            s);
        if (*n == PG_BENCH_MAX_PERCENTILES)
            return pg_error(PAGODA_ERR_INVALID_ARG, "bench: percentiles '%s': at most %d values", s,
                            PG_BENCH_MAX_PERCENTILES);
        p[(*n)++] = v;
        if (!*end) return PAGODA_OK;
        c = end + 1;
    }
}

pagoda_status pg_bench_parse_metric_names(const char *s, unsigned *bits) {
    static const struct {
        const char *name;
        unsigned bit;
    } names[] = {{"ttft", PG_BENCH_METRIC_TTFT},
                 {"tpot", PG_BENCH_METRIC_TPOT},
                 {"itl", PG_BENCH_METRIC_ITL},
                 {"e2el", PG_BENCH_METRIC_E2EL}};
    *bits = 0;
    const char *c = s;
    while (*c) {
        size_t len = strcspn(c, ",");
        bool found = false;
        for (size_t k = 0; k < sizeof names / sizeof names[0]; k++) {
            if (strlen(names[k].name) == len && !strncmp(c, names[k].name, len)) {
                *bits |= names[k].bit;
                found = true;
            }
        }
        if (!found)
            return pg_error(PAGODA_ERR_INVALID_ARG,
                            "bench: percentile metrics '%s': names are ttft, tpot, itl, e2el", s);
        c += len;
        if (*c == ',') c++;
    }
    if (!*bits) return pg_error(PAGODA_ERR_INVALID_ARG, "bench: no percentile metric named");
    return PAGODA_OK;
}

pagoda_status pg_bench_parse_slo(const char *s, pg_bench_slo *slo) {
    const char *colon = strchr(s, ':');
    if (!colon)
        return pg_error(PAGODA_ERR_INVALID_ARG,
                        "bench: goodput '%s': want KEY:VALUE with KEY ttft, tpot or e2el and "
                        "VALUE in milliseconds",
                        s);
    char *end;
    errno = 0;
    double v = strtod(colon + 1, &end);
    if (end == colon + 1 || *end || errno || !isfinite(v))
        return pg_error(PAGODA_ERR_INVALID_ARG, "bench: goodput '%s': '%s' is not a number", s,
                        colon + 1);
    if (v < 0)
        return pg_error(PAGODA_ERR_INVALID_ARG, "bench: goodput '%s': the SLO must be >= 0", s);
    size_t k = (size_t)(colon - s);
    if (k == 4 && !strncmp(s, "ttft", 4))
        slo->ttft_ms = v;
    else if (k == 4 && !strncmp(s, "tpot", 4))
        slo->tpot_ms = v;
    else if (k == 4 && !strncmp(s, "e2el", 4))
        slo->e2el_ms = v;
    else
        return pg_error(PAGODA_ERR_INVALID_ARG,
                        "bench: goodput '%s': the metric must be ttft, tpot or e2el", s);
    return PAGODA_OK;
}

/* Python's "{s:{c}^{n}}".format(...): s centred in n columns of c. */
static void print_centered(FILE *f, const char *s, char c, int n) {
    int len = (int)strlen(s), pad = n > len ? n - len : 0;
    for (int i = 0; i < pad / 2; i++)
        fputc(c, f);
    fputs(s, f);
    for (int i = 0; i < pad - pad / 2; i++)
        fputc(c, f);
    fputc('\n', f);
}

static void row_i(FILE *f, const char *name, int64_t v) {
    char num[32];
    snprintf(num, sizeof num, "%lld", (long long)v);
    fprintf(f, "%-40s %-10s\n", name, num);
}

static void row_f(FILE *f, const char *name, double v) {
    fprintf(f, "%-40s %-10.2f\n", name, v);
}

/* vLLM's p_word: "99" for 99.0, "99.9" for 99.9 (Python str(float)). */
static void pct_word(double p, char *buf, size_t cap) {
    if (p == floor(p))
        snprintf(buf, cap, "%d", (int)p);
    else
        snprintf(buf, cap, "%.15g", p);
}

typedef struct metric_desc {
    unsigned bit;
    const char *attr, *name, *header;
} metric_desc;

static const metric_desc METRICS[] = {
    {PG_BENCH_METRIC_TTFT, "ttft", "TTFT", "Time to First Token"},
    {PG_BENCH_METRIC_TPOT, "tpot", "TPOT", "Time per Output Token (excl. 1st token)"},
    {PG_BENCH_METRIC_ITL, "itl", "ITL", "Inter-token Latency"},
    {PG_BENCH_METRIC_E2EL, "e2el", "E2EL", "End-to-end Latency"},
};

static const pg_bench_stat *metric_stat(const pg_bench_metrics *m, unsigned bit) {
    switch (bit) {
    case PG_BENCH_METRIC_TTFT:
        return &m->ttft;
    case PG_BENCH_METRIC_TPOT:
        return &m->tpot;
    case PG_BENCH_METRIC_ITL:
        return &m->itl;
    default:
        return &m->e2el;
    }
}

void pg_bench_print_report(FILE *f, const pg_bench_metrics *m, const pg_bench_run_info *info,
                           const char *first_error) {
    if (m->failed > 0 && first_error)
        fprintf(f, "First error (%lld failed request%s): %s\n", (long long)m->failed,
                m->failed == 1 ? "" : "s", first_error);
    print_centered(f, " Serving Benchmark Result ", '=', 50);
    row_i(f, "Successful requests:", m->completed);
    row_i(f, "Failed requests:", m->failed);
    if (info->max_concurrency > 0) row_i(f, "Maximum request concurrency:", info->max_concurrency);
    if (!isinf(info->request_rate)) row_f(f, "Request rate configured (RPS):", info->request_rate);
    row_f(f, "Benchmark duration (s):", m->duration);
    row_i(f, "Total input tokens:", m->total_input);
    row_i(f, "Total generated tokens:", m->total_output);
    row_f(f, "Request throughput (req/s):", m->request_throughput);
    if (m->has_goodput) row_f(f, "Request goodput (req/s):", m->request_goodput);
    row_f(f, "Output token throughput (tok/s):", m->output_throughput);
    row_f(f, "Peak output token throughput (tok/s):", m->max_output_tokens_per_s);
    row_f(f, "Peak concurrent requests:", (double)m->max_concurrent_requests);
    row_f(f, "Total Token throughput (tok/s):", m->total_token_throughput);
    for (size_t k = 0; k < sizeof METRICS / sizeof METRICS[0]; k++) {
        const metric_desc *d = &METRICS[k];
        if (!(info->metrics & d->bit)) continue;
        const pg_bench_stat *s = metric_stat(m, d->bit);
        char name[64], pw[32];
        print_centered(f, d->header, '-', 50);
        snprintf(name, sizeof name, "Mean %s (ms):", d->name);
        row_f(f, name, s->mean);
        snprintf(name, sizeof name, "Median %s (ms):", d->name);
        row_f(f, name, s->median);
        for (size_t i = 0; i < m->n_percentiles; i++) {
            pct_word(m->percentiles[i], pw, sizeof pw);
            snprintf(name, sizeof name, "P%s %s (ms):", pw, d->name);
            row_f(f, name, s->pct[i]);
        }
    }
    for (int i = 0; i < 50; i++)
        fputc('=', f);
    fputc('\n', f);
}

pagoda_status pg_bench_write_json(const char *path, const pg_bench_metrics *m,
                                  const pg_bench_run_info *info, const pg_bench_request *reqs,
                                  const pg_bench_req_result *res, const int32_t *output_lens,
                                  size_t n) {
    cJSON *o = cJSON_CreateObject();
    if (!o) return pg_error(PAGODA_ERR_NOMEM, "%s: no memory for the result JSON", path);
    char date[32];
    time_t now = time(NULL);
    struct tm tm;
    localtime_r(&now, &tm);
    strftime(date, sizeof date, "%Y%m%d-%H%M%S", &tm);
    cJSON_AddStringToObject(o, "date", date);
    cJSON_AddStringToObject(o, "endpoint_type", info->endpoint_type);
    cJSON_AddStringToObject(o, "backend", info->endpoint_type);
    cJSON_AddStringToObject(o, "label", info->label ? info->label : info->endpoint_type);
    cJSON_AddStringToObject(o, "model_id", info->model_id ? info->model_id : "");
    if (info->tokenizer_id)
        cJSON_AddStringToObject(o, "tokenizer_id", info->tokenizer_id);
    else
        cJSON_AddNullToObject(o, "tokenizer_id");
    cJSON_AddNumberToObject(o, "num_prompts", (double)info->num_prompts);
    if (isinf(info->request_rate))
        cJSON_AddStringToObject(o, "request_rate", "inf");
    else
        cJSON_AddNumberToObject(o, "request_rate", info->request_rate);
    if (isinf(info->burstiness))
        cJSON_AddStringToObject(o, "burstiness", "inf");
    else
        cJSON_AddNumberToObject(o, "burstiness", info->burstiness);
    if (info->max_concurrency > 0)
        cJSON_AddNumberToObject(o, "max_concurrency", info->max_concurrency);
    else
        cJSON_AddNullToObject(o, "max_concurrency");

    cJSON_AddNumberToObject(o, "duration", m->duration);
    cJSON_AddNumberToObject(o, "completed", (double)m->completed);
    cJSON_AddNumberToObject(o, "failed", (double)m->failed);
    cJSON_AddNumberToObject(o, "total_input_tokens", (double)m->total_input);
    cJSON_AddNumberToObject(o, "total_output_tokens", (double)m->total_output);
    cJSON_AddNumberToObject(o, "request_throughput", m->request_throughput);
    if (m->has_goodput)
        cJSON_AddNumberToObject(o, "request_goodput", m->request_goodput);
    else
        cJSON_AddNullToObject(o, "request_goodput");
    cJSON_AddNumberToObject(o, "output_throughput", m->output_throughput);
    cJSON_AddNumberToObject(o, "total_token_throughput", m->total_token_throughput);

    cJSON *in_lens = cJSON_AddArrayToObject(o, "input_lens");
    cJSON *out_lens = cJSON_AddArrayToObject(o, "output_lens");
    cJSON *ttfts = cJSON_AddArrayToObject(o, "ttfts");
    cJSON *itls = cJSON_AddArrayToObject(o, "itls");
    cJSON *texts = info->save_detailed ? cJSON_AddArrayToObject(o, "generated_texts") : NULL;
    cJSON *errors = cJSON_AddArrayToObject(o, "errors");
    for (size_t i = 0; i < n; i++) {
        cJSON_AddItemToArray(in_lens, cJSON_CreateNumber(pg_bench_input_len(&reqs[i], &res[i])));
        cJSON_AddItemToArray(out_lens, cJSON_CreateNumber(output_lens[i]));
        cJSON_AddItemToArray(ttfts, cJSON_CreateNumber(res[i].success ? res[i].ttft : 0.0));
        cJSON *gaps = cJSON_CreateArray();
        for (size_t k = 0; k < res[i].n_itl; k++)
            cJSON_AddItemToArray(gaps, cJSON_CreateNumber(res[i].itl[k]));
        cJSON_AddItemToArray(itls, gaps);
        if (texts) cJSON_AddItemToArray(texts, cJSON_CreateString(res[i].text ? res[i].text : ""));
        cJSON_AddItemToArray(errors, cJSON_CreateString(res[i].error ? res[i].error : ""));
    }
    cJSON_AddNumberToObject(o, "max_output_tokens_per_s", m->max_output_tokens_per_s);
    cJSON_AddNumberToObject(o, "max_concurrent_requests", (double)m->max_concurrent_requests);
    for (size_t k = 0; k < sizeof METRICS / sizeof METRICS[0]; k++) {
        const metric_desc *d = &METRICS[k];
        if (!(info->metrics & d->bit)) continue;
        const pg_bench_stat *s = metric_stat(m, d->bit);
        char key[64], pw[32];
        snprintf(key, sizeof key, "mean_%s_ms", d->attr);
        cJSON_AddNumberToObject(o, key, s->mean);
        snprintf(key, sizeof key, "median_%s_ms", d->attr);
        cJSON_AddNumberToObject(o, key, s->median);
        snprintf(key, sizeof key, "std_%s_ms", d->attr);
        cJSON_AddNumberToObject(o, key, s->std);
        for (size_t i = 0; i < m->n_percentiles; i++) {
            pct_word(m->percentiles[i], pw, sizeof pw);
            snprintf(key, sizeof key, "p%s_%s_ms", pw, d->attr);
            cJSON_AddNumberToObject(o, key, s->pct[i]);
        }
    }
    char *text = cJSON_Print(o);
    cJSON_Delete(o);
    if (!text) return pg_error(PAGODA_ERR_NOMEM, "%s: no memory for the result JSON", path);
    FILE *f = fopen(path, "w");
    pagoda_status st = PAGODA_OK;
    if (!f) {
        st = pg_error(PAGODA_ERR_IO, "%s: cannot create: %s", path, strerror(errno));
    } else {
        size_t len = strlen(text);
        bool ok = fwrite(text, 1, len, f) == len && fputc('\n', f) != EOF;
        if (fclose(f) != 0) ok = false;
        if (!ok) st = pg_error(PAGODA_ERR_IO, "%s: write failed", path);
    }
    free(text);
    return st;
}
