/* Whisper (src/model/whisper.c) against the whisper-tiny-random oracle
 * (openai/whisper on random BF16-valued weights, f32 compute; see its
 * expected.json):
 *   - the source: config fields, conv weights in the canonical k-major layout,
 *     pg_model_load's view (self then cross layers, encoder pieces);
 *   - F32 compute: encoder(expected_mel.npy) within 1e-3 of expected_encoder.npy,
 *     decoder logits of the 16 named tokens within 1e-3 of
 *     expected_decoder_logits.npy, greedy ids (plain and with OpenAI's
 *     suppression rules) equal to expected.json's, token-by-token decoding
 *     bitwise equal to the one-step prefill;
 *   - jfk.wav -> pg_log_mel -> encoder end to end;
 *   - encoder steps of two windows interleaved on one workspace = each alone;
 *   - the default BF16 path, its drift printed and bounded;
 *   - a random model of another shape (tools/gen/gen_whisper.c: 128 mels, an
 *     untied proj_out, encoder and decoder head counts differing, a 64-position
 *     encoder) against a double-precision forward written here from the HF
 *     tensors as stored (conv weights [out, in, 3]);
 *   - argument errors.
 * Speed of the encoder at the oracle's shape is printed (one run). */
#include "testutil.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gen/gen_whisper.h"
#include "npy.h"

#include "audio/mel.h"
#include "base/alloc.h"
#include "base/pool.h"
#include "kernels/attention.h"
#include "kernels/dispatch.h"
#include "model/model.h"
#include "model/safetensors.h"
#include "model/source.h"
#include "model/whisper.h"

#define ORACLE "oracles/whisper-tiny-random/"
#define MAX_LAYERS 8
#define BS 16           /* KV block size of the test's caches */
#define SELF_BLOCKS 28  /* 448 positions */
#define CROSS_BLOCKS 94 /* ceil(1500 / 16) */

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static double max_abs_diff(const float *a, const float *b, size_t n) {
    double m = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - (double)b[i]);
        if (!(d <= m)) m = d; /* NaN wins */
    }
    return m;
}

static pg_model_source *open_oracle(void) {
    pg_model_source *src;
    if (pg_model_source_open(pg_test_asset(ORACLE "hf"), &src) != PAGODA_OK)
        fail_msg("open: %s", pg_last_error());
    return src;
}

static pg_whisper *load(const pg_model_source *src, pg_dtype compute) {
    pg_model_options o;
    pg_model_options_default(&o);
    o.compute = compute;
    pg_whisper *w;
    if (pg_whisper_load(src, &o, &w) != PAGODA_OK) fail_msg("load: %s", pg_last_error());
    return w;
}

static pg_whisper_ws *make_ws(const pg_whisper *w, pg_dtype kv, int32_t max_tokens) {
    pg_step_limits lim = {.max_tokens = max_tokens,
                          .max_seqs = max_tokens, /* logit rows too */
                          .max_model_len = 448,
                          .kv_dtype = kv,
                          .block_size = BS};
    pg_whisper_ws *ws;
    if (pg_whisper_ws_create(w, &lim, &ws) != PAGODA_OK) fail_msg("ws: %s", pg_last_error());
    return ws;
}

static cJSON *expected_json(void) {
    size_t len;
    char *text = pg_test_read_file(pg_test_asset(ORACLE "expected.json"), &len);
    cJSON *j = cJSON_ParseWithLength(text, len);
    free(text);
    assert_non_null(j);
    return j;
}

/* ints of the array at path a.b (NULL-terminated keys) into out; returns count. */
static int json_ints(const cJSON *root, const char *k1, const char *k2, int *out, int cap) {
    const cJSON *a =
        cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(root, k1), k2);
    assert_true(cJSON_IsArray(a));
    int n = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, a) {
        assert_true(n < cap);
        out[n++] = (int)e->valuedouble;
    }
    return n;
}

/* ---- one request's decoder state: paged self K/V and cross K/V per layer ------------ */

typedef struct req {
    int L;
    pg_paged_kv self[MAX_LAYERS], cross[MAX_LAYERS];
    int32_t self_table[SELF_BLOCKS], cross_table[CROSS_BLOCKS];
    const int32_t *self_tables[1], *cross_tables[1];
    pg_layer_cache lc[MAX_LAYERS];
    pg_whisper_cross cr[MAX_LAYERS];
    int32_t n; /* tokens in the self cache */
} req;

static void req_init(req *r, const pg_whisper *w, pg_whisper_ws *ws, const float *enc,
                     pg_dtype dt) {
    const pg_whisper_dims *d = pg_whisper_get_dims(w);
    memset(r, 0, sizeof *r);
    r->L = d->dec_layers;
    assert_true(r->L <= MAX_LAYERS);
    /* block ids scattered: the self cache backwards, the cross one by a stride */
    for (int i = 0; i < SELF_BLOCKS; i++)
        r->self_table[i] = SELF_BLOCKS - 1 - i;
    for (int i = 0; i < CROSS_BLOCKS; i++)
        r->cross_table[i] = (i * 7) % CROSS_BLOCKS;
    r->self_tables[0] = r->self_table;
    r->cross_tables[0] = r->cross_table;
    pg_paged_kv *kvp[MAX_LAYERS];
    for (int l = 0; l < r->L; l++) {
        r->self[l] = (pg_paged_kv){NULL, NULL, dt, SELF_BLOCKS, d->dec_heads, BS, d->dec_head_dim};
        r->cross[l] =
            (pg_paged_kv){NULL, NULL, dt, CROSS_BLOCKS, d->dec_heads, BS, d->dec_head_dim};
        size_t sb = pg_paged_kv_bytes(dt, SELF_BLOCKS, d->dec_heads, BS, d->dec_head_dim);
        size_t cb = pg_paged_kv_bytes(dt, CROSS_BLOCKS, d->dec_heads, BS, d->dec_head_dim);
        r->self[l].k = pg_calloc_aligned(1, sb);
        r->self[l].v = pg_calloc_aligned(1, sb);
        r->cross[l].k = pg_calloc_aligned(1, cb);
        r->cross[l].v = pg_calloc_aligned(1, cb);
        assert_true(r->self[l].k && r->self[l].v && r->cross[l].k && r->cross[l].v);
        r->cr[l] = (pg_whisper_cross){&r->cross[l], r->cross_tables};
        kvp[l] = &r->cross[l];
    }
    if (pg_whisper_cross_kv(w, ws, enc, r->cross_table, kvp) != PAGODA_OK)
        fail_msg("cross_kv: %s", pg_last_error());
}

