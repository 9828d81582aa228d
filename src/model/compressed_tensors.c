/* compressed-tensors checkpoints (see compressed_tensors.h). Facts from the
 * format's public spec and code (neuralmagic/compressed-tensors:
 * QuantizationArgs, pack_to_int32: values offset by 2^(bits-1), packed
 * along the input dimension, element i of each 32-bit word at bits
 * [bits*i, bits*i + bits)) and vLLM's compressed_tensors loader. */
#include "model/compressed_tensors.h"

#include <cjson/cJSON.h>
#include <regex.h>
#include <stdlib.h>
#include <string.h>

#include "base/dtype.h"

static const cJSON *item(const cJSON *o, const char *key) {
    const cJSON *j = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsNull(j) ? NULL : j;
}

static const char *str(const cJSON *o, const char *key) {
    const cJSON *j = item(o, key);
    return cJSON_IsString(j) ? j->valuestring : NULL;
}

static bool truthy(const cJSON *o, const char *key, bool def) {
    const cJSON *j = item(o, key);
    return j ? cJSON_IsTrue(j) : def;
}

void pg_ct_config_free(pg_ct_config *c) {
    if (!c) return;
    for (int i = 0; i < c->n_ignore; i++)
        free(c->ignore[i]);
    free(c->ignore);
    memset(c, 0, sizeof *c);
}

/* Check a QuantizationArgs object is a symmetric int scheme we run. */
static pagoda_status check_args(const cJSON *a, const char *path, const char *what) {
    const char *type = str(a, "type");
    if (type && strcmp(type, "int"))
        return pg_error(PAGODA_ERR_UNSUPPORTED, "%s: quantization_config %s type '%s' (need int)",
                        path, what, type);
    if (!truthy(a, "symmetric", true))
        return pg_error(PAGODA_ERR_UNSUPPORTED,
                        "%s: quantization_config %s are asymmetric (zero points): not supported",
                        path, what);
    return PAGODA_OK;
}

