/* Decoder blocks (see decoder.h). */
#include "model/decoder.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "base/pool.h"
#include "dist/comm.h"
#include "kernels/dispatch.h"
#include "kernels/ops.h"
#include "kernels/ref/ops_ref.h"

/* ---- weights ---------------------------------------------------------------------- */

/* Tensor parallelism (p->tp_size > 1): this rank's rows of a column-parallel
 * layer (q/k/v, gate/up: output features [rank * n / size, ...)) and its
 * columns of a row-parallel one (o_proj, down_proj: input features, the
 * bias kept by rank 0 only). The caller checked that n divides by size. */
static bool tp_on(const pg_linear_policy *p) {
    return p->tp_size > 1;
}

static pagoda_status tp_rows(const pg_linear_policy *p, pg_linear_src *s, const char *what) {
    if (!tp_on(p)) return PAGODA_OK;
    const int64_t n = s->n_out / p->tp_size;
    return pg_linear_src_rows(s, n * p->tp_rank, n, what);
}

static pagoda_status tp_cols(const pg_linear_policy *p, pg_linear_src *s, const char *what) {
    if (!tp_on(p)) return PAGODA_OK;
    const int64_t n = s->n_in / p->tp_size;
    return pg_linear_src_cols(p, s, n * p->tp_rank, n, p->tp_rank != 0, what);
}

pagoda_status pg_dec_attn_load(pg_weights *w, const pg_linear_policy *p, const pg_model_config *c,
                               int l, unsigned flags, int32_t window, pg_dec_attn *a) {
    memset(a, 0, sizeof *a);
    const int64_t H = c->hidden_size, hd = c->head_dim;
    const int64_t nq = (int64_t)c->num_attention_heads * hd,
                  nkv = (int64_t)c->num_key_value_heads * hd;
    const int64_t nq_rows = (flags & PG_DEC_ATTN_GATE) ? 2 * nq : nq;
    const char *pre = "model.layers";
    pg_linear_src q, k, v, o;
    pagoda_status st;
    if ((st = pg_weights_vector(w, H, false, &a->norm, "%s.%d.input_layernorm.weight", pre, l)) ||
        (st = pg_weights_linear(w, nq_rows, H, c->attention_bias, &q, "%s.%d.self_attn.q_proj",
                                pre, l)) ||
        (st = pg_weights_linear(w, nkv, H, c->attention_bias, &k, "%s.%d.self_attn.k_proj", pre,
                                l)) ||
        (st = pg_weights_linear(w, nkv, H, c->attention_bias, &v, "%s.%d.self_attn.v_proj", pre,
                                l)) ||
        (st = pg_weights_linear(w, H, nq, false, &o, "%s.%d.self_attn.o_proj", pre, l)) ||
        (st = pg_weights_vector(w, H, true, &o.bias, "%s.%d.self_attn.o_proj.bias", pre, l)))
        return st;
    if (c->attention_sinks &&
        (st = pg_weights_vector(w, c->num_attention_heads, false, &a->ap.sinks,
                                "%s.%d.self_attn.sinks", pre, l)))
        return st;
    if ((flags & PG_DEC_QK_NORM) &&
        ((st = pg_weights_vector(w, hd, false, &a->q_norm, "%s.%d.self_attn.q_norm.weight", pre,
                                 l)) ||
         (st = pg_weights_vector(w, hd, false, &a->k_norm, "%s.%d.self_attn.k_norm.weight", pre,
                                 l))))
        return st;
    const pg_linear_src *qkv[3] = {&q, &k, &v}, *op = &o;
    char what[2][48];
    snprintf(what[0], sizeof what[0], "layer %d q/k/v_proj", l);
    snprintf(what[1], sizeof what[1], "layer %d o_proj", l);
    /* tensor parallelism: this rank's query heads and KV heads, the matching
     * o_proj columns; the sinks of its heads */
    const int32_t R = tp_on(p) ? p->tp_size : 1;
    if ((st = tp_rows(p, &q, what[0])) || (st = tp_rows(p, &k, what[0])) ||
        (st = tp_rows(p, &v, what[0])) || (st = tp_cols(p, &o, what[1])))
        return st;
    if (a->ap.sinks && R > 1) a->ap.sinks += p->tp_rank * (c->num_attention_heads / R);
    st = pg_linear_pack(p, qkv, 3, true, what[0], &a->qkv);
    if (st == PAGODA_OK) st = pg_linear_pack(p, &op, 1, true, what[1], &a->o);
    pg_linear_src_release(&o);
    if (st != PAGODA_OK) {
        pg_dec_attn_free(a);
        return st;
    }
    /* YaRN scales cos and sin by its attention factor m, i.e. q.k by m^2 */
    double m = 1.0;
    if (c->rope_scaling == PG_ROPE_SCALING_YARN)
        m = c->rope_attention_factor > 0.0f ? c->rope_attention_factor
                                            : pg_rope_yarn_attention_factor(c->rope_factor);
    a->out_gate = (flags & PG_DEC_ATTN_GATE) != 0;
    const float *sinks = a->ap.sinks;
    a->ap = (pg_attn_params){.n_heads = c->num_attention_heads / R,
                             .n_kv_heads = c->num_key_value_heads / R,
                             .head_dim = c->head_dim,
                             .scale = (float)(m * m / sqrt((double)c->head_dim)),
                             .sliding_window = window,
                             .sinks = sinks};
    return PAGODA_OK;
}

