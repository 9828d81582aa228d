/* The engine (include/pagoda.h) end to end on stories260K and random tiny
 * models (tools/gen/gen_model.h): reference ids through the batched paged
 * forward, batch invariance (tokens and logprobs bit for bit), prefix
 * caching, chunked prefill, preemption, block leaks under random aborts,
 * stop strings, min_tokens, UTF-8 safe deltas, rejected requests, seeded
 * sampling independent of the batch. Greedy unless said otherwise. Batch
 * invariance, prefix caching and chunked prefill run over every
 * architecture: a random Llama and a random Qwen3 (q/k norm) of one shape. */
#include "testutil.h"
#include "engine_run.h"
#include "model_run.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/detokenizer.h"
#include "gen/gen_model.h"
#include "engine/spec.h"
#include "pagoda.h"
#include "tokenizer/tokenizer.h"

static char g_tiny[4200];      /* random F32 model with the stories260K tokenizer */
static char g_tiny_bf16[4200]; /* same shape, BF16 weights */
static char g_qwen3[4200];      /* random Qwen3 (q/k norm) of that shape, F32 */
static char g_qwen3_bf16[4200]; /* and BF16 */
static char g_mistral[4200];    /* g_tiny as MistralForCausalLM with a 24-token sliding window */
static char g_gpt_oss[4200];    /* random GPT-OSS, F32: layers 0 and 2 slide over 20 tokens */
static int32_t g_max_used_blocks; /* most KV blocks in use after any step of run_all but
                                     the first (a prompt's prefill holds all its KV) */

static int setup(void **state) {
    (void)state;
    if (pg_er_one_thread_under_qemu()) return -1;
    char tokdir[4200];
    snprintf(tokdir, sizeof tokdir, "%s", pg_test_asset("llm/stories260K-hf"));
    const char *dir = pg_test_tmpdir();
    snprintf(g_tiny, sizeof g_tiny, "%s/tiny", dir);
    snprintf(g_tiny_bf16, sizeof g_tiny_bf16, "%s/tiny-bf16", dir);
    pg_gen_model_options o;
    pg_gen_model_defaults(&o);
    o.head_dim = 16;
    o.init_std = 0.25f; /* sharp, O(1) logits: greedy paths that differ between requests */
    o.max_position = 512;
    o.tie = false;
    o.tokenizer_dir = tokdir;
    o.hf_dir = g_tiny;
    if (pg_gen_model_write(&o) != PAGODA_OK) {
        fprintf(stderr, "gen_model: %s\n", pg_last_error());
        return -1;
    }
    o.hf_dtype = PG_BF16;
    o.hf_dir = g_tiny_bf16;
    if (pg_gen_model_write(&o) != PAGODA_OK) {
        fprintf(stderr, "gen_model: %s\n", pg_last_error());
        return -1;
    }
    /* GPT-OSS: sinks, sliding / full / sliding layers, MoE with biases */
    snprintf(g_gpt_oss, sizeof g_gpt_oss, "%s/gpt-oss", dir);
    pg_gen_model_defaults(&o);
    if (pg_gen_model_set_arch(&o, "gpt_oss") != PAGODA_OK) return -1;
    o.head_dim = 16;
    o.layers = 3;
    o.experts = 4;
    o.experts_per_tok = 2;
    o.moe_ffn = 32;
    o.sliding_window = 20;
    o.init_std = 0.25f;
    o.max_position = 512;
    o.tokenizer_dir = tokdir;
    o.hf_dir = g_gpt_oss;
    if (pg_gen_model_write(&o) != PAGODA_OK) {
        fprintf(stderr, "gen_model: %s\n", pg_last_error());
        return -1;
    }
    /* Mistral: the same weights as g_tiny, a sliding window of 24 tokens */
    snprintf(g_mistral, sizeof g_mistral, "%s/mistral", dir);
    char cmd[9000], cfg[4300], *out = NULL;
    snprintf(cmd, sizeof cmd, "cp -r '%s' '%s'", g_tiny, g_mistral);
    if (pg_test_run_command(cmd, &out) != 0) return -1;
    free(out);
    snprintf(cfg, sizeof cfg, "%s/config.json", g_mistral);
    size_t len;
    char *json = pg_test_read_file(cfg, &len), *arch = strstr(json, "LlamaForCausalLM");
    if (!arch || json[0] != '{') return -1;
    char *patched = malloc(len + 64);
    if (!patched) return -1;
    *arch = 0;
    int n = snprintf(patched, len + 64, "{\"sliding_window\": 24, %s%s%s", json + 1, "MistralForCausalLM",
                     arch + strlen("LlamaForCausalLM"));
    pg_test_write_file(cfg, patched, (size_t)n);
    free(patched);
    free(json);
    /* the same tests over every architecture: a Qwen3 of the same shape */
    snprintf(g_qwen3, sizeof g_qwen3, "%s/qwen3", dir);
    snprintf(g_qwen3_bf16, sizeof g_qwen3_bf16, "%s/qwen3-bf16", dir);
    if (pg_gen_model_set_arch(&o, "qwen3") != PAGODA_OK) return -1;
    o.hf_dtype = PG_F32;
    o.hf_dir = g_qwen3;
    if (pg_gen_model_write(&o) != PAGODA_OK) {
        fprintf(stderr, "gen_model: %s\n", pg_last_error());
        return -1;
    }
    o.hf_dtype = PG_BF16;
    o.hf_dir = g_qwen3_bf16;
    if (pg_gen_model_write(&o) != PAGODA_OK) {
        fprintf(stderr, "gen_model: %s\n", pg_last_error());
        return -1;
    }
    return 0;
}

/* ---- helpers ---------------------------------------------------------------- */

/* pg_er_greedy with the top 4 logprobs. */
static pagoda_request greedy_req(const pagoda_engine *e, const int32_t *ids, size_t n,
                                 int32_t max_tokens) {
    pagoda_request r = pg_er_greedy(e, ids, n, max_tokens);
    r.sampling.logprobs = PG_ER_TOP;
    return r;
}

/* pg_er_run_watch, recording g_max_used_blocks. */
static void run_all(pagoda_engine *e, const uint64_t *ids, pg_er_result *res, size_t n,
                    const char *held) {
    pg_er_run_watch(e, ids, res, n, held, &g_max_used_blocks);
}

/* ---- references -------------------------------------------------------------- */

static int parse_ids(const char *text, const char *key, int32_t *ids, int cap) {
    const char *p = strstr(text, key);
    assert_non_null(p);
    p += strlen(key);
    int n = 0;
    while (*p && *p != '\n') {
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p) {
            p++;
            continue;
        }
        assert_true(n < cap);
        ids[n++] = (int32_t)v;
        p = end;
    }
    return n;
}

/* Greedy ids through the engine against a reference. min_exact < 0: every
 * id equal. Else the ids agree for at least min_exact positions and, at the
 * first difference, the reference's token was a near tie of ours (in our top
 * 4, logprob within 0.05 of the chosen one): BF16 weights go through the
 * BF16 GEMM, which rounds activations to BF16 (kernels/gemm.h), while the
 * BF16 reference kept f32 activations. */
static void check_reference(const char *model_rel, const char *ref_rel, pagoda_dtype dtype,
                            int min_exact) {
    char model[4200];
    snprintf(model, sizeof model, "%s", pg_test_asset(model_rel));
    char *text = pg_test_read_file(pg_test_asset(ref_rel), NULL);
    int32_t prompt[16], gen[512];
    int np = parse_ids(text, "PROMPT_TOKENS:", prompt, 16);
    int ng = parse_ids(text, "GEN:", gen, 512);
    free(text);
    int skip = np - 1;
    pagoda_engine_options o;
    pagoda_engine_options_default(&o);
    o.dtype = dtype;
    pagoda_engine *e = pg_er_open(model, &o);
    pagoda_request r = greedy_req(e, prompt, (size_t)np, ng - skip);
    uint64_t id;
    assert_int_equal(pagoda_engine_add_request(e, &r, &id, NULL), PAGODA_OK);
    static pg_er_result res;
    run_all(e, &id, &res, 1, NULL);
    assert_int_equal(res.n, ng - skip);
    for (int i = 0; i < res.n; i++) {
        if (res.ids[i] == gen[skip + i]) continue;
        if (min_exact < 0 || i < min_exact)
            fail_msg("%s: token %d is %d, reference %d", model_rel, i, res.ids[i], gen[skip + i]);
        bool near = false;
        for (int k = 1; k < 4; k++)
            near |= res.top[i][k] == gen[skip + i] && res.top_lp[i][0] - res.top_lp[i][k] < 0.05f;
        if (!near)
            fail_msg("%s: token %d is %d, reference %d is not a near tie", model_rel, i, res.ids[i],
                     gen[skip + i]);
        print_message("%s: first difference at token %d: a near tie (%d vs reference %d)\n",
                      model_rel, i, res.ids[i], gen[skip + i]);
        break;
    }
    assert_int_equal(res.finish, PAGODA_FINISH_LENGTH);
    pagoda_engine_free(e);
}

