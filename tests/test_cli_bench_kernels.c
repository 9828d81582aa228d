/* `pagoda bench kernels` end to end: the built binary on tiny model shapes
 * (a GGUF written by pg_gen_model, a bare config.json directory) with
 * --quick --rounds 1 --output-json; the JSON must hold every selected
 * section, every measured value finite and > 0, and the GEMM shapes derived
 * from the config (fused qkv N = (heads + 2 kv_heads) * head_dim). Bad
 * options and bad models give one clear line and exit 2. Nothing here
 * checks a speed: the values only have to be measurements. */
#include "testutil.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gen/gen_model.h"

/* `pagoda bench kernels <args>` with stderr merged; exit code and output. */
static int run(const char *args, char **out) {
    char cmd[16384];
    snprintf(cmd, sizeof cmd, "%s '%s' bench kernels %s 2>&1", pg_test_exec_wrapper(),
             pg_test_pagoda_bin(), args);
    return pg_test_run_command(cmd, out);
}

static cJSON *load_json(const char *path) {
    size_t len;
    char *text = pg_test_read_file(path, &len);
    cJSON *j = cJSON_ParseWithLength(text, len);
    free(text);
    if (!j) fail_msg("%s is not JSON", path);
    return j;
}

static double num(const cJSON *obj, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (!cJSON_IsNumber(v)) fail_msg("missing number '%s'", key);
    return v->valuedouble;
}

/* obj[key] must be a finite number > 0. */
static void positive(const cJSON *obj, const char *key) {
    double v = num(obj, key);
    if (!(isfinite(v) && v > 0)) fail_msg("'%s' = %g (want finite and > 0)", key, v);
}

static const cJSON *item(const cJSON *obj, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (!v) fail_msg("missing '%s'", key);
    return v;
}

static void check_peaks(const cJSON *root) {
    const cJSON *peaks = item(root, "peaks");
    static const char *const KINDS[] = {"bf16", "int8", "f32"};
    for (int k = 0; k < 3; k++) {
        const cJSON *p = item(peaks, KINDS[k]);
        assert_true(cJSON_IsString(item(p, "instruction")));
        if (!cJSON_IsTrue(item(p, "available"))) continue;
        positive(p, "gflops");
        positive(p, "gflops_per_cpu_s");
    }
    positive(item(peaks, "read_bandwidth"), "gbs");
    positive(item(peaks, "read_bandwidth"), "gbs_per_cpu_s");
}

/* Every row of a GEMM section: n_m x n_layers rows, values measured, the
 * layer shapes as given. want[] = {N, K} per layer in order. */
static void check_gemm(const cJSON *sec, int n_m, int n_layers, const int64_t (*want)[2]) {
    const cJSON *results = item(sec, "results");
    assert_int_equal(cJSON_GetArraySize(results), n_m * n_layers);
    bool has_peak = strcmp(item(sec, "peak")->valuestring, "none") != 0;
    int i = 0;
    const cJSON *r;
    cJSON_ArrayForEach(r, results) {
        int li = i++ % n_layers;
        assert_int_equal((int64_t)num(r, "n"), want[li][0]);
        assert_int_equal((int64_t)num(r, "k"), want[li][1]);
        static const char *const KEYS[] = {
            "m", "ms", "gflops", "gbs", "packed_bytes", "pct_read_bw", "pct_read_bw_cpu"};
        for (size_t k = 0; k < sizeof KEYS / sizeof KEYS[0]; k++)
            positive(r, KEYS[k]);
        if (has_peak) {
            positive(r, "pct_peak");
            positive(r, "pct_peak_cpu");
        }
        assert_int_equal(cJSON_IsTrue(item(r, "swiglu")), li == 2);
    }
}