pagoda_status pg_dec_mlp_load(pg_weights *w, const pg_linear_policy *p, const pg_model_config *c,
                              int l, pg_dec_mlp *f) {
    memset(f, 0, sizeof *f);
    const int64_t H = c->hidden_size, I = c->intermediate_size;
    const char *pre = "model.layers";
    pg_linear_src g, u, d;
    pagoda_status st;
    if ((st = pg_weights_vector(w, H, false, &f->norm, "%s.%d.post_attention_layernorm.weight", pre,
                                l)) ||
        (st = pg_weights_linear(w, I, H, false, &g, "%s.%d.mlp.gate_proj", pre, l)) ||
        (st = pg_weights_linear(w, I, H, false, &u, "%s.%d.mlp.up_proj", pre, l)) ||
        (st = pg_weights_linear(w, H, I, false, &d, "%s.%d.mlp.down_proj", pre, l)))
        return st;
    const pg_linear_src *dp = &d;
    char what[2][48];
    snprintf(what[0], sizeof what[0], "layer %d gate/up_proj", l);
    snprintf(what[1], sizeof what[1], "layer %d down_proj", l);
    if ((st = tp_rows(p, &g, what[0])) || (st = tp_rows(p, &u, what[0])) ||
        (st = tp_cols(p, &d, what[1])))
        return st;
    st = pg_linear_pack_swiglu(p, &g, &u, what[0], &f->gate_up);
    if (st == PAGODA_OK) st = pg_linear_pack(p, &dp, 1, true, what[1], &f->down);
    pg_linear_src_release(&d);
    if (st != PAGODA_OK) {
        pg_dec_mlp_free(f);
        return st;
    }
    return PAGODA_OK;
}

pagoda_status pg_dec_moe_load(pg_weights *w, const pg_linear_policy *p, const pg_model_config *c,
                              int l, unsigned flags, pg_dec_moe *f) {
    memset(f, 0, sizeof *f);
    const int64_t H = c->hidden_size, I = c->moe_intermediate_size, E = c->num_experts;
    const char *pre = "model.layers";
    if (E < 1 || c->num_experts_per_tok < 1 || c->num_experts_per_tok > E || I < 1)
        return pg_error(PAGODA_ERR_FORMAT,
                        "%s: bad MoE config (num_experts %d, num_experts_per_tok %d, "
                        "moe_intermediate_size %d)",
                        pg_model_source_path(w->src), c->num_experts, c->num_experts_per_tok,
                        c->moe_intermediate_size);
    f->n_experts = (int32_t)E;
    f->top_k = c->num_experts_per_tok;
    f->norm_topk = c->norm_topk_prob;
    f->topk_softmax = c->moe_topk_softmax;
    f->swiglu_limit = c->swiglu_limit;
    const bool oai = (flags & PG_DEC_MOE_OAI) != 0; /* biases everywhere */
    pg_linear_src r;
    pagoda_status st;
    if ((st = pg_weights_vector(w, H, false, &f->norm, "%s.%d.post_attention_layernorm.weight", pre,
                                l)) ||
        (st = pg_weights_linear(w, E, H, oai, &r, oai ? "%s.%d.mlp.router" : "%s.%d.mlp.gate", pre,
                                l)))
        return st;
    f->gate_up = calloc((size_t)E, sizeof *f->gate_up);
    f->down = calloc((size_t)E, sizeof *f->down);
    if (!f->gate_up || !f->down) {
        pg_dec_moe_free(f);
        return pg_error(PAGODA_ERR_NOMEM, "model: out of memory");
    }
    /* the router stays F32 whatever the policy (transformers computes the
     * routing in float32; a rounded logit can flip a top-k choice) */
    pg_linear_policy rp = *p;
    rp.compute = PG_F32;
    rp.bits = 0;
    const pg_linear_src *rr[2] = {&r, NULL};
    pg_linear_src sg = {0};
    char what[64];
    f->shared = (flags & PG_DEC_MOE_SHARED) != 0;
    if (f->shared && tp_on(p)) {
        pg_dec_moe_free(f);
        return pg_error(PAGODA_ERR_UNSUPPORTED,
                        "%s: MoE with a shared expert is not supported under tensor parallelism",
                        pg_model_source_path(w->src));
    }
    if (f->shared) {
        const int64_t Is = c->shared_expert_intermediate_size;
        const pg_tensor *gt;
        pg_linear_src g, u, d;
        const pg_linear_src *dp = &d;
        if ((st = pg_weights_tensor(w, 1, H, false, &gt, "%s.%d.mlp.shared_expert_gate.weight",
                                    pre, l)) ||
            (st = pg_weights_linear(w, Is, H, false, &g, "%s.%d.mlp.shared_expert.gate_proj", pre,
                                    l)) ||
            (st = pg_weights_linear(w, Is, H, false, &u, "%s.%d.mlp.shared_expert.up_proj", pre,
                                    l)) ||
            (st = pg_weights_linear(w, H, Is, false, &d, "%s.%d.mlp.shared_expert.down_proj", pre,
                                    l))) {
            pg_dec_moe_free(f);
            return st;
        }
        sg = (pg_linear_src){.w = gt->data, .dtype = gt->dtype, .n_out = 1, .n_in = H};
        rr[1] = &sg;
        snprintf(what, sizeof what, "layer %d shared expert gate/up_proj", l);
        if (!(st = pg_linear_pack_swiglu(p, &g, &u, what, &f->sh_gate_up))) {
            snprintf(what, sizeof what, "layer %d shared expert down_proj", l);
            st = pg_linear_pack(p, &dp, 1, true, what, &f->sh_down);
        }
        if (st) {
            pg_dec_moe_free(f);
            return st;
        }
    }
    snprintf(what, sizeof what, "layer %d router", l);
    if ((st = pg_linear_pack(&rp, rr, f->shared ? 2 : 1, false, what, &f->router))) {
        pg_dec_moe_free(f);
        return st;
    }
    for (int64_t e = 0; e < E && st == PAGODA_OK; e++) {
        pg_linear_src g, u, d;
        const pg_linear_src *dp = &d;
        const char *ex = "mlp.experts";
        long long ee = (long long)e;
        if ((st = pg_weights_linear(w, I, H, oai, &g, "%s.%d.%s.%lld.gate_proj", pre, l, ex, ee)) ||
            (st = pg_weights_linear(w, I, H, oai, &u, "%s.%d.%s.%lld.up_proj", pre, l, ex, ee)) ||
            (st = pg_weights_linear(w, H, I, oai, &d, "%s.%d.%s.%lld.down_proj", pre, l, ex, ee)))
            break;
        /* tensor parallelism: every rank keeps its slice of every expert's
         * intermediate dimension (balanced whatever the routing) */
        snprintf(what, sizeof what, "layer %d expert %lld gate/up_proj", l, ee);
        if ((st = tp_rows(p, &g, what)) || (st = tp_rows(p, &u, what)) ||
            (st = pg_linear_pack_swiglu(p, &g, &u, what, &f->gate_up[e])))
            break;
        snprintf(what, sizeof what, "layer %d expert %lld down_proj", l, ee);
        if ((st = tp_cols(p, &d, what))) break;
        st = pg_linear_pack(p, &dp, 1, true, what, &f->down[e]);
        pg_linear_src_release(&d);
    }
    if (st != PAGODA_OK) pg_dec_moe_free(f);
    return st;
}

