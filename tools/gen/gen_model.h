/* Random-weight models of any shape, written as a real Hugging Face
 * directory (config.json, generation_config.json, model.safetensors or
 * N shards + index, optional tokenizer files) and/or a GGUF file, exactly as
 * llama.cpp's convert_hf_to_gguf.py would write that checkpoint (its
 * "<arch>." keys, tensor names from the architecture's table in
 * model/arch.h, Q/K rows permuted for Llama only), so both forms are the
 * same model. Architectures: Llama (LlamaForCausalLM, GGUF "llama"),
 * Qwen3 dense (Qwen3ForCausalLM, GGUF "qwen3": q_norm / k_norm [head_dim]
 * per layer, no bias, rotate_half RoPE in both forms) and Qwen3-MoE
 * (Qwen3MoeForCausalLM, GGUF "qwen3moe": Qwen3's attention and, in every
 * layer, a router "mlp.gate.weight" [experts, hidden] plus per-expert
 * "mlp.experts.{e}.{gate,up,down}_proj.weight"; in GGUF the router is
 * blk.N.ffn_gate_inp.weight, kept F32 as llama.cpp's converter keeps it
 * (the exact upcast of the HF value), and each layer's experts are stacked
 * into the 3-D blk.N.ffn_{gate,up,down}_exps.weight, ne [cols, rows,
 * experts], expert e's rows contiguous and equal to the rows of HF expert
 * e). Qwen3.5 (Qwen3_5ForConditionalGeneration, GGUF "qwen35") and
 * Qwen3.5-MoE (Qwen3_5MoeForConditionalGeneration, GGUF "qwen35moe"): the
 * hybrid of Gated DeltaNet and gated full-attention layers (every
 * full_attn_interval-th layer full), written as the published checkpoints
 * are laid out: the text fields nested in "text_config", tensors under
 * "model.language_model.", RMSNorm weights stored zero-centred (the model
 * scales by 1 + w; linear_attn.norm is around 1), linear_attn.A_log,
 * conv1d [C, 1, K], q_proj [2 * heads * head_dim, hidden] (per head query
 * rows then gate rows), the MTP block ("mtp.*", mtp_layers of them); the
 * MoE form adds mlp.gate, per-expert mlp.experts.{e}.*, the shared expert
 * and mlp.shared_expert_gate [1, hidden] (the published MoE checkpoints
 * store the experts fused, 3-D mlp.experts.gate_up_proj / down_proj: not
 * written). The GGUF form is what convert_hf_to_gguf.py writes from it:
 * norms as (1 + w) (not ssm_norm), ssm_a = -exp(A_log), ssm_conv1d [C, K],
 * the V heads reordered from grouped-by-K-head to tiled order (V rows of
 * attn_qkv, attn_gate, ssm_alpha / ssm_beta, ssm_a, ssm_dt.bias, the V
 * channels of ssm_conv1d, the columns of ssm_out), ffn_gate_inp_shexp
 * 2-D [hidden, 1], norms / ssm_a / ssm_dt / ssm_conv1d / the routers F32,
 * the MTP block as blk.{layers}.* with its nextn.* tensors, and the
 * qwen35 keys (ssm.*, attention.recurrent_layers, full_attention_interval,
 * rope.dimension_count / dimension_sections, nextn_predict_layers, the
 * expert keys). Every tensor of the GGUF form is the HF form's value
 * rounded to the HF dtype, transformed, then converted.
 *
 * Test and tool code, not part of the pagoda library: built as the static
 * library pagoda_gen (tools/gen/) for tools/gen_model (build/gen_model) and
 * the tests.
 *
 * Weights are deterministic in (seed, tensor name, row): each row has its
 * own random stream, so the HF and GGUF writers produce identical values in
 * any order. Linear/embedding weights are uniform with standard deviation
 * `init_std` (0.02, as HF's initializer_range); norm weights are
 * 1 + U(-0.1, 0.1). Everything is streamed row by row: a 1B-parameter model
 * never needs more than a row of memory. */
#ifndef PAGODA_TOOLS_GEN_MODEL_H
#define PAGODA_TOOLS_GEN_MODEL_H

#include <stdbool.h>
#include <stdint.h>

#include "base/dtype.h"
#include "base/status.h"
#include "model/source.h"

struct pg_arch;

