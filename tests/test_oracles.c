/* Architectures against their oracles (../shared/assets/oracles/<name>/:
 * README.md there): tiny random-weight models as a Hugging Face directory
 * (BF16 safetensors) and a GGUF (F32, llama.cpp's converter), with
 * llama.cpp's logits for every position of a 36-token prompt and its 32
 * greedy ids (expected.json: F32 KV cache).
 *
 * With F32 compute (BF16 weights widened exactly) and an F32 KV cache the
 * logits must be within 1e-4 of llama.cpp's at every position (the oracle
 * README's float64 check agrees to 6.5e-6) and the greedy ids equal, from
 * both forms. The default path (BF16 GEMM, BF16 KV cache) is pinned by its
 * measured drift and greedy agreement. Then loading checks on the oracle's
 * files (foreign tensors, activation, tied head, padded vocabulary). */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model_run.h"
#include "testutil.h"

#include "gen/gen_model.h"
#include "model/arch.h"
#include "model/gguf.h"
#include "model/hf_config.h"
#include "model/safetensors.h"
#include "model/source.h"
#include "pagoda.h"

typedef struct oracle {
    int32_t n_prompt, n_greedy, vocab;
    int32_t prompt[64], greedy[64];
    float *logits; /* [n_prompt][vocab] */
} oracle;

/* An oracle's expected*.json at `path`. */
static void load_oracle_path(const char *path, oracle *o) {
    size_t len;
    char *text = pg_test_read_file(path, &len);
    cJSON *root = cJSON_ParseWithLength(text, len);
    assert_non_null(root);
    const cJSON *ids = cJSON_GetObjectItem(root, "token_ids");
    const cJSON *greedy = cJSON_GetObjectItem(root, "greedy_continuation");
    const cJSON *logits = cJSON_GetObjectItem(root, "logits");
    const cJSON *nv = cJSON_GetObjectItem(root, "n_vocab"); /* absent: the rows' length */
    o->vocab = nv ? nv->valueint : cJSON_GetArraySize(cJSON_GetArrayItem(logits, 0));
    o->n_prompt = cJSON_GetArraySize(ids);
    o->n_greedy = cJSON_GetArraySize(greedy);
    assert_true(o->n_prompt <= 64 && o->n_greedy <= 64);
    assert_int_equal(cJSON_GetArraySize(logits), o->n_prompt);
    for (int32_t i = 0; i < o->n_prompt; i++)
        o->prompt[i] = cJSON_GetArrayItem(ids, i)->valueint;
    for (int32_t i = 0; i < o->n_greedy; i++)
        o->greedy[i] = cJSON_GetArrayItem(greedy, i)->valueint;
    o->logits = malloc((size_t)o->n_prompt * (size_t)o->vocab * sizeof(float));
    assert_non_null(o->logits);
    for (int32_t t = 0; t < o->n_prompt; t++) {
        const cJSON *row = cJSON_GetArrayItem(logits, t);
        assert_int_equal(cJSON_GetArraySize(row), o->vocab);
        for (int32_t v = 0; v < o->vocab; v++)
            o->logits[(size_t)t * o->vocab + v] = (float)cJSON_GetArrayItem(row, v)->valuedouble;
    }
    cJSON_Delete(root);
    free(text);
}

static void load_oracle(const char *dir, const char *file, oracle *o) {
    char rel[256];
    snprintf(rel, sizeof rel, "oracles/%s/%s", dir, file);
    load_oracle_path(pg_test_asset(rel), o);
}

static int32_t argmax(const float *x, int32_t n) {
    int32_t best = 0;
    for (int32_t i = 1; i < n; i++)
        if (x[i] > x[best]) best = i;
    return best;
}

typedef struct run_result {
    double max_diff;  /* max |logit - oracle| over every position */
    double mean_diff; /* mean |logit - oracle| over the same logits */
    int32_t n_greedy; /* leading greedy ids equal to the oracle's */
    /* teacher-forced over the oracle's greedy ids (fed whatever we pick):
     * per step, how far the oracle's id is below our top logit */
    float deficit[64];
} run_result;

/* Teacher-forced steps whose oracle id is within `tie` of our top logit. */
static int32_t tf_within(const run_result *r, const oracle *o, double tie) {
    int32_t n = 0;
    for (int32_t i = 0; i < o->n_greedy; i++)
        n += r->deficit[i] <= tie;
    return n;
}

static double tf_max_deficit(const run_result *r, const oracle *o) {
    double m = 0;
    for (int32_t i = 0; i < o->n_greedy; i++)
        m = r->deficit[i] > m ? r->deficit[i] : m;
    return m;
}

/* Prefill logits of every prompt position, then greedy decoding one token
 * per step, through the batched forward. */
static run_result run_path(const char *path, pg_dtype compute, pg_dtype kv_dtype, const char *arch,
                           const oracle *o) {
    pg_model_options opt;
    pg_model_options_default(&opt);
    opt.compute = compute;
    pg_model_source *src;
    pg_model *m = pg_test_load(path, &opt, &src);
    assert_string_equal(pg_model_arch_name(m), arch);
    const int32_t V = pg_model_get_config(m)->vocab_size;
    assert_int_equal(V, o->vocab);
    run_result r = {0};
    size_t n_diff = 0;
    float *all = malloc((size_t)o->n_prompt * V * sizeof(float)), *last = malloc(V * sizeof(float));
    assert_true(all && last);
    if (kv_dtype == PG_F32) {
        pg_test_prefill_logits(m, o->prompt, o->n_prompt, all);
        for (size_t i = 0; i < (size_t)o->n_prompt * V; i++) {
            double d = fabs((double)all[i] - (double)o->logits[i]);
            if (d > r.max_diff) r.max_diff = d;
            r.mean_diff += d, n_diff++;
        }
    }
    pg_test_seq *s = pg_test_seq_create(m, o->n_prompt + o->n_greedy, 16, kv_dtype);
    assert_int_equal(pg_test_seq_forward(s, o->prompt, o->n_prompt, last), PAGODA_OK);
    if (kv_dtype != PG_F32) { /* last prompt row only */
        for (int32_t v = 0; v < V; v++) {
            double d = fabs((double)last[v] - (double)o->logits[(size_t)(o->n_prompt - 1) * V + v]);
            if (d > r.max_diff) r.max_diff = d;
            r.mean_diff += d, n_diff++;
        }
    }
    r.mean_diff /= (double)n_diff;
    /* teacher-forced: a near tie our rounding breaks the other way shows as
     * a small deficit at that step, not as every later step differing */
    {
        pg_test_seq *tf = pg_test_seq_create(m, o->n_prompt + o->n_greedy, 16, kv_dtype);
        float *lt = malloc(V * sizeof(float));
        assert_non_null(lt);
        assert_int_equal(pg_test_seq_forward(tf, o->prompt, o->n_prompt, lt), PAGODA_OK);
        for (int32_t i = 0; i < o->n_greedy; i++) {
            r.deficit[i] = lt[argmax(lt, V)] - lt[o->greedy[i]];
            if (i + 1 < o->n_greedy)
                assert_int_equal(pg_test_seq_forward(tf, &o->greedy[i], 1, lt), PAGODA_OK);
        }
        free(lt);
        pg_test_seq_free(tf);
    }
    bool same = true;
    for (int32_t i = 0; i < o->n_greedy; i++) {
        int32_t id = argmax(last, V);
        if (id != o->greedy[i]) same = false;
        if (same) r.n_greedy++;
        if (i + 1 < o->n_greedy) assert_int_equal(pg_test_seq_forward(s, &id, 1, last), PAGODA_OK);
    }
    pg_test_seq_free(s);
    free(all);
    free(last);
    pg_model_free(m);
    pg_model_source_free(src);
    return r;
}

