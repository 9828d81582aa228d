/* Tokenizers against reference tokenizations: the llama.cpp vocab suites
 * (.inp strings separated by "\n__ggml_vocab_test__\n", .out one line of
 * ids per string, made with HF tokenizers add_special_tokens=False, read as
 * llama.cpp tests/test-tokenizer-0 reads them), the o200k suite for
 * gpt-oss, TinyStories; decode round trips; error paths. */
#include "testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "model/gguf.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/vocab.h"

#define SEP "\n__ggml_vocab_test__\n"

typedef struct {
    char **inp;
    char **out;
    int n;
    char *inp_buf, *out_buf;
} suite;

static void suite_load(suite *s, const char *inp_rel, const char *out_rel) {
    size_t n;
    s->inp_buf = pg_test_read_file(pg_test_asset(inp_rel), &n);
    s->out_buf = pg_test_read_file(pg_test_asset(out_rel), &n);
    s->n = 0;
    s->inp = NULL;
    char *p = s->inp_buf, *q;
    while ((q = strstr(p, SEP))) {
        *q = 0;
        s->inp = realloc(s->inp, (size_t)(s->n + 1) * sizeof *s->inp);
        s->inp[s->n++] = p;
        p = q + strlen(SEP);
    }
    s->out = calloc((size_t)s->n, sizeof *s->out);
    p = s->out_buf;
    for (int i = 0; i < s->n; i++) {
        assert_non_null(p);
        s->out[i] = p;
        q = strchr(p, '\n');
        if (q) {
            *q = 0;
            p = q + 1;
        } else {
            p = p + strlen(p);
        }
    }
}

static void suite_free(suite *s) {
    free(s->inp);
    free(s->out);
    free(s->inp_buf);
    free(s->out_buf);
}

static int parse_ids(const char *line, int32_t *ids, int cap) {
    int n = 0;
    const char *p = line;
    while (*p) {
        char *e;
        long v = strtol(p, &e, 10);
        if (e == p) {
            p++;
            continue;
        }
        if (n < cap) ids[n] = (int32_t)v;
        n++;
        p = e;
    }
    return n;
}

static void print_ids(const char *label, const int32_t *ids, size_t n) {
    fprintf(stderr, "    %s:", label);
    for (size_t i = 0; i < n; i++) fprintf(stderr, " %d", (int)ids[i]);
    fprintf(stderr, "\n");
}

/* Encode every suite string; report each mismatch; also check
 * decode(encode(x)) == x when `roundtrip`. Returns the number of passes. */
static int run_suite(const char *tok_rel, const char *inp_rel, const char *out_rel, bool roundtrip,
                     bool add_special) {
    pg_tokenizer *tok = NULL;
    pagoda_status st = pg_tokenizer_load(tok_rel[0] == '/' ? tok_rel : pg_test_asset(tok_rel), &tok);
    if (st) fprintf(stderr, "load %s: %s\n", tok_rel, pg_last_error());
    assert_int_equal(st, PAGODA_OK);
    suite s;
    suite_load(&s, inp_rel, out_rel);
    assert_true(s.n >= 10);
    int pass = 0, rt_fail = 0;
    int32_t want[4096], got[4096];
    for (int i = 0; i < s.n; i++) {
        int nw = parse_ids(s.out[i], want, 4096);
        size_t ng = 0;
        assert_int_equal(pg_tokenizer_encode(tok, s.inp[i], strlen(s.inp[i]), add_special, got, 4096, &ng),
                         PAGODA_OK);
        bool ok = (size_t)nw == ng && !memcmp(want, got, ng * sizeof *got);
        if (ok) {
            pass++;
        } else {
            fprintf(stderr, "  %s #%d mismatch for \"%s\"\n", tok_rel, i, s.inp[i]);
            print_ids("expected", want, (size_t)nw);
            print_ids("got     ", got, ng);
        }
        if (roundtrip) {
            char buf[8192];
            size_t len = 0;
            assert_int_equal(pg_tokenizer_decode(tok, got, ng, add_special, buf, sizeof buf, &len), PAGODA_OK);
            const char *want_text = s.inp[i];
            if (len != strlen(want_text) || memcmp(buf, want_text, len)) {
                rt_fail++;
                fprintf(stderr, "  %s #%d round trip: \"%s\" -> \"%.*s\"\n", tok_rel, i, want_text, (int)len, buf);
            }
        }
    }
    fprintf(stderr, "%s: %d/%d match %s%s\n", tok_rel, pass, s.n, out_rel,
            roundtrip ? (rt_fail ? " (round trip failures)" : ", round trips exact") : "");
    suite_free(&s);
    pg_tokenizer_free(tok);
    assert_int_equal(rt_fail, 0);
    return pass == s.n ? pass : -pass;
}

#define SUITE(tok, name, rt)                                                                   \
    assert_true(run_suite(tok, "llama.cpp-vocab/ggml-vocab-" name ".gguf.inp",                 \
                          "llama.cpp-vocab/ggml-vocab-" name ".gguf.out", rt, false) > 0)

static void test_qwen3_json(void **state) {
    (void)state;
    SUITE("tokenizers/qwen3", "qwen2", true);
}

static void test_llama3_json(void **state) {
    (void)state;
    SUITE("tokenizers/llama3", "llama-bpe", true);
}

