/* Random-weight model writer (HF directory and/or GGUF): Llama, Qwen3 dense,
 * Qwen3-MoE, gpt-oss, Qwen3.5 dense and MoE. */
#include "gen/gen_model.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/kquant.h"
#include "base/log.h"
#include "model/arch.h"
#include "model/compressed_tensors.h"
#include "model/gguf.h"
#include "model/llama.h"
#include "model/safetensors.h"

extern const pg_arch pg_arch_qwen3;     /* model/qwen3.c */
extern const pg_arch pg_arch_qwen3_moe; /* model/qwen3_moe.c */
extern const pg_arch pg_arch_gpt_oss;   /* model/gpt_oss.c */
extern const pg_arch pg_arch_qwen3_5;   /* model/qwen35.c */
extern const pg_arch pg_arch_qwen3_5_moe; /* model/qwen35.c */

static const pg_arch *gen_arch(const pg_gen_model_options *o) {
    return o->arch ? o->arch : &pg_arch_llama;
}
static bool is_gpt_oss(const pg_gen_model_options *o) {
    return gen_arch(o) == &pg_arch_gpt_oss;
}
/* Qwen3.5 dense or MoE: the Gated DeltaNet hybrid */
static bool is_q35(const pg_gen_model_options *o) {
    return gen_arch(o) == &pg_arch_qwen3_5 || gen_arch(o) == &pg_arch_qwen3_5_moe;
}
static bool is_moe(const pg_gen_model_options *o) {
    return gen_arch(o) == &pg_arch_qwen3_moe || is_gpt_oss(o) ||
           gen_arch(o) == &pg_arch_qwen3_5_moe;
}
/* Qwen3 dense or MoE: Qwen3's attention and config fields */
static bool is_qwen3(const pg_gen_model_options *o) {
    return gen_arch(o) == &pg_arch_qwen3 || gen_arch(o) == &pg_arch_qwen3_moe;
}

void pg_gen_model_defaults(pg_gen_model_options *o) {
    memset(o, 0, sizeof *o);
    o->arch = &pg_arch_llama;
    o->hidden = 64;
    o->layers = 2;
    o->heads = 4;
    o->kv_heads = 2;
    o->ffn = 128;
    o->vocab = 512;
    o->max_position = 2048;
    o->tie = true;
    o->rope_theta = 10000.0f;
    o->rms_eps = 1e-5f;
    o->init_std = 0.02f;
    o->rope_scaling = PG_ROPE_SCALING_NONE;
    o->bos_token_id = 1;
    o->eos_token_id = 2;
    o->seed = 1;
    o->hf_dtype = PG_F32;
    o->gguf_dtype = PG_F32;
    o->shards = 1;
}

static void clear_q35(pg_gen_model_options *o) {
    o->lin_k_heads = o->lin_v_heads = o->lin_k_dim = o->lin_v_dim = o->conv_kernel = 0;
    o->full_attn_interval = o->mtp_layers = o->shared_ffn = 0;
    o->partial_rotary = 0;
}

pagoda_status pg_gen_model_set_arch(pg_gen_model_options *o, const char *name) {
    if (!strcmp(name, "qwen3_5") || !strcmp(name, "qwen3_5_moe")) {
        /* Qwen3_5TextConfig / Qwen3_5MoeTextConfig as the published models */
        bool moe = !strcmp(name, "qwen3_5_moe");
        o->arch = moe ? &pg_arch_qwen3_5_moe : &pg_arch_qwen3_5;
        o->rope_theta = 10000000.0f;
        o->rms_eps = 1e-6f;
        o->rope_scaling = PG_ROPE_SCALING_NONE;
        o->sliding_window = 0;
        o->bos_token_id = -1; /* "bos_token_id": null */
        if (!o->lin_k_heads) o->lin_k_heads = 2;
        if (!o->lin_v_heads) o->lin_v_heads = 4;
        if (!o->lin_k_dim) o->lin_k_dim = 16;
        if (!o->lin_v_dim) o->lin_v_dim = 16;
        if (!o->conv_kernel) o->conv_kernel = 4;
        if (!o->full_attn_interval) o->full_attn_interval = 4;
        if (!(o->partial_rotary > 0)) o->partial_rotary = 0.25f;
        o->mtp_layers = 1;
        if (!moe) {
            o->experts = o->experts_per_tok = o->moe_ffn = o->shared_ffn = 0;
        } else {
            if (!o->experts) o->experts = 8;
            if (!o->experts_per_tok) o->experts_per_tok = 2;
            if (!o->moe_ffn) o->moe_ffn = 64;
            if (!o->shared_ffn) o->shared_ffn = 64;
            o->ffn = 0; /* Qwen3_5MoeTextConfig has no intermediate_size */
        }
        return PAGODA_OK;
    }
    clear_q35(o);
    if (!strcmp(name, "llama")) {
        o->arch = &pg_arch_llama;
        o->rope_theta = 10000.0f;
        o->rms_eps = 1e-5f;
        o->experts = o->experts_per_tok = o->moe_ffn = 0;
        return PAGODA_OK;
    }
    if (!strcmp(name, "qwen3") || !strcmp(name, "qwen3_moe")) {
        bool moe = !strcmp(name, "qwen3_moe");
        o->arch = moe ? &pg_arch_qwen3_moe : &pg_arch_qwen3;
        o->rope_theta = 1000000.0f;
        o->rms_eps = 1e-6f;
        o->rope_scaling = PG_ROPE_SCALING_NONE;
        if (!moe) {
            o->experts = o->experts_per_tok = o->moe_ffn = 0;
        } else {
            if (!o->experts) o->experts = 8;
            if (!o->experts_per_tok) o->experts_per_tok = 2;
            if (!o->moe_ffn) o->moe_ffn = 64;
        }
        return PAGODA_OK;
    }
    if (!strcmp(name, "gpt_oss")) { /* GptOssConfig's defaults (openai/gpt-oss-20b) */
        o->arch = &pg_arch_gpt_oss;
        o->rope_theta = 150000.0f;
        o->rms_eps = 1e-5f;
        o->rope_scaling = PG_ROPE_SCALING_YARN;
        o->rope_factor = 32.0f;
        o->rope_original_max_position = 4096;
        if (!o->sliding_window) o->sliding_window = 128;
        if (!o->experts) o->experts = 4;
        if (!o->experts_per_tok) o->experts_per_tok = 2;
        if (!o->moe_ffn) o->moe_ffn = 64;
        o->tie = false;
        return PAGODA_OK;
    }
    return pg_error(PAGODA_ERR_INVALID_ARG,
                    "unknown architecture '%s' (known: llama, qwen3, qwen3_moe, gpt_oss, qwen3_5, "
                    "qwen3_5_moe)",
                    name);
}

pagoda_status pg_gen_model_preset(pg_gen_model_options *o, const char *name) {
    if (!strcmp(name, "qwen3.5-9b") || !strcmp(name, "qwen3.5-35b-a3b")) {
        /* Qwen/Qwen3.5-9B and Qwen/Qwen3.5-35B-A3B (text_config); tie false
         * for the 9B as its 8.95B parameters without MTP imply */
        bool moe = !strcmp(name, "qwen3.5-35b-a3b");
        clear_q35(o);
        pg_gen_model_set_arch(o, moe ? "qwen3_5_moe" : "qwen3_5");
        o->hidden = moe ? 2048 : 4096;
        o->layers = moe ? 40 : 32;
        o->heads = 16;
        o->kv_heads = moe ? 2 : 4;
        o->head_dim = 256;
        o->ffn = moe ? 0 : 12288;
        o->lin_k_heads = 16;
        o->lin_v_heads = 32;
        o->lin_k_dim = 128;
        o->lin_v_dim = 128;
        o->conv_kernel = 4;
        o->full_attn_interval = 4;
        o->partial_rotary = 0.25f;
        o->mtp_layers = 1;
        o->experts = moe ? 256 : 0;
        o->experts_per_tok = moe ? 8 : 0;
        o->moe_ffn = moe ? 512 : 0;
        o->shared_ffn = moe ? 512 : 0;
        o->vocab = 248320;
        o->max_position = 262144;
        o->tie = false;
        o->bos_token_id = -1;
        o->eos_token_id = 248044; /* <|endoftext|> */
        o->hf_dtype = PG_BF16;
        o->gguf_dtype = PG_BF16;
        return PAGODA_OK;
    }
    if (!strcmp(name, "qwen3-0.6b") || !strcmp(name, "qwen3-1.7b")) {
        bool small = !strcmp(name, "qwen3-0.6b");
        pg_gen_model_set_arch(o, "qwen3");
        o->hidden = small ? 1024 : 2048;
        o->ffn = small ? 3072 : 6144;
        o->layers = 28;
        o->heads = 16;
        o->kv_heads = 8;
        o->head_dim = 128;
        o->vocab = 151936;
        o->max_position = 40960;
        o->tie = true;
        o->bos_token_id = 151643; /* <|endoftext|> */
        o->eos_token_id = 151645; /* <|im_end|> */
        o->hf_dtype = PG_BF16;
        o->gguf_dtype = PG_BF16;
        return PAGODA_OK;
    }
    if (!strcmp(name, "qwen3-30b-a3b")) { /* Qwen/Qwen3-30B-A3B's config.json */
        pg_gen_model_set_arch(o, "qwen3_moe");
        o->hidden = 2048;
        o->ffn = 6144; /* intermediate_size: unused, every layer is MoE */
        o->layers = 48;
        o->heads = 32;
        o->kv_heads = 4;
        o->head_dim = 128;
        o->experts = 128;
        o->experts_per_tok = 8;
        o->moe_ffn = 768;
        o->vocab = 151936;
        o->max_position = 40960;
        o->tie = false;
        o->bos_token_id = 151643; /* <|endoftext|> */
        o->eos_token_id = 151645; /* <|im_end|> */
        o->hf_dtype = PG_BF16;
        o->gguf_dtype = PG_BF16;
        return PAGODA_OK;
    }
    if (!strcmp(name, "gpt-oss-20b")) { /* openai/gpt-oss-20b's config.json */
        pg_gen_model_set_arch(o, "gpt_oss");
        o->hidden = 2880;
        o->ffn = 2880;
        o->layers = 24;
        o->heads = 64;
        o->kv_heads = 8;
        o->head_dim = 64;
        o->experts = 32;
        o->experts_per_tok = 4;
        o->moe_ffn = 2880;
        o->sliding_window = 128;
        o->vocab = 201088;
        o->max_position = 131072;
        o->bos_token_id = 199998; /* <|startoftext|> */
        o->eos_token_id = 200002; /* <|return|> */
        o->hf_dtype = PG_BF16;
        o->gguf_dtype = PG_BF16;
        return PAGODA_OK;
    }
    if (!strcmp(name, "llama-3.2-1b")) {
        pg_gen_model_set_arch(o, "llama");
        o->hidden = 2048;
        o->layers = 16;
        o->heads = 32;
        o->kv_heads = 8;
        o->head_dim = 64;
        o->ffn = 8192;
        o->vocab = 128256;
        o->max_position = 131072;
        o->tie = true;
        o->rope_theta = 500000.0f;
        o->rms_eps = 1e-5f;
        o->rope_scaling = PG_ROPE_SCALING_LLAMA3;
        o->rope_factor = 32.0f;
        o->rope_low_freq_factor = 1.0f;
        o->rope_high_freq_factor = 4.0f;
        o->rope_original_max_position = 8192;
        o->bos_token_id = 128000;
        o->eos_token_id = 128001;
        o->hf_dtype = PG_BF16;
        o->gguf_dtype = PG_BF16;
        return PAGODA_OK;
    }
    return pg_error(PAGODA_ERR_INVALID_ARG,
                    "unknown preset '%s' (known: llama-3.2-1b, qwen3-0.6b, qwen3-1.7b, "
                    "qwen3-30b-a3b, gpt-oss-20b, qwen3.5-9b, qwen3.5-35b-a3b)",
                    name);
}

