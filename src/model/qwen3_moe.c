/* Qwen3-MoE (Qwen3MoeForCausalLM; GGUF "qwen3moe"): Qwen3's attention (per-head
 * q/k RMSNorm) with a mixture-of-experts MLP (decoder.h pg_dec_moe: an F32
 * router, softmax, top-k, renormalised when norm_topk_prob, SwiGLU experts of
 * moe_intermediate_size) in every layer but those of mlp_only_layers and
 * those decoder_sparse_step skips, which keep the dense MLP of
 * intermediate_size. Reference: transformers' modeling_qwen3_moe.py
 * (Qwen3MoeSparseMoeBlock, Qwen3MoeDecoderLayer); llama.cpp stacks a
 * layer's experts as 3-D ffn_{gate,up,down}_exps and always renormalises. */
#include <cjson/cJSON.h>
#include <string.h>

#include "model/decoder.h"
#include "model/gguf.h"
#include "model/hf_config.h"
#include "model/llama.h"
#include "model/qwen3.h"

static pagoda_status parse_hf(const cJSON *root, const char *path, pg_model_config *cfg) {
    pagoda_status s = pg_qwen3_parse_hf(root, path, cfg);
    if (!s) s = pg_hf_get_moe(root, path, false, cfg);
    if (!s)
        s = pg_hf_get_int(root, "decoder_sparse_step", path, 1, 1 << 16, false, 1,
                          &cfg->decoder_sparse_step);
    const cJSON *only = cJSON_GetObjectItemCaseSensitive(root, "mlp_only_layers"), *e;
    if (!s && only && !cJSON_IsNull(only)) {
        if (!cJSON_IsArray(only))
            return pg_error(PAGODA_ERR_FORMAT, "%s: 'mlp_only_layers' must be a list", path);
        cJSON_ArrayForEach(e, only) {
            const int L = cfg->num_hidden_layers < 256 ? cfg->num_hidden_layers : 256;
            if (!cJSON_IsNumber(e) || e->valuedouble < 0 || e->valuedouble >= L ||
                e->valuedouble != (int)e->valuedouble)
                return pg_error(PAGODA_ERR_FORMAT,
                                "%s: 'mlp_only_layers' must hold layer indices in [0, %d)%s", path,
                                L, L < cfg->num_hidden_layers ? " (pagoda: at most 256)" : "");
            int l = (int)e->valuedouble;
            cfg->mlp_only_layers[l / 64] |= 1ull << (l % 64);
        }
    }
    return s;
}

static pagoda_status parse_gguf(const struct pg_gguf *g, pg_model_config *cfg) {
    static const char *const KEYS[] = {"qwen3moe.expert_count", "qwen3moe.expert_used_count",
                                       "qwen3moe.expert_feed_forward_length"};
    int *const dst[] = {&cfg->num_experts, &cfg->num_experts_per_tok,
                        &cfg->moe_intermediate_size};
    pagoda_status s = pg_gguf_get_ints(g, KEYS, dst, 3, 1, 1 << 22);
    if (s) return s;
    if (cfg->num_experts_per_tok > cfg->num_experts)
        return pg_error(PAGODA_ERR_FORMAT, "%s: expert_used_count %d > expert_count %d",
                        pg_gguf_path(g), cfg->num_experts_per_tok, cfg->num_experts);
    cfg->norm_topk_prob = true; /* llama.cpp always renormalises Qwen3-MoE's top-k */
    cfg->decoder_sparse_step = 1;
    return PAGODA_OK;
}

static pagoda_status create(const pg_model_source *src, const pg_model_options *o, pg_model **out) {
    return pg_llama_create(src, o, PG_DEC_QK_NORM | PG_DEC_MOE, out);
}

/* The router and the experts (the dense MLP of mlp_only layers is Llama's). */
static const pg_arch_tensor MOE_TENSORS[] = {
    {"mlp.gate.weight", "ffn_gate_inp.weight", PG_DIM_EXPERTS, PG_DIM_HIDDEN, PG_REQ_MOE, true,
     true, false},
    {"gate_proj.weight", "ffn_gate_exps.weight", PG_DIM_MOE_FFN, PG_DIM_HIDDEN, PG_REQ_MOE, true,
     true, true},
    {"up_proj.weight", "ffn_up_exps.weight", PG_DIM_MOE_FFN, PG_DIM_HIDDEN, PG_REQ_MOE, true, true,
     true},
    {"down_proj.weight", "ffn_down_exps.weight", PG_DIM_HIDDEN, PG_DIM_MOE_FFN, PG_REQ_MOE, true,
     true, true},
    {0},
};

static const pg_arch_tensor *const EXTRA[] = {pg_qwen3_qk_norm_tensors, MOE_TENSORS, NULL};
static const char *const HF_NAMES[] = {"Qwen3MoeForCausalLM", NULL};
static const char *const TYPES[] = {"qwen3_moe", NULL};

const pg_arch pg_arch_qwen3_moe = {
    .name = "qwen3_moe",
    .hf_architectures = HF_NAMES,
    .hf_model_types = TYPES,
    .gguf_name = "qwen3moe",
    .gguf_rope_interleaved = false,
    .tensors = pg_llama_tensors,
    .extra_tensors = EXTRA,
    .parse_hf = parse_hf,
    .parse_gguf = parse_gguf,
    .create = create,
    .tensor_parallel = true,
};