#define GGUF_SUITE(name) SUITE("llama.cpp-vocab/ggml-vocab-" name ".gguf", name, true)

static void test_llama_spm_gguf(void **state) {
    (void)state;
    GGUF_SUITE("llama-spm");
}

static void test_phi3_gguf(void **state) {
    (void)state;
    GGUF_SUITE("phi-3");
}

static void test_gpt2_gguf(void **state) {
    (void)state;
    GGUF_SUITE("gpt-2");
}

static void test_deepseek_llm_gguf(void **state) {
    (void)state;
    GGUF_SUITE("deepseek-llm");
}

static void test_mpt_gguf(void **state) {
    (void)state;
    GGUF_SUITE("mpt");
}

static void test_refact_gguf(void **state) {
    (void)state;
    GGUF_SUITE("refact");
}

static void test_gpt_oss_json(void **state) {
    (void)state;
    assert_true(run_suite("tokenizers/gpt-oss", "tokenizers/gpt-oss/o200k_test-suite.inp",
                          "tokenizers/gpt-oss/o200k_test-suite.out", true, false) > 0);
}

static void read_prompt_ids(int32_t *ids, size_t *n);
static void encode_expect(const char *tok_rel, const char *text, bool add_special, const int32_t *want,
                          size_t nwant);

static void test_stories260k_suite_json(void **state) {
    (void)state;
    assert_true(run_suite("llm/stories260K-hf", "llm/llama2c/expected/stories260K_tokenization.inp",
                          "llm/llama2c/expected/stories260K_tokenization.out", true, true) > 0);
}

static void test_stories260k_suite_gguf(void **state) {
    (void)state;
    assert_true(run_suite("llm/llama2c/stories260K.gguf", "llm/llama2c/expected/stories260K_tokenization.inp",
                          "llm/llama2c/expected/stories260K_tokenization.out", true, true) > 0);
    int32_t want[16];
    size_t n;
    read_prompt_ids(want, &n);
    encode_expect("llm/llama2c/stories260K.gguf", "Once upon a time", true, want, n);
}

/* The tiny oracles: llama.cpp's ids for prompt_text (no BOS). */
static void check_oracle(const char *tok_rel, const char *expected_rel) {
    size_t len;
    char *js = pg_test_read_file(pg_test_asset(expected_rel), &len);
    char *p = strstr(js, "\"prompt_text\"");
    assert_non_null(p);
    p = strchr(p + 13, '"');
    assert_non_null(p);
    char *e = strchr(p + 1, '"');
    *e = 0;
    const char *text = p + 1;
    char *q = strstr(e + 1, "\"token_ids\"");
    if (!q) q = strstr(js, "\"token_ids\"");
    assert_non_null(q);
    char *open = strchr(q, '['), *close = strchr(q, ']');
    *close = 0;
    int32_t want[256], got[256];
    int nw = parse_ids(open + 1, want, 256);
    pg_tokenizer *tok = NULL;
    assert_int_equal(pg_tokenizer_load(pg_test_asset(tok_rel), &tok), PAGODA_OK);
    size_t ng;
    assert_int_equal(pg_tokenizer_encode(tok, text, strlen(text), false, got, 256, &ng), PAGODA_OK);
    if ((size_t)nw != ng || memcmp(want, got, ng * sizeof *got)) {
        fprintf(stderr, "%s: \"%s\"\n", tok_rel, text);
        print_ids("expected", want, (size_t)nw);
        print_ids("got     ", got, ng);
        fail();
    }
    pg_tokenizer_free(tok);
    free(js);
}

static void test_oracles_json(void **state) {
    (void)state;
    check_oracle("oracles/gpt-oss-tiny/hf", "oracles/gpt-oss-tiny/expected.json");
    check_oracle("oracles/qwen3-dense-tiny/hf", "oracles/qwen3-dense-tiny/expected.json");
    check_oracle("oracles/qwen3-moe-tiny/hf", "oracles/qwen3-moe-tiny/expected.json");
    check_oracle("oracles/qwen35-tiny/hf", "oracles/qwen35-tiny/expected.json");
}

static void test_oracles_gguf(void **state) {
    (void)state;
    check_oracle("oracles/gpt-oss-tiny/model.gguf", "oracles/gpt-oss-tiny/expected.json");
    check_oracle("oracles/qwen3-dense-tiny/model.gguf", "oracles/qwen3-dense-tiny/expected.json");
    check_oracle("oracles/qwen3-moe-tiny/model.gguf", "oracles/qwen3-moe-tiny/expected.json");
    check_oracle("oracles/qwen35-tiny/model.gguf", "oracles/qwen35-tiny/expected.json");
}

static void encode_expect(const char *tok_rel, const char *text, bool add_special, const int32_t *want,
                          size_t nwant) {
    pg_tokenizer *tok = NULL;
    assert_int_equal(pg_tokenizer_load(pg_test_asset(tok_rel), &tok), PAGODA_OK);
    int32_t got[64];
    size_t n = 0;
    assert_int_equal(pg_tokenizer_encode(tok, text, strlen(text), add_special, got, 64, &n), PAGODA_OK);
    if (n != nwant || memcmp(got, want, n * sizeof *got)) {
        fprintf(stderr, "%s: \"%s\" add_special=%d\n", tok_rel, text, add_special);
        print_ids("expected", want, nwant);
        print_ids("got     ", got, n);
        fail();
    }
    /* decode(encode(x)) == x, skipping special tokens */
    char buf[256];
    size_t len;
    assert_int_equal(pg_tokenizer_decode(tok, got, n, true, buf, sizeof buf, &len), PAGODA_OK);
    assert_string_equal(buf, text);
    pg_tokenizer_free(tok);
}