pagoda_status pg_gen_model_options_from(pg_gen_model_options *o, const pg_model_source *src) {
    const pg_model_config *c = pg_model_source_config(src);
    if (c->arch != &pg_arch_llama && c->arch != &pg_arch_qwen3 && c->arch != &pg_arch_qwen3_moe)
        return pg_error(PAGODA_ERR_UNSUPPORTED,
                        "%s: architecture %s: only llama, qwen3 and qwen3_moe convert",
                        pg_model_source_path(src), c->architecture);
    if (c->arch == &pg_arch_qwen3_moe) { /* the generator writes every layer MoE, renormalised */
        bool all = c->norm_topk_prob;
        for (int l = 0; l < c->num_hidden_layers && all; l++)
            all = pg_model_config_layer_moe(c, l);
        if (!all)
            return pg_error(PAGODA_ERR_UNSUPPORTED,
                            "%s: only a Qwen3-MoE with every layer MoE (decoder_sparse_step 1, no "
                            "mlp_only_layers) and norm_topk_prob true converts",
                            pg_model_source_path(src));
    }
    if (c->attention_bias)
        return pg_error(PAGODA_ERR_UNSUPPORTED, "%s: attention biases do not convert",
                        pg_model_source_path(src));
    if (c->rope_scaling != PG_ROPE_SCALING_NONE && c->rope_scaling != PG_ROPE_SCALING_LLAMA3)
        return pg_error(PAGODA_ERR_UNSUPPORTED, "%s: only none / llama3 RoPE scaling converts",
                        pg_model_source_path(src));
    o->arch = c->arch;
    o->hidden = c->hidden_size;
    o->layers = c->num_hidden_layers;
    o->heads = c->num_attention_heads;
    o->kv_heads = c->num_key_value_heads;
    o->head_dim = c->head_dim;
    o->ffn = c->intermediate_size;
    o->experts = c->arch == &pg_arch_qwen3_moe ? c->num_experts : 0;
    o->experts_per_tok = c->arch == &pg_arch_qwen3_moe ? c->num_experts_per_tok : 0;
    o->moe_ffn = c->arch == &pg_arch_qwen3_moe ? c->moe_intermediate_size : 0;
    o->vocab = c->vocab_size;
    o->max_position = c->max_position_embeddings;
    o->tie = c->tie_word_embeddings;
    o->rope_theta = c->rope_theta;
    o->rms_eps = c->rms_norm_eps;
    o->rope_scaling = c->rope_scaling;
    o->rope_factor = c->rope_factor;
    o->rope_low_freq_factor = c->rope_low_freq_factor;
    o->rope_high_freq_factor = c->rope_high_freq_factor;
    o->rope_original_max_position = c->rope_original_max_position;
    o->bos_token_id = c->bos_token_id;
    o->eos_token_id = c->eos_token_ids[0];
    o->from = src;
    return PAGODA_OK;
}

static int head_dim(const pg_gen_model_options *o) {
    return o->head_dim ? o->head_dim : o->hidden / o->heads;
}

/* ------------------------------------------------------------ random rows */

static uint64_t splitmix64(uint64_t *s) {
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}
static uint64_t fnv1a(const char *s) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (; *s; s++)
        h = (h ^ (uint8_t)*s) * 0x100000001b3ull;
    return h;
}

/* Q/K rows (heads of size hd): llama.cpp's converter stores HF row pairs
 * (i, i + hd/2) of a head as adjacent rows (2i, 2i+1) for interleaved-RoPE
 * architectures (Llama). */
static int64_t hf_row_of_gguf_row(int64_t gr, int hd) {
    int64_t h = gr / hd, w = gr % hd;
    return h * hd + (w % 2) * (hd / 2) + w / 2;
}
static int64_t gguf_row_of_hf_row(int64_t r, int hd) {
    int64_t h = r / hd, w = r % hd;
    return h * hd + 2 * (w % (hd / 2)) + w / (hd / 2);
}
static bool is_qk_weight(const char *hf_name) {
    size_t n = strlen(hf_name);
    return n >= 23 && (!strcmp(hf_name + n - 23, "self_attn.q_proj.weight") ||
                       !strcmp(hf_name + n - 23, "self_attn.k_proj.weight"));
}

static bool ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && !strcmp(s + n - m, suffix);
}

/* A Qwen3_5RMSNorm weight (scales by 1 + w, stored zero-centred): every
 * norm but the gated linear_attn.norm, the MTP block's pre-fc norms
 * included (the converter adds 1 to them as nextn.enorm / hnorm). */
static bool q35_norm(const char *name) {
    return (ends_with(name, "norm.weight") || ends_with(name, ".pre_fc_norm_embedding.weight") ||
            ends_with(name, ".pre_fc_norm_hidden.weight")) &&
           !ends_with(name, "linear_attn.norm.weight");
}

/* The weights before any quantization: random, or read from o->from. */
static void raw_row(const pg_gen_model_options *o, const char *hf_name, int64_t row, int64_t ncols,
                    float *out) {
    if (o->from) {
        const pg_tensor *t = pg_model_source_tensor(o->from, hf_name);
        if (!t) { /* checked by pg_gen_model_write */
            memset(out, 0, (size_t)ncols * sizeof(float));
            return;
        }
        const pg_model_config *fc = pg_model_source_config(o->from);
        if (fc->rope_interleaved && is_qk_weight(hf_name)) /* a Llama GGUF: back to HF order */
            row = gguf_row_of_hf_row(row, fc->head_dim);
        size_t rb = pg_dtype_row_bytes(t->dtype, (size_t)ncols);
        pg_dequant_row(t->dtype, (const uint8_t *)t->data + (size_t)row * rb, out, (size_t)ncols);
        return;
    }
    uint64_t st =
        o->seed * 0x2545f4914f6cdd1dull ^ fnv1a(hf_name) ^ ((uint64_t)row * 0x9e3779b97f4a7c15ull);
    splitmix64(&st);
    size_t n = strlen(hf_name);
    bool norm = n >= 11 && !strcmp(hf_name + n - 11, "norm.weight");
    float scale = norm ? 0.1f : o->init_std * 1.7320508f; /* U(-a, a) has std a/sqrt(3) */
    float base = norm ? 1.0f : 0.0f;
    bool a_log = false;
    if (is_q35(o)) { /* Qwen3.5's parameters as its checkpoints hold them */
        const char *tail = strrchr(hf_name, '.');
        if (q35_norm(hf_name))
            base = 0.0f, scale = 0.1f; /* Qwen3_5RMSNorm: x * (1 + w), w around 0 */
        else if (tail && !strcmp(tail, ".ssm_a"))
            a_log = true; /* A_log = log(A), A ~ U(1, 16) (HF draws U(0, 16)) */
        else if (tail && !strcmp(tail, ".dt_bias"))
            base = 1.0f, scale = 0.5f; /* HF initializes ones */
        else if (strstr(hf_name, "linear_attn.conv1d.weight"))
            scale = 1.0f / sqrtf((float)ncols); /* nn.Conv1d's U(-1/sqrt(K), 1/sqrt(K)) */
    }
    for (int64_t c = 0; c < ncols; c += 2) {
        uint64_t r = splitmix64(&st);
        float u0 = (float)(r >> 40) * (1.0f / 16777216.0f) * 2.0f - 1.0f;
        float u1 = (float)((r >> 8) & 0xffffff) * (1.0f / 16777216.0f) * 2.0f - 1.0f;
        out[c] = a_log ? logf(1.0f + 7.5f * (u0 + 1.0f)) : base + scale * u0;
        if (c + 1 < ncols) out[c + 1] = a_log ? logf(1.0f + 7.5f * (u1 + 1.0f)) : base + scale * u1;
    }
}

/* ------------------------------------------------------ successor models */

bool pg_gen_successor_skips(uint64_t seed, float skip, int64_t t) {
    uint64_t st = seed * 0xd1342543de82ef95ull ^ ((uint64_t)t * 0x9e3779b97f4a7c15ull) ^
                  0x5355434345535352ull; /* "SUCCESSR" */
    uint64_t r = splitmix64(&st);
    return (double)(r >> 11) * (1.0 / 9007199254740992.0) < (double)skip;
}

int64_t pg_gen_successor_next(const pg_gen_model_options *o, int64_t t) {
    int64_t step = pg_gen_successor_skips(o->seed, o->successor_skip, t) ? 2 : 1;
    return (t + step) % o->vocab;
}

/* lm_head row s of a successor model: the sum of the embedding rows of the
 * tokens whose successor is s (s - 1 unless it skips, s - 2 if it skips). */
static void successor_lm_row(const pg_gen_model_options *o, int64_t s, int64_t ncols, float *out) {
    memset(out, 0, (size_t)ncols * sizeof(float));
    float *e = malloc((size_t)ncols * sizeof(float));
    if (!e) abort();
    const int64_t V = o->vocab;
    for (int64_t back = 1; back <= 2 && back < V; back++) {
        int64_t t = ((s - back) % V + V) % V;
        if (pg_gen_successor_next(o, t) != s) continue;
        raw_row(o, "model.embed_tokens.weight", t, ncols, e);
        for (int64_t c = 0; c < ncols; c++)
            out[c] += e[c];
    }
    free(e);
}

static bool ct_name(const pg_gen_model_options *o, const char *name);
static const char *ct_ignore_json(const pg_gen_model_options *o);
static void ct_row(const pg_gen_model_options *o, const float *x, int64_t K, int8_t *q,
                   uint16_t *sc);

void pg_gen_model_row(const pg_gen_model_options *o, const char *hf_name, int64_t row,
                      int64_t ncols, float *out) {
    if (o->successor && !strcmp(hf_name, "lm_head.weight")) {
        successor_lm_row(o, row, ncols, out);
        return;
    }
    raw_row(o, hf_name, row, ncols, out);
    if (o->successor && (ends_with(hf_name, ".self_attn.o_proj.weight") ||
                         ends_with(hf_name, ".mlp.down_proj.weight")))
        for (int64_t c = 0; c < ncols; c++)
            out[c] *= o->successor_residual;
    if (!o->ct_dense || !ct_name(o, hf_name)) return;
    const int64_t G = o->ct_group ? o->ct_group : ncols, ng = (ncols + G - 1) / G;
    int8_t *q = malloc((size_t)ncols);
    uint16_t *sc = malloc((size_t)ng * sizeof *sc);
    if (!q || !sc) abort();
    ct_row(o, out, ncols, q, sc);
    for (int64_t k = 0; k < ncols; k++)
        out[k] = pg_bf16_to_f32(sc[k / G]) * (float)q[k];
    free(q);
    free(sc);
}

void pg_llama3_rope_factors(const pg_gen_model_options *o, float *out) {
    int hd = head_dim(o);
    double old = o->rope_original_max_position, lo = o->rope_low_freq_factor,
           hi = o->rope_high_freq_factor;
    double low_wl = old / lo, high_wl = old / hi;
    for (int i = 0; i < hd / 2; i++) {
        double freq = 1.0 / pow((double)o->rope_theta, 2.0 * i / hd);
        double wl = 2.0 * M_PI / freq;
        if (wl < high_wl) {
            out[i] = 1.0f;
        } else if (wl > low_wl) {
            out[i] = o->rope_factor;
        } else {
            double smooth = (old / wl - lo) / (hi - lo);
            out[i] = (float)(1.0 / ((1.0 - smooth) / o->rope_factor + smooth));
        }
    }
}

/* ------------------------------------------------------------ tensor plan */

/* GGUF-side value transforms and V-head reorders of Qwen3.5 (what
 * convert_hf_to_gguf.py's Qwen3NextModel / _LinearAttentionVReorderBase do) */
enum { TX_NONE = 0, TX_ONE_PLUS, TX_NEG_EXP };
enum { VM_NONE = 0, VM_QKV_ROWS, VM_V_ROWS, VM_HEAD_ROWS, VM_V_COLS, VM_HEAD_COLS };

typedef struct gen_tensor {
    char name[112]; /* canonical name: pg_model_source's (the table's HF name) */
    char hf[128];   /* name in the safetensors file */
    char gguf[112]; /* GGUF name (an expert entry: its layer's stacked 3-D tensor) */
    int ndim;
    int64_t rows, cols; /* canonical layout; 1-D: rows = 1, cols = n */
    int hf_ndim;        /* the file's shape: [rows, cols], [cols], or with a 1 inserted */
    int64_t hf_shape[3];
    bool gguf_2d;   /* a 1-D canonical tensor stored as GGUF ne [cols, 1] */
    int perm_heads; /* > 0: Q/K rows are permuted in GGUF with this many heads */
    /* an expert's tensor (n_experts > 0): the plan lists experts 0..n_experts-1 of one
     * table entry consecutively, so in GGUF they are streamed one after another into the
     * 3-D `gguf` */
    int layer, expert, n_experts;
    bool gguf_f32; /* kept F32 in GGUF whatever its dtype (norms, routers, ...) */
    uint8_t tx;    /* TX_*: GGUF value = tx(HF value) */
    uint8_t vmap;  /* VM_*: GGUF rows / columns reordered from HF's */
} gen_tensor;

static int64_t dim(const pg_gen_model_options *o, pg_dim d) {
    switch (d) {
    case PG_DIM_VOCAB:
        return o->vocab;
    case PG_DIM_HIDDEN:
        return o->hidden;
    case PG_DIM_Q:
        return (int64_t)o->heads * head_dim(o);
    case PG_DIM_KV:
        return (int64_t)o->kv_heads * head_dim(o);
    case PG_DIM_FFN:
        return o->ffn;
    case PG_DIM_HEAD:
        return head_dim(o);
    case PG_DIM_EXPERTS:
        return o->experts;
    case PG_DIM_MOE_FFN:
        return o->moe_ffn;
    case PG_DIM_HEADS:
        return o->heads;
    case PG_DIM_Q_GATE:
        return 2 * (int64_t)o->heads * head_dim(o);
    case PG_DIM_LIN_CONV:
        return 2 * (int64_t)o->lin_k_heads * o->lin_k_dim + (int64_t)o->lin_v_heads * o->lin_v_dim;
    case PG_DIM_LIN_V:
        return (int64_t)o->lin_v_heads * o->lin_v_dim;
    case PG_DIM_LIN_VHEADS:
        return o->lin_v_heads;
    case PG_DIM_LIN_DV:
        return o->lin_v_dim;
    case PG_DIM_CONV_K:
        return o->conv_kernel;
    case PG_DIM_SHARED_FFN:
        return o->shared_ffn;
    case PG_DIM_ONE:
        return 1;
    default:
        return -1;
    }
}

