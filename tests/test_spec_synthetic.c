/* Synthetic "successor" models (gen_model --successor, tools/gen/gen_model.h):
 * models whose greedy output is known by construction, built to measure
 * speculative decoding at a known acceptance rate (docs/PERFORMANCE.md).
 * Checked here: the weights are what the option says (lm_head row s = the
 * sum of its predecessors' embedding rows, o_proj / down_proj scaled);
 * greedy generation from any prompt emits next(t) after t, in the HF and
 * GGUF forms and for a draft whose successor skips a token on a fraction
 * of the vocabulary; n-gram speculation on a "repeat this passage" prompt
 * accepts every draft; a draft with skip 0 accepts every draft, one with
 * skip 0.25 rejects where its successor is wrong; greedy outputs with
 * speculation equal those without in every case; bad options are refused. */
#include "engine_run.h"
#include "model_run.h"
#include "testutil.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gen/gen_model.h"
#include "model/source.h"
#include "pagoda.h"

enum { VOCAB = 512 };

static char g_target[4200];  /* successor, skip 0, HF F32, hidden 128 */
static char g_gguf[4200];    /* the same model as a GGUF file (F32) */
static char g_draft0[4200];  /* another successor model, skip 0 (hidden 64, 1 layer) */
static char g_draft25[4200]; /* as g_draft0 with skip 0.25: wrong on ~a quarter of tokens */
static pg_gen_model_options g_opt_target, g_opt_draft25;

static void target_options(pg_gen_model_options *o) {
    pg_gen_model_defaults(o);
    o->hidden = 128;
    o->layers = 2;
    o->heads = 4;
    o->kv_heads = 2;
    o->ffn = 256;
    o->vocab = VOCAB;
    o->max_position = 512;
    o->tie = false;
    o->successor = true;
    o->successor_residual = 1e-3f;
    o->tokenizer_dir = pg_test_asset("llm/stories260K-hf");
}

static void draft_options(pg_gen_model_options *o, float skip) {
    target_options(o);
    o->hidden = 64;
    o->layers = 1;
    o->heads = 2;
    o->kv_heads = 1;
    o->ffn = 128;
    o->seed = 5;
    o->successor_skip = skip;
}

static int setup(void **state) {
    (void)state;
    if (pg_er_one_thread_under_qemu()) return -1;
    const char *dir = pg_test_tmpdir();
    snprintf(g_target, sizeof g_target, "%s/succ-target", dir);
    snprintf(g_gguf, sizeof g_gguf, "%s/succ-target.gguf", dir);
    snprintf(g_draft0, sizeof g_draft0, "%s/succ-draft0", dir);
    snprintf(g_draft25, sizeof g_draft25, "%s/succ-draft25", dir);
    pg_gen_model_options d0;
    target_options(&g_opt_target);
    g_opt_target.hf_dir = g_target;
    g_opt_target.gguf_path = g_gguf;
    draft_options(&d0, 0.0f);
    d0.hf_dir = g_draft0;
    draft_options(&g_opt_draft25, 0.25f);
    g_opt_draft25.hf_dir = g_draft25;
    if (pg_gen_model_write(&g_opt_target) || pg_gen_model_write(&d0) ||
        pg_gen_model_write(&g_opt_draft25)) {
        fprintf(stderr, "gen_model: %s\n", pg_last_error());
        return -1;
    }
    return 0;
}

/* ---- tests ---- */

/* next(t) and the skip marks: t + 1 everywhere at skip 0; at skip 0.25
 * t + 2 on a quarter of the vocabulary (within sampling error), mod V. */
static void test_successor_next(void **state) {
    (void)state;
    int skips = 0;
    for (int64_t t = 0; t < VOCAB; t++) {
        assert_int_equal(pg_gen_successor_next(&g_opt_target, t), (t + 1) % VOCAB);
        int64_t n = pg_gen_successor_next(&g_opt_draft25, t);
        bool s = pg_gen_successor_skips(g_opt_draft25.seed, 0.25f, t);
        assert_int_equal(n, (t + (s ? 2 : 1)) % VOCAB);
        skips += s;
    }
    print_message("skip 0.25: %d of %d tokens skip\n", skips, VOCAB);
    assert_in_range(skips, VOCAB / 4 - 40, VOCAB / 4 + 40); /* binomial sd ~9.8 */
    /* the marks depend on the seed */
    int same = 0;
    for (int64_t t = 0; t < VOCAB; t++)
        same += pg_gen_successor_skips(5, 0.25f, t) == pg_gen_successor_skips(6, 0.25f, t);
    assert_true(same < VOCAB - 50);
}

