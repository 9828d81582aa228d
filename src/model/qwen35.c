/* Qwen3.5 (Qwen3_5ForConditionalGeneration / Qwen3_5ForCausalLM, text part;
 * GGUF "qwen35") and Qwen3.5-MoE (Qwen3_5Moe*; GGUF "qwen35moe"): a hybrid of
 * Gated DeltaNet linear-attention layers and gated full-attention layers
 * (layer_types; by default every full_attention_interval-th layer is full).
 *
 *   x = embed(tokens)
 *   for each layer:
 *     h = RMSNorm_(1+w)(x)                                  (input_layernorm)
 *     linear-attention layer (Qwen3_5GatedDeltaNet):
 *       qkv, z, b, a = h W^T                                 (one stacked GEMM)
 *       qkv = silu(causal depthwise conv1d(qkv))             (per-request conv state)
 *       g = -exp(A_log) softplus(a + dt_bias), beta = sigmoid(b)
 *       o = gated delta rule(l2norm(q) / sqrt(dk), l2norm(k), v, g, beta)
 *                                                            (per-request F32 state)
 *       x += (RMSNorm_w(o) * silu(z)) Wout^T                 (gated RMSNorm per head)
 *     full-attention layer (Qwen3_5Attention):
 *       [q | gate], k, v = h W^T; q, k = RMSNorm_(1+w) per head; partial RoPE
 *       x += (attention(q, k, v) * sigmoid(gate)) Wo^T       (paged KV cache)
 *     h = RMSNorm_(1+w)(x)                                  (post_attention_layernorm)
 *     x += SwiGLU MLP(h), or the MoE with a gated shared expert
 *   logits = RMSNorm_(1+w)(x) Wlm^T (tied or not)
 *
 * Norms: Qwen3_5RMSNorm scales by (1 + w) with w stored zero-centred; the
 * canonical form here is llama.cpp's (1 + w) as stored in GGUF, so the HF
 * form is rewritten at open (hf_rewrite), as is A_log -> ssm_a = -exp(A_log)
 * and the [C, 1, K] conv weight -> [C, K], and the published fused experts
 * (mlp.experts.gate_up_proj [E, 2I, H], down_proj [E, H, I]) become per-expert
 * views. llama.cpp's converter also
 * reorders the V heads of a GGUF to the tiled order: the kernels take the
 * head map instead (pg_model_config.linear_v_tiled). Text positions make
 * the interleaved M-RoPE plain RoPE over the first rotary_dim dims.
 * The MTP head (mtp.*; GGUF: the nextn block after the model's layers) is
 * a second, one-layer model over the same weights (pg_model_mtp_create,
 * "The multi-token-prediction head" below) that speculative decoding's
 * "mtp" method runs; the forward outputs the final-normed hidden states it
 * reads (pg_batch.hidden_out).
 *
 * References: transformers' modeling_qwen3_5.py / modeling_qwen3_next.py;
 * Yang et al. 2024, "Gated Delta Networks: Improving Mamba2 with Delta Rule";
 * Qiu et al. 2025, "Gated Attention for Large Language Models";
 * llama.cpp src/models/qwen35.cpp and convert_hf_to_gguf.py (GGUF layout). */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "base/pool.h"
#include "kernels/dispatch.h"
#include "kernels/gated_delta.h"
#include "model/arch.h"
#include "model/decoder.h"
#include "model/gguf.h"
#include "model/hf_config.h"

/* ---- the model -------------------------------------------------------------------- */

typedef struct gdn_layer {
    const float *norm; /* input_layernorm (1 + w) [hidden] */
    pg_linear in_proj; /* rows: qkv [conv_dim] | z [v_dim] | b [nv] | a [nv] */
    const float *conv_w; /* [conv_dim][K] */
    const float *dt_bias, *a_neg; /* [nv] */
    const float *gnorm;           /* gated RMSNorm weight [dv] */
    pg_linear out;                /* [hidden, v_dim] */
} gdn_layer;

typedef struct q35_layer {
    bool linear;
    gdn_layer gdn;
    pg_dec_attn attn;
    pg_dec_mlp mlp;
    pg_dec_moe moe; /* when moe.n_experts > 0 */
} q35_layer;

typedef struct qwen35 {
    pg_model base;
    pg_weights w;
    const pg_tensor *embed;
    q35_layer *layers;
    const float *final_norm;
    pg_linear lm_head;
    float *rope_inv_freq;
    pg_rope_spec rope;
    pg_gdn_params gp;
    int32_t conv_dim, v_dim, conv_k;
    int64_t state_floats; /* per layer per request: conv (K-1) * conv_dim + nv * dk * dv */
} qwen35;

typedef struct q35_ws {
    pg_dec_ws *dec;
    pg_arena arena;
    float *lin;         /* [T, in_proj width] */
    float *g, *beta;    /* [T, nv] */
    float *o;           /* [T, v_dim] */
    float **conv, **rec, **snap_conv, **snap_rec; /* [max_seqs] per layer */
    float **row_conv, **row_rec;                  /* [max_seqs]: per-row snapshots */
    int32_t *start;     /* [max_seqs] */
    void *gdn_scratch;
    size_t gdn_scratch_bytes;
} q35_ws;

/* ---- forward ---------------------------------------------------------------------- */

static pagoda_status gdn_forward(const qwen35 *m, const gdn_layer *G, const pg_batch *b,
                                 const pg_layer_cache *lc, q35_ws *w) {
    if (!lc->states)
        return pg_error(PAGODA_ERR_INVALID_ARG, "model: linear-attention layer without states");
    const pg_model_config *c = &m->base.cfg;
    pg_pool *pool = pg_pool_default();
    pg_dec_ws *ws = w->dec;
    const int64_t T = b->num_tokens, W = G->in_proj.n_out;
    const int32_t C = m->conv_dim, K = m->conv_k, nv = m->gp.n_v_heads;
    const int64_t kd = (int64_t)m->gp.n_k_heads * m->gp.dk;
    pagoda_status st =
        pg_linear_forward_rmsnorm(&G->in_proj, ws->x, T, G->norm, c->rms_norm_eps, ws->xb, w->lin,
                                  W, PG_GEMM_STORE, pool, ws->gemm_scratch);
    if (st != PAGODA_OK) return st;
    const bool snap = lc->snap_len != NULL && lc->snap_states != NULL;
    for (int32_t i = 0; i < b->num_seqs; i++) {
        w->conv[i] = lc->states[i];
        w->rec[i] = w->conv[i] + (size_t)(K - 1) * (size_t)C;
        w->snap_conv[i] = snap && lc->snap_len[i] > 0 ? lc->snap_states[i] : NULL;
        w->snap_rec[i] = w->snap_conv[i] ? w->snap_conv[i] + (size_t)(K - 1) * (size_t)C : NULL;
        w->start[i] = b->positions[b->query_start_loc[i]];
        const bool rows = lc->row_snaps && lc->row_snaps[i] > 0;
        w->row_conv[i] = rows ? lc->row_snap_states[i] : NULL;
        w->row_rec[i] = rows ? w->row_conv[i] + (size_t)(K - 1) * (size_t)C : NULL;
    }
    pg_gdn_batch gb = {.n_seqs = b->num_seqs,
                       .cu_seqlens = b->query_start_loc,
                       .start_pos = w->start,
                       .states = w->rec,
                       .snap_len = snap ? lc->snap_len : NULL,
                       .snap_states = snap ? w->snap_rec : NULL,
                       .row_snaps = lc->row_snaps,
                       .row_snap_states = w->row_rec,
                       .row_snap_conv = w->row_conv,
                       .row_snap_stride = m->state_floats};
    if ((st = pg_gdn_conv1d(C, K, G->conv_w, &gb, w->conv, snap ? w->snap_conv : NULL, w->lin, W,
                            w->lin, W, pool)))
        return st;
    const float *z = w->lin + C, *bb = z + m->v_dim, *aa = bb + nv;
    pg_gdn_gates(T, nv, aa, W, bb, W, G->a_neg, G->dt_bias, w->g, w->beta);
    if ((st = pg_gdn_forward(&m->gp, &gb, w->lin, W, w->lin + kd, W, w->lin + 2 * kd, W, w->g,
                             w->beta, w->o, m->v_dim, w->gdn_scratch, w->gdn_scratch_bytes, pool)))
        return st;
    pg_gdn_gated_rmsnorm(T, nv, m->gp.dv, w->o, m->v_dim, z, W, G->gnorm, c->rms_norm_eps, w->o,
                         m->v_dim);
    return pg_linear_forward(&G->out, w->o, T, ws->x, G->out.n_out, PG_GEMM_RESIDUAL, pool,
                             ws->gemm_scratch);
}