size_t pg_dec_moe_scratch_bytes(const pg_dec_moe *f, int64_t max_tokens, int nt) {
    size_t need = 0;
    const int64_t rows = max_tokens * f->top_k;
    for (int32_t e = 0; e < f->n_experts; e++) {
        const pg_linear *ls[2] = {&f->gate_up[e], &f->down[e]};
        for (int i = 0; i < 2; i++) {
            size_t s = pg_gemm_grouped_scratch_size(ls[i]->part[0], rows, f->n_experts, nt);
            if (s > need) need = s;
        }
    }
    return need;
}

void pg_dec_moe_free(pg_dec_moe *f) {
    pg_linear_free(&f->router);
    pg_linear_free(&f->sh_gate_up);
    pg_linear_free(&f->sh_down);
    for (int32_t e = 0; f->gate_up && e < f->n_experts; e++)
        pg_linear_free(&f->gate_up[e]);
    for (int32_t e = 0; f->down && e < f->n_experts; e++)
        pg_linear_free(&f->down[e]);
    free(f->gate_up);
    free(f->down);
    f->gate_up = f->down = NULL;
}

void pg_dec_attn_free(pg_dec_attn *a) {
    pg_linear_free(&a->qkv);
    pg_linear_free(&a->o);
}

void pg_dec_mlp_free(pg_dec_mlp *f) {
    pg_linear_free(&f->gate_up);
    pg_linear_free(&f->down);
}

pagoda_status pg_dec_check_config(const pg_model_source *src, const pg_model_config *c) {
    const char *path = pg_model_source_path(src);
    if (c->vocab_size <= 0 || c->hidden_size <= 0 || c->intermediate_size <= 0 ||
        c->num_hidden_layers <= 0 || c->num_attention_heads <= 0 || c->num_key_value_heads <= 0 ||
        c->head_dim <= 0 || c->head_dim % 2 != 0)
        return pg_error(PAGODA_ERR_FORMAT,
                        "%s: bad config (vocab %d, hidden %d, intermediate %d, layers %d, heads "
                        "%d, kv heads %d, head_dim %d)",
                        path, c->vocab_size, c->hidden_size, c->intermediate_size,
                        c->num_hidden_layers, c->num_attention_heads, c->num_key_value_heads,
                        c->head_dim);
    if (c->num_attention_heads % c->num_key_value_heads != 0)
        return pg_error(PAGODA_ERR_FORMAT,
                        "%s: num_attention_heads %d is not a multiple of num_key_value_heads %d",
                        path, c->num_attention_heads, c->num_key_value_heads);
    if (!(c->rms_norm_eps > 0.0f))
        return pg_error(PAGODA_ERR_FORMAT, "%s: rms_norm_eps %g must be > 0", path,
                        (double)c->rms_norm_eps);
    if (c->hidden_act[0] && strcmp(c->hidden_act, "silu") != 0)
        return pg_error(PAGODA_ERR_UNSUPPORTED,
                        "%s: hidden_act '%s' is not supported for %s (its MLP is SwiGLU: silu)",
                        path, c->hidden_act, c->architecture);
    return PAGODA_OK;
}

