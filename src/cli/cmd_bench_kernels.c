/* `pagoda bench kernels [MODEL]`: the kernel microbenchmarks (peaks, read
 * bandwidth, BF16 / W8A8 / W4A8 GEMM on the model's linear layers, paged
 * attention vs the reference) in one run; src/bench/kernels.h does the
 * work, this file parses options and writes the JSON. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/status.h"
#include "bench/kernels.h"
#include "cli/args.h"
#include "cli/commands.h"

static const char *const CMD = "pagoda bench kernels";

static void usage(FILE *f) {
    fputs("usage: pagoda bench kernels [MODEL] [options]\n"
          "\n"
          "Kernel microbenchmarks in one run, with the baselines they are compared to measured\n"
          "in the same run: BF16 / int8 / F32 FMA peaks and read bandwidth on every thread;\n"
          "the GEMMs of MODEL's linear layers (qkv fused, o, gate+up SwiGLU, down, lm_head)\n"
          "as the forward runs them, at each M: ms, GFLOP/s, % of peak, GB/s, % of read\n"
          "bandwidth; paged attention decode/prefill against the reference kernel.\n"
          "MODEL (HF directory, config.json, GGUF or org/name in the HF cache) gives the\n"
          "shapes only, weights are random; default: the Llama-3.2-1B shape.\n"
          "\n"
          "  --kernels LIST            gemm,qgemm,attention (default all three), or also quk:\n"
          "                            the quantized microkernels alone on an L1 tile, % of\n"
          "                            the int8 peak per CPU second\n"
          "  --m LIST                  GEMM rows (tokens of a step), default 512,32,1;\n"
          "                            repeated values run once\n"
          "  --dtype D                 GEMM weights: bfloat16 (default) or float32\n"
          "  --quantization Q          qgemm scheme: w8a8 (default), w4a8, or mxfp4 (MXFP4\n"
          "                            layers beside W4A8 group 32 with activation groups,\n"
          "                            with the time ratio)\n"
          "  --quant-group-size G      qgemm scale group: 0 = per channel (default), 32, 64, ...\n"
          "  --act-group               qgemm activation scales per token and group (the GGUF\n"
          "                            Q8_0 / Q4_0 path; needs a group size)\n"
          "  --context N               attention context in tokens (default 2048)\n"
          "  --block-size N            KV block size, a multiple of 16 (default 16)\n"
          "  --kv-cache-dtype LIST     bfloat16 (default), float32, or both\n"
          "  --threads N               pool threads (default: one per physical core)\n"
          "  --rounds R                rounds, medians reported (default 3, at most 15)\n"
          "  --quick                   smoke run: 64 MiB of streamed copies, no lm_head,\n"
          "                            attention decode b1 and the longest prefill only\n"
          "  --output-json FILE        write the results as JSON\n",
          f);
}

/* "a,b,c" against names[]: bits (1 << index); false on an unknown or empty item. */
static bool parse_names(const char *v, const char *const *names, int n, unsigned *bits) {
    *bits = 0;
    const char *p = v;
    for (;;) {
        size_t len = strcspn(p, ",");
        int k = 0;
        while (k < n && !(strlen(names[k]) == len && !strncmp(p, names[k], len)))
            k++;
        if (k == n) return false;
        *bits |= 1u << k;
        if (!p[len]) return true;
        p += len + 1;
    }
}

static bool parse_m_list(const char *v, pg_bench_kernels_opts *o) {
    char buf[256];
    if (strlen(v) >= sizeof buf) return false;
    snprintf(buf, sizeof buf, "%s", v);
    o->n_m = 0;
    char *save = NULL;
    for (char *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        long long m;
        if (!pg_args_long(t, 1, PG_BENCH_MAX_GEMM_M, &m)) return false;
        bool seen = false; /* "1,1,1" runs M = 1 once: keep the first-seen order */
        for (int k = 0; k < o->n_m; k++)
            seen |= o->m[k] == m;
        if (seen) continue;
        if (o->n_m == PG_BENCH_MAX_M) return false;
        o->m[o->n_m++] = m;
    }
    return o->n_m > 0 && v[strlen(v) - 1] != ',' && v[0] != ',' && !strstr(v, ",,");
}

