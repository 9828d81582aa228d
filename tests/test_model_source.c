/* pg_model_source over the real stories260K assets (GGUF F32/Q8_0/Q4_0 and
 * HF F32/BF16 safetensors), the HF cache resolution, and configs that
 * contradict the weights. */
#include "model_run.h"
#include "testutil.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "model/gguf.h"
#include "model/hf_config.h"
#include "model/source.h"

static void check_stories_config(const pg_model_config *c, bool gguf) {
    assert_string_equal(c->architecture, "LlamaForCausalLM");
    assert_int_equal(c->vocab_size, 512);
    assert_int_equal(c->hidden_size, 64);
    assert_int_equal(c->intermediate_size, 172);
    assert_int_equal(c->num_hidden_layers, 5);
    assert_int_equal(c->num_attention_heads, 8);
    assert_int_equal(c->num_key_value_heads, 4);
    assert_int_equal(c->head_dim, 8);
    assert_true(fabsf(c->rms_norm_eps - 1e-5f) < 1e-9f);
    assert_true(c->rope_theta == 10000.0f);
    assert_int_equal(c->rope_interleaved, gguf);
    assert_int_equal(c->rope_scaling, PG_ROPE_SCALING_NONE);
    assert_int_equal(c->bos_token_id, 1);
    assert_int_equal(c->eos_token_ids[0], 2);
    assert_int_equal(c->eos_token_ids[1], -1);
    assert_false(c->attention_bias);
    assert_int_equal(c->sliding_window, 0);
}

static void test_hf_f32(void **state) {
    (void)state;
    pg_model_source *src;
    assert_int_equal(pg_model_source_open(pg_test_asset("llm/stories260K-hf"), &src), PAGODA_OK);
    const pg_model_config *c = pg_model_source_config(src);
    check_stories_config(c, false);
    assert_true(c->tie_word_embeddings);
    assert_int_equal(c->max_position_embeddings, 512);
    assert_int_equal(c->torch_dtype, PG_F32);
    assert_false(pg_model_source_is_gguf(src));
    assert_null(pg_model_source_gguf(src));
    assert_int_equal(pg_model_source_n_tensors(src), 47);
    const pg_tensor *t = pg_model_source_tensor(src, "model.layers.4.mlp.down_proj.weight");
    assert_non_null(t);
    assert_int_equal(t->ndim, 2);
    assert_int_equal(t->shape[0], 64);
    assert_int_equal(t->shape[1], 172);
    assert_int_equal(t->nbytes, 64 * 172 * 4);
    assert_null(pg_model_source_tensor(src, "lm_head.weight"));
    assert_null(pg_model_source_chat_template(src));
    const pg_generation_defaults *g = pg_model_source_generation(src);
    assert_true(isnan(g->temperature));
    assert_int_equal(g->top_k, -1);
    pg_model_source_free(src);
}

static void test_hf_bf16_matches_f32(void **state) {
    (void)state;
    pg_model_source *a, *b;
    assert_int_equal(pg_model_source_open(pg_test_asset("llm/stories260K-hf"), &a), PAGODA_OK);
    assert_int_equal(pg_model_source_open(pg_test_asset("llm/stories260K-hf-bf16"), &b), PAGODA_OK);
    check_stories_config(pg_model_source_config(b), false);
    assert_int_equal(pg_model_source_config(b)->torch_dtype, PG_BF16);
    for (size_t i = 0; i < pg_model_source_n_tensors(a); i++) {
        const pg_tensor *x = pg_model_source_tensor_at(a, i);
        const pg_tensor *y = pg_model_source_tensor(b, x->name);
        assert_non_null(y);
        assert_int_equal(y->dtype, PG_BF16);
        assert_int_equal(x->shape[0], y->shape[0]);
        size_t n = x->nbytes / 4;
        const float *xf = x->data;
        const uint16_t *yb = y->data;
        for (size_t k = 0; k < n; k++) {
            float v;
            memcpy(&v, &xf[k], 4);
            uint16_t h;
            memcpy(&h, &yb[k], 2);
            assert_true(fabsf(pg_bf16_to_f32(h) - v) <= fabsf(v) * 0.0079f + 1e-30f);
        }
    }
    pg_model_source_free(a);
    pg_model_source_free(b);
}

