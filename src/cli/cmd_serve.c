/* `pagoda serve MODEL [MODEL ...]`: the OpenAI-compatible HTTP server
 * (src/server/), one engine per model (e.g. a chat model and a Whisper
 * model), stepped by one engine thread. */
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/log.h"
#include "cli/args.h"
#include "cli/commands.h"
#include "cli/engine_args.h"
#include "engine/kv_cache_spec.h"
#include "kernels/env_report.h"
#include "model/hub.h"
#include "model/source.h"
#include "pagoda.h"
#include "server/output_parser.h"
#include "server/server.h"

static void serve_usage(FILE *f) {
    fprintf(
        f,
        "usage: pagoda serve MODEL [MODEL ...] [options]\n"
        "  MODEL                        HF model directory, GGUF file or hub repo id\n"
        "                               org/name[:QUANT] (HF cache, downloaded if missing);\n"
        "                               several: one server for all (e.g. a chat model and a\n"
        "                               Whisper model), requests routed by their 'model'; the\n"
        "                               engine options apply to each model (--kv-cache-memory is\n"
        "                               per model); --tokenizer goes to the models that have no\n"
        "                               tokenizer of their own\n"
        "server:\n"
        "  --host ADDR                  address to bind (default 127.0.0.1; 0.0.0.0 = all)\n"
        "  --port N                     TCP port (default 8000; 0 = pick a free one and print it)\n"
        "  --api-key KEY                require 'Authorization: Bearer KEY' on /v1/*, /tokenize,\n"
        "                               /detokenize (default: env PAGODA_API_KEY, else none)\n"
        "  --served-model-name NAME     model name in the API (default: MODEL's base name; one\n"
        "                               MODEL only)\n"
        "  --chat-template FILE         Jinja chat template overriding the model's\n"
        "  --enable-auto-tool-choice    parse tool calls for tool_choice \"auto\" (the default\n"
        "                               when a chat has tools; without it: 400, as vLLM)\n"
        "  --tool-call-parser NAME      hermes | llama3_json | mistral | harmony (default: from\n"
        "                               the chat template: <tool_call>, Llama 3.1 JSON,\n"
        "                               [TOOL_CALLS]; gpt-oss: harmony)\n"
        "  --reasoning-parser NAME      qwen3 | deepseek_r1: <think>...</think> becomes\n"
        "                               reasoning_content (default: qwen3 when the template\n"
        "                               writes <think>)\n"
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
        "  --max-audio-bytes SIZE       largest audio file /v1/audio/* take (default 25MiB;\n"
        "                               larger: 413)\n"
        "  --max-audio-seconds S        longest audio /v1/audio/* take, decoded (default 1800;\n"
        "                               longer: 400)\n"
        "  --shutdown-timeout S         on SIGTERM/SIGINT: stop accepting, let requests in\n"
        "                               flight finish for up to S seconds, then end them with\n"
        "                               finish_reason \"abort\" (default 0, as vLLM: at once;\n"
        "                               a second signal cuts the wait short)\n"
        "  --no-webui                   do not serve the web chat page at / (default: served;\n"
        "                               open http://HOST:PORT/ in a browser)\n"
        "  --seed N                     base seed for requests without one\n"
        "\n" PG_ENGINE_ARGS_HELP);
}

#define CMD "pagoda serve"