pagoda_status pg_dec_rope_init(const pg_model_source *src, const pg_model_config *c, float **out) {
    *out = NULL;
    const int rot = c->rotary_dim > 0 ? c->rotary_dim : c->head_dim; /* partial RoPE */
    pg_rope_freq_params p = {.head_dim = rot, .theta = c->rope_theta};
    if (c->rope_scaling == PG_ROPE_SCALING_LINEAR) {
        p.scaling = PG_ROPE_FREQ_LINEAR;
        p.factor = c->rope_factor;
    } else if (c->rope_scaling == PG_ROPE_SCALING_LLAMA3) {
        p.scaling = PG_ROPE_FREQ_LLAMA3;
        p.factor = c->rope_factor;
        p.low_freq_factor = c->rope_low_freq_factor;
        p.high_freq_factor = c->rope_high_freq_factor;
        p.original_max_position = c->rope_original_max_position;
    } else if (c->rope_scaling == PG_ROPE_SCALING_YARN) {
        p.scaling = PG_ROPE_FREQ_YARN;
        p.factor = c->rope_factor;
        p.original_max_position = c->rope_original_max_position;
        p.beta_fast = c->rope_beta_fast > 0.0f ? c->rope_beta_fast : 32.0;
        p.beta_slow = c->rope_beta_slow > 0.0f ? c->rope_beta_slow : 1.0;
        p.truncate = c->rope_truncate;
    }
    int half = rot / 2;
    float *inv = pg_malloc_aligned((size_t)half * sizeof(float));
    if (!inv) return pg_error(PAGODA_ERR_NOMEM, "model: out of memory");
    pagoda_status st = pg_rope_inv_freq(&p, inv);
    const pg_tensor *rf = pg_model_source_tensor(src, "rope_freqs.weight");
    if (st == PAGODA_OK && c->rope_scaling == PG_ROPE_SCALING_NONE && rf) {
        /* llama.cpp's GGUF form of Llama-3 scaling: frequency i divided by rope_freqs[i] */
        if (rf->ndim != 1 || rf->shape[0] != half || !pg_matmul_supports(rf->dtype)) {
            st = pg_error(PAGODA_ERR_FORMAT, "%s: rope_freqs.weight must be [%d] floats",
                          pg_model_source_path(src), half);
        } else {
            float *factors = malloc((size_t)half * sizeof(float));
            if (!factors) st = pg_error(PAGODA_ERR_NOMEM, "model: out of memory");
            if (factors) pg_dequant_row(rf->dtype, rf->data, factors, (size_t)half);
            for (int i = 0; factors && i < half && st == PAGODA_OK; i++) {
                if (!(factors[i] > 0.0f))
                    st = pg_error(PAGODA_ERR_FORMAT, "%s: rope_freqs.weight[%d] = %g must be > 0",
                                  pg_model_source_path(src), i, (double)factors[i]);
                else
                    inv[i] /= factors[i];
            }
            free(factors);
        }
    }
    if (st != PAGODA_OK) {
        pg_free(inv);
        return st;
    }
    *out = inv;
    return PAGODA_OK;
}

/* ---- workspace ---------------------------------------------------------------------- */

/* Attention scratch for the worst step: the most work units (every token its
 * own request) without split-KV, or the fewest (decodes of max_model_len
 * tokens) with split-KV partials. A step needing more runs without
 * split-KV (pg_attention's documented fallback), never fails. */
static size_t attn_need(const pg_dec_dims *d, const pg_step_limits *lim, int nt) {
    pg_attn_params p = {
        .n_heads = d->n_heads, .n_kv_heads = d->n_kv_heads, .head_dim = d->head_dim, .scale = 1.0f};
    pg_paged_kv kv = {.dtype = lim->kv_dtype,
                      .num_blocks = 1,
                      .num_kv_heads = d->n_kv_heads,
                      .block_size = lim->block_size,
                      .head_dim = d->head_dim};
    int32_t T = lim->max_tokens, S = lim->max_seqs;
    int32_t n = T > S ? T : S;
    int32_t *cu = malloc((size_t)(n + 1) * sizeof(int32_t)), *lens = malloc((size_t)n * 4);
    size_t best = 0;
    if (cu && lens) {
        for (int32_t i = 0; i <= T; i++)
            cu[i] = i;
        for (int32_t i = 0; i < T; i++)
            lens[i] = 1;
        pg_attn_batch b = {.n_seqs = T, .cu_seqlens_q = cu, .seq_lens = lens};
        best = pg_attention_scratch_bytes(&p, &b, &kv, nt);
        for (int32_t s = 1; s <= S && s <= 8 * nt; s++) {
            for (int32_t i = 0; i <= s; i++)
                cu[i] = i;
            for (int32_t i = 0; i < s; i++)
                lens[i] = lim->max_model_len;
            b = (pg_attn_batch){.n_seqs = s, .cu_seqlens_q = cu, .seq_lens = lens};
            size_t need = pg_attention_scratch_bytes(&p, &b, &kv, nt);
            if (need > best) best = need;
        }
    }
    free(cu);
    free(lens);
    return best;
}

