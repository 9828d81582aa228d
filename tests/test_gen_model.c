/* The random-model generator (tools/gen/gen_model.h): both forms load
 * through pg_model_source, agree with each other (up to the GGUF Q/K row
 * permutation of Llama and dtype rounding), and carry the requested config;
 * Qwen3 and Qwen3-MoE in both forms load as the same model (same logits)
 * with the names, shapes and keys llama.cpp's converter writes (MoE: F32
 * router, 3-D stacked experts); Qwen3.5 dense and MoE written as the
 * published checkpoints and as convert_hf_to_gguf.py converts them (the
 * GGUF derived from the HF form by its rules). Also GGUF-side errors: an unsupported
 * tensor type and metadata that contradicts the weights. */
#include "testutil.h"
#include "model_run.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gen/gen_model.h"
#include "model/arch.h"
#include "model/gguf.h"
#include "model/llama.h"
#include "model/model.h"
#include "model/safetensors.h"
#include "model/source.h"

extern const pg_arch pg_arch_qwen3;     /* model/qwen3.c */
extern const pg_arch pg_arch_qwen3_moe; /* model/qwen3_moe.c */

static char g_hf[4200], g_gguf[4200];

static void gen(pg_gen_model_options *o) {
    const char *d = pg_test_tmpdir();
    snprintf(g_hf, sizeof g_hf, "%s/hf", d);
    snprintf(g_gguf, sizeof g_gguf, "%s/model.gguf", d);
    o->hf_dir = g_hf;
    o->gguf_path = g_gguf;
    if (pg_gen_model_write(o)) fail_msg("gen: %s", pg_last_error());
}

/* Compare every tensor of the two forms, and the HF form to the generator. */
static void compare_forms(const pg_gen_model_options *o, float tol_hf, float tol_gguf) {
    pg_model_source *hf, *gg;
    assert_int_equal(pg_model_source_open(g_hf, &hf), PAGODA_OK);
    assert_int_equal(pg_model_source_open(g_gguf, &gg), PAGODA_OK);
    const pg_model_config *a = pg_model_source_config(hf), *b = pg_model_source_config(gg);
    int hd = o->head_dim ? o->head_dim : o->hidden / o->heads;
    const pg_model_config *cs[2] = {a, b};
    for (int k = 0; k < 2; k++) {
        const pg_model_config *c = cs[k];
        assert_int_equal(c->hidden_size, o->hidden);
        assert_int_equal(c->num_hidden_layers, o->layers);
        assert_int_equal(c->num_attention_heads, o->heads);
        assert_int_equal(c->num_key_value_heads, o->kv_heads);
        assert_int_equal(c->intermediate_size, o->ffn);
        assert_int_equal(c->vocab_size, o->vocab);
        assert_int_equal(c->head_dim, hd);
        assert_int_equal(c->max_position_embeddings, o->max_position);
        assert_int_equal(c->tie_word_embeddings, o->tie);
        assert_true(c->rope_theta == o->rope_theta);
        assert_true(c->rms_norm_eps == o->rms_eps);
        /* GGUF carries Llama-3 scaling as llama.cpp does: only the
         * rope_freqs.weight tensor, no rope.scaling keys (checked below). */
        assert_int_equal(c->rope_scaling, k == 1 ? PG_ROPE_SCALING_NONE : o->rope_scaling);
        assert_int_equal(c->bos_token_id, o->bos_token_id);
        assert_int_equal(c->eos_token_ids[0], o->eos_token_id);
        assert_int_equal(c->num_experts, o->experts);
        if (o->experts) {
            assert_int_equal(c->num_experts_per_tok, o->experts_per_tok);
            assert_int_equal(c->moe_intermediate_size, o->moe_ffn);
            assert_true(c->norm_topk_prob);
            assert_int_equal(c->decoder_sparse_step, 1);
            for (int l = 0; l < o->layers; l++)
                assert_true(pg_model_config_layer_moe(c, l));
        }
        if (k == 0 && o->rope_scaling == PG_ROPE_SCALING_LLAMA3) {
            assert_true(c->rope_factor == o->rope_factor);
            assert_true(c->rope_low_freq_factor == o->rope_low_freq_factor);
            assert_true(c->rope_high_freq_factor == o->rope_high_freq_factor);
            assert_int_equal(c->rope_original_max_position, o->rope_original_max_position);
        }
    }
    /* llama.cpp permutes Q/K rows for Llama only; Qwen3 is NEOX RoPE in GGUF too */
    bool llama = !o->arch || o->arch == &pg_arch_llama;
    assert_ptr_equal(a->arch, llama ? &pg_arch_llama : o->arch);
    assert_ptr_equal(b->arch, a->arch);
    assert_false(a->rope_interleaved);
    assert_int_equal(b->rope_interleaved, llama);
    assert_int_equal(a->torch_dtype, o->hf_dtype);
    bool llama3 = o->rope_scaling == PG_ROPE_SCALING_LLAMA3;
    assert_int_equal(pg_model_source_n_tensors(hf) + (llama3 ? 1 : 0),
                     pg_model_source_n_tensors(gg));
    const pg_tensor *rf = pg_model_source_tensor(gg, "rope_freqs.weight");
    assert_int_equal(rf != NULL, llama3);
    if (rf) { /* llama.cpp divides frequency i by rope_freqs[i] */
        float factors[512];
        assert_int_equal(rf->dtype, PG_F32);
        assert_int_equal(rf->shape[0], hd / 2);
        pg_llama3_rope_factors(o, factors);
        for (int i = 0; i < hd / 2; i++)
            assert_true(((const float *)rf->data)[i] == factors[i]);
    }
    float *x = malloc(65536 * 4), *y = malloc(65536 * 4), *ref = malloc(65536 * 4);
    for (size_t i = 0; i < pg_model_source_n_tensors(hf); i++) {
        const pg_tensor *t = pg_model_source_tensor_at(hf, i);
        const pg_tensor *u = pg_model_source_tensor(gg, t->name);
        if (!u) fail_msg("GGUF lacks %s", t->name);
        assert_int_equal(t->ndim, u->ndim);
        assert_int_equal(t->shape[0], u->shape[0]);
        assert_int_equal(t->dtype, o->hf_dtype);
        int64_t rows = t->ndim == 1 ? 1 : t->shape[0],
                cols = t->ndim == 1 ? t->shape[0] : t->shape[1];
        bool perm = llama && (strstr(t->name, "q_proj") || strstr(t->name, "k_proj"));
        for (int64_t r = 0; r < rows; r++) {
            int64_t gr = r;
            if (perm) {
                int64_t h = r / hd, w = r % hd;
                gr = h * hd + 2 * (w % (hd / 2)) + w / (hd / 2);
            }
            pg_test_tensor_row(t, r, x);
            pg_test_tensor_row(u, gr, y);
            pg_gen_model_row(o, t->name, r, cols, ref);
            float amax = 0;
            for (int64_t c = 0; c < cols; c++)
                amax = fmaxf(amax, fabsf(ref[c]));
            for (int64_t c = 0; c < cols; c++) {
                if (fabsf(x[c] - ref[c]) > tol_hf * fabsf(ref[c]) + 1e-7f)
                    fail_msg("HF %s[%lld][%lld] = %g, generator %g", t->name, (long long)r,
                             (long long)c, x[c], ref[c]);
                if (t->ndim == 1) { /* F32 in GGUF: the exact upcast of the HF value */
                    if (y[c] != x[c])
                        fail_msg("GGUF %s[%lld] = %g, HF %g", t->name, (long long)c, y[c], x[c]);
                    continue;
                }
                float tg = u->dtype == PG_F16 ? 1e-3f : tol_gguf;
                if (fabsf(y[c] - ref[c]) > tg * amax + 1e-6f)
                    fail_msg("GGUF %s[%lld][%lld] = %g, generator %g", t->name, (long long)gr,
                             (long long)c, y[c], ref[c]);
            }
        }
    }
    free(x);
    free(y);
    free(ref);
    pg_model_source_free(hf);
    pg_model_source_free(gg);
}

static void test_f32_both_forms(void **state) {
    (void)state;
    pg_gen_model_options o;
    pg_gen_model_defaults(&o);
    o.seed = 7;
    gen(&o);
    compare_forms(&o, 0, 0);
    /* the weights look like N(0, 0.02)-ish and differ with the seed */
    pg_model_source *hf;
    assert_int_equal(pg_model_source_open(g_hf, &hf), PAGODA_OK);
    const pg_tensor *t = pg_model_source_tensor(hf, "model.layers.1.mlp.up_proj.weight");
    const float *w = t->data;
    double s2 = 0;
    size_t n = t->nbytes / 4;
    for (size_t i = 0; i < n; i++)
        s2 += (double)w[i] * w[i];
    assert_true(fabs(sqrt(s2 / n) - 0.02) < 0.002);
    float other[128];
    pg_gen_model_options o2 = o;
    o2.seed = 8;
    pg_gen_model_row(&o2, t->name, 0, 64, other);
    assert_true(memcmp(other, w, 64 * 4) != 0);
    /* GGUF carries a synthetic vocab the tokenizer can read */
    pg_model_source *gg;
    assert_int_equal(pg_model_source_open(g_gguf, &gg), PAGODA_OK);
    pg_gguf_array toks;
    assert_int_equal(pg_gguf_get_array(pg_model_source_gguf(gg), "tokenizer.ggml.tokens", &toks),
                     PAGODA_OK);
    assert_int_equal(toks.n, 512);
    size_t len;
    assert_memory_equal(pg_gguf_array_str(&toks, 1, &len), "<s>", 3);
    pg_model_source_free(gg);
    pg_model_source_free(hf);
}

