/* `pagoda bench grammar`: the cost of a structured-output token mask per
 * request per step (src/grammar/token_mask.h) on a set of typical JSON
 * schemas, with a tokenizer's vocabulary (default: Llama 3's 128k tokens).
 * For each schema: compile time, then documents written the way a model
 * would (random sentences of the grammar with word-like strings), tokenized
 * and replayed token by token; each step computes the mask (fill) and
 * applies it to a logits row (apply). The first replay fills the per-node
 * caches (cold); later replays are the steady state (warm). Medians and
 * tails per schema and over all steps. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/status.h"
#include "bench/harness.h"
#include "cli/commands.h"
#include "engine/grammars.h"
#include "grammar/gram.h"
#include "grammar/token_mask.h"
#include "pagoda.h"
#include "tokenizer/tokenizer.h"

typedef struct bschema {
    const char *name;
    pagoda_grammar_kind kind;
    const char *spec;
} bschema;

static const bschema SET[] = {
    {"person", PAGODA_GRAMMAR_JSON_SCHEMA,
     "{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\"},\"age\":{\"type\":"
     "\"integer\","
     "\"minimum\":0,\"maximum\":150},\"email\":{\"type\":\"string\",\"format\":\"email\"},\"is_"
     "member\":"
     "{\"type\":\"boolean\"}},\"required\":[\"name\",\"age\"],\"additionalProperties\":false}"},
    {"order", PAGODA_GRAMMAR_JSON_SCHEMA,
     "{\"type\":\"object\",\"properties\":{\"order_id\":{\"type\":\"string\",\"pattern\":\"^ORD-[0-"
     "9]{6}$\"},"
     "\"items\":{\"type\":\"array\",\"items\":{\"type\":\"object\",\"properties\":{\"sku\":{"
     "\"type\":\"string\"},"
     "\"qty\":{\"type\":\"integer\",\"minimum\":1,\"maximum\":99},\"price\":{\"type\":\"number\"}},"
     "\"required\":[\"sku\",\"qty\",\"price\"]},\"minItems\":1,\"maxItems\":5},\"status\":{"
     "\"enum\":"
     "[\"pending\",\"shipped\",\"delivered\",\"cancelled\"]},\"date\":{\"type\":\"string\","
     "\"format\":\"date\"}},"
     "\"required\":[\"order_id\",\"items\",\"status\"]}"},
    {"tool_call", PAGODA_GRAMMAR_JSON_SCHEMA,
     "{\"type\":\"object\",\"properties\":{\"name\":{\"const\":\"get_weather\"},\"arguments\":{"
     "\"type\":\"object\","
     "\"properties\":{\"city\":{\"type\":\"string\"},\"unit\":{\"enum\":[\"celsius\","
     "\"fahrenheit\"]},\"days\":"
     "{\"type\":\"integer\",\"minimum\":1,\"maximum\":14}},\"required\":[\"city\"]}},\"required\":["
     "\"name\","
     "\"arguments\"]}"},
    {"nested_refs", PAGODA_GRAMMAR_JSON_SCHEMA,
     "{\"$defs\":{\"address\":{\"type\":\"object\",\"properties\":{\"street\":{\"type\":\"string\"}"
     ",\"city\":"
     "{\"type\":\"string\"},\"zip\":{\"type\":\"string\",\"pattern\":\"^[0-9]{5}$\"}},\"required\":"
     "[\"street\","
     "\"city\"]},\"person\":{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\"},"
     "\"home\":{\"$ref\":"
     "\"#/$defs/address\"},\"friends\":{\"type\":\"array\",\"items\":{\"$ref\":\"#/$defs/"
     "person\"},\"maxItems\":2}},"
     "\"required\":[\"name\"]}},\"$ref\":\"#/$defs/person\"}"},
    {"classify", PAGODA_GRAMMAR_JSON_SCHEMA,
     "{\"type\":\"object\",\"properties\":{\"label\":{\"enum\":[\"positive\",\"negative\","
     "\"neutral\"]},"
     "\"confidence\":{\"type\":\"number\",\"minimum\":0,\"maximum\":1},\"reasons\":{\"type\":"
     "\"array\",\"items\":"
     "{\"type\":\"string\"},\"maxItems\":3}},\"required\":[\"label\",\"confidence\"]}"},
    {"event", PAGODA_GRAMMAR_JSON_SCHEMA,
     "{\"type\":\"object\",\"properties\":{\"id\":{\"type\":\"string\",\"format\":\"uuid\"},"
     "\"title\":{\"type\":"
     "\"string\"},\"start\":{\"type\":\"string\",\"format\":\"date-time\"},\"attendees\":{\"type\":"
     "\"array\","
     "\"items\":{\"type\":\"string\",\"format\":\"email\"},\"maxItems\":4},\"location\":{\"anyOf\":"
     "[{\"type\":"
     "\"string\"},{\"type\":\"null\"}]}},\"required\":[\"id\",\"title\",\"start\"]}"},
    {"json_object", PAGODA_GRAMMAR_JSON_OBJECT, ""},
};

static uint64_t rng = 0x2545F4914F6CDD1Dull;
static uint32_t rnd(uint32_t n) {
    rng ^= rng >> 12;
    rng ^= rng << 25;
    rng ^= rng >> 27;
    return (uint32_t)(((rng * 0x2545F4914F6CDD1Dull) >> 33) % n);
}

/* A sentence of g, choosing ASCII letters / space when allowed (word-like
 * strings), closing as soon as possible after `soft` bytes. */
