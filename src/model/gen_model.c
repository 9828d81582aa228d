/* Random-weight Llama model writer (HF directory and/or GGUF). */
#include "model/gen_model.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/log.h"
#include "model/compressed_tensors.h"
#include "model/gguf.h"
#include "model/safetensors.h"

void pg_gen_model_defaults(pg_gen_model_options *o) {
    memset(o, 0, sizeof *o);
    o->hidden = 64;
    o->layers = 2;
    o->heads = 4;
    o->kv_heads = 2;
    o->ffn = 128;
    o->vocab = 512;
    o->max_position = 2048;
    o->tie = true;
    o->rope_theta = 10000.0f;
    o->rms_eps = 1e-5f;
    o->init_std = 0.02f;
    o->rope_scaling = PG_ROPE_SCALING_NONE;
    o->bos_token_id = 1;
    o->eos_token_id = 2;
    o->seed = 1;
    o->hf_dtype = PG_F32;
    o->gguf_dtype = PG_F32;
    o->shards = 1;
}

pagoda_status pg_gen_model_preset(pg_gen_model_options *o, const char *name) {
    if (!strcmp(name, "llama-3.2-1b")) {
        o->hidden = 2048;
        o->layers = 16;
        o->heads = 32;
        o->kv_heads = 8;
        o->head_dim = 64;
        o->ffn = 8192;
        o->vocab = 128256;
        o->max_position = 131072;
        o->tie = true;
        o->rope_theta = 500000.0f;
        o->rms_eps = 1e-5f;
        o->rope_scaling = PG_ROPE_SCALING_LLAMA3;
        o->rope_factor = 32.0f;
        o->rope_low_freq_factor = 1.0f;
        o->rope_high_freq_factor = 4.0f;
        o->rope_original_max_position = 8192;
        o->bos_token_id = 128000;
        o->eos_token_id = 128001;
        o->hf_dtype = PG_BF16;
        o->gguf_dtype = PG_BF16;
        return PAGODA_OK;
    }
    return pg_error(PAGODA_ERR_INVALID_ARG, "unknown preset '%s' (known: llama-3.2-1b)", name);
}

pagoda_status pg_gen_model_options_from(pg_gen_model_options *o, const pg_model_source *src) {
    const pg_model_config *c = pg_model_source_config(src);
    if (c->rope_scaling != PG_ROPE_SCALING_NONE && c->rope_scaling != PG_ROPE_SCALING_LLAMA3)
        return pg_error(PAGODA_ERR_UNSUPPORTED, "%s: only none / llama3 RoPE scaling converts",
                        pg_model_source_path(src));
    o->hidden = c->hidden_size;
    o->layers = c->num_hidden_layers;
    o->heads = c->num_attention_heads;
    o->kv_heads = c->num_key_value_heads;
    o->head_dim = c->head_dim;
    o->ffn = c->intermediate_size;
    o->vocab = c->vocab_size;
    o->max_position = c->max_position_embeddings;
    o->tie = c->tie_word_embeddings;
    o->rope_theta = c->rope_theta;
    o->rms_eps = c->rms_norm_eps;
    o->rope_scaling = c->rope_scaling;
    o->rope_factor = c->rope_factor;
    o->rope_low_freq_factor = c->rope_low_freq_factor;
    o->rope_high_freq_factor = c->rope_high_freq_factor;
    o->rope_original_max_position = c->rope_original_max_position;
    o->bos_token_id = c->bos_token_id;
    o->eos_token_id = c->eos_token_ids[0];
    o->from = src;
    return PAGODA_OK;
}

static int head_dim(const pg_gen_model_options *o) {
    return o->head_dim ? o->head_dim : o->hidden / o->heads;
}

/* ------------------------------------------------------------ random rows */

static uint64_t splitmix64(uint64_t *s) {
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}
static uint64_t fnv1a(const char *s) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (; *s; s++)
        h = (h ^ (uint8_t)*s) * 0x100000001b3ull;
    return h;
}

/* The weights before any quantization: random, or read from o->from. */
static void raw_row(const pg_gen_model_options *o, const char *hf_name, int64_t row, int64_t ncols,
                    float *out) {
    if (o->from) {
        const pg_tensor *t = pg_model_source_tensor(o->from, hf_name);
        if (!t) { /* checked by pg_gen_model_write */
            memset(out, 0, (size_t)ncols * sizeof(float));
            return;
        }
        size_t rb = pg_dtype_row_bytes(t->dtype, (size_t)ncols);
        pg_dequant_row(t->dtype, (const uint8_t *)t->data + (size_t)row * rb, out, (size_t)ncols);
        return;
    }
    uint64_t st =
        o->seed * 0x2545f4914f6cdd1dull ^ fnv1a(hf_name) ^ ((uint64_t)row * 0x9e3779b97f4a7c15ull);
    splitmix64(&st);
    size_t n = strlen(hf_name);
    bool norm = n >= 11 && !strcmp(hf_name + n - 11, "norm.weight");
    float scale = norm ? 0.1f : o->init_std * 1.7320508f; /* U(-a, a) has std a/sqrt(3) */
    float base = norm ? 1.0f : 0.0f;
    for (int64_t c = 0; c < ncols; c += 2) {
        uint64_t r = splitmix64(&st);
        float u0 = (float)(r >> 40) * (1.0f / 16777216.0f) * 2.0f - 1.0f;
        float u1 = (float)((r >> 8) & 0xffffff) * (1.0f / 16777216.0f) * 2.0f - 1.0f;
        out[c] = base + scale * u0;
        if (c + 1 < ncols) out[c + 1] = base + scale * u1;
    }
}