static void req_free(req *r) {
    for (int l = 0; l < r->L; l++) {
        pg_free(r->self[l].k), pg_free(r->self[l].v);
        pg_free(r->cross[l].k), pg_free(r->cross[l].v);
    }
}

/* Append n tokens in one decoder step; logits of every row (all) or the last. */
static pagoda_status req_step(req *r, const pg_whisper *w, pg_whisper_ws *ws, const int *tokens,
                              int n, bool all, float *logits) {
    int32_t ids[64], pos[64], slots[64], rows[64];
    assert_true(n <= 64);
    for (int i = 0; i < n; i++) {
        ids[i] = tokens[i];
        pos[i] = r->n + i;
        slots[i] = pos[i] < SELF_BLOCKS * BS ? r->self_table[pos[i] / BS] * BS + pos[i] % BS : -1;
        rows[i] = all ? i : n - 1;
    }
    const int32_t qsl[2] = {0, n}, lens[1] = {r->n + n};
    for (int l = 0; l < r->L; l++)
        r->lc[l] = (pg_layer_cache){
            .kv = &r->self[l], .slot_mapping = slots, .block_tables = r->self_tables};
    pg_batch b = {.num_tokens = n,
                  .num_seqs = 1,
                  .token_ids = ids,
                  .positions = pos,
                  .query_start_loc = qsl,
                  .seq_lens = lens,
                  .logit_rows = rows,
                  .num_logits = all ? n : 1,
                  .layers = r->lc};
    pagoda_status st = pg_whisper_decode(w, ws, &b, r->cr, logits);
    if (st == PAGODA_OK) r->n += n;
    return st;
}

/* ---- the source ------------------------------------------------------------------------- */

static void test_source_and_config(void **state) {
    (void)state;
    pg_model_source *src = open_oracle();
    const pg_model_config *c = pg_model_source_config(src);
    assert_string_equal(c->architecture, "WhisperForConditionalGeneration");
    assert_int_equal(c->hidden_size, 64);
    assert_int_equal(c->num_hidden_layers, 2); /* the decoder's */
    assert_int_equal(c->encoder_layers, 2);
    assert_int_equal(c->num_attention_heads, 4);
    assert_int_equal(c->encoder_attention_heads, 4);
    assert_int_equal(c->intermediate_size, 256);
    assert_int_equal(c->encoder_ffn_dim, 256);
    assert_int_equal(c->num_mel_bins, 80);
    assert_int_equal(c->max_source_positions, 1500);
    assert_int_equal(c->max_position_embeddings, 448);
    assert_int_equal(c->vocab_size, 51865);
    assert_int_equal(c->decoder_start_token_id, 50258);
    assert_true(c->tie_word_embeddings);
    assert_int_equal(pg_model_source_n_tensors(src), 89);
    /* conv weights: [out, in, 3] in the file, [out, 3 * in] k-major in the source */
    pg_safetensors *st;
    char path[4096];
    snprintf(path, sizeof path, "%s", pg_test_asset(ORACLE "hf/model.safetensors"));
    assert_int_equal(pg_safetensors_open(path, &st), PAGODA_OK);
    const char *names[2] = {"model.encoder.conv1.weight", "model.encoder.conv2.weight"};
    for (int i = 0; i < 2; i++) {
        const pg_tensor *raw = pg_safetensors_find(st, names[i]);
        const pg_tensor *t = pg_model_source_tensor(src, names[i]);
        assert_non_null(raw);
        assert_non_null(t);
        assert_int_equal(raw->ndim, 3);
        assert_int_equal(t->ndim, 2);
        const int64_t O = raw->shape[0], C = raw->shape[1];
        assert_int_equal(t->shape[0], O);
        assert_int_equal(t->shape[1], 3 * C);
        const uint16_t *a = raw->data, *b = t->data;
        for (int64_t o = 0; o < O; o++)
            for (int64_t ch = 0; ch < C; ch++)
                for (int k = 0; k < 3; k++)
                    assert_int_equal(b[(o * 3 + k) * C + ch], a[(o * C + ch) * 3 + k]);
    }
    pg_safetensors_close(st);
    /* as the engine's model: decoder self-attention layers (FULL) then its
     * cross-attention layers (CROSS over the 1500 encoder positions), the
     * encoder in 1 + layers pieces over an n_audio_ctx x d_model state */
    pg_model *m;
    assert_int_equal(pg_model_load(src, NULL, &m), PAGODA_OK);
    const int32_t L = pg_model_num_layers(m) / 2;
    assert_int_equal(L, 2);
    for (int32_t l = 0; l < 2 * L; l++) {
        const pg_layer_cache_spec *cs = pg_model_layer_cache(m, l);
        assert_int_equal(cs->kind, l < L ? PG_LAYER_CACHE_FULL : PG_LAYER_CACHE_CROSS);
        assert_int_equal(cs->num_kv_heads, 4);
        assert_int_equal(cs->head_dim, 16);
        assert_int_equal(cs->encoder_len, l < L ? 0 : 1500);
    }
    assert_int_equal(pg_model_encoder_steps(m), 1 + 2 * (1 + 2 * 3)); /* 3 chunks of <= 512 rows */
    assert_int_equal(pg_model_encoder_step_tokens(m), 512);
    int32_t rows, cols;
    assert_true(pg_model_encoder_input_shape(m, &rows, &cols));
    assert_int_equal(rows, 80);
    assert_int_equal(cols, 3000);
    assert_true(pg_model_encoder_state_bytes(m) >= 4 * 1500 * 64 * sizeof(float)); /* x, q, K, V */
    assert_int_equal(pg_model_max_context(m), 448);
    pg_model_free(m);
    /* pg_whisper_load refuses other architectures */
    pg_model_source *llama;
    assert_int_equal(pg_model_source_open(pg_test_asset("llm/stories260K-hf"), &llama), PAGODA_OK);
    pg_whisper *w;
    assert_int_equal(pg_whisper_load(llama, NULL, &w), PAGODA_ERR_UNSUPPORTED);
    pg_model_source_free(llama);
    pg_model_source_free(src);
}

