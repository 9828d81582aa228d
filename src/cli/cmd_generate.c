/* `pagoda generate MODEL --prompt TEXT ...` and `--prompts-file FILE.jsonl`:
 * offline generation through the engine (include/pagoda.h): every request
 * goes through the scheduler, the batched forward and the detokenizer.
 *
 * Plain mode echoes the prompt and streams the completion to stdout as tokens
 * are sampled, holding back bytes of an unfinished UTF-8 character. --json
 * prints one object at the end:
 *   {"prompt_token_ids": [...], "token_ids": [...], "text": "...",
 *    "finish_reason": "stop" | "length"}
 * where token_ids includes the stop token when one ended the run (as vLLM's
 * CompletionOutput does) and text is the completion only, special tokens
 * skipped. With --prompts-file every line is one request ({"prompt": ...}
 * or {"prompt_token_ids": [...]} plus optional sampling fields); they run
 * together and one JSON line per request is printed in input order. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <utf8proc.h>

#include "base/status.h"
#include "cli/args.h"
#include "cli/commands.h"
#include "cli/engine_args.h"
#include "kernels/env_report.h"
#include "pagoda.h"
#include "server/metrics.h"

typedef struct gen_options {
    const char *model;
    const char *prompt;
    char *prompt_owned; /* --prompt -: standard input's text */
    long max_tokens;                 /* -1 = up to the context (or generation_config's
                                        max_new_tokens) */
    float temperature, top_p, min_p; /* NAN = not given */
    long top_k;                      /* LONG_MIN-like sentinel: -2 = not given */
    long long seed;                  /* -1 = random */
    bool ignore_eos;
    bool json;
    long min_tokens;
    const char *stop[16];
    size_t n_stop;
    const char *prompts_file;
    pagoda_engine_options eng;
} gen_options;

static const char USAGE[] =
    "usage: pagoda generate MODEL --prompt TEXT [options]\n"
    "       pagoda generate MODEL --prompts-file FILE.jsonl [options]\n"
    "\n"
    "MODEL is a Hugging Face model directory, a GGUF file or a hub repo id\n"
    "org/name[@REVISION][:QUANT] (from the Hugging Face cache, downloaded into it\n"
    "first when missing; see `pagoda download --help`).\n"
    "\n"
    "options:\n"
    "  --prompt TEXT        text to continue (encoded with BOS as the tokenizer says);\n"
    "                       '-' reads it from standard input (to its end, as is)\n"
    "  --max-tokens N       at most N new tokens (default: up to the context length)\n"
    "  --temperature T      0 = greedy (default: generation_config.json, else 1)\n"
    "  --top-p P            nucleus sampling, (0, 1] (default: generation_config, else 1)\n"
    "  --top-k K            keep the K most likely tokens, 0 = off\n"
    "  --min-p P            drop tokens below P x the top probability, 0 = off\n"
    "  --seed S             random seed (default: random)\n"
    "  --ignore-eos         keep going past the end-of-sequence token\n"
    "  --min-tokens N       no EOS / stop before N new tokens\n"
    "  --stop TEXT          stop string (repeatable); not included in the text\n"
    "  --json               print one JSON object (ids, text, finish_reason) at the end\n"
    "  --prompts-file F     JSON lines: {\"prompt\": ...} or {\"prompt_token_ids\": [...]}\n"
    "                       plus optional temperature, top_p, top_k, min_p, seed,\n"
    "                       max_tokens, min_tokens, stop, stop_token_ids, ignore_eos, ...;\n"
    "                       all run together, one JSON line per request in input order\n"
    "\n" PG_ENGINE_ARGS_HELP;

static void usage(FILE *f) {
    fputs(USAGE, f);
}

#define CMD "pagoda generate"

static bool parse_long(const char *s, long lo, long hi, long *out) {
    long long v;
    if (!pg_args_long(s, lo, hi, &v)) return false;
    *out = (long)v;
    return true;
}

static bool parse_float(const char *s, float *out) {
    double v;
    if (!pg_args_double(s, &v) || fabs(v) > 3.0e38) return false;
    *out = (float)v;
    return true;
}