static pagoda_status forward(const pg_model *base, void *wsp, const pg_batch *b, float *logits) {
    const qwen35 *m = (const qwen35 *)base;
    const pg_model_config *c = &base->cfg;
    q35_ws *w = wsp;
    pg_dec_ws *ws = w->dec;
    pagoda_status st = pg_dec_check_batch(ws, b, c->vocab_size);
    if (st != PAGODA_OK) return st;
    pg_dec_embed(m->embed, b, ws);
    for (int l = 0; l < c->num_hidden_layers; l++) {
        const q35_layer *L = &m->layers[l];
        st = L->linear ? gdn_forward(m, &L->gdn, b, &b->layers[l], w)
                       : pg_dec_attn_forward(&L->attn, &m->rope, c->rms_norm_eps, b,
                                             &b->layers[l], ws);
        if (st) return st;
        st = L->moe.n_experts ? pg_dec_moe_forward(&L->moe, c->rms_norm_eps, b, ws)
                              : pg_dec_mlp_forward(&L->mlp, c->rms_norm_eps, b, ws);
        if (st) return st;
    }
    if (b->hidden_out) /* the lm_head's input for every token (the MTP head reads it) */
        for (int32_t t = 0; t < b->num_tokens; t++)
            pg_kernels()->rmsnorm_f32(b->hidden_out + (size_t)t * (size_t)c->hidden_size,
                                      ws->x + (size_t)t * (size_t)c->hidden_size, m->final_norm, 1,
                                      (size_t)c->hidden_size, c->rms_norm_eps);
    return pg_dec_logits(m->final_norm, c->rms_norm_eps, &m->lm_head, b, ws, logits);
}

/* ---- workspace, sizes --------------------------------------------------------------- */

static void ws_free(void *p) {
    q35_ws *w = p;
    if (!w) return;
    pg_dec_ws_free(w->dec);
    pg_arena_free(&w->arena);
    free(w);
}

static size_t ws_bytes(const void *p) {
    const q35_ws *w = p;
    return w ? pg_dec_ws_bytes(w->dec) + w->arena.cap : 0;
}

/* Add layer Y's feed-forward linears (MLP, or router, experts and shared
 * expert) to ls[*n..] and widen d for them: the part of a workspace that the
 * model's layers and the MTP head's layer share. nt: the pool's threads. */
static void ffn_linears(const q35_layer *Y, const pg_model_config *c, const pg_step_limits *lim,
                        int nt, pg_dec_dims *d, const pg_linear **ls, int *n) {
    if (Y->moe.n_experts) {
        ls[(*n)++] = &Y->moe.router;
        for (int32_t e = 0; e < Y->moe.n_experts; e++) {
            ls[(*n)++] = &Y->moe.gate_up[e];
            ls[(*n)++] = &Y->moe.down[e];
        }
        if (Y->moe.shared) {
            ls[(*n)++] = &Y->moe.sh_gate_up;
            ls[(*n)++] = &Y->moe.sh_down;
            if (Y->moe.sh_gate_up.n_out > d->act_width) d->act_width = Y->moe.sh_gate_up.n_out;
        }
        size_t gs = pg_dec_moe_scratch_bytes(&Y->moe, lim->max_tokens, nt);
        if (gs > d->gemm_scratch_min) d->gemm_scratch_min = gs;
        d->moe_experts = Y->moe.n_experts;
        d->moe_top_k = Y->moe.top_k;
        d->moe_ffn = Y->moe.gate_up[0].n_out;
    } else {
        ls[(*n)++] = &Y->mlp.gate_up;
        ls[(*n)++] = &Y->mlp.down;
        if (c->intermediate_size > d->act_width) d->act_width = c->intermediate_size;
    }
}

static pagoda_status workspace_create(const pg_model *base, const pg_step_limits *lim, void **out) {
    const qwen35 *m = (const qwen35 *)base;
    const pg_model_config *c = &base->cfg;
    const int L = c->num_hidden_layers;
    *out = NULL;
    size_t cap = 2;
    for (int l = 0; l < L; l++)
        cap += 6 + 2 * (size_t)m->layers[l].moe.n_experts;
    const pg_linear **ls = malloc(cap * sizeof *ls);
    q35_ws *w = calloc(1, sizeof *w);
    if (!ls || !w) {
        free(ls);
        free(w);
        return pg_error(PAGODA_ERR_NOMEM, "qwen3_5: out of memory");
    }
    pg_dec_dims d = {.hidden = c->hidden_size,
                     .qkv_width = 1,
                     .attn_width = (int64_t)c->num_attention_heads * c->head_dim,
                     .act_width = 1,
                     .n_heads = c->num_attention_heads,
                     .n_kv_heads = c->num_key_value_heads,
                     .head_dim = c->head_dim};
    pg_pool *pool = pg_pool_default();
    const int nt = pool ? pg_pool_size(pool) : 1;
    int n = 0;
    int64_t lin_w = 1;
    for (int l = 0; l < L; l++) {
        const q35_layer *Y = &m->layers[l];
        if (Y->linear) {
            ls[n++] = &Y->gdn.in_proj;
            ls[n++] = &Y->gdn.out;
            if (Y->gdn.in_proj.n_out > lin_w) lin_w = Y->gdn.in_proj.n_out;
        } else {
            ls[n++] = &Y->attn.qkv;
            ls[n++] = &Y->attn.o;
            if (Y->attn.qkv.n_out > d.qkv_width) d.qkv_width = Y->attn.qkv.n_out;
        }
        ffn_linears(Y, c, lim, nt, &d, ls, &n);
    }
    ls[n++] = &m->lm_head;
    pagoda_status st = pg_dec_ws_create(&d, lim, ls, n, 1, &w->dec);
    free(ls);
    if (st) {
        free(w);
        return st;
    }
    const size_t T = (size_t)lim->max_tokens, S = (size_t)lim->max_seqs;
    const size_t nv = (size_t)m->gp.n_v_heads;
    w->gdn_scratch_bytes = pg_gdn_scratch_bytes(&m->gp, lim->max_tokens, nt);
    size_t sizes[] = {T * (size_t)lin_w * 4, T * nv * 4, T * nv * 4, T * (size_t)m->v_dim * 4,
                      S * sizeof(float *) * 6, S * 4, w->gdn_scratch_bytes};
    size_t total = 0;
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
        total += (sizes[i] + PG_ALIGN - 1) / PG_ALIGN * PG_ALIGN + PG_ALIGN;
    if ((st = pg_arena_init(&w->arena, total))) {
        ws_free(w);
        return st;
    }
    w->lin = pg_arena_alloc(&w->arena, sizes[0]);
    w->g = pg_arena_alloc(&w->arena, sizes[1]);
    w->beta = pg_arena_alloc(&w->arena, sizes[2]);
    w->o = pg_arena_alloc(&w->arena, sizes[3]);
    float **ptrs = pg_arena_alloc(&w->arena, sizes[4]);
    w->conv = ptrs;
    w->rec = ptrs + S;
    w->snap_conv = ptrs + 2 * S;
    w->snap_rec = ptrs + 3 * S;
    w->row_conv = ptrs + 4 * S;
    w->row_rec = ptrs + 5 * S;
    w->start = pg_arena_alloc(&w->arena, sizes[5]);
    w->gdn_scratch = sizes[6] ? pg_arena_alloc(&w->arena, sizes[6]) : NULL;
    *out = w;
    return PAGODA_OK;
}

/* The feed-forward weights a decode step at batch 1 reads in layer L: the
 * MLP, or the router, the shared expert and the top-k experts' share. */
