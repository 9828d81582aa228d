/* `pagoda bench throughput MODEL` and `pagoda bench latency MODEL`: offline
 * benchmarks of the engine with vLLM's options and definitions
 * (vllm/benchmarks/throughput.py, latency.py; /work/shared/BENCHMARKS.md):
 *   throughput: the random dataset's requests are all added at once and the
 *     engine runs until every one finished; elapsed_time, requests/s, total
 *     (prompt + output) and output tokens/s, per-request latency percentiles.
 *   latency: one batch of --batch-size random prompts of --input-len tokens,
 *     --output-len tokens each (ignore_eos), run --num-iters-warmup times
 *     unmeasured and --num-iters times measured; avg_latency and the
 *     10/25/50/75/90/99th percentiles of the batch latency. With
 *     --bandwidth-bound it also reports decode against the memory-bandwidth
 *     bound: each decode step's weight bytes (pagoda_engine_weight_bytes_per_step)
 *     over the read bandwidth measured right after that step (a 64 MiB
 *     read, not timed as decode), summed over the steps, against the
 *     steps' own time. A shared machine's bandwidth moves between regimes
 *     within seconds (30 vs 50 GB/s here), so only a probe next to every
 *     step compares like with like. The probe evicts the caches, so a model
 *     whose weights fit in them decodes slower under it than without. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/engine_args.h"
#include "base/alloc.h"
#include "base/pool.h"
#include "bench/harness.h"
#include "pagoda.h"
#include "bench/bench_dataset.h"
#include "bench/bench_metrics.h"
#include "bench/bench_schedule.h"
#include "server/metrics.h"

typedef struct offline_opts {
    const char *model;
    int32_t input_len, output_len, prefix_len, batch_size, num_iters, num_iters_warmup;
    long num_prompts;
    double range_ratio;
    uint64_t seed;
    const char *output_json;
    bool bandwidth_bound;
    bool copy;               /* --dataset-name copy: prompts that repeat a passage */
    int32_t copy_repeat_len; /* --copy-repeat-len: 0 = the whole passage once */
    float temperature;       /* --temperature (default 1, vLLM's benchmarks) */
    pagoda_engine_options eng;
} offline_opts;

static bool parse_i32(const char *s, long lo, long hi, int32_t *out) {
    long long v;
    if (!pg_args_long(s, lo, hi, &v)) return false;
    *out = (int32_t)v;
    return true;
}

static void usage(FILE *f, bool latency) {
    if (latency)
        fputs("usage: pagoda bench latency MODEL [options]\n\n"
              "One batch of random prompts run to completion, --num-iters times.\n\n"
              "  --batch-size N         prompts per batch (default 8)\n"
              "  --input-len N          prompt tokens (default 32)\n"
              "  --output-len N         output tokens, ignore_eos (default 128)\n"
              "  --num-iters-warmup N   unmeasured iterations (default 10)\n"
              "  --num-iters N          measured iterations (default 30)\n"
              "  --bandwidth-bound      also report decode (after every request's first\n"
              "                         token) against the memory-bandwidth bound: each\n"
              "                         step's weight bytes over the read bandwidth\n"
              "                         measured right after it, against its time (that\n"
              "                         64 MiB read evicts the caches: a model whose\n"
              "                         weights fit in them decodes slower with it)\n",
              f);
    else
        fputs("usage: pagoda bench throughput MODEL [options]\n\n"
              "All requests of the random dataset added at once, run to completion.\n\n"
              "  --num-prompts N        requests (default 1000)\n"
              "  --input-len N          prompt tokens (default 1024; also --random-input-len)\n"
              "  --output-len N         output tokens, ignore_eos (default 128)\n"
              "  --range-ratio R        lengths uniform in [L(1-R), L(1+R)] (default 0)\n"
              "  --prefix-len N         random tokens shared by every prompt (default 0)\n",
              f);
    fputs("  --dataset-name D       random (vLLM's, default) or copy: the random prompt's\n"
          "                         first half, then that half again up to --input-len\n"
          "                         (\"repeat this passage\": a model that copies continues\n"
          "                         it; the workload of n-gram speculative decoding)\n"
          "  --copy-repeat-len N    with copy: repeat only the passage's first N tokens\n"
          "                         (the passage is the other --input-len - N), so a\n"
          "                         model that copies continues inside the passage\n"
          "  --temperature T        sampling temperature (default 1, vLLM's; 0 = greedy)\n"
          "  --seed S               dataset seed (default 0)\n"
          "  --output-json FILE     write vLLM's result keys as JSON\n\n" PG_ENGINE_ARGS_HELP,
          f);
}