/* Layer l runs the mixture of experts (pg_model_config_layer_moe of the
 * config the HF form says: decoder_sparse_step 1, no mlp_only_layers). */
static bool layer_moe(const pg_gen_model_options *o, int l) {
    pg_model_config c;
    memset(&c, 0, sizeof c);
    c.num_experts = is_moe(o) ? o->experts : 0;
    c.decoder_sparse_step = 1;
    return pg_model_config_layer_moe(&c, l);
}

/* Layer l (< layers) is a Gated DeltaNet layer (Qwen3.5's layer_types). */
static bool layer_linear(const pg_gen_model_options *o, int l) {
    return is_q35(o) && l < o->layers && (l + 1) % o->full_attn_interval != 0;
}

/* The file name, shapes, GGUF dtype rule and transforms of g (name, ndim,
 * rows, cols, gguf set). */
static void finish_entry(const pg_gen_model_options *o, gen_tensor *g, bool router) {
    g->hf_ndim = g->ndim;
    g->hf_shape[0] = g->ndim == 2 ? g->rows : g->cols;
    g->hf_shape[1] = g->cols;
    snprintf(g->hf, sizeof g->hf, "%s", g->name);
    /* llama.cpp's converter keeps 1-D tensors and the router (ffn_gate_inp) in F32 */
    g->gguf_f32 = g->ndim == 1 || router;
    if (!is_q35(o)) return;
    const char *nm = g->name;
    if (!strncmp(nm, "model.", 6)) /* the language model of *ForConditionalGeneration */
        snprintf(g->hf, sizeof g->hf, "model.language_model.%s", nm + 6);
    if (ends_with(nm, ".linear_attn.ssm_a")) { /* stored as A_log; ssm_a = -exp(A_log) */
        snprintf(g->hf + strlen(g->hf) - 5, sizeof g->hf - (strlen(g->hf) - 5), "A_log");
        g->tx = TX_NEG_EXP;
    }
    if (q35_norm(nm)) g->tx = TX_ONE_PLUS;
    if (ends_with(nm, ".linear_attn.conv1d.weight")) { /* [C, 1, K]; GGUF squeezed, F32 */
        g->hf_ndim = 3;
        g->hf_shape[0] = g->rows;
        g->hf_shape[1] = 1;
        g->hf_shape[2] = g->cols;
        g->gguf_f32 = true;
        g->vmap = VM_QKV_ROWS;
    }
    if (ends_with(nm, ".mlp.shared_expert_gate.weight")) { /* [1, H]; GGUF [H, 1], F32 */
        g->hf_ndim = 2;
        g->hf_shape[0] = 1;
        g->hf_shape[1] = g->cols;
        g->gguf_2d = true;
        g->gguf_f32 = true;
    }
    if (ends_with(nm, ".linear_attn.in_proj_qkv.weight")) g->vmap = VM_QKV_ROWS;
    if (ends_with(nm, ".linear_attn.in_proj_z.weight")) g->vmap = VM_V_ROWS;
    if (ends_with(nm, ".linear_attn.in_proj_a.weight") ||
        ends_with(nm, ".linear_attn.in_proj_b.weight"))
        g->vmap = VM_HEAD_ROWS;
    if (ends_with(nm, ".linear_attn.dt_bias") || ends_with(nm, ".linear_attn.ssm_a"))
        g->vmap = VM_HEAD_COLS;
    if (ends_with(nm, ".linear_attn.out_proj.weight")) g->vmap = VM_V_COLS;
}

/* Append table entry e (layer l; expert x of an expert entry) to the plan,
 * or only count it (t NULL). Layers l >= o->layers are the MTP blocks
 * ("mtp.layers.{l - layers}", GGUF blk.{l}). */
static void add(const pg_gen_model_options *o, gen_tensor *t, size_t *n, int l, int x,
                const pg_arch_tensor *e) {
    if (!t) {
        (*n)++;
        return;
    }
    gen_tensor *g = &t[(*n)++];
    memset(g, 0, sizeof *g);
    char pre[48];
    if (l >= o->layers)
        snprintf(pre, sizeof pre, "mtp.layers.%d", l - o->layers);
    else
        snprintf(pre, sizeof pre, "model.layers.%d", l);
    if (e->expert)
        snprintf(g->name, sizeof g->name, "%s.mlp.experts.%d.%s", pre, x, e->hf);
    else if (e->layer)
        snprintf(g->name, sizeof g->name, "%s.%s", pre, e->hf);
    else
        snprintf(g->name, sizeof g->name, "%s", e->hf);
    if (e->layer)
        snprintf(g->gguf, sizeof g->gguf, "blk.%d.%s", l, e->gguf);
    else
        snprintf(g->gguf, sizeof g->gguf, "%s", e->gguf);
    g->ndim = e->d1 == PG_DIM_NONE ? 1 : 2;
    g->rows = g->ndim == 1 ? 1 : dim(o, e->d0);
    g->cols = g->ndim == 1 ? dim(o, e->d0) : dim(o, e->d1);
    g->layer = l;
    g->expert = e->expert ? x : 0;
    g->n_experts = e->expert ? o->experts : 0;
    finish_entry(o, g, e->d0 == PG_DIM_EXPERTS && !e->expert);
    if (gen_arch(o)->gguf_rope_interleaved && e->layer) {
        if (!strcmp(e->hf, "self_attn.q_proj.weight")) g->perm_heads = o->heads;
        if (!strcmp(e->hf, "self_attn.k_proj.weight")) g->perm_heads = o->kv_heads;
    }
}

/* One of the MTP block's own tensors (mtp.fc, its norms): HF `hf`, GGUF
 * blk.{layers}.<gguf>, [rows, cols] (rows 0: 1-D). */
static void add_mtp(const pg_gen_model_options *o, gen_tensor *t, size_t *n, const char *hf,
                    const char *gguf, int64_t rows, int64_t cols) {
    if (!t) {
        (*n)++;
        return;
    }
    gen_tensor *g = &t[(*n)++];
    memset(g, 0, sizeof *g);
    snprintf(g->name, sizeof g->name, "%s", hf);
    snprintf(g->gguf, sizeof g->gguf, "blk.%d.%s", o->layers, gguf);
    g->ndim = rows ? 2 : 1;
    g->rows = rows ? rows : 1;
    g->cols = cols;
    g->layer = o->layers;
    finish_entry(o, g, false);
}

/* Whether table entry e belongs in layer l (l >= o->layers: an MTP block,
 * a full-attention layer with the MLP of the architecture). */
static bool wanted_in_layer(const pg_gen_model_options *o, const pg_arch_tensor *e, int l) {
    bool moe = layer_moe(o, l), lin = layer_linear(o, l);
    switch (e->req) {
    case PG_REQ_ALWAYS:
        return true;
    case PG_REQ_DENSE_MLP:
        return !moe;
    case PG_REQ_MOE:
        return moe;
    case PG_REQ_MOE_SHARED:
        return moe && o->shared_ffn > 0;
    case PG_REQ_LINEAR_ATTN:
        return lin;
    case PG_REQ_FULL_ATTN:
        return !lin;
    case PG_REQ_UNLESS_TIED:
        return !o->tie;
    case PG_REQ_IF_BIAS:
    case PG_REQ_OPTIONAL: /* gpt-oss has every bias (attention_bias true, o_proj's too) */
        return is_gpt_oss(o);
    default:
        return false;
    }
}

/* The architecture's tensors (its table in model/arch.h) that a
 * checkpoint without biases holds: every required one, the dense MLP or the
 * router and experts as the layer is (PG_REQ_DENSE_MLP / PG_REQ_MOE), the
 * attention kind of a hybrid layer, and lm_head unless tied. HF order: the
 * embedding, the layers (in table order; an expert entry as experts
 * 0..E-1), the other global tensors (final norm, lm_head), then the MTP
 * blocks (Qwen3.5). Returns the count; t may be NULL. */
static size_t plan(const pg_gen_model_options *o, gen_tensor *t) {
    size_t n = 0;
    for (int pass = 0; pass < 4; pass++) {
        if (pass == 3 && o->mtp_layers > 0) {
            add_mtp(o, t, &n, "mtp.fc.weight", "nextn.eh_proj.weight", o->hidden, 2 * o->hidden);
            add_mtp(o, t, &n, "mtp.norm.weight", "nextn.shared_head_norm.weight", 0, o->hidden);
            add_mtp(o, t, &n, "mtp.pre_fc_norm_embedding.weight", "nextn.enorm.weight", 0,
                    o->hidden);
            add_mtp(o, t, &n, "mtp.pre_fc_norm_hidden.weight", "nextn.hnorm.weight", 0, o->hidden);
        }
        int l0 = pass == 3 ? o->layers : 0;
        int nl = pass == 1 ? o->layers : pass == 3 ? o->layers + o->mtp_layers : 1;
        for (int l = l0; l < nl; l++) {
            const pg_arch_tensor *e;
            for (int k = 0; (e = pg_arch_tensor_at(gen_arch(o), k)) != NULL; k++) {
                bool embed = !e->layer && !e->linear && e->d0 == PG_DIM_VOCAB;
                int in_pass = e->layer ? (pass == 3 ? 3 : 1) : embed ? 0 : 2;
                if (in_pass != pass || !wanted_in_layer(o, e, l)) continue;
                for (int x = 0; x < (e->expert ? o->experts : 1); x++)
                    add(o, t, &n, l, x, e);
            }
        }
    }
    return n;
}
static size_t plan_count(const pg_gen_model_options *o) {
    return plan(o, NULL);
}

/* llama.cpp's tiled V-head order: GGUF element i of a [n_v_heads * hd]
 * block holds HF element v_tiled_src(i) (HF groups the V heads by K head:
 * head k * r + j, r = n_v / n_k; GGUF puts it at j * n_k + k). */
static int64_t v_tiled_src(const pg_gen_model_options *o, int64_t i, int64_t hd) {
    const int64_t nk = o->lin_k_heads, r = o->lin_v_heads / o->lin_k_heads;
    const int64_t p = i / hd, w = i % hd, j = p / nk, k = p % nk;
    return (k * r + j) * hd + w;
}

/* The HF row of GGUF row r of t. */
static int64_t gguf_src_row(const pg_gen_model_options *o, const gen_tensor *t, int64_t r) {
    const int64_t qk = 2 * (int64_t)o->lin_k_heads * o->lin_k_dim;
    switch (t->vmap) {
    case VM_QKV_ROWS:
        return r < qk ? r : qk + v_tiled_src(o, r - qk, o->lin_v_dim);
    case VM_V_ROWS:
        return v_tiled_src(o, r, o->lin_v_dim);
    case VM_HEAD_ROWS:
        return v_tiled_src(o, r, 1);
    default:
        return t->perm_heads ? hf_row_of_gguf_row(r, head_dim(o)) : r;
    }
}

enum { Q35_MAX_LAYERS = 512 }; /* layers + MTP layers (llama.cpp's LLAMA_MAX_LAYERS) */

/* Qwen3.5's rotary dims (head_dim * partial_rotary_factor) and its
 * interleaved M-RoPE sections: rotary_dim / 2 split in three, the larger
 * first ([11, 11, 10] for the 64 dims of the real models, [2, 1, 1] for the
 * tiny oracle's 8; text positions make any split plain RoPE). */
static int q35_rotary_dim(const pg_gen_model_options *o) {
    return (int)((float)head_dim(o) * o->partial_rotary);
}
static void q35_mrope_section(const pg_gen_model_options *o, int32_t sec[3]) {
    int half = q35_rotary_dim(o) / 2, base = half / 3, rem = half % 3;
    sec[0] = base + (rem > 0);
    sec[1] = base + (rem > 1);
    sec[2] = base;
}

/* ------------------------------------------------------------ conversion */

/* Stores x as an F16 (host byte order) at dst, which need not be aligned. */
static void put_f16(uint8_t *dst, float x) {
    const uint16_t h = pg_f32_to_f16(x);
    memcpy(dst, &h, 2);
}

/* The first entry of x[0..n) with the largest magnitude, sign kept (0 when
 * all are 0): the value a symmetric quantizer maps to its lowest level. */
static float signed_extreme(const float *x, int n) {
    float mx = 0, v = 0;
    for (int j = 0; j < n; j++)
        if (fabsf(x[j]) > mx) {
            mx = fabsf(x[j]);
            v = x[j];
        }
    return v;
}

static void quantize_q8_0(const float *x, uint8_t *dst, int64_t n) {
    for (int64_t b = 0; b < n / 32; b++, x += 32, dst += 34) {
        float amax = 0;
        for (int j = 0; j < 32; j++)
            amax = fmaxf(amax, fabsf(x[j]));
        float d = amax / 127.0f, id = d ? 1.0f / d : 0.0f;
        put_f16(dst, d);
        for (int j = 0; j < 32; j++)
            dst[2 + j] = (uint8_t)(int8_t)roundf(x[j] * id);
    }
}
static void quantize_q4_0(const float *x, uint8_t *dst, int64_t n) {
    for (int64_t b = 0; b < n / 32; b++, x += 32, dst += 18) {
        float d = signed_extreme(x, 32) / -8.0f, id = d ? 1.0f / d : 0.0f;
        put_f16(dst, d);
        for (int j = 0; j < 16; j++) {
            int a = (int)(x[j] * id + 8.5f), c = (int)(x[16 + j] * id + 8.5f);
            a = a < 0 ? 0 : a > 15 ? 15 : a;
            c = c < 0 ? 0 : c > 15 ? 15 : c;
            dst[2 + j] = (uint8_t)(a | (c << 4));
        }
    }
}
/* ---- K-quants (layouts: base/kquant.h). Plain quantizers for test
 * models (no llama.cpp importance search): Q4_K / Q5_K take each
 * sub-block's range [min(0, lo), hi] in nmax steps, Q6_K its signed maximum
 * in 31 steps; the sub-block scales are quantized against the largest
 * (6 bits, 8 bits signed for Q6_K) with F16 super-block scales. */

