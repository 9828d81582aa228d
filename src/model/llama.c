/* Llama family forward pass (see llama.h): config, weights resolved once at
 * load, run state, then forward() as a sequence of named steps. */
#include "model/llama.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/log.h"
#include "base/pool.h"
#include "kernels/attention.h"
#include "kernels/dispatch.h"
#include "kernels/gemm.h"
#include "kernels/ops.h"
#include "kernels/qgemm.h"
#include "model/compressed_tensors.h"
#include "model/mapped_file.h"

/* ---- weights: what the file holds ---------------------------------------- */

/* A linear layer's weight [n_out, n_in] (in place in the source) and bias. */
typedef struct linear {
    const void *w;
    pg_dtype dtype;
    const float *bias; /* f32 [n_out] owned by the model, or NULL */
    int n_out, n_in;
    bool ct; /* compressed-tensors quantized layer: w is NULL, use ct_w */
    pg_ct_layer ct_w;
} linear;

typedef struct llama_layer {
    const float *attn_norm; /* f32 [hidden] */
    linear wq, wk, wv, wo;
    const float *ffn_norm; /* f32 [hidden] */
    linear w_gate, w_up, w_down;
    /* prepacked for the batched forward (pg_llama_pack), NULL when not packable */
    pg_packed_weight *qkv, *o, *gate_up, *down;
    float *qkv_bias; /* [q_dim + 2 kv_dim] or NULL */
} llama_layer;

typedef struct llama_weights {
    const pg_tensor *embed; /* [vocab, hidden] */
    llama_layer *layers;
    const float *final_norm; /* f32 [hidden] */
    linear lm_head;          /* [vocab, hidden]: lm_head.weight or the tied embedding */
} llama_weights;

struct pg_llama {
    pg_model_config cfg; /* what the user/model says */
    llama_weights w;
    float *rope_inv_freq; /* [head_dim / 2] */
    int max_context;
    int q_dim, kv_dim; /* heads * head_dim, kv_heads * head_dim */
    float **owned;     /* f32 copies of 1-D tensors */
    int n_owned, cap_owned;
    bool packed;
    int quant_bits;          /* load-time quantization of linear layers (0 = none) */
    int64_t quant_group;     /* its group size (0 = per channel) */
    int64_t quant_act_group; /* activation scales per (token, group of this size); 0 = per token */
    int lm_head_bits;        /* the lm_head's quantization (0 = kept as is) */
    int64_t lm_head_group;
    int lm_head_act;  /* its activations scaled per (token, group) */
    pg_dtype compute; /* GEMM dtype of float weights: PG_DTYPE_COUNT (auto), F32, BF16 */
    pg_packed_weight *lm_head_packed;
    const pg_ct_config *ct; /* compressed-tensors checkpoint (owned by the source), or NULL */
    int n_ct;               /* its quantized linear layers */
};

/* ---- run state: what a run holds ----------------------------------------- */

struct pg_llama_state {
    const pg_llama *model;
    int max_tokens;   /* rows per chunk */
    pg_arena arena;   /* every buffer below */
    float *x;         /* residual stream [T, hidden] */
    float *xb;        /* normed input / projection output [T, hidden] */
    float *q;         /* [T, q_dim] */
    float *k, *v;     /* [T, kv_dim] */
    float *attn;      /* attention output [T, q_dim] */
    float *scores;    /* [score_rows, max_context] attention weights, one row per thread */
    int score_rows;   /* threads of the default pool when the state was made */
    float *gate, *up; /* [T, intermediate] */
    float *last;      /* final-normed last row [hidden] */
    pg_kv_cache *kv;
    int owns_kv;
};

/* ---- load ----------------------------------------------------------------- */

static const char *SUPPORTED_DTYPES = "F32, F16, BF16, Q8_0, Q4_0";

static void shape_str(const pg_tensor *t, char *buf, size_t cap) {
    size_t off = (size_t)snprintf(buf, cap, "[");
    for (int i = 0; i < t->ndim && off < cap; i++)
        off +=
            (size_t)snprintf(buf + off, cap - off, "%s%lld", i ? ", " : "", (long long)t->shape[i]);
    if (off < cap) snprintf(buf + off, cap - off, "]");
}

/* Tensor `name` with shape [d0] (d1 < 0) or [d0, d1]; NULL + error if
 * missing (unless optional), of the wrong shape or of an unsupported dtype. */
static pagoda_status get_tensor(const pg_model_source *src, const char *name, int d0, int d1,
                                bool optional, const pg_tensor **out) {
    *out = NULL;
    const pg_tensor *t = pg_model_source_tensor(src, name);
    if (!t) {
        if (optional) return PAGODA_OK;
        return pg_error(PAGODA_ERR_NOT_FOUND, "%s: missing tensor '%s'", pg_model_source_path(src),
                        name);
    }
    int want_ndim = d1 < 0 ? 1 : 2;
    if (t->ndim != want_ndim || t->shape[0] != d0 || (d1 >= 0 && t->shape[1] != d1)) {
        char got[96];
        shape_str(t, got, sizeof got);
        if (d1 < 0)
            return pg_error(PAGODA_ERR_FORMAT, "%s: tensor '%s' has shape %s, config expects [%d]",
                            pg_model_source_path(src), name, got, d0);
        return pg_error(PAGODA_ERR_FORMAT, "%s: tensor '%s' has shape %s, config expects [%d, %d]",
                        pg_model_source_path(src), name, got, d0, d1);
    }
    if (!pg_matmul_supports(t->dtype))
        return pg_error(PAGODA_ERR_UNSUPPORTED,
                        "%s: tensor '%s' has dtype %s; the llama model supports %s",
                        pg_model_source_path(src), name, pg_dtype_name(t->dtype), SUPPORTED_DTYPES);
    size_t inner = (size_t)(d1 < 0 ? d0 : d1);
    if (pg_dtype_row_bytes(t->dtype, inner) == 0)
        return pg_error(PAGODA_ERR_FORMAT,
                        "%s: tensor '%s' is %s but its rows of %zu are not whole blocks",
                        pg_model_source_path(src), name, pg_dtype_name(t->dtype), inner);
    *out = t;
    return PAGODA_OK;
}

/* An f32 copy of a 1-D tensor, owned by the model. */
static pagoda_status own_f32(pg_llama *m, const pg_tensor *t, const float **out) {
    size_t n = (size_t)t->shape[0];
    float *buf = pg_malloc_aligned(n * sizeof(float));
    if (!buf) return pg_error(PAGODA_ERR_NOMEM, "llama: out of memory copying '%s'", t->name);
    if (m->n_owned == m->cap_owned) {
        int cap = m->cap_owned ? 2 * m->cap_owned : 64;
        float **grown = realloc(m->owned, (size_t)cap * sizeof *grown);
        if (!grown) {
            pg_free(buf);
            return pg_error(PAGODA_ERR_NOMEM, "llama: out of memory");
        }
        m->owned = grown;
        m->cap_owned = cap;
    }
    m->owned[m->n_owned++] = buf;
    pg_dequant_row(t->dtype, t->data, buf, n);
    *out = buf;
    return PAGODA_OK;
}

static pagoda_status get_vector(pg_llama *m, const pg_model_source *src, const char *name, int n,
                                bool optional, const float **out) {
    const pg_tensor *t;
    *out = NULL;
    pagoda_status st = get_tensor(src, name, n, -1, optional, &t);
    if (st != PAGODA_OK || !t) return st;
    return own_f32(m, t, out);
}

