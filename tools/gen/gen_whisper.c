/* Random-weight Whisper checkpoints (see gen_whisper.h). */
#include "gen/gen_whisper.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/safetensors.h"

pagoda_status pg_gen_whisper_preset(const char *name, pg_gen_whisper_opts *o) {
    static const struct {
        const char *name;
        int mels, d, enc, dec, heads, vocab;
    } P[] = {
        {"tiny", 80, 384, 4, 4, 6, 51865},          {"base", 80, 512, 6, 6, 8, 51865},
        {"small", 80, 768, 12, 12, 12, 51865},      {"medium", 80, 1024, 24, 24, 16, 51865},
        {"large-v3", 128, 1280, 32, 32, 20, 51866}, {"large-v3-turbo", 128, 1280, 32, 4, 20, 51866},
    };
    for (size_t i = 0; i < sizeof P / sizeof P[0]; i++) {
        if (strcmp(P[i].name, name) != 0) continue;
        *o = (pg_gen_whisper_opts){.n_mels = P[i].mels,
                                   .d_model = P[i].d,
                                   .enc_layers = P[i].enc,
                                   .dec_layers = P[i].dec,
                                   .enc_heads = P[i].heads,
                                   .dec_heads = P[i].heads,
                                   .vocab = P[i].vocab,
                                   .dtype = PG_BF16,
                                   .seed = 1};
        return PAGODA_OK;
    }
    return pg_error(PAGODA_ERR_INVALID_ARG,
                    "gen_whisper: unknown preset '%s' (tiny, base, small, medium, large-v3, "
                    "large-v3-turbo)",
                    name);
}

/* ---- tensors ---------------------------------------------------------------------------- */

typedef enum kind { LN_W, BIAS, WEIGHT, TOKENS, DEC_POS, ENC_POS } kind;

typedef struct tensor {
    char name[96];
    int ndim;
    int64_t shape[3];
    kind k;
} tensor;

typedef struct plan {
    tensor *t;
    int n, cap;
} plan;

static pagoda_status add(plan *p, kind k, int ndim, int64_t d0, int64_t d1, int64_t d2,
                         const char *fmt, ...) __attribute__((format(printf, 7, 8)));
static pagoda_status add(plan *p, kind k, int ndim, int64_t d0, int64_t d1, int64_t d2,
                         const char *fmt, ...) {
    if (p->n == p->cap) {
        int cap = p->cap ? 2 * p->cap : 256;
        tensor *g = realloc(p->t, (size_t)cap * sizeof *g);
        if (!g) return pg_error(PAGODA_ERR_NOMEM, "gen_whisper: out of memory");
        p->t = g, p->cap = cap;
    }
    tensor *t = &p->t[p->n++];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(t->name, sizeof t->name, fmt, ap);
    va_end(ap);
    t->ndim = ndim, t->shape[0] = d0, t->shape[1] = d1, t->shape[2] = d2, t->k = k;
    return PAGODA_OK;
}

static pagoda_status add_attn(plan *p, int64_t D, const char *pre) {
    pagoda_status s = PAGODA_OK;
    static const char *const proj[4] = {"q_proj", "k_proj", "v_proj", "out_proj"};
    for (int i = 0; i < 4 && !s; i++) {
        s = add(p, WEIGHT, 2, D, D, 0, "%s.%s.weight", pre, proj[i]);
        if (!s && i != 1) s = add(p, BIAS, 1, D, 0, 0, "%s.%s.bias", pre, proj[i]);
    }
    return s;
}

static pagoda_status add_norm(plan *p, int64_t D, const char *pre) {
    pagoda_status s = add(p, LN_W, 1, D, 0, 0, "%s.weight", pre);
    return s ? s : add(p, BIAS, 1, D, 0, 0, "%s.bias", pre);
}

static pagoda_status add_mlp(plan *p, int64_t D, int64_t F, const char *pre) {
    pagoda_status s = add(p, WEIGHT, 2, F, D, 0, "%s.fc1.weight", pre);
    if (!s) s = add(p, BIAS, 1, F, 0, 0, "%s.fc1.bias", pre);
    if (!s) s = add(p, WEIGHT, 2, D, F, 0, "%s.fc2.weight", pre);
    if (!s) s = add(p, BIAS, 1, D, 0, 0, "%s.fc2.bias", pre);
    return s;
}

