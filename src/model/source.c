/* pg_model_source: a HF directory (config.json + safetensors, single or
 * sharded) or a GGUF file, seen through one interface (model/source.h). */
#include "model/source.h"

#include "model/arch.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <xxhash.h>

#include "base/alloc.h"
#include "base/log.h"
#include "model/compressed_tensors.h"
#include "model/gguf.h"
#include "model/hf_config.h"
#include "model/hub.h"
#include "model/mapped_file.h"
#include "model/safetensors.h"

#define MAX_JSON_BYTES (64u << 20)

struct pg_model_source {
    char *path;
    bool is_gguf;
    pg_model_config cfg;
    pg_generation_defaults gen;
    char *chat_template;
    pg_ct_config ct; /* quantization_config (format PG_CT_NONE when dense) */
    pg_gguf *gguf;
    pg_safetensors **shards;
    size_t n_shards;
    pg_tensor *tensors; /* names owned */
    size_t n_tensors;
    void **owned; /* data of tensors an architecture derived (hf_rewrite) */
    size_t n_owned;
    const pg_tensor **by_name;
    char weights_desc[PATH_MAX + 64]; /* file named in weight errors */
    char config_desc[PATH_MAX + 64];  /* file named in config errors */
};

/* ------------------------------------------------------------ resolving */

static bool has_gguf_magic(const char *p) {
    FILE *f = fopen(p, "rb");
    if (!f) return false;
    char m[4] = {0};
    bool ok = fread(m, 1, 4, f) == 4 && !memcmp(m, "GGUF", 4);
    fclose(f);
    return ok;
}

pagoda_status pg_model_resolve(const char *model, char *out, size_t cap, bool *is_gguf) {
    *is_gguf = false;
    if (!model || !*model) return pg_error(PAGODA_ERR_INVALID_ARG, "no model given");
    if (pg_path_is_file(model) || pg_path_is_dir(model)) {
        if (strlen(model) >= cap)
            return pg_error(PAGODA_ERR_INVALID_ARG, "%s: path too long", model);
        snprintf(out, cap, "%s", model);
        *is_gguf = pg_path_is_file(model);
        if (*is_gguf && !has_gguf_magic(model)) {
            size_t n = strlen(model);
            if (n < 5 || strcmp(model + n - 5, ".gguf") != 0)
                return pg_error(PAGODA_ERR_FORMAT, "%s: neither a model directory nor a GGUF file",
                                model);
        }
        return PAGODA_OK;
    }
    pg_hub_ref ref;
    if (model[0] == '/' || model[0] == '.' || !pg_hub_parse_ref(model, &ref))
        return pg_error(PAGODA_ERR_NOT_FOUND, "%s: no such file or directory", model);
    return pg_hub_resolve(&ref, NULL, out, cap, is_gguf);
}

/* ------------------------------------------------------------ tensors */

static pagoda_status add_tensor(pg_model_source *src, size_t *cap, const pg_tensor *t,
                                const char *name) {
    if (src->n_tensors == *cap) {
        size_t nc = *cap ? *cap * 2 : 64;
        pg_tensor *p = realloc(src->tensors, nc * sizeof *p);
        if (!p) return pg_error(PAGODA_ERR_NOMEM, "%s: out of memory", src->path);
        src->tensors = p;
        *cap = nc;
    }
    pg_tensor *d = &src->tensors[src->n_tensors];
    *d = *t;
    d->name = strdup(name);
    if (!d->name) return pg_error(PAGODA_ERR_NOMEM, "%s: out of memory", src->path);
    src->n_tensors++;
    return PAGODA_OK;
}

static int cmp_by_name(const void *a, const void *b) {
    return strcmp((*(const pg_tensor *const *)a)->name, (*(const pg_tensor *const *)b)->name);
}

static pagoda_status build_index(pg_model_source *src) {
    src->by_name = malloc((src->n_tensors ? src->n_tensors : 1) * sizeof(const pg_tensor *));
    if (!src->by_name) return pg_error(PAGODA_ERR_NOMEM, "%s: out of memory", src->path);
    for (size_t i = 0; i < src->n_tensors; i++)
        src->by_name[i] = &src->tensors[i];
    qsort(src->by_name, src->n_tensors, sizeof(const pg_tensor *), cmp_by_name);
    for (size_t i = 1; i < src->n_tensors; i++)
        if (!strcmp(src->by_name[i]->name, src->by_name[i - 1]->name))
            return pg_error(PAGODA_ERR_FORMAT, "%s: tensor '%s' appears twice", src->weights_desc,
                            src->by_name[i]->name);
    return PAGODA_OK;
}

const pg_tensor *pg_model_source_tensor(const pg_model_source *src, const char *name) {
    size_t lo = 0, hi = src->n_tensors;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        int c = strcmp(src->by_name[mid]->name, name);
        if (!c) return src->by_name[mid];
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}

/* Dominant dtype of the 2-D weights, by element count. */
static pg_dtype dominant_dtype(const pg_model_source *src) {
    double count[PG_DTYPE_COUNT] = {0};
    for (size_t i = 0; i < src->n_tensors; i++)
        if (src->tensors[i].ndim == 2)
            count[src->tensors[i].dtype] +=
                (double)src->tensors[i].shape[0] * (double)src->tensors[i].shape[1];
    int best = PG_F32;
    for (int t = 0; t < PG_DTYPE_COUNT; t++)
        if (count[t] > count[best]) best = t;
    return (pg_dtype)best;
}

/* ------------------------------------------------------------ HF */

static pagoda_status read_json(const char *dir, const char *file, bool required, char **buf,
                               size_t *len, char *path, size_t cap) {
    snprintf(path, cap, "%s/%s", dir, file);
    *buf = NULL;
    if (!required && !pg_path_is_file(path)) return PAGODA_OK;
    return pg_read_small_file(path, MAX_JSON_BYTES, buf, len);
}

struct pg_tensor_sink {
    pg_model_source *src;
    size_t *cap;
};

pagoda_status pg_tensor_sink_add(pg_tensor_sink *s, const pg_tensor *t, const char *name) {
    return add_tensor(s->src, s->cap, t, name);
}

