/* Qwen3 dense (Qwen3ForCausalLM; GGUF "qwen3"): the Llama decoder with a
 * per-head RMSNorm on q and k before RoPE (weights q_norm / k_norm
 * [head_dim], the model's rms_norm_eps), no qkv bias, rotate_half RoPE in
 * both forms (llama.cpp does not permute Qwen3's Q/K rows: LLM_ARCH_QWEN3
 * is a NEOX-RoPE architecture), tied or untied embeddings.
 * Reference: transformers' modeling_qwen3.py (Qwen3Attention:
 * q_norm(q_proj(x).view(..., head_dim)), likewise k), Qwen3 technical
 * report (Yang et al. 2025). */
#include <cjson/cJSON.h>
#include <string.h>

#include "model/decoder.h"
#include "model/llama.h"
#include "model/qwen3.h"

/* Qwen configs carry sliding_window (often 4096 or null) with
 * use_sliding_window false: only the latter switches it on. head_dim
 * defaults to 128. */
pagoda_status pg_qwen3_parse_hf(const cJSON *root, const char *path, pg_model_config *cfg) {
    const cJSON *use = cJSON_GetObjectItemCaseSensitive(root, "use_sliding_window");
    if (cJSON_IsTrue(use))
        return pg_error(PAGODA_ERR_UNSUPPORTED,
                        "%s: use_sliding_window true (Qwen sliding-window layers) is not supported",
                        path);
    cfg->sliding_window = 0;
    /* transformers' Qwen3Config: head_dim defaults to 128, not hidden / heads */
    if (!cJSON_GetObjectItemCaseSensitive(root, "head_dim")) cfg->head_dim = 128;
    return PAGODA_OK;
}

static pagoda_status create(const pg_model_source *src, const pg_model_options *o, pg_model **out) {
    return pg_llama_create(src, o, PG_DEC_QK_NORM, out);
}

/* Llama's tensors plus the per-head q/k norms. */
const pg_arch_tensor pg_qwen3_qk_norm_tensors[] = {
    {"self_attn.q_norm.weight", "attn_q_norm.weight", PG_DIM_HEAD, PG_DIM_NONE, PG_REQ_ALWAYS, true,
     false, false},
    {"self_attn.k_norm.weight", "attn_k_norm.weight", PG_DIM_HEAD, PG_DIM_NONE, PG_REQ_ALWAYS, true,
     false, false},
    {0},
};

static const pg_arch_tensor *const QWEN3_EXTRA[] = {pg_qwen3_qk_norm_tensors, NULL};
static const char *const QWEN3_HF[] = {"Qwen3ForCausalLM", NULL};
static const char *const QWEN3_TYPES[] = {"qwen3", NULL};

const pg_arch pg_arch_qwen3 = {
    .name = "qwen3",
    .hf_architectures = QWEN3_HF,
    .hf_model_types = QWEN3_TYPES,
    .gguf_name = "qwen3",
    .gguf_rope_interleaved = false,
    .tensors = pg_llama_tensors,
    .extra_tensors = QWEN3_EXTRA,
    .parse_hf = pg_qwen3_parse_hf,
    .create = create,
    .tensor_parallel = true,
};
