/* The `random` benchmark dataset: see bench_dataset.h (vLLM RandomDataset). */
#include "bench/bench_dataset.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "base/log.h"

void pg_bench_requests_free(pg_bench_request *r, size_t n) {
    if (!r) return;
    for (size_t i = 0; i < n; i++) {
        free(r[i].prompt);
        free(r[i].prompt_ids);
    }
    free(r);
}

/* text[0..n) as valid UTF-8 without NUL: each byte of an invalid or
 * unfinished sequence, and each NUL, becomes U+FFFD. malloc'ed,
 * NUL-terminated; NULL when out of memory. */
static char *utf8_clean(const char *text, size_t n, size_t *out_len) {
    char *out = malloc(3 * n + 1), *o = out;
    if (!out) return NULL;
    for (size_t i = 0; i < n;) {
        utf8proc_int32_t cp;
        utf8proc_ssize_t k =
            utf8proc_iterate((const utf8proc_uint8_t *)text + i, (utf8proc_ssize_t)(n - i), &cp);
        if (k <= 0 || cp == 0) { /* dropped */
            i++;
            continue;
        }
        memcpy(o, text + i, (size_t)k);
        o += k;
        i += (size_t)k;
    }
    *o = 0;
    *out_len = (size_t)(o - out);
    return out;
}

/* Decode `ids` (to valid UTF-8, see utf8_clean), re-encode, adjust to
 * `target` ids and retry, as vLLM's gen_prompt_decode_to_target_len. On
 * success req gets the text and the ids it encodes to (*ids is consumed). */
static pagoda_status fit_prompt(const pg_bench_tokenizer *tok, int32_t *ids, size_t n,
                                size_t target, const int32_t *allowed, size_t n_allowed,
                                pg_bench_rng *rng, pg_bench_request *req) {
    char *text = NULL;
    size_t text_len = 0;
    pagoda_status st = PAGODA_OK;
    for (int tries_left = 10;; tries_left--) {
        free(text);
        text = NULL;
        char *raw = NULL;
        size_t raw_len = 0;
        st = tok->decode(tok->ctx, ids, n, &raw, &raw_len);
        if (st != PAGODA_OK) break;
        text = utf8_clean(raw, raw_len, &text_len);
        free(raw);
        if (!text) {
            st = pg_error(PAGODA_ERR_NOMEM, "bench: no memory for a %zu-byte prompt", raw_len);
            break;
        }
        int32_t *enc = NULL;
        size_t n_enc = 0;
        st = tok->encode(tok->ctx, text, text_len, &enc, &n_enc);
        if (st != PAGODA_OK) break;
        free(ids);
        ids = enc;
        n = n_enc;
        /* vLLM gives up after 10 retries; an empty prompt (which servers
         * reject) gets up to 100 more */
        if (n == target || (tries_left <= 0 && n > 0) || tries_left <= -100) break;
        if (n > target) {
            n = target;
        } else {
            int32_t *g = realloc(ids, target * sizeof *g);
            if (!g) {
                st = pg_error(PAGODA_ERR_NOMEM, "bench: no memory for a %zu-token prompt", target);
                break;
            }
            ids = g;
            for (; n < target; n++)
                ids[n] = allowed[pg_bench_rng_int(rng, 0, (int64_t)n_allowed - 1)];
        }
    }
    if (st != PAGODA_OK) {
        free(ids);
        free(text);
        return st;
    }
    req->prompt = text;
    req->prompt_ids = ids;
    req->prompt_len = (int32_t)n;
    return PAGODA_OK;
}