#define STORIES_N256 "llm/llama2c/expected/stories260K_greedy_n256.tokens.txt"
#define STORIES_ONCE64                                                                             \
    "llm/llama2c/expected/stories260K_greedy_prompt_once_upon_a_time_n64.tokens.txt"
#define STORIES_BF16_N256 "llm/stories260K-hf-bf16/expected_bf16_greedy_n256.tokens.txt"

static void test_stories_reference_f32(void **state) {
    (void)state;
    check_reference("llm/stories260K-hf", STORIES_N256, PAGODA_DTYPE_AUTO, -1);
    check_reference("llm/stories260K-hf", STORIES_ONCE64, PAGODA_DTYPE_AUTO, -1);
    /* --dtype float32 on an F32 model is what auto does */
    check_reference("llm/stories260K-hf", STORIES_ONCE64, PAGODA_DTYPE_F32, -1);
}

/* dtype auto on BF16 weights: the BF16 GEMM rounds activations to BF16, the
 * reference (numpy, f32 math on the BF16 weights) does not. Measured: the
 * first 71 ids agree on x86 AVX512_BF16 (id 71 is a near tie), 185 on the
 * scalar table and under qemu Arm (-cpu max), all 256 on AVX2. */
static void test_stories_reference_bf16(void **state) {
    (void)state;
    check_reference("llm/stories260K-hf-bf16", STORIES_BF16_N256, PAGODA_DTYPE_AUTO, 70);
}

/* --dtype float32 on BF16 weights: widened at load, f32 activations
 * everywhere: every one of the 256 reference ids. */
static void test_stories_reference_bf16_as_float32(void **state) {
    (void)state;
    check_reference("llm/stories260K-hf-bf16", STORIES_BF16_N256, PAGODA_DTYPE_F32, -1);
}

/* --dtype bfloat16 on F32 weights (packed BF16, BF16 KV cache): measured,
 * the F32 reference (BOS prompt) holds for 235 of 256 ids on x86
 * (AVX512_BF16, AVX2, scalar) and 185 under qemu Arm, a near tie after;
 * all 60 of "Once upon a time" everywhere. The thresholds leave room for
 * other BF16 kernels' summation order. */
static void test_stories_reference_f32_as_bfloat16(void **state) {
    (void)state;
    check_reference("llm/stories260K-hf", STORIES_N256, PAGODA_DTYPE_BF16, 64);
    check_reference("llm/stories260K-hf", STORIES_ONCE64, PAGODA_DTYPE_BF16, 32);
}

/* float16 (and its alias half) runs the bfloat16 path: same ids as bfloat16. */
/* A prompt with more token ids than bytes + 16: the generator's GGUF
 * vocabulary has byte tokens but no U+2581, so SentencePiece's byte fallback
 * turns every space into 3 ids. Regression: the engine and pagoda_tokenize
 * sized their id buffer from the byte count and read past it (the server
 * answered 400 "prompt token 1174681600 ... outside the vocab"). */
static void test_prompt_with_more_ids_than_bytes(void **state) {
    (void)state;
    char gguf[4300];
    snprintf(gguf, sizeof gguf, "%s/bytevocab.gguf", pg_test_tmpdir());
    pg_gen_model_options o;
    pg_gen_model_defaults(&o);
    o.head_dim = 16;
    o.max_position = 4096;
    o.gguf_path = gguf;
    if (pg_gen_model_write(&o) != PAGODA_OK) fail_msg("gen_model: %s", pg_last_error());
    pagoda_engine_options eo;
    pagoda_engine_options_default(&eo);
    eo.kv_cache_memory = 16u << 20;
    pagoda_engine *e;
    if (pagoda_engine_create(gguf, &eo, &e) != PAGODA_OK) fail_msg("%s", pagoda_last_error());
    static char text[1201]; /* 600 letters and 600 spaces: ~2400 ids */
    for (int i = 0; i < 1200; i++)
        text[i] = i % 2 ? ' ' : (char)('a' + i % 26);
    int32_t *ids;
    size_t n;
    assert_int_equal(pagoda_tokenize(e, text, 1200, true, &ids, &n), PAGODA_OK); /* + BOS */
    assert_true(n > 1200 + 16);
    for (size_t i = 0; i < n; i++)
        assert_true(ids[i] >= 0 && ids[i] < pagoda_engine_vocab_size(e));
    pagoda_request r;
    pagoda_request_defaults(e, &r);
    r.prompt = text;
    r.sampling.max_tokens = 2;
    r.sampling.temperature = 0;
    uint64_t id;
    if (pagoda_engine_add_request(e, &r, &id, NULL) != PAGODA_OK)
        fail_msg("add_request: %s", pagoda_last_error());
    size_t k = 0, prompt_n = 0;
    while (pagoda_engine_has_unfinished(e)) {
        assert_int_equal(pagoda_engine_step(e, &k), PAGODA_OK);
        const pagoda_output *out = pagoda_engine_outputs(e, &k);
        for (size_t j = 0; j < k; j++) {
            assert_int_not_equal(out[j].finish_reason, PAGODA_FINISH_ERROR);
            if (out[j].n_prompt_tokens) prompt_n = (size_t)out[j].n_prompt_tokens;
        }
    }
    assert_int_equal(prompt_n, n);
    free(ids);
    pagoda_engine_free(e);
}

static void test_float16_runs_as_bfloat16(void **state) {
    (void)state;
    char model[4200];
    snprintf(model, sizeof model, "%s", pg_test_asset("llm/stories260K-hf-bf16"));
    static pg_er_result res[2];
    const pagoda_dtype dt[2] = {PAGODA_DTYPE_F16, PAGODA_DTYPE_BF16};
    int32_t bos = 1;
    for (int i = 0; i < 2; i++) {
        pagoda_engine_options o;
        pagoda_engine_options_default(&o);
        o.dtype = dt[i];
        pagoda_engine *e = pg_er_open(model, &o);
        pagoda_request r = greedy_req(e, &bos, 1, 96);
        uint64_t id;
        assert_int_equal(pagoda_engine_add_request(e, &r, &id, NULL), PAGODA_OK);
        run_all(e, &id, &res[i], 1, NULL);
        pagoda_engine_free(e);
    }
    pg_er_assert_same_tokens(&res[0], &res[1], true);
}

static void test_bad_dtype_is_rejected(void **state) {
    (void)state;
    pagoda_engine_options o;
    pagoda_engine_options_default(&o);
    o.dtype = (pagoda_dtype)9;
    pagoda_engine *e = NULL;
    assert_int_equal(pagoda_engine_create(g_tiny, &o, &e), PAGODA_ERR_INVALID_ARG);
    assert_null(e);
    assert_non_null(strstr(pagoda_last_error(), "dtype 9"));
}

/* The chat template is compiled once per engine (pg_chat_cache): the first
 * override is cached, another override still renders with its own text, and
 * the cached one keeps working after it; no template at all is an error
 * each time, not a cached one. */
static void test_chat_template_compiled_once(void **state) {
    (void)state;
    pagoda_engine *e = pg_er_open(g_tiny, NULL);
    const char *a = "{% for m in messages %}A:{{ m.content }}{% endfor %}";
    const char *b = "{% for m in messages %}B:{{ m.content }}{% endfor %}";
    const char *msgs = "[{\"role\": \"user\", \"content\": \"hi\"}]";
    char *out = NULL;
    for (int round = 0; round < 2; round++) {
        assert_int_equal(pagoda_apply_chat_template(e, msgs, NULL, NULL, false, a, &out),
                         PAGODA_OK);
        assert_string_equal(out, "A:hi");
        pagoda_free(out);
        assert_int_equal(pagoda_apply_chat_template(e, msgs, NULL, NULL, false, b, &out),
                         PAGODA_OK);
        assert_string_equal(out, "B:hi");
        pagoda_free(out);
        /* the tiny model has no template of its own */
        assert_int_not_equal(pagoda_apply_chat_template(e, msgs, NULL, NULL, false, NULL, &out),
                             PAGODA_OK);
        assert_null(out);
    }
    /* a bad template is an error, and does not replace the cached one */
    assert_int_equal(pagoda_apply_chat_template(e, msgs, NULL, NULL, false, "{% if %}", &out),
                     PAGODA_ERR_FORMAT);
    assert_int_equal(pagoda_apply_chat_template(e, msgs, NULL, NULL, false, a, &out), PAGODA_OK);
    assert_string_equal(out, "A:hi");
    pagoda_free(out);
    pagoda_engine_free(e);
}

