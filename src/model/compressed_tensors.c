/* compressed-tensors checkpoints (see compressed_tensors.h). Facts from the
 * format's public spec and code (neuralmagic/compressed-tensors:
 * QuantizationArgs, pack_to_int32: values offset by 2^(bits-1), packed
 * along the input dimension, element i of each 32-bit word at bits
 * [bits*i, bits*i + bits)) and vLLM's compressed_tensors loader. */
#include "model/compressed_tensors.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <regex.h>
#include <stdio.h>
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
    for (int i = 0; i < c->n_targets; i++)
        free(c->targets[i]);
    free(c->targets);
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

/* A "re:" pattern regcomp(3) compiles in reasonable time: glibc expands
 * bounded repetitions into copies, so stacked quantifiers multiply (a
 * 26-byte `((a{1,100}){1,100}){1,100}` ran for minutes in regcomp, and the
 * pattern is compiled again for every tensor name). Refused: a quantifier
 * applied to something already quantified (`a**`, `(a+)+`, `(x|b{2,})*`; a
 * single `?` on a group, as in `(\.b+)?`, is allowed), bounds above 255,
 * nesting deeper than 32 groups, patterns longer than 1024 bytes. False with
 * the reason in WHY; the syntax itself is left to regcomp. */
static bool ere_bounded(const char *re, char *why, size_t cap) {
    enum { MAX_DEPTH = 32 };
    size_t len = strlen(re);
    if (len > 1024) {
        snprintf(why, cap, "longer than 1024 bytes");
        return false;
    }
    bool has_q[MAX_DEPTH + 1] = {false}; /* per open group: holds a quantifier */
    int depth = 0;
    int prev = 0; /* what a quantifier would apply to: 0 nothing, 1 an atom, 2 a quantified one */
    for (size_t i = 0; i < len; i++) {
        char c = re[i];
        if (c == '\\') {
            if (re[i + 1]) i++;
            prev = 1;
        } else if (c == '[') { /* a bracket expression: to its closing ']' */
            size_t j = i + 1;
            if (re[j] == '^') j++;
            if (re[j] == ']') j++;
            while (re[j] && re[j] != ']') {
                if (re[j] == '[' && (re[j + 1] == ':' || re[j + 1] == '.' || re[j + 1] == '=')) {
                    const char *e = strstr(re + j + 2, (char[]){re[j + 1], ']', 0});
                    j = e ? (size_t)(e - re) + 2 : len;
                    continue;
                }
                j++;
            }
            i = j < len ? j : len - 1;
            prev = 1;
        } else if (c == '(') {
            if (++depth > MAX_DEPTH) {
                snprintf(why, cap, "groups nested deeper than %d", MAX_DEPTH);
                return false;
            }
            has_q[depth] = false;
            prev = 0;
        } else if (c == ')') {
            bool q = depth > 0 && has_q[depth];
            if (depth > 0) depth--;
            if (q && depth > 0) has_q[depth] = true;
            prev = q ? 2 : 1;
        } else if (c == '|') {
            prev = 0;
        } else if (c == '*' || c == '+' || c == '?' || c == '{') {
            bool repeat = c != '?';
            size_t end = i;
            if (c == '{') {
                long lo = -1, hi = -1;
                char *e;
                lo = strtol(re + i + 1, &e, 10);
                if (e == re + i + 1 || lo < 0) { /* not a bound: regcomp decides */
                    prev = 1;
                    continue;
                }
                hi = lo;
                if (*e == ',') {
                    char *f;
                    hi = strtol(e + 1, &f, 10);
                    if (f == e + 1) hi = -1; /* {m,} */
                    e = f;
                }
                if (*e != '}') {
                    prev = 1;
                    continue;
                }
                end = (size_t)(e - re);
                if (lo > 255 || hi > 255) {
                    snprintf(why, cap, "repetition bound above 255 in '%.*s'", (int)(end - i + 1),
                             re + i);
                    return false;
                }
                repeat = hi != 0 && hi != 1;
            }
            if (prev == 2 && repeat) {
                snprintf(why, cap,
                         "stacked quantifiers at byte %zu (a repetition of something already "
                         "repeated, such as (a+)+ or a{2}{3}: it multiplies the automaton)",
                         i);
                return false;
            }
            if (depth > 0) has_q[depth] = true;
            prev = 2;
            i = end;
        } else {
            prev = 1;
        }
    }
    return true;
}

