/* Blocks of decoder-only transformers that architecture files call: token
 * embedding, the attention block (RMSNorm, fused Q/K/V, optional per-head
 * q/k RMSNorm, RoPE + paged KV store, paged attention, o_proj into the
 * residual), the SwiGLU MLP block and the final norm + lm_head, over one
 * step workspace. An architecture's forward is then a short list of these
 * calls (llama.c, qwen3.c), as in llama2.c's forward().
 *
 * Shapes: T tokens per step; the residual stream x [T, hidden] f32 lives
 * in the workspace. References: Touvron et al. 2023 (LLaMA), Su et al.
 * 2021 (RoPE), Zhang & Sennrich 2019 (RMSNorm), Shazeer 2020 (SwiGLU),
 * transformers' modeling_llama.py / modeling_qwen3.py. */
#ifndef PAGODA_MODEL_DECODER_H
#define PAGODA_MODEL_DECODER_H

#include <stdbool.h>
#include <stdint.h>

#include "base/alloc.h"
#include "kernels/attention.h"
#include "model/linear.h"
#include "model/model.h"

/* ---- weights ---------------------------------------------------------------------- */

typedef struct pg_dec_attn {
    const float *norm;            /* input RMSNorm [hidden] */
    pg_linear qkv;                /* rows: q [heads*hd] | k [kv_heads*hd] | v [kv_heads*hd] */
    const float *q_norm, *k_norm; /* per-head RMSNorm weights [head_dim] (Qwen3), or NULL */
    pg_linear o;                  /* [hidden, heads*hd], added into the residual */
    pg_attn_params ap;            /* heads, kv heads, head_dim, scale, window, sinks */
    bool out_gate; /* PG_DEC_ATTN_GATE: q_proj rows are [query, gate] per head and the
                      attention output is multiplied by sigmoid(gate) before o_proj */
} pg_dec_attn;

typedef struct pg_dec_mlp {
    const float *norm; /* post-attention RMSNorm [hidden] */
    pg_linear gate_up; /* SwiGLU pair [intermediate, hidden] x 2 */
    pg_linear down;    /* [hidden, intermediate], added into the residual */
} pg_dec_mlp;

/* A mixture-of-experts MLP (Shazeer et al. 2017; Qwen3-MoE's
 * Qwen3MoeSparseMoeBlock): h = RMSNorm(x); router logits h Wr^T (F32); p =
 * softmax over the experts; the top-k experts by p (ties: lower index),
 * their weights renormalised to sum 1 when norm_topk_prob; x += sum over the
 * token's top-k in rank order of w_j * down_e(silu(gate_e(h)) * up_e(h)).
 * GPT-OSS (GptOssMLP / GptOssTopKRouter): the router has a bias, the top-k
 * are taken on the logits and their weights are the softmax over those k
 * logits; experts have biases and the clamped SwiGLU (swiglu_limit).
 * Experts run as grouped GEMMs: the step's rows are sorted by expert (a
 * counting sort, token order kept), each active expert multiplies its
 * gathered rows once, and the outputs go back to their tokens. A token's
 * result does not depend on the other tokens (each GEMM row is batch
 * invariant and the k outputs are added in rank order). */
typedef struct pg_dec_moe {
    const float *norm; /* post-attention RMSNorm [hidden] */
    pg_linear router;  /* [experts, hidden], F32 (+ bias: GPT-OSS) */
    int32_t n_experts, top_k;
    bool norm_topk;
    bool topk_softmax;  /* GPT-OSS: top-k of the logits, softmax over those k */
    float swiglu_limit; /* > 0: GPT-OSS's clamped SwiGLU (pg_gemm_problem.glu_limit) */
    pg_linear *gate_up; /* [n_experts] SwiGLU pairs [moe_ffn, hidden] x 2 */
    pg_linear *down;    /* [n_experts] [hidden, moe_ffn] */
    /* PG_DEC_MOE_SHARED (Qwen3-Next / Qwen3.5-MoE, Qwen2MoeSparseMoeBlock): a
     * shared expert every token runs, x += sigmoid(h wg) * down(silu(gate(h)) *
     * up(h)); wg [hidden] is the router's last row (router n_out = experts + 1) */
    bool shared;
    pg_linear sh_gate_up, sh_down;
} pg_dec_moe;

