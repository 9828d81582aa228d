/* gguf_kl: pagoda's KL divergence of quantized GGUF files from a reference
 * model, on the tokens of a llama.cpp `llama-perplexity --kl-divergence-base`
 * file (docs/QUANTIZATION.md, issue 23).
 *
 *   gguf_kl BASE.kld REF.gguf MODEL.gguf... [--chunks N] [--threads T] [--no-bos]
 *           [--ref-compute f32|auto]
 *
 * BASE.kld is what `llama-perplexity -m REF.gguf -f TEXT -c C
 * --kl-divergence-base BASE.kld` writes: "_logits_", u32 n_ctx, i32 n_vocab,
 * i32 n_chunk, then n_chunk * n_ctx i32 token ids (llama.cpp's tokenization
 * of TEXT), then llama.cpp's log-probabilities (not read here). pagoda runs
 * REF (the F16 / BF16 model; by default with exact f32 linear layers,
 * --ref-compute f32) and every MODEL over each chunk of n_ctx tokens as one
 * prefilled request, the chunk's first token replaced by BOS (the file's
 * first token, which llama.cpp's tokenizer put there; --no-bos keeps the
 * chunks as they are), and scores the rows llama-perplexity --kl-divergence
 * scores: positions n_ctx/2 .. n_ctx-2 of every chunk (n_ctx - 1 - n_ctx/2
 * rows each). Per MODEL it prints the mean KL(P_ref || P_model) (natural
 * log, over the full vocabulary), its standard error over rows, the maximum
 * and the percentage of rows whose argmax agrees (llama.cpp's "Mean KLD"
 * and "Same top p").
 *
 * Errors (one line on stderr, exit 1): an unreadable or truncated BASE.kld,
 * a vocabulary size different from the model's, a token id out of range,
 * n_ctx above 65536, a model that fails to load or run. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/pool.h"
#include "kernels/attention.h"
#include "model/model.h"
#include "model/source.h"

enum { BS = 16 };

static void die(const char *what) {
    fprintf(stderr, "gguf_kl: %s\n", what);
    exit(1);
}

static void die_pg(const char *path) {
    fprintf(stderr, "gguf_kl: %s: %s\n", path, pg_last_error());
    exit(1);
}

/* Logits [n_ctx - 1 - n_ctx/2, V] of rows n_ctx/2 .. n_ctx-2 of tokens[0..n_ctx) run as one
 * request prefilled in one step (F32 paged KV cache, blocks of 16, block 0 unused as the
 * engine's null block). */