/* Linear weight "<prefix>.weight" [n_out, n_in] and optional "<prefix>.bias". */
static pagoda_status get_linear(pg_llama *m, const pg_model_source *src, const char *prefix,
                                int n_out, int n_in, bool with_bias, linear *out) {
    char name[160];
    const pg_tensor *t;
    if (m->ct && pg_ct_quantized(m->ct, prefix)) {
        *out = (linear){.n_out = n_out, .n_in = n_in, .ct = true};
        pagoda_status st = pg_ct_find_layer(m->ct, src, prefix, n_out, n_in, &out->ct_w);
        if (st != PAGODA_OK) return st;
        out->dtype = out->ct_w.weight->dtype;
        m->n_ct++;
        if (!with_bias) return PAGODA_OK;
        snprintf(name, sizeof name, "%s.bias", prefix);
        return get_vector(m, src, name, n_out, false, &out->bias);
    }
    snprintf(name, sizeof name, "%s.weight", prefix);
    pagoda_status st = get_tensor(src, name, n_out, n_in, false, &t);
    if (st != PAGODA_OK) return st;
    if (!t) return pg_error(PAGODA_ERR_INTERNAL, "llama: tensor '%s' vanished", name);
    *out = (linear){.w = t->data, .dtype = t->dtype, .n_out = n_out, .n_in = n_in};
    if (!with_bias) return PAGODA_OK;
    snprintf(name, sizeof name, "%s.bias", prefix);
    return get_vector(m, src, name, n_out, false, &out->bias);
}

static pagoda_status check_config(const pg_model_source *src, const pg_model_config *c) {
    const char *path = pg_model_source_path(src);
    if (strcmp(c->architecture, "LlamaForCausalLM") != 0 &&
        strcmp(c->architecture, "MistralForCausalLM") != 0)
        return pg_error(PAGODA_ERR_UNSUPPORTED,
                        "%s: architecture '%s' is not a Llama-family model "
                        "(LlamaForCausalLM, MistralForCausalLM)",
                        path, c->architecture);
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
    if (c->rope_scaling == PG_ROPE_SCALING_YARN)
        return pg_error(PAGODA_ERR_UNSUPPORTED,
                        "%s: rope_scaling type 'yarn' is not supported by the llama model", path);
    return PAGODA_OK;
}

static pagoda_status load_weights(pg_llama *m, const pg_model_source *src) {
    const pg_model_config *c = &m->cfg;
    int H = c->hidden_size, I = c->intermediate_size;
    pagoda_status st;
    m->w.layers = calloc((size_t)c->num_hidden_layers, sizeof *m->w.layers);
    if (!m->w.layers) return pg_error(PAGODA_ERR_NOMEM, "llama: out of memory");

    st = get_tensor(src, "model.embed_tokens.weight", c->vocab_size, H, false, &m->w.embed);
    if (st != PAGODA_OK) return st;
    for (int l = 0; l < c->num_hidden_layers; l++) {
        llama_layer *L = &m->w.layers[l];
        char p[128], n[160];
        snprintf(n, sizeof n, "model.layers.%d.input_layernorm.weight", l);
        if ((st = get_vector(m, src, n, H, false, &L->attn_norm)) != PAGODA_OK) return st;
        snprintf(n, sizeof n, "model.layers.%d.post_attention_layernorm.weight", l);
        if ((st = get_vector(m, src, n, H, false, &L->ffn_norm)) != PAGODA_OK) return st;
        snprintf(p, sizeof p, "model.layers.%d.self_attn.q_proj", l);
        if ((st = get_linear(m, src, p, m->q_dim, H, c->attention_bias, &L->wq))) return st;
        snprintf(p, sizeof p, "model.layers.%d.self_attn.k_proj", l);
        if ((st = get_linear(m, src, p, m->kv_dim, H, c->attention_bias, &L->wk))) return st;
        snprintf(p, sizeof p, "model.layers.%d.self_attn.v_proj", l);
        if ((st = get_linear(m, src, p, m->kv_dim, H, c->attention_bias, &L->wv))) return st;
        snprintf(p, sizeof p, "model.layers.%d.self_attn.o_proj", l);
        if ((st = get_linear(m, src, p, H, m->q_dim, false, &L->wo))) return st;
        snprintf(p, sizeof p, "model.layers.%d.mlp.gate_proj", l);
        if ((st = get_linear(m, src, p, I, H, false, &L->w_gate))) return st;
        snprintf(p, sizeof p, "model.layers.%d.mlp.up_proj", l);
        if ((st = get_linear(m, src, p, I, H, false, &L->w_up))) return st;
        snprintf(p, sizeof p, "model.layers.%d.mlp.down_proj", l);
        if ((st = get_linear(m, src, p, H, I, false, &L->w_down))) return st;
    }
    if ((st = get_vector(m, src, "model.norm.weight", H, false, &m->w.final_norm))) return st;

    /* LM head: its own tensor when the file has one, else the tied embedding. */
    const pg_tensor *head;
    bool need_head = !c->tie_word_embeddings;
    if (m->ct && pg_ct_quantized(m->ct, "lm_head") &&
        (need_head || pg_model_source_tensor(src, "lm_head.weight_scale")))
        return get_linear(m, src, "lm_head", c->vocab_size, H, false, &m->w.lm_head);
    if ((st = get_tensor(src, "lm_head.weight", c->vocab_size, H, !need_head, &head))) return st;
    if (!head) head = m->w.embed;
    m->w.lm_head =
        (linear){.w = head->data, .dtype = head->dtype, .n_out = c->vocab_size, .n_in = H};
    return PAGODA_OK;
}

static pagoda_status init_rope(pg_llama *m, const pg_model_source *src) {
    const pg_model_config *c = &m->cfg;
    pg_rope_freq_params p = {.head_dim = c->head_dim, .theta = c->rope_theta};
    if (c->rope_scaling == PG_ROPE_SCALING_LINEAR) {
        p.scaling = PG_ROPE_FREQ_LINEAR;
        p.factor = c->rope_factor;
    } else if (c->rope_scaling == PG_ROPE_SCALING_LLAMA3) {
        p.scaling = PG_ROPE_FREQ_LLAMA3;
        p.factor = c->rope_factor;
        p.low_freq_factor = c->rope_low_freq_factor;
        p.high_freq_factor = c->rope_high_freq_factor;
        p.original_max_position = c->rope_original_max_position;
    }
    int half = c->head_dim / 2;
    m->rope_inv_freq = pg_malloc_aligned((size_t)half * sizeof(float));
    if (!m->rope_inv_freq) return pg_error(PAGODA_ERR_NOMEM, "llama: out of memory");
    pagoda_status st = pg_rope_inv_freq(&p, m->rope_inv_freq);
    if (st != PAGODA_OK || c->rope_scaling != PG_ROPE_SCALING_NONE) return st;
    /* llama.cpp's GGUF form of Llama-3 scaling: frequency i divided by rope_freqs[i] */
    const pg_tensor *rf;
    if ((st = get_tensor(src, "rope_freqs.weight", half, -1, true, &rf)) != PAGODA_OK || !rf)
        return st;
    float *factors = malloc((size_t)half * sizeof(float));
    if (!factors) return pg_error(PAGODA_ERR_NOMEM, "llama: out of memory");
    pg_dequant_row(rf->dtype, rf->data, factors, (size_t)half);
    for (int i = 0; i < half && st == PAGODA_OK; i++) {
        if (!(factors[i] > 0.0f))
            st = pg_error(PAGODA_ERR_FORMAT, "%s: rope_freqs.weight[%d] = %g must be > 0",
                          pg_model_source_path(src), i, (double)factors[i]);
        else
            m->rope_inv_freq[i] /= factors[i];
    }
    free(factors);
    return st;
}

pagoda_status pg_llama_load(const pg_model_source *src, int max_context, pg_llama **out) {
    *out = NULL;
    const pg_model_config *c = pg_model_source_config(src);
    pagoda_status st = check_config(src, c);
    if (st != PAGODA_OK) return st;
    pg_llama *m = calloc(1, sizeof *m);
    if (!m) return pg_error(PAGODA_ERR_NOMEM, "llama: out of memory");
    m->cfg = *c;
    m->compute = PG_DTYPE_COUNT;
    m->q_dim = c->num_attention_heads * c->head_dim;
    m->kv_dim = c->num_key_value_heads * c->head_dim;
    m->max_context = c->max_position_embeddings;
    m->ct = pg_model_source_ct(src);
    if (max_context > 0 && (m->max_context <= 0 || max_context < m->max_context))
        m->max_context = max_context;
    if (m->max_context <= 0) {
        pg_llama_free(m);
        return pg_error(PAGODA_ERR_FORMAT,
                        "%s: max_position_embeddings is not set and no context limit was given",
                        pg_model_source_path(src));
    }
    if ((st = load_weights(m, src)) != PAGODA_OK || (st = init_rope(m, src)) != PAGODA_OK) {
        pg_llama_free(m);
        return st;
    }
    PG_DEBUG("llama: %d layers, hidden %d, heads %d/%d x %d, context %d, weights %s",
             c->num_hidden_layers, c->hidden_size, c->num_attention_heads, c->num_key_value_heads,
             c->head_dim, m->max_context, pg_dtype_name(m->w.layers[0].wq.dtype));
    *out = m;
    return PAGODA_OK;
}