static run_result run(const char *dir, const char *form, pg_dtype compute, pg_dtype kv_dtype,
                      const char *arch, const oracle *o) {
    char rel[256];
    snprintf(rel, sizeof rel, "oracles/%s/%s", dir, form);
    return run_path(pg_test_asset(rel), compute, kv_dtype, arch, o);
}

static void check_against(const char *dir, const char *file, const char *arch, double tol) {
    oracle o;
    load_oracle(dir, file, &o);
    const char *forms[2] = {"hf", "model.gguf"};
    for (int f = 0; f < 2; f++) {
        run_result r = run(dir, forms[f], PG_F32, PG_F32, arch, &o);
        print_message("%s %s vs %s (F32 weights, F32 KV): max |dlogit| %.3g, greedy %d/%d\n",
                      dir, forms[f], file, r.max_diff, r.n_greedy, o.n_greedy);
        assert_true(r.max_diff < tol);
        assert_int_equal(r.n_greedy, o.n_greedy);
    }
    free(o.logits);
}

static void check_exact(const char *dir, const char *arch) {
    check_against(dir, "expected.json", arch, 1e-4);
}

/* GPT-OSS: sinks, alternating sliding windows (8 tokens here, shorter than
 * the 36-token prompt), YaRN with truncate false, router bias + softmax over
 * the top-k, expert biases, clamped SwiGLU. Both forms follow the HF
 * config's semantics (expected_hf_exact.json, float64 reference); llama.cpp
 * floors/ceils YaRN's correction range, which moves logits by up to 5.5e-2
 * (oracles/README.md caveat 1): expected.json within 6e-2. */
static void test_gpt_oss_matches_hf_semantics(void **state) {
    (void)state;
    check_against("gpt-oss-tiny", "expected_hf_exact.json", "gpt_oss", 1e-4);
    check_against("gpt-oss-tiny", "expected.json", "gpt_oss", 6e-2);
}

static void test_qwen3_dense_matches_llama_cpp(void **state) {
    (void)state;
    check_exact("qwen3-dense-tiny", "qwen3");
}

/* The default path: BF16 weights and a BF16 KV cache, against llama.cpp's
 * F16-KV oracle. Its rounding depends on the ISA (AVX512_BF16 / Arm BF16
 * round the activations to BF16 per GEMM; AVX2, AVX-512 without BF16 and
 * the scalar path keep them F32), so a near tie may break either way and
 * free-running greedy ids then differ from there on (AVX2: step 3, where
 * the oracle's top two are 0.0088 apart). Pinned instead: max |dlogit| at
 * the last prompt row < 4e-2 (measured 2.4e-2 / 2.5e-2, logits up to ~6),
 * and teacher-forced over the oracle's 32 ids, each within 4e-2 of our top
 * logit (measured: all 32 are our argmax but that one tie). */
static void test_qwen3_dense_default_bf16_drift(void **state) {
    (void)state;
    oracle o;
    load_oracle("qwen3-dense-tiny", "expected_kvf16.json", &o);
    run_result r = run("qwen3-dense-tiny", "hf", PG_DTYPE_COUNT, PG_BF16, "qwen3", &o);
    print_message("qwen3-dense-tiny hf (BF16 GEMM, BF16 KV): max |dlogit| %.3g, greedy %d/%d, "
                  "teacher-forced within 4e-2: %d/%d (max deficit %.3g)\n",
                  r.max_diff, r.n_greedy, o.n_greedy, tf_within(&r, &o, 4e-2), o.n_greedy,
                  tf_max_deficit(&r, &o));
    assert_true(r.max_diff < 4e-2);
    assert_int_equal(tf_within(&r, &o, 4e-2), o.n_greedy);
    free(o.logits);
}

/* Qwen3.5: Gated DeltaNet layers (conv state + F32 recurrent state) and a
 * gated full-attention layer with partial RoPE; llama.cpp's GGUF stores the
 * norms as (1 + w), -exp(A_log) and tiled V heads. The oracle README's
 * float64 forward agrees with llama.cpp to 1.1e-4 (logits up to ~15): the
 * issue's bound is 2e-4. */
static void test_qwen35_matches_llama_cpp(void **state) {
    (void)state;
    check_against("qwen35-tiny", "expected.json", "qwen3_5", 2e-4);
}

/* ---- Qwen3.5-MoE: a generated model against llama.cpp (tests/data/qwen35moe-tiny) ----
 *
 * No stored checkpoint: the model is written at test time by the generator
 * (tools/gen/gen_model.h) with the options below, the same as
 *   gen_model --arch qwen3_5_moe --hidden 128 --layers 4 --heads 4 --kv-heads 2 --head-dim 32
 *     --experts 8 --experts-per-tok 2 --moe-ffn 64 --shared-ffn 64 --vocab 320 --seed 52
 *     --std 0.15 --no-tie --dtype bf16 --gguf-dtype f32
 * whose GGUF llama.cpp ran for expected.json (README.md there). The
 * tensors of both forms must hash to what llama.cpp was given (FNV-1a 64
 * over name and raw bytes, tensors sorted by name; metadata not hashed), so
 * a generator change or a platform difference fails here, not as a logit
 * mismatch. */
#define Q35MOE_GGUF_HASH 0x7c7dad91278b2fffull /* model.gguf: 96 tensors */
#define Q35MOE_HF_HASH 0x65731837a7773297ull   /* hf/model.safetensors: 201 tensors */

static void qwen35moe_tiny_options(pg_gen_model_options *o) {
    pg_gen_model_defaults(o);
    assert_int_equal(pg_gen_model_set_arch(o, "qwen3_5_moe"), PAGODA_OK);
    o->hidden = 128;
    o->layers = 4; /* layer 3 gated full attention, 0-2 Gated DeltaNet; + 1 MTP block (not run) */
    o->heads = 4;
    o->kv_heads = 2;
    o->head_dim = 32;
    o->experts = 8;
    o->experts_per_tok = 2;
    o->moe_ffn = 64;
    o->shared_ffn = 64;
    o->vocab = 320;
    o->seed = 52;
    o->init_std = 0.15f; /* logits up to ~7.2 (README.md there: why this seed) */
    o->tie = false;
    o->hf_dtype = PG_BF16;
    o->gguf_dtype = PG_F32;
}

static uint64_t fnv1a(uint64_t h, const void *p, size_t n) {
    const uint8_t *b = p;
    for (size_t i = 0; i < n; i++)
        h = (h ^ b[i]) * 0x100000001b3ull;
    return h;
}

typedef struct named_bytes {
    const char *name;
    const void *data;
    size_t n;
} named_bytes;

static int named_bytes_cmp(const void *a, const void *b) {
    return strcmp(((const named_bytes *)a)->name, ((const named_bytes *)b)->name);
}

static uint64_t hash_sorted(named_bytes *t, size_t n) {
    qsort(t, n, sizeof *t, named_bytes_cmp);
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++) {
        h = fnv1a(h, t[i].name, strlen(t[i].name) + 1);
        h = fnv1a(h, t[i].data, t[i].n);
    }
    return h;
}