static void check_attention(const cJSON *sec, int n_rows) {
    const cJSON *results = item(sec, "results");
    assert_int_equal(cJSON_GetArraySize(results), n_rows);
    const cJSON *r;
    cJSON_ArrayForEach(r, results) {
        static const char *const KEYS[] = {"n_seqs",  "q_len",      "kv_len",
                                           "ref_ms",  "fast_1t_ms", "speedup_1t",
                                           "fast_ms", "speedup",    "gflops"};
        for (size_t k = 0; k < sizeof KEYS / sizeof KEYS[0]; k++)
            positive(r, KEYS[k]);
        assert_true(num(r, "kv_len") <= num(sec, "context"));
    }
}

/* A GGUF (metadata + random weights; only the metadata is read): all three
 * kernels, W4A8 group 32, two M values. */
static void test_gguf_all_sections(void **state) {
    (void)state;
    const char *d = pg_test_tmpdir();
    char gguf[4200], json[4200], args[9000];
    snprintf(gguf, sizeof gguf, "%s/m.gguf", d);
    snprintf(json, sizeof json, "%s/out.json", d);
    pg_gen_model_options g;
    pg_gen_model_defaults(&g);
    g.hidden = 96, g.heads = 6, g.kv_heads = 2, g.ffn = 160, g.vocab = 300, g.layers = 1;
    g.gguf_path = gguf;
    if (pg_gen_model_write(&g)) fail_msg("gen: %s", pg_last_error());
    snprintf(args, sizeof args,
             "'%s' --quick --rounds 1 --threads 2 --m 4,1 --context 48 --quantization w4a8 "
             "--quant-group-size 32 --act-group --output-json '%s'",
             gguf, json);
    char *out;
    int rc = run(args, &out);
    if (rc != 0) fail_msg("exit %d:\n%s", rc, out);
    assert_non_null(strstr(out, "qkv 160x96")); /* (6 + 2*2) * 16 */
    free(out);
    cJSON *root = load_json(json);
    assert_int_equal((int)num(root, "threads"), 2);
    assert_true(cJSON_IsTrue(item(root, "quick")));
    const cJSON *m = item(root, "model");
    assert_int_equal((int)num(m, "hidden_size"), 96);
    assert_int_equal((int)num(m, "head_dim"), 16);
    assert_int_equal((int)num(m, "vocab_size"), 300);
    check_peaks(root);
    /* quick: no lm_head */
    const int64_t want[4][2] = {{160, 96}, {96, 96}, {160, 96}, {96, 160}};
    const cJSON *gemm = item(root, "gemm");
    assert_string_equal(item(gemm, "dtype")->valuestring, "BF16");
    check_gemm(gemm, 2, 4, want);
    const cJSON *q = item(root, "qgemm");
    assert_string_equal(item(q, "scheme")->valuestring, "w4a8");
    assert_int_equal((int)num(q, "group"), 32);
    assert_true(cJSON_IsTrue(item(q, "act_group")));
    check_gemm(q, 2, 4, want);
    const cJSON *att = item(root, "attention");
    assert_int_equal((int)num(att, "context"), 48);
    assert_int_equal((int)num(att, "heads"), 6);
    check_attention(att, 2); /* quick: decode b1 and prefill 48 */
    cJSON_Delete(root);
}

/* --quantization mxfp4: the MXFP4 layers beside the W4A8 g32 act-group
 * baseline (same rounds) and one speed-up per (M, layer). */