static void chunk_logits(const pg_model *m, const int32_t *tokens, int32_t n, float *out) {
    const int32_t L = pg_model_num_layers(m), nb = (n + BS - 1) / BS + 1;
    const int32_t first = n / 2, rows_n = n - 1 - first;
    pg_paged_kv *kv = calloc((size_t)L, sizeof *kv);
    pg_layer_cache *lc = calloc((size_t)L, sizeof *lc);
    void **states = calloc((size_t)L, sizeof *states);
    int32_t *table = malloc((size_t)nb * 4), *pos = malloc((size_t)n * 4);
    int32_t *slot = malloc((size_t)n * 4), *rows = malloc((size_t)rows_n * 4);
    if (!kv || !lc || !states || !table || !pos || !slot || !rows) die("out of memory");
    for (int32_t i = 0; i < nb; i++)
        table[i] = i + 1 < nb ? i + 1 : 0;
    size_t total = 0;
    for (int32_t l = 0; l < L; l++) {
        const pg_layer_cache_spec *c = pg_model_layer_cache(m, l);
        if (c->kind == PG_LAYER_CACHE_FULL || c->kind == PG_LAYER_CACHE_SLIDING)
            total += 2 * pg_paged_kv_bytes(PG_F32, nb, c->num_kv_heads, BS, c->head_dim);
        else if (c->kind == PG_LAYER_CACHE_STATE)
            total += ((size_t)c->state_bytes + 63) / 64 * 64;
    }
    char *mem = pg_calloc_aligned(1, total ? total : 64);
    if (!mem) die("out of memory (KV cache)");
    size_t off = 0;
    for (int32_t l = 0; l < L; l++) {
        const pg_layer_cache_spec *c = pg_model_layer_cache(m, l);
        if (c->kind == PG_LAYER_CACHE_FULL || c->kind == PG_LAYER_CACHE_SLIDING) {
            size_t half = pg_paged_kv_bytes(PG_F32, nb, c->num_kv_heads, BS, c->head_dim);
            kv[l] = (pg_paged_kv){.k = mem + off,
                                  .v = mem + off + half,
                                  .dtype = PG_F32,
                                  .num_blocks = nb,
                                  .num_kv_heads = c->num_kv_heads,
                                  .block_size = BS,
                                  .head_dim = c->head_dim};
            off += 2 * half;
            lc[l].kv = &kv[l];
            lc[l].slot_mapping = slot;
            lc[l].block_tables = (const int32_t *const *)&table;
        } else if (c->kind == PG_LAYER_CACHE_STATE) {
            states[l] = mem + off; /* zero: a fresh sequence */
            off += ((size_t)c->state_bytes + 63) / 64 * 64;
            lc[l].states = &states[l];
        }
    }
    for (int32_t i = 0; i < n; i++) {
        pos[i] = i;
        slot[i] = table[i / BS] * BS + i % BS;
    }
    for (int32_t i = 0; i < rows_n; i++)
        rows[i] = first + i;
    /* logit rows count against max_seqs: room for all of them */
    pg_step_limits lim = {
        .max_tokens = n, .max_seqs = n, .max_model_len = n, .kv_dtype = PG_F32, .block_size = BS};
    pg_model_workspace *ws;
    if (pg_model_workspace_create(m, &lim, &ws) != PAGODA_OK) die_pg("workspace");
    int32_t qsl[2] = {0, n}, lens[1] = {n};
    pg_batch b = {.num_tokens = n,
                  .num_seqs = 1,
                  .token_ids = tokens,
                  .positions = pos,
                  .query_start_loc = qsl,
                  .seq_lens = lens,
                  .logit_rows = rows,
                  .num_logits = rows_n,
                  .layers = lc};
    if (pg_model_forward(m, ws, &b, out) != PAGODA_OK) die_pg("forward");
    pg_model_workspace_free(ws);
    pg_free(mem);
    free(kv);
    free(lc);
    free(states);
    free(table);
    free(pos);
    free(slot);
    free(rows);
}

/* In place: logits [n, V] -> log-softmax (double sums). */
static void log_softmax(float *x, int32_t n, int32_t V) {
    for (int32_t t = 0; t < n; t++) {
        float *a = x + (size_t)t * V;
        float mx = a[0];
        for (int32_t v = 1; v < V; v++)
            mx = a[v] > mx ? a[v] : mx;
        double z = 0;
        for (int32_t v = 0; v < V; v++)
            z += exp((double)a[v] - mx);
        const double lz = mx + log(z);
        for (int32_t v = 0; v < V; v++)
            a[v] = (float)((double)a[v] - lz);
    }
}

static int32_t argmax(const float *a, int32_t V) {
    int32_t best = 0;
    for (int32_t v = 1; v < V; v++)
        if (a[v] > a[best]) best = v;
    return best;
}

static pg_model *load(const char *path, pg_dtype compute, pg_model_source **src) {
    pg_model_options o;
    pg_model_options_default(&o);
    o.compute = compute;
    pg_model *m;
    if (pg_model_source_open(path, src) != PAGODA_OK) die_pg(path);
    if (pg_model_load(*src, &o, &m) != PAGODA_OK) die_pg(path);
    return m;
}

