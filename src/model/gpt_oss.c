/* GPT-OSS (GptOssForCausalLM; GGUF "gpt-oss"): the Llama decoder with
 *   - q/k/v/o biases and learned attention sinks (one logit per head in the
 *     softmax denominator: kernels/attention.h);
 *   - alternating sliding-window and full-attention layers (layer_types;
 *     llama.cpp's GGUF: even layers sliding), each its own KV cache group;
 *   - YaRN RoPE exactly as the HF config says, including truncate: false
 *     (the real checkpoints' value and openai/gpt-oss's reference: the
 *     correction range is not floored / ceiled), and its attention factor;
 *   - a mixture of experts in every layer: router with bias, top-k of the
 *     logits with a softmax over those k, experts with biases and the
 *     clamped SwiGLU (limit swiglu_limit, alpha 1.702, up + 1).
 * Reference: transformers' modeling_gpt_oss.py (GptOssAttention,
 * GptOssTopKRouter, GptOssExperts), openai/gpt-oss. HF stores the experts
 * stacked and transposed (gate_up_proj [E, H, 2I] with gate / up
 * interleaved on the last dimension, down_proj [E, I, H]); hf_rewrite turns
 * them into the per-expert nn.Linear layout the table names (llama.cpp's
 * converter does the same split for GGUF). MXFP4 experts as published
 * (*_blocks [E, rows, K/32, 16] E2M1 nibbles, element 2i in the low nibble
 * of byte i, + *_scales [E, rows, K/32] E8M0; rows = gate/up interleaved,
 * not transposed) become per-expert GGUF-layout MXFP4 rows (a scale byte,
 * then element j in the low and j + 16 in the high nibble of byte j), the
 * same bits repacked, never widened. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/arch.h"
#include "model/decoder.h"
#include "model/gguf.h"
#include "model/hf_config.h"
#include "model/llama.h"

static pagoda_status parse_hf(const cJSON *root, const char *path, pg_model_config *cfg) {
    pagoda_status s =
        pg_hf_get_int(root, "num_local_experts", path, 1, 1 << 16, true, 0, &cfg->num_experts);
    const char *k_key = cJSON_GetObjectItemCaseSensitive(root, "num_experts_per_tok")
                            ? "num_experts_per_tok"
                            : "experts_per_token";
    if (!s)
        s = pg_hf_get_int(root, k_key, path, 1, cfg->num_experts, true, 0,
                          &cfg->num_experts_per_tok);
    if (!s) s = pg_hf_get_float(root, "swiglu_limit", path, false, 7.0f, &cfg->swiglu_limit);
    if (s) return s;
    if (!(cfg->swiglu_limit > 0.0f))
        return pg_error(PAGODA_ERR_FORMAT, "%s: swiglu_limit must be > 0", path);
    cfg->moe_intermediate_size = cfg->intermediate_size; /* every layer is MoE */
    cfg->decoder_sparse_step = 1;
    cfg->norm_topk_prob = false;
    cfg->moe_topk_softmax = true;
    cfg->attention_sinks = true;
    const int L = cfg->num_hidden_layers;
    bool given;
    if ((s = pg_hf_get_layer_types(root, path, L, "full_attention", "sliding_attention",
                                   cfg->full_attention_layers, &given)))
        return s;
    if (!given) { /* GptOssConfig's default: even layers sliding, odd ones full */
        for (int l = 1; l < L; l += 2)
            cfg->full_attention_layers[l / 64] |= 1ull << (l % 64);
    }
    if (cfg->sliding_window <= 0)
        return pg_error(PAGODA_ERR_FORMAT, "%s: gpt-oss needs a positive sliding_window", path);
    return PAGODA_OK;
}