static size_t ffn_bytes_per_step(const q35_layer *L) {
    if (!L->moe.n_experts) return pg_linear_bytes(&L->mlp.gate_up) + pg_linear_bytes(&L->mlp.down);
    return pg_linear_bytes(&L->moe.router) + pg_linear_bytes(&L->moe.sh_gate_up) +
           pg_linear_bytes(&L->moe.sh_down) +
           (size_t)L->moe.top_k *
               (pg_linear_bytes(&L->moe.gate_up[0]) + pg_linear_bytes(&L->moe.down[0]));
}

/* A decode step at batch 1 reads every layer's weights, the top-k experts'
 * share of each MoE layer's experts, and the shared expert. */
static size_t weight_bytes_per_step(const pg_model *base) {
    const qwen35 *m = (const qwen35 *)base;
    const size_t H = (size_t)base->cfg.hidden_size;
    size_t b = H * sizeof(float);
    for (int l = 0; l < base->cfg.num_hidden_layers; l++) {
        const q35_layer *L = &m->layers[l];
        b += 2 * H * sizeof(float);
        if (L->linear)
            b += pg_linear_bytes(&L->gdn.in_proj) + pg_linear_bytes(&L->gdn.out);
        else
            b += pg_linear_bytes(&L->attn.qkv) + pg_linear_bytes(&L->attn.o);
        b += ffn_bytes_per_step(L);
    }
    return b + pg_linear_bytes(&m->lm_head);
}

static void model_free(pg_model *base) {
    qwen35 *m = (qwen35 *)base;
    if (!m) return;
    for (int l = 0; m->layers && l < base->cfg.num_hidden_layers; l++) {
        q35_layer *L = &m->layers[l];
        pg_linear_free(&L->gdn.in_proj);
        pg_linear_free(&L->gdn.out);
        pg_dec_attn_free(&L->attn);
        pg_dec_mlp_free(&L->mlp);
        pg_dec_moe_free(&L->moe);
    }
    free(m->layers);
    pg_linear_free(&m->lm_head);
    pg_free(m->rope_inv_freq);
    pg_weights_release(&m->w);
    pg_model_base_release(base);
    free(m);
}

static pagoda_status mtp_create(const pg_model *target, const pg_model_source *src,
                                const pg_model_options *o, pg_model **out);

static const pg_model_ops Q35_OPS = {
    .free = model_free,
    .weight_bytes_per_step = weight_bytes_per_step,
    .workspace_create = workspace_create,
    .workspace_free = ws_free,
    .workspace_bytes = ws_bytes,
    .forward = forward,
    .hidden_out = true,
    .mtp_create = mtp_create,
};

/* ---- load ----------------------------------------------------------------------------- */

static pagoda_status gdn_load(qwen35 *m, const pg_linear_policy *p, int l, gdn_layer *G) {
    const pg_model_config *c = &m->base.cfg;
    pg_weights *w = &m->w;
    const int64_t H = c->hidden_size, C = m->conv_dim, V = m->v_dim, nv = m->gp.n_v_heads;
    const char *pre = "model.layers";
    pg_linear_src qkv, z, bb, aa, o;
    pagoda_status st;
    if ((st = pg_weights_vector(w, H, false, &G->norm, "%s.%d.input_layernorm.weight", pre, l)) ||
        (st = pg_weights_linear(w, C, H, false, &qkv, "%s.%d.linear_attn.in_proj_qkv", pre, l)) ||
        (st = pg_weights_linear(w, V, H, false, &z, "%s.%d.linear_attn.in_proj_z", pre, l)) ||
        (st = pg_weights_linear(w, nv, H, false, &bb, "%s.%d.linear_attn.in_proj_b", pre, l)) ||
        (st = pg_weights_linear(w, nv, H, false, &aa, "%s.%d.linear_attn.in_proj_a", pre, l)) ||
        (st = pg_weights_linear(w, H, V, false, &o, "%s.%d.linear_attn.out_proj", pre, l)) ||
        (st = pg_weights_matrix(w, C, m->conv_k, &G->conv_w, "%s.%d.linear_attn.conv1d.weight", pre,
                                l)) ||
        (st = pg_weights_vector(w, nv, false, &G->dt_bias, "%s.%d.linear_attn.dt_bias", pre, l)) ||
        (st = pg_weights_vector(w, nv, false, &G->a_neg, "%s.%d.linear_attn.ssm_a", pre, l)) ||
        (st = pg_weights_vector(w, m->gp.dv, false, &G->gnorm, "%s.%d.linear_attn.norm.weight",
                                pre, l)))
        return st;
    const pg_linear_src *in[4] = {&qkv, &z, &bb, &aa}, *op = &o;
    char what[2][48];
    snprintf(what[0], sizeof what[0], "layer %d in_proj_qkv/z/b/a", l);
    snprintf(what[1], sizeof what[1], "layer %d out_proj", l);
    if ((st = pg_linear_pack(p, in, 4, true, what[0], &G->in_proj)) ||
        (st = pg_linear_pack(p, &op, 1, true, what[1], &G->out)))
        return st;
    return PAGODA_OK;
}

static pagoda_status load_weights(qwen35 *m, const pg_linear_policy *p, unsigned flags) {
    const pg_model_config *c = &m->base.cfg;
    const int64_t H = c->hidden_size;
    pg_weights *w = &m->w;
    pagoda_status st;
    m->layers = calloc((size_t)c->num_hidden_layers, sizeof *m->layers);
    if (!m->layers) return pg_error(PAGODA_ERR_NOMEM, "qwen3_5: out of memory");
    if ((st = pg_weights_tensor(w, c->vocab_size, H, false, &m->embed,
                                "model.embed_tokens.weight")))
        return st;
    m->state_floats = (int64_t)(m->conv_k - 1) * m->conv_dim +
                      (int64_t)m->gp.n_v_heads * m->gp.dk * m->gp.dv;
    const int64_t state = 4 * m->state_floats;
    for (int l = 0; l < c->num_hidden_layers; l++) {
        q35_layer *L = &m->layers[l];
        L->linear = pg_model_config_layer_linear(c, l);
        bool moe = (flags & PG_DEC_MOE) && pg_model_config_layer_moe(c, l);
        if (L->linear) {
            st = gdn_load(m, p, l, &L->gdn);
            m->base.cache[l] = (pg_layer_cache_spec){.kind = PG_LAYER_CACHE_STATE,
                                                     .state_bytes = state,
                                                     .state_align = PG_GDN_CHUNK};
        } else {
            st = pg_dec_attn_load(w, p, c, l, PG_DEC_QK_NORM | PG_DEC_ATTN_GATE, 0, &L->attn);
            m->base.cache[l] = (pg_layer_cache_spec){.kind = PG_LAYER_CACHE_FULL,
                                                     .num_kv_heads = c->num_key_value_heads,
                                                     .head_dim = c->head_dim};
        }
        if (st) return st;
        st = moe ? pg_dec_moe_load(w, p, c, l, flags & (PG_DEC_MOE_SHARED), &L->moe)
                 : pg_dec_mlp_load(w, p, c, l, &L->mlp);
        if (st) return st;
        if (p->bits)
            PG_INFO("%s: quantized layer %d/%d to W%dA8", m->base.arch->name, l + 1,
                    c->num_hidden_layers, p->bits);
    }
    if ((st = pg_weights_vector(w, H, false, &m->final_norm, "model.norm.weight"))) return st;
    pg_linear_src head;
    if (!c->tie_word_embeddings)
        st = pg_weights_linear(w, c->vocab_size, H, false, &head, "lm_head");
    else
        head = (pg_linear_src){
            .w = m->embed->data, .dtype = m->embed->dtype, .n_out = c->vocab_size, .n_in = H};
    if (st || (st = pg_linear_pack_lm_head(p, &head, &m->lm_head))) return st;
    /* decode prefetch order */
    int n = 0;
    pg_linear **chain = malloc((size_t)(4 * c->num_hidden_layers + 1) * sizeof *chain);
    if (!chain) return pg_error(PAGODA_ERR_NOMEM, "qwen3_5: out of memory");
    for (int l = 0; l < c->num_hidden_layers; l++) {
        q35_layer *L = &m->layers[l];
        chain[n++] = L->linear ? &L->gdn.in_proj : &L->attn.qkv;
        chain[n++] = L->linear ? &L->gdn.out : &L->attn.o;
        chain[n++] = L->moe.n_experts ? &L->moe.router : &L->mlp.gate_up;
        chain[n++] = L->moe.n_experts ? NULL : &L->mlp.down;
    }
    chain[n++] = &m->lm_head;
    pg_linear_chain(chain, n);
    free(chain);
    return PAGODA_OK;
}