/* ---- batch invariance ---------------------------------------------------------- */

static void check_batch_invariance(const char *model, pagoda_dtype dtype) {
    enum { N = 16 };
    static int32_t prompts[N][64];
    static pg_er_result alone, batch[N];
    int lens[N];
    for (int i = 0; i < N; i++) {
        lens[i] = 3 + (i * 7) % 50;
        pg_er_prompt(i, lens[i], prompts[i]);
    }
    pagoda_engine_options o;
    pagoda_engine_options_default(&o);
    o.dtype = dtype;
    pagoda_engine *e = pg_er_open(model, &o);
    uint64_t id, ids[N];
    pagoda_request r = greedy_req(e, prompts[0], (size_t)lens[0], 24);
    assert_int_equal(pagoda_engine_add_request(e, &r, &id, NULL), PAGODA_OK);
    run_all(e, &id, &alone, 1, NULL);
    pagoda_engine_free(e);

    pagoda_engine_options_default(&o);
    o.dtype = dtype;
    o.enable_prefix_caching = false;
    e = pg_er_open(model, &o);
    for (int i = N - 1; i >= 0; i--) { /* request 0 last: a different batch position */
        r = greedy_req(e, prompts[i], (size_t)lens[i], 24 + i);
        assert_int_equal(pagoda_engine_add_request(e, &r, &ids[i], NULL), PAGODA_OK);
    }
    run_all(e, ids, batch, N, NULL);
    pg_er_assert_same_tokens(&alone, &batch[0], true);
    /* and the requests do differ from each other (the test can fail) */
    bool differ = false;
    for (int i = 1; i < N; i++)
        differ |= batch[i].ids[0] != batch[0].ids[0] || batch[i].ids[1] != batch[0].ids[1];
    assert_true(differ);
    pagoda_engine_free(e);
}

static void test_batch_invariance_f32(void **state) {
    (void)state;
    check_batch_invariance(g_tiny, PAGODA_DTYPE_AUTO);
    check_batch_invariance(g_qwen3, PAGODA_DTYPE_AUTO);
}

static void test_batch_invariance_bf16(void **state) {
    (void)state;
    check_batch_invariance(g_tiny_bf16, PAGODA_DTYPE_AUTO);
    check_batch_invariance(g_qwen3_bf16, PAGODA_DTYPE_AUTO);
}

/* --dtype float32 (BF16 weights widened) and --dtype bfloat16 (F32 weights
 * narrowed) keep the property. */
static void test_batch_invariance_other_dtypes(void **state) {
    (void)state;
    check_batch_invariance(g_tiny_bf16, PAGODA_DTYPE_F32);
    check_batch_invariance(g_tiny, PAGODA_DTYPE_BF16);
}

/* ---- prefix caching ----------------------------------------------------------------- */

static void check_prefix_caching(const char *model) {
    static int32_t prompt[80];
    static pg_er_result off, cold, hit;
    pg_er_prompt(3, 70, prompt);
    pagoda_engine_options o;
    pagoda_engine_options_default(&o);
    o.enable_prefix_caching = false;
    pagoda_engine *e = pg_er_open(model, &o);
    pagoda_request r = greedy_req(e, prompt, 70, 16);
    uint64_t id;
    assert_int_equal(pagoda_engine_add_request(e, &r, &id, NULL), PAGODA_OK);
    run_all(e, &id, &off, 1, NULL);
    pagoda_engine_free(e);

    e = pg_er_open(model, NULL);
    assert_int_equal(pagoda_engine_add_request(e, &r, &id, NULL), PAGODA_OK);
    run_all(e, &id, &cold, 1, NULL);
    pagoda_stats s0, s1;
    pagoda_engine_get_stats(e, &s0);
    assert_int_equal(pagoda_engine_add_request(e, &r, &id, NULL), PAGODA_OK);
    run_all(e, &id, &hit, 1, NULL);
    pagoda_engine_get_stats(e, &s1);
    assert_true(s1.prefix_cache_hits >= s0.prefix_cache_hits + 64); /* 4 full blocks of 16 */
    assert_true(s1.prefix_cache_queries > s0.prefix_cache_queries);
    pg_er_assert_same_tokens(&off, &cold, true);
    pg_er_assert_same_tokens(&off, &hit, true);
    pagoda_engine_free(e);
}

static void test_prefix_caching(void **state) {
    (void)state;
    check_prefix_caching(g_tiny);
    check_prefix_caching(g_qwen3_bf16);
}

/* ---- cache_salt: prefix-cache isolation ------------------------------------------------ */

/* Run `r` alone with cache salt `salt` (NULL: none); the prompt tokens it
 * was served from the prefix cache (engine counters, checked against the
 * request's own n_cached_tokens via the stats delta). */
static uint64_t run_salted(pagoda_engine *e, pagoda_request r, const char *salt,
                           pg_er_result *res) {
    r.cache_salt = salt;
    pagoda_stats s0, s1;
    pagoda_engine_get_stats(e, &s0);
    uint64_t id;
    assert_int_equal(pagoda_engine_add_request(e, &r, &id, NULL), PAGODA_OK);
    run_all(e, &id, res, 1, NULL);
    pagoda_engine_get_stats(e, &s1);
    assert_true(s1.prefix_cache_queries > s0.prefix_cache_queries);
    return s1.prefix_cache_hits - s0.prefix_cache_hits;
}

/* Salted requests never share KV blocks with unsalted ones or with other
 * salts (vLLM's cache_salt); equal salts, and unsalted requests among
 * themselves, still do; outputs are those of a cold run either way. Under
 * both block hashes. */
static void check_cache_salt(pagoda_prefix_hash_algo algo) {
    static int32_t prompt[80];
    static pg_er_result ref, got;
    pg_er_prompt(5, 70, prompt); /* 4 full blocks of 16 */
    pagoda_engine_options o;
    pagoda_engine_options_default(&o);
    o.prefix_caching_hash_algo = algo;
    pagoda_engine *e = pg_er_open(g_tiny, &o);
    pagoda_request r = greedy_req(e, prompt, 70, 8);
    assert_true(run_salted(e, r, NULL, &ref) == 0);     /* cold */
    assert_true(run_salted(e, r, NULL, &got) == 64);    /* unsalted twins share */
    pg_er_assert_same_tokens(&ref, &got, true);
    assert_true(run_salted(e, r, "tenant-a", &got) == 0); /* salted vs unsalted */
    pg_er_assert_same_tokens(&ref, &got, true);
    assert_true(run_salted(e, r, "tenant-b", &got) == 0); /* another salt */
    assert_true(run_salted(e, r, "tenant-a1", &got) == 0); /* a salt extending another */
    assert_true(run_salted(e, r, "tenant-a", &got) == 64); /* the same salt shares */
    pg_er_assert_same_tokens(&ref, &got, true);
    assert_true(run_salted(e, r, "", &got) == 64); /* "" = no salt: the shared cache */
    /* a shorter prompt with the same head: only the salt-mates' blocks */
    pagoda_request r2 = greedy_req(e, prompt, 40, 2); /* 2 full blocks, 39 cacheable tokens */
    assert_true(run_salted(e, r2, "tenant-b", &got) == 32);
    assert_true(run_salted(e, r2, "tenant-c", &got) == 0);
    pagoda_engine_free(e);
}

static void test_cache_salt_isolation(void **state) {
    (void)state;
    check_cache_salt(PAGODA_PREFIX_HASH_SHA256);
    check_cache_salt(PAGODA_PREFIX_HASH_XXHASH);
}

static void test_bad_hash_algo_option(void **state) {
    (void)state;
    pagoda_engine_options o;
    pagoda_engine_options_default(&o);
    o.prefix_caching_hash_algo = (pagoda_prefix_hash_algo)7;
    pagoda_engine *e = (pagoda_engine *)1;
    assert_int_equal(pagoda_engine_create(g_tiny, &o, &e), PAGODA_ERR_INVALID_ARG);
    assert_null(e);
    assert_non_null(strstr(pagoda_last_error(), "prefix_caching_hash_algo 7"));
}

/* ---- chunked prefill ------------------------------------------------------------------ */