int main(int argc, char **argv) {
    const char *paths[64];
    int np = 0, chunks = 0, threads = 0, bos = 1;
    pg_dtype ref_compute = PG_F32;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--chunks") && i + 1 < argc)
            chunks = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--threads") && i + 1 < argc)
            threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--no-bos"))
            bos = 0;
        else if (!strcmp(argv[i], "--ref-compute") && i + 1 < argc) {
            const char *v = argv[++i];
            if (!strcmp(v, "f32"))
                ref_compute = PG_F32;
            else if (!strcmp(v, "auto"))
                ref_compute = PG_DTYPE_COUNT;
            else
                die("--ref-compute: f32 or auto");
        } else if (argv[i][0] == '-' || np == 64) {
            die("usage: gguf_kl BASE.kld REF.gguf MODEL.gguf... [--chunks N] [--threads T] "
                "[--no-bos] [--ref-compute f32|auto]");
        } else
            paths[np++] = argv[i];
    }
    if (np < 3)
        die("usage: gguf_kl BASE.kld REF.gguf MODEL.gguf... [--chunks N] [--threads T] "
            "[--no-bos] [--ref-compute f32|auto]");
    if (threads > 0) {
        pg_pool_options po = pg_pool_options_default();
        po.n_threads = threads;
        if (pg_pool_default_configure(&po) != PAGODA_OK) die_pg("--threads");
    }

    FILE *f = fopen(paths[0], "rb");
    if (!f) die("cannot open the .kld file");
    char magic[8];
    uint32_t n_ctx;
    int32_t n_vocab, n_chunk;
    if (fread(magic, 1, 8, f) != 8 || memcmp(magic, "_logits_", 8) ||
        fread(&n_ctx, 4, 1, f) != 1 || fread(&n_vocab, 4, 1, f) != 1 ||
        fread(&n_chunk, 4, 1, f) != 1)
        die("not a llama-perplexity --kl-divergence-base file (no _logits_ header)");
    if (n_ctx < 4 || n_ctx > 65536 || n_chunk < 1 || n_vocab < 1)
        die("bad n_ctx / n_vocab / n_chunk in the .kld header");
    if (chunks > 0 && chunks < n_chunk) n_chunk = chunks;
    const int32_t n = (int32_t)n_ctx, rows_n = n - 1 - n / 2;
    int32_t *tok = malloc((size_t)n * (size_t)n_chunk * 4);
    if (!tok) die("out of memory");
    if (fread(tok, 4, (size_t)n * (size_t)n_chunk, f) != (size_t)n * (size_t)n_chunk)
        die("truncated .kld file (tokens)");
    fclose(f);
    for (size_t i = 0; i < (size_t)n * (size_t)n_chunk; i++)
        if (tok[i] < 0 || tok[i] >= n_vocab) die("token id out of range in the .kld file");
    if (bos)
        for (int32_t c = 1; c < n_chunk; c++)
            tok[(size_t)c * n] = tok[0];

    const int32_t V = n_vocab;
    const size_t per_chunk = (size_t)rows_n * V;
    float *ref = malloc(per_chunk * (size_t)n_chunk * sizeof *ref);
    float *got = malloc(per_chunk * sizeof *got);
    if (!ref || !got) die("out of memory (logits)");
    pg_model_source *src;
    pg_model *m = load(paths[1], ref_compute, &src);
    if (pg_model_get_config(m)->vocab_size != V) die("the reference's vocab differs from the .kld's");
    for (int32_t c = 0; c < n_chunk; c++) {
        chunk_logits(m, tok + (size_t)c * n, n, ref + per_chunk * c);
        log_softmax(ref + per_chunk * c, rows_n, V);
    }
    pg_model_free(m);
    pg_model_source_free(src);
    printf("reference %s: %d chunks of %d tokens, %d rows each (positions %d..%d)\n", paths[1],
           n_chunk, n, rows_n, n / 2, n - 2);
    printf("%-40s %12s %10s %10s %10s\n", "model", "mean KLD", "+-", "max KLD", "same top1");
    for (int p = 2; p < np; p++) {
        m = load(paths[p], PG_DTYPE_COUNT, &src);
        if (pg_model_get_config(m)->vocab_size != V) die("a model's vocab differs from the .kld's");
        double s = 0, s2 = 0, mx = 0;
        long same = 0, cnt = 0;
        for (int32_t c = 0; c < n_chunk; c++) {
            chunk_logits(m, tok + (size_t)c * n, n, got);
            log_softmax(got, rows_n, V);
            for (int32_t t = 0; t < rows_n; t++) {
                const float *a = ref + per_chunk * c + (size_t)t * V, *b = got + (size_t)t * V;
                double kl = 0;
                for (int32_t v = 0; v < V; v++)
                    kl += exp((double)a[v]) * ((double)a[v] - b[v]);
                s += kl;
                s2 += kl * kl;
                mx = kl > mx ? kl : mx;
                same += argmax(a, V) == argmax(b, V);
                cnt++;
            }
        }
        const double mean = s / cnt, var = s2 / cnt - mean * mean;
        const double se = cnt > 1 && var > 0 ? sqrt(var / (cnt - 1)) : 0;
        const char *name = strrchr(paths[p], '/');
        printf("%-40s %12.6f %10.6f %10.5f %9.2f%%\n", name ? name + 1 : paths[p], mean, se, mx,
               100.0 * same / cnt);
        fflush(stdout);
        pg_model_free(m);
        pg_model_source_free(src);
    }
    free(ref);
    free(got);
    free(tok);
    return 0;
}