/* Returns 0, 2 (usage error, printed) or -1 (--help). */
static int parse(int argc, char **argv, bool latency, offline_opts *o) {
    const char *cmd = latency ? "pagoda bench latency" : "pagoda bench throughput";
    *o = (offline_opts){.temperature = 1.0f,
                        .input_len = latency ? 32 : 1024,
                        .output_len = 128,
                        .batch_size = 8,
                        .num_iters = 30,
                        .num_iters_warmup = 10,
                        .num_prompts = 1000};
    pagoda_engine_options_default(&o->eng);
    for (int i = 1; i < argc; i++) {
        int e = pg_engine_args_parse(cmd, argc, argv, &i, &o->eng);
        if (e < 0) return 2;
        if (e > 0) continue;
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout, latency);
            return -1;
        }
        if (latency && !strcmp(a, "--bandwidth-bound")) {
            o->bandwidth_bound = true;
            continue;
        }
        if (!pg_args_is_option(a)) {
            if (o->model) return pg_args_unexpected(cmd, a);
            o->model = a;
            continue;
        }
        /* the options of this benchmark that take a value */
        static const char *const COMMON[] = {"--model",
                                             "--input-len",
                                             "--random-input-len",
                                             "--output-len",
                                             "--random-output-len",
                                             "--dataset-name",
                                             "--dataset",
                                             "--seed",
                                             "--temperature",
                                             "--output-json",
                                             "--copy-repeat-len"};
        static const char *const THROUGHPUT[] = {"--prefix-len", "--random-prefix-len",
                                                 "--range-ratio", "--random-range-ratio",
                                                 "--num-prompts"};
        static const char *const LATENCY[] = {"--batch-size", "--num-iters", "--num-iters-warmup"};
        bool known = false;
        for (size_t k = 0; k < sizeof COMMON / sizeof COMMON[0]; k++)
            known |= !strcmp(a, COMMON[k]);
        for (size_t k = 0; !latency && k < sizeof THROUGHPUT / sizeof THROUGHPUT[0]; k++)
            known |= !strcmp(a, THROUGHPUT[k]);
        for (size_t k = 0; latency && k < sizeof LATENCY / sizeof LATENCY[0]; k++)
            known |= !strcmp(a, LATENCY[k]);
        if (!known) return pg_args_unknown(cmd, a);
        const char *v = pg_args_value(cmd, argc, argv, &i);
        if (!v) return 2;
        bool ok = true;
        const char *want = "an integer in range";
        int32_t n32 = 0;
        if (!strcmp(a, "--model"))
            o->model = v;
        else if (!strcmp(a, "--input-len") || !strcmp(a, "--random-input-len"))
            ok = parse_i32(v, 1, 1 << 24, &o->input_len), want = "an integer in [1, 2^24]";
        else if (!strcmp(a, "--output-len") || !strcmp(a, "--random-output-len"))
            ok = parse_i32(v, 1, 1 << 24, &o->output_len), want = "an integer in [1, 2^24]";
        else if (!strcmp(a, "--prefix-len") || !strcmp(a, "--random-prefix-len"))
            ok = parse_i32(v, 0, 1 << 24, &o->prefix_len), want = "an integer in [0, 2^24]";
        else if (!strcmp(a, "--range-ratio") || !strcmp(a, "--random-range-ratio")) {
            ok = pg_args_double(v, &o->range_ratio) && o->range_ratio >= 0 && o->range_ratio < 1;
            want = "a number in [0, 1)";
        } else if (!strcmp(a, "--num-prompts")) {
            ok = parse_i32(v, 1, 100000000, &n32), want = "an integer in [1, 10^8]";
            o->num_prompts = n32;
        } else if (!strcmp(a, "--dataset-name") || !strcmp(a, "--dataset")) {
            o->copy = !strcmp(v, "copy");
            ok = o->copy || !strcmp(v, "random"), want = "random or copy";
        } else if (!strcmp(a, "--temperature")) {
            char *end;
            errno = 0;
            double t = strtod(v, &end);
            ok = *v && !*end && errno == 0 && t >= 0 && t <= 100, want = "a number in [0, 100]";
            o->temperature = (float)t;
        } else if (!strcmp(a, "--batch-size"))
            ok = parse_i32(v, 1, 1 << 20, &o->batch_size), want = "an integer in [1, 2^20]";
        else if (!strcmp(a, "--num-iters"))
            ok = parse_i32(v, 1, 1 << 20, &o->num_iters), want = "an integer in [1, 2^20]";
        else if (!strcmp(a, "--num-iters-warmup"))
            ok = parse_i32(v, 0, 1 << 20, &o->num_iters_warmup), want = "an integer in [0, 2^20]";
        else if (!strcmp(a, "--seed")) {
            ok = parse_i32(v, 0, 1L << 30, &n32), want = "an integer in [0, 2^30]";
            o->seed = (uint64_t)n32;
        } else if (!strcmp(a, "--copy-repeat-len"))
            ok = parse_i32(v, 1, 1 << 24, &o->copy_repeat_len), want = "an integer in [1, 2^24]";
        else if (!strcmp(a, "--output-json"))
            o->output_json = v;
        if (!ok) return pg_args_bad_value(cmd, a, v, want);
    }
    if (o->bandwidth_bound && o->output_len < 2) {
        fprintf(stderr, "%s: --bandwidth-bound needs --output-len >= 2 (decode steps to time)\n",
                cmd);
        return 2;
    }
    if (o->copy_repeat_len && !o->copy) {
        fprintf(stderr, "%s: --copy-repeat-len needs --dataset-name copy\n", cmd);
        return 2;
    }
    if (o->copy_repeat_len >= o->input_len) {
        fprintf(stderr,
                "%s: --copy-repeat-len %d leaves no passage: it must be below --input-len %d\n",
                cmd, o->copy_repeat_len, o->input_len);
        return 2;
    }
    if (!o->model) {
        fprintf(stderr, "%s: MODEL is required\n\n", cmd);
        usage(stderr, latency);
        return 2;
    }
    return pg_engine_args_check(cmd, &o->eng);
}

