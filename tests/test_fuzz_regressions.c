/* Regression tests for what fuzzing found (docs/FUZZING.md): one test per
 * bug, named after what broke, feeding the exact input (inline, or from
 * tests/data/fuzz/<name> when it is binary or long) to the function the
 * libFuzzer target drives, and checking the clear error that replaced the
 * crash, hang or undefined behaviour. */
#include "testutil.h"

#include <cjson/cJSON.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/status.h"
#include "model/compressed_tensors.h"
#include "model/hf_config.h"
#include "bench/bench_client.h"
#include "grammar/gram.h"
#include "grammar/token_mask.h"
#include "tokenizer/tokenizer.h"

/* Path of tests/data/fuzz/<name> (static buffer). */
static const char *fuzz_input(const char *name) {
    static char path[1024];
    const char *src = getenv("PAGODA_SOURCE_DIR");
    snprintf(path, sizeof path, "%s/tests/data/fuzz/%s", src ? src : "..", name);
    return path;
}

/* The bench client cast usage.completion_tokens (a JSON double) to int32_t:
 * undefined behaviour for 1e30 (UBSan: "outside the range of representable
 * values"), garbage counts for negative or fractional values. Now a count
 * must be an integer in [0, 2^31-1] and anything else fails the request
 * with a message naming the field. (fuzz_bench_sse) */
static void test_bench_usage_count_out_of_int32_range(void **state) {
    (void)state;
    static const char *const bad[] = {
        "{\"usage\":{\"completion_tokens\":1e30}}",
        "{\"usage\":{\"completion_tokens\":-1e30}}",
        "{\"usage\":{\"completion_tokens\":2147483648}}",
        "{\"usage\":{\"completion_tokens\":-1}}",
        "{\"usage\":{\"completion_tokens\":1.5}}",
        "{\"usage\":{\"completion_tokens\":\"7\"}}",
        "{\"usage\":{\"completion_tokens\":3,\"prompt_tokens\":1e300}}",
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        pg_bench_event ev;
        assert_int_equal(pg_bench_event_parse(bad[i], strlen(bad[i]), false, &ev),
                         PAGODA_ERR_FORMAT);
        assert_non_null(strstr(pg_last_error(), "is not a token count"));
        assert_null(ev.json);
    }
    static const char ok[] = "{\"choices\":[],\"usage\":{\"completion_tokens\":2147483647,"
                             "\"prompt_tokens\":5.0}}";
    pg_bench_event ev;
    assert_int_equal(pg_bench_event_parse(ok, sizeof ok - 1, true, &ev), PAGODA_OK);
    assert_int_equal(ev.kind, PG_BENCH_EVENT_OTHER);
    assert_int_equal(ev.completion_tokens, INT32_MAX);
    assert_int_equal(ev.prompt_tokens, 5);
    pg_bench_event_free(&ev);
    static const char none[] = "{\"usage\":null}";
    assert_int_equal(pg_bench_event_parse(none, sizeof none - 1, true, &ev), PAGODA_OK);
    assert_int_equal(ev.completion_tokens, -1);
    assert_int_equal(ev.prompt_tokens, -1);
    pg_bench_event_free(&ev);
}

/* generation_config.json parsed while the vocabulary size is not known
 * (pg_hf_generation_parse allows vocab_size 0) converted an eos_token_id of
 * 2821474836480 to int: undefined behaviour (UBSan: "outside the range of
 * representable values of type 'int'"; INT_MIN on x86, INT_MAX on Arm,
 * which then became a stop token). Ids past INT32_MAX are now ignored with
 * the out-of-vocabulary warning. Input: tests/data/fuzz/
 * hf_config_eos_id_past_int32, config.json NUL generation_config.json as
 * fuzz_hf_config splits it. */
