/* The architecture registry (see arch.h): one line per architecture file. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/arch.h"

extern const pg_arch pg_arch_llama;
extern const pg_arch pg_arch_qwen3;
extern const pg_arch pg_arch_qwen3_moe;
extern const pg_arch pg_arch_gpt_oss;
extern const pg_arch pg_arch_qwen3_5;
extern const pg_arch pg_arch_qwen3_5_moe;
extern const pg_arch pg_arch_whisper;

#define MAX_ARCHS 24

static const pg_arch *g_archs[MAX_ARCHS + 1] = {
    &pg_arch_llama,
    &pg_arch_qwen3,
    &pg_arch_qwen3_moe,
    &pg_arch_gpt_oss,
    &pg_arch_qwen3_5,
    &pg_arch_qwen3_5_moe,
    &pg_arch_whisper,
};

static int count(void) {
    int n = 0;
    while (g_archs[n])
        n++;
    return n;
}

const pg_arch *const *pg_arch_list(void) {
    return g_archs;
}

pagoda_status pg_arch_register(const pg_arch *a) {
    if (!a || !a->name || !a->create || !a->tensors)
        return pg_error(PAGODA_ERR_INVALID_ARG, "registry: incomplete architecture");
    int n = count();
    for (int i = 0; i < n; i++) {
        if (g_archs[i] == a) return PAGODA_OK;
        if (!strcmp(g_archs[i]->name, a->name))
            return pg_error(PAGODA_ERR_INVALID_ARG, "registry: architecture '%s' already exists",
                            a->name);
    }
    if (n >= MAX_ARCHS) return pg_error(PAGODA_ERR_LIMIT, "registry: full (%d)", MAX_ARCHS);
    g_archs[n] = a;
    return PAGODA_OK;
}

static bool in_list(const char *const *list, const char *s) {
    for (int i = 0; list && list[i]; i++)
        if (!strcmp(list[i], s)) return true;
    return false;
}

const pg_arch *pg_arch_find_hf(const char *architecture, const char *model_type) {
    for (int i = 0; g_archs[i]; i++) {
        if (architecture ? in_list(g_archs[i]->hf_architectures, architecture)
                         : model_type && in_list(g_archs[i]->hf_model_types, model_type))
            return g_archs[i];
    }
    return NULL;
}

const pg_arch *pg_arch_find_gguf(const char *gguf_name) {
    for (int i = 0; gguf_name && g_archs[i]; i++)
        if (g_archs[i]->gguf_name && !strcmp(g_archs[i]->gguf_name, gguf_name)) return g_archs[i];
    return NULL;
}

const char *pg_model_supported(char *buf, size_t cap) {
    size_t off = 0;
    if (cap) buf[0] = 0;
    for (int i = 0; g_archs[i] && off < cap; i++) {
        off += (size_t)snprintf(buf + off, cap - off, "%s%s (", i ? ", " : "", g_archs[i]->name);
        for (int j = 0; g_archs[i]->hf_architectures[j] && off < cap; j++)
            off += (size_t)snprintf(buf + off, cap - off, "%s%s", j ? ", " : "",
                                    g_archs[i]->hf_architectures[j]);
        if (off < cap && g_archs[i]->gguf_name)
            off += (size_t)snprintf(buf + off, cap - off, "; GGUF %s", g_archs[i]->gguf_name);
        if (off < cap) off += (size_t)snprintf(buf + off, cap - off, ")");
    }
    return buf;
}

const pg_arch_tensor *pg_arch_tensor_at(const pg_arch *a, int i) {
    const pg_arch_tensor *t = a->tensors;
    for (int table = 0; t; t = a->extra_tensors ? a->extra_tensors[table++] : NULL) {
        int n = 0;
        while (t[n].hf)
            n++;
        if (i < n) return &t[i];
        i -= n;
        if (!a->extra_tensors) break;
    }
    return NULL;
}

bool pg_model_config_layer_moe(const pg_model_config *c, int l) {
    if (c->num_experts <= 0) return false;
    if (l >= 0 && l < 256 && (c->mlp_only_layers[l / 64] >> (l % 64) & 1)) return false;
    int step = c->decoder_sparse_step > 0 ? c->decoder_sparse_step : 1;
    return (l + 1) % step == 0;
}

bool pg_model_config_layer_linear(const pg_model_config *c, int l) {
    return l >= 0 && l < 256 && (c->linear_attention_layers[l / 64] >> (l % 64) & 1);
}

int64_t pg_arch_dim(const pg_model_config *c, pg_dim d) {
    switch (d) {
    case PG_DIM_VOCAB:
        return c->vocab_size;
    case PG_DIM_HIDDEN:
        return c->hidden_size;
    case PG_DIM_Q:
        return (int64_t)c->num_attention_heads * c->head_dim;
    case PG_DIM_KV:
        return (int64_t)c->num_key_value_heads * c->head_dim;
    case PG_DIM_FFN:
        return c->intermediate_size;
    case PG_DIM_HEAD:
        return c->head_dim;
    case PG_DIM_EXPERTS:
        return c->num_experts;
    case PG_DIM_MOE_FFN:
        return c->moe_intermediate_size;
    case PG_DIM_HEADS:
        return c->num_attention_heads;
    case PG_DIM_Q_GATE:
        return 2 * (int64_t)c->num_attention_heads * c->head_dim;
    case PG_DIM_LIN_CONV:
        return 2 * (int64_t)c->linear_num_key_heads * c->linear_key_head_dim +
               (int64_t)c->linear_num_value_heads * c->linear_value_head_dim;
    case PG_DIM_LIN_V:
        return (int64_t)c->linear_num_value_heads * c->linear_value_head_dim;
    case PG_DIM_LIN_VHEADS:
        return c->linear_num_value_heads;
    case PG_DIM_LIN_DV:
        return c->linear_value_head_dim;
    case PG_DIM_CONV_K:
        return c->linear_conv_kernel;
    case PG_DIM_SHARED_FFN:
        return c->shared_expert_intermediate_size;
    case PG_DIM_ONE:
        return 1;
    case PG_DIM_POSITIONS:
        return c->max_position_embeddings;
    case PG_DIM_ENC_FFN:
        return c->encoder_ffn_dim;
    case PG_DIM_SOURCE_POS:
        return c->max_source_positions;
    case PG_DIM_MELS_K3:
        return 3 * (int64_t)c->num_mel_bins;
    case PG_DIM_HIDDEN_K3:
        return 3 * (int64_t)c->hidden_size;
    default:
        return -1;
    }
}

const char *pg_arch_stack_prefix(pg_layer_stack s) {
    switch (s) {
    case PG_STACK_ENCODER:
        return "model.encoder.layers.";
    case PG_STACK_DECODER:
        return "model.decoder.layers.";
    default:
        return "model.layers.";
    }
}

int pg_arch_stack_layers(const pg_model_config *c, pg_layer_stack s) {
    return s == PG_STACK_ENCODER ? c->encoder_layers : c->num_hidden_layers;
}

/* from = 0: GGUF -> HF; 1: HF -> GGUF (main-stack layers only: the others
 * have no GGUF form). */
