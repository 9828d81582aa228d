/* `pagoda serve MODEL`: the OpenAI-compatible HTTP server (src/server/). */
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "cli/commands.h"
#include "engine/kv_cache_spec.h"
#include "pagoda.h"
#include "server/server.h"

static void serve_usage(FILE *f) {
    fprintf(
        f,
        "usage: pagoda serve MODEL [options]\n"
        "  MODEL                        HF model directory, GGUF file or HF repo id (local cache)\n"
        "server:\n"
        "  --host ADDR                  address to bind (default 127.0.0.1; 0.0.0.0 = all)\n"
        "  --port N                     TCP port (default 8000; 0 = pick a free one and print it)\n"
        "  --api-key KEY                require 'Authorization: Bearer KEY' on /v1/*, /tokenize,\n"
        "                               /detokenize (default: env PAGODA_API_KEY, else none)\n"
        "  --served-model-name NAME     model name in the API (default: MODEL's base name)\n"
        "  --chat-template FILE         Jinja chat template overriding the model's\n"
        "  --max-queue N                requests allowed to wait beyond --max-num-seqs; more\n"
        "                               get 503 + Retry-After (default 1024)\n"
        "  --max-request-bytes SIZE     largest request body (default 16MiB; larger: 413)\n"
        "  --request-timeout S          a request's headers + body must arrive within S seconds,\n"
        "                               and a client reading nothing of a response for S seconds\n"
        "                               is dropped (default 30)\n"
        "  --keep-alive-timeout S       close idle kept-alive connections after S s (default 5)\n"
        "  --max-connections N          open connections (default 4096, lowered to fit\n"
        "                               `ulimit -n`)\n"
        "  --max-connections-per-ip N   open connections per client address (default: no limit)\n"
        "  --max-stream-buffer SIZE     output a streaming client may leave unread before its\n"
        "                               request is aborted (default 4MiB)\n"
        "engine:\n"
        "  --max-model-len N            context length (default: the model's)\n"
        "  --max-num-seqs N             requests per step (default 256)\n"
        "  --max-num-batched-tokens N   tokens per step (default 4096)\n"
        "  --kv-cache-memory SIZE       KV cache size, e.g. 4GiB (default: see docs)\n"
        "  --kv-cache-dtype auto|bf16|f32\n"
        "  --block-size N               tokens per KV block\n"
        "  --no-prefix-caching          disable prefix caching\n"
        "  --threads N                  compute threads (default: one per physical core)\n"
        "  --quantization w8a8|w4a8     quantize F32/F16/BF16 linear weights at load\n"
        "  --quant-group-size N         scale group for --quantization (0 = per channel)\n"
        "  --seed N                     base seed for requests without one\n");
}

static int parse_int(const char *opt, const char *v, long lo, long hi, long *out) {
    char *end = NULL;
    errno = 0;
    long x = strtol(v, &end, 10);
    if (errno || !*v || *end || x < lo || x > hi) {
        fprintf(stderr, "pagoda serve: %s: '%s' is not an integer in [%ld, %ld]\n", opt, v, lo, hi);
        return 2;
    }
    *out = x;
    return 0;
}

static char *read_file(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 1 << 14, n = 0, r;
    char *b = malloc(cap);
    while (b && (r = fread(b + n, 1, cap - n - 1, f)) > 0) {
        n += r;
        if (n + 1 == cap) {
            char *nb = realloc(b, cap *= 2);
            if (!nb) {
                free(b);
                b = NULL;
            }
            b = nb;
        }
    }
    fclose(f);
    if (b) b[n] = 0;
    return b;
}

