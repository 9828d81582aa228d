/* The model interface: what the engine and its runner know of a model,
 * whatever its architecture.
 *
 * A model is created from a model source (model/source.h) by the
 * architecture the source's config names (the registry, model/arch.h);
 * loading binds every tensor, checks it against the config, and packs the
 * linear layers for the GEMM kernels under the options' precision policy
 * (model/linear.h). The model then declares, per layer, what it keeps in
 * the KV cache (pg_layer_cache_spec); the engine groups equal specs into KV
 * cache groups (engine/kv_cache_manager.h) and the runner hands each layer
 * its group's memory, block tables and slot mapping in every step
 * (pg_batch.layers).
 *
 * Idea from vLLM v1: vllm/v1/kv_cache_interface.py (a KVCacheSpec per
 * layer: FullAttentionSpec, SlidingWindowSpec, MambaSpec; layers with equal
 * specs form a group) and vllm/model_executor/models/registry.py (an
 * architecture name -> model class table). */
#ifndef PAGODA_MODEL_MODEL_H
#define PAGODA_MODEL_MODEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/dtype.h"
#include "base/status.h"
#include "kernels/attention.h"
#include "model/source.h"

typedef struct pg_model pg_model;

/* ---- what a layer keeps between steps --------------------------------------- */

typedef enum pg_layer_cache_kind {
    PG_LAYER_CACHE_NONE = 0,   /* keeps nothing (e.g. an MLP-only layer) */
    PG_LAYER_CACHE_FULL,       /* K/V of every token: paged, one block table per request */
    PG_LAYER_CACHE_SLIDING,    /* K/V of the last `window` tokens: paged; older blocks freed */
    PG_LAYER_CACHE_STATE,      /* a fixed-size recurrent state per request (linear attention) */
    PG_LAYER_CACHE_CROSS,      /* K/V of the encoder output, written once per request by
                                  pg_model_encoder_kv, read by every decoder step */
    PG_LAYER_CACHE_KIND_COUNT_
} pg_layer_cache_kind;

typedef struct pg_layer_cache_spec {
    pg_layer_cache_kind kind;
    int32_t num_kv_heads, head_dim; /* FULL / SLIDING / CROSS: K and V of num_kv_heads x head_dim */
    int32_t encoder_len;            /* CROSS: encoder positions cached per request */
    int32_t window;                 /* SLIDING: a query at p attends keys (p - window, p] */
    int64_t state_bytes;            /* STATE: bytes per request (F32 or whatever the layer uses) */
    int32_t state_align; /* STATE: prefix-cache snapshots are taken at positions that are
                            multiples of this (and of the block size), where the layer's
                            results do not depend on where a step starts (0: any block) */
} pg_layer_cache_spec;

/* The cache of one layer in one step, as the runner hands it to forward. */
typedef struct pg_layer_cache {
    /* FULL / SLIDING / CROSS: the layer's paged K/V and its group's tables
     * (CROSS: request i's encoder position j at block_tables[i][j / block_size],
     * no slot mapping: a decoder step writes nothing there) */
    pg_paged_kv *kv;
    const int32_t *slot_mapping;        /* [num_tokens]: block_id * block_size + pos % block_size */
    const int32_t *const *block_tables; /* [num_seqs] */
    /* STATE: request i's state (state_bytes), zeroed by the runner when the
     * request is (re)admitted, i.e. when its first computed token is 0 (or
     * restored from a prefix-cache snapshot) */
    void *const *states; /* [num_seqs] */
    /* STATE, optional (NULL: none): when snap_len[i] > 0 the layer also
     * writes its state after the first snap_len[i] of request i's tokens in
     * this step to snap_states[i] (state_bytes): the prefix cache's snapshot
     * at a block boundary */
    const int32_t *snap_len;         /* [num_seqs] */
    void *const *snap_states;        /* [num_seqs] */
    /* STATE, optional (NULL: none), speculative decoding's verification:
     * when row_snaps[i] = n > 0 the layer writes its state after each of the
     * first n of request i's tokens in this step, the one after token r
     * (1..n) at row_snap_states[i] + (r - 1) * state_bytes, so the engine
     * can roll the state back to the last accepted token */
    const int32_t *row_snaps;        /* [num_seqs] */
    void *const *row_snap_states;    /* [num_seqs] */
} pg_layer_cache;

/* ---- one engine step ---------------------------------------------------------- */

/* One step is one flattened batch: the scheduled tokens of all requests one
 * after another (request i's tokens are [query_start_loc[i],
 * query_start_loc[i+1])). Logits are computed only for the rows listed in
 * logit_rows. */
