/* `pagoda bench serve`: online-serving benchmark client for any
 * OpenAI-compatible server, with vLLM's metric definitions and output
 * (src/bench/bench_serve.h does the work; this file parses options). */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/status.h"
#include "cli/args.h"
#include "cli/commands.h"
#include "bench/bench_serve.h"
#include "bench/bench_tokenizer.h"
#include "tokenizer/tokenizer.h"

/* ---- options ---- */

static void usage(FILE *f) {
    fprintf(f,
            "usage: pagoda bench serve [options]\n"
            "\n"
            "Benchmarks a running OpenAI-compatible server (pagoda, vLLM, llama.cpp's\n"
            "llama-server, ...) with streaming requests, and reports vLLM's serving metrics\n"
            "(TTFT, TPOT, ITL, E2EL, throughput, goodput) in vLLM's format.\n"
            "\n"
            "server:\n"
            "  --base-url URL            server address (default http://127.0.0.1:8000;\n"
            "                            --host H / --port P build it too)\n"
            "  --endpoint PATH           /v1/completions (default) or /v1/chat/completions\n"
            "  --model NAME              model name sent (default: first of GET /v1/models)\n"
            "  --api-key KEY             bearer token (default: $OPENAI_API_KEY)\n"
            "  --ready-check-timeout-sec S  retry the first prompt until it succeeds, S seconds\n"
            "                            (default 600; 0 skips the check)\n"
            "  --request-timeout S       per-request timeout, seconds (default 21600)\n"
            "workload (--dataset random, vLLM's definition):\n"
            "  --tokenizer PATH          model dir / tokenizer.json dir / GGUF used to build\n"
            "                            prompts and count output tokens (default: --model if\n"
            "                            that is a local path)\n"
            "  --num-prompts N           number of requests (default 1000)\n"
            "  --random-input-len N      prompt tokens (default 1024)\n"
            "  --random-output-len N     max_tokens (default 128)\n"
            "  --random-range-ratio R    lengths uniform in [L(1-R), L(1+R)] (default 0)\n"
            "  --random-prefix-len N     shared prefix tokens before every prompt (default 0)\n"
            "  --prompt-as-ids           send prompts as token-id lists (/v1/completions)\n"
            "  --vocab-size N            vocabulary for token-id prompts without --tokenizer\n"
            "  --ignore-eos / --no-ignore-eos  send ignore_eos (default on, as vLLM for random)\n"
            "  --seed N                  seed of prompts and arrivals (default 0)\n"
            "traffic:\n"
            "  --request-rate R          requests/s, or inf (default inf: all at once)\n"
            "  --burstiness B            gamma shape of inter-arrival gaps (default 1: Poisson)\n"
            "  --max-concurrency N       cap on requests in flight (default none)\n"
            "report:\n"
            "  --percentiles LIST        e.g. 50,90,99 (default 99; alias --metric-percentiles)\n"
            "  --percentile-metrics LIST subset of ttft,tpot,itl,e2el (default all four)\n"
            "  --goodput KEY:MS ...      SLOs for goodput, KEY ttft, tpot or e2el\n"
            "  --output-json FILE        write vLLM's result JSON\n"
            "  --save-detailed           also put the generated texts in the JSON\n"
            "  --label NAME              label stored in the JSON\n"
            "  --disable-tqdm            no progress bar (it is drawn only on a terminal)\n");
}

static int bad(const char *fmt, const char *a, const char *b) {
    fprintf(stderr, "pagoda bench serve: ");
    fprintf(stderr, fmt, a, b);
    fprintf(stderr, " (see pagoda bench serve --help)\n");
    return 2;
}

static bool parse_i64(const char *s, long long lo, long long hi, long long *v) {
    return pg_args_long(s, lo, hi, v);
}

/* A finite number, or "inf" when allow_inf (--request-rate). */
static bool parse_f64(const char *s, double *v, bool allow_inf) {
    if (allow_inf && (!strcmp(s, "inf") || !strcmp(s, "Inf") || !strcmp(s, "INF"))) {
        *v = INFINITY;
        return true;
    }
    return pg_args_double(s, v);
}

