#include "model/hf_config.h"

#include "model/arch.h"

#include "base/log.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void pg_model_config_init(pg_model_config *cfg) {
    memset(cfg, 0, sizeof *cfg);
    cfg->rope_theta = 10000.0f;
    cfg->rms_norm_eps = 1e-6f;
    cfg->torch_dtype = PG_DTYPE_COUNT;
    cfg->bos_token_id = -1;
    cfg->decoder_start_token_id = -1;
    for (int i = 0; i < 8; i++)
        cfg->eos_token_ids[i] = -1;
}

void pg_generation_defaults_init(pg_generation_defaults *gen) {
    gen->temperature = gen->top_p = gen->min_p = gen->repetition_penalty = NAN;
    gen->top_k = -1;
    gen->max_new_tokens = -1;
}

void pg_model_config_add_eos(pg_model_config *cfg, int id) {
    if (id < 0) return;
    for (int i = 0; i < 7; i++) {
        if (cfg->eos_token_ids[i] == id) return;
        if (cfg->eos_token_ids[i] < 0) {
            cfg->eos_token_ids[i] = id;
            cfg->eos_token_ids[i + 1] = -1;
            return;
        }
    }
}

static cJSON *parse_obj(const char *json, size_t len, const char *path, pagoda_status *s) {
    cJSON *root = cJSON_ParseWithLength(json, len);
    if (!root || !cJSON_IsObject(root)) {
        cJSON_Delete(root);
        *s = pg_error(PAGODA_ERR_FORMAT, "%s: not a valid JSON object", path);
        return NULL;
    }
    *s = PAGODA_OK;
    return root;
}

static const cJSON *item(const cJSON *o, const char *key) {
    const cJSON *j = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsNull(j) ? NULL : j;
}

/* Integer field: absent/null -> def (or error when required, def == INT_MIN). */
pagoda_status pg_hf_get_int(const cJSON *o, const char *key, const char *path, long long lo,
                            long long hi, bool required, int def, int *out) {
    const cJSON *j = item(o, key);
    if (!j) {
        if (required) return pg_error(PAGODA_ERR_FORMAT, "%s: missing '%s'", path, key);
        *out = def;
        return PAGODA_OK;
    }
    if (!cJSON_IsNumber(j) || floor(j->valuedouble) != j->valuedouble ||
        j->valuedouble < (double)lo || j->valuedouble > (double)hi)
        return pg_error(PAGODA_ERR_FORMAT, "%s: '%s' must be an integer in [%lld, %lld]", path, key,
                        lo, hi);
    *out = (int)j->valuedouble;
    return PAGODA_OK;
}
pagoda_status pg_hf_get_float(const cJSON *o, const char *key, const char *path, bool required,
                              float def, float *out) {
    const cJSON *j = item(o, key);
    if (!j) {
        if (required) return pg_error(PAGODA_ERR_FORMAT, "%s: missing '%s'", path, key);
        *out = def;
        return PAGODA_OK;
    }
    if (!cJSON_IsNumber(j) || !(fabs(j->valuedouble) <= 3.0e38))
        return pg_error(PAGODA_ERR_FORMAT, "%s: '%s' must be a finite number", path, key);
    *out = (float)j->valuedouble;
    return PAGODA_OK;
}
pagoda_status pg_hf_get_bool(const cJSON *o, const char *key, const char *path, bool def,
                             bool *out) {
    const cJSON *j = item(o, key);
    if (!j) {
        *out = def;
        return PAGODA_OK;
    }
    if (!cJSON_IsBool(j))
        return pg_error(PAGODA_ERR_FORMAT, "%s: '%s' must be true or false", path, key);
    *out = cJSON_IsTrue(j);
    return PAGODA_OK;
}
pagoda_status pg_hf_get_layer_types(const cJSON *o, const char *path, int L, const char *marked,
                                    const char *other, uint64_t bits[4], bool *present) {
    *present = false;
    if (L > 256) return pg_error(PAGODA_ERR_UNSUPPORTED, "%s: more than 256 layers (%d)", path, L);
    const cJSON *types = item(o, "layer_types");
    if (!types) return PAGODA_OK;
    if (!cJSON_IsArray(types) || cJSON_GetArraySize(types) != L)
        return pg_error(PAGODA_ERR_FORMAT,
                        "%s: 'layer_types' must be a list of num_hidden_layers (%d) strings", path,
                        L);
    for (int l = 0; l < L; l++) {
        const cJSON *e = cJSON_GetArrayItem(types, l);
        if (cJSON_IsString(e) && !strcmp(e->valuestring, marked))
            bits[l / 64] |= 1ull << (l % 64);
        else if (!cJSON_IsString(e) || strcmp(e->valuestring, other) != 0)
            return pg_error(PAGODA_ERR_FORMAT, "%s: layer_types[%d] must be \"%s\" or \"%s\"", path,
                            l, other, marked);
    }
    *present = true;
    return PAGODA_OK;
}