pagoda_status pg_ct_config_parse(const char *json, size_t len, const char *path,
                                 pg_ct_config *out) {
    memset(out, 0, sizeof *out);
    cJSON *root = cJSON_ParseWithLength(json, len);
    if (!root || !cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return pg_error(PAGODA_ERR_FORMAT, "%s: not a valid JSON object", path);
    }
    pagoda_status st = PAGODA_OK;
    const cJSON *qc = item(root, "quantization_config");
    const char *method = qc ? str(qc, "quant_method") : NULL;
    if (!qc || !method || strcmp(method, "compressed-tensors")) goto done;
    const cJSON *groups = item(qc, "config_groups");
    if (!cJSON_IsObject(groups) || cJSON_GetArraySize(groups) < 1) {
        st = pg_error(PAGODA_ERR_FORMAT, "%s: quantization_config has no config_groups", path);
        goto done;
    }
    if (cJSON_GetArraySize(groups) > 1) {
        st = pg_error(PAGODA_ERR_UNSUPPORTED,
                      "%s: quantization_config has %d config_groups (one scheme supported)", path,
                      cJSON_GetArraySize(groups));
        goto done;
    }
    const cJSON *g = groups->child;
    const cJSON *w = item(g, "weights");
    if (!cJSON_IsObject(w)) {
        st = pg_error(PAGODA_ERR_FORMAT, "%s: quantization_config group '%s' has no weights", path,
                      g->string);
        goto done;
    }
    if ((st = check_args(w, path, "weights"))) goto done;
    const cJSON *nb = item(w, "num_bits");
    int bits = cJSON_IsNumber(nb) ? (int)nb->valuedouble : 0;
    if (bits != 8 && bits != 4) {
        st = pg_error(PAGODA_ERR_UNSUPPORTED,
                      "%s: quantization_config weights num_bits %d (need 8 or 4)", path, bits);
        goto done;
    }
    const char *strategy = str(w, "strategy");
    int64_t group = 0;
    if (strategy && !strcmp(strategy, "group")) {
        const cJSON *gs = item(w, "group_size");
        group = cJSON_IsNumber(gs) ? (int64_t)gs->valuedouble : 0;
        if (group < 32 || group % 32) {
            st = pg_error(PAGODA_ERR_UNSUPPORTED,
                          "%s: quantization_config weights group_size %lld (need a multiple of "
                          "32)",
                          path, (long long)group);
            goto done;
        }
    } else if (!strategy || strcmp(strategy, "channel")) {
        st = pg_error(PAGODA_ERR_UNSUPPORTED,
                      "%s: quantization_config weights strategy '%s' (need channel or group)", path,
                      strategy ? strategy : "(none)");
        goto done;
    }
    const cJSON *ia = item(g, "input_activations");
    if (ia) {
        if ((st = check_args(ia, path, "input_activations"))) goto done;
        const char *as = str(ia, "strategy");
        const cJSON *ab = item(ia, "num_bits");
        if (!truthy(ia, "dynamic", false) || !as || strcmp(as, "token") || !cJSON_IsNumber(ab) ||
            (int)ab->valuedouble != 8) {
            st = pg_error(PAGODA_ERR_UNSUPPORTED,
                          "%s: quantization_config input_activations must be dynamic per-token "
                          "int8",
                          path);
            goto done;
        }
        out->act_dynamic = true;
    }
    const char *fmt = str(g, "format");
    if (!fmt) fmt = str(qc, "format");
    if (fmt && !strcmp(fmt, "int-quantized") && bits == 8)
        out->format = PG_CT_INT_QUANTIZED;
    else if (fmt && !strcmp(fmt, "pack-quantized"))
        out->format = PG_CT_PACK_QUANTIZED;
    else {
        st = pg_error(PAGODA_ERR_UNSUPPORTED,
                      "%s: quantization_config format '%s' with %d-bit weights (need "
                      "int-quantized int8 or pack-quantized)",
                      path, fmt ? fmt : "(none)", bits);
        goto done;
    }
    out->bits = bits;
    out->group = group;
    const cJSON *ig = item(qc, "ignore");
    if (ig && !cJSON_IsArray(ig)) {
        st = pg_error(PAGODA_ERR_FORMAT, "%s: quantization_config ignore must be a list", path);
        goto done;
    }
    int n = ig ? cJSON_GetArraySize(ig) : 0;
    out->ignore = n ? calloc((size_t)n, sizeof(char *)) : NULL;
    const cJSON *e;
    cJSON_ArrayForEach(e, ig) {
        if (!cJSON_IsString(e)) {
            st = pg_error(PAGODA_ERR_FORMAT, "%s: quantization_config ignore holds a non-string",
                          path);
            goto done;
        }
        out->ignore[out->n_ignore] = strdup(e->valuestring);
        if (!out->ignore[out->n_ignore]) {
            st = pg_error(PAGODA_ERR_NOMEM, "%s: out of memory", path);
            goto done;
        }
        out->n_ignore++;
    }
done:
    cJSON_Delete(root);
    if (st) pg_ct_config_free(out);
    return st;
}

bool pg_ct_ignored(const pg_ct_config *c, const char *name) {
    for (int i = 0; i < c->n_ignore; i++) {
        const char *p = c->ignore[i];
        if (strncmp(p, "re:", 3)) {
            if (!strcmp(p, name)) return true;
            continue;
        }
        regex_t re;
        if (regcomp(&re, p + 3, REG_EXTENDED)) continue;
        regmatch_t m;
        bool hit = regexec(&re, name, 1, &m, 0) == 0 && m.rm_so == 0;
        regfree(&re);
        if (hit) return true;
    }
    return false;
}