static void check_chunked_prefill(const char *model) {
    enum { N = 4 };
    static int32_t prompts[N][128];
    static pg_er_result ref[N], got[N];
    int lens[N] = {100, 37, 5, 64};
    for (int i = 0; i < N; i++)
        pg_er_prompt(10 + i, lens[i], prompts[i]);
    int budgets[] = {0, 64, 7, 4};
    for (size_t b = 0; b < sizeof budgets / sizeof budgets[0]; b++) {
        pagoda_engine_options o;
        pagoda_engine_options_default(&o);
        o.max_num_batched_tokens = budgets[b];
        o.max_num_seqs = budgets[b] && budgets[b] < N ? budgets[b] : N;
        pagoda_engine *e = pg_er_open(model, &o);
        uint64_t ids[N];
        for (int i = 0; i < N; i++) {
            pagoda_request r = greedy_req(e, prompts[i], (size_t)lens[i], 12);
            assert_int_equal(pagoda_engine_add_request(e, &r, &ids[i], NULL), PAGODA_OK);
        }
        run_all(e, ids, b ? got : ref, N, NULL);
        if (b)
            for (int i = 0; i < N; i++)
                pg_er_assert_same_tokens(&ref[i], &got[i], true);
        pagoda_engine_free(e);
    }
}

static void test_chunked_prefill(void **state) {
    (void)state;
    check_chunked_prefill(g_tiny);
    check_chunked_prefill(g_qwen3_bf16);
}

/* ---- sliding window (Mistral) --------------------------------------------------------
 * The sliding-window KV cache group frees blocks that fall out of every
 * query's window during the request. Outputs must equal a run of the same
 * forward over a cache that keeps every block (tests/helpers/model_run.h),
 * alone, batched, chunked and with prefix-cache hits. */

/* dir: the model (F32 weights); n_full / n_sliding: its KV cache groups
 * of full / sliding layers, window the sliding ones' window. After its
 * prefill (which needs the whole prompt's KV), a request of L tokens alone
 * holds at most n_full * ceil(L / 16) + n_sliding * (ceil(W / 16) + 1)
 * blocks (a query sees W tokens, which span that many blocks), not
 * (n_full + n_sliding) * ceil(L / 16). */
static void check_sliding_window(const char *dir, int n_full, int n_sliding, int window) {
    enum { N = 6, P = 70, OUT = 50 };
    static int32_t prompts[N][P];
    static pg_er_result ref[N], got[N];
    for (int i = 0; i < N; i++)
        pg_er_prompt(i < 3 ? 40 : 40 + i, P, prompts[i]); /* 0-2 share everything */
    /* reference greedy ids through pg_test_seq (no block is ever dropped) */
    pg_model_options mo;
    pg_model_options_default(&mo);
    pg_model_source *src;
    pg_model *m = pg_test_load(dir, &mo, &src);
    assert_int_equal(pg_model_layer_cache(m, 0)->kind, PG_LAYER_CACHE_SLIDING);
    assert_int_equal(pg_model_layer_cache(m, 0)->window, window);
    const int32_t V = pg_model_get_config(m)->vocab_size;
    float *logits = malloc((size_t)V * sizeof(float));
    assert_non_null(logits);
    int32_t want[N][OUT];
    for (int i = 0; i < N; i++) {
        pg_test_seq *s = pg_test_seq_create(m, P + OUT, 16, PG_F32);
        assert_int_equal(pg_test_seq_forward(s, prompts[i], P, logits), PAGODA_OK);
        for (int k = 0; k < OUT; k++) {
            int32_t best = 0;
            for (int32_t v = 1; v < V; v++)
                if (logits[v] > logits[best]) best = v;
            want[i][k] = best;
            if (k + 1 < OUT) assert_int_equal(pg_test_seq_forward(s, &best, 1, logits), PAGODA_OK);
        }
        pg_test_seq_free(s);
    }
    free(logits);
    pg_model_free(m);
    pg_model_source_free(src);
    /* the engine: alone (prefix caching off), then batched with hits and
     * chunked prefill (budget 7) */
    for (int mode = 0; mode < 2; mode++) {
        pagoda_engine_options o;
        pagoda_engine_options_default(&o);
        o.enable_prefix_caching = mode == 1;
        if (mode == 1) o.max_num_batched_tokens = 7, o.max_num_seqs = 7;
        pagoda_engine *e = pg_er_open(dir, &o);
        uint64_t ids[N];
        for (int i = 0; i < N; i++) {
            pagoda_request r = greedy_req(e, prompts[i], P, OUT);
            assert_int_equal(pagoda_engine_add_request(e, &r, &ids[i], NULL), PAGODA_OK);
            if (mode == 0) {
                run_all(e, &ids[i], &ref[i], 1, NULL);
                const int32_t per = (P + OUT + 15) / 16, win = (window + 15) / 16 + 1;
                if (g_max_used_blocks > n_full * per + n_sliding * win)
                    fail_msg("%s: request %d held %d KV blocks; window-sized sliding groups "
                             "allow %d",
                             dir, i, g_max_used_blocks, n_full * per + n_sliding * win);
            }
        }
        if (mode == 1) run_all(e, ids, got, N, NULL);
        pagoda_stats st;
        pagoda_engine_get_stats(e, &st);
        assert_int_equal(st.num_free_kv_blocks, st.num_kv_blocks);
        if (mode == 1) assert_true(st.prefix_cache_hits > 0);
        pagoda_engine_free(e);
    }
    for (int i = 0; i < N; i++) {
        assert_memory_equal(ref[i].ids, want[i], OUT * sizeof(int32_t));
        pg_er_assert_same_tokens(&ref[i], &got[i], true);
    }
}

static void test_sliding_window_frees_blocks_exactly(void **state) {
    (void)state;
    check_sliding_window(g_mistral, 0, 1, 24);  /* every layer slides */
    check_sliding_window(g_gpt_oss, 1, 1, 20);  /* GPT-OSS: alternating groups, sinks */
}

/* ---- preemption ---------------------------------------------------------------------------- */

static void test_preemption(void **state) {
    (void)state;
    enum { N = 16 };
    static int32_t prompts[N][40];
    static pg_er_result ref[N], got[N];
    int lens[N];
    for (int i = 0; i < N; i++) {
        lens[i] = 10 + (i * 5) % 20;
        pg_er_prompt(30 + i, lens[i], prompts[i]);
    }
    for (int pass = 0; pass < 2; pass++) {
        pagoda_engine_options o;
        pagoda_engine_options_default(&o);
        /* tiny model F32: 2 layers x 2 KV heads x 16 dims x K,V x 4 B = 512 B/token;
         * pass 1: 10 usable blocks of 16 tokens: about 3 requests of <= 48 tokens */
        o.kv_cache_memory = pass ? 11 * 16 * 512 : 0;
        pagoda_engine *e = pg_er_open(g_tiny, &o);
        uint64_t ids[N];
        for (int i = 0; i < N; i++) {
            pagoda_request r = greedy_req(e, prompts[i], (size_t)lens[i], 18);
            assert_int_equal(pagoda_engine_add_request(e, &r, &ids[i], NULL), PAGODA_OK);
        }
        run_all(e, ids, pass ? got : ref, N, NULL);
        pagoda_stats s;
        pagoda_engine_get_stats(e, &s);
        if (pass) {
            assert_true(s.num_preemptions > 0);
            for (int i = 0; i < N; i++)
                pg_er_assert_same_tokens(&ref[i], &got[i], true);
        }
        assert_int_equal(s.num_free_kv_blocks, s.num_kv_blocks);
        pagoda_engine_free(e);
    }
}

/* ---- leaks under random aborts ----------------------------------------------------------------
 */

/* 1000 requests natively; fewer under qemu (the aarch64 build), where every
 * fork-join of the pool is expensive. */
#if defined(__aarch64__)
#define LEAK_REQUESTS 250
#else
#define LEAK_REQUESTS 1000
#endif

static void test_no_block_leaks_with_random_aborts(void **state) {
    (void)state;
    pagoda_engine_options o;
    pagoda_engine_options_default(&o);
    o.kv_cache_memory = 40 * 16 * 512; /* small: preemption happens too */
    o.max_num_seqs = 16;
    o.max_num_batched_tokens = 64;
    pagoda_engine *e = pg_er_open(g_tiny, &o);
    uint32_t x = 12345;
#define RND() (x = x * 1664525u + 1013904223u, x >> 8)
    int added = 0, aborted = 0, done = 0;
    uint64_t live[64];
    int n_live = 0;
    int32_t prompt[40];
    while (added < LEAK_REQUESTS || pagoda_engine_has_unfinished(e)) {
        while (added < LEAK_REQUESTS && n_live < 48 && RND() % 3 != 0) {
            int len = 1 + (int)(RND() % 30);
            pg_er_prompt(added, len, prompt);
            pagoda_request r = greedy_req(e, prompt, (size_t)len, 1 + (int)(RND() % 8));
            r.sampling.temperature = (RND() % 2) ? 0.0f : 1.0f;
            r.sampling.seed = added;
            uint64_t id;
            assert_int_equal(pagoda_engine_add_request(e, &r, &id, NULL), PAGODA_OK);
            live[n_live++] = id;
            added++;
        }
        if (n_live && RND() % 4 == 0) {
            int k = (int)(RND() % (uint32_t)n_live);
            if (pagoda_engine_abort(e, live[k]) == PAGODA_OK) aborted++;
        }
        size_t nout;
        assert_int_equal(pagoda_engine_step(e, &nout), PAGODA_OK);
        const pagoda_output *outs = pagoda_engine_outputs(e, &nout);
        for (size_t k = 0; k < nout; k++) {
            if (outs[k].finish_reason == PAGODA_FINISH_NONE) continue;
            assert_true(outs[k].finish_reason != PAGODA_FINISH_ERROR);
            done++;
            for (int i = 0; i < n_live; i++)
                if (live[i] == outs[k].id) {
                    live[i] = live[--n_live];
                    break;
                }
        }
    }
#undef RND
    assert_int_equal(done, LEAK_REQUESTS);
    assert_true(aborted > LEAK_REQUESTS / 100);
    assert_int_equal(pagoda_engine_abort(e, live[0] + 100000), PAGODA_ERR_NOT_FOUND);
    pagoda_stats s;
    pagoda_engine_get_stats(e, &s);
    assert_int_equal(s.num_free_kv_blocks, s.num_kv_blocks);
    assert_int_equal(s.num_requests_running, 0);
    assert_int_equal(s.num_requests_waiting, 0);
    pagoda_engine_free(e);
}

