/* quant_kl: accuracy of quantized inference (docs/QUANTIZATION.md).
 *
 *   quant_kl MODEL TOKENS_FILE [--threads T] [--max-tokens N] [--lm-head] [--quick]
 *            [--ct CT_DIR]... [--ct-only]
 *   (--quick: W8A8 per-channel, W8A8 g32 act g32, W4A8 g32 and the two
 *   llama.cpp emulations only; --ct: also a compressed-tensors checkpoint
 *   of the same model, e.g. written by gen_model --from MODEL, whose
 *   quantized layers are read as stored and run on the W8A8 / W4A8 kernels;
 *   its ignored layers use MODEL's f32 weights; --ct-only: skip the
 *   built-in schemes)
 *
 * Runs a Llama model teacher-forced over the token ids in TOKENS_FILE (every
 * integer in the file after "PROMPT_TOKENS:" / "GEN:" labels, e.g. the
 * llama2.c reference outputs in shared/assets/llm/llama2c/expected/) once
 * with exact f32 linear layers (the reference) and once per quantization
 * scheme, and prints for each scheme the mean and max KL divergence
 * KL(P_ref || P_quant) of the next-token distributions over all positions
 * and the top-1 agreement (the two measures of llama-perplexity
 * --kl-divergence: "Mean KLD" and "Same top p").
 *
 * Schemes: pagoda's W8A8 per channel and group 32, W4A8 per channel and
 * group 32/64/128 (kernels/qgemm.h, dynamic per-token int8 activations;
 * "act gN": one activation scale per token and weight group instead,
 * engine option --quant-act-group; "per-channel, act gN": per-channel
 * weight scales repeated over groups of N; "pc, down ...": per channel
 * everywhere but the down projection),
 * and an emulation of llama.cpp's CPU arithmetic for Q8_0 / Q4_0 weights:
 * activations quantized to Q8_0 blocks of 32 (f16 block scales) and each
 * block's integer dot product scaled by d_w * d_a (ggml's reference
 * quantizers and vec_dot_q8_0_q8_0 / vec_dot_q4_0_q8_0), so both are
 * measured on the same forward pass. Embeddings stay f32; the lm_head is
 * quantized only with --lm-head. Everything but the linear layers is the
 * same code for every scheme (RMSNorm, RoPE, causal GQA attention, SwiGLU).
 *
 * The forward pass here is a compact full-sequence Llama (one GEMM per
 * linear layer over all positions), independent of the engine's paged one. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/dtype.h"
#include "base/pool.h"
#include "kernels/gemm.h"
#include "kernels/ops.h"
#include "kernels/qgemm.h"
#include "model/compressed_tensors.h"
#include "model/source.h"

typedef enum { S_F32, S_Q, S_EMUL, S_CT } kind;
typedef struct {
    const char *name;
    kind k;
    int bits;
    int64_t group;
    int act_group;             /* activation scales per (token, weight group) */
    int quick;                 /* in the --quick set */
    const pg_model_source *ct; /* S_CT: the compressed-tensors checkpoint */
    /* per-channel weight scales even though group > 0 (each channel's one
     * scale repeated over its groups, so only the activations are
     * group-wise) */
    int pc_weights;
    /* the down projection instead: 1 = g32 act g32, 2 = per-channel
     * weights with act g32 (the others keep bits/group/act_group above) */
    int down;
} scheme;