static bool ct_name(const pg_gen_model_options *o, const char *name);
static const char *ct_ignore_json(const pg_gen_model_options *o);
static void ct_row(const pg_gen_model_options *o, const float *x, int64_t K, int8_t *q,
                   uint16_t *sc);

void pg_gen_model_row(const pg_gen_model_options *o, const char *hf_name, int64_t row,
                      int64_t ncols, float *out) {
    raw_row(o, hf_name, row, ncols, out);
    if (!o->ct_dense || !ct_name(o, hf_name)) return;
    const int64_t G = o->ct_group ? o->ct_group : ncols, ng = (ncols + G - 1) / G;
    int8_t *q = malloc((size_t)ncols);
    uint16_t *sc = malloc((size_t)ng * sizeof *sc);
    if (!q || !sc) abort();
    ct_row(o, out, ncols, q, sc);
    for (int64_t k = 0; k < ncols; k++)
        out[k] = pg_bf16_to_f32(sc[k / G]) * (float)q[k];
    free(q);
    free(sc);
}

void pg_llama3_rope_factors(const pg_gen_model_options *o, float *out) {
    int hd = head_dim(o);
    double old = o->rope_original_max_position, lo = o->rope_low_freq_factor,
           hi = o->rope_high_freq_factor;
    double low_wl = old / lo, high_wl = old / hi;
    for (int i = 0; i < hd / 2; i++) {
        double freq = 1.0 / pow((double)o->rope_theta, 2.0 * i / hd);
        double wl = 2.0 * M_PI / freq;
        if (wl < high_wl) {
            out[i] = 1.0f;
        } else if (wl > low_wl) {
            out[i] = o->rope_factor;
        } else {
            double smooth = (old / wl - lo) / (hi - lo);
            out[i] = (float)(1.0 / ((1.0 - smooth) / o->rope_factor + smooth));
        }
    }
}

/* ------------------------------------------------------------ tensor plan */

typedef struct gen_tensor {
    char name[96]; /* HF name */
    int ndim;
    int64_t rows, cols; /* 1-D: rows = 1, cols = n */
    int perm_heads;     /* > 0: Q/K rows are permuted in GGUF with this many heads */
} gen_tensor;

/* Append one tensor to the plan; layer < 0 means a top-level name. */
static void add(gen_tensor *t, size_t *n, int layer, const char *name, int64_t rows, int64_t cols,
                int perm_heads) {
    gen_tensor *e = &t[(*n)++];
    if (layer < 0)
        snprintf(e->name, sizeof e->name, "%s", name);
    else
        snprintf(e->name, sizeof e->name, "model.layers.%d.%s", layer, name);
    e->ndim = rows < 0 ? 1 : 2;
    e->rows = rows < 0 ? 1 : rows;
    e->cols = cols;
    e->perm_heads = perm_heads;
}

/* The Llama tensors in HF order; rows -1 marks a 1-D tensor. */
static size_t plan(const pg_gen_model_options *o, gen_tensor *t) {
    size_t n = 0;
    int hd = head_dim(o);
    int64_t H = o->hidden, q = (int64_t)o->heads * hd, kv = (int64_t)o->kv_heads * hd, F = o->ffn;
    add(t, &n, -1, "model.embed_tokens.weight", o->vocab, H, 0);
    for (int l = 0; l < o->layers; l++) {
        add(t, &n, l, "input_layernorm.weight", -1, H, 0);
        add(t, &n, l, "self_attn.q_proj.weight", q, H, o->heads);
        add(t, &n, l, "self_attn.k_proj.weight", kv, H, o->kv_heads);
        add(t, &n, l, "self_attn.v_proj.weight", kv, H, 0);
        add(t, &n, l, "self_attn.o_proj.weight", H, q, 0);
        add(t, &n, l, "post_attention_layernorm.weight", -1, H, 0);
        add(t, &n, l, "mlp.gate_proj.weight", F, H, 0);
        add(t, &n, l, "mlp.up_proj.weight", F, H, 0);
        add(t, &n, l, "mlp.down_proj.weight", H, F, 0);
    }
    add(t, &n, -1, "model.norm.weight", -1, H, 0);
    if (!o->tie) add(t, &n, -1, "lm_head.weight", o->vocab, H, 0);
    return n;
}
static size_t plan_count(const pg_gen_model_options *o) {
    return 3 + (size_t)o->layers * 9;
}

/* ------------------------------------------------------------ conversion */