/* The tensor hash of a GGUF (is_gguf) or a safetensors file; *n: tensors. */
static uint64_t tensor_hash(const char *path, bool is_gguf, size_t *n) {
    uint64_t h;
    if (is_gguf) {
        pg_gguf *g;
        assert_int_equal(pg_gguf_open(path, &g), PAGODA_OK);
        *n = pg_gguf_n_tensors(g);
        named_bytes *t = calloc(*n, sizeof *t);
        assert_non_null(t);
        for (size_t i = 0; i < *n; i++) {
            const pg_gguf_tensor *x = pg_gguf_tensor_at(g, i);
            t[i] = (named_bytes){x->name, x->data, x->nbytes};
        }
        h = hash_sorted(t, *n);
        free(t);
        pg_gguf_close(g);
    } else {
        pg_safetensors *st;
        assert_int_equal(pg_safetensors_open(path, &st), PAGODA_OK);
        *n = pg_safetensors_n_tensors(st);
        named_bytes *t = calloc(*n, sizeof *t);
        assert_non_null(t);
        for (size_t i = 0; i < *n; i++) {
            const pg_tensor *x = pg_safetensors_tensor_at(st, i);
            t[i] = (named_bytes){x->name, x->data, x->nbytes};
        }
        h = hash_sorted(t, *n);
        free(t);
        pg_safetensors_close(st);
    }
    return h;
}

/* Qwen3.5-MoE: every layer's MLP 8 experts (softmax router, top-2,
 * renormalised) plus a shared expert scaled by sigmoid(shared_expert_gate
 * . x); Gated DeltaNet and gated full attention as Qwen3.5. Both forms, F32
 * compute and F32 KV cache, against llama.cpp's logits at all 36 prompt
 * positions (bound 2e-4, as the dense Qwen3.5 oracle) and its 32 greedy ids. */
static void test_qwen35_moe_matches_llama_cpp(void **state) {
    (void)state;
    const char *srcdir = getenv("PAGODA_SOURCE_DIR");
    char path[4200];
    snprintf(path, sizeof path, "%s/tests/data/qwen35moe-tiny/expected.json",
             srcdir ? srcdir : ".");
    oracle o;
    load_oracle_path(path, &o);
    char hf[4200], gguf[4200], st[4300];
    snprintf(hf, sizeof hf, "%s/hf", pg_test_tmpdir());
    snprintf(gguf, sizeof gguf, "%s/model.gguf", pg_test_tmpdir());
    snprintf(st, sizeof st, "%s/model.safetensors", hf);
    pg_gen_model_options g;
    qwen35moe_tiny_options(&g);
    g.hf_dir = hf;
    g.gguf_path = gguf;
    if (pg_gen_model_write(&g)) fail_msg("gen: %s", pg_last_error());
    size_t ng, nh;
    const uint64_t hg = tensor_hash(gguf, true, &ng), hh = tensor_hash(st, false, &nh);
    print_message("qwen35moe-tiny generated: model.gguf %zu tensors, hash %016llx; "
                  "model.safetensors %zu tensors, hash %016llx\n",
                  ng, (unsigned long long)hg, nh, (unsigned long long)hh);
    assert_true(hg == Q35MOE_GGUF_HASH);
    assert_true(hh == Q35MOE_HF_HASH);
    const char *forms[2] = {hf, gguf}, *names[2] = {"hf", "model.gguf"};
    for (int f = 0; f < 2; f++) {
        run_result r = run_path(forms[f], PG_F32, PG_F32, "qwen3_5_moe", &o);
        print_message("qwen35moe-tiny %s vs expected.json (F32 weights, F32 KV): max |dlogit| "
                      "%.3g, greedy %d/%d\n",
                      names[f], r.max_diff, r.n_greedy, o.n_greedy);
        assert_true(r.max_diff < 2e-4);
        assert_int_equal(r.n_greedy, o.n_greedy);
    }
    free(o.logits);
}

static void test_qwen3_moe_matches_llama_cpp(void **state) {
    (void)state;
    check_exact("qwen3-moe-tiny", "qwen3_moe");
}

/* The default path on the MoE oracle. The router is F32, but its inputs
 * carry the BF16 rounding, and this random model's top-2 choices are often
 * near ties (probability gaps down to 2.6e-4 on this prompt): which ones
 * flip depends on the ISA's rounding (see the dense case above), and one
 * flipped expert moves that token's logits by up to ~0.8. Measured (last
 * prompt row; teacher-forced over the 32 oracle ids): AVX512_BF16 max
 * |dlogit| 2.6e-2, all 32 our argmax; AVX2 / AVX-512 / scalar 0.18 with a
 * flip on that row, 26 of 32 our argmax, 28 within 5e-2, worst 0.80. A
 * broken kernel moves every logit by far more (mean |dlogit| is pinned), a
 * broken router every token. */
static void test_qwen3_moe_default_bf16_drift(void **state) {
    (void)state;
    oracle o;
    load_oracle("qwen3-moe-tiny", "expected_kvf16.json", &o);
    run_result r = run("qwen3-moe-tiny", "hf", PG_DTYPE_COUNT, PG_BF16, "qwen3_moe", &o);
    print_message("qwen3-moe-tiny hf (BF16 GEMM, BF16 KV): max |dlogit| %.3g (mean %.3g), greedy "
                  "%d/%d, teacher-forced within 5e-2: %d/%d (max deficit %.3g)\n",
                  r.max_diff, r.mean_diff, r.n_greedy, o.n_greedy, tf_within(&r, &o, 5e-2),
                  o.n_greedy, tf_max_deficit(&r, &o));
    assert_true(r.max_diff < 0.3);
    assert_true(r.mean_diff < 0.1); /* measured 6.5e-3; 5.0e-2 with the flip */
    assert_true(tf_within(&r, &o, 5e-2) >= o.n_greedy - 6);
    assert_true(tf_max_deficit(&r, &o) < 1.5);
    free(o.logits);
}

/* Real Qwen3 configs (0.6B .. 32B, as published) parse and give the shapes
 * the architecture's tensor table implies. */
static void test_qwen3_real_configs_load_as_shapes(void **state) {
    (void)state;
    static const struct {
        const char *name;
        int hidden, inter, layers, heads, kv, tied;
    } Q[] = {
        {"Qwen3-0.6B", 1024, 3072, 28, 16, 8, 1}, {"Qwen3-1.7B", 2048, 6144, 28, 16, 8, 1},
        {"Qwen3-4B", 2560, 9728, 36, 32, 8, 1},   {"Qwen3-8B", 4096, 12288, 36, 32, 8, 0},
        {"Qwen3-14B", 5120, 17408, 40, 40, 8, 0}, {"Qwen3-32B", 5120, 25600, 64, 64, 8, 0},
    };
    for (size_t i = 0; i < sizeof Q / sizeof Q[0]; i++) {
        char json[1024];
        snprintf(json, sizeof json,
                 "{\"architectures\": [\"Qwen3ForCausalLM\"], \"attention_bias\": false, "
                 "\"bos_token_id\": 151643, \"eos_token_id\": 151645, \"head_dim\": 128, "
                 "\"hidden_act\": \"silu\", \"hidden_size\": %d, \"intermediate_size\": %d, "
                 "\"max_position_embeddings\": 40960, \"max_window_layers\": %d, "
                 "\"model_type\": \"qwen3\", \"num_attention_heads\": %d, "
                 "\"num_hidden_layers\": %d, \"num_key_value_heads\": %d, \"rms_norm_eps\": 1e-06, "
                 "\"rope_scaling\": null, \"rope_theta\": 1000000, \"sliding_window\": null, "
                 "\"tie_word_embeddings\": %s, \"torch_dtype\": \"bfloat16\", "
                 "\"use_cache\": true, \"use_sliding_window\": false, \"vocab_size\": 151936}",
                 Q[i].hidden, Q[i].inter, Q[i].layers, Q[i].heads, Q[i].layers, Q[i].kv,
                 Q[i].tied ? "true" : "false");
        pg_model_config c;
        assert_int_equal(pg_hf_config_parse(json, strlen(json), Q[i].name, &c), PAGODA_OK);
        assert_non_null(c.arch);
        assert_string_equal(c.arch->name, "qwen3");
        assert_int_equal(c.head_dim, 128);
        assert_int_equal(c.sliding_window, 0);
        assert_int_equal(c.tie_word_embeddings, Q[i].tied);
        assert_true(fabsf(c.rope_theta - 1e6f) < 1.0f);
        assert_int_equal(pg_arch_dim(&c, PG_DIM_Q), (int64_t)Q[i].heads * 128);
        assert_int_equal(pg_arch_dim(&c, PG_DIM_KV), (int64_t)Q[i].kv * 128);
        assert_int_equal(pg_arch_dim(&c, PG_DIM_HEAD), 128);
        assert_int_equal(pg_arch_dim(&c, PG_DIM_FFN), Q[i].inter);
    }
}

