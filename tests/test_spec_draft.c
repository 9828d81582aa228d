/* Draft-model speculative decoding (engine/draft.h): greedy outputs with a
 * draft are bitwise those without (the target as its own draft, and a
 * smaller random model of the same vocabulary), across batch sizes, token
 * budgets (chunked prefill) and preemption; the draft's KV after rejections
 * equals a fresh draft's (rollback); vocabulary mismatches and bad configs
 * are refused with clear errors; the vLLM counters count. */
#include "engine_run.h"
#include "testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/draft.h"
#include "engine/spec.h"
#include "gen/gen_model.h"
#include "pagoda.h"
#include "tokenizer/tokenizer.h"

static char g_target[4200]; /* stories260K (F32, the real model) */
static char g_small[4200];  /* a 1-layer random Llama with stories260K's tokenizer */
static char g_vocab[4200];  /* as g_small with vocab 256: a vocabulary mismatch */
static char g_tokmis[4200]; /* as g_small with one token's text changed */

static pagoda_status gen(const char *dir, int vocab, const char *tokdir) {
    pg_gen_model_options o;
    pg_gen_model_defaults(&o);
    o.hidden = 32;
    o.layers = 1;
    o.heads = 2;
    o.kv_heads = 1;
    o.head_dim = 16;
    o.ffn = 64;
    o.vocab = vocab;
    o.init_std = 0.25f; /* sharp logits: no near ties between the draft's argmaxes */
    o.max_position = 512;
    o.seed = 7;
    o.tokenizer_dir = tokdir;
    o.hf_dir = dir;
    return pg_gen_model_write(&o);
}

static int setup(void **state) {
    (void)state;
    if (pg_er_one_thread_under_qemu()) return -1;
    snprintf(g_target, sizeof g_target, "%s", pg_test_asset("llm/stories260K-hf"));
    const char *dir = pg_test_tmpdir();
    snprintf(g_small, sizeof g_small, "%s/draft-small", dir);
    snprintf(g_vocab, sizeof g_vocab, "%s/draft-vocab256", dir);
    snprintf(g_tokmis, sizeof g_tokmis, "%s/draft-tokmis", dir);
    /* a tokenizer of the same size with token 0 renamed */
    char tokdir[4200], path[4300];
    snprintf(tokdir, sizeof tokdir, "%s/tok-renamed", dir);
    pg_test_mkdirs(tokdir);
    size_t len = 0;
    snprintf(path, sizeof path, "%s/tokenizer.json", g_target);
    char *json = pg_test_read_file(path, &len);
    if (!json) return -1;
    for (char *p = json; (p = strstr(p, "\"<unk>\"")) != NULL; p += 7)
        memcpy(p, "\"<unq>\"", 7);
    snprintf(path, sizeof path, "%s/tokenizer.json", tokdir);
    pg_test_write_file(path, json, len);
    free(json);
    snprintf(path, sizeof path, "%s/tokenizer_config.json", g_target);
    json = pg_test_read_file(path, &len);
    if (!json) return -1;
    for (char *p = json; (p = strstr(p, "\"<unk>\"")) != NULL; p += 7)
        memcpy(p, "\"<unq>\"", 7);
    snprintf(path, sizeof path, "%s/tokenizer_config.json", tokdir);
    pg_test_write_file(path, json, len);
    free(json);
    if (gen(g_small, 512, g_target) || gen(g_vocab, 256, g_target) || gen(g_tokmis, 512, tokdir)) {
        fprintf(stderr, "gen_model: %s\n", pg_last_error());
        return -1;
    }
    return 0;
}

/* ---- helpers ---- */

enum { NREQ = 8 };

static pagoda_speculative_config draft_config(const char *model, int k) {
    pagoda_speculative_config c = {.method = PAGODA_SPEC_DRAFT_MODEL, .num_speculative_tokens = k};
    size_t n = strlen(model);
    assert_true(n < sizeof c.model);
    memcpy(c.model, model, n + 1);
    return c;
}

/* "Repeat this passage" prompts (a passage, then its first half again),
 * of different lengths. */