pagoda_status pg_dec_ws_create(const pg_dec_dims *d, const pg_step_limits *lim,
                               const pg_linear *const *ls, int n, int n_head, pg_dec_ws **out) {
    *out = NULL;
    if (lim->max_tokens < 1 || lim->max_seqs < 1 || lim->max_model_len < 1 || lim->block_size < 1)
        return pg_error(PAGODA_ERR_INVALID_ARG,
                        "model: bad workspace sizes (%d tokens, %d seqs, max_model_len %d, block "
                        "size %d)",
                        lim->max_tokens, lim->max_seqs, lim->max_model_len, lim->block_size);
    pg_dec_ws *ws = calloc(1, sizeof *ws);
    if (!ws) return pg_error(PAGODA_ERR_NOMEM, "model: out of memory");
    ws->max_tokens = lim->max_tokens;
    ws->max_seqs = lim->max_seqs;
    pg_pool *pool = pg_pool_default();
    int nt = pool ? pg_pool_size(pool) : 1;
    size_t gs = 0;
    for (int i = 0; i < n; i++) {
        if (!ls[i]) continue;
        size_t need =
            pg_linear_scratch_bytes(ls[i], i >= n - n_head ? lim->max_seqs : lim->max_tokens, nt);
        if (need > gs) gs = need;
    }
    if (d->gemm_scratch_min > gs) gs = d->gemm_scratch_min;
    ws->gemm_scratch_bytes = gs;
    if (d->n_heads > 0) {
        ws->attn_scratch_bytes = attn_need(d, lim, nt);
        if (ws->attn_scratch_bytes == 0) {
            free(ws);
            return pg_error(PAGODA_ERR_INVALID_ARG, "model: KV cache layout rejected by attention");
        }
    }
    size_t T = (size_t)lim->max_tokens;
    const size_t E = d->moe_experts > 0 ? (size_t)d->moe_experts : 0;
    const size_t TK = E ? T * (size_t)d->moe_top_k : 0;
    size_t sizes[] = {T * (size_t)d->hidden * 4,
                      T * (size_t)d->hidden * 4,
                      T * (size_t)d->qkv_width * 4,
                      T * (size_t)d->attn_width * 4,
                      T * (size_t)d->act_width * 4,
                      (size_t)lim->max_seqs * (size_t)d->hidden * 4,
                      ws->gemm_scratch_bytes,
                      ws->attn_scratch_bytes,
                      T * (E ? E + 1 : 0) * 4,
                      TK * 4,
                      TK * 4,
                      TK * 4,
                      E ? (E + 1) * 4 : 0,
                      TK * 4,
                      E * sizeof(pg_gemm_problem),
                      TK * (size_t)d->moe_ffn * 4,
                      TK * (size_t)d->hidden * 4};
    void **bufs[] = {(void **)&ws->x,       (void **)&ws->xb,     (void **)&ws->qkv,
                     (void **)&ws->attn,    (void **)&ws->act,    (void **)&ws->last,
                     &ws->gemm_scratch,     &ws->attn_scratch,    (void **)&ws->moe_logits,
                     (void **)&ws->moe_sel, (void **)&ws->moe_w,  (void **)&ws->moe_slot,
                     (void **)&ws->moe_off, (void **)&ws->moe_rows, (void **)&ws->moe_prob, (void **)&ws->moe_act,
                     (void **)&ws->moe_out};
    size_t total = 0;
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
        total += (sizes[i] + PG_ALIGN - 1) / PG_ALIGN * PG_ALIGN + PG_ALIGN;
    pagoda_status st = pg_arena_init(&ws->arena, total);
    if (st != PAGODA_OK) {
        free(ws);
        return st;
    }
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
        *bufs[i] = sizes[i] ? pg_arena_alloc(&ws->arena, sizes[i]) : NULL;
    *out = ws;
    return PAGODA_OK;
}

void pg_dec_ws_free(void *p) {
    pg_dec_ws *ws = p;
    if (!ws) return;
    pg_arena_free(&ws->arena);
    free(ws);
}

size_t pg_dec_ws_bytes(const void *p) {
    const pg_dec_ws *ws = p;
    return ws ? ws->arena.cap : 0;
}

pagoda_status pg_dec_check_batch(const pg_dec_ws *ws, const pg_batch *b, int32_t vocab) {
    if (b->num_tokens < 1 || b->num_tokens > ws->max_tokens || b->num_seqs < 1 ||
        b->num_seqs > ws->max_seqs || b->num_logits < 0 || b->num_logits > ws->max_seqs)
        return pg_error(PAGODA_ERR_INVALID_ARG,
                        "model: step of %d tokens / %d requests / %d logit rows exceeds the "
                        "workspace (%d tokens, %d requests)",
                        b->num_tokens, b->num_seqs, b->num_logits, ws->max_tokens, ws->max_seqs);
    if (!b->layers) return pg_error(PAGODA_ERR_INVALID_ARG, "model: step without layer caches");
    for (int32_t i = 0; i < b->num_tokens; i++)
        if (b->token_ids[i] < 0 || b->token_ids[i] >= vocab)
            return pg_error(PAGODA_ERR_INVALID_ARG, "model: token id %d outside the vocab [0, %d)",
                            b->token_ids[i], vocab);
    for (int32_t i = 0; i < b->num_logits; i++)
        if (b->logit_rows[i] < 0 || b->logit_rows[i] >= b->num_tokens)
            return pg_error(PAGODA_ERR_INVALID_ARG, "model: logit row %d outside the step",
                            b->logit_rows[i]);
    return PAGODA_OK;
}

/* ---- blocks ----------------------------------------------------------------------------- */

/* Tensor parallelism: before a row-parallel layer adds its partial output
 * into the residual x [T, H], ranks other than 0 clear x (rank 0 keeps the
 * residual and adds the bias), so the all-reduce after it sums x + p_0 +
 * p_1 + ... in rank order, the same bits on every rank (comm.h). */