/* "Once upon a time" with add_special: the prompt ids of
 * llm/llama2c/expected/stories260K_greedy_prompt_once_upon_a_time_n64.tokens.txt */
static void read_prompt_ids(int32_t *ids, size_t *n) {
    size_t len;
    char *txt = pg_test_read_file(
        pg_test_asset("llm/llama2c/expected/stories260K_greedy_prompt_once_upon_a_time_n64.tokens.txt"), &len);
    char *p = strstr(txt, "PROMPT_TOKENS:");
    assert_non_null(p);
    char *e = strchr(p, '\n');
    if (e) *e = 0;
    *n = (size_t)parse_ids(p + strlen("PROMPT_TOKENS:"), ids, 16);
    free(txt);
    assert_true(*n >= 2);
}

static void test_stories260k_json(void **state) {
    (void)state;
    int32_t want[16];
    size_t n;
    read_prompt_ids(want, &n);
    encode_expect("llm/stories260K-hf", "Once upon a time", true, want, n);
    encode_expect("llm/stories260K-hf", "Once upon a time", false, want + 1, n - 1);
}

static void test_special_tokens_add_special(void **state) {
    (void)state;
    pg_tokenizer *tok = NULL;
    assert_int_equal(pg_tokenizer_load(pg_test_asset("tokenizers/qwen3"), &tok), PAGODA_OK);
    int32_t im_end = pg_tokenizer_token_to_id(tok, "<|im_end|>", 10);
    assert_true(im_end > 0);
    assert_int_equal(pg_tokenizer_eos(tok), im_end);
    assert_true(pg_tokenizer_is_special(tok, im_end));
    const char *text = "hi<|im_end|>";
    int32_t a[16], b[16];
    size_t na, nb;
    assert_int_equal(pg_tokenizer_encode(tok, text, strlen(text), true, a, 16, &na), PAGODA_OK);
    assert_int_equal(pg_tokenizer_encode(tok, text, strlen(text), false, b, 16, &nb), PAGODA_OK);
    assert_int_equal(a[na - 1], im_end); /* matched as one special token */
    for (size_t i = 0; i < nb; i++) assert_int_not_equal(b[i], im_end); /* plain text */
    assert_true(nb > na);
    /* skip_special drops it on decode; without skipping it is kept */
    char buf[64];
    size_t len;
    assert_int_equal(pg_tokenizer_decode(tok, a, na, true, buf, sizeof buf, &len), PAGODA_OK);
    assert_string_equal(buf, "hi");
    assert_int_equal(pg_tokenizer_decode(tok, a, na, false, buf, sizeof buf, &len), PAGODA_OK);
    assert_string_equal(buf, text);
    /* too-small output buffer: full count reported, prefix written */
    size_t n2;
    assert_int_equal(pg_tokenizer_encode(tok, text, strlen(text), true, a, 1, &n2), PAGODA_OK);
    assert_int_equal(n2, na);
    assert_int_equal(pg_tokenizer_decode(tok, b, nb, false, buf, 3, &len), PAGODA_OK);
    assert_int_equal(len, strlen(text));
    assert_string_equal(buf, "hi");
    assert_non_null(pg_tokenizer_chat_template(tok));
    pg_tokenizer_free(tok);
}

/* The two jobs of add_special apart (pg_tokenizer_encode_flags): BOS is
 * added only with ADD_SPECIAL, "<s>" text becomes BOS only with
 * PARSE_SPECIAL; a rendered chat prompt uses PARSE_SPECIAL alone, so it keeps
 * exactly the BOS its template wrote. */
static void test_encode_flags_add_vs_parse(void **state) {
    (void)state;
    pg_tokenizer *tok = NULL;
    assert_int_equal(pg_tokenizer_load(pg_test_asset("llm/stories260K-hf"), &tok), PAGODA_OK);
    int32_t bos = pg_tokenizer_token_to_id(tok, "<s>", 3);
    assert_true(bos >= 0);
    const char *text = "<s>Once";
    size_t len = strlen(text);
    int32_t both[16], parse[16], add[16], none[16];
    size_t nb, np, na, nn;
    assert_int_equal(pg_tokenizer_encode_flags(tok, text, len,
                                               PG_ENCODE_ADD_SPECIAL | PG_ENCODE_PARSE_SPECIAL,
                                               both, 16, &nb),
                     PAGODA_OK);
    assert_int_equal(
        pg_tokenizer_encode_flags(tok, text, len, PG_ENCODE_PARSE_SPECIAL, parse, 16, &np),
        PAGODA_OK);
    assert_int_equal(pg_tokenizer_encode_flags(tok, text, len, PG_ENCODE_ADD_SPECIAL, add, 16, &na),
                     PAGODA_OK);
    assert_int_equal(pg_tokenizer_encode_flags(tok, text, len, 0, none, 16, &nn), PAGODA_OK);
    /* both: added BOS, then "<s>" parsed to BOS */
    assert_true(nb >= 3);
    assert_int_equal(both[0], bos);
    assert_int_equal(both[1], bos);
    /* parse only: the template's BOS, nothing added */
    assert_int_equal(np, nb - 1);
    assert_memory_equal(parse, both + 1, np * sizeof *parse);
    /* add only: BOS, then "<s>" as plain text (no second BOS) */
    assert_int_equal(add[0], bos);
    for (size_t i = 1; i < na; i++)
        assert_int_not_equal(add[i], bos);
    /* neither: plain text, no BOS anywhere */
    assert_int_equal(nn, na - 1);
    for (size_t i = 0; i < nn; i++)
        assert_int_not_equal(none[i], bos);
    /* pg_tokenizer_encode(add_special) = both flags or none */
    int32_t old[16];
    size_t no;
    assert_int_equal(pg_tokenizer_encode(tok, text, len, true, old, 16, &no), PAGODA_OK);
    assert_int_equal(no, nb);
    assert_memory_equal(old, both, nb * sizeof *old);
    assert_int_equal(pg_tokenizer_encode(tok, text, len, false, old, 16, &no), PAGODA_OK);
    assert_int_equal(no, nn);
    assert_memory_equal(old, none, nn * sizeof *old);
    pg_tokenizer_free(tok);
}