static int32_t g_prompts[NREQ][96];
static int prompt(int i) {
    int len = 10 + 7 * i;
    pg_er_prompt(40 + i, len, g_prompts[i]);
    for (int k = 1; k < len / 2; k++)
        g_prompts[i][len + k - 1] = g_prompts[i][k];
    return len + len / 2 - 1;
}

/* Run requests [0, n) greedily (max_tokens 24 + 5 i; logprobs of the chosen
 * token) with options o; res[i] per request, stats in *st. */
static void run(const char *model, pagoda_engine_options *o, int n, pg_er_result *res,
                pagoda_stats *st) {
    pagoda_engine *e = pg_er_open(model, o);
    pagoda_request reqs[NREQ];
    uint64_t ids[NREQ];
    for (int i = 0; i < n; i++) {
        int len = prompt(i);
        reqs[i] = pg_er_greedy(e, g_prompts[i], (size_t)len, 24 + 5 * i);
        reqs[i].sampling.logprobs = 0;
    }
    pg_er_run_requests(e, reqs, (size_t)n, ids, res);
    pagoda_engine_get_stats(e, st);
    pagoda_engine_free(e);
}

/* Greedy outputs with the draft `draft` are bitwise those without, for
 * batches of 1 / 3 / 8, default and 16-token budgets (chunked prefill; the
 * adaptive rule then leaves fewer drafts), and a KV cache small enough to
 * preempt. Returns the accepted / drafted token counts. */
static void check_exact(const char *draft, uint64_t *drafted, uint64_t *accepted) {
    static pg_er_result ref[NREQ], got[NREQ];
    static const int batches[] = {1, 3, 8};
    *drafted = *accepted = 0;
    for (size_t b = 0; b < sizeof batches / sizeof batches[0]; b++) {
        const int n = batches[b];
        pagoda_engine_options o;
        pagoda_stats st;
        pagoda_engine_options_default(&o);
        run(g_target, &o, n, ref, &st);
        assert_int_equal(st.spec_num_drafts, 0);
        const int32_t ref_blocks = st.num_kv_blocks;
        for (int c = 0; c < 3; c++) {
            pagoda_engine_options_default(&o);
            o.speculative = draft_config(draft, c == 1 ? 3 : 4);
            if (c == 1) o.max_num_batched_tokens = o.max_num_seqs = 16;
            if (c == 2) /* a handful of blocks: preemption of the target's requests */
                o.kv_cache_memory = (uint64_t)(8u << 20) * 16u / (uint64_t)ref_blocks;
            run(g_target, &o, n, got, &st);
            for (int i = 0; i < n; i++)
                pg_er_assert_same(&ref[i], &got[i], true);
            print_message("draft %s batch %d case %d: %llu drafts, %llu draft tokens, %llu "
                          "accepted, %llu preemptions\n",
                          strrchr(draft, '/') + 1, n, c, (unsigned long long)st.spec_num_drafts,
                          (unsigned long long)st.spec_num_draft_tokens,
                          (unsigned long long)st.spec_num_accepted_tokens,
                          (unsigned long long)st.num_preemptions);
            /* the counters: drafts verified, per-position acceptance sums up */
            assert_true(st.spec_num_drafts > 0);
            assert_true(st.spec_num_draft_tokens >= st.spec_num_drafts);
            assert_true(st.spec_num_accepted_tokens <= st.spec_num_draft_tokens);
            uint64_t per_pos = 0;
            for (int p = 0; p < st.spec_num_positions; p++)
                per_pos += st.spec_accepted_per_pos[p];
            assert_int_equal(per_pos, st.spec_num_accepted_tokens);
            if (c == 2 && n == 8) assert_true(st.num_preemptions > 0);
            *drafted += st.spec_num_draft_tokens;
            *accepted += st.spec_num_accepted_tokens;
        }
    }
}

/* ---- tests ---- */

/* The target as its own draft: every draft is what the target computes,
 * so all are accepted (the draft's forwards are batched differently from
 * the target's, which the kernels do not see: batch-invariant results). */