static void quantize_q8_0(const float *x, uint8_t *dst, int64_t n) {
    for (int64_t b = 0; b < n / 32; b++, x += 32, dst += 34) {
        float amax = 0;
        for (int j = 0; j < 32; j++)
            amax = fmaxf(amax, fabsf(x[j]));
        float d = amax / 127.0f, id = d ? 1.0f / d : 0.0f;
        uint16_t h = pg_f32_to_f16(d);
        memcpy(dst, &h, 2);
        for (int j = 0; j < 32; j++)
            dst[2 + j] = (uint8_t)(int8_t)roundf(x[j] * id);
    }
}
static void quantize_q4_0(const float *x, uint8_t *dst, int64_t n) {
    for (int64_t b = 0; b < n / 32; b++, x += 32, dst += 18) {
        float amax = 0, max = 0;
        for (int j = 0; j < 32; j++)
            if (fabsf(x[j]) > amax) {
                amax = fabsf(x[j]);
                max = x[j];
            }
        float d = max / -8.0f, id = d ? 1.0f / d : 0.0f;
        uint16_t h = pg_f32_to_f16(d);
        memcpy(dst, &h, 2);
        for (int j = 0; j < 16; j++) {
            int a = (int)(x[j] * id + 8.5f), c = (int)(x[16 + j] * id + 8.5f);
            a = a < 0 ? 0 : a > 15 ? 15 : a;
            c = c < 0 ? 0 : c > 15 ? 15 : c;
            dst[2 + j] = (uint8_t)(a | (c << 4));
        }
    }
}
/* Convert n floats to dtype t into dst; returns bytes. */
static size_t convert(pg_dtype t, const float *x, void *dst, int64_t n) {
    switch (t) {
    case PG_F32:
        memcpy(dst, x, (size_t)n * 4);
        return (size_t)n * 4;
    case PG_F16:
        for (int64_t i = 0; i < n; i++)
            ((uint16_t *)dst)[i] = pg_f32_to_f16(x[i]);
        return (size_t)n * 2;
    case PG_BF16:
        for (int64_t i = 0; i < n; i++)
            ((uint16_t *)dst)[i] = pg_f32_to_bf16(x[i]);
        return (size_t)n * 2;
    case PG_Q8_0:
        quantize_q8_0(x, dst, n);
        return (size_t)n / 32 * 34;
    case PG_Q4_0:
        quantize_q4_0(x, dst, n);
        return (size_t)n / 32 * 18;
    default:
        return 0;
    }
}

/* HF row of GGUF row gr for a Q/K weight with `heads` heads of size hd:
 * llama.cpp stores pairs (2i, 2i+1) where HF has (i, i + hd/2). */
static int64_t hf_row_of_gguf_row(int64_t gr, int hd) {
    int64_t h = gr / hd, w = gr % hd;
    return h * hd + (w % 2) * (hd / 2) + w / 2;
}

typedef pagoda_status (*write_fn)(void *w, const void *data, size_t n);
static pagoda_status st_write(void *w, const void *d, size_t n) {
    return pg_safetensors_writer_write(w, d, n);
}
static pagoda_status gg_write(void *w, const void *d, size_t n) {
    return pg_gguf_writer_write(w, d, n);
}

static pagoda_status stream_tensor(const pg_gen_model_options *o, const gen_tensor *t, pg_dtype dt,
                                   bool gguf, float *row, void *buf, write_fn wf, void *w) {
    for (int64_t r = 0; r < t->rows; r++) {
        int64_t hr = (gguf && t->perm_heads) ? hf_row_of_gguf_row(r, head_dim(o)) : r;
        pg_gen_model_row(o, t->name, hr, t->cols, row);
        size_t nb = convert(dt, row, buf, t->cols);
        pagoda_status s = wf(w, buf, nb);
        if (s) return s;
    }
    return PAGODA_OK;
}

/* ------------------------------------------------------------ HF */

static pagoda_status write_text(const char *path, const char *text) {
    FILE *f = fopen(path, "wb");
    if (!f) return pg_error(PAGODA_ERR_IO, "%s: cannot create: %s", path, strerror(errno));
    size_t n = strlen(text);
    bool ok = fwrite(text, 1, n, f) == n;
    if (fclose(f) != 0) ok = false;
    return ok ? PAGODA_OK : pg_error(PAGODA_ERR_IO, "%s: write failed", path);
}

static pagoda_status copy_file(const char *from, const char *to) {
    FILE *in = fopen(from, "rb");
    if (!in) return pg_error(PAGODA_ERR_NOT_FOUND, "%s: cannot open: %s", from, strerror(errno));
    FILE *out = fopen(to, "wb");
    if (!out) {
        fclose(in);
        return pg_error(PAGODA_ERR_IO, "%s: cannot create", to);
    }
    char buf[1 << 16];
    size_t n;
    bool ok = true;
    while ((n = fread(buf, 1, sizeof buf, in)) > 0)
        if (fwrite(buf, 1, n, out) != n) ok = false;
    fclose(in);
    if (fclose(out) != 0) ok = false;
    return ok ? PAGODA_OK : pg_error(PAGODA_ERR_IO, "%s: write failed", to);
}

static const char *torch_dtype_name(pg_dtype t) {
    return t == PG_F16 ? "float16" : t == PG_BF16 ? "bfloat16" : "float32";
}

/* The quantization_config member (with its trailing comma) or "". */
static const char *ct_config(const pg_gen_model_options *o) {
    static _Thread_local char buf[1024];
    if (!o->ct_bits || o->ct_dense) return "";
    char strat[96];
    if (o->ct_group)
        snprintf(strat, sizeof strat, "\"strategy\": \"group\", \"group_size\": %d", o->ct_group);
    else
        snprintf(strat, sizeof strat, "\"strategy\": \"channel\", \"group_size\": null");
    snprintf(buf, sizeof buf,
             "  \"quantization_config\": {\"quant_method\": \"compressed-tensors\", \"format\": "
             "\"%s\", \"quantization_status\": \"compressed\", \"config_groups\": {\"group_0\": "
             "{\"targets\": [\"Linear\"], \"weights\": {\"num_bits\": %d, \"type\": \"int\", "
             "\"symmetric\": true, %s, \"dynamic\": false, \"actorder\": null}, "
             "\"input_activations\": %s, \"output_activations\": null}}, \"ignore\": "
             "[\"lm_head\"%s], \"kv_cache_scheme\": null},\n",
             o->ct_bits == 8 ? "int-quantized" : "pack-quantized", o->ct_bits, strat,
             o->ct_weight_only ? "null"
                               : "{\"num_bits\": 8, \"type\": \"int\", \"symmetric\": true, "
                                 "\"strategy\": \"token\", \"dynamic\": true}",
             ct_ignore_json(o));
    return buf;
}