/* The written weights: lm_head row s = sum of the embedding rows of the
 * tokens t with next(t) = s; o_proj / down_proj = the random weights of a
 * plain model of the same seed times the residual scale; the rest as the
 * plain model. */
static void test_successor_weights(void **state) {
    (void)state;
    const pg_gen_model_options *o = &g_opt_draft25;
    pg_model_source *src;
    assert_int_equal(pg_model_source_open(g_draft25, &src), PAGODA_OK);
    const pg_tensor *emb = pg_model_source_tensor(src, "model.embed_tokens.weight");
    const pg_tensor *lm = pg_model_source_tensor(src, "lm_head.weight");
    assert_non_null(emb);
    assert_non_null(lm);
    const int H = o->hidden;
    float got[128], want[128], e[128];
    int none = 0, two = 0;
    for (int64_t s = 0; s < VOCAB; s++) {
        memset(want, 0, sizeof want);
        int preds = 0;
        for (int64_t t = 0; t < VOCAB; t++)
            if (pg_gen_successor_next(o, t) == s) {
                pg_test_tensor_row(emb, t, e);
                for (int c = 0; c < H; c++)
                    want[c] += e[c];
                preds++;
            }
        none += preds == 0;
        two += preds == 2;
        pg_test_tensor_row(lm, s, got);
        for (int c = 0; c < H; c++)
            assert_float_equal(got[c], want[c], 1e-7f);
    }
    assert_true(none > 0 && two > 0); /* skips leave holes and doubles */
    pg_gen_model_options plain = *o;
    plain.successor = false;
    float a[128], b[128];
    static const char *const SCALED[] = {"model.layers.0.self_attn.o_proj.weight",
                                         "model.layers.0.mlp.down_proj.weight"};
    for (int k = 0; k < 2; k++) {
        const pg_tensor *t = pg_model_source_tensor(src, SCALED[k]);
        assert_non_null(t);
        pg_test_tensor_row(t, 3, a);
        pg_gen_model_row(&plain, SCALED[k], 3, t->shape[1], b);
        for (int c = 0; c < t->shape[1]; c++)
            assert_float_equal(a[c], b[c] * o->successor_residual, 1e-12f);
    }
    const pg_tensor *q = pg_model_source_tensor(src, "model.layers.0.self_attn.q_proj.weight");
    pg_test_tensor_row(q, 1, a);
    pg_gen_model_row(&plain, "model.layers.0.self_attn.q_proj.weight", 1, q->shape[1], b);
    assert_memory_equal(a, b, (size_t)q->shape[1] * sizeof(float));
    pg_model_source_free(src);
}

/* Greedy output of `model` from a few prompts equals the chain of `o`. */
static void check_chain(const char *model, const pg_gen_model_options *o) {
    pagoda_engine *e = pg_er_open(model, NULL);
    static const int32_t starts[] = {3, 100, 250, 490};
    for (size_t i = 0; i < sizeof starts / sizeof starts[0]; i++) {
        /* a prompt that is not a chain: the model continues from its last token */
        int32_t p[6] = {1, 77, 13, 400, 9, starts[i]};
        pagoda_request r = pg_er_greedy(e, p, 6, 40);
        uint64_t id;
        static pg_er_result res;
        pg_er_run_requests(e, &r, 1, &id, &res);
        assert_int_equal(res.n, 40);
        int64_t prev = starts[i];
        for (int k = 0; k < res.n; k++) {
            int64_t want = pg_gen_successor_next(o, prev);
            if (res.ids[k] != want)
                fail_msg("%s: token %d after %lld is %d, want %lld", model, k, (long long)prev,
                         res.ids[k], (long long)want);
            prev = res.ids[k];
        }
    }
    pagoda_engine_free(e);
}

static void test_successor_greedy_chain(void **state) {
    (void)state;
    check_chain(g_target, &g_opt_target);
    check_chain(g_gguf, &g_opt_target);
    check_chain(g_draft25, &g_opt_draft25);
}

/* Run one greedy request (prompt p[0..n), max_tokens m) on the target with
 * speculation config spec (NULL: off); result in *res, stats in *st. */
static void run_one(const pagoda_speculative_config *spec, const int32_t *p, int n, int m,
                    pg_er_result *res, pagoda_stats *st) {
    pagoda_engine_options o;
    pagoda_engine_options_default(&o);
    if (spec) o.speculative = *spec;
    pagoda_engine *e = pg_er_open(g_target, &o);
    pagoda_request r = pg_er_greedy(e, p, (size_t)n, m);
    uint64_t id;
    pg_er_run_requests(e, &r, 1, &id, res);
    pagoda_engine_get_stats(e, st);
    pagoda_engine_free(e);
}