/* ---- --bandwidth-bound: decode against weight bytes / read bandwidth ---- */

/* The probe reads BW_SLICE bytes after every decode step, the next slice of
 * a buffer 8x a 32 MiB L3 each time (never a cached one); about 2 ms. */
enum { BW_BUF_BYTES = 256u << 20, BW_SLICE = 64u << 20 };

typedef struct bw_probe {
    uint8_t *buf;
    size_t slice; /* the next slice to read */
    double bytes; /* weight bytes per step */
    size_t iter;  /* the iteration being measured */
    /* every measured decode step: its iteration, seconds, the probe's GB/s
     * (a growing array: preempted requests add decode steps) */
    double *step;
    size_t nstep, cap;
    bool oom; /* a step could not be kept: no report */
} bw_probe;

static int bw_probe_init(bw_probe *p, double bytes) {
    p->buf = pg_alloc_huge(BW_BUF_BYTES); /* zero-filled: pages are touched */
    p->bytes = bytes;
    if (!p->buf) {
        fprintf(stderr, "pagoda bench latency: out of memory for the bandwidth probe\n");
        return -1;
    }
    memset(p->buf, 1, BW_BUF_BYTES);
    return 0;
}

/* One decode step of dt seconds just ended: read the next slice and keep
 * the step with that bandwidth. */
static void bw_step(bw_probe *p, double dt) {
    const uint8_t *b = p->buf + (p->slice++ % (BW_BUF_BYTES / BW_SLICE)) * (size_t)BW_SLICE;
    double gbs = pg_bench_read_bandwidth(pg_pool_default(), b, BW_SLICE, 1);
    if (gbs <= 0 || p->oom) return;
    if (p->nstep == p->cap) {
        size_t cap = p->cap ? 2 * p->cap : 256;
        double *np = realloc(p->step, 3 * cap * sizeof *np);
        if (!np) {
            p->oom = true;
            return;
        }
        p->step = np;
        p->cap = cap;
    }
    double *st = p->step + 3 * p->nstep++;
    st[0] = (double)p->iter;
    st[1] = dt;
    st[2] = gbs;
}