/* GGUF Q/K rows are permuted: HF row h*hd + j*hd/2 + i == GGUF row h*hd + 2i + j. */
static void cross_check(const char *gguf_rel, float tol) {
    pg_model_source *hf, *gg;
    assert_int_equal(pg_model_source_open(pg_test_asset("llm/stories260K-hf"), &hf), PAGODA_OK);
    assert_int_equal(pg_model_source_open(pg_test_asset(gguf_rel), &gg), PAGODA_OK);
    const pg_model_config *c = pg_model_source_config(gg);
    check_stories_config(c, true);
    assert_true(pg_model_source_is_gguf(gg));
    assert_non_null(pg_model_source_gguf(gg));
    assert_int_equal(c->max_position_embeddings, 2048);
    int hd = c->head_dim;
    float a[512], b[512];
    for (size_t i = 0; i < pg_model_source_n_tensors(hf); i++) {
        const pg_tensor *x = pg_model_source_tensor_at(hf, i);
        const pg_tensor *y = pg_model_source_tensor(gg, x->name);
        if (!y) fail_msg("%s: missing %s", gguf_rel, x->name);
        assert_int_equal(x->ndim, y->ndim);
        assert_int_equal(x->shape[0], y->shape[0]);
        if (x->ndim == 1) {
            assert_int_equal(y->dtype, PG_F32);
            assert_memory_equal(x->data, y->data, x->nbytes);
            continue;
        }
        assert_int_equal(x->shape[1], y->shape[1]);
        bool perm = strstr(x->name, "q_proj") || strstr(x->name, "k_proj");
        for (int64_t r = 0; r < x->shape[0]; r++) {
            int64_t gr = r;
            if (perm) {
                int64_t h = r / hd, w = r % hd, j = w / (hd / 2), ii = w % (hd / 2);
                gr = h * hd + 2 * ii + j;
            }
            pg_test_tensor_row(x, r, a);
            pg_test_tensor_row(y, gr, b);
            float amax = 0;
            for (int64_t k = 0; k < x->shape[1]; k++)
                amax = fmaxf(amax, fabsf(a[k]));
            for (int64_t k = 0; k < x->shape[1]; k++)
                if (fabsf(a[k] - b[k]) > tol * amax + 1e-6f)
                    fail_msg("%s: %s row %lld col %lld: %g vs %g", gguf_rel, x->name, (long long)r,
                             (long long)k, a[k], b[k]);
        }
    }
    /* stories260K.gguf keeps an explicit output.weight equal to the embeddings */
    const pg_tensor *lm = pg_model_source_tensor(gg, "lm_head.weight");
    assert_non_null(lm);
    assert_false(c->tie_word_embeddings);
    pg_model_source_free(hf);
    pg_model_source_free(gg);
}

static void test_gguf_f32_vs_hf(void **state) {
    (void)state;
    cross_check("llm/llama2c/stories260K.gguf", 0.0f);
    pg_model_source *gg;
    assert_int_equal(pg_model_source_open(pg_test_asset("llm/llama2c/stories260K.gguf"), &gg),
                     PAGODA_OK);
    assert_int_equal(pg_model_source_config(gg)->torch_dtype, PG_F32);
    pg_model_source_free(gg);
}
static void test_gguf_q8_0_vs_hf(void **state) {
    (void)state;
    cross_check("llm/llama2c/stories260K-q8_0.gguf", 1.0f / 127 * 0.51f + 1e-3f);
    pg_model_source *gg;
    assert_int_equal(pg_model_source_open(pg_test_asset("llm/llama2c/stories260K-q8_0.gguf"), &gg),
                     PAGODA_OK);
    assert_int_equal(pg_model_source_config(gg)->torch_dtype, PG_Q8_0);
    assert_int_equal(pg_model_source_tensor(gg, "model.layers.0.self_attn.q_proj.weight")->dtype,
                     PG_Q8_0);
    pg_model_source_free(gg);
}
static void test_gguf_q4_0_vs_hf(void **state) {
    (void)state;
    cross_check("llm/llama2c/stories260K-q4_0.gguf",
                1.0f / 8 * 1.01f); /* +7 clamp: up to one step */
}