/* Options that take a value (the engine's are in engine_args.c). */
static const char *const VALUED[] = {"--prompt", "--max-tokens",  "--temperature", "--top-p",
                                     "--top-k",  "--min-p",       "--seed",        "--min-tokens",
                                     "--stop",   "--prompts-file"};

/* All of standard input, NUL-terminated, in a malloc'ed buffer (*len bytes
 * before the NUL); NULL on a read error or out of memory. */
static char *read_stdin(size_t *len) {
    size_t cap = 1 << 16, n = 0, r;
    char *b = malloc(cap);
    if (!b) return NULL;
    while ((r = fread(b + n, 1, cap - n - 1, stdin)) > 0) {
        n += r;
        if (n + 1 == cap) {
            char *nb = realloc(b, cap *= 2);
            if (!nb) {
                free(b);
                return NULL;
            }
            b = nb;
        }
    }
    if (ferror(stdin)) {
        free(b);
        return NULL;
    }
    b[n] = 0;
    *len = n;
    return b;
}

/* Returns 0 on success, 2 on a usage error (message printed), -1 for --help. */
static int parse_args(int argc, char **argv, gen_options *o) {
    *o = (gen_options){
        .max_tokens = -1, .temperature = NAN, .top_p = NAN, .min_p = NAN, .top_k = -2, .seed = -1};
    pagoda_engine_options_default(&o->eng);
    for (int i = 1; i < argc; i++) {
        int e = pg_engine_args_parse(CMD, argc, argv, &i, &o->eng);
        if (e < 0) return 2;
        if (e > 0) continue;
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return -1;
        }
        if (!strcmp(a, "--ignore-eos")) {
            o->ignore_eos = true;
            continue;
        }
        if (!strcmp(a, "--json")) {
            o->json = true;
            continue;
        }
        if (!pg_args_is_option(a)) {
            if (o->model) return pg_args_unexpected(CMD, a);
            o->model = a;
            continue;
        }
        const char *v =
            pg_args_valued(CMD, argc, argv, &i, VALUED, sizeof VALUED / sizeof VALUED[0]);
        if (!v) return 2;
        bool ok = true;
        const char *want = NULL;
        long long ll;
        if (!strcmp(a, "--prompt")) {
            if (!*v) {
                fprintf(stderr, CMD ": --prompt is empty (give some text; the server rejects an "
                                    "empty prompt too)\n");
                return 2;
            }
            o->prompt = v;
        } else if (!strcmp(a, "--max-tokens")) {
            ok = parse_long(v, 0, 1L << 30, &o->max_tokens), want = "an integer in [0, 2^30]";
        } else if (!strcmp(a, "--temperature")) {
            ok = parse_float(v, &o->temperature) && o->temperature >= 0.0f, want = "a number >= 0";
        } else if (!strcmp(a, "--top-p")) {
            ok = parse_float(v, &o->top_p), want = "a number in (0, 1]";
        } else if (!strcmp(a, "--top-k")) {
            ok = parse_long(v, -1, 1L << 30, &o->top_k), want = "-1, 0 (off) or a positive integer";
        } else if (!strcmp(a, "--min-p")) {
            ok = parse_float(v, &o->min_p), want = "a number in [0, 1]";
        } else if (!strcmp(a, "--seed")) {
            ok = pg_args_long(v, 0, INT64_MAX, &ll), want = "an integer >= 0";
            if (ok) o->seed = ll;
        } else if (!strcmp(a, "--min-tokens")) {
            ok = parse_long(v, 0, 1L << 30, &o->min_tokens), want = "an integer in [0, 2^30]";
        } else if (!strcmp(a, "--stop")) {
            if (!*v) {
                fprintf(stderr, CMD ": --stop is an empty string (the server rejects an empty "
                                    "stop string too)\n");
                return 2;
            }
            ok = o->n_stop < 16, want = "at most 16 stop strings";
            if (ok) o->stop[o->n_stop++] = v;
        } else if (!strcmp(a, "--prompts-file")) {
            o->prompts_file = v;
        }
        if (!ok) return pg_args_bad_value(CMD, a, v, want);
    }
    if (!o->model || (!o->prompt && !o->prompts_file)) {
        fprintf(stderr, CMD ": %s is required\n\n", !o->model ? "MODEL" : "--prompt");
        usage(stderr);
        return 2;
    }
    if (o->prompt && o->prompts_file) {
        fprintf(stderr, CMD ": give --prompt or --prompts-file, not both\n");
        return 2;
    }
    if (!strcmp(o->prompt ? o->prompt : "", "-")) {
        size_t n = 0;
        if (!(o->prompt_owned = read_stdin(&n))) {
            fprintf(stderr, CMD ": --prompt -: cannot read standard input\n");
            return 1;
        }
        if (n == 0 || strlen(o->prompt_owned) != n) {
            fprintf(stderr, CMD ": --prompt -: standard input is %s\n",
                    n == 0 ? "empty (give some text; the server rejects an empty prompt too)"
                           : "not text (it has a NUL byte)");
            free(o->prompt_owned);
            o->prompt_owned = NULL;
            return 2;
        }
        o->prompt = o->prompt_owned;
    }
    return pg_engine_args_check(CMD, &o->eng);
}