static bool is_dir_or_file(const char *p) {
    struct stat sb;
    return p && stat(p, &sb) == 0;
}

static int cmd_serve(int argc, char **argv) {
    pg_bench_serve_opts o;
    pg_bench_serve_defaults(&o);
    o.client.api_key = getenv("OPENAI_API_KEY");
    o.client.progress = isatty(fileno(stderr));
    const char *tokenizer_path = NULL, *host = NULL, *port = NULL;
    bool have_base = false, have_seen_pct = false;
    double request_timeout = 0;

    for (int i = 1; i < argc; i++) {
        char *a = argv[i];
        pg_clear_error();
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return 0;
        }
        if (strncmp(a, "--", 2) != 0) return bad("unexpected argument '%s'%s", a, "");
        /* --opt=value or --opt value */
        char name[64];
        const char *val = NULL;
        const char *eq = strchr(a, '=');
        if (eq) {
            snprintf(name, sizeof name, "%.*s", (int)(eq - a), a);
            val = eq + 1;
        } else {
            snprintf(name, sizeof name, "%s", a);
        }
        /* flags */
        static const char *const FLAGS[] = {"--prompt-as-ids", "--ignore-eos", "--no-ignore-eos",
                                            "--save-detailed", "--disable-tqdm"};
        for (size_t k = 0; k < sizeof FLAGS / sizeof FLAGS[0]; k++)
            if (eq && !strcmp(name, FLAGS[k])) return bad("%s takes no value%s", name, "");
        if (!strcmp(name, "--prompt-as-ids")) {
            o.client.prompt_as_ids = true;
            continue;
        }
        if (!strcmp(name, "--ignore-eos")) {
            o.client.ignore_eos = true;
            continue;
        }
        if (!strcmp(name, "--no-ignore-eos")) {
            o.client.ignore_eos = false;
            continue;
        }
        if (!strcmp(name, "--save-detailed")) {
            o.save_detailed = true;
            continue;
        }
        if (!strcmp(name, "--disable-tqdm")) {
            o.client.progress = false;
            continue;
        }
        if (!strcmp(name, "--goodput")) {
            int k = 0;
            if (val) {
                if (pg_bench_parse_slo(val, &o.slo) != PAGODA_OK) goto bad_value;
                k++;
            }
            while (i + 1 < argc && strncmp(argv[i + 1], "--", 2) != 0) {
                if (pg_bench_parse_slo(argv[++i], &o.slo) != PAGODA_OK) goto bad_value;
                k++;
            }
            if (!k) return bad("%s needs KEY:MS values%s", name, "");
            continue;
        }
        static const char *const VALUED[] = {"--base-url",
                                             "--host",
                                             "--port",
                                             "--endpoint",
                                             "--model",
                                             "--api-key",
                                             "--tokenizer",
                                             "--dataset",
                                             "--dataset-name",
                                             "--num-prompts",
                                             "--random-input-len",
                                             "--random-output-len",
                                             "--random-prefix-len",
                                             "--random-range-ratio",
                                             "--vocab-size",
                                             "--seed",
                                             "--request-rate",
                                             "--burstiness",
                                             "--max-concurrency",
                                             "--percentiles",
                                             "--metric-percentiles",
                                             "--percentile-metrics",
                                             "--output-json",
                                             "--label",
                                             "--ready-check-timeout-sec",
                                             "--request-timeout"};
        bool known = false;
        for (size_t k = 0; k < sizeof VALUED / sizeof VALUED[0]; k++)
            known |= !strcmp(name, VALUED[k]);
        if (!known) return bad("unknown option '%s'%s", name, "");
        if (!val) {
            if (i + 1 >= argc) return bad("option %s needs a value%s", name, "");
            val = argv[++i];
        }
        long long iv;
        double fv;
        if (!strcmp(name, "--base-url")) {
            if (strncmp(val, "http://", 7) && strncmp(val, "https://", 8))
                return bad("--base-url '%s': want http://HOST:PORT or https://...%s", val, "");
            o.client.base_url = val;
            have_base = true;
        } else if (!strcmp(name, "--host")) {
            if (!*val) goto bad_value;
            host = val;
        } else if (!strcmp(name, "--port")) {
            if (!parse_i64(val, 1, 65535, &iv)) goto bad_value;
            port = val;
        } else if (!strcmp(name, "--endpoint")) {
            if (val[0] != '/')
                return bad("--endpoint '%s': want a path such as /v1/completions%s", val, "");
            o.client.endpoint = val;
        } else if (!strcmp(name, "--model")) {
            o.client.model = val;
        } else if (!strcmp(name, "--api-key")) {
            o.client.api_key = val;
        } else if (!strcmp(name, "--tokenizer")) {
            tokenizer_path = val;
        } else if (!strcmp(name, "--dataset") || !strcmp(name, "--dataset-name")) {
            if (strcmp(val, "random") != 0)
                return bad("--dataset '%s': only 'random' is supported%s", val, "");
        } else if (!strcmp(name, "--num-prompts")) {
            if (!parse_i64(val, 1, 100000000, &iv)) goto bad_value;
            o.num_prompts = (size_t)iv;
        } else if (!strcmp(name, "--random-input-len")) {
            if (!parse_i64(val, 0, 1 << 24, &iv)) goto bad_value;
            o.random.input_len = (int32_t)iv;
        } else if (!strcmp(name, "--random-output-len")) {
            if (!parse_i64(val, 1, 1 << 24, &iv)) goto bad_value;
            o.random.output_len = (int32_t)iv;
        } else if (!strcmp(name, "--random-prefix-len")) {
            if (!parse_i64(val, 0, 1 << 24, &iv)) goto bad_value;
            o.random.prefix_len = (int32_t)iv;
        } else if (!strcmp(name, "--random-range-ratio")) {
            if (!parse_f64(val, &fv, false) || fv < 0 || fv >= 1) goto bad_value;
            o.random.range_ratio = fv;
        } else if (!strcmp(name, "--vocab-size")) {
            if (!parse_i64(val, 1, INT32_MAX, &iv)) goto bad_value;
            o.random.vocab_size = (int32_t)iv;
        } else if (!strcmp(name, "--seed")) {
            if (!parse_i64(val, 0, LLONG_MAX, &iv)) goto bad_value;
            o.seed = (uint64_t)iv;
        } else if (!strcmp(name, "--request-rate")) {
            if (!parse_f64(val, &fv, true) || !(fv > 0)) goto bad_value;
            o.request_rate = fv;
        } else if (!strcmp(name, "--burstiness")) {
            if (!parse_f64(val, &fv, false) || !(fv > 0)) goto bad_value;
            o.burstiness = fv;
        } else if (!strcmp(name, "--max-concurrency")) {
            if (!parse_i64(val, 1, 1000000, &iv)) goto bad_value;
            o.client.max_concurrency = (int)iv;
        } else if (!strcmp(name, "--percentiles") || !strcmp(name, "--metric-percentiles")) {
            if (pg_bench_parse_percentiles(val, o.percentiles, &o.n_percentiles) != PAGODA_OK)
                goto bad_value;
            have_seen_pct = true;
        } else if (!strcmp(name, "--percentile-metrics")) {
            if (pg_bench_parse_metric_names(val, &o.metrics) != PAGODA_OK) goto bad_value;
        } else if (!strcmp(name, "--output-json")) {
            o.output_json = val;
        } else if (!strcmp(name, "--label")) {
            o.label = val;
        } else if (!strcmp(name, "--ready-check-timeout-sec")) {
            if (!parse_f64(val, &fv, false) || fv < 0) goto bad_value;
            o.ready_check_timeout_s = fv;
        } else if (!strcmp(name, "--request-timeout")) {
            if (!parse_f64(val, &fv, false) || !(fv > 0)) goto bad_value;
            request_timeout = fv;
        } else {
            return bad("unknown option '%s'%s", name, "");
        }
        continue;
    bad_value:
        if (*pg_last_error()) {
            fprintf(stderr, "pagoda bench serve: %s\n", pg_last_error());
            return 2;
        }
        return bad("bad value '%s' for %s", val ? val : "", name);
    }
    (void)have_seen_pct;
    o.client.timeout_s = request_timeout;

    char base[512];
    if (!have_base && (host || port)) {
        snprintf(base, sizeof base, "http://%s:%s", host ? host : "127.0.0.1",
                 port ? port : "8000");
        o.client.base_url = base;
    }
    if (!tokenizer_path && is_dir_or_file(o.client.model)) tokenizer_path = o.client.model;

    /* a bad --output-json path fails now, not after every request ran */
    if (o.output_json && pg_args_check_writable("pagoda bench serve", o.output_json)) return 1;

    pg_tokenizer *tk = NULL;
    pg_bench_tokenizer bt;
    if (tokenizer_path) {
        if (pg_tokenizer_load(tokenizer_path, &tk) != PAGODA_OK) {
            fprintf(stderr, "pagoda bench serve: %s\n", pg_last_error());
            return 1;
        }
        bt = pg_bench_tokenizer_wrap(tk);
        o.tok = &bt;
        o.tokenizer_id = tokenizer_path;
    } else if (!o.client.prompt_as_ids) {
        fprintf(stderr, "pagoda bench serve: the random dataset needs --tokenizer PATH (or "
                        "--prompt-as-ids --vocab-size N to send token ids)\n");
        return 2;
    } else if (o.random.vocab_size <= 0) {
        fprintf(stderr, "pagoda bench serve: --prompt-as-ids without --tokenizer needs "
                        "--vocab-size N\n");
        return 2;
    }

    pg_bench_metrics m;
    pagoda_status st = pg_bench_serve(&o, stdout, &m);
    if (tk) pg_tokenizer_free(tk);
    if (st != PAGODA_OK) {
        fprintf(stderr, "pagoda bench serve: %s\n", pg_last_error());
        return st == PAGODA_ERR_INVALID_ARG ? 2 : 1;
    }
    return m.completed > 0 ? 0 : 1; /* every request failed: say so to scripts */
}