/* ---- text: stop strings, min_tokens, UTF-8 ------------------------------------------------------
 */

static pagoda_engine *stories(void) {
    char model[4200];
    snprintf(model, sizeof model, "%s", pg_test_asset("llm/stories260K-hf"));
    return pg_er_open(model, NULL);
}

static void run_text(pagoda_engine *e, pagoda_request *r, pg_er_result *res, const char *held) {
    uint64_t id;
    assert_int_equal(pagoda_engine_add_request(e, r, &id, NULL), PAGODA_OK);
    run_all(e, &id, res, 1, held);
}

static void test_stop_strings(void **state) {
    (void)state;
    pagoda_engine *e = stories();
    static pg_er_result full, cut, incl, never;
    pagoda_request r;
    pagoda_request_defaults(e, &r);
    r.prompt = "Once upon a time";
    r.sampling.temperature = 0;
    r.sampling.max_tokens = 40;
    run_text(e, &r, &full, NULL);
    const char *at = strstr(full.text, "Lily");
    assert_non_null(at); /* ", there was a little girl named Lily. ..." */
    size_t before = (size_t)(at - full.text);

    const char *stop[] = {"Lily"};
    r.sampling.stop = stop;
    r.sampling.n_stop = 1;
    run_text(e, &r, &cut, "Lily");
    assert_int_equal(cut.finish, PAGODA_FINISH_STOP);
    assert_string_equal(cut.stop_reason, "Lily");
    assert_int_equal(cut.text_len, before);
    assert_memory_equal(cut.text, full.text, before);
    assert_true(cut.n < full.n);
    assert_true(cut.held_ok);

    r.sampling.include_stop_str_in_output = true;
    run_text(e, &r, &incl, NULL);
    assert_int_equal(incl.text_len, before + 4);
    assert_memory_equal(incl.text, full.text, before + 4);

    /* a stop string that never completes: its prefixes are held back while
     * they could still match, then flushed at the end */
    const char *never_stop[] = {"named Bob"};
    r.sampling.stop = never_stop;
    r.sampling.include_stop_str_in_output = false;
    run_text(e, &r, &never, "named Bob");
    assert_int_equal(never.finish, PAGODA_FINISH_LENGTH);
    assert_string_equal(never.text, full.text);
    assert_true(never.held_ok);
    pagoda_engine_free(e);
}

/* A caller that detokenizes itself (pagoda_request.no_detokenize, as
 * `pagoda serve` does on its connection threads): its pagoda_detokenizer
 * reads the outputs some steps late (lag: the engine has produced tokens
 * past a stop string by then), aborts the request on a match, and must end
 * with what the engine's own text path gives: text, finish, stop string,
 * the tokens kept (ids and their number, the usage) and their logprobs. */
typedef struct caller_run {
    pagoda_detokenizer *dt;
    uint64_t id;
    int32_t ids[PG_ER_MAX_TOKENS], n_got; /* ids the engine handed over, in order */
    float lp[PG_ER_MAX_TOKENS];
    int32_t n_used; /* of those, taken by the detokenizer */
    bool eng_done, done, aborted;
    pagoda_finish_reason eng_finish, finish;
    int32_t eng_stop_token;
    char text[8192];
    size_t text_len;
} caller_run;

static void caller_take(caller_run *c, const char *t, size_t n) {
    assert_true(c->text_len + n < sizeof c->text);
    memcpy(c->text + c->text_len, t, n);
    c->text_len += n;
}

/* The consumer: take the ids not taken yet (skip_last when the engine
 * ended the request at a stop token), on a match cut and abort. */
static void caller_consume(pagoda_engine *e, caller_run *c) {
    if (c->done) return;
    const int32_t from = c->n_used, n = c->n_got - from;
    const bool skip = c->eng_done && c->eng_finish == PAGODA_FINISH_STOP && c->eng_stop_token >= 0;
    size_t used = 0;
    assert_int_equal(pagoda_detokenizer_add(c->dt, c->ids + from, (size_t)n, skip, &used),
                     PAGODA_OK);
    c->n_used += (int32_t)used;
    const char *stop = pagoda_detokenizer_stop_reason(c->dt);
    const char *t;
    size_t tl;
    assert_int_equal(pagoda_detokenizer_take(c->dt, c->eng_done || stop, &t, &tl), PAGODA_OK);
    caller_take(c, t, tl);
    if (stop) {
        bool at_end = c->eng_done && (int32_t)used == n;
        c->finish = at_end && c->eng_finish == PAGODA_FINISH_LENGTH ? PAGODA_FINISH_LENGTH
                                                                    : PAGODA_FINISH_STOP;
        c->done = true;
        if (!c->eng_done) {
            assert_int_equal(pagoda_engine_abort(e, c->id), PAGODA_OK);
            c->aborted = true;
        }
    } else if (c->eng_done) {
        c->finish = c->eng_finish;
        c->done = true;
    }
}

static void caller_vs_engine(pagoda_engine *e, const pagoda_request *base, int lag) {
    static pg_er_result ref;
    pagoda_request r = *base;
    r.sampling.logprobs = 1;
    run_text(e, &r, &ref, NULL);
    caller_run c;
    memset(&c, 0, sizeof c);
    int32_t prompt[256];
    int32_t *pids = NULL;
    size_t np = 0;
    assert_int_equal(pagoda_tokenize(e, r.prompt, 0, true, &pids, &np), PAGODA_OK);
    assert_true(np <= 256);
    memcpy(prompt, pids, np * sizeof *pids);
    pagoda_free(pids);
    int32_t bad_id = pagoda_engine_vocab_size(e);
    assert_int_equal(pagoda_detokenizer_create(e, &bad_id, 1, &r.sampling, &c.dt),
                     PAGODA_ERR_INVALID_ARG);
    assert_null(c.dt);
    assert_int_equal(pagoda_detokenizer_create(e, prompt, np, &r.sampling, &c.dt), PAGODA_OK);
    r.no_detokenize = true;
    uint64_t bad;
    if (r.sampling.n_stop) /* stop strings are the caller's then */
        assert_int_equal(pagoda_engine_add_request(e, &r, &bad, NULL), PAGODA_ERR_INVALID_ARG);
    /* the engine is told nothing of the stop strings */
    pagoda_request q = r;
    q.sampling.stop = NULL;
    q.sampling.n_stop = 0;
    assert_int_equal(pagoda_engine_add_request(e, &q, &c.id, NULL), PAGODA_OK);
    for (int step = 1; pagoda_engine_has_unfinished(e); step++) {
        size_t n;
        assert_int_equal(pagoda_engine_step(e, &n), PAGODA_OK);
        const pagoda_output *o = pagoda_engine_outputs(e, &n);
        for (size_t k = 0; k < n; k++) {
            if (o[k].id != c.id || c.eng_done) continue;
            assert_int_equal(o[k].text_delta_len, 0); /* no text on the engine's side */
            assert_null(o[k].stop_reason);
            for (size_t t = 0; t < o[k].n_new_tokens; t++) {
                assert_true(c.n_got < PG_ER_MAX_TOKENS);
                c.lp[c.n_got] = o[k].logprobs[t].logprob;
                c.ids[c.n_got++] = o[k].new_token_ids[t];
            }
            if (o[k].finish_reason != PAGODA_FINISH_NONE) {
                c.eng_done = true;
                c.eng_finish = o[k].finish_reason;
                c.eng_stop_token = o[k].stop_token;
            }
        }
        if (step % lag == 0 || c.eng_done) caller_consume(e, &c);
    }
    caller_consume(e, &c);
    assert_true(c.done);
    assert_int_equal(c.finish, ref.finish);
    const char *stop = pagoda_detokenizer_stop_reason(c.dt);
    assert_string_equal(stop ? stop : "", ref.stop_reason);
    assert_int_equal(c.n_used, ref.n); /* usage: the tokens up to the stop */
    assert_memory_equal(c.ids, ref.ids, sizeof(int32_t) * (size_t)ref.n);
    assert_memory_equal(c.lp, ref.lp, sizeof(float) * (size_t)ref.n);
    assert_int_equal(c.text_len, ref.text_len);
    assert_memory_equal(c.text, ref.text, ref.text_len);
    if (c.aborted) assert_true(c.n_got >= c.n_used);
    pagoda_detokenizer_free(c.dt);
}

