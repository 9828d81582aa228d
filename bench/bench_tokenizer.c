/* Tokenizer encode throughput (MB/s of UTF-8 input, one thread).
 *
 * Corpus: the English TinyStories texts under llm/llama2c/expected/ plus the
 * llama.cpp vocab test strings, concatenated into one ~6 KB document and
 * repeated to ~4 MB; each repeat is encoded with its own call (a prompt-
 * sized unit of work). Tokenizers: Llama 3 (byte-level BPE, tokenizer.json),
 * Llama 2 (SentencePiece BPE, GGUF vocab), Qwen3 and GPT-2 (GGUF).
 * Median of 5 repeats; ratio against the 5 MB/s target.
 *
 *   make bench            # or: build/bench/bench_tokenizer [ASSETS_DIR]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tokenizer/tokenizer.h"

static const char *assets = "../shared/assets";

static char *slurp(const char *rel, size_t *len) {
    char p[2048];
    snprintf(p, sizeof p, "%s/%s", assets, rel);
    FILE *f = fopen(p, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = malloc((size_t)n + 1);
    if (!b || fread(b, 1, (size_t)n, f) != (size_t)n) {
        fclose(f);
        free(b);
        return NULL;
    }
    fclose(f);
    b[n] = 0;
    *len = (size_t)n;
    return b;
}

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static void bench(const char *label, const char *tok_rel, const char *doc, size_t doc_len, int reps_per_run) {
    char p[2048];
    snprintf(p, sizeof p, "%s/%s", assets, tok_rel);
    pg_tokenizer *tok = NULL;
    if (pg_tokenizer_load(p, &tok)) {
        printf("%-34s skipped: %s\n", label, pg_last_error());
        return;
    }
    size_t cap = doc_len + 16, n = 0, total_tokens = 0;
    int32_t *ids = malloc(cap * sizeof *ids);
    double t[5];
    for (int r = 0; r < 5; r++) {
        total_tokens = 0;
        double t0 = now();
        for (int k = 0; k < reps_per_run; k++) {
            pg_tokenizer_encode(tok, doc, doc_len, false, ids, cap, &n);
            total_tokens += n;
        }
        t[r] = now() - t0;
    }
    qsort(t, 5, sizeof t[0], cmp_d);
    double mb = (double)doc_len * reps_per_run / 1e6, mbs = mb / t[2];
    printf("%-34s %7.2f MB/s  %6.2f M tokens/s  (%.1f MB, %zu tokens/run, median of 5)  x%.1f of 5 MB/s target\n",
           label, mbs, (double)total_tokens / t[2] / 1e6, mb, total_tokens, mbs / 5.0);
    free(ids);
    pg_tokenizer_free(tok);
}

int main(int argc, char **argv) {
    if (argc > 1) assets = argv[1];
    else if (getenv("PAGODA_ASSETS")) assets = getenv("PAGODA_ASSETS");
    static const char *const parts[] = {
        "llm/llama2c/expected/stories260K_greedy_n256.txt",
        "llm/llama2c/expected/stories260K_t1.0_p0.9_s133742_n256.txt",
        "llm/llama2c/expected/stories260K.gguf_llama.cpp-simple_prompt_once_upon_a_time_n251.txt",
        "llm/llama2c/expected/stories260K_tokenization.inp",
        "llama.cpp-vocab/ggml-vocab-llama-spm.gguf.inp",
        "whisper/expected.txt",
    };
    char *doc = NULL;
    size_t doc_len = 0;
    for (size_t i = 0; i < sizeof parts / sizeof parts[0]; i++) {
        size_t n;
        char *b = slurp(parts[i], &n);
        if (!b) {
            fprintf(stderr, "bench_tokenizer: cannot read %s/%s (set PAGODA_ASSETS)\n", assets, parts[i]);
            return 1;
        }
        doc = realloc(doc, doc_len + n + 1);
        memcpy(doc + doc_len, b, n);
        doc_len += n;
        doc[doc_len++] = '\n';
        free(b);
    }
    int reps = (int)(4000000 / doc_len) + 1;
    printf("bench_tokenizer: document %zu bytes x %d calls per run, 1 thread\n", doc_len, reps);
    bench("llama3 tokenizer.json (byte BPE)", "tokenizers/llama3", doc, doc_len, reps);
    bench("llama-spm GGUF (SentencePiece)", "llama.cpp-vocab/ggml-vocab-llama-spm.gguf", doc, doc_len, reps);
    bench("qwen3 tokenizer.json (byte BPE)", "tokenizers/qwen3", doc, doc_len, reps);
    bench("gpt-2 GGUF (byte BPE)", "llama.cpp-vocab/ggml-vocab-gpt-2.gguf", doc, doc_len, reps);
    free(doc);
    return 0;
}