static void test_token_bytes_byte_level(void **state) {
    (void)state;
    pg_tokenizer *tok = NULL;
    assert_int_equal(pg_tokenizer_load(pg_test_asset("tokenizers/llama3"), &tok), PAGODA_OK);
    /* "Ġthe" is " the"; "Ċ" is "\n" */
    size_t len;
    int32_t id = pg_tokenizer_token_to_id(tok, "\xc4\xa0the", 5);
    assert_true(id >= 0);
    const char *b = pg_tokenizer_token_bytes(tok, id, &len);
    assert_int_equal(len, 4);
    assert_memory_equal(b, " the", 4);
    id = pg_tokenizer_token_to_id(tok, "\xc4\x8a", 2);
    b = pg_tokenizer_token_bytes(tok, id, &len);
    assert_int_equal(len, 1);
    assert_int_equal(b[0], '\n');
    assert_null(pg_tokenizer_token_bytes(tok, -1, &len));
    assert_null(pg_tokenizer_token_bytes(tok, pg_tokenizer_vocab_size(tok), &len));
    /* bad ids are an error, not a crash */
    int32_t bad[2] = {1, 1 << 30};
    char buf[16];
    assert_int_equal(pg_tokenizer_decode(tok, bad, 2, false, buf, sizeof buf, &len), PAGODA_ERR_INVALID_ARG);
    /* invalid UTF-8 input still encodes and round-trips byte-exactly */
    const char raw[] = "a\xff\xfe b\xc3";
    int32_t ids[32];
    size_t n;
    assert_int_equal(pg_tokenizer_encode(tok, raw, sizeof raw - 1, false, ids, 32, &n), PAGODA_OK);
    assert_int_equal(pg_tokenizer_decode(tok, ids, n, false, buf, sizeof buf, &len), PAGODA_OK);
    assert_int_equal(len, sizeof raw - 1);
    assert_memory_equal(buf, raw, len);
    pg_tokenizer_free(tok);
}

/* Qwen3's NFC normalizer: a decomposed "é" encodes like the composed one,
 * inside ASCII text and at the very start. */
static void test_nfc_normalizer(void **state) {
    (void)state;
    pg_tokenizer *tok = NULL;
    assert_int_equal(pg_tokenizer_load(pg_test_asset("tokenizers/qwen3"), &tok), PAGODA_OK);
    const char *pairs[][2] = {{"a cafe\xcc\x81 au lait", "a caf\xc3\xa9 au lait"},
                              {"e\xcc\x81t\xc3\xa9", "\xc3\xa9t\xc3\xa9"}};
    for (int k = 0; k < 2; k++) {
        int32_t a[32], b[32];
        size_t na, nb;
        assert_int_equal(pg_tokenizer_encode(tok, pairs[k][0], strlen(pairs[k][0]), false, a, 32, &na), PAGODA_OK);
        assert_int_equal(pg_tokenizer_encode(tok, pairs[k][1], strlen(pairs[k][1]), false, b, 32, &nb), PAGODA_OK);
        assert_int_equal(na, nb);
        assert_memory_equal(a, b, na * sizeof *a);
    }
    pg_tokenizer_free(tok);
}

static void write_dir(const char *dir, const char *json) {
    char p[1024];
    snprintf(p, sizeof p, "%s/tokenizer.json", dir);
    pg_test_write_file(p, json, strlen(json));
}

static pg_tokenizer *load_json_text(const char *json) {
    const char *dir = pg_test_tmpdir();
    write_dir(dir, json);
    pg_tokenizer *tok = NULL;
    pagoda_status st = pg_tokenizer_load(dir, &tok);
    if (st) fprintf(stderr, "load: %s\n", pg_last_error());
    assert_int_equal(st, PAGODA_OK);
    return tok;
}