/* Returns 0, 2 (usage error, printed) or -1 (--help printed). */
static int parse(int argc, char **argv, pg_bench_kernels_opts *o, const char **model,
                 const char **json_path) {
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return -1;
        }
        if (!pg_args_is_option(a)) {
            if (*model) return pg_args_unexpected(CMD, a);
            *model = a;
            continue;
        }
        if (!strcmp(a, "--quick")) {
            o->quick = true;
            continue;
        }
        if (!strcmp(a, "--act-group")) {
            o->act_group = true;
            continue;
        }
        static const char *const WITH_VALUE[] = {
            "--kernels",          "--m",       "--dtype",      "--quantization",
            "--quant-group-size", "--context", "--block-size", "--kv-cache-dtype",
            "--threads",          "--rounds",  "--output-json"};
        const char *v = pg_args_valued(CMD, argc, argv, &i, WITH_VALUE,
                                       sizeof WITH_VALUE / sizeof WITH_VALUE[0]);
        if (!v) return 2;
        bool ok = true;
        const char *want = NULL;
        long long n = 0;
        unsigned bits = 0;
        if (!strcmp(a, "--kernels")) {
            static const char *const K[] = {"gemm", "qgemm", "attention", "quk"};
            ok = parse_names(v, K, 4, &o->kernels), want = "a list of gemm, qgemm, attention, quk";
        } else if (!strcmp(a, "--m")) {
            ok = parse_m_list(v, o), want = "a list of up to 8 distinct integers in [1, 4096]";
        } else if (!strcmp(a, "--dtype")) {
            static const char *const D[] = {"bfloat16", "bf16", "float32", "f32", "float"};
            ok = parse_names(v, D, 5, &bits) && !(bits & (bits - 1));
            o->gemm_dtype = bits >= 4 ? PG_F32 : PG_BF16, want = "bfloat16 or float32";
        } else if (!strcmp(a, "--quantization")) {
            ok = !strcmp(v, "w8a8") || !strcmp(v, "w4a8") || !strcmp(v, "mxfp4");
            want = "w8a8, w4a8 or mxfp4";
            o->mxfp4 = !strcmp(v, "mxfp4");
            o->quant_bits = !strcmp(v, "w8a8") ? 8 : 4;
            if (o->mxfp4) o->quant_group = 32, o->act_group = true;
        } else if (!strcmp(a, "--quant-group-size")) {
            ok = pg_args_long(v, 0, 1 << 20, &n) && n % 32 == 0, want = "0 or a multiple of 32";
            o->quant_group = n;
        } else if (!strcmp(a, "--context")) {
            ok = pg_args_long(v, 1, 1 << 20, &n), want = "an integer in [1, 2^20]";
            o->context = (int)n;
        } else if (!strcmp(a, "--block-size")) {
            ok = pg_args_long(v, 16, 1024, &n) && n % 16 == 0;
            want = "a multiple of 16 in [16, 1024]";
            o->block_size = (int)n;
        } else if (!strcmp(a, "--kv-cache-dtype")) {
            static const char *const D[] = {"bfloat16", "bf16", "float32", "f32", "both"};
            ok = parse_names(v, D, 5, &bits), want = "bfloat16, float32 or both (a list)";
            o->n_kv_dtypes = 0;
            if (bits & (3 | 16)) o->kv_dtypes[o->n_kv_dtypes++] = PG_BF16;
            if (bits & (12 | 16)) o->kv_dtypes[o->n_kv_dtypes++] = PG_F32;
        } else if (!strcmp(a, "--threads")) {
            ok = pg_args_long(v, 1, 1024, &n), want = "an integer in [1, 1024]";
            o->threads = (int)n;
        } else if (!strcmp(a, "--rounds")) {
            ok = pg_args_long(v, 1, PG_BENCH_MAX_ROUNDS, &n), want = "an integer in [1, 15]";
            o->rounds = (int)n;
        } else if (!strcmp(a, "--output-json")) {
            *json_path = v;
        }
        if (!ok) return pg_args_bad_value(CMD, a, v, want);
    }
    return 0;
}

int pg_cmd_bench_kernels(int argc, char **argv) {
    pg_bench_kernels_opts o;
    pg_bench_kernels_defaults(&o);
    const char *model = NULL, *json_path = NULL;
    int e = parse(argc, argv, &o, &model, &json_path);
    if (e) return e < 0 ? 0 : e;
    /* a model or output file that cannot be used is a runtime error (exit
     * 1, as in generate and bench latency); bad options exit 2 */
    if (model && pg_bench_shape_from_model(model, &o.shape) != PAGODA_OK) {
        fprintf(stderr, "%s: %s\n", CMD, pg_last_error());
        return 1;
    }
    /* open the JSON file first: a bad path fails before minutes of measuring */
    FILE *jf = json_path ? fopen(json_path, "w") : NULL;
    if (json_path && !jf) {
        fprintf(stderr, "%s: cannot write %s: %s\n", CMD, json_path, strerror(errno));
        return 1;
    }
    cJSON *json = NULL;
    pagoda_status st = pg_bench_kernels_run(&o, stdout, jf ? &json : NULL);
    if (st != PAGODA_OK) {
        /* src/bench/kernels.c's own messages start with "bench kernels: " */
        const char *msg = pg_last_error();
        if (!strncmp(msg, "bench kernels: ", 15))
            fprintf(stderr, "pagoda %s\n", msg);
        else
            fprintf(stderr, "%s: %s\n", CMD, msg);
        if (jf) fclose(jf);
        return st == PAGODA_ERR_INVALID_ARG ? 2 : 1;
    }
    int rc = 0;
    if (jf) {
        char *text = cJSON_Print(json);
        bool ok = text && fputs(text, jf) >= 0 && fputc('\n', jf) != EOF;
        if (fclose(jf) != 0 || !ok) {
            fprintf(stderr, "%s: cannot write %s\n", CMD, json_path);
            rc = 1;
        }
        free(text);
        cJSON_Delete(json);
    }
    return rc;
}
