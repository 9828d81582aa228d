/* Llama family (see llama.h): config, weights bound once at load, forward
 * as a sequence of named blocks (model/decoder.h). */
#include "model/llama.h"

#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "model/decoder.h"

typedef struct llama_layer {
    pg_dec_attn attn;
    pg_dec_mlp mlp; /* dense MLP, or */
    pg_dec_moe moe; /* a mixture of experts when moe.n_experts > 0 (PG_DEC_MOE) */
} llama_layer;

typedef struct llama {
    pg_model base;
    pg_weights w;           /* owns the f32 norm weights and biases */
    const pg_tensor *embed; /* [vocab, hidden], in place in the source */
    llama_layer *layers;    /* [num_hidden_layers] */
    const float *final_norm;
    pg_linear lm_head; /* lm_head.weight, or a packed copy of the tied embedding */
    float *rope_inv_freq;
    pg_rope_spec rope;
    struct pg_comm *comm; /* tensor parallelism: rank tp_rank of tp_size (1: none) */
    int32_t tp_rank, tp_size;
} llama;

/* ---- forward: the named steps ------------------------------------------------------ */

static pagoda_status forward(const pg_model *base, void *wsp, const pg_batch *b, float *logits) {
    const llama *m = (const llama *)base;
    const pg_model_config *c = &base->cfg;
    pg_dec_ws *ws = wsp;
    pagoda_status st = pg_dec_check_batch(ws, b, c->vocab_size);
    if (st != PAGODA_OK) return st;
    pg_dec_embed(m->embed, b, ws);
    for (int l = 0; l < c->num_hidden_layers; l++) {
        const llama_layer *L = &m->layers[l];
        if ((st = pg_dec_attn_forward(&L->attn, &m->rope, c->rms_norm_eps, b, &b->layers[l], ws)) ||
            (st = L->moe.n_experts ? pg_dec_moe_forward(&L->moe, c->rms_norm_eps, b, ws)
                                   : pg_dec_mlp_forward(&L->mlp, c->rms_norm_eps, b, ws)))
            return st;
    }
    return pg_dec_logits(m->final_norm, c->rms_norm_eps, &m->lm_head, b, ws, logits);
}

/* ---- workspace, sizes ---------------------------------------------------------------- */

static pagoda_status workspace_create(const pg_model *base, const pg_step_limits *lim, void **out) {
    const llama *m = (const llama *)base;
    const pg_model_config *c = &base->cfg;
    int L = c->num_hidden_layers, n = 0;
    const int32_t R = m->tp_size; /* this rank's heads */
    size_t cap = 1;
    for (int l = 0; l < L; l++)
        cap += 5 + 2 * (size_t)m->layers[l].moe.n_experts;
    const pg_linear **ls = malloc(cap * sizeof *ls);
    if (!ls) return pg_error(PAGODA_ERR_NOMEM, "llama: out of memory");
    pg_dec_dims d = {.hidden = c->hidden_size,
                     .qkv_width = m->layers[0].attn.qkv.n_out,
                     .attn_width = (int64_t)c->num_attention_heads / R * c->head_dim,
                     .act_width = 1,
                     .n_heads = c->num_attention_heads / R,
                     .n_kv_heads = c->num_key_value_heads / R,
                     .head_dim = c->head_dim};
    pg_pool *pool = pg_pool_default();
    const int nt = pool ? pg_pool_size(pool) : 1;
    for (int l = 0; l < L; l++) {
        const llama_layer *Y = &m->layers[l];
        ls[n++] = &Y->attn.qkv;
        ls[n++] = &Y->attn.o;
        if (Y->moe.n_experts) { /* an expert's GEMM sees at most every token */
            ls[n++] = &Y->moe.router;
            for (int32_t e = 0; e < Y->moe.n_experts; e++) {
                ls[n++] = &Y->moe.gate_up[e];
                ls[n++] = &Y->moe.down[e];
            }
            size_t gs = pg_dec_moe_scratch_bytes(&Y->moe, lim->max_tokens, nt);
            if (gs > d.gemm_scratch_min) d.gemm_scratch_min = gs;
            d.moe_experts = Y->moe.n_experts;
            d.moe_top_k = Y->moe.top_k;
            d.moe_ffn = Y->moe.gate_up[0].n_out;
        } else {
            ls[n++] = &Y->mlp.gate_up;
            ls[n++] = &Y->mlp.down;
            d.act_width = Y->mlp.gate_up.n_out;
        }
    }
    ls[n++] = &m->lm_head;
    pagoda_status st = pg_dec_ws_create(&d, lim, ls, n, 1, (pg_dec_ws **)out);
    free(ls);
    if (st == PAGODA_OK) {
        pg_dec_ws *ws = *out;
        ws->comm = m->comm;
        ws->tp_rank = m->tp_rank;
        ws->tp_size = m->tp_size;
    }
    return st;
}