void pg_llama_free(pg_llama *m) {
    if (!m) return;
    for (int i = 0; i < m->n_owned; i++)
        pg_free(m->owned[i]);
    free(m->owned);
    for (int l = 0; m->w.layers && l < m->cfg.num_hidden_layers; l++) {
        llama_layer *L = &m->w.layers[l];
        pg_gemm_free(L->qkv);
        pg_gemm_free(L->o);
        pg_gemm_free(L->gate_up);
        pg_gemm_free(L->down);
        pg_free(L->qkv_bias);
    }
    pg_gemm_free(m->lm_head_packed);
    free(m->w.layers);
    pg_free(m->rope_inv_freq);
    free(m);
}

const pg_model_config *pg_llama_config(const pg_llama *m) {
    return &m->cfg;
}
int pg_llama_max_context(const pg_llama *m) {
    return m->max_context;
}

/* Bytes of one linear layer as the batched forward reads it: its packed
 * copy when there is one, else the stored (or compressed-tensors) weight. */
static size_t linear_bytes(const linear *l, const pg_packed_weight *packed) {
    if (packed) return pg_gemm_packed_bytes(packed);
    if (l->ct) return l->ct_w.weight->nbytes + l->ct_w.scale->nbytes;
    return pg_dtype_row_bytes(l->dtype, (size_t)l->n_in) * (size_t)l->n_out;
}

size_t pg_llama_weight_bytes_per_step(const pg_llama *m) {
    const size_t H = (size_t)m->cfg.hidden_size;
    size_t b = H * sizeof(float); /* final norm */
    for (int l = 0; l < m->cfg.num_hidden_layers; l++) {
        const llama_layer *L = &m->w.layers[l];
        b += 2 * H * sizeof(float); /* attention and FFN norms */
        if (L->qkv)
            b += pg_gemm_packed_bytes(L->qkv);
        else
            b += linear_bytes(&L->wq, NULL) + linear_bytes(&L->wk, NULL) +
                 linear_bytes(&L->wv, NULL);
        b += linear_bytes(&L->wo, L->o);
        if (L->gate_up)
            b += pg_gemm_packed_bytes(L->gate_up);
        else
            b += linear_bytes(&L->w_gate, NULL) + linear_bytes(&L->w_up, NULL);
        b += linear_bytes(&L->w_down, L->down);
    }
    return b + linear_bytes(&m->w.lm_head, m->lm_head_packed);
}

/* ---- run state -------------------------------------------------------------- */

pagoda_status pg_llama_state_create(const pg_llama *m, int max_batch_tokens, pg_kv_cache *kv,
                                    pg_llama_state **out) {
    *out = NULL;
    const pg_model_config *c = &m->cfg;
    if (max_batch_tokens <= 0)
        return pg_error(PAGODA_ERR_INVALID_ARG, "llama: max_batch_tokens %d must be > 0",
                        max_batch_tokens);
    if (kv && (kv->n_layers != c->num_hidden_layers || kv->n_kv_heads != c->num_key_value_heads ||
               kv->head_dim != c->head_dim))
        return pg_error(PAGODA_ERR_INVALID_ARG,
                        "llama: KV cache geometry (%d layers, %d kv heads, head_dim %d) does not "
                        "match the model (%d, %d, %d)",
                        kv->n_layers, kv->n_kv_heads, kv->head_dim, c->num_hidden_layers,
                        c->num_key_value_heads, c->head_dim);
    pg_llama_state *s = calloc(1, sizeof *s);
    if (!s) return pg_error(PAGODA_ERR_NOMEM, "llama: out of memory");
    s->model = m;
    s->max_tokens = max_batch_tokens;
    pg_pool *pool = pg_pool_default();
    s->score_rows = pool ? pg_pool_size(pool) : 1;
    size_t T = (size_t)max_batch_tokens, H = (size_t)c->hidden_size;
    size_t sizes[] = {T * H,
                      T * H,
                      T * (size_t)m->q_dim,
                      T * (size_t)m->kv_dim,
                      T * (size_t)m->kv_dim,
                      T * (size_t)m->q_dim,
                      (size_t)s->score_rows * (size_t)m->max_context,
                      T * (size_t)c->intermediate_size,
                      T * (size_t)c->intermediate_size,
                      H};
    float **bufs[] = {&s->x,    &s->xb,     &s->q,    &s->k,  &s->v,
                      &s->attn, &s->scores, &s->gate, &s->up, &s->last};
    size_t total = 0;
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
        total += (sizes[i] * sizeof(float) + PG_ALIGN - 1) / PG_ALIGN * PG_ALIGN;
    pagoda_status st = pg_arena_init(&s->arena, total);
    if (st != PAGODA_OK) {
        free(s);
        return st;
    }
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
        *bufs[i] = pg_arena_alloc(&s->arena, sizes[i] * sizeof(float));
    if (kv) {
        s->kv = kv;
    } else {
        st = pg_kv_cache_create_contiguous(c->num_hidden_layers, c->num_key_value_heads,
                                           c->head_dim, m->max_context, &s->kv);
        if (st != PAGODA_OK) {
            pg_llama_state_free(s);
            return st;
        }
        s->owns_kv = 1;
    }
    *out = s;
    return PAGODA_OK;
}

void pg_llama_state_free(pg_llama_state *s) {
    if (!s) return;
    if (s->owns_kv) pg_kv_cache_free(s->kv);
    pg_arena_free(&s->arena);
    free(s);
}

/* ---- forward: the named steps ---------------------------------------------- */

/* x[i, :] = embedding row of tokens[i] (dequantized to f32). */
static void embed(const pg_llama *m, float *x, const int32_t *tokens, int n) {
    const pg_tensor *e = m->w.embed;
    size_t H = (size_t)m->cfg.hidden_size;
    size_t row_bytes = pg_dtype_row_bytes(e->dtype, H);
    for (int i = 0; i < n; i++)
        pg_dequant_row(e->dtype, (const uint8_t *)e->data + (size_t)tokens[i] * row_bytes,
                       x + (size_t)i * H, H);
}

static pagoda_status project(float *out, const float *x, const linear *l, int n) {
    return pg_matmul(out, x, l->w, l->dtype, l->bias, (size_t)n, (size_t)l->n_out, (size_t)l->n_in);
}

/* RoPE on the n rows of q [n, q_dim] and k [n, kv_dim], row i at start + i. */
static void rotate_qk(const pg_llama *m, float *q, float *k, int n, int start) {
    const pg_model_config *c = &m->cfg;
    for (int i = 0; i < n; i++) {
        pg_rope(q + (size_t)i * m->q_dim, (size_t)c->num_attention_heads, (size_t)c->head_dim,
                start + i, m->rope_inv_freq, c->rope_interleaved);
        pg_rope(k + (size_t)i * m->kv_dim, (size_t)c->num_key_value_heads, (size_t)c->head_dim,
                start + i, m->rope_inv_freq, c->rope_interleaved);
    }
}

static void cache_kv(pg_kv_cache *kv, int layer, const float *k, const float *v, int n, int start,
                     int kv_dim) {
    for (int i = 0; i < n; i++) {
        memcpy(pg_kv_k(kv, layer, start + i), k + (size_t)i * kv_dim, (size_t)kv_dim * 4);
        memcpy(pg_kv_v(kv, layer, start + i), v + (size_t)i * kv_dim, (size_t)kv_dim * 4);
    }
}

/* One query row i (position start + i), one head h: causal grouped-query
 * attention over the cached keys/values of positions [first, pos], where
 * first is 0, or pos - sliding_window + 1 for Mistral's sliding window.
 * scores: max_context floats of scratch. */
