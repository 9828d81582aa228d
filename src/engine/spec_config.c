/* vLLM's --speculative-config JSON (vllm/config/speculative.py,
 * SpeculativeConfig: method, num_speculative_tokens, prompt_lookup_min /
 * prompt_lookup_max, disable_by_batch_size; draft_model with its "model"
 * path; pagoda's max_batch_tokens and min_draft_gain) ->
 * pagoda_speculative_config. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "base/status.h"
#include "engine/request.h"
#include "pagoda.h"

#define CMD "speculative config"

/* An integer key in [lo, hi] (absent: *out unchanged, *have false). */
static pagoda_status get_int(const cJSON *o, const char *key, int lo, int hi, int32_t *out,
                             bool *have) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (have) *have = false;
    if (!v || cJSON_IsNull(v)) return PAGODA_OK;
    if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble) || v->valuedouble < lo ||
        v->valuedouble > hi)
        return pg_error(PAGODA_ERR_INVALID_ARG, CMD ": \"%s\" must be an integer in [%d, %d]", key,
                        lo, hi);
    *out = (int32_t)v->valuedouble;
    if (have) *have = true;
    return PAGODA_OK;
}

pagoda_status pagoda_speculative_config_parse(const char *json, pagoda_speculative_config *out) {
    memset(out, 0, sizeof *out);
    if (!json) return pg_error(PAGODA_ERR_INVALID_ARG, CMD ": NULL");
    cJSON *o = cJSON_Parse(json);
    if (!o || !cJSON_IsObject(o)) {
        cJSON_Delete(o);
        return pg_error(PAGODA_ERR_INVALID_ARG,
                        CMD ": not a JSON object (e.g. '{\"method\": \"ngram\", "
                            "\"num_speculative_tokens\": 4, \"prompt_lookup_max\": 4}')");
    }
    static const char *const keys[] = {"method",
                                       "model",
                                       "num_speculative_tokens",
                                       "prompt_lookup_min",
                                       "prompt_lookup_max",
                                       "disable_by_batch_size",
                                       "max_batch_tokens",
                                       "min_draft_gain"};
    pagoda_status st = PAGODA_OK;
    for (const cJSON *it = o->child; it && !st; it = it->next) {
        bool known = false;
        for (size_t k = 0; k < sizeof keys / sizeof keys[0]; k++)
            known |= !strcmp(it->string, keys[k]);
        if (!known)
            st = pg_error(PAGODA_ERR_INVALID_ARG,
                          CMD ": unknown key \"%s\" (pagoda knows method, model, "
                              "num_speculative_tokens, prompt_lookup_min, prompt_lookup_max, "
                              "disable_by_batch_size, max_batch_tokens, min_draft_gain)",
                          it->string);
    }
    /* the method: "method"; else vLLM's older "model": "ngram" / "[ngram]";
     * else a "model" path alone means draft_model (vLLM infers it) */
    const cJSON *m = cJSON_GetObjectItemCaseSensitive(o, "method");
    const cJSON *path = cJSON_GetObjectItemCaseSensitive(o, "model");
    if (path && cJSON_IsNull(path)) path = NULL;
    if (!st && path && (!cJSON_IsString(path) || !path->valuestring[0]))
        st = pg_error(PAGODA_ERR_INVALID_ARG, CMD ": \"model\" must be a non-empty string");
    bool path_is_ngram =
        !st && path &&
        (!strcmp(path->valuestring, "ngram") || !strcmp(path->valuestring, "[ngram]"));
    const char *method = NULL;
    if (!st && m && !cJSON_IsNull(m)) {
        if (!cJSON_IsString(m))
            st = pg_error(PAGODA_ERR_INVALID_ARG, CMD ": \"method\" must be a string");
        else
            method = m->valuestring;
    } else if (!st && path) {
        method = path_is_ngram ? "ngram" : "draft_model";
    }
    if (!st && !method)
        st = pg_error(PAGODA_ERR_INVALID_ARG,
                      CMD ": \"method\" is missing (pagoda implements \"ngram\", "
                          "\"draft_model\" and \"mtp\")");
    if (!st && !strcmp(method, "ngram")) {
        out->method = PAGODA_SPEC_NGRAM;
        if (path && !path_is_ngram)
            st = pg_error(PAGODA_ERR_INVALID_ARG,
                          CMD ": method \"ngram\" takes no \"model\" (got \"%.64s\"; a draft "
                              "model is method \"draft_model\")",
                          path->valuestring);
    } else if (!st && !strcmp(method, "draft_model")) {
        out->method = PAGODA_SPEC_DRAFT_MODEL;
        if (!path || path_is_ngram)
            st = pg_error(PAGODA_ERR_INVALID_ARG,
                          CMD ": method \"draft_model\" needs \"model\": the draft model's path");
        else if (strlen(path->valuestring) >= sizeof out->model)
            st = pg_error(PAGODA_ERR_INVALID_ARG, CMD ": \"model\" is longer than %zu bytes",
                          sizeof out->model - 1);
        else
            snprintf(out->model, sizeof out->model, "%s", path->valuestring);
        if (!st && (cJSON_GetObjectItemCaseSensitive(o, "prompt_lookup_min") ||
                    cJSON_GetObjectItemCaseSensitive(o, "prompt_lookup_max")))
            st = pg_error(PAGODA_ERR_INVALID_ARG,
                          CMD ": prompt_lookup_min / prompt_lookup_max are ngram keys, not "
                              "draft_model ones");
    } else if (!st && (!strcmp(method, "mtp") || !strcmp(method, "qwen3_next_mtp") ||
                       !strcmp(method, "qwen3_5_mtp"))) {
        out->method = PAGODA_SPEC_MTP; /* vLLM folds the model-specific names into "mtp" */
        if (path && !path_is_ngram)
            st = pg_error(PAGODA_ERR_INVALID_ARG,
                          CMD ": method \"%s\" takes no \"model\": the MTP head is the "
                              "checkpoint's own",
                          method);
        else if (cJSON_GetObjectItemCaseSensitive(o, "prompt_lookup_min") ||
                 cJSON_GetObjectItemCaseSensitive(o, "prompt_lookup_max"))
            st = pg_error(PAGODA_ERR_INVALID_ARG,
                          CMD ": prompt_lookup_min / prompt_lookup_max are ngram keys, not mtp "
                              "ones");
    } else if (!st) {
        st = pg_error(PAGODA_ERR_INVALID_ARG,
                      CMD ": method \"%.64s\" is not implemented (pagoda implements \"ngram\", "
                          "\"draft_model\" and \"mtp\")",
                      method);
    }
    bool have_k = false, have_min = false, have_max = false;
    if (!st)
        st = get_int(o, "num_speculative_tokens", 1, PG_MAX_SPEC_TOKENS,
                     &out->num_speculative_tokens, &have_k);
    if (!st && !have_k)
        st = pg_error(PAGODA_ERR_INVALID_ARG, CMD ": \"num_speculative_tokens\" is missing");
    if (!st) st = get_int(o, "prompt_lookup_min", 1, 1 << 20, &out->prompt_lookup_min, &have_min);
    if (!st) st = get_int(o, "prompt_lookup_max", 1, 1 << 20, &out->prompt_lookup_max, &have_max);
    if (!st)
        st = get_int(o, "disable_by_batch_size", 1, 1 << 20, &out->disable_by_batch_size, NULL);
    if (!st) st = get_int(o, "max_batch_tokens", 1, 1 << 20, &out->max_batch_tokens, NULL);
    const cJSON *g = cJSON_GetObjectItemCaseSensitive(o, "min_draft_gain");
    if (!st && g && !cJSON_IsNull(g)) { /* 0 turns the adaptive K off: -1 in the struct */
        if (!cJSON_IsNumber(g) || !(g->valuedouble >= 0.0 && g->valuedouble <= 1.0))
            st = pg_error(PAGODA_ERR_INVALID_ARG,
                          CMD ": \"min_draft_gain\" must be a number in [0, 1] (0: off)");
        else
            out->min_draft_gain = g->valuedouble > 0.0 ? (float)g->valuedouble : -1.0f;
    }
    if (!st && out->method == PAGODA_SPEC_NGRAM) { /* vLLM's defaults: each other, else 5 */
        if (!have_min && !have_max) out->prompt_lookup_min = out->prompt_lookup_max = 5;
        if (have_min && !have_max) out->prompt_lookup_max = out->prompt_lookup_min;
        if (!have_min && have_max) out->prompt_lookup_min = out->prompt_lookup_max;
        if (out->prompt_lookup_max < out->prompt_lookup_min)
            st = pg_error(PAGODA_ERR_INVALID_ARG,
                          CMD ": prompt_lookup_max %d is below prompt_lookup_min %d",
                          out->prompt_lookup_max, out->prompt_lookup_min);
    }
    cJSON_Delete(o);
    if (st) memset(out, 0, sizeof *out);
    return st;
}