static int sentence(const pg_gram *g, uint8_t *out, int cap, int soft) {
    pg_gstate *m;
    if (pg_gstate_create(g, &m) != PAGODA_OK) return -1;
    int n = 0;
    while (n < cap) {
        if (pg_gstate_accepting(m) && (n >= soft || rnd(16) == 0)) break;
        uint64_t a[4];
        pg_gstate_allowed(m, a);
        int cand[256], nc = 0, word[256], nw = 0;
        for (int c = 0; c < 256; c++)
            if (a[c >> 6] >> (c & 63) & 1) {
                cand[nc++] = c;
                if ((c >= 'a' && c <= 'z') || c == ' ') word[nw++] = c;
            }
        if (!nc) break;
        /* past `soft`, prefer the structure's closing bytes */
        int c = -1;
        if (n >= soft)
            for (int k = 0; k < nc && c < 0; k++)
                if (cand[k] == '"' || cand[k] == '}' || cand[k] == ']') c = cand[k];
        if (c < 0) c = nw && rnd(10) ? word[rnd((uint32_t)nw)] : cand[rnd((uint32_t)nc)];
        uint8_t b = (uint8_t)c;
        pg_gstate_feed(m, &b, 1);
        out[n++] = b;
    }
    bool ok = pg_gstate_accepting(m);
    pg_gstate_free(m);
    return ok ? n : -1;
}

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double pct(double *v, int n, double p) {
    if (!n) return 0;
    int i = (int)ceil(p * n) - 1;
    return v[i < 0 ? 0 : i];
}

/* One batch through the engine: n requests, out_len tokens each (EOS
 * ignored; the constraint cannot complete within out_len), constrained by
 * g or not. Returns decode tokens per second (steps after every request
 * has its first token), or < 0 on error. */
static double engine_batch(pagoda_engine *e, pagoda_grammar *g, int n, int out_len) {
    for (int i = 0; i < n; i++) {
        pagoda_request r;
        pagoda_request_defaults(e, &r);
        char prompt[64];
        snprintf(prompt, sizeof prompt, "Request %d: write the records as JSON.", i);
        r.prompt = prompt;
        r.sampling.max_tokens = out_len;
        /* plain sampling, so the sampler costs the same with and without
         * the mask (a top-p over a near-uniform 128k row sorts most of it) */
        r.sampling.temperature = 1.0f;
        r.sampling.top_p = 1.0f;
        r.sampling.top_k = 0;
        r.sampling.min_p = 0.0f;
        r.sampling.seed = 1000 + i;
        r.sampling.ignore_eos = true;
        r.grammar = g;
        uint64_t id;
        if (pagoda_engine_add_request(e, &r, &id, NULL) != PAGODA_OK) return -1;
    }
    int first = 0;
    size_t tokens = 0;
    double t_start = 0;
    while (pagoda_engine_has_unfinished(e)) {
        size_t no;
        if (pagoda_engine_step(e, &no) != PAGODA_OK) return -1;
        const pagoda_output *out = pagoda_engine_outputs(e, &no);
        size_t step_tokens = 0;
        for (size_t k = 0; k < no; k++) {
            if (out[k].finish_reason == PAGODA_FINISH_ERROR) {
                fprintf(stderr, "pagoda bench grammar: %s\n", out[k].error);
                return -1;
            }
            if (out[k].n_output_tokens == 1 && out[k].n_new_tokens) first++;
            step_tokens += out[k].n_new_tokens;
        }
        if (t_start > 0) tokens += step_tokens;
        if (first == n && t_start == 0) t_start = pg_bench_now();
    }
    return tokens / (pg_bench_now() - t_start);
}