static pagoda_status check_config(const pg_model_source *src, const pg_model_config *c) {
    pagoda_status st = pg_dec_check_config(src, c);
    if (st) return st;
    const char *path = pg_model_source_path(src);
    const int nk = c->linear_num_key_heads, nv = c->linear_num_value_heads;
    if (nk < 1 || nv < 1 || nv % nk || c->linear_key_head_dim < 1 ||
        c->linear_value_head_dim < 1 || c->linear_conv_kernel < 1 || c->linear_conv_kernel > 64)
        return pg_error(PAGODA_ERR_FORMAT,
                        "%s: bad linear-attention config (key heads %d, value heads %d, key dim "
                        "%d, value dim %d, conv kernel %d): value heads must be a multiple of key "
                        "heads",
                        path, nk, nv, c->linear_key_head_dim, c->linear_value_head_dim,
                        c->linear_conv_kernel);
    if (c->num_hidden_layers > 256)
        return pg_error(PAGODA_ERR_UNSUPPORTED, "%s: more than 256 layers (%d)", path,
                        c->num_hidden_layers);
    if (!c->attn_output_gate)
        return pg_error(PAGODA_ERR_UNSUPPORTED,
                        "%s: attn_output_gate false is not supported (Qwen3.5 gates its "
                        "attention output)",
                        path);
    return PAGODA_OK;
}

static pagoda_status q35_create(const pg_model_source *src, const pg_model_options *o,
                                unsigned flags, pg_model **out) {
    *out = NULL;
    const pg_model_config *c = pg_model_source_config(src);
    pagoda_status st = check_config(src, c);
    if (st) return st;
    pg_linear_policy p;
    st = pg_linear_policy_init(&p, o->compute, o->quant_bits, o->quant_group, o->quant_act_group,
                               pg_model_source_ct(src));
    if (st) return st;
    qwen35 *m = calloc(1, sizeof *m);
    if (!m) return pg_error(PAGODA_ERR_NOMEM, "qwen3_5: out of memory");
    m->gp = (pg_gdn_params){.n_k_heads = c->linear_num_key_heads,
                            .n_v_heads = c->linear_num_value_heads,
                            .dk = c->linear_key_head_dim,
                            .dv = c->linear_value_head_dim,
                            .tiled = c->linear_v_tiled,
                            .scale = (float)(1.0 / sqrt((double)c->linear_key_head_dim))};
    m->v_dim = m->gp.n_v_heads * m->gp.dv;
    m->conv_dim = 2 * m->gp.n_k_heads * m->gp.dk + m->v_dim;
    m->conv_k = c->linear_conv_kernel;
    pg_weights_init(&m->w, src);
    if ((st = pg_model_base_init(&m->base, &Q35_OPS, src, o, c->num_hidden_layers)) ||
        (st = load_weights(m, &p, flags)) || (st = pg_dec_rope_init(src, c, &m->rope_inv_freq))) {
        model_free(&m->base);
        return st;
    }
    m->rope = (pg_rope_spec){.style = PG_ROPE_NEOX,
                             .rotary_dim = c->rotary_dim > 0 ? c->rotary_dim : c->head_dim,
                             .inv_freq = m->rope_inv_freq};
    *out = &m->base;
    return PAGODA_OK;
}

static pagoda_status create_dense(const pg_model_source *src, const pg_model_options *o,
                                  pg_model **out) {
    return q35_create(src, o, 0, out);
}

static pagoda_status create_moe(const pg_model_source *src, const pg_model_options *o,
                                pg_model **out) {
    const pg_model_config *c = pg_model_source_config(src);
    return q35_create(src, o, PG_DEC_MOE | (c->shared_expert_intermediate_size > 0 ? PG_DEC_MOE_SHARED : 0),
                      out);
}

/* ---- the multi-token-prediction head ------------------------------------------------------ */

/* Qwen3.5's MTP head (vLLM qwen3_5_mtp.py Qwen3_5MultiTokenPredictor, the
 * same as Qwen3-Next's): for the hidden state h_t the target (or the
 * previous draft step) produced at position t and the embedding of token
 * t + 1,
 *   x = fc([RMSNorm_enorm(embed(x_{t+1})) | RMSNorm_hnorm(h_t)])
 *   x = the decoder layer at position t (gated full attention over the
 *       head's own paged KV, q/k norms, partial RoPE; SwiGLU MLP or MoE)
 *   h' = RMSNorm_norm(x), logits = h' lm_head^T
 * Norms are (1 + w) like the model's (GGUF stores them so; the HF ones are
 * rewritten at open, mtp_rewrite). The embedding, lm_head and RoPE are the
 * target's. */
typedef struct q35_mtp {
    pg_model base; /* one layer: the MTP decoder layer's FULL cache */
    const qwen35 *t;
    pg_weights w;
    const float *enorm, *hnorm, *norm; /* [hidden] */
    pg_linear fc;                      /* [hidden, 2 * hidden] */
    q35_layer layer;
} q35_mtp;

typedef struct mtp_ws {
    pg_dec_ws *dec;
    pg_arena arena;
    float *cat; /* [T, 2 * hidden] */
} mtp_ws;

static pagoda_status mtp_forward(const pg_model *base, void *wsp, const pg_batch *b,
                                 float *logits) {
    const q35_mtp *m = (const q35_mtp *)base;
    const pg_model_config *c = &base->cfg;
    mtp_ws *w = wsp;
    pg_dec_ws *ws = w->dec;
    pagoda_status st = pg_dec_check_batch(ws, b, c->vocab_size);
    if (st != PAGODA_OK) return st;
    if (b->num_tokens > 0 && !b->hidden_in)
        return pg_error(PAGODA_ERR_INVALID_ARG, "qwen3_5 mtp: the step has no hidden_in");
    const size_t H = (size_t)c->hidden_size;
    const float eps = c->rms_norm_eps;
    const pg_kernel_table *kt = pg_kernels();
    pg_dec_embed(m->t->embed, b, ws);
    for (int32_t t = 0; t < b->num_tokens; t++) {
        float *row = w->cat + (size_t)t * 2 * H;
        kt->rmsnorm_f32(row, ws->x + (size_t)t * H, m->enorm, 1, H, eps);
        kt->rmsnorm_f32(row + H, b->hidden_in + (size_t)t * H, m->hnorm, 1, H, eps);
    }
    pg_pool *pool = pg_pool_default();
    if ((st = pg_linear_forward(&m->fc, w->cat, b->num_tokens, ws->x, (int64_t)H, PG_GEMM_STORE,
                                pool, ws->gemm_scratch)) ||
        (st = pg_dec_attn_forward(&m->layer.attn, &m->t->rope, eps, b, &b->layers[0], ws)))
        return st;
    st = m->layer.moe.n_experts ? pg_dec_moe_forward(&m->layer.moe, eps, b, ws)
                                : pg_dec_mlp_forward(&m->layer.mlp, eps, b, ws);
    if (st) return st;
    if (b->hidden_out)
        for (int32_t t = 0; t < b->num_tokens; t++)
            kt->rmsnorm_f32(b->hidden_out + (size_t)t * H, ws->x + (size_t)t * H, m->norm, 1, H,
                            eps);
    return pg_dec_logits(m->norm, eps, &m->t->lm_head, b, ws, logits);
}

static void mtp_ws_free(void *p) {
    mtp_ws *w = p;
    if (!w) return;
    pg_dec_ws_free(w->dec);
    pg_arena_free(&w->arena);
    free(w);
}

static size_t mtp_ws_bytes(const void *p) {
    const mtp_ws *w = p;
    return w ? pg_dec_ws_bytes(w->dec) + w->arena.cap : 0;
}