static float f16r(float x) {
    return pg_f16_to_f32(pg_f32_to_f16(x));
}

static int clampi(int v, int lo, int hi) {
    return v < lo ? lo : v > hi ? hi : v;
}

/* A sub-block scale (or minimum) v as its integer code against the
 * super-block scale d, clamped to [lo, hi]; 0 when d is 0. */
static int scale_code(float v, float d, int lo, int hi) {
    return d > 0 ? clampi((int)lrintf(v / d), lo, hi) : 0;
}

/* Asymmetric K-quants (Q2_K, Q4_K, Q5_K): sub-block s (x[len*s ..], nsub of
 * them) takes its range [min(0, lo), hi] in `steps` steps, so scale[s] =
 * (hi - lo) / steps and mins[s] = -lo. Returns the largest scale, *mmax the
 * largest minimum. */
static float range_scales(const float *x, int nsub, int len, float steps, float *scale, float *mins,
                          float *mmax) {
    float smax = 0;
    *mmax = 0;
    for (int s = 0; s < nsub; s++) {
        float lo = 0, hi = 0;
        for (int j = 0; j < len; j++) {
            lo = fminf(lo, x[len * s + j]);
            hi = fmaxf(hi, x[len * s + j]);
        }
        scale[s] = (hi - lo) / steps;
        mins[s] = -lo;
        smax = fmaxf(smax, scale[s]);
        *mmax = fmaxf(*mmax, mins[s]);
    }
    return smax;
}

/* Symmetric K-quants (Q3_K, Q6_K): sub-block s (x[len*s ..], nsub of them)
 * maps its signed extreme to the level `lowest` (< 0), so scale[s] =
 * extreme / lowest. Returns the largest |scale|. */
static float extreme_scales(const float *x, int nsub, int len, float lowest, float *scale) {
    float amax = 0;
    for (int s = 0; s < nsub; s++) {
        scale[s] = signed_extreme(x + len * s, len) / lowest;
        amax = fmaxf(amax, fabsf(scale[s]));
    }
    return amax;
}

static void quantize_q45_k(const float *x, uint8_t *dst, int64_t n, int bits) {
    const int nmax = (1 << bits) - 1;
    const size_t bb = bits == 4 ? 144 : 176;
    for (int64_t b = 0; b < n / 256; b++, x += 256, dst += bb) {
        float scale[8], mins[8], mmax;
        const float smax = range_scales(x, 8, 32, (float)nmax, scale, mins, &mmax);
        const float d = f16r(smax / 63.0f), dmin = f16r(mmax / 63.0f);
        memset(dst, 0, bb);
        put_f16(dst, d);
        put_f16(dst + 2, dmin);
        uint8_t *sb = dst + 4, *qh = dst + 16, *qs = bits == 4 ? dst + 16 : dst + 48;
        for (int s = 0; s < 8; s++) {
            const int sc = scale_code(scale[s], d, 0, 63);
            const int m = scale_code(mins[s], dmin, 0, 63);
            if (s < 4) {
                sb[s] |= (uint8_t)sc;
                sb[s + 4] |= (uint8_t)m;
            } else {
                sb[s + 4] = (uint8_t)((sc & 15) | (m & 15) << 4);
                sb[s - 4] |= (uint8_t)((sc >> 4) << 6);
                sb[s] |= (uint8_t)((m >> 4) << 6);
            }
            const float ds = d * (float)sc, ms = dmin * (float)m;
            for (int j = 0; j < 32; j++) {
                const int e = 32 * s + j;
                const int u = ds > 0 ? clampi((int)lrintf((x[e] + ms) / ds), 0, nmax) : 0;
                uint8_t *q = &qs[32 * (e / 64) + e % 32];
                *q |= (uint8_t)(e % 64 < 32 ? (u & 15) : (u & 15) << 4);
                if (bits == 5) qh[e % 32] |= (uint8_t)((u >> 4) << (2 * (e / 64) + (e % 64 >= 32)));
            }
        }
    }
}

static void quantize_q6_k(const float *x, uint8_t *dst, int64_t n) {
    for (int64_t b = 0; b < n / 256; b++, x += 256, dst += 210) {
        float scale[16];
        /* the extreme maps to -32 exactly */
        const float d = f16r(extreme_scales(x, 16, 16, -32.0f, scale) / 127.0f);
        memset(dst, 0, 210);
        put_f16(dst + 208, d);
        uint8_t *ql = dst, *qh = dst + 128;
        for (int s = 0; s < 16; s++) {
            const int sc = scale_code(scale[s], d, -128, 127);
            dst[192 + s] = (uint8_t)(int8_t)sc;
            const float ds = d * (float)sc;
            for (int j = 0; j < 16; j++) {
                const int e = 16 * s + j;
                const int u = ds != 0 ? clampi((int)lrintf(x[e] / ds), -32, 31) + 32 : 32;
                const int hh = e / 128, jj = (e % 128) / 32, l = e % 32;
                ql[64 * hh + l + 32 * (jj & 1)] |= (uint8_t)(jj < 2 ? (u & 15) : (u & 15) << 4);
                qh[32 * hh + l] |= (uint8_t)((u >> 4) << (2 * jj));
            }
        }
    }
}

/* Q2_K: each sub-block of 16 takes [min(0, lo), hi] in 3 steps; the scales
 * and minimums are quantized to 4 bits against the largest (F16 d, dmin). */
static void quantize_q2_k(const float *x, uint8_t *dst, int64_t n) {
    for (int64_t b = 0; b < n / 256; b++, x += 256, dst += 84) {
        float scale[16], mins[16], mmax;
        const float smax = range_scales(x, 16, 16, 3.0f, scale, mins, &mmax);
        const float d = f16r(smax / 15.0f), dmin = f16r(mmax / 15.0f);
        memset(dst, 0, 84);
        put_f16(dst + 80, d);
        put_f16(dst + 82, dmin);
        uint8_t *qs = dst + 16;
        for (int s = 0; s < 16; s++) {
            const int sc = scale_code(scale[s], d, 0, 15);
            const int m = scale_code(mins[s], dmin, 0, 15);
            dst[s] = (uint8_t)(sc | m << 4);
            const float ds = d * (float)sc, ms = dmin * (float)m;
            for (int j = 0; j < 16; j++) {
                const int e = 16 * s + j;
                const int u = ds > 0 ? clampi((int)lrintf((x[e] + ms) / ds), 0, 3) : 0;
                qs[32 * (e / 128) + e % 32] |= (uint8_t)(u << (2 * ((e % 128) / 32)));
            }
        }
    }
}

/* Q3_K: each sub-block of 16 maps its extreme to -4 (sign kept), the
 * scales quantized to 6 bits signed against the largest (F16 d). */
static void quantize_q3_k(const float *x, uint8_t *dst, int64_t n) {
    for (int64_t b = 0; b < n / 256; b++, x += 256, dst += 110) {
        float scale[16];
        const float d = f16r(extreme_scales(x, 16, 16, -4.0f, scale) / 31.0f);
        memset(dst, 0, 110);
        put_f16(dst + 108, d);
        uint8_t *hm = dst, *qs = dst + 32, *sb = dst + 96;
        for (int s = 0; s < 16; s++) {
            const int sc = scale_code(scale[s], d, -32, 31);
            const int ls = sc + 32;
            sb[s % 8] |= (uint8_t)((ls & 15) << (s < 8 ? 0 : 4));
            sb[8 + s % 4] |= (uint8_t)((ls >> 4) << (2 * (s / 4)));
            const float ds = d * (float)sc;
            for (int j = 0; j < 16; j++) {
                const int e = 16 * s + j, hh = e / 128, jj = (e % 128) / 32, l = e % 32;
                const int u = ds != 0 ? clampi((int)lrintf(x[e] / ds), -4, 3) + 4 : 4;
                qs[32 * hh + l] |= (uint8_t)((u & 3) << (2 * jj));
                hm[l] |= (uint8_t)((u >> 2) << (4 * hh + jj));
            }
        }
    }
}

/* The codebook index nearest to v (kvalues_iq4nl is increasing). */
static int iq4_nearest(float v) {
    int best = 0;
    for (int i = 1; i < 16; i++)
        if (fabsf(v - (float)pg_iq4nl_kvalues[i]) < fabsf(v - (float)pg_iq4nl_kvalues[best]))
            best = i;
    return best;
}

/* The scale of 32 values x against the codebook: the extreme maps to -127
 * (sign kept), then one least-squares refit for the chosen indices. */
static float iq4_scale(const float *x) {
    const float v = signed_extreme(x, 32);
    if (v == 0) return 0;
    const float d = v / -127.0f;
    double num = 0, den = 0;
    for (int j = 0; j < 32; j++) {
        const float k = (float)pg_iq4nl_kvalues[iq4_nearest(x[j] / d)];
        num += (double)x[j] * k;
        den += (double)k * k;
    }
    return den > 0 ? (float)(num / den) : d;
}

static void quantize_iq4_nl(const float *x, uint8_t *dst, int64_t n) {
    for (int64_t b = 0; b < n / 32; b++, x += 32, dst += 18) {
        const float d = f16r(iq4_scale(x));
        put_f16(dst, d);
        for (int j = 0; j < 16; j++) {
            const int lo = d != 0 ? iq4_nearest(x[j] / d) : 8;
            const int hi = d != 0 ? iq4_nearest(x[j + 16] / d) : 8;
            dst[2 + j] = (uint8_t)(lo | hi << 4);
        }
    }
}

static void quantize_iq4_xs(const float *x, uint8_t *dst, int64_t n) {
    for (int64_t b = 0; b < n / 256; b++, x += 256, dst += 136) {
        float scale[8], amax = 0;
        for (int s = 0; s < 8; s++) {
            scale[s] = iq4_scale(x + 32 * s);
            amax = fmaxf(amax, fabsf(scale[s]));
        }
        const float d = f16r(amax / 31.0f);
        memset(dst, 0, 136);
        uint16_t sh = 0;
        put_f16(dst, d);
        for (int s = 0; s < 8; s++) {
            const int sc = scale_code(scale[s], d, -32, 31);
            const int ls = sc + 32;
            dst[4 + s / 2] |= (uint8_t)((ls & 15) << (4 * (s % 2)));
            sh |= (uint16_t)((ls >> 4) << (2 * s));
            const float dl = d * (float)sc;
            for (int j = 0; j < 16; j++) {
                const int lo = dl != 0 ? iq4_nearest(x[32 * s + j] / dl) : 8;
                const int hi = dl != 0 ? iq4_nearest(x[32 * s + j + 16] / dl) : 8;
                dst[8 + 16 * s + j] = (uint8_t)(lo | hi << 4);
            }
        }
        memcpy(dst + 2, &sh, 2);
    }
}

/* Convert n floats to dtype t into dst; returns bytes. */
static size_t convert(pg_dtype t, const float *x, void *dst, int64_t n) {
    switch (t) {
    case PG_F32:
        memcpy(dst, x, (size_t)n * 4);
        return (size_t)n * 4;
    case PG_F16:
        for (int64_t i = 0; i < n; i++)
            ((uint16_t *)dst)[i] = pg_f32_to_f16(x[i]);
        return (size_t)n * 2;
    case PG_BF16:
        for (int64_t i = 0; i < n; i++)
            ((uint16_t *)dst)[i] = pg_f32_to_bf16(x[i]);
        return (size_t)n * 2;
    case PG_Q8_0:
        quantize_q8_0(x, dst, n);
        return (size_t)n / 32 * 34;
    case PG_Q4_0:
        quantize_q4_0(x, dst, n);
        return (size_t)n / 32 * 18;
    case PG_Q4_K:
    case PG_Q5_K:
        quantize_q45_k(x, dst, n, t == PG_Q4_K ? 4 : 5);
        return pg_dtype_row_bytes(t, (size_t)n);
    case PG_Q6_K:
        quantize_q6_k(x, dst, n);
        return (size_t)n / 256 * 210;
    case PG_Q2_K:
        quantize_q2_k(x, dst, n);
        return (size_t)n / 256 * 84;
    case PG_Q3_K:
        quantize_q3_k(x, dst, n);
        return (size_t)n / 256 * 110;
    case PG_IQ4_NL:
        quantize_iq4_nl(x, dst, n);
        return (size_t)n / 32 * 18;
    case PG_IQ4_XS:
        quantize_iq4_xs(x, dst, n);
        return (size_t)n / 256 * 136;
    default:
        return 0;
    }
}

typedef pagoda_status (*write_fn)(void *w, const void *data, size_t n);
static pagoda_status st_write(void *w, const void *d, size_t n) {
    return pg_safetensors_writer_write(w, d, n);
}
static pagoda_status gg_write(void *w, const void *d, size_t n) {
    return pg_gguf_writer_write(w, d, n);
}