static void test_hf_generation_eos_id_past_int32(void **state) {
    (void)state;
    size_t len;
    char *in = pg_test_read_file(fuzz_input("hf_config_eos_id_past_int32"), &len);
    size_t cfg_len = strlen(in); /* the input's first NUL ends config.json */
    assert_true(cfg_len < len);
    pg_model_config cfg;
    pg_model_config_init(&cfg);
    assert_int_not_equal(pg_hf_config_parse(in, cfg_len, "config.json", &cfg), PAGODA_OK);
    pg_generation_defaults gen;
    pg_generation_defaults_init(&gen);
    const char *g = in + cfg_len + 1;
    pagoda_status st =
        pg_hf_generation_parse(g, len - cfg_len - 1, "generation_config.json", &gen, &cfg);
    assert_int_equal(st, PAGODA_OK);
    for (int i = 0; i < 8 && cfg.eos_token_ids[i] >= 0; i++)
        assert_true(cfg.eos_token_ids[i] != INT_MAX && cfg.eos_token_ids[i] < 100000);
    free(in);

    static const char both[] = "{\"eos_token_id\": [3000000000, 2, 2147483648, 2147483647]}";
    pg_model_config_init(&cfg);
    pg_generation_defaults_init(&gen);
    assert_int_equal(pg_hf_generation_parse(both, sizeof both - 1, "g.json", &gen, &cfg),
                     PAGODA_OK);
    assert_int_equal(cfg.eos_token_ids[0], 2);
    assert_int_equal(cfg.eos_token_ids[1], INT_MAX); /* the largest int id is kept */
    assert_int_equal(cfg.eos_token_ids[2], -1);
}

/* An added token whose id is also a vocab entry with shorter text: the
 * added token's content pointer was swapped for the vocab string while its
 * length stayed the added content's, so encoding read past the string
 * (ASan: heap-buffer-overflow in pg_tokenizer_encode's memcmp; `make asan`
 * runs this test). Input: tests/data/fuzz/tokenizer_added_token_shares_vocab_id,
 * tokenizer.json NUL tokenizer_config.json as fuzz_tokenizer_json splits it;
 * the text is the one fz_use_tokenizer encodes. */
static void test_tokenizer_added_token_shares_vocab_id(void **state) {
    (void)state;
    size_t len;
    char *in = pg_test_read_file(fuzz_input("tokenizer_added_token_shares_vocab_id"), &len);
    size_t tok_len = strlen(in);
    assert_true(tok_len < len);
    const char *dir = pg_test_tmpdir();
    char path[1024];
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    pg_test_write_file(path, in, tok_len);
    snprintf(path, sizeof path, "%s/tokenizer_config.json", dir);
    pg_test_write_file(path, in + tok_len + 1, len - tok_len - 1);
    pg_tokenizer *tok = NULL;
    assert_int_equal(pg_tokenizer_load(dir, &tok), PAGODA_OK);
    static const char text[] = "Hello world! <s></s><|endoftext|> \xe4\xbd\xa0\xe5\xa5\xbd "
                               "\xf0\x9f\x98\x80 caf\xc3\xa9 123  \t\n";
    int32_t ids[512];
    size_t n;
    for (int special = 0; special < 2; special++)
        assert_int_equal(pg_tokenizer_encode(tok, text, sizeof text - 1, special, ids, 512, &n),
                         PAGODA_OK);
    /* the added token's own text still encodes to its id */
    int32_t eot = pg_tokenizer_token_to_id(tok, "<|endoftext|>", 13);
    if (eot >= 0) {
        assert_int_equal(pg_tokenizer_encode(tok, "<|endoftext|>", 13, true, ids, 512, &n),
                         PAGODA_OK);
        assert_true(n >= 1);
    }
    pg_tokenizer_free(tok);
    free(in);
}

/* A tokenizer.json of 8.8 KB whose one vocab entry had id 43413107: the
 * per-id arrays and hash map (~70 bytes per id) took 2 GB (libFuzzer
 * out-of-memory, fourth campaign). Ids far sparser than 0..n-1 are now
 * refused naming the largest id. Input:
 * tests/data/fuzz/tokenizer_sparse_token_ids (tokenizer.json NUL
 * tokenizer_config.json as fuzz_tokenizer_json splits it). */