static void test_bf16_sharded_q8_llama3(void **state) {
    (void)state;
    pg_gen_model_options o;
    pg_gen_model_defaults(&o);
    o.hidden = 96;
    o.heads = 6;
    o.kv_heads = 2;
    o.head_dim = 32; /* != hidden/heads */
    o.ffn = 160;
    o.layers = 3;
    o.vocab = 300;
    o.tie = false;
    o.rope_scaling = PG_ROPE_SCALING_LLAMA3;
    o.rope_factor = 8;
    o.rope_low_freq_factor = 1;
    o.rope_high_freq_factor = 4;
    o.rope_original_max_position = 64;
    o.rope_theta = 500000.0f;
    o.max_position = 1024;
    o.hf_dtype = PG_BF16;
    o.gguf_dtype = PG_Q8_0;
    o.shards = 3;
    gen(&o);
    compare_forms(&o, 1.0f / 128, 1.0f / 127 * 0.6f); /* half a step + f16 scale rounding */
    pg_model_source *hf;
    assert_int_equal(pg_model_source_open(g_hf, &hf), PAGODA_OK);
    assert_non_null(pg_model_source_tensor(hf, "lm_head.weight"));
    assert_true(pg_model_source_generation(hf)->temperature > 0.5f);
    pg_model_source_free(hf);
    /* the GGUF also holds llama.cpp's rope_freqs tensor; the source hides it
     * because the llama3 keys describe the same thing */
    pg_gguf *g;
    assert_int_equal(pg_gguf_open(g_gguf, &g), PAGODA_OK);
    const pg_gguf_tensor *rf = pg_gguf_find_tensor(g, "rope_freqs.weight");
    assert_non_null(rf);
    assert_int_equal(rf->ne[0], 16);
    float f[16];
    memcpy(f, rf->data, sizeof f);
    assert_true(f[0] == 1.0f);  /* highest frequency: unscaled */
    assert_true(f[15] == 8.0f); /* lowest: divided by the factor */
    for (int i = 1; i < 16; i++)
        assert_true(f[i] >= f[i - 1]);
    pg_gguf_close(g);
}

static void test_q4_0_and_tokenizer_copy(void **state) {
    (void)state;
    pg_gen_model_options o;
    pg_gen_model_defaults(&o);
    o.gguf_dtype = PG_Q4_0;
    o.hf_dtype = PG_F16;
    char vocab[4200], tokdir[4200]; /* pg_test_asset reuses one buffer */
    snprintf(tokdir, sizeof tokdir, "%s", pg_test_asset("llm/stories260K-hf"));
    snprintf(vocab, sizeof vocab, "%s", pg_test_asset("llm/llama2c/stories260K.gguf"));
    o.tokenizer_dir = tokdir;
    o.vocab_gguf = vocab;
    gen(&o);
    compare_forms(&o, 1e-3f, 1.0f / 8 * 1.01f);
    char p[4300];
    snprintf(p, sizeof p, "%s/tokenizer.json", g_hf);
    size_t n1, n2;
    char *a = pg_test_read_file(p, &n1);
    snprintf(p, sizeof p, "%s/tokenizer.json", tokdir);
    char *b = pg_test_read_file(p, &n2);
    assert_int_equal(n1, n2);
    assert_memory_equal(a, b, n1);
    free(a);
    free(b);
    pg_gguf *g, *ref;
    assert_int_equal(pg_gguf_open(g_gguf, &g), PAGODA_OK);
    assert_int_equal(pg_gguf_open(vocab, &ref), PAGODA_OK);
    pg_gguf_array t1, t2;
    assert_int_equal(pg_gguf_get_array(g, "tokenizer.ggml.tokens", &t1), PAGODA_OK);
    assert_int_equal(pg_gguf_get_array(ref, "tokenizer.ggml.tokens", &t2), PAGODA_OK);
    assert_int_equal(t1.n, t2.n);
    for (uint64_t i = 0; i < t1.n; i++) {
        size_t l1, l2;
        const char *s1 = pg_gguf_array_str(&t1, i, &l1), *s2 = pg_gguf_array_str(&t2, i, &l2);
        assert_int_equal(l1, l2);
        assert_memory_equal(s1, s2, l1);
    }
    assert_int_equal(pg_gguf_find_tensor(g, "blk.0.attn_q.weight")->dtype, PG_Q4_0);
    assert_int_equal(pg_gguf_find_tensor(g, "blk.0.attn_norm.weight")->dtype, PG_F32);
    pg_gguf_close(g);
    pg_gguf_close(ref);
    /* a vocab larger than the model is refused */
    o.vocab = 100;
    o.hf_dir = NULL;
    assert_int_equal(pg_gen_model_write(&o), PAGODA_ERR_INVALID_ARG);
    assert_non_null(strstr(pg_last_error(), "512 tokens"));
}

static void test_bad_options(void **state) {
    (void)state;
    pg_gen_model_options o;
    pg_gen_model_defaults(&o);
    o.gguf_path = "/tmp/never-written.gguf";
    o.kv_heads = 3;
    assert_int_equal(pg_gen_model_write(&o), PAGODA_ERR_INVALID_ARG);
    pg_gen_model_defaults(&o);
    o.hf_dir = "/tmp/never";
    o.hf_dtype = PG_Q8_0;
    assert_int_equal(pg_gen_model_write(&o), PAGODA_ERR_INVALID_ARG);
    assert_int_equal(pg_gen_model_preset(&o, "gpt-17"), PAGODA_ERR_INVALID_ARG);
    assert_int_equal(pg_gen_model_preset(&o, "llama-3.2-1b"), PAGODA_OK);
    assert_int_equal(o.hidden, 2048);
    assert_int_equal(o.vocab, 128256);
    assert_int_equal(o.rope_scaling, PG_ROPE_SCALING_LLAMA3);
    assert_ptr_equal(o.arch, &pg_arch_llama);
    /* Qwen3 presets set the architecture and its shape */
    assert_int_equal(pg_gen_model_preset(&o, "qwen3-0.6b"), PAGODA_OK);
    assert_ptr_equal(o.arch, &pg_arch_qwen3);
    assert_int_equal(o.hidden, 1024);
    assert_int_equal(o.ffn, 3072);
    assert_int_equal(o.layers, 28);
    assert_int_equal(o.heads, 16);
    assert_int_equal(o.kv_heads, 8);
    assert_int_equal(o.head_dim, 128);
    assert_int_equal(o.vocab, 151936);
    assert_int_equal(o.max_position, 40960);
    assert_true(o.tie);
    assert_true(o.rope_theta == 1e6f);
    assert_true(o.rms_eps == 1e-6f);
    assert_int_equal(o.rope_scaling, PG_ROPE_SCALING_NONE);
    assert_int_equal(pg_gen_model_preset(&o, "qwen3-1.7b"), PAGODA_OK);
    assert_int_equal(o.hidden, 2048);
    assert_int_equal(o.ffn, 6144);
    assert_int_equal(o.head_dim, 128);
    assert_int_equal(o.vocab, 151936);
    assert_int_equal(o.experts, 0);
    /* Qwen3-30B-A3B's shape */
    assert_int_equal(pg_gen_model_preset(&o, "qwen3-30b-a3b"), PAGODA_OK);
    assert_ptr_equal(o.arch, &pg_arch_qwen3_moe);
    assert_int_equal(o.hidden, 2048);
    assert_int_equal(o.layers, 48);
    assert_int_equal(o.heads, 32);
    assert_int_equal(o.kv_heads, 4);
    assert_int_equal(o.head_dim, 128);
    assert_int_equal(o.ffn, 6144);
    assert_int_equal(o.experts, 128);
    assert_int_equal(o.experts_per_tok, 8);
    assert_int_equal(o.moe_ffn, 768);
    assert_int_equal(o.vocab, 151936);
    assert_int_equal(o.max_position, 40960);
    assert_false(o.tie);
    assert_int_equal(o.hf_dtype, PG_BF16);
    assert_true(o.rope_theta == 1e6f);
    assert_true(o.rms_eps == 1e-6f);
    /* a dense preset after it drops the experts */
    assert_int_equal(pg_gen_model_preset(&o, "llama-3.2-1b"), PAGODA_OK);
    assert_int_equal(o.experts, 0);
    assert_int_equal(o.moe_ffn, 0);
    assert_int_equal(pg_gen_model_set_arch(&o, "mamba"), PAGODA_ERR_INVALID_ARG);
    assert_non_null(strstr(pg_last_error(), "llama, qwen3, qwen3_moe"));
    /* experts only for qwen3_moe, and a consistent count there */
    pg_gen_model_defaults(&o);
    o.gguf_path = "/tmp/never-written.gguf";
    o.experts = 4;
    assert_int_equal(pg_gen_model_write(&o), PAGODA_ERR_INVALID_ARG);
    assert_non_null(strstr(pg_last_error(), "for qwen3_moe"));
    assert_int_equal(pg_gen_model_set_arch(&o, "qwen3_moe"), PAGODA_OK);
    assert_int_equal(o.experts, 4);
    assert_int_equal(o.experts_per_tok, 2);
    o.experts_per_tok = 5;
    assert_int_equal(pg_gen_model_write(&o), PAGODA_ERR_INVALID_ARG);
    assert_non_null(strstr(pg_last_error(), "5 per token"));
    o.experts_per_tok = 2;
    o.ct_bits = 8;
    assert_int_equal(pg_gen_model_write(&o), PAGODA_ERR_INVALID_ARG);
    assert_non_null(strstr(pg_last_error(), "compressed-tensors"));
    /* Llama-3 RoPE scaling is not a Qwen3 thing */
    pg_gen_model_defaults(&o);
    assert_int_equal(pg_gen_model_set_arch(&o, "qwen3"), PAGODA_OK);
    o.rope_scaling = PG_ROPE_SCALING_LLAMA3;
    o.rope_factor = 8;
    o.rope_low_freq_factor = 1;
    o.rope_high_freq_factor = 4;
    o.rope_original_max_position = 64;
    o.gguf_path = "/tmp/never-written.gguf";
    assert_int_equal(pg_gen_model_write(&o), PAGODA_ERR_INVALID_ARG);
}

/* ---- Qwen3 dense */

/* A tiny Qwen3: head_dim 32 != hidden / heads, like the real ones (128 vs
 * 1024 / 16 in 0.6B). */
static void qwen3_options(pg_gen_model_options *o) {
    pg_gen_model_defaults(o);
    assert_int_equal(pg_gen_model_set_arch(o, "qwen3"), PAGODA_OK);
    o->hidden = 64;
    o->heads = 4;
    o->kv_heads = 2;
    o->head_dim = 32;
    o->ffn = 96;
    o->layers = 2;
    o->vocab = 320;
    o->seed = 11;
}

/* Both forms give the same prefill logits (F32 compute): within 1e-4 of each
 * row's largest |logit|. */