/* A Qwen3 config without head_dim means 128 (transformers' Qwen3Config
 * default), not hidden / heads. */
static void test_qwen3_head_dim_defaults_to_128(void **state) {
    (void)state;
    const char *json = "{\"architectures\": [\"Qwen3ForCausalLM\"], \"vocab_size\": 320, "
                       "\"hidden_size\": 64, \"intermediate_size\": 128, \"num_hidden_layers\": 2, "
                       "\"num_attention_heads\": 4, \"num_key_value_heads\": 2}";
    pg_model_config c;
    assert_int_equal(pg_hf_config_parse(json, strlen(json), "x/config.json", &c), PAGODA_OK);
    assert_int_equal(c.head_dim, 128);
}

/* An architecture nobody registered is refused with the list of supported ones. */
static void test_unknown_architecture_lists_supported(void **state) {
    (void)state;
    const char *json = "{\"architectures\": [\"GrokForCausalLM\"], \"vocab_size\": 10}";
    pg_model_config c;
    assert_int_equal(pg_hf_config_parse(json, strlen(json), "x/config.json", &c),
                     PAGODA_ERR_UNSUPPORTED);
    const char *e = pg_last_error();
    assert_non_null(strstr(e, "GrokForCausalLM"));
    assert_non_null(strstr(e, "LlamaForCausalLM"));
    assert_non_null(strstr(e, "Qwen3ForCausalLM"));
}

/* ---- loading and serving checks on the oracle's files ---- */

/* A copy of the oracle's HF directory with config.json edited: `from` -> `to`. */
static const char *edited_copy_of(const char *oracle_dir, const char *name, const char *from,
                                  const char *to);
static const char *edited_copy(const char *name, const char *from, const char *to) {
    return edited_copy_of("qwen3-dense-tiny", name, from, to);
}

static const char *edited_copy_of(const char *oracle_dir, const char *name, const char *from,
                                  const char *to) {
    static char dir[1024];
    snprintf(dir, sizeof dir, "%s/%s", pg_test_tmpdir(), name);
    char cmd[4096], *out = NULL;
    char rel[128];
    snprintf(rel, sizeof rel, "oracles/%s/hf", oracle_dir);
    snprintf(cmd, sizeof cmd, "rm -rf '%s' && cp -r '%s' '%s' && chmod -R u+w '%s'", dir,
             pg_test_asset(rel), dir, dir);
    assert_int_equal(pg_test_run_command(cmd, &out), 0);
    free(out);
    char path[1100];
    snprintf(path, sizeof path, "%s/config.json", dir);
    size_t len;
    char *json = pg_test_read_file(path, &len), *at = strstr(json, from);
    assert_non_null(at);
    size_t nf = strlen(from), nt = strlen(to);
    char *edited = malloc(len - nf + nt + 1);
    assert_non_null(edited);
    memcpy(edited, json, (size_t)(at - json));
    memcpy(edited + (at - json), to, nt);
    memcpy(edited + (at - json) + nt, at + nf, len - (size_t)(at - json) - nf);
    pg_test_write_file(path, edited, len - nf + nt);
    free(edited);
    free(json);
    return dir;
}

/* Qwen3 weights labelled Llama: the q/k norms belong to no Llama tensor, so
 * the file is refused instead of silently run as another model; an
 * activation the architecture does not have is refused too. */
static void test_foreign_tensors_and_activation_refused(void **state) {
    (void)state;
    pg_model_source *src = NULL;
    const char *dir = edited_copy("as-llama", "Qwen3ForCausalLM", "LlamaForCausalLM");
    assert_int_equal(pg_model_source_open(dir, &src), PAGODA_ERR_FORMAT);
    assert_non_null(strstr(pg_last_error(), "_norm.weight' is not part of the llama"));
    dir = edited_copy("gelu", "\"silu\"", "\"gelu\"");
    assert_int_equal(pg_model_source_open(dir, &src), PAGODA_OK);
    pg_model *m = NULL;
    assert_int_equal(pg_model_load(src, NULL, &m), PAGODA_ERR_UNSUPPORTED);
    assert_non_null(strstr(pg_last_error(), "hidden_act 'gelu'"));
    pg_model_source_free(src);
    /* YaRN shrinking the context (factor < 1) is refused */
    dir = edited_copy_of("gpt-oss-tiny", "yarn-half", "\"factor\": 32.0", "\"factor\": 0.5");
    assert_int_equal(pg_model_source_open(dir, &src), PAGODA_ERR_FORMAT);
    assert_non_null(strstr(pg_last_error(), "yarn factor 0.5 must be >= 1"));
    /* MoE layer lists name existing layers */
    dir = edited_copy_of("qwen3-moe-tiny", "moe-only5", "\"mlp_only_layers\": []",
                         "\"mlp_only_layers\": [5]");
    assert_int_equal(pg_model_source_open(dir, &src), PAGODA_ERR_FORMAT);
    assert_non_null(strstr(pg_last_error(), "layer indices in [0, 2)"));
    /* the first architecture pagoda runs is taken from the list */
    dir = edited_copy("two-archs", "\"Qwen3ForCausalLM\"",
                      "\"FooForCausalLM\", \"Qwen3ForCausalLM\"");
    assert_int_equal(pg_model_source_open(dir, &src), PAGODA_OK);
    assert_string_equal(pg_model_source_config(src)->architecture, "Qwen3ForCausalLM");
    pg_model_source_free(src);
}

/* tie_word_embeddings: the lm_head is the embedding even when the file also
 * holds an lm_head.weight (transformers and vLLM tie it and skip that tensor). */
static void test_tied_config_uses_the_embedding(void **state) {
    (void)state;
    pg_model_options o;
    pg_model_options_default(&o);
    o.compute = PG_F32;
    const int32_t T = 4, ids[4] = {39, 68, 276, 78};
    float *a = malloc(T * 320 * sizeof(float)), *b = malloc(T * 320 * sizeof(float));
    assert_true(a && b);
    pg_model_source *src;
    pg_model *m = pg_test_load(pg_test_asset("oracles/qwen3-dense-tiny/hf"), &o, &src);
    pg_test_prefill_logits(m, ids, T, a);
    pg_model_free(m);
    pg_model_source_free(src);
    m = pg_test_load(
        edited_copy("tied", "\"tie_word_embeddings\": false", "\"tie_word_embeddings\": true"), &o,
        &src);
    pg_test_prefill_logits(m, ids, T, b);
    pg_model_free(m);
    pg_model_source_free(src);
    assert_true(memcmp(a, b, T * 320 * sizeof(float)) != 0);
    free(a);
    free(b);
}