enum {
    PG_DEC_QK_NORM = 1 << 0, /* self_attn.{q,k}_norm.weight [head_dim] */
    PG_DEC_MOE = 1 << 1,     /* MoE MLP in the layers pg_model_config_layer_moe names */
    PG_DEC_MOE_OAI = 1 << 2, /* GPT-OSS MoE: "mlp.router" with bias, expert biases */
    PG_DEC_MOE_SHARED = 1 << 4, /* MoE with a gated shared expert ("mlp.shared_expert.*",
                                   "mlp.shared_expert_gate.weight" [1, hidden]) */
    PG_DEC_ATTN_GATE = 1 << 3, /* gated attention (Qwen3.5 / Qwen3-Next, Qiu et al. 2025):
                                  q_proj [2 * heads * hd, hidden], per head hd query rows then
                                  hd gate rows; o = attention * sigmoid(gate) */
};

/* Bind and pack layer `l`'s attention ("model.layers.{l}.input_layernorm",
 * "self_attn.{q,k,v,o}_proj", q/k/v biases when cfg->attention_bias, the
 * o_proj bias when the file has one (HF Llama with attention_bias), q/k norms
 * with PG_DEC_QK_NORM); window 0 = full attention. Errors of
 * pg_weights_* and pg_linear_pack. */
pagoda_status pg_dec_attn_load(pg_weights *w, const pg_linear_policy *p, const pg_model_config *c,
                               int l, unsigned flags, int32_t window, pg_dec_attn *a);
/* Layer l's MLP ("post_attention_layernorm", "mlp.{gate,up,down}_proj"). */
pagoda_status pg_dec_mlp_load(pg_weights *w, const pg_linear_policy *p, const pg_model_config *c,
                              int l, pg_dec_mlp *f);
/* Layer l's MoE MLP ("post_attention_layernorm", "mlp.gate" router,
 * "mlp.experts.{e}.{gate,up,down}_proj"; cfg num_experts,
 * num_experts_per_tok, moe_intermediate_size, norm_topk_prob,
 * moe_topk_softmax, swiglu_limit). PG_DEC_MOE_OAI in flags: the router is
 * "mlp.router" with a bias and every expert projection has a bias. */
pagoda_status pg_dec_moe_load(pg_weights *w, const pg_linear_policy *p, const pg_model_config *c,
                              int l, unsigned flags, pg_dec_moe *f);
void pg_dec_moe_free(pg_dec_moe *f);
/* GEMM scratch the expert GEMMs of f need for steps of max_tokens tokens on
 * nt threads (pg_gemm_grouped_scratch_size over every expert). */
size_t pg_dec_moe_scratch_bytes(const pg_dec_moe *f, int64_t max_tokens, int nt);
void pg_dec_attn_free(pg_dec_attn *a);
void pg_dec_mlp_free(pg_dec_mlp *f);

/* The RoPE frequency table [head_dim/2] for cfg (plain, linear, Llama-3,
 * YaRN: its attention factor is folded into the attention scale by
 * pg_dec_attn_load) with llama.cpp's GGUF rope_freqs.weight factors when the
 * source has them and no scaling type is set; *out is pg_malloc_aligned.
 * Errors: PAGODA_ERR_UNSUPPORTED, PAGODA_ERR_FORMAT, PAGODA_ERR_NOMEM. */
pagoda_status pg_dec_rope_init(const pg_model_source *src, const pg_model_config *c, float **out);

/* Common config checks of a decoder (positive sizes, GQA divisibility, even
 * head_dim, eps > 0). Errors: PAGODA_ERR_FORMAT naming the values. */
pagoda_status pg_dec_check_config(const pg_model_source *src, const pg_model_config *c);

/* ---- step workspace ----------------------------------------------------------------- */

