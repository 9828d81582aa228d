/* llama.cpp tensor names (gguf-py/gguf/constants.py, tensor_mapping.py) vs
 * Hugging Face Llama names. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/gguf.h"

static const char *const TOP[][2] = {
    {"token_embd", "model.embed_tokens"},
    {"output_norm", "model.norm"},
    {"output", "lm_head"},
};
static const char *const BLK[][2] = {
    {"attn_norm", "input_layernorm"},    {"attn_q", "self_attn.q_proj"},
    {"attn_k", "self_attn.k_proj"},      {"attn_v", "self_attn.v_proj"},
    {"attn_output", "self_attn.o_proj"}, {"ffn_norm", "post_attention_layernorm"},
    {"ffn_gate", "mlp.gate_proj"},       {"ffn_up", "mlp.up_proj"},
    {"ffn_down", "mlp.down_proj"},
};
#define N_TOP (sizeof TOP / sizeof TOP[0])
#define N_BLK (sizeof BLK / sizeof BLK[0])

/* Split "stem.weight" / "stem.bias": returns the suffix or NULL. */
static const char *param_suffix(const char *name, size_t *stem_len) {
    size_t n = strlen(name);
    if (n > 7 && !strcmp(name + n - 7, ".weight")) {
        *stem_len = n - 7;
        return ".weight";
    }
    if (n > 5 && !strcmp(name + n - 5, ".bias")) {
        *stem_len = n - 5;
        return ".bias";
    }
    return NULL;
}

static bool map_name(const char *in, char *out, size_t cap, int from, const char *blk_prefix_in,
                     const char *blk_prefix_out) {
    size_t stem;
    const char *suf = param_suffix(in, &stem);
    if (suf) {
        for (size_t i = 0; i < N_TOP; i++)
            if (strlen(TOP[i][from]) == stem && !strncmp(in, TOP[i][from], stem)) {
                snprintf(out, cap, "%s%s", TOP[i][1 - from], suf);
                return true;
            }
        size_t pl = strlen(blk_prefix_in);
        if (!strncmp(in, blk_prefix_in, pl)) {
            char *end;
            long layer = strtol(in + pl, &end, 10);
            if (end != in + pl && *end == '.' && layer >= 0 && layer < 1000000) {
                const char *rest = end + 1;
                size_t rest_len = (size_t)(in + stem - rest);
                for (size_t i = 0; i < N_BLK; i++)
                    if (strlen(BLK[i][from]) == rest_len &&
                        !strncmp(rest, BLK[i][from], rest_len)) {
                        snprintf(out, cap, "%s%ld.%s%s", blk_prefix_out, layer, BLK[i][1 - from],
                                 suf);
                        return true;
                    }
            }
        }
    }
    snprintf(out, cap, "%s", in);
    return false;
}

bool pg_gguf_llama_name_to_hf(const char *gguf_name, char *out, size_t cap) {
    return map_name(gguf_name, out, cap, 0, "blk.", "model.layers.");
}
bool pg_gguf_llama_name_from_hf(const char *hf_name, char *out, size_t cap) {
    return map_name(hf_name, out, cap, 1, "model.layers.", "blk.");
}