static void attend_one(const pg_llama *m, pg_llama_state *s, int layer, int i, int h, int start,
                       float *scores) {
    const pg_model_config *c = &m->cfg;
    const pg_kernel_table *kt = pg_kernels();
    int hd = c->head_dim, group = c->num_attention_heads / c->num_key_value_heads;
    float scale = 1.0f / sqrtf((float)hd);
    int pos = start + i;
    int first =
        c->sliding_window > 0 && pos - c->sliding_window + 1 > 0 ? pos - c->sliding_window + 1 : 0;
    int len = pos - first + 1;
    const float *q = s->q + (size_t)i * m->q_dim + (size_t)h * hd;
    size_t kv_off = (size_t)(h / group) * hd;
    float *out = s->attn + (size_t)i * m->q_dim + (size_t)h * hd;
    for (int t = 0; t < len; t++)
        scores[t] = kt->dot_f32(q, pg_kv_k(s->kv, layer, first + t) + kv_off, (size_t)hd) * scale;
    pg_softmax(scores, (size_t)len);
    memset(out, 0, (size_t)hd * sizeof(float));
    for (int t = 0; t < len; t++) {
        const float *v = pg_kv_v(s->kv, layer, first + t) + kv_off;
        float a = scores[t];
        for (int d = 0; d < hd; d++)
            out[d] += a * v[d];
    }
}

typedef struct attention_job {
    const pg_llama *m;
    pg_llama_state *s;
    int layer, start;
} attention_job;

/* Items [begin, end) of the (row, head) pairs, row-major. */
static void attention_items(void *ctx, size_t begin, size_t end, int tid) {
    attention_job *job = ctx;
    int heads = job->m->cfg.num_attention_heads;
    float *scores = job->s->scores + (size_t)tid * (size_t)job->m->max_context;
    for (size_t item = begin; item < end; item++)
        attend_one(job->m, job->s, job->layer, (int)(item / (size_t)heads),
                   (int)(item % (size_t)heads), job->start, scores);
}

/* Attention of the n query rows, every (row, head) pair independent: split
 * across the default pool when there is enough work (each pair is computed
 * the same way whichever thread runs it). */
static void attention(const pg_llama *m, pg_llama_state *s, int layer, int n, int start) {
    attention_job job = {.m = m, .s = s, .layer = layer, .start = start};
    size_t items = (size_t)n * (size_t)m->cfg.num_attention_heads;
    size_t per_item = (size_t)(start + n) * (size_t)m->cfg.head_dim; /* ~ multiply-adds */
    size_t grain = 32768 / (per_item + 1) + 1;
    pg_pool *pool = pg_pool_default();
    if (pool && items > grain && pg_pool_size(pool) <= s->score_rows)
        pg_pool_parallel_for(pool, items, grain, attention_items, &job);
    else
        attention_items(&job, 0, items, 0);
}

static void add_residual(float *x, const float *y, size_t n) {
    for (size_t i = 0; i < n; i++)
        x[i] += y[i];
}

/* One chunk of n <= max_tokens tokens. */
static pagoda_status forward_chunk(const pg_llama *m, pg_llama_state *s, const int32_t *tokens,
                                   int n, int start, float *logits) {
    const pg_model_config *c = &m->cfg;
    size_t H = (size_t)c->hidden_size, I = (size_t)c->intermediate_size;
    pagoda_status st;

    embed(m, s->x, tokens, n);
    for (int l = 0; l < c->num_hidden_layers; l++) {
        const llama_layer *L = &m->w.layers[l];
        /* attention block */
        pg_rmsnorm(s->xb, s->x, L->attn_norm, (size_t)n, H, c->rms_norm_eps);
        if ((st = project(s->q, s->xb, &L->wq, n))) return st;
        if ((st = project(s->k, s->xb, &L->wk, n))) return st;
        if ((st = project(s->v, s->xb, &L->wv, n))) return st;
        rotate_qk(m, s->q, s->k, n, start);
        cache_kv(s->kv, l, s->k, s->v, n, start, m->kv_dim);
        attention(m, s, l, n, start);
        if ((st = project(s->xb, s->attn, &L->wo, n))) return st;
        add_residual(s->x, s->xb, (size_t)n * H);
        /* MLP block */
        pg_rmsnorm(s->xb, s->x, L->ffn_norm, (size_t)n, H, c->rms_norm_eps);
        if ((st = project(s->gate, s->xb, &L->w_gate, n))) return st;
        if ((st = project(s->up, s->xb, &L->w_up, n))) return st;
        pg_swiglu(s->gate, s->gate, s->up, (size_t)n * I);
        if ((st = project(s->xb, s->gate, &L->w_down, n))) return st;
        add_residual(s->x, s->xb, (size_t)n * H);
    }
    if (!logits) return PAGODA_OK;
    pg_rmsnorm(s->last, s->x + (size_t)(n - 1) * H, m->w.final_norm, 1, H, c->rms_norm_eps);
    return project(logits, s->last, &m->w.lm_head, 1);
}

pagoda_status pg_llama_forward(const pg_llama *m, pg_llama_state *s, const int32_t *tokens,
                               int n_tokens, int start_pos, float *logits_out) {
    if (n_tokens < 1 || start_pos < 0)
        return pg_error(PAGODA_ERR_INVALID_ARG, "llama: bad forward call (%d tokens at %d)",
                        n_tokens, start_pos);
    if (m->n_ct)
        return pg_error(PAGODA_ERR_UNSUPPORTED,
                        "llama: compressed-tensors layers run only in the batched forward "
                        "(pg_llama_pack + pg_llama_forward_batch)");
    int ctx = m->max_context < s->kv->max_positions ? m->max_context : s->kv->max_positions;
    if (start_pos > ctx - n_tokens)
        return pg_error(PAGODA_ERR_LIMIT,
                        "llama: %d tokens at position %d exceed the context of %d tokens", n_tokens,
                        start_pos, ctx);
    for (int i = 0; i < n_tokens; i++)
        if (tokens[i] < 0 || tokens[i] >= m->cfg.vocab_size)
            return pg_error(PAGODA_ERR_INVALID_ARG, "llama: token id %d outside the vocab [0, %d)",
                            tokens[i], m->cfg.vocab_size);
    for (int done = 0; done < n_tokens;) {
        int n = n_tokens - done < s->max_tokens ? n_tokens - done : s->max_tokens;
        bool last = done + n == n_tokens;
        pagoda_status st =
            forward_chunk(m, s, tokens + done, n, start_pos + done, last ? logits_out : NULL);
        if (st != PAGODA_OK) return st;
        done += n;
    }
    return PAGODA_OK;
}

/* ==== batched forward over the paged KV cache ================================ */

static bool packable(pg_dtype t) {
    /* Q8_0 / Q4_0 rows go to the W8A8 / W4A8 kernels (kernels/qgemm.h) */
    return t == PG_F32 || t == PG_F16 || t == PG_BF16 || t == PG_Q8_0 || t == PG_Q4_0;
}

/* ---- compressed-tensors layers: unpacked once into int8 + f32 scales and
 * packed straight for the W8A8 / W4A8 kernels (no float detour); the
 * mapped pages of the source tensors are dropped afterwards. */

typedef struct ct_buf {
    int8_t *q;
    float *s;
    pg_qweight w;
} ct_buf;

static void ct_buf_free(ct_buf *b) {
    pg_free(b->q);
    pg_free(b->s);
    b->q = NULL;
    b->s = NULL;
}

/* Unpack the n layers ls[] (same K) stacked row-wise into one weight. */
static pagoda_status ct_stack(const pg_llama *m, const linear *const *ls, int n, ct_buf *b) {
    int64_t N = 0, K = ls[0]->n_in;
    for (int i = 0; i < n; i++)
        N += ls[i]->n_out;
    const int64_t ng = pg_qweight_ngroups(K, m->ct->group);
    b->q = pg_malloc_aligned((size_t)(N * K));
    b->s = pg_malloc_aligned((size_t)(N * ng) * sizeof(float));
    if (!b->q || !b->s) {
        ct_buf_free(b);
        return pg_error(PAGODA_ERR_NOMEM, "llama: out of memory unpacking compressed-tensors");
    }
    int64_t row = 0;
    for (int i = 0; i < n; i++) {
        const pg_ct_layer *t = &ls[i]->ct_w;
        pagoda_status st = pg_ct_unpack(m->ct, t->weight, t->shape, t->scale, b->q + row * K,
                                        b->s + row * ng, &b->w);
        if (st != PAGODA_OK) {
            ct_buf_free(b);
            return st;
        }
        row += ls[i]->n_out;
    }
    b->w = (pg_qweight){m->ct->bits, m->ct->group, N, K, b->q, b->s, 0};
    return PAGODA_OK;
}