int pg_cmd_serve(int argc, char **argv) {
    const char *model = NULL, *tmpl_file = NULL;
    pg_server_options so = {0};
    so.host = "127.0.0.1";
    so.port = 8000;
    so.max_queue = -1;
    so.api_key = getenv("PAGODA_API_KEY");
    pagoda_engine_options eo;
    pagoda_engine_options_default(&eo);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        long x = 0;
        int rc = 0;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            serve_usage(stdout);
            return 0;
        } else if (!strcmp(a, "--no-prefix-caching")) {
            eo.enable_prefix_caching = false;
            continue;
        } else if (a[0] != '-') {
            if (model) {
                fprintf(stderr, "pagoda serve: unexpected argument '%s'\n", a);
                return 2;
            }
            model = a;
            continue;
        }
        if (!v) {
            fprintf(stderr, "pagoda serve: %s needs a value\n", a);
            serve_usage(stderr);
            return 2;
        }
        i++;
        if (!strcmp(a, "--host"))
            so.host = v;
        else if (!strcmp(a, "--port"))
            rc = parse_int(a, v, 0, 65535, &x), so.port = (int)x;
        else if (!strcmp(a, "--api-key"))
            so.api_key = v;
        else if (!strcmp(a, "--served-model-name"))
            so.served_model_name = v;
        else if (!strcmp(a, "--chat-template"))
            tmpl_file = v;
        else if (!strcmp(a, "--max-queue"))
            rc = parse_int(a, v, 0, INT_MAX, &x), so.max_queue = (int)x;
        else if (!strcmp(a, "--request-timeout"))
            rc = parse_int(a, v, 1, 1000000, &x), so.request_timeout = (int)x;
        else if (!strcmp(a, "--keep-alive-timeout"))
            rc = parse_int(a, v, 1, 1000000, &x), so.keepalive_timeout = (int)x;
        else if (!strcmp(a, "--max-connections"))
            rc = parse_int(a, v, 1, 1000000, &x), so.max_connections = (int)x;
        else if (!strcmp(a, "--max-connections-per-ip"))
            rc = parse_int(a, v, 0, 1000000, &x), so.max_connections_per_ip = (int)x;
        else if (!strcmp(a, "--max-stream-buffer")) {
            uint64_t b = 0;
            if (pg_parse_size(v, &b) || b == 0) {
                fprintf(stderr, "pagoda serve: --max-stream-buffer: %s\n", pg_last_error());
                return 2;
            }
            so.max_stream_buffer = (size_t)b;
        } else if (!strcmp(a, "--max-request-bytes")) {
            uint64_t b = 0;
            if (pg_parse_size(v, &b) || b == 0) {
                fprintf(stderr, "pagoda serve: --max-request-bytes: %s\n", pg_last_error());
                return 2;
            }
            so.max_body_bytes = (size_t)b;
        } else if (!strcmp(a, "--max-model-len"))
            rc = parse_int(a, v, 1, INT_MAX, &x), eo.max_model_len = (int32_t)x;
        else if (!strcmp(a, "--max-num-seqs"))
            rc = parse_int(a, v, 1, INT_MAX, &x), eo.max_num_seqs = (int32_t)x;
        else if (!strcmp(a, "--max-num-batched-tokens"))
            rc = parse_int(a, v, 1, INT_MAX, &x), eo.max_num_batched_tokens = (int32_t)x;
        else if (!strcmp(a, "--block-size"))
            rc = parse_int(a, v, 1, 1 << 20, &x), eo.block_size = (int32_t)x;
        else if (!strcmp(a, "--threads"))
            rc = parse_int(a, v, 0, 4096, &x), eo.num_threads = (int32_t)x;
        else if (!strcmp(a, "--quant-group-size"))
            rc = parse_int(a, v, 0, 1 << 20, &x), eo.quant_group_size = (int32_t)x;
        else if (!strcmp(a, "--quantization")) {
            if (!strcmp(v, "w8a8"))
                eo.quantization = 8;
            else if (!strcmp(v, "w4a8"))
                eo.quantization = 4;
            else if (strcmp(v, "none")) {
                fprintf(stderr, "pagoda serve: --quantization: '%s' is not w8a8, w4a8 or none\n",
                        v);
                return 2;
            }
        } else if (!strcmp(a, "--seed"))
            rc = parse_int(a, v, 0, LONG_MAX, &x), eo.seed = (uint64_t)x;
        else if (!strcmp(a, "--kv-cache-memory")) {
            if (pg_parse_size(v, &eo.kv_cache_memory)) {
                fprintf(stderr, "pagoda serve: --kv-cache-memory: %s\n", pg_last_error());
                return 2;
            }
        } else if (!strcmp(a, "--kv-cache-dtype")) {
            if (!strcmp(v, "auto"))
                eo.kv_cache_dtype = PAGODA_KV_AUTO;
            else if (!strcmp(v, "bf16"))
                eo.kv_cache_dtype = PAGODA_KV_BF16;
            else if (!strcmp(v, "f32"))
                eo.kv_cache_dtype = PAGODA_KV_F32;
            else {
                fprintf(stderr, "pagoda serve: --kv-cache-dtype: '%s' is not auto, bf16 or f32\n",
                        v);
                return 2;
            }
        } else {
            fprintf(stderr, "pagoda serve: unknown option '%s'\n", a);
            serve_usage(stderr);
            return 2;
        }
        if (rc) return rc;
    }
    if (!model) {
        fprintf(stderr, "pagoda serve: MODEL is required\n");
        serve_usage(stderr);
        return 2;
    }
    char *tmpl = NULL;
    if (tmpl_file && !(tmpl = read_file(tmpl_file))) {
        fprintf(stderr, "pagoda serve: --chat-template: cannot read '%s': %s\n", tmpl_file,
                strerror(errno));
        return 1;
    }
    so.chat_template = tmpl;
    so.max_num_seqs = eo.max_num_seqs;

    /* Block the stop signals in every thread; the main thread waits for them. */
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);
    signal(SIGPIPE, SIG_IGN);

    pagoda_engine *e = NULL;
    if (pagoda_engine_create(model, &eo, &e) != PAGODA_OK) {
        fprintf(stderr, "pagoda serve: %s\n", pagoda_last_error());
        free(tmpl);
        return 1;
    }
    pg_server *srv = NULL;
    if (pg_server_start(e, &so, &srv) != PAGODA_OK) {
        fprintf(stderr, "pagoda serve: %s\n", pagoda_last_error());
        pagoda_engine_free(e);
        free(tmpl);
        return 1;
    }
    const char *name = so.served_model_name ? so.served_model_name : pagoda_engine_model_name(e);
    const char *shown =
        strchr(so.host, ':') ? "[::1]" : (!strcmp(so.host, "0.0.0.0") ? "127.0.0.1" : so.host);
    int port = pg_server_port(srv);
    printf("pagoda serve: %s (max_model_len %d) listening on http://%s:%d\n", name,
           pagoda_engine_max_model_len(e), shown, port);
    printf("PORT=%d\n", port);
    printf("try:\n  curl http://%s:%d/v1/completions -H 'Content-Type: application/json' %s%s%s"
           "-d '{\"model\": \"%s\", \"prompt\": \"Once upon a time\", \"max_tokens\": 32}'\n",
           shown, port, so.api_key ? "-H 'Authorization: Bearer " : "",
           so.api_key ? so.api_key : "", so.api_key ? "' " : "", name);
    fflush(stdout);

    int sig = 0;
    sigwait(&sigs, &sig);
    PG_INFO("serve: %s received, shutting down", sig == SIGINT ? "SIGINT" : "SIGTERM");
    pg_server_stop(srv);
    pagoda_engine_free(e);
    free(tmpl);
    return 0;
}
