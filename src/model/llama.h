/* The Llama family forward pass (LlamaForCausalLM, MistralForCausalLM):
 *
 *   x = embed(tokens)
 *   for each layer:
 *     h  = RMSNorm(x)                                  (input_layernorm)
 *     q, k, v = h Wq^T (+bq), h Wk^T (+bk), h Wv^T (+bv)
 *     q, k = RoPE(q, pos), RoPE(k, pos)                 (Su et al. 2021)
 *     append k, v to the KV cache
 *     a  = softmax(q k^T / sqrt(head_dim)) v             causal, GQA: query head
 *                                                      h reads KV head h / (heads / kv_heads)
 *     x  = x + a Wo^T
 *     h  = RMSNorm(x)                                  (post_attention_layernorm)
 *     x  = x + (silu(h Wgate^T) * (h Wup^T)) Wdown^T   (SwiGLU MLP)
 *   logits = RMSNorm(x) Wlm^T                           (lm_head, or the tied embedding)
 *
 * References: Touvron et al. 2023 (LLaMA / Llama 2), HF transformers
 * modeling_llama.py, karpathy/llama2.c run.c. Activations are f32; weights
 * are used in place from the model source (F32, F16, BF16, Q8_0, Q4_0); only
 * the small 1-D tensors (norm weights, biases) are copied to f32 at load.
 *
 * Two forwards: pg_llama_forward runs one sequence over a contiguous KV
 * cache (src/model/kv_cache.h; tests and references), and
 * pg_llama_forward_batch (below) runs one engine step over the paged KV
 * cache with every linear layer as one GEMM over all tokens of the step. */
#ifndef PAGODA_MODEL_LLAMA_H
#define PAGODA_MODEL_LLAMA_H

#include <stdint.h>

#include "base/status.h"
#include "kernels/attention.h"
#include "model/kv_cache.h"
#include "model/source.h"

typedef struct pg_llama pg_llama;
typedef struct pg_llama_state pg_llama_state;

/* Bind the weights of `src` (which must outlive the model) and precompute the
 * RoPE frequency table. max_context limits the positions a state may use:
 * 0 means the config's max_position_embeddings; a larger value than that is
 * clamped to it.
 * Errors: PAGODA_ERR_UNSUPPORTED (architecture, weight dtype, rope scaling
 * type), PAGODA_ERR_NOT_FOUND ("missing tensor 'name'"), PAGODA_ERR_FORMAT
 * (a tensor's shape disagrees with the config, or a bad config value),
 * PAGODA_ERR_NOMEM. */
pagoda_status pg_llama_load(const pg_model_source *src, int max_context, pg_llama **out);
void pg_llama_free(pg_llama *model);

const pg_model_config *pg_llama_config(const pg_llama *model);
/* Positions [0, max_context) may be used by a state of this model. */
int pg_llama_max_context(const pg_llama *model);
/* Weight bytes one forward step streams from memory whatever its batch:
 * every linear layer as the batched forward reads it (the packed copy when
 * packed, W8/W4 for quantized ones; else the stored weight), the lm_head and
 * the norm vectors; not the embedding (one row per token) nor the KV cache.
 * Divided into the read bandwidth it gives decode's bandwidth bound in
 * steps per second (issue "fast kernels": weight bytes per token / read
 * bandwidth). */
size_t pg_llama_weight_bytes_per_step(const pg_llama *model);

/* Run state for one sequence: activation buffers for up to max_batch_tokens
 * tokens per forward chunk (longer calls are split into chunks; the results
 * do not depend on the split) and a KV cache. kv == NULL creates a contiguous
 * f32 cache of max_context positions owned by the state; otherwise `kv` (its
 * geometry must match the model) is borrowed. Errors: PAGODA_ERR_INVALID_ARG,
 * PAGODA_ERR_NOMEM. */
pagoda_status pg_llama_state_create(const pg_llama *model, int max_batch_tokens, pg_kv_cache *kv,
                                    pg_llama_state **out);
void pg_llama_state_free(pg_llama_state *state);

/* Run tokens[0..n_tokens) at positions start_pos .. start_pos + n_tokens - 1
 * (prefill when n_tokens > 1, decode when 1): writes their K/V into the
 * state's cache (positions < start_pos must already be there) and the
 * vocab_size logits of the LAST token into logits_out (f32, may be NULL).
 * Errors: PAGODA_ERR_INVALID_ARG (n_tokens < 1, start_pos < 0, token id
 * outside [0, vocab_size)), PAGODA_ERR_LIMIT (start_pos + n_tokens exceeds
 * the context), errors of the matmul. */
pagoda_status pg_llama_forward(const pg_llama *model, pg_llama_state *state, const int32_t *tokens,
                               int n_tokens, int start_pos, float *logits_out);

/* ---- batched forward over the paged KV cache (the engine's runner) ---------
 *
 * One step of the engine is one flattened batch: the scheduled tokens of all
 * requests one after another (request i's tokens are
 * [query_start_loc[i], query_start_loc[i+1])). Every linear layer is ONE
 * GEMM over all tokens of the step (pg_gemm on weights prepacked by
 * pg_llama_pack; Q8_0/Q4_0 run on the W8A8/W4A8 kernels of kernels/qgemm.h,
 * and pg_llama_pack_quantized quantizes float weights); Q/K/V come from
 * one fused GEMM, gate/up from one SwiGLU GEMM, o_proj and down_proj add
 * into the residual stream in their epilogue. K/V are written by
 * pg_rope_kv_store at slot_mapping and attention (pg_attention) reads each
 * request's KV through its block table. Logits are computed only for the
 * rows listed in logit_rows. Every kernel is batch invariant, so a row's
 * logits do not depend on the other rows of the step. */

