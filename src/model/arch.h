/* Architectures: the registry and what one architecture file provides.
 *
 * An architecture is one row of the registry (registry.c): its names (HF
 * `architectures[0]` / `model_type`, GGUF `general.architecture`), how
 * llama.cpp's converter stored it (Q/K rows permuted for interleaved RoPE or
 * not), its tensors (canonical HF name, GGUF name, shape in config
 * dimensions: one table drives source validation, GGUF renaming and the
 * random-model generator), optional config hooks for fields beyond the
 * common ones, and `create`, which binds the weights and returns a pg_model
 * whose ops run it. Adding an architecture = one file defining its pg_arch
 * and ops + one line in registry.c (docs/ARCHITECTURE.md, "Adding an
 * architecture"). */
#ifndef PAGODA_MODEL_ARCH_H
#define PAGODA_MODEL_ARCH_H

#include <stdbool.h>
#include <stdint.h>

#include "model/model.h"

struct cJSON;
struct pg_gguf;

/* Dimensions of a tensor table entry, resolved from the config. */
typedef enum pg_dim {
    PG_DIM_NONE = 0, /* (no such dimension: 1-D tensor) */
    PG_DIM_VOCAB,    /* vocab_size */
    PG_DIM_HIDDEN,   /* hidden_size */
    PG_DIM_Q,        /* num_attention_heads * head_dim */
    PG_DIM_KV,       /* num_key_value_heads * head_dim */
    PG_DIM_FFN,      /* intermediate_size */
    PG_DIM_HEAD,     /* head_dim */
    PG_DIM_EXPERTS,  /* num_experts */
    PG_DIM_MOE_FFN,  /* moe_intermediate_size */
    PG_DIM_HEADS,    /* num_attention_heads */
    PG_DIM_Q_GATE,   /* 2 * num_attention_heads * head_dim (query + output gate per head) */
    PG_DIM_LIN_CONV, /* 2 * linear_num_key_heads * linear_key_head_dim + linear V width */
    PG_DIM_LIN_V,    /* linear_num_value_heads * linear_value_head_dim */
    PG_DIM_LIN_VHEADS, /* linear_num_value_heads */
    PG_DIM_LIN_DV,   /* linear_value_head_dim */
    PG_DIM_CONV_K,   /* linear_conv_kernel */
    PG_DIM_SHARED_FFN, /* shared_expert_intermediate_size */
    PG_DIM_ONE,        /* 1 (a [1, hidden] gate vector) */
    PG_DIM_POSITIONS,  /* max_position_embeddings (a learned position table) */
    PG_DIM_ENC_FFN,    /* encoder_ffn_dim */
    PG_DIM_SOURCE_POS, /* max_source_positions (the encoder's position table) */
    PG_DIM_MELS_K3,    /* 3 * num_mel_bins (a kernel-3 conv over mel bins, [out, in * 3]) */
    PG_DIM_HIDDEN_K3,  /* 3 * hidden_size (a kernel-3 conv over hidden channels) */
    PG_DIM_COUNT_
} pg_dim;

typedef enum pg_tensor_req {
    PG_REQ_ALWAYS = 0,
    PG_REQ_IF_BIAS,     /* required when config attention_bias, else absent */
    PG_REQ_OPTIONAL,    /* checked when present */
    PG_REQ_UNLESS_TIED, /* lm_head: required unless tie_word_embeddings */
    PG_REQ_DENSE_MLP,   /* required in layers with the dense MLP, absent in MoE layers */
    PG_REQ_MOE,         /* required in MoE layers (pg_model_config_layer_moe), else absent */
    PG_REQ_LINEAR_ATTN, /* required in linear-attention layers (pg_model_config_layer_linear) */
    PG_REQ_FULL_ATTN,   /* required in the other layers of a hybrid model, else absent */
    PG_REQ_MOE_SHARED,  /* required in MoE layers when shared_expert_intermediate_size > 0 */
} pg_tensor_req;

/* Which stack of layers a layer tensor belongs to (encoder-decoder models
 * have two): its HF name prefix and its layer count. */
typedef enum pg_layer_stack {
    PG_STACK_MAIN = 0, /* "model.layers.{i}.", num_hidden_layers layers */
    PG_STACK_ENCODER,  /* "model.encoder.layers.{i}.", encoder_layers layers */
    PG_STACK_DECODER,  /* "model.decoder.layers.{i}.", num_hidden_layers layers (an
                          encoder-decoder config's common fields describe its decoder) */
    PG_STACK_COUNT_
} pg_layer_stack;

