/* Whisper through the engine (include/pagoda.h): encoder pieces scheduled
 * like prefills, the cross-attention KV group, logits processors and the
 * prompt-logits probe, against the whisper-tiny-random oracle
 * (openai/whisper on random weights; expected.json):
 *   - greedy ids of one request (F32) equal greedy_plain; with a logits
 *     processor applying OpenAI's suppression rules, greedy_suppressed;
 *   - the probe row at <|startoftranscript|> equals the oracle's logits of
 *     position 0 within 1e-3;
 *   - concurrent requests, budgets of one encoder piece per step or
 *     more, requests added while others decode, a KV cache small enough to
 *     preempt: every output still equals greedy_plain (batch invariance);
 *   - an abort while encoding, a request without / with a wrong encoder
 *     input, encoder input on a decoder-only model: clear errors, engine
 *     keeps serving. */
#include "testutil.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "npy.h"

#include "pagoda.h"

#define ORACLE "oracles/whisper-tiny-random/"
#define N_MELS 80
#define N_FRAMES 3000
#define MAX_IDS 128

static cJSON *g_expected;
static float *g_mel;
static int g_plain[MAX_IDS], g_supp[MAX_IDS], g_suppress[MAX_IDS], g_begin[8], g_prompt[8];
static int n_plain, n_supp, n_suppress, n_begin, n_prompt;

static int json_ints(const char *k1, const char *k2, int *out, int cap) {
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(
        cJSON_GetObjectItemCaseSensitive(g_expected, k1), k2);
    assert_true(cJSON_IsArray(a));
    int n = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, a) {
        assert_true(n < cap);
        out[n++] = (int)e->valuedouble;
    }
    return n;
}

static int setup(void **state) {
    (void)state;
    size_t len;
    char *text = pg_test_read_file(pg_test_asset(ORACLE "expected.json"), &len);
    g_expected = cJSON_ParseWithLength(text, len);
    free(text);
    if (!g_expected) return -1;
    n_plain = json_ints("greedy_plain", "tokens", g_plain, MAX_IDS);
    n_supp = json_ints("greedy_suppressed", "tokens", g_supp, MAX_IDS);
    n_suppress = json_ints("greedy_suppressed", "suppress_tokens", g_suppress, MAX_IDS);
    n_begin = json_ints("greedy_suppressed", "begin_suppress_tokens", g_begin, 8);
    n_prompt = json_ints("tokens", "prompt", g_prompt, 8);
    pg_npy a;
    pg_test_npy_load(pg_test_asset(ORACLE "expected_mel.npy"), &a);
    if (a.count != (int64_t)N_MELS * N_FRAMES) return -1;
    g_mel = a.data;
    return 0;
}

static int teardown(void **state) {
    (void)state;
    cJSON_Delete(g_expected);
    free(g_mel);
    return 0;
}

/* The tokenizer: openai/whisper's multilingual vocabulary (the oracle's HF
 * directory ships none). */
static const char *tokenizer_path(void) {
    static char path[4096];
    snprintf(path, sizeof path, "%s", pg_test_asset("whisper/multilingual.tiktoken"));
    return path;
}

static pagoda_dtype g_dtype = PAGODA_DTYPE_F32;
static int32_t g_enc_tokens; /* max_num_encoder_tokens of the next engine (0: default) */

static pagoda_engine *make_engine(int32_t budget, uint64_t kv_mem, int32_t max_seqs) {
    pagoda_engine_options o;
    pagoda_engine_options_default(&o);
    o.dtype = g_dtype;
    o.tokenizer = tokenizer_path();
    o.max_num_batched_tokens = budget;
    o.max_num_encoder_tokens = g_enc_tokens;
    o.max_num_seqs = max_seqs;
    o.kv_cache_memory = kv_mem;
    pagoda_engine *e = NULL;
    if (pagoda_engine_create(pg_test_asset(ORACLE "hf"), &o, &e) != PAGODA_OK)
        fail_msg("engine: %s", pagoda_last_error());
    return e;
}