/* ---- HF cache */

static void copy_file(const char *from, const char *to) {
    size_t n;
    char *d = pg_test_read_file(from, &n);
    pg_test_write_file(to, d, n);
    free(d);
}

static void test_hf_cache(void **state) {
    (void)state;
    char root[4096], snap[4200], p[4400];
    snprintf(root, sizeof root, "%s", pg_test_tmpdir());
    snprintf(snap, sizeof snap, "%s/hub/models--tiny--stories/snapshots/abc123", root);
    pg_test_mkdirs(snap);
    static const char *const files[] = {"config.json", "generation_config.json",
                                        "model.safetensors", "tokenizer_config.json"};
    for (int i = 0; i < 4; i++) {
        char from[4200];
        snprintf(from, sizeof from, "%s", pg_test_asset("llm/stories260K-hf"));
        snprintf(from + strlen(from), sizeof from - strlen(from), "/%s", files[i]);
        snprintf(p, sizeof p, "%s/%s", snap, files[i]);
        copy_file(from, p);
    }
    /* a decoy snapshot that refs/main does not name */
    snprintf(p, sizeof p, "%s/hub/models--tiny--stories/snapshots/zzz", root);
    pg_test_mkdirs(p);
    snprintf(p, sizeof p, "%s/hub/models--tiny--stories/refs", root);
    pg_test_mkdirs(p);
    snprintf(p, sizeof p, "%s/hub/models--tiny--stories/refs/main", root);
    pg_test_write_file(p, "abc123\n", 7);

    char *old_home = getenv("HF_HOME") ? strdup(getenv("HF_HOME")) : NULL;
    char *old_hub = getenv("HF_HUB_CACHE") ? strdup(getenv("HF_HUB_CACHE")) : NULL;
    unsetenv("HF_HUB_CACHE");
    unsetenv("XDG_CACHE_HOME");
    setenv("HF_HUB_OFFLINE", "1", 1); /* the cache only: no hub is reachable here */
    setenv("HF_HOME", root, 1);
    char out[4096];
    bool is_gguf = true;
    assert_int_equal(pg_model_resolve("tiny/stories", out, sizeof out, &is_gguf), PAGODA_OK);
    assert_string_equal(out, snap);
    assert_false(is_gguf);
    pg_model_source *src;
    assert_int_equal(pg_model_source_open("tiny/stories", &src), PAGODA_OK);
    assert_string_equal(pg_model_source_path(src), snap);
    assert_int_equal(pg_model_source_config(src)->num_hidden_layers, 5);
    pg_model_source_free(src);

    /* HF_HUB_CACHE wins over HF_HOME */
    snprintf(p, sizeof p, "%s/hub", root);
    setenv("HF_HUB_CACHE", p, 1);
    setenv("HF_HOME", "/nonexistent", 1);
    assert_int_equal(pg_model_resolve("tiny/stories", out, sizeof out, &is_gguf), PAGODA_OK);
    assert_string_equal(out, snap);
    assert_int_equal(pg_model_source_open("tiny/nothere", &src), PAGODA_ERR_NOT_FOUND);
    assert_non_null(strstr(pg_last_error(), "tiny/nothere"));
    assert_int_equal(pg_model_source_open("/no/such/dir", &src), PAGODA_ERR_NOT_FOUND);

    /* neither set: ~/.cache/huggingface/hub */
    char *old_user_home = getenv("HOME") ? strdup(getenv("HOME")) : NULL;
    char home[4096], link[4400], target[4400];
    snprintf(home, sizeof home, "%s", pg_test_tmpdir());
    snprintf(link, sizeof link, "%s/.cache/huggingface", home);
    pg_test_mkdirs(link);
    snprintf(link, sizeof link, "%s/.cache/huggingface/hub", home);
    snprintf(target, sizeof target, "%s/hub", root);
    assert_int_equal(symlink(target, link), 0);
    unsetenv("HF_HUB_CACHE");
    unsetenv("HF_HOME");
    setenv("HOME", home, 1);
    assert_int_equal(pg_model_resolve("tiny/stories", out, sizeof out, &is_gguf), PAGODA_OK);
    assert_non_null(strstr(out, "/.cache/huggingface/hub/models--tiny--stories/snapshots/abc123"));
    if (old_user_home) setenv("HOME", old_user_home, 1);
    free(old_user_home);

    if (old_home)
        setenv("HF_HOME", old_home, 1);
    else
        unsetenv("HF_HOME");
    if (old_hub)
        setenv("HF_HUB_CACHE", old_hub, 1);
    else
        unsetenv("HF_HUB_CACHE");
    free(old_home);
    free(old_hub);
    unsetenv("HF_HUB_OFFLINE");
}