/* x as the HF checkpoint stores it (rounded to hf_dtype), back in f32. */
static float hf_round(const pg_gen_model_options *o, float x) {
    return o->hf_dtype == PG_BF16  ? pg_bf16_to_f32(pg_f32_to_bf16(x))
           : o->hf_dtype == PG_F16 ? pg_f16_to_f32(pg_f32_to_f16(x))
                                   : x;
}

/* Write t's rows in dtype dt: the HF layout, or (gguf) the GGUF one (Llama's
 * Q/K row permutation, Qwen3.5's tiled V heads and value transforms). `tmp`
 * holds a row (column reorders). */
static pagoda_status stream_tensor(const pg_gen_model_options *o, const gen_tensor *t, pg_dtype dt,
                                   bool gguf, float *row, float *tmp, void *buf, write_fn wf,
                                   void *w) {
    const bool cols_perm = gguf && (t->vmap == VM_V_COLS || t->vmap == VM_HEAD_COLS);
    for (int64_t r = 0; r < t->rows; r++) {
        pg_gen_model_row(o, t->name, gguf ? gguf_src_row(o, t, r) : r, t->cols,
                         cols_perm ? tmp : row);
        if (cols_perm)
            for (int64_t c = 0; c < t->cols; c++)
                row[c] = tmp[v_tiled_src(o, c, t->vmap == VM_V_COLS ? o->lin_v_dim : 1)];
        /* GGUF keeps 1-D tensors (and the MoE router) in F32: the exact
         * upcast of the checkpoint's values, as llama.cpp's converter stores
         * a BF16/F16 model's norms. Qwen3.5: every GGUF value is made from
         * the checkpoint's (then 1 + w, -exp(A_log) in f32, as the
         * converter computes them after its upcast). */
        if (gguf && ((t->gguf_f32 && dt == PG_F32) || is_q35(o)))
            for (int64_t i = 0; i < t->cols; i++)
                row[i] = hf_round(o, row[i]);
        /* (an F16 checkpoint is not upcast first: torch computes in f16) */
        if (gguf && t->tx == TX_ONE_PLUS)
            for (int64_t i = 0; i < t->cols; i++)
                row[i] = o->hf_dtype == PG_F16 ? hf_round(o, 1.0f + row[i]) : 1.0f + row[i];
        else if (gguf && t->tx == TX_NEG_EXP)
            for (int64_t i = 0; i < t->cols; i++)
                row[i] = o->hf_dtype == PG_F16 ? hf_round(o, -expf(row[i])) : -expf(row[i]);
        size_t nb = convert(dt, row, buf, t->cols);
        pagoda_status s = wf(w, buf, nb);
        if (s) return s;
    }
    return PAGODA_OK;
}

/* ------------------------------------------------------------ HF */

static pagoda_status write_text(const char *path, const char *text) {
    FILE *f = fopen(path, "wb");
    if (!f) return pg_error(PAGODA_ERR_IO, "%s: cannot create: %s", path, strerror(errno));
    size_t n = strlen(text);
    bool ok = fwrite(text, 1, n, f) == n;
    if (fclose(f) != 0) ok = false;
    return ok ? PAGODA_OK : pg_error(PAGODA_ERR_IO, "%s: write failed", path);
}

static pagoda_status copy_file(const char *from, const char *to) {
    FILE *in = fopen(from, "rb");
    if (!in) return pg_error(PAGODA_ERR_NOT_FOUND, "%s: cannot open: %s", from, strerror(errno));
    FILE *out = fopen(to, "wb");
    if (!out) {
        fclose(in);
        return pg_error(PAGODA_ERR_IO, "%s: cannot create", to);
    }
    char buf[1 << 16];
    size_t n;
    bool ok = true;
    while ((n = fread(buf, 1, sizeof buf, in)) > 0)
        if (fwrite(buf, 1, n, out) != n) ok = false;
    fclose(in);
    if (fclose(out) != 0) ok = false;
    return ok ? PAGODA_OK : pg_error(PAGODA_ERR_IO, "%s: write failed", to);
}

static const char *torch_dtype_name(pg_dtype t) {
    return t == PG_F16 ? "float16" : t == PG_BF16 ? "bfloat16" : "float32";
}

/* The quantization_config member (with its trailing comma) or "". */
static const char *ct_config(const pg_gen_model_options *o) {
    static _Thread_local char buf[1024];
    if (!o->ct_bits || o->ct_dense) return "";
    char strat[96];
    if (o->ct_group)
        snprintf(strat, sizeof strat, "\"strategy\": \"group\", \"group_size\": %d", o->ct_group);
    else
        snprintf(strat, sizeof strat, "\"strategy\": \"channel\", \"group_size\": null");
    snprintf(buf, sizeof buf,
             "  \"quantization_config\": {\"quant_method\": \"compressed-tensors\", \"format\": "
             "\"%s\", \"quantization_status\": \"compressed\", \"config_groups\": {\"group_0\": "
             "{\"targets\": [\"Linear\"], \"weights\": {\"num_bits\": %d, \"type\": \"int\", "
             "\"symmetric\": true, %s, \"dynamic\": false, \"actorder\": null}, "
             "\"input_activations\": %s, \"output_activations\": null}}, \"ignore\": "
             "[\"lm_head\"%s], \"kv_cache_scheme\": null},\n",
             o->ct_bits == 8 ? "int-quantized" : "pack-quantized", o->ct_bits, strat,
             o->ct_weight_only ? "null"
                               : "{\"num_bits\": 8, \"type\": \"int\", \"symmetric\": true, "
                                 "\"strategy\": \"token\", \"dynamic\": true}",
             ct_ignore_json(o));
    return buf;
}

/* config.json of Qwen3_5ForConditionalGeneration / Qwen3_5MoeForConditionalGeneration
 * as published (the text model's fields in "text_config"; no vision_config:
 * no vision tower is written). Returns malloc'd text or NULL. */
static char *q35_config(const pg_gen_model_options *o) {
    const pg_arch *a = gen_arch(o);
    const bool moe = is_moe(o);
    size_t cap = 8192 + (size_t)o->layers * 32;
    char *js = malloc(cap);
    if (!js) return NULL;
    size_t k = 0;
#define OUT(...) (k += (size_t)snprintf(js + k, cap - k, __VA_ARGS__))
    char bos[24] = "null";
    if (o->bos_token_id >= 0) snprintf(bos, sizeof bos, "%d", o->bos_token_id);
    OUT("{\n  \"architectures\": [\n    \"%s\"\n  ],\n  \"model_type\": \"%s\",\n"
        "  \"text_config\": {\n",
        a->hf_architectures[0], a->hf_model_types[0]);
    OUT("    \"attention_bias\": false,\n    \"attention_dropout\": 0.0,\n"
        "    \"attn_output_gate\": true,\n    \"bos_token_id\": %s,\n"
        "    \"dtype\": \"%s\",\n    \"eos_token_id\": %d,\n"
        "    \"full_attention_interval\": %d,\n    \"head_dim\": %d,\n"
        "    \"hidden_act\": \"silu\",\n    \"hidden_size\": %d,\n"
        "    \"initializer_range\": %g,\n",
        bos, torch_dtype_name(o->hf_dtype), o->eos_token_id, o->full_attn_interval, head_dim(o),
        o->hidden, o->init_std);
    if (o->ffn > 0) OUT("    \"intermediate_size\": %d,\n", o->ffn);
    OUT("    \"layer_types\": [\n");
    for (int l = 0; l < o->layers; l++)
        OUT("      \"%s\"%s\n", layer_linear(o, l) ? "linear_attention" : "full_attention",
            l + 1 < o->layers ? "," : "");
    OUT("    ],\n    \"linear_conv_kernel_dim\": %d,\n    \"linear_key_head_dim\": %d,\n"
        "    \"linear_num_key_heads\": %d,\n    \"linear_num_value_heads\": %d,\n"
        "    \"linear_value_head_dim\": %d,\n    \"mamba_ssm_dtype\": \"float32\",\n"
        "    \"max_position_embeddings\": %d,\n",
        o->conv_kernel, o->lin_k_dim, o->lin_k_heads, o->lin_v_heads, o->lin_v_dim,
        o->max_position);
    if (moe) OUT("    \"moe_intermediate_size\": %d,\n", o->moe_ffn);
    OUT("    \"model_type\": \"%s\",\n    \"mtp_num_hidden_layers\": %d,\n"
        "    \"mtp_use_dedicated_embeddings\": false,\n    \"num_attention_heads\": %d,\n",
        a->hf_model_types[1], o->mtp_layers, o->heads);
    if (moe)
        OUT("    \"num_experts\": %d,\n    \"num_experts_per_tok\": %d,\n", o->experts,
            o->experts_per_tok);
    OUT("    \"num_hidden_layers\": %d,\n    \"num_key_value_heads\": %d,\n", o->layers,
        o->kv_heads);
    if (moe) OUT("    \"output_router_logits\": false,\n");
    int32_t sec[3];
    q35_mrope_section(o, sec);
    OUT("    \"pad_token_id\": null,\n    \"rms_norm_eps\": %g,\n"
        "    \"rope_parameters\": {\n      \"mrope_interleaved\": true,\n"
        "      \"mrope_section\": [\n        %d,\n        %d,\n        %d\n      ],\n"
        "      \"partial_rotary_factor\": %g,\n      \"rope_theta\": %.9g,\n"
        "      \"rope_type\": \"default\"\n    },\n",
        o->rms_eps, sec[0], sec[1], sec[2], (double)o->partial_rotary, (double)o->rope_theta);
    if (moe)
        OUT("    \"router_aux_loss_coef\": 0.001,\n    \"shared_expert_intermediate_size\": %d,\n",
            o->shared_ffn);
    OUT("    \"tie_word_embeddings\": %s,\n    \"use_cache\": true,\n    \"vocab_size\": %d\n"
        "  },\n  \"tie_word_embeddings\": %s,\n  \"transformers_version\": \"4.57.0.dev0\"\n}\n",
        o->tie ? "true" : "false", o->vocab, o->tie ? "true" : "false");
#undef OUT
    return js;
}

static pagoda_status write_hf_json(const pg_gen_model_options *o) {
    char path[PATH_MAX], js[4096], rs[512] = "null";
    pagoda_status s;
    if (is_q35(o)) {
        char *cfg = q35_config(o);
        if (!cfg) return pg_error(PAGODA_ERR_NOMEM, "out of memory");
        snprintf(path, sizeof path, "%s/config.json", o->hf_dir);
        s = write_text(path, cfg);
        free(cfg);
        if (s) return s;
        goto generation;
    }
    if (o->rope_scaling == PG_ROPE_SCALING_LLAMA3)
        snprintf(rs, sizeof rs,
                 "{\"factor\": %g, \"low_freq_factor\": %g, \"high_freq_factor\": %g, "
                 "\"original_max_position_embeddings\": %d, \"rope_type\": \"llama3\"}",
                 o->rope_factor, o->rope_low_freq_factor, o->rope_high_freq_factor,
                 o->rope_original_max_position);
    /* Qwen3's own fields (its configs say sliding_window null and
     * use_sliding_window false), Qwen3-MoE's (as Qwen3-30B-A3B's config);
     * Llama's mlp_bias */
    char extra[768];
    if (is_qwen3(o)) {
        int k = snprintf(extra, sizeof extra,
                         "  \"use_sliding_window\": false,\n  \"sliding_window\": null,\n"
                         "  \"max_window_layers\": %d,\n  \"attention_dropout\": 0.0,\n",
                         o->layers);
        if (is_moe(o))
            snprintf(extra + k, sizeof extra - (size_t)k,
                     "  \"num_experts\": %d,\n  \"num_experts_per_tok\": %d,\n"
                     "  \"moe_intermediate_size\": %d,\n  \"norm_topk_prob\": true,\n"
                     "  \"decoder_sparse_step\": 1,\n  \"mlp_only_layers\": [],\n"
                     "  \"output_router_logits\": false,\n  \"router_aux_loss_coef\": 0.001,\n",
                     o->experts, o->experts_per_tok, o->moe_ffn);
    } else if (is_gpt_oss(o)) {
        int k = snprintf(extra, sizeof extra,
                         "  \"num_local_experts\": %d,\n  \"num_experts_per_tok\": %d,\n"
                         "  \"experts_per_token\": %d,\n  \"sliding_window\": %d,\n"
                         "  \"swiglu_limit\": 7.0,\n  \"layer_types\": [",
                         o->experts, o->experts_per_tok, o->experts_per_tok, o->sliding_window);
        for (int l = 0; l < o->layers && k < (int)sizeof extra - 32; l++)
            k += snprintf(extra + k, sizeof extra - (size_t)k, "%s\"%s\"", l ? ", " : "",
                          l % 2 ? "full_attention" : "sliding_attention");
        snprintf(extra + k, sizeof extra - (size_t)k, "],\n");
        snprintf(rs, sizeof rs,
                 "{\"rope_type\": \"yarn\", \"factor\": %g, \"beta_fast\": 32.0, "
                 "\"beta_slow\": 1.0, \"original_max_position_embeddings\": %d, "
                 "\"truncate\": false}",
                 o->rope_factor, o->rope_original_max_position);
    } else
        snprintf(extra, sizeof extra, "  \"mlp_bias\": false,\n");
    const pg_arch *a = gen_arch(o);
    snprintf(
        js, sizeof js,
        "{\n  \"architectures\": [\"%s\"],\n  \"model_type\": \"%s\",\n"
        "  \"vocab_size\": %d,\n  \"hidden_size\": %d,\n  \"intermediate_size\": %d,\n"
        "  \"num_hidden_layers\": %d,\n  \"num_attention_heads\": %d,\n  \"num_key_value_heads\": "
        "%d,\n"
        "  \"head_dim\": %d,\n  \"max_position_embeddings\": %d,\n  \"rms_norm_eps\": %g,\n"
        "  \"rope_theta\": %.1f,\n  \"rope_scaling\": %s,\n  \"hidden_act\": \"silu\",\n"
        "  \"tie_word_embeddings\": %s,\n  \"attention_bias\": %s,\n%s"
        "  \"initializer_range\": %g,\n  \"bos_token_id\": %d,\n  \"eos_token_id\": %d,\n"
        "%s  \"torch_dtype\": \"%s\"\n}\n",
        a->hf_architectures[0], a->hf_model_types[0], o->vocab, o->hidden,
        is_gpt_oss(o) ? o->moe_ffn : o->ffn, o->layers,
        o->heads, o->kv_heads, head_dim(o), o->max_position, o->rms_eps, o->rope_theta, rs,
        o->tie ? "true" : "false", is_gpt_oss(o) ? "true" : "false", extra, o->init_std, o->bos_token_id, o->eos_token_id,
        ct_config(o), torch_dtype_name(o->hf_dtype));
    snprintf(path, sizeof path, "%s/config.json", o->hf_dir);
    s = write_text(path, js);
    if (s) return s;
generation:;
    char bos[40] = "";
    if (o->bos_token_id >= 0)
        snprintf(bos, sizeof bos, "  \"bos_token_id\": %d,\n", o->bos_token_id);
    snprintf(js, sizeof js,
             "{\n%s  \"eos_token_id\": %d,\n  \"do_sample\": true,\n"
             "  \"temperature\": 0.6,\n  \"top_p\": 0.9\n}\n",
             bos, o->eos_token_id);
    snprintf(path, sizeof path, "%s/generation_config.json", o->hf_dir);
    s = write_text(path, js);
    if (s || !o->tokenizer_dir) return s;
    static const char *const TOK[] = {"tokenizer.json", "tokenizer_config.json"};
    for (int i = 0; i < 2 && !s; i++) {
        char from[PATH_MAX + 32];
        snprintf(from, sizeof from, "%s/%s", o->tokenizer_dir, TOK[i]);
        snprintf(path, sizeof path, "%s/%s", o->hf_dir, TOK[i]);
        struct stat st;
        if (stat(from, &st) == 0)
            s = copy_file(from, path);
        else if (i == 0)
            s = pg_error(PAGODA_ERR_NOT_FOUND, "%s: no such file", from);
    }
    return s;
}

