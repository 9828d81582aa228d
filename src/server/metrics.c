/* Prometheus text rendering of the server's metrics (see metrics.h). */
#include "server/metrics.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* vLLM's bucket boundaries (v1/metrics/loggers.py). */
static const double TTFT_BUCKETS[] = {0.001, 0.005, 0.01, 0.02,  0.04,  0.06,  0.08, 0.1,
                                      0.25,  0.5,   0.75, 1.0,   2.5,   5.0,   7.5,  10.0,
                                      20.0,  40.0,  80.0, 160.0, 640.0, 2560.0};
static const double ITL_BUCKETS[] = {0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2,  0.3,  0.4, 0.5,
                                     0.75, 1.0,   2.5,  5.0,   7.5, 10.0, 20.0, 40.0, 80.0};
static const double E2E_BUCKETS[] = {0.3,  0.5,   0.8,   1.0,   1.5,   2.0,    2.5,
                                     5.0,  10.0,  15.0,  20.0,  30.0,  40.0,   50.0,
                                     60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0};

#define NB(a) ((int)(sizeof(a) / sizeof((a)[0])))

static void hist_init(pg_histogram *h, const double *b, int n) {
    memset(h, 0, sizeof *h);
    h->bounds = b;
    h->n_bounds = n;
}

void pg_metrics_init(pg_metrics *m) {
    memset(m, 0, sizeof *m);
    pthread_mutex_init(&m->mu, NULL);
    hist_init(&m->ttft, TTFT_BUCKETS, NB(TTFT_BUCKETS));
    hist_init(&m->itl, ITL_BUCKETS, NB(ITL_BUCKETS));
    hist_init(&m->e2e, E2E_BUCKETS, NB(E2E_BUCKETS));
    hist_init(&m->queue, E2E_BUCKETS, NB(E2E_BUCKETS));
}

void pg_metrics_destroy(pg_metrics *m) {
    pthread_mutex_destroy(&m->mu);
}

void pg_histogram_observe(pg_histogram *h, double v) {
    if (!(v > 0)) v = 0;
    int b = 0;
    while (b < h->n_bounds && v > h->bounds[b])
        b++;
    h->counts[b]++;
    h->count++;
    h->sum += v;
}

void pg_metrics_finished(pg_metrics *m, pagoda_finish_reason r, double e2e, double queue,
                         double ttft) {
    pthread_mutex_lock(&m->mu);
    switch (r) {
    case PAGODA_FINISH_STOP:
        m->success_stop++;
        break;
    case PAGODA_FINISH_LENGTH:
        m->success_length++;
        break;
    case PAGODA_FINISH_ABORT:
        m->success_abort++;
        break;
    default:
        m->success_error++;
        break;
    }
    pg_histogram_observe(&m->e2e, e2e);
    if (queue >= 0) pg_histogram_observe(&m->queue, queue);
    if (ttft >= 0) pg_histogram_observe(&m->ttft, ttft);
    pthread_mutex_unlock(&m->mu);
}

void pg_metrics_itl(pg_metrics *m, double itl, size_t n) {
    pthread_mutex_lock(&m->mu);
    for (size_t i = 0; i < n; i++)
        pg_histogram_observe(&m->itl, itl);
    pthread_mutex_unlock(&m->mu);
}

typedef struct sbuf {
    char *p;
    size_t len, cap;
    int oom;
} sbuf;