void *pg_tensor_sink_alloc(pg_tensor_sink *s, size_t bytes) {
    pg_model_source *src = s->src;
    void **o = realloc(src->owned, (src->n_owned + 1) * sizeof *o);
    if (!o) return NULL;
    src->owned = o;
    void *p = pg_malloc_aligned(bytes ? bytes : 1);
    if (p) src->owned[src->n_owned++] = p;
    return p;
}

const pg_tensor *pg_tensor_sink_find(pg_tensor_sink *s, const char *name) {
    for (size_t k = 0; k < s->src->n_shards; k++) {
        const pg_tensor *t = pg_safetensors_find(s->src->shards[k], name);
        if (t) return t;
    }
    return NULL;
}

static pagoda_status add_shard_tensors(pg_model_source *src, size_t *cap,
                                       const pg_safetensors *st) {
    const pg_arch *a = src->cfg.arch;
    pg_tensor_sink sink = {src, cap};
    for (size_t i = 0; i < pg_safetensors_n_tensors(st); i++) {
        const pg_tensor *t = pg_safetensors_tensor_at(st, i);
        pagoda_status s = PAGODA_OK;
        if (a && a->hf_rewrite && a->hf_rewrite(&src->cfg, src->weights_desc, t, &sink, &s)) {
            if (s) return s;
            continue;
        }
        s = add_tensor(src, cap, t, t->name);
        if (s) return s;
    }
    return PAGODA_OK;
}

static pagoda_status open_sharded(pg_model_source *src, const char *index_path, size_t *cap) {
    char *json;
    size_t len;
    pagoda_status s = pg_read_small_file(index_path, MAX_JSON_BYTES, &json, &len);
    if (s) return s;
    cJSON *root = cJSON_ParseWithLength(json, len);
    free(json);
    const cJSON *wm = cJSON_GetObjectItemCaseSensitive(root, "weight_map");
    if (!cJSON_IsObject(wm)) {
        cJSON_Delete(root);
        return pg_error(PAGODA_ERR_FORMAT, "%s: no 'weight_map' object", index_path);
    }
    size_t n = (size_t)cJSON_GetArraySize(wm);
    src->shards = calloc(n ? n : 1, sizeof(pg_safetensors *));
    const char **shard_names = calloc(n ? n : 1, sizeof(const char *));
    if (!src->shards || !shard_names) {
        free(shard_names);
        cJSON_Delete(root);
        return pg_error(PAGODA_ERR_NOMEM, "%s: out of memory", index_path);
    }
    for (const cJSON *e = wm->child; e && !s; e = e->next) {
        if (!cJSON_IsString(e) || strchr(e->valuestring, '/') || !e->valuestring[0]) {
            s = pg_error(PAGODA_ERR_FORMAT, "%s: weight_map entry '%s' is not a plain file name",
                         index_path, e->string);
            break;
        }
        size_t k = 0;
        while (k < src->n_shards && shard_names[k] && strcmp(shard_names[k], e->valuestring) != 0)
            k++;
        if (k == src->n_shards) {
            char p[PATH_MAX];
            snprintf(p, sizeof p, "%s/%s", src->path, e->valuestring);
            s = pg_safetensors_open(p, &src->shards[k]);
            if (s) break;
            shard_names[k] = e->valuestring;
            src->n_shards++;
        }
        if (!pg_safetensors_find(src->shards[k], e->string))
            s = pg_error(PAGODA_ERR_FORMAT,
                         "%s: weight_map puts '%s' in %s but that file does not hold it",
                         index_path, e->string, e->valuestring);
    }
    for (size_t k = 0; !s && k < src->n_shards; k++)
        s = add_shard_tensors(src, cap, src->shards[k]);
    free(shard_names);
    cJSON_Delete(root);
    return s;
}

static pagoda_status open_hf(pg_model_source *src) {
    char path[PATH_MAX + 64];
    char *json;
    size_t len;
    pagoda_status s = read_json(src->path, "config.json", true, &json, &len, path, sizeof path);
    if (s) return s;
    snprintf(src->config_desc, sizeof src->config_desc, "%s", path);
    s = pg_hf_config_parse(json, len, path, &src->cfg);
    if (!s) s = pg_ct_config_parse(json, len, path, &src->ct);
    free(json);
    if (s) return s;
    s = read_json(src->path, "generation_config.json", false, &json, &len, path, sizeof path);
    if (!s && json) s = pg_hf_generation_parse(json, len, path, &src->gen, &src->cfg);
    free(json);
    if (s) return s;
    s = read_json(src->path, "tokenizer_config.json", false, &json, &len, path, sizeof path);
    if (!s && json) s = pg_hf_chat_template_parse(json, len, path, &src->chat_template);
    free(json);
    if (s) return s;

    size_t cap = 0;
    char index[PATH_MAX + 64];
    snprintf(index, sizeof index, "%s/model.safetensors.index.json", src->path);
    snprintf(path, sizeof path, "%s/model.safetensors", src->path);
    if (pg_path_is_file(index)) {
        snprintf(src->weights_desc, sizeof src->weights_desc, "%s", index);
        s = open_sharded(src, index, &cap);
    } else if (pg_path_is_file(path)) {
        snprintf(src->weights_desc, sizeof src->weights_desc, "%s", path);
        src->shards = calloc(1, sizeof(pg_safetensors *));
        if (!src->shards) return pg_error(PAGODA_ERR_NOMEM, "%s: out of memory", path);
        s = pg_safetensors_open(path, &src->shards[0]);
        if (!s) {
            src->n_shards = 1;
            s = add_shard_tensors(src, &cap, src->shards[0]);
        }
    } else {
        return pg_error(PAGODA_ERR_NOT_FOUND,
                        "%s: no model.safetensors or model.safetensors.index.json", src->path);
    }
    if (s) return s;
    for (size_t i = 0; i < src->n_tensors; i++) {
        pg_dtype t = src->tensors[i].dtype;
        if (t != PG_F32 && t != PG_F16 && t != PG_BF16 && t != PG_I8 && t != PG_U8 && t != PG_I32 &&
            t != PG_I64 && t != PG_MXFP4 /* only from an architecture's hf_rewrite */)
            return pg_error(PAGODA_ERR_UNSUPPORTED, "%s: tensor '%s' has unsupported dtype %s",
                            src->weights_desc, src->tensors[i].name, pg_dtype_name(t));
    }
    return PAGODA_OK;
}