static int parse_int(const char *opt, const char *v, long lo, long hi, long *out) {
    long long x;
    if (!pg_args_long(v, lo, hi, &x)) {
        char want[96];
        snprintf(want, sizeof want, "an integer in [%ld, %ld]", lo, hi);
        return pg_args_bad_value(CMD, opt, v, want);
    }
    *out = (long)x;
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

/* True when MODEL brings its own tokenizer: a GGUF file (its vocab) or a
 * directory with tokenizer.json. */
static bool has_own_tokenizer(const char *model, const pagoda_engine_options *eo) {
    char path[4096], spec[1024];
    bool gguf = false;
    if (pg_hub_fold_options(model, eo->revision, eo->gguf_file, spec, sizeof spec) != PAGODA_OK ||
        pg_model_resolve(spec, path, sizeof path, &gguf) != PAGODA_OK) {
        pg_clear_error();
        return true; /* let the engine report the model */
    }
    if (gguf) return true;
    size_t n = strlen(path);
    if (n + 16 > sizeof path) return true;
    snprintf(path + n, sizeof path - n, "/tokenizer.json");
    return access(path, R_OK) == 0;
}

#define MAX_MODELS 16

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Wait (at most until `deadline`, monotonic seconds) for the server's
 * requests in flight to end; false when a stop signal came first. */
static bool wait_idle(pg_server *srv, const sigset_t *sigs, double deadline) {
    while (pg_server_active(srv) > 0 && now_s() < deadline) {
        struct timespec slice = {0, 50 * 1000000L};
        if (sigtimedwait(sigs, NULL, &slice) > 0) return false;
    }
    return true;
}

/* Graceful shutdown on the first SIGTERM/SIGINT (issue 20; vLLM's
 * --shutdown-timeout): stop accepting, let requests in flight finish for
 * up to `timeout` s (a second signal ends the wait), then abort the rest
 * (finish_reason "abort", their responses completed) and give the
 * connections a few seconds to write those final events. */
static void drain(pg_server *srv, const sigset_t *sigs, int sig, double timeout) {
    pg_server_drain(srv);
    int64_t active = pg_server_active(srv);
    PG_INFO("serve: %s received: not accepting new requests; %lld in flight, waiting up to %g s "
            "for them (--shutdown-timeout)",
            sig == SIGINT ? "SIGINT" : "SIGTERM", (long long)active, timeout);
    double t0 = now_s();
    bool waited = active == 0 || wait_idle(srv, sigs, t0 + timeout);
    if (!waited) PG_INFO("serve: second stop signal: not waiting any longer");
    int64_t aborted = pg_server_abort_active(srv);
    if (aborted)
        PG_INFO("serve: %lld request%s still running after %.1f s: ended with finish_reason "
                "\"abort\"",
                (long long)aborted, aborted == 1 ? "" : "s", now_s() - t0);
    /* the final events are small; a client that does not read them within
     * this grace is cut off by pg_server_stop */
    if (!wait_idle(srv, sigs, now_s() + 5.0) || pg_server_active(srv) > 0)
        PG_WARN("serve: %lld request%s not answered in full; closing their connections",
                (long long)pg_server_active(srv), pg_server_active(srv) == 1 ? "" : "s");
}

int pg_cmd_serve(int argc, char **argv) {
    const char *models[MAX_MODELS];
    int n_models = 0;
    const char *tmpl_file = NULL;
    pg_server_options so = {0};
    double shutdown_timeout = 0; /* vLLM's default: abort in-flight requests at once */
    so.host = "127.0.0.1";
    so.port = 8000;
    so.max_queue = -1;
    so.api_key = getenv("PAGODA_API_KEY");
    pagoda_engine_options eo;
    pagoda_engine_options_default(&eo);
    static const char *const VALUED[] = {"--host",
                                         "--port",
                                         "--api-key",
                                         "--served-model-name",
                                         "--chat-template",
                                         "--max-queue",
                                         "--max-request-bytes",
                                         "--seed",
                                         "--request-timeout",
                                         "--keep-alive-timeout",
                                         "--max-connections",
                                         "--max-connections-per-ip",
                                         "--max-stream-buffer",
                                         "--max-audio-bytes",
                                         "--max-audio-seconds",
                                         "--tool-call-parser",
                                         "--reasoning-parser",
                                         "--shutdown-timeout"};
    for (int i = 1; i < argc; i++) {
        int e = pg_engine_args_parse(CMD, argc, argv, &i, &eo);
        if (e < 0) return 2;
        if (e > 0) continue;
        const char *a = argv[i];
        long x = 0;
        int rc = 0;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            serve_usage(stdout);
            return 0;
        }
        if (!pg_args_is_option(a)) {
            if (n_models == MAX_MODELS) {
                fprintf(stderr, "pagoda serve: at most %d models\n", MAX_MODELS);
                return 2;
            }
            models[n_models++] = a;
            continue;
        }
        if (!strcmp(a, "--enable-auto-tool-choice")) {
            so.enable_auto_tool_choice = true;
            continue;
        }
        if (!strcmp(a, "--no-webui")) {
            so.disable_webui = true;
            continue;
        }
        const char *v =
            pg_args_valued(CMD, argc, argv, &i, VALUED, sizeof VALUED / sizeof VALUED[0]);
        if (!v) return 2;
        if (!strcmp(a, "--host")) {
            if (!*v) return pg_args_bad_value(CMD, a, v, "an address such as 127.0.0.1");
            so.host = v;
        } else if (!strcmp(a, "--port"))
            rc = parse_int(a, v, 0, 65535, &x), so.port = (int)x;
        else if (!strcmp(a, "--api-key"))
            so.api_key = v;
        else if (!strcmp(a, "--served-model-name")) {
            if (!*v) return pg_args_bad_value(CMD, a, v, "a non-empty name");
            so.served_model_name = v;
        } else if (!strcmp(a, "--chat-template"))
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
                pg_clear_error();
                return pg_args_bad_value(CMD, a, v, "a positive size such as 4MiB");
            }
            so.max_stream_buffer = (size_t)b;
        } else if (!strcmp(a, "--max-request-bytes")) {
            uint64_t b = 0;
            if (pg_parse_size(v, &b) || b == 0) {
                pg_clear_error();
                return pg_args_bad_value(CMD, a, v, "a positive size such as 16MiB");
            }
            so.max_body_bytes = (size_t)b;
        } else if (!strcmp(a, "--max-audio-bytes")) {
            uint64_t b = 0;
            if (pg_parse_size(v, &b) || b == 0) {
                pg_clear_error();
                return pg_args_bad_value(CMD, a, v, "a positive size such as 25MiB");
            }
            so.max_audio_bytes = (size_t)b;
        } else if (!strcmp(a, "--max-audio-seconds")) {
            char *end = NULL;
            double sec = strtod(v, &end);
            if (!*v || *end || !(sec > 0) || !(sec <= 1e7))
                return pg_args_bad_value(CMD, a, v, "a number of seconds > 0");
            so.max_audio_seconds = sec;
        } else if (!strcmp(a, "--shutdown-timeout")) {
            char *end = NULL;
            double sec = strtod(v, &end);
            if (!*v || *end || !(sec >= 0) || !(sec <= 1e7))
                return pg_args_bad_value(CMD, a, v, "a number of seconds >= 0");
            shutdown_timeout = sec;
        } else if (!strcmp(a, "--tool-call-parser")) {
            pg_tool_format tf;
            if (!pg_tool_format_parse(v, &tf))
                return pg_args_bad_value(CMD, a, v, "hermes, llama3_json, mistral or harmony");
            so.tool_call_parser = v;
        } else if (!strcmp(a, "--reasoning-parser")) {
            pg_reasoning_format rf;
            if (!pg_reasoning_format_parse(v, &rf))
                return pg_args_bad_value(CMD, a, v, "qwen3 or deepseek_r1");
            so.reasoning_parser = v;
        } else if (!strcmp(a, "--seed"))
            rc = parse_int(a, v, 0, LONG_MAX, &x), eo.seed = (uint64_t)x;
        if (rc) return rc;
    }
    if (!n_models) {
        fprintf(stderr, "pagoda serve: MODEL is required\n");
        serve_usage(stderr);
        return 2;
    }
    if (n_models > 1 && so.served_model_name) {
        fprintf(stderr,
                "pagoda serve: --served-model-name names one model; with %d MODELs each is "
                "served under its directory or file base name\n",
                n_models);
        return 2;
    }
    if (pg_engine_args_check(CMD, &eo)) return 2;
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

    pagoda_engine *engines[MAX_MODELS] = {0};
    int rc = 0;
    for (int k = 0; k < n_models && !rc; k++) {
        pagoda_engine_options mo = eo;
        /* --threads configured the shared pool with the first model */
        if (k > 0) mo.num_threads = 0;
        /* one --tokenizer for several models: it is meant for those without
         * their own (a Whisper checkpoint without tokenizer.json) */
        if (n_models > 1 && mo.tokenizer && has_own_tokenizer(models[k], &mo)) {
            PG_INFO("serve: %s has its own tokenizer; --tokenizer is not applied to it", models[k]);
            mo.tokenizer = NULL;
        }
        if (pagoda_engine_create(models[k], &mo, &engines[k]) != PAGODA_OK) {
            fprintf(stderr, "pagoda serve: %s: %s\n", models[k], pagoda_last_error());
            rc = 1;
        }
    }
    if (!rc) { /* what in the environment costs speed, logged once for all models */
        uint64_t resident = 0;
        for (int k = 0; k < n_models; k++)
            resident += pagoda_engine_resident_bytes(engines[k]);
        pg_env_log_findings(resident, eo.speculative.method != PAGODA_SPEC_NONE);
    }
    pg_server *srv = NULL;
    if (!rc && pg_server_start_models(engines, (size_t)n_models, &so, &srv) != PAGODA_OK) {
        fprintf(stderr, "pagoda serve: %s\n", pagoda_last_error());
        rc = 1;
    }
    if (rc) {
        for (int k = 0; k < n_models; k++)
            pagoda_engine_free(engines[k]);
        free(tmpl);
        return rc;
    }
    /* the banner names the address really bound (0.0.0.0 / :: included);
     * the example requests use one a client on this machine can reach */
    char bound[64], url_host[80];
    pg_server_bound_address(srv, bound, sizeof bound);
    bool v6 = strchr(bound, ':') != NULL;
    snprintf(url_host, sizeof url_host, v6 ? "[%s]" : "%s", bound);
    const char *shown = !strcmp(bound, "0.0.0.0") ? "127.0.0.1"
                        : !strcmp(bound, "::")    ? "[::1]"
                                                  : url_host;
    int port = pg_server_port(srv);
    const char *chat_name = NULL, *speech_name = NULL;
    for (int k = 0; k < n_models; k++) {
        const char *name = pg_server_model_name(srv, (size_t)k);
        bool speech = pg_server_model_is_speech(srv, (size_t)k);
        if (speech && !speech_name) speech_name = name;
        if (!speech && !chat_name) chat_name = name;
        printf("pagoda serve: %s (%s, max_model_len %d) listening on http://%s:%d\n", name,
               speech ? "speech to text" : "text generation",
               pagoda_engine_max_model_len(engines[k]), url_host, port);
    }
    if (strcmp(shown, url_host))
        printf("pagoda serve: %s is every address of this machine; from here: http://%s:%d\n",
               bound, shown, port);
    printf("PORT=%d\n", port);
    if (!so.disable_webui && chat_name)
        printf("web chat: open http://%s:%d/ in a browser\n", shown, port);
    const char *auth1 = so.api_key ? "-H 'Authorization: Bearer " : "";
    const char *auth2 = so.api_key ? so.api_key : "", *auth3 = so.api_key ? "' " : "";
    printf("try:\n");
    if (chat_name)
        printf("  curl http://%s:%d/v1/completions -H 'Content-Type: application/json' %s%s%s"
               "-d '{\"model\": \"%s\", \"prompt\": \"Once upon a time\", \"max_tokens\": 32}'\n",
               shown, port, auth1, auth2, auth3, chat_name);
    if (speech_name)
        printf("  curl http://%s:%d/v1/audio/transcriptions %s%s%s-F file=@audio.wav "
               "-F model=%s\n",
               shown, port, auth1, auth2, auth3, speech_name);
    fflush(stdout);

    int sig = 0;
    sigwait(&sigs, &sig);
    drain(srv, &sigs, sig, shutdown_timeout);
    pg_server_log_summary(srv);
    pg_server_stop(srv);
    fflush(stdout);
    fflush(stderr);
    for (int k = 0; k < n_models; k++)
        pagoda_engine_free(engines[k]);
    free(tmpl);
    return 0;
}