pagoda_status pg_hf_get_moe(const cJSON *o, const char *path, bool norm_topk_default,
                            pg_model_config *cfg) {
    pagoda_status s = pg_hf_get_int(o, "num_experts", path, 1, 1 << 16, true, 0, &cfg->num_experts);
    if (!s)
        s = pg_hf_get_int(o, "num_experts_per_tok", path, 1, cfg->num_experts, true, 0,
                          &cfg->num_experts_per_tok);
    if (!s)
        s = pg_hf_get_int(o, "moe_intermediate_size", path, 1, 1 << 22, true, 0,
                          &cfg->moe_intermediate_size);
    if (!s) s = pg_hf_get_bool(o, "norm_topk_prob", path, norm_topk_default, &cfg->norm_topk_prob);
    return s;
}

/* A special-token id of config.json / generation_config.json against the
 * vocabulary (vocab_size, the embedding's rows; 0 = not known yet): an id
 * outside it can never be generated or embedded, and transformers / vLLM
 * accept such a file, so it is ignored with a warning naming the key. */
static bool special_id_ok(const char *path, const char *key, double v, const pg_model_config *cfg) {
    /* ids are ints: with the vocabulary not known yet, 3e9 must not reach
     * the (int) conversion (undefined behaviour; found by fuzz_hf_config) */
    if (v >= 0 && v <= INT32_MAX && (cfg->vocab_size <= 0 || v < cfg->vocab_size)) return true;
    PG_WARN("%s: %s %.0f is outside the vocabulary (vocab_size %d, ids 0..%d); pagoda ignores it "
            "(%s). Fix: set it to the token's id (tokenizer_config.json / tokenizer.json name the "
            "special tokens)",
            path, key, v, cfg->vocab_size, cfg->vocab_size - 1,
            strcmp(key, "bos_token_id") ? "one stop token fewer" : "no BOS id from this file");
    return false;
}

static bool is_integer(const cJSON *j) {
    return cJSON_IsNumber(j) && isfinite(j->valuedouble) &&
           j->valuedouble == floor(j->valuedouble) && fabs(j->valuedouble) < 1e15;
}

/* eos_token_id: int or list of ints. */
static pagoda_status get_eos(const cJSON *o, const char *path, pg_model_config *cfg) {
    const cJSON *j = item(o, "eos_token_id");
    if (!j) return PAGODA_OK;
    if (cJSON_IsNumber(j)) {
        if (!is_integer(j))
            return pg_error(PAGODA_ERR_FORMAT,
                            "%s: 'eos_token_id' %g is not an integer token id; fix: the id of the "
                            "end-of-sequence token (or a list of ids)",
                            path, j->valuedouble);
        if (special_id_ok(path, "eos_token_id", j->valuedouble, cfg))
            pg_model_config_add_eos(cfg, (int)j->valuedouble);
        return PAGODA_OK;
    }
    if (!cJSON_IsArray(j))
        return pg_error(PAGODA_ERR_FORMAT, "%s: 'eos_token_id' must be an int or a list", path);
    const cJSON *e;
    cJSON_ArrayForEach(e, j) {
        if (!is_integer(e))
            return pg_error(PAGODA_ERR_FORMAT, "%s: 'eos_token_id' list holds a non-integer", path);
        if (special_id_ok(path, "eos_token_id", e->valuedouble, cfg))
            pg_model_config_add_eos(cfg, (int)e->valuedouble);
    }
    return PAGODA_OK;
}

