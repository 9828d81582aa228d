/* Speculative decoding on the Qwen3.5 oracle through the engine: greedy
 * output with the MTP head's drafts (engine/mtp.h) and with n-gram drafts
 * (which exercise the recurrent-state rollback with accepted and rejected
 * drafts) is bitwise the output without speculation: HF directory and
 * GGUF, batch 1 and 4, whole and chunked prefill, prefix caching, a scarce
 * KV cache. (test_mtp checks the head itself and the proposer's drafts.) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine_run.h"
#include "testutil.h"

#include "pagoda.h"

enum { NP = 4, PLEN = 40, GEN = 32 };

/* Prompt i: byte tokens with a repeated span (n-gram drafts find it). */
static void spec_prompt(int i, int32_t *p) {
    for (int t = 0; t < PLEN; t++)
        p[t] = (int32_t)(32 + ((t % (7 + i)) * (5 + 3 * i) + i) % 90);
}

/* Greedy outputs of the first n prompts through one engine on model with
 * speculation `json` (NULL: off), token budget mnbt (chunked prefill when
 * below the prompts), prefix caching `caching`; the stats into *stats. */
static void spec_run(const char *model, const char *json, int32_t mnbt, bool caching, int n,
                     pg_er_result *res, pagoda_stats *stats) {
    pagoda_engine_options o;
    pagoda_engine_options_default(&o);
    o.max_num_batched_tokens = mnbt;
    o.enable_prefix_caching = caching;
    o.dtype = PAGODA_DTYPE_F32;
    o.max_model_len = 512;
    if (json && pagoda_speculative_config_parse(json, &o.speculative) != PAGODA_OK)
        fail_msg("%s", pagoda_last_error());
    pagoda_engine *e = pg_er_open(model, &o);
    static int32_t prompts[NP][PLEN];
    pagoda_request reqs[NP];
    uint64_t ids[NP];
    for (int i = 0; i < n; i++) {
        spec_prompt(i, prompts[i]);
        reqs[i] = pg_er_greedy(e, prompts[i], PLEN, GEN);
    }
    pg_er_run_requests(e, reqs, (size_t)n, ids, res);
    pagoda_engine_get_stats(e, stats);
    pagoda_engine_free(e);
}

/* Greedy output with speculation `json` equals the output without, alone
 * and in a batch, whole and chunked prefill, prefix caching on; drafts were
 * verified (need_accepts: some accepted, some rejected). The MTP head of a
 * random-weight checkpoint proposes unrelated tokens: its acceptance is
 * reported, not required. */
static void check_spec_exact(const char *model, const char *json, bool need_accepts) {
    static pg_er_result off[NP], on[NP];
    pagoda_stats st;
    uint64_t drafts = 0, acc = 0, toks = 0;
    const int32_t budgets[2] = {4096, 16};
    for (int bi = 0; bi < 2; bi++)
        for (int n = 1; n <= NP; n += NP - 1) {
            spec_run(model, NULL, budgets[bi], true, n, off, &st);
            spec_run(model, json, budgets[bi], true, n, on, &st);
            for (int i = 0; i < n; i++) {
                assert_int_equal(on[i].n, GEN);
                pg_er_assert_same(&off[i], &on[i], false);
            }
            drafts += st.spec_num_drafts;
            toks += st.spec_num_draft_tokens;
            acc += st.spec_num_accepted_tokens;
        }
    print_message("%s %s: %llu verifications, %llu draft tokens, %llu accepted (%.0f%%)\n", model,
                  json, (unsigned long long)drafts, (unsigned long long)toks,
                  (unsigned long long)acc, toks ? 100.0 * (double)acc / (double)toks : 0.0);
    assert_true(drafts > 0);
    if (need_accepts) { /* accepted and rejected drafts: the states rolled back mid-step */
        assert_true(acc > 0);
        assert_true(acc < toks);
    }
}

static void test_ngram_exact_on_qwen35(void **state) {
    (void)state;
    check_spec_exact(pg_test_asset("oracles/qwen35-tiny/hf"),
                     "{\"method\": \"ngram\", \"num_speculative_tokens\": 4, "
                     "\"prompt_lookup_min\": 2, \"prompt_lookup_max\": 4}",
                     true);
}

static void test_mtp_exact_on_qwen35(void **state) {
    (void)state;
    const char *k3 = "{\"method\": \"mtp\", \"num_speculative_tokens\": 3}";
    char hf[1024], gguf[1024];
    snprintf(hf, sizeof hf, "%s", pg_test_asset("oracles/qwen35-tiny/hf"));
    snprintf(gguf, sizeof gguf, "%s", pg_test_asset("oracles/qwen35-tiny/model.gguf"));
    check_spec_exact(hf, k3, false);
    check_spec_exact(gguf, "{\"method\": \"qwen3_next_mtp\", \"num_speculative_tokens\": 2}",
                     false);
}

/* A KV cache of a handful of blocks for 6 requests (they queue for it; the
 * head's states are evicted and restarted); the output stays the same. */
static void test_mtp_exact_scarce_kv(void **state) {
    (void)state;
    enum { NPRE = 6 };
    static pg_er_result off[NPRE], on[NPRE];
    const char *model = pg_test_asset("oracles/qwen35-tiny/hf");
    pagoda_stats st;
    for (int pass = 0; pass < 2; pass++) {
        pagoda_engine_options o;
        pagoda_engine_options_default(&o);
        o.dtype = PAGODA_DTYPE_F32;
        o.max_model_len = 512;
        o.block_size = 16;
        o.max_num_batched_tokens = 32;
        o.kv_cache_memory = 0; /* below: a few blocks of the one attention layer */
        if (pass == 1 &&
            pagoda_speculative_config_parse("{\"method\": \"mtp\", \"num_speculative_tokens\": 2}",
                                            &o.speculative) != PAGODA_OK)
            fail_msg("%s", pagoda_last_error());
        /* 4 requests x (40 + 48) tokens need 24 blocks of 16 (512 bytes a
         * token in the one attention layer), plus their recurrent states */
        o.max_num_seqs = NPRE;
        o.kv_cache_memory = 300000; /* a handful of blocks after the states */
        o.state_cache_memory = 4 * 16896;
        pagoda_engine *e = pg_er_open(model, &o);
        static int32_t prompts[NPRE][PLEN];
        pagoda_request reqs[NPRE];
        uint64_t ids[NPRE];
        for (int i = 0; i < NPRE; i++) {
            spec_prompt(i, prompts[i]);
            reqs[i] = pg_er_greedy(e, prompts[i], PLEN, GEN);
        }
        pg_er_run_requests(e, reqs, NPRE, ids, pass ? on : off);
        pagoda_engine_get_stats(e, &st);
        pagoda_engine_free(e);
        print_message("pass %d: %d KV blocks, %llu preemptions, %llu drafts verified, %llu "
                      "accepted\n",
                      pass, st.num_kv_blocks,
                      (unsigned long long)st.num_preemptions,
                      (unsigned long long)st.spec_num_draft_tokens,
                      (unsigned long long)st.spec_num_accepted_tokens);
    }
    for (int i = 0; i < NPRE; i++)
        pg_er_assert_same(&off[i], &on[i], false);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ngram_exact_on_qwen35),
        cmocka_unit_test(test_mtp_exact_on_qwen35),
        cmocka_unit_test(test_mtp_exact_scarce_kv),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