/* ---- configs */

static void test_config_llama3_and_mistral(void **state) {
    (void)state;
    const char *j =
        "{\"architectures\":[\"LlamaForCausalLM\"],\"vocab_size\":128256,\"hidden_size\":2048,"
        "\"intermediate_size\":8192,\"num_hidden_layers\":16,\"num_attention_heads\":32,"
        "\"num_key_value_heads\":8,\"head_dim\":64,\"max_position_embeddings\":131072,"
        "\"rms_norm_eps\":1e-05,\"rope_theta\":500000.0,\"tie_word_embeddings\":true,"
        "\"rope_scaling\":{\"factor\":32.0,\"high_freq_factor\":4.0,\"low_freq_factor\":1.0,"
        "\"original_max_position_embeddings\":8192,\"rope_type\":\"llama3\"},"
        "\"bos_token_id\":128000,\"eos_token_id\":[128001,128008,128009],\"torch_dtype\":"
        "\"bfloat16\"}";
    pg_model_config c;
    assert_int_equal(pg_hf_config_parse(j, strlen(j), "config.json", &c), PAGODA_OK);
    assert_int_equal(c.rope_scaling, PG_ROPE_SCALING_LLAMA3);
    assert_true(c.rope_factor == 32.0f);
    assert_true(c.rope_low_freq_factor == 1.0f);
    assert_true(c.rope_high_freq_factor == 4.0f);
    assert_int_equal(c.rope_original_max_position, 8192);
    assert_true(c.rope_theta == 500000.0f);
    assert_int_equal(c.eos_token_ids[0], 128001);
    assert_int_equal(c.eos_token_ids[2], 128009);
    assert_int_equal(c.eos_token_ids[3], -1);
    assert_int_equal(c.torch_dtype, PG_BF16);
    assert_int_equal(c.head_dim, 64);
    assert_true(c.tie_word_embeddings);

    const char *gj =
        "{\"temperature\":0.6,\"top_p\":0.9,\"top_k\":40,\"eos_token_id\":[128001,128009,7]}";
    pg_generation_defaults g;
    assert_int_equal(pg_hf_generation_parse(gj, strlen(gj), "generation_config.json", &g, &c),
                     PAGODA_OK);
    assert_true(fabsf(g.temperature - 0.6f) < 1e-6f);
    assert_int_equal(g.top_k, 40);
    assert_true(isnan(g.min_p));
    assert_int_equal(g.max_new_tokens, -1);
    assert_int_equal(c.eos_token_ids[3], 7);

    const char *m =
        "{\"architectures\":[\"MistralForCausalLM\"],\"vocab_size\":32000,\"hidden_size\":4096,"
        "\"intermediate_size\":14336,\"num_hidden_layers\":32,\"num_attention_heads\":32,"
        "\"num_key_value_heads\":8,\"sliding_window\":null,\"rope_scaling\":null,"
        "\"rope_theta\":1000000.0,\"type_vocab\":1,\"eos_token_id\":2}";
    assert_int_equal(pg_hf_config_parse(m, strlen(m), "config.json", &c), PAGODA_OK);
    assert_string_equal(c.architecture, "MistralForCausalLM");
    assert_int_equal(c.sliding_window, 0);
    assert_int_equal(c.head_dim, 128);
    assert_false(c.tie_word_embeddings);
    assert_int_equal(c.rope_scaling, PG_ROPE_SCALING_NONE);
    const char *m2 =
        "{\"model_type\":\"mistral\",\"vocab_size\":32000,\"hidden_size\":4096,"
        "\"intermediate_size\":14336,\"num_hidden_layers\":32,\"num_attention_heads\":32,"
        "\"sliding_window\":4096,\"rope_scaling\":{\"type\":\"linear\",\"factor\":2}}";
    assert_int_equal(pg_hf_config_parse(m2, strlen(m2), "config.json", &c), PAGODA_OK);
    assert_int_equal(c.sliding_window, 4096);
    assert_int_equal(c.num_key_value_heads, 32);
    assert_int_equal(c.rope_scaling, PG_ROPE_SCALING_LINEAR);
    assert_true(c.rope_factor == 2.0f);
    /* transformers 5 style */
    const char *m3 =
        "{\"model_type\":\"llama\",\"vocab_size\":32000,\"hidden_size\":4096,"
        "\"intermediate_size\":14336,\"num_hidden_layers\":32,\"num_attention_heads\":32,"
        "\"rope_parameters\":{\"rope_type\":\"default\",\"rope_theta\":250000.0}}";
    assert_int_equal(pg_hf_config_parse(m3, strlen(m3), "config.json", &c), PAGODA_OK);
    assert_true(c.rope_theta == 250000.0f);
    assert_int_equal(c.rope_scaling, PG_ROPE_SCALING_NONE);
}

