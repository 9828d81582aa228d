/* Requests: token storage, incremental block hashing, finish conditions. */
#include "engine/request.h"

#include <stdlib.h>
#include <string.h>

static void hash_new_blocks(pg_request *r) {
    if (!r->hash_blocks) return;
    int32_t bs = r->block_size;
    while ((r->num_block_hashes + 1) * bs <= r->num_tokens) {
        int32_t b = r->num_block_hashes;
        const pg_block_hash *parent = b > 0 ? &r->block_hashes[b - 1] : NULL;
        r->block_hashes[b] =
            pg_block_hash_compute(r->hash_algo, parent, r->tokens + (size_t)b * bs, bs,
                                  b == 0 ? r->salt : NULL, b == 0 ? r->salt_len : 0);
        r->num_block_hashes++;
    }
}

pagoda_status pg_request_create(const pg_request_params *p, int32_t block_size,
                                int32_t max_model_len, const pg_block_hash_algo *hash_algo,
                                pg_request **out) {
    *out = NULL;
    if (!p) return pg_error(PAGODA_ERR_INVALID_ARG, "request: NULL params");
    unsigned long long id = (unsigned long long)p->id;
    if (block_size < 1 || max_model_len < 2)
        return pg_error(PAGODA_ERR_INVALID_ARG, "request %llu: block_size %d, max_model_len %d", id,
                        block_size, max_model_len);
    if (!p->prompt || p->num_prompt_tokens < 1)
        return pg_error(PAGODA_ERR_INVALID_ARG, "request %llu: empty prompt", id);
    if (p->num_prompt_tokens >= max_model_len)
        return pg_error(
            PAGODA_ERR_LIMIT,
            "request %llu: prompt of %d tokens does not fit max_model_len %d (at most %d "
            "prompt tokens, leaving room for one output token)",
            id, p->num_prompt_tokens, max_model_len, max_model_len - 1);
    if (p->max_tokens < 1)
        return pg_error(PAGODA_ERR_INVALID_ARG, "request %llu: max_tokens %d must be >= 1", id,
                        p->max_tokens);
    if (p->min_tokens < 0 || p->min_tokens > p->max_tokens)
        return pg_error(PAGODA_ERR_INVALID_ARG,
                        "request %llu: min_tokens %d must be in 0..max_tokens %d", id,
                        p->min_tokens, p->max_tokens);
    if (p->num_stop_token_ids < 0 || p->num_stop_token_ids > PG_MAX_STOP_TOKENS ||
        (p->num_stop_token_ids > 0 && !p->stop_token_ids))
        return pg_error(PAGODA_ERR_INVALID_ARG, "request %llu: %d stop token ids (at most %d)", id,
                        p->num_stop_token_ids, PG_MAX_STOP_TOKENS);
    for (int32_t i = 0; i < p->num_prompt_tokens; i++)
        if (p->prompt[i] < 0)
            return pg_error(PAGODA_ERR_INVALID_ARG,
                            "request %llu: prompt token %d is negative (%d)", id, i, p->prompt[i]);

    int64_t total = (int64_t)p->num_prompt_tokens + p->max_tokens;
    if (total > max_model_len) total = max_model_len;
    pg_request *r = calloc(1, sizeof *r);
    if (!r) return pg_error(PAGODA_ERR_NOMEM, "request %llu: out of memory", id);
    r->max_total_tokens = (int32_t)total;
    r->tokens = malloc((size_t)total * sizeof *r->tokens);
    r->block_hashes = malloc(((size_t)total / (size_t)block_size + 1) * sizeof *r->block_hashes);
    if (!r->tokens || !r->block_hashes) {
        pg_request_destroy(r);
        return pg_error(PAGODA_ERR_NOMEM, "request %llu: out of memory for %lld tokens", id,
                        (long long)total);
    }
    r->id = p->id;
    r->kv_slot = -1;
    r->state_restore = r->state_snap_decode = -1;
    r->scheduled_step = -1;
    r->status = PG_REQ_WAITING;
    r->stop_token = -1;
    memcpy(r->tokens, p->prompt, (size_t)p->num_prompt_tokens * sizeof *r->tokens);
    r->num_tokens = r->num_prompt_tokens = p->num_prompt_tokens;
    r->block_size = block_size;
    r->hash_blocks = hash_algo != NULL;
    r->hash_algo = hash_algo ? *hash_algo : PG_BLOCK_HASH_SHA256;
    if (p->cache_salt && p->cache_salt_len) {
        r->salt = malloc(p->cache_salt_len);
        if (!r->salt) {
            pg_request_destroy(r);
            return pg_error(PAGODA_ERR_NOMEM, "request %llu: out of memory", id);
        }
        memcpy(r->salt, p->cache_salt, p->cache_salt_len);
        r->salt_len = p->cache_salt_len;
    }
    r->encoder_steps = p->encoder_steps > 0 ? p->encoder_steps : 0;
    r->encoder_done = 0;
    r->encoder_slot = -1;
    r->probe_len = p->probe_len > 0 && p->probe_len <= p->num_prompt_tokens ? p->probe_len : 0;
    r->no_spec = p->no_spec;
    r->max_tokens = p->max_tokens;
    r->min_tokens = p->min_tokens;
    r->eos_token_id = p->eos_token_id;
    r->ignore_eos = p->ignore_eos;
    r->num_stop_token_ids = p->num_stop_token_ids;
    if (p->num_stop_token_ids)
        memcpy(r->stop_token_ids, p->stop_token_ids,
               (size_t)p->num_stop_token_ids * sizeof *r->stop_token_ids);
    hash_new_blocks(r);
    *out = r;
    return PAGODA_OK;
}

void pg_request_destroy(pg_request *r) {
    if (!r) return;
    free(r->tokens);
    free(r->block_hashes);
    free(r->salt);
    free(r);
}

pagoda_status pg_request_append_token(pg_request *r, int32_t token) {
    if (r->num_tokens >= r->max_total_tokens)
        return pg_error(PAGODA_ERR_LIMIT, "request %llu: already holds its maximum of %d tokens",
                        (unsigned long long)r->id, r->max_total_tokens);
    r->tokens[r->num_tokens++] = token;
    hash_new_blocks(r);
    return PAGODA_OK;
}

pg_finish_reason pg_request_check_stop(const pg_request *r) {
    int32_t n_out = pg_request_num_output_tokens(r);
    if (n_out > 0 && n_out >= r->min_tokens) {
        int32_t last = r->tokens[r->num_tokens - 1];
        if (!r->ignore_eos && r->eos_token_id >= 0 && last == r->eos_token_id)
            return PG_FINISH_STOP;
        for (int32_t i = 0; i < r->num_stop_token_ids; i++)
            if (last == r->stop_token_ids[i]) return PG_FINISH_STOP;
    }
    if (n_out >= r->max_tokens || r->num_tokens >= r->max_total_tokens) return PG_FINISH_LENGTH;
    return PG_FINISH_NONE;
}
