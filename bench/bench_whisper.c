/* Whisper model speed at the shapes of the published models (random weights
 * from tools/gen/gen_whisper.c written to a temporary directory): encoder
 * time for one 30-second window, the cross-attention K/V of all decoder
 * layers, and single-sequence greedy decoding (tokens/s after a 4-token
 * prompt), with BF16 weights (the default path, BF16 KV) and with F32
 * compute (F32 KV). Median of R rounds, wall time on the default pool
 * (BENCH_CPU_CLOCK=1: process CPU time, meant for one thread).
 * Usage: bench_whisper [preset (tiny, base, small, medium, large-v3,
 *        large-v3-turbo; default base) or a checkpoint directory (a path with
 *        a '/', e.g. one written by `whisper_ggml gen`, which whisper.cpp then
 *        reads converted: docs/PERFORMANCE.md "Session 8")] [rounds (default 3)]
 *        [decode steps (default 64)] [bf16: the BF16 mode only] */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/alloc.h"
#include "base/pool.h"
#include "gen/gen_whisper.h"
#include "kernels/dispatch.h"
#include "model/source.h"
#include "model/whisper.h"

enum { BS = 16, MAX_LAYERS = 64 };

/* Wall time, or with BENCH_CPU_CLOCK=1 the process's CPU time (with one
 * pool thread, PAGODA_CPUS=0, a measure robust to a loaded machine: time
 * spent descheduled does not count). */