typedef struct pg_gen_model_options {
    /* &pg_arch_llama (the default; NULL means the same), &pg_arch_qwen3 or
     * &pg_arch_qwen3_moe (model/arch.h); pg_gen_model_set_arch sets it by
     * name */
    const struct pg_arch *arch;
    int hidden, layers, heads, kv_heads, ffn, vocab;
    /* Qwen3-MoE only (0 for the dense architectures): num_experts,
     * num_experts_per_tok, moe_intermediate_size. Every layer is MoE
     * (config: decoder_sparse_step 1, mlp_only_layers [], norm_topk_prob
     * true, what llama.cpp's qwen3moe always does), so `ffn`
     * (intermediate_size) is only written to the config. */
    int experts, experts_per_tok, moe_ffn;
    /* qwen3_5 / qwen3_5_moe only (0 for the others): the Gated DeltaNet
     * shape (linear_num_key_heads, linear_num_value_heads a multiple of it,
     * linear_key_head_dim, linear_value_head_dim, linear_conv_kernel_dim),
     * full_attention_interval (layer l is full attention when (l + 1) %
     * interval == 0, else linear), partial_rotary_factor (head_dim * it
     * rotates: even), mtp_layers (mtp_num_hidden_layers: MTP blocks written,
     * not run), shared_ffn (MoE: shared_expert_intermediate_size, 0 = no
     * shared expert). For qwen3_5_moe, ffn 0 writes no intermediate_size /
     * feed_forward_length, as the published config and its GGUF. */
    int lin_k_heads, lin_v_heads, lin_k_dim, lin_v_dim, conv_kernel;
    int full_attn_interval, mtp_layers, shared_ffn;
    float partial_rotary;
    /* gpt_oss only: sliding_window of the even layers (odd ones attend
     * fully, GptOssConfig's default layer_types); YaRN in rope_* below. */
    int sliding_window;
    int head_dim;     /* 0: hidden / heads */
    int max_position; /* max_position_embeddings / <arch>.context_length */
    bool tie;         /* tie_word_embeddings (no lm_head / output.weight) */
    float rope_theta, rms_eps, init_std;
    pg_rope_scaling_type rope_scaling; /* NONE or LLAMA3 (llama); YARN (gpt_oss) */
    float rope_factor, rope_low_freq_factor, rope_high_freq_factor;
    int rope_original_max_position;
    int bos_token_id, eos_token_id;
    uint64_t seed;
    pg_dtype hf_dtype;     /* F32, F16, BF16 */
    pg_dtype gguf_dtype;   /* F32, F16, BF16, Q8_0, Q4_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K,
                              IQ4_NL, IQ4_XS (norms stay F32; IQ4_XS rows not a multiple
                              of 256 fall back to IQ4_NL, K-quant ones to Q8_0, rows not
                              a multiple of 32 to F16) */
    bool gguf_kmix;        /* K-quant files as llama-quantize's *_K_M: Q4_K / Q5_K with
                              token_embd, output, attn_v and ffn_down in Q6_K; Q3_K with
                              output in Q6_K, attn_v, attn_output and ffn_down in Q4_K */
    int shards;            /* 1: model.safetensors; N > 1: N shards + index */
    const char *hf_dir;    /* write the HF form here (created), or NULL */
    const char *gguf_path; /* write the GGUF form here, or NULL */
    const char
        *tokenizer_dir;     /* copy tokenizer.json / tokenizer_config.json from here into hf_dir */
    const char *vocab_gguf; /* copy tokenizer.* keys of this GGUF into the GGUF output */
    /* compressed-tensors HF output (model/compressed_tensors.h): 0 = dense;
     * 8 = "int-quantized" (int8 X.weight), 4 = "pack-quantized" (int32
     * X.weight_packed + int64 X.weight_shape); X.weight_scale BF16,
     * symmetric, group ct_group (0 = per channel); lm_head stays dense and
     * is listed in `ignore`. One shard. Scales and values follow
     * compressed-tensors' own quantizer (scale = max|w| / 127.5 or / 7.5,
     * q = clamp(rint(w / scale), -128..127 or -8..7)) unless ct_rtn. */
    int ct_bits;
    int ct_group;
    bool ct_weight_only; /* no input_activations (W8A16 / W4A16 schemes) */
    /* One more `ignore` entry besides "lm_head" (a layer name or "re:<ERE>",
     * e.g. "re:.*mlp\\.down_proj$"): those layers stay dense too. */
    const char *ct_ignore;
    /* ct_rtn: quantize with pagoda's load-time rule instead, so that
     * `--quantization` of the dequantized weights gives back the same q and
     * scales exactly: W8 scale = bf16(max|w| / 127), q in [-127, 127]; W4
     * scale = bf16(max|w| / 8), q in [-8, 7] with the largest-magnitude
     * element of each group set to -8. */
    bool ct_rtn;
    /* ct_dense: write the dense HF/GGUF form instead, with every linear
     * weight the compressed-tensors writer would quantize replaced by its
     * dequantized value scale * q (the same model as the ct_bits output). */
    bool ct_dense;
    /* Take every weight from this model instead of random numbers (its
     * shapes must equal the options'; pg_gen_model_options_from sets them). */
    const pg_model_source *from;
    /* A synthetic "successor" model (llama / qwen3, untied, random weights
     * only): a model whose greedy output is known by construction, to
     * measure speculative decoding at a known acceptance rate on a real
     * model's cost profile (same shapes, same bytes per step). The
     * successor of token t is next(t) = (t + 1) mod vocab, or (t + 2) mod
     * vocab for the tokens t marked "skip" (a fraction successor_skip of
     * all tokens, chosen by a hash of (seed, t): pg_gen_successor_skips).
     * lm_head row s is the sum of the embedding rows of s's predecessors
     * (t with next(t) = s: s - 1 unless marked, s - 2 if marked; zero when
     * there is none), and every layer's output projections (o_proj,
     * down_proj) are the random weights times successor_residual, so the
     * final hidden state stays dominated by the current token's embedding
     * e_t and the logit of next(t), about |e_t|^2 / rms(e_t) = hidden *
     * init_std, stands ~sqrt(hidden) standard deviations above the other
     * logits (random dot products). A target with skip 0 and a draft with
     * skip p disagree exactly on the marked tokens: greedy acceptance
     * 1 - p per position by construction. */
    bool successor;
    float successor_skip;     /* in [0, 1); 0: next(t) = t + 1 for every t */
    float successor_residual; /* > 0 (gen_model --successor: 1e-3 unless --successor-residual) */
} pg_gen_model_options;