static void expect_ids(pg_tokenizer *tok, const char *text, bool add_special, const int32_t *want, size_t nw) {
    int32_t got[64];
    size_t n;
    assert_int_equal(pg_tokenizer_encode(tok, text, strlen(text), add_special, got, 64, &n), PAGODA_OK);
    if (n != nw || memcmp(got, want, n * sizeof *got)) {
        fprintf(stderr, "\"%s\" add_special=%d\n", text, add_special);
        print_ids("expected", want, nw);
        print_ids("got     ", got, n);
        fail();
    }
}

#define IDS(...) ((const int32_t[]){__VA_ARGS__}), sizeof((const int32_t[]){__VA_ARGS__}) / sizeof(int32_t)

/* Metaspace (prepend_scheme first, split), Metaspace decoder, an added
 * special token with lstrip/rstrip, unk. */
static void test_metaspace_and_added_token_strip(void **state) {
    (void)state;
    pg_tokenizer *tok = load_json_text(
        "{\"added_tokens\": [{\"id\": 5, \"content\": \"<x>\", \"special\": true, \"lstrip\": true,"
        " \"rstrip\": true}],"
        " \"pre_tokenizer\": {\"type\": \"Metaspace\", \"replacement\": \"\u2581\", \"prepend_scheme\": \"first\","
        " \"split\": true},"
        " \"decoder\": {\"type\": \"Metaspace\", \"replacement\": \"\u2581\", \"prepend_scheme\": \"first\"},"
        " \"model\": {\"type\": \"BPE\", \"unk_token\": \"<unk>\", \"vocab\": {\"\u2581\": 0, \"a\": 1, \"b\": 2,"
        " \"\u2581a\": 3, \"<unk>\": 4}, \"merges\": [\"\u2581 a\"]}}");
    expect_ids(tok, "a b", false, IDS(3, 0, 2));
    expect_ids(tok, "a <x> b", true, IDS(3, 5, 2));      /* spaces around <x> stripped, no prepend after it */
    expect_ids(tok, "a <x> b", false, IDS(3, 0, 4, 4, 4, 0, 2)); /* plain text: unknown chars */
    int32_t ids[] = {3, 0, 2};
    char buf[32];
    size_t len;
    assert_int_equal(pg_tokenizer_decode(tok, ids, 3, false, buf, sizeof buf, &len), PAGODA_OK);
    assert_string_equal(buf, "a b");
    pg_tokenizer_free(tok);
}

/* "a--a" split on "-" with each behavior (HF pre_tokenizers/split.rs):
 * Isolated a|-|-|a, Removed a|a, MergedWithPrevious a-|-|a (a match joins
 * the previous piece only if that one is not a match), MergedWithNext
 * a|-|-a, Contiguous a|--|a. Merges show where the pieces are. */
static void test_split_behaviors(void **state) {
    (void)state;
    static const char *const behaviors[] = {"Isolated", "Removed", "MergedWithPrevious", "MergedWithNext",
                                            "Contiguous"};
    static const int32_t want[][4] = {{0, 1, 1, 0}, {0, 0, -1, -1}, {2, 1, 0, -1}, {0, 1, 3, -1}, {0, 4, 0, -1}};
    for (int b = 0; b < 5; b++) {
        char json[1024];
        snprintf(json, sizeof json,
                 "{\"pre_tokenizer\": {\"type\": \"Split\", \"pattern\": {\"String\": \"-\"},"
                 " \"behavior\": \"%s\", \"invert\": false},"
                 " \"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"-\": 1, \"a-\": 2, \"-a\": 3, \"--\": 4},"
                 " \"merges\": [\"- -\", \"a -\", \"- a\"]}}",
                 behaviors[b]);
        pg_tokenizer *tok = load_json_text(json);
        size_t nw = 0;
        while (nw < 4 && want[b][nw] >= 0) nw++;
        fprintf(stderr, "Split %s\n", behaviors[b]);
        expect_ids(tok, "a--a", false, want[b], nw);
        pg_tokenizer_free(tok);
    }
}

static void test_digits_and_single_word(void **state) {
    (void)state;
    const char *fmt = "{\"pre_tokenizer\": {\"type\": \"Digits\", \"individual_digits\": %s},"
                      " \"added_tokens\": [{\"id\": 3, \"content\": \"ab\", \"special\": false, \"single_word\": true}],"
                      " \"model\": {\"type\": \"BPE\", \"vocab\": {\"1\": 0, \"2\": 1, \"12\": 2, \"ab\": 3, \"a\": 4,"
                      " \"b\": 5, \" \": 6}, \"merges\": [\"1 2\"]}}";
    char json[1024];
    snprintf(json, sizeof json, fmt, "true");
    pg_tokenizer *tok = load_json_text(json);
    expect_ids(tok, "12", false, IDS(0, 1));
    expect_ids(tok, "ab aab", false, IDS(3, 6, 4, 4, 5)); /* "ab" only as a whole word */
    pg_tokenizer_free(tok);
    snprintf(json, sizeof json, fmt, "false");
    tok = load_json_text(json);
    expect_ids(tok, "12", false, IDS(2));
    pg_tokenizer_free(tok);
}

/* Replace normalizer with a regex; ByteLevel pre-tokenizer/decoder with a
 * non-ASCII added token that must decode as its raw text. */