/* ---- text ---------------------------------------------------------------- */

/* A copy of s[0..n) where every invalid or unfinished UTF-8 sequence is
 * replaced by U+FFFD, NUL-terminated (JSON strings must be valid UTF-8). */
static char *utf8_sanitize(const char *s, size_t n) {
    char *out = malloc(3 * n + 1), *o = out;
    if (!out) return NULL;
    size_t i = 0;
    while (i < n) {
        utf8proc_int32_t cp;
        utf8proc_ssize_t k =
            utf8proc_iterate((const utf8proc_uint8_t *)s + i, (utf8proc_ssize_t)(n - i), &cp);
        if (k <= 0 || cp == 0) {
            if (k > 0 && cp == 0) {
                i += (size_t)k; /* drop NULs: not representable in our C string */
                continue;
            }
            memcpy(o, "\xEF\xBF\xBD", 3);
            o += 3;
            i++;
            continue;
        }
        memcpy(o, s + i, (size_t)k);
        o += k;
        i += (size_t)k;
    }
    *o = 0;
    return out;
}

/* ---- requests ------------------------------------------------------------ */

/* One request and what came back for it. */
typedef struct job {
    pagoda_request req;
    int32_t *prompt_ids; /* owned: tokenized prompt or the file's ids */
    size_t n_prompt;
    char **stop; /* owned strings (prompts file) */
    int32_t *stop_ids;
    uint64_t id;
    int32_t *out_ids;
    size_t n_out, cap_out;
    char *text;
    size_t text_len, text_cap;
    const char *finish;
    char *error;
} job;

static void job_free(job *j) {
    free(j->prompt_ids);
    for (size_t i = 0; j->stop && i < j->req.sampling.n_stop; i++)
        free(j->stop[i]);
    free(j->stop);
    free(j->stop_ids);
    free(j->out_ids);
    free(j->text);
    free(j->error);
}

static bool append(job *j, const pagoda_output *o) {
    if (j->n_out + o->n_new_tokens > j->cap_out) {
        size_t cap = (j->cap_out + o->n_new_tokens) * 2 + 16;
        int32_t *g = realloc(j->out_ids, cap * sizeof *g);
        if (!g) return false;
        j->out_ids = g;
        j->cap_out = cap;
    }
    /* an output without tokens (a failed request) may carry NULL arrays:
     * memcpy with a NULL pointer is undefined even for 0 bytes (UBSan) */
    if (o->n_new_tokens)
        memcpy(j->out_ids + j->n_out, o->new_token_ids, o->n_new_tokens * sizeof(int32_t));
    j->n_out += o->n_new_tokens;
    if (j->text_len + o->text_delta_len + 1 > j->text_cap) {
        size_t cap = (j->text_len + o->text_delta_len + 1) * 2;
        char *g = realloc(j->text, cap);
        if (!g) return false;
        j->text = g;
        j->text_cap = cap;
    }
    if (o->text_delta_len) memcpy(j->text + j->text_len, o->text_delta, o->text_delta_len);
    j->text_len += o->text_delta_len;
    return true;
}