pagoda_status pg_ct_layer_shape(const pg_ct_config *c, const pg_tensor *weight,
                                const pg_tensor *shape, int64_t *N, int64_t *K) {
    if (!weight || weight->ndim != 2)
        return pg_error(PAGODA_ERR_FORMAT, "compressed-tensors: %s: need a 2-D weight",
                        weight ? weight->name : "(missing weight)");
    if (c->format == PG_CT_INT_QUANTIZED) {
        *N = weight->shape[0];
        *K = weight->shape[1];
        return PAGODA_OK;
    }
    if (!shape || shape->dtype != PG_I64 || shape->ndim != 1 || shape->shape[0] != 2)
        return pg_error(PAGODA_ERR_FORMAT,
                        "compressed-tensors: %s: weight_shape must be an int64 tensor of 2",
                        weight->name);
    int64_t v[2];
    memcpy(v, shape->data, sizeof v);
    *N = v[0];
    *K = v[1];
    if (*N != weight->shape[0] || *K < 1 || (*K * c->bits + 31) / 32 != weight->shape[1])
        return pg_error(PAGODA_ERR_FORMAT,
                        "compressed-tensors: %s: weight_shape [%lld, %lld] does not match the "
                        "packed [%lld, %lld] int32 for %d bits",
                        weight->name, (long long)*N, (long long)*K, (long long)weight->shape[0],
                        (long long)weight->shape[1], c->bits);
    return PAGODA_OK;
}

pagoda_status pg_ct_unpack(const pg_ct_config *c, const pg_tensor *weight, const pg_tensor *shape,
                           const pg_tensor *scale, int8_t *q, float *s, pg_qweight *out) {
    int64_t N, K;
    pagoda_status st = pg_ct_layer_shape(c, weight, shape, &N, &K);
    if (st) return st;
    const pg_dtype want = c->format == PG_CT_INT_QUANTIZED ? PG_I8 : PG_I32;
    if (weight->dtype != want)
        return pg_error(PAGODA_ERR_FORMAT, "compressed-tensors: %s: dtype %s (need %s)",
                        weight->name, pg_dtype_name(weight->dtype), pg_dtype_name(want));
    const int64_t ng = pg_qweight_ngroups(K, c->group);
    if (!scale || (scale->dtype != PG_F32 && scale->dtype != PG_F16 && scale->dtype != PG_BF16) ||
        scale->ndim != 2 || scale->shape[0] != N || scale->shape[1] != ng)
        return pg_error(PAGODA_ERR_FORMAT,
                        "compressed-tensors: %s: weight_scale must be F32/F16/BF16 [%lld, %lld]",
                        weight->name, (long long)N, (long long)ng);
    if (c->format == PG_CT_INT_QUANTIZED) {
        memcpy(q, weight->data, (size_t)(N * K));
    } else {
        const int per = 32 / c->bits, mask = (1 << c->bits) - 1, off = 1 << (c->bits - 1);
        const int64_t words = weight->shape[1];
        const uint8_t *p = weight->data;
        for (int64_t n = 0; n < N; n++)
            for (int64_t k = 0; k < K; k++) {
                const uint8_t *wd = p + (size_t)(n * words + k / per) * 4;
                uint32_t u = (uint32_t)wd[0] | (uint32_t)wd[1] << 8 | (uint32_t)wd[2] << 16 |
                             (uint32_t)wd[3] << 24;
                q[n * K + k] = (int8_t)((int)((u >> (c->bits * (k % per))) & (uint32_t)mask) - off);
            }
    }
    for (int64_t i = 0; i < N * ng; i++) {
        if (scale->dtype == PG_F32)
            memcpy(&s[i], (const char *)scale->data + i * 4, 4);
        else {
            uint16_t h;
            memcpy(&h, (const char *)scale->data + i * 2, 2);
            s[i] = scale->dtype == PG_F16 ? pg_f16_to_f32(h) : pg_bf16_to_f32(h);
        }
    }
    *out = (pg_qweight){c->bits, c->group, N, K, q, s, 0};
    return PAGODA_OK;
}
