/* whisper_ggml: the same Whisper weights for pagoda and whisper.cpp (the speed
 * comparison in docs/PERFORMANCE.md, "Session 8").
 *
 *   whisper_ggml gen PRESET DIR           random HF checkpoint (tools/gen/gen_whisper, BF16)
 *                                         of a published shape into DIR (created if needed)
 *   whisper_ggml convert HF_DIR OUT.bin   whisper.cpp's legacy "ggml" file of the same weights
 *
 * The ggml file (whisper.cpp src/whisper.cpp whisper_model_load: magic, 11
 * int32 hparams, the mel filterbank, the vocabulary, then tensors until EOF,
 * each: n_dims, name length, ggml type, ne[] innermost first, name, data) is
 * written with ftype 1: matrices and conv kernels F16, vectors, conv biases and
 * both position tables F32, as whisper.cpp's own converters write them (an F32
 * file aborts in its conv stem). The BF16 values of a pagoda checkpoint are
 * converted through f32 to F16; the tool counts the values whose F16 is not
 * exact (F16 has 3 more mantissa bits but a narrower exponent: only values
 * below 2^-14 in magnitude can lose bits) and prints the count, so "the same
 * weights" is checked, not assumed. The filterbank is pagoda's Slaney
 * filterbank (pg_mel_filters, equal to openai/whisper's mel_filters.npz); the
 * vocabulary is written empty (whisper.cpp names the missing ids itself):
 * enough to time the model, not to print text.
 * Names map as whisper.cpp's convert-h5-to-ggml.py maps them. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "audio/mel.h"
#include "base/dtype.h"
#include "gen/gen_whisper.h"
#include "model/arch.h"
#include "model/source.h"

static FILE *g_out;
static long long g_inexact, g_values;

static int w_i32(int32_t v) {
    return fwrite(&v, 4, 1, g_out) == 1 ? 0 : -1;
}

static float value(const pg_tensor *t, size_t i) {
    switch (t->dtype) {
    case PG_F32:
        return ((const float *)t->data)[i];
    case PG_F16:
        return pg_f16_to_f32(((const uint16_t *)t->data)[i]);
    default:
        return pg_bf16_to_f32(((const uint16_t *)t->data)[i]);
    }
}

/* HF name -> whisper.cpp name (convert-h5-to-ggml.py's table). */
static void map_name(const char *hf, char *out, size_t cap) {
    static const char *const R[][2] = {
        {"self_attn.q_proj", "attn.query"},
        {"self_attn.k_proj", "attn.key"},
        {"self_attn.v_proj", "attn.value"},
        {"self_attn.out_proj", "attn.out"},
        {"self_attn_layer_norm", "attn_ln"},
        {"encoder_attn.q_proj", "cross_attn.query"},
        {"encoder_attn.k_proj", "cross_attn.key"},
        {"encoder_attn.v_proj", "cross_attn.value"},
        {"encoder_attn.out_proj", "cross_attn.out"},
        {"encoder_attn_layer_norm", "cross_attn_ln"},
        {"fc1", "mlp.0"},
        {"fc2", "mlp.2"},
        {"final_layer_norm", "mlp_ln"},
        {"encoder.layer_norm", "encoder.ln_post"},
        {"decoder.layer_norm", "decoder.ln"},
        {"encoder.embed_positions.weight", "encoder.positional_embedding"},
        {"decoder.embed_positions.weight", "decoder.positional_embedding"},
        {"decoder.embed_tokens", "decoder.token_embedding"},
        {"layers", "blocks"},
    };
    char a[256], b[256];
    snprintf(a, sizeof a, "%s", strncmp(hf, "model.", 6) == 0 ? hf + 6 : hf);
    for (size_t r = 0; r < sizeof R / sizeof R[0]; r++) {
        char *p = strstr(a, R[r][0]);
        if (!p) continue;
        snprintf(b, sizeof b, "%.*s%s%s", (int)(p - a), a, R[r][1], p + strlen(R[r][0]));
        memcpy(a, b, sizeof a);
    }
    snprintf(out, cap, "%s", a);
}

/* One tensor. The source holds the conv kernels k-major, [out][3 * in]
 * (whisper.c hf_rewrite); whisper.cpp wants PyTorch's [out][in][3]. */