/* Sampling from generation_config (pagoda_sampling_defaults) then the flags. */
static void apply_flags(const gen_options *o, pagoda_sampling *s) {
    if (!isnan(o->temperature)) s->temperature = o->temperature;
    if (!isnan(o->top_p)) s->top_p = o->top_p;
    if (!isnan(o->min_p)) s->min_p = o->min_p;
    if (o->top_k != -2) s->top_k = (int32_t)o->top_k;
    s->seed = o->seed;
    s->ignore_eos = o->ignore_eos;
    s->min_tokens = (int32_t)o->min_tokens;
    s->stop = o->stop;
    s->n_stop = o->n_stop;
}

static void print_json(const job *j) {
    cJSON *obj = cJSON_CreateObject();
    if (j->error) {
        cJSON_AddStringToObject(obj, "error", j->error);
    } else {
        cJSON *pids = cJSON_AddArrayToObject(obj, "prompt_token_ids");
        for (size_t i = 0; i < j->n_prompt; i++)
            cJSON_AddItemToArray(pids, cJSON_CreateNumber(j->prompt_ids[i]));
        cJSON *gids = cJSON_AddArrayToObject(obj, "token_ids");
        for (size_t i = 0; i < j->n_out; i++)
            cJSON_AddItemToArray(gids, cJSON_CreateNumber(j->out_ids[i]));
        char *clean = utf8_sanitize(j->text ? j->text : "", j->text_len);
        cJSON_AddStringToObject(obj, "text", clean ? clean : "");
        free(clean);
        cJSON_AddStringToObject(obj, "finish_reason", j->finish ? j->finish : "error");
    }
    char *s = cJSON_PrintUnformatted(obj);
    if (s) printf("%s\n", s);
    free(s);
    cJSON_Delete(obj);
}

/* Fields of one prompts-file line over the CLI defaults. Returns false with
 * a message in *err. */