static void test_tokenizer_sparse_token_ids(void **state) {
    (void)state;
    size_t len;
    char *in = pg_test_read_file(fuzz_input("tokenizer_sparse_token_ids"), &len);
    size_t tok_len = strnlen(in, len);
    const char *dir = pg_test_tmpdir();
    char path[1024];
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    pg_test_write_file(path, in, tok_len);
    snprintf(path, sizeof path, "%s/tokenizer_config.json", dir);
    if (tok_len < len) pg_test_write_file(path, in + tok_len + 1, len - tok_len - 1);
    pg_tokenizer *tok = NULL;
    pg_clear_error();
    assert_int_equal(pg_tokenizer_load(dir, &tok), PAGODA_ERR_FORMAT);
    assert_null(tok);
    assert_non_null(strstr(pg_last_error(), "largest id is 43413107"));
    free(in);
    /* the bound leaves room for real gaps: 3 tokens, the added one at 60000 */
    static const char small[] =
        "{\"added_tokens\":[{\"id\":60000,\"content\":\"<x>\",\"special\":true}],"
        "\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0,\"b\":1},\"merges\":[]}}";
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    pg_test_write_file(path, small, sizeof small - 1);
    snprintf(path, sizeof path, "%s/tokenizer_config.json", dir);
    pg_test_write_file(path, "{}", 2);
    assert_int_equal(pg_tokenizer_load(dir, &tok), PAGODA_OK);
    assert_int_equal(pg_tokenizer_token_to_id(tok, "<x>", 3), 60000);
    pg_tokenizer_free(tok);
}

/* compressed-tensors quantization_config: num_bits and group_size were cast
 * from the JSON double before the range check (UBSan: 3e+118 is outside
 * the range of 'long'), and a fractional group_size such as 32.5 passed as
 * 32. Now both are compared as doubles and refused naming the value.
 * Input: tests/data/fuzz/ct_config_group_size_past_int64 (its config.json
 * part, as fuzz_hf_config feeds it). */
static void test_ct_config_group_size_past_int64(void **state) {
    (void)state;
    size_t len;
    char *in = pg_test_read_file(fuzz_input("ct_config_group_size_past_int64"), &len);
    pg_ct_config ct;
    memset(&ct, 0, sizeof ct);
    /* UNSUPPORTED (the value) or FORMAT (elsewhere): never OK, never UB */
    if (pg_ct_config_parse(in, strlen(in), "config.json", &ct) == PAGODA_OK) pg_ct_config_free(&ct);
    free(in);
    static const char *const bad[] = {"3e118", "32.5", "-32", "1e19"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        char cfg[512];
        snprintf(cfg, sizeof cfg,
                 "{\"quantization_config\": {\"quant_method\": \"compressed-tensors\","
                 "\"format\": \"pack-quantized\", \"config_groups\": {\"g\": {\"targets\":"
                 " [\"Linear\"], \"weights\": {\"num_bits\": 4, \"type\": \"int\","
                 "\"symmetric\": true, \"strategy\": \"group\", \"group_size\": %s}}}}}",
                 bad[i]);
        memset(&ct, 0, sizeof ct);
        assert_int_equal(pg_ct_config_parse(cfg, strlen(cfg), "config.json", &ct),
                         PAGODA_ERR_UNSUPPORTED);
        assert_non_null(strstr(pg_last_error(), "group_size"));
    }
}

/* fuzz_request: a completions body whose structured_outputs.regex (230
 * bytes: dots, repeated letters, [a-z]{4,5}) made the subset construction
 * build 15785 DFA nodes (0.5 s natively, 11 s under ASan) on the request's
 * thread; `.*a.{12}` took 5 s. The compiler now has a work budget: the
 * regex fails with a LIMIT error naming the cause. Input:
 * tests/data/fuzz/request_regex_compile_slow (endpoint byte, then the body). */
