/* `pagoda generate` end to end: runs the built binary on stories260K and
 * compares its stdout with llama2.c's run.c output (plain mode) and its
 * reference token ids (--json); usage and runtime errors give clear messages
 * and the documented exit codes. The binary is found through
 * PAGODA_BUILD_DIR and started through PAGODA_EXEC_WRAPPER (qemu in the
 * aarch64 cross build). */
#include "testutil.h"

#include "model/safetensors.h"

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

static char pagoda_bin[4096];

static int setup(void **state) {
    (void)state;
    const char *dir = getenv("PAGODA_BUILD_DIR");
    snprintf(pagoda_bin, sizeof pagoda_bin, "%s/pagoda", dir && *dir ? dir : ".");
    return 0;
}

/* Run `pagoda generate <args>` (stderr merged into stdout when merge_err);
 * returns the exit code and a malloc'ed copy of the output. */
static int run(const char *args, bool merge_err, char **out) {
    char cmd[8192];
    snprintf(cmd, sizeof cmd, "%s '%s' generate %s%s", pg_test_exec_wrapper(), pagoda_bin, args,
             merge_err ? " 2>&1" : " 2>/dev/null");
    FILE *p = popen(cmd, "r");
    if (!p) fail_msg("popen failed");
    size_t cap = 1 << 16, len = 0;
    char *buf = malloc(cap);
    size_t n;
    while ((n = fread(buf + len, 1, cap - len - 1, p)) > 0) {
        len += n;
        if (cap - len < 1024) buf = realloc(buf, cap *= 2);
    }
    buf[len] = 0;
    int status = pclose(p);
    *out = buf;
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

/* Fail early with a clear message when the binary cannot be started. */
static void require_runnable(void) {
    char cmd[4400];
    snprintf(cmd, sizeof cmd, "%s '%s' --version >/dev/null 2>&1", pg_test_exec_wrapper(),
             pagoda_bin);
    if (system(cmd) != 0) fail_msg("cannot run %s", pagoda_bin);
}

static const char *model_arg(const char *rel) {
    static char buf[4200];
    snprintf(buf, sizeof buf, "'%s'", pg_test_asset(rel));
    return buf;
}

static void test_plain_greedy_matches_run_c_stdout(void **state) {
    (void)state;
    require_runnable();
    const char *models[] = {"llm/stories260K-hf", "llm/llama2c/stories260K.gguf"};
    for (int i = 0; i < 2; i++) {
        char args[9000], *out;
        /* run.c -n 64 counts the 4 forced prompt steps: 60 new tokens */
        snprintf(args, sizeof args,
                 "%s --prompt 'Once upon a time' --temperature 0 --max-tokens 60",
                 model_arg(models[i]));
        assert_int_equal(run(args, false, &out), 0);
        char *want =
            pg_test_read_file(pg_test_asset("llm/llama2c/expected/"
                                            "stories260K_greedy_prompt_once_upon_a_time_n64.txt"),
                              NULL);
        assert_string_equal(out, want);
        free(out);
        free(want);
        /* BOS only, 256 steps: `--prompt ''` is a usage error (as an empty
         * prompt is for the server), so the BOS goes in as a token-id prompt */
        char path[4200];
        snprintf(path, sizeof path, "%s/bos.jsonl", pg_test_tmpdir());
        const char *line = "{\"prompt_token_ids\": [1], \"temperature\": 0, \"max_tokens\": 256}\n";
        pg_test_write_file(path, line, strlen(line));
        snprintf(args, sizeof args, "%s --prompts-file '%s'", model_arg(models[i]), path);
        assert_int_equal(run(args, false, &out), 0);
        want = pg_test_read_file(pg_test_asset("llm/llama2c/expected/stories260K_greedy_n256.txt"),
                                 NULL);
        cJSON *j = cJSON_Parse(out);
        if (!j) fail_msg("not JSON: %s", out);
        size_t tl = strlen(cJSON_GetObjectItem(j, "text")->valuestring);
        assert_int_equal(tl + 1, strlen(want)); /* plain mode ended the text with a newline */
        assert_memory_equal(cJSON_GetObjectItem(j, "text")->valuestring, want, tl);
        cJSON_Delete(j);
        free(out);
        free(want);
    }
}

static void test_json_greedy_ids_and_text(void **state) {
    (void)state;
    require_runnable();
    char args[4400], *out;
    snprintf(args, sizeof args,
             "%s --prompt 'Once upon a time' --temperature 0 --max-tokens 60 --json",
             model_arg("llm/stories260K-hf"));
    assert_int_equal(run(args, false, &out), 0);
    cJSON *j = cJSON_Parse(out);
    if (!j) fail_msg("not JSON: %s", out);
    char *ref = pg_test_read_file(
        pg_test_asset("llm/llama2c/expected/"
                      "stories260K_greedy_prompt_once_upon_a_time_n64.tokens.txt"),
        NULL);
    /* PROMPT_TOKENS: 1 403 407 261 378 ; GEN: 4 forced prompt ids, then 60 */
    cJSON *pids = cJSON_GetObjectItem(j, "prompt_token_ids");
    cJSON *gids = cJSON_GetObjectItem(j, "token_ids");
    assert_int_equal(cJSON_GetArraySize(pids), 5);
    assert_int_equal(cJSON_GetArraySize(gids), 60);
    const char *p = strstr(ref, "PROMPT_TOKENS:") + 14;
    for (int i = 0; i < 5; i++)
        assert_int_equal(cJSON_GetArrayItem(pids, i)->valueint, strtol(p, (char **)&p, 10));
    p = strstr(ref, "GEN:") + 4;
    for (int i = 0; i < 4; i++)
        strtol(p, (char **)&p, 10);
    for (int i = 0; i < 60; i++)
        assert_int_equal(cJSON_GetArrayItem(gids, i)->valueint, strtol(p, (char **)&p, 10));
    assert_string_equal(cJSON_GetObjectItem(j, "finish_reason")->valuestring, "length");
    /* text: the completion only (run.c's stdout minus the prompt and its final
     * newline) */
    char *want =
        pg_test_read_file(pg_test_asset("llm/llama2c/expected/"
                                        "stories260K_greedy_prompt_once_upon_a_time_n64.txt"),
                          NULL);
    want[strlen(want) - 1] = 0;
    assert_string_equal(cJSON_GetObjectItem(j, "text")->valuestring,
                        want + strlen("Once upon a time"));
    free(want);
    free(ref);
    cJSON_Delete(j);
    free(out);
}

/* --speculative-config (vLLM's): the greedy ids and text are those without
 * it (here the llama2.c reference's 60 tokens, which repeat themselves, so
 * n-gram drafts are accepted), with the n-gram proposer and a draft model. */
static void test_speculative_config_keeps_greedy_output(void **state) {
    (void)state;
    require_runnable();
    char args[4400], *plain, *spec;
    snprintf(args, sizeof args,
             "%s --prompt 'Once upon a time' --temperature 0 --max-tokens 60 --json",
             model_arg("llm/stories260K-hf"));
    assert_int_equal(run(args, false, &plain), 0);
    snprintf(args, sizeof args,
             "%s --prompt 'Once upon a time' --temperature 0 --max-tokens 60 --json "
             "--speculative-config '{\"method\": \"ngram\", \"num_speculative_tokens\": 4, "
             "\"prompt_lookup_max\": 4, \"prompt_lookup_min\": 2}'",
             model_arg("llm/stories260K-hf"));
    assert_int_equal(run(args, true, &spec), 0);
    assert_non_null(strstr(spec, "speculative decoding: ngram, 4 tokens"));
    char *json = strstr(spec, "{\"prompt_token_ids\"");
    assert_non_null(json);
    json[strcspn(json, "\n")] = 0; /* stderr's SpecDecoding line comes after */
    plain[strcspn(plain, "\n")] = 0;
    assert_string_equal(json, plain);
    assert_non_null(
        strstr(json + strlen(json) + 1, "SpecDecoding metrics: Mean acceptance length"));
    free(spec);
    /* a draft model (the target itself: every draft accepted) */
    snprintf(args, sizeof args,
             "%s --prompt 'Once upon a time' --temperature 0 --max-tokens 60 --json "
             "--speculative-config '{\"method\": \"draft_model\", \"model\": \"%s\", "
             "\"num_speculative_tokens\": 3}'",
             model_arg("llm/stories260K-hf"), pg_test_asset("llm/stories260K-hf"));
    assert_int_equal(run(args, true, &spec), 0);
    assert_non_null(strstr(spec, "speculative decoding: draft model"));
    json = strstr(spec, "{\"prompt_token_ids\"");
    assert_non_null(json);
    json[strcspn(json, "\n")] = 0;
    assert_string_equal(json, plain);
    assert_non_null(strstr(json + strlen(json) + 1, "Avg Draft acceptance rate: 100.0%"));
    free(plain);
    free(spec);
}

/* Issue #3: the BF16 checkpoint with --dtype float32 gives exactly the 256
 * greedy ids of its reference (numpy, f32 math on the BF16 weights); the
 * default (auto) rounds GEMM inputs to BF16 and agrees for the first 70
 * (then a near tie; tests/test_engine.c checks the tie). */
static void test_dtype_float32_matches_bf16_reference(void **state) {
    (void)state;
    require_runnable();
    char *ref = pg_test_read_file(
        pg_test_asset("llm/stories260K-hf-bf16/expected_bf16_greedy_n256.tokens.txt"), NULL);
    assert_non_null(strstr(ref, "PROMPT_TOKENS: 1\n")); /* BOS only: a token-id prompt */
    char path[4200];
    snprintf(path, sizeof path, "%s/dtype_bos.jsonl", pg_test_tmpdir());
    const char *line = "{\"prompt_token_ids\": [1], \"temperature\": 0, \"max_tokens\": 256}\n";
    pg_test_write_file(path, line, strlen(line));
    const char *dtypes[] = {"float32", "auto"};
    const int exact[] = {256, 70};
    for (int d = 0; d < 2; d++) {
        char args[8800], *out;
        snprintf(args, sizeof args, "%s --prompts-file '%s' --dtype %s",
                 model_arg("llm/stories260K-hf-bf16"), path, dtypes[d]);
        assert_int_equal(run(args, false, &out), 0);
        cJSON *j = cJSON_Parse(out);
        if (!j) fail_msg("not JSON: %s", out);
        cJSON *gids = cJSON_GetObjectItem(j, "token_ids");
        assert_int_equal(cJSON_GetArraySize(gids), 256);
        const char *p = strstr(ref, "GEN:") + 4;
        for (int i = 0; i < exact[d]; i++) {
            long want = strtol(p, (char **)&p, 10);
            if (cJSON_GetArrayItem(gids, i)->valueint != want)
                fail_msg("--dtype %s: token %d is %d, reference %ld", dtypes[d], i,
                         cJSON_GetArrayItem(gids, i)->valueint, want);
        }
        cJSON_Delete(j);
        free(out);
    }
    free(ref);
}

static void test_seeded_sampling_is_reproducible(void **state) {
    (void)state;
    require_runnable();
    char args[4400], *a, *b, *c;
    snprintf(args, sizeof args,
             "%s --prompt 'Once upon a time' --temperature 1 --top-p 0.9 --seed "
             "42 --max-tokens 40 --json",
             model_arg("llm/stories260K-hf"));
    assert_int_equal(run(args, false, &a), 0);
    assert_int_equal(run(args, false, &b), 0);
    assert_string_equal(a, b);
    snprintf(args, sizeof args,
             "%s --prompt 'Once upon a time' --temperature 1 --top-p 0.9 --seed "
             "43 --max-tokens 40 --json",
             model_arg("llm/stories260K-hf"));
    assert_int_equal(run(args, false, &c), 0);
    assert_string_not_equal(a, c); /* 40 sampled tokens: a different seed differs */
    free(a);
    free(b);
    free(c);
}

static void test_usage_errors_exit_2(void **state) {
    (void)state;
    require_runnable();
    char *out;
    assert_int_equal(run(model_arg("llm/stories260K-hf"), true, &out), 2);
    assert_non_null(strstr(out, "--prompt"));
    free(out);
    char args[4400];
    snprintf(args, sizeof args, "%s --prompt hi --temperature -1", model_arg("llm/stories260K-hf"));
    assert_int_equal(run(args, true, &out), 2);
    assert_non_null(strstr(out, "--temperature"));
    free(out);
    snprintf(args, sizeof args, "%s --prompt hi --frobnicate 3", model_arg("llm/stories260K-hf"));
    assert_int_equal(run(args, true, &out), 2);
    assert_non_null(strstr(out, "--frobnicate"));
    free(out);
    snprintf(args, sizeof args, "%s --prompt hi --top-p 0", model_arg("llm/stories260K-hf"));
    assert_int_equal(run(args, true, &out), 2);
    assert_non_null(strstr(out, "top_p"));
    free(out);
    /* engine options */
    const char *bad_engine[] = {"--kv-cache-dtype fp8",
                                "--block-size 20",
                                "--kv-cache-memory 4XB",
                                "--max-num-seqs 0",
                                "--dtype fp8",
                                "--dtype",
                                "--speculative-config '{\"method\": \"eagle\"}'"};
    for (size_t i = 0; i < sizeof bad_engine / sizeof bad_engine[0]; i++) {
        snprintf(args, sizeof args, "%s --prompt hi %s", model_arg("llm/stories260K-hf"),
                 bad_engine[i]);
        assert_int_equal(run(args, true, &out), 2);
        char flag[32];
        snprintf(flag, sizeof flag, "%.*s", (int)strcspn(bad_engine[i], " "), bad_engine[i]);
        assert_non_null(strstr(out, flag));
        free(out);
    }
    /* a budget below max_num_seqs is a usage error with both numbers */
    snprintf(args, sizeof args, "%s --prompt hi --max-num-batched-tokens 4 --max-num-seqs 8",
             model_arg("llm/stories260K-hf"));
    assert_int_equal(run(args, true, &out), 2);
    assert_non_null(strstr(out, "max_num_batched_tokens 4"));
    free(out);
}

/* --prompt - reads the prompt from standard input: the same greedy text as
 * the prompt given on the command line. */
static void test_prompt_from_stdin(void **state) {
    (void)state;
    require_runnable();
    char args[9000], *a, *b;
    snprintf(args, sizeof args, "%s --prompt 'Once upon a time' --temperature 0 --max-tokens 20",
             model_arg("llm/stories260K-hf"));
    assert_int_equal(run(args, false, &a), 0);
    char in[4200];
    snprintf(in, sizeof in, "%s/prompt.txt", pg_test_tmpdir());
    pg_test_write_file(in, "Once upon a time", 16);
    snprintf(args, sizeof args, "%s --prompt - --temperature 0 --max-tokens 20 <'%s'",
             model_arg("llm/stories260K-hf"), in);
    assert_int_equal(run(args, false, &b), 0);
    assert_string_equal(a, b);
    free(a);
    free(b);
}

static void test_runtime_errors_exit_1(void **state) {
    (void)state;
    require_runnable();
    char *out;
    assert_int_equal(run("/nonexistent/model --prompt hi", true, &out), 1);
    assert_non_null(strstr(out, "/nonexistent/model"));
    free(out);
    /* a prompt longer than the 512-token context */
    size_t cap = 40000;
    char *args = malloc(cap);
    int off = snprintf(args, cap, "%s --prompt '", model_arg("llm/stories260K-hf"));
    for (int i = 0; i < 300; i++)
        off += snprintf(args + off, cap - (size_t)off, "Once upon a time ");
    snprintf(args + off, cap - (size_t)off, "'");
    assert_int_equal(run(args, true, &out), 1);
    assert_non_null(strstr(out, "context"));
    free(out);
    /* --max-model-len: 5 prompt tokens leave no room in 5; in 20 they leave 15 */
    snprintf(args, cap, "%s --prompt 'Once upon a time' --max-model-len 5",
             model_arg("llm/stories260K-hf"));
    assert_int_equal(run(args, true, &out), 1);
    assert_non_null(strstr(out, "context is 5 tokens"));
    free(out);
    snprintf(args, cap, "%s --prompt 'Once upon a time' --max-model-len 20 --json",
             model_arg("llm/stories260K-hf"));
    assert_int_equal(run(args, false, &out), 0);
    cJSON *j = cJSON_Parse(out);
    assert_non_null(j);
    assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItem(j, "token_ids")), 15);
    assert_string_equal(cJSON_GetObjectItem(j, "finish_reason")->valuestring, "length");
    cJSON_Delete(j);
    free(out);
    free(args);
}

