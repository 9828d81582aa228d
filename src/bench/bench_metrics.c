/* Serving-benchmark metrics: see bench_metrics.h (vLLM's calculate_metrics). */
#include "bench/bench_metrics.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

double pg_bench_percentile(const double *sorted, size_t n, double p) {
    if (n == 0) return 0.0;
    double rank = p / 100.0 * (double)(n - 1);
    if (rank <= 0.0) return sorted[0];
    if (rank >= (double)(n - 1)) return sorted[n - 1];
    size_t lo = (size_t)floor(rank);
    double frac = rank - (double)lo;
    return sorted[lo] + (sorted[lo + 1] - sorted[lo]) * frac;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

void pg_bench_stat_compute(double *x, size_t n, const double *percentiles, size_t n_pct,
                           pg_bench_stat *out) {
    memset(out, 0, sizeof *out);
    if (n == 0) return; /* vLLM: np.mean(xs or 0) == 0 for an empty list */
    qsort(x, n, sizeof *x, cmp_double);
    double sum = 0.0;
    for (size_t i = 0; i < n; i++)
        sum += x[i];
    double mean = sum / (double)n;
    double ss = 0.0;
    for (size_t i = 0; i < n; i++)
        ss += (x[i] - mean) * (x[i] - mean);
    out->mean = mean * 1000.0;
    out->std = sqrt(ss / (double)n) * 1000.0;
    out->median = pg_bench_percentile(x, n, 50.0) * 1000.0;
    for (size_t i = 0; i < n_pct && i < PG_BENCH_MAX_PERCENTILES; i++)
        out->pct[i] = pg_bench_percentile(x, n, percentiles[i]) * 1000.0;
}

/* One request arriving (+1) or leaving (-1) at time t. */
typedef struct conc_event {
    double t;
    int delta;
} conc_event;

/* By time; at equal times departures (-1) first: intervals are half-open. */
static int cmp_event(const void *a, const void *b) {
    const conc_event *x = a, *y = b;
    if (x->t != y->t) return (x->t > y->t) - (x->t < y->t);
    return (x->delta > y->delta) - (x->delta < y->delta);
}

/* Peak output tokens/s (1-second buckets) and peak concurrency (exact sweep
 * over the successful requests' [start, start + latency) intervals). */
static pagoda_status peaks(const pg_bench_outcome *o, size_t n, pg_bench_metrics *m) {
    double t0 = INFINITY, t1 = -INFINITY;
    size_t n_ok = 0;
    for (size_t i = 0; i < n; i++) {
        if (!o[i].success) continue;
        n_ok++;
        if (o[i].start_time < t0) t0 = o[i].start_time;
        if (o[i].start_time + o[i].latency > t1) t1 = o[i].start_time + o[i].latency;
    }
    if (!(t0 <= t1)) return PAGODA_OK; /* no successful request */
    double span = ceil(t1 - t0);
    if (span > 1e8) return pg_error(PAGODA_ERR_INVALID_ARG, "bench: run spans %.0f s", span);
    size_t nb = (size_t)span + 1;
    double *tok = calloc(nb, sizeof *tok);
    conc_event *ev = malloc(2 * n_ok * sizeof *ev);
    if (!tok || !ev) {
        free(tok);
        free(ev);
        return pg_error(PAGODA_ERR_NOMEM, "bench: no memory for %zu buckets", nb);
    }
    size_t k_ev = 0;
    for (size_t i = 0; i < n; i++) {
        if (!o[i].success) continue;
        double t = o[i].start_time + o[i].ttft;
        for (size_t k = 0;; k++) {
            double b = floor(t - t0);
            if (b >= 0 && b < (double)nb) tok[(size_t)b] += 1.0;
            if (k == o[i].n_itl) break;
            t += o[i].itl[k];
        }
        ev[k_ev++] = (conc_event){o[i].start_time, +1};
        ev[k_ev++] = (conc_event){o[i].start_time + o[i].latency, -1};
    }
    for (size_t b = 0; b < nb; b++)
        if (tok[b] > m->max_output_tokens_per_s) m->max_output_tokens_per_s = tok[b];
    qsort(ev, k_ev, sizeof *ev, cmp_event);
    int64_t now = 0;
    for (size_t k = 0; k < k_ev; k++) {
        now += ev[k].delta;
        if (now > m->max_concurrent_requests) m->max_concurrent_requests = now;
    }
    free(tok);
    free(ev);
    return PAGODA_OK;
}

pagoda_status pg_bench_metrics_compute(const pg_bench_outcome *o, size_t n, double duration_s,
                                       const double *percentiles, size_t n_pct,
                                       const pg_bench_slo *slo, pg_bench_metrics *out) {
    memset(out, 0, sizeof *out);
    if (!(duration_s > 0.0))
        return pg_error(PAGODA_ERR_INVALID_ARG, "bench: duration %g s is not positive", duration_s);
    if (n_pct > PG_BENCH_MAX_PERCENTILES)
        return pg_error(PAGODA_ERR_INVALID_ARG, "bench: %zu percentiles (at most %d)", n_pct,
                        PG_BENCH_MAX_PERCENTILES);
    for (size_t i = 0; i < n_pct; i++) {
        if (!(percentiles[i] >= 0.0 && percentiles[i] <= 100.0))
            return pg_error(PAGODA_ERR_INVALID_ARG, "bench: percentile %g is not in [0, 100]",
                            percentiles[i]);
        out->percentiles[i] = percentiles[i];
    }
    out->n_percentiles = n_pct;
    out->duration = duration_s;

    size_t n_itl = 0;
    for (size_t i = 0; i < n; i++)
        if (o[i].success) n_itl += o[i].n_itl;
    double *ttft = malloc((n + 1) * sizeof *ttft);
    double *tpot = malloc((n + 1) * sizeof *tpot);
    double *tpot_all = malloc((n + 1) * sizeof *tpot_all);
    double *e2el = malloc((n + 1) * sizeof *e2el);
    double *itl = malloc((n_itl + 1) * sizeof *itl);
    pagoda_status st = PAGODA_OK;
    if (!ttft || !tpot || !tpot_all || !e2el || !itl) {
        st = pg_error(PAGODA_ERR_NOMEM, "bench: no memory for metrics of %zu requests", n);
        goto done;
    }
    size_t n_ok = 0, n_tpot = 0, k_itl = 0;
    for (size_t i = 0; i < n; i++) {
        if (!o[i].success) {
            out->failed++;
            continue;
        }
        out->total_input += o[i].prompt_len;
        out->total_output += o[i].output_tokens;
        double t = 0.0; /* vLLM: tpot counts as 0 for goodput when output <= 1 */
        if (o[i].output_tokens > 1) {
            t = (o[i].latency - o[i].ttft) / (double)(o[i].output_tokens - 1);
            tpot[n_tpot++] = t;
        }
        tpot_all[n_ok] = t;
        ttft[n_ok] = o[i].ttft;
        e2el[n_ok] = o[i].latency;
        n_ok++;
        if (o[i].n_itl) memcpy(itl + k_itl, o[i].itl, o[i].n_itl * sizeof *itl);
        k_itl += o[i].n_itl;
    }
    out->completed = (int64_t)n_ok;

    bool want_ttft = slo && slo->ttft_ms >= 0, want_tpot = slo && slo->tpot_ms >= 0,
         want_e2el = slo && slo->e2el_ms >= 0;
    out->has_goodput = want_ttft || want_tpot || want_e2el;
    if (out->has_goodput) {
        for (size_t i = 0; i < n_ok; i++) {
            bool good = true;
            if (want_ttft && ttft[i] > slo->ttft_ms / 1000.0) good = false;
            if (want_tpot && tpot_all[i] > slo->tpot_ms / 1000.0) good = false;
            if (want_e2el && e2el[i] > slo->e2el_ms / 1000.0) good = false;
            out->good_completed += good;
        }
    }
    out->request_throughput = (double)out->completed / duration_s;
    out->request_goodput = (double)out->good_completed / duration_s;
    out->output_throughput = (double)out->total_output / duration_s;
    out->total_token_throughput = (double)(out->total_input + out->total_output) / duration_s;

    pg_bench_stat_compute(ttft, n_ok, percentiles, n_pct, &out->ttft);
    pg_bench_stat_compute(tpot, n_tpot, percentiles, n_pct, &out->tpot);
    pg_bench_stat_compute(itl, k_itl, percentiles, n_pct, &out->itl);
    pg_bench_stat_compute(e2el, n_ok, percentiles, n_pct, &out->e2el);
    st = peaks(o, n, out);
done:
    free(ttft);
    free(tpot);
    free(tpot_all);
    free(e2el);
    free(itl);
    return st;
}