static void expect_cfg_fail(const char *json, pagoda_status want, const char *substr) {
    pg_model_config c;
    pagoda_status s = pg_hf_config_parse(json, strlen(json), "x/config.json", &c);
    if (s != want || !strstr(pg_last_error(), substr) || !strstr(pg_last_error(), "x/config.json"))
        fail_msg("want %d '%s', got %d: %s", want, substr, s, pg_last_error());
}

static void test_config_errors(void **state) {
    (void)state;
    expect_cfg_fail("{", PAGODA_ERR_FORMAT, "not a valid JSON object");
    expect_cfg_fail("{\"architectures\":[\"Gemma3ForCausalLM\"]}", PAGODA_ERR_UNSUPPORTED,
                    "Gemma3ForCausalLM");
    expect_cfg_fail("{\"model_type\":\"llama\",\"vocab_size\":10}", PAGODA_ERR_FORMAT,
                    "missing 'hidden_size'");
    expect_cfg_fail("{\"model_type\":\"llama\",\"vocab_size\":10,\"hidden_size\":\"64\"}",
                    PAGODA_ERR_FORMAT, "'hidden_size' must be an integer");
    expect_cfg_fail(
        "{\"model_type\":\"llama\",\"vocab_size\":10,\"hidden_size\":64,\"intermediate_size\":8,"
        "\"num_hidden_layers\":1,\"num_attention_heads\":8,\"num_key_value_heads\":3}",
        PAGODA_ERR_FORMAT, "not a multiple of num_key_value_heads 3");
    expect_cfg_fail(
        "{\"model_type\":\"llama\",\"vocab_size\":10,\"hidden_size\":64,\"intermediate_size\":8,"
        "\"num_hidden_layers\":1,\"num_attention_heads\":8,\"rope_scaling\":{\"rope_type\":"
        "\"dynamic\",\"factor\":2}}",
        PAGODA_ERR_UNSUPPORTED, "rope_scaling type 'dynamic'");
    expect_cfg_fail(
        "{\"model_type\":\"llama\",\"vocab_size\":10,\"hidden_size\":64,\"intermediate_size\":8,"
        "\"num_hidden_layers\":1,\"num_attention_heads\":8,\"rope_scaling\":{\"rope_type\":"
        "\"llama3\",\"factor\":2}}",
        PAGODA_ERR_FORMAT, "missing 'low_freq_factor'");
    /* a context of one token was a scheduler usage error naming no key */
    expect_cfg_fail(
        "{\"model_type\":\"llama\",\"vocab_size\":10,\"hidden_size\":64,\"intermediate_size\":8,"
        "\"num_hidden_layers\":1,\"num_attention_heads\":8,\"max_position_embeddings\":1}",
        PAGODA_ERR_FORMAT, "'max_position_embeddings' must be an integer in [2, ");
    /* a yarn beta <= 0 was replaced by its default, silently */
    expect_cfg_fail(
        "{\"model_type\":\"llama\",\"vocab_size\":10,\"hidden_size\":64,\"intermediate_size\":8,"
        "\"num_hidden_layers\":1,\"num_attention_heads\":8,\"rope_scaling\":{\"rope_type\":"
        "\"yarn\",\"factor\":2,\"beta_fast\":-1}}",
        PAGODA_ERR_FORMAT, "beta_fast -1 and beta_slow 1 must be > 0");
    expect_cfg_fail(
        "{\"model_type\":\"llama\",\"vocab_size\":10,\"hidden_size\":64,\"intermediate_size\":8,"
        "\"num_hidden_layers\":1,\"num_attention_heads\":8,\"rope_scaling\":{\"rope_type\":"
        "\"yarn\",\"factor\":2,\"beta_slow\":0}}",
        PAGODA_ERR_FORMAT, "beta_fast 32 and beta_slow 0 must be > 0");
    expect_cfg_fail(
        "{\"model_type\":\"llama\",\"vocab_size\":10,\"hidden_size\":64,\"intermediate_size\":8,"
        "\"num_hidden_layers\":1,\"num_attention_heads\":8,\"eos_token_id\":\"x\"}",
        PAGODA_ERR_FORMAT, "eos_token_id");
}