/* A linear weight the compressed-tensors writer quantizes (not lm_head). */
static bool ct_name(const pg_gen_model_options *o, const char *name) {
    size_t n = strlen(name);
    if (!o->ct_bits || n <= 12 || strcmp(name + n - 12, "_proj.weight")) return false;
    if (!o->ct_ignore) return true;
    char layer[128];
    snprintf(layer, sizeof layer, "%.*s", (int)(n - 7), name);
    char *ig[1] = {(char *)o->ct_ignore};
    pg_ct_config c = {.format = PG_CT_PACK_QUANTIZED, .n_ignore = 1, .ignore = ig};
    return !pg_ct_ignored(&c, layer);
}

/* o->ct_ignore as a JSON string member of the ignore list ("" if none). */
static const char *ct_ignore_json(const pg_gen_model_options *o) {
    static _Thread_local char buf[300];
    buf[0] = 0;
    if (!o->ct_ignore) return buf;
    size_t k = (size_t)snprintf(buf, sizeof buf, ", \"");
    for (const char *p = o->ct_ignore; *p && k + 4 < sizeof buf; p++) {
        if (*p == '"' || *p == '\\') buf[k++] = '\\';
        buf[k++] = *p;
    }
    snprintf(buf + k, sizeof buf - k, "\"");
    return buf;
}
static bool ct_linear(const pg_gen_model_options *o, const gen_tensor *t) {
    return t->ndim == 2 && ct_name(o, t->name);
}

/* One quantized row: scale per group (BF16-rounded first, then q from it);
 * the compressed-tensors rule or, with ct_rtn, pagoda's load-time rule
 * (see gen_model.h). */
static void ct_row(const pg_gen_model_options *o, const float *x, int64_t K, int8_t *q,
                   uint16_t *sc) {
    const int64_t G = o->ct_group ? o->ct_group : K;
    const bool w8 = o->ct_bits == 8;
    const float div = o->ct_rtn ? (w8 ? 127.0f : 8.0f) : (w8 ? 127.5f : 7.5f);
    const float lo = w8 ? (o->ct_rtn ? -127.0f : -128.0f) : -8.0f, hi = w8 ? 127.0f : 7.0f;
    for (int64_t g = 0; g * G < K; g++) {
        int64_t k1 = (g + 1) * G < K ? (g + 1) * G : K, at = g * G;
        float am = 0;
        for (int64_t k = g * G; k < k1; k++)
            if (fabsf(x[k]) > am) am = fabsf(x[k]), at = k;
        sc[g] = pg_f32_to_bf16(am / div);
        float d = pg_bf16_to_f32(sc[g]);
        for (int64_t k = g * G; k < k1; k++) {
            float v = d > 0 ? rintf(x[k] / d) : 0.0f;
            q[k] = (int8_t)(v < lo ? lo : (v > hi ? hi : v));
        }
        if (o->ct_rtn && !w8 && d > 0) q[at] = -8;
    }
}

/* compressed-tensors HF output: one shard, linear weights quantized. */
static pagoda_status write_hf_ct(const pg_gen_model_options *o, const gen_tensor *t, size_t nt,
                                 float *row, void *buf) {
    if ((o->ct_bits != 8 && o->ct_bits != 4) || o->ct_group < 0 || o->ct_group % 32)
        return pg_error(PAGODA_ERR_INVALID_ARG,
                        "compressed-tensors output: bits %d group %d (need 8 or 4; group 0 or a "
                        "multiple of 32)",
                        o->ct_bits, o->ct_group);
    pg_safetensors_writer *w;
    pagoda_status s = pg_safetensors_writer_create(&w);
    if (s) return s;
    char nm[160];
    for (size_t j = 0; j < nt && !s; j++) {
        int64_t shape[2] = {t[j].ndim == 2 ? t[j].rows : t[j].cols, t[j].cols};
        if (!ct_linear(o, &t[j])) {
            s = pg_safetensors_writer_add(w, t[j].name, o->hf_dtype, t[j].ndim, shape);
            continue;
        }
        const int64_t N = t[j].rows, K = t[j].cols;
        const int64_t ng = o->ct_group ? (K + o->ct_group - 1) / o->ct_group : 1;
        size_t base = strlen(t[j].name) - strlen("weight");
        if (o->ct_bits == 8) {
            s = pg_safetensors_writer_add(w, t[j].name, PG_I8, 2, shape);
        } else {
            int64_t ps[2] = {N, (K + 7) / 8}, ss[1] = {2};
            snprintf(nm, sizeof nm, "%.*sweight_packed", (int)base, t[j].name);
            s = pg_safetensors_writer_add(w, nm, PG_I32, 2, ps);
            snprintf(nm, sizeof nm, "%.*sweight_shape", (int)base, t[j].name);
            if (!s) s = pg_safetensors_writer_add(w, nm, PG_I64, 1, ss);
        }
        int64_t sc[2] = {N, ng};
        snprintf(nm, sizeof nm, "%.*sweight_scale", (int)base, t[j].name);
        if (!s) s = pg_safetensors_writer_add(w, nm, PG_BF16, 2, sc);
    }
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/model.safetensors", o->hf_dir);
    if (!s) s = pg_safetensors_writer_begin(w, path);
    int8_t *q = NULL;
    uint16_t *scl = NULL;
    for (size_t j = 0; j < nt && !s; j++) {
        if (!ct_linear(o, &t[j])) {
            s = stream_tensor(o, &t[j], o->hf_dtype, false, row, NULL, buf, st_write, w);
            continue;
        }
        const int64_t N = t[j].rows, K = t[j].cols;
        const int64_t ng = o->ct_group ? (K + o->ct_group - 1) / o->ct_group : 1;
        free(q);
        free(scl);
        q = malloc((size_t)(N * K));
        scl = malloc((size_t)(N * ng) * sizeof *scl);
        if (!q || !scl) {
            s = pg_error(PAGODA_ERR_NOMEM, "out of memory");
            break;
        }
        for (int64_t r = 0; r < N; r++) {
            raw_row(o, t[j].name, r, K, row);
            ct_row(o, row, K, q + r * K, scl + r * ng);
        }
        if (o->ct_bits == 8) {
            s = st_write(w, q, (size_t)(N * K));
        } else {
            const int64_t words = (K + 7) / 8;
            for (int64_t r = 0; r < N && !s; r++)
                for (int64_t wd = 0; wd < words && !s; wd++) {
                    uint32_t u = 0;
                    for (int64_t k = 8 * wd; k < K && k < 8 * wd + 8; k++)
                        u |= (uint32_t)(q[r * K + k] + 8) << (4 * (k - 8 * wd));
                    uint8_t le[4] = {(uint8_t)u, (uint8_t)(u >> 8), (uint8_t)(u >> 16),
                                     (uint8_t)(u >> 24)};
                    s = st_write(w, le, 4);
                }
            int64_t shp[2] = {N, K};
            uint8_t le[16];
            for (int i = 0; i < 16; i++)
                le[i] = (uint8_t)((uint64_t)shp[i / 8] >> (8 * (i % 8)));
            if (!s) s = st_write(w, le, 16);
        }
        for (int64_t i = 0; i < N * ng && !s; i++) {
            uint8_t le[2] = {(uint8_t)scl[i], (uint8_t)(scl[i] >> 8)};
            s = st_write(w, le, 2);
        }
    }
    free(q);
    free(scl);
    if (!s) s = pg_safetensors_writer_finish(w);
    pg_safetensors_writer_free(w);
    return s;
}

static pagoda_status write_hf(const pg_gen_model_options *o, const gen_tensor *t, size_t nt,
                              float *row, void *buf) {
    if (o->hf_dtype != PG_F32 && o->hf_dtype != PG_F16 && o->hf_dtype != PG_BF16)
        return pg_error(PAGODA_ERR_INVALID_ARG, "HF output supports F32, F16, BF16, not %s",
                        pg_dtype_name(o->hf_dtype));
    if (mkdir(o->hf_dir, 0755) != 0 && errno != EEXIST)
        return pg_error(PAGODA_ERR_IO, "%s: cannot create directory: %s", o->hf_dir,
                        strerror(errno));
    pagoda_status s = write_hf_json(o);
    if (s) return s;
    if (o->ct_bits && !o->ct_dense) return write_hf_ct(o, t, nt, row, buf);
    int ns = o->shards < 1 ? 1 : o->shards;
    if ((size_t)ns > nt) ns = (int)nt;
    uint64_t total = 0, esz = pg_dtype_block_bytes(o->hf_dtype);
    for (size_t i = 0; i < nt; i++)
        total += (uint64_t)(t[i].rows * t[i].cols) * esz;
    /* shard k takes tensors while the running total stays below (k+1)/ns of all bytes */
    size_t *first = calloc((size_t)ns + 1, sizeof *first);
    const char **names = calloc(nt, sizeof *names), **files = calloc(nt, sizeof *files);
    char(*fnames)[64] = calloc((size_t)ns, 64);
    if (!first || !names || !files || !fnames) {
        s = pg_error(PAGODA_ERR_NOMEM, "out of memory");
        goto done;
    }
    uint64_t acc = 0;
    size_t i = 0;
    for (int k = 0; k < ns; k++) {
        first[k] = i;
        if (k == ns - 1) break;
        uint64_t limit = total / (uint64_t)ns * (uint64_t)(k + 1);
        do { /* at least one tensor per shard; leave one for each later shard */
            acc += (uint64_t)(t[i].rows * t[i].cols) * esz;
            i++;
        } while (i < nt - (size_t)(ns - 1 - k) &&
                 acc + (uint64_t)(t[i].rows * t[i].cols) * esz <= limit);
    }
    first[ns] = nt;
    for (int k = 0; k < ns && !s; k++) {
        if (ns == 1)
            snprintf(fnames[k], 64, "model.safetensors");
        else
            snprintf(fnames[k], 64, "model-%05d-of-%05d.safetensors", k + 1, ns);
        pg_safetensors_writer *w;
        s = pg_safetensors_writer_create(&w);
        if (s) break;
        for (size_t j = first[k]; j < first[k + 1] && !s; j++) {
            s = pg_safetensors_writer_add(w, t[j].hf, o->hf_dtype, t[j].hf_ndim, t[j].hf_shape);
            names[j] = t[j].hf;
            files[j] = fnames[k];
        }
        char path[PATH_MAX];
        snprintf(path, sizeof path, "%s/%s", o->hf_dir, fnames[k]);
        if (!s) s = pg_safetensors_writer_begin(w, path);
        for (size_t j = first[k]; j < first[k + 1] && !s; j++)
            s = stream_tensor(o, &t[j], o->hf_dtype, false, row, NULL, buf, st_write, w);
        if (!s) s = pg_safetensors_writer_finish(w);
        pg_safetensors_writer_free(w);
    }
    if (!s && ns > 1) {
        char path[PATH_MAX];
        snprintf(path, sizeof path, "%s/model.safetensors.index.json", o->hf_dir);
        s = pg_safetensors_write_index(path, total, names, files, nt);
    }
done:
    free(first);
    free(names);
    free(files);
    free(fnames);
    return s;
}