static pagoda_status make_plan(const pg_gen_whisper_opts *o, plan *p) {
    const int64_t D = o->d_model;
    char pre[96], sub[128];
    pagoda_status s = add(p, WEIGHT, 3, D, o->n_mels, 3, "model.encoder.conv1.weight");
    if (!s) s = add(p, BIAS, 1, D, 0, 0, "model.encoder.conv1.bias");
    if (!s) s = add(p, WEIGHT, 3, D, D, 3, "model.encoder.conv2.weight");
    if (!s) s = add(p, BIAS, 1, D, 0, 0, "model.encoder.conv2.bias");
    if (!s) s = add(p, ENC_POS, 2, o->n_audio_ctx, D, 0, "model.encoder.embed_positions.weight");
    for (int l = 0; l < o->enc_layers && !s; l++) {
        snprintf(pre, sizeof pre, "model.encoder.layers.%d", l);
        snprintf(sub, sizeof sub, "%s.self_attn", pre);
        s = add_attn(p, D, sub);
        snprintf(sub, sizeof sub, "%s.self_attn_layer_norm", pre);
        if (!s) s = add_norm(p, D, sub);
        snprintf(sub, sizeof sub, "%s.final_layer_norm", pre);
        if (!s) s = add_norm(p, D, sub);
        if (!s) s = add_mlp(p, D, o->enc_ffn, pre);
    }
    if (!s) s = add_norm(p, D, "model.encoder.layer_norm");
    if (!s) s = add(p, TOKENS, 2, o->vocab, D, 0, "model.decoder.embed_tokens.weight");
    if (!s) s = add(p, DEC_POS, 2, o->n_text_ctx, D, 0, "model.decoder.embed_positions.weight");
    for (int l = 0; l < o->dec_layers && !s; l++) {
        snprintf(pre, sizeof pre, "model.decoder.layers.%d", l);
        snprintf(sub, sizeof sub, "%s.self_attn", pre);
        s = add_attn(p, D, sub);
        snprintf(sub, sizeof sub, "%s.self_attn_layer_norm", pre);
        if (!s) s = add_norm(p, D, sub);
        snprintf(sub, sizeof sub, "%s.encoder_attn", pre);
        if (!s) s = add_attn(p, D, sub);
        snprintf(sub, sizeof sub, "%s.encoder_attn_layer_norm", pre);
        if (!s) s = add_norm(p, D, sub);
        snprintf(sub, sizeof sub, "%s.final_layer_norm", pre);
        if (!s) s = add_norm(p, D, sub);
        if (!s) s = add_mlp(p, D, o->dec_ffn, pre);
    }
    if (!s) s = add_norm(p, D, "model.decoder.layer_norm");
    if (!s && o->untied) s = add(p, WEIGHT, 2, o->vocab, D, 0, "proj_out.weight");
    return s;
}

/* ---- values -------------------------------------------------------------------------------- */