static int write_tensor(const pg_tensor *t) {
    char name[256];
    map_name(t->name, name, sizeof name);
    const bool conv_w = strstr(name, "conv") && strstr(name, ".weight");
    const bool conv_b = strstr(name, "conv") && strstr(name, ".bias");
    const bool f32 = t->ndim == 1 || strstr(name, "positional_embedding") != NULL;
    int32_t ne[3], nd;
    size_t n = 1;
    if (conv_w) {
        const int32_t out = (int32_t)t->shape[0], in = (int32_t)(t->shape[1] / 3);
        nd = 3, ne[0] = 3, ne[1] = in, ne[2] = out;
    } else if (conv_b) {
        nd = 2, ne[0] = 1, ne[1] = (int32_t)t->shape[0];
    } else {
        nd = t->ndim;
        for (int i = 0; i < nd; i++)
            ne[i] = (int32_t)t->shape[nd - 1 - i];
    }
    for (int i = 0; i < nd; i++)
        n *= (size_t)ne[i];
    const int32_t len = (int32_t)strlen(name);
    if (w_i32(nd) || w_i32(len) || w_i32(f32 ? 0 : 1)) return -1;
    for (int i = 0; i < nd; i++)
        if (w_i32(ne[i])) return -1;
    if (fwrite(name, 1, (size_t)len, g_out) != (size_t)len) return -1;
    const size_t es = f32 ? 4 : 2;
    unsigned char *buf = malloc(n * es);
    if (!buf) return -1;
    for (size_t i = 0; i < n; i++) {
        size_t s = i;
        if (conv_w) { /* ggml element (k, c, o) = source [o][k * in + c] */
            const size_t k = i % 3, ch = (i / 3) % (size_t)ne[1], o = i / (3 * (size_t)ne[1]);
            s = o * 3 * (size_t)ne[1] + k * (size_t)ne[1] + ch;
        }
        const float v = value(t, s);
        if (f32) {
            memcpy(buf + 4 * i, &v, 4);
        } else {
            const uint16_t h = pg_f32_to_f16(v);
            g_inexact += pg_f16_to_f32(h) != v;
            memcpy(buf + 2 * i, &h, 2);
        }
    }
    if (!f32) g_values += (long long)n;
    const int ok = fwrite(buf, es, n, g_out) == n ? 0 : -1;
    free(buf);
    return ok;
}

static int convert(const char *dir, const char *out) {
    pg_model_source *src;
    if (pg_model_source_open(dir, &src)) {
        fprintf(stderr, "whisper_ggml: %s: %s\n", dir, pg_last_error());
        return 1;
    }
    const pg_model_config *c = pg_model_source_config(src);
    if (!c->arch || strcmp(c->arch->name, "whisper") != 0) {
        fprintf(stderr, "whisper_ggml: %s is not a Whisper checkpoint\n", dir);
        pg_model_source_free(src);
        return 1;
    }
    if (!(g_out = fopen(out, "wb"))) {
        fprintf(stderr, "whisper_ggml: %s: %s\n", out, strerror(errno));
        pg_model_source_free(src);
        return 1;
    }
    const int32_t hp[11] = {c->vocab_size,
                            c->max_source_positions,
                            c->hidden_size,
                            c->encoder_attention_heads,
                            c->encoder_layers,
                            c->max_position_embeddings,
                            c->hidden_size,
                            c->num_attention_heads,
                            c->num_hidden_layers,
                            c->num_mel_bins,
                            1 /* ftype: F16 matrices */};
    int err = w_i32(0x67676d6c);
    for (int i = 0; i < 11 && !err; i++)
        err = w_i32(hp[i]);
    float *filt = malloc((size_t)c->num_mel_bins * 201 * sizeof *filt);
    if (!err && (!filt || pg_mel_filters(c->num_mel_bins, filt))) err = -1;
    if (!err) err = w_i32(c->num_mel_bins) || w_i32(201);
    if (!err && fwrite(filt, 4, (size_t)c->num_mel_bins * 201, g_out) != (size_t)c->num_mel_bins * 201)
        err = -1;
    free(filt);
    if (!err) err = w_i32(0); /* vocabulary: empty (whisper.cpp synthesizes the ids) */
    int written = 0;
    for (size_t i = 0; i < pg_model_source_n_tensors(src) && !err; i++) {
        const pg_tensor *t = pg_model_source_tensor_at(src, i);
        if (strcmp(t->name, "proj_out.weight") == 0) {
            fprintf(stderr, "whisper_ggml: untied proj_out: whisper.cpp has no such tensor\n");
            err = -1;
            break;
        }
        err = write_tensor(t);
        written++;
    }
    if (fclose(g_out) != 0) err = -1;
    pg_model_source_free(src);
    if (err) {
        fprintf(stderr, "whisper_ggml: writing %s failed\n", out);
        return 1;
    }
    printf("%s: %d tensors, %lld values written as F16 of which %lld not exact\n", out, written,
           g_values, g_inexact);
    return 0;
}

int main(int argc, char **argv) {
    if (argc == 4 && strcmp(argv[1], "gen") == 0) {
        pg_gen_whisper_opts o;
        if (pg_gen_whisper_preset(argv[2], &o)) {
            fprintf(stderr, "whisper_ggml: %s\n", pg_last_error());
            return 2;
        }
        if (mkdir(argv[3], 0755) != 0 && errno != EEXIST) {
            fprintf(stderr, "whisper_ggml: %s: %s\n", argv[3], strerror(errno));
            return 1;
        }
        if (pg_gen_whisper(&o, argv[3])) {
            fprintf(stderr, "whisper_ggml: %s\n", pg_last_error());
            return 1;
        }
        return 0;
    }
    if (argc == 4 && strcmp(argv[1], "convert") == 0) return convert(argv[2], argv[3]);
    fprintf(stderr, "usage: whisper_ggml gen PRESET DIR | whisper_ggml convert HF_DIR OUT.bin\n");
    return 2;
}