/* Copy a JSON list of strings (NULL: empty) into *list / *n. */
static pagoda_status str_list(const cJSON *arr, const char *path, const char *what, char ***list,
                              int *n) {
    *list = NULL;
    *n = 0;
    if (!arr) return PAGODA_OK;
    if (!cJSON_IsArray(arr))
        return pg_error(PAGODA_ERR_FORMAT, "%s: quantization_config %s must be a list", path, what);
    int cnt = cJSON_GetArraySize(arr);
    if (!cnt) return PAGODA_OK;
    *list = calloc((size_t)cnt, sizeof(char *));
    if (!*list) return pg_error(PAGODA_ERR_NOMEM, "%s: out of memory", path);
    const cJSON *e;
    cJSON_ArrayForEach(e, arr) {
        if (!cJSON_IsString(e))
            return pg_error(PAGODA_ERR_FORMAT, "%s: quantization_config %s holds a non-string",
                            path, what);
        char why[200];
        if (!strncmp(e->valuestring, "re:", 3) && !ere_bounded(e->valuestring + 3, why, sizeof why))
            return pg_error(PAGODA_ERR_UNSUPPORTED,
                            "%s: quantization_config %s pattern '%.80s%s' refused: %s", path, what,
                            e->valuestring, strlen(e->valuestring) > 80 ? "..." : "", why);
        (*list)[*n] = strdup(e->valuestring);
        if (!(*list)[*n]) return pg_error(PAGODA_ERR_NOMEM, "%s: out of memory", path);
        (*n)++;
    }
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
    /* compared as a double: a cast of 3e118 is undefined (fuzz_hf_config) */
    double bits_d = cJSON_IsNumber(nb) ? nb->valuedouble : 0;
    if (bits_d != 8 && bits_d != 4) {
        st = pg_error(PAGODA_ERR_UNSUPPORTED,
                      "%s: quantization_config weights num_bits %g (need 8 or 4)", path, bits_d);
        goto done;
    }
    int bits = (int)bits_d;
    const char *strategy = str(w, "strategy");
    int64_t group = 0;
    if (strategy && !strcmp(strategy, "group")) {
        const cJSON *gs = item(w, "group_size");
        double gd = cJSON_IsNumber(gs) ? gs->valuedouble : 0;
        if (!(gd >= 32 && gd <= 1073741824.0) || gd != floor(gd) || (int64_t)gd % 32) {
            st = pg_error(PAGODA_ERR_UNSUPPORTED,
                          "%s: quantization_config weights group_size %g (need a multiple of "
                          "32)",
                          path, gd);
            goto done;
        }
        group = (int64_t)gd;
    } else if (!strategy || strcmp(strategy, "channel")) {
        st = pg_error(PAGODA_ERR_UNSUPPORTED,
                      "%s: quantization_config weights strategy '%s' (need channel or group)", path,
                      strategy ? strategy : "(none)");
        goto done;
    }
    const cJSON *ao = item(w, "actorder");
    if ((cJSON_IsString(ao) && !strcmp(ao->valuestring, "group")) || cJSON_IsTrue(ao)) {
        st = pg_error(PAGODA_ERR_UNSUPPORTED,
                      "%s: quantization_config weights actorder 'group' (activation-order group "
                      "index g_idx): not supported",
                      path);
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
    if (fmt && (!strcmp(fmt, "int-quantized") || !strcmp(fmt, "naive-quantized")))
        out->format = PG_CT_INT_QUANTIZED; /* int8 storage (int4 values in [-8, 7] too) */
    else if (fmt && !strcmp(fmt, "pack-quantized"))
        out->format = PG_CT_PACK_QUANTIZED;
    else {
        st = pg_error(PAGODA_ERR_UNSUPPORTED,
                      "%s: quantization_config format '%s' with %d-bit weights (need "
                      "int-quantized / naive-quantized or pack-quantized)",
                      path, fmt ? fmt : "(none)", bits);
        goto done;
    }
    out->bits = bits;
    out->group = group;
    if ((st = str_list(item(qc, "ignore"), path, "ignore", &out->ignore, &out->n_ignore)))
        goto done;
    st = str_list(item(g, "targets"), path, "targets", &out->targets, &out->n_targets);
done:
    cJSON_Delete(root);
    if (st) pg_ct_config_free(out);
    return st;
}

/* `name` matches pattern p: the exact name, or "re:<ERE>" matching from
 * the start (compressed-tensors uses Python's re.match). */
static bool name_matches(const char *p, const char *name) {
    if (strncmp(p, "re:", 3)) return !strcmp(p, name);
    regex_t re;
    if (regcomp(&re, p + 3, REG_EXTENDED)) return false;
    regmatch_t m;
    bool hit = regexec(&re, name, 1, &m, 0) == 0 && m.rm_so == 0;
    regfree(&re);
    return hit;
}

bool pg_ct_ignored(const pg_ct_config *c, const char *name) {
    for (int i = 0; i < c->n_ignore; i++)
        if (name_matches(c->ignore[i], name)) return true;
    return false;
}

bool pg_ct_quantized(const pg_ct_config *c, const char *name) {
    if (!c || c->format == PG_CT_NONE || pg_ct_ignored(c, name)) return false;
    if (!c->n_targets) return true;
    for (int i = 0; i < c->n_targets; i++)
        if (!strcmp(c->targets[i], "Linear") || name_matches(c->targets[i], name)) return true;
    return false;
}

static const char *format_name(const pg_ct_config *c) {
    return c->format == PG_CT_INT_QUANTIZED ? "int-quantized" : "pack-quantized";
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
    if (!shape || (shape->dtype != PG_I64 && shape->dtype != PG_I32) || shape->ndim != 1 ||
        shape->shape[0] != 2)
        return pg_error(PAGODA_ERR_FORMAT,
                        "compressed-tensors: %s: weight_shape must be an int64 (or int32) tensor "
                        "of 2",
                        weight->name);
    if (shape->dtype == PG_I64) {
        int64_t v[2];
        memcpy(v, shape->data, sizeof v);
        *N = v[0];
        *K = v[1];
    } else {
        int32_t v[2];
        memcpy(v, shape->data, sizeof v);
        *N = v[0];
        *K = v[1];
    }
    const int64_t per = 32 / c->bits;
    if (*N != weight->shape[0] || *K < 1 || (*K + per - 1) / per != weight->shape[1])
        return pg_error(PAGODA_ERR_FORMAT,
                        "compressed-tensors: %s: weight_shape [%lld, %lld] does not match the "
                        "packed [%lld, %lld] int32 for %d bits",
                        weight->name, (long long)*N, (long long)*K, (long long)weight->shape[0],
                        (long long)weight->shape[1], c->bits);
    return PAGODA_OK;
}

/* dtypes and shapes of one layer's tensors; *N, *K from them. */
static pagoda_status check_layer(const pg_ct_config *c, const pg_tensor *weight,
                                 const pg_tensor *shape, const pg_tensor *scale, int64_t *N,
                                 int64_t *K) {
    const pg_dtype want = c->format == PG_CT_INT_QUANTIZED ? PG_I8 : PG_I32;
    if (weight && weight->dtype != want)
        return pg_error(PAGODA_ERR_FORMAT, "compressed-tensors: %s: dtype %s (need %s for %s)",
                        weight->name, pg_dtype_name(weight->dtype), pg_dtype_name(want),
                        format_name(c));
    pagoda_status st = pg_ct_layer_shape(c, weight, shape, N, K);
    if (st) return st;
    const int64_t ng = pg_qweight_ngroups(*K, c->group);
    bool ok_shape =
        scale && ((scale->ndim == 2 && scale->shape[0] == *N && scale->shape[1] == ng) ||
                  (scale->ndim == 1 && ng == 1 && scale->shape[0] == *N));
    if (!scale || (scale->dtype != PG_F32 && scale->dtype != PG_F16 && scale->dtype != PG_BF16) ||
        !ok_shape)
        return pg_error(PAGODA_ERR_FORMAT,
                        "compressed-tensors: %s: weight_scale must be F32/F16/BF16 [%lld, %lld]",
                        weight->name, (long long)*N, (long long)ng);
    return PAGODA_OK;
}

pagoda_status pg_ct_find_layer(const pg_ct_config *c, const pg_model_source *src, const char *layer,
                               int64_t N, int64_t K, pg_ct_layer *out) {
    memset(out, 0, sizeof *out);
    char n[512];
    const char *path = pg_model_source_path(src);
    static const char *const UNSUP[][2] = {
        {"weight_zero_point", "asymmetric weights (zero points)"},
        {"weight_g_idx", "activation-order group index (g_idx)"},
    };
    for (size_t i = 0; i < 2; i++) {
        snprintf(n, sizeof n, "%s.%s", layer, UNSUP[i][0]);
        if (pg_model_source_tensor(src, n))
            return pg_error(PAGODA_ERR_UNSUPPORTED, "%s: tensor '%s': %s are not supported", path,
                            n, UNSUP[i][1]);
    }
    const char *wname = c->format == PG_CT_INT_QUANTIZED ? "weight" : "weight_packed";
    snprintf(n, sizeof n, "%s.%s", layer, wname);
    out->weight = pg_model_source_tensor(src, n);
    if (!out->weight)
        return pg_error(PAGODA_ERR_FORMAT,
                        "%s: missing tensor '%s' (compressed-tensors %s, layer not in ignore)",
                        path, n, format_name(c));
    snprintf(n, sizeof n, "%s.weight_scale", layer);
    out->scale = pg_model_source_tensor(src, n);
    if (!out->scale)
        return pg_error(PAGODA_ERR_FORMAT, "%s: missing tensor '%s' (compressed-tensors %s)", path,
                        n, format_name(c));
    if (c->format == PG_CT_PACK_QUANTIZED) {
        snprintf(n, sizeof n, "%s.weight_shape", layer);
        out->shape = pg_model_source_tensor(src, n);
        if (!out->shape)
            return pg_error(PAGODA_ERR_FORMAT,
                            "%s: missing tensor '%s' (compressed-tensors pack-quantized)", path, n);
    }
    pagoda_status st = check_layer(c, out->weight, out->shape, out->scale, &out->N, &out->K);
    if (st) {
        char msg[512];
        snprintf(msg, sizeof msg, "%s", pg_last_error());
        return pg_error(st, "%s: %s", path, msg);
    }
    if (out->N != N || out->K != K)
        return pg_error(PAGODA_ERR_FORMAT,
                        "%s: tensor '%s' holds a [%lld, %lld] weight but the config implies "
                        "[%lld, %lld]",
                        path, out->weight->name, (long long)out->N, (long long)out->K, (long long)N,
                        (long long)K);
    return PAGODA_OK;
}

pagoda_status pg_ct_unpack(const pg_ct_config *c, const pg_tensor *weight, const pg_tensor *shape,
                           const pg_tensor *scale, int8_t *q, float *s, pg_qweight *out) {
    int64_t N, K;
    pagoda_status st = check_layer(c, weight, shape, scale, &N, &K);
    if (st) return st;
    const int64_t ng = pg_qweight_ngroups(K, c->group);
    if (c->format == PG_CT_INT_QUANTIZED) {
        memcpy(q, weight->data, (size_t)(N * K));
        for (int64_t i = 0; c->bits == 4 && i < N * K; i++)
            if (q[i] < -8 || q[i] > 7)
                return pg_error(PAGODA_ERR_FORMAT,
                                "compressed-tensors: %s: value %d at [%lld, %lld] is outside the "
                                "int4 range [-8, 7]",
                                weight->name, q[i], (long long)(i / K), (long long)(i % K));
    } else {
        /* value k of a row: bits [bits * (k % per), +bits) of little-endian
         * word k / per, stored as q + 2^(bits-1) (pack_to_int32) */
        const int per = 32 / c->bits, off = 1 << (c->bits - 1);
        const uint32_t mask = (1u << c->bits) - 1;
        const int64_t words = weight->shape[1];
        const uint8_t *p = weight->data;
        for (int64_t n = 0; n < N; n++)
            for (int64_t w = 0; w < words; w++) {
                const uint8_t *wd = p + (size_t)(n * words + w) * 4;
                uint32_t u = (uint32_t)wd[0] | (uint32_t)wd[1] << 8 | (uint32_t)wd[2] << 16 |
                             (uint32_t)wd[3] << 24;
                for (int j = 0; j < per && w * per + j < K; j++)
                    q[n * K + w * per + j] = (int8_t)((int)((u >> (c->bits * j)) & mask) - off);
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