/* OpenAI's SuppressTokens every step + SuppressBlank at the first sampled
 * step (decoding.py), and a record of the probe row. */
typedef struct proc {
    int n_prompt;
    int calls, probes;
    float probe[51865];
    int probe_n_tokens;
} proc;

static void suppress_fn(void *ctx, const int32_t *ids, size_t n, size_t np, bool is_prompt,
                        float *logits, int32_t vocab) {
    proc *p = ctx;
    (void)ids;
    if (is_prompt) {
        p->probes++;
        p->probe_n_tokens = (int)n;
        memcpy(p->probe, logits, (size_t)vocab * sizeof(float));
        return;
    }
    p->calls++;
    for (int i = 0; i < n_suppress; i++)
        logits[g_suppress[i]] = -INFINITY;
    if (n == np)
        for (int i = 0; i < n_begin; i++)
            logits[g_begin[i]] = -INFINITY;
}

static void add(pagoda_engine *e, int32_t max_tokens, pagoda_logits_fn fn, void *ctx,
                int32_t probe_pos, uint64_t *id) {
    pagoda_request r;
    pagoda_request_defaults(e, &r);
    int32_t prompt[8];
    for (int i = 0; i < n_prompt; i++)
        prompt[i] = g_prompt[i];
    r.prompt_token_ids = prompt;
    r.n_prompt_token_ids = (size_t)n_prompt;
    r.sampling.temperature = 0;
    r.sampling.max_tokens = max_tokens;
    r.sampling.ignore_eos = true;
    r.encoder_features = g_mel;
    r.encoder_n_mels = N_MELS;
    r.encoder_n_frames = N_FRAMES;
    r.logits_fn = fn;
    r.logits_ctx = ctx;
    r.prompt_logits_pos = probe_pos;
    if (pagoda_engine_add_request(e, &r, id, NULL) != PAGODA_OK)
        fail_msg("add: %s", pagoda_last_error());
}

typedef struct got {
    uint64_t id;
    int32_t ids[MAX_IDS];
    int n;
    pagoda_finish_reason fin;
} got;

/* Step until every request in g[0..n) finished (or max_steps steps ran);
 * outputs collected; steps counted. */
static int run_steps(pagoda_engine *e, got *g, int n, int max_steps) {
    int steps = 0, done = 0;
    for (int i = 0; i < n; i++)
        done += g[i].fin != PAGODA_FINISH_NONE;
    while (done < n && steps < max_steps) {
        size_t no;
        assert_int_equal(pagoda_engine_step(e, &no), PAGODA_OK);
        assert_true(++steps < 100000);
        const pagoda_output *o = pagoda_engine_outputs(e, &no);
        for (size_t k = 0; k < no; k++)
            for (int i = 0; i < n; i++) {
                if (g[i].id != o[k].id) continue;
                for (size_t t = 0; t < o[k].n_new_tokens; t++) {
                    assert_true(g[i].n < MAX_IDS);
                    g[i].ids[g[i].n++] = o[k].new_token_ids[t];
                }
                if (o[k].finish_reason != PAGODA_FINISH_NONE) {
                    if (o[k].finish_reason == PAGODA_FINISH_ERROR)
                        fail_msg("request %d: %s", i, o[k].error);
                    g[i].fin = o[k].finish_reason;
                    done++;
                }
            }
    }
    return steps;
}

static int run(pagoda_engine *e, got *g, int n) {
    return run_steps(e, g, n, 1 << 30);
}

static void expect_ids(const got *g, const int *want, int n) {
    if (g->n != n) fail_msg("request %llu: %d tokens (finish %d), want %d", (unsigned long long)g->id, g->n, g->fin, n);
    for (int t = 0; t < n; t++)
        if (g->ids[t] != want[t]) fail_msg("token %d: %d, oracle %d", t, g->ids[t], want[t]);
}