/* Per iteration (of n): its steps' time, their bound (bytes / each step's
 * bandwidth, summed) and count; steps/s, weight stream = bytes x steps /
 * time, read bandwidth = bytes x steps / bound (the steps' harmonic mean),
 * fraction = bound / time; report medians. */
static void bw_report(bw_probe *p, size_t n, cJSON *js) {
    if (p->oom) {
        fprintf(stderr, "pagoda bench latency: out of memory for the bandwidth probe's steps\n");
        return;
    }
    double *v = calloc(7 * (n ? n : 1), sizeof *v);
    double *t = v, *bd = v + n, *k = v + 2 * n, *sps = v + 3 * n, *ach = v + 4 * n;
    double *bw = v + 5 * n, *ratio = v + 6 * n;
    if (n && v) {
        for (size_t i = 0; i < p->nstep; i++) {
            const double *st = p->step + 3 * i;
            const size_t it = (size_t)st[0];
            if (it >= n) continue;
            t[it] += st[1];
            bd[it] += p->bytes / (st[2] * 1e9);
            k[it] += 1;
        }
        for (size_t i = 0; i < n; i++) {
            sps[i] = t[i] > 0 ? k[i] / t[i] : 0;
            ach[i] = p->bytes * sps[i] * 1e-9;
            bw[i] = bd[i] > 0 ? p->bytes * k[i] / bd[i] * 1e-9 : 0;
            ratio[i] = t[i] > 0 ? bd[i] / t[i] : 0;
        }
        double m_ratio = pg_bench_median(ratio, (int)n), m_ach = pg_bench_median(ach, (int)n);
        double m_bw = pg_bench_median(bw, (int)n), m_sps = pg_bench_median(sps, (int)n);
        printf("Decode steps/s: %.2f (median of %zu iterations; %zu decode steps, after every "
               "request's first token)\n",
               m_sps, n, p->nstep);
        printf("Weight bytes per step: %.3f GB; weight stream: %.1f GB/s\n", p->bytes * 1e-9,
               m_ach);
        printf("Read bandwidth: %.1f GB/s; decode at %.1f%% of the bandwidth bound "
               "(median of per-iteration ratios; a %d MiB read after every step)\n",
               m_bw, 100.0 * m_ratio, (int)(BW_SLICE >> 20));
        cJSON *b = cJSON_AddObjectToObject(js, "bandwidth_bound");
        cJSON_AddNumberToObject(b, "weight_bytes_per_step", p->bytes);
        cJSON_AddNumberToObject(b, "decode_steps_per_second", m_sps);
        cJSON_AddNumberToObject(b, "weight_stream_gbs", m_ach);
        cJSON_AddNumberToObject(b, "read_bandwidth_gbs", m_bw);
        cJSON_AddNumberToObject(b, "fraction_of_bound", m_ratio);
        cJSON_AddNumberToObject(b, "decode_steps", (double)p->nstep);
        /* every measured decode step: [seconds, the read GB/s right after it] */
        cJSON *steps = cJSON_AddArrayToObject(b, "steps");
        for (size_t i = 0; steps && i < p->nstep; i++) {
            cJSON *pr = cJSON_CreateArray();
            cJSON_AddItemToArray(pr, cJSON_CreateNumber(p->step[3 * i + 1]));
            cJSON_AddItemToArray(pr, cJSON_CreateNumber(p->step[3 * i + 2]));
            cJSON_AddItemToArray(steps, pr);
        }
    }
    free(v);
}

static void bw_probe_free(bw_probe *p) {
    if (p->buf) pg_free_huge(p->buf, BW_BUF_BYTES);
    free(p->step);
}

/* Add the requests, run until all finished; latency[i] = finish - start
 * (seconds) when not NULL; *decode_s (optional) = seconds from the moment
 * every request had its first token to the end. probe (optional): every
 * step that starts after every request's first token goes to bw_step, and
 * the probe's reads are left out of the elapsed and decode seconds.
 * Returns elapsed seconds, or < 0 on error. */