static const scheme SCHEMES[] = {
    {"f32 (reference)", S_F32, 0, 0, 0, 1, NULL, 0, 0},
    {"W8A8 per-channel", S_Q, 8, 0, 0, 1, NULL, 0, 0},
    {"W8A8 g32", S_Q, 8, 32, 0, 0, NULL, 0, 0},
    {"W8A8 g32, act g32", S_Q, 8, 32, 1, 1, NULL, 0, 0},
    {"W8A8 g64, act g64", S_Q, 8, 64, 1, 0, NULL, 0, 0},
    {"W8A8 g128, act g128", S_Q, 8, 128, 1, 0, NULL, 0, 0},
    {"W8A8 per-channel, act g32", S_Q, 8, 32, 1, 0, NULL, 1, 0},
    {"W8A8 per-channel, act g128", S_Q, 8, 128, 1, 0, NULL, 1, 0},
    {"W8A8 pc, down act g32", S_Q, 8, 0, 0, 0, NULL, 0, 2},
    {"W8A8 pc, down g32 act g32", S_Q, 8, 0, 0, 0, NULL, 0, 1},
    {"W4A8 per-channel", S_Q, 4, 0, 0, 0, NULL, 0, 0},
    {"W4A8 g32", S_Q, 4, 32, 0, 1, NULL, 0, 0},
    {"W4A8 g64", S_Q, 4, 64, 0, 0, NULL, 0, 0},
    {"W4A8 g128", S_Q, 4, 128, 0, 0, NULL, 0, 0},
    {"W4A8 g32, act g32", S_Q, 4, 32, 1, 0, NULL, 0, 0},
    {"W4A8 g128, act g128", S_Q, 4, 128, 1, 0, NULL, 0, 0},
    {"llama.cpp Q8_0 (emulated)", S_EMUL, 8, 32, 1, 1, NULL, 0, 0},
    {"llama.cpp Q4_0 (emulated)", S_EMUL, 4, 32, 1, 1, NULL, 0, 0},
};
enum { N_SCHEMES = sizeof SCHEMES / sizeof SCHEMES[0] };

/* A linear layer: a packed weight, or the emulated ggml blocks. */
typedef struct {
    pg_packed_weight *pw;
    int64_t N, K;
    int swiglu;
    int8_t *q; /* emul: [halves * N * K] */
    float *d;  /* emul: block scales (f16-rounded) [halves * N * nb] */
} linear;

static float f16r(float x) {
    return pg_f16_to_f32(pg_f32_to_f16(x));
}

/* ggml quantize_row_q8_0_ref / quantize_row_q4_0_ref on one block. */
static float ggml_block(const float *x, int n, int bits, int8_t *q) {
    float amax = 0, max = 0;
    for (int j = 0; j < n; j++)
        if (fabsf(x[j]) > amax) amax = fabsf(x[j]), max = x[j];
    float d = bits == 8 ? amax / 127.0f : max / -8.0f;
    float id = d != 0.0f ? 1.0f / d : 0.0f;
    for (int j = 0; j < n; j++) {
        if (bits == 8) {
            q[j] = (int8_t)roundf(x[j] * id);
        } else {
            int v = (int)(x[j] * id + 8.5f);
            q[j] = (int8_t)((v > 15 ? 15 : v) - 8);
        }
    }
    return f16r(d);
}

static void emul_pack(linear *l, const float *W, const float *Wu, int bits) {
    int halves = Wu ? 2 : 1;
    int64_t nb = (l->K + 31) / 32;
    l->q = malloc((size_t)(halves * l->N * l->K));
    l->d = malloc((size_t)(halves * l->N * nb) * sizeof(float));
    for (int h = 0; h < halves; h++) {
        const float *src = h ? Wu : W;
        for (int64_t n = 0; n < l->N; n++)
            for (int64_t b = 0; b < nb; b++) {
                int cnt = (int)(l->K - 32 * b < 32 ? l->K - 32 * b : 32);
                l->d[(h * l->N + n) * nb + b] = ggml_block(src + n * l->K + 32 * b, cnt, bits,
                                                           l->q + (h * l->N + n) * l->K + 32 * b);
            }
    }
}

static float silu(float x) {
    return x / (1.0f + expf(-x));
}