static void test_qgemm_mxfp4(void **state) {
    (void)state;
    const char *d = pg_test_tmpdir();
    char gguf[4200], json[4200], args[9000];
    snprintf(gguf, sizeof gguf, "%s/m.gguf", d);
    snprintf(json, sizeof json, "%s/out.json", d);
    pg_gen_model_options g;
    pg_gen_model_defaults(&g);
    g.hidden = 96, g.heads = 6, g.kv_heads = 2, g.ffn = 160, g.vocab = 300, g.layers = 1;
    g.gguf_path = gguf;
    if (pg_gen_model_write(&g)) fail_msg("gen: %s", pg_last_error());
    snprintf(args, sizeof args,
             "'%s' --kernels qgemm --quick --rounds 1 --threads 1 --m 1 --quantization mxfp4 "
             "--output-json '%s'",
             gguf, json);
    char *out;
    int rc = run(args, &out);
    if (rc != 0) fail_msg("exit %d:\n%s", rc, out);
    assert_non_null(strstr(out, "mxfp4 gate+up SwiGLU 160x96"));
    assert_non_null(strstr(out, "MXFP4 speed-up over W4A8"));
    free(out);
    cJSON *root = load_json(json);
    const cJSON *q = item(root, "qgemm");
    assert_string_equal(item(q, "scheme")->valuestring, "mxfp4");
    assert_int_equal((int)num(q, "group"), 32);
    assert_true(cJSON_IsTrue(item(q, "act_group")));
    const cJSON *res = item(q, "results");
    assert_int_equal(cJSON_GetArraySize(res), 8); /* quick: 4 layers x 2 formats */
    for (int i = 0; i < 8; i++)
        assert_string_equal(item(cJSON_GetArrayItem(res, i), "format")->valuestring,
                            i < 4 ? "w4a8" : "mxfp4");
    const cJSON *sp = item(q, "mxfp4_speedup");
    assert_int_equal(cJSON_GetArraySize(sp), 4);
    for (int i = 0; i < 4; i++)
        assert_true(num(cJSON_GetArrayItem(sp, i), "speedup") > 0.0);
    cJSON_Delete(root);
}

/* A directory holding only a config.json (explicit head_dim != hidden /
 * heads): only the selected sections, lm_head included without --quick
 * (a small vocab keeps it cheap), F32 weights, both KV dtypes. */
static void test_config_json_selected(void **state) {
    (void)state;
    const char *d = pg_test_tmpdir();
    char cfg[4200], json[4200], args[9000];
    snprintf(cfg, sizeof cfg, "%s/config.json", d);
    snprintf(json, sizeof json, "%s/out.json", d);
    const char *text = "{\"architectures\": [\"LlamaForCausalLM\"], \"hidden_size\": 64, "
                       "\"intermediate_size\": 96, \"num_hidden_layers\": 2, "
                       "\"num_attention_heads\": 4, \"num_key_value_heads\": 2, \"head_dim\": 32, "
                       "\"vocab_size\": 200, \"rms_norm_eps\": 1e-5}";
    pg_test_write_file(cfg, text, strlen(text));
    snprintf(args, sizeof args,
             "'%s' --kernels gemm,attention --dtype float32 --rounds 1 --threads 1 --m 3 "
             "--context 40 --kv-cache-dtype both --output-json '%s'",
             cfg, json); /* the config.json file itself (a directory works too) */
    char *out;
    int rc = run(args, &out);
    if (rc != 0) fail_msg("exit %d:\n%s", rc, out);
    free(out);
    cJSON *root = load_json(json);
    check_peaks(root);
    assert_null(cJSON_GetObjectItemCaseSensitive(root, "qgemm"));
    const int64_t want[5][2] = {{256, 64}, {64, 128}, {96, 64}, {64, 96}, {200, 64}};
    const cJSON *gemm = item(root, "gemm");
    assert_string_equal(item(gemm, "dtype")->valuestring, "F32");
    check_gemm(gemm, 1, 5, want);
    /* 4 scenarios (decode b1, b32, prefill 40, no prefix case: 40 < 512)
     * minus the prefix one: 3 per KV dtype */
    check_attention(item(root, "attention"), 6);
    assert_null(cJSON_GetObjectItemCaseSensitive(root, "quk"));
    cJSON_Delete(root);
}

/* --m 1,1,1 measures M = 1 once (the GEMM section has one row per layer);
 * the note about cached weights appears exactly when an M = 1 row is above
 * 100% of the read bandwidth (tiny layers usually are: whether it shows
 * depends on the machine, its consistency with the JSON does not). */