static void test_draft_is_target(void **state) {
    (void)state;
    uint64_t drafted, accepted;
    check_exact(g_target, &drafted, &accepted);
    assert_true(drafted > 0);
    assert_int_equal(accepted, drafted);
}

/* A random 1-layer draft: few drafts accepted, outputs still exact. */
static void test_draft_small_model(void **state) {
    (void)state;
    uint64_t drafted, accepted;
    check_exact(g_small, &drafted, &accepted);
    assert_true(drafted > 0);
    assert_true(accepted < drafted);
}

/* A fake target request for the draft. */
typedef struct fake {
    pg_request r;
    int32_t toks[512];
} fake;

static void fake_init(fake *f, uint64_t id, const int32_t *p, int n) {
    memset(f, 0, sizeof *f);
    f->r.id = id;
    f->r.tokens = f->toks;
    memcpy(f->toks, p, (size_t)n * sizeof(int32_t));
    f->r.num_tokens = f->r.num_prompt_tokens = n;
    f->r.max_total_tokens = 512;
    f->r.kv_slot = -1;
}

static pg_draft *open_draft(const char *model, const pg_tokenizer *tok, int32_t blocks) {
    pg_model_options mo;
    pg_model_options_default(&mo);
    mo.max_context = 512;
    pg_draft *d = NULL;
    if (pg_draft_load(model, &mo, tok, 512, PG_F32, 16, &d) != PAGODA_OK ||
        pg_draft_start(d, blocks, 4, 512, 64, 4) != PAGODA_OK)
        fail_msg("%s", pagoda_last_error());
    return d;
}

/* Rollback: three requests whose "target" accepts a varying prefix of the
 * drafts and then appends a token of its own (so most steps reject some).
 * After every step the draft holds KV for a prefix of each request's
 * tokens, its pool is consistent, and its drafts equal those of a fresh
 * draft that sees each request's tokens for the first time. */
static void test_draft_rollback(void **state) {
    (void)state;
    pg_tokenizer *tok = NULL;
    assert_int_equal(pg_tokenizer_load(g_target, &tok), PAGODA_OK);
    pg_draft *d = open_draft(g_small, tok, 1 + 4 * 32), *fresh = open_draft(g_small, tok, 1 + 32);
    static fake f[3];
    for (int i = 0; i < 3; i++)
        fake_init(&f[i], 100 + (uint64_t)i, g_prompts[i], prompt(i));
    uint32_t x = 12345;
    int rejected = 0;
    for (int step = 0; step < 40; step++) {
        pg_request *reqs[3];
        int32_t k[3];
        for (int i = 0; i < 3; i++) {
            reqs[i] = &f[i].r;
            k[i] = 1 + (step + i) % 4;
        }
        assert_int_equal(pg_draft_prepare(d, reqs, k, 3), PAGODA_OK);
        assert_int_equal(pg_draft_check(d), PAGODA_OK);
        for (int i = 0; i < 3; i++) {
            int32_t got[PG_MAX_SPEC_TOKENS], ref[PG_MAX_SPEC_TOKENS];
            int32_t n = pg_draft_propose(d, &f[i].r, k[i], got);
            assert_int_equal(n, k[i]);
            /* the draft's KV: a prefix of the tokens, then its own drafts */
            const int32_t held = pg_draft_num_computed(d, f[i].r.id);
            assert_int_equal(held, f[i].r.num_tokens + n - 1);
            /* a fresh draft on the same tokens proposes the same */
            pg_request *one = &f[i].r;
            assert_int_equal(pg_draft_prepare(fresh, &one, &k[i], 1), PAGODA_OK);
            assert_int_equal(pg_draft_propose(fresh, &f[i].r, k[i], ref), n);
            assert_memory_equal(got, ref, (size_t)n * sizeof(int32_t));
            uint64_t id = f[i].r.id;
            pg_draft_release(fresh, &id, 1);
            assert_int_equal(pg_draft_num_computed(fresh, id), -1);
            /* the target accepts a pseudo-random prefix, then its own token */
            x = x * 1664525u + 1013904223u;
            int32_t acc = (int32_t)((x >> 10) % (uint32_t)(n + 1));
            for (int32_t j = 0; j < acc; j++)
                f[i].toks[f[i].r.num_tokens++] = got[j];
            int32_t own = 3 + (int32_t)((x >> 20) % 500);
            if (acc < n && own == got[acc]) own = own == 3 ? 4 : own - 1;
            f[i].toks[f[i].r.num_tokens++] = own;
            rejected += acc < n;
        }
        if (f[0].r.num_tokens > 400) break;
    }
    assert_true(rejected > 10);
    /* finished requests give their blocks back */
    const uint64_t ids[3] = {100, 101, 102};
    pg_draft_release(d, ids, 3);
    for (int i = 0; i < 3; i++)
        assert_int_equal(pg_draft_num_computed(d, ids[i]), -1);
    assert_int_equal(pg_draft_check(d), PAGODA_OK);
    pg_draft_free(d);
    pg_draft_free(fresh);
    pg_tokenizer_free(tok);
}