/* One tensor. Layer tensors (`layer` nonzero: 1 + its pg_layer_stack, so a
 * table's `true` is the main stack) are "<stack prefix>{i}.<hf>", for the
 * main stack "model.layers.{i}.<hf>" and "blk.{i}.<gguf>" (the other stacks
 * have no GGUF form); global ones are named in full. `linear`: a
 * compressed-tensors checkpoint may hold it quantized (X.weight_scale ...).
 * `expert`: one per expert, "model.layers.{i}.mlp.experts.{e}.<hf>" [d0,
 * d1] in HF, stacked as the 3-D "blk.{i}.<gguf>" [experts, d0, d1] in GGUF
 * (llama.cpp's ffn_*_exps), which the source splits into the HF per-expert
 * views (a 1-D per-expert tensor, e.g. a bias, is the 2-D [experts, d0]). */
typedef struct pg_arch_tensor {
    const char *hf, *gguf;
    pg_dim d0, d1;
    pg_tensor_req req;
    uint8_t layer; /* 0: global; 1 + pg_layer_stack: in every layer of that stack */
    bool linear;
    bool expert;
} pg_arch_tensor;

#define PG_TENSOR_ENCODER_LAYER (1 + PG_STACK_ENCODER)
#define PG_TENSOR_DECODER_LAYER (1 + PG_STACK_DECODER)

/* The stack of a layer tensor (PG_STACK_MAIN for a global one). */
static inline pg_layer_stack pg_arch_tensor_stack(const pg_arch_tensor *t) {
    return t->layer > 1 ? (pg_layer_stack)(t->layer - 1) : PG_STACK_MAIN;
}

typedef struct pg_model_ops {
    void (*free)(pg_model *m);
    size_t (*weight_bytes_per_step)(const pg_model *m);
    pagoda_status (*workspace_create)(const pg_model *m, const pg_step_limits *lim, void **ws);
    void (*workspace_free)(void *ws);
    size_t (*workspace_bytes)(const void *ws);
    pagoda_status (*forward)(const pg_model *m, void *ws, const pg_batch *b, float *logits);
    /* encoder-decoder models only (NULL otherwise): see pg_model_encoder_steps */
    int32_t (*encoder_steps)(const pg_model *m);
    bool (*encoder_input_shape)(const pg_model *m, int32_t *rows, int32_t *cols);
    size_t (*encoder_state_bytes)(const pg_model *m);
    int32_t (*encoder_step_tokens)(const pg_model *m);
    pagoda_status (*encode_step)(const pg_model *m, void *ws, int32_t step, const float *input,
                                 void *state);
    pagoda_status (*encoder_kv)(const pg_model *m, void *ws, const void *state,
                                const int32_t *block_table, pg_paged_kv *const *kv);
    /* forward fills pg_batch.hidden_out when asked (false: it must be NULL) */
    bool hidden_out;
    /* the multi-token-prediction head (NULL: none), see pg_model_mtp_create */
    pagoda_status (*mtp_create)(const pg_model *m, const pg_model_source *src,
                                const pg_model_options *o, pg_model **out);
} pg_model_ops;

/* Where an architecture's hf_rewrite puts the tensors it derives (source.c). */
typedef struct pg_tensor_sink pg_tensor_sink;
/* Add tensor t under name (its data may point into the file or into
 * pg_tensor_sink_alloc memory). Errors: PAGODA_ERR_NOMEM. */
pagoda_status pg_tensor_sink_add(pg_tensor_sink *s, const pg_tensor *t, const char *name);
/* bytes of memory owned by the source (freed with it), or NULL. */
void *pg_tensor_sink_alloc(pg_tensor_sink *s, size_t bytes);
/* The checkpoint's own tensor `name` (any shard, as stored), or NULL. */
const pg_tensor *pg_tensor_sink_find(pg_tensor_sink *s, const char *name);