static void test_caller_detokenizes_like_the_engine(void **state) {
    (void)state;
    pagoda_engine *e = stories();
    pagoda_request r;
    pagoda_request_defaults(e, &r);
    r.prompt = "Once upon a time";
    r.sampling.temperature = 0;
    r.sampling.max_tokens = 40;
    /* ", there was a little girl named Lily. ...": strings inside one token,
     * across tokens (so across steps), matched at once, never, several */
    const char *cases[][3] = {{"Lily", NULL, NULL},      {"e g", NULL, NULL},
                              {"as a l", NULL, NULL},    {"a", NULL, NULL},
                              {"named Bob", NULL, NULL}, {"girl", "ere", "Lily"},
                              {",", NULL, NULL}};
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        size_t ns = 0;
        while (ns < 3 && cases[k][ns])
            ns++;
        r.sampling.stop = cases[k];
        r.sampling.n_stop = ns;
        for (int lag = 1; lag <= 3; lag += 2) {
            r.sampling.include_stop_str_in_output = false;
            r.sampling.min_tokens = 0;
            r.sampling.max_tokens = 40;
            caller_vs_engine(e, &r, lag);
            r.sampling.include_stop_str_in_output = true;
            caller_vs_engine(e, &r, lag);
            r.sampling.include_stop_str_in_output = false;
            r.sampling.min_tokens = 4; /* stop strings count from output 5 on */
            caller_vs_engine(e, &r, lag);
            r.sampling.min_tokens = 0;
            r.sampling.max_tokens = 3; /* "length" at the stop's token stays "length" */
            caller_vs_engine(e, &r, lag);
        }
    }
    /* sampled, n > 1 as the server runs it: seeds 1..3 */
    r.sampling.temperature = 1.0f;
    r.sampling.max_tokens = 40;
    const char *st[] = {"a", "the"};
    r.sampling.stop = st;
    r.sampling.n_stop = 2;
    for (int64_t seed = 1; seed <= 3; seed++) {
        r.sampling.seed = seed;
        caller_vs_engine(e, &r, 2);
    }
    pagoda_engine_free(e);
}

static void test_min_tokens_and_stop_token_ids(void **state) {
    (void)state;
    pagoda_engine *e = stories();
    static pg_er_result a, b;
    int32_t bos = 1;
    pagoda_request r = greedy_req(e, &bos, 1, 10);
    r.sampling.ignore_eos = false;
    run_text(e, &r, &a, NULL);
    int32_t first = a.ids[0];
    r.sampling.stop_token_ids = &first;
    r.sampling.n_stop_token_ids = 1;
    run_text(e, &r, &a, NULL);
    assert_int_equal(a.n, 1);
    assert_int_equal(a.finish, PAGODA_FINISH_STOP);
    assert_int_equal(a.stop_token, first);
    assert_int_equal(a.text_len, 0); /* the stop token is not text */
    r.sampling.min_tokens = 3;
    run_text(e, &r, &b, NULL);
    assert_true(b.n >= 3);
    for (int i = 0; i < 3; i++)
        assert_int_not_equal(b.ids[i], first);
    pagoda_engine_free(e);
}

static void test_utf8_safe_deltas(void **state) {
    (void)state;
    /* the detokenizer alone: byte-fallback tokens of a 4-byte character */
    pg_tokenizer *tok;
    assert_int_equal(pg_tokenizer_load(pg_test_asset("llm/stories260K-hf"), &tok), PAGODA_OK);
    int32_t ids[16];
    size_t n;
    const char *smile = "\xF0\x9F\x98\x80";
    assert_int_equal(pg_tokenizer_encode(tok, smile, 4, false, ids, 16, &n), PAGODA_OK);
    int32_t bos = 1;
    pg_detok d;
    assert_int_equal(pg_detok_init(&d, tok, &bos, 1, true, NULL, 0, false), PAGODA_OK);
    char got[32] = "";
    size_t got_len = 0;
    int nonempty = 0;
    for (size_t i = 0; i < n; i++) {
        assert_int_equal(pg_detok_add(&d, ids[i], true), PAGODA_OK);
        const char *delta;
        size_t len;
        assert_int_equal(pg_detok_take(&d, false, &delta, &len), PAGODA_OK);
        assert_true(pg_er_utf8_valid(delta, len));
        if (len) nonempty++;
        memcpy(got + got_len, delta, len);
        got_len += len;
    }
    assert_true(n >= 4 - 1 || nonempty == 1);
    assert_int_equal(nonempty, 1);
    assert_true(got_len >= 4);
    assert_memory_equal(got + got_len - 4, smile, 4);
    pg_detok_free(&d);

    /* byte tokens in an order that forms no character (a random model
     * samples such): each such byte becomes U+FFFD, the text stays valid
     * UTF-8 (HF ByteFallback). The last 4 ids are F0 9F 98 80: feed 9F, F0, 80, 9F */
    assert_true(n >= 4);
    const int32_t *b4 = ids + n - 4;
    const int32_t bad[4] = {b4[1], b4[0], b4[3], b4[1]};
    assert_int_equal(pg_detok_init(&d, tok, &bos, 1, true, NULL, 0, false), PAGODA_OK);
    got_len = 0;
    for (size_t i = 0; i < 5; i++) {
        if (i < 4) assert_int_equal(pg_detok_add(&d, bad[i], true), PAGODA_OK);
        const char *delta;
        size_t len;
        assert_int_equal(pg_detok_take(&d, i == 4, &delta, &len), PAGODA_OK);
        assert_true(pg_er_utf8_valid(delta, len));
        assert_true(got_len + len < sizeof got);
        memcpy(got + got_len, delta, len);
        got_len += len;
    }
    assert_int_equal(got_len, 12);
    assert_memory_equal(got, "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD", 12);
    pg_detok_free(&d);
    pg_tokenizer_free(tok);

    /* the engine: random sampling on a random model hits byte tokens */
    pagoda_engine *e = pg_er_open(g_tiny, NULL);
    static pg_er_result res;
    pagoda_request r = greedy_req(e, &bos, 1, 200);
    r.sampling.temperature = 1.5f;
    r.sampling.seed = 7;
    run_text(e, &r, &res, NULL);
    assert_true(res.utf8_ok);
    assert_int_equal(res.n, 200);
    pagoda_engine_free(e);
}

/* ---- rejections and seeds -------------------------------------------------------------------- */

static void test_rejects_requests_that_cannot_fit(void **state) {
    (void)state;
    pagoda_engine_options o;
    pagoda_engine_options_default(&o);
    o.max_model_len = 64;
    pagoda_engine *e = pg_er_open(g_tiny, &o);
    static int32_t prompt[100];
    pg_er_prompt(1, 100, prompt);
    pagoda_request r = greedy_req(e, prompt, 100, 4);
    uint64_t id;
    assert_int_equal(pagoda_engine_add_request(e, &r, &id, NULL), PAGODA_ERR_LIMIT);
    assert_non_null(strstr(pagoda_last_error(), "100"));
    assert_non_null(strstr(pagoda_last_error(), "64"));
    r = greedy_req(e, prompt, 60, 10);
    assert_int_equal(pagoda_engine_add_request(e, &r, &id, NULL), PAGODA_ERR_LIMIT);
    assert_non_null(strstr(pagoda_last_error(), "70"));
    r = greedy_req(e, prompt, 0, 10);
    assert_int_equal(pagoda_engine_add_request(e, &r, &id, NULL), PAGODA_ERR_INVALID_ARG);
    prompt[0] = 100000;
    r = greedy_req(e, prompt, 5, 10);
    assert_int_equal(pagoda_engine_add_request(e, &r, &id, NULL), PAGODA_ERR_INVALID_ARG);
    assert_non_null(strstr(pagoda_last_error(), "100000"));
    pg_er_prompt(1, 5, prompt);
    r = greedy_req(e, prompt, 5, 10);
    r.sampling.top_p = 0;
    r.sampling.temperature = 1;
    assert_int_equal(pagoda_engine_add_request(e, &r, &id, NULL), PAGODA_ERR_INVALID_ARG);
    assert_non_null(strstr(pagoda_last_error(), "top_p"));
    /* stop_token_ids: an id outside the vocabulary and too many ids are told apart */
    r = greedy_req(e, prompt, 5, 10);
    static int32_t stops[20];
    stops[0] = 100000;
    r.sampling.stop_token_ids = stops;
    r.sampling.n_stop_token_ids = 1;
    assert_int_equal(pagoda_engine_add_request(e, &r, &id, NULL), PAGODA_ERR_INVALID_ARG);
    assert_non_null(strstr(pagoda_last_error(), "token id 100000 is outside the vocabulary"));
    stops[0] = 2;
    r.sampling.n_stop_token_ids = 20;
    assert_int_equal(pagoda_engine_add_request(e, &r, &id, NULL), PAGODA_ERR_INVALID_ARG);
    assert_non_null(strstr(pagoda_last_error(), "20 stop_token_ids, at most"));
    assert_false(pagoda_engine_has_unfinished(e));
    pagoda_engine_free(e);
}