int pg_cmd_bench(int argc, char **argv) {
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
        FILE *f = argc < 2 ? stderr : stdout;
        fprintf(f, "usage: pagoda bench serve|throughput|latency|kernels|grammar|allreduce [options]\n\n"
                   "  serve        benchmark a running OpenAI-compatible server (vLLM's metrics)\n"
                   "  throughput   offline: all requests at once through the engine\n"
                   "  latency      offline: one batch run to completion, repeatedly\n"
                   "  kernels      kernel microbenchmarks: peaks, GEMM, attention\n"
                   "  grammar      structured-output token masks per request per step\n"
                   "  allreduce    tensor-parallel all-reduce latency (shared memory or MPI)\n\n"
                   "`pagoda bench <name> --help` lists the options.\n");
        return argc < 2 ? 2 : 0;
    }
    if (!strcmp(argv[1], "serve")) return cmd_serve(argc - 1, argv + 1);
    if (!strcmp(argv[1], "throughput")) return pg_cmd_bench_throughput(argc - 1, argv + 1);
    if (!strcmp(argv[1], "latency")) return pg_cmd_bench_latency(argc - 1, argv + 1);
    if (!strcmp(argv[1], "kernels")) return pg_cmd_bench_kernels(argc - 1, argv + 1);
    if (!strcmp(argv[1], "grammar")) return pg_cmd_bench_grammar(argc - 1, argv + 1);
    if (!strcmp(argv[1], "allreduce")) return pg_cmd_bench_allreduce(argc - 1, argv + 1);
    fprintf(stderr,
            "pagoda bench: unknown benchmark '%s' (available: serve, throughput, latency, "
            "kernels, grammar, allreduce)\n",
            argv[1]);
    return 2;
}