/* The source pages of a packed layer are not read again. */
static void ct_release(const linear *l) {
    pg_mapped_release(l->ct_w.weight->data, l->ct_w.weight->nbytes);
    pg_mapped_release(l->ct_w.scale->data, l->ct_w.scale->nbytes);
}

/* Pack compressed-tensors layers: ls[0..n) stacked (QKV), or a SwiGLU pair
 * (gate, up) when up is given. */
static pagoda_status ct_pack(const pg_llama *m, const linear *const *ls, int n, const linear *up,
                             pg_packed_weight **out) {
    ct_buf b = {0}, bu = {0};
    pagoda_status st = ct_stack(m, ls, n, &b);
    if (st == PAGODA_OK && up) st = ct_stack(m, &up, 1, &bu);
    if (st == PAGODA_OK)
        st = pg_gemm_pack_qweight_pool(&b.w, up ? &bu.w : NULL, NULL, pg_pool_default(), out);
    ct_buf_free(&b);
    ct_buf_free(&bu);
    if (st != PAGODA_OK) return st;
    for (int i = 0; i < n; i++)
        ct_release(ls[i]);
    if (up) ct_release(up);
    return PAGODA_OK;
}

/* Mixed quantized and ignored (float) weights in one fused GEMM. */
static pagoda_status ct_mixed(const char *what, int layer) {
    return pg_error(PAGODA_ERR_UNSUPPORTED,
                    "llama: layer %d: %s mix compressed-tensors quantized and ignored (float) "
                    "weights: not supported",
                    layer, what);
}

static bool is_float(pg_dtype t) {
    return t == PG_F32 || t == PG_F16 || t == PG_BF16;
}

/* The dtype a float weight of source dtype t is packed from under the
 * model's compute dtype (see pg_llama_set_compute_dtype). */
static pg_dtype pack_dtype(const pg_llama *m, pg_dtype t) {
    if (!is_float(t) || m->compute == PG_DTYPE_COUNT) return t;
    if (m->compute == PG_F32) return PG_F32;
    return t == PG_F32 ? PG_BF16 : t; /* BF16 compute: F16 already packs to BF16 panels */
}

/* W [N, K] of dtype t converted to `to` (F32 or BF16) in a new buffer. */
static void *convert_rows(pg_dtype t, const void *W, int64_t N, int64_t K, pg_dtype to) {
    size_t n = (size_t)N * (size_t)K;
    void *dst = malloc(n * (to == PG_F32 ? 4 : 2));
    if (!dst) return NULL;
    if (to == PG_F32) {
        pg_dequant_row(t, W, dst, n);
    } else {
        const float *src = W; /* only F32 -> BF16 is asked for */
        uint16_t *d = dst;
        for (size_t i = 0; i < n; i++)
            d[i] = pg_f32_to_bf16(src[i]);
    }
    return dst;
}

/* Pack W (and W_up for a SwiGLU pair), quantizing float weights when the
 * model asks for it (quantize 0: as stored; pg_llama_pack quantizes the
 * lm_head by its own policy), and
 * converting them to the compute dtype's pack dtype first otherwise. */
static pagoda_status pack_w(const pg_llama *m, int quantize, pg_dtype t, const void *W,
                            const void *W_up, int64_t N, int64_t K, pg_packed_weight **out) {
    if (quantize && m->quant_bits && is_float(t))
        return pg_gemm_pack_quantize(t, W, W_up, N, K, m->quant_bits, m->quant_group,
                                     m->quant_act_group != 0, NULL, pg_pool_default(), out);
    pg_dtype to = pack_dtype(m, t);
    void *cw = NULL, *cu = NULL;
    if (to != t) {
        cw = convert_rows(t, W, N, K, to);
        cu = W_up ? convert_rows(t, W_up, N, K, to) : NULL;
        if (!cw || (W_up && !cu)) {
            free(cw);
            free(cu);
            return pg_error(PAGODA_ERR_NOMEM, "llama: out of memory converting a %s weight to %s",
                            pg_dtype_name(t), pg_dtype_name(to));
        }
        W = cw;
        W_up = cu;
    }
    pagoda_status st = W_up ? pg_gemm_pack_swiglu(to, W, W_up, N, K, NULL, out)
                            : pg_gemm_pack(to, W, N, K, NULL, out);
    free(cw);
    free(cu);
    return st;
}

static pagoda_status pack_one(const pg_llama *m, int quantize, const linear *l,
                              pg_packed_weight **out) {
    *out = NULL;
    if (l->ct) return ct_pack(m, &l, 1, NULL, out);
    if (!packable(l->dtype)) return PAGODA_OK;
    return pack_w(m, quantize, l->dtype, l->w, NULL, l->n_out, l->n_in, out);
}

/* Q, K and V rows stacked into one [q_dim + 2 kv_dim, hidden] weight. */
static pagoda_status stack_qkv_bias(const pg_llama *m, llama_layer *L);

static pagoda_status pack_qkv(const pg_llama *m, llama_layer *L, int layer) {
    if (L->wq.ct || L->wk.ct || L->wv.ct) {
        if (!L->wq.ct || !L->wk.ct || !L->wv.ct) return ct_mixed("q/k/v_proj", layer);
        const linear *ls[3] = {&L->wq, &L->wk, &L->wv};
        pagoda_status st = ct_pack(m, ls, 3, NULL, &L->qkv);
        if (st != PAGODA_OK || !L->wq.bias) return st;
        return stack_qkv_bias(m, L);
    }
    if (!packable(L->wq.dtype) || L->wk.dtype != L->wq.dtype || L->wv.dtype != L->wq.dtype)
        return PAGODA_OK;
    size_t row = pg_dtype_row_bytes(L->wq.dtype, (size_t)m->cfg.hidden_size);
    size_t nq = (size_t)m->q_dim, nkv = (size_t)m->kv_dim;
    uint8_t *tmp = malloc((nq + 2 * nkv) * row);
    if (!tmp) return pg_error(PAGODA_ERR_NOMEM, "llama: out of memory packing Q/K/V");
    memcpy(tmp, L->wq.w, nq * row);
    memcpy(tmp + nq * row, L->wk.w, nkv * row);
    memcpy(tmp + (nq + nkv) * row, L->wv.w, nkv * row);
    pagoda_status st =
        pack_w(m, 1, L->wq.dtype, tmp, NULL, (int64_t)(nq + 2 * nkv), m->cfg.hidden_size, &L->qkv);
    free(tmp);
    if (st != PAGODA_OK || !L->wq.bias) return st;
    return stack_qkv_bias(m, L);
}

/* The Q, K, V biases as one vector for the fused QKV GEMM. */
static pagoda_status stack_qkv_bias(const pg_llama *m, llama_layer *L) {
    size_t nq = (size_t)m->q_dim, nkv = (size_t)m->kv_dim;
    L->qkv_bias = pg_malloc_aligned((nq + 2 * nkv) * sizeof(float));
    if (!L->qkv_bias) return pg_error(PAGODA_ERR_NOMEM, "llama: out of memory");
    memcpy(L->qkv_bias, L->wq.bias, nq * sizeof(float));
    memcpy(L->qkv_bias + nq, L->wk.bias, nkv * sizeof(float));
    memcpy(L->qkv_bias + nq + nkv, L->wv.bias, nkv * sizeof(float));
    return PAGODA_OK;
}