/* A decode step at batch 1 reads the top-k experts of each MoE layer: their
 * share k / experts of the layer's expert bytes (every expert is alike). */
static size_t weight_bytes_per_step(const pg_model *base) {
    const llama *m = (const llama *)base;
    const size_t H = (size_t)base->cfg.hidden_size;
    size_t b = H * sizeof(float); /* final norm */
    for (int l = 0; l < base->cfg.num_hidden_layers; l++) {
        const llama_layer *L = &m->layers[l];
        b += 2 * H * sizeof(float); /* attention and MLP norms */
        b += pg_linear_bytes(&L->attn.qkv) + pg_linear_bytes(&L->attn.o);
        if (L->moe.n_experts)
            b += pg_linear_bytes(&L->moe.router) +
                 (size_t)L->moe.top_k *
                     (pg_linear_bytes(&L->moe.gate_up[0]) + pg_linear_bytes(&L->moe.down[0]));
        else
            b += pg_linear_bytes(&L->mlp.gate_up) + pg_linear_bytes(&L->mlp.down);
    }
    return b + pg_linear_bytes(&m->lm_head);
}

static void model_free(pg_model *base) {
    llama *m = (llama *)base;
    if (!m) return;
    for (int l = 0; m->layers && l < base->cfg.num_hidden_layers; l++) {
        pg_dec_attn_free(&m->layers[l].attn);
        pg_dec_mlp_free(&m->layers[l].mlp);
        pg_dec_moe_free(&m->layers[l].moe);
    }
    free(m->layers);
    pg_linear_free(&m->lm_head);
    pg_free(m->rope_inv_freq);
    pg_weights_release(&m->w);
    pg_model_base_release(base);
    free(m);
}

static const pg_model_ops LLAMA_OPS = {
    .free = model_free,
    .weight_bytes_per_step = weight_bytes_per_step,
    .workspace_create = workspace_create,
    .workspace_free = pg_dec_ws_free,
    .workspace_bytes = pg_dec_ws_bytes,
    .forward = forward,
};

/* ---- load ---------------------------------------------------------------------------- */

/* Bind and pack every layer, the norms and the lm_head. */
static pagoda_status load_weights(llama *m, const pg_linear_policy *p, unsigned flags) {
    const pg_model_config *c = &m->base.cfg;
    const int64_t H = c->hidden_size;
    pg_weights *w = &m->w;
    pagoda_status st;
    m->layers = calloc((size_t)c->num_hidden_layers, sizeof *m->layers);
    if (!m->layers) return pg_error(PAGODA_ERR_NOMEM, "llama: out of memory");
    if ((st =
             pg_weights_tensor(w, c->vocab_size, H, false, &m->embed, "model.embed_tokens.weight")))
        return st;
    for (int l = 0; l < c->num_hidden_layers; l++) {
        llama_layer *L = &m->layers[l];
        bool moe = (flags & PG_DEC_MOE) && pg_model_config_layer_moe(c, l);
        /* sliding-window layers: all of them (Mistral), or those layer_types
         * does not mark full (GPT-OSS) */
        const int32_t window =
            c->sliding_window > 0 && !(l < 256 && (c->full_attention_layers[l / 64] >> (l % 64)) & 1)
                ? c->sliding_window
                : 0;
        if ((st = pg_dec_attn_load(w, p, c, l, flags, window, &L->attn)) ||
            (st =
                 moe ? pg_dec_moe_load(w, p, c, l, flags, &L->moe) : pg_dec_mlp_load(w, p, c, l, &L->mlp)))
            return st;
        m->base.cache[l] = (pg_layer_cache_spec){
            .kind = window > 0 ? PG_LAYER_CACHE_SLIDING : PG_LAYER_CACHE_FULL,
            .num_kv_heads = c->num_key_value_heads / (p->tp_size > 1 ? p->tp_size : 1),
            .head_dim = c->head_dim,
            .window = window};
        if (p->bits)
            PG_INFO("%s: quantized layer %d/%d to W%dA8", m->base.arch->name, l + 1,
                    c->num_hidden_layers, p->bits);
    }
    if ((st = pg_weights_vector(w, H, false, &m->final_norm, "model.norm.weight"))) return st;

    /* LM head: its own tensor when the file has one, else the tied embedding. */
    pg_linear_src head;
    const pg_model_source *src = w->src;
    if (w->ct && pg_ct_quantized(w->ct, "lm_head") &&
        (!c->tie_word_embeddings || pg_model_source_tensor(src, "lm_head.weight_scale")))
        st = pg_weights_linear(w, c->vocab_size, H, false, &head, "lm_head");
    else if (!c->tie_word_embeddings) /* tied: the embedding, whatever else the file holds
                                          (as transformers and vLLM tie it) */
        st = pg_weights_linear(w, c->vocab_size, H, false, &head, "lm_head");
    else
        head = (pg_linear_src){
            .w = m->embed->data, .dtype = m->embed->dtype, .n_out = c->vocab_size, .n_in = H};
    if (st || (st = pg_linear_pack_lm_head(p, &head, &m->lm_head))) return st;
    if (p->lm_head_bits && !head.ct)
        PG_INFO("%s: quantized the lm_head to W%dA8", m->base.arch->name, p->lm_head_bits);

    /* decode prefetch order: qkv, o, gate/up, down of every layer, lm_head */
    int n = 0;
    pg_linear **chain = malloc((size_t)(4 * c->num_hidden_layers + 1) * sizeof *chain);
    if (!chain) return pg_error(PAGODA_ERR_NOMEM, "llama: out of memory");
    for (int l = 0; l < c->num_hidden_layers; l++) { /* (experts: chosen per step) */
        chain[n++] = &m->layers[l].attn.qkv;
        chain[n++] = &m->layers[l].attn.o;
        chain[n++] =
            m->layers[l].moe.n_experts ? &m->layers[l].moe.router : &m->layers[l].mlp.gate_up;
        chain[n++] = m->layers[l].moe.n_experts ? NULL : &m->layers[l].mlp.down;
    }
    chain[n++] = &m->lm_head;
    pg_linear_chain(chain, n);
    free(chain);
    return PAGODA_OK;
}