static void test_greedy_plain_and_suppressed(void **state) {
    (void)state;
    pagoda_engine *e = make_engine(0, 256u << 20, 8);
    int32_t rows, cols;
    assert_true(pagoda_engine_encoder_input_shape(e, &rows, &cols));
    assert_int_equal(rows, N_MELS);
    assert_int_equal(cols, N_FRAMES);
    got g[2] = {0};
    add(e, n_plain, NULL, NULL, -1, &g[0].id);
    proc *p = calloc(1, sizeof *p);
    add(e, n_supp, suppress_fn, p, 0, &g[1].id);
    run(e, g, 2);
    expect_ids(&g[0], g_plain, n_plain);
    expect_ids(&g[1], g_supp, n_supp);
    assert_int_equal(p->calls, n_supp);
    /* the probe: logits after <|startoftranscript|>, the oracle's position 0 */
    assert_int_equal(p->probes, 1);
    assert_int_equal(p->probe_n_tokens, 1);
    pg_npy ref;
    pg_test_npy_load(pg_test_asset(ORACLE "expected_decoder_logits.npy"), &ref);
    double md = 0;
    for (int v = 0; v < 51865; v++) {
        double d = fabs((double)p->probe[v] - (double)ref.data[v]);
        if (!(d <= md)) md = d;
    }
    printf("probe row vs oracle logits[0]: max |diff| %.3g\n", md);
    assert_true(md < 1e-3);
    pg_test_npy_free(&ref);
    free(p);
    pagoda_engine_free(e);
}

/* The default path (BF16 weights, activations and KV cache): the oracle's
 * smallest top-1 margin (0.011) survives its drift, so greedy ids still
 * match, batched too. */
static void test_bf16_default(void **state) {
    (void)state;
    g_dtype = PAGODA_DTYPE_AUTO;
    pagoda_engine *e = make_engine(0, 256u << 20, 8);
    g_dtype = PAGODA_DTYPE_F32;
    got g[3] = {0};
    for (int i = 0; i < 3; i++)
        add(e, n_plain, NULL, NULL, -1, &g[i].id);
    run(e, g, 3);
    for (int i = 0; i < 3; i++)
        expect_ids(&g[i], g_plain, n_plain);
    pagoda_engine_free(e);
}

/* Requests at different times, encoder budgets of one piece per step (so
 * encoders interleave with decodes), the default (two) and a whole layer
 * and more: all equal. */
static void test_concurrent_batch_invariant(void **state) {
    (void)state;
    const int32_t budgets[] = {1600, 4096, 4096}, enc[] = {1, 0, 4096};
    for (int b = 0; b < 3; b++) {
        g_enc_tokens = enc[b];
        pagoda_engine *e = make_engine(budgets[b], 256u << 20, 16);
        g_enc_tokens = 0;
        enum { N = 5 };
        got g[N] = {0};
        for (int i = 0; i < 3; i++)
            add(e, n_plain, NULL, NULL, -1, &g[i].id);
        run_steps(e, g, 3, 5);
        for (int i = 3; i < N; i++)
            add(e, n_plain, NULL, NULL, -1, &g[i].id);
        int steps = run(e, g, N);
        printf("budget %d, encoder budget %d: %d requests in %d steps\n", budgets[b], enc[b], N,
               steps);
        for (int i = 0; i < N; i++)
            expect_ids(&g[i], g_plain, n_plain);
        pagoda_engine_free(e);
    }
}

/* A KV cache of exactly 3 x (94 cross + 1 self) blocks for 6 requests:
 * admissions wait for memory, and when the running ones need their second
 * self-attention block the newest is preempted (its encoder runs again);
 * outputs unchanged. */