pagoda_status pg_llama_pack_quantized(pg_llama *m, int bits, int64_t group) {
    if (bits != 0 && bits != 8 && bits != 4)
        return pg_error(PAGODA_ERR_INVALID_ARG, "llama: quantization bits %d (need 8 or 4)", bits);
    if (group < 0 || group % 32)
        return pg_error(PAGODA_ERR_INVALID_ARG,
                        "llama: quantization group size %lld (need 0 or a multiple of 32)",
                        (long long)group);
    if (m->packed && (bits != m->quant_bits || group != m->quant_group))
        return pg_error(PAGODA_ERR_INVALID_ARG, "llama: already packed with other quantization");
    if (m->quant_act_group && (!bits || group != m->quant_act_group))
        return pg_error(PAGODA_ERR_INVALID_ARG,
                        "llama: activation groups of %lld need group-wise weights of the same size "
                        "(got %s group %lld)",
                        (long long)m->quant_act_group, bits ? "quantization" : "no quantization,",
                        (long long)group);
    if (bits && m->ct)
        return pg_error(PAGODA_ERR_UNSUPPORTED,
                        "llama: the checkpoint is already quantized (compressed-tensors "
                        "quantization_config): load it without --quantization");
    m->quant_bits = bits;
    m->quant_group = group;
    /* lm_head policy (docs/QUANTIZATION.md): W8 per channel for W8A8, W4
     * with the layers' group for group-wise W4A8 (llama.cpp's Q4_0 files
     * keep it at ~6.6 bits, Q6_K; vLLM keeps it dense); per-channel W4A8
     * keeps W8. PAGODA_QUANT_LM_HEAD = none | w8 | w4 overrides. */
    m->lm_head_bits = bits == 4 && group > 0 ? 4 : bits;
    m->lm_head_group = bits == 4 && group > 0 ? group : 0;
    /* with activation groups, the lm_head's weights use those groups too
     * and its activations are scaled per group (llama.cpp's Q8_0 files keep
     * the output tensor at Q8_0) */
    m->lm_head_act = m->quant_act_group != 0;
    if (m->lm_head_act) m->lm_head_group = m->quant_act_group;
    const char *env = getenv("PAGODA_QUANT_LM_HEAD");
    if (bits && env && *env) {
        if (strcmp(env, "none") == 0)
            m->lm_head_bits = 0;
        else if (strcmp(env, "w8") == 0)
            m->lm_head_bits = 8, m->lm_head_group = 0, m->lm_head_act = 0;
        else if (strcmp(env, "w4") == 0)
            m->lm_head_bits = 4, m->lm_head_group = group > 0 ? group : 32;
        else
            return pg_error(PAGODA_ERR_INVALID_ARG,
                            "llama: PAGODA_QUANT_LM_HEAD=%s (need none, w8 or w4)", env);
    }
    return pg_llama_pack(m);
}

pagoda_status pg_llama_set_quant_act_group(pg_llama *m, int64_t act_group) {
    if (act_group < 0 || act_group % 32 || act_group > 4096)
        return pg_error(PAGODA_ERR_INVALID_ARG,
                        "llama: activation group size %lld (need 0 = per token or a multiple of 32 "
                        "up to 4096)",
                        (long long)act_group);
    if (m->packed && act_group != m->quant_act_group)
        return pg_error(PAGODA_ERR_INVALID_ARG,
                        "llama: already packed with other activation groups");
    m->quant_act_group = act_group;
    return PAGODA_OK;
}

pagoda_status pg_llama_set_compute_dtype(pg_llama *m, pg_dtype compute) {
    if (compute != PG_DTYPE_COUNT && compute != PG_F32 && compute != PG_BF16)
        return pg_error(PAGODA_ERR_INVALID_ARG, "llama: compute dtype %s (need auto, F32 or BF16)",
                        pg_dtype_name(compute));
    if (m->packed && compute != m->compute)
        return pg_error(PAGODA_ERR_INVALID_ARG, "llama: already packed with another compute dtype");
    m->compute = compute;
    return PAGODA_OK;
}

pg_dtype pg_llama_compute_dtype(const pg_llama *m) {
    return m->compute;
}

/* Each packed weight's decode prefetch hint (pg_gemm_set_next): the next one
 * the forward multiplies, in order qkv, o, gate/up, down of every layer, then
 * the lm_head, whose next is the first layer's qkv (the next step's). Weights
 * that are not packed are skipped. */
static void link_decode_order(pg_llama *m) {
    pg_packed_weight *first = NULL, *prev = NULL;
    for (int l = 0; l <= m->cfg.num_hidden_layers; l++) {
        pg_packed_weight *ws[4] = {m->lm_head_packed, NULL, NULL, NULL};
        if (l < m->cfg.num_hidden_layers) {
            llama_layer *L = &m->w.layers[l];
            ws[0] = L->qkv, ws[1] = L->o, ws[2] = L->gate_up, ws[3] = L->down;
        }
        for (int i = 0; i < 4; i++) {
            if (!ws[i]) continue;
            if (prev) pg_gemm_set_next(prev, ws[i]);
            if (!first) first = ws[i];
            prev = ws[i];
        }
    }
    if (prev && prev != first) pg_gemm_set_next(prev, first);
}

pagoda_status pg_llama_pack(pg_llama *m) {
    if (m->packed) return PAGODA_OK;
    pagoda_status st;
    for (int l = 0; l < m->cfg.num_hidden_layers; l++) {
        llama_layer *L = &m->w.layers[l];
        if ((st = pack_qkv(m, L, l)) != PAGODA_OK) return st;
        if ((st = pack_one(m, 1, &L->wo, &L->o)) != PAGODA_OK) return st;
        if ((st = pack_one(m, 1, &L->w_down, &L->down)) != PAGODA_OK) return st;
        if (L->w_gate.ct != L->w_up.ct) return ct_mixed("gate/up_proj", l);
        if (L->w_gate.ct) {
            const linear *g = &L->w_gate;
            if ((st = ct_pack(m, &g, 1, &L->w_up, &L->gate_up)) != PAGODA_OK) return st;
        } else if (packable(L->w_gate.dtype) && L->w_up.dtype == L->w_gate.dtype &&
                   (st = pack_w(m, 1, L->w_gate.dtype, L->w_gate.w, L->w_up.w, L->w_gate.n_out,
                                L->w_gate.n_in, &L->gate_up)) != PAGODA_OK)
            return st;
        if (m->quant_bits && is_float(L->w_down.dtype)) /* GGUF Q8_0/Q4_0 run as stored */
            PG_INFO("llama: quantized layer %d/%d to W%dA8", l + 1, m->cfg.num_hidden_layers,
                    m->quant_bits);
    }
    /* The lm_head (often the tied embedding: the embedding lookup keeps
     * reading the original) gets its own quantized packed copy. */
    const linear *h = &m->w.lm_head;
    if (m->lm_head_bits && !h->ct && is_float(h->dtype))
        st = pg_gemm_pack_quantize(h->dtype, h->w, NULL, h->n_out, h->n_in, m->lm_head_bits,
                                   m->lm_head_group, m->lm_head_act, NULL, pg_pool_default(),
                                   &m->lm_head_packed);
    else
        st = pack_one(m, 0, h, &m->lm_head_packed);
    if (st != PAGODA_OK) return st;
    if (m->lm_head_bits) PG_INFO("llama: quantized the lm_head to W%dA8", m->lm_head_bits);
    link_decode_order(m);
    m->packed = true;
    return PAGODA_OK;
}

/* ---- workspace: what a step holds ---- */

struct pg_llama_workspace {
    int32_t max_tokens, max_seqs;
    pg_arena arena;
    float *x;    /* residual stream [T, hidden] */
    float *xb;   /* normed input / projection output [T, hidden] */
    float *qkv;  /* [T, q_dim + 2 kv_dim] (fused) or q | k | v blocks (unpacked) */
    float *attn; /* attention output [T, q_dim] */
    float *act;  /* SwiGLU output [T, intermediate] */
    float *up;   /* [T, intermediate] only for unpacked gate/up */
    float *last; /* final-normed rows that need logits [max_seqs, hidden] */
    void *gemm_scratch;
    size_t gemm_scratch_bytes;
    void *attn_scratch;
    size_t attn_scratch_bytes;
};

static size_t gemm_need(const pg_packed_weight *w, int64_t M, int nt) {
    return w ? pg_gemm_scratch_size(w, M, nt) : 0;
}

/* Attention scratch for the worst step: the most work units (every token its
 * own request) without split-KV, or the fewest (decodes of max_model_len
 * tokens) with split-KV partials. A step needing more runs without
 * split-KV (pg_attention's documented fallback), never fails. */
