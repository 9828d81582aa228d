/* A model source: the hyper-parameters and named weight tensors of one model,
 * read from a Hugging Face directory (config.json + safetensors) or a GGUF
 * file, whichever the user gave. Architectures (llama.c, ...) consume only
 * this interface and never see the file format.
 *
 * Tensor names are canonicalised to Hugging Face names whatever the file:
 *   "model.embed_tokens.weight", "model.norm.weight", "lm_head.weight",
 *   "model.layers.{i}.input_layernorm.weight",
 *   "model.layers.{i}.self_attn.{q,k,v,o}_proj.{weight,bias}",
 *   "model.layers.{i}.post_attention_layernorm.weight",
 *   "model.layers.{i}.mlp.{gate,up,down}_proj.weight"
 * (GGUF "blk.{i}.attn_q.weight" etc. are renamed on load.) Shapes are given
 * in PyTorch order: shape[0] is the slowest dimension, so a linear weight is
 * [out_features, in_features] row-major, rows contiguous.
 *
 * RoPE layout: Hugging Face Llama checkpoints rotate pairs (i, i + d/2)
 * ("rotate_half", GPT-NeoX style); llama.cpp's converter permutes the Q/K
 * rows of GGUF files so pairs are adjacent (2i, 2i+1). `rope_interleaved`
 * records which one this source's Q/K weights expect. */
#ifndef PAGODA_MODEL_SOURCE_H
#define PAGODA_MODEL_SOURCE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/dtype.h"
#include "base/status.h"

#define PG_MAX_DIMS 4

/* A read-only view of one tensor inside a mapped file. */
typedef struct pg_tensor {
    const char *name; /* canonical (HF) name */
    pg_dtype dtype;
    int ndim;
    int64_t shape[PG_MAX_DIMS]; /* PyTorch order */
    const void *data;           /* into the mmap'ed file; valid while the source lives */
    size_t nbytes;
} pg_tensor;

typedef enum pg_rope_scaling_type {
    PG_ROPE_SCALING_NONE = 0,
    PG_ROPE_SCALING_LLAMA3,
    PG_ROPE_SCALING_LINEAR,
    PG_ROPE_SCALING_YARN,
} pg_rope_scaling_type;

struct pg_arch;

typedef struct pg_model_config {
    char architecture[64];      /* HF name: "LlamaForCausalLM", "Qwen3ForCausalLM", ... (a GGUF
                                   general.architecture maps to its registry entry's first name) */
    const struct pg_arch *arch; /* its registry entry (model/arch.h) */
    int vocab_size;
    int hidden_size;
    int intermediate_size;
    int num_hidden_layers;
    int num_attention_heads;
    int num_key_value_heads;
    int head_dim; /* hidden_size / heads unless given */
    int max_position_embeddings;
    float rms_norm_eps;
    float rope_theta;
    bool rope_interleaved; /* see top of file */
    pg_rope_scaling_type rope_scaling;
    float rope_factor;              /* llama3 / linear / yarn */
    float rope_low_freq_factor;     /* llama3 */
    float rope_high_freq_factor;    /* llama3 */
    int rope_original_max_position; /* llama3 / yarn */
    float rope_beta_fast, rope_beta_slow; /* yarn (defaults 32, 1) */
    bool rope_truncate;                   /* yarn: floor/ceil the correction range (default) */
    float rope_attention_factor;          /* yarn: cos/sin scale (0: 0.1 ln(factor) + 1) */
    bool tie_word_embeddings;
    bool attention_bias;
    int sliding_window;   /* 0 = none */
    uint64_t full_attention_layers[4]; /* bit l: layer l attends fully although
                                          sliding_window > 0 (layer_types) */
    bool attention_sinks;              /* self_attn.sinks: a learned logit per head */
    pg_dtype torch_dtype; /* dominant weight dtype (F32/F16/BF16/...) */
    char hidden_act[24];  /* config.json hidden_act ("silu"), "" when not given (GGUF) */
    /* mixture of experts (num_experts 0: dense): a layer l is MoE unless it is
     * in mlp_only_layers or (l + 1) % decoder_sparse_step != 0 (Qwen3-MoE) */
    int num_experts, num_experts_per_tok, moe_intermediate_size;
    bool norm_topk_prob;         /* renormalise the top-k routing weights */
    bool moe_topk_softmax;       /* softmax over the top-k logits (GPT-OSS), not top-k of
                                    the softmax */
    float swiglu_limit;          /* > 0: clamped SwiGLU of GPT-OSS (limit, alpha 1.702) */
    int decoder_sparse_step;     /* 1: every layer */
    uint64_t mlp_only_layers[4]; /* bit l: layer l (< 256) has the dense MLP */
    /* partial RoPE: the first rotary_dim dims of a head rotate (0 = head_dim) */
    int rotary_dim;
    /* hybrid linear attention (Gated DeltaNet: Qwen3.5 / Qwen3-Next): bit l set
     * when layer l (< 256) is a linear-attention layer, else full attention */
    uint64_t linear_attention_layers[4];
    int linear_num_key_heads, linear_num_value_heads;
    int linear_key_head_dim, linear_value_head_dim;
    int linear_conv_kernel;      /* causal depthwise conv1d width (4) */
    bool linear_v_tiled;         /* V heads in llama.cpp's tiled order (GGUF): v head h
                                    reads q/k head h % n_k, not h / (n_v / n_k) */
    bool attn_output_gate;       /* q_proj also yields a sigmoid gate on the attention output */
    int shared_expert_intermediate_size; /* MoE shared expert (0: none) */
    int mtp_layers;              /* multi-token-prediction layers shipped with the model
                                    (kept as "mtp.*" tensors; run by pg_model_mtp_create) */
    /* encoder-decoder models (Whisper): the common fields above describe the
     * decoder (hidden_size = d_model, num_hidden_layers = decoder_layers, ...);
     * these the encoder */
    int encoder_layers, encoder_attention_heads, encoder_ffn_dim;
    int num_mel_bins;            /* audio encoder input channels (80 or 128) */
    int max_source_positions;    /* encoder positions (1500 = 30 s after the conv stem) */
    int decoder_start_token_id;  /* -1 if none */
    int bos_token_id;            /* -1 if none */
    int eos_token_ids[8];        /* from config / generation_config; -1 terminated */
} pg_model_config;