static pagoda_status parse_gguf(const struct pg_gguf *g, pg_model_config *cfg) {
    static const char *const KEYS[] = {"gpt-oss.expert_count", "gpt-oss.expert_used_count",
                                       "gpt-oss.expert_feed_forward_length",
                                       "gpt-oss.attention.sliding_window"};
    int *const dst[] = {&cfg->num_experts, &cfg->num_experts_per_tok,
                        &cfg->moe_intermediate_size, &cfg->sliding_window};
    pagoda_status s = pg_gguf_get_ints(g, KEYS, dst, 4, 1, 1 << 22);
    if (s) return s;
    if (cfg->num_experts_per_tok > cfg->num_experts)
        return pg_error(PAGODA_ERR_FORMAT, "%s: expert_used_count %d > expert_count %d",
                        pg_gguf_path(g), cfg->num_experts_per_tok, cfg->num_experts);
    if (cfg->num_hidden_layers > 256)
        return pg_error(PAGODA_ERR_UNSUPPORTED, "%s: more than 256 layers (%d)", pg_gguf_path(g),
                        cfg->num_hidden_layers);
    /* llama.cpp's converter writes no layer pattern: it hard-codes even
     * layers sliding, odd ones full (GptOssConfig's default), no swiglu
     * limit (7.0 in every gpt-oss) and YaRN without truncation flag: the
     * model's own semantics are truncate false (openai/gpt-oss). */
    for (int l = 1; l < cfg->num_hidden_layers; l += 2)
        cfg->full_attention_layers[l / 64] |= 1ull << (l % 64);
    cfg->swiglu_limit = 7.0f;
    cfg->rope_truncate = false;
    cfg->decoder_sparse_step = 1;
    cfg->norm_topk_prob = false;
    cfg->moe_topk_softmax = true;
    cfg->attention_sinks = true;
    cfg->attention_bias = true;
    return PAGODA_OK;
}

/* ---- HF's stacked experts -> per-expert nn.Linear tensors */

/* "model.layers.{l}.mlp.experts.<what>" -> l and what, else false. */
static bool stacked_name(const char *name, int *layer, const char **what) {
    static const char pre[] = "model.layers.";
    if (strncmp(name, pre, sizeof pre - 1) != 0) return false;
    char *end;
    long l = strtol(name + sizeof pre - 1, &end, 10);
    if (end == name + sizeof pre - 1 || l < 0 || l >= 1 << 16 ||
        strncmp(end, ".mlp.experts.", 13) != 0)
        return false;
    *layer = (int)l;
    *what = end + 13;
    return true;
}

/* dst[r][c] = src[e][row(r, c)][col(r, c)] for the derived [rows, cols]
 * tensor of expert e, element size es (F32 / F16 / BF16 bytes). */
typedef enum { GATE_W, UP_W, DOWN_W, GATE_B, UP_B } part;

static pagoda_status derive(const pg_tensor *t, int layer, const char *path, part k,
                            pg_tensor_sink *sink) {
    static const char *const NAMES[] = {"gate_proj.weight", "up_proj.weight", "down_proj.weight",
                                        "gate_proj.bias", "up_proj.bias"};
    const size_t es = pg_dtype_block_bytes(t->dtype);
    const bool mat = k == GATE_W || k == UP_W || k == DOWN_W;
    if ((t->dtype != PG_F32 && t->dtype != PG_F16 && t->dtype != PG_BF16) ||
        t->ndim != (mat ? 3 : 2) || (k != DOWN_W && t->shape[t->ndim - 1] % 2))
        return pg_error(PAGODA_ERR_FORMAT,
                        "%s: tensor '%s' must be a %s F32/F16/BF16 stack of experts", path,
                        t->name, mat ? "3-D" : "2-D");
    const int64_t E = t->shape[0];
    /* gate_up [E, H, 2I] -> gate/up [I, H] (even / odd columns, transposed);
     * down [E, I, H] -> [H, I] (transposed); gate_up bias [E, 2I] -> [I] x 2 */
    const int64_t rows = k == DOWN_W ? t->shape[2] : (mat ? t->shape[2] / 2 : t->shape[1] / 2);
    const int64_t cols = mat ? t->shape[1] : 1;
    const int64_t in_cols = t->shape[t->ndim - 1];
    const int odd = k == UP_W || k == UP_B;
    for (int64_t e = 0; e < E; e++) {
        uint8_t *d = pg_tensor_sink_alloc(sink, (size_t)(rows * cols) * es);
        if (!d) return pg_error(PAGODA_ERR_NOMEM, "%s: out of memory", path);
        const uint8_t *s = (const uint8_t *)t->data + (size_t)e * (size_t)(t->nbytes / (size_t)E);
        for (int64_t r = 0; r < rows; r++)
            for (int64_t c = 0; c < cols; c++) {
                /* source element: matrices [c][col], biases [col] */
                const int64_t col = k == DOWN_W ? r : 2 * r + odd;
                const size_t at = (size_t)(mat ? c * in_cols + col : col);
                memcpy(d + (size_t)(r * cols + c) * es, s + at * es, es);
            }
        pg_tensor v = {0};
        v.dtype = t->dtype;
        v.ndim = mat ? 2 : 1;
        for (int i = 0; i < PG_MAX_DIMS; i++)
            v.shape[i] = 1;
        v.shape[0] = rows;
        if (mat) v.shape[1] = cols;
        v.data = d;
        v.nbytes = (size_t)(rows * cols) * es;
        char name[256];
        snprintf(name, sizeof name, "model.layers.%d.mlp.experts.%lld.%s", layer, (long long)e,
                 NAMES[k]);
        pagoda_status st = pg_tensor_sink_add(sink, &v, name);
        if (st) return st;
    }
    return PAGODA_OK;
}