static void test_regex_replace_and_raw_added_token(void **state) {
    (void)state;
    pg_tokenizer *tok = load_json_text(
        "{\"normalizer\": {\"type\": \"Replace\", \"pattern\": {\"Regex\": \" {2,}\"}, \"content\": \"_\"},"
        " \"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \" \": 1, \"_\": 2}, \"merges\": []}}");
    expect_ids(tok, "a  a a   a", false, IDS(0, 2, 0, 1, 0, 2, 0));
    pg_tokenizer_free(tok);
    tok = load_json_text(
        "{\"added_tokens\": [{\"id\": 2, \"content\": \"\u00f8\", \"special\": false}],"
        " \"pre_tokenizer\": {\"type\": \"ByteLevel\", \"add_prefix_space\": false, \"use_regex\": true},"
        " \"decoder\": {\"type\": \"ByteLevel\"},"
        " \"model\": {\"type\": \"BPE\", \"vocab\": {\"x\": 0, \"\u0120\": 1}, \"merges\": []}}");
    expect_ids(tok, "x\xc3\xb8 x", false, IDS(0, 2, 1, 0));
    int32_t ids[] = {0, 2, 1, 0};
    char buf[32];
    size_t len;
    assert_int_equal(pg_tokenizer_decode(tok, ids, 4, false, buf, sizeof buf, &len), PAGODA_OK);
    assert_string_equal(buf, "x\xc3\xb8 x");
    pg_tokenizer_free(tok);
}

static void test_errors(void **state) {
    (void)state;
    pg_tokenizer *tok = (pg_tokenizer *)1;
    assert_int_equal(pg_tokenizer_load("/nonexistent/dir", &tok), PAGODA_ERR_NOT_FOUND);
    assert_null(tok);
    assert_non_null(strstr(pg_last_error(), "/nonexistent/dir"));

    const char *dir = pg_test_tmpdir();
    /* directory without tokenizer.json */
    assert_int_equal(pg_tokenizer_load(dir, &tok), PAGODA_ERR_NOT_FOUND);
    /* malformed JSON */
    write_dir(dir, "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0,");
    assert_int_equal(pg_tokenizer_load(dir, &tok), PAGODA_ERR_FORMAT);
    assert_non_null(strstr(pg_last_error(), "malformed JSON"));
    /* unknown model type */
    write_dir(dir, "{\"model\": {\"type\": \"Unigram\", \"vocab\": []}}");
    assert_int_equal(pg_tokenizer_load(dir, &tok), PAGODA_ERR_UNSUPPORTED);
    assert_non_null(strstr(pg_last_error(), "Unigram"));
    /* merge naming a token that is not in the vocab */
    write_dir(dir, "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 1}, \"merges\": [\"a b\"]}}");
    assert_int_equal(pg_tokenizer_load(dir, &tok), PAGODA_ERR_FORMAT);
    /* unsupported pre-tokenizer */
    write_dir(dir, "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": []},"
                   " \"pre_tokenizer\": {\"type\": \"Frobnicate\"}}");
    assert_int_equal(pg_tokenizer_load(dir, &tok), PAGODA_ERR_UNSUPPORTED);
    /* bad regex */
    write_dir(dir, "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": []},"
                   " \"pre_tokenizer\": {\"type\": \"Split\", \"pattern\": {\"Regex\": \"(\"}}}");
    assert_int_equal(pg_tokenizer_load(dir, &tok), PAGODA_ERR_FORMAT);
    /* a minimal valid one works: merges as [a, b] pairs */
    write_dir(dir, "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 1, \"ab\": 2},"
                   " \"merges\": [[\"a\", \"b\"]]}}");
    assert_int_equal(pg_tokenizer_load(dir, &tok), PAGODA_OK);
    int32_t ids[8];
    size_t n;
    assert_int_equal(pg_tokenizer_encode(tok, "abab", 4, true, ids, 8, &n), PAGODA_OK);
    assert_int_equal(n, 2);
    assert_int_equal(ids[0], 2);
    assert_int_equal(ids[1], 2);
    pg_tokenizer_free(tok);
    /* a file that is neither a directory nor GGUF */
    char p[1024];
    snprintf(p, sizeof p, "%s/notes.txt", dir);
    pg_test_write_file(p, "hello", 5);
    assert_int_equal(pg_tokenizer_load(p, &tok), PAGODA_ERR_UNSUPPORTED);
}

/* Write a GGUF with the given tokenizer.ggml.model / pre (NULL: key absent). */
static const char *write_vocab_gguf(const char *name, const char *model, const char *pre) {
    static char p[1024];
    snprintf(p, sizeof p, "%s/%s.gguf", pg_test_tmpdir(), name);
    pg_gguf_writer *w = NULL;
    assert_int_equal(pg_gguf_writer_create(&w), PAGODA_OK);
    pg_gguf_writer_set_str(w, "general.architecture", "llama");
    if (model) pg_gguf_writer_set_str(w, "tokenizer.ggml.model", model);
    if (pre) pg_gguf_writer_set_str(w, "tokenizer.ggml.pre", pre);
    const char *toks[] = {"a", "b", "ab"};
    const char *merges[] = {"a b"};
    pg_gguf_writer_set_str_array(w, "tokenizer.ggml.tokens", toks, 3);
    pg_gguf_writer_set_str_array(w, "tokenizer.ggml.merges", merges, 1);
    assert_int_equal(pg_gguf_writer_begin(w, p), PAGODA_OK);
    assert_int_equal(pg_gguf_writer_finish(w), PAGODA_OK);
    pg_gguf_writer_free(w);
    return p;
}