/* A 1-layer model over the stories260K vocab whose greedy choice is always
 * EOS (id 2): every projection is zero, the embedding rows are constant and
 * only lm_head row 2 is non-zero. */
static const char *write_eos_model(void) {
    static char dir[4096];
    snprintf(dir, sizeof dir, "%s", pg_test_tmpdir());
    char path[4200];
    const char *config = "{\"architectures\": [\"LlamaForCausalLM\"], "
                         "\"vocab_size\": 512, \"hidden_size\": 32, "
                         "\"intermediate_size\": 32, \"num_hidden_layers\": 1, "
                         "\"num_attention_heads\": 2, "
                         "\"num_key_value_heads\": 1, \"head_dim\": 16, "
                         "\"max_position_embeddings\": 64, "
                         "\"rms_norm_eps\": 1e-5, \"rope_theta\": 10000.0, "
                         "\"tie_word_embeddings\": false, "
                         "\"bos_token_id\": 1, \"eos_token_id\": 2}";
    snprintf(path, sizeof path, "%s/config.json", dir);
    pg_test_write_file(path, config, strlen(config));
    const char *copies[] = {"tokenizer.json", "tokenizer_config.json"};
    for (int i = 0; i < 2; i++) {
        size_t len;
        char src[4200];
        snprintf(src, sizeof src, "llm/stories260K-hf/%s", copies[i]);
        char *text = pg_test_read_file(pg_test_asset(src), &len);
        snprintf(path, sizeof path, "%s/%s", dir, copies[i]);
        pg_test_write_file(path, text, len);
        free(text);
    }
    struct {
        const char *name;
        int64_t d0, d1;
        float value; /* every element, except lm_head */
    } ts[] = {
        {"model.embed_tokens.weight", 512, 32, 0.5f},
        {"model.layers.0.input_layernorm.weight", 32, 0, 1.0f},
        {"model.layers.0.self_attn.q_proj.weight", 32, 32, 0.0f},
        {"model.layers.0.self_attn.k_proj.weight", 16, 32, 0.0f},
        {"model.layers.0.self_attn.v_proj.weight", 16, 32, 0.0f},
        {"model.layers.0.self_attn.o_proj.weight", 32, 32, 0.0f},
        {"model.layers.0.post_attention_layernorm.weight", 32, 0, 1.0f},
        {"model.layers.0.mlp.gate_proj.weight", 32, 32, 0.0f},
        {"model.layers.0.mlp.up_proj.weight", 32, 32, 0.0f},
        {"model.layers.0.mlp.down_proj.weight", 32, 32, 0.0f},
        {"model.norm.weight", 32, 0, 1.0f},
        {"lm_head.weight", 512, 32, 0.0f},
    };
    size_t nt = sizeof ts / sizeof ts[0];
    pg_safetensors_writer *w;
    assert_int_equal(pg_safetensors_writer_create(&w), PAGODA_OK);
    for (size_t i = 0; i < nt; i++) {
        int64_t shape[2] = {ts[i].d0, ts[i].d1};
        assert_int_equal(pg_safetensors_writer_add(w, ts[i].name, PG_F32, ts[i].d1 ? 2 : 1, shape),
                         PAGODA_OK);
    }
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    assert_int_equal(pg_safetensors_writer_begin(w, path), PAGODA_OK);
    for (size_t i = 0; i < nt; i++) {
        size_t n = (size_t)ts[i].d0 * (size_t)(ts[i].d1 ? ts[i].d1 : 1);
        float *v = malloc(n * sizeof(float));
        for (size_t k = 0; k < n; k++)
            v[k] = ts[i].value;
        if (!strcmp(ts[i].name, "lm_head.weight"))
            for (int k = 0; k < 32; k++)
                v[2 * 32 + k] = 1.0f;
        assert_int_equal(pg_safetensors_writer_write(w, v, n * sizeof(float)), PAGODA_OK);
        free(v);
    }
    assert_int_equal(pg_safetensors_writer_finish(w), PAGODA_OK);
    pg_safetensors_writer_free(w);
    return dir;
}