static void emul_run(const linear *l, const float *A, int64_t M, float *C, int residual) {
    int64_t nb = (l->K + 31) / 32;
    int8_t *qa = malloc((size_t)l->K);
    float *da = malloc((size_t)nb * sizeof(float));
    for (int64_t m = 0; m < M; m++) {
        for (int64_t b = 0; b < nb; b++) {
            int cnt = (int)(l->K - 32 * b < 32 ? l->K - 32 * b : 32);
            da[b] = ggml_block(A + m * l->K + 32 * b, cnt, 8, qa + 32 * b);
        }
        for (int64_t n = 0; n < l->N; n++) {
            float y[2];
            for (int h = 0; h < (l->swiglu ? 2 : 1); h++) {
                const int8_t *qw = l->q + (h * l->N + n) * l->K;
                const float *dw = l->d + (h * l->N + n) * nb;
                float s = 0;
                for (int64_t b = 0; b < nb; b++) {
                    int isum = 0;
                    for (int64_t k = 32 * b; k < l->K && k < 32 * b + 32; k++)
                        isum += qw[k] * qa[k];
                    s += (float)isum * (dw[b] * da[b]);
                }
                y[h] = s;
            }
            float v = l->swiglu ? silu(y[0]) * y[1] : y[0];
            if (residual)
                C[m * l->N + n] += v;
            else
                C[m * l->N + n] = v;
        }
    }
    free(qa);
    free(da);
}

static pg_pool *g_pool;

/* Per-channel weight scales, activation scales per (token, group of
 * `group`): the channel's scale repeated over its groups. */
static pagoda_status pack_pc_act(const float *W, const float *Wu, int64_t N, int64_t K, int bits,
                                 int64_t group, pg_packed_weight **out) {
    const int64_t ng = pg_qweight_ngroups(K, group);
    int8_t *q = malloc((size_t)(2 * N * K));
    float *s1 = malloc((size_t)N * sizeof(float)),
          *s = malloc((size_t)(2 * N * ng) * sizeof(float));
    pg_qweight w[2];
    for (int h = 0; h < (Wu ? 2 : 1); h++) {
        pg_qgemm_quantize_weight(PG_F32, h ? Wu : W, K, bits, 0, 0, N, q + h * N * K, s1);
        for (int64_t n = 0; n < N; n++)
            for (int64_t g = 0; g < ng; g++)
                s[(h * N + n) * ng + g] = s1[n];
        w[h] = (pg_qweight){bits, group, N, K, q + h * N * K, s + h * N * ng, 1};
    }
    pagoda_status st = pg_gemm_pack_qweight(&w[0], Wu ? &w[1] : NULL, NULL, out);
    free(q);
    free(s1);
    free(s);
    return st;
}

static void make_linear(linear *l, const scheme *s, const float *W, const float *Wu, int64_t N,
                        int64_t K, int is_down) {
    memset(l, 0, sizeof *l);
    l->N = N;
    l->K = K;
    l->swiglu = Wu != NULL;
    pagoda_status st = PAGODA_OK;
    int64_t group = s->group;
    int act = s->act_group, pcw = s->pc_weights;
    if (is_down && s->down) group = 32, act = 1, pcw = s->down == 2;
    if (s->k == S_F32)
        st = Wu ? pg_gemm_pack_swiglu(PG_F32, W, Wu, N, K, NULL, &l->pw)
                : pg_gemm_pack(PG_F32, W, N, K, NULL, &l->pw);
    else if (s->k == S_Q && pcw)
        st = pack_pc_act(W, Wu, N, K, s->bits, group, &l->pw);
    else if (s->k == S_Q)
        st = pg_gemm_pack_quantize(PG_F32, W, Wu, N, K, s->bits, group, act, NULL, g_pool, &l->pw);
    else
        emul_pack(l, W, Wu, s->bits);
    if (st) {
        fprintf(stderr, "quant_kl: %s\n", pg_last_error());
        exit(1);
    }
}

/* S_CT: layer `prefix` (and `up` for the SwiGLU pair) as stored in the
 * checkpoint; NULL weight (dense, ignored) falls back to f32 W / Wu. */