static pagoda_status mtp_ws_create(const pg_model *base, const pg_step_limits *lim, void **out) {
    const q35_mtp *m = (const q35_mtp *)base;
    const pg_model_config *c = &base->cfg;
    const q35_layer *Y = &m->layer;
    *out = NULL;
    const size_t cap = 8 + 2 * (size_t)Y->moe.n_experts;
    const pg_linear **ls = malloc(cap * sizeof *ls);
    mtp_ws *w = calloc(1, sizeof *w);
    if (!ls || !w) {
        free(ls);
        free(w);
        return pg_error(PAGODA_ERR_NOMEM, "qwen3_5 mtp: out of memory");
    }
    pg_dec_dims d = {.hidden = c->hidden_size,
                     .qkv_width = Y->attn.qkv.n_out,
                     .attn_width = (int64_t)c->num_attention_heads * c->head_dim,
                     .act_width = c->intermediate_size > 0 ? c->intermediate_size : 1,
                     .n_heads = c->num_attention_heads,
                     .n_kv_heads = c->num_key_value_heads,
                     .head_dim = c->head_dim};
    pg_pool *pool = pg_pool_default();
    const int nt = pool ? pg_pool_size(pool) : 1;
    int n = 0;
    ls[n++] = &m->fc;
    ls[n++] = &Y->attn.qkv;
    ls[n++] = &Y->attn.o;
    ffn_linears(Y, c, lim, nt, &d, ls, &n);
    ls[n++] = &m->t->lm_head;
    pagoda_status st = pg_dec_ws_create(&d, lim, ls, n, 1, &w->dec);
    free(ls);
    if (st) {
        free(w);
        return st;
    }
    const size_t bytes = (size_t)lim->max_tokens * 2 * (size_t)c->hidden_size * sizeof(float);
    if ((st = pg_arena_init(&w->arena, bytes + 2 * PG_ALIGN))) {
        mtp_ws_free(w);
        return st;
    }
    w->cat = pg_arena_alloc(&w->arena, bytes);
    *out = w;
    return PAGODA_OK;
}

static size_t mtp_weight_bytes(const pg_model *base) {
    const q35_mtp *m = (const q35_mtp *)base;
    const q35_layer *L = &m->layer;
    return pg_linear_bytes(&m->fc) + pg_linear_bytes(&L->attn.qkv) + pg_linear_bytes(&L->attn.o) +
           pg_linear_bytes(&m->t->lm_head) + ffn_bytes_per_step(L);
}

static void mtp_free(pg_model *base) {
    q35_mtp *m = (q35_mtp *)base;
    if (!m) return;
    pg_linear_free(&m->fc);
    pg_dec_attn_free(&m->layer.attn);
    pg_dec_mlp_free(&m->layer.mlp);
    pg_dec_moe_free(&m->layer.moe);
    pg_weights_release(&m->w);
    pg_model_base_release(base);
    free(m);
}

static const pg_model_ops MTP_OPS = {
    .free = mtp_free,
    .weight_bytes_per_step = mtp_weight_bytes,
    .workspace_create = mtp_ws_create,
    .workspace_free = mtp_ws_free,
    .workspace_bytes = mtp_ws_bytes,
    .forward = mtp_forward,
    .hidden_out = true,
};

static pagoda_status mtp_load(q35_mtp *m, const pg_linear_policy *p) {
    const pg_model_config *c = &m->base.cfg;
    const int L = c->num_hidden_layers;
    const int64_t H = c->hidden_size;
    pg_weights *w = &m->w;
    pg_linear_src fc;
    pagoda_status st;
    if ((st = pg_weights_vector(w, H, false, &m->enorm, "blk.%d.nextn.enorm.weight", L)) ||
        (st = pg_weights_vector(w, H, false, &m->hnorm, "blk.%d.nextn.hnorm.weight", L)) ||
        (st = pg_weights_vector(w, H, false, &m->norm, "blk.%d.nextn.shared_head_norm.weight",
                                L)) ||
        (st = pg_weights_linear(w, H, 2 * H, false, &fc, "blk.%d.nextn.eh_proj", L)))
        return st;
    const pg_linear_src *fp = &fc;
    if ((st = pg_linear_pack(p, &fp, 1, true, "mtp fc", &m->fc)) ||
        (st = pg_dec_attn_load(w, p, c, L, PG_DEC_QK_NORM | PG_DEC_ATTN_GATE, 0, &m->layer.attn)))
        return st;
    const bool moe = c->num_experts > 0 && pg_model_config_layer_moe(c, L);
    st = moe ? pg_dec_moe_load(w, p, c, L,
                               c->shared_expert_intermediate_size > 0 ? PG_DEC_MOE_SHARED : 0,
                               &m->layer.moe)
             : pg_dec_mlp_load(w, p, c, L, &m->layer.mlp);
    if (st) return st;
    m->base.cache[0] = (pg_layer_cache_spec){.kind = PG_LAYER_CACHE_FULL,
                                             .num_kv_heads = c->num_key_value_heads,
                                             .head_dim = c->head_dim};
    return PAGODA_OK;
}

static pagoda_status mtp_create(const pg_model *target, const pg_model_source *src,
                                const pg_model_options *o, pg_model **out) {
    *out = NULL;
    const pg_model_config *c = &target->cfg;
    const char *path = pg_model_source_path(src);
    if (c->mtp_layers != 1)
        return pg_error(PAGODA_ERR_UNSUPPORTED,
                        "%s: %d MTP layers; pagoda runs checkpoints with one (as Qwen3.5 ships)",
                        path, c->mtp_layers);
    if (o && o->tp_size > 1)
        return pg_error(PAGODA_ERR_UNSUPPORTED,
                        "%s: the MTP head does not run under tensor parallelism", path);
    pg_model_options def;
    if (!o) {
        pg_model_options_default(&def);
        o = &def;
    }
    pg_linear_policy p;
    pagoda_status st = pg_linear_policy_init(&p, o->compute, o->quant_bits, o->quant_group,
                                             o->quant_act_group, pg_model_source_ct(src));
    if (st) return st;
    q35_mtp *m = calloc(1, sizeof *m);
    if (!m) return pg_error(PAGODA_ERR_NOMEM, "qwen3_5 mtp: out of memory");
    m->t = (const qwen35 *)target;
    pg_weights_init(&m->w, src);
    m->w.prefix = "mtp.";
    if ((st = pg_model_base_init(&m->base, &MTP_OPS, src, o, 1)) || (st = mtp_load(m, &p))) {
        mtp_free(&m->base);
        return st;
    }
    m->base.max_context = target->max_context;
    *out = &m->base;
    return PAGODA_OK;
}

/* ---- config ------------------------------------------------------------------------------ */

static pagoda_status parse_hf_common(const cJSON *root, const char *path, pg_model_config *cfg) {
    pagoda_status s;
    if ((s = pg_hf_get_int(root, "linear_conv_kernel_dim", path, 1, 64, false, 4,
                           &cfg->linear_conv_kernel)) ||
        (s = pg_hf_get_int(root, "linear_key_head_dim", path, 1, 4096, true, 0,
                           &cfg->linear_key_head_dim)) ||
        (s = pg_hf_get_int(root, "linear_value_head_dim", path, 1, 4096, true, 0,
                           &cfg->linear_value_head_dim)) ||
        (s = pg_hf_get_int(root, "linear_num_key_heads", path, 1, 4096, true, 0,
                           &cfg->linear_num_key_heads)) ||
        (s = pg_hf_get_int(root, "linear_num_value_heads", path, 1, 4096, true, 0,
                           &cfg->linear_num_value_heads)) ||
        (s = pg_hf_get_bool(root, "attn_output_gate", path, true, &cfg->attn_output_gate)) ||
        (s = pg_hf_get_int(root, "mtp_num_hidden_layers", path, 0, 64, false, 0,
                           &cfg->mtp_layers)))
        return s;
    const int L = cfg->num_hidden_layers;
    memset(cfg->linear_attention_layers, 0, sizeof cfg->linear_attention_layers);
    bool given;
    if ((s = pg_hf_get_layer_types(root, path, L, "linear_attention", "full_attention",
                                   cfg->linear_attention_layers, &given)))
        return s;
    if (!given) { /* Qwen3_5TextConfig's default: every full_attention_interval-th layer is full */
        int every = 4;
        if ((s = pg_hf_get_int(root, "full_attention_interval", path, 1, 1 << 16, false, 4,
                               &every)))
            return s;
        for (int l = 0; l < L; l++)
            if ((l + 1) % every != 0) cfg->linear_attention_layers[l / 64] |= 1ull << (l % 64);
    }
    return PAGODA_OK;
}