static uint64_t mix(uint64_t x) { /* splitmix64 */
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

/* Uniform with standard deviation 1 (sqrt(3) * U(-1, 1)). */
static float unit(uint64_t *st) {
    *st = mix(*st);
    return (float)((double)(*st >> 11) / 9007199254740992.0 * 2.0 - 1.0) * 1.7320508f;
}

/* Row r of tensor t (n values) into out. */
static void row_values(const tensor *t, uint64_t seed, int64_t r, int64_t n, float *out) {
    uint64_t h = seed;
    for (const char *c = t->name; *c; c++)
        h = mix(h ^ (uint64_t)(unsigned char)*c);
    uint64_t st = mix(h ^ (uint64_t)r * 0x632be59bd9b4e019ull);
    const int64_t D = t->shape[1];
    for (int64_t i = 0; i < n; i++) {
        switch (t->k) {
        case LN_W:
            out[i] = 1.0f + 0.1f * unit(&st);
            break;
        case BIAS:
            out[i] = 0.05f * unit(&st);
            break;
        case TOKENS:
            out[i] = 0.1f * unit(&st);
            break;
        case DEC_POS:
            out[i] = 0.3f * unit(&st);
            break;
        case ENC_POS: { /* openai/whisper sinusoids(length, channels): [sin | cos] */
            const int64_t half = D / 2, c = i < half ? i : i - half;
            const double inc = log(10000.0) / (double)(half - 1);
            const double a = (double)r * exp(-inc * (double)c);
            out[i] = (float)(i < half ? sin(a) : cos(a));
            break;
        }
        default:
            out[i] = 0.08f * unit(&st);
            break;
        }
    }
}

static pagoda_status write_config(const pg_gen_whisper_opts *o, const char *dir) {
    char path[4096];
    snprintf(path, sizeof path, "%s/config.json", dir);
    FILE *f = fopen(path, "w");
    if (!f) return pg_error(PAGODA_ERR_IO, "gen_whisper: cannot write %s", path);
    const char *dt = o->dtype == PG_F32 ? "float32" : o->dtype == PG_F16 ? "float16" : "bfloat16";
    fprintf(f,
            "{\n  \"architectures\": [\"WhisperForConditionalGeneration\"],\n"
            "  \"model_type\": \"whisper\",\n  \"activation_function\": \"gelu\",\n"
            "  \"d_model\": %d,\n  \"encoder_layers\": %d,\n  \"decoder_layers\": %d,\n"
            "  \"num_hidden_layers\": %d,\n  \"encoder_attention_heads\": %d,\n"
            "  \"decoder_attention_heads\": %d,\n  \"encoder_ffn_dim\": %d,\n"
            "  \"decoder_ffn_dim\": %d,\n  \"num_mel_bins\": %d,\n  \"max_source_positions\": %d,\n"
            "  \"max_target_positions\": %d,\n  \"vocab_size\": %d,\n"
            "  \"bos_token_id\": 50257,\n  \"eos_token_id\": 50257,\n"
            "  \"decoder_start_token_id\": 50258,\n  \"pad_token_id\": 50257,\n"
            "  \"scale_embedding\": false,\n  \"tie_word_embeddings\": %s,\n"
            "  \"torch_dtype\": \"%s\"\n}\n",
            o->d_model, o->enc_layers, o->dec_layers, o->enc_layers, o->enc_heads, o->dec_heads,
            o->enc_ffn, o->dec_ffn, o->n_mels, o->n_audio_ctx, o->n_text_ctx, o->vocab,
            o->untied ? "false" : "true", dt);
    if (fclose(f) != 0) return pg_error(PAGODA_ERR_IO, "gen_whisper: cannot write %s", path);
    return PAGODA_OK;
}

pagoda_status pg_gen_whisper(const pg_gen_whisper_opts *in, const char *dir) {
    pg_gen_whisper_opts o = *in;
    if (!o.enc_ffn) o.enc_ffn = 4 * o.d_model;
    if (!o.dec_ffn) o.dec_ffn = 4 * o.d_model;
    if (!o.vocab) o.vocab = 51865;
    if (!o.n_audio_ctx) o.n_audio_ctx = 1500;
    if (!o.n_text_ctx) o.n_text_ctx = 448;
    if (o.dtype != PG_F32 && o.dtype != PG_F16) o.dtype = PG_BF16;
    if (o.n_mels < 1 || o.d_model < 2 || o.enc_layers < 1 || o.dec_layers < 1 || o.enc_heads < 1 ||
        o.dec_heads < 1 || o.d_model % o.enc_heads || o.d_model % o.dec_heads || o.d_model % 4)
        return pg_error(PAGODA_ERR_INVALID_ARG, "gen_whisper: bad shape (d_model %d, heads %d/%d)",
                        o.d_model, o.enc_heads, o.dec_heads);
    pagoda_status s = write_config(&o, dir);
    if (s) return s;
    plan p = {0};
    s = make_plan(&o, &p);
    pg_safetensors_writer *wr = NULL;
    if (!s) s = pg_safetensors_writer_create(&wr);
    for (int i = 0; i < p.n && !s; i++)
        s = pg_safetensors_writer_add(wr, p.t[i].name, o.dtype, p.t[i].ndim, p.t[i].shape);
    char path[4096];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    if (!s) s = pg_safetensors_writer_begin(wr, path);
    const size_t es = o.dtype == PG_F32 ? 4 : 2;
    int64_t maxrow = 0;
    for (int i = 0; i < p.n; i++) {
        int64_t n = p.t[i].ndim == 1 ? p.t[i].shape[0] : p.t[i].shape[1];
        if (p.t[i].ndim == 3) n *= p.t[i].shape[2];
        maxrow = n > maxrow ? n : maxrow;
    }
    float *row = malloc((size_t)maxrow * sizeof *row);
    void *buf = malloc((size_t)maxrow * es);
    if (!s && (!row || !buf)) s = pg_error(PAGODA_ERR_NOMEM, "gen_whisper: out of memory");
    for (int i = 0; i < p.n && !s; i++) {
        const tensor *t = &p.t[i];
        const int64_t rows = t->ndim == 1 ? 1 : t->shape[0];
        const int64_t n =
            t->ndim == 1 ? t->shape[0] : t->shape[1] * (t->ndim == 3 ? t->shape[2] : 1);
        for (int64_t r = 0; r < rows && !s; r++) {
            row_values(t, o.seed, r, n, row);
            for (int64_t k = 0; k < n; k++) {
                if (o.dtype == PG_F32)
                    ((float *)buf)[k] = row[k];
                else if (o.dtype == PG_F16)
                    ((uint16_t *)buf)[k] = pg_f32_to_f16(row[k]);
                else
                    ((uint16_t *)buf)[k] = pg_f32_to_bf16(row[k]);
            }
            s = pg_safetensors_writer_write(wr, buf, (size_t)n * es);
        }
    }
    if (!s) s = pg_safetensors_writer_finish(wr);
    pg_safetensors_writer_free(wr);
    free(row);
    free(buf);
    free(p.t);
    return s;
}
