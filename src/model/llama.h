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
 * Batch-of-one: a state runs one sequence. The engine's paged KV cache plugs
 * in through src/model/kv_cache.h. */
#ifndef PAGODA_MODEL_LLAMA_H
#define PAGODA_MODEL_LLAMA_H

#include <stdint.h>

#include "base/status.h"
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

#endif