/* X_blocks (+ X_scales) of layer `layer` -> per-expert MXFP4 tensors:
 * gate_up (down false): rows 2i -> gate_proj row i, 2i + 1 -> up_proj row i;
 * down: down_proj as it is. */
static pagoda_status derive_mxfp4(const pg_tensor *b, int layer, const char *path, bool down,
                                  pg_tensor_sink *sink) {
    char sname[256];
    snprintf(sname, sizeof sname, "%.*sscales", (int)(strlen(b->name) - 6), b->name);
    const pg_tensor *sc = pg_tensor_sink_find(sink, sname);
    if (b->dtype != PG_U8 || b->ndim != 4 || b->shape[3] != 16 || !sc || sc->dtype != PG_U8 ||
        sc->ndim != 3 || sc->shape[0] != b->shape[0] || sc->shape[1] != b->shape[1] ||
        sc->shape[2] != b->shape[2] || (!down && b->shape[1] % 2))
        return pg_error(PAGODA_ERR_FORMAT,
                        "%s: MXFP4 '%s' must be U8 [experts, rows, K/32, 16] with '%s' U8 "
                        "[experts, rows, K/32]",
                        path, b->name, sname);
    const int64_t E = b->shape[0], R = b->shape[1], nb = b->shape[2], K = nb * 32;
    const int64_t rows = down ? R : R / 2;
    const uint8_t *bd = b->data, *sd = sc->data;
    for (int64_t e = 0; e < E; e++) {
        for (int half = 0; half < (down ? 1 : 2); half++) {
            uint8_t *d = pg_tensor_sink_alloc(sink, (size_t)(rows * nb * 17));
            if (!d) return pg_error(PAGODA_ERR_NOMEM, "%s: out of memory", path);
            for (int64_t r = 0; r < rows; r++) {
                const int64_t sr = down ? r : 2 * r + half; /* source row */
                for (int64_t k = 0; k < nb; k++) {
                    const uint8_t *q = bd + ((size_t)((e * R + sr) * nb + k)) * 16;
                    uint8_t *o = d + (size_t)(r * nb + k) * 17;
                    o[0] = sd[(size_t)((e * R + sr) * nb + k)];
                    for (int j = 0; j < 16; j++) { /* element j and j + 16 */
                        const int lo = (q[j / 2] >> (4 * (j & 1))) & 15;
                        const int hi = (q[(j + 16) / 2] >> (4 * (j & 1))) & 15;
                        o[1 + j] = (uint8_t)(lo | hi << 4);
                    }
                }
            }
            pg_tensor v = {0};
            v.dtype = PG_MXFP4;
            v.ndim = 2;
            for (int i = 0; i < PG_MAX_DIMS; i++)
                v.shape[i] = 1;
            v.shape[0] = rows;
            v.shape[1] = K;
            v.data = d;
            v.nbytes = (size_t)(rows * nb * 17);
            char name[256];
            snprintf(name, sizeof name, "model.layers.%d.mlp.experts.%lld.%s", layer, (long long)e,
                     down ? "down_proj.weight" : half ? "up_proj.weight" : "gate_proj.weight");
            pagoda_status st = pg_tensor_sink_add(sink, &v, name);
            if (st) return st;
        }
    }
    return PAGODA_OK;
}