/* The oracle's vocabulary is padded past its tokenizer (320 vs 301 ids) and
 * its greedy path lands on padding ids: generation goes on, such ids add no
 * text in either form (the GGUF marks them UNUSED, as llama.cpp renders
 * them: empty), both forms give the same ids and text, and `pagoda
 * detokenize` takes the ids back. */
static void test_padded_vocab_same_text_both_forms(void **state) {
    (void)state;
    char text[2][512];
    int32_t got[2][32];
    const char *forms[2] = {"oracles/qwen3-dense-tiny/hf", "oracles/qwen3-dense-tiny/model.gguf"};
    oracle o;
    load_oracle("qwen3-dense-tiny", "expected.json", &o);
    for (int f = 0; f < 2; f++) {
        pagoda_engine_options eo;
        pagoda_engine_options_default(&eo);
        eo.dtype = PAGODA_DTYPE_F32;
        eo.kv_cache_memory = 8u << 20;
        pagoda_engine *e;
        if (pagoda_engine_create(pg_test_asset(forms[f]), &eo, &e) != PAGODA_OK)
            fail_msg("%s", pagoda_last_error());
        pagoda_request r;
        pagoda_request_defaults(e, &r);
        r.prompt_token_ids = o.prompt;
        r.n_prompt_token_ids = (size_t)o.n_prompt;
        r.sampling.temperature = 0;
        r.sampling.max_tokens = 32;
        r.sampling.ignore_eos = true;
        uint64_t id;
        assert_int_equal(pagoda_engine_add_request(e, &r, &id, NULL), PAGODA_OK);
        size_t n_text = 0;
        int n_ids = 0;
        while (pagoda_engine_has_unfinished(e)) {
            size_t n;
            assert_int_equal(pagoda_engine_step(e, &n), PAGODA_OK);
            const pagoda_output *out = pagoda_engine_outputs(e, &n);
            for (size_t i = 0; i < n; i++) {
                assert_int_not_equal(out[i].finish_reason, PAGODA_FINISH_ERROR);
                for (size_t k = 0; k < out[i].n_new_tokens; k++)
                    got[f][n_ids++] = out[i].new_token_ids[k];
                assert_true(n_text + out[i].text_delta_len < sizeof text[f]);
                memcpy(text[f] + n_text, out[i].text_delta, out[i].text_delta_len);
                n_text += out[i].text_delta_len;
            }
        }
        text[f][n_text] = 0;
        assert_int_equal(n_ids, 32);
        assert_memory_equal(got[f], o.greedy, 32 * sizeof(int32_t));
        assert_null(strstr(text[f], "PAD"));
        pagoda_engine_free(e);
    }
    assert_string_equal(text[0], text[1]);
    char cmd[2048], *out = NULL;
    snprintf(cmd, sizeof cmd, "%s '%s' detokenize '%s' --ids 94,304,78 2>&1",
             pg_test_exec_wrapper(), pg_test_pagoda_bin(), pg_test_asset(forms[0]));
    assert_int_equal(pg_test_run_command(cmd, &out), 0);
    char *out2 = NULL;
    snprintf(cmd, sizeof cmd, "%s '%s' detokenize '%s' --ids 94,78 2>&1", pg_test_exec_wrapper(),
             pg_test_pagoda_bin(), pg_test_asset(forms[1]));
    assert_int_equal(pg_test_run_command(cmd, &out2), 0);
    assert_string_equal(out, out2);
    free(out);
    free(out2);
    free(o.logits);
}

/* The engine's invariance checks on the MoE oracle: a request's tokens and
 * logprobs are bitwise the same alone (no prefix caching, one step per
 * prefill) and among 7 others sharing prefixes, with prefix-cache hits and
 * chunked prefill (7 tokens a step): the expert GEMMs reduce each row the
 * same way whatever else routes to the expert. */
typedef struct eng_out {
    int32_t ids[24];
    float lp[24];
    int n;
} eng_out;

static void engine_run(const char *model, int budget, bool caching, const int32_t (*prompts)[40],
                       const int *lens, int n, eng_out *res) {
    pagoda_engine_options eo;
    pagoda_engine_options_default(&eo);
    eo.kv_cache_memory = 8u << 20;
    eo.enable_prefix_caching = caching;
    if (budget) eo.max_num_batched_tokens = budget, eo.max_num_seqs = budget;
    pagoda_engine *e;
    if (pagoda_engine_create(model, &eo, &e) != PAGODA_OK) fail_msg("%s", pagoda_last_error());
    uint64_t ids[8];
    for (int i = 0; i < n; i++) {
        pagoda_request r;
        pagoda_request_defaults(e, &r);
        r.prompt_token_ids = prompts[i];
        r.n_prompt_token_ids = (size_t)lens[i];
        r.sampling.temperature = 0;
        r.sampling.max_tokens = 24;
        r.sampling.ignore_eos = true;
        r.sampling.logprobs = 0;
        assert_int_equal(pagoda_engine_add_request(e, &r, &ids[i], NULL), PAGODA_OK);
        memset(&res[i], 0, sizeof res[i]);
    }
    while (pagoda_engine_has_unfinished(e)) {
        size_t k;
        assert_int_equal(pagoda_engine_step(e, &k), PAGODA_OK);
        const pagoda_output *out = pagoda_engine_outputs(e, &k);
        for (size_t j = 0; j < k; j++) {
            int i = 0;
            while (ids[i] != out[j].id)
                i++;
            assert_int_not_equal(out[j].finish_reason, PAGODA_FINISH_ERROR);
            for (size_t t = 0; t < out[j].n_new_tokens; t++) {
                res[i].ids[res[i].n] = out[j].new_token_ids[t];
                res[i].lp[res[i].n++] = out[j].logprobs[t].logprob;
            }
        }
    }
    pagoda_engine_free(e);
}

static void test_qwen3_moe_engine_invariance(void **state) {
    (void)state;
    oracle o;
    load_oracle("qwen3-moe-tiny", "expected.json", &o);
    int32_t prompts[8][40];
    int lens[8];
    for (int i = 0; i < 8; i++) { /* shared 16- and 32-token prefixes, then different */
        lens[i] = 33 + i % 4;
        for (int t = 0; t < lens[i]; t++)
            prompts[i][t] = t < (i < 4 ? 32 : 16) ? o.prompt[t] : (o.prompt[t] * (i + 3) + t) % 300;
    }
    const char *model = pg_test_asset("oracles/qwen3-moe-tiny/hf");
    eng_out alone[8], batch[8];
    for (int i = 0; i < 8; i++)
        engine_run(model, 0, false, &prompts[i], &lens[i], 1, &alone[i]);
    engine_run(model, 7, true, prompts, lens, 8, batch);
    bool differ = false;
    for (int i = 0; i < 8; i++) {
        assert_int_equal(alone[i].n, 24);
        assert_int_equal(batch[i].n, 24);
        assert_memory_equal(alone[i].ids, batch[i].ids, sizeof alone[i].ids);
        assert_memory_equal(alone[i].lp, batch[i].lp, sizeof alone[i].lp);
        differ |= memcmp(alone[i].ids, alone[0].ids, sizeof alone[0].ids) != 0;
    }
    assert_true(differ);
    free(o.logits);
}

/* ---- Qwen3.5 through the engine: chunked prefill, prefix resume from a
 * recurrent-state snapshot, batching */

typedef struct q35_out {
    int32_t ids[32];
    float lp[32];
    int n, cached;
} q35_out;

/* Run n requests (greedy, max_tokens each, EOS ignored) to completion on a
 * fresh engine; budget 0 = defaults. */
static bool g_q35_bf16; /* run the default BF16 path instead of F32 */