/* A GGUF vocab made from a tokenizer.json (as llama.cpp's converter does:
 * tokens by id, special added tokens CONTROL, merges "a b"), so the GGUF
 * path's llama3 / qwen2 pre-tokenizers run against their reference suites. */
static void gguf_from_json(const char *json_rel, const char *pre, const char *out) {
    size_t len;
    char *txt = pg_test_read_file(pg_test_asset(json_rel), &len);
    cJSON *root = cJSON_ParseWithLength(txt, len);
    free(txt);
    assert_non_null(root);
    cJSON *model = cJSON_GetObjectItem(root, "model"), *vocab = cJSON_GetObjectItem(model, "vocab");
    cJSON *added = cJSON_GetObjectItem(root, "added_tokens"), *merges = cJSON_GetObjectItem(model, "merges"), *e;
    int n = 0;
    cJSON_ArrayForEach(e, vocab) if (e->valueint + 1 > n) n = e->valueint + 1;
    cJSON_ArrayForEach(e, added) {
        int id = cJSON_GetObjectItem(e, "id")->valueint;
        if (id + 1 > n) n = id + 1;
    }
    const char **toks = calloc((size_t)n, sizeof *toks);
    int32_t *types = calloc((size_t)n, sizeof *types);
    char **pads = calloc((size_t)n, sizeof *pads);
    cJSON_ArrayForEach(e, vocab) {
        toks[e->valueint] = e->string;
        types[e->valueint] = 1;
    }
    cJSON_ArrayForEach(e, added) {
        int id = cJSON_GetObjectItem(e, "id")->valueint;
        toks[id] = cJSON_GetObjectItem(e, "content")->valuestring;
        types[id] = cJSON_IsTrue(cJSON_GetObjectItem(e, "special")) ? 3 : 4;
    }
    for (int i = 0; i < n; i++)
        if (!toks[i]) {
            pads[i] = malloc(32);
            snprintf(pads[i], 32, "[PAD%d]", i);
            toks[i] = pads[i];
            types[i] = 5;
        }
    int nm = cJSON_GetArraySize(merges), k = 0;
    char **ms = calloc((size_t)nm, sizeof *ms);
    cJSON_ArrayForEach(e, merges) {
        if (cJSON_IsString(e)) {
            ms[k] = strdup(e->valuestring);
        } else {
            const char *a = e->child->valuestring, *b = e->child->next->valuestring;
            ms[k] = malloc(strlen(a) + strlen(b) + 2);
            sprintf(ms[k], "%s %s", a, b);
        }
        k++;
    }
    pg_gguf_writer *w = NULL;
    assert_int_equal(pg_gguf_writer_create(&w), PAGODA_OK);
    pg_gguf_writer_set_str(w, "tokenizer.ggml.model", "gpt2");
    pg_gguf_writer_set_str(w, "tokenizer.ggml.pre", pre);
    pg_gguf_writer_set_str_array(w, "tokenizer.ggml.tokens", toks, (uint64_t)n);
    pg_gguf_writer_set_array(w, "tokenizer.ggml.token_type", PG_GGUF_I32, types, (uint64_t)n);
    pg_gguf_writer_set_str_array(w, "tokenizer.ggml.merges", (const char *const *)ms, (uint64_t)nm);
    assert_int_equal(pg_gguf_writer_begin(w, out), PAGODA_OK);
    assert_int_equal(pg_gguf_writer_finish(w), PAGODA_OK);
    pg_gguf_writer_free(w);
    for (int i = 0; i < nm; i++) free(ms[i]);
    for (int i = 0; i < n; i++) free(pads[i]);
    free(ms);
    free(pads);
    free(toks);
    free(types);
    cJSON_Delete(root);
}

static void test_gguf_llama3_qwen2_pre(void **state) {
    (void)state;
    char p[1024];
    snprintf(p, sizeof p, "%s/llama-bpe.gguf", pg_test_tmpdir());
    gguf_from_json("tokenizers/llama3/tokenizer.json", "llama-bpe", p);
    assert_true(run_suite(p, "llama.cpp-vocab/ggml-vocab-llama-bpe.gguf.inp",
                          "llama.cpp-vocab/ggml-vocab-llama-bpe.gguf.out", true, false) > 0);
    remove(p); /* ~9 MB: do not leave it in $TMPDIR */
    snprintf(p, sizeof p, "%s/qwen2.gguf", pg_test_tmpdir());
    gguf_from_json("tokenizers/qwen3/tokenizer.json", "qwen2", p);
    assert_true(run_suite(p, "llama.cpp-vocab/ggml-vocab-qwen2.gguf.inp",
                          "llama.cpp-vocab/ggml-vocab-qwen2.gguf.out", true, false) > 0);
    remove(p);
}