/* max_tokens 0 (null) means "up to the context"; with a KV cache smaller
 * than max_model_len (512) that is capped by what the cache holds, instead
 * of rejecting the request (it used to need 512 tokens of blocks). */
static void test_null_max_tokens_capped_by_kv_cache(void **state) {
    (void)state;
    pagoda_engine_options o;
    pagoda_engine_options_default(&o);
    o.kv_cache_memory = 11 * 16 * 512; /* 10 usable blocks of 16 tokens = 160 tokens */
    pagoda_engine *e = pg_er_open(g_tiny, &o);
    assert_int_equal(pagoda_engine_max_model_len(e), 512);
    pagoda_stats st;
    pagoda_engine_get_stats(e, &st);
    int32_t kv_tokens = st.num_kv_blocks * 16;
    assert_true(kv_tokens < 512);
    static int32_t prompt[200];
    pg_er_prompt(3, 20, prompt);
    pagoda_request r = greedy_req(e, prompt, 20, 0);
    r.sampling.logprobs = -1;
    uint64_t id;
    if (pagoda_engine_add_request(e, &r, &id, NULL) != PAGODA_OK)
        fail_msg("max_tokens 0 rejected: %s", pagoda_last_error());
    static pg_er_result res;
    run_all(e, &id, &res, 1, NULL);
    assert_int_equal(res.finish, PAGODA_FINISH_LENGTH);
    assert_int_equal(res.n, kv_tokens - 20);
    /* an explicit max_tokens over the cache is still an error naming the blocks */
    r = greedy_req(e, prompt, 20, 200);
    assert_int_equal(pagoda_engine_add_request(e, &r, &id, NULL), PAGODA_ERR_LIMIT);
    assert_non_null(strstr(pagoda_last_error(), "KV blocks"));
    /* a prompt that fills the cache leaves no room even with max_tokens 0 */
    pg_er_prompt(4, kv_tokens, prompt);
    r = greedy_req(e, prompt, (size_t)kv_tokens, 0);
    assert_int_equal(pagoda_engine_add_request(e, &r, &id, NULL), PAGODA_ERR_LIMIT);
    assert_non_null(strstr(pagoda_last_error(), "no room for output"));
    pagoda_engine_get_stats(e, &st);
    assert_int_equal(st.num_free_kv_blocks, st.num_kv_blocks);
    pagoda_engine_free(e);
}

static void test_seeded_sampling_is_batch_independent(void **state) {
    (void)state;
    enum { N = 8 };
    static int32_t prompts[N][40];
    static pg_er_result alone, batch[N];
    for (int i = 0; i < N; i++)
        pg_er_prompt(50 + i, 5 + 3 * i, prompts[i]);
    pagoda_engine *e = pg_er_open(g_tiny, NULL);
    pagoda_request r = greedy_req(e, prompts[0], 5, 30);
    r.sampling.temperature = 1.0f;
    r.sampling.top_k = 50;
    r.sampling.seed = 1234;
    uint64_t id, ids[N];
    assert_int_equal(pagoda_engine_add_request(e, &r, &id, NULL), PAGODA_OK);
    run_all(e, &id, &alone, 1, NULL);
    for (int i = 0; i < N; i++) {
        pagoda_request q = greedy_req(e, prompts[i], (size_t)(5 + 3 * i), 30);
        q.sampling.temperature = 1.0f;
        q.sampling.top_k = 50;
        q.sampling.seed = i == 0 ? 1234 : 99 + i;
        assert_int_equal(pagoda_engine_add_request(e, &q, &ids[i], NULL), PAGODA_OK);
    }
    run_all(e, ids, batch, N, NULL);
    pg_er_assert_same_tokens(&alone, &batch[0], true);
    pagoda_engine_free(e);
}

/* ---- speculative decoding --------------------------------------------------------- */

enum { SPEC_N = 6 };

/* A perfect draft model (the target itself: the tokens a run without
 * speculation produced) that gets every `wrong`-th output position wrong,
 * so drafts are accepted, then rejected at known places. */
typedef struct oracle {
    const pg_er_result *ref;
    uint64_t ids[SPEC_N];
    int wrong;
} oracle;

static int32_t oracle_propose(void *ctx, const pg_request *r, int32_t k, int32_t *out) {
    const oracle *o = ctx;
    for (int i = 0; i < SPEC_N; i++) {
        if (o->ids[i] != r->id) continue;
        int32_t pos = r->num_tokens - r->num_prompt_tokens, m = 0;
        for (; m < k && pos + m < o->ref[i].n; m++) {
            out[m] = o->ref[i].ids[pos + m];
            if ((pos + m) % o->wrong == o->wrong - 1) out[m] = (out[m] + 1) % 256;
        }
        return m;
    }
    return 0;
}

/* "Repeat this passage" prompts: a passage, then its first half again. */
static int spec_prompt(int i, int32_t *out) {
    int len = 12 + 5 * i;
    pg_er_prompt(70 + i, len, out);
    for (int k = 1; k < len / 2; k++)
        out[len + k - 1] = out[k];
    return len + len / 2 - 1;
}

/* Per request: a stop string and a stop token id taken from the output of
 * a run without them (so they do end requests, inside a step's tokens). */
static char g_spec_stop[SPEC_N][8];
static const char *g_spec_stop_ptr[SPEC_N];
static int32_t g_spec_stop_tok[SPEC_N];

static pagoda_request spec_req(const pagoda_engine *e, const int32_t *ids, int n, int i) {
    pagoda_request r = greedy_req(e, ids, (size_t)n, 30 + 3 * i);
    r.sampling.ignore_eos = i % 2 == 0; /* EOS may come among accepted drafts */
    if (g_spec_stop[i][0]) {
        g_spec_stop_ptr[i] = g_spec_stop[i];
        r.sampling.stop = &g_spec_stop_ptr[i];
        r.sampling.n_stop = 1;
    }
    if (g_spec_stop_tok[i] >= 0) {
        r.sampling.stop_token_ids = &g_spec_stop_tok[i];
        r.sampling.n_stop_token_ids = 1;
    }
    return r;
}

/* Run the SPEC_N requests (all at once, or one at a time) with options o
 * and, when orc is set, its proposer; res[i] per request. */
static void spec_run(const char *model, pagoda_engine_options *o, bool together, oracle *orc,
                     pg_er_result *res, pagoda_stats *st) {
    static int32_t prompts[SPEC_N][80];
    int lens[SPEC_N];
    for (int i = 0; i < SPEC_N; i++)
        lens[i] = spec_prompt(i, prompts[i]);
    pagoda_engine *e = pg_er_open(model, o);
    if (orc) assert_int_equal(pg_engine_set_proposer(e, oracle_propose, orc), PAGODA_OK);
    uint64_t ids[SPEC_N];
    for (int i = 0; i < SPEC_N; i++) {
        pagoda_request r = spec_req(e, prompts[i], lens[i], i);
        assert_int_equal(pagoda_engine_add_request(e, &r, &ids[i], NULL), PAGODA_OK);
        if (orc) orc->ids[i] = ids[i];
        if (!together) run_all(e, &ids[i], &res[i], 1, NULL);
    }
    if (together) run_all(e, ids, res, SPEC_N, NULL);
    pagoda_engine_get_stats(e, st);
    pagoda_engine_free(e);
}

/* Greedy outputs with speculation are bitwise those without (tokens,
 * logprobs, text, finish), with the n-gram proposer and with the target as
 * its own draft model (wrong every 5th / 3rd token, or always: the
 * acceptance-adaptive K then gives fewer drafts than outputs), alone and
 * batched, with small token budgets (chunked prefill; fewer drafts) and
 * with preemption (a KV cache of a few blocks). */