static void make_ct_linear(linear *l, const scheme *s, const char *prefix, const char *up,
                           const float *W, const float *Wu, int64_t N, int64_t K) {
    const pg_ct_config *c = pg_model_source_ct(s->ct);
    if (!pg_ct_quantized(c, prefix)) {
        make_linear(l, &SCHEMES[0], W, Wu, N, K, 0);
        return;
    }
    memset(l, 0, sizeof *l);
    l->N = N;
    l->K = K;
    l->swiglu = up != NULL;
    const int64_t ng = pg_qweight_ngroups(K, c->group);
    int8_t *q = malloc((size_t)(2 * N * K));
    float *sc = malloc((size_t)(2 * N * ng) * sizeof(float));
    pg_qweight w[2];
    pagoda_status st = q && sc ? PAGODA_OK : pg_error(PAGODA_ERR_NOMEM, "out of memory");
    for (int h = 0; h < (up ? 2 : 1) && !st; h++) {
        pg_ct_layer t;
        st = pg_ct_find_layer(c, s->ct, h ? up : prefix, N, K, &t);
        if (!st)
            st = pg_ct_unpack(c, t.weight, t.shape, t.scale, q + h * N * K, sc + h * N * ng, &w[h]);
    }
    if (!st) st = pg_gemm_pack_qweight(&w[0], up ? &w[1] : NULL, NULL, &l->pw);
    free(q);
    free(sc);
    if (st) {
        fprintf(stderr, "quant_kl: %s\n", pg_last_error());
        exit(1);
    }
}

static void free_linear(linear *l) {
    pg_gemm_free(l->pw);
    free(l->q);
    free(l->d);
}

static void *g_scratch;
static size_t g_scratch_bytes;

static void run_linear(const linear *l, const float *A, int64_t M, float *C, int residual) {
    if (!l->pw) {
        emul_run(l, A, M, C, residual);
        return;
    }
    size_t need = pg_gemm_scratch_size(l->pw, M, pg_pool_size(g_pool));
    if (need > g_scratch_bytes) {
        pg_free(g_scratch);
        g_scratch = pg_malloc_aligned(need);
        g_scratch_bytes = need;
    }
    pg_gemm_epilogue ep = l->swiglu ? PG_GEMM_SWIGLU : residual ? PG_GEMM_RESIDUAL : PG_GEMM_STORE;
    if (pg_gemm(l->pw, A, M, l->K, C, l->N, NULL, ep, g_pool, g_scratch)) {
        fprintf(stderr, "quant_kl: %s\n", pg_last_error());
        exit(1);
    }
}

static float *tensor_f32(const pg_model_source *src, const char *name, int64_t *rows,
                         int64_t *cols) {
    const pg_tensor *t = pg_model_source_tensor(src, name);
    if (!t) return NULL;
    int64_t r = t->ndim == 1 ? 1 : t->shape[0], c = t->ndim == 1 ? t->shape[0] : t->shape[1];
    float *out = malloc((size_t)(r * c) * sizeof(float));
    size_t rb = pg_dtype_row_bytes(t->dtype, (size_t)c);
    for (int64_t i = 0; i < r; i++)
        pg_dequant_row(t->dtype, (const char *)t->data + (size_t)i * rb, out + i * c, (size_t)c);
    if (rows) *rows = r;
    if (cols) *cols = c;
    return out;
}

typedef struct {
    linear q, k, v, o, gu, down;
} layer_w;