static void test_small_cache_preempts(void **state) {
    (void)state;
    /* one block = 16 tokens x 2 tensors x K,V x 4 heads x 16 dims x f32 = 16 KiB */
    pagoda_engine *e = make_engine(4096, 286u * 16u * 1024u, 8);
    enum { N = 6 };
    got g[N] = {0};
    for (int i = 0; i < N; i++)
        add(e, n_plain, NULL, NULL, -1, &g[i].id);
    run(e, g, N);
    for (int i = 0; i < N; i++)
        expect_ids(&g[i], g_plain, n_plain);
    pagoda_stats st;
    pagoda_engine_get_stats(e, &st);
    printf("small cache: %llu preemptions, %d blocks\n", (unsigned long long)st.num_preemptions,
           st.num_kv_blocks);
    assert_int_equal(st.num_kv_blocks, 285);
    assert_true(st.num_preemptions > 0);
    assert_int_equal(st.num_free_kv_blocks, st.num_kv_blocks);
    pagoda_engine_free(e);
}

static void test_abort_and_bad_requests(void **state) {
    (void)state;
    pagoda_engine *e = make_engine(1600, 256u << 20, 8);
    got g[2] = {0};
    add(e, n_plain, NULL, NULL, -1, &g[0].id);
    add(e, n_plain, NULL, NULL, -1, &g[1].id);
    size_t no;
    assert_int_equal(pagoda_engine_step(e, &no), PAGODA_OK); /* encoding */
    assert_int_equal(pagoda_engine_abort(e, g[0].id), PAGODA_OK);
    run(e, g, 2);
    assert_int_equal(g[0].fin, PAGODA_FINISH_ABORT);
    expect_ids(&g[1], g_plain, n_plain);

    pagoda_request r;
    pagoda_request_defaults(e, &r);
    int32_t prompt[1] = {g_prompt[0]};
    r.prompt_token_ids = prompt;
    r.n_prompt_token_ids = 1;
    uint64_t id;
    assert_int_equal(pagoda_engine_add_request(e, &r, &id, NULL), PAGODA_ERR_INVALID_ARG);
    assert_non_null(strstr(pagoda_last_error(), "encoder input"));
    r.encoder_features = g_mel;
    r.encoder_n_mels = 128;
    r.encoder_n_frames = N_FRAMES;
    assert_int_equal(pagoda_engine_add_request(e, &r, &id, NULL), PAGODA_ERR_INVALID_ARG);
    assert_non_null(strstr(pagoda_last_error(), "80 x 3000"));
    r.encoder_n_mels = N_MELS;
    r.logits_fn = suppress_fn;
    r.prompt_logits_pos = 5;
    assert_int_equal(pagoda_engine_add_request(e, &r, &id, NULL), PAGODA_ERR_INVALID_ARG);
    assert_non_null(strstr(pagoda_last_error(), "prompt_logits_pos"));
    /* still serving */
    got h = {0};
    add(e, 4, NULL, NULL, -1, &h.id);
    run(e, &h, 1);
    expect_ids(&h, g_plain, 4);
    pagoda_engine_free(e);

    /* a decoder-only model refuses encoder input */
    pagoda_engine_options o;
    pagoda_engine_options_default(&o);
    o.kv_cache_memory = 64u << 20;
    pagoda_engine *llm;
    assert_int_equal(pagoda_engine_create(pg_test_asset("llm/stories260K-hf"), &o, &llm),
                     PAGODA_OK);
    assert_false(pagoda_engine_encoder_input_shape(llm, NULL, NULL));
    pagoda_request_defaults(llm, &r);
    r.prompt = "Once";
    r.encoder_features = g_mel;
    r.encoder_n_mels = N_MELS;
    r.encoder_n_frames = N_FRAMES;
    assert_int_equal(pagoda_engine_add_request(llm, &r, &id, NULL), PAGODA_ERR_INVALID_ARG);
    assert_non_null(strstr(pagoda_last_error(), "decoder-only"));
    pagoda_engine_free(llm);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_greedy_plain_and_suppressed),
        cmocka_unit_test(test_concurrent_batch_invariant),
        cmocka_unit_test(test_bf16_default),
        cmocka_unit_test(test_small_cache_preempts),
        cmocka_unit_test(test_abort_and_bad_requests),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