/* ---- F32: the oracle --------------------------------------------------------------------- */

static void test_encoder_f32(void **state) {
    (void)state;
    pg_model_source *src = open_oracle();
    pg_whisper *w = load(src, PG_F32);
    const pg_whisper_dims *d = pg_whisper_get_dims(w);
    pg_whisper_ws *ws = make_ws(w, PG_F32, 32);
    pg_npy mel, ref;
    pg_test_npy_load(pg_test_asset(ORACLE "expected_mel.npy"), &mel);
    pg_test_npy_load(pg_test_asset(ORACLE "expected_encoder.npy"), &ref);
    assert_int_equal(mel.shape[0], d->n_mels);
    assert_int_equal(mel.shape[1], d->n_frames);
    assert_int_equal(ref.shape[0], d->n_audio_ctx);
    assert_int_equal(ref.shape[1], d->d_model);
    float *out = malloc((size_t)ref.count * sizeof *out);
    assert_non_null(out);
    double best = 1e30;
    const int reps = *pg_test_exec_wrapper() ? 1 : 3; /* one under qemu: no timing there */
    for (int rep = 0; rep < reps; rep++) {
        double t0 = now();
        assert_int_equal(pg_whisper_encode(w, ws, mel.data, out), PAGODA_OK);
        double t = now() - t0;
        best = t < best ? t : best;
    }
    double diff = max_abs_diff(out, ref.data, (size_t)ref.count);
    print_message("encoder F32 vs expected_encoder.npy: max abs diff %.3g; %.1f ms (best of %d, "
                  "%d threads)\n",
                  diff, best * 1e3, reps, pg_pool_size(pg_pool_default()));
    assert_true(diff <= 1e-3);
    free(out);
    pg_test_npy_free(&mel);
    pg_test_npy_free(&ref);
    pg_whisper_ws_free(ws);
    pg_whisper_free(w);
    pg_model_source_free(src);
}

/* The oracle's encoder output (so decoder errors are the decoder's own). */
static float *oracle_encoder(void) {
    pg_npy ref;
    pg_test_npy_load(pg_test_asset(ORACLE "expected_encoder.npy"), &ref);
    return ref.data; /* malloc'ed, owned by the caller now */
}

static void test_decoder_logits_f32(void **state) {
    (void)state;
    pg_model_source *src = open_oracle();
    pg_whisper *w = load(src, PG_F32);
    const pg_whisper_dims *d = pg_whisper_get_dims(w);
    pg_whisper_ws *ws = make_ws(w, PG_F32, 32);
    cJSON *j = expected_json();
    int tokens[32];
    const int n = json_ints(j, "decoder_logits", "tokens", tokens, 32);
    assert_int_equal(n, 16);
    pg_npy ref;
    pg_test_npy_load(pg_test_asset(ORACLE "expected_decoder_logits.npy"), &ref);
    assert_int_equal(ref.shape[0], n);
    assert_int_equal(ref.shape[1], d->vocab);
    float *enc = oracle_encoder();
    const size_t V = (size_t)d->vocab;
    float *all = malloc((size_t)n * V * sizeof *all), *one = malloc(V * sizeof *one);
    assert_true(all && one);
    /* the 16 tokens as one prefill step */
    req r;
    req_init(&r, w, ws, enc, PG_F32);
    assert_int_equal(req_step(&r, w, ws, tokens, n, true, all), PAGODA_OK);
    double diff = max_abs_diff(all, ref.data, (size_t)n * V);
    print_message("decoder F32, 16 positions x %zu logits vs expected: max abs diff %.3g\n", V,
                  diff);
    assert_true(diff <= 1e-3);
    req_free(&r);
    /* the same tokens one step each (the KV cache carries them): bitwise the same rows */
    req_init(&r, w, ws, enc, PG_F32);
    for (int i = 0; i < n; i++) {
        assert_int_equal(req_step(&r, w, ws, &tokens[i], 1, false, one), PAGODA_OK);
        if (memcmp(one, all + (size_t)i * V, V * sizeof *one) != 0)
            fail_msg("position %d: token-by-token logits differ from the prefill's (max %.3g)", i,
                     max_abs_diff(one, all + (size_t)i * V, V));
    }
    req_free(&r);
    /* and as chunks of 3 + 13 */
    req_init(&r, w, ws, enc, PG_F32);
    assert_int_equal(req_step(&r, w, ws, tokens, 3, false, one), PAGODA_OK);
    assert_int_equal(req_step(&r, w, ws, tokens + 3, 13, false, one), PAGODA_OK);
    assert_memory_equal(one, all + (size_t)(n - 1) * V, V * sizeof *one);
    req_free(&r);
    free(all);
    free(one);
    free(enc);
    pg_test_npy_free(&ref);
    cJSON_Delete(j);
    pg_whisper_ws_free(ws);
    pg_whisper_free(w);
    pg_model_source_free(src);
}

/* Greedy decoding from the prompt with the KV caches: count of ids equal to
 * `want` (the first `n`). suppress (NULL: none) every step, begin_suppress
 * at the first step only (OpenAI's SuppressTokens / SuppressBlank). */