typedef struct pg_arch {
    const char *name;                           /* registry name, e.g. "qwen3" */
    const char *const *hf_architectures;        /* NULL-terminated; [0] is the canonical one */
    const char *const *hf_model_types;          /* model_type fallbacks, NULL-terminated; [i] names
                                                   hf_architectures[i] */
    const char *gguf_name;                      /* general.architecture, or NULL (no GGUF form) */
    bool gguf_rope_interleaved;                 /* llama.cpp permuted Q/K rows (LLM_ARCH_LLAMA) */
    const pg_arch_tensor *tensors;              /* ends with an entry whose hf is NULL */
    const pg_arch_tensor *const *extra_tensors; /* NULL-terminated list of more tables (each
                                                   ending like `tensors`), or NULL: a base
                                                   architecture's table in `tensors` plus
                                                   this one's own */
    /* Config keys this architecture names differently, as transformers'
     * PretrainedConfig.attribute_map: pairs {common key, its key} (e.g.
     * {"hidden_size", "d_model"}), ended by {NULL, NULL}; the common parser
     * reads the architecture's key in place of the common one (may be NULL). */
    const char *const (*hf_attribute_map)[2];
    /* Extra config.json fields into cfg, after the common ones (may be NULL).
     * Errors: PAGODA_ERR_FORMAT / UNSUPPORTED naming `path` and the field. */
    pagoda_status (*parse_hf)(const struct cJSON *root, const char *path, pg_model_config *cfg);
    /* Extra GGUF metadata (keys "<gguf_name>.*") into cfg (may be NULL). */
    pagoda_status (*parse_gguf)(const struct pg_gguf *g, pg_model_config *cfg);
    /* HF checkpoints whose tensors are not in the table's canonical layout
     * (may be NULL): called for every safetensors tensor; returns false to
     * keep t as it is, true when it consumed t, having added the canonical
     * tensors it implies to sink (or set *st to an error naming path). */
    bool (*hf_rewrite)(const pg_model_config *cfg, const char *path, const pg_tensor *t,
                       pg_tensor_sink *sink, pagoda_status *st);
    /* Bind and pack (see pg_model_load). */
    pagoda_status (*create)(const pg_model_source *src, const pg_model_options *o, pg_model **out);
    /* create honours pg_model_options.tp_size > 1 (loads its shard) */
    bool tensor_parallel;
} pg_arch;

/* The part every architecture's model struct starts with. */
struct pg_model {
    const pg_model_ops *ops;
    const pg_arch *arch;
    pg_model_config cfg;
    int32_t max_context;
    pg_dtype compute;
    int32_t num_layers;
    pg_layer_cache_spec *cache; /* [num_layers], owned (pg_model_base_release) */
};

/* Fill the base: ops, arch, config, max_context from o (clamped to
 * max_position_embeddings), compute dtype, and num_layers cache specs
 * (zeroed: kind NONE) for the architecture to set. Errors:
 * PAGODA_ERR_FORMAT (no context length), PAGODA_ERR_NOMEM. */
pagoda_status pg_model_base_init(pg_model *m, const pg_model_ops *ops, const pg_model_source *src,
                                 const pg_model_options *o, int32_t num_layers);
void pg_model_base_release(pg_model *m);

/* Lookup by HF architecture (or model_type when arch is NULL) / GGUF name;
 * NULL when unknown. */
const pg_arch *pg_arch_find_hf(const char *architecture, const char *model_type);
const pg_arch *pg_arch_find_gguf(const char *gguf_name);
/* Register an architecture at run time (tests: toy architectures). Up to 16.
 * Errors: PAGODA_ERR_LIMIT, PAGODA_ERR_INVALID_ARG (a name already taken). */
pagoda_status pg_arch_register(const pg_arch *a);
/* Built-in and registered architectures, NULL-terminated array. */
const pg_arch *const *pg_arch_list(void);

/* Entry i of a's tensor table (tensors, then each extra table), NULL past the end. */
const pg_arch_tensor *pg_arch_tensor_at(const pg_arch *a, int i);

/* True when layer l of cfg runs a mixture of experts (num_experts > 0, not
 * in mlp_only_layers, (l + 1) % decoder_sparse_step == 0). */
bool pg_model_config_layer_moe(const pg_model_config *cfg, int l);
/* True when layer l of cfg is a linear-attention (Gated DeltaNet) layer. */
bool pg_model_config_layer_linear(const pg_model_config *cfg, int l);

/* Resolve a table dimension for cfg (-1 for PG_DIM_NONE). */
int64_t pg_arch_dim(const pg_model_config *cfg, pg_dim d);

/* A layer stack's HF name prefix ("model.layers.", "model.encoder.layers.",
 * "model.decoder.layers.") and its layer count under cfg. */
const char *pg_arch_stack_prefix(pg_layer_stack s);
int pg_arch_stack_layers(const pg_model_config *cfg, pg_layer_stack s);

/* GGUF tensor name <-> canonical HF name through a's table ("blk.3.attn_q.weight" <->
 * "model.layers.3.self_attn.q_proj.weight"); names the table lacks are copied
 * unchanged and false is returned. */
bool pg_arch_gguf_to_hf(const pg_arch *a, const char *gguf_name, char *out, size_t cap);
bool pg_arch_hf_to_gguf(const pg_arch *a, const char *hf_name, char *out, size_t cap);

#endif