static int g_cpu_clock;
static double now(void) {
    struct timespec ts;
    clock_gettime(g_cpu_clock ? CLOCK_PROCESS_CPUTIME_ID : CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static void die(const char *what) {
    fprintf(stderr, "bench_whisper: %s: %s\n", what, pg_last_error());
    exit(1);
}

typedef struct run {
    double enc_ms, cross_ms, prefill_ms, tok_s;
} run;

static run measure(const pg_model_source *src, pg_dtype compute, int rounds, int steps) {
    pg_model_options o;
    pg_model_options_default(&o);
    o.compute = compute;
    pg_whisper *w;
    if (pg_whisper_load(src, &o, &w)) die("load");
    const pg_whisper_dims *d = pg_whisper_get_dims(w);
    if (d->dec_layers > MAX_LAYERS) die("too many layers");
    const pg_dtype kv = compute == PG_F32 ? PG_F32 : PG_BF16;
    pg_step_limits lim = {.max_tokens = 8,
                          .max_seqs = 1,
                          .max_model_len = d->n_text_ctx,
                          .kv_dtype = kv,
                          .block_size = BS};
    pg_whisper_ws *ws;
    if (pg_whisper_ws_create(w, &lim, &ws)) die("workspace");
    const size_t nmel = (size_t)d->n_mels * (size_t)d->n_frames;
    const size_t nenc = (size_t)d->n_audio_ctx * (size_t)d->d_model;
    float *mel = malloc(nmel * 4), *enc = malloc(nenc * 4), *lg = malloc((size_t)d->vocab * 4);
    uint64_t r = 88172645463325252ull;
    for (size_t i = 0; i < nmel; i++) {
        r ^= r << 13, r ^= r >> 7, r ^= r << 17;
        mel[i] = (float)(r >> 40) / (float)(1u << 24) * 2.5f - 1.0f;
    }
    double *t = malloc((size_t)rounds * sizeof *t);
    run out = {0};
    for (int i = 0; i < rounds; i++) {
        double t0 = now();
        if (pg_whisper_encode(w, ws, mel, enc)) die("encode");
        t[i] = now() - t0;
    }
    qsort(t, (size_t)rounds, sizeof *t, cmp_double);
    out.enc_ms = t[rounds / 2] * 1e3;
    /* caches: one request */
    const int32_t self_blocks = (d->n_text_ctx + BS - 1) / BS;
    const int32_t cross_blocks = (d->n_audio_ctx + BS - 1) / BS;
    pg_paged_kv self[MAX_LAYERS], cross[MAX_LAYERS];
    pg_paged_kv *cp[MAX_LAYERS];
    pg_layer_cache lc[MAX_LAYERS];
    pg_whisper_cross cr[MAX_LAYERS];
    int32_t *st = malloc((size_t)self_blocks * 4), *ct = malloc((size_t)cross_blocks * 4);
    for (int32_t i = 0; i < self_blocks; i++)
        st[i] = i;
    for (int32_t i = 0; i < cross_blocks; i++)
        ct[i] = i;
    const int32_t *stab[1] = {st}, *ctab[1] = {ct};
    for (int l = 0; l < d->dec_layers; l++) {
        self[l] = (pg_paged_kv){NULL, NULL, kv, self_blocks, d->dec_heads, BS, d->dec_head_dim};
        cross[l] = (pg_paged_kv){NULL, NULL, kv, cross_blocks, d->dec_heads, BS, d->dec_head_dim};
        size_t sb = pg_paged_kv_bytes(kv, self_blocks, d->dec_heads, BS, d->dec_head_dim);
        size_t cb = pg_paged_kv_bytes(kv, cross_blocks, d->dec_heads, BS, d->dec_head_dim);
        self[l].k = pg_calloc_aligned(1, sb), self[l].v = pg_calloc_aligned(1, sb);
        cross[l].k = pg_calloc_aligned(1, cb), cross[l].v = pg_calloc_aligned(1, cb);
        cp[l] = &cross[l];
        cr[l] = (pg_whisper_cross){&cross[l], ctab};
    }
    for (int i = 0; i < rounds; i++) {
        double t0 = now();
        if (pg_whisper_cross_kv(w, ws, enc, ct, cp)) die("cross_kv");
        t[i] = now() - t0;
    }
    qsort(t, (size_t)rounds, sizeof *t, cmp_double);
    out.cross_ms = t[rounds / 2] * 1e3;
    /* greedy decoding: a 4-token prompt, then `steps` single-token steps */
    int32_t ids[8] = {50258, 50259, 50359, 50363}, pos[8], slots[8], row = 3, n = 0;
    double tp = 0, td = 0;
    if (steps > d->n_text_ctx - 4) steps = d->n_text_ctx - 4;
    for (int s = -1; s < steps; s++) {
        const int32_t q = s < 0 ? 4 : 1;
        for (int32_t i = 0; i < q; i++)
            pos[i] = n + i, slots[i] = st[(n + i) / BS] * BS + (n + i) % BS;
        const int32_t qsl[2] = {0, q}, lens[1] = {n + q};
        for (int l = 0; l < d->dec_layers; l++)
            lc[l] = (pg_layer_cache){.kv = &self[l], .slot_mapping = slots, .block_tables = stab};
        row = q - 1;
        pg_batch b = {.num_tokens = q,
                      .num_seqs = 1,
                      .token_ids = ids,
                      .positions = pos,
                      .query_start_loc = qsl,
                      .seq_lens = lens,
                      .logit_rows = &row,
                      .num_logits = 1,
                      .layers = lc};
        double t0 = now();
        if (pg_whisper_decode(w, ws, &b, cr, lg)) die("decode");
        ids[0] = (int32_t)pg_kernels()->argmax_f32(lg, (size_t)d->vocab);
        if (s < 0)
            tp += now() - t0;
        else
            td += now() - t0;
        n += q;
    }
    out.prefill_ms = tp * 1e3;
    out.tok_s = steps > 0 ? steps / td : 0;
    for (int l = 0; l < d->dec_layers; l++) {
        pg_free(self[l].k), pg_free(self[l].v), pg_free(cross[l].k), pg_free(cross[l].v);
    }
    free(st), free(ct), free(t), free(mel), free(enc), free(lg);
    pg_whisper_ws_free(ws);
    pg_whisper_free(w);
    return out;
}

int main(int argc, char **argv) {
    const char *preset = argc > 1 ? argv[1] : "base";
    int rounds = argc > 2 ? atoi(argv[2]) : 3, steps = argc > 3 ? atoi(argv[3]) : 64;
    if (rounds < 1) rounds = 1;
    const char *cc = getenv("BENCH_CPU_CLOCK");
    g_cpu_clock = cc && *cc == '1';
    const bool given = strchr(preset, '/') != NULL; /* an existing checkpoint directory */
    char tmp[] = "/tmp/pagoda-bench-whisper-XXXXXX";
    const char *dir = given ? preset : tmp;
    double tgen = 0;
    if (!given) {
        pg_gen_whisper_opts o;
        if (pg_gen_whisper_preset(preset, &o)) die("preset");
        if (!mkdtemp(tmp)) {
            perror("mkdtemp");
            return 1;
        }
        double t0 = now();
        if (pg_gen_whisper(&o, dir)) die("generate");
        tgen = now() - t0;
    }
    pg_model_source *src;
    if (pg_model_source_open(dir, &src)) die("open");
    const pg_model_config *c = pg_model_source_config(src);
    printf("whisper %s: d_model %d, %d mels, encoder %d x %d heads, decoder %d x %d heads, "
           "vocab %d, %s (random weights written in %.1f s)\n",
           preset, c->hidden_size, c->num_mel_bins, c->encoder_layers, c->encoder_attention_heads,
           c->num_hidden_layers, c->num_attention_heads, c->vocab_size,
           pg_dtype_name(c->torch_dtype), tgen);
    printf("pool: %d threads, kernels %s; median of %d rounds, %s\n",
           pg_pool_size(pg_pool_default()), pg_kernels()->isa, rounds,
           g_cpu_clock ? "process CPU time" : "wall time");
    const pg_dtype modes[2] = {PG_DTYPE_COUNT, PG_F32};
    const int n_modes = argc > 4 && !strcmp(argv[4], "bf16") ? 1 : 2; /* "bf16": that mode only */
    run r[2];
    memset(r, 0, sizeof r);
    for (int m = 0; m < n_modes; m++) {
        r[m] = measure(src, modes[m], rounds, steps);
        printf("%-22s encoder %8.1f ms (%.1fx real time for 30 s)  cross K/V %6.1f ms  "
               "prompt %6.1f ms  decode %7.1f tok/s (%.2f ms per token)\n",
               m ? "F32 weights, F32 KV" : "BF16 weights, BF16 KV", r[m].enc_ms,
               30000.0 / r[m].enc_ms, r[m].cross_ms, r[m].prefill_ms, r[m].tok_s,
               r[m].tok_s > 0 ? 1e3 / r[m].tok_s : 0.0);
    }
    if (n_modes == 2)
        printf("ratio BF16 / F32: encoder %.2fx faster, decode %.2fx\n", r[1].enc_ms / r[0].enc_ms,
               r[0].tok_s / (r[1].tok_s > 0 ? r[1].tok_s : 1));
    pg_model_source_free(src);
    if (given) return 0;
    char path[4200];
    snprintf(path, sizeof path, "%s/config.json", dir);
    unlink(path);
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    unlink(path);
    rmdir(dir);
    return 0;
}