static int greedy(const pg_whisper *w, pg_whisper_ws *ws, const float *enc, pg_dtype kv,
                  const int *prompt, int np, const int *want, int n, const int *suppress, int ns,
                  const int *begin, int nb, int *got) {
    const pg_whisper_dims *d = pg_whisper_get_dims(w);
    float *lg = malloc((size_t)d->vocab * sizeof *lg);
    assert_non_null(lg);
    req r;
    req_init(&r, w, ws, enc, kv);
    assert_int_equal(req_step(&r, w, ws, prompt, np, false, lg), PAGODA_OK);
    int same = 0;
    for (int i = 0; i < n; i++) {
        for (int k = 0; k < ns; k++)
            lg[suppress[k]] = -INFINITY;
        for (int k = 0; i == 0 && k < nb; k++)
            lg[begin[k]] = -INFINITY;
        int best = (int)pg_kernels()->argmax_f32(lg, (size_t)d->vocab);
        got[i] = best;
        same += best == want[i];
        assert_int_equal(req_step(&r, w, ws, &best, 1, false, lg), PAGODA_OK);
    }
    req_free(&r);
    free(lg);
    return same;
}

static void test_greedy_f32(void **state) {
    (void)state;
    pg_model_source *src = open_oracle();
    pg_whisper *w = load(src, PG_F32);
    pg_whisper_ws *ws = make_ws(w, PG_F32, 32);
    cJSON *j = expected_json();
    int prompt[8], want[32], want_s[32], sup[128], begin[8], got[32];
    const int np = json_ints(j, "tokens", "prompt", prompt, 8);
    const int n = json_ints(j, "greedy_plain", "tokens", want, 32);
    const int ns = json_ints(j, "greedy_suppressed", "tokens", want_s, 32);
    const int nb = json_ints(j, "greedy_suppressed", "begin_suppress_tokens", begin, 8);
    assert_int_equal(n, 24);
    assert_int_equal(ns, 24);
    /* the 88 suppressed ids: generation_config.json (what OpenAI decoding applies) */
    size_t len;
    char *text = pg_test_read_file(pg_test_asset(ORACLE "hf/generation_config.json"), &len);
    cJSON *g = cJSON_ParseWithLength(text, len);
    free(text);
    const cJSON *sa = cJSON_GetObjectItemCaseSensitive(g, "suppress_tokens"), *e;
    int nsup = 0;
    cJSON_ArrayForEach(e, sa) sup[nsup++] = (int)e->valuedouble;
    assert_int_equal(nsup, 88);
    float *enc = oracle_encoder();
    int same = greedy(w, ws, enc, PG_F32, prompt, np, want, n, NULL, 0, NULL, 0, got);
    print_message("greedy (plain) F32: %d/%d ids equal\n", same, n);
    assert_int_equal(same, n);
    same = greedy(w, ws, enc, PG_F32, prompt, np, want_s, ns, sup, nsup, begin, nb, got);
    print_message("greedy (suppressed) F32: %d/%d ids equal\n", same, ns);
    assert_int_equal(same, ns);
    free(enc);
    cJSON_Delete(g);
    cJSON_Delete(j);
    pg_whisper_ws_free(ws);
    pg_whisper_free(w);
    pg_model_source_free(src);
}

/* jfk.wav -> pg_log_mel (transcribe-style 30 s padding, first window) -> encoder. */
static void test_mel_to_encoder(void **state) {
    (void)state;
    int64_t n;
    int rate, ch;
    float *pcm = pg_test_wav_load_s16(pg_test_asset("whisper/jfk.wav"), &n, &rate, &ch);
    assert_int_equal(rate, 16000);
    float *mel;
    int64_t frames;
    assert_int_equal(
        pg_log_mel(pcm, n, 80, PG_MEL_PAD_APPEND_30S, pg_pool_default(), &mel, &frames), PAGODA_OK);
    float *win = malloc((size_t)80 * PG_WHISPER_N_FRAMES * sizeof *win);
    assert_non_null(win);
    pg_mel_window(mel, 80, frames, 0, win);
    pg_model_source *src = open_oracle();
    pg_whisper *w = load(src, PG_F32);
    pg_whisper_ws *ws = make_ws(w, PG_F32, 8);
    pg_npy ref;
    pg_test_npy_load(pg_test_asset(ORACLE "expected_encoder.npy"), &ref);
    float *out = malloc((size_t)ref.count * sizeof *out);
    assert_int_equal(pg_whisper_encode(w, ws, win, out), PAGODA_OK);
    double diff = max_abs_diff(out, ref.data, (size_t)ref.count);
    print_message("jfk.wav -> log-mel -> encoder F32 vs expected_encoder.npy: max abs diff %.3g\n",
                  diff);
    assert_true(diff <= 1e-3);
    free(out);
    free(win);
    free(mel);
    free(pcm);
    pg_test_npy_free(&ref);
    pg_whisper_ws_free(ws);
    pg_whisper_free(w);
    pg_model_source_free(src);
}

/* A small random BF16 model (tools/gen/gen_whisper.c) in a fresh directory:
 * 64 encoder positions keep the runs cheap (qemu). */
static pg_model_source *small_random_model(const pg_gen_whisper_opts *o) {
    const char *dir = pg_test_tmpdir();
    assert_int_equal(pg_gen_whisper(o, dir), PAGODA_OK);
    pg_model_source *src;
    if (pg_model_source_open(dir, &src) != PAGODA_OK) fail_msg("open: %s", pg_last_error());
    return src;
}

/* Steps of two windows interleaved on one workspace give each window's
 * output alone, bit for bit (the state between steps is the caller's). */