static void test_gguf_errors(void **state) {
    (void)state;
    pg_tokenizer *tok = NULL;
    assert_int_equal(pg_tokenizer_load(write_vocab_gguf("nomodel", NULL, NULL), &tok), PAGODA_ERR_NOT_FOUND);
    assert_non_null(strstr(pg_last_error(), "tokenizer.ggml.model"));
    assert_int_equal(pg_tokenizer_load(write_vocab_gguf("bert", "bert", NULL), &tok), PAGODA_ERR_UNSUPPORTED);
    assert_non_null(strstr(pg_last_error(), "bert"));
    assert_int_equal(pg_tokenizer_load(write_vocab_gguf("pre", "gpt2", "no-such-pre"), &tok),
                     PAGODA_ERR_UNSUPPORTED);
    assert_non_null(strstr(pg_last_error(), "no-such-pre"));
    /* the same file with a known pre type loads and merges */
    assert_int_equal(pg_tokenizer_load(write_vocab_gguf("ok", "gpt2", "gpt-2"), &tok), PAGODA_OK);
    int32_t ids[4];
    size_t n;
    assert_int_equal(pg_tokenizer_encode(tok, "ab", 2, false, ids, 4, &n), PAGODA_OK);
    assert_int_equal(n, 1);
    assert_int_equal(ids[0], 2);
    pg_tokenizer_free(tok);
    /* truncated GGUF */
    size_t len;
    char *data = pg_test_read_file(pg_test_asset("llm/llama2c/stories260K.gguf"), &len);
    char p[1024];
    snprintf(p, sizeof p, "%s/truncated.gguf", pg_test_tmpdir());
    pg_test_write_file(p, data, 4096);
    free(data);
    assert_int_equal(pg_tokenizer_load(p, &tok), PAGODA_ERR_FORMAT);
    assert_null(tok);
}

/* A SentencePiece vocab (GGUF tokenizer.ggml.model "llama") with one
 * 1 MB token: building the merge table hashed both halves of every split,
 * O(len^2), 45 s for a 100 kB corrupt token, over an hour for this 1 MB one.
 * Only splits into lengths some token has are looked up now: O(len). No
 * clock here (a timed test is noise on a shared machine): the quadratic
 * version never finishes within the test's CTest timeout. */
static void test_spm_long_token_loads_fast(void **state) {
    (void)state;
    enum { N = 3 + 256 + 3 + 1, LONG = 1000000 };
    static char bytes[256][8];
    const char *tokens[N];
    int32_t types[N];
    float scores[N];
    tokens[0] = "<unk>", tokens[1] = "<s>", tokens[2] = "</s>";
    types[0] = PG_TOKTYPE_UNKNOWN, types[1] = types[2] = PG_TOKTYPE_CONTROL;
    for (int b = 0; b < 256; b++) {
        snprintf(bytes[b], sizeof bytes[b], "<0x%02X>", b);
        tokens[3 + b] = bytes[b];
        types[3 + b] = PG_TOKTYPE_BYTE;
    }
    tokens[259] = "a", tokens[260] = "b", tokens[261] = "ab";
    char *big = malloc(LONG + 1);
    assert_non_null(big);
    memset(big, 'a', LONG);
    big[LONG] = 0;
    tokens[262] = big;
    for (int i = 0; i < N; i++) {
        scores[i] = -(float)i;
        if (i >= 259) types[i] = PG_TOKTYPE_NORMAL;
    }
    pg_vocab_spec spec = {.what = "long-token.gguf",
                          .model = "llama",
                          .n_tokens = N,
                          .tokens = tokens,
                          .scores = scores,
                          .types = types,
                          .bos_id = 1,
                          .eos_id = 2,
                          .unk_id = 0,
                          .pad_id = -1,
                          .add_bos = 0,
                          .add_eos = 0,
                          .add_space_prefix = 0};
    pg_tokenizer *tok;
    if (pg_tokenizer_from_vocab(&spec, &tok) != PAGODA_OK) fail_msg("%s", pg_last_error());
    int32_t ids[8];
    size_t n;
    assert_int_equal(pg_tokenizer_encode(tok, "abab", 4, false, ids, 8, &n), PAGODA_OK);
    assert_int_equal(n, 2); /* the merges still work: "ab" "ab" */
    assert_int_equal(ids[0], 261);
    assert_int_equal(ids[1], 261);
    pg_tokenizer_free(tok);
    free(big);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_qwen3_json),
        cmocka_unit_test(test_llama3_json),
        cmocka_unit_test(test_gpt_oss_json),
        cmocka_unit_test(test_llama_spm_gguf),
        cmocka_unit_test(test_phi3_gguf),
        cmocka_unit_test(test_gpt2_gguf),
        cmocka_unit_test(test_deepseek_llm_gguf),
        cmocka_unit_test(test_mpt_gguf),
        cmocka_unit_test(test_refact_gguf),
        cmocka_unit_test(test_stories260k_json),
        cmocka_unit_test(test_encode_flags_add_vs_parse),
        cmocka_unit_test(test_stories260k_suite_json),
        cmocka_unit_test(test_oracles_json),
        cmocka_unit_test(test_stories260k_suite_gguf),
        cmocka_unit_test(test_oracles_gguf),
        cmocka_unit_test(test_special_tokens_add_special),
        cmocka_unit_test(test_token_bytes_byte_level),
        cmocka_unit_test(test_nfc_normalizer),
        cmocka_unit_test(test_metaspace_and_added_token_strip),
        cmocka_unit_test(test_split_behaviors),
        cmocka_unit_test(test_digits_and_single_word),
        cmocka_unit_test(test_regex_replace_and_raw_added_token),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_gguf_errors),
        cmocka_unit_test(test_gguf_llama3_qwen2_pre),
        cmocka_unit_test(test_spm_long_token_loads_fast),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
