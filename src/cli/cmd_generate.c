/* `pagoda generate MODEL --prompt TEXT ...`: offline generation for one
 * prompt with the Llama-family forward pass, batch of one.
 *
 * Plain mode echoes the prompt and streams the completion to stdout as tokens
 * are sampled, holding back bytes of an unfinished UTF-8 character. --json
 * prints one object at the end:
 *   {"prompt_token_ids": [...], "token_ids": [...], "text": "...",
 *    "finish_reason": "stop" | "length"}
 * where token_ids includes the stop token when one ended the run (as vLLM's
 * CompletionOutput does) and text is the completion only, special tokens
 * skipped. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "base/log.h"
#include "base/pool.h"
#include "base/status.h"
#include "cli/commands.h"
#include "engine/rng.h"
#include "engine/sampler.h"
#include "model/llama.h"
#include "model/source.h"
#include "tokenizer/tokenizer.h"

typedef struct gen_options {
    const char *model;
    const char *prompt;
    long max_tokens;                 /* -1 = up to the context (or generation_config's
                                        max_new_tokens) */
    float temperature, top_p, min_p; /* NAN = not given */
    long top_k;                      /* LONG_MIN-like sentinel: -2 = not given */
    long long seed;                  /* -1 = random */
    bool ignore_eos;
    bool json;
    long threads;       /* 0 = default */
    long max_model_len; /* 0 = the model's max_position_embeddings */
} gen_options;

static const char USAGE[] =
    "usage: pagoda generate MODEL --prompt TEXT [options]\n"
    "\n"
    "MODEL is a Hugging Face model directory, a GGUF file or an org/name repo id\n"
    "found in the local Hugging Face cache.\n"
    "\n"
    "options:\n"
    "  --prompt TEXT        text to continue (encoded with BOS as the tokenizer says)\n"
    "  --max-tokens N       at most N new tokens (default: up to the context length)\n"
    "  --temperature T      0 = greedy (default: generation_config.json, else 1)\n"
    "  --top-p P            nucleus sampling, (0, 1] (default: generation_config, else 1)\n"
    "  --top-k K            keep the K most likely tokens, 0 = off\n"
    "  --min-p P            drop tokens below P x the top probability, 0 = off\n"
    "  --seed S             random seed (default: random)\n"
    "  --ignore-eos         keep going past the end-of-sequence token\n"
    "  --json               print one JSON object (ids, text, finish_reason) at the end\n"
    "  --threads N          compute threads (default: one per physical core)\n"
    "  --max-model-len N    context limit in tokens (default: the model's maximum)\n";

static void usage(FILE *f) {
    fputs(USAGE, f);
}

static bool parse_long(const char *s, long lo, long hi, long *out) {
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi) return false;
    *out = v;
    return true;
}

static bool parse_float(const char *s, float *out) {
    char *end;
    errno = 0;
    float v = strtof(s, &end);
    if (errno || end == s || *end || !isfinite(v)) return false;
    *out = v;
    return true;
}