/* ------------------------------------------------------------ GGUF */

/* A synthetic SentencePiece-style vocab: <unk> <s> </s>, 256 byte tokens,
 * then "tok<i>" pieces, so tokenizers can load the file. */
static pagoda_status synth_vocab(const pg_gen_model_options *o, pg_gguf_writer *w) {
    if (o->vocab < 259) return PAGODA_OK;
    size_t n = (size_t)o->vocab;
    char **tok = calloc(n, sizeof *tok);
    float *score = calloc(n, sizeof *score);
    int32_t *type = calloc(n, sizeof *type);
    pagoda_status s = PAGODA_OK;
    if (!tok || !score || !type) {
        free(tok);
        free(score);
        free(type);
        return pg_error(PAGODA_ERR_NOMEM, "out of memory");
    }
    for (size_t i = 0; i < n && !s; i++) {
        char b[32];
        if (i == 0)
            snprintf(b, sizeof b, "<unk>"), type[i] = 2;
        else if (i == 1)
            snprintf(b, sizeof b, "<s>"), type[i] = 3;
        else if (i == 2)
            snprintf(b, sizeof b, "</s>"), type[i] = 3;
        else if (i < 259)
            snprintf(b, sizeof b, "<0x%02X>", (unsigned)(i - 3)), type[i] = 6;
        else
            snprintf(b, sizeof b, "tok%zu", i), type[i] = 1;
        score[i] = i < 259 ? 0.0f : -(float)(i - 259);
        tok[i] = strdup(b);
        if (!tok[i]) s = pg_error(PAGODA_ERR_NOMEM, "out of memory");
    }
    if (!s) {
        pg_gguf_writer_set_str(w, "tokenizer.ggml.model", "llama");
        pg_gguf_writer_set_str_array(w, "tokenizer.ggml.tokens", (const char *const *)tok, n);
        pg_gguf_writer_set_array(w, "tokenizer.ggml.scores", PG_GGUF_F32, score, n);
        pg_gguf_writer_set_array(w, "tokenizer.ggml.token_type", PG_GGUF_I32, type, n);
        pg_gguf_writer_set_u32(w, "tokenizer.ggml.unknown_token_id", 0);
        if (o->bos_token_id >= 0)
            pg_gguf_writer_set_u32(w, "tokenizer.ggml.bos_token_id", (uint32_t)o->bos_token_id);
        pg_gguf_writer_set_u32(w, "tokenizer.ggml.eos_token_id", (uint32_t)o->eos_token_id);
    }
    for (size_t i = 0; i < n; i++)
        free(tok[i]);
    free(tok);
    free(score);
    free(type);
    return s;
}

static pagoda_status copy_vocab(const pg_gen_model_options *o, pg_gguf_writer *w) {
    pg_gguf *g;
    pagoda_status s = pg_gguf_open(o->vocab_gguf, &g);
    if (s) return s;
    pg_gguf_array toks;
    if (pg_gguf_get_array(g, "tokenizer.ggml.tokens", &toks)) {
        s = pg_error(PAGODA_ERR_INVALID_ARG, "%s: no tokenizer.ggml.tokens to copy", o->vocab_gguf);
    } else if (toks.n > (uint64_t)o->vocab) {
        s = pg_error(PAGODA_ERR_INVALID_ARG,
                     "%s: vocab has %llu tokens but the model's vocab is %d", o->vocab_gguf,
                     (unsigned long long)toks.n, o->vocab);
    }
    for (size_t i = 0; !s && i < pg_gguf_n_kv(g); i++) {
        if (strncmp(pg_gguf_key_at(g, i), "tokenizer.", 10) != 0) continue;
        size_t len;
        const uint8_t *raw = pg_gguf_kv_raw(g, i, &len);
        pg_gguf_writer_add_raw_kv(w, raw, len);
    }
    pg_gguf_close(g);
    return s;
}

static uint32_t file_type(pg_dtype t) {
    switch (t) { /* llama_ftype */
    case PG_F16:
        return 1;
    case PG_Q4_0:
        return 2;
    case PG_Q8_0:
        return 7;
    case PG_Q4_K: /* MOSTLY_Q4_K_M / Q5_K_M / Q6_K */
        return 15;
    case PG_Q5_K:
        return 17;
    case PG_Q6_K:
        return 18;
    case PG_Q2_K:
        return 10;
    case PG_Q3_K: /* MOSTLY_Q3_K_M */
        return 12;
    case PG_IQ4_NL:
        return 25;
    case PG_IQ4_XS:
        return 30;
    case PG_BF16:
        return 32;
    default:
        return 0;
    }
}

/* The "qwen35." / "qwen35moe." keys Qwen3_5TextModel / Qwen3_5MoeTextModel
 * (Qwen3NextModel, Qwen2MoeModel, _QwenMtpMixin, TextModel) write. */
static void q35_gguf_keys(const pg_gen_model_options *o, pg_gguf_writer *w) {
    const pg_arch *a = gen_arch(o);
    const int L = o->layers, LA = o->layers + o->mtp_layers, hd = head_dim(o);
    char k[96];
#define KEY(key) (snprintf(k, sizeof k, "%s." key, a->gguf_name), k)
    pg_gguf_writer_set_u32(w, KEY("block_count"), (uint32_t)LA);
    pg_gguf_writer_set_u32(w, KEY("context_length"), (uint32_t)o->max_position);
    pg_gguf_writer_set_u32(w, KEY("embedding_length"), (uint32_t)o->hidden);
    if (o->ffn > 0) /* none for the MoE: its config has no intermediate_size */
        pg_gguf_writer_set_u32(w, KEY("feed_forward_length"), (uint32_t)o->ffn);
    pg_gguf_writer_set_u32(w, KEY("attention.head_count"), (uint32_t)o->heads);
    pg_gguf_writer_set_u32(w, KEY("attention.head_count_kv"), (uint32_t)o->kv_heads);
    int32_t sec[4] = {0, 0, 0, 0};
    q35_mrope_section(o, sec);
    pg_gguf_writer_set_array(w, KEY("rope.dimension_sections"), PG_GGUF_I32, sec, 4);
    pg_gguf_writer_set_f32(w, KEY("rope.freq_base"), o->rope_theta);
    pg_gguf_writer_set_f32(w, KEY("attention.layer_norm_rms_epsilon"), o->rms_eps);
    if (is_moe(o)) {
        pg_gguf_writer_set_u32(w, KEY("expert_count"), (uint32_t)o->experts);
        pg_gguf_writer_set_u32(w, KEY("expert_used_count"), (uint32_t)o->experts_per_tok);
    }
    pg_gguf_writer_set_u32(w, KEY("attention.key_length"), (uint32_t)hd);
    pg_gguf_writer_set_u32(w, KEY("attention.value_length"), (uint32_t)hd);
    if (is_moe(o)) {
        pg_gguf_writer_set_u32(w, KEY("expert_feed_forward_length"), (uint32_t)o->moe_ffn);
        pg_gguf_writer_set_u32(w, KEY("expert_shared_feed_forward_length"),
                               (uint32_t)o->shared_ffn);
    }
    if (o->mtp_layers > 0)
        pg_gguf_writer_set_u32(w, KEY("nextn_predict_layers"), (uint32_t)o->mtp_layers);
    pg_gguf_writer_set_u32(w, KEY("ssm.conv_kernel"), (uint32_t)o->conv_kernel);
    pg_gguf_writer_set_u32(w, KEY("ssm.state_size"), (uint32_t)o->lin_k_dim);
    pg_gguf_writer_set_u32(w, KEY("ssm.group_count"), (uint32_t)o->lin_k_heads);
    pg_gguf_writer_set_u32(w, KEY("ssm.time_step_rank"), (uint32_t)o->lin_v_heads);
    pg_gguf_writer_set_u32(w, KEY("ssm.inner_size"), (uint32_t)(o->lin_v_dim * o->lin_v_heads));
    uint8_t rec[Q35_MAX_LAYERS] = {0}; /* the MTP blocks: not recurrent */
    for (int l = 0; l < L; l++)
        rec[l] = layer_linear(o, l);
    pg_gguf_writer_set_array(w, KEY("attention.recurrent_layers"), PG_GGUF_BOOL, rec, (size_t)LA);
    pg_gguf_writer_set_u32(w, KEY("full_attention_interval"), (uint32_t)o->full_attn_interval);
    pg_gguf_writer_set_u32(w, KEY("rope.dimension_count"), (uint32_t)q35_rotary_dim(o));
#undef KEY
    pg_gguf_writer_set_u32(w, "general.quantization_version", 2);
    /* the converter's copy of generation_config.json's sampling fields */
    pg_gguf_writer_set_f32(w, "general.sampling.temp", 0.6f);
    pg_gguf_writer_set_f32(w, "general.sampling.top_p", 0.9f);
}

/* The type of tensor `name` in a *_K_M mixture of base type wd, a
 * simplification of llama-quantize's rules (all layers alike): Q4_K_M /
 * Q5_K_M keep token_embd, output, attn_v and ffn_down at Q6_K; Q3_K_M keeps
 * output at Q6_K and attn_v, attn_output and ffn_down at Q4_K (token_embd
 * stays Q3_K). */
static pg_dtype kmix_type(pg_dtype wd, const char *name) {
    const bool vd = strstr(name, "attn_v.weight") || strstr(name, "ffn_down");
    if (wd == PG_Q3_K)
        return !strcmp(name, "output.weight")             ? PG_Q6_K
               : vd || strstr(name, "attn_output.weight") ? PG_Q4_K
                                                          : wd;
    return !strcmp(name, "token_embd.weight") || !strcmp(name, "output.weight") || vd ? PG_Q6_K
                                                                                      : wd;
}