/* Tensor parallelism over R ranks: every rank keeps whole heads (no KV-head
 * replication) and an equal slice of every intermediate dimension. */
static pagoda_status tp_check(const pg_model_source *src, const pg_model_config *c,
                              const pg_linear_policy *p, int32_t R, unsigned flags) {
    const char *path = pg_model_source_path(src);
    if (c->num_attention_heads % R || c->num_key_value_heads % R)
        return pg_error(PAGODA_ERR_UNSUPPORTED,
                        "%s: tensor-parallel size %d must divide num_attention_heads %d and "
                        "num_key_value_heads %d (KV-head replication is not supported)",
                        path, R, c->num_attention_heads, c->num_key_value_heads);
    bool dense = false, moe = false;
    for (int l = 0; l < c->num_hidden_layers; l++) {
        bool is_moe = (flags & PG_DEC_MOE) && pg_model_config_layer_moe(c, l);
        moe |= is_moe;
        dense |= !is_moe;
    }
    if (dense && c->intermediate_size % R)
        return pg_error(PAGODA_ERR_UNSUPPORTED,
                        "%s: tensor-parallel size %d must divide intermediate_size %d", path, R,
                        c->intermediate_size);
    if (moe && c->moe_intermediate_size % R)
        return pg_error(PAGODA_ERR_UNSUPPORTED,
                        "%s: tensor-parallel size %d must divide moe_intermediate_size %d", path, R,
                        c->moe_intermediate_size);
    if (p->ct)
        return pg_error(PAGODA_ERR_UNSUPPORTED,
                        "%s: compressed-tensors checkpoints are not supported under tensor "
                        "parallelism",
                        path);
    return PAGODA_OK;
}

pagoda_status pg_llama_create(const pg_model_source *src, const pg_model_options *o, unsigned flags,
                              pg_model **out) {
    *out = NULL;
    const pg_model_config *c = pg_model_source_config(src);
    pagoda_status st = pg_dec_check_config(src, c);
    if (st != PAGODA_OK) return st;
    pg_linear_policy p;
    st = pg_linear_policy_init(&p, o->compute, o->quant_bits, o->quant_group, o->quant_act_group,
                               pg_model_source_ct(src));
    if (st != PAGODA_OK) return st;
    if (o->tp_size > 1 && (st = tp_check(src, c, &p, o->tp_size, flags))) return st;
    p.tp_rank = o->tp_size > 1 ? o->tp_rank : 0;
    p.tp_size = o->tp_size > 1 ? o->tp_size : 1;
    llama *m = calloc(1, sizeof *m);
    if (!m) return pg_error(PAGODA_ERR_NOMEM, "llama: out of memory");
    m->comm = o->comm;
    m->tp_rank = p.tp_rank;
    m->tp_size = p.tp_size;
    pg_weights_init(&m->w, src);
    if ((st = pg_model_base_init(&m->base, &LLAMA_OPS, src, o, c->num_hidden_layers)) ||
        (st = load_weights(m, &p, flags)) || (st = pg_dec_rope_init(src, c, &m->rope_inv_freq))) {
        model_free(&m->base);
        return st;
    }
    m->rope = (pg_rope_spec){.style = c->rope_interleaved ? PG_ROPE_INTERLEAVED : PG_ROPE_NEOX,
                             .rotary_dim = c->rotary_dim > 0 ? c->rotary_dim : c->head_dim,
                             .inv_freq = m->rope_inv_freq};
    PG_DEBUG("%s: %d layers, hidden %d, heads %d/%d x %d, context %d, weights %s",
             m->base.arch->name, c->num_hidden_layers, c->hidden_size, c->num_attention_heads,
             c->num_key_value_heads, c->head_dim, m->base.max_context,
             pg_dtype_name(c->torch_dtype));
    *out = &m->base;
    return PAGODA_OK;
}