static void tp_partial_begin(const pg_dec_ws *ws, int64_t T, size_t H) {
    if (ws->tp_size > 1 && ws->tp_rank != 0) memset(ws->x, 0, (size_t)T * H * sizeof(float));
}

static pagoda_status tp_reduce(const pg_dec_ws *ws, int64_t T, size_t H) {
    if (ws->tp_size <= 1) return PAGODA_OK;
    return pg_comm_allreduce_sum_f32(ws->comm, ws->x, (size_t)T * H);
}

void pg_dec_embed(const pg_tensor *e, const pg_batch *b, pg_dec_ws *ws) {
    size_t H = (size_t)e->shape[1];
    size_t row_bytes = pg_dtype_row_bytes(e->dtype, H);
    for (int32_t i = 0; i < b->num_tokens; i++)
        pg_dequant_row(e->dtype, (const uint8_t *)e->data + (size_t)b->token_ids[i] * row_bytes,
                       ws->x + (size_t)i * H, H);
}

/* Per-head RMSNorm of q and k (Qwen3: before RoPE), rows split over tokens. */
typedef struct qk_norm_job {
    const pg_dec_attn *a;
    float *qkv;
    size_t ld;
    float eps;
    const pg_kernel_table *kt;
} qk_norm_job;

static void qk_norm_rows(void *ctx, size_t begin, size_t end, int tid) {
    (void)tid;
    const qk_norm_job *j = ctx;
    const size_t hd = (size_t)j->a->ap.head_dim;
    const size_t nq = (size_t)j->a->ap.n_heads * hd * (j->a->out_gate ? 2 : 1);
    for (size_t t = begin; t < end; t++) {
        float *q = j->qkv + t * j->ld, *k = q + nq;
        j->kt->rmsnorm_f32(q, q, j->a->q_norm, (size_t)j->a->ap.n_heads, hd, j->eps);
        j->kt->rmsnorm_f32(k, k, j->a->k_norm, (size_t)j->a->ap.n_kv_heads, hd, j->eps);
    }
}

/* Gated attention: q_proj's row [q_0 g_0 q_1 g_1 ...] (hd each) becomes
 * [q_0 q_1 ... | g_0 g_1 ...] in place (the attention output rows, not yet
 * written, hold the gates meanwhile); after attention, out *= sigmoid(g). */
typedef struct gate_job {
    const pg_dec_attn *a;
    float *qkv, *attn;
    size_t ld;
} gate_job;

static void gate_split_rows(void *ctx, size_t begin, size_t end, int tid) {
    (void)tid;
    const gate_job *j = ctx;
    const size_t hd = (size_t)j->a->ap.head_dim, H = (size_t)j->a->ap.n_heads, nq = H * hd;
    for (size_t t = begin; t < end; t++) {
        float *row = j->qkv + t * j->ld, *tmp = j->attn + t * nq;
        for (size_t h = 0; h < H; h++)
            memcpy(tmp + h * hd, row + (2 * h + 1) * hd, hd * sizeof(float));
        for (size_t h = 1; h < H; h++)
            memmove(row + h * hd, row + 2 * h * hd, hd * sizeof(float));
        memcpy(row + nq, tmp, nq * sizeof(float));
    }
}

static void gate_apply_rows(void *ctx, size_t begin, size_t end, int tid) {
    (void)tid;
    const gate_job *j = ctx;
    const size_t nq = (size_t)j->a->ap.n_heads * (size_t)j->a->ap.head_dim;
    for (size_t t = begin; t < end; t++) {
        const float *g = j->qkv + t * j->ld + nq;
        float *o = j->attn + t * nq;
        for (size_t i = 0; i < nq; i++)
            o[i] *= 1.0f / (1.0f + expf(-g[i]));
    }
}

pagoda_status pg_dec_attn_forward(const pg_dec_attn *a, const pg_rope_spec *rope, float eps,
                                  const pg_batch *b, const pg_layer_cache *lc, pg_dec_ws *ws) {
    if (!lc->kv || !lc->slot_mapping || !lc->block_tables)
        return pg_error(PAGODA_ERR_INVALID_ARG, "model: attention layer without a paged KV cache");
    pg_pool *pool = pg_pool_default();
    const int64_t T = b->num_tokens;
    const size_t hd = (size_t)a->ap.head_dim;
    const size_t nq = (size_t)a->ap.n_heads * hd, nkv = (size_t)a->ap.n_kv_heads * hd;
    const size_t ld = (size_t)a->qkv.n_out;
    pagoda_status st =
        pg_linear_forward_rmsnorm(&a->qkv, ws->x, T, a->norm, eps, ws->xb, ws->qkv, (int64_t)ld,
                                  PG_GEMM_STORE, pool, ws->gemm_scratch);
    if (st != PAGODA_OK) return st;
    const size_t kofs = a->out_gate ? 2 * nq : nq;
    float *q = ws->qkv, *k = ws->qkv + kofs, *v = ws->qkv + kofs + nkv;
    gate_job gj = {a, ws->qkv, ws->attn, ld};
    if (a->out_gate) {
        if (pool && (size_t)T * nq >= 65536)
            pg_pool_parallel_for(pool, (size_t)T, 16, gate_split_rows, &gj);
        else
            gate_split_rows(&gj, 0, (size_t)T, 0);
    }
    if (a->q_norm) {
        qk_norm_job j = {a, ws->qkv, ld, eps, pg_kernels()};
        if (pool && (size_t)T * (nq + nkv) >= 65536)
            pg_pool_parallel_for(pool, (size_t)T, 16, qk_norm_rows, &j);
        else
            qk_norm_rows(&j, 0, (size_t)T, 0);
    }
    if ((st = pg_rope_kv_store(rope, (int32_t)T, b->positions, lc->slot_mapping, q, ld,
                               a->ap.n_heads, k, ld, v, ld, lc->kv)) != PAGODA_OK)
        return st;
    pg_attn_batch ab = {.n_seqs = b->num_seqs,
                        .cu_seqlens_q = b->query_start_loc,
                        .seq_lens = b->seq_lens,
                        .block_tables = lc->block_tables};
    if ((st = pg_attention(&a->ap, &ab, lc->kv, q, ld, ws->attn, nq, ws->attn_scratch,
                           ws->attn_scratch_bytes, pool, NULL)) != PAGODA_OK)
        return st;
    if (a->out_gate) {
        if (pool && (size_t)T * nq >= 65536)
            pg_pool_parallel_for(pool, (size_t)T, 16, gate_apply_rows, &gj);
        else
            gate_apply_rows(&gj, 0, (size_t)T, 0);
    }
    tp_partial_begin(ws, T, (size_t)a->o.n_out);
    if ((st = pg_linear_forward(&a->o, ws->attn, T, ws->x, a->o.n_out, PG_GEMM_RESIDUAL, pool,
                                ws->gemm_scratch)))
        return st;
    return tp_reduce(ws, T, (size_t)a->o.n_out);
}