static void test_m_duplicates_and_cache_note(void **state) {
    (void)state;
    const char *d = pg_test_tmpdir();
    char cfg[4200], json[4200], args[9000];
    snprintf(cfg, sizeof cfg, "%s/config.json", d);
    snprintf(json, sizeof json, "%s/out.json", d);
    const char *text = "{\"architectures\": [\"LlamaForCausalLM\"], \"hidden_size\": 64, "
                       "\"intermediate_size\": 96, \"num_hidden_layers\": 1, "
                       "\"num_attention_heads\": 4, \"num_key_value_heads\": 2, "
                       "\"vocab_size\": 200, \"rms_norm_eps\": 1e-5}";
    pg_test_write_file(cfg, text, strlen(text));
    snprintf(args, sizeof args,
             "'%s' --kernels gemm --quick --rounds 1 --threads 1 --m 1,1,1 --output-json '%s'", d,
             json);
    char *out;
    int rc = run(args, &out);
    if (rc != 0) fail_msg("exit %d:\n%s", rc, out);
    const char *first = strstr(out, "  M=1\n");
    assert_non_null(first);
    assert_null(strstr(first + 1, "  M=1\n"));
    bool noted = strstr(out, "weights partly cached: ratios above 100% of DRAM bandwidth") != NULL;
    cJSON *root = load_json(json);
    const int64_t want[4][2] = {{128, 64}, {64, 64}, {96, 64}, {64, 96}};
    const cJSON *gemm = item(root, "gemm");
    check_gemm(gemm, 1, 4, want);
    bool above = false;
    const cJSON *r;
    cJSON_ArrayForEach(r, item(gemm, "results")) above |= num(r, "pct_read_bw") > 100.0;
    if (noted != above) fail_msg("note %d but a row above 100%%: %d\n%s", noted, above, out);
    assert_true(cJSON_IsTrue(item(gemm, "weights_partly_cached")) == above);
    free(out);
    cJSON_Delete(root);
}

/* --kernels quk alone: W8 and W4 microkernels, per channel, g32, g32 with
 * per-(row, group) activation scales, g128. */
static void test_quk(void **state) {
    (void)state;
    char json[4200], args[9000];
    snprintf(json, sizeof json, "%s/quk.json", pg_test_tmpdir());
    snprintf(args, sizeof args, "--kernels quk --quick --rounds 1 --threads 1 --output-json '%s'",
             json);
    char *out;
    int rc = run(args, &out);
    if (rc != 0) fail_msg("exit %d:\n%s", rc, out);
    assert_non_null(strstr(out, "quantized microkernels alone"));
    free(out);
    cJSON *root = load_json(json);
    assert_null(cJSON_GetObjectItemCaseSensitive(root, "qgemm"));
    const cJSON *res = item(item(root, "quk"), "results");
    assert_int_equal(cJSON_GetArraySize(res), 8);
    const int want_group[4] = {0, 32, 32, 128};
    for (int i = 0; i < 8; i++) {
        const cJSON *e = cJSON_GetArrayItem(res, i);
        assert_int_equal((int)num(e, "bits"), i < 4 ? 8 : 4);
        assert_int_equal((int)num(e, "group"), want_group[i % 4]);
        assert_true(cJSON_IsTrue(item(e, "act_group")) == (i % 4 == 2));
        assert_true(cJSON_IsString(item(e, "variant")));
        positive(e, "mr");
        positive(e, "nr");
        positive(e, "gops_per_cpu_s");
        if (cJSON_GetObjectItemCaseSensitive(e, "pct_peak_cpu")) positive(e, "pct_peak_cpu");
    }
    cJSON_Delete(root);
}