static pagoda_status parse_rope_scaling(const cJSON *root, const char *path, pg_model_config *cfg) {
    /* transformers >= 5 writes "rope_parameters" (with rope_theta inside) */
    const cJSON *rs = item(root, "rope_scaling");
    if (!rs) rs = item(root, "rope_parameters");
    cfg->rope_scaling = PG_ROPE_SCALING_NONE;
    if (!rs) return PAGODA_OK;
    if (!cJSON_IsObject(rs))
        return pg_error(PAGODA_ERR_FORMAT, "%s: 'rope_scaling' must be an object or null", path);
    const cJSON *t = item(rs, "rope_type");
    if (!t) t = item(rs, "type");
    if (!cJSON_IsString(t))
        return pg_error(PAGODA_ERR_FORMAT, "%s: rope_scaling has no 'rope_type'", path);
    const char *ty = t->valuestring;
    pagoda_status s = PAGODA_OK;
    if (!strcmp(ty, "default")) return PAGODA_OK;
    if (!strcmp(ty, "llama3")) {
        cfg->rope_scaling = PG_ROPE_SCALING_LLAMA3;
        if (!s) s = pg_hf_get_float(rs, "factor", path, true, 0, &cfg->rope_factor);
        if (!s)
            s = pg_hf_get_float(rs, "low_freq_factor", path, true, 0, &cfg->rope_low_freq_factor);
        if (!s)
            s = pg_hf_get_float(rs, "high_freq_factor", path, true, 0, &cfg->rope_high_freq_factor);
        if (!s)
            s = pg_hf_get_int(rs, "original_max_position_embeddings", path, 1, 1 << 30, true, 0,
                              &cfg->rope_original_max_position);
        if (!s && !(cfg->rope_high_freq_factor > cfg->rope_low_freq_factor))
            s = pg_error(PAGODA_ERR_FORMAT,
                         "%s: rope_scaling high_freq_factor must exceed low_freq_factor", path);
    } else if (!strcmp(ty, "linear")) {
        cfg->rope_scaling = PG_ROPE_SCALING_LINEAR;
        s = pg_hf_get_float(rs, "factor", path, true, 0, &cfg->rope_factor);
    } else if (!strcmp(ty, "yarn")) {
        cfg->rope_scaling = PG_ROPE_SCALING_YARN;
        s = pg_hf_get_float(rs, "factor", path, true, 0, &cfg->rope_factor);
        if (!s)
            s = pg_hf_get_int(rs, "original_max_position_embeddings", path, 1, 1 << 30, false,
                              cfg->max_position_embeddings, &cfg->rope_original_max_position);
        if (!s) s = pg_hf_get_float(rs, "beta_fast", path, false, 32.0f, &cfg->rope_beta_fast);
        if (!s) s = pg_hf_get_float(rs, "beta_slow", path, false, 1.0f, &cfg->rope_beta_slow);
        /* <= 0 was replaced by the default at RoPE set-up, silently (transformers
         * fails: log of a non-positive number of rotations) */
        if (!s && !(cfg->rope_beta_fast > 0.0f && cfg->rope_beta_slow > 0.0f))
            s = pg_error(PAGODA_ERR_FORMAT,
                         "%s: rope_scaling yarn beta_fast %g and beta_slow %g must be > 0 "
                         "(defaults 32 and 1)",
                         path, (double)cfg->rope_beta_fast, (double)cfg->rope_beta_slow);
        if (!s) s = pg_hf_get_bool(rs, "truncate", path, true, &cfg->rope_truncate);
        if (!s)
            s = pg_hf_get_float(rs, "attention_factor", path, false, 0.0f,
                                &cfg->rope_attention_factor);
        if (!s && cfg->rope_factor > 0 && cfg->rope_factor < 1)
            s = pg_error(PAGODA_ERR_FORMAT,
                         "%s: rope_scaling yarn factor %g must be >= 1 (YaRN extends the "
                         "context; transformers refuses smaller factors too)",
                         path, (double)cfg->rope_factor);
        if (!s && (item(rs, "mscale") || item(rs, "mscale_all_dim")))
            s = pg_error(PAGODA_ERR_UNSUPPORTED,
                         "%s: rope_scaling yarn with mscale / mscale_all_dim is not supported",
                         path);
    } else {
        return pg_error(PAGODA_ERR_UNSUPPORTED, "%s: rope_scaling type '%.40s' is not supported",
                        path, ty);
    }
    if (!s && !(cfg->rope_factor > 0))
        s = pg_error(PAGODA_ERR_FORMAT, "%s: rope_scaling factor must be positive", path);
    return s;
}