/* ------------------------------------------------------------ GGUF */

static pagoda_status gguf_int(const pg_gguf *g, const char *key, bool required, int64_t def,
                              int64_t lo, int64_t hi, int *out) {
    int64_t v;
    pagoda_status s = required ? pg_gguf_get_int(g, key, &v) : pg_gguf_get_int_or(g, key, def, &v);
    if (s) return s;
    if (v < lo || v > hi)
        return pg_error(PAGODA_ERR_FORMAT, "%s: %s = %lld is out of range [%lld, %lld]",
                        pg_gguf_path(g), key, (long long)v, (long long)lo, (long long)hi);
    *out = (int)v;
    return PAGODA_OK;
}
static pagoda_status gguf_float(const pg_gguf *g, const char *key, double def, float *out) {
    double v;
    pagoda_status s = pg_gguf_get_float_or(g, key, def, &v);
    if (s) return s;
    if (!(fabs(v) <= 3.0e38))
        return pg_error(PAGODA_ERR_FORMAT, "%s: %s is not a finite float", pg_gguf_path(g), key);
    *out = (float)v;
    return PAGODA_OK;
}

static pagoda_status gguf_config(pg_model_source *src) {
    const pg_gguf *g = src->gguf;
    pg_model_config *c = &src->cfg;
    const char *path = src->path;
    const char *arch;
    pagoda_status s = pg_gguf_get_str(g, "general.architecture", &arch, NULL);
    if (s) return s;
    const pg_arch *a = pg_arch_find_gguf(arch);
    if (!a) {
        char list[768];
        return pg_error(PAGODA_ERR_UNSUPPORTED,
                        "%s: GGUF architecture '%.40s' is not supported (supported: %s)", path,
                        arch, pg_model_supported(list, sizeof list));
    }
    c->arch = a;
    snprintf(c->architecture, sizeof c->architecture, "%s", a->hf_architectures[0]);
    /* keys are "<general.architecture>.<name>" */
    char k[160];
#define KEY(name) (snprintf(k, sizeof k, "%s." name, a->gguf_name), k)
    const int64_t BIG = 1 << 30;
    s = gguf_int(g, KEY("embedding_length"), true, 0, 1, 1 << 20, &c->hidden_size);
    if (!s) s = gguf_int(g, KEY("block_count"), true, 0, 1, 1 << 16, &c->num_hidden_layers);
    /* an all-MoE model may have none (qwen35moe): its parse_gguf sets it */
    int64_t ffn_required = pg_gguf_find_key(g, KEY("expert_feed_forward_length")) < 0;
    if (!s)
        s = gguf_int(g, KEY("feed_forward_length"), ffn_required != 0, 0, 0, 1 << 22,
                     &c->intermediate_size);
    if (!s)
        s = gguf_int(g, KEY("attention.head_count"), true, 0, 1, 1 << 16, &c->num_attention_heads);
    if (!s)
        s = gguf_int(g, KEY("attention.head_count_kv"), false, c->num_attention_heads, 1, 1 << 16,
                     &c->num_key_value_heads);
    if (!s && c->num_attention_heads % c->num_key_value_heads)
        s = pg_error(PAGODA_ERR_FORMAT, "%s: head_count %d is not a multiple of head_count_kv %d",
                     path, c->num_attention_heads, c->num_key_value_heads);
    if (!s)
        s = gguf_int(g, KEY("attention.key_length"), false, c->hidden_size / c->num_attention_heads,
                     2, 1 << 16, &c->head_dim);
    int vdim = 0; /* one head size for K and V: a different value_length was ignored */
    if (!s) s = gguf_int(g, KEY("attention.value_length"), false, c->head_dim, 1, 1 << 16, &vdim);
    if (!s && vdim != c->head_dim)
        s = pg_error(PAGODA_ERR_UNSUPPORTED,
                     "%s: %s = %d differs from attention.key_length %d: pagoda needs one "
                     "head size for K and V; fix: re-convert the model (a converter writes both "
                     "as the config's head_dim)",
                     path, k, vdim, c->head_dim);
    int rot = 0;
    if (!s) s = gguf_int(g, KEY("rope.dimension_count"), false, c->head_dim, 0, 1 << 16, &rot);
    if (!s && (rot > c->head_dim || rot % 2 || rot < 2))
        s = pg_error(PAGODA_ERR_FORMAT,
                     "%s: rope.dimension_count %d must be even and in [2, head_dim %d]", path, rot,
                     c->head_dim);
    c->rotary_dim = rot;
    if (!s)
        s = gguf_int(g, KEY("context_length"), false, 2048, 2, BIG, &c->max_position_embeddings);
    if (!s) s = gguf_float(g, KEY("attention.layer_norm_rms_epsilon"), 1e-5, &c->rms_norm_eps);
    if (!s) s = gguf_float(g, KEY("rope.freq_base"), 10000.0, &c->rope_theta);
    if (!s && !(c->rope_theta > 0.0f)) /* was "rope: theta -1 must be > 0", exit code 2 */
        s = pg_error(PAGODA_ERR_FORMAT,
                     "%s: %s = %g must be > 0 (the RoPE base, the config's rope_theta); fix: "
                     "re-convert the model",
                     path, k, (double)c->rope_theta);
    if (s) return s;
    c->rope_interleaved = a->gguf_rope_interleaved; /* llama.cpp permuted Llama's Q/K rows */
    const char *rt = NULL;
    if (pg_gguf_find_key(g, KEY("rope.scaling.type")) >= 0) {
        s = pg_gguf_get_str(g, k, &rt, NULL);
        if (s) return s;
    }
    if (rt && strcmp(rt, "none") != 0) {
        if (!strcmp(rt, "linear"))
            c->rope_scaling = PG_ROPE_SCALING_LINEAR;
        else if (!strcmp(rt, "yarn"))
            c->rope_scaling = PG_ROPE_SCALING_YARN;
        else if (!strcmp(rt, "llama3"))
            c->rope_scaling = PG_ROPE_SCALING_LLAMA3;
        else
            return pg_error(PAGODA_ERR_UNSUPPORTED,
                            "%s: rope scaling type '%.40s' is not supported", path, rt);
        s = gguf_float(g, KEY("rope.scaling.factor"), 1.0, &c->rope_factor);
        if (!s && !(c->rope_factor > 0.0f))
            s = pg_error(PAGODA_ERR_FORMAT,
                         "%s: %s = %g must be > 0 (rope scaling '%s'); fix: re-convert the model",
                         path, k, (double)c->rope_factor, rt);
        if (!s) s = gguf_float(g, KEY("rope.scaling.yarn_beta_fast"), 32.0, &c->rope_beta_fast);
        if (!s) s = gguf_float(g, KEY("rope.scaling.yarn_beta_slow"), 1.0, &c->rope_beta_slow);
        if (!s && !(c->rope_beta_fast > 0.0f && c->rope_beta_slow > 0.0f))
            s = pg_error(PAGODA_ERR_FORMAT,
                         "%s: %s.rope.scaling.yarn_beta_fast %g and yarn_beta_slow %g must be > 0 "
                         "(defaults 32 and 1); fix: re-convert the model",
                         path, a->gguf_name, (double)c->rope_beta_fast, (double)c->rope_beta_slow);
        c->rope_truncate = true; /* llama.cpp's YaRN (an architecture may say otherwise) */
        if (!s)
            s = gguf_int(g, KEY("rope.scaling.original_context_length"), false,
                         c->max_position_embeddings, 1, BIG, &c->rope_original_max_position);
        if (!s)
            s = gguf_float(g, KEY("rope.scaling.low_freq_factor"), 1.0, &c->rope_low_freq_factor);
        if (!s)
            s = gguf_float(g, KEY("rope.scaling.high_freq_factor"), 4.0, &c->rope_high_freq_factor);
        if (s) return s;
    }
#undef KEY
    if (a->parse_gguf && (s = a->parse_gguf(g, c))) return s;
    int64_t v; /* (special-token ids: gguf_special_ids, once the vocabulary is known) */
    /* sampling defaults some converters store */
    double d;
    if (!pg_gguf_get_float(g, "general.sampling.temp", &d)) src->gen.temperature = (float)d;
    if (!pg_gguf_get_float(g, "general.sampling.top_p", &d)) src->gen.top_p = (float)d;
    if (!pg_gguf_get_float(g, "general.sampling.min_p", &d)) src->gen.min_p = (float)d;
    if (!pg_gguf_get_int(g, "general.sampling.top_k", &v) && v >= 0 && v < BIG)
        src->gen.top_k = (int)v;
    pg_clear_error();
    const char *tmpl;
    if (pg_gguf_find_key(g, "tokenizer.chat_template") >= 0 &&
        !pg_gguf_get_str(g, "tokenizer.chat_template", &tmpl, NULL)) {
        src->chat_template = strdup(tmpl);
        if (!src->chat_template) return pg_error(PAGODA_ERR_NOMEM, "%s: out of memory", path);
    }
    return PAGODA_OK;
}