/* Returns 0 on success, 2 on a usage error (message printed), -1 for --help. */
static int parse_args(int argc, char **argv, gen_options *o) {
    *o = (gen_options){
        .max_tokens = -1, .temperature = NAN, .top_p = NAN, .min_p = NAN, .top_k = -2, .seed = -1};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        bool ok = true, takes = true;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return -1;
        } else if (!strcmp(a, "--ignore-eos")) {
            o->ignore_eos = true;
            takes = false;
        } else if (!strcmp(a, "--json")) {
            o->json = true;
            takes = false;
        } else if (a[0] == '-' && a[1] == '-') {
            if (!v) {
                fprintf(stderr, "pagoda generate: %s needs a value\n", a);
                return 2;
            }
            if (!strcmp(a, "--prompt")) {
                o->prompt = v;
            } else if (!strcmp(a, "--max-tokens")) {
                ok = parse_long(v, 0, 1L << 30, &o->max_tokens);
            } else if (!strcmp(a, "--temperature")) {
                ok = parse_float(v, &o->temperature) && o->temperature >= 0.0f;
            } else if (!strcmp(a, "--top-p")) {
                ok = parse_float(v, &o->top_p);
            } else if (!strcmp(a, "--top-k")) {
                ok = parse_long(v, -1, 1L << 30, &o->top_k);
            } else if (!strcmp(a, "--min-p")) {
                ok = parse_float(v, &o->min_p);
            } else if (!strcmp(a, "--seed")) {
                char *end;
                errno = 0;
                o->seed = strtoll(v, &end, 10);
                ok = !errno && end != v && !*end;
            } else if (!strcmp(a, "--threads")) {
                ok = parse_long(v, 1, 1024, &o->threads);
            } else if (!strcmp(a, "--max-model-len")) {
                ok = parse_long(v, 1, 1L << 30, &o->max_model_len);
            } else {
                fprintf(stderr, "pagoda generate: unknown option '%s'\n", a);
                return 2;
            }
            if (!ok) {
                fprintf(stderr, "pagoda generate: bad value '%s' for %s\n", v, a);
                return 2;
            }
        } else if (!o->model) {
            o->model = a;
            takes = false;
        } else {
            fprintf(stderr, "pagoda generate: unexpected argument '%s'\n", a);
            return 2;
        }
        if (takes) i++;
    }
    if (!o->model || !o->prompt) {
        fprintf(stderr, "pagoda generate: %s is required\n\n", !o->model ? "MODEL" : "--prompt");
        usage(stderr);
        return 2;
    }
    return 0;
}

/* ---- text -------------------------------------------------------------------
 */

typedef struct text_buf {
    char *data;
    size_t cap, len;
} text_buf;

/* decode(ids[0..n)) into b (special tokens skipped). */
static pagoda_status decode_all(const pg_tokenizer *tok, const int32_t *ids, size_t n,
                                text_buf *b) {
    for (;;) {
        size_t len;
        pagoda_status st = pg_tokenizer_decode(tok, ids, n, true, b->data, b->cap, &len);
        if (st != PAGODA_OK) return st;
        if (len < b->cap) {
            b->len = len;
            return PAGODA_OK;
        }
        size_t cap = len + 1 > 2 * b->cap ? len + 1 : 2 * b->cap;
        char *grown = realloc(b->data, cap);
        if (!grown) return pg_error(PAGODA_ERR_NOMEM, "generate: out of memory");
        b->data = grown;
        b->cap = cap;
    }
}

/* Length of the longest prefix of s[0..n) that does not end inside an
 * unfinished UTF-8 sequence (invalid bytes count as complete). */
static size_t utf8_complete_prefix(const char *s, size_t n) {
    size_t i = n, back = 0;
    while (i > 0 && back < 4 && ((unsigned char)s[i - 1] & 0xC0) == 0x80) {
        i--;
        back++;
    }
    if (i == 0) return n;
    unsigned char lead = (unsigned char)s[i - 1];
    size_t need = lead >= 0xF0 ? 4 : lead >= 0xE0 ? 3 : lead >= 0xC0 ? 2 : 1;
    if (need > 1 && back + 1 < need && lead < 0xF8) return i - 1; /* lead + too few tails */
    return n;
}

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

/* ---- the run
 * ------------------------------------------------------------------ */

typedef struct gen_run {
    pg_model_source *src;
    pg_llama *model;
    pg_llama_state *state;
    pg_kv_cache *kv;
    pg_tokenizer *tok;
    pg_sampler *sampler;
    int32_t *ids; /* prompt then generated ids, [max_context] */
    float *logits;
    text_buf text, prompt_text;
} gen_run;

static void run_free(gen_run *r) {
    pg_llama_state_free(r->state);
    pg_kv_cache_free(r->kv);
    pg_llama_free(r->model);
    pg_tokenizer_free(r->tok);
    pg_sampler_free(r->sampler);
    pg_model_source_free(r->src);
    free(r->ids);
    free(r->logits);
    free(r->text.data);
    free(r->prompt_text.data);
}