static bool hf_rewrite(const pg_model_config *cfg, const char *path, const pg_tensor *t,
                       pg_tensor_sink *sink, pagoda_status *st) {
    (void)cfg;
    int layer;
    const char *what;
    if (!stacked_name(t->name, &layer, &what)) return false;
    if (!strcmp(what, "gate_up_proj")) {
        if (!(*st = derive(t, layer, path, GATE_W, sink))) *st = derive(t, layer, path, UP_W, sink);
    } else if (!strcmp(what, "gate_up_proj_bias")) {
        if (!(*st = derive(t, layer, path, GATE_B, sink))) *st = derive(t, layer, path, UP_B, sink);
    } else if (!strcmp(what, "down_proj")) {
        *st = derive(t, layer, path, DOWN_W, sink);
    } else if (!strcmp(what, "down_proj_bias")) { /* [E, H]: rows are the per-expert biases */
        if (t->ndim != 2 || t->shape[0] < 1) {
            *st = pg_error(PAGODA_ERR_FORMAT, "%s: tensor '%s' must be 2-D [experts, hidden]",
                           path, t->name);
            return true;
        }
        const size_t per = t->nbytes / (size_t)t->shape[0];
        for (int64_t e = 0; e < t->shape[0] && !*st; e++) {
            pg_tensor v = *t;
            v.ndim = 1;
            v.shape[0] = t->shape[1];
            v.shape[1] = 1;
            v.data = (const uint8_t *)t->data + (size_t)e * per;
            v.nbytes = per;
            char name[256];
            snprintf(name, sizeof name, "model.layers.%d.mlp.experts.%lld.down_proj.bias", layer,
                     (long long)e);
            *st = pg_tensor_sink_add(sink, &v, name);
        }
    } else if (!strcmp(what, "gate_up_proj_blocks") || !strcmp(what, "down_proj_blocks")) {
        *st = derive_mxfp4(t, layer, path, !strcmp(what, "down_proj_blocks"), sink);
    } else if (!strcmp(what, "gate_up_proj_scales") || !strcmp(what, "down_proj_scales")) {
        char blocks[256]; /* consumed with its blocks */
        snprintf(blocks, sizeof blocks, "%.*sblocks", (int)(strlen(t->name) - 6), t->name);
        if (!pg_tensor_sink_find(sink, blocks))
            *st = pg_error(PAGODA_ERR_FORMAT, "%s: '%s' has no '%s'", path, t->name, blocks);
    } else {
        return false;
    }
    return true;
}

static pagoda_status create(const pg_model_source *src, const pg_model_options *o, pg_model **out) {
    return pg_llama_create(src, o, PG_DEC_MOE | PG_DEC_MOE_OAI, out);
}