static pagoda_status write_hf_json(const pg_gen_model_options *o) {
    char path[PATH_MAX], js[4096], rs[512] = "null";
    if (o->rope_scaling == PG_ROPE_SCALING_LLAMA3)
        snprintf(rs, sizeof rs,
                 "{\"factor\": %g, \"low_freq_factor\": %g, \"high_freq_factor\": %g, "
                 "\"original_max_position_embeddings\": %d, \"rope_type\": \"llama3\"}",
                 o->rope_factor, o->rope_low_freq_factor, o->rope_high_freq_factor,
                 o->rope_original_max_position);
    snprintf(
        js, sizeof js,
        "{\n  \"architectures\": [\"LlamaForCausalLM\"],\n  \"model_type\": \"llama\",\n"
        "  \"vocab_size\": %d,\n  \"hidden_size\": %d,\n  \"intermediate_size\": %d,\n"
        "  \"num_hidden_layers\": %d,\n  \"num_attention_heads\": %d,\n  \"num_key_value_heads\": "
        "%d,\n"
        "  \"head_dim\": %d,\n  \"max_position_embeddings\": %d,\n  \"rms_norm_eps\": %g,\n"
        "  \"rope_theta\": %.1f,\n  \"rope_scaling\": %s,\n  \"hidden_act\": \"silu\",\n"
        "  \"tie_word_embeddings\": %s,\n  \"attention_bias\": false,\n  \"mlp_bias\": false,\n"
        "  \"initializer_range\": %g,\n  \"bos_token_id\": %d,\n  \"eos_token_id\": %d,\n"
        "%s  \"torch_dtype\": \"%s\"\n}\n",
        o->vocab, o->hidden, o->ffn, o->layers, o->heads, o->kv_heads, head_dim(o), o->max_position,
        o->rms_eps, o->rope_theta, rs, o->tie ? "true" : "false", o->init_std, o->bos_token_id,
        o->eos_token_id, ct_config(o), torch_dtype_name(o->hf_dtype));
    snprintf(path, sizeof path, "%s/config.json", o->hf_dir);
    pagoda_status s = write_text(path, js);
    if (s) return s;
    snprintf(js, sizeof js,
             "{\n  \"bos_token_id\": %d,\n  \"eos_token_id\": %d,\n  \"do_sample\": true,\n"
             "  \"temperature\": 0.6,\n  \"top_p\": 0.9\n}\n",
             o->bos_token_id, o->eos_token_id);
    snprintf(path, sizeof path, "%s/generation_config.json", o->hf_dir);
    s = write_text(path, js);
    if (s || !o->tokenizer_dir) return s;
    static const char *const TOK[] = {"tokenizer.json", "tokenizer_config.json"};
    for (int i = 0; i < 2 && !s; i++) {
        char from[PATH_MAX + 32];
        snprintf(from, sizeof from, "%s/%s", o->tokenizer_dir, TOK[i]);
        snprintf(path, sizeof path, "%s/%s", o->hf_dir, TOK[i]);
        struct stat st;
        if (stat(from, &st) == 0)
            s = copy_file(from, path);
        else if (i == 0)
            s = pg_error(PAGODA_ERR_NOT_FOUND, "%s: no such file", from);
    }
    return s;
}

/* A linear weight the compressed-tensors writer quantizes (not lm_head). */
static bool ct_name(const pg_gen_model_options *o, const char *name) {
    size_t n = strlen(name);
    if (!o->ct_bits || n <= 12 || strcmp(name + n - 12, "_proj.weight")) return false;
    if (!o->ct_ignore) return true;
    char layer[128];
    snprintf(layer, sizeof layer, "%.*s", (int)(n - 7), name);
    char *ig[1] = {(char *)o->ct_ignore};
    pg_ct_config c = {.format = PG_CT_PACK_QUANTIZED, .n_ignore = 1, .ignore = ig};
    return !pg_ct_ignored(&c, layer);
}

/* o->ct_ignore as a JSON string member of the ignore list ("" if none). */
static const char *ct_ignore_json(const pg_gen_model_options *o) {
    static _Thread_local char buf[300];
    buf[0] = 0;
    if (!o->ct_ignore) return buf;
    size_t k = (size_t)snprintf(buf, sizeof buf, ", \"");
    for (const char *p = o->ct_ignore; *p && k + 4 < sizeof buf; p++) {
        if (*p == '"' || *p == '\\') buf[k++] = '\\';
        buf[k++] = *p;
    }
    snprintf(buf + k, sizeof buf - k, "\"");
    return buf;
}
static bool ct_linear(const pg_gen_model_options *o, const gen_tensor *t) {
    return t->ndim == 2 && ct_name(o, t->name);
}