/* A draft pool too small for every request: those without room get no
 * drafts (their state is dropped), the others still do; nothing breaks. */
static void test_draft_pool_full(void **state) {
    (void)state;
    pg_tokenizer *tok = NULL;
    assert_int_equal(pg_tokenizer_load(g_target, &tok), PAGODA_OK);
    pg_draft *d = open_draft(g_small, tok, 1 + 3); /* 48 tokens */
    static fake f[2];
    fake_init(&f[0], 1, g_prompts[2], prompt(2)); /* 35 tokens: 3 blocks */
    fake_init(&f[1], 2, g_prompts[3], prompt(3)); /* 45 tokens: no room left */
    pg_request *reqs[2] = {&f[0].r, &f[1].r};
    const int32_t k[2] = {4, 4};
    int32_t out[PG_MAX_SPEC_TOKENS];
    assert_int_equal(pg_draft_prepare(d, reqs, k, 2), PAGODA_OK);
    assert_int_equal(pg_draft_propose(d, &f[0].r, 4, out), 4);
    assert_int_equal(pg_draft_propose(d, &f[1].r, 4, out), 0);
    assert_int_equal(pg_draft_num_computed(d, 2), -1);
    assert_int_equal(pg_draft_check(d), PAGODA_OK);
    pg_draft_free(d);
    pg_tokenizer_free(tok);
}

/* Sampled requests with a draft (q one-hot: exact rejection sampling) stay
 * a pure function of their seed, alone or batched with others. */
static void test_draft_sampling_is_seeded(void **state) {
    (void)state;
    pagoda_engine_options o;
    pagoda_engine_options_default(&o);
    o.speculative = draft_config(g_target, 4);
    pagoda_engine *e = pg_er_open(g_target, &o);
    pagoda_request reqs[4];
    uint64_t ids[4];
    static pg_er_result alone, batch[4];
    for (int i = 0; i < 4; i++) {
        reqs[i] = pg_er_greedy(e, g_prompts[i], (size_t)prompt(i), 40);
        reqs[i].sampling.temperature = 0.8f;
        reqs[i].sampling.seed = 99 + (uint64_t)i;
    }
    pg_er_run_requests(e, reqs, 1, ids, &alone);
    pg_er_run_requests(e, reqs, 4, ids, batch);
    pg_er_assert_same(&alone, &batch[0], true);
    pagoda_stats st;
    pagoda_engine_get_stats(e, &st);
    assert_true(st.spec_num_accepted_tokens > 0);
    pagoda_engine_free(e);
}

static void expect_create_error(const pagoda_speculative_config *c, const char *what) {
    pagoda_engine_options o;
    pagoda_engine_options_default(&o);
    o.kv_cache_memory = 8u << 20;
    o.speculative = *c;
    pagoda_engine *e = NULL;
    assert_int_not_equal(pagoda_engine_create(g_target, &o, &e), PAGODA_OK);
    assert_null(e);
    const char *msg = pagoda_last_error();
    if (!strstr(msg, what)) fail_msg("expected '%s' in: %s", what, msg);
}