typedef struct pg_llama_batch {
    int32_t num_tokens, num_seqs;
    const int32_t *token_ids;           /* [num_tokens] */
    const int32_t *positions;           /* [num_tokens] */
    const int32_t *slot_mapping;        /* [num_tokens] block_id * block_size + pos % block_size */
    const int32_t *query_start_loc;     /* [num_seqs + 1] */
    const int32_t *seq_lens;            /* [num_seqs] KV length after this step */
    const int32_t *const *block_tables; /* [num_seqs] */
    const int32_t *logit_rows;          /* [num_logits] token indices whose logits are wanted */
    int32_t num_logits;
} pg_llama_batch;

/* Prepack every F32/F16/BF16 linear layer for pg_gemm (Q, K, V fused into one
 * weight; gate/up as a SwiGLU pair; lm_head too). Idempotent. The source's
 * weights are no longer read by the batched forward afterwards (the
 * batch-of-one pg_llama_forward keeps using them). Errors: PAGODA_ERR_NOMEM. */
pagoda_status pg_llama_pack(pg_llama *model);
/* pg_llama_pack, quantizing F32/F16/BF16 linear weights to W8A8 (bits 8)
 * or W4A8 (bits 4) with group `group` (0 = per channel; kernels/qgemm.h)
 * on the default pool, logging progress per layer. The lm_head (also when
 * it is the tied embedding: the lookup keeps the original) gets its own
 * quantized packed copy: W8 per channel for W8A8 and per-channel W4A8, W4
 * with `group` for group-wise W4A8 (decode streams it every token; see
 * docs/QUANTIZATION.md); the environment variable PAGODA_QUANT_LM_HEAD =
 * none | w8 | w4 overrides. Q/K/V and gate/up then run with their RMSNorm
 * fused into the quantized GEMM's input stage (pg_qgemm_rmsnorm). bits 0 =
 * pg_llama_pack. Errors: PAGODA_ERR_INVALID_ARG (bits, group, an unknown
 * PAGODA_QUANT_LM_HEAD), those of pg_gemm_pack_quantize. */
pagoda_status pg_llama_pack_quantized(pg_llama *model, int bits, int64_t group);
/* Activation scales of the load-time quantized layers (set before
 * pg_llama_pack_quantized): 0 (default) = one per token, the scheme of
 * vLLM / compressed-tensors W8A8; G = one per token and group of G k,
 * which pg_llama_pack_quantized then requires to equal its weight group
 * (kernels/qgemm.h pg_qweight.act_group: llama.cpp's Q8_0 activation
 * blocks when G = 32; about half the mean KL divergence of per-token
 * scales at 8 bits, docs/QUANTIZATION.md). The lm_head keeps its policy
 * (W8 per channel under W8A8: per-token scales). Errors:
 * PAGODA_ERR_INVALID_ARG (G not 0 or a multiple of 32 up to 4096; already
 * packed with another G). */
pagoda_status pg_llama_set_quant_act_group(pg_llama *model, int64_t act_group);

/* The precision of the batched forward's GEMMs (vLLM's --dtype), chosen
 * before pg_llama_pack: `compute` is
 *   PG_DTYPE_COUNT (auto, the default): each float linear weight keeps its
 *     own path: F32 -> F32 GEMM (f32 activations), F16/BF16 -> BF16 GEMM
 *     (activations rounded to BF16 per call; kernels/gemm.h);
 *   PG_F32: every float linear weight (lm_head too) is widened to F32
 *     (exact for F16/BF16) and packed for the F32 GEMM, so every activation
 *     stays f32: the math of an f32 reference (numpy / HF in float32);
 *   PG_BF16: every float linear weight is packed as BF16 (F32 rounds to
 *     nearest even at pack time, F16 as in gemm.h), the fast path.
 * Quantized weights (Q8_0/Q4_0, --quantization) are not affected: their
 * activations are per-token int8 whatever the dtype; only float weights
 * change. Embedding rows and norm weights are f32 copies in every mode.
 * Errors: PAGODA_ERR_INVALID_ARG (another dtype; already packed with
 * another compute dtype). */
pagoda_status pg_llama_set_compute_dtype(pg_llama *model, pg_dtype compute);
/* The compute dtype set above (PG_DTYPE_COUNT = auto). */
pg_dtype pg_llama_compute_dtype(const pg_llama *model);

/* Activations + GEMM/attention scratch for steps of at most max_tokens
 * tokens and max_seqs requests whose KV is at most max_model_len tokens long,
 * over caches shaped like `kv_layout` (dtype, block size), with n_threads
 * threads (pg_pool_size of the default pool). Allocated once; a step never
 * allocates. Errors: PAGODA_ERR_INVALID_ARG, PAGODA_ERR_NOMEM. */
typedef struct pg_llama_workspace pg_llama_workspace;
pagoda_status pg_llama_workspace_create(const pg_llama *model, int32_t max_tokens, int32_t max_seqs,
                                        int32_t max_model_len, const pg_paged_kv *kv_layout,
                                        pg_llama_workspace **out);
void pg_llama_workspace_free(pg_llama_workspace *ws);
size_t pg_llama_workspace_bytes(const pg_llama_workspace *ws);

/* One step: kv[num_hidden_layers] are the layers' paged caches; logits
 * [num_logits][vocab_size] f32 receives the logits of the listed rows.
 * Errors: PAGODA_ERR_INVALID_ARG (batch larger than the workspace, token id
 * out of range, not packed), errors of the kernels. */
pagoda_status pg_llama_forward_batch(const pg_llama *model, pg_llama_workspace *ws, pg_paged_kv *kv,
                                     const pg_llama_batch *b, float *logits);

#endif