/* One quantized row: scale per group (BF16-rounded first, then q from it);
 * the compressed-tensors rule or, with ct_rtn, pagoda's load-time rule
 * (see gen_model.h). */
static void ct_row(const pg_gen_model_options *o, const float *x, int64_t K, int8_t *q,
                   uint16_t *sc) {
    const int64_t G = o->ct_group ? o->ct_group : K;
    const bool w8 = o->ct_bits == 8;
    const float div = o->ct_rtn ? (w8 ? 127.0f : 8.0f) : (w8 ? 127.5f : 7.5f);
    const float lo = w8 ? (o->ct_rtn ? -127.0f : -128.0f) : -8.0f, hi = w8 ? 127.0f : 7.0f;
    for (int64_t g = 0; g * G < K; g++) {
        int64_t k1 = (g + 1) * G < K ? (g + 1) * G : K, at = g * G;
        float am = 0;
        for (int64_t k = g * G; k < k1; k++)
            if (fabsf(x[k]) > am) am = fabsf(x[k]), at = k;
        sc[g] = pg_f32_to_bf16(am / div);
        float d = pg_bf16_to_f32(sc[g]);
        for (int64_t k = g * G; k < k1; k++) {
            float v = d > 0 ? rintf(x[k] / d) : 0.0f;
            q[k] = (int8_t)(v < lo ? lo : (v > hi ? hi : v));
        }
        if (o->ct_rtn && !w8 && d > 0) q[at] = -8;
    }
}

/* compressed-tensors HF output: one shard, linear weights quantized. */
static pagoda_status write_hf_ct(const pg_gen_model_options *o, const gen_tensor *t, size_t nt,
                                 float *row, void *buf) {
    if ((o->ct_bits != 8 && o->ct_bits != 4) || o->ct_group < 0 || o->ct_group % 32)
        return pg_error(PAGODA_ERR_INVALID_ARG,
                        "compressed-tensors output: bits %d group %d (need 8 or 4; group 0 or a "
                        "multiple of 32)",
                        o->ct_bits, o->ct_group);
    pg_safetensors_writer *w;
    pagoda_status s = pg_safetensors_writer_create(&w);
    if (s) return s;
    char nm[160];
    for (size_t j = 0; j < nt && !s; j++) {
        int64_t shape[2] = {t[j].ndim == 2 ? t[j].rows : t[j].cols, t[j].cols};
        if (!ct_linear(o, &t[j])) {
            s = pg_safetensors_writer_add(w, t[j].name, o->hf_dtype, t[j].ndim, shape);
            continue;
        }
        const int64_t N = t[j].rows, K = t[j].cols;
        const int64_t ng = o->ct_group ? (K + o->ct_group - 1) / o->ct_group : 1;
        size_t base = strlen(t[j].name) - strlen("weight");
        if (o->ct_bits == 8) {
            s = pg_safetensors_writer_add(w, t[j].name, PG_I8, 2, shape);
        } else {
            int64_t ps[2] = {N, (K + 7) / 8}, ss[1] = {2};
            snprintf(nm, sizeof nm, "%.*sweight_packed", (int)base, t[j].name);
            s = pg_safetensors_writer_add(w, nm, PG_I32, 2, ps);
            snprintf(nm, sizeof nm, "%.*sweight_shape", (int)base, t[j].name);
            if (!s) s = pg_safetensors_writer_add(w, nm, PG_I64, 1, ss);
        }
        int64_t sc[2] = {N, ng};
        snprintf(nm, sizeof nm, "%.*sweight_scale", (int)base, t[j].name);
        if (!s) s = pg_safetensors_writer_add(w, nm, PG_BF16, 2, sc);
    }
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/model.safetensors", o->hf_dir);
    if (!s) s = pg_safetensors_writer_begin(w, path);
    int8_t *q = NULL;
    uint16_t *scl = NULL;
    for (size_t j = 0; j < nt && !s; j++) {
        if (!ct_linear(o, &t[j])) {
            s = stream_tensor(o, &t[j], o->hf_dtype, false, row, buf, st_write, w);
            continue;
        }
        const int64_t N = t[j].rows, K = t[j].cols;
        const int64_t ng = o->ct_group ? (K + o->ct_group - 1) / o->ct_group : 1;
        free(q);
        free(scl);
        q = malloc((size_t)(N * K));
        scl = malloc((size_t)(N * ng) * sizeof *scl);
        if (!q || !scl) {
            s = pg_error(PAGODA_ERR_NOMEM, "out of memory");
            break;
        }
        for (int64_t r = 0; r < N; r++) {
            raw_row(o, t[j].name, r, K, row);
            ct_row(o, row, K, q + r * K, scl + r * ng);
        }
        if (o->ct_bits == 8) {
            s = st_write(w, q, (size_t)(N * K));
        } else {
            const int64_t words = (K + 7) / 8;
            for (int64_t r = 0; r < N && !s; r++)
                for (int64_t wd = 0; wd < words && !s; wd++) {
                    uint32_t u = 0;
                    for (int64_t k = 8 * wd; k < K && k < 8 * wd + 8; k++)
                        u |= (uint32_t)(q[r * K + k] + 8) << (4 * (k - 8 * wd));
                    uint8_t le[4] = {(uint8_t)u, (uint8_t)(u >> 8), (uint8_t)(u >> 16),
                                     (uint8_t)(u >> 24)};
                    s = st_write(w, le, 4);
                }
            int64_t shp[2] = {N, K};
            uint8_t le[16];
            for (int i = 0; i < 16; i++)
                le[i] = (uint8_t)((uint64_t)shp[i / 8] >> (8 * (i % 8)));
            if (!s) s = st_write(w, le, 16);
        }
        for (int64_t i = 0; i < N * ng && !s; i++) {
            uint8_t le[2] = {(uint8_t)scl[i], (uint8_t)(scl[i] >> 8)};
            s = st_write(w, le, 2);
        }
    }
    free(q);
    free(scl);
    if (!s) s = pg_safetensors_writer_finish(w);
    pg_safetensors_writer_free(w);
    return s;
}