static bool parse_line(const pagoda_engine *e, const gen_options *o, const char *line, job *j,
                       char *err, size_t cap) {
    cJSON *root = cJSON_Parse(line);
    bool ok = false;
    if (!root || !cJSON_IsObject(root)) {
        snprintf(err, cap, "not a JSON object");
        goto out;
    }
    pagoda_request_defaults(e, &j->req);
    apply_flags(o, &j->req.sampling);
    j->req.sampling.stop = NULL;
    j->req.sampling.n_stop = 0;
    if (o->max_tokens >= 0) j->req.sampling.max_tokens = (int32_t)o->max_tokens;
    pagoda_sampling *s = &j->req.sampling;
    const cJSON *p = cJSON_GetObjectItem(root, "prompt");
    const cJSON *pi = cJSON_GetObjectItem(root, "prompt_token_ids");
    if (cJSON_IsString(p) && !p->valuestring[0]) {
        snprintf(err, cap, "\"prompt\" is empty (the server rejects an empty prompt too)");
        goto out;
    } else if (cJSON_IsArray(pi) && cJSON_GetArraySize(pi) == 0) {
        snprintf(err, cap, "\"prompt_token_ids\" is empty");
        goto out;
    }
    if (cJSON_IsString(p)) {
        int32_t *ids;
        size_t n;
        if (pagoda_tokenize(e, p->valuestring, strlen(p->valuestring), true, &ids, &n) !=
            PAGODA_OK) {
            snprintf(err, cap, "%s", pagoda_last_error());
            goto out;
        }
        j->prompt_ids = ids;
        j->n_prompt = n;
    } else if (cJSON_IsArray(pi)) {
        j->n_prompt = (size_t)cJSON_GetArraySize(pi);
        j->prompt_ids = malloc((j->n_prompt + 1) * sizeof(int32_t));
        if (!j->prompt_ids) goto out;
        for (size_t i = 0; i < j->n_prompt; i++) {
            const cJSON *it = cJSON_GetArrayItem(pi, (int)i);
            if (!cJSON_IsNumber(it) || it->valuedouble != floor(it->valuedouble) ||
                it->valuedouble < 0 || it->valuedouble > INT32_MAX) {
                snprintf(err, cap, "prompt_token_ids[%zu] is not a token id", i);
                goto out;
            }
            j->prompt_ids[i] = (int32_t)it->valuedouble;
        }
    } else {
        snprintf(err, cap, "needs \"prompt\" (string) or \"prompt_token_ids\" (array)");
        goto out;
    }
    j->req.prompt_token_ids = j->prompt_ids;
    j->req.n_prompt_token_ids = j->n_prompt;
    const cJSON *f;
#define NUM(name, field, type)                                                                     \
    if ((f = cJSON_GetObjectItem(root, name)) && !cJSON_IsNull(f)) {                               \
        if (!cJSON_IsNumber(f)) {                                                                  \
            snprintf(err, cap, "\"%s\" must be a number", name);                                   \
            goto out;                                                                              \
        }                                                                                          \
        s->field = (type)f->valuedouble;                                                           \
    }
#define INT(name, field, type, lo, hi)                                                             \
    if ((f = cJSON_GetObjectItem(root, name)) && !cJSON_IsNull(f)) {                               \
        if (!cJSON_IsNumber(f) || f->valuedouble != floor(f->valuedouble) ||                       \
            f->valuedouble < (double)(lo) || f->valuedouble > (double)(hi)) {                      \
            snprintf(err, cap, "\"%s\" must be an integer in [%lld, %lld]", name, (long long)(lo), \
                     (long long)(hi));                                                             \
            goto out;                                                                              \
        }                                                                                          \
        s->field = (type)f->valuedouble;                                                           \
    }
#define BOOL(name, field)                                                                          \
    if ((f = cJSON_GetObjectItem(root, name)) && !cJSON_IsNull(f)) {                               \
        if (!cJSON_IsBool(f)) {                                                                    \
            snprintf(err, cap, "\"%s\" must be true or false", name);                              \
            goto out;                                                                              \
        }                                                                                          \
        s->field = cJSON_IsTrue(f);                                                                \
    }
    NUM("temperature", temperature, float)
    NUM("top_p", top_p, float)
    INT("top_k", top_k, int32_t, -1, INT32_MAX)
    NUM("min_p", min_p, float)
    NUM("repetition_penalty", repetition_penalty, float)
    NUM("presence_penalty", presence_penalty, float)
    NUM("frequency_penalty", frequency_penalty, float)
    INT("seed", seed, int64_t, 0, 1LL << 53)
    INT("max_tokens", max_tokens, int32_t, 0, INT32_MAX)
    INT("min_tokens", min_tokens, int32_t, 0, INT32_MAX)
    INT("logprobs", logprobs, int32_t, 0, INT32_MAX)
    BOOL("ignore_eos", ignore_eos)
    BOOL("include_stop_str_in_output", include_stop_str_in_output)
    BOOL("skip_special_tokens", skip_special_tokens)
#undef NUM
#undef INT
#undef BOOL
    if ((f = cJSON_GetObjectItem(root, "stop")) && !cJSON_IsNull(f)) {
        size_t n = cJSON_IsString(f) ? 1 : cJSON_IsArray(f) ? (size_t)cJSON_GetArraySize(f) : 0;
        if (!cJSON_IsString(f) && !cJSON_IsArray(f)) {
            snprintf(err, cap, "\"stop\" must be a string or an array of strings");
            goto out;
        }
        j->stop = calloc(n + 1, sizeof *j->stop);
        if (!j->stop) goto out;
        for (size_t i = 0; i < n; i++) {
            const cJSON *it = cJSON_IsString(f) ? f : cJSON_GetArrayItem(f, (int)i);
            if (!cJSON_IsString(it)) {
                snprintf(err, cap, "\"stop\"[%zu] is not a string", i);
                goto out;
            }
            if (!it->valuestring[0]) {
                if (cJSON_IsString(f))
                    snprintf(err, cap, "\"stop\" is an empty string (the server rejects it too)");
                else
                    snprintf(err, cap,
                             "\"stop\"[%zu] is an empty string (the server rejects "
                             "it too)",
                             i);
                goto out;
            }
            j->stop[i] = strdup(it->valuestring);
            s->n_stop = i + 1;
        }
        s->stop = (const char *const *)j->stop;
    }
    if ((f = cJSON_GetObjectItem(root, "stop_token_ids")) && !cJSON_IsNull(f)) {
        if (!cJSON_IsArray(f)) {
            snprintf(err, cap, "\"stop_token_ids\" must be an array of token ids");
            goto out;
        }
        size_t n = (size_t)cJSON_GetArraySize(f);
        j->stop_ids = malloc((n + 1) * sizeof(int32_t));
        if (!j->stop_ids) goto out;
        for (size_t i = 0; i < n; i++) {
            const cJSON *it = cJSON_GetArrayItem(f, (int)i);
            if (!cJSON_IsNumber(it) || it->valuedouble != floor(it->valuedouble) ||
                it->valuedouble < 0 || it->valuedouble > INT32_MAX) {
                snprintf(err, cap, "\"stop_token_ids\"[%zu] is not a token id", i);
                goto out;
            }
            j->stop_ids[i] = (int32_t)it->valuedouble;
        }
        s->stop_token_ids = j->stop_ids;
        s->n_stop_token_ids = n;
    }
    ok = true;
out:
    cJSON_Delete(root);
    return ok;
}