static void q35_run(int budget, bool caching, const int32_t *const *prompts, const int *lens, int n,
                    int max_tokens, q35_out *res) {
    pagoda_engine_options eo;
    pagoda_engine_options_default(&eo);
    eo.kv_cache_memory = 64u << 20;
    eo.max_model_len = 1024;
    eo.enable_prefix_caching = caching;
    if (!g_q35_bf16) {
        eo.dtype = PAGODA_DTYPE_F32;
        eo.kv_cache_dtype = PAGODA_KV_F32;
    }
    if (budget) eo.max_num_batched_tokens = budget, eo.max_num_seqs = 8;
    pagoda_engine *e;
    if (pagoda_engine_create(pg_test_asset("oracles/qwen35-tiny/hf"), &eo, &e) != PAGODA_OK)
        fail_msg("%s", pagoda_last_error());
    uint64_t ids[8];
    for (int i = 0; i < n; i++) {
        pagoda_request r;
        pagoda_request_defaults(e, &r);
        r.prompt_token_ids = prompts[i];
        r.n_prompt_token_ids = (size_t)lens[i];
        r.sampling.temperature = 0;
        r.sampling.max_tokens = max_tokens;
        r.sampling.ignore_eos = true;
        r.sampling.logprobs = 0;
        assert_int_equal(pagoda_engine_add_request(e, &r, &ids[i], NULL), PAGODA_OK);
        memset(&res[i], 0, sizeof res[i]);
    }
    while (pagoda_engine_has_unfinished(e)) {
        size_t k;
        assert_int_equal(pagoda_engine_step(e, &k), PAGODA_OK);
        const pagoda_output *out = pagoda_engine_outputs(e, &k);
        for (size_t j = 0; j < k; j++) {
            int i = 0;
            while (ids[i] != out[j].id)
                i++;
            assert_int_not_equal(out[j].finish_reason, PAGODA_FINISH_ERROR);
            res[i].cached = out[j].n_cached_tokens;
            for (size_t t = 0; t < out[j].n_new_tokens; t++) {
                res[i].ids[res[i].n] = out[j].new_token_ids[t];
                res[i].lp[res[i].n++] = out[j].logprobs[t].logprob;
            }
        }
    }
    pagoda_engine_free(e);
}

/* A prompt of n tokens from the oracle's ids (vocab 300 of 320 real). */
static void q35_prompt(const oracle *o, int32_t *p, int n, int salt) {
    for (int t = 0; t < n; t++)
        p[t] = t < o->n_prompt ? o->prompt[t] : (o->prompt[t % o->n_prompt] * 7 + t * salt) % 298;
}

/* Prefill split into steps: the scheduler ends prefill chunks on the Gated
 * DeltaNet chunk grid (multiples of 64 positions: pg_sched_config
 * prefill_align), so any budget of at least 64 (here 64 and 100) gives
 * bitwise the output of one prefill, in F32 and on the default BF16 path
 * (where a split off the grid flipped a greedy token at 600+ tokens: found
 * by a break-it pass). A budget below 64 (37) cannot stay on the grid: equal
 * greedy ids and logprobs within 1e-4 (measured ~4e-6) in F32. */
static void test_qwen35_chunked_prefill(void **state) {
    (void)state;
    oracle o;
    load_oracle("qwen35-tiny", "expected.json", &o);
    static int32_t p[200];
    q35_prompt(&o, p, 200, 3);
    const int32_t *pp[1] = {p};
    int len = 200;
    q35_out one, by64, by37;
    for (int bf16 = 1; bf16 >= 0; bf16--) {
        g_q35_bf16 = bf16;
        q35_run(0, false, pp, &len, 1, 24, &one);
        q35_run(64, false, pp, &len, 1, 24, &by64);
        q35_run(100, false, pp, &len, 1, 24, &by37);
        assert_int_equal(one.n, 24);
        assert_memory_equal(one.ids, by64.ids, sizeof one.ids);
        assert_memory_equal(one.lp, by64.lp, sizeof one.lp);
        assert_memory_equal(one.ids, by37.ids, sizeof one.ids);
        assert_memory_equal(one.lp, by37.lp, sizeof one.lp);
    }
    q35_run(37, false, pp, &len, 1, 24, &by37);
    assert_memory_equal(one.ids, by37.ids, sizeof one.ids);
    double d = 0;
    for (int t = 0; t < 24; t++)
        { /* (no fmax: GCC 12's aarch64 vectoriser crashes on it here) */
            double x = fabs((double)one.lp[t] - (double)by37.lp[t]);
            if (x > d) d = x;
        }
    print_message("qwen35 prefill in 37-token steps vs one step: max |dlogprob| %.3g\n", d);
    assert_true(d < 1e-4);
    free(o.logits);
}

/* A second turn resumes from the first turn's recurrent-state snapshot: turn
 * 2 = turn 1's prompt + its output + new tokens. With prefix caching its
 * prompt is partly served from the cache (a 64-aligned snapshot and the KV
 * blocks before it) and its output is bitwise the output without caching.
 * Then 6 requests sharing 128- and 64-token prefixes batched under a
 * 100-token budget (chunks on the 64 grid; snapshots taken by some,
 * restored by others): bitwise the outputs of each alone. */