static void check_spec_exact(const char *model, bool expect_preemption) {
    static pg_er_result ref[SPEC_N], got[SPEC_N];
    pagoda_engine_options o;
    pagoda_engine_options_default(&o);
    pagoda_stats st;
    for (int i = 0; i < SPEC_N; i++) {
        g_spec_stop[i][0] = 0;
        g_spec_stop_tok[i] = -1;
    }
    spec_run(model, &o, true, NULL, ref, &st);
    for (int i = 0; i < SPEC_N; i++) { /* stops from the middle of the outputs */
        if (i % 3 == 1 && ref[i].text_len > 12)
            memcpy(g_spec_stop[i], ref[i].text + ref[i].text_len / 2, 3);
        if (i % 3 == 2 && ref[i].n > 20) g_spec_stop_tok[i] = ref[i].ids[ref[i].n / 2];
    }
    spec_run(model, &o, true, NULL, ref, &st);
    assert_int_equal(st.spec_num_drafts, 0);
    const int32_t ref_blocks = st.num_kv_blocks;
    bool stopped = false;
    for (int i = 0; i < SPEC_N; i++)
        stopped |= ref[i].stop_reason[0] != 0 || ref[i].stop_token >= 0;
    const pagoda_speculative_config ngram = {.method = PAGODA_SPEC_NGRAM,
                                             .num_speculative_tokens = 4,
                                             .prompt_lookup_min = 2,
                                             .prompt_lookup_max = 4};
    uint64_t drafted = 0, accepted = 0;
    for (int c = 0; c < 6; c++) {
        pagoda_engine_options_default(&o);
        o.speculative = ngram;
        /* case 5: a draft that never agrees (acceptance-adaptive K) */
        oracle orc = {.ref = ref, .wrong = c == 3 ? 3 : c == 5 ? 1 : 5};
        if (c == 1 || c == 3) o.max_num_batched_tokens = o.max_num_seqs = 16;
        if (c == 2) o.speculative.num_speculative_tokens = 3;
        if (c == 4) /* 7 usable blocks (the reference had 8 MiB): preemption */
            o.kv_cache_memory = (uint64_t)(8u << 20) * 17u / (uint64_t)ref_blocks / 2u;
        spec_run(model, &o, c != 2 && c != 5, c >= 2 ? &orc : NULL, got, &st);
        for (int i = 0; i < SPEC_N; i++) {
            if (ref[i].n != got[i].n ||
                memcmp(ref[i].ids, got[i].ids, sizeof(int32_t) * (size_t)ref[i].n))
                print_message("case %d request %d: %d vs %d tokens\n", c, i, ref[i].n, got[i].n);
            pg_er_assert_same(&ref[i], &got[i], true);
        }
        print_message("%s case %d: %llu drafts, %llu draft tokens, %llu accepted, %llu "
                      "preemptions\n",
                      model, c, (unsigned long long)st.spec_num_drafts,
                      (unsigned long long)st.spec_num_draft_tokens,
                      (unsigned long long)st.spec_num_accepted_tokens,
                      (unsigned long long)st.num_preemptions);
        if (c >= 2 && c < 5) { /* the oracle: drafts accepted and rejected */
            assert_true(st.spec_num_accepted_tokens > 0);
            assert_true(st.spec_num_accepted_tokens < st.spec_num_draft_tokens);
        }
        if (c == 5) { /* alone, never accepted: fewer drafts than outputs, not K per decode */
            uint64_t outs = 0;
            for (int i = 0; i < SPEC_N; i++)
                outs += (uint64_t)got[i].n;
            assert_int_equal(st.spec_num_accepted_tokens, 0);
            assert_true(st.spec_num_draft_tokens > 0);
            assert_true(st.spec_num_draft_tokens < outs);
        }
        if (c == 4 && expect_preemption) assert_true(st.num_preemptions > 0);
        drafted += st.spec_num_draft_tokens;
        accepted += st.spec_num_accepted_tokens;
    }
    assert_true(accepted > 0 && accepted < drafted);
    assert_true(stopped);
}

static void test_speculative_greedy_is_exact(void **state) {
    (void)state;
    char model[4200];
    snprintf(model, sizeof model, "%s", pg_test_asset("llm/stories260K-hf"));
    check_spec_exact(model, true);
    check_spec_exact(g_qwen3_bf16, false);
    check_spec_exact(g_mistral, false); /* sliding window: blocks outside it freed too */
}

/* Sampled requests with speculation (rejection sampling) stay a pure
 * function of their seed: alone or among strangers, with drafts accepted
 * and rejected, the same tokens; the distribution itself is checked in
 * test_sampler.c (test_rejection_sampling_keeps_the_target_distribution). */
static void test_speculative_sampling_is_seeded(void **state) {
    (void)state;
    static int32_t prompts[SPEC_N][80];
    static pg_er_result alone, batch[SPEC_N];
    int lens[SPEC_N];
    for (int i = 0; i < SPEC_N; i++)
        lens[i] = spec_prompt(i, prompts[i]);
    char model[4200];
    snprintf(model, sizeof model, "%s", pg_test_asset("llm/stories260K-hf"));
    pagoda_engine_options o;
    pagoda_engine_options_default(&o);
    o.speculative = (pagoda_speculative_config){.method = PAGODA_SPEC_NGRAM,
                                                .num_speculative_tokens = 4,
                                                .prompt_lookup_min = 1,
                                                .prompt_lookup_max = 3};
    pagoda_engine *e = pg_er_open(model, &o);
    uint64_t id, ids[SPEC_N];
    for (int pass = 0; pass < 2; pass++)
        for (int i = 0; i < (pass ? SPEC_N : 1); i++) {
            pagoda_request q = greedy_req(e, prompts[i], (size_t)lens[i], 60);
            q.sampling.temperature = 0.7f;
            q.sampling.top_k = 40;
            q.sampling.seed = i == 0 ? 4321 : 17 + i;
            assert_int_equal(pagoda_engine_add_request(e, &q, pass ? &ids[i] : &id, NULL),
                             PAGODA_OK);
            if (!pass) run_all(e, &id, &alone, 1, NULL);
        }
    run_all(e, ids, batch, SPEC_N, NULL);
    pg_er_assert_same_tokens(&alone, &batch[0], true);
    pagoda_stats st;
    pagoda_engine_get_stats(e, &st);
    print_message("sampled: %llu draft tokens, %llu accepted\n",
                  (unsigned long long)st.spec_num_draft_tokens,
                  (unsigned long long)st.spec_num_accepted_tokens);
    assert_true(st.spec_num_accepted_tokens > 0);
    assert_true(st.spec_num_accepted_tokens < st.spec_num_draft_tokens);
    pagoda_engine_free(e);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_stories_reference_f32),
        cmocka_unit_test(test_stories_reference_bf16),
        cmocka_unit_test(test_stories_reference_bf16_as_float32),
        cmocka_unit_test(test_stories_reference_f32_as_bfloat16),
        cmocka_unit_test(test_float16_runs_as_bfloat16),
        cmocka_unit_test(test_prompt_with_more_ids_than_bytes),
        cmocka_unit_test(test_bad_dtype_is_rejected),
        cmocka_unit_test(test_chat_template_compiled_once),
        cmocka_unit_test(test_batch_invariance_f32),
        cmocka_unit_test(test_batch_invariance_bf16),
        cmocka_unit_test(test_batch_invariance_other_dtypes),
        cmocka_unit_test(test_prefix_caching),
        cmocka_unit_test(test_cache_salt_isolation),
        cmocka_unit_test(test_bad_hash_algo_option),
        cmocka_unit_test(test_chunked_prefill),
        cmocka_unit_test(test_sliding_window_frees_blocks_exactly),
        cmocka_unit_test(test_preemption),
        cmocka_unit_test(test_no_block_leaks_with_random_aborts),
        cmocka_unit_test(test_stop_strings),
        cmocka_unit_test(test_caller_detokenizes_like_the_engine),
        cmocka_unit_test(test_min_tokens_and_stop_token_ids),
        cmocka_unit_test(test_utf8_safe_deltas),
        cmocka_unit_test(test_rejects_requests_that_cannot_fit),
        cmocka_unit_test(test_null_max_tokens_capped_by_kv_cache),
        cmocka_unit_test(test_seeded_sampling_is_batch_independent),
        cmocka_unit_test(test_speculative_greedy_is_exact),
        cmocka_unit_test(test_speculative_sampling_is_seeded),
    };
    if (getenv("PAGODA_TEST_FILTER")) cmocka_set_test_filter(getenv("PAGODA_TEST_FILTER"));
    return cmocka_run_group_tests(tests, setup, NULL);
}