/* A tiny default: Llama, hidden 64, 2 layers, 4/2 heads, ffn 128, vocab 512,
 * F32, seed 1, theta 10000, eps 1e-5, std 0.02, tied, bos 1, eos 2. */
void pg_gen_model_defaults(pg_gen_model_options *o);
/* Set the architecture by registry name, "llama", "qwen3", "qwen3_moe",
 * "gpt_oss", "qwen3_5" or "qwen3_5_moe", with its defaults: llama theta
 * 10000, eps 1e-5; qwen3 and qwen3_moe theta 1e6, eps 1e-6 (as Qwen3's
 * configs); qwen3_moe also 8 experts, top-2, moe_ffn 64 where those are
 * still 0 (the others set them to 0); qwen3_5 / qwen3_5_moe theta 1e7, eps
 * 1e-6, and where still 0: linear heads 2 / 4 of 16 / 16 dims, conv kernel
 * 4, full_attn_interval 4, partial_rotary 0.25, mtp_layers 1 (as the
 * published checkpoints; the others set these to 0), bos none (-1), and
 * for qwen3_5_moe 8 experts, top-2, moe_ffn 64, shared_ffn 64, ffn 0.
 * Errors: PAGODA_ERR_INVALID_ARG (another name). */
pagoda_status pg_gen_model_set_arch(pg_gen_model_options *o, const char *name);
/* Apply a named preset (and its architecture):
 *   "llama-3.2-1b": hidden 2048, 16 layers, 32/8 heads, ffn 8192, vocab
 *     128256, llama3 RoPE scaling factor 32 / 1 / 4 / 8192, theta 500000,
 *     tied, BF16, bos 128000, eos 128001;
 *   "qwen3-0.6b": qwen3, hidden 1024, 28 layers, 16/8 heads, head_dim 128,
 *     ffn 3072, vocab 151936, max_position 40960, theta 1e6, eps 1e-6,
 *     tied, BF16, bos 151643, eos 151645;
 *   "qwen3-1.7b": as qwen3-0.6b with hidden 2048, ffn 6144;
 *   "qwen3-30b-a3b": qwen3_moe, hidden 2048, 48 layers, 32/4 heads,
 *     head_dim 128, ffn 6144 (unused: every layer is MoE), 128 experts,
 *     top-8, moe_ffn 768, vocab 151936, max_position 40960, untied, BF16,
 *     bos 151643, eos 151645 (Qwen/Qwen3-30B-A3B's config);
 *   "gpt-oss-20b": openai/gpt-oss-20b's config;
 *   "qwen3.5-9b": qwen3_5, hidden 4096, 32 layers (every 4th full
 *     attention), 16/4 heads, head_dim 256 (partial rotary 0.25: 64 dims),
 *     ffn 12288, Gated DeltaNet 16 key / 32 value heads of 128, conv 4,
 *     vocab 248320, max_position 262144, theta 1e7, untied, 1 MTP layer,
 *     no bos, eos 248044, BF16 (Qwen/Qwen3.5-9B);
 *   "qwen3.5-35b-a3b": qwen3_5_moe, hidden 2048, 40 layers, 16/2 heads,
 *     head_dim 256, no dense ffn, 256 experts, top-8, moe_ffn 512, shared
 *     expert 512, Gated DeltaNet as qwen3.5-9b, vocab 248320, untied, 1 MTP
 *     layer, BF16 (Qwen/Qwen3.5-35B-A3B).
 * Errors: PAGODA_ERR_INVALID_ARG for an unknown name. */