static void test_stops_at_eos_unless_ignored(void **state) {
    (void)state;
    require_runnable();
    const char *dir = write_eos_model();
    char args[4400], *out;
    snprintf(args, sizeof args, "'%s' --prompt hi --temperature 0 --json", dir);
    assert_int_equal(run(args, false, &out), 0);
    cJSON *j = cJSON_Parse(out);
    if (!j) fail_msg("not JSON: %s", out);
    cJSON *ids = cJSON_GetObjectItem(j, "token_ids");
    assert_int_equal(cJSON_GetArraySize(ids), 1);
    assert_int_equal(cJSON_GetArrayItem(ids, 0)->valueint, 2);
    assert_string_equal(cJSON_GetObjectItem(j, "finish_reason")->valuestring, "stop");
    assert_string_equal(cJSON_GetObjectItem(j, "text")->valuestring, "");
    cJSON_Delete(j);
    free(out);

    snprintf(args, sizeof args,
             "'%s' --prompt hi --temperature 0 --ignore-eos --max-tokens 3 --json", dir);
    assert_int_equal(run(args, false, &out), 0);
    j = cJSON_Parse(out);
    if (!j) fail_msg("not JSON: %s", out);
    ids = cJSON_GetObjectItem(j, "token_ids");
    assert_int_equal(cJSON_GetArraySize(ids), 3);
    for (int i = 0; i < 3; i++)
        assert_int_equal(cJSON_GetArrayItem(ids, i)->valueint, 2);
    assert_string_equal(cJSON_GetObjectItem(j, "finish_reason")->valuestring, "length");
    cJSON_Delete(j);
    free(out);

    /* plain mode: the prompt echoed, nothing generated, a newline */
    snprintf(args, sizeof args, "'%s' --prompt hi --temperature 0", dir);
    assert_int_equal(run(args, false, &out), 0);
    assert_string_equal(out, "hi\n");
    free(out);
}