static pg_dtype parse_torch_dtype(const char *s) {
    if (!strcmp(s, "float32")) return PG_F32;
    if (!strcmp(s, "float16")) return PG_F16;
    if (!strcmp(s, "bfloat16")) return PG_BF16;
    return PG_DTYPE_COUNT;
}

/* The key architecture a's config.json uses for the common field `key`
 * (pg_arch.hf_attribute_map, as transformers' attribute_map). */
static const char *attr(const pg_arch *a, const char *key) {
    for (int i = 0; a->hf_attribute_map && a->hf_attribute_map[i][0]; i++)
        if (!strcmp(a->hf_attribute_map[i][0], key)) return a->hf_attribute_map[i][1];
    return key;
}

pagoda_status pg_hf_config_parse(const char *json, size_t len, const char *path,
                                 pg_model_config *cfg) {
    pagoda_status s;
    cJSON *root = parse_obj(json, len, path, &s);
    if (!root) return s;
    pg_model_config_init(cfg);
    const cJSON *archs = item(root, "architectures");
    const cJSON *mt = item(root, "model_type");
    const char *arch = NULL;
    const pg_arch *a = NULL;
    if (cJSON_IsArray(archs) && cJSON_IsString(cJSON_GetArrayItem(archs, 0))) {
        /* the first entry pagoda runs, as vLLM picks it */
        arch = cJSON_GetArrayItem(archs, 0)->valuestring;
        const cJSON *e;
        cJSON_ArrayForEach(e, archs) {
            if (cJSON_IsString(e) && (a = pg_arch_find_hf(e->valuestring, NULL)) != NULL) {
                arch = e->valuestring;
                break;
            }
        }
    } else if (cJSON_IsString(mt) && (a = pg_arch_find_hf(NULL, mt->valuestring)) != NULL) {
        /* model_type i names hf_architectures[i] */
        for (int i = 0; a->hf_model_types[i]; i++)
            if (!strcmp(a->hf_model_types[i], mt->valuestring) && a->hf_architectures[i])
                arch = a->hf_architectures[i];
        if (!arch) arch = a->hf_architectures[0];
    }
    if (!arch) {
        cJSON_Delete(root);
        return pg_error(PAGODA_ERR_FORMAT, "%s: no 'architectures' (or known model_type)", path);
    }
    if (!a) {
        char list[768];
        s = pg_error(PAGODA_ERR_UNSUPPORTED,
                     "%s: architecture '%.60s' is not supported (supported: %s)", path, arch,
                     pg_model_supported(list, sizeof list));
        cJSON_Delete(root);
        return s;
    }
    cfg->arch = a;
    /* multimodal checkpoints (Qwen3.5's *ForConditionalGeneration) nest the
     * language model's fields in "text_config"; the text model is what runs */
    const cJSON *tc = item(root, "text_config");
    const cJSON *R = cJSON_IsObject(tc) && !item(root, "hidden_size") ? tc : root;
    snprintf(cfg->architecture, sizeof cfg->architecture, "%s", arch);
    const int BIG = 1 << 30;
    s = pg_hf_get_int(R, attr(a, "vocab_size"), path, 1, BIG, true, 0, &cfg->vocab_size);
    if (!s)
        s = pg_hf_get_int(R, attr(a, "hidden_size"), path, 1, 1 << 20, true, 0, &cfg->hidden_size);
    /* an MoE config whose every layer is MoE may omit it (Qwen3.5-MoE): the
     * architecture's parse_hf then sets it */
    if (!s)
        s = pg_hf_get_int(R, attr(a, "intermediate_size"), path, 1, 1 << 22,
                          !item(R, "moe_intermediate_size"), 0, &cfg->intermediate_size);
    if (!s)
        s = pg_hf_get_int(R, attr(a, "num_hidden_layers"), path, 1, 1 << 16, true, 0,
                          &cfg->num_hidden_layers);
    if (!s)
        s = pg_hf_get_int(R, attr(a, "num_attention_heads"), path, 1, 1 << 16, true, 0,
                          &cfg->num_attention_heads);
    if (!s)
        s = pg_hf_get_int(R, attr(a, "num_key_value_heads"), path, 1, 1 << 16, false,
                          cfg->num_attention_heads, &cfg->num_key_value_heads);
    if (!s && cfg->num_attention_heads % cfg->num_key_value_heads)
        s = pg_error(PAGODA_ERR_FORMAT,
                     "%s: num_attention_heads %d is not a multiple of num_key_value_heads %d", path,
                     cfg->num_attention_heads, cfg->num_key_value_heads);
    if (!s && !item(R, attr(a, "head_dim")) && cfg->hidden_size % cfg->num_attention_heads)
        s = pg_error(PAGODA_ERR_FORMAT,
                     "%s: hidden_size %d is not a multiple of num_attention_heads %d", path,
                     cfg->hidden_size, cfg->num_attention_heads);
    if (!s)
        s = pg_hf_get_int(R, attr(a, "head_dim"), path, 1, 1 << 16, false,
                          cfg->hidden_size / cfg->num_attention_heads, &cfg->head_dim);
    if (!s && cfg->head_dim % 2)
        s = pg_error(PAGODA_ERR_FORMAT, "%s: head_dim %d must be even for RoPE", path,
                     cfg->head_dim);
    if (!s) /* >= 2: a prompt token and a new one (1 failed later as a scheduler usage error) */
        s = pg_hf_get_int(R, attr(a, "max_position_embeddings"), path, 2, BIG, false, 2048,
                          &cfg->max_position_embeddings);
    if (!s) s = pg_hf_get_float(R, "rms_norm_eps", path, false, 1e-6f, &cfg->rms_norm_eps);
    const cJSON *rp = item(R, "rope_parameters");
    if (!s)
        s = pg_hf_get_float(cJSON_IsObject(rp) && item(rp, "rope_theta") ? rp : root, "rope_theta",
                            path, false, 10000.0f, &cfg->rope_theta);
    if (!s && !(cfg->rms_norm_eps >= 0 && cfg->rope_theta > 0))
        s = pg_error(PAGODA_ERR_FORMAT, "%s: rms_norm_eps must be >= 0 and rope_theta > 0", path);
    if (!s)
        s = pg_hf_get_bool(item(R, "tie_word_embeddings") ? R : root, "tie_word_embeddings", path,
                           false, &cfg->tie_word_embeddings);
    if (!s) s = pg_hf_get_bool(R, "attention_bias", path, false, &cfg->attention_bias);
    if (!s) s = pg_hf_get_int(R, "sliding_window", path, 0, BIG, false, 0, &cfg->sliding_window);
    if (!s) s = pg_hf_get_int(R, "bos_token_id", path, 0, BIG, false, -1, &cfg->bos_token_id);
    if (!s && cfg->bos_token_id >= 0 &&
        !special_id_ok(path, "bos_token_id", cfg->bos_token_id, cfg))
        cfg->bos_token_id = -1;
    if (!s) s = get_eos(R, path, cfg);
    if (!s) s = parse_rope_scaling(R, path, cfg);
    /* partial RoPE: partial_rotary_factor at the top or in rope_parameters */
    float prf = 1.0f;
    if (!s)
        s = pg_hf_get_float(cJSON_IsObject(rp) && item(rp, "partial_rotary_factor") ? rp : R,
                            "partial_rotary_factor", path, false, 1.0f, &prf);
    const cJSON *act = item(R, "hidden_act");
    if (!s && cJSON_IsString(act))
        snprintf(cfg->hidden_act, sizeof cfg->hidden_act, "%s", act->valuestring);
    if (!s) {
        const cJSON *td = item(R, "torch_dtype");
        if (!td) td = item(R, "dtype");
        if (cJSON_IsString(td)) cfg->torch_dtype = parse_torch_dtype(td->valuestring);
    }
    cfg->rope_interleaved = false; /* HF checkpoints: rotate_half layout */
    if (!s && a->parse_hf) s = a->parse_hf(R, path, cfg);
    if (!s) { /* after parse_hf: it may set head_dim */
        int rot = (int)((double)cfg->head_dim * prf);
        if (!(prf > 0.0f && prf <= 1.0f) || rot < 2 || rot % 2)
            s = pg_error(PAGODA_ERR_FORMAT,
                         "%s: partial_rotary_factor %g must give an even rotary dim in [2, "
                         "head_dim %d]",
                         path, (double)prf, cfg->head_dim);
        cfg->rotary_dim = rot;
    }
    cJSON_Delete(root);
    return s;
}