pagoda_status pg_gen_model_preset(pg_gen_model_options *o, const char *name);
/* Architecture, shape, RoPE, eps and token ids of `src` into o, and
 * o->from = src (its weights are then written instead of random ones: a
 * converter). Errors: PAGODA_ERR_UNSUPPORTED (an architecture other than
 * llama / qwen3 / qwen3_moe, rope scaling other than none / llama3, a
 * Qwen3-MoE with dense layers or norm_topk_prob false). */
pagoda_status pg_gen_model_options_from(pg_gen_model_options *o, const pg_model_source *src);

/* The successor option (see pg_gen_model_options.successor): marks token t
 * as "skip" (next(t) = t + 2) when a hash of (seed, t) falls below
 * `skip`; the hash is fixed, so the draft's marks can be computed by a test
 * or a report. */
bool pg_gen_successor_skips(uint64_t seed, float skip, int64_t t);
/* next(t) of a successor model with these options (t in [0, vocab)). */
int64_t pg_gen_successor_next(const pg_gen_model_options *o, int64_t t);

/* Write the requested forms. Errors: PAGODA_ERR_INVALID_ARG (inconsistent
 * shape, dtype not allowed for the form, llama3 RoPE scaling for qwen3 /
 * qwen3_moe, experts for a dense architecture or none for qwen3_moe,
 * compressed-tensors output of qwen3_moe, a successor model that is tied,
 * not llama / qwen3, converted (from) or compressed, or whose skip is not
 * in [0, 1) or residual not > 0),
 * PAGODA_ERR_IO, PAGODA_ERR_NOMEM, and the errors of opening vocab_gguf. */
pagoda_status pg_gen_model_write(const pg_gen_model_options *o);

/* Row `row` (HF layout) of tensor `hf_name` with `ncols` columns, as f32
 * before any dtype conversion (with ct_dense: after quantize-dequantize).
 * 1-D tensors are one row. hf_name is the canonical name (pg_model_source's,
 * "model.layers.N...."): for qwen3_5 the value is the HF checkpoint's
 * (zero-centred norms; "linear_attn.ssm_a" gives A_log; conv1d as [C, K]). */
void pg_gen_model_row(const pg_gen_model_options *o, const char *hf_name, int64_t row,
                      int64_t ncols, float *out);

/* Llama-3 RoPE frequency factors (the divisors llama.cpp stores as
 * rope_freqs.weight): for i < head_dim/2, with wavelength
 * 2*pi*theta^(2i/head_dim): 1 above high-frequency, `factor` below
 * low-frequency, smooth interpolation in between (Meta's
 * apply_scaling / transformers _compute_llama3_parameters). */
void pg_llama3_rope_factors(const pg_gen_model_options *o, float *out);

#endif
