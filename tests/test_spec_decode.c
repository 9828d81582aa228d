/* Speculative decoding pieces without a model: the n-gram proposer (vLLM's
 * ngram_proposer test cases and ours) and --speculative-config parsing. */
#include "testutil.h"

#include <string.h>

#include "engine/ngram.h"
#include "pagoda.h"

static int32_t propose(const int32_t *t, int32_t n, int32_t lo, int32_t hi, int32_t k,
                       int32_t *out) {
    return pg_ngram_propose(t, n, lo, hi, k, out);
}

static void test_ngram_proposer(void **state) {
    (void)state;
    int32_t out[8];
    /* vLLM's cases (tests/v1/spec_decode/test_ngram.py) */
    const int32_t a[] = {1, 2, 3, 4, 1, 2, 3, 5, 6};
    assert_int_equal(propose(a, 9, 2, 2, 2, out), 0); /* [5, 6] never occurred before */
    const int32_t b[] = {1, 2, 3, 4, 1, 2, 3};
    assert_int_equal(propose(b, 7, 2, 2, 3, out), 3);
    assert_int_equal(out[0], 4);
    assert_int_equal(out[1], 1);
    assert_int_equal(out[2], 2);
    assert_int_equal(propose(b, 7, 2, 2, 2, out), 2);
    assert_int_equal(out[1], 1);
    assert_int_equal(propose(b, 7, 1, 1, 3, out), 3); /* [3] at index 2: 4, 1, 2 */
    assert_int_equal(out[0], 4);
    /* the longest match wins over an earlier shorter one: suffix [7, 8, 9] */
    const int32_t c[] = {8, 9, 50, 7, 8, 9, 60, 61, 7, 8, 9};
    assert_int_equal(propose(c, 11, 2, 3, 2, out), 2);
    assert_int_equal(out[0], 60);
    assert_int_equal(out[1], 61);
    /* only a 2-gram allowed: its earliest occurrence, [8, 9] at 0 */
    assert_int_equal(propose(c, 11, 2, 2, 2, out), 2);
    assert_int_equal(out[0], 50);
    /* drafts stop at the end of the tokens (the match may overlap the suffix) */
    const int32_t d[] = {5, 5, 5};
    assert_int_equal(propose(d, 3, 1, 2, 4, out), 1); /* [5, 5] at 0: then one 5 */
    assert_int_equal(out[0], 5);
    /* too short, bad lengths, k 0 */
    assert_int_equal(propose(b, 2, 2, 2, 3, out), 0);
    assert_int_equal(propose(b, 7, 0, 2, 3, out), 0);
    assert_int_equal(propose(b, 7, 3, 2, 3, out), 0);
    assert_int_equal(propose(b, 7, 2, 2, 0, out), 0);
    /* max_n longer than the context is capped */
    assert_int_equal(propose(b, 7, 2, 50, 1, out), 1);
    assert_int_equal(out[0], 4); /* [1, 2, 3] at 0 */
}

static void test_speculative_config_parse(void **state) {
    (void)state;
    pagoda_speculative_config c;
    assert_int_equal(
        pagoda_speculative_config_parse("{\"method\": \"ngram\", \"num_speculative_tokens\": 4, "
                                        "\"prompt_lookup_max\": 4, \"prompt_lookup_min\": 2}",
                                        &c),
        PAGODA_OK);
    assert_int_equal(c.method, PAGODA_SPEC_NGRAM);
    assert_int_equal(c.num_speculative_tokens, 4);
    assert_int_equal(c.prompt_lookup_min, 2);
    assert_int_equal(c.prompt_lookup_max, 4);
    /* vLLM's defaults and older spelling */
    assert_int_equal(pagoda_speculative_config_parse(
                         "{\"model\": \"[ngram]\", \"num_speculative_tokens\": 3}", &c),
                     PAGODA_OK);
    assert_int_equal(c.prompt_lookup_min, 5);
    assert_int_equal(c.prompt_lookup_max, 5);
    assert_int_equal(
        pagoda_speculative_config_parse("{\"method\": \"ngram\", \"num_speculative_tokens\": 3, "
                                        "\"prompt_lookup_max\": 3, \"disable_by_batch_size\": 8, "
                                        "\"max_batch_tokens\": 32}",
                                        &c),
        PAGODA_OK);
    assert_int_equal(c.prompt_lookup_min, 3);
    assert_int_equal(c.disable_by_batch_size, 8);
    assert_int_equal(c.max_batch_tokens, 32);
    assert_true(c.min_draft_gain == 0.0f); /* absent: the default */
    /* the acceptance-adaptive K's threshold; 0 turns it off (< 0 in the struct) */
    assert_int_equal(
        pagoda_speculative_config_parse("{\"method\": \"ngram\", \"num_speculative_tokens\": 3, "
                                        "\"min_draft_gain\": 0.35}",
                                        &c),
        PAGODA_OK);
    assert_true(c.min_draft_gain == 0.35f);
    assert_int_equal(
        pagoda_speculative_config_parse("{\"method\": \"ngram\", \"num_speculative_tokens\": 3, "
                                        "\"min_draft_gain\": 0}",
                                        &c),
        PAGODA_OK);
    assert_true(c.min_draft_gain < 0.0f);
    static const struct {
        const char *json, *msg;
    } bad[] = {
        {"not json", "not a JSON object"},
        {"{\"num_speculative_tokens\": 4}", "\"method\" is missing"},
        {"{\"method\": \"eagle\", \"num_speculative_tokens\": 4}", "\"eagle\" is not implemented"},
        {"{\"method\": \"ngram\"}", "\"num_speculative_tokens\" is missing"},
        {"{\"method\": \"ngram\", \"num_speculative_tokens\": 0}", "num_speculative_tokens"},
        {"{\"method\": \"ngram\", \"num_speculative_tokens\": 2.5}", "num_speculative_tokens"},
        {"{\"method\": \"ngram\", \"num_speculative_tokens\": 4, \"prompt_lookup_min\": 3, "
         "\"prompt_lookup_max\": 2}",
         "below prompt_lookup_min"},
        {"{\"method\": \"ngram\", \"num_speculative_tokens\": 4, \"draft_tensor_parallel\": 1}",
         "unknown key \"draft_tensor_parallel\""},
        {"{\"method\": \"ngram\", \"num_speculative_tokens\": 4, \"min_draft_gain\": 1.5}",
         "\"min_draft_gain\" must be a number in [0, 1]"},
        {"{\"method\": \"ngram\", \"num_speculative_tokens\": 4, \"min_draft_gain\": \"x\"}",
         "\"min_draft_gain\" must be a number in [0, 1]"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        assert_int_equal(pagoda_speculative_config_parse(bad[i].json, &c), PAGODA_ERR_INVALID_ARG);
        if (!strstr(pagoda_last_error(), bad[i].msg))
            fail_msg("'%s': message '%s' lacks '%s'", bad[i].json, pagoda_last_error(), bad[i].msg);
        assert_int_equal(c.method, PAGODA_SPEC_NONE);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ngram_proposer),
        cmocka_unit_test(test_speculative_config_parse),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