/* Batch decode throughput with every request constrained vs none, runs
 * alternated, medians. */
static int engine_mode(const char *model, int batch, int out_len, int runs) {
    pagoda_engine_options opt;
    pagoda_engine_options_default(&opt);
    opt.max_num_seqs = batch;
    pagoda_engine *e;
    if (pagoda_engine_create(model, &opt, &e) != PAGODA_OK) {
        fprintf(stderr, "pagoda bench grammar: %s\n", pagoda_last_error());
        return 1;
    }
    /* a list of order records: cannot complete within out_len tokens */
    const char *schema = "{\"type\":\"array\",\"minItems\":1000,\"items\":{\"type\":\"object\","
                         "\"properties\":{\"order_id\":"
                         "{\"type\":\"string\",\"pattern\":\"^ORD-[0-9]{6}$\"},\"customer\":{"
                         "\"type\":\"string\"},\"qty\":"
                         "{\"type\":\"integer\",\"minimum\":1,\"maximum\":99},\"status\":{\"enum\":"
                         "[\"pending\",\"shipped\"]}},"
                         "\"required\":[\"order_id\",\"customer\",\"qty\",\"status\"]}}";
    pagoda_grammar *g;
    if (pagoda_grammar_compile(e, PAGODA_GRAMMAR_JSON_SCHEMA, schema, 0, &g) != PAGODA_OK) {
        fprintf(stderr, "pagoda bench grammar: %s\n", pagoda_last_error());
        pagoda_engine_free(e);
        return 1;
    }
    /* warm-up: the caches of the nodes the outputs reach, and the engine */
    if (engine_batch(e, g, batch, out_len) < 0 || engine_batch(e, NULL, batch, 8) < 0) {
        pagoda_grammar_free(g);
        pagoda_engine_free(e);
        return 1;
    }
    double *free_tps = calloc((size_t)runs, sizeof *free_tps),
           *con_tps = calloc((size_t)runs, sizeof *con_tps);
    double *ratio = calloc((size_t)runs, sizeof *ratio);
    int rc = 0;
    for (int r = 0; r < runs && !rc; r++) {
        if (r % 2 == 0) { /* ABBA order: a drift in load favours neither */
            free_tps[r] = engine_batch(e, NULL, batch, out_len);
            con_tps[r] = engine_batch(e, g, batch, out_len);
        } else {
            con_tps[r] = engine_batch(e, g, batch, out_len);
            free_tps[r] = engine_batch(e, NULL, batch, out_len);
        }
        if (free_tps[r] < 0 || con_tps[r] < 0) rc = 1;
        ratio[r] = con_tps[r] / free_tps[r];
        printf("run %d: unconstrained %.1f tok/s, constrained %.1f tok/s (%.1f%%)\n", r,
               free_tps[r], con_tps[r], 100.0 * con_tps[r] / free_tps[r]);
        fflush(stdout);
    }
    if (!rc) {
        qsort(free_tps, (size_t)runs, sizeof *free_tps, cmp_d);
        qsort(con_tps, (size_t)runs, sizeof *con_tps, cmp_d);
        qsort(ratio, (size_t)runs, sizeof *ratio, cmp_d);
        double a = free_tps[runs / 2], b = con_tps[runs / 2];
        printf("batch %d decode, %d tokens each: median unconstrained %.1f tok/s, constrained %.1f "
               "tok/s "
               "= %.1f%%; median of the per-run ratios %.1f%% (target >= 95%%)\n",
               batch, out_len, a, b, 100.0 * b / a, 100.0 * ratio[runs / 2]);
    }
    free(ratio);
    free(free_tps);
    free(con_tps);
    pagoda_grammar_free(g);
    pagoda_engine_free(e);
    return rc;
}