static pagoda_status write_hf(const pg_gen_model_options *o, const gen_tensor *t, size_t nt,
                              float *row, void *buf) {
    if (o->hf_dtype != PG_F32 && o->hf_dtype != PG_F16 && o->hf_dtype != PG_BF16)
        return pg_error(PAGODA_ERR_INVALID_ARG, "HF output supports F32, F16, BF16, not %s",
                        pg_dtype_name(o->hf_dtype));
    if (mkdir(o->hf_dir, 0755) != 0 && errno != EEXIST)
        return pg_error(PAGODA_ERR_IO, "%s: cannot create directory: %s", o->hf_dir,
                        strerror(errno));
    pagoda_status s = write_hf_json(o);
    if (s) return s;
    if (o->ct_bits && !o->ct_dense) return write_hf_ct(o, t, nt, row, buf);
    int ns = o->shards < 1 ? 1 : o->shards;
    if ((size_t)ns > nt) ns = (int)nt;
    uint64_t total = 0, esz = pg_dtype_block_bytes(o->hf_dtype);
    for (size_t i = 0; i < nt; i++)
        total += (uint64_t)(t[i].rows * t[i].cols) * esz;
    /* shard k takes tensors while the running total stays below (k+1)/ns of all bytes */
    size_t *first = calloc((size_t)ns + 1, sizeof *first);
    const char **names = calloc(nt, sizeof *names), **files = calloc(nt, sizeof *files);
    char(*fnames)[64] = calloc((size_t)ns, 64);
    if (!first || !names || !files || !fnames) {
        s = pg_error(PAGODA_ERR_NOMEM, "out of memory");
        goto done;
    }
    uint64_t acc = 0;
    size_t i = 0;
    for (int k = 0; k < ns; k++) {
        first[k] = i;
        if (k == ns - 1) break;
        uint64_t limit = total / (uint64_t)ns * (uint64_t)(k + 1);
        do { /* at least one tensor per shard; leave one for each later shard */
            acc += (uint64_t)(t[i].rows * t[i].cols) * esz;
            i++;
        } while (i < nt - (size_t)(ns - 1 - k) &&
                 acc + (uint64_t)(t[i].rows * t[i].cols) * esz <= limit);
    }
    first[ns] = nt;
    for (int k = 0; k < ns && !s; k++) {
        if (ns == 1)
            snprintf(fnames[k], 64, "model.safetensors");
        else
            snprintf(fnames[k], 64, "model-%05d-of-%05d.safetensors", k + 1, ns);
        pg_safetensors_writer *w;
        s = pg_safetensors_writer_create(&w);
        if (s) break;
        for (size_t j = first[k]; j < first[k + 1] && !s; j++) {
            int64_t shape[2] = {t[j].ndim == 2 ? t[j].rows : t[j].cols, t[j].cols};
            s = pg_safetensors_writer_add(w, t[j].name, o->hf_dtype, t[j].ndim, shape);
            names[j] = t[j].name;
            files[j] = fnames[k];
        }
        char path[PATH_MAX];
        snprintf(path, sizeof path, "%s/%s", o->hf_dir, fnames[k]);
        if (!s) s = pg_safetensors_writer_begin(w, path);
        for (size_t j = first[k]; j < first[k + 1] && !s; j++)
            s = stream_tensor(o, &t[j], o->hf_dtype, false, row, buf, st_write, w);
        if (!s) s = pg_safetensors_writer_finish(w);
        pg_safetensors_writer_free(w);
    }
    if (!s && ns > 1) {
        char path[PATH_MAX];
        snprintf(path, sizeof path, "%s/model.safetensors.index.json", o->hf_dir);
        s = pg_safetensors_write_index(path, total, names, files, nt);
    }
done:
    free(first);
    free(names);
    free(files);
    free(fnames);
    return s;
}

/* ------------------------------------------------------------ GGUF */

/* A synthetic SentencePiece-style vocab: <unk> <s> </s>, 256 byte tokens,
 * then "tok<i>" pieces, so tokenizers can load the file. */