typedef struct pg_batch {
    int32_t num_tokens, num_seqs;
    const int32_t *token_ids;       /* [num_tokens] */
    const int32_t *positions;       /* [num_tokens] */
    const int32_t *query_start_loc; /* [num_seqs + 1] */
    const int32_t *seq_lens;        /* [num_seqs] tokens in the cache after this step */
    const int32_t *logit_rows;      /* [num_logits] token indices whose logits are wanted */
    int32_t num_logits;
    const pg_layer_cache *layers; /* [num_layers] */
    /* Hidden states, [num_tokens][hidden_size] f32, both optional (NULL):
     * hidden_out receives every token's final-normed hidden state (the
     * lm_head's input; only models with pg_model_has_hidden_out);
     * hidden_in is the input of a multi-token-prediction head
     * (pg_model_mtp_create), which needs it. */
    const float *hidden_in;
    float *hidden_out;
} pg_batch;

/* ---- load options --------------------------------------------------------------- */

typedef struct pg_model_options {
    int32_t max_context; /* positions usable; 0 = max_position_embeddings (larger: clamped) */
    /* GEMM dtype of float linear weights (vLLM's --dtype): PG_DTYPE_COUNT =
     * auto (F32 weights on the F32 GEMM, F16/BF16 on the BF16 GEMM), PG_F32
     * (every float weight widened: f32 activations throughout), PG_BF16 */
    pg_dtype compute;
    int quant_bits;          /* 0, or 8 / 4: quantize float linear weights at load (W8A8 / W4A8) */
    int64_t quant_group;     /* weight group (0 = per channel; multiple of 32) */
    int64_t quant_act_group; /* activation scales per (token, group of this size); 0 = per token */
    /* Tensor parallelism (issue 22; docs/ARCHITECTURE.md "Tensor
     * parallelism"): this process is rank tp_rank of tp_size and loads only
     * its shard: attention heads and MLP / expert intermediate columns
     * [rank * n / size, (rank + 1) * n / size) (column-parallel q/k/v and
     * gate/up, row-parallel o_proj and down_proj), embedding, norms, router
     * and lm_head replicated; forward all-reduces the residual over comm
     * after attention and after the MLP. tp_size 0 or 1: the whole model
     * (comm unused). comm must have rank tp_rank and size tp_size. */
    int32_t tp_rank, tp_size;
    struct pg_comm *comm;
    /* true: do not read or write the packed-weight cache (model/pack_cache.h;
     * PAGODA_PACK_CACHE=0 does the same) */
    bool no_pack_cache;
} pg_model_options;

/* max_context 0, compute auto, no quantization, one rank. */
void pg_model_options_default(pg_model_options *o);

/* The step sizes a workspace is made for. */
typedef struct pg_step_limits {
    int32_t max_tokens;    /* tokens per step */
    int32_t max_seqs;      /* requests per step */
    int32_t max_model_len; /* KV length of a request */
    pg_dtype kv_dtype;     /* PG_F32 / PG_BF16 */
    int32_t block_size;    /* KV block size in tokens */
} pg_step_limits;

typedef struct pg_model_workspace pg_model_workspace;

/* ---- the model ------------------------------------------------------------------- */

/* Create the model the source's config names (its architecture's create
 * from the registry), bind and check every tensor and pack the linear
 * layers under `o` (NULL = defaults). `src` must outlive the model.
 * Errors: PAGODA_ERR_UNSUPPORTED (architecture: the message lists the
 * supported ones; weight dtype; option; tp_size > 1 for an architecture or
 * checkpoint without tensor parallelism, heads / intermediate sizes that do
 * not divide by tp_size, a row-parallel split off a quantization group),
 * PAGODA_ERR_NOT_FOUND (missing tensor), PAGODA_ERR_FORMAT (shape vs
 * config), PAGODA_ERR_INVALID_ARG (options: bits, groups; a communicator
 * that does not match tp_rank / tp_size), PAGODA_ERR_NOMEM. */
pagoda_status pg_model_load(const pg_model_source *src, const pg_model_options *o, pg_model **out);
void pg_model_free(pg_model *m);

const pg_model_config *pg_model_get_config(const pg_model *m);
/* Registry name of the architecture ("llama", "qwen3", ...). */
const char *pg_model_arch_name(const pg_model *m);
/* Positions [0, max_context) may be used. */
int32_t pg_model_max_context(const pg_model *m);
/* The compute dtype in effect (PG_DTYPE_COUNT = auto). */
pg_dtype pg_model_compute_dtype(const pg_model *m);
int32_t pg_model_num_layers(const pg_model *m);
/* What layer l keeps in the cache (0 <= l < num_layers). */
const pg_layer_cache_spec *pg_model_layer_cache(const pg_model *m, int32_t l);
/* Weight bytes one forward step streams whatever its batch (packed or
 * quantized linear layers, lm_head, norms; not the embedding rows nor the
 * KV cache): decode's bandwidth bound is read bandwidth / this. */
size_t pg_model_weight_bytes_per_step(const pg_model *m);

/* Activations and GEMM / attention scratch for steps within `lim`;
 * allocated once, a step never allocates. Errors: PAGODA_ERR_INVALID_ARG,
 * PAGODA_ERR_NOMEM. */
pagoda_status pg_model_workspace_create(const pg_model *m, const pg_step_limits *lim,
                                        pg_model_workspace **out);