static void usage(FILE *f) {
    fputs("usage: pagoda bench grammar [--tokenizer DIR] [--docs N] [--repeats R]\n"
          "\n"
          "Token-mask cost of structured outputs per request per step on typical JSON\n"
          "schemas (person, order, tool_call, nested_refs, classify, event, json_object).\n"
          "  --tokenizer DIR  tokenizer.json directory or .gguf (default\n"
          "                   $PAGODA_ASSETS/tokenizers/llama3: Llama 3, 128256 tokens)\n"
          "  --docs N         documents per schema (default 8)\n"
          "  --repeats R      warm replays of each document (default 5)\n"
          "  --model DIR      instead: batch decode throughput through the engine with every\n"
          "                   request constrained (a JSON schema) vs unconstrained, runs\n"
          "                   alternated, medians; --batch N (32), --output-len N (64),\n"
          "                   --runs N (3)\n",
          f);
}

int pg_cmd_bench_grammar(int argc, char **argv) {
    const char *tokdir = NULL, *model = NULL;
    int docs = 8, repeats = 5, batch = 32, out_len = 64, runs = 3;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            usage(stdout);
            return 0;
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "pagoda bench grammar: %s needs a value\n", argv[i]);
            return 2;
        }
        if (!strcmp(argv[i], "--tokenizer"))
            tokdir = argv[++i];
        else if (!strcmp(argv[i], "--docs"))
            docs = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--repeats"))
            repeats = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--model"))
            model = argv[++i];
        else if (!strcmp(argv[i], "--batch"))
            batch = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--output-len"))
            out_len = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--runs"))
            runs = atoi(argv[++i]);
        else {
            fprintf(stderr, "pagoda bench grammar: unknown option '%s'\n", argv[i]);
            usage(stderr);
            return 2;
        }
    }
    if (docs < 1 || repeats < 1) {
        fprintf(stderr, "pagoda bench grammar: --docs and --repeats must be >= 1\n");
        return 2;
    }
    if (model) {
        if (batch < 1 || out_len < 2 || runs < 1) {
            fprintf(stderr,
                    "pagoda bench grammar: --batch, --output-len, --runs must be positive\n");
            return 2;
        }
        return engine_mode(model, batch, out_len, runs);
    }
    char def[4096];
    if (!tokdir) {
        const char *assets = getenv("PAGODA_ASSETS");
        snprintf(def, sizeof def, "%s/tokenizers/llama3", assets ? assets : "../shared/assets");
        tokdir = def;
    }
    pg_tokenizer *tok;
    if (pg_tokenizer_load(tokdir, &tok) != PAGODA_OK) {
        fprintf(stderr, "pagoda bench grammar: %s\n", pg_last_error());
        return 1;
    }
    int32_t V = pg_tokenizer_vocab_size(tok), eos = pg_tokenizer_eos(tok);
    double t0 = pg_bench_now();
    pg_vocab_trie *trie;
    if (pg_grammars_vocab_trie(tok, V, &trie) != PAGODA_OK) {
        fprintf(stderr, "pagoda bench grammar: %s\n", pg_last_error());
        pg_tokenizer_free(tok);
        return 1;
    }
    printf("tokenizer %s: %d tokens, vocabulary trie %.1f ms\n", tokdir, V,
           (pg_bench_now() - t0) * 1e3);
    printf("%-12s %7s %9s %6s | %9s %9s %9s %9s | %9s | %9s\n", "schema", "nodes", "compile",
           "steps", "fill p50", "fill p90", "fill p99", "fill max", "apply p50", "cold/doc");
    printf("%-12s %7s %9s %6s | %9s %9s %9s %9s | %9s | %9s\n", "", "", "ms", "", "us", "us", "us",
           "us", "us", "ms");
    size_t cap_all = 1 << 16;
    double *all_fill = malloc(cap_all * sizeof *all_fill),
           *all_apply = malloc(cap_all * sizeof *all_apply);
    size_t n_all = 0;
    uint64_t *bits = calloc((size_t)(V + 63) / 64, 8);
    float *logits = malloc((size_t)V * sizeof *logits);
    int rc = 0;
    for (size_t s = 0; s < sizeof SET / sizeof *SET && !rc; s++) {
        t0 = pg_bench_now();
        pg_gram *g;
        if (pg_grammar_build(SET[s].kind, SET[s].spec, strlen(SET[s].spec), &g) != PAGODA_OK) {
            fprintf(stderr, "pagoda bench grammar: %s: %s\n", SET[s].name, pg_last_error());
            rc = 1;
            break;
        }
        double compile_ms = (pg_bench_now() - t0) * 1e3;
        int32_t nodes = pg_gram_num_nodes(g);
        pg_tgram *t;
        if (pg_tgram_create(g, trie, &t) != PAGODA_OK) {
            rc = 1;
            break;
        }
        size_t cap = 1 << 15, nf = 0;
        double *fill = malloc(cap * sizeof *fill), *apply = malloc(cap * sizeof *apply);
        double cold_total = 0;
        int ndoc = 0;
        for (int d = 0; d < docs; d++) {
            uint8_t doc[4096];
            int n = sentence(pg_tgram_gram(t), doc, 1500, 120 + (int)rnd(200));
            if (n < 0) continue;
            int32_t ids[4096];
            size_t nid;
            if (pg_tokenizer_encode(tok, (const char *)doc, (size_t)n, false, ids, 4096, &nid) !=
                    PAGODA_OK ||
                nid > 4096)
                continue;
            ndoc++;
            for (int rep = 0; rep <= repeats; rep++) {
                pg_tmatch *m;
                pg_tmatch_create(t, &eos, 1, &m);
                double doc_t = 0;
                for (size_t k = 0; k <= nid; k++) {
                    double a = pg_bench_now();
                    pg_tmatch_fill_mask(m, bits);
                    double b = pg_bench_now();
                    for (int32_t i = 0; i < V; i++)
                        logits[i] = (float)(i & 7);
                    double c = pg_bench_now();
                    pg_tmatch_apply(m, logits, V);
                    double e = pg_bench_now();
                    doc_t += b - a;
                    if (rep > 0 && nf < cap) {
                        fill[nf] = (b - a) * 1e6;
                        apply[nf++] = (e - c) * 1e6;
                    }
                    if (k < nid && !pg_tmatch_accept(m, ids[k])) {
                        fprintf(stderr, "pagoda bench grammar: %s: token %zu refused\n",
                                SET[s].name, k);
                        rc = 1;
                        break;
                    }
                }
                if (rep == 0) cold_total += doc_t;
                pg_tmatch_free(m);
                if (rc) break;
            }
        }
        for (size_t i = 0; i < nf && n_all < cap_all; i++, n_all++) {
            all_fill[n_all] = fill[i];
            all_apply[n_all] = apply[i];
        }
        qsort(fill, nf, sizeof *fill, cmp_d);
        qsort(apply, nf, sizeof *apply, cmp_d);
        printf("%-12s %7d %9.2f %6zu | %9.2f %9.2f %9.2f %9.2f | %9.2f | %9.1f\n", SET[s].name,
               nodes, compile_ms, nf / (size_t)repeats, pct(fill, (int)nf, 0.5),
               pct(fill, (int)nf, 0.9), pct(fill, (int)nf, 0.99), nf ? fill[nf - 1] : 0,
               pct(apply, (int)nf, 0.5), ndoc ? cold_total * 1e3 / ndoc : 0);
        free(fill);
        free(apply);
        pg_tgram_release(t);
    }
    if (!rc) {
        qsort(all_fill, n_all, sizeof *all_fill, cmp_d);
        qsort(all_apply, n_all, sizeof *all_apply, cmp_d);
        double p50 = pct(all_fill, (int)n_all, 0.5), a50 = pct(all_apply, (int)n_all, 0.5);
        printf("all steps: %zu, fill median %.2f us (p90 %.2f, p99 %.2f); fill + apply median %.2f "
               "us; "
               "budget 100 us: %s\n",
               n_all, p50, pct(all_fill, (int)n_all, 0.9), pct(all_fill, (int)n_all, 0.99), a50,
               a50 <= 100 ? "met" : "NOT met");
    }
    free(all_fill);
    free(all_apply);
    free(bits);
    free(logits);
    pg_vocab_trie_free(trie);
    pg_tokenizer_free(tok);
    return rc;
}