/* llama.cpp's gguf-py names (LLM_ARCH_OPENAI_MOE). */
static const pg_arch_tensor TENSORS[] = {
    {"model.embed_tokens.weight", "token_embd.weight", PG_DIM_VOCAB, PG_DIM_HIDDEN, PG_REQ_ALWAYS,
     false, false, false},
    {"model.norm.weight", "output_norm.weight", PG_DIM_HIDDEN, PG_DIM_NONE, PG_REQ_ALWAYS, false,
     false, false},
    {"lm_head.weight", "output.weight", PG_DIM_VOCAB, PG_DIM_HIDDEN, PG_REQ_UNLESS_TIED, false,
     true, false},
    {"input_layernorm.weight", "attn_norm.weight", PG_DIM_HIDDEN, PG_DIM_NONE, PG_REQ_ALWAYS, true,
     false, false},
    {"self_attn.q_proj.weight", "attn_q.weight", PG_DIM_Q, PG_DIM_HIDDEN, PG_REQ_ALWAYS, true, true,
     false},
    {"self_attn.k_proj.weight", "attn_k.weight", PG_DIM_KV, PG_DIM_HIDDEN, PG_REQ_ALWAYS, true,
     true, false},
    {"self_attn.v_proj.weight", "attn_v.weight", PG_DIM_KV, PG_DIM_HIDDEN, PG_REQ_ALWAYS, true,
     true, false},
    {"self_attn.o_proj.weight", "attn_output.weight", PG_DIM_HIDDEN, PG_DIM_Q, PG_REQ_ALWAYS, true,
     true, false},
    {"self_attn.q_proj.bias", "attn_q.bias", PG_DIM_Q, PG_DIM_NONE, PG_REQ_IF_BIAS, true, false,
     false},
    {"self_attn.k_proj.bias", "attn_k.bias", PG_DIM_KV, PG_DIM_NONE, PG_REQ_IF_BIAS, true, false,
     false},
    {"self_attn.v_proj.bias", "attn_v.bias", PG_DIM_KV, PG_DIM_NONE, PG_REQ_IF_BIAS, true, false,
     false},
    {"self_attn.o_proj.bias", "attn_output.bias", PG_DIM_HIDDEN, PG_DIM_NONE, PG_REQ_OPTIONAL, true,
     false, false},
    {"self_attn.sinks", "attn_sinks.weight", PG_DIM_HEADS, PG_DIM_NONE, PG_REQ_ALWAYS, true, false,
     false},
    {"post_attention_layernorm.weight", "post_attention_norm.weight", PG_DIM_HIDDEN, PG_DIM_NONE,
     PG_REQ_ALWAYS, true, false, false},
    {"mlp.router.weight", "ffn_gate_inp.weight", PG_DIM_EXPERTS, PG_DIM_HIDDEN, PG_REQ_MOE, true,
     true, false},
    {"mlp.router.bias", "ffn_gate_inp.bias", PG_DIM_EXPERTS, PG_DIM_NONE, PG_REQ_MOE, true, false,
     false},
    {"gate_proj.weight", "ffn_gate_exps.weight", PG_DIM_MOE_FFN, PG_DIM_HIDDEN, PG_REQ_MOE, true,
     true, true},
    {"up_proj.weight", "ffn_up_exps.weight", PG_DIM_MOE_FFN, PG_DIM_HIDDEN, PG_REQ_MOE, true, true,
     true},
    {"down_proj.weight", "ffn_down_exps.weight", PG_DIM_HIDDEN, PG_DIM_MOE_FFN, PG_REQ_MOE, true,
     true, true},
    {"gate_proj.bias", "ffn_gate_exps.bias", PG_DIM_MOE_FFN, PG_DIM_NONE, PG_REQ_MOE, true, false,
     true},
    {"up_proj.bias", "ffn_up_exps.bias", PG_DIM_MOE_FFN, PG_DIM_NONE, PG_REQ_MOE, true, false,
     true},
    {"down_proj.bias", "ffn_down_exps.bias", PG_DIM_HIDDEN, PG_DIM_NONE, PG_REQ_MOE, true, false,
     true},
    {0},
};

static const char *const HF_NAMES[] = {"GptOssForCausalLM", NULL};
static const char *const TYPES[] = {"gpt_oss", NULL};

const pg_arch pg_arch_gpt_oss = {
    .name = "gpt_oss",
    .hf_architectures = HF_NAMES,
    .hf_model_types = TYPES,
    .gguf_name = "gpt-oss",
    .gguf_rope_interleaved = false,
    .tensors = TENSORS,
    .parse_hf = parse_hf,
    .parse_gguf = parse_gguf,
    .hf_rewrite = hf_rewrite,
    .create = create,
    .tensor_parallel = true,
};