/* The vocabulary against the embedding, then the special-token ids of a
 * GGUF (BOS; EOS, EOT and EOM all end generation) against it. llama.cpp
 * refuses a tokenizer.ggml.tokens whose length differs from token_embd's rows
 * (its tensor shape check) and a special-token key of the wrong type, and
 * warns about an id outside the vocabulary and ignores it: so does pagoda. */
static pagoda_status gguf_special_ids(pg_model_source *src) {
    const pg_gguf *g = src->gguf;
    const char *path = src->path;
    const int n_vocab = src->cfg.vocab_size;
    pg_gguf_array toks;
    if (pg_gguf_find_key(g, "tokenizer.ggml.tokens") >= 0 &&
        !pg_gguf_get_array(g, "tokenizer.ggml.tokens", &toks) && toks.n != (uint64_t)n_vocab)
        return pg_error(PAGODA_ERR_FORMAT,
                        "%s: tokenizer.ggml.tokens has %llu entries but token_embd.weight has %d "
                        "rows (the model's vocabulary): token ids and embedding rows would not "
                        "match (llama.cpp refuses this file too); fix: re-convert with "
                        "convert_hf_to_gguf.py, which pads the token list to the embedding with "
                        "[PAD<id>] entries",
                        path, (unsigned long long)toks.n, n_vocab);
    pg_clear_error();
    static const char *const KEYS[] = {"tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id",
                                       "tokenizer.ggml.eot_token_id",
                                       "tokenizer.ggml.eom_token_id"};
    for (size_t i = 0; i < sizeof KEYS / sizeof KEYS[0]; i++) {
        int64_t at = pg_gguf_find_key(g, KEYS[i]), v;
        if (at < 0) continue;
        if (pg_gguf_get_int(g, KEYS[i], &v))
            return pg_error(PAGODA_ERR_FORMAT,
                            "%s: %s is a %s, but a token id must be an integer (u32, as "
                            "convert_hf_to_gguf.py writes it; llama.cpp refuses this file too); "
                            "fix: rewrite the key as u32, e.g. with gguf-py's gguf_new_metadata.py",
                            path, KEYS[i], pg_gguf_type_name(pg_gguf_kv_type(g, (size_t)at)));
        if (v == -1 || v == UINT32_MAX) continue; /* llama.cpp's LLAMA_TOKEN_NULL: none */
        if (v < 0 || v >= n_vocab) {
            PG_WARN("%s: %s = %lld is outside the vocabulary (%d tokens, ids 0..%d); pagoda "
                    "ignores it (%s; llama.cpp also warns and falls back). Fix: set it to the "
                    "token's id, e.g. with gguf-py's gguf_set_metadata.py",
                    path, KEYS[i], (long long)v, n_vocab, n_vocab - 1,
                    i == 0 ? "no BOS id in the model config" : "one stop id fewer");
            continue;
        }
        if (i == 0)
            src->cfg.bos_token_id = (int)v;
        else
            pg_model_config_add_eos(&src->cfg, (int)v);
    }
    return PAGODA_OK;
}