static void test_qwen35_prefix_resume(void **state) {
    (void)state;
    oracle o;
    load_oracle("qwen35-tiny", "expected.json", &o);
    static int32_t t1[150], t2[200];
    q35_prompt(&o, t1, 150, 5);
    const int32_t *p1[1] = {t1};
    int l1 = 150;
    q35_out a;
    q35_run(0, false, p1, &l1, 1, 24, &a);
    memcpy(t2, t1, sizeof t1);
    memcpy(t2 + 150, a.ids, 24 * sizeof(int32_t));
    for (int t = 174; t < 194; t++)
        t2[t] = (t * 11) % 290;
    const int32_t *both[2] = {t1, t2};
    int lens[2] = {150, 194};
    q35_out cold, warm[2];
    const int32_t *p2[1] = {t2};
    q35_run(0, false, p2, &lens[1], 1, 24, &cold);
    /* one engine: turn 1 then turn 2 (budget 256: turn 2 is admitted after turn 1 ran) */
    pagoda_engine_options eo;
    (void)eo;
    q35_run(0, true, both, lens, 1, 24, &warm[0]);
    assert_memory_equal(warm[0].ids, a.ids, sizeof a.ids);
    {
        pagoda_engine_options opt;
        pagoda_engine_options_default(&opt);
        opt.kv_cache_memory = 64u << 20;
        opt.dtype = PAGODA_DTYPE_F32;
        opt.kv_cache_dtype = PAGODA_KV_F32;
        pagoda_engine *e;
        if (pagoda_engine_create(pg_test_asset("oracles/qwen35-tiny/hf"), &opt, &e) != PAGODA_OK)
            fail_msg("%s", pagoda_last_error());
        for (int turn = 0; turn < 2; turn++) {
            pagoda_request r;
            pagoda_request_defaults(e, &r);
            r.prompt_token_ids = both[turn];
            r.n_prompt_token_ids = (size_t)lens[turn];
            r.sampling.temperature = 0;
            r.sampling.max_tokens = 24;
            r.sampling.ignore_eos = true;
            r.sampling.logprobs = 0;
            uint64_t id;
            assert_int_equal(pagoda_engine_add_request(e, &r, &id, NULL), PAGODA_OK);
            memset(&warm[turn], 0, sizeof warm[turn]);
            while (pagoda_engine_has_unfinished(e)) {
                size_t k;
                assert_int_equal(pagoda_engine_step(e, &k), PAGODA_OK);
                const pagoda_output *out = pagoda_engine_outputs(e, &k);
                for (size_t j = 0; j < k; j++) {
                    warm[turn].cached = out[j].n_cached_tokens;
                    for (size_t t = 0; t < out[j].n_new_tokens; t++) {
                        warm[turn].ids[warm[turn].n] = out[j].new_token_ids[t];
                        warm[turn].lp[warm[turn].n++] = out[j].logprobs[t].logprob;
                    }
                }
            }
        }
        pagoda_engine_free(e);
    }
    print_message("qwen35 turn 2: %d of 194 prompt tokens from the prefix cache\n",
                  warm[1].cached);
    assert_int_equal(warm[1].cached, 128); /* the snapshot at 128 (turn 1 ended at 174) */
    assert_memory_equal(warm[0].ids, a.ids, sizeof a.ids);
    assert_memory_equal(warm[1].ids, cold.ids, sizeof cold.ids);
    assert_memory_equal(warm[1].lp, cold.lp, sizeof cold.lp);

    /* batched, shared prefixes, small budget */
    static int32_t pb[6][180];
    const int32_t *pbp[6];
    int lb[6];
    q35_out alone[6], batch[6];
    for (int i = 0; i < 6; i++) {
        lb[i] = 140 + 7 * i;
        q35_prompt(&o, pb[i], lb[i], 3);
        for (int t = (i < 3 ? 128 : 64); t < lb[i]; t++)
            pb[i][t] = (pb[i][t] * (i + 2) + t) % 297;
        pbp[i] = pb[i];
        q35_run(0, false, &pbp[i], &lb[i], 1, 16, &alone[i]);
    }
    q35_run(100, true, pbp, lb, 6, 16, batch);
    double d = 0;
    int hits = 0;
    for (int i = 0; i < 6; i++) {
        assert_int_equal(batch[i].n, 16);
        assert_memory_equal(alone[i].ids, batch[i].ids, 16 * sizeof(int32_t));
        assert_memory_equal(alone[i].lp, batch[i].lp, 16 * sizeof(float)); /* on the grid */
        for (int t = 0; t < 16; t++)
            { /* (no fmax: GCC 12's aarch64 vectoriser crashes on it here) */
            double x = fabs((double)alone[i].lp[t] - (double)batch[i].lp[t]);
            if (x > d) d = x;
        }
        hits += batch[i].cached;
    }
    print_message("qwen35 6 requests batched with prefix caching: %d prompt tokens cached, max "
                  "|dlogprob| %.3g vs alone\n",
                  hits, d);
    assert_true(d < 1e-4);
    free(o.logits);
}

/* ---- GPT-OSS with MXFP4 experts as published (*_blocks / *_scales) */

/* Round-to-nearest MXFP4 of one 32-block of x: the E8M0 scale e with
 * amax / 2^(e-127) <= 6, then the nearest E2M1 code (ties: the first). */
static void mxfp4_block(const float *x, uint8_t *e_out, uint8_t codes[32]) {
    float amax = 0;
    for (int i = 0; i < 32; i++)
        amax = fmaxf(amax, fabsf(x[i]));
    int e = amax > 0 ? (int)ceil(log2((double)amax / 6.0)) + 127 : 0;
    e = e < 1 ? 1 : (e > 254 ? 254 : e);
    const float d = pg_e8m0_half_to_f32((uint8_t)e); /* kvalues are doubled */
    *e_out = (uint8_t)e;
    for (int i = 0; i < 32; i++) {
        int best = 0;
        for (int c = 1; c < 16; c++)
            if (fabsf((float)pg_mxfp4_kvalues[c] * d - x[i]) <
                fabsf((float)pg_mxfp4_kvalues[best] * d - x[i]))
                best = c;
        codes[i] = (uint8_t)best;
    }
}

/* The oracle's experts quantized to MXFP4 and written as gpt-oss
 * checkpoints store them (gate_up_proj_blocks [E, 2I, H/32, 16]: row 2i the
 * gate's row i, 2i + 1 the up's; element 2j in the low nibble of byte j;
 * *_scales E8M0), next to a BF16 copy of the same dequantized values in the
 * stacked BF16 layout. Checks: the per-expert MXFP4 rows the source derives
 * dequantize to exactly those values; the MXFP4 model's logits (int8
 * activations x MXFP4 weights) stay close to the dense copy's F32 forward,
 * with the same greedy ids. */