static double run_batch(pagoda_engine *e, const pg_bench_request *reqs, size_t n, float temperature,
                        double *latency, double *decode_s, bw_probe *probe) {
    uint64_t *ids = malloc(n * sizeof *ids);
    unsigned char *first = calloc(n ? n : 1, 1); /* request i had its first token */
    if (!ids || !first) {
        free(ids);
        free(first);
        return -1;
    }
    double t0 = pg_bench_now();
    for (size_t i = 0; i < n; i++) {
        pagoda_request r;
        pagoda_request_defaults(e, &r);
        r.prompt_token_ids = reqs[i].prompt_ids;
        r.n_prompt_token_ids = (size_t)reqs[i].prompt_len;
        r.sampling.temperature = temperature; /* vLLM's throughput.py: 1, top_p 1 */
        r.sampling.top_p = 1.0f;
        r.sampling.top_k = 0;
        r.sampling.min_p = 0;
        r.sampling.repetition_penalty = 1.0f;
        r.sampling.seed = (int64_t)i;
        r.sampling.ignore_eos = true;
        r.sampling.max_tokens = reqs[i].output_len;
        if (pagoda_engine_add_request(e, &r, &ids[i], NULL) != PAGODA_OK) {
            free(ids);
            free(first);
            return -1;
        }
    }
    size_t failed = 0, nfirst = 0;
    double last_first = t0; /* latest first_token_time seen */
    double probe_s = 0;     /* the probe's reads, left out of every time */
    while (pagoda_engine_has_unfinished(e)) {
        size_t nout;
        const bool decode = nfirst == n;
        const double ts = pg_bench_now();
        if (pagoda_engine_step(e, &nout) != PAGODA_OK) {
            free(ids);
            free(first);
            return -1;
        }
        const pagoda_output *outs = pagoda_engine_outputs(e, &nout);
        double t = pg_bench_now();
        if (probe && decode) {
            bw_step(probe, t - ts);
            probe_s += pg_bench_now() - t;
        }
        t -= probe_s;
        for (size_t k = 0; k < nout; k++) {
            if (outs[k].first_token_time > last_first) last_first = outs[k].first_token_time;
            if (probe && outs[k].first_token_time > 0)
                for (size_t i = 0; i < n; i++)
                    if (ids[i] == outs[k].id && !first[i]) {
                        first[i] = 1;
                        nfirst++;
                    }
            if (outs[k].finish_reason == PAGODA_FINISH_NONE) continue;
            if (outs[k].finish_reason == PAGODA_FINISH_ERROR) failed++;
            if (latency)
                for (size_t i = 0; i < n; i++)
                    if (ids[i] == outs[k].id) latency[i] = t - t0;
        }
    }
    double t_end = pg_bench_now() - probe_s, el = t_end - t0;
    if (decode_s) *decode_s = t_end - last_first;
    if (probe) probe->iter++;
    free(ids);
    free(first);
    if (failed) {
        fprintf(stderr, "pagoda bench: %zu requests failed\n", failed);
        return -1;
    }
    return el;
}

static int write_json(const char *path, cJSON *obj) {
    char *s = cJSON_Print(obj);
    FILE *f = s ? fopen(path, "w") : NULL;
    int rc = 0;
    if (!f) {
        fprintf(stderr, "pagoda bench: cannot write %s\n", path);
        rc = 1;
    } else {
        fprintf(f, "%s\n", s);
        fclose(f);
    }
    free(s);
    return rc;
}

/* n random prompts (the rng continues from call to call, so each call's
 * prompts are new); with copy, each prompt's end repeats its passage
 * (pg_bench_copy_prompts: by default the passage, then itself again; with
 * --copy-repeat-len its first N tokens: what n-gram speculation feeds on). */
static pagoda_status make_requests(const pg_bench_random_cfg *cfg, size_t n, pg_bench_rng *rng,
                                   const offline_opts *o, pg_bench_request **out) {
    pagoda_status st = pg_bench_random_dataset(cfg, NULL, n, rng, out);
    if (st == PAGODA_OK && o->copy) st = pg_bench_copy_prompts(*out, n, o->copy_repeat_len);
    return st;
}

static const double PCTS[] = {10, 25, 50, 75, 90, 99};
#define N_PCTS (sizeof PCTS / sizeof PCTS[0])