pagoda_status pg_dec_mlp_forward(const pg_dec_mlp *f, float eps, const pg_batch *b, pg_dec_ws *ws) {
    pg_pool *pool = pg_pool_default();
    const int64_t T = b->num_tokens;
    pagoda_status st =
        pg_linear_forward_rmsnorm(&f->gate_up, ws->x, T, f->norm, eps, ws->xb, ws->act,
                                  f->gate_up.n_out, PG_GEMM_SWIGLU, pool, ws->gemm_scratch);
    if (st != PAGODA_OK) return st;
    tp_partial_begin(ws, T, (size_t)f->down.n_out);
    if ((st = pg_linear_forward(&f->down, ws->act, T, ws->x, f->down.n_out, PG_GEMM_RESIDUAL, pool,
                                ws->gemm_scratch)))
        return st;
    return tp_reduce(ws, T, (size_t)f->down.n_out);
}

/* Routing of tokens [begin, end): softmax over the experts (f32, the
 * dispatch table's vector exp), the top-k by probability (ties: lower
 * index), renormalised when asked. */
typedef struct route_job {
    const pg_dec_moe *f;
    pg_dec_ws *ws;
    const pg_kernel_table *kt;
} route_job;

static void route_rows(void *ctx, size_t begin, size_t end, int tid) {
    (void)tid;
    const route_job *j = ctx;
    const int32_t E = j->f->n_experts, K = j->f->top_k;
    const size_t ld = (size_t)j->f->router.n_out; /* E, or E + 1 with the shared gate */
    for (size_t t = begin; t < end; t++) {
        float *p = j->ws->moe_logits + t * ld;
        /* Qwen3-MoE: probabilities first, top-k of them; GPT-OSS: top-k of
         * the logits, then the softmax over those k (same selection: the
         * softmax is monotonic; ties to the lower index either way) */
        if (!j->f->topk_softmax) j->kt->softmax_f32(p, (size_t)E);
        int32_t *sel = j->ws->moe_sel + t * (size_t)K;
        float *w = j->ws->moe_w + t * (size_t)K;
        float sum = 0.0f;
        for (int32_t k = 0; k < K; k++) {
            int32_t best = -1;
            for (int32_t e = 0; e < E; e++) {
                bool taken = false;
                for (int32_t q = 0; q < k; q++)
                    taken |= sel[q] == e;
                if (!taken && (best < 0 || p[e] > p[best])) best = e;
            }
            sel[k] = best;
            w[k] = p[best];
            sum += p[best];
        }
        if (j->f->topk_softmax)
            pg_ref_softmax(w, (size_t)K);
        else if (j->f->norm_topk)
            for (int32_t k = 0; k < K; k++)
                w[k] /= sum;
    }
}

typedef struct {
    pg_dec_ws *ws;
    int32_t K;
    size_t H;
} combine_job;

static void combine_rows(void *ctx, size_t begin, size_t end, int tid) {
    (void)tid;
    const combine_job *j = ctx;
    const pg_dec_ws *ws = j->ws;
    for (size_t t = begin; t < end; t++) {
        float *x = ws->x + t * j->H;
        for (int32_t k = 0; k < j->K; k++) {
            const float w = ws->moe_w[t * (size_t)j->K + (size_t)k];
            const float *o = ws->moe_out + (size_t)ws->moe_slot[t * (size_t)j->K + (size_t)k] * j->H;
            for (size_t i = 0; i < j->H; i++)
                x[i] += w * o[i];
        }
    }
}