/* A draft of another vocabulary is refused at start-up, naming it. */
static void test_draft_vocab_mismatch(void **state) {
    (void)state;
    pagoda_speculative_config c = draft_config(g_vocab, 4);
    expect_create_error(&c, "vocab_size 256, the target 512");
    c = draft_config(g_tokmis, 4);
    expect_create_error(&c, "differs from the target's at id 0");
    char missing[4300];
    snprintf(missing, sizeof missing, "%s/no-such-draft", pg_test_tmpdir());
    c = draft_config(missing, 4);
    expect_create_error(&c, "no-such-draft");
}

static void expect_parse_error(const char *json, const char *what) {
    pagoda_speculative_config c;
    assert_int_equal(pagoda_speculative_config_parse(json, &c), PAGODA_ERR_INVALID_ARG);
    const char *msg = pagoda_last_error();
    if (!strstr(msg, what)) fail_msg("%s: expected '%s' in: %s", json, what, msg);
    assert_int_equal(c.method, PAGODA_SPEC_NONE);
}

/* --speculative-config with a draft model: vLLM's spelling, its inference
 * of the method from "model", and the errors. */
static void test_draft_config(void **state) {
    (void)state;
    pagoda_speculative_config c;
    assert_int_equal(pagoda_speculative_config_parse(
                         "{\"method\": \"draft_model\", \"model\": \"/m/draft\", "
                         "\"num_speculative_tokens\": 5, \"disable_by_batch_size\": 4}",
                         &c),
                     PAGODA_OK);
    assert_int_equal(c.method, PAGODA_SPEC_DRAFT_MODEL);
    assert_string_equal(c.model, "/m/draft");
    assert_int_equal(c.num_speculative_tokens, 5);
    assert_int_equal(c.disable_by_batch_size, 4);
    assert_int_equal(
        pagoda_speculative_config_parse("{\"model\": \"d\", \"num_speculative_tokens\": 2}", &c),
        PAGODA_OK);
    assert_int_equal(c.method, PAGODA_SPEC_DRAFT_MODEL);
    assert_string_equal(c.model, "d");
    expect_parse_error("{\"method\": \"draft_model\", \"num_speculative_tokens\": 2}",
                       "needs \"model\"");
    expect_parse_error(
        "{\"method\": \"draft_model\", \"model\": \"\", \"num_speculative_tokens\": 2}",
        "non-empty string");
    expect_parse_error("{\"method\": \"draft_model\", \"model\": 3, \"num_speculative_tokens\": 2}",
                       "non-empty string");
    expect_parse_error("{\"method\": \"draft\", \"model\": \"d\", \"num_speculative_tokens\": 2}",
                       "\"draft\" is not implemented");
    expect_parse_error("{\"method\": \"draft_model\", \"model\": \"d\"}", "num_speculative_tokens");
    expect_parse_error("{\"method\": \"draft_model\", \"model\": \"d\", "
                       "\"num_speculative_tokens\": 2, \"prompt_lookup_max\": 3}",
                       "ngram keys");
    expect_parse_error("{\"method\": \"ngram\", \"model\": \"d\", \"num_speculative_tokens\": 2}",
                       "takes no \"model\"");
    char longp[1100 + 64];
    memcpy(longp, "{\"model\": \"", 11);
    memset(longp + 11, 'a', 1100);
    memcpy(longp + 1111, "\", \"num_speculative_tokens\": 2}", 32);
    expect_parse_error(longp, "longer than");
    /* the engine checks a config built by hand too */
    c = (pagoda_speculative_config){.method = PAGODA_SPEC_DRAFT_MODEL, .num_speculative_tokens = 2};
    expect_create_error(&c, "needs the draft model's path");
    c = draft_config(g_small, 0);
    expect_create_error(&c, "num_speculative_tokens 0");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_draft_config),
        cmocka_unit_test(test_draft_vocab_mismatch),
        cmocka_unit_test(test_draft_rollback),
        cmocka_unit_test(test_draft_pool_full),
        cmocka_unit_test(test_draft_is_target),
        cmocka_unit_test(test_draft_small_model),
        cmocka_unit_test(test_draft_sampling_is_seeded),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}