/* The expert entry of a's table a GGUF name "blk.{layer}.<gguf>" is, or NULL. */
static const pg_arch_tensor *gguf_expert_tensor(const pg_arch *a, const char *name, int *layer) {
    if (strncmp(name, "blk.", 4) != 0) return NULL;
    char *end;
    long l = strtol(name + 4, &end, 10);
    if (end == name + 4 || *end != '.' || l < 0 || l >= 1 << 16) return NULL;
    const pg_arch_tensor *t;
    for (int i = 0; (t = pg_arch_tensor_at(a, i)) != NULL; i++)
        if (t->expert && t->gguf && !strcmp(end + 1, t->gguf)) {
            *layer = (int)l;
            return t;
        }
    return NULL;
}

/* llama.cpp stacks the experts of a layer: ne [d1, d0, experts], i.e.
 * [experts, d0, d1] in PyTorch order, expert e's rows contiguous. Each
 * becomes a view "model.layers.{layer}.mlp.experts.{e}.<hf>" [d0, d1]. */
static pagoda_status split_experts(pg_model_source *src, size_t *cap, const pg_tensor *t,
                                   const pg_arch_tensor *xt, int layer, const char *gname) {
    const int nd = xt->d1 == PG_DIM_NONE ? 2 : 3; /* a per-expert vector or matrix */
    if (t->ndim != nd || t->shape[0] != src->cfg.num_experts || t->shape[0] < 1 ||
        t->nbytes % (size_t)t->shape[0])
        return pg_error(PAGODA_ERR_FORMAT,
                        "%s: tensor '%s' must be %d-D with expert_count (%d) experts first",
                        src->path, gname, nd, src->cfg.num_experts);
    const size_t per = t->nbytes / (size_t)t->shape[0];
    for (int64_t e = 0; e < t->shape[0]; e++) {
        pg_tensor v = *t;
        v.ndim = nd - 1;
        v.shape[0] = t->shape[1];
        v.shape[1] = nd == 3 ? t->shape[2] : 1;
        v.shape[2] = 1;
        v.data = (const uint8_t *)t->data + (size_t)e * per;
        v.nbytes = per;
        char name[512];
        snprintf(name, sizeof name, "model.layers.%d.mlp.experts.%lld.%s", layer, (long long)e,
                 xt->hf);
        pagoda_status s = add_tensor(src, cap, &v, name);
        if (s) return s;
    }
    return PAGODA_OK;
}

static pagoda_status open_gguf(pg_model_source *src) {
    pagoda_status s = pg_gguf_open(src->path, &src->gguf);
    if (s) return s;
    snprintf(src->weights_desc, sizeof src->weights_desc, "%s", src->path);
    snprintf(src->config_desc, sizeof src->config_desc, "%s", src->path);
    s = gguf_config(src);
    if (s) return s;
    size_t cap = 0;
    for (size_t i = 0; i < pg_gguf_n_tensors(src->gguf); i++) {
        const pg_gguf_tensor *gt = pg_gguf_tensor_at(src->gguf, i);
        if (gt->dtype == PG_DTYPE_COUNT)
            return pg_error(PAGODA_ERR_UNSUPPORTED,
                            "%s: tensor '%s' has unsupported tensor type %s (pagoda reads F32, "
                            "F16, BF16, Q8_0, Q4_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL, IQ4_XS, "
                            "MXFP4)",
                            src->path, gt->name, pg_ggml_type_name(gt->ggml_type));
        if (src->cfg.rope_scaling == PG_ROPE_SCALING_LLAMA3 &&
            !strcmp(gt->name, "rope_freqs.weight"))
            continue; /* the config's llama3 parameters already describe it */
        pg_tensor t = {0};
        t.dtype = gt->dtype;
        t.ndim = gt->n_dims;
        for (int d = 0; d < PG_MAX_DIMS; d++)
            t.shape[d] = 1;
        for (int d = 0; d < gt->n_dims; d++)
            t.shape[d] = gt->ne[gt->n_dims - 1 - d];
        t.data = gt->data;
        t.nbytes = gt->nbytes;
        char name[512];
        int layer;
        if (src->cfg.mtp_layers > 0 && !strncmp(gt->name, "blk.", 4) &&
            atol(gt->name + 4) >= src->cfg.num_hidden_layers &&
            atol(gt->name + 4) < src->cfg.num_hidden_layers + src->cfg.mtp_layers) {
            /* llama.cpp's nextn (MTP) blocks follow the model's layers:
             * "mtp." + the canonical name ("mtp.model.layers.4.self_attn.
             * q_proj.weight"; the nextn.* ones as they are) */
            char mapped[480];
            pg_arch_gguf_to_hf(src->cfg.arch, gt->name, mapped, sizeof mapped);
            snprintf(name, sizeof name, "mtp.%s", mapped);
            s = add_tensor(src, &cap, &t, name);
            if (s) return s;
            continue;
        }
        const pg_arch_tensor *xt = gguf_expert_tensor(src->cfg.arch, gt->name, &layer);
        if (xt) { /* [experts, d0, d1] -> one HF view per expert */
            s = split_experts(src, &cap, &t, xt, layer, gt->name);
            if (s) return s;
            continue;
        }
        pg_arch_gguf_to_hf(src->cfg.arch, gt->name, name, sizeof name);
        s = add_tensor(src, &cap, &t, name);
        if (s) return s;
    }
    const pg_gguf_tensor *emb = pg_gguf_find_tensor(src->gguf, "token_embd.weight");
    if (!emb)
        return pg_error(PAGODA_ERR_FORMAT, "%s: missing tensor 'token_embd.weight'", src->path);
    if (emb->n_dims != 2 || emb->ne[1] > INT32_MAX)
        return pg_error(PAGODA_ERR_FORMAT, "%s: token_embd.weight must be 2-D", src->path);
    src->cfg.vocab_size = (int)emb->ne[1];
    src->cfg.tie_word_embeddings = pg_gguf_find_tensor(src->gguf, "output.weight") == NULL;
    return gguf_special_ids(src);
}

/* ------------------------------------------------------------ validation */