pagoda_status pg_dec_moe_forward(const pg_dec_moe *f, float eps, const pg_batch *b, pg_dec_ws *ws) {
    pg_pool *pool = pg_pool_default();
    const int64_t T = b->num_tokens;
    const int32_t E = f->n_experts, K = f->top_k;
    const size_t H = (size_t)f->router.n_in;
    if (!ws->moe_logits)
        return pg_error(PAGODA_ERR_INVALID_ARG, "model: MoE layer in a workspace without MoE");
    /* h = RMSNorm(x) into xb (the router is F32: never the fused input stage) */
    pagoda_status st =
        pg_linear_forward_rmsnorm(&f->router, ws->x, T, f->norm, eps, ws->xb, ws->moe_logits,
                                  f->router.n_out, PG_GEMM_STORE, pool, ws->gemm_scratch);
    if (st != PAGODA_OK) return st;
    route_job rj = {f, ws, pg_kernels()};
    if (pool && (size_t)T * (size_t)E >= 65536)
        pg_pool_parallel_for(pool, (size_t)T, 16, route_rows, &rj);
    else
        route_rows(&rj, 0, (size_t)T, 0);
    /* counting sort of the (token, rank) slots by expert, token order kept */
    int32_t *off = ws->moe_off;
    memset(off, 0, (size_t)(E + 1) * sizeof *off);
    for (int64_t i = 0; i < T * K; i++)
        off[ws->moe_sel[i] + 1]++;
    for (int32_t e = 0; e < E; e++)
        off[e + 1] += off[e];
    for (int64_t i = 0; i < T * K; i++) {
        int32_t pos = off[ws->moe_sel[i]]++;
        ws->moe_slot[i] = pos;
        ws->moe_rows[pos] = (int32_t)(i / K);
    }
    for (int32_t e = E; e > 0; e--) /* back to the starts */
        off[e] = off[e - 1];
    off[0] = 0;
    /* every active expert's SwiGLU GEMM over its rows (gathered from xb), as
     * one grouped GEMM whose work is split over (expert, panel) units; then
     * the down GEMMs the same way. An expert no token chose is never read. */
    const size_t I = (size_t)f->gate_up[0].n_out;
    pg_gemm_problem *pr = ws->moe_prob;
    for (int32_t e = 0; e < E; e++)
        pr[e] = (pg_gemm_problem){.w = f->gate_up[e].part[0],
                                  .A = ws->xb,
                                  .M = off[e + 1] - off[e],
                                  .lda = (int64_t)H,
                                  .a_rows = ws->moe_rows + off[e],
                                  .C = ws->moe_act + (size_t)off[e] * I,
                                  .ldc = (int64_t)I,
                                  .bias = f->gate_up[e].bias,
                                  .ep = PG_GEMM_SWIGLU,
                                  .glu_limit = f->swiglu_limit};
    if ((st = pg_gemm_grouped(pr, E, pool, ws->gemm_scratch))) return st;
    for (int32_t e = 0; e < E; e++)
        pr[e] = (pg_gemm_problem){.w = f->down[e].part[0],
                                  .A = ws->moe_act + (size_t)off[e] * I,
                                  .M = off[e + 1] - off[e],
                                  .lda = (int64_t)I,
                                  .C = ws->moe_out + (size_t)off[e] * H,
                                  .ldc = (int64_t)H,
                                  .bias = f->down[e].bias,
                                  .ep = PG_GEMM_STORE};
    if ((st = pg_gemm_grouped(pr, E, pool, ws->gemm_scratch))) return st;
    /* x[t] += sum over ranks k, in order, of w * out (tensor parallelism:
     * this rank's part of each expert's output, all-reduced below) */
    tp_partial_begin(ws, T, H);
    combine_job cj = {ws, K, H};
    if (pool && (size_t)T * (size_t)K * H >= 65536)
        pg_pool_parallel_for(pool, (size_t)T, 4, combine_rows, &cj);
    else
        combine_rows(&cj, 0, (size_t)T, 0);
    if (!f->shared) return tp_reduce(ws, T, H); /* (shared experts: refused under TP) */
    /* the shared expert on every token: act = SwiGLU(h), out = act Wd^T into
     * moe_out's first T rows, x += sigmoid(gate logit) * out */
    if ((st = pg_linear_forward(&f->sh_gate_up, ws->xb, T, ws->act, f->sh_gate_up.n_out,
                                PG_GEMM_SWIGLU, pool, ws->gemm_scratch)) ||
        (st = pg_linear_forward(&f->sh_down, ws->act, T, ws->moe_out, (int64_t)H, PG_GEMM_STORE,
                                pool, ws->gemm_scratch)))
        return st;
    const size_t ld = (size_t)f->router.n_out;
    for (int64_t t = 0; t < T; t++) {
        const float g = 1.0f / (1.0f + expf(-ws->moe_logits[(size_t)t * ld + (size_t)E]));
        float *x = ws->x + (size_t)t * H;
        const float *o = ws->moe_out + (size_t)t * H;
        for (size_t i = 0; i < H; i++)
            x[i] += g * o[i];
    }
    return PAGODA_OK;
}

pagoda_status pg_dec_logits(const float *final_norm, float eps, const pg_linear *lm_head,
                            const pg_batch *b, pg_dec_ws *ws, float *logits) {
    if (b->num_logits == 0) return PAGODA_OK;
    const size_t H = (size_t)lm_head->n_in;
    for (int32_t i = 0; i < b->num_logits; i++)
        pg_kernels()->rmsnorm_f32(ws->last + (size_t)i * H, ws->x + (size_t)b->logit_rows[i] * H,
                                  final_norm, 1, H, eps);
    return pg_linear_forward(lm_head, ws->last, b->num_logits, logits, lm_head->n_out,
                             PG_GEMM_STORE, pg_pool_default(), ws->gemm_scratch);
}