static pagoda_status parse_hf_moe(const cJSON *root, const char *path, pg_model_config *cfg) {
    pagoda_status s = parse_hf_common(root, path, cfg);
    if (!s) s = pg_hf_get_moe(root, path, true, cfg);
    if (!s)
        s = pg_hf_get_int(root, "shared_expert_intermediate_size", path, 0, 1 << 22, false, 0,
                          &cfg->shared_expert_intermediate_size);
    cfg->decoder_sparse_step = 1;
    /* Qwen3_5MoeTextConfig has no intermediate_size: the dense MLP never runs */
    if (!s && cfg->intermediate_size <= 0) cfg->intermediate_size = cfg->moe_intermediate_size;
    return s;
}

static pagoda_status parse_gguf(const struct pg_gguf *g, pg_model_config *cfg) {
    const char *arch = cfg->arch->gguf_name;
    char k[5][96];
    snprintf(k[0], sizeof k[0], "%s.ssm.conv_kernel", arch);
    snprintf(k[1], sizeof k[1], "%s.ssm.state_size", arch);
    snprintf(k[2], sizeof k[2], "%s.ssm.group_count", arch);
    snprintf(k[3], sizeof k[3], "%s.ssm.time_step_rank", arch);
    snprintf(k[4], sizeof k[4], "%s.ssm.inner_size", arch);
    const char *const keys[5] = {k[0], k[1], k[2], k[3], k[4]};
    int inner = 0;
    int *const dst[5] = {&cfg->linear_conv_kernel, &cfg->linear_key_head_dim,
                         &cfg->linear_num_key_heads, &cfg->linear_num_value_heads, &inner};
    pagoda_status s = pg_gguf_get_ints(g, keys, dst, 5, 1, 1 << 24);
    if (s) return s;
    if (inner % cfg->linear_num_value_heads)
        return pg_error(PAGODA_ERR_FORMAT, "%s: ssm.inner_size %d is not a multiple of "
                        "ssm.time_step_rank %d", pg_gguf_path(g), inner,
                        cfg->linear_num_value_heads);
    cfg->linear_value_head_dim = inner / cfg->linear_num_value_heads;
    cfg->linear_v_tiled = true; /* convert_hf_to_gguf.py reorders the V heads */
    cfg->attn_output_gate = true;
    int64_t v;
    char key[96];
    snprintf(key, sizeof key, "%s.nextn_predict_layers", arch);
    if ((s = pg_gguf_get_int_or(g, key, 0, &v))) return s;
    if (v < 0 || v >= cfg->num_hidden_layers)
        return pg_error(PAGODA_ERR_FORMAT, "%s: %s = %lld must be in [0, block_count)",
                        pg_gguf_path(g), key, (long long)v);
    cfg->mtp_layers = (int)v;
    cfg->num_hidden_layers -= cfg->mtp_layers; /* the nextn blocks follow the model's */
    const int L = cfg->num_hidden_layers;
    /* A count above the file's nextn blocks made model layers MTP blocks:
     * fewer layers ran, their weights unused, and the model loaded and
     * generated garbage without a word. */
    for (int l = L; l < L + cfg->mtp_layers; l++) {
        char t[96], n[96];
        snprintf(t, sizeof t, "blk.%d.nextn.eh_proj.weight", l);
        snprintf(n, sizeof n, "blk.%d.attn_norm.weight", l); /* a block is there (a file */
        if (!pg_gguf_find_tensor(g, t) && pg_gguf_find_tensor(g, n)) /* without MTP: fine) */
            return pg_error(PAGODA_ERR_FORMAT,
                            "%s: %s = %d makes blk.%d an MTP (nextn) block, but it has no '%s'; "
                            "fix: set it to the number of blocks with nextn tensors (the last "
                            "ones; Qwen3.5 ships 1)",
                            pg_gguf_path(g), key, cfg->mtp_layers, l, t);
    }
    if (L > 256)
        return pg_error(PAGODA_ERR_UNSUPPORTED, "%s: more than 256 layers (%d)", pg_gguf_path(g),
                        L);
    memset(cfg->linear_attention_layers, 0, sizeof cfg->linear_attention_layers);
    snprintf(key, sizeof key, "%s.attention.recurrent_layers", arch);
    if (pg_gguf_find_key(g, key) >= 0) {
        pg_gguf_array a;
        if ((s = pg_gguf_get_array(g, key, &a))) return s;
        /* llama.cpp reads it as a bool per layer (get_key_or_arr) and refuses
         * another element type */
        if (a.type == PG_GGUF_STRING || a.type == PG_GGUF_F32 || a.type == PG_GGUF_F64 ||
            a.type == PG_GGUF_ARRAY)
            return pg_error(PAGODA_ERR_FORMAT,
                            "%s: %s is an array of %s, but it must hold bool (one per layer: "
                            "true = linear attention); fix: re-convert with "
                            "convert_hf_to_gguf.py",
                            pg_gguf_path(g), key, pg_gguf_type_name(a.type));
        if (a.n < (uint64_t)L)
            return pg_error(PAGODA_ERR_FORMAT, "%s: %s has %llu entries for %d layers",
                            pg_gguf_path(g), key, (unsigned long long)a.n, L);
        for (int l = 0; l < L; l++)
            if (pg_gguf_array_int(&a, (uint64_t)l))
                cfg->linear_attention_layers[l / 64] |= 1ull << (l % 64);
    } else {
        snprintf(key, sizeof key, "%s.full_attention_interval", arch);
        if ((s = pg_gguf_get_int_or(g, key, 4, &v))) return s;
        if (v < 1) return pg_error(PAGODA_ERR_FORMAT, "%s: %s must be >= 1", pg_gguf_path(g), key);
        for (int l = 0; l < L; l++)
            if ((l + 1) % v != 0) cfg->linear_attention_layers[l / 64] |= 1ull << (l % 64);
    }
    if (cfg->arch->extra_tensors) { /* the MoE form */
        char mk[4][96];
        snprintf(mk[0], sizeof mk[0], "%s.expert_count", arch);
        snprintf(mk[1], sizeof mk[1], "%s.expert_used_count", arch);
        snprintf(mk[2], sizeof mk[2], "%s.expert_feed_forward_length", arch);
        const char *const mkeys[3] = {mk[0], mk[1], mk[2]};
        int *const mdst[3] = {&cfg->num_experts, &cfg->num_experts_per_tok,
                              &cfg->moe_intermediate_size};
        if ((s = pg_gguf_get_ints(g, mkeys, mdst, 3, 1, 1 << 22))) return s;
        snprintf(key, sizeof key, "%s.expert_shared_feed_forward_length", arch);
        if ((s = pg_gguf_get_int_or(g, key, 0, &v))) return s;
        if (v < 0 || v > (1 << 22))
            return pg_error(PAGODA_ERR_FORMAT, "%s: %s out of range", pg_gguf_path(g), key);
        cfg->shared_expert_intermediate_size = (int)v;
        if (cfg->intermediate_size <= 0) cfg->intermediate_size = cfg->moe_intermediate_size;
        cfg->norm_topk_prob = true;
        cfg->decoder_sparse_step = 1;
    }
    return PAGODA_OK;
}

/* ---- HF checkpoint rewrite ----------------------------------------------------------------- */

static bool ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && !strcmp(s + n - m, suffix);
}