static pagoda_status synth_vocab(const pg_gen_model_options *o, pg_gguf_writer *w) {
    if (o->vocab < 259) return PAGODA_OK;
    size_t n = (size_t)o->vocab;
    char **tok = calloc(n, sizeof *tok);
    float *score = calloc(n, sizeof *score);
    int32_t *type = calloc(n, sizeof *type);
    pagoda_status s = PAGODA_OK;
    if (!tok || !score || !type) {
        free(tok);
        free(score);
        free(type);
        return pg_error(PAGODA_ERR_NOMEM, "out of memory");
    }
    for (size_t i = 0; i < n && !s; i++) {
        char b[32];
        if (i == 0)
            snprintf(b, sizeof b, "<unk>"), type[i] = 2;
        else if (i == 1)
            snprintf(b, sizeof b, "<s>"), type[i] = 3;
        else if (i == 2)
            snprintf(b, sizeof b, "</s>"), type[i] = 3;
        else if (i < 259)
            snprintf(b, sizeof b, "<0x%02X>", (unsigned)(i - 3)), type[i] = 6;
        else
            snprintf(b, sizeof b, "tok%zu", i), type[i] = 1;
        score[i] = i < 259 ? 0.0f : -(float)(i - 259);
        tok[i] = strdup(b);
        if (!tok[i]) s = pg_error(PAGODA_ERR_NOMEM, "out of memory");
    }
    if (!s) {
        pg_gguf_writer_set_str(w, "tokenizer.ggml.model", "llama");
        pg_gguf_writer_set_str_array(w, "tokenizer.ggml.tokens", (const char *const *)tok, n);
        pg_gguf_writer_set_array(w, "tokenizer.ggml.scores", PG_GGUF_F32, score, n);
        pg_gguf_writer_set_array(w, "tokenizer.ggml.token_type", PG_GGUF_I32, type, n);
        pg_gguf_writer_set_u32(w, "tokenizer.ggml.unknown_token_id", 0);
        pg_gguf_writer_set_u32(w, "tokenizer.ggml.bos_token_id", (uint32_t)o->bos_token_id);
        pg_gguf_writer_set_u32(w, "tokenizer.ggml.eos_token_id", (uint32_t)o->eos_token_id);
    }
    for (size_t i = 0; i < n; i++)
        free(tok[i]);
    free(tok);
    free(score);
    free(type);
    return s;
}

static pagoda_status copy_vocab(const pg_gen_model_options *o, pg_gguf_writer *w) {
    pg_gguf *g;
    pagoda_status s = pg_gguf_open(o->vocab_gguf, &g);
    if (s) return s;
    pg_gguf_array toks;
    if (pg_gguf_get_array(g, "tokenizer.ggml.tokens", &toks)) {
        s = pg_error(PAGODA_ERR_INVALID_ARG, "%s: no tokenizer.ggml.tokens to copy", o->vocab_gguf);
    } else if (toks.n > (uint64_t)o->vocab) {
        s = pg_error(PAGODA_ERR_INVALID_ARG,
                     "%s: vocab has %llu tokens but the model's vocab is %d", o->vocab_gguf,
                     (unsigned long long)toks.n, o->vocab);
    }
    for (size_t i = 0; !s && i < pg_gguf_n_kv(g); i++) {
        if (strncmp(pg_gguf_key_at(g, i), "tokenizer.", 10) != 0) continue;
        size_t len;
        const uint8_t *raw = pg_gguf_kv_raw(g, i, &len);
        pg_gguf_writer_add_raw_kv(w, raw, len);
    }
    pg_gguf_close(g);
    return s;
}

static uint32_t file_type(pg_dtype t) {
    switch (t) { /* llama_ftype */
    case PG_F16:
        return 1;
    case PG_Q4_0:
        return 2;
    case PG_Q8_0:
        return 7;
    case PG_BF16:
        return 32;
    default:
        return 0;
    }
}