typedef struct pg_dec_ws {
    pg_arena arena;
    int32_t max_tokens, max_seqs;
    float *x;    /* residual stream [T, hidden] */
    float *xb;   /* normed input [T, hidden] */
    float *qkv;  /* fused projections [T, qkv width] */
    float *attn; /* attention output [T, heads*hd] */
    float *act;  /* MLP activation [T, act width] */
    float *last; /* final-normed rows that need logits [max_seqs, hidden] */
    void *gemm_scratch;
    size_t gemm_scratch_bytes;
    void *attn_scratch;
    size_t attn_scratch_bytes;
    /* MoE (when dims.moe_experts > 0): per step, T tokens x top_k slots */
    float *moe_logits; /* [T, experts] router logits -> probabilities */
    int32_t *moe_sel;  /* [T * k] expert of (token, rank) */
    float *moe_w;      /* [T * k] its weight */
    int32_t *moe_slot; /* [T * k] its row in the expert-sorted buffers */
    int32_t *moe_off;  /* [experts + 1] first sorted row of each expert */
    int32_t *moe_rows; /* [T * k] token of each expert-sorted row */
    struct pg_gemm_problem *moe_prob; /* [experts] one grouped GEMM's problems */
    float *moe_act;    /* [T * k, moe ffn] */
    float *moe_out;    /* [T * k, hidden] */
    /* tensor parallelism (set by the model after pg_dec_ws_create; size 0 /
     * 1: none): the blocks all-reduce x over comm after attention's o_proj
     * and after the MLP / MoE (rank 0 keeps the residual, the others add
     * their partial into a cleared x) */
    struct pg_comm *comm;
    int32_t tp_rank, tp_size;
} pg_dec_ws;

typedef struct pg_dec_dims {
    int64_t hidden, qkv_width, attn_width, act_width;
    int32_t n_heads, n_kv_heads, head_dim; /* the attention scratch's worst case */
    int32_t moe_experts, moe_top_k;        /* 0: no MoE layer */
    int64_t moe_ffn;
    size_t gemm_scratch_min; /* GEMM scratch at least this (grouped expert GEMMs) */
} pg_dec_dims;

/* A workspace for steps within lim; GEMM scratch sized for every linear in
 * ls[0..n) (NULL entries skipped; the last `n_head` of them only see
 * max_seqs rows, e.g. the lm_head). Errors: PAGODA_ERR_INVALID_ARG,
 * PAGODA_ERR_NOMEM. */
pagoda_status pg_dec_ws_create(const pg_dec_dims *d, const pg_step_limits *lim,
                               const pg_linear *const *ls, int n, int n_head, pg_dec_ws **out);
void pg_dec_ws_free(void *ws);
size_t pg_dec_ws_bytes(const void *ws);

/* Check a step against the workspace and the vocabulary (token ids, logit
 * rows). Errors: PAGODA_ERR_INVALID_ARG. */
pagoda_status pg_dec_check_batch(const pg_dec_ws *ws, const pg_batch *b, int32_t vocab);

/* ---- blocks --------------------------------------------------------------------------- */

/* ws->x[t] = row token_ids[t] of embed [vocab, hidden] (any GEMM dtype), f32. */
void pg_dec_embed(const pg_tensor *embed, const pg_batch *b, pg_dec_ws *ws);
/* x += o(attention(RoPE(q), RoPE(k), v)) for layer cache lc. Under
 * tensor parallelism (ws->tp_size > 1) the blocks below run this rank's
 * heads / columns and all-reduce x (comm errors: PAGODA_ERR_IO naming the
 * rank). */
pagoda_status pg_dec_attn_forward(const pg_dec_attn *a, const pg_rope_spec *rope, float eps,
                                  const pg_batch *b, const pg_layer_cache *lc, pg_dec_ws *ws);
/* x += down(silu(gate(h)) * up(h)), h = RMSNorm(x). */
pagoda_status pg_dec_mlp_forward(const pg_dec_mlp *f, float eps, const pg_batch *b, pg_dec_ws *ws);
/* x += MoE(RMSNorm(x)) (see pg_dec_moe). */
pagoda_status pg_dec_moe_forward(const pg_dec_moe *f, float eps, const pg_batch *b, pg_dec_ws *ws);
/* logits[i] = RMSNorm(x[logit_rows[i]]) lm_head^T. */
pagoda_status pg_dec_logits(const float *final_norm, float eps, const pg_linear *lm_head,
                            const pg_batch *b, pg_dec_ws *ws, float *logits);

#endif