/* An f32 tensor derived from t into sink memory: f(x) per element. */
static pagoda_status derive_f32(const pg_tensor *t, const char *name, pg_tensor_sink *sink,
                                int mode /* 0: 1 + x, 1: -exp(x) */) {
    size_t n = 1;
    for (int d = 0; d < t->ndim; d++)
        n *= (size_t)t->shape[d];
    if (pg_dtype_row_bytes(t->dtype, n) != t->nbytes || n == 0)
        return pg_error(PAGODA_ERR_FORMAT, "tensor '%s': dtype %s does not match its size",
                        t->name, pg_dtype_name(t->dtype));
    float *buf = pg_tensor_sink_alloc(sink, n * sizeof(float));
    if (!buf) return pg_error(PAGODA_ERR_NOMEM, "qwen3_5: out of memory");
    pg_dequant_row(t->dtype, t->data, buf, n);
    for (size_t i = 0; i < n; i++)
        buf[i] = mode == 0 ? 1.0f + buf[i] : -expf(buf[i]);
    pg_tensor v = *t;
    v.dtype = PG_F32;
    v.data = buf;
    v.nbytes = n * sizeof(float);
    return pg_tensor_sink_add(sink, &v, name);
}

/* Published Qwen3.5-MoE experts are stacked: "<layer>.mlp.experts.gate_up_proj"
 * [E, 2I, H] (expert e: I gate rows, then I up rows) and ".down_proj" [E, H,
 * I]; each expert's rows are contiguous, so they become per-expert views. */
static pagoda_status split_fused_experts(const pg_tensor *t, const char *prefix, bool gate_up,
                                         const char *path, pg_tensor_sink *sink) {
    if (t->ndim != 3 || t->shape[0] < 1 || (gate_up && t->shape[1] % 2) ||
        t->nbytes % (size_t)t->shape[0])
        return pg_error(PAGODA_ERR_FORMAT, "%s: tensor '%s' must be 3-D [experts, %s, %s]", path,
                        t->name, gate_up ? "2 * moe_intermediate_size" : "hidden",
                        gate_up ? "hidden" : "moe_intermediate_size");
    const size_t per = t->nbytes / (size_t)t->shape[0];
    pagoda_status st = PAGODA_OK;
    for (int64_t e = 0; e < t->shape[0] && !st; e++) {
        for (int half = 0; half < (gate_up ? 2 : 1) && !st; half++) {
            pg_tensor v = *t;
            v.ndim = 2;
            v.shape[0] = gate_up ? t->shape[1] / 2 : t->shape[1];
            v.shape[1] = t->shape[2];
            v.shape[2] = 1;
            v.nbytes = gate_up ? per / 2 : per;
            v.data = (const uint8_t *)t->data + (size_t)e * per + (size_t)half * v.nbytes;
            char name[320];
            int w = snprintf(name, sizeof name, "%s.mlp.experts.%lld.%s.weight", prefix,
                             (long long)e, !gate_up ? "down_proj" : half ? "up_proj" : "gate_proj");
            if (w < 0 || (size_t)w >= sizeof name)
                return pg_error(PAGODA_ERR_FORMAT, "%s: tensor '%s': name too long", path,
                                t->name);
            st = pg_tensor_sink_add(sink, &v, name);
        }
    }
    return st;
}

/* The MTP head's HF tensors ("mtp.fc", "mtp.pre_fc_norm_{embedding,hidden}",
 * "mtp.norm", "mtp.layers.{j}.*") under the names llama.cpp's GGUF gives
 * them, behind "mtp." (source.c): "mtp.blk.{L}.nextn.{eh_proj, enorm,
 * hnorm, shared_head_norm}.weight" and "mtp.model.layers.{L + j}.*" (L =
 * num_hidden_layers), norms as (1 + w). */
static bool mtp_rewrite(const pg_model_config *cfg, const char *path, const pg_tensor *t,
                        pg_tensor_sink *sink, pagoda_status *st) {
    static const char *const nextn[][2] = {{"mtp.fc.weight", "eh_proj"},
                                           {"mtp.pre_fc_norm_embedding.weight", "enorm"},
                                           {"mtp.pre_fc_norm_hidden.weight", "hnorm"},
                                           {"mtp.norm.weight", "shared_head_norm"}};
    const int L = cfg->num_hidden_layers;
    char name[320];
    for (int i = 0; i < 4; i++)
        if (!strcmp(t->name, nextn[i][0])) {
            snprintf(name, sizeof name, "mtp.blk.%d.nextn.%s.weight", L, nextn[i][1]);
            if (i == 0) {
                *st = pg_tensor_sink_add(sink, t, name);
            } else {
                *st = derive_f32(t, name, sink, 0);
            }
            return true;
        }
    char *end;
    long j = strtol(t->name + 11, &end, 10);
    if (strncmp(t->name, "mtp.layers.", 11) || end == t->name + 11 || *end != '.' || j < 0 ||
        j >= 64)
        return false; /* kept as it is (not run) */
    const char *rest = end + 1;
    snprintf(name, sizeof name, "mtp.model.layers.%ld.%s", L + j, rest);
    if (ends_with(name, ".input_layernorm.weight") ||
        ends_with(name, ".post_attention_layernorm.weight") ||
        ends_with(name, ".self_attn.q_norm.weight") || ends_with(name, ".self_attn.k_norm.weight")) {
        *st = derive_f32(t, name, sink, 0);
        return true;
    }
    const bool fused_gu = ends_with(name, ".mlp.experts.gate_up_proj");
    if (fused_gu || ends_with(name, ".mlp.experts.down_proj")) {
        name[strlen(name) - strlen(fused_gu ? ".mlp.experts.gate_up_proj"
                                            : ".mlp.experts.down_proj")] = 0;
        *st = split_fused_experts(t, name, fused_gu, path, sink);
        return true;
    }
    *st = pg_tensor_sink_add(sink, t, name);
    return true;
}

static bool hf_rewrite(const pg_model_config *cfg, const char *path, const pg_tensor *t,
                       pg_tensor_sink *sink, pagoda_status *st) {
    const char *nm = t->name;
    if (!strncmp(nm, "mtp.", 4)) return mtp_rewrite(cfg, path, t, sink, st);
    if (!strncmp(nm, "model.visual.", 13) || !strncmp(nm, "visual.", 7))
        return true; /* the vision tower: out of scope, the text model loads */
    char name[320];
    bool renamed = false;
    if (!strncmp(nm, "model.language_model.", 21)) {
        snprintf(name, sizeof name, "model.%s", nm + 21);
        renamed = true;
    } else {
        snprintf(name, sizeof name, "%s", nm);
    }
    if (strncmp(name, "model.", 6) != 0) return false; /* lm_head, mtp.*: as they are */
    const bool layer = !strncmp(name, "model.layers.", 13);
    if ((layer && (ends_with(name, ".input_layernorm.weight") ||
                   ends_with(name, ".post_attention_layernorm.weight") ||
                   ends_with(name, ".self_attn.q_norm.weight") ||
                   ends_with(name, ".self_attn.k_norm.weight"))) ||
        !strcmp(name, "model.norm.weight")) {
        *st = derive_f32(t, name, sink, 0); /* Qwen3_5RMSNorm: x * (1 + w) */
        return true;
    }
    const bool fused_gu = layer && ends_with(name, ".mlp.experts.gate_up_proj");
    if (fused_gu || (layer && ends_with(name, ".mlp.experts.down_proj"))) {
        name[strlen(name) - strlen(fused_gu ? ".mlp.experts.gate_up_proj"
                                            : ".mlp.experts.down_proj")] = 0;
        *st = split_fused_experts(t, name, fused_gu, path, sink);
        return true;
    }
    if (layer && ends_with(name, ".linear_attn.A_log")) {
        snprintf(name + strlen(name) - 5, sizeof name - (strlen(name) - 5), "ssm_a");
        *st = derive_f32(t, name, sink, 1); /* ssm_a = -exp(A_log) */
        return true;
    }
    pg_tensor v = *t;
    if (layer && ends_with(name, ".linear_attn.conv1d.weight") && t->ndim == 3 && t->shape[1] == 1) {
        v.ndim = 2; /* [C, 1, K] -> [C, K], same bytes */
        v.shape[1] = t->shape[2];
        v.shape[2] = 1;
        renamed = true;
    }
    if (!renamed) return false;
    *st = pg_tensor_sink_add(sink, &v, name);
    return true;
}