static void assert_forms_same_logits(pg_model *mh, pg_model *mg, const int32_t *toks, int T) {
    const int V = pg_model_get_config(mh)->vocab_size;
    float *lh = malloc((size_t)T * V * 4), *lg = malloc((size_t)T * V * 4);
    pg_test_prefill_logits(mh, toks, T, lh);
    pg_test_prefill_logits(mg, toks, T, lg);
    for (int t = 0; t < T; t++) {
        float amax = 0;
        for (int v = 0; v < V; v++)
            amax = fmaxf(amax, fabsf(lh[t * V + v]));
        assert_true(amax > 0);
        for (int v = 0; v < V; v++) {
            float a = lh[t * V + v], b = lg[t * V + v];
            if (fabsf(a - b) > 1e-4f * amax) fail_msg("logits[%d][%d]: HF %g, GGUF %g", t, v, a, b);
        }
    }
    free(lh);
    free(lg);
}

static void test_qwen3_both_forms_same_logits(void **state) {
    (void)state;
    pg_gen_model_options o;
    qwen3_options(&o);
    o.tie = false;
    gen(&o);
    compare_forms(&o, 0, 0); /* F32: every row identical, Q/K not permuted */
    /* HF config as Qwen3's */
    char p[4300];
    snprintf(p, sizeof p, "%s/config.json", g_hf);
    char *cfg = pg_test_read_file(p, NULL);
    assert_non_null(strstr(cfg, "\"architectures\": [\"Qwen3ForCausalLM\"]"));
    assert_non_null(strstr(cfg, "\"model_type\": \"qwen3\""));
    assert_non_null(strstr(cfg, "\"use_sliding_window\": false"));
    assert_non_null(strstr(cfg, "\"rope_theta\": 1000000.0"));
    assert_non_null(strstr(cfg, "\"head_dim\": 32"));
    assert_non_null(strstr(cfg, "\"tie_word_embeddings\": false"));
    free(cfg);

    pg_model_options mo;
    pg_model_options_default(&mo);
    mo.compute = PG_F32;
    pg_model_source *hs, *gs;
    pg_model *mh = pg_test_load(g_hf, &mo, &hs), *mg = pg_test_load(g_gguf, &mo, &gs);
    assert_string_equal(pg_model_arch_name(mh), "qwen3");
    assert_string_equal(pg_model_arch_name(mg), "qwen3");
    /* q_norm / k_norm are there, around 1 */
    const pg_tensor *qn = pg_model_source_tensor(hs, "model.layers.1.self_attn.q_norm.weight");
    assert_non_null(qn);
    assert_int_equal(qn->ndim, 1);
    assert_int_equal(qn->shape[0], 32);
    for (int i = 0; i < 32; i++) {
        float v = ((const float *)qn->data)[i];
        assert_true(v > 0.89f && v < 1.11f);
    }
    assert_null(pg_model_source_tensor(hs, "model.layers.0.self_attn.q_proj.bias"));
    enum { T = 11 };
    const int32_t toks[T] = {1, 17, 300, 5, 42, 42, 7, 319, 128, 64, 2};
    assert_forms_same_logits(mh, mg, toks, T);
    pg_model_free(mh);
    pg_model_free(mg);
    pg_model_source_free(hs);
    pg_model_source_free(gs);
}

/* The GGUF form is what llama.cpp's convert_hf_to_gguf.py writes for
 * Qwen3ForCausalLM: architecture "qwen3", its "qwen3." keys (no vocab_size /
 * rope.dimension_count: those are LlamaModel's), LLM_ARCH_QWEN3 tensor names. */
static void test_qwen3_gguf_names_and_keys(void **state) {
    (void)state;
    pg_gen_model_options o;
    qwen3_options(&o);
    o.hf_dtype = PG_BF16;
    o.gguf_dtype = PG_Q8_0;
    gen(&o);
    compare_forms(&o, 1.0f / 128, 1.0f / 127 * 0.6f);
    pg_gguf *g;
    assert_int_equal(pg_gguf_open(g_gguf, &g), PAGODA_OK);
    const char *arch;
    assert_int_equal(pg_gguf_get_str(g, "general.architecture", &arch, NULL), PAGODA_OK);
    assert_string_equal(arch, "qwen3");
    static const struct {
        const char *key;
        int64_t v;
    } INTS[] = {
        {"qwen3.embedding_length", 64},
        {"qwen3.block_count", 2},
        {"qwen3.feed_forward_length", 96},
        {"qwen3.attention.head_count", 4},
        {"qwen3.attention.head_count_kv", 2},
        {"qwen3.attention.key_length", 32},
        {"qwen3.attention.value_length", 32},
        {"qwen3.context_length", 2048},
        {"general.file_type", 7},
    };
    for (size_t i = 0; i < sizeof INTS / sizeof INTS[0]; i++) {
        int64_t v;
        if (pg_gguf_get_int(g, INTS[i].key, &v)) fail_msg("%s", pg_last_error());
        if (v != INTS[i].v)
            fail_msg("%s = %lld, want %lld", INTS[i].key, (long long)v, (long long)INTS[i].v);
    }
    double d;
    assert_int_equal(pg_gguf_get_float(g, "qwen3.rope.freq_base", &d), PAGODA_OK);
    assert_true(d == 1e6);
    assert_int_equal(pg_gguf_get_float(g, "qwen3.attention.layer_norm_rms_epsilon", &d), PAGODA_OK);
    assert_true((float)d == 1e-6f);
    assert_true(pg_gguf_find_key(g, "qwen3.rope.dimension_count") < 0);
    assert_true(pg_gguf_find_key(g, "qwen3.vocab_size") < 0);
    for (size_t i = 0; i < pg_gguf_n_kv(g); i++)
        assert_true(strncmp(pg_gguf_key_at(g, i), "llama.", 6) != 0);
    /* tensors: 11 per layer + token_embd + output_norm (tied: no output) */
    assert_int_equal(pg_gguf_n_tensors(g), 2 + 11 * 2);
    static const char *const NORMS[] = {"blk.0.attn_q_norm.weight", "blk.0.attn_k_norm.weight",
                                        "blk.1.attn_q_norm.weight", "blk.1.attn_k_norm.weight"};
    for (int i = 0; i < 4; i++) {
        const pg_gguf_tensor *t = pg_gguf_find_tensor(g, NORMS[i]);
        if (!t) fail_msg("no %s", NORMS[i]);
        assert_int_equal(t->n_dims, 1);
        assert_int_equal(t->ne[0], 32);
        assert_int_equal(t->dtype, PG_F32);
    }
    const pg_gguf_tensor *q = pg_gguf_find_tensor(g, "blk.0.attn_q.weight");
    assert_non_null(q);
    assert_int_equal(q->dtype, PG_Q8_0);
    assert_int_equal(q->ne[0], 64);
    assert_int_equal(q->ne[1], 4 * 32);
    assert_int_equal(pg_gguf_find_tensor(g, "blk.1.attn_output.weight")->ne[0], 4 * 32);
    assert_non_null(pg_gguf_find_tensor(g, "token_embd.weight"));
    assert_non_null(pg_gguf_find_tensor(g, "output_norm.weight"));
    assert_non_null(pg_gguf_find_tensor(g, "blk.1.ffn_down.weight"));
    assert_null(pg_gguf_find_tensor(g, "output.weight"));
    assert_null(pg_gguf_find_tensor(g, "blk.0.attn_q.bias"));
    assert_null(pg_gguf_find_tensor(g, "rope_freqs.weight"));
    pg_gguf_close(g);
    /* the Q8_0 file loads and runs */
    pg_model_source *src;
    pg_model *m = pg_test_load(g_gguf, NULL, &src);
    assert_string_equal(pg_model_arch_name(m), "qwen3");
    const int32_t toks[3] = {1, 2, 3};
    float *lg = malloc(3 * 320 * 4);
    pg_test_prefill_logits(m, toks, 3, lg);
    for (int i = 0; i < 3 * 320; i++)
        assert_true(isfinite(lg[i]));
    free(lg);
    pg_model_free(m);
    pg_model_source_free(src);
}

/* ---- Qwen3-MoE */

/* A tiny Qwen3-MoE: Qwen3's attention, 8 experts, top-2, moe_ffn 32 in
 * both layers. */
static void qwen3_moe_options(pg_gen_model_options *o) {
    pg_gen_model_defaults(o);
    assert_int_equal(pg_gen_model_set_arch(o, "qwen3_moe"), PAGODA_OK);
    o->hidden = 64;
    o->heads = 4;
    o->kv_heads = 2;
    o->head_dim = 32;
    o->ffn = 96; /* intermediate_size: in the config only */
    o->experts = 8;
    o->experts_per_tok = 2;
    o->moe_ffn = 32;
    o->layers = 2;
    o->vocab = 320;
    o->tie = false;
    o->seed = 13;
}

static void test_qwen3_moe_both_forms_same_logits(void **state) {
    (void)state;
    pg_gen_model_options o;
    qwen3_moe_options(&o);
    gen(&o);
    compare_forms(&o, 0, 0); /* F32: every expert row of GGUF is the HF one */
    char p[4300];
    snprintf(p, sizeof p, "%s/config.json", g_hf);
    char *cfg = pg_test_read_file(p, NULL);
    static const char *const WANT[] = {
        "\"architectures\": [\"Qwen3MoeForCausalLM\"]",
        "\"model_type\": \"qwen3_moe\"",
        "\"head_dim\": 32",
        "\"use_sliding_window\": false",
        "\"sliding_window\": null",
        "\"rope_theta\": 1000000.0",
        "\"intermediate_size\": 96",
        "\"num_experts\": 8",
        "\"num_experts_per_tok\": 2",
        "\"moe_intermediate_size\": 32",
        "\"norm_topk_prob\": true",
        "\"decoder_sparse_step\": 1",
        "\"mlp_only_layers\": []",
        "\"tie_word_embeddings\": false",
    };
    for (size_t i = 0; i < sizeof WANT / sizeof WANT[0]; i++)
        if (!strstr(cfg, WANT[i])) fail_msg("config.json lacks %s", WANT[i]);
    free(cfg);

    pg_model_options mo;
    pg_model_options_default(&mo);
    mo.compute = PG_F32;
    pg_model_source *hs, *gs;
    pg_model *mh = pg_test_load(g_hf, &mo, &hs), *mg = pg_test_load(g_gguf, &mo, &gs);
    assert_string_equal(pg_model_arch_name(mh), "qwen3_moe");
    assert_string_equal(pg_model_arch_name(mg), "qwen3_moe");
    /* HF: router and per-expert tensors, no dense MLP */
    const pg_tensor *r = pg_model_source_tensor(hs, "model.layers.1.mlp.gate.weight");
    assert_non_null(r);
    assert_int_equal(r->ndim, 2);
    assert_int_equal(r->shape[0], 8);
    assert_int_equal(r->shape[1], 64);
    const pg_tensor *d =
        pg_model_source_tensor(hs, "model.layers.1.mlp.experts.7.down_proj.weight");
    assert_non_null(d);
    assert_int_equal(d->shape[0], 64);
    assert_int_equal(d->shape[1], 32);
    const pg_tensor *u = pg_model_source_tensor(hs, "model.layers.0.mlp.experts.0.up_proj.weight");
    assert_non_null(u);
    assert_int_equal(u->shape[0], 32);
    assert_int_equal(u->shape[1], 64);
    assert_null(pg_model_source_tensor(hs, "model.layers.0.mlp.gate_proj.weight"));
    assert_null(pg_model_source_tensor(hs, "model.layers.0.mlp.experts.8.up_proj.weight"));
    /* 9 per layer (8 + router) + 3 * 8 expert tensors + embed, norm, lm_head */
    assert_int_equal(pg_model_source_n_tensors(hs), 2 * (9 + 24) + 3);
    enum { T = 13 };
    const int32_t toks[T] = {1, 17, 300, 5, 42, 42, 7, 319, 128, 64, 2, 250, 9};
    assert_forms_same_logits(mh, mg, toks, T);
    pg_model_free(mh);
    pg_model_free(mg);
    pg_model_source_free(hs);
    pg_model_source_free(gs);
}