static pagoda_status write_gguf(const pg_gen_model_options *o, const gen_tensor *t, size_t nt,
                                float *row, void *buf) {
    pg_dtype wd = o->gguf_dtype;
    if (wd != PG_F32 && wd != PG_F16 && wd != PG_BF16 && wd != PG_Q8_0 && wd != PG_Q4_0)
        return pg_error(PAGODA_ERR_INVALID_ARG,
                        "GGUF output supports F32, F16, BF16, Q8_0, Q4_0, not %s",
                        pg_dtype_name(wd));
    pg_gguf_writer *w;
    pagoda_status s = pg_gguf_writer_create(&w);
    if (s) return s;
    int hd = head_dim(o);
    pg_gguf_writer_set_str(w, "general.architecture", "llama");
    pg_gguf_writer_set_str(w, "general.name", "pagoda-random-llama");
    pg_gguf_writer_set_u32(w, "general.file_type", file_type(wd));
    if (wd == PG_Q8_0 || wd == PG_Q4_0)
        pg_gguf_writer_set_u32(w, "general.quantization_version", 2);
    pg_gguf_writer_set_u32(w, "llama.vocab_size", (uint32_t)o->vocab);
    pg_gguf_writer_set_u32(w, "llama.context_length", (uint32_t)o->max_position);
    pg_gguf_writer_set_u32(w, "llama.embedding_length", (uint32_t)o->hidden);
    pg_gguf_writer_set_u32(w, "llama.block_count", (uint32_t)o->layers);
    pg_gguf_writer_set_u32(w, "llama.feed_forward_length", (uint32_t)o->ffn);
    pg_gguf_writer_set_u32(w, "llama.attention.head_count", (uint32_t)o->heads);
    pg_gguf_writer_set_u32(w, "llama.attention.head_count_kv", (uint32_t)o->kv_heads);
    pg_gguf_writer_set_u32(w, "llama.attention.key_length", (uint32_t)hd);
    pg_gguf_writer_set_u32(w, "llama.attention.value_length", (uint32_t)hd);
    pg_gguf_writer_set_u32(w, "llama.rope.dimension_count", (uint32_t)hd);
    pg_gguf_writer_set_f32(w, "llama.rope.freq_base", o->rope_theta);
    pg_gguf_writer_set_f32(w, "llama.attention.layer_norm_rms_epsilon", o->rms_eps);
    bool llama3 = o->rope_scaling == PG_ROPE_SCALING_LLAMA3;
    /* Llama-3 RoPE scaling is written the way llama.cpp's converter writes it:
     * only the rope_freqs.weight tensor below, no llama.rope.scaling.* keys
     * (llama.cpp refuses a "llama3" scaling type and would read the factor as
     * linear scaling). pagoda applies rope_freqs when no scaling keys exist. */
    s = o->vocab_gguf ? copy_vocab(o, w) : synth_vocab(o, w);
    /* tensor types: norms F32, rows that do not fill 32-blocks fall back to F16 */
    pg_dtype *types = calloc(nt, sizeof *types);
    if (!types) {
        pg_gguf_writer_free(w);
        return pg_error(PAGODA_ERR_NOMEM, "out of memory");
    }
    for (size_t i = 0; i < nt && !s; i++) {
        pg_dtype d = wd;
        if (t[i].ndim == 1)
            d = PG_F32;
        else if ((d == PG_Q8_0 || d == PG_Q4_0) && t[i].cols % 32)
            d = PG_F16;
        types[i] = d;
        char gname[128];
        pg_gguf_llama_name_from_hf(t[i].name, gname, sizeof gname);
        int64_t ne[2] = {t[i].cols, t[i].rows};
        s = pg_gguf_writer_add_tensor(w, gname, pg_dtype_to_ggml_type(d), t[i].ndim, ne);
    }
    if (!s && llama3) {
        int64_t ne[1] = {hd / 2};
        s = pg_gguf_writer_add_tensor(w, "rope_freqs.weight", PG_GGML_F32, 1, ne);
    }
    if (!s) s = pg_gguf_writer_begin(w, o->gguf_path);
    for (size_t i = 0; i < nt && !s; i++)
        s = stream_tensor(o, &t[i], types[i], true, row, buf, gg_write, w);
    if (!s && llama3) {
        pg_llama3_rope_factors(o, row);
        s = pg_gguf_writer_write(w, row, (size_t)(hd / 2) * 4);
    }
    if (!s) s = pg_gguf_writer_finish(w);
    free(types);
    pg_gguf_writer_free(w);
    return s;
}

/* ------------------------------------------------------------ entry */

pagoda_status pg_gen_model_write(const pg_gen_model_options *o) {
    if (o->hidden < 1 || o->layers < 1 || o->heads < 1 || o->kv_heads < 1 || o->ffn < 1 ||
        o->vocab < 1 || o->heads % o->kv_heads || (!o->head_dim && o->hidden % o->heads) ||
        head_dim(o) % 2 || o->max_position < 1)
        return pg_error(PAGODA_ERR_INVALID_ARG,
                        "inconsistent model shape (hidden %d, layers %d, heads %d, kv heads %d, "
                        "head_dim %d, ffn %d, vocab %d)",
                        o->hidden, o->layers, o->heads, o->kv_heads, head_dim(o), o->ffn, o->vocab);
    if (o->rope_scaling != PG_ROPE_SCALING_NONE &&
        (o->rope_scaling != PG_ROPE_SCALING_LLAMA3 || !(o->rope_factor > 0) ||
         !(o->rope_high_freq_factor > o->rope_low_freq_factor) ||
         o->rope_original_max_position < 1))
        return pg_error(PAGODA_ERR_INVALID_ARG,
                        "rope scaling: only llama3 with factor > 0, high > low freq factor");
    if (!o->hf_dir && !o->gguf_path)
        return pg_error(PAGODA_ERR_INVALID_ARG, "no output (HF directory or GGUF path)");
    size_t nt = plan_count(o);
    gen_tensor *t = calloc(nt, sizeof *t);
    int64_t maxc = o->hidden;
    if (o->ffn > maxc) maxc = o->ffn;
    if ((int64_t)o->heads * head_dim(o) > maxc) maxc = (int64_t)o->heads * head_dim(o);
    if (head_dim(o) > maxc) maxc = head_dim(o);
    float *row = malloc((size_t)maxc * sizeof(float));
    void *buf = malloc((size_t)maxc * sizeof(float));
    pagoda_status s = PAGODA_OK;
    if (!t || !row || !buf) {
        free(t);
        free(row);
        free(buf);
        return pg_error(PAGODA_ERR_NOMEM, "out of memory");
    }
    nt = plan(o, t);
    for (size_t i = 0; i < nt && o->from && !s; i++) {
        const pg_tensor *f = pg_model_source_tensor(o->from, t[i].name);
        if (!f || f->ndim != t[i].ndim || (t[i].ndim == 2 && f->shape[0] != t[i].rows) ||
            f->shape[f->ndim - 1] != t[i].cols ||
            (f->dtype != PG_F32 && f->dtype != PG_F16 && f->dtype != PG_BF16))
            s = pg_error(PAGODA_ERR_INVALID_ARG,
                         "%s: no F32/F16/BF16 tensor '%s' of the model's shape to convert",
                         pg_model_source_path(o->from), t[i].name);
    }
    if (!s && o->hf_dir) s = write_hf(o, t, nt, row, buf);
    if (!s && o->gguf_path) s = write_gguf(o, t, nt, row, buf);
    free(t);
    free(row);
    free(buf);
    return s;
}