static void sb_printf(sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb_printf(sbuf *b, const char *fmt, ...) {
    if (b->oom) return;
    va_list ap, aq;
    va_start(ap, fmt);
    va_copy(aq, ap);
    // NOLINTNEXTLINE(clang-analyzer-valist.Uninitialized): ap is started above
    int n = vsnprintf(b->p + b->len, b->cap - b->len, fmt, ap);
    if (n >= 0 && b->len + (size_t)n >= b->cap) { /* too small: grow, print again */
        size_t cap = (b->len + (size_t)n + 1) * 2;
        char *q = realloc(b->p, cap);
        if (q) {
            b->p = q;
            b->cap = cap;
            n = vsnprintf(b->p + b->len, b->cap - b->len, fmt, aq);
        } else {
            n = -1;
        }
    }
    va_end(aq);
    va_end(ap);
    if (n < 0)
        b->oom = 1;
    else
        b->len += (size_t)n;
}

static void header(sbuf *b, const char *name, const char *type, const char *help) {
    sb_printf(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static void hist(sbuf *b, const char *name, const char *help, const pg_histogram *h,
                 const char *model) {
    header(b, name, "histogram", help);
    uint64_t cum = 0;
    for (int i = 0; i < h->n_bounds; i++) {
        cum += h->counts[i];
        sb_printf(b, "%s_bucket{le=\"%g\",model_name=\"%s\"} %llu\n", name, h->bounds[i], model,
                  (unsigned long long)cum);
    }
    cum += h->counts[h->n_bounds];
    sb_printf(b, "%s_bucket{le=\"+Inf\",model_name=\"%s\"} %llu\n", name, model,
              (unsigned long long)cum);
    sb_printf(b, "%s_count{model_name=\"%s\"} %llu\n", name, model, (unsigned long long)h->count);
    sb_printf(b, "%s_sum{model_name=\"%s\"} %.9g\n", name, model, h->sum);
}

static void counter(sbuf *b, const char *name, const char *help, uint64_t v, const char *model) {
    header(b, name, "counter", help);
    sb_printf(b, "%s_total{model_name=\"%s\"} %llu\n", name, model, (unsigned long long)v);
}

static void gauge(sbuf *b, const char *name, const char *help, double v, const char *model) {
    header(b, name, "gauge", help);
    sb_printf(b, "%s{model_name=\"%s\"} %.9g\n", name, model, v);
}

/* Label values escape backslash, quote and newline (exposition format). */
static char *escape_label(const char *s) {
    size_t n = strlen(s);
    char *o = malloc(2 * n + 1), *q = o;
    if (!o) return NULL;
    for (; *s; s++) {
        if (*s == '\\' || *s == '"')
            *q++ = '\\', *q++ = *s;
        else if (*s == '\n')
            *q++ = '\\', *q++ = 'n';
        else
            *q++ = *s;
    }
    *q = 0;
    return o;
}

char *pg_metrics_render(pg_metrics *m, const char *model_name, const pagoda_stats *st) {
    char *model = escape_label(model_name);
    sbuf b = {malloc(8192), 0, 8192, 0};
    if (!model || !b.p) {
        free(model);
        free(b.p);
        return NULL;
    }
    b.p[0] = 0;
    gauge(&b, "vllm:num_requests_running", "Number of requests in model execution batches.",
          st->num_requests_running, model);
    gauge(&b, "vllm:num_requests_waiting", "Number of requests waiting to be processed.",
          st->num_requests_waiting, model);
    gauge(&b, "vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.",
          st->kv_cache_usage, model);
    counter(&b, "vllm:num_preemptions", "Cumulative number of preemption from the engine.",
            st->num_preemptions, model);
    counter(&b, "vllm:prompt_tokens", "Number of prefill tokens processed.", st->prompt_tokens,
            model);
    counter(&b, "vllm:generation_tokens", "Number of generation tokens processed.",
            st->generation_tokens, model);
    counter(&b, "vllm:prefix_cache_queries",
            "Prefix cache queries, in terms of number of queried tokens.", st->prefix_cache_queries,
            model);
    counter(&b, "vllm:prefix_cache_hits", "Prefix cache hits, in terms of number of cached tokens.",
            st->prefix_cache_hits, model);

    pthread_mutex_lock(&m->mu);
    header(&b, "vllm:request_success", "counter", "Count of successfully processed requests.");
    static const char *const reasons[] = {"stop", "length", "abort", "error"};
    const uint64_t vals[] = {m->success_stop, m->success_length, m->success_abort,
                             m->success_error};
    for (int i = 0; i < 4; i++)
        sb_printf(&b, "vllm:request_success_total{finished_reason=\"%s\",model_name=\"%s\"} %llu\n",
                  reasons[i], model, (unsigned long long)vals[i]);
    hist(&b, "vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.",
         &m->ttft, model);
    hist(&b, "vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.",
         &m->itl, model);
    hist(&b, "vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.",
         &m->e2e, model);
    hist(&b, "vllm:request_queue_time_seconds",
         "Histogram of time spent in WAITING phase for request.", &m->queue, model);
    pthread_mutex_unlock(&m->mu);
    free(model);
    if (b.oom) {
        free(b.p);
        return NULL;
    }
    return b.p;
}