static void test_encoder_steps_interleave(void **state) {
    (void)state;
    const pg_gen_whisper_opts o = {.n_mels = 80,
                                   .d_model = 64,
                                   .enc_layers = 3,
                                   .dec_layers = 1,
                                   .enc_heads = 2,
                                   .dec_heads = 2,
                                   .vocab = 100,
                                   .n_audio_ctx = 64,
                                   .n_text_ctx = 16,
                                   .dtype = PG_BF16,
                                   .seed = 3};
    pg_model_source *src = small_random_model(&o);
    pg_whisper *w = load(src, PG_DTYPE_COUNT);
    const pg_whisper_dims *d = pg_whisper_get_dims(w);
    pg_whisper_ws *ws = make_ws(w, PG_BF16, 8);
    const size_t nm = (size_t)d->n_mels * (size_t)d->n_frames;
    const size_t no = (size_t)d->n_audio_ctx * (size_t)d->d_model;
    float *mel = malloc(nm * sizeof *mel), *mel2 = malloc(nm * sizeof *mel2);
    for (size_t i = 0; i < nm; i++)
        mel[i] = (float)sin(0.013 * (double)i), mel2[i] = (float)cos(0.029 * (double)i) - 0.3f;
    const size_t sb = pg_whisper_encoder_state_bytes(w);
    assert_true(sb >= 3 * no * 4);
    float *a = malloc(sb), *b = malloc(sb), *a1 = malloc(no * 4), *b1 = malloc(no * 4);
    assert_int_equal(pg_whisper_encode(w, ws, mel, a1), PAGODA_OK);
    assert_int_equal(pg_whisper_encode(w, ws, mel2, b1), PAGODA_OK);
    const int32_t steps = pg_whisper_encoder_steps(w);
    assert_int_equal(pg_whisper_encoder_step_rows(w), 64);
    assert_int_equal(steps, 1 + d->enc_layers * 3); /* one 64-row chunk: qkv, attention, MLP */
    for (int32_t s = 0; s < steps; s++) {
        assert_int_equal(pg_whisper_encode_step(w, ws, s, mel, a), PAGODA_OK);
        assert_int_equal(pg_whisper_encode_step(w, ws, s, mel2, b), PAGODA_OK);
    }
    assert_memory_equal(a, a1, no * 4);
    assert_memory_equal(b, b1, no * 4);
    assert_int_equal(pg_whisper_encode_step(w, ws, steps, mel, a), PAGODA_ERR_INVALID_ARG);
    assert_int_equal(pg_whisper_encode_step(w, ws, 0, NULL, a), PAGODA_ERR_INVALID_ARG);
    free(a), free(b), free(a1), free(b1), free(mel), free(mel2);
    pg_whisper_ws_free(ws);
    pg_whisper_free(w);
    pg_model_source_free(src);
}

/* ---- the default BF16 path ------------------------------------------------------------------- */

static void test_bf16_default(void **state) {
    (void)state;
    pg_model_source *src = open_oracle();
    pg_whisper *w = load(src, PG_DTYPE_COUNT); /* BF16 weights: the BF16 GEMM */
    const pg_whisper_dims *d = pg_whisper_get_dims(w);
    cJSON *j = expected_json();
    pg_npy mel, enc_ref, logit_ref;
    pg_test_npy_load(pg_test_asset(ORACLE "expected_mel.npy"), &mel);
    pg_test_npy_load(pg_test_asset(ORACLE "expected_encoder.npy"), &enc_ref);
    pg_test_npy_load(pg_test_asset(ORACLE "expected_decoder_logits.npy"), &logit_ref);
    int tokens[32], prompt[8], want[32], got[32];
    const int n = json_ints(j, "decoder_logits", "tokens", tokens, 32);
    const int np = json_ints(j, "tokens", "prompt", prompt, 8);
    const int ng = json_ints(j, "greedy_plain", "tokens", want, 32);
    const size_t V = (size_t)d->vocab;
    float *enc = malloc((size_t)enc_ref.count * sizeof *enc), *lg = malloc((size_t)n * V * 4);
    const pg_dtype kvs[2] = {PG_F32, PG_BF16};
    for (int k = 0; k < 2; k++) {
        pg_whisper_ws *ws = make_ws(w, kvs[k], 32);
        double t0 = now();
        assert_int_equal(pg_whisper_encode(w, ws, mel.data, enc), PAGODA_OK);
        double te = now() - t0;
        double de = max_abs_diff(enc, enc_ref.data, (size_t)enc_ref.count);
        req r;
        req_init(&r, w, ws, enc, kvs[k]);
        assert_int_equal(req_step(&r, w, ws, tokens, n, true, lg), PAGODA_OK);
        req_free(&r);
        double dl = max_abs_diff(lg, logit_ref.data, (size_t)n * V);
        int same = greedy(w, ws, enc, kvs[k], prompt, np, want, ng, NULL, 0, NULL, 0, got);
        print_message("BF16 weights/activations, %s KV: encoder max abs diff %.3g (%.1f ms), "
                      "logits %.3g, greedy %d/%d equal\n",
                      pg_dtype_name(kvs[k]), de, te * 1e3, dl, same, ng);
        /* drift bounds (measured values in docs/ARCHITECTURE.md "Whisper") */
        assert_true(de <= 0.1);
        assert_true(dl <= 0.1);
        pg_whisper_ws_free(ws);
    }
    free(enc);
    free(lg);
    pg_test_npy_free(&mel);
    pg_test_npy_free(&enc_ref);
    pg_test_npy_free(&logit_ref);
    cJSON_Delete(j);
    pg_whisper_free(w);
    pg_model_source_free(src);
}

/* ---- a random model of another shape against a double-precision forward ------------------ */

typedef struct refm {
    pg_safetensors *st;
    int D, M, F, T, enc_h, dec_h, enc_l, dec_l, enc_f, dec_f, V;
} refm;