static int offline(int argc, char **argv, bool latency) {
    offline_opts o;
    int rc = parse(argc, argv, latency, &o);
    if (rc) return rc < 0 ? 0 : rc;
    /* a bad --output-json path fails now, not after the whole benchmark */
    const char *cmd = latency ? "pagoda bench latency" : "pagoda bench throughput";
    if (o.output_json && pg_args_check_writable(cmd, o.output_json)) return 1;
    pagoda_engine *e;
    if (pagoda_engine_create(o.model, &o.eng, &e) != PAGODA_OK) {
        fprintf(stderr, "pagoda bench: %s\n", pagoda_last_error());
        return 1;
    }
    size_t n = latency ? (size_t)o.batch_size : (size_t)o.num_prompts;
    pg_bench_random_cfg rc_ = {.input_len = o.input_len,
                               .output_len = o.output_len,
                               .range_ratio = latency ? 0 : o.range_ratio,
                               .prefix_len = latency ? 0 : o.prefix_len,
                               .vocab_size = pagoda_engine_vocab_size(e)};
    pg_bench_rng rng;
    pg_bench_rng_seed(&rng, o.seed);
    pg_bench_request *reqs = NULL;
    if (make_requests(&rc_, n, &rng, &o, &reqs) != PAGODA_OK) {
        fprintf(stderr, "pagoda bench: %s\n", pagoda_last_error());
        pagoda_engine_free(e);
        return 1;
    }
    uint64_t prompt_tokens = 0, output_tokens = 0;
    for (size_t i = 0; i < n; i++) {
        prompt_tokens += (uint64_t)reqs[i].prompt_len;
        output_tokens += (uint64_t)reqs[i].output_len;
    }
    cJSON *js = cJSON_CreateObject();
    pagoda_stats spec0; /* speculative decoding: the counters before the measured runs */
    pagoda_engine_get_stats(e, &spec0);
    double spec_t0 = pg_bench_now();
    if (!latency) {
        double *lat = calloc(n, sizeof *lat);
        double el = lat ? run_batch(e, reqs, n, o.temperature, lat, NULL, NULL) : -1;
        if (el < 0) {
            fprintf(stderr, "pagoda bench throughput: %s\n", pagoda_last_error());
            rc = 1;
        } else {
            uint64_t total = prompt_tokens + output_tokens;
            printf("Throughput: %.2f requests/s, %.2f total tokens/s, %.2f output tokens/s\n",
                   (double)n / el, (double)total / el, (double)output_tokens / el);
            printf("Total num prompt tokens:  %llu\nTotal num output tokens:  %llu\n",
                   (unsigned long long)prompt_tokens, (unsigned long long)output_tokens);
            printf("Elapsed time: %.3f s for %zu requests\n", el, n);
            pg_bench_stat st; /* seconds in, milliseconds out */
            pg_bench_stat_compute(lat, n, PCTS, N_PCTS, &st);
            printf("Request latency (ms): mean %.1f, median %.1f", st.mean, st.median);
            for (size_t i = 0; i < N_PCTS; i++)
                printf(", p%g %.1f", PCTS[i], st.pct[i]);
            printf("\n");
            cJSON_AddNumberToObject(js, "elapsed_time", el);
            cJSON_AddNumberToObject(js, "num_requests", (double)n);
            cJSON_AddNumberToObject(js, "total_num_tokens", (double)total);
            cJSON_AddNumberToObject(js, "requests_per_second", (double)n / el);
            cJSON_AddNumberToObject(js, "tokens_per_second", (double)total / el);
            cJSON_AddNumberToObject(js, "output_tokens_per_second", (double)output_tokens / el);
        }
        free(lat);
    } else {
        int32_t iters = o.num_iters_warmup + o.num_iters;
        double *lat = calloc((size_t)o.num_iters, sizeof *lat);
        double *tpot = calloc((size_t)o.num_iters, sizeof *tpot);
        bw_probe bw = {0};
        if (o.bandwidth_bound &&
            bw_probe_init(&bw, (double)pagoda_engine_weight_bytes_per_step(e)) != 0)
            rc = 1;
        for (int32_t it = 0; lat && tpot && it < iters && rc == 0; it++) {
            bool measured = it >= o.num_iters_warmup;
            if (it > 0) { /* fresh prompts: an iteration never prefills from the prefix cache */
                pg_bench_requests_free(reqs, n);
                reqs = NULL;
                if (make_requests(&rc_, n, &rng, &o, &reqs) != PAGODA_OK) {
                    fprintf(stderr, "pagoda bench latency: %s\n", pagoda_last_error());
                    rc = 1;
                    break;
                }
            }
            if (it == o.num_iters_warmup) {
                pagoda_engine_get_stats(e, &spec0);
                spec_t0 = pg_bench_now();
            }
            double decode_s = 0;
            double el = run_batch(e, reqs, n, o.temperature, NULL, &decode_s,
                                  measured && bw.buf ? &bw : NULL);
            if (el < 0) {
                fprintf(stderr, "pagoda bench latency: %s\n", pagoda_last_error());
                rc = 1;
            } else if (measured) {
                lat[it - o.num_iters_warmup] = el;
                tpot[it - o.num_iters_warmup] =
                    o.output_len > 1 ? 1000.0 * decode_s / (o.output_len - 1) : 0;
            }
        }
        if (rc == 0 && bw.buf) bw_report(&bw, bw.iter, js);
        bw_probe_free(&bw);
        if (rc == 0 && lat) {
            cJSON *arr = cJSON_AddArrayToObject(js, "latencies");
            for (int32_t i = 0; i < o.num_iters; i++)
                cJSON_AddItemToArray(arr, cJSON_CreateNumber(lat[i]));
            pg_bench_stat st; /* seconds in, milliseconds out: back to seconds */
            pg_bench_stat_compute(lat, (size_t)o.num_iters, PCTS, N_PCTS, &st);
            st.mean /= 1000.0;
            for (size_t i = 0; i < N_PCTS; i++)
                st.pct[i] /= 1000.0;
            printf("Avg latency: %.6f seconds\n", st.mean);
            cJSON *pj = cJSON_AddObjectToObject(js, "percentiles");
            for (size_t i = 0; i < N_PCTS; i++) {
                printf("%g%% percentile latency: %.6f seconds\n", PCTS[i], st.pct[i]);
                char key[16];
                snprintf(key, sizeof key, "%g", PCTS[i]);
                cJSON_AddNumberToObject(pj, key, st.pct[i]);
            }
            cJSON_AddNumberToObject(js, "avg_latency", st.mean);
            /* decode time per output token after the batch's last first token */
            double mt = pg_bench_median(tpot, o.num_iters);
            printf("Median TPOT: %.3f ms (decode after every first token / (output_len - 1))\n",
                   mt);
            cJSON_AddNumberToObject(js, "median_tpot_ms", mt);
        }
        free(lat);
        free(tpot);
    }
    pagoda_stats spec1;
    pagoda_engine_get_stats(e, &spec1);
    if (rc == 0 && latency) { /* 0 unless prompts repeat (they do not: see the loop) */
        uint64_t hit = spec1.prefix_cache_hits - spec0.prefix_cache_hits;
        cJSON_AddNumberToObject(js, "prefix_cache_hit_tokens", (double)hit);
        if (hit)
            printf("Prefix cache: %llu prompt tokens of the measured iterations were served from "
                   "the cache (not prefilled)\n",
                   (unsigned long long)hit);
    }
    char line[512];
    if (rc == 0 &&
        pg_metrics_spec_line(&spec0, &spec1, pg_bench_now() - spec_t0, line, sizeof line)) {
        printf("%s\n", line);
        uint64_t d = spec1.spec_num_draft_tokens - spec0.spec_num_draft_tokens;
        uint64_t a = spec1.spec_num_accepted_tokens - spec0.spec_num_accepted_tokens;
        cJSON_AddNumberToObject(js, "spec_decode_draft_tokens", (double)d);
        cJSON_AddNumberToObject(js, "spec_decode_accepted_tokens", (double)a);
        cJSON_AddNumberToObject(js, "spec_decode_mean_acceptance_length",
                                1.0 + (double)a /
                                          (double)(spec1.spec_num_drafts - spec0.spec_num_drafts));
    }
    if (rc == 0 && o.output_json) rc = write_json(o.output_json, js);
    cJSON_Delete(js);
    pg_bench_requests_free(reqs, n);
    pagoda_engine_free(e);
    return rc;
}

int pg_cmd_bench_throughput(int argc, char **argv) {
    return offline(argc, argv, false);
}

int pg_cmd_bench_latency(int argc, char **argv) {
    return offline(argc, argv, true);
}