static void test_regex_compile_work_budget(void **state) {
    (void)state;
    size_t len = 0;
    char *in = pg_test_read_file(fuzz_input("request_regex_compile_slow"), &len);
    assert_non_null(in);
    assert_true(len > 1);
    cJSON *body = cJSON_ParseWithLength(in + 1, len - 1);
    assert_non_null(body);
    const cJSON *so = cJSON_GetObjectItemCaseSensitive(body, "structured_outputs");
    const cJSON *re = cJSON_GetObjectItemCaseSensitive(so, "regex");
    assert_true(cJSON_IsString(re));
    pg_gram *g = NULL;
    pagoda_status st = pg_gram_from_regex(re->valuestring, strlen(re->valuestring), &g);
    assert_int_equal(st, PAGODA_ERR_LIMIT);
    assert_non_null(strstr(pg_last_error(), "too complex to compile"));
    assert_null(g);
    cJSON_Delete(body);
    free(in);
}

/* The grammar compiler returned its LIMIT error for a rule whose Thompson
 * NFA passed 2^20 states ("too large") without freeing the NFA's edges:
 * a leak per refused request (LeakSanitizer under fuzz_ebnf; make asan runs
 * this test). The error stays; the edges are freed. */
static void test_grammar_nfa_too_large_leak(void **state) {
    (void)state;
    static const char *const ebnf[] = {
        "root ::= (((\"ab\"){1000}){1000})",    /* 2M NFA states */
        "root ::= x\nx ::= ([0-9]{2000}){600}", /* in another rule than the first */
    };
    for (size_t i = 0; i < sizeof ebnf / sizeof ebnf[0]; i++) {
        pg_gram *g = NULL;
        pagoda_status st = pg_gram_from_ebnf(ebnf[i], strlen(ebnf[i]), &g);
        if (st != PAGODA_ERR_LIMIT || !strstr(pg_last_error(), "too large"))
            fail_msg("%s: status %d, '%s'", ebnf[i], (int)st, pg_last_error());
        assert_null(g);
    }
}

/* A compressed-tensors "re:" pattern with stacked bounded repetitions made
 * glibc's regcomp run for minutes (it expands each bound into copies:
 * ((a{1,100}){1,100}){1,100} is a million), once per tensor name, from a
 * config.json (found by reading name_matches while fuzz_hf_config ran).
 * Such patterns are refused when the config is parsed, naming the pattern;
 * the patterns real checkpoints use still load. */
static void test_ct_regex_stacked_quantifiers(void **state) {
    (void)state;
    /* in JSON: a backslash is written twice */
    static const char *const bad[] = {
        "((a{1,100}){1,100}){1,100}",
        "(a+)+",
        "a**",
        "(x|b{2,})*",
        "a{2}{3}",
        "(.{1,255}){1,255}",
        "a{256}",
        "a{1,1000}",
        "(((((((((((((((((((((((((((((((((a)))))))))))))))))))))))))))))))))",
        "([[:alpha:]]+)+",
        "(\\\\.[0-9]+)*"};
    static const char *const good[] = {
        ".*mlp\\\\.down_proj$", ".*(q|k|v)_proj$", "model\\\\.layers\\\\.[0-9]+\\\\.self_attn.*",
        "(.*\\\\.)?lm_head",    "a{0,1}b?",        "[+*{]+x",
        "lm_head\\\\{2\\\\}*"};
    for (int pass = 0; pass < 2; pass++) {
        const char *const *list = pass ? good : bad;
        size_t n = pass ? sizeof good / sizeof *good : sizeof bad / sizeof *bad;
        for (size_t i = 0; i < n; i++) {
            char cfg[1024];
            snprintf(cfg, sizeof cfg,
                     "{\"quantization_config\": {\"quant_method\": \"compressed-tensors\","
                     "\"format\": \"pack-quantized\", \"ignore\": [\"lm_head\", \"re:%s\"],"
                     "\"config_groups\": {\"g\": {\"targets\": [\"Linear\"], \"weights\":"
                     " {\"num_bits\": 4, \"type\": \"int\", \"symmetric\": true,"
                     "\"strategy\": \"group\", \"group_size\": 32}}}}}",
                     list[i]);
            pg_ct_config ct;
            memset(&ct, 0, sizeof ct);
            pagoda_status st = pg_ct_config_parse(cfg, strlen(cfg), "config.json", &ct);
            if (pass == 0 && (st != PAGODA_ERR_UNSUPPORTED || !strstr(pg_last_error(), "refused")))
                fail_msg("'%s' not refused: %d '%s'", list[i], (int)st, pg_last_error());
            if (pass == 1 && st != PAGODA_OK)
                fail_msg("'%s' refused: '%s'", list[i], pg_last_error());
            if (st == PAGODA_OK) pg_ct_config_free(&ct);
        }
    }
}