/* gpt_oss: both forms give the same logits over a prompt longer than the
 * sliding window (sinks, alternating windows, YaRN, biases, clamped
 * SwiGLU, router softmax over the top-k); the GGUF keys and tensors are
 * llama.cpp's (post_attention_norm, attn_sinks, 2-D expert biases). */
static void test_gpt_oss_both_forms_same_logits(void **state) {
    (void)state;
    pg_gen_model_options o;
    pg_gen_model_defaults(&o);
    assert_int_equal(pg_gen_model_set_arch(&o, "gpt_oss"), PAGODA_OK);
    o.hidden = 64;
    o.heads = 4;
    o.kv_heads = 2;
    o.head_dim = 16;
    o.experts = 4;
    o.experts_per_tok = 2;
    o.moe_ffn = 32;
    o.layers = 3;
    o.vocab = 320;
    o.sliding_window = 4;
    o.init_std = 0.2f; /* large enough for the SwiGLU clamp to act */
    o.seed = 21;
    gen(&o);
    char p[4300];
    snprintf(p, sizeof p, "%s/config.json", g_hf);
    char *cfg = pg_test_read_file(p, NULL);
    static const char *const WANT[] = {
        "\"architectures\": [\"GptOssForCausalLM\"]",
        "\"num_local_experts\": 4",
        "\"intermediate_size\": 32",
        "\"sliding_window\": 4",
        "\"layer_types\": [\"sliding_attention\", \"full_attention\", \"sliding_attention\"]",
        "\"truncate\": false",
        "\"attention_bias\": true",
    };
    for (size_t i = 0; i < sizeof WANT / sizeof WANT[0]; i++)
        if (!strstr(cfg, WANT[i])) fail_msg("config.json lacks %s", WANT[i]);
    free(cfg);
    pg_model_options mo;
    pg_model_options_default(&mo);
    mo.compute = PG_F32;
    pg_model_source *hs, *gs;
    pg_model *mh = pg_test_load(g_hf, &mo, &hs), *mg = pg_test_load(g_gguf, &mo, &gs);
    assert_string_equal(pg_model_arch_name(mh), "gpt_oss");
    assert_string_equal(pg_model_arch_name(mg), "gpt_oss");
    const pg_tensor *b = pg_model_source_tensor(gs, "model.layers.2.mlp.experts.3.gate_proj.bias");
    assert_non_null(b);
    assert_int_equal(b->ndim, 1);
    assert_int_equal(b->shape[0], 32);
    assert_non_null(pg_model_source_tensor(gs, "model.layers.1.self_attn.sinks"));
    assert_int_equal(pg_model_get_config(mg)->sliding_window, 4);
    enum { T = 13 };
    const int32_t toks[T] = {1, 17, 300, 5, 42, 42, 7, 319, 128, 64, 2, 250, 9};
    assert_forms_same_logits(mh, mg, toks, T);
    pg_model_free(mh);
    pg_model_free(mg);
    pg_model_source_free(hs);
    pg_model_source_free(gs);
}

/* The GGUF form is what convert_hf_to_gguf.py (Qwen3MoeModel) writes:
 * "qwen3moe" with the qwen3 keys plus expert_count / expert_used_count /
 * expert_feed_forward_length, the router ffn_gate_inp kept F32, the experts
 * of a layer stacked as 3-D ffn_{gate,up,down}_exps [cols, rows, experts]
 * in the file's type (Q8_0 blocks along the rows, expert e's rows
 * contiguous). The Q8_0 file loads and runs. */
static void test_qwen3_moe_gguf_names_and_keys(void **state) {
    (void)state;
    pg_gen_model_options o;
    qwen3_moe_options(&o);
    o.hf_dtype = PG_BF16;
    o.gguf_dtype = PG_Q8_0;
    gen(&o);
    compare_forms(&o, 1.0f / 128, 1.0f / 127 * 0.6f);
    pg_gguf *g;
    assert_int_equal(pg_gguf_open(g_gguf, &g), PAGODA_OK);
    const char *arch;
    assert_int_equal(pg_gguf_get_str(g, "general.architecture", &arch, NULL), PAGODA_OK);
    assert_string_equal(arch, "qwen3moe");
    static const struct {
        const char *key;
        int64_t v;
    } INTS[] = {
        {"qwen3moe.embedding_length", 64},
        {"qwen3moe.block_count", 2},
        {"qwen3moe.feed_forward_length", 96},
        {"qwen3moe.attention.head_count", 4},
        {"qwen3moe.attention.head_count_kv", 2},
        {"qwen3moe.attention.key_length", 32},
        {"qwen3moe.attention.value_length", 32},
        {"qwen3moe.context_length", 2048},
        {"qwen3moe.expert_count", 8},
        {"qwen3moe.expert_used_count", 2},
        {"qwen3moe.expert_feed_forward_length", 32},
        {"general.file_type", 7},
        {"general.quantization_version", 2},
    };
    for (size_t i = 0; i < sizeof INTS / sizeof INTS[0]; i++) {
        int64_t v;
        if (pg_gguf_get_int(g, INTS[i].key, &v)) fail_msg("%s", pg_last_error());
        if (v != INTS[i].v)
            fail_msg("%s = %lld, want %lld", INTS[i].key, (long long)v, (long long)INTS[i].v);
    }
    double dv;
    assert_int_equal(pg_gguf_get_float(g, "qwen3moe.rope.freq_base", &dv), PAGODA_OK);
    assert_true(dv == 1e6);
    assert_int_equal(pg_gguf_get_float(g, "qwen3moe.attention.layer_norm_rms_epsilon", &dv),
                     PAGODA_OK);
    assert_true((float)dv == 1e-6f);
    for (size_t i = 0; i < pg_gguf_n_kv(g); i++)
        assert_true(strncmp(pg_gguf_key_at(g, i), "qwen3.", 6) != 0);
    /* per layer: attn_norm, q, k, v, output, q_norm, k_norm, ffn_norm,
     * ffn_gate_inp, 3 x _exps; + token_embd, output_norm, output */
    assert_int_equal(pg_gguf_n_tensors(g), 3 + 12 * 2);
    const pg_gguf_tensor *gi = pg_gguf_find_tensor(g, "blk.1.ffn_gate_inp.weight");
    assert_non_null(gi);
    assert_int_equal(gi->dtype, PG_F32);
    assert_int_equal(gi->n_dims, 2);
    assert_int_equal(gi->ne[0], 64);
    assert_int_equal(gi->ne[1], 8);
    static const struct {
        const char *name;
        int64_t ne0, ne1;
    } EXPS[] = {{"blk.0.ffn_gate_exps.weight", 64, 32},
                {"blk.0.ffn_up_exps.weight", 64, 32},
                {"blk.1.ffn_down_exps.weight", 32, 64}};
    for (int i = 0; i < 3; i++) {
        const pg_gguf_tensor *t = pg_gguf_find_tensor(g, EXPS[i].name);
        if (!t) fail_msg("no %s", EXPS[i].name);
        assert_int_equal(t->dtype, PG_Q8_0);
        assert_int_equal(t->n_dims, 3);
        assert_int_equal(t->ne[0], EXPS[i].ne0);
        assert_int_equal(t->ne[1], EXPS[i].ne1);
        assert_int_equal(t->ne[2], 8);
        assert_int_equal(t->nbytes, (size_t)(EXPS[i].ne0 / 32 * 34 * EXPS[i].ne1 * 8));
    }
    assert_int_equal(pg_gguf_find_tensor(g, "blk.0.attn_q_norm.weight")->dtype, PG_F32);
    assert_int_equal(pg_gguf_find_tensor(g, "blk.0.attn_q.weight")->dtype, PG_Q8_0);
    assert_non_null(pg_gguf_find_tensor(g, "output.weight"));
    assert_null(pg_gguf_find_tensor(g, "blk.0.ffn_gate.weight"));
    assert_null(pg_gguf_find_tensor(g, "blk.0.ffn_down.weight"));
    /* row 3 of expert 5 in the stacked tensor is HF expert 5's row 3 */
    const pg_gguf_tensor *up = pg_gguf_find_tensor(g, "blk.1.ffn_up_exps.weight");
    float row[64], ref[64];
    pg_dequant_row(PG_Q8_0, (const uint8_t *)up->data + (size_t)(5 * 32 + 3) * 2 * 34, row, 64);
    pg_gen_model_row(&o, "model.layers.1.mlp.experts.5.up_proj.weight", 3, 64, ref);
    float amax = 0;
    for (int c = 0; c < 64; c++)
        amax = fmaxf(amax, fabsf(ref[c]));
    for (int c = 0; c < 64; c++)
        if (fabsf(row[c] - ref[c]) > amax / 127 * 0.6f) fail_msg("expert row [%d] %g", c, row[c]);
    pg_gguf_close(g);
    /* the F32 router is the exact upcast of the BF16 HF router */
    pg_model_source *hs, *gs;
    assert_int_equal(pg_model_source_open(g_hf, &hs), PAGODA_OK);
    assert_int_equal(pg_model_source_open(g_gguf, &gs), PAGODA_OK);
    const pg_tensor *rh = pg_model_source_tensor(hs, "model.layers.0.mlp.gate.weight"),
                    *rg = pg_model_source_tensor(gs, "model.layers.0.mlp.gate.weight");
    assert_int_equal(rh->dtype, PG_BF16);
    assert_int_equal(rg->dtype, PG_F32);
    for (int i = 0; i < 8 * 64; i++)
        assert_true(((const float *)rg->data)[i] ==
                    pg_bf16_to_f32(((const uint16_t *)rh->data)[i]));
    pg_model_source_free(hs);
    pg_model_source_free(gs);
    /* the Q8_0 file loads and runs */
    pg_model_source *src;
    pg_model *m = pg_test_load(g_gguf, NULL, &src);
    assert_string_equal(pg_model_arch_name(m), "qwen3_moe");
    const int32_t toks[5] = {1, 2, 3, 200, 7};
    float *lg = malloc(5 * 320 * 4);
    pg_test_prefill_logits(m, toks, 5, lg);
    for (int i = 0; i < 5 * 320; i++)
        assert_true(isfinite(lg[i]));
    free(lg);
    pg_model_free(m);
    pg_model_source_free(src);
}