pagoda_status pg_bench_random_dataset(const pg_bench_random_cfg *cfg, const pg_bench_tokenizer *tok,
                                      size_t n, pg_bench_rng *rng, pg_bench_request **out) {
    *out = NULL;
    if (cfg->input_len < 0 || cfg->output_len < 1 || cfg->prefix_len < 0)
        return pg_error(PAGODA_ERR_INVALID_ARG,
                        "bench: random dataset needs input len >= 0, output len >= 1 and "
                        "prefix len >= 0 (got %d, %d, %d)",
                        cfg->input_len, cfg->output_len, cfg->prefix_len);
    if (!(cfg->range_ratio >= 0.0 && cfg->range_ratio < 1.0))
        return pg_error(PAGODA_ERR_INVALID_ARG, "bench: random range ratio %g is not in [0, 1)",
                        cfg->range_ratio);
    int32_t vocab = tok ? tok->vocab_size : cfg->vocab_size;
    if (vocab <= 0)
        return pg_error(PAGODA_ERR_INVALID_ARG,
                        "bench: vocabulary size %d (need a tokenizer or "
                        "a positive vocab size)",
                        vocab);

    int32_t *allowed = malloc((size_t)vocab * sizeof *allowed);
    pg_bench_request *reqs = calloc(n ? n : 1, sizeof *reqs);
    int32_t *prefix = malloc(((size_t)cfg->prefix_len + 1) * sizeof *prefix);
    pagoda_status st = PAGODA_OK;
    if (!allowed || !reqs || !prefix) {
        st = pg_error(PAGODA_ERR_NOMEM, "bench: no memory for %zu requests", n);
        goto fail;
    }
    size_t n_allowed = 0;
    for (int32_t id = 0; id < vocab; id++)
        if (!tok || !tok->is_special || !tok->is_special(tok->ctx, id)) allowed[n_allowed++] = id;
    if (n_allowed == 0) {
        st = pg_error(PAGODA_ERR_INVALID_ARG, "bench: the vocabulary has only special tokens");
        goto fail;
    }

    double r = cfg->range_ratio;
    /* vLLM: the server adds num_special_tokens_to_add() ids to a text prompt */
    int32_t n_special = tok && tok->num_special_to_add > 0 ? tok->num_special_to_add : 0;
    int32_t real_input = cfg->input_len > n_special ? cfg->input_len - n_special : 0;
    int64_t in_lo = (int64_t)floor(real_input * (1.0 - r));
    int64_t in_hi = (int64_t)ceil(real_input * (1.0 + r));
    if (cfg->prefix_len + in_lo < 1) {
        st = pg_error(PAGODA_ERR_INVALID_ARG,
                      "bench: --random-input-len %d is too small: with %d special token(s) the "
                      "tokenizer adds and --random-range-ratio %g a prompt could have %lld tokens "
                      "of its own (prefix + sampled must be at least 1)",
                      cfg->input_len, n_special, r, (long long)(cfg->prefix_len + in_lo));
        goto fail;
    }
    int64_t out_lo = (int64_t)floor(cfg->output_len * (1.0 - r));
    int64_t out_hi = (int64_t)ceil(cfg->output_len * (1.0 + r));
    if (out_lo < 1) out_lo = 1;
    for (int32_t j = 0; j < cfg->prefix_len; j++)
        prefix[j] = allowed[pg_bench_rng_int(rng, 0, (int64_t)n_allowed - 1)];

    int64_t mismatch = 0;
    for (size_t i = 0; i < n; i++) {
        int64_t in_len = pg_bench_rng_int(rng, in_lo, in_hi);
        reqs[i].output_len = (int32_t)pg_bench_rng_int(rng, out_lo, out_hi);
        int64_t offset = pg_bench_rng_int(rng, 0, (int64_t)vocab - 1);
        size_t total = (size_t)cfg->prefix_len + (size_t)in_len;
        int32_t *ids = malloc((total ? total : 1) * sizeof *ids);
        if (!ids) {
            st = pg_error(PAGODA_ERR_NOMEM, "bench: no memory for a %zu-token prompt", total);
            goto fail;
        }
        memcpy(ids, prefix, (size_t)cfg->prefix_len * sizeof *ids);
        for (int64_t j = 0; j < in_len; j++)
            ids[cfg->prefix_len + j] =
                allowed[(uint64_t)(offset + (int64_t)i + j) % (uint64_t)n_allowed];
        if (tok) {
            st = fit_prompt(tok, ids, total, total, allowed, n_allowed, rng, &reqs[i]);
            if (st != PAGODA_OK) goto fail;
            mismatch += (int64_t)reqs[i].prompt_len - (int64_t)total;
        } else {
            reqs[i].prompt_ids = ids;
            reqs[i].prompt_len = (int32_t)total;
        }
    }
    if (mismatch) /* as vLLM's RandomDataset warns */
        PG_WARN("bench: across all random prompts there were %lld %s tokens than intended after "
                "decoding and re-encoding",
                (long long)llabs(mismatch), mismatch > 0 ? "more" : "fewer");
    free(allowed);
    free(prefix);
    *out = reqs;
    return PAGODA_OK;
fail:
    free(allowed);
    free(prefix);
    pg_bench_requests_free(reqs, n);
    return st;
}

pagoda_status pg_bench_copy_prompts(pg_bench_request *r, size_t n, int32_t repeat_len) {
    if (repeat_len < 0)
        return pg_error(PAGODA_ERR_INVALID_ARG, "bench: copy repeat length %d is negative",
                        repeat_len);
    for (size_t i = 0; i < n; i++)
        if (r[i].prompt)
            return pg_error(PAGODA_ERR_INVALID_ARG,
                            "bench: the copy dataset is made from id prompts, not text");
    for (size_t i = 0; i < n; i++) {
        int32_t *ids = r[i].prompt_ids, len = r[i].prompt_len;
        if (len < 2) continue;
        int32_t rep = repeat_len ? (repeat_len < len - 1 ? repeat_len : len - 1) : len / 2;
        int32_t passage = len - rep;
        for (int32_t k = passage; k < len; k++)
            ids[k] = ids[k - passage];
    }
    return PAGODA_OK;
}