static bool map_name(const pg_arch *a, const char *in, char *out, size_t cap, int from) {
    const char *lp[2] = {"blk.", "model.layers."};
    const pg_arch_tensor *t;
    for (int i = 0; (t = pg_arch_tensor_at(a, i)) != NULL; i++) {
        const char *src = from ? t->hf : t->gguf, *dst = from ? t->gguf : t->hf;
        if (!src || !dst || t->expert) continue; /* not 1:1: the source splits them */
        if (t->layer > 1) continue; /* another stack than model.layers */
        if (!t->layer) {
            if (!strcmp(in, src)) {
                snprintf(out, cap, "%s", dst);
                return true;
            }
            continue;
        }
        size_t pl = strlen(lp[from]);
        if (strncmp(in, lp[from], pl) != 0) continue;
        char *end;
        long layer = strtol(in + pl, &end, 10);
        if (end == in + pl || *end != '.' || layer < 0 || layer >= 1000000) continue;
        if (!strcmp(end + 1, src)) {
            snprintf(out, cap, "%s%ld.%s", lp[1 - from], layer, dst);
            return true;
        }
    }
    snprintf(out, cap, "%s", in);
    return false;
}

bool pg_arch_gguf_to_hf(const pg_arch *a, const char *gguf_name, char *out, size_t cap) {
    return map_name(a, gguf_name, out, cap, 0);
}

bool pg_arch_hf_to_gguf(const pg_arch *a, const char *hf_name, char *out, size_t cap) {
    return map_name(a, hf_name, out, cap, 1);
}