static void test_chat_template(void **state) {
    (void)state;
    char *t;
    const char *a = "{\"chat_template\":\"{{ messages }}\"}";
    assert_int_equal(pg_hf_chat_template_parse(a, strlen(a), "tc.json", &t), PAGODA_OK);
    assert_string_equal(t, "{{ messages }}");
    free(t);
    const char *b = "{\"chat_template\":[{\"name\":\"tool_use\",\"template\":\"T\"},"
                    "{\"name\":\"default\",\"template\":\"D\"}]}";
    assert_int_equal(pg_hf_chat_template_parse(b, strlen(b), "tc.json", &t), PAGODA_OK);
    assert_string_equal(t, "D");
    free(t);
    const char *c = "{\"bos_token\":\"<s>\"}";
    assert_int_equal(pg_hf_chat_template_parse(c, strlen(c), "tc.json", &t), PAGODA_OK);
    assert_null(t);
    const char *d = "{\"chat_template\":5}";
    assert_int_equal(pg_hf_chat_template_parse(d, strlen(d), "tc.json", &t), PAGODA_ERR_FORMAT);
}

/* ---- a copy of stories260K-hf with an edited config must be refused */

static char g_dir[4096];
static void make_hf_copy(const char *config_json) {
    snprintf(g_dir, sizeof g_dir, "%s", pg_test_tmpdir());
    char from[4200], to[4200];
    snprintf(from, sizeof from, "%s/model.safetensors", pg_test_asset("llm/stories260K-hf"));
    snprintf(to, sizeof to, "%s/model.safetensors", g_dir);
    copy_file(from, to);
    snprintf(to, sizeof to, "%s/config.json", g_dir);
    pg_test_write_file(to, config_json, strlen(config_json));
}