static bool is_stop(const pg_model_config *c, const pg_tokenizer *tok, int32_t id) {
    for (int i = 0; i < 8 && c->eos_token_ids[i] >= 0; i++)
        if (c->eos_token_ids[i] == id) return true;
    return pg_tokenizer_eos(tok) >= 0 && pg_tokenizer_eos(tok) == id;
}

/* Sampling parameters: defaults, then generation_config.json, then flags. */
static pg_sampling_params sampling_params(const gen_options *o, const pg_generation_defaults *g) {
    pg_sampling_params p = pg_sampling_params_default();
    if (g) {
        if (!isnan(g->temperature) && g->temperature >= 0) p.temperature = g->temperature;
        if (!isnan(g->top_p) && g->top_p > 0) p.top_p = g->top_p;
        if (!isnan(g->min_p) && g->min_p >= 0) p.min_p = g->min_p;
        if (!isnan(g->repetition_penalty) && g->repetition_penalty > 0)
            p.repetition_penalty = g->repetition_penalty;
        if (g->top_k > 0) p.top_k = g->top_k;
    }
    if (!isnan(o->temperature)) p.temperature = o->temperature;
    if (!isnan(o->top_p)) p.top_p = o->top_p;
    if (!isnan(o->min_p)) p.min_p = o->min_p;
    if (o->top_k != -2) p.top_k = (int32_t)o->top_k;
    p.seed = o->seed;
    return p;
}

static void print_json(const int32_t *ids, int n_prompt, int n_gen, const char *text,
                       size_t text_len, const char *finish) {
    cJSON *obj = cJSON_CreateObject();
    cJSON *pids = cJSON_AddArrayToObject(obj, "prompt_token_ids");
    for (int i = 0; i < n_prompt; i++)
        cJSON_AddItemToArray(pids, cJSON_CreateNumber(ids[i]));
    cJSON *gids = cJSON_AddArrayToObject(obj, "token_ids");
    for (int i = 0; i < n_gen; i++)
        cJSON_AddItemToArray(gids, cJSON_CreateNumber(ids[n_prompt + i]));
    char *clean = utf8_sanitize(text, text_len);
    cJSON_AddStringToObject(obj, "text", clean ? clean : "");
    cJSON_AddStringToObject(obj, "finish_reason", finish);
    char *s = cJSON_PrintUnformatted(obj);
    if (s) printf("%s\n", s);
    free(s);
    free(clean);
    cJSON_Delete(obj);
}

static int fail(gen_run *r, int code) {
    fprintf(stderr, "pagoda generate: %s\n", pg_last_error());
    run_free(r);
    return code;
}