/* An ambiguous grammar doubled the matcher's live stacks with every byte:
 * x ::= "a" y | "a" z | "", y ::= x "b", z ::= x "c" keeps every b/c
 * sequence open after n a's (2^n stacks: the DFA merges alternatives of
 * one rule, not pushes of two), so fuzz_ebnf hung feeding 64 bytes. Each matcher
 * operation (a byte fed, the allowed set, a token accepted, a mask) now
 * has a work budget (G_WORK_BUDGET) and past it fails with LIMIT through
 * the matcher's error path; the engine fails the request with it. */
static void test_grammar_matcher_work_budget(void **state) {
    (void)state;
    const char *ebnf = "root ::= x\nx ::= \"a\" y | \"a\" z | \"\"\n"
                       "y ::= x \"b\"\nz ::= x \"c\"";
    pg_gram *g = NULL;
    assert_int_equal(pg_gram_from_ebnf(ebnf, strlen(ebnf), &g), PAGODA_OK);
    pg_gstate *gs = NULL;
    assert_int_equal(pg_gstate_create(g, &gs), PAGODA_OK);
    int fed = 0;
    pg_clear_error();
    while (fed < 64 && pg_gstate_feed(gs, (const uint8_t *)"a", 1))
        fed++;
    assert_true(fed < 40); /* 2^40 stacks would never finish */
    assert_non_null(strstr(pg_last_error(), "needs more than"));
    pg_gstate_free(gs);
    /* the token matcher: one token of 24 a's at once */
    static const char *const toks[] = {"a", "b", "c", "aaaaaaaaaaaaaaaaaaaaaaaa"};
    const char *tp[4];
    size_t lens[4];
    for (int i = 0; i < 4; i++) {
        tp[i] = toks[i];
        lens[i] = strlen(toks[i]);
    }
    pg_vocab_trie *v = NULL;
    assert_int_equal(pg_vocab_trie_create(tp, lens, 4, &v), PAGODA_OK);
    pg_tgram *tg = NULL;
    assert_int_equal(pg_tgram_create(g, v, &tg), PAGODA_OK); /* owns g */
    pg_tmatch *tm = NULL;
    assert_int_equal(pg_tmatch_create(tg, NULL, 0, &tm), PAGODA_OK);
    assert_false(pg_tmatch_accept(tm, 3));
    assert_int_equal(pg_tmatch_status(tm), PAGODA_ERR_LIMIT);
    assert_non_null(strstr(pg_last_error(), "needs more than"));
    assert_true(pg_tmatch_accept(tm, 0)); /* the state was left as it was */
    assert_int_equal(pg_tmatch_status(tm), PAGODA_OK);
    pg_tmatch_free(tm);
    pg_tgram_release(tg);
    pg_vocab_trie_free(v);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bench_usage_count_out_of_int32_range),
        cmocka_unit_test(test_hf_generation_eos_id_past_int32),
        cmocka_unit_test(test_tokenizer_added_token_shares_vocab_id),
        cmocka_unit_test(test_tokenizer_sparse_token_ids),
        cmocka_unit_test(test_ct_config_group_size_past_int64),
        cmocka_unit_test(test_regex_compile_work_budget),
        cmocka_unit_test(test_grammar_nfa_too_large_leak),
        cmocka_unit_test(test_ct_regex_stacked_quantifiers),
        cmocka_unit_test(test_grammar_matcher_work_budget),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