static void test_gpt_oss_mxfp4_checkpoint(void **state) {
    (void)state;
    const char *src_dir = pg_test_asset("oracles/gpt-oss-tiny/hf");
    char path[4300];
    snprintf(path, sizeof path, "%s/model.safetensors", src_dir);
    pg_safetensors *st;
    assert_int_equal(pg_safetensors_open(path, &st), PAGODA_OK);
    char dirs[2][2100];
    pg_safetensors_writer *w[2];
    for (int k = 0; k < 2; k++) {
        snprintf(dirs[k], sizeof dirs[k], "%s/gpt-oss-%s", pg_test_tmpdir(), k ? "dense" : "mxfp4");
        char cmd[16384], *out = NULL;
        snprintf(cmd, sizeof cmd, "rm -rf '%s' && mkdir -p '%s' && cp '%s'/*.json '%s'", dirs[k],
                 dirs[k], src_dir, dirs[k]);
        assert_int_equal(pg_test_run_command(cmd, &out), 0);
        free(out);
        assert_int_equal(pg_safetensors_writer_create(&w[k]), PAGODA_OK);
    }
    /* pass 0 declares, pass 1 writes */
    size_t n = pg_safetensors_n_tensors(st);
    float *vals[8][2] = {{0}}; /* [layer][down, gate_up]: the values each derived row must hold */
    for (int pass = 0; pass < 2; pass++) {
        for (size_t i = 0; i < n; i++) {
            const pg_tensor *t = pg_safetensors_tensor_at(st, i);
            const char *x = strstr(t->name, ".mlp.experts.");
            const bool gu = x && !strcmp(x + 13, "gate_up_proj"), dn = x && !strcmp(x + 13, "down_proj");
            if (!gu && !dn) {
                for (int k = 0; k < 2; k++) {
                    if (pass == 0)
                        assert_int_equal(pg_safetensors_writer_add(w[k], t->name, t->dtype, t->ndim,
                                                                   t->shape),
                                         PAGODA_OK);
                    else
                        assert_int_equal(pg_safetensors_writer_write(w[k], t->data, t->nbytes),
                                         PAGODA_OK);
                }
                continue;
            }
            /* [E, in, out] BF16 -> rows [E, out, in], quantized per 32 of `in` */
            const int64_t E = t->shape[0], IN = t->shape[1], OUT = t->shape[2], nb = IN / 32;
            assert_int_equal(IN % 32, 0);
            char nm[256];
            if (pass == 0) {
                int64_t bs[4] = {E, OUT, nb, 16}, ss[3] = {E, OUT, nb};
                snprintf(nm, sizeof nm, "%s_blocks", t->name);
                assert_int_equal(pg_safetensors_writer_add(w[0], nm, PG_U8, 4, bs), PAGODA_OK);
                snprintf(nm, sizeof nm, "%s_scales", t->name);
                assert_int_equal(pg_safetensors_writer_add(w[0], nm, PG_U8, 3, ss), PAGODA_OK);
                assert_int_equal(pg_safetensors_writer_add(w[1], t->name, PG_BF16, 3, t->shape),
                                 PAGODA_OK);
                continue;
            }
            uint8_t *blocks = calloc((size_t)(E * OUT * nb * 16), 1), *scales = malloc((size_t)(E * OUT * nb));
            uint16_t *dense = malloc((size_t)(E * IN * OUT) * 2);
            assert_true(blocks && scales && dense);
            const int layer = atoi(t->name + strlen("model.layers."));
            assert_true(layer >= 0 && layer < 8);
            float *vl = vals[layer][gu] = malloc((size_t)(E * OUT * IN) * sizeof(float));
            assert_non_null(vl);
            for (int64_t e = 0; e < E; e++)
                for (int64_t o = 0; o < OUT; o++)
                    for (int64_t b = 0; b < nb; b++) {
                        float xb[32];
                        uint8_t codes[32], ex;
                        for (int j = 0; j < 32; j++) {
                            size_t at = (size_t)((e * IN + b * 32 + j) * OUT + o);
                            xb[j] = pg_bf16_to_f32(((const uint16_t *)t->data)[at]);
                        }
                        mxfp4_block(xb, &ex, codes);
                        const size_t bi = (size_t)((e * OUT + o) * nb + b);
                        scales[bi] = ex;
                        for (int j = 0; j < 32; j++) {
                            blocks[bi * 16 + (size_t)j / 2] |= (uint8_t)(codes[j] << (4 * (j & 1)));
                            float v = (float)pg_mxfp4_kvalues[codes[j]] * pg_e8m0_half_to_f32(ex);
                            dense[(size_t)((e * IN + b * 32 + j) * OUT + o)] = pg_f32_to_bf16(v);
                            assert_true(pg_bf16_to_f32(pg_f32_to_bf16(v)) == v); /* exact */
                            /* the per-expert row the source must derive: gate rows even */
                            const int64_t row = gu ? o / 2 : o;
                            vl[(size_t)((e * OUT + (gu ? (o % 2) * (OUT / 2) : 0) + row) * IN + b * 32 +
                                        j)] = v;
                        }
                    }
            assert_int_equal(pg_safetensors_writer_write(w[0], blocks, (size_t)(E * OUT * nb * 16)),
                             PAGODA_OK);
            assert_int_equal(pg_safetensors_writer_write(w[0], scales, (size_t)(E * OUT * nb)),
                             PAGODA_OK);
            assert_int_equal(pg_safetensors_writer_write(w[1], dense, (size_t)(E * IN * OUT) * 2),
                             PAGODA_OK);
            free(blocks);
            free(scales);
            free(dense);
        }
        for (int k = 0; k < 2; k++) {
            if (pass == 0) {
                snprintf(path, sizeof path, "%s/model.safetensors", dirs[k]);
                assert_int_equal(pg_safetensors_writer_begin(w[k], path), PAGODA_OK);
            } else {
                assert_int_equal(pg_safetensors_writer_finish(w[k]), PAGODA_OK);
                pg_safetensors_writer_free(w[k]);
            }
        }
    }
    pg_safetensors_close(st);
    /* derived per-expert rows */
    pg_model_source *ms;
    assert_int_equal(pg_model_source_open(dirs[0], &ms), PAGODA_OK);
    const pg_model_config *c = pg_model_source_config(ms);
    const int64_t H = c->hidden_size, I = c->moe_intermediate_size, E = c->num_experts;
    float *row = malloc((size_t)(H > I ? H : I) * sizeof(float));
    assert_true(c->num_hidden_layers <= 8);
    for (int l = 0; l < c->num_hidden_layers; l++) {
        static const char *const ORDER[2][2] = {{"down_proj", NULL}, {"gate_proj", "up_proj"}};
        for (int part = 0; part < 2; part++) {
            const int64_t rows = part ? I : H, K = part ? H : I;
            for (int64_t e = 0; e < E; e++)
                for (int h = 0; h < (part ? 2 : 1); h++) {
                    char nm[200];
                    snprintf(nm, sizeof nm, "model.layers.%d.mlp.experts.%lld.%s.weight", l,
                             (long long)e, ORDER[part][h]);
                    const pg_tensor *t = pg_model_source_tensor(ms, nm);
                    assert_non_null(t);
                    assert_int_equal(t->dtype, PG_MXFP4);
                    for (int64_t r = 0; r < rows; r++) {
                        pg_dequant_row(PG_MXFP4, (const uint8_t *)t->data + (size_t)r * (size_t)(K / 32) * 17,
                                       row, (size_t)K);
                        const float *want =
                            vals[l][part] + (size_t)(((e * (part ? 2 : 1) + h) * rows + r) * K);
                        for (int64_t k = 0; k < K; k++)
                            if (row[k] != want[k])
                                fail_msg("%s row %lld col %lld: %g, want %g", nm, (long long)r,
                                         (long long)k, row[k], want[k]);
                    }
                }
            free(vals[l][part]);
        }
    }
    free(row);
    pg_model_source_free(ms);
    /* the MXFP4 forward near the dense one */
    oracle o;
    load_oracle("gpt-oss-tiny", "expected_hf_exact.json", &o);
    pg_model_options opt;
    pg_model_options_default(&opt);
    float *lg[2];
    for (int k = 0; k < 2; k++) {
        opt.compute = k ? PG_F32 : PG_DTYPE_COUNT;
        pg_model_source *s2;
        pg_model *m = pg_test_load(dirs[k], &opt, &s2);
        lg[k] = malloc((size_t)o.n_prompt * o.vocab * sizeof(float));
        pg_test_prefill_logits(m, o.prompt, o.n_prompt, lg[k]);
        pg_model_free(m);
        pg_model_source_free(s2);
    }
    double md = 0, amax = 0;
    int same = 0;
    for (int32_t t = 0; t < o.n_prompt; t++) {
        const float *a = lg[0] + (size_t)t * o.vocab, *b = lg[1] + (size_t)t * o.vocab;
        same += argmax(a, o.vocab) == argmax(b, o.vocab);
        for (int32_t v = 0; v < o.vocab; v++) {
            md = fmax(md, fabs((double)a[v] - b[v]));
            amax = fmax(amax, fabs((double)b[v]));
        }
    }
    print_message("gpt-oss-tiny MXFP4 experts (int8 activations) vs their dense F32 forward: max "
                  "|dlogit| %.3g (max |logit| %.3g), argmax equal at %d/%d positions\n",
                  md, amax, same, o.n_prompt);
    assert_true(md < 0.05 * amax);
    assert_true(same >= o.n_prompt - 2);
    free(lg[0]);
    free(lg[1]);
    free(o.logits);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_qwen3_dense_matches_llama_cpp),
        cmocka_unit_test(test_qwen3_dense_default_bf16_drift),
        cmocka_unit_test(test_qwen3_moe_matches_llama_cpp),
        cmocka_unit_test(test_qwen35_matches_llama_cpp),
        cmocka_unit_test(test_qwen35_moe_matches_llama_cpp),
        cmocka_unit_test(test_qwen35_chunked_prefill),
        cmocka_unit_test(test_qwen35_prefix_resume),
        cmocka_unit_test(test_qwen3_moe_default_bf16_drift),
        cmocka_unit_test(test_qwen3_moe_engine_invariance),
        cmocka_unit_test(test_gpt_oss_matches_hf_semantics),
        cmocka_unit_test(test_gpt_oss_mxfp4_checkpoint),
        cmocka_unit_test(test_qwen3_real_configs_load_as_shapes),
        cmocka_unit_test(test_qwen3_head_dim_defaults_to_128),
        cmocka_unit_test(test_unknown_architecture_lists_supported),
        cmocka_unit_test(test_foreign_tensors_and_activation_refused),
        cmocka_unit_test(test_tied_config_uses_the_embedding),
        cmocka_unit_test(test_padded_vocab_same_text_both_forms),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