static pagoda_status write_gguf(const pg_gen_model_options *o, const gen_tensor *t, size_t nt,
                                float *row, float *tmp, void *buf) {
    pg_dtype wd = o->gguf_dtype;
    const bool kq = pg_kq_is_kquant(wd), iq = wd == PG_IQ4_NL || wd == PG_IQ4_XS;
    if (wd != PG_F32 && wd != PG_F16 && wd != PG_BF16 && wd != PG_Q8_0 && wd != PG_Q4_0 && !kq &&
        !iq)
        return pg_error(PAGODA_ERR_INVALID_ARG,
                        "GGUF output supports F32, F16, BF16, Q8_0, Q4_0, Q2_K, Q3_K, Q4_K, Q5_K, "
                        "Q6_K, IQ4_NL, IQ4_XS, not %s",
                        pg_dtype_name(wd));
    pg_gguf_writer *w;
    pagoda_status s = pg_gguf_writer_create(&w);
    if (s) return s;
    int hd = head_dim(o);
    const pg_arch *a = gen_arch(o);
    bool llama = a == &pg_arch_llama;
    char k[96], name[64];
    snprintf(name, sizeof name, "pagoda-random-%s", a->gguf_name);
    pg_gguf_writer_set_str(w, "general.architecture", a->gguf_name);
    pg_gguf_writer_set_str(w, "general.name", name);
    pg_gguf_writer_set_u32(w, "general.file_type", file_type(wd));
    if (is_q35(o))
        q35_gguf_keys(o, w);
    else if (wd == PG_Q8_0 || wd == PG_Q4_0 || kq || iq)
        pg_gguf_writer_set_u32(w, "general.quantization_version", 2);
        /* The "<arch>." keys convert_hf_to_gguf.py writes: TextModel's common
         * ones (Qwen3Model adds none; Qwen3MoeModel the expert ones), plus
         * vocab_size and rope.dimension_count for Llama (LlamaModel). */
#define KEY(key) (snprintf(k, sizeof k, "%s." key, a->gguf_name), k)
    if (is_q35(o)) goto keys_done;
    if (llama) pg_gguf_writer_set_u32(w, KEY("vocab_size"), (uint32_t)o->vocab);
    pg_gguf_writer_set_u32(w, KEY("context_length"), (uint32_t)o->max_position);
    pg_gguf_writer_set_u32(w, KEY("embedding_length"), (uint32_t)o->hidden);
    pg_gguf_writer_set_u32(w, KEY("block_count"), (uint32_t)o->layers);
    pg_gguf_writer_set_u32(w, KEY("feed_forward_length"),
                           (uint32_t)(is_gpt_oss(o) ? o->moe_ffn : o->ffn));
    pg_gguf_writer_set_u32(w, KEY("attention.head_count"), (uint32_t)o->heads);
    pg_gguf_writer_set_u32(w, KEY("attention.head_count_kv"), (uint32_t)o->kv_heads);
    pg_gguf_writer_set_u32(w, KEY("attention.key_length"), (uint32_t)hd);
    pg_gguf_writer_set_u32(w, KEY("attention.value_length"), (uint32_t)hd);
    if (llama) pg_gguf_writer_set_u32(w, KEY("rope.dimension_count"), (uint32_t)hd);
    pg_gguf_writer_set_f32(w, KEY("rope.freq_base"), o->rope_theta);
    pg_gguf_writer_set_f32(w, KEY("attention.layer_norm_rms_epsilon"), o->rms_eps);
    if (is_moe(o)) { /* TextModel's expert counts, Qwen2MoeModel's expert FFN length */
        pg_gguf_writer_set_u32(w, KEY("expert_count"), (uint32_t)o->experts);
        pg_gguf_writer_set_u32(w, KEY("expert_used_count"), (uint32_t)o->experts_per_tok);
        pg_gguf_writer_set_u32(w, KEY("expert_feed_forward_length"), (uint32_t)o->moe_ffn);
    }
    if (is_gpt_oss(o)) { /* GptOssModel: the window and YaRN */
        pg_gguf_writer_set_u32(w, KEY("attention.sliding_window"), (uint32_t)o->sliding_window);
        pg_gguf_writer_set_str(w, KEY("rope.scaling.type"), "yarn");
        pg_gguf_writer_set_f32(w, KEY("rope.scaling.factor"), o->rope_factor);
        pg_gguf_writer_set_u32(w, KEY("rope.scaling.original_context_length"),
                               (uint32_t)o->rope_original_max_position);
        pg_gguf_writer_set_f32(w, KEY("rope.scaling.yarn_beta_fast"), 32.0f);
        pg_gguf_writer_set_f32(w, KEY("rope.scaling.yarn_beta_slow"), 1.0f);
    }
keys_done:; /* a label cannot precede a declaration before C23 (clang) */
#undef KEY
    bool llama3 = o->rope_scaling == PG_ROPE_SCALING_LLAMA3;
    /* Llama-3 RoPE scaling is written the way llama.cpp's converter writes it:
     * only the rope_freqs.weight tensor below, no llama.rope.scaling.* keys
     * (llama.cpp refuses a "llama3" scaling type and would read the factor as
     * linear scaling). pagoda applies rope_freqs when no scaling keys exist. */
    s = o->vocab_gguf ? copy_vocab(o, w) : synth_vocab(o, w);
    /* tensor types: norms and the router F32, rows that do not fill 32-blocks
     * fall back to F16; an expert entry is one 3-D tensor [cols, rows, experts]
     * (added at its expert 0; the plan's experts follow it in order) */
    pg_dtype *types = calloc(nt, sizeof *types);
    if (!types) {
        pg_gguf_writer_free(w);
        return pg_error(PAGODA_ERR_NOMEM, "out of memory");
    }
    for (size_t i = 0; i < nt && !s; i++) {
        pg_dtype d = wd;
        if (t[i].gguf_f32)
            d = PG_F32;
        else if (kq && o->gguf_kmix)
            d = kmix_type(wd, t[i].gguf);
        if (d == PG_IQ4_XS && t[i].cols % 256) d = PG_IQ4_NL; /* as llama-quantize */
        if (pg_kq_is_kquant(d) && t[i].cols % 256) /* llama-quantize falls back too */
            d = PG_Q8_0;
        if ((d == PG_Q8_0 || d == PG_Q4_0 || d == PG_IQ4_NL) && t[i].cols % 32) d = PG_F16;
        types[i] = d;
        if (t[i].n_experts && t[i].expert) continue; /* part of expert 0's 3-D tensor */
        int64_t ne[3] = {t[i].cols, t[i].rows, t[i].n_experts};
        int nd = t[i].n_experts ? t[i].ndim + 1 : t[i].gguf_2d ? 2 : t[i].ndim;
        if (t[i].n_experts && t[i].ndim == 1) /* a per-expert vector: [cols, experts] */
            ne[1] = t[i].n_experts;
        s = pg_gguf_writer_add_tensor(w, t[i].gguf, pg_dtype_to_ggml_type(d), nd, ne);
    }
    if (!s && llama3) {
        int64_t ne[1] = {hd / 2};
        s = pg_gguf_writer_add_tensor(w, "rope_freqs.weight", PG_GGML_F32, 1, ne);
    }
    if (!s) s = pg_gguf_writer_begin(w, o->gguf_path);
    for (size_t i = 0; i < nt && !s; i++)
        s = stream_tensor(o, &t[i], types[i], true, row, tmp, buf, gg_write, w);
    if (!s && llama3) {
        pg_llama3_rope_factors(o, row);
        s = pg_gguf_writer_write(w, row, (size_t)(hd / 2) * 4);
    }
    if (!s) s = pg_gguf_writer_finish(w);
    free(types);
    pg_gguf_writer_free(w);
    return s;
}

/* ------------------------------------------------------------ entry */

/* The Qwen3.5 fields: consistent for qwen3_5 / qwen3_5_moe, unset for the others. */
static pagoda_status check_q35(const pg_gen_model_options *o) {
    if (!is_q35(o)) {
        if (o->lin_k_heads || o->lin_v_heads || o->lin_k_dim || o->lin_v_dim || o->conv_kernel ||
            o->full_attn_interval || o->mtp_layers || o->shared_ffn)
            return pg_error(PAGODA_ERR_INVALID_ARG,
                            "linear-attention / MTP / shared-expert options are for qwen3_5 / "
                            "qwen3_5_moe, not %s",
                            gen_arch(o)->name);
        return PAGODA_OK;
    }
    const int rot = q35_rotary_dim(o);
    if (o->lin_k_heads < 1 || o->lin_v_heads < 1 || o->lin_v_heads % o->lin_k_heads ||
        o->lin_k_dim < 1 || o->lin_v_dim < 1 || o->conv_kernel < 1 || o->conv_kernel > 64 ||
        o->full_attn_interval < 1 || o->mtp_layers < 0 ||
        o->layers + o->mtp_layers > Q35_MAX_LAYERS || rot < 2 || rot % 2 || rot > head_dim(o) ||
        o->shared_ffn < 0 || (is_moe(o) ? o->ffn < 0 : o->ffn < 1))
        return pg_error(PAGODA_ERR_INVALID_ARG,
                        "%s: linear key heads %d, value heads %d (a multiple), key dim %d, value "
                        "dim %d, conv kernel %d (1..64), full_attention_interval %d, mtp layers "
                        "%d, rotary dims %d (head_dim %d * %g: even, >= 2), shared ffn %d, ffn %d",
                        gen_arch(o)->name, o->lin_k_heads, o->lin_v_heads, o->lin_k_dim,
                        o->lin_v_dim, o->conv_kernel, o->full_attn_interval, o->mtp_layers, rot,
                        head_dim(o), (double)o->partial_rotary, o->shared_ffn, o->ffn);
    if (o->ct_bits || o->from)
        return pg_error(PAGODA_ERR_INVALID_ARG, "%s: no compressed-tensors output or --from",
                        gen_arch(o)->name);
    if (o->rope_scaling != PG_ROPE_SCALING_NONE)
        return pg_error(PAGODA_ERR_INVALID_ARG, "%s: no rope scaling", gen_arch(o)->name);
    return PAGODA_OK;
}

pagoda_status pg_gen_model_write(const pg_gen_model_options *o) {
    pagoda_status qs = check_q35(o);
    if (qs) return qs;
    if (o->hidden < 1 || o->layers < 1 || o->heads < 1 || o->kv_heads < 1 ||
        (o->ffn < 1 && gen_arch(o) != &pg_arch_qwen3_5_moe) || o->vocab < 1 ||
        o->heads % o->kv_heads || (!o->head_dim && o->hidden % o->heads) || head_dim(o) % 2 ||
        o->max_position < 1)
        return pg_error(PAGODA_ERR_INVALID_ARG,
                        "inconsistent model shape (hidden %d, layers %d, heads %d, kv heads %d, "
                        "head_dim %d, ffn %d, vocab %d)",
                        o->hidden, o->layers, o->heads, o->kv_heads, head_dim(o), o->ffn, o->vocab);
    if (gen_arch(o) != &pg_arch_llama && gen_arch(o) != &pg_arch_qwen3 && !is_moe(o) && !is_q35(o))
        return pg_error(PAGODA_ERR_INVALID_ARG,
                        "architecture %s: only llama, qwen3, qwen3_moe, gpt_oss, qwen3_5 and "
                        "qwen3_5_moe are written",
                        gen_arch(o)->name);
    if (is_gpt_oss(o) && (o->ct_bits || o->from || o->sliding_window < 1 ||
                          o->rope_scaling != PG_ROPE_SCALING_YARN || !(o->rope_factor > 0) ||
                          o->rope_original_max_position < 1))
        return pg_error(PAGODA_ERR_INVALID_ARG,
                        "gpt_oss: needs a sliding window and YaRN (factor, original context); "
                        "no compressed-tensors output or --from");
    if (is_moe(o) && (o->experts < 1 || o->experts_per_tok < 1 || o->experts_per_tok > o->experts ||
                      o->moe_ffn < 1))
        return pg_error(PAGODA_ERR_INVALID_ARG,
                        "mixture of experts: %d experts, %d per token, moe_ffn %d (need experts "
                        ">= 1, 1 <= per token <= experts, moe_ffn >= 1)",
                        o->experts, o->experts_per_tok, o->moe_ffn);
    if (!is_moe(o) && (o->experts || o->experts_per_tok || o->moe_ffn))
        return pg_error(PAGODA_ERR_INVALID_ARG,
                        "experts / experts per token / moe_ffn are for qwen3_moe / gpt_oss / "
                        "qwen3_5_moe, not %s",
                        gen_arch(o)->name);
    if (is_moe(o) && o->ct_bits)
        return pg_error(PAGODA_ERR_INVALID_ARG,
                        "compressed-tensors output is for the dense architectures");
    if (is_qwen3(o) && o->rope_scaling != PG_ROPE_SCALING_NONE)
        return pg_error(PAGODA_ERR_INVALID_ARG,
                        "rope scaling: llama3 is for the llama architecture");
    if (o->rope_scaling != PG_ROPE_SCALING_NONE && !is_gpt_oss(o) &&
        (o->rope_scaling != PG_ROPE_SCALING_LLAMA3 || !(o->rope_factor > 0) ||
         !(o->rope_high_freq_factor > o->rope_low_freq_factor) ||
         o->rope_original_max_position < 1))
        return pg_error(PAGODA_ERR_INVALID_ARG,
                        "rope scaling: only llama3 with factor > 0, high > low freq factor");
    if (!o->hf_dir && !o->gguf_path)
        return pg_error(PAGODA_ERR_INVALID_ARG, "no output (HF directory or GGUF path)");
    if (o->successor &&
        ((gen_arch(o) != &pg_arch_llama && gen_arch(o) != &pg_arch_qwen3) || o->tie || o->from ||
         o->ct_bits || !(o->successor_skip >= 0.0f && o->successor_skip < 1.0f) ||
         !(o->successor_residual > 0.0f) || o->vocab < 3))
        return pg_error(PAGODA_ERR_INVALID_ARG,
                        "successor model: needs llama or qwen3, an untied lm_head (--no-tie), "
                        "random weights (no --from, no compressed-tensors), vocab >= 3, skip in "
                        "[0, 1) and residual > 0 (got %s, %s, skip %g, residual %g, vocab %d)",
                        gen_arch(o)->name, o->tie ? "tied" : "untied", (double)o->successor_skip,
                        (double)o->successor_residual, o->vocab);
    size_t nt = plan_count(o);
    gen_tensor *t = calloc(nt, sizeof *t);
    if (!t) return pg_error(PAGODA_ERR_NOMEM, "out of memory");
    nt = plan(o, t);
    int64_t maxc = head_dim(o);
    for (size_t i = 0; i < nt; i++)
        if (t[i].cols > maxc) maxc = t[i].cols;
    float *row = malloc((size_t)maxc * sizeof(float)), *tmp = malloc((size_t)maxc * sizeof(float));
    void *buf = malloc((size_t)maxc * sizeof(float));
    pagoda_status s = PAGODA_OK;
    if (!row || !tmp || !buf) {
        free(t);
        free(row);
        free(tmp);
        free(buf);
        return pg_error(PAGODA_ERR_NOMEM, "out of memory");
    }
    for (size_t i = 0; i < nt && o->from && !s; i++) {
        const pg_tensor *f = pg_model_source_tensor(o->from, t[i].name);
        if (!f || f->ndim != t[i].ndim || (t[i].ndim == 2 && f->shape[0] != t[i].rows) ||
            f->shape[f->ndim - 1] != t[i].cols ||
            (f->dtype != PG_F32 && f->dtype != PG_F16 && f->dtype != PG_BF16))
            s = pg_error(PAGODA_ERR_INVALID_ARG,
                         "%s: no F32/F16/BF16 tensor '%s' of the model's shape to convert",
                         pg_model_source_path(o->from), t[i].name);
    }
    if (!s && o->hf_dir) s = write_hf(o, t, nt, row, buf);
    if (!s && o->gguf_path) s = write_gguf(o, t, nt, row, tmp, buf);
    free(t);
    free(row);
    free(tmp);
    free(buf);
    return s;
}