/* --from a Qwen3 checkpoint converts it (a Qwen3 out, the same weights); a
 * Llama GGUF converts back to its HF form (Q/K rows un-permuted). */
static void test_from_qwen3_and_llama_gguf(void **state) {
    (void)state;
    pg_gen_model_options o;
    qwen3_options(&o);
    gen(&o);
    pg_model_source *src;
    assert_int_equal(pg_model_source_open(g_hf, &src), PAGODA_OK);
    pg_gen_model_options c;
    pg_gen_model_defaults(&c);
    assert_int_equal(pg_gen_model_options_from(&c, src), PAGODA_OK);
    assert_ptr_equal(c.arch, &pg_arch_qwen3);
    assert_int_equal(c.head_dim, 32);
    char out[4300];
    snprintf(out, sizeof out, "%s.from.gguf", g_gguf);
    c.gguf_path = out;
    assert_int_equal(pg_gen_model_write(&c), PAGODA_OK);
    pg_gguf *a, *b;
    assert_int_equal(pg_gguf_open(g_gguf, &a), PAGODA_OK);
    assert_int_equal(pg_gguf_open(out, &b), PAGODA_OK);
    assert_int_equal(pg_gguf_n_tensors(a), pg_gguf_n_tensors(b));
    for (size_t i = 0; i < pg_gguf_n_tensors(a); i++) {
        const pg_gguf_tensor *x = pg_gguf_tensor_at(a, i);
        const pg_gguf_tensor *y = pg_gguf_find_tensor(b, x->name);
        if (!y) fail_msg("converted GGUF lacks %s", x->name);
        assert_int_equal(x->nbytes, y->nbytes);
        assert_memory_equal(x->data, y->data, x->nbytes);
    }
    pg_gguf_close(a);
    pg_gguf_close(b);
    pg_model_source_free(src);
    /* and --from a Llama GGUF un-permutes its Q/K rows: the HF form comes back */
    pg_gen_model_defaults(&o);
    gen(&o);
    assert_int_equal(pg_model_source_open(g_gguf, &src), PAGODA_OK);
    pg_gen_model_defaults(&c);
    assert_int_equal(pg_gen_model_options_from(&c, src), PAGODA_OK);
    assert_ptr_equal(c.arch, &pg_arch_llama);
    snprintf(out, sizeof out, "%s.from", g_hf);
    c.hf_dir = out;
    assert_int_equal(pg_gen_model_write(&c), PAGODA_OK);
    char p1[4400], p2[4400];
    snprintf(p1, sizeof p1, "%s/model.safetensors", g_hf);
    snprintf(p2, sizeof p2, "%s/model.safetensors", out);
    size_t n1, n2;
    char *x1 = pg_test_read_file(p1, &n1), *x2 = pg_test_read_file(p2, &n2);
    assert_int_equal(n1, n2);
    assert_memory_equal(x1, x2, n1);
    free(x1);
    free(x2);
    pg_model_source_free(src);
    /* a Qwen3-MoE GGUF converts back to its HF form: experts split from the 3-D tensors */
    qwen3_moe_options(&o);
    gen(&o);
    assert_int_equal(pg_model_source_open(g_gguf, &src), PAGODA_OK);
    pg_gen_model_defaults(&c);
    assert_int_equal(pg_gen_model_options_from(&c, src), PAGODA_OK);
    assert_ptr_equal(c.arch, &pg_arch_qwen3_moe);
    assert_int_equal(c.experts, 8);
    assert_int_equal(c.experts_per_tok, 2);
    assert_int_equal(c.moe_ffn, 32);
    snprintf(out, sizeof out, "%s.from-moe", g_hf);
    c.hf_dir = out;
    assert_int_equal(pg_gen_model_write(&c), PAGODA_OK);
    snprintf(p1, sizeof p1, "%s/model.safetensors", g_hf);
    snprintf(p2, sizeof p2, "%s/model.safetensors", out);
    x1 = pg_test_read_file(p1, &n1);
    x2 = pg_test_read_file(p2, &n2);
    assert_int_equal(n1, n2);
    assert_memory_equal(x1, x2, n1);
    free(x1);
    free(x2);
    pg_model_source_free(src);
}

/* ---- GGUF files that the source must refuse */

static uint8_t *g_buf;
static size_t g_len;
static size_t find(const char *s) {
    size_t n = strlen(s);
    for (size_t i = 0; i + n <= g_len; i++)
        if (!memcmp(g_buf + i, s, n)) return i;
    fail_msg("'%s' not found", s);
    return 0;
}
static void expect_src_fail(pagoda_status want, const char *substr) {
    char p[4300];
    snprintf(p, sizeof p, "%s.bad.gguf", g_gguf);
    pg_test_write_file(p, g_buf, g_len);
    pg_model_source *src = (pg_model_source *)1;
    pagoda_status s = pg_model_source_open(p, &src);
    if (s != want || !strstr(pg_last_error(), substr) || !strstr(pg_last_error(), ".bad.gguf"))
        fail_msg("want %d '%s', got %d: %s", want, substr, s, pg_last_error());
    assert_null(src);
}

static void test_gguf_refused(void **state) {
    (void)state;
    pg_gen_model_options o;
    pg_gen_model_defaults(&o);
    o.hidden = 256;
    o.heads = 4;
    o.kv_heads = 4;
    o.ffn = 256;
    o.layers = 2;
    o.vocab = 64;
    gen(&o);
    uint8_t *orig = (uint8_t *)pg_test_read_file(g_gguf, &g_len);
    g_buf = malloc(g_len);
    /* tensor info: name, u32 n_dims, ne[2], u32 type */
    memcpy(g_buf, orig, g_len);
    size_t at = find("blk.1.attn_q.weight") + strlen("blk.1.attn_q.weight") + 4 + 16;
    uint32_t iq3s = 21; /* a type pagoda does not read (Q4_K, 12, it does) */
    memcpy(g_buf + at, &iq3s, 4);
    expect_src_fail(PAGODA_ERR_UNSUPPORTED,
                    "tensor 'blk.1.attn_q.weight' has unsupported tensor type IQ3_S (pagoda "
                    "reads F32, F16, BF16, Q8_0, Q4_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL, "
                    "IQ4_XS, MXFP4)");
    /* metadata that contradicts the weights */
    uint32_t v;
    memcpy(g_buf, orig, g_len);
    at = find("llama.block_count") + strlen("llama.block_count") + 4;
    v = 3;
    memcpy(g_buf + at, &v, 4);
    expect_src_fail(PAGODA_ERR_FORMAT, "missing tensor 'model.layers.2.input_layernorm.weight'");
    memcpy(g_buf, orig, g_len);
    at = find("llama.attention.head_count_kv") + strlen("llama.attention.head_count_kv") + 4;
    v = 2;
    memcpy(g_buf + at, &v, 4);
    expect_src_fail(PAGODA_ERR_FORMAT,
                    "k_proj.weight' has shape [256, 256] but the config implies [128, 256]");
    memcpy(g_buf, orig, g_len);
    at = find("general.architecture") + strlen("general.architecture") + 4 + 8;
    memcpy(g_buf + at, "bogus", 5);
    expect_src_fail(PAGODA_ERR_UNSUPPORTED, "GGUF architecture 'bogus'");
    free(orig);
    free(g_buf);
}

/* ---- Qwen3.5 ----------------------------------------------------------------------- */

/* A tiny Qwen3.5: 4 layers (3 Gated DeltaNet, 1 gated full attention),
 * 2 key / 4 value linear heads (so the GGUF V-head tiling moves rows), head_dim
 * 32 (8 rotary dims), an MTP block; the MoE adds 4 experts, top-2, a shared
 * expert and no intermediate_size (as the published config). */
static void q35_options(pg_gen_model_options *o, bool moe) {
    pg_gen_model_defaults(o);
    assert_int_equal(pg_gen_model_set_arch(o, moe ? "qwen3_5_moe" : "qwen3_5"), PAGODA_OK);
    o->hidden = 64;
    o->heads = 4;
    o->kv_heads = 2;
    o->head_dim = 32;
    o->ffn = moe ? 0 : 96;
    o->layers = 4;
    o->vocab = 320;
    o->tie = false;
    o->seed = moe ? 41 : 31;
    if (moe) {
        o->experts = 4;
        o->experts_per_tok = 2;
        o->moe_ffn = 32;
        o->shared_ffn = 32;
    }
    o->hf_dtype = PG_BF16; /* as the oracle: BF16 checkpoint, F32 GGUF */
    o->gguf_dtype = PG_F32;
}

/* llama.cpp's GGUF name of a Qwen3.5 HF tensor (gguf-py's tensor map, the
 * MTP block as blk.{layers}); *expert: the expert index of a per-expert
 * tensor stacked into a 3-D one, else -1. */