/* `pagoda <cmd> <args>` (stdout only); exit code and malloc'ed output. */
static int run_cmd(const char *args, char **out) {
    char cmd[16384];
    snprintf(cmd, sizeof cmd, "%s '%s' %s 2>/dev/null", pg_test_exec_wrapper(), pagoda_bin, args);
    FILE *p = popen(cmd, "r");
    if (!p) fail_msg("popen failed");
    size_t cap = 1 << 16, len = 0, n;
    char *buf = malloc(cap);
    while ((n = fread(buf + len, 1, cap - len - 1, p)) > 0) {
        len += n;
        if (cap - len < 1024) buf = realloc(buf, cap *= 2);
    }
    buf[len] = 0;
    int status = pclose(p);
    *out = buf;
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

/* A request that fails while running (here: a model whose final norm is NaN,
 * so every logit is NaN and the sampler refuses) is an error object in the
 * --prompts-file output and exit code 1, as with --prompt. */
static void test_prompts_file_runtime_failure_exits_1(void **state) {
    (void)state;
    require_runnable();
    char dir[4200], cmd[9000], *out = NULL;
    snprintf(dir, sizeof dir, "%s/nan-model", pg_test_tmpdir());
    snprintf(cmd, sizeof cmd, "cp -r '%s' '%s' && chmod -R u+w '%s'",
             pg_test_asset("llm/stories260K-hf"), dir, dir);
    assert_int_equal(pg_test_run_command(cmd, &out), 0);
    free(out);
    char st[4300];
    snprintf(st, sizeof st, "%s/model.safetensors", dir);
    size_t len;
    char *bytes = pg_test_read_file(st, &len);
    uint64_t hl;
    memcpy(&hl, bytes, 8);
    cJSON *h = cJSON_ParseWithLength(bytes + 8, (size_t)hl);
    const cJSON *t = cJSON_GetObjectItem(h, "model.norm.weight");
    assert_non_null(t);
    size_t a = (size_t)cJSON_GetArrayItem(cJSON_GetObjectItem(t, "data_offsets"), 0)->valuedouble;
    const float nan = NAN;
    for (int i = 0; i < 4; i++)
        memcpy(bytes + 8 + hl + a + 4 * (size_t)i, &nan, 4);
    cJSON_Delete(h);
    pg_test_write_file(st, bytes, len);
    free(bytes);
    char path[4300], args[9000], *res;
    snprintf(path, sizeof path, "%s/p.jsonl", pg_test_tmpdir());
    const char *lines = "{\"prompt\": \"Once upon a time\", \"max_tokens\": 4}\n";
    pg_test_write_file(path, lines, strlen(lines));
    snprintf(args, sizeof args, "'%s' --prompts-file '%s'", dir, path);
    assert_int_equal(run(args, false, &res), 1);
    assert_non_null(strstr(res, "\"error\""));
    free(res);
}

/* --prompts-file: requests run together; each line's JSON equals the single
 * --json run of the same request; a bad line gives an error object and exit 1. */
static void test_prompts_file(void **state) {
    (void)state;
    require_runnable();
    char path[4200], args[9000], *single, *multi;
    snprintf(path, sizeof path, "%s/prompts.jsonl", pg_test_tmpdir());
    const char *lines =
        "{\"prompt\": \"Once upon a time\", \"temperature\": 0, \"max_tokens\": 8}\n"
        "{\"prompt_token_ids\": [1, 403, 407, 261, 378], \"temperature\": 0, \"max_tokens\": 20,"
        " \"stop\": \"girl\"}\n"
        "\n"
        "{\"prompt\": 5}\n";
    pg_test_write_file(path, lines, strlen(lines));
    snprintf(args, sizeof args,
             "%s --prompt 'Once upon a time' --temperature 0 --max-tokens 8 --json",
             model_arg("llm/stories260K-hf"));
    assert_int_equal(run(args, false, &single), 0);
    snprintf(args, sizeof args, "%s --prompts-file '%s' --json", model_arg("llm/stories260K-hf"),
             path);
    assert_int_equal(run(args, false, &multi), 1);
    char *second = strchr(multi, '\n');
    assert_non_null(second);
    second++;
    assert_memory_equal(multi, single, strlen(single));
    /* every engine option at once: same greedy output (F32 cache, small chunks) */
    char *opts;
    snprintf(args, sizeof args,
             "%s --prompt 'Once upon a time' --temperature 0 --max-tokens 8 --json --block-size 32 "
             "--no-prefix-caching --max-num-seqs 2 --max-num-batched-tokens 3 --threads 1 "
             "--kv-cache-memory 1MiB --kv-cache-dtype float32 --max-model-len 64",
             model_arg("llm/stories260K-hf"));
    assert_int_equal(run(args, false, &opts), 0);
    assert_string_equal(opts, single);
    free(opts);
    cJSON *j = cJSON_Parse(second);
    assert_non_null(j);
    assert_string_equal(cJSON_GetObjectItem(j, "text")->valuestring, ", there was a little ");
    assert_string_equal(cJSON_GetObjectItem(j, "finish_reason")->valuestring, "stop");
    cJSON_Delete(j);
    char *third = strchr(second, '\n');
    assert_non_null(third);
    assert_non_null(strstr(third, "\"error\""));
    free(single);
    free(multi);
}

/* --prompts-file lines the server would reject (empty prompt, empty stop
 * string) and malformed fields: an error naming the file and line, an
 * error object in that line's place, the good lines still run, exit 1. */
static void test_prompts_file_bad_lines(void **state) {
    (void)state;
    require_runnable();
    char path[4200], args[9000], *out;
    snprintf(path, sizeof path, "%s/bad.jsonl", pg_test_tmpdir());
    const char *lines = "{\"prompt\": \"\"}\n"
                        "{\"prompt\": \"hi\", \"stop\": \"\"}\n"
                        "{\"prompt\": \"hi\", \"stop\": [\"a\", \"\"]}\n"
                        "{\"prompt_token_ids\": []}\n"
                        "{\"prompt\": \"hi\", \"max_tokens\": 1.5}\n"
                        "{\"prompt\": \"hi\", \"stop_token_ids\": [\"x\"]}\n"
                        "{\"prompt\": \"Once\", \"max_tokens\": 2, \"temperature\": 0}\n";
    pg_test_write_file(path, lines, strlen(lines));
    snprintf(args, sizeof args, "%s --prompts-file '%s'", model_arg("llm/stories260K-hf"), path);
    assert_int_equal(run(args, true, &out), 1);
    static const char *const want[] = {
        ":1: \"prompt\" is empty",
        ":2: \"stop\" is an empty string",
        ":3: \"stop\"[1] is an empty string",
        ":4: \"prompt_token_ids\" is empty",
        ":5: \"max_tokens\" must be an integer",
        ":6: \"stop_token_ids\"[0] is not a token id",
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        char needle[4400];
        snprintf(needle, sizeof needle, "pagoda generate: %s%s", path, want[i]);
        if (!strstr(out, needle)) fail_msg("missing '%s' in:\n%s", needle, out);
    }
    /* the JSON lines (stdout): six error objects, then the good line's result */
    int n_json = 0;
    for (char *line = out, *nl; (nl = strchr(line, '\n')); line = nl + 1) {
        *nl = 0;
        if (line[0] != '{') continue; /* stderr: errors and log lines */
        cJSON *j = cJSON_Parse(line);
        if (!j) fail_msg("not JSON: %s", line);
        assert_true((n_json < 6) == (cJSON_GetObjectItem(j, "error") != NULL));
        if (n_json == 6)
            assert_string_equal(cJSON_GetObjectItem(j, "finish_reason")->valuestring, "length");
        cJSON_Delete(j);
        n_json++;
    }
    assert_int_equal(n_json, 7);
    free(out);
}

/* bench throughput / latency: exit 0 and vLLM's JSON keys with the right counts. */
static void test_bench_throughput_and_latency(void **state) {
    (void)state;
    require_runnable();
    char path[4200], args[9000], *out;
    snprintf(path, sizeof path, "%s/tp.json", pg_test_tmpdir());
    snprintf(args, sizeof args,
             "bench throughput %s --num-prompts 4 --input-len 8 --output-len 4 --output-json '%s'",
             model_arg("llm/stories260K-hf"), path);
    assert_int_equal(run_cmd(args, &out), 0);
    assert_non_null(strstr(out, "requests/s"));
    free(out);
    char *text = pg_test_read_file(path, NULL);
    cJSON *j = cJSON_Parse(text);
    assert_non_null(j);
    assert_int_equal(cJSON_GetObjectItem(j, "num_requests")->valueint, 4);
    assert_int_equal(cJSON_GetObjectItem(j, "total_num_tokens")->valueint, 48);
    assert_true(cJSON_GetObjectItem(j, "requests_per_second")->valuedouble > 0);
    assert_true(cJSON_GetObjectItem(j, "tokens_per_second")->valuedouble > 0);
    assert_true(cJSON_GetObjectItem(j, "elapsed_time")->valuedouble > 0);
    cJSON_Delete(j);
    free(text);
    snprintf(args, sizeof args,
             "bench latency %s --batch-size 2 --input-len 40 --output-len 4 --num-iters-warmup 1 "
             "--num-iters 3 --output-json '%s'",
             model_arg("llm/stories260K-hf"), path);
    assert_int_equal(run_cmd(args, &out), 0);
    assert_non_null(strstr(out, "Avg latency"));
    free(out);
    text = pg_test_read_file(path, NULL);
    j = cJSON_Parse(text);
    assert_non_null(j);
    assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItem(j, "latencies")), 3);
    assert_non_null(cJSON_GetObjectItem(cJSON_GetObjectItem(j, "percentiles"), "99"));
    assert_true(cJSON_GetObjectItem(j, "avg_latency")->valuedouble > 0);
    /* every iteration prefills its own prompts (40 tokens: two full KV
     * blocks the prefix cache would serve if a prompt repeated) */
    assert_non_null(cJSON_GetObjectItem(j, "prefix_cache_hit_tokens"));
    assert_int_equal(cJSON_GetObjectItem(j, "prefix_cache_hit_tokens")->valueint, 0);
    cJSON_Delete(j);
    free(text);
    snprintf(args, sizeof args, "bench throughput %s --num-prompts 0",
             model_arg("llm/stories260K-hf"));
    assert_int_equal(run_cmd(args, &out), 2);
    free(out);
    /* --bandwidth-bound is latency-only and needs decode steps */
    snprintf(args, sizeof args, "bench throughput %s --bandwidth-bound",
             model_arg("llm/stories260K-hf"));
    assert_int_equal(run_cmd(args, &out), 2);
    free(out);
    snprintf(args, sizeof args, "bench latency %s --bandwidth-bound --output-len 1",
             model_arg("llm/stories260K-hf"));
    assert_int_equal(run_cmd(args, &out), 2); /* the message goes to stderr */
    free(out);
}