/* Defaults from generation_config.json (HF) — -1 / NaN when not given. */
typedef struct pg_generation_defaults {
    float temperature, top_p, min_p, repetition_penalty;
    int top_k;
    int max_new_tokens;
} pg_generation_defaults;

typedef struct pg_model_source pg_model_source;

/* Open MODEL: a HF directory, a GGUF file, or a HF repo id
 * ("org/name[@REVISION][:QUANT|:FILE.gguf]") resolved through the local HF
 * cache and downloaded from the hub when the cache lacks it (model/hub.h).
 * Files are mmap'ed; tensor data is never copied. Validates every tensor
 * (dtype known, shape matches byte size, data inside the file, no overlaps)
 * and that the config agrees with the weights' shapes.
 * Errors: PAGODA_ERR_IO / NOT_FOUND / FORMAT / UNSUPPORTED with one line
 * naming the file and the problem (pg_last_error()). */
pagoda_status pg_model_source_open(const char *model, pg_model_source **out);
void pg_model_source_free(pg_model_source *src);

const pg_model_config *pg_model_source_config(const pg_model_source *src);
const pg_generation_defaults *pg_model_source_generation(const pg_model_source *src);
/* Tensor by canonical name, or NULL. */
const pg_tensor *pg_model_source_tensor(const pg_model_source *src, const char *name);
size_t pg_model_source_n_tensors(const pg_model_source *src);
const pg_tensor *pg_model_source_tensor_at(const pg_model_source *src, size_t i);
/* A 64-bit fingerprint of the weights: XXH3-64 over every tensor's name,
 * dtype, shape and size and the first and last 64 bytes of its data (reads
 * two pages per tensor, never the whole file). Two checkpoints of one shape
 * (a model and its fine-tune) differ in it; the same files on two hosts give
 * the same value. Used as the packed-weight cache's key and by tensor
 * parallelism to refuse ranks started with other weights. 0 when out of
 * memory. */
uint64_t pg_model_source_tensor_hash(const pg_model_source *src);
/* Path of the GGUF file or HF directory actually opened. */
const char *pg_model_source_path(const pg_model_source *src);
/* True for GGUF sources; the tokenizer then comes from the GGUF vocab. */
bool pg_model_source_is_gguf(const pg_model_source *src);
/* Chat template text from tokenizer_config.json or GGUF
 * tokenizer.chat_template, or NULL. */
const char *pg_model_source_chat_template(const pg_model_source *src);

/* The compressed-tensors quantization_config of a Hugging Face checkpoint
 * (model/compressed_tensors.h), or NULL for dense checkpoints and GGUF.
 * When set, each linear layer X it quantizes (pg_ct_quantized) holds
 * X.weight (int8) or X.weight_packed/X.weight_shape, plus X.weight_scale,
 * instead of a float X.weight; open checks them (pg_ct_find_layer).
 * Owned by the source. */
struct pg_ct_config;
const struct pg_ct_config *pg_model_source_ct(const pg_model_source *src);

/* The underlying GGUF (for tokenizer.ggml.* metadata, see model/gguf.h), or
 * NULL for Hugging Face sources. Owned by the source. */
struct pg_gguf;
const struct pg_gguf *pg_model_source_gguf(const pg_model_source *src);

/* Resolve MODEL as pg_model_source_open does, without loading it: the one
 * place model names become paths. A path that exists always wins and is
 * returned as is; otherwise a repo id ("org/name[@REVISION][:TAG]") maps to
 * its HF cache snapshot (pg_hub_resolve: models--org--name/snapshots/<the
 * commit of refs/REVISION>, or the GGUF file in it), downloaded from the hub
 * first when the cache lacks a complete one and HF_HUB_OFFLINE is not set.
 * *is_gguf tells a GGUF file (by its magic) from a directory. Errors:
 * PAGODA_ERR_NOT_FOUND, PAGODA_ERR_INVALID_ARG (path too long for `cap`),
 * and those of pg_hub_resolve. */
pagoda_status pg_model_resolve(const char *model, char *out, size_t cap, bool *is_gguf);

/* Extra tensors a source may carry beyond the list at the top of this file:
 *   "rope_freqs.weight" [head_dim/2] F32 — llama.cpp's GGUF form of Llama-3
 *   RoPE scaling: rotation frequency i is divided by rope_freqs[i]. When a
 *   GGUF has it but no rope.scaling keys, config.rope_scaling stays NONE and
 *   the architecture must apply these factors instead. */

#endif
