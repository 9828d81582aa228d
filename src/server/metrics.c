/* Prometheus text rendering of the server's metrics (see metrics.h). */
#include "server/metrics.h"

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
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

static void hist(sbuf *b, const char *name, const pg_histogram *h, const char *model) {
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

/* The per-model stats a gauge or counter family shows. */
typedef enum stat_field {
    F_RUNNING,
    F_WAITING,
    F_KV_USAGE,
    F_PREEMPTIONS,
    F_PROMPT,
    F_GENERATION,
    F_PC_QUERIES,
    F_PC_HITS,
} stat_field;

static double stat_value(const pagoda_stats *st, stat_field f) {
    switch (f) {
    case F_RUNNING:
        return st->num_requests_running;
    case F_WAITING:
        return st->num_requests_waiting;
    case F_KV_USAGE:
        return st->kv_cache_usage;
    case F_PREEMPTIONS:
        return (double)st->num_preemptions;
    case F_PROMPT:
        return (double)st->prompt_tokens;
    case F_GENERATION:
        return (double)st->generation_tokens;
    case F_PC_QUERIES:
        return (double)st->prefix_cache_queries;
    case F_PC_HITS:
        return (double)st->prefix_cache_hits;
    }
    return 0;
}

typedef enum hist_field { H_TTFT, H_ITL, H_E2E, H_QUEUE } hist_field;

static const pg_histogram *hist_of(const pg_metrics *m, hist_field f) {
    return f == H_TTFT ? &m->ttft : f == H_ITL ? &m->itl : f == H_E2E ? &m->e2e : &m->queue;
}

char *pg_metrics_render_models(const pg_metrics_model *models, size_t n) {
    char **label = calloc(n ? n : 1, sizeof *label);
    sbuf b = {malloc(8192), 0, 8192, 0};
    bool ok = label && b.p;
    for (size_t i = 0; ok && i < n; i++)
        ok = (label[i] = escape_label(models[i].name)) != NULL;
    if (!ok) {
        for (size_t i = 0; label && i < n; i++)
            free(label[i]);
        free(label);
        free(b.p);
        return NULL;
    }
    b.p[0] = 0;
    static const struct {
        const char *name, *type, *help;
        stat_field f;
    } STATS[] = {
        {"vllm:num_requests_running", "gauge", "Number of requests in model execution batches.",
         F_RUNNING},
        {"vllm:num_requests_waiting", "gauge", "Number of requests waiting to be processed.",
         F_WAITING},
        {"vllm:kv_cache_usage_perc", "gauge", "KV-cache usage. 1 means 100 percent usage.",
         F_KV_USAGE},
        {"vllm:num_preemptions", "counter", "Cumulative number of preemption from the engine.",
         F_PREEMPTIONS},
        {"vllm:prompt_tokens", "counter", "Number of prefill tokens processed.", F_PROMPT},
        {"vllm:generation_tokens", "counter", "Number of generation tokens processed.",
         F_GENERATION},
        {"vllm:prefix_cache_queries", "counter",
         "Prefix cache queries, in terms of number of queried tokens.", F_PC_QUERIES},
        {"vllm:prefix_cache_hits", "counter",
         "Prefix cache hits, in terms of number of cached tokens.", F_PC_HITS},
    };
    for (size_t k = 0; k < sizeof STATS / sizeof STATS[0]; k++) {
        header(&b, STATS[k].name, STATS[k].type, STATS[k].help);
        bool is_counter = !strcmp(STATS[k].type, "counter");
        for (size_t i = 0; i < n; i++) {
            double v = stat_value(models[i].st, STATS[k].f);
            if (is_counter)
                sb_printf(&b, "%s_total{model_name=\"%s\"} %llu\n", STATS[k].name, label[i],
                          (unsigned long long)v);
            else
                sb_printf(&b, "%s{model_name=\"%s\"} %.9g\n", STATS[k].name, label[i], v);
        }
    }
    /* speculative decoding (vLLM's SpecDecodingProm), when a model uses it */
    bool spec = false;
    for (size_t i = 0; i < n; i++)
        spec |= models[i].st->spec_num_positions > 0;
    static const struct {
        const char *name, *help;
        size_t off;
    } SPEC[] = {
        {"vllm:spec_decode_num_drafts", "Number of spec decoding drafts.",
         offsetof(pagoda_stats, spec_num_drafts)},
        {"vllm:spec_decode_num_draft_tokens", "Number of draft tokens.",
         offsetof(pagoda_stats, spec_num_draft_tokens)},
        {"vllm:spec_decode_num_accepted_tokens", "Number of accepted tokens.",
         offsetof(pagoda_stats, spec_num_accepted_tokens)},
    };
    for (size_t k = 0; spec && k < sizeof SPEC / sizeof SPEC[0]; k++) {
        header(&b, SPEC[k].name, "counter", SPEC[k].help);
        for (size_t i = 0; i < n; i++) {
            if (models[i].st->spec_num_positions <= 0) continue;
            uint64_t v;
            memcpy(&v, (const char *)models[i].st + SPEC[k].off, sizeof v);
            sb_printf(&b, "%s_total{model_name=\"%s\"} %llu\n", SPEC[k].name, label[i],
                      (unsigned long long)v);
        }
    }
    if (spec)
        header(&b, "vllm:spec_decode_num_accepted_tokens_per_pos", "counter",
               "Accepted tokens per draft position.");
    for (size_t i = 0; spec && i < n; i++)
        for (int p = 0; p < models[i].st->spec_num_positions && p < 16; p++)
            sb_printf(&b,
                      "vllm:spec_decode_num_accepted_tokens_per_pos_total{model_name=\"%s\","
                      "position=\"%d\"} %llu\n",
                      label[i], p, (unsigned long long)models[i].st->spec_accepted_per_pos[p]);
    for (size_t i = 0; i < n; i++)
        pthread_mutex_lock(&models[i].m->mu);
    header(&b, "vllm:request_success", "counter", "Count of successfully processed requests.");
    static const pagoda_finish_reason reasons[] = {PAGODA_FINISH_STOP, PAGODA_FINISH_LENGTH,
                                                   PAGODA_FINISH_ABORT, PAGODA_FINISH_ERROR};
    for (size_t i = 0; i < n; i++) {
        const pg_metrics *m = models[i].m;
        const uint64_t vals[] = {m->success_stop, m->success_length, m->success_abort,
                                 m->success_error};
        for (int r = 0; r < 4; r++)
            sb_printf(&b,
                      "vllm:request_success_total{finished_reason=\"%s\",model_name=\"%s\"} "
                      "%llu\n",
                      pagoda_finish_reason_name(reasons[r]), label[i],
                      (unsigned long long)vals[r]);
    }
    static const struct {
        const char *name, *help;
        hist_field f;
    } HISTS[] = {
        {"vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.",
         H_TTFT},
        {"vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.", H_ITL},
        {"vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.", H_E2E},
        {"vllm:request_queue_time_seconds", "Histogram of time spent in WAITING phase for request.",
         H_QUEUE},
    };
    for (size_t k = 0; k < sizeof HISTS / sizeof HISTS[0]; k++) {
        header(&b, HISTS[k].name, "histogram", HISTS[k].help);
        for (size_t i = 0; i < n; i++)
            hist(&b, HISTS[k].name, hist_of(models[i].m, HISTS[k].f), label[i]);
    }
    for (size_t i = n; i-- > 0;)
        pthread_mutex_unlock(&models[i].m->mu);
    for (size_t i = 0; i < n; i++)
        free(label[i]);
    free(label);
    if (b.oom) {
        free(b.p);
        return NULL;
    }
    return b.p;
}

bool pg_metrics_spec_line(const pagoda_stats *prev, const pagoda_stats *cur, double seconds,
                          char *buf, size_t cap) {
    static const pagoda_stats zero;
    if (!prev) prev = &zero;
    const uint64_t drafts = cur->spec_num_drafts - prev->spec_num_drafts;
    const uint64_t drafted = cur->spec_num_draft_tokens - prev->spec_num_draft_tokens;
    const uint64_t accepted = cur->spec_num_accepted_tokens - prev->spec_num_accepted_tokens;
    if (cur->spec_num_positions <= 0 || drafts == 0 || drafted == 0 || cap == 0) return false;
    if (seconds <= 0) seconds = 1e-9;
    size_t n = (size_t)snprintf(buf, cap,
                                "SpecDecoding metrics: Mean acceptance length: %.2f, Accepted "
                                "throughput: %.2f tokens/s, Drafted throughput: %.2f tokens/s, "
                                "Accepted: %llu tokens, Drafted: %llu tokens, Per-position "
                                "acceptance rate: ",
                                1.0 + (double)accepted / (double)drafts, (double)accepted / seconds,
                                (double)drafted / seconds, (unsigned long long)accepted,
                                (unsigned long long)drafted);
    for (int p = 0; p < cur->spec_num_positions && p < 16 && n < cap; p++)
        n += (size_t)snprintf(
            buf + n, cap - n, "%s%.3f", p ? ", " : "",
            (double)(cur->spec_accepted_per_pos[p] - prev->spec_accepted_per_pos[p]) /
                (double)drafts);
    if (n < cap)
        snprintf(buf + n, cap - n, ", Avg Draft acceptance rate: %.1f%%",
                 100.0 * (double)accepted / (double)drafted);
    return true;
}

char *pg_metrics_render(pg_metrics *m, const char *model_name, const pagoda_stats *st) {
    pg_metrics_model one = {model_name, m, st};
    return pg_metrics_render_models(&one, 1);
}