void pg_model_workspace_free(pg_model_workspace *ws);
size_t pg_model_workspace_bytes(const pg_model_workspace *ws);

/* Run one step: logits [num_logits][vocab_size] f32 receive the logits of
 * the listed rows. Every kernel is batch invariant: a row's logits do not
 * depend on the other rows of the step. Errors: PAGODA_ERR_INVALID_ARG
 * (batch larger than the workspace, token id out of range, a cache view
 * missing), errors of the kernels. */
pagoda_status pg_model_forward(const pg_model *m, pg_model_workspace *ws, const pg_batch *b,
                               float *logits);

/* ---- multi-token prediction (speculative decoding's "mtp" method) --------------------- */

/* True when m's forward fills pg_batch.hidden_out. */
bool pg_model_has_hidden_out(const pg_model *m);
/* Number of multi-token-prediction layers the checkpoint ships (config
 * mtp_num_hidden_layers, GGUF nextn_predict_layers); 0 = none. */
int32_t pg_model_mtp_layers(const pg_model *m);

/* Create the multi-token-prediction head of `target` (Qwen3.5 / Qwen3-Next
 * MTP: vLLM's qwen3_5_mtp.py / qwen3_next_mtp.py) from the same source and
 * options: a one-layer model whose forward reads b->hidden_in (the
 * target's final-normed hidden state h_t of each token, or the head's own
 * hidden_out of the previous draft) and b->token_ids (token t + 1) at
 * position t,
 *   x = fc([RMSNorm_e(embed(token)) | RMSNorm_h(hidden_in)])   (fc: 2H -> H)
 *   x = decoder layer (full attention with its own paged KV, MLP or MoE)
 *   hidden_out = RMSNorm_n(x), logits = hidden_out lm_head^T (the target's)
 * with its one layer's KV cache spec (pg_model_layer_cache 0, FULL). It
 * shares the target's embedding, lm_head and RoPE: `target` (and src) must
 * outlive it. Errors: PAGODA_ERR_UNSUPPORTED (the architecture has no MTP
 * head, the checkpoint ships none, or more than one MTP layer),
 * PAGODA_ERR_NOT_FOUND / FORMAT (its tensors), PAGODA_ERR_NOMEM. */
pagoda_status pg_model_mtp_create(const pg_model *target, const pg_model_source *src,
                                  const pg_model_options *o, pg_model **out);

/* ---- encoder-decoder models ---------------------------------------------------------- */

/* An encoder-decoder model (Whisper) runs its encoder once per request, as
 * pg_model_encoder_steps pieces an engine can spread over its steps (each
 * piece reads and writes the request's encoder state, which is all that
 * lives between pieces), then writes the encoder output's K/V into the
 * request's CROSS cache blocks (pg_model_encoder_kv); its decoder steps
 * are pg_model_forward with the CROSS layers' caches in b->layers.
 * Decoder-only models: 0 steps, and the calls below fail. */
int32_t pg_model_encoder_steps(const pg_model *m);
/* The encoder input a request carries: rows x cols f32 (Whisper: n_mels x
 * 3000 log-mel frames). False for a decoder-only model. */
bool pg_model_encoder_input_shape(const pg_model *m, int32_t *rows, int32_t *cols);
/* Bytes of one request's encoder state between pieces (Whisper: the
 * residual stream, the queries and the K/V of the current layer). */
size_t pg_model_encoder_state_bytes(const pg_model *m);
/* The cost of one piece in an engine step's token budget (Whisper: the 512
 * rows a piece computes). */
int32_t pg_model_encoder_step_tokens(const pg_model *m);
/* Piece `step` (0 <= step < pg_model_encoder_steps) of one request's
 * encoder: input [rows][cols] f32 (read by step 0 only; may be NULL
 * otherwise), state pg_model_encoder_state_bytes (written by step 0, read
 * and written by the others; after the last step it holds the encoder
 * output). Pieces of different requests may interleave on one workspace.
 * Errors: PAGODA_ERR_INVALID_ARG (decoder-only model, step out of range,
 * NULL arrays), errors of the kernels. */
pagoda_status pg_model_encode_step(const pg_model *m, pg_model_workspace *ws, int32_t step,
                                   const float *input, void *state);
/* Write one request's cross-attention K/V from its finished encoder state
 * into every CROSS layer's cache: kv[c] is the c-th CROSS layer's paged
 * K/V (layers in index order), block_table the request's CROSS group table
 * (ceil(encoder_len / block_size) blocks). Errors: PAGODA_ERR_INVALID_ARG
 * (decoder-only model, cache shapes, block ids), errors of the kernels. */
pagoda_status pg_model_encoder_kv(const pg_model *m, pg_model_workspace *ws, const void *state,
                                  const int32_t *block_table, pg_paged_kv *const *kv);

/* ---- the registry ------------------------------------------------------------------ */

/* "llama (LlamaForCausalLM, MistralForCausalLM), qwen3 (Qwen3ForCausalLM)"
 * into buf (truncated to cap); returns buf. */
const char *pg_model_supported(char *buf, size_t cap);

#endif