/* Usage errors and bad models: one line naming the problem, exit 2. */
static void test_errors(void **state) {
    (void)state;
    const char *d = pg_test_tmpdir();
    char bad_cfg[4200], args[9000];
    snprintf(bad_cfg, sizeof bad_cfg, "%s/config.json", d);
    const char *text = "{\"architectures\": [\"LlamaForCausalLM\"], \"hidden_size\": 64, "
                       "\"intermediate_size\": 96, \"num_hidden_layers\": 2, "
                       "\"num_attention_heads\": 4, \"num_key_value_heads\": 3, "
                       "\"vocab_size\": 200}";
    pg_test_write_file(bad_cfg, text, strlen(text));
    static const struct {
        const char *args, *want;
    } CASES[] = {
        {"--bogus", "pagoda bench kernels: unknown option '--bogus'"},
        {"--m 0", "bad value '0' for --m"},
        {"--m 1,,2", "bad value '1,,2' for --m"},
        {"--m 1,2,3,4,5,6,7,8,9", "bad value '1,2,3,4,5,6,7,8,9' for --m"},
        {"--kernels gemm,foo", "bad value 'gemm,foo' for --kernels"},
        {"--quantization w2a8", "bad value 'w2a8' for --quantization"},
        {"--quant-group-size 48", "bad value '48' for --quant-group-size"},
        {"--block-size 24", "bad value '24' for --block-size"},
        {"--rounds 16", "bad value '16' for --rounds"},
        {"--context", "--context needs a value"},
        {"--act-group", "pagoda bench kernels: activation scales per group need a group size"},
        {"a b", "unexpected argument 'b'"},
        {"--kv-cache-dtype float16", "bad value 'float16' for --kv-cache-dtype"},
    };
    char *out;
    for (size_t i = 0; i < sizeof CASES / sizeof CASES[0]; i++) {
        int rc = run(CASES[i].args, &out);
        if (rc != 2 || !strstr(out, CASES[i].want))
            fail_msg("'%s': exit %d, output:\n%s\n(want exit 2 and '%s')", CASES[i].args, rc, out,
                     CASES[i].want);
        free(out);
    }
    /* a model or output file that cannot be used: runtime errors, exit 1 */
    static const struct {
        const char *args, *want;
    } RUNTIME[] = {
        {"/nonexistent/model", "/nonexistent/model"},
        {"--output-json /nonexistent/dir/x.json",
         "cannot write /nonexistent/dir/x.json: No such file or directory"},
    };
    for (size_t i = 0; i < sizeof RUNTIME / sizeof RUNTIME[0]; i++) {
        int rc = run(RUNTIME[i].args, &out);
        if (rc != 1 || !strstr(out, RUNTIME[i].want))
            fail_msg("'%s': exit %d, output:\n%s\n(want exit 1 and '%s')", RUNTIME[i].args, rc,
                     out, RUNTIME[i].want);
        free(out);
    }
    /* a shape whose GEMMs cannot fit in memory (gate+up alone 2^38 bytes
     * in BF16): refused before anything is allocated, naming the estimate
     * and the available memory */
    char huge[4200];
    snprintf(huge, sizeof huge, "%s/huge.json", d);
    text = "{\"architectures\": [\"LlamaForCausalLM\"], \"hidden_size\": 65536, "
           "\"intermediate_size\": 1048576, \"num_hidden_layers\": 1, "
           "\"num_attention_heads\": 512, \"num_key_value_heads\": 128, \"head_dim\": 128, "
           "\"vocab_size\": 200}";
    pg_test_write_file(huge, text, strlen(text));
    snprintf(args, sizeof args, "'%s' --kernels gemm --rounds 1", huge);
    int rc = run(args, &out);
    if (rc != 1 || !strstr(out, "pagoda bench kernels: ") || !strstr(out, "needs about ") ||
        !strstr(out, "GiB of memory is available"))
        fail_msg("huge shape: exit %d, output:\n%s\n(want exit 1 and the estimate)", rc, out);
    free(out);
    /* heads not a multiple of kv heads: the config parser's message */
    snprintf(args, sizeof args, "'%s'", d);
    rc = run(args, &out);
    assert_int_equal(rc, 1);
    assert_non_null(strstr(out, "config.json"));
    free(out);
    /* --help: exit 0, lists the options */
    rc = run("--help", &out);
    assert_int_equal(rc, 0);
    assert_non_null(strstr(out, "--output-json FILE"));
    free(out);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gguf_all_sections),
        cmocka_unit_test(test_qgemm_mxfp4),
        cmocka_unit_test(test_config_json_selected),
        cmocka_unit_test(test_m_duplicates_and_cache_note),
        cmocka_unit_test(test_quk),
        cmocka_unit_test(test_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