/* logits [T, V] of the model under scheme s. */
static void forward(const pg_model_source *src, const scheme *s, const scheme *lm_scheme,
                    const int *tok, int T, float *logits) {
    const pg_model_config *c = pg_model_source_config(src);
    const int H = c->hidden_size, L = c->num_hidden_layers, nh = c->num_attention_heads,
              nkv = c->num_key_value_heads, hd = c->head_dim, F = c->intermediate_size,
              V = c->vocab_size;
    char name[256];
    float *emb = tensor_f32(src, "model.embed_tokens.weight", NULL, NULL);
    float *x = malloc((size_t)T * H * sizeof(float)), *h = malloc((size_t)T * H * sizeof(float));
    float *q = malloc((size_t)T * nh * hd * sizeof(float));
    float *k = malloc((size_t)T * nkv * hd * sizeof(float));
    float *v = malloc((size_t)T * nkv * hd * sizeof(float));
    float *att = malloc((size_t)T * nh * hd * sizeof(float));
    float *act = malloc((size_t)T * F * sizeof(float));
    float *sc = malloc((size_t)T * sizeof(float));
    float inv_freq[512];
    pg_rope_freq_params rp = {.head_dim = hd,
                              .theta = c->rope_theta,
                              .scaling = PG_ROPE_FREQ_NONE,
                              .factor = 1,
                              .low_freq_factor = 1,
                              .high_freq_factor = 1,
                              .original_max_position = 1};
    if (c->rope_scaling == PG_ROPE_SCALING_LLAMA3) {
        rp.scaling = PG_ROPE_FREQ_LLAMA3;
        rp.factor = c->rope_factor;
        rp.low_freq_factor = c->rope_low_freq_factor;
        rp.high_freq_factor = c->rope_high_freq_factor;
        rp.original_max_position = c->rope_original_max_position;
    }
    pg_rope_inv_freq(&rp, inv_freq);
    for (int t = 0; t < T; t++)
        memcpy(x + (size_t)t * H, emb + (size_t)tok[t] * H, (size_t)H * sizeof(float));
    for (int l = 0; l < L; l++) {
        layer_w w;
        const char *nm[] = {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj",
                            "self_attn.o_proj", "mlp.gate_proj",    "mlp.up_proj",
                            "mlp.down_proj"};
        float *W[7];
        int64_t rows[7], cols[7];
        for (int i = 0; i < 7; i++) {
            snprintf(name, sizeof name, "model.layers.%d.%s.weight", l, nm[i]);
            W[i] = tensor_f32(src, name, &rows[i], &cols[i]);
        }
        if (s->k == S_CT) {
            char p[7][200];
            for (int i = 0; i < 7; i++)
                snprintf(p[i], sizeof p[i], "model.layers.%d.%s", l, nm[i]);
            linear *dst[7] = {&w.q, &w.k, &w.v, &w.o, &w.gu, NULL, &w.down};
            for (int i = 0; i < 7; i++)
                if (dst[i])
                    make_ct_linear(dst[i], s, p[i], i == 4 ? p[5] : NULL, W[i],
                                   i == 4 ? W[5] : NULL, rows[i], cols[i]);
        } else {
            make_linear(&w.q, s, W[0], NULL, rows[0], cols[0], 0);
            make_linear(&w.k, s, W[1], NULL, rows[1], cols[1], 0);
            make_linear(&w.v, s, W[2], NULL, rows[2], cols[2], 0);
            make_linear(&w.o, s, W[3], NULL, rows[3], cols[3], 0);
            make_linear(&w.gu, s, W[4], W[5], rows[4], cols[4], 0);
            make_linear(&w.down, s, W[6], NULL, rows[6], cols[6], 1);
        }
        for (int i = 0; i < 7; i++)
            free(W[i]);
        snprintf(name, sizeof name, "model.layers.%d.input_layernorm.weight", l);
        float *ln1 = tensor_f32(src, name, NULL, NULL);
        snprintf(name, sizeof name, "model.layers.%d.post_attention_layernorm.weight", l);
        float *ln2 = tensor_f32(src, name, NULL, NULL);

        pg_rmsnorm(h, x, ln1, (size_t)T, (size_t)H, c->rms_norm_eps);
        run_linear(&w.q, h, T, q, 0);
        run_linear(&w.k, h, T, k, 0);
        run_linear(&w.v, h, T, v, 0);
        for (int t = 0; t < T; t++) {
            pg_rope(q + (size_t)t * nh * hd, (size_t)nh, (size_t)hd, t, inv_freq,
                    c->rope_interleaved);
            pg_rope(k + (size_t)t * nkv * hd, (size_t)nkv, (size_t)hd, t, inv_freq,
                    c->rope_interleaved);
        }
        const float scale = 1.0f / sqrtf((float)hd);
        for (int t = 0; t < T; t++)
            for (int hh = 0; hh < nh; hh++) {
                const int kh = hh / (nh / nkv);
                const float *qv = q + ((size_t)t * nh + hh) * hd;
                for (int u = 0; u <= t; u++) {
                    const float *kv = k + ((size_t)u * nkv + kh) * hd;
                    float d = 0;
                    for (int i = 0; i < hd; i++)
                        d += qv[i] * kv[i];
                    sc[u] = d * scale;
                }
                pg_softmax(sc, (size_t)t + 1);
                float *o = att + ((size_t)t * nh + hh) * hd;
                memset(o, 0, (size_t)hd * sizeof(float));
                for (int u = 0; u <= t; u++) {
                    const float *vv = v + ((size_t)u * nkv + kh) * hd;
                    for (int i = 0; i < hd; i++)
                        o[i] += sc[u] * vv[i];
                }
            }
        run_linear(&w.o, att, T, x, 1);
        pg_rmsnorm(h, x, ln2, (size_t)T, (size_t)H, c->rms_norm_eps);
        run_linear(&w.gu, h, T, act, 0);
        run_linear(&w.down, act, T, x, 1);
        free(ln1);
        free(ln2);
        free_linear(&w.q);
        free_linear(&w.k);
        free_linear(&w.v);
        free_linear(&w.o);
        free_linear(&w.gu);
        free_linear(&w.down);
    }
    float *fn = tensor_f32(src, "model.norm.weight", NULL, NULL);
    pg_rmsnorm(h, x, fn, (size_t)T, (size_t)H, c->rms_norm_eps);
    float *lm = tensor_f32(src, "lm_head.weight", NULL, NULL);
    linear head;
    if (s->k == S_CT)
        make_ct_linear(&head, s, "lm_head", NULL, lm ? lm : emb, NULL, V, H);
    else
        make_linear(&head, lm_scheme, lm ? lm : emb, NULL, V, H, 0);
    run_linear(&head, h, T, logits, 0);
    free_linear(&head);
    free(lm);
    free(fn);
    free(emb);
    free(x);
    free(h);
    free(q);
    free(k);
    free(v);
    free(att);
    free(act);
    free(sc);
}