/* ---- tensors (llama.cpp gguf-py names, LLM_ARCH_QWEN35 / QWEN35MOE) ---------------------- */

#define LAYER(hf, gg, d0, d1, req, lin) {hf, gg, d0, d1, req, true, lin, false}

static const pg_arch_tensor TENSORS[] = {
    {"model.embed_tokens.weight", "token_embd.weight", PG_DIM_VOCAB, PG_DIM_HIDDEN, PG_REQ_ALWAYS,
     false, false, false},
    {"model.norm.weight", "output_norm.weight", PG_DIM_HIDDEN, PG_DIM_NONE, PG_REQ_ALWAYS, false,
     false, false},
    {"lm_head.weight", "output.weight", PG_DIM_VOCAB, PG_DIM_HIDDEN, PG_REQ_UNLESS_TIED, false,
     true, false},
    LAYER("input_layernorm.weight", "attn_norm.weight", PG_DIM_HIDDEN, PG_DIM_NONE, PG_REQ_ALWAYS,
          false),
    LAYER("post_attention_layernorm.weight", "post_attention_norm.weight", PG_DIM_HIDDEN,
          PG_DIM_NONE, PG_REQ_ALWAYS, false),
    /* full attention */
    LAYER("self_attn.q_proj.weight", "attn_q.weight", PG_DIM_Q_GATE, PG_DIM_HIDDEN,
          PG_REQ_FULL_ATTN, true),
    LAYER("self_attn.k_proj.weight", "attn_k.weight", PG_DIM_KV, PG_DIM_HIDDEN, PG_REQ_FULL_ATTN,
          true),
    LAYER("self_attn.v_proj.weight", "attn_v.weight", PG_DIM_KV, PG_DIM_HIDDEN, PG_REQ_FULL_ATTN,
          true),
    LAYER("self_attn.o_proj.weight", "attn_output.weight", PG_DIM_HIDDEN, PG_DIM_Q,
          PG_REQ_FULL_ATTN, true),
    LAYER("self_attn.q_norm.weight", "attn_q_norm.weight", PG_DIM_HEAD, PG_DIM_NONE,
          PG_REQ_FULL_ATTN, false),
    LAYER("self_attn.k_norm.weight", "attn_k_norm.weight", PG_DIM_HEAD, PG_DIM_NONE,
          PG_REQ_FULL_ATTN, false),
    /* Gated DeltaNet */
    LAYER("linear_attn.in_proj_qkv.weight", "attn_qkv.weight", PG_DIM_LIN_CONV, PG_DIM_HIDDEN,
          PG_REQ_LINEAR_ATTN, true),
    LAYER("linear_attn.in_proj_z.weight", "attn_gate.weight", PG_DIM_LIN_V, PG_DIM_HIDDEN,
          PG_REQ_LINEAR_ATTN, true),
    LAYER("linear_attn.in_proj_b.weight", "ssm_beta.weight", PG_DIM_LIN_VHEADS, PG_DIM_HIDDEN,
          PG_REQ_LINEAR_ATTN, true),
    LAYER("linear_attn.in_proj_a.weight", "ssm_alpha.weight", PG_DIM_LIN_VHEADS, PG_DIM_HIDDEN,
          PG_REQ_LINEAR_ATTN, true),
    LAYER("linear_attn.conv1d.weight", "ssm_conv1d.weight", PG_DIM_LIN_CONV, PG_DIM_CONV_K,
          PG_REQ_LINEAR_ATTN, false),
    LAYER("linear_attn.dt_bias", "ssm_dt.bias", PG_DIM_LIN_VHEADS, PG_DIM_NONE,
          PG_REQ_LINEAR_ATTN, false),
    LAYER("linear_attn.ssm_a", "ssm_a", PG_DIM_LIN_VHEADS, PG_DIM_NONE, PG_REQ_LINEAR_ATTN, false),
    LAYER("linear_attn.norm.weight", "ssm_norm.weight", PG_DIM_LIN_DV, PG_DIM_NONE,
          PG_REQ_LINEAR_ATTN, false),
    LAYER("linear_attn.out_proj.weight", "ssm_out.weight", PG_DIM_HIDDEN, PG_DIM_LIN_V,
          PG_REQ_LINEAR_ATTN, true),
    /* dense MLP */
    LAYER("mlp.gate_proj.weight", "ffn_gate.weight", PG_DIM_FFN, PG_DIM_HIDDEN, PG_REQ_DENSE_MLP,
          true),
    LAYER("mlp.up_proj.weight", "ffn_up.weight", PG_DIM_FFN, PG_DIM_HIDDEN, PG_REQ_DENSE_MLP,
          true),
    LAYER("mlp.down_proj.weight", "ffn_down.weight", PG_DIM_HIDDEN, PG_DIM_FFN, PG_REQ_DENSE_MLP,
          true),
    {0},
};

static const pg_arch_tensor MOE_TENSORS[] = {
    LAYER("mlp.gate.weight", "ffn_gate_inp.weight", PG_DIM_EXPERTS, PG_DIM_HIDDEN, PG_REQ_MOE,
          true),
    {"gate_proj.weight", "ffn_gate_exps.weight", PG_DIM_MOE_FFN, PG_DIM_HIDDEN, PG_REQ_MOE, true,
     true, true},
    {"up_proj.weight", "ffn_up_exps.weight", PG_DIM_MOE_FFN, PG_DIM_HIDDEN, PG_REQ_MOE, true, true,
     true},
    {"down_proj.weight", "ffn_down_exps.weight", PG_DIM_HIDDEN, PG_DIM_MOE_FFN, PG_REQ_MOE, true,
     true, true},
    LAYER("mlp.shared_expert.gate_proj.weight", "ffn_gate_shexp.weight", PG_DIM_SHARED_FFN,
          PG_DIM_HIDDEN, PG_REQ_MOE_SHARED, true),
    LAYER("mlp.shared_expert.up_proj.weight", "ffn_up_shexp.weight", PG_DIM_SHARED_FFN,
          PG_DIM_HIDDEN, PG_REQ_MOE_SHARED, true),
    LAYER("mlp.shared_expert.down_proj.weight", "ffn_down_shexp.weight", PG_DIM_HIDDEN,
          PG_DIM_SHARED_FFN, PG_REQ_MOE_SHARED, true),
    LAYER("mlp.shared_expert_gate.weight", "ffn_gate_inp_shexp.weight", PG_DIM_ONE, PG_DIM_HIDDEN,
          PG_REQ_MOE_SHARED, false),
    {0},
};
static const pg_arch_tensor *const MOE_EXTRA[] = {MOE_TENSORS, NULL};

static const char *const HF_NAMES[] = {"Qwen3_5ForConditionalGeneration", "Qwen3_5ForCausalLM",
                                       NULL};
static const char *const TYPES[] = {"qwen3_5", "qwen3_5_text", NULL};

const pg_arch pg_arch_qwen3_5 = {
    .name = "qwen3_5",
    .hf_architectures = HF_NAMES,
    .hf_model_types = TYPES,
    .gguf_name = "qwen35",
    .gguf_rope_interleaved = false,
    .tensors = TENSORS,
    .parse_hf = parse_hf_common,
    .parse_gguf = parse_gguf,
    .hf_rewrite = hf_rewrite,
    .create = create_dense,
};

static const char *const MOE_HF_NAMES[] = {"Qwen3_5MoeForConditionalGeneration",
                                           "Qwen3_5MoeForCausalLM", NULL};
static const char *const MOE_TYPES[] = {"qwen3_5_moe", "qwen3_5_moe_text", NULL};

const pg_arch pg_arch_qwen3_5_moe = {
    .name = "qwen3_5_moe",
    .hf_architectures = MOE_HF_NAMES,
    .hf_model_types = MOE_TYPES,
    .gguf_name = "qwen35moe",
    .gguf_rope_interleaved = false,
    .tensors = TENSORS,
    .extra_tensors = MOE_EXTRA,
    .parse_hf = parse_hf_moe,
    .parse_gguf = parse_gguf,
    .hf_rewrite = hf_rewrite,
    .create = create_moe,
};