pagoda_status pg_hf_generation_parse(const char *json, size_t len, const char *path,
                                     pg_generation_defaults *gen, pg_model_config *cfg) {
    pagoda_status s;
    cJSON *root = parse_obj(json, len, path, &s);
    if (!root) return s;
    pg_generation_defaults_init(gen);
    s = pg_hf_get_float(root, "temperature", path, false, NAN, &gen->temperature);
    if (!s) s = pg_hf_get_float(root, "top_p", path, false, NAN, &gen->top_p);
    if (!s) s = pg_hf_get_float(root, "min_p", path, false, NAN, &gen->min_p);
    if (!s)
        s = pg_hf_get_float(root, "repetition_penalty", path, false, NAN, &gen->repetition_penalty);
    if (!s) s = pg_hf_get_int(root, "top_k", path, 0, 1 << 30, false, -1, &gen->top_k);
    if (!s)
        s = pg_hf_get_int(root, "max_new_tokens", path, 0, 1 << 30, false, -1,
                          &gen->max_new_tokens);
    if (!s) s = get_eos(root, path, cfg);
    if (!s && cfg->bos_token_id < 0)
        s = pg_hf_get_int(root, "bos_token_id", path, 0, 1 << 30, false, -1, &cfg->bos_token_id);
    if (!s && cfg->bos_token_id >= 0 &&
        !special_id_ok(path, "bos_token_id", cfg->bos_token_id, cfg))
        cfg->bos_token_id = -1;
    cJSON_Delete(root);
    return s;
}

pagoda_status pg_hf_chat_template_parse(const char *json, size_t len, const char *path,
                                        char **out) {
    *out = NULL;
    pagoda_status s;
    cJSON *root = parse_obj(json, len, path, &s);
    if (!root) return s;
    const cJSON *ct = item(root, "chat_template");
    const char *tmpl = NULL;
    if (cJSON_IsString(ct)) {
        tmpl = ct->valuestring;
    } else if (cJSON_IsArray(ct)) {
        const cJSON *e;
        cJSON_ArrayForEach(e, ct) {
            const cJSON *n = item(e, "name"), *t = item(e, "template");
            if (!cJSON_IsString(t)) continue;
            if (!tmpl) tmpl = t->valuestring; /* first as fallback */
            if (cJSON_IsString(n) && !strcmp(n->valuestring, "default")) {
                tmpl = t->valuestring;
                break;
            }
        }
    } else if (ct) {
        s = pg_error(PAGODA_ERR_FORMAT, "%s: 'chat_template' must be a string or a list", path);
    }
    if (!s && tmpl) {
        *out = strdup(tmpl);
        if (!*out) s = pg_error(PAGODA_ERR_NOMEM, "%s: out of memory", path);
    }
    cJSON_Delete(root);
    return s;
}