static void q35_gguf_name(const char *hf, int layers, char *out, size_t cap, int *expert) {
    static const char *const MAP[][2] = {
        {"input_layernorm.weight", "attn_norm.weight"},
        {"post_attention_layernorm.weight", "post_attention_norm.weight"},
        {"self_attn.q_proj.weight", "attn_q.weight"},
        {"self_attn.k_proj.weight", "attn_k.weight"},
        {"self_attn.v_proj.weight", "attn_v.weight"},
        {"self_attn.o_proj.weight", "attn_output.weight"},
        {"self_attn.q_norm.weight", "attn_q_norm.weight"},
        {"self_attn.k_norm.weight", "attn_k_norm.weight"},
        {"linear_attn.in_proj_qkv.weight", "attn_qkv.weight"},
        {"linear_attn.in_proj_z.weight", "attn_gate.weight"},
        {"linear_attn.in_proj_b.weight", "ssm_beta.weight"},
        {"linear_attn.in_proj_a.weight", "ssm_alpha.weight"},
        {"linear_attn.conv1d.weight", "ssm_conv1d.weight"},
        {"linear_attn.dt_bias", "ssm_dt.bias"},
        {"linear_attn.A_log", "ssm_a"},
        {"linear_attn.norm.weight", "ssm_norm.weight"},
        {"linear_attn.out_proj.weight", "ssm_out.weight"},
        {"mlp.gate_proj.weight", "ffn_gate.weight"},
        {"mlp.up_proj.weight", "ffn_up.weight"},
        {"mlp.down_proj.weight", "ffn_down.weight"},
        {"mlp.gate.weight", "ffn_gate_inp.weight"},
        {"mlp.shared_expert.gate_proj.weight", "ffn_gate_shexp.weight"},
        {"mlp.shared_expert.up_proj.weight", "ffn_up_shexp.weight"},
        {"mlp.shared_expert.down_proj.weight", "ffn_down_shexp.weight"},
        {"mlp.shared_expert_gate.weight", "ffn_gate_inp_shexp.weight"},
    };
    *expert = -1;
    int l, k = 0;
    const char *rest = NULL;
    if (!strcmp(hf, "model.language_model.embed_tokens.weight")) {
        snprintf(out, cap, "token_embd.weight");
        return;
    }
    if (!strcmp(hf, "model.language_model.norm.weight")) {
        snprintf(out, cap, "output_norm.weight");
        return;
    }
    if (!strcmp(hf, "lm_head.weight")) {
        snprintf(out, cap, "output.weight");
        return;
    }
    static const char *const MTP[][2] = {{"mtp.fc.weight", "nextn.eh_proj.weight"},
                                         {"mtp.norm.weight", "nextn.shared_head_norm.weight"},
                                         {"mtp.pre_fc_norm_embedding.weight", "nextn.enorm.weight"},
                                         {"mtp.pre_fc_norm_hidden.weight", "nextn.hnorm.weight"}};
    for (size_t i = 0; i < 4; i++)
        if (!strcmp(hf, MTP[i][0])) {
            snprintf(out, cap, "blk.%d.%s", layers, MTP[i][1]);
            return;
        }
    if (sscanf(hf, "model.language_model.layers.%d.%n", &l, &k) == 1 && k > 0)
        rest = hf + k;
    else if (sscanf(hf, "mtp.layers.%d.%n", &l, &k) == 1 && k > 0)
        rest = hf + k, l += layers;
    if (!rest) fail_msg("unexpected HF tensor %s", hf);
    int e, m = 0;
    char w[64];
    if (sscanf(rest, "mlp.experts.%d.%63[a-z_]%n", &e, w, &m) == 2 &&
        !strcmp(rest + m, ".weight")) {
        *expert = e;
        snprintf(out, cap, "blk.%d.ffn_%s_exps.weight", l,
                 !strcmp(w, "gate_proj") ? "gate"
                 : !strcmp(w, "up_proj") ? "up"
                                         : "down");
        return;
    }
    for (size_t i = 0; i < sizeof MAP / sizeof MAP[0]; i++)
        if (!strcmp(rest, MAP[i][0])) {
            snprintf(out, cap, "blk.%d.%s", l, MAP[i][1]);
            return;
        }
    fail_msg("unexpected HF tensor %s", hf);
}

static float *dequant_all(pg_dtype t, const void *data, int64_t rows, int64_t cols) {
    float *x = malloc((size_t)(rows * cols) * sizeof *x);
    assert_non_null(x);
    pg_test_dequant_rows(t, data, rows, cols, x);
    return x;
}

/* Where convert_hf_to_gguf.py's _reorder_v_heads puts element i of a block
 * of n_v heads x hd: HF groups the V heads by K head ([n_k, r, hd]); GGUF
 * has the two head axes swapped ([r, n_k, hd]). */
static int64_t tiled_dst(const pg_gen_model_options *o, int64_t i, int64_t hd) {
    const int64_t nk = o->lin_k_heads, r = o->lin_v_heads / nk;
    const int64_t h = i / hd, k = h / r, j = h % r;
    return (j * nk + k) * hd + i % hd;
}

/* The GGUF form is derived from the HF form by the converter's rules: every
 * HF tensor (read raw from model.safetensors) maps to its GGUF tensor, whose
 * values are the checkpoint's upcast to F32, + 1 for the Qwen3_5RMSNorm
 * weights (not linear_attn.norm), -exp(A_log) for ssm_a, with the V heads
 * tiled (attn_qkv's V rows, attn_gate, ssm_alpha / ssm_beta, ssm_a, ssm_dt,
 * ssm_conv1d's V channels, ssm_out's columns), conv1d squeezed, experts
 * stacked; no other GGUF tensor. The GGUF must be F32. */
static void check_q35_gguf_from_hf(const pg_gen_model_options *o) {
    char p[4300];
    snprintf(p, sizeof p, "%s/model.safetensors", g_hf);
    pg_safetensors *st;
    pg_gguf *g;
    assert_int_equal(pg_safetensors_open(p, &st), PAGODA_OK);
    assert_int_equal(pg_gguf_open(g_gguf, &g), PAGODA_OK);
    const int64_t qk = 2 * (int64_t)o->lin_k_heads * o->lin_k_dim, dv = o->lin_v_dim;
    size_t want_gguf = 0;
    for (size_t i = 0; i < pg_safetensors_n_tensors(st); i++) {
        const pg_tensor *t = pg_safetensors_tensor_at(st, i);
        const char *nm = t->name;
        char gname[160];
        int e;
        q35_gguf_name(nm, o->layers, gname, sizeof gname, &e);
        if (e <= 0) want_gguf++;
        const pg_gguf_tensor *u = pg_gguf_find_tensor(g, gname);
        if (!u) fail_msg("%s: no GGUF %s", nm, gname);
        assert_int_equal(t->dtype, o->hf_dtype);
        if (u->dtype != PG_F32) fail_msg("%s is not F32", gname);
        /* shapes: GGUF ne = the HF shape reversed (conv1d squeezed, experts stacked) */
        int64_t rows = t->ndim == 1 ? 1 : t->shape[0], cols = t->shape[t->ndim - 1];
        bool conv = strstr(nm, "conv1d") != NULL;
        if (conv) {
            assert_int_equal(t->ndim, 3);
            assert_int_equal(t->shape[1], 1);
            assert_int_equal(u->n_dims, 2);
        } else {
            assert_int_equal(u->n_dims, t->ndim + (e >= 0));
            for (int d = 0; d < t->ndim; d++)
                assert_int_equal(u->ne[d], t->shape[t->ndim - 1 - d]);
        }
        assert_int_equal(u->ne[0], cols);
        if (u->n_dims > 1) assert_int_equal(u->ne[1], rows);
        if (e >= 0) assert_int_equal(u->ne[2], o->experts);
        float *h = dequant_all(t->dtype, t->data, rows, cols);
        float *gv = dequant_all(PG_F32, (const float *)u->data + (e >= 0 ? e * rows * cols : 0),
                                rows, cols);
        float *want = malloc((size_t)(rows * cols) * sizeof *want);
        /* the converter's test, on the name it has mapped by then */
        size_t n = strlen(gname);
        bool one_plus =
            n > 11 && !strcmp(gname + n - 11, "norm.weight") && !strstr(gname, "ssm_norm.weight");
        bool a_log = strstr(nm, ".A_log") != NULL;
        for (int64_t r = 0; r < rows; r++)
            for (int64_t c = 0; c < cols; c++) {
                float x = h[r * cols + c];
                x = one_plus ? 1.0f + x : a_log ? -expf(x) : x;
                int64_t dr = r, dc = c;
                if (strstr(nm, "in_proj_qkv") || conv)
                    dr = r < qk ? r : qk + tiled_dst(o, r - qk, dv);
                else if (strstr(nm, "in_proj_z"))
                    dr = tiled_dst(o, r, dv);
                else if (strstr(nm, "in_proj_a") || strstr(nm, "in_proj_b"))
                    dr = tiled_dst(o, r, 1);
                else if (a_log || strstr(nm, "dt_bias"))
                    dc = tiled_dst(o, c, 1);
                else if (strstr(nm, "out_proj"))
                    dc = tiled_dst(o, c, dv);
                want[dr * cols + dc] = x;
            }
        for (int64_t k = 0; k < rows * cols; k++)
            if (gv[k] != want[k])
                fail_msg("%s[%lld] = %g, from HF %s: %g", gname, (long long)k, gv[k], nm, want[k]);
        free(h);
        free(gv);
        free(want);
    }
    assert_int_equal(pg_gguf_n_tensors(g), want_gguf);
    pg_gguf_close(g);
    pg_safetensors_close(st);
}

/* The HF checkpoint is laid out as published: text_config, tensors under
 * model.language_model., zero-centred norms, A_log, conv1d [C, 1, K], q_proj
 * [2 * heads * head_dim, hidden], the MTP block. */