static void log_softmax(const float *z, int n, double *out) {
    double m = z[0];
    for (int i = 1; i < n; i++)
        m = z[i] > m ? z[i] : m;
    double s = 0;
    for (int i = 0; i < n; i++)
        s += exp(z[i] - m);
    double ls = log(s) + m;
    for (int i = 0; i < n; i++)
        out[i] = z[i] - ls;
}

static int argmax(const float *z, int n) {
    int b = 0;
    for (int i = 1; i < n; i++)
        if (z[i] > z[b]) b = i;
    return b;
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: quant_kl MODEL TOKENS_FILE [--threads T] [--max-tokens N] "
                        "[--lm-head] [--quick] [--ct CT_DIR]... [--ct-only]\n");
        return 2;
    }
    int threads = 2, max_tokens = 1024, lm_q = 0, quick = 0, n_ct = 0, ct_only = 0;
    enum { MAX_CT = 8 };
    scheme cts[MAX_CT];
    pg_model_source *ct_src[MAX_CT] = {0};
    for (int i = 3; i < argc; i++) {
        if (!strcmp(argv[i], "--ct") && i + 1 < argc && n_ct < MAX_CT) {
            const char *dir = argv[++i];
            if (pg_model_source_open(dir, &ct_src[n_ct])) {
                fprintf(stderr, "quant_kl: %s\n", pg_last_error());
                return 1;
            }
            if (!pg_model_source_ct(ct_src[n_ct])) {
                fprintf(stderr, "quant_kl: %s is not a compressed-tensors checkpoint\n", dir);
                return 1;
            }
            const char *base = strrchr(dir, '/');
            cts[n_ct] =
                (scheme){base && base[1] ? base + 1 : dir, S_CT, 0, 0, 0, 1, ct_src[n_ct], 0, 0};
            n_ct++;
            continue;
        }
        if (!strcmp(argv[i], "--threads") && i + 1 < argc)
            threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--max-tokens") && i + 1 < argc)
            max_tokens = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--lm-head"))
            lm_q = 1;
        else if (!strcmp(argv[i], "--quick"))
            quick = 1;
        else if (!strcmp(argv[i], "--ct-only"))
            ct_only = 1;
        else {
            fprintf(stderr, "quant_kl: unknown option '%s'\n", argv[i]);
            return 2;
        }
    }
    pg_model_source *src = NULL;
    if (pg_model_source_open(argv[1], &src)) {
        fprintf(stderr, "quant_kl: %s\n", pg_last_error());
        return 1;
    }
    FILE *f = fopen(argv[2], "r");
    if (!f) {
        fprintf(stderr, "quant_kl: cannot open %s\n", argv[2]);
        return 1;
    }
    int *tok = malloc((size_t)max_tokens * sizeof(int)), T = 0, ch;
    const pg_model_config *c = pg_model_source_config(src);
    while (T < max_tokens && (ch = fgetc(f)) != EOF) {
        if (ch < '0' || ch > '9') continue;
        int v = ch - '0';
        while ((ch = fgetc(f)) >= '0' && ch <= '9')
            v = v * 10 + (ch - '0');
        if (v < c->vocab_size) tok[T++] = v;
    }
    fclose(f);
    if (T < 2) {
        fprintf(stderr, "quant_kl: fewer than 2 tokens in %s\n", argv[2]);
        return 1;
    }
    pg_pool_options o = pg_pool_options_default();
    o.n_threads = threads;
    if (pg_pool_create(&o, &g_pool)) {
        fprintf(stderr, "quant_kl: %s\n", pg_last_error());
        return 1;
    }
    const int V = c->vocab_size;
    float *ref = malloc((size_t)T * V * sizeof(float)),
          *got = malloc((size_t)T * V * sizeof(float));
    double *lp = malloc((size_t)V * sizeof(double)), *lq = malloc((size_t)V * sizeof(double));
    forward(src, &SCHEMES[0], &SCHEMES[0], tok, T, ref);
    printf("quant_kl: %s, %d tokens teacher-forced (%d positions), lm_head %s\n", argv[1], T, T - 1,
           lm_q ? "quantized" : "f32");
    int follow = 0;
    for (int t = 0; t < T - 1; t++)
        follow += argmax(ref + (size_t)t * V, V) == tok[t + 1];
    printf("reference top-1 == the file's next token at %.2f%% of positions (100%% for a greedy "
           "transcript of this model)\n",
           100.0 * follow / (T - 1));
    printf("%-28s %12s %12s %10s\n", "scheme", "mean KLD", "max KLD", "same top1");
    for (int si = 1; si < N_SCHEMES + n_ct; si++) {
        const scheme *s = si < N_SCHEMES ? &SCHEMES[si] : &cts[si - N_SCHEMES];
        if ((quick && !s->quick) || (ct_only && s->k != S_CT)) continue;
        forward(src, s, lm_q ? s : &SCHEMES[0], tok, T, got);
        double kl_sum = 0, kl_max = 0;
        int same = 0;
        /* positions 0..T-2 predict tokens 1..T-1 (llama-perplexity scores all) */
        for (int t = 0; t < T - 1; t++) {
            log_softmax(ref + (size_t)t * V, V, lp);
            log_softmax(got + (size_t)t * V, V, lq);
            double kl = 0;
            for (int i = 0; i < V; i++)
                kl += exp(lp[i]) * (lp[i] - lq[i]);
            kl_sum += kl;
            kl_max = kl > kl_max ? kl : kl_max;
            same += argmax(ref + (size_t)t * V, V) == argmax(got + (size_t)t * V, V);
        }
        printf("%-28s %12.6f %12.6f %9.2f%%\n", s->name, kl_sum / (T - 1), kl_max,
               100.0 * same / (T - 1));
        fflush(stdout);
    }
    free(ref);
    free(got);
    free(lp);
    free(lq);
    free(tok);
    pg_free(g_scratch);
    pg_pool_free(g_pool);
    for (int i = 0; i < n_ct; i++)
        pg_model_source_free(ct_src[i]);
    pg_model_source_free(src);
    return 0;
}