static void fmt_shape(char *buf, size_t cap, int ndim, const int64_t *shape) {
    size_t k = (size_t)snprintf(buf, cap, "[");
    for (int i = 0; i < ndim && k < cap; i++)
        k += (size_t)snprintf(buf + k, cap - k, "%s%lld", i ? ", " : "", (long long)shape[i]);
    if (k < cap) snprintf(buf + k, cap - k, "]");
}

/* Expect `name` with shape [d0] (d1 < 0) or [d0, d1]; `why` explains d0/d1. */
static pagoda_status expect(const pg_model_source *src, const char *name, bool required, int64_t d0,
                            int64_t d1, const char *why) {
    const pg_tensor *t = pg_model_source_tensor(src, name);
    if (!t) {
        if (!required) return PAGODA_OK;
        return pg_error(PAGODA_ERR_FORMAT, "%s: missing tensor '%s' (num_hidden_layers %d)",
                        src->weights_desc, name, src->cfg.num_hidden_layers);
    }
    int nd = d1 < 0 ? 1 : 2;
    int64_t want[2] = {d0, d1};
    if (t->ndim != nd || t->shape[0] != d0 || (nd == 2 && t->shape[1] != d1)) {
        char have[96], exp[96];
        fmt_shape(have, sizeof have, t->ndim, t->shape);
        fmt_shape(exp, sizeof exp, nd, want);
        return pg_error(PAGODA_ERR_FORMAT,
                        "%s: tensor '%s' has shape %s but the config implies %s (%s)",
                        src->config_desc, name, have, exp, why);
    }
    return PAGODA_OK;
}

/* A linear weight "X.weight" [d0, d1]: in a compressed-tensors checkpoint a
 * quantized layer holds X.weight (int8) or X.weight_packed + X.weight_shape,
 * and X.weight_scale instead (model/compressed_tensors.h). */
static pagoda_status expect_linear(const pg_model_source *src, const char *name, bool required,
                                   int64_t d0, int64_t d1, const char *why) {
    char layer[256];
    size_t n = strlen(name);
    if (src->ct.format == PG_CT_NONE || n < 7 || n - 7 >= sizeof layer ||
        strcmp(name + n - 7, ".weight"))
        return expect(src, name, required, d0, d1, why);
    memcpy(layer, name, n - 7);
    layer[n - 7] = 0;
    if (!pg_ct_quantized(&src->ct, layer)) return expect(src, name, required, d0, d1, why);
    if (!required) { /* a tied lm_head: quantized only if the file has one */
        char sc[300];
        snprintf(sc, sizeof sc, "%s.weight_scale", layer);
        if (!pg_model_source_tensor(src, sc) && !pg_model_source_tensor(src, name))
            return PAGODA_OK;
    }
    pg_ct_layer l;
    return pg_ct_find_layer(&src->ct, src, layer, d0, d1, &l);
}

/* The layer stack and layer of "<stack prefix>{i}.<rest>": true with *rest
 * set, or false for a global name. */
static bool parse_layer_name(const char *name, pg_layer_stack *stack, long *layer,
                             const char **rest) {
    for (int s = 0; s < PG_STACK_COUNT_; s++) {
        const char *pre = pg_arch_stack_prefix((pg_layer_stack)s);
        size_t n = strlen(pre);
        if (strncmp(name, pre, n) != 0) continue;
        char *end;
        long l = strtol(name + n, &end, 10);
        if (end == name + n || *end != '.') continue;
        *stack = (pg_layer_stack)s;
        *layer = l;
        *rest = end + 1;
        return true;
    }
    return false;
}

/* The table entry a tensor name belongs to: itself, or a compressed-tensors
 * companion of a linear entry ("X.weight_scale", "X.weight_packed", ...).
 * Tensors every loader skips count too (llama.cpp's "rope_freqs.weight",
 * old HF checkpoints' "rotary_emb.inv_freq"); they return a static entry. */
static const pg_arch_tensor *known_tensor(const pg_arch *a, const char *name) {
    static const pg_arch_tensor SKIPPED = {"",    "",    PG_DIM_NONE, PG_DIM_NONE, PG_REQ_OPTIONAL,
                                           false, false, false};
    const char *rest = name;
    pg_layer_stack stack = PG_STACK_MAIN;
    long lnum;
    const bool layer = parse_layer_name(name, &stack, &lnum, &rest);
    if (!strcmp(name, "rope_freqs.weight") ||
        (layer && !strncmp(rest, "self_attn.rotary_emb.", 21)))
        return &SKIPPED;
    const char *in_expert = NULL; /* "mlp.experts.{e}.<rest>": <rest> */
    if (layer && stack == PG_STACK_MAIN && !strncmp(rest, "mlp.experts.", 12)) {
        char *end;
        strtol(rest + 12, &end, 10);
        if (end != rest + 12 && *end == '.') in_expert = end + 1;
    }
    const pg_arch_tensor *t;
    for (int i = 0; (t = pg_arch_tensor_at(a, i)) != NULL; i++) {
        if ((t->layer != 0) != layer || t->expert != (in_expert != NULL)) continue;
        if (layer && pg_arch_tensor_stack(t) != stack) continue;
        if (in_expert) rest = in_expert;
        if (!strcmp(rest, t->hf)) return t;
        size_t n = strlen(t->hf);
        if (t->linear && n > 7 && !strcmp(t->hf + n - 7, ".weight") &&
            !strncmp(rest, t->hf, n - 6) &&
            (!strncmp(rest + n - 6, "weight_", 7) || !strncmp(rest + n - 6, "input_", 6)))
            return t;
    }
    return NULL;
}

/* Whether table entry t belongs in layer l (MoE / dense MLP, linear / full
 * attention kinds); global and unconditional entries always do. */
static bool layer_kind_matches(const pg_model_config *c, const pg_arch_tensor *t, long l) {
    if (!t->layer) return true;
    switch (t->req) {
    case PG_REQ_MOE:
        return pg_model_config_layer_moe(c, (int)l);
    case PG_REQ_MOE_SHARED:
        return pg_model_config_layer_moe(c, (int)l) && c->shared_expert_intermediate_size > 0;
    case PG_REQ_DENSE_MLP:
        return !pg_model_config_layer_moe(c, (int)l);
    case PG_REQ_LINEAR_ATTN:
        return pg_model_config_layer_linear(c, (int)l);
    case PG_REQ_FULL_ATTN:
        return !pg_model_config_layer_linear(c, (int)l);
    default:
        return true;
    }
}