static void check_q35_hf_layout(const pg_gen_model_options *o) {
    char p[4300];
    snprintf(p, sizeof p, "%s/config.json", g_hf);
    char *cfg = pg_test_read_file(p, NULL);
    bool moe = o->experts > 0;
    const char *want[] = {
        moe ? "\"Qwen3_5MoeForConditionalGeneration\"" : "\"Qwen3_5ForConditionalGeneration\"",
        moe ? "\"model_type\": \"qwen3_5_moe\"" : "\"model_type\": \"qwen3_5\"",
        moe ? "\"model_type\": \"qwen3_5_moe_text\"" : "\"model_type\": \"qwen3_5_text\"",
        "\"text_config\": {",
        "\"attn_output_gate\": true",
        "\"layer_types\": [\n      \"linear_attention\",\n      \"linear_attention\",\n      "
        "\"linear_attention\",\n      \"full_attention\"\n    ]",
        "\"full_attention_interval\": 4",
        "\"linear_num_key_heads\": 2",
        "\"linear_num_value_heads\": 4",
        "\"linear_key_head_dim\": 16",
        "\"linear_conv_kernel_dim\": 4",
        "\"mtp_num_hidden_layers\": 1",
        "\"mrope_section\": [\n        2,\n        1,\n        1\n      ]",
        "\"mrope_interleaved\": true",
        "\"partial_rotary_factor\": 0.25",
        "\"rope_theta\": 10000000,",
        "\"rope_type\": \"default\"",
        "\"bos_token_id\": null",
        "\"tie_word_embeddings\": false",
        moe ? "\"shared_expert_intermediate_size\": 32" : "\"intermediate_size\": 96",
        moe ? "\"num_experts\": 4" : "\"dtype\": \"bfloat16\"",
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
        if (!strstr(cfg, want[i])) fail_msg("config.json lacks %s", want[i]);
    if (moe) assert_null(strstr(cfg, "\"intermediate_size\""));
    free(cfg);
    snprintf(p, sizeof p, "%s/model.safetensors", g_hf);
    pg_safetensors *st;
    assert_int_equal(pg_safetensors_open(p, &st), PAGODA_OK);
    static const struct {
        const char *name;
        int ndim;
        int64_t s0, s1, s2;
    } SHAPES[] = {
        {"model.language_model.embed_tokens.weight", 2, 320, 64, 0},
        {"lm_head.weight", 2, 320, 64, 0},
        {"model.language_model.layers.0.linear_attn.A_log", 1, 4, 0, 0},
        {"model.language_model.layers.1.linear_attn.conv1d.weight", 3, 128, 1, 4},
        {"model.language_model.layers.2.linear_attn.in_proj_qkv.weight", 2, 128, 64, 0},
        {"model.language_model.layers.2.linear_attn.in_proj_z.weight", 2, 64, 64, 0},
        {"model.language_model.layers.2.linear_attn.in_proj_b.weight", 2, 4, 64, 0},
        {"model.language_model.layers.2.linear_attn.norm.weight", 1, 16, 0, 0},
        {"model.language_model.layers.3.self_attn.q_proj.weight", 2, 256, 64, 0},
        {"model.language_model.layers.3.self_attn.o_proj.weight", 2, 64, 128, 0},
        {"mtp.fc.weight", 2, 64, 128, 0},
        {"mtp.layers.0.self_attn.q_proj.weight", 2, 256, 64, 0},
        {"mtp.pre_fc_norm_hidden.weight", 1, 64, 0, 0},
    };
    for (size_t i = 0; i < sizeof SHAPES / sizeof SHAPES[0]; i++) {
        const pg_tensor *t = pg_safetensors_find(st, SHAPES[i].name);
        if (!t) fail_msg("HF lacks %s", SHAPES[i].name);
        int64_t s[3] = {SHAPES[i].s0, SHAPES[i].s1, SHAPES[i].s2};
        assert_int_equal(t->ndim, SHAPES[i].ndim);
        for (int d = 0; d < t->ndim; d++)
            assert_int_equal(t->shape[d], s[d]);
    }
    if (moe) {
        const pg_tensor *sg =
            pg_safetensors_find(st, "model.language_model.layers.3.mlp.shared_expert_gate.weight");
        assert_non_null(sg);
        assert_int_equal(sg->ndim, 2);
        assert_int_equal(sg->shape[0], 1);
        assert_int_equal(sg->shape[1], 64);
        assert_non_null(pg_safetensors_find(st, "mtp.layers.0.mlp.experts.3.down_proj.weight"));
        assert_non_null(
            pg_safetensors_find(st, "model.language_model.layers.0.mlp.experts.3.up_proj.weight"));
    }
    /* zero-centred RMSNorm weights, the gated norm around 1, A_log = log(A), A in [1, 16] */
    float x[64];
    const pg_tensor *t =
        pg_safetensors_find(st, "model.language_model.layers.1.input_layernorm.weight");
    pg_test_tensor_row(t, 0, x);
    for (int i = 0; i < 64; i++)
        assert_true(fabsf(x[i]) < 0.11f);
    t = pg_safetensors_find(st, "model.language_model.layers.1.linear_attn.norm.weight");
    pg_test_tensor_row(t, 0, x);
    for (int i = 0; i < 16; i++)
        assert_true(x[i] > 0.89f && x[i] < 1.11f);
    t = pg_safetensors_find(st, "model.language_model.layers.1.linear_attn.A_log");
    pg_test_tensor_row(t, 0, x);
    for (int i = 0; i < 4; i++)
        assert_true(x[i] >= 0.0f && x[i] <= 2.78f);
    for (size_t i = 0; i < pg_safetensors_n_tensors(st); i++) {
        const char *nm = pg_safetensors_tensor_at(st, i)->name;
        assert_true(!strncmp(nm, "model.language_model.", 21) || !strncmp(nm, "mtp.", 4) ||
                    !strcmp(nm, "lm_head.weight"));
    }
    pg_safetensors_close(st);
}

/* The qwen35 / qwen35moe keys convert_hf_to_gguf.py writes. */
static void check_q35_gguf_keys(const pg_gen_model_options *o) {
    bool moe = o->experts > 0;
    const char *a = moe ? "qwen35moe" : "qwen35";
    pg_gguf *g;
    assert_int_equal(pg_gguf_open(g_gguf, &g), PAGODA_OK);
    const char *arch;
    assert_int_equal(pg_gguf_get_str(g, "general.architecture", &arch, NULL), PAGODA_OK);
    assert_string_equal(arch, a);
    static const struct {
        const char *key;
        int64_t v, moe_v; /* -1: absent */
    } INTS[] = {
        {"block_count", 5, 5},
        {"embedding_length", 64, 64},
        {"feed_forward_length", 96, -1},
        {"attention.head_count", 4, 4},
        {"attention.head_count_kv", 2, 2},
        {"attention.key_length", 32, 32},
        {"attention.value_length", 32, 32},
        {"rope.dimension_count", 8, 8},
        {"nextn_predict_layers", 1, 1},
        {"ssm.conv_kernel", 4, 4},
        {"ssm.state_size", 16, 16},
        {"ssm.group_count", 2, 2},
        {"ssm.time_step_rank", 4, 4},
        {"ssm.inner_size", 64, 64},
        {"full_attention_interval", 4, 4},
        {"expert_count", -1, 4},
        {"expert_used_count", -1, 2},
        {"expert_feed_forward_length", -1, 32},
        {"expert_shared_feed_forward_length", -1, 32},
    };
    char k[128];
    for (size_t i = 0; i < sizeof INTS / sizeof INTS[0]; i++) {
        snprintf(k, sizeof k, "%s.%s", a, INTS[i].key);
        int64_t want = moe ? INTS[i].moe_v : INTS[i].v, v;
        if (want < 0) {
            if (pg_gguf_find_key(g, k) >= 0) fail_msg("%s should be absent", k);
            continue;
        }
        if (pg_gguf_get_int(g, k, &v)) fail_msg("%s", pg_last_error());
        if (v != want) fail_msg("%s = %lld, want %lld", k, (long long)v, (long long)want);
    }
    double dv;
    snprintf(k, sizeof k, "%s.rope.freq_base", a);
    assert_int_equal(pg_gguf_get_float(g, k, &dv), PAGODA_OK);
    assert_true(dv == 1e7);
    pg_gguf_array arr;
    snprintf(k, sizeof k, "%s.rope.dimension_sections", a);
    assert_int_equal(pg_gguf_get_array(g, k, &arr), PAGODA_OK);
    assert_int_equal(arr.type, PG_GGUF_I32);
    assert_int_equal(arr.n, 4);
    const int sec[4] = {2, 1, 1, 0};
    for (int i = 0; i < 4; i++)
        assert_int_equal(pg_gguf_array_int(&arr, (uint64_t)i), sec[i]);
    snprintf(k, sizeof k, "%s.attention.recurrent_layers", a);
    assert_int_equal(pg_gguf_get_array(g, k, &arr), PAGODA_OK);
    assert_int_equal(arr.type, PG_GGUF_BOOL);
    assert_int_equal(arr.n, 5);
    const int rec[5] = {1, 1, 1, 0, 0};
    for (int i = 0; i < 5; i++)
        assert_int_equal(pg_gguf_array_int(&arr, (uint64_t)i), rec[i]);
    assert_true(pg_gguf_find_key(g, "tokenizer.ggml.bos_token_id") < 0); /* bos null */
    pg_gguf_close(g);
}

/* Both forms of a Qwen3.5 (BF16 HF, F32 GGUF as the oracle), and llama.cpp's
 * dtype rules in a Q8_0 GGUF. pagoda opens both forms as the same model:
 * after hf_rewrite the HF form's tensors equal the GGUF's with the V heads
 * un-tiled, and the logits agree. */
static void test_qwen35_both_forms(void **state) {
    (void)state;
    pg_gen_model_options o;
    q35_options(&o, false);
    gen(&o);
    check_q35_hf_layout(&o);
    check_q35_gguf_keys(&o);
    check_q35_gguf_from_hf(&o);

    pg_model_source *hs, *gs;
    assert_int_equal(pg_model_source_open(g_hf, &hs), PAGODA_OK);
    assert_int_equal(pg_model_source_open(g_gguf, &gs), PAGODA_OK);
    const pg_model_config *ch = pg_model_source_config(hs), *cg = pg_model_source_config(gs);
    const pg_model_config *cs[2] = {ch, cg};
    for (int i = 0; i < 2; i++) {
        const pg_model_config *c = cs[i];
        assert_string_equal(c->arch->name, "qwen3_5");
        assert_int_equal(c->num_hidden_layers, 4);
        assert_int_equal(c->mtp_layers, 1);
        assert_int_equal(c->rotary_dim, 8);
        assert_int_equal(c->linear_num_key_heads, 2);
        assert_int_equal(c->linear_num_value_heads, 4);
        assert_int_equal(c->linear_key_head_dim, 16);
        assert_int_equal(c->linear_value_head_dim, 16);
        assert_int_equal(c->linear_conv_kernel, 4);
        assert_true(c->attn_output_gate);
        assert_true(c->rope_theta == 1e7f);
        assert_int_equal(c->intermediate_size, 96);
        assert_int_equal(c->eos_token_ids[0], 2);
        for (int l = 0; l < 4; l++)
            assert_int_equal(pg_model_config_layer_linear(c, l), l < 3);
    }
    assert_false(ch->linear_v_tiled);
    assert_true(cg->linear_v_tiled);
    /* every canonical tensor of the HF form is the GGUF's, V heads un-tiled */
    const int64_t qk = 64, dv = 16;
    size_t n_main = 0;
    for (size_t i = 0; i < pg_model_source_n_tensors(hs); i++) {
        const pg_tensor *t = pg_model_source_tensor_at(hs, i);
        if (!strncmp(t->name, "mtp.", 4)) continue;
        n_main++;
        const pg_tensor *u = pg_model_source_tensor(gs, t->name);
        if (!u) fail_msg("GGUF lacks %s", t->name);
        assert_int_equal(t->ndim, u->ndim);
        for (int d = 0; d < t->ndim; d++)
            assert_int_equal(t->shape[d], u->shape[d]);
        int64_t rows = t->ndim == 1 ? 1 : t->shape[0], cols = t->shape[t->ndim - 1];
        float *h = dequant_all(t->dtype, t->data, rows, cols);
        float *gv = dequant_all(u->dtype, u->data, rows, cols);
        const char *nm = t->name;
        for (int64_t r = 0; r < rows; r++)
            for (int64_t c = 0; c < cols; c++) {
                int64_t dr = r, dc = c;
                if (strstr(nm, "in_proj_qkv") || strstr(nm, "conv1d"))
                    dr = r < qk ? r : qk + tiled_dst(&o, r - qk, dv);
                else if (strstr(nm, "in_proj_z"))
                    dr = tiled_dst(&o, r, dv);
                else if (strstr(nm, "in_proj_a") || strstr(nm, "in_proj_b"))
                    dr = tiled_dst(&o, r, 1);
                else if (strstr(nm, "ssm_a") || strstr(nm, "dt_bias"))
                    dc = tiled_dst(&o, c, 1);
                else if (strstr(nm, "out_proj"))
                    dc = tiled_dst(&o, c, dv);
                if (h[r * cols + c] != gv[dr * cols + dc])
                    fail_msg("%s[%lld][%lld]: HF %g, GGUF %g", nm, (long long)r, (long long)c,
                             h[r * cols + c], gv[dr * cols + dc]);
            }
        free(h);
        free(gv);
    }
    /* 3 linear layers x (2 norms, 9 linear_attn, 3 MLP), 1 full x (2 + 6 + 3),
     * embed, norm, lm_head */
    assert_int_equal(n_main, 3 * 14 + 11 + 3);
    assert_non_null(pg_model_source_tensor(gs, "mtp.blk.4.nextn.eh_proj.weight"));
    /* the HF MTP head's tensors under llama.cpp's names too (qwen35.c mtp_rewrite) */
    assert_non_null(pg_model_source_tensor(hs, "mtp.blk.4.nextn.eh_proj.weight"));
    assert_null(pg_model_source_tensor(hs, "mtp.fc.weight"));
    pg_model_source_free(hs);
    pg_model_source_free(gs);

    pg_model_options mo;
    pg_model_options_default(&mo);
    mo.compute = PG_F32;
    pg_model *mh = pg_test_load(g_hf, &mo, &hs), *mg = pg_test_load(g_gguf, &mo, &gs);
    assert_string_equal(pg_model_arch_name(mh), "qwen3_5");
    assert_string_equal(pg_model_arch_name(mg), "qwen3_5");
    enum { T = 13 };
    const int32_t toks[T] = {1, 17, 300, 5, 42, 42, 7, 319, 128, 64, 2, 250, 9};
    assert_forms_same_logits(mh, mg, toks, T);
    pg_model_free(mh);
    pg_model_free(mg);
    pg_model_source_free(hs);
    pg_model_source_free(gs);

    /* Q8_0: what llama.cpp keeps F32 stays F32 (norms, ssm_a, ssm_dt, ssm_conv1d) */
    o.gguf_dtype = PG_Q8_0;
    o.hf_dir = NULL;
    if (pg_gen_model_write(&o)) fail_msg("gen: %s", pg_last_error());
    pg_gguf *g;
    assert_int_equal(pg_gguf_open(g_gguf, &g), PAGODA_OK);
    static const struct {
        const char *name;
        pg_dtype t;
    } TYPES[] = {
        {"token_embd.weight", PG_Q8_0},          {"output.weight", PG_Q8_0},
        {"blk.0.attn_norm.weight", PG_F32},      {"blk.0.post_attention_norm.weight", PG_F32},
        {"blk.0.attn_qkv.weight", PG_Q8_0},      {"blk.0.attn_gate.weight", PG_Q8_0},
        {"blk.0.ssm_alpha.weight", PG_Q8_0},     {"blk.0.ssm_beta.weight", PG_Q8_0},
        {"blk.0.ssm_conv1d.weight", PG_F32},     {"blk.0.ssm_a", PG_F32},
        {"blk.0.ssm_dt.bias", PG_F32},           {"blk.0.ssm_norm.weight", PG_F32},
        {"blk.0.ssm_out.weight", PG_Q8_0},       {"blk.3.attn_q.weight", PG_Q8_0},
        {"blk.3.attn_q_norm.weight", PG_F32},    {"blk.3.attn_output.weight", PG_Q8_0},
        {"blk.4.nextn.eh_proj.weight", PG_Q8_0}, {"blk.4.nextn.enorm.weight", PG_F32},
    };
    for (size_t i = 0; i < sizeof TYPES / sizeof TYPES[0]; i++) {
        const pg_gguf_tensor *t = pg_gguf_find_tensor(g, TYPES[i].name);
        if (!t) fail_msg("no %s", TYPES[i].name);
        if (t->dtype != TYPES[i].t) fail_msg("%s is %s", TYPES[i].name, pg_dtype_name(t->dtype));
    }
    int64_t ft;
    assert_int_equal(pg_gguf_get_int(g, "general.file_type", &ft), PAGODA_OK);
    assert_int_equal(ft, 7);
    pg_gguf_close(g);
    pg_model *mq = pg_test_load(g_gguf, NULL, &gs);
    float *lg = malloc(T * 320 * 4);
    pg_test_prefill_logits(mq, toks, T, lg);
    for (int i = 0; i < T * 320; i++)
        assert_true(isfinite(lg[i]));
    free(lg);
    pg_model_free(mq);
    pg_model_source_free(gs);
}

/* Qwen3.5-MoE as published: no intermediate_size, per-expert HF tensors
 * (the published checkpoints fuse them), a shared expert with its [1, H]
 * gate; the GGUF as convert_hf_to_gguf.py writes it (3-D experts, F32
 * routers, ffn_gate_inp_shexp [H, 1], no feed_forward_length); pagoda runs
 * both and they agree. */
static void test_qwen35_moe_both_forms(void **state) {
    (void)state;
    pg_gen_model_options o;
    q35_options(&o, true);
    gen(&o);
    check_q35_hf_layout(&o);
    check_q35_gguf_keys(&o);
    check_q35_gguf_from_hf(&o);
    pg_gguf *g;
    assert_int_equal(pg_gguf_open(g_gguf, &g), PAGODA_OK);
    const pg_gguf_tensor *sg = pg_gguf_find_tensor(g, "blk.2.ffn_gate_inp_shexp.weight");
    assert_non_null(sg);
    assert_int_equal(sg->n_dims, 2);
    assert_int_equal(sg->ne[0], 64);
    assert_int_equal(sg->ne[1], 1);
    const pg_gguf_tensor *ex = pg_gguf_find_tensor(g, "blk.4.ffn_down_exps.weight");
    assert_non_null(ex);
    assert_int_equal(ex->n_dims, 3);
    assert_int_equal(ex->ne[0], 32);
    assert_int_equal(ex->ne[1], 64);
    assert_int_equal(ex->ne[2], 4);
    assert_null(pg_gguf_find_tensor(g, "blk.0.ffn_gate.weight"));
    pg_gguf_close(g);

    /* both forms as published load (no intermediate_size, no
     * feed_forward_length, the [1, H] / [H, 1] shared gate) and agree */
    pg_model_options mo;
    pg_model_options_default(&mo);
    mo.compute = PG_F32;
    pg_model_source *hs, *gs;
    pg_model *mh = pg_test_load(g_hf, &mo, &hs), *mg = pg_test_load(g_gguf, &mo, &gs);
    assert_string_equal(pg_model_arch_name(mh), "qwen3_5_moe");
    assert_string_equal(pg_model_arch_name(mg), "qwen3_5_moe");
    const pg_model_config *c = pg_model_source_config(hs);
    assert_int_equal(c->num_experts, 4);
    assert_int_equal(c->num_experts_per_tok, 2);
    assert_int_equal(c->moe_intermediate_size, 32);
    assert_int_equal(c->shared_expert_intermediate_size, 32);
    assert_int_equal(pg_model_source_config(gs)->shared_expert_intermediate_size, 32);
    const pg_tensor *t = pg_model_source_tensor(hs, "model.layers.1.mlp.shared_expert_gate.weight");
    assert_non_null(t);
    assert_int_equal(t->ndim, 2);
    enum { T = 9 };
    const int32_t toks[T] = {1, 17, 300, 5, 42, 42, 7, 319, 128};
    assert_forms_same_logits(mh, mg, toks, T);
    pg_model_free(mh);
    pg_model_free(mg);
    pg_model_source_free(hs);
    pg_model_source_free(gs);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_f32_both_forms),
        cmocka_unit_test(test_bf16_sharded_q8_llama3),
        cmocka_unit_test(test_q4_0_and_tokenizer_copy),
        cmocka_unit_test(test_bad_options),
        cmocka_unit_test(test_qwen3_both_forms_same_logits),
        cmocka_unit_test(test_qwen3_gguf_names_and_keys),
        cmocka_unit_test(test_qwen3_moe_both_forms_same_logits),
        cmocka_unit_test(test_gpt_oss_both_forms_same_logits),
        cmocka_unit_test(test_qwen3_moe_gguf_names_and_keys),
        cmocka_unit_test(test_from_qwen3_and_llama_gguf),
        cmocka_unit_test(test_gguf_refused),
        cmocka_unit_test(test_qwen35_both_forms),
        cmocka_unit_test(test_qwen35_moe_both_forms),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