int pg_cmd_generate(int argc, char **argv) {
    gen_options o;
    int rc = parse_args(argc, argv, &o);
    if (rc) return rc < 0 ? 0 : rc;

    if (o.threads > 0) {
        pg_pool_options po = pg_pool_options_default();
        po.n_threads = (int)o.threads;
        if (pg_pool_default_configure(&po) != PAGODA_OK) {
            fprintf(stderr, "pagoda generate: --threads %ld: %s\n", o.threads, pg_last_error());
            return 2;
        }
    }

    gen_run r = {0};
    if (pg_model_source_open(o.model, &r.src) != PAGODA_OK) return fail(&r, 1);
    if (pg_llama_load(r.src, (int)o.max_model_len, &r.model) != PAGODA_OK) return fail(&r, 1);
    if (pg_tokenizer_load(pg_model_source_path(r.src), &r.tok) != PAGODA_OK) return fail(&r, 1);
    const pg_model_config *cfg = pg_llama_config(r.model);
    int ctx = pg_llama_max_context(r.model);

    /* prompt */
    size_t n_prompt = 0, plen = strlen(o.prompt);
    r.ids = malloc((size_t)ctx * sizeof *r.ids);
    r.logits = malloc((size_t)cfg->vocab_size * sizeof *r.logits);
    if (!r.ids || !r.logits) {
        pg_error(PAGODA_ERR_NOMEM, "out of memory");
        return fail(&r, 1);
    }
    if (pg_tokenizer_encode(r.tok, o.prompt, plen, true, r.ids, (size_t)ctx, &n_prompt) !=
        PAGODA_OK)
        return fail(&r, 1);
    if (n_prompt == 0) {
        pg_error(PAGODA_ERR_INVALID_ARG, "the prompt is empty and the tokenizer adds no BOS");
        return fail(&r, 2);
    }
    if (n_prompt >= (size_t)ctx) {
        pg_error(PAGODA_ERR_LIMIT,
                 "the prompt is %zu tokens; the context is %d tokens (room for at "
                 "least one "
                 "new token is needed)",
                 n_prompt, ctx);
        return fail(&r, 1);
    }

    /* sampling */
    const pg_generation_defaults *g = pg_model_source_generation(r.src);
    pg_sampling_params sp = sampling_params(&o, g);
    if (pg_sampling_params_validate(&sp, cfg->vocab_size) != PAGODA_OK) return fail(&r, 2);
    pg_rng rng = pg_rng_from_seed(sp.seed);
    if (pg_sampler_create(cfg->vocab_size, &r.sampler) != PAGODA_OK) return fail(&r, 1);
    long room = ctx - (long)n_prompt;
    long max_new = room;
    if (o.max_tokens >= 0)
        max_new = o.max_tokens;
    else if (g && g->max_new_tokens > 0)
        max_new = g->max_new_tokens;
    if (max_new > room) max_new = room;

    /* KV cache for exactly the positions this run can reach */
    int chunk = n_prompt < 512 ? (int)n_prompt : 512;
    if (pg_kv_cache_create_contiguous(cfg->num_hidden_layers, cfg->num_key_value_heads,
                                      cfg->head_dim, (int)n_prompt + (int)max_new + 1,
                                      &r.kv) != PAGODA_OK ||
        pg_llama_state_create(r.model, chunk, r.kv, &r.state) != PAGODA_OK)
        return fail(&r, 1);
    if (decode_all(r.tok, r.ids, n_prompt, &r.prompt_text) != PAGODA_OK) return fail(&r, 1);
    if (!o.json) {
        fwrite(o.prompt, 1, plen, stdout);
        fflush(stdout);
    }

    /* prefill, then decode one token at a time */
    const char *finish = "length";
    int n_gen = 0;
    size_t emitted = r.prompt_text.len; /* bytes of decode(ids) already printed */
    if (pg_llama_forward(r.model, r.state, r.ids, (int)n_prompt, 0, r.logits) != PAGODA_OK)
        return fail(&r, 1);
    while (n_gen < max_new) {
        int32_t next;
        if (pg_sampler_sample(r.sampler, &sp, &rng, r.logits, r.ids, n_prompt, r.ids + n_prompt,
                              (size_t)n_gen, NULL, &next) != PAGODA_OK)
            return fail(&r, 1);
        int pos = (int)n_prompt + n_gen;
        r.ids[pos] = next;
        n_gen++;
        if (!o.ignore_eos && is_stop(cfg, r.tok, next)) {
            finish = "stop";
            break;
        }
        if (!o.json) {
            if (decode_all(r.tok, r.ids, (size_t)pos + 1, &r.text) != PAGODA_OK) return fail(&r, 1);
            size_t upto = utf8_complete_prefix(r.text.data, r.text.len);
            if (upto > emitted) {
                fwrite(r.text.data + emitted, 1, upto - emitted, stdout);
                fflush(stdout);
                emitted = upto;
            }
        }
        if (n_gen == max_new) break;
        if (pg_llama_forward(r.model, r.state, &next, 1, pos, r.logits) != PAGODA_OK)
            return fail(&r, 1);
    }

    if (decode_all(r.tok, r.ids, n_prompt + (size_t)n_gen, &r.text) != PAGODA_OK)
        return fail(&r, 1);
    size_t start = r.prompt_text.len <= r.text.len ? r.prompt_text.len : r.text.len;
    if (o.json) {
        print_json(r.ids, (int)n_prompt, n_gen, r.text.data + start, r.text.len - start, finish);
    } else {
        if (r.text.len > emitted) fwrite(r.text.data + emitted, 1, r.text.len - emitted, stdout);
        fputc('\n', stdout);
    }
    fflush(stdout);
    run_free(&r);
    return 0;
}