static pagoda_status create(const pg_model_source *src, const pg_model_options *o, pg_model **out) {
    return pg_llama_create(src, o, 0, out);
}

/* Tensors (llama.cpp gguf-py constants.py / tensor_mapping.py for the GGUF names). */
const pg_arch_tensor pg_llama_tensors[] = {
    {"model.embed_tokens.weight", "token_embd.weight", PG_DIM_VOCAB, PG_DIM_HIDDEN, PG_REQ_ALWAYS,
     false, false, false},
    {"model.norm.weight", "output_norm.weight", PG_DIM_HIDDEN, PG_DIM_NONE, PG_REQ_ALWAYS, false,
     false, false},
    {"lm_head.weight", "output.weight", PG_DIM_VOCAB, PG_DIM_HIDDEN, PG_REQ_UNLESS_TIED, false,
     true, false},
    {"input_layernorm.weight", "attn_norm.weight", PG_DIM_HIDDEN, PG_DIM_NONE, PG_REQ_ALWAYS, true,
     false, false},
    {"self_attn.q_proj.weight", "attn_q.weight", PG_DIM_Q, PG_DIM_HIDDEN, PG_REQ_ALWAYS, true, true,
     false},
    {"self_attn.k_proj.weight", "attn_k.weight", PG_DIM_KV, PG_DIM_HIDDEN, PG_REQ_ALWAYS, true,
     true, false},
    {"self_attn.v_proj.weight", "attn_v.weight", PG_DIM_KV, PG_DIM_HIDDEN, PG_REQ_ALWAYS, true,
     true, false},
    {"self_attn.o_proj.weight", "attn_output.weight", PG_DIM_HIDDEN, PG_DIM_Q, PG_REQ_ALWAYS, true,
     true, false},
    {"self_attn.q_proj.bias", "attn_q.bias", PG_DIM_Q, PG_DIM_NONE, PG_REQ_IF_BIAS, true, false,
     false},
    {"self_attn.k_proj.bias", "attn_k.bias", PG_DIM_KV, PG_DIM_NONE, PG_REQ_IF_BIAS, true, false,
     false},
    {"self_attn.v_proj.bias", "attn_v.bias", PG_DIM_KV, PG_DIM_NONE, PG_REQ_IF_BIAS, true, false,
     false},
    {"self_attn.o_proj.bias", "attn_output.bias", PG_DIM_HIDDEN, PG_DIM_NONE, PG_REQ_OPTIONAL, true,
     false, false},
    {"post_attention_layernorm.weight", "ffn_norm.weight", PG_DIM_HIDDEN, PG_DIM_NONE,
     PG_REQ_ALWAYS, true, false, false},
    {"mlp.gate_proj.weight", "ffn_gate.weight", PG_DIM_FFN, PG_DIM_HIDDEN, PG_REQ_DENSE_MLP, true,
     true, false},
    {"mlp.up_proj.weight", "ffn_up.weight", PG_DIM_FFN, PG_DIM_HIDDEN, PG_REQ_DENSE_MLP, true, true,
     false},
    {"mlp.down_proj.weight", "ffn_down.weight", PG_DIM_HIDDEN, PG_DIM_FFN, PG_REQ_DENSE_MLP, true,
     true, false},
    {0},
};

static const char *const LLAMA_HF[] = {"LlamaForCausalLM", "MistralForCausalLM", NULL};
static const char *const LLAMA_TYPES[] = {"llama", "mistral", NULL};

const pg_arch pg_arch_llama = {
    .name = "llama",
    .hf_architectures = LLAMA_HF,
    .hf_model_types = LLAMA_TYPES,
    .gguf_name = "llama",
    .gguf_rope_interleaved = true,
    .tensors = pg_llama_tensors,
    .create = create,
    .tensor_parallel = true,
};