static void expect_open_fail(const char *cfg, pagoda_status want, const char *substr) {
    make_hf_copy(cfg);
    pg_model_source *src = (pg_model_source *)1;
    pagoda_status s = pg_model_source_open(g_dir, &src);
    if (s != want || !strstr(pg_last_error(), substr))
        fail_msg("want %d '%s', got %d: %s", want, substr, s, pg_last_error());
    assert_null(src);
    assert_non_null(strstr(pg_last_error(), g_dir));
}

#define STORIES_CFG(vocab, layers, heads, kv, tie)                                                 \
    "{\"architectures\":[\"LlamaForCausalLM\"],\"vocab_size\":" #vocab ",\"hidden_size\":64,"      \
    "\"intermediate_size\":172,\"num_hidden_layers\":" #layers ",\"num_attention_heads\":" #heads  \
    ",\"num_key_value_heads\":" #kv ",\"head_dim\":8,\"tie_word_embeddings\":" #tie "}"

static void test_config_contradicts_weights(void **state) {
    (void)state;
    make_hf_copy(STORIES_CFG(512, 5, 8, 4, true));
    pg_model_source *src;
    assert_int_equal(pg_model_source_open(g_dir, &src), PAGODA_OK);
    pg_model_source_free(src);
    expect_open_fail(
        STORIES_CFG(600, 5, 8, 4, true), PAGODA_ERR_FORMAT,
        "'model.embed_tokens.weight' has shape [512, 64] but the config implies [600, 64]");
    expect_open_fail(STORIES_CFG(512, 6, 8, 4, true), PAGODA_ERR_FORMAT,
                     "missing tensor 'model.layers.5.input_layernorm.weight'");
    expect_open_fail(STORIES_CFG(512, 4, 8, 4, true), PAGODA_ERR_FORMAT,
                     "beyond num_hidden_layers 4");
    expect_open_fail(STORIES_CFG(512, 5, 16, 4, true), PAGODA_ERR_FORMAT,
                     "q_proj.weight' has shape [64, 64] but the config implies [128, 64]");
    expect_open_fail(STORIES_CFG(512, 5, 8, 8, true), PAGODA_ERR_FORMAT,
                     "k_proj.weight' has shape [32, 64]");
    expect_open_fail(STORIES_CFG(512, 5, 8, 4, false), PAGODA_ERR_FORMAT,
                     "missing tensor 'lm_head.weight'");
    /* no weights at all */
    snprintf(g_dir, sizeof g_dir, "%s", pg_test_tmpdir());
    char p[4200];
    snprintf(p, sizeof p, "%s/config.json", g_dir);
    pg_test_write_file(p, STORIES_CFG(512, 5, 8, 4, true), strlen(STORIES_CFG(512, 5, 8, 4, true)));
    assert_int_equal(pg_model_source_open(g_dir, &src), PAGODA_ERR_NOT_FOUND);
    assert_non_null(strstr(pg_last_error(), "no model.safetensors"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hf_f32),
        cmocka_unit_test(test_hf_bf16_matches_f32),
        cmocka_unit_test(test_gguf_f32_vs_hf),
        cmocka_unit_test(test_gguf_q8_0_vs_hf),
        cmocka_unit_test(test_gguf_q4_0_vs_hf),
        cmocka_unit_test(test_hf_cache),
        cmocka_unit_test(test_config_llama3_and_mistral),
        cmocka_unit_test(test_config_errors),
        cmocka_unit_test(test_chat_template),
        cmocka_unit_test(test_config_contradicts_weights),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