/* `pagoda bench latency stories260K --bandwidth-bound OPTS` exits 0 and
 * says so; its parsed --output-json (the caller deletes it). */
static cJSON *bandwidth_bound_json(const char *opts) {
    char path[4200], args[9000], *out;
    snprintf(path, sizeof path, "%s/bw.json", pg_test_tmpdir());
    snprintf(args, sizeof args, "bench latency %s --bandwidth-bound --output-json '%s' %s",
             model_arg("llm/stories260K-hf"), path, opts);
    assert_int_equal(run_cmd(args, &out), 0);
    assert_non_null(strstr(out, "of the bandwidth bound"));
    free(out);
    char *text = pg_test_read_file(path, NULL);
    cJSON *j = cJSON_Parse(text);
    free(text);
    assert_non_null(j);
    assert_non_null(cJSON_GetObjectItem(j, "bandwidth_bound"));
    return j;
}

/* Weight bytes per step of stories260K (dim 64, 5 layers, 8/4 heads, ffn
 * 172, vocab 512: 259,328 linear weights) under --bandwidth-bound. */
static double bandwidth_bound_bytes(const char *extra) {
    char opts[1024];
    snprintf(opts, sizeof opts,
             "--batch-size 1 --input-len 4 --output-len 6 --num-iters-warmup 0 --num-iters 2 %s",
             extra);
    cJSON *j = bandwidth_bound_json(opts);
    cJSON *b = cJSON_GetObjectItem(j, "bandwidth_bound");
    double bytes = cJSON_GetObjectItem(b, "weight_bytes_per_step")->valuedouble;
    const char *keys[] = {"decode_steps_per_second", "weight_stream_gbs", "read_bandwidth_gbs",
                          "fraction_of_bound"};
    for (int i = 0; i < 4; i++) {
        double v = cJSON_GetObjectItem(b, keys[i])->valuedouble;
        assert_true(isfinite(v) && v > 0);
    }
    /* every decode step (2 iterations x 5) with the read bandwidth probed
     * right after it; the reported fraction lies within the steps' own
     * ratios (bytes / bandwidth over the step's time) */
    cJSON *steps = cJSON_GetObjectItem(b, "steps");
    assert_true(cJSON_IsArray(steps));
    assert_int_equal(cJSON_GetArraySize(steps), 10);
    assert_true(cJSON_GetObjectItem(b, "decode_steps")->valuedouble == 10);
    double lo = INFINITY, hi = 0;
    for (int i = 0; i < 10; i++) {
        cJSON *pr = cJSON_GetArrayItem(steps, i);
        assert_int_equal(cJSON_GetArraySize(pr), 2);
        double dt = cJSON_GetArrayItem(pr, 0)->valuedouble;
        double gbs = cJSON_GetArrayItem(pr, 1)->valuedouble;
        assert_true(isfinite(dt) && dt > 0 && isfinite(gbs) && gbs > 0);
        double r = bytes / (gbs * 1e9) / dt;
        lo = r < lo ? r : lo;
        hi = r > hi ? r : hi;
    }
    double f = cJSON_GetObjectItem(b, "fraction_of_bound")->valuedouble;
    assert_true(f >= lo * 0.999 && f <= hi * 1.001);
    cJSON_Delete(j);
    return bytes;
}