/* Every tensor of the architecture's table: present when required, of the
 * shape the config implies. */
static pagoda_status validate_tensors(const pg_model_source *src) {
    static const char *const DIM_NAMES[PG_DIM_COUNT_] = {
        [PG_DIM_NONE] = "",
        [PG_DIM_VOCAB] = "vocab_size",
        [PG_DIM_HIDDEN] = "hidden_size",
        [PG_DIM_Q] = "num_attention_heads*head_dim",
        [PG_DIM_KV] = "num_key_value_heads*head_dim",
        [PG_DIM_FFN] = "intermediate_size",
        [PG_DIM_HEAD] = "head_dim",
        [PG_DIM_EXPERTS] = "num_experts",
        [PG_DIM_MOE_FFN] = "moe_intermediate_size",
        [PG_DIM_HEADS] = "num_attention_heads",
        [PG_DIM_Q_GATE] = "2*num_attention_heads*head_dim",
        [PG_DIM_LIN_CONV] = "2*linear_num_key_heads*linear_key_head_dim+linear V width",
        [PG_DIM_LIN_V] = "linear_num_value_heads*linear_value_head_dim",
        [PG_DIM_LIN_VHEADS] = "linear_num_value_heads",
        [PG_DIM_LIN_DV] = "linear_value_head_dim",
        [PG_DIM_CONV_K] = "linear_conv_kernel_dim",
        [PG_DIM_SHARED_FFN] = "shared_expert_intermediate_size",
        [PG_DIM_ONE] = "1",
        [PG_DIM_POSITIONS] = "max_position_embeddings",
        [PG_DIM_ENC_FFN] = "encoder_ffn_dim",
        [PG_DIM_SOURCE_POS] = "max_source_positions",
        [PG_DIM_MELS_K3] = "num_mel_bins*3",
        [PG_DIM_HIDDEN_K3] = "hidden_size*3"};
    const pg_model_config *c = &src->cfg;
    pagoda_status s = PAGODA_OK;
    char n[256], why[96];
    /* pass 0: global tensors; pass 1 + s: the layers of stack s */
    for (int pass = 0; pass < 1 + PG_STACK_COUNT_ && !s; pass++) {
        const pg_layer_stack stack = (pg_layer_stack)(pass > 0 ? pass - 1 : 0);
        int layers = pass == 0 ? 1 : pg_arch_stack_layers(c, stack);
        for (int l = 0; l < layers && !s; l++) {
            const pg_arch_tensor *t;
            for (int i = 0; !s && (t = pg_arch_tensor_at(c->arch, i)) != NULL; i++) {
                if ((t->layer != 0) != (pass > 0) || (t->layer && pg_arch_tensor_stack(t) != stack))
                    continue;
                if (!layer_kind_matches(c, t, l))
                    continue; /* not this layer's kind: refused below if present */
                bool req = t->req == PG_REQ_ALWAYS || t->req == PG_REQ_MOE ||
                           t->req == PG_REQ_DENSE_MLP || t->req == PG_REQ_LINEAR_ATTN ||
                           t->req == PG_REQ_FULL_ATTN || t->req == PG_REQ_MOE_SHARED ||
                           (t->req == PG_REQ_IF_BIAS && c->attention_bias) ||
                           (t->req == PG_REQ_UNLESS_TIED && !c->tie_word_embeddings);
                if (t->d1 == PG_DIM_NONE)
                    snprintf(why, sizeof why, "%s", DIM_NAMES[t->d0]);
                else
                    snprintf(why, sizeof why, "%s x %s", DIM_NAMES[t->d0], DIM_NAMES[t->d1]);
                int experts = t->expert ? c->num_experts : 1;
                for (int e = 0; e < experts && !s; e++) {
                    if (t->expert)
                        snprintf(n, sizeof n, "model.layers.%d.mlp.experts.%d.%s", l, e, t->hf);
                    else if (t->layer)
                        snprintf(n, sizeof n, "%s%d.%s", pg_arch_stack_prefix(stack), l, t->hf);
                    else
                        snprintf(n, sizeof n, "%s", t->hf);
                    s = (t->linear ? expect_linear : expect)(src, n, req, pg_arch_dim(c, t->d0),
                                                             pg_arch_dim(c, t->d1), why);
                }
            }
        }
    }
    if (s) return s;
    for (size_t i = 0; i < src->n_tensors; i++) {
        const char *nm = src->tensors[i].name, *rest;
        pg_layer_stack stack;
        long layer;
        if (!parse_layer_name(nm, &stack, &layer, &rest)) continue;
        const int n_layers = pg_arch_stack_layers(c, stack);
        if (layer < 0 || layer >= n_layers)
            return pg_error(PAGODA_ERR_FORMAT, "%s: tensor '%s' is beyond %s %d", src->config_desc,
                            src->tensors[i].name,
                            stack == PG_STACK_ENCODER ? "encoder_layers" : "num_hidden_layers",
                            n_layers);
    }
    /* every tensor belongs to the architecture: weights of another one
     * (Qwen3's q/k norms in a file labelled Llama) would otherwise be
     * silently dropped, a different model (llama.cpp and vLLM refuse too) */
    for (size_t i = 0; i < src->n_tensors; i++) {
        const char *nm = src->tensors[i].name;
        if (c->mtp_layers > 0 && !strncmp(nm, "mtp.", 4))
            continue; /* the multi-token-prediction head: kept, not run (not validated) */
        const pg_arch_tensor *t = known_tensor(c->arch, nm);
        if (!t)
            return pg_error(PAGODA_ERR_FORMAT,
                            "%s: tensor '%s' is not part of the %s architecture (%s): weights "
                            "of another architecture?",
                            src->weights_desc, nm, c->arch->name, c->architecture);
        if (t->req == PG_REQ_IF_BIAS && !c->attention_bias && pg_model_source_tensor(src, nm))
            return pg_error(PAGODA_ERR_FORMAT,
                            "%s: tensor '%s' is present but config attention_bias is false",
                            src->config_desc, nm);
        if (t->expert) {
            const char *x = strstr(nm, ".mlp.experts.");
            long e = x ? strtol(x + 13, NULL, 10) : -1;
            if (e < 0 || e >= c->num_experts)
                return pg_error(PAGODA_ERR_FORMAT, "%s: tensor '%s' is beyond num_experts %d",
                                src->config_desc, nm, c->num_experts);
        }
        if (t->req == PG_REQ_MOE || t->req == PG_REQ_DENSE_MLP || t->req == PG_REQ_MOE_SHARED) {
            long l = strtol(nm + 13, NULL, 10);
            if (!layer_kind_matches(c, t, l))
                return pg_error(PAGODA_ERR_FORMAT,
                                "%s: tensor '%s': layer %ld is %s by the config (num_experts, "
                                "mlp_only_layers, decoder_sparse_step, "
                                "shared_expert_intermediate_size)",
                                src->config_desc, nm, l,
                                t->req == PG_REQ_DENSE_MLP ? "a mixture of experts"
                                : pg_model_config_layer_moe(c, (int)l)
                                    ? "a mixture of experts without a shared expert"
                                    : "a dense MLP layer");
        }
        if (t->req == PG_REQ_LINEAR_ATTN || t->req == PG_REQ_FULL_ATTN) {
            long l = strtol(nm + 13, NULL, 10);
            if (!layer_kind_matches(c, t, l))
                return pg_error(PAGODA_ERR_FORMAT,
                                "%s: tensor '%s': layer %ld is a %s layer by the config "
                                "(layer_types / full_attention_interval)",
                                src->config_desc, nm, l,
                                t->req == PG_REQ_LINEAR_ATTN ? "full-attention"
                                                             : "linear-attention");
        }
    }
    return PAGODA_OK;
}