static int exit_code(pagoda_status st) {
    return st == PAGODA_ERR_INVALID_ARG ? 2 : 1;
}

/* Step until every job is done; stream job 0's text when `stream`. */
static pagoda_status run_all(pagoda_engine *e, job *jobs, size_t n, bool stream) {
    while (pagoda_engine_has_unfinished(e)) {
        size_t nout;
        pagoda_status st = pagoda_engine_step(e, &nout);
        if (st != PAGODA_OK) return st;
        const pagoda_output *outs = pagoda_engine_outputs(e, &nout);
        for (size_t k = 0; k < nout; k++) {
            const pagoda_output *o = &outs[k];
            job *j = NULL;
            for (size_t i = 0; i < n && !j; i++)
                if (jobs[i].id == o->id && !jobs[i].finish && !jobs[i].error) j = &jobs[i];
            if (!j) continue;
            if (!append(j, o)) return pg_error(PAGODA_ERR_NOMEM, "generate: out of memory");
            if (stream && o->text_delta_len) {
                fwrite(o->text_delta, 1, o->text_delta_len, stdout);
                fflush(stdout);
            }
            if (o->finish_reason == PAGODA_FINISH_ERROR)
                j->error = strdup(o->error ? o->error : "error");
            else if (o->finish_reason != PAGODA_FINISH_NONE)
                j->finish = pagoda_finish_reason_name(o->finish_reason);
        }
    }
    return PAGODA_OK;
}

static int run_prompts_file(pagoda_engine *e, const gen_options *o) {
    FILE *f = fopen(o->prompts_file, "r");
    if (!f) {
        fprintf(stderr, "pagoda generate: cannot open %s\n", o->prompts_file);
        return 1;
    }
    job *jobs = NULL;
    size_t n = 0, cap = 0, lineno = 0;
    char *line = NULL;
    size_t lcap = 0;
    int rc = 0;
    while (getline(&line, &lcap, f) > 0) {
        lineno++;
        const char *p = line;
        while (*p == ' ' || *p == '\t' || *p == '\r' || *p == '\n')
            p++;
        if (!*p) continue;
        if (n == cap) {
            cap = cap ? 2 * cap : 16;
            job *g = realloc(jobs, cap * sizeof *g);
            if (!g) {
                rc = 1;
                break;
            }
            jobs = g;
        }
        job *j = &jobs[n++];
        memset(j, 0, sizeof *j);
        char err[512];
        if (!parse_line(e, o, p, j, err, sizeof err)) {
            fprintf(stderr, "pagoda generate: %s:%zu: %s\n", o->prompts_file, lineno, err);
            j->error = strdup(err);
            rc = 1;
            continue;
        }
        if (pagoda_engine_add_request(e, &j->req, &j->id, NULL) != PAGODA_OK) {
            fprintf(stderr, "pagoda generate: %s:%zu: %s\n", o->prompts_file, lineno,
                    pagoda_last_error());
            j->error = strdup(pagoda_last_error());
            rc = 1;
        }
    }
    free(line);
    fclose(f);
    if (run_all(e, jobs, n, false) != PAGODA_OK) {
        fprintf(stderr, "pagoda generate: %s\n", pagoda_last_error());
        rc = 1;
    }
    for (size_t i = 0; i < n; i++) {
        if (jobs[i].error) rc = 1; /* also a request that failed while running */
        print_json(&jobs[i]);
        job_free(&jobs[i]);
    }
    fflush(stdout);
    free(jobs);
    return rc;
}

