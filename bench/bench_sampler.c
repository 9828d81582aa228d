/* Sampler cost per call at LLM vocabulary sizes (Llama 3: 128256, o200k:
 * 201088) for the common parameter mixes, against a naive baseline measured
 * in the same run: full qsort of (logit, id) + softmax + inverse CDF, which
 * is what a sampler without partial selection does for top-k/top-p.
 *
 * Logits look like a model's: Gaussian bulk (sd 2) plus a few peaks. The
 * timed region is one pg_sampler_sample call; the logits are restored with a
 * memcpy outside it. Prints median microseconds per call. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/sampler.h"

static double now_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec * 1e-3;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static uint64_t g_rs = 88172645463325252ull;
static double rnd(void) {
    g_rs ^= g_rs << 13;
    g_rs ^= g_rs >> 7;
    g_rs ^= g_rs << 17;
    return (double)(g_rs >> 11) * 0x1.0p-53;
}

typedef struct {
    float x;
    int32_t id;
} pair;

static int cmp_pair(const void *a, const void *b) {
    const pair *p = a, *q = b;
    if (p->x != q->x) return p->x > q->x ? -1 : 1;
    return p->id - q->id;
}

/* The naive baseline: sort everything, softmax, top-k/top-p cut, draw. */
static int32_t naive_sample(const float *x, size_t v, pair *tmp, float t, int k, float top_p,
                            double u) {
    for (size_t i = 0; i < v; i++)
        tmp[i] = (pair){x[i], (int32_t)i};
    qsort(tmp, v, sizeof *tmp, cmp_pair);
    size_t n = k > 0 && (size_t)k < v ? (size_t)k : v;
    double z = 0.0;
    for (size_t j = 0; j < n; j++)
        z += exp((double)(tmp[j].x - tmp[0].x) / t);
    double cum = 0.0;
    size_t keep = n;
    for (size_t j = 0; j < n; j++) {
        cum += exp((double)(tmp[j].x - tmp[0].x) / t) / z;
        if (cum >= top_p) {
            keep = j + 1;
            break;
        }
    }
    double target = u * cum;
    cum = 0.0;
    for (size_t j = 0; j < keep; j++) {
        cum += exp((double)(tmp[j].x - tmp[0].x) / t) / z;
        if (cum > target) return tmp[j].id;
    }
    return tmp[keep - 1].id;
}

#define ITERS 60

static double bench_case(pg_sampler *s, const float *src, float *work, size_t v,
                         const pg_sampling_params *p, const int32_t *prompt, size_t np,
                         const int32_t *out, size_t no, int logprobs) {
    double t[ITERS];
    int32_t ids[64];
    float lps[64];
    pg_logprob_out lp = {.top_ids = ids, .top_logprobs = lps, .cap = 64};
    pg_rng rng = pg_rng_from_seed(1);
    for (int it = 0; it < ITERS; it++) {
        memcpy(work, src, v * sizeof(float));
        int32_t tok;
        double t0 = now_us();
        pagoda_status st = pg_sampler_sample(s, p, &rng, work, prompt, np, out, no + (size_t)it,
                                             logprobs ? &lp : NULL, &tok);
        t[it] = now_us() - t0;
        if (st != PAGODA_OK) {
            fprintf(stderr, "sample failed: %s\n", pg_last_error());
            exit(1);
        }
    }
    qsort(t, ITERS, sizeof t[0], cmp_double);
    return t[ITERS / 2];
}

int main(void) {
    const size_t vocabs[2] = {128256, 201088};
    for (int vi = 0; vi < 2; vi++) {
        size_t v = vocabs[vi];
        float *src = malloc(v * sizeof(float)), *work = malloc(v * sizeof(float));
        pair *tmp = malloc(v * sizeof(pair));
        for (size_t i = 0; i < v; i++) {
            double g = sqrt(-2.0 * log(1.0 - rnd())) * cos(6.283185307179586 * rnd());
            src[i] = (float)(2.0 * g);
        }
        for (int j = 0; j < 8; j++)
            src[(size_t)(rnd() * (double)v)] += 12.0f;
        /* history: 2048 prompt + 512 output tokens */
        int32_t *hist = malloc((2048 + 512 + ITERS) * sizeof(int32_t));
        for (size_t i = 0; i < 2048 + 512 + ITERS; i++)
            hist[i] = (int32_t)(rnd() * (double)v);
        pg_logit_bias bias[8];
        for (int j = 0; j < 8; j++)
            bias[j] = (pg_logit_bias){(int32_t)(rnd() * (double)v), -5.0f};

        pg_sampler *s = NULL;
        if (pg_sampler_create((int32_t)v, &s) != PAGODA_OK) return 1;

        /* baseline */
        double tb[ITERS];
        for (int it = 0; it < ITERS / 4; it++) {
            double t0 = now_us();
            volatile int32_t tok = naive_sample(src, v, tmp, 0.8f, 50, 0.9f, rnd());
            (void)tok;
            tb[it] = now_us() - t0;
        }
        qsort(tb, ITERS / 4, sizeof tb[0], cmp_double);
        double base = tb[ITERS / 8];

        printf("vocab %zu (median of %d calls; baseline = naive full sort, %.0f us)\n", v, ITERS,
               base);
        printf("  %-52s %9s %8s\n", "case", "us/call", "x faster");
        struct {
            const char *name;
            float t, top_p, min_p, rep, pres, freq;
            int top_k, nbias, hist, logprobs;
        } cases[] = {
            {"greedy", 0.0f, 1.0f, 0, 1, 0, 0, 0, 0, 0, 0},
            {"temperature 0.8, no filter", 0.8f, 1.0f, 0, 1, 0, 0, 0, 0, 0, 0},
            {"top_k 50", 0.8f, 1.0f, 0, 1, 0, 0, 50, 0, 0, 0},
            {"top_p 0.9 (no top_k: lazy partial sort)", 0.8f, 0.9f, 0, 1, 0, 0, 0, 0, 0, 0},
            {"min_p 0.05 + top_p 0.95", 0.8f, 0.95f, 0.05f, 1, 0, 0, 0, 0, 0, 0},
            {"all filters: k 50, p 0.9, min_p .05, 3 penalties, bias", 0.8f, 0.9f, 0.05f, 1.1f,
             0.5f, 0.5f, 50, 8, 1, 0},
            {"all filters + 5 logprobs", 0.8f, 0.9f, 0.05f, 1.1f, 0.5f, 0.5f, 50, 8, 1, 5},
            {"all filters + 20 logprobs", 0.8f, 0.9f, 0.05f, 1.1f, 0.5f, 0.5f, 50, 8, 1, 20},
        };
        for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
            pg_sampling_params p = pg_sampling_params_default();
            p.temperature = cases[c].t;
            p.top_p = cases[c].top_p;
            p.min_p = cases[c].min_p;
            p.top_k = cases[c].top_k;
            p.repetition_penalty = cases[c].rep;
            p.presence_penalty = cases[c].pres;
            p.frequency_penalty = cases[c].freq;
            p.logit_bias = bias;
            p.n_logit_bias = (size_t)cases[c].nbias;
            p.n_logprobs = cases[c].logprobs;
            double us = bench_case(s, src, work, v, &p, hist, cases[c].hist ? 2048 : 0, hist + 2048,
                                   cases[c].hist ? 512 : 0, cases[c].logprobs > 0);
            printf("  %-52s %9.1f %8.1f\n", cases[c].name, us, base / us);
        }
        pg_sampler_free(s);
        free(src);
        free(work);
        free(tmp);
        free(hist);
    }
    return 0;
}