static size_t attn_need(const pg_llama *m, int32_t T, int32_t S, int32_t max_len,
                        const pg_paged_kv *kv, int nt) {
    const pg_model_config *c = &m->cfg;
    pg_attn_params p = {.n_heads = c->num_attention_heads,
                        .n_kv_heads = c->num_key_value_heads,
                        .head_dim = c->head_dim,
                        .scale = 1.0f};
    int32_t n = T > S ? T : S;
    int32_t *cu = malloc((size_t)(n + 1) * sizeof(int32_t)), *lens = malloc((size_t)n * 4);
    size_t best = 0;
    if (cu && lens) {
        /* T single-token requests of length 1 */
        for (int32_t i = 0; i <= T; i++)
            cu[i] = i;
        for (int32_t i = 0; i < T; i++)
            lens[i] = 1;
        pg_attn_batch b = {.n_seqs = T, .cu_seqlens_q = cu, .seq_lens = lens};
        best = pg_attention_scratch_bytes(&p, &b, kv, nt);
        /* up to S long decodes, split across partitions */
        for (int32_t s = 1; s <= S && s <= 8 * nt; s++) {
            for (int32_t i = 0; i <= s; i++)
                cu[i] = i;
            for (int32_t i = 0; i < s; i++)
                lens[i] = max_len;
            b = (pg_attn_batch){.n_seqs = s, .cu_seqlens_q = cu, .seq_lens = lens};
            size_t need = pg_attention_scratch_bytes(&p, &b, kv, nt);
            if (need > best) best = need;
        }
    }
    free(cu);
    free(lens);
    return best;
}