static double now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* With speculative decoding: vLLM's SpecDecoding line for the whole run
 * (stderr). */
static void log_spec_decoding(pagoda_engine *e, double t0) {
    pagoda_stats st;
    pagoda_engine_get_stats(e, &st);
    char line[512];
    if (pg_metrics_spec_line(NULL, &st, now_seconds() - t0, line, sizeof line))
        fprintf(stderr, "pagoda generate: %s\n", line);
}

static int generate(gen_options *o);

int pg_cmd_generate(int argc, char **argv) {
    gen_options o;
    int rc = parse_args(argc, argv, &o);
    if (!rc) rc = generate(&o);
    else if (rc < 0)
        rc = 0;
    free(o.prompt_owned);
    return rc;
}

static int generate(gen_options *op) {
    const gen_options o = *op;
    int rc;

    pagoda_engine *e;
    pagoda_status st = pagoda_engine_create(o.model, &o.eng, &e);
    if (st != PAGODA_OK) {
        fprintf(stderr, "pagoda generate: %s\n", pagoda_last_error());
        return exit_code(st);
    }
    /* what in the environment costs speed, logged once (the block-time finding
     * depends on whether speculative decoding is on) */
    pg_env_log_findings(pagoda_engine_resident_bytes(e),
                        o.eng.speculative.method != PAGODA_SPEC_NONE);
    const double t0 = now_seconds();
    if (o.prompts_file) {
        rc = run_prompts_file(e, &o);
        log_spec_decoding(e, t0);
        pagoda_engine_free(e);
        return rc;
    }

    job j = {0};
    pagoda_request_defaults(e, &j.req);
    apply_flags(&o, &j.req.sampling);
    size_t plen = strlen(o.prompt);
    int ctx = pagoda_engine_max_model_len(e);
    if ((st = pagoda_tokenize(e, o.prompt, plen, true, &j.prompt_ids, &j.n_prompt)) != PAGODA_OK)
        goto fail;
    if (j.n_prompt == 0) {
        st = pg_error(PAGODA_ERR_INVALID_ARG, "the prompt is empty and the tokenizer adds no BOS");
        goto fail;
    }
    if (j.n_prompt >= (size_t)ctx) {
        st = pg_error(PAGODA_ERR_LIMIT,
                      "the prompt is %zu tokens; the context is %d tokens (room for at least one "
                      "new token is needed)",
                      j.n_prompt, ctx);
        goto fail;
    }
    /* --max-tokens, else generation_config's max_new_tokens, capped at the context */
    long room = ctx - (long)j.n_prompt, max_new = room;
    if (o.max_tokens >= 0) max_new = o.max_tokens;
    if (max_new > room) max_new = room;
    if (max_new == 0) { /* nothing to generate */
        if (o.json) {
            j.finish = "length";
            print_json(&j);
        } else {
            printf("%s\n", o.prompt);
        }
        job_free(&j);
        pagoda_engine_free(e);
        return 0;
    }
    j.req.sampling.max_tokens = (int32_t)max_new;
    j.req.prompt_token_ids = j.prompt_ids;
    j.req.n_prompt_token_ids = j.n_prompt;
    if ((st = pagoda_engine_add_request(e, &j.req, &j.id, NULL)) != PAGODA_OK) goto fail;
    if (!o.json) {
        fwrite(o.prompt, 1, plen, stdout);
        fflush(stdout);
    }
    if ((st = run_all(e, &j, 1, !o.json)) != PAGODA_OK) goto fail;
    if (j.error) {
        st = pg_error(PAGODA_ERR_INTERNAL, "%s", j.error);
        goto fail;
    }
    if (o.json)
        print_json(&j);
    else
        fputc('\n', stdout);
    fflush(stdout);
    log_spec_decoding(e, t0);
    job_free(&j);
    pagoda_engine_free(e);
    return 0;
fail:
    fprintf(stderr, "pagoda generate: %s\n", pagoda_last_error());
    job_free(&j);
    pagoda_engine_free(e);
    return exit_code(st);
}