/* Tensor `name` as doubles (malloc'ed), checking its element count. */
static double *rget(const refm *r, size_t count, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static double *rget(const refm *r, size_t count, const char *fmt, ...) {
    char name[160];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(name, sizeof name, fmt, ap);
    va_end(ap);
    const pg_tensor *t = pg_safetensors_find(r->st, name);
    if (!t) fail_msg("reference: no tensor %s", name);
    size_t n = 1;
    for (int i = 0; i < t->ndim; i++)
        n *= (size_t)t->shape[i];
    assert_int_equal(n, count);
    float *f = malloc(n * sizeof *f);
    double *d = malloc(n * sizeof *d);
    pg_dequant_row(t->dtype, t->data, f, n);
    for (size_t i = 0; i < n; i++)
        d[i] = f[i];
    free(f);
    return d;
}

static double gelu_d(double x) {
    return 0.5 * x * (1.0 + erf(x / sqrt(2.0)));
}

/* x[T][D] = LayerNorm(x) with "<pre>.weight/.bias". */
static void ln_d(const refm *r, double *x, int T, const char *pre) {
    double *w = rget(r, (size_t)r->D, "%s.weight", pre), *b = rget(r, (size_t)r->D, "%s.bias", pre);
    for (int t = 0; t < T; t++) {
        double *xr = x + (size_t)t * r->D, m = 0, v = 0;
        for (int i = 0; i < r->D; i++)
            m += xr[i];
        m /= r->D;
        for (int i = 0; i < r->D; i++)
            v += (xr[i] - m) * (xr[i] - m);
        v /= r->D;
        for (int i = 0; i < r->D; i++)
            xr[i] = (xr[i] - m) / sqrt(v + 1e-5) * w[i] + b[i];
    }
    free(w), free(b);
}

/* y[T][O] = x[T][I] W^T (+ bias) for "<pre>.weight" [O][I]. */
static double *lin_d(const refm *r, const double *x, int T, int I, int O, bool bias,
                     const char *pre) {
    double *w = rget(r, (size_t)O * I, "%s.weight", pre);
    double *b = bias ? rget(r, (size_t)O, "%s.bias", pre) : NULL;
    double *y = calloc((size_t)T * O, sizeof *y);
    for (int t = 0; t < T; t++)
        for (int o = 0; o < O; o++) {
            double a = b ? b[o] : 0;
            for (int i = 0; i < I; i++)
                a += x[(size_t)t * I + i] * w[(size_t)o * I + i];
            y[(size_t)t * O + o] = a;
        }
    free(w), free(b);
    return y;
}

/* x += out(attention(LN(x) q, kv-source k, v)) for "<pre>" (self_attn or
 * encoder_attn): queries x [Tq], keys/values from kvx [Tk] (normed x itself
 * for self-attention), causal or not. */
static void attn_d(const refm *r, double *x, int Tq, const double *kvx, int Tk, int H, bool causal,
                   const char *pre) {
    const int D = r->D, hd = D / H;
    char nm[160];
    snprintf(nm, sizeof nm, "%s.q_proj", pre);
    double *xn = malloc((size_t)Tq * D * sizeof *xn);
    memcpy(xn, x, (size_t)Tq * D * sizeof *xn);
    char lnn[160];
    snprintf(lnn, sizeof lnn, "%s_layer_norm", pre);
    ln_d(r, xn, Tq, lnn);
    const double *src = kvx ? kvx : xn;
    double *q = lin_d(r, xn, Tq, D, D, true, nm);
    snprintf(nm, sizeof nm, "%s.k_proj", pre);
    double *k = lin_d(r, src, Tk, D, D, false, nm);
    snprintf(nm, sizeof nm, "%s.v_proj", pre);
    double *v = lin_d(r, src, Tk, D, D, true, nm);
    double *o = calloc((size_t)Tq * D, sizeof *o), *s = malloc((size_t)Tk * sizeof *s);
    for (int t = 0; t < Tq; t++)
        for (int h = 0; h < H; h++) {
            const int n = causal ? t + 1 : Tk;
            double m = -INFINITY, l = 0;
            for (int j = 0; j < n; j++) {
                double a = 0;
                for (int d = 0; d < hd; d++)
                    a += q[(size_t)t * D + h * hd + d] * k[(size_t)j * D + h * hd + d];
                s[j] = a / sqrt((double)hd);
                m = fmax(m, s[j]);
            }
            for (int j = 0; j < n; j++)
                l += (s[j] = exp(s[j] - m));
            for (int j = 0; j < n; j++)
                for (int d = 0; d < hd; d++)
                    o[(size_t)t * D + h * hd + d] += s[j] / l * v[(size_t)j * D + h * hd + d];
        }
    snprintf(nm, sizeof nm, "%s.out_proj", pre);
    double *y = lin_d(r, o, Tq, D, D, true, nm);
    for (size_t i = 0; i < (size_t)Tq * D; i++)
        x[i] += y[i];
    free(xn), free(q), free(k), free(v), free(o), free(s), free(y);
}

static void mlp_d(const refm *r, double *x, int T, int F, const char *pre) {
    const int D = r->D;
    char nm[160];
    double *xn = malloc((size_t)T * D * sizeof *xn);
    memcpy(xn, x, (size_t)T * D * sizeof *xn);
    snprintf(nm, sizeof nm, "%s.final_layer_norm", pre);
    ln_d(r, xn, T, nm);
    snprintf(nm, sizeof nm, "%s.fc1", pre);
    double *h = lin_d(r, xn, T, D, F, true, nm);
    for (size_t i = 0; i < (size_t)T * F; i++)
        h[i] = gelu_d(h[i]);
    snprintf(nm, sizeof nm, "%s.fc2", pre);
    double *y = lin_d(r, h, T, F, D, true, nm);
    for (size_t i = 0; i < (size_t)T * D; i++)
        x[i] += y[i];
    free(xn), free(h), free(y);
}

/* The encoder from the HF tensors as stored: conv weights [out, in, 3]. */
static double *encoder_d(const refm *r, const float *mel) {
    const int D = r->D, M = r->M, F = r->F, T = r->T;
    double *w1 = rget(r, (size_t)D * M * 3, "model.encoder.conv1.weight");
    double *b1 = rget(r, (size_t)D, "model.encoder.conv1.bias");
    double *w2 = rget(r, (size_t)D * D * 3, "model.encoder.conv2.weight");
    double *b2 = rget(r, (size_t)D, "model.encoder.conv2.bias");
    double *pos = rget(r, (size_t)T * D, "model.encoder.embed_positions.weight");
    double *h = malloc((size_t)F * D * sizeof *h), *x = malloc((size_t)T * D * sizeof *x);
    for (int t = 0; t < F; t++)
        for (int o = 0; o < D; o++) {
            double a = b1[o];
            for (int c = 0; c < M; c++)
                for (int k = 0; k < 3; k++) {
                    int s = t + k - 1;
                    if (s >= 0 && s < F)
                        a += w1[((size_t)o * M + c) * 3 + k] * mel[(size_t)c * F + s];
                }
            h[(size_t)t * D + o] = gelu_d(a);
        }
    for (int t = 0; t < T; t++)
        for (int o = 0; o < D; o++) {
            double a = b2[o];
            for (int c = 0; c < D; c++)
                for (int k = 0; k < 3; k++) {
                    int s = 2 * t + k - 1;
                    if (s >= 0 && s < F)
                        a += w2[((size_t)o * D + c) * 3 + k] * h[(size_t)s * D + c];
                }
            x[(size_t)t * D + o] = gelu_d(a) + pos[(size_t)t * D + o];
        }
    char pre[96];
    for (int l = 0; l < r->enc_l; l++) {
        snprintf(pre, sizeof pre, "model.encoder.layers.%d.self_attn", l);
        attn_d(r, x, T, NULL, T, r->enc_h, false, pre);
        snprintf(pre, sizeof pre, "model.encoder.layers.%d", l);
        mlp_d(r, x, T, r->enc_f, pre);
    }
    ln_d(r, x, T, "model.encoder.layer_norm");
    free(w1), free(b1), free(w2), free(b2), free(pos), free(h);
    return x;
}

/* Logits [n][V] of the n tokens (positions 0..n-1) over the encoder output. */
static double *decoder_d(const refm *r, const double *enc, const int *tok, int n) {
    const int D = r->D;
    double *E = rget(r, (size_t)r->V * D, "model.decoder.embed_tokens.weight");
    double *P = rget(r, (size_t)40 * D, "model.decoder.embed_positions.weight");
    double *x = malloc((size_t)n * D * sizeof *x);
    for (int t = 0; t < n; t++)
        for (int i = 0; i < D; i++)
            x[(size_t)t * D + i] = E[(size_t)tok[t] * D + i] + P[(size_t)t * D + i];
    char pre[96];
    for (int l = 0; l < r->dec_l; l++) {
        snprintf(pre, sizeof pre, "model.decoder.layers.%d.self_attn", l);
        attn_d(r, x, n, NULL, n, r->dec_h, true, pre);
        snprintf(pre, sizeof pre, "model.decoder.layers.%d.encoder_attn", l);
        attn_d(r, x, n, enc, r->T, r->dec_h, false, pre);
        snprintf(pre, sizeof pre, "model.decoder.layers.%d", l);
        mlp_d(r, x, n, r->dec_f, pre);
    }
    ln_d(r, x, n, "model.decoder.layer_norm");
    double *lg = lin_d(r, x, n, D, r->V, false, "proj_out"); /* untied */
    free(E), free(P), free(x);
    return lg;
}

/* *m = max(*m, v), out of line: GCC 12's aarch64 vectorizer crashes on the
 * fmax reductions this replaces (internal compiler error). */
static __attribute__((noinline)) void update_max(double *m, double v) {
    if (!(v <= *m)) *m = v;
}

static void test_random_shape_vs_double(void **state) {
    (void)state;
    const pg_gen_whisper_opts o = {.n_mels = 128,
                                   .d_model = 96,
                                   .enc_layers = 2,
                                   .dec_layers = 3,
                                   .enc_heads = 3,
                                   .dec_heads = 6,
                                   .enc_ffn = 160,
                                   .dec_ffn = 200,
                                   .vocab = 300,
                                   .n_audio_ctx = 64,
                                   .n_text_ctx = 40,
                                   .dtype = PG_F32,
                                   .untied = true,
                                   .seed = 7};
    const char *dir = pg_test_tmpdir();
    assert_int_equal(pg_gen_whisper(&o, dir), PAGODA_OK);
    pg_model_source *src;
    if (pg_model_source_open(dir, &src) != PAGODA_OK) fail_msg("open: %s", pg_last_error());
    pg_whisper *w = load(src, PG_DTYPE_COUNT); /* F32 weights: the F32 GEMM */
    const pg_whisper_dims *d = pg_whisper_get_dims(w);
    assert_int_equal(d->n_frames, 128);
    assert_int_equal(d->enc_head_dim, 32);
    assert_int_equal(d->dec_head_dim, 16);
    pg_whisper_ws *ws = make_ws(w, PG_F32, 16);
    const size_t nm = (size_t)128 * 128, ne = (size_t)64 * 96;
    float *mel = malloc(nm * sizeof *mel), *enc = malloc(ne * sizeof *enc);
    for (size_t i = 0; i < nm; i++)
        mel[i] = (float)sin(0.37 * (double)i) * 1.2f - 0.2f;
    assert_int_equal(pg_whisper_encode(w, ws, mel, enc), PAGODA_OK);
    refm r = {NULL, 96, 128, 128, 64, 3, 6, 2, 3, 160, 200, 300};
    char path[4200];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    assert_int_equal(pg_safetensors_open(path, &r.st), PAGODA_OK);
    double *enc_d = encoder_d(&r, mel);
    double de = 0, scale = 0;
    for (size_t i = 0; i < ne; i++)
        update_max(&de, fabs(enc[i] - enc_d[i])), update_max(&scale, fabs(enc_d[i]));
    /* the decoder: 9 tokens in one step over the pagoda encoder output's K/V
     * (the reference uses its own encoder output) */
    const int tok[9] = {1, 5, 299, 42, 42, 0, 17, 250, 3};
    double *lg_d = decoder_d(&r, enc_d, tok, 9);
    float *lg = malloc((size_t)9 * 300 * sizeof *lg);
    /* caches sized for this model: 40 positions, 64 encoder positions */
    pg_paged_kv self[3], cross[3], *cp[3];
    pg_layer_cache lc[3];
    pg_whisper_cross cr[3];
    int32_t stab_ids[3] = {2, 0, 1}, ctab_ids[4] = {3, 1, 0, 2};
    const int32_t *stab[1] = {stab_ids}, *ctab[1] = {ctab_ids};
    for (int l = 0; l < 3; l++) {
        self[l] = (pg_paged_kv){NULL, NULL, PG_F32, 3, 6, BS, 16};
        cross[l] = (pg_paged_kv){NULL, NULL, PG_F32, 4, 6, BS, 16};
        self[l].k = pg_calloc_aligned(1, pg_paged_kv_bytes(PG_F32, 3, 6, BS, 16));
        self[l].v = pg_calloc_aligned(1, pg_paged_kv_bytes(PG_F32, 3, 6, BS, 16));
        cross[l].k = pg_calloc_aligned(1, pg_paged_kv_bytes(PG_F32, 4, 6, BS, 16));
        cross[l].v = pg_calloc_aligned(1, pg_paged_kv_bytes(PG_F32, 4, 6, BS, 16));
        cp[l] = &cross[l];
        cr[l] = (pg_whisper_cross){&cross[l], ctab};
    }
    assert_int_equal(pg_whisper_cross_kv(w, ws, enc, ctab_ids, cp), PAGODA_OK);
    int32_t ids[9], pos[9], slots[9], rows[9];
    for (int i = 0; i < 9; i++)
        ids[i] = tok[i], pos[i] = i, slots[i] = stab_ids[i / BS] * BS + i % BS, rows[i] = i;
    const int32_t qsl[2] = {0, 9}, lens[1] = {9};
    for (int l = 0; l < 3; l++)
        lc[l] = (pg_layer_cache){.kv = &self[l], .slot_mapping = slots, .block_tables = stab};
    pg_batch b = {.num_tokens = 9,
                  .num_seqs = 1,
                  .token_ids = ids,
                  .positions = pos,
                  .query_start_loc = qsl,
                  .seq_lens = lens,
                  .logit_rows = rows,
                  .num_logits = 9,
                  .layers = lc};
    pg_whisper_ws *ws4 = make_ws(w, PG_F32, 4); /* 9 logit rows: beyond its 4 */
    assert_int_equal(pg_whisper_decode(w, ws4, &b, cr, lg), PAGODA_ERR_INVALID_ARG);
    pg_whisper_ws_free(ws4);
    b.num_logits = 4, b.logit_rows = rows + 5; /* rows 5..8 */
    assert_int_equal(pg_whisper_decode(w, ws, &b, cr, lg), PAGODA_OK);
    double dl = 0, lscale = 0;
    for (int i = 0; i < 4; i++)
        for (int v = 0; v < 300; v++) {
            update_max(&dl, fabs(lg[i * 300 + v] - lg_d[(size_t)(5 + i) * 300 + v]));
            update_max(&lscale, fabs(lg_d[(size_t)(5 + i) * 300 + v]));
        }
    print_message("random shape (128 mels, d 96, heads 3/6, untied head, 64 positions) vs double: "
                  "encoder max abs diff %.3g (scale %.3g), logits %.3g (scale %.3g)\n",
                  de, scale, dl, lscale);
    assert_true(de <= 1e-4 * fmax(1.0, scale));
    assert_true(dl <= 1e-4 * fmax(1.0, lscale));
    for (int l = 0; l < 3; l++)
        pg_free(self[l].k), pg_free(self[l].v), pg_free(cross[l].k), pg_free(cross[l].v);
    pg_safetensors_close(r.st);
    free(enc_d), free(lg_d), free(lg), free(mel), free(enc);
    pg_whisper_ws_free(ws);
    pg_whisper_free(w);
    pg_model_source_free(src);
}

/* ---- errors ------------------------------------------------------------------------------------
 */

static void test_errors(void **state) {
    (void)state;
    pg_model_source *src = open_oracle();
    pg_whisper *w = load(src, PG_F32);
    const pg_whisper_dims *d = pg_whisper_get_dims(w);
    pg_whisper_ws *ws = make_ws(w, PG_F32, 4);
    float *enc = oracle_encoder();
    float *lg = malloc((size_t)d->vocab * 5 * sizeof *lg);
    req r;
    req_init(&r, w, ws, enc, PG_F32);
    int bad_tok = d->vocab, ok[5] = {50258, 50259, 50359, 50363, 400};
    assert_int_equal(req_step(&r, w, ws, &bad_tok, 1, false, lg), PAGODA_ERR_INVALID_ARG);
    assert_int_equal(req_step(&r, w, ws, ok, 5, false, lg), PAGODA_ERR_INVALID_ARG); /* > 4 */
    r.n = d->n_text_ctx; /* the next position is past the decoder's context */
    assert_int_equal(req_step(&r, w, ws, ok, 1, false, lg), PAGODA_ERR_INVALID_ARG);
    assert_non_null(strstr(pg_last_error(), "position 448"));
    /* a cross block id outside the cache */
    pg_paged_kv *kvp[MAX_LAYERS];
    for (int l = 0; l < r.L; l++)
        kvp[l] = &r.cross[l];
    r.cross_table[5] = CROSS_BLOCKS;
    assert_int_equal(pg_whisper_cross_kv(w, ws, enc, r.cross_table, kvp), PAGODA_ERR_INVALID_ARG);
    r.cross_table[5] = 5;
    /* a cross cache of the wrong head size */
    pg_paged_kv wrong = r.cross[0];
    wrong.head_dim = 8;
    kvp[0] = &wrong;
    assert_int_equal(pg_whisper_cross_kv(w, ws, enc, r.cross_table, kvp), PAGODA_ERR_INVALID_ARG);
    req_free(&r);
    /* limits */
    pg_step_limits lim = {.max_tokens = 0, .max_seqs = 1, .kv_dtype = PG_F32, .block_size = 16};
    pg_whisper_ws *bad;
    assert_int_equal(pg_whisper_ws_create(w, &lim, &bad), PAGODA_ERR_INVALID_ARG);
    free(lg);
    free(enc);
    pg_whisper_ws_free(ws);
    pg_whisper_free(w);
    pg_model_source_free(src);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_source_and_config),
        cmocka_unit_test(test_encoder_f32),
        cmocka_unit_test(test_decoder_logits_f32),
        cmocka_unit_test(test_greedy_f32),
        cmocka_unit_test(test_mel_to_encoder),
        cmocka_unit_test(test_encoder_steps_interleave),
        cmocka_unit_test(test_bf16_default),
        cmocka_unit_test(test_random_shape_vs_double),
        cmocka_unit_test(test_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