/* "Repeat this passage": a 60-token run of the chain, then its first 8
 * tokens again. The target continues inside the passage, n-gram lookup
 * finds every continuation: all drafts accepted, output as without. */
static void test_successor_ngram_copy(void **state) {
    (void)state;
    int32_t p[68];
    for (int k = 0; k < 60; k++)
        p[k] = 200 + k;
    for (int k = 0; k < 8; k++)
        p[60 + k] = p[k];
    static pg_er_result ref, got;
    pagoda_stats st;
    run_one(NULL, p, 68, 40, &ref, &st);
    for (int k = 0; k < ref.n; k++)
        assert_int_equal(ref.ids[k], 208 + k);
    pagoda_speculative_config c = {.method = PAGODA_SPEC_NGRAM,
                                   .num_speculative_tokens = 4,
                                   .prompt_lookup_min = 2,
                                   .prompt_lookup_max = 4};
    run_one(&c, p, 68, 40, &got, &st);
    pg_er_assert_same(&ref, &got, true);
    print_message("ngram: %llu drafts, %llu draft tokens, %llu accepted\n",
                  (unsigned long long)st.spec_num_drafts,
                  (unsigned long long)st.spec_num_draft_tokens,
                  (unsigned long long)st.spec_num_accepted_tokens);
    assert_true(st.spec_num_drafts >= 6); /* 39 decode tokens, <= 5 a step */
    assert_int_equal(st.spec_num_accepted_tokens, st.spec_num_draft_tokens);
}

/* Drafts of a successor draft model: with skip 0 every draft is accepted;
 * with skip 0.25 a step's drafts are accepted up to the first token the
 * draft's successor is wrong for, so the first position's acceptance is
 * the share of non-skipping tokens the steps start from (~0.75). Outputs
 * as without speculation either way. */
static void test_successor_draft_acceptance(void **state) {
    (void)state;
    int32_t p[5] = {1, 50, 51, 52, 53};
    static pg_er_result ref, got;
    pagoda_stats st;
    run_one(NULL, p, 5, 120, &ref, &st);
    const char *drafts[2] = {g_draft0, g_draft25};
    for (int d = 0; d < 2; d++) {
        pagoda_speculative_config c = {.method = PAGODA_SPEC_DRAFT_MODEL,
                                       .num_speculative_tokens = 4};
        snprintf(c.model, sizeof c.model, "%s", drafts[d]);
        run_one(&c, p, 5, 120, &got, &st);
        pg_er_assert_same(&ref, &got, true);
        double first = st.spec_num_drafts
                           ? (double)st.spec_accepted_per_pos[0] / (double)st.spec_num_drafts
                           : 0;
        print_message("draft skip %s: %llu drafts, %llu draft tokens, %llu accepted, first "
                      "position %.3f\n",
                      d ? "0.25" : "0", (unsigned long long)st.spec_num_drafts,
                      (unsigned long long)st.spec_num_draft_tokens,
                      (unsigned long long)st.spec_num_accepted_tokens, first);
        assert_true(st.spec_num_drafts > 0);
        if (d == 0) {
            assert_int_equal(st.spec_num_accepted_tokens, st.spec_num_draft_tokens);
        } else {
            assert_true(st.spec_num_accepted_tokens < st.spec_num_draft_tokens);
            assert_true(first > 0.5 && first < 0.95);
        }
    }
}

/* Options a successor model cannot have. */
static void test_successor_bad_options(void **state) {
    (void)state;
    char dir[4200];
    snprintf(dir, sizeof dir, "%s/succ-bad", pg_test_tmpdir());
    for (int k = 0; k < 5; k++) {
        pg_gen_model_options o;
        target_options(&o);
        o.hf_dir = dir;
        if (k == 0) o.tie = true;
        if (k == 1) o.successor_skip = 1.0f;
        if (k == 2) o.successor_residual = 0.0f;
        if (k == 3) o.successor_skip = -0.1f;
        if (k == 4) assert_int_equal(pg_gen_model_set_arch(&o, "qwen3_moe"), PAGODA_OK);
        assert_int_equal(pg_gen_model_write(&o), PAGODA_ERR_INVALID_ARG);
        assert_non_null(strstr(pg_last_error(), "successor model"));
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_successor_next),
        cmocka_unit_test(test_successor_weights),
        cmocka_unit_test(test_successor_greedy_chain),
        cmocka_unit_test(test_successor_ngram_copy),
        cmocka_unit_test(test_successor_draft_acceptance),
        cmocka_unit_test(test_successor_bad_options),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}