/* ------------------------------------------------------------ open/free */

pagoda_status pg_model_source_open(const char *model, pg_model_source **out) {
    *out = NULL;
    char path[PATH_MAX];
    bool is_gguf;
    pagoda_status s = pg_model_resolve(model, path, sizeof path, &is_gguf);
    if (s) return s;
    pg_model_source *src = calloc(1, sizeof *src);
    if (!src || !(src->path = strdup(path))) {
        free(src);
        return pg_error(PAGODA_ERR_NOMEM, "%s: out of memory", path);
    }
    src->is_gguf = is_gguf;
    pg_model_config_init(&src->cfg);
    pg_generation_defaults_init(&src->gen);
    s = is_gguf ? open_gguf(src) : open_hf(src);
    if (!s) s = build_index(src);
    if (!s) s = validate_tensors(src);
    if (s) {
        pg_model_source_free(src);
        return s;
    }
    if (src->cfg.torch_dtype == PG_DTYPE_COUNT || is_gguf)
        src->cfg.torch_dtype = dominant_dtype(src);
    PG_DEBUG("%s: %s, %zu tensors, %d layers, hidden %d, vocab %d", path, src->cfg.architecture,
             src->n_tensors, src->cfg.num_hidden_layers, src->cfg.hidden_size, src->cfg.vocab_size);
    *out = src;
    return PAGODA_OK;
}

void pg_model_source_free(pg_model_source *src) {
    if (!src) return;
    for (size_t i = 0; i < src->n_tensors; i++)
        free((char *)src->tensors[i].name);
    free(src->tensors);
    free(src->by_name);
    for (size_t i = 0; i < src->n_owned; i++)
        pg_free(src->owned[i]);
    free(src->owned);
    for (size_t i = 0; i < src->n_shards; i++)
        pg_safetensors_close(src->shards[i]);
    free(src->shards);
    pg_gguf_close(src->gguf);
    free(src->chat_template);
    pg_ct_config_free(&src->ct);
    free(src->path);
    free(src);
}

const pg_model_config *pg_model_source_config(const pg_model_source *src) {
    return &src->cfg;
}
const pg_generation_defaults *pg_model_source_generation(const pg_model_source *src) {
    return &src->gen;
}
size_t pg_model_source_n_tensors(const pg_model_source *src) {
    return src->n_tensors;
}
const pg_tensor *pg_model_source_tensor_at(const pg_model_source *src, size_t i) {
    return i < src->n_tensors ? &src->tensors[i] : NULL;
}
const char *pg_model_source_path(const pg_model_source *src) {
    return src->path;
}
bool pg_model_source_is_gguf(const pg_model_source *src) {
    return src->is_gguf;
}
const char *pg_model_source_chat_template(const pg_model_source *src) {
    return src->chat_template;
}
const struct pg_ct_config *pg_model_source_ct(const pg_model_source *src) {
    return src->ct.format == PG_CT_NONE ? NULL : &src->ct;
}
const struct pg_gguf *pg_model_source_gguf(const pg_model_source *src) {
    return src->gguf;
}

uint64_t pg_model_source_tensor_hash(const pg_model_source *src) {
    XXH3_state_t *h = XXH3_createState();
    if (!h) return 0;
    XXH3_64bits_reset(h);
    size_t n = pg_model_source_n_tensors(src);
    for (size_t i = 0; i < n; i++) {
        const pg_tensor *t = pg_model_source_tensor_at(src, i);
        int64_t meta[3 + PG_MAX_DIMS] = {(int64_t)t->dtype, t->ndim, (int64_t)t->nbytes};
        for (int d = 0; d < t->ndim && d < PG_MAX_DIMS; d++)
            meta[3 + d] = t->shape[d];
        XXH3_64bits_update(h, t->name, strlen(t->name) + 1);
        XXH3_64bits_update(h, meta, sizeof meta);
        if (t->data && t->nbytes) {
            size_t s = t->nbytes < 64 ? t->nbytes : 64;
            XXH3_64bits_update(h, t->data, s);
            XXH3_64bits_update(h, (const char *)t->data + t->nbytes - s, s);
        }
    }
    uint64_t r = XXH3_64bits_digest(h);
    XXH3_freeState(h);
    return r;
}
