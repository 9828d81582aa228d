/* The Llama family (LlamaForCausalLM, MistralForCausalLM; GGUF "llama"):
 *
 *   x = embed(tokens)
 *   for each layer:
 *     h  = RMSNorm(x)                                  (input_layernorm)
 *     q, k, v = h Wq^T (+bq), h Wk^T (+bk), h Wv^T (+bv)   (one fused GEMM)
 *     [q, k = per-head RMSNorm(q), RMSNorm(k)]          (PG_DEC_QK_NORM: Qwen3)
 *     q, k = RoPE(q, pos), RoPE(k, pos)                 (Su et al. 2021)
 *     store k, v at the slot mapping (paged KV cache)
 *     a  = softmax(q k^T / sqrt(head_dim)) v            causal, GQA, optional
 *                                                       Mistral sliding window
 *     x  = x + a Wo^T
 *     h  = RMSNorm(x)                                  (post_attention_layernorm)
 *     x  = x + (silu(h Wgate^T) * (h Wup^T)) Wdown^T   (SwiGLU MLP)
 *   logits = RMSNorm(x) Wlm^T                           (lm_head, or the tied embedding)
 *
 * References: Touvron et al. 2023 (LLaMA / Llama 2), transformers'
 * modeling_llama.py, karpathy/llama2.c run.c. Every linear layer is one
 * GEMM over all tokens of the step (model/linear.h); activations f32. */
#ifndef PAGODA_MODEL_LLAMA_H
#define PAGODA_MODEL_LLAMA_H

#include "model/arch.h"

extern const pg_arch pg_arch_llama;
/* Llama's tensor table (embedding, norms, q/k/v/o with optional biases,
 * gate/up/down, lm_head unless tied), for architectures that extend it. */
extern const pg_arch_tensor pg_llama_tensors[];

/* The Llama-shaped decoder with the blocks' flags (decoder.h: PG_DEC_QK_NORM),
 * for architectures that are this model with a variation (qwen3.c). Errors
 * as pg_model_load. */
pagoda_status pg_llama_create(const pg_model_source *src, const pg_model_options *o, unsigned flags,
                              pg_model **out);

#endif