pagoda_status pg_llama_workspace_create(const pg_llama *m, int32_t max_tokens, int32_t max_seqs,
                                        int32_t max_model_len, const pg_paged_kv *kv_layout,
                                        pg_llama_workspace **out) {
    *out = NULL;
    const pg_model_config *c = &m->cfg;
    if (max_tokens < 1 || max_seqs < 1 || max_model_len < 1 || !kv_layout)
        return pg_error(PAGODA_ERR_INVALID_ARG,
                        "llama: bad workspace sizes (%d tokens, %d seqs, max_model_len %d)",
                        max_tokens, max_seqs, max_model_len);
    if (!m->packed)
        return pg_error(PAGODA_ERR_INVALID_ARG,
                        "llama: pg_llama_pack must run before the workspace");
    pg_llama_workspace *ws = calloc(1, sizeof *ws);
    if (!ws) return pg_error(PAGODA_ERR_NOMEM, "llama: out of memory");
    ws->max_tokens = max_tokens;
    ws->max_seqs = max_seqs;
    pg_pool *pool = pg_pool_default();
    int nt = pool ? pg_pool_size(pool) : 1;
    size_t T = (size_t)max_tokens, H = (size_t)c->hidden_size, I = (size_t)c->intermediate_size;
    size_t qkv_dim = (size_t)m->q_dim + 2 * (size_t)m->kv_dim;
    bool unpacked_mlp = false;
    size_t gs = 0;
    for (int l = 0; l < c->num_hidden_layers; l++) {
        const llama_layer *L = &m->w.layers[l];
        size_t need[] = {gemm_need(L->qkv, max_tokens, nt), gemm_need(L->o, max_tokens, nt),
                         gemm_need(L->gate_up, max_tokens, nt), gemm_need(L->down, max_tokens, nt)};
        for (size_t i = 0; i < 4; i++)
            if (need[i] > gs) gs = need[i];
        if (!L->gate_up) unpacked_mlp = true;
    }
    size_t lm = gemm_need(m->lm_head_packed, max_seqs, nt);
    if (lm > gs) gs = lm;
    ws->gemm_scratch_bytes = gs;
    ws->attn_scratch_bytes = attn_need(m, max_tokens, max_seqs, max_model_len, kv_layout, nt);
    if (ws->attn_scratch_bytes == 0) {
        free(ws);
        return pg_error(PAGODA_ERR_INVALID_ARG, "llama: KV cache layout rejected by attention");
    }
    size_t sizes[] = {T * H * 4,
                      T * H * 4,
                      T * qkv_dim * 4,
                      T * (size_t)m->q_dim * 4,
                      T * I * 4,
                      unpacked_mlp ? T * I * 4 : 0,
                      (size_t)max_seqs * H * 4,
                      ws->gemm_scratch_bytes,
                      ws->attn_scratch_bytes};
    void **bufs[] = {(void **)&ws->x,    (void **)&ws->xb,  (void **)&ws->qkv,
                     (void **)&ws->attn, (void **)&ws->act, (void **)&ws->up,
                     (void **)&ws->last, &ws->gemm_scratch, &ws->attn_scratch};
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

void pg_llama_workspace_free(pg_llama_workspace *ws) {
    if (!ws) return;
    pg_arena_free(&ws->arena);
    free(ws);
}

size_t pg_llama_workspace_bytes(const pg_llama_workspace *ws) {
    return ws ? ws->arena.cap : 0;
}

/* ---- the batched forward: named steps ---- */

/* out[T, N] = x[T, K] W^T (+ bias) with the packed weight or the dequant path. */
static pagoda_status linear_rows(pg_llama_workspace *ws, const pg_packed_weight *pw,
                                 const linear *l, const float *bias, const float *x, int64_t T,
                                 float *out, int64_t ldc, pg_gemm_epilogue ep) {
    if (pw)
        return pg_gemm(pw, x, T, pg_gemm_k(pw), out, ldc, bias, ep, pg_pool_default(),
                       ws->gemm_scratch);
    /* dequant path (Q8_0 / Q4_0): contiguous output, epilogue by hand */
    if (ep == PG_GEMM_STORE && ldc == l->n_out)
        return pg_matmul(out, x, l->w, l->dtype, l->bias, (size_t)T, (size_t)l->n_out,
                         (size_t)l->n_in);
    return pg_error(PAGODA_ERR_INTERNAL, "llama: unpacked linear with a fused epilogue");
}

/* RMSNorm of the T rows of x [T, H] into out with the table's rmsnorm_f32
 * (a vector op: its sum order depends only on H, so a row gives the same
 * bits in any batch and any row split), rows split over the pool when T
 * is large enough to pay for a fork-join. */
typedef struct norm_job {
    float *out;
    const float *x, *w;
    size_t H;
    float eps;
    const pg_kernel_table *kt;
} norm_job;

static void norm_rows(void *ctx, size_t begin, size_t end, int tid) {
    (void)tid;
    const norm_job *j = ctx;
    j->kt->rmsnorm_f32(j->out + begin * j->H, j->x + begin * j->H, j->w, end - begin, j->H, j->eps);
}

static void rmsnorm_rows(float *out, const float *x, const float *w, int64_t T, size_t H,
                         float eps) {
    norm_job j = {out, x, w, H, eps, pg_kernels()};
    pg_pool *pool = pg_pool_default();
    if (pool && (size_t)T * H >= 65536)
        pg_pool_parallel_for(pool, (size_t)T, 16, norm_rows, &j);
    else
        norm_rows(&j, 0, (size_t)T, 0);
}

/* q|k|v of all T tokens from RMSNorm(x): (q, k, v, stride) point into
 * ws->qkv. A quantized Q/K/V weight takes the norm fused into its input
 * stage (pg_qgemm_rmsnorm: the normed rows are quantized as they are made). */
static pagoda_status project_qkv(const pg_llama *m, pg_llama_workspace *ws, const llama_layer *L,
                                 int64_t T, float **q, float **k, float **v, size_t *stride_q,
                                 size_t *stride_kv) {
    size_t nq = (size_t)m->q_dim, nkv = (size_t)m->kv_dim, H = (size_t)m->cfg.hidden_size;
    pagoda_status st;
    const struct pg_qpacked *qw = pg_gemm_qpacked(L->qkv);
    if (qw) {
        size_t ld = nq + 2 * nkv;
        st = pg_qgemm_rmsnorm(qw, ws->x, T, (int64_t)H, L->attn_norm, m->cfg.rms_norm_eps, ws->qkv,
                              (int64_t)ld, L->qkv_bias, PG_GEMM_STORE, pg_pool_default(),
                              ws->gemm_scratch);
        *q = ws->qkv;
        *k = ws->qkv + nq;
        *v = ws->qkv + nq + nkv;
        *stride_q = *stride_kv = ld;
        return st;
    }
    rmsnorm_rows(ws->xb, ws->x, L->attn_norm, T, H, m->cfg.rms_norm_eps);
    if (L->qkv) {
        size_t ld = nq + 2 * nkv;
        st = pg_gemm(L->qkv, ws->xb, T, m->cfg.hidden_size, ws->qkv, (int64_t)ld, L->qkv_bias,
                     PG_GEMM_STORE, pg_pool_default(), ws->gemm_scratch);
        *q = ws->qkv;
        *k = ws->qkv + nq;
        *v = ws->qkv + nq + nkv;
        *stride_q = *stride_kv = ld;
        return st;
    }
    *q = ws->qkv;
    *k = ws->qkv + (size_t)T * nq;
    *v = *k + (size_t)T * nkv;
    *stride_q = nq;
    *stride_kv = nkv;
    if ((st = project(*q, ws->xb, &L->wq, (int)T)) != PAGODA_OK) return st;
    if ((st = project(*k, ws->xb, &L->wk, (int)T)) != PAGODA_OK) return st;
    return project(*v, ws->xb, &L->wv, (int)T);
}

/* x += y Wo^T (or Wdown^T): residual add in the GEMM epilogue when packed. */
static pagoda_status project_residual(pg_llama_workspace *ws, const pg_packed_weight *pw,
                                      const linear *l, const float *in, int64_t T, float *x) {
    if (pw)
        return pg_gemm(pw, in, T, pg_gemm_k(pw), x, pg_gemm_n(pw), l->bias, PG_GEMM_RESIDUAL,
                       pg_pool_default(), ws->gemm_scratch);
    pagoda_status st = project(ws->xb, in, l, (int)T);
    if (st == PAGODA_OK) add_residual(x, ws->xb, (size_t)T * (size_t)l->n_out);
    return st;
}

/* act = silu(h Wgate^T) * (h Wup^T), h = RMSNorm(x) (fused into a
 * quantized gate/up weight's input stage, as for Q/K/V). */
static pagoda_status mlp_swiglu(const pg_llama *m, pg_llama_workspace *ws, const llama_layer *L,
                                int64_t T) {
    const size_t H = (size_t)m->cfg.hidden_size;
    const struct pg_qpacked *qw = pg_gemm_qpacked(L->gate_up);
    if (qw)
        return pg_qgemm_rmsnorm(qw, ws->x, T, (int64_t)H, L->ffn_norm, m->cfg.rms_norm_eps, ws->act,
                                pg_gemm_n(L->gate_up), NULL, PG_GEMM_SWIGLU, pg_pool_default(),
                                ws->gemm_scratch);
    rmsnorm_rows(ws->xb, ws->x, L->ffn_norm, T, H, m->cfg.rms_norm_eps);
    if (L->gate_up)
        return pg_gemm(L->gate_up, ws->xb, T, pg_gemm_k(L->gate_up), ws->act, pg_gemm_n(L->gate_up),
                       NULL, PG_GEMM_SWIGLU, pg_pool_default(), ws->gemm_scratch);
    pagoda_status st;
    if ((st = project(ws->act, ws->xb, &L->w_gate, (int)T)) != PAGODA_OK) return st;
    if ((st = project(ws->up, ws->xb, &L->w_up, (int)T)) != PAGODA_OK) return st;
    pg_kernels()->swiglu_f32(ws->act, ws->act, ws->up, (size_t)T * (size_t)L->w_gate.n_out);
    return PAGODA_OK;
}

static pagoda_status check_batch(const pg_llama *m, const pg_llama_workspace *ws,
                                 const pg_llama_batch *b) {
    if (!m->packed)
        return pg_error(PAGODA_ERR_INVALID_ARG, "llama: batched forward before pg_llama_pack");
    if (b->num_tokens < 1 || b->num_tokens > ws->max_tokens || b->num_seqs < 1 ||
        b->num_seqs > ws->max_seqs || b->num_logits < 0 || b->num_logits > ws->max_seqs)
        return pg_error(PAGODA_ERR_INVALID_ARG,
                        "llama: step of %d tokens / %d requests / %d logit rows exceeds the "
                        "workspace (%d tokens, %d requests)",
                        b->num_tokens, b->num_seqs, b->num_logits, ws->max_tokens, ws->max_seqs);
    for (int32_t i = 0; i < b->num_tokens; i++)
        if (b->token_ids[i] < 0 || b->token_ids[i] >= m->cfg.vocab_size)
            return pg_error(PAGODA_ERR_INVALID_ARG, "llama: token id %d outside the vocab [0, %d)",
                            b->token_ids[i], m->cfg.vocab_size);
    for (int32_t i = 0; i < b->num_logits; i++)
        if (b->logit_rows[i] < 0 || b->logit_rows[i] >= b->num_tokens)
            return pg_error(PAGODA_ERR_INVALID_ARG, "llama: logit row %d outside the step",
                            b->logit_rows[i]);
    return PAGODA_OK;
}

pagoda_status pg_llama_forward_batch(const pg_llama *m, pg_llama_workspace *ws, pg_paged_kv *kv,
                                     const pg_llama_batch *b, float *logits) {
    pagoda_status st = check_batch(m, ws, b);
    if (st != PAGODA_OK) return st;
    const pg_model_config *c = &m->cfg;
    const int64_t T = b->num_tokens;
    const size_t H = (size_t)c->hidden_size;
    pg_pool *pool = pg_pool_default();
    pg_rope_spec rope = {.style = c->rope_interleaved ? PG_ROPE_INTERLEAVED : PG_ROPE_NEOX,
                         .rotary_dim = c->head_dim,
                         .inv_freq = m->rope_inv_freq};
    pg_attn_params ap = {.n_heads = c->num_attention_heads,
                         .n_kv_heads = c->num_key_value_heads,
                         .head_dim = c->head_dim,
                         .scale = 1.0f / sqrtf((float)c->head_dim),
                         .sliding_window = c->sliding_window};
    pg_attn_batch ab = {.n_seqs = b->num_seqs,
                        .cu_seqlens_q = b->query_start_loc,
                        .seq_lens = b->seq_lens,
                        .block_tables = b->block_tables};

    embed(m, ws->x, b->token_ids, (int)T);
    for (int l = 0; l < c->num_hidden_layers; l++) {
        const llama_layer *L = &m->w.layers[l];
        /* attention block */
        float *q, *k, *v;
        size_t ldq, ldkv;
        if ((st = project_qkv(m, ws, L, T, &q, &k, &v, &ldq, &ldkv)) != PAGODA_OK) return st;
        if ((st = pg_rope_kv_store(&rope, (int32_t)T, b->positions, b->slot_mapping, q, ldq,
                                   c->num_attention_heads, k, ldkv, v, ldkv, &kv[l])) != PAGODA_OK)
            return st;
        if ((st = pg_attention(&ap, &ab, &kv[l], q, ldq, ws->attn, (size_t)m->q_dim,
                               ws->attn_scratch, ws->attn_scratch_bytes, pool, NULL)) != PAGODA_OK)
            return st;
        if ((st = project_residual(ws, L->o, &L->wo, ws->attn, T, ws->x)) != PAGODA_OK) return st;
        /* MLP block */
        if ((st = mlp_swiglu(m, ws, L, T)) != PAGODA_OK) return st;
        if ((st = project_residual(ws, L->down, &L->w_down, ws->act, T, ws->x)) != PAGODA_OK)
            return st;
    }
    if (b->num_logits == 0) return PAGODA_OK;
    /* final norm and LM head of the rows that sample */
    for (int32_t i = 0; i < b->num_logits; i++)
        pg_kernels()->rmsnorm_f32(ws->last + (size_t)i * H, ws->x + (size_t)b->logit_rows[i] * H,
                                  m->w.final_norm, 1, H, c->rms_norm_eps);
    return linear_rows(ws, m->lm_head_packed, &m->w.lm_head, NULL, ws->last, b->num_logits, logits,
                       c->vocab_size, PG_GEMM_STORE);
}