/* A KV cache too small for the batch preempts requests; their recompute
 * steps are decode steps too: every one keeps its (seconds, GB/s) pair. */
static void test_bench_latency_bandwidth_bound_preempted(void **state) {
    (void)state;
    require_runnable();
    cJSON *j = bandwidth_bound_json("--kv-cache-memory 512KiB --batch-size 8 --input-len 100 "
                                    "--output-len 40 --num-iters-warmup 0 --num-iters 2");
    cJSON *b = cJSON_GetObjectItem(j, "bandwidth_bound");
    const double n = cJSON_GetObjectItem(b, "decode_steps")->valuedouble;
    assert_true(n > 2 * 39); /* more than the requests' own decode steps */
    assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItem(b, "steps")), (int)n);
    cJSON_Delete(j);
}

static void test_bench_latency_bandwidth_bound(void **state) {
    (void)state;
    require_runnable();
    const double params = 259328;
    double f32 = bandwidth_bound_bytes("--dtype float32");
    /* packed F32 panels: every weight once (panels may pad N), norms */
    assert_true(f32 >= params * 4 && f32 < params * 4 * 1.5);
    double bf16 = bandwidth_bound_bytes("--dtype bfloat16");
    assert_true(bf16 >= params * 2 && bf16 < params * 2 * 1.5);
    double w8 = bandwidth_bound_bytes("--quantization w8a8");
    assert_true(w8 >= params && w8 < params * 1.5);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_plain_greedy_matches_run_c_stdout),
        cmocka_unit_test(test_json_greedy_ids_and_text),
        cmocka_unit_test(test_dtype_float32_matches_bf16_reference),
        cmocka_unit_test(test_seeded_sampling_is_reproducible),
        cmocka_unit_test(test_stops_at_eos_unless_ignored),
        cmocka_unit_test(test_usage_errors_exit_2),
        cmocka_unit_test(test_speculative_config_keeps_greedy_output),
        cmocka_unit_test(test_prompt_from_stdin),
        cmocka_unit_test(test_runtime_errors_exit_1),
        cmocka_unit_test(test_prompts_file),
        cmocka_unit_test(test_prompts_file_runtime_failure_exits_1),
        cmocka_unit_test(test_prompts_file_bad_lines),
        cmocka_unit_test(test_bench_throughput_and_latency),
        cmocka_unit_test(test_bench_latency_bandwidth_bound_preempted),
        cmocka_unit_test(test_bench_latency_bandwidth_bound),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}
